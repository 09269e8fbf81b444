//! The principal: who the agent acts for, named by the application when it builds a gate, seen by the
//! approver and the store, and written into every audit record of the gate.

use std::sync::{Arc, Mutex};

use toolgate::audit::{AuditRecord, JsonlSink, MemorySink, Stage, verify_file};
use toolgate::{Approval, ApprovalRequest, DenialCode, Denied, Gate, Mode, tool};

use crate::common::KeepingStore;
use crate::common::Scratch;
use crate::common::gates;
use crate::g07_approvals::checks::built;

/// Look a customer up.
#[tool(risk = "READ_ONLY", domain = "prin", callable)]
fn lookup(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

/// Refund a customer.
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "prin", callable)]
fn refund(id: u64, cents: u64) -> Result<u64, Denied> {
    let _ = id;
    Ok(cents)
}

/// Refund a customer, from async code.
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "prin")]
async fn refund_async(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

#[test]
fn a_gate_names_its_principal_and_a_gate_without_one_names_none() {
    let gate = gates::of_principal(Mode::FullAuto, "alice@example.com");
    assert_eq!(gate.principal(), Some("alice@example.com"));
    assert_eq!(gate.clone().principal(), Some("alice@example.com"));
    assert_eq!(Gate::new(Mode::Shadow).unwrap().principal(), None);
}

#[test]
fn the_approver_sees_the_principal_of_the_gate_sync_and_async() {
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let approver = {
        let seen = seen.clone();
        move |request: &ApprovalRequest<'_>| {
            seen.lock()
                .unwrap()
                .push(request.principal.map(str::to_owned));
            Approval::Approve
        }
    };
    let bob = built(Mode::FullAuto, |b| {
        b.principal("bob").approver(approver.clone())
    });
    let anonymous = gates::approved(Mode::FullAuto, approver);
    assert_eq!(bob.run(|| refund(1, 5)).unwrap(), 5);
    assert_eq!(anonymous.run(|| refund(1, 5)).unwrap(), 5);
    let by_name = toolgate::registry()
        .call(
            &bob,
            "prin.refund",
            serde_json::json!({"id": 2, "cents": 7}),
        )
        .now()
        .unwrap();
    assert_eq!(by_name.unwrap(), serde_json::json!(7));
    assert_eq!(
        *seen.lock().unwrap(),
        [Some("bob".to_owned()), None, Some("bob".to_owned())]
    );

    struct Async(Arc<Mutex<Vec<Option<String>>>>);
    impl toolgate::approval::AsyncApprover for Async {
        fn approve<'a>(
            &'a self,
            request: &'a ApprovalRequest<'a>,
        ) -> toolgate::approval::ApprovalFuture<'a> {
            self.0
                .lock()
                .unwrap()
                .push(request.principal.map(str::to_owned));
            Box::pin(async { Approval::Approve })
        }
    }
    let asked: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let carol = built(Mode::FullAuto, |b| {
        b.principal("carol").async_approver(Async(asked.clone()))
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(runtime.block_on(carol.scope(refund_async(3))).unwrap(), 3);
    assert_eq!(*asked.lock().unwrap(), [Some("carol".to_owned())]);
}

#[test]
fn the_store_is_handed_the_principal_with_the_call() {
    let store = Arc::new(KeepingStore::default());
    let gate = built(Mode::FullAuto, |b| {
        b.principal("dave").approval_store_shared(store.clone())
    });
    let denied = gate.run(|| refund(4, 40)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalPending);
    assert_eq!(denied.approval_token(), Some("tok"));
    let calls = store.0.lock().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].principal.as_deref(), Some("dave"));
    assert_eq!(calls[0].binding.tool, "prin.refund");
}

#[test]
fn every_audit_record_names_the_principal_and_a_log_without_one_is_unchanged() {
    let sink = MemorySink::new();
    let gate = built(Mode::FullAuto, |b| {
        b.principal("erin").two_step_approvals().audit(sink.clone())
    });
    gate.run(|| lookup(1)).unwrap();
    let asked = gate.run(|| refund(5, 50)).unwrap_err();
    gate.approve(asked.approval_token().unwrap()).unwrap();
    gate.run(|| refund(5, 50)).unwrap();
    gate.lower_by(Mode::Shadow, "ops").unwrap();
    gate.run(|| refund(5, 50)).unwrap_err();
    let records = sink.records();
    let stages: Vec<Stage> = records.iter().map(|r| r.stage).collect();
    assert_eq!(
        stages,
        [
            Stage::Enter,
            Stage::Exit,
            Stage::Refused,
            Stage::ApprovalGranted,
            Stage::Enter,
            Stage::Exit,
            Stage::ModeLowered,
            Stage::Refused,
        ]
    );
    for record in &records {
        assert_eq!(record.principal.as_deref(), Some("erin"), "{record:?}");
    }

    let plain = MemorySink::new();
    let gate = gates::audited(Mode::Shadow, plain.clone());
    gate.run(|| lookup(1)).unwrap();
    for record in plain.records() {
        assert_eq!(record.principal, None);
        let line = serde_json::to_string(&record).unwrap();
        assert!(!line.contains("principal"), "{line}");
    }
}

#[test]
fn a_jsonl_log_keeps_the_principal_verifies_and_reads_back() {
    let dir = Scratch::new("principal");
    let path = dir.path("audit.jsonl");
    {
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        for (principal, id) in [
            (Some("frank"), 1),
            (None, 2),
            (Some("g\"race,\"stage\":"), 3),
        ] {
            let mut builder = Gate::builder()
                .mode(Mode::FullAuto)
                .two_step_approvals()
                .audit_shared(sink.clone());
            if let Some(principal) = principal {
                builder = builder.principal(principal);
            }
            let gate = builder.build().unwrap();
            gate.run(|| lookup(id)).unwrap();
            gate.run(|| refund(id, 1)).unwrap_err();
        }
    }
    let report = verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.records, 9);
    let text = std::fs::read_to_string(&path).unwrap();
    let records: Vec<AuditRecord> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let principals: Vec<Option<&str>> = records.iter().map(|r| r.principal.as_deref()).collect();
    let frank = Some("frank");
    let odd = Some("g\"race,\"stage\":");
    assert_eq!(
        principals,
        [frank, frank, frank, None, None, None, odd, odd, odd]
    );
    // Each line is canonical: `principal` between `prev_hash` and `seq`.
    let first = text.lines().next().unwrap();
    let prev = first.find("\"prev_hash\"").unwrap();
    let principal = first.find("\"principal\"").unwrap();
    let seq = first.find("\"seq\"").unwrap();
    assert!(prev < principal && principal < seq, "{first}");
}
