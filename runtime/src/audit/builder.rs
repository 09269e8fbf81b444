//! Constructing records outside the gate: for custom sinks, their tests and tools that replay logs.

use std::borrow::Cow;

use crate::audit::record::{AuditRecord, Stage};
use crate::audit::time::now_rfc3339;
use toolgate_policy::Mode;
use toolgate_policy::POLICY_VERSION;

impl AuditRecord {
    /// A record of `stage` for `tool`, stamped now, with the current
    /// [`POLICY_VERSION`](toolgate_policy::POLICY_VERSION), call number 0, an empty manifest digest and
    /// every optional field absent. The fields are public: set the others after construction.
    ///
    /// ```
    /// # extern crate toolgate_runtime as toolgate;
    /// use toolgate::Mode;
    /// use toolgate::audit::{AuditRecord, Decision, Stage};
    ///
    /// let mut record = AuditRecord::new(Stage::Refused, "users.delete", Mode::Shadow, 1);
    /// record.decision = Some(Decision::Refused);
    /// record.code = Some("MODE_NOT_ALLOWED".into());
    /// assert!(serde_json::to_string(&record)?.contains(r#""code":"MODE_NOT_ALLOWED""#));
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn new(
        stage: Stage,
        tool: impl Into<Cow<'static, str>>,
        mode: Mode,
        gate: u64,
    ) -> AuditRecord {
        AuditRecord {
            agent: None,
            arguments: None,
            arguments_digest: None,
            by: None,
            call: 0,
            code: None,
            decision: None,
            declared_risk: None,
            duration_us: None,
            effective_risk: None,
            evidence: None,
            evidence_after: None,
            evidence_before: None,
            gate,
            manifest_digest: Cow::Borrowed(""),
            message: None,
            mode,
            outcome: None,
            output_digest: None,
            policy_digest: None,
            policy_version: POLICY_VERSION,
            principal: None,
            rollback: None,
            rollback_of: None,
            rule_in_shadow: None,
            stage,
            timestamp: now_rfc3339(),
            tool: tool.into(),
        }
    }

    /// How another record names this one (a rollback's `rollback_of` names the `enter` record of the
    /// call it undoes): `GATE/CALL@DIGEST`, the digest the SHA-256 of the record as it serializes (the
    /// fields of this struct, a log's chain fields left out). Gate ids and call numbers start again in
    /// every process; the digest tells apart two writers' calls that share them.
    pub fn reference(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!(
            "{}/{}@{}",
            self.gate,
            self.call,
            crate::canonical::sha256_hex(&json)
        )
    }
}
