//! Budgets: at most N calls per tool, risk level or agent over a sliding window; the (N+1)-th refused
//! with `BUDGET_EXHAUSTED` and when to retry, before any approver is asked, taking nothing when refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use toolgate::approval::store::StoreError;
use toolgate::gate::budget::{
    BudgetCharge, BudgetError, BudgetFuture, BudgetStore, MemoryBudgets, Reservation, Taken,
};
use toolgate::gate::{BudgetScope, GateError};
use toolgate::{Approval, ApprovalRequest, DenialCode, Denied, Gate, Mode, Risk, tool};

use crate::common::gates;
use crate::common::serial;
use crate::g07_approvals::checks::{built, counted_tools};

static READS: AtomicUsize = AtomicUsize::new(0);
static NOTES: AtomicUsize = AtomicUsize::new(0);
static WIRES: AtomicUsize = AtomicUsize::new(0);

counted_tools!(READS, (risk = "READ_ONLY", domain = "budget", callable);
    "Read a counter." fn read(n: u64);
    "Read a counter, async." async fn read_async(n: u64);
);
counted_tools!(WIRES, (risk = "HIGH_WRITE", domain = "budget", callable);
    "Wire money." fn wire(cents: u64);
    "Wire money, async." async fn wire_async(cents: u64);
);

/// Look at something no budget covers.
#[tool(risk = "READ_ONLY", domain = "budget", callable)]
fn look() -> Result<(), Denied> {
    Ok(())
}

/// Write a note.
#[tool(risk = "LOW_WRITE", domain = "budget", callable)]
fn note(text: String) -> Result<(), Denied> {
    NOTES.fetch_add(1, Ordering::SeqCst);
    drop(text);
    Ok(())
}

const HOUR: Duration = Duration::from_secs(3600);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Asserts that `denied` has `code` and that its message says `text`.
#[track_caller]
fn assert_refusal_says(denied: &Denied, code: DenialCode, text: &str) {
    assert_eq!(denied.code(), code);
    assert!(denied.to_string().contains(text), "{denied}");
}

fn code<T: std::fmt::Debug>(result: Result<T, Denied>) -> DenialCode {
    result.unwrap_err().code()
}

#[test]
fn the_call_after_the_budget_is_refused_with_when_to_retry() {
    let _serial = serial();
    let gate = gates::budgeted(Mode::PartialAuto, BudgetScope::tool("budget.read"), 3, HOUR);
    let before = READS.load(Ordering::SeqCst);
    for n in 0..3 {
        assert_eq!(gate.run(|| read(n)).unwrap(), n);
    }
    let denied = gate.run(|| read(3)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::BudgetExhausted);
    assert_eq!(
        READS.load(Ordering::SeqCst) - before,
        3,
        "the 4th body did not run"
    );
    let retry = denied
        .retry_after()
        .expect("a budget refusal says when to retry");
    assert!(retry > Duration::ZERO && retry <= HOUR, "{retry:?}");
    let text = denied.to_string();
    assert!(
        text.starts_with(
            "tool `budget.read` (READ_ONLY) is over the gate's budget of 3 calls of `budget.read` \
             per 3600 s; retry in "
        ),
        "{text}"
    );
    let value = serde_json::to_value(&denied).unwrap();
    assert_eq!(value["code"], "BUDGET_EXHAUSTED");
    let millis = value["retry_after_ms"].as_u64().unwrap();
    assert!(
        millis >= retry.as_millis() as u64 && millis <= 3_600_000,
        "{value}"
    );
    // Every other refusal has no retry time, in the JSON as in the API.
    let other = Gate::new(Mode::Shadow).unwrap().run(|| note("x".into()));
    let other = other.unwrap_err();
    assert_eq!(other.retry_after(), None);
    assert!(
        serde_json::to_value(&other)
            .unwrap()
            .get("retry_after_ms")
            .is_none()
    );
}

#[test]
fn after_the_time_it_says_the_call_runs_again() {
    let _serial = serial();
    let window = Duration::from_millis(300);
    let gate = gates::budgeted(
        Mode::PartialAuto,
        BudgetScope::tool("budget.read"),
        2,
        window,
    );
    gate.run(|| read(1)).unwrap();
    gate.run(|| read(2)).unwrap();
    let denied = gate.run(|| read(3)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::BudgetExhausted);
    let retry = denied.retry_after().unwrap();
    assert!(retry <= window);
    // Waiting exactly as long as it says is enough: the window slides, and the oldest call left it.
    std::thread::sleep(retry);
    gate.run(|| read(4)).unwrap();
}

#[test]
fn a_tool_budget_counts_every_tool_its_glob_matches_and_no_other() {
    let _serial = serial();
    let gate = gates::budgeted(
        Mode::PartialAuto,
        BudgetScope::tool("budget.read*"),
        2,
        HOUR,
    );
    gate.run(|| read(1)).unwrap();
    runtime().block_on(gate.scope(read_async(2))).unwrap();
    assert_eq!(code(gate.run(|| read(3))), DenialCode::BudgetExhausted);
    let refused = runtime().block_on(gate.scope(read_async(4)));
    assert_eq!(code(refused), DenialCode::BudgetExhausted);
    for _ in 0..10 {
        gate.run(look).unwrap();
        gate.run(|| note("n".into())).unwrap();
    }
}

#[test]
fn a_risk_budget_counts_the_calls_of_that_risk() {
    let _serial = serial();
    let gate = gates::budgeted(Mode::PartialAuto, Risk::LowWrite, 2, HOUR);
    gate.run(|| note("a".into())).unwrap();
    gate.run(|| note("b".into())).unwrap();
    let denied = gate.run(|| note("c".into())).unwrap_err();
    assert_refusal_says(
        &denied,
        DenialCode::BudgetExhausted,
        "2 calls of LOW_WRITE per 3600 s",
    );
    for n in 0..10 {
        gate.run(|| read(n)).unwrap();
    }
}

#[test]
fn an_agent_budget_counts_every_call_of_the_agent() {
    let _serial = serial();
    let gate = built(Mode::PartialAuto, |b| {
        b.agent("billing").budget(BudgetScope::Agent, 3, HOUR)
    });
    gate.run(|| read(1)).unwrap();
    gate.run(look).unwrap();
    gate.run(|| note("x".into())).unwrap();
    let denied = gate.run(look).unwrap_err();
    assert_refusal_says(
        &denied,
        DenialCode::BudgetExhausted,
        "3 calls of any tool per 3600 s for agent `billing`",
    );
    assert_eq!(code(gate.run(|| read(2))), DenialCode::BudgetExhausted);
}

/// An approver that approves, counting how often it is asked.
fn counting_approver(asked: &Arc<AtomicUsize>, answer: Approval) -> impl toolgate::Approver {
    let asked = asked.clone();
    move |_: &ApprovalRequest<'_>| {
        asked.fetch_add(1, Ordering::SeqCst);
        answer.clone()
    }
}

#[test]
fn no_approver_is_asked_about_a_call_over_its_budget() {
    let _serial = serial();
    let asked = Arc::new(AtomicUsize::new(0));
    let gate = built(Mode::FullAuto, |b| {
        b.approver(counting_approver(&asked, Approval::Approve))
            .budget(Risk::HighWrite, 2, HOUR)
    });
    let rt = runtime();
    gate.run(|| wire(1)).unwrap();
    rt.block_on(gate.scope(wire_async(2))).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    assert_eq!(code(gate.run(|| wire(3))), DenialCode::BudgetExhausted);
    let refused = rt.block_on(gate.scope(wire_async(4)));
    assert_eq!(code(refused), DenialCode::BudgetExhausted);
    let by_name = rt.block_on(toolgate::registry().call(&gate, "budget.wire", json!({"cents": 5})));
    assert_eq!(by_name.unwrap_err().code(), "BUDGET_EXHAUSTED");
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "the approver was not bothered"
    );
}

// A budget counts the calls that ran: a rejected call gives its unit back, so a rejection does not
// spend a budget an operator's later approval needs.
#[test]
fn a_call_rejected_after_the_budget_gives_its_unit_back() {
    let _serial = serial();
    let asked = Arc::new(AtomicUsize::new(0));
    let answers = Arc::new(AtomicUsize::new(0));
    let seen = answers.clone();
    let counted = asked.clone();
    let gate = built(Mode::FullAuto, |b| {
        b.approver(move |_: &ApprovalRequest<'_>| {
            counted.fetch_add(1, Ordering::SeqCst);
            match seen.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Approval::Reject("not yet".into()),
                _ => Approval::Approve,
            }
        })
        .budget(Risk::HighWrite, 1, HOUR)
    });
    let before = WIRES.load(Ordering::SeqCst);
    assert_eq!(code(gate.run(|| wire(1))), DenialCode::ApprovalRejected);
    assert_eq!(code(gate.run(|| wire(1))), DenialCode::ApprovalRejected);
    assert_eq!(gate.run(|| wire(1)).unwrap(), 1);
    assert_eq!(code(gate.run(|| wire(1))), DenialCode::BudgetExhausted);
    assert_eq!(asked.load(Ordering::SeqCst), 3);
    assert_eq!(WIRES.load(Ordering::SeqCst), before + 1);
}

// Budget of 3 an hour, two-step approvals, an agent that asks three times while its request is
// pending: the pending refusals keep no unit, so once the operator approves, the call runs, and the
// budget still counts three calls that run.
#[test]
fn calls_waiting_for_an_operator_keep_no_unit() {
    let _serial = serial();
    let gate = built(Mode::FullAuto, |b| {
        b.two_step_approvals()
            .budget(BudgetScope::tool("budget.wire"), 3, HOUR)
    });
    let before = WIRES.load(Ordering::SeqCst);
    let mut token = None;
    for _ in 0..3 {
        let denied = gate.run(|| wire(7)).unwrap_err();
        assert_eq!(denied.code(), DenialCode::ApprovalPending);
        token = denied.approval_token().map(str::to_owned);
    }
    gate.approve(&token.unwrap()).unwrap();
    assert_eq!(gate.run(|| wire(7)).unwrap(), 7);
    for cents in [8, 9] {
        let token = gate.run(|| wire(cents)).unwrap_err();
        gate.approve(token.approval_token().unwrap()).unwrap();
        assert_eq!(gate.run(|| wire(cents)).unwrap(), cents);
    }
    // Three ran: the fourth is over the budget, before any request is filed.
    let over = gate.run(|| wire(10)).unwrap_err();
    assert_eq!(over.code(), DenialCode::BudgetExhausted);
    assert!(over.approval_token().is_none());
    assert_eq!(WIRES.load(Ordering::SeqCst), before + 3);
}

/// An async approver that never answers in time.
struct NeverAnswers;

impl toolgate::approval::AsyncApprover for NeverAnswers {
    fn approve<'a>(&'a self, _: &'a ApprovalRequest<'a>) -> toolgate::approval::ApprovalFuture<'a> {
        Box::pin(std::future::pending())
    }
}

// An async call whose decision is dropped while its approver thinks gives its unit back: a gate
// sharing the store finds the budget whole.
#[test]
fn a_decision_dropped_while_it_waits_gives_its_unit_back() {
    let _serial = serial();
    let store: Arc<dyn BudgetStore> = Arc::new(toolgate::gate::budget::MemoryBudgets::new());
    let waiting = built(Mode::FullAuto, |b| {
        b.async_approver(NeverAnswers)
            .budget(Risk::HighWrite, 1, HOUR)
            .budget_store_shared(store.clone())
    });
    let rt = runtime();
    for _ in 0..3 {
        let waited = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(20), waiting.scope(wire_async(1))).await
        });
        assert!(waited.is_err(), "the approver never answers");
    }
    let quick = built(Mode::FullAuto, |b| {
        b.approver(|_: &ApprovalRequest<'_>| Approval::Approve)
            .budget(Risk::HighWrite, 1, HOUR)
            .budget_store_shared(store)
    });
    assert_eq!(quick.run(|| wire(2)).unwrap(), 2);
    assert_eq!(code(quick.run(|| wire(3))), DenialCode::BudgetExhausted);
}

#[test]
fn a_refused_call_takes_nothing_of_any_budget() {
    let _serial = serial();
    let gate = built(Mode::PartialAuto, |b| {
        b.budget(BudgetScope::tool("budget.note"), 1, HOUR)
            .budget(BudgetScope::Agent, 3, HOUR)
    });
    // Refused by the policy, before any budget: HIGH_WRITE does not run in PARTIAL_AUTO.
    for _ in 0..10 {
        assert_eq!(code(gate.run(|| wire(1))), DenialCode::ModeNotAllowed);
    }
    gate.run(|| note("one".into())).unwrap();
    // Refused by the note's budget: the agent's budget is not charged either.
    for _ in 0..10 {
        assert_eq!(
            code(gate.run(|| note("two".into()))),
            DenialCode::BudgetExhausted
        );
    }
    gate.run(|| read(1)).unwrap();
    gate.run(|| read(2)).unwrap();
    assert_eq!(code(gate.run(|| read(3))), DenialCode::BudgetExhausted);
}

#[test]
fn clones_and_nested_scopes_share_one_budget_and_other_gates_do_not() {
    let _serial = serial();
    let gate = gates::budgeted(Mode::PartialAuto, BudgetScope::tool("budget.read"), 2, HOUR);
    let clone = gate.clone();
    gate.run(|| read(1)).unwrap();
    std::thread::spawn(move || clone.run(|| read(2)).unwrap())
        .join()
        .unwrap();
    assert_eq!(
        code(gate.clone().run(|| read(3))),
        DenialCode::BudgetExhausted
    );
    let other = gates::budgeted(Mode::PartialAuto, BudgetScope::tool("budget.read"), 2, HOUR);
    other.run(|| read(4)).unwrap();
}

#[test]
fn direct_by_name_and_async_calls_all_count() {
    let _serial = serial();
    let rt = runtime();
    let gate = gates::budgeted(
        Mode::PartialAuto,
        BudgetScope::tool("budget.read*"),
        4,
        HOUR,
    );
    let registry = toolgate::registry();
    gate.run(|| read(1)).unwrap();
    rt.block_on(gate.scope(read_async(2))).unwrap();
    let value = rt
        .block_on(registry.call(&gate, "budget.read", json!({"n": 3})))
        .unwrap();
    assert_eq!(value, json!(3));
    rt.block_on(registry.call(&gate, "budget.read_async", json!({"n": 4})))
        .unwrap();
    for id in ["budget.read", "budget.read_async"] {
        let refused = rt
            .block_on(registry.call(&gate, id, json!({"n": 5})))
            .unwrap_err();
        assert_eq!(refused.code(), "BUDGET_EXHAUSTED");
        // What an MCP client or a model reads of a refusal by name: its code, then its message.
        let shown = format!("{}: {refused}", refused.code());
        assert!(
            shown.starts_with("BUDGET_EXHAUSTED: tool `budget.read"),
            "{shown}"
        );
        assert!(shown.contains("; retry in "), "{shown}");
        let retry = refused.denied().unwrap().retry_after().unwrap();
        // The MCP result's structured content.
        let value = serde_json::to_value(&refused).unwrap();
        assert_eq!(value["code"], "BUDGET_EXHAUSTED");
        assert_eq!(value["message"], refused.to_string());
        assert!(value["retry_after_ms"].as_u64().unwrap() >= retry.as_millis() as u64);
        #[cfg(feature = "mcp")]
        {
            let result = toolgate::mcp::tool_result(Err(refused));
            assert_eq!(result.is_error, Some(true));
            assert_eq!(result.structured_content, Some(value));
        }
    }
    assert_eq!(code(gate.run(|| read(6))), DenialCode::BudgetExhausted);
    let refused = rt.block_on(gate.scope(read_async(7)));
    assert_eq!(code(refused), DenialCode::BudgetExhausted);
}

#[test]
fn a_budget_that_cannot_be_kept_fails_the_build() {
    let built = |builder: toolgate::GateBuilder| builder.build().unwrap_err();
    let GateError::Budgets(errors) = built(
        Gate::builder()
            .budget(BudgetScope::Agent, 0, HOUR)
            .budget(Risk::ReadOnly, 5, Duration::ZERO)
            .budget(BudgetScope::tool("nosuch.*"), 5, HOUR)
            .budget(BudgetScope::tool("Bad Pattern"), 5, HOUR)
            .budget(Risk::LowWrite, 100_001, HOUR),
    ) else {
        panic!("not a budget error")
    };
    assert!(matches!(
        errors[0],
        BudgetError::ZeroLimit(BudgetScope::Agent)
    ));
    assert!(matches!(
        errors[1],
        BudgetError::Window(BudgetScope::RiskLevel(Risk::ReadOnly), _)
    ));
    assert!(matches!(errors[2], BudgetError::Pattern(_)));
    assert!(matches!(errors[3], BudgetError::Pattern(_)));
    assert!(matches!(errors[4], BudgetError::TooManyCalls(_, 100_001)));
    assert_eq!(errors.len(), 5);
    let long = Duration::from_secs(32 * 24 * 3600);
    let error = built(Gate::builder().budget(BudgetScope::Agent, 1, long));
    assert!(
        error
            .to_string()
            .starts_with("cannot build the gate: the budget of agent")
    );
}

/// A budget store that answers from another thread after a moment, or fails.
struct Remote {
    fails: bool,
    takes: AtomicUsize,
}

impl BudgetStore for Remote {
    // Units the remote store took stay taken until released: nothing else clears them.
    fn hold(&self, _: &[BudgetCharge], _: Reservation) -> BudgetFuture {
        Box::pin(std::future::ready(Ok(Taken::Taken)))
    }

    fn release(&self, _: &[BudgetCharge], _: Reservation) -> toolgate::gate::budget::ReleaseFuture {
        self.takes.fetch_sub(1, Ordering::SeqCst);
        Box::pin(async {})
    }

    fn take(&self, charges: &[BudgetCharge], _: Reservation) -> BudgetFuture {
        self.takes.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let fails = self.fails;
        let limit = charges[0].limit;
        let taken = self.takes.load(Ordering::SeqCst);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            let answer = if fails {
                Err(StoreError::Unavailable("connection refused".into()))
            } else if taken <= limit as usize {
                Ok(Taken::Taken)
            } else {
                Ok(Taken::Exhausted {
                    charge: 0,
                    retry_after: Duration::from_secs(9),
                })
            };
            let _ = tx.send(answer);
        });
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| Err(StoreError::Unavailable("gone".into())))
        })
    }
}

#[test]
fn a_store_that_answers_later_is_awaited_by_async_tools_and_waited_for_by_sync_ones() {
    let _serial = serial();
    let store = Arc::new(Remote {
        fails: false,
        takes: AtomicUsize::new(0),
    });
    let asked = Arc::new(AtomicUsize::new(0));
    let gate = built(Mode::FullAuto, |b| {
        b.approver(counting_approver(&asked, Approval::Approve))
            .budget(Risk::HighWrite, 2, HOUR)
            .budget_store_shared(store.clone())
    });
    // On a one-thread runtime: a store that blocked the executor's thread would never answer here
    // only if it needed that thread; it answers from its own, and the call resumes.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert_eq!(rt.block_on(gate.scope(wire_async(1))).unwrap(), 1);
    assert_eq!(gate.run(|| wire(2)).unwrap(), 2);
    let refused = rt.block_on(gate.scope(wire_async(3))).unwrap_err();
    assert_eq!(refused.code(), DenialCode::BudgetExhausted);
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(9)));
    assert_eq!(code(gate.run(|| wire(4))), DenialCode::BudgetExhausted);
    assert_eq!(store.takes.load(Ordering::SeqCst), 4);
    assert_eq!(asked.load(Ordering::SeqCst), 2);
}

#[test]
fn a_failing_store_refuses_and_no_body_runs() {
    let _serial = serial();
    let gate = built(Mode::PartialAuto, |b| {
        b.budget(BudgetScope::tool("budget.read*"), 100, HOUR)
            .budget_store(Remote {
                fails: true,
                takes: AtomicUsize::new(0),
            })
    });
    let denied = store_unavailable(&gate, "connection refused");
    assert_eq!(denied.retry_after(), None);
}

/// Calls `read` through `gate`, whose budget store fails saying `why`, directly and async: both are
/// refused `BUDGET_STORE_UNAVAILABLE` and neither body runs; a tool no budget covers does not ask the
/// store. Returns the direct call's refusal.
#[track_caller]
fn store_unavailable(gate: &Gate, why: &str) -> Denied {
    let before = READS.load(Ordering::SeqCst);
    let denied = gate.run(|| read(1)).unwrap_err();
    assert_refusal_says(&denied, DenialCode::BudgetStoreUnavailable, why);
    let refused = runtime().block_on(gate.scope(read_async(2)));
    assert_eq!(code(refused), DenialCode::BudgetStoreUnavailable);
    assert_eq!(READS.load(Ordering::SeqCst), before);
    gate.run(look).unwrap();
    denied
}

#[test]
fn a_session_grant_does_not_let_a_counted_tool_skip_its_budget() {
    let _serial = serial();
    let asked = Arc::new(AtomicUsize::new(0));
    let grant = Approval::ApproveForSession(toolgate::approval::SessionGrant::tool(HOUR));
    let gate = built(Mode::FullAuto, |b| {
        b.approver(counting_approver(&asked, grant)).budget(
            BudgetScope::tool("budget.wire"),
            2,
            HOUR,
        )
    });
    gate.run(|| wire(1)).unwrap();
    gate.run(|| wire(2)).unwrap();
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "the second call ran on the grant"
    );
    assert_eq!(code(gate.run(|| wire(3))), DenialCode::BudgetExhausted);
}

#[test]
fn a_budget_refusal_is_in_the_audit_log_with_its_retry_time() {
    let _serial = serial();
    let sink = Arc::new(toolgate::audit::MemorySink::new());
    let gate = built(Mode::PartialAuto, |b| {
        b.audit_shared(sink.clone())
            .budget(BudgetScope::tool("budget.read"), 1, HOUR)
    });
    gate.run(|| read(1)).unwrap();
    assert_eq!(code(gate.run(|| read(2))), DenialCode::BudgetExhausted);
    let records = sink.records();
    let refused = records
        .iter()
        .find(|r| r.code.as_deref() == Some("BUDGET_EXHAUSTED"))
        .expect("a refused record");
    assert!(refused.message.as_deref().unwrap().contains("retry in"));
}

/// A budget store that panics, when asked or when its answer is awaited.
struct Panicking {
    in_take: bool,
}

impl BudgetStore for Panicking {
    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.take(charges, reservation)
    }

    fn release(&self, _: &[BudgetCharge], _: Reservation) -> toolgate::gate::budget::ReleaseFuture {
        panic!("the store panics when giving units back");
    }

    fn take(&self, _: &[BudgetCharge], _: Reservation) -> BudgetFuture {
        assert!(!self.in_take, "the store panics when asked");
        Box::pin(async { panic!("the store panics when awaited") })
    }
}

#[test]
fn a_store_that_panics_refuses_and_the_gate_still_works() {
    let _serial = serial();
    for in_take in [true, false] {
        let gate = built(Mode::PartialAuto, |b| {
            b.budget(BudgetScope::tool("budget.read*"), 5, HOUR)
                .budget_store(Panicking { in_take })
        });
        store_unavailable(&gate, "the store panicked");
    }
}

/// Takes units in memory and panics giving them back: when asked, or when its release is awaited.
struct PanicsReleasing {
    budgets: MemoryBudgets,
    when_asked: bool,
}

impl BudgetStore for PanicsReleasing {
    fn release(&self, _: &[BudgetCharge], _: Reservation) -> toolgate::gate::budget::ReleaseFuture {
        assert!(!self.when_asked, "the store panics when asked to give back");
        Box::pin(async { panic!("the store panics when its release is awaited") })
    }

    fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.budgets.take(charges, reservation)
    }

    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.budgets.hold(charges, reservation)
    }
}

// A refusal waits for its units' release: one that panics is a release that failed. The refusal is
// still given, on the caller's thread, sync and async, and the units stay counted (fewer calls).
#[test]
fn a_release_that_panics_still_gives_the_refusal_and_keeps_the_unit() {
    let _serial = serial();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for when_asked in [true, false] {
        let gate = built(Mode::FullAuto, |b| {
            b.approver(|_: &ApprovalRequest<'_>| Approval::Reject("no".into()))
                .budget(BudgetScope::tool("budget.wire*"), 2, HOUR)
                .budget_store(PanicsReleasing {
                    budgets: MemoryBudgets::new(),
                    when_asked,
                })
        });
        let before = WIRES.load(Ordering::SeqCst);
        assert_eq!(code(gate.run(|| wire(1))), DenialCode::ApprovalRejected);
        let refused = rt.block_on(gate.scope(wire_async(1)));
        assert_eq!(code(refused), DenialCode::ApprovalRejected);
        // Both units were kept by the releases that failed.
        assert_eq!(code(gate.run(|| wire(1))), DenialCode::BudgetExhausted);
        assert_eq!(WIRES.load(Ordering::SeqCst), before);
    }
}

/// A sink that cannot write: every allowed call is refused `AUDIT_UNAVAILABLE`.
struct BrokenSink;

impl toolgate::audit::AuditSink for BrokenSink {
    fn record(&self, _: &toolgate::audit::AuditRecord) -> Result<(), toolgate::audit::AuditError> {
        Err(toolgate::audit::AuditError::new("the audit disk is full"))
    }
}

// The audit comes after the budget: a call refused for its record did not run, and gives its unit back.
#[test]
fn a_call_refused_for_its_audit_record_gives_its_unit_back() {
    let _serial = serial();
    let gate = built(Mode::PartialAuto, |b| {
        b.audit(BrokenSink)
            .budget(BudgetScope::tool("budget.read"), 2, HOUR)
    });
    let before = READS.load(Ordering::SeqCst);
    for i in 0..5 {
        assert_eq!(code(gate.run(|| read(i))), DenialCode::AuditUnavailable);
    }
    assert_eq!(READS.load(Ordering::SeqCst), before);
}

/// A gate of agent `desk` at FULL_AUTO whose budget of `limit` calls per `window` is counted in
/// `store`, and whose approver runs `meanwhile` before it approves.
fn desk(
    store: &Arc<MemoryBudgets>,
    limit: u32,
    window: Duration,
    meanwhile: impl Fn() + Send + Sync + 'static,
) -> Gate {
    let store: Arc<dyn BudgetStore> = store.clone();
    Gate::builder()
        .mode(Mode::FullAuto)
        .agent("desk")
        .budget(BudgetScope::Agent, limit, window)
        .budget_store_shared(store)
        .approver(move |_: &ApprovalRequest<'_>| {
            meanwhile();
            Approval::Approve
        })
        .build()
        .unwrap()
}

// A call's unit is reserved before its approver is asked. An approver slower than the budget's
// window lets that unit leave the window: another call of the agent takes the free unit meanwhile,
// and the approved call, run then, would make two calls in one window of a budget of one. At its
// commit point the call takes its unit again, and is refused.
#[test]
fn a_call_whose_unit_left_its_window_while_its_approver_thought_is_counted_again() {
    let _serial = serial();
    const WINDOW: Duration = Duration::from_secs(2);
    let store = Arc::new(MemoryBudgets::new());
    let other = Arc::new(desk(&store, 1, WINDOW, || {}));
    let inside = other.clone();
    let noted = Arc::new(std::sync::Mutex::new(None));
    let said = noted.clone();
    let gate = desk(&store, 1, WINDOW, move || {
        std::thread::sleep(WINDOW + Duration::from_millis(300));
        let other = inside.clone();
        let b = std::thread::spawn(move || other.run(|| note("meanwhile".into())))
            .join()
            .unwrap();
        *said.lock().unwrap() = Some(b.map_err(|d| d.code()));
    });
    let (wires, notes) = (WIRES.load(Ordering::SeqCst), NOTES.load(Ordering::SeqCst));
    let denied = gate.run(|| wire(1)).unwrap_err();
    assert_eq!(*noted.lock().unwrap(), Some(Ok(())), "the call meanwhile");
    assert_refusal_says(
        &denied,
        DenialCode::BudgetExhausted,
        "while the call waited",
    );
    assert_eq!(WIRES.load(Ordering::SeqCst), wires);
    assert_eq!(NOTES.load(Ordering::SeqCst), notes + 1);
    // Refused, it gave back what it held: nothing. The note's unit is the window's only one.
    assert_eq!(
        code(other.run(|| note("after".into()))),
        DenialCode::BudgetExhausted
    );
}

// An approved call whose unit is still in its window keeps it, and is not charged a second one.
#[test]
fn an_approved_call_still_holding_its_unit_is_charged_once() {
    let _serial = serial();
    let store = Arc::new(MemoryBudgets::new());
    let gate = desk(&store, 2, HOUR, || {});
    let before = WIRES.load(Ordering::SeqCst);
    assert_eq!(gate.run(|| wire(1)).unwrap(), 1);
    assert_eq!(WIRES.load(Ordering::SeqCst), before + 1);
    gate.run(|| note("second".into()))
        .expect("the budget's second unit");
    assert_eq!(
        code(gate.run(|| note("third".into()))),
        DenialCode::BudgetExhausted
    );
    let rt = runtime();
    let store = Arc::new(MemoryBudgets::new());
    let gate = desk(&store, 2, HOUR, || {});
    assert_eq!(rt.block_on(gate.scope(wire_async(1))).unwrap(), 1);
    gate.run(|| note("second".into()))
        .expect("the budget's second unit, async");
    assert_eq!(
        code(gate.run(|| note("third".into()))),
        DenialCode::BudgetExhausted
    );
}
