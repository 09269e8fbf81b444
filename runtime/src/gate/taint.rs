//! The taint latch: once a tool whose output is untrusted has run in a gate's session, every later call
//! that writes needs an approval or is refused, through the gate and its clones, for the rest of the
//! session. The session is the gate: a new gate starts clean.
//!
//! Each row of the gate's table holds a clean session's verdicts and a tainted one's
//! ([`policy::decide_tainted`]); closing the latch sets a bit beside the mode, in the one atomic every
//! decision reads already, and that bit selects the tainted session's column (and, in the inlined
//! check, its bits): a tainted session costs a call nothing more. A tool with untrusted output keeps
//! off that check until the latch is closed, since its own call closes it.

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use crate::approval::Taint;
use crate::audit::time::now_rfc3339;
use crate::audit::{AuditRecord, Stage};
use crate::gate::compile::TAINTED;
use crate::gate::denied::Denied;
use crate::gate::{Gate, grants};
use crate::registry::{ToolEntry, registry};
use toolgate_policy::{self as policy, DenialCode, Risk, TaintPolicy};

impl Gate {
    /// What tainted this gate's session, if anything has: the first tool with untrusted output
    /// (`#[tool(untrusted_output)]`) that this gate, or a clone of it, allowed to run, and when. From then
    /// on, every call that writes (LOW_WRITE and above, at its effective risk) needs an approval or is
    /// refused with `TAINTED_SESSION`, as [`GateBuilder::taint_policy`](crate::GateBuilder::taint_policy)
    /// chose, until the gate is dropped: the latch never opens again.
    pub fn taint(&self) -> Option<Taint> {
        self.inner.latch.taint.get().cloned()
    }

    /// What the gate does with a call that writes once its session is tainted.
    pub fn taint_policy(&self) -> TaintPolicy {
        self.inner.table.load().taint_policy
    }

    pub(crate) fn tainted(&self) -> bool {
        self.inner.mode.load(Ordering::Acquire) & TAINTED != 0
    }

    /// What tainted the session, where the latch holds a call at `risk`.
    pub(crate) fn taint_of(&self, risk: Risk) -> Option<&Taint> {
        self.inner
            .latch
            .taint
            .get()
            .filter(|_| policy::latched(risk))
    }

    /// A refusal that the latch caused, told so: `TAINTED_SESSION`, and `APPROVAL_REQUIRED` for a call
    /// that needs an approval only because the session is tainted.
    #[cold]
    pub(crate) fn with_taint(&self, denied: Denied, risk: Risk) -> Denied {
        let caused = match denied.code() {
            DenialCode::TaintedSession => true,
            DenialCode::ApprovalRequired => !policy::requires_approval(risk),
            _ => false,
        };
        match self.taint_of(risk) {
            Some(taint) if caused => denied.with_detail(taint.to_string().into()),
            _ => denied,
        }
    }

    /// Closes the latch: `entry`, whose output is untrusted, was allowed to run. Only the first call
    /// closes it; every later one finds it closed. Returns whether the log holds the `session_tainted`
    /// record (or the gate keeps none): a call for which it does not must not run, since nothing in
    /// the log would say why the session is tainted. A later untrusted call tries the record again.
    #[cold]
    #[inline(never)]
    pub(crate) fn close_latch(&self, entry: &'static ToolEntry) -> bool {
        let inner = &*self.inner;
        let mut revoked = 0;
        if !self.tainted() {
            let won = inner
                .latch
                .taint
                .set(Taint {
                    tool: entry.manifest.id,
                    at: now_rfc3339(),
                })
                .is_ok();
            // By every call that gets here, winner or not: a call that finds the bit set finds the
            // taint that the winner set before it.
            {
                let mut parts = self.modes();
                parts.tainted = true;
                self.store_mode(&parts);
            }
            // Grants were given for calls decided before the agent read untrusted input. Under the
            // grants' lock, after the bit is set: a grant made at a commit point checks the bit under
            // the same lock, so it is either refused there or revoked here.
            let mut grants = grants::lock(&inner.approvals.grants);
            for until in &inner.approvals.granted_until {
                until.store(0, Ordering::Release);
            }
            let gone = grants.revoke(None);
            if won {
                revoked = gone;
            }
        }
        let Some(sink) = &inner.audit else {
            return true;
        };
        let mut recorded = inner
            .latch
            .taint_recorded
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *recorded {
            return true;
        }
        let Some(taint) = inner.latch.taint.get() else {
            return false;
        };
        let then = match inner.table.load().taint_policy {
            TaintPolicy::RequireApproval => "needs an approval",
            TaintPolicy::Refuse => "is refused (TAINTED_SESSION)",
        };
        let grants = match revoked {
            0 => String::new(),
            n => format!("; {n} session grant(s) revoked"),
        };
        let call = inner.calls.fetch_add(1, Ordering::Relaxed);
        // The record names the tool that closed the latch, which a racing call may not be.
        let declared_risk = match taint.tool == entry.manifest.id {
            true => Some(entry.manifest.risk_level),
            false => registry()
                .get(taint.tool)
                .map(|tool| tool.manifest().risk_level),
        };
        let record = AuditRecord {
            declared_risk,
            message: Some(format!(
                "{taint}: from now on every call that writes {then}{grants}"
            )),
            timestamp: taint.at.clone(),
            ..self.record(
                Stage::SessionTainted,
                Cow::Borrowed(taint.tool),
                self.mode(),
                call,
            )
        };
        match catch_unwind(AssertUnwindSafe(|| sink.record(&record))) {
            Ok(Ok(())) => {
                *recorded = true;
                true
            }
            Ok(Err(error)) => {
                tracing::error!(target: "toolgate::audit", %error, tool = %record.tool, "the session_tainted record could not be written");
                false
            }
            Err(_) => false,
        }
    }
}
