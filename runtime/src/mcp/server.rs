//! The rmcp server handler over the registry, and the translation of calls and their results.

use std::fmt;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::definition::{self, Visibility};
use crate::by_name::{CallError, Instances};
use crate::gate::Gate;
use crate::registry::ToolManifest;
use crate::registry::{Tool, manifests, registry};

type Filter = Arc<dyn Fn(&ToolManifest) -> bool + Send + Sync>;

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
}

impl fmt::Debug for ToolgateServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolgateServer")
            .field("mode", &self.gate.mode())
            .field("instances", &self.instances)
            .field("visibility", &self.visibility)
            .field("filtered", &self.filter.is_some())
            .field("implementation", &self.implementation.name)
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
        manifests()
            .filter_map(|manifest| self.served(manifest.id))
            .filter_map(|tool| definition::listed(&self.gate, tool, self.visibility))
            .collect()
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
        if !self.serves(name) {
            crate::by_name::record_unknown(&self.gate, name);
            return Err(unknown_tool(name));
        }
        let arguments = Value::Object(arguments.unwrap_or_default());
        match registry()
            .call_with(&self.gate, &self.instances, name, arguments)
            .await
        {
            Err(
                CallError::UnknownTool { .. }
                | CallError::NotCallable { .. }
                | CallError::NoInstance { .. },
            ) => Err(unknown_tool(name)),
            result => Ok(tool_result(result)),
        }
    }
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
        let config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(self.implementation.clone());
        match &self.instructions {
            Some(instructions) => config.with_instructions(instructions.clone()),
            None => config,
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(&request.name, request.arguments)
            .await
            .map(CallToolResponse::from)
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.tool(name)
    }
}
