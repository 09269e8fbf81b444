//! Guarantee 2 (It fails closed), against async approvers, session grants, rejections and stops
//! with reasons, and custom approval stores.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fixtures::approval_surfaces::*;
use toolgate::{Approval, DenialCode, Gate, Mode};

// Attacks: the ambient gate leaking while a call is parked in its async approver: the same thread (a
// current-thread runtime) polls other tasks meanwhile, and a thread spawned by the approver future.
// Every one of them is outside any gate: `NO_GATE`.
#[test]
fn atk2_while_a_call_waits_for_its_approver_its_gate_leaks_to_no_other_task_or_thread() {
    let _serial = serial();
    let thread_result: Arc<Mutex<Option<DenialCode>>> = Arc::new(Mutex::new(None));
    let slot: Arc<Mutex<Option<tokio::sync::oneshot::Receiver<Approval>>>> =
        Arc::new(Mutex::new(None));
    let asked = Arc::new(AtomicUsize::new(0));
    let (s, a, t) = (slot.clone(), asked.clone(), thread_result.clone());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("waits", move |_| {
            a.fetch_add(1, SeqCst);
            let rx = s.lock().unwrap().take();
            let t = t.clone();
            Box::pin(async move {
                // A thread spawned from inside the approver does not inherit the gate.
                let code = std::thread::spawn(|| read_sync().unwrap_err().code())
                    .join()
                    .unwrap();
                *t.lock().unwrap() = Some(code);
                rx.unwrap().await.unwrap_or(Approval::Reject("gone".into()))
            })
        }))
        .build()
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    *slot.lock().unwrap() = Some(rx);
    let before = (WIRE.load(SeqCst), SYNC_WIRE.load(SeqCst));
    current_thread().block_on(async {
        let parked = tokio::spawn(gate.scope(wire("parked".into(), 1)));
        while asked.load(SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // Same thread, outside the scope, while the scoped call is parked.
        assert_eq!(read_sync().unwrap_err().code(), DenialCode::NoGate);
        assert_eq!(read().await.unwrap_err().code(), DenialCode::NoGate);
        let other = tokio::spawn(async {
            (
                read_sync().map_err(|d| d.code()),
                read().await.map_err(|d| d.code()),
                sync_wire("other".into(), 2).map_err(|d| d.code()),
                wire("other".into(), 2).await.map_err(|d| d.code()),
            )
        })
        .await
        .unwrap();
        assert_eq!(
            other,
            (
                Err(DenialCode::NoGate),
                Err(DenialCode::NoGate),
                Err(DenialCode::NoGate),
                Err(DenialCode::NoGate)
            )
        );
        tx.send(Approval::Approve).unwrap();
        assert_eq!(parked.await.unwrap().unwrap(), 1);
        assert_eq!(read_sync().unwrap_err().code(), DenialCode::NoGate);
    });
    assert_eq!(*thread_result.lock().unwrap(), Some(DenialCode::NoGate));
    assert_eq!(
        (WIRE.load(SeqCst), SYNC_WIRE.load(SeqCst)),
        (before.0 + 1, before.1)
    );
}

// Attacks: a `Scoped` future moved across threads on a multi-thread runtime while its async approver
// sleeps (so it resumes on whichever worker), whose body calls another tool. The body must still be under
// its gate, and once done the gate must not be left on any worker.
#[test]
fn atk2_a_scoped_future_moved_across_threads_keeps_its_gate_and_leaves_it_nowhere() {
    let _serial = serial();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(async_fn("sleepy", |_| {
            Box::pin(async {
                for _ in 0..5 {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    tokio::task::yield_now().await;
                }
                Approval::Approve
            })
        }))
        .build()
        .unwrap();
    let rt = runtime(2);
    let before = WIRE_THEN_READ.load(SeqCst);
    let results = rt.block_on(async {
        let calls: Vec<_> = (0..16)
            .map(|i| {
                let scoped = gate.scope(wire_then_read(format!("acct-{i}")));
                // Moved to another thread before its first poll, then spawned from there.
                std::thread::spawn(move || scoped).join().unwrap()
            })
            .map(tokio::spawn)
            .collect();
        let mut results = Vec::new();
        for call in calls {
            results.push(call.await.unwrap().map_err(|d| d.code()));
        }
        results
    });
    assert!(results.iter().all(|r| *r == Ok(7)), "{results:?}");
    assert_eq!(WIRE_THEN_READ.load(SeqCst) - before, 16);
    // No worker kept the gate: unscoped calls on every worker are refused.
    let leaks = rt.block_on(async {
        let probes: Vec<_> = (0..32)
            .map(|_| {
                tokio::spawn(async {
                    (
                        read_sync().map_err(|d| d.code()),
                        wire("leak".into(), 0).await.map_err(|d| d.code()),
                    )
                })
            })
            .collect();
        let mut leaks = 0;
        for probe in probes {
            let (a, b) = probe.await.unwrap();
            leaks += usize::from(a != Err(DenialCode::NoGate));
            leaks += usize::from(b != Err(DenialCode::NoGate));
        }
        leaks
    });
    assert_eq!(leaks, 0, "a worker kept the gate after its future finished");
}
