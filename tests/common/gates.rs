//! The gates the tests build again and again, each from a mode and what sets it apart: one call
//! instead of a builder chain. A gate that cannot be built fails the test.

use std::sync::Arc;
use std::time::Duration;

use toolgate::audit::AuditSink;
use toolgate::gate::BudgetScope;
use toolgate::{Approver, Gate, Mode};

/// A gate in `mode` that records to `sink`.
pub fn audited(mode: Mode, sink: impl AuditSink) -> Gate {
    Gate::builder().mode(mode).audit(sink).build().unwrap()
}

/// A gate in `mode` that records to a sink the caller shares.
pub fn audited_shared(mode: Mode, sink: Arc<dyn AuditSink>) -> Gate {
    Gate::builder()
        .mode(mode)
        .audit_shared(sink)
        .build()
        .unwrap()
}

/// A gate in `mode` whose calls that need an approval ask `approver`.
pub fn approved(mode: Mode, approver: impl Approver) -> Gate {
    Gate::builder()
        .mode(mode)
        .approver(approver)
        .build()
        .unwrap()
}

/// [`approved`], recording to `sink`.
pub fn approved_audited(mode: Mode, approver: impl Approver, sink: impl AuditSink) -> Gate {
    Gate::builder()
        .mode(mode)
        .approver(approver)
        .audit(sink)
        .build()
        .unwrap()
}

/// A gate in `mode` with two-step approvals (its own in-memory store, the default time to live).
pub fn two_step(mode: Mode) -> Gate {
    Gate::builder()
        .mode(mode)
        .two_step_approvals()
        .build()
        .unwrap()
}

/// [`two_step`], recording to `sink`.
pub fn two_step_audited(mode: Mode, sink: impl AuditSink) -> Gate {
    Gate::builder()
        .mode(mode)
        .two_step_approvals()
        .audit(sink)
        .build()
        .unwrap()
}

/// A gate in `mode` with one budget: at most `calls` calls of `scope` per `window`.
pub fn budgeted(mode: Mode, scope: impl Into<BudgetScope>, calls: u32, window: Duration) -> Gate {
    Gate::builder()
        .mode(mode)
        .budget(scope, calls, window)
        .build()
        .unwrap()
}

/// A gate in `mode` with one deny rule.
pub fn denying(mode: Mode, pattern: impl Into<String>) -> Gate {
    Gate::builder().mode(mode).deny(pattern).build().unwrap()
}

/// A gate in `mode` acting for `principal`.
pub fn of_principal(mode: Mode, principal: impl Into<String>) -> Gate {
    Gate::builder()
        .mode(mode)
        .principal(principal)
        .build()
        .unwrap()
}
