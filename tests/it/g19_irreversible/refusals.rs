//! Every refusal of a call with lasting effects: a target that is not one, a probe that fails, no
//! two-step store, an approver or a session grant in the way, a store that forgets the typed target,
//! and a state changed under an approver's eyes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolgate::approval::ApproveError;
use toolgate::approval::store::{
    Answer, ApprovalCall, ApprovalStore, Binding, Consumed, StoreError, StoreFuture,
};
use toolgate::{AllowAllApprover, Approval, ApprovalRequest, DenialCode, Gate, Mode, Rollback};

use super::every_path::{PATHS, Path, filed, terminate_through, two_step};
use super::*;

#[test]
fn r01_a_target_that_is_not_one_is_refused_before_anyone_is_asked() {
    let many = [
        "",
        " ",
        "i-*",
        "i-?",
        "i-[12]",
        "%",
        "i-1,i-2",
        "i-1;i-2",
        "i-1 i-2",
        "i-1\ni-2",
        "ALL",
        "all",
        "*",
        ".",
        "i-1\u{202e}",
        "i-1\u{200b}",
    ];
    for path in PATHS {
        for target in many {
            let gate = two_step();
            let denied = terminate_through(path, &gate, target, "cleanup").unwrap_err();
            assert_eq!(
                denied.code(),
                DenialCode::TargetNotSingle,
                "{path:?} {target:?}: {denied}"
            );
            assert_eq!(denied.approval_token(), None, "{path:?} {target:?}");
        }
    }
}

/// Path spellings of `.`, `..` and `~`, and `all` in mathematical bold, circled and
/// modifier letters, read as wildcards; they are refused as not one target on every path, as is every
/// look-alike of the shared corpus of a wildcard or a person's name.
#[test]
fn r01b_a_target_that_reads_as_a_wildcard_or_as_another_name_is_refused() {
    let issue = [
        "./",
        "../",
        "~/",
        "./.",
        ".//",
        "\u{1d41a}\u{1d425}\u{1d425}",
        "\u{24d0}\u{24db}\u{24db}",
        "\u{1d43}\u{2e1}\u{2e1}",
        "\u{1d2c}\u{1d38}\u{1d38}",
        "/",
    ];
    let corpus = crate::common::lookalikes::LOOK_ALIKES
        .iter()
        .flat_map(|(_, alikes)| alikes.iter().copied());
    let targets: Vec<&str> = issue.into_iter().chain(corpus).collect();
    for path in PATHS {
        for target in &targets {
            let gate = two_step();
            let denied = terminate_through(path, &gate, target, "cleanup").unwrap_err();
            assert_eq!(
                denied.code(),
                DenialCode::TargetNotSingle,
                "{path:?} {target:?}: {denied}"
            );
            assert_eq!(denied.approval_token(), None, "{path:?} {target:?}");
        }
    }
}

#[test]
fn r02_a_probe_that_fails_refuses_the_call() {
    for path in PATHS {
        let gate = two_step();
        let id = format!("r02-{path:?}-never-created");
        let denied = terminate_through(path, &gate, &id, "cleanup").unwrap_err();
        assert_eq!(denied.code(), DenialCode::EvidenceUnavailable, "{path:?}");
        assert!(denied.to_string().contains("no instance"), "{denied}");
        assert_eq!(denied.approval_token(), None, "{path:?}");
    }
}

struct Counting(Arc<AtomicUsize>);

impl toolgate::Approver for Counting {
    fn approve(&self, _: &ApprovalRequest<'_>) -> Approval {
        self.0.fetch_add(1, Ordering::SeqCst);
        Approval::Approve
    }
}

#[test]
fn r03_no_approver_answers_an_irreversible_call_and_without_a_store_it_is_refused() {
    let asked = Arc::new(AtomicUsize::new(0));
    for path in PATHS {
        let id = format!("r03-{path:?}");
        put(&id, "running");
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .approver(Counting(asked.clone()))
            .build()
            .unwrap();
        let denied = terminate_through(path, &gate, &id, "cleanup").unwrap_err();
        assert_eq!(denied.code(), DenialCode::ApprovalRequired, "{path:?}");
        assert!(denied.to_string().contains("two steps"), "{denied}");
        // With a store too, the approver is still not asked: the request waits for an operator.
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .approver(Counting(asked.clone()))
            .two_step_approvals()
            .build()
            .unwrap();
        let (_, token) = filed(path, &gate, &id);
        gate.approve_typed(&token, "ana", &id).unwrap();
        terminate_through(path, &gate, &id, "decommissioned").unwrap();
        let allow_all = Gate::builder()
            .mode(Mode::FullAuto)
            .approver(AllowAllApprover)
            .build()
            .unwrap();
        assert!(terminate_through(path, &allow_all, &id, "cleanup").is_err());
    }
    assert_eq!(asked.load(Ordering::SeqCst), 0);
}

#[test]
fn r04_an_approval_for_the_session_grants_no_irreversible_call() {
    for path in PATHS {
        let id = format!("r04-{path:?}");
        put(&id, "running");
        let gate = two_step();
        let (_, token) = filed(path, &gate, &id);
        gate.answer(
            &token,
            Answer::Approve {
                by: "ana".into(),
                for_session: true,
                confirmation: Some(id.clone()),
            },
        )
        .unwrap();
        terminate_through(path, &gate, &id, "decommissioned").unwrap();
        assert!(gate.grants().is_empty(), "{path:?}: {:?}", gate.grants());
        // The same call again is asked again, as every irreversible call is.
        set(&id, "running");
        let again = terminate_through(path, &gate, &id, "decommissioned").unwrap_err();
        assert!(
            matches!(
                again.code(),
                DenialCode::ApprovalPending | DenialCode::ApprovalReused
            ),
            "{path:?}: {again}"
        );
        assert_eq!(terminated(&id), 1, "{path:?}");
    }
}

/// A store that answers every call with an approval no one typed the target of.
struct Careless;

impl ApprovalStore for Careless {
    fn consume<'a>(&'a self, _: &'a ApprovalCall) -> StoreFuture<'a, Result<Consumed, StoreError>> {
        Box::pin(std::future::ready(Ok(Consumed::Answered(
            Answer::Approve {
                by: "careless".into(),
                for_session: false,
                confirmation: None,
            },
        ))))
    }

    fn answer<'a>(
        &'a self,
        _: &'a str,
        _: Answer,
    ) -> StoreFuture<'a, Result<Binding, ApproveError>> {
        Box::pin(std::future::ready(Err(ApproveError::UnknownToken)))
    }
}

#[test]
fn r05_a_store_that_forgets_the_typed_target_approves_nothing() {
    for path in PATHS {
        let id = format!("r05-{path:?}");
        put(&id, "running");
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .approval_store(Careless)
            .build()
            .unwrap();
        let denied = terminate_through(path, &gate, &id, "cleanup").unwrap_err();
        assert_eq!(denied.code(), DenialCode::ConfirmationMismatch, "{path:?}");
        assert_eq!(terminated(&id), 0, "{path:?}");
    }
}

#[test]
fn r06_an_approver_sees_the_target_its_state_and_the_plan_and_a_change_under_its_eyes_refuses() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let approver = {
        let seen = seen.clone();
        move |request: &ApprovalRequest<'_>| {
            let target = request.target.unwrap().to_owned();
            seen.lock().unwrap().push((
                target.clone(),
                request.irreversible,
                request.evidence.map(str::to_owned),
                request.rollback.cloned(),
            ));
            // Someone else stops the instance while the approver reads the request.
            if target.ends_with("-changed") {
                set(&target, "stopped");
            }
            Approval::Approve
        }
    };
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(approver)
        .build()
        .unwrap();
    put("r06-changed", "running");
    let denied = gate.run(|| stop("r06-changed".into())).unwrap_err();
    assert_eq!(denied.code(), DenialCode::EvidenceChanged, "{denied}");
    put("r06-kept", "running");
    assert_eq!(
        gate.run(|| stop("r06-kept".into())).unwrap(),
        "r06-kept stopped"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    let (target, irreversible, evidence, plan) = &seen[1];
    assert_eq!(target, "r06-kept");
    assert!(!irreversible);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(evidence.as_deref().unwrap()).unwrap(),
        json!({"id": "r06-kept", "state": "running"})
    );
    assert_eq!(
        plan.as_ref(),
        Some(&Rollback::steps("start `r06-kept` again from the console"))
    );
}

#[test]
fn r07_the_mode_refuses_first_and_nothing_of_the_target_is_read() {
    for path in PATHS {
        let id = format!("r07-{path:?}");
        put(&id, "running");
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .two_step_approvals()
            .build()
            .unwrap();
        let denied = terminate_through(path, &gate, &id, "cleanup").unwrap_err();
        assert_eq!(denied.code(), DenialCode::ModeNotAllowed, "{path:?}");
        assert_eq!(reads(&id), 0, "{path:?}");
        // Nor is a plan made for a call the mode refuses.
        let plans = PLANS.load(std::sync::atomic::Ordering::SeqCst);
        let denied = terminate_through(path, &gate, &id, "counted").unwrap_err();
        assert_eq!(denied.code(), DenialCode::ModeNotAllowed, "{path:?}");
        assert_eq!(
            PLANS.load(std::sync::atomic::Ordering::SeqCst),
            plans,
            "{path:?}"
        );
        // A single target is checked before the table allows anything: the mode still speaks first.
        let denied = terminate_through(path, &gate, "*", "cleanup").unwrap_err();
        assert_eq!(denied.code(), DenialCode::ModeNotAllowed, "{path:?}");
    }
    let _: Path = Path::Direct;
}
