//! Guarantee 7 (Approvals are single-use, bound and expiring), against budgets and two-step
//! approvals kept in stores, the principal, and approvals over MCP.
//! Each test asserts the guarantee: it passes when the attack fails.

use crate::common::gates;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fixtures::shared_stores::*;
use toolgate::gate::BudgetScope;
use toolgate::{Denied, Gate, Mode, tool};

// ---------------------------------------------------------------------------------------------------
// Two-step approvals
// ---------------------------------------------------------------------------------------------------

/// An approved pending request runs exactly the approved call, once: not other arguments, not twice,
/// not through another gate, not after the gate was lowered, not in racing threads.
#[test]
fn b13_pending_approval_other_arguments_twice_other_gate() {
    let gate = gates::two_step(Mode::FullAuto);
    let other = gates::two_step(Mode::FullAuto);
    let refused = gate.run(|| b13_wire(100)).unwrap_err();
    assert_eq!(refused.code(), "APPROVAL_PENDING");
    let token = refused.approval_token().expect("a token").to_owned();
    assert!(
        !refused.to_string().contains(&token),
        "the token leaks into the message"
    );
    let json = serde_json::to_string(&refused).unwrap_or_default();
    assert!(!json.contains(&token), "the token leaks into the JSON");
    // another gate knows nothing of it
    assert!(
        other.approve(&token).is_err(),
        "another gate approved a foreign token"
    );
    assert_ne!(code(other.run(|| b13_wire(100))), "OK");
    gate.approve(&token).unwrap();
    // other arguments
    assert_ne!(code(gate.run(|| b13_wire(101))), "OK");
    assert_ne!(code(other.run(|| b13_wire(100))), "OK");
    assert_eq!(B13.load(Ordering::SeqCst), 0);
    // racing threads with the approved call: one runs
    let barrier = Arc::new(std::sync::Barrier::new(6));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let g = gate.clone();
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                code(g.run(|| b13_wire(100)))
            })
        })
        .collect();
    let codes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(B13.load(Ordering::SeqCst), 1, "{codes:?}");
    assert_ne!(code(gate.run(|| b13_wire(100))), "OK");
    assert_eq!(B13.load(Ordering::SeqCst), 1);
    // approving twice does not make a second run
    let _ = gate.approve(&token);
    assert_ne!(code(gate.run(|| b13_wire(100))), "OK");
    assert_eq!(B13.load(Ordering::SeqCst), 1);
}

/// An approval given for a direct call is used once whether the retry is direct or by name.
#[test]
fn b15_pending_approval_by_name_and_direct_once() {
    let gate = gates::two_step(Mode::FullAuto);
    let err = toolgate::registry()
        .call(&gate, "b15.b15_wire", serde_json::json!({"cents": 5}))
        .now()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), "APPROVAL_PENDING");
    let token = err.denied().unwrap().approval_token().unwrap().to_owned();
    assert!(!serde_json::to_string(&err).unwrap().contains(&token));
    gate.approve(&token).unwrap();
    // by name with a different JSON spelling of the same value: allowed to run (same canonical JSON)
    let r1 = toolgate::registry()
        .call(&gate, "b15.b15_wire", serde_json::json!({"cents": 5}))
        .now()
        .unwrap();
    let r2 = gate.run(|| b15_wire(5));
    let r3 = toolgate::registry()
        .call(&gate, "b15.b15_wire", serde_json::json!({"cents": 5}))
        .now()
        .unwrap();
    assert_eq!(B15.load(Ordering::SeqCst), 1, "{r1:?} {r2:?} {r3:?}");
}

// ---------------------------------------------------------------------------------------------------
// Approvals over MCP (in band), driven with rmcp's own client over an in-process duplex
// ---------------------------------------------------------------------------------------------------

mod mcp {
    use super::*;
    use serde_json::{Value, json};
    use toolgate::mcp::rmcp::model::{CallToolRequestParams, CallToolResponse, ProtocolVersion};
    use toolgate::mcp::rmcp::service::{
        ClientLifecycleMode, RoleClient, RunningService, serve_client_with_lifecycle,
    };
    use toolgate::mcp::rmcp::{ClientHandler, ServiceExt};
    use toolgate::mcp::{APPROVAL_INPUT, Approvals, InBand, ToolgateServer};

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef-attack15";
    const T: Duration = Duration::from_secs(10);

    counter!(M01);
    /// m01: slow, async.
    #[tool(risk = "HIGH_WRITE", domain = "m01", callable)]
    pub async fn m01_wire(cents: u64) -> Result<u64, Denied> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        M01.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    counter!(M02);
    /// m02.
    #[tool(risk = "HIGH_WRITE", domain = "m02", callable)]
    pub fn m02_wire(cents: u64) -> Result<u64, Denied> {
        M02.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }
    /// m02, another tool with the same parameters.
    #[tool(risk = "HIGH_WRITE", domain = "m02", callable)]
    pub fn m02_wire_other(cents: u64) -> Result<u64, Denied> {
        M02.fetch_add(1000, Ordering::SeqCst);
        Ok(cents)
    }

    counter!(M03);
    /// m03.
    #[tool(risk = "HIGH_WRITE", domain = "m03", callable)]
    pub fn m03_wire(cents: u64) -> Result<u64, Denied> {
        M03.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    counter!(M04);
    /// m04.
    #[tool(risk = "HIGH_WRITE", domain = "m04", callable)]
    pub fn m04_wire(cents: u64) -> Result<u64, Denied> {
        M04.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    counter!(M05);
    /// m05: waits long once started.
    #[tool(risk = "HIGH_WRITE", domain = "m05", callable)]
    pub async fn m05_slow(cents: u64) -> Result<u64, Denied> {
        M05.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(30)).await;
        M05.fetch_add(1000, Ordering::SeqCst);
        Ok(cents)
    }

    counter!(M06);
    /// m06.
    #[tool(risk = "HIGH_WRITE", domain = "m06", callable)]
    pub fn m06_wire(cents: u64) -> Result<u64, Denied> {
        M06.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    counter!(M07);
    /// m07.
    #[tool(risk = "HIGH_WRITE", domain = "m07", callable)]
    pub fn m07_wire(cents: u64) -> Result<u64, Denied> {
        M07.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    /// m09: lowered out of the list.
    #[tool(risk = "LOW_WRITE", domain = "m09", callable)]
    pub fn m09_low() -> Result<(), Denied> {
        Ok(())
    }

    fn gate(sink: Arc<Memory>) -> Gate {
        Gate::builder()
            .mode(Mode::FullAuto)
            .two_step_approvals()
            .principal("carol")
            .audit_shared(sink)
            .build()
            .unwrap()
    }

    fn in_band(gate: Gate) -> ToolgateServer {
        ToolgateServer::new(gate).approvals(Approvals::InBand(InBand::new(KEY).unwrap()))
    }

    type Client = RunningService<RoleClient, FormClient>;

    /// A client that shows forms: it declares elicitation, so an in-band approval form is sent to it.
    #[derive(Clone, Copy)]
    struct FormClient;

    impl ClientHandler for FormClient {
        fn get_info(&self) -> toolgate::mcp::rmcp::model::ClientConfig {
            let mut capabilities = toolgate::mcp::rmcp::model::ClientCapabilities::default();
            capabilities.elicitation =
                Some(toolgate::mcp::rmcp::model::ElicitationCapability::new());
            toolgate::mcp::rmcp::model::ClientConfig::new(
                capabilities,
                toolgate::mcp::rmcp::model::Implementation::new("forms", "0"),
            )
        }
    }

    async fn connect(server: ToolgateServer) -> Client {
        let (c, s) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            if let Ok(running) = server.serve(tokio::io::split(s)).await {
                let _ = running.waiting().await;
            }
        });
        tokio::time::timeout(
            T,
            serve_client_with_lifecycle(
                FormClient,
                tokio::io::split(c),
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            ),
        )
        .await
        .expect("connect in time")
        .expect("connects")
    }

    fn answer(decision: &str) -> toolgate::mcp::rmcp::model::InputResponses {
        let mut m = std::collections::BTreeMap::new();
        m.insert(
            APPROVAL_INPUT.to_owned(),
            json!({"action": "accept", "content": {"decision": decision, "reason": "attack"}}),
        );
        m
    }

    async fn call(
        client: &Client,
        name: &str,
        arguments: Value,
        state: Option<&str>,
        decision: Option<&str>,
    ) -> CallToolResponse {
        let Value::Object(arguments) = arguments else {
            panic!()
        };
        let mut params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        if let Some(state) = state {
            params = params.with_request_state(state.to_owned());
        }
        if let Some(decision) = decision {
            params = params.with_input_responses(answer(decision));
        }
        match tokio::time::timeout(T, client.call_tool_once(params))
            .await
            .expect("answered in time")
        {
            Ok(response) => response,
            // A request state that fails its integrity check is a JSON-RPC error: seen here by its
            // code, as a refusal is.
            Err(toolgate::mcp::rmcp::ServiceError::McpError(error))
                if error.code == toolgate::mcp::rmcp::model::ErrorCode::INVALID_PARAMS =>
            {
                let mut result = toolgate::mcp::rmcp::model::CallToolResult::error(vec![]);
                result.structured_content = error.data;
                CallToolResponse::Complete(result)
            }
            Err(error) => panic!("a tool response: {error:?}"),
        }
    }

    /// The request state of an `InputRequired` answer.
    fn state_of(response: &CallToolResponse) -> String {
        match response {
            CallToolResponse::InputRequired(input) => input.request_state.clone().expect("a state"),
            other => panic!("not InputRequired: {other:?}"),
        }
    }

    /// The code of a result: `OK`, a refusal's code, or `INPUT_REQUIRED`.
    fn code_of(response: &CallToolResponse) -> String {
        match response {
            CallToolResponse::Complete(result) if result.is_error != Some(true) => "OK".into(),
            CallToolResponse::Complete(result) => result
                .structured_content
                .as_ref()
                .and_then(|c| c.get("code"))
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned(),
            CallToolResponse::InputRequired(_) => "INPUT_REQUIRED".into(),
            _ => "TASK".into(),
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Four retries racing with one approved state, on one connection: the body runs once.
    #[test]
    fn b20_racing_retries_with_one_state_run_once() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let client = Arc::new(connect(in_band(gate(sink.clone()))).await);
            let first = call(&client, "m01.m01_wire", json!({"cents": 1}), None, None).await;
            let state = state_of(&first);
            let mut tasks = Vec::new();
            for _ in 0..4 {
                let client = client.clone();
                let state = state.clone();
                tasks.push(tokio::spawn(async move {
                    code_of(
                        &call(
                            &client,
                            "m01.m01_wire",
                            json!({"cents": 1}),
                            Some(&state),
                            Some("approve"),
                        )
                        .await,
                    )
                }));
            }
            let mut codes = Vec::new();
            for t in tasks {
                codes.push(tokio::time::timeout(T, t).await.unwrap().unwrap());
            }
            assert_eq!(M01.load(Ordering::SeqCst), 1, "{codes:?}");
            assert_eq!(codes.iter().filter(|c| *c == "OK").count(), 1, "{codes:?}");
        });
    }

    /// A state used on another connection of the same server, with other arguments, or for another
    /// tool: nothing runs; the genuine retry runs once.
    #[test]
    fn b21_state_other_connection_arguments_tool() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let server = in_band(gate(sink.clone()));
            let other_connection = server.connection();
            let a = connect(server).await;
            let b = connect(other_connection).await;
            let state = state_of(&call(&a, "m02.m02_wire", json!({"cents": 2}), None, None).await);
            let codes = vec![
                code_of(
                    &call(
                        &b,
                        "m02.m02_wire",
                        json!({"cents": 2}),
                        Some(&state),
                        Some("approve"),
                    )
                    .await,
                ),
                code_of(
                    &call(
                        &a,
                        "m02.m02_wire",
                        json!({"cents": 3}),
                        Some(&state),
                        Some("approve"),
                    )
                    .await,
                ),
                code_of(
                    &call(
                        &a,
                        "m02.m02_wire_other",
                        json!({"cents": 2}),
                        Some(&state),
                        Some("approve"),
                    )
                    .await,
                ),
            ];
            assert_eq!(M02.load(Ordering::SeqCst), 0, "{codes:?}");
            assert!(codes.iter().all(|c| c != "OK"), "{codes:?}");
            let genuine = code_of(
                &call(
                    &a,
                    "m02.m02_wire",
                    json!({"cents": 2}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            assert_eq!(genuine, "OK");
            let replay_b = code_of(
                &call(
                    &b,
                    "m02.m02_wire",
                    json!({"cents": 2}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            let replay_a = code_of(
                &call(
                    &a,
                    "m02.m02_wire",
                    json!({"cents": 2}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
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
        });
    }

    /// The form answered approve after the gate was lowered: the call does not run.
    #[test]
    fn b22_answer_after_lowering() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let g = gate(sink.clone());
            let client = connect(in_band(g.clone())).await;
            let state =
                state_of(&call(&client, "m03.m03_wire", json!({"cents": 3}), None, None).await);
            g.lower(Mode::PartialAuto).unwrap();
            let c = code_of(
                &call(
                    &client,
                    "m03.m03_wire",
                    json!({"cents": 3}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            assert_eq!(M03.load(Ordering::SeqCst), 0, "{c}");
        });
    }

    /// A rejected state answered again with approve, and a declined one: nothing runs.
    #[test]
    fn b23_reject_then_approve_with_the_same_state() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let client = connect(in_band(gate(sink.clone()))).await;
            let state =
                state_of(&call(&client, "m04.m04_wire", json!({"cents": 4}), None, None).await);
            let r1 = code_of(
                &call(
                    &client,
                    "m04.m04_wire",
                    json!({"cents": 4}),
                    Some(&state),
                    Some("reject"),
                )
                .await,
            );
            let r2 = code_of(
                &call(
                    &client,
                    "m04.m04_wire",
                    json!({"cents": 4}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            // A state with no answer at all, then with an answer of another shape.
            let s2 =
                state_of(&call(&client, "m04.m04_wire", json!({"cents": 5}), None, None).await);
            let r3 = code_of(
                &call(
                    &client,
                    "m04.m04_wire",
                    json!({"cents": 5}),
                    Some(&s2),
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
                .with_request_state(s2.clone())
                .with_input_responses(weird);
            let r4 = code_of(
                &tokio::time::timeout(T, client.call_tool_once(params))
                    .await
                    .unwrap()
                    .unwrap(),
            );
            let r5 = code_of(
                &call(
                    &client,
                    "m04.m04_wire",
                    json!({"cents": 5}),
                    Some(&s2),
                    Some("Approve"),
                )
                .await,
            );
            assert_eq!(r1, "APPROVAL_REJECTED");
            assert_eq!(M04.load(Ordering::SeqCst), 0, "{r1} {r2} {r3} {r4} {r5}");
        });
    }

    /// A cancelled retry: its exit record says `cancelled`, and neither a replay of its state nor a plain
    /// call runs the body again.
    #[test]
    fn b24_cancelled_retry_runs_once_and_says_cancelled() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let client = connect(in_band(gate(sink.clone()))).await;
            let state =
                state_of(&call(&client, "m05.m05_slow", json!({"cents": 5}), None, None).await);
            let Value::Object(args) = json!({"cents": 5}) else {
                panic!()
            };
            let params = CallToolRequestParams::new("m05.m05_slow")
                .with_arguments(args)
                .with_request_state(state.clone())
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
            let replay = code_of(
                &call(
                    &client,
                    "m05.m05_slow",
                    json!({"cents": 5}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            let plain =
                code_of(&call(&client, "m05.m05_slow", json!({"cents": 5}), None, None).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(M05.load(Ordering::SeqCst), 1, "{replay} {plain}");
        });
    }

    /// A state sealed by one server's key opens at no server with another gate, even with the same key
    /// and agent label.
    #[test]
    fn b25_state_of_another_gate_same_key() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let a = connect(in_band(gate(sink.clone()))).await;
            let b = connect(in_band(gate(sink.clone()))).await;
            let state = state_of(&call(&a, "m06.m06_wire", json!({"cents": 6}), None, None).await);
            let c = code_of(
                &call(
                    &b,
                    "m06.m06_wire",
                    json!({"cents": 6}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            assert_eq!(M06.load(Ordering::SeqCst), 0, "{c}");
            assert_eq!(c, "APPROVAL_STATE_INVALID");
            // As the protocol requires, a JSON-RPC error, not a tool result.
            let Value::Object(arguments) = json!({"cents": 6}) else {
                unreachable!()
            };
            let raw = b
                .call_tool_once(
                    CallToolRequestParams::new("m06.m06_wire")
                        .with_arguments(arguments)
                        .with_request_state(state)
                        .with_input_responses(answer("approve")),
                )
                .await;
            assert!(
                matches!(&raw, Err(toolgate::mcp::rmcp::ServiceError::McpError(e))
                    if e.code == toolgate::mcp::rmcp::model::ErrorCode::INVALID_PARAMS),
                "{raw:?}"
            );
        });
    }

    /// Out of band: the pending token goes to `on_pending` and never to the agent.
    #[test]
    fn b26_out_of_band_token_never_reaches_the_client() {
        rt().block_on(async {
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
        });
    }

    struct Notified(tokio::sync::mpsc::UnboundedSender<()>);
    impl ClientHandler for Notified {
        async fn on_tool_list_changed(
            &self,
            _context: toolgate::mcp::rmcp::service::NotificationContext<RoleClient>,
        ) {
            let _ = self.0.send(());
        }
    }

    /// `list_changed` is sent to a client of the initialize handshake after `lower`, and the next list
    /// is narrower.
    #[test]
    fn b27_list_changed_after_lower() {
        rt().block_on(async {
            let g = Gate::builder().mode(Mode::PartialAuto).build().unwrap();
            let server = ToolgateServer::new(g.clone()).mode_poll(Duration::from_millis(20));
            let (c, s) = tokio::io::duplex(1 << 20);
            tokio::spawn(async move {
                if let Ok(running) = server.serve(tokio::io::split(s)).await {
                    let _ = running.waiting().await;
                }
            });
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let client = tokio::time::timeout(T, Notified(tx).serve(tokio::io::split(c)))
                .await
                .unwrap()
                .unwrap();
            let before = tokio::time::timeout(T, client.list_all_tools())
                .await
                .unwrap()
                .unwrap();
            assert!(before.iter().any(|t| t.name == "m09.m09_low"));
            g.lower(Mode::Shadow).unwrap();
            let got = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await;
            assert!(
                matches!(got, Ok(Some(()))),
                "no list_changed within 3 s of lower"
            );
            let after = tokio::time::timeout(T, client.list_all_tools())
                .await
                .unwrap()
                .unwrap();
            assert!(!after.iter().any(|t| t.name == "m09.m09_low"));
        });
    }

    /// Sends `line` (over a 4 KiB limit) after the handshake and returns what the server answers within
    /// 3 s (`None`: silence).
    async fn oversized(line: String) -> Option<Value> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let g = Gate::builder().mode(Mode::PartialAuto).build().unwrap();
        let server = ToolgateServer::new(g);
        let (c, s) = tokio::io::duplex(1 << 22);
        let (sr, sw) = tokio::io::split(s);
        let reader = toolgate::mcp::stdio::LimitedLines::new(sr, 4096);
        tokio::spawn(async move {
            if let Ok(running) = server.serve((reader, sw)).await {
                let _ = running.waiting().await;
            }
        });
        let (cr, mut cw) = tokio::io::split(c);
        let mut lines = BufReader::new(cr).lines();
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}});
        cw.write_all(format!("{init}\n").as_bytes()).await.unwrap();
        let first = tokio::time::timeout(T, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(first.contains("\"id\":1"), "{first}");
        cw.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .await
            .unwrap();
        cw.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        match tokio::time::timeout(Duration::from_secs(3), lines.next_line()).await {
            Ok(Ok(Some(l))) => serde_json::from_str(&l).ok(),
            _ => None,
        }
    }

    fn pad() -> String {
        "A".repeat(10_000)
    }

    fn answered_under(got: &Option<Value>, id: Value) -> bool {
        got.as_ref()
            .is_some_and(|v| v["id"] == id && v["error"]["code"] == -32600)
    }

    /// An oversized message with its id first is answered with an error under its id.
    #[test]
    fn b28_oversized_message_answered_under_its_id() {
        let pad = pad();
        let got = rt().block_on(oversized(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{{\"name\":\"x\",\"arguments\":{{\"pad\":\"{pad}\"}}}}}}"
        )));
        assert!(answered_under(&got, json!(7)), "{got:#?}");
    }

    /// An oversized message whose params hold an `id` key before the top-level id (all within the
    /// first KiB): the error must go to the request's own id, not to the nested one. Sent under
    /// `"id": 99`, the key nested in `params`, it would leave request 8 unanswered (the client waits,
    /// as with rmcp's own reader), and a client with a request 99 in flight would see that one fail.
    #[test]
    fn b29_oversized_message_nested_id_before_the_real_one() {
        let pad = pad();
        let got = rt().block_on(oversized(format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{{\"id\":99,\"name\":\"x\"}},\"id\":8,\"pad\":\"{pad}\"}}"
        )));
        assert!(
            answered_under(&got, json!(8)),
            "the oversized request 8 was answered as: {got:#?}"
        );
    }

    /// A string id.
    #[test]
    fn b30_oversized_message_string_id() {
        let pad = pad();
        let got = rt().block_on(oversized(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"s-9\",\"method\":\"tools/call\",\"params\":{{\"pad\":\"{pad}\"}}}}"
        )));
        assert!(answered_under(&got, json!("s-9")), "{got:#?}");
    }

    /// An `"id":` inside a string value before the real id.
    #[test]
    fn b31_oversized_message_id_inside_a_string_before_the_real_one() {
        let pad = pad();
        let got = rt().block_on(oversized(format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"x \\\"id\\\":98\",\"id\":10,\"pad\":\"{pad}\"}}"
        )));
        assert!(
            answered_under(&got, json!(10)),
            "the oversized request 10 was answered as: {got:#?}"
        );
    }

    /// The id after whitespace and an escaped key (`"\u0069d"` is `"id"` to a JSON parser).
    /// Answered by an error without an id, request 11, whose id is in the first KiB, would never be
    /// answered.
    #[test]
    fn b32_oversized_message_escaped_id_key() {
        let pad = pad();
        let got = rt().block_on(oversized(format!(
            "{{ \"jsonrpc\" : \"2.0\" , \"\\u0069d\" : 11 , \"method\":\"tools/call\",\"pad\":\"{pad}\"}}"
        )));
        assert!(
            answered_under(&got, json!(11)),
            "the oversized request 11 was answered as: {got:#?}"
        );
    }

    counter!(H01);
    /// h01: allowed in PARTIAL_AUTO, refused in SHADOW.
    #[tool(risk = "LOW_WRITE", domain = "h01", callable)]
    pub fn h01_low(n: u64) -> Result<u64, Denied> {
        H01.fetch_add(1, Ordering::SeqCst);
        Ok(n)
    }

    /// Serves an `HttpService` on a loopback port; returns the address.
    async fn serve_http(service: toolgate::mcp::http::HttpService) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(service.clone());
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                });
            }
        });
        addr
    }

    /// The status of an HTTP answer and the JSON-RPC messages of its body (JSON or SSE `data:` lines).
    fn answer_of(text: &str) -> (u16, Vec<Value>) {
        let status: u16 = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut messages = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            let candidate = line.strip_prefix("data:").map(str::trim).unwrap_or(line);
            if candidate.starts_with('{')
                && let Ok(v) = serde_json::from_str::<Value>(candidate)
            {
                messages.push(v);
            }
        }
        (status, messages)
    }

    /// One POST: the status, the session id header, and the JSON-RPC messages of the body (JSON or SSE).
    async fn post(
        addr: std::net::SocketAddr,
        token: Option<&str>,
        session: Option<&str>,
        body: Value,
    ) -> (u16, Option<String>, Vec<Value>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = body.to_string();
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\nContent-Length: {}\r\n",
            addr.port(),
            body.len()
        );
        if let Some(token) = token {
            request.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        if let Some(session) = session {
            request.push_str(&format!(
                "Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-06-18\r\n"
            ));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
                Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&raw);
            if text.contains("\"result\"") || text.contains("\"error\"") {
                // one JSON-RPC answer per POST: enough
                if text.matches("\n\n").count() >= 2 || !text.contains("event-stream") {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    if let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_millis(50), stream.read(&mut buf)).await
                    {
                        raw.extend_from_slice(&buf[..n]);
                    }
                    break;
                }
            }
        }
        let text = String::from_utf8_lossy(&raw).to_string();
        let session = text
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("mcp-session-id:"))
            .map(|l| l.split_once(':').unwrap().1.trim().to_owned());
        let (status, messages) = answer_of(&text);
        (status, session, messages)
    }

    /// A session opened by one principal, then used with another principal's token: the call is
    /// decided by the second principal's gate (or refused), never by the first's; a session used with
    /// no or an unknown token is 401; records name the principal whose gate decided.
    #[test]
    fn b33_http_session_changes_principal() {
        use toolgate::mcp::http::{HttpService, Principals};
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let alice = Gate::builder()
                .mode(Mode::PartialAuto)
                .principal("alice")
                .audit_shared(sink.clone())
                .build()
                .unwrap();
            let bob = Gate::builder()
                .mode(Mode::Shadow)
                .principal("bob")
                .audit_shared(sink.clone())
                .build()
                .unwrap();
            let server = ToolgateServer::new(bob.clone()).only(|m| m.domain == Some("h01"));
            let principals = Principals::new()
                .bearer("alice-token-0123456789", "alice", alice.clone())
                .bearer("bob-token-0123456789", "bob", bob.clone());
            let config = toolgate::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default();
            let addr = serve_http(HttpService::new(server, principals, config)).await;
            let alice_t = Some("alice-token-0123456789");
            let bob_t = Some("bob-token-0123456789");

            let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}});
            let (status, session, msgs) = post(addr, alice_t, None, init).await;
            assert_eq!(status, 200, "{msgs:?}");
            let session = session.expect("a legacy session id");
            let (st, _, _) = post(
                addr,
                alice_t,
                Some(&session),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
            assert!(st == 202 || st == 200, "{st}");
            // alice may call it
            let call = |id: u64, n: u64| {
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "h01.h01_low", "arguments": {"n": n}}})
            };
            let (st, _, msgs) = post(addr, alice_t, Some(&session), call(2, 1)).await;
            assert_eq!(st, 200, "{msgs:?}");
            assert_eq!(H01.load(Ordering::SeqCst), 1, "alice's call ran: {msgs:?}");
            // bob on alice's session: his gate is SHADOW, so nothing runs
            let (st_b, _, msgs_b) = post(addr, bob_t, Some(&session), call(3, 2)).await;
            let (st_l, _, list_b) = post(
                addr,
                bob_t,
                Some(&session),
                json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),
            )
            .await;
            // no token, unknown token, on alice's session: 401
            let (st_none, _, _) = post(addr, None, Some(&session), call(5, 3)).await;
            let (st_bad, _, _) = post(addr, Some("mallory"), Some(&session), call(6, 4)).await;
            assert_eq!(st_none, 401);
            assert_eq!(st_bad, 401);
            assert_eq!(
                H01.load(Ordering::SeqCst),
                1,
                "bob's call on alice's session ran under alice's gate: status {st_b} {msgs_b:?}"
            );
            let listed = list_b.iter().any(|m| m.to_string().contains("h01.h01_low"));
            assert!(!listed, "bob's tools/list on alice's session shows alice's tools: {st_l} {list_b:?}");
            // records: each names the principal whose gate made them; none lacks one
            let records = sink.records();
            let bad: Vec<_> = records
                .iter()
                .filter(|r| !matches!(r.get("principal").and_then(Value::as_str), Some("alice" | "bob")))
                .collect();
            assert!(bad.is_empty(), "records without a principal: {bad:#?}");
        });
    }

    counter!(M10);
    /// m10.
    #[tool(risk = "HIGH_WRITE", domain = "m10", callable)]
    pub fn m10_wire(cents: u64) -> Result<u64, Denied> {
        M10.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    /// In band under a budget: forms left unanswered keep no unit, a call the budget refuses gets no
    /// form (no approver is asked), and no form answered runs a call past the budget.
    #[test]
    fn b34_in_band_form_not_shown_past_the_budget() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let g = Gate::builder()
                .mode(Mode::FullAuto)
                .two_step_approvals()
                .audit_shared(sink.clone())
                .budget(BudgetScope::tool("m10.*"), 2, HOUR)
                .build()
                .unwrap();
            let client = connect(in_band(g)).await;
            let s1 = call(&client, "m10.m10_wire", json!({"cents": 1}), None, None).await;
            let s2 = call(&client, "m10.m10_wire", json!({"cents": 2}), None, None).await;
            let third = call(&client, "m10.m10_wire", json!({"cents": 3}), None, None).await;
            assert_eq!(code_of(&s1), "INPUT_REQUIRED");
            assert_eq!(code_of(&s2), "INPUT_REQUIRED");
            // Waiting forms hold no unit: a third call gets its own form.
            assert_eq!(code_of(&third), "INPUT_REQUIRED", "{third:?}");
            let r3 = code_of(
                &call(
                    &client,
                    "m10.m10_wire",
                    json!({"cents": 3}),
                    Some(&state_of(&third)),
                    Some("approve"),
                )
                .await,
            );
            assert_eq!(r3, "OK");
            let r1 = code_of(
                &call(
                    &client,
                    "m10.m10_wire",
                    json!({"cents": 1}),
                    Some(&state_of(&s1)),
                    Some("approve"),
                )
                .await,
            );
            let r2 = code_of(
                &call(
                    &client,
                    "m10.m10_wire",
                    json!({"cents": 2}),
                    Some(&state_of(&s2)),
                    Some("approve"),
                )
                .await,
            );
            // The third ran first; of the two others one more fits the budget of 2 in the hour.
            assert_eq!([r1.as_str(), r2.as_str()], ["OK", "BUDGET_EXHAUSTED"]);
            assert!(M10.load(Ordering::SeqCst) <= 2, "{r1} {r2}");
            let allowed = sink
                .records()
                .iter()
                .filter(|r| r["stage"] == "enter")
                .count();
            assert!(allowed <= 2, "{r1} {r2}: {allowed} calls entered");
        });
    }

    counter!(H02);
    /// h02.
    #[tool(risk = "HIGH_WRITE", domain = "h02", callable)]
    pub fn h02_wire(cents: u64) -> Result<u64, Denied> {
        H02.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    /// Over HTTP with the 2026-07-28 protocol (no session): an in-band state sealed for alice, retried
    /// with bob's token, does not run (bound to the principal), and alice's own retry runs once.
    #[test]
    fn b35_http_in_band_state_of_another_principal() {
        use toolgate::mcp::http::{HttpService, Principals};
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let mk = |p: &str| {
                Gate::builder()
                    .mode(Mode::FullAuto)
                    .two_step_approvals()
                    .principal(p)
                    .audit_shared(sink.clone())
                    .build()
                    .unwrap()
            };
            let (alice, bob) = (mk("alice"), mk("bob"));
            let server = in_band(bob.clone()).only(|m| m.domain == Some("h02"));
            let principals = Principals::new()
                .bearer("alice-token-0123456789", "alice", alice.clone())
                .bearer("bob-token-0123456789", "bob", bob.clone());
            let config = toolgate::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default();
            let addr = serve_http(HttpService::new(server, principals, config)).await;
            let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}});
            let call = |id: u64, state: Option<&str>| {
                let mut params = json!({"name": "h02.h02_wire", "arguments": {"cents": 9}, "_meta": meta.clone()});
                if let Some(state) = state {
                    params["requestState"] = json!(state);
                    params["inputResponses"] = json!({APPROVAL_INPUT: {"action": "accept", "content": {"decision": "approve"}}});
                }
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
            };
            let post2 = |token: &'static str, body: Value| async move {
                post2(addr, token, body).await
            };
            let (st, msgs) = post2("alice-token-0123456789", call(1, None)).await;
            let state = msgs
                .iter()
                .find_map(|m| m["result"]["requestState"].as_str().map(str::to_owned))
                .unwrap_or_else(|| panic!("no request state: {st} {msgs:#?}"));
            let (st_b, by_bob) = post2("bob-token-0123456789", call(2, Some(&state))).await;
            assert_eq!(H02.load(Ordering::SeqCst), 0, "bob ran alice's approval: {st_b} {by_bob:#?}");
            let (_, by_alice) = post2("alice-token-0123456789", call(3, Some(&state))).await;
            let (_, again) = post2("alice-token-0123456789", call(4, Some(&state))).await;
            assert_eq!(H02.load(Ordering::SeqCst), 1, "{by_alice:#?} {again:#?}");
        });
    }

    /// A POST in the 2026-07-28 protocol (no session).
    async fn post2(addr: std::net::SocketAddr, token: &str, body: Value) -> (u16, Vec<Value>) {
        let method = body["method"].as_str().unwrap_or("").to_owned();
        let name = body["params"]["name"]
            .as_str()
            .or(body["params"]["taskId"].as_str())
            .map(|n| format!("Mcp-Name: {n}\r\n"))
            .unwrap_or_default();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = body.to_string();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\nMcp-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n{name}Authorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
            addr.port(),
            body.len()
        );
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
                Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&raw);
            if text.contains("\"jsonrpc\"") && (text.ends_with("\n\n") || text.ends_with('}')) {
                break;
            }
        }
        let text = String::from_utf8_lossy(&raw).to_string();
        let (status, mut messages) = answer_of(&text);
        if messages.is_empty() {
            messages.push(json!({"raw": text}));
        }
        (status, messages)
    }

    counter!(H03);
    /// h03.
    #[tool(risk = "HIGH_WRITE", domain = "h03", callable)]
    pub fn h03_wire(cents: u64) -> Result<u64, Denied> {
        H03.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    /// Tasks over HTTP: alice's task (a call waiting for an operator) is answered to alice only: bob's
    /// `tasks/get` and `tasks/cancel` of its id reach nothing; after the operator approves, it runs once.
    #[test]
    fn b36_http_task_of_another_principal() {
        use toolgate::mcp::http::{HttpService, Principals};
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let mk = |p: &str| {
                Gate::builder()
                    .mode(Mode::FullAuto)
                    .two_step_approvals()
                    .principal(p)
                    .audit_shared(sink.clone())
                    .build()
                    .unwrap()
            };
            let (alice, bob) = (mk("alice"), mk("bob"));
            let tokens = Arc::new(Mutex::new(Vec::<String>::new()));
            let t2 = tokens.clone();
            let server = ToolgateServer::new(bob.clone())
                .only(|m| m.domain == Some("h03"))
                .on_pending(move |p| t2.lock().unwrap().push(p.token.clone()));
            let principals = Principals::new()
                .bearer("alice-token-0123456789", "alice", alice.clone())
                .bearer("bob-token-0123456789", "bob", bob.clone());
            let config = toolgate::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default();
            let addr = serve_http(HttpService::new(server, principals, config)).await;
            let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
            const A: &str = "alice-token-0123456789";
            const B: &str = "bob-token-0123456789";
            let body = |id: u64, method: &str, params: Value| {
                let mut params = params;
                params["_meta"] = meta.clone();
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
            };
            let (st, msgs) = post2(addr, A, body(1, "tools/call", json!({"name": "h03.h03_wire", "arguments": {"cents": 3}}))).await;
            let task = msgs
                .iter()
                .find_map(|m| m["result"]["taskId"].as_str().map(str::to_owned))
                .unwrap_or_else(|| panic!("no task: {st} {msgs:#?}"));
            let (_, get_b) = post2(addr, B, body(2, "tasks/get", json!({"taskId": task}))).await;
            let (_, cancel_b) = post2(addr, B, body(3, "tasks/cancel", json!({"taskId": task}))).await;
            let leaked = |msgs: &Vec<Value>| msgs.iter().any(|m| m.get("result").is_some_and(|r| r.get("status").is_some()));
            assert!(!leaked(&get_b), "bob read alice's task: {get_b:#?}");
            let header_error = |msgs: &Vec<Value>| msgs.iter().any(|m| m["error"]["code"] == -32020);
            assert!(!header_error(&get_b) && !header_error(&cancel_b), "{get_b:#?} {cancel_b:#?}");
            assert!(!leaked(&cancel_b), "bob cancelled alice's task: {cancel_b:#?}");
            let token = tokens.lock().unwrap().first().cloned().expect("on_pending");
            alice.approve(&token).unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            let done = loop {
                let (_, get_a) = post2(addr, A, body(4, "tasks/get", json!({"taskId": task}))).await;
                let status = get_a.iter().find_map(|m| m["result"]["status"].as_str().map(str::to_owned));
                if status.as_deref().is_some_and(|s| s != "working" && s != "input_required") {
                    break get_a;
                }
                assert!(Instant::now() < deadline, "the task never completed: {get_a:#?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            assert_eq!(H03.load(Ordering::SeqCst), 1, "{done:#?}");
        });
    }

    counter!(M11);
    /// m11.
    #[tool(risk = "HIGH_WRITE", domain = "m11", callable)]
    pub fn m11_wire(cents: u64) -> Result<u64, Denied> {
        M11.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    /// A state answered after its time to live: refused (`APPROVAL_EXPIRED`), nothing runs.
    #[test]
    fn b40_in_band_state_answered_late() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let server = ToolgateServer::new(gate(sink.clone())).approvals(Approvals::InBand(
                InBand::new(KEY).unwrap().ttl(Duration::from_millis(300)),
            ));
            let client = connect(server).await;
            let state =
                state_of(&call(&client, "m11.m11_wire", json!({"cents": 1}), None, None).await);
            tokio::time::sleep(Duration::from_millis(600)).await;
            let c = code_of(
                &call(
                    &client,
                    "m11.m11_wire",
                    json!({"cents": 1}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            assert_eq!(M11.load(Ordering::SeqCst), 0, "{c}");
            assert_eq!(c, "APPROVAL_EXPIRED");
        });
    }

    /// `tools/list` over HTTP without a session (2026-07-28) shows each principal its own gate's tools.
    #[test]
    fn b41_http_tools_list_per_principal() {
        use toolgate::mcp::http::{HttpService, Principals};
        rt().block_on(async {
            let alice = gates::of_principal(Mode::PartialAuto, "alice");
            let bob = gates::of_principal(Mode::Shadow, "bob");
            let server = ToolgateServer::new(alice.clone()).only(|m| m.domain == Some("h01"));
            let principals = Principals::new()
                .bearer("alice-token-0123456789", "alice", alice.clone())
                .bearer("bob-token-0123456789", "bob", bob.clone());
            let config = toolgate::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default();
            let addr = serve_http(HttpService::new(server, principals, config)).await;
            let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}});
            let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}});
            let (_, a) = post2(addr, "alice-token-0123456789", list.clone()).await;
            let (_, b) = post2(addr, "bob-token-0123456789", list.clone()).await;
            let (st, _) = post2(addr, "nobody", list.clone()).await;
            let shows = |m: &Vec<Value>| m.iter().any(|v| v.to_string().contains("h01.h01_low"));
            assert!(shows(&a), "alice: {a:#?}");
            assert!(!shows(&b), "bob sees what alice's gate allows: {b:#?}");
            assert_eq!(st, 401);
        });
    }
}
