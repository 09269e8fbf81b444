//! Outside attacks on `policy replay` over a fleet's PostgreSQL trail: a writer whose chain breaks
//! while others verify (the exit status an operator's CI reads), a writer name that carries control
//! and bidi characters into the report, and one writer's rows used as another's.
//!
//! Each test asserts the guarantee as the documentation states it; a failing test is an attack that
//! got through.

use crate::support::trail::*;
use toolgate::policy_file::{PolicyFile, ReplayFilter, Ruling};
use toolgate::postgres::replay_trail;

use crate::g12_postgres_trail::replay::{BOB_DENIED, NONE, gate, policy};

/// east (alice) and west (bob) each mark three times under no policy.
fn two_writers(url: &str, none: &PolicyFile) {
    let east = gate(url, "east", "alice", none);
    let west = gate(url, "west", "bob", none);
    for i in 0..3 {
        east.run(|| mark(format!("g23-east-{i}"))).unwrap();
        west.run(|| mark(format!("g23-west-{i}"))).unwrap();
    }
}

/// Copies every row of `from` to a writer named by the SQL literal `to`, as a role that may insert
/// into the trail could.
fn copy_writer(url: &str, from: &str, to: &str) {
    let columns = query(
        url,
        "SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM information_schema.columns
         WHERE table_schema = 'toolgate' AND table_name = 'audit' AND column_name <> 'writer'
           AND coalesce(column_default, '') NOT LIKE 'nextval%' AND is_identity = 'NO'
           AND is_generated = 'NEVER'",
    )[0][0]
        .clone()
        .unwrap();
    query(
        url,
        &format!(
            "INSERT INTO toolgate.audit (writer, {columns}) SELECT {to}, {columns}
             FROM toolgate.audit WHERE writer = '{from}' ORDER BY seq"
        ),
    );
}

/// The application's `policy replay --store` over a trail where west's chain breaks after two of
/// bob's calls that flip: the status must say the trail does not verify (3), not that calls flip
/// (1), so that a CI step that reads the status sees the break.
#[test]
fn g23_a_writer_that_breaks_after_a_flip_makes_the_replay_exit_3() {
    use clap::Parser;
    #[derive(Parser)]
    enum App {
        #[command(subcommand)]
        Policy(toolgate::cli::PolicyCommand),
    }
    let url = database("g23_replay_exit");
    let none = policy("none.toml", NONE);
    two_writers(&url, &none);
    query(
        &url,
        "UPDATE toolgate.audit SET line = replace(line, 'g23-west-2', 'g23-west-9')
         WHERE writer = 'west' AND line LIKE '%g23-west-2%' AND stage = 'enter'",
    );
    let report = replay_trail(
        &url,
        "toolgate",
        &policy("candidate.toml", BOB_DENIED),
        std::slice::from_ref(&none),
        &ReplayFilter::default(),
    )
    .unwrap();
    assert!(report.is_broken() && report.flips_any(), "{report}");
    let dir = common::Scratch::new("g23-replay-exit");
    let (none_path, strict_path) = (dir.path("none.toml"), dir.path("strict.toml"));
    std::fs::write(&none_path, NONE).unwrap();
    std::fs::write(&strict_path, BOB_DENIED).unwrap();
    let App::Policy(command) = App::parse_from([
        "app".to_owned(),
        "policy".to_owned(),
        "replay".to_owned(),
        strict_path.display().to_string(),
        "--store".to_owned(),
        url.clone(),
        "--in-force".to_owned(),
        none_path.display().to_string(),
    ]);
    assert_eq!(command.run(), 3);
}

/// A writer's name is text from the trail. A role that may insert rows names a writer with a
/// newline, a bidi override and ESC, whose second line forges another writer's verdict. The report
/// must show it escaped, on its own line.
#[test]
fn g23_a_writer_name_is_shown_escaped_in_the_report() {
    let url = database("g23_replay_writer_name");
    let none = policy("none.toml", NONE);
    two_writers(&url, &none);
    copy_writer(
        &url,
        "west",
        r"E'ghost\u202e\u001b[2J\nwriter east verifies: 6 records'",
    );
    let report = replay_trail(
        &url,
        "toolgate",
        &policy("candidate.toml", BOB_DENIED),
        std::slice::from_ref(&none),
        &ReplayFilter::default(),
    )
    .unwrap();
    let shown = report.to_string();
    assert!(
        !shown.chars().any(|c| c == '\u{202e}' || c == '\u{1b}'),
        "{shown:?}"
    );
    assert_eq!(
        shown
            .lines()
            .filter(|l| l.starts_with("writer east verifies"))
            .count(),
        1,
        "{shown}"
    );
    // What `policy replay --json` prints.
    let json = report.to_json();
    assert!(!json.contains('\u{202e}'), "{json}");
}

/// West's rows copied whole under a new writer name verify as a chain of their own (each row holds
/// the line a JSONL log would, which names no writer). The replay then counts bob's three calls as
/// six: the flip set an operator trusts doubles, with nothing said. The same calls (the same
/// records, by reference) must be counted once, or the report must warn.
#[test]
fn g23_a_writers_rows_copied_under_another_name_are_not_counted_twice() {
    let url = database("g23_replay_copied");
    let none = policy("none.toml", NONE);
    two_writers(&url, &none);
    copy_writer(&url, "west", "'west-copy'");
    let report = replay_trail(
        &url,
        "toolgate",
        &policy("candidate.toml", BOB_DENIED),
        std::slice::from_ref(&none),
        &ReplayFilter::default(),
    )
    .unwrap();
    let bob: u64 = report
        .flips
        .iter()
        .filter(|r| {
            r.principal.as_deref() == Some("bob")
                && r.flip.from == Ruling::Allowed
                && r.flip.to == Ruling::Refused
        })
        .map(|r| r.calls)
        .sum();
    assert!(
        bob == 3 || !report.is_intact(),
        "bob's 3 calls counted {bob} times, the trail said intact:\n{report}"
    );
}
