//! Guarantee 4 (The mode is only ever lowered, and a lowering reaches every call not yet started),
//! against two stateful features meeting in one process (grants, the latch, budgets and their
//! stores, approvers, nested gates, lowering, sinks), one changing while the other's decision
//! waits.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::Arc;

use serde_json::json;
use std::sync::atomic::Ordering::SeqCst;
use toolgate::approval::SessionGrant;
use toolgate::audit::{AuditRecord, Stage};
use toolgate::{Approval, ApprovalRequest, DenialCode, Gate, Mode};

use crate::common::gates;
use crate::common::serial;
use crate::fixtures::features_meeting::*;
use crate::g07_approvals::checks::{assert_denied, built};
use crate::g07_approvals::meeting::*;

/// grants (shortcut) × lowering, racing (4). Threads call a granted HIGH_WRITE tool (FULL_AUTO only);
/// the test lowers the gate to PARTIAL_AUTO. No call started after `lower` returned may run, grant or
/// not.
#[test]
fn p05_no_granted_call_started_after_lower_returns_runs() {
    let _serial = serial();
    let (gate, _, _) = granting();
    gate.run(|| wire(0)).unwrap();
    let call = |gate: &Gate, i| match i {
        2 => by_name(gate, "pairs.wire", json!({"cents": 1})).is_ok(),
        _ => gate.run(|| wire(1)).is_ok(),
    };
    let late = late_runs(&gate, call, None, || {
        gate.lower(Mode::PartialAuto).unwrap();
    });
    assert_eq!(late, 0, "granted calls ran after the lowering");
}

// ---------------------------------------------------------------------------------------------------------
// lowering × grants, lowering × budgets
// ---------------------------------------------------------------------------------------------------------

/// lowering (`Approval::Stop`) × grants × sink (4, 7). A granted call WAITS in its `enter` record; on
/// another thread the approver answers another call with `Stop`, which lowers the gate to SHADOW. The
/// granted call must be refused with the lowered mode's code, its `enter` closed `refused`.
#[test]
fn p18_a_stop_given_while_a_granted_call_writes_its_enter_refuses_it() {
    let _serial = serial();
    let (pause, sink) = held_at_enter("pairs.wire");
    let gate = built(Mode::FullAuto, |b| {
        b.approver(|request: &ApprovalRequest<'_>| {
            if request.tool.id == "pairs.shell" {
                Approval::Stop("runaway".into())
            } else {
                Approval::ApproveForSession(SessionGrant::tool(HOUR))
            }
        })
        .audit_shared(sink.clone())
    });
    gate.run(|| wire(1)).unwrap();
    let before = count(&WIRES);
    let caller = held_call(&pause, &gate, |gate| {
        gate.run(|| wire(2)).map_err(|d| d.code())
    });
    let stopped = gate.run(|| shell("sudo reboot".into())).unwrap_err();
    assert_eq!(stopped.code(), DenialCode::ApprovalRejected);
    assert_eq!(gate.mode(), Mode::Shadow);
    pause.go();
    let code = caller.join().unwrap().unwrap_err();
    assert_ne!(
        code,
        DenialCode::ApprovalRejected,
        "refused by the mode: {code:?}"
    );
    assert_one_wire_refused(&sink.records(), before);
}

/// lowering × two-step (4, 7). An operator approves a pending HIGH_WRITE call; the gate is lowered
/// before the agent retries. The approved call is refused at the lowered mode, by every path, and
/// stays refused: the approval does not outlive the mode it was given in.
#[test]
fn p40_an_approval_given_before_a_lowering_runs_nothing_after_it() {
    let _serial = serial();
    let gate = gates::two_step(Mode::FullAuto);
    let pending = gate.run(|| wire(9)).unwrap_err();
    gate.approve(pending.approval_token().unwrap()).unwrap();
    gate.lower(Mode::PartialAuto).unwrap();
    let before = count(&WIRES);
    assert_denied(gate.run(|| wire(9)), DenialCode::ModeNotAllowed);
    assert_eq!(
        by_name(&gate, "pairs.wire", json!({"cents": 9}))
            .unwrap_err()
            .code(),
        "MODE_NOT_ALLOWED"
    );
    assert_eq!(
        runtime()
            .block_on(gate.scope(wire_async(9)))
            .unwrap_err()
            .code(),
        DenialCode::ModeNotAllowed
    );
    assert_eq!(count(&WIRES), before);
}

/// async approver × grants × lowering (4, 14). An async approver WAITS, then answers "for the session";
/// the gate is lowered meanwhile. The call is refused at the lowered mode, and, never reaching its
/// commit point, makes no grant.
#[test]
fn p43_an_async_grant_for_a_call_refused_by_a_lowering_is_never_made() {
    let _serial = serial();
    let pause = Pause::armed();
    let gate = built(Mode::FullAuto, |b| {
        b.async_approver(HoldingAsync {
            pause: pause.clone(),
            answer: answer(for_session()),
            asked: Arc::default(),
        })
    });
    let rt = runtime();
    let before = count(&WIRES);
    let waiting = rt.spawn(gate.scope(wire_async(1)));
    assert!(pause.reached());
    gate.lower(Mode::PartialAuto).unwrap();
    pause.go();
    let refused = awaited(&rt, waiting).unwrap_err();
    assert_eq!(refused.code(), DenialCode::ModeNotAllowed);
    assert_eq!(count(&WIRES), before);
    assert!(gate.grants().is_empty(), "a grant for a refused call");
}

// ---------------------------------------------------------------------------------------------------------
// sinks × lowering, sinks × principals
// ---------------------------------------------------------------------------------------------------------

/// sink × lowering (4). A sink that fails every `mode_lowered` and `refused` record: the kill switch
/// (`lower_by`) and an approver's `Stop` still lower the gate, and no write runs after them.
#[test]
fn p50_a_sink_that_cannot_record_the_lowering_does_not_keep_the_kill_switch_from_working() {
    let _serial = serial();
    let sink = HookSink::new(&Pause::new(), |r: &AuditRecord| {
        matches!(r.stage, Stage::ModeLowered | Stage::Refused)
    });
    sink.fail.store(usize::MAX, SeqCst);
    let gate = built(Mode::FullAuto, |b| {
        b.approver(|request: &ApprovalRequest<'_>| {
            if request.tool.id == "pairs.shell" {
                Approval::Stop("runaway".into())
            } else {
                Approval::Approve
            }
        })
        .audit_shared(sink.clone())
    });
    let stopped = gate.run(|| shell("sudo reboot".into())).unwrap_err();
    assert_eq!(stopped.code(), DenialCode::ApprovalRejected);
    assert_eq!(gate.mode(), Mode::Shadow, "the stop lowered the gate");
    let before = (count(&WIRES), count(&POSTS));
    assert!(gate.run(|| wire(1)).is_err());
    assert!(gate.run(|| post("x".into())).is_err());
    assert_eq!((count(&WIRES), count(&POSTS)), before);

    let other = gates::audited_shared(Mode::PartialAuto, sink.clone());
    let _ = other.lower_by(Mode::Shadow, "on-call");
    assert_eq!(
        other.mode(),
        Mode::Shadow,
        "the kill switch lowered the gate"
    );
    assert!(other.run(|| post("x".into())).is_err());
    assert_eq!(count(&POSTS), before.1);
}
