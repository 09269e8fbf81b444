//! An application's own rmcp handler inside a [`ToolgateServer`](super::ToolgateServer): each tool it
//! declares runs as the method it was declared on, decided by the caller's gate; everything else passes
//! through.
//!
//! The handler is held behind an object-safe mirror of [`ServerHandler`], so that the server stays one
//! type whatever the handler's is; each passed-through request costs one boxed future.

use std::any::{Any, TypeId};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rmcp::handler::server::router::tool::{ToolRoute, ToolRouter};
use rmcp::handler::server::tool::{CallToolHandler, ToolCallContext};
#[allow(deprecated)]
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerConfig, SetLevelRequestParams, SubscriptionFilter, Tool,
};
use rmcp::model::{ClientJsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::service::serve_directly;
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::transport::Transport;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::registry::registry;

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a tool of the handler that declares no risk gets: see
/// [`ToolgateServer::undeclared`](super::ToolgateServer::undeclared).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Undeclared {
    /// Left out of `tools/list`, and a call of it refused (`UNDECLARED_TOOL`), recorded in the gate's
    /// audit log. The default: a tool nobody declared a risk for is not run.
    #[default]
    Refuse,
    /// Listed and run as the handler serves it, with no gate: for a migration, one tool at a time.
    /// Each call is written to the caller's gate's audit log first (stage `ungated`, code
    /// `UNDECLARED_TOOL_SERVED`), and does not run where the log cannot take that record.
    Serve,
}

/// The route of the method `method` of the rmcp handler `S`, whose rmcp attributes `attr` gives: what
/// `#[toolgate(..)]` beside rmcp's `#[tool]` registers, for the server to run under the tool's name.
pub fn in_place_route<S, C, A>(attr: fn() -> Tool, method: C) -> Box<dyn Any + Send + Sync>
where
    S: Send + Sync + 'static,
    C: CallToolHandler<S, A> + Send + Sync + Clone + 'static,
{
    Box::new(ToolRoute::<S>::new(attr(), method))
}

/// An application's handler, with the routes of the tools its type declares in place.
pub(crate) struct Bound<H> {
    handler: H,
    /// Each declared tool's own method, under its rmcp name.
    declared: ToolRouter<H>,
}

/// The handler's router serves a tool declared in place with a route that is not the declared
/// method (a router merged with `+`, a route added or replaced by hand), or serves beside the tools
/// declared in place one that declares no risk (a second `#[tool_router]` impl of the type): the
/// server refuses to serve it, rather than have a tool's name stand for a body that no gate decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteMismatch {
    tool: String,
    handler: &'static str,
    undeclared: bool,
}

impl RouteMismatch {
    /// The tool whose route is not its declared method.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The handler's router serves [`tool`](RouteMismatch::tool) with no declaration at all, beside
    /// the tools declared in place; otherwise it serves a declared tool by another route.
    pub fn undeclared(&self) -> bool {
        self.undeclared
    }

    pub(crate) fn unrouted(tool: String, handler: &'static str) -> RouteMismatch {
        RouteMismatch {
            tool,
            handler,
            undeclared: true,
        }
    }
}

impl std::fmt::Display for RouteMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.undeclared {
            let message = unrouted_message(self.handler, &self.tool);
            return f.write_str(&message);
        }
        write!(
            f,
            "the router of {} serves tool `{}` with a route that is not the method declared for it \
             with #[toolgate(..)] (a router merged with `+` or a route added by hand that has the \
             same name): give the other route another name, or declare it in its place",
            self.handler, self.tool
        )
    }
}

impl std::error::Error for RouteMismatch {}

/// Binds `handler` to the routes of the tools its type declares in place, refusing a handler whose
/// router answers one of their names with another tool's definition.
pub(crate) fn bind<H: ServerHandler>(handler: H) -> Result<Bound<H>, RouteMismatch> {
    let mut declared = ToolRouter::new();
    for entry in registry().in_place_of(TypeId::of::<H>()) {
        let mismatch = || RouteMismatch {
            tool: entry.manifest.id.to_owned(),
            handler: std::any::type_name::<H>(),
            undeclared: false,
        };
        let route = entry
            .route
            .map(|make| make())
            .and_then(|route| route.downcast::<ToolRoute<H>>().ok())
            .ok_or_else(mismatch)?;
        if route.attr.name != entry.manifest.id {
            return Err(mismatch());
        }
        if let Some(held) = ServerHandler::get_tool(&handler, entry.manifest.id)
            && held != route.attr
        {
            return Err(mismatch());
        }
        declared.add_route(*route);
    }
    Ok(Bound { handler, declared })
}

/// The application's handler, as the server calls it.
pub(crate) trait DynHandler: Send + Sync + 'static {
    /// The handler's type: its tools gated in place are registered under it.
    fn owner(&self) -> TypeId;
    fn type_name(&self) -> &'static str;
    /// Whether the handler's type declares tools in place.
    fn declares(&self) -> bool;
    fn info(&self) -> ServerConfig;
    fn tool(&self, name: &str) -> Option<Tool>;
    fn list_tools<'a>(
        &'a self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ListToolsResult, ErrorData>>;
    fn call_tool<'a>(
        &'a self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<CallToolResponse, ErrorData>>;
    /// Runs the tool the handler's type declares in place under the request's name: its own method,
    /// with the handler as `self`, never another route of that name in the handler's router.
    fn call_declared<'a>(
        &'a self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<CallToolResponse, ErrorData>>;
    fn complete<'a>(
        &'a self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<CompleteResult, ErrorData>>;
    #[allow(deprecated)] // Passed through for clients of protocols that still have it.
    fn set_level<'a>(
        &'a self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<(), ErrorData>>;
    fn get_prompt<'a>(
        &'a self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<GetPromptResponse, ErrorData>>;
    fn list_prompts<'a>(
        &'a self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ListPromptsResult, ErrorData>>;
    fn list_resources<'a>(
        &'a self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ListResourcesResult, ErrorData>>;
    fn list_resource_templates<'a>(
        &'a self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ListResourceTemplatesResult, ErrorData>>;
    fn read_resource<'a>(
        &'a self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ReadResourceResponse, ErrorData>>;
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter>;
    fn listen(&self, context: SubscriptionContext) -> Boxed<'_, Result<(), ErrorData>>;
    fn on_initialized(&self, context: NotificationContext<RoleServer>) -> Boxed<'_, ()>;
    fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) -> Boxed<'_, ()>;
}

impl<H: ServerHandler> DynHandler for Bound<H> {
    fn owner(&self) -> TypeId {
        TypeId::of::<H>()
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<H>()
    }

    fn declares(&self) -> bool {
        !self.declared.map.is_empty()
    }

    fn info(&self) -> ServerConfig {
        ServerHandler::get_info(&self.handler)
    }

    fn tool(&self, name: &str) -> Option<Tool> {
        ServerHandler::get_tool(&self.handler, name)
    }

    fn list_tools<'a>(
        &'a self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ListToolsResult, ErrorData>> {
        Box::pin(ServerHandler::list_tools(&self.handler, request, context))
    }

    fn call_tool<'a>(
        &'a self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<CallToolResponse, ErrorData>> {
        Box::pin(ServerHandler::call_tool(&self.handler, request, context))
    }

    fn call_declared<'a>(
        &'a self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<CallToolResponse, ErrorData>> {
        Box::pin(async move {
            let call = ToolCallContext::new(&self.handler, request, context);
            self.declared.call(call).await
        })
    }

    fn complete<'a>(
        &'a self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<CompleteResult, ErrorData>> {
        Box::pin(ServerHandler::complete(&self.handler, request, context))
    }

    #[allow(deprecated)] // Passed through for clients of protocols that still have it.
    fn set_level<'a>(
        &'a self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<(), ErrorData>> {
        Box::pin(ServerHandler::set_level(&self.handler, request, context))
    }

    fn get_prompt<'a>(
        &'a self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<GetPromptResponse, ErrorData>> {
        Box::pin(ServerHandler::get_prompt(&self.handler, request, context))
    }

    fn list_prompts<'a>(
        &'a self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ListPromptsResult, ErrorData>> {
        Box::pin(ServerHandler::list_prompts(&self.handler, request, context))
    }

    fn list_resources<'a>(
        &'a self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ListResourcesResult, ErrorData>> {
        Box::pin(ServerHandler::list_resources(
            &self.handler,
            request,
            context,
        ))
    }

    fn list_resource_templates<'a>(
        &'a self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ListResourceTemplatesResult, ErrorData>> {
        Box::pin(ServerHandler::list_resource_templates(
            &self.handler,
            request,
            context,
        ))
    }

    fn read_resource<'a>(
        &'a self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ReadResourceResponse, ErrorData>> {
        Box::pin(ServerHandler::read_resource(
            &self.handler,
            request,
            context,
        ))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        ServerHandler::accepted_subscription_filter(&self.handler, requested)
    }

    fn listen(&self, context: SubscriptionContext) -> Boxed<'_, Result<(), ErrorData>> {
        Box::pin(ServerHandler::listen(&self.handler, context))
    }

    fn on_initialized(&self, context: NotificationContext<RoleServer>) -> Boxed<'_, ()> {
        Box::pin(ServerHandler::on_initialized(&self.handler, context))
    }

    fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) -> Boxed<'_, ()> {
        Box::pin(ServerHandler::on_roots_list_changed(&self.handler, context))
    }
}

// Every route of a handler gated in place declares its risk. `#[toolgate::toolset]` refuses a `#[tool]`
// without a declaration in its own impl; a second `#[tool_router(router = ..)]` impl of the same type,
// or a route added by hand, no macro sees. So the server reads the handler's tool list when the
// handler is given (a handler's list needs a request context: it is read with one that has no client
// behind it) and refuses a handler whose router serves an undeclared tool, naming it.

/// How long the handler's list may take when it is read at start-up; a handler that waits longer is
/// read with the first request's context instead.
const READ_AT_START: Duration = Duration::from_secs(2);

/// The first tool, in the handler's list, that the type `H` declares no risk for, read with a context
/// that has no client behind it: `Some(None)` where there is none, `None` where the list could not be
/// read that way (an error, a wait past [`READ_AT_START`]).
pub(crate) fn first_undeclared<H: ServerHandler>(handler: &H) -> Option<Option<String>> {
    let owner = std::any::TypeId::of::<H>();
    if registry().in_place_of(owner).next().is_none() {
        return Some(None);
    }
    // The caller may be inside a runtime, or in none: the list is read on a thread of its own.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .ok()?;
                runtime.block_on(async {
                    let running = serve_directly(Unconnected, Silent, None);
                    let context = RequestContext::new(RequestId::Number(0), running.peer().clone());
                    let found = tokio::time::timeout(
                        READ_AT_START,
                        first_of(owner, |request| {
                            ServerHandler::list_tools(handler, request, context.clone())
                        }),
                    )
                    .await;
                    running.cancellation_token().cancel();
                    found.ok()?.ok()
                })
            })
            .join()
            .ok()
            .flatten()
    })
}

/// The first listed tool that `owner` declares no risk for, over every page `list` gives.
pub(crate) async fn first_of<F, L>(
    owner: std::any::TypeId,
    list: L,
) -> Result<Option<String>, ErrorData>
where
    L: Fn(Option<PaginatedRequestParams>) -> F,
    F: Future<Output = Result<rmcp::model::ListToolsResult, ErrorData>>,
{
    let mut request: Option<PaginatedRequestParams> = None;
    loop {
        let listed = list(request).await?;
        let undeclared = |tool: &&Tool| registry().in_place(owner, &tool.name).is_none();
        if let Some(tool) = listed.tools.iter().find(undeclared) {
            return Ok(Some(tool.name.to_string()));
        }
        match listed.next_cursor {
            Some(cursor) => {
                request = Some(PaginatedRequestParams::default().with_cursor(Some(cursor)));
            }
            None => return Ok(None),
        }
    }
}

/// Why a handler whose router serves the undeclared tool `tool` is not served.
pub(crate) fn unrouted_message(handler: &str, tool: &str) -> String {
    format!(
        "the router of {handler} serves tool `{tool}`, which declares no risk, beside tools \
         declared in place, so this server serves none: declare it with \
         #[toolgate(risk = \"...\")] beside its #[tool], in a #[toolgate::toolset] impl, or \
         serve it ungated on purpose with .undeclared(Undeclared::Serve) before .handler(..)"
    )
}

/// The service behind the start-up context: it is never asked anything.
struct Unconnected;

impl ServerHandler for Unconnected {}

/// A transport with no client: it is closed at once, so that a handler asking its client something
/// while it lists is answered with an error rather than kept waiting.
struct Silent;

impl Transport<RoleServer> for Silent {
    type Error = std::io::Error;

    fn send(
        &mut self,
        _: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        std::future::ready(Ok(()))
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        std::future::ready(None)
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}
