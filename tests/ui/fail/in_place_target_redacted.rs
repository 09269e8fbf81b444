// In place, `target` and `redact` name fields of the typed arguments; the target is what an approver
// sees and types back, so it cannot be redacted.
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Instance {
    instance_id: String,
}

#[derive(Clone)]
pub struct Ops;

#[toolgate::toolset(domain = "ops")]
#[tool_router]
impl Ops {
    /// Stop.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", target = instance_id, redact = [instance_id])]
    async fn stop(&self, Parameters(args): Parameters<Instance>) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(args.instance_id)]))
    }
}

fn main() {}
