//! Guarantee 2 (It fails closed), against tools handed to a rig agent, tool definitions for model
//! APIs, and the tracing sink's spans.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(feature = "rig")]

use rig_agent::AgentBuilder;
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use serde_json::{Value, json};
use toolgate::audit::{MemorySink, Stage};
use toolgate::provider::{self};
use toolgate::{Gate, Mode, registry};

use crate::common::gates;
use crate::fixtures::integrations::*;

// ---------------------------------------------------------------------------------------------------
// rig

/// Tries: a rig agent's model calling a refused tool under other spellings (the id with its dot,
/// upper case, a Unicode hyphen, a zero-width space, a trailing space, an underscore), and, under a
/// gate that allows everything, those spellings through `provider::tool_id` and `registry().call`.
/// Guarantee: ids are compared byte for byte (`UNKNOWN_TOOL`), rig's tools call through the gate;
/// no spelling runs a tool the gate refuses, or any tool but the one named exactly.
#[tokio::test]
async fn i01_name_spellings_never_reach_a_refused_tool() {
    let audit = MemorySink::new();
    let shadow = gates::audited(Mode::Shadow, audit.clone());
    let spellings = [
        "iatk.wipe",
        "IATK-WIPE",
        "iatk\u{2010}wipe",
        "iatk-wipe\u{200b}",
        "iatk-wipe ",
        "iatk_wipe",
        "iatk-wipe",
        "iatk--wipe",
        "iatk-wi\u{440}e",
    ];
    for (n, name) in spellings.iter().enumerate() {
        let model = MockCompletionModel::from_turns([
            MockTurn::from_contents([call(&format!("c{n}"), name, json!({"id": 101}))]),
            MockTurn::text("done"),
        ]);
        let agent = AgentBuilder::new(model.clone())
            .dynamic_tools(toolgate::rig::tools(&shadow))
            .build();
        let _ = agent.prompt("wipe entry 101").max_turns(3).await;
    }
    assert_eq!(ran("wipe", 101), 0, "a refused wipe ran through rig");
    assert!(
        !audit
            .records()
            .iter()
            .any(|r| r.tool == "iatk.wipe" && r.stage == Stage::Enter),
        "an allowed decision for iatk.wipe under SHADOW"
    );

    // Under a gate that would run anything, a spelling that is not exactly the id runs nothing.
    let full = full_allow();
    for name in spellings
        .iter()
        .filter(|&&n| n != "iatk-wipe" && n != "iatk.wipe")
    {
        let result = registry()
            .call(&full, &provider::tool_id(name), json!({"id": 102}))
            .await;
        let error = result.expect_err(name);
        assert_eq!(error.code(), "UNKNOWN_TOOL", "{name:?}");
        let rig = toolgate::rig::tools(&full);
        assert!(
            !rig.iter().any(|t| t.name().as_str() == *name),
            "rig offers a tool named {name:?}"
        );
    }
    assert_eq!(ran("wipe", 102), 0, "a look-alike name ran iatk.wipe");
}

/// Tries: arguments a model may send that are not the tool's: extra keys (`apiKey`, a key named
/// like the gate's own words), the arguments as a JSON string (as some APIs send them), `null`, an
/// array, and a refused tool with arguments that do not parse. Guarantee: the arguments are an
/// object of exactly the tool's parameters, else `INVALID_PARAMS` and no body; a refused tool
/// answers its refusal whatever its arguments.
#[tokio::test]
async fn i05_arguments_that_are_not_the_tools_never_run_it() {
    let partial = Gate::new(Mode::PartialAuto).unwrap();
    let tools = iatk(&partial);
    let bad = [
        json!({"id": 501, "text": "x", "apiKey": "k"}),
        json!({"id": 501, "text": "x", "mode": "FULL_AUTO", "approved": true}),
        json!("{\"id\": 501, \"text\": \"x\", \"extra\": 1}"),
        Value::Null,
        json!([501, "x"]),
        json!({"id": 501}),
        json!({"id": "501", "text": "x"}),
    ];
    for arguments in bad {
        let refused = refusal(run(&tools, "iatk.edit", arguments.clone()).await);
        assert!(
            matches!(refused.code(), Some("INVALID_PARAMS")),
            "{arguments}: {:?}",
            refused.code()
        );
    }
    assert_eq!(ran("edit", 501), 0, "an edit with bad arguments ran");

    for arguments in [
        json!({"id": 502, "force": true}),
        json!("{\"id\": 502}"),
        Value::Null,
        json!({"id": "not a number"}),
    ] {
        let refused = refusal(run(&tools, "iatk.wipe", arguments.clone()).await);
        assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"), "{arguments}");
        assert!(refused.is_refusal());
    }
    assert_eq!(ran("wipe", 502), 0);
}
