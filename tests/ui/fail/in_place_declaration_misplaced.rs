// #[toolgate(..)] needs rmcp's #[tool] beside it, once; a toolgate #[tool(risk = ..)] beside it
// declares the function twice; without a risk it says which attribute lacks it.
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};

#[derive(Clone)]
pub struct Ops;

#[toolgate::toolset(domain = "ops")]
#[tool_router]
impl Ops {
    /// Status.
    #[tool]
    async fn status(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("ok")]))
    }
}

#[toolgate::toolset(domain = "more")]
impl Ops {
    /// No rmcp tool here.
    #[toolgate(risk = "READ_ONLY")]
    pub fn helper(&self) -> Result<(), toolgate::Denied> {
        Ok(())
    }

    /// Twice.
    #[toolgate::tool(risk = "READ_ONLY")]
    #[toolgate(risk = "READ_ONLY")]
    pub fn twice(&self) -> Result<(), toolgate::Denied> {
        Ok(())
    }

    /// No risk.
    #[rmcp::tool]
    #[toolgate(side_effects)]
    pub fn riskless(&self) -> Result<(), toolgate::Denied> {
        Ok(())
    }

    /// A name MCP does not allow.
    #[rmcp::tool(name = "bad name!")]
    #[toolgate(risk = "READ_ONLY")]
    pub fn badly_named(&self) -> Result<(), toolgate::Denied> {
        Ok(())
    }
}

fn main() {}
