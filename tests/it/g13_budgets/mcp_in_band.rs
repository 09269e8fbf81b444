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

/// In band under a budget: forms left unanswered keep no unit, a call the budget refuses gets no
/// form (no approver is asked), and no form answered runs a call past the budget.
#[test]
fn b34_in_band_form_not_shown_past_the_budget() {
    rt().block_on(async {
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
        let r3 = code_of(
            &call(
                &client,
                "m10.m10_wire",
                json!({"cents": 3}),
                Some(&state_of(&third)),
                Some("approve"),
            )
            .await,
        );
        assert_eq!(r3, "OK");
        let r1 = code_of(
            &call(
                &client,
                "m10.m10_wire",
                json!({"cents": 1}),
                Some(&state_of(&s1)),
                Some("approve"),
            )
            .await,
        );
        let r2 = code_of(
            &call(
                &client,
                "m10.m10_wire",
                json!({"cents": 2}),
                Some(&state_of(&s2)),
                Some("approve"),
            )
            .await,
        );
        // The third ran first; of the two others one more fits the budget of 2 in the hour.
        assert_eq!([r1.as_str(), r2.as_str()], ["OK", "BUDGET_EXHAUSTED"]);
        assert!(M10.load(Ordering::SeqCst) <= 2, "{r1} {r2}");
        let allowed = sink
            .records()
            .iter()
            .filter(|r| r["stage"] == "enter")
            .count();
        assert!(allowed <= 2, "{r1} {r2}: {allowed} calls entered");
    });
}
