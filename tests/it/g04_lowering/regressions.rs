//! Guarantee 4 (The mode is only ever lowered, and a lowering reaches every call not yet started),
//! against holes found by review, each reproduced as an outside attacker would write it.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::Ordering;
use toolgate::audit::MemorySink;
use toolgate::{AllowAllApprover, Approval, ApprovalRequest, Gate, Mode};

use crate::common::gates;
use crate::common::serial;
use crate::fixtures::regressions::*;

// Finding: a two-step approval is looked up after the call's arguments are written, and the mode read
// before that is not read again: a `lower` made meanwhile (here by the arguments' own `Serialize`) does
// not stop the approved call.
#[test]
fn the_kill_switch_pulled_while_an_approved_call_is_decided_refuses_it() {
    let _serial = serial();
    let gate = TRAP_GATE.get_or_init(|| gates::two_step(Mode::FullAuto));
    let before = count(&SPRUNG);
    let first = gate.run(|| spring(Trap(7))).unwrap_err();
    assert_eq!(first.code().as_str(), "APPROVAL_PENDING");
    gate.approve(first.approval_token().unwrap()).unwrap();

    TRAP_ARMED.store(true, Ordering::SeqCst);
    let result = gate.run(|| spring(Trap(7)));
    TRAP_ARMED.store(false, Ordering::SeqCst);
    assert_eq!(gate.mode(), Mode::Shadow, "the trap lowered the gate");
    assert_eq!(count(&SPRUNG), before, "the body must not run once lowered");
    assert_refused_by_the_mode(result);
}

// Finding: nested gates decide one after the other, outer first; once the outer gate has approved, a
// `lower` of it made while the inner gate's approver thinks is not seen, and the call runs in a mode the
// outer gate no longer allows.
#[test]
fn an_outer_gate_lowered_while_an_inner_approver_thinks_refuses_the_call() {
    let _serial = serial();
    let build = |lower_outer: Option<Gate>| {
        gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
            if let Some(outer) = &lower_outer {
                outer.lower(Mode::Shadow).unwrap();
            }
            Approval::Approve
        })
    };
    let outer = || gates::approved(Mode::FullAuto, AllowAllApprover);

    // Without the lowering, the same nesting runs the call.
    let (calm_outer, calm_inner) = {
        let outer = outer();
        let inner = build(None);
        (outer, inner)
    };
    let before = count(&WIPES);
    assert_eq!(calm_outer.run(|| calm_inner.run(|| wipe(1))).unwrap(), 1);
    assert_eq!(count(&WIPES), before + 1);

    let outer = outer();
    let inner = build(Some(outer.clone()));
    let before = count(&WIPES);
    let result = outer.run(|| inner.run(|| wipe(2)));
    assert_eq!(outer.mode(), Mode::Shadow, "the inner approver lowered it");
    assert_eq!(count(&WIPES), before, "the body must not run once lowered");
    assert_refused_by_the_mode(result);
}

// Finding: the mode is read before the `enter` record is written and not again after it; a `lower` made
// while the sink writes (here by the sink itself) does not stop the call.
#[test]
fn the_kill_switch_pulled_while_the_enter_record_is_written_refuses_the_call() {
    let _serial = serial();
    let gate = SINK_GATE.get_or_init(|| gates::audited(Mode::PartialAuto, LowerOnEnter));
    let before = count(&STAMPS);
    let result = gate.run(|| stamp(4));
    assert_eq!(gate.mode(), Mode::Shadow, "the sink lowered the gate");
    assert_eq!(count(&STAMPS), before, "the body must not run once lowered");
    assert_refused_by_the_mode(result);
    let records = SINK_RECORDS.lock().unwrap().clone();
    for exit in exits_of_every_enter(&records, "regress.stamp") {
        assert_eq!(exit["outcome"], "refused", "{exit}");
    }
}

// The `escalate` function runs before the decision: a gate it lowers decides at the lowered mode.
#[test]
fn an_escalation_that_lowers_the_gate_is_decided_at_the_lowered_mode() {
    let _serial = serial();
    let gate = ESCALATING_GATE
        .get_or_init(|| Gate::new(Mode::PartialAuto).unwrap())
        .clone();
    let runs = count(&ESCALATED_RUNS);
    assert_refused_by_the_mode(gate.run(|| escalated_run("ls".into())));
    assert_eq!(gate.mode(), Mode::Shadow);
    assert_eq!(count(&ESCALATED_RUNS), runs);
}

// Finding 3, async form: an async tool whose approver lowers the gate does not run, and its audited
// `enter` is closed.
#[test]
fn an_async_tool_approved_while_its_gate_is_lowered_does_not_run() {
    let _serial = serial();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let sink = MemorySink::new();
    let gate = self_lowering_gate(Some(sink.clone()));
    let runs = count(&ASYNC_RUNS);
    let result = runtime.block_on(gate.scope(delete_volume(9)));
    assert_refused_by_the_mode(result);
    assert_eq!(count(&ASYNC_RUNS), runs);
    let exits = exits_of_every_enter(&sink.records(), "regress.delete_volume");
    assert_eq!(
        exits.len(),
        1,
        "the approved call's enter was written, then closed"
    );
    assert_eq!(exits[0]["outcome"], "refused");
    assert!(
        matches!(
            exits[0]["code"].as_str(),
            Some("MODE_NOT_ALLOWED" | "ABOVE_CEILING")
        ),
        "{}",
        exits[0]
    );
}
