//! Guarantee 3 (Deny first), against tools handed to a rig agent, tool definitions for model APIs,
//! and the tracing sink's spans.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(feature = "rig")]

use serde_json::json;
use toolgate::{AllowAllApprover, Gate, Mode};

use crate::fixtures::integrations::*;

/// Tries: a deny-listed tool under a gate that would otherwise allow it (FULL_AUTO, an approver
/// that approves all), through every provider's definitions, rig's `allowed_now`, and a call of the
/// rig tool that `toolgate::rig::tools` lists anyway. Guarantee: deny first; definitions list only
/// what the gate allows now; the body never runs.
#[tokio::test]
async fn i03_a_deny_listed_tool_is_never_listed_and_never_runs() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .deny("iatk.wipe")
        .deny("iatk.x.*")
        .build()
        .unwrap();
    for provider in PROVIDERS {
        let names = listed(&gate, None, provider);
        for denied in ["iatk-wipe", "iatk-x-y_z"] {
            assert!(!names.contains(denied), "{provider:?} lists {denied}");
        }
        assert!(names.contains("iatk-wipe_async"), "{provider:?}");
    }
    let allowed = rig_names(&iatk(&gate).allowed_now());
    assert!(!allowed.contains("iatk-wipe"), "{allowed:?}");
    assert!(!allowed.contains("iatk-x-y_z"), "{allowed:?}");

    let every = toolgate::rig::tools(&gate);
    for name in ["iatk-wipe", "iatk-x-y_z"] {
        let tool = every
            .iter()
            .find(|t| t.name().as_str() == name)
            .expect("every callable tool is given");
        let refused = tool.execute(json!({"id": 301})).await.unwrap_err();
        assert!(refused.is_refusal());
        assert_eq!(refused.code(), Some("DENY_LISTED"), "{name}");
        // Extra keys do not change the answer.
        let refused = tool
            .execute(json!({"id": 301, "force": true, "deny": false}))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Some("DENY_LISTED"), "{name}");
    }
    assert_eq!(
        ran("wipe", 301) + ran("x.y_z", 301),
        0,
        "a deny-listed body ran"
    );
}
