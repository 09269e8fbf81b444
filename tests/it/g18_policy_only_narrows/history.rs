//! Rules over history (`[[TABLE.history]]`): a call only within a window after another ended without
//! an error (`after`), or never within a window after another ran (`not_after`), per principal or per
//! session; decided with the budgets, and at the commit point.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::audit::JsonlSink;
use toolgate::gate::budget::{
    BudgetCharge, BudgetFuture, BudgetStore, MemoryBudgets, ReleaseFuture, Reservation,
};
use toolgate::policy_file::{LivePolicy, PolicyFile, ReplayFilter, ReplayReport};

use super::replay::{NONE, replay, replay_with};
use crate::common::Scratch;
use toolgate::{
    Approval, ApprovalRequest, Approver, CallError, DenialCode, Denied, Gate, Mode, registry, tool,
};

#[derive(Debug)]
enum BackupError {
    Refused(Denied),
    Failed,
}

impl From<Denied> for BackupError {
    fn from(denied: Denied) -> Self {
        BackupError::Refused(denied)
    }
}

impl std::fmt::Display for BackupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackupError::Refused(denied) => write!(f, "{denied}"),
            BackupError::Failed => f.write_str("the backup failed"),
        }
    }
}

/// back up a database; fails where asked to.
#[tool(risk = "LOW_WRITE", domain = "hist", callable)]
fn backup(fail: bool) -> Result<(), BackupError> {
    if fail {
        return Err(BackupError::Failed);
    }
    Ok(())
}

/// drop a table.
#[tool(risk = "LOW_WRITE", domain = "hist", callable)]
fn drop_table(table: String) -> Result<String, Denied> {
    Ok(table)
}

/// delete a user.
#[tool(risk = "LOW_WRITE", domain = "hist", callable)]
fn delete_user(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

/// read a secret.
#[tool(risk = "READ_ONLY", domain = "hist", callable)]
fn read_secret(name: String) -> Result<String, Denied> {
    Ok(name)
}

/// send an email.
#[tool(risk = "LOW_WRITE", domain = "hist", callable)]
fn send_email(to: String) -> Result<String, Denied> {
    Ok(to)
}

const BACKUP_FIRST: &str = "format = 1\n\
[[defaults.history]]\n\
tool = \"hist.drop_table\"\n\
after = \"hist.backup\"\n\
within = \"1h\"\n";

const ONE_DELETE_PER_SESSION: &str = "format = 1\n\
[[defaults.history]]\n\
tool = \"hist.delete_user\"\n\
not_after = \"hist.delete_user\"\n\
within = \"1h\"\n\
per = \"session\"\n";

fn policy(text: &str) -> PolicyFile {
    PolicyFile::parse("ops.toml", text).unwrap_or_else(|e| panic!("{e}"))
}

/// A PARTIAL_AUTO gate of `principal` following `text`, its budgets in `store`.
fn gate(principal: &str, text: &str, store: &Arc<dyn BudgetStore>) -> Gate {
    Gate::builder()
        .mode(Mode::PartialAuto)
        .principal(principal)
        .budget_store_shared(store.clone())
        .policy(LivePolicy::new(policy(text)))
        .build()
        .unwrap()
}

fn memory() -> Arc<dyn BudgetStore> {
    Arc::new(MemoryBudgets::new())
}

fn call(gate: &Gate, id: &str, arguments: Value) -> Result<Value, CallError> {
    registry()
        .call(gate, id, arguments)
        .now()
        .expect("a sync tool answers at once")
}

/// The refusal of a call that was refused.
fn refusal(result: Result<Value, CallError>) -> Denied {
    match result {
        Err(CallError::Denied(denied)) => denied,
        other => panic!("not refused: {other:?}"),
    }
}

/// `ran`, `error` (the body's), or the refusal's code.
fn code(result: Result<Value, CallError>) -> &'static str {
    match result {
        Ok(_) => "ran",
        Err(CallError::Denied(denied)) => denied.code().as_str(),
        Err(_) => "error",
    }
}

#[test]
fn a_call_that_must_follow_another_runs_only_after_it_ended_without_an_error() {
    let store = memory();
    let gate = gate("alice", BACKUP_FIRST, &store);
    let refused = refusal(call(&gate, "hist.drop_table", json!({"table": "users"})));
    assert_eq!(refused.code(), DenialCode::HistoryRefused);
    let detail = refused.detail().unwrap_or_default();
    assert!(
        detail.contains("only within 3600 s after a call of `hist.backup` ended without an error")
            && detail.contains("principal `alice`")
            && detail.contains("[defaults]"),
        "{detail}"
    );
    assert_eq!(refused.retry_after(), None, "no wait brings the backup");
    assert!(
        refused.to_string().contains("for the calls before it"),
        "{refused}"
    );

    // A backup that failed is no backup.
    assert_eq!(
        code(call(&gate, "hist.backup", json!({"fail": true}))),
        "error"
    );
    assert_eq!(
        code(call(&gate, "hist.drop_table", json!({"table": "users"}))),
        "HISTORY_REFUSED"
    );
    call(&gate, "hist.backup", json!({"fail": false})).unwrap();
    assert_eq!(
        call(&gate, "hist.drop_table", json!({"table": "users"})).unwrap(),
        json!("users")
    );
    // The backup counts for every later call within the window, not once.
    assert_eq!(
        code(call(&gate, "hist.drop_table", json!({"table": "orders"}))),
        "ran"
    );
}

#[test]
fn the_call_to_follow_counts_only_within_its_window() {
    let store = memory();
    let text = BACKUP_FIRST.replace("\"1h\"", "\"1s\"");
    let gate = gate("alice", &text, &store);
    call(&gate, "hist.backup", json!({"fail": false})).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        code(call(&gate, "hist.drop_table", json!({"table": "users"}))),
        "HISTORY_REFUSED"
    );
}

#[test]
fn a_history_per_principal_is_shared_by_the_principals_gates_and_no_one_elses() {
    let store = memory();
    let alice_backs_up = gate("alice", BACKUP_FIRST, &store);
    let alice_drops = gate("alice", BACKUP_FIRST, &store);
    let bob = gate("bob", BACKUP_FIRST, &store);
    call(&alice_backs_up, "hist.backup", json!({"fail": false})).unwrap();
    assert_eq!(
        code(call(&alice_drops, "hist.drop_table", json!({"table": "t"}))),
        "ran"
    );
    assert_eq!(
        code(call(&bob, "hist.drop_table", json!({"table": "t"}))),
        "HISTORY_REFUSED"
    );
    // A gate without a principal has a history of its own: alice's backup is not its.
    let nobody = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget_store_shared(store.clone())
        .policy(LivePolicy::new(policy(BACKUP_FIRST)))
        .build()
        .unwrap();
    assert_eq!(
        code(call(&nobody, "hist.drop_table", json!({"table": "t"}))),
        "HISTORY_REFUSED"
    );
}

#[test]
fn one_call_per_session_holds_for_the_gate_and_its_clones_and_not_for_another_session() {
    let store = memory();
    let first = gate("alice", ONE_DELETE_PER_SESSION, &store);
    let second = gate("alice", ONE_DELETE_PER_SESSION, &store);
    assert_eq!(
        code(call(&first, "hist.delete_user", json!({"id": 1}))),
        "ran"
    );
    let refused = refusal(call(&first.clone(), "hist.delete_user", json!({"id": 2})));
    assert_eq!(refused.code(), DenialCode::HistoryRefused);
    let detail = refused.detail().unwrap_or_default();
    assert!(
        detail.contains("not within 3600 s after a call of `hist.delete_user` ran in this session"),
        "{detail}"
    );
    let retry = refused
        .retry_after()
        .expect("when the first leaves the window");
    assert!(
        retry > Duration::from_secs(3500) && retry <= Duration::from_secs(3600),
        "{retry:?}"
    );
    assert_eq!(
        code(call(&second, "hist.delete_user", json!({"id": 3}))),
        "ran"
    );
}

#[test]
fn a_call_forbidden_after_another_runs_before_it_and_not_after() {
    let store = memory();
    let text = "format = 1\n\
        [[principals.alice.history]]\n\
        tool = \"hist.send_email\"\n\
        not_after = \"hist.read_secret\"\n\
        within = \"1h\"\n";
    let gate = gate("alice", text, &store);
    assert_eq!(
        code(call(&gate, "hist.send_email", json!({"to": "a@b"}))),
        "ran"
    );
    assert_eq!(
        code(call(&gate, "hist.read_secret", json!({"name": "k"}))),
        "ran"
    );
    assert_eq!(
        code(call(&gate, "hist.send_email", json!({"to": "a@b"}))),
        "HISTORY_REFUSED"
    );
    // The forbidden call is not counted: the secret may be read again.
    assert_eq!(
        code(call(&gate, "hist.read_secret", json!({"name": "k"}))),
        "ran"
    );
}

#[test]
fn racing_calls_of_one_session_run_one() {
    let store = memory();
    let gate = gate("alice", ONE_DELETE_PER_SESSION, &store);
    let barrier = Arc::new(Barrier::new(8));
    let ran: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8u64)
            .map(|id| {
                let (gate, barrier) = (gate.clone(), barrier.clone());
                scope.spawn(move || {
                    barrier.wait();
                    call(&gate, "hist.delete_user", json!({"id": id})).is_ok()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| usize::from(h.join().unwrap()))
            .sum()
    });
    assert_eq!(ran, 1);
}

/// Rejects every call.
struct Rejecting;

impl Approver for Rejecting {
    fn approve(&self, _request: &ApprovalRequest<'_>) -> Approval {
        Approval::Reject("no".into())
    }
}

#[test]
fn a_call_refused_after_its_check_leaves_no_trace_in_the_history() {
    let store = memory();
    let text = format!("{ONE_DELETE_PER_SESSION}[defaults]\nask = [\"hist.delete_user\"]\n");
    let rejecting = Gate::builder()
        .mode(Mode::PartialAuto)
        .principal("alice")
        .budget_store_shared(store.clone())
        .approver(Rejecting)
        .policy(LivePolicy::new(policy(&text)))
        .build()
        .unwrap();
    assert_eq!(
        code(call(&rejecting, "hist.delete_user", json!({"id": 1}))),
        "APPROVAL_REJECTED"
    );
    // Had the rejected call kept its unit, this one would be refused HISTORY_REFUSED.
    assert_eq!(
        code(call(&rejecting, "hist.delete_user", json!({"id": 1}))),
        "APPROVAL_REJECTED"
    );
}

#[test]
fn the_history_outlives_a_reload_that_keeps_the_rule_and_a_rule_over_other_calls_starts_empty() {
    let store = memory();
    let live = LivePolicy::new(policy(BACKUP_FIRST));
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .principal("alice")
        .budget_store_shared(store.clone())
        .policy(live.clone())
        .build()
        .unwrap();
    call(&gate, "hist.backup", json!({"fail": false})).unwrap();
    assert!(live.replace(
        policy(&format!(
            "{BACKUP_FIRST}[defaults]\ndeny = [\"hist.send_email\"]\n"
        )),
        "operator-olga"
    ));
    assert_eq!(
        code(call(&gate, "hist.drop_table", json!({"table": "t"}))),
        "ran"
    );
    // A rule over other calls has a history of its own: the backup is not in it.
    assert!(live.replace(
        policy(&BACKUP_FIRST.replace("after = \"hist.backup\"", "after = \"hist.read_secret\"")),
        "operator-olga"
    ));
    assert_eq!(
        code(call(&gate, "hist.drop_table", json!({"table": "t"}))),
        "HISTORY_REFUSED"
    );
}

/// A store that counts budgets but keeps no history.
struct CountsOnly(MemoryBudgets);

impl BudgetStore for CountsOnly {
    fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.0.take(charges, reservation)
    }

    fn release(&self, charges: &[BudgetCharge], reservation: Reservation) -> ReleaseFuture {
        self.0.release(charges, reservation)
    }

    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.0.hold(charges, reservation)
    }
}

#[test]
fn a_store_that_keeps_no_history_refuses_the_calls_a_rule_over_history_decides() {
    let store: Arc<dyn BudgetStore> = Arc::new(CountsOnly(MemoryBudgets::new()));
    let gate = gate("alice", BACKUP_FIRST, &store);
    call(&gate, "hist.backup", json!({"fail": false})).unwrap();
    let refused = refusal(call(&gate, "hist.drop_table", json!({"table": "t"})));
    assert_eq!(refused.code(), DenialCode::BudgetStoreUnavailable);
    assert!(
        refused
            .detail()
            .unwrap_or_default()
            .contains("keeps no history"),
        "{refused}"
    );
    // Calls no rule over history decides are not its business.
    assert_eq!(
        code(call(&gate, "hist.read_secret", json!({"name": "k"}))),
        "ran"
    );
}

#[test]
fn a_rule_over_history_is_checked_when_read() {
    let cases: [(&str, &str); 7] = [
        (
            "[[defaults.history]]\ntool = \"hist.drop_table\"\nafter = \"hist.backup\"\nnot_after = \"hist.backup\"\nwithin = \"1h\"\n",
            "5:13: a rule over history has one of `after` and `not_after`: write two rules",
        ),
        (
            "[[defaults.history]]\ntool = \"hist.drop_table\"\nwithin = \"1h\"\n",
            "3:8: a rule over history names the calls it looks back at",
        ),
        (
            "[[defaults.history]]\ntool = \"hist.*\"\nafter = \"hist.backup\"\nwithin = \"1h\"\n",
            "4:9: `hist.backup` is both the tool and the call it must follow",
        ),
        (
            "[[defaults.history]]\ntool = \"hist.drop_table\"\nafter = \"hist.backup\"\nwithin = \"1h\"\nper = \"sesion\"\n",
            "6:7: `per` is \"principal\" or \"session\", not \"sesion\"; did you mean `session`?",
        ),
        (
            "[[defaults.history]]\ntool = \"hist.drop_table\"\nafter = \"hist.backup\"\nwithin = \"0s\"\n",
            "5:10: `within` is a window",
        ),
        (
            "[[defaults.history]]\ntool = \"hist.drop_tables\"\nafter = \"hist.backup\"\nwithin = \"1h\"\n",
            "3:8: `history.tool` pattern \"hist.drop_tables\" matches no",
        ),
        (
            "[[shadow.defaults.history]]\ntool = \"hist.drop_table\"\nafter = \"hist.backup\"\nwithin = \"1h\"\n",
            "`history` cannot be logged only",
        ),
    ];
    for (rules, expected) in cases {
        let text = format!("format = 1\n{rules}");
        let error = PolicyFile::parse("ops.toml", &text)
            .err()
            .unwrap_or_else(|| panic!("accepted:\n{text}"))
            .to_string();
        assert!(error.contains(expected), "{text}\n---\n{error}");
    }
    let unknown = PolicyFile::parse(
        "ops.toml",
        "format = 1\n[[defaults.history]]\ntool = \"hist.drop_table\"\nafter = \"hist.backup\"\nwithin = \"1h\"\nwindow = \"1h\"\n",
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        unknown.contains(
            "unknown key `window`; this table holds `tool`, `after`, `not_after`, `within`, `per`"
        ),
        "{unknown}"
    );
}

/// A gate of `principal` following `live`, its records in `sink`, its budgets in `store`.
fn recorded_gate(
    principal: &str,
    live: &LivePolicy,
    sink: &Arc<JsonlSink>,
    store: &Arc<dyn BudgetStore>,
) -> Gate {
    Gate::builder()
        .mode(Mode::PartialAuto)
        .principal(principal)
        .budget_store_shared(store.clone())
        .policy(live.clone())
        .audit_shared(sink.clone())
        .build()
        .unwrap()
}

/// The flips of `report` as (tool, principal, flip, calls), sorted.
fn flips(report: &ReplayReport) -> Vec<(String, Option<String>, String, u64)> {
    let mut rows: Vec<_> = report
        .flips
        .iter()
        .map(|row| {
            (
                row.tool.clone(),
                row.principal.clone(),
                row.flip.to_string(),
                row.calls,
            )
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn a_replay_decides_rules_over_history_on_the_calls_the_log_holds_before_each() {
    let dir = Scratch::new("history-replay");
    let log = dir.path("audit.jsonl");
    let sink = Arc::new(JsonlSink::open(&log).unwrap());
    let store = memory();
    let none = policy(NONE);
    let live = LivePolicy::new(none.clone());
    let alice = recorded_gate("alice", &live, &sink, &store);
    let alice_again = recorded_gate("alice", &live, &sink, &store);
    let bob = recorded_gate("bob", &live, &sink, &store);
    // Under no rule: a drop before any backup, one after a failed backup, one after a backup;
    // bob's drop with alice's backup only; two deletes in one session, one in another.
    call(&alice, "hist.drop_table", json!({"table": "a"})).unwrap();
    assert_eq!(
        code(call(&alice, "hist.backup", json!({"fail": true}))),
        "error"
    );
    call(&alice, "hist.drop_table", json!({"table": "b"})).unwrap();
    call(&alice, "hist.backup", json!({"fail": false})).unwrap();
    call(&alice_again, "hist.drop_table", json!({"table": "c"})).unwrap();
    call(&bob, "hist.drop_table", json!({"table": "d"})).unwrap();
    call(&alice, "hist.delete_user", json!({"id": 1})).unwrap();
    call(&alice, "hist.delete_user", json!({"id": 2})).unwrap();
    call(&alice_again, "hist.delete_user", json!({"id": 3})).unwrap();
    drop((alice, alice_again, bob));

    let rules = policy(&format!(
        "{BACKUP_FIRST}{}",
        ONE_DELETE_PER_SESSION.trim_start_matches("format = 1\n")
    ));
    let report = replay(&rules, std::slice::from_ref(&none), &log);
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.decided, 9, "{report}");
    assert_eq!(
        flips(&report),
        [
            (
                "hist.delete_user".into(),
                Some("alice".into()),
                "allowed -> refused".into(),
                1
            ),
            (
                "hist.drop_table".into(),
                Some("alice".into()),
                "allowed -> refused".into(),
                2
            ),
            (
                "hist.drop_table".into(),
                Some("bob".into()),
                "allowed -> refused".into(),
                1
            ),
        ],
        "{report}"
    );

    // The other way: a log recorded under the rules, replayed without them, flips back what they
    // refused, and nothing else.
    let dir = Scratch::new("history-replay-back");
    let strict_log = dir.path("audit.jsonl");
    let sink = Arc::new(JsonlSink::open(&strict_log).unwrap());
    let live = LivePolicy::new(rules.clone());
    let store = memory();
    let alice = recorded_gate("alice", &live, &sink, &store);
    assert_eq!(
        code(call(&alice, "hist.drop_table", json!({"table": "a"}))),
        "HISTORY_REFUSED"
    );
    call(&alice, "hist.backup", json!({"fail": false})).unwrap();
    call(&alice, "hist.drop_table", json!({"table": "b"})).unwrap();
    call(&alice, "hist.delete_user", json!({"id": 1})).unwrap();
    assert_eq!(
        code(call(&alice, "hist.delete_user", json!({"id": 2}))),
        "HISTORY_REFUSED"
    );
    drop(alice);
    let report = replay(&none, std::slice::from_ref(&rules), &strict_log);
    assert_eq!(
        flips(&report),
        [
            (
                "hist.delete_user".into(),
                Some("alice".into()),
                "refused -> allowed".into(),
                1
            ),
            (
                "hist.drop_table".into(),
                Some("alice".into()),
                "refused -> allowed".into(),
                1
            ),
        ],
        "{report}"
    );
    // The same rules replayed over their own log flip nothing: the replay sees what the gate saw.
    let same = replay(&rules, std::slice::from_ref(&rules), &strict_log);
    assert!(same.flips.is_empty(), "{same}");
    assert_eq!(same.decided, 5, "{same}");
}

#[test]
fn a_call_before_the_replayed_range_is_history_as_it_ran() {
    let dir = Scratch::new("history-replay-since");
    let log = dir.path("audit.jsonl");
    let sink = Arc::new(JsonlSink::open(&log).unwrap());
    let none = policy(NONE);
    let live = LivePolicy::new(none.clone());
    let alice = recorded_gate("alice", &live, &sink, &memory());
    call(&alice, "hist.backup", json!({"fail": false})).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let since = toolgate::audit::AuditRecord::new(
        toolgate::audit::Stage::Enter,
        "x".to_owned(),
        Mode::Shadow,
        0,
    )
    .timestamp;
    std::thread::sleep(Duration::from_millis(20));
    call(&alice, "hist.drop_table", json!({"table": "a"})).unwrap();
    drop(alice);
    let filter = ReplayFilter {
        since: Some(since),
        ..ReplayFilter::default()
    };
    let report = replay_with(&policy(BACKUP_FIRST), &[none], &filter, &log);
    assert_eq!(report.calls, 1, "{report}");
    assert_eq!(report.decided, 1, "{report}");
    assert!(
        report.flips.is_empty(),
        "the backup before the range counts: {report}"
    );
}

#[test]
fn a_rule_made_stricter_or_moved_keeps_the_history_it_reads() {
    let store = memory();
    let live = LivePolicy::new(policy(ONE_DELETE_PER_SESSION));
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .principal("alice")
        .budget_store_shared(store.clone())
        .policy(live.clone())
        .build()
        .unwrap();
    assert_eq!(
        code(call(&gate, "hist.delete_user", json!({"id": 1}))),
        "ran"
    );
    // A longer window only narrows: the delete before it is still in the history it reads.
    assert!(live.replace(
        policy(&ONE_DELETE_PER_SESSION.replace("\"1h\"", "\"2h\"")),
        "operator-olga"
    ));
    assert_eq!(
        code(call(&gate, "hist.delete_user", json!({"id": 2}))),
        "HISTORY_REFUSED"
    );
    // So does the same rule written in the principal's table, or over a glob of the same tool.
    let moved = ONE_DELETE_PER_SESSION
        .replace("[[defaults.history]]", "[[principals.alice.history]]")
        .replace("tool = \"hist.delete_user\"", "tool = \"hist.delete_*\"");
    assert!(live.replace(policy(&moved), "operator-olga"));
    assert_eq!(
        code(call(&gate, "hist.delete_user", json!({"id": 3}))),
        "HISTORY_REFUSED"
    );
}

#[test]
fn two_rules_over_the_same_calls_each_read_the_whole_history_over_their_own_window() {
    let store = memory();
    // Deletes at most one a second, and no email within an hour after one.
    let text = "format = 1\n\
        [[defaults.history]]\n\
        tool = \"hist.delete_user\"\n\
        not_after = \"hist.delete_user\"\n\
        within = \"1s\"\n\
        [[defaults.history]]\n\
        tool = \"hist.send_email\"\n\
        not_after = \"hist.delete_user\"\n\
        within = \"1h\"\n";
    let gate = gate("alice", text, &store);
    assert_eq!(
        code(call(&gate, "hist.delete_user", json!({"id": 1}))),
        "ran"
    );
    std::thread::sleep(Duration::from_millis(1100));
    // The second delete reads the history over its second and finds nothing; the first delete is
    // still in the history the email's rule reads over its hour.
    assert_eq!(
        code(call(&gate, "hist.delete_user", json!({"id": 2}))),
        "ran"
    );
    let refused = refusal(call(&gate, "hist.send_email", json!({"to": "a@b"})));
    assert_eq!(refused.code(), DenialCode::HistoryRefused);
    assert!(
        refused
            .detail()
            .unwrap_or_default()
            .contains("not within 3600 s"),
        "{refused}"
    );
}

#[test]
fn explain_names_the_rules_over_history_that_decide_a_call_too() {
    let file = policy(BACKUP_FIRST);
    let explained = file
        .explain(
            Some("alice"),
            None,
            Mode::PartialAuto,
            "hist.drop_table",
            &json!({"table": "t"}),
        )
        .unwrap();
    assert_eq!(
        explained.history,
        [
            "only within 3600 s after a call of `hist.backup` ended without an error for the principal (ops.toml:2:1)"
        ],
        "{explained}"
    );
    assert!(
        explained
            .to_string()
            .contains("history:  only within 3600 s"),
        "{explained}"
    );
    // A call the file refuses anyway, or one no rule over history decides, names none.
    let refused = policy(&format!(
        "{BACKUP_FIRST}[defaults]\ndeny = [\"hist.drop_table\"]\n"
    ))
    .explain(
        None,
        None,
        Mode::PartialAuto,
        "hist.drop_table",
        &json!({"table": "t"}),
    )
    .unwrap();
    assert!(refused.history.is_empty(), "{refused}");
    let other = file
        .explain(
            None,
            None,
            Mode::PartialAuto,
            "hist.backup",
            &json!({"fail": false}),
        )
        .unwrap();
    assert!(other.history.is_empty(), "{other}");
}
