//! A fleet of processes against a real PostgreSQL server (a throwaway cluster, shared by the tests that
//! do not stop it, or the server `TOOLGATE_TEST_POSTGRES` names; the tests that stop the server have a
//! cluster of their own): the audit trail
//! in one table written by several processes at once, a writer killed with SIGKILL mid-call, the server
//! stopped in the middle of a run, `toolgate fleet lower` reaching every busy process, and a partition
//! longer than the grace period. The processes are this test binary, executed again in a child role.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::postgres::{Cluster, database, query};
use toolgate::audit::{AuditRecord, Checkpoints, JsonlSink, SigningKey, Stage};
use toolgate::postgres::fleet::{self, Fleet};
use toolgate::postgres::{PostgresSink, verify_trail};
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

const ROLE: &str = "TOOLGATE_FLEET_CHILD";
const URL: &str = "TOOLGATE_FLEET_URL";
const THREADS: &str = "TOOLGATE_FLEET_THREADS";
const CALLS: &str = "TOOLGATE_FLEET_CALLS";
const HANG_AFTER: &str = "TOOLGATE_FLEET_HANG_AFTER";
const FLEET: &str = "TOOLGATE_FLEET_NAME";
const GRACE_MS: &str = "TOOLGATE_FLEET_GRACE_MS";
const STOP_FILE: &str = "TOOLGATE_FLEET_STOP";
const AUDIT_FILE: &str = "TOOLGATE_FLEET_AUDIT";

static WORKED: AtomicU64 = AtomicU64::new(0);

/// Change something small: one unit of work of a writer.
#[tool(risk = "LOW_WRITE", domain = "fleet")]
fn work(n: u64) -> Result<u64, Denied> {
    WORKED.fetch_add(1, Ordering::Relaxed);
    Ok(n)
}

/// Hang inside the body, after telling the parent, until the process is killed.
#[tool(risk = "LOW_WRITE", domain = "fleet")]
fn hang() -> Result<(), Denied> {
    println!("hanging");
    std::thread::sleep(Duration::from_secs(3600));
    Ok(())
}

static COUNTED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Count a number, recording its arguments, so that the log shows which bodies ran.
#[tool(risk = "LOW_WRITE", domain = "fleet", record_arguments)]
fn count(n: u64) -> Result<(), Denied> {
    COUNTED.lock().unwrap().push(n);
    Ok(())
}

/// Count asynchronously.
#[tool(risk = "LOW_WRITE", domain = "fleet")]
async fn count_async(n: u64) -> Result<u64, Denied> {
    tokio::task::yield_now().await;
    Ok(n)
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set for a child"))
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| v.parse().expect("a number"))
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The child's part, when the parent executes this binary again with [`ROLE`] set to run only this
/// test; without it, there is nothing to do.
#[test]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    match role.as_str() {
        "writer" => writer(),
        "member" => member(),
        other => panic!("no child role {other}"),
    }
}

/// A process writing into the audit table: `THREADS` threads, `CALLS` calls each.
fn writer() {
    let sink = PostgresSink::connect(&env(URL)).expect("the sink connects");
    println!("writer {}", sink.writer());
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .expect("a gate");
    let threads = env_u64(THREADS, 8);
    let calls = env_u64(CALLS, 100);
    let hang_after = std::env::var(HANG_AFTER)
        .ok()
        .map(|v| v.parse::<u64>().unwrap());
    let ran = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (gate, ran) = (&gate, &ran);
            scope.spawn(move || {
                for i in 0..calls {
                    if t == 0 && Some(i) == hang_after {
                        let _ = gate.run(hang);
                    }
                    if gate.run(|| work(i)).is_ok() {
                        ran.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    println!("done {}", ran.load(Ordering::Relaxed));
}

/// A process joined to a fleet: `THREADS` threads call `work` until the stop file exists; a monitor
/// prints every change of the gate's mode with its time. Prints, at the end, the calls that ran after
/// the gate was first seen refusing (there must be none) and after it went down.
fn member() {
    let grace = Duration::from_millis(env_u64(GRACE_MS, 30_000));
    let fleet = Fleet::builder()
        .grace(grace)
        .poll_interval(Duration::from_millis(100).min(grace / 2))
        .connect(&env(URL), &env(FLEET))
        .expect("the fleet");
    let mut builder = Gate::builder().mode(Mode::PartialAuto).agent("member");
    if let Ok(path) = std::env::var(AUDIT_FILE) {
        builder = builder.audit(JsonlSink::open(path).expect("the audit log"));
    }
    let gate = fleet.join(builder).expect("joined");
    let stop_file = PathBuf::from(env(STOP_FILE));
    println!("ready {}", gate.mode());
    let stopped = AtomicBool::new(false);
    // The time each thread first saw a refusal; a call started after it must not run.
    let first_refusal = AtomicU64::new(u64::MAX);
    let ran_after_refusal = AtomicU64::new(0);
    let threads = env_u64(THREADS, 4);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (gate, stopped, first_refusal, ran_after_refusal) =
                (&gate, &stopped, &first_refusal, &ran_after_refusal);
            scope.spawn(move || {
                let mut i = 0;
                while !stopped.load(Ordering::Relaxed) {
                    let started = now_nanos();
                    match gate.run(|| work(i)) {
                        Ok(_) if started > first_refusal.load(Ordering::SeqCst) => {
                            ran_after_refusal.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                        Err(denied) if denied.code() == "MODE_NOT_ALLOWED" => {
                            first_refusal.fetch_min(now_nanos(), Ordering::SeqCst);
                        }
                        Err(denied) => panic!("unexpected refusal: {denied}"),
                    }
                    i += 1;
                }
            });
        }
        let mut seen = gate.mode();
        while !stop_file.exists() {
            let mode = gate.mode();
            if mode != seen {
                println!("mode {mode} {}", now_nanos());
                seen = mode;
            }
            // Once back from a partition the first refusal is history: runs are expected again.
            if mode == Mode::PartialAuto {
                first_refusal.store(u64::MAX, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        stopped.store(true, Ordering::Relaxed);
    });
    println!(
        "result ran_after_refusal={}",
        ran_after_refusal.load(Ordering::Relaxed)
    );
    drop(gate);
    drop(fleet);
}

/// How long a child may take to print the next line a test waits for: a child that hangs fails the test
/// instead of holding the run (and its audit log growing) until the CI's limit.
const LINE_TIMEOUT: Duration = Duration::from_secs(120);

struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    fn spawn(role: &str, url: &str, vars: &[(&str, String)]) -> Proc {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "--exact",
                "child_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role)
            .env(URL, url)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, value) in vars {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("a child process");
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Proc { child, lines }
    }

    /// The rest of the next line that has `prefix`.
    fn expect(&mut self, prefix: &str) -> String {
        loop {
            let line = match self.lines.recv_timeout(LINE_TIMEOUT) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("the child printed no {prefix:?} within {LINE_TIMEOUT:?}")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("the child ended before printing {prefix:?}")
                }
            };
            // The harness's own `test child_process ... ` may stand before the first line printed.
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_owned();
            }
        }
    }

    fn wait(mut self) {
        loop {
            match self.lines.recv_timeout(LINE_TIMEOUT) {
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("the child did not end within {LINE_TIMEOUT:?}")
                }
            }
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the child failed: {status}");
    }
}

impl Drop for Proc {
    /// A test that fails leaves no child running: members only stop when told.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
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

fn count_stage(url: &str, writer: &str, stage: &str) -> u64 {
    query(
        url,
        &format!(
            "SELECT count(*) FROM toolgate.audit WHERE writer = '{writer}' AND stage = '{stage}'"
        ),
    )[0][0]
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn four_processes_write_one_trail_each_chain_verifies() {
    let url = database("trail");
    let threads = 8;
    let calls = env_u64("TOOLGATE_PG_CALLS", 10_000);
    let started = Instant::now();
    let procs: Vec<Proc> = (0..4)
        .map(|_| {
            Proc::spawn(
                "writer",
                &url,
                &[(THREADS, threads.to_string()), (CALLS, calls.to_string())],
            )
        })
        .collect();
    let mut writers = Vec::new();
    for mut proc in procs {
        writers.push(proc.expect("writer "));
        assert_eq!(proc.expect("done "), (threads * calls).to_string());
        proc.wait();
    }
    let took = started.elapsed();
    let report = verify_trail(&url, "toolgate").expect("the trail reads");
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.writers.len(), 4);
    for writer in &writers {
        let chain = &report.writer(writer).expect("its chain").chain;
        assert_eq!(chain.records, 2 * threads * calls, "{writer}");
        assert_eq!(count_stage(&url, writer, "enter"), threads * calls);
        assert_eq!(count_stage(&url, writer, "exit"), threads * calls);
        assert!(report.writer(writer).unwrap().interrupted.is_empty());
    }
    eprintln!(
        "4 processes x {threads} threads x {calls} calls: {} records in {:.1} s",
        8 * threads * calls,
        took.as_secs_f64()
    );
    let verified = toolgate(&["audit", "verify", &url]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
    assert!(text(&verified).starts_with("INTACT: 4 writer(s), 0 broken"));

    // A record changed in place, its hashes recomputed in its own row: the next row's prev_hash breaks.
    let writer = &writers[1];
    query(
        &url,
        &format!(
            "UPDATE toolgate.audit SET line = replace(line, '\"tool\":\"fleet.work\"', '\"tool\":\"fleet.wore\"')
             WHERE writer = '{writer}' AND seq = 10"
        ),
    );
    let tampered = toolgate(&["audit", "verify", &url]);
    assert_eq!(tampered.status.code(), Some(1), "{}", text(&tampered));
    assert!(
        text(&tampered).contains("BROKEN: 4 writer(s), 1 broken"),
        "{}",
        text(&tampered)
    );
    assert!(text(&tampered).contains("seq 10"), "{}", text(&tampered));
}

#[test]
fn a_writer_killed_mid_call_is_interrupted_not_tampered() {
    let url = database("killed");
    // One thread: when it hangs, no other call of its process is in flight.
    let mut doomed = Proc::spawn(
        "writer",
        &url,
        &[
            (THREADS, "1".into()),
            (CALLS, "300".into()),
            (HANG_AFTER, "100".into()),
        ],
    );
    let other = Proc::spawn(
        "writer",
        &url,
        &[(THREADS, "4".into()), (CALLS, "300".into())],
    );
    let doomed_name = doomed.expect("writer ");
    doomed.expect("hanging");
    // SIGKILL: no destructor, no flush, no exit record.
    doomed.child.kill().unwrap();
    doomed.child.wait().unwrap();
    let mut other = other;
    let other_name = other.expect("writer ");
    other.expect("done ");
    other.wait();

    let report = verify_trail(&url, "toolgate").expect("the trail reads");
    assert!(report.is_intact(), "{report}");
    let doomed_report = report.writer(&doomed_name).unwrap();
    assert_eq!(doomed_report.interrupted.len(), 1, "{report}");
    assert_eq!(doomed_report.interrupted[0].tool, "fleet.hang");
    let other_report = report.writer(&other_name).unwrap();
    assert!(other_report.interrupted.is_empty(), "{report}");
    assert_eq!(other_report.chain.records, 2 * 4 * 300);

    let verified = toolgate(&["audit", "verify", &url]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
    assert!(
        text(&verified).contains("interrupted: call") && text(&verified).contains("fleet.hang"),
        "{}",
        text(&verified)
    );
    let promotion = toolgate(&["audit", "promotion", &url]);
    assert_eq!(promotion.status.code(), Some(0), "{}", text(&promotion));
    assert!(
        text(&promotion).contains("PARTIAL_AUTO"),
        "{}",
        text(&promotion)
    );
}

#[test]
fn a_stopped_server_refuses_calls_and_the_chain_continues_after_it() {
    let cluster = Cluster::new(&[]);
    let url = cluster.database("stopped");
    let sink = PostgresSink::builder()
        .writer("stopped-run")
        .timeout(Duration::from_secs(1))
        .connect(&url)
        .expect("the sink");
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .unwrap();
    let mut results = Vec::new();
    let mut n = 0;
    let mut call = |results: &mut Vec<Result<(), Denied>>| {
        results.push(gate.run(|| count(n)));
        n += 1;
    };
    for _ in 0..50 {
        call(&mut results);
    }
    cluster.stop();
    for _ in 0..5 {
        call(&mut results);
    }
    cluster.start();
    // The first calls after the restart may still find the old connection broken.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        call(&mut results);
        if results.last().unwrap().is_ok() || Instant::now() > deadline {
            break;
        }
    }
    for _ in 0..50 {
        call(&mut results);
    }
    drop(gate);

    let refused: Vec<&Denied> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(refused.len() >= 5, "the calls while stopped were refused");
    assert!(
        refused
            .iter()
            .all(|d| d.code() == DenialCode::AuditUnavailable.as_str()),
        "{refused:?}"
    );
    assert!(results[..50].iter().all(Result::is_ok));
    assert!(results[results.len() - 50..].iter().all(Result::is_ok));

    let report = verify_trail(&url, "toolgate").expect("the trail reads");
    assert!(report.is_intact(), "{report}");
    let chain = &report.writer("stopped-run").unwrap().chain;
    // Every body that ran has its enter record: none ran unaudited, none committed was lost.
    let lines = query(
        &url,
        "SELECT line FROM toolgate.audit WHERE writer = 'stopped-run' AND stage = 'enter'",
    );
    let entered: Vec<u64> = lines
        .iter()
        .map(|row| {
            let record: AuditRecord = serde_json::from_str(row[0].as_deref().unwrap()).unwrap();
            let arguments: serde_json::Value =
                serde_json::from_str(record.arguments.as_deref().unwrap()).unwrap();
            arguments["n"].as_u64().unwrap()
        })
        .collect();
    let counted = COUNTED.lock().unwrap().clone();
    assert_eq!(counted.len(), results.iter().filter(|r| r.is_ok()).count());
    for n in &counted {
        assert!(entered.contains(n), "call {n} ran without its enter record");
    }
    assert!(chain.records >= 2 * counted.len() as u64);
}

#[test]
fn async_calls_share_commits_on_a_small_runtime() {
    let url = database("grouped");
    let sink = PostgresSink::builder()
        .writer("async")
        .connect(&url)
        .expect("the sink");
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .unwrap();
    let commits = || -> u64 {
        query(
            &url,
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
        )[0][0]
            .as_deref()
            .unwrap()
            .parse()
            .unwrap()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = commits();
    let calls = 256u64;
    let results = runtime.block_on(async {
        let tasks: Vec<_> = (0..calls)
            .map(|n| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.scope(count_async(n)).await })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        results
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    drop(gate);
    // Statistics reach pg_stat_database a little after the commits.
    std::thread::sleep(Duration::from_millis(1500));
    let used = commits() - before;
    let report = verify_trail(&url, "toolgate").unwrap();
    assert_eq!(report.writer("async").unwrap().chain.records, 2 * calls);
    assert!(
        used < calls,
        "{calls} enter records were committed in {used} transactions: no group commit"
    );
}

#[test]
fn fleet_lower_reaches_every_busy_process_and_never_raises_a_running_gate() {
    let url = database("fleet");
    let scratch = common::Scratch::new("fleet-lower");
    let stop = scratch.path("stop");
    let mut procs: Vec<Proc> = (0..4)
        .map(|_| {
            Proc::spawn(
                "member",
                &url,
                &[
                    (FLEET, "payments".into()),
                    (STOP_FILE, stop.display().to_string()),
                ],
            )
        })
        .collect();
    for proc in &mut procs {
        assert_eq!(proc.expect("ready"), "PARTIAL_AUTO");
    }
    let status = toolgate(&["fleet", "status", "--store", &url, "--fleet", "payments"]);
    assert_eq!(status.status.code(), Some(0), "{}", text(&status));
    assert_eq!(
        text(&status).matches("PARTIAL_AUTO").count(),
        4,
        "{}",
        text(&status)
    );

    std::thread::sleep(Duration::from_millis(300));
    let lowered_at = now_nanos();
    let lowered = toolgate(&[
        "fleet",
        "lower",
        "--store",
        &url,
        "--fleet",
        "payments",
        "--to",
        "SHADOW",
        "--by",
        "ana",
        "--reason",
        "incident 42",
    ]);
    assert_eq!(lowered.status.code(), Some(0), "{}", text(&lowered));
    let mut slowest = 0u64;
    for proc in &mut procs {
        let line = proc.expect("mode ");
        let (mode, at) = line.split_once(' ').unwrap();
        assert_eq!(mode, "SHADOW");
        slowest = slowest.max(at.parse::<u64>().unwrap().saturating_sub(lowered_at));
    }
    eprintln!(
        "fleet lower: the last of 4 busy processes refused {:.1} ms after the command started",
        slowest as f64 / 1e6
    );

    // A raise through `lower` is refused and changes nothing.
    let raise = toolgate(&[
        "fleet",
        "lower",
        "--store",
        &url,
        "--fleet",
        "payments",
        "--to",
        "PARTIAL_AUTO",
        "--by",
        "ana",
        "--reason",
        "r",
    ]);
    assert_eq!(raise.status.code(), Some(1), "{}", text(&raise));
    assert!(text(&raise).contains("use raise"), "{}", text(&raise));

    // Raising the fleet does not raise a running gate; a gate joined after it starts under it.
    let raised = toolgate(&[
        "fleet",
        "raise",
        "--store",
        &url,
        "--fleet",
        "payments",
        "--to",
        "FULL_AUTO",
        "--by",
        "ana",
        "--reason",
        "resolved",
    ]);
    assert_eq!(raised.status.code(), Some(0), "{}", text(&raised));
    let fleet = Fleet::connect(&url, "payments").unwrap();
    let fresh = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    assert_eq!(fresh.mode(), Mode::PartialAuto);
    std::thread::sleep(Duration::from_millis(500));
    let status = toolgate(&["fleet", "status", "--store", &url, "--fleet", "payments"]);
    let shown = text(&status);
    assert!(
        shown.starts_with("fleet payments: FULL_AUTO (set by ana"),
        "{shown}"
    );
    assert_eq!(shown.matches("\tSHADOW\t").count(), 4, "{shown}");
    assert_eq!(shown.matches("\tPARTIAL_AUTO\t").count(), 1, "{shown}");

    std::fs::write(&stop, "").unwrap();
    for mut proc in procs {
        assert_eq!(proc.expect("result "), "ran_after_refusal=0");
        proc.wait();
    }
    // Every lowering is in the fleet's history.
    let changes = query(
        &url,
        "SELECT mode, changed_by, reason FROM toolgate.fleet_changes ORDER BY id",
    );
    assert_eq!(
        changes,
        [
            ["SHADOW", "ana", "incident 42"]
                .map(|v| Some(v.to_owned()))
                .to_vec(),
            ["FULL_AUTO", "ana", "resolved"]
                .map(|v| Some(v.to_owned()))
                .to_vec(),
        ]
    );
    drop(fresh);
    drop(fleet);
    // Processes that left are gone from the members.
    let left = query(&url, "SELECT count(*) FROM toolgate.fleet_members");
    assert_eq!(left[0][0].as_deref(), Some("0"));
}

#[test]
fn a_partition_longer_than_the_grace_period_holds_every_process_at_shadow() {
    let cluster = Cluster::new(&["fsync=off"]);
    let url = cluster.database("partition");
    let scratch = common::Scratch::new("fleet-partition");
    let stop = scratch.path("stop");
    let logs: Vec<PathBuf> = (0..2)
        .map(|i| scratch.path(&format!("audit-{i}.jsonl")))
        .collect();
    let mut procs: Vec<Proc> = logs
        .iter()
        .map(|log| {
            Proc::spawn(
                "member",
                &url,
                &[
                    (FLEET, "ops".into()),
                    (GRACE_MS, "1000".into()),
                    (THREADS, "2".into()),
                    (STOP_FILE, stop.display().to_string()),
                    (AUDIT_FILE, log.display().to_string()),
                ],
            )
        })
        .collect();
    for proc in &mut procs {
        assert_eq!(proc.expect("ready"), "PARTIAL_AUTO");
    }
    cluster.stop();
    for proc in &mut procs {
        assert!(proc.expect("mode ").starts_with("SHADOW "));
    }
    cluster.start();
    for proc in &mut procs {
        assert!(proc.expect("mode ").starts_with("PARTIAL_AUTO "));
    }
    std::fs::write(&stop, "").unwrap();
    for mut proc in procs {
        // Calls run again once the fleet is back: what ran while it was lost is read from the log.
        proc.expect("result ");
        proc.wait();
    }
    for log in &logs {
        let text = std::fs::read_to_string(log).unwrap();
        let records: Vec<AuditRecord> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let lost = records
            .iter()
            .position(|r| r.stage == Stage::FleetLost)
            .expect("the partition is audited");
        assert_eq!(records[lost].mode, Mode::Shadow);
        assert!(
            records[lost]
                .message
                .as_deref()
                .unwrap()
                .contains("not reached"),
            "{:?}",
            records[lost]
        );
        let back = records
            .iter()
            .position(|r| r.stage == Stage::FleetRejoined)
            .expect("the return is audited");
        assert!(back > lost);
        assert_eq!(records[back].mode, Mode::PartialAuto);
        // While cut off, no body ran: a call entered as the fleet was lost was refused at its last
        // re-check, before its body (its exit says so).
        for enter in records[lost..back]
            .iter()
            .filter(|r| r.stage == Stage::Enter)
        {
            let exit = records
                .iter()
                .find(|r| r.stage == Stage::Exit && r.gate == enter.gate && r.call == enter.call)
                .expect("every enter has its exit");
            assert_eq!(
                exit.outcome,
                Some(toolgate::audit::Outcome::Refused),
                "a call ran while the fleet was lost: {enter:?}"
            );
        }
        assert!(toolgate::audit::verify_file(log).unwrap().is_intact());
    }
}

#[test]
fn fleet_settings_and_changes_are_checked() {
    let url = database("settings");
    for grace in [Duration::ZERO, Duration::from_secs(31)] {
        let refused = Fleet::builder()
            .grace(grace)
            .connect(&url, "f")
            .unwrap_err();
        assert!(refused.to_string().contains("grace period"), "{refused}");
    }
    assert!(Fleet::connect(&url, " ").is_err());
    assert!(fleet::lower(&url, "toolgate", "f", Mode::Shadow, "", "why").is_err());
    assert!(fleet::lower(&url, "toolgate", "f", Mode::Shadow, "ana", " ").is_err());
    let unknown = toolgate(&["fleet", "status", "--store", &url, "--fleet", "nope"]);
    assert_eq!(unknown.status.code(), Some(1), "{}", text(&unknown));
    let no_fleet = toolgate(&["fleet", "status", "--store", &url]);
    assert_eq!(no_fleet.status.code(), Some(64), "{}", text(&no_fleet));
    // A second sink with the same writer name is refused: one chain, one writer.
    let first = PostgresSink::builder().writer("w").connect(&url).unwrap();
    let second = PostgresSink::builder()
        .writer("w")
        .connect(&url)
        .unwrap_err();
    assert!(
        second.to_string().contains("another sink writes"),
        "{second}"
    );
    drop(first);
    let again = PostgresSink::builder().writer("w").connect(&url);
    assert!(
        again.is_ok(),
        "the name is free again once its sink is dropped"
    );
}

/// Two writers with signed checkpoints (every 10 records, and final), in a database of their own; the
/// public key's file.
fn signed_trail(name: &str, scratch: &common::Scratch) -> (String, PathBuf) {
    let url = database(name);
    let key = SigningKey::generate().unwrap();
    let public = scratch.path(&format!("{name}.pub"));
    std::fs::write(&public, key.public_key().to_public_key_pem()).unwrap();
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
            gate.run(|| work(n)).unwrap();
        }
    }
    (url, public)
}

fn verify_signed(url: &str, public: &std::path::Path) -> (Option<i32>, String) {
    let output = toolgate(&[
        "audit",
        "verify",
        url,
        "--public-key",
        public.to_str().unwrap(),
    ]);
    (output.status.code(), text(&output))
}

/// What an attacker without the key does to writer `a`'s chain: changes record `seq`'s `call` and
/// recomputes every hash from it on with the public format (`sha256(prev_hash ‖ line without hash)`),
/// columns included.
fn rewrite_with_recomputed_hashes(url: &str, seq: u64) {
    use sha2::{Digest, Sha256};
    let rows = query(
        url,
        "SELECT seq, line FROM toolgate.audit WHERE writer = 'a' ORDER BY seq",
    );
    let mut prev = "0".repeat(64);
    for row in rows {
        let at: u64 = row[0].as_deref().unwrap().parse().unwrap();
        let mut fields: std::collections::BTreeMap<String, serde_json::Value> =
            serde_json::from_str(row[1].as_deref().unwrap()).unwrap();
        if at == seq {
            fields.insert("call".into(), 999_999.into());
        }
        fields.remove("hash");
        fields.insert("prev_hash".into(), prev.clone().into());
        let body = serde_json::to_string(&fields).unwrap();
        let hash: String = Sha256::new()
            .chain_update(prev.as_bytes())
            .chain_update(body.as_bytes())
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        fields.insert("hash".into(), hash.clone().into());
        let call = &fields["call"];
        let line = serde_json::to_string(&fields).unwrap().replace('\'', "''");
        query(
            url,
            &format!(
                "UPDATE toolgate.audit SET line = '{line}', prev_hash = '{prev}', hash = '{hash}',
                     call = {call}
                 WHERE writer = 'a' AND seq = {at}"
            ),
        );
        prev = hash;
    }
}

#[test]
fn a_signed_trail_shows_a_rewrite_a_cut_and_a_swapped_checkpoint() {
    let scratch = common::Scratch::new("signed-trail");

    let (url, public) = signed_trail("signed", &scratch);
    let (code, shown) = verify_signed(&url, &public);
    assert_eq!(code, Some(0), "{shown}");
    // 100 records each: a checkpoint once 10 more are committed, and a final one over the last.
    let checkpoints = query(
        &url,
        "SELECT writer, count(*), count(*) FILTER (WHERE checkpoint LIKE '%\"final\":true%'),
             max(head_seq)
         FROM toolgate.audit_checkpoints GROUP BY writer ORDER BY writer",
    );
    for (row, writer) in checkpoints.iter().zip(["a", "b"]) {
        let row: Vec<&str> = row.iter().map(|v| v.as_deref().unwrap()).collect();
        assert_eq!(row[0], writer);
        assert!(row[1].parse::<u32>().unwrap() >= 9, "{row:?}");
        assert_eq!(row[2..], ["1", "100"], "{row:?}");
    }

    // A record changed, every hash after it recomputed: the chain verifies, the checkpoints do not.
    rewrite_with_recomputed_hashes(&url, 25);
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
    let (code, shown) = verify_signed(&url, &public);
    assert_eq!(code, Some(6), "a rewritten chain: {shown}");

    // Records cut from the end, before the last checkpoint.
    let (url, public) = signed_trail("cut", &scratch);
    query(
        &url,
        "DELETE FROM toolgate.audit WHERE writer = 'a' AND seq > 55",
    );
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
    let (code, shown) = verify_signed(&url, &public);
    assert_eq!(code, Some(7), "a chain cut short: {shown}");

    // A checkpoint of writer b put in the place of writer a's: signed, but not a's.
    let (url, public) = signed_trail("swapped", &scratch);
    query(
        &url,
        "UPDATE toolgate.audit_checkpoints SET checkpoint =
             (SELECT checkpoint FROM toolgate.audit_checkpoints WHERE writer = 'b' AND seq = 3)
         WHERE writer = 'a' AND seq = 3",
    );
    let (code, shown) = verify_signed(&url, &public);
    assert_eq!(code, Some(5), "a swapped checkpoint: {shown}");
    // Named as such, or, where b's checkpoint 3 covers another head than a's row says, as an edited row.
    assert!(
        shown.contains("names another writer (b)") || shown.contains("the row was edited"),
        "{shown}"
    );

    // A writer whose records are gone but whose checkpoints remain.
    let (url, public) = signed_trail("gone", &scratch);
    query(&url, "DELETE FROM toolgate.audit WHERE writer = 'b'");
    let (code, shown) = verify_signed(&url, &public);
    assert_eq!(code, Some(7), "a writer deleted whole: {shown}");

    // Another key's signatures.
    let (url, _) = signed_trail("otherkey", &scratch);
    let (code, shown) = verify_signed(&url, &public);
    assert_eq!(code, Some(5), "the wrong key: {shown}");
}

#[test]
fn a_signed_sink_continues_its_series_and_refuses_a_forged_one() {
    let url = database("continued");
    let scratch = common::Scratch::new("signed-continued");
    let key = SigningKey::generate().unwrap();
    let public = scratch.path("key.pub");
    std::fs::write(&public, key.public_key().to_public_key_pem()).unwrap();
    let checkpoints = Checkpoints::new(key).every_records(7);
    for round in 0..3 {
        let sink = PostgresSink::builder()
            .writer("w")
            .checkpoints(checkpoints.clone())
            .connect(&url)
            .unwrap();
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(sink)
            .build()
            .unwrap();
        for n in 0..20 {
            gate.run(|| work(round * 100 + n)).unwrap();
        }
    }
    let (code, shown) = verify_signed(&url, &public);
    assert_eq!(code, Some(0), "three sinks, one series: {shown}");

    // The last checkpoint forged (its head changed): a new sink refuses to continue the series.
    query(
        &url,
        "UPDATE toolgate.audit_checkpoints SET checkpoint = replace(checkpoint, '\"final\":true', '\"final\":false')
         WHERE writer = 'w' AND seq = (SELECT max(seq) FROM toolgate.audit_checkpoints)",
    );
    let refused = PostgresSink::builder()
        .writer("w")
        .checkpoints(checkpoints)
        .connect(&url)
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("last checkpoint of writer \"w\""),
        "{refused}"
    );
}

/// Characters that hide, fake or reorder text on a terminal.
const HIDDEN: [char; 14] = [
    '\u{202e}',
    '\u{2066}',
    '\u{1b}',
    '\u{9b}',
    '\u{200b}',
    '\u{2060}',
    '\u{feff}',
    '\u{ad}',
    '\u{e0041}',
    '\u{2028}',
    '\u{2029}',
    '\u{180e}',
    '\u{115f}',
    '\u{fe0f}',
];

/// `x` and each of `chars`.
fn hidden_text(chars: &[char]) -> String {
    chars.iter().map(|c| format!("x{c}")).collect()
}

#[track_caller]
fn assert_shown_escaped(what: &str, chars: &[char], output: &Output) {
    let text = text(output);
    for &c in chars {
        assert!(!text.contains(c), "{what}: {c:?} printed raw: {text:?}");
        let escape = format!("\\u{{{:04x}}}", u32::from(c));
        assert!(text.contains(&escape), "{what}: no {escape}: {text:?}");
    }
}

#[test]
fn fleet_and_trail_commands_show_names_escaped() {
    let url = database("hidden");
    let hidden = hidden_text(&HIDDEN);
    // Names the API takes refuse control characters; the others hide as well.
    let uncontrolled: Vec<char> = HIDDEN.into_iter().filter(|c| !c.is_control()).collect();
    let name = format!("f{}", hidden_text(&uncontrolled));
    let fleet = Fleet::connect(&url, &name).unwrap();
    let gate = fleet
        .join(
            Gate::builder()
                .mode(Mode::FullAuto)
                .agent(format!("a{hidden}")),
        )
        .unwrap();
    let by = format!("ana{hidden}");
    let reason = format!("why{hidden}");
    let lowered = toolgate(&[
        "fleet", "lower", "--store", &url, "--fleet", &name, "--to", "ADVISORY", "--by", &by,
        "--reason", &reason,
    ]);
    assert_eq!(lowered.status.code(), Some(0), "{}", text(&lowered));
    assert_shown_escaped("fleet lower", &uncontrolled, &lowered);
    let status = toolgate(&["fleet", "status", "--store", &url, "--fleet", &name]);
    assert_eq!(status.status.code(), Some(0), "{}", text(&status));
    assert_shown_escaped("fleet status", &HIDDEN, &status);
    drop(gate);
    drop(fleet);

    let sink = PostgresSink::builder()
        .writer(format!("w{}", hidden_text(&uncontrolled)))
        .connect(&url)
        .unwrap();
    let mut refused = AuditRecord::new(Stage::Refused, format!("t{hidden}"), Mode::Shadow, 1);
    refused.decision = Some(toolgate::audit::Decision::Refused);
    refused.code = Some("ABOVE_CEILING".into());
    toolgate::audit::AuditSink::record(&sink, &refused).unwrap();
    let mut entered = AuditRecord::new(Stage::Enter, format!("t{hidden}"), Mode::Shadow, 1);
    entered.call = 2;
    toolgate::audit::AuditSink::record(&sink, &entered).unwrap();
    drop(sink);
    let verified = toolgate(&["audit", "verify", &url]);
    assert!(
        text(&verified).contains("interrupted: call 2"),
        "{}",
        text(&verified)
    );
    assert_shown_escaped("audit verify", &HIDDEN, &verified);
    let promotion = toolgate(&["audit", "promotion", &url]);
    assert_eq!(promotion.status.code(), Some(0), "{}", text(&promotion));
    assert_shown_escaped("audit promotion", &HIDDEN, &promotion);
}

#[test]
fn roles_with_exactly_the_documented_grants_write_join_lower_and_audit() {
    let url = database("roles");
    let roles = common::postgres::documented_roles(&url);
    // The gates' role: a sink and a fleet, each connecting as the role, no CREATE, no ownership.
    let sink = PostgresSink::builder()
        .writer("roles")
        .connect(&roles.agent)
        .expect("the sink connects as the gates' role");
    let fleet = Fleet::connect(&roles.agent, "roles").expect("the fleet, as the gates' role");
    let gate = fleet
        .join(
            Gate::builder()
                .mode(Mode::FullAuto)
                .agent("roles")
                .audit(sink),
        )
        .expect("joined");
    gate.run(|| count(7)).expect("runs, its records committed");
    // The operators' role lowers the fleet and sees who is joined.
    let lowered = toolgate(&[
        "fleet",
        "lower",
        "--store",
        &roles.operator,
        "--fleet",
        "roles",
        "--to",
        "SHADOW",
        "--by",
        "ana",
        "--reason",
        "drill",
    ]);
    assert_eq!(lowered.status.code(), Some(0), "{}", text(&lowered));
    let status = toolgate(&[
        "fleet",
        "status",
        "--store",
        &roles.operator,
        "--fleet",
        "roles",
    ]);
    assert_eq!(status.status.code(), Some(0), "{}", text(&status));
    assert!(text(&status).contains("SHADOW"), "{}", text(&status));
    let deadline = Instant::now() + Duration::from_secs(10);
    while gate.run(|| count(8)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the lowering never reached the gate"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(gate);
    drop(fleet);
    // The auditors' role verifies the trail and reports on it.
    let verified = toolgate(&["audit", "verify", &roles.auditor]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
    assert!(
        text(&verified).contains("INTACT: 1 writer(s)"),
        "{}",
        text(&verified)
    );
    let promotion = toolgate(&["audit", "promotion", &roles.auditor]);
    assert_eq!(promotion.status.code(), Some(0), "{}", text(&promotion));
    // Neither the auditors' role nor the operators' writes into the trail.
    for role in [&roles.auditor, &roles.operator] {
        let refused = match PostgresSink::builder().writer("forged").connect(role) {
            Err(error) => error.to_string(),
            Ok(sink) => toolgate::audit::AuditSink::record(
                &sink,
                &AuditRecord::new(Stage::Enter, "forged", Mode::FullAuto, 1),
            )
            .expect_err("a record written by a role that may not")
            .to_string(),
        };
        assert!(refused.contains("permission denied"), "{role}: {refused}");
    }
    assert_eq!(
        query(&url, "SELECT DISTINCT writer FROM toolgate.audit"),
        vec![vec![Some("roles".to_owned())]]
    );
}

#[test]
fn fleet_and_trail_errors_name_what_failed() {
    let url = common::postgres::empty_database("unmigrated");
    let unreachable = "postgres://toolgate@127.0.0.1:1/nowhere";
    for (args, named) in [
        (
            vec!["fleet", "status", "--store", unreachable, "--fleet", "f"],
            "fleet",
        ),
        (
            vec!["fleet", "status", "--store", &url, "--fleet", "f"],
            "fleet",
        ),
        (
            vec![
                "fleet",
                "lower",
                "--store",
                unreachable,
                "--fleet",
                "f",
                "--to",
                "SHADOW",
                "--by",
                "a",
                "--reason",
                "r",
            ],
            "fleet",
        ),
        (vec!["audit", "verify", unreachable], "audit trail"),
        (vec!["audit", "promotion", unreachable], "audit trail"),
    ] {
        let output = toolgate(&args);
        assert_eq!(output.status.code(), Some(3), "{args:?}: {}", text(&output));
        let said = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(said.contains(named), "{args:?}: {said}");
        assert!(!said.contains("approval store"), "{args:?}: {said}");
    }
    let fleet = Fleet::connect(unreachable, "f").unwrap_err().to_string();
    assert!(
        fleet.contains("fleet") && !fleet.contains("approval store"),
        "{fleet}"
    );
    let sink = PostgresSink::connect(unreachable).unwrap_err().to_string();
    assert!(
        sink.contains("audit") && !sink.contains("approval store"),
        "{sink}"
    );
    // A database without the schema: each says to migrate it.
    let fleet = Fleet::connect(&url, "f").unwrap_err().to_string();
    assert!(fleet.contains("toolgate migrate"), "{fleet}");
    let sink = PostgresSink::connect(&url).unwrap_err().to_string();
    assert!(sink.contains("toolgate migrate"), "{sink}");
}

// The first processes to join a fleet race to create its row: every one of them joins, and reads the
// fleet's mode, however their statements interleave.
#[test]
fn processes_joining_a_new_fleet_at_once_all_join() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let url = database("fleet_first_join");
    for round in 0..30 {
        let name = format!("first-{round}");
        let barrier = std::sync::Barrier::new(16);
        std::thread::scope(|scope| {
            let joins: Vec<_> = (0..16)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        Fleet::builder().connect(&url, &name).map(drop)
                    })
                })
                .collect();
            for join in joins {
                let joined = join.join().unwrap();
                assert!(joined.is_ok(), "round {round}: {joined:?}");
            }
        });
        let status = fleet::status(&url, "toolgate", &name).unwrap();
        assert_eq!(status.mode, Mode::FullAuto);
    }
}
