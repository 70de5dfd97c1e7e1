//! The objects of skewgate's presence, as JSON: its Lease, and the Endpoints and EndpointSlice of
//! the `default/kubernetes` Service naming the live replicas.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::fleet::LEASE_LABEL;

/// What the endpoints should name: the live replicas, and the port of the Service's endpoints.
pub(super) struct Desired {
    /// Every live replica, sorted.
    replicas: Vec<SocketAddr>,
    /// This replica's port: the EndpointSlice carries one port, so it names the replicas on it.
    port: u16,
}

impl Desired {
    pub(super) fn new(mut replicas: Vec<SocketAddr>, port: u16) -> Desired {
        replicas.sort();
        replicas.dedup();
        Desired { replicas, port }
    }
}

/// The Lease of the replica at `address`, renewed at `now`; `current` is the Lease as stored, whose
/// metadata (resourceVersion) a replacement keeps.
pub(super) fn lease(
    name: &str,
    address: SocketAddr,
    duration: Duration,
    now: SystemTime,
    current: Option<&Value>,
    state: &Value,
) -> Value {
    let mut lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "labels": {"app.kubernetes.io/name": "skewgate", LEASE_LABEL: "true"},
        },
        "spec": {
            "holderIdentity": address.to_string(),
            "leaseDurationSeconds": duration.as_secs().max(1),
            "renewTime": humantime::format_rfc3339_micros(now).to_string(),
        },
    });
    if !state.is_null() {
        lease["metadata"]["annotations"] =
            json!({super::fleet::STATE_ANNOTATION: state.to_string()});
    }
    if let Some(rv) = current.and_then(|c| c["metadata"].get("resourceVersion")) {
        lease["metadata"]["resourceVersion"] = rv.clone();
    }
    lease
}

/// The replicas whose Lease (in `list`, a LeaseList) is current at `now`.
#[cfg(test)]
pub(super) fn live_replicas(list: &Value, now: SystemTime) -> Vec<SocketAddr> {
    super::fleet::members(list, now)
        .into_iter()
        .filter(|m| m.live)
        .map(|m| m.address)
        .collect()
}

/// `default/kubernetes` Endpoints: one subset per port, its addresses sorted.
pub(super) fn endpoints(desired: &Desired) -> Value {
    let mut ports: Vec<u16> = desired.replicas.iter().map(SocketAddr::port).collect();
    ports.sort_unstable();
    ports.dedup();
    let subsets: Vec<Value> = ports
        .iter()
        .map(|&port| {
            let addresses: Vec<Value> = desired
                .replicas
                .iter()
                .filter(|a| a.port() == port)
                .map(|a| json!({"ip": a.ip().to_string()}))
                .collect();
            json!({
                "addresses": addresses,
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            })
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
        },
        "subsets": subsets,
    })
}

/// `default/kubernetes` EndpointSlice: the replicas on this replica's port.
pub(super) fn endpoint_slice(desired: &Desired) -> Value {
    let on_port = desired.replicas.iter().filter(|a| a.port() == desired.port);
    let address_type = match desired.replicas.first() {
        Some(a) if a.is_ipv6() => "IPv6",
        _ => "IPv4",
    };
    let endpoints: Vec<Value> = on_port
        .map(|a| json!({"addresses": [a.ip().to_string()], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"},
        },
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": [{"name": "https", "port": desired.port, "protocol": "TCP"}],
    })
}

/// Whether the stored object `current` already holds what `desired` holds (its subsets, or its
/// endpoints and ports).
pub(super) fn same_content(current: &Value, desired: &Value) -> bool {
    ["subsets", "endpoints", "ports", "addressType"]
        .iter()
        .all(|k| current.get(*k) == desired.get(*k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_current_leases_of_skewgate_count() {
        let now = SystemTime::now();
        let at = |secs_ago: u64| {
            humantime::format_rfc3339_micros(now - Duration::from_secs(secs_ago)).to_string()
        };
        let list = json!({"items": [
            {"metadata": {"labels": {LEASE_LABEL: "true"}}, "spec": {"holderIdentity": "10.0.0.1:6443", "renewTime": at(5), "leaseDurationSeconds": 15}},
            {"metadata": {"labels": {LEASE_LABEL: "true"}}, "spec": {"holderIdentity": "10.0.0.2:6443", "renewTime": at(20), "leaseDurationSeconds": 15}},
            {"metadata": {"labels": {}}, "spec": {"holderIdentity": "10.0.0.3:6443", "renewTime": at(1), "leaseDurationSeconds": 15}},
        ]});
        assert_eq!(
            live_replicas(&list, now),
            vec!["10.0.0.1:6443".parse::<SocketAddr>().unwrap()]
        );
    }

    #[test]
    fn the_endpoints_name_every_replica_by_port() {
        let d = Desired::new(
            vec![
                "10.0.0.2:6443".parse().unwrap(),
                "10.0.0.1:6443".parse().unwrap(),
            ],
            6443,
        );
        let e = endpoints(&d);
        assert_eq!(e["subsets"][0]["addresses"][0]["ip"], "10.0.0.1");
        assert_eq!(e["subsets"][0]["ports"][0]["port"], 6443);
        let s = endpoint_slice(&d);
        assert_eq!(s["endpoints"].as_array().map(Vec::len), Some(2));
        assert_eq!(s["addressType"], "IPv4");
        assert!(same_content(&e, &endpoints(&d)));
    }
}
