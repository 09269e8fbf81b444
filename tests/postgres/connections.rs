//! How many connections a process opens, counted by the server (`pg_stat_activity`): one per
//! `PostgresStore` (its approvals and budgets), one per `PostgresSink`, one per `Fleet` membership and
//! one per `Reader`, however many gates share them and however many calls are in flight; and one again
//! after the server cut them all.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use toolgate::audit::AuditSink;
use toolgate::gate::BudgetScope;
use toolgate::postgres::{Fleet, PostgresSink, PostgresStore, Reader};
use toolgate::{Denied, Gate, Mode, tool};

use crate::common;
use crate::common::postgres::{database, execute, query};

/// A call the gates allow at PARTIAL_AUTO, counted by the budget (the store), recorded by the sink.
#[tool(risk = "LOW_WRITE", domain = "connections")]
fn tick(n: u64) -> Result<u64, Denied> {
    Ok(n)
}

/// The connections to `database` by application name (the query's own is to another database).
fn counts(url: &str, database: &str) -> BTreeMap<String, usize> {
    let admin = common::postgres::with_database(url, "postgres");
    let mut counts = BTreeMap::new();
    for row in query(
        &admin,
        &format!("SELECT application_name FROM pg_stat_activity WHERE datname = '{database}'"),
    ) {
        *counts
            .entry(row[0].clone().unwrap_or_default())
            .or_insert(0) += 1;
    }
    counts
}

fn one_each() -> BTreeMap<String, usize> {
    [
        "toolgate",
        "toolgate-audit",
        "toolgate-console",
        "toolgate-fleet",
    ]
    .into_iter()
    .map(|name| (name.to_owned(), 1))
    .collect()
}

/// The counts once they are `expected` (a cut connection's backend may take a moment to leave), or
/// as they are after 10 seconds.
fn settled(
    url: &str,
    database: &str,
    expected: &BTreeMap<String, usize>,
) -> BTreeMap<String, usize> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = counts(url, database);
        if &now == expected || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_process_opens_one_connection_per_store_sink_fleet_and_reader_however_many_gates_share_them() {
    let _serial = common::serial();
    let url = database("connections");
    let name = url.rsplit('/').next().unwrap().to_owned();
    let timeout = Duration::from_secs(10);
    let store = Arc::new(
        PostgresStore::builder()
            .timeout(timeout)
            .connect(&url)
            .unwrap(),
    );
    let sink: Arc<dyn AuditSink> = Arc::new(
        PostgresSink::builder()
            .timeout(timeout)
            .connect(&url)
            .unwrap(),
    );
    let fleet = Fleet::builder()
        .timeout(timeout)
        .connect(&url, "connections")
        .unwrap();
    let gates: Vec<Gate> = (0..8)
        .map(|i| {
            fleet
                .join(
                    Gate::builder()
                        .mode(Mode::PartialAuto)
                        .agent(format!("agent-{i}"))
                        .audit_shared(Arc::clone(&sink))
                        .approval_store_shared(store.clone())
                        .budget(BudgetScope::Agent, 100_000, Duration::from_secs(3600))
                        .budget_store_shared(store.clone()),
                )
                .unwrap()
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let reader = runtime
        .block_on(Reader::connect(&url, "toolgate", timeout))
        .unwrap();

    // Every gate busy on a thread of its own, the reader read 16 at a time, the counts sampled.
    let most = std::sync::Mutex::new(BTreeMap::<String, usize>::new());
    let busy = |calls: u64, reader: &Reader| {
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let sampler = scope.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    for (app, n) in counts(&url, &name) {
                        let mut most = most.lock().unwrap();
                        let seen = most.entry(app).or_insert(0);
                        *seen = (*seen).max(n);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
            let callers: Vec<_> = gates
                .iter()
                .map(|gate| {
                    scope
                        .spawn(move || (0..calls).filter(|&i| gate.run(|| tick(i)).is_ok()).count())
                })
                .collect();
            runtime.block_on(async {
                for _ in 0..10 {
                    let reads: Vec<_> = (0..16).map(|_| reader.pending(None, 10)).collect();
                    for read in reads {
                        let _ = read.await;
                    }
                }
            });
            let ran: usize = callers.into_iter().map(|c| c.join().unwrap()).sum();
            done.store(true, Ordering::Relaxed);
            sampler.join().unwrap();
            ran
        })
    };
    assert_eq!(busy(50, &reader), 8 * 50);
    assert_eq!(settled(&url, &name, &one_each()), one_each());
    assert_eq!(*most.lock().unwrap(), one_each(), "the most seen at once");

    // The server cuts every connection: each part opens one again, and only one.
    execute(
        &common::postgres::with_database(&url, "postgres"),
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}' \
             AND pid <> pg_backend_pid()"
        ),
    );
    most.lock().unwrap().clear();
    let deadline = Instant::now() + Duration::from_secs(30);
    // The first calls after the cut may be refused (their part finds its connection gone); the reader
    // opens another itself.
    while busy(5, &reader) < 8 * 5 {
        assert!(Instant::now() < deadline, "the parts did not reconnect");
    }
    runtime
        .block_on(reader.pending(None, 10))
        .expect("the reader reads again");
    assert_eq!(settled(&url, &name, &one_each()), one_each());
    drop(reader);
    let mut without_reader = one_each();
    without_reader.remove("toolgate-console");
    assert_eq!(settled(&url, &name, &without_reader), without_reader);
    assert!(
        most.lock().unwrap().values().all(|&n| n == 1),
        "the most seen at once: {:?}",
        most.lock().unwrap()
    );
    drop(gates);
    drop(fleet);
}
