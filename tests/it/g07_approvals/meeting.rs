//! What the tests of two features meeting (guarantees 4, 7, 13, 14 and 15) set up again and again:
//! a gate whose approver grants for the session, threads racing a change of the gate, a call held
//! at a pause, and sinks that wait at an `enter` record or fail a stage's first record.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use toolgate::audit::{AuditRecord, Stage};
use toolgate::{Approval, Gate, GateBuilder, Mode};

use crate::fixtures::features_meeting::*;
use crate::g07_approvals::checks::built;

/// A FullAuto gate whose approver (recording what it is asked in `.1`) answers what `.2` holds: at
/// first a grant of the tool for the session.
pub(crate) fn granting() -> (Gate, Asked, Arc<Mutex<Approval>>) {
    granting_with(|b| b)
}

/// [`granting`], with what `more` adds to the gate.
pub(crate) fn granting_with(
    more: impl FnOnce(GateBuilder) -> GateBuilder,
) -> (Gate, Asked, Arc<Mutex<Approval>>) {
    let asked: Asked = Arc::default();
    let reply = answer(for_session());
    let approver = holding_approver(&Pause::new(), &reply, &asked);
    (
        built(Mode::FullAuto, |b| more(b.approver(approver))),
        asked,
        reply,
    )
}

/// Three threads call `gate` (`call(gate, i)` on thread `i`, true when the call ran) until stopped,
/// while `change` runs; a thread gives up after `limit` calls started after the change, if given.
/// Returns how many of the calls started after `change` returned ran.
pub(crate) fn late_runs(
    gate: &Gate,
    call: fn(&Gate, usize) -> bool,
    limit: Option<usize>,
    change: impl FnOnce(),
) -> usize {
    let changed = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let late = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..3)
        .map(|i| {
            let (gate, changed) = (gate.clone(), changed.clone());
            let (stop, late) = (stop.clone(), late.clone());
            spawn(move || {
                let mut after = 0;
                while !stop.load(SeqCst) {
                    let started_after = changed.load(SeqCst);
                    let ran = call(&gate, i);
                    if started_after {
                        after += 1;
                        late.fetch_add(usize::from(ran), SeqCst);
                        if limit.is_some_and(|limit| after > limit) {
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    change();
    changed.store(true, SeqCst);
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, SeqCst);
    for worker in workers {
        worker.join().unwrap();
    }
    late.load(SeqCst)
}

/// Arms `pause`, runs `call` with a clone of `gate` on another thread, and waits until the call is
/// held at `pause`.
pub(crate) fn held_call<T: Send + 'static>(
    pause: &Pause,
    gate: &Gate,
    call: impl FnOnce(&Gate) -> T + Send + 'static,
) -> JoinHandle<T> {
    pause.arm();
    let gate = gate.clone();
    let caller = spawn(move || call(&gate));
    assert!(pause.reached(), "the call is held");
    caller
}

/// A pause, and a sink that waits at it (once armed) while it writes the `enter` record of `tool`.
/// A granting gate whose `enter` records of `pairs.wire` wait at the pause when it is armed, after a
/// first call has been granted: the pause, the sink, the gate and its approver's answer.
pub(crate) fn granted_held_at_wire() -> (Arc<Pause>, Arc<HookSink>, Gate, Arc<Mutex<Approval>>) {
    let (pause, sink) = held_at_enter("pairs.wire");
    let (gate, _, reply) = granting_with(|b| b.audit_shared(sink.clone()));
    gate.run(|| wire(1)).unwrap();
    (pause, sink, gate, reply)
}

pub(crate) fn held_at_enter(tool: &'static str) -> (Arc<Pause>, Arc<HookSink>) {
    let pause = Pause::new();
    let sink = HookSink::new(&pause, is(Stage::Enter, tool));
    (pause, sink)
}

/// A sink that fails the first record of `stage` it is asked to write.
pub(crate) fn failing_first(stage: Stage) -> Arc<HookSink> {
    let sink = HookSink::new(&Pause::new(), move |r: &AuditRecord| r.stage == stage);
    sink.fail.store(1, SeqCst);
    sink
}
