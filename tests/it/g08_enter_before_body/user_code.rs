//! Guarantee 8 (The audit `enter` record is written before the body runs), against user code that
//! runs between a decision and a body (sinks, approvers, an argument's `Serialize`, `escalate`), in
//! every declaration form.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;
use toolgate::audit::{AuditError, AuditRecord, MemorySink, Outcome, Stage};
use toolgate::{AllowAllApprover, Approval, ApprovalRequest, Mode};

use crate::common::gates;
use crate::fixtures::user_code::*;

// ---------------------------------------------------------------------------------------------
// Guarantee 8: every enter gets its exit

#[test]
fn g8_inner_sink_panicking_on_enter_closes_the_outer_enter() {
    let _s = serial();
    let (osink, omem) = hook_sink(|_| Ok(()));
    let (isink, _imem) = hook_sink(|r| {
        if r.stage == Stage::Enter {
            panic!("inner sink panics on enter");
        }
        Ok(())
    });
    let outer = gates::audited(Mode::PartialAuto, osink);
    let inner = gates::audited(Mode::PartialAuto, isink);
    let before = LOW.load(SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| outer.run(|| inner.run(low))));
    assert_eq!(LOW.load(SeqCst), before, "{r:?}");
    let o = omem.records();
    assert!(
        unbalanced(&o).is_empty(),
        "{:?}: {:?}",
        unbalanced(&o),
        stages(&o)
    );
}

#[test]
fn g8_outer_sink_panicking_on_enter_closes_the_inner_enter() {
    let _s = serial();
    let (osink, _omem) = hook_sink(|r| {
        if r.stage == Stage::Enter {
            panic!("outer sink panics on enter");
        }
        Ok(())
    });
    let (isink, imem) = hook_sink(|_| Ok(()));
    let outer = gates::audited(Mode::PartialAuto, osink);
    let inner = gates::audited(Mode::PartialAuto, isink);
    let before = LOW.load(SeqCst);
    let _ = catch_unwind(AssertUnwindSafe(|| outer.run(|| inner.run(low))));
    assert_eq!(LOW.load(SeqCst), before);
    let i = imem.records();
    assert!(
        unbalanced(&i).is_empty(),
        "{:?}: {:?}",
        unbalanced(&i),
        stages(&i)
    );
}

#[test]
fn g8_a_result_whose_serialize_panics_still_gets_its_exit() {
    let _s = serial();
    let (sink, mem) = hook_sink(|_| Ok(()));
    let gate = gates::audited(Mode::PartialAuto, sink);
    let r = catch_unwind(AssertUnwindSafe(|| gate.run(low_out).map(|_| ())));
    let recs = mem.records();
    assert!(
        unbalanced(&recs).is_empty(),
        "{r:?} {:?}: {:?}",
        unbalanced(&recs),
        stages(&recs)
    );
}

#[test]
fn g8_an_arguments_serialize_panicking_leaves_no_enter_without_exit() {
    let _s = serial();
    for nth in 1..=4usize {
        let slot = 10 + nth;
        let (osink, omem) = hook_sink(|_| Ok(()));
        let (isink, imem) = hook_sink(|_| Ok(()));
        let outer = gates::audited(Mode::PartialAuto, osink);
        let inner = gates::audited(Mode::PartialAuto, isink);
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        set_hook(slot, move || {
            if c.fetch_add(1, SeqCst) + 1 == nth {
                panic!("serialize panics on call {nth}");
            }
        });
        let r = catch_unwind(AssertUnwindSafe(|| {
            outer.run(|| inner.run(|| low_trig(Trig(slot, "x"))))
        }));
        clear_hook(slot);
        let (o, i) = (omem.records(), imem.records());
        assert!(
            unbalanced(&o).is_empty() && unbalanced(&i).is_empty(),
            "panic on serialize #{nth} ({} serializations, {r:?}): outer {:?} inner {:?}",
            count.load(SeqCst),
            stages(&o),
            stages(&i)
        );
    }
}

#[test]
fn g8_nested_scopes_cancelled_after_first_poll_close_every_enter() {
    let _s = serial();
    let (osink, omem) = hook_sink(|_| Ok(()));
    let (isink, imem) = hook_sink(|_| Ok(()));
    let outer = gates::audited(Mode::PartialAuto, osink);
    let inner = gates::audited(Mode::PartialAuto, isink);
    {
        let mut fut = Box::pin(outer.scope(inner.scope(low_async())));
        assert!(poll_once(fut.as_mut()).is_pending());
        // dropped on another thread, outside every gate
        std::thread::spawn(move || drop(fut)).join().unwrap();
    }
    for recs in [omem.records(), imem.records()] {
        assert!(unbalanced(&recs).is_empty(), "{:?}", stages(&recs));
        assert!(
            recs.iter().any(|r| r.outcome == Some(Outcome::Cancelled)),
            "{:?}",
            stages(&recs)
        );
    }
    // an async tool polled under `run` and dropped outside it
    let (sink, mem) = hook_sink(|_| Ok(()));
    let gate = gates::audited(Mode::PartialAuto, sink);
    let mut fut = Box::pin(low_async());
    assert!(gate.run(|| poll_once(fut.as_mut())).is_pending());
    drop(fut);
    let recs = mem.records();
    assert!(unbalanced(&recs).is_empty(), "{:?}", stages(&recs));
}

#[test]
fn g8_a_pending_call_dropped_after_every_gate_handle_still_gets_its_exit() {
    let _s = serial();
    let mem = MemorySink::new();
    let gate = gates::audited(Mode::PartialAuto, mem.clone());
    let mut fut = Box::pin(gate.scope(low_async()));
    assert!(poll_once(fut.as_mut()).is_pending());
    drop(gate);
    drop(fut);
    let recs = mem.records();
    assert!(unbalanced(&recs).is_empty(), "{:?}", stages(&recs));
}

#[test]
fn g8_body_panic_under_nested_gates_is_recorded_by_each() {
    let _s = serial();
    let (osink, omem) = hook_sink(|_| Ok(()));
    let (isink, imem) = hook_sink(|_| Ok(()));
    let outer = gates::audited(Mode::PartialAuto, osink);
    let inner = gates::audited(Mode::PartialAuto, isink);
    let _ = catch_unwind(AssertUnwindSafe(|| outer.run(|| inner.run(low_panic))));
    for recs in [omem.records(), imem.records()] {
        assert!(unbalanced(&recs).is_empty(), "{:?}", stages(&recs));
        assert!(recs.iter().any(|r| r.outcome == Some(Outcome::Panic)));
    }
}

#[test]
fn g8_a_tool_called_from_inside_a_sink_is_decided_and_balanced() {
    let _s = serial();
    let once = Arc::new(AtomicBool::new(false));
    let o = once.clone();
    let (sink, mem) = hook_sink(move |r| {
        if r.stage == Stage::Enter && r.tool == "rt.low" && !o.swap(true, SeqCst) {
            let _ = list_users();
        }
        Ok(())
    });
    let gate = gates::audited(Mode::PartialAuto, sink);
    let (tx, rx) = std::sync::mpsc::channel();
    let g = gate.clone();
    std::thread::spawn(move || tx.send(g.run(low).is_ok()).unwrap());
    let ok = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("deadlock: a tool called from a sink never returned");
    assert!(ok);
    assert!(
        unbalanced(&mem.records()).is_empty(),
        "{:?}",
        stages(&mem.records())
    );
}

#[test]
fn g8_approver_panic_and_classifier_panic_under_an_audited_outer_gate() {
    let _s = serial();
    let (osink, omem) = hook_sink(|_| Ok(()));
    let outer = gates::approved_audited(Mode::FullAuto, AllowAllApprover, osink);
    let inner = gates::approved(Mode::FullAuto, |_: &ApprovalRequest<'_>| -> Approval {
        panic!("approver panics")
    });
    let before = HIGH.load(SeqCst);
    let r = outer.run(|| inner.run(high));
    assert_eq!(r.unwrap_err().code().as_str(), "APPROVAL_REJECTED");
    assert_eq!(HIGH.load(SeqCst), before);
    let _ = catch_unwind(AssertUnwindSafe(|| outer.run(|| esc_low(99))));
    let o = omem.records();
    assert!(unbalanced(&o).is_empty(), "{:?}", stages(&o));
}

#[test]
fn g8_an_async_tool_with_a_gate_parameter_is_closed_when_cancelled() {
    let _s = serial();
    let mem = MemorySink::new();
    let gate = gates::audited(Mode::PartialAuto, mem.clone());
    {
        let mut fut = Box::pin(async_gate_param(&gate));
        assert!(poll_once(fut.as_mut()).is_pending());
    }
    let recs = mem.records();
    assert!(unbalanced(&recs).is_empty(), "{:?}", stages(&recs));
    assert!(recs.iter().any(|r| r.outcome == Some(Outcome::Cancelled)));
}

#[test]
fn g8_a_failing_call_by_name_is_closed_with_error() {
    let mem = MemorySink::new();
    let gate = gates::audited(Mode::PartialAuto, mem.clone());
    let r = toolgate::registry()
        .call(&gate, "rt.failing", serde_json::json!({}))
        .now()
        .unwrap();
    assert_eq!(r.unwrap_err().code(), "HANDLER_ERROR");
    let recs = mem.records();
    assert!(unbalanced(&recs).is_empty());
    assert!(
        recs.iter().any(|r| r.outcome == Some(Outcome::Error)),
        "{:?}",
        stages(&recs)
    );
}

#[test]
fn g8_a_sink_panicking_on_an_exit_record_leaves_the_other_gates_exit() {
    let _s = serial();
    for panicking_is_inner in [true, false] {
        let bad = |r: &AuditRecord| -> Result<(), AuditError> {
            if r.stage == Stage::Exit {
                panic!("sink panics on exit");
            }
            Ok(())
        };
        let (good_sink, good_mem) = hook_sink(|_| Ok(()));
        let (bad_sink, _bad_mem) = hook_sink(bad);
        let (osink, isink): (HookSink, HookSink) = if panicking_is_inner {
            (good_sink, bad_sink)
        } else {
            (bad_sink, good_sink)
        };
        let outer = gates::audited(Mode::PartialAuto, osink);
        let inner = gates::audited(Mode::PartialAuto, isink);
        let r = catch_unwind(AssertUnwindSafe(|| outer.run(|| inner.run(low))));
        let recs = good_mem.records();
        assert!(
            unbalanced(&recs).is_empty(),
            "panicking sink is {}: the other gate's log {:?} (call returned {r:?})",
            if panicking_is_inner { "inner" } else { "outer" },
            stages(&recs)
        );
    }
}

#[test]
fn g8_a_sink_panicking_on_an_inner_refusal_leaves_the_outer_enter_closed() {
    let _s = serial();
    let (osink, omem) = hook_sink(|_| Ok(()));
    let (isink, _imem) = hook_sink(|r| {
        if r.stage == Stage::Refused {
            panic!("inner sink panics on a refusal");
        }
        Ok(())
    });
    let outer = gates::audited(Mode::PartialAuto, osink);
    let inner = gates::audited(Mode::Shadow, isink);
    let before = LOW.load(SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| outer.run(|| inner.run(low))));
    assert_eq!(LOW.load(SeqCst), before);
    let o = omem.records();
    assert!(unbalanced(&o).is_empty(), "{r:?}: {:?}", stages(&o));
}
