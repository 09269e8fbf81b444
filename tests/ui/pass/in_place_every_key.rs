// Every key of #[tool] in place: the typed arguments bound either way, `target` a field of them.
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};
use toolgate::{Risk, Rollback};

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Instance {
    /// The instance.
    instance_id: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Command {
    /// The command line.
    line: String,
}

fn describe(id: &str) -> Result<String, String> {
    Ok(id.to_owned())
}

fn relaunch(args: &Instance) -> Rollback {
    Rollback::steps(format!("launch {} again", args.instance_id))
}

fn classify(command: &Command) -> Risk {
    if command.line.starts_with("sudo") {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

#[derive(Clone)]
pub struct Ops;

#[toolgate::toolset(domain = "ops")]
#[tool_router]
impl Ops {
    /// Terminate.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", irreversible, target = instance_id, evidence = describe,
               rollback = relaunch)]
    async fn terminate(
        &self,
        Parameters(mut args): Parameters<Instance>,
    ) -> Result<CallToolResult, ErrorData> {
        args.instance_id.push('!');
        Ok(CallToolResult::success(vec![ContentBlock::text(args.instance_id)]))
    }

    /// Run.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", escalate = classify)]
    async fn run(&self, command: Parameters<Command>) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(command.0.line)]))
    }
}

fn main() {
    let _ = Ops::tool_router();
}
