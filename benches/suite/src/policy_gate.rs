//! A gate following an operator's policy file, for counting what the policy costs a call: a direct
//! call of a tool that no rule names, and a call by name of a tool that argument rules cover.

use toolgate::Gate;
use toolgate::policy_file::{LivePolicy, PolicyFile};

/// The policy: a deny rule of `gate.delete`, and two argument rules of the call-by-name tool `add`
/// (`a` within 0..=1000, `b` one of 40 and 41), which the arguments `{"a":2,"b":40}` pass. No rule
/// names `gate.add`.
pub const POLICY: &str = r#"format = 1

[defaults]
deny = ["gate.delete"]

[[defaults.arguments]]
tool = "add"
parameter = "a"
min = 0
max = 1000

[[defaults.arguments]]
tool = "add"
parameter = "b"
one_of = [40, 41]
"#;

/// A gate in [`crate::gate_tools::MODE`] following [`POLICY`], with no audit sink and no approver.
///
/// # Panics
///
/// If the policy does not check against the linked tools, or two linked tools share an id.
pub fn gate() -> Gate {
    let file = PolicyFile::parse("bench.toml", POLICY).unwrap_or_else(|e| panic!("{e}"));
    Gate::builder()
        .mode(crate::gate_tools::MODE)
        .policy(LivePolicy::new(file))
        .build()
        .expect("the benchmarks' tools have distinct ids")
}
