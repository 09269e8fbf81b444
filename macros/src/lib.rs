//! The attribute macros of [toolgate](https://docs.rs/toolgate): `#[tool]` and `#[toolset]`.
//!
//! Use them through the `toolgate` crate, which documents them; the code they generate reaches the runtime
//! through `::toolgate::__private`.
//!
//! Each expansion goes parse (`attr` for the arguments, `ast` for the signature, each read once), then
//! validate (`valid`), then expand (`expand`, `toolset`). Errors are collected (`ctxt`) and reported together, each on the token at fault, and
//! the user's item is emitted unchanged beside them, so one mistake makes one error.

#![forbid(unsafe_code)]

mod ast;
mod attr;
mod ctxt;
mod doc;
mod expand;
#[cfg(test)]
mod fuzz_tests;
mod toolset;
mod valid;

use proc_macro::TokenStream;

/// Declares a gated tool. See the `toolgate` crate's documentation.
#[proc_macro_attribute]
pub fn tool(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::tool_attribute(args.into(), input.into()).into()
}

/// The marker `#[toolset]` leaves on a function with an attribute it cannot read, for `#[tool]` under
/// another name to find. Not a public API.
#[doc(hidden)]
#[proc_macro_attribute]
pub fn __toolset_member(args: TokenStream, input: TokenStream) -> TokenStream {
    toolset::member_attribute(args.into(), input.into()).into()
}

/// Declares a set of tools sharing a domain, and refuses any public function in it that does not
/// declare its risk. See the `toolgate` crate's documentation.
#[proc_macro_attribute]
pub fn toolset(args: TokenStream, input: TokenStream) -> TokenStream {
    toolset::toolset_attribute(args.into(), input.into()).into()
}
