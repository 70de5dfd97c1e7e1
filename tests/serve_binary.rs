//! `skewgate serve` as a process: it serves, ends watches cleanly on SIGTERM, and exits 0; out of
//! file descriptors, it keeps its admin listener answering and serves again when clients leave.

mod common;
#[path = "common/process.rs"]
mod process;

use std::process::Command;
use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use process::{Serving, serve};

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
    let mut serving = serve(
        &routes_file,
        &["--shutdown-grace", "5s", "--shutdown-delay", "2s"],
        None,
    );
    let (addr, log) = (serving.addr.clone(), serving.log.clone());
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
        .args(["-TERM", &serving.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    // First the delay: not ready, so the load balancer stops sending, but still serving.
    let admin = serving.admin.clone();
    assert!(
        eventually(2, || async {
            reqwest::get(format!("http://{admin}/readyz"))
                .await
                .is_ok_and(|r| r.status() == 503)
        })
        .await,
        "not ready once SIGTERM came"
    );
    let during = h1()
        .get(format!("http://{addr}/api/v1/namespaces"))
        .send()
        .await
        .expect("served during the delay");
    assert_eq!(during.status(), 200);
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
    let status = tokio::task::block_in_place(|| serving.child.wait().expect("wait"));
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

/// Clients that connect and say nothing, more than skewgate has descriptors for: its admin listener
/// still answers, nothing spins, and once they leave a client is served. Before the bound, accepts
/// took every descriptor, and the admin listener and upstream connects met EMFILE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_admin_listener_answers_and_clients_are_served_again() {
    let sims = sims().await;
    let dir = temp_dir("nofile");
    let routes_file = dir.join("routes.yaml");
    std::fs::write(
        &routes_file,
        routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n"),
    )
    .expect("routes");
    let serving = serve(&routes_file, &[], Some(160));
    let Serving {
        addr, admin, log, ..
    } = &serving;
    assert!(
        log.iter().any(|l| l.contains("max_client_connections=96")),
        "160 descriptors less 64 kept back: {log:?}"
    );
    let mut held = Vec::new();
    for _ in 0..240 {
        if let Ok(Ok(s)) = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(&addr),
        )
        .await
        {
            held.push(s);
        }
    }
    assert!(
        held.len() > 160,
        "more connections than descriptors: {}",
        held.len()
    );
    let client = h1();
    let health = tokio::time::timeout(
        Duration::from_secs(5),
        client.get(format!("http://{admin}/healthz")).send(),
    )
    .await;
    assert!(
        matches!(&health, Ok(Ok(r)) if r.status() == 200),
        "the admin listener answers: {health:?}"
    );
    drop(held);
    let served = tokio::time::timeout(
        Duration::from_secs(10),
        client
            .get(format!(
                "http://{addr}/api/v1/namespaces/default/configmaps"
            ))
            .send(),
    )
    .await;
    assert!(
        matches!(&served, Ok(Ok(r)) if r.status() == 200),
        "a client is served once the others left: {served:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_keeps_failing_the_same_way_is_logged_once() {
    let dir = temp_dir("serve-dead");
    let routes_file = dir.join("routes.yaml");
    let dead = refused_address();
    std::fs::write(
        &routes_file,
        format!(
            "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: a, endpoints: [\"{dead}\"]}}\nwrites:\n  default: a\nreads:\n  default: a\n"
        ),
    )
    .expect("routes");
    let serving = serve(&routes_file, &["--no-access-log"], None);
    // A request's dial fails too, in other words than the check's: still one line.
    let _ = h1()
        .get(format!("http://{}/api/v1/namespaces", serving.addr))
        .send()
        .await;
    // Three health checks (every 5 s).
    let not_ready = |l: &str| l.contains("endpoint is not ready");
    let mut lines: Vec<String> = serving
        .log
        .iter()
        .filter(|l| not_ready(l))
        .cloned()
        .collect();
    lines.extend(serving.lines_where(12, 10, not_ready));
    assert_eq!(lines.len(), 1, "{lines:?}");
}

/// An address nothing listens on: a port bound, then let go.
fn refused_address() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    format!("http://127.0.0.1:{port}")
}
