//! The stdio transport with a size limit that answers: a message over it gets a JSON-RPC error instead of
//! rmcp's silence.
//!
//! rmcp's line transport drops a line longer than its limit (16 MiB) and logs it, so the client waits
//! for an answer that never comes. [`LimitedLines`] reads the lines first: a line over the limit is
//! replaced, before rmcp sees it, by a small request of the method [`OVERSIZED_METHOD`] under the id
//! found at the start of the dropped line, which the server answers with an `Invalid Request` error
//! naming the limit. A dropped line whose start holds no id becomes `{}`, which rmcp answers with an
//! `Invalid Request` error of no id.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// The method of the request that stands for a message over the limit; the server answers it with an
/// error (`-32600`, `{"code": "MESSAGE_TOO_LARGE", "limit": N}`).
pub const OVERSIZED_METHOD: &str = "toolgate/message_too_large";

/// The default limit of one incoming message on stdio: 4 MiB.
pub const DEFAULT_MAX_MESSAGE: usize = 4 * 1024 * 1024;

/// How much of a dropped line's start is searched for its id.
const ID_WINDOW: usize = 1024;

/// A reader of newline-delimited JSON-RPC messages that replaces each line longer than its limit by a
/// request the server answers with an error (see the module's documentation).
#[derive(Debug)]
pub struct LimitedLines<R> {
    inner: R,
    max: usize,
    line: Vec<u8>,
    /// The first bytes of a line over the limit, while the rest of it is skipped.
    dropped: Option<Vec<u8>>,
    ready: VecDeque<u8>,
    eof: bool,
}

impl<R> LimitedLines<R> {
    /// Reads lines of `inner`, at most `max` bytes each (at least 1 KiB).
    pub fn new(inner: R, max: usize) -> LimitedLines<R> {
        LimitedLines {
            inner,
            max: max.max(ID_WINDOW),
            line: Vec::new(),
            dropped: None,
            ready: VecDeque::new(),
            eof: false,
        }
    }

    fn take(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            match (&mut self.dropped, byte) {
                (Some(start), b'\n') => {
                    let replacement = replacement(start, self.max);
                    self.ready.extend(replacement.as_bytes());
                    self.ready.push_back(b'\n');
                    self.dropped = None;
                }
                (Some(_), _) => {}
                (None, b'\n') => {
                    self.ready.extend(self.line.drain(..));
                    self.ready.push_back(b'\n');
                }
                (None, byte) => {
                    self.line.push(byte);
                    if self.line.len() > self.max {
                        self.line.truncate(ID_WINDOW);
                        self.dropped = Some(std::mem::take(&mut self.line));
                    }
                }
            }
        }
    }
}

/// The line that stands for a dropped one: a request under its id, or `{}` when none is found.
fn replacement(start: &[u8], max: usize) -> String {
    match id_of(start) {
        Some(id) => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{OVERSIZED_METHOD}","params":{{"limit":{max}}}}}"#
        ),
        None => "{}".to_owned(),
    }
}

/// The JSON-RPC id at the start of a message: the value of its first `"id"` key, a number or a string
/// without escapes.
fn id_of(start: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(start);
    let at = text.find("\"id\"")?;
    let rest = text[at + 4..].trim_start().strip_prefix(':')?.trim_start();
    if let Some(string) = rest.strip_prefix('"') {
        let end = string.find('"')?;
        let id = &string[..end];
        return (!id.contains('\\')).then(|| format!("\"{id}\""));
    }
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(rest.len());
    let id = &rest[..end];
    (!id.is_empty() && end < rest.len()).then(|| id.to_owned())
}

impl<R: AsyncRead + Unpin> AsyncRead for LimitedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.ready.is_empty() {
                let n = self.ready.len().min(buf.remaining());
                let bytes: Vec<u8> = self.ready.drain(..n).collect();
                buf.put_slice(&bytes);
                return Poll::Ready(Ok(()));
            }
            if self.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0_u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut self.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => {
                    self.eof = true;
                    // A last line without its newline goes on as it is, unless it was over the limit.
                    let rest = std::mem::take(&mut self.line);
                    self.ready.extend(rest);
                }
                Poll::Ready(Ok(())) => {
                    let filled = read.filled().to_vec();
                    self.take(&filled);
                }
            }
        }
    }
}

/// Stdin, its lines limited to `max` bytes (see [`LimitedLines`]), and stdout: a transport for
/// `serve`, like `rmcp::transport::stdio()`.
pub fn stdio_limited(max: usize) -> (LimitedLines<tokio::io::Stdin>, tokio::io::Stdout) {
    (
        LimitedLines::new(tokio::io::stdin(), max),
        tokio::io::stdout(),
    )
}

/// [`stdio_limited`] with [`DEFAULT_MAX_MESSAGE`].
pub fn stdio() -> (LimitedLines<tokio::io::Stdin>, tokio::io::Stdout) {
    stdio_limited(DEFAULT_MAX_MESSAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(input: &[u8], max: usize) -> String {
        let mut lines = LimitedLines::new(input, max);
        let mut out = Vec::new();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            use tokio::io::AsyncReadExt;
            lines.read_to_end(&mut out).await.expect("read");
        });
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn lines_within_the_limit_pass_as_they_are() {
        let input = b"{\"a\":1}\n{\"b\":2}\npartial";
        assert_eq!(through(input, 2048), "{\"a\":1}\n{\"b\":2}\npartial");
    }

    #[test]
    fn a_line_over_the_limit_becomes_a_request_under_its_id() {
        let long = "x".repeat(5000);
        let input = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"tools/call\",\"params\":{{\"a\":\"{long}\"}}}}\n{{\"ok\":1}}\n"
        );
        let out = through(input.as_bytes(), 2048);
        assert_eq!(
            out,
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"{OVERSIZED_METHOD}\",\"params\":{{\"limit\":2048}}}}\n{{\"ok\":1}}\n"
            )
        );
        let input = format!("{{\"id\": \"req-7\", \"x\":\"{long}\"}}\n");
        assert!(through(input.as_bytes(), 2048).contains("\"id\":\"req-7\""));
    }

    #[test]
    fn a_line_over_the_limit_without_an_id_becomes_an_empty_object() {
        let input = format!("{{\"x\":\"{}\"}}\n", "y".repeat(5000));
        assert_eq!(through(input.as_bytes(), 2048), "{}\n");
        let cut = format!("{{\"id\":{}", "9".repeat(5000));
        assert_eq!(id_of(&cut.as_bytes()[..ID_WINDOW]), None);
        assert_eq!(id_of(br#"{"id":"a\"b"}"#), None);
    }
}
