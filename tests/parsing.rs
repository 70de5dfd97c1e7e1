//! Request targets read as kube-apiserver reads them (Go's net/url and requestinfo.go), through the
//! running proxy: a `#` stays in the name (an HTTP/1.1 DELETE of `keep#x` does not delete `keep`),
//! and a query pair Go drops (`watch=false;`) does not make a watch of a LIST.

mod common;

use common::*;
use skewgate::proxy::ProxySettings;

const DEFAULTS: &str = "writes:\n  default: old\nreads:\n  default: old\n";

async fn configmap(gate: &Gate, name: &str) -> u16 {
    let url = format!("{}/api/v1/namespaces/default/configmaps/{name}", gate.url());
    h1().get(url).send().await.expect("get").status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hash_in_the_target_is_part_of_the_name_as_the_apiserver_reads_it() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"keep"}}"#;
    let created = h1()
        .post(format!(
            "{}/api/v1/namespaces/default/configmaps",
            gate.url()
        ))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    // skewgate's own HTTP/1.1 server (no body) and hyper's (a body): neither deletes `keep`.
    for request in [
        "DELETE /api/v1/namespaces/default/configmaps/keep#not-this-one HTTP/1.1\r\nHost: x\r\n\r\n",
        "DELETE /api/v1/namespaces/default/configmaps/keep#not-this-one HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    ] {
        let (code, body) = raw_h1(gate.server.addr, request.as_bytes()).await;
        assert_eq!(code, 404, "{body}");
        assert_eq!(configmap(&gate, "keep").await, 200, "`keep` was deleted");
    }
}

/// The status codes of the HTTP/1.1 responses `requests` (written at once, pipelined) get, read
/// until `n` have come or the server closes.
async fn pipelined(addr: std::net::SocketAddr, requests: &str, n: usize) -> Vec<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    conn.write_all(requests.as_bytes()).await.expect("write");
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    let codes = |text: &str| -> Vec<u16> {
        text.match_indices("HTTP/1.")
            .filter_map(|(i, _)| text.get(i + 9..i + 12)?.parse().ok())
            .collect()
    };
    let read = async {
        while codes(&text).len() < n {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(k) => text.push_str(&String::from_utf8_lossy(&buf[..k])),
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), read).await;
    codes(&text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hash_in_a_request_pipelined_after_one_hyper_serves_is_part_of_the_name_too() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    let json = |name: &str| {
        format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}}}}"#)
    };
    let post = "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
    let create = |name: &str| {
        let body = json(name);
        format!("{post}Content-Length: {}\r\n\r\n{body}", body.len())
    };
    let keep = pipelined(gate.server.addr, &create("keep"), 1).await;
    assert_eq!(keep, [201]);
    // The same create with a chunked body, and as HTTP/1.0 (kept alive).
    let chunked = |name: &str| {
        let body = json(name);
        format!(
            "{post}Transfer-Encoding: chunked\r\n\r\n{:x};ext=1\r\n{body}\r\n0\r\nX-Trailer: t\r\n\r\n",
            body.len()
        )
    };
    let old = |name: &str| {
        create(name).replacen("HTTP/1.1\r\n", "HTTP/1.0\r\nConnection: keep-alive\r\n", 1)
    };
    // A request with a body (hyper's) and, behind it in the same write, DELETEs of `keep#…`
    // without and with a body: hyper reads the first request only, and the fast path the next.
    for delete in [
        "DELETE /api/v1/namespaces/default/configmaps/keep#not-this-one HTTP/1.1\r\nHost: x\r\n\r\n",
        "DELETE /api/v1/namespaces/default/configmaps/keep#not-this-one HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    ] {
        for (framing, first) in [
            ("length", &create as &dyn Fn(&str) -> String),
            ("chunked", &chunked),
            ("HTTP/1.0", &old),
        ] {
            let name = format!("other-{}-{}", delete.len(), framing.len());
            let requests = format!("{}{delete}", first(&name));
            let codes = pipelined(gate.server.addr, &requests, 2).await;
            assert_eq!(codes, [201, 404], "{framing}: {delete}");
            assert_eq!(configmap(&gate, "keep").await, 200, "`keep` was deleted");
            assert_eq!(configmap(&gate, &name).await, 200, "{framing}: not created");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_whose_watch_pair_go_drops_is_counted_as_a_list() {
    let sims = sims().await;
    let settings = ProxySettings {
        max_requests_per_client: 1,
        ..ProxySettings::default()
    };
    let gate = gate_with(&routes(&sims, DEFAULTS), settings).await;
    // Watches are not counted against the per-client limit; LISTs are. The apiserver reads each of
    // these as a LIST, and so must skewgate: each shows in the per-client accounting as a list.
    for query in ["watch=false;", "watch=%zz"] {
        let url = format!(
            "{}/api/v1/namespaces/default/configmaps?{query}",
            gate.url()
        );
        let resp = h1().get(url).send().await.expect("list");
        assert_eq!(resp.status(), 200, "{query}");
        let text = resp.text().await.expect("body");
        assert!(
            text.contains("\"kind\":\"ConfigMapList\""),
            "{query}: {text}"
        );
    }
    let metrics = gate.metrics().await;
    let watches = metrics
        .lines()
        .filter(|l| l.starts_with("skewgate_requests_total") && l.contains("verb=\"watch\""))
        .count();
    assert_eq!(watches, 0, "a LIST was taken for a watch:\n{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_go_refuses_are_refused_with_a_status_and_not_sent() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    // Each with the code the real kube-apiserver (v1.35.6, ../shared/envtest) gave the same bytes.
    for (request, go) in [
        ("GET /version HTTP/1.1\r\n\r\n", 400),
        ("GET /version HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (
            "GET /api/v1/namespaces/%zz/pods HTTP/1.1\r\nHost: a\r\n\r\n",
            400,
        ),
        (
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            501,
        ),
        (
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
            501,
        ),
        (
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            501,
        ),
    ] {
        let (code, body) = raw_h1(gate.server.addr, request.as_bytes()).await;
        assert_eq!(code, go, "{request:?}: {body}");
        // skewgate's own answer: the apiserver was not asked.
        assert!(body.contains("\"kind\":\"Status\""), "{request:?}: {body}");
        assert!(body.contains("nothing was sent"), "{request:?}: {body}");
    }
}

/// Go closes the connection after refusing a head, and so does skewgate: behind a transfer coding
/// it refuses, where the next request begins is not agreed (hyper would skip a chunked body Go
/// never reads), so nothing pipelined behind it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_pipelined_behind_a_refused_head_is_served() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    let base = gate.url();
    let post = h1()
        .post(format!("{base}/api/v1/namespaces/default/configmaps"))
        .json(&serde_json::json!({"metadata": {"name": "kept"}}))
        .send()
        .await
        .expect("create");
    assert_eq!(post.status(), 201);
    for coding in [
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: chunked, chunked\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    ] {
        let request = format!(
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: a\r\n{coding}\r\n0\r\n\r\n\
             DELETE /api/v1/namespaces/default/configmaps/kept HTTP/1.1\r\nHost: a\r\n\r\n"
        );
        let mut s = tokio::net::TcpStream::connect(gate.server.addr)
            .await
            .expect("connect");
        tokio::io::AsyncWriteExt::write_all(&mut s, request.as_bytes())
            .await
            .expect("write");
        let mut out = Vec::new();
        let read = tokio::io::AsyncReadExt::read_to_end(&mut s, &mut out);
        let closed = tokio::time::timeout(std::time::Duration::from_secs(10), read).await;
        let text = String::from_utf8_lossy(&out).into_owned();
        assert!(
            closed.is_ok(),
            "{coding:?}: the connection stayed open: {text}"
        );
        assert!(text.starts_with("HTTP/1.1 501"), "{coding:?}: {text}");
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{coding:?}: {text}");
        assert!(
            text.to_ascii_lowercase().contains("connection: close"),
            "{text}"
        );
    }
    let kept = h1()
        .get(format!("{base}/api/v1/namespaces/default/configmaps/kept"))
        .send()
        .await
        .expect("get");
    assert_eq!(kept.status(), 200, "the pipelined DELETE was served");
}
