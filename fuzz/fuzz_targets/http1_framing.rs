//! HTTP/1.1 framing through the proxy: any bytes a client sends on a connection get a response or a
//! closed connection, never a hang or a crash. One proxy (over a simulated apiserver) serves every
//! input.
#![no_main]

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Bed {
    runtime: tokio::runtime::Runtime,
    addr: SocketAddr,
    _server: skewgate::app::Server,
    _sim: skewgate_sim::SimHandle,
}

fn bed() -> &'static Bed {
    static BED: OnceLock<Bed> = OnceLock::new();
    BED.get_or_init(|| {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let (addr, server, sim) = runtime.block_on(async {
            let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
            let store = skewgate_sim::Store::new();
            let sim = skewgate_sim::start(skewgate_sim::SimConfig::new("v1.30.0"), store, any)
                .await
                .expect("simulator");
            let dir = std::env::temp_dir().join(format!("skewgate-fuzz-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("dir");
            let routes = dir.join("routes.yaml");
            std::fs::write(
                &routes,
                format!(
                    "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: b, endpoints: [{}]}}\nwrites:\n  default: b\nreads:\n  default: b\n",
                    sim.url()
                ),
            )
            .expect("routes");
            let server = skewgate::app::Server::start(skewgate::app::ServeOptions {
                routes,
                listen: any,
                admin_listen: any,
                reload_poll: Duration::from_secs(60),
                settings: skewgate::proxy::ProxySettings::default(),
                edge: skewgate::edge::EdgeSettings {
                    first_request_timeout: Duration::from_secs(2),
                    ..skewgate::edge::EdgeSettings::default()
                },
            })
            .await
            .expect("skewgate");
            (server.addr, server, sim)
        });
        Bed {
            runtime,
            addr,
            _server: server,
            _sim: sim,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let bed = bed();
    bed.runtime.block_on(async {
        let mut s = tokio::net::TcpStream::connect(bed.addr).await.expect("connect");
        let _ = s.write_all(data).await;
        let _ = s.shutdown().await;
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "no answer and no close for {:?}", String::from_utf8_lossy(data));
        if !out.is_empty() && !data.starts_with(b"PRI") {
            assert!(out.starts_with(b"HTTP/1."), "{:?}", String::from_utf8_lossy(&out));
        }
    });
});
