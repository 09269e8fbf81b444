//! Guarantee 4 (The mode is only ever lowered, and a lowering reaches every call not yet started),
//! against budgets and two-step approvals kept in stores, the principal, and approvals over MCP.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(feature = "mcp-http")]

use std::sync::atomic::Ordering;
use toolgate::Mode;

use crate::common::gates;
use crate::fixtures::shared_stores::*;

/// An approved request, then the gate is lowered: the call does not run.
#[test]
fn b14_pending_approval_after_lowering() {
    let gate = gates::two_step(Mode::FullAuto);
    let refused = gate.run(|| b14_wire(7)).unwrap_err();
    let token = refused.approval_token().unwrap().to_owned();
    gate.approve(&token).unwrap();
    gate.lower(Mode::PartialAuto).unwrap();
    assert_ne!(code(gate.run(|| b14_wire(7))), "OK");
    assert_eq!(B14.load(Ordering::SeqCst), 0);
}
