//! Outside attacks on guarantee 7 where two-step approvals meet another stateful feature: an audit
//! sink whose write of an approved call's `enter` is pending when the call is dropped, and session
//! answers taken up by another gate of the same maker after the gate that asked is gone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use toolgate::approval::store::Answer;
use toolgate::approval::two_step::MemoryStore;
use toolgate::audit::{AuditError, AuditFuture, AuditRecord, AuditSink, MemorySink, Stage};
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

use crate::common::serial;
use crate::fixtures::approval_surfaces::assert_paired;
use crate::fixtures::support::runtime;

static SENDS: AtomicUsize = AtomicUsize::new(0);
static PAYS: AtomicUsize = AtomicUsize::new(0);

/// Send money, asynchronously.
#[tool(risk = "HIGH_WRITE", domain = "a7s")]
async fn send_async(cents: u64) -> Result<u64, Denied> {
    SENDS.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

/// Pay an invoice.
#[tool(risk = "HIGH_WRITE", domain = "a7s")]
fn pay(invoice: u64) -> Result<u64, Denied> {
    PAYS.fetch_add(1, Ordering::SeqCst);
    Ok(invoice)
}

/// A sink that, while `hold` is set, keeps the `enter` of `a7s.send_async` pending forever on the
/// async path (after recording it into `inner`).
struct HoldingEnter {
    hold: AtomicBool,
    inner: MemorySink,
}

impl AuditSink for HoldingEnter {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        self.inner.record(record)
    }

    fn record_async(&self, record: &AuditRecord) -> Option<AuditFuture> {
        if self.hold.load(Ordering::SeqCst)
            && record.stage == Stage::Enter
            && record.tool == "a7s.send_async"
        {
            self.inner.record(record).ok()?;
            Some(Box::pin(std::future::pending()))
        } else {
            None
        }
    }
}

fn approve(by: &str, for_session: bool) -> Answer {
    Answer::Approve {
        by: by.into(),
        for_session,
        confirmation: None,
    }
}

/// Guarantee 7: "A two-step approval runs one call"; with guarantee 8, "every `enter` written by any
/// gate gets its `exit`". Attack: an approved async call is dropped while its `enter` record's write is
/// pending in the sink; the operator then approves the same token again, and the agent retries the
/// call three times, the sink now writing at once. Asserts: the second answer to the same token is
/// refused, at most one of all the attempts runs its body, and every `enter` has its `exit`.
#[test]
fn a07_61_an_async_call_dropped_while_its_enter_is_pending_leaves_its_approval_usable_at_most_once()
{
    let _serial = serial();
    let sink = Arc::new(HoldingEnter {
        hold: AtomicBool::new(false),
        inner: MemorySink::new(),
    });
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_ttl(Duration::from_secs(600))
        .audit_shared(sink.clone())
        .build()
        .unwrap();
    let rt = runtime();
    let before = SENDS.load(Ordering::SeqCst);
    let pending = rt
        .block_on(gate.scope(send_async(61)))
        .expect_err("the call needs an approval");
    assert_eq!(pending.code(), DenialCode::ApprovalPending, "{pending}");
    let token = pending.approval_token().unwrap().to_owned();
    gate.answer(&token, approve("ops", false)).unwrap();

    sink.hold.store(true, Ordering::SeqCst);
    let dropped = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(200), gate.scope(send_async(61))).await
    });
    assert!(dropped.is_err(), "the held call finished: {dropped:?}");
    sink.hold.store(false, Ordering::SeqCst);
    assert_eq!(SENDS.load(Ordering::SeqCst), before, "a dropped call ran");

    assert!(
        gate.answer(&token, approve("ops", false)).is_err(),
        "the same token was answered twice"
    );
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        outcomes.push(
            rt.block_on(gate.scope(send_async(61)))
                .map_err(|denied| denied.code().as_str().to_owned()),
        );
    }
    let ran = SENDS.load(Ordering::SeqCst) - before;
    assert!(ran <= 1, "one approval ran {ran} calls: {outcomes:?}");
    assert_paired(&sink.inner.records());
}

/// Guarantee 7 ("A session grant covers no more than its answer said, and dies with its gate") and 15
/// ("A session grant belongs to the gate (and its clones) whose approver gave it"). Attack: a gate
/// files a request in a store it shares with another gate of the same principal and agent (a process
/// restarted, a second worker); the first gate is dropped; the operator answers its request "for the
/// session"; the second gate makes the same call, then another call of the tool and the same call
/// again. Asserts: both later calls are asked for, not run (the other call `APPROVAL_PENDING`; the
/// answered call repeated `APPROVAL_REUSED`, as docs/approvals.md says of a second run, or
/// `APPROVAL_PENDING`), and the second gate holds no session grant from the dropped gate's answer.
#[test]
fn a07_62_a_session_answer_to_a_dropped_gates_request_grants_nothing_to_another_gate() {
    let _serial = serial();
    let store = Arc::new(MemoryStore::new(Duration::from_secs(600)).unwrap());
    let gate_of = || {
        Gate::builder()
            .mode(Mode::FullAuto)
            .principal("alice")
            .agent("desk")
            .approval_store_shared(store.clone())
            .build()
            .unwrap()
    };
    let first = gate_of();
    let pending = first.run(|| pay(620)).expect_err("needs an approval");
    let token = pending.approval_token().unwrap().to_owned();
    drop(first);
    let second = gate_of();
    second.answer(&token, approve("ops", true)).unwrap();
    let before = PAYS.load(Ordering::SeqCst);
    let same = second.run(|| pay(620)).map_err(|d| d.code());
    let other = second.run(|| pay(621)).map_err(|d| d.code());
    let again = second.run(|| pay(620)).map_err(|d| d.code());
    assert!(
        other == Err(DenialCode::ApprovalPending)
            && matches!(
                again,
                Err(DenialCode::ApprovalReused | DenialCode::ApprovalPending)
            ),
        "a call ran again on the dropped gate's session answer (the answered one: {same:?}; \
         another: {other:?}; the answered one again: {again:?}; grants {:?})",
        second.grants()
    );
    assert!(
        second.grants().is_empty(),
        "a gate took the session grant answered to a dropped gate ({same:?})"
    );
    assert!(PAYS.load(Ordering::SeqCst) - before <= 1);
}

/// A sink that holds the `enter` record of `a7s.pay` for `hold` once armed.
struct SlowEnter {
    armed: AtomicBool,
    hold: Duration,
}

impl AuditSink for SlowEnter {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if record.stage == Stage::Enter
            && record.tool == "a7s.pay"
            && self.armed.swap(false, Ordering::SeqCst)
        {
            std::thread::sleep(self.hold);
        }
        Ok(())
    }
}

/// Guarantee 7: "A two-step approval runs one call ... before it expires by the monotonic clock."
/// Attack: approvals live 1 s; a call is approved; its retry takes the approval at once, then its
/// `enter` record takes 1.5 s to write. Asserts: the body does not run after the approval expired.
#[test]
fn a07_66_an_approved_call_whose_enter_outlasts_the_approval_runs_nothing_after_its_expiry() {
    let _serial = serial();
    let sink = Arc::new(SlowEnter {
        armed: AtomicBool::new(false),
        hold: Duration::from_millis(1_500),
    });
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_ttl(Duration::from_secs(1))
        .audit_shared(sink.clone())
        .build()
        .unwrap();
    let filed = std::time::Instant::now();
    let pending = gate.run(|| pay(660)).expect_err("needs an approval");
    gate.answer(pending.approval_token().unwrap(), approve("ops", false))
        .unwrap();
    sink.armed.store(true, Ordering::SeqCst);
    let before = PAYS.load(Ordering::SeqCst);
    let result = gate.run(|| pay(660)).map_err(|d| d.code());
    let ran_at = filed.elapsed();
    assert!(
        result.is_err() && PAYS.load(Ordering::SeqCst) == before,
        "an approval that lives 1 s ran its call {ran_at:?} after it was filed: {result:?}"
    );
}
