//! Attacks on guarantee 13 in one process: a call refused after its budget check must have its units
//! back before its refusal is returned, whatever refused it (an approver, a sink, a mode lowered or a
//! latch closed while it waited, a nested gate, a two-step store), sync or async; a store whose
//! release is slow, never resolves or panics; calls dropped while they wait; calls by name; grants.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::json;
use toolgate::approval::store::{ApprovalCall, ApprovalStore, Consumed, StoreError, StoreFuture};
use toolgate::approval::{ApprovalFuture, AsyncApprover, SessionGrant};
use toolgate::audit::{AuditError, AuditRecord, AuditSink};
use toolgate::gate::budget::{BudgetCharge, BudgetFuture, BudgetStore, ReleaseFuture, Reservation};
use toolgate::policy::TaintPolicy;
use toolgate::{Approval, ApprovalRequest, DenialCode, Denied, Gate, Mode, tool};

use crate::fixtures::lagging_budgets::{Lagging as Store, Release, SLOW, lagging as store};

const HOUR: Duration = Duration::from_secs(3600);

static POSTS: AtomicUsize = AtomicUsize::new(0);

/// Post a note: runs in FULL_AUTO.
#[tool(risk = "LOW_WRITE", domain = "a13it", callable)]
fn post(n: u64) -> Result<u64, Denied> {
    POSTS.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// Purge a folder: each call needs an approval in FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "a13it")]
fn purge(n: u64) -> Result<u64, Denied> {
    Ok(n)
}

/// Purge a folder, asynchronously.
#[tool(risk = "HIGH_WRITE", domain = "a13it")]
async fn purge_async(n: u64) -> Result<u64, Denied> {
    Ok(n)
}

/// Fetch a page: untrusted input.
#[tool(risk = "READ_ONLY", domain = "a13web", open_world, untrusted_output)]
fn fetch(url: String) -> Result<String, Denied> {
    Ok(url)
}

fn builder(store: &Arc<Store>, n: u32) -> toolgate::GateBuilder {
    Gate::builder()
        .mode(Mode::FullAuto)
        .agent("a13it")
        .budget(toolgate::gate::BudgetScope::tool("a13it.*"), n, HOUR)
        .budget_store_shared(store.clone())
}

/// A clean gate sharing the budget of `store`: whether a post runs there now.
fn witness_runs(store: &Arc<Store>, n: u32) -> Result<u64, Denied> {
    builder(store, n).build().unwrap().run(|| post(7))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

struct Broken;

impl AuditSink for Broken {
    fn record(&self, _: &AuditRecord) -> Result<(), AuditError> {
        Err(AuditError::new("a13: the disk is full"))
    }
}

/// Files every call as pending, or fails.
struct Pending(bool);

impl ApprovalStore for Pending {
    fn consume<'a>(
        &'a self,
        _call: &'a ApprovalCall,
    ) -> StoreFuture<'a, Result<Consumed, StoreError>> {
        let failing = self.0;
        Box::pin(async move {
            if failing {
                Err(StoreError::Unavailable("a13: down".into()))
            } else {
                Ok(Consumed::Pending {
                    code: DenialCode::ApprovalPending,
                    token: Some("a13-token".into()),
                })
            }
        })
    }

    fn answer<'a>(
        &'a self,
        _token: &'a str,
        _answer: toolgate::approval::store::Answer,
    ) -> StoreFuture<'a, Result<toolgate::approval::store::Binding, toolgate::approval::ApproveError>>
    {
        Box::pin(async { Err(toolgate::approval::ApproveError::UnknownToken) })
    }
}

const CAUSES: [&str; 6] = [
    "rejected",
    "audit sink fails",
    "two-step pending",
    "two-step store down",
    "mode lowered meanwhile",
    "latch closed meanwhile",
];

/// Each way a call is refused after its budget check, as a gate that refuses `purge` so.
fn refusing_gates(store: &Arc<Store>) -> Vec<(&'static str, Gate)> {
    let mut gates = vec![
        (
            "rejected",
            builder(store, 1)
                .approver(|_: &ApprovalRequest<'_>| Approval::Reject("no".into()))
                .build()
                .unwrap(),
        ),
        (
            "audit sink fails",
            builder(store, 1)
                .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
                .audit(Broken)
                .build()
                .unwrap(),
        ),
        (
            "two-step pending",
            builder(store, 1)
                .approval_store(Pending(false))
                .build()
                .unwrap(),
        ),
        (
            "two-step store down",
            builder(store, 1)
                .approval_store(Pending(true))
                .build()
                .unwrap(),
        ),
    ];
    // The mode lowered while the approver decides, then approved.
    let slot: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let held = slot.clone();
    let gate = builder(store, 1)
        .approver(move |_: &ApprovalRequest<'_>| {
            held.get().unwrap().lower(Mode::PartialAuto).unwrap();
            Approval::Approve
        })
        .build()
        .unwrap();
    slot.set(gate.clone()).ok().unwrap();
    gates.push(("mode lowered meanwhile", gate));
    // The latch closed (on another thread) while the approver decides, then approved.
    let slot: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let held = slot.clone();
    let gate = builder(store, 1)
        .taint_policy(TaintPolicy::Refuse)
        .approver(move |_: &ApprovalRequest<'_>| {
            let gate = held.get().unwrap().clone();
            std::thread::spawn(move || gate.run(|| fetch("https://evil.example".into())))
                .join()
                .unwrap()
                .unwrap();
            Approval::Approve
        })
        .build()
        .unwrap();
    slot.set(gate.clone()).ok().unwrap();
    gates.push(("latch closed meanwhile", gate));
    gates
}

// For each way a call is refused after its budget check, with a store whose release lands 300 ms
// later: the sync refusal comes back only once the release has landed, and a clean gate sharing the
// budget of 1 then runs a post.
#[test]
fn a13_20_sync_refusal_is_returned_only_after_its_release_landed() {
    for how in CAUSES {
        let (store, landed) = store(SLOW);
        let gate = refusing_gates(&store)
            .into_iter()
            .find(|(h, _)| *h == how)
            .unwrap()
            .1;
        let denied = gate.run(|| purge(1)).unwrap_err();
        assert_eq!(
            landed.load(Ordering::SeqCst),
            1,
            "{how}: refused {} before its unit was back",
            denied.code()
        );
        assert!(
            witness_runs(&store, 1).is_ok(),
            "{how}: the unit is not back"
        );
    }
}

// The same for async calls.
#[test]
fn a13_21_async_refusal_is_returned_only_after_its_release_landed() {
    for how in CAUSES {
        let (store, landed) = store(SLOW);
        let gate = refusing_gates(&store)
            .into_iter()
            .find(|(h, _)| *h == how)
            .unwrap()
            .1;
        let denied = rt().block_on(gate.scope(purge_async(1))).unwrap_err();
        assert_eq!(
            landed.load(Ordering::SeqCst),
            1,
            "{how}: refused {} before its unit was back",
            denied.code()
        );
        assert!(
            witness_runs(&store, 1).is_ok(),
            "{how}: the unit is not back"
        );
    }
}

// A custom store whose release future does not resolve: the refused call waits for it, as for any
// store's answer (a store's futures must resolve; PostgresStore's do within its timeout). It holds up
// nothing else: other calls through the gate and its clones run, the kill switch takes effect, and the
// refusal comes as soon as the release resolves.
#[test]
fn a13_22_a_release_that_does_not_resolve_holds_up_only_its_own_refusal() {
    let _serial = crate::common::serial();
    let (store, landed) = store(Release::Held);
    let gate = builder(&store, 2)
        .approver(|_: &ApprovalRequest<'_>| Approval::Reject("no".into()))
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let refused = gate.clone();
    std::thread::spawn(move || {
        let _ = tx.send(refused.run(|| purge(1)).map_err(|d| d.code()));
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.waiting() == 0 {
        assert!(Instant::now() < deadline, "the release was never asked for");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(landed.load(Ordering::SeqCst), 1);
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "the refusal came before its release resolved"
    );
    // Nothing else waits for it: the unit it gave back runs a post, and the kill switch works.
    assert_eq!(gate.clone().run(|| post(2)).unwrap(), 2);
    gate.lower(Mode::Shadow).unwrap();
    assert_eq!(
        gate.run(|| post(3)).unwrap_err().code(),
        DenialCode::ModeNotAllowed
    );
    store.let_go();
    let got = rx.recv_timeout(Duration::from_secs(10));
    assert_eq!(got, Ok(Err(DenialCode::ApprovalRejected)));
}

// A release future that panics when polled, and a release that panics when called: the caller gets
// its refusal (no panic), the gate goes on, and the budget is never exceeded.
#[test]
fn a13_23_a_panicking_release_neither_panics_the_caller_nor_breaks_the_gate() {
    for release in [Release::PanicInPoll, Release::PanicInCall] {
        let (store, _) = store(release);
        let gate = builder(&store, 2)
            .approver(|_: &ApprovalRequest<'_>| Approval::Reject("no".into()))
            .build()
            .unwrap();
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gate.run(|| purge(1)).map_err(|d| d.code())
        }));
        assert!(
            matches!(refused, Ok(Err(DenialCode::ApprovalRejected))),
            "{refused:?}"
        );
        let async_refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt().block_on(gate.scope(purge_async(1)))
                .map_err(|d| d.code())
        }));
        assert!(
            matches!(async_refused, Ok(Err(DenialCode::ApprovalRejected))),
            "{async_refused:?}"
        );
        let ran = (0..4).filter(|i| gate.run(|| post(*i)).is_ok()).count();
        assert!(ran <= 2, "a budget of 2 ran {ran}");
        if release == Release::PanicInPoll {
            assert_eq!(ran, 2, "the units given back before the poll panicked");
        }
    }
}

// An async call dropped while its refusal waits for the release, and one dropped while an async
// approver never answers: their units come back all the same.
#[test]
fn a13_24_async_calls_dropped_while_waiting_give_their_units_back() {
    let (first, _) = store(Release::Slow(Duration::from_millis(500)));
    let gate = builder(&first, 1)
        .approver(|_: &ApprovalRequest<'_>| Approval::Reject("no".into()))
        .build()
        .unwrap();
    let rt = rt();
    let cut = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(100), gate.scope(purge_async(1))).await
    });
    assert!(cut.is_err(), "the refusal waited for a 500 ms release");
    assert!(
        eventually(|| witness_runs(&first, 1).is_ok()),
        "dropped while released"
    );

    struct Silent;
    impl AsyncApprover for Silent {
        fn approve<'a>(&'a self, _: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
            Box::pin(std::future::pending())
        }
    }
    let (store, _) = store(SLOW);
    let gate = builder(&store, 1).async_approver(Silent).build().unwrap();
    let cut = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(100), gate.scope(purge_async(1))).await
    });
    assert!(cut.is_err());
    assert!(
        eventually(|| witness_runs(&store, 1).is_ok()),
        "dropped while the approver waits"
    );
}

// By name: a call whose arguments do not fit takes no unit; a call by name counts once.
#[test]
fn a13_25_calls_by_name_count_once_and_bad_arguments_take_nothing() {
    let (store, _) = store(SLOW);
    let gate = builder(&store, 1).build().unwrap();
    let rt = rt();
    for bad in [json!({"n": "x"}), json!({}), json!({"n": 1, "m": 2})] {
        let got = rt.block_on(toolgate::registry().call(&gate, "a13it.post", bad.clone()));
        assert!(got.is_err(), "{bad}");
    }
    let got = rt.block_on(toolgate::registry().call(&gate, "a13it.post", json!({"n": 1})));
    assert!(
        got.is_ok(),
        "a unit was spent by calls that never ran: {got:?}"
    );
    let got = rt.block_on(toolgate::registry().call(&gate, "a13it.post", json!({"n": 2})));
    assert!(got.is_err(), "a budget of 1 ran 2 calls by name");
    assert_eq!(
        gate.run(|| post(3)).unwrap_err().code(),
        DenialCode::BudgetExhausted
    );
}

// A session grant does not let a budget-covered tool skip its count, and the approver is not asked
// for a call the budget refuses.
#[test]
fn a13_26_a_session_grant_does_not_skip_the_budget() {
    let (store, _) = store(SLOW);
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let gate = builder(&store, 1)
        .approver(move |_: &ApprovalRequest<'_>| {
            counter.fetch_add(1, Ordering::SeqCst);
            Approval::ApproveForSession(SessionGrant::tool(HOUR))
        })
        .build()
        .unwrap();
    gate.run(|| purge(1)).unwrap();
    for n in 2..5 {
        let denied = gate.run(|| purge(n)).unwrap_err();
        assert_eq!(denied.code(), DenialCode::BudgetExhausted);
        let denied = rt().block_on(gate.scope(purge_async(n))).unwrap_err();
        assert_eq!(denied.code(), DenialCode::BudgetExhausted);
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

// Nested gates: the outer gate takes a unit of its slow store, the inner gate's approver rejects. The
// refusal comes back only once the outer gate's unit is back.
#[test]
fn a13_27_nested_gates_refusal_waits_for_the_outer_gates_release() {
    let (store, landed) = store(SLOW);
    let outer = builder(&store, 1)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_: &ApprovalRequest<'_>| Approval::Reject("inner says no".into()))
        .build()
        .unwrap();
    let denied = outer.run(|| inner.run(|| purge(1))).unwrap_err();
    assert_eq!(
        landed.load(Ordering::SeqCst),
        1,
        "refused {} before the outer unit was back",
        denied.code()
    );
    assert!(witness_runs(&store, 1).is_ok());
}

// Eight threads alternate a rejected purge and a post under a budget of 5 with slow releases: never
// more than 5 posts, and once every refusal is returned, exactly 5 in all.
#[test]
fn a13_28_threads_mixing_refusals_and_runs_count_exactly_the_budget() {
    let (store, _) = store(Release::Slow(Duration::from_millis(5)));
    let gate = builder(&store, 5)
        .approver(|_: &ApprovalRequest<'_>| Approval::Reject("no".into()))
        .build()
        .unwrap();
    let ran = Arc::new(Mutex::new(0));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (gate, ran) = (gate.clone(), ran.clone());
            std::thread::spawn(move || {
                for i in 0..20 {
                    let _ = gate.run(|| purge(t * 100 + i));
                    if gate.run(|| post(t * 100 + i)).is_ok() {
                        *ran.lock().unwrap() += 1;
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut ran = *ran.lock().unwrap();
    assert!(ran <= 5, "a budget of 5 ran {ran}");
    let start = Instant::now();
    while gate.run(|| post(999)).is_ok() {
        ran += 1;
        assert!(start.elapsed() < Duration::from_secs(5));
    }
    assert_eq!(ran, 5, "posts that ran under a budget of 5");
}

static DISK_STATE: AtomicUsize = AtomicUsize::new(0);

fn disk_state(disk: &str) -> Result<u64, String> {
    let _ = disk;
    Ok(DISK_STATE.load(Ordering::SeqCst) as u64)
}

/// Resize a disk: its state is read before the approval and again before the body.
#[tool(risk = "HIGH_WRITE", domain = "a13it", target = disk, evidence = disk_state)]
async fn resize(disk: String) -> Result<(), Denied> {
    let _ = disk;
    Ok(())
}

/// Changes the disk's state while it decides, then approves; it answers after a yield, so that the
/// async call's decision waits for it.
struct Shifty;

impl AsyncApprover for Shifty {
    fn approve<'a>(&'a self, _: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        Box::pin(async {
            DISK_STATE.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            Approval::Approve
        })
    }
}

// An approved async call whose target's state changed while its decision waited is refused just
// before its body (EVIDENCE_CHANGED). SECURITY.md's guarantee 13 says its unit is back before the
// refusal is returned; docs/budgets.md names this case as an exception (given back without waiting).
#[test]
fn a13_29_an_async_call_refused_for_changed_evidence_has_its_unit_back_first() {
    let (store, landed) = store(SLOW);
    let gate = builder(&store, 1).async_approver(Shifty).build().unwrap();
    let denied = rt()
        .block_on(gate.scope(resize("disk-1".into())))
        .unwrap_err();
    assert_eq!(denied.code(), DenialCode::EvidenceChanged, "{denied}");
    assert_eq!(
        landed.load(Ordering::SeqCst),
        1,
        "refused {} before its unit was back",
        denied.code()
    );
}

// Nested gates: the outer gate takes a unit of its slow store, the inner gate's own budget is spent.
// The BUDGET_EXHAUSTED refusal comes back only once the outer gate's unit is back.
#[test]
fn a13_30_nested_gates_inner_budget_refusal_waits_for_the_outer_release() {
    let (store, landed) = store(SLOW);
    let outer = builder(&store, 1)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::FullAuto)
        .budget(toolgate::gate::BudgetScope::Agent, 1, HOUR)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .build()
        .unwrap();
    inner.run(|| post(0)).unwrap();
    let denied = outer.run(|| inner.run(|| post(1))).unwrap_err();
    assert_eq!(denied.code(), DenialCode::BudgetExhausted);
    assert_eq!(
        landed.load(Ordering::SeqCst),
        1,
        "refused {} before the outer unit was back",
        denied.code()
    );
    assert!(witness_runs(&store, 1).is_ok());
}

struct Counter;

#[toolgate::toolset(domain = "a13it")]
impl Counter {
    /// Bump the counter.
    #[tool(risk = "LOW_WRITE", callable)]
    pub fn bump(&self, n: u64) -> Result<u64, Denied> {
        Ok(n)
    }
}

/// Erase a folder: needs an approval in FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "a13it", callable)]
async fn erase(n: u64) -> Result<u64, Denied> {
    Ok(n)
}

/// Erase a folder, synchronously.
#[tool(risk = "HIGH_WRITE", domain = "a13it", callable)]
fn erase_now(n: u64) -> Result<u64, Denied> {
    Ok(n)
}

// By name: a method called without its instance (NO_INSTANCE) takes no unit; a call by name refused by
// its approver, async or sync, returns only once its unit is back.
#[test]
fn a13_31_calls_by_name_refused_give_their_units_back_first() {
    let (unused, _) = store(SLOW);
    let gate = builder(&unused, 1)
        .approver(|_: &ApprovalRequest<'_>| Approval::Reject("no".into()))
        .build()
        .unwrap();
    let rt = rt();
    let got = rt.block_on(toolgate::registry().call(&gate, "a13it.bump", json!({"n": 1})));
    assert!(got.is_err());
    assert!(
        witness_runs(&unused, 1).is_ok(),
        "NO_INSTANCE spent a unit: {got:?}"
    );
    for id in ["a13it.erase", "a13it.erase_now"] {
        let (store, landed) = store(SLOW);
        let gate = builder(&store, 1)
            .approver(|_: &ApprovalRequest<'_>| Approval::Reject("no".into()))
            .build()
            .unwrap();
        let got = rt.block_on(toolgate::registry().call(&gate, id, json!({"n": 1})));
        assert!(got.is_err(), "{id}");
        assert_eq!(
            landed.load(Ordering::SeqCst),
            1,
            "{id} by name: refused before its unit was back: {got:?}"
        );
    }
}

/// Takes the units, then says it failed (an answer lost after the statement committed); releases
/// slowly, as a remote store does.
struct LostAnswer(Arc<Store>);

impl BudgetStore for LostAnswer {
    fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        let taken = self.0.take(charges, reservation);
        Box::pin(async move {
            let _ = taken.await;
            Err(StoreError::Timeout)
        })
    }

    fn release(&self, charges: &[BudgetCharge], reservation: Reservation) -> ReleaseFuture {
        self.0.release(charges, reservation)
    }

    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.0.hold(charges, reservation)
    }
}

// A store that took the unit but whose answer was lost: the call is refused BUDGET_STORE_UNAVAILABLE
// at once, without waiting a second time for the store that just failed; the unit it may hold is given
// back after, and never counts a call that ran.
#[test]
fn a13_32_a_lost_answer_is_refused_at_once_and_its_unit_comes_back_after() {
    let (inner, landed) = store(SLOW);
    let lost = Arc::new(LostAnswer(inner.clone()));
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("a13it")
        .budget(toolgate::gate::BudgetScope::tool("a13it.*"), 1, HOUR)
        .budget_store_shared(lost)
        .build()
        .unwrap();
    let denied = gate.run(|| post(1)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::BudgetStoreUnavailable);
    assert_eq!(
        landed.load(Ordering::SeqCst),
        0,
        "the refusal waited for the failed store"
    );
    assert!(
        eventually(|| landed.load(Ordering::SeqCst) == 1),
        "the unit never came back"
    );
    assert!(witness_runs(&inner, 1).is_ok(), "the unit is back");
}

// A call waits for its approver (a person at a console) holding its reserved unit: the unit counts,
// so another call meanwhile is refused BUDGET_EXHAUSTED (were the waiting call approved, the budget
// would otherwise be exceeded), told to retry when a used unit would leave the window. Once the waiting
// call is refused, its unit is back before its refusal is returned: a call right after runs.
#[test]
fn a13_33_a_unit_reserved_by_a_call_waiting_for_its_approver_counts_until_it_is_refused() {
    let (store, _) = store(SLOW);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = Mutex::new(rx);
    let asked = Arc::new(std::sync::Barrier::new(2));
    let ask = asked.clone();
    let gate = builder(&store, 1)
        .approver(move |_: &ApprovalRequest<'_>| {
            ask.wait();
            let _ = rx.lock().unwrap().recv();
            Approval::Reject("no".into())
        })
        .build()
        .unwrap();
    let waiting = {
        let gate = gate.clone();
        std::thread::spawn(move || gate.run(|| purge(1)).map_err(|d| d.code()))
    };
    asked.wait();
    let other = gate.run(|| post(1)).unwrap_err();
    assert_eq!(other.code(), DenialCode::BudgetExhausted);
    let retry = other.retry_after().unwrap();
    assert!(retry > HOUR - Duration::from_secs(60), "{retry:?}");
    tx.send(()).unwrap();
    assert_eq!(waiting.join().unwrap(), Err(DenialCode::ApprovalRejected));
    assert!(gate.run(|| post(2)).is_ok(), "the unit is back");
}

struct Panicking;

impl AuditSink for Panicking {
    fn record(&self, _: &AuditRecord) -> Result<(), AuditError> {
        panic!("a13: the sink panics")
    }
}

/// An argument whose serialization panics, after the budget check, where the decision writes it out.
struct Explosive;

impl serde::Serialize for Explosive {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        panic!("a13: the argument panics")
    }
}

impl schemars::JsonSchema for Explosive {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Explosive".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string"})
    }
}

/// Purge with an argument that cannot be written.
#[tool(risk = "HIGH_WRITE", domain = "a13it")]
fn purge_with(what: Explosive) -> Result<(), Denied> {
    let _ = what;
    Ok(())
}

// An approver and a sink that panic after the budget check: the caller gets a refusal (or the panic)
// only once the unit is back.
#[test]
fn a13_34_panicking_approver_or_sink_returns_only_once_the_unit_is_back() {
    type MakeGate = Box<dyn Fn(&Arc<Store>) -> Gate>;
    let cases: Vec<(&str, MakeGate)> = vec![
        (
            "approver panics",
            Box::new(|s| {
                builder(s, 1)
                    .approver(|_: &ApprovalRequest<'_>| -> Approval { panic!("a13: approver") })
                    .build()
                    .unwrap()
            }),
        ),
        (
            "sink panics",
            Box::new(|s| {
                builder(s, 1)
                    .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
                    .audit(Panicking)
                    .build()
                    .unwrap()
            }),
        ),
    ];
    for (how, make) in cases {
        let (store, landed) = store(SLOW);
        let gate = make(&store);
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gate.run(|| purge(1)).map_err(|d| d.code())
        }));
        assert!(!matches!(got, Ok(Ok(_))), "{how}: ran");
        landed_by_then(&landed, &got, how);
    }
    let (store, landed) = store(SLOW);
    let gate = builder(&store, 1)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .build()
        .unwrap();
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        gate.run(|| purge_with(Explosive)).map_err(|d| d.code())
    }));
    assert!(!matches!(got, Ok(Ok(_))), "ran");
    landed_by_then(&landed, &got, "an argument that panics");
}

/// A refusal must find the unit back; a panic (a sink that panics unwinds the call, docs/audit.md)
/// gives it back as it unwinds, without waiting: back within a moment.
fn landed_by_then<T: std::fmt::Debug>(
    landed: &AtomicUsize,
    got: &std::thread::Result<T>,
    how: &str,
) {
    if got.is_err() {
        eventually(|| landed.load(Ordering::SeqCst) == 1);
    }
    assert_eq!(
        landed.load(Ordering::SeqCst),
        1,
        "{how}: {got:?} before the unit was back"
    );
}

/// Whether `done` holds within ten seconds: what is given back without waiting lands in a moment, and
/// a loaded machine may stretch the moment.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}
