//! Every route of a handler gated in place declares its risk. `#[toolgate::toolset]` refuses a
//! `#[tool]` without a declaration in its own impl; a second `#[tool_router(router = ..)]` impl of the
//! same type, or a route added by hand, no macro sees. So the server reads the handler's tool list
//! when the handler is given (a handler's list needs a request context: it is read with one that has
//! no client behind it) and refuses a handler whose router serves an undeclared tool, naming it; a
//! handler that lists by its caller is read again with the first request's context.

use std::future::Future;
use std::time::Duration;

use rmcp::model::{
    ClientJsonRpcMessage, PaginatedRequestParams, RequestId, ServerJsonRpcMessage, Tool,
};
use rmcp::service::{RequestContext, serve_directly};
use rmcp::transport::Transport;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use super::builder::ToolgateServer;
use crate::mcp::codes::McpCode;
use crate::mcp::handler::Undeclared;
use crate::registry::registry;

/// How long the handler's list may take when it is read at start-up; a handler that waits longer is
/// read with the first request's context instead.
const READ_AT_START: Duration = Duration::from_secs(2);

/// The first tool, in the handler's list, that the type `H` declares no risk for, read with a context
/// that has no client behind it: `Some(None)` where there is none, `None` where the list could not be
/// read that way (an error, a wait past [`READ_AT_START`]).
pub(super) fn first_undeclared<H: ServerHandler>(handler: &H) -> Option<Option<String>> {
    let owner = std::any::TypeId::of::<H>();
    if registry().in_place_of(owner).next().is_none() {
        return Some(None);
    }
    // The caller may be inside a runtime, or in none: the list is read on a thread of its own.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .ok()?;
                runtime.block_on(async {
                    let running = serve_directly(Unconnected, Silent, None);
                    let context = RequestContext::new(RequestId::Number(0), running.peer().clone());
                    let found = tokio::time::timeout(
                        READ_AT_START,
                        first_of(owner, |request| {
                            ServerHandler::list_tools(handler, request, context.clone())
                        }),
                    )
                    .await;
                    running.cancellation_token().cancel();
                    found.ok()?.ok()
                })
            })
            .join()
            .ok()
            .flatten()
    })
}

/// The first listed tool that `owner` declares no risk for, over every page `list` gives.
async fn first_of<F, L>(owner: std::any::TypeId, list: L) -> Result<Option<String>, ErrorData>
where
    L: Fn(Option<PaginatedRequestParams>) -> F,
    F: Future<Output = Result<rmcp::model::ListToolsResult, ErrorData>>,
{
    let mut request: Option<PaginatedRequestParams> = None;
    loop {
        let listed = list(request).await?;
        let undeclared = |tool: &&Tool| registry().in_place(owner, &tool.name).is_none();
        if let Some(tool) = listed.tools.iter().find(undeclared) {
            return Ok(Some(tool.name.to_string()));
        }
        match listed.next_cursor {
            Some(cursor) => {
                request = Some(PaginatedRequestParams::default().with_cursor(Some(cursor)));
            }
            None => return Ok(None),
        }
    }
}

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

/// Why a handler whose router serves the undeclared tool `tool` is not served.
pub(crate) fn unrouted_message(handler: &str, tool: &str) -> String {
    format!(
        "the router of {handler} serves tool `{tool}`, which declares no risk, beside tools \
         declared in place, so this server serves none: declare it with \
         #[toolgate(risk = \"...\")] beside its #[tool], in a #[toolgate::toolset] impl, or \
         serve it ungated on purpose with .undeclared(Undeclared::Serve) before .handler(..)"
    )
}

/// The service behind the start-up context: it is never asked anything.
struct Unconnected;

impl ServerHandler for Unconnected {}

/// A transport with no client: it is closed at once, so that a handler asking its client something
/// while it lists is answered with an error rather than kept waiting.
struct Silent;

impl Transport<RoleServer> for Silent {
    type Error = std::io::Error;

    fn send(
        &mut self,
        _: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        std::future::ready(Ok(()))
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        std::future::ready(None)
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}
