// An rmcp tool in a #[toolgate::toolset] impl that declares no risk: refused on rmcp's `tool`, and
// rmcp's attribute is left for rmcp, so this is the only error.
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};

#[derive(Clone)]
pub struct Ops;

#[toolgate::toolset(domain = "ops")]
#[tool_router]
impl Ops {
    /// Wipe the disk.
    #[tool]
    async fn wipe(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("wiped")]))
    }

    #[tool(name = "format_disk", description = "Format the disk.")]
    async fn format(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("formatted")]))
    }

    /// Not a tool: rmcp's router cannot reach it, so it needs no declaration.
    pub fn new() -> Ops {
        Ops
    }
}

fn main() {}
