//! A tool's description, from its doc comment.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Attribute, Expr, ExprLit, Lit, Meta};

/// The doc comment as one string expression: every paragraph, each line without the space `///` leaves,
/// trimmed at both ends. A `#[doc = include_str!(..)]` is kept as an expression, untrimmed, inside
/// `concat!`.
pub(crate) fn description(attrs: &[Attribute]) -> TokenStream {
    let mut lines: Vec<String> = Vec::new();
    let mut exprs: Vec<&Expr> = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("doc")) {
        let Meta::NameValue(nv) = &attr.meta else {
            continue;
        };
        match &nv.value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => {
                for line in s.value().split('\n') {
                    lines.push(line.strip_prefix(' ').unwrap_or(line).trim_end().to_owned());
                }
            }
            other => exprs.push(other),
        }
    }
    let text = lines.join("\n").trim().to_owned();
    if exprs.is_empty() {
        quote!(#text)
    } else {
        quote!(::core::concat!(#text, #("\n", #exprs),*))
    }
}

/// Whether the doc comment says nothing: no line with text, and no `#[doc = expr]` that might.
pub(crate) fn is_empty(attrs: &[Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .all(|attr| match &attr.meta {
            Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) => s.value().trim().is_empty(),
                _ => false,
            },
            _ => true,
        })
}
