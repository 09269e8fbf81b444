//! Several sinks behind one gate: what `GateBuilder::audit` builds when it is called more than once.

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::task::Poll;

use crate::audit::record::{AuditRecord, Outcome, Stage};
use crate::audit::sink::{AuditError, AuditFuture, AuditSink};
use crate::audit::time::now_rfc3339;

/// Writes each record to every sink, in the order they were given.
///
/// A record that decides whether something happens (a call's `enter`, a `session_granted`) goes to
/// the sinks one after the other, each only once the one before it has written it (its future
/// resolved, on the async path), and stops at the first that refuses it, fails or panics: the tee
/// refuses it too, so the gate refuses the call (`AUDIT_UNAVAILABLE`) or makes no grant. The sinks
/// that wrote an `enter` get its `exit` of outcome `refused` at once, written by the tee, the one that
/// refused it gets that `exit` through [`AuditSink::abandoned`], the sinks after it never see the call,
/// and the gate writes nothing more of it to the tee; so every sink holds one `exit` for each `enter`
/// it holds, as with one sink. Any other record goes to every sink, and the first error is reported.
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

fn panicked() -> AuditError {
    AuditError::new("the audit sink panicked")
}

/// The `exit` a sink that wrote `enter` is owed when the call's body will not run: `refused` after
/// `error`, or `cancelled` where the call was dropped while the `enter` was being written.
fn exit_of(enter: &AuditRecord, error: Option<&AuditError>) -> AuditRecord {
    let risk = enter.effective_risk.or(enter.declared_risk);
    let shown = risk.map(|r| format!(" ({r})")).unwrap_or_default();
    let (code, outcome, message) = match error {
        Some(error) => (
            Some(Cow::Borrowed("AUDIT_UNAVAILABLE")),
            Outcome::Refused,
            format!(
                "tool `{}`{shown} did not run: the audit log could not record the call ({error})",
                enter.tool
            ),
        ),
        None => (
            None,
            Outcome::Cancelled,
            format!(
                "tool `{}`{shown} did not run: the call was dropped while its `enter` record was \
                 written",
                enter.tool
            ),
        ),
    };
    AuditRecord {
        arguments: None,
        by: None,
        code,
        decision: None,
        duration_us: Some(0),
        message: Some(message),
        outcome: Some(outcome),
        stage: Stage::Exit,
        timestamp: now_rfc3339(),
        ..enter.clone()
    }
}

/// Closes `enter` after it was refused (`error`) or dropped (`None`) at `sinks[at]`: each sink before
/// it wrote it and gets its `exit`, `sinks[at]` is handed the `exit` as one that did not write it. A
/// lost `exit` is reported through `tracing`, as the gate does.
fn close(sinks: &[Arc<dyn AuditSink>], at: usize, enter: &AuditRecord, error: Option<&AuditError>) {
    if enter.stage != Stage::Enter {
        return;
    }
    let exit = exit_of(enter, error);
    for sink in &sinks[..at] {
        match catch_unwind(AssertUnwindSafe(|| sink.record(&exit))) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::error!(target: "toolgate::audit", %error, tool = %exit.tool, "audit record lost");
            }
            Err(_) => {
                tracing::error!(target: "toolgate::audit", tool = %exit.tool, "audit record lost: the sink panicked");
            }
        }
    }
    if let Some(sink) = sinks.get(at) {
        let _ = catch_unwind(AssertUnwindSafe(|| sink.abandoned(&exit)));
    }
}

/// `sink`'s answer to `record` now: written, or refused (a panic is a refusal).
fn write_now(sink: &dyn AuditSink, record: &AuditRecord) -> Result<(), AuditError> {
    catch_unwind(AssertUnwindSafe(|| sink.record(record))).unwrap_or_else(|_| Err(panicked()))
}

/// `sink`'s answer to `record`, awaited where it has a `record_async`; a panic, in either or in the
/// future, is a refusal.
async fn write(sink: &dyn AuditSink, record: &AuditRecord) -> Result<(), AuditError> {
    let mut future = match catch_unwind(AssertUnwindSafe(|| sink.record_async(record))) {
        Ok(Some(future)) => future,
        Ok(None) => return write_now(sink, record),
        Err(_) => return Err(panicked()),
    };
    std::future::poll_fn(
        |cx| match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(polled) => polled,
            Err(_) => Poll::Ready(Err(panicked())),
        },
    )
    .await
}

/// A deciding record on its way through the sinks: dropped before it went through, it closes what
/// it had written.
struct Passing {
    sinks: Vec<Arc<dyn AuditSink>>,
    record: AuditRecord,
    /// The sink being written to; `None` once the record has gone through or been closed.
    at: Option<usize>,
}

impl Passing {
    /// The record went through, or was closed already.
    fn done(&mut self) {
        self.at = None;
    }
}

impl Drop for Passing {
    fn drop(&mut self) {
        if let Some(at) = self.at {
            close(&self.sinks, at, &self.record, None);
        }
    }
}

impl AuditSink for Tee {
    /// A sink that panics on a deciding record has refused it; on any other record, the other sinks
    /// still get it and the panic then goes on to the gate.
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if decides(record) {
            for (i, sink) in self.sinks.iter().enumerate() {
                if let Err(error) = write_now(&**sink, record) {
                    close(&self.sinks, i, record, Some(&error));
                    return Err(error);
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

    /// A deciding record goes to each sink in order, through its own `record_async` where it has
    /// one, `record` otherwise, each sink only once the one before it has written it. Any other
    /// record is handed to every sink at once, and the future resolves once each answered.
    fn record_async(&self, record: &AuditRecord) -> Option<AuditFuture> {
        if decides(record) {
            let mut passing = Passing {
                sinks: self.sinks.clone(),
                record: record.clone(),
                at: Some(0),
            };
            return Some(Box::pin(async move {
                for i in 0..passing.sinks.len() {
                    passing.at = Some(i);
                    let sink = Arc::clone(&passing.sinks[i]);
                    if let Err(error) = write(&*sink, &passing.record).await {
                        passing.done();
                        close(&passing.sinks, i, &passing.record, Some(&error));
                        return Err(error);
                    }
                }
                passing.done();
                Ok(())
            }));
        }
        let answers: Vec<AuditFuture> = self
            .sinks
            .iter()
            .map(|sink| {
                let (sink, record) = (Arc::clone(sink), record.clone());
                let future: AuditFuture = Box::pin(async move { write(&*sink, &record).await });
                future
            })
            .collect();
        Some(Box::pin(async move {
            let mut first = Ok(());
            for answer in answers {
                if let Err(error) = answer.await
                    && first.is_ok()
                {
                    first = Err(error);
                }
            }
            first
        }))
    }

    /// The tee closed its own sinks when it refused the `enter`.
    fn abandoned(&self, _: &AuditRecord) {}
}
