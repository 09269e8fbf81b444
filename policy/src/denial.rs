//! The stable codes of every refusal.

use std::fmt;

/// Why a call was refused: one stable code per reason.
///
/// Compare with the enum or with the code's text: `assert_eq!(denied.code(), "MODE_NOT_ALLOWED")`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DenialCode {
    /// `NO_GATE`: the tool was called outside every gate.
    NoGate,
    /// `DENY_LISTED`: a deny rule of the gate matches the tool.
    DenyListed,
    /// `MODE_NOT_ALLOWED`: the current mode is not among the tool's allowed modes.
    ModeNotAllowed,
    /// `ABOVE_CEILING`: the call's risk is above the current mode's ceiling.
    AboveCeiling,
    /// `APPROVAL_REQUIRED`: the call needs an approval and the gate has no way to get one: no approver
    /// and no store, a sync tool under an async approver, arguments a two-step approval cannot bind, or
    /// a store that holds as many pending requests as it may.
    ApprovalRequired,
    /// `APPROVAL_REJECTED`: the approver rejected the call, or failed to answer.
    ApprovalRejected,
    /// `UNREGISTERED_TOOL`: the tool is not in the registry the gate was built from.
    UnregisteredTool,
    /// `AUDIT_UNAVAILABLE`: the gate's audit sink could not record the call, so it did not run.
    AuditUnavailable,
    /// `APPROVAL_EXPIRED`: the two-step approval for this call expired before the call came back.
    ApprovalExpired,
    /// `APPROVAL_MISMATCH`: an approval is pending for this tool, but for other arguments.
    ApprovalMismatch,
    /// `APPROVAL_REUSED`: the approval for this call was already used; an approval runs a call once.
    ApprovalReused,
    /// `APPROVAL_STORE_UNAVAILABLE`: the approval store could not be reached, did not answer in time, or
    /// answered something unexpected; the call did not run.
    ApprovalStoreUnavailable,
    /// `APPROVAL_PENDING`: the call needs an approval, and the gate's approval store filed a request for
    /// it that waits for an operator; the refusal carries the request's token. Once it is approved, the
    /// same call with the same arguments runs once.
    ApprovalPending,
    /// `BUDGET_EXHAUSTED`: the call is over one of the gate's budgets (calls per tool, risk level or
    /// agent over a sliding window); the refusal says when a call may be retried.
    BudgetExhausted,
    /// `BUDGET_STORE_UNAVAILABLE`: the budget store could not be reached, did not answer in time, or
    /// answered something unexpected; the call did not run and took no unit of any budget.
    BudgetStoreUnavailable,
    /// `TAINTED_SESSION`: a tool whose output is untrusted ran earlier in the gate's session, and the
    /// gate refuses every call that writes from then on (`TaintPolicy::Refuse`).
    TaintedSession,
    /// `ARGUMENT_REFUSED`: a rule of the operator's policy file on the call's arguments refuses it (a
    /// value matching a refused pattern, outside a range, or not among the allowed values); the detail
    /// names the rule and where it is written.
    ArgumentRefused,
    /// `TARGET_NOT_SINGLE`: the call of an `irreversible` tool names no single target: its target is
    /// empty, a list, a glob or a wildcard. Refused before any approver is asked.
    TargetNotSingle,
    /// `ROLLBACK_UNAVAILABLE`: the tool declares how its calls are undone, and no plan could be made
    /// for this call (its `rollback` function failed, or the plan names no tool that can be called).
    RollbackUnavailable,
    /// `EVIDENCE_UNAVAILABLE`: the tool's `evidence` probe of its target failed, before or after the
    /// decision; the call did not run.
    EvidenceUnavailable,
    /// `EVIDENCE_CHANGED`: the target's state just before the body is not the state the approver saw:
    /// the approval was for another world. Ask again.
    EvidenceChanged,
    /// `CONFIRMATION_MISMATCH`: the approval of an `irreversible` call does not carry its target typed
    /// back by whoever approved it.
    ConfirmationMismatch,
    /// `HISTORY_REFUSED`: a rule of the operator's policy over the calls before this one refuses it:
    /// the call it must follow did not end without an error within its window, or a call it may not
    /// follow ran within its window (the refusal then says when to retry). The detail names the rule.
    HistoryRefused,
}

impl DenialCode {
    /// Every code.
    pub const ALL: [DenialCode; 23] = [
        DenialCode::NoGate,
        DenialCode::DenyListed,
        DenialCode::ModeNotAllowed,
        DenialCode::AboveCeiling,
        DenialCode::ApprovalRequired,
        DenialCode::ApprovalRejected,
        DenialCode::UnregisteredTool,
        DenialCode::AuditUnavailable,
        DenialCode::ApprovalExpired,
        DenialCode::ApprovalMismatch,
        DenialCode::ApprovalReused,
        DenialCode::ApprovalStoreUnavailable,
        DenialCode::ApprovalPending,
        DenialCode::BudgetExhausted,
        DenialCode::BudgetStoreUnavailable,
        DenialCode::TaintedSession,
        DenialCode::ArgumentRefused,
        DenialCode::TargetNotSingle,
        DenialCode::RollbackUnavailable,
        DenialCode::EvidenceUnavailable,
        DenialCode::EvidenceChanged,
        DenialCode::ConfirmationMismatch,
        DenialCode::HistoryRefused,
    ];

    /// The stable SCREAMING_SNAKE code.
    pub const fn as_str(self) -> &'static str {
        match self {
            DenialCode::NoGate => "NO_GATE",
            DenialCode::DenyListed => "DENY_LISTED",
            DenialCode::ModeNotAllowed => "MODE_NOT_ALLOWED",
            DenialCode::AboveCeiling => "ABOVE_CEILING",
            DenialCode::ApprovalRequired => "APPROVAL_REQUIRED",
            DenialCode::ApprovalRejected => "APPROVAL_REJECTED",
            DenialCode::UnregisteredTool => "UNREGISTERED_TOOL",
            DenialCode::AuditUnavailable => "AUDIT_UNAVAILABLE",
            DenialCode::ApprovalExpired => "APPROVAL_EXPIRED",
            DenialCode::ApprovalMismatch => "APPROVAL_MISMATCH",
            DenialCode::ApprovalReused => "APPROVAL_REUSED",
            DenialCode::ApprovalStoreUnavailable => "APPROVAL_STORE_UNAVAILABLE",
            DenialCode::ApprovalPending => "APPROVAL_PENDING",
            DenialCode::BudgetExhausted => "BUDGET_EXHAUSTED",
            DenialCode::BudgetStoreUnavailable => "BUDGET_STORE_UNAVAILABLE",
            DenialCode::TaintedSession => "TAINTED_SESSION",
            DenialCode::ArgumentRefused => "ARGUMENT_REFUSED",
            DenialCode::TargetNotSingle => "TARGET_NOT_SINGLE",
            DenialCode::RollbackUnavailable => "ROLLBACK_UNAVAILABLE",
            DenialCode::EvidenceUnavailable => "EVIDENCE_UNAVAILABLE",
            DenialCode::EvidenceChanged => "EVIDENCE_CHANGED",
            DenialCode::ConfirmationMismatch => "CONFIRMATION_MISMATCH",
            DenialCode::HistoryRefused => "HISTORY_REFUSED",
        }
    }
}

impl fmt::Display for DenialCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for DenialCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for DenialCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for DenialCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}
