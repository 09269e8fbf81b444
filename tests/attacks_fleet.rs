//! Attacks from outside on the PostgreSQL audit sink, signed checkpoints and fleets: safe Rust, the
//! public API, and the SQL an attacker with INSERT-only or full access to the tables could run. Each test
//! asserts the documented guarantee: it passes when the attack fails and fails when it gets through.
//!
//! Partitions are made with a small TCP proxy between a sink or a fleet and the server, which can drop
//! every byte (a black hole, as a real network partition does, rather than a clean reset), so that most
//! tests share one throwaway cluster, each in a database of its own.

mod common;

use std::collections::HashSet;
use std::future::Future;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::postgres::{database, query};
use toolgate::audit::{AuditRecord, Checkpoints, Outcome, SigningKey, Stage};
use toolgate::postgres::fleet::{self, Fleet};
use toolgate::postgres::{PostgresSink, verify_signed_trail, verify_trail};
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

// ---------------------------------------------------------------------------------------------------
// Tools and helpers
// ---------------------------------------------------------------------------------------------------

static RAN: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn ran(tag: &str) -> bool {
    RAN.lock().unwrap().iter().any(|t| t == tag)
}

/// Marks that its body ran with `tag`, recording its arguments so that the trail shows which ran.
#[tool(risk = "LOW_WRITE", domain = "fa", record_arguments)]
fn mark(tag: String) -> Result<(), Denied> {
    RAN.lock().unwrap().push(tag);
    Ok(())
}

/// The same, asynchronously: the body runs after one yield.
#[tool(risk = "LOW_WRITE", domain = "fa", record_arguments)]
async fn mark_async(tag: String) -> Result<(), Denied> {
    RAN.lock().unwrap().push(format!("{tag}:started"));
    tokio::task::yield_now().await;
    RAN.lock().unwrap().push(tag);
    Ok(())
}

/// An async body that waits a long time once started: cancelled while it runs.
#[tool(risk = "LOW_WRITE", domain = "fa", record_arguments)]
async fn sleep_async(tag: String) -> Result<(), Denied> {
    RAN.lock().unwrap().push(tag);
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(())
}

static GO: Mutex<Option<mpsc::Receiver<()>>> = Mutex::new(None);

/// A body that waits until the test lets it finish.
#[tool(risk = "LOW_WRITE", domain = "fa", record_arguments)]
fn wait_body(tag: String) -> Result<(), Denied> {
    RAN.lock().unwrap().push(tag);
    let rx = GO.lock().unwrap().take().expect("a channel to wait on");
    let _ = rx.recv_timeout(Duration::from_secs(20));
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn code(result: &Result<(), Denied>) -> Option<&'static str> {
    result.as_ref().err().map(|d| d.code().as_str())
}

fn toolgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .env_remove("TOOLGATE_STORE")
        .env_remove("TOOLGATE_FLEET")
        .output()
        .expect("the toolgate command runs")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The records of `writer`, in `seq` order.
fn records(url: &str, writer: &str) -> Vec<AuditRecord> {
    query(
        url,
        &format!("SELECT line FROM toolgate.audit WHERE writer = '{writer}' ORDER BY seq"),
    )
    .iter()
    .map(|row| serde_json::from_str(row[0].as_deref().unwrap()).unwrap())
    .collect()
}

/// The `tag` argument of a record of `mark`/`mark_async`/`wait_body`.
fn tag_of(record: &AuditRecord) -> Option<String> {
    let arguments: serde_json::Value = serde_json::from_str(record.arguments.as_deref()?).ok()?;
    arguments["tag"].as_str().map(str::to_owned)
}

/// Every enter of `writer` has an exit after it, in the table.
fn unpaired_enters(url: &str, writer: &str) -> Vec<AuditRecord> {
    let all = records(url, writer);
    all.iter()
        .filter(|r| r.stage == Stage::Enter)
        .filter(|e| {
            !all.iter()
                .any(|x| x.stage == Stage::Exit && x.gate == e.gate && x.call == e.call)
        })
        .cloned()
        .collect()
}

/// Polls `condition` until it holds or `within` passes.
fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A session holding a transaction open with `sql` run in it (a table lock), until dropped.
struct Held {
    release: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Held {
    fn new(url: &str, sql: &str) -> Held {
        let (url, sql) = (url.to_owned(), sql.to_owned());
        let (ready_tx, ready_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(connection);
                client
                    .batch_execute(&format!("BEGIN; {sql}"))
                    .await
                    .unwrap();
                ready_tx.send(()).unwrap();
                let _ = tokio::task::spawn_blocking(move || release_rx.recv()).await;
                let _ = client.batch_execute("ROLLBACK").await;
            });
        });
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the lock is taken");
        Held {
            release: Some(release_tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A TCP proxy to the server that can be cut: while cut, every byte either way is dropped (a black
/// hole); connections that saw a cut are closed once it heals, new ones work again.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    generation: Arc<std::sync::atomic::AtomicU64>,
}

impl Proxy {
    fn new(url: &str) -> Proxy {
        let upstream = url
            .split("@")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap()
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let generation = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (c, g) = (cut.clone(), generation.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let born = g.load(Ordering::SeqCst);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server.try_clone().unwrap(), client.try_clone().unwrap()),
                ] {
                    let (cut, generation) = (c.clone(), g.clone());
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        from.set_read_timeout(Some(Duration::from_millis(50))).ok();
                        loop {
                            if generation.load(Ordering::SeqCst) != born
                                && !cut.load(Ordering::SeqCst)
                            {
                                // This connection lived through a cut: it is dead.
                                let _ = from.shutdown(Shutdown::Both);
                                let _ = to.shutdown(Shutdown::Both);
                                return;
                            }
                            match from.read(&mut buf) {
                                Ok(0) => {
                                    let _ = to.shutdown(Shutdown::Both);
                                    return;
                                }
                                Ok(n) => {
                                    if cut.load(Ordering::SeqCst) {
                                        continue;
                                    }
                                    if to.write_all(&buf[..n]).is_err() {
                                        return;
                                    }
                                }
                                Err(e)
                                    if e.kind() == std::io::ErrorKind::WouldBlock
                                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                                Err(_) => {
                                    let _ = to.shutdown(Shutdown::Both);
                                    return;
                                }
                            }
                        }
                    });
                }
            }
        });
        Proxy {
            port,
            cut,
            generation,
        }
    }

    fn url(&self, url: &str) -> String {
        let (head, rest) = url.split_once('@').unwrap();
        let path = rest.split_once('/').unwrap().1;
        format!("{head}@127.0.0.1:{}/{path}", self.port)
    }

    fn cut(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.cut.store(true, Ordering::SeqCst);
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// A sink with a short timeout. Its first connection is retried, as [`member_fleet`]'s is: creating
/// the schema on a loaded machine may take longer than the timeout, and no attack here is about
/// connecting.
fn sink(url: &str, writer: &str, timeout: Duration) -> PostgresSink {
    let connect = || {
        PostgresSink::builder()
            .writer(writer)
            .timeout(timeout)
            .connect(url)
    };
    for _ in 0..9 {
        if let Ok(sink) = connect() {
            return sink;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    connect().expect("the sink connects")
}

fn audited_gate(url: &str, writer: &str, timeout: Duration) -> Gate {
    Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink(url, writer, timeout))
        .build()
        .unwrap()
}

/// A fleet with short timeouts, so that outages show quickly. Its first connection is retried: on a
/// loaded machine it may take longer than the timeout, and no attack here is about connecting.
fn member_fleet(url: &str, name: &str, grace_ms: u64) -> Fleet {
    let connect = || {
        Fleet::builder()
            .grace(Duration::from_millis(grace_ms))
            .poll_interval(Duration::from_millis(50))
            .timeout(Duration::from_millis(400))
            .connect(url, name)
    };
    for _ in 0..9 {
        if let Ok(fleet) = connect() {
            return fleet;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    connect().expect("the fleet")
}

// ---------------------------------------------------------------------------------------------------
// The PostgreSQL sink
// ---------------------------------------------------------------------------------------------------

/// f01: an async tool whose `enter` commit is held up (the audit table locked by another session) is
/// cancelled: its future dropped while the commit is pending; the lock is then released so that the
/// `enter` may still commit. Guarantee: the body never runs, and every `enter` gets its `exit`
/// (`cancelled` or `refused`), so `verify` reports no interrupted call for a process that did not die.
/// The same for a future dropped while its body awaits.
#[test]
fn f01_async_call_cancelled_while_its_enter_commit_is_pending() {
    let url = database("f01");
    let rt = runtime();
    let gate = audited_gate(&url, "f01", Duration::from_secs(10));
    rt.block_on(gate.scope(mark_async("f01-warm".into())))
        .unwrap();
    let held = Held::new(&url, "LOCK TABLE toolgate.audit IN EXCLUSIVE MODE");
    let cancelled = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_millis(500),
            gate.scope(mark_async("f01-cancelled".into())),
        )
        .await
    });
    assert!(cancelled.is_err(), "the commit was held up: {cancelled:?}");
    drop(held);
    // Cancelled while its body awaits.
    let in_body = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_millis(300),
            gate.scope(sleep_async("f01-in-body".into())),
        )
        .await
    });
    assert!(in_body.is_err());
    rt.block_on(gate.scope(mark_async("f01-after".into())))
        .unwrap();
    drop(gate);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!ran("f01-cancelled:started"), "a cancelled call's body ran");
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let unpaired = unpaired_enters(&url, "f01");
    assert!(
        unpaired.is_empty(),
        "enter records without an exit in a process that did not die: {unpaired:?}"
    );
    assert!(
        report.writer("f01").unwrap().interrupted.is_empty(),
        "{report}"
    );
    let exits: Vec<Option<Outcome>> = records(&url, "f01")
        .iter()
        .filter(|r| r.stage == Stage::Exit)
        .map(|r| r.outcome)
        .collect();
    assert!(exits.contains(&Some(Outcome::Cancelled)), "{exits:?}");
}

/// f02: a sync call whose `enter` commit outlasts the sink's timeout while the INSERT stays queued in
/// the server (the table locked), then the lock is released so the queued statement may still commit.
/// Guarantee: that call is refused `AUDIT_UNAVAILABLE` with its body not run; the sink continues its
/// chain (no fork, no duplicate seq, the trail verifies); every body that ran has its committed
/// `enter`.
#[test]
fn f02_enter_commit_timing_out_while_the_insert_stays_queued() {
    let url = database("f02");
    let gate = audited_gate(&url, "f02", Duration::from_millis(500));
    gate.run(|| mark("f02-warm".into())).unwrap();
    let held = Held::new(&url, "LOCK TABLE toolgate.audit IN EXCLUSIVE MODE");
    let started = Instant::now();
    let refused = gate.run(|| mark("f02-timed-out".into()));
    assert_eq!(code(&refused), Some(DenialCode::AuditUnavailable.as_str()));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the timeout held"
    );
    // A second call while still locked.
    let refused2 = gate.run(|| mark("f02-timed-out-2".into()));
    assert!(refused2.is_err());
    std::thread::sleep(Duration::from_millis(700));
    drop(held);
    let mut oks = 0;
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut i = 0;
    while oks < 30 && Instant::now() < deadline {
        if gate.run(|| mark(format!("f02-after-{i}"))).is_ok() {
            oks += 1;
        }
        i += 1;
    }
    assert_eq!(oks, 30, "the sink continued after the lock was released");
    drop(gate);
    assert!(!ran("f02-timed-out") && !ran("f02-timed-out-2"));
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let entered: HashSet<String> = records(&url, "f02")
        .iter()
        .filter(|r| r.stage == Stage::Enter)
        .filter_map(tag_of)
        .collect();
    for tag in RAN.lock().unwrap().iter().filter(|t| t.starts_with("f02-")) {
        assert!(entered.contains(tag), "{tag} ran without its enter record");
    }
}

/// f03: the writer name's advisory lock dies with the sink's connection (an attacker or a network blip
/// terminates the backend); a second sink then takes the same name while the first is still alive,
/// and both keep writing. Guarantee: one writer per name, never a forked chain: once the second sink
/// holds the name, the first writes nothing more (its calls are refused), and the trail verifies.
#[test]
fn f03_writer_name_taken_over_after_the_first_sinks_connection_dies() {
    let url = database("f03");
    let first = audited_gate(&url, "shared", Duration::from_secs(1));
    first.run(|| mark("f03-first-0".into())).unwrap();
    query(
        &url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    );
    std::thread::sleep(Duration::from_millis(200));
    let second = PostgresSink::builder()
        .writer("shared")
        .timeout(Duration::from_secs(1))
        .connect(&url);
    let mut first_after = 0;
    let mut second_ok = 0;
    if let Ok(second) = second {
        let second = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(second)
            .build()
            .unwrap();
        for i in 0..20 {
            if first.run(|| mark(format!("f03-first-{}", i + 1))).is_ok() {
                first_after += 1;
            }
            if second.run(|| mark(format!("f03-second-{i}"))).is_ok() {
                second_ok += 1;
            }
        }
        drop(second);
    } else {
        for i in 0..20 {
            if first.run(|| mark(format!("f03-first-{}", i + 1))).is_ok() {
                first_after += 1;
            }
        }
    }
    drop(first);
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "one name, two writers: {report}");
    assert!(
        first_after == 0 || second_ok == 0,
        "two live sinks wrote one chain: first {first_after} calls, second {second_ok} calls"
    );
    let entered: HashSet<String> = records(&url, "shared")
        .iter()
        .filter(|r| r.stage == Stage::Enter)
        .filter_map(tag_of)
        .collect();
    for tag in RAN.lock().unwrap().iter().filter(|t| t.starts_with("f03-")) {
        assert!(entered.contains(tag), "{tag} ran without its enter record");
    }
}

/// f04: an attacker with INSERT on the audit table adds hostile rows: a line that is not JSON, JSON
/// nested 100,000 deep, a 4 MB line, a chain with a gap up to the largest `seq`, a writer name made to
/// forge the report's first line. Guarantee: `verify` neither crashes nor hangs, reports every such
/// writer broken, keeps the honest writer intact, and the command exits 1 with `BROKEN` first.
#[test]
fn f04_verify_on_hostile_rows_does_not_crash_hang_or_pass() {
    let url = database("f04");
    let gate = audited_gate(&url, "honest", Duration::from_secs(2));
    for i in 0..5 {
        gate.run(|| mark(format!("f04-{i}"))).unwrap();
    }
    drop(gate);
    let zeros = "0".repeat(64);
    let insert = |writer: &str, seq: &str, line: &str| {
        query(
            &url,
            &format!(
                "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, line)
                 VALUES ({writer}, {seq}, '{zeros}', '{zeros}', 'enter', 'fa.mark', 1, 1, {line})"
            ),
        );
    };
    insert("'notjson'", "1", "'not json at all {'");
    insert("'deep'", "1", "repeat('[', 100000)");
    insert(
        "'huge'",
        "1",
        "'{\"a\":\"' || repeat('a', 4000000) || '\"}'",
    );
    // A valid first record, then the honest writer's second line at the largest seq.
    insert(
        "'gap'",
        "1",
        "(SELECT line FROM toolgate.audit WHERE writer = 'honest' AND seq = 1)",
    );
    insert(
        "'gap'",
        "9223372036854775807",
        "(SELECT line FROM toolgate.audit WHERE writer = 'honest' AND seq = 2)",
    );
    let (tx, rx) = mpsc::channel();
    let u = url.clone();
    std::thread::spawn(move || {
        let result = std::panic::catch_unwind(|| verify_trail(&u, "toolgate"));
        let _ = tx.send(result.map(|r| r.map(|r| (r.is_intact(), r.to_string(), r))));
    });
    let result = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("verify_trail hung on hostile rows")
        .expect("verify_trail panicked on hostile rows")
        .expect("the trail reads");
    let (intact, shown, report) = result;
    assert!(!intact, "{shown}");
    assert!(report.writer("honest").unwrap().is_intact(), "{shown}");
    for writer in ["notjson", "deep", "huge", "gap"] {
        let w = report.writer(writer).expect("every writer reported");
        assert!(!w.is_intact(), "{writer} verified: {shown}");
    }
    let cli = toolgate(&["audit", "verify", &url]);
    assert_eq!(cli.status.code(), Some(1), "{}", text(&cli));
    assert!(text(&cli).starts_with("BROKEN"), "{}", text(&cli));
}

/// f05: an attacker with UPDATE edits the copied columns of a row (`stage`, `tool`, `gate`, `call`)
/// and leaves its line alone, so that SQL queries (`WHERE stage = 'enter'`) see another trail than the
/// one verified. Guarantee (`WriterReport::is_intact`): "every row's columns matching its line".
#[test]
fn f05_columns_edited_apart_from_the_line_do_not_verify() {
    let url = database("f05");
    let gate = audited_gate(&url, "cols", Duration::from_secs(2));
    for i in 0..5 {
        gate.run(|| mark(format!("f05-{i}"))).unwrap();
    }
    drop(gate);
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
    let mut got_through = Vec::new();
    for (column, edit, restore) in [
        ("stage", "stage = 'exit'", "stage = 'enter'"),
        ("tool", "tool = 'fa.other'", "tool = 'fa.mark'"),
        ("gate", "gate = gate + 1000", "gate = gate - 1000"),
        ("call", "call = call + 1000", "call = call - 1000"),
        ("seq", "seq = 1000", "seq = 3"),
        ("hash", "hash = reverse(hash)", "hash = reverse(hash)"),
    ] {
        let at = if column == "seq" { 1000 } else { 3 };
        query(
            &url,
            &format!("UPDATE toolgate.audit SET {edit} WHERE writer = 'cols' AND seq = 3"),
        );
        let report = verify_trail(&url, "toolgate").unwrap();
        if report.is_intact() {
            got_through.push(column);
        }
        query(
            &url,
            &format!("UPDATE toolgate.audit SET {restore} WHERE writer = 'cols' AND seq = {at}"),
        );
        assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
    }
    assert!(
        got_through.is_empty(),
        "columns edited apart from their line verified as intact: {got_through:?}"
    );
}

// ---------------------------------------------------------------------------------------------------
// Signed checkpoints
// ---------------------------------------------------------------------------------------------------

/// Two writers, `a` and `b`, 50 calls each with checkpoints every 10 records and a final one; the
/// public key's file.
fn signed(
    name: &str,
    scratch: &common::Scratch,
) -> (String, std::path::PathBuf, toolgate::audit::PublicKey) {
    let url = database(name);
    let key = SigningKey::generate().unwrap();
    let public = key.public_key();
    let file = scratch.path(&format!("{name}.pub"));
    std::fs::write(&file, public.to_public_key_pem()).unwrap();
    let checkpoints = Checkpoints::new(key).every_records(10);
    for writer in ["a", "b"] {
        let sink = PostgresSink::builder()
            .writer(writer)
            .checkpoints(checkpoints.clone())
            .connect(&url)
            .unwrap();
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(sink)
            .build()
            .unwrap();
        for n in 0..50 {
            gate.run(|| mark(format!("{name}-{writer}-{n}"))).unwrap();
        }
    }
    (url, file, public)
}

fn verify_cli(url: &str, public: &std::path::Path) -> (Option<i32>, String) {
    let output = toolgate(&[
        "audit",
        "verify",
        url,
        "--public-key",
        public.to_str().unwrap(),
    ]);
    (output.status.code(), text(&output))
}

/// f06: a full-access attacker renames writer `a` to `c` in both tables (records and checkpoints),
/// so that a's signed trail is presented as another writer's. Guarantee: a checkpoint names its
/// writer; one that names another writer than the chain it stands for is a tampered checkpoint
/// (exit 5), so the renamed trail does not verify.
#[test]
fn f06_writer_renamed_in_both_tables() {
    let scratch = common::Scratch::new("f06");
    let (url, file, _) = signed("f06", &scratch);
    assert_eq!(verify_cli(&url, &file).0, Some(0));
    query(
        &url,
        "UPDATE toolgate.audit SET writer = 'c' WHERE writer = 'a'",
    );
    query(
        &url,
        "UPDATE toolgate.audit_checkpoints SET writer = 'c' WHERE writer = 'a'",
    );
    let (code, shown) = verify_cli(&url, &file);
    assert_eq!(code, Some(5), "a renamed writer: {shown}");
}

/// f07: checkpoint rows reordered (two rows' `seq` swapped), one of a writer's own checkpoints replayed
/// at the end of its series, and one deleted from the middle. Guarantee: each is a tampered series,
/// exit 5.
#[test]
fn f07_checkpoints_reordered_replayed_or_deleted() {
    let scratch = common::Scratch::new("f07");
    let mut got_through = Vec::new();
    for (i, (what, sql)) in [
        (
            "swapped seq",
            "UPDATE toolgate.audit_checkpoints SET seq = seq + 1000 WHERE writer = 'a' AND seq IN (2, 3);
             UPDATE toolgate.audit_checkpoints SET seq = CASE seq WHEN 1002 THEN 3 ELSE 2 END
             WHERE writer = 'a' AND seq IN (1002, 1003)",
        ),
        (
            "replayed own",
            "INSERT INTO toolgate.audit_checkpoints
             SELECT * FROM toolgate.audit_checkpoints WHERE writer = 'a' AND seq = 1 LIMIT 0",
        ),
        (
            "deleted middle",
            "DELETE FROM toolgate.audit_checkpoints WHERE writer = 'a' AND seq = 4",
        ),
        ("b's last appended to a", ""),
        ("garbage appended", ""),
    ]
    .into_iter()
    .enumerate()
    {
        let (url, file, _) = signed(&format!("f07{i}"), &scratch);
        if what == "replayed own" || what.starts_with("b's") || what.starts_with("garbage") {
            let (from, at) = if what.starts_with("b's") {
                ("b", "(SELECT max(seq) FROM toolgate.audit_checkpoints WHERE writer = 'b')")
            } else {
                ("a", "1")
            };
            // A copy of checkpoint 1 at the next seq: column by column, whatever the table holds.
            let columns: Vec<String> = query(
                &url,
                "SELECT column_name FROM information_schema.columns
                 WHERE table_schema = 'toolgate' AND table_name = 'audit_checkpoints'
                 ORDER BY ordinal_position",
            )
            .into_iter()
            .map(|r| r[0].clone().unwrap())
            .collect();
            let select: Vec<String> = columns
                .iter()
                .map(|c| {
                    if c == "seq" {
                        "(SELECT max(seq) + 1 FROM toolgate.audit_checkpoints WHERE writer = 'a')"
                            .to_owned()
                    } else if c == "writer" {
                        "'a'".to_owned()
                    } else if c == "checkpoint" && what.starts_with("garbage") {
                        "repeat('{', 100000)".to_owned()
                    } else {
                        c.clone()
                    }
                })
                .collect();
            query(
                &url,
                &format!(
                    "INSERT INTO toolgate.audit_checkpoints ({}) SELECT {} FROM toolgate.audit_checkpoints
                     WHERE writer = '{from}' AND seq = {at}",
                    columns.join(", "),
                    select.join(", ")
                ),
            );
        } else {
            query(&url, sql);
        }
        let (code, shown) = verify_cli(&url, &file);
        if code != Some(5) {
            got_through.push(format!("{what}: exit {code:?}: {shown}"));
        }
    }
    assert!(got_through.is_empty(), "{got_through:#?}");
}

/// f08: the `head_seq` column of writer a's final checkpoint row changed (its signed JSON left alone),
/// so that SQL reading the column sees another head than the one signed. Guarantee (by analogy with the
/// audit rows' columns): a row whose columns differ from its signed text does not verify as intact.
#[test]
fn f08_checkpoint_column_edited_apart_from_its_signed_text() {
    let scratch = common::Scratch::new("f08");
    let (url, file, _) = signed("f08", &scratch);
    query(
        &url,
        "UPDATE toolgate.audit_checkpoints SET head_seq = 40
         WHERE writer = 'a' AND seq = (SELECT max(seq) FROM toolgate.audit_checkpoints WHERE writer = 'a')",
    );
    let (code, shown) = verify_cli(&url, &file);
    assert_ne!(
        code,
        Some(0),
        "an edited checkpoint column verified: {shown}"
    );
}

/// f09: an attacker with INSERT only appends, after writer a's final checkpoint, one record with its
/// hashes computed by the public format, and adds a whole forged writer `z` (no checkpoint at all).
/// Guarantee: records after the last checkpoint are covered by no signature, and the report says how
/// many; a writer no checkpoint covers is not reported as verified under the key.
#[test]
fn f09_insert_only_attacker_appends_after_the_final_checkpoint_and_forges_a_writer() {
    use sha2::{Digest, Sha256};
    let scratch = common::Scratch::new("f09");
    let (url, file, public) = signed("f09", &scratch);
    let append = |writer: &str, seq: u64, prev: &str| -> String {
        let mut fields: std::collections::BTreeMap<String, serde_json::Value> =
            serde_json::from_str(
                query(
                    &url,
                    "SELECT line FROM toolgate.audit WHERE writer = 'a' AND seq = 1",
                )[0][0]
                    .as_deref()
                    .unwrap(),
            )
            .unwrap();
        fields.remove("hash");
        fields.insert("seq".into(), seq.into());
        fields.insert("prev_hash".into(), prev.into());
        let body = serde_json::to_string(&fields).unwrap();
        let hash: String = Sha256::new()
            .chain_update(prev.as_bytes())
            .chain_update(body.as_bytes())
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        fields.insert("hash".into(), hash.clone().into());
        let line = serde_json::to_string(&fields).unwrap().replace('\'', "''");
        query(
            &url,
            &format!(
                "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, line)
                 SELECT '{writer}', {seq}, '{prev}', '{hash}', stage, tool, gate, call, '{line}'
                 FROM toolgate.audit WHERE writer = 'a' AND seq = 1"
            ),
        );
        hash
    };
    let last = query(
        &url,
        "SELECT hash FROM toolgate.audit WHERE writer = 'a' AND seq = 100",
    )[0][0]
        .clone()
        .unwrap();
    append("a", 101, &last);
    let mut prev = "0".repeat(64);
    for seq in 1..=3 {
        prev = append("z", seq, &prev);
    }
    let report = verify_signed_trail(&url, "toolgate", &public).unwrap();
    let a = report.writer("a").unwrap();
    assert!(a.chain.is_intact(), "{report}");
    let a_checkpoints = a.checkpoints.as_ref().expect("a's checkpoints checked");
    assert_eq!(a_checkpoints.uncovered(), 1, "{report}");
    let z = report.writer("z").expect("the forged writer is listed");
    let z_shown = z.checkpoints.as_ref().is_some_and(|c| c.uncovered() == 3) || !z.is_intact();
    assert!(
        z_shown,
        "a writer with no checkpoint at all passes as verified under the key: {report}"
    );
    let (code, shown) = verify_cli(&url, &file);
    assert!(
        code != Some(0) || shown.contains("z"),
        "the forged writer is not shown: {shown}"
    );
}

// ---------------------------------------------------------------------------------------------------
// Fleets
// ---------------------------------------------------------------------------------------------------

/// f10: the fleet is lowered to SHADOW, then raised to FULL_AUTO (running gates stay at SHADOW), then
/// the process loses the fleet for longer than the grace period and gets it back. Guarantee: a running
/// gate is never raised by its fleet: coming back from a partition must not apply the raise.
#[test]
fn f10_raise_then_partition_and_rejoin_does_not_raise_a_running_gate() {
    let url = database("f10");
    let proxy = Proxy::new(&url);
    let fleet = member_fleet(&proxy.url(&url), "f10", 400);
    let gate = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    fleet::lower(&url, "toolgate", "f10", Mode::Shadow, "ana", "incident").unwrap();
    assert!(eventually(Duration::from_secs(2), || gate.mode() == Mode::Shadow));
    fleet::raise(&url, "toolgate", "f10", Mode::FullAuto, "ana", "resolved").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(gate.mode(), Mode::Shadow, "raised by `raise` directly");
    proxy.cut();
    std::thread::sleep(Duration::from_millis(1500));
    proxy.heal();
    // Whatever the gate does once back, it must never go above SHADOW.
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let mode = gate.mode();
        if !seen.contains(&mode) {
            seen.push(mode);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        seen,
        [Mode::Shadow],
        "a partition and a rejoin raised a running gate past its fleet's lowering"
    );
    assert!(gate.run(|| mark("f10-after".into())).is_err());
    assert!(!ran("f10-after"));
}

/// f11: while the process has lost its fleet (acting as SHADOW), the application lowers its gate to
/// ADVISORY, then asks for PARTIAL_AUTO. Guarantee: a gate's mode is only ever lowered: the second
/// request changes nothing, and once the fleet is back the gate runs at ADVISORY at most (if the
/// lowering was accepted), never at its old PARTIAL_AUTO.
#[test]
fn f11_gate_lower_during_a_partition_is_not_undone_by_the_rejoin() {
    let url = database("f11");
    let proxy = Proxy::new(&url);
    let fleet = member_fleet(&proxy.url(&url), "f11", 300);
    let gate = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    assert_eq!(gate.mode(), Mode::PartialAuto);
    proxy.cut();
    assert!(
        eventually(Duration::from_secs(3), || gate.mode() == Mode::Shadow),
        "the partition was never noticed"
    );
    let to_advisory = gate.lower(Mode::Advisory);
    let to_partial = gate.lower(Mode::PartialAuto);
    assert_eq!(gate.mode(), Mode::Shadow);
    proxy.heal();
    assert!(
        eventually(Duration::from_secs(5), || gate.mode() != Mode::Shadow) || to_advisory.is_err(),
        "the gate never came back"
    );
    std::thread::sleep(Duration::from_millis(300));
    let mode = gate.mode();
    if to_advisory.is_ok() {
        assert!(
            mode <= Mode::Advisory,
            "lowered to ADVISORY during the partition (Ok), back at {mode} after it \
             (lower(PARTIAL_AUTO) gave {to_partial:?})"
        );
    } else {
        // Refused as a raise from SHADOW: then the gate runs as before, but nothing raised it either.
        assert!(mode <= Mode::PartialAuto);
        assert!(to_partial.is_err() || mode <= Mode::PartialAuto);
    }
    if mode <= Mode::Advisory {
        assert!(gate.run(|| mark("f11-after".into())).is_err());
    }
}

/// f12: a black-hole partition (bytes dropped, no reset): the member's reads hang rather than fail.
/// Guarantee: past the grace period the gate acts as SHADOW; a lowering made while it was cut off
/// (ADVISORY) applies when it is back, never its old PARTIAL_AUTO.
#[test]
fn f12_black_hole_partition_is_noticed_and_a_lowering_during_it_applies_after() {
    let url = database("f12");
    let proxy = Proxy::new(&url);
    let fleet = member_fleet(&proxy.url(&url), "f12", 500);
    let gate = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    proxy.cut();
    let noticed = Instant::now();
    assert!(
        eventually(Duration::from_secs(4), || gate.mode() == Mode::Shadow),
        "a black-holed member still runs at {} after 4 s (grace 500 ms)",
        gate.mode()
    );
    eprintln!("black hole noticed after {:?}", noticed.elapsed());
    fleet::lower(
        &url,
        "toolgate",
        "f12",
        Mode::Advisory,
        "ana",
        "during the cut",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    proxy.heal();
    assert!(
        eventually(Duration::from_secs(6), || gate.mode() != Mode::Shadow),
        "the member never rejoined"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        gate.mode(),
        Mode::Advisory,
        "a lowering made during the partition did not apply on rejoin"
    );
}

/// f13: the gate's audit sink and its fleet reach the same server through one link, which is cut past
/// the grace period and healed. Guarantee: the partition is audited (`fleet_lost`, then
/// `fleet_rejoined`): records that nothing waits on are queued and committed with a later group, so a
/// partition cannot be hidden by the very outage that caused it; the trail verifies.
#[test]
fn f13_partition_is_not_hidden_when_the_sink_shares_the_lost_server() {
    let url = database("f13");
    let proxy = Proxy::new(&url);
    let via = proxy.url(&url);
    let fleet = member_fleet(&via, "f13", 400);
    let gate = fleet
        .join(Gate::builder().mode(Mode::PartialAuto).audit(sink(
            &via,
            "f13",
            Duration::from_millis(500),
        )))
        .unwrap();
    gate.run(|| mark("f13-before".into())).unwrap();
    proxy.cut();
    assert!(eventually(Duration::from_secs(4), || gate.mode() == Mode::Shadow));
    let during = gate.run(|| mark("f13-during".into()));
    assert!(during.is_err());
    proxy.heal();
    assert!(
        eventually(Duration::from_secs(8), || gate.mode() == Mode::PartialAuto),
        "never rejoined"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while gate.run(|| mark("f13-after".into())).is_err() && Instant::now() < deadline {}
    drop(gate);
    drop(fleet);
    let stages: Vec<Stage> = records(&url, "f13").iter().map(|r| r.stage).collect();
    let lost = stages.iter().position(|s| *s == Stage::FleetLost);
    let back = stages.iter().position(|s| *s == Stage::FleetRejoined);
    assert!(
        lost.is_some() && back.is_some() && lost < back,
        "the partition is missing from the trail: {stages:?}"
    );
    assert!(!ran("f13-during"));
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
}

/// f14: a call's `enter` is committed and its body runs; the link to the server is cut while the body
/// runs, so its `exit` is written into a sink that cannot commit; the link is healed. Guarantee: every
/// `enter` gets its `exit` ("queued and committed with the next group"), so a process that did not die
/// leaves no interrupted call.
#[test]
fn f14_exit_record_written_during_an_outage_is_not_lost() {
    let url = database("f14");
    let proxy = Proxy::new(&url);
    let gate = audited_gate(&proxy.url(&url), "f14", Duration::from_millis(500));
    gate.run(|| mark("f14-warm".into())).unwrap();
    let (go, wait) = mpsc::channel();
    assert!(eventually(Duration::from_secs(30), || GO
        .lock()
        .unwrap()
        .is_none()));
    *GO.lock().unwrap() = Some(wait);
    let g = gate.clone();
    let call = std::thread::spawn(move || g.run(|| wait_body("f14-body".into())));
    assert!(eventually(Duration::from_secs(5), || ran("f14-body")));
    proxy.cut();
    go.send(()).unwrap();
    assert!(call.join().unwrap().is_ok());
    std::thread::sleep(Duration::from_millis(1500));
    proxy.heal();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut oks = 0;
    let mut i = 0;
    while oks < 5 && Instant::now() < deadline {
        if gate.run(|| mark(format!("f14-after-{i}"))).is_ok() {
            oks += 1;
        }
        i += 1;
    }
    assert_eq!(oks, 5);
    drop(gate);
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let unpaired: Vec<Option<String>> = unpaired_enters(&url, "f14").iter().map(tag_of).collect();
    assert!(
        unpaired.is_empty(),
        "exit records lost with a failed group; verify reports them as interrupted: {unpaired:?}"
    );
}

/// f15: the `Fleet` handle is dropped while a gate it joined keeps running, then the fleet is lowered.
/// Guarantee: a gate joined to a fleet runs at the lower of its own mode and the fleet's; a lowering
/// reaches it within a second (or, not knowing its fleet any more, it acts as SHADOW past the grace
/// period). It must not silently leave the fleet and keep running.
#[test]
fn f15_fleet_handle_dropped_while_its_gate_runs() {
    let url = database("f15");
    let fleet = member_fleet(&url, "f15", 400);
    let gate = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    drop(fleet);
    std::thread::sleep(Duration::from_millis(200));
    fleet::lower(&url, "toolgate", "f15", Mode::Shadow, "ana", "incident").unwrap();
    let reached = eventually(Duration::from_millis(1500), || gate.mode() == Mode::Shadow);
    let ran_after = gate.run(|| mark("f15-after".into())).is_ok();
    let listed = fleet::status(&url, "toolgate", "f15")
        .unwrap()
        .members
        .iter()
        .any(|m| m.gate == gate.id());
    assert!(
        reached && !ran_after,
        "the fleet was lowered to SHADOW; its gate still runs at {} (a call ran: {ran_after}; \
         the gate listed in fleet_members: {listed})",
        gate.mode()
    );
}

/// f16: a clone of a joined gate, and a wider unjoined gate entered inside it. Guarantee: every clone
/// goes down with the fleet, and nested gates intersect: FULL_AUTO inside a fleet-lowered gate runs
/// nothing the fleet's mode refuses.
#[test]
fn f16_clone_and_nested_wider_gate_under_a_lowered_fleet() {
    let url = database("f16");
    let fleet = member_fleet(&url, "f16", 1000);
    let gate = fleet.join(Gate::builder().mode(Mode::FullAuto)).unwrap();
    let clone = gate.clone();
    let inner = Gate::new(Mode::FullAuto).unwrap();
    fleet::lower(&url, "toolgate", "f16", Mode::Advisory, "ana", "x").unwrap();
    assert!(eventually(Duration::from_millis(1500), || clone.mode()
        == Mode::Advisory));
    let nested = clone.run(|| inner.run(|| mark("f16-nested".into())));
    assert_eq!(code(&nested), Some(DenialCode::ModeNotAllowed.as_str()));
    let other_thread = std::thread::spawn(move || clone.run(|| mark("f16-thread".into())))
        .join()
        .unwrap();
    assert!(other_thread.is_err());
    assert!(!ran("f16-nested") && !ran("f16-thread"));
    drop(gate);
}

/// f17: a joined gate with the PostgreSQL sink; a call's `enter` commit is held up (table locked),
/// and the fleet is lowered to SHADOW meanwhile. Guarantee: the mode is read again as the last step
/// before the body: the call is refused with the lowered mode's code, its body never runs, and its
/// `enter` is closed by an `exit` of outcome `refused`.
#[test]
fn f17_fleet_lowered_while_the_enter_commit_is_pending() {
    let url = database("f17");
    let fleet = member_fleet(&url, "f17", 5000);
    let gate = fleet
        .join(Gate::builder().mode(Mode::PartialAuto).audit(sink(
            &url,
            "f17",
            Duration::from_secs(10),
        )))
        .unwrap();
    gate.run(|| mark("f17-warm".into())).unwrap();
    let held = Held::new(&url, "LOCK TABLE toolgate.audit IN EXCLUSIVE MODE");
    let g = gate.clone();
    let call = std::thread::spawn(move || g.run(|| mark("f17-held".into())));
    std::thread::sleep(Duration::from_millis(300));
    fleet::lower(&url, "toolgate", "f17", Mode::Shadow, "ana", "incident").unwrap();
    assert!(eventually(Duration::from_millis(1500), || gate.mode() == Mode::Shadow));
    drop(held);
    let result = call.join().unwrap();
    assert_eq!(
        code(&result),
        Some(DenialCode::ModeNotAllowed.as_str()),
        "{result:?}"
    );
    assert!(!ran("f17-held"));
    drop(gate);
    drop(fleet);
    let all = records(&url, "f17");
    let enter = all
        .iter()
        .find(|r| r.stage == Stage::Enter && tag_of(r).as_deref() == Some("f17-held"));
    if let Some(enter) = enter {
        let exit = all
            .iter()
            .find(|r| r.stage == Stage::Exit && r.gate == enter.gate && r.call == enter.call)
            .expect("its enter has an exit");
        assert_eq!(exit.outcome, Some(Outcome::Refused));
    }
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
}

/// f18: two operators lower the same fleet at once, to ADVISORY and to SHADOW. Guarantee: `lower`
/// never raises a fleet ("asking for a mode above the fleet's is refused"): whatever the interleaving,
/// the fleet ends at SHADOW, and its history ends with the mode it holds.
#[test]
fn f18_concurrent_lowers_never_leave_the_fleet_raised() {
    let url = database("f18");
    let fleet = member_fleet(&url, "f18", 1000);
    drop(fleet);
    let mut bad = Vec::new();
    for round in 0..25 {
        fleet::raise(&url, "toolgate", "f18", Mode::FullAuto, "ana", "reset").unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let threads: Vec<_> = [Mode::Advisory, Mode::Shadow]
            .into_iter()
            .map(|to| {
                let (url, barrier) = (url.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    fleet::lower(&url, "toolgate", "f18", to, "op", "race").map(|_| ())
                })
            })
            .collect();
        for t in threads {
            let _ = t.join().unwrap();
        }
        let status = fleet::status(&url, "toolgate", "f18").unwrap();
        let last = query(
            &url,
            "SELECT mode FROM toolgate.fleet_changes WHERE fleet = 'f18' ORDER BY id DESC LIMIT 1",
        )[0][0]
            .clone()
            .unwrap();
        if status.mode != Mode::Shadow || last != status.mode.to_string() {
            bad.push(format!(
                "round {round}: fleet {} history {last}",
                status.mode
            ));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// f19: a full-access attacker sets the fleet's row back to FULL_AUTO (and deletes it, so that it
/// would be created again at FULL_AUTO), and notifies the channel. Guarantee: a running gate's mode is
/// never raised by its fleet, whatever the row says.
#[test]
fn f19_fleet_row_raised_or_deleted_by_sql_does_not_raise_a_running_gate() {
    let url = database("f19");
    let fleet = member_fleet(&url, "f19", 1000);
    let gate = fleet.join(Gate::builder().mode(Mode::FullAuto)).unwrap();
    fleet::lower(&url, "toolgate", "f19", Mode::Advisory, "ana", "x").unwrap();
    assert!(eventually(Duration::from_millis(1500), || gate.mode()
        == Mode::Advisory));
    query(
        &url,
        "UPDATE toolgate.fleets SET mode = 'FULL_AUTO' WHERE name = 'f19'; NOTIFY toolgate_fleet, 'f19'",
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(gate.mode(), Mode::Advisory, "raised by an UPDATE");
    query(
        &url,
        "DELETE FROM toolgate.fleets WHERE name = 'f19'; NOTIFY toolgate_fleet, 'f19'",
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(gate.mode(), Mode::Advisory, "raised by a DELETE");
    assert!(gate.run(|| mark("f19-after".into())).is_err());
}

/// f20: two `Fleet` handles of the same fleet in one process (the same member name), each joining a
/// gate; the second handle is dropped. Guarantee ("Seen"): each joined gate is a row of
/// `fleet_members`: the first gate, still joined, stays listed by `status`, and still goes down with
/// the fleet.
#[test]
fn f20_second_fleet_handle_dropped_does_not_hide_the_first_ones_gate() {
    let url = database("f20");
    let first = member_fleet(&url, "f20", 1000);
    let kept = first.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    let second = member_fleet(&url, "f20", 1000);
    let other = second
        .join(Gate::builder().mode(Mode::PartialAuto))
        .unwrap();
    drop(other);
    drop(second);
    std::thread::sleep(Duration::from_millis(800));
    let status = fleet::status(&url, "toolgate", "f20").unwrap();
    assert!(
        status.members.iter().any(|m| m.gate == kept.id()),
        "a joined gate vanished from the fleet's members: {:?}",
        status
            .members
            .iter()
            .map(|m| (&m.member, m.gate))
            .collect::<Vec<_>>()
    );
    fleet::lower(&url, "toolgate", "f20", Mode::Shadow, "ana", "x").unwrap();
    assert!(eventually(Duration::from_millis(1500), || kept.mode() == Mode::Shadow));
    drop(kept);
    drop(first);
}

/// f21: a member that loses the fleet for longer than the grace period: `toolgate fleet status` must
/// show it as partitioned or SHADOW, never as a healthy PARTIAL_AUTO member heard from just now; and a
/// gate that joins while the fleet cannot be read is not started (`JoinError::Fleet`).
#[test]
fn f21_join_while_the_fleet_cannot_be_read_is_refused() {
    let url = database("f21");
    let proxy = Proxy::new(&url);
    let via = proxy.url(&url);
    let fleet = member_fleet(&via, "f21", 400);
    let first = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    proxy.cut();
    assert!(eventually(Duration::from_secs(4), || first.mode() == Mode::Shadow));
    let started = Instant::now();
    let joined = fleet.join(Gate::builder().mode(Mode::PartialAuto));
    let joined_mode = joined.as_ref().ok().map(Gate::mode);
    assert!(
        joined.is_err() || joined_mode == Some(Mode::Shadow),
        "a gate joined while the fleet was lost runs at {joined_mode:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "join hung");
    let status = fleet::status(&url, "toolgate", "f21").unwrap();
    for m in &status.members {
        if m.gate == first.id() {
            assert!(
                m.partitioned || m.mode == Mode::Shadow || m.last_contact_ms >= 400,
                "a lost member looks healthy: {:?} {:?} {}",
                m.mode,
                m.partitioned,
                m.last_contact_ms
            );
        }
    }
    proxy.heal();
}

/// f22: a sink blackholed mid-run (bytes dropped, no reset). Guarantee: the call is refused
/// `AUDIT_UNAVAILABLE` within about the sink's timeout, never hangs, never runs its body; after the
/// link heals the chain continues and verifies.
#[test]
fn f22_sink_behind_a_black_hole_refuses_in_time_and_continues() {
    let url = database("f22");
    let proxy = Proxy::new(&url);
    let gate = audited_gate(&proxy.url(&url), "f22", Duration::from_millis(500));
    gate.run(|| mark("f22-warm".into())).unwrap();
    proxy.cut();
    let (tx, rx) = mpsc::channel();
    let g = gate.clone();
    std::thread::spawn(move || {
        let started = Instant::now();
        let r = g.run(|| mark("f22-cut".into()));
        let _ = tx.send((r, started.elapsed()));
    });
    let (result, took) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a call hung behind a black-holed sink");
    assert_eq!(code(&result), Some(DenialCode::AuditUnavailable.as_str()));
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(!ran("f22-cut"));
    proxy.heal();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut oks = 0;
    let mut i = 0;
    while oks < 5 && Instant::now() < deadline {
        if gate.run(|| mark(format!("f22-after-{i}"))).is_ok() {
            oks += 1;
        }
        i += 1;
    }
    assert_eq!(oks, 5, "the sink never continued");
    drop(gate);
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
}

/// f23: an attacker with INSERT names a writer `"x\nINTACT: 9 writer(s), 0 broken\n"` (one broken
/// row), so that the text of `toolgate audit verify` holds a forged summary line. Guarantee asked: the
/// report's lines come from the verifier, not from the table; the exit status stays 1.
#[test]
fn f23_writer_name_cannot_forge_a_line_of_the_verify_report() {
    let url = database("f23");
    let gate = audited_gate(&url, "honest", Duration::from_secs(2));
    gate.run(|| mark("f23-0".into())).unwrap();
    drop(gate);
    let zeros = "0".repeat(64);
    query(
        &url,
        &format!(
            "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, line)
             VALUES (E'x\\nINTACT: 9 writer(s), 0 broken\\n', 1, '{zeros}', '{zeros}', 'enter',
                     'fa.mark', 1, 1, '{{}}')"
        ),
    );
    let cli = toolgate(&["audit", "verify", &url]);
    assert_eq!(cli.status.code(), Some(1), "{}", text(&cli));
    let forged: Vec<String> = String::from_utf8_lossy(&cli.stdout)
        .lines()
        .filter(|l| l.starts_with("INTACT"))
        .map(str::to_owned)
        .collect();
    assert!(
        forged.is_empty(),
        "a writer's name forged a line of the report: {forged:?}\n{}",
        text(&cli)
    );
}

/// f24: a call left without its `exit` (its future forgotten after its body started: the documented
/// way to leave an `enter` alone in a live process) is reported as interrupted; an attacker with UPDATE
/// then edits the `enter` row's `stage` column (or its `call` column) and leaves the line alone.
/// Guarantee: the trail is either reported as edited (not intact) or still reports the interrupted
/// call; the interruption cannot vanish from a trail that verifies.
#[test]
fn f24_column_edit_cannot_hide_an_interrupted_call() {
    let url = database("f24");
    let rt = runtime();
    let gate = audited_gate(&url, "f24", Duration::from_secs(2));
    {
        let _entered = rt.enter();
        let mut future = Box::pin(gate.scope(sleep_async("f24-leak".into())));
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ran("f24-leak") && Instant::now() < deadline {
            let _ = future.as_mut().poll(&mut cx);
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(ran("f24-leak"));
        std::mem::forget(future);
    }
    gate.run(|| mark("f24-after".into())).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let interrupted = &report.writer("f24").unwrap().interrupted;
    assert_eq!(interrupted.len(), 1, "{report}");
    let seq = interrupted[0].seq;
    let mut hidden = Vec::new();
    for (edit, restore) in [
        ("stage = 'exit'", "stage = 'enter'"),
        ("call = call + 1000", "call = call - 1000"),
        ("tool = 'fa.mark'", "tool = 'fa.sleep_async'"),
    ] {
        query(
            &url,
            &format!("UPDATE toolgate.audit SET {edit} WHERE writer = 'f24' AND seq = {seq}"),
        );
        let report = verify_trail(&url, "toolgate").unwrap();
        let w = report.writer("f24").unwrap();
        if w.is_intact() && w.interrupted.is_empty() {
            hidden.push(edit);
        }
        query(
            &url,
            &format!("UPDATE toolgate.audit SET {restore} WHERE writer = 'f24' AND seq = {seq}"),
        );
    }
    assert!(
        hidden.is_empty(),
        "an interrupted call vanished from a trail that verifies: {hidden:?}"
    );
}

/// f25: as f14, but the outage is the sink's backend terminated (`pg_terminate_backend`, a clean error
/// at once rather than a black hole) while the body runs. Guarantee: every `enter` gets its `exit`;
/// a process that did not die leaves no interrupted call.
#[test]
fn f25_exit_record_written_after_the_connection_was_terminated_is_not_lost() {
    let url = database("f25");
    let gate = audited_gate(&url, "f25", Duration::from_secs(2));
    gate.run(|| mark("f25-warm".into())).unwrap();
    let (go, wait) = mpsc::channel();
    // `wait_body` takes the channel from GO: f14 may use it too, so wait until it is free.
    assert!(eventually(Duration::from_secs(30), || GO
        .lock()
        .unwrap()
        .is_none()));
    *GO.lock().unwrap() = Some(wait);
    let g = gate.clone();
    let call = std::thread::spawn(move || g.run(|| wait_body("f25-body".into())));
    assert!(eventually(Duration::from_secs(5), || ran("f25-body")));
    query(
        &url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    );
    std::thread::sleep(Duration::from_millis(100));
    go.send(()).unwrap();
    assert!(call.join().unwrap().is_ok());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut oks = 0;
    let mut i = 0;
    while oks < 5 && Instant::now() < deadline {
        if gate.run(|| mark(format!("f25-after-{i}"))).is_ok() {
            oks += 1;
        }
        i += 1;
    }
    assert_eq!(oks, 5);
    drop(gate);
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let unpaired: Vec<Option<String>> = unpaired_enters(&url, "f25").iter().map(tag_of).collect();
    assert!(
        unpaired.is_empty(),
        "an exit record was lost with its connection; verify reports the call as interrupted: {unpaired:?}"
    );
}

// ---------------------------------------------------------------------------------------------------
// A killed process
// ---------------------------------------------------------------------------------------------------

const ROLE: &str = "TOOLGATE_ATTACK_CHILD";
const CHILD_URL: &str = "TOOLGATE_ATTACK_URL";

/// Hangs in its body, after telling the parent, until the process is killed.
#[tool(risk = "LOW_WRITE", domain = "fa")]
fn hang_forever() -> Result<(), Denied> {
    println!("hanging");
    std::thread::sleep(Duration::from_secs(3600));
    Ok(())
}

/// The child's part (run again by the parent with `ROLE` set); nothing to do otherwise.
#[test]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "hang");
    let url = std::env::var(CHILD_URL).unwrap();
    let gate = audited_gate(&url, "killed", Duration::from_secs(2));
    for i in 0..10 {
        gate.run(|| mark(format!("child-{i}"))).unwrap();
    }
    let _ = gate.run(hang_forever);
}

/// f26: a process writing as `killed` is SIGKILLed inside a body; a new process takes the same writer
/// name. Guarantee: the name is free once its holder is gone (the new sink continues the chain, no
/// fork), `verify` reports the killed call as interrupted, not as tampering, and the trail is intact.
#[test]
fn f26_a_killed_writer_is_interrupted_and_its_name_continues() {
    use std::io::BufRead;
    let url = database("f26");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "hang")
        .env(CHILD_URL, &url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let hanging = lines.any(|l| l.is_ok_and(|l| l.contains("hanging")));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(hanging, "the child never reached its body");
    let mut again = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while again.is_none() && Instant::now() < deadline {
        again = PostgresSink::builder().writer("killed").connect(&url).ok();
        if again.is_none() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(again.expect("the killed writer's name is free again"))
        .build()
        .unwrap();
    for i in 0..10 {
        gate.run(|| mark(format!("f26-again-{i}"))).unwrap();
    }
    drop(gate);
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let w = report.writer("killed").unwrap();
    assert_eq!(w.chain.records, 2 * 10 + 1 + 2 * 10, "{report}");
    assert_eq!(w.interrupted.len(), 1, "{report}");
    assert_eq!(w.interrupted[0].tool, "fa.hang_forever");
    let cli = toolgate(&["audit", "verify", &url]);
    assert_eq!(cli.status.code(), Some(0), "{}", text(&cli));
}

// ---------------------------------------------------------------------------------------------------
// More outages, and names as SQL
// ---------------------------------------------------------------------------------------------------

/// f27: an audited gate lowered by the application (`lower_by`) while its sink's link is a black
/// hole; the link heals. Guarantee: every lowering is an audit record (`mode_lowered`, by whom): a
/// lowering cannot be hidden by the outage it happened in.
#[test]
fn f27_a_lowering_during_an_outage_is_not_lost_from_the_trail() {
    let url = database("f27");
    let proxy = Proxy::new(&url);
    let gate = audited_gate(&proxy.url(&url), "f27", Duration::from_millis(500));
    gate.run(|| mark("f27-warm".into())).unwrap();
    proxy.cut();
    gate.lower_by(Mode::Advisory, "ana").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    proxy.heal();
    gate.lower_by(Mode::Shadow, "bob").unwrap();
    // A flush: dropping the sink waits for what is queued.
    drop(gate);
    let lowered: Vec<Mode> = records(&url, "f27")
        .iter()
        .filter(|r| r.stage == Stage::ModeLowered)
        .map(|r| r.mode)
        .collect();
    assert!(
        lowered.len() == 2,
        "mode_lowered records in the trail: {lowered:?} (two lowerings were made)"
    );
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
}

/// f28: four threads call through one sink (group commit) while its link is cut for a second and
/// healed. Guarantee: no body runs whose `enter` is not committed, every refusal is
/// `AUDIT_UNAVAILABLE`, and the chain verifies.
#[test]
fn f28_group_commit_under_a_black_hole_runs_no_body_unaudited() {
    let url = database("f28");
    let proxy = Proxy::new(&url);
    let gate = audited_gate(&proxy.url(&url), "f28", Duration::from_millis(400));
    let stop = Arc::new(AtomicBool::new(false));
    let codes = Arc::new(Mutex::new(HashSet::new()));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (gate, stop, codes) = (gate.clone(), stop.clone(), codes.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    if let Err(d) = gate.run(|| mark(format!("f28-{t}-{i}"))) {
                        codes.lock().unwrap().insert(d.code().as_str());
                    }
                    i += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    proxy.cut();
    std::thread::sleep(Duration::from_millis(1000));
    proxy.heal();
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    drop(gate);
    let codes = codes.lock().unwrap().clone();
    assert!(
        codes
            .iter()
            .all(|c| *c == DenialCode::AuditUnavailable.as_str()),
        "{codes:?}"
    );
    assert!(!codes.is_empty(), "the cut refused nothing");
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let entered: HashSet<String> = records(&url, "f28")
        .iter()
        .filter(|r| r.stage == Stage::Enter)
        .filter_map(tag_of)
        .collect();
    let ran_tags: Vec<String> = RAN
        .lock()
        .unwrap()
        .iter()
        .filter(|t| t.starts_with("f28-"))
        .cloned()
        .collect();
    assert!(ran_tags.len() > 10);
    let unaudited: Vec<&String> = ran_tags.iter().filter(|t| !entered.contains(*t)).collect();
    assert!(unaudited.is_empty(), "bodies ran unaudited: {unaudited:?}");
}

/// f29: a signed sink (a checkpoint every 3 records) whose commits time out behind a black hole, then
/// continue. Guarantee: a checkpoint is written only over committed records, so no outage makes an
/// intact trail look rewritten or cut: `verify --public-key` exits 0 after a clean shutdown.
#[test]
fn f29_signed_sink_through_an_outage_still_verifies_with_its_key() {
    let url = database("f29");
    let scratch = common::Scratch::new("f29");
    let proxy = Proxy::new(&url);
    let key = SigningKey::generate().unwrap();
    let file = scratch.path("f29.pub");
    std::fs::write(&file, key.public_key().to_public_key_pem()).unwrap();
    let checkpoints = Checkpoints::new(key).every_records(3);
    // The first connection creates the schema: on a loaded machine it may take longer than 400 ms.
    let connect = || {
        PostgresSink::builder()
            .writer("f29")
            .timeout(Duration::from_millis(400))
            .checkpoints(checkpoints.clone())
            .connect(&proxy.url(&url))
    };
    let sink = (0..9)
        .find_map(|_| {
            connect()
                .inspect_err(|_| std::thread::sleep(Duration::from_millis(200)))
                .ok()
        })
        .unwrap_or_else(|| connect().unwrap());
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .unwrap();
    for i in 0..10 {
        gate.run(|| mark(format!("f29-a{i}"))).unwrap();
    }
    proxy.cut();
    for i in 0..3 {
        let _ = gate.run(|| mark(format!("f29-b{i}")));
    }
    proxy.heal();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut oks = 0;
    let mut i = 0;
    while oks < 10 && Instant::now() < deadline {
        if gate.run(|| mark(format!("f29-c{i}"))).is_ok() {
            oks += 1;
        }
        i += 1;
    }
    assert_eq!(oks, 10);
    drop(gate);
    let (code, shown) = verify_cli(&url, &file);
    assert_eq!(code, Some(0), "{shown}");
}

/// f30: names as SQL: a writer name, a fleet name and a schema given to the public functions, each
/// holding a quote and a statement. Guarantee asked: names are data (bound or refused), never SQL: the
/// tables survive, the trail verifies, lowering the oddly named fleet lowers exactly it.
#[test]
fn f30_names_with_quotes_are_not_sql() {
    let url = database("f30");
    let evil = "x'); DROP TABLE toolgate.fleets; --";
    let gate = audited_gate(&url, evil, Duration::from_secs(2));
    gate.run(|| mark("f30-0".into())).unwrap();
    drop(gate);
    let fleet = member_fleet(&url, evil, 1000);
    let joined = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    fleet::lower(&url, "toolgate", evil, Mode::Shadow, "ana'--", "x'; --").unwrap();
    assert!(eventually(Duration::from_millis(1500), || joined.mode()
        == Mode::Shadow));
    for schema in [
        "toolgate.audit; DROP TABLE toolgate.fleets; --",
        "toolgate\"; DROP TABLE toolgate.fleets; --",
    ] {
        assert!(verify_trail(&url, schema).is_err(), "{schema}");
        assert!(fleet::status(&url, schema, evil).is_err(), "{schema}");
        assert!(fleet::lower(&url, schema, evil, Mode::Shadow, "a", "b").is_err());
    }
    let tables = query(
        &url,
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'toolgate'
         AND table_name IN ('fleets', 'audit', 'fleet_changes', 'fleet_members')",
    );
    assert_eq!(tables[0][0].as_deref(), Some("4"));
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    assert!(report.writer(evil).is_some(), "{report}");
    drop(joined);
    drop(fleet);
}

/// f31: f13 with a longer outage: the link stays cut for 2 s after the gate went to SHADOW, longer
/// than the sink's timeout (500 ms), so the group carrying `fleet_lost` times out rather than failing
/// on a closed connection. Guarantee: the partition is audited (`fleet_lost`, then `fleet_rejoined`)
/// whatever the outage looks like; it cannot be hidden.
#[test]
fn f31_a_long_partition_is_not_hidden_when_the_sink_shares_the_lost_server() {
    let url = database("f31");
    let proxy = Proxy::new(&url);
    let via = proxy.url(&url);
    let fleet = member_fleet(&via, "f31", 400);
    let gate = fleet
        .join(Gate::builder().mode(Mode::PartialAuto).audit(sink(
            &via,
            "f31",
            Duration::from_millis(500),
        )))
        .unwrap();
    gate.run(|| mark("f31-before".into())).unwrap();
    proxy.cut();
    assert!(eventually(Duration::from_secs(4), || gate.mode() == Mode::Shadow));
    std::thread::sleep(Duration::from_secs(2));
    proxy.heal();
    assert!(
        eventually(Duration::from_secs(8), || gate.mode() == Mode::PartialAuto),
        "never rejoined"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while gate.run(|| mark("f31-after".into())).is_err() && Instant::now() < deadline {}
    drop(gate);
    drop(fleet);
    let stages: Vec<Stage> = records(&url, "f31").iter().map(|r| r.stage).collect();
    let lost = stages.iter().position(|s| *s == Stage::FleetLost);
    let back = stages.iter().position(|s| *s == Stage::FleetRejoined);
    assert!(
        lost.is_some() && back.is_some() && lost < back,
        "the partition is missing from the trail: {stages:?}"
    );
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
}

// ---------------------------------------------------------------------------------------------------
// Fleet names, frozen servers and forged trail rows
// ---------------------------------------------------------------------------------------------------

/// f32: `toolgate fleet lower` given a misspelt fleet (`paymnets`) while the real one (`payments`) has
/// a FULL_AUTO member. Guarantee: an unknown fleet is an error (exit 1) that names the fleets there
/// are; no fleet is created by `lower` or `raise`, and the real fleet and its gate keep their mode.
#[test]
fn f32_lowering_a_misspelt_fleet_is_an_error_and_creates_nothing() {
    let url = database("f32");
    let fleet = member_fleet(&url, "payments", 5000);
    let gate = fleet.join(Gate::builder().mode(Mode::FullAuto)).unwrap();
    let typo = toolgate(&[
        "fleet", "lower", "--store", &url, "--fleet", "paymnets", "--to", "SHADOW", "--by", "ana",
        "--reason", "incident",
    ]);
    assert_eq!(typo.status.code(), Some(1), "{}", text(&typo));
    assert!(
        text(&typo).contains("paymnets") && text(&typo).contains("\"payments\""),
        "the error names neither the unknown fleet nor the fleets there are: {}",
        text(&typo)
    );
    assert!(
        !text(&typo).contains("every joined gate refuses"),
        "{}",
        text(&typo)
    );
    let raise = toolgate(&[
        "fleet", "raise", "--store", &url, "--fleet", "paymnets", "--to", "SHADOW", "--by", "ana",
        "--reason", "r",
    ]);
    assert_eq!(raise.status.code(), Some(1), "{}", text(&raise));
    assert!(fleet::lower(&url, "toolgate", "paymnets", Mode::Shadow, "ana", "x").is_err());
    let fleets = query(&url, "SELECT name FROM toolgate.fleets ORDER BY name");
    assert_eq!(
        fleets,
        vec![vec![Some("payments".to_owned())]],
        "a fleet was created"
    );
    assert_eq!(
        query(&url, "SELECT count(*) FROM toolgate.fleet_changes")[0][0].as_deref(),
        Some("0"),
        "a change was recorded for no fleet"
    );
    assert_eq!(
        fleet::status(&url, "toolgate", "payments").unwrap().mode,
        Mode::FullAuto
    );
    assert_eq!(gate.mode(), Mode::FullAuto);
    // The real name still lowers the real fleet.
    let lowered = toolgate(&[
        "fleet", "lower", "--store", &url, "--fleet", "payments", "--to", "SHADOW", "--by", "ana",
        "--reason", "incident",
    ]);
    assert_eq!(lowered.status.code(), Some(0), "{}", text(&lowered));
    assert!(eventually(Duration::from_secs(3), || gate.mode() == Mode::Shadow));
    drop(gate);
    drop(fleet);
}

static STAMPS: Mutex<Vec<Instant>> = Mutex::new(Vec::new());

/// Records when its body ran.
#[tool(risk = "LOW_WRITE", domain = "fa")]
fn stamp() -> Result<(), Denied> {
    STAMPS.lock().unwrap().push(Instant::now());
    Ok(())
}

/// Processes stopped with SIGSTOP (a server frozen, not gone), continued when dropped.
struct Frozen(Vec<u32>);

impl Frozen {
    /// Stops the postmaster, then every process it started (its backends and helpers).
    fn postmaster(pid: u32) -> Frozen {
        let mut frozen = Frozen(Vec::new());
        frozen.stop(pid);
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // `pid (comm) state ppid ...`: the parent comes after the last `)`.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            if parent == Some(pid) {
                frozen.stop(child);
            }
        }
        frozen
    }

    fn stop(&mut self, pid: u32) {
        let done = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(done.success(), "SIGSTOP {pid}");
        self.0.push(pid);
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for pid in self.0.iter().rev() {
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
    }
}

/// f33: the fleet's server frozen (SIGSTOP on the postmaster and its backends: connections stay open,
/// nothing answers) while a thread keeps calling through a joined gate; grace 1 s, statement timeout
/// 5 s. Guarantee: once the grace period has passed without a read, the gate is SHADOW: no body runs
/// later than the freeze plus the grace (plus a slack of 700 ms, generous for a loaded 2-core machine,
/// far below the 4 s by which a read bounded only by the timeout would overrun). The bound is checked
/// on the times the bodies record, and the gate comes back once the server runs again.
#[test]
fn f33_a_frozen_server_holds_the_gate_at_shadow_once_the_grace_has_passed() {
    let cluster = common::postgres::Cluster::new(&["fsync=off"]);
    let url = cluster.database("f33");
    let grace = Duration::from_secs(1);
    let fleet = Fleet::builder()
        .grace(grace)
        .poll_interval(Duration::from_millis(100))
        .timeout(Duration::from_secs(5))
        .connect(&url, "f33")
        .unwrap();
    let gate = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let caller = {
        let (gate, stop) = (gate.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let _ = gate.run(stamp);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    assert!(eventually(Duration::from_secs(5), || STAMPS
        .lock()
        .unwrap()
        .len()
        > 20));
    // The last read that can succeed is before this instant.
    let frozen_at = Instant::now();
    let frozen = Frozen::postmaster(cluster.postmaster_pid());
    let shadow = eventually(Duration::from_secs(8), || gate.mode() == Mode::Shadow);
    std::thread::sleep(Duration::from_secs(1));
    let thawed_at = Instant::now();
    drop(frozen);
    let slack = Duration::from_millis(700);
    let late: Vec<Duration> = STAMPS
        .lock()
        .unwrap()
        .iter()
        .filter(|at| **at > frozen_at + grace + slack && **at < thawed_at)
        .map(|at| at.duration_since(frozen_at))
        .collect();
    assert!(
        shadow,
        "the gate never went to SHADOW while its server was frozen"
    );
    assert!(
        late.is_empty(),
        "{} bodies ran after the grace period ({grace:?} + {slack:?} slack) with the server frozen, \
         from {:?} to {:?} after the freeze",
        late.len(),
        late.first(),
        late.last()
    );
    assert!(
        eventually(Duration::from_secs(15), || gate.mode() == Mode::PartialAuto),
        "the gate never came back"
    );
    stop.store(true, Ordering::SeqCst);
    caller.join().unwrap();
    drop(gate);
    drop(fleet);
}

/// Runs `sql` on `url`, the server's error as text rather than a panic.
fn try_query(url: &str, sql: &str) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        client.batch_execute(sql).await.map_err(|e| {
            e.as_db_error()
                .map_or(e.to_string(), |db| db.message().to_owned())
        })
    })
}

/// A second role for the trail, with the rights a sink's role has and no more: `SELECT` and `INSERT`
/// on the audit tables, and what a sink's connection needs to check the schema (its version, and the
/// rights to run its `CREATE ... IF NOT EXISTS`, which give none on the trail's tables). Its URL.
fn trail_role(url: &str, name: &str) -> String {
    let role = format!("{name}_{}", std::process::id());
    let database = url.rsplit('/').next().unwrap();
    query(
        url,
        &format!(
            "CREATE ROLE {role} LOGIN;
             GRANT CREATE ON DATABASE {database} TO {role};
             GRANT USAGE, CREATE ON SCHEMA toolgate TO {role};
             GRANT SELECT ON toolgate.schema_version TO {role};
             GRANT SELECT, INSERT ON toolgate.audit, toolgate.audit_checkpoints TO {role};"
        ),
    );
    url.replacen("toolgate@", &format!("{role}@"), 1)
}

/// Appends to `writer`'s chain, through `via`, a correctly hashed `enter` and `exit` of a
/// `fa.wire_money` call approved by `cfo` (copies of the writer's last two rows, edited and chained).
fn forge_wire_money(read: &str, via: &str, writer: &str) -> Result<(), String> {
    use sha2::{Digest, Sha256};
    let rows = query(
        read,
        &format!(
            "SELECT seq, hash, line FROM toolgate.audit WHERE writer = '{writer}'
             ORDER BY seq DESC LIMIT 2"
        ),
    );
    let mut seq: u64 = rows[0][0].as_deref().unwrap().parse().unwrap();
    let mut prev = rows[0][1].clone().unwrap();
    let mut sql = String::new();
    for (row, stage) in rows.iter().rev().zip(["enter", "exit"]) {
        let mut fields: std::collections::BTreeMap<String, serde_json::Value> =
            serde_json::from_str(row[2].as_deref().unwrap()).unwrap();
        seq += 1;
        fields.remove("hash");
        fields.insert("seq".into(), seq.into());
        fields.insert("prev_hash".into(), prev.clone().into());
        fields.insert("stage".into(), stage.into());
        fields.insert("tool".into(), "fa.wire_money".into());
        fields.insert("by".into(), "cfo".into());
        fields.insert("call".into(), 999_999.into());
        fields.insert(
            "arguments".into(),
            r#"{"amount":950000,"to":"attacker"}"#.into(),
        );
        let body = serde_json::to_string(&fields).unwrap();
        let hash: String = Sha256::new()
            .chain_update(prev.as_bytes())
            .chain_update(body.as_bytes())
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        fields.insert("hash".into(), hash.clone().into());
        let line = serde_json::to_string(&fields).unwrap().replace('\'', "''");
        let gate = fields["gate"].as_u64().unwrap();
        sql.push_str(&format!(
            "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, line)
             VALUES ('{writer}', {seq}, '{prev}', '{hash}', '{stage}', 'fa.wire_money', {gate}, 999999,
                 '{line}');"
        ));
        prev = hash;
    }
    try_query(via, &sql)
}

/// The key's file and the checkpoints that sign with it.
fn trail_key(scratch: &common::Scratch, name: &str) -> (std::path::PathBuf, Checkpoints) {
    let key = SigningKey::generate().unwrap();
    let file = scratch.path(&format!("{name}.pub"));
    std::fs::write(&file, key.public_key().to_public_key_pem()).unwrap();
    (file, Checkpoints::new(key).every_records(2))
}

/// The highest record of `writer` that one of its checkpoints covers.
fn signed_through(url: &str, writer: &str) -> u64 {
    query(
        url,
        &format!(
            "SELECT coalesce(max(head_seq), 0) FROM toolgate.audit_checkpoints WHERE writer = '{writer}'"
        ),
    )[0][0]
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

fn last_seq(url: &str, writer: &str) -> u64 {
    query(
        url,
        &format!("SELECT coalesce(max(seq), 0) FROM toolgate.audit WHERE writer = '{writer}'"),
    )[0][0]
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

/// A live signed writer `name` (a checkpoint every 2 records) through a gate that has run 5 calls,
/// their records all committed; the key's file.
fn live_signed_writer(
    scratch: &common::Scratch,
    url: &str,
    name: &str,
) -> (Gate, std::path::PathBuf) {
    let (key_file, checkpoints) = trail_key(scratch, name);
    let sink = PostgresSink::builder()
        .writer(name)
        .checkpoints(checkpoints)
        .timeout(Duration::from_secs(2))
        .connect(url)
        .unwrap();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .unwrap();
    for n in 0..5 {
        gate.run(|| mark(format!("{name}-{n}"))).unwrap();
    }
    assert!(eventually(Duration::from_secs(5), || {
        records(url, name)
            .iter()
            .filter(|r| r.stage == Stage::Exit)
            .count()
            == 5
    }));
    (gate, key_file)
}

/// f34: a live signed writer (`payments-1`); a second role with only `SELECT` and `INSERT` appends a
/// correctly hashed `enter` and `exit` of a `wire_money` approved by `cfo` to its chain, so that the
/// writer's next commit would fail and it would reload its chain from the table. Guarantee: a writer
/// name belongs to the role that first used it: the server refuses the rows, and the writer goes on.
#[test]
fn f34_another_role_cannot_append_to_a_live_writers_chain() {
    let scratch = common::Scratch::new("f34");
    let url = database("f34");
    let (gate, key_file) = live_signed_writer(&scratch, &url, "payments-1");
    let honest = last_seq(&url, "payments-1");
    let mallory = trail_role(&url, "f34_mallory");
    let forged = forge_wire_money(&url, &mallory, "payments-1");
    assert!(
        forged.is_err(),
        "a role with INSERT wrote rows under another role's writer name"
    );
    assert!(
        forged
            .as_ref()
            .unwrap_err()
            .contains("belongs to another role"),
        "{forged:?}"
    );
    assert_eq!(last_seq(&url, "payments-1"), honest);
    gate.run(|| mark("f34-after".into())).unwrap();
    drop(gate);
    let (code, shown) = verify_cli(&url, &key_file);
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        !shown.contains("wire_money") && !shown.contains("not covered"),
        "{shown}"
    );
}

/// f36: f34's rows written by the writer's own role (another process that shares it), which the
/// server cannot tell from the writer. The writer's next commit fails on them and it reloads its chain
/// from the table. Guarantee: a writer never adopts rows it cannot account for: it refuses every call
/// (`AUDIT_UNAVAILABLE`, saying why) rather than chain on them or sign them, so no checkpoint covers
/// them and `verify --public-key` reports them as not covered, never as signed.
#[test]
fn f36_rows_a_live_writer_did_not_write_are_never_signed() {
    let scratch = common::Scratch::new("f36");
    let url = database("f36");
    let (gate, key_file) = live_signed_writer(&scratch, &url, "payments-1");
    let honest = last_seq(&url, "payments-1");
    forge_wire_money(&url, &url, "payments-1").unwrap();
    let mut refused = Vec::new();
    for n in 0..5 {
        let result = gate.run(|| mark(format!("f36-after-{n}")));
        refused.push((code(&result), ran(&format!("f36-after-{n}"))));
    }
    let last_error = gate.run(|| mark("f36-last".into())).unwrap_err();
    drop(gate);
    let signed = signed_through(&url, "payments-1");
    assert!(
        signed > 0 && signed <= honest,
        "a checkpoint signed rows the writer did not write: through {signed}, its own end at {honest}"
    );
    assert!(
        refused
            .iter()
            .all(|(code, ran)| *code == Some("AUDIT_UNAVAILABLE") && !ran),
        "the writer went on after rows it did not write: {refused:?}"
    );
    assert!(
        last_error.to_string().contains("did not write"),
        "the refusal does not say why: {last_error}"
    );
    assert_eq!(last_seq(&url, "payments-1"), honest + 2);
    let (_, shown) = verify_cli(&url, &key_file);
    let uncovered = honest + 2 - signed;
    assert!(
        shown.contains(&format!("not covered: {uncovered} records")),
        "{shown}"
    );
}

/// f35: a signed writer (`ledger`) stops cleanly (final checkpoint). A sink without the key, on a
/// second role with only `SELECT` and `INSERT`, writes under its name; then the owner starts again
/// with its key. Guarantee: a writer name is bound to its role and its key at first use: a sink
/// without the key (on any role) or with another key is refused; rows appended after the owner's last
/// checkpoint anyway (by its own role, in SQL) are not adopted: the owner, restarted with its key,
/// refuses to continue the chain, and no checkpoint covers them.
#[test]
fn f35_a_keyless_sink_cannot_write_as_a_stopped_signed_writer_nor_be_signed_for() {
    let scratch = common::Scratch::new("f35");
    let url = database("f35");
    let (key_file, checkpoints) = trail_key(&scratch, "f35");
    let owner = |url: &str| {
        PostgresSink::builder()
            .writer("ledger")
            .checkpoints(checkpoints.clone())
            .connect(url)
    };
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(owner(&url).unwrap())
        .build()
        .unwrap();
    for n in 0..5 {
        gate.run(|| mark(format!("f35-{n}"))).unwrap();
    }
    drop(gate);
    let honest = last_seq(&url, "ledger");
    assert_eq!(signed_through(&url, "ledger"), honest);
    let mallory = trail_role(&url, "f35_mallory");
    let mut got_through = Vec::new();
    let keyless = |via: &str| PostgresSink::builder().writer("ledger").connect(via);
    if let Ok(sink) = keyless(&mallory) {
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(sink)
            .build()
            .unwrap();
        for n in 0..3 {
            let _ = gate.run(|| mark(format!("f35-mallory-{n}")));
        }
        got_through.push("a keyless sink on another role took the writer's name");
    }
    if keyless(&url).is_ok() {
        got_through.push("a keyless sink on the owner's role took the writer's name");
    }
    let (_, other_key) = trail_key(&scratch, "f35-other");
    let other = PostgresSink::builder()
        .writer("ledger")
        .checkpoints(other_key)
        .connect(&url);
    if other.is_ok() {
        got_through.push("a sink with another key took the writer's name");
    }
    drop(other);
    if last_seq(&url, "ledger") == honest {
        // Rows under its name anyway, from its own role.
        forge_wire_money(&url, &url, "ledger").unwrap();
    }
    match owner(&url) {
        Ok(sink) => {
            let gate = Gate::builder()
                .mode(Mode::PartialAuto)
                .audit(sink)
                .build()
                .unwrap();
            for n in 0..2 {
                let _ = gate.run(|| mark(format!("f35-owner-{n}")));
            }
            got_through.push("the owner continued a chain with rows it did not write");
        }
        Err(error) => assert!(
            error
                .to_string()
                .contains("not covered by its last checkpoint"),
            "{error}"
        ),
    }
    if signed_through(&url, "ledger") != honest {
        got_through.push("a checkpoint signed rows the owner did not write");
    }
    let (_, shown) = verify_cli(&url, &key_file);
    assert!(got_through.is_empty(), "{got_through:#?}\n{shown}");
    assert!(shown.contains("not covered: 2 records"), "{shown}");
}
