//! Attacks on the operator's rules over history (docs/policy_file.md, "Rules over history") where they
//! meet the other stateful features: a body that fails, panics or is cancelled; approvers that think
//! while a window lapses or a forbidden call runs; session grants and two-step approvals; budgets on
//! the same tools; a policy replaced while a call waits; sessions, principals and racing threads.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::approval::{ApprovalFuture, AsyncApprover, SessionGrant};
use toolgate::gate::budget::{BudgetStore, MemoryBudgets};
use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::{
    Approval, ApprovalRequest, CallError, DenialCode, Denied, Gate, Mode, registry, tool,
};

#[derive(Debug)]
enum StepError {
    Refused(Denied),
    Failed,
}

impl From<Denied> for StepError {
    fn from(denied: Denied) -> Self {
        StepError::Refused(denied)
    }
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Refused(denied) => write!(f, "{denied}"),
            StepError::Failed => f.write_str("the step failed"),
        }
    }
}

impl std::error::Error for StepError {}

/// Back up a database; fails where asked to.
#[tool(risk = "LOW_WRITE", domain = "g24h", callable)]
fn backup(fail: bool) -> Result<(), StepError> {
    if fail {
        return Err(StepError::Failed);
    }
    Ok(())
}

/// Back up a database; panics in its body.
#[tool(risk = "LOW_WRITE", domain = "g24h", callable)]
fn backup_panics(fail: bool) -> Result<(), StepError> {
    if fail {
        panic!("the backup panicked");
    }
    Ok(())
}

static ASYNC_BACKUPS_STARTED: AtomicUsize = AtomicUsize::new(0);

/// Back up a database, asynchronously: waits `ms` before it ends, then fails where asked to.
#[tool(risk = "LOW_WRITE", domain = "g24h", callable)]
async fn backup_async(ms: u64, fail: bool) -> Result<(), StepError> {
    ASYNC_BACKUPS_STARTED.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    if fail {
        return Err(StepError::Failed);
    }
    Ok(())
}

static SLOW_BACKUP_STARTED: AtomicBool = AtomicBool::new(false);

/// Back up a database slowly: `ms` in its body.
#[tool(risk = "LOW_WRITE", domain = "g24h", callable)]
fn slow_backup(ms: u64) -> Result<(), StepError> {
    SLOW_BACKUP_STARTED.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(ms));
    Ok(())
}

static DROPS: AtomicUsize = AtomicUsize::new(0);

/// Drop a table.
#[tool(risk = "LOW_WRITE", domain = "g24h", callable)]
fn drop_table(table: String) -> Result<String, Denied> {
    DROPS.fetch_add(1, Ordering::SeqCst);
    Ok(table)
}

/// Drop a table, asynchronously.
#[tool(risk = "LOW_WRITE", domain = "g24h", callable)]
async fn drop_table_async(table: String) -> Result<String, Denied> {
    Ok(table)
}

/// Delete a user.
#[tool(risk = "LOW_WRITE", domain = "g24h", callable)]
fn delete_user(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

/// Read a secret.
#[tool(risk = "READ_ONLY", domain = "g24h", callable)]
fn read_secret(name: String) -> Result<String, Denied> {
    Ok(name)
}

/// Send an e-mail.
#[tool(risk = "LOW_WRITE", domain = "g24h", callable)]
fn send_email(to: String) -> Result<String, Denied> {
    Ok(to)
}

/// Wire money.
#[tool(risk = "LOW_WRITE", domain = "g24h", callable)]
fn wire(cents: u64) -> Result<u64, Denied> {
    Ok(cents)
}

fn after_rule(tool: &str, after: &str, within: &str, per: &str) -> String {
    format!(
        "[[defaults.history]]\ntool = \"g24h.{tool}\"\nafter = \"g24h.{after}\"\nwithin = \"{within}\"\nper = \"{per}\"\n"
    )
}

fn not_after_rule(tool: &str, not_after: &str, within: &str, per: &str) -> String {
    format!(
        "[[defaults.history]]\ntool = \"g24h.{tool}\"\nnot_after = \"g24h.{not_after}\"\nwithin = \"{within}\"\nper = \"{per}\"\n"
    )
}

fn policy(text: &str) -> PolicyFile {
    PolicyFile::parse("ops.toml", &format!("format = 1\n{text}")).unwrap_or_else(|e| panic!("{e}"))
}

fn memory() -> Arc<dyn BudgetStore> {
    Arc::new(MemoryBudgets::new())
}

fn builder(
    principal: &str,
    store: &Arc<dyn BudgetStore>,
    live: &LivePolicy,
) -> toolgate::GateBuilder {
    Gate::builder()
        .mode(Mode::PartialAuto)
        .principal(principal)
        .budget_store_shared(store.clone())
        .policy(live.clone())
}

fn gate(principal: &str, text: &str, store: &Arc<dyn BudgetStore>) -> Gate {
    builder(principal, store, &LivePolicy::new(policy(text)))
        .build()
        .unwrap()
}

fn call(gate: &Gate, id: &str, arguments: Value) -> Result<Value, CallError> {
    registry()
        .call(gate, &format!("g24h.{id}"), arguments)
        .now()
        .expect("a sync tool answers at once")
}

/// `ran`, `error` (the body's), or the refusal's code.
fn code(result: Result<Value, CallError>) -> &'static str {
    match result {
        Ok(_) => "ran",
        Err(CallError::Denied(denied)) => denied.code().as_str(),
        Err(_) => "error",
    }
}

fn denied_code<T>(result: Result<T, Denied>) -> &'static str {
    match result {
        Ok(_) => "ran",
        Err(denied) => denied.code().as_str(),
    }
}

fn step_code<T>(result: Result<T, StepError>) -> &'static str {
    match result {
        Ok(_) => "ran",
        Err(StepError::Refused(denied)) => denied.code().as_str(),
        Err(StepError::Failed) => "error",
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------------
// history × failures: a call that did not end without an error is no call to follow.

#[test]
fn a_backup_whose_body_panicked_is_no_backup_for_an_after_rule() {
    let store = memory();
    let gate = gate(
        "g24-panic",
        &after_rule("drop_table", "backup_panics", "1h", "principal"),
        &store,
    );
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        gate.run(|| backup_panics(true))
    }));
    assert!(panicked.is_err(), "the body panicked");
    assert_eq!(
        code(call(&gate, "drop_table", json!({"table": "users"}))),
        "HISTORY_REFUSED"
    );
    // By name too: the panic is caught or propagated, never a backup.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        call(&gate, "backup_panics", json!({"fail": true}))
    }));
    assert_eq!(
        code(call(&gate, "drop_table", json!({"table": "users"}))),
        "HISTORY_REFUSED"
    );
    gate.run(|| backup_panics(false)).unwrap();
    assert_eq!(
        code(call(&gate, "drop_table", json!({"table": "users"}))),
        "ran"
    );
}

#[test]
fn an_async_backup_that_failed_or_was_cancelled_in_its_body_is_no_backup() {
    let store = memory();
    let gate = gate(
        "g24-cancel",
        &after_rule("drop_table", "backup_async", "1h", "principal"),
        &store,
    );
    rt().block_on(async {
        // Failed.
        let failed = gate.scope(backup_async(0, true)).await;
        assert_eq!(step_code(failed), "error");
        // Cancelled: its body started, and its future was dropped before it ended.
        let before = ASYNC_BACKUPS_STARTED.load(Ordering::SeqCst);
        let cancelled = tokio::time::timeout(
            Duration::from_millis(300),
            gate.scope(backup_async(60_000, false)),
        )
        .await;
        assert!(cancelled.is_err(), "the backup was cancelled");
        assert!(
            ASYNC_BACKUPS_STARTED.load(Ordering::SeqCst) > before,
            "its body had started"
        );
        // Cancelled by name: the call's future dropped mid-body.
        let by_name = tokio::time::timeout(
            Duration::from_millis(300),
            registry().call(
                &gate,
                "g24h.backup_async",
                json!({"ms": 60_000, "fail": false}),
            ),
        )
        .await;
        assert!(by_name.is_err(), "the backup by name was cancelled");
    });
    assert_eq!(
        code(call(&gate, "drop_table", json!({"table": "users"}))),
        "HISTORY_REFUSED"
    );
    rt().block_on(gate.scope(backup_async(0, false))).unwrap();
    assert_eq!(
        code(call(&gate, "drop_table", json!({"table": "users"}))),
        "ran"
    );
}

#[test]
fn a_backup_still_running_is_not_one_that_ended() {
    let store = memory();
    let gate = gate(
        "g24-running",
        &after_rule("drop_table", "slow_backup", "1h", "principal"),
        &store,
    );
    let backing_up = {
        let gate = gate.clone();
        std::thread::spawn(move || gate.run(|| slow_backup(1500)))
    };
    while !SLOW_BACKUP_STARTED.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        code(call(&gate, "drop_table", json!({"table": "users"}))),
        "HISTORY_REFUSED",
        "the backup has not ended"
    );
    backing_up.join().unwrap().unwrap();
    assert_eq!(
        code(call(&gate, "drop_table", json!({"table": "users"}))),
        "ran"
    );
}

// ---------------------------------------------------------------------------------------------------
// history × approvals.

fn ask(tool: &str) -> String {
    format!("[defaults]\nask = [\"g24h.{tool}\"]\n")
}

#[test]
fn a_drop_approved_after_its_backup_left_the_window_is_refused_at_the_commit_point() {
    let store = memory();
    let text = format!(
        "{}{}",
        after_rule("drop_table", "backup", "1s", "principal"),
        ask("drop_table")
    );
    let live = LivePolicy::new(policy(&text));
    let gate = builder("g24-lapse", &store, &live)
        .approver(|_: &ApprovalRequest<'_>| {
            std::thread::sleep(Duration::from_millis(1400));
            Approval::Approve
        })
        .build()
        .unwrap();
    gate.run(|| backup(false)).unwrap();
    let drops = DROPS.load(Ordering::SeqCst);
    let refused = gate.run(|| drop_table("users".into())).unwrap_err();
    assert_eq!(refused.code(), DenialCode::HistoryRefused, "{refused}");
    let _ = drops;
}

#[test]
fn an_async_drop_approved_after_its_backup_left_the_window_is_refused_at_the_commit_point() {
    struct Slow;
    impl AsyncApprover for Slow {
        fn approve<'a>(&'a self, _request: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(1400)).await;
                Approval::Approve
            })
        }
    }
    let store = memory();
    let text = format!(
        "{}{}",
        after_rule("drop_table_async", "backup", "1s", "session"),
        ask("drop_table_async")
    );
    let gate = builder("g24-lapse-async", &store, &LivePolicy::new(policy(&text)))
        .async_approver(Slow)
        .build()
        .unwrap();
    gate.run(|| backup(false)).unwrap();
    let result = rt().block_on(gate.scope(drop_table_async("users".into())));
    assert_eq!(denied_code(result), "HISTORY_REFUSED");
}

#[test]
fn a_forbidden_call_is_refused_at_its_commit_point_when_the_call_it_may_not_follow_ran_while_it_waited()
 {
    let store = memory();
    let text = format!(
        "{}{}",
        not_after_rule("send_email", "read_secret", "1h", "principal"),
        ask("send_email")
    );
    let live = LivePolicy::new(policy(&text));
    let reader = builder("g24-exfil", &store, &live).build().unwrap();
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = reads.clone();
    let gate = builder("g24-exfil", &store, &live)
        .approver(move |_: &ApprovalRequest<'_>| {
            // While the approver thinks, another gate of the principal reads the secret.
            reader.run(|| read_secret("key".into())).unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            Approval::Approve
        })
        .build()
        .unwrap();
    let result = gate.run(|| send_email("eve@example.com".into()));
    assert_eq!(
        reads.load(Ordering::SeqCst),
        1,
        "the secret was read while it waited"
    );
    assert_eq!(denied_code(result), "HISTORY_REFUSED");
}

#[test]
fn a_forbidden_call_of_the_same_session_is_refused_at_its_commit_point_too() {
    let store = memory();
    let text = format!(
        "{}{}",
        not_after_rule("send_email", "read_secret", "1h", "session"),
        ask("send_email")
    );
    let me: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let inside = me.clone();
    let gate = builder("g24-exfil-session", &store, &LivePolicy::new(policy(&text)))
        .approver(move |_: &ApprovalRequest<'_>| {
            let session = inside.get().expect("the gate").clone();
            std::thread::spawn(move || session.run(|| read_secret("key".into())).unwrap())
                .join()
                .unwrap();
            Approval::Approve
        })
        .build()
        .unwrap();
    assert!(me.set(gate.clone()).is_ok());
    assert_eq!(
        denied_code(gate.run(|| send_email("eve@example.com".into()))),
        "HISTORY_REFUSED"
    );
}

#[test]
fn a_session_grant_does_not_skip_a_rule_over_history() {
    let store = memory();
    let text = format!(
        "{}{}{}[defaults]\nask = [\"g24h.drop_table\", \"g24h.delete_user\"]\n",
        after_rule("drop_table", "backup", "1s", "session"),
        not_after_rule("delete_user", "delete_user", "1h", "session"),
        ""
    );
    let gate = builder("g24-grant", &store, &LivePolicy::new(policy(&text)))
        .approver(|_: &ApprovalRequest<'_>| {
            Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600)))
        })
        .build()
        .unwrap();
    // The grant lets later deletes skip the approver, never the rule of one delete an hour.
    assert_eq!(denied_code(gate.run(|| delete_user(1))), "ran");
    assert!(!gate.grants().is_empty(), "a grant was made");
    assert_eq!(denied_code(gate.run(|| delete_user(2))), "HISTORY_REFUSED");
    assert_eq!(
        denied_code(gate.clone().run(|| delete_user(3))),
        "HISTORY_REFUSED"
    );
    assert_eq!(
        code(call(&gate, "delete_user", json!({"id": 4}))),
        "HISTORY_REFUSED"
    );

    gate.run(|| backup(false)).unwrap();
    assert_eq!(denied_code(gate.run(|| drop_table("a".into()))), "ran");
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        denied_code(gate.run(|| drop_table("b".into()))),
        "HISTORY_REFUSED"
    );
    assert_eq!(
        code(call(&gate, "drop_table", json!({"table": "c"}))),
        "HISTORY_REFUSED"
    );
}

#[test]
fn a_two_step_approval_runs_nothing_a_rule_over_history_refuses_when_it_is_used() {
    let store = memory();
    let text = format!(
        "{}{}[defaults]\nask = [\"g24h.drop_table\", \"g24h.send_email\"]\n",
        after_rule("drop_table", "backup", "1s", "principal"),
        not_after_rule("send_email", "read_secret", "1h", "principal"),
    );
    let gate = builder("g24-two-step", &store, &LivePolicy::new(policy(&text)))
        .two_step_approvals()
        .build()
        .unwrap();
    // Approved while its backup was in the window, used after it left it.
    gate.run(|| backup(false)).unwrap();
    let pending = gate.run(|| drop_table("users".into())).unwrap_err();
    assert_eq!(pending.code(), DenialCode::ApprovalPending, "{pending}");
    gate.approve(pending.approval_token().unwrap()).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        denied_code(gate.run(|| drop_table("users".into()))),
        "HISTORY_REFUSED"
    );

    // Approved before the secret was read, used after.
    let pending = gate
        .run(|| send_email("eve@example.com".into()))
        .unwrap_err();
    assert_eq!(pending.code(), DenialCode::ApprovalPending, "{pending}");
    gate.approve(pending.approval_token().unwrap()).unwrap();
    gate.run(|| read_secret("key".into())).unwrap();
    assert_eq!(
        denied_code(gate.run(|| send_email("eve@example.com".into()))),
        "HISTORY_REFUSED"
    );
}

// ---------------------------------------------------------------------------------------------------
// history × budgets.

fn alice_budget(tool: &str, calls: u32) -> String {
    format!(
        "[[principals.PRINCIPAL.budgets]]\ntool = \"g24h.{tool}\"\ncalls = {calls}\nper = \"1h\"\n"
    )
}

#[test]
fn a_backup_refused_by_a_budget_is_no_backup() {
    let store = memory();
    let text = format!(
        "{}{}",
        after_rule("drop_table", "backup", "1h", "session"),
        alice_budget("backup", 1)
    )
    .replace("PRINCIPAL", "g24-bb");
    let first = gate("g24-bb", &text, &store);
    let second = gate("g24-bb", &text, &store);
    first.run(|| backup(false)).unwrap();
    assert_eq!(step_code(second.run(|| backup(false))), "BUDGET_EXHAUSTED");
    assert_eq!(
        denied_code(second.run(|| drop_table("t".into()))),
        "HISTORY_REFUSED"
    );
    assert_eq!(denied_code(first.run(|| drop_table("t".into()))), "ran");
}

#[test]
fn a_read_refused_by_a_budget_leaves_no_mark_for_a_not_after_rule() {
    let store = memory();
    let text = format!(
        "{}{}",
        not_after_rule("send_email", "read_secret", "1h", "session"),
        alice_budget("read_secret", 1)
    )
    .replace("PRINCIPAL", "g24-rb");
    let first = gate("g24-rb", &text, &store);
    let second = gate("g24-rb", &text, &store);
    first.run(|| read_secret("k".into())).unwrap();
    assert_eq!(
        denied_code(second.run(|| read_secret("k".into()))),
        "BUDGET_EXHAUSTED"
    );
    assert_eq!(denied_code(second.run(|| send_email("a@b".into()))), "ran");
    assert_eq!(
        denied_code(first.run(|| send_email("a@b".into()))),
        "HISTORY_REFUSED"
    );
}

#[test]
fn a_call_refused_by_history_takes_no_unit_of_a_budget_on_the_same_tool_nor_the_reverse() {
    let store = memory();
    let text = format!(
        "{}{}{}{}",
        after_rule("drop_table", "backup", "1h", "principal"),
        alice_budget("drop_table", 1),
        not_after_rule("wire", "wire", "1h", "session"),
        alice_budget("wire", 1),
    )
    .replace("PRINCIPAL", "g24-hb");
    let gate_a = gate("g24-hb", &text, &store);
    for _ in 0..3 {
        assert_eq!(
            denied_code(gate_a.run(|| drop_table("t".into()))),
            "HISTORY_REFUSED"
        );
    }
    gate_a.run(|| backup(false)).unwrap();
    assert_eq!(denied_code(gate_a.run(|| drop_table("t".into()))), "ran");
    assert_eq!(
        denied_code(gate_a.run(|| drop_table("t".into()))),
        "BUDGET_EXHAUSTED"
    );

    // A wire refused by the budget is no wire of its session: once the budget is spent elsewhere,
    // the session's refusals are the budget's, and they leave the session's history empty.
    let gate_b = gate("g24-hb", &text, &store);
    assert_eq!(denied_code(gate_a.run(|| wire(1))), "ran");
    // Over its budget and after a wire of its session alike: refused by the longer wait of the two.
    let second = denied_code(gate_a.run(|| wire(2)));
    assert!(
        ["HISTORY_REFUSED", "BUDGET_EXHAUSTED"].contains(&second),
        "{second}"
    );
    for _ in 0..3 {
        assert_eq!(denied_code(gate_b.run(|| wire(3))), "BUDGET_EXHAUSTED");
    }
}

// ---------------------------------------------------------------------------------------------------
// history × live reload.

#[test]
fn a_rule_added_while_a_call_waits_for_its_approver_refuses_it_at_the_commit_point() {
    let store = memory();
    let live = LivePolicy::new(policy(&ask("drop_table")));
    let replaced = live.clone();
    let stricter = policy(&format!(
        "{}{}",
        after_rule("drop_table", "backup", "1h", "principal"),
        ask("drop_table")
    ));
    let stricter = std::sync::Mutex::new(Some(stricter));
    let gate = builder("g24-added", &store, &live)
        .approver(move |_: &ApprovalRequest<'_>| {
            if let Some(file) = stricter.lock().unwrap().take() {
                assert!(replaced.replace(file, "operator-olga"));
            }
            Approval::Approve
        })
        .build()
        .unwrap();
    assert_eq!(
        denied_code(gate.run(|| drop_table("users".into()))),
        "HISTORY_REFUSED"
    );
}

#[test]
fn a_window_changed_while_a_call_waits_refuses_it_at_the_commit_point() {
    let store = memory();
    let text = |within: &str| {
        format!(
            "{}{}",
            after_rule("drop_table", "backup", within, "principal"),
            ask("drop_table")
        )
    };
    let live = LivePolicy::new(policy(&text("1h")));
    let replaced = live.clone();
    let changed = std::sync::Mutex::new(Some(policy(&text("1s"))));
    let gate = builder("g24-window", &store, &live)
        .approver(move |_: &ApprovalRequest<'_>| {
            if let Some(file) = changed.lock().unwrap().take() {
                assert!(replaced.replace(file, "operator-olga"));
            }
            Approval::Approve
        })
        .build()
        .unwrap();
    gate.run(|| backup(false)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // Checked over an hour, the backup is in the window; at the commit point the rule reads the
    // same history over a second, and it is not.
    assert_eq!(
        denied_code(gate.run(|| drop_table("users".into()))),
        "HISTORY_REFUSED"
    );
}

#[test]
fn the_same_rules_reordered_or_with_a_rule_inserted_before_them_keep_their_histories() {
    let store = memory();
    let one_delete = not_after_rule("delete_user", "delete_user", "1h", "principal");
    let backup_first = after_rule("drop_table", "backup", "1h", "principal");
    let other = not_after_rule("send_email", "read_secret", "1h", "principal");
    let live = LivePolicy::new(policy(&format!("{one_delete}{backup_first}")));
    let gate = builder("g24-order", &store, &live).build().unwrap();
    assert_eq!(denied_code(gate.run(|| delete_user(1))), "ran");
    gate.run(|| backup(false)).unwrap();

    assert!(live.replace(
        policy(&format!("{backup_first}{one_delete}")),
        "operator-olga"
    ));
    assert_eq!(denied_code(gate.run(|| delete_user(2))), "HISTORY_REFUSED");
    assert_eq!(denied_code(gate.run(|| drop_table("t".into()))), "ran");

    assert!(live.replace(
        policy(&format!("{other}{backup_first}{one_delete}")),
        "operator-olga"
    ));
    assert_eq!(denied_code(gate.run(|| delete_user(3))), "HISTORY_REFUSED");
    assert_eq!(denied_code(gate.run(|| drop_table("t".into()))), "ran");
}

#[test]
fn the_same_rule_written_otherwise_keeps_its_history() {
    // docs/policy_file.md: "A rule that a new policy keeps keeps its history; a rule changed in any
    // part (its tools, window or `per`) starts with none." Here neither its tools, its window nor its
    // `per` change: `per` left to its default or written out, the window as 1h or 60m.
    let store = memory();
    let implicit = "[[defaults.history]]\ntool = \"g24h.delete_user\"\nnot_after = \"g24h.delete_user\"\nwithin = \"1h\"\n";
    let live = LivePolicy::new(policy(implicit));
    let gate = builder("g24-spelled", &store, &live).build().unwrap();
    assert_eq!(denied_code(gate.run(|| delete_user(1))), "ran");
    let explicit = not_after_rule("delete_user", "delete_user", "1h", "principal");
    assert!(live.replace(policy(&explicit), "operator-olga"));
    assert_eq!(denied_code(gate.run(|| delete_user(2))), "HISTORY_REFUSED");
    let minutes = not_after_rule("delete_user", "delete_user", "60m", "principal");
    assert!(live.replace(policy(&minutes), "operator-olga"));
    assert_eq!(denied_code(gate.run(|| delete_user(3))), "HISTORY_REFUSED");
}

#[test]
fn a_rule_moved_from_the_defaults_to_the_principals_table_keeps_its_history() {
    // The same rule (tools, window, `per`) narrowed from every principal to this one: for this
    // principal it decides the same calls, looking back at the same calls. The documents list a
    // rule's tools, window and `per` as what makes it another rule; its table is not among them.
    let store = memory();
    let one_delete = not_after_rule("delete_user", "delete_user", "1h", "principal");
    let live = LivePolicy::new(policy(&one_delete));
    let gate = builder("g24-moved", &store, &live).build().unwrap();
    assert_eq!(denied_code(gate.run(|| delete_user(1))), "ran");
    let in_table = one_delete.replace("[[defaults.history]]", "[[principals.g24-moved.history]]");
    assert!(live.replace(policy(&in_table), "operator-olga"));
    assert_eq!(
        denied_code(gate.run(|| delete_user(2))),
        "HISTORY_REFUSED",
        "a second delete within the hour, after a change that only narrows"
    );
}

#[test]
fn a_rule_removed_and_added_again_does_not_forget_the_calls_its_gates_made_meanwhile() {
    // While the rule is gone the calls are not decided by it; once it is back (a rule changed starts
    // with none, but this is the same rule), a delete made in its absence must not be a second
    // delete within the hour of the first.
    let store = memory();
    let one_delete = not_after_rule("delete_user", "delete_user", "1h", "principal");
    let live = LivePolicy::new(policy(&one_delete));
    let gate = builder("g24-readd", &store, &live).build().unwrap();
    assert_eq!(denied_code(gate.run(|| delete_user(1))), "ran");
    assert!(live.replace(policy(""), "operator-olga"));
    assert!(live.replace(policy(&one_delete), "operator-olga"));
    assert_eq!(denied_code(gate.run(|| delete_user(2))), "HISTORY_REFUSED");
}

// ---------------------------------------------------------------------------------------------------
// history × sessions, principals, clones, call by name, races.

#[test]
fn per_session_histories_are_apart_and_a_clone_is_the_same_session() {
    let store = memory();
    let text = after_rule("drop_table", "backup", "1h", "session");
    let first = gate("g24-sess", &text, &store);
    let second = gate("g24-sess", &text, &store);
    first.clone().run(|| backup(false)).unwrap();
    assert_eq!(denied_code(first.run(|| drop_table("t".into()))), "ran");
    assert_eq!(
        code(call(&first, "drop_table", json!({"table": "t"}))),
        "ran"
    );
    assert_eq!(
        denied_code(second.run(|| drop_table("t".into()))),
        "HISTORY_REFUSED"
    );
    assert_eq!(
        code(call(&second, "drop_table", json!({"table": "t"}))),
        "HISTORY_REFUSED"
    );
}

#[test]
fn a_direct_call_and_a_call_by_name_are_one_history() {
    let store = memory();
    let gate = gate(
        "g24-byname",
        &not_after_rule("delete_user", "delete_user", "1h", "session"),
        &store,
    );
    assert_eq!(code(call(&gate, "delete_user", json!({"id": 1}))), "ran");
    assert_eq!(denied_code(gate.run(|| delete_user(2))), "HISTORY_REFUSED");
    let other = self::gate(
        "g24-byname2",
        &not_after_rule("delete_user", "delete_user", "1h", "session"),
        &store,
    );
    assert_eq!(denied_code(other.run(|| delete_user(2))), "ran");
    assert_eq!(
        code(call(&other, "delete_user", json!({"id": 1}))),
        "HISTORY_REFUSED"
    );
}

#[test]
fn a_principal_whose_name_reads_as_anothers_never_runs_a_second_call() {
    let store = memory();
    let text = "[[principals.olga.history]]\ntool = \"g24h.delete_user\"\nnot_after = \"g24h.delete_user\"\nwithin = \"1h\"\n";
    let olga = gate("olga", text, &store);
    assert_eq!(denied_code(olga.run(|| delete_user(1))), "ran");
    for alike in ["\u{43e}lga", "ol\u{200b}ga"] {
        let built = Gate::builder()
            .mode(Mode::PartialAuto)
            .principal(alike)
            .budget_store_shared(store.clone())
            .policy(LivePolicy::new(policy(text)))
            .build();
        let Ok(gate) = built else {
            continue; // a principal refused is no way around the rule
        };
        let result = denied_code(gate.run(|| delete_user(2)));
        assert_ne!(
            result, "ran",
            "{alike:?} is narrowed as olga's table: a second delete within the hour"
        );
    }
}

#[test]
fn gates_of_one_principal_racing_a_call_allowed_once_run_it_once() {
    let store = memory();
    let text = not_after_rule("wire", "wire", "1h", "principal");
    let live = LivePolicy::new(policy(&text));
    let gates: Vec<Gate> = (0..8)
        .map(|_| builder("g24-race", &store, &live).build().unwrap())
        .collect();
    let barrier = Arc::new(Barrier::new(gates.len()));
    let ran: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = gates
            .iter()
            .enumerate()
            .map(|(n, gate)| {
                let barrier = barrier.clone();
                scope.spawn(move || {
                    barrier.wait();
                    if n % 2 == 0 {
                        gate.run(|| wire(n as u64)).is_ok()
                    } else {
                        call(gate, "wire", json!({"cents": n})).is_ok()
                    }
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

#[test]
fn racing_forbidden_and_forbidding_calls_never_both_run_in_the_wrong_order() {
    // send_email not_after read_secret: across many rounds of a read racing a send in one session,
    // whenever both ran, the send's check must have come first, so the read's later send is refused.
    for round in 0..50 {
        let store = memory();
        let gate = gate(
            "g24-race2",
            &not_after_rule("send_email", "read_secret", "1h", "session"),
            &store,
        );
        let barrier = Arc::new(Barrier::new(2));
        let (read, sent) = std::thread::scope(|scope| {
            let reader = {
                let (gate, barrier) = (gate.clone(), barrier.clone());
                scope.spawn(move || {
                    barrier.wait();
                    gate.run(|| read_secret("k".into())).is_ok()
                })
            };
            let sender = {
                let (gate, barrier) = (gate.clone(), barrier.clone());
                scope.spawn(move || {
                    barrier.wait();
                    gate.run(|| send_email("a@b".into())).is_ok()
                })
            };
            (reader.join().unwrap(), sender.join().unwrap())
        });
        assert!(read, "round {round}: a read is never refused");
        let _ = sent;
        assert_eq!(
            denied_code(gate.run(|| send_email("a@b".into()))),
            "HISTORY_REFUSED",
            "round {round}"
        );
    }
}

// ---------------------------------------------------------------------------------------------------
// A call that waits counts from its check; one refused or dropped while it waits is given back.

/// Delete a user, asynchronously.
#[tool(risk = "LOW_WRITE", domain = "g24h", callable)]
async fn delete_user_async(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

#[test]
fn a_call_waiting_for_its_approver_already_counts_and_a_rejected_one_is_given_back() {
    let store = memory();
    let text = format!(
        "{}{}",
        not_after_rule("delete_user", "delete_user", "1h", "principal"),
        ask("delete_user")
    );
    let live = LivePolicy::new(policy(&text));
    let other = builder("g24-wait", &store, &live)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .build()
        .unwrap();
    let meanwhile = Arc::new(std::sync::Mutex::new(Vec::new()));
    let said = meanwhile.clone();
    let answer_reject = Arc::new(AtomicBool::new(false));
    let reject = answer_reject.clone();
    let gate = builder("g24-wait", &store, &live)
        .approver(move |_: &ApprovalRequest<'_>| {
            said.lock()
                .unwrap()
                .push(denied_code(other.run(|| delete_user(9))));
            if reject.load(Ordering::SeqCst) {
                Approval::Reject("no".into())
            } else {
                Approval::Approve
            }
        })
        .build()
        .unwrap();
    answer_reject.store(true, Ordering::SeqCst);
    assert_eq!(
        denied_code(gate.run(|| delete_user(1))),
        "APPROVAL_REJECTED"
    );
    // While the first waited, it counted; rejected, it is given back: the next may run.
    answer_reject.store(false, Ordering::SeqCst);
    assert_eq!(denied_code(gate.run(|| delete_user(2))), "ran");
    assert_eq!(
        *meanwhile.lock().unwrap(),
        ["HISTORY_REFUSED", "HISTORY_REFUSED"]
    );
    assert_eq!(denied_code(gate.run(|| delete_user(3))), "HISTORY_REFUSED");
}

#[test]
fn an_async_call_dropped_while_its_approver_thinks_is_given_back() {
    struct Never;
    impl AsyncApprover for Never {
        fn approve<'a>(&'a self, _request: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Approval::Approve
            })
        }
    }
    let store = memory();
    let text = format!(
        "{}{}",
        not_after_rule("delete_user_async", "delete_user_async", "1h", "principal"),
        ask("delete_user_async")
    );
    let live = LivePolicy::new(policy(&text));
    let waiting = builder("g24-dropped", &store, &live)
        .async_approver(Never)
        .build()
        .unwrap();
    let runs = builder("g24-dropped", &store, &live)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .build()
        .unwrap();
    rt().block_on(async {
        let dropped = tokio::time::timeout(
            Duration::from_millis(300),
            waiting.scope(delete_user_async(1)),
        )
        .await;
        assert!(dropped.is_err(), "the call was dropped while it waited");
        assert_eq!(denied_code(runs.scope(delete_user_async(2)).await), "ran");
        assert_eq!(
            denied_code(runs.scope(delete_user_async(3)).await),
            "HISTORY_REFUSED"
        );
    });
}
