//! Guarantee 6 (Escalation only raises), against user code that runs between a decision and a body
//! (sinks, approvers, an argument's `Serialize`, `escalate`), in every declaration form.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use toolgate::{Approval, ApprovalRequest, Gate, Mode, Risk};

use crate::common::gates;
use crate::fixtures::user_code::*;

#[test]
fn g6_a_panicking_classifier_runs_nothing_and_the_gate_still_works() {
    // covered by the project; here with a classifier that panics: the body must not run
    let _s = serial();
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let before = ESC.load(SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| gate.run(|| esc_low(99))));
    assert!(r.is_err() || r.as_ref().unwrap().is_err());
    assert_eq!(ESC.load(SeqCst), before);
    assert!(
        gate.run(|| esc_low(0)).is_ok(),
        "the gate still works after a panicking classifier"
    );
}

// ---------------------------------------------------------------------------------------------
// Guarantee 6: escalation only raises

#[test]
fn g6_an_escalated_call_needs_the_approval_of_its_effective_risk() {
    let _s = serial();
    let asked: Arc<Mutex<Vec<Risk>>> = Arc::default();
    let a2 = asked.clone();
    let no_approver = Gate::new(Mode::FullAuto).unwrap();
    let rejecting = gates::approved(Mode::FullAuto, move |r: &ApprovalRequest<'_>| {
        a2.lock().unwrap().push(r.risk);
        Approval::Reject("no".into())
    });
    let before = ESC.load(SeqCst);
    assert_eq!(
        no_approver.run(|| esc_low(1)).unwrap_err().code().as_str(),
        "APPROVAL_REQUIRED"
    );
    assert_eq!(
        rejecting.run(|| esc_low(1)).unwrap_err().code().as_str(),
        "APPROVAL_REJECTED"
    );
    assert_eq!(*asked.lock().unwrap(), vec![Risk::HighWrite]);
    assert_eq!(
        Gate::new(Mode::PartialAuto)
            .unwrap()
            .run(|| esc_low(1))
            .unwrap_err()
            .code()
            .as_str(),
        "ABOVE_CEILING"
    );
    assert_eq!(ESC.load(SeqCst), before);
    // a classifier cannot lower: a HIGH_WRITE tool whose classifier says READ_ONLY
    let b = ESC_HIGH.load(SeqCst);
    assert!(
        Gate::new(Mode::PartialAuto)
            .unwrap()
            .run(|| esc_high(0))
            .is_err()
    );
    assert!(no_approver.run(|| esc_high(0)).is_err());
    assert_eq!(ESC_HIGH.load(SeqCst), b);
}
