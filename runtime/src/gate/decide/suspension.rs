//! Running the decision: a sync call parks its thread on what the decision waits for; an async call's
//! decision stops there, holding everything it needs (the call's arguments written out, so that the
//! tool's future stays `Send`), and is awaited.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use super::arguments::{LazyArguments, WrittenArguments};
use super::commit::Refusing;
use super::driver::Next;
use super::state::Decision;
use super::waits::{Wait, Waits};
use crate::gate::Gate;
use crate::gate::call::CallInfo;
use crate::gate::denied::Denied;
use crate::gate::permit::Permit;
use crate::gate::wait::block_on;
use crate::registry::ToolEntry;

/// Decides a sync call, parking the thread where the decision waits (a budget store, the approval
/// store); it never waits for an async approver.
pub(super) fn decide_blocking(
    entry: &'static ToolEntry,
    gates: Vec<Gate>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    let mut decision = Decision::new(
        entry,
        gates,
        call,
        LazyArguments::new(call),
        Waits::Blocking,
    );
    loop {
        match decision.advance() {
            Next::Done(result) => return result,
            Next::Wait(wait) => {
                let answered = block_on(wait);
                decision.resume(answered);
            }
        }
    }
}

/// Decides an async call up to where it must wait.
pub(super) fn decide_async(
    entry: &'static ToolEntry,
    gates: Vec<Gate>,
    call: &CallInfo<'_>,
) -> Entering {
    let mut decision = Decision::new(entry, gates, call, LazyArguments::new(call), Waits::Async);
    match decision.advance() {
        Next::Done(result) => Entering::Done(result),
        Next::Wait(wait) => {
            Entering::Waiting(Waiting(Box::new((decision.write_out(), wait)), None))
        }
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

/// A decision that waits, and what it waits for; for a call of an rmcp tool gated in place, where its
/// refusal goes.
#[doc(hidden)]
pub struct Waiting(Box<(Decision<WrittenArguments>, Wait)>, Option<Outcome>);

impl Waiting {
    /// The tool the decision is for.
    pub(super) fn entry(&self) -> &'static ToolEntry {
        self.0.0.entry
    }
}

impl Waiting {
    /// Reports the decision's refusal to the server that handed the call its arguments.
    pub(super) fn reporting(mut self, outcome: Outcome) -> Waiting {
        self.1 = Some(outcome);
        self
    }

    /// Waits for what the decision waits for, then decides the rest of it.
    pub async fn resume(mut self) -> Result<Permit, Denied> {
        std::future::poll_fn(|cx| self.poll_resume(cx)).await
    }

    /// [`Waiting::resume`], polled. The decision stays in its box: moved out, it would be part of every
    /// async tool's future, which is copied on each call however it is decided.
    fn poll_resume(&mut self, cx: &mut Context<'_>) -> Poll<Result<Permit, Denied>> {
        let Waiting(held, outcome) = self;
        let mut result = loop {
            let (decision, wait) = &mut **held;
            let answered = ready!(Pin::new(wait).poll(cx));
            decision.resume(answered);
            match decision.advance() {
                Next::Done(result) => break result,
                Next::Wait(next) => held.1 = next,
            }
        };
        if let Some(outcome) = outcome {
            match &mut result {
                // The arguments were handed over as owned JSON, which nothing can change while the
                // decision waited: what the approval saw is what the call has. The target's state
                // may have changed: a call with evidence is confirmed, and its units committed, at
                // the tool's own last step.
                Ok(permit) => {
                    if permit.take_seen().is_some() && !permit.needs_confirmation() {
                        permit.commit_held();
                    }
                }
                Err(denied) => {
                    *outcome
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(denied.clone());
                }
            }
        }
        Poll::Ready(result)
    }
}

/// An async tool's decision that waited, awaited at one point of the tool's future: first the decision,
/// then, if the last comparison before the body refuses the call, the release of its budget units.
#[doc(hidden)]
pub enum Resuming {
    Deciding(Waiting),
    Refusing(Refusing),
    Done,
}

/// What [`Resuming`] comes to.
#[doc(hidden)]
pub enum Resumed {
    /// The decision: to confirm against the call's arguments now.
    Decided(Result<Permit, Denied>),
    /// The refusal of that confirmation, its units back.
    Refused(Denied),
}

impl Future for Resuming {
    type Output = Resumed;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Resumed> {
        let resumed = match &mut *self {
            Resuming::Deciding(waiting) => Resumed::Decided(ready!(waiting.poll_resume(cx))),
            Resuming::Refusing(refusing) => Resumed::Refused(ready!(Pin::new(refusing).poll(cx))),
            Resuming::Done => panic!("a `Resuming` polled again after it completed"),
        };
        *self = Resuming::Done;
        Poll::Ready(resumed)
    }
}

/// Where the refusal of a call handed its arguments ([`with_arguments`](super::in_place::with_arguments)) goes back to the caller.
pub(crate) type Outcome = std::sync::Arc<std::sync::Mutex<Option<Denied>>>;
