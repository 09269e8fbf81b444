//! Guarantee 6 (Escalation only raises), against calls by name (`registry().call`), with hooks
//! fired from the user code a call runs.
//! Each test asserts the guarantee: it passes when the attack fails.

use serde_json::json;
use toolgate::Mode;

use crate::fixtures::by_name::*;

/// An escalate function that lowers the gate, or calls the same tool by name.
#[test]
fn b4_escalate_lowering_or_calling_the_same_tool_by_name() {
    let _s = serial();
    for nth in 1..=3 {
        let (gate, sink) = fresh(Mode::PartialAuto);
        let g = gate.clone();
        arm(&ESC_HOOK, nth, move || g.lower(Mode::Shadow).unwrap());
        let r = call(&gate, "rt2.esc_lo", json!({"x": 5}));
        disarm_all();
        let runs = take_runs();
        assert!(
            runs.is_empty() || gate.mode() == Mode::PartialAuto,
            "esc lower@{nth}: {runs:?} {r:?}"
        );
        assert_balanced(&sink.0.records());
    }
    for nth in 1..=1 {
        // escalate runs once per call by name (a hook armed for its 2nd run never fires)
        let (gate, sink) = fresh(Mode::PartialAuto);
        let g = gate.clone();
        arm(&ESC_HOOK, nth, move || {
            assert_eq!(
                call(&g, "rt2.esc_lo", json!({"x": 1})).unwrap_err().code(),
                "ABOVE_CEILING"
            );
            assert_eq!(call(&g, "rt2.esc_lo", json!({"x": 6})).unwrap(), json!(6));
        });
        let r = call(&gate, "rt2.esc_lo", json!({"x": 5}));
        disarm_all();
        let mut runs = take_runs();
        runs.sort();
        assert_eq!(
            runs,
            vec![("esc_lo", 5), ("esc_lo", 6)],
            "esc byname@{nth}: {r:?}"
        );
        assert_balanced(&sink.0.records());
    }
}
