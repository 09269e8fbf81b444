//! Guarantee 8 (The audit `enter` record is written before the body runs), against stateful tools:
//! `callable` methods called on an instance, by name and over MCP.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::{Arc, Mutex};

use serde_json::json;
use toolgate::audit::{AuditRecord, Outcome, Stage};
use toolgate::{Mode, registry};

use crate::common::gates;
use crate::fixtures::receivers::*;

/// ATTACKS guarantee 8 for methods by name: the `enter` record is written before the body (the sink checks
/// that no body ran yet when it is written), sync and async; a sink that cannot write refuses the call.
#[test]
fn s29_a_methods_enter_is_written_before_its_body_and_a_failing_sink_refuses() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let v = Arc::clone(&vault);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    *lock(&sink.check) = Some(Box::new(move |_r: &AuditRecord| {
        lock(&s).push(v.ran().len())
    }));
    let gate = gates::audited(Mode::PartialAuto, sink.clone());
    call_now(&gate, &shared(&vault), "atk_vault.peek", json!({})).unwrap();
    block_on(registry().call_with(
        &gate,
        &shared(&vault),
        "atk_vault.stash",
        json!({"item": "i"}),
    ))
    .unwrap();
    assert_eq!(
        *lock(&seen),
        [0, 1],
        "an enter record was written after its body started"
    );
    let records = sink.records();
    assert_balanced(&records);
    assert!(
        records
            .iter()
            .filter(|r| r.stage == Stage::Exit)
            .all(|r| r.outcome == Some(Outcome::Ok))
    );
    let failing = toolgate::audit::MemorySink::new();
    failing.fail(true);
    let gate = gates::audited(Mode::PartialAuto, failing);
    let refused = block_on(registry().call_with(
        &gate,
        &shared(&vault),
        "atk_vault.stash",
        json!({"item": "j"}),
    ));
    assert_eq!(refused.map_err(|e| e.code()), Err("AUDIT_UNAVAILABLE"));
    assert_eq!(vault.ran(), ["peek@staging", "stash:i@staging"]);
}
