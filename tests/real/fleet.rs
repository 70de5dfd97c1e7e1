//! Two replicas as one fleet in front of the real pair: a pin moved at a `flipAt` that one
//! replica's route file reaches late moves when both run it, as the apiservers' audit logs tell.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::h2client::H2;
use crate::harness::{Pair, direct, gate_with, logged, table};
use crate::moves::{create_configmaps, no_overlap_in_the_audit_logs, sleep_until};

/// Writers per replica.
const WRITERS: usize = 6;

fn routes(pin: &str) -> String {
    format!(
        "writes:\n  default: old\n  fence: 4s\n  pins:\n    - name: fleet\n      namespaces: [fleet]\n{pin}reads:\n  default: old\n"
    )
}

/// Two replicas with `--advertise-address` (Leases renewed every 500 ms, valid 2 s, under
/// deploy/'s RBAC), six writers through each patching the same configmaps; the pin moves to the
/// new version at a `flipAt` that the second replica's file reaches 5 s after it. The fleet holds
/// the move until both run it: every write is answered 200 (a 429, refused unsent while the
/// replicas could not tell, retried as client-go retries it), and the old version answered its
/// last patch before the new one received its first (skewgate without the fleet: the second
/// replica writes through the old version for 5 s after the first moved).
pub fn a_fleet_moves_a_pin_when_its_late_replica_runs_the_move(pair: &Pair) {
    let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubeadm/rbac.yaml");
    let (ok, text) = direct(pair, "new", &["apply", "-f", &rbac.to_string_lossy()]);
    assert!(ok, "{text}");
    let _ = direct(pair, "new", &["create", "namespace", "fleet"]);
    let replica = |ip: &str| {
        let more = [
            "--advertise-address",
            ip,
            "--lease-duration",
            "2s",
            "--lease-renew-interval",
            "500ms",
            "--goaway-chance",
            "0",
        ];
        gate_with(pair, &routes("      backend: old\n"), &more)
    };
    let (a, a_file) = replica("192.0.2.21");
    let (b, b_file) = replica("192.0.2.22");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let codes = runtime.block_on(async {
        let (ca, cb) = (
            H2::connect(pair, &a.addr).await,
            H2::connect(pair, &b.addr).await,
        );
        create_configmaps(&ca, "fleet", WRITERS).await;
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let writers: Vec<_> = (0..WRITERS * 2)
            .map(|w| {
                let client = if w < WRITERS { ca.clone() } else { cb.clone() };
                tokio::spawn(write_retrying(client, w % WRITERS, stop.clone()))
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let flip_at = SystemTime::now() + Duration::from_secs(4);
        let pin = format!(
            "      backend: new\n      from: old\n      flipAt: {}\n",
            humantime::format_rfc3339_seconds(flip_at)
        );
        let moved = table(pair, &routes(&pin));
        std::fs::write(&a_file, &moved).expect("routes");
        sleep_until(flip_at + Duration::from_secs(5)).await;
        std::fs::write(&b_file, &moved).expect("routes");
        // Four rounds (2 s), the fence (4 s), and 3 s on the new version.
        sleep_until(flip_at + Duration::from_secs(15)).await;
        let _ = stop_tx.send(true);
        let mut codes = std::collections::BTreeMap::new();
        for w in writers {
            for (code, n) in w.await.expect("writer") {
                *codes.entry(code).or_insert(0u64) += n;
            }
        }
        codes
    });
    println!("fleet: final codes {codes:?}");
    assert_eq!(
        codes.keys().copied().collect::<Vec<_>>(),
        vec![200],
        "every write answered: {codes:?}\n{:?}\n{:?}",
        logged(&a),
        logged(&b)
    );
    no_overlap_in_the_audit_logs(pair, "fleet");
}

/// Patches configmap `cm-{w}` in namespace fleet until `stop`, retrying a 429 after 100 ms: the
/// count of each final code (the 429s retried under 429).
async fn write_retrying(
    mut client: H2,
    w: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> std::collections::BTreeMap<u16, u64> {
    let path = format!("/api/v1/namespaces/fleet/configmaps/cm-{w}");
    let mut codes = std::collections::BTreeMap::new();
    let mut n = 0u64;
    while !*stop.borrow() {
        n += 1;
        let body = format!(r#"{{"data":{{"n":"{n}"}}}}"#);
        let (code, _) = client
            .call("PATCH", &path, "application/merge-patch+json", body)
            .await;
        if code == 429 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        *codes.entry(code).or_insert(0) += 1;
        if code == 0 {
            break;
        }
    }
    codes
}
