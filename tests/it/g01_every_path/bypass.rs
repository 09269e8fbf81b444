//! Every way we know of to reach a tool's body without a decision, each one refused.
//!
//! Each tool counts its runs in a static counter, and each test asserts the counter did not move where
//! the call was refused: a refusal code alone would not show that the body stayed shut. Where a test
//! depends on a gate that *would* allow the call, it also runs the call once inside that gate, so that a
//! refusal cannot come from a tool that never runs anyway. Tests share the counters, so they hold one lock.
//!
//! What other modules prove already is not repeated here: the policy table (`policy_table`), the
//! floor on a tool suite (`floor`), the gate's own mechanics (`gate`), call by name (`by_name`) and
//! duplicate ids (the `registry_clash` binary, `tests/registry_clash.rs`, where no tool of a clashing
//! id runs either).

use serde_json::json;
use std::cell::RefCell;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use toolgate::audit::{Decision, MemorySink, Stage};
use toolgate::gate::{DenyRuleError, RaiseRefused};
use toolgate::{
    AllowAllApprover, Approval, ApprovalRequest, DenialCode, Denied, Gate, GateError, Mode,
    registry, tool,
};

use crate::common::gates;
use crate::common::serial;
use crate::fixtures::support::YieldOnce;
use crate::fixtures::support::counted_tools;

static READS: AtomicUsize = AtomicUsize::new(0);
static WRITES: AtomicUsize = AtomicUsize::new(0);
static DELETES: AtomicUsize = AtomicUsize::new(0);
static PURGES: AtomicUsize = AtomicUsize::new(0);
static SYNC_STEPS: AtomicUsize = AtomicUsize::new(0);
static EXPLOSIONS: AtomicUsize = AtomicUsize::new(0);
static REMOVALS: AtomicUsize = AtomicUsize::new(0);

counted_tools! {
    /// Reads a document.
    #[tool(risk = "READ_ONLY", domain = "docs")] fn read(n: u64) -> READS += 1, n: u64;
    /// Writes a document.
    #[tool(risk = "LOW_WRITE", domain = "docs", callable)] fn write(n: u64) -> WRITES += 1, n: u64;
    /// Deletes a document for good.
    #[tool(risk = "HIGH_WRITE", domain = "docs", callable)]
    fn delete(n: u64) -> DELETES += 1, n: u64;
}

/// Purges every document, through the gate it is given.
#[tool(risk = "HIGH_WRITE", domain = "docs")]
fn purge(gate: &Gate) -> Result<(), Denied> {
    let _ = gate;
    PURGES.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Synchronises documents in `steps` steps, suspending between them and writing after each.
#[tool(risk = "LOW_WRITE", domain = "docs")]
async fn sync(steps: u64) -> Result<u64, Denied> {
    for step in 0..steps {
        SYNC_STEPS.fetch_add(1, Ordering::SeqCst);
        YieldOnce(false).await;
        write(step)?;
    }
    Ok(steps)
}

/// Reads a document that is corrupt: the body panics.
#[tool(risk = "READ_ONLY", domain = "docs")]
fn explode(n: u64) -> Result<u64, Denied> {
    EXPLOSIONS.fetch_add(1, Ordering::SeqCst);
    panic!("document {n} is corrupt")
}

counted_tools! {
    /// Removes an archive. It was `archive.unlink` before it was renamed.
    #[tool(risk = "LOW_WRITE", id = "archive.remove")]
    fn remove_archive(n: u64) -> REMOVALS += 1, n: u64;
}

fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

fn code<T: std::fmt::Debug>(result: Result<T, Denied>) -> DenialCode {
    result.expect_err("the call must be refused").code()
}

/// A FULL_AUTO gate that approves everything: the widest gate there is.
fn widest() -> Gate {
    gates::approved(Mode::FullAuto, AllowAllApprover)
}

fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

/// Polls a future that never waits on anything but itself to completion, on this thread.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = poll_once(future.as_mut()) {
            return output;
        }
    }
}

fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------------------
// No gate
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_direct_call_without_any_gate_runs_nothing() {
    let _serial = serial();
    let before = [&READS, &WRITES, &DELETES, &SYNC_STEPS].map(count);
    assert_eq!(code(read(1)), DenialCode::NoGate);
    assert_eq!(code(write(1)), DenialCode::NoGate);
    assert_eq!(code(delete(1)), DenialCode::NoGate);
    assert_eq!(code(block_on(sync(3))), DenialCode::NoGate);
    assert_eq!([&READS, &WRITES, &DELETES, &SYNC_STEPS].map(count), before);
    // No gate means no mode: the refusal names the tool and its risk, and no mode.
    let denied = delete(1).unwrap_err();
    assert_eq!(
        (denied.mode(), denied.risk()),
        (None, toolgate::Risk::HighWrite)
    );

    // The same calls do run inside a gate that allows them: the refusal came from the missing gate.
    widest().run(|| {
        read(1).unwrap();
        delete(1).unwrap();
    });
    assert_eq!(count(&READS), before[0] + 1);
    assert_eq!(count(&DELETES), before[2] + 1);
}

#[test]
fn a_thread_spawned_inside_a_gate_starts_without_it() {
    let _serial = serial();
    let gate = widest();
    let before = (count(&WRITES), count(&DELETES));
    gate.run(|| {
        let spawned = std::thread::spawn(|| (code(write(2)), code(delete(2))))
            .join()
            .unwrap();
        assert_eq!(spawned, (DenialCode::NoGate, DenialCode::NoGate));
        std::thread::scope(|scope| {
            let scoped = scope.spawn(|| code(write(3))).join().unwrap();
            assert_eq!(scoped, DenialCode::NoGate);
        });
        assert_eq!((count(&WRITES), count(&DELETES)), before);
        // On the thread that entered the gate, the same calls run.
        write(4).unwrap();
        delete(4).unwrap();
    });
    assert_eq!(
        (count(&WRITES), count(&DELETES)),
        (before.0 + 1, before.1 + 1)
    );
}

#[test]
fn a_tokio_task_spawned_inside_a_scope_starts_without_the_gate() {
    let _serial = serial();
    let gate = widest();
    let runtime = multi_thread_runtime();
    let before = (count(&WRITES), count(&DELETES), count(&SYNC_STEPS));
    let (spawned_async, spawned_sync, blocking, own) = runtime.block_on(gate.scope(async {
        let spawned_async = tokio::spawn(sync(2)).await.unwrap();
        let spawned_sync = tokio::spawn(async { delete(5) }).await.unwrap();
        let blocking = tokio::task::spawn_blocking(|| write(5)).await.unwrap();
        // The scoped task itself is gated: its own call runs.
        let own = delete(6);
        (spawned_async, spawned_sync, blocking, own)
    }));
    assert_eq!(code(spawned_async), DenialCode::NoGate);
    assert_eq!(code(spawned_sync), DenialCode::NoGate);
    assert_eq!(code(blocking), DenialCode::NoGate);
    assert_eq!(own.unwrap(), 6);
    assert_eq!(
        (count(&WRITES), count(&DELETES), count(&SYNC_STEPS)),
        (before.0, before.1 + 1, before.2)
    );

    // A task spawned with its own scope is gated, on whichever worker runs it.
    let scoped = runtime.block_on(async { tokio::spawn(gate.scope(sync(2))).await.unwrap() });
    assert_eq!(scoped.unwrap(), 2);
    assert_eq!(count(&SYNC_STEPS), before.2 + 2);
}

#[test]
fn a_tool_called_from_a_thread_local_destructor_is_refused() {
    struct CallsOnDrop;
    impl Drop for CallsOnDrop {
        fn drop(&mut self) {
            let refused = write(7).is_err_and(|d| d.code() == DenialCode::NoGate);
            DESTRUCTOR_REFUSED.store(refused, Ordering::SeqCst);
        }
    }
    thread_local! {
        static ON_EXIT: RefCell<Option<CallsOnDrop>> = const { RefCell::new(None) };
    }
    static DESTRUCTOR_REFUSED: AtomicBool = AtomicBool::new(false);

    let _serial = serial();
    let gate = widest();
    let before = count(&WRITES);
    std::thread::spawn(move || {
        // Armed inside the gate; the destructor runs as the thread exits, after the gate was left.
        gate.run(|| ON_EXIT.with(|slot| *slot.borrow_mut() = Some(CallsOnDrop)));
    })
    .join()
    .unwrap();
    assert!(DESTRUCTOR_REFUSED.load(Ordering::SeqCst));
    assert_eq!(count(&WRITES), before);
}

// ---------------------------------------------------------------------------------------------------------
// Widening
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_wider_gate_inside_a_narrower_one_widens_nothing() {
    let _serial = serial();
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let wide = widest();
    let before = (count(&WRITES), count(&DELETES), count(&PURGES));
    shadow.run(|| {
        // Entered inside: as ambient gate, as a scope, and passed as the tool's own `&Gate`.
        wide.run(|| {
            assert_eq!(code(write(1)), DenialCode::ModeNotAllowed);
            assert_eq!(code(delete(1)), DenialCode::ModeNotAllowed);
            assert_eq!(code(purge(&wide)), DenialCode::ModeNotAllowed);
        });
        assert_eq!(
            code(block_on(wide.scope(async { delete(1) }))),
            DenialCode::ModeNotAllowed
        );
        assert_eq!(code(purge(&wide)), DenialCode::ModeNotAllowed);
        // A call by name through the wider gate still runs inside the narrower ambient one.
        let by_name = registry().call(&wide, "docs.delete", json!({"n": 1}));
        assert_eq!(
            by_name.now().unwrap().unwrap_err().code(),
            "MODE_NOT_ALLOWED"
        );
    });
    assert_eq!(
        (count(&WRITES), count(&DELETES), count(&PURGES)),
        before,
        "no body ran"
    );
    // The wide gate on its own allows all of it.
    wide.run(|| {
        write(1).unwrap();
        delete(1).unwrap();
    });
    purge(&wide).unwrap();
    assert_eq!(
        (count(&WRITES), count(&DELETES), count(&PURGES)),
        (before.0 + 1, before.1 + 1, before.2 + 1)
    );
}

#[test]
fn a_lowered_gate_cannot_be_raised_nor_widened_from_inside() {
    let _serial = serial();
    let gate = widest();
    let clone = gate.clone();
    gate.lower(Mode::Shadow).unwrap();
    for mode in [Mode::Advisory, Mode::PartialAuto, Mode::FullAuto] {
        assert_eq!(
            clone.lower(mode),
            Err(RaiseRefused {
                current: Mode::Shadow,
                requested: mode
            })
        );
        assert_eq!(gate.mode(), Mode::Shadow, "a refused raise changes nothing");
    }
    let before = (count(&WRITES), count(&DELETES), count(&PURGES));
    let fresh = widest();
    gate.run(|| {
        assert_eq!(code(write(1)), DenialCode::ModeNotAllowed);
        // A new, wider gate entered inside the lowered one is still bounded by it.
        fresh.run(|| {
            assert_eq!(code(write(1)), DenialCode::ModeNotAllowed);
            assert_eq!(code(delete(1)), DenialCode::ModeNotAllowed);
        });
        assert_eq!(code(purge(&fresh)), DenialCode::ModeNotAllowed);
    });
    // A tool given the lowered gate as its `&Gate` is refused outside any ambient gate too.
    assert_eq!(code(purge(&clone)), DenialCode::ModeNotAllowed);
    assert_eq!((count(&WRITES), count(&DELETES), count(&PURGES)), before);
    // Lowering one gate does not touch another: the fresh gate alone still allows.
    fresh.run(|| write(1)).unwrap();
    assert_eq!(count(&WRITES), before.0 + 1);
}

// ---------------------------------------------------------------------------------------------------------
// Futures
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_future_created_inside_a_gate_and_polled_outside_it_is_refused() {
    let _serial = serial();
    let gate = widest();
    let before = (count(&SYNC_STEPS), count(&WRITES));

    // An async tool decides at its first poll, not when the future is made.
    let made_inside = gate.run(|| sync(2));
    assert_eq!(code(block_on(made_inside)), DenialCode::NoGate);

    // Made inside a scoped future, handed out of it unpolled, then awaited outside.
    #[allow(clippy::async_yields_async)]
    let handed_out = block_on(gate.scope(async { sync(2) }));
    assert_eq!(code(block_on(handed_out)), DenialCode::NoGate);

    // Awaited outside on a runtime's worker thread.
    let runtime = multi_thread_runtime();
    let made_inside = gate.run(|| sync(2));
    let on_runtime = runtime.block_on(async { tokio::spawn(made_inside).await.unwrap() });
    assert_eq!(code(on_runtime), DenialCode::NoGate);
    assert_eq!((count(&SYNC_STEPS), count(&WRITES)), before);

    // The same future made inside and polled inside runs, with each of its gated writes.
    assert_eq!(block_on(gate.scope(sync(2))).unwrap(), 2);
    assert_eq!(
        (count(&SYNC_STEPS), count(&WRITES)),
        (before.0 + 2, before.1 + 2)
    );
}

#[test]
fn dropping_every_handle_of_a_gate_leaves_a_pending_scoped_future_under_it() {
    let _serial = serial();
    let before = (count(&SYNC_STEPS), count(&WRITES));

    // Dropped without a change: the future goes on under the same gate (its scope holds it).
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let id = gate.id();
    let mut future = Box::pin(gate.scope(sync(2)));
    drop(gate);
    assert_eq!(future.gate().id(), id);
    assert!(poll_once(future.as_mut()).is_pending());
    assert!(poll_once(future.as_mut()).is_pending());
    assert_eq!(block_on(future).unwrap(), 2);
    assert_eq!(
        (count(&SYNC_STEPS), count(&WRITES)),
        (before.0 + 2, before.1 + 2)
    );

    // Lowered through a clone, then every handle dropped while the future is suspended: the future's
    // next gated call sees the lowered mode, not the mode it started in and not the absence of a gate.
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let mut future = Box::pin(gate.scope(sync(3)));
    assert!(poll_once(future.as_mut()).is_pending());
    assert_eq!(count(&SYNC_STEPS), before.0 + 3);
    gate.lower(Mode::Shadow).unwrap();
    drop(gate);
    assert_eq!(code(block_on(future)), DenialCode::ModeNotAllowed);
    assert_eq!(
        (count(&SYNC_STEPS), count(&WRITES)),
        (before.0 + 3, before.1 + 2),
        "the write after the suspension did not run"
    );

    // Dropping the scoped future itself mid-way leaves this thread without a gate.
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let mut future = Box::pin(gate.scope(sync(5)));
    assert!(poll_once(future.as_mut()).is_pending());
    drop(future);
    drop(gate);
    assert_eq!(code(write(1)), DenialCode::NoGate);
    assert_eq!(count(&SYNC_STEPS), before.0 + 4);
    assert_eq!(count(&WRITES), before.1 + 2);
}

// ---------------------------------------------------------------------------------------------------------
// Panics and leaks
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_panicking_approver_refuses_runs_nothing_and_the_gate_still_works() {
    let _serial = serial();
    let asked = Arc::new(AtomicUsize::new(0));
    let sink = MemorySink::new();
    let gate = gates::approved_audited(
        Mode::FullAuto,
        {
            let asked = Arc::clone(&asked);
            move |_: &ApprovalRequest<'_>| {
                // The first answer is a panic; every later one an approval.
                if asked.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("the approval service crashed");
                }
                Approval::Approve
            }
        },
        sink.clone(),
    );
    let before = count(&DELETES);
    gate.run(|| {
        let denied = delete(8).unwrap_err();
        assert_eq!(denied.code(), DenialCode::ApprovalRejected);
        assert_eq!(denied.detail(), Some("the approver panicked"));
        assert_eq!(count(&DELETES), before, "the body did not run");
        // Same thread, same gate, same approver: the next call is decided normally.
        assert_eq!(delete(9).unwrap(), 9);
    });
    assert_eq!(count(&DELETES), before + 1);
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // The panic did not leave the gate entered.
    assert_eq!(code(delete(10)), DenialCode::NoGate);
    assert_eq!(count(&DELETES), before + 1);

    let records = sink.records();
    let stages: Vec<(Stage, Option<Decision>)> =
        records.iter().map(|r| (r.stage, r.decision)).collect();
    assert_eq!(
        stages,
        [
            (Stage::Refused, Some(Decision::Refused)),
            (Stage::Enter, Some(Decision::Approved)),
            (Stage::Exit, None),
        ]
    );
    assert_eq!(records[0].code.as_deref(), Some("APPROVAL_REJECTED"));
}

#[test]
fn a_body_panic_caught_by_catch_unwind_leaves_no_gate_entered() {
    let _serial = serial();
    let partial = Gate::new(Mode::PartialAuto).unwrap();
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let (explosions, writes) = (count(&EXPLOSIONS), count(&WRITES));
    partial.run(|| {
        let caught = catch_unwind(AssertUnwindSafe(|| shadow.run(|| explode(1))));
        assert!(caught.is_err());
        assert_eq!(count(&EXPLOSIONS), explosions + 1);
        // The inner SHADOW gate was left on the unwind: a write under PARTIAL_AUTO alone runs. Were it
        // still entered, the write would be refused; were the outer gate gone too, NO_GATE.
        write(1).unwrap();
        // Caught inside the same gate: the gate is still there.
        assert!(catch_unwind(AssertUnwindSafe(|| explode(2))).is_err());
        write(2).unwrap();
    });
    assert_eq!(count(&WRITES), writes + 2);
    assert_eq!(code(write(3)), DenialCode::NoGate);

    // A panic out of a scoped future's poll, caught around the poll.
    let mut future = Box::pin(partial.scope(async { explode(3) }));
    let caught = catch_unwind(AssertUnwindSafe(|| poll_once(future.as_mut())));
    assert!(caught.is_err());
    assert_eq!(count(&EXPLOSIONS), explosions + 3);
    assert_eq!(code(write(4)), DenialCode::NoGate);
    assert_eq!(count(&WRITES), writes + 2);
}

#[test]
fn forgetting_a_scoped_future_or_a_run_result_leaves_no_gate_entered() {
    let _serial = serial();
    let gate = widest();
    let before = (count(&READS), count(&WRITES), count(&SYNC_STEPS));

    std::mem::forget(gate.run(|| read(1)));
    std::mem::forget(gate.run(|| sync(1)));
    assert_eq!(code(write(1)), DenialCode::NoGate);

    // Forgotten unpolled, and forgotten while suspended inside the tool's body.
    std::mem::forget(gate.scope(sync(1)));
    let mut suspended = Box::pin(gate.scope(sync(3)));
    assert!(poll_once(suspended.as_mut()).is_pending());
    std::mem::forget(suspended);
    assert_eq!(code(write(2)), DenialCode::NoGate);

    // `ManuallyDrop` is a forget too.
    let _kept = std::mem::ManuallyDrop::new(gate.scope(sync(1)));
    assert_eq!(code(delete(1)), DenialCode::NoGate);

    assert_eq!(
        (count(&READS), count(&WRITES), count(&SYNC_STEPS)),
        (before.0 + 1, before.1, before.2 + 1)
    );
}

// ---------------------------------------------------------------------------------------------------------
// Re-entrance
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_tool_called_from_inside_the_approver_is_decided_on_its_own() {
    let _serial = serial();
    /// How deep in nested calls of `docs.delete` the approver is asked.
    static DEPTH: AtomicUsize = AtomicUsize::new(0);
    let nested_codes = Arc::new(Mutex::new(Vec::new()));
    let approve_outer = Arc::new(AtomicBool::new(true));
    let gate = gates::approved(Mode::FullAuto, {
        let nested_codes = Arc::clone(&nested_codes);
        let approve_outer = Arc::clone(&approve_outer);
        move |request: &ApprovalRequest<'_>| {
            if request.tool.id != "docs.delete" {
                return Approval::Reject("only deletes are approved".into());
            }
            let depth = DEPTH.fetch_add(1, Ordering::SeqCst);
            let answer = if depth == 0 {
                // Re-entrant calls, from inside the decision of the outer call: the same tool,
                // a tool that needs no approval, and another that needs one.
                let nested = [delete(100).err(), write(100).err(), purge_ambient().err()];
                nested_codes
                    .lock()
                    .unwrap()
                    .extend(nested.map(|d| d.map(|d| d.code())));
                if approve_outer.load(Ordering::SeqCst) {
                    Approval::Approve
                } else {
                    Approval::Reject("outer call rejected".into())
                }
            } else if approve_outer.load(Ordering::SeqCst) {
                Approval::Reject("nested call rejected".into())
            } else {
                Approval::Approve
            };
            DEPTH.fetch_sub(1, Ordering::SeqCst);
            answer
        }
    });

    // Outer approved, nested delete rejected: the outer body runs once, the nested one never.
    let (deletes, writes) = (count(&DELETES), count(&WRITES));
    assert_eq!(gate.run(|| delete(1)).unwrap(), 1);
    assert_eq!(count(&DELETES), deletes + 1);
    assert_eq!(count(&WRITES), writes + 1, "the nested write was allowed");
    assert_eq!(
        *nested_codes.lock().unwrap(),
        [
            Some(DenialCode::ApprovalRejected),
            None,
            Some(DenialCode::ApprovalRejected)
        ]
    );

    // Nested delete approved, outer rejected: the approval of the one does not carry to the other.
    nested_codes.lock().unwrap().clear();
    approve_outer.store(false, Ordering::SeqCst);
    let denied = gate.run(|| delete(2)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRejected);
    assert_eq!(denied.detail(), Some("outer call rejected"));
    assert_eq!(count(&DELETES), deletes + 2, "only the nested delete ran");
    assert_eq!(nested_codes.lock().unwrap()[0], None);
    assert_eq!(DEPTH.load(Ordering::SeqCst), 0);
}

counted_tools! {
    /// A second HIGH_WRITE tool for re-entrant calls, through the ambient gates.
    #[tool(risk = "HIGH_WRITE", domain = "docs")] fn purge_ambient() -> PURGES += 1;
}

// ---------------------------------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_look_alike_id_is_an_unknown_tool_and_runs_nothing() {
    let _serial = serial();
    let gate = widest();
    let look_alikes = [
        // Case.
        "Docs.delete",
        "docs.Delete",
        "DOCS.DELETE",
        // Cyrillic о (U+043E), с (U+0441), ѕ (U+0455), е (U+0435), ԁ (U+0501), ӏ (U+04CF).
        "d\u{043e}cs.delete",
        "do\u{0441}s.delete",
        "doc\u{0455}.delete",
        "docs.d\u{0435}lete",
        "\u{0501}ocs.delete",
        "docs.de\u{04cf}ete",
        // Greek ο (U+03BF) and τ (U+03C4) and a Latin small capital.
        "d\u{03bf}cs.delete",
        "docs.dele\u{03c4}e",
        "docs.\u{1d05}elete",
        // Fullwidth letters and a fullwidth full stop.
        "\u{ff44}ocs.delete",
        "docs\u{ff0e}delete",
        // Spaces, and invisible characters: zero-width joiner, non-joiner and space, soft hyphen,
        // word joiner, byte-order mark, a combining mark.
        "docs.delete ",
        " docs.delete",
        "docs.delete\t",
        "docs.del\u{200d}ete",
        "docs.del\u{200c}ete",
        "docs.delete\u{200b}",
        "docs.de\u{00ad}lete",
        "docs.delete\u{2060}",
        "\u{feff}docs.delete",
        "docs.delete\u{0301}",
        // A NUL, and a path-like spelling.
        "docs.delete\0",
        "docs/delete",
        "./docs.delete",
    ];
    let before = count(&DELETES);
    for id in look_alikes {
        assert_ne!(id, "docs.delete");
        let result = registry()
            .call(&gate, id, json!({"n": 1}))
            .now()
            .expect("an unknown tool is ready at once");
        assert_eq!(result.unwrap_err().code(), "UNKNOWN_TOOL", "{id:?}");
        assert!(registry().get(id).is_none(), "{id:?}");
        assert!(toolgate::registry().manifest(id).is_none(), "{id:?}");
    }
    assert_eq!(count(&DELETES), before, "no look-alike ran the body");

    // The exact id, through the same gate, runs.
    let exact = registry().call(&gate, "docs.delete", json!({"n": 1}));
    assert_eq!(exact.now().unwrap().unwrap(), json!(1));
    assert_eq!(count(&DELETES), before + 1);
}

#[test]
fn a_deny_rule_naming_a_renamed_tool_fails_the_build() {
    let _serial = serial();
    let stale = ["archive.unlink", "archive.unlink*", "*.unlink"];
    for rule in stale {
        let attempts = [
            Gate::builder().deny(rule).build(),
            Gate::builder()
                .mode(Mode::FullAuto)
                .deny("docs.delete")
                .deny(rule)
                .approver(AllowAllApprover)
                .build(),
            Gate::builder()
                .mode(Mode::PartialAuto)
                .deny(rule)
                .two_step_approvals()
                .audit(MemorySink::new())
                .build(),
        ];
        for attempt in attempts {
            let error = attempt.expect_err("a rule that matches nothing is an error");
            assert_eq!(
                error,
                GateError::DenyRules(vec![DenyRuleError::MatchesNothing {
                    pattern: rule.to_owned()
                }]),
                "{rule}"
            );
            assert!(error.to_string().contains(rule), "{error}");
        }
    }
    // The rule under the tool's new name refuses it, and its body stays shut.
    let gate = gates::denying(Mode::PartialAuto, "archive.remove");
    let before = count(&REMOVALS);
    let denied = gate.run(|| remove_archive(1)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::DenyListed);
    assert_eq!(denied.detail(), Some("archive.remove"));
    assert_eq!(count(&REMOVALS), before);
    Gate::new(Mode::PartialAuto)
        .unwrap()
        .run(|| remove_archive(1))
        .unwrap();
    assert_eq!(count(&REMOVALS), before + 1);
}

// ---------------------------------------------------------------------------------------------------------
// Approvals
// ---------------------------------------------------------------------------------------------------------

static PASSWORD_SETS: AtomicUsize = AtomicUsize::new(0);

/// Sets a user's password; the password is kept out of the audit log.
#[tool(risk = "HIGH_WRITE", domain = "users", redact = [password])]
fn set_password(user: String, password: String) -> Result<(), Denied> {
    let _ = (user, password);
    PASSWORD_SETS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// The audit log reads `"[REDACTED]"` for a redacted argument whatever its value, but an approval is bound
/// to the value: an approval given for one password does not run the call with another.
#[test]
fn a_two_step_approval_runs_only_the_call_it_was_given_for_redacted_arguments_included() {
    let _serial = serial();
    let gate = gates::two_step(Mode::FullAuto);
    let before = count(&PASSWORD_SETS);
    let call = |password: &str| gate.run(|| set_password("alice".into(), password.into()));
    let token = call("correct horse").unwrap_err();
    gate.approve(token.approval_token().unwrap()).unwrap();
    // Another value of the redacted argument is another call: the approval does not cover it.
    let other = call("attacker's choice").unwrap_err();
    assert_eq!(other.code(), DenialCode::ApprovalPending);
    assert_eq!(count(&PASSWORD_SETS), before);
    // The approved call runs, once.
    call("correct horse").unwrap();
    assert_eq!(count(&PASSWORD_SETS), before + 1);
}
