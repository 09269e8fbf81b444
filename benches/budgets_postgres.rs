//! Latency of a budget check kept in PostgreSQL on loopback: a gated call that a budget covers, from
//! the call to its body, p50 and p99, against the same call under a budget kept in memory (BENCHMARKS.md,
//! "Budgets").
//!
//! `cargo bench --features postgres --bench budgets_postgres` starts a throwaway cluster (as
//! `tests/common/postgres.rs` does), twice: with the server's default durability, and with
//! `synchronous_commit=off`. `TOOLGATE_TEST_POSTGRES` names a server to use instead; `ROUNDS` sets the
//! number of calls measured (2,000).

#[path = "../tests/common/postgres.rs"]
#[allow(dead_code)]
mod postgres;

use std::sync::Arc;
use std::time::{Duration, Instant};

use toolgate::gate::BudgetScope;
use toolgate::gate::budget::{BudgetStore, MAX_BUDGET_WINDOW, MemoryBudgets};
use toolgate::postgres::PostgresStore;
use toolgate::{Denied, Gate, Mode, tool};

/// The measured tool: it does nothing, so that the call's time is the gate's and the store's.
#[tool(risk = "LOW_WRITE", domain = "bench")]
fn send(round: u64) -> Result<u64, Denied> {
    Ok(round)
}

/// The budgets measured: a small one whose window holds a few calls at a time, and one that counts
/// every call of the run (its window keeps them all: a sliding window's cost grows with what it holds).
#[derive(Clone, Copy)]
enum Size {
    Small,
    Whole,
}

fn measure(store: Arc<dyn BudgetStore>, rounds: u64, size: Size, audited: bool) -> Vec<Duration> {
    let warm = rounds / 10;
    let (limit, window) = match size {
        Size::Small => (10, Duration::from_micros(1)),
        Size::Whole => (
            u32::try_from(rounds + warm).expect("rounds fit a budget"),
            MAX_BUDGET_WINDOW,
        ),
    };
    let builder = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("bench.send"), limit, window)
        .budget_store_shared(store);
    // A call whose gate writes an `enter` record waited once it held its unit: its commit point asks
    // the store again (`BudgetStore::hold`).
    let builder = match audited {
        true => builder.audit(toolgate::audit::MemorySink::new()),
        false => builder,
    };
    let gate = builder.build().expect("a gate");
    let mut times = Vec::with_capacity(rounds as usize);
    for round in 0..rounds + warm {
        let start = Instant::now();
        let ran = gate.run(|| send(round));
        let took = start.elapsed();
        assert_eq!(ran.ok(), Some(round), "the call is within its budget");
        // The first tenth warms the connection, the statements and the server's caches.
        if round >= warm {
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
        "{label:<60} n={:<6} p50 {:>8.4} ms   p99 {:>8.4} ms   max {:>8.4} ms",
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
    let sizes = [
        (Size::Small, "10 calls per µs"),
        (Size::Whole, "every call of the run"),
    ];
    for (size, what) in sizes {
        let store = Arc::new(MemoryBudgets::new());
        report(
            &format!("in memory, {what}"),
            measure(store, rounds, size, false),
        );
    }
    let store = Arc::new(MemoryBudgets::new());
    let what = "in memory, every call of the run, audited";
    report(what, measure(store, rounds, Size::Whole, true));
    if let Ok(url) = std::env::var(postgres::SERVER_ENV) {
        for (size, what) in sizes {
            let store = Arc::new(PostgresStore::connect(&url).expect("the store"));
            let database = format!("the given server, {what}");
            report(&database, measure(store, rounds, size, false));
        }
        return;
    }
    for (label, options) in [
        ("budget check, default durability", &[][..]),
        (
            "budget check, synchronous_commit=off",
            &["synchronous_commit=off"][..],
        ),
    ] {
        let cluster = postgres::Cluster::new(options);
        for (i, (size, what)) in sizes.into_iter().enumerate() {
            let url = cluster.database(&format!("bench{i}"));
            let store = Arc::new(PostgresStore::connect(&url).expect("the store"));
            report(
                &format!("{label}, {what}"),
                measure(store, rounds, size, false),
            );
        }
        let url = cluster.database("bench_audited");
        let store = Arc::new(PostgresStore::connect(&url).expect("the store"));
        let what = "every call of the run, audited";
        report(
            &format!("{label}, {what}"),
            measure(store, rounds, Size::Whole, true),
        );
    }
}
