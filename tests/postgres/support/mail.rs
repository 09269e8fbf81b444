//! The mail tools (`mail.*`) under PostgreSQL budgets, and the racer: this binary run again
//! (`TOOLGATE_BUDGET_CHILD=racer`) to call under a shared budget on command.

pub(crate) use super::{
    Racer, parent_database, parent_store_on_own_cluster, race_round, rounds, wait,
};

pub(crate) use std::io::{BufRead, Write};
pub(crate) use std::sync::Arc;
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};
pub(crate) use std::time::Duration;

pub(crate) use crate::common::postgres::{database, query};
pub(crate) use toolgate::gate::BudgetScope;
pub(crate) use toolgate::postgres::PostgresStore;
pub(crate) use toolgate::{DenialCode, Denied, Gate, Mode, Risk, tool};

pub(crate) const CHILD_ROLE: &str = "TOOLGATE_BUDGET_CHILD";
pub(crate) const CHILD_URL: &str = "TOOLGATE_BUDGET_URL";

pub(crate) const HOUR: Duration = Duration::from_secs(3600);

pub(crate) static SENDS: AtomicUsize = AtomicUsize::new(0);

/// Send a message.
#[tool(risk = "LOW_WRITE", domain = "mail")]
pub(crate) fn send(round: u64) -> Result<u64, Denied> {
    SENDS.fetch_add(1, Ordering::SeqCst);
    Ok(round)
}

/// Send a message, asynchronously.
#[tool(risk = "LOW_WRITE", domain = "mail")]
pub(crate) async fn send_async(round: u64) -> Result<u64, Denied> {
    SENDS.fetch_add(1, Ordering::SeqCst);
    Ok(round)
}

pub(crate) static WIPES: AtomicUsize = AtomicUsize::new(0);

/// Wipe a mailbox.
#[tool(risk = "HIGH_WRITE", domain = "mail", modes = [FULL_AUTO])]
pub(crate) fn wipe(mailbox: String) -> Result<(), Denied> {
    let _ = mailbox;
    WIPES.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Read the inbox: no budget covers it.
#[tool(risk = "READ_ONLY", domain = "mail")]
pub(crate) fn inbox() -> Result<(), Denied> {
    Ok(())
}

/// Round `round`'s gate in a process: its own budget of two calls of the agent `round-N`, in `store`.
pub(crate) fn round_gate(store: &Arc<PostgresStore>, round: u64) -> Gate {
    Gate::builder()
        .mode(Mode::PartialAuto)
        .agent(format!("round-{round}"))
        .budget(BudgetScope::Agent, 2, HOUR)
        .budget_store_shared(store.clone())
        .build()
        .expect("a gate")
}

/// One long-lived budget all the children share: 50 LOW_WRITE calls an hour.
pub(crate) fn shared_gate(store: &Arc<PostgresStore>) -> Gate {
    Gate::builder()
        .mode(Mode::PartialAuto)
        .agent("mailer")
        .budget(Risk::LowWrite, 50, HOUR)
        .budget_store_shared(store.clone())
        .build()
        .expect("a gate")
}

/// A child, when the parent re-executes this binary with [`CHILD_ROLE`] `racer`: reads commands on
/// stdin (`round N`: one call under round N's budget; `burst N`: N calls under the shared budget) and
/// answers each on stdout.
#[test]
pub(crate) fn racer_child() {
    if std::env::var(CHILD_ROLE).as_deref() != Ok("racer") {
        return;
    }
    let url = std::env::var(CHILD_URL).expect("the database's URL");
    let store = Arc::new(PostgresStore::connect(&url).expect("the store"));
    let shared = shared_gate(&store);
    let mut out = std::io::stdout().lock();
    writeln!(out, "@ready").unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let (command, n) = line.trim().split_once(' ').expect("a command");
        let n: u64 = n.parse().expect("a number");
        let said = match command {
            "round" => match round_gate(&store, n).run(|| send(n)) {
                Ok(_) => "ran".to_owned(),
                Err(denied) => denied.code().as_str().to_owned(),
            },
            "burst" => {
                let mut ran = 0;
                for i in 0..n {
                    match shared.run(|| send(i)) {
                        Ok(_) => ran += 1,
                        Err(denied) => assert_eq!(denied.code(), DenialCode::BudgetExhausted),
                    }
                }
                ran.to_string()
            }
            other => panic!("unknown command {other}"),
        };
        writeln!(out, "@{n} {said}").unwrap();
        out.flush().unwrap();
    }
}

/// A child process and its answers, read on a thread of their own so that every wait is bounded.
/// A racer process on the budgets of `url`.
pub(crate) fn racer(url: &str) -> Racer {
    Racer::spawn(
        super::child(module_path!(), "racer_child")
            .env(CHILD_ROLE, "racer")
            .env(CHILD_URL, url),
    )
}

/// The budgets hold `expected` uses now: a refused call's release has landed before its refusal was
/// returned, and a call that ran took its unit before its body.
pub(crate) fn uses_are(url: &str, expected: &str) {
    let rows = query(url, "SELECT count(*) FROM toolgate.budget_uses");
    assert_eq!(rows[0][0].as_deref(), Some(expected), "the budgets' uses");
}
