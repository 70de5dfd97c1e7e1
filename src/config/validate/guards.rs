//! Validation of the `guards` section.

use std::collections::HashSet;

use serde_saphyr::Spanned;

use super::Validator;
use crate::config::raw::FileGuard;
use crate::config::table::{Guard, GuardAction, UnknownVersion};

impl Validator<'_> {
    pub(super) fn guards(&mut self, raw: Vec<Spanned<FileGuard>>) -> Vec<Guard> {
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
