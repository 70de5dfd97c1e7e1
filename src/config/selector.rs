//! Compiled selectors: the items of `namespaces`, `resources`, `verbs`, `users`, `groups` and `clients`,
//! parsed once at load time and matched against one value each.

use std::fmt;

use regex::Regex;

use crate::classify::{Client, ClientVersion, Verb};

/// A list of items: matches when at least one plain item matches (or there are only `!` items) and no
/// `!` item matches. So `[a, "!b"]` is "a, and not b", and `["!a", "!b"]` is "none of a, b".
#[derive(Clone, Debug, PartialEq)]
pub struct Selector<I> {
    /// The plain items.
    pub include: Vec<I>,
    /// The `!` items.
    pub exclude: Vec<I>,
}

impl<I> Selector<I> {
    /// Applies the list rule with `test` deciding whether one item matches.
    pub fn matches_with(&self, mut test: impl FnMut(&I) -> bool) -> bool {
        (self.include.is_empty() || self.include.iter().any(&mut test))
            && !self.exclude.iter().any(test)
    }
}

/// A name item: exact, `/regex/` (unanchored, as written), or a glob with `*`.
#[derive(Clone, Debug)]
pub enum NamePattern {
    /// The name itself.
    Exact(String),
    /// `/regex/` or a `*` glob, compiled; the source text is kept for display and equality.
    Pattern {
        /// The item as written.
        source: String,
        /// The compiled expression.
        regex: Regex,
    },
}

impl PartialEq for NamePattern {
    fn eq(&self, other: &Self) -> bool {
        self.source() == other.source()
    }
}

impl NamePattern {
    /// Parses one item (without its `!`). `/.../` is a regular expression; an item with `*` is a glob.
    pub fn parse(item: &str) -> Result<NamePattern, String> {
        if item.len() >= 2 && item.starts_with('/') && item.ends_with('/') {
            let expr = &item[1..item.len() - 1];
            let regex = Regex::new(expr).map_err(|e| {
                // The regex crate's message spans lines with a caret; its last line says what is wrong.
                let text = e.to_string();
                let why = text.lines().last().unwrap_or_default().trim_start_matches("error: ").to_owned();
                format!("invalid regular expression {item}: {why}; write it as /expression/, e.g. /^canary-/")
            })?;
            return Ok(NamePattern::Pattern {
                source: item.to_owned(),
                regex,
            });
        }
        if item.contains('*') {
            let expr = format!(
                "^{}$",
                item.split('*')
                    .map(regex::escape)
                    .collect::<Vec<_>>()
                    .join(".*")
            );
            let regex = Regex::new(&expr).map_err(|e| format!("invalid glob {item}: {e}"))?;
            return Ok(NamePattern::Pattern {
                source: item.to_owned(),
                regex,
            });
        }
        Ok(NamePattern::Exact(item.to_owned()))
    }

    /// Whether the name matches this item.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            NamePattern::Exact(n) => n == name,
            NamePattern::Pattern { regex, .. } => regex.is_match(name),
        }
    }

    /// The exact name, when the item is one.
    pub fn as_exact(&self) -> Option<&str> {
        match self {
            NamePattern::Exact(n) => Some(n),
            NamePattern::Pattern { .. } => None,
        }
    }

    /// The item as written.
    pub fn source(&self) -> &str {
        match self {
            NamePattern::Exact(n) => n,
            NamePattern::Pattern { source, .. } => source,
        }
    }
}

/// One part of a resource item: a name, or `*` for any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Any value.
    Any,
    /// This value.
    Exact(String),
}

impl Part {
    fn parse(s: &str) -> Part {
        if s == "*" {
            Part::Any
        } else {
            Part::Exact(s.to_owned())
        }
    }

    fn matches(&self, value: &str) -> bool {
        match self {
            Part::Any => true,
            Part::Exact(v) => v == value,
        }
    }
}

/// `resource[.group][/subresource]`. No group means the core group (`pods`), `*` alone means every
/// resource of every group, and no subresource covers the resource and all its subresources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourcePattern {
    /// The resource, plural as in the URL.
    pub resource: Part,
    /// The API group; `Exact("")` is the core group.
    pub group: Part,
    /// The subresource; `None` covers the resource itself and every subresource.
    pub subresource: Option<Part>,
}

impl ResourcePattern {
    /// Parses one item (without its `!`).
    pub fn parse(item: &str) -> Result<ResourcePattern, String> {
        let (main, sub) = match item.split_once('/') {
            Some((main, sub)) => (main, Some(sub)),
            None => (item, None),
        };
        let (resource, group) = match main.split_once('.') {
            Some((r, g)) => (r, Part::parse(g)),
            None if main == "*" => (main, Part::Any),
            None => (main, Part::Exact(String::new())),
        };
        let valid = |s: &str| {
            s == "*"
                || (!s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.".contains(c)))
        };
        let group_ok = match &group {
            Part::Any => true,
            Part::Exact(g) => g.is_empty() || valid(g),
        };
        if !valid(resource) || !group_ok || sub.is_some_and(|s| !valid(s) || s.contains('.')) {
            return Err(format!(
                "invalid resource {item:?}: write resource[.group][/subresource] in lower case, \
                 e.g. pods, deployments.apps, pods/status, *.apps"
            ));
        }
        Ok(ResourcePattern {
            resource: Part::parse(resource),
            group,
            subresource: sub.map(Part::parse),
        })
    }

    /// Whether a request for this group, resource and subresource (empty when none) matches.
    pub fn matches(&self, group: &str, resource: &str, subresource: &str) -> bool {
        self.resource.matches(resource)
            && self.group.matches(group)
            && match &self.subresource {
                None => true,
                Some(part) => !subresource.is_empty() && part.matches(subresource),
            }
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Any => f.write_str("*"),
            Part::Exact(v) => f.write_str(v),
        }
    }
}

impl fmt::Display for ResourcePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.resource, &self.group) {
            (Part::Any, Part::Any) => f.write_str("*")?,
            (r, Part::Exact(g)) if g.is_empty() => write!(f, "{r}")?,
            (r, g) => write!(f, "{r}.{g}")?,
        }
        if let Some(sub) = &self.subresource {
            write!(f, "/{sub}")?;
        }
        Ok(())
    }
}

/// A set of verbs, one bit each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerbSet(u16);

impl VerbSet {
    /// The set of these verbs.
    pub fn of(verbs: &[Verb]) -> VerbSet {
        VerbSet(verbs.iter().fold(0, |acc, v| acc | v.bit()))
    }

    /// Adds a verb.
    pub fn insert(&mut self, verb: Verb) {
        self.0 |= verb.bit();
    }

    /// Whether the verb is in the set.
    pub fn contains(self, verb: Verb) -> bool {
        self.0 & verb.bit() != 0
    }

    /// The verbs in the set, in the apiserver's order.
    pub fn iter(self) -> impl Iterator<Item = Verb> {
        Verb::SELECTABLE
            .into_iter()
            .filter(move |v| self.contains(*v))
    }
}

/// A comparison in a client version bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundOp {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `=` or `==`
    Eq,
}

/// A client item: a User-Agent component, optionally with a version bound (`kubectl<1.29`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientPattern {
    /// The component, as the first product of the User-Agent names it.
    pub name: String,
    /// The version bound, if any.
    pub bound: Option<(BoundOp, ClientVersion)>,
}

impl ClientPattern {
    /// Parses one item (without its `!`).
    pub fn parse(item: &str) -> Result<ClientPattern, String> {
        let hint = "write a User-Agent component, optionally with a version bound, or a bound alone \
                    for any component, e.g. kubelet, kubectl<1.29, kube-controller-manager>=1.30, <1.30";
        let Some(at) = item.find(['<', '>', '=']) else {
            if item.is_empty() || item.contains(char::is_whitespace) || item.contains('/') {
                return Err(format!("invalid client {item:?}: {hint}"));
            }
            return Ok(ClientPattern {
                name: item.to_owned(),
                bound: None,
            });
        };
        let (name, rest) = item.split_at(at);
        let (op, version) = [
            ("<=", BoundOp::Le),
            (">=", BoundOp::Ge),
            ("==", BoundOp::Eq),
            ("<", BoundOp::Lt),
            (">", BoundOp::Gt),
            ("=", BoundOp::Eq),
        ]
        .into_iter()
        .find_map(|(s, op)| rest.strip_prefix(s).map(|v| (op, v)))
        .ok_or_else(|| format!("invalid client {item:?}: {hint}"))?;
        let version = ClientVersion::parse(version.trim())
            .ok_or_else(|| format!("invalid version in client {item:?}: {hint}"))?;
        // A bound alone (`<1.30`) is any client of such a version.
        let name = name.trim();
        if name.contains(char::is_whitespace) || name.contains('/') {
            return Err(format!("invalid client {item:?}: {hint}"));
        }
        Ok(ClientPattern {
            name: name.to_owned(),
            bound: Some((op, version)),
        })
    }

    /// Whether the client matches. A bound never matches a client whose version is unknown.
    pub fn matches(&self, client: &Client<'_>) -> bool {
        if !self.name.is_empty() && self.name != client.name {
            return false;
        }
        let Some((op, bound)) = self.bound else {
            return true;
        };
        let Some(v) = client.version else {
            return false;
        };
        match op {
            BoundOp::Lt => v < bound,
            BoundOp::Le => v <= bound,
            BoundOp::Gt => v > bound,
            BoundOp::Ge => v >= bound,
            BoundOp::Eq => v.major == bound.major && v.minor == bound.minor,
        }
    }
}

impl fmt::Display for ClientPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some((op, v)) = self.bound {
            let op = match op {
                BoundOp::Lt => "<",
                BoundOp::Le => "<=",
                BoundOp::Gt => ">",
                BoundOp::Ge => ">=",
                BoundOp::Eq => "=",
            };
            write!(f, "{op}{v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "selector_tests.rs"]
mod tests;
