//! An irreversible tool over MCP: its definition says what it is; the in-band form shows the target,
//! its state and the plan, and approves only with the target typed back; the operator of an
//! out-of-band request is handed the same.
#![cfg(feature = "mcp-http")]

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolgate::mcp::rmcp::model::CallToolResponse;
use toolgate::mcp::{APPROVAL_INPUT, PendingApproval, ToolgateServer};
use toolgate::{Rollback, registry};

use super::*;
use crate::fixtures::mcp_in_band::{Client, call, code_of, connect, gate, in_band, state_of};
use crate::fixtures::shared_stores::Memory;

fn form(response: &CallToolResponse) -> Value {
    match response {
        CallToolResponse::InputRequired(input) => {
            serde_json::to_value(&input.input_requests).unwrap()[APPROVAL_INPUT]["params"].clone()
        }
        other => panic!("not InputRequired: {other:?}"),
    }
}

async fn answered(client: &Client, args: &Value, state: &str, content: Value) -> String {
    let Value::Object(arguments) = args.clone() else {
        panic!()
    };
    let mut responses = std::collections::BTreeMap::new();
    responses.insert(
        APPROVAL_INPUT.to_owned(),
        json!({"action": "accept", "content": content}),
    );
    let params = toolgate::mcp::rmcp::model::CallToolRequestParams::new("irr.terminate")
        .with_arguments(arguments)
        .with_request_state(state.to_owned())
        .with_input_responses(responses);
    code_of(&client.call_tool_once(params).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m01_the_form_shows_the_target_its_state_and_the_plan_and_asks_for_the_target() {
    let id = "m01-i";
    put(id, "running");
    let sink = Arc::new(Memory::default());
    let client = connect(in_band(gate(sink))).await;
    let args = json!({"instance_id": id, "reason": "cost \u{202e}cleanup"});
    let first = call(&client, "irr.terminate", args.clone(), None, None).await;
    let params = form(&first);
    let message = params["message"].as_str().unwrap();
    for part in [
        "target: m01-i",
        r#"the target now: {"id":"m01-i","state":"running"}"#,
        r#"undone by: call `irr.launch` with {"instance_id":"m01-i"}"#,
        "THIS CANNOT BE UNDONE. To approve, type the target exactly: m01-i",
        // The agent's text is shown with its reordering character visible.
        "cost \\u{202E}cleanup",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    assert!(!message.contains('\u{202e}'));
    assert_eq!(
        params["requestedSchema"]["properties"]["confirmation"]["type"],
        "string"
    );
    // Approved without the target, or mistyped: nothing runs.
    let state = state_of(&first);
    let missing = answered(&client, &args, &state, json!({"decision": "approve"})).await;
    assert_eq!(missing, "CONFIRMATION_MISMATCH");
    let state = state_of(&call(&client, "irr.terminate", args.clone(), None, None).await);
    let wrong = json!({"decision": "approve", "confirmation": "m01"});
    assert_eq!(
        answered(&client, &args, &state, wrong).await,
        "CONFIRMATION_MISMATCH"
    );
    assert_eq!(terminated(id), 0);
    // Typed: it runs once.
    let state = state_of(&call(&client, "irr.terminate", args.clone(), None, None).await);
    let typed = json!({"decision": "approve", "confirmation": id});
    assert_eq!(answered(&client, &args, &state, typed.clone()).await, "OK");
    assert_eq!(terminated(id), 1);
    assert_eq!(
        answered(&client, &args, &state, typed).await,
        "APPROVAL_REUSED"
    );
    assert_eq!(terminated(id), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m02_the_operator_of_an_out_of_band_request_is_handed_the_target_state_and_plan() {
    let id = "m02-i";
    put(id, "running");
    let pending: Arc<Mutex<Vec<PendingApproval>>> = Arc::default();
    let server = {
        let pending = pending.clone();
        ToolgateServer::new(gate(Arc::new(Memory::default())))
            .on_pending(move |p| pending.lock().unwrap().push(p.clone()))
    };
    let client = connect(server).await;
    let args = json!({"instance_id": id, "reason": "cost"});
    let code = code_of(&call(&client, "irr.terminate", args, None, None).await);
    assert_eq!(code, "APPROVAL_PENDING");
    let pending = pending.lock().unwrap();
    let request = &pending[0];
    assert!(request.irreversible);
    assert_eq!(request.target.as_deref(), Some(id));
    assert_eq!(
        serde_json::from_str::<Value>(request.evidence.as_deref().unwrap()).unwrap(),
        json!({"id": id, "state": "running"})
    );
    assert_eq!(
        request.rollback,
        Some(Rollback::call("irr.launch", json!({"instance_id": id})))
    );
}

#[test]
fn m03_the_definition_says_what_the_tool_declares() {
    let terminate = toolgate::mcp::definition(registry().get("irr.terminate").unwrap()).unwrap();
    let meta = serde_json::to_value(terminate.meta.unwrap()).unwrap();
    assert_eq!(meta["dev.toolgate/irreversible"], true);
    assert_eq!(meta["dev.toolgate/target"], "instance_id");
    assert_eq!(meta["dev.toolgate/evidence"], true);
    assert_eq!(meta["dev.toolgate/rollback"], true);
    let launch = toolgate::mcp::definition(registry().get("irr.launch").unwrap()).unwrap();
    let meta = serde_json::to_value(launch.meta.unwrap()).unwrap();
    for key in ["irreversible", "target", "evidence", "rollback"] {
        assert!(meta.get(format!("dev.toolgate/{key}")).is_none(), "{meta}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m04_over_mcp_a_changed_target_and_a_plan_that_cannot_be_made_run_nothing() {
    let sink = Arc::new(Memory::default());
    let client = connect(in_band(gate(sink))).await;
    // Approved in the form, then the instance changes before the retry's body: nothing runs, and the
    // client is answered with a new form showing the state now.
    let id = "m04-i";
    put(id, "running");
    let args = json!({"instance_id": id, "reason": "cost"});
    let state = state_of(&call(&client, "irr.terminate", args.clone(), None, None).await);
    // Read 1 showed the form; the retry reads 2 when it decides and 3 just before the body.
    flip_at(id, 3, "serving-traffic");
    let typed = json!({"decision": "approve", "confirmation": id});
    assert_eq!(
        answered(&client, &args, &state, typed).await,
        "EVIDENCE_CHANGED"
    );
    assert_eq!(terminated(id), 0);
    let again = call(&client, "irr.terminate", args.clone(), None, None).await;
    let message = form(&again)["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains(r#""state":"serving-traffic""#),
        "{message}"
    );
    // A plan that cannot be made: refused before any form is shown.
    put("m04-j", "running");
    let no_plan = json!({"instance_id": "m04-j", "reason": "no snapshot"});
    let refused = call(&client, "irr.terminate", no_plan, None, None).await;
    assert_eq!(code_of(&refused), "ROLLBACK_UNAVAILABLE");
    assert_eq!(terminated("m04-j"), 0);
}
