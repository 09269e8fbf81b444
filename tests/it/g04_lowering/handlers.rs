//! Guarantee 4 (The mode is only ever lowered, and a lowering reaches every call not yet started),
//! against rmcp handlers gated in place, `#[toolset]` methods on registered instances, OAuth over
//! `HttpService` and request states.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use toolgate::Mode;
use toolgate::audit::{MemorySink, Stage};
use toolgate::mcp::ToolgateServer;

use crate::common::gates;
use crate::fixtures::handlers::*;
use crate::g07_approvals::served_ops::*;

/// a07. A handler whose `call_tool` awaits before it dispatches, while the gate is lowered. The gate
/// decided the call before the handler ran; guarantee 4 says that the mode is read again just before
/// the body. Broken: the LOW_WRITE body runs after the gate was lowered to SHADOW, or the log holds an
/// `enter` without its `exit`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a07_a_lowering_while_the_handler_awaits_before_dispatching_refuses_the_call() {
    let sink = MemorySink::new();
    let gate = gates::audited(Mode::PartialAuto, sink.clone());
    let lazy = Lazy::new(Behaviour::Sleep(400));
    let client = Arc::new(connect(ToolgateServer::new(gate.clone()).handler(lazy.clone())).await);
    let calling = tokio::spawn({
        let client = Arc::clone(&client);
        async move { code_of(&call(&client, "lazy_restart", json!({})).await) }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    gate.lower(Mode::Shadow).unwrap();
    let said = calling.await.unwrap();
    assert_eq!(
        lazy.restarts.load(Ordering::SeqCst),
        0,
        "ran after the lowering: {said}"
    );
    assert_ne!(said, "OK");
    let records = sink.records();
    let enters = records
        .iter()
        .filter(|r| r.tool == "lazy_restart" && r.stage == Stage::Enter)
        .count();
    let exits = records
        .iter()
        .filter(|r| r.tool == "lazy_restart" && r.stage == Stage::Exit)
        .count();
    assert_eq!(enters, exits, "{records:#?}");
}

/// a33. Lowering x in band for a handler tool: the form is shown, the gate is lowered to
/// PARTIAL_AUTO, then the client answers "approve". Guarantee 4. Broken: the HIGH_WRITE body runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a33_an_in_band_answer_after_a_lowering_runs_nothing() {
    let gate = two_step(Mode::FullAuto).build().unwrap();
    let (ops, client) = ops_in_band(gate.clone()).await;
    let args = json!({"target": "db"});
    let state = state_of(&call(&client, "ops_wipe", args.clone()).await);
    gate.lower(Mode::PartialAuto).unwrap();
    let said = approve(&client, "ops_wipe", &args, &state).await;
    assert_eq!(ops.wiped(), 0, "{said:?}");
    assert_ne!(code_of(&said), "OK");
}
