//! rmcp's handler factory through `ToolgateServer::handler_factory`: a handler per session over
//! HTTP, each gated as one handler is.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use toolgate::mcp::ToolgateServer;
use toolgate::mcp::http::Principals;
use toolgate::{Gate, Mode};

use crate::fixtures::handlers::{ALICE, open_session, runtime, serve_http, session_call, token_of};

/// How many handlers were made, over all sessions.
static MADE: AtomicUsize = AtomicUsize::new(0);

/// A handler that keeps state per session, as rmcp allows with its factory.
#[derive(Clone)]
pub(crate) struct Tally {
    calls: Arc<AtomicUsize>,
}

impl Tally {
    fn new() -> Tally {
        MADE.fetch_add(1, Ordering::SeqCst);
        Tally {
            calls: Arc::default(),
        }
    }
}

#[toolgate::toolset(domain = "tally")]
#[tool_router]
impl Tally {
    /// Count this session's calls.
    #[tool]
    #[toolgate(risk = "LOW_WRITE")]
    async fn tally_count(&self) -> Result<CallToolResult, ErrorData> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(CallToolResult::success(vec![ContentBlock::text(
            n.to_string(),
        )]))
    }

    /// Wipe this session's count.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE")]
    async fn tally_wipe(&self) -> Result<CallToolResult, ErrorData> {
        self.calls.store(0, Ordering::SeqCst);
        Ok(CallToolResult::success(vec![ContentBlock::text("wiped")]))
    }
}

#[tool_handler]
impl ServerHandler for Tally {}

/// The text of a `tools/call` answer, or its refusal's code.
fn said(answer: &crate::common::http::Answer) -> String {
    let messages = answer.messages();
    let result = messages
        .iter()
        .find_map(|m| m.get("result"))
        .unwrap_or_else(|| panic!("a result: {answer:?}"));
    match result["structuredContent"]["code"].as_str() {
        Some(code) => code.to_owned(),
        None => result["content"][0]["text"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| Value::to_string(result)),
    }
}

#[test]
fn each_session_gets_a_handler_of_its_own_and_every_one_is_gated() {
    runtime().block_on(async {
        let gate = Gate::new(Mode::PartialAuto).unwrap();
        let server = ToolgateServer::new(gate.clone()).handler_factory(Tally::new);
        let made = MADE.load(Ordering::SeqCst);
        let addr = serve_http(
            server,
            Principals::new().bearer(token_of(ALICE), "alice", gate),
        )
        .await;
        let (one, two) = (
            open_session(addr, &[ALICE]).await.unwrap(),
            open_session(addr, &[ALICE]).await.unwrap(),
        );
        let count = |session: String| async move {
            said(&session_call(addr, &[ALICE], &session, "tally_count", json!({})).await)
        };
        assert_eq!(count(one.clone()).await, "1");
        assert_eq!(count(one.clone()).await, "2");
        // Another session counts on a handler of its own.
        assert_eq!(count(two.clone()).await, "1");
        assert!(MADE.load(Ordering::SeqCst) >= made + 2);
        // Each handler's tools are gated: HIGH_WRITE is not allowed in PARTIAL_AUTO, on either.
        for session in [one.clone(), two] {
            let wipe = session_call(addr, &[ALICE], &session, "tally_wipe", json!({})).await;
            assert_eq!(said(&wipe), "MODE_NOT_ALLOWED");
        }
        assert_eq!(count(one).await, "3");
    });
}

#[test]
fn one_handler_is_shared_by_every_session() {
    runtime().block_on(async {
        let gate = Gate::new(Mode::PartialAuto).unwrap();
        let server = ToolgateServer::new(gate.clone()).handler(Tally::new());
        let addr = serve_http(
            server,
            Principals::new().bearer(token_of(ALICE), "alice", gate),
        )
        .await;
        let (one, two) = (
            open_session(addr, &[ALICE]).await.unwrap(),
            open_session(addr, &[ALICE]).await.unwrap(),
        );
        let first = session_call(addr, &[ALICE], &one, "tally_count", json!({})).await;
        let second = session_call(addr, &[ALICE], &two, "tally_count", json!({})).await;
        assert_eq!(
            (said(&first), said(&second)),
            ("1".to_owned(), "2".to_owned())
        );
    });
}
