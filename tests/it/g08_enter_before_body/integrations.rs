//! Guarantee 8 (The audit `enter` record is written before the body runs), against tools handed to
//! a rig agent, tool definitions for model APIs, and the tracing sink's spans.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(feature = "rig")]

use opentelemetry::trace::Status;
use serde_json::json;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use toolgate::audit::{MemorySink, Outcome, Stage, TracingSink};
use toolgate::{Gate, Mode};

use crate::common::gates;
use crate::fixtures::integrations::*;

/// Tries: the arguments of a tool not declared `record_arguments` reaching a span: an allowed call,
/// an extra key carrying text, a value of the wrong type. Guarantee: arguments only for tools declared
/// `record_arguments`; a refused call by name is recorded with the path of the problem, never the
/// value.
#[test]
fn i13_arguments_not_opted_in_never_reach_a_span() {
    let gate = gates::audited(Mode::Shadow, TracingSink::new());
    let spans = exported(|| {
        runtime().block_on(async {
            let tools = iatk(&gate);
            run(
                &tools,
                "iatk.memo",
                json!({"id": 1301, "text": "PLAIN-ARG-ONE"}),
            )
            .await
            .unwrap();
            for arguments in [
                json!({"id": 1302, "text": "x", "extra": "PLAIN-ARG-TWO"}),
                json!({"id": "PLAIN-ARG-THREE", "text": "x"}),
                json!({"id": 1304, "text": 7_770_777}),
            ] {
                let _ = run(&tools, "iatk.memo", arguments).await.unwrap_err();
            }
            // A refused tool's arguments.
            let _ = run(
                &tools,
                "iatk.edit",
                json!({"id": 1305, "text": "PLAIN-ARG-FIVE"}),
            )
            .await
            .unwrap_err();
        });
    });
    let memos = tool_spans(&spans, "iatk.memo");
    assert_eq!(memos.len(), 4, "one span per call");
    for span in &spans {
        let a = attributes(span);
        if span.name.starts_with("execute_tool iatk.memo")
            || span.name.starts_with("execute_tool iatk.edit")
        {
            assert!(!a.contains_key("gen_ai.tool.call.arguments"), "{a:#?}");
        }
        let shown = everything(span);
        for value in [
            "PLAIN-ARG-ONE",
            "PLAIN-ARG-TWO",
            "PLAIN-ARG-THREE",
            "7770777",
            "PLAIN-ARG-FIVE",
        ] {
            assert!(!shown.contains(value), "a span shows {value}: {shown}");
        }
    }
}

/// Tries: a call refused after its `enter` (the gate lowered while the record was written), through
/// rig: its span left open, or closed without `error.type`. Guarantee: the `exit` of outcome
/// `refused` closes the span; a refusal's span has `error.type` = its code and an error status; the
/// body does not run.
#[test]
fn i14_a_call_refused_after_its_enter_closes_its_span_with_error_type() {
    let memory = MemorySink::new();
    let slot = Arc::new(OnceLock::new());
    let gate = gates::audited(
        Mode::PartialAuto,
        LoweringSink {
            inner: Arc::new(Tee(vec![
                Arc::new(TracingSink::new()),
                Arc::new(memory.clone()),
            ])),
            gate: slot.clone(),
        },
    );
    slot.set(gate.clone()).ok().unwrap();
    let mut code = None;
    let spans = exported(|| {
        runtime().block_on(async {
            let refused = refusal(run(&iatk(&gate), "iatk.poke", json!({"id": 1401})).await);
            code = refused.code().map(str::to_owned);
        });
    });
    assert_eq!(ran("poke", 1401), 0, "the body ran after the lowering");
    let code = code.expect("a code");
    let records = memory.records();
    every_enter_has_its_exit(&records);
    assert!(
        records
            .iter()
            .any(|r| r.stage == Stage::Exit && r.outcome == Some(Outcome::Refused)),
        "{records:#?}"
    );
    let poke = tool_spans(&spans, "iatk.poke");
    assert_eq!(
        poke.len(),
        1,
        "the span was not closed (or two were opened)"
    );
    let a = attributes(poke[0]);
    assert_eq!(a.get("error.type"), Some(&code), "{a:#?}");
    assert!(
        matches!(poke[0].status, Status::Error { .. }),
        "{:?}",
        poke[0].status
    );
}

/// Tries: an async call through rig cancelled mid-body (its future dropped after a timeout): its
/// span left open, its `exit` missing. Guarantee 8: the `exit` record is written however the body
/// ends, dropped futures included (`cancelled`), and it closes the span with `error.type`.
#[test]
fn i15_a_cancelled_rig_call_closes_its_span() {
    let (gate, memory) = traced_gate(Mode::Shadow);
    let spans = exported(|| {
        runtime().block_on(async {
            let tools = iatk(&gate);
            let future = run(&tools, "iatk.hang", json!({"id": 1501}));
            let timed_out = tokio::time::timeout(Duration::from_millis(50), future).await;
            assert!(timed_out.is_err(), "the hang returned");
        });
    });
    assert_eq!(ran("hang-start", 1501), 1, "the body never started");
    let records = memory.records();
    every_enter_has_its_exit(&records);
    assert!(
        records
            .iter()
            .any(|r| r.stage == Stage::Exit && r.outcome == Some(Outcome::Cancelled)),
        "{records:#?}"
    );
    let hang = tool_spans(&spans, "iatk.hang");
    assert_eq!(
        hang.len(),
        1,
        "the span of the cancelled call is still open"
    );
    assert_eq!(
        attributes(hang[0]).get("error.type").map(String::as_str),
        Some("cancelled")
    );
}

/// Tries: a tracing sink teed with a durable log that fails (a full disk): the tracing sink takes
/// the `enter` (opens the span), the other refuses it, and the call is refused `AUDIT_UNAVAILABLE`.
/// The span may then be left open with no `exit` ever coming. Guarantee: the body does not run
/// without its `enter` written; every span opened at an `enter` is closed, and a refusal carries
/// `error.type`.
#[test]
fn i17_a_failed_enter_leaves_no_span_open() {
    let gate = gates::audited(
        Mode::PartialAuto,
        Tee(vec![Arc::new(TracingSink::new()), Arc::new(Unwritable)]),
    );
    let spans = exported(|| {
        runtime().block_on(async {
            let refused =
                refusal(run(&iatk(&gate), "iatk.edit", json!({"id": 1701, "text": "x"})).await);
            assert_eq!(refused.code(), Some("AUDIT_UNAVAILABLE"));
        });
    });
    assert_eq!(ran("edit", 1701), 0, "the body ran without its enter");
    let edit = tool_spans(&spans, "iatk.edit");
    assert!(
        !edit.is_empty(),
        "the span opened at the enter record was never closed"
    );
    assert_each_refused(&edit);
}

/// i17 with the gate's own sinks (`.audit` given twice) rather than a hand-written tee: the failing
/// sink's refusal closes, in the tracing sink, the span its `enter` opened.
#[test]
fn i17_a_failed_enter_in_a_gate_with_two_sinks_leaves_no_span_open() {
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(TracingSink::new())
        .audit(Unwritable)
        .build()
        .unwrap();
    let spans = exported(|| {
        runtime().block_on(async {
            let refused =
                refusal(run(&iatk(&gate), "iatk.edit", json!({"id": 1702, "text": "x"})).await);
            assert_eq!(refused.code(), Some("AUDIT_UNAVAILABLE"));
        });
    });
    assert_eq!(ran("edit", 1702), 0, "the body ran without its enter");
    let edit = tool_spans(&spans, "iatk.edit");
    assert_eq!(
        edit.len(),
        1,
        "the span opened at the enter record is closed"
    );
    let a = attributes(edit[0]);
    assert_eq!(
        a.get("error.type").map(String::as_str),
        Some("AUDIT_UNAVAILABLE"),
        "{a:#?}"
    );
}

/// Tries: an argument's data in the path of an `INVALID_PARAMS` refusal: a map parameter's keys are
/// the caller's values, not the tool's schema, so a bad value under the key `sk-live-...` puts that
/// key in the path: in the span of a tool not opted in to recording arguments, and, for a redacted
/// map, in the span and the model's feedback. Guarantee: arguments only for tools declared
/// `record_arguments`; a refused call by name is recorded "with the path of the problem, never the
/// value"; a redacted parameter's bad value is not quoted back.
#[test]
fn i19_a_map_key_is_argument_data_and_never_reaches_a_span() {
    let gate = gates::audited(Mode::Shadow, TracingSink::new());
    let mut feedback = Vec::new();
    let spans = exported(|| {
        runtime().block_on(async {
            let tools = iatk(&gate);
            let error = refusal(
                run(
                    &tools,
                    "iatk.tag",
                    json!({"tags": {"sk-live-MAPKEY-ONE": "not a number"}}),
                )
                .await,
            );
            assert_eq!(error.code(), Some("INVALID_PARAMS"));
            let error = refusal(
                run(
                    &tools,
                    "iatk.send",
                    json!({"to": "bob", "headers": {"sk-live-MAPKEY-TWO": "not a number"}}),
                )
                .await,
            );
            assert_eq!(error.code(), Some("INVALID_PARAMS"));
            feedback.push(format!(
                "{} {}",
                error.model_feedback().unwrap_or(""),
                error.message()
            ));
        });
    });
    assert_eq!(ran("tag", 1) + ran("send", 1), 0);
    // The redacted map first: its key in the model's feedback or in a span.
    for text in &feedback {
        assert!(
            !text.contains("sk-live-MAPKEY-TWO"),
            "the model reads a redacted argument's key: {text}"
        );
    }
    for key in ["sk-live-MAPKEY-TWO", "sk-live-MAPKEY-ONE"] {
        for span in &spans {
            let shown = everything(span);
            assert!(
                !shown.contains(key),
                "a span shows the map key {key}: {shown}"
            );
        }
    }
}

/// Tries: a body that panics, reached through rig: its `exit` missing, its span left open, the panic
/// taking the audit with it. Guarantee 8: the `exit` record is written however the body ends, panics
/// included (`panic`), and it closes the call's span with `error.type` = `panic`.
#[test]
fn i20_a_panicking_body_through_rig_closes_its_span() {
    let (gate, memory) = traced_gate(Mode::Shadow);
    let spans = exported(|| {
        runtime().block_on(async {
            let tools = iatk(&gate);
            let future =
                std::panic::AssertUnwindSafe(run(&tools, "iatk.boom", json!({"id": 2001})));
            let caught = futures_catch(future).await;
            // Either rig turned the panic into an error, or it reached us: never a success.
            assert!(
                !matches!(caught, Some(Ok(_))),
                "a panic reported as a success"
            );
        });
    });
    assert_eq!(ran("boom", 2001), 1);
    let records = memory.records();
    every_enter_has_its_exit(&records);
    assert!(
        records
            .iter()
            .any(|r| r.stage == Stage::Exit && r.outcome == Some(Outcome::Panic)),
        "{records:#?}"
    );
    let boom = tool_spans(&spans, "iatk.boom");
    assert_eq!(boom.len(), 1, "the panicked call's span is still open");
    assert_eq!(
        attributes(boom[0]).get("error.type").map(String::as_str),
        Some("panic")
    );
}
