//! Guarantees 7 and 15 for a store's answer once it is taken: it must still be live when the call
//! reaches its body, and an answer "for the session" grants only to the gate that filed the request
//! and its clones.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use toolgate::approval::store::Answer;
use toolgate::approval::two_step::MemoryStore;
use toolgate::audit::{AuditError, AuditFuture, AuditRecord, AuditSink, MemorySink, Stage};
use toolgate::gate::BudgetScope;
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

use crate::common::serial;
use crate::fixtures::approval_surfaces::assert_paired;
use crate::fixtures::support::runtime;

static TRANSFERS: AtomicUsize = AtomicUsize::new(0);
static NOTES: AtomicUsize = AtomicUsize::new(0);

/// Transfer money: needs an approval in FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "s7a")]
fn transfer(cents: u64) -> Result<u64, Denied> {
    TRANSFERS.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

/// Transfer money, asynchronously.
#[tool(risk = "HIGH_WRITE", domain = "s7a")]
async fn transfer_async(cents: u64) -> Result<u64, Denied> {
    TRANSFERS.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

/// Write a note: runs in FULL_AUTO without an approval.
#[tool(risk = "LOW_WRITE", domain = "s7a")]
fn note(n: u64) -> Result<u64, Denied> {
    NOTES.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// A sink that records into `inner`, and once armed takes `hold` to write the next `enter` of a
/// transfer: in the thread that writes it, and, for an async call, in the future it hands back.
struct SlowEnter {
    armed: AtomicBool,
    hold: Duration,
    inner: MemorySink,
}

impl SlowEnter {
    fn new(hold: Duration) -> Arc<SlowEnter> {
        Arc::new(SlowEnter {
            armed: AtomicBool::new(false),
            hold,
            inner: MemorySink::new(),
        })
    }

    fn holds(&self, record: &AuditRecord) -> bool {
        record.stage == Stage::Enter
            && record.tool.starts_with("s7a.transfer")
            && self.armed.swap(false, Ordering::SeqCst)
    }
}

impl AuditSink for SlowEnter {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if self.holds(record) {
            std::thread::sleep(self.hold);
        }
        self.inner.record(record)
    }

    fn record_async(&self, record: &AuditRecord) -> Option<AuditFuture> {
        if !self.holds(record) {
            return None;
        }
        let written = self.inner.record(record);
        let hold = self.hold;
        Some(Box::pin(async move {
            tokio::time::sleep(hold).await;
            written
        }))
    }
}

fn approve(for_session: bool) -> Answer {
    Answer::Approve {
        by: "ops".into(),
        for_session,
        confirmation: None,
    }
}

/// A gate whose approvals live `ttl`, writing to `sink`, with a budget of one call an hour for its
/// agent, so that a call refused after its budget check shows whether its unit came back.
fn gate_of(ttl: Duration, sink: &Arc<SlowEnter>) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .agent("desk")
        .approval_ttl(ttl)
        .audit_shared(sink.clone())
        .budget(BudgetScope::Agent, 1, Duration::from_secs(3600))
        .build()
        .unwrap()
}

/// Guarantee 7 ("before it expires by the monotonic clock") and 13 (a unit given back by a refusal
/// after the check). A sync and an async call take their approval in time, then their `enter` record
/// takes longer than the approval has left. Asserts: each is refused `APPROVAL_EXPIRED` and runs
/// nothing, its `enter` gets its `exit`, its budget unit is back (a plain call under the same budget
/// of one runs after it), and with time to spare the same slow record lets an approved call run.
#[test]
fn an_approval_that_expires_while_its_call_is_decided_refuses_the_call_at_the_commit_point() {
    let _serial = serial();
    let rt = runtime();
    for asynchronous in [false, true] {
        let sink = SlowEnter::new(Duration::from_millis(700));
        let gate = gate_of(Duration::from_millis(400), &sink);
        let call = |gate: &Gate| -> Result<u64, Denied> {
            if asynchronous {
                rt.block_on(gate.scope(transfer_async(7)))
            } else {
                gate.run(|| transfer(7))
            }
        };
        let pending = call(&gate).expect_err("needs an approval");
        gate.answer(pending.approval_token().unwrap(), approve(false))
            .unwrap();
        sink.armed.store(true, Ordering::SeqCst);
        let before = TRANSFERS.load(Ordering::SeqCst);
        let late = call(&gate).expect_err("its approval expired before its body");
        assert_eq!(late.code(), DenialCode::ApprovalExpired, "{late}");
        assert_eq!(TRANSFERS.load(Ordering::SeqCst), before);
        let records = sink.inner.records();
        assert_paired(&records);
        let refused = records
            .iter()
            .rfind(|r| r.stage == Stage::Exit)
            .expect("the enter of the expired call is closed");
        assert_eq!(refused.code.as_deref(), Some("APPROVAL_EXPIRED"));
        let notes = NOTES.load(Ordering::SeqCst);
        gate.run(|| note(1))
            .expect("the refused call gave its budget unit back");
        assert_eq!(NOTES.load(Ordering::SeqCst), notes + 1);

        // The control: an approval with time to spare outlives the same slow record.
        let sink = SlowEnter::new(Duration::from_millis(300));
        let gate = gate_of(Duration::from_secs(30), &sink);
        let pending = call(&gate).expect_err("needs an approval");
        gate.answer(pending.approval_token().unwrap(), approve(false))
            .unwrap();
        sink.armed.store(true, Ordering::SeqCst);
        assert_eq!(
            call(&gate).map_err(|d| d.code()),
            Ok(7),
            "async: {asynchronous}"
        );
    }
}

/// Guarantee 15 ("A session grant belongs to the gate (and its clones) ..."), the side that must
/// still work: a clone of the gate that filed the request, on another thread, uses the answer for
/// the session, and the grant is the whole gate's; another gate of the same principal and agent on
/// the same store, answered for the session, runs its one call and holds no grant.
#[test]
fn a_session_answer_grants_to_the_filing_gates_clones_and_to_no_other_gate() {
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
    let filer = gate_of();
    let other = gate_of();
    let pending = filer.run(|| transfer(70)).expect_err("needs an approval");
    filer
        .answer(pending.approval_token().unwrap(), approve(true))
        .unwrap();
    let clone = filer.clone();
    let ran = std::thread::spawn(move || clone.run(|| transfer(70)).map_err(|d| d.code()))
        .join()
        .unwrap();
    assert_eq!(ran, Ok(70));
    assert_eq!(filer.grants().len(), 1, "the clone's grant is the gate's");
    assert_eq!(filer.run(|| transfer(70)).map_err(|d| d.code()), Ok(70));
    assert_eq!(
        other.run(|| transfer(70)).map_err(|d| d.code()),
        Err(DenialCode::ApprovalReused),
        "another gate of the same maker is not covered by the filer's grant"
    );

    // The other gate files its own request; it is answered for the session, and taken by the filer.
    let pending = other.run(|| transfer(71)).expect_err("needs an approval");
    other
        .answer(pending.approval_token().unwrap(), approve(true))
        .unwrap();
    let before = TRANSFERS.load(Ordering::SeqCst);
    assert_eq!(filer.run(|| transfer(71)).map_err(|d| d.code()), Ok(71));
    assert_eq!(
        filer.grants().len(),
        1,
        "the filer took no grant of another gate's request"
    );
    assert!(other.grants().is_empty());
    assert_ne!(
        filer.run(|| transfer(71)).map_err(|d| d.code()),
        Ok(71),
        "the answer ran its one call"
    );
    assert_eq!(TRANSFERS.load(Ordering::SeqCst) - before, 1);
}
