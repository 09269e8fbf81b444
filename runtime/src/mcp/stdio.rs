//! The stdio transport with a size limit that answers: a message over it gets a JSON-RPC error instead of
//! rmcp's silence.
//!
//! rmcp's line transport drops a line longer than its limit (16 MiB) and logs it, so the client waits
//! for an answer that never comes. [`LimitedLines`] reads the lines first: a line over the limit is
//! replaced, before rmcp sees it, by a small request of the method [`OVERSIZED_METHOD`] under the
//! dropped message's id (the `id` member of its top-level object, wherever it stands in the line; the
//! rest of the line is scanned, not kept), which the server answers with an `Invalid Request` error
//! naming the limit. A dropped line with no such id becomes `{}`, which rmcp answers with an
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

/// The longest id (or key) the scan of a dropped line keeps; a longer one is not taken for an id.
const TOKEN_LIMIT: usize = 256;

/// A reader of newline-delimited JSON-RPC messages that replaces each line longer than its limit by a
/// request the server answers with an error (see the module's documentation).
#[derive(Debug)]
pub struct LimitedLines<R> {
    inner: R,
    max: usize,
    line: Vec<u8>,
    /// The scan for the id of a line over the limit, while the rest of it is skipped.
    dropped: Option<IdScan>,
    ready: VecDeque<u8>,
    eof: bool,
}

impl<R> LimitedLines<R> {
    /// Reads lines of `inner`, at most `max` bytes each (at least 1 KiB).
    pub fn new(inner: R, max: usize) -> LimitedLines<R> {
        LimitedLines {
            inner,
            max: max.max(1024),
            line: Vec::new(),
            dropped: None,
            ready: VecDeque::new(),
            eof: false,
        }
    }

    fn take(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            match (&mut self.dropped, byte) {
                (Some(scan), b'\n') => {
                    let replacement = replacement(scan.id.as_deref(), self.max);
                    self.ready.extend(replacement.as_bytes());
                    self.ready.push_back(b'\n');
                    self.dropped = None;
                }
                (Some(scan), byte) => scan.push(byte),
                (None, b'\n') => {
                    self.ready.extend(self.line.drain(..));
                    self.ready.push_back(b'\n');
                }
                (None, byte) => {
                    self.line.push(byte);
                    if self.line.len() > self.max {
                        let mut scan = IdScan::default();
                        self.line.drain(..).for_each(|byte| scan.push(byte));
                        self.line.shrink_to(self.max.min(64 * 1024));
                        self.dropped = Some(scan);
                    }
                }
            }
        }
    }
}

/// The line that stands for a dropped one: a request under its id, or `{}` when it has none.
fn replacement(id: Option<&str>, max: usize) -> String {
    match id {
        Some(id) => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{OVERSIZED_METHOD}","params":{{"limit":{max}}}}}"#
        ),
        None => "{}".to_owned(),
    }
}

/// Finds the `id` member of a top-level JSON object as its bytes stream by, wherever it stands: keys
/// are compared decoded (`"\u0069d"` is `id`), members of nested values are skipped. Only a number or
/// a string is an id, as JSON-RPC has them; the first `id` member decides.
#[derive(Debug, Default)]
struct IdScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// Whether the next string at depth 1 is a key (after `{` or `,`), not a value.
    expect_key: bool,
    /// The last key at depth 1 was `id`, and its value has not ended yet.
    in_id: bool,
    /// The string or scalar at depth 1 being read, while it may be a key or an id.
    token: Vec<u8>,
    overlong: bool,
    id: Option<String>,
    decided: bool,
}

impl IdScan {
    fn push(&mut self, byte: u8) {
        if self.decided {
            return;
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.in_string = false;
            }
            self.keep(byte);
            if !self.in_string {
                self.end_string();
            }
            return;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                self.start_token();
                self.keep(byte);
            }
            b'{' | b'[' => {
                if self.depth == 1 && self.in_id {
                    // An object or an array is no id, and the first `id` member decides.
                    self.decided = true;
                }
                self.depth += 1;
                self.expect_key = byte == b'{' && self.depth == 1;
            }
            b'}' | b']' => {
                self.end_scalar();
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 0 {
                    self.decided = true;
                }
            }
            b':' if self.depth == 1 => self.expect_key = false,
            b',' if self.depth == 1 => {
                self.end_scalar();
                self.expect_key = true;
            }
            b' ' | b'\t' | b'\r' => self.end_scalar(),
            _ if self.depth == 1 && self.in_id => self.keep(byte),
            _ => {}
        }
    }

    fn start_token(&mut self) {
        self.token.clear();
        self.overlong = false;
    }

    fn keep(&mut self, byte: u8) {
        if self.depth != 1 {
            return;
        }
        if self.token.len() < TOKEN_LIMIT {
            self.token.push(byte);
        } else {
            self.overlong = true;
        }
    }

    fn end_string(&mut self) {
        if self.depth != 1 || self.overlong {
            if self.depth == 1 && self.in_id {
                self.decided = true;
            }
            return;
        }
        if self.expect_key {
            self.in_id = serde_json::from_slice::<String>(&self.token).is_ok_and(|key| key == "id");
        } else if self.in_id {
            if serde_json::from_slice::<String>(&self.token).is_ok() {
                self.id = String::from_utf8(self.token.clone()).ok();
            }
            self.decided = true;
        }
        self.token.clear();
    }

    fn end_scalar(&mut self) {
        if self.depth != 1 || !self.in_id || self.in_string {
            return;
        }
        if self.token.is_empty() {
            return;
        }
        if !self.overlong && serde_json::from_slice::<serde_json::Number>(&self.token).is_ok() {
            self.id = String::from_utf8(self.token.clone()).ok();
        }
        self.decided = true;
    }
}

#[cfg(test)]
fn id_of(line: &[u8]) -> Option<String> {
    let mut scan = IdScan::default();
    line.iter().for_each(|&byte| scan.push(byte));
    scan.end_scalar();
    scan.id
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
///
/// Where stdin or stdout is a pipe (as an MCP client that starts the server makes them, on Unix), it
/// is read or written by tokio's event loop, set non-blocking while the transport lives; elsewhere
/// (a terminal, a file) through tokio's `Stdin` and `Stdout`, which hand each read and write to a
/// thread of the blocking pool: two thread switches per message that a pipe does not take. Call it
/// from a runtime with IO enabled (`#[tokio::main]` enables it), as tokio's pipes need.
pub fn stdio_limited(max: usize) -> (LimitedLines<Stdin>, Stdout) {
    (LimitedLines::new(Stdin::new(), max), Stdout::new())
}

/// [`stdio_limited`] with [`DEFAULT_MAX_MESSAGE`].
pub fn stdio() -> (LimitedLines<Stdin>, Stdout) {
    stdio_limited(DEFAULT_MAX_MESSAGE)
}

/// The process's standard input, as [`stdio_limited`] reads it.
#[derive(Debug)]
pub struct Stdin(Input);

#[derive(Debug)]
enum Input {
    #[cfg(unix)]
    Pipe(pipes::Read),
    Thread(tokio::io::Stdin),
}

impl Stdin {
    fn new() -> Stdin {
        #[cfg(unix)]
        if let Some(pipe) = pipes::Read::stdin() {
            return Stdin(Input::Pipe(pipe));
        }
        Stdin(Input::Thread(tokio::io::stdin()))
    }
}

impl AsyncRead for Stdin {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            #[cfg(unix)]
            Input::Pipe(pipe) => Pin::new(pipe).poll_read(cx, buf),
            Input::Thread(stdin) => Pin::new(stdin).poll_read(cx, buf),
        }
    }
}

/// The process's standard output, as [`stdio_limited`] writes it.
#[derive(Debug)]
pub struct Stdout(Output);

#[derive(Debug)]
enum Output {
    #[cfg(unix)]
    Pipe(pipes::Write),
    Thread(tokio::io::Stdout),
}

impl Stdout {
    fn new() -> Stdout {
        #[cfg(unix)]
        if let Some(pipe) = pipes::Write::stdout() {
            return Stdout(Output::Pipe(pipe));
        }
        Stdout(Output::Thread(tokio::io::stdout()))
    }
}

impl tokio::io::AsyncWrite for Stdout {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            #[cfg(unix)]
            Output::Pipe(pipe) => Pin::new(pipe).poll_write(cx, buf),
            Output::Thread(stdout) => Pin::new(stdout).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            #[cfg(unix)]
            Output::Pipe(pipe) => Pin::new(pipe).poll_flush(cx),
            Output::Thread(stdout) => Pin::new(stdout).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            #[cfg(unix)]
            Output::Pipe(pipe) => Pin::new(pipe).poll_shutdown(cx),
            Output::Thread(stdout) => Pin::new(stdout).poll_shutdown(cx),
        }
    }
}

/// Stdin and stdout as tokio's pipes, where they are pipes: a duplicate of the descriptor, set
/// non-blocking (which the original shares) and set back to blocking when dropped, so that the
/// process, or a program it hands its stdio to, reads and writes them as before.
#[cfg(unix)]
mod pipes {
    use std::io;
    use std::os::fd::AsFd;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
    use tokio::net::unix::pipe;

    /// A duplicate of `fd`, where it is a pipe (a FIFO): a terminal or a file is no pipe.
    fn pipe_of(fd: std::os::fd::BorrowedFd<'_>) -> Option<std::os::fd::OwnedFd> {
        let owned = fd.try_clone_to_owned().ok()?;
        let file = std::fs::File::from(owned);
        use std::os::unix::fs::FileTypeExt;
        file.metadata()
            .ok()?
            .file_type()
            .is_fifo()
            .then(|| file.into())
    }

    #[derive(Debug)]
    pub(super) struct Read(Option<pipe::Receiver>);

    impl Read {
        pub(super) fn stdin() -> Option<Read> {
            Read::of(io::stdin().as_fd())
        }

        pub(super) fn of(fd: std::os::fd::BorrowedFd<'_>) -> Option<Read> {
            let fd = pipe_of(fd)?;
            pipe::Receiver::from_owned_fd(fd)
                .ok()
                .map(|r| Read(Some(r)))
        }
    }

    impl Drop for Read {
        fn drop(&mut self) {
            if let Some(pipe) = self.0.take() {
                let _ = pipe.into_blocking_fd();
            }
        }
    }

    impl AsyncRead for Read {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            match &mut self.get_mut().0 {
                Some(pipe) => Pin::new(pipe).poll_read(cx, buf),
                None => Poll::Ready(Ok(())),
            }
        }
    }

    #[derive(Debug)]
    pub(super) struct Write(Option<pipe::Sender>);

    impl Write {
        pub(super) fn stdout() -> Option<Write> {
            Write::of(io::stdout().as_fd())
        }

        pub(super) fn of(fd: std::os::fd::BorrowedFd<'_>) -> Option<Write> {
            let fd = pipe_of(fd)?;
            pipe::Sender::from_owned_fd(fd).ok().map(|w| Write(Some(w)))
        }
    }

    impl Drop for Write {
        fn drop(&mut self) {
            if let Some(pipe) = self.0.take() {
                let _ = pipe.into_blocking_fd();
            }
        }
    }

    fn closed() -> io::Error {
        io::Error::new(io::ErrorKind::BrokenPipe, "stdout is closed")
    }

    impl AsyncWrite for Write {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            match &mut self.get_mut().0 {
                Some(pipe) => Pin::new(pipe).poll_write(cx, buf),
                None => Poll::Ready(Err(closed())),
            }
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            match &mut self.get_mut().0 {
                Some(pipe) => Pin::new(pipe).poll_flush(cx),
                None => Poll::Ready(Ok(())),
            }
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            match &mut self.get_mut().0 {
                Some(pipe) => Pin::new(pipe).poll_shutdown(cx),
                None => Poll::Ready(Ok(())),
            }
        }
    }
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
        assert_eq!(id_of(cut.as_bytes()), None);
        assert_eq!(id_of(br#"{"id":{"a":1},"x":2}"#), None);
        assert_eq!(id_of(br#"{"id":[1],"x":2}"#), None);
        assert_eq!(id_of(br#"{"id":true}"#), None);
        assert_eq!(id_of(br#"[{"id":1}]"#), None);
    }

    #[test]
    fn the_id_is_the_top_level_member_wherever_it_stands() {
        assert_eq!(id_of(br#"{"id":"a\"b"}"#).as_deref(), Some(r#""a\"b""#));
        assert_eq!(
            id_of(br#"{"jsonrpc":"2.0","method":"m","params":{"id":99,"name":"x"},"id":8}"#)
                .as_deref(),
            Some("8")
        );
        assert_eq!(
            id_of(br#"{"note":"\"id\":98","id":7}"#).as_deref(),
            Some("7")
        );
        assert_eq!(
            id_of(br#"{ "jsonrpc" : "2.0" , "\u0069d" : 11 , "pad": 1}"#).as_deref(),
            Some("11")
        );
        assert_eq!(id_of(br#"{"id":-3.5e2}"#).as_deref(), Some("-3.5e2"));
        // After a padding far beyond any fixed window.
        let long = "p".repeat(100_000);
        let input = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{{\"a\":\"{long}\",\"id\":1}},\"id\":\"late\"}}\n"
        );
        let out = through(input.as_bytes(), 2048);
        assert!(
            out.starts_with(r#"{"jsonrpc":"2.0","id":"late","method""#),
            "{out}"
        );
    }

    /// The `flags` of descriptor `fd` as Linux shows them: whether it is non-blocking.
    #[cfg(target_os = "linux")]
    fn nonblocking(fd: &impl std::os::fd::AsRawFd) -> bool {
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
            .expect("fdinfo");
        let flags = info
            .lines()
            .find_map(|line| line.strip_prefix("flags:"))
            .expect("flags");
        let flags = u32::from_str_radix(flags.trim(), 8).expect("octal");
        flags & 0o4000 != 0
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_pipe_is_read_and_written_by_the_event_loop_and_left_blocking_as_it_was() {
        use std::io::{Read as _, Write as _};
        use std::os::fd::AsFd;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("a runtime");
        let (mut from_client, to_server) = std::io::pipe().expect("a pipe");
        let (from_server, mut to_client) = std::io::pipe().expect("a pipe");
        runtime.block_on(async {
            let mut read = pipes::Read::of(from_server.as_fd()).expect("a pipe");
            let mut write = pipes::Write::of(to_server.as_fd()).expect("a pipe");
            assert!(nonblocking(&from_server) && nonblocking(&to_server));
            to_client.write_all(b"{\"ping\":1}\n").expect("written");
            let mut line = [0_u8; 11];
            read.read_exact(&mut line).await.expect("read");
            assert_eq!(&line, b"{\"ping\":1}\n");
            write.write_all(b"{\"pong\":1}\n").await.expect("written");
            write.flush().await.expect("flushed");
            drop((read, write));
        });
        assert!(!nonblocking(&from_server) && !nonblocking(&to_server));
        let mut answer = [0_u8; 11];
        from_client.read_exact(&mut answer).expect("read");
        assert_eq!(&answer, b"{\"pong\":1}\n");
    }

    #[cfg(unix)]
    #[test]
    fn a_file_is_no_pipe() {
        let file = a_plain_file();
        use std::os::fd::AsFd;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            assert!(pipes::Read::of(file.as_fd()).is_none());
            assert!(pipes::Write::of(file.as_fd()).is_none());
        });
    }

    #[cfg(unix)]
    fn a_plain_file() -> std::fs::File {
        let path = std::env::temp_dir().join(format!("toolgate-stdio-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("a file");
        let _ = std::fs::remove_file(&path);
        file
    }
}
