//! Records the commit the binary is built from, for `--version`, the startup line and
//! `skewgate_build_info`: the short hash of the checked-out commit, or `SKEWGATE_COMMIT` when set
//! (a build from a source archive, the image in deploy/), else `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SKEWGATE_COMMIT");
    println!("cargo:rerun-if-changed=.git/HEAD");
    // HEAD names the branch; the branch's ref file moves with each commit.
    if let Ok(head) = std::fs::read_to_string(".git/HEAD")
        && let Some(r) = head.trim().strip_prefix("ref: ")
    {
        println!("cargo:rerun-if-changed=.git/{r}");
    }
    let commit = std::env::var("SKEWGATE_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SKEWGATE_COMMIT={commit}");
}

fn git_commit() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_owned())
}
