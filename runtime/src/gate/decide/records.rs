//! The audit records a decision writes: a refusal, a call stopped at the door, and an allowed call's
//! `enter`, with the `exit` it owes.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::arguments::ArgumentSource;
use super::refusal::refuse;
use super::waits::Allowed;
use crate::audit::{AuditError, AuditRecord, Decision, Stage};
use crate::gate::Gate;
use crate::gate::call::{Arguments, EffectiveRisk};
use crate::gate::compile::Table;
use crate::gate::denied::Denied;
use crate::gate::narrowing::Ruling;
use crate::gate::permit::{Exit, close_refused};
use crate::registry::ToolEntry;
use toolgate_policy::{DenialCode, Mode, Risk};

impl Gate {
    /// Records a call by name that stopped at the door, before any decision: an unknown id, a tool with
    /// no JSON interface, arguments that do not parse, a method without its instance. `tool` is the
    /// tool's id where it is one; the caller keeps raw input (an unknown id, a bad value) out of it and
    /// out of `message`.
    pub(crate) fn record_probe(
        &self,
        tool: Cow<'static, str>,
        declared: Option<Risk>,
        code: &'static str,
        message: String,
    ) {
        if self.inner.audit.is_none() {
            return;
        }
        let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let record = AuditRecord {
            code: Some(Cow::Borrowed(code)),
            decision: Some(Decision::Refused),
            declared_risk: declared,
            message: Some(message),
            ..self.record(Stage::Refused, tool, self.mode(), call)
        };
        self.write_after_the_fact(&record);
    }

    /// Writes that a tool no gate decides (it declares no risk) is about to run, served so on purpose;
    /// `Err` where a sink refuses the record, and then it does not run.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn record_ungated(&self, tool: String, message: String) -> Result<(), AuditError> {
        let Some(sink) = &self.inner.audit else {
            return Ok(());
        };
        let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let record = AuditRecord {
            code: Some(Cow::Borrowed("UNDECLARED_TOOL_SERVED")),
            message: Some(message),
            ..self.record(Stage::Ungated, Cow::Owned(tool), self.mode(), call)
        };
        sink.record(&record)
    }

    pub(crate) fn record_refusal<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        denied: &Denied,
        arguments: &mut A,
    ) {
        if self.inner.audit.is_none() {
            return;
        }
        let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let mode = denied.mode().unwrap_or_else(|| self.mode());
        // A call refused while it asked (its approval pending, required or answered no) asked.
        let asked = matches!(
            denied.code(),
            DenialCode::ApprovalPending
                | DenialCode::ApprovalRequired
                | DenialCode::ApprovalRejected
                | DenialCode::ApprovalExpired
                | DenialCode::ApprovalMismatch
                | DenialCode::ApprovalReused
                | DenialCode::ApprovalStoreUnavailable
        );
        let table = self.inner.table.load();
        let rule_in_shadow = asked
            .then(|| {
                self.rule_in_shadow(&table, entry, mode, denied.risk(), Ruling::Asks, arguments)
            })
            .flatten();
        let record = AuditRecord {
            arguments: arguments.recorded(),
            arguments_digest: arguments
                .get()
                .and_then(Arguments::shown_digest)
                .map(str::to_owned),
            by: denied.by().map(str::to_owned),
            code: Some(Cow::Borrowed(denied.code().as_str())),
            decision: Some(Decision::Refused),
            declared_risk: Some(entry.manifest.risk_level),
            effective_risk: Some(denied.risk()),
            message: Some(denied.to_string()),
            rule_in_shadow,
            ..self.record_under(
                &table,
                Stage::Refused,
                Cow::Borrowed(entry.manifest.id),
                mode,
                call,
            )
        };
        self.write_after_the_fact(&record);
    }

    /// The `enter` record of an allowed call, and the `exit` it will owe; `None` for a gate that keeps no
    /// record.
    pub(super) fn enter_record<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        allowed: &Allowed,
        risk: EffectiveRisk,
        arguments: &mut A,
    ) -> Option<(AuditRecord, Exit)> {
        self.inner.audit.as_ref()?;
        let (mode, decision) = (allowed.mode, allowed.decision);
        let manifest = &entry.manifest;
        let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let ruled = match decision {
            Decision::Allowed => Ruling::Allowed,
            _ => Ruling::Asks,
        };
        let table = self.inner.table.load();
        let rule_in_shadow = self.rule_in_shadow(&table, entry, mode, risk.get(), ruled, arguments);
        let record = AuditRecord {
            arguments: arguments.recorded(),
            arguments_digest: arguments
                .get()
                .and_then(Arguments::shown_digest)
                .map(str::to_owned),
            by: allowed.by.clone(),
            decision: Some(decision),
            declared_risk: Some(manifest.risk_level),
            effective_risk: Some(risk.get()),
            // An approval the latch asked for says so.
            message: (decision != Decision::Allowed)
                .then(|| self.taint_of(risk.get()).map(ToString::to_string))
                .flatten(),
            rule_in_shadow,
            ..self.record_under(&table, Stage::Enter, Cow::Borrowed(manifest.id), mode, call)
        };
        let exit = Exit {
            gate: self.clone(),
            tool: manifest,
            call,
            started: Instant::now(),
            risk: risk.get(),
            mode,
            // Moved in from the record once it is written.
            arguments_digest: None,
        };
        Some((record, exit))
    }
}

impl Gate {
    /// What the policy's rules logged only would have made of a call this gate ruled `ruled`, where
    /// stricter: for its record. Nothing where the policy has none.
    fn rule_in_shadow<A: ArgumentSource>(
        &self,
        table: &Table,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: Risk,
        ruled: Ruling,
        arguments: &mut A,
    ) -> Option<String> {
        table.narrowing.shadow.as_ref()?;
        table.narrowing.shadow_ruling(
            entry,
            mode,
            risk,
            self.taint_of(risk).is_some(),
            ruled,
            |name| arguments.value(name),
        )
    }
}

/// The refusal of a call whose `enter` record its gate's sink could not write.
#[cold]
pub(super) fn audit_unavailable(
    entry: &'static ToolEntry,
    risk: EffectiveRisk,
    mode: Mode,
    error: &crate::audit::AuditError,
) -> Denied {
    refuse(entry, DenialCode::AuditUnavailable, risk.get(), Some(mode))
        .with_detail(error.to_string().into())
}

/// Records a refusal in the log of each of `gates`: an `exit` of outcome `refused` where the gate wrote
/// the call's `enter`, a `refused` record otherwise. Every `enter` gets its `exit`.
#[cold]
pub(super) fn abandon(
    entry: &'static ToolEntry,
    gates: &[Gate],
    exits: Vec<Exit>,
    denied: Denied,
    arguments: &mut impl ArgumentSource,
) -> Denied {
    for gate in gates {
        if !exits.iter().any(|exit| exit.gate.id() == gate.id()) {
            gate.record_refusal(entry, &denied, arguments);
        }
    }
    close_refused(exits, &denied);
    denied
}
