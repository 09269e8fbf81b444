//! Guarantee 5 (Nested gates intersect), against tools handed to a rig agent, tool definitions for
//! model APIs, and the tracing sink's spans.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(feature = "rig")]

use serde_json::json;
use toolgate::{Gate, Mode};

use crate::fixtures::integrations::*;

/// Tries: a rig call whose gate allows it, run inside another gate's scope that refuses it (nested
/// gates), with the allowing gate's sink a tracing sink: a span left open, or a refusal without
/// `error.type`. Guarantee 5 and 8: a call must pass every gate; every `enter` gets its `exit`, and a
/// refusal by another gate is recorded in the log of the gate that allowed it, with its code.
#[test]
fn i16_a_nested_gate_refusal_closes_the_allowing_gates_span() {
    let (partial, memory) = traced_gate(Mode::PartialAuto);
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let mut code = None;
    let spans = exported(|| {
        runtime().block_on(async {
            let tools = iatk(&partial);
            let result = shadow
                .scope(run(&tools, "iatk.edit", json!({"id": 1601, "text": "x"})))
                .await;
            code = Some(refusal(result).code().map(str::to_owned));
        });
    });
    assert_eq!(ran("edit", 1601), 0, "the outer gate's refusal was skipped");
    assert_eq!(code.flatten().as_deref(), Some("MODE_NOT_ALLOWED"));
    let records = memory.records();
    every_enter_has_its_exit(&records);
    let recorded = records.iter().filter(|r| r.tool == "iatk.edit").count();
    let edit = tool_spans(&spans, "iatk.edit");
    if recorded > 0 {
        assert_eq!(
            edit.len(),
            1,
            "the allowing gate's span is left open: {records:#?}"
        );
    }
    assert_each_refused(&edit);
}
