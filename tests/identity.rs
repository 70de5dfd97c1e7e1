//! TLS and identity: client certificates become X-Remote-User/Group upstream, identity headers a
//! client sends never pass, tokens do, a certificate from another CA is refused, the upstream
//! refuses a proxy without the front-proxy certificate, and real kubectl works through TLS.

mod common;
#[path = "common/pki.rs"]
mod pki;

use std::net::SocketAddr;
use std::sync::Arc;

use common::*;
use pki::{Ca, Pki, pki};
use serde_json::Value;
use skewgate::edge::EdgeSettings;
use skewgate_sim::{self as sim, SimConfig, SimHandle, Store};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A ServiceAccount token as kube-apiserver issues one (the signature is not skewgate's to check).
fn service_account_token(namespace: &str, name: &str) -> String {
    use base64::Engine;
    let b64 = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let claims = serde_json::json!({
        "iss": "https://kubernetes.default.svc.cluster.local",
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": "u"}},
    });
    format!(
        "{}.{}.c2ln",
        b64(r#"{"alg":"RS256"}"#),
        b64(&claims.to_string())
    )
}

/// Two simulators serving TLS that require the front-proxy client certificate.
async fn tls_sims(p: &Pki) -> (Store, SimHandle, SimHandle) {
    let store = Store::new();
    let tls = Some(pki::server_requiring_clients(
        &p.apiserver,
        &p.front_proxy_ca,
    ));
    let config = |v: &str| SimConfig {
        tls: tls.clone(),
        ..SimConfig::new(v)
    };
    let old = sim::start(config(OLD), store.clone(), loopback())
        .await
        .expect("sim");
    let new = sim::start(config(NEW), store.clone(), loopback())
        .await
        .expect("sim");
    (store, old, new)
}

/// skewgate with `settings` in front of two TLS simulators that require the front-proxy
/// certificate, with the test's route table. The simulators live as long as the returned value.
async fn tls_gate(p: &Pki, settings: impl Into<Tuning>) -> (Gate, (SimHandle, SimHandle)) {
    let (_store, old, new) = tls_sims(p).await;
    let routes = temp_dir("tls-routes").join("routes.yaml");
    std::fs::write(&routes, table(&old, &new)).expect("routes");
    (gate_on(&routes, settings).await, (old, new))
}

fn table(old: &SimHandle, new: &SimHandle) -> String {
    format!(
        "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: old, endpoints: [\"{}\"]}}\n  - {{name: new, endpoints: [\"{}\"]}}\nwrites:\n  default: old\nreads:\n  default: old\n  rollouts:\n    - {{name: ops-to-new, match: {{groups: [ops], resources: [configmaps]}}, to: new, stickyBy: user, percent: 100}}\n    - {{name: sa-to-new, match: {{users: [\"system:serviceaccount:*\"], resources: [secrets]}}, to: new, stickyBy: user, percent: 100}}\n",
        old.url(),
        new.url()
    )
}

/// One GET over TLS with `config`; h2 or HTTP/1.1 by `h2`. Err when the connection fails.
async fn tls_request(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    h2: bool,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, String, Value), String> {
    pki::tls_call(addr, config, h2, "GET", path, headers, None).await
}

fn values(headers: &Value, name: &str) -> Vec<String> {
    headers[name]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_become_front_proxy_identity_and_spoofed_headers_never_pass() {
    let p = pki();
    let (gate, _sims) = tls_gate(&p, pki::settings(&p, true)).await;
    let addr = gate.server.addr;
    let alice = |alpn: &[&[u8]]| pki::client_config(&p.ca, Some(&p.alice), alpn);
    let spoofed = [
        ("X-Remote-User", "admin"),
        ("X-REMOTE-GROUP", "system:masters"),
        ("x-remote-group", "root"),
        ("X-Remote-Extra-Scopes", "everything"),
        ("Impersonate-User", "bob"),
    ];
    for h2 in [false, true] {
        let alpn: &[&[u8]] = if h2 { &[b"h2"] } else { &[b"http/1.1"] };
        let (status, _, headers) = tls_request(addr, alice(alpn), h2, "/debug/headers", &spoofed)
            .await
            .expect("request");
        assert_eq!(status, 200);
        assert_eq!(
            values(&headers, "x-remote-user"),
            ["alice"],
            "h2={h2}: {headers}"
        );
        assert_eq!(
            values(&headers, "x-remote-group"),
            ["devs", "ops"],
            "h2={h2}: {headers}"
        );
        assert!(headers.get("x-remote-extra-scopes").is_none(), "{headers}");
        assert_eq!(
            values(&headers, "impersonate-user"),
            ["bob"],
            "impersonation passes to the apiserver"
        );
    }
    // The groups feed route file selectors: group ops reads configmaps from the new version.
    let (status, version, _) = tls_request(
        addr,
        alice(&[b"h2"]),
        true,
        "/api/v1/namespaces/default/configmaps",
        &[],
    )
    .await
    .expect("list");
    assert_eq!((status, version.as_str()), (200, NEW));

    // No certificate: anonymous, the token passes, spoofed headers do not.
    let anonymous = pki::client_config(&p.ca, None, &[b"h2"]);
    let (status, version, headers) = tls_request(
        addr,
        anonymous,
        true,
        "/debug/headers",
        &[
            ("Authorization", "Bearer abc"),
            ("X-Remote-User", "admin"),
            ("X-Forwarded-For", "10.1.1.1"),
        ],
    )
    .await
    .expect("request");
    assert_eq!((status, version.as_str()), (200, OLD));
    assert_eq!(values(&headers, "authorization"), ["Bearer abc"]);
    assert_eq!(
        values(&headers, "x-forwarded-for"),
        ["10.1.1.1, 127.0.0.1"],
        "the client is appended"
    );
    assert!(headers.get("x-remote-user").is_none(), "{headers}");

    // A ServiceAccount token is routed as its account (the rollout of service accounts' secrets
    // sends it to the new version), and still goes upstream untouched, for the apiserver to judge.
    let sa = service_account_token("kube-system", "replicaset-controller");
    let bearer = format!("Bearer {sa}");
    for (path, served) in [
        ("/api/v1/namespaces/default/secrets", NEW),
        ("/api/v1/namespaces/default/configmaps", OLD),
    ] {
        let anonymous = pki::client_config(&p.ca, None, &[b"h2"]);
        // (the simulators serve no secrets: the version that answers is what counts)
        let (_, version, _) =
            tls_request(addr, anonymous, true, path, &[("Authorization", &bearer)])
                .await
                .expect("list");
        assert_eq!(version.as_str(), served, "{path}");
    }
    let anonymous = pki::client_config(&p.ca, None, &[b"h2"]);
    let (_, _, headers) = tls_request(
        addr,
        anonymous,
        true,
        "/debug/headers",
        &[("Authorization", &bearer)],
    )
    .await
    .expect("request");
    assert_eq!(values(&headers, "authorization"), [bearer.as_str()]);
    assert!(headers.get("x-remote-user").is_none(), "{headers}");
    // A token skewgate cannot read (not a ServiceAccount's) is routed as no one.
    let anonymous = pki::client_config(&p.ca, None, &[b"h2"]);
    let (_, version, _) = tls_request(
        addr,
        anonymous,
        true,
        "/api/v1/namespaces/default/secrets",
        &[("Authorization", "Bearer abc")],
    )
    .await
    .expect("list");
    assert_eq!(version, OLD);

    // A certificate from another CA is refused at the handshake.
    let mallory = pki::client_config(&p.evil_ca, Some(&p.mallory), &[b"h2"]);
    let refused = tls_request(addr, mallory, true, "/debug/headers", &[]).await;
    assert!(refused.is_err(), "{refused:?}");

    // Plain HTTP to the TLS port: refused, counted, and the proxy keeps serving.
    let mut plain = TcpStream::connect(addr).await.expect("connect");
    plain
        .write_all(b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut buf = Vec::new();
    let _ = tokio::io::AsyncReadExt::read_to_end(&mut plain, &mut buf).await;
    // The proxy counts a failed handshake after the client has seen it refused: waited for.
    let counted = eventually(10, || async {
        let m = gate.metrics().await;
        metric(
            &m,
            "skewgate_tls_handshake_errors_total{reason=\"not_tls\"}",
        ) >= 1.0
            && metric(&m, "skewgate_tls_handshake_errors_total") >= 2.0
    })
    .await;
    assert!(counted, "{}", gate.metrics().await);
    let (status, _, _) = tls_request(addr, alice(&[b"h2"]), true, "/version", &[])
        .await
        .expect("still serving");
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiserver_refuses_a_proxy_without_the_front_proxy_certificate() {
    let p = pki();
    let (gate, _sims) = tls_gate(&p, pki::settings(&p, false)).await;
    let alice = pki::client_config(&p.ca, Some(&p.alice), &[b"h2"]);
    let (status, _, body) = tls_request(gate.server.addr, alice, true, "/api/v1/namespaces", &[])
        .await
        .expect("answer");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["reason"], "ServiceUnavailable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_a_client_certificate_works_through_tls() {
    if !kubectl_available() {
        println!("SKIPPED: kubectl is not on PATH");
        return;
    }
    let p = pki();
    let (gate, _sims) = tls_gate(&p, pki::settings(&p, true)).await;
    let kubeconfig = pki::alice_kubeconfig(&p, gate.server.addr.port());
    let out = ok(&kubectl(&kubeconfig, &["get", "--raw", "/debug/headers"]).await);
    let headers: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(values(&headers, "x-remote-user"), ["alice"]);
    let out = ok(&kubectl(&kubeconfig, &["get", "namespaces"]).await);
    assert!(out.contains("kube-system"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_clients_are_refused_and_counted_without_slowing_others() {
    let p = pki();
    let (gate, _sims) = tls_gate(&p, {
        let (proxy, edge) = pki::settings(&p, true);
        let edge = EdgeSettings {
            handshake_timeout: std::time::Duration::from_millis(300),
            ..edge
        };
        (proxy, edge)
    })
    .await;
    let addr = gate.server.addr;
    // A client that connects and never completes a handshake is cut off at the timeout...
    let mut stalled = TcpStream::connect(addr).await.expect("connect");
    // ...while a good client is served meanwhile.
    let alice = pki::client_config(&p.ca, Some(&p.alice), &[b"h2"]);
    let (status, _, _) = tls_request(addr, alice.clone(), true, "/version", &[])
        .await
        .expect("served");
    assert_eq!(status, 200);
    let mut buf = [0u8; 16];
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut stalled, &mut buf),
    )
    .await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "the stalled handshake was ended: {closed:?}"
    );
    // An expired certificate from the right CA is refused.
    let expired = p.ca.issue_expired(&p.dir, "expired", "old-alice");
    let refused = tls_request(
        addr,
        pki::client_config(&p.ca, Some(&expired), &[b"h2"]),
        true,
        "/version",
        &[],
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");
    // The client has its alert before skewgate has counted the handshake: the count is waited for.
    let counted = |reason: &'static str| {
        let gate = &gate;
        async move {
            let series = format!("skewgate_tls_handshake_errors_total{{reason=\"{reason}\"}}");
            eventually(10, || async {
                metric(&gate.metrics().await, &series) >= 1.0
            })
            .await
        }
    };
    assert!(counted("timeout").await, "{}", gate.metrics().await);
    assert!(counted("bad_certificate").await, "{}", gate.metrics().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_serving_certificate_is_used_without_a_restart() {
    let p = pki();
    let (gate, _sims) = tls_gate(&p, pki::settings(&p, true)).await;
    let addr = gate.server.addr;
    // The serving certificate is replaced by one from a new CA (written over the same files).
    let new_ca = Ca::new(&p.dir, "new-ca");
    let renewed = new_ca.issue(&p.dir, "renewed", "skewgate", &[], &["127.0.0.1"]);
    std::fs::copy(&renewed.cert_file, &p.serving.cert_file).expect("copy");
    std::fs::copy(&renewed.key_file, &p.serving.key_file).expect("copy");
    let trusts_new = pki::client_config(&new_ca, None, &[b"h2"]);
    let switched = eventually(10, || {
        let config = trusts_new.clone();
        async move {
            tls_request(addr, config, true, "/version", &[])
                .await
                .is_ok()
        }
    })
    .await;
    assert!(switched, "clients that trust the new CA are served");
    let trusts_old = pki::client_config(&p.ca, None, &[b"h2"]);
    assert!(
        tls_request(addr, trusts_old, true, "/version", &[])
            .await
            .is_err(),
        "the old certificate is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_server_name_verifies_certificates_issued_to_the_service_name() {
    let p = pki();
    // An apiserver whose certificate names only kubernetes.default.svc, reached by IP.
    let svc = p.ca.issue(
        &p.dir,
        "svc",
        "kube-apiserver",
        &[],
        &["kubernetes.default.svc"],
    );
    let sim_tls = Some(pki::server_requiring_clients(&svc, &p.front_proxy_ca));
    let only = sim::start(
        SimConfig {
            tls: sim_tls,
            ..SimConfig::new(NEW)
        },
        Store::new(),
        loopback(),
    )
    .await
    .expect("sim");
    let routes = p.dir.join("routes-svc.yaml");
    let table = |server_name: &str| {
        format!(
            "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - name: only\n    endpoints: [\"{}\"]\n{server_name}writes:\n  default: only\nreads:\n  default: only\n",
            only.url()
        )
    };
    std::fs::write(&routes, table("")).expect("routes");
    let gate = gate_on(&routes, pki::settings(&p, true)).await;
    let alice = pki::client_config(&p.ca, Some(&p.alice), &[b"h2"]);
    let (status, _, _) = tls_request(gate.server.addr, alice.clone(), true, "/version", &[])
        .await
        .expect("answer");
    assert_eq!(status, 503, "the certificate does not name 127.0.0.1");
    gate.rewrite(&table("    serverName: kubernetes.default.svc\n"));
    let ok = eventually(10, || {
        let alice = alice.clone();
        let addr = gate.server.addr;
        async move {
            tls_request(addr, alice, true, "/version", &[])
                .await
                .is_ok_and(|(s, _, _)| s == 200)
        }
    })
    .await;
    assert!(ok, "with serverName the certificate verifies");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_front_proxy_certificate_is_used_without_a_restart() {
    let p = pki();
    // The front-proxy files start out holding a certificate the apiservers do not trust (another
    // CA signed it), as after a botched rotation.
    let rotating = p
        .evil_ca
        .issue(&p.dir, "fp-rotating", "front-proxy-client", &[], &[]);
    let mut settings = pki::settings(&p, true);
    settings.0.pool.tls = Some(
        skewgate::identity::UpstreamTls::load(skewgate::identity::UpstreamTlsFiles {
            ca: Some(p.ca.cert_file.clone()),
            client_cert: Some((rotating.cert_file.clone(), rotating.key_file.clone())),
        })
        .expect("upstream TLS"),
    );
    let (gate, _sims) = tls_gate(&p, settings).await;
    let addr = gate.server.addr;
    let alice = pki::client_config(&p.ca, Some(&p.alice), &[b"h2"]);
    let get = || {
        let alice = alice.clone();
        async move {
            tls_request(addr, alice, true, "/api/v1/namespaces", &[])
                .await
                .map(|(status, _, _)| status)
        }
    };
    let refused = get().await.expect("answer");
    assert_ne!(
        refused, 200,
        "the apiservers refuse the untrusted certificate"
    );
    // The fixed certificate is written over the same files: no restart, no signal.
    std::fs::copy(&p.front_proxy_client.cert_file, &rotating.cert_file).expect("copy");
    std::fs::copy(&p.front_proxy_client.key_file, &rotating.key_file).expect("copy");
    assert!(
        eventually(10, || async { get().await == Ok(200) }).await,
        "requests go through once the front-proxy certificate is renewed"
    );
}
