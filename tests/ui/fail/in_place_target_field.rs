// In place, `target` names a field of the typed arguments: one they lack is reported on the name.
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Instance {
    instance_id: String,
}

fn describe(id: &str) -> Result<String, String> {
    Ok(id.to_owned())
}

#[derive(Clone)]
pub struct Ops;

#[toolgate::toolset(domain = "ops")]
#[tool_router]
impl Ops {
    /// Terminate.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", irreversible, target = instance, evidence = describe)]
    async fn terminate(
        &self,
        Parameters(args): Parameters<Instance>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(args.instance_id)]))
    }
}

fn main() {}
