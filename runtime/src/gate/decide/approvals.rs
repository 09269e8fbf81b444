//! The approval of a call whose table says it needs one: a live session grant, else the gate's
//! approver (sync, or async for an async call) or its two-step store. Every answer is carried out here,
//! the store's refusal codes in one ladder.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use super::arguments::ArgumentSource;
use super::arguments::Shown;
use super::refusal::{refuse, store_panicked};
use super::waits::{Allowed, Answered, Wait, Waits};
use crate::approval::store::{Answer, ApprovalCall, Binding, Consumed, StoreError, confirmed};
use crate::approval::{AnyApprover, Approval, ApprovalRequest, DEFAULT_SESSION_TTL, SessionGrant};
use crate::audit::Decision;
use crate::gate::call::{Arguments, EffectiveRisk};
use crate::gate::denied::Denied;
use crate::gate::wait::catch_unwind_future;
use crate::gate::{Gate, grants};
use crate::registry::ToolEntry;
use toolgate_policy::{self as policy, DenialCode, Mode};

/// An approval step: decided, or waiting for an async approver or the store.
pub(super) enum Approving {
    Done(Result<Allowed, Denied>),
    Wait(Wait),
}

impl Gate {
    /// Asks for the approval of a call that needs one in `mode`.
    pub(super) fn approval<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        arguments: &mut A,
        shown: &Shown,
        waits: Waits,
    ) -> Approving {
        let manifest = &entry.manifest;
        let refused = |code| refuse(entry, code, risk.get(), Some(mode));
        // An irreversible call is confirmed in two steps, its target typed back, every time: no
        // session grant covers it, and no approver answers it at once.
        if manifest.irreversible {
            return self.two_step(entry, mode, risk, arguments, shown);
        }
        if let Some((by, exact)) = self.granted(entry, risk, arguments) {
            return Approving::Done(Ok(Allowed {
                mode,
                decision: Decision::Granted,
                by: Some(by),
                confirm: exact,
                grant: None,
            }));
        }
        match (&self.inner.approvals.approver, waits) {
            (Some(AnyApprover::Sync(approver)), _) => {
                let written = arguments.get();
                let request = ApprovalRequest {
                    tool: manifest,
                    mode,
                    risk: risk.get(),
                    arguments: written.map(|a| a.json.as_str()),
                    arguments_digest: written.and_then(Arguments::shown_digest),
                    principal: self.principal(),
                    taint: self.taint_of(risk.get()),
                    target: shown.target.as_deref(),
                    irreversible: false,
                    evidence: shown.seen.as_ref().map(|e| e.json.as_str()),
                    rollback: shown.plan.as_ref(),
                };
                // An approver that panics, in its answer or its name, has rejected.
                let answered = catch_unwind(AssertUnwindSafe(|| {
                    (approver.approve(&request), approver.name().to_owned())
                }))
                .ok();
                return Approving::Done(self.answered(entry, mode, risk, answered));
            }
            (Some(AnyApprover::Async(_)), Waits::Async) => {
                return Approving::Wait(
                    self.ask_async_approver(entry, mode, risk, arguments, shown),
                );
            }
            (Some(AnyApprover::Async(_)), Waits::Blocking) => {
                return Approving::Done(Err(refused(DenialCode::ApprovalRequired).with_detail(
                    "the gate's approver is async, and a sync tool cannot wait for it without \
                     blocking its thread: make the tool `async`, or give the gate a sync approver"
                        .into(),
                )));
            }
            (None, _) => {}
        }
        self.two_step(entry, mode, risk, arguments, shown)
    }

    /// Asks the gate's two-step store: the call is answered by an operator, out of band.
    fn two_step<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        arguments: &mut A,
        shown: &Shown,
    ) -> Approving {
        let manifest = &entry.manifest;
        let refused = |code| refuse(entry, code, risk.get(), Some(mode));
        let Some(store) = &self.inner.approvals.store else {
            if manifest.irreversible {
                return Approving::Done(Err(refused(DenialCode::ApprovalRequired).with_detail(
                    "it is irreversible, and is approved in two steps with its target typed back: \
                     the gate needs an approval store (two-step approvals), whatever its approver"
                        .into(),
                )));
            }
            return Approving::Done(Err(refused(DenialCode::ApprovalRequired)));
        };
        let Some((digest, shown_digest)) = arguments.binding() else {
            return Approving::Done(Err(refused(DenialCode::ApprovalRequired).with_detail(
                "a two-step approval is bound to the call's arguments and a method's receiver, \
                 and this call's cannot be written: an argument is not serializable, or the method \
                 was called directly on a receiver that is not; call it by name or over MCP on an \
                 instance the application registered (`Instances`, `ToolgateServer::instance`), \
                 which binds the approval to that instance"
                    .into(),
            )));
        };
        let agent = self.inner.agent.as_deref().map(str::to_owned);
        let caller = crate::gate::caller::current();
        let principal = crate::gate::caller::principal_of(self.principal(), caller.as_deref());
        let taint = self.taint_of(risk.get()).cloned();
        let call = ApprovalCall {
            binding: Binding::new(manifest.id, digest, shown_digest, risk.get())
                .made_by(principal.clone(), agent.clone())
                .tainted(taint.is_some())
                .on_target(
                    shown.target.clone(),
                    shown.seen.as_ref().map(|e| e.digest.clone()),
                ),
            agent,
            principal,
            taint,
            mode,
            manifest: serde_json::to_string(manifest).unwrap_or_default(),
            arguments: arguments.get().map(|a| a.json.clone()),
            irreversible: manifest.irreversible,
            evidence: shown.seen.as_ref().map(|e| e.json.clone()),
            rollback: shown
                .plan
                .as_ref()
                .map(crate::approval::effects::Rollback::to_json),
            gate: self.inner.approvals.filer.as_deref().map(str::to_owned),
        };
        let store = store.clone();
        Approving::Wait(Wait::Answer(Box::pin(async move {
            let consumed = match catch_unwind(AssertUnwindSafe(|| store.consume(&call))) {
                Ok(future) => catch_unwind_future(future)
                    .await
                    .unwrap_or_else(|()| Err(store_panicked())),
                Err(_) => Err(store_panicked()),
            };
            Answered::Store(consumed)
        })))
    }

    /// The async approver's answer to come, owning what it is shown.
    fn ask_async_approver<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        arguments: &mut A,
        shown: &Shown,
    ) -> Wait {
        let target = shown.target.clone();
        let evidence = shown.seen.as_ref().map(|e| e.json.clone());
        let plan = shown.plan.clone();
        let (json, digest) = arguments
            .get()
            .map(|a| (a.json.clone(), a.shown_digest().map(str::to_owned)))
            .unzip();
        let digest = digest.flatten();
        let gate = self.clone();
        Wait::Answer(Box::pin(async move {
            let Some(AnyApprover::Async(approver)) = &gate.inner.approvals.approver else {
                return Answered::Approver(None);
            };
            let request = ApprovalRequest {
                tool: &entry.manifest,
                mode,
                risk: risk.get(),
                arguments: json.as_deref(),
                arguments_digest: digest.as_deref(),
                principal: gate.principal(),
                taint: gate.taint_of(risk.get()),
                target: target.as_deref(),
                irreversible: false,
                evidence: evidence.as_deref(),
                rollback: plan.as_ref(),
            };
            // Panics while making the future, polling it or naming the approver are all its
            // rejection.
            let answer = match catch_unwind(AssertUnwindSafe(|| approver.approve(&request))) {
                Ok(future) => catch_unwind_future(future).await.ok(),
                Err(_) => None,
            };
            let by = catch_unwind(AssertUnwindSafe(|| approver.name().to_owned())).ok();
            Answered::Approver(answer.zip(by))
        }))
    }

    /// Who granted this call for the session, if a live grant covers it, and whether the grant is of
    /// its exact arguments.
    pub(super) fn granted<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        arguments: &mut A,
    ) -> Option<(String, bool)> {
        let mut grants = grants::lock(&self.inner.approvals.grants);
        if grants.is_empty() {
            return None;
        }
        let binding = || arguments.binding().map(|(digest, _)| digest);
        let caller = crate::gate::caller::current();
        grants.covering_with(
            entry.manifest.id,
            risk.get(),
            caller.as_deref(),
            binding,
            Instant::now(),
        )
    }

    /// An approver's answer, carried out; `None`: it panicked, which is a rejection. A session grant it
    /// gives is made at the commit point, and only in a clean session.
    pub(super) fn answered(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        answered: Option<(Approval, String)>,
    ) -> Result<Allowed, Denied> {
        let (answer, by) = answered.unwrap_or_else(|| {
            (
                Approval::Reject("the approver panicked".to_owned()),
                "approver".to_owned(),
            )
        });
        let approved = |grant| {
            Ok(Allowed {
                mode,
                decision: Decision::Approved,
                by: Some(by.clone()),
                confirm: true,
                grant,
            })
        };
        match answer {
            Approval::Approve => approved(None),
            Approval::ApproveForSession(grant) => approved(Some(grant)),
            Approval::Reject(reason) => Err(self.rejected(entry, mode, risk, &by, &reason, false)),
            Approval::Stop(reason) => Err(self.rejected(entry, mode, risk, &by, &reason, true)),
        }
    }

    /// A store's answer, carried out: the one ladder of the codes a store may answer.
    pub(super) fn consumed(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        consumed: Result<Consumed, StoreError>,
        shown: &Shown,
    ) -> Result<Allowed, Denied> {
        let irreversible = entry.manifest.irreversible;
        let refused = |code| refuse(entry, code, risk.get(), Some(mode));
        let unexpected = |what: String| {
            refused(DenialCode::ApprovalStoreUnavailable)
                .with_detail(StoreError::Unexpected(what).to_string().into())
        };
        let (consumed, _) = expiring(consumed);
        let (code, token, request) = match consumed {
            Err(error) => {
                return Err(refused(DenialCode::ApprovalStoreUnavailable)
                    .with_detail(error.to_string().into()));
            }
            // An answer is somebody's: one that names no one breaks the store's invariant, and would
            // leave an approval in the log that no one gave.
            Ok(Consumed::Answered(answer)) if answer.by().trim().is_empty() => {
                return Err(unexpected(
                    "an answer that names no one who gave it".to_owned(),
                ));
            }
            Ok(Consumed::Answered(answer @ Answer::Approve { .. })) => {
                // The store should have refused an approval without the target typed back: a store
                // that did not approves nothing here.
                if confirmed(irreversible, shown.target.as_deref(), &answer).is_err() {
                    return Err(refused(DenialCode::ConfirmationMismatch)
                        .with_by(answer.by())
                        .with_detail(
                            "the store answered an approval without the call's target typed back"
                                .into(),
                        ));
                }
                let Answer::Approve {
                    by, for_session, ..
                } = answer
                else {
                    unreachable!("matched as an approval")
                };
                return Ok(Allowed {
                    mode,
                    decision: Decision::Approved,
                    by: Some(by),
                    confirm: true,
                    grant: (for_session && !irreversible)
                        .then(|| SessionGrant::tool(DEFAULT_SESSION_TTL).exact_arguments()),
                });
            }
            Ok(Consumed::Answered(Answer::Reject { by, reason, stop })) => {
                return Err(self.rejected(entry, mode, risk, &by, &reason, stop));
            }
            Ok(Consumed::Pending { code, token }) => (code, token, None),
            Ok(Consumed::Filed(filed)) => (filed.code, filed.token, filed.request_id),
            Ok(Consumed::AnsweredUntil(..)) => unreachable!("read as `Answered` above"),
        };
        // A store refuses only as a store may: any other code would blame a deny rule, the mode or the
        // audit for what the store said.
        if !is_store_code(code) {
            return Err(unexpected(format!(
                "it refused with {code}, not an approval code"
            )));
        }
        // A request's id names the request its token answers: without a token, there is none.
        let filed = |denied: Denied, token: String| {
            let denied = denied.with_approval_token(token.into()).with_effects(
                shown.target.as_deref(),
                shown.seen.as_ref().map(|e| e.json.as_str()),
                shown.plan.as_ref(),
            );
            match &request {
                Some(id) => denied.with_approval_request_id(id.as_str().into()),
                None => denied,
            }
        };
        let denied = match (code, token) {
            // A request filed for the call is pending, whichever of the two codes the store used.
            (DenialCode::ApprovalRequired | DenialCode::ApprovalPending, Some(token)) => {
                filed(refused(DenialCode::ApprovalPending), token)
            }
            (code, Some(token)) => filed(refused(code), token),
            // Nothing was filed, so nothing is pending: the store is full.
            (DenialCode::ApprovalRequired | DenialCode::ApprovalPending, None) => {
                refused(DenialCode::ApprovalRequired).with_detail(
                    "the approval store holds as many pending requests for this agent as it may, \
                     and filed none for this call"
                        .into(),
                )
            }
            (code, None) => refused(code),
        };
        Err(self.latched(denied, risk))
    }

    /// A rejection, with the reason the agent reads; `stop` lowers the gate to SHADOW first.
    fn rejected(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        by: &str,
        reason: &str,
        stop: bool,
    ) -> Denied {
        let reason = reason.trim();
        if stop {
            let why = if reason.is_empty() {
                "no reason given"
            } else {
                reason
            };
            // Lowering to SHADOW is always allowed: it is the lowest mode.
            let _ = self.lower_by(
                Mode::Shadow,
                &format!("{by}, rejecting `{}`: {why}", entry.manifest.id),
            );
        }
        let denied =
            refuse(entry, DenialCode::ApprovalRejected, risk.get(), Some(mode)).with_by(by);
        let denied = match (reason.is_empty(), stop) {
            (true, false) => denied,
            (false, false) => denied.with_detail(reason.into()),
            (true, true) => denied.with_detail("the gate is stopped (SHADOW)".into()),
            (false, true) => {
                denied.with_detail(format!("{reason}; the gate is stopped (SHADOW)").into())
            }
        };
        self.latched(denied, risk)
    }

    /// A refusal of an approval that only the taint latch asked for, told so in its detail (which the
    /// record's message carries).
    fn latched(&self, denied: Denied, risk: EffectiveRisk) -> Denied {
        if policy::requires_approval(risk.get()) {
            return denied;
        }
        let Some(taint) = self.taint_of(risk.get()) else {
            return denied;
        };
        let detail = match denied.detail() {
            Some(detail) => format!("{detail}; asked because {taint}"),
            None => format!("asked because {taint}"),
        };
        denied.with_detail(detail.into())
    }
}

/// A store's answer, and when its request expires where the store says: an answer with an expiry is
/// read as any other, and the expiry is checked again at the commit point.
pub(super) fn expiring(
    consumed: Result<Consumed, StoreError>,
) -> (Result<Consumed, StoreError>, Option<Instant>) {
    match consumed {
        Ok(Consumed::AnsweredUntil(answer, expires)) => {
            (Ok(Consumed::Answered(answer)), Some(expires))
        }
        other => (other, None),
    }
}

/// The codes a store may refuse with.
fn is_store_code(code: DenialCode) -> bool {
    matches!(
        code,
        DenialCode::ApprovalRequired
            | DenialCode::ApprovalPending
            | DenialCode::ApprovalExpired
            | DenialCode::ApprovalReused
            | DenialCode::ApprovalMismatch
            | DenialCode::EvidenceChanged
    )
}
