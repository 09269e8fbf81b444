// In place, `target`, `escalate` and `rollback` read the `T` of `Parameters<T>` as a whole: a pattern
// that takes it apart leaves nothing to hand them.
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};
use toolgate::Risk;

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Command {
    line: String,
}

fn classify(_: &Command) -> Risk {
    Risk::HighWrite
}

#[derive(Clone)]
pub struct Ops;

#[toolgate::toolset(domain = "ops")]
#[tool_router]
impl Ops {
    /// Run.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", escalate = classify, target = line)]
    async fn run(
        &self,
        Parameters(Command { line }): Parameters<Command>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(line)]))
    }
}

fn main() {}
