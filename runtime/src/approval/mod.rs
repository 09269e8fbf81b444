//! Approvals: who says yes to a call whose risk needs it (HIGH_WRITE), now ([`Approver`]) or later
//! ([`two_step`]).

pub mod two_step;

use std::fmt;

use crate::policy::Mode;
use crate::policy::Risk;
use crate::registry::ToolManifest;

/// What an approver is asked.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ApprovalRequest<'a> {
    /// The tool to run.
    pub tool: &'static ToolManifest,
    /// The gate's current mode.
    pub mode: Mode,
    /// The risk of this call.
    pub risk: Risk,
    /// The call's arguments as the audit log writes them: a JSON object, keys sorted, a method's receiver
    /// as `self`, a redacted argument as `"[REDACTED]"`, one that is not serializable (a receiver
    /// holding a pool) as `"[NOT SERIALIZABLE]"`. `None` where an argument is bound by a pattern.
    pub arguments: Option<&'a str>,
    /// The SHA-256 of [`arguments`](ApprovalRequest::arguments), as the audit log records it.
    pub arguments_digest: Option<&'a str>,
}

/// An approver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    /// Run the call.
    Approve,
    /// Refuse the call, with a reason that the refusal carries.
    Reject(String),
}

/// Decides the calls that need an approval.
///
/// It is asked synchronously, before the body runs. An approver that panics has refused: the call is
/// refused with `APPROVAL_REJECTED`, never run. A gate without an approver refuses every such call with
/// `APPROVAL_REQUIRED`. Closures `Fn(&ApprovalRequest) -> Approval` are approvers.
pub trait Approver: Send + Sync + 'static {
    /// Approves or rejects one call.
    fn approve(&self, request: &ApprovalRequest<'_>) -> Approval;
}

impl<F> Approver for F
where
    F: Fn(&ApprovalRequest<'_>) -> Approval + Send + Sync + 'static,
{
    fn approve(&self, request: &ApprovalRequest<'_>) -> Approval {
        self(request)
    }
}

/// Approves every call it is asked about. Named so that a gate using it reads as what it is: for tests and
/// demos, never for production.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAllApprover;

impl Approver for AllowAllApprover {
    fn approve(&self, _request: &ApprovalRequest<'_>) -> Approval {
        Approval::Approve
    }
}

impl fmt::Display for Approval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Approval::Approve => f.write_str("approved"),
            Approval::Reject(reason) => write!(f, "rejected: {reason}"),
        }
    }
}
