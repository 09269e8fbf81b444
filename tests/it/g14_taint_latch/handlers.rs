//! Guarantee 14 (After untrusted input, no write runs unasked), against rmcp handlers gated in
//! place, `#[toolset]` methods on registered instances, OAuth over `HttpService` and request
//! states.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use rmcp::handler::server::wrapper::Parameters;
use serde_json::json;
use std::sync::atomic::Ordering;
use toolgate::Mode;
use toolgate::approval::SessionGrant;
use toolgate::gate::TaintPolicy;

use crate::fixtures::handlers::*;
use crate::g07_approvals::checks::built;
use crate::g07_approvals::served_ops::*;

// ---------------------------------------------------------------------------------------------------
// a13-a14: taint and budgets x handler tools.
// ---------------------------------------------------------------------------------------------------

/// a13. Taint x handler: a handler tool declared `untrusted_output` closes the latch, and then the
/// handler's own write (over MCP, and by a direct call) is refused `TAINTED_SESSION`. Broken: a write
/// runs after the untrusted read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a13_an_untrusted_handler_tool_latches_the_handlers_writes() {
    let gate = built(Mode::PartialAuto, |b| b.taint_policy(TaintPolicy::Refuse));
    let (ops, client) = ops_plain(&gate).await;
    let args = json!({"target": "web"});
    assert_eq!(call_code(&client, "ops_restart", &args).await, "OK");
    assert_eq!(call_code(&client, "ops_fetch", &json!({})).await, "OK");
    assert_eq!(gate.taint().map(|t| t.tool), Some("ops_fetch"));
    assert_eq!(
        call_code(&client, "ops_restart", &args).await,
        "TAINTED_SESSION"
    );
    let direct = gate
        .scope(ops.ops_restart(Parameters(Target {
            target: "web".into(),
        })))
        .await
        .expect_err("tainted");
    assert_eq!(direct.data.as_ref().unwrap()["code"], "TAINTED_SESSION");
    assert_eq!(ops.restarts.load(Ordering::SeqCst), 1);
}

/// a34. Taint x out-of-band approvals of a handler tool: the operator approves a call asked in the
/// clean session; the agent then reads untrusted output (a handler tool declared `untrusted_output`)
/// and calls again. Guarantee 14: the clean session's approval approves nothing in the tainted one.
/// Broken: the HIGH_WRITE body runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a34_a_clean_sessions_approval_does_not_run_after_the_latch_closed() {
    let gate = two_step(Mode::FullAuto).build().unwrap();
    let (ops, client, pending) = ops_out_of_band(&gate, Dialect::Old).await;
    let args = json!({"target": "db"});
    approve_out_of_band(&gate, &client, &pending, "ops_wipe", &args).await;
    assert_eq!(call_code(&client, "ops_fetch", &json!({})).await, "OK");
    let said = call(&client, "ops_wipe", args).await;
    assert_eq!(ops.wiped(), 0, "{said:?}");
    assert_eq!(code_of(&said), "APPROVAL_PENDING");
    assert!(pending.lock().unwrap().last().unwrap().taint.is_some());
}

/// a42. Session grants x taint x handler tools: an approver's session grant for `ops_wipe` lets the
/// next call of the handler tool run unasked, until a handler tool declared `untrusted_output` closes
/// the latch, which revokes it. Guarantee 14. Broken: a write runs on the grant after the latch
/// closed (the approver rejects every question after the first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a42_the_latch_revokes_a_grant_given_for_a_handler_tool() {
    let (gate, asked) = granting_once(SessionGrant::tool(HOUR), "not after that page");
    let (ops, client) = ops_plain(&gate).await;
    assert_eq!(
        call_code(&client, "ops_wipe", &json!({"target": "a"})).await,
        "OK"
    );
    assert_eq!(
        call_code(&client, "ops_wipe", &json!({"target": "b"})).await,
        "OK"
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "the grant answered the second"
    );
    assert_eq!(call_code(&client, "ops_fetch", &json!({})).await, "OK");
    let after = call(&client, "ops_wipe", json!({"target": "c"})).await;
    assert_eq!(code_of(&after), "APPROVAL_REJECTED");
    assert_eq!(*ops.wipes.lock().unwrap(), ["a", "b"]);
    assert!(gate.grants().is_empty());
}
