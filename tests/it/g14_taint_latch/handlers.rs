//! Guarantee 14 (After untrusted input, no write runs unasked), against rmcp handlers gated in
//! place, `#[toolset]` methods on registered instances, OAuth over `HttpService` and request
//! states.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::ProtocolVersion;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use toolgate::approval::SessionGrant;
use toolgate::gate::TaintPolicy;
use toolgate::mcp::ToolgateServer;
use toolgate::{Approval, Gate, Mode};

use crate::common::gates;
use crate::fixtures::handlers::*;

// ---------------------------------------------------------------------------------------------------
// a13-a14: taint and budgets x handler tools.
// ---------------------------------------------------------------------------------------------------

/// a13. Taint x handler: a handler tool declared `untrusted_output` closes the latch, and then the
/// handler's own write (over MCP, and by a direct call) is refused `TAINTED_SESSION`. Broken: a write
/// runs after the untrusted read.
#[test]
fn a13_an_untrusted_handler_tool_latches_the_handlers_writes() {
    runtime().block_on(async {
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .taint_policy(TaintPolicy::Refuse)
            .build()
            .unwrap();
        let ops = Ops::default();
        let client = connect(ToolgateServer::new(gate.clone()).handler(ops.clone())).await;
        let args = json!({"target": "web"});
        assert_eq!(
            code_of(&call(&client, "ops_restart", args.clone()).await),
            "OK"
        );
        assert_eq!(code_of(&call(&client, "ops_fetch", json!({})).await), "OK");
        assert_eq!(gate.taint().map(|t| t.tool), Some("ops_fetch"));
        assert_eq!(
            code_of(&call(&client, "ops_restart", args).await),
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
    });
}

/// a34. Taint x out-of-band approvals of a handler tool: the operator approves a call asked in the
/// clean session; the agent then reads untrusted output (a handler tool declared `untrusted_output`)
/// and calls again. Guarantee 14: the clean session's approval approves nothing in the tainted one.
/// Broken: the HIGH_WRITE body runs.
#[test]
fn a34_a_clean_sessions_approval_does_not_run_after_the_latch_closed() {
    runtime().block_on(async {
        let gate = two_step(Mode::FullAuto).build().unwrap();
        let ops = Ops::default();
        let (server, pending) =
            pending_channel(ToolgateServer::new(gate.clone()).handler(ops.clone()));
        let client = connect_as(server, client_config(false, ProtocolVersion::V_2025_06_18)).await;
        let args = json!({"target": "db"});
        assert_eq!(
            code_of(&call(&client, "ops_wipe", args.clone()).await),
            "APPROVAL_PENDING"
        );
        gate.approve(&last_token(&pending)).expect("approved");
        assert_eq!(code_of(&call(&client, "ops_fetch", json!({})).await), "OK");
        let said = call(&client, "ops_wipe", args).await;
        assert_eq!(ops.wiped(), 0, "{said:?}");
        assert_eq!(code_of(&said), "APPROVAL_PENDING");
        assert!(pending.lock().unwrap().last().unwrap().taint.is_some());
    });
}

/// a42. Session grants x taint x handler tools: an approver's session grant for `ops_wipe` lets the
/// next call of the handler tool run unasked, until a handler tool declared `untrusted_output` closes
/// the latch, which revokes it. Guarantee 14. Broken: a write runs on the grant after the latch
/// closed (the approver rejects every question after the first).
#[test]
fn a42_the_latch_revokes_a_grant_given_for_a_handler_tool() {
    runtime().block_on(async {
        let asked = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&asked);
        let gate = gates::approved(Mode::FullAuto, move |_: &toolgate::ApprovalRequest<'_>| {
            if count.fetch_add(1, Ordering::SeqCst) == 0 {
                Approval::ApproveForSession(SessionGrant::tool(HOUR))
            } else {
                Approval::Reject("not after that page".into())
            }
        });
        let ops = Ops::default();
        let client = connect(ToolgateServer::new(gate.clone()).handler(ops.clone())).await;
        assert_eq!(
            code_of(&call(&client, "ops_wipe", json!({"target": "a"})).await),
            "OK"
        );
        assert_eq!(
            code_of(&call(&client, "ops_wipe", json!({"target": "b"})).await),
            "OK"
        );
        assert_eq!(
            asked.load(Ordering::SeqCst),
            1,
            "the grant answered the second"
        );
        assert_eq!(code_of(&call(&client, "ops_fetch", json!({})).await), "OK");
        let after = call(&client, "ops_wipe", json!({"target": "c"})).await;
        assert_eq!(code_of(&after), "APPROVAL_REJECTED");
        assert_eq!(*ops.wipes.lock().unwrap(), ["a", "b"]);
        assert!(gate.grants().is_empty());
    });
}
