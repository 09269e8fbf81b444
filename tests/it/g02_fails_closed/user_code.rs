//! Guarantee 2 (It fails closed), against user code that runs between a decision and a body (sinks,
//! approvers, an argument's `Serialize`, `escalate`), in every declaration form.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::Ordering::SeqCst;
use toolgate::{AllowAllApprover, Gate, Mode};

use crate::common::gates;
use crate::fixtures::user_code::*;

// ---------------------------------------------------------------------------------------------
// Guarantee 2: fails closed

#[test]
fn g2_spawned_thread_and_escaped_closure_have_no_gate() {
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let before = LOW.load(SeqCst);
    let code = gate
        .run(|| std::thread::spawn(low).join().unwrap())
        .unwrap_err()
        .code();
    assert_eq!(code.as_str(), "NO_GATE");
    let escaped = gate.run(|| move || low());
    assert_eq!(escaped().unwrap_err().code().as_str(), "NO_GATE");
    assert_eq!(LOW.load(SeqCst), before);
}

#[test]
fn g2_a_future_made_inside_a_gate_and_polled_outside_is_refused() {
    let _s = serial();
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let before = LOW_ASYNC.load(SeqCst);
    let fut = gate.run(low_async);
    assert_eq!(block_on(fut).unwrap_err().code().as_str(), "NO_GATE");
    assert_eq!(LOW_ASYNC.load(SeqCst), before);
}

#[test]
fn g2_ids_are_compared_exactly() {
    let _s = serial();
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    for id in [
        "rt.low_callable\0",
        "RT.low_callable",
        "rt.low_callab\u{13e}e",
        " rt.low_callable",
        "rt.low_callable\u{200b}",
        "rt..low_callable",
    ] {
        let r = toolgate::registry()
            .call(&gate, id, serde_json::json!({}))
            .now()
            .unwrap();
        assert_eq!(r.unwrap_err().code(), "UNKNOWN_TOOL", "{id:?}");
    }
}

#[test]
fn g2_strict_arguments() {
    // An approver, so that the gate does not refuse the tool before its arguments are read.
    let gate = gates::approved(Mode::FullAuto, AllowAllApprover);
    for args in [
        serde_json::json!({"x": 1}),
        serde_json::json!(null),
        serde_json::json!([]),
        serde_json::json!({"user": "a", "pin": "1", "apiKey": 1}),
    ] {
        let r = toolgate::registry()
            .call(&gate, "rt.secret", args.clone())
            .now()
            .unwrap();
        assert_eq!(r.unwrap_err().code(), "INVALID_PARAMS", "{args}");
    }
}
