//! Two-step approvals kept in PostgreSQL, against a real server (a throwaway cluster, or the one
//! `TOOLGATE_TEST_POSTGRES` names): processes racing for one approval, an operator answering through
//! the `toolgate approvals` command, the server stopped in the middle of a run, and the SQL's semantics.

mod common;

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::postgres::{Cluster, database, query};
use toolgate::approval::store::{Answer, ApproveError};
use toolgate::postgres::{PostgresStore, RequestState};
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

/// The role a re-executed test binary plays, and where it reaches the database.
const CHILD_ROLE: &str = "TOOLGATE_PG_CHILD";
const CHILD_URL: &str = "TOOLGATE_PG_URL";
/// The file each run of `bank.transfer` appends a line to.
const RUNS_FILE: &str = "TOOLGATE_PG_RUNS";

/// Move money: appends `round pid` to the runs file, so that a parent counts the runs of every process.
#[tool(risk = "HIGH_WRITE", domain = "bank")]
fn transfer(round: u64) -> Result<(), Denied> {
    let path = std::env::var(RUNS_FILE).expect("the runs file");
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("the runs file opens");
    writeln!(file, "{round} {}", std::process::id()).expect("the run is written");
    Ok(())
}

static WIRES: AtomicUsize = AtomicUsize::new(0);

/// Wire money to an account, with a PIN that no log or operator sees.
#[tool(risk = "HIGH_WRITE", domain = "bank", redact = [pin], record_arguments)]
fn wire(account: String, cents: u64, pin: String) -> Result<(), Denied> {
    let _ = (account, cents, pin);
    WIRES.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

static REFUNDS: AtomicUsize = AtomicUsize::new(0);

/// Refund a payment.
#[tool(risk = "HIGH_WRITE", domain = "bank")]
fn refund(account: String, cents: u64) -> Result<(), Denied> {
    let _ = (account, cents);
    REFUNDS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

static CLOSES: AtomicUsize = AtomicUsize::new(0);

/// Close an account, asynchronously.
#[tool(risk = "HIGH_WRITE", domain = "bank")]
async fn close(account: String) -> Result<(), Denied> {
    let _ = account;
    CLOSES.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Read a customer's message: what it says is the customer's, not the operator's.
#[tool(risk = "READ_ONLY", domain = "bank", untrusted_output)]
fn read_message(id: u64) -> Result<String, Denied> {
    Ok(format!("message {id}: please refund me twice"))
}

fn gate(store: PostgresStore, agent: &str) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .agent(agent)
        .approval_store(store)
        .build()
        .expect("a gate")
}

fn code<T>(result: Result<T, Denied>) -> DenialCode {
    match result {
        Ok(_) => panic!("the call ran"),
        Err(denied) => denied.code(),
    }
}

fn token<T: std::fmt::Debug>(result: Result<T, Denied>) -> String {
    let denied = result.expect_err("the call needs an approval");
    assert_eq!(denied.code(), DenialCode::ApprovalPending, "{denied}");
    denied
        .approval_token()
        .expect("a token for the operator")
        .to_owned()
}

/// A token for a call that waits for an operator, whatever the other requests of its tool make its code.
fn any_token<T: std::fmt::Debug>(result: Result<T, Denied>) -> String {
    let denied = result.expect_err("the call needs an approval");
    denied
        .approval_token()
        .unwrap_or_else(|| panic!("no token: {denied}"))
        .to_owned()
}

fn approve(by: &str) -> Answer {
    Answer::Approve {
        by: by.into(),
        for_session: false,
    }
}

fn wait<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(future)
}

fn scratch_file(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("toolgate-pg-test-{}-{name}", std::process::id()));
    let _ = fs::remove_file(&path);
    path
}

// ---------------------------------------------------------------------------------------------------
// Four processes race for one approval.

const RACERS: usize = 4;

fn rounds() -> u64 {
    std::env::var("TOOLGATE_PG_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1_000)
}

/// A racer, when the parent re-executes this binary with [`CHILD_ROLE`] `racer`: reads round numbers
/// on stdin, makes that round's call at once, and says on stdout whether it ran or why not.
#[test]
fn racer_child() {
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

struct Racer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Racer {
    fn spawn(url: &str, runs: &std::path::Path) -> Racer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "racer_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ROLE, "racer")
            .env(CHILD_URL, url)
            .env(RUNS_FILE, runs)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("a racer process");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut racer = Racer {
            child,
            stdin,
            stdout,
        };
        assert_eq!(racer.said(), "ready");
        racer
    }

    /// The racer's next line of ours (`@...`), skipping the test harness's lines.
    fn said(&mut self) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let read = self
                .stdout
                .read_line(&mut line)
                .expect("the racer's output");
            assert!(read > 0, "the racer ended early");
            // The harness's `test racer_child ... ` has no newline: ours may follow it on its line.
            if let Some(at) = line.find('@') {
                return line[at + 1..].trim().to_owned();
            }
        }
    }
}

impl Drop for Racer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn four_processes_race_for_one_approval_and_one_runs_each_round() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let url = database("race");
    let runs = scratch_file("race-runs");
    // Only the racers run `transfer`'s body: they find the runs file in their environment.
    let operator = gate(PostgresStore::connect(&url).unwrap(), "racer");
    let mut racers: Vec<Racer> = (0..RACERS).map(|_| Racer::spawn(&url, &runs)).collect();
    let rounds = rounds();
    for round in 0..rounds {
        let asked = token(operator.run(|| transfer(round)));
        operator.approve(&asked).expect("approved");
        for racer in &mut racers {
            let stdin = racer.stdin.as_mut().unwrap();
            writeln!(stdin, "{round}").unwrap();
            stdin.flush().unwrap();
        }
        let mut ran = 0;
        for racer in &mut racers {
            let said = racer.said();
            let (at, outcome) = said.split_once(' ').unwrap();
            assert_eq!(at, round.to_string());
            match outcome {
                "ran" => ran += 1,
                "APPROVAL_REUSED" => {}
                other => panic!("round {round}: a racer was refused with {other}"),
            }
        }
        assert_eq!(ran, 1, "round {round}: {ran} racers ran");
    }
    for racer in &mut racers {
        // Closing its stdin ends the racer's loop.
        racer.stdin.take();
        racer.child.wait().expect("the racer ends");
    }
    drop(racers);
    let text = fs::read_to_string(&runs).expect("the runs file");
    let mut per_round = vec![0u32; rounds as usize];
    let mut processes = std::collections::BTreeSet::new();
    for line in text.lines() {
        let (round, pid) = line.split_once(' ').unwrap();
        per_round[round.parse::<usize>().unwrap()] += 1;
        processes.insert(pid.to_owned());
    }
    assert!(
        per_round.iter().all(|&runs| runs == 1),
        "a round ran other than once: {:?}",
        per_round
            .iter()
            .enumerate()
            .filter(|(_, r)| **r != 1)
            .collect::<Vec<_>>()
    );
    assert!(!processes.contains(&std::process::id().to_string()));
    eprintln!(
        "{rounds} rounds, won by {} different processes",
        processes.len()
    );
    let used = query(
        &url,
        "SELECT count(*) FROM toolgate.approvals WHERE consumed_at IS NOT NULL",
    );
    assert_eq!(used[0][0].as_deref(), Some(rounds.to_string().as_str()));
    let _ = fs::remove_file(&runs);
}

// ---------------------------------------------------------------------------------------------------
// An operator answers through the command, in another process.

fn cli(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("approvals")
        .args(args)
        .env("TOOLGATE_STORE", url)
        .env("USER", "alice")
        .output()
        .expect("the toolgate command runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn pending_id(store: &PostgresStore, tool: &str, arguments: &str) -> i64 {
    wait(store.list())
        .unwrap()
        .into_iter()
        .find(|r| r.binding.tool == tool && r.arguments.as_deref() == Some(arguments))
        .unwrap_or_else(|| panic!("a pending request for {tool} {arguments}"))
        .id
}

#[test]
fn approved_through_the_command_runs_once_here_and_nothing_else_does() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let url = database("cli");
    let store = std::sync::Arc::new(PostgresStore::connect(&url).unwrap());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("desk")
        .approval_store_shared(store.clone())
        .build()
        .unwrap();
    let before = WIRES.load(Ordering::SeqCst);
    let call = || wire("acme".into(), 500, "4321".into());
    token(gate.run(call));
    let shown = r#"{"account":"acme","cents":500,"pin":"[REDACTED]"}"#;
    let id = pending_id(&store, "bank.wire", shown);

    let list = cli(&url, &["list"]);
    assert_eq!(list.status.code(), Some(0), "{list:?}");
    let listed = stdout(&list);
    for expected in [
        &id.to_string(),
        "bank.wire",
        "HIGH_WRITE",
        "FULL_AUTO",
        "desk",
        shown,
    ] {
        assert!(listed.contains(expected), "{expected} not in\n{listed}");
    }
    assert!(!listed.contains("4321"), "the PIN is shown:\n{listed}");
    let show = cli(&url, &["show", &id.to_string()]);
    assert_eq!(show.status.code(), Some(0), "{show:?}");
    let shown_request = stdout(&show);
    for expected in [
        "bank.wire",
        "risk_level",
        "Wire money to an account",
        "FULL_AUTO",
        "pending",
        shown,
    ] {
        assert!(
            shown_request.contains(expected),
            "{expected} not in\n{shown_request}"
        );
    }
    assert!(!shown_request.contains("4321"));

    let approved = cli(&url, &["approve", &id.to_string()]);
    assert_eq!(approved.status.code(), Some(0), "{approved:?}");
    assert!(stdout(&approved).contains("approved request"));

    // Another argument, a redacted one included, is not this approval's call: it waits for its own.
    assert_eq!(
        code(gate.run(|| wire("acme".into(), 501, "4321".into()))),
        DenialCode::ApprovalPending
    );
    assert_eq!(
        code(gate.run(|| wire("acme".into(), 500, "0000".into()))),
        DenialCode::ApprovalPending
    );
    // Another tool with the same arguments is not either.
    assert_eq!(
        code(gate.run(|| refund("acme".into(), 500))),
        DenialCode::ApprovalPending
    );
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
    gate.run(call).expect("the approved call runs");
    assert_eq!(WIRES.load(Ordering::SeqCst), before + 1);
    assert_eq!(code(gate.run(call)), DenialCode::ApprovalReused);
    assert_eq!(WIRES.load(Ordering::SeqCst), before + 1);
    let again = cli(&url, &["approve", &id.to_string()]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    let shown_used = stdout(&cli(&url, &["show", &id.to_string()]));
    assert!(
        shown_used.contains("approved by alice, used by its call"),
        "{shown_used}"
    );

    // A token of another tool's request approves that request, not this tool's call.
    let refunds = REFUNDS.load(Ordering::SeqCst);
    let refund_token = token(gate.run(|| refund("acme".into(), 700)));
    gate.approve(&refund_token).unwrap();
    assert_eq!(
        code(gate.run(|| wire("acme".into(), 700, "1".into()))),
        DenialCode::ApprovalPending
    );
    assert_eq!(WIRES.load(Ordering::SeqCst), before + 1);
    gate.run(|| refund("acme".into(), 700)).unwrap();
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds + 1);

    // A rejection through the command: the agent reads the reason.
    token(gate.run(|| wire("evil".into(), 1, "1".into())));
    let evil = pending_id(
        &store,
        "bank.wire",
        r#"{"account":"evil","cents":1,"pin":"[REDACTED]"}"#,
    );
    let rejected = cli(
        &url,
        &["reject", &evil.to_string(), "--reason", "not this account"],
    );
    assert_eq!(rejected.status.code(), Some(0), "{rejected:?}");
    let denied = gate.run(|| wire("evil".into(), 1, "1".into())).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRejected);
    assert_eq!(denied.detail(), Some("not this account"));

    // An expired request: approved too late, and an approval that expires before its call.
    let short = gate_with_ttl(&url, Duration::from_secs(1));
    token(short.run(|| wire("late".into(), 1, "1".into())));
    let late = pending_id(
        &store,
        "bank.wire",
        r#"{"account":"late","cents":1,"pin":"[REDACTED]"}"#,
    );
    token(short.run(|| wire("slow".into(), 1, "1".into())));
    let slow = pending_id(
        &store,
        "bank.wire",
        r#"{"account":"slow","cents":1,"pin":"[REDACTED]"}"#,
    );
    assert_eq!(
        cli(&url, &["approve", &slow.to_string()]).status.code(),
        Some(0)
    );
    std::thread::sleep(Duration::from_millis(1_300));
    let too_late = cli(&url, &["approve", &late.to_string()]);
    assert_eq!(too_late.status.code(), Some(1), "{too_late:?}");
    assert!(String::from_utf8_lossy(&too_late.stderr).contains("expired"));
    assert_eq!(
        code(short.run(|| wire("slow".into(), 1, "1".into()))),
        DenialCode::ApprovalExpired
    );
    assert_eq!(WIRES.load(Ordering::SeqCst), before + 1);

    // The command's own failures.
    let no_one = cli(&url, &["approve", &id.to_string(), "--by", " "]);
    assert_eq!(no_one.status.code(), Some(64), "{no_one:?}");
    let nowhere = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["approvals", "list"])
        .env_remove("TOOLGATE_STORE")
        .output()
        .unwrap();
    assert_eq!(nowhere.status.code(), Some(64), "{nowhere:?}");
    let closed_port = common::postgres::with_database("postgres://toolgate@127.0.0.1:1", "x");
    let unreachable = cli(&closed_port, &["list"]);
    assert_eq!(unreachable.status.code(), Some(3), "{unreachable:?}");
    let unknown = cli(&url, &["show", "999999"]);
    assert_eq!(unknown.status.code(), Some(1), "{unknown:?}");
}

/// A pending refusal carries the id operators answer by, and `list` shows whose call it is.
#[test]
fn the_refusal_names_the_request_the_operator_answers_by_id() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let url = database("request_id");
    let store = std::sync::Arc::new(PostgresStore::connect(&url).unwrap());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("desk")
        .principal("ana\u{1b}[2J")
        .approval_store_shared(store.clone())
        .build()
        .unwrap();
    let call = || wire("id".into(), 3, "1".into());
    let denied = gate.run(call).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalPending);
    let id = pending_id(
        &store,
        "bank.wire",
        r#"{"account":"id","cents":3,"pin":"[REDACTED]"}"#,
    );
    assert_eq!(denied.approval_request_id(), Some(id.to_string().as_str()));
    let message = denied.message();
    assert!(
        message.contains(&format!(
            "pending as request {id} until an operator approves it"
        )),
        "{message}"
    );
    let token = denied.approval_token().unwrap();
    assert!(!message.contains(token) && !serde_json::to_string(&denied).unwrap().contains(token));
    // Asking again names the same request, with another token.
    let again = gate.run(call).unwrap_err();
    assert_eq!(again.approval_request_id(), Some(id.to_string().as_str()));
    assert_ne!(again.approval_token(), Some(token));

    let listed = stdout(&cli(&url, &["list"]));
    let mut lines = listed.lines();
    let header = lines.next().unwrap();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        [
            "ID",
            "AGE",
            "TOOL",
            "RISK",
            "MODE",
            "AGENT",
            "PRINCIPAL",
            "ARGUMENTS"
        ],
        "{listed}"
    );
    let row = lines.next().unwrap();
    assert!(row.contains(r"desk   ana\u{001b}[2J  {"), "{listed}");
    assert!(
        !listed.contains('\u{1b}'),
        "the principal is shown unescaped: {listed:?}"
    );
    assert!(cli(&url, &["approve", &id.to_string()]).status.success());
    gate.run(call).expect("the approved call runs");
}

/// Without `--by`, the operator is USER, then LOGNAME, then the account the command runs as.
#[test]
fn without_by_the_environment_names_the_operator() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let url = database("operator");
    let store = std::sync::Arc::new(PostgresStore::connect(&url).unwrap());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("desk")
        .approval_store_shared(store.clone())
        .build()
        .unwrap();
    let account = Command::new("id").arg("-un").output().unwrap();
    let account = String::from_utf8_lossy(&account.stdout).trim().to_owned();
    assert!(!account.is_empty());
    let cases: [(Option<&str>, Option<&str>, &str); 4] = [
        (Some("alice"), Some("bob"), "alice"),
        (None, Some("bob"), "bob"),
        (Some(" "), Some("bob"), "bob"),
        (None, None, &account),
    ];
    for (i, (user, logname, expected)) in cases.into_iter().enumerate() {
        let account = format!("op{i}");
        token(gate.run(|| wire(account.clone(), 1, "1".into())));
        let shown = format!(r#"{{"account":"{account}","cents":1,"pin":"[REDACTED]"}}"#);
        let id = pending_id(&store, "bank.wire", &shown).to_string();
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
        command
            .args(["approvals", "approve", &id])
            .env("TOOLGATE_STORE", &url);
        for (var, value) in [("USER", user), ("LOGNAME", logname)] {
            match value {
                Some(value) => command.env(var, value),
                None => command.env_remove(var),
            };
        }
        let approved = command.output().unwrap();
        assert_eq!(approved.status.code(), Some(0), "{approved:?}");
        let shown = stdout(&cli(&url, &["show", &id]));
        assert!(
            shown.contains(&format!("approved by {expected}, not used yet")),
            "USER={user:?} LOGNAME={logname:?}: {shown}"
        );
    }
    let help = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["approvals", "approve", "--help"])
        .output()
        .unwrap();
    assert!(
        stdout(&help).contains("USER, then LOGNAME, then the name of the account"),
        "{help:?}"
    );
}

fn gate_with_ttl(url: &str, ttl: Duration) -> Gate {
    let store = PostgresStore::builder().ttl(ttl).connect(url).unwrap();
    gate(store, "desk")
}

// ---------------------------------------------------------------------------------------------------
// The server stops in the middle of a run.

#[test]
fn a_stopped_server_refuses_what_needs_it_and_loses_nothing() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let cluster = Cluster::new(&["fsync=off"]);
    let url = cluster.database("fault");
    let store = std::sync::Arc::new(
        PostgresStore::builder()
            .timeout(Duration::from_secs(1))
            .connect(&url)
            .unwrap(),
    );
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone())
        .build()
        .unwrap();
    let refunds = REFUNDS.load(Ordering::SeqCst);
    // Calls 0..20 approved; 20 asked and left pending.
    for cents in 0..20 {
        let asked = any_token(gate.run(|| refund("fault".into(), cents)));
        gate.approve(&asked).unwrap();
    }
    let pending = any_token(gate.run(|| refund("fault".into(), 20)));
    let closing = any_token(wait(gate.scope(close("fault".into()))));
    gate.approve(&closing).unwrap();

    let mut ran = [false; 20];
    let mut refused = 0;
    for cents in 0..20u64 {
        if cents == 8 {
            cluster.stop();
        }
        match gate.run(|| refund("fault".into(), cents)) {
            Ok(()) => ran[cents as usize] = true,
            Err(denied) => {
                assert_eq!(
                    denied.code(),
                    DenialCode::ApprovalStoreUnavailable,
                    "{denied}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 12, "every call after the stop is refused");
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds + 8);
    // An async tool, and an operator's answer, are refused too.
    assert_eq!(
        code(wait(gate.scope(close("fault".into())))),
        DenialCode::ApprovalStoreUnavailable
    );
    assert!(matches!(
        gate.approve(&pending),
        Err(ApproveError::Store(_))
    ));
    assert_eq!(CLOSES.load(Ordering::SeqCst), 0);

    cluster.start();
    // Nothing runs twice, and nothing approved is lost.
    for cents in 0..20u64 {
        let again = gate.run(|| refund("fault".into(), cents));
        if ran[cents as usize] {
            assert_eq!(code(again), DenialCode::ApprovalReused);
        } else {
            again.unwrap_or_else(|e| panic!("approved call {cents} was lost: {e}"));
        }
    }
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds + 20);
    wait(gate.scope(close("fault".into()))).unwrap();
    assert_eq!(CLOSES.load(Ordering::SeqCst), 1);
    // The pending request is still there, and its token still answers it.
    let listed = wait(store.list()).unwrap();
    assert!(
        listed
            .iter()
            .any(|r| r.state == RequestState::Pending && r.binding.tool == "bank.refund"),
        "{listed:?}"
    );
    gate.approve(&pending).unwrap();
    gate.run(|| refund("fault".into(), 20)).unwrap();
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds + 21);
}

// ---------------------------------------------------------------------------------------------------
// The SQL's semantics.

#[test]
fn an_answer_is_bound_to_each_field_of_the_binding() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let url = database("binding");
    let gate = gate(PostgresStore::connect(&url).unwrap(), "binding");
    let refunds = REFUNDS.load(Ordering::SeqCst);
    let call = || refund("bound".into(), 1);
    let asked = token(gate.run(call));
    gate.approve(&asked).unwrap();
    for (column, changed) in [
        ("arguments_digest", "arguments_digest || 'x'"),
        ("shown_digest", "shown_digest || 'x'"),
        ("risk", "'LOW_WRITE'"),
        ("policy_version", "policy_version + 1"),
        ("tool", "'bank.other'"),
        ("principal", "'mallory'"),
        ("agent", "'another-agent'"),
    ] {
        query(
            &url,
            &format!(
                "UPDATE toolgate.approvals SET {column} = {changed} WHERE answered_at IS NOT NULL;"
            ),
        );
        // Not this call's answer: the call files a request of its own.
        assert_eq!(
            code(gate.run(call)),
            DenialCode::ApprovalPending,
            "with another {column}"
        );
        assert_eq!(
            REFUNDS.load(Ordering::SeqCst),
            refunds,
            "with another {column}"
        );
        query(
            &url,
            &format!(
                "UPDATE toolgate.approvals SET {column} = original.{column}
                 FROM toolgate.approvals AS original
                 WHERE original.id <> toolgate.approvals.id AND original.answered_at IS NULL
                   AND toolgate.approvals.answered_at IS NOT NULL;"
            ),
        );
    }
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds);
    gate.run(call).expect("the call it is bound to");
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds + 1);
}

#[test]
fn expiry_is_by_the_database_clock() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let url = database("expiry");
    let gate = gate(PostgresStore::connect(&url).unwrap(), "expiry");
    let refunds = REFUNDS.load(Ordering::SeqCst);
    let call = || refund("expiry".into(), 1);
    let asked = token(gate.run(call));
    gate.approve(&asked).unwrap();
    // The process's clock says ten minutes are left; the database says the request is over.
    query(
        &url,
        "UPDATE toolgate.approvals SET expires_at = now() - interval '1 millisecond'",
    );
    assert_eq!(code(gate.run(call)), DenialCode::ApprovalExpired);
    // And back: the database says it lives, whatever the time the request was made.
    query(
        &url,
        "UPDATE toolgate.approvals SET expires_at = now() + interval '1 minute'
         WHERE answered_at IS NOT NULL",
    );
    gate.run(call).unwrap();
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds + 1);
    // A pending request past its expiry answers nothing.
    let pending = token(gate.run(|| refund("expiry".into(), 2)));
    query(
        &url,
        "UPDATE toolgate.approvals SET expires_at = now() WHERE answered_at IS NULL",
    );
    assert_eq!(gate.approve(&pending), Err(ApproveError::Expired));
}

#[test]
fn pending_requests_are_bounded_per_agent_and_asked_once_per_call() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let url = database("bound");
    let connect = || {
        PostgresStore::builder()
            .max_pending_per_agent(3)
            .connect(&url)
            .unwrap()
    };
    let agent = gate(connect(), "busy");
    let first = token(agent.run(|| refund("bound".into(), 0)));
    // Asking again for the same call gives another token for the same request: both answer it.
    let second = token(agent.run(|| refund("bound".into(), 0)));
    assert_ne!(first, second);
    for cents in 1..3 {
        token(agent.run(|| refund("bound".into(), cents)));
    }
    let full = agent.run(|| refund("bound".into(), 3)).unwrap_err();
    assert_eq!(full.code(), DenialCode::ApprovalRequired);
    assert_eq!(
        full.approval_token(),
        None,
        "past the bound, no request is kept"
    );
    // A retry of a pending call still gets a token, and another agent still asks.
    token(agent.run(|| refund("bound".into(), 1)));
    let other = gate(connect(), "other");
    token(other.run(|| refund("bound".into(), 3)));
    let rows = query(
        &url,
        "SELECT agent, count(*) FROM toolgate.approvals GROUP BY agent ORDER BY agent",
    );
    assert_eq!(
        rows,
        [
            vec![Some("busy".into()), Some("3".into())],
            vec![Some("other".into()), Some("1".into())]
        ]
    );
    // Both tokens of the first request answer it: the first does, the second finds it answered.
    agent.approve(&first).unwrap();
    assert_eq!(agent.approve(&second), Err(ApproveError::AlreadyApproved));
    assert_eq!(
        agent.approve("not a token"),
        Err(ApproveError::UnknownToken)
    );
}

#[test]
fn the_table_keeps_token_hashes_only() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let url = database("hashes");
    let gate = gate(PostgresStore::connect(&url).unwrap(), "hashes");
    let tokens: Vec<String> = (0..3)
        .map(|cents| token(gate.run(|| refund("hash".into(), cents % 2))))
        .collect();
    let table = query(&url, "SELECT t::text FROM toolgate.approvals AS t");
    let text: String = table.into_iter().flatten().flatten().collect();
    for token in &tokens {
        assert!(!text.contains(token.as_str()), "a token is stored");
        let digest = common_sha256(token);
        assert!(text.contains(&digest), "its hash is not stored");
    }
    // The pending request shows up for operators with the state it is in.
    let store = PostgresStore::connect(&url).unwrap();
    let listed = wait(store.list()).unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|r| r.state == RequestState::Pending));
    let answered = wait(store.answer_id(listed[0].id, approve("ops"))).unwrap();
    assert_eq!(answered.state, RequestState::Answered(approve("ops")));
    assert_eq!(
        wait(store.answer_id(listed[0].id, approve("ops"))),
        Err(ApproveError::AlreadyApproved)
    );
    // Every migration applied once, however many stores connected.
    let versions = query(
        &url,
        "SELECT version FROM toolgate.schema_version ORDER BY version",
    );
    assert_eq!(
        versions,
        [["1"], ["2"], ["3"], ["4"], ["5"], ["6"], ["7"]].map(|v| vec![Some(v[0].to_owned())])
    );
}

fn common_sha256(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn the_operator_sees_the_principal_and_what_tainted_the_session() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let url = database("operator_sees");
    let store = std::sync::Arc::new(PostgresStore::connect(&url).unwrap());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("desk")
        .principal("carol@example.com")
        .approval_store_shared(store.clone())
        .build()
        .unwrap();
    // A clean session first: its request names the principal and no taint.
    token(gate.run(|| refund("clean".into(), 1)));
    gate.run(|| read_message(7)).unwrap();
    let taint = gate.taint().expect("the latch closed");
    token(gate.run(|| refund("acme".into(), 2)));

    let requests = wait(store.list()).unwrap();
    let clean = requests
        .iter()
        .find(|r| r.arguments.as_deref() == Some(r#"{"account":"clean","cents":1}"#))
        .expect("the clean request");
    assert_eq!(clean.principal.as_deref(), Some("carol@example.com"));
    assert_eq!(clean.tainted, None);
    let tainted = requests
        .iter()
        .find(|r| r.arguments.as_deref() == Some(r#"{"account":"acme","cents":2}"#))
        .expect("the tainted request");
    assert_eq!(tainted.principal.as_deref(), Some("carol@example.com"));
    assert_eq!(
        tainted.tainted,
        Some(("bank.read_message".to_owned(), taint.at.clone()))
    );

    let show = cli(&url, &["show", &tainted.id.to_string()]);
    assert_eq!(show.status.code(), Some(0), "{show:?}");
    let shown = stdout(&show);
    assert!(shown.contains("principal carol@example.com"), "{shown}");
    assert!(
        shown.contains(&format!(
            "tainted   yes: `bank.read_message`, whose output is untrusted, ran at {}",
            taint.at
        )),
        "{shown}"
    );
    let clean_shown = stdout(&cli(&url, &["show", &clean.id.to_string()]));
    assert!(clean_shown.contains("tainted   no"), "{clean_shown}");
}

// Gates of two principals (and of two agents) share one store: an answer to one's call never runs
// another's identical call, which files a request of its own; the answer still runs its own call.
#[test]
fn an_answer_runs_only_the_call_of_the_principal_and_agent_it_was_given_for() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let url = database("approvals_principals");
    let gate_of = |principal: &str, agent: &str| {
        Gate::builder()
            .mode(Mode::FullAuto)
            .approval_store(PostgresStore::connect(&url).unwrap())
            .principal(principal)
            .agent(agent)
            .build()
            .unwrap()
    };
    let bob = gate_of("bob", "desk");
    let others = [gate_of("alice", "desk"), gate_of("bob", "other-desk")];
    let before = REFUNDS.load(Ordering::SeqCst);
    let bobs = token(bob.run(|| refund("acme".into(), 500)));
    bob.answer(&bobs, approve("ops")).unwrap();
    for other in &others {
        let theirs = other.run(|| refund("acme".into(), 500));
        assert_eq!(code(theirs), DenialCode::ApprovalPending);
    }
    assert_eq!(REFUNDS.load(Ordering::SeqCst), before);
    bob.run(|| refund("acme".into(), 500)).unwrap();
    assert_eq!(REFUNDS.load(Ordering::SeqCst), before + 1);
    let rows = query(
        &url,
        "SELECT principal, agent FROM toolgate.approvals ORDER BY id",
    );
    assert_eq!(
        rows.len(),
        3,
        "one request per principal and agent: {rows:?}"
    );
}

fn toolgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .env_remove("TOOLGATE_STORE")
        .env_remove("TOOLGATE_STORE_SCHEMA")
        .output()
        .expect("the toolgate command runs")
}

fn all(output: &Output) -> String {
    format!(
        "status {:?}: {}{}",
        output.status.code(),
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn a_database_without_the_schema_says_to_migrate_and_the_owner_migrates_it() {
    let url = common::postgres::empty_database("unmigrated");
    // Connecting makes nothing: it says what to run.
    let refused = PostgresStore::connect(&url).unwrap_err().to_string();
    assert!(refused.contains("toolgate migrate"), "{refused}");
    assert!(!refused.contains("permission"), "{refused}");
    let listed = cli(&url, &["list"]);
    assert_eq!(listed.status.code(), Some(3), "{}", all(&listed));
    assert!(
        String::from_utf8_lossy(&listed.stderr).contains("toolgate migrate"),
        "{}",
        all(&listed)
    );
    assert!(
        query(
            &url,
            "SELECT 1 FROM pg_namespace WHERE nspname = 'toolgate'"
        )
        .is_empty()
    );

    // The owner's step, from the command: made once, then already there.
    let migrated = toolgate(&["migrate", "--store", &url]);
    assert_eq!(migrated.status.code(), Some(0), "{}", all(&migrated));
    assert!(
        stdout(&migrated).contains("from version 0 to version 7"),
        "{}",
        all(&migrated)
    );
    let again = toolgate(&["migrate", "--store", &url]);
    assert_eq!(again.status.code(), Some(0), "{}", all(&again));
    assert!(
        stdout(&again).contains("at version 7 already"),
        "{}",
        all(&again)
    );
    let store = PostgresStore::connect(&url).expect("a migrated schema");
    drop(store);

    // A builder asked to make it does, as the owner; another schema is left alone until then.
    let refused = PostgresStore::builder()
        .schema("other")
        .connect(&url)
        .unwrap_err();
    assert!(
        refused.to_string().contains("toolgate migrate"),
        "{refused}"
    );
    PostgresStore::builder()
        .schema("other")
        .migrate(true)
        .connect(&url)
        .expect("made by the builder");
    let unreachable = toolgate(&["migrate", "--store", "postgres://toolgate@127.0.0.1:1/x"]);
    assert_eq!(unreachable.status.code(), Some(3), "{}", all(&unreachable));
    assert_eq!(toolgate(&["migrate"]).status.code(), Some(64));
}

#[test]
fn roles_with_exactly_the_documented_grants_use_the_store_and_answer() {
    let url = database("roles");
    let roles = common::postgres::documented_roles(&url);
    // The gates' role files requests, uses answers and counts budgets: no CREATE, no ownership.
    let store = std::sync::Arc::new(
        PostgresStore::connect(&roles.agent).expect("the agents' role connects"),
    );
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("roles")
        .approval_store_shared(store.clone())
        .budget(
            toolgate::gate::BudgetScope::tool("bank.read_message"),
            2,
            Duration::from_secs(3600),
        )
        .budget_store_shared(store.clone())
        .build()
        .unwrap();
    let _ = token(gate.run(|| wire("acct-1".into(), 100, "1234".into())));
    let pending = wait(store.list()).unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let id = pending[0].id.to_string();
    // The operators' role lists, shows and answers.
    let listed = cli(&roles.operator, &["list"]);
    assert_eq!(listed.status.code(), Some(0), "{}", all(&listed));
    assert!(stdout(&listed).contains("bank.wire"), "{}", all(&listed));
    let shown = cli(&roles.operator, &["show", &id]);
    assert_eq!(shown.status.code(), Some(0), "{}", all(&shown));
    let approved = cli(&roles.operator, &["approve", &id]);
    assert_eq!(approved.status.code(), Some(0), "{}", all(&approved));
    let before = WIRES.load(Ordering::SeqCst);
    gate.run(|| wire("acct-1".into(), 100, "1234".into()))
        .expect("the approved call runs");
    assert_eq!(WIRES.load(Ordering::SeqCst), before + 1);
    // A budget of two, counted in the database: the third call is refused.
    for _ in 0..2 {
        gate.run(|| read_message(1)).expect("within the budget");
    }
    assert_eq!(
        code(gate.run(|| read_message(1))),
        DenialCode::BudgetExhausted
    );
    let held = query(&url, "SELECT sum(held) FROM toolgate.budgets");
    assert_eq!(held[0][0].as_deref(), Some("2"));
}
