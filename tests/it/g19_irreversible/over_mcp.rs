//! An irreversible tool over MCP: its definition says what it is; an in-band server sends no form for
//! it; its operator is handed the target, its state and the plan, and approves only with the target
//! typed back.
#![cfg(feature = "mcp-http")]

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolgate::mcp::rmcp::model::CallToolResponse;
use toolgate::mcp::{PendingApproval, ToolgateServer};
use toolgate::{Rollback, registry};

use super::*;
use crate::fixtures::mcp_in_band::{call, code_of, connect, gate, in_band};
use crate::fixtures::shared_stores::Memory;

/// An in-band server sends no form for an irreversible call: its operator approves it, out of band,
/// with the target typed back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m01_an_in_band_server_hands_an_irreversible_call_to_its_operator_not_its_client() {
    let id = "m01-i";
    put(id, "running");
    let server_gate = gate(Arc::new(Memory::default()));
    let pending: Arc<Mutex<Vec<PendingApproval>>> = Arc::default();
    let server = {
        let pending = pending.clone();
        in_band(server_gate.clone()).on_pending(move |p| pending.lock().unwrap().push(p.clone()))
    };
    let client = connect(server).await;
    let args = json!({"instance_id": id, "reason": "cost"});
    let first = call(&client, "irr.terminate", args.clone(), None, None).await;
    assert!(
        !matches!(first, CallToolResponse::InputRequired(_)),
        "{first:?}"
    );
    assert_eq!(code_of(&first), "APPROVAL_PENDING");
    let token = {
        let pending = pending.lock().unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].target.as_deref(), Some(id));
        pending[0].token.clone()
    };
    // Mistyped: nothing is approved.
    assert!(server_gate.approve_typed(&token, "ops", "m01").is_err());
    let again = call(&client, "irr.terminate", args.clone(), None, None).await;
    assert_eq!(code_of(&again), "APPROVAL_PENDING");
    assert_eq!(terminated(id), 0);
    // Typed: it runs once, and the next call asks again.
    server_gate.approve_typed(&token, "ops", id).unwrap();
    let ran = call(&client, "irr.terminate", args.clone(), None, None).await;
    assert_eq!(code_of(&ran), "OK");
    assert_eq!(terminated(id), 1);
    let next = call(&client, "irr.terminate", args, None, None).await;
    assert_eq!(code_of(&next), "APPROVAL_PENDING");
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
    let server_gate = gate(Arc::new(Memory::default()));
    let pending: Arc<Mutex<Vec<PendingApproval>>> = Arc::default();
    let server = {
        let pending = pending.clone();
        in_band(server_gate.clone()).on_pending(move |p| pending.lock().unwrap().push(p.clone()))
    };
    let client = connect(server).await;
    // Approved by its operator, then the instance changes before the retry's body: nothing runs,
    // and the operator is handed a new request showing the state now.
    let id = "m04-i";
    put(id, "running");
    let args = json!({"instance_id": id, "reason": "cost"});
    let first = call(&client, "irr.terminate", args.clone(), None, None).await;
    assert_eq!(code_of(&first), "APPROVAL_PENDING");
    let token = pending.lock().unwrap()[0].token.clone();
    server_gate.approve_typed(&token, "ops", id).unwrap();
    // Read 1 was for the request; the retry reads 2 when it decides and 3 just before the body.
    flip_at(id, 3, "serving-traffic");
    let retried = call(&client, "irr.terminate", args.clone(), None, None).await;
    assert_eq!(code_of(&retried), "EVIDENCE_CHANGED");
    assert_eq!(terminated(id), 0);
    let again = call(&client, "irr.terminate", args.clone(), None, None).await;
    assert_eq!(code_of(&again), "APPROVAL_PENDING");
    let evidence = pending
        .lock()
        .unwrap()
        .last()
        .unwrap()
        .evidence
        .clone()
        .unwrap();
    assert!(
        evidence.contains(r#""state":"serving-traffic""#),
        "{evidence}"
    );
    // A plan that cannot be made: refused before anyone is asked.
    put("m04-j", "running");
    let no_plan = json!({"instance_id": "m04-j", "reason": "no snapshot"});
    let refused = call(&client, "irr.terminate", no_plan, None, None).await;
    assert_eq!(code_of(&refused), "ROLLBACK_UNAVAILABLE");
    assert_eq!(terminated("m04-j"), 0);
    assert_eq!(pending.lock().unwrap().len(), 2);
}
