//! Guarantee 7 (Approvals are single-use, bound and expiring), against two stateful features
//! meeting in one process (grants, the latch, budgets and their stores, approvers, nested gates,
//! lowering, sinks), one changing while the other's decision waits.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use toolgate::approval::SessionGrant;
use toolgate::approval::store::{
    Answer, ApprovalCall, ApprovalStore, ApproveError, Binding, Consumed, StoreError, StoreFuture,
};
use toolgate::approval::two_step::MemoryStore;
use toolgate::audit::{Decision, MemorySink, Stage};
use toolgate::gate::BudgetScope;
use toolgate::gate::budget::MemoryBudgets;
use toolgate::{Approval, ApprovalRequest, DenialCode, Mode};

use crate::common::gates;
use crate::common::serial;
use crate::fixtures::features_meeting::*;
use crate::g07_approvals::checks::{assert_denied, built};
use crate::g07_approvals::meeting::*;

/// grants × sink (7). A call allowed by a grant WAITS in its `enter` record; meanwhile the operator
/// revokes every grant. The commit point reads the grant again: the call runs only if an approver was
/// asked again (and here it rejects).
#[test]
fn p03_a_granted_call_waiting_on_its_enter_record_is_refused_once_its_grant_is_revoked() {
    let _serial = serial();
    let (pause, sink, gate, reply) = granted_held_at_wire();
    *reply.lock().unwrap() = Approval::Reject("revoked".into());
    let before = count(&WIRES);
    let caller = held_call(&pause, &gate, |gate| {
        gate.run(|| wire(2)).map_err(|d| d.code())
    });
    assert_eq!(gate.revoke_grants(None, "ops"), 1);
    pause.go();
    let result = caller.join().unwrap();
    assert!(result.is_err(), "a revoked grant let its call run");
    assert_eq!(count(&WIRES), before);
    assert_paired(&sink.records());
}

/// grants (shortcut) × revoke, racing (7). Threads call a granted tool as fast as they can (the grant's
/// shortcut, no sink); the test revokes the grant. The approver rejects every call after the first, so
/// a call started after `revoke_grants` returned that runs ran on the revoked grant.
#[test]
fn p04_no_call_started_after_revoke_grants_returns_runs_on_the_grant() {
    let _serial = serial();
    let (gate, _, reply) = granting();
    gate.run(|| wire(0)).unwrap();
    *reply.lock().unwrap() = Approval::Reject("no more".into());
    let late = late_runs(
        &gate,
        |gate, _| gate.run(|| wire(1)).is_ok(),
        Some(200),
        || {
            assert_eq!(gate.revoke_grants(Some("pairs.wire"), "ops"), 1);
        },
    );
    assert_eq!(late, 0, "calls ran on a revoked grant");
    assert!(gate.grants().is_empty());
}

/// sink × grants (7). A session grant "is recorded (`session_granted`)". A sink that cannot take the
/// `session_granted` record: either no grant is made (the next call asks again), or the log holds the
/// record; a grant the log never shows does not let a call run.
#[test]
fn p25_a_grant_whose_record_cannot_be_written_is_not_made_unrecorded() {
    let _serial = serial();
    let sink = failing_first(Stage::SessionGranted);
    let (gate, asked, _) = granting_with(|b| b.audit_shared(sink.clone()));
    let _ = gate.run(|| wire(1));
    let _ = gate.run(|| wire(2));
    let records = sink.records();
    let granted_runs = records
        .iter()
        .filter(|r| r.stage == Stage::Enter && r.decision == Some(Decision::Granted))
        .count();
    let recorded = records.iter().any(|r| r.stage == Stage::SessionGranted);
    assert!(
        granted_runs == 0 || recorded,
        "a call ran on a grant that the log never recorded (asked {} times, grants {:?})",
        asked.lock().unwrap().len(),
        gate.grants()
    );
}

/// grants × by name (7). A granted HIGH_WRITE tool is called by name; its argument's `Deserialize`
/// revokes the grant (as an operator on another thread would). The approver now rejects: the call,
/// decided after the revocation, must not run on the grant.
#[test]
fn p32_an_argument_that_revokes_the_grant_while_it_is_read_is_decided_without_it() {
    let _serial = serial();
    let (gate, _, reply) = granting();
    by_name(&gate, "pairs.publish_note", json!({"note": "first"})).unwrap();
    assert_eq!(gate.grants().len(), 1);
    *reply.lock().unwrap() = Approval::Reject("revoked".into());
    let before = count(&NOTES);
    let result = by_name_with_hook(
        &gate,
        "pairs.publish_note",
        json!({"note": "second"}),
        |gate| gate.revoke_grants(None, "ops"),
    );
    assert!(gate.grants().is_empty(), "the hook ran");
    assert!(
        result.is_err(),
        "a call by name ran on a grant revoked before its decision"
    );
    assert_eq!(count(&NOTES), before);
}

// ---------------------------------------------------------------------------------------------------------
// agent-written text shown to humans: invisible and bidi characters
// ---------------------------------------------------------------------------------------------------------

/// two-step store × look-alike arguments (7). Arguments that differ only by a zero-width space, a
/// bidi override or a look-alike letter are other calls: an approval of one never runs another, each
/// files a request with its own token, and the approver and store see different arguments and digests.
#[test]
fn p33_lookalike_arguments_never_share_an_approval() {
    let _serial = serial();
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    struct Seeing(Arc<MemoryStore>, Arc<Mutex<Vec<(String, String)>>>);
    impl ApprovalStore for Seeing {
        fn consume<'a>(
            &'a self,
            call: &'a ApprovalCall,
        ) -> StoreFuture<'a, Result<Consumed, StoreError>> {
            self.1.lock().unwrap().push((
                call.arguments.clone().unwrap_or_default(),
                call.binding.shown_digest.clone(),
            ));
            self.0.consume(call)
        }
        fn answer<'a>(
            &'a self,
            token: &'a str,
            answer: Answer,
        ) -> StoreFuture<'a, Result<Binding, ApproveError>> {
            self.0.answer(token, answer)
        }
    }
    let gate = built(Mode::PartialAuto, |b| {
        b.approval_store(Seeing(memory_store(), seen.clone()))
    });
    gate.run(|| fetch("https://evil".into())).unwrap();
    let genuine = "pay bob 10".to_owned();
    let variants = [
        "pay bob 10\u{200b}".to_owned(),
        "pay b\u{200d}ob 10".to_owned(),
        "pay \u{202e}01 bob\u{202c}".to_owned(),
        "pay bоb 10".to_owned(), // a Cyrillic о
        "pay bob 10\u{feff}".to_owned(),
    ];
    let pending = gate.run(|| post(genuine.clone())).unwrap_err();
    let token = pending.approval_token().unwrap().to_owned();
    gate.approve(&token).unwrap();
    let before = count(&POSTS);
    for variant in &variants {
        let denied = gate.run(|| post(variant.clone())).unwrap_err();
        assert_eq!(denied.code(), DenialCode::ApprovalPending, "{variant:?}");
        assert_ne!(denied.approval_token(), Some(token.as_str()));
    }
    assert_eq!(
        count(&POSTS),
        before,
        "a look-alike ran on the genuine call's approval"
    );
    gate.run(|| post(genuine.clone())).unwrap();
    let seen = seen.lock().unwrap().clone();
    let mut digests: Vec<_> = seen.iter().map(|(_, d)| d.clone()).collect();
    digests.sort();
    digests.dedup();
    assert_eq!(digests.len(), variants.len() + 1, "{seen:?}");
}

/// approver × look-alike arguments × grants (7). An exact-arguments grant for one call covers no call
/// whose arguments only look the same (an invisible character appended, a bidi override): the approver
/// (which now rejects) is asked about each, and none runs.
#[test]
fn p35_an_exact_grant_covers_no_lookalike_call() {
    let _serial = serial();
    let asked: Asked = Arc::default();
    let reply = answer(Approval::ApproveForSession(
        SessionGrant::tool(HOUR).exact_arguments(),
    ));
    let arguments: Arc<Mutex<Vec<String>>> = Arc::default();
    let gate = {
        let (reply, asked, arguments) = (reply.clone(), asked.clone(), arguments.clone());
        gates::approved(Mode::FullAuto, move |request: &ApprovalRequest<'_>| {
            asked
                .lock()
                .unwrap()
                .push((request.tool.id.to_owned(), false));
            arguments
                .lock()
                .unwrap()
                .push(request.arguments.unwrap_or_default().to_owned());
            reply.lock().unwrap().clone()
        })
    };
    gate.run(|| shell("sudo systemctl restart web".into()))
        .unwrap();
    *reply.lock().unwrap() = Approval::Reject("not what I approved".into());
    let before = count(&SHELLS);
    for lookalike in [
        "sudo systemctl restart web\u{200b}",
        "sudo systemctl restart w\u{202e}eb",
        "sudo systemctl restart web\u{00a0}",
    ] {
        let refused = gate.run(|| shell(lookalike.into())).unwrap_err();
        assert_eq!(
            refused.code(),
            DenialCode::ApprovalRejected,
            "{lookalike:?}"
        );
    }
    assert_eq!(count(&SHELLS), before);
    gate.run(|| shell("sudo systemctl restart web".into()))
        .unwrap();
    assert_eq!(count(&SHELLS), before + 1);
    let arguments = arguments.lock().unwrap().clone();
    let mut distinct = arguments.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        arguments.len(),
        "two requests looked alike: {arguments:?}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// grants × budgets, nested gates × budgets, lowering × two-step
// ---------------------------------------------------------------------------------------------------------

/// grants × budgets (7, 13). A granted, budgeted call WAITS in its budget store; the grant is revoked
/// meanwhile and the approver now rejects. The call is decided without the grant (rejected), and its
/// unit goes back: the budget of two still lets two approved calls run after it.
#[test]
fn p36_a_grant_revoked_while_its_call_waits_in_the_budget_store_covers_nothing() {
    let _serial = serial();
    let pause = Pause::new();
    let budgets = Arc::new(MemoryBudgets::new());
    let (gate, _, reply) = granting_with(|b| {
        b.budget(BudgetScope::tool("pairs.wire"), 2, HOUR)
            .budget_store_shared(HookBudgets::shared(&budgets, &pause))
    });
    gate.run(|| wire(1)).unwrap();
    *reply.lock().unwrap() = Approval::Reject("revoked".into());
    let before = count(&WIRES);
    let caller = held_call(&pause, &gate, |gate| {
        gate.run(|| wire(2)).map_err(|d| d.code())
    });
    gate.revoke_grants(None, "ops");
    pause.go();
    assert_eq!(
        caller.join().unwrap().unwrap_err(),
        DenialCode::ApprovalRejected
    );
    assert_eq!(count(&WIRES), before);
    *reply.lock().unwrap() = Approval::Approve;
    gate.run(|| wire(3))
        .expect("the rejected call gave its unit back");
    assert_denied(gate.run(|| wire(4)), DenialCode::BudgetExhausted);
}

/// grants × async sink × cancellation (7). The approver answers "for the session"; the async call's
/// `enter` commit never comes back and the caller drops the call. It never reached its commit point:
/// no grant is made, and the next call asks again.
#[test]
fn p56_a_grant_for_an_async_call_dropped_before_its_commit_is_never_made() {
    let _serial = serial();
    let sink = Arc::new(Hanging(MemorySink::new()));
    let (gate, _, _) = granting_with(|b| b.audit_shared(sink.clone()));
    let rt = runtime();
    let before = count(&WIRES);
    let waited = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(200), gate.scope(wire_async(1))).await
    });
    assert!(waited.is_err());
    assert_eq!(count(&WIRES), before);
    assert!(
        gate.grants().is_empty(),
        "a grant for a call that was dropped"
    );
    assert_paired(&sink.0.records());
}
