//! One audit record: what was decided about one call, or what happened to it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use toolgate_policy::Mode;
use toolgate_policy::Risk;

/// What a record reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// A call was allowed and its body is about to run; written before the body starts.
    Enter,
    /// A call's body ended; see [`AuditRecord::outcome`].
    Exit,
    /// A call was refused; its body did not run.
    Refused,
    /// The gate's mode was lowered (the kill switch).
    ModeLowered,
    /// An operator approved a pending two-step approval.
    ApprovalGranted,
    /// An operator rejected a pending two-step approval; `message` holds the reason.
    ApprovalRejected,
    /// An approver granted a tool (or one call of it) for the rest of the gate's session; `by` says who,
    /// `message` the scope and time to live.
    SessionGranted,
    /// Session grants were revoked; `message` says how many.
    GrantRevoked,
    /// The gate lost contact with its fleet for longer than the grace period: it acts as SHADOW until
    /// contact is back. `message` says since when and why.
    FleetLost,
    /// The gate is in contact with its fleet again, and acts in the mode of this record.
    FleetRejoined,
    /// The gate's taint latch closed: `tool`, whose output is untrusted, was allowed to run, and from
    /// now on every call that writes needs an approval or is refused; `message` says which.
    SessionTainted,
    /// A tool that declares no risk was served without a gate, because the application said so (an
    /// rmcp handler's undeclared tool under `Undeclared::Serve`); written before it runs. No gate
    /// decided it: `code` is `UNDECLARED_TOOL_SERVED`.
    Ungated,
    /// The gate follows another operator's policy from this record on (`policy_digest`); `message`
    /// names the policy it replaces, `by` who changed it.
    PolicyChanged,
    /// A changed operator's policy was refused (it did not check against the linked tools, or could
    /// not be read), and the gate still follows the one it did; `message` says why.
    PolicyRefused,
    /// An MCP server's resource was read or its prompt got, as the operator's policy asks the log to
    /// record (`record_resources`, `record_prompts`); written before the handler reads it. `tool` is
    /// `resource:<uri>` (without its query and fragment) or `prompt:<name>`, `arguments_digest` the
    /// SHA-256 of the whole URI or name.
    Read,
}

impl Stage {
    /// Every stage, for tests that go over them all.
    #[cfg(test)]
    pub(crate) const ALL: [Stage; 15] = [
        Stage::Enter,
        Stage::Exit,
        Stage::Refused,
        Stage::ModeLowered,
        Stage::ApprovalGranted,
        Stage::ApprovalRejected,
        Stage::SessionGranted,
        Stage::GrantRevoked,
        Stage::FleetLost,
        Stage::FleetRejoined,
        Stage::SessionTainted,
        Stage::Ungated,
        Stage::PolicyChanged,
        Stage::PolicyRefused,
        Stage::Read,
    ];

    /// The name it is written under, as `Serialize` writes it (`snake_case`).
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Stage::Enter => "enter",
            Stage::Exit => "exit",
            Stage::Refused => "refused",
            Stage::ModeLowered => "mode_lowered",
            Stage::ApprovalGranted => "approval_granted",
            Stage::ApprovalRejected => "approval_rejected",
            Stage::SessionGranted => "session_granted",
            Stage::GrantRevoked => "grant_revoked",
            Stage::FleetLost => "fleet_lost",
            Stage::FleetRejoined => "fleet_rejoined",
            Stage::SessionTainted => "session_tainted",
            Stage::Ungated => "ungated",
            Stage::PolicyChanged => "policy_changed",
            Stage::PolicyRefused => "policy_refused",
            Stage::Read => "read",
        }
    }
}

/// The decision about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Allowed by the policy alone.
    Allowed,
    /// Allowed after an approval.
    Approved,
    /// Allowed by a session grant, without asking again.
    Granted,
    /// Refused.
    Refused,
}

impl Decision {
    /// The name it is written under, as `Serialize` writes it (`snake_case`).
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Approved => "approved",
            Decision::Granted => "granted",
            Decision::Refused => "refused",
        }
    }
}

/// How a call's body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It returned `Ok`.
    Ok,
    /// It returned `Err`.
    Error,
    /// It panicked.
    Panic,
    /// Its future was dropped before it completed.
    Cancelled,
    /// It never started: the call was refused after its `enter` record was written (the gate was
    /// lowered meanwhile, or another gate deciding the same call refused it). The record's `code` and
    /// `message` say why.
    Refused,
}

impl Outcome {
    /// The name it is written under, as `Serialize` writes it (`snake_case`).
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Panic => "panic",
            Outcome::Cancelled => "cancelled",
            Outcome::Refused => "refused",
        }
    }
}

/// One audit record. Sinks add their own framing (the JSONL sink adds `seq`, `prev_hash` and `hash`).
///
/// Fields are declared in lexicographic order, so that serializing a record gives canonical JSON (sorted
/// keys, no whitespace, absent fields omitted) without an intermediate map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuditRecord {
    /// The agent label the gate was built with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<Cow<'static, str>>,
    /// The call's arguments, only for tools that opt in to recording them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// sha256 (hex) of the call's canonical JSON arguments, where they are known and serializable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_digest: Option<String>,
    /// Who approved or rejected the call, granted or revoked a session grant, or lowered the mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Pairs an `enter` record with its `exit` record: unique per call within a gate.
    pub call: u64,
    /// The refusal code, for refused calls (and `exit` records of outcome `refused`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Cow<'static, str>>,
    /// The decision, for `enter` and `refused` records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// The risk the tool declares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_risk: Option<Risk>,
    /// How long the body ran, in microseconds (`exit` records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_us: Option<u64>,
    /// The risk the call was judged at: the declared risk, or higher where the arguments escalated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_risk: Option<Risk>,
    /// What the tool's `evidence` probe read of its target just before the body and after it, as
    /// `{"after": .., "before": ..}` (`exit` records of a tool that records its arguments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    /// sha256 (hex) of what the tool's `evidence` probe read of its target after the body (`exit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_after: Option<String>,
    /// sha256 (hex) of what the tool's `evidence` probe read of its target just before the body
    /// (`exit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_before: Option<String>,
    /// The gate's id (a gate and its clones share it).
    pub gate: u64,
    /// sha256 (hex) of the sorted canonical JSON of every linked tool's manifest.
    pub manifest_digest: Cow<'static, str>,
    /// The refusal message, or for `mode_lowered` who lowered it and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The gate's mode at the decision (for `mode_lowered`, the new mode).
    pub mode: Mode,
    /// How the body ended (`exit` records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// sha256 (hex) of the result's JSON, where the result type is serializable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_digest: Option<String>,
    /// The digest (sha256, hex) of the operator's policy file the gate followed
    /// ([`GateBuilder::policy`](crate::GateBuilder::policy)); absent where it followed none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_digest: Option<String>,
    /// [`POLICY_VERSION`](toolgate_policy::POLICY_VERSION) of the rules that decided.
    pub policy_version: u32,
    /// Who the agent acts for, as the application identified its caller
    /// ([`GateBuilder::principal`](crate::GateBuilder::principal)); absent where the gate names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Cow<'static, str>>,
    /// How the call would be undone, as its tool's `rollback` function said (`enter` records), as
    /// canonical JSON ([`Rollback`](crate::Rollback)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<String>,
    /// The call this one undoes, for a call made by [`Registry::rollback`](crate::Registry::rollback):
    /// its `enter` record's [`reference`](AuditRecord::reference), `GATE/CALL@DIGEST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<String>,
    /// What the operator's rules logged only (a policy file's `[shadow]` tables) would have made of
    /// the call, where stricter than what the gate decided: the ruling, its code and the rule, as
    /// `refused (DENY_LISTED) by payments.* (ops.toml:9:9)` or `asks by ask_at LOW_WRITE
    /// (ops.toml:4:10)` (`enter` records, and `refused` records of a call that asked). The call was
    /// decided as if they were not there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_in_shadow: Option<String>,
    /// What this record reports.
    pub stage: Stage,
    /// UTC time of the record, RFC 3339 with microseconds (`2026-11-22T03:11:01.123456Z`).
    pub timestamp: String,
    /// The tool's id (empty for gate-wide records such as `mode_lowered`).
    pub tool: Cow<'static, str>,
}
