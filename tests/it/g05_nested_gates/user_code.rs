//! Guarantee 5 (Nested gates intersect), against user code that runs between a decision and a body
//! (sinks, approvers, an argument's `Serialize`, `escalate`), in every declaration form.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::Ordering::SeqCst;
use toolgate::{AllowAllApprover, Approval, ApprovalRequest, Gate, Mode};

use crate::common::gates;
use crate::fixtures::user_code::*;

// ---------------------------------------------------------------------------------------------
// Guarantee 5: nested gates intersect

#[test]
fn g5_a_call_by_name_through_a_wider_gate_inside_a_narrower_one_is_refused() {
    let _s = serial();
    let (narrow, wide) = narrow_and_wide();
    let before = LOW_CALLABLE.load(SeqCst);
    let r = narrow.run(|| {
        toolgate::registry()
            .call(&wide, "rt.low_callable", serde_json::json!({}))
            .now()
            .unwrap()
    });
    assert!(
        r.is_err(),
        "ran through the wide gate inside the narrow one: {r:?}"
    );
    assert_eq!(LOW_CALLABLE.load(SeqCst), before);
}

#[test]
fn g5_a_wide_scope_polled_inside_a_narrow_run_is_refused() {
    let _s = serial();
    let (narrow, wide) = narrow_and_wide();
    let before = LOW_ASYNC.load(SeqCst);
    let r = narrow.run(|| block_on(wide.scope(low_async())));
    assert!(r.is_err());
    let r = block_on(narrow.scope(async { wide.run(low) }));
    assert!(r.is_err());
    let r = narrow.run(|| low_gate_param(&wide));
    assert!(r.is_err());
    assert_eq!(LOW_ASYNC.load(SeqCst), before);
}

#[test]
fn g5_every_gate_approves_and_every_deny_list_applies() {
    let _s = serial();
    let outer = gates::approved(Mode::FullAuto, |_: &ApprovalRequest<'_>| {
        Approval::Reject("outer says no".into())
    });
    let inner = gates::approved(Mode::FullAuto, AllowAllApprover);
    let before = HIGH.load(SeqCst);
    let r = outer.run(|| inner.run(high));
    assert_eq!(r.unwrap_err().code().as_str(), "APPROVAL_REJECTED");
    let outer = crate::fixtures::support::denying_approving("rt.high");
    let r = outer.run(|| inner.run(high));
    assert_eq!(r.unwrap_err().code().as_str(), "DENY_LISTED");
    let r = inner.run(|| outer.run(high));
    assert_eq!(r.unwrap_err().code().as_str(), "DENY_LISTED");
    assert_eq!(HIGH.load(SeqCst), before);
}

// ---------------------------------------------------------------------------------------------
// more attempts

#[test]
fn g5_a_tool_body_cannot_widen_its_own_gate() {
    let _s = serial();
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let before = HIGH.load(SeqCst);
    let r = shadow.run(sneaky_read);
    assert_eq!(HIGH.load(SeqCst), before, "{r:?}");
    assert_eq!(WIDEN.load(SeqCst), 0);
}

/// A SHADOW gate and a PARTIAL_AUTO one.
fn narrow_and_wide() -> (Gate, Gate) {
    (
        Gate::new(Mode::Shadow).unwrap(),
        Gate::new(Mode::PartialAuto).unwrap(),
    )
}
