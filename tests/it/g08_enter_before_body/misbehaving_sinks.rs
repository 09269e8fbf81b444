//! Guarantee 8 with several sinks, exhaustively over how one of three sinks can misbehave on an
//! `enter` (refuse it or panic, in `record`, in `record_async` or in the future it returns; hand it on
//! before refusing it; never answer while the call is dropped), where it stands (first, middle,
//! last), whether the other sinks answer through `record_async`, and how the tool is called (sync,
//! async, by name of each). For every sink, exactly which records it took and which `exit` it was
//! handed for an `enter` it refused: no refused `enter` reaches a later sink, and every sink that took
//! an `enter` gets exactly one `exit`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::json;
use toolgate::audit::{AuditError, AuditFuture, AuditRecord, AuditSink, Outcome, Stage};
use toolgate::{Denied, Gate, Mode, tool};

static RAN: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn ran(n: u32) -> bool {
    RAN.lock().unwrap().contains(&n)
}

/// Note a number.
#[tool(risk = "LOW_WRITE", domain = "sinks8", callable)]
fn note(n: u32) -> Result<u32, Denied> {
    RAN.lock().unwrap().push(n);
    Ok(n)
}

/// Note a number, later.
#[tool(risk = "LOW_WRITE", domain = "sinks8", callable)]
async fn note_async(n: u32) -> Result<u32, Denied> {
    tokio::task::yield_now().await;
    RAN.lock().unwrap().push(n);
    Ok(n)
}

/// How a sink misbehaves on an `enter` record (every other record it takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    /// `record` refuses it.
    Refuses,
    /// `record` panics.
    Panics,
    /// `record` hands it on (takes it), then refuses it: a sink that wraps others.
    HandsOnThenRefuses,
    /// `record_async` returns a future that resolves `Err`.
    FutureFails,
    /// `record_async` panics.
    AsyncPanics,
    /// The future `record_async` returns panics.
    FuturePanics,
}

const HOWS: [How; 6] = [
    How::Refuses,
    How::Panics,
    How::HandsOnThenRefuses,
    How::FutureFails,
    How::AsyncPanics,
    How::FuturePanics,
];

impl How {
    /// Whether it misbehaves through `record_async`, which only an async decision asks.
    fn is_async(self) -> bool {
        matches!(
            self,
            How::FutureFails | How::AsyncPanics | How::FuturePanics
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Sync,
    Async,
    SyncByName,
    AsyncByName,
}

const PATHS: [Path; 4] = [Path::Sync, Path::Async, Path::SyncByName, Path::AsyncByName];

impl Path {
    /// Whether the decision may await a sink's `record_async`.
    fn awaits(self) -> bool {
        matches!(self, Path::Async | Path::AsyncByName)
    }
}

/// What a sink was given: a record it took (`Ok` from `record`, or handed to `record_async`), or the
/// `exit` of an `enter` it refused, through `abandoned`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Took(Stage, Option<Outcome>),
    Abandoned(Option<Outcome>),
}

/// A sink that logs what it is given, misbehaves on an `enter` as `how` says, and answers through
/// `record_async` where `answers_later` (a future that is pending once before it resolves).
struct Probe {
    log: Arc<Mutex<Vec<Seen>>>,
    how: Option<How>,
    answers_later: bool,
}

/// A future pending once, then `result`.
struct Later(bool, Option<Result<(), AuditError>>);

impl Future for Later {
    type Output = Result<(), AuditError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if !self.0 {
            self.0 = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(self.1.take().expect("polled after it resolved"))
    }
}

impl Probe {
    fn took(&self, record: &AuditRecord) {
        self.log
            .lock()
            .unwrap()
            .push(Seen::Took(record.stage, record.outcome));
    }
}

impl AuditSink for Probe {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if record.stage == Stage::Enter {
            match self.how {
                Some(How::Refuses) => return Err(AuditError::new("the sink refuses")),
                Some(How::Panics) => panic!("the sink's disk is on fire"),
                Some(How::HandsOnThenRefuses) => {
                    self.took(record);
                    return Err(AuditError::new("the sink refuses what it handed on"));
                }
                _ => {}
            }
        }
        self.took(record);
        Ok(())
    }

    fn record_async(&self, record: &AuditRecord) -> Option<AuditFuture> {
        let misbehaves = record.stage == Stage::Enter && self.how.is_some_and(How::is_async);
        if !self.answers_later && !misbehaves {
            return None;
        }
        match (record.stage, self.how) {
            (Stage::Enter, Some(How::AsyncPanics)) => panic!("the sink's queue is on fire"),
            (Stage::Enter, Some(How::FuturePanics)) => Some(Box::pin(async {
                tokio::task::yield_now().await;
                panic!("the sink's commit is on fire")
            })),
            (Stage::Enter, Some(How::FutureFails)) => Some(Box::pin(Later(
                false,
                Some(Err(AuditError::new("the sink's commit failed"))),
            ))),
            _ => match self.record(record) {
                Ok(()) => Some(Box::pin(Later(false, Some(Ok(()))))),
                Err(error) => Some(Box::pin(async move { Err(error) })),
            },
        }
    }

    fn abandoned(&self, exit: &AuditRecord) {
        self.log.lock().unwrap().push(Seen::Abandoned(exit.outcome));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// Calls the tool with `n` along `path`: `Ok` if its body ran, the refusal's code otherwise.
fn call(gate: &Gate, path: Path, n: u32) -> Result<(), String> {
    let rt = runtime();
    let result = match path {
        Path::Sync => gate.run(|| note(n)).map_err(|d| d.code().to_string()),
        Path::Async => rt
            .block_on(gate.scope(note_async(n)))
            .map_err(|d| d.code().to_string()),
        Path::SyncByName | Path::AsyncByName => {
            let tool = match path {
                Path::SyncByName => "sinks8.note",
                _ => "sinks8.note_async",
            };
            rt.block_on(toolgate::registry().call(gate, tool, json!({ "n": n })))
                .map(|_| n)
                .map_err(|e| e.code().to_owned())
        }
    };
    result.map(drop)
}

#[test]
fn no_sink_after_a_refused_enter_sees_it_and_every_sink_that_took_one_gets_one_exit() {
    let took_and_closed = |outcome| {
        vec![
            Seen::Took(Stage::Enter, None),
            Seen::Took(Stage::Exit, Some(outcome)),
        ]
    };
    let mut holes = Vec::new();
    let mut n = 80_000;
    for how in HOWS {
        for at in 0..3 {
            for others_later in [false, true] {
                for path in PATHS {
                    n += 1;
                    let case =
                        format!("{how:?} at sink {at}, others async {others_later}, {path:?}");
                    let logs: Vec<Arc<Mutex<Vec<Seen>>>> = (0..3).map(|_| Arc::default()).collect();
                    let mut builder = Gate::builder().mode(Mode::FullAuto);
                    for (i, log) in logs.iter().enumerate() {
                        builder = builder.audit(Probe {
                            log: log.clone(),
                            how: (i == at).then_some(how),
                            answers_later: others_later || i == at,
                        });
                    }
                    let gate = builder.build().unwrap();
                    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        call(&gate, path, n)
                    }));
                    let result = match caught {
                        Ok(result) => result,
                        Err(_) => {
                            holes.push(format!("{case}: the sink's panic reached the caller"));
                            continue;
                        }
                    };
                    let misbehaves = !how.is_async() || path.awaits();
                    let seen: Vec<Vec<Seen>> =
                        logs.iter().map(|l| l.lock().unwrap().clone()).collect();
                    let expected: Vec<Vec<Seen>> = (0..3)
                        .map(|i| match (misbehaves, i.cmp(&at)) {
                            (false, _) => took_and_closed(Outcome::Ok),
                            (true, std::cmp::Ordering::Less) => took_and_closed(Outcome::Refused),
                            (true, std::cmp::Ordering::Equal) => {
                                let mut log = Vec::new();
                                if how == How::HandsOnThenRefuses {
                                    log.push(Seen::Took(Stage::Enter, None));
                                }
                                log.push(Seen::Abandoned(Some(Outcome::Refused)));
                                log
                            }
                            (true, std::cmp::Ordering::Greater) => Vec::new(),
                        })
                        .collect();
                    if seen != expected {
                        holes.push(format!("{case}: the sinks saw {seen:?}, not {expected:?}"));
                    }
                    match (misbehaves, &result, ran(n)) {
                        (false, Ok(()), true) => {}
                        (true, Err(code), false) if code == "AUDIT_UNAVAILABLE" => {}
                        _ => holes.push(format!(
                            "{case}: the call ended {result:?}, its body ran: {}",
                            ran(n)
                        )),
                    }
                }
            }
        }
    }
    assert!(holes.is_empty(), "{} holes: {holes:#?}", holes.len());
}

/// A sink whose future for an `enter` never resolves.
struct Hangs(Arc<Mutex<Vec<Seen>>>);

impl AuditSink for Hangs {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        self.0
            .lock()
            .unwrap()
            .push(Seen::Took(record.stage, record.outcome));
        Ok(())
    }

    fn record_async(&self, record: &AuditRecord) -> Option<AuditFuture> {
        if record.stage != Stage::Enter {
            return None;
        }
        self.0
            .lock()
            .unwrap()
            .push(Seen::Took(record.stage, record.outcome));
        Some(Box::pin(std::future::pending()))
    }

    fn abandoned(&self, exit: &AuditRecord) {
        self.0.lock().unwrap().push(Seen::Abandoned(exit.outcome));
    }
}

/// An async call dropped while a sink writes its `enter` (first, middle or last of three; a lone
/// sink): the sinks before it close the `enter` as `cancelled`, the one writing it is handed that
/// `exit`, the sinks after it never see the call, and the body never runs.
#[test]
fn a_call_dropped_while_a_sink_writes_its_enter_closes_it_where_it_was_taken() {
    let rt = runtime();
    let mut holes = Vec::new();
    for sinks in [1, 3] {
        for at in 0..sinks {
            for by_name in [false, true] {
                let n = 81_000 + 10 * sinks + 2 * at + u32::from(by_name);
                let case = format!("sink {at} of {sinks}, by name {by_name}");
                let logs: Vec<Arc<Mutex<Vec<Seen>>>> = (0..sinks).map(|_| Arc::default()).collect();
                let mut builder = Gate::builder().mode(Mode::FullAuto);
                for (i, log) in (0..).zip(&logs) {
                    builder = match i == at {
                        true => builder.audit(Hangs(log.clone())),
                        false => builder.audit(Probe {
                            log: log.clone(),
                            how: None,
                            answers_later: true,
                        }),
                    };
                }
                let gate = builder.build().unwrap();
                let timed_out = rt.block_on(async {
                    let limit = Duration::from_millis(50);
                    match by_name {
                        true => {
                            let call = toolgate::registry().call(
                                &gate,
                                "sinks8.note_async",
                                json!({ "n": n }),
                            );
                            tokio::time::timeout(limit, call).await.is_err()
                        }
                        false => tokio::time::timeout(limit, gate.scope(note_async(n)))
                            .await
                            .is_err(),
                    }
                });
                assert!(timed_out, "{case}: the call returned");
                let seen: Vec<Vec<Seen>> = logs.iter().map(|l| l.lock().unwrap().clone()).collect();
                let expected: Vec<Vec<Seen>> = (0..sinks)
                    .map(|i| match i.cmp(&at) {
                        std::cmp::Ordering::Less => vec![
                            Seen::Took(Stage::Enter, None),
                            Seen::Took(Stage::Exit, Some(Outcome::Cancelled)),
                        ],
                        std::cmp::Ordering::Equal => vec![
                            Seen::Took(Stage::Enter, None),
                            Seen::Abandoned(Some(Outcome::Cancelled)),
                        ],
                        std::cmp::Ordering::Greater => Vec::new(),
                    })
                    .collect();
                if seen != expected {
                    holes.push(format!("{case}: the sinks saw {seen:?}, not {expected:?}"));
                }
                if ran(n) {
                    holes.push(format!("{case}: the body ran"));
                }
            }
        }
    }
    assert!(holes.is_empty(), "{holes:#?}");
}
