//! Guarantee 18: an operator's policy file only narrows. `policy_file`: the file checked, folded into
//! the gate, replaced live, shared by a fleet's processes in `tests/postgres`, and an exhaustive test
//! that no file widens any call; `attacks`: the attacks from outside, where the policy meets approvals,
//! grants, budgets, the latch, slow sinks and argument values; `rules_off_the_call`: the argument rules
//! read off the call, on a lone gate's check and by name, while reading an argument waits;
//! `commit_point`: the commit point's reads while the gate is lowered, tainted, revoked or re-policied.

mod attacks;
mod commit_point;
mod policy_file;
mod rules_off_the_call;

use toolgate::gate::GateBuilder;
use toolgate::policy_file::LivePolicy;
use toolgate::{Gate, Mode};

/// A gate in `mode` following `live`, with what `then` adds to its builder.
fn following(mode: Mode, live: &LivePolicy, then: impl FnOnce(GateBuilder) -> GateBuilder) -> Gate {
    then(Gate::builder().mode(mode).policy(live.clone()))
        .build()
        .unwrap()
}
