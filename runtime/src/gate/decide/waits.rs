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
    Record(AuditFuture),
    /// Budget stores giving back a refused call's units.
    Release(Releases),
}

/// What came of a [`Wait`].
pub(super) enum Answered {
    Budget(Result<Taken, StoreError>),
    /// `None`: the approver panicked.
    Approver(Option<(Approval, String)>),
    Store(Result<Consumed, StoreError>),
    Record(Result<(), AuditError>),
    Released,
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
            Wait::Release(releases) => Pin::new(releases).poll(cx).map(|()| Answered::Released),
        }
    }
}
