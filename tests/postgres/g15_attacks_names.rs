//! Outside attacks on guarantee 15 in PostgreSQL by principal and agent names that read alike: the
//! store compares them in SQL, where a collation, a padded type or a trimmed value could make two
//! names one.
//!
//! Asserted: an answer to one principal's (or agent's) call never runs the same call of a gate whose
//! principal (or agent) differs from it only in case, a trailing space, a character no one sees,
//! another script or fullwidth letters, through one shared store. A test that fails is an attack
//! that got through.

use crate::support::bank::*;

#[test]
fn a15_p1_an_answer_runs_no_call_of_a_principal_or_agent_named_like_its_maker() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "a15_p1_lookalikes") else {
        return;
    };
    let gate_of = |principal: &str, agent: &str| {
        Gate::builder()
            .mode(Mode::FullAuto)
            .approval_store(PostgresStore::connect(&url).unwrap())
            .principal(principal)
            .agent(agent)
            .build()
            .unwrap()
    };
    let mut failures = Vec::new();
    let lookalikes = [
        "Bob",
        "bob ",
        " bob",
        "bob\u{200b}",
        "bob\u{3164}",
        "b\u{43e}b",
        "\u{ff42}ob",
        "bob\u{a0}",
    ];
    for (n, other) in lookalikes.into_iter().enumerate() {
        for by_agent in [false, true] {
            let cents = 7000 + n as u64 * 2 + u64::from(by_agent);
            let bob = gate_of("bob", "desk");
            let them = if by_agent {
                gate_of("bob", &other.replace("bob", "desk"))
            } else {
                gate_of(other, "desk")
            };
            let bobs = token(bob.run(|| refund("acme".into(), cents)));
            bob.answer(&bobs, crate::support::approve("ops")).unwrap();
            let before = REFUNDS.load(Ordering::SeqCst);
            let theirs = them.run(|| refund("acme".into(), cents));
            if theirs.is_ok() || REFUNDS.load(Ordering::SeqCst) != before {
                failures.push(format!(
                    "{} {other:?}: ran on bob's answer",
                    if by_agent { "agent" } else { "principal" }
                ));
                continue;
            }
            if bob.run(|| refund("acme".into(), cents)).is_err() {
                failures.push(format!("{other:?}: bob's own approved call no longer runs"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a4_15_n1. The attack: as a15_p1, with principals and agents spelled with letters the rule of names
/// lets through: an Armenian `օ` (`bօb`, which reads as `bob`), an Armenian `ս` (`deսk`) and a
/// Hebrew `ו` (`bוb`). Asserted (guarantee 15: where a name binds what is stored to its maker, its bytes are
/// compared): bob's answer runs no call of theirs, and bob's own still runs.
#[test]
fn a4_15_n1_an_answer_runs_no_call_of_a_maker_named_by_an_armenian_or_hebrew_look_alike() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "a4_15_n1") else {
        return;
    };
    let gate_of = |principal: &str, agent: &str| {
        Gate::builder()
            .mode(Mode::FullAuto)
            .approval_store(PostgresStore::connect(&url).unwrap())
            .principal(principal)
            .agent(agent)
            .build()
            .unwrap()
    };
    let mut failures = Vec::new();
    for (n, (principal, agent)) in [
        ("b\u{585}b", "desk"),
        ("bob", "de\u{57d}k"),
        ("b\u{5d5}b", "desk"),
    ]
    .into_iter()
    .enumerate()
    {
        let cents = 7100 + n as u64;
        let bob = gate_of("bob", "desk");
        let them = gate_of(principal, agent);
        let bobs = token(bob.run(|| refund("acme".into(), cents)));
        bob.answer(&bobs, crate::support::approve("ops")).unwrap();
        let before = REFUNDS.load(Ordering::SeqCst);
        let theirs = them.run(|| refund("acme".into(), cents));
        if theirs.is_ok() || REFUNDS.load(Ordering::SeqCst) != before {
            failures.push(format!("{principal:?}/{agent:?}: ran on bob's answer"));
            continue;
        }
        if bob.run(|| refund("acme".into(), cents)).is_err() {
            failures.push(format!(
                "{principal:?}/{agent:?}: bob's own approved call no longer runs"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
