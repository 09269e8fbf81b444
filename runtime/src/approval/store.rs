//! Where two-step approvals live between the refusal that asks for one and the retry that uses it: a
//! trait, so that an approval given in one process can be used in another.
//!
//! The gate asks the store one question per call that needs an approval ([`ApprovalStore::consume`]):
//! is there an answer for exactly this call? The answer is used up by the asking (an approval runs its
//! call once); where there is none, the store keeps a pending request for an operator and hands back its
//! token. Operators answer through [`ApprovalStore::answer`] (with the token) or through the store's own
//! channel (the `toolgate approvals` command, by request id).
//!
//! A store fails closed: an error, or no answer within its timeout, refuses the call with
//! `APPROVAL_STORE_UNAVAILABLE` and the body does not run.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use toolgate_policy::{DenialCode, Mode, Risk};

/// A store's answer to come: a boxed future, so that the trait stays object-safe.
///
/// It must complete without a particular executor: a sync tool's call waits for it by parking its
/// thread, and an async tool's call awaits it on whatever executor polls the tool. A store that needs a
/// runtime of its own (a database client) runs it on its own thread.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What an approval is bound to: it is used only by a call with all of these the same.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Binding {
    /// The tool's id.
    pub tool: String,
    /// SHA-256 of the arguments with the real values of redacted ones and each argument's type. Never
    /// written to an audit log or shown: a digest of a short secret gives the secret away.
    pub arguments_digest: String,
    /// The digest the audit log shows for these arguments (redacted ones as `"[REDACTED]"`).
    pub shown_digest: String,
    /// The risk the call is judged at (escalation included).
    pub risk: Risk,
    /// [`POLICY_VERSION`](toolgate_policy::POLICY_VERSION) of the rules that asked.
    pub policy_version: u32,
    /// Who the agent acts for ([`GateBuilder::principal`](crate::GateBuilder::principal)), with the
    /// principal an MCP transport authenticated where several share the gate (`writer (writer:alice)`):
    /// an answer to one principal's call never runs another's.
    pub principal: Option<String>,
    /// The gate's agent label: an answer to one agent's call never runs another's.
    pub agent: Option<String>,
    /// Whether the taint latch held the call when it was asked (its session was tainted and the call
    /// writes): an answer given to a clean session's request never runs a call made once the session
    /// is tainted, which asks again, showing the taint.
    pub tainted: bool,
    /// The call's target (`#[tool(target = ..)]`), as it is typed back to confirm: an approval of one
    /// target never runs a call on another.
    pub target: Option<String>,
    /// The digest of the evidence the approver is shown (`#[tool(evidence = ..)]`): an answer given
    /// for one state of the target never runs a call made once it is another.
    pub evidence_digest: Option<String>,
}

impl Binding {
    /// A binding under the current policy version.
    pub fn new(
        tool: impl Into<String>,
        arguments_digest: impl Into<String>,
        shown_digest: impl Into<String>,
        risk: Risk,
    ) -> Binding {
        Binding {
            tool: tool.into(),
            arguments_digest: arguments_digest.into(),
            shown_digest: shown_digest.into(),
            risk,
            policy_version: toolgate_policy::POLICY_VERSION,
            principal: None,
            agent: None,
            tainted: false,
            target: None,
            evidence_digest: None,
        }
    }

    /// The binding of a call made for `principal` by `agent`: only their own call uses its answer.
    pub fn made_by(mut self, principal: Option<String>, agent: Option<String>) -> Binding {
        self.principal = principal;
        self.agent = agent;
        self
    }

    /// The binding of a call the taint latch holds (`tainted`), or not.
    pub fn tainted(mut self, tainted: bool) -> Binding {
        self.tainted = tainted;
        self
    }

    /// The binding of a call on `target`, its target shown with `evidence_digest`.
    pub fn on_target(mut self, target: Option<String>, evidence_digest: Option<String>) -> Binding {
        self.target = target;
        self.evidence_digest = evidence_digest;
        self
    }

    /// Whether `other` is this call but for the state of its target: an answer to it is for another
    /// world.
    pub fn same_but_evidence(&self, other: &Binding) -> bool {
        self.evidence_digest != other.evidence_digest
            && Binding {
                evidence_digest: None,
                ..self.clone()
            } == Binding {
                evidence_digest: None,
                ..other.clone()
            }
    }
}

/// A call that needs an approval, as the gate hands it to the store: the binding, and what an operator
/// is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalCall {
    /// What an approval of this call is bound to.
    pub binding: Binding,
    /// The gate's agent label; a store bounds its pending requests per agent. The binding holds it
    /// too.
    pub agent: Option<String>,
    /// Who the agent acts for, as the gate names it
    /// ([`GateBuilder::principal`](crate::GateBuilder::principal)), with the principal an MCP transport
    /// authenticated where several share the gate, for an operator to see. The binding
    /// holds it too: an answer is used by the call of the principal it was asked for, never another's.
    pub principal: Option<String>,
    /// What tainted the gate's session, for a call that writes after untrusted input
    /// ([`Taint`](crate::approval::Taint)), for an operator to see. The binding holds whether there is
    /// one ([`Binding::tainted`]).
    pub taint: Option<crate::approval::Taint>,
    /// The gate's mode when it asked.
    pub mode: Mode,
    /// The tool's manifest as canonical JSON, so that an operator in another program sees what the tool
    /// declares without having it linked.
    pub manifest: String,
    /// The arguments as the audit log writes them (redacted ones as `"[REDACTED]"`).
    pub arguments: Option<String>,
    /// Whether the tool is `irreversible`: an approval must carry the target typed back
    /// ([`Answer::Approve::confirmation`]); a store refuses one that does not
    /// ([`ApproveError::ConfirmationMismatch`]).
    pub irreversible: bool,
    /// What the tool's `evidence` probe read of the target when the call was made, as canonical JSON;
    /// its digest is [`Binding::evidence_digest`].
    pub evidence: Option<String>,
    /// How the call would be undone, as canonical JSON ([`Rollback::to_json`](crate::Rollback)).
    pub rollback: Option<String>,
    /// The gate that asks: a random id of the gate, shared by its clones and never by another gate, in
    /// any process. Not in the binding (any gate of the same principal and agent may run the call
    /// once): a store keeps the id of the gate that filed a request, and gives an answer for the
    /// session as one only to a call with that id (`None`: to no call).
    pub gate: Option<String>,
}

impl ApprovalCall {
    /// Whether `answer` may answer this call: a rejection always, an approval of an irreversible call
    /// only with its target typed back exactly.
    pub fn accepts(&self, answer: &Answer) -> Result<(), ApproveError> {
        confirmed(self.irreversible, self.binding.target.as_deref(), answer)
    }
}

/// Whether `answer` may answer a request: for an irreversible one, an approval must carry the target
/// typed back exactly.
pub(crate) fn confirmed(
    irreversible: bool,
    target: Option<&str>,
    answer: &Answer,
) -> Result<(), ApproveError> {
    match answer {
        Answer::Approve { confirmation, .. } if irreversible => match (target, confirmation) {
            (Some(target), Some(typed)) if typed == target => Ok(()),
            _ => Err(ApproveError::ConfirmationMismatch),
        },
        _ => Ok(()),
    }
}

/// How an operator answered a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// Run the call once; with `for_session`, the gate that filed the request also grants the tool,
    /// with these arguments, for the rest of its session (see
    /// [`SessionGrant`](crate::approval::SessionGrant)).
    Approve {
        /// Who approved.
        by: String,
        /// Grant the same call for the session of the gate that filed the request, once it runs the
        /// call: another gate that runs it (the same principal and agent) runs it once, and is
        /// granted nothing. Not for an irreversible call, which asks every time.
        for_session: bool,
        /// The call's target typed back by whoever approved, which approving an `irreversible` call
        /// takes; `None` for any other call.
        confirmation: Option<String>,
    },
    /// Refuse the call with a reason that the agent reads; with `stop`, the gate that reads it lowers
    /// itself to SHADOW, and the store gives the same answer to every other request of the same agent
    /// and principal not yet used, so that the agent reads the stop whichever call it makes again.
    Reject {
        /// Who rejected.
        by: String,
        /// Why, for the agent.
        reason: String,
        /// Lower the gate to SHADOW as well.
        stop: bool,
    },
}

impl Answer {
    /// Who answered.
    pub fn by(&self) -> &str {
        match self {
            Answer::Approve { by, .. } | Answer::Reject { by, .. } => by,
        }
    }
}

/// What a store says of a call that needs an approval.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Consumed {
    /// An operator answered exactly this call; the answer is now used and answers no other call.
    Answered(Answer),
    /// As [`Consumed::Answered`], from a store that knows when the request expires, as an instant of
    /// this process's monotonic clock (no later than the store's own expiry): the call runs only if it
    /// reaches its commit point, the last step before its body, before then, and is refused
    /// `APPROVAL_EXPIRED` otherwise, whatever it waited for meanwhile (a record, a lock). Both stores
    /// of this crate answer so.
    AnsweredUntil(Answer, Instant),
    /// No answer for this call: refused with `code` (`APPROVAL_PENDING` where a request for it is
    /// pending, or `APPROVAL_EXPIRED`, `APPROVAL_REUSED` where an answer for it exists but cannot be
    /// used, and `APPROVAL_MISMATCH` where the only live approval is for the tool with other
    /// arguments and no request for this call could be filed). Where there is a `token`, a
    /// pending request for this call waits for an operator; `None` when the store holds as many pending
    /// requests for the agent as it may, and the gate refuses `APPROVAL_REQUIRED`. A store written
    /// before `APPROVAL_PENDING` existed may answer `APPROVAL_REQUIRED` with a token: the gate reads it
    /// as pending.
    Pending {
        /// Why the call is refused now.
        code: DenialCode,
        /// The pending request's token: whoever holds it can approve the call.
        token: Option<String>,
    },
    /// As [`Consumed::Pending`], from a store whose operators answer a request by an id of its own
    /// (`toolgate approvals approve ID` with `PostgresStore`): the refusal carries the id
    /// ([`Denied::approval_request_id`](crate::Denied::approval_request_id)), so that whoever tells
    /// the operator can say which request to answer. The gate reads it as it reads `Pending`; a store
    /// that has no ids answers `Pending`.
    Filed(Filed),
}

/// A pending request as a store that names its requests says it ([`Consumed::Filed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Filed {
    /// Why the call is refused now, as in [`Consumed::Pending`].
    pub code: DenialCode,
    /// The pending request's token, as in [`Consumed::Pending`]: a secret for the operator.
    pub token: Option<String>,
    /// The request's id in the store's operator channel. Not a secret: answering by id takes the
    /// operator's access to the store, and the agent may read it to say which request waits.
    pub request_id: Option<String>,
}

impl Filed {
    /// The answer `Consumed::Pending { code, token }` gives, with no id yet.
    pub fn new(code: DenialCode, token: Option<String>) -> Filed {
        Filed {
            code,
            token,
            request_id: None,
        }
    }

    /// The pending request's id, as operators answer it.
    pub fn request_id(mut self, id: impl Into<String>) -> Filed {
        self.request_id = Some(id.into());
        self
    }
}

/// A store could not answer; the call is refused with `APPROVAL_STORE_UNAVAILABLE`. The PostgreSQL
/// parts that are not approval stores (the audit sink, the fleet) report their errors with it too: its
/// text names no part, and they say which failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached, or its connection failed.
    Unavailable(String),
    /// No answer within the store's timeout.
    Timeout,
    /// The store answered something it should not have (a row of an unknown shape, a broken invariant).
    Unexpected(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable(why) => write!(f, "unavailable: {why}"),
            StoreError::Timeout => f.write_str("no answer in time"),
            StoreError::Unexpected(what) => write!(f, "an unexpected answer: {what}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// [`Gate::approve`](crate::Gate::approve) or a store's operator channel could not answer a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApproveError {
    /// No request has this token or id (never issued, or forgotten long after it expired).
    UnknownToken,
    /// The request expired before it was answered.
    Expired,
    /// The request was answered already.
    AlreadyApproved,
    /// The answer was used already: it decided its call once.
    AlreadyUsed,
    /// The gate does not take two-step approvals.
    NotEnabled,
    /// The request is for an irreversible call, and the approval does not carry its target typed back
    /// exactly: it approves nothing, and the request still waits.
    ConfirmationMismatch,
    /// The store failed.
    Store(StoreError),
}

impl fmt::Display for ApproveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApproveError::UnknownToken => f.write_str("no approval request has this token"),
            ApproveError::Expired => f.write_str("the approval request expired"),
            ApproveError::AlreadyApproved => f.write_str("the request is answered already"),
            ApproveError::AlreadyUsed => f.write_str("the answer was used already"),
            ApproveError::NotEnabled => f.write_str("this gate does not take two-step approvals"),
            ApproveError::ConfirmationMismatch => f.write_str(
                "the call is irreversible: approve it by typing its target exactly (the request \
                 still waits)",
            ),
            ApproveError::Store(StoreError::Unavailable(why)) => {
                write!(f, "the approval store is unavailable: {why}")
            }
            ApproveError::Store(StoreError::Timeout) => {
                f.write_str("the approval store did not answer in time")
            }
            ApproveError::Store(StoreError::Unexpected(what)) => {
                write!(f, "the approval store answered unexpectedly: {what}")
            }
        }
    }
}

impl std::error::Error for ApproveError {}

/// Keeps two-step approval requests and their answers.
///
/// Implementations guarantee, whatever number of gates and processes share them:
///
/// - an answer is used at most once, atomically: of many calls racing for one approval, one runs;
/// - an answer is used only by a call whose [`Binding`] is equal, field by field, to the request's
///   (its principal and agent included: one principal's answer never runs another's call);
/// - a request expires by the store's own clock, and an expired request answers nothing; a store that
///   knows when an answer's request expires says so ([`Consumed::AnsweredUntil`]), and the gate checks
///   it again just before the body;
/// - an answer for the session is given as one only to a call of the gate that filed the request
///   ([`ApprovalCall::gate`]); to any other call it is an answer for that call alone;
/// - the token is a secret: a store that persists requests keeps only a hash of it.
///
/// [`MemoryStore`](crate::approval::two_step::MemoryStore) is the default; `PostgresStore` (feature
/// `postgres`) shares requests between processes.
pub trait ApprovalStore: Send + Sync + 'static {
    /// Uses the answer to exactly this call, if there is one; otherwise keeps a pending request for it
    /// (one per call: asking twice gives the same token, or, for a store that keeps only hashes of
    /// tokens, another token that answers the same request) and says why the call waits.
    fn consume<'a>(
        &'a self,
        call: &'a ApprovalCall,
    ) -> StoreFuture<'a, Result<Consumed, StoreError>>;

    /// Answers the pending request with this token. Returns the request's binding.
    fn answer<'a>(
        &'a self,
        token: &'a str,
        answer: Answer,
    ) -> StoreFuture<'a, Result<Binding, ApproveError>>;
}
