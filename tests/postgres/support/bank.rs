//! The bank's tools (`bank.*`), its gates over a PostgreSQL approval store, and the racer: this binary
//! run again (`TOOLGATE_PG_CHILD=racer`) to make one call a round, for the tests of approvals across
//! processes.

pub(crate) use super::{
    Racer, any_token, approve, assert_answer_lost, assert_pending, assert_refused,
    assert_refused_saying, assert_store_unavailable, cli, cli_exits, code, parent_database,
    parent_store_on_own_cluster, pending_id, pending_wire_id, race_round, rounds, sha256_hex,
    token, toolgate, toolgate_exits, wait,
};
pub(crate) use crate::common;

pub(crate) use std::fs;
pub(crate) use std::io::{BufRead, Write};
pub(crate) use std::process::{Command, Output};
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};
pub(crate) use std::time::Duration;

pub(crate) use crate::common::postgres::{database, query};
pub(crate) use toolgate::{
    DenialCode, Denied, Gate, Mode, approval::store::ApproveError, postgres::PostgresStore,
    postgres::RequestState, tool,
};

/// The role a re-executed test binary plays, and where it reaches the database.
pub(crate) const CHILD_ROLE: &str = "TOOLGATE_PG_CHILD";
pub(crate) const CHILD_URL: &str = "TOOLGATE_PG_URL";
/// The file each run of `bank.transfer` appends a line to.
pub(crate) const RUNS_FILE: &str = "TOOLGATE_PG_RUNS";

/// Move money: appends `round pid` to the runs file, so that a parent counts the runs of every process.
#[tool(risk = "HIGH_WRITE", domain = "bank")]
pub(crate) fn transfer(round: u64) -> Result<(), Denied> {
    super::append_run(
        std::env::var(RUNS_FILE).expect("the runs file"),
        &round.to_string(),
    );
    Ok(())
}

pub(crate) static WIRES: AtomicUsize = AtomicUsize::new(0);
pub(crate) static REFUNDS: AtomicUsize = AtomicUsize::new(0);
pub(crate) static CLOSES: AtomicUsize = AtomicUsize::new(0);

/// Wire money to an account, with a PIN that no log or operator sees.
#[tool(risk = "HIGH_WRITE", domain = "bank", redact = [pin], record_arguments)]
pub(crate) fn wire(account: String, cents: u64, pin: String) -> Result<(), Denied> {
    let _ = (account, cents, pin);
    WIRES.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Refund a payment.
#[tool(risk = "HIGH_WRITE", domain = "bank")]
pub(crate) fn refund(account: String, cents: u64) -> Result<(), Denied> {
    let _ = (account, cents);
    REFUNDS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Close an account, asynchronously.
#[tool(risk = "HIGH_WRITE", domain = "bank")]
pub(crate) async fn close(account: String) -> Result<(), Denied> {
    let _ = account;
    CLOSES.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Read a customer's message: what it says is the customer's, not the operator's.
#[tool(risk = "READ_ONLY", domain = "bank", untrusted_output)]
pub(crate) fn read_message(id: u64) -> Result<String, Denied> {
    Ok(format!("message {id}: please refund me twice"))
}

pub(crate) fn gate(store: PostgresStore, agent: &str) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .agent(agent)
        .approval_store(store)
        .build()
        .expect("a gate")
}

pub(crate) fn scratch_file(name: &str) -> std::path::PathBuf {
    let path =
        std::env::temp_dir().join(format!("toolgate-approvals-{}-{name}", std::process::id()));
    let _ = fs::remove_file(&path);
    path
}

/// A racer process on the store of `url`, appending its runs to `runs`.
pub(crate) fn racer(url: &str, runs: &std::path::Path) -> Racer {
    Racer::spawn(
        super::child(module_path!(), "racer_child")
            .env(CHILD_ROLE, "racer")
            .env(CHILD_URL, url)
            .env(RUNS_FILE, runs),
    )
}

// ---------------------------------------------------------------------------------------------------
// Four processes race for one approval.

pub(crate) const RACERS: usize = 4;

/// A racer, when the parent re-executes this binary with [`CHILD_ROLE`] `racer`: reads round numbers
/// on stdin, makes that round's call at once, and says on stdout whether it ran or why not.
#[test]
pub(crate) fn racer_child() {
    if std::env::var(CHILD_ROLE).as_deref() != Ok("racer") {
        return;
    }
    let url = std::env::var(CHILD_URL).expect("the database's URL");
    let store = PostgresStore::connect(&url).expect("the store");
    // Every racer is the same agent as the one that asked: an answer runs only its own agent's call.
    let gate = gate(store, "racer");
    let mut out = std::io::stdout().lock();
    writeln!(out, "@ready").unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let round: u64 = line.unwrap().trim().parse().expect("a round number");
        let said = match gate.run(|| transfer(round)) {
            Ok(()) => "ran".to_owned(),
            Err(denied) => denied.code().as_str().to_owned(),
        };
        writeln!(out, "@{round} {said}").unwrap();
        out.flush().unwrap();
    }
}

/// What a command printed on stdout.
pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A gate of the agent `desk` over a store of `url` whose requests live `ttl`.
pub(crate) fn gate_with_ttl(url: &str, ttl: Duration) -> Gate {
    let store = PostgresStore::builder().ttl(ttl).connect(url).unwrap();
    gate(store, "desk")
}

/// A command's exit status and all it printed.
pub(crate) fn all(output: &Output) -> String {
    format!(
        "status {:?}: {}{}",
        output.status.code(),
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    )
}
