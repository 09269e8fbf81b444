//! Waiting for a future from sync code, and catching a panicking future: what a sync tool's decision
//! needs to ask a store, and an async approver's caller needs to treat a panic as a refusal.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on this thread, parking it while the future waits. A future that is
/// ready at once (the in-memory store's) costs one poll and no allocation.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    if let Poll::Ready(output) = future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        return output;
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::park();
    }
}

pin_project_lite::pin_project! {
    /// A future whose panic is its output's `Err`.
    pub(crate) struct CatchUnwind<F> {
        #[pin]
        future: F,
    }
}

pub(crate) fn catch_unwind_future<F: Future>(future: F) -> CatchUnwind<F> {
    CatchUnwind { future }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, ()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = self.project().future;
        match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Err(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn block_on_waits_for_a_wake_from_another_thread() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let done = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<Waker>();
        let waker_thread = {
            let done = done.clone();
            thread::spawn(move || {
                for waker in rx {
                    thread::sleep(Duration::from_millis(20));
                    done.store(true, Ordering::Release);
                    waker.wake();
                }
            })
        };
        let mut polls = 0;
        let future = std::future::poll_fn(|cx| {
            polls += 1;
            if done.load(Ordering::Acquire) {
                return Poll::Ready(7);
            }
            tx.send(cx.waker().clone()).unwrap();
            Poll::Pending
        });
        assert_eq!(block_on(future), 7);
        assert!(polls >= 2, "it was pending, then woken");
        drop(tx);
        waker_thread.join().unwrap();
        assert_eq!(block_on(std::future::ready(3)), 3);
    }

    #[test]
    fn a_panicking_future_is_an_error() {
        let panics = catch_unwind_future(async { panic!("no") });
        assert_eq!(block_on(panics), Err::<(), ()>(()));
        assert_eq!(block_on(catch_unwind_future(async { 5 })), Ok(5));
    }
}
