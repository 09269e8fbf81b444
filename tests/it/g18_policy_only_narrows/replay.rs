//! An operator tests a policy before it binds: cases of how a file must decide calls
//! (`PolicyCases`), and a log's calls decided again under a candidate beside the policy in force
//! (`PolicyFile::replay`): each flip counted by tool, principal and way, with its records.

use std::io::Write as _;
use std::sync::Arc;

use serde_json::{Value, json};
use toolgate::audit::{AuditRecord, AuditSink, Decision, JsonlSink, Stage};
use toolgate::policy_file::{
    Expected, Flip, PolicyCases, PolicyFile, ReplayFilter, ReplayReport, Ruling,
};
use toolgate::{AllowAllApprover, Denied, Gate, Mode, Risk, registry, tool};

use crate::common::Scratch;

/// look.
#[tool(risk = "READ_ONLY", domain = "rp", callable)]
fn look(host: String) -> Result<String, Denied> {
    Ok(host)
}

/// refund.
#[tool(risk = "LOW_WRITE", domain = "rp", callable, record_arguments)]
fn refund(amount: u32) -> Result<u32, Denied> {
    Ok(amount)
}

/// pay, whose arguments are not recorded.
#[tool(risk = "LOW_WRITE", domain = "rp", callable)]
fn pay(amount: u32) -> Result<u32, Denied> {
    Ok(amount)
}

/// wipe.
#[tool(risk = "HIGH_WRITE", domain = "rp", callable)]
fn wipe(host: String) -> Result<String, Denied> {
    Ok(host)
}

pub(crate) fn policy(name: &str, text: &str) -> PolicyFile {
    PolicyFile::parse(name, text).unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) const NONE: &str = "format = 1\n";
const STRICT: &str = r#"format = 1
[defaults]
deny = ["rp.wipe"]

[[defaults.arguments]]
tool = "rp.refund"
parameter = "amount"
max = 50

[principals.bob]
ceiling = "ADVISORY"
"#;

/// A gate of `principal` in FULL_AUTO following `file`, approving what asks, writing to `sink`.
fn gate(principal: &str, file: &PolicyFile, sink: &Arc<JsonlSink>) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .principal(principal)
        .approver(AllowAllApprover)
        .policy(toolgate::policy_file::LivePolicy::new(file.clone()))
        .audit_shared(sink.clone())
        .build()
        .unwrap()
}

fn call(gate: &Gate, id: &str, arguments: Value) -> bool {
    registry()
        .call(gate, id, arguments)
        .now()
        .expect("a sync tool answers at once")
        .is_ok()
}

/// The log's records, as written, by line.
fn lines(path: &std::path::Path) -> Vec<(Value, AuditRecord)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            (
                serde_json::from_str(l).unwrap(),
                serde_json::from_str(l).unwrap(),
            )
        })
        .collect()
}

pub(crate) fn replay(
    candidate: &PolicyFile,
    in_force: &[PolicyFile],
    log: &std::path::Path,
) -> ReplayReport {
    replay_with(candidate, in_force, &ReplayFilter::default(), log)
}

pub(crate) fn replay_with(
    candidate: &PolicyFile,
    in_force: &[PolicyFile],
    filter: &ReplayFilter,
    log: &std::path::Path,
) -> ReplayReport {
    candidate
        .replay(in_force, filter, std::fs::File::open(log).unwrap())
        .unwrap()
}

/// The flips of a report as (tool, principal, from, to, calls).
fn flips(report: &ReplayReport) -> Vec<(String, Option<String>, Ruling, Ruling, u64)> {
    report
        .flips
        .iter()
        .map(|r| {
            (
                r.tool.clone(),
                r.principal.clone(),
                r.flip.from,
                r.flip.to,
                r.calls,
            )
        })
        .collect()
}

/// alice and bob call under `file`: alice looks twice, refunds 10 and 100, wipes (asks, approved);
/// bob refunds 10.
fn write_calls(dir: &Scratch, name: &str, file: &PolicyFile) -> std::path::PathBuf {
    let path = dir.path(name);
    let sink = Arc::new(JsonlSink::open(&path).unwrap());
    let alice = gate("alice", file, &sink);
    let bob = gate("bob", file, &sink);
    call(&alice, "rp.look", json!({"host": "a"}));
    call(&alice, "rp.look", json!({"host": "b"}));
    call(&alice, "rp.refund", json!({"amount": 10}));
    call(&alice, "rp.refund", json!({"amount": 100}));
    call(&alice, "rp.wipe", json!({"host": "web-1"}));
    call(&bob, "rp.refund", json!({"amount": 10}));
    drop((alice, bob));
    path
}

#[test]
fn a_replay_counts_each_flip_by_tool_principal_and_way_with_the_records_behind_it() {
    let dir = Scratch::new("replay-flips");
    let (none, strict) = (policy("none.toml", NONE), policy("strict.toml", STRICT));
    let log = write_calls(&dir, "audit.jsonl", &none);
    let report = replay(&strict, std::slice::from_ref(&none), &log);
    assert!(report.is_intact(), "{report}");
    assert_eq!((report.calls, report.decided), (6, 6), "{report}");
    let alice = Some("alice".to_owned());
    let bob = Some("bob".to_owned());
    assert_eq!(
        flips(&report),
        vec![
            (
                "rp.refund".into(),
                alice,
                Ruling::Allowed,
                Ruling::Refused,
                1
            ),
            ("rp.refund".into(), bob, Ruling::Allowed, Ruling::Refused, 1),
            (
                "rp.wipe".into(),
                Some("alice".into()),
                Ruling::Asks,
                Ruling::Refused,
                1
            ),
        ],
        "{report}"
    );
    assert!(report.flips_any() && !report.widens());
    // Each row names its records: the seq of the log's line, and the record's reference.
    let written = lines(&log);
    for row in &report.flips {
        assert_eq!(row.seqs.len(), 1);
        let (line, record) = written
            .iter()
            .find(|(line, _)| line["seq"] == row.seqs[0].seq)
            .unwrap();
        assert_eq!(line["tool"], row.tool.as_str());
        assert!(matches!(record.stage, Stage::Enter));
        assert_eq!(row.records, vec![record.reference()]);
    }
    let refund = written
        .iter()
        .find(|(line, _)| line["tool"] == "rp.refund" && line["principal"] == "alice")
        .map(|(line, _)| line["arguments"].as_str().unwrap().to_owned())
        .unwrap();
    assert_eq!(refund, r#"{"amount":10}"#, "refund 10 does not flip");

    let shown = report.to_string();
    assert!(shown.starts_with("the log verifies: "), "{shown}");
    assert!(
        shown.contains("6 calls replayed, 6 decided under both policies, 3 flip"),
        "{shown}"
    );
    assert!(
        shown.contains("rp.wipe    alice      asks -> refused"),
        "{shown}"
    );
    let json: Value = serde_json::to_value(&report).unwrap();
    assert_eq!(json["flips"].as_array().unwrap().len(), 3);
    assert_eq!(json["flips"][2]["from"], "asks");
    assert_eq!(json["candidate"]["digest"], strict.digest());

    // The same candidate as the policy in force: nothing flips.
    let same = replay(&none, std::slice::from_ref(&none), &log);
    assert_eq!((same.decided, same.flips.len()), (6, 0), "{same}");
}

#[test]
fn a_candidate_less_narrow_than_the_policy_in_force_is_shown_widening() {
    let dir = Scratch::new("replay-widens");
    let (none, strict) = (policy("none.toml", NONE), policy("strict.toml", STRICT));
    let log = write_calls(&dir, "audit.jsonl", &strict);
    // The in-force file is found by its digest, whatever its name.
    let report = replay(&none, &[policy("renamed.toml", STRICT)], &log);
    assert_eq!(report.decided, 5, "{report}");
    assert!(report.widens(), "{report}");
    let ways: Vec<Flip> = report.flips.iter().map(|r| r.flip).collect();
    assert!(ways.iter().all(|f| f.widens()), "{report}");
    assert!(report.to_string().contains("(WIDENS)"), "{report}");
    // bob's refund of 10 was refused in ADVISORY, his ceiling in force, which the candidate
    // raises: the mode his gate was asked for is not in the record, so it is not guessed.
    assert_eq!(
        report.raised_ceilings.get("rp.refund"),
        Some(&1),
        "{report}"
    );
    assert!(
        report
            .flips
            .iter()
            .all(|r| r.principal.as_deref() == Some("alice")),
        "{report}"
    );
    assert!(
        report.to_string().contains(
            "not replayed: 1 calls recorded at the ceiling in force, which the candidate raises"
        ),
        "{report}"
    );
}

#[test]
fn calls_under_a_policy_not_given_of_other_tools_or_without_their_arguments_are_counted_apart() {
    let dir = Scratch::new("replay-apart");
    let none = policy("none.toml", NONE);
    let unknown = policy(
        "unknown.toml",
        "format = 1\n[defaults]\nask = [\"rp.look\"]\n",
    );
    let path = dir.path("audit.jsonl");
    {
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        let under_unknown = gate("alice", &unknown, &sink);
        call(&under_unknown, "rp.look", json!({"host": "a"}));
        let plain = gate("alice", &none, &sink);
        call(&plain, "rp.pay", json!({"amount": 5}));
        call(&plain, "rp.refund", json!({"amount": 5}));
        // A record of a tool this program does not link, and one of a linked tool at another risk.
        let mut gone = AuditRecord::new(Stage::Enter, "rp.gone", Mode::FullAuto, 99);
        gone.decision = Some(Decision::Allowed);
        sink.record(&gone).unwrap();
        // A call by name stopped at the door was never decided: not a call to replay.
        assert!(!call(&plain, "rp.refund", json!({"amount": "many"})));
        let mut other = AuditRecord::new(Stage::Enter, "rp.look", Mode::FullAuto, 99);
        other.decision = Some(Decision::Allowed);
        other.declared_risk = Some(Risk::HighWrite);
        sink.record(&other).unwrap();
    }
    let candidate = policy(
        "candidate.toml",
        r#"format = 1
[[defaults.arguments]]
tool = "rp.pay"
parameter = "amount"
max = 1

[[defaults.arguments]]
tool = "rp.refund"
parameter = "amount"
max = 1
"#,
    );
    let log = std::fs::read_to_string(&path).unwrap();
    assert!(log.contains(r#""code":"INVALID_PARAMS""#), "{log}");
    let report = replay(&candidate, std::slice::from_ref(&none), &path);
    assert_eq!(report.calls, 5, "{report}");
    assert_eq!(
        report.unknown_policies.get(unknown.digest()),
        Some(&1),
        "{report}"
    );
    assert_eq!(report.other_tools.get("rp.gone"), Some(&1), "{report}");
    assert_eq!(report.other_tools.get("rp.look"), Some(&1), "{report}");
    // pay records no arguments: they are not guessed.
    assert_eq!(
        report.unrecorded_arguments.get("rp.pay"),
        Some(&1),
        "{report}"
    );
    assert_eq!(report.decided, 1, "{report}");
    assert_eq!(
        flips(&report),
        vec![(
            "rp.refund".into(),
            Some("alice".into()),
            Ruling::Allowed,
            Ruling::Refused,
            1
        )]
    );
    let shown = report.to_string();
    assert!(
        shown.contains(&format!(
            "not replayed: 1 calls recorded under a policy not given (--in-force FILE), digest `{}`",
            unknown.digest()
        )),
        "{shown}"
    );
    // Given, the file in force decides them.
    let given = replay(&candidate, &[none, unknown], &path);
    assert!(given.unknown_policies.is_empty(), "{given}");
}

#[test]
fn a_log_that_does_not_verify_is_said_first_and_nothing_after_its_break_is_replayed() {
    let dir = Scratch::new("replay-broken");
    let (none, strict) = (policy("none.toml", NONE), policy("strict.toml", STRICT));
    let log = write_calls(&dir, "audit.jsonl", &none);
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    // The third record (alice's refund of 10) edited: 10 becomes 11.
    let third = lines
        .iter()
        .position(|l| l.contains(r#"amount\":10"#))
        .unwrap();
    lines[third] = lines[third].replace(r#"amount\":10"#, r#"amount\":11"#);
    let mut file = std::fs::File::create(&log).unwrap();
    for line in &lines {
        writeln!(file, "{line}").unwrap();
    }
    drop(file);
    let report = replay(&strict, &[none], &log);
    let broken = report.chains[0]
        .report
        .broken
        .as_ref()
        .expect("the chain breaks");
    assert_eq!(broken.line as usize, third + 1);
    // Only the calls before the edited line: alice's two looks.
    assert_eq!(report.calls, 2, "{report}");
    assert!(report.flips.is_empty(), "{report}");
    let shown = report.to_string();
    assert!(
        shown.starts_with(&format!(
            "THE LOG DOES NOT VERIFY: line {} breaks the chain",
            third + 1
        )),
        "{shown}"
    );
}

#[test]
fn the_filter_keeps_calls_by_time_principal_as_it_reads_agent_tool_and_decision() {
    let dir = Scratch::new("replay-filter");
    let (none, strict) = (policy("none.toml", NONE), policy("strict.toml", STRICT));
    let path = dir.path("audit.jsonl");
    {
        let sink = JsonlSink::open(&path).unwrap();
        for (n, (time, principal, agent, tool, decision)) in [
            (
                "2026-11-21T23:59:59.999999Z",
                "alice",
                "a",
                "rp.wipe",
                Decision::Approved,
            ),
            (
                "2026-11-22T00:00:00.000000Z",
                "alice",
                "a",
                "rp.wipe",
                Decision::Approved,
            ),
            (
                "2026-11-22T12:00:00.000000Z",
                "bob",
                "b",
                "rp.look",
                Decision::Allowed,
            ),
            (
                "2026-11-23T00:00:00.000000Z",
                "alice",
                "b",
                "rp.wipe",
                Decision::Approved,
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let mut record = AuditRecord::new(Stage::Enter, tool, Mode::FullAuto, 1);
            record.call = n as u64;
            record.timestamp = time.to_owned();
            record.principal = Some(principal.into());
            record.agent = Some(agent.into());
            record.decision = Some(decision);
            record.policy_digest = Some(none.digest().to_owned());
            sink.record(&record).unwrap();
        }
    }
    let count = |filter: ReplayFilter| {
        replay_with(&strict, std::slice::from_ref(&none), &filter, &path).calls
    };
    assert_eq!(count(ReplayFilter::default()), 4);
    let day = ReplayFilter {
        since: Some("2026-11-22".into()),
        until: Some("2026-11-23".into()),
        ..ReplayFilter::default()
    };
    assert_eq!(count(day), 2);
    // A principal is found as its name reads: a Cyrillic а, a fullwidth form, a trailing space.
    for alice in ["alice", "\u{430}lice", "ａｌｉｃｅ", "alice "] {
        let filter = ReplayFilter {
            principal: Some(alice.into()),
            ..ReplayFilter::default()
        };
        assert_eq!(count(filter), 3, "{alice:?}");
    }
    let agent = ReplayFilter {
        agent: Some("b".into()),
        ..ReplayFilter::default()
    };
    assert_eq!(count(agent), 2);
    let tool = ReplayFilter {
        tool: Some("rp.look".into()),
        ..ReplayFilter::default()
    };
    assert_eq!(count(tool), 1);
    let decision = ReplayFilter {
        decision: Some(Decision::Approved),
        ..ReplayFilter::default()
    };
    assert_eq!(count(decision), 3);

    for good in [
        "2026-11-22",
        "2026-11-22T03:11Z",
        "2026-11-22T03:11:01.5Z",
        "2026-11-22T03:11:01",
    ] {
        assert_eq!(ReplayFilter::check_time(good), Ok(()), "{good}");
    }
    for bad in [
        "yesterday",
        "2026-1-22",
        "22-11-2026",
        "2026-11-22 03:11",
        "2026-11-22T3:11",
        "2026-11-22T03:11.5",
        "2026-11-22é",
    ] {
        assert!(ReplayFilter::check_time(bad).is_err(), "{bad}");
    }
}

#[test]
fn what_a_log_holds_is_shown_escaped_in_the_report() {
    let dir = Scratch::new("replay-escaped");
    let none = policy("none.toml", NONE);
    let strict = policy("strict.toml", STRICT);
    let path = dir.path("audit.jsonl");
    {
        let sink = JsonlSink::open(&path).unwrap();
        let mut record = AuditRecord::new(Stage::Enter, "rp.wipe", Mode::FullAuto, 1);
        record.principal = Some("mallory\u{202e}\n| forged row".into());
        record.decision = Some(Decision::Approved);
        sink.record(&record).unwrap();
        let mut gone = AuditRecord::new(Stage::Enter, "rp.\u{1b}[2Jgone", Mode::FullAuto, 1);
        gone.decision = Some(Decision::Allowed);
        sink.record(&gone).unwrap();
    }
    let report = replay(&strict, &[none], &path);
    assert_eq!(report.flips.len(), 1, "{report}");
    let shown = report.to_string();
    assert!(
        shown.contains("mallory\\u{202e}\\u{000a}| forged row"),
        "{shown}"
    );
    assert!(shown.contains("rp.\\u{001b}[2Jgone"), "{shown}");
    assert!(
        !shown.chars().any(|c| c == '\u{202e}' || c == '\u{1b}'),
        "{shown}"
    );
    assert_eq!(
        shown.lines().filter(|l| l.contains("forged")).count(),
        1,
        "{shown}"
    );
}

#[test]
fn policy_tests_pass_fail_with_the_rule_that_decided_and_refuse_what_they_cannot_run() {
    let strict = policy("strict.toml", STRICT);
    let cases = PolicyCases::parse(
        "cases.toml",
        r#"
[[case]]
name = "wipes are denied"
tool = "rp.wipe"
expect = "DENY_LISTED"

[[case]]
name = "a small refund runs"
principal = "alice"
tool = "rp.refund"
arguments = { amount = 10 }
expect = "allowed"

[[case]]
name = "a large refund runs (wrong)"
principal = "alice"
tool = "rp.refund"
arguments = { amount = 100 }
expect = "allowed"

[[case]]
principal = "bob"
mode = "FULL_AUTO"
tool = "rp.refund"
arguments = { amount = 10 }
expect = "refused"

[[case]]
name = "looks run in shadow"
mode = "shadow"
tool = "rp.look"
arguments = { host = "a" }
expect = "allowed"

[[case]]
name = "a wipe asks (wrong)"
tool = "rp.wipe"
expect = "asks"
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cases.cases().len(), 6);
    assert_eq!(cases.cases()[3].name, "case 4");
    assert_eq!(
        cases.cases()[0].expect,
        Expected::Code(toolgate::DenialCode::DenyListed)
    );
    let results = cases.run(&strict);
    let passed: Vec<bool> = results.iter().map(|r| r.passed()).collect();
    assert_eq!(passed, [true, true, false, true, true, false]);
    let large = results[2].to_string();
    assert!(
        large.starts_with("FAILED  a large refund runs (wrong) (cases.toml:14:1)"),
        "{large}"
    );
    assert!(large.contains("expected: allowed"), "{large}");
    assert!(
        large.contains("decided:  refused (ARGUMENT_REFUSED) in FULL_AUTO"),
        "{large}"
    );
    assert!(
        large.contains("strict.toml:"),
        "the rule and its place: {large}"
    );
    let wipe = results[5].to_string();
    assert!(
        wipe.contains("by:       rp.wipe (strict.toml:3:9)"),
        "{wipe}"
    );
    assert_eq!(results[0].to_string(), "ok      wipes are denied");

    // Every error of a cases file at once, each with its place.
    let errors = PolicyCases::parse(
        "cases.toml",
        r#"[[case]]
tool = "rp.wipee"
expect = "refused"

[[case]]
tool = "rp.wipe"
mode = "TURBO"
expect = "denied"
"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        errors.contains("cases.toml:2:8: no linked tool has the id `rp.wipee`"),
        "{errors}"
    );
    assert!(
        errors.contains("cases.toml:7:8: `TURBO` is no mode"),
        "{errors}"
    );
    assert!(
        errors.contains("cases.toml:8:10: `denied` is no decision"),
        "{errors}"
    );
    let typo = PolicyCases::parse(
        "cases.toml",
        "[[case]]\ntool = \"rp.wipe\"\nexpcet = \"refused\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        typo.contains("cases.toml:3:1") && typo.contains("expcet"),
        "{typo}"
    );
    let empty = PolicyCases::parse("cases.toml", "")
        .unwrap_err()
        .to_string();
    assert!(empty.contains("no case"), "{empty}");
    let hidden = PolicyCases::parse(
        "cases.toml",
        "[[case]]\ntool = \"rp.wipe\u{202e}\"\nexpect = \"refused\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(hidden.contains("rp.wipe\\u{202e}"), "{hidden}");
}
