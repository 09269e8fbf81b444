//! The rmcp server handler over the registry, and the translation of calls and their results.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

#[allow(deprecated)]
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CompleteRequestParams, CompleteResult, ContentBlock, CustomRequest, CustomResult, ErrorCode,
    GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult, Implementation,
    JsonObject, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SetLevelRequestParams,
    SubscriptionFilter,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::approvals::{About, Approvals, StateRefused, shown_arguments};
use super::codes::McpCode;
use super::definition::{self, Visibility};
use super::handler::{DynHandler, RouteMismatch, Undeclared};
use super::tasks::{
    DEFAULT_MAX_TASKS, DEFAULT_TASK_DEADLINE, TASK_POLL_FIRST, TASK_POLL_MAX, Tasks, TooManyTasks,
};
use crate::approval::Taint;
use crate::approval::store::ApproveError;
use crate::by_name::{CallError, Instances};
use crate::gate::Gate;
use crate::gate::decide as deciding;
use crate::gate::denied::Denied;
use crate::registry::{Tool, ToolEntry, ToolManifest, manifests, registry};
use toolgate_policy::{DenialCode, Mode, Risk, Verdict};

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
    /// What the call runs on, for a method: the label of the server's
    /// [`handler`](ToolgateServer::handler) or of its [`instance`](ToolgateServer::instance) (the
    /// name given to [`handler_named`](ToolgateServer::handler_named) or
    /// [`Instances::with_named`](crate::Instances::with_named), else its type and a random id), to
    /// which the approval is bound. Show it to the operator.
    pub instance: Option<String>,
    /// Whether the tool is `irreversible`: approving the call takes typing its `target` back
    /// ([`Gate::approve_typed`](crate::Gate::approve_typed)).
    pub irreversible: bool,
    /// The call's target, for a tool that names one; the agent wrote it: show it escaped.
    pub target: Option<String>,
    /// What the tool's `evidence` probe read of the target when the request was filed, as canonical
    /// JSON: the state the approval is for.
    pub evidence: Option<String>,
    /// How the call would be undone, for a tool that declares `rollback`.
    pub rollback: Option<crate::approval::effects::Rollback>,
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
    /// Shared by the connections, which are made per request over HTTP with protocol 2026-07-28.
    implementation: Arc<Implementation>,
    instructions: Option<Arc<str>>,
    approvals: Approvals,
    on_pending: Option<OnPending>,
    mode_poll: Duration,
    /// This connection's random id, made when first needed: over HTTP a request's principal names
    /// its session, and a connection is made per request.
    session: Arc<OnceLock<Arc<str>>>,
    tasks: Tasks,
    max_tasks: usize,
    task_deadline: Duration,
    handler: Option<Arc<dyn DynHandler>>,
    /// What a call of the handler's tools runs on, as approvals bind it and operators read it.
    handler_label: Arc<String>,
    undeclared: Undeclared,
    /// The first tool of a handler gated in place that its router serves with no declaration, once
    /// its list has been read (with the first request's context): the server serves no tool then.
    unrouted: Arc<OnceLock<Option<String>>>,
    /// `server_info` was given: it names the server rather than the handler's own.
    named: bool,
}

/// The JSON-RPC error code of a refusal that reaches a client as an error rather than a tool result:
/// a tool of an rmcp handler gated in place, called through rmcp's router without this server
/// ([`From<Denied> for ErrorData`](crate::Denied)). Its data is `{"code", "message"}`.
pub const REFUSED: ErrorCode = ErrorCode(-32003);

/// A tool of an rmcp handler returns `Result<CallToolResult, ErrorData>`: a refusal becomes an error
/// with the code [`REFUSED`] and the data `{"code", "message"}`. Served by a [`ToolgateServer`], the
/// call never reaches the tool: the server answers the refusal as a tool result (`isError: true`),
/// as it answers every refusal.
impl From<Denied> for rmcp::ErrorData {
    fn from(denied: Denied) -> rmcp::ErrorData {
        let message = denied.to_string();
        let data = json!({ "code": denied.code().as_str(), "message": message });
        rmcp::ErrorData::new(REFUSED, format!("{}: {message}", denied.code()), Some(data))
    }
}

/// A random id of one connection, to which in-band request states are bound.
fn session_id() -> Arc<str> {
    let mut bytes = [0_u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        panic!("the operating system's random number generator failed");
    }
    crate::canonical::hex(&bytes).into()
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
            implementation: Arc::new(Implementation::new("toolgate", env!("CARGO_PKG_VERSION"))),
            instructions: None,
            approvals: Approvals::OutOfBand,
            on_pending: None,
            mode_poll: DEFAULT_MODE_POLL,
            session: Arc::default(),
            tasks: Tasks::default(),
            max_tasks: DEFAULT_MAX_TASKS,
            task_deadline: DEFAULT_TASK_DEADLINE,
            handler: None,
            handler_label: Arc::new(String::new()),
            undeclared: Undeclared::Refuse,
            unrouted: Arc::default(),
            named: false,
        }
    }

    /// Serves `handler`, an rmcp [`ServerHandler`] of the application (a `#[tool_router]` server with
    /// its resources and prompts), behind this server's gates.
    ///
    /// Each tool of the handler declared in place (`#[toolgate(risk = ..)]` beside rmcp's `#[tool]`,
    /// in a `#[toolgate::toolset]` impl of the handler's type) is decided by the caller's gate before
    /// its method runs, and listed as that gate allows; approvals, tasks, budgets and the
    /// audit log work for it as for a `callable` tool. A tool of the handler that declares no risk is
    /// refused ([`undeclared`](ToolgateServer::undeclared)). Resources, prompts, completions, logging
    /// levels and subscriptions pass through to the handler; a capability the handler does not
    /// declare is answered `-32601` (method not found). The linked `callable` tools are served beside
    /// the handler's only where [`only`](ToolgateServer::only) selects them (`.only(|_| true)` for
    /// all); the handler's tool wins where both have a name.
    ///
    /// A two-step approval of the handler's tools is bound to the handler instance, which operators
    /// see as the call's `self`: its type and a random id, or the name given to
    /// [`handler_named`](ToolgateServer::handler_named).
    ///
    /// A tool declared in place runs as the method it was declared on, with the handler as `self`:
    /// the server calls that method itself, not the handler's `call_tool` or its router, so that no
    /// other route of the same name (a router merged with `+`, a route added or replaced at run time)
    /// is what a call of the tool runs. The handler's `call_tool` serves only the tools it declares no
    /// risk for, where [`Undeclared::Serve`] says so.
    ///
    /// # Panics
    ///
    /// Where the handler's router answers the name of a tool declared in place with a definition
    /// other than the declared method's (a route of the same name merged in or added by hand), naming
    /// the tool: [`try_handler`](ToolgateServer::try_handler) returns that as an error.
    #[must_use]
    #[track_caller]
    pub fn handler<H: ServerHandler>(self, handler: H) -> ToolgateServer {
        match self.try_handler(handler) {
            Ok(server) => server,
            Err(mismatch) => panic!("{mismatch}"),
        }
    }

    /// [`handler`](ToolgateServer::handler), returning a router that answers the name of a tool
    /// declared in place with another route as an error rather than a panic.
    pub fn try_handler<H: ServerHandler>(
        self,
        handler: H,
    ) -> Result<ToolgateServer, RouteMismatch> {
        let label = crate::by_name::instances::registration_label(std::any::type_name::<H>());
        self.with_handler(handler, label)
    }

    /// [`handler`](ToolgateServer::handler), naming the instance: the name operators read as the
    /// call's `self`, to which approvals are bound. Name it where approvals must carry over between
    /// processes serving the same thing (replicas behind one PostgreSQL approval store).
    ///
    /// # Panics
    ///
    /// As [`handler`](ToolgateServer::handler) does.
    #[must_use]
    #[track_caller]
    pub fn handler_named<H: ServerHandler>(
        self,
        name: impl Into<String>,
        handler: H,
    ) -> ToolgateServer {
        let label = format!("{} ({})", name.into(), std::any::type_name::<H>());
        match self.with_handler(handler, label) {
            Ok(server) => server,
            Err(mismatch) => panic!("{mismatch}"),
        }
    }

    fn with_handler<H: ServerHandler>(
        mut self,
        handler: H,
        label: String,
    ) -> Result<ToolgateServer, RouteMismatch> {
        self.handler = Some(Arc::new(super::handler::bind(handler)?));
        self.handler_label = Arc::new(label);
        Ok(self)
    }

    /// What a tool of the [`handler`](ToolgateServer::handler) that declares no risk gets:
    /// [`Undeclared::Refuse`] by default.
    #[must_use]
    pub fn undeclared(mut self, undeclared: Undeclared) -> ToolgateServer {
        self.undeclared = undeclared;
        self
    }

    /// How a call that needs an approval is answered: [`Approvals::OutOfBand`] (the default) or
    /// [`Approvals::InBand`]. Either needs a gate that takes two-step approvals
    /// ([`GateBuilder::two_step_approvals`](crate::gate::builder::GateBuilder::two_step_approvals) or an
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
            session: Arc::default(),
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

    /// [`instance`](ToolgateServer::instance), naming it: operators read the name as the method's
    /// `self` when they approve a call on it, and approvals are bound to it
    /// ([`Instances::with_named`](crate::Instances::with_named)).
    #[must_use]
    pub fn instance_named<T: Send + Sync + 'static>(
        mut self,
        name: impl Into<String>,
        instance: T,
    ) -> ToolgateServer {
        self.instances = self.instances.with_named(name, instance);
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
        self.implementation = Arc::new(Implementation::new(name, version));
        self.named = true;
        self
    }

    /// Instructions for the model, given in the `initialize` result.
    #[must_use]
    pub fn instructions(mut self, instructions: impl Into<String>) -> ToolgateServer {
        self.instructions = Some(instructions.into().into());
        self
    }

    /// The gate that decides every call.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    fn served(&self, name: &str) -> Option<Tool> {
        // Beside a handler, the registry's tools are served only where `only` selects them.
        if self.handler.is_some() && self.filter.is_none() {
            return None;
        }
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

    /// The `callable` tools `tools/list` shows now, sorted by name; the tools of a
    /// [`handler`](ToolgateServer::handler) are listed by the handler, for a request.
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

    /// What `tools/list` answers a caller whose gate is `gate`: the handler's tools it allows (each
    /// with its declaration's hints and `_meta`), then, on the first page, the `callable` tools.
    async fn list_for(
        &self,
        gate: &Gate,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let Some(handler) = &self.handler else {
            return Ok(ListToolsResult::with_all_items(self.tools_for(gate)));
        };
        let first_page = request.as_ref().is_none_or(|r| r.cursor.is_none());
        let listed = handler.list_tools(request, context).await?;
        let mut tools: Vec<rmcp::model::Tool> = Vec::with_capacity(listed.tools.len());
        for tool in listed.tools {
            match registry().in_place(handler.owner(), &tool.name) {
                Some(entry) => {
                    let definition = definition::in_place(&entry.manifest, tool);
                    tools.extend(definition::shown(
                        gate,
                        &entry.manifest,
                        definition,
                        self.visibility,
                    ));
                }
                None if self.undeclared == Undeclared::Serve => tools.push(tool),
                None => {}
            }
        }
        if first_page {
            let own: Vec<rmcp::model::Tool> = self
                .tools_for(gate)
                .into_iter()
                .filter(|tool| registry().in_place(handler.owner(), &tool.name).is_none())
                .collect();
            tools.extend(own);
        }
        let mut result = ListToolsResult::with_all_items(tools);
        result.next_cursor = listed.next_cursor;
        Ok(result)
    }

    /// What the server says it is: the handler's capabilities (its prompts, resources, logging,
    /// completions) with tools, their list changes and tasks; the handler's name and instructions
    /// unless the server was given its own.
    fn info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        let mut implementation = None;
        let mut instructions = self.instructions.as_deref().map(str::to_owned);
        if let Some(handler) = &self.handler {
            let theirs = handler.info();
            let mut merged = theirs.capabilities;
            merged.tools = capabilities.tools.take();
            if let Some(ours) = capabilities.extensions.take() {
                merged
                    .extensions
                    .get_or_insert_with(Default::default)
                    .extend(ours);
            }
            capabilities = merged;
            if !self.named {
                implementation = Some(theirs.server_info);
            }
            instructions = instructions.or(theirs.instructions);
        }
        let implementation = implementation.unwrap_or_else(|| (*self.implementation).clone());
        let config = ServerConfig::new(capabilities).with_server_info(implementation);
        match instructions {
            Some(instructions) => config.with_instructions(instructions),
            None => config,
        }
    }

    /// The handler, where it declares the capability a request is of; `-32601` otherwise.
    fn offering(
        &self,
        declared: impl Fn(&ServerCapabilities) -> bool,
        method: &str,
    ) -> Result<&Arc<dyn DynHandler>, ErrorData> {
        match &self.handler {
            Some(handler) if declared(&handler.info().capabilities) => Ok(handler),
            _ => Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                method.to_owned(),
                None,
            )),
        }
    }

    /// Who makes a request: the gate that decides it and the session an in-band state is bound to.
    /// Over HTTP, the principal its bearer token maps to (and its gate), for the lifetime of the
    /// principal: the 2026-07-28 protocol has no sessions, and any process behind the address may
    /// answer a retry. Elsewhere, this server's gate and connection.
    fn caller(&self, extensions: &rmcp::model::Extensions) -> Caller {
        #[cfg(feature = "mcp-http")]
        if let Some(principal) = extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<super::principal::Principal>())
        {
            return Caller {
                gate: principal.gate().clone(),
                of: Of::Principal(principal.shared_name()),
            };
        }
        let _ = extensions;
        Caller {
            gate: self.gate.clone(),
            of: Of::Connection(Arc::clone(&self.session)),
        }
    }

    /// The definition of the tool `name` if this server serves it, whether or not the current mode
    /// lists it, without the mark of a disabled tool.
    pub fn tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.served(name).and_then(definition::definition)
    }

    /// Calls the tool `name` with `arguments` (none is `{}`) through the gate, as `tools/call` does.
    ///
    /// `Err` only when `name` is no `callable` tool of this server; everything else, refusals
    /// included, is a [`CallToolResult`] (see [`tool_result`]). The tools of a
    /// [`handler`](ToolgateServer::handler) are called through rmcp, which gives them a request's
    /// context: serve the server.
    pub async fn call(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, ErrorData> {
        if self.served(name).is_none() {
            crate::by_name::record_unknown(&self.gate, name);
            return Err(unknown_tool(name));
        }
        let ran = self
            .call_registry(&self.gate, name, arguments.unwrap_or_default())
            .await?;
        match ran.into_response()? {
            CallToolResponse::Complete(result) => Ok(result),
            _ => unreachable!("a callable tool's call completes"),
        }
    }

    /// What answers a `tools/call` of `name`: a tool of the handler declared in place, else a
    /// `callable` tool of the registry. `None` where neither serves it.
    fn target(&self, name: &str) -> Option<Target> {
        if let Some(handler) = &self.handler
            && let Some(entry) = registry().in_place(handler.owner(), name)
        {
            return Some(Target::InPlace(entry));
        }
        self.served(name).map(Target::Registry)
    }

    /// Answers one `tools/call`: its request state first (in band), then the gate.
    async fn respond(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        client: Client,
        caller: &Caller,
    ) -> Result<CallToolResponse, ErrorData> {
        let gate = &caller.gate;
        let Some(target) = self.target(&request.name) else {
            return self.undeclared_call(request, context, gate).await;
        };
        let tool = target.tool();
        let in_band = match &self.approvals {
            Approvals::InBand(in_band) if client.answers_forms => Some(in_band),
            _ => None,
        };
        // A state this server did not seal for its approval forms is the handler's own, for a tool
        // of the handler; no other tool has one.
        let approval_state = request.request_state.as_deref().filter(|sealed| {
            super::approvals::is_approval_state(sealed) || !matches!(target, Target::InPlace(_))
        });
        if let Some(sealed) = approval_state {
            let Some(in_band) = in_band else {
                return state_refused(gate, tool, StateRefused::Invalid);
            };
            let no_arguments = JsonObject::new();
            let (token, answer) = match in_band.answer(
                &caller.session(),
                &request.name,
                request.arguments.as_ref().unwrap_or(&no_arguments),
                sealed,
                request.input_responses.as_ref(),
            ) {
                Ok(answered) => answered,
                Err(refused) => return state_refused(gate, tool, refused),
            };
            match gate.answer(&token, answer) {
                Ok(()) => {}
                Err(ApproveError::Expired) => {
                    return state_refused(gate, tool, StateRefused::Expired);
                }
                Err(ApproveError::AlreadyApproved | ApproveError::AlreadyUsed) => {
                    return state_refused(gate, tool, StateRefused::Reused);
                }
                Err(ApproveError::ConfirmationMismatch) => {
                    return state_refused(gate, tool, StateRefused::Unconfirmed);
                }
                Err(ApproveError::UnknownToken | ApproveError::NotEnabled) => {
                    return state_refused(gate, tool, StateRefused::Invalid);
                }
                Err(ApproveError::Store(error)) => {
                    let code = McpCode::Denied(DenialCode::ApprovalStoreUnavailable);
                    let message = error.to_string();
                    let manifest = tool.manifest();
                    gate.record_probe(
                        std::borrow::Cow::Borrowed(manifest.id),
                        Some(manifest.risk_level),
                        code.as_str(),
                        message.clone(),
                    );
                    return Ok(refusal(code, &message).into());
                }
            }
            // The answer is in the store; the gate now decides the call with it, bound to exactly
            // these arguments, and an approval runs it once.
            let mut request = request;
            request.request_state = None;
            request.input_responses = None;
            let ran = self.dispatch(gate, target, request, context).await?;
            return ran.into_response();
        }
        // What a call that waits for an approval is answered with needs after the call has been
        // decided: its arguments for the form or the operator, its request and context to try it
        // again as a task. Kept only where they may be used.
        let arguments = (in_band.is_some() || self.on_pending.is_some())
            .then(|| request.arguments.clone().unwrap_or_default());
        let retry = client
            .takes_tasks
            .then(|| (request.clone(), context.clone()));
        let ran = self.dispatch(gate, target, request, context).await?;
        if let Some(denied) = ran.denied()
            && let Some(token) = denied.approval_token()
        {
            let arguments = arguments.unwrap_or_default();
            // The latch never opens again: what tainted the session before the decision still does.
            let taint = gate.taint();
            if let Some(in_band) = in_band {
                let about = About {
                    principal: gate.principal(),
                    taint: taint.as_ref(),
                };
                return Ok(in_band
                    .ask(&caller.session(), tool, &arguments, denied, token, &about)
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
                    instance: match target {
                        Target::InPlace(_) => Some(self.handler_label.to_string()),
                        Target::Registry(tool) => tool
                            .receiver_type()
                            .and_then(|of| self.instances.label_of(of))
                            .map(str::to_owned),
                    },
                    irreversible: tool.manifest().irreversible,
                    target: denied.target().map(str::to_owned),
                    evidence: denied.evidence().map(str::to_owned),
                    rollback: denied.rollback().cloned(),
                });
            }
            if let Some((request, context)) = retry
                && denied.code() == DenialCode::ApprovalPending
            {
                let token = token.to_owned();
                return Ok(
                    match self.wait_as_task(
                        gate,
                        target,
                        request,
                        context,
                        &token,
                        &caller.session(),
                    ) {
                        Ok(created) => created.into(),
                        Err(too_many) => {
                            refusal(McpCode::TooManyTasks, &too_many.to_string()).into()
                        }
                    },
                );
            }
        }
        ran.into_response()
    }

    /// A call of a name that no declaration of this server's serves: a tool of the handler that
    /// declares no risk is refused (or, where the application says so, served as it is); any other
    /// name is unknown.
    async fn undeclared_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        gate: &Gate,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.clone();
        let Some(handler) = &self.handler else {
            crate::by_name::record_unknown(gate, &name);
            return Err(unknown_tool(&name));
        };
        if self.undeclared == Undeclared::Serve {
            // No gate decides it; the log says it ran, and a sink that cannot say so stops it.
            let message = format!(
                "tool `{name}` of {} declares no risk and was served without a gate \
                 (Undeclared::Serve)",
                handler.type_name()
            );
            if let Err(error) = gate.record_ungated(name.to_string(), message) {
                let message = format!("the audit log could not record the call: {error}");
                return Ok(refusal(McpCode::Denied(DenialCode::AuditUnavailable), &message).into());
            }
            return handler.call_tool(request, context).await;
        }
        if handler.tool(&name).is_none() && !self.handler_lists(handler, &name, &context).await {
            crate::by_name::record_unknown(gate, &name);
            return Err(unknown_tool(&name));
        }
        let message = format!(
            "tool `{name}` of {} declares no risk, so no gate can decide its calls: declare it \
             with #[toolgate(risk = \"...\")] beside its #[tool], in a #[toolgate::toolset] impl",
            handler.type_name()
        );
        gate.record_probe(
            std::borrow::Cow::Owned(name.to_string()),
            None,
            McpCode::UndeclaredTool.as_str(),
            message.clone(),
        );
        Ok(refusal(McpCode::UndeclaredTool, &message).into())
    }

    /// Refuses to serve a handler whose type declares tools in place and whose router also serves a
    /// tool with no declaration (a second `#[tool_router]` impl of the type, a route added by hand),
    /// unless the application serves such tools on purpose ([`Undeclared::Serve`]). No macro sees
    /// every router of a type: the server reads the handler's list with the first request's context,
    /// and from then on answers every `tools/list` and `tools/call` with the error that names the tool.
    async fn check_routes(&self, context: &RequestContext<RoleServer>) -> Result<(), ErrorData> {
        let Some(handler) = &self.handler else {
            return Ok(());
        };
        if self.undeclared == Undeclared::Serve || !handler.declares() {
            return Ok(());
        }
        let unrouted = match self.unrouted.get() {
            Some(unrouted) => unrouted.clone(),
            None => {
                let mut request: Option<PaginatedRequestParams> = None;
                let unrouted = loop {
                    let listed = handler.list_tools(request, context.clone()).await?;
                    let found = listed
                        .tools
                        .iter()
                        .find(|tool| registry().in_place(handler.owner(), &tool.name).is_none());
                    match (found, listed.next_cursor) {
                        (Some(tool), _) => break Some(tool.name.to_string()),
                        (None, Some(cursor)) => {
                            request =
                                Some(PaginatedRequestParams::default().with_cursor(Some(cursor)));
                        }
                        (None, None) => break None,
                    }
                };
                self.unrouted.get_or_init(|| unrouted).clone()
            }
        };
        match unrouted {
            None => Ok(()),
            Some(name) => Err(ErrorData::internal_error(
                format!(
                    "the router of {} serves tool `{name}`, which declares no risk, beside tools \
                     declared in place, so this server serves none: declare it with \
                     #[toolgate(risk = \"...\")] beside its #[tool], in a #[toolgate::toolset] impl, or \
                     serve it ungated on purpose with Undeclared::Serve",
                    handler.type_name()
                ),
                Some(json!({ "code": McpCode::UndeclaredTool.as_str(), "tool": name })),
            )),
        }
    }

    /// Whether the handler lists the tool `name`, for a handler that does not say so by name.
    async fn handler_lists(
        &self,
        handler: &Arc<dyn DynHandler>,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> bool {
        handler
            .list_tools(None, context.clone())
            .await
            .is_ok_and(|listed| listed.tools.iter().any(|tool| tool.name == name))
    }

    /// Makes a call that waits for an operator a task: the call is tried again, every 250 ms at first
    /// and at most every 5 s (each try a `refused` record while it waits), until the operator has
    /// decided on the request `token` names; the task then completes with the call's result. It fails
    /// with `APPROVAL_EXPIRED` when that request expired unanswered (a try is then asked for a new
    /// one, which no operator was told of), or when the task's deadline has passed.
    fn wait_as_task(
        &self,
        gate: &Gate,
        target: Target,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        token: &str,
        owner: &Arc<str>,
    ) -> Result<rmcp::model::CreateTaskResult, TooManyTasks> {
        let id = target.tool().manifest().id;
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
                    tasks.fail(
                        &task_id,
                        task_error(McpCode::Denied(DenialCode::ApprovalExpired), &message),
                    );
                    return;
                }
                // The last try is at the deadline.
                tokio::time::sleep(wait.min(ends - now)).await;
                wait = (wait * 2).min(TASK_POLL_MAX);
                // Each try is a request of its own to the handler: the original's cancellation ended
                // with its answer, the task's own is `tasks/cancel`.
                let mut retry = context.clone();
                retry.ct = Default::default();
                let ran = match server.dispatch(&gate, target, request.clone(), retry).await {
                    Ok(ran) => ran,
                    Err(error) => {
                        tasks.complete(&task_id, refusal(McpCode::UnknownTool, &error.message));
                        return;
                    }
                };
                let pending = ran
                    .denied()
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
                        tasks.fail(
                            &task_id,
                            task_error(McpCode::Denied(DenialCode::ApprovalExpired), &message),
                        );
                        return;
                    }
                    None => {
                        match ran.into_response() {
                            Ok(CallToolResponse::Complete(result)) => {
                                tasks.complete(&task_id, result);
                            }
                            Ok(_) => tasks.fail(
                                &task_id,
                                task_error(
                                    McpCode::UnsupportedResponse,
                                    "the tool answered with a response a task cannot carry",
                                ),
                            ),
                            Err(error) => tasks.fail(&task_id, error_object(error)),
                        }
                        return;
                    }
                }
            }
        });
        self.tasks
            .attach(&created.task.task_id, runner.abort_handle());
        Ok(created)
    }

    /// Runs the call through its gate: a `callable` tool through the registry, a tool of the handler
    /// as its declared method, whose own check decides it with the call's arguments.
    async fn dispatch(
        &self,
        gate: &Gate,
        target: Target,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<Ran, ErrorData> {
        match (target, &self.handler) {
            (Target::InPlace(entry), Some(handler)) => {
                // The handler's router still says which of its tools it serves (one it removed or
                // disabled is not), but never what runs for a declared name: the declared method does.
                if handler.tool(&request.name).is_none()
                    && !self.handler_lists(handler, &request.name, &context).await
                {
                    crate::by_name::record_unknown(gate, &request.name);
                    return Err(unknown_tool(&request.name));
                }
                // Decided by the tool's own check when rmcp's router reaches it, with the call's JSON
                // arguments: once, right before the body, however long the handler takes to get there.
                let arguments = request.arguments.clone().unwrap_or_default();
                let label = self.handler_label.to_string();
                let call = handler.call_declared(request, context);
                let (call, outcome) = deciding::with_arguments(entry, arguments, label, call);
                let response = gate.scope(call).await;
                let refused = outcome
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                Ok(Ran::InPlace(match refused {
                    Some(denied) => Err(denied),
                    None => Ok(response),
                }))
            }
            (Target::InPlace(entry), None) => Err(unknown_tool(entry.manifest.id)),
            (Target::Registry(tool), _) => {
                let arguments = request.arguments.unwrap_or_default();
                self.call_registry(gate, tool.manifest().id, arguments)
                    .await
            }
        }
    }

    async fn call_registry(
        &self,
        gate: &Gate,
        name: &str,
        arguments: JsonObject,
    ) -> Result<Ran, ErrorData> {
        match registry()
            .call_with(gate, &self.instances, name, Value::Object(arguments))
            .await
        {
            Err(
                CallError::UnknownTool { .. }
                | CallError::NotCallable { .. }
                | CallError::NoInstance { .. },
            ) => Err(unknown_tool(name)),
            result => Ok(Ran::Registry(result)),
        }
    }
}

/// What serves a name: a `callable` tool of the registry, or a tool of the handler declared in place.
#[derive(Clone, Copy)]
enum Target {
    Registry(Tool),
    InPlace(&'static ToolEntry),
}

impl Target {
    fn tool(self) -> Tool {
        match self {
            Target::Registry(tool) => tool,
            Target::InPlace(entry) => Tool { entry },
        }
    }
}

/// What a `tools/call` ran as.
enum Ran {
    /// A `callable` tool, through [`Registry::call_with`](crate::Registry::call_with).
    Registry(Result<Value, CallError>),
    /// A tool of the handler: refused before its router ran, or the router's response.
    InPlace(Result<Result<CallToolResponse, ErrorData>, Denied>),
}

impl Ran {
    fn denied(&self) -> Option<&Denied> {
        match self {
            Ran::Registry(Err(error)) => error.denied(),
            Ran::InPlace(Err(denied)) => Some(denied),
            _ => None,
        }
    }

    fn into_response(self) -> Result<CallToolResponse, ErrorData> {
        match self {
            Ran::Registry(result) => Ok(tool_result(result).into()),
            Ran::InPlace(Err(denied)) => Ok(tool_result(Err(CallError::Denied(denied))).into()),
            Ran::InPlace(Ok(Ok(response))) => Ok(response),
            // The tool's own check refused (a call it made of another tool, say): a refusal is a
            // tool result, which the model reads.
            Ran::InPlace(Ok(Err(error))) => match refusal_in(&error) {
                Some(result) => Ok(result.into()),
                None => Err(error),
            },
        }
    }
}

/// The refusal an error from a tool gated in place carries, made by `From<Denied>`.
fn refusal_in(error: &ErrorData) -> Option<CallToolResult> {
    if error.code != REFUSED {
        return None;
    }
    let data = error.data.as_ref()?;
    let code = data.get("code")?.as_str()?;
    let code = DenialCode::ALL.into_iter().find(|c| c.as_str() == code)?;
    let message = data.get("message")?.as_str()?;
    Some(refusal_written(code.as_str(), message))
}

/// A JSON-RPC error as the object a failed task carries.
fn error_object(error: ErrorData) -> JsonObject {
    match serde_json::to_value(error) {
        Ok(Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

/// Tells a subscription's client that the tool list changed whenever the gate's mode moves; returns
/// when the stream is gone.
async fn watch_mode(gate: Gate, sink: rmcp::service::SubscriptionSink, every: Duration) {
    let mut seen = Sight::of(&gate);
    loop {
        tokio::time::sleep(every).await;
        if seen.moved(&gate) && sink.notify_tool_list_changed().await.is_err() {
            return;
        }
    }
}

/// What a client's tool list depends on: the gate's mode, and what the operator's policy it follows
/// lets the client see.
struct Sight {
    mode: Mode,
    policy: Option<Arc<str>>,
    /// Per linked tool, whether the gate would allow or ask for it (what `tools/list` shows).
    visible: Vec<bool>,
}

impl Sight {
    fn of(gate: &Gate) -> Sight {
        Sight {
            mode: gate.mode(),
            policy: gate.policy_digest(),
            visible: Sight::visible(gate),
        }
    }

    fn visible(gate: &Gate) -> Vec<bool> {
        registry()
            .entries
            .iter()
            .map(|entry| {
                !matches!(
                    gate.verdict(&entry.manifest),
                    Some(Verdict::Refuse(_)) | None
                )
            })
            .collect()
    }

    /// Whether the list the client would get changed since it was last seen: the mode moved, or a
    /// new policy shows or hides a tool.
    fn moved(&mut self, gate: &Gate) -> bool {
        let (mode, policy) = (gate.mode(), gate.policy_digest());
        if mode == self.mode && policy == self.policy {
            return false;
        }
        let visible = Sight::visible(gate);
        let moved = mode != self.mode || visible != self.visible;
        *self = Sight {
            mode,
            policy,
            visible,
        };
        moved
    }
}

/// What the client of a request can take besides a plain result.
#[derive(Debug, Clone, Copy, Default)]
struct Client {
    /// It speaks 2026-07-28 and declared elicitation, so it can answer an `InputRequired` form.
    answers_forms: bool,
    /// It declared the Tasks extension, so a call may become a task.
    takes_tasks: bool,
}

/// The gate and the session of one request.
struct Caller {
    gate: Gate,
    of: Of,
}

/// Whose a request's session is.
enum Of {
    /// Over HTTP, the principal's of this name.
    #[cfg(feature = "mcp-http")]
    Principal(Arc<str>),
    /// Elsewhere, the connection's, by its random id.
    Connection(Arc<OnceLock<Arc<str>>>),
}

impl Caller {
    /// The session a request's in-band approval states and tasks are bound to.
    fn session(&self) -> Arc<str> {
        match &self.of {
            #[cfg(feature = "mcp-http")]
            Of::Principal(name) => format!("principal\n{name}").into(),
            Of::Connection(id) => format!("connection\n{}", id.get_or_init(session_id)).into(),
        }
    }
}

fn unknown_task(id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("no task {id} of this caller"),
        Some(json!({ "code": McpCode::UnknownTask.as_str() })),
    )
}

/// The JSON-RPC error of a task that ended without its call's result: `-32001` (the request timed
/// out), the text `"<CODE>: <message>"`, and `{"code", "message"}` as its data.
fn task_error(code: McpCode, message: &str) -> JsonObject {
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

/// A retry refused for its request state: recorded, and answered with its code. A state that fails
/// its integrity check (forged, altered, sealed by another key or for another caller) is a JSON-RPC
/// error (`-32602`, invalid params), as the protocol requires; an expired, replayed or mismatched
/// one is a refusal the model reads, which says to call again.
fn state_refused(
    gate: &Gate,
    tool: Tool,
    refused: StateRefused,
) -> Result<CallToolResponse, ErrorData> {
    let manifest = tool.manifest();
    let message = refused.message(manifest.id);
    gate.record_probe(
        std::borrow::Cow::Borrowed(manifest.id),
        Some(manifest.risk_level),
        refused.code().as_str(),
        message.clone(),
    );
    match refused {
        StateRefused::Invalid => Err(ErrorData::invalid_params(
            format!("{}: {message}", refused.code()),
            Some(json!({ "code": refused.code().as_str(), "message": message })),
        )),
        _ => Ok(refusal(refused.code(), &message).into()),
    }
}

/// A refusal of the server's own, shaped as the gate's are: `isError`, `"<CODE>: <message>"`, and
/// `{"code", "message"}`.
fn refusal(code: McpCode, message: &str) -> CallToolResult {
    refusal_written(code.as_str(), message)
}

/// [`refusal`] with a code as it was written in an error's data.
fn refusal_written(code: &str, message: &str) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(format!("{code}: {message}"))]);
    result.structured_content = Some(json!({ "code": code, "message": message }));
    result
}

/// The protocol error of a call of a name that is no tool: JSON-RPC `-32602` (invalid params), as the
/// MCP specification answers unknown tools, with `{"code": "UNKNOWN_TOOL"}` as its data.
pub fn unknown_tool(name: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("Unknown tool: {name}"),
        Some(json!({ "code": McpCode::UnknownTool.as_str() })),
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
        self.info()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.check_routes(&context).await?;
        let caller = self.caller(&context.extensions);
        self.list_for(&caller.gate, request, context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.check_routes(&context).await?;
        // A form goes only to a client that declared it can show one: `elicitation` with `form`, or
        // empty, which means forms.
        let shows_forms = context
            .client_capabilities()
            .and_then(|c| c.elicitation)
            .is_some_and(|e| e.form.is_some() || e.url.is_none());
        let client = Client {
            answers_forms: shows_forms
                && context
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
                Some(json!({ "code": McpCode::Cancelled.as_str() })),
            )),
            response = self.respond(request, context.clone(), client, &caller) => response,
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let caller = self.caller(&context.extensions);
        self.tasks
            .get(&caller.session(), &request.task_id)
            .ok_or_else(|| unknown_task(&request.task_id))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = self.caller(&context.extensions);
        if self.tasks.cancel(&caller.session(), &request.task_id) {
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
                Some(json!({ "code": McpCode::MessageTooLarge.as_str(), "limit": limit })),
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
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let ours = SubscriptionFilter::builder().tools_list_changed().build();
        let theirs = self
            .handler
            .as_ref()
            .and_then(|handler| handler.accepted_subscription_filter(requested));
        match theirs {
            Some(mut theirs) => {
                theirs.tools_list_changed = ours.tools_list_changed;
                Some(theirs)
            }
            None => Some(ours),
        }
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        // A client of the 2026-07-28 protocol hears of list changes on its `subscriptions/listen`
        // stream, watched as a session's connection is (`on_initialized`). What the handler accepts
        // (its resources, its prompts, its own tool changes) it delivers on the same stream.
        let watches_mode = context.accepted().tools_list_changed == Some(true);
        let gate = self.caller(&context.request_context().extensions).gate;
        let handler = self.handler.as_ref().filter(|h| {
            h.accepted_subscription_filter(context.requested())
                .is_some()
        });
        let sink = context.sink().clone();
        match (handler, watches_mode) {
            (Some(handler), true) => tokio::select! {
                listened = handler.listen(context) => listened,
                () = watch_mode(gate, sink, self.mode_poll) => Ok(()),
            },
            (Some(handler), false) => handler.listen(context).await,
            (None, true) => {
                tokio::select! {
                    () = context.cancelled() => {}
                    () = watch_mode(gate, sink, self.mode_poll) => {}
                }
                Ok(())
            }
            (None, false) => {
                context.cancelled().await;
                Ok(())
            }
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Some(handler) = &self.handler {
            handler.on_initialized(context.clone()).await;
        }
        // The gate has no change subscription: each connection reads its mode and policy every
        // `mode_poll` and tells its client when its tool list changed, so that the client lists again.
        let gate = self.caller(&context.extensions).gate;
        let peer = context.peer;
        let every = self.mode_poll;
        tokio::spawn(async move {
            let mut seen = Sight::of(&gate);
            loop {
                tokio::time::sleep(every).await;
                if peer.is_transport_closed() {
                    break;
                }
                if seen.moved(&gate) && peer.notify_tool_list_changed().await.is_err() {
                    break;
                }
            }
        });
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        if let Some(handler) = &self.handler
            && let Some(entry) = registry().in_place(handler.owner(), name)
        {
            return handler
                .tool(name)
                .map(|tool| definition::in_place(&entry.manifest, tool));
        }
        self.tool(name)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.offering(|c| c.completions.is_some(), "completion/complete")?
            .complete(request, context)
            .await
    }

    #[allow(deprecated)] // Passed through for clients of protocols that still have it.
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.offering(|c| c.logging.is_some(), "logging/setLevel")?
            .set_level(request, context)
            .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.offering(|c| c.prompts.is_some(), "prompts/get")?
            .get_prompt(request, context)
            .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.offering(|c| c.prompts.is_some(), "prompts/list")?
            .list_prompts(request, context)
            .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.offering(|c| c.resources.is_some(), "resources/list")?
            .list_resources(request, context)
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.offering(|c| c.resources.is_some(), "resources/templates/list")?
            .list_resource_templates(request, context)
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.offering(|c| c.resources.is_some(), "resources/read")?
            .read_resource(request, context)
            .await
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        if let Some(handler) = &self.handler {
            handler.on_roots_list_changed(context).await;
        }
    }
}
