//! Guarantee 5 (Nested gates intersect), against holes found by review, each reproduced as an
//! outside attacker would write it.
//! Each test asserts the guarantee: it passes when the attack fails.

use crate::common::serial;
use crate::fixtures::regressions::*;

// Finding 3, `&Gate` parameter form: the gate passed as an argument is re-checked too.
#[test]
fn a_gate_passed_as_an_argument_is_checked_again_before_the_body() {
    let _serial = serial();
    let gate = self_lowering_gate(None);
    let runs = count(&GATE_PARAM_RUNS);
    assert_refused_by_the_mode(purge_with(&gate, "hot".into()));
    assert_eq!(count(&GATE_PARAM_RUNS), runs);
}
