//! `skewgate serve` as a process, its log read line by line.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A running `skewgate serve`: the process, its client and admin addresses, its log so far.
pub struct Serving {
    pub child: std::process::Child,
    pub addr: String,
    pub admin: String,
    /// Lines logged up to the address line.
    pub log: Vec<String>,
    /// Lines logged since.
    pub lines: std::sync::mpsc::Receiver<String>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `skewgate serve` on `routes` with `args`, under a file descriptor limit of `nofile` (soft
/// and hard) when given, and waits for it to say where it listens.
pub fn serve(routes: &std::path::Path, args: &[&str], nofile: Option<u32>) -> Serving {
    let exe = env!("CARGO_BIN_EXE_skewgate");
    let mut command = match nofile {
        Some(n) => {
            let mut c = Command::new("bash");
            c.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\""), exe]);
            c
        }
        None => Command::new(exe),
    };
    let mut child = command
        .args(["serve", "--routes"])
        .arg(routes)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .expect("skewgate serve starts");
    let stderr = child.stderr.take();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        let Some(stderr) = stderr else { return };
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Killed when dropped, also when no address is logged.
    let mut serving = Serving {
        child,
        addr: String::new(),
        admin: String::new(),
        log: Vec::new(),
        lines: rx,
    };
    let field = |line: &str, name: &str| {
        let text = line
            .split(&format!(" {name}="))
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next());
        let json = || {
            let v: serde_json::Value = serde_json::from_str(line).ok()?;
            v.get(name)?.as_str().map(str::to_owned)
        };
        text.map(str::to_owned).or_else(json)
    };
    while let Ok(line) = serving.lines.recv_timeout(Duration::from_secs(10)) {
        serving.log.push(line.clone());
        if let (Some(addr), Some(admin)) = (field(&line, "addr"), field(&line, "admin_addr")) {
            serving.addr = addr;
            serving.admin = admin;
            return serving;
        }
    }
    panic!("skewgate serve logged no address: {:?}", serving.log);
}

impl Serving {
    /// The lines logged within `secs` from now that `keep` keeps, waiting until `enough` of them.
    pub fn lines_where(
        &self,
        secs: u64,
        enough: usize,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let until = std::time::Instant::now() + Duration::from_secs(secs);
        let mut kept = Vec::new();
        while kept.len() < enough {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if keep(&line) => kept.push(line),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        kept
    }
}
