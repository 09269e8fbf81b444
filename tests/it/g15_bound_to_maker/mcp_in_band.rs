//! Guarantee 15 (what is stored is honoured for its maker alone) over MCP: in-band states, tasks and
//! sessions of one principal or gate are nothing to another, and each principal lists its own tools.
#![cfg(feature = "mcp-http")]

use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolgate::mcp::http::{HttpService, Principals};
use toolgate::mcp::rmcp::model::CallToolRequestParams;
use toolgate::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use toolgate::mcp::{APPROVAL_INPUT, ToolgateServer};
use toolgate::{Gate, Mode};

use crate::common::gates;
use crate::fixtures::mcp_in_band::*;
use crate::g07_approvals::checks::built;
use crate::g07_approvals::rounds::*;

/// `server` over HTTP, to alice and bob (each with their token) through their own gates.
async fn serve_alice_and_bob(server: ToolgateServer, alice: &Gate, bob: &Gate) -> SocketAddr {
    let principals = Principals::new()
        .bearer("alice-token-0123456789", "alice", alice.clone())
        .bearer("bob-token-0123456789", "bob", bob.clone());
    let config = StreamableHttpServerConfig::default();
    serve_http(HttpService::new(server, principals, config)).await
}

/// A FullAuto gate with two-step approvals acting for `principal`, recording to `sink`.
fn two_step_of(principal: &str, sink: &Arc<Memory>) -> Gate {
    built(Mode::FullAuto, |b| {
        let b = b.two_step_approvals().principal(principal);
        b.audit_shared(sink.clone())
    })
}

/// A state sealed by one server's key opens at no server with another gate, even with the same key
/// and agent label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b25_state_of_another_gate_same_key() {
    let sink = Arc::new(Memory::default());
    let a = connect(in_band(gate(sink.clone()))).await;
    let b = connect(in_band(gate(sink.clone()))).await;
    let state = form_state(&a, "m06.m06_wire", json!({"cents": 6})).await;
    let c = answered(&b, "m06.m06_wire", json!({"cents": 6}), &state, "approve").await;
    assert_eq!(M06.load(Ordering::SeqCst), 0, "{c}");
    assert_eq!(c, "APPROVAL_STATE_INVALID");
    // As the protocol requires, a JSON-RPC error, not a tool result.
    let Value::Object(arguments) = json!({"cents": 6}) else {
        unreachable!()
    };
    let raw = b
        .call_tool_once(
            CallToolRequestParams::new("m06.m06_wire")
                .with_arguments(arguments)
                .with_request_state(state)
                .with_input_responses(answer("approve")),
        )
        .await;
    assert!(
        matches!(&raw, Err(toolgate::mcp::rmcp::ServiceError::McpError(e))
            if e.code == toolgate::mcp::rmcp::model::ErrorCode::INVALID_PARAMS),
        "{raw:?}"
    );
}

/// A session opened by one principal, then used with another principal's token: the call is
/// decided by the second principal's gate (or refused), never by the first's; a session used with
/// no or an unknown token is 401; records name the principal whose gate decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b33_http_session_changes_principal() {
    let sink = Arc::new(Memory::default());
    let alice = built(Mode::PartialAuto, |b| {
        b.principal("alice").audit_shared(sink.clone())
    });
    let bob = built(Mode::Shadow, |b| {
        b.principal("bob").audit_shared(sink.clone())
    });
    let server = ToolgateServer::new(bob.clone()).only(|m| m.domain == Some("h01"));
    let addr = serve_alice_and_bob(server, &alice, &bob).await;
    let alice_t = Some("alice-token-0123456789");
    let bob_t = Some("bob-token-0123456789");

    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}});
    let (status, session, msgs) = post(addr, alice_t, None, init).await;
    assert_eq!(status, 200, "{msgs:?}");
    let session = session.expect("a legacy session id");
    let (st, _, _) = post(
        addr,
        alice_t,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert!(st == 202 || st == 200, "{st}");
    // alice may call it
    let call = |id: u64, n: u64| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "h01.h01_low", "arguments": {"n": n}}});
    let (st, _, msgs) = post(addr, alice_t, Some(&session), call(2, 1)).await;
    assert_eq!(st, 200, "{msgs:?}");
    assert_eq!(H01.load(Ordering::SeqCst), 1, "alice's call ran: {msgs:?}");
    // bob on alice's session: his gate is SHADOW, so nothing runs
    let (st_b, _, msgs_b) = post(addr, bob_t, Some(&session), call(3, 2)).await;
    let (st_l, _, list_b) = post(
        addr,
        bob_t,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),
    )
    .await;
    // no token, unknown token, on alice's session: 401
    let (st_none, _, _) = post(addr, None, Some(&session), call(5, 3)).await;
    let (st_bad, _, _) = post(addr, Some("mallory"), Some(&session), call(6, 4)).await;
    assert_eq!(st_none, 401);
    assert_eq!(st_bad, 401);
    assert_eq!(
        H01.load(Ordering::SeqCst),
        1,
        "bob's call on alice's session ran under alice's gate: status {st_b} {msgs_b:?}"
    );
    let listed = list_b.iter().any(|m| m.to_string().contains("h01.h01_low"));
    assert!(
        !listed,
        "bob's tools/list on alice's session shows alice's tools: {st_l} {list_b:?}"
    );
    // records: each names the principal whose gate made them; none lacks one
    let records = sink.records();
    let bad: Vec<_> = records
        .iter()
        .filter(|r| {
            !matches!(
                r.get("principal").and_then(Value::as_str),
                Some("alice" | "bob")
            )
        })
        .collect();
    assert!(bad.is_empty(), "records without a principal: {bad:#?}");
}

/// Over HTTP with the 2026-07-28 protocol (no session): an in-band state sealed for alice, retried
/// with bob's token, does not run (bound to the principal), and alice's own retry runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b35_http_in_band_state_of_another_principal() {
    let sink = Arc::new(Memory::default());
    let (alice, bob) = (two_step_of("alice", &sink), two_step_of("bob", &sink));
    let server = in_band(bob.clone()).only(|m| m.domain == Some("h02"));
    let addr = serve_alice_and_bob(server, &alice, &bob).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}});
    let call = |id: u64, state: Option<&str>| {
        let mut params =
            json!({"name": "h02.h02_wire", "arguments": {"cents": 9}, "_meta": meta.clone()});
        if let Some(state) = state {
            params["requestState"] = json!(state);
            params["inputResponses"] =
                json!({APPROVAL_INPUT: {"action": "accept", "content": {"decision": "approve"}}});
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };
    let post2 = |token: &'static str, body: Value| async move { post2(addr, token, body).await };
    let (st, msgs) = post2("alice-token-0123456789", call(1, None)).await;
    let state = msgs
        .iter()
        .find_map(|m| m["result"]["requestState"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no request state: {st} {msgs:#?}"));
    let (st_b, by_bob) = post2("bob-token-0123456789", call(2, Some(&state))).await;
    assert_eq!(
        H02.load(Ordering::SeqCst),
        0,
        "bob ran alice's approval: {st_b} {by_bob:#?}"
    );
    let (_, by_alice) = post2("alice-token-0123456789", call(3, Some(&state))).await;
    let (_, again) = post2("alice-token-0123456789", call(4, Some(&state))).await;
    assert_eq!(H02.load(Ordering::SeqCst), 1, "{by_alice:#?} {again:#?}");
}

/// Tasks over HTTP: alice's task (a call waiting for an operator) is answered to alice only: bob's
/// `tasks/get` and `tasks/cancel` of its id reach nothing; after the operator approves, it runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b36_http_task_of_another_principal() {
    let sink = Arc::new(Memory::default());
    let (alice, bob) = (two_step_of("alice", &sink), two_step_of("bob", &sink));
    let tokens = Arc::new(Mutex::new(Vec::<String>::new()));
    let t2 = tokens.clone();
    let server = ToolgateServer::new(bob.clone())
        .only(|m| m.domain == Some("h03"))
        .on_pending(move |p| t2.lock().unwrap().push(p.token.clone()));
    let addr = serve_alice_and_bob(server, &alice, &bob).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
    const A: &str = "alice-token-0123456789";
    const B: &str = "bob-token-0123456789";
    let body = |id: u64, method: &str, params: Value| {
        let mut params = params;
        params["_meta"] = meta.clone();
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    };
    let (st, msgs) = post2(
        addr,
        A,
        body(
            1,
            "tools/call",
            json!({"name": "h03.h03_wire", "arguments": {"cents": 3}}),
        ),
    )
    .await;
    let task = msgs
        .iter()
        .find_map(|m| m["result"]["taskId"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no task: {st} {msgs:#?}"));
    let (_, get_b) = post2(addr, B, body(2, "tasks/get", json!({"taskId": task}))).await;
    let (_, cancel_b) = post2(addr, B, body(3, "tasks/cancel", json!({"taskId": task}))).await;
    let leaked = |msgs: &Vec<Value>| {
        msgs.iter()
            .any(|m| m.get("result").is_some_and(|r| r.get("status").is_some()))
    };
    assert!(!leaked(&get_b), "bob read alice's task: {get_b:#?}");
    let header_error = |msgs: &Vec<Value>| msgs.iter().any(|m| m["error"]["code"] == -32020);
    assert!(
        !header_error(&get_b) && !header_error(&cancel_b),
        "{get_b:#?} {cancel_b:#?}"
    );
    assert!(
        !leaked(&cancel_b),
        "bob cancelled alice's task: {cancel_b:#?}"
    );
    let token = tokens.lock().unwrap().first().cloned().expect("on_pending");
    alice.approve(&token).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let done = loop {
        let (_, get_a) = post2(addr, A, body(4, "tasks/get", json!({"taskId": task}))).await;
        let status = get_a
            .iter()
            .find_map(|m| m["result"]["status"].as_str().map(str::to_owned));
        if status
            .as_deref()
            .is_some_and(|s| s != "working" && s != "input_required")
        {
            break get_a;
        }
        assert!(
            Instant::now() < deadline,
            "the task never completed: {get_a:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(H03.load(Ordering::SeqCst), 1, "{done:#?}");
}

/// `tools/list` over HTTP without a session (2026-07-28) shows each principal its own gate's tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b41_http_tools_list_per_principal() {
    let alice = gates::of_principal(Mode::PartialAuto, "alice");
    let bob = gates::of_principal(Mode::Shadow, "bob");
    let server = ToolgateServer::new(alice.clone()).only(|m| m.domain == Some("h01"));
    let addr = serve_alice_and_bob(server, &alice, &bob).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}});
    let list =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}});
    let (_, a) = post2(addr, "alice-token-0123456789", list.clone()).await;
    let (_, b) = post2(addr, "bob-token-0123456789", list.clone()).await;
    let (st, _) = post2(addr, "nobody", list.clone()).await;
    let shows = |m: &Vec<Value>| m.iter().any(|v| v.to_string().contains("h01.h01_low"));
    assert!(shows(&a), "alice: {a:#?}");
    assert!(!shows(&b), "bob sees what alice's gate allows: {b:#?}");
    assert_eq!(st, 401);
}
