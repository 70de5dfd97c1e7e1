//! The access log of `skewgate serve`: one line per finished request, in text or JSON, with who
//! asked what, the rule and backend that served it, the code, the bytes, the duration and the
//! upstream error; watches when they end; off with `--no-access-log`.

mod common;
#[path = "common/pki.rs"]
mod pki;
#[path = "common/process.rs"]
mod process;

use std::time::Duration;

use common::*;
use process::serve;
use serde_json::Value;

const TABLE: &str = "  - name: gone
    endpoints: [http://127.0.0.1:1]
writes:
  default: old
  pins:
    - name: team-a
      namespaces: [team-a]
      backend: new
    - name: dead
      namespaces: [dead]
      backend: gone
reads:
  default: old
";

/// The route file: the simulators, a backend nothing listens on, and pins to both.
fn routes_file(sims: &Sims, tag: &str) -> std::path::PathBuf {
    let dir = temp_dir(tag);
    let file = dir.join("routes.yaml");
    let text = routes(sims, "") + TABLE;
    std::fs::write(&file, text).expect("routes");
    file
}

fn is_access(line: &str) -> bool {
    line.contains("skewgate::access")
}

/// The value of `name=` in a text line (quotes removed).
fn field<'l>(line: &'l str, name: &str) -> &'l str {
    let rest = line
        .split(&format!(" {name}="))
        .nth(1)
        .unwrap_or_else(|| panic!("no {name} in {line}"));
    if let Some(quoted) = rest.strip_prefix('"') {
        quoted.split('"').next().unwrap_or("")
    } else {
        rest.split_whitespace().next().unwrap_or("")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_finished_request_is_one_text_line_with_its_rule_backend_code_and_error() {
    let sims = sims().await;
    let serving = serve(&routes_file(&sims, "access-text"), &[], None);
    let base = format!("http://{}", serving.addr);
    let client = h1();
    let get = |path: &str| client.get(format!("{base}{path}")).send();
    let missing = get("/api/v1/namespaces/team-a/configmaps/missing")
        .await
        .expect("get");
    assert_eq!(missing.status(), 404);
    let list = get("/api/v1/namespaces/default/configmaps")
        .await
        .expect("list");
    let list_len = list.bytes().await.expect("body").len();
    let dead = get("/api/v1/namespaces/dead/configmaps")
        .await
        .expect("dead");
    assert_eq!(dead.status(), 503);

    let lines = serving.lines_where(10, 3, is_access);
    assert_eq!(lines.len(), 3, "{lines:?}");
    let (get_line, list_line, dead_line) = (&lines[0], &lines[1], &lines[2]);
    assert!(get_line.contains(" INFO "), "{get_line}");
    assert_eq!(field(get_line, "verb"), "get");
    assert_eq!(field(get_line, "resource"), "configmaps");
    assert_eq!(field(get_line, "namespace"), "team-a");
    assert_eq!(field(get_line, "name"), "missing");
    assert_eq!(field(get_line, "rule"), "team-a");
    assert_eq!(field(get_line, "backend"), "new");
    assert_eq!(field(get_line, "code"), "404");
    assert_eq!(field(get_line, "user"), "-");
    assert!(field(get_line, "remote").starts_with("127.0.0.1:"));
    assert!(field(get_line, "duration_ms").parse::<f64>().is_ok());
    assert_eq!(field(get_line, "error"), "");

    assert_eq!(field(list_line, "verb"), "list");
    assert_eq!(field(list_line, "rule"), "reads.default");
    assert_eq!(field(list_line, "backend"), "old");
    assert_eq!(field(list_line, "code"), "200");
    assert_eq!(field(list_line, "bytes"), list_len.to_string());

    assert_eq!(field(dead_line, "backend"), "gone");
    assert_eq!(field(dead_line, "code"), "503");
    // Refused at connect, or (once the endpoint is marked down) unavailable.
    let error = field(dead_line, "error");
    assert!(
        (error.starts_with("connect: ") || error.starts_with("unavailable: "))
            && error.contains("127.0.0.1:1"),
        "{dead_line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_is_logged_when_it_ends_with_its_duration() {
    let sims = sims().await;
    let serving = serve(&routes_file(&sims, "access-watch"), &[], None);
    let url = format!(
        "http://{}/api/v1/namespaces/team-a/configmaps?watch=1",
        serving.addr
    );
    let watch = h1().get(url).send().await.expect("watch");
    assert_eq!(watch.status(), 200);
    // Open, it is not logged yet.
    let early = serving.lines_where(1, 1, is_access);
    assert!(early.is_empty(), "{early:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(watch);
    let lines = serving.lines_where(10, 1, is_access);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(field(&lines[0], "verb"), "watch");
    assert_eq!(field(&lines[0], "backend"), "new");
    let ms: f64 = field(&lines[0], "duration_ms").parse().expect("ms");
    assert!(ms >= 1400.0, "open for 1.5 s at least: {}", lines[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_name_the_certificate_user_and_carry_numbers() {
    let sims = sims().await;
    let p = pki::pki();
    let file = routes_file(&sims, "access-json");
    let path = |f: &std::path::Path| f.to_str().expect("utf-8").to_owned();
    let serving = serve(
        &file,
        &[
            "--log-format",
            "json",
            "--tls-cert-file",
            &path(&p.serving.cert_file),
            "--tls-private-key-file",
            &path(&p.serving.key_file),
            "--client-ca-file",
            &path(&p.ca.cert_file),
        ],
        None,
    );
    let addr = serving.addr.parse().expect("addr");
    let config = pki::client_config(&p.ca, Some(&p.alice), &[b"h2"]);
    let (code, _, _) = pki::tls_call(
        addr,
        config,
        true,
        "GET",
        "/api/v1/namespaces/team-a/configmaps",
        &[],
        None,
    )
    .await
    .expect("call");
    let lines = serving.lines_where(10, 1, is_access);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let v: Value = serde_json::from_str(&lines[0]).expect("one JSON object per line");
    assert_eq!(v["target"], "skewgate::access");
    assert_eq!(v["level"], "INFO");
    assert_eq!(v["user"], "alice");
    assert_eq!(v["verb"], "list");
    assert_eq!(v["namespace"], "team-a");
    assert_eq!(v["rule"], "team-a");
    assert_eq!(v["backend"], "new");
    assert_eq!(v["code"].as_u64(), Some(u64::from(code)));
    assert!(v["bytes"].is_u64() && v["duration_ms"].is_f64(), "{v}");
    assert!(v["timestamp"].is_string(), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_access_log_leaves_requests_out_and_keeps_the_rest() {
    let sims = sims().await;
    let serving = serve(
        &routes_file(&sims, "access-off"),
        &["--no-access-log"],
        None,
    );
    assert!(
        serving.log.iter().any(|l| l.contains("access_log=false")),
        "{:?}",
        serving.log
    );
    let resp = h1()
        .get(format!("http://{}/api/v1/namespaces", serving.addr))
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status(), 200);
    let lines = serving.lines_where(2, 1, is_access);
    assert!(lines.is_empty(), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_held_by_a_moving_pins_fence_says_for_how_long() {
    let sims = sims().await;
    create_configmap(&sims.old.url(), "team-a", "cm").await;
    // Moved at the current whole second, with a 3 s fence: its writes are held at least 2 s
    // from now.
    let flip_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let text = routes(
        &sims,
        &format!(
            "writes:\n  default: old\n  fence: 3s\n  pins:\n    - {{name: team-a, namespaces: [team-a], backend: new, from: old, flipAt: {flip_at}}}\nreads:\n  default: old\n"
        ),
    );
    let file = temp_dir("access-held").join("routes.yaml");
    std::fs::write(&file, text).expect("routes");
    let serving = serve(&file, &[], None);
    let base = format!(
        "http://{}/api/v1/namespaces/team-a/configmaps/cm",
        serving.addr
    );
    let patched = h1()
        .patch(&base)
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"data":{"k":"v"}}"#)
        .send()
        .await
        .expect("patch");
    assert_eq!(patched.status(), 200);
    let got = h1().get(&base).send().await.expect("get");
    assert_eq!(got.status(), 200);
    let lines = serving.lines_where(10, 2, is_access);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(field(&lines[0], "verb"), "patch");
    assert_eq!(field(&lines[0], "backend"), "new");
    let held: f64 = field(&lines[0], "held_ms").parse().expect("held_ms");
    let took: f64 = field(&lines[0], "duration_ms")
        .parse()
        .expect("duration_ms");
    assert!(held >= 1000.0 && held <= took, "{}", lines[0]);
    assert_eq!(field(&lines[1], "held_ms"), "0.0", "a read is never held");
}
