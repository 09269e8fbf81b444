//! The ambient gate: the gates a thread has entered with `Gate::run`, or a future with `Gate::scope`.
//!
//! Gates nest as a stack, and a call must pass every gate on it, so an inner gate can only narrow what the
//! outer ones allow. A new thread starts with an empty stack: a call there is refused (`NO_GATE`) until it
//! enters a gate of its own.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::gate::Gate;

thread_local! {
    /// The gates entered on this thread, outermost first.
    pub(super) static STACK: RefCell<Vec<Gate>> = const { RefCell::new(Vec::new()) };
}

/// Leaves the gate it entered when dropped, on return or unwind.
#[doc(hidden)]
pub struct Entered {
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

impl Gate {
    /// Runs `f` with this gate as the ambient gate of the current thread: the tools `f` calls are decided
    /// by it (and by every gate entered around it).
    #[inline]
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let _entered = enter(self.clone());
        f()
    }

    /// Wraps a future so that this gate is the ambient gate whenever it is polled, on whatever thread and
    /// executor polls it.
    pub fn scope<F: Future>(&self, future: F) -> Scoped<F> {
        Scoped::new(self.clone(), future)
    }
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
