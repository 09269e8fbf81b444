//! Session grants: an approver's "yes, for the rest of this session", kept by the gate (and so shared by
//! its clones, and gone with it), bounded in number and in time.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::approval::{Grant, SessionGrant};
use toolgate_policy::Risk;

/// Grants kept at most; a grant past it is not made (the call it came with still runs once).
const MAX_GRANTS: usize = 1_000;

#[derive(Debug)]
struct Held {
    tool: &'static str,
    risk: Risk,
    /// The approval binding digest of the granted arguments, for an exact grant.
    arguments: Option<String>,
    by: String,
    expires: Instant,
    /// The caller it was given for, where a transport named one: it covers that caller's calls alone.
    caller: Option<Arc<str>>,
}

/// What a grant is bound to besides its tool: the binding digest of the granted arguments (for an
/// exact grant), and the caller a transport authenticated.
#[derive(Debug, Default)]
pub(crate) struct Bound {
    pub(crate) arguments: Option<String>,
    pub(crate) caller: Option<Arc<str>>,
}

#[derive(Debug, Default)]
pub(crate) struct Grants {
    held: Vec<Held>,
    /// How many times grants were revoked: an answer given before a revocation makes no grant after
    /// it.
    revocations: u64,
}

pub(crate) fn lock(grants: &Mutex<Grants>) -> MutexGuard<'_, Grants> {
    // Every update is one push or one retain: a panic elsewhere leaves the list consistent.
    grants.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Grants {
    pub(crate) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Who granted this call, if a live grant covers it, and whether the grant is of its exact
    /// arguments. `arguments` gives the call's binding digest
    /// (`None` where it has none: then only a grant of the whole tool covers it); it is asked only when
    /// an exact grant of the tool is live, since writing the arguments costs more than the rest.
    pub(crate) fn covering_with(
        &mut self,
        tool: &str,
        risk: Risk,
        caller: Option<&str>,
        arguments: impl FnOnce() -> Option<String>,
        now: Instant,
    ) -> Option<(String, bool)> {
        if self.held.is_empty() {
            return None;
        }
        self.held.retain(|g| now < g.expires);
        let mine = |g: &&Held| g.tool == tool && risk <= g.risk && g.caller.as_deref() == caller;
        if let Some(whole) = self
            .held
            .iter()
            .filter(mine)
            .find(|g| g.arguments.is_none())
        {
            return Some((whole.by.clone(), false));
        }
        if !self.held.iter().filter(mine).any(|g| g.arguments.is_some()) {
            return None;
        }
        let arguments = arguments();
        self.covering(tool, risk, caller, arguments.as_deref(), now)
            .map(|by| (by, true))
    }

    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn covering(
        &mut self,
        tool: &str,
        risk: Risk,
        caller: Option<&str>,
        arguments: Option<&str>,
        now: Instant,
    ) -> Option<String> {
        self.held.retain(|g| now < g.expires);
        self.held
            .iter()
            .find(|g| {
                g.tool == tool
                    && risk <= g.risk
                    && g.caller.as_deref() == caller
                    && g.arguments.as_deref().is_none_or(|a| Some(a) == arguments)
            })
            .map(|g| g.by.clone())
    }

    /// Whether [`Grants::grant`] would make this grant now.
    pub(crate) fn can_grant(
        &mut self,
        grant: &SessionGrant,
        has_arguments: bool,
        now: Instant,
    ) -> bool {
        self.held.retain(|g| now < g.expires);
        self.held.len() < MAX_GRANTS
            && (!grant.is_exact() || has_arguments)
            && now
                .checked_add(grant.ttl().min(SessionGrant::MAX_TTL))
                .is_some()
    }

    /// Makes a grant; `false` when it cannot be made (an exact grant of arguments that have no binding,
    /// or too many grants).
    pub(crate) fn grant(
        &mut self,
        tool: &'static str,
        risk: Risk,
        grant: SessionGrant,
        bound: Bound,
        by: &str,
        now: Instant,
    ) -> bool {
        let Bound { arguments, caller } = bound;
        self.held.retain(|g| now < g.expires);
        if self.held.len() >= MAX_GRANTS || (grant.is_exact() && arguments.is_none()) {
            return false;
        }
        let ttl = grant.ttl().min(SessionGrant::MAX_TTL);
        let Some(expires) = now.checked_add(ttl) else {
            return false;
        };
        self.held.push(Held {
            tool,
            risk,
            arguments: if grant.is_exact() { arguments } else { None },
            by: by.to_owned(),
            expires,
            caller,
        });
        true
    }

    pub(crate) fn live(&mut self, now: Instant) -> Vec<Grant> {
        self.held.retain(|g| now < g.expires);
        self.held
            .iter()
            .map(|g| Grant {
                tool: g.tool,
                risk: g.risk,
                exact_arguments: g.arguments.is_some(),
                by: g.by.clone(),
                expires_in: g.expires.saturating_duration_since(now),
            })
            .collect()
    }

    /// How many times grants were revoked so far.
    pub(crate) fn revocations(&self) -> u64 {
        self.revocations
    }

    pub(crate) fn revoke(&mut self, tool: Option<&str>) -> usize {
        self.revocations += 1;
        let before = self.held.len();
        self.held.retain(|g| tool.is_some_and(|t| t != g.tool));
        before - self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn a_grant_covers_its_tool_its_risk_and_below_until_it_expires() {
        let t0 = Instant::now();
        let mut grants = Grants::default();
        assert!(grants.grant(
            "a.x",
            Risk::LowWrite,
            SessionGrant::tool(MINUTE),
            Bound::default(),
            "ops",
            t0
        ));
        for risk in Risk::ALL {
            let covered = grants.covering("a.x", risk, None, None, t0).is_some();
            assert_eq!(covered, risk <= Risk::LowWrite, "{risk}");
        }
        assert_eq!(grants.covering("a.y", Risk::ReadOnly, None, None, t0), None);
        let just_before = t0 + MINUTE - Duration::from_nanos(1);
        assert_eq!(
            grants
                .covering("a.x", Risk::LowWrite, None, None, just_before)
                .as_deref(),
            Some("ops")
        );
        assert_eq!(
            grants.covering("a.x", Risk::LowWrite, None, None, t0 + MINUTE),
            None
        );
        assert!(
            grants.live(t0 + MINUTE).is_empty(),
            "an expired grant is forgotten"
        );
    }

    #[test]
    fn an_exact_grant_covers_only_its_arguments() {
        let t0 = Instant::now();
        let mut grants = Grants::default();
        let exact = SessionGrant::tool(MINUTE).exact_arguments();
        assert!(
            !grants.grant("a.x", Risk::HighWrite, exact, Bound::default(), "ops", t0),
            "nothing to bind to"
        );
        assert!(grants.grant(
            "a.x",
            Risk::HighWrite,
            exact,
            Bound {
                arguments: Some("d1".into()),
                caller: None
            },
            "ops",
            t0
        ));
        assert!(
            grants
                .covering("a.x", Risk::HighWrite, None, Some("d1"), t0)
                .is_some()
        );
        assert!(
            grants
                .covering("a.x", Risk::HighWrite, None, Some("d2"), t0)
                .is_none()
        );
        assert!(
            grants
                .covering("a.x", Risk::HighWrite, None, None, t0)
                .is_none()
        );
    }

    #[test]
    fn a_grant_given_for_one_caller_covers_no_other() {
        let t0 = Instant::now();
        let mut grants = Grants::default();
        let whole = SessionGrant::tool(MINUTE);
        assert!(grants.grant(
            "a.x",
            Risk::HighWrite,
            whole,
            Bound {
                arguments: None,
                caller: Some("w:alice".into())
            },
            "ops",
            t0
        ));
        assert!(
            grants
                .covering("a.x", Risk::HighWrite, Some("w:alice"), None, t0)
                .is_some()
        );
        for other in [None, Some("w:bob"), Some("w:alice ")] {
            assert!(
                grants
                    .covering("a.x", Risk::ReadOnly, other, None, t0)
                    .is_none(),
                "{other:?}"
            );
            assert!(
                grants
                    .covering_with("a.x", Risk::ReadOnly, other, || Some("d".into()), t0)
                    .is_none(),
                "{other:?}"
            );
        }
    }

    #[test]
    fn revoking_and_bounds() {
        let t0 = Instant::now();
        let mut grants = Grants::default();
        let grant = SessionGrant::tool(Duration::MAX);
        assert_eq!(grant.ttl(), SessionGrant::MAX_TTL, "cut to a day");
        for i in 0..MAX_GRANTS {
            let tool = if i % 2 == 0 { "a.x" } else { "a.y" };
            assert!(grants.grant(tool, Risk::HighWrite, grant, Bound::default(), "ops", t0));
        }
        assert!(
            !grants.grant("a.z", Risk::HighWrite, grant, Bound::default(), "ops", t0),
            "bounded"
        );
        assert_eq!(grants.revoke(Some("a.x")), MAX_GRANTS / 2);
        assert!(
            grants
                .covering("a.x", Risk::ReadOnly, None, None, t0)
                .is_none()
        );
        assert!(
            grants
                .covering("a.y", Risk::ReadOnly, None, None, t0)
                .is_some()
        );
        assert_eq!(grants.revoke(None), MAX_GRANTS / 2);
        assert!(grants.live(t0).is_empty());
    }
}
