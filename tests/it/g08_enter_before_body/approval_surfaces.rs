//! Guarantee 8 (The audit `enter` record is written before the body runs), against async approvers,
//! session grants, rejections and stops with reasons, and custom approval stores.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fixtures::approval_surfaces::*;
use toolgate::approval::SessionGrant;
use toolgate::audit::{Decision, MemorySink, Outcome, Stage};
use toolgate::{Approval, DenialCode, Gate, Mode};

// Attacks: a call approved by an async approver, whose body is then cancelled mid-way. The `enter`
// record (with `by` and decision `approved`) must get an `exit` of outcome `cancelled`.
#[test]
fn atk2_an_approved_call_cancelled_in_its_body_is_closed_as_cancelled_and_names_the_approver() {
    let _serial = serial();
    let sink = MemorySink::new();
    let gate = approving_async_audited("quick-quinn", sink.clone());
    let before = HANG_BODY.load(SeqCst);
    let mut call = Box::pin(gate.scope(wire_hang("x".into())));
    assert!(poll_once(call.as_mut()).is_pending());
    assert_eq!(HANG_BODY.load(SeqCst) - before, 1, "the body started");
    drop(call);
    let records = sink.records();
    assert_paired(&records);
    let enters = of(&records, Stage::Enter);
    assert_eq!(enters.len(), 1);
    assert_eq!(enters[0].decision, Some(Decision::Approved));
    assert_eq!(enters[0].by.as_deref(), Some("quick-quinn"));
    let exits = of(&records, Stage::Exit);
    assert_eq!(exits[0].outcome, Some(Outcome::Cancelled));
}

// Attacks: `Stop` under nested gates: the inner gate's async approver stops, the outer gate has already
// approved. The inner gate lowers itself; the outer gate's records of the call are closed; nothing runs
// then or after through the inner gate.
#[test]
fn atk2_a_stop_in_an_inner_gate_closes_the_outer_gates_records() {
    let _serial = serial();
    let (outer_sink, inner_sink) = (MemorySink::new(), MemorySink::new());
    let outer = approving_async_audited("outer-olga", outer_sink.clone());
    let inner = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("inner-ivan", |_| {
            Box::pin(async {
                tokio::task::yield_now().await;
                Approval::Stop("\n".into())
            })
        }))
        .audit(inner_sink.clone())
        .build()
        .unwrap();
    let before = WIRE.load(SeqCst);
    let rt = runtime(1);
    let r = rt.block_on(outer.scope(inner.scope(wire("a".into(), 1))));
    assert_eq!(r.unwrap_err().code(), DenialCode::ApprovalRejected);
    assert_eq!(inner.mode(), Mode::Shadow);
    let r = rt.block_on(outer.scope(inner.scope(wire("b".into(), 2))));
    assert!(r.is_err());
    let r = rt.block_on(inner.scope(outer.scope(wire("c".into(), 3))));
    assert!(r.is_err());
    assert_eq!(WIRE.load(SeqCst), before);
    assert_paired(&outer_sink.records());
    assert_paired(&inner_sink.records());
    let lowered = of(&inner_sink.records(), Stage::ModeLowered);
    assert_eq!(lowered.len(), 1);
    assert!(lowered[0].by.as_deref().unwrap().contains("inner-ivan"));
}

// Attacks: who approved. An async approver's `name` must be the `by` of the `enter` of each call it
// approved or granted and of the `session_granted` record; `revoke_grants` and `lower_by` name theirs.
#[test]
fn atk2_the_log_says_who_approved_granted_revoked_and_lowered() {
    let _serial = serial();
    let sink = MemorySink::new();
    let answers = Arc::new(Mutex::new(
        vec![
            Approval::Approve,
            Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600))),
        ]
        .into_iter(),
    ));
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("bob", move |_| {
            let answer = answers
                .lock()
                .unwrap()
                .next()
                .unwrap_or(Approval::Reject("no".into()));
            Box::pin(async move { answer })
        }))
        .audit(sink.clone())
        .build()
        .unwrap();
    let rt = runtime(1);
    for i in 0..3 {
        rt.block_on(gate.scope(wire(format!("w{i}"), i))).unwrap();
    }
    assert_eq!(gate.revoke_grants(Some("atk2_a.wire"), "ops-olivia"), 1);
    gate.lower_by(Mode::PartialAuto, "oncall-otto").unwrap();
    let records = sink.records();
    assert_paired(&records);
    let enters: Vec<_> = of(&records, Stage::Enter)
        .into_iter()
        .map(|r| (r.decision, r.by))
        .collect();
    assert_eq!(
        enters,
        [
            (Some(Decision::Approved), Some("bob".to_owned())),
            (Some(Decision::Approved), Some("bob".to_owned())),
            (Some(Decision::Granted), Some("bob".to_owned())),
        ]
    );
    let granted = of(&records, Stage::SessionGranted);
    assert_eq!(granted.len(), 1);
    assert_eq!(granted[0].by.as_deref(), Some("bob"));
    assert_eq!(granted[0].tool, "atk2_a.wire");
    let revoked = of(&records, Stage::GrantRevoked);
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0].by.as_deref(), Some("ops-olivia"));
    let lowered = of(&records, Stage::ModeLowered);
    assert_eq!(lowered.len(), 1);
    assert_eq!(lowered[0].by.as_deref(), Some("oncall-otto"));
}

/// A FULL_AUTO gate whose async approver `name` approves every call, recording to `sink`.
fn approving_async_audited(name: &'static str, sink: MemorySink) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn(name, |_| Box::pin(async { Approval::Approve })))
        .audit(sink)
        .build()
        .unwrap()
}
