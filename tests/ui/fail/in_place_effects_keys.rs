// What reads a tool's typed arguments cannot be said in #[toolgate(..)]: rmcp's extractors hold them.
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};
use toolgate::Rollback;

#[derive(Clone)]
pub struct Ops;

fn describe() -> Result<String, String> {
    Ok(String::new())
}

fn plan() -> Rollback {
    Rollback::steps("restore it")
}

#[toolgate::toolset(domain = "ops")]
#[tool_router]
impl Ops {
    /// Terminate.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", irreversible, target = id, evidence = describe, rollback = plan)]
    async fn terminate(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("ok")]))
    }
}

fn main() {}
