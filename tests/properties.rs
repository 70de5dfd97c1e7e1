//! Property tests of what clients and files control: request classification, route-file loading,
//! identity-header handling, protobuf bodies, and HTTP/1.1 framing through the running proxy. They run on stable in
//! `cargo test`; `fuzz/` has coverage-guided targets for the same inputs.

mod common;

use std::path::Path;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use skewgate::classify::classify;
use skewgate::identity::{Identity, IdentityHeaders, forward_identity};

/// Paths built from the pieces the apiserver's parser cares about, with hostile bits mixed in.
fn api_path() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        Just("api".to_owned()),
        Just("apis".to_owned()),
        Just("v1".to_owned()),
        Just("namespaces".to_owned()),
        Just("watch".to_owned()),
        Just("proxy".to_owned()),
        Just("status".to_owned()),
        Just(String::new()),
        Just("..".to_owned()),
        Just("%2F".to_owned()),
        Just("%zz".to_owned()),
        "[a-z0-9.-]{1,12}",
        "\\PC{0,8}",
    ];
    prop::collection::vec(segment, 0..12).prop_map(|s| format!("/{}", s.join("/")))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn classification_never_panics_and_keeps_its_invariants(
        method in prop_oneof![
            Just("GET".to_owned()), Just("PUT".to_owned()), Just("PATCH".to_owned()),
            Just("POST".to_owned()), Just("DELETE".to_owned()), "[A-Z]{0,10}",
        ],
        path in api_path(),
        query in proptest::option::of("[a-zA-Z0-9=&%.,_-]{0,40}"),
    ) {
        let info = classify(&method, &path, query.as_deref());
        if info.is_resource {
            // As Go's requestinfo: a resource request may name an empty resource (`/api/v1//x`).
            prop_assert!(info.api_prefix == "api" || info.api_prefix == "apis");
            prop_assert!(!info.namespace.contains('/') && !info.resource.contains('/'));
        } else {
            prop_assert!(info.resource.is_empty() && info.namespace.is_empty());
        }
    }

    #[test]
    fn percent_encoding_unreserved_characters_changes_nothing(path in api_path()) {
        // Go's URL.Path is decoded: %61 is `a`. Encoding plain letters must classify the same.
        // Letters that are an escape's hex digits (`%a0`) stay as they are: encoded, they would make
        // another escape of it.
        let chars: Vec<char> = path.chars().collect();
        let in_escape = |i: usize| (1..=2).any(|back| i >= back && chars[i - back] == '%');
        let encoded: String = chars
            .iter()
            .enumerate()
            .map(|(i, &c)| if c.is_ascii_lowercase() && !in_escape(i) { format!("%{:02X}", c as u32) } else { c.to_string() })
            .collect();
        let (a, b) = (classify("GET", &path, None), classify("GET", &encoded, None));
        prop_assert_eq!(a.into_owned(), b.into_owned());
    }

    #[test]
    fn a_damaged_protobuf_body_is_read_or_refused_never_a_panic(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        cut in any::<usize>(),
    ) {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "creationTimestamp": "2026-11-28T09:00:00Z"},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}],
                "readinessProbe": {"httpGet": {"port": "http"}}}]},
            "status": {"containerStatuses": [{"name": "c", "restartCount": 2}]}});
        let mut bytes = skewgate::protobuf::encode_json(&pod).expect("encodes");
        for (at, byte) in flips {
            let at = at % bytes.len();
            bytes[at] = byte;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        if let Ok(body) = skewgate::protobuf::Body::decode(&bytes) {
            let (view, _) = body.view_checked();
            let again = skewgate::protobuf::Body::decode(&body.encode()).expect("re-encoded decodes");
            prop_assert_eq!(again.view(), view);
        }
    }

    #[test]
    fn route_file_loading_never_panics_on_any_text(text in "\\PC{0,400}") {
        let _ = skewgate::config::parse_route_table(Path::new("fuzz.yaml"), &text);
    }

    #[test]
    fn a_damaged_route_file_is_refused_with_located_errors(
        cut in 0usize..2000,
        insert in prop_oneof![Just(""), Just(":"), Just("- "), Just("  "), Just("{"), Just("\"")],
    ) {
        let good = include_str!("../routes/example.yaml");
        let at = cut.min(good.len());
        let at = (0..=at).rev().find(|i| good.is_char_boundary(*i)).unwrap_or(0);
        let damaged = format!("{}{insert}{}", &good[..at], &good[at..].get(7..).unwrap_or(""));
        if let Err(errors) = skewgate::config::parse_route_table(Path::new("x.yaml"), &damaged) {
            prop_assert!(!errors.0.is_empty());
            for e in &errors.0 {
                prop_assert!(!e.message.is_empty());
                prop_assert!(e.to_string().starts_with("x.yaml"));
            }
        }
    }

    #[test]
    fn no_identity_header_in_any_spelling_passes(
        names in prop::collection::vec(
            (prop_oneof![
                Just("x-remote-user"), Just("x-remote-group"), Just("x-remote-uid"),
                Just("x-remote-extra-scopes"), Just("x-remote-extra-"), Just("authorization"),
                Just("impersonate-user"), Just("x-request-id"), Just("accept"),
            ], any::<u16>()),
            0..12,
        ),
        verified in any::<bool>(),
    ) {
        let mut headers = HeaderMap::new();
        for (name, mask) in &names {
            // Each dash may be an underscore; case is random (header names fold to lower case).
            let spelt: String = name
                .chars()
                .enumerate()
                .map(|(i, c)| if c == '-' && mask & (1 << (i % 16)) != 0 { '_' } else { c })
                .collect();
            headers.append(HeaderName::from_bytes(spelt.as_bytes()).expect("name"), HeaderValue::from_static("v"));
        }
        let alice = Identity { user: "alice".into(), groups: vec!["devs".into()] };
        let identity = verified.then_some(&alice);
        forward_identity(&IdentityHeaders::default(), &mut headers, identity);
        for (k, v) in &headers {
            let normal = k.as_str().replace('_', "-");
            if normal.starts_with("x-remote-") {
                // Only what skewgate set itself, from the verified certificate.
                prop_assert!(verified, "{k} passed for an unverified client");
                prop_assert!(k == "x-remote-user" && v == "alice" || k == "x-remote-group" && v == "devs", "{k}: {v:?}");
            }
        }
        for kept in ["authorization", "impersonate-user", "x-request-id", "accept"] {
            let sent = names.iter().any(|(n, _)| *n == kept);
            let passed = headers.keys().any(|k| k.as_str().replace('_', "-") == kept);
            prop_assert_eq!(sent, passed, "{} must pass untouched", kept);
        }
    }
}

/// HTTP/1.1 requests, valid and damaged, through the running proxy: it answers each with a status
/// or closes the connection, never hangs or dies, and serves a normal client afterwards.
#[test]
fn http1_framing_through_the_proxy() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let sims = common::sims().await;
        // Framing is under test here, not holding back a client that sends malformed requests.
        let routes = common::temp_dir("framing").join("routes.yaml");
        std::fs::write(
            &routes,
            common::routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n"),
        )
        .expect("routes");
        let settings = (
            skewgate::proxy::ProxySettings::default(),
            skewgate::edge::EdgeSettings {
                hold_back_offenders: false,
                ..skewgate::edge::EdgeSettings::default()
            },
        );
        let gate = common::gate_on(&routes, settings).await;
        let addr = gate.server.addr;
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 300,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let request = (
            prop_oneof![
                Just("GET".to_owned()),
                Just("PUT".to_owned()),
                Just("POST".to_owned()),
                Just("G\0T".to_owned()),
                "[A-Z]{1,8}",
            ],
            api_path(),
            prop::collection::vec(("[A-Za-z_-]{1,20}", "[ -~]{0,30}"), 0..6),
            prop_oneof![
                Just(String::new()),
                Just("Content-Length: 5\r\n\r\nhello".to_owned()),
                Just("Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".to_owned()),
                Just("Transfer-Encoding: chunked\r\n\r\nzz\r\n".to_owned()),
                Just("Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello".to_owned()),
                Just("Content-Length: -1\r\n\r\n".to_owned()),
                "\\PC{0,60}",
            ],
            0usize..3,
        );
        let cases = std::sync::Mutex::new(Vec::new());
        runner
            .run(&request, |case| {
                cases.lock().expect("cases").push(case);
                Ok(())
            })
            .expect("strategy");
        for (method, path, headers, tail, cut) in cases.into_inner().expect("cases") {
            let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: x\r\n");
            for (k, v) in headers {
                raw.push_str(&format!("{k}: {v}\r\n"));
            }
            raw.push_str(if tail.is_empty() { "\r\n" } else { &tail });
            // Some requests are cut short, as a client that gives up.
            let bytes = &raw.as_bytes()[..raw.len() - cut.min(raw.len())];
            let exchange = async {
                let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
                tokio::io::AsyncWriteExt::write_all(&mut s, bytes)
                    .await
                    .expect("write");
                let _ = tokio::io::AsyncWriteExt::shutdown(&mut s).await;
                let mut out = Vec::new();
                let _ = tokio::io::AsyncReadExt::read_to_end(&mut s, &mut out).await;
                out
            };
            let out = tokio::time::timeout(Duration::from_secs(35), exchange)
                .await
                .unwrap_or_else(|_| panic!("hung on {raw:?}"));
            if !out.is_empty() {
                assert!(
                    out.starts_with(b"HTTP/1.1 "),
                    "{raw:?} -> {:?}",
                    String::from_utf8_lossy(&out)
                );
            }
        }
        let resp = common::h1()
            .get(format!("{}/version", gate.url()))
            .send()
            .await
            .expect("served");
        assert_eq!(resp.status(), 200);
    });
}
