//! Deciding a call: the one place where a call is allowed or refused, and the only producer of
//! refusals.
//!
//! A call is decided against every gate around it (the ambient gates, outermost first, and the tool's
//! `&Gate` argument), each in the order of the policy (deny list, allowed modes, ceiling, approval), then
//! each gate writes its `enter` record, then every gate's mode is read once more: that re-check is the
//! last thing before the body. The common case, one gate that keeps no record and whose table allows the
//! call, is one inlined bit test ([`allows`]).

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::approval::store::{Answer, ApprovalCall, Binding, Consumed, StoreError};
use crate::approval::{AnyApprover, Approval, ApprovalRequest, DEFAULT_SESSION_TTL, SessionGrant};
use crate::audit::{AuditRecord, Decision, Stage};
use crate::gate::ambient::STACK;
use crate::gate::budget::{BudgetCharge, BudgetFuture, Taken};
use crate::gate::call::{ArgRef, Arguments, CallInfo, EffectiveRisk};
use crate::gate::denied::Denied;
use crate::gate::permit::{Exit, Permit, Seen, close_refused};
use crate::gate::wait::{block_on, catch_unwind_future};
use crate::gate::{Gate, grants};
use crate::policy::{self, DenialCode, Facts, Mode, Risk, Verdict};
use crate::registry::ToolEntry;

impl Gate {
    /// Whether the table allows `entry` outright in the current mode, with no record to write.
    #[inline]
    pub(crate) fn allows_unaudited(&self, entry: &'static ToolEntry) -> bool {
        let inner = &*self.inner;
        // The mode, and whether the session is tainted: the bit of the table in force.
        let mode = inner.mode.load(Ordering::Acquire) & 7;
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        match inner.allowed_outright.get(slot) {
            Some(bits) if bits >> mode & 1 == 1 => true,
            Some(_) => {
                matches!(inner.granted_until.get(slot), Some(until) if until.load(Ordering::Relaxed) != 0)
                    && self.granted_outright(slot, mode)
            }
            None => false,
        }
    }

    /// Whether a live grant of the whole tool lets a call that needs an approval in `mode` (with the
    /// taint bit) run outright (a gate that keeps no record only; see `Inner::granted_until`).
    #[cold]
    #[inline(never)]
    fn granted_outright(&self, slot: usize, mode: u8) -> bool {
        let inner = &*self.inner;
        let needs_approval = matches!(inner.verdicts.get(slot), Some(row) if row[usize::from(mode & 7)] == Verdict::NeedsApproval);
        let Some(until) = inner.granted_until.get(slot) else {
            return false;
        };
        needs_approval && since(inner.epoch, Instant::now()) < until.load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn table_verdict(&self, entry: &'static ToolEntry) -> (Mode, Verdict) {
        let inner = &*self.inner;
        // The mode, with the taint bit: the column of the session as it stands.
        let raw = inner.mode.load(Ordering::Acquire) & 7;
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        let verdict = match inner.verdicts.get(slot) {
            Some(row) => row[usize::from(raw)],
            None => Verdict::Refuse(DenialCode::UnregisteredTool),
        };
        (Mode::from_index(raw), verdict)
    }

    #[cold]
    pub(crate) fn refusal(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        code: DenialCode,
    ) -> Denied {
        let manifest = &entry.manifest;
        let denied = refuse(entry, code, manifest.risk_level, Some(mode));
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        // Deny trumps every other verdict, so a tool with a rule is refused DENY_LISTED: the rule is
        // the detail.
        match self.inner.deny_rule_of.get(slot).copied().flatten() {
            Some(rule) => denied.with_detail(self.inner.deny_rules[rule as usize].clone()),
            None => denied,
        }
    }

    /// The verdict for a call judged at `risk` in the current mode.
    fn verdict_at(&self, entry: &'static ToolEntry, risk: EffectiveRisk) -> (Mode, Verdict) {
        let mode = self.mode();
        (mode, self.verdict_in(entry, risk, mode))
    }

    /// The verdict for a call judged at `risk` in `mode`: the precomputed one at the declared risk,
    /// else worked out now.
    fn verdict_in(&self, entry: &'static ToolEntry, risk: EffectiveRisk, mode: Mode) -> Verdict {
        let manifest = &entry.manifest;
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        if risk.get() == manifest.risk_level {
            let column = mode as usize + if self.tainted() { 4 } else { 0 };
            return match self.inner.verdicts.get(slot) {
                Some(row) => row[column],
                None => Verdict::Refuse(DenialCode::UnregisteredTool),
            };
        }
        let Some(rule) = self.inner.deny_rule_of.get(slot) else {
            return Verdict::Refuse(DenialCode::UnregisteredTool);
        };
        let facts = Facts {
            risk: risk.get(),
            allowed_modes: manifest.allowed_modes,
            mode,
            deny_listed: rule.is_some(),
            can_approve: self.inner.approver.is_some() || self.inner.store.is_some(),
        };
        if self.tainted() {
            policy::decide_tainted(facts, self.inner.taint_policy)
        } else {
            policy::decide(facts)
        }
    }

    /// The last word before a body runs: the gate's mode now, against a call it decided in `decided`.
    ///
    /// The mode may have been lowered since the decision, while an approver thought, an argument was
    /// serialized or a record was written; a call whose decision completes after `lower` returns must
    /// not run at the old mode. The mode only goes down, so an unchanged mode is the decision itself;
    /// a lower one lets the call run only if it is allowed there outright.
    pub(crate) fn recheck(
        &self,
        entry: &'static ToolEntry,
        decided: Mode,
        risk: EffectiveRisk,
    ) -> Result<(), Denied> {
        let now = self.mode();
        if now == decided {
            return Ok(());
        }
        let code = match self.verdict_in(entry, risk, now) {
            Verdict::Allow => return Ok(()),
            Verdict::Refuse(code) => code,
            Verdict::NeedsApproval => DenialCode::ApprovalRequired,
        };
        let denied = self.refusal(entry, now, code);
        Err(self.with_taint(denied, risk.get()).with_risk(risk.get()))
    }

    /// Decides one call in full against this gate, up to what it must wait for: policy, the budgets,
    /// a session grant, then an approver or the store. `Waits::Blocking` (a sync tool) never returns
    /// [`Step::Ask`]: it waits for the stores on this thread, and refuses a call its async approver
    /// would have to answer.
    fn decide_step<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        arguments: &mut A,
        waits: Waits,
    ) -> Step {
        match self.verdict_at(entry, risk) {
            (mode, Verdict::Allow) => match self.charge(entry, mode, risk, waits) {
                Charge::Taken => Step::Done(Ok(Allowed::by_policy(mode))),
                Charge::Refused(denied) => Step::Done(Err(denied)),
                Charge::Waiting(wait) => Step::Ask(mode, Ask::Budget(wait, false)),
            },
            (mode, Verdict::Refuse(code)) => {
                let denied = self.refusal(entry, mode, code);
                Step::Done(Err(self.with_taint(denied, risk.get())))
            }
            // Budgets come before the approval: no approver is asked about a call they refuse.
            (mode, Verdict::NeedsApproval) => match self.charge(entry, mode, risk, waits) {
                Charge::Taken => self.approval(entry, mode, risk, arguments, waits),
                Charge::Refused(denied) => Step::Done(Err(denied)),
                Charge::Waiting(wait) => Step::Ask(mode, Ask::Budget(wait, true)),
            },
        }
    }

    /// Takes a unit of every budget covering the call, or refuses it. An async tool's call waits for
    /// a store that does not answer at once ([`Charge::Waiting`]); a sync tool's parks its thread.
    fn charge(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        waits: Waits,
    ) -> Charge {
        let Some(budgets) = &self.inner.budgets else {
            return Charge::Taken;
        };
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        let charges = budgets.charges(slot, risk.get());
        if charges.is_empty() {
            return Charge::Taken;
        }
        let Ok(mut future) = catch_unwind(AssertUnwindSafe(|| budgets.store.take(&charges))) else {
            return self.taken(entry, mode, risk, &charges, Err(store_panicked()));
        };
        let polled = match waits {
            Waits::Blocking => catch_unwind(AssertUnwindSafe(|| block_on(future.as_mut()))),
            Waits::Async => {
                let once = catch_unwind(AssertUnwindSafe(|| {
                    future
                        .as_mut()
                        .poll(&mut Context::from_waker(Waker::noop()))
                }));
                match once {
                    Ok(Poll::Ready(taken)) => Ok(taken),
                    Ok(Poll::Pending) => {
                        return Charge::Waiting(Box::new(BudgetWait { future, charges }));
                    }
                    Err(panic) => Err(panic),
                }
            }
        };
        let taken = polled.unwrap_or_else(|_| Err(store_panicked()));
        self.taken(entry, mode, risk, &charges, taken)
    }

    /// A budget store's answer, carried out.
    fn taken(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        charges: &[BudgetCharge],
        taken: Result<Taken, StoreError>,
    ) -> Charge {
        let refused = |code| refuse(entry, code, risk.get(), Some(mode));
        let label = |charge: usize| match (&self.inner.budgets, charges.get(charge)) {
            (Some(budgets), Some(charge)) => budgets.label(&charge.key),
            _ => "a budget".into(),
        };
        match taken {
            Ok(Taken::Taken) => Charge::Taken,
            Ok(Taken::Exhausted {
                charge,
                retry_after,
            }) => Charge::Refused(
                refused(DenialCode::BudgetExhausted)
                    .with_detail(label(charge))
                    .with_retry_after(retry_after),
            ),
            Err(error) => {
                let why = match error {
                    StoreError::Unavailable(why) => format!("unavailable: {why}"),
                    StoreError::Timeout => "no answer in time".to_owned(),
                    StoreError::Unexpected(what) => format!("an unexpected answer: {what}"),
                };
                Charge::Refused(refused(DenialCode::BudgetStoreUnavailable).with_detail(why.into()))
            }
        }
    }

    /// A decision's end in this gate: a refusal is judged at the call's risk and recorded.
    fn settle<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        arguments: &mut A,
        result: Result<Allowed, Denied>,
    ) -> Result<Allowed, Denied> {
        result.map_err(|denied| {
            let denied = denied.with_risk(risk.get());
            self.record_refusal(entry, &denied, arguments);
            denied
        })
    }

    fn approval<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        arguments: &mut A,
        waits: Waits,
    ) -> Step {
        let manifest = &entry.manifest;
        let refused = |code| refuse(entry, code, risk.get(), Some(mode));
        if let Some((by, exact)) = self.granted(entry, risk, arguments) {
            return Step::Done(Ok(Allowed {
                mode,
                decision: Decision::Granted,
                by: Some(by),
                confirm: exact,
            }));
        }
        match (&self.inner.approver, waits) {
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
                };
                // An approver that panics, in its answer or its name, has rejected.
                let answered = catch_unwind(AssertUnwindSafe(|| {
                    (approver.approve(&request), approver.name().to_owned())
                }));
                let (answer, by) = answered.unwrap_or_else(|_| panicked());
                return Step::Done(self.answered(entry, mode, risk, answer, &by, arguments));
            }
            (Some(AnyApprover::Async(_)), Waits::Async) => return Step::Ask(mode, Ask::Approver),
            (Some(AnyApprover::Async(_)), Waits::Blocking) => {
                return Step::Done(Err(refused(DenialCode::ApprovalRequired).with_detail(
                    "the gate's approver is async, and a sync tool cannot wait for it without \
                     blocking its thread: make the tool `async`, or give the gate a sync approver"
                        .into(),
                )));
            }
            (None, _) => {}
        }
        let Some(store) = &self.inner.store else {
            return Step::Done(Err(refused(DenialCode::ApprovalRequired)));
        };
        let Some((digest, shown)) = arguments.binding() else {
            return Step::Done(Err(refused(DenialCode::ApprovalRequired).with_detail(
                "a two-step approval is bound to the call's arguments (and a method's receiver), \
                 and this tool's are not serializable"
                    .into(),
            )));
        };
        let call = ApprovalCall {
            binding: Binding::new(manifest.id, digest, shown, risk.get()),
            agent: self.inner.agent.as_deref().map(str::to_owned),
            principal: self.principal().map(str::to_owned),
            taint: self.taint_of(risk.get()).cloned(),
            mode,
            manifest: serde_json::to_string(manifest).unwrap_or_default(),
            arguments: arguments.get().map(|a| a.json.clone()),
        };
        match waits {
            Waits::Async => Step::Ask(mode, Ask::Store(Box::new(call))),
            Waits::Blocking => {
                let consumed = catch_unwind(AssertUnwindSafe(|| block_on(store.consume(&call))))
                    .unwrap_or_else(|_| Err(store_panicked()));
                Step::Done(self.consumed(entry, mode, risk, consumed, arguments))
            }
        }
    }

    /// Waits for what [`Gate::decide_step`] asked for: the budget store, then what the approval asks
    /// for; or an approver or the approval store.
    async fn ask<A: ArgumentSource + Send>(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        ask: Ask,
        arguments: &mut A,
    ) -> Result<Allowed, Denied> {
        let (wait, then_approval) = match ask {
            Ask::Budget(wait, then_approval) => (wait, then_approval),
            other => return self.ask_approval(entry, mode, risk, other, arguments).await,
        };
        let BudgetWait { future, charges } = *wait;
        let taken = catch_unwind_future(future)
            .await
            .unwrap_or_else(|()| Err(store_panicked()));
        if let Charge::Refused(denied) = self.taken(entry, mode, risk, &charges, taken) {
            return Err(denied);
        }
        if !then_approval {
            return Ok(Allowed::by_policy(mode));
        }
        match self.approval(entry, mode, risk, arguments, Waits::Async) {
            Step::Done(result) => result,
            Step::Ask(mode, ask) => self.ask_approval(entry, mode, risk, ask, arguments).await,
        }
    }

    /// Waits for an approver or the approval store.
    async fn ask_approval<A: ArgumentSource + Send>(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        ask: Ask,
        arguments: &mut A,
    ) -> Result<Allowed, Denied> {
        let refused = |code| refuse(entry, code, risk.get(), Some(mode));
        match (ask, &self.inner.approver, &self.inner.store) {
            (Ask::Approver, Some(AnyApprover::Async(approver)), _) => {
                let (json, digest) = arguments
                    .get()
                    .map(|a| (a.json.clone(), a.shown_digest().map(str::to_owned)))
                    .unzip();
                let digest = digest.flatten();
                let request = ApprovalRequest {
                    tool: &entry.manifest,
                    mode,
                    risk: risk.get(),
                    arguments: json.as_deref(),
                    arguments_digest: digest.as_deref(),
                    principal: self.principal(),
                    taint: self.taint_of(risk.get()),
                };
                // Panics while making the future, polling it or naming the approver are all its
                // rejection.
                let asking = catch_unwind(AssertUnwindSafe(|| approver.approve(&request)));
                let answer = match asking {
                    Ok(future) => catch_unwind_future(future).await.ok(),
                    Err(_) => None,
                };
                let by = catch_unwind(AssertUnwindSafe(|| approver.name().to_owned())).ok();
                let (answer, by) = match (answer, by) {
                    (Some(answer), Some(by)) => (answer, by),
                    _ => panicked(),
                };
                self.answered(entry, mode, risk, answer, &by, arguments)
            }
            (Ask::Store(call), _, Some(store)) => {
                let consumed = match catch_unwind(AssertUnwindSafe(|| store.consume(&call))) {
                    Ok(future) => catch_unwind_future(future)
                        .await
                        .unwrap_or_else(|()| Err(store_panicked())),
                    Err(_) => Err(store_panicked()),
                };
                self.consumed(entry, mode, risk, consumed, arguments)
            }
            // The gate's approver and store are fixed when it is built: this cannot happen, and would
            // refuse.
            _ => Err(refused(DenialCode::ApprovalRequired)),
        }
    }

    /// Who granted this call for the session, if a live grant covers it, and whether the grant is of
    /// its exact arguments.
    fn granted<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        arguments: &mut A,
    ) -> Option<(String, bool)> {
        let mut grants = grants::lock(&self.inner.grants);
        if grants.is_empty() {
            return None;
        }
        let binding = || arguments.binding().map(|(digest, _)| digest);
        grants.covering_with(entry.manifest.id, risk.get(), binding, Instant::now())
    }

    /// An approver's answer, carried out.
    fn answered<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        answer: Approval,
        by: &str,
        arguments: &mut A,
    ) -> Result<Allowed, Denied> {
        let approved = Ok(Allowed {
            mode,
            decision: Decision::Approved,
            by: Some(by.to_owned()),
            confirm: true,
        });
        match answer {
            Approval::Approve => approved,
            Approval::ApproveForSession(grant) => {
                self.grant(entry, risk, grant, by, arguments);
                approved
            }
            Approval::Reject(reason) => Err(self.rejected(entry, mode, risk, by, &reason, false)),
            Approval::Stop(reason) => Err(self.rejected(entry, mode, risk, by, &reason, true)),
        }
    }

    /// A store's answer, carried out.
    fn consumed<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        consumed: Result<Consumed, StoreError>,
        arguments: &mut A,
    ) -> Result<Allowed, Denied> {
        let refused = |code| refuse(entry, code, risk.get(), Some(mode));
        match consumed {
            // An answer is somebody's: one that names no one breaks the store's invariant, and would
            // leave an approval in the log that no one gave.
            Ok(Consumed::Answered(answer)) if answer.by().trim().is_empty() => {
                Err(refused(DenialCode::ApprovalStoreUnavailable).with_detail(
                    StoreError::Unexpected("an answer that names no one who gave it".to_owned())
                        .to_string()
                        .into(),
                ))
            }
            Ok(Consumed::Answered(Answer::Approve { by, for_session })) => {
                if for_session {
                    let grant = SessionGrant::tool(DEFAULT_SESSION_TTL).exact_arguments();
                    self.grant(entry, risk, grant, &by, arguments);
                }
                Ok(Allowed {
                    mode,
                    decision: Decision::Approved,
                    by: Some(by),
                    confirm: true,
                })
            }
            Ok(Consumed::Answered(Answer::Reject { by, reason, stop })) => {
                Err(self.rejected(entry, mode, risk, &by, &reason, stop))
            }
            // A store refuses only as a store may: any other code would blame a deny rule, the mode
            // or the audit for what the store said.
            Ok(Consumed::Pending { code, .. }) if !is_store_code(code) => {
                Err(refused(DenialCode::ApprovalStoreUnavailable).with_detail(
                    StoreError::Unexpected(format!("it refused with {code}, not an approval code"))
                        .to_string()
                        .into(),
                ))
            }
            // A request filed for the call is pending, whichever of the two codes the store used.
            Ok(Consumed::Pending {
                code: DenialCode::ApprovalRequired | DenialCode::ApprovalPending,
                token: Some(token),
            }) => Err(refused(DenialCode::ApprovalPending).with_approval_token(token.into())),
            Ok(Consumed::Pending {
                code,
                token: Some(token),
            }) => Err(refused(code).with_approval_token(token.into())),
            // Nothing was filed, so nothing is pending: the store is full.
            Ok(Consumed::Pending {
                code: DenialCode::ApprovalRequired | DenialCode::ApprovalPending,
                token: None,
            }) => Err(refused(DenialCode::ApprovalRequired).with_detail(
                "the approval store holds as many pending requests for this agent as it may, and \
                 filed none for this call"
                    .into(),
            )),
            Ok(Consumed::Pending { code, token: None }) => Err(refused(code)),
            Err(error) => {
                Err(refused(DenialCode::ApprovalStoreUnavailable)
                    .with_detail(error.to_string().into()))
            }
        }
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
        match (reason.is_empty(), stop) {
            (true, false) => denied,
            (false, false) => denied.with_detail(reason.into()),
            (true, true) => denied.with_detail("the gate is stopped (SHADOW)".into()),
            (false, true) => {
                denied.with_detail(format!("{reason}; the gate is stopped (SHADOW)").into())
            }
        }
    }

    /// Makes a session grant and records it.
    fn grant<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        grant: SessionGrant,
        by: &str,
        arguments: &mut A,
    ) {
        let binding = arguments.binding();
        let now = Instant::now();
        let made = grants::lock(&self.inner.grants).grant(
            entry.manifest.id,
            risk.get(),
            grant,
            binding.as_ref().map(|(digest, _)| digest.clone()),
            by,
            now,
        );
        if !made {
            return;
        }
        if self.inner.audit.is_none() {
            // A grant of the whole tool at its declared risk or above: the inlined check may use it,
            // unless a budget counts the tool's calls.
            let slot = entry.slot.load(Ordering::Relaxed) as usize;
            let counted = self
                .inner
                .budgets
                .as_ref()
                .is_some_and(|b| b.covers(slot, entry.manifest.risk_level));
            let whole = !grant.is_exact() && risk.get() >= entry.manifest.risk_level && !counted;
            if let (true, Some(until), Some(end)) = (
                whole,
                self.inner.granted_until.get(slot),
                now.checked_add(grant.ttl()),
            ) {
                until.fetch_max(since(self.inner.epoch, end), Ordering::AcqRel);
            }
            return;
        }
        let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let scope = if grant.is_exact() {
            "these arguments"
        } else {
            "every call"
        };
        let record = AuditRecord {
            arguments_digest: grant
                .is_exact()
                .then(|| binding.map(|(_, shown)| shown))
                .flatten(),
            by: Some(by.to_owned()),
            effective_risk: Some(risk.get()),
            message: Some(format!(
                "granted for the session, {scope} at {} or lower, for {} s",
                risk.get(),
                grant.ttl().as_secs()
            )),
            ..self.record(
                Stage::SessionGranted,
                Cow::Borrowed(entry.manifest.id),
                self.mode(),
                call,
            )
        };
        self.write_after_the_fact(&record);
    }

    /// Records a call by name that stopped at the door, before any decision: an unknown id, a tool with
    /// no JSON interface, arguments that do not parse, a method without its instance. `tool` is the
    /// tool's id where it is one; the caller keeps raw input (an unknown id, a bad value) out of it and
    /// out of `message`.
    pub(crate) fn record_probe(
        &self,
        tool: Cow<'static, str>,
        declared: Option<Risk>,
        code: &'static str,
        message: String,
    ) {
        if self.inner.audit.is_none() {
            return;
        }
        let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let record = AuditRecord {
            code: Some(Cow::Borrowed(code)),
            decision: Some(Decision::Refused),
            declared_risk: declared,
            message: Some(message),
            ..self.record(Stage::Refused, tool, self.mode(), call)
        };
        self.write_after_the_fact(&record);
    }

    pub(crate) fn record_refusal<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        denied: &Denied,
        arguments: &mut A,
    ) {
        if self.inner.audit.is_none() {
            return;
        }
        let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let mode = denied.mode().unwrap_or_else(|| self.mode());
        let record = AuditRecord {
            arguments: arguments.recorded(),
            arguments_digest: arguments
                .get()
                .and_then(Arguments::shown_digest)
                .map(str::to_owned),
            by: denied.by().map(str::to_owned),
            code: Some(Cow::Borrowed(denied.code().as_str())),
            decision: Some(Decision::Refused),
            declared_risk: Some(entry.manifest.risk_level),
            effective_risk: Some(denied.risk()),
            message: Some(denied.to_string()),
            ..self.record(Stage::Refused, Cow::Borrowed(entry.manifest.id), mode, call)
        };
        self.write_after_the_fact(&record);
    }

    /// The `enter` record of an allowed call, and the `exit` it will owe; `None` for a gate that keeps no
    /// record.
    fn enter_record<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        allowed: &Allowed,
        risk: EffectiveRisk,
        arguments: &mut A,
    ) -> Option<(AuditRecord, crate::gate::permit::Exit)> {
        self.inner.audit.as_ref()?;
        let (mode, decision) = (allowed.mode, allowed.decision);
        let manifest = &entry.manifest;
        let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let record = AuditRecord {
            arguments: arguments.recorded(),
            arguments_digest: arguments
                .get()
                .and_then(Arguments::shown_digest)
                .map(str::to_owned),
            by: allowed.by.clone(),
            decision: Some(decision),
            declared_risk: Some(manifest.risk_level),
            effective_risk: Some(risk.get()),
            // An approval the latch asked for says so.
            message: (decision != Decision::Allowed)
                .then(|| self.taint_of(risk.get()).map(ToString::to_string))
                .flatten(),
            ..self.record(Stage::Enter, Cow::Borrowed(manifest.id), mode, call)
        };
        let exit = crate::gate::permit::Exit {
            gate: self.clone(),
            tool: manifest,
            call,
            started: Instant::now(),
            risk: risk.get(),
            mode,
            // Moved in from the record once it is written.
            arguments_digest: None,
        };
        Some((record, exit))
    }
}

/// The refusal of a call whose `enter` record its gate's sink could not write.
#[cold]
fn audit_unavailable(
    entry: &'static ToolEntry,
    risk: EffectiveRisk,
    mode: Mode,
    error: &crate::audit::AuditError,
) -> Denied {
    refuse(entry, DenialCode::AuditUnavailable, risk.get(), Some(mode))
        .with_detail(error.to_string().into())
}

/// What one gate decided of a call it allows.
#[derive(Debug, Clone)]
pub(crate) struct Allowed {
    mode: Mode,
    decision: Decision,
    /// Who approved it, or granted it for the session.
    by: Option<String>,
    /// An approval (or a grant of exact arguments) was given for the arguments as they were written:
    /// they must still be so when the body starts.
    confirm: bool,
}

impl Allowed {
    fn by_policy(mode: Mode) -> Allowed {
        Allowed {
            mode,
            decision: Decision::Allowed,
            by: None,
            confirm: false,
        }
    }
}

/// Whether a decision may wait for an async approver or store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waits {
    /// A sync tool: it may block its own thread on the store, and cannot wait for an async approver.
    Blocking,
    /// An async tool: the decision stops and is awaited.
    Async,
}

/// A gate's decision so far.
enum Step {
    Done(Result<Allowed, Denied>),
    /// It waits for this, in this mode.
    Ask(Mode, Ask),
}

/// What the budgets said of a call.
enum Charge {
    /// Every budget covering it had a unit, now taken (or none covers it).
    Taken,
    Refused(Denied),
    /// An async call waits for the budget store.
    Waiting(Box<BudgetWait>),
}

/// A budget store's answer awaited, and what was asked.
struct BudgetWait {
    future: BudgetFuture,
    charges: Vec<BudgetCharge>,
}

/// What an async decision waits for.
enum Ask {
    /// The budget store; then, with `true`, the approval.
    Budget(Box<BudgetWait>, bool),
    /// The gate's async approver.
    Approver,
    /// The gate's store, about this call.
    Store(Box<ApprovalCall>),
}

/// A call's arguments as a decision reads them: borrowed from the call and written at the first need
/// ([`LazyArguments`]), or written out ([`WrittenArguments`]), which an async decision holds while it
/// waits, since the call's own references to its arguments cannot cross threads.
pub(crate) trait ArgumentSource {
    /// The arguments as the log writes them; `None` where one is bound by a pattern.
    fn get(&mut self) -> Option<&Arguments>;

    /// The digest a two-step approval is bound to, and the digest the log shows.
    fn binding(&mut self) -> Option<(String, String)>;

    /// The arguments a record carries: written out (redacted ones redacted) for a tool that records
    /// its arguments, the digest alone otherwise.
    fn recorded(&mut self) -> Option<String>;

    /// Whether the call still has the arguments its approval was given for: written again and compared
    /// now, where the call's arguments are at hand; otherwise kept in `permit`, for [`confirm`] to
    /// compare once the call has them back.
    fn unchanged(&mut self, permit: &mut Permit) -> bool;
}

/// A call's arguments, written once at the first need.
pub(crate) struct LazyArguments<'a> {
    call: &'a CallInfo<'a>,
    written: Option<Option<Arguments>>,
    bound: Option<Option<String>>,
}

impl<'a> LazyArguments<'a> {
    pub(crate) fn new(call: &'a CallInfo<'a>) -> LazyArguments<'a> {
        LazyArguments {
            call,
            written: None,
            bound: None,
        }
    }

    /// Everything a decision may still need, written out.
    fn write_out(mut self) -> WrittenArguments {
        let bound = self.binding().map(|(digest, _)| digest);
        WrittenArguments {
            written: self.get().cloned(),
            bound,
            record: self.call.record_arguments,
        }
    }
}

impl ArgumentSource for LazyArguments<'_> {
    fn get(&mut self) -> Option<&Arguments> {
        self.written
            .get_or_insert_with(|| self.call.arguments())
            .as_ref()
    }

    fn binding(&mut self) -> Option<(String, String)> {
        if self.bound.is_none() {
            let call = self.call;
            let bound = self.get().and_then(|arguments| call.binding(arguments));
            self.bound = Some(bound);
        }
        let digest = self.bound.clone().flatten()?;
        Some((digest, self.get()?.digest.clone()))
    }

    fn recorded(&mut self) -> Option<String> {
        let record = self.call.record_arguments;
        self.get().filter(|_| record).map(|a| a.json.clone())
    }

    fn unchanged(&mut self, _permit: &mut Permit) -> bool {
        let call = self.call;
        let bound = self.bound.clone().flatten();
        let Some(seen) = self.get() else {
            return true;
        };
        let seen = Seen {
            json: seen.json.clone(),
            binding: bound,
        };
        still_seen(call, &seen)
    }
}

/// Whether `call` writes the arguments an approval saw (and, where it was bound, binds the same).
fn still_seen(call: &CallInfo<'_>, seen: &Seen) -> bool {
    let Some(now) = call.arguments() else {
        return false;
    };
    now.json == seen.json
        && seen
            .binding
            .as_ref()
            .is_none_or(|binding| call.binding(&now).as_ref() == Some(binding))
}

/// [`LazyArguments`] written out.
pub(crate) struct WrittenArguments {
    written: Option<Arguments>,
    bound: Option<String>,
    record: bool,
}

impl ArgumentSource for WrittenArguments {
    fn get(&mut self) -> Option<&Arguments> {
        self.written.as_ref()
    }

    fn binding(&mut self) -> Option<(String, String)> {
        Some((self.bound.clone()?, self.written.as_ref()?.digest.clone()))
    }

    fn recorded(&mut self) -> Option<String> {
        let record = self.record;
        self.written
            .as_ref()
            .filter(|_| record)
            .map(|a| a.json.clone())
    }

    fn unchanged(&mut self, permit: &mut Permit) -> bool {
        if let Some(written) = &self.written {
            permit.set_seen(Seen {
                json: written.json.clone(),
                binding: self.bound.clone(),
            });
        }
        true
    }
}

/// Whether a call of `entry` runs outright: one gate (the tool's `&Gate` argument, or the one ambient
/// gate), which keeps no record and whose table allows the call in the current mode. Generated code asks
/// this first, inlined; everything else (refusals, escalation, approvals, audit records, nested gates)
/// goes through [`check_not_allowed`].
#[inline]
pub(crate) fn fast_allows(entry: &'static ToolEntry, explicit: Option<&Gate>) -> bool {
    STACK
        .try_with(|stack| {
            let Ok(stack) = stack.try_borrow() else {
                return false;
            };
            match (explicit, stack.as_slice()) {
                (None, [gate]) | (Some(gate), []) => gate.allows_unaudited(entry),
                _ => false,
            }
        })
        .unwrap_or(false)
}

/// Decides a call that [`fast_allows`] did not let through.
#[cold]
#[inline(never)]
pub(crate) fn check_not_allowed(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    match lone_refusal(entry, explicit) {
        Some((mode, code)) => {
            let manifest = &entry.manifest;
            Err(refuse(entry, code, manifest.risk_level, Some(mode)))
        }
        None => check_slow(entry, explicit, call),
    }
}

/// The refusal of a lone gate that keeps no record, from its table, when nothing else is to be asked,
/// written or told (a deny-listed call is told its rule).
#[inline]
fn lone_refusal(entry: &'static ToolEntry, explicit: Option<&Gate>) -> Option<(Mode, DenialCode)> {
    STACK
        .try_with(|stack| {
            let stack = stack.try_borrow().ok()?;
            match (explicit, stack.as_slice()) {
                (None, [gate]) | (Some(gate), []) if !gate.audits() => {
                    // A deny rule is told its rule, and the latch its cause: on the full path.
                    match gate.table_verdict(entry) {
                        (
                            mode,
                            Verdict::Refuse(
                                code @ (DenialCode::ModeNotAllowed
                                | DenialCode::AboveCeiling
                                | DenialCode::UnregisteredTool),
                            ),
                        ) => Some((mode, code)),
                        (mode, Verdict::Refuse(DenialCode::ApprovalRequired))
                            if !gate.tainted() =>
                        {
                            Some((mode, DenialCode::ApprovalRequired))
                        }
                        _ => None,
                    }
                }
                _ => None,
            }
        })
        .ok()
        .flatten()
}

/// Decides a call whose arguments escalated its risk: never from the table of declared risks.
#[cold]
#[inline(never)]
pub(crate) fn check_escalated(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    check_slow(entry, explicit, call)
}

#[cold]
#[inline(never)]
fn check_slow(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    // Approvers and sinks run with the stack released, so that they may enter gates themselves.
    gates_around(entry, explicit).and_then(|gates| decide_all(entry, &gates, call))
}

/// The gates that decide a call: the tool's `&Gate` argument and the ambient ones, each once.
#[cold]
fn gates_around(entry: &'static ToolEntry, explicit: Option<&Gate>) -> Result<Vec<Gate>, Denied> {
    STACK
        .try_with(|stack| {
            let Ok(stack) = stack.try_borrow() else {
                return Err(no_gate(entry));
            };
            match (explicit, stack.as_slice()) {
                (None, []) => Err(no_gate(entry)),
                (explicit, ambient) => Ok(distinct(explicit.into_iter().chain(ambient))),
            }
        })
        .unwrap_or_else(|_| Err(no_gate(entry)))
}

/// Each gate once, outermost first: a gate entered twice, or both entered and passed, decides once.
#[cold]
fn distinct<'a>(gates: impl Iterator<Item = &'a Gate>) -> Vec<Gate> {
    let mut seen: Vec<Gate> = Vec::new();
    for gate in gates {
        if !seen.iter().any(|g| g.id() == gate.id()) {
            seen.push(gate.clone());
        }
    }
    seen
}

/// Decides a call against every gate around it, outermost first, then writes their `enter` records,
/// then re-checks every gate's mode: the re-check is the last thing before the body runs, since each
/// step before it may take time (an approver, an argument's `Serialize`, a slow sink) during which a
/// gate can be lowered. A refusal at any step is recorded by every gate that took part.
#[cold]
fn decide_all(
    entry: &'static ToolEntry,
    gates: &[Gate],
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    let risk = EffectiveRisk::new(entry.manifest.risk_level, call.escalated);
    let mut arguments = LazyArguments::new(call);
    let mut allowed = Vec::with_capacity(gates.len());
    for (i, gate) in gates.iter().enumerate() {
        let result = match gate.decide_step(entry, risk, &mut arguments, Waits::Blocking) {
            Step::Done(result) => result,
            // A blocking decision waits where it must: it never stops to ask.
            Step::Ask(mode, _) => Err(refuse(
                entry,
                DenialCode::ApprovalRequired,
                risk.get(),
                Some(mode),
            )),
        };
        settled(entry, gates, i, risk, &mut arguments, result, &mut allowed)?;
    }
    enter_all(entry, gates, &allowed, risk, &mut arguments)
}

/// Settles the decision of `gates[i]`: kept where it allows; a refusal, which that gate recorded, is
/// recorded by the gates that allowed before it too.
fn settled<A: ArgumentSource>(
    entry: &'static ToolEntry,
    gates: &[Gate],
    i: usize,
    risk: EffectiveRisk,
    arguments: &mut A,
    result: Result<Allowed, Denied>,
    allowed: &mut Vec<Allowed>,
) -> Result<(), Denied> {
    match gates[i].settle(entry, risk, arguments, result) {
        Ok(decision) => {
            allowed.push(decision);
            Ok(())
        }
        Err(denied) => Err(abandon(entry, &gates[..i], Vec::new(), denied, arguments)),
    }
}

/// Writes the `enter` record of every gate that allowed the call, then re-checks every gate's mode.
fn enter_all<A: ArgumentSource>(
    entry: &'static ToolEntry,
    gates: &[Gate],
    allowed: &[Allowed],
    risk: EffectiveRisk,
    arguments: &mut A,
) -> Result<Permit, Denied> {
    // The exits owed so far are held in the permit: if a later gate's sink or an argument's `Serialize`
    // panics, they are written as the permit unwinds.
    let mut permit = Permit::unaudited();
    match enter_from(
        entry,
        gates,
        allowed,
        risk,
        arguments,
        &mut permit,
        0,
        Waits::Blocking,
    )? {
        None => entered(entry, gates, allowed, risk, arguments, permit),
        Some(_) => unreachable!("a blocking decision is handed no record to await"),
    }
}

/// Writes the `enter` records of `gates[from..]`, pushing the `exit` each owes into `permit`. Stops at a
/// gate whose sink handed back a future to await (async decisions only): `Some` of that gate and the
/// future, its `exit` already in `permit`.
#[allow(clippy::too_many_arguments)]
fn enter_from<A: ArgumentSource>(
    entry: &'static ToolEntry,
    gates: &[Gate],
    allowed: &[Allowed],
    risk: EffectiveRisk,
    arguments: &mut A,
    permit: &mut Permit,
    from: usize,
    waits: Waits,
) -> Result<Option<(usize, crate::audit::AuditFuture)>, Denied> {
    for (i, (gate, decision)) in gates.iter().zip(allowed).enumerate().skip(from) {
        let (Some(sink), Some((record, mut exit))) = (
            gate.inner.audit.as_ref(),
            gate.enter_record(entry, decision, risk, arguments),
        ) else {
            continue;
        };
        if waits == Waits::Async
            && let Some(written) = sink.record_async(&record)
        {
            exit.arguments_digest = record.arguments_digest;
            permit.push(exit);
            return Ok(Some((i, written)));
        }
        match sink.record(&record) {
            Ok(()) => {
                exit.arguments_digest = record.arguments_digest;
                permit.push(exit);
            }
            Err(error) => {
                let denied = audit_unavailable(entry, risk, decision.mode, &error);
                return Err(enter_failed(entry, gates, i, permit, denied, arguments));
            }
        }
    }
    Ok(None)
}

/// A gate's sink failed to write the `enter` record: every other gate records the refusal (an `exit`
/// where it wrote its `enter`).
#[cold]
fn enter_failed(
    entry: &'static ToolEntry,
    gates: &[Gate],
    failed: usize,
    permit: &mut Permit,
    denied: Denied,
    arguments: &mut impl ArgumentSource,
) -> Denied {
    let failed_id = gates[failed].id();
    let others: Vec<Gate> = gates
        .iter()
        .enumerate()
        .filter(|&(j, _)| j != failed)
        .map(|(_, g)| g.clone())
        .collect();
    let mut exits = permit.take_exits();
    // The failing gate's `enter` was not written: it owes no `exit`.
    exits.retain(|exit| exit.gate.id() != failed_id);
    abandon(entry, &others, exits, denied, arguments)
}

/// The `enter` records written: re-checks every gate's mode, then the arguments an approval saw.
fn entered<A: ArgumentSource>(
    entry: &'static ToolEntry,
    gates: &[Gate],
    allowed: &[Allowed],
    risk: EffectiveRisk,
    arguments: &mut A,
    mut permit: Permit,
) -> Result<Permit, Denied> {
    for (gate, decision) in gates.iter().zip(allowed) {
        if let Err(denied) = gate.recheck(entry, decision.mode, risk) {
            let exits = permit.take_exits();
            return Err(abandon(entry, gates, exits, denied, arguments));
        }
    }
    // An approval is for the arguments it saw. A receiver behind a lock, or an argument with interior
    // mutability, may have changed while the approver thought or a record was written: written again
    // last, they must be the same.
    let approved = allowed.iter().any(|a| a.confirm);
    if approved && !arguments.unchanged(&mut permit) {
        let denied = changed(entry, risk, allowed);
        let exits = permit.take_exits();
        return Err(abandon(entry, gates, exits, denied, arguments));
    }
    if entry.manifest.untrusted_output {
        for gate in gates {
            if !gate.close_latch(entry) {
                let denied = refuse(
                    entry,
                    DenialCode::AuditUnavailable,
                    risk.get(),
                    Some(gate.mode()),
                )
                .with_detail("its `session_tainted` record: its output taints the session".into());
                let exits = permit.take_exits();
                return Err(abandon(entry, gates, exits, denied, arguments));
            }
        }
    }
    Ok(permit)
}

#[cold]
fn changed(entry: &'static ToolEntry, risk: EffectiveRisk, allowed: &[Allowed]) -> Denied {
    let mode = allowed.first().map(|a| a.mode);
    refuse(entry, DenialCode::ApprovalMismatch, risk.get(), mode).with_detail(
        "the call's arguments (or its receiver) changed after they were approved".into(),
    )
}

/// Compares the arguments an approval saw, kept in `permit` by a decision that waited, with the call's
/// arguments now: the last step before an async tool's body.
#[inline]
pub(crate) fn confirm(
    entry: &'static ToolEntry,
    permit: Result<Permit, Denied>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    match permit {
        Ok(permit) if permit.needs_confirmation() => confirm_slow(entry, permit, call),
        other => other,
    }
}

#[cold]
#[inline(never)]
fn confirm_slow(
    entry: &'static ToolEntry,
    mut permit: Permit,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    let Some(seen) = permit.take_seen() else {
        return Ok(permit);
    };
    if still_seen(call, &seen) {
        return Ok(permit);
    }
    let risk = EffectiveRisk::new(entry.manifest.risk_level, call.escalated);
    let denied = refuse(entry, DenialCode::ApprovalMismatch, risk.get(), None).with_detail(
        "the call's arguments (or its receiver) changed after they were approved".into(),
    );
    close_refused(permit.take_exits(), &denied);
    Err(denied)
}

/// [`confirm`] for an async call by name, whose permit is handed over.
pub(crate) fn confirm_handed(
    result: Result<Decided, Denied>,
    call: &CallInfo<'_>,
) -> Result<Decided, Denied> {
    match result {
        Ok(Decided(Some(mut handed))) if handed.permit.needs_confirmation() => {
            let permit = std::mem::replace(&mut handed.permit, Permit::unaudited());
            handed.permit = confirm_slow(handed.entry, permit, call)?;
            Ok(Decided(Some(handed)))
        }
        other => other,
    }
}

/// An async call's decision: made now, or waiting for an approver or a store.
#[doc(hidden)]
pub enum Entering {
    /// Decided.
    Done(Result<Permit, Denied>),
    /// Waiting: await [`Waiting::resume`].
    Waiting(Waiting),
}

/// A decision that waits for an async approver or a store, holding everything it needs (the call's
/// arguments written out), so that the future awaiting it stays `Send`.
#[doc(hidden)]
pub struct Waiting(Box<Suspended>);

struct Suspended {
    entry: &'static ToolEntry,
    gates: Vec<Gate>,
    risk: EffectiveRisk,
    allowed: Vec<Allowed>,
    arguments: WrittenArguments,
    at: Suspension,
}

/// Where a decision waits.
enum Suspension {
    /// `gates[next]` asks, in `mode`.
    Ask { next: usize, mode: Mode, ask: Ask },
    /// Every gate allowed; the sink of `gates[next]` is writing its `enter` record (the `exit` it owes
    /// is in `permit` already, with those of the gates before it).
    Enter {
        next: usize,
        permit: Permit,
        written: crate::audit::AuditFuture,
    },
}

/// [`decide_all`] for an async tool: it stops where a gate must wait.
#[cold]
fn decide_all_async(entry: &'static ToolEntry, gates: Vec<Gate>, call: &CallInfo<'_>) -> Entering {
    let risk = EffectiveRisk::new(entry.manifest.risk_level, call.escalated);
    let mut arguments = LazyArguments::new(call);
    let mut allowed = Vec::with_capacity(gates.len());
    for i in 0..gates.len() {
        let gate = &gates[i];
        let result = match gate.decide_step(entry, risk, &mut arguments, Waits::Async) {
            Step::Done(result) => result,
            Step::Ask(mode, ask) => {
                return Entering::Waiting(Waiting(Box::new(Suspended {
                    entry,
                    risk,
                    allowed,
                    arguments: arguments.write_out(),
                    at: Suspension::Ask { next: i, mode, ask },
                    gates,
                })));
            }
        };
        if let Err(denied) = settled(entry, &gates, i, risk, &mut arguments, result, &mut allowed) {
            return Entering::Done(Err(denied));
        }
    }
    let mut permit = Permit::unaudited();
    let pending = enter_from(
        entry,
        &gates,
        &allowed,
        risk,
        &mut arguments,
        &mut permit,
        0,
        Waits::Async,
    );
    match pending {
        Err(denied) => Entering::Done(Err(denied)),
        Ok(None) => Entering::Done(entered(
            entry,
            &gates,
            &allowed,
            risk,
            &mut arguments,
            permit,
        )),
        Ok(Some((next, written))) => Entering::Waiting(Waiting(Box::new(Suspended {
            entry,
            risk,
            allowed,
            arguments: arguments.write_out(),
            at: Suspension::Enter {
                next,
                permit,
                written,
            },
            gates,
        }))),
    }
}

impl Waiting {
    /// Waits for what the decision waits for, then decides the rest of it.
    pub async fn resume(self) -> Result<Permit, Denied> {
        let Suspended {
            entry,
            gates,
            risk,
            mut allowed,
            mut arguments,
            at,
        } = *self.0;
        let (mut permit, mut writing) = match at {
            Suspension::Ask { next, mode, ask } => {
                let mut asked = Some((mode, ask));
                for (i, gate) in gates.iter().enumerate().skip(next) {
                    let step = match asked.take() {
                        Some((mode, ask)) => Step::Ask(mode, ask),
                        None => gate.decide_step(entry, risk, &mut arguments, Waits::Async),
                    };
                    let result = match step {
                        Step::Done(result) => result,
                        Step::Ask(mode, ask) => {
                            gate.ask(entry, mode, risk, ask, &mut arguments).await
                        }
                    };
                    settled(entry, &gates, i, risk, &mut arguments, result, &mut allowed)?;
                }
                (Permit::unaudited(), None)
            }
            Suspension::Enter {
                next,
                permit,
                written,
            } => (permit, Some((next, written))),
        };
        let mut from = 0;
        loop {
            if let Some((i, written)) = writing.take() {
                if let Err(error) = written.await {
                    let denied = audit_unavailable(entry, risk, allowed[i].mode, &error);
                    return Err(enter_failed(
                        entry,
                        &gates,
                        i,
                        &mut permit,
                        denied,
                        &mut arguments,
                    ));
                }
                from = i + 1;
            }
            let pending = enter_from(
                entry,
                &gates,
                &allowed,
                risk,
                &mut arguments,
                &mut permit,
                from,
                Waits::Async,
            )?;
            match pending {
                None => break,
                Some(next) => writing = Some(next),
            }
        }
        entered(entry, &gates, &allowed, risk, &mut arguments, permit)
    }

    /// [`Waiting::resume`] for a call by name: the decision, to hand over to the tool's check.
    pub(crate) async fn resume_handed(self) -> Result<Decided, Denied> {
        let entry = self.0.entry;
        let permit = self.resume().await?;
        Ok(Decided(Some(Box::new(Handed {
            entry,
            permit,
            stack: stack_shape(),
        }))))
    }
}

/// [`check_not_allowed`] for an async tool.
#[cold]
#[inline(never)]
pub(crate) fn check_not_allowed_async(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Entering {
    if call.escalated.is_none()
        && let Some((mode, code)) = lone_refusal(entry, explicit)
    {
        let manifest = &entry.manifest;
        return Entering::Done(Err(refuse(entry, code, manifest.risk_level, Some(mode))));
    }
    match gates_around(entry, explicit) {
        Ok(gates) => decide_all_async(entry, gates, call),
        Err(denied) => Entering::Done(Err(denied)),
    }
}

/// Records a refusal in the log of each of `gates`: an `exit` of outcome `refused` where the gate wrote
/// the call's `enter`, a `refused` record otherwise. Every `enter` gets its `exit`.
#[cold]
fn abandon(
    entry: &'static ToolEntry,
    gates: &[Gate],
    exits: Vec<Exit>,
    denied: Denied,
    arguments: &mut impl ArgumentSource,
) -> Denied {
    for gate in gates {
        if !exits.iter().any(|exit| exit.gate.id() == gate.id()) {
            gate.record_refusal(entry, &denied, arguments);
        }
    }
    close_refused(exits, &denied);
    denied
}

/// Nanoseconds from `epoch` to `at`, at least 1 (0 means no grant).
fn since(epoch: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch).as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
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
    )
}

#[cold]
fn panicked() -> (Approval, String) {
    (
        Approval::Reject("the approver panicked".to_owned()),
        "approver".to_owned(),
    )
}

#[cold]
fn store_panicked() -> StoreError {
    StoreError::Unexpected("the store panicked".to_owned())
}

/// Every refusal of every call is made here.
#[cold]
fn refuse(entry: &'static ToolEntry, code: DenialCode, risk: Risk, mode: Option<Mode>) -> Denied {
    Denied::new(code, &entry.manifest, risk, mode)
}

#[cold]
fn no_gate(entry: &'static ToolEntry) -> Denied {
    let manifest = &entry.manifest;
    refuse(entry, DenialCode::NoGate, manifest.risk_level, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::AllowAllApprover;
    use crate::audit::MemorySink;
    use crate::policy::Risk;
    use crate::policy::{Mode, ModeSet};
    use crate::registry::Registration;
    use crate::registry::{Source, ToolManifest};

    // Tools over every risk, allowed in every mode, in FULL_AUTO only, or in SHADOW only.
    macro_rules! tools {
        ($($name:ident = $id:literal, $risk:ident, $modes:expr;)*) => {
            $(
                static $name: ToolEntry = ToolEntry::__new(
                    ToolManifest::__new(
                        $id, None, "", Risk::$risk, false, $modes, false, false,
                        Source { file: file!(), line: line!(), module_path: module_path!() },
                    ),
                    None,
                    crate::registry::Behaviour::NONE,
                );
                inventory::submit! { Registration(&$name) }
            )*
            const TOOLS: &[&ToolEntry] = &[$(&$name),*];
        };
    }

    tools! {
        READ_ALL = "scope_test.read_all", ReadOnly, ModeSet::ALL;
        READ_FULL = "scope_test.read_full", ReadOnly, ModeSet::of(&[Mode::FullAuto]);
        READ_SHADOW = "scope_test.read_shadow", ReadOnly, ModeSet::of(&[Mode::Shadow]);
        PROPOSE_ALL = "scope_test.propose_all", ProposeOnly, ModeSet::ALL;
        PROPOSE_FULL = "scope_test.propose_full", ProposeOnly, ModeSet::of(&[Mode::FullAuto]);
        LOW_ALL = "scope_test.low_all", LowWrite, ModeSet::ALL;
        LOW_FULL = "scope_test.low_full", LowWrite, ModeSet::of(&[Mode::FullAuto]);
        LOW_SHADOW = "scope_test.low_shadow", LowWrite, ModeSet::of(&[Mode::Shadow]);
        HIGH_ALL = "scope_test.high_all", HighWrite, ModeSet::ALL;
        HIGH_FULL = "scope_test.high_full", HighWrite, ModeSet::of(&[Mode::FullAuto]);
    }

    fn gates(mode: Mode) -> Vec<(&'static str, Gate)> {
        let build = |builder: crate::gate::GateBuilder| builder.mode(mode).build().unwrap();
        vec![
            ("plain", build(Gate::builder())),
            ("audited", build(Gate::builder().audit(MemorySink::new()))),
            ("deny low", build(Gate::builder().deny("scope_test.low_*"))),
            (
                "approver",
                build(Gate::builder().approver(AllowAllApprover)),
            ),
            ("two-step", build(Gate::builder().two_step_approvals())),
        ]
    }

    const CALL: CallInfo<'static> = CallInfo {
        escalated: None,
        arguments: &[],
        record_arguments: false,
    };

    // The inlined check is a cache of the table: it must let through exactly the calls that one gate
    // keeping no record allows outright, never more (that would skip a refusal or a record) and never
    // fewer (that would put allowed calls on the slow path).
    #[test]
    fn the_inlined_check_lets_through_exactly_what_one_unaudited_gate_allows() {
        for entry in TOOLS {
            for mode in Mode::ALL {
                for (name, gate) in gates(mode) {
                    let outright =
                        !gate.audits() && gate.verdict(&entry.manifest) == Some(Verdict::Allow);
                    let case = format!("{} in {mode} through the {name} gate", entry.manifest.id);
                    assert_eq!(fast_allows(entry, Some(&gate)), outright, "{case}, passed");
                    assert_eq!(
                        gate.run(|| fast_allows(entry, None)),
                        outright,
                        "{case}, entered"
                    );
                    assert!(!fast_allows(entry, None), "{case}: no gate at all");
                    let both = gate.run(|| fast_allows(entry, Some(&gate)));
                    assert!(!both, "{case}, passed and entered");
                    let nested = gate.run(|| gate.run(|| fast_allows(entry, None)));
                    assert!(!nested, "{case}, entered twice");
                    let full = check_not_allowed(entry, Some(&gate), &CALL);
                    if outright {
                        assert!(full.is_ok(), "{case}: the full check disagrees");
                    }
                }
            }
        }
    }

    // A budget takes the tools it covers off the inlined check, and only those: every other allowed
    // call stays one bit test.
    #[test]
    fn the_inlined_check_leaves_out_exactly_the_tools_a_budget_covers() {
        use crate::gate::budget::BudgetScope;
        let hour = std::time::Duration::from_secs(3600);
        for mode in Mode::ALL {
            let plain = Gate::new(mode).unwrap();
            let budgeted = [
                (BudgetScope::tool("scope_test.read_*"), "scope_test.read_"),
                (BudgetScope::RiskLevel(Risk::LowWrite), "scope_test.low_"),
                (BudgetScope::Agent, "scope_test."),
            ];
            for (scope, covered) in budgeted {
                let gate = Gate::builder()
                    .mode(mode)
                    .budget(scope.clone(), 5, hour)
                    .build()
                    .unwrap();
                for entry in TOOLS {
                    let expected =
                        fast_allows(entry, Some(&plain)) && !entry.manifest.id.starts_with(covered);
                    assert_eq!(
                        fast_allows(entry, Some(&gate)),
                        expected,
                        "{} in {mode} under a budget of {scope}",
                        entry.manifest.id
                    );
                }
            }
        }
    }

    #[test]
    fn a_gate_keeps_records_exactly_when_it_has_a_sink() {
        for mode in Mode::ALL {
            for (name, gate) in gates(mode) {
                assert_eq!(gate.audits(), name == "audited", "{name} in {mode}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Calls by name
// ---------------------------------------------------------------------------------------------------------

/// The part of a call by name's decision that needs no arguments: each gate's table (deny list, allowed
/// modes, ceiling, an approval path), so that a tool the gates refuse answers its refusal whatever its
/// arguments, before they are read. Its record has no arguments digest. What needs the arguments
/// (escalation, approvals, `enter` records, the re-check) follows in [`decide_by_name`].
///
/// `Ok(true)` says more: `gate` is the only gate, keeps no record, and its table allows the call outright,
/// so the full decision has nothing to add to the tool's own inlined check (see [`decide_by_name`]).
///
/// The gates are asked in the order of the call's own decision: the tool's `&Gate` parameter first where
/// it has one (`gate` is passed as that parameter), else the ambient gates with `gate` innermost.
#[inline]
pub(crate) fn precheck(
    entry: &'static ToolEntry,
    gate: &Gate,
    gate_parameter: bool,
) -> Result<bool, Denied> {
    let lone = STACK
        .try_with(|stack| stack.try_borrow().is_ok_and(|stack| stack.is_empty()))
        .unwrap_or(false);
    if lone {
        if gate.allows_unaudited(entry) {
            return Ok(true);
        }
        if !matches!(gate.table_verdict(entry).1, Verdict::Refuse(_)) {
            return Ok(false);
        }
    }
    precheck_slow(entry, gate, lone, gate_parameter).map(|()| false)
}

#[cold]
#[inline(never)]
fn precheck_slow(
    entry: &'static ToolEntry,
    gate: &Gate,
    lone: bool,
    gate_parameter: bool,
) -> Result<(), Denied> {
    if lone {
        return refuse_from_tables(entry, std::slice::from_ref(gate));
    }
    let gates = if gate_parameter {
        gates_around(entry, Some(gate))?
    } else {
        let ambient = STACK
            .try_with(|stack| {
                stack
                    .try_borrow()
                    .map(|stack| stack.clone())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        distinct(ambient.iter().chain([gate]))
    };
    refuse_from_tables(entry, &gates)
}

fn refuse_from_tables(entry: &'static ToolEntry, gates: &[Gate]) -> Result<(), Denied> {
    for (i, gate) in gates.iter().enumerate() {
        if let (mode, Verdict::Refuse(code)) = gate.table_verdict(entry) {
            let unknown = [ArgRef::unnamed()];
            let call = CallInfo {
                escalated: None,
                arguments: &unknown,
                record_arguments: false,
            };
            let mut arguments = LazyArguments::new(&call);
            let denied = gate.refusal(entry, mode, code);
            let denied = gate.with_taint(denied, entry.manifest.risk_level);
            gate.record_refusal(entry, &denied, &mut arguments);
            return Err(abandon(
                entry,
                &gates[..i],
                Vec::new(),
                denied,
                &mut arguments,
            ));
        }
    }
    Ok(())
}

/// A call by name, decided with its arguments in the gate it is made through, and allowed: its permit,
/// for the tool's own check to take instead of deciding again. Only [`decide_by_name`] makes one.
///
/// A call that one gate keeping no record allows outright hands nothing over: the tool's own inlined
/// check allows it again, as it would a direct call. Any other decision is handed over, and taken only by
/// the check of the same tool under the same gates: a nested call of the tool from its own body, under
/// another gate, decides on its own.
#[derive(Debug)]
pub struct Decided(Option<Box<Handed>>);

/// A decision to hand over.
#[derive(Debug)]
struct Handed {
    entry: &'static ToolEntry,
    permit: Permit,
    /// The ambient gates when it was decided: how many, and the innermost one's id.
    stack: (usize, u64),
}

/// Decides a call by name in full, inside the gate it is made through (the caller has entered it):
/// every gate around, with the arguments parsed from JSON, as a direct call is decided.
///
/// `outright` is what [`precheck`] said: a call that one gate keeping no record allows outright hands
/// nothing over, and the tool's own check, which reads the mode again, decides it as a direct call.
#[inline]
pub(crate) fn decide_by_name(
    entry: &'static ToolEntry,
    outright: bool,
    gate_parameter: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Decided, Denied> {
    if call.escalated.is_none() && outright && still_outright(entry) {
        return Ok(Decided(None));
    }
    decide_by_name_slow(entry, gate_parameter, call)
}

/// An async call by name's decision: made now, or waiting for an approver or a store.
#[doc(hidden)]
pub enum DecidingByName {
    /// Decided.
    Done(Result<Decided, Denied>),
    /// Waiting: await [`Waiting::resume_handed`] through `by_name::resume`.
    Waiting(Waiting),
}

/// [`decide_by_name`] for an async tool, which may wait for an async approver or a store.
#[inline]
pub(crate) fn decide_by_name_async(
    entry: &'static ToolEntry,
    outright: bool,
    gate_parameter: Option<&Gate>,
    call: &CallInfo<'_>,
) -> DecidingByName {
    if call.escalated.is_none() && outright && still_outright(entry) {
        return DecidingByName::Done(Ok(Decided(None)));
    }
    let entering = match call.escalated {
        None => check_not_allowed_async(entry, gate_parameter, call),
        Some(_) => check_escalated_async(entry, gate_parameter, call),
    };
    match entering {
        Entering::Done(Ok(permit)) => DecidingByName::Done(Ok(Decided(Some(Box::new(Handed {
            entry,
            permit,
            stack: stack_shape(),
        }))))),
        Entering::Done(Err(denied)) => DecidingByName::Done(Err(denied)),
        Entering::Waiting(waiting) => DecidingByName::Waiting(waiting),
    }
}

/// [`check_escalated`] for an async tool.
#[cold]
#[inline(never)]
pub(crate) fn check_escalated_async(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Entering {
    match gates_around(entry, explicit) {
        Ok(gates) => decide_all_async(entry, gates, call),
        Err(denied) => Entering::Done(Err(denied)),
    }
}

/// Whether the gate the call by name was made through (the innermost entered) still allows it outright:
/// an async call's decision runs at its first poll, and the gate may have been lowered since the
/// [`precheck`]; then the call is decided in full, so that its refusal is the gate's, not the tool's
/// error.
#[inline]
fn still_outright(entry: &'static ToolEntry) -> bool {
    STACK
        .try_with(|stack| {
            stack.try_borrow().is_ok_and(|stack| {
                stack
                    .last()
                    .is_some_and(|gate| gate.allows_unaudited(entry))
            })
        })
        .unwrap_or(false)
}

/// Decides as the tool's own check would: with its `&Gate` parameter, if it has one, first.
#[cold]
#[inline(never)]
fn decide_by_name_slow(
    entry: &'static ToolEntry,
    gate_parameter: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Decided, Denied> {
    let permit = match call.escalated {
        None => check_not_allowed(entry, gate_parameter, call)?,
        Some(_) => check_escalated(entry, gate_parameter, call)?,
    };
    Ok(Decided(Some(Box::new(Handed {
        entry,
        permit,
        stack: stack_shape(),
    }))))
}

/// How many gates are entered on this thread, and the innermost one's id.
fn stack_shape() -> (usize, u64) {
    STACK
        .try_with(|stack| {
            stack
                .try_borrow()
                .map(|stack| (stack.len(), stack.last().map_or(0, Gate::id)))
                .unwrap_or((usize::MAX, 0))
        })
        .unwrap_or((usize::MAX, 0))
}

thread_local! {
    /// The call by name this thread is about to make, decided already.
    static HANDED: std::cell::RefCell<Option<Box<Handed>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `call`, which calls the tool `decided` is for, with the decision handed to the tool's check.
/// Nothing runs between the decision (its re-check included) and the check that takes it.
#[inline]
pub(crate) fn hand<R>(decided: Decided, call: impl FnOnce() -> R) -> R {
    let _handing = hand_over(decided);
    call()
}

/// Hands `decided` over to the check of its tool, called next, until the guard is dropped.
#[inline]
pub(crate) fn hand_over(decided: Decided) -> HandOver {
    HandOver(decided.0.map(Handing::start))
}

/// A decision on the hand-over slot while it lives: see [`hand_over`].
#[doc(hidden)]
pub struct HandOver(#[allow(dead_code)] Option<Handing>);

/// The permit handed to `entry`'s check by a call by name, if there is one: the call was decided.
#[inline]
pub(crate) fn handed(entry: &'static ToolEntry) -> Option<Permit> {
    HANDED
        .try_with(|slot| {
            let mut slot = slot.try_borrow_mut().ok()?;
            match &*slot {
                Some(handed)
                    if std::ptr::eq(handed.entry, entry) && handed.stack == stack_shape() =>
                {
                    slot.take().map(|handed| handed.permit)
                }
                _ => None,
            }
        })
        .ok()
        .flatten()
}

/// A decision on the hand-over slot; dropped, on return or unwind, it puts back what was there
/// (nothing, or a call by name further out that has not reached its tool yet).
struct Handing {
    outer: Option<Box<Handed>>,
}

impl Handing {
    fn start(handed: Box<Handed>) -> Handing {
        let outer = HANDED
            .try_with(|slot| slot.borrow_mut().replace(handed))
            .ok()
            .flatten();
        Handing { outer }
    }
}

impl Drop for Handing {
    fn drop(&mut self) {
        let outer = self.outer.take();
        // A decision its tool did not take (it ran outright on its own check) is dropped here.
        let _ = HANDED.try_with(|slot| {
            if let Ok(mut slot) = slot.try_borrow_mut() {
                *slot = outer;
            }
        });
    }
}

pin_project_lite::pin_project! {
    /// [`hand`] for an async tool: the decision is handed over for the future's first poll, which runs
    /// the tool's check.
    pub(crate) struct HandAsync<F> {
        decided: Option<Decided>,
        #[pin]
        future: F,
    }
}

pub(crate) fn hand_async<F: Future>(decided: Decided, future: F) -> HandAsync<F> {
    HandAsync {
        decided: Some(decided),
        future,
    }
}

impl<F: Future> Future for HandAsync<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.project();
        match this.decided.take() {
            Some(decided) => hand(decided, || this.future.poll(cx)),
            None => this.future.poll(cx),
        }
    }
}
