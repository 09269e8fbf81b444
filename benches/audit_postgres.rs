//! The audit trail in PostgreSQL on loopback (BENCHMARKS.md, "A fleet"): records per second with every
//! `enter` committed before its body runs,
//!
//! - 8 threads of gated calls through `PostgresSink` (group commit), against the same calls through a
//!   sink that sends one `INSERT` and its `COMMIT` per record on one connection (what a sink without
//!   group commit does: records are chained, so they are written one after another);
//! - 256 concurrent async calls on a 2-worker tokio runtime;
//!
//! and the time `fleet::lower` takes to reach four busy processes (each a child of this benchmark,
//! joined to the fleet, calling a tool on 4 threads until its gate refuses), over several rounds.
//!
//! `cargo bench --features postgres,cli --bench audit_postgres` starts a throwaway cluster (as the tests
//! do) with the server's default durability; `TOOLGATE_TEST_POSTGRES` names a server to use instead.
//! `SECONDS` sets the length of each throughput run (3), `ROUNDS` the fleet rounds (5).

#[path = "../tests/common/postgres.rs"]
#[allow(dead_code)]
mod postgres;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use toolgate::audit::{AuditError, AuditRecord, AuditSink};
use toolgate::postgres::PostgresSink;
use toolgate::postgres::fleet::{self, Fleet};
use toolgate::{Denied, Gate, Mode, tool};

/// The measured tool: it does nothing, so that a call's time is the gate's and the sink's.
#[tool(risk = "LOW_WRITE", domain = "bench")]
fn touch(n: u64) -> Result<u64, Denied> {
    Ok(n)
}

/// The same, async.
#[tool(risk = "LOW_WRITE", domain = "bench")]
async fn touch_async(n: u64) -> Result<u64, Denied> {
    Ok(n)
}

/// One `INSERT` and its `COMMIT` per record, on one connection: a sink without group commit.
struct OneByOne {
    client: Mutex<(tokio::runtime::Runtime, tokio_postgres::Client)>,
    seq: AtomicU64,
}

impl OneByOne {
    fn connect(url: &str) -> OneByOne {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let config = tokio_postgres::Config::from_str(url).unwrap();
        let client = runtime.block_on(async {
            let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(connection);
            client
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS one_by_one (writer text, seq bigint, line text,
                         PRIMARY KEY (writer, seq))",
                )
                .await
                .unwrap();
            client
        });
        OneByOne {
            client: Mutex::new((runtime, client)),
            seq: AtomicU64::new(0),
        }
    }
}

impl AuditSink for OneByOne {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        let line = serde_json::to_string(record).unwrap();
        let guard = self.client.lock().unwrap();
        let (runtime, client) = &*guard;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) as i64;
        runtime
            .block_on(client.execute(
                "INSERT INTO one_by_one (writer, seq, line) VALUES ('w', $1, $2)",
                &[&seq, &line],
            ))
            .map(drop)
            .map_err(|e| AuditError::new(e.to_string()))
    }
}

fn threads_of_calls(gate: &Gate, threads: usize, seconds: f64) -> f64 {
    let stop = AtomicBool::new(false);
    let calls = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    gate.run(|| touch(n)).expect("allowed");
                    n += 1;
                }
                calls.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
    });
    // Two records a call: its enter and its exit.
    2.0 * calls.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

fn async_calls(gate: &Gate, in_flight: u64, seconds: f64) -> f64 {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let calls = runtime.block_on(async {
        let tasks: Vec<_> = (0..in_flight)
            .map(|n| {
                let gate = gate.clone();
                tokio::spawn(async move {
                    let mut calls = 0u64;
                    while Instant::now() < deadline {
                        gate.scope(touch_async(n)).await.expect("allowed");
                        calls += 1;
                    }
                    calls
                })
            })
            .collect();
        let mut calls = 0;
        for task in tasks {
            calls += task.await.unwrap();
        }
        calls
    });
    2.0 * calls as f64 / started.elapsed().as_secs_f64()
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A member process: joins the fleet, calls on 4 threads, prints when its gate first refuses.
fn member(url: &str, name: &str) {
    let fleet = Fleet::connect(url, name).expect("the fleet");
    let gate = fleet
        .join(Gate::builder().mode(Mode::PartialAuto))
        .expect("joined");
    println!("ready");
    let refused_at = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let mut n = 0;
                while refused_at.load(Ordering::Relaxed) == 0 {
                    if gate.run(|| touch(n)).is_err() {
                        let _ = refused_at.compare_exchange(
                            0,
                            now_nanos(),
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                    n += 1;
                }
            });
        }
    });
    println!("refused {}", refused_at.load(Ordering::Relaxed));
}

fn fleet_rounds(url: &str, rounds: usize) -> Vec<Duration> {
    let mut times = Vec::new();
    for round in 0..rounds {
        let name = format!("bench-{round}");
        let mut children: Vec<_> = (0..4)
            .map(|_| {
                let mut child = Command::new(std::env::current_exe().unwrap())
                    .env("TOOLGATE_BENCH_MEMBER", &name)
                    .env("TOOLGATE_BENCH_URL", url)
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("a member process");
                let lines = BufReader::new(child.stdout.take().unwrap()).lines();
                (child, lines)
            })
            .collect();
        for (_, lines) in &mut children {
            assert_eq!(lines.next().unwrap().unwrap(), "ready");
        }
        std::thread::sleep(Duration::from_millis(200));
        let started = now_nanos();
        fleet::lower(url, "toolgate", &name, Mode::Shadow, "bench", "measured").unwrap();
        let mut slowest = 0;
        for (child, lines) in &mut children {
            let line = lines.next().unwrap().unwrap();
            let at: u64 = line.strip_prefix("refused ").unwrap().parse().unwrap();
            slowest = slowest.max(at.saturating_sub(started));
            child.wait().unwrap();
        }
        times.push(Duration::from_nanos(slowest));
    }
    times
}

fn main() {
    if let Ok(name) = std::env::var("TOOLGATE_BENCH_MEMBER") {
        member(&std::env::var("TOOLGATE_BENCH_URL").unwrap(), &name);
        return;
    }
    let seconds: f64 = std::env::var("SECONDS").map_or(3.0, |s| s.parse().unwrap());
    let rounds: usize = std::env::var("ROUNDS").map_or(5, |s| s.parse().unwrap());
    let cluster =
        (std::env::var(postgres::SERVER_ENV).is_err()).then(|| postgres::Cluster::new(&[]));
    let url = match &cluster {
        Some(cluster) => cluster.database("bench"),
        None => postgres::database("bench"),
    };

    let grouped = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(PostgresSink::connect(&url).unwrap())
        .build()
        .unwrap();
    let one_by_one = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(OneByOne::connect(&url))
        .build()
        .unwrap();
    println!(
        "audit into PostgreSQL on loopback, enter committed before the body, {seconds} s per run"
    );
    let by_one = threads_of_calls(&one_by_one, 8, seconds);
    let group = threads_of_calls(&grouped, 8, seconds);
    println!("8 threads, one INSERT + COMMIT per record: {by_one:>9.0} records/s");
    println!(
        "8 threads, PostgresSink (group commit):     {group:>9.0} records/s  ({:.1}x; at most 8 enter records wait at once)",
        group / by_one
    );
    let async_rate = async_calls(&grouped, 256, seconds);
    println!("256 async calls in flight, 2 workers:        {async_rate:>9.0} records/s");

    let mut times = fleet_rounds(&url, rounds);
    times.sort();
    println!(
        "fleet lower, 4 busy processes, {rounds} rounds: until the last refuses p50 {:.1} ms, p100 {:.1} ms",
        times[times.len() / 2].as_secs_f64() * 1e3,
        times.last().unwrap().as_secs_f64() * 1e3
    );
}
