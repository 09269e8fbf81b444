//! A sink that turns records into `tracing` events.

use crate::audit::record::{AuditRecord, Decision, Outcome, Stage};
use crate::audit::sink::{AuditError, AuditSink};

/// Emits each record as one `tracing` event at level INFO and target `toolgate::audit`, with the record's
/// fields as the event's fields, for a subscriber to ship (to OpenTelemetry, a log pipeline, ...).
///
/// Field names are the record's, except `message`, which becomes `detail` (`message` is the event's own
/// message in `tracing`). Absent fields are absent from the event. The fields are `stage`, `tool`,
/// `mode`, `decision`, `code`, `declared_risk`, `effective_risk`, `outcome`, `duration_us`, `call`,
/// `gate`, `agent`, `arguments_digest`, `output_digest`, `arguments`, `detail`, `manifest_digest`,
/// `policy_version` and `timestamp`; enums carry the same text as in the JSON log.
///
/// The sink never fails, and it does not know whether any subscriber keeps the event: pair it with a
/// [`JsonlSink`](crate::audit::JsonlSink) where the record must not be lost.
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingSink;

impl TracingSink {
    /// The sink.
    pub fn new() -> TracingSink {
        TracingSink
    }
}

impl AuditSink for TracingSink {
    fn record(&self, r: &AuditRecord) -> Result<(), AuditError> {
        tracing::info!(
            target: "toolgate::audit",
            stage = stage_name(r.stage),
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
            by = r.by.as_deref(),
            arguments_digest = r.arguments_digest.as_deref(),
            output_digest = r.output_digest.as_deref(),
            arguments = r.arguments.as_deref(),
            detail = r.message.as_deref(),
            manifest_digest = &*r.manifest_digest,
            policy_version = r.policy_version,
            timestamp = r.timestamp.as_str(),
            "toolgate audit record"
        );
        Ok(())
    }
}

fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::Enter => "enter",
        Stage::Exit => "exit",
        Stage::Refused => "refused",
        Stage::ModeLowered => "mode_lowered",
        Stage::ApprovalGranted => "approval_granted",
        Stage::ApprovalRejected => "approval_rejected",
        Stage::SessionGranted => "session_granted",
        Stage::GrantRevoked => "grant_revoked",
        Stage::FleetLost => "fleet_lost",
        Stage::FleetRejoined => "fleet_rejoined",
    }
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
    use crate::policy::Mode;
    use crate::policy::Risk;

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
            TracingSink.record(&record).unwrap();
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
        for stage in [
            Stage::Enter,
            Stage::Exit,
            Stage::Refused,
            Stage::ModeLowered,
            Stage::ApprovalGranted,
            Stage::ApprovalRejected,
            Stage::SessionGranted,
            Stage::GrantRevoked,
            Stage::FleetLost,
            Stage::FleetRejoined,
        ] {
            assert_eq!(json(stage), format!("\"{}\"", stage_name(stage)));
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
