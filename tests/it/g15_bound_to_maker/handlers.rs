//! Guarantee 15 (What is stored is honoured for its maker alone), against rmcp handlers gated in
//! place, `#[toolset]` methods on registered instances, OAuth over `HttpService` and request
//! states.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use serde_json::json;
use toolgate::Mode;
use toolgate::mcp::ToolgateServer;
use toolgate::mcp::http::Principals;

use crate::fixtures::handlers::*;

/// a26. In band over HTTP x principals sharing one gate: alice's sealed state for a handler tool,
/// answered "approve" by bob (another principal of the same gate and store). The state is bound to
/// the principal. Broken: bob's answer runs alice's call, or bob's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a26_a_principals_in_band_state_approves_nothing_for_another() {
    let gate = two_step(Mode::FullAuto).build().unwrap();
    let ops = Ops::default();
    let server = ToolgateServer::new(gate.clone())
        .handler(ops.clone())
        .approvals(in_band());
    let principals = Principals::new()
        .bearer(token_of(ALICE), "alice", gate.clone())
        .bearer(token_of(BOB), "bob", gate);
    let addr = serve_http(server, principals).await;
    let args = json!({"target": "db"});
    let asked = http_call(addr, &[ALICE], "ops_wipe", args.clone(), None).await;
    let state = asked.state().unwrap_or_else(|| panic!("a form: {asked:?}"));
    let by_bob = http_call(
        addr,
        &[BOB],
        "ops_wipe",
        args.clone(),
        Some((&state, "approve")),
    )
    .await;
    assert_eq!(ops.wiped(), 0, "bob's answer ran: {}", by_bob.code());
    let by_alice = http_call(addr, &[ALICE], "ops_wipe", args, Some((&state, "approve"))).await;
    assert_eq!(by_alice.code(), "OK", "{by_alice:?}");
    assert_eq!(ops.wiped(), 1);
}
