//! Several sinks behind one gate: what `GateBuilder::audit` builds when it is called more than once.

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;

use crate::audit::record::{AuditRecord, Outcome, Stage};
use crate::audit::sink::{AuditError, AuditFuture, AuditSink};
use crate::audit::time::now_rfc3339;

/// Writes each record to every sink, in the order they were given.
///
/// A record that decides whether something happens (a call's `enter`, a `session_granted`) goes to
/// the sinks one after the other and stops at the first that refuses it: the tee refuses it too, so the
/// gate refuses the call (`AUDIT_UNAVAILABLE`) or makes no grant. The sinks that did write an `enter`
/// get its `exit` of outcome `refused` at once, written by the tee, and the gate writes nothing more of
/// the call; so every sink holds an `exit` for each `enter` it holds, as with one sink. Any other record
/// goes to every sink, and the first error is reported.
pub(crate) struct Tee {
    sinks: Vec<Arc<dyn AuditSink>>,
}

impl Tee {
    pub(crate) fn new(sinks: Vec<Arc<dyn AuditSink>>) -> Tee {
        Tee { sinks }
    }
}

/// Whether a sink's refusal of `record` stops it: the gate acts on its being written.
fn decides(record: &AuditRecord) -> bool {
    matches!(record.stage, Stage::Enter | Stage::SessionGranted)
}

/// The `exit` a sink that wrote `enter` is owed when a later sink refused it: the body never ran.
fn refused_exit(enter: &AuditRecord, error: &AuditError) -> AuditRecord {
    let risk = enter.effective_risk.or(enter.declared_risk);
    let shown = risk.map(|r| format!(" ({r})")).unwrap_or_default();
    AuditRecord {
        arguments: None,
        by: None,
        code: Some(Cow::Borrowed("AUDIT_UNAVAILABLE")),
        decision: None,
        duration_us: Some(0),
        message: Some(format!(
            "tool `{}`{shown} did not run: the audit log could not record the call ({error})",
            enter.tool
        )),
        outcome: Some(Outcome::Refused),
        stage: Stage::Exit,
        timestamp: now_rfc3339(),
        ..enter.clone()
    }
}

/// Closes `enter` in each of `wrote`, after `error` refused it elsewhere; a lost `exit` is reported
/// through `tracing`, as the gate does.
fn close(wrote: &[Arc<dyn AuditSink>], enter: &AuditRecord, error: &AuditError) {
    if enter.stage != Stage::Enter || wrote.is_empty() {
        return;
    }
    let exit = refused_exit(enter, error);
    for sink in wrote {
        if let Err(error) = sink.record(&exit) {
            tracing::error!(target: "toolgate::audit", %error, tool = %exit.tool, "audit record lost");
        }
    }
}

impl AuditSink for Tee {
    /// A sink that panics is treated as one that refused, for the sinks around it (those before it
    /// close a deciding record, those after it still get any other record); the panic then goes on to
    /// the gate, as it would from a sink alone.
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if decides(record) {
            for (i, sink) in self.sinks.iter().enumerate() {
                match catch_unwind(AssertUnwindSafe(|| sink.record(record))) {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => {
                        close(&self.sinks[..i], record, &error);
                        return Err(error);
                    }
                    Err(panic) => {
                        close(
                            &self.sinks[..i],
                            record,
                            &AuditError::new("the sink panicked"),
                        );
                        resume_unwind(panic);
                    }
                }
            }
            return Ok(());
        }
        let mut first = Ok(());
        let mut panicked = None;
        for sink in &self.sinks {
            match catch_unwind(AssertUnwindSafe(|| sink.record(record))) {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    if first.is_ok() {
                        first = Err(error);
                    }
                }
                Err(panic) => {
                    panicked.get_or_insert(panic);
                }
            }
        }
        if let Some(panic) = panicked {
            resume_unwind(panic);
        }
        first
    }

    fn flush(&self) -> Result<(), AuditError> {
        let mut first = Ok(());
        for sink in &self.sinks {
            if let Err(error) = sink.flush()
                && first.is_ok()
            {
                first = Err(error);
            }
        }
        first
    }

    /// Hands the record to each sink in order: to its own `record_async` where it has one, to
    /// `record` otherwise; the future resolves once every sink answered. A sink that refuses a
    /// deciding record stops it as in `record`, once the sinks before it answered.
    fn record_async(&self, record: &AuditRecord) -> Option<AuditFuture> {
        let mut answers: Vec<(Arc<dyn AuditSink>, Answer)> = Vec::with_capacity(self.sinks.len());
        let stops = decides(record);
        for sink in &self.sinks {
            let answer = match sink.record_async(record) {
                Some(future) => Answer::Later(future),
                None => Answer::Now(sink.record(record)),
            };
            let refused = matches!(answer, Answer::Now(Err(_)));
            answers.push((Arc::clone(sink), answer));
            if refused && stops {
                break;
            }
        }
        let record = stops.then(|| record.clone());
        Some(Box::pin(async move {
            let mut wrote = Vec::with_capacity(answers.len());
            let mut first = None;
            for (sink, answer) in answers {
                let result = match answer {
                    Answer::Now(result) => result,
                    Answer::Later(future) => future.await,
                };
                match result {
                    Ok(()) => wrote.push(sink),
                    Err(error) => {
                        first.get_or_insert(error);
                    }
                }
            }
            match (first, record) {
                (None, _) => Ok(()),
                (Some(error), Some(record)) => {
                    close(&wrote, &record, &error);
                    Err(error)
                }
                (Some(error), None) => Err(error),
            }
        }))
    }
}

enum Answer {
    Now(Result<(), AuditError>),
    Later(AuditFuture),
}
