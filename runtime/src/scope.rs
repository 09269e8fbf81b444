//! The ambient gate: the gates a thread has entered with `Gate::run`, or a future with `Gate::scope`.
//!
//! Gates nest as a stack, and a call must pass every gate on it, so an inner gate can only narrow what the
//! outer ones allow. A new thread starts with an empty stack: a call there is refused (`NO_GATE`) until it
//! enters a gate of its own.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::denied::{DenialCode, Denied};
use crate::gate::Gate;
use crate::policy::Verdict;
use crate::registry::ToolEntry;

thread_local! {
    static STACK: RefCell<Vec<Gate>> = const { RefCell::new(Vec::new()) };
}

/// Leaves the gate it entered when dropped, on return or unwind.
pub(crate) struct Entered {
    _not_send: PhantomData<*const ()>,
}

pub(crate) fn enter(gate: Gate) -> Entered {
    STACK.with(|stack| stack.borrow_mut().push(gate));
    Entered {
        _not_send: PhantomData,
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        // Leaving cannot fail unless the thread is being torn down, when nothing runs after it anyway.
        let _ = STACK.try_with(|stack| stack.borrow_mut().pop());
    }
}

/// Proof that a call was decided and allowed; generated code holds it for the length of the body.
#[doc(hidden)]
#[derive(Debug)]
pub struct Permit {
    _private: (),
}

/// Decides a call of `entry` against `explicit` (a `&Gate` argument of the tool) and every ambient gate.
#[inline]
pub(crate) fn check(entry: &'static ToolEntry, explicit: Option<&Gate>) -> Result<Permit, Denied> {
    let pending = STACK
        .try_with(|stack| {
            let Ok(stack) = stack.try_borrow() else {
                return Err(no_gate(entry));
            };
            match (explicit, stack.as_slice()) {
                (None, []) => Err(no_gate(entry)),
                (None, [gate]) | (Some(gate), []) => match gate.table_verdict(entry) {
                    (_, Verdict::Allow) => Ok(None),
                    (_, Verdict::NeedsApproval) => Ok(Some(vec![gate.clone()])),
                    (mode, Verdict::Refuse(code)) => Err(gate.refusal(entry, mode, code)),
                },
                (explicit, ambient) => check_all(entry, explicit.into_iter().chain(ambient)),
            }
        })
        .unwrap_or_else(|_| Err(no_gate(entry)))?;
    if let Some(gates) = pending {
        // Approvers run with the stack released, so that they may enter gates themselves.
        for gate in gates {
            gate.approve(entry, None)?;
        }
    }
    Ok(Permit { _private: () })
}

#[cold]
fn check_all<'a>(
    entry: &'static ToolEntry,
    gates: impl Iterator<Item = &'a Gate>,
) -> Result<Option<Vec<Gate>>, Denied> {
    let mut needs_approval = Vec::new();
    for gate in gates {
        match gate.table_verdict(entry) {
            (_, Verdict::Allow) => {}
            (_, Verdict::NeedsApproval) => needs_approval.push(gate.clone()),
            (mode, Verdict::Refuse(code)) => return Err(gate.refusal(entry, mode, code)),
        }
    }
    Ok((!needs_approval.is_empty()).then_some(needs_approval))
}

#[cold]
fn no_gate(entry: &'static ToolEntry) -> Denied {
    let manifest = &entry.manifest;
    Denied::new(DenialCode::NoGate, manifest, manifest.risk_level, None)
}

pin_project_lite::pin_project! {
    /// A future that has its gate as the ambient gate whenever it is polled: see [`Gate::scope`].
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct Scoped<F> {
        gate: Gate,
        #[pin]
        future: F,
    }
}

impl<F> Scoped<F> {
    pub(crate) fn new(gate: Gate, future: F) -> Scoped<F> {
        Scoped { gate, future }
    }

    /// The gate the future runs under.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = enter(this.gate.clone());
        this.future.poll(cx)
    }
}
