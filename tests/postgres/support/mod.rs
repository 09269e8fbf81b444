//! What the tests of this binary share: the tools, gates and child-process roles of each group of
//! tests, and the helpers they all use.

pub(crate) mod bank;
#[cfg(feature = "console")]
pub(crate) mod console;
#[cfg(feature = "console")]
pub(crate) mod console_attacks;
pub(crate) mod fleet;
pub(crate) mod mail;
pub(crate) mod mcp_server;
pub(crate) mod store;
pub(crate) mod trail;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use toolgate::approval::store::{Answer, ApproveError};
use toolgate::audit::{AuditSink, Checkpoints, PublicKey, SigningKey};
use toolgate::postgres::PostgresSink;
use toolgate::postgres::PostgresStore;
use toolgate::{DenialCode, Denied};
use toolgate::{Gate, Mode};

use crate::common::Scratch;
use crate::common::postgres::database;

/// The name the test harness gives the test `name` of `module` (`module_path!()`), for running this
/// binary again with `--exact` to play a child role.
pub(crate) fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}

/// This binary run again to play a child role: only the test `name` of `module` (`module_path!()`),
/// which does nothing unless its role's variable is set.
pub(crate) fn child(module: &str, name: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("this binary"));
    command.args([
        "--exact",
        &test_path(module, name),
        "--nocapture",
        "--test-threads=1",
    ]);
    command
}

/// For a test of the parent process: the test held alone (`common::serial`) and a new database `name`;
/// `None` when this binary runs again in a child's role (`role` is set), where only the child's test acts.
pub(crate) fn parent_database(
    role: &str,
    name: &str,
) -> Option<(std::sync::MutexGuard<'static, ()>, String)> {
    if std::env::var(role).is_ok() {
        return None;
    }
    Some((crate::common::serial(), database(name)))
}

/// A cluster of its own that a test may stop (`fsync` off), a new database `name` on it, and a store of
/// that database whose statements time out after a second.
pub(crate) fn store_on_own_cluster(
    name: &str,
) -> (
    crate::common::postgres::Cluster,
    String,
    std::sync::Arc<PostgresStore>,
) {
    let cluster = crate::common::postgres::Cluster::new(&["fsync=off"]);
    let url = cluster.database(name);
    let store = PostgresStore::builder()
        .timeout(Duration::from_secs(1))
        .connect(&url)
        .unwrap();
    (cluster, url, std::sync::Arc::new(store))
}

/// For a test of the parent process that stops its server: the test held alone, and a store on a
/// cluster of its own ([`store_on_own_cluster`]); `None` in a child's role (`role` is set).
pub(crate) fn parent_store_on_own_cluster(
    role: &str,
    name: &str,
) -> Option<(
    std::sync::MutexGuard<'static, ()>,
    crate::common::postgres::Cluster,
    String,
    std::sync::Arc<PostgresStore>,
)> {
    if std::env::var(role).is_ok() {
        return None;
    }
    let serial = crate::common::serial();
    let (cluster, url, store) = store_on_own_cluster(name);
    Some((serial, cluster, url, store))
}

/// A new empty folder `name` of this process under the temporary directory.
pub(crate) fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-test-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

/// The code a call was refused with; panics if it ran.
pub(crate) fn code<T>(result: Result<T, Denied>) -> DenialCode {
    match result {
        Ok(_) => panic!("the call ran"),
        Err(denied) => denied.code(),
    }
}

/// The operator's token of a call refused `APPROVAL_PENDING`.
pub(crate) fn token<T: std::fmt::Debug>(result: Result<T, Denied>) -> String {
    let denied = result.expect_err("the call needs an approval");
    assert_eq!(denied.code(), DenialCode::ApprovalPending, "{denied}");
    denied
        .approval_token()
        .expect("a token for the operator")
        .to_owned()
}

/// A token for a call that waits for an operator, whatever the other requests of its tool make its code.
pub(crate) fn any_token<T>(result: Result<T, Denied>) -> String {
    let denied = match result {
        Ok(_) => panic!("the call ran without an approval"),
        Err(denied) => denied,
    };
    denied
        .approval_token()
        .unwrap_or_else(|| panic!("no token: {denied}"))
        .to_owned()
}

/// An operator's approval of one call.
pub(crate) fn approve(by: &str) -> Answer {
    Answer::Approve {
        by: by.into(),
        for_session: false,
        confirmation: None,
    }
}

/// `future` run to its end on a runtime of its own.
pub(crate) fn wait<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(future)
}

/// The id of the pending request of `tool` with `arguments` in `store`.
pub(crate) fn pending_id(store: &PostgresStore, tool: &str, arguments: &str) -> i64 {
    wait(store.list())
        .unwrap()
        .into_iter()
        .find(|r| r.binding.tool == tool && r.arguments.as_deref() == Some(arguments))
        .unwrap_or_else(|| panic!("a pending request for {tool} {arguments}"))
        .id
}

/// The id of the pending request of the wire `tool` to `account` of `cents` (its PIN redacted) in
/// `store`.
pub(crate) fn pending_wire_id(store: &PostgresStore, tool: &str, account: &str, cents: u64) -> i64 {
    let shown = format!(r#"{{"account":"{account}","cents":{cents},"pin":"[REDACTED]"}}"#);
    pending_id(store, tool, &shown)
}

/// Asserts that a call was refused to wait for an operator's answer.
#[track_caller]
pub(crate) fn assert_pending<T>(result: Result<T, Denied>) {
    assert_eq!(code(result), DenialCode::ApprovalPending);
}

/// Asserts that a call was refused with `expected`.
#[track_caller]
pub(crate) fn assert_refused<T>(result: Result<T, Denied>, expected: DenialCode) {
    assert_eq!(code(result), expected);
}

/// Asserts that a call was refused because the approval store did not answer.
#[track_caller]
pub(crate) fn assert_store_unavailable<T>(result: Result<T, Denied>) {
    assert_eq!(code(result), DenialCode::ApprovalStoreUnavailable);
}

/// Asserts that an operator's answer failed because the approval store did not answer.
#[track_caller]
pub(crate) fn assert_answer_lost<T: std::fmt::Debug>(answered: Result<T, ApproveError>) {
    assert!(
        matches!(answered, Err(ApproveError::Store(_))),
        "{answered:?}"
    );
}

/// Appends `line` and this process's id to the runs file at `path`, so that a parent counts the runs of
/// every process.
pub(crate) fn append_run(path: impl AsRef<Path>, line: &str) {
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("the runs file opens");
    writeln!(file, "{line} {}", std::process::id()).expect("the run is written");
}

/// Asserts that `result` is an error whose text says `expected`.
#[track_caller]
pub(crate) fn assert_refused_saying<T, E: std::fmt::Display>(result: Result<T, E>, expected: &str) {
    match result {
        Ok(_) => panic!("accepted; expected an error saying {expected:?}"),
        Err(error) => assert!(error.to_string().contains(expected), "{error}"),
    }
}

/// How many rounds the races between processes run (`TOOLGATE_PG_ROUNDS`, 1,000 by default).
pub(crate) fn rounds() -> u64 {
    std::env::var("TOOLGATE_PG_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1_000)
}

/// `toolgate approvals ARGS` on the store of `url`, as the operator `alice`.
pub(crate) fn cli(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("approvals")
        .args(args)
        .env("TOOLGATE_STORE", url)
        .env_remove("TOOLGATE_STORE_SCHEMA")
        .env("USER", "alice")
        .output()
        .expect("the toolgate command runs")
}

/// `toolgate approvals ARGS` on the store of `url`, which must exit with `code`.
#[track_caller]
pub(crate) fn cli_exits(url: &str, args: &[&str], code: i32) -> Output {
    let output = cli(url, args);
    assert_eq!(output.status.code(), Some(code), "{}", out(&output));
    output
}

/// `toolgate ARGS` as [`toolgate`] runs it, which must exit with `code`.
#[track_caller]
pub(crate) fn toolgate_exits(args: &[&str], code: i32) -> Output {
    let output = toolgate(args);
    assert_eq!(output.status.code(), Some(code), "{}", out(&output));
    output
}

/// `toolgate ARGS`, which must exit with `code` and print `expected`: what it printed, stdout then
/// stderr.
#[track_caller]
pub(crate) fn toolgate_prints(args: &[&str], code: i32, expected: &str) -> String {
    let printed = text(&toolgate_exits(args, code));
    assert!(printed.contains(expected), "{printed}");
    printed
}

/// `toolgate ARGS`, with no store or fleet from the environment.
pub(crate) fn toolgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .env_remove("TOOLGATE_STORE")
        .env_remove("TOOLGATE_STORE_SCHEMA")
        .env_remove("TOOLGATE_FLEET")
        .output()
        .expect("the toolgate command runs")
}

/// What a command printed, stdout then stderr.
pub(crate) fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A command's exit status and what it printed, for an assertion's message.
pub(crate) fn out(output: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Characters that hide, fake or reorder text on a terminal.
pub(crate) const HIDDEN: &str = "\u{202e}\u{2066}\u{1b}\u{9b}\u{200b}\u{2060}\u{feff}\u{ad}\u{e0041}\u{2028}\u{2029}\u{180e}\u{115f}\u{fe0f}";
/// `x` and each of `chars`.
pub(crate) fn hidden_text(chars: &str) -> String {
    chars.chars().map(|c| format!("x{c}")).collect()
}
/// Asserts that `output` shows each of `chars` escaped, none of them raw.
#[track_caller]
pub(crate) fn assert_shown_escaped(what: &str, chars: &str, output: &Output) {
    let text = text(output);
    for c in chars.chars() {
        assert!(!text.contains(c), "{what}: {c:?} printed raw: {text:?}");
        let escape = format!("\\u{{{:04x}}}", u32::from(c));
        assert!(text.contains(&escape), "{what}: no {escape}: {text:?}");
    }
}

/// A PARTIAL_AUTO gate auditing into `sink`.
pub(crate) fn audited(sink: impl AuditSink) -> Gate {
    Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .expect("a gate")
}

/// Two writers, `a` and `b`, in a new database `name`, each making 50 calls (`call(gate, writer, n)`)
/// with checkpoints every 10 records and a final one; the database's URL, the public key's file in
/// `scratch`, and the public key.
pub(crate) fn signed_writers(
    name: &str,
    scratch: &Scratch,
    call: impl Fn(&Gate, &str, u64),
) -> (String, PathBuf, PublicKey) {
    let url = database(name);
    let key = SigningKey::generate().unwrap();
    let public = key.public_key();
    let file = scratch.path(&format!("{name}.pub"));
    fs::write(&file, public.to_public_key_pem()).unwrap();
    let checkpoints = Checkpoints::new(key).every_records(10);
    for writer in ["a", "b"] {
        let sink = PostgresSink::builder()
            .writer(writer)
            .checkpoints(checkpoints.clone())
            .connect(&url)
            .unwrap();
        let gate = audited(sink);
        for n in 0..50 {
            call(&gate, writer, n);
        }
    }
    (url, file, public)
}

/// `toolgate audit verify` of the trail at `url` with the public key's file: its exit code and output.
pub(crate) fn verify_signed(url: &str, public: &Path) -> (Option<i32>, String) {
    let output = toolgate(&[
        "audit",
        "verify",
        url,
        "--public-key",
        public.to_str().unwrap(),
    ]);
    (output.status.code(), text(&output))
}

/// How long the parent waits for any one answer of a child: far longer than any answer takes, so that
/// a child that hangs fails the test instead of hanging it.
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// A child process that reads commands on stdin and answers each with a line `@...` on stdout.
pub(crate) struct Racer {
    pub(crate) child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) said: mpsc::Receiver<String>,
}

impl Racer {
    /// Starts `command` (this binary in a racer's role), and waits for it to say it is ready.
    pub(crate) fn spawn(command: &mut Command) -> Racer {
        let mut child = command
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

    /// Sends `command` to the racer, a line on its stdin.
    pub(crate) fn tell(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{command}").unwrap();
        stdin.flush().unwrap();
    }

    /// The racer's next line of ours (`@...`), skipping the test harness's lines.
    pub(crate) fn said(&mut self) -> String {
        self.said
            .recv_timeout(ANSWER_WITHIN)
            .unwrap_or_else(|e| panic!("a racer did not answer within {ANSWER_WITHIN:?}: {e}"))
    }
}

/// Tells every racer `command` for `round`, and counts the racers that say `{round} ran`; any answer
/// other than that or `{round} {refused}` fails the test.
#[track_caller]
pub(crate) fn race_round(racers: &mut [Racer], command: &str, round: u64, refused: &str) -> usize {
    for racer in racers.iter_mut() {
        racer.tell(command);
    }
    let mut ran = 0;
    for racer in racers.iter_mut() {
        let said = racer.said();
        let (at, outcome) = said.split_once(' ').unwrap();
        assert_eq!(at, round.to_string());
        match outcome {
            "ran" => ran += 1,
            outcome if outcome == refused => {}
            other => panic!("round {round}: a racer was refused with {other}"),
        }
    }
    ran
}

impl Drop for Racer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SHA-256 of `text`, in hex.
pub(crate) fn sha256_hex(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The hash of an audit record in its chain, as anyone can compute it: SHA-256 of the previous
/// record's hash and the record's line without its hash, in hex.
pub(crate) fn chained_hash(prev: &str, body: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::new()
        .chain_update(prev.as_bytes())
        .chain_update(body.as_bytes())
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Undoes migrations 15 (the charges of the rules over history) and 14 (the budget check that
/// charges a reservation once; the function is left as it is by both), 13 (the operators' resets of budgets and their records), 12 (a fleet's policy
/// in force, its members' tools), 11 (the column of the gate that filed a request; the budget check's
/// function, made again by the migration, is left as it is) and 10 (the trail's searched columns and
/// indexes, the pending list's index, the notification of changed requests), for the tests of a
/// database at version 9 that migrates.
pub(crate) const BACK_TO_VERSION_9: &str = "
    DELETE FROM toolgate.schema_version WHERE version = 15;
    DELETE FROM toolgate.schema_version WHERE version = 14;
    DROP FUNCTION toolgate.budget_reset(text[], text, text, text);
    DROP TABLE toolgate.budget_resets;
    DELETE FROM toolgate.schema_version WHERE version = 13;
    DROP FUNCTION toolgate.fleet_policy_accepted(text, text);
    DROP TABLE toolgate.fleet_tools;
    ALTER TABLE toolgate.fleets DROP COLUMN accepted_policy, DROP COLUMN accepted_digest,
        DROP COLUMN accepted_by, DROP COLUMN accepted_at;
    DELETE FROM toolgate.schema_version WHERE version = 12;
    ALTER TABLE toolgate.approvals DROP COLUMN gate;
    DELETE FROM toolgate.schema_version WHERE version = 11;
    DROP TRIGGER approvals_changed ON toolgate.approvals;
    DROP FUNCTION toolgate.approvals_changed();
    DROP INDEX toolgate.approvals_open;
    DROP TRIGGER audit_searched ON toolgate.audit;
    DROP FUNCTION toolgate.audit_searched();
    DROP INDEX toolgate.audit_written, toolgate.audit_call, toolgate.audit_tool;
    ALTER TABLE toolgate.audit DROP COLUMN principal, DROP COLUMN agent, DROP COLUMN mode,
        DROP COLUMN decision, DROP COLUMN outcome, DROP COLUMN code, DROP COLUMN risk;
    DELETE FROM toolgate.schema_version WHERE version = 10;";
