//! `skewgate demo`, run as the real binary: what it says, the ports it takes, and what it leaves.

use std::path::PathBuf;
use std::process::Command;

#[path = "common/binary.rs"]
mod binary;

use binary::{skewgate, text};

/// `demo` says that a watch of the pinned namespace ends when the pin moves, and why; gives no
/// advice about flags it does not have; and removes its directory when it stops.
#[test]
fn demo_explains_itself_and_removes_its_directory_on_stop() {
    use std::io::{BufRead, BufReader};
    let ports = format!("{},{}", free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_skewgate"))
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--sim-ports",
            &ports,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("demo starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut guide = String::new();
    let mut dir = None;
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        guide.push_str(&line);
        guide.push('\n');
        if let Some(d) = line.strip_prefix("Ctrl-C stops the demo and removes ") {
            dir = Some(PathBuf::from(d.trim_end_matches('.')));
            break;
        }
    }
    let dir = dir.unwrap_or_else(|| panic!("no end of the guide:\n{guide}"));
    let (p29, p30) = ports.split_once(',').expect("two ports");
    assert!(
        guide.contains(&format!("127.0.0.1:{p29}")) && guide.contains(&format!("127.0.0.1:{p30}")),
        "the simulators moved to --sim-ports: {guide}"
    );
    assert!(dir.join("routes.yaml").exists(), "{}", dir.display());
    assert!(guide.contains("ends when the team-a pin moves"), "{guide}");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let out = child.wait_with_output().expect("demo ends");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!dir.exists(), "{} is left behind", dir.display());
    let log = text(&out.stderr);
    assert!(log.contains("skewgate serving"), "{log}");
    assert!(!log.contains("--tls-cert-file"), "{log}");
}

/// A port on loopback free a moment ago.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A demo whose admin port is taken says which flag moves it, and stops.
#[test]
fn demo_on_a_busy_port_says_how_to_move_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let admin = taken.local_addr().expect("addr").to_string();
    let ports = format!("{},{}", free_port(), free_port());
    let out = Command::new(env!("CARGO_BIN_EXE_skewgate"))
        .args(["demo", "--listen", "127.0.0.1:0", "--admin-listen", &admin])
        .args(["--sim-ports", &ports])
        .output()
        .expect("demo runs");
    let said = text(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("--admin-listen"), "{said}");
    let out = skewgate(&["demo", "--sim-ports", "1"]);
    assert!(text(&out.stderr).contains("--sim-ports gives 1 ports for 2 endpoints"));
}
