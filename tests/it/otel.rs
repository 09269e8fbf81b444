//! The tracing sink's spans exported through `tracing-opentelemetry` and the OpenTelemetry SDK's
//! in-memory exporter: one `execute_tool` span per call, with the GenAI semantic conventions'
//! attributes and toolgate's decision beside them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::SpanData;
use serde_json::json;
use toolgate::audit::TracingSink;
use toolgate::{Denied, Gate, Mode, registry, tool};

use crate::common::gates;
use crate::fixtures::spans::{attributes, exported};
use crate::fixtures::support::counted_tools;

static WIPES: AtomicUsize = AtomicUsize::new(0);

/// Look an invoice up.
#[tool(risk = "READ_ONLY", domain = "oteldesk", record_arguments, callable)]
fn invoice(id: u64) -> Result<String, Denied> {
    Ok(format!("invoice {id}: 40 EUR"))
}

/// Refund an invoice.
#[tool(risk = "LOW_WRITE", domain = "oteldesk", callable)]
fn refund(id: u64) -> Result<String, Denied> {
    Ok(format!("invoice {id} refunded"))
}

counted_tools! {
    /// Wipe every invoice. Never allowed here.
    #[tool(risk = "HIGH_WRITE", domain = "oteldesk", modes = [FULL_AUTO], callable)]
    fn wipe() -> WIPES += 1;
}

/// Export the invoices.
#[tool(risk = "READ_ONLY", domain = "oteldesk", callable)]
fn export() -> Result<(), std::io::Error> {
    Err(std::io::Error::other("the printer is on fire"))
}

/// Total the invoices, taking its time.
#[tool(risk = "READ_ONLY", domain = "oteldesk", callable)]
async fn total() -> Result<u32, Denied> {
    tokio::task::yield_now().await;
    Ok(120)
}
/// `oteldesk.wipe` called by name under `gate`.
fn wipe_by_name(gate: &Gate) -> Result<serde_json::Value, toolgate::CallError> {
    registry()
        .call(gate, "oteldesk.wipe", json!({}))
        .now()
        .unwrap()
}

/// `map` (of the span or event `of`) holds `key` = `want`.
#[track_caller]
fn assert_entry(map: &BTreeMap<String, String>, key: &str, want: &str, of: &str) {
    assert_eq!(
        map.get(key).map(String::as_str),
        Some(want),
        "{key} of {of}: {map:#?}"
    );
}

fn span<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let mut found = spans.iter().filter(|s| s.name == name);
    let span = found.next().unwrap_or_else(|| {
        let names: Vec<_> = spans.iter().map(|s| s.name.to_string()).collect();
        panic!("no span {name} in {names:?}")
    });
    assert!(found.next().is_none(), "two spans {name}");
    span
}

#[test]
fn each_call_is_an_execute_tool_span_with_genai_and_toolgate_attributes() {
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .agent("billing-assistant")
        .audit(TracingSink::new())
        .build()
        .unwrap();
    let wipes = WIPES.load(Ordering::SeqCst);
    let spans = exported(|| {
        let agent = tracing::info_span!("invoke_agent");
        let _entered = agent.enter();
        assert_eq!(gate.run(|| invoice(4)).unwrap(), "invoice 4: 40 EUR");
        assert_eq!(wipe_by_name(&gate).unwrap_err().code(), "MODE_NOT_ALLOWED");
        assert!(gate.run(export).is_err());
        let refunded = registry()
            .call(&gate, "oteldesk.refund", json!({"id": 4}))
            .now()
            .unwrap();
        assert_eq!(refunded.unwrap(), json!("invoice 4 refunded"));
        // Calls by name stopped at the door are refused records, and spans, too.
        let unknown = registry()
            .call(&gate, "oteldesk.nothing", json!({}))
            .now()
            .unwrap();
        assert_eq!(unknown.unwrap_err().code(), "UNKNOWN_TOOL");
        let invalid = registry()
            .call(&gate, "oteldesk.refund", json!({"id": "four"}))
            .now()
            .unwrap();
        assert_eq!(invalid.unwrap_err().code(), "INVALID_PARAMS");
    });
    assert_eq!(WIPES.load(Ordering::SeqCst), wipes, "the refused body ran");

    let agent = span(&spans, "invoke_agent");
    let tool_spans: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name.starts_with("execute_tool "))
        .collect();
    assert_eq!(tool_spans.len(), 6, "one span per call");
    for tool_span in &tool_spans {
        assert_eq!(
            tool_span.parent_span_id,
            agent.span_context.span_id(),
            "{} is the agent's child",
            tool_span.name
        );
        assert_eq!(
            tool_span.span_context.trace_id(),
            agent.span_context.trace_id()
        );
    }

    let invoice = span(&spans, "execute_tool oteldesk.invoice");
    let a = attributes(invoice);
    let expected = [
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "oteldesk.invoice"),
        ("gen_ai.tool.type", "function"),
        ("gen_ai.agent.name", "billing-assistant"),
        ("gen_ai.tool.call.arguments", r#"{"id":4}"#),
        ("toolgate.decision", "allowed"),
        ("toolgate.mode", "PARTIAL_AUTO"),
        ("toolgate.declared_risk", "READ_ONLY"),
        ("toolgate.effective_risk", "READ_ONLY"),
        ("toolgate.outcome", "ok"),
        (
            "toolgate.manifest_digest",
            toolgate::report::manifest_digest(),
        ),
    ];
    for (key, value) in expected {
        assert_eq!(
            a.get(key).map(String::as_str),
            Some(value),
            "{key} in {a:#?}"
        );
    }
    let call_id = &a["gen_ai.tool.call.id"];
    assert!(
        call_id.starts_with(&format!("{}:", gate.id())),
        "{call_id} names the gate"
    );
    assert!(!a.contains_key("error.type"));
    assert_eq!(invoice.status, Status::Unset);
    assert!(invoice.end_time >= invoice.start_time);
    // The records of the call are the span's events.
    assert_eq!(invoice.events.len(), 2, "enter and exit");
    assert!(
        invoice
            .events
            .iter()
            .all(|e| e.name == "toolgate audit record")
    );

    let wipe = span(&spans, "execute_tool oteldesk.wipe");
    let a = attributes(wipe);
    assert_eq!(a["error.type"], "MODE_NOT_ALLOWED");
    assert_eq!(a["toolgate.decision"], "refused");
    assert_eq!(a["toolgate.declared_risk"], "HIGH_WRITE");
    assert_eq!(a["gen_ai.tool.name"], "oteldesk.wipe");
    assert!(
        !a.contains_key("toolgate.outcome"),
        "a refused call has no outcome"
    );
    assert_eq!(
        wipe.status,
        Status::error(
            "tool `oteldesk.wipe` (HIGH_WRITE) is not allowed in mode PARTIAL_AUTO; it is allowed \
             in FULL_AUTO"
        )
    );

    let export = span(&spans, "execute_tool oteldesk.export");
    let a = attributes(export);
    assert_eq!(a["error.type"], "error");
    assert_eq!(a["toolgate.outcome"], "error");
    assert!(matches!(export.status, Status::Error { .. }));

    let unknown = span(&spans, "execute_tool (unknown)");
    assert_eq!(attributes(unknown)["error.type"], "UNKNOWN_TOOL");
    let invalid: Vec<&&SpanData> = tool_spans
        .iter()
        .filter(|s| attributes(s).get("error.type").map(String::as_str) == Some("INVALID_PARAMS"))
        .collect();
    assert_eq!(invalid.len(), 1);
    assert_eq!(
        attributes(invalid[0])["gen_ai.tool.name"],
        "oteldesk.refund"
    );

    // Arguments only where the tool opted in.
    let refund = tool_spans
        .iter()
        .find(|s| s.name == "execute_tool oteldesk.refund" && s.status == Status::Unset)
        .expect("the refund that ran");
    let a = attributes(refund);
    assert!(!a.contains_key("gen_ai.tool.call.arguments"), "{a:#?}");
    assert_eq!(a["toolgate.declared_risk"], "LOW_WRITE");
    assert!(a.contains_key("toolgate.arguments_digest"));
    assert_ne!(
        a["gen_ai.tool.call.id"],
        attributes(invoice)["gen_ai.tool.call.id"]
    );
}

#[test]
fn an_async_call_closes_its_span_where_it_ends() {
    let gate = gates::audited(Mode::Shadow, TracingSink::new());
    let spans = exported(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let result = runtime.block_on(registry().call(&gate, "oteldesk.total", json!({})));
        assert_eq!(result.unwrap(), json!(120));
    });
    let total = span(&spans, "execute_tool oteldesk.total");
    assert_eq!(attributes(total)["toolgate.mode"], "SHADOW");
    assert_eq!(attributes(total)["toolgate.outcome"], "ok");
    assert_eq!(total.events.len(), 2, "enter and exit");
}

#[test]
fn spans_and_events_name_the_principal_a_call_is_made_for() {
    let sink = TracingSink::new();
    let gate_for = |principal: &str| {
        Gate::builder()
            .mode(Mode::PartialAuto)
            .agent("billing-assistant")
            .principal(principal)
            .audit(sink.clone())
            .build()
            .unwrap()
    };
    let (alice, bob) = (gate_for("alice"), gate_for("bob"));
    let spans = exported(|| {
        assert_eq!(alice.run(|| invoice(1)).unwrap(), "invoice 1: 40 EUR");
        assert_eq!(wipe_by_name(&bob).unwrap_err().code(), "MODE_NOT_ALLOWED");
    });
    let invoice = span(&spans, "execute_tool oteldesk.invoice");
    let wipe = span(&spans, "execute_tool oteldesk.wipe");
    for (span, principal) in [(invoice, "alice"), (wipe, "bob")] {
        let a = attributes(span);
        assert_entry(&a, "toolgate.principal", principal, &span.name);
        assert_eq!(a["gen_ai.agent.name"], "billing-assistant");
        assert!(!span.events.is_empty());
        for event in span.events.iter() {
            let fields: BTreeMap<String, String> = event
                .attributes
                .iter()
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect();
            assert_entry(&fields, "principal", principal, &span.name);
            assert_eq!(fields["agent"], "billing-assistant");
        }
    }
}
