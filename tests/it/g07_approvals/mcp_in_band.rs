//! Guarantee 7 (approvals are single-use, bound and expiring) over MCP: in-band states and forms,
//! retried, raced, rejected, cancelled or answered late, run their exact call once; an out-of-band
//! token never reaches the client.
#![cfg(feature = "mcp-http")]

use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolgate::mcp::rmcp::model::CallToolRequestParams;
use toolgate::mcp::{APPROVAL_INPUT, Approvals, InBand, ToolgateServer};

use crate::fixtures::mcp_in_band::*;
use crate::g07_approvals::rounds::*;

/// Four retries racing with one approved state, on one connection: the body runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b20_racing_retries_with_one_state_run_once() {
    let sink = Arc::new(Memory::default());
    let client = Arc::new(connect(in_band(gate(sink.clone()))).await);
    let first = call(&client, "m01.m01_wire", json!({"cents": 1}), None, None).await;
    let state = state_of(&first);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = client.clone();
        let state = state.clone();
        tasks.push(tokio::spawn(async move {
            answered(
                &client,
                "m01.m01_wire",
                json!({"cents": 1}),
                &state,
                "approve",
            )
            .await
        }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(tokio::time::timeout(T, t).await.unwrap().unwrap());
    }
    assert_eq!(M01.load(Ordering::SeqCst), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| *c == "OK").count(), 1, "{codes:?}");
}

/// A state used on another connection of the same server, with other arguments, or for another
/// tool: nothing runs; the genuine retry runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b21_state_other_connection_arguments_tool() {
    let sink = Arc::new(Memory::default());
    let server = in_band(gate(sink.clone()));
    let other_connection = server.connection();
    let a = connect(server).await;
    let b = connect(other_connection).await;
    let form = Form::asked(&a, "m02.m02_wire", json!({"cents": 2})).await;
    let state = &form.state;
    let codes = vec![
        answered(&b, "m02.m02_wire", json!({"cents": 2}), state, "approve").await,
        answered(&a, "m02.m02_wire", json!({"cents": 3}), state, "approve").await,
        answered(
            &a,
            "m02.m02_wire_other",
            json!({"cents": 2}),
            state,
            "approve",
        )
        .await,
    ];
    assert_eq!(M02.load(Ordering::SeqCst), 0, "{codes:?}");
    assert!(codes.iter().all(|c| c != "OK"), "{codes:?}");
    let genuine = form.answer("approve").await;
    assert_eq!(genuine, "OK");
    let replay_b = answered(&b, "m02.m02_wire", json!({"cents": 2}), state, "approve").await;
    let replay_a = form.answer("approve").await;
    let plain = code_of(&call(&a, "m02.m02_wire", json!({"cents": 2}), None, None).await);
    assert_eq!(
        M02.load(Ordering::SeqCst),
        1,
        "{replay_b} {replay_a} {plain}"
    );
    // Every record names the principal.
    let bad: Vec<_> = sink
        .records()
        .into_iter()
        .filter(|r| r.get("principal").and_then(Value::as_str) != Some("carol"))
        .collect();
    assert!(bad.is_empty(), "records without the principal: {bad:#?}");
}

/// A rejected state answered again with approve, and a declined one: nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b23_reject_then_approve_with_the_same_state() {
    let sink = Arc::new(Memory::default());
    let client = connect(in_band(gate(sink.clone()))).await;
    let form = Form::asked(&client, "m04.m04_wire", json!({"cents": 4})).await;
    let r1 = form.answer("reject").await;
    let r2 = form.answer("approve").await;
    // A state with no answer at all, then with an answer of another shape.
    let form_s2 = Form::asked(&client, "m04.m04_wire", json!({"cents": 5})).await;
    let r3 = code_of(
        &call(
            &client,
            "m04.m04_wire",
            json!({"cents": 5}),
            Some(&form_s2.state),
            None,
        )
        .await,
    );
    let mut weird = std::collections::BTreeMap::new();
    weird.insert(
        APPROVAL_INPUT.to_owned(),
        json!({"action": "accept", "content": {"decision": ["approve"]}}),
    );
    let Value::Object(args) = json!({"cents": 5}) else {
        panic!()
    };
    let params = CallToolRequestParams::new("m04.m04_wire")
        .with_arguments(args)
        .with_request_state(form_s2.state.clone())
        .with_input_responses(weird);
    let r4 = code_of(
        &tokio::time::timeout(T, client.call_tool_once(params))
            .await
            .unwrap()
            .unwrap(),
    );
    let r5 = form_s2.answer("Approve").await;
    assert_eq!(r1, "APPROVAL_REJECTED");
    assert_eq!(M04.load(Ordering::SeqCst), 0, "{r1} {r2} {r3} {r4} {r5}");
}

/// A cancelled retry: its exit record says `cancelled`, and neither a replay of its state nor a plain
/// call runs the body again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b24_cancelled_retry_runs_once_and_says_cancelled() {
    let sink = Arc::new(Memory::default());
    let client = connect(in_band(gate(sink.clone()))).await;
    let form = Form::asked(&client, "m05.m05_slow", json!({"cents": 5})).await;
    let Value::Object(args) = json!({"cents": 5}) else {
        panic!()
    };
    let params = CallToolRequestParams::new("m05.m05_slow")
        .with_arguments(args)
        .with_request_state(form.state.clone())
        .with_input_responses(answer("approve"));
    let started = Instant::now();
    {
        let fut = client.call_tool_once(params);
        tokio::pin!(fut);
        loop {
            tokio::select! {
                r = &mut fut => panic!("the slow call finished: {r:?}"),
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            if M05.load(Ordering::SeqCst) >= 1 {
                break;
            }
            assert!(started.elapsed() < T, "the body never started");
        }
    } // dropped: rmcp sends notifications/cancelled
    let deadline = Instant::now() + T;
    let exit = loop {
        let exits: Vec<_> = sink
            .records()
            .into_iter()
            .filter(|r| r["stage"] == "exit" && r["tool"] == "m05.m05_slow")
            .collect();
        if let Some(e) = exits.last() {
            break e.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no exit record: {:#?}",
            sink.records()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(exit["outcome"], "cancelled", "{exit:#}");
    let replay = form.answer("approve").await;
    let plain = code_of(&call(&client, "m05.m05_slow", json!({"cents": 5}), None, None).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(M05.load(Ordering::SeqCst), 1, "{replay} {plain}");
}

/// Out of band: the pending token goes to `on_pending` and never to the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b26_out_of_band_token_never_reaches_the_client() {
    let sink = Arc::new(Memory::default());
    let tokens = Arc::new(Mutex::new(Vec::<String>::new()));
    let t2 = tokens.clone();
    let g = gate(sink.clone());
    let server = ToolgateServer::new(g.clone())
        .on_pending(move |p| t2.lock().unwrap().push(p.token.clone()));
    let client = connect(server).await;
    let r = call(&client, "m07.m07_wire", json!({"cents": 7}), None, None).await;
    let text = format!("{r:?}");
    let token = tokens
        .lock()
        .unwrap()
        .first()
        .cloned()
        .expect("on_pending was called");
    assert!(
        !text.contains(&token),
        "the token reached the client: {text}"
    );
    assert_eq!(code_of(&r), "APPROVAL_PENDING");
    g.approve(&token).unwrap();
    let codes = [
        code_of(&call(&client, "m07.m07_wire", json!({"cents": 8}), None, None).await),
        code_of(&call(&client, "m07.m07_wire", json!({"cents": 7}), None, None).await),
        code_of(&call(&client, "m07.m07_wire", json!({"cents": 7}), None, None).await),
    ];
    assert_eq!(M07.load(Ordering::SeqCst), 1, "{codes:?}");
}

/// A state answered after its time to live: refused (`APPROVAL_EXPIRED`), nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b40_in_band_state_answered_late() {
    let sink = Arc::new(Memory::default());
    let server = ToolgateServer::new(gate(sink.clone())).approvals(Approvals::InBand(
        InBand::new(KEY).unwrap().ttl(Duration::from_millis(300)),
    ));
    let client = connect(server).await;
    let form = Form::asked(&client, "m11.m11_wire", json!({"cents": 1})).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let c = form.answer("approve").await;
    assert_eq!(M11.load(Ordering::SeqCst), 0, "{c}");
    assert_eq!(c, "APPROVAL_EXPIRED");
}
