//! A candidate policy replayed over the PostgreSQL trail: every writer's chain verified in the same
//! pass, each flip located by writer and `seq`, a writer whose row was edited said first and not
//! replayed past the edit; and the application's `policy replay --store`.

use crate::support::trail::*;
use toolgate::audit::{AuditSink, Decision};
use toolgate::policy_file::{LivePolicy, PolicyFile, ReplayFilter, Ruling};
use toolgate::postgres::replay_trail;

pub(crate) const NONE: &str = "format = 1\n";
pub(crate) const BOB_DENIED: &str = "format = 1\n[principals.bob]\ndeny = [\"fa.mark\"]\n";

pub(crate) fn policy(name: &str, text: &str) -> PolicyFile {
    PolicyFile::parse(name, text).unwrap_or_else(|e| panic!("{e}"))
}

/// A gate of `principal` writing to the trail as `writer`, following `file`.
pub(crate) fn gate(url: &str, writer: &str, principal: &str, file: &PolicyFile) -> Gate {
    Gate::builder()
        .mode(Mode::PartialAuto)
        .principal(principal)
        .policy(LivePolicy::new(file.clone()))
        .audit(sink(url, writer, Duration::from_secs(10)))
        .build()
        .unwrap()
}

#[test]
fn a_trail_is_replayed_writer_by_writer_and_an_edited_writer_is_said_first() {
    let url = database("replay_trail");
    let none = policy("none.toml", NONE);
    let candidate = policy("candidate.toml", BOB_DENIED);
    {
        let east = gate(&url, "east", "alice", &none);
        let west = gate(&url, "west", "bob", &none);
        for i in 0..3 {
            east.run(|| mark(format!("east-{i}"))).unwrap();
            west.run(|| mark(format!("west-{i}"))).unwrap();
        }
    }
    let report = replay_trail(
        &url,
        "toolgate",
        &candidate,
        std::slice::from_ref(&none),
        &ReplayFilter::default(),
    )
    .unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.chains.len(), 2, "{report}");
    assert_eq!((report.calls, report.decided), (6, 6), "{report}");
    assert_eq!(report.flips.len(), 1, "{report}");
    let row = &report.flips[0];
    assert_eq!(
        (row.tool.as_str(), row.principal.as_deref(), row.calls),
        ("fa.mark", Some("bob"), 3)
    );
    assert_eq!(
        (row.flip.from, row.flip.to),
        (Ruling::Allowed, Ruling::Refused)
    );
    // Each flip's record is located in its writer's chain: the enter records of west's calls.
    let seqs: Vec<(Option<&str>, u64)> = row
        .seqs
        .iter()
        .map(|at| (at.writer.as_deref(), at.seq))
        .collect();
    let enters = query(
        &url,
        "SELECT seq FROM toolgate.audit WHERE writer = 'west' AND stage = 'enter' ORDER BY seq",
    );
    let expected: Vec<(Option<&str>, u64)> = enters
        .iter()
        .map(|r| (Some("west"), r[0].as_deref().unwrap().parse().unwrap()))
        .collect();
    assert_eq!(seqs, expected);
    let shown = report.to_string();
    assert!(shown.contains("writer east verifies: 6 records"), "{shown}");
    assert!(
        shown.contains("fa.mark  bob        allowed -> refused  3      west#"),
        "{shown}"
    );

    // West's second call edited in place: its chain breaks there, and only its first call is replayed.
    query(
        &url,
        "UPDATE toolgate.audit SET line = replace(line, 'west-1', 'west-9') WHERE writer = 'west' AND line LIKE '%west-1%' AND stage = 'enter'",
    );
    let report = replay_trail(
        &url,
        "toolgate",
        &candidate,
        std::slice::from_ref(&none),
        &ReplayFilter::default(),
    )
    .unwrap();
    assert!(report.is_broken(), "{report}");
    assert_eq!(report.calls, 4, "east's three and west's first: {report}");
    assert_eq!(report.flips[0].calls, 1, "{report}");
    let shown = report.to_string();
    assert!(
        shown.contains("writer west DOES NOT VERIFY: line 3 breaks the chain"),
        "{shown}"
    );
}

#[test]
fn the_applications_policy_replay_reads_the_trail_of_a_store() {
    let url = database("replay_store");
    let desk = common::example("cli", "clap,policy-file,postgres");
    let dir = common::Scratch::new("replay-store");
    let none = dir.path("none.toml");
    let strict = dir.path("strict.toml");
    std::fs::write(&none, NONE).unwrap();
    std::fs::write(
        &strict,
        "format = 1\n[defaults]\ndeny = [\"deploy.delete\"]\n",
    )
    .unwrap();
    {
        let digest = policy("none.toml", NONE).digest().to_owned();
        let sink = sink(&url, "desk-1", Duration::from_secs(10));
        for (call, tool) in [(1, "deploy.status"), (2, "deploy.delete")] {
            let mut record = AuditRecord::new(Stage::Enter, tool, Mode::FullAuto, 1);
            record.call = call;
            record.principal = Some("alice".into());
            record.decision = Some(Decision::Approved);
            record.policy_digest = Some(digest.clone());
            sink.record(&record).unwrap();
        }
    }
    let run = |args: &[&str]| crate::common::run_program(&desk, args);
    let (strict, none) = (strict.display().to_string(), none.display().to_string());
    let (code, text) = run(&[
        "policy",
        "replay",
        &strict,
        "--store",
        &url,
        "--in-force",
        &none,
    ]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.starts_with("writer desk-1 verifies: 2 records"),
        "{text}"
    );
    assert!(
        text.contains("deploy.delete  alice      asks -> refused  1      desk-1#2"),
        "{text}"
    );
    let (code, text) = run(&["policy", "replay", &strict, "--in-force", &none]);
    assert_eq!(code, Some(2), "neither a log nor a store: {text}");
    let (code, text) = run(&[
        "policy",
        "replay",
        &strict,
        "--store",
        "postgres://nobody@127.0.0.1:1/none",
        "--in-force",
        &none,
    ]);
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("the trail cannot be read"), "{text}");
}

/// A call's ruling by the rules logged only travels in its trail line, which still verifies.
#[test]
fn a_shadow_ruling_is_in_the_trail_and_its_chain_verifies() {
    let url = database("shadow_trail");
    let file = policy(
        "ops.toml",
        "format = 1\n[shadow.principals.alice]\ndeny = [\"fa.mark\"]\n",
    );
    {
        let alice = gate(&url, "east", "alice", &file);
        alice.run(|| mark("shadowed".to_owned())).unwrap();
        let bob = gate(&url, "west", "bob", &file);
        bob.run(|| mark("plain".to_owned())).unwrap();
    }
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let lines = query(
        &url,
        "SELECT writer, line FROM toolgate.audit WHERE stage = 'enter' ORDER BY writer",
    );
    let east = lines[0][1].as_deref().unwrap();
    assert!(
        east.contains(r#""rule_in_shadow":"refused (DENY_LISTED) by fa.mark (ops.toml:3:9)""#),
        "{east}"
    );
    let west = lines[1][1].as_deref().unwrap();
    assert!(!west.contains("rule_in_shadow"), "{west}");
    assert!(ran("shadowed") && ran("plain"));
}

// A rule over history replayed over a trail of two writers: a call is decided on the calls of every
// writer recorded before it, by the times of their records.
#[test]
fn a_rule_over_history_is_replayed_on_the_calls_of_every_writer_before_each() {
    use crate::g13_budgets::history::{backup, drop_table};
    let url = database("replay_history");
    let none = policy("none.toml", NONE);
    {
        let east = gate(&url, "east", "alice", &none);
        let west = gate(&url, "west", "alice", &none);
        // east drops before any backup; west backs up; east drops again. East's chain comes first
        // in the trail: its second drop must be decided after west's backup.
        east.run(|| drop_table("first".into())).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        west.run(backup).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        east.run(|| drop_table("second".into())).unwrap();
    }
    let candidate = policy(
        "candidate.toml",
        "format = 1\n[[defaults.history]]\ntool = \"pghist.drop_table\"\nafter = \"pghist.backup\"\nwithin = \"1h\"\n",
    );
    let report = replay_trail(
        &url,
        "toolgate",
        &candidate,
        std::slice::from_ref(&none),
        &ReplayFilter::default(),
    )
    .unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!((report.calls, report.decided), (3, 3), "{report}");
    assert_eq!(report.flips.len(), 1, "{report}");
    let row = &report.flips[0];
    assert_eq!(
        (row.tool.as_str(), row.calls, row.flip.to),
        ("pghist.drop_table", 1, Ruling::Refused),
        "{report}"
    );
    // The flip is east's first drop: the earlier of its two enter records.
    let first = query(
        &url,
        "SELECT min(seq) FROM toolgate.audit WHERE writer = 'east' AND stage = 'enter'",
    );
    assert_eq!(
        row.seqs[0].seq.to_string(),
        first[0][0].clone().unwrap(),
        "{report}"
    );
}
