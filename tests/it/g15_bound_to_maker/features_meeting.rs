//! Guarantee 15 (What is stored is honoured for its maker alone), against two stateful features
//! meeting in one process (grants, the latch, budgets and their stores, approvers, nested gates,
//! lowering, sinks), one changing while the other's decision waits.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate::approval::SessionGrant;
use toolgate::approval::store::Answer;
use toolgate::audit::{AuditSink, JsonlSink};
use toolgate::{Approval, ApprovalRequest, DenialCode, Gate, Mode};

use crate::common::gates;
use crate::common::serial;
use crate::fixtures::features_meeting::*;
use crate::fixtures::support::approve_for_session;
use crate::g07_approvals::checks::{assert_denied, built};
use crate::g07_approvals::meeting::*;

// ---------------------------------------------------------------------------------------------------------
// grants × nested gates, the latch × nested gates
// ---------------------------------------------------------------------------------------------------------

/// grants × nested gates (5, 15). A grant made by gate A's approver covers A's calls; under A, an inner
/// gate B with no approver still needs its own approval, and a grant B's approver makes covers no call
/// under A alone.
#[test]
fn p14_a_grant_of_one_gate_approves_nothing_for_a_gate_nested_with_it() {
    let _serial = serial();
    let (a, asked_a, _) = granting();
    let bare = Gate::new(Mode::FullAuto).unwrap();
    a.run(|| wire(1)).unwrap();
    let before = count(&WIRES);
    let inner = a.run(|| bare.run(|| wire(2))).unwrap_err();
    assert_eq!(inner.code(), DenialCode::ApprovalRequired);
    let outer = bare.run(|| a.run(|| wire(3))).unwrap_err();
    assert_eq!(outer.code(), DenialCode::ApprovalRequired);
    assert_eq!(count(&WIRES), before);
    // B grants for itself; A's grant is then revoked: the nested call needs A's approver again.
    let asked_b: Asked = Arc::default();
    let b = gates::approved(
        Mode::FullAuto,
        holding_approver(&Pause::new(), &answer(for_session()), &asked_b),
    );
    b.run(|| wire(4)).unwrap();
    a.revoke_grants(None, "ops");
    let asked_before = asked_a.lock().unwrap().len();
    a.run(|| b.run(|| wire(5))).unwrap();
    assert_eq!(
        asked_a.lock().unwrap().len(),
        asked_before + 1,
        "B's grant answered for A"
    );
}

/// grants × `&Gate` parameter (5, 15). A grant made on gate G, passed to a tool as its `&Gate`, does not
/// approve the call for the ambient gate H: H's approver (which rejects) is asked, and the call does
/// not run. With G passed alone, the grant covers it.
#[test]
fn p15_a_grant_on_the_gate_parameter_does_not_approve_for_the_ambient_gate() {
    let _serial = serial();
    let asked_g: Asked = Arc::default();
    let asked_h: Asked = Arc::default();
    let g = gates::approved(
        Mode::FullAuto,
        holding_approver(&Pause::new(), &answer(for_session()), &asked_g),
    );
    let h = gates::approved(
        Mode::FullAuto,
        holding_approver(
            &Pause::new(),
            &answer(Approval::Reject("not mine".into())),
            &asked_h,
        ),
    );
    gated_wire(&g, 1).unwrap();
    assert_eq!(g.grants().len(), 1);
    let before = count(&WIRES);
    let refused = h.run(|| gated_wire(&g, 2)).unwrap_err();
    assert_eq!(refused.code(), DenialCode::ApprovalRejected);
    assert_eq!(count(&WIRES), before);
    assert_eq!(asked_h.lock().unwrap().len(), 1);
    gated_wire(&g.clone(), 3).unwrap();
    assert_eq!(
        asked_g.lock().unwrap().len(),
        1,
        "the grant covered G's own call"
    );
}

/// store × principals (15). Alice and Bob share a store. Bob files a request; Alice's gate is used to
/// answer it with a rejection that stops. The stop is Bob's answer: Bob's gate reads it and lowers
/// itself; Alice's gate is not lowered.
#[test]
fn p26_a_stop_answered_through_alices_gate_for_bobs_request_stops_only_bob() {
    let _serial = serial();
    let (_, alice, bob) = alice_and_bob();
    let pending = bob.run(|| wire(1)).unwrap_err();
    let token = pending.approval_token().unwrap().to_owned();
    alice
        .answer(
            &token,
            Answer::Reject {
                by: "ops".into(),
                reason: "no".into(),
                stop: true,
            },
        )
        .unwrap();
    assert_eq!(alice.mode(), Mode::FullAuto, "Bob's answer stopped Alice");
    let rejected = bob.run(|| wire(1)).unwrap_err();
    assert_eq!(rejected.code(), DenialCode::ApprovalRejected);
    assert_eq!(bob.mode(), Mode::Shadow);
    assert_eq!(alice.mode(), Mode::FullAuto);
}

/// store × principals × agents, racing (15). Alice's identical call is approved; Bob (another
/// principal) and Alice's other agent race for it from three threads, by every path. None of them runs
/// it: each gets a request of its own. Alice's call then runs once.
#[test]
fn p27_an_answer_for_one_principal_is_used_by_no_other_racing_for_it() {
    let _serial = serial();
    let (store, alice, bob) = alice_and_bob();
    let alice_bot = two_step_gate(&store, "alice", "bot");
    let pending = alice.run(|| wire(42)).unwrap_err();
    let token = pending.approval_token().unwrap().to_owned();
    alice.approve(&token).unwrap();
    let before = count(&WIRES);
    let racers: Vec<_> = [bob.clone(), alice_bot.clone(), bob.clone()]
        .into_iter()
        .enumerate()
        .map(|(i, gate)| {
            let token = token.clone();
            spawn(move || {
                for _ in 0..20 {
                    let result = if i == 2 {
                        by_name(&gate, "pairs.wire", json!({"cents": 42}))
                            .map(|_| ())
                            .map_err(|e| {
                                e.denied()
                                    .and_then(|d| d.approval_token().map(str::to_owned))
                            })
                    } else {
                        gate.run(|| wire(42))
                            .map(|_| ())
                            .map_err(|d| d.approval_token().map(str::to_owned))
                    };
                    match result {
                        Ok(()) => return false,
                        Err(own) => assert_ne!(own.as_deref(), Some(token.as_str())),
                    }
                }
                true
            })
        })
        .collect();
    for racer in racers {
        assert!(
            racer.join().unwrap(),
            "another principal or agent ran Alice's approved call"
        );
    }
    assert_eq!(count(&WIRES), before);
    assert_eq!(alice.run(|| wire(42)).unwrap(), 42);
}

/// store × grants × principals (15). An operator answers Alice's request "for the session". Bob's gate
/// shares the store and makes the same call: it does not use the answer, and gets no grant; Alice's
/// gate gets the grant and Bob's next calls still file their own requests.
#[test]
fn p28_an_operators_session_answer_grants_no_other_principals_gate() {
    let _serial = serial();
    let (_, alice, bob) = alice_and_bob();
    let pending = alice.run(|| wire(7)).unwrap_err();
    approve_for_session(&bob, pending.approval_token().unwrap(), "ops");
    let before = count(&WIRES);
    for _ in 0..3 {
        assert_denied(bob.run(|| wire(7)), DenialCode::ApprovalPending);
    }
    assert!(
        bob.grants().is_empty(),
        "Bob got a grant from Alice's answer"
    );
    alice.run(|| wire(7)).unwrap();
    assert_eq!(count(&WIRES), before + 1);
    assert!(bob.grants().is_empty());
    assert_denied(bob.run(|| wire(7)), DenialCode::ApprovalPending);
}

/// sink × principals, racing (15, 8). Alice's and Bob's gates share one JSONL log and run calls at
/// once, approved, granted and refused: every record names the principal of the gate that wrote it,
/// and the log verifies.
#[test]
fn p51_one_log_shared_by_two_principals_names_each_records_own() {
    let _serial = serial();
    let scratch = crate::common::Scratch::new("pairs-p51");
    let path = scratch.path("audit.jsonl");
    let sink: Arc<dyn AuditSink> = Arc::new(JsonlSink::open(&path).unwrap());
    let build = |principal: &str| {
        built(Mode::FullAuto, |b| {
            b.principal(principal)
                .agent("desk")
                .approver(|r: &ApprovalRequest<'_>| {
                    if r.arguments.is_some_and(|a| a.contains("13")) {
                        Approval::Reject("unlucky".into())
                    } else {
                        Approval::ApproveForSession(SessionGrant::tool(HOUR).exact_arguments())
                    }
                })
                .audit_shared(sink.clone())
        })
    };
    let (alice, bob) = (build("alice"), build("bob"));
    let owner = [(alice.id(), "alice"), (bob.id(), "bob")];
    let workers: Vec<_> = [alice.clone(), bob.clone()]
        .into_iter()
        .map(|gate| {
            spawn(move || {
                for n in 0..40u64 {
                    let _ = gate.run(|| wire(n % 15));
                    let _ = gate.run(|| read(n));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    drop((alice, bob, sink));
    let report = toolgate::audit::verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report:?}");
    for line in std::fs::read_to_string(&path).unwrap().lines() {
        let record: Value = serde_json::from_str(line).unwrap();
        let gate = record["gate"].as_u64().unwrap();
        let expected = owner.iter().find(|(id, _)| *id == gate).map(|(_, p)| *p);
        assert_eq!(
            record["principal"].as_str(),
            expected,
            "a record under another principal: {record}"
        );
    }
}

/// store × principals and agents named empty (15). Gates with no principal, an empty principal, no
/// agent and an empty agent share a store: none is another's maker, so an answer to one's call runs no
/// other's.
#[test]
fn p57_no_principal_and_an_empty_principal_are_two_makers() {
    let _serial = serial();
    let store = memory_store();
    let build = |principal: Option<&str>, agent: Option<&str>| {
        let mut builder = Gate::builder()
            .mode(Mode::FullAuto)
            .approval_store_shared(store.clone());
        if let Some(principal) = principal {
            builder = builder.principal(principal);
        }
        if let Some(agent) = agent {
            builder = builder.agent(agent);
        }
        builder.build().unwrap()
    };
    let makers = [
        (None, None),
        (Some(""), None),
        (None, Some("")),
        (Some(""), Some("")),
    ];
    for (i, &(principal, agent)) in makers.iter().enumerate() {
        let maker = build(principal, agent);
        let cents = 700 + i as u64;
        let pending = maker.run(|| wire(cents)).unwrap_err();
        let token = pending.approval_token().unwrap().to_owned();
        maker.approve(&token).unwrap();
        let before = count(&WIRES);
        for (j, &(p, a)) in makers.iter().enumerate() {
            if i == j {
                continue;
            }
            let other = build(p, a);
            let refused = other.run(|| wire(cents)).unwrap_err();
            assert_eq!(
                refused.code(),
                DenialCode::ApprovalPending,
                "{:?} used {:?}'s answer",
                (p, a),
                (principal, agent)
            );
            assert_ne!(refused.approval_token(), Some(token.as_str()));
        }
        assert_eq!(count(&WIRES), before);
        assert_eq!(maker.run(|| wire(cents)).unwrap(), cents);
    }
}

/// Names that read alike (SECURITY.md): an approval is bound to the bytes of its maker's principal
/// and agent, so a gate whose principal or agent is a look-alike of the corpus (`аlice` with a
/// Cyrillic `а`, `alice` with a zero-width joiner, ...) never runs the approved call of the name it
/// reads as: it is asked again, with a token of its own.
#[test]
fn p58_a_look_alike_principal_or_agent_never_runs_its_original_s_approval() {
    let _serial = serial();
    let alikes = crate::common::lookalikes::LOOK_ALIKES
        .iter()
        .find(|(name, _)| *name == "alice")
        .map(|(_, alikes)| *alikes)
        .unwrap_or_default();
    assert!(!alikes.is_empty());
    for (i, alike) in alikes.iter().enumerate() {
        let store = memory_store();
        let maker = two_step_gate(&store, "alice", "desk");
        let cents = 800 + i as u64;
        let pending = maker.run(|| wire(cents)).unwrap_err();
        let token = pending.approval_token().unwrap().to_owned();
        maker.approve(&token).unwrap();
        let before = count(&WIRES);
        for other in [
            two_step_gate(&store, alike, "desk"),
            two_step_gate(&store, "alice", "d\u{435}sk"),
            two_step_gate(&store, "alice", "desk\u{200b}"),
        ] {
            let refused = other.run(|| wire(cents)).unwrap_err();
            assert_eq!(refused.code(), DenialCode::ApprovalPending, "{alike:?}");
            assert_ne!(refused.approval_token(), Some(token.as_str()), "{alike:?}");
        }
        assert_eq!(count(&WIRES), before);
        assert_eq!(maker.run(|| wire(cents)).unwrap(), cents);
    }
}

/// A new store, and the two-step gates of Alice and of Bob (agent `desk`) that share it.
fn alice_and_bob() -> (Arc<toolgate::approval::two_step::MemoryStore>, Gate, Gate) {
    let store = memory_store();
    let alice = two_step_gate(&store, "alice", "desk");
    let bob = two_step_gate(&store, "bob", "desk");
    (store, alice, bob)
}
