//! Rules logged only (a policy file's `[shadow]` tables): decided beside the enforced ones and
//! recorded (`rule_in_shadow`), never changing a call; checked when read; told apart by `diff`.

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate::audit::{AuditRecord, JsonlSink, MemorySink, Stage, verify_file};
use toolgate::policy_file::{Direction, LivePolicy, PolicyFile};
use toolgate::{AllowAllApprover, Denied, Gate, Mode, registry, tool};

use crate::common::Scratch;

/// read, whose output is untrusted: it closes the taint latch.
#[tool(risk = "READ_ONLY", domain = "sh", callable, untrusted_output)]
fn fetch(url: String) -> Result<String, Denied> {
    Ok(url)
}

/// refund.
#[tool(risk = "LOW_WRITE", domain = "sh", callable, record_arguments)]
fn refund(amount: u32) -> Result<u32, Denied> {
    Ok(amount)
}

/// wipe.
#[tool(risk = "HIGH_WRITE", domain = "sh", callable)]
fn wipe(host: String) -> Result<String, Denied> {
    Ok(host)
}

fn policy(text: &str) -> PolicyFile {
    PolicyFile::parse("ops.toml", text).unwrap_or_else(|e| panic!("{e}"))
}

/// A gate of alice in `mode` following `text`, approving what asks, with its records.
fn gate(text: &str, mode: Mode) -> (Gate, MemorySink, LivePolicy) {
    let sink = MemorySink::new();
    let live = LivePolicy::new(policy(text));
    let gate = Gate::builder()
        .mode(mode)
        .principal("alice")
        .approver(AllowAllApprover)
        .policy(live.clone())
        .audit(sink.clone())
        .build()
        .unwrap();
    (gate, sink, live)
}

fn call(gate: &Gate, id: &str, arguments: Value) -> Result<Value, String> {
    registry()
        .call(gate, id, arguments)
        .now()
        .expect("a sync tool answers at once")
        .map_err(|e| e.code().to_owned())
}

/// The last record of `tool` at `stage`.
fn last(sink: &MemorySink, tool: &str, stage: Stage) -> AuditRecord {
    sink.records()
        .into_iter()
        .rev()
        .find(|r| r.tool == tool && r.stage == stage)
        .unwrap_or_else(|| panic!("no {stage:?} record of {tool}"))
}

#[test]
fn each_kind_of_rule_logged_only_is_recorded_beside_a_call_it_does_not_change() {
    // (the shadow table, the call, what the record says)
    let cases: [(&str, &str, Value, &str); 6] = [
        (
            "[shadow.defaults]\ndeny = [\"sh.wipe\"]\n",
            "sh.wipe",
            json!({"host": "web-1"}),
            "refused (DENY_LISTED) by sh.wipe (ops.toml:3:9)",
        ),
        (
            "[shadow.defaults]\nask = [\"sh.refund\"]\n",
            "sh.refund",
            json!({"amount": 5}),
            "asks by ask \"sh.refund\" (ops.toml:3:8)",
        ),
        (
            "[shadow.defaults]\nask_at = \"LOW_WRITE\"\n",
            "sh.refund",
            json!({"amount": 5}),
            "asks by ask_at LOW_WRITE (ops.toml:3:10)",
        ),
        (
            "[shadow.principals.alice]\nceiling = \"ADVISORY\"\n",
            "sh.refund",
            json!({"amount": 5}),
            "refused (MODE_NOT_ALLOWED) by ceiling ADVISORY (ops.toml:3:11)",
        ),
        (
            "[[shadow.defaults.arguments]]\ntool = \"sh.refund\"\nparameter = \"amount\"\nmax = 3\n",
            "sh.refund",
            json!({"amount": 5}),
            "refused (ARGUMENT_REFUSED) by rule ops.toml:2:1: `amount` 5 is outside ..=3",
        ),
        (
            "[shadow.agents.nobody]\ndeny = [\"sh.*\"]\n",
            "sh.refund",
            json!({"amount": 5}),
            "",
        ),
    ];
    for (table, tool, arguments, said) in cases {
        let text = format!("format = 1\n{table}");
        let (gate, sink, _) = gate(&text, Mode::FullAuto);
        assert!(call(&gate, tool, arguments.clone()).is_ok(), "{table}");
        let enter = last(&sink, tool, Stage::Enter);
        let expected = (!said.is_empty()).then(|| said.to_owned());
        assert_eq!(enter.rule_in_shadow, expected, "{table}");
        // The call ran as it would without the table.
        assert!(
            sink.records()
                .iter()
                .any(|r| r.tool == tool && r.stage == Stage::Exit)
        );
    }
}

#[test]
fn a_shadow_rule_is_recorded_only_where_it_is_stricter_than_the_decision() {
    let (gate, sink, _) = gate(
        "format = 1\n[defaults]\nask = [\"sh.refund\"]\ndeny = [\"sh.wipe\"]\n\
         [shadow.defaults]\nask = [\"sh.refund\"]\ndeny = [\"sh.wipe\", \"sh.refund\"]\n",
        Mode::FullAuto,
    );
    // Refused by the enforced deny: nothing stricter to say.
    assert_eq!(
        call(&gate, "sh.wipe", json!({"host": "a"})).unwrap_err(),
        "DENY_LISTED"
    );
    assert_eq!(last(&sink, "sh.wipe", Stage::Refused).rule_in_shadow, None);
    // Asked and approved: the shadow's deny is stricter, its ask is not.
    assert!(call(&gate, "sh.refund", json!({"amount": 1})).is_ok());
    assert_eq!(
        last(&sink, "sh.refund", Stage::Enter)
            .rule_in_shadow
            .as_deref(),
        Some("refused (DENY_LISTED) by sh.refund (ops.toml:7:20)")
    );
}

#[test]
fn a_closed_latch_under_a_shadow_taint_refuse_is_recorded_as_a_refusal() {
    let (gate, sink, _) = gate(
        "format = 1\n[shadow.defaults]\ntaint = \"refuse\"\n",
        Mode::FullAuto,
    );
    assert!(call(&gate, "sh.fetch", json!({"url": "https://example.com"})).is_ok());
    // The latch asks for the write, and the approver approves it: a shadow `taint = "refuse"`
    // would have refused it.
    assert!(call(&gate, "sh.refund", json!({"amount": 1})).is_ok());
    assert_eq!(
        last(&sink, "sh.refund", Stage::Enter)
            .rule_in_shadow
            .as_deref(),
        Some("refused (TAINTED_SESSION) by taint = \"refuse\" (ops.toml:3:9)")
    );
}

#[test]
fn a_replacement_adding_or_removing_shadow_rules_is_followed_by_the_next_call() {
    let (gate, sink, live) = gate("format = 1\n", Mode::FullAuto);
    assert!(call(&gate, "sh.refund", json!({"amount": 1})).is_ok());
    assert_eq!(last(&sink, "sh.refund", Stage::Enter).rule_in_shadow, None);
    live.replace(
        policy("format = 1\n[shadow.defaults]\ndeny = [\"sh.refund\"]\n"),
        "ops",
    );
    assert!(call(&gate, "sh.refund", json!({"amount": 2})).is_ok());
    assert!(
        last(&sink, "sh.refund", Stage::Enter)
            .rule_in_shadow
            .is_some()
    );
    live.replace(policy("format = 1\n"), "ops");
    assert!(call(&gate, "sh.refund", json!({"amount": 3})).is_ok());
    assert_eq!(last(&sink, "sh.refund", Stage::Enter).rule_in_shadow, None);
}

#[test]
fn a_shadow_ruling_is_in_the_log_s_chain_and_explained() {
    let dir = Scratch::new("shadow-log");
    let path = dir.path("audit.jsonl");
    let text = "format = 1\n[shadow.defaults]\ndeny = [\"sh.refund\"]\n";
    {
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .policy(LivePolicy::new(policy(text)))
            .audit_shared(Arc::new(JsonlSink::open(&path).unwrap()))
            .build()
            .unwrap();
        assert!(call(&gate, "sh.refund", json!({"amount": 1})).is_ok());
    }
    let report = verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report:?}");
    let log = std::fs::read_to_string(&path).unwrap();
    assert!(
        log.contains(r#""rule_in_shadow":"refused (DENY_LISTED) by sh.refund (ops.toml:3:9)""#),
        "{log}"
    );
    let explained = policy(text)
        .explain(
            None,
            None,
            Mode::FullAuto,
            "sh.refund",
            &json!({"amount": 1}),
        )
        .unwrap();
    assert_eq!(explained.decision, "allowed");
    assert_eq!(
        explained.shadow.as_deref(),
        Some("refused (DENY_LISTED) by sh.refund (ops.toml:3:9)")
    );
    assert!(
        explained
            .to_string()
            .contains("shadow:   refused (DENY_LISTED) by sh.refund (ops.toml:3:9) (logged only)")
    );
}

#[test]
fn shadow_tables_are_checked_and_hold_only_rules_a_gate_can_log() {
    let errors = |text: &str| match PolicyFile::parse("ops.toml", text) {
        Ok(_) => panic!("the file checks:\n{text}"),
        Err(errors) => errors.to_string(),
    };
    let text = "format = 1\n[shadow.defaults]\nbudgets = [{ tool = \"sh.refund\", calls = 1, per = \"1h\" }]\n\
                out_of_band = [\"sh.wipe\"]\nout_of_band_at = \"LOW_WRITE\"\ndeny_resources = [\"x://*\"]\n\
                deny = [\"sh.nothing\"]\n";
    let shown = errors(text);
    for (line, key) in [
        (3, "budgets"),
        (4, "out_of_band"),
        (5, "out_of_band_at"),
        (6, "deny_resources"),
    ] {
        assert!(
            shown.contains(&format!("ops.toml:{line}:"))
                && shown.contains(&format!("`{key}` cannot be logged only")),
            "{key}: {shown}"
        );
    }
    assert!(
        shown.contains("ops.toml:7:9"),
        "a pattern no tool matches: {shown}"
    );
    let typo = errors("format = 1\n[shadow.defaults]\ndenny = [\"sh.wipe\"]\n");
    assert!(typo.contains("did you mean `deny`?"), "{typo}");
    let table = errors("format = 1\n[shadow.defaultz]\ndeny = [\"sh.wipe\"]\n");
    assert!(table.contains("defaultz"), "{table}");
    let alike = errors(
        "format = 1\n[shadow.principals.alice]\ndeny = [\"sh.wipe\"]\n[shadow.principals.\"\u{430}lice\"]\ndeny = [\"sh.wipe\"]\n",
    );
    assert!(
        alike.contains("two tables of names that read alike are one"),
        "{alike}"
    );
}

#[test]
fn diff_tells_shadow_rules_apart_from_what_narrows_or_widens() {
    let old = policy("format = 1\n[shadow.defaults]\ndeny = [\"sh.wipe\"]\n");
    let new = policy("format = 1\n[shadow.defaults]\ndeny = [\"sh.refund\"]\n");
    let diff = old.diff(&new);
    assert!(!diff.widens(), "{diff}");
    assert_eq!(diff.changes.len(), 2, "{diff}");
    assert!(
        diff.changes
            .iter()
            .all(|c| c.direction == Direction::Shadow),
        "{diff}"
    );
    let shown = diff.to_string();
    assert!(
        shown.contains("shadow   [shadow.defaults]  deny \"sh.refund\" added, line 3"),
        "{shown}"
    );
    // Enforcing a rule logged only: the enforced table narrows, the shadow one loses it.
    let enforced = policy("format = 1\n[defaults]\ndeny = [\"sh.wipe\"]\n");
    let shown = old.diff(&enforced).to_string();
    assert!(
        shown.contains("narrows  [defaults]  deny \"sh.wipe\" added"),
        "{shown}"
    );
    assert!(
        shown.contains("shadow   [shadow.defaults]  deny \"sh.wipe\" removed"),
        "{shown}"
    );
}

/// The text of `file` after the rule at `place` is turned on.
fn promoted(file: &str, place: &str) -> String {
    PolicyFile::promote("ops.toml", file, place)
        .unwrap_or_else(|e| panic!("{place}: {e}\n{file}"))
        .text
}

#[test]
fn one_command_turns_each_kind_of_shadow_rule_on_and_keeps_the_rest_as_written() {
    // (the file, the rule's place, the file after)
    let cases: [(&str, &str, &str); 6] = [
        (
            "format = 1\n# the enforced rules\n[defaults]\ndeny = [\"sh.fetch\"] # fetching is off\n\n[shadow.defaults]\ndeny = [\"sh.wipe\", \"sh.refund\"]\n",
            "7:9",
            "format = 1\n# the enforced rules\n[defaults]\ndeny = [\"sh.fetch\", \"sh.wipe\"] # fetching is off\n\n[shadow.defaults]\ndeny = [\"sh.refund\"]\n",
        ),
        (
            "format = 1\n[shadow.principals.alice]\nask = [\"sh.refund\"]\n",
            "ops.toml:3:8",
            "format = 1\n\n[principals.alice]\nask = [\"sh.refund\"]\n",
        ),
        (
            "format = 1\n[defaults]\nceiling = \"ADVISORY\"\n[shadow.defaults]\nceiling = \"SHADOW\"\ntaint = \"refuse\"\n",
            "5:11",
            "format = 1\n[defaults]\nceiling = \"SHADOW\"\n[shadow.defaults]\ntaint = \"refuse\"\n",
        ),
        (
            "format = 1\n[defaults]\nask_at = \"HIGH_WRITE\"\n[shadow.defaults]\nask_at = \"LOW_WRITE\"\n",
            "5:10",
            "format = 1\n[defaults]\nask_at = \"LOW_WRITE\"\n",
        ),
        (
            "format = 1\n[shadow.agents.bot]\ntaint = \"refuse\"\n",
            "3:9",
            "format = 1\n\n[agents.bot]\ntaint = \"refuse\"\n",
        ),
        (
            "format = 1\n[[shadow.defaults.arguments]]\ntool = \"sh.refund\"\nparameter = \"amount\"\nmax = 50\n[[shadow.defaults.arguments]]\ntool = \"sh.wipe\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n",
            "6:1",
            "",
        ),
    ];
    for (file, place, expected) in cases {
        let text = promoted(file, place);
        if !expected.is_empty() {
            assert_eq!(text, expected, "{place} of\n{file}");
        }
        let before = policy(file);
        let after = policy(&text);
        let diff = before.diff(&after);
        assert!(!diff.widens(), "{diff}");
        assert!(
            diff.changes
                .iter()
                .any(|c| c.direction == Direction::Narrows),
            "{place}: nothing was turned on:\n{diff}"
        );
    }
    // A ceiling logged only that is laxer than the enforced one leaves the stricter in force.
    assert_eq!(
        promoted(
            "format = 1\n[defaults]\nceiling = \"ADVISORY\"\n[shadow.defaults]\nceiling = \"PARTIAL_AUTO\"\n",
            "5:11"
        ),
        "format = 1\n[defaults]\nceiling = \"ADVISORY\"\n"
    );
    // The argument rule moved is the one at the place, whole, and the other stays logged only.
    let file = cases[5].0;
    let after = promoted(file, "6:1");
    let live = LivePolicy::new(policy(&after));
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .policy(live)
        .build()
        .unwrap();
    assert_eq!(
        call(&gate, "sh.wipe", json!({"host": "prod-1"})),
        Err("ARGUMENT_REFUSED".to_owned())
    );
    assert!(call(&gate, "sh.refund", json!({"amount": 500})).is_ok());
    assert!(after.contains("[[shadow.defaults.arguments]]"), "{after}");
    assert!(after.contains("[[defaults.arguments]]"), "{after}");
}

#[test]
fn a_place_that_names_no_shadow_rule_is_refused_and_says_why() {
    let file =
        "format = 1\n[defaults]\ndeny = [\"sh.fetch\"]\n[shadow.defaults]\ndeny = [\"sh.wipe\"]\n";
    for (place, expected) in [
        ("3:9", "is the place of no rule of a [shadow] table"),
        ("5:1", "is the place of no rule of a [shadow] table"),
        (
            "other.toml:5:9",
            "is a place in \"other.toml\", not in \"ops.toml\"",
        ),
        ("five:nine", "is not a place"),
        ("0:9", "is not a place"),
    ] {
        let error = PolicyFile::promote("ops.toml", file, place)
            .err()
            .unwrap_or_else(|| panic!("{place} was promoted"))
            .to_string();
        assert!(error.contains(expected), "{place}: {error}");
    }
    let error = PolicyFile::promote(
        "ops.toml",
        "format = 1\n[defaults]\ndeny = [\"sh.nothing\"]\n",
        "3:9",
    )
    .err()
    .unwrap()
    .to_string();
    assert!(error.contains("matches no linked tool"), "{error}");
}
