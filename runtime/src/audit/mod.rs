//! The audit log: every decision leaves a record, and the JSONL sink chains them so that an edit shows.

mod record;
mod sink;

pub use record::{AuditRecord, Decision, Outcome, Stage};
pub use sink::{AuditError, AuditSink};
