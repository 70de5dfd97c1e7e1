//! Hot reload: a valid change takes effect under load without failing a request; an invalid file
//! changes nothing and is counted.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::*;

const TO_OLD: &str = "writes:\n  default: old\nreads:\n  default: old\n";
const TO_NEW: &str = "writes:\n  default: old\nreads:\n  default: new\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_reload_changes_routing_without_dropping_a_request() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, TO_OLD)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let served_new = Arc::new(AtomicUsize::new(0));
    let mut load = Vec::new();
    for i in 0..4 {
        let (stop, failures, served_new) = (stop.clone(), failures.clone(), served_new.clone());
        let client = if i % 2 == 0 { h1() } else { h2() };
        let url = format!("{}/api/v1/namespaces/default/configmaps", gate.url());
        load.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) && n < 20_000 {
                n += 1;
                match client.get(&url).send().await {
                    Ok(r) if r.status() == 200 => {
                        if served_by(&r) == NEW {
                            served_new.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            n
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(served_new.load(Ordering::Relaxed), 0);
    gate.rewrite(&routes(&sims, TO_NEW));
    let switched = eventually(10, || async { served_new.load(Ordering::Relaxed) > 100 }).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for t in load {
        total += t.await.expect("load task");
    }
    assert!(switched, "reads moved to the new backend after the reload");
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "no request failed across the reload ({total} sent)"
    );
    let m = gate.metrics().await;
    assert!(
        metric(&m, "skewgate_config_reloads_total{result=\"success\"}") >= 2.0,
        "{m}"
    );
}

#[tokio::test]
async fn an_invalid_reload_keeps_the_running_table() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, TO_OLD)).await;
    let c = h1();
    let url = format!("{}/api/v1/namespaces", gate.url());
    // Valid YAML, invalid table: reads.default names an unknown backend.
    gate.rewrite(&routes(
        &sims,
        "writes:\n  default: old\nreads:\n  default: newer\n",
    ));
    assert!(
        eventually(10, || async {
            metric(
                &gate.metrics().await,
                "skewgate_config_reloads_total{result=\"failure\"}",
            ) >= 1.0
        })
        .await,
        "the failed reload is counted: {}",
        gate.metrics().await
    );
    let r = c.get(&url).send().await.expect("get");
    assert_eq!((r.status().as_u16(), served_by(&r)), (200, OLD.to_owned()));
    // Not YAML at all.
    gate.rewrite("backends: [\n");
    assert!(
        eventually(10, || async {
            metric(
                &gate.metrics().await,
                "skewgate_config_reloads_total{result=\"failure\"}",
            ) >= 2.0
        })
        .await
    );
    let r = c.get(&url).send().await.expect("get");
    assert_eq!((r.status().as_u16(), served_by(&r)), (200, OLD.to_owned()));
    let debug: serde_json::Value = gate.debug_routes().await;
    assert_eq!(debug["reads"]["default"], "old");
    // Fixing the file applies it.
    gate.rewrite(&routes(&sims, TO_NEW));
    assert!(
        eventually(10, || async {
            let r = c.get(&url).send().await.expect("get");
            served_by(&r) == NEW
        })
        .await
    );
}

/// Each worker's requests use the routing through a hold of the worker's own: a reload makes every
/// worker let go of the old one, so the connections of an endpoint the new table no longer names
/// close even when no request comes after the reload.
#[tokio::test]
async fn a_reload_closes_a_removed_endpoints_connections_without_another_request() {
    let sims = sims().await;
    let old = sims.old.addr;
    let (relay, open) = tcp_relay(move || old).await;
    let relayed = format!("http://{relay}");
    let table = |old: &str| {
        format!(
            "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - name: old\n    \
             endpoints: [{old}]\n  - name: new\n    endpoints: [{}]\n{TO_OLD}",
            sims.new.url()
        )
    };
    let gate = gate(&table(&relayed)).await;
    let url = format!("{}/api/v1/namespaces", gate.url());
    // Connections of their own, so that both workers serve some and open an upstream connection.
    for _ in 0..8 {
        let r = h2().get(&url).send().await.expect("get");
        assert_eq!(r.status(), 200);
    }
    assert!(
        open.load(Ordering::SeqCst) >= 1,
        "requests went through the relay"
    );
    gate.rewrite(&table(&sims.old.url()));
    let gone = eventually(15, || async { open.load(Ordering::SeqCst) == 0 }).await;
    assert!(
        gone,
        "{} connection(s) to the removed endpoint still open",
        open.load(Ordering::SeqCst)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_file_is_reread_while_something_else_writes_to_its_folder_all_the_time() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, TO_OLD)).await;
    // A log beside the route file, appended to every 20 ms, all through the test: before, every
    // event restarted the wait for a quiet folder, and the change below was never read.
    let busy = gate.routes.with_file_name("busy.log");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut log = std::fs::File::create(&busy).expect("busy file");
            while !stop.load(Ordering::Relaxed) {
                let _ = writeln!(log, "busy");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    gate.rewrite(&routes(&sims, TO_NEW));
    let client = h1();
    let url = format!("{}/api/v1/namespaces/default/configmaps", gate.url());
    let moved = eventually(15, || async {
        match client.get(&url).send().await {
            Ok(r) => served_by(&r) == NEW,
            Err(_) => false,
        }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    assert!(
        moved,
        "the route file's change was read while its folder stayed busy"
    );
}
