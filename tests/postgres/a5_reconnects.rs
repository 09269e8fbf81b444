//! attack5: the server restarted while the parts' decisions wait on it (docs/fleets.md, "When the
//! server goes away": every part reopens its connection and works again, what it made on its
//! connection made again). A lowered fleet must stay lowered for every member and never raise a gate
//! above what it lowered itself to (guarantee 11); the trail's chain must verify and every body that
//! ran must have its `enter` committed (guarantee 12); a pending approval answered while the agent's
//! connection was gone runs once (guarantee 7).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use toolgate::postgres::fleet;
use toolgate::postgres::{Fleet, PostgresSink, PostgresStore, verify_trail};
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

use crate::common;
use crate::common::postgres::{Cluster, query};

const TIMEOUT: Duration = Duration::from_secs(2);

static NOTES: AtomicUsize = AtomicUsize::new(0);
static WIRES: AtomicUsize = AtomicUsize::new(0);

#[tool(risk = "LOW_WRITE", domain = "a5rc", record_arguments)]
fn note5(n: u64) -> Result<u64, Denied> {
    NOTES.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

#[tool(risk = "HIGH_WRITE", domain = "a5rc")]
fn wire5(cents: u64) -> Result<u64, Denied> {
    WIRES.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

// Two memberships (as two processes) of one fleet at FULL_AUTO. The fleet is lowered to PARTIAL_AUTO
// and the server stopped at once (the notification may be lost); while it is away, one gate lowers
// itself to ADVISORY. Once the server is back and each membership reads its mode again, no gate may
// stand above the fleet's PARTIAL_AUTO, and the one that lowered itself not above ADVISORY. Right
// after the start, the fleet is lowered again to ADVISORY: every member follows.
#[test]
fn a5_c1_after_a_restart_no_member_keeps_a_mode_above_the_fleets_or_its_own_lowering() {
    let _serial = common::serial();
    let cluster = Cluster::new(&["fsync=off"]);
    let url = cluster.database("a5_restart_fleet");
    let member = || {
        Fleet::builder()
            .grace(Duration::from_secs(1))
            .poll_interval(Duration::from_millis(100))
            .timeout(TIMEOUT)
            .connect(&url, "a5fleet")
            .unwrap()
    };
    let (one, two) = (member(), member());
    let own = one.join(Gate::builder().mode(Mode::FullAuto)).unwrap();
    let other = two.join(Gate::builder().mode(Mode::FullAuto)).unwrap();
    assert_eq!((own.mode(), other.mode()), (Mode::FullAuto, Mode::FullAuto));

    fleet::lower(
        &url,
        "toolgate",
        "a5fleet",
        Mode::PartialAuto,
        "ana",
        "drill",
    )
    .unwrap();
    cluster.stop();
    assert!(eventually(
        || own.mode() == Mode::Shadow && other.mode() == Mode::Shadow
    ));
    own.lower(Mode::Advisory).unwrap();

    cluster.start();
    // Each comes back up (fleet_rejoined) once it reads the mode again.
    let back = eventually(|| own.mode() != Mode::Shadow && other.mode() != Mode::Shadow);
    assert!(
        own.mode() <= Mode::Advisory,
        "the gate that lowered itself to ADVISORY stands at {} after the restart (back: {back})",
        own.mode()
    );
    assert!(
        other.mode() <= Mode::PartialAuto,
        "a member stands at {} above its fleet's PARTIAL_AUTO after the restart",
        other.mode()
    );
    // Calls decided now follow the same: a LOW_WRITE under ADVISORY is not run.
    let before = NOTES.load(Ordering::SeqCst);
    let _ = own.run(|| note5(1));
    assert_eq!(NOTES.load(Ordering::SeqCst), before, "ran above ADVISORY");

    fleet::lower(&url, "toolgate", "a5fleet", Mode::Advisory, "ana", "again").unwrap();
    assert!(
        eventually(|| other.mode() == Mode::Advisory),
        "a member did not follow a lowering after the restart: {}",
        other.mode()
    );
    assert!(own.mode() <= Mode::Advisory);
}

// Four threads call through one PostgreSQL trail while the server is stopped and started under them.
// Afterwards the chain verifies, and every body that ran has its `enter` row.
#[test]
fn a5_c2_a_trail_restarted_under_calls_in_flight_verifies_and_holds_every_body_that_ran() {
    let _serial = common::serial();
    let cluster = Cluster::new(&["fsync=off"]);
    let url = cluster.database("a5_restart_trail");
    let sink = PostgresSink::builder()
        .writer("a5trail")
        .timeout(TIMEOUT)
        .connect(&url)
        .unwrap();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let asked = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (gate, ran, asked, stop) = (gate.clone(), ran.clone(), asked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    asked.fetch_add(1, Ordering::SeqCst);
                    if gate.run(|| note5(t * 1_000_000 + i)).is_ok() {
                        ran.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    assert!(eventually(|| ran.load(Ordering::SeqCst) >= 50));
    cluster.stop();
    let at = asked.load(Ordering::SeqCst);
    assert!(eventually(|| asked.load(Ordering::SeqCst) >= at + 8));
    cluster.start();
    let after = ran.load(Ordering::SeqCst);
    assert!(
        eventually(|| ran.load(Ordering::SeqCst) >= after + 50),
        "the trail did not come back"
    );
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    drop(gate);
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report:?}");
    let enters = query(
        &url,
        "SELECT count(*) FROM toolgate.audit WHERE stage = 'enter'",
    )[0][0]
        .clone()
        .unwrap()
        .parse::<usize>()
        .unwrap();
    let bodies = ran.load(Ordering::SeqCst);
    assert!(
        enters >= bodies,
        "{bodies} bodies ran, {enters} enter records committed"
    );
    let repeated = query(
        &url,
        "SELECT count(*) FROM (SELECT gate, call FROM toolgate.audit
         WHERE stage = 'exit' GROUP BY gate, call HAVING count(*) > 1) d",
    );
    assert_eq!(
        repeated[0][0].as_deref(),
        Some("0"),
        "an exit recorded twice"
    );
}

// A call waits for an operator (two-step store). The server restarts; the operator answers before
// the agent's store has reconnected. The agent then asks again from two threads at once, and once
// more: the body runs exactly once.
#[test]
fn a5_c3_an_approval_answered_across_a_restart_runs_once_and_only_once() {
    let _serial = common::serial();
    let cluster = Cluster::new(&["fsync=off"]);
    let url = cluster.database("a5_restart_approval");
    let store = Arc::new(
        PostgresStore::builder()
            .timeout(TIMEOUT)
            .connect(&url)
            .unwrap(),
    );
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone())
        .build()
        .unwrap();
    let filed = gate.run(|| wire5(700)).unwrap_err();
    assert_eq!(filed.code(), DenialCode::ApprovalPending, "{filed}");
    let id: i64 = filed.approval_request_id().unwrap().parse().unwrap();
    cluster.stop();
    cluster.start();
    let operator = PostgresStore::builder()
        .timeout(TIMEOUT)
        .connect(&url)
        .unwrap();
    crate::support::wait(operator.answer_id(id, crate::support::approve("ops"))).unwrap();
    let before = WIRES.load(Ordering::SeqCst);
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let results: Vec<_> = (0..2)
        .map(|_| {
            let (gate, barrier) = (gate.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                gate.run(|| wire5(700)).map_err(|d| d.code())
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let mut last = gate.run(|| wire5(700)).map_err(|d| d.code());
    if matches!(last, Err(DenialCode::ApprovalStoreUnavailable)) {
        last = gate.run(|| wire5(700)).map_err(|d| d.code());
    }
    let runs = WIRES.load(Ordering::SeqCst) - before;
    assert_eq!(
        runs, 1,
        "the approved call ran {runs} times: {results:?}, then {last:?}"
    );
}
