//! Errors a route file can have: each names the file, the line and column, the field path, and what to do.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_saphyr::Location;

/// One problem in one route file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (0 when the problem is the whole file).
    pub line: u32,
    /// 1-based column (0 when unknown).
    pub column: u32,
    /// The field path, e.g. `writes.pins[2].backend`; empty for syntax errors.
    pub field: String,
    /// What is wrong and what to do about it.
    pub message: String,
}

impl ConfigError {
    /// An error about the whole file (it cannot be read, or a directory holds no route file).
    pub fn whole_file(file: &Path, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            line: 0,
            column: 0,
            field: String::new(),
            message: message.into(),
        }
    }

    /// An error at a location in the file.
    pub fn at(
        file: &Path,
        at: Location,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            line: at.line() as u32,
            column: at.column() as u32,
            field: field.into(),
            message: message.into(),
        }
    }
}

impl ConfigError {
    /// The error as a compiler shows one: `level: field: message`, then where, then the line of
    /// `source` (the file's text) with a caret under the place.
    pub fn render(&self, level: &str, source: Option<&str>) -> String {
        let mut out = if self.field.is_empty() {
            format!("{level}: {}\n", self.message)
        } else {
            format!("{level}: {}: {}\n", self.field, self.message)
        };
        let file = self.file.display();
        if self.line == 0 {
            out.push_str(&format!("  --> {file}\n"));
            return out;
        }
        out.push_str(&format!("  --> {file}:{}:{}\n", self.line, self.column));
        let Some(text) = source.and_then(|s| s.lines().nth(self.line as usize - 1)) else {
            return out;
        };
        let number = self.line.to_string();
        let pad = " ".repeat(number.len());
        let column = (self.column as usize).saturating_sub(1);
        let rest: String = text.chars().skip(column).collect();
        let width = rest
            .find(|c: char| c.is_whitespace() || ",]}:".contains(c))
            .unwrap_or(rest.len())
            .max(1);
        out.push_str(&format!(
            "{pad} |\n{number} | {text}\n{pad} | {}{}\n",
            " ".repeat(column),
            "^".repeat(width)
        ));
        out
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every problem found in a set of route files; never empty.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }
}
