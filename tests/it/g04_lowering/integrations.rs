//! Guarantee 4 (The mode is only ever lowered, and a lowering reaches every call not yet started),
//! against tools handed to a rig agent, tool definitions for model APIs, and the tracing sink's
//! spans.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(feature = "rig")]

use serde_json::json;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use toolgate::approval::SessionGrant;
use toolgate::audit::MemorySink;
use toolgate::provider::{self, Provider};
use toolgate::{Approval, ApprovalRequest, Mode, registry};

use crate::common::gates;
use crate::fixtures::integrations::*;
use crate::g07_approvals::checks::built;

/// Tries: definitions and rig's `allowed_now` rendered under FULL_AUTO, then the gate lowered to
/// SHADOW, then the model calls what it was shown (through the rig tool kept from before, and
/// through `tool_id` and `registry().call`). Guarantee: listing is advice; the gate decides each call
/// when it is made, at its mode then.
#[tokio::test]
async fn i04_a_gate_lowered_after_the_definitions_refuses_what_they_listed() {
    let gate = full_allow();
    // What the model is shown, rendered now (rig's tools are built here, before the lowering).
    let shown: Vec<_> = iatk(&gate).allowed_now().tools();
    let shown_names: Vec<String> = shown.iter().map(|t| t.name().to_string()).collect();
    assert!(
        shown_names.contains(&"iatk-wipe".to_owned()),
        "{shown_names:?}"
    );
    let shown_tool = |name: &str| {
        shown
            .iter()
            .find(|t| t.name().as_str() == name)
            .unwrap_or_else(|| panic!("{name} was shown"))
            .clone()
    };
    let definitions = registry().definitions(&gate, Provider::OpenAi);
    let names: Vec<String> = definitions
        .tools
        .iter()
        .map(|d| name_of(Provider::OpenAi, d))
        .collect();
    assert!(names.contains(&"iatk-wipe".to_owned()));
    let clone = gate.clone();
    clone.lower(Mode::Shadow).unwrap();

    let refused = refusal(shown_tool("iatk-wipe").execute(json!({"id": 401})).await);
    assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"));
    let refused = refusal(
        shown_tool("iatk-wipe_async")
            .execute(json!({"id": 401}))
            .await,
    );
    assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"));
    let refused = refusal(
        shown_tool("iatk-edit")
            .execute(json!({"id": 401, "text": "x"}))
            .await,
    );
    assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"));
    let by_name = registry()
        .call(&gate, &provider::tool_id("iatk-wipe"), json!({"id": 401}))
        .await;
    assert_eq!(by_name.unwrap_err().code(), "MODE_NOT_ALLOWED");
    assert_eq!(
        ran("wipe", 401) + ran("wipe_async", 401) + ran("edit", 401),
        0,
        "a call ran at the old mode"
    );
    let now: BTreeSet<String> = listed(&gate, None, Provider::OpenAi)
        .into_iter()
        .filter(|n| n.starts_with("iatk-"))
        .collect();
    assert!(
        !now.contains("iatk-wipe") && !now.contains("iatk-edit"),
        "{now:?}"
    );
}

/// Tries: an async approver that lowers the gate to SHADOW while it thinks, then approves, through
/// rig. Guarantee 4: the mode is checked again just before the body; a gate lowered while the
/// approver thought refuses the call, and every `enter` written gets its `exit`.
#[tokio::test]
async fn i07_a_gate_lowered_while_an_async_approver_thinks_refuses_the_rig_call() {
    let lower = Arc::new(OnceLock::new());
    let audit = MemorySink::new();
    let gate = built(Mode::FullAuto, |b| {
        b.audit(audit.clone()).async_approver(CountingAsync {
            asked: Arc::new(AtomicUsize::new(0)),
            answer: || Approval::Approve,
            lower: lower.clone(),
        })
    });
    lower.set(gate.clone()).ok().unwrap();
    let refused = refusal(run(&iatk(&gate), "iatk.wipe_async", json!({"id": 701})).await);
    assert!(refused.is_refusal(), "{refused:?}");
    assert_eq!(gate.mode(), Mode::Shadow);
    assert_eq!(ran("wipe_async", 701), 0, "the call ran at the old mode");
    every_enter_has_its_exit(&audit.records());
}

/// Tries: a session grant given through rig, then the gate lowered; and the grant used for another
/// tool. Guarantee: a grant covers one tool at the approved risk or lower, through its gate, and no
/// approval lifts a mode: the lowered gate refuses the granted tool.
#[tokio::test]
async fn i09_a_session_grant_through_rig_does_not_outlive_a_lowering() {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let gate = gates::approved(Mode::FullAuto, move |request: &ApprovalRequest<'_>| {
        counter.fetch_add(1, Ordering::SeqCst);
        if request.tool.id == "iatk.wipe" {
            Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600)))
        } else {
            Approval::Reject("only wipe".into())
        }
    });
    let tools = iatk(&gate);
    run(&tools, "iatk.wipe", json!({"id": 901})).await.unwrap();
    run(&tools, "iatk.wipe", json!({"id": 902})).await.unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the grant asked again");
    let other = refusal(run(&tools, "iatk.x.y_z", json!({"id": 903})).await);
    assert_eq!(other.code(), Some("APPROVAL_REJECTED"));
    gate.lower(Mode::PartialAuto).unwrap();
    let lowered = refusal(run(&tools, "iatk.wipe", json!({"id": 904})).await);
    assert_eq!(lowered.code(), Some("MODE_NOT_ALLOWED"));
    assert_eq!(
        ran("wipe", 904) + ran("x.y_z", 903),
        0,
        "a grant outlived its limits"
    );
}
