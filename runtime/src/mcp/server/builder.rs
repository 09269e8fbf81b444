//! The server, its settings, and the builder methods that set them.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rmcp::ServerHandler;
use rmcp::model::Implementation;

use super::pending::PendingApproval;
use crate::by_name::Instances;
use crate::gate::Gate;
use crate::gate::reads::{ReadKind, ReadPattern};
use crate::mcp::approvals::Approvals;
use crate::mcp::definition::Visibility;
use crate::mcp::handler::{DynHandler, RouteMismatch, Undeclared};
use crate::mcp::tasks::{DEFAULT_MAX_TASKS, DEFAULT_TASK_DEADLINE, Tasks};
use crate::registry::ToolManifest;
use toolgate_policy::Risk;

type Filter = Arc<dyn Fn(&ToolManifest) -> bool + Send + Sync>;
type OnPending = Arc<dyn Fn(&PendingApproval) + Send + Sync>;

/// How often a connection's watcher reads the gate's mode by default, for `list_changed`.
pub const DEFAULT_MODE_POLL: Duration = Duration::from_millis(100);

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
/// The [handler](ToolgateServer::handler)'s resources and prompts are decided by the caller's gate
/// too, before the handler reads them: at the risk the server declares
/// ([`resource_risk`](ToolgateServer::resource_risk), [`prompt_risk`](ToolgateServer::prompt_risk);
/// READ_ONLY otherwise) and as the operator's policy file denies or records them; a refusal is the
/// JSON-RPC error [`REFUSED`](crate::mcp::REFUSED) with `{"code", "message"}`, and the lists show what
/// the gate allows.
///
/// The methods [`tools`](ToolgateServer::tools), [`serves`](ToolgateServer::serves) and
/// [`call`](ToolgateServer::call) are what its [`ServerHandler`] implementation does, for a handler of
/// your own to delegate to.
#[derive(Clone)]
pub struct ToolgateServer {
    pub(super) gate: Gate,
    pub(super) instances: Instances,
    pub(super) visibility: Visibility,
    pub(super) filter: Option<Filter>,
    /// Shared by the connections, which are made per request over HTTP with protocol 2026-07-28.
    pub(super) implementation: Arc<Implementation>,
    pub(super) instructions: Option<Arc<str>>,
    pub(super) approvals: Approvals,
    pub(super) on_pending: Option<OnPending>,
    pub(super) mode_poll: Duration,
    /// This connection's random id, made when first needed: over HTTP a request's principal names
    /// its session, and a connection is made per request.
    pub(super) session: Arc<OnceLock<Arc<str>>>,
    pub(super) tasks: Tasks,
    pub(super) max_tasks: usize,
    pub(super) task_deadline: Duration,
    pub(super) handler: Option<Arc<dyn DynHandler>>,
    /// Makes the handler of each further connection, where the application gave a factory.
    pub(super) factory: Option<Factory>,
    /// What a call of the handler's tools runs on, as approvals bind it and operators read it.
    pub(super) handler_label: Arc<String>,
    pub(super) undeclared: Undeclared,
    /// The first tool of a handler gated in place that its router serves with no declaration, once
    /// its list has been read (with the first request's context): the server serves no tool then.
    pub(super) unrouted: Arc<OnceLock<Option<String>>>,
    /// `server_info` was given: it names the server rather than the handler's own.
    pub(super) named: bool,
    /// The risks declared for reading the handler's resources and prompts, by pattern.
    pub(super) read_risks: Arc<Vec<ReadRisk>>,
}

/// A risk declared for the resources or prompts a pattern reaches.
#[derive(Debug, Clone)]
pub(super) struct ReadRisk {
    pub(super) kind: ReadKind,
    pub(super) pattern: ReadPattern,
    pub(super) risk: Risk,
}

/// Makes a handler for a connection, bound to its declared routes.
pub(super) type Factory =
    Arc<dyn Fn() -> Result<Arc<dyn DynHandler>, RouteMismatch> + Send + Sync + 'static>;

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
            factory: None,
            handler_label: Arc::new(String::new()),
            undeclared: Undeclared::Refuse,
            unrouted: Arc::default(),
            named: false,
            read_risks: Arc::default(),
        }
    }

    /// Serves `handler`, an rmcp [`ServerHandler`] of the application (a `#[tool_router]` server with
    /// its resources and prompts), behind this server's gates.
    ///
    /// Each tool of the handler declared in place (`#[toolgate(risk = ..)]` beside rmcp's `#[tool]`,
    /// in a `#[toolgate::toolset]` impl of the handler's type) is decided by the caller's gate before
    /// its method runs, and listed as that gate allows; approvals, tasks, budgets and the
    /// audit log work for it as for a `callable` tool. A tool of the handler that declares no risk is
    /// refused ([`undeclared`](ToolgateServer::undeclared)). Each resource read and prompt got is
    /// decided by the caller's gate first, and their lists follow it
    /// ([`resource_risk`](ToolgateServer::resource_risk), the policy file's `deny_resources` and
    /// `deny_prompts`), as are completions of their arguments; logging levels and subscriptions pass
    /// through to the handler; a capability the handler does not declare is answered `-32601`
    /// (method not found). The linked `callable` tools are served beside the handler's only where
    /// [`only`](ToolgateServer::only) selects them (`.only(|_| true)` for all); the handler's tool
    /// wins where both have a name.
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
    /// Every route of a type gated in place declares its risk: a tool its router serves with no
    /// declaration (a second `#[tool_router(router = ..)]` impl of the type, which no macro sees, or
    /// a route added by hand) keeps the handler from being served at all, unless
    /// [`undeclared`](ToolgateServer::undeclared) was set to [`Undeclared::Serve`] before. The
    /// handler's list is read here, with a request context that has no client behind it; a handler
    /// that cannot list that way is read with the first request's, and then the server answers every
    /// `tools/list` and `tools/call` with the error that names the tool.
    ///
    /// # Panics
    ///
    /// Where the handler's router answers the name of a tool declared in place with a definition
    /// other than the declared method's (a route of the same name merged in or added by hand), or
    /// serves a tool that declares no risk beside those declared in place, naming the tool:
    /// [`try_handler`](ToolgateServer::try_handler) returns that as an error.
    #[must_use]
    #[track_caller]
    pub fn handler<H: ServerHandler>(self, handler: H) -> ToolgateServer {
        match self.try_handler(handler) {
            Ok(server) => server,
            Err(mismatch) => panic!("{mismatch}"),
        }
    }

    /// [`handler`](ToolgateServer::handler), returning a router that answers the name of a tool
    /// declared in place with another route, or serves one that declares no risk, as an error rather
    /// than a panic.
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
        let label = crate::by_name::instances::named_label(name.into(), std::any::type_name::<H>());
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
        let unrouted = Arc::new(OnceLock::new());
        if self.undeclared != Undeclared::Serve
            && let Some(found) = crate::mcp::handler::first_undeclared(&handler)
        {
            if let Some(tool) = found {
                return Err(RouteMismatch::unrouted(tool, std::any::type_name::<H>()));
            }
            let _ = unrouted.set(None);
        }
        self.handler = Some(Arc::new(crate::mcp::handler::bind(handler)?));
        self.handler_label = Arc::new(label);
        self.unrouted = unrouted;
        self.factory = None;
        Ok(self)
    }

    /// Serves a handler made by `make` for each connection, as rmcp's
    /// `StreamableHttpService::new(move || Ok(Handler::new(..)), ..)` does: a handler that keeps
    /// state per session keeps it here too. Over HTTP each session (and each request of a client of
    /// the stateless protocol, 2026-07-28) gets its own; over stdio, the one connection gets the first.
    /// Every handler made is gated as [`handler`](ToolgateServer::handler)'s is. A call's `self`, to
    /// which its approval is bound, names the handler's session too (`<label> (session <digest>)`):
    /// an approval given in one session never runs on another session's handler, which may hold
    /// other state. A request of the stateless protocol, whose handler lives no longer than it, is
    /// bound to the label alone.
    ///
    /// # Panics
    ///
    /// As [`handler`](ToolgateServer::handler) does, for the first handler `make` makes:
    /// [`try_handler_factory`](ToolgateServer::try_handler_factory) returns that as an error.
    #[must_use]
    #[track_caller]
    pub fn handler_factory<H, F>(self, make: F) -> ToolgateServer
    where
        H: ServerHandler,
        F: Fn() -> H + Send + Sync + 'static,
    {
        match self.try_handler_factory(make) {
            Ok(server) => server,
            Err(mismatch) => panic!("{mismatch}"),
        }
    }

    /// [`handler_factory`](ToolgateServer::handler_factory), returning a router that answers the name
    /// of a tool declared in place with another route, or serves one that declares no risk, as an
    /// error rather than a panic.
    pub fn try_handler_factory<H, F>(self, make: F) -> Result<ToolgateServer, RouteMismatch>
    where
        H: ServerHandler,
        F: Fn() -> H + Send + Sync + 'static,
    {
        let label = crate::by_name::instances::registration_label(std::any::type_name::<H>());
        let mut server = self.with_handler(make(), label)?;
        server.factory = Some(Arc::new(move || {
            let bound = crate::mcp::handler::bind(make())?;
            Ok(Arc::new(bound) as Arc<dyn DynHandler>)
        }));
        Ok(server)
    }

    /// What a tool of the [`handler`](ToolgateServer::handler) that declares no risk gets:
    /// [`Undeclared::Refuse`] by default. Set it before the handler is given: a handler of a type
    /// gated in place whose router serves an undeclared tool is refused as it is given.
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
    /// an operator at once: [`DEFAULT_MAX_TASKS`] by default, at least 1.
    /// Past it, a call that would become a task is answered `TOO_MANY_TASKS` (its approval request
    /// stays pending, and was handed to [`on_pending`](ToolgateServer::on_pending)).
    #[must_use]
    pub fn max_tasks(mut self, limit: usize) -> ToolgateServer {
        self.max_tasks = limit.max(1);
        self
    }

    /// How long a task waits for an operator at most: [`DEFAULT_TASK_DEADLINE`]
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
    ///
    /// # Panics
    ///
    /// Where a [`handler_factory`](ToolgateServer::handler_factory) makes a handler whose router
    /// answers the name of a tool declared in place with another route, as
    /// [`handler`](ToolgateServer::handler) does.
    #[must_use]
    #[track_caller]
    pub fn connection(&self) -> ToolgateServer {
        match self.try_connection() {
            Ok(server) => server,
            Err(mismatch) => panic!("{mismatch}"),
        }
    }

    /// [`connection`](ToolgateServer::connection), the handler's route mismatch as an error.
    pub(crate) fn try_connection(&self) -> Result<ToolgateServer, RouteMismatch> {
        let handler = match &self.factory {
            Some(make) => Some(make()?),
            None => self.handler.clone(),
        };
        Ok(ToolgateServer {
            session: Arc::default(),
            handler,
            ..self.clone()
        })
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

    /// Declares the risk of reading the [handler](ToolgateServer::handler)'s resources whose URI
    /// `pattern` matches: a glob, `*` any run of characters and `?` one, on the whole URI, compared
    /// as written and as it reads (a look-alike spelling, percent-escapes, the scheme's case, a `..`).
    /// A resource no declaration reaches is READ_ONLY; one that several reach has the highest of their
    /// risks.
    ///
    /// `resources/read` of a resource whose risk is above the caller's gate's mode's ceiling is
    /// refused (`ABOVE_CEILING`), and HIGH_WRITE needs an approval, which no read can get
    /// (`APPROVAL_REQUIRED`); `resources/list` and `resources/templates/list` hide what would be
    /// refused. Reads are gated as the operator's policy file says too (`deny_resources`,
    /// `record_resources`).
    ///
    /// ```
    /// # extern crate toolgate_runtime as toolgate;
    /// use toolgate::mcp::ToolgateServer;
    /// use toolgate::{Gate, Mode, Risk};
    ///
    /// let server = ToolgateServer::new(Gate::new(Mode::PartialAuto)?)
    ///     .resource_risk("cloud://secrets/*", Risk::HighWrite)
    ///     .prompt_risk("incident-*", Risk::LowWrite);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Panics
    ///
    /// Where `pattern` is empty, or holds a blank or a character a reader cannot see.
    #[must_use]
    #[track_caller]
    pub fn resource_risk(self, pattern: &str, risk: Risk) -> ToolgateServer {
        self.read_risk(ReadKind::Resource, pattern, risk)
    }

    /// Declares the risk of getting the [handler](ToolgateServer::handler)'s prompts whose name
    /// `pattern` matches, as [`resource_risk`](ToolgateServer::resource_risk) does for resources: a
    /// glob on the whole name, compared as written and as it reads; READ_ONLY where none reaches a
    /// prompt, the highest where several do. `prompts/get` is decided, and `prompts/list` filtered,
    /// as `resources/read` and `resources/list` are.
    ///
    /// # Panics
    ///
    /// Where `pattern` is empty, or holds a character a reader cannot see.
    #[must_use]
    #[track_caller]
    pub fn prompt_risk(self, pattern: &str, risk: Risk) -> ToolgateServer {
        self.read_risk(ReadKind::Prompt, pattern, risk)
    }

    #[track_caller]
    fn read_risk(mut self, kind: ReadKind, pattern: &str, risk: Risk) -> ToolgateServer {
        let pattern = match ReadPattern::parse(kind, pattern) {
            Ok(pattern) => pattern,
            Err(why) => panic!("{why}: {}", crate::terminal::escaped(pattern)),
        };
        Arc::make_mut(&mut self.read_risks).push(ReadRisk {
            kind,
            pattern,
            risk,
        });
        self
    }
}
