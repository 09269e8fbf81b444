//! Outside attacks where the PostgreSQL trail meets another stateful feature whose decision waits: a
//! two-step approval consumed by a call whose `enter` commit is held up, and a JSONL log written
//! before a trail whose server is stopped while the call waits at its approver.

use std::sync::atomic::AtomicUsize;

use crate::support::trail::*;
use crate::support::{approve, token};
use toolgate::audit::JsonlSink;
use toolgate::postgres::PostgresStore;
use toolgate::{Approval, ApprovalRequest};

static TRANSFERS: AtomicUsize = AtomicUsize::new(0);

/// Transfer money: needs an approval in FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "a12p")]
fn transfer(cents: u64) -> Result<u64, Denied> {
    TRANSFERS.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

/// Guarantee 12 ("a failed or timed-out commit refuses every call whose `enter` it carried") with
/// guarantee 7 ("With PostgreSQL ... an approval is used at most once"). Attack: a call approved in
/// the PostgreSQL store is retried while the trail's table is locked by another session, so that its
/// `enter` commit times out; the lock is released and the agent retries three times. Asserts: the held
/// call is refused `AUDIT_UNAVAILABLE` without its body running, at most one of all the retries runs,
/// and the trail verifies.
#[test]
fn a12_60_an_approved_call_whose_enter_commit_times_out_runs_at_most_once_after() {
    let _serial = common::serial();
    let url = database("a12_60");
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store(PostgresStore::connect(&url).unwrap())
        .audit(sink(&url, "a12-60", Duration::from_secs(1)))
        .build()
        .unwrap();
    let before = TRANSFERS.load(Ordering::SeqCst);
    let asked = token(gate.run(|| transfer(60)));
    gate.answer(&asked, approve("ops")).unwrap();
    let held = Held::new(&url, "LOCK TABLE toolgate.audit IN EXCLUSIVE MODE");
    let refused = gate.run(|| transfer(60)).map_err(|d| d.code());
    drop(held);
    assert_eq!(refused, Err(DenialCode::AuditUnavailable));
    assert_eq!(
        TRANSFERS.load(Ordering::SeqCst),
        before,
        "a body ran unaudited"
    );
    let retries: Vec<_> = (0..3)
        .map(|_| gate.run(|| transfer(60)).map_err(|d| d.code()))
        .collect();
    let ran = TRANSFERS.load(Ordering::SeqCst) - before;
    assert!(ran <= 1, "one approval ran {ran} calls: {retries:?}");
    drop(gate);
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
}

/// Guarantee 8 ("With several sinks, an `enter` that one refuses ... refuses the call, the sinks before
/// it get its `exit`") with guarantee 12 (a failed commit refuses the call) and a real fault: the
/// server is stopped while the call waits at its approver. Attack: a gate writes a JSONL log, then a
/// PostgreSQL trail; a HIGH_WRITE call waits at its approver; PostgreSQL is stopped; the approver
/// approves. Asserts: the call is refused `AUDIT_UNAVAILABLE`, its body does not run, and the JSONL log
/// holds its `enter` followed by an `exit` of outcome `refused`, and verifies.
#[test]
fn a08_60_a_server_stopped_while_the_approver_thinks_refuses_the_call_and_closes_the_first_sinks_enter()
 {
    let _serial = common::serial();
    let cluster = common::postgres::Cluster::new(&["fsync=off"]);
    let url = cluster.database("a08_60");
    let scratch = common::Scratch::new("a08-60");
    let log = scratch.path("audit.jsonl");
    let (asked_tx, asked) = mpsc::channel::<()>();
    let (go, go_rx) = mpsc::channel::<()>();
    let (asked_tx, go_rx) = (Mutex::new(asked_tx), Mutex::new(go_rx));
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .audit(JsonlSink::open(&log).unwrap())
        .audit(sink(&url, "a08-60", Duration::from_secs(1)))
        .approver(move |_: &ApprovalRequest<'_>| {
            let _ = asked_tx.lock().unwrap().send(());
            let _ = go_rx.lock().unwrap().recv_timeout(Duration::from_secs(20));
            Approval::Approve
        })
        .build()
        .unwrap();
    let before = TRANSFERS.load(Ordering::SeqCst);
    let waiting = {
        let gate = gate.clone();
        std::thread::spawn(move || gate.run(|| transfer(80)).map_err(|d| d.code()))
    };
    asked.recv_timeout(Duration::from_secs(20)).unwrap();
    cluster.stop();
    go.send(()).unwrap();
    let result = waiting.join().unwrap();
    assert_eq!(result, Err(DenialCode::AuditUnavailable));
    assert_eq!(
        TRANSFERS.load(Ordering::SeqCst),
        before,
        "a body ran unaudited"
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stages: Vec<(String, Option<String>)> = lines
        .iter()
        .filter(|l| l["tool"] == "a12p.transfer")
        .map(|l| {
            (
                l["stage"].as_str().unwrap().to_owned(),
                l["outcome"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        stages,
        [
            ("enter".to_owned(), None),
            ("exit".to_owned(), Some("refused".to_owned()))
        ],
        "{lines:#?}"
    );
    let report = toolgate::audit::verify_file(&log).unwrap();
    assert!(report.is_intact(), "{report}");
    cluster.start();
}
