//! Guarantee 7 (Approvals are single-use, bound and expiring), against calls by name
//! (`registry().call`), with hooks fired from the user code a call runs.
//! Each test asserts the guarantee: it passes when the attack fails.

use serde_json::json;
use std::sync::atomic::Ordering::SeqCst;
use toolgate::Mode;
use toolgate::audit::AuditRecord;

use crate::common::gates;
use crate::fixtures::by_name::*;

/// The same with two-step approvals: an approval for x=1 runs x=1 once and nothing else.
#[test]
fn a5_two_step_approval_by_name_runs_once_and_only_its_call() {
    let _s = serial();
    for (hook, hname) in [(&SER_HOOK, "ser"), (&SINK_HOOK, "sink")] {
        for nth in 1..=6 {
            reset();
            let sink = HookSink::default();
            let gate = gates::two_step_audited(Mode::FullAuto, sink.clone());
            let e = call(&gate, "rt2.hi", json!({"x": 1})).unwrap_err();
            let token = e.denied().unwrap().approval_token().unwrap().to_owned();
            gate.approve(&token).unwrap();
            let g = gate.clone();
            arm(hook, nth, move || {
                let _ = g.run(|| hi(Evil(666)));
                let _ = call(&g, "rt2.hi", json!({"x": 1}));
            });
            let r = call(&gate, "rt2.hi", json!({"x": 1}));
            disarm_all();
            let again = call(&gate, "rt2.hi", json!({"x": 1}));
            let runs = take_runs();
            assert_eq!(runs, vec![("hi", 1)], "{hname}@{nth}: {r:?} / {again:?}");
            assert_balanced(&sink.0.records());
        }
    }
}

/// What two calls audited alike have alike in their records: stages, arguments and their digest,
/// risks and decisions.
fn audited_alike(records: &[AuditRecord]) -> Vec<impl PartialEq + std::fmt::Debug + use<>> {
    let key = |r: &AuditRecord| {
        let arguments = (r.arguments.clone(), r.arguments_digest.clone());
        (r.stage, arguments, r.effective_risk, r.decision)
    };
    records.iter().map(key).collect()
}

/// Redacted, recorded arguments by name are audited like the same direct call, secret never shown.
#[test]
fn a13_redacted_arguments_by_name_match_a_direct_call() {
    let _s = serial();
    let (gate, sink) = audited(Mode::FullAuto);
    reset();
    call(&gate, "rt2.red", json!({"user": "ada", "pin": 4242})).unwrap();
    let by_name = sink.0.take();
    gate.run(|| red("ada".into(), Evil(4242))).unwrap();
    let direct = sink.0.take();
    assert_eq!(audited_alike(&by_name), audited_alike(&direct));
    for r in by_name.iter().chain(&direct) {
        assert!(
            !r.arguments.as_deref().unwrap_or("").contains("4242"),
            "{r:?}"
        );
    }
    // a bad redacted value is not quoted back
    let e = call(&gate, "rt2.red", json!({"user": "ada", "pin": "s3cr3t"})).unwrap_err();
    assert!(!e.to_string().contains("s3cr3t"), "{e}");
    assert_eq!(APPROVALS.load(SeqCst), 2);
}

/// A body calling itself by name with the same arguments under a two-step gate needs its own approval.
#[test]
fn b2_self_call_by_name_needs_its_own_approval() {
    let _s = serial();
    for x in [1u64, 2] {
        reset();
        let gate = gates::two_step(Mode::FullAuto);
        *WIDE.lock().unwrap() = Some(gate.clone());
        let e = call(&gate, "rt2.selfy", json!({"x": x})).unwrap_err();
        gate.approve(e.denied().unwrap().approval_token().unwrap())
            .unwrap();
        let r = call(&gate, "rt2.selfy", json!({"x": x})).unwrap();
        assert_eq!(take_runs(), vec![("selfy", x)], "x={x}: inner said {r}");
        assert!(
            r == json!("APPROVAL_REUSED") || r == json!("APPROVAL_PENDING"),
            "{r}"
        );
    }
}
