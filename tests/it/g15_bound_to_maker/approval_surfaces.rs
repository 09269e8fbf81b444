//! Guarantee 15 (What is stored is honoured for its maker alone), against async approvers, session
//! grants, rejections and stops with reasons, and custom approval stores.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;
use toolgate::approval::SessionGrant;
use toolgate::approval::store::{ApprovalStore, ApproveError};
use toolgate::approval::two_step::MemoryStore;
use toolgate::{Approval, DenialCode, Mode};

use crate::common::gates;
use crate::fixtures::approval_surfaces::*;
use crate::fixtures::support::approve_for_session;
use crate::g07_approvals::checks::built;

// Attacks: nested gates and grants. A grant lives in the gate that made it: with an outer gate holding
// a grant for the tool, an inner gate (or a `&Gate` argument) must still ask its own approver, in every
// nesting order, sync and async.
#[test]
fn atk2_a_grant_in_one_gate_never_skips_another_gates_approval() {
    let _serial = serial();
    let (asked1, approver1) = scripted(vec![Approval::ApproveForSession(SessionGrant::tool(
        Duration::from_secs(600),
    ))]);
    let (asked2, approver2) = scripted(vec![]);
    let granting = gates::approved(Mode::FullAuto, approver1);
    let strict = gates::approved(Mode::FullAuto, approver2);
    let before = SYNC_WIRE.load(SeqCst);
    granting.run(|| sync_wire("a".into(), 1)).unwrap();
    assert_eq!(granting.grants().len(), 1);
    // granting outside, strict inside
    let r = granting.run(|| strict.run(|| sync_wire("b".into(), 2)));
    assert_eq!(r.unwrap_err().code(), DenialCode::ApprovalRejected);
    // strict outside, granting inside
    let r = strict.run(|| granting.run(|| sync_wire("c".into(), 3)));
    assert_eq!(r.unwrap_err().code(), DenialCode::ApprovalRejected);
    assert_eq!(asked2.load(SeqCst), 2);
    assert_eq!(SYNC_WIRE.load(SeqCst) - before, 1);
    // the strict gate passed as an argument, under the granting one
    let before_gated = GATED_WIRE.load(SeqCst);
    let (asked3, approver3) = scripted(vec![Approval::ApproveForSession(SessionGrant::tool(
        Duration::from_secs(600),
    ))]);
    let granting_gated = gates::approved(Mode::FullAuto, approver3);
    granting_gated
        .run(|| gated_wire(&granting_gated, "x".into()))
        .unwrap();
    assert_eq!(asked3.load(SeqCst), 1);
    let r = granting_gated.run(|| gated_wire(&strict, "y".into()));
    assert_eq!(r.unwrap_err().code(), DenialCode::ApprovalRejected);
    assert_eq!(asked2.load(SeqCst), 3);
    assert_eq!(GATED_WIRE.load(SeqCst) - before_gated, 1);
    // the granting gate alone still runs on its grant
    granting.run(|| sync_wire("d".into(), 4)).unwrap();
    assert_eq!(asked1.load(SeqCst), 1);

    // async: an outer async approver that grants, an inner async approver that rejects
    let outer_asked = Arc::new(AtomicUsize::new(0));
    let inner_asked = Arc::new(AtomicUsize::new(0));
    let (oa, ia) = (outer_asked.clone(), inner_asked.clone());
    let outer = built(Mode::FullAuto, |b| {
        b.async_approver(async_fn("outer", move |_| {
            oa.fetch_add(1, SeqCst);
            Box::pin(async {
                Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600)))
            })
        }))
    });
    let inner = built(Mode::FullAuto, |b| {
        b.async_approver(async_fn("inner", move |_| {
            ia.fetch_add(1, SeqCst);
            Box::pin(async { Approval::Reject("inner says no".into()) })
        }))
    });
    let before = WIRE.load(SeqCst);
    let rt = runtime(1);
    assert_eq!(rt.block_on(outer.scope(wire("a".into(), 1))).unwrap(), 1);
    for _ in 0..2 {
        let r = rt.block_on(outer.scope(inner.scope(wire("b".into(), 2))));
        assert_eq!(r.unwrap_err().code(), DenialCode::ApprovalRejected);
        let r = rt.block_on(inner.scope(outer.scope(wire("c".into(), 3))));
        assert_eq!(r.unwrap_err().code(), DenialCode::ApprovalRejected);
    }
    assert_eq!(inner_asked.load(SeqCst), 4);
    assert_eq!(outer_asked.load(SeqCst), 1);
    assert_eq!(WIRE.load(SeqCst) - before, 1);
    assert!(inner.grants().is_empty());
}

// Attacks: gates sharing one approval store. An operator's `for_session` answer grants the call in the
// gate that uses it; another gate sharing the same store must not run on that grant.
#[test]
fn atk2_an_operator_grant_is_not_shared_by_another_gate_on_the_same_store() {
    let _serial = serial();
    let store: Arc<dyn ApprovalStore> =
        Arc::new(MemoryStore::new(Duration::from_secs(600)).unwrap());
    let first = built(Mode::FullAuto, |b| b.approval_store_shared(store.clone()));
    let second = built(Mode::FullAuto, |b| b.approval_store_shared(store.clone()));
    let before = SYNC_WIRE.load(SeqCst);
    let asked = first.run(|| sync_wire("a".into(), 1)).unwrap_err();
    let token = asked.approval_token().unwrap().to_owned();
    approve_for_session(&second, &token, "carol");
    first.run(|| sync_wire("a".into(), 1)).unwrap();
    first.run(|| sync_wire("a".into(), 1)).unwrap();
    assert_eq!(SYNC_WIRE.load(SeqCst) - before, 2);
    assert_eq!(first.grants().len(), 1);
    assert_eq!(first.grants()[0].by, "carol");
    let other = second.run(|| sync_wire("a".into(), 1));
    assert_eq!(
        SYNC_WIRE.load(SeqCst) - before,
        2,
        "the first gate's grant ran a call of the second"
    );
    let other = other.unwrap_err();
    assert!(APPROVAL_CODES.contains(&other.code()), "{other}");
    assert!(second.grants().is_empty());
    // A used answer is not used again.
    assert!(matches!(
        second.approve(&token).unwrap_err(),
        ApproveError::AlreadyApproved | ApproveError::AlreadyUsed
    ));
}
