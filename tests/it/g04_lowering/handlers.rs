//! Guarantee 4 (The mode is only ever lowered, and a lowering reaches every call not yet started),
//! against rmcp handlers gated in place, `#[toolset]` methods on registered instances, OAuth over
//! `HttpService` and request states.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::Duration;
use toolgate::Mode;
use toolgate::audit::{MemorySink, Stage};
use toolgate::mcp::ToolgateServer;

use crate::common::gates;
use crate::fixtures::handlers::*;
use crate::g07_approvals::served_ops::*;

/// a07. A handler whose `call_tool` awaits (400 ms) before it dispatches, while the gate is lowered.
/// A tool declared in place runs as its declared method, not through the handler's `call_tool`, so no
/// code of the handler's runs between the server's decision and the body: the call completes without
/// the handler's wait, and the lowering reaches the next call (guarantee 4). Broken: the call waits
/// for the handler's `call_tool`, the LOW_WRITE body runs after the gate was lowered to SHADOW, or the
/// log holds an `enter` without its `exit`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a07_a_lowering_reaches_the_next_call_of_a_handler_that_awaits_before_dispatching() {
    let sink = MemorySink::new();
    let gate = gates::audited(Mode::PartialAuto, sink.clone());
    let lazy = Lazy::new(Behaviour::Sleep(400));
    let client = connect(ToolgateServer::new(gate.clone()).handler(lazy.clone())).await;
    let started = std::time::Instant::now();
    let first = code_of(&call(&client, "lazy_restart", json!({})).await);
    assert_eq!(first, "OK");
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "the call went through the handler's call_tool"
    );
    gate.lower(Mode::Shadow).unwrap();
    let second = code_of(&call(&client, "lazy_restart", json!({})).await);
    assert_eq!(second, "MODE_NOT_ALLOWED");
    assert_eq!(
        lazy.restarts.load(Ordering::SeqCst),
        1,
        "ran after the lowering"
    );
    let records = sink.records();
    let enters = records
        .iter()
        .filter(|r| r.tool == "lazy_restart" && r.stage == Stage::Enter)
        .count();
    let exits = records
        .iter()
        .filter(|r| r.tool == "lazy_restart" && r.stage == Stage::Exit)
        .count();
    assert_eq!((enters, exits), (1, 1), "{records:#?}");
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
