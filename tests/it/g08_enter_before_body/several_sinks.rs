//! A gate that writes to several sinks: every record reaches each, in order, and an `enter` that any of
//! them refuses refuses the call, with each sink's log still closing every `enter` it holds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use toolgate::audit::{
    AuditError, AuditFuture, AuditRecord, AuditSink, JsonlSink, MemorySink, Outcome, Stage,
    TracingSink, verify_file,
};
use toolgate::{Denied, Gate, Mode, tool};

use tracing_subscriber::layer::SubscriberExt;

use crate::common::Scratch;
use crate::fixtures::support::{assert_audit_refused, counted_tools};

static READS: AtomicUsize = AtomicUsize::new(0);

counted_tools! {
    /// Read a note.
    #[tool(risk = "READ_ONLY", domain = "tee")] fn read_note(n: u32) -> READS += 1, n: u32;
}

static WRITES: AtomicUsize = AtomicUsize::new(0);

counted_tools! {
    /// Write a note.
    #[tool(risk = "LOW_WRITE", domain = "tee")] fn write_note(n: u32) -> WRITES += 1, n: u32;
}

static ASYNC_WRITES: AtomicUsize = AtomicUsize::new(0);

/// Write a note, later.
#[tool(risk = "LOW_WRITE", domain = "tee")]
async fn write_note_async(n: u32) -> Result<u32, Denied> {
    ASYNC_WRITES.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// A gate of `mode` that records to `first`, then to `second`.
fn two_sinks(mode: Mode, first: impl AuditSink, second: impl AuditSink) -> Gate {
    Gate::builder()
        .mode(mode)
        .audit(first)
        .audit(second)
        .build()
        .unwrap()
}

fn stages(sink: &MemorySink) -> Vec<(Stage, String, Option<Outcome>)> {
    sink.records()
        .into_iter()
        .map(|r| (r.stage, r.tool.to_string(), r.outcome))
        .collect()
}

#[test]
fn two_sinks_both_get_every_record_in_order() {
    let (first, second) = (MemorySink::new(), MemorySink::new());
    let gate = two_sinks(Mode::Shadow, first.clone(), second.clone());
    assert_eq!(gate.run(|| read_note(1)).unwrap(), 1);
    assert!(gate.run(|| write_note(2)).is_err());
    assert_eq!(gate.run(|| read_note(3)).unwrap(), 3);
    let expected = [
        (Stage::Enter, "tee.read_note".to_owned(), None),
        (Stage::Exit, "tee.read_note".to_owned(), Some(Outcome::Ok)),
        (Stage::Refused, "tee.write_note".to_owned(), None),
        (Stage::Enter, "tee.read_note".to_owned(), None),
        (Stage::Exit, "tee.read_note".to_owned(), Some(Outcome::Ok)),
    ];
    assert_eq!(stages(&first), expected);
    assert_eq!(
        first.records(),
        second.records(),
        "the same records, in order"
    );
}

#[test]
fn an_enter_the_second_sink_refuses_refuses_the_call_and_the_first_closes_it() {
    let (first, second) = (MemorySink::new(), MemorySink::new());
    second.fail(true);
    let gate = two_sinks(Mode::FullAuto, first.clone(), second.clone());
    let before = WRITES.load(Ordering::SeqCst);
    let denied = gate.run(|| write_note(7)).unwrap_err();
    assert_eq!(denied.code(), "AUDIT_UNAVAILABLE");
    assert_eq!(
        WRITES.load(Ordering::SeqCst),
        before,
        "the body must not run"
    );
    let records = first.records();
    assert_eq!(
        stages(&first),
        [
            (Stage::Enter, "tee.write_note".to_owned(), None),
            (
                Stage::Exit,
                "tee.write_note".to_owned(),
                Some(Outcome::Refused)
            ),
        ],
        "the sink that wrote the enter holds its exit"
    );
    assert_eq!(records[1].call, records[0].call);
    assert_eq!(records[1].code.as_deref(), Some("AUDIT_UNAVAILABLE"));
    assert_eq!(records[1].gate, gate.id());
    assert!(second.records().is_empty());

    // The first sink refusing: the second never sees the call.
    second.fail(false);
    first.fail(true);
    first.take();
    let denied = gate.run(|| write_note(8)).unwrap_err();
    assert_eq!(denied.code(), "AUDIT_UNAVAILABLE");
    assert_eq!(WRITES.load(Ordering::SeqCst), before);
    assert!(first.records().is_empty() && second.records().is_empty());
}

/// A sink that commits each `enter` later (a database), and refuses it when told to.
struct Later {
    sink: MemorySink,
    refuse: bool,
}

impl AuditSink for Later {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        self.sink.record(record)
    }

    fn record_async(&self, record: &AuditRecord) -> Option<AuditFuture> {
        if record.stage != Stage::Enter {
            return None;
        }
        let result = match self.refuse {
            true => Err(AuditError::new("the database is gone")),
            false => self.sink.record(record),
        };
        Some(Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            result
        }))
    }
}

#[test]
fn an_async_sink_among_several_is_awaited_and_its_refusal_refuses_the_call() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (first, committed) = (MemorySink::new(), MemorySink::new());
    let later = Later {
        sink: committed.clone(),
        refuse: false,
    };
    let gate = two_sinks(Mode::FullAuto, first.clone(), later);
    assert_eq!(
        runtime.block_on(gate.scope(write_note_async(1))).unwrap(),
        1
    );
    let expected = [
        (Stage::Enter, "tee.write_note_async".to_owned(), None),
        (
            Stage::Exit,
            "tee.write_note_async".to_owned(),
            Some(Outcome::Ok),
        ),
    ];
    assert_eq!(stages(&first), expected);
    assert_eq!(stages(&committed), expected);

    let (first, committed) = (MemorySink::new(), MemorySink::new());
    let later = Later {
        sink: committed.clone(),
        refuse: true,
    };
    let gate = two_sinks(Mode::FullAuto, first.clone(), later);
    let before = ASYNC_WRITES.load(Ordering::SeqCst);
    let denied = runtime
        .block_on(gate.scope(write_note_async(2)))
        .unwrap_err();
    assert_audit_refused(&denied, "the database is gone", &ASYNC_WRITES, before);
    assert_eq!(
        stages(&first),
        [
            (Stage::Enter, "tee.write_note_async".to_owned(), None),
            (
                Stage::Exit,
                "tee.write_note_async".to_owned(),
                Some(Outcome::Refused)
            ),
        ]
    );
    // The sink that refused the `enter` holds none: it is handed the `exit` alone (`abandoned`).
    assert_eq!(
        stages(&committed),
        [(
            Stage::Exit,
            "tee.write_note_async".to_owned(),
            Some(Outcome::Refused)
        )]
    );
}

#[test]
fn a_jsonl_log_and_tracing_events_side_by_side() {
    let dir = Scratch::new("tee-jsonl-tracing");
    let log = dir.path("audit.jsonl");
    let events = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::Shadow)
        .audit(JsonlSink::open(&log).unwrap())
        .audit(TracingSink::new())
        .audit(events.clone())
        .build()
        .unwrap();
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    tracing::subscriber::with_default(subscriber, || {
        assert_eq!(gate.run(|| read_note(4)).unwrap(), 4);
    });
    drop(gate);
    let report = verify_file(&log).unwrap();
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 2);
    let shipped = captured.0.lock().unwrap().join("\n");
    assert!(
        shipped.contains("tee.read_note") && shipped.contains("enter") && shipped.contains("exit"),
        "{shipped}"
    );
    assert_eq!(events.len(), 2);
}

/// Keeps the fields of every event, as a log shipper would see them.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Captured {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
}

static BURNS: AtomicUsize = AtomicUsize::new(0);

counted_tools! {
    /// Burn a note.
    #[tool(risk = "LOW_WRITE", domain = "tee")] fn burn_note(n: u32) -> BURNS += 1, n: u32;
}

/// A sink whose `enter` panics.
struct Panicking;

impl AuditSink for Panicking {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        assert!(record.stage != Stage::Enter, "the sink's disk is on fire");
        Ok(())
    }
}

#[test]
fn a_sink_that_panics_on_an_enter_leaves_the_sinks_before_it_closed() {
    let first = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .audit(first.clone())
        .audit(Panicking)
        .build()
        .unwrap();
    let before = BURNS.load(Ordering::SeqCst);
    let ran = std::panic::catch_unwind(|| gate.run(|| burn_note(9)));
    assert_eq!(
        BURNS.load(Ordering::SeqCst),
        before,
        "the body must not run"
    );
    let _ = ran;
    let records = first.records();
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(
        (records[0].stage, records[1].stage, records[1].outcome),
        (Stage::Enter, Stage::Exit, Some(Outcome::Refused))
    );
}
