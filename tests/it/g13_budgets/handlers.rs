//! Guarantee 13 (A budget is never exceeded, and counts the calls that run), against rmcp handlers
//! gated in place, `#[toolset]` methods on registered instances, OAuth over `HttpService` and
//! request states.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use std::sync::atomic::Ordering;

use crate::fixtures::handlers::*;
use crate::g07_approvals::served_ops::*;
use serde_json::json;
use toolgate::Mode;
use toolgate::gate::BudgetScope;

/// a14. Budgets x in-band rounds of a handler tool: a budget of one `ops_wipe` call an hour. The form
/// round takes no unit; the approved retry takes the one unit; the next call is refused
/// `BUDGET_EXHAUSTED` before any form is shown. Broken: the form round spends the unit (the approved
/// call is refused), or a second call runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a14_a_budget_counts_the_handler_call_that_runs_not_its_form_rounds() {
    let budget = BudgetScope::tool("ops_wipe");
    let (ops, client) = ops_in_band(
        two_step(Mode::FullAuto)
            .budget(budget, 1, HOUR)
            .build()
            .unwrap(),
    )
    .await;
    let args = json!({"target": "db"});
    let asked = call(&client, "ops_wipe", args.clone()).await;
    assert_eq!(code_of(&asked), "INPUT_REQUIRED");
    let again = call(&client, "ops_wipe", args.clone()).await;
    assert_eq!(code_of(&again), "INPUT_REQUIRED");
    let ran = retry(&client, "ops_wipe", args, &state_of(&asked), "approve").await;
    assert_eq!(code_of(&ran), "OK");
    let next = call(&client, "ops_wipe", json!({"target": "web"})).await;
    assert_eq!(code_of(&next), "BUDGET_EXHAUSTED");
    assert_eq!(ops.wiped(), 1);
}

/// a41. Budgets x out-of-band approvals of a handler tool: a budget of one `ops_wipe2` call; the agent
/// asks three times while its request waits for the operator. Guarantee 13: waiting calls keep no
/// unit, so the approved call runs; the next call is over the budget. Broken: the approved call is
/// refused `BUDGET_EXHAUSTED`, or a second call runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a41_calls_waiting_for_an_operator_spend_no_budget_of_a_handler_tool() {
    let budget = BudgetScope::tool("ops_wipe2");
    let gate = two_step(Mode::FullAuto)
        .budget(budget, 1, HOUR)
        .build()
        .unwrap();
    let (ops, client, pending) = ops_out_of_band(&gate, Dialect::Old).await;
    let args = json!({"target": "db"});
    for _ in 0..3 {
        assert_eq!(
            call_code(&client, "ops_wipe2", &args).await,
            "APPROVAL_PENDING"
        );
    }
    gate.approve(&last_token(&pending)).expect("approved");
    assert_eq!(call_code(&client, "ops_wipe2", &args).await, "OK");
    let next = call(&client, "ops_wipe2", json!({"target": "web"})).await;
    assert_eq!(code_of(&next), "BUDGET_EXHAUSTED");
    assert_eq!(ops.wipes2.load(Ordering::SeqCst), 1);
}
