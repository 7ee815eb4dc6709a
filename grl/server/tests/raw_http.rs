//! Hostile HTTP clients written as raw bytes on TCP, for what no well-behaved client sends:
//! HTTP/1.1 exchanges ([`exchange`], [`read_response`]) and HTTP/2 frames ([`H2`]).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `bytes` on a new connection to `addr` and returns what came back until the peer
/// closed the connection (or 20 s passed).
pub(crate) async fn exchange(addr: &str, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // A peer that answers before reading everything (431) may reset the rest of the write.
    let _ = s.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The status codes of the responses in `text`, in order.
pub(crate) fn statuses(text: &str) -> Vec<u16> {
    text.match_indices("HTTP/1.1 ")
        .filter_map(|(i, _)| text.get(i + 9..i + 12)?.parse().ok())
        .collect()
}

/// Reads one whole HTTP/1.1 response (sized or chunked body) from `s`.
pub(crate) async fn read_response(s: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_ascii_lowercase();
            let body = &text[end + 4..];
            let done = if let Some(cl) = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
            {
                body.len() >= cl.trim().parse::<usize>().unwrap()
            } else if head.contains("transfer-encoding: chunked") {
                body.ends_with("0\r\n\r\n")
            } else {
                true
            };
            if done {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut chunk))
            .await
            .expect("a response within 20 s")
            .unwrap();
        assert!(
            n > 0,
            "closed mid-response: {}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The client connection preface of HTTP/2.
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types.
pub(crate) const DATA: u8 = 0;
pub(crate) const HEADERS: u8 = 1;
pub(crate) const RST_STREAM: u8 = 3;
pub(crate) const SETTINGS: u8 = 4;
pub(crate) const PING: u8 = 6;
pub(crate) const GOAWAY: u8 = 7;
/// Flags.
pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const ACK: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;

/// One HTTP/2 frame.
#[derive(Debug)]
pub(crate) struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// Appends a frame to `out`.
pub(crate) fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// An HPACK block for `GET path` (no Huffman, nothing indexed but the static table).
pub(crate) fn get_headers(path: &str) -> Vec<u8> {
    // :method GET, :scheme http (static indices 2 and 6), then literals without indexing
    // with indexed names: :path (4), :authority (1).
    let mut b = vec![0x82, 0x86];
    for (index, value) in [(4u8, path), (1, "x")] {
        b.push(index);
        assert!(value.len() < 127);
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
    }
    b
}

/// A raw HTTP/2 connection (prior knowledge) that answers the server's SETTINGS.
pub(crate) struct H2 {
    pub stream: TcpStream,
}

impl H2 {
    /// Connects and sends the preface and empty SETTINGS.
    pub(crate) async fn connect(addr: &str) -> Self {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut out = PREFACE.to_vec();
        frame(&mut out, SETTINGS, 0, 0, &[]);
        stream.write_all(&out).await.unwrap();
        Self { stream }
    }

    /// Sends raw bytes.
    pub(crate) async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// The next frame, acknowledging SETTINGS on the way; `None` when the connection ends
    /// or nothing arrives within `wait`.
    pub(crate) async fn next(&mut self, wait: Duration) -> Option<Frame> {
        let read = async {
            let mut head = [0u8; 9];
            self.stream.read_exact(&mut head).await.ok()?;
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            self.stream.read_exact(&mut payload).await.ok()?;
            let f = Frame {
                kind: head[3],
                flags: head[4],
                stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
                payload,
            };
            if f.kind == SETTINGS && f.flags & ACK == 0 {
                let mut ack = Vec::new();
                frame(&mut ack, SETTINGS, ACK, 0, &[]);
                let _ = self.stream.write_all(&ack).await;
            }
            Some(f)
        };
        tokio::time::timeout(wait, read).await.ok().flatten()
    }

    /// Sends `GET path` on `stream`; the frames read until its response ended.
    pub(crate) async fn get(&mut self, stream: u32, path: &str) -> Vec<Frame> {
        let mut out = Vec::new();
        frame(
            &mut out,
            HEADERS,
            END_STREAM | END_HEADERS,
            stream,
            &get_headers(path),
        );
        self.send(&out).await.unwrap();
        let mut got = Vec::new();
        loop {
            let f = self
                .next(Duration::from_secs(20))
                .await
                .expect("a response within 20 s");
            let end = f.stream == stream
                && (f.kind == HEADERS || f.kind == DATA)
                && f.flags & END_STREAM != 0;
            got.push(f);
            if end {
                return got;
            }
        }
    }
}

/// The error code of a GOAWAY frame.
pub(crate) fn goaway_code(f: &Frame) -> u32 {
    u32::from_be_bytes([f.payload[4], f.payload[5], f.payload[6], f.payload[7]])
}

/// The last stream id of a GOAWAY frame.
pub(crate) fn goaway_last_stream(f: &Frame) -> u32 {
    u32::from_be_bytes([f.payload[0], f.payload[1], f.payload[2], f.payload[3]]) & 0x7fff_ffff
}
