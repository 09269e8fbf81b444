//! Budgets kept in PostgreSQL, against a real server (a throwaway cluster, or the one
//! `TOOLGATE_TEST_POSTGRES` names): four processes sharing budgets never exceed them, the window slides
//! by the database's clock, and a stopped server refuses the calls a budget covers.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use common::postgres::{Cluster, database, query};
use toolgate::gate::BudgetScope;
use toolgate::postgres::PostgresStore;
use toolgate::{DenialCode, Denied, Gate, Mode, Risk, tool};

const CHILD_ROLE: &str = "TOOLGATE_BUDGET_CHILD";
const CHILD_URL: &str = "TOOLGATE_BUDGET_URL";

/// How long the parent waits for any one answer of a child: far longer than any answer takes, so that
/// a child that hangs fails the test instead of hanging it.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

const HOUR: Duration = Duration::from_secs(3600);

static SENDS: AtomicUsize = AtomicUsize::new(0);

/// Send a message.
#[tool(risk = "LOW_WRITE", domain = "mail")]
fn send(round: u64) -> Result<u64, Denied> {
    SENDS.fetch_add(1, Ordering::SeqCst);
    Ok(round)
}

/// Send a message, asynchronously.
#[tool(risk = "LOW_WRITE", domain = "mail")]
async fn send_async(round: u64) -> Result<u64, Denied> {
    SENDS.fetch_add(1, Ordering::SeqCst);
    Ok(round)
}

static WIPES: AtomicUsize = AtomicUsize::new(0);

/// Wipe a mailbox.
#[tool(risk = "HIGH_WRITE", domain = "mail", modes = [FULL_AUTO])]
fn wipe(mailbox: String) -> Result<(), Denied> {
    let _ = mailbox;
    WIPES.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Read the inbox: no budget covers it.
#[tool(risk = "READ_ONLY", domain = "mail")]
fn inbox() -> Result<(), Denied> {
    Ok(())
}

fn wait<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(future)
}

fn rounds() -> u64 {
    std::env::var("TOOLGATE_PG_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1_000)
}

/// Round `round`'s gate in a process: its own budget of two calls of the agent `round-N`, in `store`.
fn round_gate(store: &Arc<PostgresStore>, round: u64) -> Gate {
    Gate::builder()
        .mode(Mode::PartialAuto)
        .agent(format!("round-{round}"))
        .budget(BudgetScope::Agent, 2, HOUR)
        .budget_store_shared(store.clone())
        .build()
        .expect("a gate")
}

/// One long-lived budget all the children share: 50 LOW_WRITE calls an hour.
fn shared_gate(store: &Arc<PostgresStore>) -> Gate {
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
fn racer_child() {
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
struct Racer {
    child: Child,
    stdin: Option<ChildStdin>,
    said: mpsc::Receiver<String>,
}

impl Racer {
    fn spawn(url: &str) -> Racer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "racer_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ROLE, "racer")
            .env(CHILD_URL, url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("a racer process");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, said) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                // The harness's `test racer_child ... ` has no newline: ours may follow it on its line.
                if let Some(at) = line.find('@')
                    && tx.send(line[at + 1..].trim().to_owned()).is_err()
                {
                    break;
                }
            }
        });
        let mut racer = Racer { child, stdin, said };
        assert_eq!(racer.said(), "ready");
        racer
    }

    fn tell(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{command}").unwrap();
        stdin.flush().unwrap();
    }

    fn said(&mut self) -> String {
        self.said
            .recv_timeout(ANSWER_WITHIN)
            .unwrap_or_else(|e| panic!("a racer did not answer within {ANSWER_WITHIN:?}: {e}"))
    }
}

impl Drop for Racer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// Four processes, each with its own connection, race for a budget of two calls, 1,000 times: two
// run each round, never three (the statement is atomic across processes) and never fewer (a call is
// refused only when the budget is spent). Then they burst on one budget of 50 calls.
#[test]
fn four_processes_together_never_exceed_a_budget() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let url = database("budget_race");
    let mut racers: Vec<Racer> = (0..4).map(|_| Racer::spawn(&url)).collect();
    let rounds = rounds();
    for round in 0..rounds {
        for racer in &mut racers {
            racer.tell(&format!("round {round}"));
        }
        let mut ran = 0;
        for racer in &mut racers {
            let said = racer.said();
            let (at, outcome) = said.split_once(' ').unwrap();
            assert_eq!(at, round.to_string());
            match outcome {
                "ran" => ran += 1,
                "BUDGET_EXHAUSTED" => {}
                other => panic!("round {round}: a racer was refused with {other}"),
            }
        }
        assert_eq!(ran, 2, "round {round}: {ran} calls ran under a budget of 2");
    }
    for racer in &mut racers {
        racer.tell("burst 40");
    }
    let ran: u64 = racers
        .iter_mut()
        .map(|racer| {
            racer
                .said()
                .split_once(' ')
                .unwrap()
                .1
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(ran, 50, "160 calls on a budget of 50");
    let kept = query(&url, "SELECT count(*) FROM toolgate.budgets");
    assert_eq!(
        kept[0][0].as_deref(),
        Some((rounds + 1).to_string().as_str())
    );
}

#[test]
fn the_window_slides_by_the_database_clock_and_async_calls_count() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let url = database("budget_window");
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let window = Duration::from_millis(1500);
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("mail.send*"), 2, window)
        .budget_store_shared(store.clone())
        .build()
        .unwrap();
    gate.run(|| send(1)).unwrap();
    wait(gate.scope(send_async(2))).unwrap();
    let denied = wait(gate.scope(send_async(3))).unwrap_err();
    assert_eq!(denied.code(), DenialCode::BudgetExhausted);
    let retry = denied.retry_after().unwrap();
    assert!(retry <= window, "{retry:?}");
    assert_eq!(
        gate.run(|| send(4)).unwrap_err().code(),
        DenialCode::BudgetExhausted
    );
    std::thread::sleep(retry);
    gate.run(|| send(5)).unwrap();
    gate.run(inbox).unwrap();
}

#[test]
fn a_stopped_server_refuses_the_calls_a_budget_covers() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let cluster = Cluster::new(&["fsync=off"]);
    let url = cluster.database("budget_fault");
    let store = Arc::new(
        PostgresStore::builder()
            .timeout(Duration::from_secs(1))
            .connect(&url)
            .unwrap(),
    );
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(Risk::LowWrite, 100, HOUR)
        .budget_store_shared(store.clone())
        .build()
        .unwrap();
    gate.run(|| send(1)).unwrap();
    cluster.stop();
    let sends = SENDS.load(Ordering::SeqCst);
    for _ in 0..3 {
        let denied = gate.run(|| send(2)).unwrap_err();
        assert_eq!(
            denied.code(),
            DenialCode::BudgetStoreUnavailable,
            "{denied}"
        );
        let denied = wait(gate.scope(send_async(3))).unwrap_err();
        assert_eq!(
            denied.code(),
            DenialCode::BudgetStoreUnavailable,
            "{denied}"
        );
    }
    assert_eq!(SENDS.load(Ordering::SeqCst), sends, "no body ran");
    // What no budget covers does not need the server.
    gate.run(inbox).unwrap();
    cluster.start();
    gate.run(|| send(4)).unwrap();
    let held = query(&url, "SELECT held FROM toolgate.budgets");
    assert_eq!(held, [[Some("2".to_owned())]]);
    let uses = query(&url, "SELECT count(*) FROM toolgate.budget_uses");
    assert_eq!(uses, [[Some("2".to_owned())]]);
}

/// How many uses the budgets hold, once the store's thread has carried out what it was sent.
fn uses_settle_at(url: &str, expected: &str) {
    for _ in 0..100 {
        let rows = query(url, "SELECT count(*) FROM toolgate.budget_uses");
        if rows[0][0].as_deref() == Some(expected) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the budgets never held {expected} uses");
}

// A budget counts the calls that run, in PostgreSQL too: an agent that asks three times while its
// request is pending, and a call refused after its budget check, give their units back; the approved
// call runs, and the budget is then spent.
#[test]
fn refused_calls_give_their_units_back_to_the_shared_budget() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = common::serial();
    let url = database("budget_release");
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone())
        .budget(BudgetScope::tool("mail.wipe"), 1, HOUR)
        .budget_store_shared(store.clone())
        .build()
        .unwrap();
    let before = WIPES.load(Ordering::SeqCst);
    let mut token = None;
    for _ in 0..3 {
        let denied = gate.run(|| wipe("ops".into())).unwrap_err();
        assert_eq!(denied.code(), DenialCode::ApprovalPending);
        token = denied.approval_token().map(str::to_owned);
    }
    uses_settle_at(&url, "0");
    gate.approve(&token.unwrap()).unwrap();
    gate.run(|| wipe("ops".into())).unwrap();
    assert_eq!(WIPES.load(Ordering::SeqCst), before + 1);
    uses_settle_at(&url, "1");
    let over = gate.run(|| wipe("sales".into())).unwrap_err();
    assert_eq!(over.code(), DenialCode::BudgetExhausted);
    assert!(over.approval_token().is_none());
    let held = query(&url, "SELECT held FROM toolgate.budgets");
    assert_eq!(held, [[Some("1".to_owned())]]);
}
