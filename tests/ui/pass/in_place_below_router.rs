// `#[toolgate::toolset]` below rmcp's `#[tool_router]` (rmcp's attribute expands first) gates the tools
// as it does above it; methods without rmcp's `#[tool]` need no declaration.
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};

#[derive(Clone)]
pub struct Ops;

#[tool_router]
#[toolgate::toolset(domain = "ops")]
impl Ops {
    /// Say how the services are.
    #[tool(name = "ops/status")]
    #[toolgate(risk = "READ_ONLY")]
    async fn status(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("ok")]))
    }

    pub fn new() -> Ops {
        Ops
    }
}

fn main() {
    let manifest = toolgate::registry().manifest("ops/status").expect("registered");
    assert_eq!(manifest.domain, Some("ops"));
    assert_eq!(manifest.risk_level, toolgate::Risk::ReadOnly);
    let _ = Ops::tool_router();
    let _ = Ops::new();
}
