//! Raw HTTP/1.1 exchanges with a server on loopback, one connection each, for tests that must see
//! exactly what goes over the wire (headers the client libraries would not send, answers they would
//! hide).

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `request` (a whole HTTP/1.1 request, head and body) to `addr` on a connection of its own, and
/// reads the answer until the server closes, `limit` passes, or `done` says that what came so far is
/// all the test waits for.
pub async fn exchange(
    addr: SocketAddr,
    request: &str,
    limit: Duration,
    done: impl Fn(&str) -> bool,
) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    // A server may answer and close before it has read a request it refuses (one too large): what it
    // answered is still read.
    let _ = stream.write_all(request.as_bytes()).await;
    let mut raw = Vec::new();
    let mut buf = [0_u8; 8192];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
        }
        if done(&String::from_utf8_lossy(&raw)) {
            break;
        }
    }
    String::from_utf8_lossy(&raw).into_owned()
}

/// The JSON-RPC messages of an answer's body: its lines that are JSON objects, plain or as the data
/// of server-sent events.
pub fn messages(body: &str) -> impl Iterator<Item = Value> + '_ {
    body.lines().filter_map(|line| {
        let line = line.trim();
        let json = line.strip_prefix("data:").map_or(line, str::trim);
        json.starts_with('{')
            .then(|| serde_json::from_str(json).ok())
            .flatten()
    })
}

/// Whether the answer read so far (`text`, head and body) holds the answer to the JSON-RPC request
/// `id`.
pub fn answered(text: &str, id: &Value) -> bool {
    text.split_once("\r\n\r\n")
        .is_some_and(|(_, body)| messages(body).any(|message| message["id"] == *id))
}

/// The status code of an answer (0 if it has none).
pub fn status(text: &str) -> u16 {
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// An HTTP answer as a client reads it.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Answer {
    /// The answer `text` (head and body, as [`exchange`] returns it).
    pub fn parse(text: &str) -> Answer {
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text, ""));
        Answer {
            status: status(head),
            head: head.to_owned(),
            body: body.to_owned(),
        }
    }

    /// The value of the header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }

    /// The JSON-RPC messages of the body (plain JSON or server-sent events).
    pub fn messages(&self) -> Vec<Value> {
        messages(&self.body).collect()
    }
}
