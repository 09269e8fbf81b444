//! A sink that keeps records in memory, for tests.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::audit::record::AuditRecord;
use crate::audit::sink::{AuditError, AuditSink};

/// Keeps every record in memory, in the order recorded; for tests.
///
/// Clones share the same records, so a test can hand one clone to a gate and read the records through
/// another. [`fail(true)`](MemorySink::fail) makes it refuse every record, to test what happens when the
/// audit log is unavailable.
///
/// ```
/// # extern crate toolgate_runtime as toolgate;
/// use toolgate::Mode;
/// use toolgate::audit::{AuditRecord, AuditSink, MemorySink, Stage};
///
/// let sink = MemorySink::new();
/// sink.record(&AuditRecord::new(Stage::Enter, "users.get", Mode::Shadow, 1))?;
/// assert_eq!(sink.len(), 1);
/// assert_eq!(sink.records()[0].tool, "users.get");
///
/// sink.fail(true);
/// assert!(sink.record(&AuditRecord::new(Stage::Enter, "users.get", Mode::Shadow, 1)).is_err());
/// assert_eq!(sink.len(), 1);
/// # Ok::<(), toolgate::audit::AuditError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    records: Mutex<Vec<AuditRecord>>,
    failing: AtomicBool,
}

impl MemorySink {
    /// An empty sink that records.
    pub fn new() -> MemorySink {
        MemorySink::default()
    }

    /// A copy of every record so far, oldest first.
    pub fn records(&self) -> Vec<AuditRecord> {
        self.lock().clone()
    }

    /// Removes and returns every record so far, oldest first.
    pub fn take(&self) -> Vec<AuditRecord> {
        std::mem::take(&mut *self.lock())
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// From now on, refuses every record (`true`) or records again (`false`).
    pub fn fail(&self, failing: bool) {
        self.shared.failing.store(failing, Ordering::SeqCst);
    }

    fn lock(&self) -> MutexGuard<'_, Vec<AuditRecord>> {
        // A panic while pushing cannot leave the vector half-updated, so a poisoned lock is still usable.
        self.shared
            .records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl AuditSink for MemorySink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if self.shared.failing.load(Ordering::SeqCst) {
            return Err(AuditError::new("the memory audit sink is set to fail"));
        }
        self.lock().push(record.clone());
        Ok(())
    }
}
