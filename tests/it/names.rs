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
