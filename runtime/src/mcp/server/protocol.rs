//! The server's rmcp [`ServerHandler`]: each MCP request to what answers it.

#[allow(deprecated)]
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, CustomRequest, CustomResult, GetPromptRequestParams, GetPromptResponse,
    GetTaskParams, GetTaskResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig, SetLevelRequestParams,
    SubscriptionFilter,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use super::builder::ToolgateServer;
use super::caller::Client;
use super::listing::{ReadSight, Sight, Watched, watch_mode};
use super::results::unknown_task;
use crate::mcp::codes::McpCode;
use crate::mcp::definition;
use crate::registry::registry;

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
        if request.method == crate::mcp::stdio::OVERSIZED_METHOD {
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
        // (its resources, its prompts, its own tool changes) it delivers on the same stream; the
        // gate's moves change what the lists of its resources and prompts show too.
        let accepted = context.accepted();
        let watched = Watched {
            tools: accepted.tools_list_changed == Some(true),
            resources: accepted.resources_list_changed == Some(true),
            prompts: accepted.prompts_list_changed == Some(true),
        };
        let gate = self.caller(&context.request_context().extensions).gate;
        // Updates of a resource tell when it changes: a subscription is decided as a read of each
        // resource it names, and one the caller's gate refuses is refused whole.
        for uri in accepted.resource_subscriptions.iter().flatten() {
            self.decide_subscription(&gate, uri)?;
        }
        let handler = self.handler.as_ref().filter(|h| {
            h.accepted_subscription_filter(context.requested())
                .is_some()
        });
        let sink = context.sink().clone();
        match (handler, watched.any()) {
            (Some(handler), true) => tokio::select! {
                listened = handler.listen(context) => listened,
                () = watch_mode(gate, sink, self.mode_poll, watched) => Ok(()),
            },
            (Some(handler), false) => handler.listen(context).await,
            (None, true) => {
                tokio::select! {
                    () = context.cancelled() => {}
                    () = watch_mode(gate, sink, self.mode_poll, watched) => {}
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
        // `mode_poll` and tells its client when its tool list changed, so that the client lists again;
        // and when the lists of the handler's resources and prompts may have, where the handler
        // announces their changes.
        let gate = self.caller(&context.extensions).gate;
        let capabilities = self.info().capabilities;
        let watched = Watched {
            tools: true,
            resources: self.handler.is_some()
                && capabilities
                    .resources
                    .is_some_and(|r| r.list_changed == Some(true)),
            prompts: self.handler.is_some()
                && capabilities
                    .prompts
                    .is_some_and(|p| p.list_changed == Some(true)),
        };
        let peer = context.peer;
        let every = self.mode_poll;
        tokio::spawn(async move {
            let mut seen = Sight::of(&gate);
            let mut reads = ReadSight::of(&gate);
            loop {
                tokio::time::sleep(every).await;
                if peer.is_transport_closed() {
                    break;
                }
                if seen.moved(&gate) && peer.notify_tool_list_changed().await.is_err() {
                    break;
                }
                if reads.moved(&gate) {
                    if watched.resources && peer.notify_resource_list_changed().await.is_err() {
                        break;
                    }
                    if watched.prompts && peer.notify_prompt_list_changed().await.is_err() {
                        break;
                    }
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
        self.complete_gated(request, context).await
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
        self.prompt_gated(request, context).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.prompts_for(request, context).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.resources_for(request, context).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.templates_for(request, context).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.read_gated(request, context).await
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        if let Some(handler) = &self.handler {
            handler.on_roots_list_changed(context).await;
        }
    }
}
