//! What a gate's step says of a call it allows, and what a decision waits for.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::refusal::store_panicked;
use crate::approval::Approval;
use crate::approval::SessionGrant;
use crate::approval::store::{Consumed, StoreError};
use crate::audit::{AuditError, AuditFuture, Decision as Decided};
use crate::gate::budget::{BudgetFuture, Releases, Taken};
use crate::gate::permit::{Exit, abandon_enter};
use toolgate_policy::Mode;

/// What one gate decided of a call it allows.
#[derive(Debug, Clone)]
pub(super) struct Allowed {
    pub(super) mode: Mode,
    pub(super) decision: Decided,
    /// Who approved it, or granted it for the session.
    pub(super) by: Option<String>,
    /// An approval (or a grant of exact arguments) was given for the arguments as they were written:
    /// they must still be so when the body starts.
    pub(super) confirm: bool,
    /// A session grant the answer gave, made at the commit point.
    pub(super) grant: Option<SessionGrant>,
}

impl Allowed {
    pub(super) fn by_policy(mode: Mode) -> Allowed {
        Allowed {
            mode,
            decision: Decided::Allowed,
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
    Record(Writing),
    /// Budget stores giving back a refused call's units.
    Release(Releases),
}

/// What came of a [`Wait`].
pub(super) enum Answered {
    Budget(Result<Taken, StoreError>),
    /// `None`: the approver panicked.
    Approver(Option<(Approval, String)>),
    Store(Result<Consumed, StoreError>),
    /// The sink's answer, and the `exit` the call owes it (`None` only once taken).
    Record(Option<Exit>, Result<(), AuditError>),
    Released,
}

/// A sink writing an async call's `enter` record, and the `exit` the call will owe it: dropped before
/// the sink answered (the call's future was), the sink is handed that `exit` as `cancelled`.
pub(super) struct Writing {
    future: AuditFuture,
    exit: Option<Exit>,
}

impl Writing {
    pub(super) fn new(future: AuditFuture, exit: Exit) -> Writing {
        Writing {
            future,
            exit: Some(exit),
        }
    }

    /// The sink's answer; a sink that panics has refused the record.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Answered> {
        let polled = catch_unwind(AssertUnwindSafe(|| self.future.as_mut().poll(cx)))
            .unwrap_or_else(|_| Poll::Ready(Err(sink_panicked())));
        polled.map(|written| Answered::Record(self.exit.take(), written))
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        if let Some(exit) = self.exit.take() {
            abandon_enter(exit, None);
        }
    }
}

/// What a sink that panicked on an `enter` record is taken to have answered.
pub(super) fn sink_panicked() -> AuditError {
    AuditError::new("the audit sink panicked")
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
            Wait::Record(writing) => writing.poll(cx),
            Wait::Release(releases) => Pin::new(releases).poll(cx).map(|()| Answered::Released),
        }
    }
}
