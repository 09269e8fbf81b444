//! The application's rmcp handler behind the server: what the server says it is, the capabilities
//! it passes through and the tools it declares no risk for.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorCode, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use super::builder::ToolgateServer;
use super::results::{refusal, unknown_tool};
use crate::gate::Gate;
use crate::mcp::codes::McpCode;
use crate::mcp::handler::{DynHandler, Undeclared};
use toolgate_policy::DenialCode;

impl ToolgateServer {
    /// What the server says it is: the handler's capabilities (its prompts, resources, logging,
    /// completions) with tools, their list changes and tasks; the handler's name and instructions
    /// unless the server was given its own.
    pub(super) fn info(&self) -> ServerConfig {
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
    pub(super) fn offering(
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

    /// A call of a name that no declaration of this server's serves: a tool of the handler that
    /// declares no risk is refused (or, where the application says so, served as it is); any other
    /// name is unknown.
    pub(super) async fn undeclared_call(
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

    /// Whether the handler lists the tool `name`, for a handler that does not say so by name.
    pub(super) async fn handler_lists(
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
}
