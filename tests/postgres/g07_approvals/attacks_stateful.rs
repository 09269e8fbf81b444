//! Outside attacks on guarantee 7 across processes sharing a PostgreSQL store: a session answer taken up
//! by another gate of the same maker after the gate that asked is gone, and a process killed with
//! SIGKILL while the approved call it took waits for its `enter` record.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::postgres::database;
use crate::support::trail::Held;
use crate::support::{approve, child, cli_exits, pending_id, token};
use toolgate::audit::{AuditError, AuditRecord, AuditSink, Stage};
use toolgate::postgres::PostgresStore;
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

static REFUNDS: AtomicUsize = AtomicUsize::new(0);

/// The variable that makes [`a07_child`] act, naming the store's URL.
const CHILD_URL: &str = "TOOLGATE_A07_CHILD_URL";

/// Refund an order: needs an approval in FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "a7p", record_arguments)]
fn refund(order: u64) -> Result<u64, Denied> {
    REFUNDS.fetch_add(1, Ordering::SeqCst);
    println!("@body {order}");
    Ok(order)
}

/// alice's gate at `desk`, FULL_AUTO, on the store at `url`.
fn alices(url: &str) -> toolgate::gate::GateBuilder {
    Gate::builder()
        .mode(Mode::FullAuto)
        .principal("alice")
        .agent("desk")
        .approval_store(PostgresStore::connect(url).unwrap())
}

/// Guarantee 7 ("A session grant covers no more than its answer said, and dies with its gate") and 15
/// ("A session grant belongs to the gate (and its clones) whose approver gave it"). Attack: alice's
/// gate files a request and is dropped (its process restarted, say); the operator approves the
/// request `--for-session` with `toolgate approvals approve`; a new gate of alice at the same desk
/// makes the call, then makes it again. Asserts: the repeated call is asked for again (a second run
/// is `APPROVAL_REUSED`, as docs/approvals.md says, or `APPROVAL_PENDING`), not run on a grant given
/// to the dropped gate, and the new gate holds no grant.
#[test]
fn a07_63_a_session_answer_to_a_dropped_gates_request_grants_nothing_to_its_successor() {
    if std::env::var(CHILD_URL).is_ok() {
        return;
    }
    let _serial = crate::common::serial();
    let url = database("a07_63");
    let first = alices(&url).build().unwrap();
    let _ = token(first.run(|| refund(630)));
    drop(first);
    let store = PostgresStore::connect(&url).unwrap();
    let id = pending_id(&store, "a7p.refund", r#"{"order":630}"#).to_string();
    cli_exits(&url, &["approve", &id, "--for-session"], 0);
    let second = alices(&url).build().unwrap();
    let before = REFUNDS.load(Ordering::SeqCst);
    let same = second.run(|| refund(630)).map_err(|d| d.code());
    let again = second.run(|| refund(630)).map_err(|d| d.code());
    assert!(
        matches!(
            again,
            Err(DenialCode::ApprovalReused | DenialCode::ApprovalPending)
        ) && second.grants().is_empty(),
        "a call ran again on a session answer given to a dropped gate (first: {same:?}, again: \
         {again:?}, grants {:?})",
        second.grants()
    );
    assert!(REFUNDS.load(Ordering::SeqCst) - before <= 1);
}

/// A sink that, on the `enter` of `a7p.refund`, says so on stdout and hangs until the process dies.
struct HangOnEnter;

impl AuditSink for HangOnEnter {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if record.stage == Stage::Enter && record.tool == "a7p.refund" {
            println!("@holding");
            std::thread::sleep(Duration::from_secs(120));
        }
        Ok(())
    }
}

/// The child's part: alice's gate at `desk` retries the approved refund 631 and hangs in its `enter`.
#[test]
fn a07_child() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let gate = alices(&url).audit(HangOnEnter).build().unwrap();
    let result = gate.run(|| refund(631));
    println!("@returned {result:?}");
}

/// Guarantee 7 ("With PostgreSQL, these hold across processes: an approval is used at most once") with
/// a real fault. Attack: alice's request is approved; a process of hers retries the call, takes the
/// approval and is killed with SIGKILL while its `enter` record is being written; her gate in another
/// process then retries the same call three times. Asserts: the killed process ran no body, and at most
/// one of the later retries runs.
#[test]
fn a07_64_an_approval_taken_by_a_process_killed_mid_decision_runs_at_most_once_after() {
    if std::env::var(CHILD_URL).is_ok() {
        return;
    }
    let _serial = crate::common::serial();
    let url = database("a07_64");
    let gate = alices(&url).build().unwrap();
    let asked = token(gate.run(|| refund(631)));
    gate.answer(&asked, approve("ops")).unwrap();
    let mut process = child(module_path!(), "a07_child")
        .env(CHILD_URL, &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(process.stdout.take().unwrap());
    let (said_tx, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let Ok(line) = line else { break };
            if let Some((_, what)) = line.split_once('@')
                && said_tx.send(what.to_owned()).is_err()
            {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut heard = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = said.recv_timeout(left).expect("the child never held");
        heard.push(line.clone());
        if line == "holding" {
            break;
        }
        assert!(!line.starts_with("returned"), "{heard:?}");
    }
    process.kill().unwrap();
    process.wait().unwrap();
    let mut rest = Vec::new();
    while let Ok(line) = said.recv_timeout(Duration::from_millis(200)) {
        rest.push(line);
    }
    assert!(
        !heard.iter().chain(&rest).any(|l| l.starts_with("body")),
        "the killed process ran the body: {heard:?} {rest:?}"
    );
    let before = REFUNDS.load(Ordering::SeqCst);
    let retries: Vec<_> = (0..3)
        .map(|_| code_or_ran(gate.run(|| refund(631))))
        .collect();
    let ran = REFUNDS.load(Ordering::SeqCst) - before;
    assert!(ran <= 1, "one approval ran {ran} calls: {retries:?}");
}

fn code_or_ran<T>(result: Result<T, Denied>) -> String {
    match result {
        Ok(_) => "ran".to_owned(),
        Err(denied) => denied.code().as_str().to_owned(),
    }
}

/// Guarantee 7 ("A two-step approval runs one call ... before it expires"; with PostgreSQL, by the
/// database's clock). Attack: a request that lives 3 s is approved; the approvals table is then locked
/// by another session, so that the retry's consuming statement waits; the lock is held until the
/// request has expired, then released. Asserts: the retry does not run its body after the request
/// expired (it is refused, `APPROVAL_EXPIRED` or another refusal), as a second approval of the same
/// age used without waiting is refused `APPROVAL_EXPIRED`.
#[test]
fn a07_65_an_approval_whose_use_waits_on_a_lock_past_its_expiry_runs_nothing() {
    if std::env::var(CHILD_URL).is_ok() {
        return;
    }
    let _serial = crate::common::serial();
    let url = database("a07_65");
    let store = PostgresStore::builder()
        .ttl(Duration::from_secs(3))
        .timeout(Duration::from_secs(20))
        .connect(&url)
        .unwrap();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .principal("alice")
        .agent("desk")
        .approval_store(store)
        .build()
        .unwrap();
    let filed = Instant::now();
    let asked = token(gate.run(|| refund(650)));
    gate.answer(&asked, approve("ops")).unwrap();
    // The control: the same kind of approval, used after its expiry without waiting on a lock.
    let control = token(gate.run(|| refund(651)));
    gate.answer(&control, approve("ops")).unwrap();
    let held = Held::new(&url, "LOCK TABLE toolgate.approvals IN EXCLUSIVE MODE");
    let before = REFUNDS.load(Ordering::SeqCst);
    let retry = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            let result = gate.run(|| refund(650)).map_err(|d| d.code());
            (result, Instant::now())
        })
    };
    std::thread::sleep(Duration::from_secs(4).saturating_sub(filed.elapsed()));
    drop(held);
    let (result, at) = retry.join().unwrap();
    let ran = REFUNDS.load(Ordering::SeqCst) - before;
    assert_eq!(
        gate.run(|| refund(651)).map_err(|d| d.code()),
        Err(DenialCode::ApprovalExpired),
        "the control"
    );
    assert!(
        result.is_err() && ran == 0,
        "the approval of a request that lives 3 s ran its call {:?} after filing: {result:?}",
        at - filed
    );
}
