// What rmcp decides for its tools cannot be said in #[toolgate(..)]: the id (rmcp's name), `callable`
// (rmcp's router calls it) and `skip`; `escalate` reads the typed arguments, which `run` does not take.
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};
use toolgate::Risk;

#[derive(Clone)]
pub struct Ops;

fn classify() -> Risk {
    Risk::HighWrite
}

#[toolgate::toolset(domain = "ops")]
#[tool_router]
impl Ops {
    /// Restart.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", id = "ops.restart")]
    async fn restart(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("ok")]))
    }

    /// Stop.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", callable)]
    async fn stop(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("ok")]))
    }

    /// Run.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", escalate = classify)]
    async fn run(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("ok")]))
    }

    /// Look.
    #[tool]
    #[toolgate(skip)]
    async fn look(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("ok")]))
    }
}

fn main() {}
