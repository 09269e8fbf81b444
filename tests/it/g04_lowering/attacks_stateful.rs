//! An outside attack on guarantee 4 where a lowering meets a session grant whose call waits in its
//! budget store.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use toolgate::approval::SessionGrant;
use toolgate::gate::BudgetScope;
use toolgate::gate::budget::{
    BudgetCharge, BudgetFuture, BudgetStore, MemoryBudgets, ReleaseFuture, Reservation,
};
use toolgate::{Approval, ApprovalRequest, DenialCode, Denied, Gate, Mode, tool};

static DEPLOYS: AtomicUsize = AtomicUsize::new(0);

/// Deploy a build: needs an approval in FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "a4s")]
fn deploy(build: u64) -> Result<u64, Denied> {
    DEPLOYS.fetch_add(1, Ordering::SeqCst);
    Ok(build)
}

/// A budget store that, while armed, says it was asked and waits for the test before taking.
struct Holding {
    inner: MemoryBudgets,
    armed: AtomicBool,
    arrived: Mutex<mpsc::Sender<()>>,
    go: Mutex<mpsc::Receiver<()>>,
}

impl BudgetStore for Holding {
    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.inner.hold(charges, reservation)
    }

    fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        if self.armed.swap(false, Ordering::SeqCst) {
            let _ = self.arrived.lock().unwrap().send(());
            let _ = self
                .go
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(20));
        }
        self.inner.take(charges, reservation)
    }

    fn release(&self, charges: &[BudgetCharge], reservation: Reservation) -> ReleaseFuture {
        self.inner.release(charges, reservation)
    }
}

/// Guarantee 4: "a call whose decision completes after `lower` returns never runs at the old mode";
/// guarantee 7: a session grant "covers no more than its answer said". Attack: the approver grants
/// `a4s.deploy` for the session; a second call, covered by the grant, waits in its budget store; the
/// gate is lowered to PARTIAL_AUTO (where HIGH_WRITE does not run); the store answers. Asserts: the
/// granted call is refused with the lowered mode's code and its body does not run.
#[test]
fn a04_40_a_granted_call_waiting_in_its_budget_store_when_the_gate_is_lowered_does_not_run() {
    let _serial = crate::common::serial();
    let (arrived_tx, arrived) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let store = Arc::new(Holding {
        inner: MemoryBudgets::new(),
        armed: AtomicBool::new(false),
        arrived: Mutex::new(arrived_tx),
        go: Mutex::new(go_rx),
    });
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .budget(
            BudgetScope::tool("a4s.deploy"),
            100,
            Duration::from_secs(3600),
        )
        .budget_store_shared(store.clone())
        .approver(move |_: &ApprovalRequest<'_>| {
            if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(3600)))
            } else {
                Approval::Reject("asked again".into())
            }
        })
        .build()
        .unwrap();
    gate.run(|| deploy(1)).expect("the first call is granted");
    assert_eq!(gate.grants().len(), 1);
    let before = DEPLOYS.load(Ordering::SeqCst);
    store.armed.store(true, Ordering::SeqCst);
    let waiting = {
        let gate = gate.clone();
        std::thread::spawn(move || gate.run(|| deploy(2)).map_err(|d| d.code()))
    };
    arrived.recv_timeout(Duration::from_secs(20)).unwrap();
    gate.lower(Mode::PartialAuto).unwrap();
    go.send(()).unwrap();
    let result = waiting.join().unwrap();
    assert!(
        matches!(
            result,
            Err(DenialCode::AboveCeiling | DenialCode::ModeNotAllowed)
        ),
        "{result:?}"
    );
    assert_eq!(
        DEPLOYS.load(Ordering::SeqCst),
        before,
        "a granted call ran above the lowered mode"
    );
}
