//! `skewgate serve` as a process: it serves, ends watches cleanly on SIGTERM, and exits 0.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use futures_util::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_stops_gracefully_on_sigterm() {
    let sims = sims().await;
    let dir = temp_dir("serve");
    let routes_file = dir.join("routes.yaml");
    std::fs::write(
        &routes_file,
        routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n"),
    )
    .expect("routes");
    let mut child = Command::new(env!("CARGO_BIN_EXE_skewgate"))
        .args(["serve", "--routes"])
        .arg(&routes_file)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--shutdown-grace",
            "5s",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("skewgate serve starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    let addr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a log line");
        log.push(line.clone());
        if let Some(rest) = line.split(" addr=").nth(1) {
            break rest.split_whitespace().next().expect("address").to_owned();
        }
    };
    assert!(
        log.iter().any(|l| l.contains("cleartext")),
        "it says it serves in cleartext: {log:?}"
    );
    let client = h1();
    let resp = client
        .get(format!(
            "http://{addr}/api/v1/namespaces/default/configmaps?watch=1"
        ))
        .send()
        .await
        .expect("watch");
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();

    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    // The watch ends cleanly: no error, nothing appended.
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        let mut chunks = Vec::new();
        while let Some(c) = body.next().await {
            chunks.push(c.map(|b| b.len()));
        }
        chunks
    })
    .await
    .expect("the watch ends at shutdown");
    assert!(ended.iter().all(Result::is_ok), "{ended:?}");
    let status = tokio::task::spawn_blocking(move || child.wait().expect("wait"))
        .await
        .expect("join");
    assert_eq!(status.code(), Some(0), "exit code");
    assert!(
        client
            .get(format!("http://{addr}/api/v1/namespaces"))
            .send()
            .await
            .is_err(),
        "no longer accepting"
    );
}
