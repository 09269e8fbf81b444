//! Guarantee 7 (Approvals are single-use, bound and expiring), against budgets and two-step
//! approvals kept in stores, the principal, and approvals over MCP.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(feature = "mcp-http")]

use std::sync::atomic::Ordering;
use toolgate::Mode;

use crate::common::gates;
use crate::fixtures::shared_stores::*;
use crate::g07_approvals::checks::racing;

// ---------------------------------------------------------------------------------------------------
// Two-step approvals
// ---------------------------------------------------------------------------------------------------

/// An approved pending request runs exactly the approved call, once: not other arguments, not twice,
/// not through another gate, not after the gate was lowered, not in racing threads.
#[test]
fn b13_pending_approval_other_arguments_twice_other_gate() {
    let gate = gates::two_step(Mode::FullAuto);
    let other = gates::two_step(Mode::FullAuto);
    let refused = gate.run(|| b13_wire(100)).unwrap_err();
    assert_eq!(refused.code(), "APPROVAL_PENDING");
    let token = refused.approval_token().expect("a token").to_owned();
    assert!(
        !refused.to_string().contains(&token),
        "the token leaks into the message"
    );
    let json = serde_json::to_string(&refused).unwrap_or_default();
    assert!(!json.contains(&token), "the token leaks into the JSON");
    // another gate knows nothing of it
    assert!(
        other.approve(&token).is_err(),
        "another gate approved a foreign token"
    );
    assert_ne!(code(other.run(|| b13_wire(100))), "OK");
    gate.approve(&token).unwrap();
    // other arguments
    assert_ne!(code(gate.run(|| b13_wire(101))), "OK");
    assert_ne!(code(other.run(|| b13_wire(100))), "OK");
    assert_eq!(B13.load(Ordering::SeqCst), 0);
    // racing threads with the approved call: one runs
    let codes = racing(&gate, 6, |gate, _| code(gate.run(|| b13_wire(100))));
    assert_eq!(B13.load(Ordering::SeqCst), 1, "{codes:?}");
    assert_ne!(code(gate.run(|| b13_wire(100))), "OK");
    assert_eq!(B13.load(Ordering::SeqCst), 1);
    // approving twice does not make a second run
    let _ = gate.approve(&token);
    assert_ne!(code(gate.run(|| b13_wire(100))), "OK");
    assert_eq!(B13.load(Ordering::SeqCst), 1);
}

/// An approval given for a direct call is used once whether the retry is direct or by name.
#[test]
fn b15_pending_approval_by_name_and_direct_once() {
    let gate = gates::two_step(Mode::FullAuto);
    let err = toolgate::registry()
        .call(&gate, "b15.b15_wire", serde_json::json!({"cents": 5}))
        .now()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), "APPROVAL_PENDING");
    let token = err.denied().unwrap().approval_token().unwrap().to_owned();
    assert!(!serde_json::to_string(&err).unwrap().contains(&token));
    gate.approve(&token).unwrap();
    // by name with a different JSON spelling of the same value: allowed to run (same canonical JSON)
    let r1 = toolgate::registry()
        .call(&gate, "b15.b15_wire", serde_json::json!({"cents": 5}))
        .now()
        .unwrap();
    let r2 = gate.run(|| b15_wire(5));
    let r3 = toolgate::registry()
        .call(&gate, "b15.b15_wire", serde_json::json!({"cents": 5}))
        .now()
        .unwrap();
    assert_eq!(B15.load(Ordering::SeqCst), 1, "{r1:?} {r2:?} {r3:?}");
}
