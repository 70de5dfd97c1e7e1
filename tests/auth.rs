//! skewgate in front of apiservers that authenticate as kube-apiserver does, configured the way
//! kubeadm configures them: a cluster CA for clients, a separate front-proxy CA trusted for request
//! headers with `--requestheader-allowed-names=front-proxy-client`, a static token file, anonymous
//! auth on (or off), and a small RBAC-like authorizer. Each kind of client must reach the apiserver
//! as itself, and skewgate's own requests as skewgate.

mod common;
#[path = "common/pki.rs"]
mod pki;

use std::net::SocketAddr;
use std::sync::Arc;

use common::*;
use pki::{Pki, pki};
use serde_json::Value;
use skewgate_sim::{self as sim, SimAuth, SimConfig, SimHandle, Store};

const TOKENS: &str = "s3cr3t-token,bob,1001,\"team-b,ops\"\n";

/// How the simulated apiservers are configured.
struct ApiserverFlags {
    anonymous: bool,
    allowed_names: &'static [&'static str],
}

const KUBEADM: ApiserverFlags = ApiserverFlags {
    anonymous: true,
    allowed_names: &["front-proxy-client"],
};

fn sim_auth(p: &Pki, flags: &ApiserverFlags) -> SimAuth {
    SimAuth::new()
        .client_ca(&p.ca.cert_pem)
        .and_then(|a| a.requestheader(&p.front_proxy_ca.cert_pem, flags.allowed_names))
        .and_then(|a| a.token_file(TOKENS))
        .expect("auth")
        .anonymous(flags.anonymous)
        .writers(&["devs"])
}

/// Two authenticating simulators (v1.29 and v1.30) over one store.
async fn apiservers(p: &Pki, flags: &ApiserverFlags) -> (SimHandle, SimHandle) {
    let store = Store::new();
    let tls = SimAuth::tls_config(&p.apiserver.cert_pem, &p.apiserver.key_pem).expect("tls");
    let auth = Arc::new(sim_auth(p, flags));
    let config = |v: &str| SimConfig {
        tls: Some(tls.clone()),
        auth: Some(auth.clone()),
        ..SimConfig::new(v)
    };
    let old = sim::start(config(OLD), store.clone(), loopback())
        .await
        .expect("sim");
    let new = sim::start(config(NEW), store, loopback())
        .await
        .expect("sim");
    (old, new)
}

async fn kubeadm_gate(p: &Pki, flags: &ApiserverFlags) -> (Gate, (SimHandle, SimHandle)) {
    let (old, new) = apiservers(p, flags).await;
    let routes = temp_dir("kubeadm-routes").join("routes.yaml");
    std::fs::write(
        &routes,
        format!(
            "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: old, version: v1.29, endpoints: [\"{}\"]}}\n  - {{name: new, version: v1.30, endpoints: [\"{}\"]}}\nwrites:\n  default: old\nreads:\n  default: old\n",
            old.url(),
            new.url()
        ),
    )
    .expect("routes");
    (gate_on(&routes, pki::settings(p, true)).await, (old, new))
}

async fn ready(gate: &Gate) -> bool {
    eventually(10, || async {
        reqwest::get(format!("{}/readyz", gate.admin()))
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await
}

const WHOAMI: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const REVIEW: &str = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#;

/// `kubectl auth whoami` by hand: the status, and the user name and groups the apiserver saw.
async fn whoami(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    h2: bool,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let (status, _, body) = pki::tls_call(addr, config, h2, "POST", WHOAMI, headers, Some(REVIEW))
        .await
        .expect("answer");
    (status, body)
}

fn user_of(review: &Value) -> (String, Vec<String>) {
    let info = &review["status"]["userInfo"];
    let groups = info["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(str::to_owned))
        .collect();
    (info["username"].as_str().unwrap_or("").to_owned(), groups)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_authenticates_as_kube_apiserver_does() {
    let p = pki();
    let (old, _new) = apiservers(&p, &KUBEADM).await;
    let front_proxy = pki::client_config(&p.ca, Some(&p.front_proxy_client), &[b"h2"]);
    let call = |config: Arc<rustls::ClientConfig>,
                method: &'static str,
                path: &'static str,
                headers: Vec<(&'static str, &'static str)>| {
        let addr = old.addr;
        async move {
            let body = (method == "POST").then_some(REVIEW);
            pki::tls_call(addr, config, true, method, path, &headers, body)
                .await
                .expect("answer")
        }
    };

    // The front-proxy certificate without a user header is an x509 error (it is not signed by the
    // client CA), so even /readyz is 401: anonymous is not consulted.
    let (status, _, body) = call(front_proxy.clone(), "GET", "/readyz", vec![]).await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (401, Some("Unauthorized"))
    );
    // With a user header it is that user; with a valid token the token wins; a bad token is 401.
    let (status, _, review) = call(
        front_proxy.clone(),
        "POST",
        WHOAMI,
        vec![("x-remote-user", "skewgate")],
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(
        user_of(&review),
        ("skewgate".into(), vec!["system:authenticated".into()])
    );
    let (_, _, review) = call(
        front_proxy.clone(),
        "POST",
        WHOAMI,
        vec![("authorization", "Bearer s3cr3t-token")],
    )
    .await;
    assert_eq!(user_of(&review).0, "bob");
    let (status, _, _) = call(
        front_proxy.clone(),
        "GET",
        "/version",
        vec![("authorization", "Bearer wrong")],
    )
    .await;
    assert_eq!(status, 401);

    // A front-proxy certificate whose CN is not an allowed name is an error too.
    let other = p
        .front_proxy_ca
        .issue(&p.dir, "other-proxy", "other-proxy", &[], &[]);
    let other = pki::client_config(&p.ca, Some(&other), &[b"h2"]);
    let (status, _, _) = call(other, "GET", "/version", vec![("x-remote-user", "admin")]).await;
    assert_eq!(status, 401);

    // A client certificate from a foreign CA completes the handshake and gets 401, as from Go's TLS.
    let mallory = pki::client_config(&p.ca, Some(&p.mallory), &[b"h2"]);
    let (status, _, _) = call(mallory, "GET", "/version", vec![]).await;
    assert_eq!(status, 401);

    // A cluster-CA certificate is its CN and Os.
    let alice = pki::client_config(&p.ca, Some(&p.alice), &[b"h2"]);
    let (_, _, review) = call(alice, "POST", WHOAMI, vec![]).await;
    assert_eq!(
        user_of(&review),
        (
            "alice".into(),
            vec!["devs".into(), "ops".into(), "system:authenticated".into()]
        )
    );

    // No credentials at all: system:anonymous may read health and /version, not discovery.
    let nobody = pki::client_config(&p.ca, None, &[b"h2"]);
    assert_eq!(call(nobody.clone(), "GET", "/version", vec![]).await.0, 200);
    assert_eq!(call(nobody.clone(), "GET", "/api", vec![]).await.0, 403);
    let (status, _, body) = call(nobody, "POST", WHOAMI, vec![]).await;
    assert_eq!(status, 403);
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("User \"system:anonymous\""),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_client_reaches_the_apiserver_as_itself() {
    let p = pki();
    let (gate, _sims) = kubeadm_gate(&p, &KUBEADM).await;
    assert!(
        ready(&gate).await,
        "skewgate's own health checks must authenticate"
    );
    let addr = gate.server.addr;

    for h2 in [true, false] {
        let alpn: &[&[u8]] = if h2 { &[b"h2"] } else { &[b"http/1.1"] };
        // A client certificate: skewgate verifies it and forwards alice with her groups.
        let alice = pki::client_config(&p.ca, Some(&p.alice), alpn);
        let (status, review) = whoami(addr, alice, h2, &[("x-remote-user", "admin")]).await;
        assert_eq!(status, 201, "{review}");
        assert_eq!(
            user_of(&review),
            (
                "alice".into(),
                vec!["devs".into(), "ops".into(), "system:authenticated".into()]
            )
        );
        // A bearer token: the token's identity wins at the apiserver.
        let token_client = pki::client_config(&p.ca, None, alpn);
        let (status, review) = whoami(
            addr,
            token_client,
            h2,
            &[("authorization", "Bearer s3cr3t-token")],
        )
        .await;
        assert_eq!(status, 201, "{review}");
        assert_eq!(
            user_of(&review),
            (
                "bob".into(),
                vec!["team-b".into(), "ops".into(), "system:authenticated".into()]
            )
        );
        // Nothing at all: the apiserver sees system:anonymous, however the client dresses up.
        let nobody = pki::client_config(&p.ca, None, alpn);
        let spoof = [
            ("x-remote-user", "admin"),
            ("x-remote-group", "system:masters"),
        ];
        let (status, body) = whoami(addr, nobody.clone(), h2, &spoof).await;
        assert_eq!(status, 403, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap_or("")
                .contains("User \"system:anonymous\""),
            "{body}"
        );
        let (status, _, _) = pki::tls_call(addr, nobody.clone(), h2, "GET", "/version", &[], None)
            .await
            .expect("answer");
        assert_eq!(status, 200);
        let (status, _, _) = pki::tls_call(addr, nobody, h2, "GET", "/apis", &[], None)
            .await
            .expect("answer");
        assert_eq!(
            status, 403,
            "anonymous clients may not read discovery, merged or not"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_anonymous_auth_off_a_client_without_credentials_gets_401() {
    let p = pki();
    let flags = ApiserverFlags {
        anonymous: false,
        ..KUBEADM
    };
    let (gate, _sims) = kubeadm_gate(&p, &flags).await;
    assert!(
        ready(&gate).await,
        "skewgate's own requests are not anonymous"
    );
    let nobody = pki::client_config(&p.ca, None, &[b"h2"]);
    let (status, version, body) =
        pki::tls_call(gate.server.addr, nobody, true, "GET", "/version", &[], None)
            .await
            .expect("answer");
    assert_eq!((status, version.as_str()), (401, OLD), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_the_apiserver_refuses_is_shown_as_such() {
    let p = pki();
    // The apiservers trust another front-proxy name, so skewgate's own requests are 401.
    let flags = ApiserverFlags {
        allowed_names: &["aggregator"],
        ..KUBEADM
    };
    let (gate, _sims) = kubeadm_gate(&p, &flags).await;
    let readyz = async || {
        let r = reqwest::get(format!("{}/readyz", gate.admin()))
            .await
            .expect("readyz");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    };
    assert!(
        // Not a bare "401": the endpoint's port may have those digits (127.0.0.1:40181).
        eventually(10, || async { readyz().await.1.contains("answered 401") }).await,
        "{:?}",
        readyz().await
    );
    let (status, text) = readyz().await;
    assert_eq!(status, 503);
    assert!(text.contains("/readyz answered 401 Unauthorized"), "{text}");
    assert!(text.contains("--requestheader-allowed-names"), "{text}");
    assert!(text.contains("skewgate"), "{text}");

    let alice = pki::client_config(&p.ca, Some(&p.alice), &[b"h2"]);
    let (status, _, body) = pki::tls_call(
        gate.server.addr,
        alice,
        true,
        "GET",
        "/api/v1/namespaces",
        &[],
        None,
    )
    .await
    .expect("answer");
    assert_eq!(status, 503, "{body}");
    let message = body["message"].as_str().unwrap_or("");
    assert!(message.contains("401 Unauthorized"), "{message}");
    assert!(!message.contains("not checked yet"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_whoami_through_skewgate_is_the_certificate_user() {
    if !kubectl_available() {
        println!("SKIPPED: kubectl is not on PATH");
        return;
    }
    let p = pki();
    let (gate, _sims) = kubeadm_gate(&p, &KUBEADM).await;
    assert!(ready(&gate).await);
    let kubeconfig = pki::alice_kubeconfig(&p, gate.server.addr.port());
    let out = ok(&kubectl(&kubeconfig, &["auth", "whoami", "-o", "json"]).await);
    let review: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(user_of(&review).0, "alice", "{out}");
    // kubectl's discovery goes through too: the merged documents, read with alice's identity.
    let out = ok(&kubectl(&kubeconfig, &["api-resources"]).await);
    assert!(out.contains("widgets"), "{out}");
}

/// `skewgate sim` with kube-apiserver's TLS flags (as the load bench runs it): a client certificate
/// from the cluster CA is its user, one from another CA is a 401, and the front proxy's headers are
/// believed only with the front-proxy certificate.
#[tokio::test]
async fn the_sim_command_authenticates_with_the_apiservers_tls_flags() {
    let p = pki();
    let addr: SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
        l.local_addr().expect("addr")
    };
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_skewgate"))
        .args(["sim", "--listen", &addr.to_string()])
        .args(p.sim_tls_flags())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("sim starts");
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let who = |config, headers: &'static [(&'static str, &'static str)]| async move {
        pki::tls_call(addr, config, true, "POST", WHOAMI, headers, Some(REVIEW)).await
    };
    let alice = pki::client_config(&p.ca, Some(&p.alice), &[b"h2"]);
    let (status, _, body) = who(alice, &[]).await.expect("alice's call");
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["status"]["userInfo"]["username"], "alice", "{body}");
    let mallory = pki::client_config(&p.ca, Some(&p.mallory), &[b"h2"]);
    let (status, _, _) = who(mallory, &[]).await.expect("mallory's call");
    assert_eq!(
        status, 401,
        "a certificate from another CA is an authentication error"
    );
    let front = pki::client_config(&p.ca, Some(&p.front_proxy_client), &[b"h2"]);
    let (status, _, body) = who(front, &[("x-remote-user", "carol")])
        .await
        .expect("front proxy");
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["status"]["userInfo"]["username"], "carol", "{body}");
    let _ = child.kill();
    let _ = child.wait();
}
