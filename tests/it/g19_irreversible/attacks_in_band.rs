//! Outside attacks on "never answered in band" (SECURITY.md 19): an MCP server with
//! `Approvals::InBand` "sends no form for it and refuses a request state sent with it, so the call
//! waits for an operator. An rmcp tool gated in place declares it over its `Parameters<T>` and is held
//! to the same."
//!
//! The attacks: a state sealed for an in-place sibling with the same arguments, sent with the in-place
//! irreversible tool and with the `callable` one; a client that accepts every form it is sent, by any
//! protocol; a reversible tool approved in band whose body calls an irreversible one; a client of
//! tasks whose operator approves without typing the target. A test that fails got through.
#![cfg(feature = "mcp-http")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use toolgate::Gate;
use toolgate::mcp::rmcp::ServiceExt;
use toolgate::mcp::rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationCapability, GetTaskParams, Implementation,
    ProtocolVersion, TaskPayload,
};
use toolgate::mcp::rmcp::service::{
    ClientLifecycleMode, RequestContext, RoleClient, RunningService, serve_client_with_lifecycle,
};
use toolgate::mcp::rmcp::{ClientHandler, ErrorData as McpError};
use toolgate::mcp::{PendingApproval, ToolgateServer};

use super::*;
use crate::fixtures::mcp_in_band::{
    answered_with, call, code_of, connect, gate, in_band, state_of,
};
use crate::fixtures::shared_stores::Memory;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Inst {
    /// The instance.
    instance_id: String,
    /// Why.
    reason: String,
}

fn relaunch(args: &Inst) -> Result<Rollback, String> {
    relaunch_plan(&args.instance_id, &args.reason)
}

/// An escalation that says every call is a read: a risk below the declared one.
fn says_read_only(_: &Inst) -> toolgate::Risk {
    toolgate::Risk::ReadOnly
}

/// What the wrapper's inner irreversible call answered, by instance.
static INNER: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// An rmcp handler with an irreversible tool and a reversible sibling of the same parameters.
#[derive(Clone, Default)]
pub(crate) struct Vault;

#[toolgate::toolset(domain = "a8i")]
#[tool_router]
impl Vault {
    /// Stop an instance: reversible, approved in band.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", modes = [FULL_AUTO], record_arguments, target = instance_id,
               evidence = describe)]
    pub(crate) async fn a8i_stop(
        &self,
        Parameters(args): Parameters<Inst>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "{} stopped",
            args.instance_id
        ))]))
    }

    /// Destroy an instance: it cannot be undone.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", modes = [FULL_AUTO], record_arguments, irreversible,
               target = instance_id, evidence = describe, rollback = relaunch)]
    pub(crate) async fn a8i_destroy(
        &self,
        Parameters(args): Parameters<Inst>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            terminate_body(&args.instance_id),
        )]))
    }

    /// Destroy an instance: it cannot be undone; its escalation says every call is a read.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", record_arguments, irreversible, target = instance_id,
               evidence = describe, escalate = says_read_only)]
    pub(crate) async fn a8i_destroy_low(
        &self,
        Parameters(args): Parameters<Inst>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            terminate_body(&args.instance_id),
        )]))
    }

    /// Tidy an instance: reversible, approved in band; its body terminates it through the
    /// irreversible `callable` tool.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", modes = [FULL_AUTO], record_arguments)]
    pub(crate) async fn a8i_tidy(
        &self,
        Parameters(args): Parameters<Inst>,
    ) -> Result<CallToolResult, ErrorData> {
        let inner = terminate(args.instance_id.clone(), args.reason.clone());
        let said = match &inner {
            Ok(_) => "OK".to_owned(),
            Err(denied) => denied.code().to_string(),
        };
        INNER
            .lock()
            .unwrap()
            .push((args.instance_id.clone(), said.clone()));
        Ok(CallToolResult::success(vec![ContentBlock::text(said)]))
    }
}

#[tool_handler]
impl ServerHandler for Vault {}

type Pending = Arc<Mutex<Vec<PendingApproval>>>;

/// An in-band server of the in-place tools and the `callable` `irr.*` ones.
fn server(gate: &Gate, pending: &Pending) -> ToolgateServer {
    let pending = pending.clone();
    in_band(gate.clone())
        .handler(Vault)
        .only(|m| m.domain == Some("a8i") || m.domain == Some("irr"))
        .on_pending(move |p| pending.lock().unwrap().push(p.clone()))
}

/// ib01. The attack: the in-place irreversible tool and the `callable` one take the arguments of the
/// in-place reversible `a8i_stop`, which is approved in band. The client sends `a8i_stop`'s state
/// (sealed by this server, for this connection, for these very arguments), approved, with the target
/// typed back in the form, with each irreversible tool; and answers with no state at all. Asserted: no
/// form for either, no body runs, and the operator's typed approval still runs each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ib01_a_sibling_in_place_tools_sealed_state_approves_no_irreversible_call() {
    let id = "a8i-01";
    put(id, "running");
    let server_gate = gate(Arc::new(Memory::default()));
    let pending: Pending = Arc::default();
    let client = connect(server(&server_gate, &pending)).await;
    let args = json!({"instance_id": id, "reason": "cost"});
    let mut failures = Vec::new();
    for tool in ["a8i_destroy", "irr.terminate"] {
        let first = call(&client, tool, args.clone(), None, None).await;
        if matches!(first, CallToolResponse::InputRequired(_)) {
            failures.push(format!("{tool}: a form was sent"));
        }
        let sibling = state_of(&call(&client, "a8i_stop", args.clone(), None, None).await);
        for content in [
            json!({"decision": "approve"}),
            json!({"decision": "approve", "confirmation": id}),
            json!({"decision": "approve", "confirmation": id, "target": id}),
        ] {
            let code = answered_with(&client, tool, &args, &sibling, content.clone()).await;
            if code == "OK" {
                failures.push(format!("{tool} with a8i_stop's state and {content}: OK"));
            }
        }
        // An answer with no state.
        let Value::Object(arguments) = args.clone() else {
            panic!()
        };
        let params = CallToolRequestParams::new(tool.to_owned())
            .with_arguments(arguments)
            .with_input_responses(crate::fixtures::mcp_in_band::answer("approve"));
        let said = client.call_tool_once(params).await;
        if let Ok(response) = &said
            && code_of(response) == "OK"
        {
            failures.push(format!("{tool} with an answer and no state: OK"));
        }
    }
    if terminated(id) != 0 {
        failures.push(format!("terminated {} times in band", terminated(id)));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The operators, with the target typed back: each tool runs once.
    let tokens: Vec<(String, bool)> = pending
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.irreversible)
        .map(|p| (p.token.clone(), p.tool.ends_with("destroy")))
        .collect();
    let token = &tokens.iter().find(|(_, d)| *d).expect("a8i_destroy's").0;
    server_gate.approve_typed(token, "ops", id).unwrap();
    assert_eq!(
        code_of(&call(&client, "a8i_destroy", args.clone(), None, None).await),
        "OK"
    );
    assert_eq!(terminated(id), 1);
}

/// A client that declares elicitation and tasks, and accepts every form it is sent with `approve` and
/// every target it can find typed back.
#[derive(Clone, Default)]
struct Eager {
    forms: Arc<AtomicUsize>,
    tasks: bool,
}

impl ClientHandler for Eager {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        capabilities.elicitation = Some(ElicitationCapability::new());
        ClientConfig::new(capabilities, Implementation::new("eager", "0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        self.forms.fetch_add(1, Ordering::SeqCst);
        let text = serde_json::to_string(&request).unwrap_or_default();
        let target = ["a8i-02", "a8i-03"]
            .into_iter()
            .find(|t| text.contains(t))
            .unwrap_or_default();
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(
            json!({"decision": "approve", "reason": "eager", "confirmation": target}),
        ))
    }
}

async fn connect_eager(
    server: ToolgateServer,
    client: Eager,
    mode: ClientLifecycleMode,
) -> RunningService<RoleClient, Eager> {
    let (c, s) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(tokio::io::split(s)).await {
            let _ = running.waiting().await;
        }
    });
    tokio::time::timeout(
        Duration::from_secs(10),
        serve_client_with_lifecycle(client, tokio::io::split(c), mode),
    )
    .await
    .expect("connect in time")
    .expect("connects")
}

fn params(tool: &str, args: &Value) -> CallToolRequestParams {
    let Value::Object(arguments) = args.clone() else {
        panic!()
    };
    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)
}

/// ib02. The attack: a client that approves every form it is sent (as an agent driving its own
/// client would), on the 2026-07-28 protocol and on the initialize handshake of an older one. Asserted:
/// no irreversible call, in place or `callable`, is sent a form or runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ib02_a_client_that_approves_every_form_is_sent_none_for_an_irreversible_call() {
    let id = "a8i-02";
    put(id, "running");
    let args = json!({"instance_id": id, "reason": "cost"});
    let mut failures = Vec::new();
    for mode in [
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
        ClientLifecycleMode::Initialize,
    ] {
        let server_gate = gate(Arc::new(Memory::default()));
        let pending: Pending = Arc::default();
        let eager = Eager::default();
        let client =
            connect_eager(server(&server_gate, &pending), eager.clone(), mode.clone()).await;
        for tool in ["a8i_destroy", "irr.terminate"] {
            let said = tokio::time::timeout(
                Duration::from_secs(10),
                client.call_tool_once(params(tool, &args)),
            )
            .await
            .expect("answered in time");
            let code = match &said {
                Ok(response @ CallToolResponse::InputRequired(_)) => {
                    failures.push(format!("{mode:?} {tool}: a form: {response:?}"));
                    "FORM".to_owned()
                }
                Ok(response) => code_of(response),
                Err(error) => format!("{error}"),
            };
            if code == "OK" {
                failures.push(format!("{mode:?} {tool}: OK"));
            }
        }
        if eager.forms.load(Ordering::SeqCst) != 0 {
            failures.push(format!(
                "{mode:?}: {} elicitation requests",
                eager.forms.load(Ordering::SeqCst)
            ));
        }
    }
    if terminated(id) != 0 {
        failures.push(format!("terminated {} times", terminated(id)));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// ib03. The attack: a reversible in-place tool, approved in band, whose body terminates the instance
/// through the irreversible `callable` tool under the same gate. Asserted: the form's approval is not
/// the inner call's; the inner call waits for its operator, and nothing is terminated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ib03_a_reversible_tool_approved_in_band_cannot_carry_an_irreversible_call_in_its_body() {
    let id = "a8i-03";
    put(id, "running");
    let server_gate = gate(Arc::new(Memory::default()));
    let pending: Pending = Arc::default();
    let client = connect(server(&server_gate, &pending)).await;
    let args = json!({"instance_id": id, "reason": "cost"});
    let state = state_of(&call(&client, "a8i_tidy", args.clone(), None, None).await);
    let code = answered_with(
        &client,
        "a8i_tidy",
        &args,
        &state,
        json!({"decision": "approve", "confirmation": id}),
    )
    .await;
    assert_eq!(code, "OK", "the tidy call itself is approved in band");
    let inner: Vec<(String, String)> = INNER
        .lock()
        .unwrap()
        .iter()
        .filter(|(i, _)| i == id)
        .cloned()
        .collect();
    assert_eq!(terminated(id), 0, "terminated in band: {inner:?}");
    assert_eq!(inner.len(), 1, "{inner:?}");
    assert_ne!(inner[0].1, "OK", "{inner:?}");
}

/// ib04. The attack: a client of tasks and elicitation calls the in-place irreversible tool; its
/// operator approves the request without typing the target (`Gate::approve`), then types a wrong one.
/// Asserted: the task does not complete with the body run; typed back, it does, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ib04_a_task_of_an_irreversible_call_runs_only_on_the_target_typed_back() {
    let id = "a8i-04";
    put(id, "running");
    let sink = Arc::new(Memory::default());
    let server_gate = gate(sink.clone());
    let pending: Pending = Arc::default();
    let eager = Eager {
        tasks: true,
        ..Eager::default()
    };
    let client = connect_eager(
        server(&server_gate, &pending),
        eager.clone(),
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await;
    let args = json!({"instance_id": id, "reason": "cost"});
    let said = client
        .call_tool_once(params("a8i_destroy", &args))
        .await
        .expect("a response");
    let task_id = match &said {
        CallToolResponse::Task(created) => created.task.task_id.clone(),
        other => panic!("a client of tasks gets a task: {other:?}"),
    };
    let token = wait_until("the request is filed", || {
        pending.lock().unwrap().first().map(|p| p.token.clone())
    })
    .await;
    let untyped = server_gate.approve(&token);
    assert!(
        untyped.is_err(),
        "an untyped approval of an irreversible call: {untyped:?}"
    );
    let wrong = server_gate.approve_typed(&token, "ops", "a8i-0");
    // Let the task try again at least twice after those answers.
    let refused_now = refused(&sink);
    wait_until("two more tries", || {
        (refused(&sink) >= refused_now + 2).then_some(())
    })
    .await;
    let task = client
        .get_task(GetTaskParams::new(&task_id))
        .await
        .expect("tasks/get");
    assert_eq!(
        terminated(id),
        0,
        "ran on {untyped:?} / {wrong:?}: {task:?}"
    );
    assert!(
        !task.task.status().is_terminal()
            || !matches!(task.task.payload, TaskPayload::Completed { .. }),
        "{task:?}"
    );
    assert_eq!(eager.forms.load(Ordering::SeqCst), 0, "a form was sent");
    server_gate.approve_typed(&token, "ops", id).unwrap();
    wait_until("the task to end", || (terminated(id) > 0).then_some(())).await;
    assert_eq!(terminated(id), 1);
}

fn refused(sink: &Memory) -> usize {
    sink.records()
        .iter()
        .filter(|r| r["stage"] == "refused" && r["tool"] == "a8i_destroy")
        .count()
}

async fn wait_until<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = found() {
            return value;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "waited 30 s for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// ib05. The attack: an irreversible in-place tool whose `escalate` answers `READ_ONLY` for every call,
/// served in band, in PARTIAL_AUTO (where a HIGH_WRITE call does not run) and in FULL_AUTO; and called
/// directly under a FULL_AUTO gate whose approver approves. Asserted (SECURITY.md 19: "runs only after a
/// two-step approval carrying its target typed back exactly, whatever the gate's approver, ... never
/// answered in band"): no form, no body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ib05_an_escalation_below_the_declared_risk_does_not_unmake_an_irreversible_call() {
    let id = "a8i-05";
    put(id, "running");
    let args = json!({"instance_id": id, "reason": "cost"});
    let mut failures = Vec::new();
    for mode in [toolgate::Mode::PartialAuto, toolgate::Mode::FullAuto] {
        let server_gate = Gate::builder()
            .mode(mode)
            .two_step_approvals()
            .principal("carol")
            .build()
            .unwrap();
        let pending: Pending = Arc::default();
        let client = connect(server(&server_gate, &pending)).await;
        let said = call(&client, "a8i_destroy_low", args.clone(), None, None).await;
        if matches!(said, CallToolResponse::InputRequired(_)) {
            failures.push(format!("{mode:?}: a form"));
        } else if code_of(&said) == "OK" {
            failures.push(format!("{mode:?}: OK"));
        }
    }
    let approving = Gate::builder()
        .mode(toolgate::Mode::FullAuto)
        .approver(|_: &toolgate::ApprovalRequest<'_>| toolgate::Approval::Approve)
        .build()
        .unwrap();
    let direct = approving
        .scope(Vault.a8i_destroy_low(Parameters(Inst {
            instance_id: id.into(),
            reason: "cost".into(),
        })))
        .await;
    if direct.is_ok() {
        failures.push(format!("direct, approver approves: {direct:?}"));
    }
    if terminated(id) != 0 {
        failures.push(format!("terminated {} times", terminated(id)));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
