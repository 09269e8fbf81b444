//! Every part that holds a connection, its server stopped and started again under the same process:
//! the store (approvals and budgets), the trail, the fleet and the console's reader. While the server
//! is down, each refuses what needs it with an error that names the cause, within the part's timeout;
//! once it is back, the same part (no new process, no new handle) works again, at its next operation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use toolgate::approval::store::{Answer, StoreError};
use toolgate::postgres::fleet::{self, JoinError};
use toolgate::postgres::{Fleet, PostgresSink, PostgresStore, Reader, verify_trail};
use toolgate::{DenialCode, Denied, Gate, Mode, Risk, tool};

use crate::common;
use crate::common::postgres::{Cluster, query};

/// Each part's timeout here: an outage is refused at once, well within it.
const TIMEOUT: Duration = Duration::from_secs(2);

/// A call every part sees: counted by a budget, recorded by the trail, held under the fleet's mode.
#[tool(risk = "LOW_WRITE", domain = "restarts", record_arguments)]
fn note(n: u64) -> Result<u64, Denied> {
    Ok(n)
}

/// A call that waits for an operator at FULL_AUTO: it files a request, which the reader lists.
#[tool(risk = "HIGH_WRITE", domain = "restarts")]
fn transfer(cents: u64) -> Result<u64, Denied> {
    Ok(cents)
}

/// Whether `why` names the server's absence: nothing to connect to, or the connection it ended.
fn names_the_outage(why: &str) -> bool {
    [
        "error connecting to server",
        "terminating connection",
        "connection closed",
        "error communicating with the server",
    ]
    .iter()
    .any(|cause| why.contains(cause))
}

fn assert_outage(error: &StoreError) {
    assert!(
        matches!(error, StoreError::Unavailable(why) if names_the_outage(why)),
        "not an outage named: {error:?}"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Whether `condition` holds within 20 seconds (checked every 20 ms).
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

#[test]
fn the_store_refuses_while_its_server_is_stopped_and_works_again_once_it_is_back() {
    let _serial = common::serial();
    let cluster = Cluster::new(&["fsync=off"]);
    let url = cluster.database("restart_store");
    let store = Arc::new(
        PostgresStore::builder()
            .timeout(TIMEOUT)
            .connect(&url)
            .unwrap(),
    );
    let budgeted = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(Risk::LowWrite, 100, Duration::from_secs(3600))
        .budget_store_shared(store.clone())
        .build()
        .unwrap();
    let approving = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone())
        .build()
        .unwrap();
    let rt = runtime();
    assert_eq!(budgeted.run(|| note(1)).unwrap(), 1);
    let filed = approving.run(|| transfer(5)).unwrap_err();
    assert_eq!(filed.code(), DenialCode::ApprovalPending, "{filed}");
    let id: i64 = filed.approval_request_id().unwrap().parse().unwrap();

    cluster.stop();
    let refused = budgeted.run(|| note(2)).unwrap_err();
    assert_eq!(
        refused.code(),
        DenialCode::BudgetStoreUnavailable,
        "{refused}"
    );
    assert!(names_the_outage(&refused.to_string()), "{refused}");
    let refused = approving.run(|| transfer(5)).unwrap_err();
    assert_eq!(
        refused.code(),
        DenialCode::ApprovalStoreUnavailable,
        "{refused}"
    );
    assert!(names_the_outage(&refused.to_string()), "{refused}");
    assert_outage(&rt.block_on(store.list()).unwrap_err());

    // Back: the same store, at its next operation, for each of its uses.
    cluster.start();
    assert_eq!(budgeted.run(|| note(3)).unwrap(), 3);
    let listed = rt.block_on(store.list()).unwrap();
    assert_eq!(listed.iter().map(|r| r.id).collect::<Vec<_>>(), [id]);
    let approve = Answer::Approve {
        by: "ops".into(),
        for_session: false,
        confirmation: None,
    };
    rt.block_on(store.answer_id(id, approve)).unwrap();
    assert_eq!(approving.run(|| transfer(5)).unwrap(), 5);
    // Two units: the store counted on across the restart, and the call it refused took none.
    let held = query(&url, "SELECT held FROM toolgate.budgets");
    assert_eq!(held, [[Some("2".to_owned())]]);
}

#[test]
fn the_trail_refuses_while_its_server_is_stopped_and_continues_its_chain_once_it_is_back() {
    let _serial = common::serial();
    let cluster = Cluster::new(&["fsync=off"]);
    let url = cluster.database("restart_trail");
    let sink = PostgresSink::builder()
        .writer("restarts")
        .timeout(TIMEOUT)
        .connect(&url)
        .unwrap();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .unwrap();
    assert_eq!(gate.run(|| note(1)).unwrap(), 1);

    cluster.stop();
    let refused = gate.run(|| note(2)).unwrap_err();
    assert_eq!(refused.code(), DenialCode::AuditUnavailable, "{refused}");
    assert!(names_the_outage(&refused.to_string()), "{refused}");

    // Back: the same sink reads its chain's head again and chains on from it.
    cluster.start();
    assert_eq!(gate.run(|| note(3)).unwrap(), 3);
    drop(gate);
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let entered = query(
        &url,
        "SELECT line::jsonb ->> 'arguments' FROM toolgate.audit
         WHERE writer = 'restarts' AND stage = 'enter' ORDER BY seq",
    );
    assert_eq!(
        entered,
        [
            [Some(r#"{"n":1}"#.to_owned())],
            [Some(r#"{"n":3}"#.to_owned())]
        ],
        "the refused call has no enter record, the others have theirs"
    );
}

#[test]
fn the_fleet_refuses_a_join_while_its_server_is_stopped_and_follows_its_mode_once_it_is_back() {
    let _serial = common::serial();
    let cluster = Cluster::new(&["fsync=off"]);
    let url = cluster.database("restart_fleet");
    let fleet = Fleet::builder()
        .grace(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(100))
        .timeout(TIMEOUT)
        .connect(&url, "restarts")
        .unwrap();
    let gate = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    assert_eq!(gate.mode(), Mode::PartialAuto);

    cluster.stop();
    assert!(
        eventually(|| gate.mode() == Mode::Shadow),
        "the lost fleet did not hold its gate at SHADOW"
    );
    // Past the grace period, a statement has the whole timeout: the refusal is the outage's.
    match fleet.join(Gate::builder().mode(Mode::PartialAuto)) {
        Err(JoinError::Fleet(error)) => assert_outage(&error),
        other => panic!("joined with the server stopped: {other:?}"),
    }

    // Back: the same membership opens another connection, listens again and reads the mode.
    cluster.start();
    fleet::lower(
        &url,
        "toolgate",
        "restarts",
        Mode::Advisory,
        "ana",
        "after the restart",
    )
    .unwrap();
    assert!(
        eventually(|| gate.mode() == Mode::Advisory),
        "the gate did not follow its fleet after the restart: {}",
        gate.mode()
    );
    let joined = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    assert_eq!(joined.mode(), Mode::Advisory);
}

#[test]
fn the_reader_refuses_while_its_server_is_stopped_and_reads_and_listens_once_it_is_back() {
    let _serial = common::serial();
    let cluster = Cluster::new(&["fsync=off"]);
    let url = cluster.database("restart_reader");
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
    let rt = runtime();
    let reader = rt
        .block_on(Reader::connect(&url, "toolgate", TIMEOUT))
        .unwrap();
    assert_eq!(rt.block_on(reader.pending(None, 10)).unwrap().total, 0);
    let mut changes = reader.changes();
    changes.borrow_and_update();

    cluster.stop();
    // Its connection ended: the counter moves, so that a follower reads again.
    let moved = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(20), changes.changed()).await });
    assert!(matches!(moved, Ok(Ok(()))), "{moved:?}");
    assert_outage(&rt.block_on(reader.pending(None, 10)).unwrap_err());
    assert_outage(&rt.block_on(reader.fleets()).unwrap_err());

    // Back: the same reader reads, and hears the requests filed from now on.
    cluster.start();
    assert_eq!(rt.block_on(reader.pending(None, 10)).unwrap().total, 0);
    changes.borrow_and_update();
    let filed = gate.run(|| transfer(7)).unwrap_err();
    assert_eq!(filed.code(), DenialCode::ApprovalPending, "{filed}");
    let heard = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(20), changes.changed()).await });
    assert!(matches!(heard, Ok(Ok(()))), "{heard:?}");
    let page = rt.block_on(reader.pending(None, 10)).unwrap();
    assert_eq!(page.total, 1);
    assert_eq!(page.requests[0].binding.tool, "restarts.transfer");
}
