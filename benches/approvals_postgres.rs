//! Latency of consuming a two-step approval kept in PostgreSQL on loopback: a gated call whose approval
//! is waiting, from the call to its body, p50 and p99 (BENCHMARKS.md, "Approvals in PostgreSQL").
//!
//! `cargo bench --features postgres --bench approvals_postgres` starts a throwaway cluster (as
//! `tests/common/postgres.rs` does), twice: with the server's default durability, and with
//! `synchronous_commit=off`. `TOOLGATE_TEST_POSTGRES` names a server to use instead; `ROUNDS` sets the
//! number of calls measured (2,000).

#[path = "../tests/common/postgres.rs"]
#[allow(dead_code)]
mod postgres;

use std::time::{Duration, Instant};

use toolgate::postgres::PostgresStore;
use toolgate::{Denied, Gate, Mode, tool};

/// The measured tool: it does nothing, so that the call's time is the gate's and the store's.
#[tool(risk = "HIGH_WRITE", domain = "bench")]
fn pay(round: u64) -> Result<u64, Denied> {
    Ok(round)
}

fn measure(url: &str, rounds: u64) -> Vec<Duration> {
    let store = PostgresStore::connect(url).expect("the store");
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store(store)
        .build()
        .expect("a gate");
    let mut times = Vec::with_capacity(rounds as usize);
    for round in 0..rounds + rounds / 10 {
        let asked = gate.run(|| pay(round)).expect_err("an approval is needed");
        let token = asked.approval_token().expect("a token").to_owned();
        gate.approve(&token).expect("approved");
        let start = Instant::now();
        let ran = gate.run(|| pay(round));
        let took = start.elapsed();
        assert_eq!(ran.ok(), Some(round), "the approved call runs");
        // The first tenth warms the connection, the statements and the server's caches.
        if round >= rounds / 10 {
            times.push(took);
        }
    }
    times
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

fn report(label: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "{label:<40} n={:<6} p50 {:>7.3} ms   p99 {:>7.3} ms   max {:>7.3} ms",
        times.len(),
        percentile(&times, 0.50).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times.last().map_or(0.0, |t| t.as_secs_f64() * 1e3),
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing else to run.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2_000);
    if let Ok(url) = std::env::var(postgres::SERVER_ENV) {
        report("consume, the given server", measure(&url, rounds));
        return;
    }
    for (label, options) in [
        ("consume, default durability", &[][..]),
        (
            "consume, synchronous_commit=off",
            &["synchronous_commit=off"][..],
        ),
    ] {
        let cluster = postgres::Cluster::new(options);
        let url = cluster.database("bench");
        report(label, measure(&url, rounds));
    }
}
