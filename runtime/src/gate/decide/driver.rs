//! The driver that sync and async calls share: it runs a decision's steps, over every gate, until the
//! decision ends or must wait, and says for what.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::approvals::{Approving, expiring};
use super::arguments::ArgumentSource;
use super::arguments::Shown;
use super::budgets::{Reserve, Units};
use super::commit::Committed;
use super::records::audit_unavailable;
use super::refusal::refuse;
use super::state::{At, Decision, Held};
use super::waits::{Allowed, Answered, Wait, Waits, Writing, sink_panicked};
use crate::gate::budget::Releases;
use crate::gate::denied::Denied;
use crate::gate::permit::{Exit, Permit};
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
                            reserved: Units::default(),
                            allowed: None,
                            held_again: false,
                        });
                        self.at = At::Table(i + 1);
                    }
                }
            }
            At::Budget(i) if i == count => self.at = At::Approval(0),
            At::Budget(i) => match self.gates[i].reserve(
                &self.held[i].table,
                entry,
                risk,
                self.held[..i].iter().map(|held| &held.reserved),
            ) {
                Reserve::Free => self.at = At::Budget(i + 1),
                Reserve::Refused(denied) => self.failed = Some(denied),
                Reserve::Waiting(reserved, wait) => {
                    // The units of the gates before this one wait for this store's answer.
                    self.waiting();
                    self.held[i].reserved.push(reserved);
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
                    Approving::Wait(wait) => {
                        self.waiting();
                        return Some(Step::Wait(wait));
                    }
                }
            }
            At::Enter(i) if i == count => self.at = At::Commit,
            At::Enter(i) => {
                // A sink may take its time, written to at once or awaited.
                if self.gates[i].audits() {
                    self.waiting();
                }
                return self.enter(i).map(Step::Wait);
            }
            At::Commit => match self.commit() {
                Ok(Committed::Done(permit)) => return Some(Step::Done(permit)),
                Ok(Committed::Charging(i, wait)) => {
                    self.at = At::Charge(i);
                    return Some(Step::Wait(wait));
                }
                Ok(Committed::Holding(i, wait)) => {
                    self.at = At::Hold(i);
                    return Some(Step::Wait(wait));
                }
                Err(denied) => self.failed = Some(denied),
            },
            // Only `resume` leaves these states.
            At::Charge(_) | At::Hold(_) => {}
            // The driver gives the refusal itself.
            At::Refused => {}
        }
        None
    }

    /// Carries out what the decision waited for.
    pub(super) fn resume(&mut self, answered: Answered) {
        let (entry, risk) = (self.entry, self.risk);
        match (self.at, answered) {
            (At::Budget(i) | At::Charge(i), Answered::Budget(taken)) => {
                let held = &mut self.held[i];
                let Some(reserved) = held.reserved.pop() else {
                    return;
                };
                match self.gates[i].taken(held.current(), entry, risk, reserved, taken) {
                    Ok(reserved) => {
                        if let Some(reserved) = reserved {
                            held.reserved.push(reserved);
                        }
                        // A unit added at the commit point: the commit point reads everything again.
                        self.at = match self.at {
                            At::Budget(i) => At::Budget(i + 1),
                            _ => At::Commit,
                        };
                    }
                    Err(denied) => self.failed = Some(denied),
                }
            }
            (At::Hold(i), Answered::Budget(held)) => {
                let charges = self.held[i]
                    .reserved
                    .first()
                    .map_or(&[][..], |r| r.charges());
                let table = self.held[i].current();
                match self.gates[i].held_again(table, entry, risk, charges, held) {
                    Ok(()) => self.at = At::Commit,
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
                // A pending request shows its operator the arguments as the log writes them: what a
                // server hands on is what the decision read, its redactions included.
                let result = result.map_err(|denied| match denied.approval_token() {
                    Some(_) => match self.arguments.get() {
                        Some(arguments) => denied.with_arguments(arguments.json.as_str().into()),
                        None => denied,
                    },
                    None => denied,
                });
                if result.is_ok() {
                    self.expires = self.expires.into_iter().chain(expires).min();
                }
                self.approved(i, result);
            }
            (_, Answered::Released) => {}
            (At::Enter(i), Answered::Record(Some(exit), Ok(()))) => {
                self.permit.push(exit);
                self.at = At::Enter(i + 1);
            }
            (At::Enter(_), Answered::Record(Some(exit), Err(error))) => {
                let mode = exit.mode;
                self.entry_failed(exit, audit_unavailable(entry, risk, mode, &error));
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
        let mode = allowed.mode;
        // A sink that panics on an `enter` has refused it.
        let asked = match self.waits {
            Waits::Async => catch_unwind(AssertUnwindSafe(|| sink.record_async(&record))),
            Waits::Blocking => Ok(None),
        };
        let written = match asked {
            Ok(Some(written)) => {
                exit.arguments_digest = record.arguments_digest;
                return Some(Wait::Record(Writing::new(written, exit)));
            }
            Ok(None) => catch_unwind(AssertUnwindSafe(|| sink.record(&record)))
                .unwrap_or_else(|_| Err(sink_panicked())),
            Err(_) => Err(sink_panicked()),
        };
        exit.arguments_digest = record.arguments_digest;
        match written {
            Ok(()) => {
                self.permit.push(exit);
                self.at = At::Enter(i + 1);
            }
            Err(error) => self.entry_failed(exit, audit_unavailable(entry, risk, mode, &error)),
        }
        None
    }

    /// A gate's sink refused the `enter` of `exit`: it is handed that `exit` (the sink may have handed
    /// the `enter` on before it failed), and the gate records nothing more of the call.
    fn entry_failed(&mut self, exit: Exit, denied: Denied) {
        self.unrecorded = Some(exit);
        self.failed = Some(denied);
    }
}

enum Step {
    /// Allowed: every refusal is carried out by [`Decision::fail`], at the loop's next turn.
    Done(Permit),
    Wait(Wait),
}
