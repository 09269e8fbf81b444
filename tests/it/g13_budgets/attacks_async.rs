//! Attacks on guarantee 13 where an async call's decision waited and its last comparison refuses it
//! (arguments mutated through interior mutability while the approver thought: `APPROVAL_MISMATCH`; the
//! target's state changed: `EVIDENCE_CHANGED`): its units must be back before the refusal is returned,
//! whether the call is direct, by name, over MCP, nested, dropped, polled again or moved between
//! threads; no record may claim it ran; and the generated code's locals must not clash with parameters.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use serde_json::json;
use toolgate::approval::{ApprovalFuture, AsyncApprover};
use toolgate::audit::{AuditRecord, MemorySink, Outcome, Stage};
use toolgate::policy::TaintPolicy;
use toolgate::{Approval, ApprovalRequest, DenialCode, Denied, Gate, Mode, tool};

use crate::fixtures::lagging_budgets::{Lagging as Store, Release, SLOW, lagging as make_store};

const HOUR: Duration = Duration::from_secs(3600);

fn builder(store: &Arc<Store>, n: u32) -> toolgate::GateBuilder {
    Gate::builder()
        .mode(Mode::FullAuto)
        .agent("a135")
        .budget(toolgate::gate::BudgetScope::tool("a135.*"), n, HOUR)
        .budget_store_shared(store.clone())
}

fn witness_runs(store: &Arc<Store>, n: u32) -> Result<u64, Denied> {
    builder(store, n).build().unwrap().run(|| note(7))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Resolves after `ms` on a std thread: a wait that needs no executor.
fn later(ms: u64) -> impl Future<Output = ()> + Send {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(ms));
        let _ = tx.send(());
    });
    async move {
        let _ = rx.await;
    }
}

// ---------------------------------------------------------------------------------------------------
// Tools.

/// An argument with interior mutability: serialized as the value it holds now; counts body runs.
#[derive(Clone, Default)]
struct Knob {
    value: Arc<AtomicU64>,
    ran: Arc<AtomicUsize>,
}

impl serde::Serialize for Knob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.value.load(Ordering::SeqCst))
    }
}

impl schemars::JsonSchema for Knob {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Knob".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "integer"})
    }
}

/// Write a note: runs in FULL_AUTO.
#[tool(risk = "LOW_WRITE", domain = "a135", callable)]
fn note(n: u64) -> Result<u64, Denied> {
    Ok(n)
}

/// Turn a knob: needs an approval in FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "a135")]
async fn turn(knob: Knob) -> Result<u64, Denied> {
    knob.ran.fetch_add(1, Ordering::SeqCst);
    Ok(knob.value.load(Ordering::SeqCst))
}

/// Turn a knob, synchronously.
#[tool(risk = "HIGH_WRITE", domain = "a135")]
fn turn_now(knob: Knob) -> Result<u64, Denied> {
    knob.ran.fetch_add(1, Ordering::SeqCst);
    Ok(knob.value.load(Ordering::SeqCst))
}

/// Turn an outer knob, and inside, an inner one through the same gate.
#[tool(risk = "HIGH_WRITE", domain = "a135")]
async fn turn_both(outer: Knob, inner: Knob) -> Result<(u64, Result<u64, DenialCode>), Denied> {
    outer.ran.fetch_add(1, Ordering::SeqCst);
    let got = turn(inner).await.map_err(|d| d.code());
    Ok((outer.value.load(Ordering::SeqCst), got))
}

/// The targets' states, per target: each test has its own.
static STATES: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);
static RESHAPED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn state_of(target: &str) -> Result<u64, String> {
    Ok(*STATES
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .entry(target.to_owned())
        .or_insert(0))
}

fn bump(target: &str) {
    *STATES
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .entry(target.to_owned())
        .or_insert(0) += 1;
}

fn reshaped(target: &str) -> usize {
    RESHAPED
        .lock()
        .unwrap()
        .iter()
        .filter(|t| *t == target)
        .count()
}

/// Reshape a disk: its state is read before the approval and again before the body.
#[tool(risk = "HIGH_WRITE", domain = "a135", target = disk, evidence = state_of, callable)]
async fn reshape(disk: String) -> Result<(), Denied> {
    RESHAPED.lock().unwrap().push(disk);
    Ok(())
}

/// Read an untrusted page.
#[tool(risk = "READ_ONLY", domain = "a135web", open_world, untrusted_output)]
fn read_page(url: String) -> Result<String, Denied> {
    Ok(url)
}

/// An async approver that turns the knobs it is given (or bumps the request's target's state), waits
/// on a std thread, then approves.
#[derive(Clone, Default)]
struct Twist {
    knobs: Arc<Mutex<Vec<Knob>>>,
    asked: Arc<AtomicUsize>,
    /// Only requests for this tool id are twisted (all when None).
    only: Option<&'static str>,
}

impl Twist {
    fn turning(knob: &Knob) -> Twist {
        let twist = Twist::default();
        twist.knobs.lock().unwrap().push(knob.clone());
        twist
    }
}

impl AsyncApprover for Twist {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let twist = self.only.is_none_or(|id| request.tool.id == id);
        if twist {
            for knob in self.knobs.lock().unwrap().iter() {
                knob.value.fetch_add(1, Ordering::SeqCst);
            }
            if let Some(target) = request.target {
                bump(target);
            }
        }
        Box::pin(async move {
            later(20).await;
            Approval::Approve
        })
    }
}

/// The records of `sink` for one tool id, checked: no record says a call of it ran; each call is one
/// `refused` record, or one `enter` and one `exit` of outcome `refused` with `code`.
fn no_record_says_it_ran(sink: &MemorySink, tool: &str, code: DenialCode) {
    let records: Vec<AuditRecord> = sink
        .records()
        .into_iter()
        .filter(|r| r.tool == tool)
        .collect();
    assert!(!records.is_empty(), "{tool}: no record at all");
    let mut calls: HashMap<(u64, u64), Vec<&AuditRecord>> = HashMap::new();
    for r in &records {
        calls.entry((r.gate, r.call)).or_default().push(r);
    }
    for (call, rs) in calls {
        let stages: Vec<Stage> = rs.iter().map(|r| r.stage).collect();
        let enters = stages.iter().filter(|s| **s == Stage::Enter).count();
        let exits: Vec<_> = rs.iter().filter(|r| r.stage == Stage::Exit).collect();
        let refused: Vec<_> = rs.iter().filter(|r| r.stage == Stage::Refused).collect();
        let shape = format!("{tool} call {call:?}: {stages:?}");
        if enters == 0 {
            assert!(exits.is_empty(), "{shape}: an exit without its enter");
            assert_eq!(refused.len(), 1, "{shape}");
            assert_eq!(refused[0].code.as_deref(), Some(code.as_str()), "{shape}");
        } else {
            assert_eq!(enters, 1, "{shape}");
            assert_eq!(exits.len(), 1, "{shape}: one exit for its enter");
            assert_eq!(exits[0].outcome, Some(Outcome::Refused), "{shape}");
            assert_eq!(exits[0].code.as_deref(), Some(code.as_str()), "{shape}");
            assert!(refused.is_empty(), "{shape}: both an enter and a refused");
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Attacks.

// An async approver mutates the argument (interior mutability) while it decides, then approves: the
// call is refused APPROVAL_MISMATCH, the body never runs, and the unit (released slowly) is back before
// the refusal is returned. The same for a sync tool under a sync approver that mutates it.
#[test]
fn a13_50_an_argument_mutated_by_the_approver_is_refused_with_its_unit_back_first() {
    let (store, landed) = make_store(SLOW);
    let knob = Knob::default();
    let gate = builder(&store, 1)
        .async_approver(Twist::turning(&knob))
        .build()
        .unwrap();
    let denied = rt().block_on(gate.scope(turn(knob.clone()))).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalMismatch, "{denied}");
    assert_eq!(knob.ran.load(Ordering::SeqCst), 0, "the body ran");
    assert_eq!(
        landed.load(Ordering::SeqCst),
        1,
        "refused {} before its unit was back",
        denied.code()
    );
    assert!(witness_runs(&store, 1).is_ok(), "the unit is not back");

    let (store, landed) = make_store(SLOW);
    let knob = Knob::default();
    let turned = knob.clone();
    let gate = builder(&store, 1)
        .approver(move |_: &ApprovalRequest<'_>| {
            turned.value.fetch_add(1, Ordering::SeqCst);
            Approval::Approve
        })
        .build()
        .unwrap();
    let denied = gate.run(|| turn_now(knob.clone())).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalMismatch, "{denied}");
    assert_eq!(knob.ran.load(Ordering::SeqCst), 0, "the sync body ran");
    assert_eq!(landed.load(Ordering::SeqCst), 1, "sync: refused first");
    assert!(witness_runs(&store, 1).is_ok());
}

// The mutated call dropped (tokio timeout) exactly while its refusal waits for a 600 ms release: no
// panic, the unit still comes back, the body never runs, and the records say no call ran.
#[test]
fn a13_51_a_mismatched_call_dropped_while_its_release_waits_gives_its_unit_back() {
    let (store, landed) = make_store(Release::Slow(Duration::from_millis(600)));
    let knob = Knob::default();
    let sink = Arc::new(MemorySink::new());
    let gate = builder(&store, 1)
        .async_approver(Twist::turning(&knob))
        .audit_shared(sink.clone())
        .build()
        .unwrap();
    let rt = rt();
    // The approver answers after ~20 ms; the release takes 600 ms: cut in between.
    let cut = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(250), gate.scope(turn(knob.clone()))).await
    });
    assert!(cut.is_err(), "returned before its 600 ms release: {cut:?}");
    assert_eq!(knob.ran.load(Ordering::SeqCst), 0, "the body ran");
    assert!(
        eventually(|| landed.load(Ordering::SeqCst) == 1),
        "the release was never asked for or never landed"
    );
    assert!(witness_runs(&store, 1).is_ok(), "the unit is not back");
    // Dropped (not refused to the caller): whatever the records are, none says it ran.
    for r in sink.records().iter().filter(|r| r.tool == "a135.turn") {
        assert!(
            !(r.stage == Stage::Exit
                && matches!(
                    r.outcome,
                    Some(Outcome::Ok | Outcome::Error | Outcome::Panic)
                )),
            "a record claims the dropped call ran: {r:?}"
        );
    }
    let enters = sink
        .records()
        .iter()
        .filter(|r| r.tool == "a135.turn" && r.stage == Stage::Enter)
        .count();
    let exits = sink
        .records()
        .iter()
        .filter(|r| r.tool == "a135.turn" && r.stage == Stage::Exit)
        .count();
    assert_eq!(enters, exits, "an enter without its exit (or the reverse)");
}

/// A vault whose target sits behind a lock: the receiver of a callable async method.
#[derive(Default)]
struct Vault {
    target: Mutex<String>,
    ran: AtomicUsize,
}

impl serde::Serialize for Vault {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.target.lock().unwrap())
    }
}

#[toolgate::toolset(domain = "a135")]
impl Vault {
    /// Empty the vault: needs an approval in FULL_AUTO.
    #[tool(risk = "HIGH_WRITE", callable)]
    pub async fn empty(&self, n: u64) -> Result<u64, Denied> {
        self.ran.fetch_add(1, Ordering::SeqCst);
        Ok(n)
    }
}

/// An async approver that retargets the vault while it decides.
struct Retarget(Arc<Vault>);

impl AsyncApprover for Retarget {
    fn approve<'a>(&'a self, _: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        self.0.target.lock().unwrap().push_str("-production");
        Box::pin(async {
            later(20).await;
            Approval::Approve
        })
    }
}

// By name: a callable async method whose receiver is retargeted while the async approver decides, and
// a callable async tool whose target's state changes meanwhile: both refused, bodies never run, unit
// back before the refusal is returned.
#[test]
fn a13_52_by_name_refusals_at_the_last_comparison_have_their_units_back_first() {
    let rt = rt();
    let (store, landed) = make_store(SLOW);
    let vault = Arc::new(Vault {
        target: Mutex::new("staging".into()),
        ran: AtomicUsize::new(0),
    });
    let gate = builder(&store, 1)
        .async_approver(Retarget(vault.clone()))
        .build()
        .unwrap();
    let instances = toolgate::registry::Instances::new().with_shared(vault.clone());
    let got = rt.block_on(toolgate::registry().call_with(
        &gate,
        &instances,
        "a135.empty",
        json!({"n": 1}),
    ));
    let err = got.expect_err("a retargeted receiver ran");
    assert_eq!(err.code(), "APPROVAL_MISMATCH", "{err:?}");
    assert_eq!(vault.ran.load(Ordering::SeqCst), 0, "the body ran");
    assert_eq!(
        landed.load(Ordering::SeqCst),
        1,
        "by name: refused ({err:?}) before its unit was back"
    );
    assert!(witness_runs(&store, 1).is_ok());

    let (store, landed) = make_store(SLOW);
    let gate = builder(&store, 1)
        .async_approver(Twist::default())
        .build()
        .unwrap();
    let got = rt.block_on(toolgate::registry().call(
        &gate,
        "a135.reshape",
        json!({"disk": "a13_52-disk"}),
    ));
    let err = got.expect_err("a changed target ran");
    assert_eq!(err.code(), "EVIDENCE_CHANGED", "{err:?}");
    assert_eq!(reshaped("a13_52-disk"), 0, "the body ran");
    assert_eq!(
        landed.load(Ordering::SeqCst),
        1,
        "by name: refused ({err:?}) before its unit was back"
    );
}

fn poll_once<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

// A tool future refused at its last comparison, polled again after it completed: it may panic (as an
// `async fn` does), but it must not release the unit a second time (a second release would let a
// budget of 1 run twice), nor run the body.
#[test]
fn a13_53_a_refused_future_polled_again_does_not_release_twice() {
    let (store, landed) = make_store(Release::Slow(Duration::from_millis(50)));
    let knob = Knob::default();
    let gate = builder(&store, 1)
        .async_approver(Twist::turning(&knob))
        .build()
        .unwrap();
    let mut fut = Box::pin(gate.scope(turn(knob.clone())));
    let rt = rt();
    let got = rt.block_on(std::future::poll_fn(|cx| fut.as_mut().poll(cx)));
    assert_eq!(got.unwrap_err().code(), DenialCode::ApprovalMismatch);
    assert_eq!(landed.load(Ordering::SeqCst), 1);
    // The unit it gave back is spent by another call.
    assert!(gate.run(|| note(1)).is_ok());
    for _ in 0..3 {
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _guard = rt.enter();
            poll_once(fut.as_mut()).map(|r| r.map_err(|d| d.code()))
        }));
        assert!(
            !matches!(again, Ok(Poll::Ready(Ok(_)))),
            "polled again, it ran: {again:?}"
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(knob.ran.load(Ordering::SeqCst), 0, "the body ran");
    assert_eq!(landed.load(Ordering::SeqCst), 1, "released twice");
    assert_eq!(
        gate.run(|| note(2)).unwrap_err().code(),
        DenialCode::BudgetExhausted,
        "a budget of 1 ran twice"
    );
}

fn assert_send<T: Send>(t: T) -> T {
    t
}

// A tool future polled once on one thread (its approver or its release still waiting), then sent to
// another thread and finished there (Send): refused, its unit back before the refusal, body never run.
// Both while the approver waits and while the release waits.
#[test]
fn a13_54_a_tool_future_moved_across_threads_between_polls_keeps_the_guarantee() {
    for pause_at_release in [false, true] {
        let (store, landed) = make_store(Release::Held);
        let knob = Knob::default();
        let gate = builder(&store, 1)
            .async_approver(Twist::turning(&knob))
            .build()
            .unwrap();
        let mut fut = Box::pin(assert_send(gate.scope(turn(knob.clone()))));
        assert!(poll_once(fut.as_mut()).is_pending());
        if pause_at_release {
            // Poll on this thread until it waits for its (held) release.
            assert!(
                eventually(|| {
                    assert!(poll_once(fut.as_mut()).is_pending());
                    store.waiting() == 1
                }),
                "never reached its release"
            );
        }
        let other = {
            let store = store.clone();
            std::thread::spawn(move || {
                let rt = rt();
                rt.block_on(async move {
                    let s = store.clone();
                    let releaser = tokio::spawn(async move {
                        while s.waiting() == 0 {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        s.let_go();
                    });
                    let got = fut.await.map_err(|d| d.code());
                    let _ = releaser.await;
                    got
                })
            })
        };
        let got = other.join().expect("the moved future panicked");
        assert_eq!(got, Err(DenialCode::ApprovalMismatch), "{pause_at_release}");
        assert_eq!(knob.ran.load(Ordering::SeqCst), 0);
        assert_eq!(landed.load(Ordering::SeqCst), 1);
        assert!(witness_runs(&store, 1).is_ok(), "{pause_at_release}");
    }
}

// Nested async tools: an approved outer tool's body calls an inner gated async tool whose argument the
// approver mutates; the inner call is refused APPROVAL_MISMATCH with its unit back before the outer body
// sees the refusal; the outer runs and keeps its own unit. Budget of 2: the outer and one more.
#[test]
fn a13_55_a_nested_async_tool_refused_inside_a_body_gives_back_only_its_own_unit() {
    let (store, landed) = make_store(SLOW);
    let (outer, inner) = (Knob::default(), Knob::default());
    let twist = Twist {
        only: Some("a135.turn"),
        ..Twist::turning(&inner)
    };
    let gate = builder(&store, 2).async_approver(twist).build().unwrap();
    let landed_seen = Arc::new(AtomicUsize::new(usize::MAX));
    let got = rt()
        .block_on(gate.scope(async {
            let r = turn_both(outer.clone(), inner.clone()).await;
            landed_seen.store(landed.load(Ordering::SeqCst), Ordering::SeqCst);
            r
        }))
        .expect("the outer call was refused");
    assert_eq!(
        got.1,
        Err(DenialCode::ApprovalMismatch),
        "inner: {:?}",
        got.1
    );
    assert_eq!(outer.ran.load(Ordering::SeqCst), 1);
    assert_eq!(inner.ran.load(Ordering::SeqCst), 0, "the inner body ran");
    assert_eq!(landed.load(Ordering::SeqCst), 1, "one release: the inner's");
    // The outer kept its unit, the inner gave its back: one more call fits, then none.
    assert!(gate.run(|| note(1)).is_ok(), "the inner's unit is not back");
    assert_eq!(
        gate.run(|| note(2)).unwrap_err().code(),
        DenialCode::BudgetExhausted,
        "the outer's unit was given back though its body ran"
    );
}

// The kill switch lowered, and the taint latch closed, while a mismatched call's refusal waits for its
// (held) release: the call is refused, never runs, its unit is back, and the gate is lowered/latched
// for what comes after. The waiting refusal holds up nothing else.
#[test]
fn a13_56_mode_lowered_and_latch_closed_while_the_refusal_waits_for_its_release() {
    let (store, landed) = make_store(Release::Held);
    let knob = Knob::default();
    let sink = Arc::new(MemorySink::new());
    let gate = builder(&store, 2)
        .taint_policy(TaintPolicy::Refuse)
        .async_approver(Twist::turning(&knob))
        .audit_shared(sink.clone())
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (gate, knob) = (gate.clone(), knob.clone());
        std::thread::spawn(move || {
            let _ = tx.send(rt().block_on(gate.scope(turn(knob))).map_err(|d| d.code()));
        });
    }
    assert!(eventually(|| store.waiting() == 1), "never released");
    assert_eq!(landed.load(Ordering::SeqCst), 1);
    gate.run(|| read_page("https://evil.example".into()))
        .expect("the latch did not close");
    gate.lower(Mode::Shadow).unwrap();
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "returned before its release resolved"
    );
    store.let_go();
    let got = rx.recv_timeout(Duration::from_secs(10)).expect("no answer");
    assert!(got.is_err(), "ran: {got:?}");
    assert_eq!(knob.ran.load(Ordering::SeqCst), 0, "the body ran");
    assert_eq!(
        gate.run(|| note(1)).unwrap_err().code(),
        DenialCode::ModeNotAllowed
    );
    for r in sink.records().iter().filter(|r| r.tool == "a135.turn") {
        assert!(
            !(r.stage == Stage::Exit && r.outcome != Some(Outcome::Refused)),
            "a record claims the call ran: {r:?}"
        );
    }
}

// Two calls race for one unit: one is mutated (refused at its last comparison, release held), the
// other asks while that refusal waits: the other runs (the unit is in the store), a third is refused,
// and once the refusal is returned the budget of 1 has run exactly one call.
#[test]
fn a13_57_two_calls_racing_for_one_unit_never_both_run() {
    let (store, _) = make_store(Release::Held);
    let knob = Knob::default();
    let gate = builder(&store, 1)
        .async_approver(Twist::turning(&knob))
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (gate, knob) = (gate.clone(), knob.clone());
        std::thread::spawn(move || {
            let _ = tx.send(rt().block_on(gate.scope(turn(knob))).map_err(|d| d.code()));
        });
    }
    assert!(eventually(|| store.waiting() == 1), "never released");
    let other = Knob::default();
    let ran_other = rt().block_on(gate.scope(turn(other.clone())));
    // The other's approver also turns the first knob (not this one): it must run.
    let ran_other = ran_other.is_ok();
    let ran_note = gate.run(|| note(1)).is_ok();
    store.let_go();
    let got = rx.recv_timeout(Duration::from_secs(10)).expect("no answer");
    assert_eq!(got, Err(DenialCode::ApprovalMismatch));
    assert_eq!(knob.ran.load(Ordering::SeqCst), 0);
    let after = gate.run(|| note(2)).is_ok();
    let ran = [ran_other, ran_note, after].iter().filter(|r| **r).count();
    assert_eq!(
        ran, 1,
        "a budget of 1: other {ran_other}, note {ran_note}, after {after}"
    );
    assert!(ran_other, "the unit given back was not usable at once");
}

// Many threads race: each does a mutated async call and a note under a budget of 4 with slow releases:
// never more than 4 notes, and exactly 4 once every refusal is back.
#[test]
fn a13_58_threads_mixing_mismatches_and_runs_count_exactly_the_budget() {
    let (store, _) = make_store(Release::Slow(Duration::from_millis(3)));
    let knob = Knob::default();
    let gate = builder(&store, 4)
        .async_approver(Twist::turning(&knob))
        .build()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let (gate, ran, knob) = (gate.clone(), ran.clone(), knob.clone());
            std::thread::spawn(move || {
                let rt = rt();
                for i in 0..10 {
                    let got = rt.block_on(gate.scope(turn(knob.clone())));
                    if got.is_ok() {
                        ran.fetch_add(100, Ordering::SeqCst);
                    }
                    if gate.run(|| note(i)).is_ok() {
                        ran.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut ran = ran.load(Ordering::SeqCst);
    assert!(
        ran <= 4,
        "a budget of 4 ran {ran} (100 per mismatched turn)"
    );
    assert_eq!(knob.ran.load(Ordering::SeqCst), 0);
    while gate.run(|| note(999)).is_ok() {
        ran += 1;
        assert!(ran <= 4, "a budget of 4 ran {ran}");
    }
    assert_eq!(ran, 4);
}

// The audit records of refusals at the last comparison (async mismatch, sync mismatch, async changed
// evidence, by name): one `refused` record, or one `enter` and one `exit` of outcome `refused` with the
// code; never a record claiming the call ran.
#[test]
fn a13_59_records_of_last_comparison_refusals_never_say_the_call_ran() {
    let rt = rt();
    let (store, _) = make_store(SLOW);
    let knob = Knob::default();
    let sink = Arc::new(MemorySink::new());
    let turned = knob.clone();
    let gate = builder(&store, 3)
        .async_approver(Twist::turning(&knob))
        .audit_shared(sink.clone())
        .build()
        .unwrap();
    let denied = rt.block_on(gate.scope(turn(knob.clone()))).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalMismatch);
    no_record_says_it_ran(&sink, "a135.turn", DenialCode::ApprovalMismatch);
    let denied = rt
        .block_on(gate.scope(reshape("a13_59-disk".into())))
        .unwrap_err();
    assert_eq!(denied.code(), DenialCode::EvidenceChanged);
    let got = rt.block_on(toolgate::registry().call(
        &gate,
        "a135.reshape",
        json!({"disk": "a13_59-disk"}),
    ));
    assert_eq!(got.unwrap_err().code(), "EVIDENCE_CHANGED");
    no_record_says_it_ran(&sink, "a135.reshape", DenialCode::EvidenceChanged);
    assert_eq!(reshaped("a13_59-disk"), 0);

    let sink = Arc::new(MemorySink::new());
    let gate = builder(&store, 3)
        .approver(move |_: &ApprovalRequest<'_>| {
            turned.value.fetch_add(1, Ordering::SeqCst);
            Approval::Approve
        })
        .audit_shared(sink.clone())
        .build()
        .unwrap();
    let denied = gate.run(|| turn_now(knob.clone())).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalMismatch);
    no_record_says_it_ran(&sink, "a135.turn_now", DenialCode::ApprovalMismatch);
    assert_eq!(knob.ran.load(Ordering::SeqCst), 0);
    // Every unit is back: the budget of 3 runs 3 notes.
    let gate = builder(&store, 3).build().unwrap();
    assert_eq!((0..5).filter(|i| gate.run(|| note(*i)).is_ok()).count(), 3);
}

// Over MCP (in process, rmcp's client over a duplex): a callable async tool whose target's state
// changes while the gate's async approver decides is refused EVIDENCE_CHANGED, its body never runs,
// and its unit is back by the time the client has the result.
#[cfg(feature = "mcp-http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a13_60_over_mcp_a_changed_target_is_refused_with_its_unit_back_first() {
    use crate::fixtures::mcp_in_band::{call, code_of, connect};
    let (store, landed) = make_store(SLOW);
    let gate = builder(&store, 1)
        .async_approver(Twist::default())
        .build()
        .unwrap();
    let client = connect(toolgate::mcp::ToolgateServer::new(gate)).await;
    let got = call(
        &client,
        "a135.reshape",
        json!({"disk": "a13_60-disk"}),
        None,
        None,
    )
    .await;
    assert_eq!(code_of(&got), "EVIDENCE_CHANGED", "{got:?}");
    assert_eq!(reshaped("a13_60-disk"), 0, "the body ran");
    assert_eq!(
        landed.load(Ordering::SeqCst),
        1,
        "over MCP: refused before its unit was back"
    );
    let store2 = store.clone();
    let witness = tokio::task::spawn_blocking(move || witness_runs(&store2, 1).is_ok());
    assert!(witness.await.unwrap(), "the unit is not back");
}

// ---------------------------------------------------------------------------------------------------
// Compile-only: parameters named like the generated code's locals, on sync and async tools, callable
// and not, with a target and evidence, on free functions and `&self` methods of a toolset.

fn probe_waiting(waiting: &str) -> Result<u64, String> {
    let _ = waiting;
    Ok(0)
}

/// Names 1.
#[tool(risk = "HIGH_WRITE", domain = "a135names", callable)]
async fn names_async(
    waiting: u64,
    decided: u64,
    confirming: u64,
    resuming: u64,
    refused: u64,
    refusing: u64,
    step: u64,
) -> Result<u64, Denied> {
    Ok(waiting + decided + confirming + resuming + refused + refusing + step)
}

/// Names 2.
#[tool(risk = "HIGH_WRITE", domain = "a135names")]
fn names_sync(
    waiting: u64,
    decided: u64,
    confirming: u64,
    resuming: u64,
    refused: u64,
    refusing: u64,
    step: u64,
) -> Result<u64, Denied> {
    Ok(waiting + decided + confirming + resuming + refused + refusing + step)
}

/// Names 3: the target named like a local, with evidence.
#[tool(risk = "HIGH_WRITE", domain = "a135names", target = waiting, evidence = probe_waiting, callable)]
async fn names_target(waiting: String, refusing: u64, step: u64) -> Result<u64, Denied> {
    let _ = waiting;
    Ok(refusing + step)
}

/// Names 4: more names a generated body might use.
// The parameters are the point: named as a generated body's locals.
#[allow(clippy::too_many_arguments)]
#[tool(risk = "HIGH_WRITE", domain = "a135names", callable)]
async fn names_more(
    gate: u64,
    call: u64,
    cx: u64,
    permit: u64,
    decision: u64,
    args: u64,
    future: u64,
    result: u64,
    body: u64,
    release: u64,
    pending: u64,
    out: u64,
) -> Result<u64, Denied> {
    Ok(gate
        + call
        + cx
        + permit
        + decision
        + args
        + future
        + result
        + body
        + release
        + pending
        + out)
}

struct Names;

#[toolgate::toolset(domain = "a135names")]
impl Names {
    /// Names 5.
    // The parameters are the point: named as a generated body's locals.
    #[allow(clippy::too_many_arguments)]
    #[tool(risk = "HIGH_WRITE", callable)]
    pub async fn m_async(
        &self,
        waiting: u64,
        decided: u64,
        confirming: u64,
        resuming: u64,
        refused: u64,
        refusing: u64,
        step: u64,
    ) -> Result<u64, Denied> {
        Ok(waiting + decided + confirming + resuming + refused + refusing + step)
    }

    /// Names 6.
    // The parameters are the point: named as a generated body's locals.
    #[allow(clippy::too_many_arguments)]
    #[tool(risk = "HIGH_WRITE")]
    pub fn m_sync(
        &self,
        waiting: u64,
        decided: u64,
        confirming: u64,
        resuming: u64,
        refused: u64,
        refusing: u64,
        step: u64,
    ) -> Result<u64, Denied> {
        Ok(waiting + decided + confirming + resuming + refused + refusing + step)
    }

    /// Names 7.
    #[tool(risk = "HIGH_WRITE")]
    pub async fn m_async_plain(
        &self,
        waiting: u64,
        resuming: u64,
        step: u64,
    ) -> Result<u64, Denied> {
        Ok(waiting + resuming + step)
    }
}

// And they run: approved, each returns the sum of its arguments, direct and by name.
#[test]
fn a13_61_parameters_named_like_generated_locals_work() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(Twist::default())
        .build()
        .unwrap();
    let rt = rt();
    assert_eq!(
        rt.block_on(gate.scope(names_async(1, 2, 3, 4, 5, 6, 7)))
            .unwrap(),
        28
    );
    assert_eq!(
        rt.block_on(gate.scope(names_target("t".into(), 1, 2)))
            .unwrap(),
        3
    );
    assert_eq!(
        rt.block_on(gate.scope(names_more(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)))
            .unwrap(),
        12
    );
    assert_eq!(
        rt.block_on(gate.scope(Names.m_async(1, 2, 3, 4, 5, 6, 7)))
            .unwrap(),
        28
    );
    assert_eq!(
        rt.block_on(gate.scope(Names.m_async_plain(1, 2, 3)))
            .unwrap(),
        6
    );
    let sync_gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .build()
        .unwrap();
    assert_eq!(
        sync_gate.run(|| names_sync(1, 2, 3, 4, 5, 6, 7)).unwrap(),
        28
    );
    assert_eq!(
        sync_gate.run(|| Names.m_sync(1, 2, 3, 4, 5, 6, 7)).unwrap(),
        28
    );
    let by_name = rt.block_on(toolgate::registry().call(
        &gate,
        "a135names.names_async",
        json!({"waiting": 1, "decided": 2, "confirming": 3, "resuming": 4, "refused": 5, "refusing": 6, "step": 7}),
    ));
    assert_eq!(by_name.unwrap(), json!(28));
    let instances = toolgate::registry::Instances::new().with(Names);
    let by_name = rt.block_on(toolgate::registry().call_with(
        &gate,
        &instances,
        "a135names.m_async",
        json!({"waiting": 1, "decided": 2, "confirming": 3, "resuming": 4, "refused": 5, "refusing": 6, "step": 7}),
    ));
    assert_eq!(by_name.unwrap(), json!(28));
}

// ---------------------------------------------------------------------------------------------------
// Second batch: the last comparison failing rather than differing, grants, nested gates, sinks.

/// How the probe of `fragile` answers once the approver has flipped its target: `err-..` fails,
/// `panic-..` panics.
static FLIPPED: Mutex<Vec<String>> = Mutex::new(Vec::new());
static FRAGILE_RAN: AtomicUsize = AtomicUsize::new(0);

fn fragile_state(target: &str) -> Result<u64, String> {
    if FLIPPED.lock().unwrap().iter().any(|t| t == target) {
        if target.starts_with("panic-") {
            panic!("a13_62: the probe panics");
        }
        return Err("a13_62: the probe fails".into());
    }
    Ok(1)
}

/// Resize a disk whose probe fails once the approver has answered.
#[tool(risk = "HIGH_WRITE", domain = "a135", target = disk, evidence = fragile_state)]
async fn fragile(disk: String) -> Result<(), Denied> {
    let _ = disk;
    FRAGILE_RAN.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Flips the request's target (its probe fails from then on), then approves after a wait.
struct Flip;

impl AsyncApprover for Flip {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        if let Some(target) = request.target {
            FLIPPED.lock().unwrap().push(target.to_owned());
        }
        Box::pin(async {
            later(20).await;
            Approval::Approve
        })
    }
}

// The probe's second reading (at the last comparison of an async call whose decision waited) fails or
// panics: the call is refused (or the panic unwinds it), the body never runs, and the unit is back
// before the refusal is returned (within a moment of a panic).
#[test]
fn a13_62_a_probe_failing_at_the_last_comparison_gives_the_unit_back_first() {
    for disk in ["err-a13_62", "panic-a13_62"] {
        let (store, landed) = make_store(SLOW);
        let gate = builder(&store, 1).async_approver(Flip).build().unwrap();
        let before = FRAGILE_RAN.load(Ordering::SeqCst);
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt().block_on(gate.scope(fragile(disk.into())))
                .map_err(|d| d.code())
        }));
        assert!(!matches!(got, Ok(Ok(_))), "{disk}: ran");
        assert_eq!(FRAGILE_RAN.load(Ordering::SeqCst), before, "{disk}: ran");
        if got.is_err() {
            assert!(eventually(|| landed.load(Ordering::SeqCst) == 1), "{disk}");
        }
        assert_eq!(
            landed.load(Ordering::SeqCst),
            1,
            "{disk}: {got:?} before its unit was back"
        );
        assert!(witness_runs(&store, 1).is_ok(), "{disk}");
    }
}

/// An argument the approver breaks: 1 = its serialization fails, 2 = it panics.
#[derive(Clone, Default)]
struct Fickle {
    broken: Arc<AtomicU64>,
    ran: Arc<AtomicUsize>,
}

impl serde::Serialize for Fickle {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.broken.load(Ordering::SeqCst) {
            0 => s.serialize_u64(0),
            1 => Err(serde::ser::Error::custom("a13_63: cannot write")),
            _ => panic!("a13_63: the argument panics"),
        }
    }
}

impl schemars::JsonSchema for Fickle {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Fickle".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "integer"})
    }
}

/// Shake a fickle argument.
#[tool(risk = "HIGH_WRITE", domain = "a135")]
async fn shake(what: Fickle) -> Result<(), Denied> {
    what.ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

struct Break(Fickle, u64);

impl AsyncApprover for Break {
    fn approve<'a>(&'a self, _: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        self.0.broken.store(self.1, Ordering::SeqCst);
        Box::pin(async {
            later(20).await;
            Approval::Approve
        })
    }
}

// An argument that cannot be written (an error, or a panic) at the last comparison of an async call:
// never runs, and its unit is back before the refusal (within a moment of a panic); the budget of 1 is
// then whole.
#[test]
fn a13_63_an_argument_broken_while_the_approver_thought_gives_the_unit_back_first() {
    for how in [1, 2] {
        let (store, landed) = make_store(SLOW);
        let what = Fickle::default();
        let gate = builder(&store, 1)
            .async_approver(Break(what.clone(), how))
            .build()
            .unwrap();
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt().block_on(gate.scope(shake(what.clone())))
                .map_err(|d| d.code())
        }));
        assert!(!matches!(got, Ok(Ok(_))), "{how}: ran");
        assert_eq!(what.ran.load(Ordering::SeqCst), 0, "{how}: the body ran");
        if got.is_err() {
            assert!(eventually(|| landed.load(Ordering::SeqCst) == 1), "{how}");
        }
        assert_eq!(
            landed.load(Ordering::SeqCst),
            1,
            "{how}: {got:?} before its unit was back"
        );
        assert!(witness_runs(&store, 1).is_ok(), "{how}");
    }
}

/// Turns the knob on the first request only, and answers "for the session, these exact arguments".
struct TwistForSession(Knob, Arc<AtomicUsize>);

impl AsyncApprover for TwistForSession {
    fn approve<'a>(&'a self, _: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        if self.1.fetch_add(1, Ordering::SeqCst) == 0 {
            self.0.value.fetch_add(1, Ordering::SeqCst);
        }
        Box::pin(async {
            later(20).await;
            Approval::ApproveForSession(
                toolgate::approval::SessionGrant::tool(HOUR).exact_arguments(),
            )
        })
    }
}

// An answer "for the session, exactly these arguments" to a call whose argument the approver mutated
// (0 seen, 1 now): the call is refused at its last comparison (its unit back first), and no grant may
// cover the mutated arguments, which no approver saw (SECURITY.md 7: a session grant covers no more
// than its answer said): the next call with them must be asked.
#[test]
fn a13_64_an_exact_session_grant_never_covers_arguments_the_approver_did_not_see() {
    let (store, landed) = make_store(SLOW);
    let knob = Knob::default();
    let asked = Arc::new(AtomicUsize::new(0));
    let gate = builder(&store, 3)
        .async_approver(TwistForSession(knob.clone(), asked.clone()))
        .build()
        .unwrap();
    let denied = rt().block_on(gate.scope(turn(knob.clone()))).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalMismatch);
    assert_eq!(landed.load(Ordering::SeqCst), 1, "refused before its unit");
    assert_eq!(knob.value.load(Ordering::SeqCst), 1);
    // The same knob, now 1: the approver saw 0 only.
    let got = rt().block_on(gate.scope(turn(knob.clone())));
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "a call with arguments no approver saw ran unasked under the refused call's grant: {:?}, \
         grants {}",
        got.map_err(|d| d.code()),
        gate.grants().len()
    );
}

// Nested gates, async: the outer gate holds the budget (slow store), the inner gate's async approver
// mutates the argument; and the reverse (the outer gate's approver mutates, the inner holds the
// budget). Either way the refusal is returned only once the budget's unit is back.
#[test]
fn a13_65_nested_gates_async_last_comparison_refusal_waits_for_the_release() {
    for budget_outside in [true, false] {
        let (store, landed) = make_store(SLOW);
        let knob = Knob::default();
        let with_budget = builder(&store, 1)
            .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
            .build()
            .unwrap();
        let with_twist = Gate::builder()
            .mode(Mode::FullAuto)
            .async_approver(Twist::turning(&knob))
            .build()
            .unwrap();
        let (outer, inner) = if budget_outside {
            (with_budget, with_twist)
        } else {
            (with_twist, with_budget)
        };
        let got = rt().block_on(outer.scope(inner.scope(turn(knob.clone()))));
        assert!(got.is_err(), "{budget_outside}: ran");
        assert_eq!(knob.ran.load(Ordering::SeqCst), 0);
        assert_eq!(
            landed.load(Ordering::SeqCst),
            1,
            "budget outside {budget_outside}: refused {:?} before its unit was back",
            got.map_err(|d| d.code())
        );
        assert!(witness_runs(&store, 1).is_ok(), "{budget_outside}");
    }
}

/// A sink that fails (or panics) on `exit` records only.
struct ExitFails(bool);

impl toolgate::audit::AuditSink for ExitFails {
    fn record(&self, record: &AuditRecord) -> Result<(), toolgate::audit::AuditError> {
        if record.stage == Stage::Exit {
            if self.0 {
                panic!("a13_66: the sink panics on exit");
            }
            return Err(toolgate::audit::AuditError::new(
                "a13_66: disk full on exit",
            ));
        }
        Ok(())
    }
}

// A sink that fails or panics on the `exit` record of a call refused at its last comparison (after
// its `enter`): never runs, no double release, the unit back first (within a moment of a panic).
#[test]
fn a13_66_a_sink_failing_on_the_refused_exit_keeps_the_count() {
    for panics in [false, true] {
        let (store, landed) = make_store(SLOW);
        let knob = Knob::default();
        let gate = builder(&store, 1)
            .async_approver(Twist::turning(&knob))
            .audit(ExitFails(panics))
            .build()
            .unwrap();
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt().block_on(gate.scope(turn(knob.clone())))
                .map_err(|d| d.code())
        }));
        assert!(!matches!(got, Ok(Ok(_))), "{panics}: ran");
        assert_eq!(knob.ran.load(Ordering::SeqCst), 0);
        if got.is_err() {
            assert!(eventually(|| landed.load(Ordering::SeqCst) == 1));
        }
        assert_eq!(
            landed.load(Ordering::SeqCst),
            1,
            "{panics}: {got:?} before its unit was back"
        );
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(landed.load(Ordering::SeqCst), 1, "{panics}: released twice");
        let w = builder(&store, 1).build().unwrap();
        assert_eq!((0..3).filter(|i| w.run(|| note(*i)).is_ok()).count(), 1);
    }
}

// An approved async call's future polled again after it completed: the body ran once, its unit stays
// spent.
#[test]
fn a13_67_an_allowed_future_polled_again_runs_once() {
    let (store, landed) = make_store(SLOW);
    let knob = Knob::default();
    let gate = builder(&store, 1)
        .async_approver(Twist::default())
        .build()
        .unwrap();
    let mut fut = Box::pin(gate.scope(turn(knob.clone())));
    let rt = rt();
    assert!(
        rt.block_on(std::future::poll_fn(|cx| fut.as_mut().poll(cx)))
            .is_ok()
    );
    for _ in 0..3 {
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _guard = rt.enter();
            poll_once(fut.as_mut()).map(|r| r.map_err(|d| d.code()))
        }));
        assert!(
            !matches!(again, Ok(Poll::Ready(Ok(_)))),
            "polled again, it ran: {again:?}"
        );
    }
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(knob.ran.load(Ordering::SeqCst), 1);
    assert_eq!(
        landed.load(Ordering::SeqCst),
        0,
        "a call that ran gave back its unit"
    );
    assert_eq!(
        gate.run(|| note(2)).unwrap_err().code(),
        DenialCode::BudgetExhausted
    );
}

/// Async note: runs in FULL_AUTO.
#[tool(risk = "LOW_WRITE", domain = "a135", callable)]
async fn note_async(n: u64) -> Result<u64, Denied> {
    Ok(n)
}

// A tool future first polled inside a budget gate's scope (its decision starts, it waits for the
// approver who mutates its argument), then finished outside any scope, or inside another gate's scope
// that approves everything: never runs, and the first gate's unit is back before the refusal. Without
// the mutation, it runs at most once and is counted once.
#[test]
fn a13_68_a_decision_started_in_one_scope_and_finished_elsewhere_keeps_the_count() {
    for mutate in [true, false] {
        for elsewhere in ["no scope", "another gate"] {
            let (store, landed) = make_store(SLOW);
            let knob = Knob::default();
            let twist = if mutate {
                Twist::turning(&knob)
            } else {
                Twist::default()
            };
            let gate = builder(&store, 1).async_approver(twist).build().unwrap();
            let other = Gate::builder()
                .mode(Mode::FullAuto)
                .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
                .build()
                .unwrap();
            let rt = rt();
            let mut inner = Box::pin(turn(knob.clone()));
            let first = rt.block_on(gate.scope(std::future::poll_fn(|cx| {
                Poll::Ready(inner.as_mut().poll(cx).map(|r| r.map_err(|d| d.code())))
            })));
            assert!(first.is_pending(), "{mutate} {elsewhere}: {first:?}");
            let got = if elsewhere == "no scope" {
                rt.block_on(inner.as_mut())
            } else {
                rt.block_on(other.scope(inner.as_mut()))
            };
            let ran = knob.ran.load(Ordering::SeqCst);
            let case = format!(
                "mutate {mutate}, {elsewhere}: {:?}",
                got.as_ref().map_err(|d| d.code())
            );
            if mutate {
                assert!(got.is_err(), "{case}");
                assert_eq!(ran, 0, "{case}");
            }
            assert_eq!(ran, usize::from(got.is_ok()), "{case}");
            if got.is_err() {
                assert_eq!(
                    landed.load(Ordering::SeqCst),
                    1,
                    "{case}: refused before its unit"
                );
                assert!(witness_runs(&store, 1).is_ok(), "{case}");
            } else {
                assert_eq!(landed.load(Ordering::SeqCst), 0, "{case}");
                assert!(witness_runs(&store, 1).is_err(), "{case}: ran uncounted");
            }
        }
    }
}

// A tool future made inside a scope and dropped unpolled, or polled only after the scope ended (NO_GATE
// or counted): no unit is spent by a call that did not run.
#[test]
fn a13_69_a_tool_future_never_polled_in_its_scope_spends_nothing() {
    let (store, _) = make_store(SLOW);
    let gate = builder(&store, 1).build().unwrap();
    let rt = rt();
    // A future made in the scope and returned unpolled from it.
    #[allow(clippy::async_yields_async)]
    let made = rt.block_on(gate.scope(async {
        let dropped = note_async(1);
        drop(dropped);
        note_async(2)
    }));
    let got = rt.block_on(made);
    if let Err(denied) = &got {
        assert_eq!(denied.code(), DenialCode::NoGate);
        assert!(
            rt.block_on(gate.scope(note_async(3))).is_ok(),
            "a unit was spent by calls that never ran"
        );
    } else {
        assert!(witness_runs(&store, 1).is_err(), "ran uncounted");
    }
}

#[cfg(feature = "mcp")]
mod in_place {
    //! An rmcp `#[tool_router]` handler gated in place, served by `ToolgateServer::handler`.
    use super::*;
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock};
    use rmcp::{ErrorData, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
    use toolgate::mcp::ToolgateServer;

    #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
    struct Tank {
        /// The tank.
        tank: String,
    }

    #[derive(Clone, Default)]
    struct Tanks {
        drained: Arc<AtomicUsize>,
    }

    #[toolgate::toolset(domain = "a135ip")]
    #[tool_router]
    impl Tanks {
        /// Drain a tank.
        #[tool]
        #[toolgate(risk = "HIGH_WRITE")]
        async fn drain(
            &self,
            Parameters(args): Parameters<Tank>,
        ) -> Result<CallToolResult, ErrorData> {
            self.drained.fetch_add(1, Ordering::SeqCst);
            Ok(CallToolResult::success(vec![ContentBlock::text(args.tank)]))
        }
    }

    #[tool_handler]
    impl ServerHandler for Tanks {}

    /// Rejects, or lowers the gate and approves, after a wait.
    struct Later(Option<Arc<OnceGate>>);
    type OnceGate = std::sync::OnceLock<Gate>;

    impl AsyncApprover for Later {
        fn approve<'a>(&'a self, _: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
            Box::pin(async move {
                later(30).await;
                match &self.0 {
                    None => Approval::Reject("no".into()),
                    Some(slot) => {
                        slot.get().unwrap().lower(Mode::PartialAuto).unwrap();
                        Approval::Approve
                    }
                }
            })
        }
    }

    // Over MCP, an rmcp handler's async tool gated in place, refused after its budget check (its async
    // approver rejects; or the gate is lowered while it thinks, then it approves): the body never runs
    // and the unit is back by the time the client has the refusal.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a13_70_in_place_refusals_have_their_units_back_first() {
        for lowered in [false, true] {
            let (store, landed) = make_store(SLOW);
            let slot = Arc::new(OnceGate::new());
            let gate = Gate::builder()
                .mode(Mode::FullAuto)
                .agent("a135")
                .budget(toolgate::gate::BudgetScope::tool("a135ip.*"), 1, HOUR)
                .budget_store_shared(store.clone())
                .async_approver(Later(lowered.then(|| slot.clone())))
                .build()
                .unwrap();
            slot.set(gate.clone()).ok().unwrap();
            let tanks = Tanks::default();
            let server = ToolgateServer::new(gate.clone()).handler(tanks.clone());
            let (client, served) = tokio::io::duplex(1 << 20);
            tokio::spawn(async move {
                if let Ok(running) = server.serve(tokio::io::split(served)).await {
                    let _ = running.waiting().await;
                }
            });
            let client =
                tokio::time::timeout(Duration::from_secs(10), ().serve(tokio::io::split(client)))
                    .await
                    .unwrap()
                    .unwrap();
            let mut args = serde_json::Map::new();
            args.insert("tank".into(), json!("t1"));
            let got = client
                .call_tool_once(CallToolRequestParams::new("drain").with_arguments(args))
                .await
                .expect("a call");
            let CallToolResponse::Complete(result) = got else {
                panic!("{got:?}")
            };
            assert_eq!(result.is_error, Some(true), "{lowered}: ran: {result:?}");
            let code = result.structured_content.as_ref().unwrap()["code"].clone();
            assert_eq!(
                tanks.drained.load(Ordering::SeqCst),
                0,
                "{lowered}: the body ran"
            );
            assert_eq!(
                landed.load(Ordering::SeqCst),
                1,
                "{lowered}: refused {code} before its unit was back"
            );
        }
    }
}

fn probe_state(state: &str) -> Result<u64, String> {
    let _ = state;
    Ok(0)
}

struct MoreNames;

#[toolgate::toolset(domain = "a135names")]
impl MoreNames {
    /// Names 8: a method with a target and evidence, more names a generated body might use.
    // The parameters are the point: named as a generated body's locals.
    #[allow(clippy::too_many_arguments)]
    #[tool(risk = "HIGH_WRITE", target = state, evidence = probe_state, callable)]
    pub async fn m_more(
        &self,
        state: String,
        this: u64,
        receiver: u64,
        instance: u64,
        manifest: u64,
        check: u64,
        verdict: u64,
        evidence: u64,
        target: u64,
        units: u64,
        reservation: u64,
        guard: u64,
        scope: u64,
        context: u64,
        output: u64,
        arguments: u64,
    ) -> Result<u64, Denied> {
        let _ = state;
        Ok(this
            + receiver
            + instance
            + manifest
            + check
            + verdict
            + evidence
            + target
            + units
            + reservation
            + guard
            + scope
            + context
            + output
            + arguments)
    }

    /// Names 9, sync, with a target.
    #[tool(risk = "HIGH_WRITE", target = state, evidence = probe_state)]
    pub fn m_more_sync(
        &self,
        state: String,
        waiting: u64,
        decided: u64,
        refused: u64,
        step: u64,
    ) -> Result<u64, Denied> {
        let _ = state;
        Ok(waiting + decided + refused + step)
    }
}

// The methods with those names run, approved, with a target and evidence.
#[test]
fn a13_71_methods_with_targets_and_parameters_named_like_locals_work() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(Twist::default())
        .build()
        .unwrap();
    assert_eq!(
        rt().block_on(gate.scope(MoreNames.m_more(
            "s".into(),
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            1
        )))
        .unwrap(),
        15
    );
    let sync_gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .build()
        .unwrap();
    assert_eq!(
        sync_gate
            .run(|| MoreNames.m_more_sync("s".into(), 1, 2, 3, 4))
            .unwrap(),
        10
    );
}
