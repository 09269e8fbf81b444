//! Short forms of what the tests write again and again: a gate from its mode and what a test adds
//! to its builder (a gate that cannot be built fails the test), and the code of a refused call.

use std::fmt::Debug;

use toolgate::{DenialCode, Denied, Gate, GateBuilder, Mode};

/// A gate in `mode`, with what `more` adds.
pub(crate) fn built(mode: Mode, more: impl FnOnce(GateBuilder) -> GateBuilder) -> Gate {
    more(Gate::builder().mode(mode)).build().unwrap()
}

/// The code of the refusal `result` must be.
pub(crate) fn denial<T: Debug>(result: Result<T, Denied>) -> DenialCode {
    result.unwrap_err().code()
}
