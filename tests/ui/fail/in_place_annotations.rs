// In place, a tool's annotations are rmcp's own `#[tool(annotations(..))]`.
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};

#[derive(Clone)]
pub struct Ops;

#[toolgate::toolset(domain = "ops")]
#[tool_router]
impl Ops {
    /// Restart.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", annotations(title = "Restart"))]
    async fn restart(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("ok")]))
    }
}

fn main() {}
