//! Outside attacks on the operator's tests of a policy before it binds: `policy test` (cases decided
//! as `explain` decides them) held against a real gate following the same file, and `policy replay`
//! (a log's calls decided again under a candidate beside the policy in force) where it meets live
//! reloads, escalation, argument rules, look-alike names, the taint latch, budgets, its filter's
//! times, hostile logs and a log being written while it is read.
//!
//! Each test asserts the guarantee as the documentation states it; its doc comment says the attack.
//! A test that fails is an attack that got through.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use toolgate::audit::{AuditRecord, AuditSink, Decision, JsonlSink, Stage};
use toolgate::policy_file::{LivePolicy, PolicyCases, PolicyFile, ReplayFilter, Ruling};
use toolgate::{Denied, Gate, Mode, Risk, registry, tool};

use crate::common::Scratch;
use crate::g18_policy_only_narrows::replay::{NONE, policy, replay, replay_with};

// ---------------------------------------------------------------------------------------------------
// Tools.
// ---------------------------------------------------------------------------------------------------

fn classify23(command: &str) -> Risk {
    if command.split_whitespace().any(|w| w == "sudo") {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

/// Look at a host.
#[tool(risk = "READ_ONLY", domain = "g23", callable, record_arguments)]
fn look(host: String) -> Result<String, Denied> {
    Ok(host)
}

/// Refund an amount; its arguments are recorded.
#[tool(risk = "LOW_WRITE", domain = "g23", callable, record_arguments)]
fn refund(amount: u32) -> Result<u32, Denied> {
    Ok(amount)
}

/// Run a command; `sudo` raises it to HIGH_WRITE.
#[tool(
    risk = "LOW_WRITE",
    domain = "g23",
    callable,
    record_arguments,
    escalate = classify23
)]
fn shell(command: String) -> Result<String, Denied> {
    Ok(command)
}

/// Charge a fee, a single-precision amount.
#[tool(risk = "LOW_WRITE", domain = "g23", callable, record_arguments)]
fn fee(amount: f32) -> Result<f32, Denied> {
    Ok(amount)
}

/// A host name, upper-cased as it is read.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub(crate) struct Upper(String);

impl<'de> serde::Deserialize<'de> for Upper {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <String as serde::Deserialize>::deserialize(d).map(|s| Upper(s.to_uppercase()))
    }
}

/// Deploy to a host.
#[tool(risk = "LOW_WRITE", domain = "g23", callable, record_arguments)]
fn deploy(host: Upper) -> Result<String, Denied> {
    Ok(host.0)
}

/// Read a web page: its output is untrusted.
#[tool(risk = "READ_ONLY", domain = "g23", callable, untrusted_output)]
fn browse(url: String) -> Result<String, Denied> {
    Ok(url)
}

// ---------------------------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------------------------

/// A gate of `principal` and `agent` in `mode` following `file`, without an approver, writing to
/// `sink`.
fn gate(
    principal: Option<&str>,
    agent: Option<&str>,
    mode: Mode,
    file: &LivePolicy,
    sink: &Arc<JsonlSink>,
) -> Gate {
    let mut builder = Gate::builder().mode(mode).policy(file.clone());
    if let Some(p) = principal {
        builder = builder.principal(p.to_owned());
    }
    if let Some(a) = agent {
        builder = builder.agent(a.to_owned());
    }
    builder.audit_shared(sink.clone()).build().unwrap()
}

/// What a real gate without an approver made of a call: allowed, asks (`APPROVAL_REQUIRED`), or
/// refused with its code.
fn call(gate: &Gate, id: &str, arguments: Value) -> (Ruling, Option<String>) {
    match registry()
        .call(gate, id, arguments)
        .now()
        .expect("a sync tool answers at once")
    {
        Ok(_) => (Ruling::Allowed, None),
        Err(e) => {
            let code = e.code().to_owned();
            if code == "APPROVAL_REQUIRED" {
                (Ruling::Asks, None)
            } else {
                (Ruling::Refused, Some(code))
            }
        }
    }
}

/// A gate as [`gate`] builds it, with an approver that approves every call.
fn approving_gate(
    principal: Option<&str>,
    agent: Option<&str>,
    mode: Mode,
    file: &LivePolicy,
    sink: &Arc<JsonlSink>,
) -> Gate {
    let mut builder = Gate::builder()
        .mode(mode)
        .policy(file.clone())
        .approver(toolgate::AllowAllApprover);
    if let Some(p) = principal {
        builder = builder.principal(p.to_owned());
    }
    if let Some(a) = agent {
        builder = builder.agent(a.to_owned());
    }
    builder.audit_shared(sink.clone()).build().unwrap()
}

/// What a real gate with an approver made of a call: allowed (its `enter` says `allowed`), asks (its
/// `enter` says `approved`), or refused with its code.
fn call_approved(
    gate: &Gate,
    log: &std::path::Path,
    id: &str,
    arguments: Value,
) -> (Ruling, Option<String>) {
    match registry()
        .call(gate, id, arguments)
        .now()
        .expect("a sync tool answers at once")
    {
        Ok(_) => {
            let last = records(log)
                .into_values()
                .rev()
                .find(|r| matches!(r.stage, Stage::Enter))
                .expect("an enter record");
            (recorded_ruling(&last), None)
        }
        Err(e) => (Ruling::Refused, Some(e.code().to_owned())),
    }
}

/// The log's records by `seq`.
fn records(path: &std::path::Path) -> BTreeMap<u64, AuditRecord> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["seq"].as_u64().unwrap(), serde_json::from_str(l).unwrap())
        })
        .collect()
}

/// What a record says its call came to, as a ruling: asks where it was approved, granted, or refused
/// for want of an approver.
fn recorded_ruling(record: &AuditRecord) -> Ruling {
    match (record.stage, record.decision, record.code.as_deref()) {
        (_, Some(Decision::Allowed), _) => Ruling::Allowed,
        (_, Some(Decision::Approved | Decision::Granted), _) => Ruling::Asks,
        (_, _, Some("APPROVAL_REQUIRED")) => Ruling::Asks,
        _ => Ruling::Refused,
    }
}

/// A hand-written record of `tool` under `digest`.
fn record(
    tool: &str,
    principal: &str,
    decision: Decision,
    digest: Option<&str>,
    time: &str,
    n: u64,
) -> AuditRecord {
    let mut record = AuditRecord::new(Stage::Enter, tool.to_owned(), Mode::FullAuto, 1);
    record.call = n;
    record.timestamp = time.to_owned();
    record.principal = Some(principal.to_owned().into());
    record.decision = Some(decision);
    record.effective_risk = Some(Risk::ReadOnly);
    record.declared_risk = Some(Risk::ReadOnly);
    record.arguments = Some(r#"{"host":"a"}"#.to_owned());
    record.policy_digest = digest.map(str::to_owned);
    record
}

/// How `policy test` decides one call: the ruling and the refusal's code.
fn policy_test(
    file: &PolicyFile,
    principal: Option<&str>,
    agent: Option<&str>,
    mode: Mode,
    tool: &str,
    arguments: &Value,
) -> (Ruling, Option<String>) {
    let mut case = String::from("[[case]]\n");
    if let Some(p) = principal {
        case.push_str(&format!("principal = {}\n", toml_string(p)));
    }
    if let Some(a) = agent {
        case.push_str(&format!("agent = {}\n", toml_string(a)));
    }
    case.push_str(&format!(
        "mode = \"{}\"\ntool = \"{tool}\"\n",
        mode.as_str()
    ));
    // A case of a tool that escalates names the risk its call is judged at, as its operator knows
    // the code's `escalate` does: a policy test does not run it.
    if tool == "g23.shell" {
        let command = arguments["command"].as_str().unwrap_or_default();
        case.push_str(&format!("risk = \"{}\"\n", classify23(command).as_str()));
    }
    let mut inline = Vec::new();
    for (k, v) in arguments.as_object().unwrap() {
        let v = match v {
            Value::String(s) => toml_string(s),
            other => other.to_string(),
        };
        inline.push(format!("{k} = {v}"));
    }
    case.push_str(&format!("arguments = {{ {} }}\n", inline.join(", ")));
    case.push_str("expect = \"allowed\"\n");
    let cases = PolicyCases::parse("cases.toml", &case).unwrap_or_else(|e| panic!("{e}\n{case}"));
    let results = cases.run(file);
    let e = &results[0].explanation;
    (e.ruling, e.code.map(|c| c.to_string()))
}

fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04X}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Decides one call with `policy test` and with a real gate following the same file; `Some` with
/// both where they disagree (the refusal's code counts only where both refuse).
fn disagreement(
    file: &PolicyFile,
    principal: Option<&str>,
    agent: Option<&str>,
    mode: Mode,
    tool: &str,
    arguments: Value,
) -> Option<String> {
    let dir = Scratch::new("g23-agree");
    let log = dir.path("audit.jsonl");
    let sink = Arc::new(JsonlSink::open(&log).unwrap());
    let live = LivePolicy::new(file.clone());
    let g = approving_gate(principal, agent, mode, &live, &sink);
    let tested = policy_test(file, principal, agent, mode, tool, &arguments);
    let real = call_approved(&g, &log, tool, arguments.clone());
    let same = tested.0 == real.0 && (tested.0 != Ruling::Refused || tested.1 == real.1);
    (!same).then(|| {
        format!(
            "{tool} {arguments} principal {principal:?} agent {agent:?} mode {mode:?}: \
             policy test {tested:?}, the gate {real:?}"
        )
    })
}

// ---------------------------------------------------------------------------------------------------
// Replay: the filter's times.
// ---------------------------------------------------------------------------------------------------

/// `--since 2026-11-22T03:11:01Z` is accepted by `check_time`; the log writes microseconds, and a
/// text comparison puts `03:11:01.500000Z` before `03:11:01Z` (`.` < `Z`) and `03:11:30.000000Z`
/// before `03:11Z` (`:` < `Z`). A call recorded after `--since` must be replayed, and one recorded
/// after `--until` must not be.
#[test]
fn g23_since_and_until_keep_calls_by_time_not_by_the_texts_order() {
    let dir = Scratch::new("g23-times");
    let none = policy("none.toml", NONE);
    let strict = policy(
        "strict.toml",
        "format = 1\n[defaults]\ndeny = [\"g23.look\"]\n",
    );
    let path = dir.path("audit.jsonl");
    {
        let sink = JsonlSink::open(&path).unwrap();
        sink.record(&record(
            "g23.look",
            "alice",
            Decision::Allowed,
            Some(none.digest()),
            "2026-11-22T03:11:01.500000Z",
            1,
        ))
        .unwrap();
        sink.record(&record(
            "g23.look",
            "alice",
            Decision::Allowed,
            Some(none.digest()),
            "2026-11-22T03:11:30.000000Z",
            2,
        ))
        .unwrap();
    }
    let count = |since: Option<&str>, until: Option<&str>| {
        for t in since.iter().chain(until.iter()) {
            assert_eq!(ReplayFilter::check_time(t), Ok(()), "{t}");
        }
        let filter = ReplayFilter {
            since: since.map(str::to_owned),
            until: until.map(str::to_owned),
            ..ReplayFilter::default()
        };
        replay_with(&strict, std::slice::from_ref(&none), &filter, &path).calls
    };
    let mut wrong = Vec::new();
    for (since, until, expected) in [
        // Both calls are at or after 03:11:01.
        (Some("2026-11-22T03:11:01Z"), None, 2),
        (Some("2026-11-22T03:11:01"), None, 2),
        // Both are at or after 03:11:00.
        (Some("2026-11-22T03:11Z"), None, 2),
        // Neither is before 03:11:01.
        (None, Some("2026-11-22T03:11:01Z"), 0),
        // Neither is before 03:11:00.
        (None, Some("2026-11-22T03:11Z"), 0),
        // The first is before 03:11:02, the second is not.
        (None, Some("2026-11-22T03:11:02Z"), 1),
    ] {
        let got = count(since, until);
        if got != expected {
            wrong.push(format!(
                "since {since:?} until {until:?}: {got} calls, expected {expected}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

// ---------------------------------------------------------------------------------------------------
// Replay against what the gate recorded.
// ---------------------------------------------------------------------------------------------------

/// A call refused by a deny rule (before any argument rule) and a candidate that lifts the deny and
/// adds an argument rule: the refusal "needs no arguments", so its record may not hold them. The
/// call is then either shown widening (a refund of 10 runs under the candidate) or counted apart,
/// never decided refused under both.
#[test]
fn g23_a_deny_lifted_for_an_argument_rule_is_not_hidden_by_a_refusal_without_arguments() {
    let dir = Scratch::new("g23-deny-to-args");
    let denied = policy(
        "denied.toml",
        "format = 1\n[defaults]\ndeny = [\"g23.refund\"]\n",
    );
    let candidate = policy(
        "candidate.toml",
        "format = 1\n[[defaults.arguments]]\ntool = \"g23.refund\"\nparameter = \"amount\"\nmax = 50\n",
    );
    let path = dir.path("audit.jsonl");
    {
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        let live = LivePolicy::new(denied.clone());
        let g = gate(Some("alice"), None, Mode::FullAuto, &live, &sink);
        assert_eq!(
            call(&g, "g23.refund", json!({"amount": 10})).1.as_deref(),
            Some("DENY_LISTED")
        );
    }
    // The real gate under the candidate runs it.
    {
        let other = Scratch::new("g23-deny-to-args-real");
        let sink = Arc::new(JsonlSink::open(other.path("audit.jsonl")).unwrap());
        let live = LivePolicy::new(candidate.clone());
        let g = gate(Some("alice"), None, Mode::FullAuto, &live, &sink);
        assert_eq!(
            call(&g, "g23.refund", json!({"amount": 10})).0,
            Ruling::Allowed
        );
    }
    let report = replay(&candidate, std::slice::from_ref(&denied), &path);
    let shown_widening = report
        .flips
        .iter()
        .any(|r| r.flip.from == Ruling::Refused && r.flip.to == Ruling::Allowed && r.calls == 1);
    let apart = report.unrecorded_arguments.get("g23.refund") == Some(&1);
    assert!(
        shown_widening || apart,
        "the widening is hidden: {report}\n{:?}",
        report.flips
    );
}

/// The policy file's `taint = "refuse"` is a rule of the file. A candidate that drops it lets a
/// tainted session's write ask where it was refused (`TAINTED_SESSION`): a widening. A candidate that
/// adds it refuses what asked. The replay must show each flip or count the call apart, never decide
/// it the same under both (and never as `allowed`, which the record contradicts).
#[test]
fn g23_a_candidate_that_changes_the_taint_rule_is_not_replayed_as_no_change() {
    let dir = Scratch::new("g23-taint");
    let refuse = policy(
        "refuse.toml",
        "format = 1\n[defaults]\ntaint = \"refuse\"\n",
    );
    let none = policy("none.toml", NONE);
    let write = |file: &PolicyFile, name: &str| {
        let path = dir.path(name);
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        let live = LivePolicy::new(file.clone());
        let g = gate(Some("alice"), None, Mode::FullAuto, &live, &sink);
        assert_eq!(
            call(&g, "g23.browse", json!({"url": "https://x"})).0,
            Ruling::Allowed
        );
        let written = call(&g, "g23.refund", json!({"amount": 5}));
        (path, written)
    };
    let (refused_log, refused) = write(&refuse, "refused.jsonl");
    assert_eq!(refused.1.as_deref(), Some("TAINTED_SESSION"));
    let (asked_log, asked) = write(&none, "asked.jsonl");
    assert_eq!(asked.0, Ruling::Asks);

    let mut holes = Vec::new();
    let lifted = replay(&none, std::slice::from_ref(&refuse), &refused_log);
    if !(lifted.widens() || lifted.decided < lifted.calls) {
        holes.push(format!(
            "dropping `taint = \"refuse\"`: the refused write is replayed as no change\n{lifted}"
        ));
    }
    let added = replay(&refuse, std::slice::from_ref(&none), &asked_log);
    let flipped = added
        .flips
        .iter()
        .any(|r| r.tool == "g23.refund" && r.flip.to == Ruling::Refused);
    if !(flipped || added.decided < added.calls) {
        holes.push(format!(
            "adding `taint = \"refuse\"`: the write that asked is replayed as no change\n{added}"
        ));
    }
    assert!(holes.is_empty(), "{}", holes.join("\n\n"));
}

/// A budget of the file (`[[principals.alice.budgets]]`) refused alice's second refund
/// (`BUDGET_EXHAUSTED`). A candidate without the budget runs it: a widening, which the replay must
/// show or count apart rather than decide the refused call `allowed` under both.
#[test]
fn g23_a_candidate_that_drops_a_budget_is_not_replayed_as_no_change() {
    let dir = Scratch::new("g23-budget");
    let budget = policy(
        "budget.toml",
        "format = 1\n[[principals.alice.budgets]]\ntool = \"g23.refund\"\ncalls = 1\nper = \"1h\"\n",
    );
    let none = policy("none.toml", NONE);
    let path = dir.path("audit.jsonl");
    {
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        let live = LivePolicy::new(budget.clone());
        let g = gate(Some("alice"), None, Mode::FullAuto, &live, &sink);
        assert_eq!(
            call(&g, "g23.refund", json!({"amount": 1})).0,
            Ruling::Allowed
        );
        assert_eq!(
            call(&g, "g23.refund", json!({"amount": 2})).1.as_deref(),
            Some("BUDGET_EXHAUSTED")
        );
    }
    let report = replay(&none, std::slice::from_ref(&budget), &path);
    assert!(
        report.widens() || report.decided < report.calls,
        "the refused call is replayed as no change: {report}"
    );
}

/// A call that a deny rule refused before its escalation was judged (deny first), and a candidate
/// that lifts the deny: in PARTIAL_AUTO the real gate refuses `sudo` as ABOVE_CEILING (HIGH_WRITE
/// by its arguments), so nothing widens. A replay that decides it at the risk of a record written
/// before the escalation reports `refused -> allowed`, a call decided wrong.
#[test]
fn g23_a_call_refused_before_its_escalation_is_decided_at_its_escalated_risk() {
    let dir = Scratch::new("g23-escalated");
    let denied = policy(
        "denied.toml",
        "format = 1\n[defaults]\ndeny = [\"g23.shell\"]\n",
    );
    let none = policy("none.toml", NONE);
    let path = dir.path("audit.jsonl");
    {
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        let live = LivePolicy::new(denied.clone());
        let g = gate(Some("alice"), None, Mode::PartialAuto, &live, &sink);
        assert_eq!(
            call(&g, "g23.shell", json!({"command": "sudo rm -rf /srv"}))
                .1
                .as_deref(),
            Some("DENY_LISTED")
        );
    }
    let real = {
        let other = Scratch::new("g23-escalated-real");
        let sink = Arc::new(JsonlSink::open(other.path("audit.jsonl")).unwrap());
        let live = LivePolicy::new(none.clone());
        let g = gate(Some("alice"), None, Mode::PartialAuto, &live, &sink);
        call(&g, "g23.shell", json!({"command": "sudo rm -rf /srv"}))
    };
    assert_eq!(real.0, Ruling::Refused, "{real:?}");
    let report = replay(&none, std::slice::from_ref(&denied), &path);
    let wrong: Vec<_> = report
        .flips
        .iter()
        .filter(|r| r.tool == "g23.shell" && r.flip.to != real.0)
        .collect();
    assert!(
        wrong.is_empty(),
        "the real gate refuses it ({:?}); the replay says {wrong:?}\n{report}",
        real.1
    );
}

// ---------------------------------------------------------------------------------------------------
// Replay: names that read alike.
// ---------------------------------------------------------------------------------------------------

/// A gate of `оlga` (Cyrillic о), `olga` with a zero-width space or a trailing space follows
/// `[principals.olga]`. A candidate that denies olga a tool must flip those calls, as the gate would
/// refuse them.
#[test]
fn g23_a_lookalike_principal_is_replayed_under_the_table_it_reads_as() {
    let dir = Scratch::new("g23-lookalike-principal");
    let none = policy("none.toml", NONE);
    let candidate = policy(
        "candidate.toml",
        "format = 1\n[principals.olga]\ndeny = [\"g23.look\"]\n",
    );
    let names = ["\u{43e}lga", "olga\u{200b}", "olga "];
    let path = dir.path("audit.jsonl");
    {
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        let live = LivePolicy::new(none.clone());
        for name in names {
            let g = gate(Some(name), None, Mode::FullAuto, &live, &sink);
            assert_eq!(
                call(&g, "g23.look", json!({"host": "a"})).0,
                Ruling::Allowed
            );
        }
        // The real gate under the candidate refuses each.
        let strict = LivePolicy::new(candidate.clone());
        for name in names {
            let g = gate(Some(name), None, Mode::FullAuto, &strict, &sink);
            assert_eq!(
                call(&g, "g23.look", json!({"host": "a"})).1.as_deref(),
                Some("DENY_LISTED"),
                "{name:?}"
            );
        }
    }
    let report = replay(&candidate, std::slice::from_ref(&none), &path);
    let flipped: u64 = report
        .flips
        .iter()
        .filter(|r| r.flip.from == Ruling::Allowed && r.flip.to == Ruling::Refused)
        .map(|r| r.calls)
        .sum();
    assert_eq!(flipped, 3, "{report}");
}

/// `[agents.bot] ceiling = "SHADOW"` in the candidate: a gate labelled `bоt` (Cyrillic о) follows
/// it, so its FULL_AUTO refunds would be refused. The replay must flip them.
#[test]
fn g23_a_lookalike_agent_under_a_lowered_ceiling_flips() {
    let dir = Scratch::new("g23-lookalike-agent");
    let none = policy("none.toml", NONE);
    let candidate = policy(
        "candidate.toml",
        "format = 1\n[agents.bot]\nceiling = \"SHADOW\"\n",
    );
    let path = dir.path("audit.jsonl");
    {
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        let live = LivePolicy::new(none.clone());
        let g = gate(
            Some("alice"),
            Some("b\u{43e}t"),
            Mode::FullAuto,
            &live,
            &sink,
        );
        assert_eq!(
            call(&g, "g23.refund", json!({"amount": 1})).0,
            Ruling::Allowed
        );
        let strict = LivePolicy::new(candidate.clone());
        let g = gate(
            Some("alice"),
            Some("b\u{43e}t"),
            Mode::FullAuto,
            &strict,
            &sink,
        );
        assert_eq!(
            call(&g, "g23.refund", json!({"amount": 1})).0,
            Ruling::Refused
        );
    }
    let report = replay(&candidate, std::slice::from_ref(&none), &path);
    assert!(
        report
            .flips
            .iter()
            .any(|r| r.flip.from == Ruling::Allowed && r.flip.to == Ruling::Refused),
        "{report}"
    );
}

/// `[agents.bot] ceiling = "ADVISORY"` in force held a gate labelled `bоt` (Cyrillic о) at
/// ADVISORY, so its refund was refused. A candidate without that ceiling raises it: the call is a
/// widening or is counted apart (a ceiling the candidate raises), never decided as no change.
#[test]
fn g23_a_ceiling_the_candidate_raises_for_a_lookalike_agent_is_not_hidden() {
    let dir = Scratch::new("g23-lookalike-raise");
    let held = policy(
        "held.toml",
        "format = 1\n[agents.bot]\nceiling = \"ADVISORY\"\n",
    );
    let none = policy("none.toml", NONE);
    let path = dir.path("audit.jsonl");
    {
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        let live = LivePolicy::new(held.clone());
        let g = gate(
            Some("alice"),
            Some("b\u{43e}t"),
            Mode::FullAuto,
            &live,
            &sink,
        );
        assert_eq!(g.mode(), Mode::Advisory);
        assert_eq!(
            call(&g, "g23.refund", json!({"amount": 1})).0,
            Ruling::Refused
        );
    }
    let report = replay(&none, std::slice::from_ref(&held), &path);
    assert!(
        report.widens() || report.raised_ceilings.get("g23.refund") == Some(&1),
        "{report}"
    );
}

/// Two principals whose names read alike (`olga`, `оlga` with a Cyrillic о) are two rows of flips.
/// An operator reading the table must be able to tell them apart: their principals must not read
/// alike as shown (else one row passes for the other's).
#[test]
fn g23_two_rows_whose_principals_read_alike_are_told_apart_in_the_table() {
    let dir = Scratch::new("g23-rows-alike");
    let none = policy("none.toml", NONE);
    let strict = policy(
        "strict.toml",
        "format = 1\n[defaults]\ndeny = [\"g23.look\"]\n",
    );
    let path = dir.path("audit.jsonl");
    {
        let sink = JsonlSink::open(&path).unwrap();
        for (n, who) in ["olga", "\u{43e}lga"].into_iter().enumerate() {
            sink.record(&record(
                "g23.look",
                who,
                Decision::Allowed,
                Some(none.digest()),
                "2026-11-22T03:11:01.000000Z",
                n as u64,
            ))
            .unwrap();
        }
    }
    let report = replay(&strict, std::slice::from_ref(&none), &path);
    let shown = report.to_string();
    let rows: Vec<String> = shown
        .lines()
        .filter(|l| l.contains("g23.look") && l.contains("->"))
        .map(|l| {
            l.chars()
                .filter(|c| !c.is_ascii_digit() && *c != '#')
                .collect()
        })
        .collect();
    if rows.len() == 2 {
        assert_ne!(
            toolgate::names::reading(&rows[0]),
            toolgate::names::reading(&rows[1]),
            "two rows read alike:\n{shown}"
        );
    }
}

// ---------------------------------------------------------------------------------------------------
// Replay: what a human reads.
// ---------------------------------------------------------------------------------------------------

/// The JSON of a report (`--json`) carries the log's texts: a principal with a bidi override and a
/// zero-width space, a manifest digest (in each record's reference) with an override. As the
/// manifests' JSON does, it must write every character that hides or reorders text as `\uXXXX`.
#[test]
fn g23_the_json_report_writes_no_character_that_hides_or_reorders_text() {
    let dir = Scratch::new("g23-json");
    let none = policy("none.toml", NONE);
    let strict = policy(
        "strict.toml",
        "format = 1\n[defaults]\ndeny = [\"g23.look\"]\n",
    );
    let path = dir.path("audit.jsonl");
    {
        let sink = JsonlSink::open(&path).unwrap();
        let mut r = record(
            "g23.look",
            "mallory\u{202e}ecila\u{200b}",
            Decision::Allowed,
            Some(none.digest()),
            "2026-11-22T03:11:01.000000Z",
            1,
        );
        r.manifest_digest = "abc\u{202e}fed\u{2066}".to_owned().into();
        sink.record(&r).unwrap();
    }
    let report = replay(&strict, std::slice::from_ref(&none), &path);
    assert_eq!(report.flips.len(), 1, "{report}");
    // What `policy replay --json` prints.
    let json = report.to_json();
    let back: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        back,
        serde_json::to_value(&report).unwrap(),
        "the same value"
    );
    let hidden: Vec<char> = json
        .chars()
        .filter(|c| {
            matches!(*c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
                || c.is_control() && *c != '\n'
        })
        .collect();
    assert!(hidden.is_empty(), "{hidden:?} in\n{json}");
}

/// A record's `policy_digest` is text from the log: a digest holding ESC, a bidi override and a
/// newline that starts a forged first line. The table must show it escaped, on its line.
#[test]
fn g23_an_unknown_policy_digest_is_shown_escaped() {
    let dir = Scratch::new("g23-digest-text");
    let strict = policy(
        "strict.toml",
        "format = 1\n[defaults]\ndeny = [\"g23.look\"]\n",
    );
    let path = dir.path("audit.jsonl");
    {
        let sink = JsonlSink::open(&path).unwrap();
        sink.record(&record(
            "g23.look",
            "alice",
            Decision::Allowed,
            Some("\u{1b}[2J\u{202e}\nthe log verifies: 1 records, 0 flip"),
            "2026-11-22T03:11:01.000000Z",
            1,
        ))
        .unwrap();
        // A tool id no linked tool has, with the same.
        sink.record(&record(
            "g23.\u{1b}]0;x\u{7}gone\nthe log verifies",
            "alice",
            Decision::Allowed,
            None,
            "2026-11-22T03:11:02.000000Z",
            2,
        ))
        .unwrap();
    }
    let report = replay(&strict, &[], &path);
    let shown = report.to_string();
    assert!(
        !shown
            .chars()
            .any(|c| c == '\u{1b}' || c == '\u{202e}' || c == '\u{7}'),
        "{shown:?}"
    );
    assert_eq!(
        shown
            .lines()
            .filter(|l| l.trim_start().starts_with("the log verifies"))
            .count(),
        1,
        "{shown}"
    );
}

// ---------------------------------------------------------------------------------------------------
// Replay: live reloads.
// ---------------------------------------------------------------------------------------------------

/// A `LivePolicy` replaced mid-run: bob's first two looks under the old file, the third under the
/// candidate itself (refused). Replaying the candidate beside the old file flips the two and not the
/// third; replaying the old file as a candidate beside the new one shows the third widening; without
/// the old file, its two calls are counted apart by its digest.
#[test]
fn g23_a_log_under_several_policies_is_decided_each_under_its_own() {
    let dir = Scratch::new("g23-reload");
    let old = policy("ops.toml", NONE);
    let new = policy(
        "ops.toml",
        "format = 1\n[principals.bob]\ndeny = [\"g23.look\"]\n",
    );
    let path = dir.path("audit.jsonl");
    {
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        let live = LivePolicy::new(old.clone());
        let g = gate(Some("bob"), None, Mode::FullAuto, &live, &sink);
        call(&g, "g23.look", json!({"host": "a"}));
        call(&g, "g23.look", json!({"host": "b"}));
        live.replace(new.clone(), "on call");
        assert_eq!(
            call(&g, "g23.look", json!({"host": "c"})).0,
            Ruling::Refused
        );
    }
    let forward = replay(&new, std::slice::from_ref(&old), &path);
    assert_eq!((forward.calls, forward.decided), (3, 3), "{forward}");
    let rows: Vec<_> = forward
        .flips
        .iter()
        .map(|r| (r.flip.from, r.flip.to, r.calls))
        .collect();
    assert_eq!(
        rows,
        vec![(Ruling::Allowed, Ruling::Refused, 2)],
        "{forward}"
    );
    let back = replay(&old, std::slice::from_ref(&new), &path);
    let rows: Vec<_> = back
        .flips
        .iter()
        .map(|r| (r.flip.from, r.flip.to, r.calls))
        .collect();
    assert_eq!(rows, vec![(Ruling::Refused, Ruling::Allowed, 1)], "{back}");
    assert!(back.widens());
    let alone = replay(&new, &[], &path);
    assert_eq!(
        alone.unknown_policies.get(old.digest()),
        Some(&2),
        "{alone}"
    );
    assert_eq!(alone.decided, 1, "{alone}");
}

// ---------------------------------------------------------------------------------------------------
// Replay: hostile logs and a log being written.
// ---------------------------------------------------------------------------------------------------

/// The application's `policy replay` over hostile logs: a line of a million nested arrays (a parser
/// that recurses would overflow its stack and kill the process), and a line longer than a record may
/// be followed by a valid one. Each must end with an exit status (3: the log does not verify), never
/// a signal, and say so first.
#[test]
fn g23_hostile_lines_end_the_replay_with_a_status_not_a_crash() {
    let desk = crate::common::example("cli", "clap,policy-file");
    let dir = Scratch::new("g23-hostile");
    let none = dir.path("none.toml");
    let strict = dir.path("strict.toml");
    std::fs::write(&none, NONE).unwrap();
    std::fs::write(
        &strict,
        "format = 1\n[defaults]\ndeny = [\"deploy.delete\"]\n",
    )
    .unwrap();
    let deep = dir.path("deep.jsonl");
    {
        let mut f = std::fs::File::create(&deep).unwrap();
        let n = 1_000_000;
        let line = format!("{{\"seq\":1,\"x\":{}{}}}\n", "[".repeat(n), "]".repeat(n));
        f.write_all(line.as_bytes()).unwrap();
    }
    let long = dir.path("long.jsonl");
    {
        let mut f = std::fs::File::create(&long).unwrap();
        let line = format!("{{\"seq\":1,\"x\":\"{}\"}}\n", "a".repeat(17 << 20));
        f.write_all(line.as_bytes()).unwrap();
        f.write_all(b"{\"seq\":2}\n").unwrap();
    }
    let mut failures = Vec::new();
    for log in [&deep, &long] {
        let out = crate::common::run(
            std::process::Command::new(&desk)
                .args(["policy", "replay"])
                .arg(&strict)
                .arg("--log")
                .arg(log)
                .arg("--in-force")
                .arg(&none)
                .env_remove("TOOLGATE_MODE"),
            Duration::from_secs(120),
        );
        let code = out.status.and_then(|s| s.code());
        if code != Some(3) || !out.stdout.contains("DOES NOT VERIFY") {
            failures.push(format!("{}: {}", log.display(), out.describe()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A log replayed while its gates append to it: a line caught half written is a torn tail at
/// worst, never a break of the chain (which would say tampering, exit 3, to an operator replaying
/// a live log).
#[test]
fn g23_a_log_replayed_while_it_is_written_never_reads_as_tampered() {
    let dir = Scratch::new("g23-live-log");
    let none = policy("none.toml", NONE);
    let strict = policy(
        "strict.toml",
        "format = 1\n[defaults]\ndeny = [\"g23.look\"]\n",
    );
    let path = dir.path("audit.jsonl");
    let sink = Arc::new(JsonlSink::open(&path).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (sink, stop, none) = (sink.clone(), stop.clone(), none.clone());
        std::thread::spawn(move || {
            let live = LivePolicy::new(none);
            let g = gate(Some("alice"), None, Mode::FullAuto, &live, &sink);
            let long = "h".repeat(4_000);
            while !stop.load(Ordering::Relaxed) {
                call(&g, "g23.look", json!({ "host": long }));
            }
        })
    };
    let mut broken = None;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(8) {
        let report = replay(&strict, std::slice::from_ref(&none), &path);
        if report.is_broken() {
            broken = Some(report.to_string());
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(broken.is_none(), "{}", broken.unwrap_or_default());
}

/// The application's `policy replay` over a log whose chain breaks after a call that flips: the
/// break must decide the exit status (3, the log does not verify), not the flip (1), so that a CI
/// step reading the status sees the tampering.
#[test]
fn g23_a_log_that_breaks_after_a_flip_exits_3() {
    use clap::Parser;
    #[derive(Parser)]
    enum App {
        #[command(subcommand)]
        Policy(toolgate::cli::PolicyCommand),
    }
    let dir = Scratch::new("g23-exit");
    let none_path = dir.path("none.toml");
    let strict_path = dir.path("strict.toml");
    std::fs::write(&none_path, NONE).unwrap();
    std::fs::write(
        &strict_path,
        "format = 1\n[defaults]\ndeny = [\"g23.look\"]\n",
    )
    .unwrap();
    let none = PolicyFile::load(&none_path).unwrap();
    let log = dir.path("audit.jsonl");
    {
        let sink = JsonlSink::open(&log).unwrap();
        for n in 0..3 {
            sink.record(&record(
                "g23.look",
                "alice",
                Decision::Allowed,
                Some(none.digest()),
                "2026-11-22T03:11:01.000000Z",
                n,
            ))
            .unwrap();
        }
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let edited: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 2 {
                l.replace("alice", "alicf")
            } else {
                l.to_owned()
            }
        })
        .collect();
    std::fs::write(&log, edited.join("\n") + "\n").unwrap();
    let p = |p: &std::path::Path| p.display().to_string();
    let App::Policy(command) = App::parse_from([
        "app".to_owned(),
        "policy".to_owned(),
        "replay".to_owned(),
        p(&strict_path),
        "--log".to_owned(),
        p(&log),
        "--in-force".to_owned(),
        p(&none_path),
    ]);
    assert_eq!(command.run(), 3);
}

// ---------------------------------------------------------------------------------------------------
// Policy test against the real gate.
// ---------------------------------------------------------------------------------------------------

/// Escalation, `ask_at`, `out_of_band_at` and the mode: `sudo` raises `g23.shell` to HIGH_WRITE,
/// refused in PARTIAL_AUTO and asking in FULL_AUTO; `ask_at = "LOW_WRITE"` makes the plain command
/// ask. `policy test` must decide each as the gate does.
#[test]
fn g23_policy_test_agrees_with_the_gate_on_escalated_calls() {
    let files = [
        policy("a.toml", NONE),
        policy("b.toml", "format = 1\n[defaults]\nask_at = \"LOW_WRITE\"\n"),
        policy(
            "c.toml",
            "format = 1\n[defaults]\nout_of_band_at = \"HIGH_WRITE\"\nceiling = \"FULL_AUTO\"\n",
        ),
        policy(
            "d.toml",
            "format = 1\n[principals.alice]\nceiling = \"PARTIAL_AUTO\"\n",
        ),
    ];
    let mut found = Vec::new();
    for file in &files {
        for mode in [
            Mode::Shadow,
            Mode::Advisory,
            Mode::PartialAuto,
            Mode::FullAuto,
        ] {
            for command in ["ls", "sudo ls"] {
                found.extend(disagreement(
                    file,
                    Some("alice"),
                    None,
                    mode,
                    "g23.shell",
                    json!({ "command": command }),
                ));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// Names that read alike: a gate of `оlga` (Cyrillic о), `olga ` or `olga` with a zero-width space
/// follows `[principals.olga]`, and an agent `bоt` follows `[agents.bot]`. `policy test` must decide
/// their cases as the gate does.
#[test]
fn g23_policy_test_agrees_with_the_gate_on_lookalike_names() {
    let file = policy(
        "ops.toml",
        "format = 1\n[principals.olga]\ndeny = [\"g23.look\"]\n[agents.bot]\nceiling = \"SHADOW\"\n",
    );
    let mut found = Vec::new();
    for who in ["olga", "\u{43e}lga", "olga ", "olga\u{200b}", "\u{ff4f}lga"] {
        found.extend(disagreement(
            &file,
            Some(who),
            None,
            Mode::FullAuto,
            "g23.look",
            json!({"host": "a"}),
        ));
    }
    for agent in ["bot", "b\u{43e}t", "bot\u{200b}", " bot"] {
        found.extend(disagreement(
            &file,
            Some("alice"),
            Some(agent),
            Mode::FullAuto,
            "g23.refund",
            json!({"amount": 1}),
        ));
    }
    assert!(found.is_empty(), "{found:#?}");
}

// ---------------------------------------------------------------------------------------------------
// A property: the gate, policy test and replay agree.
// ---------------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Generated {
    deny: Vec<&'static str>,
    ask: Vec<&'static str>,
    ask_at: Option<&'static str>,
    alice_ceiling: Option<&'static str>,
    bot_ceiling: Option<&'static str>,
    refund_max: Option<u32>,
}

impl Generated {
    fn text(&self) -> String {
        let list = |v: &[&str]| {
            v.iter()
                .map(|s| format!("\"{s}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut t = format!(
            "format = 1\n[defaults]\ndeny = [{}]\nask = [{}]\n",
            list(&self.deny),
            list(&self.ask)
        );
        if let Some(r) = self.ask_at {
            t.push_str(&format!("ask_at = \"{r}\"\n"));
        }
        if let Some(m) = self.refund_max {
            t.push_str(&format!(
                "[[defaults.arguments]]\ntool = \"g23.refund\"\nparameter = \"amount\"\nmax = {m}\n"
            ));
        }
        if let Some(c) = self.alice_ceiling {
            t.push_str(&format!("[principals.alice]\nceiling = \"{c}\"\n"));
        }
        if let Some(c) = self.bot_ceiling {
            t.push_str(&format!("[agents.bot]\nceiling = \"{c}\"\n"));
        }
        t
    }
}

fn tools() -> impl Strategy<Value = Vec<&'static str>> {
    proptest::sample::subsequence(vec!["g23.look", "g23.refund", "g23.shell"], 0..=2)
}

fn generated() -> impl Strategy<Value = Generated> {
    let risk = proptest::option::of(proptest::sample::select(vec![
        "PROPOSE_ONLY",
        "LOW_WRITE",
        "HIGH_WRITE",
    ]));
    let ceiling = || {
        proptest::option::of(proptest::sample::select(vec![
            "SHADOW",
            "ADVISORY",
            "PARTIAL_AUTO",
        ]))
    };
    (
        tools(),
        tools(),
        risk,
        ceiling(),
        ceiling(),
        proptest::option::of(0u32..100),
    )
        .prop_map(
            |(deny, ask, ask_at, alice_ceiling, bot_ceiling, refund_max)| {
                let ask = ask.into_iter().filter(|t| !deny.contains(t)).collect();
                Generated {
                    deny,
                    ask,
                    ask_at,
                    alice_ceiling,
                    bot_ceiling,
                    refund_max,
                }
            },
        )
}

type Call = (
    Option<&'static str>,
    Option<&'static str>,
    Mode,
    &'static str,
    Value,
);

fn calls() -> impl Strategy<Value = Vec<Call>> {
    let one = (
        proptest::sample::select(vec![None, Some("alice"), Some("\u{430}lice"), Some("bob")]),
        proptest::sample::select(vec![None, Some("bot"), Some("b\u{43e}t")]),
        proptest::sample::select(vec![
            Mode::Shadow,
            Mode::Advisory,
            Mode::PartialAuto,
            Mode::FullAuto,
        ]),
        0usize..3,
        0u32..100,
        any::<bool>(),
    )
        .prop_map(|(p, a, mode, tool, amount, sudo)| {
            let (tool, args) = match tool {
                0 => ("g23.look", json!({"host": "a"})),
                1 => ("g23.refund", json!({ "amount": amount })),
                // `sudo` (an escalated call) has a test of its own.
                _ => (
                    "g23.shell",
                    json!({"command": if sudo { "ls -l" } else { "ls" }}),
                ),
            };
            (p, a, mode, tool, args)
        });
    proptest::collection::vec(one, 1..12)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// For generated policies and calls: `policy test` decides each call as the real gate following
    /// the file decided it; a replay of the log under the same policy flips nothing and decides
    /// every call; and against an empty candidate, each flip starts from what its record says the
    /// gate decided.
    #[test]
    fn g23_the_gate_policy_test_and_replay_agree_on_generated_policies(
        generated in generated(),
        calls in calls(),
    ) {
        let text = generated.text();
        // A file whose rules others make dead does not check: not a policy an operator can use.
        let parsed = PolicyFile::parse("gen.toml", &text);
        prop_assume!(parsed.is_ok());
        let file = parsed.unwrap();
        let dir = Scratch::new("g23-property");
        let path = dir.path("audit.jsonl");
        let mut disagreements = Vec::new();
        {
            let sink = Arc::new(JsonlSink::open(&path).unwrap());
            let live = LivePolicy::new(file.clone());
            for (principal, agent, mode, tool, args) in &calls {
                let g = approving_gate(*principal, *agent, *mode, &live, &sink);
                let real = call_approved(&g, &path, tool, args.clone());
                let tested = policy_test(&file, *principal, *agent, *mode, tool, args);
                let same = tested.0 == real.0 && (tested.0 != Ruling::Refused || tested.1 == real.1);
                if !same {
                    disagreements.push(format!(
                        "{tool} {args} {principal:?} {agent:?} {mode:?}: test {tested:?}, gate {real:?}"
                    ));
                }
            }
        }
        prop_assert!(disagreements.is_empty(), "{}\n{:#?}", text, disagreements);

        let same = replay(&file, std::slice::from_ref(&file), &path);
        prop_assert!(same.is_intact(), "{}", same);
        prop_assert_eq!(same.calls, calls.len() as u64, "{}", same);
        let apart: u64 = same.unknown_policies.values().chain(same.other_tools.values())
            .chain(same.unrecorded_arguments.values()).chain(same.raised_ceilings.values()).sum();
        prop_assert_eq!(same.decided + apart, same.calls, "{}\n{}", text, same);
        prop_assert!(same.unknown_policies.is_empty() && same.other_tools.is_empty()
            && same.raised_ceilings.is_empty(), "{}\n{}", text, same);
        prop_assert!(same.flips.is_empty(), "{}\n{}", text, same);

        let empty = policy("empty.toml", NONE);
        let against = replay(&empty, std::slice::from_ref(&file), &path);
        let written = records(&path);
        for row in &against.flips {
            for at in &row.seqs {
                let record = &written[&at.seq];
                prop_assert_eq!(
                    recorded_ruling(record),
                    row.flip.from,
                    "{}\nseq {} {:?}\n{}",
                    text,
                    at.seq,
                    record,
                    against
                );
            }
        }
    }
}
