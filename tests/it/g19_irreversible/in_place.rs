//! Every key of `#[tool]` in place: an rmcp tool that stays in rmcp's `#[tool_router]` and declares
//! `irreversible`, `target`, `evidence`, `rollback` and `escalate` over the `T` of its `Parameters<T>`
//! is decided, recorded and approved as the `callable` tool with the same arguments is.
#![cfg(feature = "mcp-http")]

use std::sync::{Arc, Mutex};

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use toolgate::mcp::rmcp::model::CallToolResponse;
use toolgate::mcp::{PendingApproval, ToolgateServer};
use toolgate::{Denied, Gate, Mode, Risk};

use super::*;
use crate::fixtures::mcp_in_band::{Client, call, code_of, connect, in_band};
use crate::fixtures::shared_stores::Memory;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Terminate {
    /// The instance to terminate.
    instance_id: String,
    /// Why.
    reason: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Shell {
    /// The command line.
    command: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Login {
    /// Who.
    user: String,
    /// Their password.
    password: String,
}

fn relaunch(args: &Terminate) -> Result<toolgate::Rollback, String> {
    relaunch_plan(&args.instance_id, &args.reason)
}

/// A command that needs root, or deletes, is a HIGH_WRITE call of a LOW_WRITE tool.
fn command_risk(command: &str) -> Risk {
    let words: Vec<&str> = command.split_whitespace().collect();
    if words.iter().any(|w| *w == "sudo" || *w == "rm") {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

fn shell_risk(args: &Shell) -> Risk {
    command_risk(&args.command)
}

pub(crate) static SHELLS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A cloud handler as rmcp users write one, its dangerous tools still in its router.
#[derive(Clone, Default)]
pub(crate) struct Cloud;

#[toolgate::toolset(domain = "irr")]
#[tool_router]
impl Cloud {
    /// Terminate a cloud instance. It cannot be undone.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", modes = [FULL_AUTO], record_arguments, irreversible,
               target = instance_id, evidence = describe, rollback = relaunch)]
    pub(crate) async fn irr_terminate_in_place(
        &self,
        Parameters(args): Parameters<Terminate>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            terminate_body(&args.instance_id),
        )]))
    }

    /// Run a shell command.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", record_arguments, escalate = shell_risk)]
    pub(crate) async fn irr_shell_in_place(
        &self,
        params: Parameters<Shell>,
    ) -> Result<CallToolResult, ErrorData> {
        SHELLS.lock().unwrap().push(params.0.command.clone());
        Ok(CallToolResult::success(vec![ContentBlock::text("done")]))
    }

    /// Log in to the console.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", record_arguments, redact = [password])]
    pub(crate) async fn irr_login_in_place(
        &self,
        Parameters(login): Parameters<Login>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            login.user.len().to_string() + &login.password.len().to_string(),
        )]))
    }
}

#[tool_handler]
impl ServerHandler for Cloud {}

/// Run a shell command.
#[toolgate::tool(risk = "LOW_WRITE", domain = "irr", callable, record_arguments,
                 escalate = command_risk)]
pub(crate) fn shell(command: String) -> Result<String, Denied> {
    SHELLS.lock().unwrap().push(command);
    Ok("done".to_owned())
}

/// Log in to the console.
#[toolgate::tool(risk = "LOW_WRITE", domain = "irr", callable, record_arguments,
                 redact = [password])]
pub(crate) fn login(user: String, password: String) -> Result<String, Denied> {
    Ok(user.len().to_string() + &password.len().to_string())
}

/// The two tools that must behave alike: (in place, callable).
const TERMINATE: (&str, &str) = ("irr_terminate_in_place", "irr.terminate");
const SHELL: (&str, &str) = ("irr_shell_in_place", "irr.shell");
const LOGIN: (&str, &str) = ("irr_login_in_place", "irr.login");

fn gate(mode: Mode, sink: &Arc<Memory>) -> Gate {
    Gate::builder()
        .mode(mode)
        .two_step_approvals()
        .principal("carol")
        .audit_shared(sink.clone())
        .build()
        .unwrap()
}

/// A record with what tells the two tools apart taken out: their names and manifests, the output's
/// type, the handler the call ran on, and what differs from run to run.
fn comparable(record: &Value, name: &str) -> Value {
    let mut record = record.clone();
    let object = record.as_object_mut().unwrap();
    for volatile in [
        "timestamp",
        "call",
        "gate",
        "duration_us",
        "manifest_digest",
        "output_digest",
        "arguments_digest",
        "tool",
    ] {
        object.remove(volatile);
    }
    if let Some(Value::String(arguments)) = object.get("arguments").cloned() {
        let mut arguments: Value = serde_json::from_str(&arguments).unwrap();
        arguments.as_object_mut().unwrap().remove("self");
        object.insert("arguments".to_owned(), arguments);
    }
    let text = serde_json::to_string(&record)
        .unwrap()
        .replace(name, "TOOL");
    serde_json::from_str(&text).unwrap()
}

/// What one scenario comes to: the codes the client was answered, the records, the operator's
/// requests (their tool names taken out).
#[derive(Debug, PartialEq)]
struct Seen {
    codes: Vec<String>,
    records: Vec<Value>,
    pending: Vec<Value>,
}

type Scenario = for<'a> fn(
    &'a Client,
    &'a str,
    &'a Pending,
    &'a Gate,
) -> std::pin::Pin<Box<dyn Future<Output = Vec<String>> + 'a>>;

type Pending = Arc<Mutex<Vec<PendingApproval>>>;

/// Runs `scenario` against the tool called `name`, behind a fresh gate in `mode`.
async fn run(mode: Mode, name: &str, in_band_approvals: bool, scenario: Scenario) -> Seen {
    let sink = Arc::new(Memory::default());
    let pending: Pending = Arc::default();
    let server_gate = gate(mode, &sink);
    let server = if in_band_approvals {
        in_band(server_gate.clone())
    } else {
        ToolgateServer::new(server_gate.clone())
    };
    let server = {
        let pending = pending.clone();
        server
            .handler(Cloud)
            .only(|m| m.domain == Some("irr"))
            .on_pending(move |p| pending.lock().unwrap().push(p.clone()))
    };
    let client = connect(server).await;
    let codes = scenario(&client, name, &pending, &server_gate).await;
    let records = sink.records().iter().map(|r| comparable(r, name)).collect();
    let pending = pending
        .lock()
        .unwrap()
        .iter()
        .map(|p| {
            json!({
                "risk": p.risk,
                "irreversible": p.irreversible,
                "target": p.target,
                "evidence": p.evidence,
                "rollback": p.rollback,
                "arguments": p.arguments,
            })
        })
        .collect();
    Seen {
        codes,
        records,
        pending,
    }
}

/// The scenario run against both tools; they must see the same.
async fn alike(
    tools: (&str, &str),
    mode: Mode,
    in_band_approvals: bool,
    scenario: Scenario,
) -> Seen {
    let in_place = run(mode, tools.0, in_band_approvals, scenario).await;
    let callable = run(mode, tools.1, in_band_approvals, scenario).await;
    assert_eq!(in_place, callable, "{} against {}", tools.0, tools.1);
    in_place
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalate_reads_the_typed_arguments_as_it_reads_a_callable_tools() {
    let seen = alike(SHELL, Mode::PartialAuto, false, |client, name, _, _| {
        Box::pin(async move {
            let mut codes = Vec::new();
            for command in ["ls -l", "sudo reboot", "rm -rf /srv", "echo sudo-less"] {
                let said = call(client, name, json!({"command": command}), None, None).await;
                codes.push(code_of(&said));
            }
            codes
        })
    })
    .await;
    assert_eq!(seen.codes, ["OK", "ABOVE_CEILING", "ABOVE_CEILING", "OK"]);
    let refused = &seen.records[2];
    assert_eq!(refused["effective_risk"], "HIGH_WRITE", "{refused:#}");
    assert_eq!(refused["declared_risk"], "LOW_WRITE", "{refused:#}");
    assert_eq!(refused["arguments"], json!({"command": "sudo reboot"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalated_call_is_approved_out_of_band_with_the_same_request() {
    let seen = alike(SHELL, Mode::FullAuto, false, |client, name, _, _| {
        Box::pin(async move {
            let said = call(client, name, json!({"command": "sudo halt"}), None, None).await;
            vec![code_of(&said)]
        })
    })
    .await;
    assert_eq!(seen.codes, ["APPROVAL_PENDING"]);
    assert_eq!(seen.pending.len(), 1);
    assert_eq!(seen.pending[0]["risk"], "HIGH_WRITE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_irreversible_call_hands_the_operator_its_target_state_and_plan() {
    let seen = alike(TERMINATE, Mode::FullAuto, false, |client, name, _, _| {
        Box::pin(async move {
            let id = "ip01";
            put(id, "running");
            let args = json!({"instance_id": id, "reason": "cost"});
            let said = call(client, name, args, None, None).await;
            vec![code_of(&said)]
        })
    });
    let seen = seen.await;
    assert_eq!(seen.codes, ["APPROVAL_PENDING"]);
    let request = &seen.pending[0];
    assert_eq!(request["irreversible"], true);
    assert_eq!(request["target"], "ip01");
    let evidence: Value = serde_json::from_str(request["evidence"].as_str().unwrap()).unwrap();
    assert_eq!(evidence, json!({"id": "ip01", "state": "running"}));
    assert!(request["rollback"].is_object(), "{request:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_irreversible_call_refuses_a_wildcard_and_a_missing_plan_before_anyone_is_asked() {
    let seen = alike(TERMINATE, Mode::FullAuto, false, |client, name, _, _| {
        Box::pin(async move {
            let mut codes = Vec::new();
            for (id, reason) in [("*", "cost"), ("./", "cost"), ("ip02", "no snapshot")] {
                put(id, "running");
                let args = json!({"instance_id": id, "reason": reason});
                codes.push(code_of(&call(client, name, args, None, None).await));
            }
            codes
        })
    })
    .await;
    assert_eq!(
        seen.codes,
        [
            "TARGET_NOT_SINGLE",
            "TARGET_NOT_SINGLE",
            "ROLLBACK_UNAVAILABLE"
        ]
    );
    assert!(seen.pending.is_empty());
}

/// In place as for a `callable` tool, an irreversible call is never approved in band: its operator
/// approves it with the target typed back, it runs once on the state approved, and not on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_irreversible_call_runs_once_on_the_approved_state_and_not_on_another() {
    let seen = alike(
        TERMINATE,
        Mode::FullAuto,
        true,
        |client, name, pending, gate| {
            Box::pin(async move {
                let mut codes = Vec::new();
                let token = |n: usize| pending.lock().unwrap()[n].token.clone();
                // No form: the operator approves, with the target typed back; it runs once.
                let id = "ip03";
                put(id, "running");
                let args = json!({"instance_id": id, "reason": "cost"});
                let first = call(client, name, args.clone(), None, None).await;
                codes.push(match first {
                    CallToolResponse::InputRequired(_) => "FORM".to_owned(),
                    other => code_of(&other),
                });
                codes.push(format!(
                    "{:?}",
                    gate.approve_typed(&token(0), "ops", "ip0").is_ok()
                ));
                gate.approve_typed(&token(0), "ops", id).unwrap();
                codes.push(code_of(&call(client, name, args.clone(), None, None).await));
                codes.push(terminated(id).to_string());
                codes.push(code_of(&call(client, name, args, None, None).await));
                // The target changes between the approval and the body: refused, the body never runs.
                let id = "ip04";
                put(id, "running");
                let args = json!({"instance_id": id, "reason": "cost"});
                let _ = call(client, name, args.clone(), None, None).await;
                gate.approve_typed(&token(2), "ops", id).unwrap();
                set(id, "busy");
                codes.push(code_of(&call(client, name, args, None, None).await));
                codes.push(terminated(id).to_string());
                codes
            })
        },
    )
    .await;
    assert_eq!(
        seen.codes,
        [
            "APPROVAL_PENDING",
            "false",
            "OK",
            "1",
            "APPROVAL_PENDING",
            "EVIDENCE_CHANGED",
            "0"
        ]
    );
    let ran = seen
        .records
        .iter()
        .find(|r| r["stage"] == "exit")
        .expect("an exit record");
    assert!(ran["evidence_before"].is_string(), "{ran:#}");
    assert!(ran["evidence_after"].is_string(), "{ran:#}");
}

#[test]
fn target_and_escalate_name_what_the_definition_of_the_tool_says() {
    let registry = toolgate::registry();
    let in_place = registry.get(TERMINATE.0).expect("registered");
    let callable = registry.get(TERMINATE.1).expect("registered");
    let (a, b) = (in_place.manifest(), callable.manifest());
    assert_eq!(
        (
            a.irreversible,
            a.target,
            a.evidence,
            a.rollback,
            a.risk_level
        ),
        (
            b.irreversible,
            b.target,
            b.evidence,
            b.rollback,
            b.risk_level
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_named_self_cannot_pass_for_the_handler() {
    let seen = run(Mode::PartialAuto, SHELL.0, false, |client, name, _, _| {
        Box::pin(async move {
            let args = json!({"command": "ls", "self": "staging"});
            vec![code_of(&call(client, name, args, None, None).await)]
        })
    })
    .await;
    assert_eq!(seen.codes, ["ARGUMENT_REFUSED"]);
    assert!(!SHELLS.lock().unwrap().iter().any(|c| c == "ls"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redacted_field_is_hidden_from_the_records() {
    let seen = alike(LOGIN, Mode::FullAuto, false, |client, name, _, _| {
        Box::pin(async move {
            let args = json!({"user": "ada", "password": "hunter2"});
            vec![code_of(&call(client, name, args, None, None).await)]
        })
    })
    .await;
    assert_eq!(seen.codes, ["OK"]);
    assert_eq!(
        seen.records[0]["arguments"],
        json!({"user": "ada", "password": "[REDACTED]"})
    );
    let all = serde_json::to_string(&seen.records).unwrap();
    assert!(!all.contains("hunter2"), "{all}");
}

/// A handler whose clients live in `self`, as every real one's do: its probe, plan and escalation are
/// methods.
#[derive(Clone)]
pub(crate) struct Fleet {
    region: &'static str,
    /// Whether `sudo` is a HIGH_WRITE call here.
    strict: bool,
}

impl Fleet {
    fn describe_here(&self, instance_id: &str) -> Result<Value, String> {
        describe(instance_id).map(|state| json!({"region": self.region, "state": state}))
    }

    fn relaunch_here(&self, args: &Terminate) -> toolgate::Rollback {
        toolgate::Rollback::steps(format!("launch {} in {}", args.instance_id, self.region))
    }

    fn shell_risk_here(&self, args: &Shell) -> Risk {
        match self.strict {
            true => command_risk(&args.command),
            false => Risk::LowWrite,
        }
    }
}

#[toolgate::toolset(domain = "fleet19")]
#[tool_router]
impl Fleet {
    /// Terminate an instance of this region. It cannot be undone.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", modes = [FULL_AUTO], irreversible, target = instance_id,
               evidence = Self::describe_here, rollback = Self::relaunch_here)]
    pub(crate) async fn fleet_terminate(
        &self,
        Parameters(args): Parameters<Terminate>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            terminate_body(&args.instance_id),
        )]))
    }

    /// Run a shell command in this region.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", escalate = Self::shell_risk_here)]
    pub(crate) async fn fleet_shell(
        &self,
        Parameters(args): Parameters<Shell>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            args.command,
        )]))
    }
}

#[tool_handler]
impl ServerHandler for Fleet {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_plans_and_escalations_may_be_methods_of_the_handler() {
    let sink = Arc::new(Memory::default());
    let pending: Pending = Arc::default();
    let serve = |fleet: Fleet, mode: Mode| {
        let pending = pending.clone();
        ToolgateServer::new(gate(mode, &sink))
            .handler(fleet)
            .on_pending(move |p| pending.lock().unwrap().push(p.clone()))
    };
    // The escalation reads the handler: strict here, not there.
    let strict = connect(serve(
        Fleet {
            region: "eu",
            strict: true,
        },
        Mode::PartialAuto,
    ))
    .await;
    let lax = connect(serve(
        Fleet {
            region: "us",
            strict: false,
        },
        Mode::PartialAuto,
    ))
    .await;
    let sudo = json!({"command": "sudo halt"});
    let said = call(&strict, "fleet_shell", sudo.clone(), None, None).await;
    assert_eq!(code_of(&said), "ABOVE_CEILING");
    assert_eq!(
        code_of(&call(&lax, "fleet_shell", sudo, None, None).await),
        "OK"
    );
    // The probe and the plan read the handler: the operator sees this region's.
    put("ip20", "running");
    let full = connect(serve(
        Fleet {
            region: "eu",
            strict: true,
        },
        Mode::FullAuto,
    ))
    .await;
    let args = json!({"instance_id": "ip20", "reason": "cost"});
    let said = call(&full, "fleet_terminate", args, None, None).await;
    assert_eq!(code_of(&said), "APPROVAL_PENDING");
    let request = pending
        .lock()
        .unwrap()
        .pop()
        .expect("handed to the operator");
    let evidence: Value = serde_json::from_str(request.evidence.as_deref().unwrap()).unwrap();
    assert_eq!(
        evidence,
        json!({"region": "eu", "state": {"id": "ip20", "state": "running"}})
    );
    assert_eq!(
        request.rollback,
        Some(toolgate::Rollback::steps("launch ip20 in eu"))
    );
}

/// A `#[toolset]` tool called directly: its escalation is a method of its type too.
pub(crate) struct Desk {
    strict: bool,
}

impl Desk {
    fn risk_of(&self, line: &str) -> Risk {
        match self.strict {
            true => command_risk(line),
            false => Risk::LowWrite,
        }
    }
}

#[toolgate::toolset(domain = "desk19")]
impl Desk {
    /// Run a command at this desk.
    #[tool(risk = "LOW_WRITE", callable, escalate = Self::risk_of)]
    pub fn run(&self, line: String) -> Result<String, Denied> {
        Ok(line)
    }
}

#[test]
fn a_toolsets_escalation_may_be_a_method_of_its_type() {
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let (strict, lax) = (Desk { strict: true }, Desk { strict: false });
    let ran = gate.run(|| strict.run("sudo halt".into()));
    assert_eq!(ran.unwrap_err().code(), toolgate::DenialCode::AboveCeiling);
    assert_eq!(
        gate.run(|| lax.run("sudo halt".into())).unwrap(),
        "sudo halt"
    );
    // By name, on the instance the call is given.
    let by_name = |desk: Desk| {
        let instances = toolgate::registry::Instances::new().with(desk);
        let call = toolgate::registry().call_with(
            &gate,
            &instances,
            "desk19.run",
            json!({"line": "sudo halt"}),
        );
        futures_lite_block_on(call).map_err(|e| e.code().to_owned())
    };
    assert_eq!(
        by_name(Desk { strict: true }),
        Err("ABOVE_CEILING".to_owned())
    );
    assert_eq!(by_name(Desk { strict: false }), Ok(json!("sudo halt")));
}

fn futures_lite_block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}
