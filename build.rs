//! Records the commit the binary is built from, for `--version`, the startup line and
//! `skewgate_build_info`: the short hash of the checked-out commit, or `SKEWGATE_COMMIT` when set
//! (a build from a source archive, the image in deploy/), else `unknown`. Compiles the Kubernetes
//! `.proto` files in proto/ into the descriptor set `src/protobuf` reads protobuf bodies with.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Kubernetes release whose `.proto` files proto/ holds (one folder, the newest supported:
/// field numbers are never reused, so it reads every older client's bytes).
const KUBERNETES: &str = "v1.36.3";

fn main() {
    descriptors();
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

/// `$OUT_DIR/kubernetes.bin`: the FileDescriptorSet of every `.proto` under `proto/KUBERNETES`.
fn descriptors() {
    let root = Path::new("proto").join(KUBERNETES);
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root, &root, &mut files);
    files.sort();
    // Without the files' comments (source info): 1.8 MB of descriptors become a fraction of it,
    // in the binary and in the pool the first guarded protobuf update loads.
    let compiled = (|| -> Result<_, protox::Error> {
        let mut compiler = protox::Compiler::new([&root])?;
        compiler.include_source_info(false).include_imports(true);
        compiler.open_files(&files)?;
        Ok(compiler.file_descriptor_set())
    })();
    let set = match compiled {
        Ok(set) => set,
        Err(e) => panic!("compiling {}: {e}", root.display()),
    };
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bytes = prost::Message::encode_to_vec(&set);
    std::fs::write(out.join("kubernetes.bin"), bytes).expect("writing the descriptor set");
    println!("cargo:rustc-env=SKEWGATE_PROTO_KUBERNETES={KUBERNETES}");
}

/// Every `.proto` file under `dir`, relative to `root`.
fn collect(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "proto")
            && let Ok(relative) = path.strip_prefix(root)
        {
            out.push(relative.to_path_buf());
        }
    }
}
