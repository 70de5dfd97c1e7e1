//! In-cluster clients through skewgate: with the apiservers run with
//! `--endpoint-reconciler-type=none`, the skewgate replicas keep the `default/kubernetes` Service's
//! Endpoints and EndpointSlice naming themselves (each renewing a Lease). A client resolving the
//! Service as kube-proxy routes it (in-cluster config's `KUBERNETES_SERVICE_HOST`) lands on a
//! skewgate replica; a replica that dies drops out when its Lease expires.

mod common;

use std::net::SocketAddr;

use common::*;
use serde_json::Value;

/// The addresses the Service's EndpointSlice names, as kube-proxy would route to them.
async fn service_endpoints(apiserver: &str) -> Vec<SocketAddr> {
    let slice: Value = match reqwest::get(format!(
        "{apiserver}/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes"
    ))
    .await
    {
        Ok(r) if r.status() == 200 => r.json().await.unwrap_or_default(),
        _ => return Vec::new(),
    };
    let port = slice["ports"][0]["port"].as_u64().unwrap_or(0) as u16;
    let mut out: Vec<SocketAddr> = slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["addresses"][0].as_str()?.parse().ok())
        .map(|ip| SocketAddr::new(ip, port))
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_cluster_clients_resolve_the_kubernetes_service_to_live_skewgate_replicas() {
    let sims = sims().await;
    let file = temp_dir("in-cluster").join("routes.yaml");
    std::fs::write(
        &file,
        routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n"),
    )
    .expect("routes");
    // Two replicas on two node addresses, one port, as on two control-plane nodes.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let (a_addr, b_addr): (SocketAddr, SocketAddr) = (
        format!("127.0.0.1:{port}").parse().expect("addr"),
        format!("127.0.0.2:{port}").parse().expect("addr"),
    );
    let a = publishing_replica(&file, a_addr).await;
    let b = publishing_replica(&file, b_addr).await;
    let apiserver = sims.old.url();
    assert!(
        eventually(10, || async {
            service_endpoints(&apiserver).await == vec![a_addr, b_addr]
        })
        .await,
        "the Service names both replicas: {:?}",
        service_endpoints(&apiserver).await
    );
    let endpoints: Value = reqwest::get(format!(
        "{apiserver}/api/v1/namespaces/default/endpoints/kubernetes"
    ))
    .await
    .expect("endpoints")
    .json()
    .await
    .expect("json");
    assert_eq!(endpoints["subsets"][0]["addresses"][1]["ip"], "127.0.0.2");
    // A client resolving the Service lands on a replica, which serves it from the apiservers.
    for addr in service_endpoints(&apiserver).await {
        let r = reqwest::get(format!("http://{addr}/api/v1/namespaces/default"))
            .await
            .expect("served");
        assert_eq!(r.status(), 200);
        assert_eq!(served_by(&r), OLD);
    }
    // A replica that dies (no shutdown, no withdrawal) drops out once its Lease expires.
    drop(b);
    assert!(
        eventually(10, || async {
            service_endpoints(&apiserver).await == vec![a_addr]
        })
        .await,
        "{:?}",
        service_endpoints(&apiserver).await
    );
    a.shutdown().await;
}
