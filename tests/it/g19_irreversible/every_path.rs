//! The seed's T3 on every path into an irreversible tool (direct, async, by name, async by name):
//! the call files a two-step request showing the target, its state and the plan; an approval without
//! the target typed back approves nothing; typed, the call runs once on the state that was approved;
//! a target changed between the approval and the body, or a plan that cannot be made, runs nothing.

use std::sync::Arc;

use serde_json::json;
use toolgate::approval::ApproveError;
use toolgate::approval::store::{Answer, ApprovalStore};
use toolgate::approval::two_step::MemoryStore;
use toolgate::{DenialCode, Denied, Gate, Mode, Rollback, registry};

use super::*;
use crate::fixtures::support::runtime;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Path {
    Direct,
    DirectAsync,
    ByName,
    ByNameAsync,
}

pub(crate) const PATHS: [Path; 4] = [
    Path::Direct,
    Path::DirectAsync,
    Path::ByName,
    Path::ByNameAsync,
];

/// A FULL_AUTO gate taking two-step approvals.
pub(crate) fn two_step() -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap()
}

/// Terminates `id` through `path`.
pub(crate) fn terminate_through(
    path: Path,
    gate: &Gate,
    id: &str,
    reason: &str,
) -> Result<String, Denied> {
    let by_name = |tool: &str| {
        let called = registry().call(gate, tool, json!({"instance_id": id, "reason": reason}));
        match runtime().block_on(called) {
            Ok(value) => Ok(value.as_str().unwrap().to_owned()),
            Err(error) => Err(error
                .denied()
                .cloned()
                .unwrap_or_else(|| panic!("{path:?}: not a refusal: {error}"))),
        }
    };
    match path {
        Path::Direct => gate.run(|| terminate(id.to_owned(), reason.to_owned())),
        Path::DirectAsync => {
            runtime().block_on(gate.scope(terminate_async(id.to_owned(), reason.to_owned())))
        }
        Path::ByName => by_name("irr.terminate"),
        Path::ByNameAsync => by_name("irr.terminate_async"),
    }
}

/// The refusal that files the request, and its token.
pub(crate) fn filed(path: Path, gate: &Gate, id: &str) -> (Denied, String) {
    let denied = terminate_through(path, gate, id, "decommissioned").unwrap_err();
    assert_eq!(
        denied.code(),
        DenialCode::ApprovalPending,
        "{path:?}: {denied}"
    );
    let token = denied
        .approval_token()
        .unwrap_or_else(|| panic!("{path:?}: no token"))
        .to_owned();
    (denied, token)
}

#[test]
fn t01_an_irreversible_call_runs_once_its_target_typed_back_on_every_path() {
    for path in PATHS {
        let id = format!("t01-{path:?}");
        put(&id, "running");
        let gate = two_step();
        let (denied, token) = filed(path, &gate, &id);
        // The operator sees the target, its state now and how the call would be undone.
        assert_eq!(denied.target(), Some(id.as_str()), "{path:?}");
        let evidence = denied.evidence().unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(evidence).unwrap(),
            json!({"id": id, "state": "running"}),
            "{path:?}"
        );
        assert_eq!(
            denied.rollback(),
            Some(&Rollback::call("irr.launch", json!({"instance_id": id}))),
            "{path:?}"
        );
        // The agent's message says it waits, and carries no token.
        assert!(!denied.to_string().contains(&token), "{path:?}");
        // An approval without the target typed back, or mistyped, approves nothing.
        assert_eq!(
            gate.approve(&token),
            Err(ApproveError::ConfirmationMismatch)
        );
        for wrong in ["", "t01", &id.to_uppercase(), &format!("{id} "), "*"] {
            assert_eq!(
                gate.approve_typed(&token, "ana", wrong),
                Err(ApproveError::ConfirmationMismatch),
                "{path:?}: {wrong:?}"
            );
        }
        assert_eq!(terminated(&id), 0);
        let again = terminate_through(path, &gate, &id, "decommissioned").unwrap_err();
        assert_eq!(again.code(), DenialCode::ApprovalPending, "{path:?}");
        gate.approve_typed(&token, "ana", &id).unwrap();
        let ran = terminate_through(path, &gate, &id, "decommissioned").unwrap();
        assert_eq!(ran, format!("{id} terminated"), "{path:?}");
        assert_eq!(terminated(&id), 1, "{path:?}");
        // An approval runs one call: the same call again asks again, showing the target as the
        // call left it; on the state it approved, it is told the approval was used.
        let again = terminate_through(path, &gate, &id, "decommissioned").unwrap_err();
        assert_eq!(again.code(), DenialCode::ApprovalPending, "{path:?}");
        assert!(again.evidence().unwrap().contains("terminated"), "{path:?}");
        set(&id, "running");
        let reused = terminate_through(path, &gate, &id, "decommissioned").unwrap_err();
        assert_eq!(reused.code(), DenialCode::ApprovalReused, "{path:?}");
        assert_eq!(terminated(&id), 1, "{path:?}");
    }
}

#[test]
fn t02_a_target_changed_between_approval_and_body_runs_nothing_on_every_path() {
    for path in PATHS {
        let id = format!("t02-{path:?}");
        put(&id, "running");
        let gate = two_step();
        let (_, token) = filed(path, &gate, &id);
        gate.approve_typed(&token, "ana", &id).unwrap();
        // Another actor changes the instance after the approval: the approval was for another world.
        set(&id, "stopped");
        let changed = terminate_through(path, &gate, &id, "decommissioned").unwrap_err();
        assert_eq!(
            changed.code(),
            DenialCode::EvidenceChanged,
            "{path:?}: {changed}"
        );
        // A new request shows the state as it is now.
        let evidence = changed.evidence().unwrap();
        assert!(evidence.contains("stopped"), "{path:?}: {evidence}");
        let new_token = changed.approval_token().unwrap().to_owned();
        assert_ne!(new_token, token);
        assert_eq!(terminated(&id), 0, "{path:?}");
        gate.approve_typed(&new_token, "ana", &id).unwrap();
        terminate_through(path, &gate, &id, "decommissioned").unwrap();
        assert_eq!(terminated(&id), 1, "{path:?}");
    }
}

#[test]
fn t03_a_target_that_changes_just_before_the_body_runs_nothing_on_every_path() {
    for path in PATHS {
        let id = format!("t03-{path:?}");
        put(&id, "running");
        let gate = two_step();
        let (_, token) = filed(path, &gate, &id);
        gate.approve_typed(&token, "ana", &id).unwrap();
        // Read 1 filed the request; read 2 decides the retry (as approved); read 3, just before the
        // body, finds it changed.
        flip_at(&id, 3, "rebooting");
        let changed = terminate_through(path, &gate, &id, "decommissioned").unwrap_err();
        assert_eq!(
            changed.code(),
            DenialCode::EvidenceChanged,
            "{path:?}: {changed}"
        );
        assert_eq!(reads(&id), 3, "{path:?}");
        assert_eq!(terminated(&id), 0, "{path:?}");
        // The answer was used by the call it approved: the world it approved is gone.
        let after = terminate_through(path, &gate, &id, "decommissioned").unwrap_err();
        assert_ne!(after.code(), DenialCode::EvidenceChanged, "{path:?}");
        assert_eq!(terminated(&id), 0, "{path:?}");
    }
}

#[test]
fn t04_a_plan_that_cannot_be_made_refuses_before_anyone_is_asked_on_every_path() {
    for path in PATHS {
        let id = format!("t04-{path:?}");
        put(&id, "running");
        let gate = two_step();
        let denied = terminate_through(path, &gate, &id, "no snapshot").unwrap_err();
        assert_eq!(denied.code(), DenialCode::RollbackUnavailable, "{path:?}");
        assert!(denied.to_string().contains("has no snapshot"), "{denied}");
        assert_eq!(denied.approval_token(), None, "{path:?}: nothing filed");
        assert_eq!(reads(&id), 0, "{path:?}: the target is not even read");
    }
}

/// An async decision that waits on its store reads the target again once the call has its arguments
/// back: a change during that wait refuses the call as well.
#[test]
fn t05_a_target_changed_while_an_async_decision_waits_runs_nothing() {
    struct Yielding(MemoryStore);
    impl ApprovalStore for Yielding {
        fn consume<'a>(
            &'a self,
            call: &'a toolgate::approval::store::ApprovalCall,
        ) -> toolgate::approval::store::StoreFuture<
            'a,
            Result<toolgate::approval::store::Consumed, toolgate::approval::store::StoreError>,
        > {
            let answer = self.0.consume(call);
            Box::pin(async move {
                tokio::task::yield_now().await;
                answer.await
            })
        }
        fn answer<'a>(
            &'a self,
            token: &'a str,
            answer: Answer,
        ) -> toolgate::approval::store::StoreFuture<
            'a,
            Result<toolgate::approval::store::Binding, ApproveError>,
        > {
            self.0.answer(token, answer)
        }
    }
    for path in [Path::DirectAsync, Path::ByNameAsync] {
        let id = format!("t05-{path:?}");
        put(&id, "running");
        let store = Arc::new(Yielding(MemoryStore::new(Duration::from_secs(60)).unwrap()));
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .approval_store_shared(store)
            .build()
            .unwrap();
        let (_, token) = filed(path, &gate, &id);
        gate.approve_typed(&token, "ana", &id).unwrap();
        flip_at(&id, 3, "rebooting");
        let changed = terminate_through(path, &gate, &id, "decommissioned").unwrap_err();
        assert_eq!(
            changed.code(),
            DenialCode::EvidenceChanged,
            "{path:?}: {changed}"
        );
        assert_eq!(terminated(&id), 0, "{path:?}");
        // Unchanged, the same wait runs the call once.
        let other = format!("t05b-{path:?}");
        put(&other, "running");
        let (_, token) = filed(path, &gate, &other);
        gate.approve_typed(&token, "ana", &other).unwrap();
        terminate_through(path, &gate, &other, "decommissioned").unwrap();
        assert_eq!(terminated(&other), 1, "{path:?}");
    }
}

use std::time::Duration;
