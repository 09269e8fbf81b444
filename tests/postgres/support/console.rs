//! The agent of the console's tests: this binary run again (`TOOLGATE_PG_CHILD=console-agent`) as an
//! agent of `alice` that makes one call needing an operator's approval (`console.refund`, or the
//! irreversible `console.close_account`), asking again every 200 ms while it waits, and says on stdout
//! what came of it. And the processes of those tests, with what they print kept for the failure
//! messages.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use toolgate::postgres::{PostgresSink, PostgresStore};
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

use super::bank::CHILD_ROLE;

const ROLE: &str = "console-agent";
const URL_ENV: &str = "TOOLGATE_CONSOLE_URL";
const TOOL_ENV: &str = "TOOLGATE_CONSOLE_TOOL";
const RUNS_ENV: &str = "TOOLGATE_CONSOLE_RUNS";
const ACCOUNT_ENV: &str = "TOOLGATE_CONSOLE_ACCOUNT";
const AMOUNT_ENV: &str = "TOOLGATE_CONSOLE_AMOUNT";

/// The principal the agent acts for, and its label.
pub(crate) const PRINCIPAL: &str = "alice";
pub(crate) const AGENT: &str = "ops-agent";

/// How long an agent asks before it gives up: an agent outlives no test that forgot it.
const GIVES_UP_AFTER: Duration = Duration::from_secs(300);

/// How long the agent's store and trail wait for the database.
const PATIENCE: Duration = Duration::from_secs(15);

/// Refund a customer's payment: says so on stdout, and appends a line to the runs file.
#[tool(risk = "HIGH_WRITE", domain = "console", record_arguments)]
pub(crate) fn refund(account: String, amount: u64) -> Result<(), Denied> {
    println!("RAN refund {account} {amount}");
    super::append_run(
        std::env::var(RUNS_ENV).expect("the runs file"),
        &format!("refund {account} {amount}"),
    );
    Ok(())
}

fn account_state(account: &str) -> Result<serde_json::Value, String> {
    Ok(serde_json::json!({ "account": account, "state": "open" }))
}

/// Close a customer's account, which cannot be opened again: says so on stdout, and appends a line
/// to the runs file.
#[tool(
    risk = "HIGH_WRITE",
    domain = "console",
    irreversible,
    target = account,
    evidence = account_state,
    record_arguments
)]
pub(crate) fn close_account(account: String) -> Result<(), Denied> {
    println!("RAN close_account {account}");
    super::append_run(
        std::env::var(RUNS_ENV).expect("the runs file"),
        &format!("close_account {account}"),
    );
    Ok(())
}

/// Look an account up.
#[tool(risk = "READ_ONLY", domain = "console")]
pub(crate) fn lookup(account: String) -> Result<u64, Denied> {
    Ok(account.len() as u64)
}

/// Note something on an account.
#[tool(risk = "LOW_WRITE", domain = "console", modes = [PARTIAL_AUTO, FULL_AUTO])]
pub(crate) fn note(account: String, text: String) -> Result<(), Denied> {
    let _ = (account, text);
    Ok(())
}

/// A triage agent in SHADOW, as one runs before it is promoted: its decisions in the trail (writer
/// `triage-bot`) for the promotion page to draw.
pub(crate) fn shadow_history(url: &str) {
    let sink = PostgresSink::builder()
        .writer("triage-bot")
        .connect(url)
        .expect("the trail");
    let gate = Gate::builder()
        .mode(Mode::Shadow)
        .principal("bob")
        .agent("triage")
        .audit(sink)
        .build()
        .expect("a gate");
    for round in 0..12u64 {
        let account = format!("acct-{round}");
        gate.run(|| lookup(account.clone()))
            .expect("a read runs in SHADOW");
        if round % 2 == 0 {
            let _ = gate.run(|| note(account.clone(), "called back".into()));
        }
        if round % 3 == 0 {
            let _ = gate.run(|| refund(account.clone(), round * 10));
        }
    }
}

/// What an agent calls.
pub(crate) enum Call<'a> {
    /// `refund(account, amount)`.
    Refund(&'a str, u64),
    /// `close_account(account)`.
    CloseAccount(&'a str),
}

/// The agent, when the parent runs this binary again with [`CHILD_ROLE`] `console-agent`: a FULL_AUTO
/// gate of `alice`'s agent `ops-agent` over the store and the trail of the database, calling
/// `refund(ACCOUNT, AMOUNT)` or `close_account(ACCOUNT)` until an operator answers. It prints
/// `PENDING ID` once it waits, then `RAN TOOL ARGUMENTS` (from the body), `REJECTED REASON`, or
/// `REFUSED CODE MESSAGE`.
#[test]
fn console_agent_child() {
    if std::env::var(CHILD_ROLE).as_deref() != Ok(ROLE) {
        return;
    }
    let url = std::env::var(URL_ENV).expect("the database's URL");
    let tool = std::env::var(TOOL_ENV).expect("the tool");
    let account = std::env::var(ACCOUNT_ENV).expect("the account");
    let amount: u64 = std::env::var(AMOUNT_ENV)
        .ok()
        .map_or(0, |amount| amount.parse().expect("an amount"));
    let call = || match tool.as_str() {
        "refund" => refund(account.clone(), amount),
        "close_account" => close_account(account.clone()),
        other => panic!("no tool {other}"),
    };
    // A loaded machine may take seconds over a statement: a store or a trail that gives up after the
    // default two seconds would end the agent before the operator answers.
    let store = PostgresStore::builder()
        .timeout(PATIENCE)
        .connect(&url)
        .expect("the store");
    let sink = PostgresSink::builder()
        .writer(AGENT)
        .timeout(PATIENCE)
        .connect(&url)
        .expect("the trail");
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .principal(PRINCIPAL)
        .agent(AGENT)
        .approval_store(store)
        .audit(sink)
        .build()
        .expect("a gate");
    let started = Instant::now();
    let mut waiting = false;
    loop {
        let denied = match gate.run(call) {
            Ok(()) => break,
            Err(denied) => denied,
        };
        match denied.code() {
            DenialCode::ApprovalPending => {
                if !waiting {
                    println!(
                        "PENDING {}",
                        denied.approval_request_id().expect("a request id")
                    );
                    waiting = true;
                }
                assert!(
                    started.elapsed() < GIVES_UP_AFTER,
                    "no answer within {GIVES_UP_AFTER:?}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
            // As an agent would: a store or a trail that did not answer in time is asked again.
            code @ (DenialCode::ApprovalStoreUnavailable | DenialCode::AuditUnavailable) => {
                println!("RETRY {}", code.as_str());
                assert!(
                    started.elapsed() < GIVES_UP_AFTER,
                    "no answer within {GIVES_UP_AFTER:?}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
            DenialCode::ApprovalRejected => {
                println!("REJECTED {}", denied.detail().unwrap_or_default());
                break;
            }
            code => {
                println!("REFUSED {} {denied}", code.as_str());
                break;
            }
        }
    }
}

/// An agent in a process of its own over the database of `url`, making `call` and appending each
/// run of a body to `runs`.
pub(crate) fn spawn_agent(url: &str, runs: &Path, call: Call<'_>) -> Watched {
    let mut command = super::child(module_path!(), "console_agent_child");
    command
        .env(CHILD_ROLE, ROLE)
        .env(URL_ENV, url)
        .env(RUNS_ENV, runs);
    match call {
        Call::Refund(account, amount) => command
            .env(TOOL_ENV, "refund")
            .env(ACCOUNT_ENV, account)
            .env(AMOUNT_ENV, amount.to_string()),
        Call::CloseAccount(account) => command
            .env(TOOL_ENV, "close_account")
            .env(ACCOUNT_ENV, account),
    };
    Watched::spawn("the agent", &mut command)
}

/// A child process whose stdout and stderr lines are kept as they come; killed when dropped.
pub(crate) struct Watched {
    name: &'static str,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Watched {
    /// Starts `command`, its stdin closed and its output kept.
    pub(crate) fn spawn(name: &'static str, command: &mut Command) -> Watched {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let keep = |pipe: Box<dyn Read + Send>, lines: Arc<Mutex<Vec<String>>>| {
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    lines
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(line);
                }
            });
        };
        keep(Box::new(child.stdout.take().unwrap()), lines.clone());
        keep(Box::new(child.stderr.take().unwrap()), lines.clone());
        Watched { name, child, lines }
    }

    /// The first line printed so far that contains `text`.
    pub(crate) fn line_with(&self, text: &str) -> Option<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|line| line.contains(text))
            .cloned()
    }

    /// Whether the process has ended.
    pub(crate) fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// What the process printed so far, for a failure message.
    pub(crate) fn output(&self) -> String {
        let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        format!("--- {} printed ---\n{}\n", self.name, lines.join("\n"))
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
