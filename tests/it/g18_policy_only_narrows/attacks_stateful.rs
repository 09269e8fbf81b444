//! Outside attacks on guarantee 18 where `LivePolicy::replace` meets a decision that waits: a call held
//! in its budget store when the file starts asking for its tool, and two principals' calls held at
//! their approvers when the file denies the tool to one of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use super::{Hold, HoldingBudgets, following};
use toolgate::gate::BudgetScope;
use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::{Approval, ApprovalRequest, DenialCode, Denied, Mode, tool};

static POSTS: AtomicUsize = AtomicUsize::new(0);
static ALICE_WIRES: AtomicUsize = AtomicUsize::new(0);
static BOB_WIRES: AtomicUsize = AtomicUsize::new(0);

/// Post a message.
#[tool(risk = "LOW_WRITE", domain = "a18s")]
fn post(n: u64) -> Result<u64, Denied> {
    POSTS.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// Wire money for `who`.
#[tool(risk = "HIGH_WRITE", domain = "a18s")]
fn wire(who: String) -> Result<String, Denied> {
    match who.as_str() {
        "alice" => ALICE_WIRES.fetch_add(1, Ordering::SeqCst),
        _ => BOB_WIRES.fetch_add(1, Ordering::SeqCst),
    };
    Ok(who)
}

fn file(text: &str) -> PolicyFile {
    PolicyFile::parse("ops.toml", text).unwrap()
}

/// Guarantee 18: a file can "ask", and "a call decided under the old file is decided again at its
/// commit point". Attack: a LOW_WRITE call that runs unasked in FULL_AUTO waits in its budget store;
/// `replace` gives a file that asks for the tool; the store answers. Asserts: the call does not run
/// unasked (the gate has no way to approve: `APPROVAL_REQUIRED`).
#[test]
fn a18_70_an_ask_added_while_a_call_waits_in_its_budget_store_is_asked() {
    let _serial = crate::common::serial();
    let live = LivePolicy::new(file("format = 1\n"));
    let hold = Hold::default();
    let gate = following(Mode::FullAuto, &live, |b| {
        b.budget(
            BudgetScope::tool("a18s.post"),
            100,
            Duration::from_secs(3600),
        )
        .budget_store(HoldingBudgets(hold.clone()))
    });
    let before = POSTS.load(Ordering::SeqCst);
    let caller = {
        let gate = gate.clone();
        thread::spawn(move || gate.run(|| post(70)).map_err(|d| d.code()))
    };
    hold.wait_arrived();
    live.replace(
        file("format = 1\n[defaults]\nask = [\"a18s.post\"]\n"),
        "ops",
    );
    hold.release();
    assert_eq!(caller.join().unwrap(), Err(DenialCode::ApprovalRequired));
    assert_eq!(POSTS.load(Ordering::SeqCst), before, "a call ran unasked");
}

/// Guarantee 18 with guarantee 15: a file's principal table narrows that principal's gates alone, and
/// a replacement reaches every gate before `replace` returns. Attack: alice's and bob's gates follow
/// one `LivePolicy`; a call of each waits at its approver; `replace` denies the tool to bob; both
/// approvers approve. Asserts: bob's call is refused `DENY_LISTED` and does not run.
#[test]
fn a18_71_a_deny_for_one_principal_added_while_two_principals_wait_refuses_his_call() {
    let _serial = crate::common::serial();
    let live = LivePolicy::new(file("format = 1\n"));
    let (asked_tx, asked) = mpsc::channel::<()>();
    let (go_tx, go) = mpsc::channel::<()>();
    let asked_tx = std::sync::Mutex::new(asked_tx);
    let go = Arc::new(std::sync::Mutex::new(go));
    let approver = move |_: &ApprovalRequest<'_>| {
        let _ = asked_tx.lock().unwrap().send(());
        let _ = go.lock().unwrap().recv_timeout(Duration::from_secs(20));
        Approval::Approve
    };
    let approver = Arc::new(approver);
    let gate_of = |who: &str| {
        let approver = approver.clone();
        following(Mode::FullAuto, &live, |b| {
            b.principal(who)
                .approver(move |r: &ApprovalRequest<'_>| approver(r))
        })
    };
    let (alice, bob) = (gate_of("alice"), gate_of("bob"));
    let bobs_before = BOB_WIRES.load(Ordering::SeqCst);
    let call = |gate: &toolgate::Gate, who: &'static str| {
        let gate = gate.clone();
        thread::spawn(move || gate.run(|| wire(who.into())).map_err(|d| d.code()))
    };
    let bobs = call(&bob, "bob");
    asked.recv_timeout(Duration::from_secs(20)).unwrap();
    let alices = call(&alice, "alice");
    asked.recv_timeout(Duration::from_secs(20)).unwrap();
    live.replace(
        file("format = 1\n[principals.bob]\ndeny = [\"a18s.wire\"]\n"),
        "ops",
    );
    go_tx.send(()).unwrap();
    go_tx.send(()).unwrap();
    assert_eq!(bobs.join().unwrap(), Err(DenialCode::DenyListed));
    assert_eq!(alices.join().unwrap(), Ok("alice".to_owned()));
    assert_eq!(BOB_WIRES.load(Ordering::SeqCst), bobs_before);
}
