//! Long-lived client connections spread again: two replicas behind a round-robin TCP load
//! balancer, a client that connected while only one was up, and `goaway_chance` sending a few of
//! its connections GOAWAY after a response, so that it reconnects and reaches the other replica.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use skewgate::edge::EdgeSettings;
use skewgate::proxy::ProxySettings;

/// A TCP load balancer: each new connection goes to the next of `up`, round robin.
struct Balancer {
    addr: SocketAddr,
    up: Arc<Mutex<Vec<SocketAddr>>>,
}

async fn balancer(first: SocketAddr) -> Balancer {
    let up = Arc::new(Mutex::new(vec![first]));
    let (targets, next) = (up.clone(), AtomicUsize::new(0));
    let (addr, _) = tcp_relay(move || {
        let list = targets.lock().expect("lock");
        list[next.fetch_add(1, Ordering::Relaxed) % list.len()]
    })
    .await;
    Balancer { addr, up }
}

async fn gets_served(gate: &Gate) -> f64 {
    metric(
        &gate.metrics().await,
        "skewgate_requests_total{backend=\"old\",class=\"read\",code=\"200\",group=\"\",resource=\"namespaces\",verb=\"get\"}",
    )
}

/// Requests through the balancer, one at a time on one h2 client, after the second replica came
/// up; returns how many the second replica served, and the GOAWAYs the first sent.
async fn spread(chance: f64) -> (f64, f64) {
    let sims = sims().await;
    let text = routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n");
    let settings = || {
        (
            ProxySettings::default(),
            EdgeSettings {
                goaway_chance: chance,
                ..EdgeSettings::default()
            },
        )
    };
    let dir = temp_dir("rebalance");
    let file = dir.join("routes.yaml");
    std::fs::write(&file, text).expect("routes");
    let (a, b) = (
        gate_on(&file, settings()).await,
        gate_on(&file, settings()).await,
    );
    let lb = balancer(a.server.addr).await;
    let client = h2();
    let url = format!("http://{}/api/v1/namespaces/default", lb.addr);
    let get = || async {
        let r = client.get(&url).send().await.expect("an answer");
        assert_eq!(r.status(), 200);
    };
    get().await;
    // The second replica comes (back) up; the client's connection stays where it was.
    lb.up.lock().expect("lock").push(b.server.addr);
    for _ in 0..600 {
        get().await;
    }
    let goaways = metric(
        &a.metrics().await,
        "skewgate_client_goaways_total{reason=\"rebalance\"}",
    );
    (gets_served(&b).await, goaways)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_comes_up_gets_a_share_of_long_lived_clients() {
    let (on_b, goaways) = spread(0.02).await;
    assert!(goaways >= 1.0, "the first replica sent GOAWAY");
    assert!(
        on_b >= 30.0,
        "the second replica served {on_b} of 600 requests after {goaways} GOAWAYs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_goaways_a_long_lived_client_stays_where_it_connected() {
    let (on_b, goaways) = spread(0.0).await;
    assert_eq!((on_b, goaways), (0.0, 0.0));
}
