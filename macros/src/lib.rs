//! The attribute macros of [toolgate](https://docs.rs/toolgate): `#[tool]` and `#[toolset]`.
//!
//! Use them through the `toolgate` crate, which documents them; the code they generate reaches the runtime
//! through `::toolgate::__private`.
//!
//! Each declaration is read once into a model (`ast::Tool`: the arguments from `attr`, the signature,
//! the context), checked (`valid`, every rule), then emitted (`expand`) only if it passed; `toolset`
//! walks a set and runs each member through the same steps, and `marker` carries the set's context to
//! a member it cannot read. Errors are collected (`ctxt`) and reported together, each on the token at
//! fault, and the user's item is emitted unchanged beside them, so one mistake makes one error.

#![forbid(unsafe_code)]

mod ast;
mod attr;
mod ctxt;
mod doc;
mod expand;
#[cfg(test)]
mod fuzz_tests;
mod marker;
mod toolset;
mod valid;

use proc_macro::TokenStream;

/// Declares a gated tool: its manifest is registered, and every call is decided by the gate before the
/// body runs.
///
/// ```text
/// #[tool(
///     risk = "READ_ONLY" | "PROPOSE_ONLY" | "LOW_WRITE" | "HIGH_WRITE",   // required
///     side_effects,                 // or side_effects = true / false; implied by LOW_WRITE, HIGH_WRITE
///     modes = [SHADOW, ADVISORY, PARTIAL_AUTO, FULL_AUTO],   // narrows the default: every mode
///                                                            // whose ceiling admits the risk
///     id = "users.delete",          // default: <domain>.<fn name>, or <fn name>
///     domain = "users",             // default: the #[toolset]'s
///     description = "...",          // default: the doc comment
///     idempotent,                   // MCP idempotentHint
///     open_world,                   // MCP openWorldHint
///     callable,                     // callable by name with JSON, and over MCP
///     escalate = path::to::classify,// raises the risk from the arguments (below)
///     redact = [password, token],   // kept out of records, approvers and errors
///     record_arguments,             // the (redacted) arguments go into audit records
/// )]
/// #[tool(skip)]                     // in a #[toolset]: a public function that is not a tool
/// ```
///
/// The function returns `Result<T, E>` with `E: From<toolgate::Denied>` (`String`, `anyhow::Error`,
/// `Box<dyn Error + Send + Sync>` and `std::io::Error` have it); a refused call returns
/// `Err(E::from(denied))`. A parameter of type `&Gate` is the gate of the call, not an argument.
///
/// `escalate` names a function that takes a reference to each argument, in the signature's order (not
/// the `&Gate`; at most eight), each parameter either the argument's type or what it borrows as, and
/// returns a `toolgate::Risk`: `fn classify(command: &str, dry_run: &bool) -> Risk` for
/// `fn run(command: String, dry_run: bool)`. The call is judged at the higher of that risk and the
/// declared one, so an escalation never lowers a risk; it must not panic (a panic refuses the call).
///
/// A `callable` tool's parameters are owned and deserializable (`String`, not `&str`), its result
/// `Serialize` and its error `Display`; in a `#[toolset]` impl, a `callable` method takes `&self` and runs
/// on the instance the application gives the call (`toolgate::registry::Instances`). Each misuse is a
/// compile error on the token at fault. The `toolgate` crate's documentation and README walk through
/// each.
#[proc_macro_attribute]
pub fn tool(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::tool_attribute(args.into(), input.into()).into()
}

/// The marker `#[toolset]` leaves on a function with an attribute it cannot read, for `#[tool]` under
/// another name to find. Not a public API.
#[doc(hidden)]
#[proc_macro_attribute]
pub fn __toolset_member(args: TokenStream, input: TokenStream) -> TokenStream {
    marker::member_attribute(args.into(), input.into()).into()
}

/// Declares a set of tools sharing a domain, and refuses any public function in it that does not
/// declare its risk.
///
/// ```text
/// #[toolset(domain = "users")]      // on an impl block (inherent or trait) or an inline module
/// ```
///
/// Every public function in the set, in nested modules and impl blocks too, carries `#[tool(...)]` or
/// `#[tool(skip)]`, or the set does not compile; a macro call in it must be marked `#[tool(skip)]`, since
/// the set cannot see what it writes. Its tools get the set's domain unless they name their own. Methods
/// (`&self`) are tools only in a `#[toolset]` impl, where a `callable` one runs by name on the instance
/// of its type given to the call (`toolgate::registry::Instances`).
///
/// Above an rmcp `#[tool_router]` impl, the set gates rmcp's tools in place: each rmcp `#[tool]` method
/// carries `#[toolgate(..)]` beside it, with the keys of `#[tool]` but `id` (its rmcp name is its id),
/// `callable`, `escalate` and `skip`, or the set does not compile; the other methods are rmcp's to
/// leave unrouted. `toolgate::mcp::ToolgateServer::handler` serves such a handler.
#[proc_macro_attribute]
pub fn toolset(args: TokenStream, input: TokenStream) -> TokenStream {
    toolset::toolset_attribute(args.into(), input.into()).into()
}
