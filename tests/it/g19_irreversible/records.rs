//! What the audit trail keeps of a call with lasting effects: the plan in its `enter`, the target's
//! state just before and after the body in its `exit`; and a recorded plan run later as a call of its
//! own, through the gate, its records naming the call it undoes.

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate::audit::{AuditRecord, MemorySink, Outcome, Stage};
use toolgate::{DenialCode, Gate, Mode, registry};

use super::every_path::{PATHS, filed, terminate_through};
use super::*;
use crate::fixtures::support::runtime;

fn audited(sink: &Arc<MemorySink>) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .audit_shared(sink.clone())
        .build()
        .unwrap()
}

fn digest(json: &Value) -> String {
    use sha2::{Digest, Sha256};
    let text = serde_json::to_string(json).unwrap();
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn one(records: &[AuditRecord], stage: Stage, tool: &str) -> AuditRecord {
    let found: Vec<&AuditRecord> = records
        .iter()
        .filter(|r| r.stage == stage && r.tool == tool)
        .collect();
    assert_eq!(found.len(), 1, "{stage:?} of {tool}: {records:#?}");
    found[0].clone()
}

#[test]
fn d01_the_enter_keeps_the_plan_and_the_exit_the_state_before_and_after_on_every_path() {
    for path in PATHS {
        let id = format!("d01-{path:?}");
        put(&id, "running");
        let sink = Arc::new(MemorySink::new());
        let gate = audited(&sink);
        let (_, token) = filed(path, &gate, &id);
        gate.approve_typed(&token, "ana", &id).unwrap();
        sink.take();
        terminate_through(path, &gate, &id, "decommissioned").unwrap();
        let records = sink.take();
        let tool = match path {
            super::every_path::Path::Direct | super::every_path::Path::ByName => "irr.terminate",
            _ => "irr.terminate_async",
        };
        let enter = one(&records, Stage::Enter, tool);
        let plan: Value = serde_json::from_str(enter.rollback.as_deref().unwrap()).unwrap();
        assert_eq!(
            plan,
            json!({"kind": "call", "tool": "irr.launch", "arguments": {"instance_id": id}}),
            "{path:?}"
        );
        assert_eq!(enter.by.as_deref(), Some("ana"));
        let exit = one(&records, Stage::Exit, tool);
        assert_eq!(exit.outcome, Some(Outcome::Ok));
        let before = json!({"id": id, "state": "running"});
        let after = json!({"id": id, "state": "terminated"});
        assert_eq!(exit.evidence_before, Some(digest(&before)), "{path:?}");
        assert_eq!(exit.evidence_after, Some(digest(&after)), "{path:?}");
        // The tool records its arguments: the values too.
        let values: Value = serde_json::from_str(exit.evidence.as_deref().unwrap()).unwrap();
        assert_eq!(
            values,
            json!({"before": before, "after": after}),
            "{path:?}"
        );
    }
}

#[test]
fn d02_a_refusal_for_a_changed_target_is_recorded_and_no_body_ran() {
    let id = "d02";
    put(id, "running");
    let sink = Arc::new(MemorySink::new());
    let gate = audited(&sink);
    let (_, token) = filed(super::every_path::Path::Direct, &gate, id);
    gate.approve_typed(&token, "ana", id).unwrap();
    flip_at(id, 3, "rebooting");
    sink.take();
    let denied = gate
        .run(|| terminate(id.into(), "decommissioned".into()))
        .unwrap_err();
    assert_eq!(denied.code(), DenialCode::EvidenceChanged);
    let records = sink.take();
    assert!(
        records
            .iter()
            .any(|r| r.code.as_deref() == Some("EVIDENCE_CHANGED")),
        "{records:#?}"
    );
    assert!(records.iter().all(|r| r.outcome != Some(Outcome::Ok)));
    assert_eq!(terminated(id), 0);
}

#[test]
fn d03_a_recorded_plan_runs_later_through_the_gate_naming_the_call_it_undoes() {
    let id = "d03";
    put(id, "running");
    let sink = Arc::new(MemorySink::new());
    let gate = audited(&sink);
    let (_, token) = filed(super::every_path::Path::Direct, &gate, id);
    gate.approve_typed(&token, "ana", id).unwrap();
    terminate_through(super::every_path::Path::Direct, &gate, id, "decommissioned").unwrap();
    let enter = one(&sink.records(), Stage::Enter, "irr.terminate");
    // Read back as the trail keeps it.
    let enter: AuditRecord = serde_json::from_str(&serde_json::to_string(&enter).unwrap()).unwrap();
    sink.take();
    let undone = runtime()
        .block_on(registry().rollback(&gate, &enter))
        .unwrap();
    assert_eq!(undone, json!(format!("{id} launched")));
    assert_eq!(launched(id), 1);
    let records = sink.take();
    let origin = enter.reference();
    let launched_enter = one(&records, Stage::Enter, "irr.launch");
    assert_eq!(launched_enter.rollback_of.as_deref(), Some(origin.as_str()));
    let exit = one(&records, Stage::Exit, "irr.launch");
    assert_eq!(exit.rollback_of.as_deref(), Some(origin.as_str()));
    // Records written after the rollback name nothing.
    put("d03-after", "running");
    gate.run(|| launch("d03-after".into())).unwrap();
    assert!(sink.take().iter().all(|r| r.rollback_of.is_none()));
}

#[test]
fn d04_the_rollback_is_decided_as_any_call_and_a_record_without_a_plan_runs_nothing() {
    let id = "d04";
    put(id, "running");
    let sink = Arc::new(MemorySink::new());
    let gate = audited(&sink);
    let (_, token) = filed(super::every_path::Path::Direct, &gate, id);
    gate.approve_typed(&token, "ana", id).unwrap();
    terminate_through(super::every_path::Path::Direct, &gate, id, "decommissioned").unwrap();
    let records = sink.take();
    let enter = one(&records, Stage::Enter, "irr.terminate");
    // A gate in SHADOW refuses the plan's LOW_WRITE call: a rollback is no way around the gate.
    let shadow = Gate::builder()
        .mode(Mode::Shadow)
        .audit_shared(sink.clone())
        .build()
        .unwrap();
    let refused = runtime()
        .block_on(registry().rollback(&shadow, &enter))
        .unwrap_err();
    assert_eq!(refused.code(), "MODE_NOT_ALLOWED", "{refused}");
    assert_eq!(launched(id), 0);
    let refusal = sink.take();
    assert!(
        refusal
            .iter()
            .any(|r| r.rollback_of == Some(enter.reference())),
        "{refusal:#?}"
    );
    // Not an enter record, no plan, steps for a person: NO_ROLLBACK, and nothing runs.
    let exit = one(&records, Stage::Exit, "irr.terminate");
    let mut without = enter.clone();
    without.rollback = None;
    let mut steps = enter.clone();
    steps.rollback = Some(toolgate::Rollback::steps("call the \u{202e}vendor").to_json());
    let mut unreadable = enter.clone();
    unreadable.rollback = Some("{".into());
    for (record, says) in [
        (&exit, "not an `enter` record"),
        (&without, "keeps no plan"),
        (
            &steps,
            "steps a person carries out: call the \\u{202e}vendor",
        ),
        (&unreadable, "cannot be read"),
    ] {
        let error = runtime()
            .block_on(registry().rollback(&gate, record))
            .unwrap_err();
        assert_eq!(error.code(), "NO_ROLLBACK");
        assert!(error.to_string().contains(says), "{error}");
    }
    assert_eq!(launched(id), 0);
}

/// A JSONL log that holds a plan, the states before and after, and a rollback's records (which name
/// the call they undo, with no principal beside them) verifies as a chain, line for line.
#[test]
fn d05_a_log_with_plans_states_and_a_rollback_verifies() {
    let id = "d05";
    put(id, "running");
    let (_scratch, path) = crate::fixtures::support::scratch_log("g19-d05");
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .audit(toolgate::audit::JsonlSink::open(&path).unwrap())
        .build()
        .unwrap();
    let (_, token) = filed(super::every_path::Path::Direct, &gate, id);
    gate.approve_typed(&token, "ana", id).unwrap();
    terminate_through(super::every_path::Path::Direct, &gate, id, "decommissioned").unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let enter: AuditRecord = text
        .lines()
        .map(|line| serde_json::from_str::<AuditRecord>(line).unwrap())
        .find(|r| r.stage == Stage::Enter && r.tool == "irr.terminate")
        .unwrap();
    runtime()
        .block_on(registry().rollback(&gate, &enter))
        .unwrap();
    drop(gate);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"rollback_of\":"), "{text}");
    assert!(text.contains("\"evidence_before\":"), "{text}");
    let report = toolgate::audit::verify_file(&path).unwrap();
    assert!(report.broken.is_none(), "{report}");
    assert_eq!(report.records, text.lines().count() as u64, "{report}");
}
