//! Outside attacks on guarantee 11 by a fleet's name: a second fleet named by a spelling that a
//! person reads as a lowered fleet's name, but that the rule of names lets through and the database
//! takes for another fleet.
//!
//! Each test asserts what SECURITY.md promises ("names with the same reading are one name ... where
//! two of them would be two names, the second is refused"; docs/fleets.md: "so that no two fleets
//! or writers read alike"). A test that fails is an attack that got through.

use crate::support::fleet::*;

/// a4_11_n1. The attack: fleet `prod` is lowered to SHADOW for an incident; a process then joins
/// `prօd` (an Armenian `օ`), which every reader takes for `prod`, and `toolgate fleet lower --fleet
/// prod` never names. Asserted: the look-alike is refused, or its gate runs no higher than the
/// lowered fleet it reads as.
#[test]
fn a4_11_n1_a_fleet_that_reads_as_a_lowered_fleet_joins_no_gate_above_the_lowering() {
    let _serial = common::serial();
    let url = database("a4_11_n1");
    let prod = Fleet::connect(&url, "prod").expect("the fleet");
    let member = prod
        .join(Gate::builder().mode(Mode::FullAuto))
        .expect("joined");
    fleet::lower(&url, "toolgate", "prod", Mode::Shadow, "ana", "incident 42").unwrap();
    let alike = "pr\u{585}d";
    assert!(toolgate::names::same("prod", alike));
    match Fleet::connect(&url, alike) {
        Err(error) => assert!(
            error.to_string().contains("is refused"),
            "refused for another cause: {error}"
        ),
        Ok(fleet) => {
            let gate = fleet
                .join(Gate::builder().mode(Mode::FullAuto))
                .expect("joined");
            assert_eq!(
                gate.mode(),
                Mode::Shadow,
                "a gate of fleet {alike:?}, which reads as the lowered `prod`, runs at {}",
                gate.mode()
            );
            assert!(
                gate.run(|| work(1)).is_err(),
                "a write ran through a gate of {alike:?} while `prod` is at SHADOW"
            );
        }
    }
    drop(member);
}
