//! Outside attacks on guarantee 13 where a PostgreSQL budget's window meets a check that waits: the
//! budgets' tables locked by another session while a call's check is in flight.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::postgres::database;
use crate::support::trail::Held;
use toolgate::gate::BudgetScope;
use toolgate::postgres::PostgresStore;
use toolgate::{Denied, Gate, Mode, tool};

static PINGS: AtomicUsize = AtomicUsize::new(0);
static RAN_AT: std::sync::Mutex<Vec<Instant>> = std::sync::Mutex::new(Vec::new());

/// Ping a host: runs in FULL_AUTO without an approval.
#[tool(risk = "LOW_WRITE", domain = "a13q")]
fn ping(n: u64) -> Result<u64, Denied> {
    PINGS.fetch_add(1, Ordering::SeqCst);
    RAN_AT.lock().unwrap().push(Instant::now());
    Ok(n)
}

/// Guarantee 13: "In any window of a budget's length, at most its N calls pass it (the window
/// slides)"; the guide: "A call allowed at `t` counts until `t + window`". Attack: a budget of one
/// call per 2 s in PostgreSQL; a call runs; the budgets' tables are locked by another session; a
/// second call's check is sent 2.2 s later, once the first has left the window, and waits on the lock
/// until 4 s; a third call follows 0.3 s after the second returns. Asserts: no two bodies ran within
/// 2 s of each other.
#[test]
fn a13_62_a_check_that_waits_on_a_lock_counts_from_when_its_call_is_allowed() {
    let _serial = crate::common::serial();
    let url = database("a13_62");
    let store = std::sync::Arc::new(
        PostgresStore::builder()
            .timeout(Duration::from_secs(20))
            .connect(&url)
            .unwrap(),
    );
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("pinger")
        .budget(BudgetScope::tool("a13q.ping"), 1, Duration::from_secs(2))
        .budget_store_shared(store)
        .build()
        .unwrap();
    let start = Instant::now();
    gate.run(|| ping(1)).expect("the first call runs");
    let held = Held::new(
        &url,
        "LOCK TABLE toolgate.budgets, toolgate.budget_uses IN EXCLUSIVE MODE",
    );
    std::thread::sleep(Duration::from_millis(2_200).saturating_sub(start.elapsed()));
    let second = {
        let gate = gate.clone();
        std::thread::spawn(move || gate.run(|| ping(2)).map_err(|d| d.code()))
    };
    std::thread::sleep(Duration::from_millis(4_000).saturating_sub(start.elapsed()));
    drop(held);
    let second = second.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let third = gate.run(|| ping(3)).map_err(|d| d.code());
    let times: Vec<Duration> = RAN_AT
        .lock()
        .unwrap()
        .iter()
        .map(|t| t.saturating_duration_since(start))
        .collect();
    let too_close = times
        .windows(2)
        .any(|w| w[1].saturating_sub(w[0]) < Duration::from_secs(2));
    assert!(
        !too_close,
        "two calls of a budget of one per 2 s ran {times:?} after the start ({second:?}, {third:?})"
    );
}
