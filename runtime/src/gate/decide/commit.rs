//! The commit point: the last step before a body runs.
//!
//! A decision can wait (for a budget store, an approver, the approval store, a sink): meanwhile a gate
//! can be lowered, its session tainted, a grant revoked, a receiver changed. So everything that can
//! change is read again here, for every gate that decided the call, and only then is what the
//! decision reserved made real: the budget units kept, the session grants an answer gave made (in a
//! clean session only). Any refusal here gives everything back. Between this point and the body there is
//! no user code and no I/O.

use std::borrow::Cow;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Instant;

use super::arguments::{ArgumentSource, still_seen};
use super::budgets::Reserve;
use super::effects::confirm_evidence;
use super::expiry::still_unexpired;
use super::refusal::{refuse, store_panicked};
use super::state::Decision;
use super::table::since;
use super::waits::Wait;
use crate::approval::SessionGrant;
use crate::audit::{AuditRecord, Decision as Decided, Stage};
use crate::gate::budget::Releases;
use crate::gate::call::{CallInfo, EffectiveRisk};
use crate::gate::compile::TAINTED;
use crate::gate::denied::Denied;
use crate::gate::permit::{Permit, close_refused};
use crate::gate::{Gate, grants};
use crate::registry::ToolEntry;
use toolgate_policy::{DenialCode, Mode, Verdict};

/// What the commit point comes to, short of a refusal.
pub(super) enum Committed {
    /// The call runs.
    Done(Permit),
    /// A unit of a budget that a replacement of `gates[i]`'s policy added is asked for: the answer to
    /// wait for, then the commit point again.
    Charging(usize, Wait),
    /// The call waited for its approver: whether `gates[i]`'s store still holds the units reserved
    /// before, the answer to wait for, then the commit point again.
    Holding(usize, Wait),
}

impl<A: ArgumentSource> Decision<A> {
    /// Reads again what may have changed while the call was decided, then commits the call; or
    /// waits for the units of a budget that a replaced policy added, and reads everything again.
    pub(super) fn commit(&mut self) -> Result<Committed, Denied> {
        let entry = self.entry;
        // The arguments, read by their `Serialize`, and the target's state, read by the tool's probe,
        // are the application's code, which may wait: they come first, and each gate's state and
        // policy are read after them, with no user code between them and the body. A policy replaced
        // while they were read has its rules read too.
        for _ in 0..MAX_REREADS {
            // The generation is stored before its table (under the gate's mode lock, one
            // replacement at a time): a newer one is waited for, the moment it takes to be stored.
            for (gate, held) in self.gates.iter().zip(&mut self.held) {
                let now = gate.inner.generation.load(Ordering::Acquire);
                held.now = (now > held.table.generation).then(|| {
                    loop {
                        let table = gate.table();
                        if table.generation >= now {
                            break table;
                        }
                        std::thread::yield_now();
                    }
                });
            }
            self.arguments_hold()?;
            // The target's state last: no user code (an argument's `Serialize` included) runs
            // between this read and the re-check of each gate's state below.
            self.evidence_holds()?;
            let settled = self.gates.iter().zip(&self.held).all(|(gate, held)| {
                gate.inner.generation.load(Ordering::Acquire) <= held.current().generation
            });
            if settled {
                self.approval_unexpired()?;
                for i in 0..self.gates.len() {
                    self.still_allowed(i)?;
                }
                for i in 0..self.gates.len() {
                    if let Some(wait) = self.hold_again(i)? {
                        return Ok(Committed::Holding(i, wait));
                    }
                }
                for i in 0..self.gates.len() {
                    if let Some(wait) = self.charge_added(i)? {
                        return Ok(Committed::Charging(i, wait));
                    }
                }
                return self.made_real().map(Committed::Done);
            }
        }
        let mode = self.gates.first().map(Gate::mode);
        let denied = refuse(entry, DenialCode::ApprovalRequired, self.risk.get(), mode)
            .with_detail(
                "the operator's policy kept changing while the call's arguments were read".into(),
            );
        Err(denied)
    }

    /// Whether the call's arguments still hold: those an approval saw, or a record shows, the same
    /// (written again and compared); those the operator's argument rules read, passing the rules of
    /// each gate's table now, as they are after the decision's waits.
    fn arguments_hold(&mut self) -> Result<(), Denied> {
        let (entry, risk) = (self.entry, self.risk);
        let slot = slot_of(entry);
        // An approval is for the arguments it saw. A receiver behind a lock, or an argument with
        // interior mutability, may have changed while the approver thought or a record was written:
        // written again last, they must be the same.
        let approved = self
            .held
            .iter()
            .any(|h| h.allowed.as_ref().is_some_and(|a| a.confirm));
        let ruled = self
            .held
            .iter()
            .any(|h| h.current().narrowing.has_argument_rules(slot));
        let compared = approved || (ruled && self.gates.iter().any(Gate::audits));
        if compared && !self.arguments.unchanged(&mut self.permit) {
            let mode = self
                .held
                .first()
                .and_then(|h| h.allowed.as_ref())
                .map(|a| a.mode);
            return Err(changed(entry, risk, mode));
        }
        if !ruled {
            return Ok(());
        }
        if !compared {
            self.arguments.read_again(&mut self.permit);
        }
        for (gate, held) in self.gates.iter().zip(&self.held) {
            // Unchanged arguments passed the rules of the decision's own table already.
            let (table, fresh) = (held.current(), held.now.is_some());
            if (fresh || !compared)
                && let Some(denied) =
                    Gate::argument_refusal(table, entry, risk, gate.state(), &mut self.arguments)
            {
                return Err(denied);
            }
        }
        Ok(())
    }

    /// Makes real what the decision reserved: the latch closed by a tool with untrusted output, the
    /// session grants an answer gave, the budget units kept.
    fn made_real(&mut self) -> Result<Permit, Denied> {
        let (entry, risk) = (self.entry, self.risk);
        if entry.manifest.untrusted_output {
            for i in 0..self.gates.len() {
                if !self.gates[i].close_latch(entry) {
                    let mode = self.gates[i].mode();
                    let denied =
                        refuse(entry, DenialCode::AuditUnavailable, risk.get(), Some(mode))
                            .with_detail(
                                "its `session_tainted` record: its output taints the session"
                                    .into(),
                            );
                    return Err(denied);
                }
            }
        }
        for (gate, held) in self.gates.iter().zip(&mut self.held) {
            if let Some(allowed) = &mut held.allowed
                && let Some(grant) = allowed.grant.take()
            {
                let by = allowed.by.clone().unwrap_or_default();
                let asked_at = held.revocations;
                gate.grant(entry, risk, grant, &by, asked_at, &mut self.arguments);
            }
        }
        let mut permit = std::mem::replace(&mut self.permit, Permit::unaudited());
        if self
            .held
            .iter()
            .any(|held| held.current().budgets.is_some())
        {
            self.leave_marks(&mut permit);
        }
        let confirming = permit.needs_confirmation();
        for held in &mut self.held {
            for reserved in held.reserved.drain() {
                // An async call compares its arguments once more after this: its units are kept then.
                if confirming {
                    permit.hold(reserved);
                } else {
                    reserved.commit();
                }
            }
        }
        Ok(permit)
    }

    /// Hands the permit the marks the call leaves for the rules over history once it ends without an
    /// error.
    #[cold]
    #[inline(never)]
    fn leave_marks(&self, permit: &mut Permit) {
        let slot = slot_of(self.entry);
        for held in &self.held {
            if let Some(budgets) = &held.current().budgets
                && !budgets.marks(slot).is_empty()
            {
                permit.mark_on_success(budgets.store.clone(), budgets.marks(slot).to_vec());
            }
        }
    }

    /// Once a call waited while it held budget units (an approver thought, a store or a sink took its
    /// time), asks `gates[i]`'s store whether it still holds the units it reserved: meanwhile a unit
    /// may have left its window, or an operator reset its budget, and the call would run counted
    /// nowhere. `Some`: the store's answer to wait for (a unit lost is taken again, or the call
    /// refused).
    fn hold_again(&mut self, i: usize) -> Result<Option<Wait>, Denied> {
        let approved = self.held.iter().any(|h| {
            h.allowed
                .as_ref()
                .is_some_and(|a| a.decision == Decided::Approved)
        });
        let held = &mut self.held[i];
        if !(approved || self.waited) || held.held_again {
            return Ok(None);
        }
        held.held_again = true;
        let Some(reserved) = held.reserved.first() else {
            return Ok(None);
        };
        match catch_unwind(AssertUnwindSafe(|| reserved.hold())) {
            Ok(future) => Ok(Some(Wait::Budget(future))),
            Err(_) => Err(self.gates[i].unavailable(self.entry, self.risk, store_panicked())),
        }
    }

    /// Reserves a unit of each budget that a replacement of `gates[i]`'s policy added while the call
    /// was decided (the units of the budgets it kept are held already): a budget is decided again at
    /// the commit point, as every other rule the replacement adds. `Some`: the store's answer to wait
    /// for.
    fn charge_added(&mut self, i: usize) -> Result<Option<Wait>, Denied> {
        let held = &mut self.held[i];
        let Some(table) = &held.now else {
            return Ok(None);
        };
        match self.gates[i].reserve_added(table, self.entry, self.risk, &held.reserved) {
            Reserve::Free => Ok(None),
            Reserve::Refused(denied) => Err(denied),
            Reserve::Waiting(reserved, wait) => {
                held.reserved.push(reserved);
                Ok(Some(wait))
            }
        }
    }

    /// Whether `gates[i]` still allows the call: its mode and session as they are now, its policy
    /// (the gate's table now), and the grant that allowed it still live.
    fn still_allowed(&mut self, i: usize) -> Result<(), Denied> {
        let (entry, risk) = (self.entry, self.risk);
        let gate = &self.gates[i];
        let held = &self.held[i];
        let table = held.current();
        let now = gate.state();
        // The mode only goes down and the latch only closes: an unchanged state and policy are the
        // decision itself. A changed state lets the call run only if it is allowed there outright,
        // since an approval was given for the state it was asked in. A policy replaced in the same
        // state leaves an approval standing where the new one still asks for it: the approver saw
        // this call, in this state, with these arguments (compared already, and the new policy's
        // argument rules read with them).
        let repolicied = held.now.is_some();
        if now != held.state || repolicied {
            let approved = held
                .allowed
                .as_ref()
                .is_some_and(|a| a.decision != Decided::Allowed);
            let code = match gate.verdict_in(table, entry, risk, now) {
                Verdict::Allow => None,
                Verdict::Refuse(code) => Some(code),
                Verdict::NeedsApproval if now == held.state && approved => None,
                Verdict::NeedsApproval => Some(DenialCode::ApprovalRequired),
            };
            if let Some(code) = code {
                let denied = gate.table_refusal(entry, risk, now, code);
                // Tainted while it was decided: the approval or the verdict it had was for a clean
                // session.
                return Err(match gate.taint_of(risk.get()) {
                    Some(taint)
                        if (now ^ held.state) & TAINTED != 0 && denied.detail().is_none() =>
                    {
                        denied.with_detail(
                            format!("{taint}, while the call was being decided").into(),
                        )
                    }
                    _ => denied,
                });
            }
        }
        let granted = held
            .allowed
            .as_ref()
            .is_some_and(|a| a.decision == Decided::Granted);
        if granted && gate.granted(entry, risk, &mut self.arguments).is_none() {
            let mode = Mode::from_index(now);
            return Err(
                refuse(entry, DenialCode::ApprovalRequired, risk.get(), Some(mode)).with_detail(
                    "the session grant that allowed it was revoked or expired while it was decided"
                        .into(),
                ),
            );
        }
        Ok(())
    }
}

impl Gate {
    /// Makes a session grant and records it: at the commit point, and only while the session is clean.
    /// The check and the grant are made under the grants' lock, which the latch takes to revoke them
    /// after it closes: a grant racing the latch is either refused here or revoked there. A grant is
    /// made only once its `session_granted` record is written: a sink that refuses the record leaves
    /// the grant unmade (the call it came with, approved, still runs once).
    fn grant<A: ArgumentSource>(
        &self,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        grant: SessionGrant,
        by: &str,
        revocations: u64,
        arguments: &mut A,
    ) {
        let binding = arguments.binding();
        let mut held = grants::lock(&self.inner.approvals.grants);
        let now = Instant::now();
        // Grants revoked since it was asked: the answer runs its own call, and grants nothing.
        let revoked = held.revocations() != revocations;
        if revoked || self.tainted() || !held.can_grant(&grant, binding.is_some(), now) {
            return;
        }
        if let Some(sink) = &self.inner.audit {
            let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
            let scope = if grant.is_exact() {
                "these arguments"
            } else {
                "every call"
            };
            let record = AuditRecord {
                arguments_digest: grant
                    .is_exact()
                    .then(|| binding.as_ref().map(|(_, shown)| shown.clone()))
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
            match catch_unwind(AssertUnwindSafe(|| sink.record(&record))) {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::error!(target: "toolgate::audit", %error, tool = %record.tool, "the session_granted record could not be written: no grant made");
                    return;
                }
                Err(_) => return,
            }
        }
        let caller = crate::gate::caller::current();
        // A grant for one caller of a gate several share is not the gate's: the inlined check, which
        // knows no caller, never uses it.
        let anyone = caller.is_none();
        let made = held.grant(
            entry.manifest.id,
            risk.get(),
            grant,
            grants::Bound {
                arguments: binding.as_ref().map(|(digest, _)| digest.clone()),
                caller,
            },
            by,
            now,
        );
        if !made || !anyone || self.inner.audit.is_some() {
            return;
        }
        // A grant of the whole tool at its declared risk or above, in a gate that keeps no record: the
        // inlined check may use it, unless a budget counts the tool's calls.
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        let table = self.inner.table.load();
        let counted = [&self.inner.budgets, &table.budgets]
            .into_iter()
            .flatten()
            .any(|b| b.covers(slot, entry.manifest.risk_level));
        let whole = !grant.is_exact() && risk.get() >= entry.manifest.risk_level && !counted;
        if let (true, Some(until), Some(end)) = (
            whole,
            self.inner.approvals.granted_until.get(slot),
            now.checked_add(grant.ttl()),
        ) {
            until.fetch_max(since(self.inner.approvals.epoch, end), Ordering::AcqRel);
        }
    }
}

#[cold]
fn changed(entry: &'static ToolEntry, risk: EffectiveRisk, mode: Option<Mode>) -> Denied {
    refuse(entry, DenialCode::ApprovalMismatch, risk.get(), mode).with_detail(
        "the call's arguments (or its receiver) changed after they were approved, or read by the \
         operator's argument rules"
            .into(),
    )
}

/// How many times the commit point reads the arguments again for a policy replaced meanwhile, before
/// it refuses the call.
const MAX_REREADS: usize = 4;

fn slot_of(entry: &'static ToolEntry) -> usize {
    entry.slot.load(Ordering::Relaxed) as usize
}

/// Compares the arguments an approval saw, kept in `permit` by a decision that waited, with the call's
/// arguments now: the last step before an async tool's body. The budget units the permit holds are
/// kept if they are the same, given back if not: the refusal is given once they are back.
#[inline]
pub(crate) fn confirm(
    entry: &'static ToolEntry,
    permit: Result<Permit, Denied>,
    call: &CallInfo<'_>,
) -> Result<Permit, Refusing> {
    match permit {
        Ok(permit) if permit.needs_confirmation() => confirm_slow(entry, permit, call),
        Ok(permit) => Ok(permit),
        Err(denied) => Err(Refusing::now(denied)),
    }
}

#[cold]
#[inline(never)]
pub(super) fn confirm_slow(
    entry: &'static ToolEntry,
    mut permit: Permit,
    call: &CallInfo<'_>,
) -> Result<Permit, Refusing> {
    let risk = EffectiveRisk::new(entry.manifest.risk_level, call.escalated);
    // The arguments first, the target's state last, as at the commit point.
    let denied = match permit.take_seen() {
        Some(seen) if !still_seen(call, &seen) => changed(entry, risk, None),
        _ => match confirm_evidence(entry, &mut permit, call.effects, risk)
            .and_then(|()| still_unexpired(entry, &permit, risk))
        {
            Err(denied) => denied,
            Ok(()) => {
                permit.commit_held();
                return Ok(permit);
            }
        },
    };
    let releases = permit.give_back_held();
    close_refused(permit.take_exits(), &denied);
    Err(Refusing(Box::new((Some(denied), Releases::new(releases)))))
}

/// A refusal at the last step before an async tool's body, to await: given once the budget units the
/// call held are back, as every refusal is. Boxed, so that the tool's future stays small.
#[doc(hidden)]
#[must_use = "a future does nothing unless awaited"]
pub struct Refusing(Box<(Option<Denied>, Releases)>);

impl Refusing {
    pub(super) fn now(denied: Denied) -> Refusing {
        Refusing(Box::new((Some(denied), Releases::new(Vec::new()))))
    }
}

impl Future for Refusing {
    type Output = Denied;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Denied> {
        let (denied, releases) = &mut *self.0;
        if Pin::new(releases).poll(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(
            denied
                .take()
                .expect("a `Refusing` polled again after it completed"),
        )
    }
}
