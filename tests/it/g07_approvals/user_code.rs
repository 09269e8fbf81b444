//! Guarantee 7 (Approvals are single-use, bound and expiring), against user code that runs between
//! a decision and a body (sinks, approvers, an argument's `Serialize`, `escalate`), in every
//! declaration form.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use toolgate::audit::Stage;
use toolgate::{Approval, ApprovalRequest, Denied, Gate, Mode};

use crate::common::gates;
use crate::fixtures::user_code::*;
use crate::g07_approvals::checks::built;

/// Calls `first` through `gate`; if it waits for a two-step approval, approves it and returns what
/// `other` (another call, which the approval must not cover) answered. A call that cannot be
/// approved in two steps holds the guarantee too: noted (`what` names it), and `None`.
fn approved_then<T: Debug, U>(
    gate: &Gate,
    first: impl FnOnce() -> Result<T, Denied>,
    other: impl FnOnce() -> Result<U, Denied>,
    what: &str,
) -> Option<Result<U, Denied>> {
    match first() {
        Err(d) if d.approval_token().is_some() => {
            gate.approve(d.approval_token().unwrap()).unwrap();
            Some(other())
        }
        other => {
            eprintln!("{what} not approvable (holds): {other:?}");
            None
        }
    }
}

#[test]
fn g7_an_approval_with_an_unserializable_argument_does_not_run_another_one() {
    let _s = serial();
    let gate = two_step();
    let staging = || gate.run(|| two_noser(Conn("staging"), "users".into()));
    let production = || gate.run(|| two_noser(Conn("production"), "users".into()));
    if let Some(other) = approved_then(&gate, staging, production, "Conn") {
        assert!(
            !TWO_NOSER.lock().unwrap().contains(&"production"),
            "an approval given for Conn(staging) ran Conn(production): {other:?}"
        );
    }
    let gate = two_step();
    if let Err(d) = gate.run(|| two_impl("staging"))
        && let Some(t) = d.approval_token()
    {
        gate.approve(t).unwrap();
        let r = gate.run(|| two_impl("production"));
        assert!(
            !TWO_IMPL.lock().unwrap().contains(&"production".to_string()),
            "impl Trait argument: {r:?}"
        );
    }
}

#[test]
fn g7_an_approved_call_that_calls_itself_runs_once() {
    let _s = serial();
    let gate = two_step();
    TWO_REC.store(0, SeqCst);
    let t = token_of(gate.run(|| two_rec(5)));
    TWO_REC.store(0, SeqCst);
    gate.approve(&t).unwrap();
    take_events();
    let r = gate.run(|| two_rec(5));
    assert!(r.is_ok());
    assert_eq!(
        TWO_REC.load(SeqCst),
        1,
        "the approved call ran again from its own body: {:?}",
        take_events()
    );
}

#[test]
fn g7_an_approval_runs_once_under_concurrent_calls_and_a_slow_sink() {
    let _s = serial();
    let (sink, _mem) = hook_sink(|r| {
        if r.stage == Stage::Enter {
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    });
    let gate = gates::two_step_audited(Mode::FullAuto, sink);
    let t = token_of(gate.run(|| two_slow(7)));
    gate.approve(&t).unwrap();
    let before = TWO_SLOW.load(SeqCst);
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let hs: Vec<_> = (0..8)
        .map(|_| {
            let (g, b) = (gate.clone(), barrier.clone());
            std::thread::spawn(move || {
                b.wait();
                g.run(|| two_slow(7)).map_err(|d| d.code().as_str())
            })
        })
        .collect();
    let rs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(TWO_SLOW.load(SeqCst) - before, 1, "{rs:?}");
}

#[test]
fn g7_duplicate_keys_from_a_flattened_map_do_not_collapse() {
    let _s = serial();
    let gate = two_step();
    let extra: BTreeMap<String, u32> = [("amount".to_string(), 1)].into();
    let small = Flat {
        amount: 1,
        extra: extra.clone(),
    };
    let big = Flat {
        amount: 1_000_000,
        extra,
    };
    // Two values with one key twice cannot be written canonically: not bound, so not approvable.
    let first = gate.run(|| two_flat(small.clone())).unwrap_err();
    assert_eq!(first.code().as_str(), "APPROVAL_REQUIRED");
    assert!(first.approval_token().is_none());
    let r = gate.run(|| two_flat(big.clone()));
    assert!(
        !TWO_FLAT.lock().unwrap().contains(&1_000_000),
        "amount=1000000 ran: {r:?}"
    );
}

#[test]
fn g7_large_integers_bind_exactly() {
    let _s = serial();
    let gate = two_step();
    let a = u64::MAX as u128 + 1;
    let b = u128::MAX;
    if let Some(other) = approved_then(
        &gate,
        || gate.run(|| two_big(a)),
        || gate.run(|| two_big(b)),
        "u128",
    ) {
        assert!(
            !TWO_BIG.lock().unwrap().contains(&b),
            "approved {a}, ran {b}: {other:?}"
        );
    }
}

#[test]
fn g7_a_generic_receiver_is_bound() {
    let _s = serial();
    let gate = two_step();
    let staging = GDb {
        name: "staging".to_string(),
    };
    let production = GDb {
        name: "production".to_string(),
    };
    if let Some(other) = approved_then(
        &gate,
        || gate.run(|| staging.gdrop()),
        || gate.run(|| production.gdrop()),
        "generic receiver",
    ) {
        assert!(
            !GDROP.lock().unwrap().contains(&"production".to_string()),
            "{other:?}"
        );
    }
}

#[test]
fn g7_a_boxed_or_arced_receiver_is_bound() {
    let _s = serial();
    let gate = two_step();
    if let Some(other) = approved_then(
        &gate,
        || gate.run(|| Box::new(BDb { name: "staging" }).bdrop()),
        || gate.run(|| Box::new(BDb { name: "production" }).bdrop()),
        "Box<Self>",
    ) {
        assert!(
            !BDROP.lock().unwrap().contains(&"production"),
            "Box<Self>: {other:?}"
        );
    }
    let gate = two_step();
    if let Some(other) = approved_then(
        &gate,
        || gate.run(|| Arc::new(BDb { name: "staging2" }).adrop()),
        || {
            gate.run(|| {
                Arc::new(BDb {
                    name: "production2",
                })
                .adrop()
            })
        },
        "Arc<Self>",
    ) {
        assert!(
            !BDROP.lock().unwrap().contains(&"production2"),
            "Arc<Self>: {other:?}"
        );
    }
}

#[test]
fn g7_a_token_of_one_gate_approves_nothing_on_another() {
    let _s = serial();
    let a = two_step();
    let b = two_step();
    let t = token_of(a.run(|| two_slow(99)));
    let _ = token_of(b.run(|| two_slow(99)));
    assert!(b.approve(&t).is_err());
    let before = TWO_SLOW.load(SeqCst);
    let _ = b.run(|| two_slow(99));
    assert_eq!(TWO_SLOW.load(SeqCst), before);
}

#[test]
fn g7_nested_two_step_gates_each_need_their_approval_and_run_once() {
    let _s = serial();
    let outer = two_step();
    let inner = two_step();
    let before = TWO_SLOW.load(SeqCst);
    let mut rounds = vec![];
    for _ in 0..8 {
        match outer.run(|| inner.run(|| two_slow(1234))) {
            Ok(()) => break,
            Err(d) => {
                let t = d.approval_token().expect("token").to_string();
                rounds.push((outer.approve(&t).is_ok(), inner.approve(&t).is_ok()));
            }
        }
    }
    eprintln!("approval rounds (outer ok, inner ok): {rounds:?}");
    assert!(TWO_SLOW.load(SeqCst) - before <= 1);
    let _ = outer.run(|| inner.run(|| two_slow(1234)));
    assert!(TWO_SLOW.load(SeqCst) - before <= 1, "ran twice");
}

#[test]
fn g7_a_call_from_inside_the_approval_granted_record_runs_at_most_once() {
    let _s = serial();
    let slot: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let s2 = slot.clone();
    let (sink, _mem) = hook_sink(move |r| {
        if r.stage == Stage::ApprovalGranted {
            let g = s2.get().unwrap();
            event(format!(
                "in-sink:{:?}",
                g.run(|| two_slow(4242)).map_err(|d| d.code().as_str())
            ));
        }
        Ok(())
    });
    let gate = gates::two_step_audited(Mode::FullAuto, sink);
    slot.set(gate.clone()).unwrap();
    let t = token_of(gate.run(|| two_slow(4242)));
    let before = TWO_SLOW.load(SeqCst);
    take_events();
    let (tx, rx) = std::sync::mpsc::channel();
    let g = gate.clone();
    std::thread::spawn(move || {
        let a = g.approve(&t).is_ok();
        let r = g.run(|| two_slow(4242)).map_err(|d| d.code().as_str());
        tx.send((a, r)).unwrap();
    });
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("deadlock in approve");
    assert!(
        TWO_SLOW.load(SeqCst) - before <= 1,
        "{got:?} {:?}",
        take_events()
    );
}

#[test]
fn g7_a_call_from_inside_an_arguments_serialize_does_not_double_an_approval() {
    let _s = serial();
    let gate = two_step();
    let t = token_of(gate.run(|| high_trig(Trig(30, "same"))));
    gate.approve(&t).unwrap();
    let once = Arc::new(AtomicBool::new(false));
    let o = once.clone();
    let g = gate.clone();
    set_hook(30, move || {
        if !o.swap(true, SeqCst) {
            event(format!(
                "inner:{:?}",
                g.run(|| high_trig(Trig(31, "same")))
                    .map_err(|d| d.code().as_str())
            ));
        }
    });
    take_events();
    let before = HIGH_TRIG.load(SeqCst);
    let r = gate.run(|| high_trig(Trig(30, "same")));
    clear_hook(30);
    assert!(
        HIGH_TRIG.load(SeqCst) - before <= 1,
        "{r:?} {:?}",
        take_events()
    );
}

#[test]
fn g7_approvals_expire() {
    let _s = serial();
    let gate = built(Mode::FullAuto, |b| {
        b.two_step_approvals()
            .approval_ttl(Duration::from_millis(30))
    });
    let t = token_of(gate.run(|| two_slow(555)));
    gate.approve(&t).unwrap();
    std::thread::sleep(Duration::from_millis(80));
    let before = TWO_SLOW.load(SeqCst);
    assert_eq!(
        gate.run(|| two_slow(555)).unwrap_err().code().as_str(),
        "APPROVAL_EXPIRED"
    );
    assert_eq!(TWO_SLOW.load(SeqCst), before);
}

#[test]
fn g7_a_redacted_value_reaches_no_record_message_request_or_debug() {
    let _s = serial();
    // Not digits alone: four digits turn up by chance in a timestamp's microseconds or a digest.
    let pins = ["pin-zq4711", "pin-zq9382"];
    let mut digests: Vec<Vec<String>> = vec![];
    let mut outputs: Vec<String> = vec![];
    for pin in pins {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let s2 = seen.clone();
        let (sink, mem) = hook_sink(|_| Ok(()));
        let approver_gate = built(Mode::FullAuto, |b| {
            b.audit(sink).approver(move |r: &ApprovalRequest<'_>| {
                s2.lock().unwrap().push(format!("{r:?}"));
                Approval::Reject("no".into())
            })
        });
        let d1 = approver_gate
            .run(|| secret("ada".into(), pin.into()))
            .unwrap_err();
        let (sink2, mem2) = hook_sink(|_| Ok(()));
        let ts = gates::two_step_audited(Mode::FullAuto, sink2);
        let d2 = ts.run(|| secret("ada".into(), pin.into())).unwrap_err();
        let tok = d2.approval_token().unwrap().to_string();
        let dbg_gate_pending = format!("{ts:?}");
        ts.approve(&tok).unwrap();
        let by_name = toolgate::registry()
            .call(
                &ts,
                "rt.secret",
                serde_json::json!({"user": "ada", "pin": pin}),
            )
            .now()
            .unwrap();
        let _ = ts.run(|| secret("ada".into(), pin.into()));
        let mut out = String::new();
        for r in mem.records().iter().chain(mem2.records().iter()) {
            out += &serde_json::to_string(r).unwrap();
            out += &format!("{r:?}");
        }
        out += &format!(
            "{d1:?}{d1}{d2:?}{d2}{}{}{dbg_gate_pending}{ts:?}{by_name:?}",
            d1.message(),
            d2.message()
        );
        out += &seen.lock().unwrap().join("|");
        out += &serde_json::to_string(&d2).unwrap();
        assert!(
            pin_free(&out, pin),
            "the pin {pin} appears in records/messages/Debug"
        );
        let mut ds: Vec<String> = mem
            .records()
            .iter()
            .chain(mem2.records().iter())
            .map(|r| format!("{:?}|{:?}|{:?}", r.stage, r.arguments_digest, r.arguments))
            .collect();
        ds.extend(seen.lock().unwrap().iter().cloned());
        digests.push(ds);
        outputs.push(dbg_gate_pending);
    }
    assert_eq!(
        digests[0], digests[1],
        "a digest shown to records or approvers depends on the redacted pin"
    );
    eprintln!("gate Debug with a pending request: {}", outputs[0]);
}

#[test]
fn g7_a_redacted_value_sent_with_the_wrong_type_is_not_echoed() {
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let r = toolgate::registry()
        .call(
            &gate,
            "rt.secret_num",
            serde_json::json!({"pin": "4711-secret"}),
        )
        .now()
        .unwrap();
    let e = r.unwrap_err();
    let shown = format!("{e}{e:?}{}", serde_json::to_string(&e).unwrap());
    assert!(
        !shown.contains("4711-secret"),
        "a redacted argument's value is echoed in the INVALID_PARAMS error: {shown}"
    );
}

#[test]
fn g7_an_invalid_redacted_argument_leaves_no_trace_in_the_audit_log() {
    let (sink, mem) = hook_sink(|_| Ok(()));
    let gate = gates::audited(Mode::PartialAuto, sink);
    let _ = toolgate::registry()
        .call(
            &gate,
            "rt.secret_num",
            serde_json::json!({"pin": "4711-secret"}),
        )
        .now();
    let all: String = mem
        .records()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    assert!(!all.contains("4711-secret"), "{all}");
}

#[test]
fn g7_the_token_is_not_in_debug_output() {
    let _s = serial();
    let gate = two_step();
    let d = gate.run(|| two_slow(31337)).unwrap_err();
    let t = d.approval_token().unwrap().to_string();
    let shown = format!("{d:?}");
    assert!(
        !shown.contains(&t),
        "Denied's Debug carries the operator's token: {shown}"
    );
    let ce = toolgate::CallError::Denied(d);
    assert!(!format!("{ce:?}{ce}").contains(&t));
}

#[test]
fn g7_a_redacted_argument_is_still_bound() {
    let _s = serial();
    let gate = two_step();
    let before = SECRET.load(SeqCst);
    let d = gate
        .run(|| secret("ada".into(), "1111".into()))
        .unwrap_err();
    gate.approve(d.approval_token().unwrap()).unwrap();
    let r = gate.run(|| secret("ada".into(), "2222".into()));
    assert_eq!(r.unwrap_err().code().as_str(), "APPROVAL_PENDING");
    assert_eq!(SECRET.load(SeqCst), before);
}

#[test]
fn g7_an_approval_of_a_generic_tool_does_not_run_another_type_that_serializes_alike() {
    let _s = serial();
    let gate = two_step();
    let r = gate.run(|| apply_migration(DryRun, "drop_users".into()));
    let d = r.unwrap_err();
    gate.approve(d.approval_token().expect("token")).unwrap();
    let r = gate.run(|| apply_migration(Execute, "drop_users".into()));
    assert!(
        !APPLY.lock().unwrap().contains(&"execute"),
        "approved apply_migration(DryRun, ..), ran apply_migration(Execute, ..): {r:?}"
    );
}
