//! Serving `callable` tools over the [Model Context Protocol](https://modelcontextprotocol.io), with
//! [`rmcp`] (feature `mcp`).
//!
//! [`ToolgateServer`] is an rmcp [`ServerHandler`](rmcp::ServerHandler) over the registry: every tool
//! declared `#[tool(..., callable)]` becomes an MCP tool named by its id, and every `tools/call` is
//! decided by the server's [`Gate`](crate::Gate), exactly as a direct call is.
//!
//! # A tool suite behind MCP
//!
//! With `rmcp`'s `transport-io` feature, serving the linked tools on stdin and stdout in the mode
//! `TOOLGATE_MODE` names takes a few lines:
//!
//! ```
//! # extern crate toolgate_runtime as toolgate;
//! use toolgate::mcp::rmcp::transport::IntoTransport;
//! use toolgate::mcp::rmcp::{RoleServer, ServiceExt};
//! use toolgate::mcp::{ToolgateServer, Visibility};
//!
//! // Call it as `serve(toolgate::mcp::stdio::stdio())` from `#[tokio::main]`.
//! async fn serve<T, E, A>(transport: T) -> Result<(), Box<dyn std::error::Error>>
//! where
//!     T: IntoTransport<RoleServer, E, A>,
//!     E: std::error::Error + Send + Sync + 'static,
//! {
//!     let gate = toolgate::Gate::from_env()?;
//!     let server = ToolgateServer::new(gate)
//!         .server_info("ticket-desk", "1.0.0")
//!         .visibility(Visibility::Hide);
//!     server.serve(transport).await?.waiting().await?;
//!     Ok(())
//! }
//! ```
//!
//! `examples/mcp_server.rs` in the repository is a complete stdio server. Stdout is the transport:
//! log to stderr.
//!
//! # Definitions
//!
//! A tool's definition ([`definition`]) has its id as `name`, its description, the JSON Schema of its
//! arguments (which admits no other key) as `inputSchema`, the schema of its result as `outputSchema`
//! where the result is an object, and annotations derived from its declared risk, every hint written
//! out ([`annotations`]):
//!
//! | risk | `readOnlyHint` | `destructiveHint` |
//! | --- | --- | --- |
//! | `READ_ONLY`, `PROPOSE_ONLY` | `true` | `false` |
//! | `LOW_WRITE` | `false` | `false` |
//! | `HIGH_WRITE` | `false` | `true` |
//!
//! `idempotentHint` and `openWorldHint` are the `idempotent` and `open_world` flags of `#[tool]`,
//! `false` when absent. Its `_meta` carries the policy's facts:
//! `{"dev.toolgate/risk_level": "HIGH_WRITE", "dev.toolgate/allowed_modes": ["FULL_AUTO"]}`.
//!
//! Annotations are hints to the client; the gate is what enforces.
//!
//! # What `tools/list` shows
//!
//! A tool that the gate would refuse in its current mode (its
//! [`verdict`](crate::Gate::verdict) is a refusal) is left out of `tools/list`, or, with
//! [`Visibility::MarkDisabled`], listed with `[DISABLED in SHADOW mode] ` leading its description. A
//! tool that needs an approval is listed: the approval is asked for when it is called. A gate with
//! neither an approver nor two-step approvals refuses every `HIGH_WRITE` call, so it lists none.
//!
//! Listing is advice, not enforcement: a client may call a tool it was not shown, and the gate decides
//! that call like any other (`isError: true`, with the gate's code).
//!
//! # Results
//!
//! A result that is a JSON object is sent as structured content, with its JSON text as text content;
//! other results as text. A refusal, invalid arguments (an unknown key such as `apiKey`, a missing or
//! mistyped one) and a failing tool are tool results with `isError: true`, so the model reads why:
//! the text is `"<CODE>: <message>"`, e.g. `"MODE_NOT_ALLOWED: tool `tickets.delete` (HIGH_WRITE) is
//! not allowed in mode SHADOW; it is allowed in FULL_AUTO"`, and the structured content
//! `{"code", "message"}`. Only a name that is no tool of the server is a JSON-RPC error (`-32602`).
//! Every code the server answers with is an [`McpCode`]: the gate's [`DenialCode`](crate::DenialCode)s,
//! and the few that only the server's protocol has (`UNKNOWN_TOOL`, `UNKNOWN_TASK`, `TOO_MANY_TASKS`,
//! ...).
//!
//! A sync tool runs on the thread that polls the call: keep sync tools quick, or make them `async`.
//!
//! # Approvals
//!
//! A call that needs an approval, under a gate with two-step approvals, is answered as
//! [`ToolgateServer::approvals`] says:
//!
//! - [`Approvals::OutOfBand`] (the default): refused (`APPROVAL_PENDING`), the pending request kept in
//!   the gate's approval store for an operator;
//!   [`ToolgateServer::on_pending`] hands each one (with its token, the principal and what tainted the
//!   session, if anything has) to the application's operator
//!   channel. The agent's next identical call runs once it is approved. For a client that declares
//!   the Tasks extension, the call becomes a task instead (`tasks/get`, `tasks/cancel`): the server
//!   tries the call again, 250 ms after and then at most every 5 s, and the task completes with its
//!   result once the operator has decided. A task waits for the one request the operator was handed:
//!   when it expires unanswered, or the task's deadline passes
//!   ([`ToolgateServer::task_deadline`], an hour by default), the task fails (`status: failed`, a
//!   JSON-RPC error `-32001` whose data's `code` is `APPROVAL_EXPIRED`), and the agent may call again
//!   to ask again. A caller (over HTTP a principal, elsewhere a connection) has at most
//!   [`ToolgateServer::max_tasks`] tasks waiting ([`DEFAULT_MAX_TASKS`], 16); past it a call is
//!   refused `TOO_MANY_TASKS`. An ended task can be read for 10 minutes (its `ttlMs` says until when;
//!   the 64 latest of a caller).
//! - [`Approvals::InBand`]: an `InputRequired` result (protocol 2026-07-28) whose elicitation form
//!   ([`APPROVAL_INPUT`]) shows the tool, its risk, the mode, the principal, whether the session is
//!   tainted and by which tool (a warning first, [`Gate::taint`](crate::Gate::taint)) and the
//!   arguments as the audit log writes them, every invisible or reordering character (bidi controls,
//!   zero-width characters, tags, ...) written as `\u{XXXX}`, asking approve or reject and a reason. The retry carries the answer and the request state,
//!   sealed with rmcp's HMAC `RequestStateCodec`, bound to the connection (over HTTP, the principal)
//!   and carrying the tool, the arguments' SHA-256 and the pending request's token. The server answers
//!   the gate's request with it ([`Gate::answer`](crate::Gate::answer), by `mcp-client`) and has the
//!   gate decide the retry, which binds the approval to the exact call: it runs once, and a rejection's
//!   reason is the tool result. A retry with other arguments is `APPROVAL_MISMATCH`, a replay
//!   `APPROVAL_REUSED`, a forged state `APPROVAL_STATE_INVALID`, a late one `APPROVAL_EXPIRED`, each a
//!   refusal the log records; the body does not run. A call of a tool declared `out_of_band` or
//!   `irreversible`, or one the operator's policy file keeps for an operator (`out_of_band`,
//!   `out_of_band_at`, at the call's effective risk), gets no form and waits for an operator, and a
//!   state sent with it is `APPROVAL_STATE_INVALID`. In band trusts the client's user interface:
//!   whoever controls the client approves. The answer reaches the store on the call's thread (for the
//!   PostgreSQL store, a wait of at most its timeout).
//!
//! # The tool list follows the mode
//!
//! The server advertises `tools.listChanged`. Each connection (`on_initialized`), and each
//! `subscriptions/listen` stream of a 2026-07-28 client, reads the caller's gate's mode every
//! [`DEFAULT_MODE_POLL`] ([`ToolgateServer::mode_poll`]) and sends `notifications/tools/list_changed`
//! when it moved: the gate has no change subscription, so the polling period is the latency.
//!
//! # Cancellation and limits
//!
//! A client's `notifications/cancelled` drops the call's future: an async tool stops at its next
//! `.await`, and the gate's permit writes the `exit` record with outcome `cancelled`. [`stdio::stdio`]
//! answers a message over its size limit with an `Invalid Request` error where rmcp's own stdio
//! transport drops it without an answer.
//!
//! # Over HTTP
//!
//! With the feature `mcp-http`, [`http::HttpService`] serves the server over rmcp's streamable HTTP
//! transport to the principals its bearer tokens name ([`http::Principals`]), each deciding and
//! listing through its own gate. With the feature `mcp-oauth`, `oauth::OAuth` makes it an
//! OAuth 2.1 resource server: JWT access tokens verified against the authorization server's JWKS, their
//! claims mapped to principals, and RFC 9728 metadata served.
//!
//! # An rmcp server, gated in place
//!
//! An rmcp `#[tool_router]` impl with `#[toolgate::toolset]` above it and `#[toolgate(risk = ..)]`
//! beside each rmcp `#[tool]` keeps its methods as they are; [`ToolgateServer::handler`] serves the
//! handler, each `tools/call` of a declared name running the method it was declared on (never another
//! route of that name), decided by the method's own check with the call's JSON arguments in the
//! caller's gate. A router that serves a declared name with another tool is refused when the server
//! is built ([`RouteMismatch`]); one that serves a tool with no declaration beside declared ones is
//! served no tool. Each `resources/read` and `prompts/get` of the handler is decided by the caller's
//! gate before the handler reads it, at the risk the server declares
//! ([`ToolgateServer::resource_risk`], [`ToolgateServer::prompt_risk`]) and as the operator's policy
//! denies or records it, and the lists (and completions) follow what the gate allows; a tool of the
//! handler that declares no risk is refused
//! ([`Undeclared`]). A refusal of a direct call of such a method is an [`ErrorData`](rmcp::ErrorData)
//! of code [`REFUSED`]. The README's "An rmcp server, gated in place" walks through one.

mod approvals;
mod codes;
mod definition;
pub(crate) mod handler;
#[cfg(feature = "mcp-http")]
pub mod http;
#[cfg(feature = "mcp-oauth")]
pub mod oauth;
#[cfg(feature = "mcp-http")]
mod principal;
mod server;
pub mod stdio;
mod tasks;

/// The `rmcp` crate this module is built on, for naming its types with the version toolgate uses.
pub use rmcp;

pub use approvals::{APPROVAL_INPUT, Approvals, DEFAULT_STATE_TTL, InBand, KeyTooShort};
pub use codes::McpCode;
pub use definition::{
    META_ALLOWED_MODES, META_EVIDENCE, META_IRREVERSIBLE, META_RISK_LEVEL, META_ROLLBACK,
    META_TARGET, Visibility, annotations, definition, disabled_prefix, listed, meta,
};
pub use handler::{RouteMismatch, Undeclared};
pub use server::{
    DEFAULT_MODE_POLL, PendingApproval, REFUSED, ToolgateServer, tool_result, unknown_tool,
};
pub use tasks::{DEFAULT_MAX_TASKS, DEFAULT_TASK_DEADLINE};
