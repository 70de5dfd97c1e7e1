//! Replicas as a fleet: replicas that publish themselves, writers through them, and the judgement
//! of the writes from the apiservers' side (the simulator's write log).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use skewgate::app::{ServeOptions, Server};
use skewgate::edge::EdgeSettings;
use skewgate::proxy::ProxySettings;
use skewgate_sim::WriteRecord;

use super::{h1, loopback, temp_dir};

/// A replica listening at `listen` that publishes itself there.
pub async fn publishing_replica(routes: &Path, listen: SocketAddr) -> Server {
    publishing_replica_with(routes, listen, ProxySettings::default()).await
}

/// [`publishing_replica`], with `base` for the settings it does not set (its clock, say).
pub async fn publishing_replica_with(
    routes: &Path,
    listen: SocketAddr,
    base: ProxySettings,
) -> Server {
    Server::start(ServeOptions {
        routes: routes.to_path_buf(),
        listen,
        admin_listen: loopback(),
        reload_poll: Duration::from_millis(200),
        settings: ProxySettings {
            publish: Some(skewgate::cluster::PublishSettings {
                address: listen,
                interval: Duration::from_millis(100),
                lease_duration: Duration::from_secs(1),
            }),
            ..base
        },
        edge: EdgeSettings {
            shutdown_grace: Duration::from_secs(1),
            ..EdgeSettings::default()
        },
    })
    .await
    .expect("skewgate starts")
}

/// Replica `i`'s address: node 127.0.0.(i+1), one port for all, as on control-plane nodes.
pub fn node_addresses() -> impl Fn(usize) -> SocketAddr {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    move |i| format!("127.0.0.{}:{port}", i + 1).parse().expect("addr")
}

/// `n` route files, each in a folder of its own, holding `text`.
pub fn route_files(tag: &str, n: usize, text: &str) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let file = temp_dir(&format!("{tag}-{i}")).join("routes.yaml");
            std::fs::write(&file, text).expect("routes");
            file
        })
        .collect()
}

/// Creates configmap `namespace/name` through `base` (a replica's or a simulator's URL).
pub async fn create_configmap(base: &str, namespace: &str, name: &str) {
    let created = h1()
        .post(format!("{base}/api/v1/namespaces/{namespace}/configmaps"))
        .json(&serde_json::json!({"metadata": {"name": name}}))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201, "{namespace}/{name}");
}

/// The patches the simulators took, as their shared write log holds them.
pub fn patches(sims: &super::Sims) -> Vec<WriteRecord> {
    let writes = sims.store.writes().into_iter();
    writes.filter(|r| r.verb == "patch").collect()
}

/// Per object, from the apiservers' side: how many of its writes arrived while a write of it by
/// the other version was in flight, and how often the version writing it changed (in order of
/// arrival). A pin moved `n` times changes it `n` times at most, with no overlap.
#[derive(Debug, Default)]
pub struct ObjectWrites {
    pub writes: usize,
    pub overlaps: usize,
    pub switches: usize,
}

/// [`ObjectWrites`] of each object written (`namespace/name`), in O(n log n).
pub fn writes_per_object(records: &[WriteRecord]) -> BTreeMap<String, ObjectWrites> {
    let mut by_object: BTreeMap<String, Vec<&WriteRecord>> = BTreeMap::new();
    for r in records {
        let key = format!("{}/{}", r.key.namespace, r.key.name);
        by_object.entry(key).or_default().push(r);
    }
    by_object
        .into_iter()
        .map(|(key, mut writes)| {
            writes.sort_by_key(|r| r.arrived);
            let mut judged = ObjectWrites {
                writes: writes.len(),
                ..ObjectWrites::default()
            };
            for (i, x) in writes.iter().enumerate() {
                let later = writes[i + 1..]
                    .iter()
                    .take_while(|y| y.arrived < x.completed);
                judged.overlaps += later.filter(|y| y.version != x.version).count();
                if i > 0 && writes[i - 1].version != x.version {
                    judged.switches += 1;
                }
            }
            (key, judged)
        })
        .collect()
}

/// Writers patching objects through replicas until stopped; a 429 is retried after 100 ms, as
/// client-go retries it, and counted apart.
pub struct Writers {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<(BTreeMap<u16, u64>, u64)>>,
}

impl Writers {
    /// One writer per replica (`urls`) and configmap `cm-0`..`cm-{objects-1}` of namespace team-a:
    /// each object written through every replica.
    pub fn through_each(urls: &[String], objects: usize) -> Writers {
        let n = urls.len() * objects;
        Writers::start(
            (0..n)
                .map(|i| {
                    let (replica, object) = (i / objects, i % objects);
                    format!(
                        "{}/api/v1/namespaces/team-a/configmaps/cm-{object}",
                        urls[replica]
                    )
                })
                .collect(),
        )
    }

    /// One writer per URL (an object's URL through one replica); writer `i` says `writer-{i}` in
    /// its User-Agent, which the simulator's write log keeps.
    pub fn start(urls: Vec<String>) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = urls
            .into_iter()
            .enumerate()
            .map(|(i, url)| tokio::spawn(write_until(url, format!("writer-{i}"), stop.clone())))
            .collect();
        Writers { stop, tasks }
    }

    /// Stops them: the final codes of their writes (0: no answer), and the 429s retried.
    pub async fn stop(self) -> (BTreeMap<u16, u64>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let (mut codes, mut retried) = (BTreeMap::new(), 0);
        for t in self.tasks {
            let (c, r) = t.await.expect("writer");
            for (code, n) in c {
                *codes.entry(code).or_insert(0) += n;
            }
            retried += r;
        }
        (codes, retried)
    }
}

async fn write_until(
    url: String,
    agent: String,
    stop: Arc<AtomicBool>,
) -> (BTreeMap<u16, u64>, u64) {
    let c = h1();
    let (mut codes, mut retried) = (BTreeMap::new(), 0);
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let sent = c
            .patch(&url)
            .header("content-type", "application/merge-patch+json")
            .header("user-agent", &agent)
            .body(format!(r#"{{"data":{{"n":"{n}"}}}}"#))
            .send()
            .await;
        let code = sent.map_or(0, |r| r.status().as_u16());
        if code == 429 {
            retried += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        *codes.entry(code).or_insert(0u64) += 1;
    }
    (codes, retried)
}

/// The changes of version writing each object, in order of arrival (seconds after `base`, the
/// version, the client), the first `n` of each: what to look at when a test fails.
pub fn switches(records: &[WriteRecord], n: usize, base: std::time::Instant) -> String {
    let mut by_object: BTreeMap<String, Vec<&WriteRecord>> = BTreeMap::new();
    for r in records {
        let key = format!("{}/{}", r.key.namespace, r.key.name);
        by_object.entry(key).or_default().push(r);
    }
    let mut out = String::new();
    for (key, mut writes) in by_object {
        writes.sort_by_key(|r| r.arrived);
        let changes = writes.windows(2).filter(|w| w[0].version != w[1].version);
        for w in changes.take(n) {
            let at = |r: &WriteRecord| r.arrived.saturating_duration_since(base).as_secs_f64();
            out.push_str(&format!(
                "{key}: {:.3} {} {} -> {:.3} {} {}\n",
                at(w[0]),
                w[0].version,
                w[0].client,
                at(w[1]),
                w[1].version,
                w[1].client
            ));
        }
    }
    out
}
