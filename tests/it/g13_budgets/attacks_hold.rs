//! Attacks on the commit point's second look at the budget store (`BudgetStore::hold`), where it meets
//! the other stateful features: a lowering, the taint latch and a policy replacement that come while
//! the store answers `hold`; a store that fails or refuses there; a budget a replacement narrows while
//! the call waits; a call whose unit leaves its window while its audit sink writes; a session grant
//! asked of a call its hold then refuses; a call under two budgets that lost the unit of one.
//!
//! SECURITY.md 13: "keeps them only at the commit point (guarantee 4's re-check), and gives them back
//! if refused after, before the refusal is returned; a budget that a policy replacement adds while a
//! call is decided takes its unit at that call's commit point, and an approved call whose unit left
//! its window while its approver thought takes one again there ... A budget store that fails or does
//! not answer in time refuses (`BUDGET_STORE_UNAVAILABLE`)". SECURITY.md 4: "Between the re-check and
//! the body there is no user code and no I/O."

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use toolgate::approval::SessionGrant;
use toolgate::approval::store::StoreError;
use toolgate::audit::{AuditError, AuditRecord, AuditSink, Stage};
use toolgate::gate::BudgetScope;
use toolgate::gate::budget::{
    BudgetCharge, BudgetFuture, BudgetStore, MemoryBudgets, ReleaseFuture, Reservation, Taken,
};
use toolgate::policy::TaintPolicy;
use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::{Approval, ApprovalRequest, DenialCode, Denied, Gate, Mode, tool};

use crate::common::serial;

static WIRES: AtomicUsize = AtomicUsize::new(0);
static NOTES: AtomicUsize = AtomicUsize::new(0);

/// Wire money: needs an approval at FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "a7h")]
fn wire(cents: u64) -> Result<u64, Denied> {
    WIRES.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

/// Wire money, async.
#[tool(risk = "HIGH_WRITE", domain = "a7h")]
async fn wire_async(cents: u64) -> Result<u64, Denied> {
    WIRES.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

/// Write a note: runs at FULL_AUTO without an approval.
#[tool(risk = "LOW_WRITE", domain = "a7h")]
fn note(n: u64) -> Result<u64, Denied> {
    NOTES.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// Read a web page: closes the taint latch.
#[tool(risk = "READ_ONLY", domain = "a7h", open_world, untrusted_output)]
fn browse(url: String) -> Result<String, Denied> {
    Ok(url)
}

const HOUR: Duration = Duration::from_secs(3600);
const WAIT: Duration = Duration::from_secs(30);

/// What the store answers `hold` with.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum AtHold {
    Memory,
    Fails,
    Exhausted,
    Panics,
}

/// A memory store whose `hold`, while armed, says it was asked and waits for the test before it
/// answers; it counts the holds and releases it was asked for.
struct Held {
    inner: MemoryBudgets,
    answer: Mutex<AtHold>,
    armed: AtomicBool,
    arrived: Mutex<mpsc::Sender<()>>,
    go: Mutex<mpsc::Receiver<()>>,
    holds: AtomicUsize,
    releases: AtomicUsize,
}

/// A store, the receiver told when its `hold` is reached, and the sender that lets it answer.
fn held(answer: AtHold) -> (Arc<Held>, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (arrived_tx, arrived) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let store = Arc::new(Held {
        inner: MemoryBudgets::new(),
        answer: Mutex::new(answer),
        armed: AtomicBool::new(false),
        arrived: Mutex::new(arrived_tx),
        go: Mutex::new(go_rx),
        holds: AtomicUsize::new(0),
        releases: AtomicUsize::new(0),
    });
    (store, arrived, go)
}

impl BudgetStore for Held {
    fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.inner.take(charges, reservation)
    }

    fn release(&self, charges: &[BudgetCharge], reservation: Reservation) -> ReleaseFuture {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(charges, reservation)
    }

    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.holds.fetch_add(1, Ordering::SeqCst);
        if self.armed.swap(false, Ordering::SeqCst) {
            let _ = self.arrived.lock().unwrap().send(());
            let _ = self.go.lock().unwrap().recv_timeout(WAIT);
        }
        let answer = *self.answer.lock().unwrap();
        match answer {
            AtHold::Memory => self.inner.hold(charges, reservation),
            AtHold::Fails => Box::pin(std::future::ready(Err(StoreError::Unavailable(
                "the budget store went away".into(),
            )))),
            AtHold::Panics => panic!("the budget store panics at hold"),
            AtHold::Exhausted => Box::pin(std::future::ready(Ok(Taken::Exhausted {
                charge: 0,
                retry_after: Duration::from_secs(7),
            }))),
        }
    }
}

/// A FULL_AUTO gate of agent `desk` whose approver approves, with a budget of the agent's calls of
/// `limit` an hour counted in `store`.
fn desk(
    store: &Arc<Held>,
    limit: u32,
    more: impl FnOnce(toolgate::GateBuilder) -> toolgate::GateBuilder,
) -> Gate {
    let store: Arc<dyn BudgetStore> = store.clone();
    more(
        Gate::builder()
            .mode(Mode::FullAuto)
            .agent("desk")
            .budget(BudgetScope::Agent, limit, HOUR)
            .budget_store_shared(store)
            .approver(|_: &ApprovalRequest<'_>| Approval::Approve),
    )
    .build()
    .unwrap()
}

/// Runs `wire` through `gate` on a thread of its own; once the store's `hold` is reached, runs
/// `meanwhile`, then lets the store answer. Returns the call's result.
fn while_held(
    gate: &Gate,
    store: &Arc<Held>,
    arrived: &mpsc::Receiver<()>,
    go: &mpsc::Sender<()>,
    meanwhile: impl FnOnce(),
) -> Result<u64, DenialCode> {
    store.armed.store(true, Ordering::SeqCst);
    let waiting = {
        let gate = gate.clone();
        std::thread::spawn(move || gate.run(|| wire(1)).map_err(|d| d.code()))
    };
    arrived
        .recv_timeout(WAIT)
        .expect("the approved call's commit point asks the store to hold its unit");
    meanwhile();
    go.send(()).unwrap();
    waiting.join().unwrap()
}

// SECURITY.md 4 and 13: the budget's units are kept at the commit point, guarantee 4's re-check.
// Attack: the gate is lowered (FULL_AUTO to PARTIAL_AUTO, where a HIGH_WRITE does not run) while the
// store answers the approved call's `hold`. The call must be refused with the lowered mode's code,
// and its unit given back.
#[test]
fn h01_a_lowering_while_the_store_holds_the_unit_refuses_the_call_and_gives_it_back() {
    let _serial = serial();
    let (store, arrived, go) = held(AtHold::Memory);
    let gate = desk(&store, 1, |b| b);
    let before = WIRES.load(Ordering::SeqCst);
    let result = while_held(&gate, &store, &arrived, &go, || {
        gate.lower(Mode::PartialAuto).unwrap();
    });
    assert!(
        matches!(
            result,
            Err(DenialCode::AboveCeiling | DenialCode::ModeNotAllowed)
        ),
        "a call whose hold answered after the lowering: {result:?}"
    );
    assert_eq!(
        WIRES.load(Ordering::SeqCst),
        before,
        "a HIGH_WRITE ran after the gate was lowered to PARTIAL_AUTO"
    );
    // Its unit came back: the budget of one lets a note run.
    assert_eq!(gate.run(|| note(1)).map_err(|d| d.code()), Ok(1));
}

// SECURITY.md 14: "The latch is read again at the commit point: a write whose decision waited ...
// while the latch closed runs only if the tainted session allows it outright". Attack: the latch
// closes (a clone browses) while the store answers the approved write's `hold`.
#[test]
fn h02_the_latch_closing_while_the_store_holds_the_unit_refuses_the_write() {
    let _serial = serial();
    let (store, arrived, go) = held(AtHold::Memory);
    // Two calls an hour: the wire's and the browse's.
    let gate = desk(&store, 2, |b| b.taint_policy(TaintPolicy::Refuse));
    let before = WIRES.load(Ordering::SeqCst);
    let result = while_held(&gate, &store, &arrived, &go, || {
        let clone = gate.clone();
        std::thread::spawn(move || clone.run(|| browse("https://example.com".into())))
            .join()
            .unwrap()
            .expect("the browse, on the budget's second unit");
    });
    assert!(gate.taint().is_some(), "the latch closed");
    assert_eq!(result, Err(DenialCode::TaintedSession));
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
}

// docs/policy_file.md: "A decision that waits (an approver, a budget store, an audit sink) reads the
// rules again at its commit point". Attack: the operator's policy denies the tool while the store
// answers the approved call's `hold`.
#[test]
fn h03_a_policy_denying_the_tool_while_the_store_holds_the_unit_refuses_the_call() {
    let _serial = serial();
    let (store, arrived, go) = held(AtHold::Memory);
    let live = LivePolicy::new(PolicyFile::parse("p.toml", "format = 1\n").unwrap());
    let gate = desk(&store, 5, |b| b.policy(live.clone()));
    let before = WIRES.load(Ordering::SeqCst);
    let result = while_held(&gate, &store, &arrived, &go, || {
        let denying = "format = 1\n[defaults]\ndeny = [\"a7h.wire\"]\n";
        assert!(live.replace(PolicyFile::parse("p.toml", denying).unwrap(), "ana"));
    });
    assert_eq!(result, Err(DenialCode::DenyListed));
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
}

// SECURITY.md 13: "A budget store that fails or does not answer in time refuses
// (`BUDGET_STORE_UNAVAILABLE`)". Attack: the store fails at the approved call's `hold`. The body
// must not run, and the unit the call took is given back.
#[test]
fn h04_a_store_failing_at_hold_refuses_and_the_unit_comes_back() {
    let _serial = serial();
    let (store, _arrived, _go) = held(AtHold::Fails);
    let gate = desk(&store, 1, |b| b);
    let before = WIRES.load(Ordering::SeqCst);
    let denied = gate.run(|| wire(1)).unwrap_err();
    assert_eq!(
        denied.code(),
        DenialCode::BudgetStoreUnavailable,
        "{denied}"
    );
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
    assert_eq!(store.holds.load(Ordering::SeqCst), 1);
    // The store answers again: the unit the refused call took was given back.
    *store.answer.lock().unwrap() = AtHold::Memory;
    assert_eq!(gate.run(|| note(2)).map_err(|d| d.code()), Ok(2));
    assert_eq!(
        gate.run(|| note(3)).map_err(|d| d.code()),
        Err(DenialCode::BudgetExhausted)
    );
}

// docs/budgets.md: "`Exhausted` refuses the call, which then gives back what `reservation` still
// holds." Attack: the store says at `hold` that the unit is gone and none is left.
#[test]
fn h05_a_store_exhausted_at_hold_refuses_and_gives_back_what_the_call_holds() {
    let _serial = serial();
    let (store, _arrived, _go) = held(AtHold::Exhausted);
    let gate = desk(&store, 1, |b| b);
    let before = WIRES.load(Ordering::SeqCst);
    let denied = gate.run(|| wire(1)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::BudgetExhausted, "{denied}");
    assert_eq!(denied.retry_after(), Some(Duration::from_secs(7)));
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
    assert_eq!(store.releases.load(Ordering::SeqCst), 1, "its release");
    *store.answer.lock().unwrap() = AtHold::Memory;
    assert_eq!(gate.run(|| note(2)).map_err(|d| d.code()), Ok(2));
}

// SECURITY.md 13: "a budget that a policy replacement adds while a call is decided takes its unit at
// that call's commit point". Attack: the operator narrows the policy's budget of the agent from two
// calls an hour to one while call A waits for its approver; another gate of the same agent and
// policy then runs one call (B). Under the policy now in force, a budget of one an hour, A's
// commit point must find the hour's one call taken.
#[test]
fn h06_a_budget_narrowed_while_a_call_waits_is_charged_at_its_commit_point() {
    let _serial = serial();
    let budget = |calls: u32| {
        let text = format!(
            "format = 1\n[[defaults.budgets]]\nagent = true\ncalls = {calls}\nper = \"1h\"\n"
        );
        PolicyFile::parse("p.toml", &text).unwrap()
    };
    let live = LivePolicy::new(budget(2));
    let store: Arc<dyn BudgetStore> = Arc::new(MemoryBudgets::new());
    let build = |approver: Box<dyn Fn() + Send + Sync>| {
        Gate::builder()
            .mode(Mode::FullAuto)
            .agent("narrowed")
            .policy(live.clone())
            .budget_store_shared(store.clone())
            .approver(move |_: &ApprovalRequest<'_>| {
                approver();
                Approval::Approve
            })
            .build()
            .unwrap()
    };
    let other = Arc::new(build(Box::new(|| {})));
    let inside = other.clone();
    let replaced = live.clone();
    let b = Arc::new(Mutex::new(None));
    let said = b.clone();
    let gate = build(Box::new(move || {
        assert!(replaced.replace(budget(1), "ana"));
        let other = inside.clone();
        let ran = std::thread::spawn(move || other.run(|| note(7)))
            .join()
            .unwrap();
        *said.lock().unwrap() = Some(ran.map_err(|d| d.code()));
    }));
    let before = WIRES.load(Ordering::SeqCst);
    let a = gate.run(|| wire(1)).map_err(|d| d.code());
    let b = (*b.lock().unwrap()).expect("the approver was asked");
    let ran = usize::from(b.is_ok()) + (WIRES.load(Ordering::SeqCst) - before);
    assert!(
        ran <= 1,
        "{ran} calls ran under a budget of one an hour (A {a:?}, B {b:?})"
    );
    // And no more after: the hour's call is spent.
    assert_eq!(
        other.run(|| note(8)).map_err(|d| d.code()),
        Err(DenialCode::BudgetExhausted)
    );
}

/// A sink that, on the first `enter` record it is given while armed, runs `meanwhile` before it
/// takes the record.
struct Slow {
    armed: AtomicBool,
    meanwhile: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl AuditSink for Slow {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if record.stage == Stage::Enter
            && self.armed.swap(false, Ordering::SeqCst)
            && let Some(meanwhile) = self.meanwhile.lock().unwrap().take()
        {
            meanwhile();
        }
        Ok(())
    }
}

/// Runs `call` on `gate` until it runs; `None` if it was refused otherwise than for its budget.
fn run_when_free(gate: &Gate, n: u64) -> Result<u64, DenialCode> {
    loop {
        match gate.run(|| note(n)) {
            Ok(n) => return Ok(n),
            Err(d) if d.code() == DenialCode::BudgetExhausted => {
                let retry = d.retry_after().unwrap_or(Duration::from_millis(50));
                assert!(retry <= Duration::from_secs(5), "{d}");
                std::thread::sleep(retry + Duration::from_millis(20));
            }
            Err(d) => return Err(d.code()),
        }
    }
}

/// A FULL_AUTO gate of agent `slow` with a budget of one call per `window` in `store`, its approver
/// approving, auditing into `sink` where given.
fn slow_desk(store: &Arc<MemoryBudgets>, window: Duration, sink: Option<Arc<Slow>>) -> Gate {
    let store: Arc<dyn BudgetStore> = store.clone();
    let builder = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("slow")
        .budget(BudgetScope::Agent, 1, window)
        .budget_store_shared(store)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve);
    match sink {
        Some(sink) => builder.audit_shared(sink),
        None => builder,
    }
    .build()
    .unwrap()
}

/// Call A through a gate whose sink, as A's `enter` record is written, waits until another gate of
/// the same budget (one call per window) has run a call B. Returns A's and B's results.
fn window_ends_while_the_sink_writes(
    approved: bool,
) -> (Result<u64, DenialCode>, Result<u64, DenialCode>) {
    const WINDOW: Duration = Duration::from_secs(2);
    let store = Arc::new(MemoryBudgets::new());
    let other = Arc::new(slow_desk(&store, WINDOW, None));
    let inside = other.clone();
    let b = Arc::new(Mutex::new(None));
    let said = b.clone();
    let sink = Arc::new(Slow {
        armed: AtomicBool::new(true),
        meanwhile: Mutex::new(Some(Box::new(move || {
            let other = inside.clone();
            let ran = std::thread::spawn(move || run_when_free(&other, 2))
                .join()
                .unwrap();
            *said.lock().unwrap() = Some(ran);
        }))),
    });
    let gate = slow_desk(&store, WINDOW, Some(sink));
    let a = if approved {
        gate.run(|| wire(1)).map_err(|d| d.code())
    } else {
        gate.run(|| note(1)).map_err(|d| d.code())
    };
    let b = (*b.lock().unwrap()).expect("the sink was asked");
    (a, b)
}

// SECURITY.md 13: "In any window of a budget's length, at most its N calls pass it (the window
// slides)"; docs/budgets.md: "So a call that waited is counted in the window it runs in." Attack: a
// call that needs no approval waits on its audit sink (its `enter` record, before the commit point)
// until its unit leaves the window and another gate of the budget runs a call with the freed unit.
// If A then runs, two calls ran within one window of a budget of one.
#[test]
fn h07_a_call_whose_unit_left_its_window_while_its_sink_wrote_is_counted_again() {
    let _serial = serial();
    let (a, b) = window_ends_while_the_sink_writes(false);
    assert_eq!(b, Ok(2), "B ran on the freed unit");
    assert_eq!(
        a,
        Err(DenialCode::BudgetExhausted),
        "A ran after B, inside B's window, under a budget of one call per window"
    );
}

// The same, A approved by its approver before its `enter` record waits on the sink.
#[test]
fn h08_an_approved_call_whose_unit_left_its_window_while_its_sink_wrote_is_counted_again() {
    let _serial = serial();
    let (a, b) = window_ends_while_the_sink_writes(true);
    assert_eq!(b, Ok(2), "B ran on the freed unit");
    assert_eq!(
        a,
        Err(DenialCode::BudgetExhausted),
        "A ran after B, inside B's window, under a budget of one call per window"
    );
}

// docs/budgets.md (taint latch): "A grant is made only at the commit point of its call". Attack: the
// approver answers "for the session" a call whose unit leaves its window while it thinks, and whose
// commit point is then refused BUDGET_EXHAUSTED. No grant may be made by that refused call: a later
// call of the tool asks the approver again (who now rejects).
#[test]
fn h09_a_session_answer_to_a_call_its_hold_refuses_grants_nothing() {
    let _serial = serial();
    const WINDOW: Duration = Duration::from_secs(2);
    let store = Arc::new(MemoryBudgets::new());
    let other = Arc::new(slow_desk(&store, WINDOW, None));
    let inside = other.clone();
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let shared: Arc<dyn BudgetStore> = store.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("slow")
        .budget(BudgetScope::Agent, 1, WINDOW)
        .budget_store_shared(shared)
        .approver(move |_: &ApprovalRequest<'_>| {
            if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                let other = inside.clone();
                std::thread::spawn(move || run_when_free(&other, 2))
                    .join()
                    .unwrap()
                    .expect("B on the freed unit");
                Approval::ApproveForSession(SessionGrant::tool(HOUR))
            } else {
                Approval::Reject("not again".into())
            }
        })
        .build()
        .unwrap();
    let before = WIRES.load(Ordering::SeqCst);
    assert_eq!(
        gate.run(|| wire(1)).map_err(|d| d.code()),
        Err(DenialCode::BudgetExhausted)
    );
    assert!(
        gate.grants().is_empty(),
        "a refused call left a grant: {:?}",
        gate.grants()
    );
    // Once B's unit leaves the window, a wire asks the approver again.
    let again = loop {
        match gate.run(|| wire(3)) {
            Err(d) if d.code() == DenialCode::BudgetExhausted => {
                std::thread::sleep(d.retry_after().unwrap() + Duration::from_millis(20));
            }
            other => break other.map_err(|d| d.code()),
        }
    };
    assert_eq!(again, Err(DenialCode::ApprovalRejected));
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
    assert_eq!(asked.load(Ordering::SeqCst), 2);
}

// SECURITY.md 13: "a call takes a unit of each budget that covers it or of none ... gives them back
// if refused after". Attack: a wire is covered by the agent's budget of one call per 2 s and by
// the tool's budget of one an hour. While its approver thinks, its agent unit leaves the window and
// a note (the agent's budget only) takes it. At the commit point the wire is refused; the unit it
// still held of the tool's budget must come back: the next wire, once the note's window has passed,
// is refused only by the agent's budget (a retry within seconds), never by the tool's (an hour).
#[test]
fn h10_a_call_refused_at_its_hold_gives_back_the_unit_it_still_held_of_another_budget() {
    let _serial = serial();
    const WINDOW: Duration = Duration::from_secs(2);
    let store = Arc::new(MemoryBudgets::new());
    let shared: Arc<dyn BudgetStore> = store.clone();
    let both = move |approver: Box<dyn Fn() + Send + Sync>| {
        Gate::builder()
            .mode(Mode::FullAuto)
            .agent("two")
            .budget(BudgetScope::Agent, 1, WINDOW)
            .budget(BudgetScope::tool("a7h.wire"), 1, HOUR)
            .budget_store_shared(shared.clone())
            .approver(move |_: &ApprovalRequest<'_>| {
                approver();
                Approval::Approve
            })
            .build()
            .unwrap()
    };
    let other = Arc::new(both(Box::new(|| {})));
    let inside = other.clone();
    let once = AtomicBool::new(true);
    let gate = both(Box::new(move || {
        if once.swap(false, Ordering::SeqCst) {
            let other = inside.clone();
            std::thread::spawn(move || run_when_free(&other, 2))
                .join()
                .unwrap()
                .expect("the note on the freed agent unit");
        }
    }));
    let before = WIRES.load(Ordering::SeqCst);
    assert_eq!(
        gate.run(|| wire(1)).map_err(|d| d.code()),
        Err(DenialCode::BudgetExhausted)
    );
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
    let next = loop {
        match gate.run(|| wire(3)) {
            Err(d) if d.code() == DenialCode::BudgetExhausted => {
                let retry = d.retry_after().unwrap();
                assert!(
                    retry <= Duration::from_secs(5),
                    "the tool's budget kept the unit of a call that never ran: {d}"
                );
                std::thread::sleep(retry + Duration::from_millis(20));
            }
            other => break other.map_err(|d| d.code()),
        }
    };
    assert_eq!(next, Ok(3));
}

// The async path of the window's end while the approver thinks: an async call, its unit freed and
// taken by another gate meanwhile, is refused at its commit point.
#[test]
fn h11_an_async_call_whose_unit_left_its_window_while_its_approver_thought_is_refused() {
    let _serial = serial();
    const WINDOW: Duration = Duration::from_secs(2);
    let store = Arc::new(MemoryBudgets::new());
    let other = Arc::new(slow_desk(&store, WINDOW, None));
    let inside = other.clone();
    let b = Arc::new(Mutex::new(None));
    let said = b.clone();
    let shared: Arc<dyn BudgetStore> = store.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("slow")
        .budget(BudgetScope::Agent, 1, WINDOW)
        .budget_store_shared(shared)
        .approver(move |_: &ApprovalRequest<'_>| {
            let other = inside.clone();
            let ran = std::thread::spawn(move || run_when_free(&other, 2))
                .join()
                .unwrap();
            *said.lock().unwrap() = Some(ran);
            Approval::Approve
        })
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = WIRES.load(Ordering::SeqCst);
    let a = rt.block_on(gate.scope(wire_async(1))).map_err(|d| d.code());
    assert_eq!((*b.lock().unwrap()), Some(Ok(2)));
    assert_eq!(a, Err(DenialCode::BudgetExhausted));
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
}

/// An async approver that, before it approves, runs `meanwhile` on a blocking thread.
struct Later(Arc<dyn Fn() + Send + Sync>);

impl toolgate::approval::AsyncApprover for Later {
    fn approve<'a>(&'a self, _: &'a ApprovalRequest<'a>) -> toolgate::approval::ApprovalFuture<'a> {
        let meanwhile = self.0.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || meanwhile())
                .await
                .unwrap();
            Approval::Approve
        })
    }
}

// The same through an async approver: its approved call's unit left the window while it thought.
#[test]
fn h12_a_call_whose_unit_left_its_window_while_its_async_approver_thought_is_refused() {
    let _serial = serial();
    const WINDOW: Duration = Duration::from_secs(2);
    let store = Arc::new(MemoryBudgets::new());
    let other = Arc::new(slow_desk(&store, WINDOW, None));
    let b = Arc::new(Mutex::new(None));
    let said = b.clone();
    let shared: Arc<dyn BudgetStore> = store.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("slow")
        .budget(BudgetScope::Agent, 1, WINDOW)
        .budget_store_shared(shared)
        .async_approver(Later(Arc::new(move || {
            *said.lock().unwrap() = Some(run_when_free(&other, 2));
        })))
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = WIRES.load(Ordering::SeqCst);
    let a = rt.block_on(gate.scope(wire_async(1))).map_err(|d| d.code());
    assert_eq!((*b.lock().unwrap()), Some(Ok(2)));
    assert_eq!(a, Err(DenialCode::BudgetExhausted));
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
}

// Nested gates: the outer gate allows a note outright and takes its unit (one per 2 s); the inner
// gate, its session tainted, asks its approver, who thinks until that unit has left the window and
// another gate of the outer's budget has run a note on it. The approved call's unit of the outer
// gate's budget is the one that left its window while the approver thought: the call must take
// one again at its commit point, and find none.
#[test]
fn h13_a_nested_call_whose_outer_unit_left_its_window_while_the_inner_approver_thought_is_refused()
{
    let _serial = serial();
    const WINDOW: Duration = Duration::from_secs(2);
    let store = Arc::new(MemoryBudgets::new());
    let other = Arc::new(slow_desk(&store, WINDOW, None));
    let outer = slow_desk(&store, WINDOW, None);
    let b = Arc::new(Mutex::new(None));
    let said = b.clone();
    let inner = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("inner")
        .approver(move |_: &ApprovalRequest<'_>| {
            let other = other.clone();
            let ran = std::thread::spawn(move || run_when_free(&other, 2))
                .join()
                .unwrap();
            *said.lock().unwrap() = Some(ran);
            Approval::Approve
        })
        .build()
        .unwrap();
    inner.run(|| browse("https://example.com".into())).unwrap();
    assert!(inner.taint().is_some() && outer.taint().is_none());
    let notes = NOTES.load(Ordering::SeqCst);
    let a = outer.run(|| inner.run(|| note(1))).map_err(|d| d.code());
    let b = *b.lock().unwrap();
    assert_eq!(b, Some(Ok(2)), "B ran on the outer budget's freed unit");
    assert_eq!(
        a,
        Err(DenialCode::BudgetExhausted),
        "A ran within B's window, under the outer gate's budget of one call per window"
    );
    assert_eq!(NOTES.load(Ordering::SeqCst), notes + 1);
}

// docs/policy_file.md: "A budget of a principal's table counts that principal's calls"; the key's
// fields are "apart by U+001F". Attack: bob's gate, of an agent label that holds U+001F and spells
// the head of alice's policy budget's key, with a budget in its code of one call an hour: its key
// is the key of alice's budget. Bob's call must not spend alice's budget.
#[test]
fn h14_an_agent_label_spelling_a_policy_key_never_spends_a_principals_budget() {
    let _serial = serial();
    let text = "format = 1\n[[principals.alice.budgets]]\nagent = true\ncalls = 1\nper = \"1h\"\n";
    let live = LivePolicy::new(PolicyFile::parse("p.toml", text).unwrap());
    let store: Arc<dyn BudgetStore> = Arc::new(MemoryBudgets::new());
    let alice = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("shared-desk")
        .principal("alice")
        .policy(live.clone())
        .budget_store_shared(store.clone())
        .build()
        .unwrap();
    let bob = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("policy [principals.\"alice\"]\u{1f}shared-desk")
        .principal("bob")
        .policy(live.clone())
        .budget(BudgetScope::Agent, 1, HOUR)
        .budget_store_shared(store.clone())
        .build();
    let Ok(bob) = bob else {
        return; // a label with a control character is refused: nothing to collide
    };
    bob.run(|| note(1)).expect("bob's own budget's one call");
    let alices = alice.run(|| note(2));
    assert!(
        alices.is_ok(),
        "alice's first call, refused after bob's: {alices:?}"
    );
}

// SECURITY.md 13: "an approved call whose unit left its window while its approver thought takes one
// again there". Attack: no other call touches the budget while the approver thinks past the window,
// so nothing has pruned the unit that left it: the commit point must still see it as gone. If the
// call runs on it, its unit counts from its old instant, and a call right after it (C) finds the
// budget free: two calls within one window of a budget of one.
#[test]
fn h15_a_unit_that_left_its_window_unpruned_is_not_held_at_the_commit_point() {
    let _serial = serial();
    const WINDOW: Duration = Duration::from_secs(2);
    let store = Arc::new(MemoryBudgets::new());
    let shared: Arc<dyn BudgetStore> = store.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("quiet")
        .budget(BudgetScope::Agent, 1, WINDOW)
        .budget_store_shared(shared)
        .approver(|_: &ApprovalRequest<'_>| {
            std::thread::sleep(WINDOW + Duration::from_millis(300));
            Approval::Approve
        })
        .build()
        .unwrap();
    let a = gate.run(|| wire(1)).map_err(|d| d.code());
    let c = gate.run(|| note(2)).map_err(|d| d.code());
    assert!(
        a.is_err() || c.is_err(),
        "A ran after its window on the unit it took before, and C right after it: A {a:?}, C {c:?}"
    );
}

// A store that panics at `hold`: the approved call is refused (the store failed), the caller does
// not panic, its unit comes back.
#[test]
fn h16_a_store_panicking_at_hold_refuses_and_the_unit_comes_back() {
    let _serial = serial();
    let (store, _arrived, _go) = held(AtHold::Panics);
    let gate = desk(&store, 1, |b| b);
    let before = WIRES.load(Ordering::SeqCst);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gate.run(|| wire(1))));
    let denied = result.expect("the caller does not panic").unwrap_err();
    assert_eq!(
        denied.code(),
        DenialCode::BudgetStoreUnavailable,
        "{denied}"
    );
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
    *store.answer.lock().unwrap() = AtHold::Memory;
    assert_eq!(gate.run(|| note(2)).map_err(|d| d.code()), Ok(2));
}

/// A memory store whose `hold`, once armed, answers only when the test says so, without blocking
/// the executor.
struct Parked {
    inner: MemoryBudgets,
    armed: AtomicBool,
    arrived: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    go: Arc<tokio::sync::Notify>,
    releases: AtomicUsize,
}

impl BudgetStore for Parked {
    fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.inner.take(charges, reservation)
    }

    fn release(&self, charges: &[BudgetCharge], reservation: Reservation) -> ReleaseFuture {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(charges, reservation)
    }

    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        let answer = self.inner.hold(charges, reservation);
        if !self.armed.swap(false, Ordering::SeqCst) {
            return answer;
        }
        if let Some(arrived) = self.arrived.lock().unwrap().take() {
            let _ = arrived.send(());
        }
        let go = self.go.clone();
        Box::pin(async move {
            go.notified().await;
            answer.await
        })
    }
}

// docs/budgets.md: "a call refused later (... an async call dropped while it waits) gives it back".
// Attack: an approved async call is dropped while its commit point waits for the store's `hold`.
// Its unit must come back: a call of the budget of one runs after it.
#[test]
fn h17_an_async_call_dropped_while_its_hold_waits_gives_its_unit_back() {
    let _serial = serial();
    let (arrived_tx, arrived) = tokio::sync::oneshot::channel();
    let store = Arc::new(Parked {
        inner: MemoryBudgets::new(),
        armed: AtomicBool::new(true),
        arrived: Mutex::new(Some(arrived_tx)),
        go: Arc::new(tokio::sync::Notify::new()),
        releases: AtomicUsize::new(0),
    });
    let shared: Arc<dyn BudgetStore> = store.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("dropped")
        .budget(BudgetScope::Agent, 1, HOUR)
        .budget_store_shared(shared)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = WIRES.load(Ordering::SeqCst);
    rt.block_on(async {
        let task = tokio::spawn(gate.scope(wire_async(1)));
        arrived
            .await
            .expect("the commit point asks the store to hold the unit");
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
    });
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
    assert_eq!(
        store.releases.load(Ordering::SeqCst),
        1,
        "the dropped call's release"
    );
    assert_eq!(gate.run(|| note(2)).map_err(|d| d.code()), Ok(2));
}

// SECURITY.md 13: "a call takes a unit of each budget that covers it or of none"; docs/budgets.md:
// "gates (and processes) configured alike share a budget through a shared store". Attack: a call
// passes two nested gates configured alike on one store (one budget, one key, of two calls an hour),
// and its approver (the inner gate's) approves. One call must take one unit of that budget: two
// such calls run.
#[test]
fn h18_a_call_through_two_gates_configured_alike_takes_one_unit_of_their_one_budget() {
    let _serial = serial();
    let store: Arc<dyn BudgetStore> = Arc::new(MemoryBudgets::new());
    let alike = || {
        Gate::builder()
            .mode(Mode::FullAuto)
            .agent("alike")
            .budget(BudgetScope::Agent, 2, HOUR)
            .budget_store_shared(store.clone())
            .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
            .build()
            .unwrap()
    };
    let (outer, inner) = (alike(), alike());
    let first = outer.run(|| inner.run(|| wire(1))).map_err(|d| d.code());
    let second = outer.run(|| inner.run(|| wire(2))).map_err(|d| d.code());
    assert_eq!(
        (first, second),
        (Ok(1), Ok(2)),
        "one call took two units of one budget"
    );
}

/// Pay an invoice: needs an approval at FULL_AUTO; callable by name.
#[tool(risk = "HIGH_WRITE", domain = "a7h", callable)]
fn pay(cents: u64) -> Result<u64, Denied> {
    WIRES.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

// docs/budgets.md: "Direct calls, calls by name and async calls all count once." Attack: the window's
// end while the approver thinks, for a call by name (the registry's `call`).
#[test]
fn h19_a_call_by_name_whose_unit_left_its_window_while_its_approver_thought_is_refused() {
    let _serial = serial();
    const WINDOW: Duration = Duration::from_secs(2);
    let store = Arc::new(MemoryBudgets::new());
    let other = Arc::new(slow_desk(&store, WINDOW, None));
    let b = Arc::new(Mutex::new(None));
    let said = b.clone();
    let shared: Arc<dyn BudgetStore> = store.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("slow")
        .budget(BudgetScope::Agent, 1, WINDOW)
        .budget_store_shared(shared)
        .approver(move |_: &ApprovalRequest<'_>| {
            let other = other.clone();
            let ran = std::thread::spawn(move || run_when_free(&other, 2))
                .join()
                .unwrap();
            *said.lock().unwrap() = Some(ran);
            Approval::Approve
        })
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = WIRES.load(Ordering::SeqCst);
    let a =
        rt.block_on(toolgate::registry().call(&gate, "a7h.pay", serde_json::json!({"cents": 1})));
    assert_eq!((*b.lock().unwrap()), Some(Ok(2)));
    let code = a.as_ref().map_err(|e| e.code());
    assert_eq!(code, Err("BUDGET_EXHAUSTED"), "{a:?}");
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
}

/// A memory store whose `take`, once armed, runs `meanwhile` before it takes.
struct SlowTake {
    inner: MemoryBudgets,
    meanwhile: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl BudgetStore for SlowTake {
    fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        let meanwhile = self.meanwhile.lock().unwrap().take();
        if let Some(meanwhile) = meanwhile {
            meanwhile();
        }
        self.inner.take(charges, reservation)
    }

    fn release(&self, charges: &[BudgetCharge], reservation: Reservation) -> ReleaseFuture {
        self.inner.release(charges, reservation)
    }

    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.inner.hold(charges, reservation)
    }
}

// SECURITY.md 13: "In any window of a budget's length, at most its N calls pass it"; docs/budgets.md:
// "in no window of that length do more than N calls run". Attack, no approver: the outer gate takes
// its unit (one call per 2 s); the inner gate's budget store is slow, and answers only once that unit
// has left the window and another gate of the outer's budget has run a call on it. If A then runs,
// two calls ran within one window of the outer's budget of one.
#[test]
fn h20_a_nested_call_whose_outer_unit_left_its_window_while_the_inner_store_answered_is_refused() {
    let _serial = serial();
    const WINDOW: Duration = Duration::from_secs(2);
    let store = Arc::new(MemoryBudgets::new());
    let other = Arc::new(slow_desk(&store, WINDOW, None));
    let outer = slow_desk(&store, WINDOW, None);
    let b = Arc::new(Mutex::new(None));
    let said = b.clone();
    let slow = SlowTake {
        inner: MemoryBudgets::new(),
        meanwhile: Mutex::new(Some(Box::new(move || {
            let ran = std::thread::spawn(move || run_when_free(&other, 2))
                .join()
                .unwrap();
            *said.lock().unwrap() = Some(ran);
        }))),
    };
    let inner = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("inner")
        .budget(BudgetScope::tool("a7h.note"), 100, HOUR)
        .budget_store(slow)
        .build()
        .unwrap();
    let notes = NOTES.load(Ordering::SeqCst);
    let a = outer.run(|| inner.run(|| note(1))).map_err(|d| d.code());
    let b = *b.lock().unwrap();
    assert_eq!(b, Some(Ok(2)), "B ran on the outer budget's freed unit");
    assert_eq!(
        a,
        Err(DenialCode::BudgetExhausted),
        "A ran within B's window, under the outer gate's budget of one call per window"
    );
    assert_eq!(NOTES.load(Ordering::SeqCst), notes + 1);
}

// The two-step path: the call approved out of band takes its unit when it is asked again, then waits
// on its audit sink (its `enter` record) until its unit has left the window and another gate of the
// budget has run B on it. If the approved call then runs, two calls ran within one window of a
// budget of one.
#[test]
fn h21_a_two_step_call_whose_unit_left_its_window_while_its_sink_wrote_is_counted_again() {
    let _serial = serial();
    const WINDOW: Duration = Duration::from_secs(2);
    let store = Arc::new(MemoryBudgets::new());
    let other = Arc::new(slow_desk(&store, WINDOW, None));
    let b = Arc::new(Mutex::new(None));
    let said = b.clone();
    let sink = Arc::new(Slow {
        armed: AtomicBool::new(false),
        meanwhile: Mutex::new(Some(Box::new(move || {
            let ran = std::thread::spawn(move || run_when_free(&other, 2))
                .join()
                .unwrap();
            *said.lock().unwrap() = Some(ran);
        }))),
    });
    let shared: Arc<dyn BudgetStore> = store.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("slow")
        .budget(BudgetScope::Agent, 1, WINDOW)
        .budget_store_shared(shared)
        .two_step_approvals()
        .audit_shared(sink.clone())
        .build()
        .unwrap();
    let pending = gate.run(|| wire(1)).unwrap_err();
    assert_eq!(pending.code(), DenialCode::ApprovalPending, "{pending}");
    gate.approve(pending.approval_token().unwrap()).unwrap();
    sink.armed.store(true, Ordering::SeqCst);
    let before = WIRES.load(Ordering::SeqCst);
    let a = gate.run(|| wire(1)).map_err(|d| d.code());
    assert_eq!((*b.lock().unwrap()), Some(Ok(2)), "B on the freed unit");
    assert_eq!(
        a,
        Err(DenialCode::BudgetExhausted),
        "the approved call ran within B's window, under a budget of one call per window"
    );
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
}

// SECURITY.md 13: "a budget that a policy replacement adds while a call is decided takes its unit at
// that call's commit point". Attack, no approver: call A (a note) waits on its audit sink while the
// operator's policy adds a budget of one call an hour for the agent and another gate of the same
// policy runs B, which takes that unit. At its commit point A must take a unit of the added budget,
// and find none.
#[test]
fn h22_a_budget_added_while_a_call_waits_on_its_sink_is_charged_at_its_commit_point() {
    let _serial = serial();
    let none = PolicyFile::parse("p.toml", "format = 1\n").unwrap();
    let one = "format = 1\n[[defaults.budgets]]\nagent = true\ncalls = 1\nper = \"1h\"\n";
    let one = PolicyFile::parse("p.toml", one).unwrap();
    let live = LivePolicy::new(none);
    let store: Arc<dyn BudgetStore> = Arc::new(MemoryBudgets::new());
    let build = |sink: Option<Arc<Slow>>| {
        let builder = Gate::builder()
            .mode(Mode::FullAuto)
            .agent("added")
            .policy(live.clone())
            .budget_store_shared(store.clone());
        match sink {
            Some(sink) => builder.audit_shared(sink),
            None => builder,
        }
        .build()
        .unwrap()
    };
    let other = Arc::new(build(None));
    let replaced = live.clone();
    let b = Arc::new(Mutex::new(None));
    let said = b.clone();
    let sink = Arc::new(Slow {
        armed: AtomicBool::new(true),
        meanwhile: Mutex::new(Some(Box::new(move || {
            assert!(replaced.replace(one, "ana"));
            let ran = std::thread::spawn(move || other.run(|| note(2)))
                .join()
                .unwrap();
            *said.lock().unwrap() = Some(ran.map_err(|d| d.code()));
        }))),
    });
    let gate = build(Some(sink));
    let a = gate.run(|| note(1)).map_err(|d| d.code());
    let b = (*b.lock().unwrap()).expect("the sink was asked");
    assert_eq!(b, Ok(2), "B took the added budget's one unit");
    assert_eq!(
        a,
        Err(DenialCode::BudgetExhausted),
        "A ran under the added budget of one an hour that B had spent"
    );
}

// The session grant's path: a call the grant runs without asking takes its unit, then waits on its
// audit sink until its unit has left the window and another gate of the budget has run B on it. If
// it then runs, two calls ran within one window of a budget of one.
#[test]
fn h23_a_granted_call_whose_unit_left_its_window_while_its_sink_wrote_is_counted_again() {
    let _serial = serial();
    const WINDOW: Duration = Duration::from_secs(2);
    let store = Arc::new(MemoryBudgets::new());
    let other = Arc::new(slow_desk(&store, WINDOW, None));
    let b = Arc::new(Mutex::new(None));
    let said = b.clone();
    let sink = Arc::new(Slow {
        armed: AtomicBool::new(false),
        meanwhile: Mutex::new(Some(Box::new(move || {
            let ran = std::thread::spawn(move || run_when_free(&other, 2))
                .join()
                .unwrap();
            *said.lock().unwrap() = Some(ran);
        }))),
    });
    let shared: Arc<dyn BudgetStore> = store.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("slow")
        .budget(BudgetScope::Agent, 1, WINDOW)
        .budget_store_shared(shared)
        .approver(|_: &ApprovalRequest<'_>| Approval::ApproveForSession(SessionGrant::tool(HOUR)))
        .audit_shared(sink.clone())
        .build()
        .unwrap();
    gate.run(|| wire(1)).expect("granted for the session");
    assert_eq!(gate.grants().len(), 1);
    // The granted call, once the first call's unit has left the window: it takes the unit, then
    // waits on its sink.
    sink.armed.store(true, Ordering::SeqCst);
    let a = loop {
        match gate.run(|| wire(3)) {
            Err(d) if d.code() == DenialCode::BudgetExhausted && b.lock().unwrap().is_none() => {
                std::thread::sleep(d.retry_after().unwrap() + Duration::from_millis(20));
            }
            other => break other.map_err(|d| d.code()),
        }
    };
    let b = *b.lock().unwrap();
    assert_eq!(b, Some(Ok(2)), "B on the freed unit");
    assert_eq!(
        a,
        Err(DenialCode::BudgetExhausted),
        "the granted call ran within B's window, under a budget of one call per window"
    );
}
