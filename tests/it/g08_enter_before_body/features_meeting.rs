//! Guarantee 8 (The audit `enter` record is written before the body runs), against two stateful
//! features meeting in one process (grants, the latch, budgets and their stores, approvers, nested
//! gates, lowering, sinks), one changing while the other's decision waits.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use serde_json::{Value, json};
use toolgate::audit::{MemorySink, Stage};
use toolgate::{DenialCode, Mode};

use crate::common::gates;
use crate::common::serial;
use crate::fixtures::features_meeting::*;

/// by name × sink (1, 8). A call by name whose arguments carry an unknown key written with bidi and
/// invisible characters is refused at the door (`INVALID_PARAMS`), and its `refused` record holds the
/// path of the problem, never the caller's raw text: no bidi override or invisible character reaches
/// the log, where it could make one record read like another.
#[test]
fn p34_a_door_refusal_writes_no_invisible_or_bidi_text_of_the_caller_to_the_log() {
    let _serial = serial();
    let sink = Arc::new(MemorySink::new());
    let gate = gates::audited_shared(Mode::PartialAuto, sink.clone());
    let evil_key = "te\u{202e}xt\u{200b}";
    let before = count(&POSTS);
    let mut arguments = serde_json::Map::new();
    arguments.insert("text".into(), json!("x"));
    arguments.insert(evil_key.into(), json!("approved by ops\u{2066}"));
    let refused = by_name(&gate, "pairs.post", Value::Object(arguments)).unwrap_err();
    assert_eq!(refused.code(), "INVALID_PARAMS");
    let unknown = by_name(&gate, "pairs.po\u{200b}st", json!({"text": "x"})).unwrap_err();
    assert_eq!(unknown.code(), "UNKNOWN_TOOL");
    assert_eq!(count(&POSTS), before);
    let invisible = |s: &str| {
        s.chars().any(|c| {
            matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
        })
    };
    for record in sink.records() {
        let text = serde_json::to_string(&record).unwrap();
        let decoded: Value = serde_json::from_str(&text).unwrap();
        let flat = decoded.to_string();
        assert!(
            !invisible(&flat)
                && !invisible(&record.tool)
                && !record.message.as_deref().is_some_and(invisible),
            "a record holds the caller's invisible or bidi text: {record:?}"
        );
    }
}

/// sink × grants (7). The approver answers "for the session", then the sink fails the call's `enter`
/// record: the call is refused `AUDIT_UNAVAILABLE`, never reaches its commit point, and so makes no
/// grant; the next call asks the approver again.
#[test]
fn p44_a_grant_whose_call_is_refused_for_its_enter_record_is_never_made() {
    let _serial = serial();
    let sink = HookSink::new(&Pause::new(), is(Stage::Enter, "pairs.wire"));
    sink.fail.store(1, SeqCst);
    let asked: Asked = Arc::default();
    let gate = holding_builder(for_session(), &asked)
        .audit_shared(sink.clone())
        .build()
        .unwrap();
    let before = count(&WIRES);
    assert_eq!(
        gate.run(|| wire(1)).unwrap_err().code(),
        DenialCode::AuditUnavailable
    );
    assert!(
        gate.grants().is_empty(),
        "a grant for a call that never ran"
    );
    gate.run(|| wire(2)).unwrap();
    assert_eq!(asked.lock().unwrap().len(), 2, "asked again");
    assert_eq!(count(&WIRES), before + 1);
}
