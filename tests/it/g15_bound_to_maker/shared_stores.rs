//! Guarantee 15 (What is stored is honoured for its maker alone), against budgets and two-step
//! approvals kept in stores, the principal, and approvals over MCP.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(feature = "mcp-http")]

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::fixtures::shared_stores::*;
use crate::fixtures::support::approve_for_session;
use crate::g07_approvals::checks::built;
use toolgate::approval::SessionGrant;
use toolgate::audit::Stage;
use toolgate::gate::BudgetScope;
use toolgate::{Approval, ApprovalRequest, Mode};

// ---------------------------------------------------------------------------------------------------
// The principal
// ---------------------------------------------------------------------------------------------------

/// Every record of a gate names its principal; the approver sees it.
#[test]
fn b16_every_record_names_the_principal() {
    let sink = Arc::new(Memory::default());
    let seen = Arc::new(Mutex::new(Vec::<Option<String>>::new()));
    let seen2 = seen.clone();
    let gate = built(Mode::FullAuto, |b| {
        b.principal("alice@example.com")
            .audit_shared(sink.clone())
            .approver(move |r: &ApprovalRequest<'_>| {
                seen2.lock().unwrap().push(r.principal.map(str::to_owned));
                if r.arguments.is_some_and(|a| a.contains("13")) {
                    Approval::Reject("no".into())
                } else {
                    Approval::ApproveForSession(SessionGrant::tool(HOUR).exact_arguments())
                }
            })
            .budget(BudgetScope::tool("b16.*"), 3, HOUR)
    });
    let clone = gate.clone();
    let _ = gate.run(|| b16_wire(1));
    let _ = clone.run(|| b16_wire(1));
    let _ = gate.run(|| b16_wire(13));
    let _ = gate.run(|| b16_wire(2));
    let _ = gate.run(|| b16_wire(3)); // over budget
    gate.revoke_grants(None, "ops");
    gate.lower_by(Mode::Shadow, "ops").unwrap();
    let _ = gate.run(|| b16_wire(4));
    let records = sink.records();
    assert!(records.len() >= 8, "{records:#?}");
    let bad: Vec<_> = records
        .iter()
        .filter(|r| r.get("principal").and_then(|p| p.as_str()) != Some("alice@example.com"))
        .collect();
    assert!(bad.is_empty(), "records without the principal: {bad:#?}");
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .all(|p| p.as_deref() == Some("alice@example.com"))
    );
    assert!(!seen.lock().unwrap().is_empty());
}

/// A two-step answer's records (approval_granted, approval_rejected) name the principal too.
#[test]
fn b17_two_step_records_name_the_principal() {
    let sink = Arc::new(Memory::default());
    let gate = built(Mode::FullAuto, |b| {
        b.principal("bob")
            .agent("b17")
            .audit_shared(sink.clone())
            .two_step_approvals()
    });
    let token = |cents| {
        let asked = gate.run(|| b17_wire(cents)).unwrap_err();
        asked.approval_token().unwrap().to_owned()
    };
    let (t1, t2) = (token(1), token(2));
    approve_for_session(&gate, &t1, "op");
    gate.answer(
        &t2,
        toolgate::approval::store::Answer::Reject {
            by: "op".into(),
            reason: "no".into(),
            stop: false,
        },
    )
    .unwrap();
    let _ = gate.run(|| b17_wire(1));
    let _ = gate.run(|| b17_wire(2));
    let _ = gate.run(b17_low);
    let records = sink.records();
    let stages: Vec<_> = records.iter().map(|r| r["stage"].clone()).collect();
    let bad: Vec<_> = records
        .iter()
        .filter(|r| r.get("principal").and_then(|p| p.as_str()) != Some("bob"))
        .collect();
    assert!(
        bad.is_empty(),
        "records without the principal: {bad:#?} (stages {stages:?})"
    );
    assert_eq!(B17.load(Ordering::SeqCst), 1);
    let _ = Stage::Enter;
}
