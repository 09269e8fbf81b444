//! What the benchmarks of toolgate share: the tools they call, each with a twin that has no `#[tool]`,
//! the rmcp servers they compare against, and a way to run a future that never waits.
//!
//! See `BENCHMARKS.md` at the repository root for the figures and how to reproduce them.

use std::pin::pin;
use std::task::{Context, Poll, Waker};

pub mod audit;
pub mod by_name;
pub mod gate_tools;
pub mod mcp;
pub mod policy_gate;

/// Runs a future that completes on its first poll, as every future benchmarked here does: the same
/// driver for each side of a comparison, with no executor in the measurement.
///
/// # Panics
///
/// If the future is not ready on its first poll.
#[inline]
pub fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a benchmarked future waited; it is expected to complete at once"),
    }
}
