//! Guarantee 3 (Deny first), against two stateful features meeting in one process (grants, the
//! latch, budgets and their stores, approvers, nested gates, lowering, sinks), one changing while
//! the other's decision waits.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::Arc;

use toolgate::DenialCode;

use crate::common::serial;
use crate::fixtures::features_meeting::*;

// ---------------------------------------------------------------------------------------------------------
// nested gates: no approver asked, no unit taken, for a call another gate refuses on its own
// ---------------------------------------------------------------------------------------------------------

/// nested gates × grants × deny (3, 5). The outer gate holds a grant of the tool; an inner gate denies
/// it. Deny first: the call is refused `DENY_LISTED`, whichever gate is outside, and the outer
/// approver is not asked again.
#[test]
fn p48_an_outer_grant_does_not_lift_an_inner_deny_rule() {
    let _serial = serial();
    let asked: Asked = Arc::default();
    let outer = holding_gate(for_session(), &asked);
    let deny = approving().deny("pairs.wire*").build().unwrap();
    outer.run(|| wire(1)).unwrap();
    let before = count(&WIRES);
    let rt = runtime();
    for _ in 0..2 {
        assert_eq!(nested_code(&outer, &deny, 2), DenialCode::DenyListed);
        assert_eq!(nested_code(&deny, &outer, 2), DenialCode::DenyListed);
        assert_eq!(
            rt.block_on(outer.scope(deny.scope(wire_async(2))))
                .unwrap_err()
                .code(),
            DenialCode::DenyListed
        );
    }
    assert_eq!(count(&WIRES), before);
    assert_eq!(asked.lock().unwrap().len(), 1);
}
