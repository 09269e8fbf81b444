//! The driver that sync and async calls share: it runs a decision's steps, over every gate, until the
//! decision ends or must wait, and says for what.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::approvals::{Approving, expiring};
use super::arguments::ArgumentSource;
use super::arguments::Shown;
use super::budgets::Reserve;
use super::records::audit_unavailable;
use super::refusal::refuse;
use super::state::{At, Decision, Held};
use super::waits::{Allowed, Answered, Wait, Waits};
use crate::gate::budget::Releases;
use crate::gate::denied::Denied;
use crate::gate::permit::Permit;
use crate::gate::{Gate, grants};
use toolgate_policy::{DenialCode, Mode, Verdict};

/// What the driver says: the decision, or what it waits for.
pub(super) enum Next {
    Done(Result<Permit, Denied>),
    Wait(Wait),
}

impl<A: ArgumentSource> Decision<A> {
    /// Runs the decision until it ends or must wait. What a store answers at once (in memory) is
    /// taken without stopping.
    pub(super) fn advance(&mut self) -> Next {
        loop {
            let mut wait = match self.failed.take() {
                Some(denied) if self.at == At::Refused => return Next::Done(Err(denied)),
                Some(denied) => {
                    let denied = self.fail(denied);
                    match self.given_back(denied) {
                        Ok(wait) => wait,
                        Err(denied) => return Next::Done(Err(denied)),
                    }
                }
                None => match self.step() {
                    Some(Step::Done(permit)) => return Next::Done(Ok(permit)),
                    Some(Step::Wait(wait)) => wait,
                    None => continue,
                },
            };
            match Pin::new(&mut wait).poll(&mut Context::from_waker(Waker::noop())) {
                Poll::Ready(answered) => self.resume(answered),
                Poll::Pending => return Next::Wait(wait),
            }
        }
    }

    /// A refusal, given once the budget units its decision reserved are back (what to wait for), or
    /// at once where it reserved none: a caller told of it may ask again at once, in any process
    /// sharing the store.
    fn given_back(&mut self, denied: Denied) -> Result<Wait, Denied> {
        if self.releases.is_empty() {
            return Err(denied);
        }
        self.at = At::Refused;
        self.failed = Some(denied);
        Ok(Wait::Release(Releases::new(std::mem::take(
            &mut self.releases,
        ))))
    }

    /// One step: `None` to go on. Its only caller is `advance`'s loop.
    #[inline(always)]
    fn step(&mut self) -> Option<Step> {
        let (entry, risk, count) = (self.entry, self.risk, self.gates.len());
        match self.at {
            At::Table(i) if i == count => {
                self.at = At::Budget(0);
                if entry.manifest.has_effects()
                    && let Err(denied) = self.effects_ready()
                {
                    self.failed = Some(denied);
                }
            }
            At::Table(i) => {
                let gate = &self.gates[i];
                let state = gate.state();
                let table = gate.table();
                let refused = match gate.verdict_in(&table, entry, risk, state) {
                    Verdict::Refuse(code) => Err(gate.table_refusal(entry, risk, state, code)),
                    verdict => {
                        match Gate::argument_refusal(
                            &table,
                            entry,
                            risk,
                            state,
                            &mut self.arguments,
                        ) {
                            Some(denied) => Err(denied),
                            None => Ok(verdict),
                        }
                    }
                };
                match refused {
                    Err(denied) => {
                        self.failed = Some(denied);
                        // The gates after this one took no part.
                        self.gates.truncate(i + 1);
                    }
                    Ok(verdict) => {
                        self.held.push(Held {
                            state,
                            table,
                            now: None,
                            verdict,
                            revocations: 0,
                            reserved: None,
                            allowed: None,
                        });
                        self.at = At::Table(i + 1);
                    }
                }
            }
            At::Budget(i) if i == count => self.at = At::Approval(0),
            At::Budget(i) => match self.gates[i].reserve(&self.held[i].table, entry, risk) {
                Reserve::Free => self.at = At::Budget(i + 1),
                Reserve::Refused(denied) => self.failed = Some(denied),
                Reserve::Waiting(reserved, wait) => {
                    self.held[i].reserved = Some(reserved);
                    return Some(Step::Wait(wait));
                }
            },
            At::Approval(i) if i == count => self.at = At::Enter(0),
            At::Approval(i) => {
                let mode = Mode::from_index(self.held[i].state);
                if self.held[i].verdict == Verdict::Allow {
                    self.held[i].allowed = Some(Allowed::by_policy(mode));
                    self.at = At::Approval(i + 1);
                    return None;
                }
                let gate = &self.gates[i];
                self.held[i].revocations = grants::lock(&gate.inner.approvals.grants).revocations();
                let shown = self.shown.as_deref().unwrap_or(Shown::NOTHING);
                let asked =
                    gate.approval(entry, mode, risk, &mut self.arguments, shown, self.waits);
                match asked {
                    Approving::Done(result) => self.approved(i, result),
                    Approving::Wait(wait) => return Some(Step::Wait(wait)),
                }
            }
            At::Enter(i) if i == count => self.at = At::Commit,
            At::Enter(i) => return self.enter(i).map(Step::Wait),
            At::Commit => match self.commit() {
                Ok(permit) => return Some(Step::Done(permit)),
                Err(denied) => self.failed = Some(denied),
            },
            // The driver gives the refusal itself.
            At::Refused => {}
        }
        None
    }

    /// Carries out what the decision waited for.
    pub(super) fn resume(&mut self, answered: Answered) {
        let (entry, risk) = (self.entry, self.risk);
        match (self.at, answered) {
            (At::Budget(i), Answered::Budget(taken)) => {
                let Some(reserved) = self.held[i].reserved.take() else {
                    return;
                };
                match self.gates[i].taken(&self.held[i].table, entry, risk, reserved, taken) {
                    Ok(reserved) => {
                        self.held[i].reserved = reserved;
                        self.at = At::Budget(i + 1);
                    }
                    Err(denied) => self.failed = Some(denied),
                }
            }
            (At::Approval(i), Answered::Approver(answer)) => {
                let mode = Mode::from_index(self.held[i].state);
                let result = self.gates[i].answered(entry, mode, risk, answer);
                self.approved(i, result);
            }
            (At::Approval(i), Answered::Store(consumed)) => {
                let mode = Mode::from_index(self.held[i].state);
                let (consumed, expires) = expiring(consumed);
                let result = self.gates[i].consumed(entry, mode, risk, consumed, self.shown());
                if result.is_ok() {
                    self.expires = self.expires.into_iter().chain(expires).min();
                }
                self.approved(i, result);
            }
            (_, Answered::Released) => {}
            (At::Enter(i), Answered::Record(Ok(()))) => self.at = At::Enter(i + 1),
            (At::Enter(i), Answered::Record(Err(error))) => {
                let mode = Mode::from_index(self.held[i].state);
                self.entry_failed(i, audit_unavailable(entry, risk, mode, &error));
            }
            // An answer to a question not asked: the driver's own invariant, and it refuses.
            _ => {
                let mode = self.gates.first().map(Gate::mode);
                self.failed = Some(refuse(
                    entry,
                    DenialCode::ApprovalRequired,
                    risk.get(),
                    mode,
                ));
            }
        }
    }

    fn approved(&mut self, i: usize, result: Result<Allowed, Denied>) {
        match result {
            Ok(allowed) => {
                self.held[i].allowed = Some(allowed);
                self.at = At::Approval(i + 1);
            }
            Err(denied) => self.failed = Some(denied),
        }
    }

    /// Writes `gates[i]`'s `enter` record: at once, or a future to await (async calls only).
    fn enter(&mut self, i: usize) -> Option<Wait> {
        let (entry, risk) = (self.entry, self.risk);
        let gate = &self.gates[i];
        let allowed = self.held[i].allowed.as_ref()?;
        let (Some(sink), Some((mut record, mut exit))) = (
            gate.inner.audit.as_ref(),
            gate.enter_record(entry, allowed, risk, &mut self.arguments),
        ) else {
            self.at = At::Enter(i + 1);
            return None;
        };
        record.rollback = self
            .shown()
            .plan
            .as_ref()
            .map(crate::approval::effects::Rollback::to_json);
        if self.waits == Waits::Async
            && let Some(written) = sink.record_async(&record)
        {
            exit.arguments_digest = record.arguments_digest;
            self.permit.push(exit);
            return Some(Wait::Record(written));
        }
        match sink.record(&record) {
            Ok(()) => {
                exit.arguments_digest = record.arguments_digest;
                self.permit.push(exit);
                self.at = At::Enter(i + 1);
            }
            Err(error) => {
                let mode = allowed.mode;
                self.entry_failed(i, audit_unavailable(entry, risk, mode, &error));
            }
        }
        None
    }

    /// `gates[i]`'s sink could not write the `enter`: it owes no `exit`, and records nothing more.
    fn entry_failed(&mut self, i: usize, denied: Denied) {
        self.unrecorded = Some(self.gates[i].id());
        self.failed = Some(denied);
    }
}

enum Step {
    /// Allowed: every refusal is carried out by [`Decision::fail`], at the loop's next turn.
    Done(Permit),
    Wait(Wait),
}
