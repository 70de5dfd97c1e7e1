//! HTTP/2 spoken frame by frame, for tests that must see or send exactly what is on the wire.

#![allow(dead_code)]

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const ACK: u8 = 0x1;

/// A connection to `addr` past its preface and SETTINGS.
pub async fn connect(addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    conn.write_all(&hello).await.expect("preface");
    conn
}

/// One frame: its 9-byte head and `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len())
        .expect("small frame")
        .to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A GET of `path` as a header block of its own: static indices and raw literals.
pub fn get(path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86]; // :method GET, :scheme http
    for (name_index, value) in [(4u8, path), (1, "skewgate.test")] {
        block.push(name_index); // literal without indexing, name :path / :authority
        block.push(u8::try_from(value.len()).expect("short value"));
        block.extend_from_slice(value.as_bytes());
    }
    block
}

/// One frame as read: kind, flags, stream and payload.
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// The next frame on `conn`, or `None` once the connection ends.
pub async fn read_frame(conn: &mut tokio::net::TcpStream) -> Option<Frame> {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 9];
    conn.read_exact(&mut head).await.ok()?;
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let mut payload = vec![0u8; len];
    conn.read_exact(&mut payload).await.ok()?;
    Some(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        payload,
    })
}

/// The next frame before `until` that is not the peer's SETTINGS (each acknowledged here):
/// `Some(None)` once the connection ended, `None` at `until` or when the acknowledgement could not
/// be written.
pub async fn next_frame(
    conn: &mut tokio::net::TcpStream,
    until: tokio::time::Instant,
) -> Option<Option<Frame>> {
    use tokio::io::AsyncWriteExt;
    loop {
        let f = tokio::time::timeout_at(until, read_frame(conn))
            .await
            .ok()?;
        match f {
            Some(f) if f.kind == SETTINGS && f.flags & ACK == 0 => {
                conn.write_all(&frame(SETTINGS, ACK, 0, &[])).await.ok()?;
            }
            other => return Some(other),
        }
    }
}

/// The 32-bit error code at `at` in a RST_STREAM's (0) or GOAWAY's (4) payload.
pub fn code(payload: &[u8], at: usize) -> u32 {
    payload
        .get(at..at + 4)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}
