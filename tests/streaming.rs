//! Watches stream through the proxy event by event, and end cleanly from either side.

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;
use serde_json::json;

const DEFAULT_OLD: &str = "writes:\n  default: old\nreads:\n  default: old\n";

async fn put_cm(c: &reqwest::Client, base: &str, name: &str, v: usize) {
    let url = format!("{base}/api/v1/namespaces/default/configmaps");
    let body = json!({"metadata": {"name": name}, "data": {"v": v.to_string()}});
    let r = c.post(&url).json(&body).send().await.expect("create");
    assert_eq!(r.status(), 201);
}

async fn watch_streams_events_live(client: reqwest::Client) {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULT_OLD)).await;
    let base = gate.url();
    let resp = client
        .get(format!(
            "{base}/api/v1/namespaces/default/configmaps?watch=true"
        ))
        .send()
        .await
        .expect("watch");
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let writer = h1();
    let started = Instant::now();
    let mut seen = 0;
    let mut buf = Vec::new();
    // One event every 250 ms for 2.5 s; each must arrive before the next is written.
    for i in 0..10 {
        put_cm(&writer, &sims.new.url(), &format!("cm-{i}"), i).await;
        let deadline = Instant::now() + Duration::from_secs(2);
        while seen <= i {
            let chunk = tokio::time::timeout_at(deadline.into(), body.next())
                .await
                .unwrap_or_else(|_| panic!("event {i} did not arrive within 2s"))
                .expect("stream open")
                .expect("chunk");
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let event: serde_json::Value =
                    serde_json::from_slice(&line).expect("one JSON event per line");
                assert_eq!(event["type"], "ADDED");
                assert_eq!(event["object"]["metadata"]["name"], format!("cm-{seen}"));
                seen += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(started.elapsed() > Duration::from_secs(2));
    let m = gate.metrics().await;
    assert_eq!(metric(&m, "skewgate_watches{backend=\"old\"}"), 1.0, "{m}");
}

#[tokio::test]
async fn a_watch_streams_events_over_http1() {
    watch_streams_events_live(h1()).await;
}

#[tokio::test]
async fn a_watch_streams_events_over_h2c() {
    watch_streams_events_live(h2()).await;
}

#[tokio::test]
async fn a_watch_ends_upstream_when_the_client_goes_away() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULT_OLD)).await;
    // Over HTTP/1.1 the client closes its connection (skewgate reads its end while the response
    // streams); over h2c it resets the stream.
    for client in [h1(), h2()] {
        let resp = client
            .get(format!("{}/api/v1/configmaps?watch=1", gate.url()))
            .send()
            .await
            .expect("watch");
        assert_eq!(resp.status(), 200);
        assert!(
            eventually(5, || async {
                metric(
                    &gate.metrics().await,
                    "skewgate_upstream_streams{backend=\"old\"",
                ) == 1.0
            })
            .await
        );
        drop(resp);
        assert!(
            eventually(5, || async {
                let m = gate.metrics().await;
                metric(&m, "skewgate_upstream_streams{backend=\"old\"") == 0.0
                    && metric(&m, "skewgate_watches{backend=\"old\"}") == 0.0
            })
            .await,
            "the upstream stream and the watch gauge are released when the client leaves"
        );
        // The proxy still serves.
        let r = client
            .get(format!("{}/api/v1/namespaces", gate.url()))
            .send()
            .await
            .expect("list");
        assert_eq!(r.status(), 200);
    }
}

#[tokio::test]
async fn a_watch_ends_cleanly_when_the_upstream_goes_away() {
    for client in [h1(), h2()] {
        let sims = sims().await;
        let gate = gate(&routes(&sims, DEFAULT_OLD)).await;
        let resp = client
            .get(format!(
                "{}/api/v1/namespaces/default/configmaps?watch=1",
                gate.url()
            ))
            .send()
            .await
            .expect("watch");
        assert_eq!(resp.status(), 200);
        let mut body = resp.bytes_stream();
        put_cm(&h1(), &sims.old.url(), "before", 1).await;
        let first = tokio::time::timeout(Duration::from_secs(5), body.next())
            .await
            .expect("event")
            .expect("open");
        assert!(first.expect("chunk").starts_with(b"{\"object\""));
        sims.old.stop();
        // The stream ends without an error and without anything appended.
        let rest = tokio::time::timeout(Duration::from_secs(10), async {
            let mut rest = Vec::new();
            while let Some(chunk) = body.next().await {
                rest.push(chunk.map(|b| b.len()));
            }
            rest
        })
        .await
        .expect("the watch ends when the apiserver goes away");
        assert!(rest.iter().all(Result::is_ok), "ended cleanly: {rest:?}");
        assert_eq!(
            rest.iter()
                .map(|r| r.as_ref().map_or(0, |n| *n))
                .sum::<usize>(),
            0
        );
    }
}

/// A request body many times the apiserver's windows, and a response as large, pass whole in both
/// directions, over HTTP/1.1 and h2c: skewgate's upstream connection sends within the windows the
/// apiserver grants and gives back its own as the client reads.
async fn a_large_body_passes_whole_both_ways(client: reqwest::Client, name: &str) {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULT_OLD)).await;
    let list = format!("{}/api/v1/namespaces/default/configmaps", gate.url());
    // 2.5 MiB of data, under the apiserver's 3 MiB request limit; varied, so that a lost or
    // repeated frame shows.
    let blob: String = (0..(5 << 19) / 8)
        .map(|i| format!("{:08}", i % 100_000_000))
        .collect();
    let body = json!({"metadata": {"name": name}, "data": {"blob": blob}});
    let r = client.post(&list).json(&body).send().await.expect("create");
    assert_eq!(r.status(), 201);
    let got: serde_json::Value = client
        .get(format!("{list}/{name}"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("JSON");
    assert!(
        got["data"]["blob"].as_str() == Some(blob.as_str()),
        "the blob came back changed"
    );
}

#[tokio::test]
async fn a_large_body_passes_whole_over_http1() {
    a_large_body_passes_whole_both_ways(h1(), "large-h1").await;
}

#[tokio::test]
async fn a_large_body_passes_whole_over_h2c() {
    a_large_body_passes_whole_both_ways(h2(), "large-h2c").await;
}
