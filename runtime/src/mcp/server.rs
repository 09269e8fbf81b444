//! The rmcp server handler over the registry, and the translation of calls and their results.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CustomRequest, CustomResult, GetTaskParams, GetTaskResult, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::approvals::{About, Approvals, StateRefused, shown_arguments};
use super::definition::{self, Visibility};
use super::tasks::{
    DEFAULT_MAX_TASKS, DEFAULT_TASK_DEADLINE, TASK_POLL_FIRST, TASK_POLL_MAX, Tasks, TooManyTasks,
};
use crate::approval::Taint;
use crate::approval::store::ApproveError;
use crate::by_name::{CallError, Instances};
use crate::gate::Gate;
use crate::policy::{DenialCode, Mode, Risk};
use crate::registry::ToolManifest;
use crate::registry::{Tool, manifests, registry};

type Filter = Arc<dyn Fn(&ToolManifest) -> bool + Send + Sync>;
type OnPending = Arc<dyn Fn(&PendingApproval) + Send + Sync>;

/// How often a connection's watcher reads the gate's mode by default, for `list_changed`.
pub const DEFAULT_MODE_POLL: Duration = Duration::from_millis(100);

/// A call refused out of band because it waits for an operator's approval, as
/// [`ToolgateServer::on_pending`] hands it over.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PendingApproval {
    /// The tool's id.
    pub tool: &'static str,
    /// The risk the call is judged at.
    pub risk: Risk,
    /// The risk the tool declares: lower than `risk` where the call's arguments raised it.
    pub declared_risk: Risk,
    /// The gate's mode when it refused.
    pub mode: Option<Mode>,
    /// The refusal's code: `APPROVAL_PENDING`.
    pub code: &'static str,
    /// The arguments as the audit log writes them (redacted ones as `"[REDACTED]"`). The agent wrote
    /// them: a channel that shows them to a person makes invisible and bidi characters visible
    /// ([`terminal::escaped`](crate::terminal::escaped)), as the in-band form does.
    pub arguments: String,
    /// The token that approves this exact call once ([`Gate::approve`](crate::Gate::approve),
    /// [`Gate::answer`](crate::Gate::answer)). A secret for the operator: never send it to the agent.
    pub token: String,
    /// The request's id in the approval store, where the store names its requests (`toolgate
    /// approvals approve ID` with `PostgresStore`); `None` with the in-memory store
    /// ([`Denied::approval_request_id`](crate::Denied::approval_request_id)).
    pub request_id: Option<String>,
    /// Who the agent acts for, as the caller's gate names it
    /// ([`GateBuilder::principal`](crate::GateBuilder::principal)).
    pub principal: Option<String>,
    /// What tainted the caller's session, if anything has ([`Gate::taint`](crate::Gate::taint)): the
    /// agent has read untrusted output, and the arguments may come from it. Show it to the operator.
    pub taint: Option<Taint>,
}

/// An MCP server of the registry's `callable` tools, every call decided by one [`Gate`].
///
/// `tools/list` shows what the gate's current mode allows (see [`Visibility`] for the rest);
/// `tools/call` goes through [`Registry::call_with`](crate::Registry::call_with) with the server's
/// [`instances`](ToolgateServer::instance), so the gate, its deny list,
/// approvals and audit decide each call as they decide a direct one. A refusal, invalid arguments and
/// a failing tool are tool results with `isError: true`, whose text is `"<CODE>: <message>"` and whose
/// structured content is `{"code", "message"}` (with `path` for `INVALID_PARAMS`); only a name that is
/// no tool of this server is a protocol error (`-32602`, invalid params).
///
/// The methods [`tools`](ToolgateServer::tools), [`serves`](ToolgateServer::serves) and
/// [`call`](ToolgateServer::call) are what its [`ServerHandler`] implementation does, for a handler of
/// your own to delegate to.
#[derive(Clone)]
pub struct ToolgateServer {
    gate: Gate,
    instances: Instances,
    visibility: Visibility,
    filter: Option<Filter>,
    implementation: Implementation,
    instructions: Option<String>,
    approvals: Approvals,
    on_pending: Option<OnPending>,
    mode_poll: Duration,
    session: Arc<str>,
    tasks: Tasks,
    max_tasks: usize,
    task_deadline: Duration,
}

/// A random id of one connection, to which in-band request states are bound.
fn session_id() -> Arc<str> {
    let mut bytes = [0_u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        panic!("the operating system's random number generator failed");
    }
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .into()
}

impl fmt::Debug for ToolgateServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolgateServer")
            .field("mode", &self.gate.mode())
            .field("instances", &self.instances)
            .field("visibility", &self.visibility)
            .field("filtered", &self.filter.is_some())
            .field("implementation", &self.implementation.name)
            .field("approvals", &self.approvals)
            .field("mode_poll", &self.mode_poll)
            .finish_non_exhaustive()
    }
}

impl ToolgateServer {
    /// A server of every linked `callable` tool through `gate`, hiding what the gate would refuse, that
    /// names itself `toolgate` with this crate's version.
    pub fn new(gate: Gate) -> ToolgateServer {
        ToolgateServer {
            gate,
            instances: Instances::new(),
            visibility: Visibility::Hide,
            filter: None,
            implementation: Implementation::new("toolgate", env!("CARGO_PKG_VERSION")),
            instructions: None,
            approvals: Approvals::OutOfBand,
            on_pending: None,
            mode_poll: DEFAULT_MODE_POLL,
            session: session_id(),
            tasks: Tasks::default(),
            max_tasks: DEFAULT_MAX_TASKS,
            task_deadline: DEFAULT_TASK_DEADLINE,
        }
    }

    /// How a call that needs an approval is answered: [`Approvals::OutOfBand`] (the default) or
    /// [`Approvals::InBand`]. Either needs a gate that takes two-step approvals
    /// ([`GateBuilder::two_step_approvals`](crate::gate::GateBuilder::two_step_approvals) or an
    /// approval store); a gate with an approver asks its approver instead.
    #[must_use]
    pub fn approvals(mut self, approvals: Approvals) -> ToolgateServer {
        self.approvals = approvals;
        self
    }

    /// Calls `notify` with every call refused because it waits for an operator (out of band, or in
    /// band for a client that cannot answer a form): the operator channel of an application whose
    /// approvals live in memory. It runs on the call's task: hand the request on, do not wait there.
    #[must_use]
    pub fn on_pending(
        mut self,
        notify: impl Fn(&PendingApproval) + Send + Sync + 'static,
    ) -> ToolgateServer {
        self.on_pending = Some(Arc::new(notify));
        self
    }

    /// How many tasks one caller (over HTTP a principal, elsewhere a connection) may have waiting for
    /// an operator at once: [`DEFAULT_MAX_TASKS`](super::DEFAULT_MAX_TASKS) by default, at least 1.
    /// Past it, a call that would become a task is answered `TOO_MANY_TASKS` (its approval request
    /// stays pending, and was handed to [`on_pending`](ToolgateServer::on_pending)).
    #[must_use]
    pub fn max_tasks(mut self, limit: usize) -> ToolgateServer {
        self.max_tasks = limit.max(1);
        self
    }

    /// How long a task waits for an operator at most: [`DEFAULT_TASK_DEADLINE`](super::DEFAULT_TASK_DEADLINE)
    /// (an hour) by default. A task still waiting then fails with `APPROVAL_EXPIRED`; its approval
    /// request stays pending in the store until it expires, and the agent's next identical call waits
    /// for it again.
    #[must_use]
    pub fn task_deadline(mut self, deadline: Duration) -> ToolgateServer {
        self.task_deadline = deadline;
        self
    }

    /// How often each connection reads the gate's mode to tell its client that the tool list changed
    /// (`notifications/tools/list_changed`): the latency between a lowering and the notification.
    /// 100 ms by default; at least 10 ms.
    #[must_use]
    pub fn mode_poll(mut self, every: Duration) -> ToolgateServer {
        self.mode_poll = every.max(Duration::from_millis(10));
        self
    }

    /// This server for another connection: the same gate, tools and settings, and a session of its
    /// own, to which its in-band approval forms are bound. A transport that serves several
    /// connections (streamable HTTP) makes one per connection.
    #[must_use]
    pub fn connection(&self) -> ToolgateServer {
        ToolgateServer {
            session: session_id(),
            ..self.clone()
        }
    }

    /// Serves the `callable` methods of `instance`'s type (a `#[toolset]` impl's `&self` tools), each
    /// call running on this instance. Without it, those tools are not served.
    #[must_use]
    pub fn instance<T: Send + Sync + 'static>(mut self, instance: T) -> ToolgateServer {
        self.instances = self.instances.with(instance);
        self
    }

    /// Serves the `callable` methods of every type in `instances`, replacing those given before.
    #[must_use]
    pub fn instances(mut self, instances: Instances) -> ToolgateServer {
        self.instances = instances;
        self
    }

    /// What `tools/list` does with the tools the gate would refuse now.
    #[must_use]
    pub fn visibility(mut self, visibility: Visibility) -> ToolgateServer {
        self.visibility = visibility;
        self
    }

    /// Serves only the tools whose manifest `keep` accepts, e.g.
    /// `|m| m.domain == Some("tickets")`. The others are unknown to this server: not listed, and a
    /// call of one is a protocol error.
    #[must_use]
    pub fn only(
        mut self,
        keep: impl Fn(&ToolManifest) -> bool + Send + Sync + 'static,
    ) -> ToolgateServer {
        self.filter = Some(Arc::new(keep));
        self
    }

    /// The name and version the server gives in its `initialize` result.
    #[must_use]
    pub fn server_info(
        mut self,
        name: impl Into<String>,
        version: impl Into<String>,
    ) -> ToolgateServer {
        self.implementation = Implementation::new(name, version);
        self
    }

    /// Instructions for the model, given in the `initialize` result.
    #[must_use]
    pub fn instructions(mut self, instructions: impl Into<String>) -> ToolgateServer {
        self.instructions = Some(instructions.into());
        self
    }

    /// The gate that decides every call.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    fn served(&self, name: &str) -> Option<Tool> {
        registry()
            .get(name)
            .filter(|tool| tool.is_served_by(&self.instances))
            .filter(|tool| {
                self.filter
                    .as_ref()
                    .is_none_or(|keep| keep(tool.manifest()))
            })
    }

    /// Whether `name` is a tool of this server, whatever the gate's mode: a linked `callable` tool that
    /// the filter of [`only`](ToolgateServer::only) keeps, and, for a method, whose instance the server
    /// holds.
    pub fn serves(&self, name: &str) -> bool {
        self.served(name).is_some()
    }

    /// The tools `tools/list` shows now, sorted by name.
    pub fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.tools_for(&self.gate)
    }

    /// The tools `tools/list` shows now to a caller whose gate is `gate`.
    fn tools_for(&self, gate: &Gate) -> Vec<rmcp::model::Tool> {
        manifests()
            .filter_map(|manifest| self.served(manifest.id))
            .filter_map(|tool| definition::listed(gate, tool, self.visibility))
            .collect()
    }

    /// Who makes a request: the gate that decides it and the session an in-band state is bound to.
    /// Over HTTP, the principal its bearer token maps to (and its gate), for the lifetime of the
    /// principal: the 2026-07-28 protocol has no sessions, and any process behind the address may
    /// answer a retry. Elsewhere, this server's gate and connection.
    fn caller(&self, extensions: &rmcp::model::Extensions) -> Caller {
        #[cfg(feature = "mcp-http")]
        if let Some(principal) = extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<super::http::Principal>())
        {
            return Caller {
                gate: principal.gate().clone(),
                session: format!("principal\n{}", principal.name()).into(),
            };
        }
        let _ = extensions;
        Caller {
            gate: self.gate.clone(),
            session: format!("connection\n{}", self.session).into(),
        }
    }

    /// The definition of the tool `name` if this server serves it, whether or not the current mode
    /// lists it, without the mark of a disabled tool.
    pub fn tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.served(name).and_then(definition::definition)
    }

    /// Calls the tool `name` with `arguments` (none is `{}`) through the gate, as `tools/call` does.
    ///
    /// `Err` only when `name` is no tool of this server; everything else, refusals included, is a
    /// [`CallToolResult`] (see [`tool_result`]).
    pub async fn call(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut request = CallToolRequestParams::new(name.to_owned());
        request.arguments = arguments;
        let caller = self.caller(&rmcp::model::Extensions::new());
        match self.respond(request, Client::default(), &caller).await? {
            CallToolResponse::Complete(result) => Ok(result),
            _ => unreachable!("a call without in-band approvals completes"),
        }
    }

    /// Answers one `tools/call`: its request state first (in band), then the gate.
    async fn respond(
        &self,
        request: CallToolRequestParams,
        client: Client,
        caller: &Caller,
    ) -> Result<CallToolResponse, ErrorData> {
        let gate = &caller.gate;
        let name = &*request.name;
        let Some(tool) = self.served(name) else {
            crate::by_name::record_unknown(gate, name);
            return Err(unknown_tool(name));
        };
        let in_band = match &self.approvals {
            Approvals::InBand(in_band) if client.answers_forms => Some(in_band),
            _ => None,
        };
        let arguments = request.arguments.unwrap_or_default();
        if let Some(sealed) = request.request_state.as_deref() {
            let Some(in_band) = in_band else {
                return Ok(state_refused(gate, tool, StateRefused::Invalid).into());
            };
            let (token, answer) = match in_band.answer(
                &caller.session,
                name,
                &arguments,
                sealed,
                request.input_responses.as_ref(),
            ) {
                Ok(answered) => answered,
                Err(refused) => return Ok(state_refused(gate, tool, refused).into()),
            };
            match gate.answer(&token, answer) {
                Ok(()) => {}
                Err(ApproveError::Expired) => {
                    return Ok(state_refused(gate, tool, StateRefused::Expired).into());
                }
                Err(ApproveError::AlreadyApproved | ApproveError::AlreadyUsed) => {
                    return Ok(state_refused(gate, tool, StateRefused::Reused).into());
                }
                Err(ApproveError::UnknownToken | ApproveError::NotEnabled) => {
                    return Ok(state_refused(gate, tool, StateRefused::Invalid).into());
                }
                Err(ApproveError::Store(error)) => {
                    let (code, message) = ("APPROVAL_STORE_UNAVAILABLE", error.to_string());
                    let manifest = tool.manifest();
                    gate.record_probe(
                        std::borrow::Cow::Borrowed(manifest.id),
                        Some(manifest.risk_level),
                        code,
                        message.clone(),
                    );
                    return Ok(refusal(code, &message).into());
                }
            }
            // The answer is in the store; the gate now decides the call with it, bound to exactly
            // these arguments, and an approval runs it once.
            let result = self.call_registry(gate, name, arguments).await?;
            return Ok(tool_result(result).into());
        }
        let result = self.call_registry(gate, name, arguments.clone()).await?;
        if let Err(error) = &result
            && let Some(denied) = error.denied()
            && let Some(token) = denied.approval_token()
        {
            // The latch never opens again: what tainted the session before the decision still does.
            let taint = gate.taint();
            if let Some(in_band) = in_band {
                let about = About {
                    principal: gate.principal(),
                    taint: taint.as_ref(),
                };
                return Ok(in_band
                    .ask(&caller.session, tool, &arguments, denied, token, &about)
                    .into());
            }
            if let Some(notify) = &self.on_pending {
                notify(&PendingApproval {
                    tool: tool.manifest().id,
                    risk: denied.risk(),
                    declared_risk: tool.manifest().risk_level,
                    mode: denied.mode(),
                    code: denied.code().as_str(),
                    arguments: shown_arguments(tool, &arguments),
                    token: token.to_owned(),
                    request_id: denied.approval_request_id().map(str::to_owned),
                    principal: gate.principal().map(str::to_owned),
                    taint,
                });
            }
            if client.takes_tasks && denied.code() == DenialCode::ApprovalPending {
                return Ok(
                    match self.wait_as_task(gate, tool, arguments, token, &caller.session) {
                        Ok(created) => created.into(),
                        Err(too_many) => refusal("TOO_MANY_TASKS", &too_many.to_string()).into(),
                    },
                );
            }
        }
        Ok(tool_result(result).into())
    }

    /// Makes a call that waits for an operator a task: the call is tried again, every 250 ms at first
    /// and at most every 5 s (each try a `refused` record while it waits), until the operator has
    /// decided on the request `token` names; the task then completes with the call's result. It fails
    /// with `APPROVAL_EXPIRED` when that request expired unanswered (a try is then asked for a new
    /// one, which no operator was told of), or when the task's deadline has passed.
    fn wait_as_task(
        &self,
        gate: &Gate,
        tool: Tool,
        arguments: JsonObject,
        token: &str,
        owner: &Arc<str>,
    ) -> Result<rmcp::model::CreateTaskResult, TooManyTasks> {
        let id = tool.manifest().id;
        let created = self.tasks.create(
            owner,
            format!("`{id}` waits for an operator's approval"),
            self.max_tasks,
            self.task_deadline,
        )?;
        let task_id = created.task.task_id.clone();
        let (server, gate, tasks) = (self.clone(), gate.clone(), self.tasks.clone());
        let (token, deadline) = (token.to_owned(), self.task_deadline);
        let runner = tokio::spawn(async move {
            let ends = tokio::time::Instant::now() + deadline;
            let mut wait = TASK_POLL_FIRST;
            loop {
                let now = tokio::time::Instant::now();
                if now >= ends {
                    let message = format!(
                        "no operator decided on this call of `{id}` within the task's deadline of \
                         {deadline:?}; its approval request stays pending until it expires: call \
                         again to wait for it again"
                    );
                    tasks.fail(&task_id, task_error("APPROVAL_EXPIRED", &message));
                    return;
                }
                // The last try is at the deadline.
                tokio::time::sleep(wait.min(ends - now)).await;
                wait = (wait * 2).min(TASK_POLL_MAX);
                let result = match server.call_registry(&gate, id, arguments.clone()).await {
                    Ok(result) => result,
                    Err(error) => {
                        tasks.complete(&task_id, refusal("UNKNOWN_TOOL", &error.message));
                        return;
                    }
                };
                let pending = result
                    .as_ref()
                    .err()
                    .and_then(CallError::denied)
                    .filter(|d| d.code() == DenialCode::ApprovalPending);
                match pending.and_then(|d| d.approval_token()) {
                    // Still the request the operator was told of.
                    Some(now_pending) if now_pending == token => {}
                    // That request expired unanswered, and this try was asked for a new one.
                    Some(_) => {
                        let message = format!(
                            "the approval request of this call of `{id}` expired before an \
                             operator decided on it; call again to ask again"
                        );
                        tasks.fail(&task_id, task_error("APPROVAL_EXPIRED", &message));
                        return;
                    }
                    None => {
                        tasks.complete(&task_id, tool_result(result));
                        return;
                    }
                }
            }
        });
        self.tasks
            .attach(&created.task.task_id, runner.abort_handle());
        Ok(created)
    }

    async fn call_registry(
        &self,
        gate: &Gate,
        name: &str,
        arguments: JsonObject,
    ) -> Result<Result<Value, CallError>, ErrorData> {
        match registry()
            .call_with(gate, &self.instances, name, Value::Object(arguments))
            .await
        {
            Err(
                CallError::UnknownTool { .. }
                | CallError::NotCallable { .. }
                | CallError::NoInstance { .. },
            ) => Err(unknown_tool(name)),
            result => Ok(result),
        }
    }
}

/// What the client of a request can take besides a plain result.
#[derive(Debug, Clone, Copy, Default)]
struct Client {
    /// It speaks 2026-07-28, so it can answer an `InputRequired` form.
    answers_forms: bool,
    /// It declared the Tasks extension, so a call may become a task.
    takes_tasks: bool,
}

/// The gate and the session of one request.
struct Caller {
    gate: Gate,
    session: Arc<str>,
}

fn unknown_task(id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("no task {id} of this caller"),
        Some(json!({ "code": "UNKNOWN_TASK" })),
    )
}

/// The JSON-RPC error of a task that ended without its call's result: `-32001` (the request timed
/// out), the text `"<CODE>: <message>"`, and `{"code", "message"}` as its data.
fn task_error(code: &str, message: &str) -> JsonObject {
    let error = ErrorData::new(
        rmcp::model::ErrorCode(-32001),
        format!("{code}: {message}"),
        Some(json!({ "code": code, "message": message })),
    );
    match serde_json::to_value(error) {
        Ok(Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

/// A retry refused for its request state: recorded, and answered as a refusal with its code.
fn state_refused(gate: &Gate, tool: Tool, refused: StateRefused) -> CallToolResult {
    let manifest = tool.manifest();
    let message = refused.message(manifest.id);
    gate.record_probe(
        std::borrow::Cow::Borrowed(manifest.id),
        Some(manifest.risk_level),
        refused.code(),
        message.clone(),
    );
    refusal(refused.code(), &message)
}

/// A refusal of the server's own, shaped as the gate's are: `isError`, `"<CODE>: <message>"`, and
/// `{"code", "message"}`.
fn refusal(code: &str, message: &str) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(format!("{code}: {message}"))]);
    result.structured_content = Some(json!({ "code": code, "message": message }));
    result
}

/// The protocol error of a call of a name that is no tool: JSON-RPC `-32602` (invalid params), as the
/// MCP specification answers unknown tools, with `{"code": "UNKNOWN_TOOL"}` as its data.
pub fn unknown_tool(name: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("Unknown tool: {name}"),
        Some(json!({ "code": "UNKNOWN_TOOL" })),
    )
}

/// The MCP result of a call by name.
///
/// A result that is a JSON object is the structured content, and its JSON text the text content; a
/// string is the text content as it is; any other value is its JSON text. An error is a result with
/// `isError: true`, the text `"<CODE>: <message>"` and the structured content `{"code", "message"}`
/// (with `path` for `INVALID_PARAMS`).
pub fn tool_result(result: Result<Value, CallError>) -> CallToolResult {
    match result {
        Ok(value @ Value::Object(_)) => CallToolResult::structured(value),
        Ok(Value::String(text)) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Ok(value) => CallToolResult::success(vec![ContentBlock::text(value.to_string())]),
        Err(error) => {
            let text = format!("{}: {error}", error.code());
            let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
            result.structured_content = serde_json::to_value(&error).ok();
            result
        }
    }
}

impl ServerHandler for ToolgateServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        let config = ServerConfig::new(capabilities).with_server_info(self.implementation.clone());
        match &self.instructions {
            Some(instructions) => config.with_instructions(instructions.clone()),
            None => config,
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = self.caller(&context.extensions);
        Ok(ListToolsResult::with_all_items(
            self.tools_for(&caller.gate),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let client = Client {
            answers_forms: context
                .protocol_version()
                .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str()),
            takes_tasks: context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks()),
        };
        let caller = self.caller(&context.extensions);
        // A client's `notifications/cancelled` cancels `ct`; dropping the call's future then stops an
        // async body at its next await, and the gate's permit records the exit as `cancelled`.
        tokio::select! {
            biased;
            () = context.ct.cancelled() => Err(ErrorData::internal_error(
                "the client cancelled the call",
                Some(json!({ "code": "CANCELLED" })),
            )),
            response = self.respond(request, client, &caller) => response,
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let caller = self.caller(&context.extensions);
        self.tasks
            .get(&caller.session, &request.task_id)
            .ok_or_else(|| unknown_task(&request.task_id))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = self.caller(&context.extensions);
        if self.tasks.cancel(&caller.session, &request.task_id) {
            Ok(())
        } else {
            Err(unknown_task(&request.task_id))
        }
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if request.method == super::stdio::OVERSIZED_METHOD {
            let limit = request
                .params
                .as_ref()
                .and_then(|p| p.get("limit"))
                .cloned();
            return Err(ErrorData::invalid_request(
                "the message is larger than this server's limit; it was dropped unread",
                Some(json!({ "code": "MESSAGE_TOO_LARGE", "limit": limit })),
            ));
        }
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            request.method,
            None,
        ))
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        // A client of the 2026-07-28 protocol hears of list changes on its `subscriptions/listen`
        // stream, watched as a session's connection is (`on_initialized`).
        if context.accepted().tools_list_changed != Some(true) {
            context.cancelled().await;
            return Ok(());
        }
        let gate = self.caller(&context.request_context().extensions).gate;
        let mut seen = gate.mode();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                () = tokio::time::sleep(self.mode_poll) => {}
            }
            let now = gate.mode();
            if now != seen {
                seen = now;
                if context.sink().notify_tool_list_changed().await.is_err() {
                    return Ok(());
                }
            }
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // The gate has no change subscription: each connection reads its mode every `mode_poll` and
        // tells its client when it moved (it only ever goes down), so that the client lists again.
        let gate = self.caller(&context.extensions).gate;
        let peer = context.peer;
        let every = self.mode_poll;
        tokio::spawn(async move {
            let mut seen = gate.mode();
            loop {
                tokio::time::sleep(every).await;
                if peer.is_transport_closed() {
                    break;
                }
                let now = gate.mode();
                if now != seen {
                    seen = now;
                    if peer.notify_tool_list_changed().await.is_err() {
                        break;
                    }
                }
            }
        });
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.tool(name)
    }
}
