//! The route file as written: serde types that mirror routes/README.md (the format's reference),
//! with source locations kept for validation errors. Nothing here is used at run time; `validate` turns it into a `RouteTable`.

use serde::Deserialize;
use serde_saphyr::Spanned;

/// A string with the line and column it came from.
pub(super) type Text = Spanned<String>;
/// A list of strings, each with its location, and the list's own location.
pub(super) type TextList = Spanned<Vec<Text>>;

/// A whole route file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct FileRouteTable {
    pub api_version: Text,
    pub kind: Text,
    #[serde(default)]
    pub metadata: Option<FileMetadata>,
    pub backends: Spanned<Vec<FileBackend>>,
    pub writes: Spanned<FileWrites>,
    pub reads: Spanned<FileReads>,
    #[serde(default)]
    pub guards: Vec<Spanned<FileGuard>>,
    #[serde(default)]
    pub skew_policy: Option<Spanned<FileSkewPolicy>>,
    #[serde(default)]
    pub share_watches: Vec<Spanned<FileShare>>,
}

/// The version-skew policy's exceptions as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct FileSkewPolicy {
    #[serde(default)]
    pub allow_older_apiserver: Option<TextList>,
}

/// An update guard as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct FileGuard {
    pub name: Text,
    #[serde(default, rename = "match")]
    pub match_: Option<FileMatch>,
    #[serde(default)]
    pub action: Option<Text>,
    #[serde(default)]
    pub unknown_version: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileShare {
    pub name: Text,
    #[serde(default, rename = "match")]
    pub match_: Option<FileMatch>,
    #[serde(default)]
    pub selectors: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileMetadata {
    #[serde(default)]
    pub name: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct FileBackend {
    pub name: Text,
    #[serde(default)]
    pub version: Option<Text>,
    pub endpoints: TextList,
    #[serde(default)]
    pub server_name: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileWrites {
    #[serde(default)]
    pub verbs: Option<TextList>,
    pub default: Text,
    #[serde(default)]
    pub fence: Option<Text>,
    #[serde(default)]
    pub pins: Vec<Spanned<FilePin>>,
}

/// A write pin. Only `namespaces` and `resources` select: a pin names a set of objects, and selecting
/// by who writes would let two versions write the same object.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct FilePin {
    #[serde(default)]
    pub name: Option<Text>,
    #[serde(default)]
    pub namespaces: Option<TextList>,
    #[serde(default)]
    pub resources: Option<TextList>,
    pub backend: Text,
    #[serde(default)]
    pub reads: Option<Text>,
    #[serde(default)]
    pub flip_at: Option<Text>,
    #[serde(default)]
    pub from: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileReads {
    pub default: Text,
    #[serde(default)]
    pub rollouts: Vec<Spanned<FileRollout>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct FileRollout {
    pub name: Text,
    #[serde(default, rename = "match")]
    pub match_: Option<FileMatch>,
    pub to: Text,
    #[serde(default)]
    pub sticky_by: Option<Text>,
    #[serde(default)]
    pub percent: Option<Spanned<f64>>,
    #[serde(default)]
    pub start_at: Option<Text>,
    #[serde(default)]
    pub steps: Option<Spanned<Vec<Spanned<FileStep>>>>,
    #[serde(default)]
    pub abort: Option<Spanned<FileAbort>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileMatch {
    #[serde(default)]
    pub namespaces: Option<TextList>,
    #[serde(default)]
    pub resources: Option<TextList>,
    #[serde(default)]
    pub verbs: Option<TextList>,
    #[serde(default)]
    pub users: Option<TextList>,
    #[serde(default)]
    pub groups: Option<TextList>,
    #[serde(default)]
    pub clients: Option<TextList>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileStep {
    pub percent: Spanned<f64>,
    #[serde(default)]
    pub hold: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct FileAbort {
    pub error_ratio: Spanned<f64>,
    pub window: Text,
    pub min_requests: Spanned<u64>,
}
