//! Identity header hygiene: every identity header a client sends is removed, always; the verified
//! identity is then set, on the proxy's own (front-proxy authenticated) upstream connection.

use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};

use super::Identity;

/// The header names, as kube-apiserver's `--requestheader-*-headers` flags configure them.
#[derive(Clone, Debug)]
pub struct IdentityHeaders {
    /// User headers (`X-Remote-User`); the first is the one set.
    pub user: Vec<HeaderName>,
    /// Group headers (`X-Remote-Group`); the first is the one set, once per group.
    pub group: Vec<HeaderName>,
    /// Prefixes of extra headers (`X-Remote-Extra-`), lower case.
    pub extra_prefixes: Vec<String>,
    /// UID headers (`X-Remote-Uid`).
    pub uid: Vec<HeaderName>,
    /// The bytes any of them (or an extra prefix) can have at each of its first `LEAD` places,
    /// spelt with underscores too, one bit per ASCII byte: a name that differs there (most of a
    /// request's, `X-Forwarded-For` among them) is none of them, found with a few tests instead of
    /// a comparison with each. Derived from the lists above when they are built (`new`,
    /// `default`); they are not changed after.
    lead: [u128; LEAD],
}

/// How many leading bytes of a header name `IdentityHeaders::lead` looks at.
const LEAD: usize = 3;

impl Default for IdentityHeaders {
    fn default() -> Self {
        IdentityHeaders {
            user: vec![HeaderName::from_static("x-remote-user")],
            group: vec![HeaderName::from_static("x-remote-group")],
            extra_prefixes: vec!["x-remote-extra-".to_owned()],
            uid: vec![HeaderName::from_static("x-remote-uid")],
            lead: [0; LEAD],
        }
        .with_lead()
    }
}

impl IdentityHeaders {
    /// Builds the names from flag values (case-insensitive, as HTTP header names are).
    pub fn new(
        user: &[String],
        group: &[String],
        extra_prefixes: &[String],
        uid: &[String],
    ) -> Result<IdentityHeaders, String> {
        let names = |list: &[String]| -> Result<Vec<HeaderName>, String> {
            list.iter()
                .map(|n| {
                    HeaderName::from_bytes(n.to_ascii_lowercase().as_bytes())
                        .map_err(|e| format!("header name {n:?}: {e}"))
                })
                .collect()
        };
        let defaults = IdentityHeaders::default();
        Ok(IdentityHeaders {
            user: if user.is_empty() {
                defaults.user
            } else {
                names(user)?
            },
            group: if group.is_empty() {
                defaults.group
            } else {
                names(group)?
            },
            extra_prefixes: if extra_prefixes.is_empty() {
                defaults.extra_prefixes
            } else {
                extra_prefixes
                    .iter()
                    .map(|p| p.to_ascii_lowercase())
                    .collect()
            },
            uid: if uid.is_empty() {
                defaults.uid
            } else {
                names(uid)?
            },
            lead: [0; LEAD],
        }
        .with_lead())
    }

    /// Sets `lead` from the names and prefixes.
    fn with_lead(mut self) -> Self {
        let names = self.user.iter().chain(&self.group).chain(&self.uid);
        let all = names
            .map(HeaderName::as_str)
            .chain(self.extra_prefixes.iter().map(String::as_str));
        let mut lead = [0u128; LEAD];
        for name in all {
            for (at, bits) in lead.iter_mut().enumerate() {
                match name.as_bytes().get(at) {
                    // A short name or prefix (an empty prefix: every name has it).
                    None => *bits = u128::MAX,
                    // A dash may come spelt as an underscore.
                    Some(b'-') => *bits |= 1 << b'-' | 1 << b'_',
                    Some(&b) if b < 128 => *bits |= 1 << b,
                    Some(_) => {}
                }
            }
        }
        self.lead = lead;
        self
    }

    /// Whether `name` can be one of them, or one spelt with underscores, or an extra header.
    fn may_be_identity(&self, name: &HeaderName) -> bool {
        let name = name.as_str().as_bytes();
        self.lead
            .iter()
            .enumerate()
            .all(|(at, bits)| match name.get(at) {
                Some(&b) => b < 128 && bits & (1 << b) != 0,
                None => true,
            })
    }

    /// Removes every identity header (every value of each), whatever the client sent, and every
    /// header whose name is one of them spelt with underscores (`X_Remote_User`), which some
    /// servers fold into the dashed form. Used on request heads and on trailers.
    pub fn strip(&self, headers: &mut HeaderMap) {
        // One pass over the names (no hashing) finds whether there is any: most requests have none.
        if !headers
            .keys()
            .any(|k| self.may_be_identity(k) && (self.is_identity(k) || self.is_other_identity(k)))
        {
            return;
        }
        for name in self.user.iter().chain(&self.group).chain(&self.uid) {
            headers.remove(name);
        }
        if headers.keys().any(|k| self.is_other_identity(k)) {
            let others: Vec<HeaderName> = headers
                .keys()
                .filter(|k| self.is_other_identity(k))
                .cloned()
                .collect();
            for name in others {
                headers.remove(&name);
            }
        }
    }

    /// A user, group or uid header.
    fn is_identity(&self, name: &HeaderName) -> bool {
        self.user
            .iter()
            .chain(&self.group)
            .chain(&self.uid)
            .any(|n| n == name)
    }

    /// An extra header, or an identity header spelt with underscores.
    fn is_other_identity(&self, name: &HeaderName) -> bool {
        let name = name.as_str();
        if !name.as_bytes().contains(&b'_') {
            return self.is_extra(name);
        }
        let dashed = name.replace('_', "-");
        self.is_extra(&dashed)
            || self
                .user
                .iter()
                .chain(&self.group)
                .chain(&self.uid)
                .any(|n| n.as_str() == dashed)
    }

    fn is_extra(&self, name: &str) -> bool {
        self.extra_prefixes
            .iter()
            .any(|p| name.starts_with(p.as_str()))
    }
}

/// Strips the client's identity headers and sets the verified identity, if any.
pub fn forward_identity(
    names: &IdentityHeaders,
    headers: &mut HeaderMap,
    identity: Option<&Identity>,
) {
    let forwarded = identity.map(ForwardedIdentity::of);
    forward_made(names, headers, forwarded.as_ref());
}

/// A client's identity as the header values it is forwarded in: made once per connection, when
/// its certificate is verified, so that a request only clones them.
#[derive(Debug)]
pub(crate) struct ForwardedIdentity {
    user: Option<HeaderValue>,
    groups: Vec<HeaderValue>,
}

impl ForwardedIdentity {
    /// The header values of `id` (a user or group that is no header value is left out).
    pub(crate) fn of(id: &Identity) -> ForwardedIdentity {
        ForwardedIdentity {
            user: HeaderValue::from_str(&id.user).ok(),
            groups: id
                .groups
                .iter()
                .filter_map(|g| HeaderValue::from_str(g).ok())
                .collect(),
        }
    }
}

/// `forward_identity` with the values made already.
pub(crate) fn forward_made(
    names: &IdentityHeaders,
    headers: &mut HeaderMap,
    forwarded: Option<&ForwardedIdentity>,
) {
    names.strip(headers);
    let Some(id) = forwarded else {
        return;
    };
    if let (Some(name), Some(value)) = (names.user.first(), &id.user) {
        headers.insert(name.clone(), value.clone());
    }
    if let Some(name) = names.group.first() {
        for value in &id.groups {
            headers.append(name.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_identity_headers_never_pass() {
        let names = IdentityHeaders::default();
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("X-Remote-User", "admin"),
            ("x-remote-group", "system:masters"),
            ("X-REMOTE-GROUP", "other"),
            ("X-Remote-Extra-Scopes", "all"),
            ("x-remote-uid", "0"),
            ("Authorization", "Bearer t"),
            ("Impersonate-User", "bob"),
        ] {
            h.append(
                HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()).unwrap(),
                HeaderValue::from_static(v),
            );
        }
        forward_identity(&names, &mut h, None);
        assert!(h.get("x-remote-user").is_none());
        assert!(h.get("x-remote-group").is_none());
        assert!(h.get("x-remote-extra-scopes").is_none());
        assert!(h.get("x-remote-uid").is_none());
        assert_eq!(h.get("authorization").unwrap(), "Bearer t");
        assert_eq!(h.get("impersonate-user").unwrap(), "bob");
        let alice = Identity {
            user: "alice".into(),
            groups: vec!["devs".into(), "ops".into()],
        };
        h.append("x-remote-group", HeaderValue::from_static("system:masters"));
        forward_identity(&names, &mut h, Some(&alice));
        assert_eq!(h.get("x-remote-user").unwrap(), "alice");
        let groups: Vec<_> = h
            .get_all("x-remote-group")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(groups, ["devs", "ops"]);
    }

    #[test]
    fn underscore_spellings_of_identity_headers_never_pass() {
        let names = IdentityHeaders::default();
        let mut h = HeaderMap::new();
        for k in [
            "x_remote_user",
            "x-remote_group",
            "x_remote_extra_scopes",
            "x_remote_uid",
        ] {
            h.insert(HeaderName::from_static(k), HeaderValue::from_static("evil"));
        }
        h.insert("x_forwarded_proto", HeaderValue::from_static("https"));
        names.strip(&mut h);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["x_forwarded_proto"]);
    }

    #[test]
    fn configured_names_are_case_insensitive() {
        let names =
            IdentityHeaders::new(&["X-Auth-User".into()], &[], &["X-Auth-Extra-".into()], &[])
                .unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-auth-user", HeaderValue::from_static("root"));
        h.insert("x-auth-extra-foo", HeaderValue::from_static("1"));
        names.strip(&mut h);
        assert!(h.is_empty());
    }

    #[test]
    fn names_shorter_than_the_quick_test_are_stripped() {
        // The quick test looks at three bytes: names and prefixes shorter than that must pass it.
        let names = IdentityHeaders::new(&["U".into()], &[], &["Q-".into()], &[]).unwrap();
        for k in ["u", "q-", "q-anything", "q_anything"] {
            let mut h = HeaderMap::new();
            h.insert(HeaderName::from_static(k), HeaderValue::from_static("evil"));
            h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
            names.strip(&mut h);
            let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
            assert_eq!(left, ["x-forwarded-for"], "{k}");
        }
    }

    #[test]
    fn names_beginning_with_any_byte_are_stripped() {
        // Each begins with a byte the default names do not: the quick test on the first byte must
        // know every configured name, and the underscore spelling of a leading dash.
        let names = IdentityHeaders::new(
            &["Remote-User".into()],
            &["-Group".into()],
            &["Extra-".into()],
            &["Uid".into()],
        )
        .unwrap();
        // One at a time: any one of them must be found by the quick test on its own.
        for k in [
            "remote-user",
            "remote_user",
            "_group",
            "extra-scopes",
            "uid",
        ] {
            let mut h = HeaderMap::new();
            h.insert(HeaderName::from_static(k), HeaderValue::from_static("evil"));
            h.insert("user-agent", HeaderValue::from_static("kubectl"));
            names.strip(&mut h);
            let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
            assert_eq!(left, ["user-agent"], "{k}");
        }
        let mut h = HeaderMap::new();
        h.insert("user-agent", HeaderValue::from_static("kubectl"));
        // An empty extra prefix makes every header an extra one.
        let all = IdentityHeaders::new(&[], &[], &["".into()], &[]).unwrap();
        all.strip(&mut h);
        assert!(h.is_empty());
    }
}
