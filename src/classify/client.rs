//! The client of a request: the first product of its User-Agent (`kubelet/v1.29.4 (linux/amd64) ...`).

use std::fmt;

/// A client component and its version, as client-go writes them into the User-Agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Client<'a> {
    /// The component (`kubelet`, `kubectl`, `kube-controller-manager`); empty when unknown.
    pub name: &'a str,
    /// The component's version, when the User-Agent carries one that parses.
    pub version: Option<ClientVersion>,
}

impl<'a> Client<'a> {
    /// Reads the client from a User-Agent header. A missing or odd User-Agent is an unknown client,
    /// never an error.
    pub fn from_user_agent(user_agent: Option<&'a str>) -> Client<'a> {
        let Some(first) = user_agent.and_then(|ua| ua.split_ascii_whitespace().next()) else {
            return Client::default();
        };
        let (name, version) = match first.split_once('/') {
            Some((name, version)) => (name, ClientVersion::parse(version)),
            None => (first, None),
        };
        Client { name, version }
    }

    /// True when the User-Agent named no component.
    pub fn is_unknown(&self) -> bool {
        self.name.is_empty()
    }
}

impl fmt::Display for Client<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.is_unknown(), self.version) {
            (true, _) => f.write_str("(unknown)"),
            (false, Some(v)) => write!(f, "{} {}", self.name, v),
            (false, None) => f.write_str(self.name),
        }
    }
}

/// A `major.minor.patch` version. Pre-release and build suffixes are ignored, so `v1.30.0-rc.1` is 1.30.0:
/// version bounds in route files speak of minors, and a release candidate of 1.30 is a 1.30 client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version (0 when absent).
    pub patch: u32,
}

impl ClientVersion {
    /// Older than every real version: what a client of unknown version is judged as where it
    /// must be judged old (a guard's `unknownVersion: guard`).
    pub const OLDEST: ClientVersion = ClientVersion {
        major: 0,
        minor: 0,
        patch: 0,
    };

    /// Parses `v1.29.4`, `1.29`, `2.0`, `v1.30.0-rc.1+abc`; `None` for anything else.
    pub fn parse(s: &str) -> Option<ClientVersion> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let core = s.split(['-', '+']).next().unwrap_or(s);
        let mut nums = core.split('.');
        let major = nums.next()?.parse().ok()?;
        let minor = nums.next()?.parse().ok()?;
        let patch = match nums.next() {
            Some(p) => p.parse().ok()?,
            None => 0,
        };
        if nums.next().is_some() {
            return None;
        }
        Some(ClientVersion {
            major,
            minor,
            patch,
        })
    }
}

impl ClientVersion {
    /// `v1.30` or `1.30` as (1, 30): a minor, as a route file names a backend's version.
    pub(crate) fn parse_minor(s: &str) -> Option<(u32, u32)> {
        let v = ClientVersion::parse(s)?;
        let two_parts = s.matches('.').count() == 1 && !s.contains(['-', '+']);
        two_parts.then_some((v.major, v.minor))
    }

    /// Whether `git_version` (an apiserver's `/version`, e.g. `v1.30.2-gke.1`) is of minor
    /// `major.minor`.
    pub(crate) fn is_of_minor(git_version: &str, (major, minor): (u32, u32)) -> bool {
        ClientVersion::parse(git_version).is_some_and(|v| (v.major, v.minor) == (major, minor))
    }
}

impl fmt::Display for ClientVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32, patch: u32) -> Option<ClientVersion> {
        Some(ClientVersion {
            major,
            minor,
            patch,
        })
    }

    #[test]
    fn user_agent_forms() {
        for (ua, name, version) in [
            (
                Some("kubelet/v1.29.4 (linux/amd64) kubernetes/abc1234"),
                "kubelet",
                v(1, 29, 4),
            ),
            (
                Some("kubectl/v1.30.0 (linux/amd64) kubernetes/7c48c2b"),
                "kubectl",
                v(1, 30, 0),
            ),
            (
                Some(
                    "kube-controller-manager/v1.30.2 (linux/arm64) kubernetes/abc/leader-election",
                ),
                "kube-controller-manager",
                v(1, 30, 2),
            ),
            (Some("Go-http-client/2.0"), "Go-http-client", v(2, 0, 0)),
            (Some("kubelet/v1.31.0-rc.1+abc"), "kubelet", v(1, 31, 0)),
            (Some("curl/8.5.0"), "curl", v(8, 5, 0)),
            (Some("my-operator"), "my-operator", None),
            (Some("my-operator/unknown"), "my-operator", None),
            (Some("kubelet/v1.x.4"), "kubelet", None),
            (Some(""), "", None),
            (Some("   "), "", None),
            (
                Some("  kubelet/v1.29.4\t(linux/amd64)"),
                "kubelet",
                v(1, 29, 4),
            ),
            (Some("\tkubectl/v1.30.0"), "kubectl", v(1, 30, 0)),
            (Some("kubectl/"), "kubectl", None),
            (None, "", None),
        ] {
            let client = Client::from_user_agent(ua);
            assert_eq!(client.name, name, "{ua:?}");
            assert_eq!(client.version, version, "{ua:?}");
        }
    }

    #[test]
    fn versions_order_numerically() {
        assert!(ClientVersion::parse("1.9").unwrap() < ClientVersion::parse("1.29").unwrap());
        assert!(
            ClientVersion::parse("v1.29.10").unwrap() > ClientVersion::parse("1.29.9").unwrap()
        );
        assert_eq!(ClientVersion::parse("1.2.3.4"), None);
        assert_eq!(ClientVersion::parse_minor("v1.30"), Some((1, 30)));
        assert_eq!(ClientVersion::parse_minor("1.30.1"), None);
        assert!(ClientVersion::is_of_minor("v1.30.2-gke.1", (1, 30)));
        assert!(ClientVersion::is_of_minor("v1.30", (1, 30)));
        assert!(!ClientVersion::is_of_minor("v1.3.0", (1, 30)));
        assert_eq!(ClientVersion::parse("99999999999.1"), None);
    }
}
