//! What the operator channel is handed of a call that waits for an approval.

use crate::approval::Taint;
use toolgate_policy::{Mode, Risk};

/// A call refused out of band because it waits for an operator's approval, as
/// [`ToolgateServer::on_pending`](super::ToolgateServer::on_pending) hands it over.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PendingApproval {
    /// The tool's id.
    pub tool: &'static str,
    /// The risk the call is judged at.
    pub risk: Risk,
    /// The risk the tool declares: lower than `risk` where the call's arguments raised it.
    pub declared_risk: Risk,
    /// The gate's mode when it refused.
    pub mode: Option<Mode>,
    /// The refusal's code: `APPROVAL_PENDING`.
    pub code: &'static str,
    /// The arguments as the audit log writes them (redacted ones as `"[REDACTED]"`). The agent wrote
    /// them: a channel that shows them to a person makes invisible and bidi characters visible
    /// ([`terminal::escaped`](crate::terminal::escaped)), as the in-band form does.
    pub arguments: String,
    /// The token that approves this exact call once ([`Gate::approve`](crate::Gate::approve),
    /// [`Gate::answer`](crate::Gate::answer)). A secret for the operator: never send it to the agent.
    pub token: String,
    /// The request's id in the approval store, where the store names its requests (`toolgate
    /// approvals approve ID` with `PostgresStore`); `None` with the in-memory store
    /// ([`Denied::approval_request_id`](crate::Denied::approval_request_id)).
    pub request_id: Option<String>,
    /// Who the agent acts for, as the caller's gate names it
    /// ([`GateBuilder::principal`](crate::GateBuilder::principal)), and the principal the transport
    /// authenticated where it is another name: `writer (writer:alice)`.
    pub principal: Option<String>,
    /// What tainted the caller's session, if anything has ([`Gate::taint`](crate::Gate::taint)): the
    /// agent has read untrusted output, and the arguments may come from it. Show it to the operator.
    pub taint: Option<Taint>,
    /// What the call runs on, for a method: the label of the server's
    /// [`handler`](super::ToolgateServer::handler) or of its
    /// [`instance`](super::ToolgateServer::instance) (the name given to
    /// [`handler_named`](super::ToolgateServer::handler_named) or
    /// [`Instances::with_named`](crate::Instances::with_named), else its type and a random id), to
    /// which the approval is bound. Show it to the operator.
    pub instance: Option<String>,
    /// Whether the tool is `irreversible`: approving the call takes typing its `target` back
    /// ([`Gate::approve_typed`](crate::Gate::approve_typed)).
    pub irreversible: bool,
    /// The call's target, for a tool that names one; the agent wrote it: show it escaped.
    pub target: Option<String>,
    /// What the tool's `evidence` probe read of the target when the request was filed, as canonical
    /// JSON: the state the approval is for.
    pub evidence: Option<String>,
    /// How the call would be undone, for a tool that declares `rollback`.
    pub rollback: Option<crate::approval::effects::Rollback>,
}
