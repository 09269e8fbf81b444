//! Guarantee 8 (The audit `enter` record is written before the body runs), against holes found by
//! review, each reproduced as an outside attacker would write it.
//! Each test asserts the guarantee: it passes when the attack fails.

use serde_json::Value;
use toolgate::audit::{MemorySink, Stage};
use toolgate::{AllowAllApprover, Gate, Mode};

use crate::common::gates;
use crate::common::serial;
use crate::fixtures::regressions::*;

// Finding: nested gates write their `enter` records one after the other; when an inner gate's sink
// fails, the call is refused AUDIT_UNAVAILABLE but the outer gate's `enter` record, written already, is
// never closed: its log says a call started that never ends.
#[test]
fn an_inner_sink_failure_closes_the_outer_gates_enter_record() {
    let _serial = serial();
    let sink = MemorySink::new();
    let outer = gates::audited(Mode::PartialAuto, sink.clone());
    // The outer gate alone runs the call.
    assert_eq!(outer.run(|| tag(1)).unwrap(), 1);
    sink.take();

    let inner = gates::audited(Mode::PartialAuto, Broken);
    let before = count(&TAGS);
    let result = outer.run(|| inner.run(|| tag(2)));
    assert_eq!(count(&TAGS), before, "the body must not run");
    assert_eq!(refusal_code(result), "AUDIT_UNAVAILABLE");

    let records = sink.records();
    for exit in exits_of_every_enter(&records, "regress.tag") {
        assert_eq!(exit["outcome"], "refused", "{exit}");
        assert_eq!(exit["code"], "AUDIT_UNAVAILABLE", "{exit}");
    }
    assert!(
        records
            .iter()
            .any(|r| r.tool == "regress.tag" && r.code.as_deref() == Some("AUDIT_UNAVAILABLE")),
        "the outer log says why the call did not run: {:#?}",
        records.iter().map(to_json).collect::<Vec<_>>()
    );
}

// Finding: when an inner gate refuses a call that an outer audited gate allowed, the outer gate records
// nothing at all: its log does not show the call.
#[test]
fn a_refusal_by_an_inner_gate_is_recorded_by_the_outer_audited_gate() {
    let _serial = serial();
    let sink = MemorySink::new();
    let outer = gates::approved_audited(Mode::FullAuto, AllowAllApprover, sink.clone());
    let inner = Gate::new(Mode::Shadow).unwrap();
    let before = count(&WIPES);
    let result = outer.run(|| inner.run(|| wipe(3)));
    assert_eq!(count(&WIPES), before, "the body must not run");
    assert_eq!(refusal_code(result), "MODE_NOT_ALLOWED");

    let records = sink.records();
    let shown: Vec<Value> = records.iter().map(to_json).collect();
    assert!(
        records.iter().any(|r| r.stage == Stage::Refused
            && r.tool == "regress.wipe"
            && r.code.as_deref() == Some("MODE_NOT_ALLOWED")),
        "the outer gate's log holds the inner gate's refusal: {shown:#?}"
    );
    exits_of_every_enter(&records, "regress.wipe");
}

// Every `enter` gets an `exit`, and the promotion report counts a call refused after its `enter` as
// refused, not allowed.
#[test]
fn the_promotion_report_counts_a_call_refused_after_its_enter_as_refused() {
    let _serial = serial();
    let sink = MemorySink::new();
    let gate = self_lowering_gate(Some(sink.clone()));
    let runs = count(&ASYNC_RUNS);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_refused_by_the_mode(runtime.block_on(gate.scope(delete_volume(1))));
    assert_eq!(count(&ASYNC_RUNS), runs);
    let records = sink.records();
    let report = toolgate::audit::PromotionReport::from_records(&records);
    let allowed: u64 = report.rows().map(|row| row.allowed).sum();
    let refused: u64 = report
        .rows()
        .map(|row| row.refused.values().sum::<u64>())
        .sum();
    assert_eq!((allowed, refused), (0, 1), "{report}");
}
