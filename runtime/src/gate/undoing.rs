//! The call a rollback undoes, named in every record written while the rollback runs: a
//! thread-local stack, its guard, and the future that sets it around each poll.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

thread_local! {
    static UNDOING: RefCell<Vec<Arc<str>>> = const { RefCell::new(Vec::new()) };
}

/// The call being undone on this thread, as its `enter` record's reference, if a rollback runs here
/// now.
pub(crate) fn origin() -> Option<String> {
    UNDOING
        .try_with(|stack| stack.borrow().last().map(|origin| origin.to_string()))
        .ok()
        .flatten()
}

/// Names `origin` in the records written on this thread until it is dropped.
pub(crate) struct Undoing(());

impl Undoing {
    pub(crate) fn enter(origin: &Arc<str>) -> Undoing {
        let _ = UNDOING.try_with(|stack| stack.borrow_mut().push(Arc::clone(origin)));
        Undoing(())
    }
}

impl Drop for Undoing {
    fn drop(&mut self) {
        let _ = UNDOING.try_with(|stack| stack.borrow_mut().pop());
    }
}

/// A future whose every poll runs with `origin` named ([`Undoing`]), on whatever thread polls it.
pub(crate) struct Undo<F: ?Sized> {
    pub(crate) origin: Arc<str>,
    pub(crate) future: Pin<Box<F>>,
}

impl<F: Future + ?Sized> Future for Undo<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _undoing = Undoing::enter(&self.origin);
        self.future.as_mut().poll(cx)
    }
}
