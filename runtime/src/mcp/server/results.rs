//! Results and errors as MCP carries them: a call's result, a refusal as a tool result, and the
//! JSON-RPC errors of the server's own protocol.

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, ErrorCode, JsonObject};
use serde_json::{Value, json};

use crate::by_name::CallError;
use crate::gate::denied::Denied;
use crate::mcp::codes::McpCode;
use toolgate_policy::DenialCode;

/// The JSON-RPC error code of a refusal that reaches a client as an error rather than a tool result:
/// a tool of an rmcp handler gated in place, called through rmcp's router without this server
/// ([`From<Denied> for ErrorData`](crate::Denied)). Its data is `{"code", "message"}`.
pub const REFUSED: ErrorCode = ErrorCode(-32003);

/// A tool of an rmcp handler returns `Result<CallToolResult, ErrorData>`: a refusal becomes an error
/// with the code [`REFUSED`] and the data `{"code", "message"}`. Served by a
/// [`ToolgateServer`](super::ToolgateServer), the call never reaches the tool: the server answers
/// the refusal as a tool result (`isError: true`), as it answers every refusal.
impl From<Denied> for rmcp::ErrorData {
    fn from(denied: Denied) -> rmcp::ErrorData {
        let message = denied.to_string();
        let data = json!({ "code": denied.code().as_str(), "message": message });
        rmcp::ErrorData::new(REFUSED, format!("{}: {message}", denied.code()), Some(data))
    }
}

/// The JSON-RPC error of a resource read or prompt get that the caller's gate refused: the code
/// [`REFUSED`], the text `"<CODE>: <message>"` and `{"code", "message"}` as its data, as a tool of a
/// handler gated in place refuses when rmcp's router calls it.
pub(super) fn read_refused(code: McpCode, message: &str) -> ErrorData {
    ErrorData::new(
        REFUSED,
        format!("{code}: {message}"),
        Some(json!({ "code": code.as_str(), "message": message })),
    )
}

/// A refusal of the server's own, shaped as the gate's are: `isError`, `"<CODE>: <message>"`, and
/// `{"code", "message"}`.
pub(super) fn refusal(code: McpCode, message: &str) -> CallToolResult {
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

/// The refusal an error from a tool gated in place carries, made by `From<Denied>`.
pub(super) fn refusal_in(error: &ErrorData) -> Option<CallToolResult> {
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
pub(super) fn error_object(error: ErrorData) -> JsonObject {
    match serde_json::to_value(error) {
        Ok(Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

pub(super) fn unknown_task(id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("no task {id} of this caller"),
        Some(json!({ "code": McpCode::UnknownTask.as_str() })),
    )
}

/// The JSON-RPC error of a task that ended without its call's result: `-32001` (the request timed
/// out), the text `"<CODE>: <message>"`, and `{"code", "message"}` as its data.
pub(super) fn task_error(code: McpCode, message: &str) -> JsonObject {
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
