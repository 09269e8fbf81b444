//! A call run through its gate: a `callable` tool through the registry, a tool of the handler as
//! its declared method.

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::builder::ToolgateServer;
use super::results::{refusal_in, tool_result, unknown_tool};
use crate::by_name::CallError;
use crate::gate::Gate;
use crate::gate::decide as deciding;
use crate::gate::denied::Denied;
use crate::registry::{Tool, ToolEntry, registry};

impl ToolgateServer {
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
    pub(super) fn target(&self, name: &str) -> Option<Target> {
        if let Some(handler) = &self.handler
            && let Some(entry) = registry().in_place(handler.owner(), name)
        {
            return Some(Target::InPlace(entry));
        }
        self.served(name).map(Target::Registry)
    }

    /// Runs the call through its gate: a `callable` tool through the registry, a tool of the handler
    /// as its declared method, whose own check decides it with the call's arguments.
    /// `caller`: the principal the transport authenticated, where it names one.
    pub(super) async fn dispatch(
        &self,
        gate: &Gate,
        caller: Option<std::sync::Arc<str>>,
        target: Target,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<Ran, ErrorData> {
        let call = self.dispatch_for(gate, target, request, context);
        match caller {
            Some(caller) => crate::gate::caller::acting_for(caller, call).await,
            None => call.await,
        }
    }

    async fn dispatch_for(
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
                let label = self.in_place_label(&context);
                let call = handler.call_declared(request, context);
                let (call, outcome) = deciding::with_arguments(entry, arguments, label, call);
                let response = gate.scope(call).await;
                let refused = outcome
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                Ok(Ran::InPlace(match refused {
                    Some(denied) => Err(denied),
                    None => Ok(invalid_in_place(gate, entry, response)),
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

    /// The handler instance a call in place runs on, as its `self`, to which an approval is bound:
    /// the handler's label, and for a handler a factory made for a session, that session (a
    /// digest of its id), since the session's handler may hold state another session's does not. A
    /// request of the stateless protocol gets a handler of its own that lives no longer than it, and
    /// the label alone.
    pub(super) fn in_place_label(&self, context: &RequestContext<RoleServer>) -> String {
        if self.factory.is_none() {
            return self.handler_label.to_string();
        }
        #[cfg(feature = "mcp-http")]
        if let Some(parts) = context.extensions.get::<http::request::Parts>() {
            return match parts.headers.get("mcp-session-id") {
                Some(id) => self.session_label(id.as_bytes()),
                None => self.handler_label.to_string(),
            };
        }
        let _ = context;
        self.session_label(self.connection_id().as_bytes())
    }

    fn session_label(&self, session: &[u8]) -> String {
        let digest = crate::canonical::sha256_hex(session);
        format!("{} (session {})", self.handler_label, &digest[..12])
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

/// rmcp's answer to arguments that its `Parameters<T>` could not read (the method, and so the tool's
/// check, never ran), answered and recorded as a `callable` tool's invalid arguments are: `INVALID_PARAMS`
/// with its code, serde's text only where the tool redacts nothing, since it may quote a value.
fn invalid_in_place(
    gate: &Gate,
    entry: &'static ToolEntry,
    response: Result<CallToolResponse, ErrorData>,
) -> Result<CallToolResponse, ErrorData> {
    const PREFIX: &str = "failed to deserialize parameters:";
    let said = match &response {
        Ok(CallToolResponse::Complete(result))
            if result.is_error == Some(true) && result.structured_content.is_none() =>
        {
            match result.content.as_slice() {
                [only] => only.as_text().map(|t| t.text.as_str()),
                _ => None,
            }
        }
        _ => None,
    };
    let Some(why) = said.and_then(|text| text.strip_prefix(PREFIX)) else {
        return response;
    };
    let message = if entry.behaviour.redact.is_empty() {
        format!(
            "the arguments do not match the tool's parameters: {}",
            crate::terminal::escaped(why.trim())
        )
    } else {
        "the arguments do not match the tool's parameters".to_owned()
    };
    let error = CallError::InvalidParams {
        path: ".".to_owned(),
        message,
    };
    crate::by_name::record_stopped(gate, entry, &error);
    Ok(tool_result(Err(error)).into())
}

/// What serves a name: a `callable` tool of the registry, or a tool of the handler declared in place.
#[derive(Clone, Copy)]
pub(super) enum Target {
    Registry(Tool),
    InPlace(&'static ToolEntry),
}

impl Target {
    pub(super) fn tool(self) -> Tool {
        match self {
            Target::Registry(tool) => tool,
            Target::InPlace(entry) => Tool { entry },
        }
    }
}

/// What a `tools/call` ran as.
pub(super) enum Ran {
    /// A `callable` tool, through [`Registry::call_with`](crate::Registry::call_with).
    Registry(Result<Value, CallError>),
    /// A tool of the handler: refused before its router ran, or the router's response.
    InPlace(Result<Result<CallToolResponse, ErrorData>, Denied>),
}

impl Ran {
    pub(super) fn denied(&self) -> Option<&Denied> {
        match self {
            Ran::Registry(Err(error)) => error.denied(),
            Ran::InPlace(Err(denied)) => Some(denied),
            _ => None,
        }
    }

    pub(super) fn into_response(self) -> Result<CallToolResponse, ErrorData> {
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
