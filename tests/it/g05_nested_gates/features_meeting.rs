//! Guarantee 5 (Nested gates intersect), against two stateful features meeting in one process
//! (grants, the latch, budgets and their stores, approvers, nested gates, lowering, sinks), one
//! changing while the other's decision waits.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::Arc;

use toolgate::approval::SessionGrant;
use toolgate::policy::TaintPolicy;
use toolgate::{Approval, ApprovalRequest, DenialCode, Mode, Risk};

use crate::common::gates;
use crate::common::serial;
use crate::fixtures::features_meeting::*;

/// nested gates × grants (5, 7). The outer gate's approver answers "for the session"; the inner gate's
/// approver rejects the same call. The call is refused, and the outer gate keeps no grant from it.
#[test]
fn p45_an_outer_grant_for_a_call_the_inner_gate_rejects_is_never_made() {
    let _serial = serial();
    let outer = gates::approved(Mode::FullAuto, |_: &ApprovalRequest<'_>| {
        Approval::ApproveForSession(SessionGrant::tool(HOUR))
    });
    let inner = gates::approved(Mode::FullAuto, |_: &ApprovalRequest<'_>| {
        Approval::Reject("no".into())
    });
    let before = count(&WIRES);
    for nesting in [0, 1] {
        let refused = if nesting == 0 {
            outer.run(|| inner.run(|| wire(1)))
        } else {
            inner.run(|| outer.run(|| wire(1)))
        };
        assert_eq!(refused.unwrap_err().code(), DenialCode::ApprovalRejected);
        assert!(
            outer.grants().is_empty(),
            "nesting {nesting}: a grant for a refused call"
        );
    }
    assert_eq!(count(&WIRES), before);
}

/// nested gates × latch × budgets × approvers (13, 14). An inner gate that refuses tainted writes is
/// tainted; the outer gate is clean, with a budget of one and an approver. The nested write is refused
/// `TAINTED_SESSION` by the inner gate's table, before any budget or approver: the outer approver is
/// never asked and the outer unit never taken. Likewise for an inner gate whose budget is spent.
#[test]
fn p49_a_nested_call_refused_by_one_gates_latch_or_budget_asks_and_charges_no_other() {
    let _serial = serial();
    let asked: Asked = Arc::default();
    let outer = holding_builder(Approval::Approve, &asked)
        .budget(Risk::HighWrite, 1, HOUR)
        .build()
        .unwrap();
    let tainted = approving()
        .taint_policy(TaintPolicy::Refuse)
        .build()
        .unwrap();
    tainted.run(|| fetch("https://evil".into())).unwrap();
    let spent = approving()
        .budget(Risk::HighWrite, 1, HOUR)
        .build()
        .unwrap();
    spent.run(|| wire(0)).unwrap();
    let before = count(&WIRES);
    for _ in 0..3 {
        assert_eq!(nested_code(&outer, &tainted, 1), DenialCode::TaintedSession);
        assert_eq!(nested_code(&tainted, &outer, 1), DenialCode::TaintedSession);
        assert_eq!(nested_code(&outer, &spent, 1), DenialCode::BudgetExhausted);
    }
    assert_eq!(count(&WIRES), before);
    assert!(
        asked.lock().unwrap().is_empty(),
        "the outer approver was asked"
    );
    outer
        .run(|| wire(2))
        .expect("the outer unit was never taken");
}
