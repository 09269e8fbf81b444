//! The audit log: every decision leaves a record, and the JSONL sink chains them so that an edit shows.

mod builder;
pub(crate) mod chain;
mod jsonl;
mod memory;
mod promotion;
mod record;
mod sink;
pub(crate) mod time;
mod tracing_sink;
pub(crate) mod verify;

pub use jsonl::{Durability, JsonlSink, JsonlSinkBuilder};
pub use memory::MemorySink;
pub use promotion::{PromotionReport, PromotionRow, WouldHaveRun};
pub use record::{AuditRecord, Decision, Outcome, Stage};
pub use sink::{AuditError, AuditFuture, AuditSink};
pub use tracing_sink::TracingSink;
pub use verify::{
    BreakReason, BrokenRecord, TornTail, VerifyReport, verify_bytes, verify_file, verify_reader,
};
