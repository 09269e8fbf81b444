//! Where audit records go.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::audit::record::AuditRecord;

/// What [`AuditSink::record_async`] hands back: resolves once the record is as durable as the sink
/// promises.
pub type AuditFuture = Pin<Box<dyn Future<Output = Result<(), AuditError>> + Send + 'static>>;

/// Receives every audit record of a gate.
///
/// `record` is called before the body of an allowed call runs: if it fails, the call is refused
/// (`AUDIT_UNAVAILABLE`) and the body does not run. It is called from every thread that calls tools, so
/// an implementation orders records itself (the JSONL sink numbers and chains them under one lock).
pub trait AuditSink: Send + Sync + 'static {
    /// Records one event; `Ok` means it is as durable as the sink promises.
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError>;

    /// Makes everything recorded so far durable.
    fn flush(&self) -> Result<(), AuditError> {
        Ok(())
    }

    /// For a sink whose `record` waits on something slow, such as a database's commit: takes the
    /// record now (queues it, in order) and returns a future that resolves once it is durable, which an
    /// async tool's decision awaits instead of blocking its executor's thread. The body still runs
    /// only after the future resolved `Ok`.
    ///
    /// `None`, the default: the sink did not take the record, and the decision calls
    /// [`record`](AuditSink::record). A sink that returns `Some` must not also expect `record` for the
    /// same record.
    fn record_async(&self, record: &AuditRecord) -> Option<AuditFuture> {
        let _ = record;
        None
    }

    /// The `enter` record this sink refused (its `record` or `record_async`, or the future, failed or
    /// panicked), or whose future was dropped before it resolved: the call's body does not run, and
    /// `exit` is that call's `exit` (outcome `refused`, or `cancelled`).
    ///
    /// The default writes `exit` with [`record`](AuditSink::record) and ignores its error: a sink that
    /// hands a record on to others before it fails (one that wraps a
    /// [`TracingSink`](crate::audit::TracingSink), say) closes there what the `enter` opened, and a sink
    /// that kept nothing of the `enter` holds an `exit` that names its refusal. A sink that closes
    /// what it handed on itself, when it refuses, overrides this to do nothing.
    fn abandoned(&self, exit: &AuditRecord) {
        let _ = self.record(exit);
    }
}

/// A sink could not record.
#[derive(Debug)]
pub struct AuditError {
    message: String,
    source: Option<std::io::Error>,
}

impl AuditError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> AuditError {
        AuditError {
            message: message.into(),
            source: None,
        }
    }

    /// An I/O error, with what was being done.
    pub fn io(doing: impl Into<String>, source: std::io::Error) -> AuditError {
        AuditError {
            message: doing.into(),
            source: Some(source),
        }
    }
}

impl fmt::Display for AuditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(source) => write!(f, "{}: {source}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for AuditError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}
