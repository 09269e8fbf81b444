//! Outside attacks on guarantees 2 and 3 by the spelling of a deny rule given to a gate in code: a
//! rule that reads like a linked tool's id but is not it, byte for byte.
//!
//! Asserted: no gate is built with such a rule ("a deny rule matches no tool: then no gate can be
//! built at all"), or the rule refuses the tool it reads as. A test that fails is an attack that got
//! through.

use toolgate::{Denied, Gate, Mode, tool};

/// Purge a cache (attacks on names).
#[tool(risk = "LOW_WRITE", domain = "atkd")]
fn purge(cache: String) -> Result<String, Denied> {
    Ok(cache)
}

/// a03_n1. The attack: deny rules for `atkd.purge` written in another case, with spaces, with a
/// zero-width or default-ignorable character, another script, a fullwidth or one-dot-leader dot,
/// and globs spelled the same ways. Asserted: the gate is not built, or `atkd.purge` is refused.
#[test]
fn a03_n1_a_deny_rule_that_reads_like_a_tool_builds_no_gate_or_denies_it() {
    let mut failures = Vec::new();
    for rule in [
        "ATKD.purge",
        "atkd.Purge",
        "atkd.purge ",
        " atkd.purge",
        "atkd.purge\u{200b}",
        "atkd.purge\u{3164}",
        "\u{430}tkd.purge",
        "atkd\u{ff0e}purge",
        "atkd\u{2024}purge",
        "atkd.purg\u{435}",
        "ATKD.*",
        "atkd.\u{2217}",
        "atkd.*\u{200b}",
        "\u{ff41}tkd.*",
    ] {
        let Ok(gate) = Gate::builder().mode(Mode::FullAuto).deny(rule).build() else {
            continue;
        };
        if let Ok(ran) = gate.run(|| purge("c1".into())) {
            failures.push(format!(
                "{rule:?}: a gate was built and `atkd.purge` ran ({ran})"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
