//! What skewgate writes to an HTTP/2 peer: header blocks as literals, as HAProxy writes them (the
//! vendor/h2 patch "literal header encoding"). No field goes into the peer's dynamic table and no
//! string is Huffman-coded, request after request, so a block can be read byte by byte here.

mod common;
#[path = "common/frames.rs"]
mod frames;

use std::time::Duration;

use common::*;
use frames::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Reads frames until the stream `id` ends; returns the header blocks sent on it (HEADERS with its
/// CONTINUATIONs joined).
async fn blocks_of(conn: &mut TcpStream, id: u32) -> Vec<Vec<u8>> {
    let mut blocks = Vec::new();
    loop {
        let Frame {
            kind,
            flags,
            stream,
            payload,
        } = read_frame(conn).await.expect("a frame");
        if kind == SETTINGS && flags & ACK == 0 {
            conn.write_all(&frame(SETTINGS, ACK, 0, &[]))
                .await
                .expect("ack");
        }
        if stream != id {
            continue;
        }
        match kind {
            HEADERS => blocks.push(payload),
            CONTINUATION => blocks.last_mut().expect("after HEADERS").extend(payload),
            _ => {}
        }
        if flags & END_STREAM != 0 {
            return blocks;
        }
    }
}

/// An HPACK integer with an `n`-bit prefix at `b[*at]`.
fn int(b: &[u8], at: &mut usize, n: u32) -> usize {
    let mask = (1usize << n) - 1;
    let mut v = usize::from(b[*at]) & mask;
    *at += 1;
    if v == mask {
        let mut shift = 0;
        loop {
            let byte = usize::from(b[*at]);
            *at += 1;
            v += (byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
    }
    v
}

/// A string literal, which must be raw (not Huffman-coded).
fn raw_string(b: &[u8], at: &mut usize) -> String {
    assert_eq!(
        b[*at] & 0x80,
        0,
        "a Huffman-coded string at byte {at} of {b:02x?}"
    );
    let len = int(b, at, 7);
    let s = String::from_utf8_lossy(&b[*at..*at + len]).into_owned();
    *at += len;
    s
}

/// The fields of a header block made only of static indices and raw literals without indexing;
/// fails on anything that uses or fills the dynamic table, or is Huffman-coded.
fn literal_fields(b: &[u8]) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let first = b[at];
        if first & 0x80 != 0 {
            let index = int(b, &mut at, 7);
            assert!((1..=61).contains(&index), "dynamic-table index {index}");
            fields.push((format!("#{index}"), String::new()));
        } else if first & 0xc0 == 0x40 {
            panic!("a literal with incremental indexing (fills the dynamic table): {b:02x?}");
        } else if first & 0xe0 == 0x20 {
            int(b, &mut at, 5); // a dynamic table size update
        } else {
            let index = int(b, &mut at, 4);
            assert!(index <= 61, "a name from the dynamic table: {index}");
            let name = if index == 0 {
                raw_string(b, &mut at)
            } else {
                format!("#{index}")
            };
            fields.push((name, raw_string(b, &mut at)));
        }
    }
    fields
}

/// A gate in front of the simulators, and a connection to it past its preface and SETTINGS. The
/// simulators and the gate are returned to be held as long as the connection.
async fn connected() -> (Sims, Gate, TcpStream) {
    let sims = sims().await;
    let gate = gate(&routes(
        &sims,
        "writes:\n  default: old\nreads:\n  default: old\n",
    ))
    .await;
    let conn = connect(gate.server.addr).await;
    (sims, gate, conn)
}

#[tokio::test]
async fn h2_header_blocks_are_static_indices_and_raw_literals_request_after_request() {
    let (_sims, _gate, mut conn) = connected().await;
    let path = "/api/v1/namespaces/default/configmaps";
    let mut answers = Vec::new();
    // The second answer is the one a stateful encoder would shorten with what the first indexed.
    for id in [1u32, 3] {
        let request = frame(HEADERS, END_HEADERS | END_STREAM, id, &get(path));
        conn.write_all(&request).await.expect("request");
        let blocks = tokio::time::timeout(Duration::from_secs(10), blocks_of(&mut conn, id))
            .await
            .expect("an answer within 10 s");
        answers.push(blocks);
    }
    for blocks in &answers {
        let fields = literal_fields(&blocks[0]);
        assert_eq!(
            fields[0].0, "#8",
            ":status 200 as static index 8: {fields:?}"
        );
        // content-type (static name 31), value raw.
        assert!(
            fields
                .iter()
                .any(|(n, v)| n == "#31" && v.starts_with("application/json")),
            "{fields:?}"
        );
    }
}

/// A GET whose fields go into the decoder's dynamic table: `:path` and `:authority` as literals
/// with incremental indexing (static names 4 and 1), and `x-cut`, a new name, likewise.
fn indexed_get(path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86]; // :method GET, :scheme http
    for (first, name, value) in [
        (0x44u8, "", path),
        (0x41, "", "skewgate.test"),
        (0x40, "x-cut", "here"),
    ] {
        block.push(first);
        if !name.is_empty() {
            block.push(u8::try_from(name.len()).expect("short name"));
            block.extend_from_slice(name.as_bytes());
        }
        block.push(u8::try_from(value.len()).expect("short value"));
        block.extend_from_slice(value.as_bytes());
    }
    block
}

/// Reads frames until the head of stream `id`; whether it says 200 (static index 8).
async fn answered_200(conn: &mut TcpStream, id: u32) -> bool {
    loop {
        let f = read_frame(conn).await.expect("a frame");
        if f.kind == SETTINGS && f.flags & ACK == 0 {
            conn.write_all(&frame(SETTINGS, ACK, 0, &[]))
                .await
                .expect("ack");
        }
        if f.kind == RST_STREAM || f.kind == GOAWAY {
            return false;
        }
        if f.kind == HEADERS && f.stream == id {
            return f.payload.first() == Some(&0x88);
        }
    }
}

#[tokio::test]
async fn a_header_block_cut_anywhere_across_continuation_frames_is_read_whole() {
    let (_sims, _gate, mut conn) = connected().await;
    let block = indexed_get("/api/v1/namespaces/default/configmaps");
    let mut id = 1u32;
    // Cut inside every field and between them: the part decoded from the HEADERS frame is
    // neither lost nor decoded (and indexed) twice when the CONTINUATION brings the rest.
    for cut in 1..block.len() {
        let mut request = frame(HEADERS, END_STREAM, id, &block[..cut]);
        request.extend(frame(CONTINUATION, END_HEADERS, id, &block[cut..]));
        conn.write_all(&request).await.expect("request");
        let ok = tokio::time::timeout(Duration::from_secs(10), answered_200(&mut conn, id))
            .await
            .expect("an answer within 10 s");
        assert!(ok, "the block cut at byte {cut} was answered 200");
        id += 2;
    }
    // The dynamic table holds each request's three fields once: the newest (62) is `x-cut`, then
    // `:authority`, then `:path` (64).
    let indexed = [0x82, 0x86, 0xc0, 0xbf, 0xbe];
    let request = frame(HEADERS, END_STREAM | END_HEADERS, id, &indexed);
    conn.write_all(&request).await.expect("request");
    let ok = tokio::time::timeout(Duration::from_secs(10), answered_200(&mut conn, id))
        .await
        .expect("an answer within 10 s");
    assert!(
        ok,
        "the fields indexed by the cut blocks are where HPACK puts them"
    );
}
