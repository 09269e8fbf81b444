//! Guarantee 14 (After untrusted input, no write runs unasked), against two stateful features
//! meeting in one process (grants, the latch, budgets and their stores, approvers, nested gates,
//! lowering, sinks), one changing while the other's decision waits.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::approval::SessionGrant;
use toolgate::audit::{AuditRecord, JsonlSink, Stage};
use toolgate::gate::BudgetScope;
use toolgate::gate::budget::MemoryBudgets;
use toolgate::policy::TaintPolicy;
use toolgate::{Approval, ApprovalRequest, DenialCode, Gate, Mode, registry};

use crate::common::gates;
use crate::common::serial;
use crate::fixtures::features_meeting::*;
use crate::fixtures::support::approve_for_session;
use crate::g07_approvals::checks::{assert_denied, built};
use crate::g07_approvals::meeting::*;

// ---------------------------------------------------------------------------------------------------------
// grants × the taint latch
// ---------------------------------------------------------------------------------------------------------

/// grants × latch (14). A clean session's approver is asked about a HIGH_WRITE call and WAITS (on a
/// channel); meanwhile another thread reads untrusted input through a clone, by name. The approver then
/// answers "for the session". The approval was asked in the clean session: the call must not run, and
/// no grant may be made, on the direct path and by name.
#[test]
fn p01_a_grant_answered_while_the_latch_closes_on_another_thread_is_never_made() {
    let _serial = serial();
    for path in ["direct", "by name"] {
        let pause = Pause::armed();
        let asked: Asked = Arc::default();
        let gate = gates::approved(
            Mode::FullAuto,
            holding_approver(&pause, &answer(for_session()), &asked),
        );
        let before = count(&WIRES);
        let caller = {
            let gate = gate.clone();
            spawn(move || match path {
                "direct" => gate
                    .run(|| wire(1))
                    .map(|_| ())
                    .map_err(|d| d.code().to_string()),
                _ => by_name(&gate, "pairs.wire", json!({"cents": 1}))
                    .map(|_| ())
                    .map_err(|e| e.code().to_string()),
            })
        };
        assert!(pause.reached(), "the approver was asked");
        let clone = gate.clone();
        by_name(&clone, "pairs.fetch", json!({"url": "https://evil"})).unwrap();
        assert!(gate.taint().is_some());
        pause.go();
        let result = caller.join().unwrap();
        assert!(
            result.is_err(),
            "{path}: a clean approval ran a tainted write"
        );
        assert_eq!(count(&WIRES), before, "{path}");
        assert!(
            gate.grants().is_empty(),
            "{path}: a grant in a tainted session"
        );
    }
}

/// grants × latch × sink (14). A call allowed by a live session grant WAITS in its `enter` record (a
/// slow sink); meanwhile the latch closes on another thread, which revokes the grant. The latch and the
/// grant are read again at the commit point: the waiting call must be refused, its `enter` closed with
/// an `exit` of outcome `refused`.
#[test]
fn p02_a_granted_call_waiting_on_its_enter_record_is_refused_once_the_latch_closes() {
    let _serial = serial();
    let (pause, sink, gate, _) = granted_held_at_wire();
    assert_eq!(gate.grants().len(), 1);
    let before = count(&WIRES);
    let caller = held_call(&pause, &gate, |gate| {
        gate.run(|| wire(2)).map_err(|d| d.code())
    });
    gate.run(|| fetch("https://evil".into())).unwrap();
    assert!(
        gate.grants().is_empty(),
        "closing the latch revokes the grant"
    );
    pause.go();
    let result = caller.join().unwrap();
    assert!(
        result.is_err(),
        "a grant of the clean session ran a tainted write"
    );
    assert_one_wire_refused(&sink.records(), before);
}

/// grants (shortcut of an escalated tool) × latch, racing (14). `shell("sudo ..")` is granted at
/// HIGH_WRITE; threads call `shell("ls")` (LOW_WRITE) and `post` as fast as they can, both allowed
/// outright while the session is clean. The test closes the latch. A write started after the untrusted
/// call returned must ask the approver (who now rejects): none may run.
#[test]
fn p06_no_write_started_after_the_latch_closed_runs_unasked_on_any_thread() {
    let _serial = serial();
    let (gate, _, reply) = granting();
    gate.run(|| shell("sudo true".into())).unwrap();
    assert_eq!(gate.grants().len(), 1);
    *reply.lock().unwrap() = Approval::Reject("tainted".into());
    let call = |gate: &Gate, i| match i {
        0 => gate.run(|| shell("ls".into())).is_ok(),
        1 => gate.run(|| post("hi".into())).is_ok(),
        _ => gate.run(|| shell("sudo ls".into())).is_ok(),
    };
    let late = late_runs(&gate, call, None, || {
        gate.run(|| fetch("https://evil".into())).unwrap();
    });
    assert_eq!(late, 0, "writes ran unasked after the latch closed");
    assert!(gate.grants().is_empty());
}

// ---------------------------------------------------------------------------------------------------------
// the taint latch × budgets
// ---------------------------------------------------------------------------------------------------------

/// latch × budgets (14). A LOW_WRITE call, allowed outright in a clean PARTIAL_AUTO session, WAITS in
/// a slow budget store; meanwhile the latch closes. The gate's approver approves whatever it is asked:
/// the call may run only if the approver was asked about it in the tainted session (seeing the taint),
/// never on the clean session's outright verdict. Direct and async.
#[test]
fn p07_a_write_waiting_in_its_budget_store_when_the_latch_closes_is_asked_or_refused() {
    let _serial = serial();
    for path in ["direct", "async"] {
        let pause = Pause::new();
        let asked: Asked = Arc::default();
        let budgets = Arc::new(MemoryBudgets::new());
        let gate = built(Mode::PartialAuto, |b| {
            b.approver(holding_approver(
                &Pause::new(),
                &answer(Approval::Approve),
                &asked,
            ))
            .budget(BudgetScope::tool("pairs.post*"), 100, HOUR)
            .budget_store_shared(HookBudgets::shared(&budgets, &pause))
        });
        let before = count(&POSTS);
        pause.arm();
        let caller = {
            let gate = gate.clone();
            spawn(move || match path {
                "direct" => gate.run(|| post("x".into())).is_ok(),
                _ => runtime()
                    .block_on(gate.scope(post_async("x".into())))
                    .is_ok(),
            })
        };
        assert!(pause.reached(), "the write waits in its budget store");
        gate.run(|| fetch("https://evil".into())).unwrap();
        pause.go();
        let ran = caller.join().unwrap();
        let asked = asked_of(&asked);
        if ran {
            assert_eq!(count(&POSTS), before + 1);
            assert!(
                asked
                    .iter()
                    .any(|(tool, tainted)| tool.starts_with("pairs.post") && *tainted),
                "{path}: a write ran in a tainted session without an approval: {asked:?}"
            );
        } else {
            assert_eq!(count(&POSTS), before);
        }
    }
}

/// latch × nested gates (14). Under an outer gate O whose approver WAITS, an inner gate I's latch
/// closes (an untrusted call through I alone, on another thread). The call under both may run only if
/// I's approver was asked in I's tainted session; an approval I gave in its clean session does not
/// count.
#[test]
fn p16_an_inner_latch_closing_while_the_outer_approver_waits_is_read_again() {
    let _serial = serial();
    let pause = Pause::armed();
    let asked_o: Asked = Arc::default();
    let asked_i: Asked = Arc::default();
    let outer = gates::approved(
        Mode::FullAuto,
        holding_approver(&pause, &answer(Approval::Approve), &asked_o),
    );
    let inner = gates::approved(
        Mode::FullAuto,
        holding_approver(&Pause::new(), &answer(Approval::Approve), &asked_i),
    );
    let before = count(&WIRES);
    let caller = {
        let (outer, inner) = (outer.clone(), inner.clone());
        spawn(move || outer.run(|| inner.run(|| wire(1))).is_ok())
    };
    assert!(pause.reached(), "the outer approver is asked");
    let i2 = inner.clone();
    spawn(move || i2.run(|| fetch("https://evil".into())).unwrap())
        .join()
        .unwrap();
    assert!(inner.taint().is_some());
    assert!(
        outer.taint().is_none(),
        "only the gates the untrusted call passed"
    );
    pause.go();
    let ran = caller.join().unwrap();
    let asked = asked_of(&asked_i);
    if ran {
        assert_eq!(count(&WIRES), before + 1);
        assert!(
            asked.iter().any(|(_, tainted)| *tainted),
            "the inner gate ran a write on a clean-session approval: {asked:?}"
        );
    } else {
        assert_eq!(count(&WIRES), before);
    }
}

/// latch × `&Gate` parameter (14). An untrusted tool whose gate is a parameter, called under an ambient
/// gate: both gates decided it, so both latches close; called with the parameter alone, that gate's.
#[test]
fn p17_an_untrusted_call_taints_its_gate_parameter_and_the_ambient_gate() {
    let _serial = serial();
    let g = Gate::new(Mode::PartialAuto).unwrap();
    let h = Gate::new(Mode::PartialAuto).unwrap();
    h.run(|| gated_fetch(&g, "https://evil".into())).unwrap();
    assert!(
        g.taint().is_some(),
        "the parameter's gate passed the untrusted call"
    );
    assert!(
        h.taint().is_some(),
        "the ambient gate passed the untrusted call"
    );
    for gate in [&g, &h] {
        assert_denied(gate.run(|| post("x".into())), DenialCode::ApprovalRequired);
    }
    let alone = Gate::new(Mode::PartialAuto).unwrap();
    gated_fetch(&alone, "https://evil".into()).unwrap();
    assert!(alone.taint().is_some());
}

/// sink × latch (14). The first untrusted call's `session_tainted` record WAITS in the sink; meanwhile
/// other untrusted calls start on other threads, sync and async. No untrusted body may run before the
/// log holds the record: `session_tainted` is taken by the sink before any untrusted body runs.
#[test]
fn p23_no_untrusted_body_runs_on_any_thread_before_the_taint_is_logged() {
    let _serial = serial();
    let pause = Pause::armed();
    let sink = HookSink::new(&pause, |r: &AuditRecord| r.stage == Stage::SessionTainted);
    let gate = gates::audited_shared(Mode::PartialAuto, sink.clone());
    let before = count(&FETCHES);
    take_events();
    let first = {
        let gate = gate.clone();
        spawn(move || gate.run(|| fetch("https://one".into())).is_ok())
    };
    assert!(pause.reached(), "the taint record is being written");
    let (done_tx, done_rx) = mpsc::channel();
    let others: Vec<_> = (0..2)
        .map(|i| {
            let (gate, done_tx) = (gate.clone(), done_tx.clone());
            spawn(move || {
                let ok = if i == 0 {
                    gate.run(|| fetch("https://two".into())).is_ok()
                } else {
                    runtime()
                        .block_on(gate.scope(fetch_async("https://three".into())))
                        .is_ok()
                };
                let _ = done_tx.send(());
                ok
            })
        })
        .collect();
    // Give the others a moment to run (or to wait): none of their bodies may run yet.
    let _ = done_rx.recv_timeout(Duration::from_millis(200));
    assert_eq!(
        count(&FETCHES),
        before,
        "an untrusted body ran while its taint was not in the log"
    );
    pause.go();
    assert!(first.join().unwrap());
    for other in others {
        other.join().unwrap();
    }
    let events = take_events();
    assert!(
        taint_logged_before_any_untrusted_body(&events),
        "an untrusted body ran before the taint was logged: {events:?}"
    );
    assert_paired(&sink.records());
}

/// sink (JSONL) × latch, racing (9, 14). Threads post (allowed outright while clean) while another
/// reads untrusted input, all into one JSONL log. Calls are ordered by their commit points, which come
/// after their `enter` records and the latch's record comes after it closes: so every post that ran
/// without an approval has its `enter` before `session_tainted` in the log, and the log verifies.
#[test]
fn p24_in_a_jsonl_log_every_unasked_write_that_ran_precedes_the_taint() {
    let _serial = serial();
    let scratch = crate::common::Scratch::new("pairs-p24");
    let path = scratch.path("audit.jsonl");
    let gate = gates::approved_audited(
        Mode::PartialAuto,
        |_: &ApprovalRequest<'_>| Approval::Reject("tainted".into()),
        JsonlSink::open(&path).unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let (gate, stop) = (gate.clone(), stop.clone());
            spawn(move || {
                let mut n = 0;
                while !stop.load(SeqCst) && n < 2000 {
                    let _ = gate.run(|| post(format!("p{n}")));
                    n += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(10));
    gate.run(|| fetch("https://evil".into())).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    stop.store(true, SeqCst);
    for writer in writers {
        writer.join().unwrap();
    }
    drop(gate);
    let report = toolgate::audit::verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report:?}");
    let lines: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tainted = lines
        .iter()
        .position(|l| l["stage"] == "session_tainted")
        .expect("the taint is logged");
    for (i, l) in lines.iter().enumerate() {
        if l["stage"] == "enter" && l["tool"] == "pairs.post" && l["decision"] == "allowed" {
            let ran = lines
                .iter()
                .any(|x| x["stage"] == "exit" && x["call"] == l["call"] && x["outcome"] == "ok");
            if ran {
                assert!(i < tainted, "an unasked post ran after the taint: {l}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// the async approver × the latch
// ---------------------------------------------------------------------------------------------------------

/// async approver × latch (14). An async HIGH_WRITE call WAITS in its async approver (no thread
/// blocked); an untrusted async call on another task closes the latch. The approver then approves (once,
/// not for the session): the approval was asked in the clean session, so the call must not run. Scoped
/// and by name.
#[test]
fn p30_an_async_approval_asked_before_the_latch_closed_runs_no_tainted_write() {
    let _serial = serial();
    let rt = runtime();
    for path in ["scoped", "by name"] {
        let pause = Pause::armed();
        let asked: Asked = Arc::default();
        let gate = built(Mode::FullAuto, |b| {
            b.async_approver(HoldingAsync {
                pause: pause.clone(),
                answer: answer(Approval::Approve),
                asked: asked.clone(),
            })
        });
        let before = count(&WIRES);
        let waiting = {
            let gate = gate.clone();
            rt.spawn(async move {
                if path == "scoped" {
                    gate.scope(wire_async(1)).await.is_ok()
                } else {
                    registry()
                        .call(&gate, "pairs.wire_async", json!({"cents": 1}))
                        .await
                        .is_ok()
                }
            })
        };
        assert!(pause.reached(), "the async approver is asked");
        let clone = gate.clone();
        rt.block_on(rt.spawn(async move { clone.scope(fetch_async("https://evil".into())).await }))
            .unwrap()
            .unwrap();
        assert!(gate.taint().is_some());
        pause.go();
        let ran = awaited(&rt, waiting);
        assert!(!ran, "{path}: a clean-session approval ran a tainted write");
        assert_eq!(count(&WIRES), before, "{path}");
    }
}

/// latch × by name (1, 14). A call by name of a write is asked of the gate before its arguments are
/// read; the argument's `Deserialize` then reads untrusted input through the same gate. The write is
/// decided with its arguments, after that: under `TaintPolicy::Refuse` it is refused `TAINTED_SESSION`.
#[test]
fn p31_an_argument_that_closes_the_latch_while_it_is_read_taints_its_own_call() {
    let _serial = serial();
    let gate = built(Mode::PartialAuto, |b| b.taint_policy(TaintPolicy::Refuse));
    let before = count(&NOTES);
    let result = by_name_with_hook(
        &gate,
        "pairs.write_note",
        json!({"note": "exfiltrate"}),
        |gate| gate.run(|| fetch("https://evil".into())).unwrap(),
    );
    assert!(gate.taint().is_some(), "the hook ran");
    assert_eq!(
        result.unwrap_err().code(),
        "TAINTED_SESSION",
        "a write decided after the latch closed ran"
    );
    assert_eq!(count(&NOTES), before);
}

// ---------------------------------------------------------------------------------------------------------
// a grant is made only at its call's commit point
// ---------------------------------------------------------------------------------------------------------

/// two-step store × grants × latch (14). An operator answers a pending HIGH_WRITE call "for the
/// session" in a clean session; its retry WAITS in the store (which holds the answer) while the latch
/// closes. The call may run (an operator's answer runs exactly its call), but no grant may be made in
/// the tainted session: the next call files a request of its own.
#[test]
fn p41_an_operators_session_answer_used_as_the_latch_closes_makes_no_grant() {
    let _serial = serial();
    let pause = Pause::new();
    let gate = built(Mode::FullAuto, |b| {
        b.approval_store(HookStore {
            inner: memory_store(),
            pause: pause.clone(),
        })
    });
    let pending = gate.run(|| wire(1)).unwrap_err();
    approve_for_session(&gate, pending.approval_token().unwrap(), "ops");
    pause.arm();
    let caller = {
        let gate = gate.clone();
        spawn(move || gate.run(|| wire(1)).is_ok())
    };
    assert!(pause.reached(), "the retry waits in the store");
    gate.run(|| fetch("https://evil".into())).unwrap();
    pause.go();
    let _ran = caller.join().unwrap();
    assert!(
        gate.grants().is_empty(),
        "a grant made in a tainted session"
    );
    let before = count(&WIRES);
    assert_denied(gate.run(|| wire(2)), DenialCode::ApprovalPending);
    assert_eq!(count(&WIRES), before);
}

/// two-step store × latch × principals (14). A gate that refuses tainted writes never uses an operator's
/// approval once tainted: neither its own (filed while clean) nor one filed by a clean gate of the same
/// principal and agent sharing the store. It answers `TAINTED_SESSION`, and the approval is left for the
/// clean gate's call.
#[test]
fn p42_a_tainted_refusing_gate_uses_no_stored_approval() {
    let _serial = serial();
    let store = memory_store();
    let build = || {
        built(Mode::FullAuto, |b| {
            b.principal("alice")
                .agent("desk")
                .taint_policy(TaintPolicy::Refuse)
                .approval_store_shared(store.clone())
        })
    };
    let (clean, tainted) = (build(), build());
    let own = tainted.run(|| wire(30)).unwrap_err();
    tainted.approve(own.approval_token().unwrap()).unwrap();
    let other = clean.run(|| wire(31)).unwrap_err();
    clean.approve(other.approval_token().unwrap()).unwrap();
    tainted.run(|| fetch("https://evil".into())).unwrap();
    let before = count(&WIRES);
    for cents in [30, 31] {
        assert_denied(tainted.run(|| wire(cents)), DenialCode::TaintedSession);
        assert_eq!(
            by_name(&tainted, "pairs.wire", json!({"cents": cents}))
                .unwrap_err()
                .code(),
            "TAINTED_SESSION"
        );
    }
    assert_eq!(count(&WIRES), before);
    assert_eq!(
        clean.run(|| wire(31)).unwrap(),
        31,
        "the approval was left whole"
    );
}

/// sink × latch (14). While the sink writes `session_tainted` (the latch closing), a write is decided
/// through the gate on another thread. The session is tainted from the moment the latch closed: that
/// write, decided after, needs an approval (the gate has none) and does not run.
#[test]
fn p46_a_write_decided_while_the_taint_record_is_written_does_not_run_unasked() {
    let _serial = serial();
    let slot: Arc<Mutex<Option<Gate>>> = Arc::default();
    let post_handle: PostHandle = Arc::default();
    let gate = gates::audited(
        Mode::PartialAuto,
        Reentrant {
            gate: slot.clone(),
            post: post_handle.clone(),
        },
    );
    *slot.lock().unwrap() = Some(gate.clone());
    let before = count(&POSTS);
    gate.run(|| fetch("https://evil".into())).unwrap();
    slot.lock().unwrap().take();
    let handle = post_handle.lock().unwrap().take().expect("the sink posted");
    let result = handle.join().unwrap();
    assert_eq!(
        result.unwrap_err(),
        DenialCode::ApprovalRequired,
        "a write ran unasked while the latch closed"
    );
    assert_eq!(count(&POSTS), before);
}

// ---------------------------------------------------------------------------------------------------------
// futures made before the latch closed; stores that answer what they should not
// ---------------------------------------------------------------------------------------------------------

/// latch × async (1, 14). Async writes are created (scoped, and by name) while the session is clean,
/// then the latch closes, then they are first polled: an async tool decides at its first poll, so they
/// are decided in the tainted session and, with no approver, do not run.
#[test]
fn p52_async_writes_made_while_clean_and_polled_after_the_latch_closed_are_decided_tainted() {
    let _serial = serial();
    let rt = runtime();
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let scoped = gate.scope(post_async("made while clean".into()));
    let named = registry().call(
        &gate,
        "pairs.post_async",
        json!({"text": "made while clean"}),
    );
    gate.run(|| fetch("https://evil".into())).unwrap();
    let before = count(&POSTS);
    assert_denied(rt.block_on(scoped), DenialCode::ApprovalRequired);
    assert_eq!(rt.block_on(named).unwrap_err().code(), "APPROVAL_REQUIRED");
    assert_eq!(count(&POSTS), before);
}

// ---------------------------------------------------------------------------------------------------------
// grants answered in a window the latch, a cancellation or a principal's empty name reach
// ---------------------------------------------------------------------------------------------------------

/// grants × latch × sink (14). The clean session's approver answers "for the session" at once; the
/// call then WAITS in its `enter` record, and the latch closes meanwhile. The answer was given in the
/// clean session: the call is refused at its commit point, and no grant is made.
#[test]
fn p55_a_grant_answered_in_a_clean_session_whose_enter_waits_past_the_latch_is_never_made() {
    let _serial = serial();
    let (pause, sink) = held_at_enter("pairs.wire");
    let gate = built(Mode::FullAuto, |b| {
        b.approver(|_: &ApprovalRequest<'_>| Approval::ApproveForSession(SessionGrant::tool(HOUR)))
            .audit_shared(sink.clone())
    });
    let before = count(&WIRES);
    let caller = held_call(&pause, &gate, |gate| {
        gate.run(|| wire(1)).map_err(|d| d.code())
    });
    gate.run(|| fetch("https://evil".into())).unwrap();
    pause.go();
    assert!(
        caller.join().unwrap().is_err(),
        "a clean approval ran a tainted write"
    );
    assert_eq!(count(&WIRES), before);
    assert!(
        gate.grants().is_empty(),
        "a grant made in a tainted session"
    );
    assert_paired(&sink.records());
}
