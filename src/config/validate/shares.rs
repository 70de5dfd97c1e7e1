//! Validation of the `shareWatches` section.

use std::collections::HashSet;

use serde_saphyr::Spanned;

use super::Validator;
use crate::config::raw::FileShare;
use crate::config::table::Share;

impl Validator<'_> {
    /// The rules of `shareWatches`. A rule selects watches only: `match.verbs` is refused, and a
    /// rule that names no resources is warned of, since it would share every watch its clients
    /// make.
    pub(super) fn shares(&mut self, raw: Vec<Spanned<FileShare>>) -> Vec<Share> {
        let mut names = HashSet::new();
        let mut out = Vec::new();
        for (i, s) in raw.into_iter().enumerate() {
            let path = format!("shareWatches[{i}]");
            let at = s.referenced;
            let mut s: FileShare = s.value;
            self.unique_name(&mut names, &s.name, &format!("{path}.name"), "shareWatches");
            let m = s.match_.take().unwrap_or_default();
            if let Some(verbs) = &m.verbs {
                self.error(
                    verbs.referenced,
                    format!("{path}.match.verbs"),
                    "a shareWatches rule selects watches only; remove verbs",
                );
            }
            let selectors = self.match_selectors(m, &format!("{path}.match"));
            if selectors.resources.is_none() {
                self.warn(
                    at,
                    path.clone(),
                    "names no resources: every watch its clients make is shared",
                );
            }
            let by_name = match s.selectors.as_ref().map(|t| t.value.as_str()) {
                None | Some("byName") => true,
                Some("any") => false,
                Some(other) => {
                    let at = s.selectors.as_ref().map_or(at, |t| t.referenced);
                    self.error(
                        at,
                        format!("{path}.selectors"),
                        format!("{other:?} is neither byName nor any"),
                    );
                    true
                }
            };
            out.push(Share {
                name: s.name.value,
                selectors,
                by_name,
            });
        }
        out
    }
}
