//! A sink that turns records into `tracing` events, and each call into a span that follows
//! OpenTelemetry's GenAI semantic conventions for tool execution.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tracing::Span;
use tracing::field::Empty;

use crate::audit::record::{AuditRecord, Decision, Outcome, Stage};
use crate::audit::sink::{AuditError, AuditSink};

/// Emits each record as one `tracing` event, and each call as one span, at level INFO and target
/// `toolgate::audit`, for a subscriber to ship (to OpenTelemetry with `tracing-opentelemetry`, a log
/// pipeline, ...).
///
/// # Events
///
/// Field names are the record's, except `message`, which becomes `detail` (`message` is the event's own
/// message in `tracing`). Absent fields are absent from the event. The fields are `stage`, `tool`,
/// `mode`, `decision`, `code`, `declared_risk`, `effective_risk`, `outcome`, `duration_us`, `call`,
/// `gate`, `agent`, `principal`, `by`, `arguments_digest`, `output_digest`, `arguments`, `detail`,
/// `manifest_digest`, `policy_digest`, `policy_version`, `rule_in_shadow` and `timestamp`; enums carry
/// the same text as in the JSON log.
/// A call's events are emitted inside its span.
///
/// # Spans
///
/// A call that is allowed opens a span named `execute_tool` when its `enter` record is written, as a
/// child of the span current there (the agent's), and closes it with its `exit` record; a refused call
/// is a span opened and closed at its `refused` record. Its fields are those of OpenTelemetry's
/// [GenAI execute_tool span](https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/#execute-tool-span),
/// with toolgate's decision beside them:
///
/// | field | value |
/// | --- | --- |
/// | `otel.name` | `execute_tool <tool id>` (the span's name in OpenTelemetry) |
/// | `gen_ai.operation.name` | `execute_tool` |
/// | `gen_ai.tool.name` | the tool's id |
/// | `gen_ai.tool.call.id` | `<gate>:<call>`, the call's id in the audit log |
/// | `gen_ai.tool.type` | `function` |
/// | `gen_ai.agent.name` | the gate's agent label, where it has one |
/// | `toolgate.principal` | who the agent acts for ([`GateBuilder::principal`](crate::GateBuilder::principal)), where the gate names one |
/// | `gen_ai.tool.call.arguments` | the arguments, only for a tool declared `record_arguments` (redacted ones as `"[REDACTED]"`) |
/// | `error.type`, `otel.status_code` = `error`, `otel.status_description` | a refusal's code and message; for a body that failed, its outcome (`error`, `panic`, `cancelled`) |
/// | `toolgate.decision`, `toolgate.mode`, `toolgate.declared_risk`, `toolgate.effective_risk` | the decision, the mode it was made in, the risks |
/// | `toolgate.outcome`, `toolgate.output_digest` | how the body ended and its result's digest (at `exit`) |
/// | `toolgate.manifest_digest`, `toolgate.policy_version`, `toolgate.arguments_digest`, `toolgate.approved_by`, `toolgate.rule_in_shadow` | as in the record |
///
/// A result is never a field (the record has its digest alone). Records of no call (`mode_lowered`,
/// approvals answered, grants) are events only.
///
/// The sink never fails, and it does not know whether any subscriber keeps the event: pair it with a
/// [`JsonlSink`](crate::audit::JsonlSink) where the record must not be lost, by giving the gate both
/// (`.audit(jsonl).audit(TracingSink::new())`, see [`GateBuilder::audit`](crate::GateBuilder::audit)). Clones share the spans of
/// calls under way.
#[derive(Debug, Clone, Default)]
pub struct TracingSink {
    spans: Arc<OpenSpans>,
}

/// The spans of calls under way, by gate and call.
#[derive(Debug, Default)]
struct OpenSpans {
    map: Mutex<HashMap<(u64, u64), Span>>,
    /// How many the map holds: with no subscriber taking spans it stays 0, and an `exit` record
    /// then costs no lock and no lookup.
    count: AtomicUsize,
}

impl TracingSink {
    /// The sink.
    pub fn new() -> TracingSink {
        TracingSink::default()
    }

    fn open(&self, key: (u64, u64), span: Span) {
        let mut map = self
            .spans
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if map.insert(key, span).is_none() {
            self.spans.count.fetch_add(1, Ordering::Release);
        }
    }

    fn close(&self, key: (u64, u64)) -> Option<Span> {
        if self.spans.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        // A map left by a panicking thread is still a map of spans.
        let mut map = self
            .spans
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let span = map.remove(&key)?;
        self.spans.count.fetch_sub(1, Ordering::Release);
        Some(span)
    }
}

impl AuditSink for TracingSink {
    fn record(&self, r: &AuditRecord) -> Result<(), AuditError> {
        match r.stage {
            Stage::Enter => {
                let span = call_span(r);
                span.in_scope(|| event(r));
                if !span.is_disabled() {
                    self.open((r.gate, r.call), span);
                }
            }
            Stage::Exit => match self.close((r.gate, r.call)) {
                Some(span) => {
                    span.record("toolgate.outcome", r.outcome.map(outcome_name));
                    span.record("toolgate.output_digest", r.output_digest.as_deref());
                    match r.outcome {
                        Some(Outcome::Ok) | None => {}
                        Some(Outcome::Refused) => failed(&span, r, r.code.as_deref()),
                        Some(other) => failed(&span, r, Some(outcome_name(other))),
                    }
                    span.in_scope(|| event(r));
                }
                None => event(r),
            },
            Stage::Refused => {
                let span = call_span(r);
                failed(&span, r, r.code.as_deref());
                span.in_scope(|| event(r));
            }
            Stage::ModeLowered
            | Stage::PolicyChanged
            | Stage::PolicyRefused
            | Stage::ApprovalGranted
            | Stage::ApprovalRejected
            | Stage::SessionGranted
            | Stage::GrantRevoked
            | Stage::FleetLost
            | Stage::FleetRejoined
            | Stage::SessionTainted
            | Stage::Ungated
            | Stage::Read => event(r),
        }
        Ok(())
    }
}

/// The span of the call `r` reports, its end still to be recorded.
fn call_span(r: &AuditRecord) -> Span {
    tracing::info_span!(
        target: "toolgate::audit",
        "execute_tool",
        otel.name = format!("execute_tool {}", r.tool),
        otel.kind = "internal",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = &*r.tool,
        gen_ai.tool.call.id = format!("{}:{}", r.gate, r.call),
        gen_ai.tool.type = "function",
        gen_ai.agent.name = r.agent.as_deref(),
        toolgate.principal = r.principal.as_deref(),
        gen_ai.tool.call.arguments = r.arguments.as_deref(),
        error.type = Empty,
        toolgate.decision = r.decision.map(decision_name),
        toolgate.mode = r.mode.as_str(),
        toolgate.declared_risk = r.declared_risk.map(|risk| risk.as_str()),
        toolgate.effective_risk = r.effective_risk.map(|risk| risk.as_str()),
        toolgate.outcome = Empty,
        toolgate.output_digest = Empty,
        toolgate.arguments_digest = r.arguments_digest.as_deref(),
        toolgate.approved_by = r.by.as_deref(),
        toolgate.manifest_digest = &*r.manifest_digest,
        toolgate.policy_version = r.policy_version,
        toolgate.rule_in_shadow = r.rule_in_shadow.as_deref(),
    )
}

/// Marks `span` as failed with `kind` as its `error.type`.
fn failed(span: &Span, r: &AuditRecord, kind: Option<&str>) {
    span.record("error.type", kind);
    span.record("otel.status_code", "error");
    span.record("otel.status_description", r.message.as_deref());
}

/// The record as one event.
fn event(r: &AuditRecord) {
    tracing::info!(
        target: "toolgate::audit",
        stage = r.stage.as_str(),
        tool = &*r.tool,
        mode = r.mode.as_str(),
        decision = r.decision.map(decision_name),
        code = r.code.as_deref(),
        declared_risk = r.declared_risk.map(|risk| risk.as_str()),
        effective_risk = r.effective_risk.map(|risk| risk.as_str()),
        outcome = r.outcome.map(outcome_name),
        duration_us = r.duration_us,
        call = r.call,
        gate = r.gate,
        agent = r.agent.as_deref(),
        principal = r.principal.as_deref(),
        by = r.by.as_deref(),
        arguments_digest = r.arguments_digest.as_deref(),
        output_digest = r.output_digest.as_deref(),
        arguments = r.arguments.as_deref(),
        detail = r.message.as_deref(),
        manifest_digest = &*r.manifest_digest,
        policy_digest = r.policy_digest.as_deref(),
        policy_version = r.policy_version,
        rule_in_shadow = r.rule_in_shadow.as_deref(),
        timestamp = r.timestamp.as_str(),
        "toolgate audit record"
    );
}

fn decision_name(decision: Decision) -> &'static str {
    match decision {
        Decision::Allowed => "allowed",
        Decision::Approved => "approved",
        Decision::Granted => "granted",
        Decision::Refused => "refused",
    }
}

fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Ok => "ok",
        Outcome::Error => "error",
        Outcome::Panic => "panic",
        Outcome::Cancelled => "cancelled",
        Outcome::Refused => "refused",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fmt;
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    use super::*;
    use toolgate_policy::Mode;
    use toolgate_policy::Risk;

    type Captured = Vec<(String, String, BTreeMap<String, String>)>;

    /// Keeps every event's level, target and fields.
    struct Capture(Arc<Mutex<Captured>>);

    struct Fields<'a>(&'a mut BTreeMap<String, String>);

    impl Visit for Fields<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            self.0.insert(field.name().to_owned(), format!("{value:?}"));
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_owned(), value.to_owned());
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            let meta = event.metadata();
            self.0.lock().unwrap().push((
                meta.level().to_string(),
                meta.target().to_owned(),
                fields,
            ));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn one_info_event_per_record_with_its_fields() {
        let mut record = AuditRecord::new(Stage::Refused, "users.delete", Mode::Shadow, 9);
        record.call = 4;
        record.decision = Some(Decision::Refused);
        record.code = Some("MODE_NOT_ALLOWED".into());
        record.declared_risk = Some(Risk::HighWrite);
        record.arguments_digest = Some("ab".repeat(32));
        record.message = Some("not in SHADOW".into());

        let captured = Arc::new(Mutex::new(Vec::new()));
        let subscriber = Capture(captured.clone());
        tracing::subscriber::with_default(subscriber, || {
            TracingSink::new().record(&record).unwrap();
        });
        let events = captured.lock().unwrap();
        assert_eq!(events.len(), 1);
        let (level, target, fields) = &events[0];
        assert_eq!(
            (level.as_str(), target.as_str()),
            ("INFO", "toolgate::audit")
        );
        let expected = [
            ("stage", "refused"),
            ("tool", "users.delete"),
            ("mode", "SHADOW"),
            ("decision", "refused"),
            ("code", "MODE_NOT_ALLOWED"),
            ("declared_risk", "HIGH_WRITE"),
            ("call", "4"),
            ("gate", "9"),
            ("detail", "not in SHADOW"),
            ("message", "toolgate audit record"),
        ];
        for (name, value) in expected {
            assert_eq!(fields.get(name).map(String::as_str), Some(value), "{name}");
        }
        assert_eq!(fields["arguments_digest"], "ab".repeat(32));
        assert_eq!(fields["timestamp"], record.timestamp);
        for absent in [
            "outcome",
            "effective_risk",
            "agent",
            "arguments",
            "duration_us",
        ] {
            assert!(!fields.contains_key(absent), "{absent} should be absent");
        }
    }

    #[test]
    fn enum_names_match_the_json_log() {
        fn json(value: impl serde::Serialize) -> String {
            serde_json::to_string(&value).unwrap()
        }
        for stage in Stage::ALL {
            assert_eq!(json(stage), format!("\"{}\"", stage.as_str()));
        }
        for decision in [
            Decision::Allowed,
            Decision::Approved,
            Decision::Granted,
            Decision::Refused,
        ] {
            assert_eq!(json(decision), format!("\"{}\"", decision_name(decision)));
        }
        for outcome in [
            Outcome::Ok,
            Outcome::Error,
            Outcome::Panic,
            Outcome::Cancelled,
            Outcome::Refused,
        ] {
            assert_eq!(json(outcome), format!("\"{}\"", outcome_name(outcome)));
        }
    }
}
