//! The audit log: every decision leaves a record, and the JSONL sink chains them so that an edit shows.

mod builder;
pub(crate) mod chain;
#[cfg(feature = "checkpoints")]
pub(crate) mod checkpoint;
mod jsonl;
mod memory;
mod promotion;
mod record;
#[cfg(feature = "checkpoints")]
mod sidecar;
mod sink;
mod tee;
pub(crate) mod time;
mod tracing_sink;
pub(crate) mod verify;

#[cfg(feature = "checkpoints")]
pub use checkpoint::{
    Checkpoint, CheckpointProblem, CheckpointReport, Checkpoints, DEFAULT_EVERY_INTERVAL,
    DEFAULT_EVERY_RECORDS, FIRST_PREV, ProblemKind, PublicKey, SigningKey, verify_checkpoints,
};
pub use jsonl::{Durability, JsonlSink, JsonlSinkBuilder};
pub use memory::MemorySink;
pub use promotion::{PromotionReport, PromotionRow, WouldHaveRun};
pub use record::{AuditRecord, Decision, Outcome, Stage};
#[cfg(feature = "checkpoints")]
pub use sidecar::{checkpoints_path, verify_signed_file};
pub use sink::{AuditError, AuditFuture, AuditSink};
pub(crate) use tee::Tee;
pub use tracing_sink::TracingSink;
pub use verify::{
    BreakReason, BrokenRecord, MAX_RECORD_LEN, TornTail, VerifyReport, verify_bytes, verify_file,
    verify_reader,
};
