//! The inlined check against the table it caches.

use super::*;
use crate::approval::AllowAllApprover;
use crate::audit::MemorySink;
use crate::gate::Gate;
use crate::gate::call::CallInfo;
use crate::registry::Registration;
use crate::registry::ToolEntry;
use crate::registry::{Source, ToolManifest};
use toolgate_policy::Risk;
use toolgate_policy::Verdict;
use toolgate_policy::{Mode, ModeSet};

// Tools over every risk, allowed in every mode, in FULL_AUTO only, or in SHADOW only.
macro_rules! tools {
    ($($name:ident = $id:literal, $risk:ident, $modes:expr;)*) => {
        $(
            static $name: ToolEntry = ToolEntry::__new(
                ToolManifest::__new(
                    $id, None, "", Risk::$risk, false, $modes, false, false,
                    Source { file: file!(), line: line!(), module_path: module_path!() },
                ),
                None,
                crate::registry::Behaviour::NONE,
            );
            inventory::submit! { Registration(&$name) }
        )*
        const TOOLS: &[&ToolEntry] = &[$(&$name),*];
    };
}

tools! {
    READ_ALL = "scope_test.read_all", ReadOnly, ModeSet::ALL;
    READ_FULL = "scope_test.read_full", ReadOnly, ModeSet::of(&[Mode::FullAuto]);
    READ_SHADOW = "scope_test.read_shadow", ReadOnly, ModeSet::of(&[Mode::Shadow]);
    PROPOSE_ALL = "scope_test.propose_all", ProposeOnly, ModeSet::ALL;
    PROPOSE_FULL = "scope_test.propose_full", ProposeOnly, ModeSet::of(&[Mode::FullAuto]);
    LOW_ALL = "scope_test.low_all", LowWrite, ModeSet::ALL;
    LOW_FULL = "scope_test.low_full", LowWrite, ModeSet::of(&[Mode::FullAuto]);
    LOW_SHADOW = "scope_test.low_shadow", LowWrite, ModeSet::of(&[Mode::Shadow]);
    HIGH_ALL = "scope_test.high_all", HighWrite, ModeSet::ALL;
    HIGH_FULL = "scope_test.high_full", HighWrite, ModeSet::of(&[Mode::FullAuto]);
}

fn gates(mode: Mode) -> Vec<(&'static str, Gate)> {
    let build = |builder: crate::gate::builder::GateBuilder| builder.mode(mode).build().unwrap();
    vec![
        ("plain", build(Gate::builder())),
        ("audited", build(Gate::builder().audit(MemorySink::new()))),
        ("deny low", build(Gate::builder().deny("scope_test.low_*"))),
        (
            "approver",
            build(Gate::builder().approver(AllowAllApprover)),
        ),
        ("two-step", build(Gate::builder().two_step_approvals())),
    ]
}

const CALL: CallInfo<'static> = CallInfo {
    escalated: None,
    arguments: &[],
    record_arguments: false,
    effects: None,
};

// The inlined check is a cache of the table: it must let through exactly the calls that one gate
// keeping no record allows outright, never more (that would skip a refusal or a record) and never
// fewer (that would put allowed calls on the slow path).
#[test]
fn the_inlined_check_lets_through_exactly_what_one_unaudited_gate_allows() {
    for entry in TOOLS {
        for mode in Mode::ALL {
            for (name, gate) in gates(mode) {
                let outright =
                    !gate.audits() && gate.verdict(&entry.manifest) == Some(Verdict::Allow);
                let case = format!("{} in {mode} through the {name} gate", entry.manifest.id);
                assert_eq!(fast_allows(entry, Some(&gate)), outright, "{case}, passed");
                assert_eq!(
                    gate.run(|| fast_allows(entry, None)),
                    outright,
                    "{case}, entered"
                );
                assert!(!fast_allows(entry, None), "{case}: no gate at all");
                let both = gate.run(|| fast_allows(entry, Some(&gate)));
                assert!(!both, "{case}, passed and entered");
                let nested = gate.run(|| gate.run(|| fast_allows(entry, None)));
                assert!(!nested, "{case}, entered twice");
                let full = check(entry, Some(&gate), &CALL);
                if outright {
                    assert!(full.is_ok(), "{case}: the full check disagrees");
                }
            }
        }
    }
}

// A budget takes the tools it covers off the inlined check, and only those: every other allowed
// call stays one bit test.
#[test]
fn the_inlined_check_leaves_out_exactly_the_tools_a_budget_covers() {
    use crate::gate::budget::BudgetScope;
    let hour = std::time::Duration::from_secs(3600);
    for mode in Mode::ALL {
        let plain = Gate::new(mode).unwrap();
        let budgeted = [
            (BudgetScope::tool("scope_test.read_*"), "scope_test.read_"),
            (BudgetScope::RiskLevel(Risk::LowWrite), "scope_test.low_"),
            (BudgetScope::Agent, "scope_test."),
        ];
        for (scope, covered) in budgeted {
            let gate = Gate::builder()
                .mode(mode)
                .budget(scope.clone(), 5, hour)
                .build()
                .unwrap();
            for entry in TOOLS {
                let expected =
                    fast_allows(entry, Some(&plain)) && !entry.manifest.id.starts_with(covered);
                assert_eq!(
                    fast_allows(entry, Some(&gate)),
                    expected,
                    "{} in {mode} under a budget of {scope}",
                    entry.manifest.id
                );
            }
        }
    }
}

#[test]
fn a_gate_keeps_records_exactly_when_it_has_a_sink() {
    for mode in Mode::ALL {
        for (name, gate) in gates(mode) {
            assert_eq!(gate.audits(), name == "audited", "{name} in {mode}");
        }
    }
}
