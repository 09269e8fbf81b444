//! The operator console (feature `console`): a web page on the PostgreSQL approval store, audit trail
//! and fleets, for the people who answer approvals. `toolgate console --store URL` serves it; an
//! application may serve [`Console::router`] itself.
//!
//! - **Approvals**: the pending requests, following the store live; each with its principal, agent,
//!   tool, declared and effective risk, arguments as the audit log writes them (redacted ones
//!   hidden), what tainted the session, and where the tool declares them, the target's state and
//!   the rollback plan. Approve once or for the session, reject with a reason, reject and stop;
//!   an irreversible call takes its target typed back. The store records the operator's name.
//! - **Fleet**: every fleet, its members, their modes and when each last read the fleet; lower a
//!   fleet's mode (raising stays a command: `toolgate fleet raise`).
//! - **Audit trail**: search by tool, principal, agent, decision, outcome, code and time; a call's
//!   `enter` and `exit` side by side; every writer's chain and checkpoints verified.
//! - **Promotion**: for agents in SHADOW mode, what would have run in each higher mode, drawn per
//!   risk level over time.
//! - **Policy replay**: a candidate policy file pasted, the trail's calls decided again under it beside
//!   the policies in force, and the calls whose decision would flip, each count linked to its records.
//!
//! # Safe as a control surface
//!
//! Operators log in with a token of theirs (kept as its SHA-256) or a JWT access token that
//! [`OAuth`](crate::mcp::oauth::OAuth) verifies as the MCP server does
//! ([`Operators::access_tokens`]), in exchange for a session cookie (`HttpOnly`, `SameSite=Strict`)
//! that lasts no longer than the token. Every change is a form carrying the session's CSRF token, from the console's
//! own origin. Every text an agent controls is escaped for HTML, and every character that could hide
//! or reorder text is shown as a visible marker naming its code point; the pages load nothing but
//! the console's own style sheet and script (a content security policy says so), and arguments the
//! tool redacts never reach the store, so never the page.
//!
//! ```no_run
//! # extern crate toolgate_runtime as toolgate;
//! use toolgate::console::{Console, Operators};
//!
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! let operators = Operators::from_toml(&std::fs::read_to_string("operators.toml")?)?;
//! let console = Console::builder()
//!     .operators(operators)
//!     .connect("postgres://operator@db.internal/toolgate")
//!     .await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8640").await?;
//! console.serve(listener).await?;
//! # Ok(())
//! # }
//! ```
mod approvals;
mod fleet;
mod html;
mod login;
mod operators;
mod promotion;
mod replay;
mod server;
mod shared;
mod trail;

pub use operators::{Operators, OperatorsError};
pub use server::{Console, ConsoleBuilder, DEFAULT_SESSION_TTL, RunError};
