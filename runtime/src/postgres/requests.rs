//! What the approval store keeps of a request, as an operator reads it, and the store's settings.

use std::time::Duration;

use crate::approval::store::{Answer, Binding};
use toolgate_policy::Mode;

#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) timeout: Duration,
    pub(super) ttl: Duration,
    pub(super) max_pending: usize,
    pub(super) schema: String,
    pub(super) migrate: bool,
}

/// A request as the store keeps it, for an operator.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StoredRequest {
    /// The request's id, for [`PostgresStore::answer_id`](super::PostgresStore::answer_id) and `toolgate approvals`.
    pub id: i64,
    /// What an answer is bound to.
    pub binding: Binding,
    /// The agent label of the gate that asked.
    pub agent: Option<String>,
    /// The gate's mode when it asked.
    pub mode: Mode,
    /// The tool's manifest, as JSON.
    pub manifest: Option<String>,
    /// The arguments as the audit log writes them (redacted ones as `"[REDACTED]"`).
    pub arguments: Option<String>,
    /// When it was made, by the database's clock, as `YYYY-MM-DDTHH:MM:SSZ`.
    pub created_at: String,
    /// How long ago it was made.
    pub age: Duration,
    /// How long it has left (zero once expired).
    pub expires_in: Duration,
    /// Whether it has expired: an expired request answers no call.
    pub expired: bool,
    /// Pending, answered, or answered and used.
    pub state: RequestState,
    /// Who the agent acted for (the gate's principal), if the gate named one.
    pub principal: Option<String>,
    /// What tainted the asking gate's session, if anything: the id of the tool whose output is
    /// untrusted, and when it ran (RFC 3339, as audit records write time).
    pub tainted: Option<(String, String)>,
    /// The call's target (`#[tool(target = ..)]`), as it is typed back to confirm; also in the
    /// binding.
    pub target: Option<String>,
    /// Whether the tool is `irreversible`: approving the request takes its target typed back exactly
    /// ([`Answer::Approve::confirmation`](crate::approval::store::Answer::Approve)), and it is never
    /// granted for the session.
    pub irreversible: bool,
    /// What the tool's `evidence` probe read of the target when the call was made, as canonical JSON:
    /// the state the approval is for (its digest is in the binding).
    pub evidence: Option<String>,
    /// How the call would be undone, as the JSON of a [`Rollback`](crate::Rollback).
    pub rollback: Option<String>,
}

impl StoredRequest {
    /// The rollback plan, read back from [`StoredRequest::rollback`]: `None` where there is none, or
    /// where what the table holds is not a plan this version reads.
    pub fn rollback_plan(&self) -> Option<crate::approval::effects::Rollback> {
        serde_json::from_str(self.rollback.as_deref()?).ok()
    }
}

/// Where a request stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestState {
    /// Waiting for an operator.
    Pending,
    /// Answered; the answer waits for its call.
    Answered(Answer),
    /// Answered, and the answer decided its call.
    Used(Answer),
}
