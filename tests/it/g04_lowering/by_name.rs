//! Guarantee 4 (The mode is only ever lowered, and a lowering reaches every call not yet started),
//! against calls by name (`registry().call`), with hooks fired from the user code a call runs.
//! Each test asserts the guarantee: it passes when the attack fails.

use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use toolgate::registry::CallError;
use toolgate::{Approval, ApprovalRequest, Mode, registry};

use crate::common::gates;
use crate::fixtures::by_name::*;

/// The call by name of `id` answered `r`: refused by the mode, no body run, every `enter` of `sink`
/// closed.
#[track_caller]
fn refused_by_the_mode(r: Result<Value, CallError>, id: &str, sink: &HookSink) {
    assert_eq!(r.unwrap_err().code(), "MODE_NOT_ALLOWED", "{id}");
    assert!(take_runs().is_empty(), "{id}");
    assert_balanced(&sink.0.records());
}

/// Arguments for a call of `id` (`rt2.red` takes a user and a PIN, the others a number).
fn arguments_of(id: &str) -> Value {
    match id {
        "rt2.red" => json!({"user": "u", "pin": 4}),
        _ => json!({"x": 4}),
    }
}

/// A `Deserialize` that lowers the gate: the call is decided at the lowered mode.
#[test]
fn a2_deserialize_lowering_the_gate_refuses_sync_and_async() {
    let _s = serial();
    for id in ["rt2.lo", "rt2.glo", "rt2.esc_lo", "rt2.alo"] {
        reset();
        let (gate, sink) = audited(Mode::PartialAuto);
        let g = gate.clone();
        arm(&DE_HOOK, 1, move || g.lower(Mode::Shadow).unwrap());
        let r = block_on(registry().call(&gate, id, json!({"x": 5})));
        refused_by_the_mode(r, id, &sink);
    }
}

/// An async call's future created, then the gate lowered, then polled: refused (guarantee 4).
#[test]
fn a8_async_future_polled_after_lower_is_refused() {
    let _s = serial();
    for id in ["rt2.alo", "rt2.ahi"] {
        reset();
        let (gate, sink) = audited(Mode::FullAuto);
        let fut = registry().call(&gate, id, json!({"x": 4}));
        gate.lower(Mode::Shadow).unwrap();
        refused_by_the_mode(block_on(fut), id, &sink);
    }
}

/// Guarantee 4 for calls by name: a gate lowered while the approver thinks, or while the `enter`
/// record is written, refuses the call (sync and async), with the enter closed `refused`.
#[test]
fn a12_lowering_during_the_decision_of_a_call_by_name_refuses_it() {
    let _s = serial();
    for id in ["rt2.hi", "rt2.ahi", "rt2set.assoc", "rt2.red"] {
        for nth in 1..=2 {
            reset();
            let (gate, sink) = audited(Mode::FullAuto);
            let g = gate.clone();
            let before = Arc::new(AtomicUsize::new(usize::MAX));
            let b = before.clone();
            arm(&SINK_HOOK, nth, move || {
                b.store(RAN.lock().unwrap().len(), SeqCst);
                g.lower(Mode::PartialAuto).unwrap();
            });
            let r = block_on(registry().call(&gate, id, arguments_of(id)));
            disarm_all();
            let runs = take_runs();
            let recs = sink.0.records();
            assert_balanced(&recs);
            // the lowering happened at a record; whatever was recorded after must not run at FULL_AUTO
            if runs.len() > before.load(SeqCst) {
                panic!(
                    "{id}@{nth}: ran {runs:?} after a lowering during its decision: {r:?} {recs:#?}"
                );
            }
        }
        reset();
        let gate = gates::approved(Mode::FullAuto, |_: &ApprovalRequest<'_>| {
            wide().lower(Mode::PartialAuto).unwrap();
            Approval::Approve
        });
        *WIDE.lock().unwrap() = Some(gate.clone());
        let r = block_on(registry().call(&gate, id, arguments_of(id)));
        assert!(r.is_err(), "{id}: {r:?}");
        assert!(take_runs().is_empty(), "{id}");
    }
}
