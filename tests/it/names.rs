//! Names that read alike (SECURITY.md): the places that take a name no database compares as a person
//! reads it refuse, before connecting, every look-alike of the shared corpus that the rule of names
//! refuses; their plain names are taken as before.

#![cfg(feature = "postgres")]

use toolgate::Mode;
use toolgate::postgres::fleet::lower;
use toolgate::postgres::{Fleet, PostgresSink};

use crate::common::lookalikes::{HIDDEN, LOOK_ALIKES};

/// A server no one listens on: a name that passes is refused later, for the connection.
const NOWHERE: &str = "postgres://toolgate@127.0.0.1:1/none?connect_timeout=1";

/// Every look-alike of a person's name in the corpus, and each plain name with a hidden character.
fn look_alikes() -> Vec<String> {
    let mut names = Vec::new();
    for (name, alikes) in LOOK_ALIKES {
        if name.contains(['.', '~', '/']) {
            continue;
        }
        names.extend(alikes.iter().map(|a| (*a).to_owned()));
        names.extend(HIDDEN.iter().map(|h| format!("{name}{h}")));
    }
    names
}

fn refused(what: &str, name: &str, error: impl std::fmt::Display) {
    let error = error.to_string();
    assert!(
        error.contains("is refused"),
        "{what} {name:?} was not refused for its name: {error}"
    );
}

#[test]
fn a_writer_of_the_trail_named_by_a_look_alike_is_refused() {
    for name in look_alikes() {
        let Err(error) = PostgresSink::builder().writer(&name).connect(NOWHERE) else {
            panic!("the writer {name:?} connected");
        };
        refused("the writer", &name, error);
    }
    let Err(error) = PostgresSink::builder().writer("desk").connect(NOWHERE) else {
        panic!("nothing listens");
    };
    assert!(!error.to_string().contains("is refused"), "{error}");
}

#[test]
fn a_fleet_named_by_a_look_alike_is_neither_joined_nor_lowered() {
    for name in look_alikes() {
        let Err(error) = Fleet::connect(NOWHERE, &name) else {
            panic!("the fleet {name:?} was joined");
        };
        refused("the fleet", &name, error);
        let error =
            lower(NOWHERE, "toolgate", &name, Mode::Shadow, "olga", "drill").expect_err("lowered");
        refused("the fleet", &name, error);
    }
    let Err(error) = Fleet::connect(NOWHERE, "desk") else {
        panic!("nothing listens");
    };
    assert!(!error.to_string().contains("is refused"), "{error}");
}

/// Names that read as a plain name (their reading is its reading) without a letter of Cyrillic or
/// Greek, a hidden character or a compatibility form: a letter of Armenian, Hebrew or Latin's own
/// dotless `ı`, or punctuation of Unicode's common script (an en dash, a right single quote).
const OTHER_LOOK_ALIKES: &[(&str, &str)] = &[
    ("prod", "pr\u{585}d"),        // Armenian small letter oh
    ("olga", "\u{585}lga"),        // Armenian small letter oh
    ("olga", "o\u{5d5}ga"),        // Hebrew letter vav
    ("link", "l\u{131}nk"),        // Latin small letter dotless i
    ("desk-a", "desk\u{2013}a"),   // en dash
    ("o'brien", "o\u{2019}brien"), // right single quotation mark
];

/// a4_n1. The attack: a fleet, a writer of the trail and an operator's `--by` named by a spelling
/// that reads as a plain name (the reading says so) but mixes Latin with Armenian or Hebrew, or
/// puts a dotless `ı`, an en dash or a typographic quote in place of the ASCII one. The database
/// compares names by their bytes, so a name that passes is a second fleet or writer a person reads
/// as the first ("so that no two fleets or writers read alike through those", docs/fleets.md).
/// Asserted (SECURITY.md, names that read alike: "where two of them would be two names, the
/// second is refused"; a name mixing scripts a reader takes one for another is refused): each is
/// refused for its name before connecting.
#[test]
fn a4_n1_a_fleet_or_writer_named_by_a_non_cyrillic_look_alike_is_refused() {
    let mut failures = Vec::new();
    for (plain, alike) in OTHER_LOOK_ALIKES {
        assert!(
            toolgate::names::same(plain, alike),
            "{alike:?} reads as {plain:?}"
        );
        match Fleet::connect(NOWHERE, alike) {
            Err(error) if error.to_string().contains("is refused") => {}
            Err(error) => failures.push(format!("fleet {alike:?} (reads as {plain:?}): {error}")),
            Ok(_) => failures.push(format!("fleet {alike:?} joined")),
        }
        match lower(NOWHERE, "toolgate", alike, Mode::Shadow, "olga", "drill") {
            Err(error) if error.to_string().contains("is refused") => {}
            Err(error) => failures.push(format!("lower {alike:?} (reads as {plain:?}): {error}")),
            Ok(_) => failures.push(format!("lowered {alike:?}")),
        }
        match PostgresSink::builder().writer(*alike).connect(NOWHERE) {
            Err(error) if error.to_string().contains("is refused") => {}
            Err(error) => failures.push(format!("writer {alike:?} (reads as {plain:?}): {error}")),
            Ok(_) => failures.push(format!("writer {alike:?} connected")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a4_n2. The attack: `toolgate approvals approve|reject --by` a spelling that reads as `olga` but
/// mixes Latin with Armenian or Hebrew. Asserted (docs/fleets.md: the `--by` of every command that
/// answers is refused where the rule of names refuses it, mixed scripts included): exit 64, the
/// store never reached.
#[cfg(feature = "cli")]
#[test]
fn a4_n2_an_operator_named_by_an_armenian_or_hebrew_look_alike_is_refused_by_the_command() {
    let mut failures = Vec::new();
    for by in ["\u{585}lga", "o\u{5d5}ga"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["approvals", "approve", "1", "--store", NOWHERE, "--by", by])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.code() != Some(64) || !said.contains("the operator's name is refused") {
            failures.push(format!("--by {by:?}: {:?} {said}", out.status.code()));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
