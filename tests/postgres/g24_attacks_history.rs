//! Attacks on the operator's rules over history kept in PostgreSQL (docs/policy_file.md, "Rules over
//! history"): a server stopped between a backup and a drop, a process that dies in its backup's body
//! or right after it, a shared two-step approval used after the history changed, and an operator's
//! budget reset while a call waits for its approver.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::postgres::PostgresStore;
use toolgate::postgres::budgets::{self, BudgetFilter};
use toolgate::{Approval, ApprovalRequest, DenialCode, Denied, Gate, Mode, tool};

use crate::support::{child, parent_database, parent_store_on_own_cluster};

const ROLE: &str = "TOOLGATE_G24H_CHILD";
const URL_ENV: &str = "TOOLGATE_G24H_URL";

/// Back up the database; in a child whose role says so, dies in its body.
#[tool(risk = "LOW_WRITE", domain = "g24pg", callable)]
fn backup() -> Result<(), Denied> {
    if std::env::var(ROLE).as_deref() == Ok("die-in-backup") {
        println!("\nSAID IN BODY");
        std::process::abort();
    }
    Ok(())
}

/// Drop a table.
#[tool(risk = "LOW_WRITE", domain = "g24pg", callable)]
fn drop_table(table: String) -> Result<String, Denied> {
    Ok(table)
}

/// Read a secret.
#[tool(risk = "READ_ONLY", domain = "g24pg", callable)]
fn read_secret(name: String) -> Result<String, Denied> {
    Ok(name)
}

/// Send an e-mail.
#[tool(risk = "LOW_WRITE", domain = "g24pg", callable)]
fn send_email(to: String) -> Result<String, Denied> {
    Ok(to)
}

const BACKUP_FIRST: &str = "[[defaults.history]]\n\
tool = \"g24pg.drop_table\"\n\
after = \"g24pg.backup\"\n\
within = \"1h\"\n";

const NO_MAIL_AFTER_SECRET: &str = "[[defaults.history]]\n\
tool = \"g24pg.send_email\"\n\
not_after = \"g24pg.read_secret\"\n\
within = \"1h\"\n";

fn policy(text: &str) -> LivePolicy {
    LivePolicy::new(
        PolicyFile::parse("ops.toml", &format!("format = 1\n{text}"))
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

fn store(url: &str) -> Arc<PostgresStore> {
    Arc::new(
        PostgresStore::builder()
            .timeout(Duration::from_secs(15))
            .connect(url)
            .expect("the store"),
    )
}

fn builder(principal: &str, store: Arc<PostgresStore>, text: &str) -> toolgate::GateBuilder {
    Gate::builder()
        .mode(Mode::PartialAuto)
        .principal(principal)
        .budget_store_shared(store)
        .policy(policy(text))
}

fn code<T>(result: Result<T, Denied>) -> &'static str {
    match result {
        Ok(_) => "ran",
        Err(denied) => denied.code().as_str(),
    }
}

/// In a child's role: a gate of `g24-proc` backs up, and (role `backup-then-wait`) says so and waits
/// to be killed; (role `die-in-backup`) its backup's body aborts the process.
#[test]
fn g24_history_child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let url = std::env::var(URL_ENV).expect("the database's URL");
    let gate = builder("g24-proc", store(&url), BACKUP_FIRST)
        .build()
        .unwrap();
    gate.run(backup).unwrap();
    assert_eq!(role, "backup-then-wait");
    println!("\nSAID BACKED UP");
    std::thread::sleep(Duration::from_secs(600));
}

/// Runs the child in `role` until it says something, then kills it; returns what it said.
fn child_said_then_killed(url: &str, role: &str) -> String {
    let mut process = child(module_path!(), "g24_history_child")
        .env(ROLE, role)
        .env(URL_ENV, url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("a child process");
    let stdout = process.stdout.take().unwrap();
    let said = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("SAID ").map(str::to_owned))
        .unwrap_or_default();
    let _ = process.kill();
    let _ = process.wait();
    said
}

#[test]
fn a_backup_whose_process_died_in_its_body_is_no_backup_and_one_that_ended_before_it_was_killed_is()
{
    let Some((_serial, url)) = parent_database(ROLE, "g24h_killed") else {
        return;
    };
    let gate = builder("g24-proc", store(&url), BACKUP_FIRST)
        .build()
        .unwrap();
    assert_eq!(child_said_then_killed(&url, "die-in-backup"), "IN BODY");
    assert_eq!(
        code(gate.run(|| drop_table("users".into()))),
        "HISTORY_REFUSED",
        "a backup whose process died in its body did not end without an error"
    );
    assert_eq!(
        child_said_then_killed(&url, "backup-then-wait"),
        "BACKED UP"
    );
    assert_eq!(code(gate.run(|| drop_table("users".into()))), "ran");
}

#[test]
fn a_drop_is_refused_while_the_server_is_stopped_and_the_backup_outlives_a_restart() {
    let Some((_serial, cluster, _url, store)) = parent_store_on_own_cluster(ROLE, "g24h_stopped")
    else {
        return;
    };
    let gate = builder("g24-stop", store, BACKUP_FIRST).build().unwrap();
    gate.run(backup).unwrap();
    cluster.stop();
    assert_eq!(
        code(gate.run(|| drop_table("users".into()))),
        "BUDGET_STORE_UNAVAILABLE"
    );
    // A call no rule decides needs no store.
    assert_eq!(code(gate.run(|| read_secret("k".into()))), "ran");
    cluster.start();
    let mut result = "";
    for _ in 0..20 {
        result = code(gate.run(|| drop_table("users".into())));
        if result != "BUDGET_STORE_UNAVAILABLE" {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        result, "ran",
        "the backup was committed before the server stopped"
    );
}

#[test]
fn a_shared_two_step_approval_used_after_the_history_changed_runs_nothing() {
    let Some((_serial, url)) = parent_database(ROLE, "g24h_two_step") else {
        return;
    };
    let text = format!(
        "{NO_MAIL_AFTER_SECRET}{}[defaults]\nask = [\"g24pg.send_email\", \"g24pg.drop_table\"]\n",
        BACKUP_FIRST.replace("\"1h\"", "\"1s\"")
    );
    let shared = store(&url);
    let mailer = builder("g24-2s", shared.clone(), &text)
        .approval_store_shared(shared.clone())
        .build()
        .unwrap();
    let reader = builder("g24-2s", store(&url), &text).build().unwrap();

    let pending = mailer
        .run(|| send_email("eve@example.com".into()))
        .unwrap_err();
    assert_eq!(pending.code(), DenialCode::ApprovalPending, "{pending}");
    mailer.approve(pending.approval_token().unwrap()).unwrap();
    reader.run(|| read_secret("key".into())).unwrap();
    assert_eq!(
        code(mailer.run(|| send_email("eve@example.com".into()))),
        "HISTORY_REFUSED"
    );

    mailer.run(backup).unwrap();
    let pending = mailer.run(|| drop_table("users".into())).unwrap_err();
    assert_eq!(pending.code(), DenialCode::ApprovalPending, "{pending}");
    mailer.approve(pending.approval_token().unwrap()).unwrap();
    std::thread::sleep(Duration::from_millis(1300));
    assert_eq!(
        code(mailer.run(|| drop_table("users".into()))),
        "HISTORY_REFUSED"
    );
}

#[test]
fn a_reset_of_another_principal_or_of_a_budget_keeps_the_history_and_one_of_the_history_refuses_a_waiting_drop()
 {
    let Some((_serial, url)) = parent_database(ROLE, "g24h_reset") else {
        return;
    };
    let text = format!(
        "{BACKUP_FIRST}[[principals.g24-alice.budgets]]\ntool = \"g24pg.backup\"\ncalls = 10\nper = \"1h\"\n\
         [defaults]\nask = [\"g24pg.drop_table\"]\n"
    );
    let reset_url = url.clone();
    let armed = Arc::new(AtomicBool::new(false));
    let reset_when_asked = armed.clone();
    let alice = builder("g24-alice", store(&url), &text)
        .approver(move |_: &ApprovalRequest<'_>| {
            if !reset_when_asked.swap(false, Ordering::SeqCst) {
                return Approval::Approve;
            }
            let everything = budgets::list(&reset_url, "toolgate", &BudgetFilter::all()).unwrap();
            let history = everything
                .iter()
                .find(|b| b.key.contains("history") && b.key.contains("principal g24-alice"))
                .unwrap_or_else(|| panic!("alice's history is listed: {everything:?}"));
            assert_eq!(history.calls, 1, "{history:?}");
            let filter = BudgetFilter::default().key(history.key.clone());
            budgets::reset(&reset_url, "toolgate", &filter, "ana", "the backup was bad").unwrap();
            Approval::Approve
        })
        .build()
        .unwrap();
    let bob = builder(
        "g24-bob",
        store(&url),
        &text.replace("g24-alice", "g24-bob"),
    )
    .build()
    .unwrap();
    alice.run(backup).unwrap();
    bob.run(backup).unwrap();

    // Bob's reset, and a reset of alice's budget on backups, leave alice's backup in her history.
    budgets::reset(
        &url,
        "toolgate",
        &BudgetFilter::default().principal("g24-bob"),
        "ana",
        "why",
    )
    .unwrap();
    assert_eq!(code(alice.run(|| drop_table("a".into()))), "ran");
    let listed = budgets::list(
        &url,
        "toolgate",
        &BudgetFilter::default().principal("g24-alice"),
    )
    .unwrap();
    let budget_key = listed
        .iter()
        .find(|b| !b.key.contains("history"))
        .map(|b| b.key.clone())
        .unwrap_or_else(|| panic!("alice's budget: {listed:?}"));
    budgets::reset(
        &url,
        "toolgate",
        &BudgetFilter::default().key(budget_key),
        "ana",
        "why",
    )
    .unwrap();
    assert_eq!(code(alice.run(|| drop_table("b".into()))), "ran");

    // Alice's history cleared while her drop waits for its approver: the backup is gone.
    armed.store(true, Ordering::SeqCst);
    assert_eq!(
        code(alice.run(|| drop_table("c".into()))),
        "HISTORY_REFUSED",
        "the backup it must follow was cleared while its approver thought"
    );
    assert!(!armed.load(Ordering::SeqCst), "the approver was asked");
}

#[test]
fn a_principal_named_as_the_history_of_gates_without_one_reads_is_not_that_history() {
    let Some((_serial, url)) = parent_database(ROLE, "g24h_nobody") else {
        return;
    };
    // "gates without a principal share one history": no principal's name may reach it.
    let nobody = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget_store_shared(store(&url))
        .policy(policy(BACKUP_FIRST))
        .build()
        .unwrap();
    nobody.run(backup).unwrap();
    assert_eq!(code(nobody.run(|| drop_table("t".into()))), "ran");
    let listed = budgets::list(&url, "toolgate", &BudgetFilter::all()).unwrap();
    let history = listed
        .iter()
        .find(|b| b.key.contains("history"))
        .unwrap_or_else(|| panic!("the history is listed: {listed:?}"));
    let scope = &history.parts.as_ref().expect("its parts").scope;
    let tail = scope
        .split_once(" per ")
        .map(|(_, tail)| tail)
        .unwrap_or_else(|| panic!("{scope}"));
    let mut names = vec![tail.to_owned(), String::new()];
    if let Some(name) = tail.strip_prefix("principal ") {
        names.push(name.to_owned());
    }
    for name in names {
        let Ok(gate) = builder(&name, store(&url), BACKUP_FIRST).build() else {
            continue;
        };
        assert_ne!(
            code(gate.run(|| drop_table("t".into()))),
            "ran",
            "principal {name:?} followed the backup of the gates without a principal ({scope})"
        );
    }
}
