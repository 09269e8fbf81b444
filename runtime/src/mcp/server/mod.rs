//! The rmcp server handler over the registry, and the translation of calls and their results: the
//! server and its settings (`builder`), what the operator channel is handed (`pending`), who
//! makes a request (`caller`), what `tools/list` shows and when it changed (`listing`), one
//! `tools/call` and its approval (`respond`), a call that waits for an operator as a task
//! (`as_task`), a call run through its gate (`dispatch`), the handler's resources and prompts
//! behind the caller's gate (`reads`), the application's handler behind the server (`delegate`), the
//! routes its router serves (`routes`), results and errors as MCP carries them (`results`), and the rmcp
//! `ServerHandler` that routes each request (`protocol`).

mod as_task;
mod builder;
mod caller;
mod delegate;
mod dispatch;
mod listing;
mod pending;
mod protocol;
mod reads;
mod respond;
mod results;
mod routes;

pub use builder::{DEFAULT_MODE_POLL, ToolgateServer};
pub use pending::PendingApproval;
pub use results::{REFUSED, tool_result, unknown_tool};
