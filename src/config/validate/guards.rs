//! Validation of the `guards` section.

use std::collections::HashSet;

use serde_saphyr::Spanned;

use super::Validator;
use crate::config::raw::FileGuard;
use crate::config::table::{Backend, Guard, GuardAction, UnknownVersion};

impl Validator<'_> {
    /// The guards; a warning for each when some backend declares no `version`: a guard compares
    /// the client's version with the serving backend's, and guards nothing on one without it.
    pub(super) fn guards(
        &mut self,
        raw: Vec<Spanned<FileGuard>>,
        backends: &[Backend],
    ) -> Vec<Guard> {
        let unversioned: Vec<&str> = backends
            .iter()
            .filter(|b| b.version.is_none())
            .map(|b| b.name.as_str())
            .collect();
        let mut names = HashSet::new();
        let mut out = Vec::new();
        for (i, g) in raw.into_iter().enumerate() {
            let path = format!("guards[{i}]");
            let at = g.referenced;
            let mut g: FileGuard = g.value;
            self.unique_name(&mut names, &g.name, &format!("{path}.name"), "guard");
            let selectors = self.match_selectors(
                g.match_.take().unwrap_or_default(),
                &format!("{path}.match"),
            );
            let action = match g.action.as_ref().map(|a| a.value.as_str()) {
                None | Some("reject") => GuardAction::Reject,
                Some("warn") => GuardAction::Warn,
                Some("preserve") => GuardAction::Preserve,
                Some(other) => {
                    let at = g.action.as_ref().map_or(at, |a| a.referenced);
                    self.error(
                        at,
                        format!("{path}.action"),
                        format!("{other:?} is not one of reject, warn, preserve"),
                    );
                    GuardAction::Reject
                }
            };
            let unknown_version = match g.unknown_version.as_ref().map(|u| u.value.as_str()) {
                None | Some("guard") => UnknownVersion::Guard,
                Some("pass") => UnknownVersion::Pass,
                Some(other) => {
                    let at = g.unknown_version.as_ref().map_or(at, |u| u.referenced);
                    self.error(
                        at,
                        format!("{path}.unknownVersion"),
                        format!("{other:?} is neither guard nor pass"),
                    );
                    UnknownVersion::Guard
                }
            };
            if !unversioned.is_empty() {
                self.warn(
                    at,
                    path.clone(),
                    format!(
                        "guards nothing on backend {} (no version declared): a guard compares the client's version with the serving backend's",
                        unversioned.join(", ")
                    ),
                );
            }
            out.push(Guard {
                name: g.name.value,
                selectors,
                action,
                unknown_version,
            });
        }
        out
    }
}
