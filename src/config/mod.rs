//! Route files: parsed into raw serde types (unknown fields rejected), validated with errors that name
//! file, line and field path, and compiled into an immutable `RouteTable`.

mod blank;
mod error;
mod raw;
mod reload;
mod schedule;
mod selector;
mod shape;
mod table;
mod timing;
mod tree;
mod validate;

use std::path::{Path, PathBuf};

pub use error::{ConfigError, ConfigErrors};
pub(crate) use reload::{Fingerprint, Watch, fingerprint, spawn_watcher};
pub use schedule::Percent;
pub(crate) use schedule::Schedule;
pub(crate) use selector::{NamePattern, Part, ResourcePattern, Selector, VerbSet};
pub(crate) use table::{Abort, BackendId, Endpoint, Pin, Selectors};
pub use table::{Guard, GuardAction, Share, UnknownVersion};
pub use table::{PinReads, RouteTable, SkewPolicy, StickyBy};
pub use timing::{close_flips, fleet_settle, move_warnings, within_horizon};
pub(crate) use validate::may_meet;

/// Parses and validates the text of one route file; `file` names it in errors.
///
/// First the YAML and its shape (every unknown field, wrong type and missing field at once), then
/// the values (every bad reference, name, pattern and time at once).
pub fn parse_route_table(file: &Path, text: &str) -> Result<RouteTable, ConfigErrors> {
    let root = tree::read(file, text).map_err(ConfigErrors)?;
    let problems = shape::check(file, &root);
    if problems.errors.is_empty() {
        let raw: raw::FileRouteTable =
            serde_saphyr::from_str(text).map_err(|e| syntax_error(file, &e))?;
        return validate::validate(file, raw);
    }
    // Unknown fields alone leave the rest readable: the values are checked too, in the file with
    // those fields blanked out (lines kept, so every place stays true), and all are reported.
    let only_unknown = problems.only_unknown_fields();
    let mut errors = problems.errors;
    if only_unknown
        && let Some(rest) = blank::without(text, &problems.unknown)
        && let Ok(root) = tree::read(file, &rest)
        && shape::check(file, &root).errors.is_empty()
        && let Ok(raw) = serde_saphyr::from_str::<raw::FileRouteTable>(&rest)
        && let Err(more) = validate::validate(file, raw)
    {
        errors.extend(more.0);
        errors.sort_by_key(|e| (e.line, e.column));
    }
    Err(ConfigErrors(errors))
}

/// Reads, parses and validates one route file.
pub fn load_file(file: &Path) -> Result<RouteTable, ConfigErrors> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| ConfigError::whole_file(file, format!("cannot read the file: {e}")))?;
    parse_route_table(file, &text)
}

/// Loads `--routes PATH`: a route file, or a directory holding exactly one `*.yaml`/`*.yml` route file
/// (hidden entries, such as a mounted ConfigMap's `..data`, are ignored).
pub fn load_path(path: &Path) -> Result<RouteTable, ConfigErrors> {
    if !path.is_dir() {
        return load_file(path);
    }
    let files = route_files_in(path)?;
    match files.as_slice() {
        [one] => load_file(one),
        [] => Err(ConfigError::whole_file(
            path,
            "the directory holds no *.yaml or *.yml route file",
        )
        .into()),
        many => Err(ConfigError::whole_file(
            path,
            format!(
                "the directory holds {} route files ({}); a route table is one file, so keep one",
                many.len(),
                many.iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .into()),
    }
}

/// The route files in a directory, sorted by name.
pub fn route_files_in(dir: &Path) -> Result<Vec<PathBuf>, ConfigErrors> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| ConfigError::whole_file(dir, format!("cannot read the directory: {e}")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !name.starts_with('.')
                && (name.ends_with(".yaml") || name.ends_with(".yml"))
                && p.is_file()
        })
        .collect();
    files.sort();
    Ok(files)
}

fn syntax_error(file: &Path, e: &serde_saphyr::Error) -> ConfigError {
    let plain = e.without_snippet().to_string();
    // The library appends " at line L, column C"; the location is given in front instead.
    let message = match plain.rsplit_once(" at line ") {
        Some((msg, _)) => msg.to_owned(),
        None => plain,
    };
    match e.location() {
        Some(at) => ConfigError::at(file, at, "", message),
        None => ConfigError::whole_file(file, message),
    }
}

#[cfg(test)]
mod share_tests;
#[cfg(test)]
mod skew_policy_tests;
#[cfg(test)]
mod tests;
