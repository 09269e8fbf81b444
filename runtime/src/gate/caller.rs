//! Who a call is made for, where one gate serves several: the name a transport authenticated (an HTTP
//! principal, an OAuth subject), set for every poll of the call's future. A two-step approval and a
//! session grant are bound to it as well as to the gate's own principal, so that callers sharing a gate
//! never run each other's approved calls.

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

thread_local! {
    static CALLER: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
}

pin_project_lite::pin_project! {
    /// A future that has `caller` as the caller of the calls it makes, whenever it is polled.
    pub(crate) struct ActingFor<F> {
        caller: Arc<str>,
        #[pin]
        future: F,
    }
}

/// Has the calls `future` makes be made for `caller`.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) fn acting_for<F: Future>(caller: Arc<str>, future: F) -> ActingFor<F> {
    ActingFor { caller, future }
}

/// Puts back the caller that was there, on return or unwind.
struct Restore(Option<Arc<str>>);

impl Drop for Restore {
    fn drop(&mut self) {
        let outer = self.0.take();
        let _ = CALLER.try_with(|slot| *slot.borrow_mut() = outer);
    }
}

impl<F: Future> Future for ActingFor<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let outer = CALLER
            .try_with(|slot| slot.borrow_mut().replace(Arc::clone(this.caller)))
            .ok()
            .flatten();
        let _restore = Restore(outer);
        this.future.poll(cx)
    }
}

/// The caller of the call being decided on this thread, if a transport named one.
pub(crate) fn current() -> Option<Arc<str>> {
    CALLER.try_with(|slot| slot.borrow().clone()).ok().flatten()
}

/// Who a call is made for, as an approval is bound to it and an operator is shown it: the gate's
/// principal, and the caller where it is another name (`writer (writer:alice)`).
pub(crate) fn principal_of(gate: Option<&str>, caller: Option<&str>) -> Option<String> {
    match (gate, caller) {
        (gate, None) => gate.map(str::to_owned),
        (None, Some(caller)) => Some(caller.to_owned()),
        (Some(gate), Some(caller)) if gate == caller => Some(gate.to_owned()),
        (Some(gate), Some(caller)) => Some(format!("{gate} ({caller})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caller_is_set_for_each_poll_and_put_back_after() {
        assert_eq!(current(), None);
        let inner = acting_for("bob".into(), async { current() });
        let outer = acting_for("alice".into(), async move {
            let before = current();
            let inner = inner.await;
            (before, inner, current())
        });
        let seen = block_on(outer);
        assert_eq!(
            seen,
            (
                Some("alice".into()),
                Some("bob".into()),
                Some("alice".into())
            )
        );
        assert_eq!(current(), None);
    }

    #[test]
    fn callers_of_one_gate_are_told_apart_and_one_name_is_not_doubled() {
        assert_eq!(
            principal_of(Some("writer"), None).as_deref(),
            Some("writer")
        );
        assert_eq!(
            principal_of(None, Some("w:alice")).as_deref(),
            Some("w:alice")
        );
        assert_eq!(principal_of(Some("w"), Some("w")).as_deref(), Some("w"));
        assert_eq!(
            principal_of(Some("writer"), Some("writer:alice")).as_deref(),
            Some("writer (writer:alice)")
        );
        assert_ne!(
            principal_of(Some("writer"), Some("writer:alice")),
            principal_of(Some("writer"), Some("writer:bob"))
        );
        assert_eq!(principal_of(None, None), None);
    }

    fn block_on<F: Future>(future: F) -> F::Output {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut future = std::pin::pin!(future);
        loop {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
        }
    }
}
