//! Calls by name: the part of the decision that needs no arguments, asked before they are read, and
//! the hand-off of a decision made with them to the tool's own check, which takes it instead of
//! deciding again.

use super::arguments::LazyArguments;
use super::check::{check, check_around, check_async, check_async_around};
use super::commit::{Refusing, confirm_slow};
use super::gates::{Shape, distinct, gates_around, stack_shape};
use super::records::abandon;
use super::suspension::{Entering, Waiting};
use crate::gate::Gate;
use crate::gate::ambient::STACK;
use crate::gate::call::{ArgRef, CallInfo};
use crate::gate::denied::Denied;
use crate::gate::permit::Permit;
use crate::registry::ToolEntry;
use toolgate_policy::Verdict;

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
                effects: None,
            };
            let mut arguments = LazyArguments::new(&call);
            let mut denied = gate.refusal(entry, mode, code);
            if entry.behaviour.escalate.is_some() {
                denied = denied.before_escalation();
            }
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
pub struct Decided(Option<Handed>);

/// A decision to hand over.
#[derive(Debug)]
struct Handed {
    entry: &'static ToolEntry,
    permit: Permit,
    /// The ambient gates when it was decided: how many, and the innermost one's id.
    stack: Shape,
}

/// Decides a call by name in full, inside the gate it is made through (the caller has entered it):
/// every gate around, with the arguments parsed from JSON, as a direct call is decided.
///
/// `outright` is the gate the call is made through, where [`precheck`] found that it alone allows the
/// call outright: such a call hands nothing over, and the tool's own check, which reads the mode
/// again, decides it as a direct call.
#[inline]
pub(crate) fn decide_by_name(
    entry: &'static ToolEntry,
    outright: Option<&Gate>,
    gate_parameter: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Decided, Denied> {
    if call.escalated.is_none() && outright.is_some_and(|gate| gate.allows_unaudited(entry)) {
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
    outright: Option<&Gate>,
    gate_parameter: Option<&Gate>,
    call: &CallInfo<'_>,
) -> DecidingByName {
    // An async call's decision runs at its first poll, and the gate may have been lowered since the
    // [`precheck`]: then the call is decided in full, so that its refusal is the gate's, not the
    // tool's error.
    if call.escalated.is_none() && outright.is_some_and(|gate| gate.allows_unaudited(entry)) {
        return DecidingByName::Done(Ok(Decided(None)));
    }
    let (entering, stack) = if entry.in_place.is_some() {
        (check_async(entry, gate_parameter, call), stack_shape())
    } else {
        check_async_around(entry, gate_parameter, call)
    };
    match entering {
        Entering::Done(Ok(permit)) => DecidingByName::Done(Ok(Decided(Some(Handed {
            entry,
            permit,
            stack,
        })))),
        Entering::Done(Err(denied)) => DecidingByName::Done(Err(denied)),
        Entering::Waiting(waiting) => DecidingByName::Waiting(waiting),
    }
}

/// Decides as the tool's own check would: with its `&Gate` parameter, if it has one, first.
#[cold]
#[inline(never)]
fn decide_by_name_slow(
    entry: &'static ToolEntry,
    gate_parameter: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Decided, Denied> {
    // A tool gated in place takes the arguments its server hands it, in its own check.
    let (permit, stack) = if entry.in_place.is_some() {
        (check(entry, gate_parameter, call)?, stack_shape())
    } else {
        check_around(entry, gate_parameter, call)?
    };
    Ok(Decided(Some(Handed {
        entry,
        permit,
        stack,
    })))
}

thread_local! {
    /// The call by name this thread is about to make, decided already.
    static HANDED: std::cell::RefCell<Option<Handed>> = const { std::cell::RefCell::new(None) };
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
    outer: Option<Handed>,
}

impl Handing {
    fn start(handed: Handed) -> Handing {
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

/// [`confirm`](super::commit::confirm) for an async call by name, whose permit is handed over.
pub(crate) fn confirm_handed(
    result: Result<Decided, Denied>,
    call: &CallInfo<'_>,
) -> Result<Decided, Refusing> {
    match result {
        Ok(Decided(Some(mut handed))) if handed.permit.needs_confirmation() => {
            let permit = std::mem::replace(&mut handed.permit, Permit::unaudited());
            handed.permit = confirm_slow(handed.entry, permit, call)?;
            Ok(Decided(Some(handed)))
        }
        other => other.map_err(Refusing::now),
    }
}

impl Waiting {
    /// [`Waiting::resume`] for a call by name: the decision, to hand over to the tool's check.
    pub(crate) async fn resume_handed(self) -> Result<Decided, Denied> {
        let entry = self.entry();
        let permit = self.resume().await?;
        Ok(Decided(Some(Handed {
            entry,
            permit,
            stack: stack_shape(),
        })))
    }
}
