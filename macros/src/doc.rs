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

/// What the doc comment says of each parameter, in a section headed `# Arguments` (or
/// `# Parameters`), as rustdoc's convention writes it: a list item per parameter, its name in
/// backticks, then `-` or `:` and the text (`` * `id` - The user's id. ``); an item's following lines,
/// indented, continue it. Doc comments given as expressions are not read.
pub(crate) fn parameters(attrs: &[Attribute]) -> Vec<(String, String)> {
    let mut lines: Vec<String> = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("doc")) {
        if let Meta::NameValue(nv) = &attr.meta
            && let Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) = &nv.value
        {
            lines.extend(s.value().split('\n').map(str::to_owned));
        }
    }
    let mut found: Vec<(String, String)> = Vec::new();
    let mut inside = false;
    for line in &lines {
        let trimmed = line.trim();
        if let Some(heading) = trimmed.strip_prefix('#') {
            let heading = heading.trim_start_matches('#').trim().to_ascii_lowercase();
            inside = heading == "arguments" || heading == "parameters";
            continue;
        }
        if !inside || trimmed.is_empty() {
            continue;
        }
        let item = trimmed
            .strip_prefix("* ")
            .or_else(|| trimmed.strip_prefix("- "));
        match item.and_then(parameter_item) {
            Some((name, text)) => found.push((name, text)),
            // An indented line continues the item above it.
            None if item.is_none() && line.starts_with(char::is_whitespace) => {
                if let Some((_, text)) = found.last_mut() {
                    text.push(' ');
                    text.push_str(trimmed);
                }
            }
            None => {}
        }
    }
    found.retain(|(_, text)| !text.is_empty());
    found
}

/// `` `name` - text `` or `` `name`: text ``.
fn parameter_item(item: &str) -> Option<(String, String)> {
    let rest = item.strip_prefix('`')?;
    let (name, rest) = rest.split_once('`')?;
    let rest = rest.trim_start();
    let text = rest
        .strip_prefix('-')
        .or_else(|| rest.strip_prefix(':'))
        .or_else(|| rest.strip_prefix('\u{2013}'))?;
    Some((name.trim().to_owned(), text.trim().to_owned()))
}
