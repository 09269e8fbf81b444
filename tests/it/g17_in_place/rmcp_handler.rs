//! An rmcp `#[tool_router]` server gated in place: one `#[toolgate(..)]` beside each rmcp `#[tool]`,
//! the handler served through `ToolgateServer::handler`. Each tool's calls are decided by the
//! caller's gate before rmcp's router runs the method, and by the method's own check when it is
//! called directly; listing follows the gate; approvals are bound to the call's arguments and to the
//! handler instance; resources and prompts reach the handler (`reads.rs` gates them); a tool nobody
//! declared is refused.

#![cfg(feature = "mcp")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    GetPromptRequestParams, GetPromptResult, ListPromptsResult, ListResourcesResult,
    PaginatedRequestParams, Prompt, PromptMessage, ReadResourceRequestParams, ReadResourceResult,
    Resource, ResourceContents, Role, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleClient, RunningService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use toolgate::audit::MemorySink;
use toolgate::mcp::{PendingApproval, REFUSED, ToolgateServer, Undeclared};
use toolgate::{Gate, Mode};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Service {
    /// The service's name.
    service: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Command {
    /// The command line.
    line: String,
}

/// An operations server as rmcp users write one; its counters say which bodies ran.
#[derive(Clone)]
struct Ops {
    restarts: Arc<AtomicUsize>,
    terminations: Arc<Mutex<Vec<String>>>,
    shells: Arc<AtomicUsize>,
}

impl Ops {
    fn new() -> Ops {
        Ops {
            restarts: Arc::default(),
            terminations: Arc::default(),
            shells: Arc::default(),
        }
    }
}

#[toolgate::toolset(domain = "ops")]
#[tool_router]
impl Ops {
    /// List the services and their state.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn list_services(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            "web: running, db: running",
        )]))
    }

    /// Restart a service.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", idempotent)]
    async fn restart(
        &self,
        Parameters(args): Parameters<Service>,
    ) -> Result<CallToolResult, ErrorData> {
        self.restarts.fetch_add(1, Ordering::SeqCst);
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "{} restarted",
            args.service
        ))]))
    }

    #[tool(name = "terminate", description = "Terminate a service's instance.")]
    #[toolgate(risk = "HIGH_WRITE", modes = [FULL_AUTO])]
    async fn terminate_instance(
        &self,
        Parameters(args): Parameters<Service>,
    ) -> Result<CallToolResult, ErrorData> {
        self.terminations.lock().unwrap().push(args.service.clone());
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "{} terminated",
            args.service
        ))]))
    }

    /// Run a shell command on the host.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", modes = [FULL_AUTO])]
    fn shell(&self, Parameters(command): Parameters<Command>) -> Result<CallToolResult, ErrorData> {
        self.shells.fetch_add(1, Ordering::SeqCst);
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "ran {}",
            command.line
        ))]))
    }
}

#[tool_handler]
impl ServerHandler for Ops {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
        .with_instructions("Operate the services.")
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![Resource::new(
            "ops://runbook",
            "runbook",
        )]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        Ok(ReadResourceResult::new(vec![ResourceContents::text(
            "Restart before you terminate.",
            request.uri,
        )])
        .into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "triage",
            Some("Triage an incident."),
            None,
        )]))
    }

    async fn get_prompt(
        &self,
        _request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, "What broke?")]).into())
    }
}

/// A handler whose tool no one declared: no `#[toolgate::toolset]` on its router.
#[derive(Clone)]
struct Legacy {
    wipes: Arc<AtomicUsize>,
}

#[tool_router]
impl Legacy {
    /// Wipe the disk.
    #[tool]
    async fn wipe(&self) -> Result<CallToolResult, ErrorData> {
        self.wipes.fetch_add(1, Ordering::SeqCst);
        Ok(CallToolResult::success(vec![ContentBlock::text("wiped")]))
    }
}

#[tool_handler]
impl ServerHandler for Legacy {}

pub(crate) use crate::fixtures::support::runtime;

pub(crate) async fn connect(server: ToolgateServer) -> RunningService<RoleClient, ()> {
    let (client, served) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(tokio::io::split(served)).await {
            let _ = running.waiting().await;
        }
    });
    tokio::time::timeout(Duration::from_secs(10), ().serve(tokio::io::split(client)))
        .await
        .expect("connect in time")
        .expect("connects")
}

pub(crate) fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        unreachable!("an object")
    };
    CallToolRequestParams::new(name.to_owned()).with_arguments(arguments)
}

/// The result of a call that completed, whatever it says.
pub(crate) fn complete(response: CallToolResponse) -> CallToolResult {
    match response {
        CallToolResponse::Complete(result) => result,
        other => panic!("expected a complete result, got {other:?}"),
    }
}

/// The refusal code of an `isError` result, or `None` for a success.
pub(crate) fn refused(result: &CallToolResult) -> Option<String> {
    if result.is_error != Some(true) {
        return None;
    }
    let content = result.structured_content.as_ref()?;
    Some(content["code"].as_str()?.to_owned())
}

fn listed_names(tools: &[rmcp::model::Tool]) -> Vec<String> {
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    names
}

#[test]
fn each_call_of_an_rmcp_tool_is_decided_by_the_gate_before_its_body() {
    runtime().block_on(async {
        let ops = Ops::new();
        let gate = Gate::new(Mode::Shadow).expect("a gate");
        let client = connect(ToolgateServer::new(gate.clone()).handler(ops.clone())).await;

        let listed = client.list_all_tools().await.expect("a list");
        assert_eq!(listed_names(&listed), ["list_services"]);
        let read = complete(
            client
                .call_tool_once(call("list_services", json!({})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&read), None, "{read:?}");

        let restart = complete(
            client
                .call_tool_once(call("restart", json!({"service": "web"})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&restart).as_deref(), Some("MODE_NOT_ALLOWED"));
        assert_eq!(ops.restarts.load(Ordering::SeqCst), 0, "the body never ran");

        gate.lower(Mode::Shadow)
            .expect("lowering is always allowed");
        let gate = Gate::new(Mode::PartialAuto).expect("a gate");
        let client = connect(ToolgateServer::new(gate).handler(ops.clone())).await;
        let listed = client.list_all_tools().await.expect("a list");
        assert_eq!(listed_names(&listed), ["list_services", "restart"]);
        let restart = complete(
            client
                .call_tool_once(call("restart", json!({"service": "web"})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&restart), None, "{restart:?}");
        assert_eq!(ops.restarts.load(Ordering::SeqCst), 1);

        // Under rmcp's own name, and with rmcp's own description.
        let terminate = complete(
            client
                .call_tool_once(call("terminate", json!({"service": "db"})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&terminate).as_deref(), Some("MODE_NOT_ALLOWED"));
        assert!(ops.terminations.lock().unwrap().is_empty());
    });
}

#[test]
fn listing_carries_the_declarations_hints_and_policy_facts() {
    runtime().block_on(async {
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .two_step_approvals()
            .build()
            .expect("a gate");
        let client = connect(ToolgateServer::new(gate).handler(Ops::new())).await;
        let listed = client.list_all_tools().await.expect("a list");
        assert_eq!(
            listed_names(&listed),
            ["list_services", "restart", "shell", "terminate"]
        );
        let terminate = listed.iter().find(|t| t.name == "terminate").unwrap();
        assert_eq!(
            terminate.description.as_deref(),
            Some("Terminate a service's instance.")
        );
        let annotations = terminate.annotations.as_ref().expect("annotations");
        assert_eq!(annotations.destructive_hint, Some(true));
        assert_eq!(annotations.read_only_hint, Some(false));
        let meta = terminate.meta.as_ref().expect("_meta");
        assert_eq!(meta.0["dev.toolgate/risk_level"], "HIGH_WRITE");
        assert_eq!(meta.0["dev.toolgate/allowed_modes"], json!(["FULL_AUTO"]));
        // rmcp's schema of `Parameters<Service>` is kept.
        assert_eq!(
            terminate.input_schema["properties"]["service"]["type"],
            "string"
        );
        let restart = listed.iter().find(|t| t.name == "restart").unwrap();
        let annotations = restart.annotations.as_ref().expect("annotations");
        assert_eq!(annotations.idempotent_hint, Some(true));
    });
}

#[test]
fn a_two_step_approval_runs_the_approved_call_once_on_the_instance_it_was_given_for() {
    runtime().block_on(async {
        let ops = Ops::new();
        let pending: Arc<Mutex<Vec<PendingApproval>>> = Arc::default();
        let sink = MemorySink::new();
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .two_step_approvals()
            .audit(sink.clone())
            .build()
            .expect("a gate");
        let seen = Arc::clone(&pending);
        let server = ToolgateServer::new(gate.clone())
            .handler_named("prod", ops.clone())
            .on_pending(move |p| seen.lock().unwrap().push(p.clone()));
        let client = connect(server).await;

        let first = complete(
            client
                .call_tool_once(call("terminate", json!({"service": "db"})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&first).as_deref(), Some("APPROVAL_PENDING"));
        let asked = pending
            .lock()
            .unwrap()
            .pop()
            .expect("the operator was told");
        assert_eq!(asked.tool, "terminate");
        assert_eq!(asked.instance.as_deref(), Some("prod (Ops)"));
        assert!(asked.arguments.contains("db"), "{}", asked.arguments);
        gate.approve(&asked.token).expect("approved");

        // Another handler instance of the same type, through the same gate: the approval is not
        // its to use.
        let other = Ops::new();
        let elsewhere =
            connect(ToolgateServer::new(gate.clone()).handler_named("staging", other.clone()))
                .await;
        let there = complete(
            elsewhere
                .call_tool_once(call("terminate", json!({"service": "db"})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&there).as_deref(), Some("APPROVAL_PENDING"));
        assert!(other.terminations.lock().unwrap().is_empty());

        // Other arguments: a request of their own.
        let web = complete(
            client
                .call_tool_once(call("terminate", json!({"service": "web"})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&web).as_deref(), Some("APPROVAL_PENDING"));

        let approved = complete(
            client
                .call_tool_once(call("terminate", json!({"service": "db"})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&approved), None, "{approved:?}");
        let again = complete(
            client
                .call_tool_once(call("terminate", json!({"service": "db"})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&again).as_deref(), Some("APPROVAL_REUSED"));
        assert_eq!(*ops.terminations.lock().unwrap(), ["db"]);

        // The log has the call, its run and its exit, with the handler's tool id.
        let records = sink.records();
        let ran: Vec<_> = records
            .iter()
            .filter(|r| r.tool == "terminate" && r.stage == toolgate::audit::Stage::Exit)
            .collect();
        assert_eq!(ran.len(), 1, "{records:#?}");
    });
}

#[test]
fn a_direct_call_of_an_rmcp_tool_is_decided_by_the_ambient_gate() {
    runtime().block_on(async {
        let ops = Ops::new();
        let outside = ops
            .restart(Parameters(Service {
                service: "web".into(),
            }))
            .await
            .expect_err("no gate: refused");
        assert_eq!(outside.code, REFUSED);
        assert_eq!(outside.data.as_ref().unwrap()["code"], "NO_GATE");
        assert_eq!(ops.restarts.load(Ordering::SeqCst), 0);

        let gate = Gate::new(Mode::PartialAuto).expect("a gate");
        let inside = gate
            .scope(ops.restart(Parameters(Service {
                service: "web".into(),
            })))
            .await;
        assert!(inside.is_ok(), "{inside:?}");
        assert_eq!(ops.restarts.load(Ordering::SeqCst), 1);

        let shell = gate.run(|| {
            ops.shell(Parameters(Command {
                line: "rm -rf /".into(),
            }))
        });
        let refusal = shell.expect_err("HIGH_WRITE in PARTIAL_AUTO");
        assert_eq!(refusal.data.as_ref().unwrap()["code"], "MODE_NOT_ALLOWED");
        assert_eq!(ops.shells.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn resources_and_prompts_pass_through_and_undeclared_capabilities_are_not_found() {
    runtime().block_on(async {
        let gate = Gate::new(Mode::Shadow).expect("a gate");
        let client = connect(ToolgateServer::new(gate.clone()).handler(Ops::new())).await;
        let info = client.peer_info().expect("the server's info");
        assert!(info.capabilities.resources.is_some());
        assert!(info.capabilities.prompts.is_some());
        assert!(info.capabilities.tools.is_some());
        assert_eq!(info.instructions.as_deref(), Some("Operate the services."));
        let resources = client.list_all_resources().await.expect("resources");
        assert_eq!(resources[0].uri, "ops://runbook");
        let prompts = client.list_all_prompts().await.expect("prompts");
        assert_eq!(prompts[0].name, "triage");

        let legacy = Legacy {
            wipes: Arc::default(),
        };
        let client = connect(ToolgateServer::new(gate).handler(legacy)).await;
        let error = client
            .list_all_prompts()
            .await
            .expect_err("the handler has no prompts");
        let rmcp::ServiceError::McpError(error) = error else {
            panic!("a JSON-RPC error, got {error:?}");
        };
        assert_eq!(error.code, ErrorCode::METHOD_NOT_FOUND);
    });
}

#[test]
fn a_tool_of_the_handler_that_declares_no_risk_is_refused_unless_the_application_serves_it() {
    runtime().block_on(async {
        let legacy = Legacy {
            wipes: Arc::default(),
        };
        let sink = MemorySink::new();
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .audit(sink.clone())
            .build()
            .expect("a gate");
        let client = connect(ToolgateServer::new(gate.clone()).handler(legacy.clone())).await;
        let listed = client.list_all_tools().await.expect("a list");
        assert!(listed.is_empty(), "{listed:?}");
        let wipe = complete(
            client
                .call_tool_once(call("wipe", json!({})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&wipe).as_deref(), Some("UNDECLARED_TOOL"));
        assert_eq!(legacy.wipes.load(Ordering::SeqCst), 0);
        assert!(
            sink.records()
                .iter()
                .any(|r| r.tool == "wipe" && r.code.as_deref() == Some("UNDECLARED_TOOL")),
            "the refusal is in the log"
        );
        let unknown = client.call_tool_once(call("format", json!({}))).await;
        assert!(unknown.is_err(), "a name no one serves: {unknown:?}");

        let served = ToolgateServer::new(gate)
            .handler(legacy.clone())
            .undeclared(Undeclared::Serve);
        let client = connect(served).await;
        assert_eq!(
            listed_names(&client.list_all_tools().await.expect("a list")),
            ["wipe"]
        );
        let wipe = complete(
            client
                .call_tool_once(call("wipe", json!({})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&wipe), None);
        assert_eq!(legacy.wipes.load(Ordering::SeqCst), 1);
    });
}

/// A tool whose receiver is not serializable, served by name from a registered instance.
pub struct Cloud {
    sudos: AtomicUsize,
}

#[toolgate::toolset(domain = "cloud")]
impl Cloud {
    /// Run a privileged command.
    #[toolgate::tool(risk = "HIGH_WRITE", callable)]
    pub fn sudo(&self, command: String) -> Result<String, toolgate::Denied> {
        self.sudos.fetch_add(1, Ordering::SeqCst);
        Ok(format!("ran {command}"))
    }
}

#[test]
fn a_method_on_a_registered_instance_is_approved_in_two_steps_and_the_operator_sees_which() {
    runtime().block_on(async {
        let pending: Arc<Mutex<Vec<PendingApproval>>> = Arc::default();
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .two_step_approvals()
            .build()
            .expect("a gate");
        let seen = Arc::clone(&pending);
        let server = ToolgateServer::new(gate.clone())
            .only(|m| m.domain == Some("cloud"))
            .instance_named(
                "cloudops",
                Cloud {
                    sudos: AtomicUsize::new(0),
                },
            )
            .on_pending(move |p| seen.lock().unwrap().push(p.clone()));
        let client = connect(server).await;
        let sudo = || call("cloud.sudo", json!({"command": "systemctl restart web"}));
        let first = complete(client.call_tool_once(sudo()).await.expect("a call"));
        assert_eq!(
            refused(&first).as_deref(),
            Some("APPROVAL_PENDING"),
            "{first:?}"
        );
        let asked = pending
            .lock()
            .unwrap()
            .pop()
            .expect("the operator was told");
        assert_eq!(asked.instance.as_deref(), Some("cloudops (Cloud)"));
        gate.approve(&asked.token).expect("approved");
        let ran = complete(client.call_tool_once(sudo()).await.expect("a call"));
        assert_eq!(refused(&ran), None, "{ran:?}");
    });
}

/// The shapes a typical rmcp server has, each gated in place with one line: `description` given to
/// rmcp's `#[tool]` rather than a doc comment, an `McpError` alias, a destructured `Parameters`, the
/// request's context as a parameter, a sync tool, a constructor in the router's impl, and a prompt
/// router beside the tool router.
mod typical {
    use std::sync::Arc;

    use rmcp::handler::server::router::prompt::PromptRouter;
    use rmcp::handler::server::router::tool::ToolRouter;
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::model::{
        CallToolResult, ContentBlock, PromptMessage, Role, ServerCapabilities, ServerConfig,
    };
    use rmcp::service::RequestContext;
    use rmcp::{
        ErrorData as McpError, RoleServer, ServerHandler, prompt, prompt_handler, prompt_router,
        tool, tool_handler, tool_router,
    };
    use tokio::sync::Mutex;

    #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
    pub struct Pair {
        pub a: i64,
        pub b: i64,
    }

    #[derive(Clone)]
    pub struct Tally {
        total: Arc<Mutex<i64>>,
        tool_router: ToolRouter<Tally>,
        prompt_router: PromptRouter<Tally>,
    }

    #[toolgate::toolset(domain = "tally")]
    #[tool_router]
    impl Tally {
        pub fn new() -> Tally {
            Tally {
                total: Arc::default(),
                tool_router: Tally::tool_router(),
                prompt_router: Tally::prompt_router(),
            }
        }

        #[tool(description = "Add one to the tally")]
        #[toolgate(risk = "LOW_WRITE")]
        async fn bump(&self) -> Result<CallToolResult, McpError> {
            let mut total = self.total.lock().await;
            *total += 1;
            Ok(CallToolResult::success(vec![ContentBlock::text(
                total.to_string(),
            )]))
        }

        #[tool(description = "Add two numbers")]
        #[toolgate(risk = "READ_ONLY")]
        fn add(
            &self,
            Parameters(Pair { a, b }): Parameters<Pair>,
        ) -> Result<CallToolResult, McpError> {
            Ok(CallToolResult::success(vec![ContentBlock::text(
                (a + b).to_string(),
            )]))
        }

        #[tool(description = "Say which request this is")]
        #[toolgate(risk = "READ_ONLY")]
        fn whoami(&self, context: RequestContext<RoleServer>) -> Result<CallToolResult, McpError> {
            Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "{:?}",
                context.id
            ))]))
        }
    }

    #[prompt_router]
    impl Tally {
        /// Ask for a tally.
        #[prompt(name = "ask")]
        async fn ask(&self) -> Vec<PromptMessage> {
            vec![PromptMessage::new_text(Role::User, "How many?")]
        }
    }

    #[tool_handler(router = self.tool_router)]
    #[prompt_handler(router = self.prompt_router)]
    impl ServerHandler for Tally {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(
                ServerCapabilities::builder()
                    .enable_tools()
                    .enable_prompts()
                    .build(),
            )
        }
    }
}

#[test]
fn a_typical_rmcp_server_is_gated_with_one_line_per_tool() {
    runtime().block_on(async {
        let gate = Gate::new(Mode::Shadow).expect("a gate");
        let client = connect(ToolgateServer::new(gate).handler(typical::Tally::new())).await;
        let listed = client.list_all_tools().await.expect("a list");
        assert_eq!(listed_names(&listed), ["add", "whoami"]);
        let add = listed.iter().find(|t| t.name == "add").unwrap();
        assert_eq!(add.description.as_deref(), Some("Add two numbers"));
        let sum = complete(
            client
                .call_tool_once(call("add", json!({"a": 2, "b": 3})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&sum), None, "{sum:?}");
        let bump = complete(
            client
                .call_tool_once(call("bump", json!({})))
                .await
                .expect("a call"),
        );
        assert_eq!(refused(&bump).as_deref(), Some("MODE_NOT_ALLOWED"));
        let manifest = toolgate::registry().manifest("bump").expect("registered");
        assert_eq!(manifest.description, "Add one to the tally");
        assert_eq!(
            client.list_all_prompts().await.expect("prompts")[0].name,
            "ask"
        );
    });
}
