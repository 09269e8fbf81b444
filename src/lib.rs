//! Safe-by-construction tools for AI agents.
//!
//! An agent calls tools; some only read, some delete, send or pay. toolgate makes every tool declare its
//! risk, turns a missing or contradictory declaration into a compile error, and decides every call against
//! the agent's mode **before the tool's body runs**, on every path into it. When in doubt it refuses.
//!
//! ```
//! use toolgate::{Denied, Gate, Mode, tool};
//!
//! #[derive(Debug)]
//! enum AppError {
//!     Refused(Denied),
//! }
//!
//! impl From<Denied> for AppError {
//!     fn from(denied: Denied) -> Self {
//!         AppError::Refused(denied)
//!     }
//! }
//!
//! /// Look a user up.
//! #[tool(risk = "READ_ONLY", domain = "users")]
//! fn get_user(id: u64) -> Result<String, AppError> {
//!     Ok(format!("user {id}"))
//! }
//!
//! /// Delete a user account.
//! #[tool(risk = "HIGH_WRITE", side_effects, modes = [FULL_AUTO], domain = "users")]
//! fn delete_user(id: u64) -> Result<(), AppError> {
//!     unreachable!("not in this example: {id}")
//! }
//!
//! let gate = Gate::new(Mode::PartialAuto)?;
//! gate.run(|| {
//!     assert_eq!(get_user(7).unwrap(), "user 7");
//!     let AppError::Refused(denied) = delete_user(7).unwrap_err();
//!     assert_eq!(denied.code(), "MODE_NOT_ALLOWED");
//!     assert_eq!(
//!         denied.to_string(),
//!         "tool `users.delete_user` (HIGH_WRITE) is not allowed in mode PARTIAL_AUTO; \
//!          it is allowed in FULL_AUTO"
//!     );
//! });
//!
//! // Outside any gate, nothing runs.
//! assert_eq!(get_user(7).map_err(|AppError::Refused(d)| d.code()).unwrap_err(), "NO_GATE");
//! # Ok::<(), toolgate::GateError>(())
//! ```
//!
//! # Risk, modes and the policy
//!
//! Risk levels are ordered `READ_ONLY < PROPOSE_ONLY < LOW_WRITE < HIGH_WRITE`, modes
//! `SHADOW < ADVISORY < PARTIAL_AUTO < FULL_AUTO`. Each mode has a ceiling, the highest risk it runs:
//!
//! | mode | ceiling |
//! | --- | --- |
//! | `SHADOW`, `ADVISORY` | `PROPOSE_ONLY` |
//! | `PARTIAL_AUTO` | `LOW_WRITE` |
//! | `FULL_AUTO` | `HIGH_WRITE`, each call with an approval |
//!
//! A call is decided in this order, and the first refusal wins ([`policy::decide`]):
//!
//! 1. the gate's **deny list** (`DENY_LISTED`), in every mode; no approval lifts it;
//! 2. the tool's **allowed modes** (`MODE_NOT_ALLOWED`);
//! 3. the mode's **ceiling** (`ABOVE_CEILING`);
//! 4. the **taint latch**: once a tool declared `untrusted_output` has run in the gate's session, a call
//!    that writes needs an approval, or is refused `TAINTED_SESSION`
//!    ([`GateBuilder::taint_policy`], [`policy::decide_tainted`]);
//! 5. an **approval** where the risk (or the latch) needs one: a live session grant, else the gate's approver (sync
//!    [`Approver`] or async), else the two-step store (`APPROVAL_REQUIRED` with nothing to ask,
//!    `APPROVAL_PENDING` with the token of the request the store filed for an operator,
//!    `APPROVAL_REJECTED` when it says no or panics, `APPROVAL_STORE_UNAVAILABLE` when the store fails);
//! 6. then the body runs.
//!
//! A call with no gate at all is refused with `NO_GATE`. Every refusal is a [`Denied`], with a stable
//! [`code`](Denied::code) and a message that names the tool, its risk, the mode and what would be needed.
//!
//! # `#[tool]`
//!
//! ```text
//! #[tool(
//!     risk = "READ_ONLY" | "PROPOSE_ONLY" | "LOW_WRITE" | "HIGH_WRITE",   // required
//!     side_effects,                      // or side_effects = true / false
//!     modes = [SHADOW, ADVISORY, PARTIAL_AUTO, FULL_AUTO],
//!     id = "users.delete",
//!     domain = "users",
//!     idempotent,                        // MCP idempotentHint
//!     open_world,                        // MCP openWorldHint
//!     description = "...",
//!     callable,                          // callable by name with JSON, and over MCP
//!     escalate = path::to::classify,     // fn(&arg1, &arg2, ..) -> Risk: raises the risk per call
//!     redact = [password],               // kept out of records, approvers and errors
//!     record_arguments,                  // the (redacted) arguments go into audit records
//! )]
//! #[tool(skip)]                          // in a #[toolset]: a public function that is not a tool
//! ```
//!
//! The [`tool`] attribute's own documentation has the whole grammar and the `escalate` signature.
//!
//! - `risk` is required. `side_effects` is implied for `LOW_WRITE` and `HIGH_WRITE` and contradicts
//!   `READ_ONLY` and `PROPOSE_ONLY`. `modes` defaults to every mode whose ceiling admits the risk, and may
//!   only narrow that: a mode whose ceiling is below the risk is a compile error. `id` defaults to
//!   `<domain>.<fn name>`, or the function's name without a domain; ids and domains are lowercase dotted
//!   segments of `[a-z][a-z0-9_]*`, ids at most 64 characters. `description` defaults to the doc comment.
//! - It applies to sync and async functions, with generics, lifetimes, `impl Trait` arguments and any
//!   visibility; other attributes stay in place, and a tool removed by `#[cfg]` is not registered.
//! - The function returns `Result<T, E>` (any path ending in `Result`, such as `anyhow::Result<T>` or
//!   `std::io::Result<T>`) where `E: From<Denied>`: a refused call returns `Err(E::from(denied))`.
//!   `Box<dyn Error + Send + Sync>`, `anyhow::Error` and `std::io::Error` work as they are.
//! - The gate that decides a call is a parameter of type `&Gate`, if the tool has one, and every ambient
//!   gate: the ones entered with [`Gate::run`] around a sync call or [`Gate::scope`] around a future.
//!   Gates nest by intersection: an inner gate never allows what an outer one refuses.
//!
//! # `#[toolset]`
//!
//! On an `impl` block or an inline `mod`, `#[toolset(domain = "users")]` gives its tools a domain and
//! refuses to compile while any public function in it lacks a declaration: each must carry
//! `#[tool(...)]`, or `#[tool(skip)]` if it is not a tool. Methods (`&self`, `&mut self`) are tools only
//! inside a `#[toolset]` impl. Inside it, write the attribute as `#[tool]` or `#[toolgate::tool]`.
//!
//! ```
//! use toolgate::{Denied, Gate, Mode, tool, toolset};
//!
//! struct Users;
//!
//! #[toolset(domain = "users")]
//! impl Users {
//!     /// Count the users.
//!     #[tool(risk = "READ_ONLY")]
//!     pub fn count(&self) -> Result<usize, Denied> {
//!         Ok(3)
//!     }
//!
//!     #[tool(skip)]
//!     pub fn cache_size(&self) -> usize {
//!         0
//!     }
//! }
//!
//! let gate = Gate::new(Mode::Shadow)?;
//! assert_eq!(gate.run(|| Users.count())?, 3);
//! assert_eq!(toolgate::registry().manifest("users.count").unwrap().description, "Count the users.");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Manifests and the registry
//!
//! Each `#[tool]` registers its [`ToolManifest`] at link time. [`manifests()`] lists every linked tool,
//! sorted by id; a [`ToolManifest`] serializes to JSON with the keys `id`, `domain`, `description`,
//! `risk_level`, `side_effects`, `allowed_modes`, `idempotent`, `open_world` and `source`.
//!
//! Two tools with the same id make [`Gate::new`] fail with both locations; put
//! `toolgate::check_registry().unwrap();` in a test to catch it earlier.
//!
//! The linker keeps only what the binary references: a crate of tools that is never used by the binary is
//! not linked, and its tools are absent from the registry (and so uncallable, never ungated). Reference it
//! (`use my_tools as _;`) to bring its tools in.
//!
//! # The gate
//!
//! [`Gate::new`] or [`Gate::builder`] builds a gate once, with the mode, a deny list and an approver, and
//! works out then what each tool may do in each mode; a call reads one precomputed verdict, with no
//! allocation, hashing or locking. [`Gate::lower`] is the kill switch: it lowers the mode of the gate and
//! of all its clones, on every thread at once, and no call can raise it again; a call whose decision
//! completes after `lower` returns (every gate is checked once more just before the body) never runs at
//! the old mode. [`Mode::from_env`] reads
//! `TOOLGATE_MODE`: unset means `SHADOW`, an invalid value is an error.

//! # Call by name, audit, approvals
//!
//! A tool declared `callable` can be called with JSON: [`registry()`]`.call(&gate, id, arguments)`, through
//! the same gate. [`GateBuilder::audit`] records every decision ([`audit`]); [`GateBuilder::approver`]
//! and [`GateBuilder::two_step_approvals`] decide the calls that need an approval; `escalate = path`
//! raises a call's risk from its arguments. [`report`] and [`lockfile`] make the manifests reviewable.
//! [`provider`] renders the tools' definitions for model APIs (OpenAI, Anthropic, Gemini), `rig` hands
//! them to a rig agent (feature `rig`), and [`audit::TracingSink`] traces each call as an OpenTelemetry
//! GenAI `execute_tool` span. The README walks through each.
//!
//! # Feature flags
//!
//! | feature | what it adds |
//! | --- | --- |
//! | `clap` | `Mode`, `Risk` and `report::Format` as `clap::ValueEnum`, and the `--list-tools` flag (`cli`) |
//! | `checkpoints` | signed checkpoints of the audit log: `audit::Checkpoints` for `JsonlSinkBuilder::checkpoints`, `audit::verify_signed_file`, Ed25519 keys from PEM files ([ed25519-dalek](https://crates.io/crates/ed25519-dalek)) |
//! | `cli` | the `toolgate` command: `toolgate audit verify FILE [--public-key PUB]`, `toolgate audit promotion FILE`, `toolgate audit keygen --out KEY`; enables `checkpoints` |
//! | `mcp` | `mcp`: an [rmcp](https://crates.io/crates/rmcp) server handler over the registry |
//! | `mcp-http` | `mcp::http`: the MCP server over rmcp's streamable HTTP transport, each bearer token mapped to a principal and its gate |
//! | `mcp-oauth` | `mcp::oauth`: the HTTP server as an OAuth 2.1 resource server (MCP's authorization): JWT access tokens verified against a JWKS ([jsonwebtoken](https://crates.io/crates/jsonwebtoken)), their claims mapped to principals, RFC 9728 metadata served |
//! | `postgres` | `postgres`, on PostgreSQL ([tokio-postgres](https://crates.io/crates/tokio-postgres)): an approval store shared by processes, one audit trail for every process (`PostgresSink`, signed checkpoints), fleets (`Fleet`: one kill switch for every process); with `cli`, `toolgate approvals`, `toolgate fleet`, `toolgate audit verify postgres://…` |
//! | `rig` | `rig`: callable tools as [rig](https://crates.io/crates/rig-core) tools (rig-core 0.44), every call through the gate |
//!
//! Nothing is on by default: the attribute, the gate, call by name, the audit log, the reports, tool
//! definitions for model APIs ([`provider`]) and the tracing sink's OpenTelemetry spans need no feature.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[doc(hidden)]
pub use toolgate_macros::__toolset_member;
pub use toolgate_macros::{tool, toolset};

// What users write every day; the rest lives in the modules below.
pub use toolgate_runtime::{
    AllowAllApprover, Approval, ApprovalRequest, Approver, CallError, DenialCode, Denied, Gate,
    GateBuilder, GateError, Mode, Risk, ToolManifest, check_registry, manifests, registry,
};

/// The JSON Schema generator of callable tools' arguments: derive `schemars::JsonSchema` on argument
/// types with `#[schemars(crate = "toolgate::schemars")]`.
pub use toolgate_runtime::__private::schemars;
/// The serialization framework of callable tools' arguments, for deriving on argument types.
pub use toolgate_runtime::__private::serde;

/// The policy: risk levels, modes, refusal codes and the table between them (the `toolgate-policy` crate).
pub use toolgate_runtime::policy;

/// The gate: building one, entering it around calls, lowering its mode, its budgets, and its refusals.
pub mod gate {
    pub use toolgate_runtime::{
        BudgetScope, Denied, DenyRuleError, Gate, GateBuilder, GateError, RaiseRefused, Scoped,
        Taint, TaintPolicy, budget,
    };
}

/// Approvals: the [`Approver`] (or [`AsyncApprover`](approval::AsyncApprover)) a gate asks, session
/// grants, and two-step approvals by token, kept in a [`store`](approval::store).
pub mod approval {
    pub use toolgate_runtime::approval::{
        ApprovalFuture, AsyncApprover, DEFAULT_SESSION_TTL, Grant, SessionGrant, store, two_step,
    };
    pub use toolgate_runtime::{
        AllowAllApprover, Approval, ApprovalRequest, ApproveError, Approver, DEFAULT_APPROVAL_TTL,
        Taint,
    };
}

/// Every linked tool: [`registry()`](crate::registry()) to call one by name, [`manifests()`] to list
/// them, [`check_registry()`] to catch a duplicated id.
pub mod registry {
    pub use toolgate_runtime::{
        CallError, CallFuture, Duplicate, Instances, Manifests, Registry, RegistryError, Source,
        Tool, ToolManifest, check_registry, manifests,
    };
}

pub use toolgate_runtime::audit;
#[cfg(feature = "clap")]
pub use toolgate_runtime::cli;
#[cfg(feature = "mcp")]
pub use toolgate_runtime::mcp;
#[cfg(feature = "postgres")]
pub use toolgate_runtime::postgres;
#[cfg(feature = "rig")]
pub use toolgate_runtime::rig;
pub use toolgate_runtime::terminal;
pub use toolgate_runtime::{lockfile, provider, report};

/// What the code `#[tool]` generates refers to. Not a public API: it changes without notice.
#[doc(hidden)]
pub mod __private {
    pub use toolgate_runtime::__private::*;
}

/// Every Rust block of README.md, compiled (and run, where it can be) by `cargo test`.
#[cfg(all(
    doctest,
    feature = "mcp",
    feature = "mcp-oauth",
    feature = "clap",
    feature = "postgres",
    feature = "checkpoints",
    feature = "rig"
))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
