// The keys that read a tool's typed arguments read, in place, the `T` of its `Parameters<T>`: a method
// without one cannot declare them.
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};
use toolgate::Rollback;

#[derive(Clone)]
pub struct Ops;

fn describe(_: &str) -> Result<String, String> {
    Ok(String::new())
}

fn plan(_: &()) -> Rollback {
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
