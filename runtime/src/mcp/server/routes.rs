//! Every route of a handler gated in place declares its risk: a handler whose list could not be read
//! as it was given ([`first_undeclared`](crate::mcp::handler::first_undeclared)) is read with the first
//! request's context.

use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::json;

use super::builder::ToolgateServer;
use crate::mcp::codes::McpCode;
use crate::mcp::handler::{Undeclared, first_of, unrouted_message};

impl ToolgateServer {
    /// Refuses to serve a handler whose type declares tools in place and whose router also serves a
    /// tool with no declaration, unless the application serves such tools on purpose
    /// ([`Undeclared::Serve`]). Where its list could not be read when it was given, it is read with
    /// the first request's context, and from then on every `tools/list` and `tools/call` is answered
    /// with the error that names the tool.
    pub(super) async fn check_routes(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let Some(handler) = &self.handler else {
            return Ok(());
        };
        if self.undeclared == Undeclared::Serve || !handler.declares() {
            return Ok(());
        }
        let unrouted = match self.unrouted.get() {
            Some(unrouted) => unrouted.clone(),
            None => {
                let owner = handler.owner();
                let found = first_of(owner, |request| {
                    handler.list_tools(request, context.clone())
                })
                .await?;
                self.unrouted.get_or_init(|| found).clone()
            }
        };
        match unrouted {
            None => Ok(()),
            Some(name) => Err(ErrorData::internal_error(
                unrouted_message(handler.type_name(), &name),
                Some(json!({ "code": McpCode::UndeclaredTool.as_str(), "tool": name })),
            )),
        }
    }
}
