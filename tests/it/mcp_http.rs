//! The `mcp_http` example over MCP's streamable HTTP transport, driven by the official MCP Python SDK's
//! HTTP client (`tests/mcp/http_client.py`): two principals, by their bearer tokens, see and may do different
//! things, and every audit record names its principal.

#![cfg(feature = "mcp-http")]

use std::fs;
use std::time::{Duration, Instant};

use super::mcp_e2e::{CLIENT_TIMEOUT, assert_passed, example_binary, python_with_mcp, run, script};
use crate::common::Scratch;
pub(crate) use crate::common::mcp::Server;

#[test]
fn two_principals_over_streamable_http_see_and_do_different_things() {
    let binary = example_binary("mcp_http", "mcp-http,clap");
    let python = python_with_mcp();
    let dir = Scratch::new("principals");
    let principals = dir.path("principals.txt");
    fs::write(
        &principals,
        "# token name mode\nalice-token alice FULL_AUTO\nbob-token bob SHADOW\n",
    )
    .expect("write the principals");
    let audit = dir.path("audit.jsonl");
    let stderr = dir.path("server.err");
    let args: Vec<&std::ffi::OsStr> = vec![
        "--principals".as_ref(),
        principals.as_os_str(),
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--approvals".as_ref(),
        "in-band".as_ref(),
        "--audit-log".as_ref(),
        audit.as_os_str(),
    ];
    let mut server = Server::start(&binary, &args, stderr);
    let url = server.url();

    let mut command = script(&python, "http_client.py");
    command.arg(&url).arg(&audit);
    let output = run(&mut command, CLIENT_TIMEOUT);
    drop(server);
    assert_passed("http_client.py", &output);
}

/// A call that takes its time, so that another principal can try to act on it while it runs: it waits
/// until `SLOW_RELEASE` is set (at most 20 s).
static SLOW_STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static SLOW_RELEASE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Count slowly.
#[toolgate::tool(risk = "READ_ONLY", domain = "httpsession", callable)]
async fn slow_count() -> Result<u32, toolgate::Denied> {
    use std::sync::atomic::Ordering;
    SLOW_STARTED.fetch_add(1, Ordering::SeqCst);
    let started = Instant::now();
    while !SLOW_RELEASE.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(42)
}

mod raw {
    //! Plain HTTP/1.1 requests over a TCP connection, as any client (or attacker) sends them.

    use std::net::SocketAddr;
    use std::time::Duration;

    use serde_json::Value;

    /// An answer: its status, its `Mcp-Session-Id` header, and the JSON-RPC messages of its body.
    #[derive(Debug)]
    pub(super) struct Answer {
        pub(super) status: u16,
        pub(super) session: Option<String>,
        pub(super) messages: Vec<Value>,
    }

    /// Sends one request and reads its answer until `done` says it has what it waits for, the server
    /// closes, or `limit` passes.
    pub(super) async fn send(
        addr: SocketAddr,
        method: &str,
        token: &str,
        session: Option<&str>,
        body: Option<&Value>,
        limit: Duration,
        done: impl Fn(&str) -> bool,
    ) -> Answer {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut request = format!(
            "{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {token}\r\n\
             Accept: application/json, text/event-stream\r\nConnection: close\r\n",
            addr.port()
        );
        if let Some(session) = session {
            request.push_str(&format!(
                "Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-06-18\r\n"
            ));
        }
        crate::fixtures::support::push_json_body(&mut request, &body);
        let text = crate::common::http::exchange(addr, &request, limit, done).await;
        let status = crate::common::http::status(&text);
        let session = text
            .lines()
            .take_while(|line| !line.trim().is_empty())
            .find(|line| line.to_ascii_lowercase().starts_with("mcp-session-id:"))
            .and_then(|line| line.split_once(':'))
            .map(|(_, id)| id.trim().to_owned());
        let messages = crate::common::http::messages(&text).collect();
        Answer {
            status,
            session,
            messages,
        }
    }

    /// Whether the answer so far holds the status line and headers.
    pub(super) fn headers_read(text: &str) -> bool {
        text.contains("\r\n\r\n")
    }

    /// Whether the answer so far holds a JSON-RPC answer to request `id`, or is no event stream.
    pub(super) fn answered(id: u64) -> impl Fn(&str) -> bool {
        move |text| {
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                return false;
            };
            if !head.to_ascii_lowercase().contains("text/event-stream") {
                return false;
            }
            body.lines().any(|line| {
                let json = line.trim().strip_prefix("data:").map_or("", str::trim);
                serde_json::from_str::<Value>(json).is_ok_and(|m| m["id"] == id)
            })
        }
    }
}

/// A session of MCP's streamable HTTP transport belongs to the principal whose token opened it:
/// another principal, with its own valid token and the session's id, cannot cancel a call of it,
/// send requests on it, listen on it, or end it. Each is answered `404` as an unknown session is, and
/// none reaches the session.
#[test]
fn a_session_belongs_to_the_principal_that_opened_it() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use serde_json::{Value, json};
    use toolgate::audit::MemorySink;
    use toolgate::mcp::ToolgateServer;
    use toolgate::mcp::http::{HttpService, Principals};
    use toolgate::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
    use toolgate::{Gate, Mode};

    const ALICE: &str = "alice-token-3f9c2a7e51d04b68";
    const MALLORY: &str = "mallory-token-8d21c6f0a9e34b75";
    const LIMIT: Duration = Duration::from_secs(30);
    let runtime = crate::fixtures::support::runtime();
    runtime.block_on(async {
        let sink = Arc::new(MemorySink::new());
        let gate = |name: &str| {
            Gate::builder()
                .mode(Mode::FullAuto)
                .principal(name)
                .audit_shared(sink.clone())
                .build()
                .expect("a gate")
        };
        let server = ToolgateServer::new(Gate::new(Mode::Shadow).expect("a gate"))
            .only(|m| m.domain == Some("httpsession"));
        let principals = Principals::new()
            .bearer(ALICE, "alice", gate("alice"))
            .bearer(MALLORY, "mallory", gate("mallory"));
        let service = HttpService::new(server, principals, StreamableHttpServerConfig::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("its address");
        crate::fixtures::support::serve_connections(listener, service);
        let post = |token: &'static str, session: Option<String>, body: Value| async move {
            let id = body["id"].as_u64();
            let done = move |text: &str| match id {
                Some(id) => raw::answered(id)(text),
                None => raw::headers_read(text),
            };
            raw::send(
                addr,
                "POST",
                token,
                session.as_deref(),
                Some(&body),
                LIMIT,
                done,
            )
            .await
        };

        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "alice", "version": "1"}}});
        let opened = post(ALICE, None, initialize).await;
        assert_eq!(opened.status, 200, "{opened:?}");
        let session = opened.session.clone().expect("a session id");
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let answer = post(ALICE, Some(session.clone()), initialized).await;
        assert_eq!(answer.status, 202, "{answer:?}");

        // Alice's call, in flight until released.
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "httpsession.slow_count", "arguments": {}}});
        let in_flight = tokio::spawn(post(ALICE, Some(session.clone()), call));
        let started = Instant::now();
        while SLOW_STARTED.load(Ordering::SeqCst) == 0 {
            assert!(started.elapsed() < LIMIT, "alice's call never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        // Mallory, with his own valid token and alice's session id.
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 7, "reason": "mallory"}});
        let cancelled = post(MALLORY, Some(session.clone()), cancel).await;
        let list = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"});
        let listed = post(MALLORY, Some(session.clone()), list).await;
        let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
        let pinged = post(MALLORY, Some(session.clone()), ping).await;
        let listened = raw::send(
            addr,
            "GET",
            MALLORY,
            Some(&session),
            None,
            Duration::from_secs(5),
            raw::headers_read,
        )
        .await;
        let deleted = raw::send(
            addr,
            "DELETE",
            MALLORY,
            Some(&session),
            None,
            Duration::from_secs(5),
            raw::headers_read,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        SLOW_RELEASE.store(true, Ordering::SeqCst);

        // Alice's call completed with its result, and her session lives on.
        let result = in_flight.await.expect("alice's call");
        let answer = result.messages.iter().find(|m| m["id"] == 7);
        assert_eq!(
            answer.map(|m| &m["result"]["content"][0]["text"]),
            Some(&json!("42")),
            "alice's call did not complete: {result:?}\nmallory's cancel: {cancelled:?}\n\
             mallory's DELETE: {deleted:?}"
        );
        let list = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list"});
        let again = post(ALICE, Some(session.clone()), list).await;
        assert_eq!(again.status, 200, "alice's session ended: {again:?}");
        assert!(
            again
                .messages
                .iter()
                .any(|m| m["id"] == 10 && m["result"]["tools"].is_array()),
            "{again:?}"
        );

        // Every request of mallory's on it was refused as for an unknown session.
        for (what, answer) in [
            ("notifications/cancelled", &cancelled),
            ("tools/list", &listed),
            ("ping", &pinged),
            ("GET", &listened),
            ("DELETE", &deleted),
        ] {
            assert_eq!(
                answer.status, 404,
                "mallory's {what} on alice's session: {answer:?}"
            );
            assert!(answer.messages.is_empty(), "{what}: {answer:?}");
        }
        // His requests reached no gate: the log has no record of his.
        let his: Vec<_> = sink
            .records()
            .into_iter()
            .filter(|r| r.principal.as_deref() == Some("mallory"))
            .collect();
        assert!(his.is_empty(), "{his:#?}");

        // Alice ends her own session; then it is gone, for her too.
        let ended = raw::send(
            addr,
            "DELETE",
            ALICE,
            Some(&session),
            None,
            Duration::from_secs(5),
            raw::headers_read,
        )
        .await;
        assert!(matches!(ended.status, 200 | 202 | 204), "{ended:?}");
        let ping = json!({"jsonrpc": "2.0", "id": 11, "method": "ping"});
        let gone = post(ALICE, Some(session.clone()), ping).await;
        assert_eq!(gone.status, 404, "{gone:?}");
    });
}
