//! The audit log: every decision leaves a record, and the JSONL sink chains them so that an edit shows.

mod builder;
mod record;
mod sink;
mod time;

pub use record::{AuditRecord, Decision, Outcome, Stage};
pub use sink::{AuditError, AuditSink};
pub(crate) use time::now_rfc3339;
