//! Guarantee 8 (The audit `enter` record is written before the body runs), against calls by name
//! (`registry().call`), with hooks fired from the user code a call runs.
//! Each test asserts the guarantee: it passes when the attack fails.

use serde_json::json;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use toolgate::audit::{AuditRecord, MemorySink};
use toolgate::{Denied, Mode, registry};

use crate::common::gates;
use crate::fixtures::by_name::*;

/// A call by name is audited and approved as the same direct call (declared/effective risk, digest).
#[test]
fn a15_by_name_and_direct_are_audited_alike() {
    let _s = serial();
    let (gate, sink) = fresh(Mode::FullAuto);
    for (id, direct) in [
        (
            "rt2.hi",
            Box::new(|| gate.run(|| hi(Evil(3))).map(|_| ()))
                as Box<dyn Fn() -> Result<(), Denied>>,
        ),
        ("rt2.glo", Box::new(|| glo(&gate, Evil(3)).map(|_| ()))),
        (
            "rt2.esc_lo",
            Box::new(|| gate.run(|| esc_lo(Evil(3))).map(|_| ())),
        ),
        (
            "rt2set.assoc",
            Box::new(|| gate.run(|| Set2::assoc(Evil(3))).map(|_| ())),
        ),
    ] {
        APPROVALS.store(0, SeqCst);
        call(&gate, id, json!({"x": 3})).unwrap();
        let a = APPROVALS.swap(0, SeqCst);
        let by_name = sink.0.take();
        direct().unwrap();
        let b = APPROVALS.swap(0, SeqCst);
        let d = sink.0.take();
        let key = |rs: &[AuditRecord]| {
            rs.iter()
                .map(|r| {
                    (
                        r.stage,
                        r.arguments_digest.clone(),
                        r.effective_risk,
                        r.declared_risk,
                        r.decision,
                        r.outcome,
                        r.output_digest.clone(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(key(&by_name), key(&d), "{id}");
        assert_eq!(a, b, "{id}");
    }
    // escalate called as often by name as directly
    static ESCS: AtomicUsize = AtomicUsize::new(0);
    arm(&ESC_HOOK, usize::MAX, || {});
    let _ = ESCS.load(SeqCst);
    disarm_all();
}

/// A sink panicking on the call gate's `enter`, under an outer audited gate: the outer enter gets its exit.
#[test]
fn b1_call_gate_sink_panicking_on_enter_under_an_outer_gate() {
    let _s = serial();
    reset();
    let outer_sink = MemorySink::new();
    let outer = gates::approved_audited(Mode::FullAuto, counting_approver, outer_sink.clone());
    let (inner, _) = audited(Mode::FullAuto);
    for id in ["rt2.hi", "rt2.ahi", "rt2.lo"] {
        arm(&SINK_HOOK, 1, || panic!("sink panics on enter"));
        let r = outer.run(|| {
            catch_unwind(AssertUnwindSafe(|| {
                block_on(registry().call(&inner, id, json!({"x": 3})))
            }))
        });
        disarm_all();
        assert!(r.is_err() || r.as_ref().unwrap().is_err(), "{id}: {r:?}");
    }
    assert!(take_runs().is_empty());
    assert_balanced(&outer_sink.records());
}
