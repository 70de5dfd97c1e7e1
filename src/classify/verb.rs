//! The Kubernetes verb of a request, as the apiserver's authorizer sees it.

use std::fmt;

/// A Kubernetes verb. Resource requests get `get` ... `proxy`; non-resource requests get the lower-case
/// HTTP method, as in the apiserver (`post`, `put`, `head`, `options`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET or HEAD of one named object, or of a non-resource path.
    #[default]
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch`, or the deprecated `/watch/` path.
    Watch,
    /// POST to a resource path.
    Create,
    /// PUT to a resource path.
    Update,
    /// PATCH to a resource path (or a non-resource path).
    Patch,
    /// DELETE of one named object (or a non-resource path).
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
    /// The deprecated `/proxy/` path.
    Proxy,
    /// POST to a non-resource path.
    Post,
    /// PUT to a non-resource path.
    Put,
    /// HEAD to a non-resource path.
    Head,
    /// OPTIONS to a non-resource path.
    Options,
    /// A method the apiserver has no verb for (the empty verb).
    Other,
}

impl Verb {
    /// Every verb a route file may name in `verbs` or `writes.verbs`.
    pub const SELECTABLE: [Verb; 9] = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
        Verb::DeleteCollection,
        Verb::Proxy,
    ];

    /// The verbs that may be pinned as writes.
    pub const WRITES: [Verb; 5] = [
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
        Verb::DeleteCollection,
    ];

    /// Whether the verb only reads (get, list, watch, and the non-resource reads).
    pub fn is_read(self) -> bool {
        matches!(
            self,
            Verb::Get | Verb::List | Verb::Watch | Verb::Head | Verb::Options
        )
    }

    /// The verb's name as the apiserver spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Proxy => "proxy",
            Verb::Post => "post",
            Verb::Put => "put",
            Verb::Head => "head",
            Verb::Options => "options",
            Verb::Other => "",
        }
    }

    /// Parses a verb named in a route file.
    pub fn parse_selectable(name: &str) -> Option<Verb> {
        Verb::SELECTABLE.into_iter().find(|v| v.as_str() == name)
    }

    /// A bit for this verb, so that sets of verbs are one integer.
    pub fn bit(self) -> u16 {
        1 << (self as u16)
    }

    /// The verb of a non-resource request: the lower-case HTTP method.
    pub(crate) fn from_http_method(method: &str) -> Verb {
        match method {
            "GET" => Verb::Get,
            "HEAD" => Verb::Head,
            "POST" => Verb::Post,
            "PUT" => Verb::Put,
            "PATCH" => Verb::Patch,
            "DELETE" => Verb::Delete,
            "OPTIONS" => Verb::Options,
            _ => Verb::Other,
        }
    }

    /// The verb of a resource request before list/watch/deletecollection are told apart.
    pub(crate) fn from_resource_method(method: &str) -> Verb {
        match method {
            "POST" => Verb::Create,
            "GET" | "HEAD" => Verb::Get,
            "PUT" => Verb::Update,
            "PATCH" => Verb::Patch,
            "DELETE" => Verb::Delete,
            _ => Verb::Other,
        }
    }

    /// The deprecated verbs that appear as a path segment after the version.
    pub(crate) fn special(segment: &str) -> Option<Verb> {
        match segment {
            "watch" => Some(Verb::Watch),
            "proxy" => Some(Verb::Proxy),
            _ => None,
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
