//! Binding a listener the way kube-apiserver does: with the kernel's largest listen backlog.

use std::net::SocketAddr;

use socket2::{Domain, Socket, Type};

/// Used when `/proc/sys/net/core/somaxconn` cannot be read: Linux's default since 5.4.
const FALLBACK_BACKLOG: i32 = 4096;

/// A non-blocking TCP listener on `addr` (with `SO_REUSEADDR`) whose listen backlog is the
/// kernel's limit, `net.core.somaxconn`, as Go's `net.Listen` (so kube-apiserver, and HAProxy
/// below its `maxconn`) sets it. The standard library's 128 (tokio's 1,024) overflows when a few
/// thousand kubelets reconnect at once: the kernel drops their SYNs and final ACKs, and clients
/// that already sent a request see it reset.
pub fn listen(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog())?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// `net.core.somaxconn`, which bounds any backlog asked for.
pub fn backlog() -> i32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(FALLBACK_BACKLOG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_any_port_and_accepts() {
        let l = listen("127.0.0.1:0".parse().expect("addr")).expect("listen");
        let addr = l.local_addr().expect("addr");
        assert_ne!(addr.port(), 0);
        let _c = std::net::TcpStream::connect(addr).expect("connect");
        l.set_nonblocking(false).expect("blocking");
        l.accept().expect("accept");
    }

    /// A burst of connections to a listener that is not accepting yet (a worker busy, a reconnect
    /// storm) waits in the backlog: every one is established. With the standard library's backlog
    /// of 128 the rest would have their SYNs dropped.
    #[tokio::test]
    async fn a_burst_of_connections_waits_in_the_backlog() {
        let l = listen("127.0.0.1:0".parse().expect("addr")).expect("listen");
        let addr = l.local_addr().expect("addr");
        let burst = 512.min(usize::try_from(backlog()).unwrap_or(0));
        let mut tries = tokio::task::JoinSet::new();
        for _ in 0..burst {
            tries.spawn(tokio::time::timeout(
                std::time::Duration::from_secs(2),
                tokio::net::TcpStream::connect(addr),
            ));
        }
        let mut open = Vec::new();
        while let Some(r) = tries.join_next().await {
            if let Ok(Ok(Ok(stream))) = r {
                open.push(stream);
            }
        }
        assert_eq!(
            open.len(),
            burst,
            "connections established before any accept"
        );
    }

    #[test]
    fn a_port_in_use_is_an_error() {
        let l = listen("127.0.0.1:0".parse().expect("addr")).expect("listen");
        let addr = l.local_addr().expect("addr");
        assert!(listen(addr).is_err());
    }
}
