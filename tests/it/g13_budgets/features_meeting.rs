//! Guarantee 13 (A budget is never exceeded, and counts the calls that run), against two stateful
//! features meeting in one process (grants, the latch, budgets and their stores, approvers, nested
//! gates, lowering, sinks), one changing while the other's decision waits.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::json;
use toolgate::approval::store::{
    Answer, ApprovalCall, ApprovalStore, ApproveError, Binding, Consumed, StoreError, StoreFuture,
};
use toolgate::approval::{ApprovalFuture, AsyncApprover, SessionGrant};
use toolgate::audit::{MemorySink, Stage};
use toolgate::gate::BudgetScope;
use toolgate::gate::budget::{BudgetCharge, BudgetFuture, BudgetStore, MemoryBudgets, Reservation};
use toolgate::policy::TaintPolicy;
use toolgate::{Approval, ApprovalRequest, DenialCode, Gate, GateBuilder, Mode, Risk, registry};

use crate::common::gates;
use crate::common::serial;
use crate::fixtures::features_meeting::*;
use crate::fixtures::lagging_budgets::{Release, lagging};
use crate::g07_approvals::checks::{assert_denied, built, denial};
use crate::g07_approvals::meeting::*;

/// A PartialAuto gate of the agent `poster` with one `pairs.post` an hour in `store`, and what `more`
/// adds.
fn poster(store: Arc<dyn BudgetStore>, more: impl FnOnce(GateBuilder) -> GateBuilder) -> Gate {
    built(Mode::PartialAuto, |b| {
        let b = more(b.agent("poster"));
        b.budget(BudgetScope::tool("pairs.post"), 1, HOUR)
            .budget_store_shared(store)
    })
}

/// A FullAuto gate of the agent `payer` with one `pairs.wire` per `window` in `budgets`, and what
/// `more` adds.
fn payer(
    budgets: &Arc<MemoryBudgets>,
    window: Duration,
    more: impl FnOnce(GateBuilder) -> GateBuilder,
) -> Gate {
    built(Mode::FullAuto, |b| {
        let b = more(b.agent("payer"));
        b.budget(BudgetScope::tool("pairs.wire"), 1, window)
            .budget_store_shared(budgets.clone())
    })
}

/// `gate`, the count of posts before, and a post through it held at `pause` in its budget store.
fn posting_held(
    pause: &Pause,
    gate: Gate,
) -> (Gate, usize, JoinHandle<Result<String, DenialCode>>) {
    let before = count(&POSTS);
    let caller = held_call(pause, &gate, |gate| {
        gate.run(|| post("x".into())).map_err(|d| d.code())
    });
    (gate, before, caller)
}

/// latch × budgets (13). A LOW_WRITE call WAITS in its budget store (a shared store, one call an
/// hour); the latch closes meanwhile and the gate refuses tainted writes. The call is refused
/// `TAINTED_SESSION`, and its unit goes back: another gate of the same agent and budget, sharing the
/// store, can still make its one call.
#[test]
fn p08_a_write_refused_by_the_latch_after_its_budget_check_gives_its_unit_back() {
    let _serial = serial();
    let pause = Pause::new();
    let budgets = Arc::new(MemoryBudgets::new());
    let build =
        |store: Arc<dyn BudgetStore>| poster(store, |b| b.taint_policy(TaintPolicy::Refuse));
    let (gate, before, caller) = posting_held(&pause, build(HookBudgets::shared(&budgets, &pause)));
    gate.run(|| fetch("https://evil".into())).unwrap();
    pause.go();
    assert_eq!(
        caller.join().unwrap().unwrap_err(),
        DenialCode::TaintedSession
    );
    assert_eq!(count(&POSTS), before);
    let other = build(budgets.clone());
    other
        .run(|| post("y".into()))
        .expect("the refused call gave its unit back");
    assert_denied(other.run(|| post("z".into())), DenialCode::BudgetExhausted);
}

/// latch × budgets × sink (13, 14). An untrusted call under a budget of one: the sink fails its
/// `session_tainted` record, so the call is refused `AUDIT_UNAVAILABLE` before its body. Its unit goes
/// back (the next untrusted call runs and logs the taint), and the latch stays closed.
#[test]
fn p09_an_untrusted_call_refused_for_its_taint_record_gives_its_unit_back() {
    let _serial = serial();
    let sink = failing_first(Stage::SessionTainted);
    let gate = built(Mode::PartialAuto, |b| {
        b.audit_shared(sink.clone())
            .budget(BudgetScope::tool("pairs.fetch"), 1, HOUR)
    });
    let before = count(&FETCHES);
    take_events();
    let refused = gate.run(|| fetch("https://evil".into())).unwrap_err();
    assert_eq!(refused.code(), DenialCode::AuditUnavailable);
    assert_eq!(count(&FETCHES), before);
    gate.run(|| fetch("https://evil".into()))
        .expect("the refused untrusted call gave its unit back");
    assert_eq!(count(&FETCHES), before + 1);
    assert!(gate.taint().is_some());
    let events = take_events();
    assert!(
        taint_logged_before_any_untrusted_body(&events),
        "the untrusted body ran before the log said so: {events:?}"
    );
    assert_denied(gate.run(|| post("x".into())), DenialCode::ApprovalRequired);
}

// ---------------------------------------------------------------------------------------------------------
// budgets × two-step approvals, budgets × async approvers
// ---------------------------------------------------------------------------------------------------------

/// budgets × two-step (13). An operator approves a pending call; before it is retried, another gate
/// sharing the budget store spends the budget. The retry is refused `BUDGET_EXHAUSTED` before the store
/// is asked, so the approval is not used up: once the window lets a call through, the approved call
/// runs.
#[test]
fn p10_a_budget_refusal_does_not_use_up_an_operators_approval() {
    let _serial = serial();
    let window = Duration::from_millis(400);
    let budgets = Arc::new(MemoryBudgets::new());
    let approvals = memory_store();
    let two_step = payer(&budgets, window, |b| {
        b.approval_store_shared(approvals.clone())
    });
    let quick = payer(&budgets, window, |b| {
        b.approver(|_: &ApprovalRequest<'_>| Approval::Approve)
    });
    let pending = two_step.run(|| wire(5)).unwrap_err();
    assert_eq!(pending.code(), DenialCode::ApprovalPending);
    two_step.approve(pending.approval_token().unwrap()).unwrap();
    quick.run(|| wire(6)).unwrap();
    let over = two_step.run(|| wire(5)).unwrap_err();
    assert_eq!(over.code(), DenialCode::BudgetExhausted);
    std::thread::sleep(over.retry_after().unwrap() + Duration::from_millis(5));
    let before = count(&WIRES);
    assert_eq!(
        two_step
            .run(|| wire(5))
            .expect("the approval was still there"),
        5
    );
    assert_eq!(count(&WIRES), before + 1);
}

/// budgets × two-step store (13). A call reserves the one unit of a shared budget, then WAITS in a
/// slow two-step store, which files it as pending. While it waits, another gate of the same agent and
/// budget is refused (the unit is reserved); once the store answers pending, the unit is back and the
/// other gate's call runs.
#[test]
fn p11_a_call_waiting_in_its_approval_store_holds_its_unit_only_until_it_is_pending() {
    let _serial = serial();
    let pause = Pause::new();
    let budgets = Arc::new(MemoryBudgets::new());
    let filing = payer(&budgets, HOUR, |b| {
        b.approval_store(HookStore {
            inner: memory_store(),
            pause: pause.clone(),
        })
    });
    let quick = payer(&budgets, HOUR, |b| {
        b.approver(|_: &ApprovalRequest<'_>| Approval::Approve)
    });
    let caller = held_call(&pause, &filing, |gate| {
        gate.run(|| wire(1)).map_err(|d| d.code())
    });
    assert_eq!(
        denial(quick.run(|| wire(2))),
        DenialCode::BudgetExhausted,
        "a reserved unit counts"
    );
    pause.go();
    assert_eq!(
        caller.join().unwrap().unwrap_err(),
        DenialCode::ApprovalPending
    );
    let before = count(&WIRES);
    quick
        .run(|| wire(3))
        .expect("the pending call kept no unit");
    assert_eq!(count(&WIRES), before + 1);
}

/// budgets × async approver (13). A budget of one call; an async call WAITS in its approver. A clone's
/// call meanwhile is over the budget; the approver then rejects, which gives the unit back, so the next
/// approved call runs, and no more than one body ever ran.
#[test]
fn p12_an_async_rejection_gives_the_unit_back_that_a_waiting_clone_could_not_have() {
    let _serial = serial();
    let pause = Pause::new();
    let asked: Asked = Arc::default();
    let reply = answer(Approval::Reject("not now".into()));
    let gate = built(Mode::FullAuto, |b| {
        b.async_approver(HoldingAsync {
            pause: pause.clone(),
            answer: reply.clone(),
            asked: asked.clone(),
        })
        .budget(Risk::HighWrite, 1, HOUR)
    });
    let rt = runtime();
    let before = count(&WIRES);
    pause.arm();
    let waiting = rt.spawn(gate.scope(wire_async(1)));
    assert!(pause.reached(), "the approver is asked");
    let clone = gate.clone();
    let over = rt.block_on(clone.scope(wire_async(2))).unwrap_err();
    assert_eq!(over.code(), DenialCode::BudgetExhausted);
    pause.go();
    let rejected = awaited(&rt, waiting).unwrap_err();
    assert_eq!(rejected.code(), DenialCode::ApprovalRejected);
    *reply.lock().unwrap() = Approval::Approve;
    assert_eq!(rt.block_on(gate.scope(wire_async(3))).unwrap(), 3);
    assert_eq!(count(&WIRES), before + 1);
    assert_denied(
        rt.block_on(gate.scope(wire_async(4))),
        DenialCode::BudgetExhausted,
    );
}

/// budgets × async approver, racing (13). Thirty async calls by three paths (scoped, by name, and a
/// grant's shortcut once the approver grants) race for a budget of three behind an approver that
/// yields before answering "for the session": no more than three bodies run.
#[test]
fn p13_racing_async_calls_behind_a_granting_async_approver_never_exceed_the_budget() {
    let _serial = serial();
    struct Yielding;
    impl AsyncApprover for Yielding {
        fn approve<'a>(&'a self, _: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
            Box::pin(async {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                Approval::ApproveForSession(SessionGrant::tool(HOUR))
            })
        }
    }
    let gate = built(Mode::FullAuto, |b| {
        b.async_approver(Yielding)
            .budget(BudgetScope::tool("pairs.wire_async"), 3, HOUR)
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let before = count(&WIRES);
    let ran = rt.block_on(async {
        let calls: Vec<_> = (0..30u64)
            .map(|i| {
                let gate = gate.clone();
                tokio::spawn(async move {
                    if i % 2 == 0 {
                        gate.scope(wire_async(i)).await.is_ok()
                    } else {
                        registry()
                            .call(&gate, "pairs.wire_async", json!({"cents": i}))
                            .await
                            .is_ok()
                    }
                })
            })
            .collect();
        let mut ran = 0;
        for call in calls {
            ran += usize::from(tokio::time::timeout(WAIT, call).await.unwrap().unwrap());
        }
        ran
    });
    assert!(ran <= 3, "{ran} calls ran on a budget of 3");
    assert_eq!(count(&WIRES) - before, ran);
}

/// lowering × budgets (4, 13). A call WAITS in a shared budget store (one call an hour); the gate is
/// lowered to SHADOW meanwhile. The call is refused at the lowered mode, and its unit goes back to the
/// shared budget.
#[test]
fn p19_a_call_waiting_in_its_budget_store_when_the_gate_is_lowered_gives_its_unit_back() {
    let _serial = serial();
    let pause = Pause::new();
    let budgets = Arc::new(MemoryBudgets::new());
    let hooked = HookBudgets::shared(&budgets, &pause);
    let (gate, before, caller) = posting_held(&pause, poster(hooked, |b| b));
    gate.lower(Mode::Shadow).unwrap();
    pause.go();
    let code = caller.join().unwrap().unwrap_err();
    assert!(
        matches!(code, DenialCode::ModeNotAllowed | DenialCode::AboveCeiling),
        "{code:?}"
    );
    assert_eq!(count(&POSTS), before);
    poster(budgets.clone(), |b| b)
        .run(|| post("y".into()))
        .expect("the lowered call gave its unit back");
}

/// lowering (`Approval::Stop`, async) × budgets (13). An async approver answers `Stop`: the call is
/// refused, the gate lowered, and its unit of a shared budget goes back, so another gate of the agent
/// still makes its one call.
#[test]
fn p20_an_async_stop_gives_the_unit_back_to_a_shared_budget() {
    let _serial = serial();
    let budgets = Arc::new(MemoryBudgets::new());
    let stopping = built(Mode::FullAuto, |b| {
        b.agent("payer")
            .async_approver(HoldingAsync {
                pause: Pause::new(),
                answer: answer(Approval::Stop("runaway".into())),
                asked: Arc::default(),
            })
            .budget(Risk::HighWrite, 1, HOUR)
            .budget_store_shared(budgets.clone())
    });
    let rt = runtime();
    let refused = rt.block_on(stopping.scope(wire_async(1))).unwrap_err();
    assert_eq!(refused.code(), DenialCode::ApprovalRejected);
    assert_eq!(stopping.mode(), Mode::Shadow);
    let other = built(Mode::FullAuto, |b| {
        b.agent("payer")
            .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
            .budget(Risk::HighWrite, 1, HOUR)
            .budget_store_shared(budgets)
    });
    other
        .run(|| wire(2))
        .expect("the stopped call gave its unit back");
}

// ---------------------------------------------------------------------------------------------------------
// sinks × budgets, sinks × the latch
// ---------------------------------------------------------------------------------------------------------

/// sink × budgets (8, 13). A call WAITS in its `enter` record (budget of one): a clone's call meanwhile
/// is over the budget; then the sink fails, the waiting call is refused `AUDIT_UNAVAILABLE`, and its
/// unit goes back: the next call runs, and one body ran in all.
#[test]
fn p21_a_sink_that_waits_then_fails_holds_the_unit_only_while_it_waits() {
    let _serial = serial();
    let (pause, sink) = held_at_enter("pairs.read");
    let gate = built(Mode::PartialAuto, |b| {
        b.audit_shared(sink.clone())
            .budget(BudgetScope::tool("pairs.read"), 1, HOUR)
    });
    let before = count(&READS);
    pause.arm();
    sink.fail.store(1, SeqCst);
    let caller = {
        let gate = gate.clone();
        spawn(move || gate.run(|| read(1)).map_err(|d| d.code()))
    };
    assert!(pause.reached());
    assert_denied(gate.clone().run(|| read(2)), DenialCode::BudgetExhausted);
    pause.go();
    assert_eq!(
        caller.join().unwrap().unwrap_err(),
        DenialCode::AuditUnavailable
    );
    gate.run(|| read(3)).expect("the unit came back");
    assert_eq!(count(&READS), before + 1);
}

/// sink × budgets (8, 13). A sink that panics on a budgeted call's `enter` refuses the call; the unit
/// goes back, and the gate keeps working, by name too.
#[test]
fn p22_a_sink_panicking_on_enter_gives_the_unit_back() {
    let _serial = serial();
    let sink = HookSink::new(&Pause::new(), is(Stage::Enter, "pairs.read"));
    sink.panic.store(1, SeqCst);
    let gate = built(Mode::PartialAuto, |b| {
        b.audit_shared(sink.clone())
            .budget(BudgetScope::tool("pairs.read"), 1, HOUR)
    });
    let before = count(&READS);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gate.run(|| read(1))));
    if let Ok(result) = panicked {
        assert!(result.is_err());
    }
    assert_eq!(count(&READS), before);
    by_name(&gate, "pairs.read", json!({"n": 2})).expect("the unit came back");
    assert_eq!(count(&READS), before + 1);
}

/// budgets × agents (13). Two agents share a budget store, each with a budget of one call of its own:
/// one agent's calls never spend the other's unit, whatever the agent labels spell (a label that looks
/// like another's key).
#[test]
fn p29_one_agents_calls_never_spend_anothers_budget_in_a_shared_store() {
    let _serial = serial();
    let budgets = Arc::new(MemoryBudgets::new());
    let keys: Arc<Mutex<Vec<String>>> = Arc::default();
    struct Spy(Arc<MemoryBudgets>, Arc<Mutex<Vec<String>>>);
    impl BudgetStore for Spy {
        fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
            for charge in charges {
                self.1.lock().unwrap().push(charge.key.to_string());
            }
            self.0.take(charges, reservation)
        }
        fn release(
            &self,
            charges: &[BudgetCharge],
            reservation: Reservation,
        ) -> toolgate::gate::budget::ReleaseFuture {
            self.0.release(charges, reservation)
        }
        fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
            self.0.hold(charges, reservation)
        }
    }
    let gate = |agent: &str| {
        Gate::builder()
            .mode(Mode::PartialAuto)
            .agent(agent)
            .budget(BudgetScope::Agent, 1, HOUR)
            .budget(BudgetScope::tool("pairs.read"), 1, HOUR)
            .budget_store(Spy(budgets.clone(), keys.clone()))
            .build()
    };
    let a = gate("a").unwrap();
    a.run(|| read(1)).unwrap();
    let seen = keys.lock().unwrap().clone();
    // Agents whose label spells another's key, or a prefix of it.
    let mut labels = vec!["b".to_owned()];
    for key in &seen {
        labels.push(key.clone());
        if let Some((head, _)) = key.rsplit_once(|c: char| !c.is_alphanumeric()) {
            labels.push(head.to_owned());
        }
    }
    for label in labels {
        let Ok(other) = gate(&label) else { continue };
        other
            .run(|| read(2))
            .unwrap_or_else(|d| panic!("agent {label:?} shares agent `a`'s budget: {d}"));
    }
    assert_denied(a.run(|| read(3)), DenialCode::BudgetExhausted);
}

/// grants × budgets, racing (13). Four threads call a granted, budgeted tool (budget of five) directly
/// and by name as fast as they can: the grant never lets a call skip its budget, so at most five run.
#[test]
fn p37_threads_racing_on_a_grant_never_exceed_the_budget() {
    let _serial = serial();
    let gate = built(Mode::FullAuto, |b| {
        b.approver(|_: &ApprovalRequest<'_>| Approval::ApproveForSession(SessionGrant::tool(HOUR)))
            .budget(BudgetScope::tool("pairs.wire"), 5, HOUR)
    });
    let before = count(&WIRES);
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let gate = gate.clone();
            spawn(move || {
                let mut ran = 0;
                for n in 0..50 {
                    let ok = if i == 3 && n % 5 == 0 {
                        by_name(&gate, "pairs.wire", json!({"cents": n})).is_ok()
                    } else {
                        gate.run(|| wire(n)).is_ok()
                    };
                    ran += usize::from(ok);
                }
                ran
            })
        })
        .collect();
    let ran: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(ran <= 5, "{ran} granted calls ran on a budget of 5");
    assert_eq!(count(&WIRES) - before, ran);
}

/// nested gates × budgets (5, 13). A call under an outer gate (budget of one) and an inner gate whose
/// budget is spent is refused by the inner budget: a call charged to several budgets takes a unit of
/// each or of none, so the outer gate's unit is untouched and its own next call runs.
#[test]
fn p38_an_inner_gates_spent_budget_takes_nothing_of_the_outer_gates() {
    let _serial = serial();
    let outer = gates::budgeted(Mode::PartialAuto, BudgetScope::tool("pairs.read"), 1, HOUR);
    let inner = gates::budgeted(Mode::PartialAuto, BudgetScope::tool("pairs.read"), 1, HOUR);
    inner.run(|| read(1)).unwrap();
    let before = count(&READS);
    for _ in 0..3 {
        assert_denied(
            outer.run(|| inner.run(|| read(2))),
            DenialCode::BudgetExhausted,
        );
        assert_denied(
            inner.run(|| outer.run(|| read(2))),
            DenialCode::BudgetExhausted,
        );
    }
    assert_eq!(count(&READS), before);
    outer
        .run(|| read(3))
        .expect("the outer budget was not charged");
}

/// nested gates × budgets × lowering (4, 13). Under two gates, each with a budget of one (shared
/// stores), the inner gate's approver WAITS; the outer gate is lowered meanwhile. The call is refused
/// at the lowered mode, and both gates' units go back to their shared stores.
#[test]
fn p39_a_nested_call_refused_by_a_lowering_gives_back_every_gates_unit() {
    let _serial = serial();
    let pause = Pause::armed();
    let outer_budgets = Arc::new(MemoryBudgets::new());
    let inner_budgets = Arc::new(MemoryBudgets::new());
    let build = |agent: &str, store: &Arc<MemoryBudgets>, approver: Option<Arc<Pause>>| {
        let builder = Gate::builder()
            .mode(Mode::FullAuto)
            .agent(agent)
            .budget(Risk::HighWrite, 1, HOUR)
            .budget_store_shared(store.clone());
        let builder = match approver {
            Some(pause) => builder.approver(holding_approver(
                &pause,
                &answer(Approval::Approve),
                &Arc::default(),
            )),
            None => builder.approver(|_: &ApprovalRequest<'_>| Approval::Approve),
        };
        builder.build().unwrap()
    };
    let outer = build("outer", &outer_budgets, None);
    let inner = build("inner", &inner_budgets, Some(pause.clone()));
    let before = count(&WIRES);
    let caller = {
        let (outer, inner) = (outer.clone(), inner.clone());
        spawn(move || outer.run(|| inner.run(|| wire(1))).map_err(|d| d.code()))
    };
    assert!(pause.reached(), "the inner approver is asked");
    outer.lower(Mode::PartialAuto).unwrap();
    pause.go();
    assert!(caller.join().unwrap().is_err());
    assert_eq!(count(&WIRES), before);
    build("outer", &outer_budgets, None)
        .run(|| wire(2))
        .expect("the outer unit came back");
    build("inner", &inner_budgets, None)
        .run(|| wire(3))
        .expect("the inner unit came back");
}

/// async sink × budgets × cancellation (8, 13). An async call's `enter` commit never comes back; the
/// caller drops the call. The body never ran, the unit of the shared budget goes back, and the `enter`
/// the sink took gets its `exit`.
#[test]
fn p47_an_async_call_dropped_while_its_enter_commits_gives_its_unit_back_and_closes_its_enter() {
    let _serial = serial();
    let budgets = Arc::new(MemoryBudgets::new());
    let sink = Arc::new(Hanging(MemorySink::new()));
    let build = |sink: Option<Arc<Hanging>>| {
        let builder = Gate::builder()
            .mode(Mode::FullAuto)
            .agent("payer")
            .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
            .budget(Risk::HighWrite, 1, HOUR)
            .budget_store_shared(budgets.clone());
        match sink {
            Some(sink) => builder.audit_shared(sink),
            None => builder,
        }
        .build()
        .unwrap()
    };
    let gate = build(Some(sink.clone()));
    let rt = runtime();
    let before = count(&WIRES);
    let waited = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(200), gate.scope(wire_async(1))).await
    });
    assert!(waited.is_err(), "the commit never comes back");
    assert_eq!(count(&WIRES), before);
    build(None)
        .run(|| wire(2))
        .expect("the dropped call gave its unit back");
    let records = sink.0.records();
    assert!(
        records
            .iter()
            .any(|r| r.stage == Stage::Enter && r.tool == "pairs.wire_async"),
        "the sink took the enter"
    );
    assert_paired(&records);
}

/// two-step store × budgets (7, 13). A store that answers a refusal code that is not an approval code
/// (`BUDGET_EXHAUSTED`, `TAINTED_SESSION`, `DENY_LISTED`): the call is refused
/// `APPROVAL_STORE_UNAVAILABLE`, it neither taints the gate nor lowers it, and its budget unit goes back.
#[test]
fn p53_a_store_answering_a_foreign_code_refuses_without_keeping_the_unit() {
    let _serial = serial();
    struct Foreign(DenialCode);
    impl ApprovalStore for Foreign {
        fn consume<'a>(
            &'a self,
            _: &'a ApprovalCall,
        ) -> StoreFuture<'a, Result<Consumed, StoreError>> {
            Box::pin(std::future::ready(Ok(Consumed::Pending {
                code: self.0,
                token: Some("t".into()),
            })))
        }
        fn answer<'a>(
            &'a self,
            _: &'a str,
            _: Answer,
        ) -> StoreFuture<'a, Result<Binding, ApproveError>> {
            Box::pin(async { Err(ApproveError::UnknownToken) })
        }
    }
    for code in [
        DenialCode::BudgetExhausted,
        DenialCode::TaintedSession,
        DenialCode::DenyListed,
    ] {
        let budgets = Arc::new(MemoryBudgets::new());
        let gate = built(Mode::FullAuto, |b| {
            b.agent("payer")
                .approval_store(Foreign(code))
                .budget(Risk::HighWrite, 1, HOUR)
                .budget_store_shared(budgets.clone())
        });
        let before = count(&WIRES);
        let refused = gate.run(|| wire(1)).unwrap_err();
        assert_eq!(
            refused.code(),
            DenialCode::ApprovalStoreUnavailable,
            "{code:?}"
        );
        assert!(refused.retry_after().is_none(), "{code:?}");
        assert!(
            gate.taint().is_none(),
            "{code:?}: the store tainted the gate"
        );
        assert_eq!(gate.mode(), Mode::FullAuto);
        assert_eq!(count(&WIRES), before);
        built(Mode::FullAuto, |b| {
            b.agent("payer")
                .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
                .budget(Risk::HighWrite, 1, HOUR)
                .budget_store_shared(budgets)
        })
        .run(|| wire(2))
        .unwrap_or_else(|d| panic!("{code:?}: the unit was kept: {d}"));
    }
}

/// budget store × every path (2, 13). A budget store that answers what it should not (an exhausted
/// charge that does not exist, a retry time of centuries): the call is refused, never run, nothing
/// panics on the caller's thread, and the gate keeps working for what no budget covers.
#[test]
fn p54_a_budget_store_answering_nonsense_refuses_and_panics_nowhere() {
    let _serial = serial();
    struct Nonsense;
    impl BudgetStore for Nonsense {
        fn take(&self, _: &[BudgetCharge], _: Reservation) -> BudgetFuture {
            Box::pin(std::future::ready(Ok(
                toolgate::gate::budget::Taken::Exhausted {
                    charge: usize::MAX,
                    retry_after: Duration::MAX,
                },
            )))
        }
        fn release(
            &self,
            _: &[BudgetCharge],
            _: Reservation,
        ) -> toolgate::gate::budget::ReleaseFuture {
            Box::pin(async {})
        }
        fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
            self.take(charges, reservation)
        }
    }
    let sink = Arc::new(MemorySink::new());
    let gate = built(Mode::PartialAuto, |b| {
        b.audit_shared(sink.clone())
            .budget(BudgetScope::tool("pairs.post*"), 5, HOUR)
            .budget_store(Nonsense)
    });
    let before = count(&POSTS);
    let rt = runtime();
    let direct = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        gate.run(|| post("x".into()))
            .map_err(|d| (d.code(), d.to_string()))
    }));
    let direct = direct.expect("no panic on the caller's thread");
    let code = direct.unwrap_err().0;
    assert!(
        matches!(
            code,
            DenialCode::BudgetExhausted | DenialCode::BudgetStoreUnavailable
        ),
        "{code:?}"
    );
    let named = rt.block_on(registry().call(&gate, "pairs.post", json!({"text": "x"})));
    assert!(named.is_err());
    let scoped = rt.block_on(gate.scope(post_async("x".into())));
    assert!(scoped.is_err());
    assert_eq!(count(&POSTS), before);
    gate.run(|| read(1)).unwrap();
    let value = serde_json::to_value(sink.records()).unwrap();
    assert!(value.is_array());
}

/// budgets × approvals (13). A store whose release lands a while after it is asked for, as one in
/// another process does: a call refused after its budget check (its approver rejects it) returns its
/// refusal only once the unit is back, so that another gate sharing the store, asked right after, runs
/// its call. Direct, async and by name.
#[test]
fn p58_a_refusal_is_returned_only_once_its_unit_is_back_in_the_shared_store() {
    let _serial = serial();
    // Its releases land 50 ms after they are asked for, on a thread of their own.
    let (lagging, _) = lagging(Release::Slow(Duration::from_millis(50)));
    let store: Arc<dyn BudgetStore> = lagging;
    // Each way its own agent, so its own budget, in the one store.
    let gate = |agent: &str, approval: fn() -> Approval| {
        built(Mode::FullAuto, |b| {
            b.agent(agent)
                .budget(BudgetScope::tool("pairs.wire*"), 1, HOUR)
                .budget_store_shared(store.clone())
                .approver(move |_: &ApprovalRequest<'_>| approval())
        })
    };
    let rt = runtime();
    let before = count(&WIRES);
    for way in ["direct", "async", "by name"] {
        let rejecting = gate(way, || Approval::Reject("not this one".into()));
        let refused = match way {
            "direct" => rejecting.run(|| wire(1)).map(drop).map_err(|d| d.code()),
            "async" => rt
                .block_on(rejecting.scope(wire_async(1)))
                .map(drop)
                .map_err(|d| d.code()),
            _ => by_name(&rejecting, "pairs.wire", json!({"cents": 1}))
                .map(drop)
                .map_err(|e| e.denied().expect("a refusal").code()),
        };
        assert_eq!(refused, Err(DenialCode::ApprovalRejected), "{way}");
        // Another gate of the same agent sharing the store, the moment the refusal is known.
        let other = gate(way, || Approval::Approve);
        other
            .run(|| wire(2))
            .unwrap_or_else(|d| panic!("{way}: the rejected call's unit was still counted: {d}"));
        // It spent the one unit: the budget still holds.
        assert_denied(other.run(|| wire(3)), DenialCode::BudgetExhausted);
    }
    assert_eq!(count(&WIRES), before + 3);
}
