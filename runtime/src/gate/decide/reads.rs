//! Reads that are no tool call, decided: a resource's URI or a prompt's name, at the risk the server
//! declares, against the operator's rules on reads (`gate::reads`), the mode's ceiling and
//! the latch, with the record the policy asks for.

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use crate::audit::{AuditRecord, Decision, Stage};
use crate::canonical::sha256_hex;
use crate::gate::Gate;
use crate::gate::reads::{ReadKind, ReadName};
use toolgate_policy::{self as policy, DenialCode, Facts, ModeSet, Risk, Verdict};

impl Gate {
    /// Decides a read of `read` (a resource's URI, a prompt's name) whose risk the server
    /// declares `risk`, before it runs: refused where the operator's policy denies it, where its
    /// risk is above the mode's ceiling (or needs an approval, which no read can get), where the
    /// session's latch holds it; recorded (`read`) where the policy asks for it, and refused where
    /// that record cannot be written. Every refusal is recorded, as a tool's is.
    ///
    /// `content` says the request reads what the resource or prompt holds (`resources/read`,
    /// `prompts/get`), which the policy's record rules reach; a completion of a prompt's argument
    /// is decided alike and never recorded as a read.
    pub(crate) fn decide_read(
        &self,
        kind: ReadKind,
        read: &ReadName,
        risk: Risk,
        content: bool,
    ) -> Result<(), ReadRefusal> {
        let label = kind.label(read.as_str());
        let table = self.inner.table.load();
        let reads = &table.narrowing.reads;
        self.refuses_read(kind, read, risk, &label)?;
        if content
            && let Some(rule) = reads.records(kind, read)
            && let Some(sink) = &self.inner.audit
        {
            let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
            let record = AuditRecord {
                arguments_digest: Some(sha256_hex(read.as_str().as_bytes())),
                decision: Some(Decision::Allowed),
                declared_risk: Some(risk),
                message: Some(format!(
                    "{label} read, recorded as the operator's policy asks: {}",
                    rule.rule
                )),
                ..self.record(Stage::Read, Cow::Owned(label.clone()), self.mode(), call)
            };
            if let Err(error) = sink.record(&record) {
                let message = format!(
                    "the audit log could not record the read the operator's policy asks it to \
                     record: {error}"
                );
                let code = DenialCode::AuditUnavailable;
                return Err(self.refuse_read(label, read.as_str(), risk, code, message));
            }
            // The record may have waited on its sink: a policy or mode that changed meanwhile
            // decides the read, as a call's commit point decides it.
            self.refuses_read(kind, read, risk, &label)?;
        }
        Ok(())
    }

    /// The refusal of a read of `read` at `risk` under the policy and mode in force now, recorded:
    /// a deny rule that reaches it, or the mode's verdict.
    fn refuses_read(
        &self,
        kind: ReadKind,
        read: &ReadName,
        risk: Risk,
        label: &str,
    ) -> Result<(), ReadRefusal> {
        let table = self.inner.table.load();
        if let Some(rule) = table.narrowing.reads.denies(kind, read) {
            let message = format!("{label} is denied by the operator's policy: {}", rule.rule);
            return Err(self.refuse_read(
                label.to_owned(),
                read.as_str(),
                risk,
                DenialCode::DenyListed,
                message,
            ));
        }
        if let Verdict::Refuse(code) = self.read_verdict(risk) {
            let message = self.why_refused(label, risk, code);
            return Err(self.refuse_read(label.to_owned(), read.as_str(), risk, code, message));
        }
        Ok(())
    }

    /// Decides a request about the URI template `template` (a completion of its variables),
    /// whose URIs the server declares at least `risk`: refused where every URI it expands to would
    /// be (a deny rule or the risk); recorded as a refused read is.
    pub(crate) fn decide_template(
        &self,
        template: &ReadName,
        risk: Risk,
    ) -> Result<(), ReadRefusal> {
        let label = format!("resource:{}", template.as_str());
        let table = self.inner.table.load();
        if let Some(rule) = table.narrowing.reads.denies_template(template.as_str()) {
            let message = format!(
                "every URI of {label} is denied by the operator's policy: {}",
                rule.rule
            );
            return Err(self.refuse_read(
                label,
                template.as_str(),
                risk,
                DenialCode::DenyListed,
                message,
            ));
        }
        if let Verdict::Refuse(code) = self.read_verdict(risk) {
            let message = self.why_refused(&label, risk, code);
            return Err(self.refuse_read(label, template.as_str(), risk, code, message));
        }
        Ok(())
    }

    /// Whether a read of `read` at `risk` would be allowed now (what a list shows); nothing is
    /// recorded, and a record the policy asks for is not written.
    pub(crate) fn shows_read(&self, kind: ReadKind, read: &ReadName, risk: Risk) -> bool {
        let table = self.inner.table.load();
        table.narrowing.reads.denies(kind, read).is_none()
            && !matches!(self.read_verdict(risk), Verdict::Refuse(_))
    }

    /// Whether a list shows the URI template `template`, whose URIs are at least `risk`: some URI
    /// it expands to might be allowed now. Nothing is recorded.
    pub(crate) fn shows_template(&self, template: &ReadName, risk: Risk) -> bool {
        let table = self.inner.table.load();
        table
            .narrowing
            .reads
            .denies_template(template.as_str())
            .is_none()
            && !matches!(self.read_verdict(risk), Verdict::Refuse(_))
    }

    /// What this gate decides of a read of `risk` now, its name and the policy's deny rules aside:
    /// as the policy table decides a call (the mode's ceiling, the approval HIGH_WRITE needs, the
    /// latch), with no way to approve, so that what would ask is refused; and
    /// `APPROVAL_REQUIRED` where the operator's `ask_at` asks at `risk`.
    fn read_verdict(&self, risk: Risk) -> Verdict {
        let table = self.inner.table.load();
        let facts = Facts {
            risk,
            allowed_modes: ModeSet::ALL,
            mode: self.mode(),
            deny_listed: false,
            can_approve: false,
        };
        let verdict = if self.tainted() {
            policy::decide_tainted(facts, table.taint_policy)
        } else {
            policy::decide(facts)
        };
        match (&verdict, &table.narrowing.ask_at) {
            (Verdict::Allow, Some(at)) if risk >= at.value => {
                Verdict::Refuse(DenialCode::ApprovalRequired)
            }
            _ => verdict,
        }
    }

    fn why_refused(&self, label: &str, risk: Risk, code: DenialCode) -> String {
        let mode = self.mode();
        match code {
            DenialCode::AboveCeiling => format!(
                "{label} is {risk}, above what {mode} allows ({})",
                policy::ceiling(mode)
            ),
            DenialCode::TaintedSession => {
                format!("{label} is {risk}, and the session is tainted: it refuses what writes")
            }
            _ => {
                let by = match &self.inner.table.load().narrowing.ask_at {
                    Some(at) if risk >= at.value && !policy::requires_approval(risk) => {
                        format!(" by the operator's policy ({})", at.rule)
                    }
                    _ => String::new(),
                };
                format!(
                    "{label} is {risk}: reading it needs an approval{by}, and a read has no \
                     approval flow"
                )
            }
        }
    }

    /// The refusal of a read of `name`, named `label` in its record and message, written to the
    /// log as a refused call is, with `name`'s digest.
    #[cold]
    fn refuse_read(
        &self,
        label: String,
        name: &str,
        risk: Risk,
        code: DenialCode,
        message: String,
    ) -> ReadRefusal {
        if self.audits() {
            let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
            let record = AuditRecord {
                arguments_digest: Some(sha256_hex(name.as_bytes())),
                code: Some(Cow::Borrowed(code.as_str())),
                decision: Some(Decision::Refused),
                declared_risk: Some(risk),
                message: Some(message.clone()),
                ..self.record(Stage::Refused, Cow::Owned(label), self.mode(), call)
            };
            self.write_after_the_fact(&record);
        }
        ReadRefusal { code, message }
    }
}

/// A read the gate refuses, with its code and why; the refusal is recorded.
#[derive(Debug, Clone)]
pub(crate) struct ReadRefusal {
    pub(crate) code: DenialCode,
    pub(crate) message: String,
}
