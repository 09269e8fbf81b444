//! Guarantee 3 (Deny first), against user code that runs between a decision and a body (sinks,
//! approvers, an argument's `Serialize`, `escalate`), in every declaration form.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::Ordering::SeqCst;
use toolgate::Mode;

use crate::common::gates;
use crate::fixtures::user_code::*;

#[test]
fn g3_a_domain_deny_rule_refuses_a_renamed_attribute_tool() {
    let gate = gates::denying(Mode::PartialAuto, "users.*");
    let before = FORMS.load(SeqCst);
    let r1 = gate.run(users_forms::call_renamed);
    let r2 = gate.run(users_forms::outer);
    assert_eq!(
        FORMS.load(SeqCst),
        before,
        "a purge tool of the users toolset ran under deny(\"users.*\"): {r1:?} {r2:?}"
    );
}

#[test]
fn g3_deny_glob_covers_sub_domains() {
    // `users.*` (the README's own example shape) against `users.admin.purge_all`
    let gate = gates::denying(Mode::PartialAuto, "users.*");
    let r = gate.run(purge_all);
    eprintln!("users.* vs users.admin.purge_all: {r:?}");
    // recorded as an observation: the docs do not say whether `*` crosses a dot.
}
