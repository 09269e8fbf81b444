//! A fourth attack from outside, on the approval surfaces added last: async approvers, session grants,
//! rejections and stops with reasons, custom approval stores, and the records that say who approved.
//!
//! Each test is written from the documented guarantees only (README "The policy", "Approvals and
//! escalation", SECURITY.md item 7 and 8, and the public API's doc comments), and asserts the guarantee:
//! a test that fails is an attack that got through.
//!
//! When they were written, 4 of 30 got through, none running a body, and each was fixed: a store's
//! refusal with a code that is not an approval code (`DENY_LISTED`, `NO_GATE`, ...) was passed on as the
//! call's refusal (now `APPROVAL_STORE_UNAVAILABLE`), and an approver that panicked while making its
//! future or in `name()` unwound out of the gate instead of rejecting (now `APPROVAL_REJECTED`, as a store
//! that panics is now `APPROVAL_STORE_UNAVAILABLE`).

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use serde_json::json;
use toolgate::approval::store::{
    Answer, ApprovalCall, ApprovalStore, ApproveError, Binding, Consumed, StoreError, StoreFuture,
};
use toolgate::approval::two_step::MemoryStore;
use toolgate::approval::{ApprovalFuture, AsyncApprover, SessionGrant};
use toolgate::audit::{AuditRecord, Decision, MemorySink, Outcome, Stage};
use toolgate::gate::GateError;
use toolgate::serde::Serialize;
use toolgate::{Approval, ApprovalRequest, DenialCode, Denied, Gate, Mode, Risk, tool, toolset};

// ---------------------------------------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------------------------------------

static WIRE: AtomicUsize = AtomicUsize::new(0);
static HANG_BODY: AtomicUsize = AtomicUsize::new(0);
static WIRE_THEN_READ: AtomicUsize = AtomicUsize::new(0);
static SYNC_WIRE: AtomicUsize = AtomicUsize::new(0);
static GATED_WIRE: AtomicUsize = AtomicUsize::new(0);
static SHELL: AtomicUsize = AtomicUsize::new(0);
static PINS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static APPLIED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
static DROPPED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
static PURGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Wire money (async).
#[tool(risk = "HIGH_WRITE", side_effects, modes = [FULL_AUTO], domain = "atk2_a", callable)]
async fn wire(to: String, cents: u64) -> Result<u64, Denied> {
    let _ = to;
    WIRE.fetch_add(1, SeqCst);
    Ok(cents)
}

/// Wire money, and wait for the bank for ever (async).
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk2_a")]
async fn wire_hang(to: String) -> Result<(), Denied> {
    let _ = to;
    HANG_BODY.fetch_add(1, SeqCst);
    std::future::pending::<()>().await;
    Ok(())
}

/// Wire money, then read the balance through another tool (async).
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk2_a")]
async fn wire_then_read(to: String) -> Result<u64, Denied> {
    let _ = to;
    WIRE_THEN_READ.fetch_add(1, SeqCst);
    tokio::time::sleep(Duration::from_millis(2)).await;
    read().await
}

/// Wire money (sync).
#[tool(risk = "HIGH_WRITE", side_effects, modes = [FULL_AUTO], domain = "atk2_a", callable)]
fn sync_wire(to: String, cents: u64) -> Result<u64, Denied> {
    let _ = to;
    SYNC_WIRE.fetch_add(1, SeqCst);
    Ok(cents)
}

/// Wire money through the gate it is given (sync).
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk2_a")]
fn gated_wire(gate: &Gate, to: String) -> Result<(), Denied> {
    let _ = (gate, to);
    GATED_WIRE.fetch_add(1, SeqCst);
    Ok(())
}

/// Read a balance (async).
#[tool(risk = "READ_ONLY", domain = "atk2_a")]
async fn read() -> Result<u64, Denied> {
    Ok(7)
}

/// Read a balance (sync).
#[tool(risk = "READ_ONLY", domain = "atk2_a")]
fn read_sync() -> Result<u64, Denied> {
    Ok(7)
}

/// Unlock an account with a PIN that no record, message or approver may show.
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk2_a", redact = [pin])]
fn unlock(user: String, pin: String) -> Result<(), Denied> {
    let _ = user;
    PINS.lock().unwrap().push(pin);
    Ok(())
}

fn classify(command: &str) -> Risk {
    if command.split_whitespace().any(|w| w == "sudo") {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

/// Run a shell command, escalated by `sudo`.
#[tool(risk = "LOW_WRITE", domain = "atk2_a", escalate = classify)]
fn shell(command: String) -> Result<(), Denied> {
    let _ = command;
    SHELL.fetch_add(1, SeqCst);
    Ok(())
}

/// What a generic step is.
pub trait Step {
    const NAME: &'static str;
}
/// Preview only.
#[derive(Serialize)]
#[serde(crate = "toolgate::serde")]
pub struct DryRun;
/// Execute for real.
#[derive(Serialize)]
#[serde(crate = "toolgate::serde")]
pub struct Execute;
impl Step for DryRun {
    const NAME: &'static str = "dry-run";
}
impl Step for Execute {
    const NAME: &'static str = "execute";
}

/// Apply a migration, generically over the step (two unit structs that serialize alike).
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk2_a")]
fn apply<S: Step + Serialize>(step: S) -> Result<(), Denied> {
    let _ = step;
    APPLIED.lock().unwrap().push(S::NAME);
    Ok(())
}

/// A database handle that serializes (its name).
#[derive(Serialize)]
#[serde(crate = "toolgate::serde")]
pub struct Atk2Db {
    name: String,
}

#[toolset(domain = "atk2_db")]
impl Atk2Db {
    /// Drop a table.
    #[tool(risk = "HIGH_WRITE")]
    pub fn drop_table(&self, table: String) -> Result<(), Denied> {
        DROPPED.lock().unwrap().push((self.name.clone(), table));
        Ok(())
    }
}

/// A pool handle that does not serialize.
pub struct Atk2Pool {
    name: String,
}

#[toolset(domain = "atk2_pool")]
impl Atk2Pool {
    /// Purge everything in the pool.
    #[tool(risk = "HIGH_WRITE")]
    pub fn purge(&self) -> Result<(), Denied> {
        PURGED.lock().unwrap().push(self.name.clone());
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    future.poll(&mut cx)
}

/// What an async approver in these tests is told.
struct Req {
    tool: &'static str,
    args: String,
}

type Answering = Pin<Box<dyn Future<Output = Approval> + Send + 'static>>;

/// An async approver from a closure, with a name.
struct AsyncFn<F> {
    name: &'static str,
    f: F,
}

fn async_fn<F>(name: &'static str, f: F) -> AsyncFn<F>
where
    F: Fn(Req) -> Answering + Send + Sync + 'static,
{
    AsyncFn { name, f }
}

impl<F> AsyncApprover for AsyncFn<F>
where
    F: Fn(Req) -> Answering + Send + Sync + 'static,
{
    fn approve<'a>(&'a self, request: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        (self.f)(Req {
            tool: request.tool.id,
            args: request.arguments.unwrap_or_default().to_owned(),
        })
    }

    fn name(&self) -> &str {
        self.name
    }
}

/// A sync approver that answers from a script (then rejects) and counts the questions.
fn scripted(
    answers: Vec<Approval>,
) -> (
    Arc<AtomicUsize>,
    impl Fn(&ApprovalRequest<'_>) -> Approval + Send + Sync + 'static,
) {
    let asked = Arc::new(AtomicUsize::new(0));
    let answers = Mutex::new(answers.into_iter());
    let counter = asked.clone();
    let approver = move |_: &ApprovalRequest<'_>| {
        counter.fetch_add(1, SeqCst);
        answers
            .lock()
            .unwrap()
            .next()
            .unwrap_or(Approval::Reject("asked again, and rejected".into()))
    };
    (asked, approver)
}

fn of(records: &[AuditRecord], stage: Stage) -> Vec<AuditRecord> {
    records
        .iter()
        .filter(|r| r.stage == stage)
        .cloned()
        .collect()
}

/// Every `enter` has exactly one `exit` (same gate, same call), and every `exit` has its `enter`.
#[track_caller]
fn assert_paired(records: &[AuditRecord]) {
    let show = || {
        records
            .iter()
            .map(|r| serde_json::to_string(r).unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    };
    for enter in records.iter().filter(|r| r.stage == Stage::Enter) {
        let exits = records
            .iter()
            .filter(|r| r.stage == Stage::Exit && r.gate == enter.gate && r.call == enter.call)
            .count();
        assert_eq!(
            exits,
            1,
            "the enter of call {} (gate {}, {}) has {exits} exits:\n{}",
            enter.call,
            enter.gate,
            enter.tool,
            show()
        );
    }
    for exit in records.iter().filter(|r| r.stage == Stage::Exit) {
        assert!(
            records
                .iter()
                .any(|r| r.stage == Stage::Enter && r.gate == exit.gate && r.call == exit.call),
            "an exit without its enter:\n{}",
            show()
        );
    }
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

const APPROVAL_CODES: [DenialCode; 6] = [
    DenialCode::ApprovalRequired,
    DenialCode::ApprovalPending,
    DenialCode::ApprovalExpired,
    DenialCode::ApprovalReused,
    DenialCode::ApprovalMismatch,
    DenialCode::ApprovalStoreUnavailable,
];

// ---------------------------------------------------------------------------------------------------------
// 1. Async approvers: cancellation, lowering, panics, re-entry, threads
// ---------------------------------------------------------------------------------------------------------

// Attacks: dropping an async tool's future (direct, by name, over MCP) while its async approver is still
// thinking. The body must not run, the approver's future must be dropped with it, and no `enter` record
// may be left without its `exit`.
#[test]
fn atk2_a_call_cancelled_while_its_async_approver_waits_runs_nothing_on_any_path() {
    let _serial = serial();
    let sink = MemorySink::new();
    let asked = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicBool::new(false));
    let (a, d) = (asked.clone(), dropped.clone());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("never", move |_| {
            a.fetch_add(1, SeqCst);
            let guard = DropFlag(d.clone());
            Box::pin(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                Approval::Approve
            })
        }))
        .audit(sink.clone())
        .build()
        .unwrap();
    let before = WIRE.load(SeqCst);

    let mut direct = Box::pin(gate.scope(wire("x".into(), 1)));
    assert!(poll_once(direct.as_mut()).is_pending());
    assert_eq!(asked.load(SeqCst), 1);
    drop(direct);
    assert!(
        dropped.swap(false, SeqCst),
        "the approver's future is dropped with the call"
    );

    let mut by_name =
        Box::pin(toolgate::registry().call(&gate, "atk2_a.wire", json!({"to": "y", "cents": 2})));
    assert!(poll_once(by_name.as_mut()).is_pending());
    assert_eq!(asked.load(SeqCst), 2);
    drop(by_name);
    assert!(dropped.swap(false, SeqCst));

    #[cfg(feature = "mcp")]
    {
        let server = toolgate::mcp::ToolgateServer::new(gate.clone());
        let mut over_mcp = Box::pin(server.call(
            "atk2_a.wire",
            json!({"to": "z", "cents": 3}).as_object().cloned(),
        ));
        assert!(poll_once(over_mcp.as_mut()).is_pending());
        assert_eq!(asked.load(SeqCst), 3);
        drop(over_mcp);
        assert!(dropped.swap(false, SeqCst));
    }

    assert_eq!(WIRE.load(SeqCst), before, "no body ran");
    assert_paired(&sink.records());
    // The gate is not left in a state where it runs something it should not.
    assert_eq!(
        current_thread()
            .block_on(wire("no-scope".into(), 4))
            .unwrap_err()
            .code(),
        DenialCode::NoGate
    );
    assert_eq!(WIRE.load(SeqCst), before);
}

// Attacks: a call approved by an async approver, whose body is then cancelled mid-way. The `enter`
// record (with `by` and decision `approved`) must get an `exit` of outcome `cancelled`.
#[test]
fn atk2_an_approved_call_cancelled_in_its_body_is_closed_as_cancelled_and_names_the_approver() {
    let _serial = serial();
    let sink = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("quick-quinn", |_| {
            Box::pin(async { Approval::Approve })
        }))
        .audit(sink.clone())
        .build()
        .unwrap();
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

type AnswerSlot = Arc<Mutex<Option<tokio::sync::oneshot::Receiver<Approval>>>>;

/// An async approver that answers what the test sends it, one call at a time.
fn answered_by_channel(name: &'static str) -> (AnswerSlot, Arc<AtomicUsize>, impl AsyncApprover) {
    let slot: AnswerSlot = Arc::new(Mutex::new(None));
    let asked = Arc::new(AtomicUsize::new(0));
    let (s, a) = (slot.clone(), asked.clone());
    let approver = async_fn(name, move |_| {
        a.fetch_add(1, SeqCst);
        let rx = s.lock().unwrap().take();
        Box::pin(async move {
            match rx {
                Some(rx) => rx
                    .await
                    .unwrap_or(Approval::Reject("the operator left".into())),
                None => Approval::Reject("nobody to ask".into()),
            }
        })
    });
    (slot, asked, approver)
}

// Attacks: the gate lowered from outside while a call's future is parked in its async approver, and a
// future created at FULL_AUTO but first polled after the gate was lowered. Neither may run at the old
// mode, even with `Approve` or `ApproveForSession` arriving after the lowering.
#[test]
fn atk2_a_future_parked_in_its_approver_or_first_polled_after_lower_never_runs_at_the_old_mode() {
    let _serial = serial();
    for answer in [
        Approval::Approve,
        Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600))),
    ] {
        let sink = MemorySink::new();
        let (slot, asked, approver) = answered_by_channel("parked");
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .async_approver(approver)
            .audit(sink.clone())
            .build()
            .unwrap();
        let before = WIRE.load(SeqCst);
        let (tx, rx) = tokio::sync::oneshot::channel();
        *slot.lock().unwrap() = Some(rx);
        let mut call = Box::pin(gate.scope(wire("parked".into(), 1)));
        assert!(poll_once(call.as_mut()).is_pending());
        assert_eq!(asked.load(SeqCst), 1);
        gate.lower(Mode::PartialAuto).unwrap();
        tx.send(answer.clone()).unwrap();
        let Poll::Ready(result) = poll_once(call.as_mut()) else {
            panic!("the answer was sent: the call is decided")
        };
        assert_eq!(result.unwrap_err().code(), DenialCode::ModeNotAllowed);
        assert_eq!(WIRE.load(SeqCst), before, "ran at the old mode after lower");
        assert_paired(&sink.records());
        // Whatever was granted, nothing of the tool runs now.
        assert_eq!(
            current_thread()
                .block_on(gate.scope(wire("after".into(), 2)))
                .unwrap_err()
                .code(),
            DenialCode::ModeNotAllowed
        );
    }

    // Created at FULL_AUTO, first polled after lower: decided at its first poll, at the lowered mode.
    let (slot, asked, approver) = answered_by_channel("late");
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(approver)
        .build()
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    *slot.lock().unwrap() = Some(rx);
    tx.send(Approval::Approve).unwrap();
    let before = WIRE.load(SeqCst);
    let mut call = Box::pin(gate.scope(wire("late".into(), 1)));
    gate.lower(Mode::Advisory).unwrap();
    let Poll::Ready(result) = poll_once(call.as_mut()) else {
        panic!("a refusal at the first poll is ready at once")
    };
    assert_eq!(result.unwrap_err().code(), DenialCode::ModeNotAllowed);
    assert_eq!(asked.load(SeqCst), 0, "a call the mode refuses asks nobody");
    assert_eq!(WIRE.load(SeqCst), before);
}

// Attacks: an async approver whose future returns `Pending` once and panics on its second poll. That is
// an approver that panicked: `APPROVAL_REJECTED`, the body not run, the panic not escaping into the
// agent's code, the gate still usable.
#[test]
fn atk2_an_async_approver_that_panics_on_a_later_poll_has_rejected() {
    let _serial = serial();
    let sink = MemorySink::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("flaky", move |_| {
            if c.fetch_add(1, SeqCst) > 0 {
                return Box::pin(async { Approval::Approve });
            }
            let mut polled = false;
            Box::pin(std::future::poll_fn(move |cx| {
                if !polled {
                    polled = true;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                } else {
                    panic!("the approver broke on its second poll")
                }
            }))
        }))
        .audit(sink.clone())
        .build()
        .unwrap();
    let before = WIRE.load(SeqCst);
    let rt = runtime(1);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(gate.scope(wire("a".into(), 1)))
    }));
    let result = outcome.expect("the approver's panic escaped the gate instead of rejecting");
    let denied = result.unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRejected);
    assert_eq!(WIRE.load(SeqCst), before);
    // The next call, approved, runs: the panic left the gate working.
    assert_eq!(rt.block_on(gate.scope(wire("b".into(), 2))).unwrap(), 2);
    assert_eq!(WIRE.load(SeqCst) - before, 1);
    assert_paired(&sink.records());
}

// Attacks: an async approver whose `approve` panics before it even returns its future (while building
// it). Also an approver that panics: rejected, not run, no `enter` left open, no gate left entered on the
// thread that polled the call, the panic not escaping into the agent's code.
#[test]
fn atk2_an_async_approver_that_panics_while_building_its_future_has_rejected() {
    let _serial = serial();
    let sink = MemorySink::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("eager-panic", move |_| {
            if c.fetch_add(1, SeqCst) == 0 {
                panic!("the approver panicked before returning a future")
            }
            Box::pin(async { Approval::Approve })
        }))
        .audit(sink.clone())
        .build()
        .unwrap();
    let before = WIRE.load(SeqCst);
    let rt = current_thread();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(gate.scope(wire("a".into(), 1)))
    }));
    assert_eq!(WIRE.load(SeqCst), before, "ran on a panicking approver");
    assert_paired(&sink.records());
    assert_eq!(
        read_sync().unwrap_err().code(),
        DenialCode::NoGate,
        "the unwinding left the gate entered on this thread"
    );
    // The gate still works.
    assert_eq!(rt.block_on(gate.scope(wire("b".into(), 2))).unwrap(), 2);
    let result = outcome.expect("the approver's panic escaped the gate instead of rejecting");
    assert_eq!(result.unwrap_err().code(), DenialCode::ApprovalRejected);
}

/// A sync approver that approves, but whose name panics.
struct SyncBadName;
impl toolgate::Approver for SyncBadName {
    fn approve(&self, _: &ApprovalRequest<'_>) -> Approval {
        Approval::Approve
    }
    fn name(&self) -> &str {
        panic!("no name")
    }
}

/// An async approver that approves, but whose name panics.
struct AsyncBadName;
impl AsyncApprover for AsyncBadName {
    fn approve<'a>(&'a self, _: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        Box::pin(async { Approval::Approve })
    }
    fn name(&self) -> &str {
        panic!("no name")
    }
}

// Attacks: `Approver::name` (used for the `by` of the records) panicking after the approver said yes.
// The approver is user code that panicked: the call must be refused (`APPROVAL_REJECTED`), never run,
// never leave an `enter` without `exit` nor the gate entered on the thread, and the panic must not
// escape the gate.
#[test]
fn atk2_a_sync_approver_whose_name_panics_has_rejected() {
    let _serial = serial();
    let sink = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(SyncBadName)
        .audit(sink.clone())
        .build()
        .unwrap();
    let before = SYNC_WIRE.load(SeqCst);
    let outcome = catch_unwind(AssertUnwindSafe(|| gate.run(|| sync_wire("a".into(), 1))));
    assert_eq!(
        SYNC_WIRE.load(SeqCst),
        before,
        "ran on a panicking approver"
    );
    assert_paired(&sink.records());
    assert_eq!(read_sync().unwrap_err().code(), DenialCode::NoGate);
    assert_eq!(gate.run(read_sync).unwrap(), 7, "the gate still works");
    let result = outcome.expect("the sync approver's panicking name escaped the gate");
    assert_eq!(result.unwrap_err().code(), DenialCode::ApprovalRejected);
}

// Attacks: the same, for an async approver's `name`.
#[test]
fn atk2_an_async_approver_whose_name_panics_has_rejected() {
    let _serial = serial();
    let sink = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(AsyncBadName)
        .audit(sink.clone())
        .build()
        .unwrap();
    let before = WIRE.load(SeqCst);
    let rt = current_thread();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(gate.scope(wire("a".into(), 1)))
    }));
    assert_eq!(WIRE.load(SeqCst), before, "ran on a panicking approver");
    assert_paired(&sink.records());
    assert_eq!(read_sync().unwrap_err().code(), DenialCode::NoGate);
    assert_eq!(
        rt.block_on(gate.scope(read())).unwrap(),
        7,
        "the gate still works"
    );
    let result = outcome.expect("the async approver's panicking name escaped the gate");
    assert_eq!(result.unwrap_err().code(), DenialCode::ApprovalRejected);
}

// Attacks: a sync tool called by name and over MCP (where the adapter itself is a future that could
// await the approver) under an async approver that would approve. Documented: refused at once with
// `APPROVAL_REQUIRED`, never asked, never run.
#[test]
fn atk2_a_sync_tool_by_name_or_over_mcp_under_an_async_approver_is_refused_at_once() {
    let _serial = serial();
    let asked = Arc::new(AtomicUsize::new(0));
    let a = asked.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("yes-man", move |_| {
            a.fetch_add(1, SeqCst);
            Box::pin(async { Approval::Approve })
        }))
        .build()
        .unwrap();
    let before = SYNC_WIRE.load(SeqCst);
    let call = toolgate::registry().call(&gate, "atk2_a.sync_wire", json!({"to": "a", "cents": 1}));
    let result = call
        .now()
        .expect("a sync tool's call by name is ready at once");
    let error = result.unwrap_err();
    assert_eq!(error.code(), "APPROVAL_REQUIRED", "{error}");
    #[cfg(feature = "mcp")]
    {
        let server = toolgate::mcp::ToolgateServer::new(gate.clone());
        let result = current_thread()
            .block_on(server.call(
                "atk2_a.sync_wire",
                json!({"to": "a", "cents": 1}).as_object().cloned(),
            ))
            .unwrap();
        assert_eq!(result.is_error, Some(true));
        let text = serde_json::to_value(&result).unwrap()["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(text.starts_with("APPROVAL_REQUIRED: "), "{text}");
    }
    assert_eq!(asked.load(SeqCst), 0, "the async approver was never asked");
    assert_eq!(SYNC_WIRE.load(SeqCst), before, "never run");
}

// Attacks: the ambient gate leaking while a call is parked in its async approver: the same thread (a
// current-thread runtime) polls other tasks meanwhile, and a thread spawned by the approver future.
// Every one of them is outside any gate: `NO_GATE`.
#[test]
fn atk2_while_a_call_waits_for_its_approver_its_gate_leaks_to_no_other_task_or_thread() {
    let _serial = serial();
    let thread_result: Arc<Mutex<Option<DenialCode>>> = Arc::new(Mutex::new(None));
    let slot: Arc<Mutex<Option<tokio::sync::oneshot::Receiver<Approval>>>> =
        Arc::new(Mutex::new(None));
    let asked = Arc::new(AtomicUsize::new(0));
    let (s, a, t) = (slot.clone(), asked.clone(), thread_result.clone());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("waits", move |_| {
            a.fetch_add(1, SeqCst);
            let rx = s.lock().unwrap().take();
            let t = t.clone();
            Box::pin(async move {
                // A thread spawned from inside the approver does not inherit the gate.
                let code = std::thread::spawn(|| read_sync().unwrap_err().code())
                    .join()
                    .unwrap();
                *t.lock().unwrap() = Some(code);
                rx.unwrap().await.unwrap_or(Approval::Reject("gone".into()))
            })
        }))
        .build()
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    *slot.lock().unwrap() = Some(rx);
    let before = (WIRE.load(SeqCst), SYNC_WIRE.load(SeqCst));
    current_thread().block_on(async {
        let parked = tokio::spawn(gate.scope(wire("parked".into(), 1)));
        while asked.load(SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // Same thread, outside the scope, while the scoped call is parked.
        assert_eq!(read_sync().unwrap_err().code(), DenialCode::NoGate);
        assert_eq!(read().await.unwrap_err().code(), DenialCode::NoGate);
        let other = tokio::spawn(async {
            (
                read_sync().map_err(|d| d.code()),
                read().await.map_err(|d| d.code()),
                sync_wire("other".into(), 2).map_err(|d| d.code()),
                wire("other".into(), 2).await.map_err(|d| d.code()),
            )
        })
        .await
        .unwrap();
        assert_eq!(
            other,
            (
                Err(DenialCode::NoGate),
                Err(DenialCode::NoGate),
                Err(DenialCode::NoGate),
                Err(DenialCode::NoGate)
            )
        );
        tx.send(Approval::Approve).unwrap();
        assert_eq!(parked.await.unwrap().unwrap(), 1);
        assert_eq!(read_sync().unwrap_err().code(), DenialCode::NoGate);
    });
    assert_eq!(*thread_result.lock().unwrap(), Some(DenialCode::NoGate));
    assert_eq!(
        (WIRE.load(SeqCst), SYNC_WIRE.load(SeqCst)),
        (before.0 + 1, before.1)
    );
}

// Attacks: an async approver that re-enters the gate: while deciding `wire("outer")` it awaits
// `gate.scope(wire("inner"))` (which asks the approver on its own, and is approved), then rejects the
// outer call. The outer call must not ride on the inner approval, and the records stay paired.
#[test]
fn atk2_an_async_approver_reentering_its_gate_decides_each_call_on_its_own() {
    let _serial = serial();
    let sink = MemorySink::new();
    let cell: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let inner_result: Arc<Mutex<Option<Result<u64, DenialCode>>>> = Arc::new(Mutex::new(None));
    let (g, ir) = (cell.clone(), inner_result.clone());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("reentrant", move |req| {
            let (g, ir) = (g.clone(), ir.clone());
            Box::pin(async move {
                if req.tool == "atk2_a.wire" && req.args.contains("outer") {
                    let gate = g.get().unwrap().clone();
                    let inner = gate
                        .scope(wire("inner".into(), 2))
                        .await
                        .map_err(|d| d.code());
                    *ir.lock().unwrap() = Some(inner);
                    Approval::Reject("the outer call is not approved".into())
                } else {
                    Approval::Approve
                }
            })
        }))
        .audit(sink.clone())
        .build()
        .unwrap();
    cell.set(gate.clone()).unwrap();
    let before = WIRE.load(SeqCst);
    let outer = runtime(2)
        .block_on(gate.scope(wire("outer".into(), 1)))
        .unwrap_err();
    assert_eq!(outer.code(), DenialCode::ApprovalRejected);
    assert!(outer.message().contains("the outer call is not approved"));
    assert_eq!(*inner_result.lock().unwrap(), Some(Ok(2)));
    assert_eq!(WIRE.load(SeqCst) - before, 1, "only the inner call ran");
    let records = sink.records();
    assert_paired(&records);
    assert_eq!(of(&records, Stage::Enter).len(), 1);
}

// Attacks: a `Scoped` future moved across threads on a multi-thread runtime while its async approver
// sleeps (so it resumes on whichever worker), whose body calls another tool. The body must still be under
// its gate, and once done the gate must not be left on any worker.
#[test]
fn atk2_a_scoped_future_moved_across_threads_keeps_its_gate_and_leaves_it_nowhere() {
    let _serial = serial();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("sleepy", |_| {
            Box::pin(async {
                for _ in 0..5 {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    tokio::task::yield_now().await;
                }
                Approval::Approve
            })
        }))
        .build()
        .unwrap();
    let rt = runtime(2);
    let before = WIRE_THEN_READ.load(SeqCst);
    let results = rt.block_on(async {
        let calls: Vec<_> = (0..16)
            .map(|i| {
                let scoped = gate.scope(wire_then_read(format!("acct-{i}")));
                // Moved to another thread before its first poll, then spawned from there.
                std::thread::spawn(move || scoped).join().unwrap()
            })
            .map(tokio::spawn)
            .collect();
        let mut results = Vec::new();
        for call in calls {
            results.push(call.await.unwrap().map_err(|d| d.code()));
        }
        results
    });
    assert!(results.iter().all(|r| *r == Ok(7)), "{results:?}");
    assert_eq!(WIRE_THEN_READ.load(SeqCst) - before, 16);
    // No worker kept the gate: unscoped calls on every worker are refused.
    let leaks = rt.block_on(async {
        let probes: Vec<_> = (0..32)
            .map(|_| {
                tokio::spawn(async {
                    (
                        read_sync().map_err(|d| d.code()),
                        wire("leak".into(), 0).await.map_err(|d| d.code()),
                    )
                })
            })
            .collect();
        let mut leaks = 0;
        for probe in probes {
            let (a, b) = probe.await.unwrap();
            leaks += usize::from(a != Err(DenialCode::NoGate));
            leaks += usize::from(b != Err(DenialCode::NoGate));
        }
        leaks
    });
    assert_eq!(leaks, 0, "a worker kept the gate after its future finished");
}

// ---------------------------------------------------------------------------------------------------------
// 2. Session grants
// ---------------------------------------------------------------------------------------------------------

// Attacks: an exact-arguments grant and a redacted argument. Both calls show `{"pin":"[REDACTED]",...}`
// to the approver and the log; an exact grant covers "only the same arguments (redacted values
// included)", so another PIN must be asked about.
#[test]
fn atk2_an_exact_grant_does_not_cover_another_redacted_value() {
    let _serial = serial();
    let (asked, approver) = scripted(vec![Approval::ApproveForSession(
        SessionGrant::tool(Duration::from_secs(600)).exact_arguments(),
    )]);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(approver)
        .build()
        .unwrap();
    PINS.lock().unwrap().clear();
    gate.run(|| unlock("alice".into(), "1234".into())).unwrap();
    gate.run(|| unlock("alice".into(), "1234".into())).unwrap();
    assert_eq!(asked.load(SeqCst), 1, "the same call is granted");
    let other = gate.run(|| unlock("alice".into(), "9999".into()));
    assert_eq!(
        asked.load(SeqCst),
        2,
        "another PIN must be asked about, not granted"
    );
    assert_eq!(other.unwrap_err().code(), DenialCode::ApprovalRejected);
    assert_eq!(*PINS.lock().unwrap(), ["1234", "1234"]);
}

// Attacks: an exact grant given for `staging.drop_table("users")`, used for
// `production.drop_table("users")`: `self` is an argument, so the other receiver must be asked about.
#[test]
fn atk2_an_exact_grant_does_not_cover_another_receiver() {
    let _serial = serial();
    let (asked, approver) = scripted(vec![Approval::ApproveForSession(
        SessionGrant::tool(Duration::from_secs(600)).exact_arguments(),
    )]);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(approver)
        .build()
        .unwrap();
    DROPPED.lock().unwrap().clear();
    let staging = Atk2Db {
        name: "staging".into(),
    };
    let production = Atk2Db {
        name: "production".into(),
    };
    gate.run(|| staging.drop_table("users".into())).unwrap();
    let other = gate.run(|| production.drop_table("users".into()));
    assert_eq!(
        *DROPPED.lock().unwrap(),
        [("staging".to_owned(), "users".to_owned())],
        "an exact grant for staging dropped production's table"
    );
    assert_eq!(other.unwrap_err().code(), DenialCode::ApprovalRejected);
    assert_eq!(asked.load(SeqCst), 2);
}

// Attacks: an exact grant on a method whose receiver does not serialize: every receiver shows
// `"self":"[NOT SERIALIZABLE]"`, so a grant keyed on what is shown would cover every pool. Like a
// two-step approval (which cannot be given for such a method), an exact grant must not run another pool.
#[test]
fn atk2_an_exact_grant_does_not_cover_another_receiver_that_does_not_serialize() {
    let _serial = serial();
    let (asked, approver) = scripted(vec![Approval::ApproveForSession(
        SessionGrant::tool(Duration::from_secs(600)).exact_arguments(),
    )]);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(approver)
        .build()
        .unwrap();
    PURGED.lock().unwrap().clear();
    let scratch = Atk2Pool {
        name: "scratch".into(),
    };
    let billing = Atk2Pool {
        name: "billing".into(),
    };
    gate.run(|| scratch.purge()).unwrap();
    let other = gate.run(|| billing.purge());
    assert_eq!(
        *PURGED.lock().unwrap(),
        ["scratch"],
        "an exact grant for one pool purged another"
    );
    assert!(other.is_err());
    assert_eq!(asked.load(SeqCst), 2);
}

// Attacks: an exact grant on a generic tool, for `apply(DryRun)`, used for `apply(Execute)`: both
// serialize to `null`, but an argument's type is part of what is bound.
#[test]
fn atk2_an_exact_grant_does_not_cover_another_type_that_serializes_alike() {
    let _serial = serial();
    let (asked, approver) = scripted(vec![Approval::ApproveForSession(
        SessionGrant::tool(Duration::from_secs(600)).exact_arguments(),
    )]);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(approver)
        .build()
        .unwrap();
    APPLIED.lock().unwrap().clear();
    gate.run(|| apply(DryRun)).unwrap();
    let other = gate.run(|| apply(Execute));
    assert_eq!(
        *APPLIED.lock().unwrap(),
        ["dry-run"],
        "an exact grant for the dry run executed the migration"
    );
    assert_eq!(other.unwrap_err().code(), DenialCode::ApprovalRejected);
    assert_eq!(asked.load(SeqCst), 2);
}

/// An argument whose serialization fails: shown as `"[NOT SERIALIZABLE]"` whatever its value.
pub struct Opaque(pub u32);
impl Step for Opaque {
    const NAME: &'static str = "opaque";
}
impl Serialize for Opaque {
    fn serialize<S: toolgate::serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(toolgate::serde::ser::Error::custom(format!(
            "opaque {}",
            self.0
        )))
    }
}

// Attacks: an exact grant on a call whose argument does not serialize (shown `"[NOT SERIALIZABLE]"` for
// every value): a grant for `apply(Opaque(1))` must not run `apply(Opaque(2))`.
#[test]
fn atk2_an_exact_grant_does_not_cover_another_argument_that_does_not_serialize() {
    let _serial = serial();
    let (asked, approver) = scripted(vec![Approval::ApproveForSession(
        SessionGrant::tool(Duration::from_secs(600)).exact_arguments(),
    )]);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(approver)
        .build()
        .unwrap();
    APPLIED.lock().unwrap().clear();
    gate.run(|| apply(Opaque(1))).unwrap();
    let other = gate.run(|| apply(Opaque(2)));
    assert_eq!(
        asked.load(SeqCst),
        2,
        "an exact grant for one unserializable value covered another"
    );
    assert!(other.is_err());
    assert_eq!(*APPLIED.lock().unwrap(), ["opaque"]);
}

// Attacks: the operator's `for_session` answer through the two-step store ("the gate that uses it also
// grants the tool, with these arguments"): the grant must be bound like the approval was, so another
// redacted PIN, another receiver, or another type serializing alike is not run on it.
#[test]
fn atk2_an_operator_session_grant_is_bound_like_the_approval_it_came_from() {
    let _serial = serial();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    let carol = || Answer::Approve {
        by: "carol".into(),
        for_session: true,
    };
    let mut breaches = Vec::new();

    PINS.lock().unwrap().clear();
    let asked = gate
        .run(|| unlock("alice".into(), "1234".into()))
        .unwrap_err();
    gate.answer(asked.approval_token().unwrap(), carol())
        .unwrap();
    gate.run(|| unlock("alice".into(), "1234".into())).unwrap();
    if gate.run(|| unlock("alice".into(), "9999".into())).is_ok() {
        breaches.push("another redacted PIN ran on the grant");
    }

    DROPPED.lock().unwrap().clear();
    let staging = Atk2Db {
        name: "staging".into(),
    };
    let production = Atk2Db {
        name: "production".into(),
    };
    let asked = gate.run(|| staging.drop_table("t".into())).unwrap_err();
    gate.answer(asked.approval_token().unwrap(), carol())
        .unwrap();
    gate.run(|| staging.drop_table("t".into())).unwrap();
    if gate.run(|| production.drop_table("t".into())).is_ok() {
        breaches.push("another receiver ran on the grant");
    }

    APPLIED.lock().unwrap().clear();
    let asked = gate.run(|| apply(DryRun)).unwrap_err();
    gate.answer(asked.approval_token().unwrap(), carol())
        .unwrap();
    gate.run(|| apply(DryRun)).unwrap();
    if gate.run(|| apply(Execute)).is_ok() {
        breaches.push("another type serializing alike ran on the grant");
    }
    assert!(breaches.is_empty(), "{breaches:?}");
    assert_eq!(*PINS.lock().unwrap(), ["1234"]);
    assert_eq!(*APPLIED.lock().unwrap(), ["dry-run"]);
}

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
    let granting = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(approver1)
        .build()
        .unwrap();
    let strict = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(approver2)
        .build()
        .unwrap();
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
    let granting_gated = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(approver3)
        .build()
        .unwrap();
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
    let outer = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("outer", move |_| {
            oa.fetch_add(1, SeqCst);
            Box::pin(async {
                Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600)))
            })
        }))
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("inner", move |_| {
            ia.fetch_add(1, SeqCst);
            Box::pin(async { Approval::Reject("inner says no".into()) })
        }))
        .build()
        .unwrap();
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

// Attacks: a grant against the mode and the ceiling. A grant is an approval, never a mode: once the gate
// is lowered, the granted tool is refused by its allowed modes, and an escalated call by the ceiling. The
// grant covers the effective (escalated) risk it was approved at.
#[test]
fn atk2_a_grant_lifts_neither_a_lowered_mode_nor_the_ceiling() {
    let _serial = serial();
    let (asked, approver) = scripted(vec![
        Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600))),
        Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600))),
    ]);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(approver)
        .build()
        .unwrap();
    let (wires, shells) = (SYNC_WIRE.load(SeqCst), SHELL.load(SeqCst));
    gate.run(|| sync_wire("a".into(), 1)).unwrap();
    gate.run(|| shell("sudo systemctl stop web".into()))
        .unwrap();
    assert_eq!(asked.load(SeqCst), 2);
    let grants = gate.grants();
    let shell_grant = grants.iter().find(|g| g.tool == "atk2_a.shell").unwrap();
    assert_eq!(
        shell_grant.risk,
        Risk::HighWrite,
        "the grant is at the effective risk"
    );
    gate.lower(Mode::PartialAuto).unwrap();
    assert_eq!(
        gate.run(|| sync_wire("b".into(), 2)).unwrap_err().code(),
        DenialCode::ModeNotAllowed
    );
    assert_eq!(
        gate.run(|| shell("sudo rm -rf /".into()))
            .unwrap_err()
            .code(),
        DenialCode::AboveCeiling
    );
    gate.run(|| shell("ls".into())).unwrap();
    assert_eq!(SYNC_WIRE.load(SeqCst) - wires, 1);
    assert_eq!(SHELL.load(SeqCst) - shells, 2);
}

// Attacks: the time to live. `Duration::MAX` must neither panic (Instant overflow) nor outlive a day; a
// zero time to live covers no later call; an approval time to live just over a day (by one nanosecond)
// must fail `build()`.
#[test]
fn atk2_grant_and_approval_times_to_live_at_their_edges() {
    let _serial = serial();
    let (asked, approver) = scripted(vec![
        Approval::ApproveForSession(SessionGrant::tool(Duration::MAX)),
        Approval::ApproveForSession(SessionGrant::tool(Duration::ZERO)),
    ]);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(approver)
        .build()
        .unwrap();
    gate.run(|| sync_wire("a".into(), 1)).unwrap();
    let grants = gate.grants();
    assert_eq!(grants.len(), 1);
    assert!(grants[0].expires_in <= SessionGrant::MAX_TTL, "{grants:?}");
    assert_eq!(grants[0].by, "approver");
    assert_eq!(gate.revoke_grants(None, "ops"), 1);
    gate.run(|| sync_wire("a".into(), 1)).unwrap();
    assert_eq!(asked.load(SeqCst), 2);
    // The zero grant: the call ran; the next one asks (and is rejected).
    let next = gate.run(|| sync_wire("a".into(), 1));
    assert_eq!(
        asked.load(SeqCst),
        3,
        "a zero time to live granted a later call"
    );
    assert_eq!(next.unwrap_err().code(), DenialCode::ApprovalRejected);

    let just_over = SessionGrant::MAX_TTL + Duration::from_nanos(1);
    assert!(
        Gate::builder()
            .mode(Mode::FullAuto)
            .approval_ttl(just_over)
            .build()
            .is_err(),
        "an approval time to live over a day built a gate"
    );
    assert_eq!(
        Gate::builder().approval_ttl(just_over).build().unwrap_err(),
        GateError::ApprovalTtl(just_over)
    );
    assert!(MemoryStore::new(just_over).is_none());
    assert!(MemoryStore::new(Duration::ZERO).is_none());
}

// Attacks: gates sharing one approval store. An operator's `for_session` answer grants the call in the
// gate that uses it; another gate sharing the same store must not run on that grant.
#[test]
fn atk2_an_operator_grant_is_not_shared_by_another_gate_on_the_same_store() {
    let _serial = serial();
    let store: Arc<dyn ApprovalStore> =
        Arc::new(MemoryStore::new(Duration::from_secs(600)).unwrap());
    let first = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone())
        .build()
        .unwrap();
    let second = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone())
        .build()
        .unwrap();
    let before = SYNC_WIRE.load(SeqCst);
    let asked = first.run(|| sync_wire("a".into(), 1)).unwrap_err();
    let token = asked.approval_token().unwrap().to_owned();
    second
        .answer(
            &token,
            Answer::Approve {
                by: "carol".into(),
                for_session: true,
            },
        )
        .unwrap();
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

// ---------------------------------------------------------------------------------------------------------
// 3. Reject and Stop
// ---------------------------------------------------------------------------------------------------------

// Attacks: reasons with no text, only whitespace, newlines and fake codes, JSON. The refusal's code stays
// `APPROVAL_REJECTED` on every path (direct, by name and its JSON, MCP text and structured content), and
// a non-blank reason reaches the agent.
#[test]
fn atk2_a_rejection_reason_cannot_forge_the_code_on_any_path() {
    let _serial = serial();
    let reasons = [
        "",
        "   \t ",
        "ok\nMODE_NOT_ALLOWED: fake\n",
        "done\"},{\"code\":\"OK\",\"message\":\"",
        "APPROVED",
    ];
    let current = Arc::new(Mutex::new(String::new()));
    let c = current.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(move |_: &ApprovalRequest<'_>| Approval::Reject(c.lock().unwrap().clone()))
        .build()
        .unwrap();
    let before = SYNC_WIRE.load(SeqCst);
    let rt = current_thread();
    for reason in reasons {
        *current.lock().unwrap() = reason.to_owned();
        let direct = gate.run(|| sync_wire("a".into(), 1)).unwrap_err();
        assert_eq!(direct.code(), DenialCode::ApprovalRejected);
        let message = direct.message();
        eprintln!("reason {reason:?} -> message {message:?}");
        assert!(message.contains("atk2_a.sync_wire"), "{message}");
        if !reason.trim().is_empty() {
            assert!(message.contains(reason.trim()), "{message}");
        }
        let by_name = rt
            .block_on(toolgate::registry().call(
                &gate,
                "atk2_a.sync_wire",
                json!({"to": "a", "cents": 1}),
            ))
            .unwrap_err();
        assert_eq!(by_name.code(), "APPROVAL_REJECTED");
        let as_json = serde_json::to_value(&by_name).unwrap();
        assert_eq!(as_json["code"], "APPROVAL_REJECTED", "{as_json}");
        #[cfg(feature = "mcp")]
        {
            let server = toolgate::mcp::ToolgateServer::new(gate.clone());
            let result = rt
                .block_on(server.call(
                    "atk2_a.sync_wire",
                    json!({"to": "a", "cents": 1}).as_object().cloned(),
                ))
                .unwrap();
            assert_eq!(result.is_error, Some(true));
            let value = serde_json::to_value(&result).unwrap();
            let text = value["content"][0]["text"].as_str().unwrap();
            assert!(text.starts_with("APPROVAL_REJECTED: "), "{text}");
            assert_eq!(
                value["structuredContent"]["code"], "APPROVAL_REJECTED",
                "{value}"
            );
        }
    }
    assert_eq!(SYNC_WIRE.load(SeqCst), before);
    assert_eq!(gate.mode(), Mode::FullAuto, "a rejection does not stop");
}

// Attacks: a `Stop` from an async approver while other calls of the same gate are parked in the
// approver; those then get `Approve`. The stop lowers the gate before the refusal is returned, so every
// parked call must be refused, nothing must run, and the records stay paired and say who stopped.
#[test]
fn atk2_a_stop_refuses_every_call_still_waiting_for_its_approval() {
    let _serial = serial();
    let sink = MemorySink::new();
    let (release, released) = tokio::sync::watch::channel(false);
    let asked = Arc::new(AtomicUsize::new(0));
    let a = asked.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("sre-sam", move |req| {
            a.fetch_add(1, SeqCst);
            if req.args.contains("stopper") {
                return Box::pin(async { Approval::Stop(String::new()) });
            }
            let mut released = released.clone();
            Box::pin(async move {
                let _ = released.wait_for(|go| *go).await;
                Approval::Approve
            })
        }))
        .audit(sink.clone())
        .build()
        .unwrap();
    let before = WIRE.load(SeqCst);
    let rt = runtime(2);
    let results = rt.block_on(async {
        let parked: Vec<_> = (0..8)
            .map(|i| tokio::spawn(gate.scope(wire(format!("w{i}"), i))))
            .collect();
        while asked.load(SeqCst) < 8 {
            tokio::task::yield_now().await;
        }
        let stopped = gate.scope(wire("stopper".into(), 99)).await.unwrap_err();
        assert_eq!(stopped.code(), DenialCode::ApprovalRejected);
        assert_eq!(
            gate.mode(),
            Mode::Shadow,
            "lowered before the refusal returned"
        );
        release.send(true).unwrap();
        let mut results = Vec::new();
        for call in parked {
            results.push(call.await.unwrap().map_err(|d| d.code()));
        }
        results
    });
    assert!(
        results.iter().all(|r| r.is_err()),
        "calls approved after the stop ran: {results:?}"
    );
    assert_eq!(WIRE.load(SeqCst), before);
    let records = sink.records();
    assert_paired(&records);
    let lowered = of(&records, Stage::ModeLowered);
    assert_eq!(lowered.len(), 1);
    assert!(
        lowered[0].by.as_deref().unwrap_or("").contains("sre-sam"),
        "{lowered:?}"
    );
}

// Attacks: `Stop` under nested gates: the inner gate's async approver stops, the outer gate has already
// approved. The inner gate lowers itself; the outer gate's records of the call are closed; nothing runs
// then or after through the inner gate.
#[test]
fn atk2_a_stop_in_an_inner_gate_closes_the_outer_gates_records() {
    let _serial = serial();
    let (outer_sink, inner_sink) = (MemorySink::new(), MemorySink::new());
    let outer = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("outer-olga", |_| {
            Box::pin(async { Approval::Approve })
        }))
        .audit(outer_sink.clone())
        .build()
        .unwrap();
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

// ---------------------------------------------------------------------------------------------------------
// 4. Custom approval stores
// ---------------------------------------------------------------------------------------------------------

/// A store that answers `consume` with a closure, and counts.
struct Scripted<F> {
    consume: F,
    asked: AtomicUsize,
}

impl<F> ApprovalStore for Scripted<F>
where
    F: Fn(&ApprovalCall, usize) -> StoreFuture<'static, Result<Consumed, StoreError>>
        + Send
        + Sync
        + 'static,
{
    fn consume<'a>(
        &'a self,
        call: &'a ApprovalCall,
    ) -> StoreFuture<'a, Result<Consumed, StoreError>> {
        let n = self.asked.fetch_add(1, SeqCst);
        (self.consume)(call, n)
    }

    fn answer<'a>(
        &'a self,
        _token: &'a str,
        _answer: Answer,
    ) -> StoreFuture<'a, Result<Binding, ApproveError>> {
        Box::pin(std::future::ready(Err(ApproveError::UnknownToken)))
    }
}

fn scripted_store<F>(consume: F) -> Arc<Scripted<F>>
where
    F: Fn(&ApprovalCall, usize) -> StoreFuture<'static, Result<Consumed, StoreError>>
        + Send
        + Sync
        + 'static,
{
    Arc::new(Scripted {
        consume,
        asked: AtomicUsize::new(0),
    })
}

// Attacks: a store that answers `Pending` with a code that is not an approval code (`DENY_LISTED`,
// `NO_GATE`, `MODE_NOT_ALLOWED`, `AUDIT_UNAVAILABLE`, `APPROVAL_REJECTED` without any rejection). A store
// that answers what it should not refuses the call (documented: `APPROVAL_STORE_UNAVAILABLE`); it must
// not make the gate report a refusal that did not happen (a deny rule, a mode, a rejection).
#[test]
fn atk2_a_store_answering_a_foreign_refusal_code_fails_closed_with_an_approval_code() {
    let _serial = serial();
    let mut forged = Vec::new();
    for code in [
        DenialCode::DenyListed,
        DenialCode::NoGate,
        DenialCode::ModeNotAllowed,
        DenialCode::AuditUnavailable,
        DenialCode::ApprovalRejected,
    ] {
        let store = scripted_store(move |_, _| {
            Box::pin(std::future::ready(Ok(Consumed::Pending {
                code,
                token: Some("tok-123".into()),
            })))
        });
        let sink = MemorySink::new();
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .approval_store_shared(store.clone())
            .audit(sink.clone())
            .build()
            .unwrap();
        let before = SYNC_WIRE.load(SeqCst);
        let denied = gate.run(|| sync_wire("a".into(), 1)).unwrap_err();
        assert_eq!(SYNC_WIRE.load(SeqCst), before);
        let refused = of(&sink.records(), Stage::Refused);
        assert_paired(&sink.records());
        if !APPROVAL_CODES.contains(&denied.code()) {
            forged.push(format!(
                "Pending {{ code: {code} }} -> refusal {} (logged as {:?}): {}",
                denied.code(),
                refused.last().and_then(|r| r.code.clone()),
                denied.message()
            ));
        }
    }
    assert!(
        forged.is_empty(),
        "a store's answer became a refusal that did not happen:\n{}",
        forged.join("\n")
    );
}

// Attacks: a store that panics in `consume` (building its future, or on a later poll). The body must not
// run, the records stay paired, and the gate keeps working for the next call.
#[test]
fn atk2_a_store_that_panics_runs_nothing_and_leaves_the_gate_working() {
    let _serial = serial();
    let store = scripted_store(|_, n| match n {
        0 => panic!("the store's driver crashed"),
        1 => Box::pin(async {
            tokio::task::yield_now().await;
            panic!("the store's driver crashed on a later poll")
        }),
        _ => Box::pin(std::future::ready(Ok(Consumed::Pending {
            code: DenialCode::ApprovalRequired,
            token: Some("tok-after".into()),
        }))),
    });
    let sink = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone())
        .audit(sink.clone())
        .build()
        .unwrap();
    let (sync_before, async_before) = (SYNC_WIRE.load(SeqCst), WIRE.load(SeqCst));
    let sync = catch_unwind(AssertUnwindSafe(|| gate.run(|| sync_wire("a".into(), 1))));
    let rt = runtime(1);
    let in_async = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(gate.scope(wire("a".into(), 1)))
    }));
    eprintln!(
        "store panic, sync: {:?}; async: {:?}",
        sync.as_ref().map(|r| r.as_ref().map_err(|d| d.code())),
        in_async.as_ref().map(|r| r.as_ref().map_err(|d| d.code()))
    );
    assert_eq!(SYNC_WIRE.load(SeqCst), sync_before);
    assert_eq!(WIRE.load(SeqCst), async_before);
    for result in [
        sync.ok().map(|r| r.map(|_| ())),
        in_async.ok().map(|r| r.map(|_| ())),
    ]
    .into_iter()
    .flatten()
    {
        assert!(result.is_err(), "a panicking store ran the call");
    }
    // The gate still decides: the next call is asked for, with the store's token.
    let next = gate.run(|| sync_wire("b".into(), 2)).unwrap_err();
    assert_eq!(next.code(), DenialCode::ApprovalPending);
    assert_eq!(next.approval_token(), Some("tok-after"));
    assert_eq!(gate.run(read_sync).unwrap(), 7);
    assert_paired(&sink.records());
}

// Attacks: a store that never answers. An async call waiting for it is cancelled (nothing runs, records
// paired); a sync call parked on it must not freeze the gate: the kill switch, the grants list and other
// calls keep working from other threads.
#[test]
fn atk2_a_store_that_never_answers_freezes_neither_the_gate_nor_the_kill_switch() {
    let _serial = serial();
    let store = scripted_store(|_, _| Box::pin(std::future::pending()));
    let sink = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone())
        .audit(sink.clone())
        .build()
        .unwrap();
    let before = (SYNC_WIRE.load(SeqCst), WIRE.load(SeqCst));
    let mut call = Box::pin(gate.scope(wire("a".into(), 1)));
    assert!(poll_once(call.as_mut()).is_pending());
    drop(call);
    // A sync call parked for ever on the store, on its own thread.
    let parked_gate = gate.clone();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let result = parked_gate.run(|| sync_wire("b".into(), 2));
        let _ = done_tx.send(result.map_err(|d| d.code()));
    });
    while store.asked.load(SeqCst) < 2 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let probe_gate = gate.clone();
    let (probe_tx, probe_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let read = probe_gate.run(read_sync).map_err(|d| d.code());
        let grants = probe_gate.grants().len();
        let lowered = probe_gate.lower(Mode::PartialAuto).is_ok();
        let _ = probe_tx.send((read, grants, lowered));
    });
    let probe = probe_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a store that never answers froze the gate (reads, grants or lower)");
    assert_eq!(probe, (Ok(7), 0, true));
    match done_rx.recv_timeout(Duration::from_secs(2)) {
        Ok(result) => eprintln!("the parked sync call returned: {result:?}"),
        Err(_) => eprintln!(
            "the sync call is still parked on a store that never answers (the store's own timeout \
             is documented; the gate has none)"
        ),
    }
    assert_eq!((SYNC_WIRE.load(SeqCst), WIRE.load(SeqCst)), before);
    assert_paired(&sink.records());
}

// Attacks: a store whose `consume` lowers the gate, then answers `Answered(Approve)`. The re-check before
// the body must refuse the call at the lowered mode, sync and async.
#[test]
fn atk2_a_store_that_lowers_the_gate_then_approves_is_refused_by_the_recheck() {
    let _serial = serial();
    for asynchronous in [false, true] {
        let cell: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
        let g = cell.clone();
        let store = scripted_store(move |_, _| {
            let g = g.clone();
            Box::pin(async move {
                g.get().unwrap().lower(Mode::PartialAuto).unwrap();
                Ok(Consumed::Answered(Answer::Approve {
                    by: "mallory".into(),
                    for_session: false,
                }))
            })
        });
        let sink = MemorySink::new();
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .approval_store_shared(store.clone())
            .audit(sink.clone())
            .build()
            .unwrap();
        cell.set(gate.clone()).unwrap();
        let before = (SYNC_WIRE.load(SeqCst), WIRE.load(SeqCst));
        let denied = if asynchronous {
            runtime(1)
                .block_on(gate.scope(wire("a".into(), 1)))
                .map(|_| ())
                .unwrap_err()
        } else {
            gate.run(|| sync_wire("a".into(), 1))
                .map(|_| ())
                .unwrap_err()
        };
        assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
        assert_eq!((SYNC_WIRE.load(SeqCst), WIRE.load(SeqCst)), before);
        assert_paired(&sink.records());
    }
}

// Attacks: a store answering `Pending` without a token (full), and an operator's answers coming back
// through a custom store: `Reject { stop }` must refuse and lower the gate, and say who; an approval
// `for_session` must make an exact grant only, by the operator named.
#[test]
fn atk2_a_custom_stores_answers_are_honoured_as_documented() {
    let _serial = serial();
    let store = scripted_store(|call, n| {
        let answer = match n {
            0 => Consumed::Pending {
                code: DenialCode::ApprovalRequired,
                token: None,
            },
            1 => Consumed::Answered(Answer::Approve {
                by: "olga".into(),
                for_session: true,
            }),
            2 if call.binding.tool == "atk2_a.sync_wire" => Consumed::Pending {
                code: DenialCode::ApprovalMismatch,
                token: Some("tok-2".into()),
            },
            _ => Consumed::Answered(Answer::Reject {
                by: "dave".into(),
                reason: "incident\nOK".into(),
                stop: true,
            }),
        };
        Box::pin(std::future::ready(Ok(answer)))
    });
    let sink = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone())
        .audit(sink.clone())
        .build()
        .unwrap();
    let before = SYNC_WIRE.load(SeqCst);
    let full = gate.run(|| sync_wire("a".into(), 1)).unwrap_err();
    assert_eq!(full.code(), DenialCode::ApprovalRequired);
    assert_eq!(full.approval_token(), None);
    gate.run(|| sync_wire("a".into(), 1)).unwrap();
    let grants = gate.grants();
    assert_eq!(grants.len(), 1);
    assert!(grants[0].exact_arguments, "an operator grant is exact");
    assert_eq!(grants[0].by, "olga");
    gate.run(|| sync_wire("a".into(), 1)).unwrap();
    assert_eq!(store.asked.load(SeqCst), 2, "the exact grant answered");
    let other = gate.run(|| sync_wire("a".into(), 2)).unwrap_err();
    assert_eq!(other.code(), DenialCode::ApprovalMismatch);
    let stopped = gate.run(|| sync_wire("a".into(), 3)).unwrap_err();
    assert_eq!(stopped.code(), DenialCode::ApprovalRejected);
    assert_eq!(gate.mode(), Mode::Shadow);
    assert_eq!(SYNC_WIRE.load(SeqCst) - before, 2);
    let records = sink.records();
    assert_paired(&records);
    assert_eq!(
        of(&records, Stage::Refused).last().unwrap().by.as_deref(),
        Some("dave")
    );
    assert_eq!(of(&records, Stage::ModeLowered).len(), 1);
    let entered: Vec<_> = of(&records, Stage::Enter)
        .into_iter()
        .map(|r| (r.decision, r.by))
        .collect();
    assert_eq!(
        entered,
        [
            (Some(Decision::Approved), Some("olga".to_owned())),
            (Some(Decision::Granted), Some("olga".to_owned())),
        ]
    );
}
