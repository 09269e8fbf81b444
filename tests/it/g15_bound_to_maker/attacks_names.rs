//! Outside attacks on guarantee 15 by principal and agent names that differ only in what a reader
//! cannot tell apart: case, a trailing space, a zero-width or default-ignorable character, another
//! script, fullwidth letters, NFC against NFD.
//!
//! Each test asserts the guarantee: gates of two such principals (or agents) sharing one store never
//! run each other's approved calls. A test that fails is an attack that got through.

use std::sync::Arc;
use std::time::Duration;

use toolgate::approval::two_step::MemoryStore;
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

/// Pay an amount (attacks on names).
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atkb")]
fn pay(amount: u64) -> Result<u64, Denied> {
    Ok(amount)
}

const OTHERS: [&str; 10] = [
    "Alice",
    "alice ",
    "alice\u{200b}",
    "alice\u{3164}",
    "\u{430}lice",
    "\u{ff41}lice",
    "alice\u{0}",
    "ali\u{301}ce",
    "alic\u{e9}",
    "alice\u{fe0f}",
];

fn gate(
    store: &Arc<MemoryStore>,
    who: impl FnOnce(toolgate::gate::GateBuilder) -> toolgate::gate::GateBuilder,
) -> Gate {
    who(Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone()))
    .build()
    .unwrap()
}

/// a15_n1. The attack: alice's call is approved in a store shared with gates whose principal (then
/// agent) reads like hers; each of them makes the same call. Asserted: none runs, each is
/// `APPROVAL_PENDING` with a token of its own, and alice's call still runs once.
#[test]
fn a15_n1_an_approval_runs_no_call_of_a_principal_or_agent_named_like_its_maker() {
    let mut failures = Vec::new();
    for by_agent in [false, true] {
        for (n, other) in OTHERS.into_iter().enumerate() {
            let amount = 1500 + n as u64 + if by_agent { 100 } else { 0 };
            let store = Arc::new(MemoryStore::new(Duration::from_secs(600)).unwrap());
            let name = |b: toolgate::gate::GateBuilder, who: &str| {
                if by_agent {
                    b.agent(who)
                } else {
                    b.principal(who)
                }
            };
            let alice = gate(&store, |b| name(b, "alice"));
            let denied = alice.run(|| pay(amount)).unwrap_err();
            let token = denied.approval_token().unwrap().to_owned();
            alice.approve(&token).unwrap();
            let lookalike = gate(&store, |b| name(b, other));
            match lookalike.run(|| pay(amount)) {
                Err(d)
                    if d.code() == DenialCode::ApprovalPending
                        && d.approval_token().is_some_and(|t| t != token) => {}
                other_result => failures.push(format!(
                    "{} {other:?}: {:?}",
                    if by_agent { "agent" } else { "principal" },
                    other_result.map_err(|d| d.code())
                )),
            }
            if alice.run(|| pay(amount)).ok() != Some(amount) {
                failures.push(format!("{other:?}: alice's approved call no longer runs"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
