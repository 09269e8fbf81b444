//! Deciding a call: the one place where a call is allowed or refused, and the only producer of
//! refusals ([`refuse`]).
//!
//! A call is decided against every gate around it (the ambient gates, outermost first, and the tool's
//! `&Gate` argument). Each step runs over every gate before the next step starts, so that nothing asks
//! a person about a call that another gate's own checks refuse:
//!
//! 1. **the table** ([`table`]): deny list, allowed modes, the ceiling and the taint latch, worked out
//!    when the gate was built;
//! 2. **budgets** ([`budgets`]): a unit of every budget covering the call is reserved;
//! 3. **approvals** ([`approvals`]), where the table asks for one: a live session grant, else the
//!    approver or the two-step store;
//! 4. **records** ([`records`]): each gate's `enter`;
//! 5. **the commit point** ([`commit`]): what can change while a decision waits is read again (each
//!    gate's mode and latch, the grant that allowed the call, the arguments an approval saw), then what
//!    the decision reserved is made real (budget units kept, session grants made). A refusal at any
//!    step gives everything back and is recorded by every gate that took part.
//!
//! One driver ([`Decision`]) runs these steps for sync and async calls alike: where it must wait it
//! says for what ([`Wait`]); a sync call parks its thread on it, an async one awaits it
//! ([`suspension`]). Calls by name hand the decision to the tool's own check ([`hand_off`]).
//!
//! The common case, one gate that keeps no record and whose table allows the call, never reaches the
//! driver: it is one inlined bit test ([`fast_allows`]).

mod approvals;
mod arguments;
mod budgets;
mod commit;
mod hand_off;
mod records;
mod suspension;
mod table;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

pub(crate) use arguments::{ArgumentSource, LazyArguments};
pub(crate) use commit::confirm;
#[cfg(feature = "mcp")]
pub(crate) use hand_off::with_arguments;
pub use hand_off::{Decided, DecidingByName, HandOver};
pub(crate) use hand_off::{
    confirm_handed, decide_by_name, decide_by_name_async, hand_async, hand_over, handed, precheck,
};
pub use suspension::{Entering, Waiting};
pub(crate) use table::fast_allows;

use self::approvals::Approving;
use self::arguments::WrittenArguments;
use self::budgets::Reserve;
use self::records::{abandon, audit_unavailable};
use crate::approval::Approval;
use crate::approval::SessionGrant;
use crate::approval::store::{Consumed, StoreError};
use crate::audit::{AuditError, AuditFuture, Decision as Decided_};
use crate::gate::Gate;
use crate::gate::ambient::STACK;
use crate::gate::budget::{BudgetFuture, Reserved, Taken};
use crate::gate::call::{CallInfo, EffectiveRisk};
use crate::gate::denied::Denied;
use crate::gate::permit::Permit;
use crate::policy::{DenialCode, Mode, Risk, Verdict};
use crate::registry::ToolEntry;

/// Decides a call that [`fast_allows`] did not let through, its risk escalated or not.
#[cold]
#[inline(never)]
pub(crate) fn check(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    if let Some(in_place) = hand_off::take_in_place(entry) {
        return hand_off::check_in_place(entry, explicit, &in_place);
    }
    if call.escalated.is_none()
        && let Some((mode, code)) = table::lone_refusal(entry, explicit)
    {
        return Err(refuse(entry, code, entry.manifest.risk_level, Some(mode)));
    }
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
    let gates = gates_around(entry, explicit)?;
    suspension::decide_blocking(entry, gates, call)
}

/// [`check`] for an async tool: the decision may wait for an async approver or a store.
#[cold]
#[inline(never)]
pub(crate) fn check_async(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Entering {
    if let Some(in_place) = hand_off::take_in_place(entry) {
        return hand_off::check_async_in_place(entry, explicit, &in_place);
    }
    if call.escalated.is_none()
        && let Some((mode, code)) = table::lone_refusal(entry, explicit)
    {
        return Entering::Done(Err(refuse(
            entry,
            code,
            entry.manifest.risk_level,
            Some(mode),
        )));
    }
    match gates_around(entry, explicit) {
        Ok(gates) => suspension::decide_async(entry, gates, call),
        Err(denied) => Entering::Done(Err(denied)),
    }
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

/// What one gate decided of a call it allows.
#[derive(Debug, Clone)]
pub(crate) struct Allowed {
    pub(super) mode: Mode,
    pub(super) decision: Decided_,
    /// Who approved it, or granted it for the session.
    pub(super) by: Option<String>,
    /// An approval (or a grant of exact arguments) was given for the arguments as they were written:
    /// they must still be so when the body starts.
    pub(super) confirm: bool,
    /// A session grant the answer gave, made at the commit point.
    pub(super) grant: Option<SessionGrant>,
}

impl Allowed {
    fn by_policy(mode: Mode) -> Allowed {
        Allowed {
            mode,
            decision: Decided_::Allowed,
            by: None,
            confirm: false,
            grant: None,
        }
    }
}

/// Whether a decision may wait for an async approver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waits {
    /// A sync tool: it may park its own thread on a store, and cannot wait for an async approver.
    Blocking,
    /// An async tool: the decision stops and is awaited.
    Async,
}

/// What a decision waits for; each owns what it needs, so that the decision can be held across an
/// await.
pub(super) enum Wait {
    /// The budget store's answer.
    Budget(BudgetFuture),
    /// An async approver's or the approval store's answer.
    Answer(Pin<Box<dyn Future<Output = Answered> + Send>>),
    /// A sink writing an `enter` record.
    Record(AuditFuture),
}

/// What came of a [`Wait`].
pub(super) enum Answered {
    Budget(Result<Taken, StoreError>),
    /// `None`: the approver panicked.
    Approver(Option<(Approval, String)>),
    Store(Result<Consumed, StoreError>),
    Record(Result<(), AuditError>),
}

impl Future for Wait {
    type Output = Answered;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answered> {
        match &mut *self {
            // A store that panics has failed (approvers' and stores' answers catch their own).
            Wait::Budget(future) => {
                match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
                    Ok(polled) => polled.map(Answered::Budget),
                    Err(_) => Poll::Ready(Answered::Budget(Err(store_panicked()))),
                }
            }
            Wait::Answer(future) => future.as_mut().poll(cx),
            Wait::Record(future) => future.as_mut().poll(cx).map(Answered::Record),
        }
    }
}

/// Where a decision stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Table(usize),
    Budget(usize),
    Approval(usize),
    Enter(usize),
    Commit,
}

/// What one gate decided so far.
struct Held {
    /// The gate's mode and taint bit when its table was read: the state its decision is for.
    state: u8,
    verdict: Verdict,
    /// The budget units reserved, given back when dropped unless committed.
    reserved: Option<Reserved>,
    allowed: Option<Allowed>,
}

/// What the driver says: the decision, or what it waits for.
pub(super) enum Next {
    Done(Result<Permit, Denied>),
    Wait(Wait),
}

/// One call's decision, in every gate around it: the driver that sync and async calls share.
pub(super) struct Decision<A> {
    entry: &'static ToolEntry,
    gates: Vec<Gate>,
    risk: EffectiveRisk,
    arguments: A,
    waits: Waits,
    held: Vec<Held>,
    at: At,
    /// The `exit`s owed by the gates whose `enter` is written.
    permit: Permit,
    /// A refusal to give at the next step.
    failed: Option<Denied>,
    /// A gate whose sink could not write the `enter`: it records nothing of the refusal.
    unrecorded: Option<u64>,
}

impl<A: ArgumentSource> Decision<A> {
    fn new(
        entry: &'static ToolEntry,
        gates: Vec<Gate>,
        call: &CallInfo<'_>,
        arguments: A,
        waits: Waits,
    ) -> Decision<A> {
        Decision {
            entry,
            risk: EffectiveRisk::new(entry.manifest.risk_level, call.escalated),
            held: Vec::with_capacity(gates.len()),
            gates,
            arguments,
            waits,
            at: At::Table(0),
            permit: Permit::unaudited(),
            failed: None,
            unrecorded: None,
        }
    }

    /// Runs the decision until it ends or must wait. What a store answers at once (in memory) is
    /// taken without stopping.
    fn advance(&mut self) -> Next {
        loop {
            if let Some(denied) = self.failed.take() {
                return Next::Done(Err(self.fail(denied)));
            }
            let mut wait = match self.step() {
                Some(Step::Done(result)) => return Next::Done(result),
                Some(Step::Wait(wait)) => wait,
                None => continue,
            };
            match Pin::new(&mut wait).poll(&mut Context::from_waker(Waker::noop())) {
                Poll::Ready(answered) => self.resume(answered),
                Poll::Pending => return Next::Wait(wait),
            }
        }
    }

    /// One step: `None` to go on.
    fn step(&mut self) -> Option<Step> {
        let (entry, risk, count) = (self.entry, self.risk, self.gates.len());
        match self.at {
            At::Table(i) if i == count => self.at = At::Budget(0),
            At::Table(i) => {
                let gate = &self.gates[i];
                let state = gate.state();
                match gate.verdict_in(entry, risk, state) {
                    Verdict::Refuse(code) => {
                        self.failed = Some(gate.table_refusal(entry, risk, state, code));
                        // The gates after this one took no part.
                        self.gates.truncate(i + 1);
                    }
                    verdict => {
                        self.held.push(Held {
                            state,
                            verdict,
                            reserved: None,
                            allowed: None,
                        });
                        self.at = At::Table(i + 1);
                    }
                }
            }
            At::Budget(i) if i == count => self.at = At::Approval(0),
            At::Budget(i) => match self.gates[i].reserve(entry, risk) {
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
                let asked =
                    self.gates[i].approval(entry, mode, risk, &mut self.arguments, self.waits);
                match asked {
                    Approving::Done(result) => self.approved(i, result),
                    Approving::Wait(wait) => return Some(Step::Wait(wait)),
                }
            }
            At::Enter(i) if i == count => self.at = At::Commit,
            At::Enter(i) => return self.enter(i).map(Step::Wait),
            At::Commit => return Some(Step::Done(self.commit())),
        }
        None
    }

    /// Carries out what the decision waited for.
    fn resume(&mut self, answered: Answered) {
        let (entry, risk) = (self.entry, self.risk);
        match (self.at, answered) {
            (At::Budget(i), Answered::Budget(taken)) => {
                let Some(reserved) = self.held[i].reserved.take() else {
                    return;
                };
                match self.gates[i].taken(entry, risk, reserved, taken) {
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
                let result = self.gates[i].consumed(entry, mode, risk, consumed);
                self.approved(i, result);
            }
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
        let (Some(sink), Some((record, mut exit))) = (
            gate.inner.audit.as_ref(),
            gate.enter_record(entry, allowed, risk, &mut self.arguments),
        ) else {
            self.at = At::Enter(i + 1);
            return None;
        };
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

    /// The decision ends in a refusal: every gate that took part records it (an `exit` of outcome
    /// `refused` where it wrote the `enter`), and every reserved budget unit is given back.
    fn fail(&mut self, denied: Denied) -> Denied {
        let denied = denied.with_risk(self.risk.get());
        let mut exits = self.permit.take_exits();
        let gates: Vec<Gate> = match self.unrecorded {
            Some(id) => {
                exits.retain(|exit| exit.gate.id() != id);
                self.gates
                    .iter()
                    .filter(|g| g.id() != id)
                    .cloned()
                    .collect()
            }
            None => std::mem::take(&mut self.gates),
        };
        // Dropping the reservations gives the units back.
        self.held.clear();
        abandon(self.entry, &gates, exits, denied, &mut self.arguments)
    }
}

impl Decision<LazyArguments<'_>> {
    /// The decision, holding the call's arguments written out: what an async call awaits.
    fn write_out(self) -> Decision<WrittenArguments> {
        Decision {
            entry: self.entry,
            gates: self.gates,
            risk: self.risk,
            arguments: self.arguments.write_out(),
            waits: self.waits,
            held: self.held,
            at: self.at,
            permit: self.permit,
            failed: self.failed,
            unrecorded: self.unrecorded,
        }
    }
}

enum Step {
    Done(Result<Permit, Denied>),
    Wait(Wait),
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
