//! Two-step approvals: a refused call leaves a request token; an operator approves the token out of band;
//! the same call, with the same arguments, then runs once.
//!
//! An approval is bound to the tool, the digest of the arguments, the call's effective risk and the
//! policy version; it is single-use and expires. Times come from a monotonic clock, so a wall clock set
//! back cannot revive an expired approval.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::policy::DenialCode;
use crate::policy::POLICY_VERSION;
use crate::policy::Risk;

/// How long an approval request stays valid, unless the gate is built with another duration.
pub const DEFAULT_APPROVAL_TTL: Duration = Duration::from_secs(10 * 60);

/// Pending and granted requests kept at most; past it, new requests are refused without a token.
const MAX_REQUESTS: usize = 10_000;

/// What an approval is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binding {
    pub(crate) tool: &'static str,
    /// The digest of the arguments with the real values of redacted ones: never written anywhere.
    pub(crate) arguments_digest: String,
    /// The digest the audit log shows for these arguments (redacted ones as `"[REDACTED]"`), which
    /// `approval_granted` records carry instead.
    pub(crate) shown_digest: String,
    pub(crate) risk: Risk,
    pub(crate) policy_version: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Approved,
    Used,
}

#[derive(Debug)]
struct Request {
    binding: Binding,
    state: State,
    expires: Instant,
}

/// What the store says of a call that needs an approval.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// An approval for exactly this call: it is now used.
    Approved,
    /// Refused with this code; where there is a token, an operator can approve it for this call.
    Refused(DenialCode, Option<Arc<str>>),
}

#[derive(Debug)]
pub(crate) struct ApprovalStore {
    ttl: Duration,
    requests: HashMap<Arc<str>, Request>,
}

impl ApprovalStore {
    pub(crate) fn new(ttl: Duration) -> ApprovalStore {
        ApprovalStore {
            ttl,
            requests: HashMap::new(),
        }
    }

    /// Decides a call against the approvals given so far, asking for one where there is none.
    pub(crate) fn lookup(&mut self, binding: Binding, now: Instant) -> Lookup {
        let mut expired = false;
        let mut used = false;
        let mut other_arguments = false;
        let mut approved_token = None;
        for (token, request) in &self.requests {
            let same_call = request.binding == binding;
            if request.binding.tool != binding.tool {
                continue;
            }
            match (same_call, request.state, now >= request.expires) {
                (true, State::Approved, false) => approved_token = Some(token.clone()),
                (true, State::Approved, true) => expired = true,
                (true, State::Used, _) => used = true,
                (false, State::Approved, false) => other_arguments = true,
                _ => {}
            }
        }
        if let Some(token) = approved_token {
            if let Some(request) = self.requests.get_mut(&token) {
                request.state = State::Used;
            }
            return Lookup::Approved;
        }
        let code = if expired {
            DenialCode::ApprovalExpired
        } else if used {
            DenialCode::ApprovalReused
        } else if other_arguments {
            DenialCode::ApprovalMismatch
        } else {
            DenialCode::ApprovalRequired
        };
        self.prune(now);
        let token = self.ask(binding, now);
        Lookup::Refused(code, token)
    }

    /// Leaves a pending request for this call (one per call: asking twice gives the same token).
    fn ask(&mut self, binding: Binding, now: Instant) -> Option<Arc<str>> {
        let pending = self
            .requests
            .iter()
            .find(|(_, r)| r.state == State::Pending && r.binding == binding && now < r.expires);
        if let Some((token, _)) = pending {
            return Some(token.clone());
        }
        if self.requests.len() >= MAX_REQUESTS {
            return None;
        }
        let token: Arc<str> = new_token()?.into();
        self.requests.insert(
            token.clone(),
            Request {
                binding,
                state: State::Pending,
                expires: now + self.ttl,
            },
        );
        Some(token)
    }

    /// Approves a pending request; it then lets its call run once until it expires.
    pub(crate) fn approve(&mut self, token: &str, now: Instant) -> Result<Binding, ApproveError> {
        let request = self
            .requests
            .get_mut(token)
            .ok_or(ApproveError::UnknownToken)?;
        if now >= request.expires {
            return Err(ApproveError::Expired);
        }
        match request.state {
            State::Pending => {
                request.state = State::Approved;
                Ok(request.binding.clone())
            }
            State::Approved => Err(ApproveError::AlreadyApproved),
            State::Used => Err(ApproveError::AlreadyUsed),
        }
    }

    /// Forgets requests well past their expiry; a used or expired one is kept one more period so that a
    /// retry is told it was reused or expired, not asked again at once.
    fn prune(&mut self, now: Instant) {
        let ttl = self.ttl;
        self.requests.retain(|_, r| now < r.expires + ttl);
    }
}

pub(crate) fn binding(
    tool: &'static str,
    arguments_digest: String,
    shown_digest: String,
    risk: Risk,
) -> Binding {
    Binding {
        tool,
        arguments_digest,
        shown_digest,
        risk,
        policy_version: POLICY_VERSION,
    }
}

/// 128 random bits from the operating system, as hex; `None` if it has none to give (then no token is
/// issued, and the call stays refused).
fn new_token() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// [`Gate::approve`](crate::Gate::approve) could not approve a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApproveError {
    /// No request has this token (never issued, or forgotten long after it expired).
    UnknownToken,
    /// The request expired before it was approved.
    Expired,
    /// The request was approved already.
    AlreadyApproved,
    /// The approval was used already: it ran its call once.
    AlreadyUsed,
    /// The gate does not take two-step approvals.
    NotEnabled,
}

impl fmt::Display for ApproveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ApproveError::UnknownToken => "no approval request has this token",
            ApproveError::Expired => "the approval request expired",
            ApproveError::AlreadyApproved => "the request is approved already",
            ApproveError::AlreadyUsed => "the approval was used already",
            ApproveError::NotEnabled => "this gate does not take two-step approvals",
        })
    }
}

impl std::error::Error for ApproveError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(digest: &str) -> Binding {
        binding(
            "users.delete",
            digest.to_owned(),
            format!("shown {digest}"),
            Risk::HighWrite,
        )
    }

    fn token(lookup: Lookup) -> Arc<str> {
        match lookup {
            Lookup::Refused(DenialCode::ApprovalRequired, Some(token)) => token,
            other => panic!("expected a new request, got {other:?}"),
        }
    }

    #[test]
    fn approve_then_run_once() {
        let t0 = Instant::now();
        let mut store = ApprovalStore::new(Duration::from_secs(60));
        let token = token(store.lookup(call("a"), t0));
        assert_eq!(token.len(), 32);
        // Asking again before approval gives the same pending token.
        assert_eq!(
            store.lookup(call("a"), t0),
            Lookup::Refused(DenialCode::ApprovalRequired, Some(token.clone()))
        );
        assert_eq!(store.approve(&token, t0), Ok(call("a")));
        assert_eq!(
            store.approve(&token, t0),
            Err(ApproveError::AlreadyApproved)
        );
        assert!(matches!(
            store.lookup(call("b"), t0),
            Lookup::Refused(DenialCode::ApprovalMismatch, Some(_))
        ));
        assert_eq!(store.lookup(call("a"), t0), Lookup::Approved);
        assert!(matches!(
            store.lookup(call("a"), t0),
            Lookup::Refused(DenialCode::ApprovalReused, Some(_))
        ));
        assert_eq!(store.approve(&token, t0), Err(ApproveError::AlreadyUsed));
        assert_eq!(store.approve("nope", t0), Err(ApproveError::UnknownToken));
    }

    #[test]
    fn bound_to_risk_and_expiry() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(60);
        let mut store = ApprovalStore::new(ttl);
        let token = token(store.lookup(call("a"), t0));
        store.approve(&token, t0).unwrap();
        let mut higher = call("a");
        higher.risk = Risk::LowWrite;
        assert!(matches!(
            store.lookup(higher, t0),
            Lookup::Refused(DenialCode::ApprovalMismatch, _)
        ));
        assert!(matches!(
            store.lookup(call("a"), t0 + ttl),
            Lookup::Refused(DenialCode::ApprovalExpired, Some(_))
        ));
        let late = token_of_new(&mut store, t0);
        assert_eq!(store.approve(&late, t0 + ttl), Err(ApproveError::Expired));
    }

    fn token_of_new(store: &mut ApprovalStore, now: Instant) -> Arc<str> {
        match store.lookup(call("fresh"), now) {
            Lookup::Refused(DenialCode::ApprovalMismatch, Some(token)) => token,
            other => panic!("expected a mismatch with a new token, got {other:?}"),
        }
    }

    #[test]
    fn tokens_are_distinct() {
        let t0 = Instant::now();
        let mut store = ApprovalStore::new(Duration::from_secs(60));
        let a = token(store.lookup(call("a"), t0));
        let b = token(store.lookup(call("b"), t0));
        assert_ne!(a, b);
    }

    // The boundaries, to the instant: a request lives until `expires`, excluded, and is forgotten one
    // time-to-live later, excluded too.
    #[test]
    fn a_pending_request_ends_at_its_expiry_exactly() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(60);
        let mut store = ApprovalStore::new(ttl);
        let first = token(store.lookup(call("a"), t0));
        let just_before = t0 + ttl - Duration::from_nanos(1);
        assert_eq!(token(store.lookup(call("a"), just_before)), first);
        let at_expiry = token(store.lookup(call("a"), t0 + ttl));
        assert_ne!(
            at_expiry, first,
            "an expired request is not handed out again"
        );
        assert_eq!(store.approve(&first, t0 + ttl), Err(ApproveError::Expired));
    }

    #[test]
    fn a_request_is_forgotten_one_time_to_live_after_its_expiry_exactly() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(60);
        let mut store = ApprovalStore::new(ttl);
        let first = token(store.lookup(call("a"), t0));
        store.prune(t0 + ttl + ttl - Duration::from_nanos(1));
        assert_eq!(store.approve(&first, t0), Ok(call("a")), "still known");
        store.prune(t0 + ttl + ttl);
        assert_eq!(store.approve(&first, t0), Err(ApproveError::UnknownToken));
    }
}
