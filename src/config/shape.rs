//! The shape of a route file (which fields, of which types, which required), checked on the YAML
//! tree before the file is turned into types: every unknown field (with the field meant), every
//! value of the wrong type and every missing field is reported at once, each with its line, column
//! and field path. It mirrors `raw` (the types) and routes/README.md (the reference); the tests
//! check the three agree on the example files.

use std::path::Path;

use super::error::ConfigError;
use super::tree::{At, Node};

/// What a value must be.
enum Shape {
    /// A scalar (a name, a URL, a duration, a version).
    Text,
    /// A number written without quotes.
    Number,
    /// A whole number written without quotes.
    Count,
    /// A list of scalars.
    Texts,
    /// A list of mappings.
    List(&'static [Field]),
    /// A mapping.
    Map(&'static [Field]),
}

/// A field of a mapping.
struct Field {
    name: &'static str,
    shape: Shape,
    required: bool,
    /// An example value, for messages.
    example: &'static str,
}

const fn req(name: &'static str, shape: Shape, example: &'static str) -> Field {
    Field {
        name,
        shape,
        required: true,
        example,
    }
}

const fn opt(name: &'static str, shape: Shape, example: &'static str) -> Field {
    Field {
        name,
        shape,
        required: false,
        example,
    }
}

const MATCH: &[Field] = &[
    opt("namespaces", Shape::Texts, "[team-a, \"/^ci-/\"]"),
    opt("resources", Shape::Texts, "[pods, deployments.apps]"),
    opt("verbs", Shape::Texts, "[get, list, watch]"),
    opt("users", Shape::Texts, "[\"system:node:*\"]"),
    opt("groups", Shape::Texts, "[\"system:nodes\"]"),
    opt("clients", Shape::Texts, "[\"kubectl>=1.30\"]"),
];

const BACKEND: &[Field] = &[
    req("name", Shape::Text, "v1-30"),
    opt("version", Shape::Text, "v1.30"),
    req("endpoints", Shape::Texts, "[https://10.0.0.11:6443]"),
    opt("serverName", Shape::Text, "kubernetes"),
];

const PIN: &[Field] = &[
    opt("name", Shape::Text, "team-a"),
    opt("namespaces", Shape::Texts, "[team-a]"),
    opt("resources", Shape::Texts, "[deployments.apps]"),
    req("backend", Shape::Text, "v1-30"),
    opt("reads", Shape::Text, "follow"),
    opt("flipAt", Shape::Text, "2026-11-23T10:00:00Z"),
    opt("from", Shape::Text, "v1-29"),
];

const WRITES: &[Field] = &[
    opt("verbs", Shape::Texts, "[update, patch]"),
    req("default", Shape::Text, "v1-29"),
    opt("fence", Shape::Text, "30s"),
    opt(
        "pins",
        Shape::List(PIN),
        "[{name: team-a, namespaces: [team-a], backend: v1-30}]",
    ),
];

const STEP: &[Field] = &[
    req("percent", Shape::Number, "10"),
    opt("hold", Shape::Text, "30m"),
];

const ABORT: &[Field] = &[
    req("errorRatio", Shape::Number, "0.01"),
    req("window", Shape::Text, "5m"),
    req("minRequests", Shape::Count, "200"),
];

const ROLLOUT: &[Field] = &[
    req("name", Shape::Text, "kubelets"),
    opt("match", Shape::Map(MATCH), "{groups: [\"system:nodes\"]}"),
    req("to", Shape::Text, "v1-30"),
    opt("stickyBy", Shape::Text, "user"),
    opt("percent", Shape::Number, "10"),
    opt("startAt", Shape::Text, "2026-11-23T10:00:00Z"),
    opt("steps", Shape::List(STEP), "[{percent: 10, hold: 30m}]"),
    opt(
        "abort",
        Shape::Map(ABORT),
        "{errorRatio: 0.01, window: 5m, minRequests: 200}",
    ),
];

const READS: &[Field] = &[
    req("default", Shape::Text, "v1-29"),
    opt(
        "rollouts",
        Shape::List(ROLLOUT),
        "[{name: kubelets, to: v1-30, percent: 10}]",
    ),
];

const GUARD: &[Field] = &[
    req("name", Shape::Text, "old-kubectl"),
    opt("match", Shape::Map(MATCH), "{resources: [configmaps]}"),
    opt("action", Shape::Text, "reject"),
    opt("unknownVersion", Shape::Text, "allow"),
];

const SHARE: &[Field] = &[
    req("name", Shape::Text, "kubelet-mounts"),
    opt(
        "match",
        Shape::Map(MATCH),
        "{resources: [configmaps, secrets]}",
    ),
    opt("selectors", Shape::Text, "byName"),
];

const METADATA: &[Field] = &[opt("name", Shape::Text, "upgrade-1-30")];

const SKEW_POLICY: &[Field] = &[opt("allowOlderApiserver", Shape::Texts, "[kubelet]")];

const ROOT: &[Field] = &[
    req("apiVersion", Shape::Text, "skewgate.io/v1alpha1"),
    req("kind", Shape::Text, "RouteTable"),
    opt("metadata", Shape::Map(METADATA), "{name: upgrade-1-30}"),
    req(
        "backends",
        Shape::List(BACKEND),
        "[{name: v1-30, endpoints: [https://10.0.0.11:6443]}]",
    ),
    req("writes", Shape::Map(WRITES), "{default: v1-29}"),
    req("reads", Shape::Map(READS), "{default: v1-29}"),
    opt(
        "guards",
        Shape::List(GUARD),
        "[{name: old-kubectl, action: reject}]",
    ),
    opt(
        "skewPolicy",
        Shape::Map(SKEW_POLICY),
        "{allowOlderApiserver: [kubelet]}",
    ),
    opt(
        "shareWatches",
        Shape::List(SHARE),
        "[{name: kubelet-mounts, match: {resources: [secrets]}}]",
    ),
];

/// Every structural problem of the file's tree.
pub(super) fn check(file: &Path, root: &Node) -> Problems {
    let mut c = Checker {
        file,
        errors: Vec::new(),
        unknown: Vec::new(),
    };
    c.mapping(root, ROOT, "");
    Problems {
        errors: c.errors,
        unknown: c.unknown,
    }
}

/// What the shape check found.
pub(super) struct Problems {
    /// Every problem, in file order.
    pub errors: Vec<ConfigError>,
    /// Where each unknown field's key is: when these are all the problems, the file without them
    /// can still be read for the values' own errors.
    pub unknown: Vec<At>,
}

impl Problems {
    /// Whether every problem is an unknown field.
    pub(super) fn only_unknown_fields(&self) -> bool {
        self.errors.len() == self.unknown.len()
    }
}

struct Checker<'f> {
    file: &'f Path,
    errors: Vec<ConfigError>,
    unknown: Vec<At>,
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

impl Checker<'_> {
    fn error(&mut self, at: At, field: &str, message: String) {
        self.errors.push(ConfigError {
            file: self.file.to_owned(),
            line: at.line,
            column: at.column,
            field: field.to_owned(),
            message,
        });
    }

    fn mapping(&mut self, node: &Node, fields: &'static [Field], path: &str) {
        let Node::Map { entries, at } = node else {
            if !matches!(node, Node::Alias { .. }) {
                let what = if path.is_empty() { "the file" } else { path };
                self.error(
                    node.at(),
                    path,
                    format!(
                        "{what} must be a mapping (`name: value` lines), not {}",
                        node.kind()
                    ),
                );
            }
            return;
        };
        for (key, value) in entries {
            let field_path = join(path, &key.text);
            match fields.iter().find(|f| f.name == key.text) {
                Some(f) => self.value(value, f, &field_path),
                None => {
                    let names: Vec<&str> = fields.iter().map(|f| f.name).collect();
                    let hint = match did_you_mean(&key.text, &names) {
                        Some(m) => format!("did you mean `{m}`?"),
                        None => format!("the fields here are {}", names.join(", ")),
                    };
                    let message = format!("unknown field `{}`: {hint}", key.text);
                    self.error(key.at, &field_path, message);
                    self.unknown.push(key.at);
                }
            }
        }
        for f in fields.iter().filter(|f| f.required) {
            if !entries.iter().any(|(k, _)| k.text == f.name) {
                let where_ = if path.is_empty() {
                    "the route table"
                } else {
                    path
                };
                let message = format!(
                    "{where_} needs `{}`, e.g. `{}: {}`",
                    f.name, f.name, f.example
                );
                self.error(*at, &join(path, f.name), message);
            }
        }
    }

    fn value(&mut self, node: &Node, f: &'static Field, path: &str) {
        if matches!(node, Node::Alias { .. }) {
            return;
        }
        if node.is_null() {
            if f.required {
                let message = format!("needs a value, e.g. `{}: {}`", f.name, f.example);
                self.error(node.at(), path, message);
            }
            return;
        }
        match (&f.shape, node) {
            (Shape::Text, Node::Scalar { .. }) => {}
            (Shape::Number | Shape::Count, Node::Scalar { text, plain, .. }) => {
                self.number(node.at(), text, *plain, f, path)
            }
            (Shape::Texts, Node::Seq { items, .. }) => {
                for (i, item) in items.iter().enumerate() {
                    if !matches!(item, Node::Scalar { .. } | Node::Alias { .. }) {
                        let message = format!(
                            "each item of {} is a name or pattern, not {}; e.g. `{}: {}`",
                            f.name,
                            item.kind(),
                            f.name,
                            f.example
                        );
                        self.error(item.at(), &format!("{path}[{i}]"), message);
                    }
                }
            }
            (Shape::List(fields), Node::Seq { items, .. }) => {
                for (i, item) in items.iter().enumerate() {
                    self.mapping(item, fields, &format!("{path}[{i}]"));
                }
            }
            (Shape::Map(fields), Node::Map { .. }) => self.mapping(node, fields, path),
            (shape, _) => {
                let want = match shape {
                    Shape::Text => "a single value",
                    Shape::Number => "a number",
                    Shape::Count => "a whole number",
                    Shape::Texts | Shape::List(_) => "a list",
                    Shape::Map(_) => "a mapping",
                };
                let message = format!(
                    "{} must be {want}, not {}; e.g. `{}: {}`",
                    f.name,
                    node.kind(),
                    f.name,
                    f.example
                );
                self.error(node.at(), path, message);
            }
        }
    }

    fn number(&mut self, at: At, text: &str, plain: bool, f: &Field, path: &str) {
        let whole = matches!(f.shape, Shape::Count);
        let parses = if whole {
            text.parse::<u64>().is_ok()
        } else {
            text.parse::<f64>().is_ok_and(f64::is_finite)
        };
        let message = match (parses, plain) {
            (true, true) => return,
            (true, false) => format!("{} is a number: write {text} without quotes", f.name),
            (false, _) => format!(
                "{} must be {}, not {text:?}; e.g. `{}: {}`",
                f.name,
                if whole { "a whole number" } else { "a number" },
                f.name,
                f.example
            ),
        };
        self.error(at, path, message);
    }
}

/// The candidate `word` most likely meant, if one is close: the same but for case or `_`, or a
/// small edit away.
pub(crate) fn did_you_mean<'c>(word: &str, candidates: &[&'c str]) -> Option<&'c str> {
    let fold = |s: &str| s.to_ascii_lowercase().replace(['_', '-'], "");
    if let Some(c) = candidates.iter().find(|c| fold(c) == fold(word)) {
        return Some(c);
    }
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(&fold(word), &fold(c)), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4) && *d < c.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
#[path = "shape_tests.rs"]
mod tests;
