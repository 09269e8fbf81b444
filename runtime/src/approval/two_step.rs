//! Two-step approvals in memory: a refused call leaves a request token; an operator approves the token
//! out of band; the same call, with the same arguments, then runs once.
//!
//! An approval is bound to the tool, the digest of the arguments, the call's effective risk and the
//! policy version; it is single-use and expires. Times come from a monotonic clock, so a wall clock set
//! back cannot revive an expired approval. The store lives in one process: to answer from another, use a
//! shared store (feature `postgres`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::approval::store::{
    Answer, ApprovalCall, ApprovalStore, ApproveError, Binding, Consumed, StoreError, StoreFuture,
    confirmed,
};
use toolgate_policy::DenialCode;

/// How long an approval request stays valid, unless the gate is built with another duration.
pub const DEFAULT_APPROVAL_TTL: Duration = Duration::from_secs(10 * 60);

/// The longest a request may live: a day. A longer time to live is refused when the gate is built.
pub const MAX_APPROVAL_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Pending and answered requests kept at most per agent; past it, new requests are refused without a
/// token.
const MAX_REQUESTS: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Pending,
    Answered(Answer),
    Used,
}

#[derive(Debug)]
struct Request {
    binding: Binding,
    agent: Option<String>,
    irreversible: bool,
    state: State,
    expires: Instant,
    /// The gate that filed it: the only one an answer for the session grants to.
    gate: Option<String>,
}

/// The default [`ApprovalStore`]: requests in this process's memory, gone when it exits.
#[derive(Debug)]
pub struct MemoryStore {
    ttl: Duration,
    requests: Mutex<HashMap<Arc<str>, Request>>,
}

impl MemoryStore {
    /// A store whose requests expire `ttl` after they are made; `None` when `ttl` is longer than
    /// [`MAX_APPROVAL_TTL`] or zero.
    pub fn new(ttl: Duration) -> Option<MemoryStore> {
        (!ttl.is_zero() && ttl <= MAX_APPROVAL_TTL).then(|| MemoryStore {
            ttl,
            requests: Mutex::new(HashMap::new()),
        })
    }

    /// How long a request lives.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, Request>> {
        // Every update leaves the map consistent, so a panic elsewhere does not poison the data.
        self.requests.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Decides a call against the answers given so far, asking for one where there is none.
    pub(crate) fn lookup(&self, call: &ApprovalCall, now: Instant) -> Consumed {
        let mut requests = self.lock();
        let binding = &call.binding;
        let mut expired = false;
        let mut used = false;
        let mut other_arguments = false;
        let mut other_state = Vec::new();
        let mut answered = None;
        for (token, request) in requests.iter() {
            // The arguments' digest first: it tells most requests apart with one comparison.
            let same_call = request.binding.arguments_digest == binding.arguments_digest
                && request.binding == *binding;
            match (same_call, &request.state, now >= request.expires) {
                (true, State::Answered(_), false) => answered = Some(token.clone()),
                (true, State::Answered(_), true) => expired = true,
                (true, State::Used, _) => used = true,
                (false, State::Answered(Answer::Approve { .. }), false)
                    if request.binding.same_but_evidence(binding) =>
                {
                    other_state.push(token.clone());
                }
                (false, State::Answered(Answer::Approve { .. }), false)
                    if request.binding.tool == binding.tool =>
                {
                    other_arguments = true;
                }
                _ => {}
            }
        }
        if let Some(token) = answered
            && let Some(request) = requests.get_mut(&token)
            && let State::Answered(answer) = std::mem::replace(&mut request.state, State::Used)
        {
            let filer = request.gate.is_some() && request.gate == call.gate;
            return Consumed::AnsweredUntil(for_the_filer(answer, filer), request.expires);
        }
        // An approval of the target as it was is for a world that is gone: it is spent, so that the
        // target coming back to that state later does not bring it back.
        for token in &other_state {
            if let Some(request) = requests.get_mut(token) {
                request.state = State::Used;
            }
        }
        let code = if expired {
            DenialCode::ApprovalExpired
        } else if used {
            DenialCode::ApprovalReused
        } else if !other_state.is_empty() {
            DenialCode::EvidenceChanged
        } else if other_arguments {
            DenialCode::ApprovalMismatch
        } else {
            DenialCode::ApprovalRequired
        };
        let ttl = self.ttl;
        // Requests well past their expiry are forgotten; a used or expired one is kept one more period
        // so that a retry is told it was reused or expired, not asked again at once.
        requests.retain(|_, r| now < r.expires + ttl);
        let token = ask(&mut requests, call, now + ttl, now);
        Consumed::Pending {
            code: pending_code(code, token.is_some()),
            token,
        }
    }

    /// Answers a pending request; an approval then lets its call run once until it expires.
    pub(crate) fn answer_at(
        &self,
        token: &str,
        answer: Answer,
        now: Instant,
    ) -> Result<Binding, ApproveError> {
        let mut requests = self.lock();
        let request = requests.get_mut(token).ok_or(ApproveError::UnknownToken)?;
        if now >= request.expires {
            return Err(ApproveError::Expired);
        }
        match request.state {
            State::Pending => {
                confirmed(
                    request.irreversible,
                    request.binding.target.as_deref(),
                    &answer,
                )?;
                let binding = request.binding.clone();
                let stops = matches!(answer, Answer::Reject { stop: true, .. });
                request.state = State::Answered(answer.clone());
                if stops {
                    // A stop reaches the agent whichever of its requests it makes again: every other
                    // request of its agent and principal not yet used reads the same answer.
                    for other in requests.values_mut() {
                        if other.binding.agent == binding.agent
                            && other.binding.principal == binding.principal
                            && now < other.expires
                            && !matches!(other.state, State::Used)
                        {
                            other.state = State::Answered(answer.clone());
                        }
                    }
                }
                Ok(binding)
            }
            State::Answered(_) => Err(ApproveError::AlreadyApproved),
            State::Used => Err(ApproveError::AlreadyUsed),
        }
    }

    #[cfg(test)]
    fn prune(&self, now: Instant) {
        let ttl = self.ttl;
        self.lock().retain(|_, r| now < r.expires + ttl);
    }
}

/// `answer` as a call gets it: an answer for the session stays one only for the gate that filed the
/// request (`filer`); any other gate runs its call once.
pub(crate) fn for_the_filer(answer: Answer, filer: bool) -> Answer {
    match answer {
        Answer::Approve {
            by,
            for_session,
            confirmation,
        } => Answer::Approve {
            by,
            for_session: for_session && filer,
            confirmation,
        },
        reject => reject,
    }
}

/// What a store answers a call with no usable answer: a request filed for it (`filed`) is pending,
/// whatever another call's approval of the tool says; an expired or used answer of its own is told.
pub(crate) fn pending_code(code: DenialCode, filed: bool) -> DenialCode {
    match (code, filed) {
        (DenialCode::ApprovalRequired | DenialCode::ApprovalMismatch, true) => {
            DenialCode::ApprovalPending
        }
        _ => code,
    }
}

/// Leaves a pending request for this call (one per call: asking twice gives the same token), unless the
/// agent holds as many requests as it may.
fn ask(
    requests: &mut HashMap<Arc<str>, Request>,
    call: &ApprovalCall,
    expires: Instant,
    now: Instant,
) -> Option<String> {
    let pending = requests.iter().find(|(_, r)| {
        r.state == State::Pending
            && r.binding == call.binding
            && r.agent == call.agent
            && now < r.expires
    });
    if let Some((token, _)) = pending {
        return Some(token.to_string());
    }
    let held = requests.values().filter(|r| r.agent == call.agent).count();
    if held >= MAX_REQUESTS {
        return None;
    }
    let token = new_token()?;
    requests.insert(
        Arc::from(token.as_str()),
        Request {
            binding: call.binding.clone(),
            agent: call.agent.clone(),
            irreversible: call.irreversible,
            state: State::Pending,
            expires,
            gate: call.gate.clone(),
        },
    );
    Some(token)
}

impl ApprovalStore for MemoryStore {
    fn consume<'a>(
        &'a self,
        call: &'a ApprovalCall,
    ) -> StoreFuture<'a, Result<Consumed, StoreError>> {
        Box::pin(std::future::ready(Ok(self.lookup(call, Instant::now()))))
    }

    fn answer<'a>(
        &'a self,
        token: &'a str,
        answer: Answer,
    ) -> StoreFuture<'a, Result<Binding, ApproveError>> {
        Box::pin(std::future::ready(self.answer_at(
            token,
            answer,
            Instant::now(),
        )))
    }
}

/// 128 random bits from the operating system, as hex; `None` if it has none to give (then no token is
/// issued, and the call stays refused).
pub(crate) fn new_token() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_policy::{Mode, Risk};

    fn call(digest: &str) -> ApprovalCall {
        ApprovalCall {
            binding: Binding::new(
                "users.delete",
                digest,
                format!("shown {digest}"),
                Risk::HighWrite,
            ),
            agent: None,
            principal: None,
            taint: None,
            mode: Mode::FullAuto,
            manifest: String::new(),
            arguments: None,
            irreversible: false,
            evidence: None,
            rollback: None,
            gate: None,
        }
    }

    /// What a call of a request made at `t0` in a store of 60 s gets for `answer`.
    fn answered(answer: Answer, t0: Instant) -> Consumed {
        Consumed::AnsweredUntil(answer, t0 + Duration::from_secs(60))
    }

    fn approve() -> Answer {
        Answer::Approve {
            by: "ops".into(),
            for_session: false,
            confirmation: None,
        }
    }

    /// An irreversible call on `target`, whose target showed `state`.
    fn on(target: &str, state: &str) -> ApprovalCall {
        let mut call = call(target);
        call.irreversible = true;
        call.binding = call
            .binding
            .on_target(Some(target.to_owned()), Some(state.to_owned()));
        call
    }

    #[test]
    fn an_irreversible_call_is_approved_only_with_its_target_typed_back() {
        let t0 = Instant::now();
        let store = store(Duration::from_secs(60));
        let token = token(store.lookup(&on("i-1", "running"), t0));
        let typed = |text: Option<&str>| Answer::Approve {
            by: "ops".into(),
            for_session: false,
            confirmation: text.map(str::to_owned),
        };
        for wrong in [None, Some(""), Some("i-2"), Some("i-1 "), Some("I-1")] {
            assert_eq!(
                store.answer_at(&token, typed(wrong), t0),
                Err(ApproveError::ConfirmationMismatch),
                "{wrong:?}"
            );
        }
        // A rejection needs nothing typed; a mistyped approval left the request pending.
        assert!(pending(DenialCode::ApprovalPending)(
            &store.lookup(&on("i-1", "running"), t0)
        ));
        assert!(store.answer_at(&token, typed(Some("i-1")), t0).is_ok());
        // The target's state changed since the approver saw it: the answer is for another world, and
        // a new request shows the new state.
        assert!(pending(DenialCode::EvidenceChanged)(
            &store.lookup(&on("i-1", "stopped"), t0)
        ));
        // ... and the approval is spent: the target back in the state approved does not revive it.
        assert!(pending(DenialCode::ApprovalReused)(
            &store.lookup(&on("i-1", "running"), t0)
        ));
    }

    fn store(ttl: Duration) -> MemoryStore {
        MemoryStore::new(ttl).unwrap()
    }

    fn token(consumed: Consumed) -> String {
        match consumed {
            Consumed::Pending {
                code: DenialCode::ApprovalPending,
                token: Some(token),
            } => token,
            other => panic!("expected a new request, got {other:?}"),
        }
    }

    fn pending(code: DenialCode) -> impl Fn(&Consumed) -> bool {
        move |consumed| matches!(consumed, Consumed::Pending { code: c, token: Some(_) } if *c == code)
    }

    #[test]
    fn approve_then_run_once() {
        let t0 = Instant::now();
        let store = store(Duration::from_secs(60));
        let token = token(store.lookup(&call("a"), t0));
        assert_eq!(token.len(), 32);
        // Asking again before approval gives the same pending token.
        assert_eq!(
            store.lookup(&call("a"), t0),
            Consumed::Pending {
                code: DenialCode::ApprovalPending,
                token: Some(token.clone())
            }
        );
        assert_eq!(
            store.answer_at(&token, approve(), t0),
            Ok(call("a").binding)
        );
        assert_eq!(
            store.answer_at(&token, approve(), t0),
            Err(ApproveError::AlreadyApproved)
        );
        // Another call files its own request, whatever the approval of this one.
        assert!(pending(DenialCode::ApprovalPending)(
            &store.lookup(&call("b"), t0)
        ));
        assert_eq!(store.lookup(&call("a"), t0), answered(approve(), t0));
        assert!(pending(DenialCode::ApprovalReused)(
            &store.lookup(&call("a"), t0)
        ));
        assert_eq!(
            store.answer_at(&token, approve(), t0),
            Err(ApproveError::AlreadyUsed)
        );
        assert_eq!(
            store.answer_at("nope", approve(), t0),
            Err(ApproveError::UnknownToken)
        );
    }

    #[test]
    fn an_answer_for_the_session_is_one_only_for_the_gate_that_filed_the_request() {
        let t0 = Instant::now();
        let store = store(Duration::from_secs(60));
        let by = |gate: Option<&str>, digest: &str| {
            let mut call = call(digest);
            call.gate = gate.map(str::to_owned);
            call
        };
        let for_session = |yes| Answer::Approve {
            by: "ops".into(),
            for_session: yes,
            confirmation: None,
        };
        // Filed by gate `a`, used by `a`; filed by `a`, used by `b`; filed by no gate, used by none.
        for (filer, user, digest, granted) in [
            (Some("a"), Some("a"), "1", true),
            (Some("a"), Some("b"), "2", false),
            (Some("a"), None, "3", false),
            (None, None, "4", false),
        ] {
            let token = token(store.lookup(&by(filer, digest), t0));
            store.answer_at(&token, for_session(true), t0).unwrap();
            assert_eq!(
                store.lookup(&by(user, digest), t0),
                answered(for_session(granted), t0),
                "filed by {filer:?}, used by {user:?}"
            );
        }
        // Another gate asking again for a pending request does not make it its own.
        let asked = token(store.lookup(&by(Some("a"), "5"), t0));
        assert_eq!(asked, token(store.lookup(&by(Some("b"), "5"), t0)));
        store.answer_at(&asked, for_session(true), t0).unwrap();
        assert_eq!(
            store.lookup(&by(Some("b"), "5"), t0),
            answered(for_session(false), t0)
        );
    }

    #[test]
    fn a_rejection_is_read_once_by_its_call() {
        let t0 = Instant::now();
        let store = store(Duration::from_secs(60));
        let token = token(store.lookup(&call("a"), t0));
        let reject = Answer::Reject {
            by: "ops".into(),
            reason: "not today".into(),
            stop: false,
        };
        store.answer_at(&token, reject.clone(), t0).unwrap();
        // A rejection of one call says nothing of another: no mismatch.
        assert!(pending(DenialCode::ApprovalPending)(
            &store.lookup(&call("b"), t0)
        ));
        assert_eq!(store.lookup(&call("a"), t0), answered(reject, t0));
        assert!(pending(DenialCode::ApprovalReused)(
            &store.lookup(&call("a"), t0)
        ));
    }

    #[test]
    fn a_stop_reaches_every_request_of_its_agent_not_yet_used() {
        let t0 = Instant::now();
        let store = store(Duration::from_secs(60));
        let of = |digest: &str, agent: &str| {
            let mut call = call(digest);
            call.binding.agent = Some(agent.to_owned());
            call
        };
        let stopped = token(store.lookup(&of("a", "desk"), t0));
        let waiting = token(store.lookup(&of("b", "desk"), t0));
        let approved = token(store.lookup(&of("c", "desk"), t0));
        let other = token(store.lookup(&of("d", "billing"), t0));
        let used = token(store.lookup(&of("e", "desk"), t0));
        store.answer_at(&approved, approve(), t0).unwrap();
        store.answer_at(&used, approve(), t0).unwrap();
        assert_eq!(store.lookup(&of("e", "desk"), t0), answered(approve(), t0));
        let stop = Answer::Reject {
            by: "ops".into(),
            reason: "enough".into(),
            stop: true,
        };
        store.answer_at(&stopped, stop.clone(), t0).unwrap();
        // Whichever call of the agent comes back, pending or approved, it reads the stop.
        for digest in ["a", "b", "c"] {
            assert_eq!(
                store.lookup(&of(digest, "desk"), t0),
                answered(stop.clone(), t0),
                "{digest}"
            );
        }
        assert_eq!(
            store.answer_at(&waiting, approve(), t0),
            Err(ApproveError::AlreadyUsed)
        );
        // Another agent's request waits; a used one stays used.
        assert_eq!(
            store.answer_at(&other, approve(), t0),
            Ok(of("d", "billing").binding)
        );
        assert!(pending(DenialCode::ApprovalReused)(
            &store.lookup(&of("e", "desk"), t0)
        ));
    }

    #[test]
    fn bound_to_risk_and_expiry() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(60);
        let store = store(ttl);
        let token = token(store.lookup(&call("a"), t0));
        store.answer_at(&token, approve(), t0).unwrap();
        let mut higher = call("a");
        higher.binding.risk = Risk::LowWrite;
        assert!(pending(DenialCode::ApprovalPending)(
            &store.lookup(&higher, t0)
        ));
        assert!(pending(DenialCode::ApprovalExpired)(
            &store.lookup(&call("a"), t0 + ttl)
        ));
        let late = match store.lookup(&call("fresh"), t0) {
            Consumed::Pending {
                code: DenialCode::ApprovalPending,
                token: Some(token),
            } => token,
            other => panic!("expected a new pending request, got {other:?}"),
        };
        assert_eq!(
            store.answer_at(&late, approve(), t0 + ttl),
            Err(ApproveError::Expired)
        );
    }

    #[test]
    fn tokens_are_distinct_and_requests_bounded_per_agent() {
        let t0 = Instant::now();
        let store = store(Duration::from_secs(60));
        let a = token(store.lookup(&call("a"), t0));
        let b = token(store.lookup(&call("b"), t0));
        assert_ne!(a, b);
        let mut other_agent = call("a");
        other_agent.agent = Some("other".into());
        assert_ne!(
            token(store.lookup(&other_agent, t0)),
            a,
            "one request per agent and call"
        );
        for i in 0..MAX_REQUESTS {
            let _ = store.lookup(&call(&format!("n{i}")), t0);
        }
        assert!(matches!(
            store.lookup(&call("one too many"), t0),
            Consumed::Pending { token: None, .. }
        ));
        let mut third = call("c");
        third.agent = Some("third".into());
        assert!(
            matches!(
                store.lookup(&third, t0),
                Consumed::Pending { token: Some(_), .. }
            ),
            "another agent still asks"
        );
    }

    #[test]
    fn a_time_to_live_must_fit() {
        assert!(MemoryStore::new(Duration::ZERO).is_none());
        assert!(MemoryStore::new(Duration::MAX).is_none());
        assert!(MemoryStore::new(MAX_APPROVAL_TTL + Duration::from_nanos(1)).is_none());
        assert_eq!(
            MemoryStore::new(MAX_APPROVAL_TTL).unwrap().ttl(),
            MAX_APPROVAL_TTL
        );
    }

    // The boundaries, to the instant: a request lives until `expires`, excluded, and is forgotten one
    // time-to-live later, excluded too.
    #[test]
    fn a_pending_request_ends_at_its_expiry_exactly() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(60);
        let store = store(ttl);
        let first = token(store.lookup(&call("a"), t0));
        let just_before = t0 + ttl - Duration::from_nanos(1);
        assert_eq!(token(store.lookup(&call("a"), just_before)), first);
        let at_expiry = token(store.lookup(&call("a"), t0 + ttl));
        assert_ne!(
            at_expiry, first,
            "an expired request is not handed out again"
        );
        assert_eq!(
            store.answer_at(&first, approve(), t0 + ttl),
            Err(ApproveError::Expired)
        );
    }

    #[test]
    fn a_request_is_forgotten_one_time_to_live_after_its_expiry_exactly() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(60);
        let store = store(ttl);
        let first = token(store.lookup(&call("a"), t0));
        store.prune(t0 + ttl + ttl - Duration::from_nanos(1));
        assert_eq!(
            store.answer_at(&first, approve(), t0),
            Ok(call("a").binding),
            "still known"
        );
        let second = match store.lookup(&call("b"), t0) {
            Consumed::Pending {
                token: Some(token), ..
            } => token,
            other => panic!("expected a request, got {other:?}"),
        };
        store.prune(t0 + ttl + ttl);
        assert_eq!(
            store.answer_at(&second, approve(), t0),
            Err(ApproveError::UnknownToken)
        );
    }
}
