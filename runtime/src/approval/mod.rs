//! Approvals: who says yes to a call whose risk needs it (HIGH_WRITE): an approver asked now, sync
//! ([`Approver`]) or async ([`AsyncApprover`]), or an operator later, through a store ([`store`],
//! [`two_step`]).

pub(crate) mod effects;
pub mod store;
pub mod two_step;

pub use effects::Rollback;
pub(crate) use effects::{Evidence, not_single, typed};

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::registry::ToolManifest;
use toolgate_policy::Mode;
use toolgate_policy::Risk;

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
    /// The agent wrote them: show them to a person through
    /// [`terminal::escaped`](crate::terminal::escaped), which makes invisible and reordering
    /// characters visible, so that a call for `"alice\u{200b}"` cannot pass for one for `"alice"`.
    pub arguments: Option<&'a str>,
    /// The SHA-256 of [`arguments`](ApprovalRequest::arguments), as the audit log records it.
    pub arguments_digest: Option<&'a str>,
    /// Who the agent acts for, as the gate names it
    /// ([`GateBuilder::principal`](crate::GateBuilder::principal)).
    pub principal: Option<&'a str>,
    /// What tainted the gate's session, for a call that writes in a tainted session: the approval is
    /// asked for (also) because the agent has read untrusted output since. `None` in a clean session.
    pub taint: Option<&'a Taint>,
    /// The call's target, for a tool that names one (`#[tool(target = ..)]`), as it is typed back to
    /// confirm an irreversible call. The agent wrote it: show it escaped, as the arguments.
    pub target: Option<&'a str>,
    /// Whether the tool is `irreversible`: approving it takes typing its target back.
    pub irreversible: bool,
    /// What the tool's `evidence` probe read of the target just now, as canonical JSON: the state the
    /// approval is for. If it differs just before the body, the call is refused (`EVIDENCE_CHANGED`).
    pub evidence: Option<&'a str>,
    /// How the call would be undone, for a tool that says (`#[tool(rollback = ..)]`).
    pub rollback: Option<&'a Rollback>,
}

/// What closed a gate's taint latch: the first tool with untrusted output (`#[tool(untrusted_output)]`)
/// that ran in the gate's session, and when. From then on every call that writes, through the gate or
/// a clone, needs an approval or is refused ([`TaintPolicy`](toolgate_policy::TaintPolicy)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Taint {
    /// The id of the tool whose output tainted the session.
    pub tool: &'static str,
    /// When its call was allowed: UTC, RFC 3339 with microseconds, as audit records write time.
    pub at: String,
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the session is tainted: `{}`, whose output is untrusted, ran at {}",
            self.tool, self.at
        )
    }
}

/// An approver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Approval {
    /// Run the call, once.
    Approve,
    /// Run the call, and the calls of the same tool (or, with [`SessionGrant::exact_arguments`], the
    /// same call) through this gate and its clones until the grant expires or is revoked
    /// ([`Gate::revoke_grants`](crate::Gate::revoke_grants)), without asking again.
    ApproveForSession(SessionGrant),
    /// Refuse the call, with feedback for the agent: the refusal's message, the by-name error and the
    /// MCP result carry it.
    Reject(String),
    /// Refuse the call and stop the agent: the gate lowers itself to SHADOW (recorded with the
    /// approver's name and this reason), so that every later call that writes is refused too.
    Stop(String),
}

/// How long a session grant made by an operator's `approve --for-session` lives.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(60 * 60);

/// The scope and life of an [`Approval::ApproveForSession`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionGrant {
    ttl: Duration,
    exact_arguments: bool,
}

impl SessionGrant {
    /// The longest a grant lives: a day. A longer time to live is cut to it.
    pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

    /// Grants every call of the tool, at the risk it was approved at or lower, for `ttl` (at most
    /// [`SessionGrant::MAX_TTL`]).
    pub fn tool(ttl: Duration) -> SessionGrant {
        SessionGrant {
            ttl: ttl.min(SessionGrant::MAX_TTL),
            exact_arguments: false,
        }
    }

    /// Grants only calls with exactly the approved arguments (redacted values included).
    pub fn exact_arguments(mut self) -> SessionGrant {
        self.exact_arguments = true;
        self
    }

    /// How long the grant lives.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether the grant covers only the approved arguments.
    pub fn is_exact(&self) -> bool {
        self.exact_arguments
    }
}

/// Decides the calls that need an approval.
///
/// It is asked synchronously, before the body runs. An approver that panics has refused: the call is
/// refused with `APPROVAL_REJECTED`, never run. A gate without an approver refuses every such call with
/// `APPROVAL_REQUIRED`. Closures `Fn(&ApprovalRequest) -> Approval` are approvers.
pub trait Approver: Send + Sync + 'static {
    /// Approves or rejects one call.
    fn approve(&self, request: &ApprovalRequest<'_>) -> Approval;

    /// Who answers, for the audit log (`by` of the records of the calls it decides).
    fn name(&self) -> &str {
        "approver"
    }
}

/// An async approver's answer to come.
pub type ApprovalFuture<'a> = Pin<Box<dyn Future<Output = Approval> + Send + 'a>>;

/// Decides the calls that need an approval, taking its time: a human in another program, a chat
/// message.
///
/// An async tool awaits it inside its own future, on whatever executor polls the tool: no thread waits
/// for it. A sync tool cannot wait without blocking its thread, so under a gate whose approver is async
/// a sync tool's call that needs an approval is refused with `APPROVAL_REQUIRED`, its message saying
/// why; it is never run, and never blocks. A future that panics has refused, as a sync approver that
/// panics has; a future dropped before it answers (the call cancelled) runs nothing.
///
/// ```
/// # extern crate toolgate_runtime as toolgate;
/// use toolgate::approval::{ApprovalFuture, AsyncApprover};
/// use toolgate::{Approval, ApprovalRequest};
///
/// struct Console;
///
/// impl AsyncApprover for Console {
///     fn approve<'a>(&'a self, request: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
///         Box::pin(async move {
///             // ask a human here, awaiting their answer
///             if request.tool.id.ends_with(".drop_table") {
///                 Approval::Reject("never on Fridays".into())
///             } else {
///                 Approval::Approve
///             }
///         })
///     }
/// }
/// ```
pub trait AsyncApprover: Send + Sync + 'static {
    /// Approves or rejects one call.
    fn approve<'a>(&'a self, request: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a>;

    /// Who answers, for the audit log.
    fn name(&self) -> &str {
        "approver"
    }
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
            Approval::ApproveForSession(grant) => {
                write!(f, "approved for the session ({} s", grant.ttl.as_secs())?;
                f.write_str(if grant.exact_arguments {
                    ", these arguments)"
                } else {
                    ")"
                })
            }
            Approval::Reject(reason) => write!(f, "rejected: {reason}"),
            Approval::Stop(reason) => write!(f, "rejected, and the gate stopped: {reason}"),
        }
    }
}

/// A gate's approver, sync or async.
pub(crate) enum AnyApprover {
    Sync(Box<dyn Approver>),
    Async(Box<dyn AsyncApprover>),
}

/// A session grant, as [`Gate::grants`](crate::Gate::grants) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// The granted tool's id.
    pub tool: &'static str,
    /// The highest risk it covers: the risk of the approved call.
    pub risk: toolgate_policy::Risk,
    /// Whether it covers only the approved arguments.
    pub exact_arguments: bool,
    /// Who granted it.
    pub by: String,
    /// How long it still lives.
    pub expires_in: Duration,
}
