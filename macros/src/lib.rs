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
#[cfg(test)]
mod grammar_tests;
mod marker;
mod toolset;
mod valid;

use proc_macro::TokenStream;

/// Declares a gated tool: its manifest is registered, and every call is decided by the gate before the
/// body runs.
///
#[doc = include_str!("../grammar.md")]
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
/// declare its risk; above an rmcp `#[tool_router]` impl, it gates rmcp's tools in place.
///
/// ```text
/// #[toolset(domain = "users")]      // on an impl block (inherent or trait) or an inline module
/// ```
///
/// What it checks, and the `#[toolgate(..)]` of rmcp's tools, are in the grammar of [`tool`](macro@tool).
#[proc_macro_attribute]
pub fn toolset(args: TokenStream, input: TokenStream) -> TokenStream {
    toolset::toolset_attribute(args.into(), input.into()).into()
}

/// The grammar of the attributes, `grammar.md`, as a string literal: `#[doc = __grammar!()]` shows it in
/// the `toolgate` crate's guide, which cannot include a file of this crate. Not a public API.
#[doc(hidden)]
#[proc_macro]
pub fn __grammar(_input: TokenStream) -> TokenStream {
    proc_macro::TokenTree::Literal(proc_macro::Literal::string(GRAMMAR)).into()
}

/// `grammar.md`: the one description of `#[tool]`, `#[toolset]` and `#[toolgate(..)]`.
const GRAMMAR: &str = include_str!("../grammar.md");
