//! Misbehaving clients beside well-behaved ones: a client that stalls, half-sends, resets or sends
//! too much must never stall, reset or cut off another client, nor hold skewgate's resources.

mod common;
#[path = "common/pki.rs"]
mod pki;

use std::time::Duration;

use common::*;
use skewgate::edge::EdgeSettings;
use skewgate::proxy::ProxySettings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DEFAULTS: &str = "writes:\n  default: old\nreads:\n  default: old\n";

/// Whether skewgate closes `stream` (EOF or reset) within `secs`: a liveness bound for a hang, not
/// a timing threshold.
async fn closed_by_server(stream: &mut TcpStream, secs: u64) -> bool {
    let mut buf = [0u8; 256];
    let read = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(secs), read)
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_part_of_the_h2_preface_and_closes_is_closed() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    let mut partial = Vec::new();
    for sent in [&b"P"[..], b"PRI", b"PRI * HTTP/2.0\r\n"] {
        let mut s = TcpStream::connect(gate.server.addr).await.expect("connect");
        s.write_all(sent).await.expect("write");
        s.shutdown().await.expect("half-close");
        partial.push(s);
    }
    for s in &mut partial {
        assert!(closed_by_server(s, 10).await, "left open (CLOSE-WAIT)");
    }
    // Everyone else is served as before.
    let resp = h2()
        .get(format!("{}/version", gate.url()))
        .send()
        .await
        .expect("h2c");
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_no_request_is_closed_after_the_first_request_timeout() {
    let p = pki::pki();
    let sims = sims().await;
    let routes_file = temp_dir("idle").join("routes.yaml");
    std::fs::write(&routes_file, routes(&sims, DEFAULTS)).expect("routes");
    let (proxy, edge) = pki::settings(&p, true);
    let settings = (
        proxy,
        EdgeSettings {
            first_request_timeout: Duration::from_millis(300),
            ..edge
        },
    );
    let gate = gate_on(&routes_file, settings).await;

    // After a completed TLS handshake.
    let tcp = TcpStream::connect(gate.server.addr).await.expect("connect");
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(pki::client_config(&p.ca, None, &[b"h2"]))
        .connect(name, tcp)
        .await
        .expect("handshake");
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    assert!(
        read.await.is_ok(),
        "a TLS client that sends nothing is kept open"
    );

    // A client that sends its request in time is served.
    let alice = pki::client_config(&p.ca, Some(&p.alice), &[b"h2"]);
    let (status, _, _) = pki::tls_call(gate.server.addr, alice, true, "GET", "/version", &[], None)
        .await
        .expect("served");
    assert_eq!(status, 200);
}

/// An h2c client that asks for `lists` large LISTs with a zero receive window and never reads.
async fn non_reader(addr: std::net::SocketAddr, lists: usize) -> Vec<h2::client::ResponseFuture> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut send = send.ready().await.expect("ready");
    let mut pending = Vec::new();
    for _ in 0..lists {
        let req = http::Request::get(format!(
            "http://{addr}/api/v1/namespaces/default/configmaps"
        ))
        .body(())
        .expect("request");
        let (resp, _) = send.send_request(req, true).expect("send");
        pending.push(resp);
        send = send.ready().await.expect("ready");
    }
    pending
}

/// An HTTP/1.1 client with a small receive buffer that asks for a large LIST and never reads.
async fn h1_non_reader(addr: std::net::SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("receive buffer");
    let mut tcp = socket.connect(addr).await.expect("connect");
    tcp.write_all(b"GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    tcp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_do_not_read_never_stall_others_on_the_shared_connection() {
    let sims = sims().await;
    // 40 x 100 KB: each LIST is 4 MB, more than a stream's window.
    big_configmaps(&sims, 40, 100_000).await;
    let routes_file = temp_dir("nonreader").join("routes.yaml");
    std::fs::write(&routes_file, routes(&sims, DEFAULTS)).expect("routes");
    // One worker: every client shares its upstream connection.
    let settings = (
        ProxySettings::default(),
        EdgeSettings {
            workers: 1,
            ..EdgeSettings::default()
        },
    );
    let gate = gate_on(&routes_file, settings).await;
    let mut attackers = Vec::new();
    let mut h1_attackers = Vec::new();
    for _ in 0..3 {
        attackers.push(non_reader(gate.server.addr, 6).await);
        h1_attackers.push(h1_non_reader(gate.server.addr).await);
    }
    // Let the upstream send what the windows allow.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for client in [h1(), h2()] {
        let victim = async {
            let resp = client
                .get(format!(
                    "{}/api/v1/namespaces/default/configmaps",
                    gate.url()
                ))
                .send()
                .await
                .expect("list");
            resp.bytes().await.expect("body").len()
        };
        let len = tokio::time::timeout(Duration::from_secs(20), victim)
            .await
            .expect("a victim's LIST stalled behind clients that do not read");
        assert!(len > 4_000_000, "{len}");
    }
    drop(attackers);
    drop(h1_attackers);
}

/// Every header name in a `/debug/headers` answer (head and trailers) that names an identity.
fn identity_names(doc: &serde_json::Value) -> Vec<String> {
    let mut names = Vec::new();
    for part in [doc, &doc["trailers"]] {
        for k in part.as_object().into_iter().flat_map(|o| o.keys()) {
            if k.replace('_', "-").starts_with("x-remote-") {
                names.push(k.clone());
            }
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_headers_in_trailers_or_with_underscores_never_reach_the_apiserver() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;

    // HTTP/1.1 chunked trailers, and an underscore spelling in the head.
    let request = b"POST /debug/headers HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX_Remote_User: evil\r\nTransfer-Encoding: chunked\r\nTrailer: X-Remote-User, X-Remote-Group, X-Checksum\r\n\r\n5\r\nhello\r\n0\r\nX-Remote-User: evil\r\nX-Remote-Group: system:masters\r\nX-Checksum: 1\r\n\r\n";
    let (code, body) = raw_h1(gate.server.addr, request).await;
    assert_eq!(code, 200, "{body}");
    let json = body.lines().find(|l| l.starts_with('{')).unwrap_or("null");
    let doc: serde_json::Value = serde_json::from_str(json).expect("JSON");
    assert_eq!(identity_names(&doc), Vec::<String>::new(), "{doc}");
    assert_eq!(
        doc["trailers"]["x-checksum"][0], "1",
        "other trailers pass: {doc}"
    );

    // HTTP/2 trailers.
    let tcp = TcpStream::connect(gate.server.addr).await.expect("connect");
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut send = send.ready().await.expect("ready");
    let req = http::Request::post(format!("http://{}/debug/headers", gate.server.addr))
        .header("x_remote_group", "system:masters")
        .body(())
        .expect("request");
    let (resp, mut stream) = send.send_request(req, false).expect("send");
    stream
        .send_data(bytes::Bytes::from_static(b"hello"), false)
        .expect("data");
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-remote-user", "evil".parse().expect("value"));
    trailers.insert("x-remote-group", "system:masters".parse().expect("value"));
    trailers.insert("x_remote_extra_scopes", "all".parse().expect("value"));
    trailers.insert("x-checksum", "2".parse().expect("value"));
    stream.send_trailers(trailers).expect("trailers");
    let resp = resp.await.expect("response");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("chunk");
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    let doc: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(identity_names(&doc), Vec::<String>::new(), "{doc}");
    assert_eq!(doc["trailers"]["x-checksum"][0], "2", "{doc}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_request_bodies_are_400_and_never_abort_a_rollout() {
    let sims = sims().await;
    let gate = gate(&routes(
        &sims,
        "writes:\n  default: old\nreads:\n  default: old\n  rollouts:\n    - {name: to-new, to: new, stickyBy: user, percent: 100, abort: {errorRatio: 0.1, window: 1m, minRequests: 10}}\n",
    ))
    .await;
    let bad = b"GET /debug/headers HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n";
    let requests = || {
        let count = |c: &skewgate_sim::SimControls| {
            c.debug_requests.load(std::sync::atomic::Ordering::Relaxed)
        };
        count(&sims.new.controls) + count(&sims.old.controls)
    };
    let before = requests();
    for _ in 0..30 {
        let (code, body) = raw_h1(gate.server.addr, bad).await;
        assert_eq!(code, 400, "{body}");
    }
    // A body broken in what came with the head is refused before the apiserver starts on it.
    assert_eq!(
        requests() - before,
        0,
        "malformed requests reached the apiserver"
    );
    let m = gate.metrics().await;
    assert_eq!(
        metric(&m, "skewgate_rollout_aborted{rollout=\"to-new\"}"),
        0.0,
        "{m}"
    );
    assert_eq!(metric(&m, "skewgate_upstream_errors_total"), 0.0, "{m}");
    let resp = h1()
        .get(format!("{}/api/v1/namespaces", gate.url()))
        .send()
        .await
        .expect("read");
    assert_eq!(served_by(&resp), NEW);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_take_all_the_capacity() {
    let sims = sims().await;
    let routes_file = temp_dir("limits").join("routes.yaml");
    std::fs::write(&routes_file, routes(&sims, DEFAULTS)).expect("routes");
    let settings = ProxySettings {
        max_requests_per_client: 4,
        ..ProxySettings::default()
    };
    let gate = gate_on(&routes_file, settings).await;
    sims.old
        .controls
        .write_delay
        .store(500, std::sync::atomic::Ordering::Relaxed);
    let greedy = h2();
    // Watches are long-running: they do not count.
    let mut watches = Vec::new();
    for _ in 0..5 {
        let w = greedy
            .get(format!("{}/api/v1/configmaps?watch=true", gate.url()))
            .send()
            .await
            .expect("watch");
        assert_eq!(w.status(), 200);
        watches.push(w);
    }
    let create = |client: reqwest::Client, i: usize| {
        let url = format!("{}/api/v1/namespaces/default/configmaps", gate.url());
        async move {
            let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")}});
            let r = client.post(url).json(&cm).send().await.expect("create");
            let (code, header) = (r.status().as_u16(), r.headers().contains_key("retry-after"));
            // A refusal says when to retry in its Status too, as kube-apiserver's does.
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            let in_status = body["details"]["retryAfterSeconds"] == 1;
            (code, header && (code != 429 || in_status))
        }
    };
    let burst: Vec<_> = (0..10)
        .map(|i| tokio::spawn(create(greedy.clone(), i)))
        .collect();
    // Another client (another address) is served meanwhile.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let other = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().expect("ip"))
        .build()
        .expect("client");
    assert_eq!(create(other, 100).await.0, 201);
    let mut codes = Vec::new();
    for b in burst {
        codes.push(b.await.expect("join"));
    }
    let created = codes.iter().filter(|(c, _)| *c == 201).count();
    let refused = codes
        .iter()
        .filter(|(c, retry)| *c == 429 && *retry)
        .count();
    // Four in flight, four waiting their turn (served when places free), two refused.
    assert_eq!((created, refused), (8, 2), "{codes:?}");
    // The status page names the client held back, once, with how often.
    let recent = gate.debug_recent().await;
    let held = &recent["errors"][0];
    assert_eq!(held["code"], 429, "{recent}");
    assert_eq!(held["times"], 2, "{recent}");
    assert_eq!(held["client"], "address 127.0.0.1", "{recent}");
    assert_eq!(recent["errors"].as_array().map(Vec::len), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_larger_than_the_apiserver_accepts_are_431_and_cut_off_no_one() {
    use futures_util::StreamExt;
    let store = skewgate_sim::Store::new();
    let config = |v: &str| skewgate_sim::SimConfig {
        max_header_list_size: Some(16 * 1024),
        ..skewgate_sim::SimConfig::new(v)
    };
    let sims = Sims {
        old: skewgate_sim::start(config(OLD), store.clone(), loopback())
            .await
            .expect("sim"),
        new: skewgate_sim::start(config(NEW), store.clone(), loopback())
            .await
            .expect("sim"),
        store,
    };
    let routes_file = temp_dir("headers").join("routes.yaml");
    std::fs::write(&routes_file, routes(&sims, DEFAULTS)).expect("routes");
    let settings = (
        ProxySettings::default(),
        EdgeSettings {
            workers: 1,
            ..EdgeSettings::default()
        },
    );
    let gate = gate_on(&routes_file, settings).await;
    // A watch on the worker's upstream connection.
    let watch = h2()
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps?watch=true",
            gate.url()
        ))
        .send()
        .await
        .expect("watch");
    let mut events = watch.bytes_stream();

    let big = "a".repeat(64 * 1024);
    for client in [h1(), h2()] {
        let r = client
            .get(format!(
                "{}/api/v1/namespaces/default/configmaps",
                gate.url()
            ))
            .header("x-big", big.as_str())
            .send()
            .await
            .expect("answer");
        assert_eq!(r.status(), 431);
        let status: serde_json::Value = r.json().await.expect("Status");
        assert_eq!(status["kind"], "Status");
    }
    let recent = gate.debug_recent().await;
    assert_eq!(recent["errors"][0]["code"], 431, "{recent}");
    assert_eq!(recent["errors"][0]["times"], 2, "{recent}");
    // The watch lives on: it sees the next change.
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after", "namespace": "default"}});
    let created = h2()
        .post(format!(
            "{}/api/v1/namespaces/default/configmaps",
            gate.url()
        ))
        .json(&cm)
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    let event = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("the watch stalled")
        .expect("the watch ended")
        .expect("chunk");
    assert!(String::from_utf8_lossy(&event).contains("\"after\""));
}

/// The apiserver would take a 100 KB head (kube-apiserver allows 1 MiB), but skewgate's bound
/// (64 KiB by default, as Envoy's 60 KiB) refuses it unsent, with a Status; a head larger still is
/// cut off before it is read whole. Before the bound, such heads went upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_over_skewgates_bound_are_431_before_the_apiserver_sees_them() {
    let sims = sims().await;
    let routes_file = temp_dir("bound").join("routes.yaml");
    std::fs::write(&routes_file, routes(&sims, DEFAULTS)).expect("routes");
    // No health checks during the test: the apiservers' request counts are the clients' alone.
    let settings = ProxySettings {
        health_interval: Duration::from_secs(3600),
        ..ProxySettings::default()
    };
    let gate = gate_on(&routes_file, settings).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let requests = |s: &skewgate_sim::SimHandle| {
        s.controls
            .requests
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = requests(&sims.old) + requests(&sims.new);
    let url = format!("{}/api/v1/namespaces/default/configmaps", gate.url());
    let big = "a".repeat(100 * 1024);
    for client in [h1(), h2()] {
        let r = client
            .get(&url)
            .header("x-big", big.as_str())
            .send()
            .await
            .expect("answer");
        assert_eq!(r.status(), 431);
        let status: serde_json::Value = r.json().await.expect("Status");
        assert_eq!(status["kind"], "Status");
    }
    let huge = "a".repeat(400 * 1024);
    let r = h1().get(&url).header("x-huge", huge.as_str()).send().await;
    assert!(
        r.as_ref().map_or(true, |r| r.status() == 431),
        "a huge head is refused: {r:?}"
    );
    assert_eq!(
        requests(&sims.old) + requests(&sims.new),
        before,
        "nothing reached an apiserver"
    );
    // Heads of ordinary size pass.
    let ok = h1()
        .get(&url)
        .header("x-token", "a".repeat(8 * 1024))
        .send()
        .await
        .expect("answer");
    assert_eq!(ok.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_endpoint_is_avoided_and_upgrades_to_it_time_out() {
    let sims = sims().await;
    let (frozen, _hole) = black_hole().await;
    let text = format!(
        "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: old, endpoints: [\"{frozen}\", \"{}\"]}}\n  - {{name: frozen, endpoints: [\"{frozen}\"]}}\nwrites:\n  default: old\n  pins:\n    - {{name: frozen-ns, namespaces: [frozen], backend: frozen}}\nreads:\n  default: old\n",
        sims.old.url()
    );
    let routes_file = temp_dir("frozen").join("routes.yaml");
    std::fs::write(&routes_file, text).expect("routes");
    let settings = ProxySettings {
        response_timeout: Duration::from_secs(2),
        ..ProxySettings::default()
    };
    let gate = gate_on(&routes_file, settings).await;
    let ready = eventually(10, || async {
        let routes = gate.debug_routes().await;
        routes["backends"][0]["endpoints"][1]["state"] == "ready"
    })
    .await;
    assert!(ready, "the live endpoint passes its health check");
    // Every read goes to the endpoint that answers, none to the frozen one.
    let client = h2();
    for _ in 0..20 {
        let r = client
            .get(format!(
                "{}/api/v1/namespaces/default/configmaps",
                gate.url()
            ))
            .send()
            .await
            .expect("read");
        assert_eq!(r.status(), 200);
    }
    // An exec to a frozen apiserver is answered, not left hanging.
    let exec = b"GET /api/v1/namespaces/frozen/pods/p/exec?command=sh HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let (code, body) = raw_h1(gate.server.addr, exec).await;
    assert!(code == 504 || code == 503, "{code} {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_request_with_a_body_is_refused() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    let request = b"POST /api/v1/namespaces/default/pods/p/exec?command=cat HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 5\r\n\r\nhello";
    let (code, body) = raw_h1(gate.server.addr, request).await;
    assert_eq!(code, 400, "{body}");
}
