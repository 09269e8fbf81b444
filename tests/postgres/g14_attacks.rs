//! Outside attacks on guarantee 14 where the taint latch meets a PostgreSQL approval store whose answer
//! waits: the latch closes on one clone of a gate while another clone's approved write waits on the
//! store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::postgres::database;
use crate::support::trail::Held;
use crate::support::{approve, token};
use toolgate::postgres::PostgresStore;
use toolgate::{Denied, Gate, Mode, tool};

static PAYOUTS: AtomicUsize = AtomicUsize::new(0);

/// Pay out: needs an approval in FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "a14p")]
fn payout(cents: u64) -> Result<u64, Denied> {
    PAYOUTS.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

/// Read a mail from outside: untrusted output.
#[tool(risk = "READ_ONLY", domain = "a14p", untrusted_output)]
fn read_mail(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

/// Guarantee 14: "every call that writes ... decided by that gate or a clone of it, on any thread ...
/// needs an approval asked in the tainted session ... No approval or session grant of the clean
/// session lets it run". Attack: a write is approved in the clean session (PostgreSQL store); its retry
/// on one clone waits on the store (the approvals table locked by another session); meanwhile another
/// clone reads an untrusted mail and the latch closes; the lock is released. Asserts: the write does
/// not run on the clean session's approval.
#[test]
fn a14_60_a_clean_approval_whose_use_waits_on_the_store_while_a_clone_taints_runs_nothing() {
    let _serial = crate::common::serial();
    let url = database("a14_60");
    let store = PostgresStore::builder()
        .timeout(Duration::from_secs(20))
        .connect(&url)
        .unwrap();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store(store)
        .build()
        .unwrap();
    let asked = token(gate.run(|| payout(60)));
    gate.answer(&asked, approve("ops")).unwrap();
    let before = PAYOUTS.load(Ordering::SeqCst);
    let held = Held::new(&url, "LOCK TABLE toolgate.approvals IN EXCLUSIVE MODE");
    let retry = {
        let gate = gate.clone();
        std::thread::spawn(move || gate.run(|| payout(60)).map_err(|d| d.code()))
    };
    std::thread::sleep(Duration::from_millis(500));
    let reader = gate.clone();
    std::thread::spawn(move || reader.run(|| read_mail(1)).map_err(|d| d.code()))
        .join()
        .unwrap()
        .expect("the untrusted read runs");
    assert!(gate.taint().is_some(), "the latch closed");
    drop(held);
    let result = retry.join().unwrap();
    assert!(
        result.is_err() && PAYOUTS.load(Ordering::SeqCst) == before,
        "a write approved in the clean session ran after the latch closed: {result:?}"
    );
}
