//! Guarantee 4 (The mode is only ever lowered, and a lowering reaches every call not yet started),
//! against user code that runs between a decision and a body (sinks, approvers, an argument's
//! `Serialize`, `escalate`), in every declaration form.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, OnceLock};
use toolgate::audit::{MemorySink, Stage};
use toolgate::{AllowAllApprover, Approval, ApprovalRequest, Gate, Mode};

use crate::common::gates;
use crate::fixtures::user_code::*;

// ---------------------------------------------------------------------------------------------
// Guarantee 4: a lowering between the decision and the body refuses the call

/// One of two nested gates.
#[derive(Clone, Copy)]
enum Nested {
    Outer,
    Inner,
}

/// Runs `low` through an outer and an inner gate, each recording to a sink of its own; the sink of
/// `lowering` lowers the other gate to SHADOW while it writes the `enter` record. The body must not
/// run, and every `enter` has its `exit`, in both logs.
fn a_sink_lowering_the_other_gate(lowering: Nested) {
    let slot: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let (hooked, hooked_mem) = lowering_at_enter(&slot);
    let (plain, plain_mem) = hook_sink(|_| Ok(()));
    let ((osink, omem), (isink, imem)) = match lowering {
        Nested::Outer => ((hooked, hooked_mem), (plain, plain_mem)),
        Nested::Inner => ((plain, plain_mem), (hooked, hooked_mem)),
    };
    let outer = gates::audited(Mode::PartialAuto, osink);
    let inner = gates::audited(Mode::PartialAuto, isink);
    let (lowered, name) = match lowering {
        Nested::Outer => (&inner, "inner"),
        Nested::Inner => (&outer, "outer"),
    };
    slot.set(lowered.clone()).unwrap();
    let before = LOW.load(SeqCst);
    let r = outer.run(|| inner.run(low));
    let ran = LOW.load(SeqCst) - before;
    let (o, i) = (omem.records(), imem.records());
    assert_eq!(
        ran,
        0,
        "body ran after the {name} gate was lowered: {r:?}\nouter {:?}\ninner {:?}",
        stages(&o),
        stages(&i)
    );
    assert!(
        unbalanced(&o).is_empty() && unbalanced(&i).is_empty(),
        "{:?} {:?}",
        unbalanced(&o),
        unbalanced(&i)
    );
}

/// A sink, and its records, that lowers the gate `slot` holds to SHADOW while it writes an `enter`
/// record.
fn lowering_at_enter(slot: &Arc<OnceLock<Gate>>) -> (HookSink, MemorySink) {
    let slot = slot.clone();
    hook_sink(move |r| {
        if r.stage == Stage::Enter {
            slot.get().unwrap().lower(Mode::Shadow).unwrap();
        }
        Ok(())
    })
}

#[test]
fn g4_inner_sink_lowering_the_outer_gate_refuses_the_call() {
    let _s = serial();
    a_sink_lowering_the_other_gate(Nested::Inner);
}

#[test]
fn g4_outer_sink_lowering_the_inner_gate_refuses_the_call() {
    let _s = serial();
    a_sink_lowering_the_other_gate(Nested::Outer);
}

#[test]
fn g4_outer_approver_lowering_the_inner_gate_refuses_the_call() {
    let _s = serial();
    let inner_slot: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let slot = inner_slot.clone();
    let outer = gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
        slot.get().unwrap().lower(Mode::PartialAuto).unwrap();
        Approval::Approve
    });
    let inner = gates::approved(Mode::FullAuto, AllowAllApprover);
    inner_slot.set(inner.clone()).unwrap();
    let before = HIGH.load(SeqCst);
    let r = outer.run(|| inner.run(high));
    assert_eq!(HIGH.load(SeqCst), before, "{r:?}");
}

#[test]
fn g4_a_gate_parameters_sink_lowering_the_ambient_gate_refuses_the_call() {
    let _s = serial();
    let amb_slot: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let (psink, _pmem) = lowering_at_enter(&amb_slot);
    let ambient = Gate::new(Mode::PartialAuto).unwrap();
    amb_slot.set(ambient.clone()).unwrap();
    let param = gates::audited(Mode::PartialAuto, psink);
    let before = LOW_GATE.load(SeqCst);
    let r = ambient.run(|| low_gate_param(&param));
    assert_eq!(LOW_GATE.load(SeqCst), before, "{r:?}");
}

#[test]
fn g4_an_arguments_serialize_lowering_the_gate_runs_before_the_recheck() {
    let _s = serial();
    for (slot, approval) in [(1usize, false), (2, true)] {
        let (sink, mem) = hook_sink(|_| Ok(()));
        let builder = Gate::builder().audit(sink);
        let gate = if approval {
            builder
                .mode(Mode::FullAuto)
                .approver(AllowAllApprover)
                .build()
                .unwrap()
        } else {
            builder.mode(Mode::PartialAuto).build().unwrap()
        };
        let g = gate.clone();
        set_hook(slot, move || {
            let _ = g.lower(Mode::Shadow);
        });
        take_events();
        let r = if approval {
            gate.run(|| high_trig(Trig(slot, "x")))
        } else {
            gate.run(|| low_trig(Trig(slot, "x")))
        };
        clear_hook(slot);
        let ev = take_events();
        eprintln!("approval={approval}: {r:?} events {ev:?}");
        let body = ev.iter().position(|e| e.starts_with("body"));
        let ser_before_body = body.is_some_and(|b| ev[..b].iter().any(|e| e.starts_with("ser")));
        assert!(
            !ser_before_body,
            "approval={approval}: body ran after an argument's Serialize lowered the gate: {r:?} {ev:?} {:?}",
            stages(&mem.records())
        );
        assert!(unbalanced(&mem.records()).is_empty());
    }
}

#[test]
fn g4_an_arguments_serialize_lowering_the_gate_of_an_async_call() {
    let _s = serial();
    let (sink, mem) = hook_sink(|_| Ok(()));
    let gate = gates::audited(Mode::PartialAuto, sink);
    let g = gate.clone();
    set_hook(3, move || {
        let _ = g.lower(Mode::Shadow);
    });
    take_events();
    let r = block_on(gate.scope(async { low_trig(Trig(3, "x")) }));
    clear_hook(3);
    let ev = take_events();
    eprintln!("async: {r:?} events {ev:?}");
    let body = ev.iter().position(|e| e.starts_with("body"));
    assert!(
        !body.is_some_and(|b| ev[..b].iter().any(|e| e.starts_with("ser"))),
        "{r:?} {ev:?}"
    );
    assert!(unbalanced(&mem.records()).is_empty());
}

#[test]
fn g4_lower_from_another_thread_during_a_slow_inner_sink() {
    let _s = serial();
    let outer = Gate::new(Mode::PartialAuto).unwrap();
    let o2 = outer.clone();
    let (isink, _imem) = hook_sink(move |r| {
        if r.stage == Stage::Enter {
            let o3 = o2.clone();
            std::thread::spawn(move || o3.lower(Mode::Shadow).unwrap())
                .join()
                .unwrap();
        }
        Ok(())
    });
    let inner = gates::audited(Mode::PartialAuto, isink);
    let before = LOW.load(SeqCst);
    let r = outer.run(|| inner.run(low));
    assert_eq!(LOW.load(SeqCst), before, "{r:?}");
}

#[test]
fn g4_lower_never_raises() {
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    assert!(gate.lower(Mode::FullAuto).is_err());
    assert_eq!(gate.mode(), Mode::PartialAuto);
    gate.lower(Mode::Shadow).unwrap();
    assert!(gate.clone().lower(Mode::Advisory).is_err());
    assert_eq!(
        gate.run(low).unwrap_err().code().as_str(),
        "MODE_NOT_ALLOWED"
    );
}
