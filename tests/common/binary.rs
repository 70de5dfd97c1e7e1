//! The real `skewgate` binary, run from the repository's root: what a test of a command needs.

use std::process::{Command, Output};

/// `skewgate ARGS`, run to its end.
pub fn skewgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skewgate"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs")
}

/// Bytes a command wrote, as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
