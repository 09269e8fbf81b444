//! Guarantee 13 (a budget is never exceeded) over MCP: no in-band form is shown for a call past its
//! budget.
#![cfg(feature = "mcp-http")]

use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use toolgate::Mode;
use toolgate::gate::BudgetScope;

use crate::fixtures::mcp_in_band::*;
use crate::g07_approvals::checks::built;
use crate::g07_approvals::rounds::*;

/// In band under a budget: forms left unanswered keep no unit, a call the budget refuses gets no
/// form (no approver is asked), and no form answered runs a call past the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b34_in_band_form_not_shown_past_the_budget() {
    let sink = Arc::new(Memory::default());
    let g = built(Mode::FullAuto, |b| {
        b.two_step_approvals().audit_shared(sink.clone()).budget(
            BudgetScope::tool("m10.*"),
            2,
            HOUR,
        )
    });
    let client = connect(in_band(g)).await;
    let s1 = call(&client, "m10.m10_wire", json!({"cents": 1}), None, None).await;
    let s2 = call(&client, "m10.m10_wire", json!({"cents": 2}), None, None).await;
    let third = call(&client, "m10.m10_wire", json!({"cents": 3}), None, None).await;
    assert_eq!(code_of(&s1), "INPUT_REQUIRED");
    assert_eq!(code_of(&s2), "INPUT_REQUIRED");
    // Waiting forms hold no unit: a third call gets its own form.
    assert_eq!(code_of(&third), "INPUT_REQUIRED", "{third:?}");
    let approve = |cents: u64, form| {
        let (client, state) = (&client, state_of(form));
        async move {
            answered(
                client,
                "m10.m10_wire",
                json!({"cents": cents}),
                &state,
                "approve",
            )
            .await
        }
    };
    assert_eq!(approve(3, &third).await, "OK");
    let r1 = approve(1, &s1).await;
    let r2 = approve(2, &s2).await;
    // The third ran first; of the two others one more fits the budget of 2 in the hour.
    assert_eq!([r1.as_str(), r2.as_str()], ["OK", "BUDGET_EXHAUSTED"]);
    assert!(M10.load(Ordering::SeqCst) <= 2, "{r1} {r2}");
    let allowed = sink
        .records()
        .iter()
        .filter(|r| r["stage"] == "enter")
        .count();
    assert!(allowed <= 2, "{r1} {r2}: {allowed} calls entered");
}
