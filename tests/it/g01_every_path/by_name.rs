//! Guarantee 1 (Every path into a tool's body passes the gate), against calls by name
//! (`registry().call`), with hooks fired from the user code a call runs.
//! Each test asserts the guarantee: it passes when the attack fails.

use serde_json::json;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::task::Poll;
use toolgate::audit::Outcome;
use toolgate::{Approval, ApprovalRequest, Mode, registry};

use crate::common::gates;
use crate::fixtures::by_name::*;

// ---------------------------------------------------------------------------------------------------------
// attacks
// ---------------------------------------------------------------------------------------------------------

/// (1) the gate first: a refused tool answers its refusal whatever its arguments, without a digest.
#[test]
fn a1_refused_tool_refuses_before_parsing_and_no_digest() {
    let _s = serial();
    let (gate, sink) = fresh(Mode::Shadow);
    let parsed = Arc::new(AtomicUsize::new(0));
    let p = parsed.clone();
    arm(&DE_HOOK, 1, move || {
        p.fetch_add(1, SeqCst);
    });
    for args in [
        json!({"x": 1}),
        json!({"x": "bad"}),
        json!({"zz": 1}),
        json!(null),
    ] {
        for id in ["rt2.lo", "rt2.hi", "rt2.glo", "rt2.esc_lo", "rt2set.assoc"] {
            let e = call(&gate, id, args.clone()).unwrap_err();
            assert_eq!(e.code(), "MODE_NOT_ALLOWED", "{id} {args}");
        }
        let e = block_on(registry().call(&gate, "rt2.alo", args.clone())).unwrap_err();
        assert_eq!(e.code(), "MODE_NOT_ALLOWED");
    }
    assert_eq!(
        parsed.load(SeqCst),
        0,
        "arguments were parsed for a refused tool"
    );
    for r in sink.0.records() {
        assert!(
            r.arguments_digest.is_none() && r.arguments.is_none(),
            "{r:?}"
        );
    }
    assert!(take_runs().is_empty());
}

/// A `Deserialize` that enters another (wider) gate, or calls tools directly and by name.
#[test]
fn a3_deserialize_entering_gates_and_calling_tools() {
    let _s = serial();
    let (gate, sink) = fresh(Mode::Advisory);
    let wide_gate = gates::approved(Mode::FullAuto, counting_approver);
    *WIDE.lock().unwrap() = Some(wide_gate.clone());
    let w = wide_gate.clone();
    arm(&DE_HOOK, 1, move || {
        // inside the parse of an ADVISORY call: a wider gate runs a direct call and a call by name
        let _ = w.run(|| lo(Evil(100)));
        let _ = call(&w, "rt2.lo", json!({"x": 101}));
    });
    // lo is LOW_WRITE: refused at ADVISORY before parsing, so the hook must not even fire
    let r = call(&gate, "rt2.lo", json!({"x": 5}));
    assert_eq!(r.unwrap_err().code(), "MODE_NOT_ALLOWED");
    assert!(take_runs().is_empty());
    assert_balanced(&sink.0.records());
    disarm_all();
}

/// Serialize, escalate or a sink calling the same tool directly, at each point of the call by name:
/// the nested call never takes the decision made for the outer one.
#[test]
fn a4_user_code_calling_the_same_tool_directly_does_not_take_the_handed_decision() {
    let _s = serial();
    for (hook, hname) in [(&SER_HOOK, "ser"), (&SINK_HOOK, "sink")] {
        for nth in 1..=6 {
            let (gate, sink) = fresh(Mode::FullAuto);
            let g = gate.clone();
            arm(hook, nth, move || {
                let _ = g.run(|| hi(Evil(666)));
            });
            let r = call(&gate, "rt2.hi", json!({"x": 1}));
            disarm_all();
            let runs = take_runs();
            let approvals = APPROVALS.load(SeqCst);
            assert_eq!(
                runs.len(),
                approvals,
                "{hname}@{nth}: runs {runs:?} on {approvals} approvals ({r:?})"
            );
            assert!(runs.len() <= 2);
            assert_balanced(&sink.0.records());
        }
    }
    // escalate: the nested direct call of x=1 is HIGH_WRITE, above PARTIAL_AUTO's ceiling
    for nth in 1..=4 {
        let (gate, sink) = fresh(Mode::PartialAuto);
        let g = gate.clone();
        arm(&ESC_HOOK, nth, move || {
            let r = g.run(|| esc_lo(Evil(1)));
            assert_eq!(r.unwrap_err().code(), "ABOVE_CEILING");
        });
        let r = call(&gate, "rt2.esc_lo", json!({"x": 5}));
        disarm_all();
        let runs = take_runs();
        assert_eq!(runs, vec![("esc_lo", 5)], "esc@{nth}: {r:?}");
        assert_balanced(&sink.0.records());
    }
}

/// An async call's future polled on another thread runs once; dropped midway it is cancelled.
#[test]
fn a9_async_future_on_another_thread_and_dropped() {
    let _s = serial();
    let (gate, sink) = fresh(Mode::PartialAuto);
    let fut = registry().call(&gate, "rt2.alo", json!({"x": 9}));
    let r = std::thread::spawn(move || block_on(fut)).join().unwrap();
    assert_eq!(r.unwrap(), json!(9));
    let mut fut = registry().call(&gate, "rt2.alo", json!({"x": 1000}));
    assert!(poll_once(&mut fut).is_pending());
    drop(fut);
    assert_eq!(take_runs(), vec![("alo", 9)]);
    let recs = sink.0.records();
    assert_balanced(&recs);
    assert!(
        recs.iter().any(|r| r.outcome == Some(Outcome::Cancelled)),
        "{recs:#?}"
    );
}

/// An approver that calls the same tool by name: each run has its own approval.
#[test]
fn a10_approver_calling_the_same_tool_by_name() {
    let _s = serial();
    reset();
    static DEPTH: AtomicUsize = AtomicUsize::new(0);
    let sink = HookSink::default();
    let gate = gates::approved_audited(
        Mode::FullAuto,
        |req: &ApprovalRequest<'_>| {
            APPROVALS.fetch_add(1, SeqCst);
            if DEPTH.fetch_add(1, SeqCst) == 0 {
                let g = wide();
                let _ = call(&g, req.tool.id, json!({"x": 55}));
                let _ = g.run(|| hi(Evil(56)));
            }
            Approval::Approve
        },
        sink.clone(),
    );
    *WIDE.lock().unwrap() = Some(gate.clone());
    let r = call(&gate, "rt2.hi", json!({"x": 1}));
    assert_eq!(r.unwrap(), json!(1));
    let runs = take_runs();
    assert_eq!(runs.len(), APPROVALS.load(SeqCst), "{runs:?}");
    assert_balanced(&sink.0.records());
}

/// Panics in Deserialize, Serialize, escalate, an approver and a sink during a call by name leave no
/// decision behind: a later direct call is decided afresh (and rejected), and every enter has an exit.
#[test]
fn a11_panics_during_a_call_by_name_leave_no_decision_behind() {
    let _s = serial();
    let cases: [(&Hook, &str, &str); 3] = [
        (&DE_HOOK, "de", "rt2.hi"),
        (&SER_HOOK, "ser", "rt2.hi"),
        (&SINK_HOOK, "sink", "rt2.hi"),
    ];
    for (hook, hname, id) in cases {
        for nth in 1..=6 {
            let (gate, sink) = fresh(Mode::FullAuto);
            arm(hook, nth, || panic!("hook panics"));
            let r = catch_unwind(AssertUnwindSafe(|| call(&gate, id, json!({"x": 1}))));
            disarm_all();
            let first = take_runs();
            assert!(
                first.len() <= 1 && APPROVALS.load(SeqCst) >= first.len(),
                "{hname}@{nth}: {r:?}"
            );
            REJECT.store(true, SeqCst);
            let after = gate.run(|| hi(Evil(1)));
            let after_name = call(&gate, id, json!({"x": 1}));
            let runs = take_runs();
            assert!(
                runs.is_empty(),
                "{hname}@{nth}: {runs:?} {after:?} {after_name:?}"
            );
            assert_eq!(
                after_name.unwrap_err().code(),
                "APPROVAL_REJECTED",
                "{hname}@{nth}"
            );
            assert_eq!(
                after.unwrap_err().code(),
                "APPROVAL_REJECTED",
                "{hname}@{nth}"
            );
            if hname != "sink" {
                assert_balanced(&sink.0.records());
            } // a panicking sink loses its own record
        }
    }
    for nth in 1..=3 {
        let (gate, sink) = fresh(Mode::PartialAuto);
        arm(&ESC_HOOK, nth, || panic!("escalate panics"));
        let r = catch_unwind(AssertUnwindSafe(|| {
            call(&gate, "rt2.esc_lo", json!({"x": 5}))
        }));
        disarm_all();
        let first_ran = matches!(r, Ok(Ok(_)));
        let after = gate.run(|| esc_lo(Evil(1)));
        assert_eq!(after.unwrap_err().code(), "ABOVE_CEILING", "esc@{nth}");
        assert_eq!(take_runs().len(), usize::from(first_ran), "esc@{nth}");
        assert_balanced(&sink.0.records());
    }
    // a panicking approver
    reset();
    let sink = HookSink::default();
    let gate = gates::approved_audited(
        Mode::FullAuto,
        |_: &ApprovalRequest<'_>| -> Approval { panic!("approver panics") },
        sink.clone(),
    );
    let r = call(&gate, "rt2.hi", json!({"x": 1}));
    assert_eq!(r.unwrap_err().code(), "APPROVAL_REJECTED");
    assert!(take_runs().is_empty());
    assert_balanced(&sink.0.records());
}

/// `#[toolset]` gives its domain to a renamed `tool` and to a tool in a function body.
#[test]
fn a14_renamed_attribute_and_body_tools_get_the_domain() {
    let _s = serial();
    assert!(toolgate::registry().manifest("renamed.rn").is_some());
    assert!(
        toolgate::registry().manifest("renamed.inbody").is_some(),
        "{:?}",
        toolgate::manifests().map(|m| m.id).collect::<Vec<_>>()
    );
    assert!(
        toolgate::registry().manifest("rn").is_none()
            && toolgate::registry().manifest("inbody").is_none()
    );
    let gate = gates::denying(Mode::PartialAuto, "renamed.*");
    assert_eq!(
        call(&gate, "renamed.rn", json!({"x": 1}))
            .unwrap_err()
            .code(),
        "DENY_LISTED"
    );
    assert_eq!(
        call(&gate, "renamed.inbody", json!({"x": 1}))
            .unwrap_err()
            .code(),
        "DENY_LISTED"
    );
    assert_eq!(gate.run(renamed::holder).unwrap_err().code(), "DENY_LISTED");
}

/// Serialize or a sink calling the same tool by name during a call by name: one approval per run.
#[test]
fn b5_user_code_calling_the_same_tool_by_name() {
    let _s = serial();
    for (hook, hname) in [(&SER_HOOK, "ser"), (&SINK_HOOK, "sink"), (&DE_HOOK, "de")] {
        for nth in 1..=6 {
            for id in ["rt2.hi", "rt2.ahi", "rt2set.assoc"] {
                let (gate, sink) = fresh(Mode::FullAuto);
                let g = gate.clone();
                let id2 = id.to_owned();
                arm(hook, nth, move || {
                    let _ = block_on(registry().call(&g, &id2, json!({"x": 666})));
                });
                let r = block_on(registry().call(&gate, id, json!({"x": 1})));
                disarm_all();
                let runs = take_runs();
                assert_eq!(
                    runs.len(),
                    APPROVALS.load(SeqCst),
                    "{hname}@{nth} {id}: {runs:?} {r:?}"
                );
                assert_balanced(&sink.0.records());
            }
        }
    }
}

/// Two async calls by name of one tool interleaved: the second's rejection is its own.
#[test]
fn b6_interleaved_async_calls_by_name() {
    let _s = serial();
    reset();
    let sink = HookSink::default();
    let gate = gates::approved_audited(
        Mode::FullAuto,
        |req: &ApprovalRequest<'_>| {
            APPROVALS.fetch_add(1, SeqCst);
            if APPROVALS.load(SeqCst) == 1 {
                Approval::Approve
            } else {
                Approval::Reject(format!("{:?}", req.arguments_digest))
            }
        },
        sink.clone(),
    );
    let mut f1 = registry().call(&gate, "rt2.ahy", json!({"x": 1}));
    assert!(poll_once(&mut f1).is_pending());
    let mut f2 = registry().call(&gate, "rt2.ahy", json!({"x": 2}));
    let r2 = poll_once(&mut f2);
    let r1 = block_on(f1);
    let r2 = match r2 {
        Poll::Ready(r) => r,
        Poll::Pending => block_on(f2),
    };
    assert_eq!(r1.unwrap(), json!(1));
    assert_eq!(r2.unwrap_err().code(), "APPROVAL_REJECTED");
    // a third, never polled, then a direct call on another thread inside the gate
    let f3 = registry().call(&gate, "rt2.ahy", json!({"x": 3}));
    drop(f3);
    assert_eq!(take_runs(), vec![("ahy", 1)]);
    assert_balanced(&sink.0.records());
}
