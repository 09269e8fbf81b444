//! The operator's rules over history, shared through PostgreSQL: a call in one process is the history
//! of a call in another; one call per principal holds across racing processes; the window is the
//! database's; a rule forbidding a call says when it may be retried.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::postgres::PostgresStore;
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

use crate::common::postgres::database;
use crate::support::{child, parent_database};

const ROLE: &str = "TOOLGATE_PG_HISTORY_CHILD";
const URL_ENV: &str = "TOOLGATE_PG_HISTORY_URL";

/// back up the database.
#[tool(risk = "LOW_WRITE", domain = "pghist", callable)]
pub(crate) fn backup() -> Result<(), Denied> {
    Ok(())
}

/// drop a table.
#[tool(risk = "LOW_WRITE", domain = "pghist", callable)]
pub(crate) fn drop_table(table: String) -> Result<String, Denied> {
    Ok(table)
}

/// delete a user.
#[tool(risk = "LOW_WRITE", domain = "pghist", callable)]
fn delete_user(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

pub(crate) const RULES: &str = "format = 1\n\
[[defaults.history]]\n\
tool = \"pghist.drop_table\"\n\
after = \"pghist.backup\"\n\
within = \"1h\"\n\
[[defaults.history]]\n\
tool = \"pghist.delete_user\"\n\
not_after = \"pghist.delete_user\"\n\
within = \"1h\"\n";

/// A gate of `principal` following `rules`, its budgets and history in the database of `url`.
fn gate(url: &str, principal: &str, rules: &str) -> Gate {
    let store = PostgresStore::builder()
        .timeout(Duration::from_secs(15))
        .connect(url)
        .expect("the store");
    let policy = PolicyFile::parse("ops.toml", rules).unwrap_or_else(|e| panic!("{e}"));
    Gate::builder()
        .mode(Mode::PartialAuto)
        .principal(principal)
        .budget_store_shared(Arc::new(store))
        .policy(LivePolicy::new(policy))
        .build()
        .expect("a gate")
}

/// In a child's role: alice's gate in a process of its own, making the call the parent names
/// (`backup`, or `delete ID`) and printing `SAID RAN` or `SAID REFUSED CODE` on a line of its own.
#[test]
fn history_child() {
    let Ok(what) = std::env::var(ROLE) else {
        return;
    };
    let url = std::env::var(URL_ENV).expect("the database's URL");
    let gate = gate(&url, "alice", RULES);
    let result = match what.split_once(' ') {
        None if what == "backup" => gate.run(backup),
        Some(("delete", id)) => {
            let id: u64 = id.parse().expect("an id");
            gate.run(|| delete_user(id)).map(drop)
        }
        _ => panic!("no call {what:?}"),
    };
    match result {
        Ok(()) => println!("\nSAID RAN"),
        Err(denied) => println!("\nSAID REFUSED {}", denied.code()),
    }
}

/// Runs `what` in a child process of alice over `url`, and returns what it said.
fn in_child(url: &str, what: &str) -> std::process::Child {
    child(module_path!(), "history_child")
        .env(ROLE, what)
        .env(URL_ENV, url)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("a child process")
}

fn said(child: std::process::Child) -> String {
    let output = child.wait_with_output().expect("the child's output");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|line| line.strip_prefix("SAID "))
        .unwrap_or_else(|| panic!("the child said nothing: {stdout}"))
        .to_owned()
}

#[test]
fn a_backup_in_one_process_lets_the_principals_drop_run_in_another() {
    let Some((_serial, url)) = parent_database(ROLE, "history_after") else {
        return;
    };
    let alice = gate(&url, "alice", RULES);
    let bob = gate(&url, "bob", RULES);
    let refused = alice.run(|| drop_table("users".into())).unwrap_err();
    assert_eq!(refused.code(), DenialCode::HistoryRefused, "{refused}");
    assert_eq!(said(in_child(&url, "backup")), "RAN");
    assert_eq!(alice.run(|| drop_table("users".into())).unwrap(), "users");
    let refused = bob.run(|| drop_table("users".into())).unwrap_err();
    assert_eq!(refused.code(), DenialCode::HistoryRefused, "{refused}");
}

#[test]
fn processes_racing_a_call_allowed_once_per_principal_run_it_once() {
    let Some((_serial, url)) = parent_database(ROLE, "history_once") else {
        return;
    };
    let children: Vec<_> = (0..4)
        .map(|id| in_child(&url, &format!("delete {id}")))
        .collect();
    let mut said: Vec<String> = children.into_iter().map(said).collect();
    said.sort();
    assert_eq!(
        said,
        [
            "RAN",
            "REFUSED HISTORY_REFUSED",
            "REFUSED HISTORY_REFUSED",
            "REFUSED HISTORY_REFUSED"
        ]
    );
    // And in this process too: alice has deleted within the hour.
    let alice = gate(&url, "alice", RULES);
    let refused = alice.run(|| delete_user(9)).unwrap_err();
    assert_eq!(refused.code(), DenialCode::HistoryRefused);
    let retry = refused
        .retry_after()
        .expect("when the delete leaves the window");
    assert!(
        retry > Duration::from_secs(3000) && retry <= Duration::from_secs(3600),
        "{retry:?}"
    );
}

#[test]
fn a_forbidding_rule_lifts_and_a_requiring_one_lapses_by_the_database_clock() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let url = database("history_window");
    let rules = "format = 1\n\
        [[defaults.history]]\n\
        tool = \"pghist.drop_table\"\n\
        after = \"pghist.backup\"\n\
        within = \"2s\"\n\
        [[defaults.history]]\n\
        tool = \"pghist.delete_user\"\n\
        not_after = \"pghist.backup\"\n\
        within = \"2s\"\n";
    let gate = gate(&url, "carol", rules);
    gate.run(|| delete_user(1)).unwrap();
    gate.run(backup).unwrap();
    let refused = gate.run(|| delete_user(2)).unwrap_err();
    assert_eq!(refused.code(), DenialCode::HistoryRefused);
    let retry = refused
        .retry_after()
        .expect("when the backup leaves the window");
    assert!(retry <= Duration::from_secs(2), "{retry:?}");
    std::thread::sleep(Duration::from_millis(2100));
    gate.run(|| delete_user(3)).unwrap();
    let refused = gate.run(|| drop_table("t".into())).unwrap_err();
    assert_eq!(refused.code(), DenialCode::HistoryRefused);
    assert_eq!(refused.retry_after(), None);
}
