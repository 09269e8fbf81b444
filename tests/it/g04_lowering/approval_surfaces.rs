//! Guarantee 4 (The mode is only ever lowered, and a lowering reaches every call not yet started),
//! against async approvers, session grants, rejections and stops with reasons, and custom approval
//! stores.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;
use toolgate::approval::store::{Answer, Consumed};
use toolgate::audit::{MemorySink, Stage};
use toolgate::{Approval, DenialCode, Gate, Mode, Risk};

use crate::common::gates;
use crate::fixtures::approval_surfaces::*;
use crate::fixtures::support::grant_for;
use crate::g07_approvals::checks::{assert_denied, built};

// Attacks: the gate lowered from outside while a call's future is parked in its async approver, and a
// future created at FULL_AUTO but first polled after the gate was lowered. Neither may run at the old
// mode, even with `Approve` or `ApproveForSession` arriving after the lowering.
#[test]
fn atk2_a_future_parked_in_its_approver_or_first_polled_after_lower_never_runs_at_the_old_mode() {
    let _serial = serial();
    for answer in [Approval::Approve, grant_for(Duration::from_secs(600))] {
        let sink = MemorySink::new();
        let (slot, asked, approver) = answered_by_channel("parked");
        let gate = built(Mode::FullAuto, |b| {
            b.async_approver(approver).audit(sink.clone())
        });
        let before = WIRE.load(SeqCst);
        let (tx, rx) = tokio::sync::oneshot::channel();
        *slot.lock().unwrap() = Some(rx);
        let mut call = Box::pin(gate.scope(wire("parked".into(), 1)));
        assert!(poll_once(call.as_mut()).is_pending());
        assert_eq!(asked.load(SeqCst), 1);
        gate.lower(Mode::PartialAuto).unwrap();
        tx.send(answer.clone()).unwrap();
        let Poll::Ready(result) = poll_once(call.as_mut()) else {
            panic!("the answer was sent: the call is decided")
        };
        assert_eq!(result.unwrap_err().code(), DenialCode::ModeNotAllowed);
        assert_eq!(WIRE.load(SeqCst), before, "ran at the old mode after lower");
        assert_paired(&sink.records());
        // Whatever was granted, nothing of the tool runs now.
        assert_eq!(
            current_thread()
                .block_on(gate.scope(wire("after".into(), 2)))
                .unwrap_err()
                .code(),
            DenialCode::ModeNotAllowed
        );
    }

    // Created at FULL_AUTO, first polled after lower: decided at its first poll, at the lowered mode.
    let (slot, asked, approver) = answered_by_channel("late");
    let gate = built(Mode::FullAuto, |b| b.async_approver(approver));
    let (tx, rx) = tokio::sync::oneshot::channel();
    *slot.lock().unwrap() = Some(rx);
    tx.send(Approval::Approve).unwrap();
    let before = WIRE.load(SeqCst);
    let mut call = Box::pin(gate.scope(wire("late".into(), 1)));
    gate.lower(Mode::Advisory).unwrap();
    let Poll::Ready(result) = poll_once(call.as_mut()) else {
        panic!("a refusal at the first poll is ready at once")
    };
    assert_eq!(result.unwrap_err().code(), DenialCode::ModeNotAllowed);
    assert_eq!(asked.load(SeqCst), 0, "a call the mode refuses asks nobody");
    assert_eq!(WIRE.load(SeqCst), before);
}

// Attacks: a grant against the mode and the ceiling. A grant is an approval, never a mode: once the gate
// is lowered, the granted tool is refused by its allowed modes, and an escalated call by the ceiling. The
// grant covers the effective (escalated) risk it was approved at.
#[test]
fn atk2_a_grant_lifts_neither_a_lowered_mode_nor_the_ceiling() {
    let _serial = serial();
    let (asked, approver) = scripted(vec![grant_for(Duration::from_secs(600)); 2]);
    let gate = gates::approved(Mode::FullAuto, approver);
    let (wires, shells) = (SYNC_WIRE.load(SeqCst), SHELL.load(SeqCst));
    gate.run(|| sync_wire("a".into(), 1)).unwrap();
    gate.run(|| shell("sudo systemctl stop web".into()))
        .unwrap();
    assert_eq!(asked.load(SeqCst), 2);
    let grants = gate.grants();
    let shell_grant = grants.iter().find(|g| g.tool == "atk2_a.shell").unwrap();
    assert_eq!(
        shell_grant.risk,
        Risk::HighWrite,
        "the grant is at the effective risk"
    );
    gate.lower(Mode::PartialAuto).unwrap();
    assert_denied(
        gate.run(|| sync_wire("b".into(), 2)),
        DenialCode::ModeNotAllowed,
    );
    assert_eq!(
        gate.run(|| shell("sudo rm -rf /".into()))
            .unwrap_err()
            .code(),
        DenialCode::AboveCeiling
    );
    gate.run(|| shell("ls".into())).unwrap();
    assert_eq!(SYNC_WIRE.load(SeqCst) - wires, 1);
    assert_eq!(SHELL.load(SeqCst) - shells, 2);
}

// Attacks: a `Stop` from an async approver while other calls of the same gate are parked in the
// approver; those then get `Approve`. The stop lowers the gate before the refusal is returned, so every
// parked call must be refused, nothing must run, and the records stay paired and say who stopped.
#[test]
fn atk2_a_stop_refuses_every_call_still_waiting_for_its_approval() {
    let _serial = serial();
    let sink = MemorySink::new();
    let (release, released) = tokio::sync::watch::channel(false);
    let asked = Arc::new(AtomicUsize::new(0));
    let a = asked.clone();
    let gate = built(Mode::FullAuto, |b| {
        b.async_approver(async_fn("sre-sam", move |req| {
            a.fetch_add(1, SeqCst);
            if req.args.contains("stopper") {
                return Box::pin(async { Approval::Stop(String::new()) });
            }
            let mut released = released.clone();
            Box::pin(async move {
                let _ = released.wait_for(|go| *go).await;
                Approval::Approve
            })
        }))
        .audit(sink.clone())
    });
    let before = WIRE.load(SeqCst);
    let rt = runtime(2);
    let results = rt.block_on(async {
        let parked: Vec<_> = (0..8)
            .map(|i| tokio::spawn(gate.scope(wire(format!("w{i}"), i))))
            .collect();
        while asked.load(SeqCst) < 8 {
            tokio::task::yield_now().await;
        }
        let stopped = gate.scope(wire("stopper".into(), 99)).await.unwrap_err();
        assert_eq!(stopped.code(), DenialCode::ApprovalRejected);
        assert_eq!(
            gate.mode(),
            Mode::Shadow,
            "lowered before the refusal returned"
        );
        release.send(true).unwrap();
        let mut results = Vec::new();
        for call in parked {
            results.push(call.await.unwrap().map_err(|d| d.code()));
        }
        results
    });
    assert!(
        results.iter().all(|r| r.is_err()),
        "calls approved after the stop ran: {results:?}"
    );
    assert_eq!(WIRE.load(SeqCst), before);
    let records = sink.records();
    assert_paired(&records);
    let lowered = of(&records, Stage::ModeLowered);
    assert_eq!(lowered.len(), 1);
    assert!(
        lowered[0].by.as_deref().unwrap_or("").contains("sre-sam"),
        "{lowered:?}"
    );
}

// Attacks: a store whose `consume` lowers the gate, then answers `Answered(Approve)`. The re-check before
// the body must refuse the call at the lowered mode, sync and async.
#[test]
fn atk2_a_store_that_lowers_the_gate_then_approves_is_refused_by_the_recheck() {
    let _serial = serial();
    for asynchronous in [false, true] {
        let cell: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
        let g = cell.clone();
        let store = scripted_store(move |_, _| {
            let g = g.clone();
            Box::pin(async move {
                g.get().unwrap().lower(Mode::PartialAuto).unwrap();
                Ok(Consumed::Answered(Answer::Approve {
                    by: "mallory".into(),
                    for_session: false,
                    confirmation: None,
                }))
            })
        });
        let sink = MemorySink::new();
        let gate = built(Mode::FullAuto, |b| {
            b.approval_store_shared(store.clone()).audit(sink.clone())
        });
        cell.set(gate.clone()).unwrap();
        let before = (SYNC_WIRE.load(SeqCst), WIRE.load(SeqCst));
        let denied = if asynchronous {
            runtime(1)
                .block_on(gate.scope(wire("a".into(), 1)))
                .map(|_| ())
                .unwrap_err()
        } else {
            gate.run(|| sync_wire("a".into(), 1))
                .map(|_| ())
                .unwrap_err()
        };
        assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
        assert_eq!((SYNC_WIRE.load(SeqCst), WIRE.load(SeqCst)), before);
        assert_paired(&sink.records());
    }
}
