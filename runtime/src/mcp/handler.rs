//! An application's own rmcp handler inside a [`ToolgateServer`](super::ToolgateServer): its tools are
//! decided by the caller's gate before its router runs them, everything else passes through.
//!
//! The handler is held behind an object-safe mirror of [`ServerHandler`], so that the server stays one
//! type whatever the handler's is; each passed-through request costs one boxed future.

use std::any::TypeId;
use std::future::Future;
use std::pin::Pin;

#[allow(deprecated)]
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerConfig, SetLevelRequestParams, SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

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

/// The application's handler, as the server calls it.
pub(crate) trait DynHandler: Send + Sync + 'static {
    /// The handler's type: its tools gated in place are registered under it.
    fn owner(&self) -> TypeId;
    fn type_name(&self) -> &'static str;
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

impl<H: ServerHandler> DynHandler for H {
    fn owner(&self) -> TypeId {
        TypeId::of::<H>()
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<H>()
    }

    fn info(&self) -> ServerConfig {
        ServerHandler::get_info(self)
    }

    fn tool(&self, name: &str) -> Option<Tool> {
        ServerHandler::get_tool(self, name)
    }

    fn list_tools<'a>(
        &'a self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ListToolsResult, ErrorData>> {
        Box::pin(ServerHandler::list_tools(self, request, context))
    }

    fn call_tool<'a>(
        &'a self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<CallToolResponse, ErrorData>> {
        Box::pin(ServerHandler::call_tool(self, request, context))
    }

    fn complete<'a>(
        &'a self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<CompleteResult, ErrorData>> {
        Box::pin(ServerHandler::complete(self, request, context))
    }

    #[allow(deprecated)] // Passed through for clients of protocols that still have it.
    fn set_level<'a>(
        &'a self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<(), ErrorData>> {
        Box::pin(ServerHandler::set_level(self, request, context))
    }

    fn get_prompt<'a>(
        &'a self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<GetPromptResponse, ErrorData>> {
        Box::pin(ServerHandler::get_prompt(self, request, context))
    }

    fn list_prompts<'a>(
        &'a self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ListPromptsResult, ErrorData>> {
        Box::pin(ServerHandler::list_prompts(self, request, context))
    }

    fn list_resources<'a>(
        &'a self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ListResourcesResult, ErrorData>> {
        Box::pin(ServerHandler::list_resources(self, request, context))
    }

    fn list_resource_templates<'a>(
        &'a self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ListResourceTemplatesResult, ErrorData>> {
        Box::pin(ServerHandler::list_resource_templates(
            self, request, context,
        ))
    }

    fn read_resource<'a>(
        &'a self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Boxed<'a, Result<ReadResourceResponse, ErrorData>> {
        Box::pin(ServerHandler::read_resource(self, request, context))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        ServerHandler::accepted_subscription_filter(self, requested)
    }

    fn listen(&self, context: SubscriptionContext) -> Boxed<'_, Result<(), ErrorData>> {
        Box::pin(ServerHandler::listen(self, context))
    }

    fn on_initialized(&self, context: NotificationContext<RoleServer>) -> Boxed<'_, ()> {
        Box::pin(ServerHandler::on_initialized(self, context))
    }

    fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) -> Boxed<'_, ()> {
        Box::pin(ServerHandler::on_roots_list_changed(self, context))
    }
}
