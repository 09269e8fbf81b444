//! Parses the arguments of `#[tool(...)]` and `#[toolset(...)]`.
//!
//! Input:  `risk = "HIGH_WRITE", side_effects, modes = [FULL_AUTO], domain = "users"`
//! Output: a [`ToolArgs`] with every argument and its span; each malformed argument is one error, and
//!         parsing goes on at the next comma so that all of them are reported.

use proc_macro2::{Delimiter, Ident, Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::spanned::Spanned as _;
use syn::{LitBool, LitStr};

use crate::ctxt::Errors;
use toolgate_policy::suggest::{closest, did_you_mean};

/// One `key` or `key = value` argument.
pub(crate) struct Arg {
    pub(crate) key: Ident,
    pub(crate) value: Option<TokenStream>,
}

impl Arg {
    fn value_span(&self) -> Span {
        match &self.value {
            Some(value) => value.span(),
            None => self.key.span(),
        }
    }
}

/// Splits `key = value, key, ...` at its top-level commas.
pub(crate) fn split_args(tokens: TokenStream, errors: &mut Errors) -> Vec<Arg> {
    comma_separated(tokens)
        .into_iter()
        .filter_map(|segment| parse_segment(segment, errors))
        .collect()
}

/// The non-empty runs of tokens between top-level commas (commas inside groups are the groups').
fn comma_separated(tokens: TokenStream) -> Vec<Vec<TokenTree>> {
    let mut segments = vec![Vec::new()];
    for tree in tokens {
        match tree {
            TokenTree::Punct(p) if p.as_char() == ',' => segments.push(Vec::new()),
            tree => segments.last_mut().expect("never empty").push(tree),
        }
    }
    segments.retain(|segment| !segment.is_empty());
    segments
}

fn parse_segment(segment: Vec<TokenTree>, errors: &mut Errors) -> Option<Arg> {
    let mut trees = segment.into_iter();
    let key = match trees.next() {
        None => return None,
        Some(TokenTree::Ident(key)) => key,
        Some(other) => {
            errors.push(syn::Error::new(
                other.span(),
                "expected an argument name, such as `risk`",
            ));
            return None;
        }
    };
    match trees.next() {
        None => Some(Arg { key, value: None }),
        // `key(..)`, as rmcp writes `annotations(..)`.
        Some(TokenTree::Group(group)) if group.delimiter() == Delimiter::Parenthesis => {
            if let Some(extra) = trees.next() {
                errors.push(syn::Error::new(
                    extra.span(),
                    format!("expected `,` after `{key}(..)`"),
                ));
                return None;
            }
            Some(Arg {
                key,
                value: Some(TokenTree::Group(group).into()),
            })
        }
        Some(TokenTree::Punct(eq)) if eq.as_char() == '=' => {
            let mut value: Vec<TokenTree> = trees.collect();
            if value.is_empty() {
                errors.push(syn::Error::new(
                    eq.span(),
                    format!("expected a value after `{key} =`"),
                ));
                return None;
            }
            let single = matches!(&value[0], TokenTree::Literal(_))
                || matches!(&value[0], TokenTree::Group(g) if g.delimiter() == Delimiter::Bracket);
            if single && value.len() > 1 {
                errors.push(syn::Error::new(
                    value[1].span(),
                    format!("expected `,` after the value of `{key}`"),
                ));
                value.truncate(1);
            }
            Some(Arg {
                key,
                value: Some(value.into_iter().collect()),
            })
        }
        Some(other) => {
            errors.push(syn::Error::new(
                other.span(),
                format!("expected `=` or `,` after `{key}`"),
            ));
            None
        }
    }
}

/// A value and where it was written.
pub(crate) struct Spanned<T> {
    pub(crate) value: T,
    pub(crate) span: Span,
}

/// Declares the keys of `#[tool(...)]`, each once: its field of [`ToolArgs`], its name in the key list,
/// its parser and its span for "takes no other argument" all come from its line here.
macro_rules! tool_keys {
    ($($key:ident: $ty:ty = $parse:expr,)*) => {
        /// The arguments of `#[tool(...)]`, each as written; [`crate::valid`] checks them against each
        /// other.
        #[derive(Default)]
        pub(crate) struct ToolArgs {
            $(pub(crate) $key: Option<Spanned<$ty>>,)*
            /// A `risk` was written but is malformed or misspelt, and already has its error.
            pub(crate) risk_attempted: bool,
            /// Some argument is malformed and has its error: the declaration cannot be emitted.
            pub(crate) malformed: bool,
        }

        pub(crate) const TOOL_KEYS: &[&str] = &[$(stringify!($key)),*];

        impl ToolArgs {
            /// Stores `arg` if its key is one of these: `None` for an unknown key.
            fn store(&mut self, arg: &Arg, errors: &mut Errors) -> Option<syn::Result<()>> {
                let stored = match arg.key.to_string().as_str() {
                    $(stringify!($key) => {
                        let parse: fn(&Arg, &mut Errors) -> syn::Result<Spanned<$ty>> = $parse;
                        parse(arg, errors).and_then(|value| set(&mut self.$key, value, arg))
                    })*
                    _ => return None,
                };
                Some(stored)
            }

            /// The span of every key written, in declaration order.
            pub(crate) fn spans(&self) -> impl Iterator<Item = (&'static str, Span)> {
                [$(self.$key.as_ref().map(|v| (stringify!($key), v.span)),)*]
                    .into_iter()
                    .flatten()
            }
        }
    };
}

tool_keys! {
    risk: String = |arg, _| string(arg, "risk = \"HIGH_WRITE\""),
    side_effects: bool = |arg, _| flag(arg),
    modes: Vec<Ident> = modes,
    id: String = |arg, _| string(arg, "id = \"users.delete\""),
    domain: String = |arg, _| string(arg, "domain = \"users\""),
    idempotent: bool = |arg, _| flag(arg),
    open_world: bool = |arg, _| flag(arg),
    description: String = |arg, _| string(arg, "description = \"Deletes a user.\""),
    skip: () = |arg, _| skip(arg),
    escalate: syn::Path = |arg, _| path(arg, "escalate = shell::classify"),
    record_arguments: bool = |arg, _| flag(arg),
    redact: Vec<Ident> = |arg, _| names(arg, "redact = [password, token]"),
    callable: bool = |arg, _| flag(arg),
    untrusted_output: bool = |arg, _| flag(arg),
    irreversible: bool = |arg, _| flag(arg),
    out_of_band: bool = |arg, _| flag(arg),
    annotations: Annotations = annotations,
    target: Ident = |arg, _| name(arg, "target = instance_id"),
    evidence: syn::Path = |arg, _| path(arg, "evidence = describe_instance"),
    rollback: syn::Path = |arg, _| path(arg, "rollback = restore_plan"),
}

pub(crate) fn parse_tool_args(tokens: TokenStream, errors: &mut Errors) -> ToolArgs {
    let before = errors.len();
    let mut out = ToolArgs::default();
    for arg in split_args(tokens, errors) {
        let name = arg.key.to_string();
        let stored = out.store(&arg, errors).unwrap_or_else(|| {
            // A misspelt `risk` is reported here; `valid` does not report it missing as well.
            out.risk_attempted |= closest(&name, TOOL_KEYS) == Some("risk");
            Err(syn::Error::new(
                arg.key.span(),
                format!(
                    "unknown argument `{name}` of #[tool]{}",
                    hint_or_list(&name, TOOL_KEYS)
                ),
            ))
        });
        if let Err(error) = stored {
            // A malformed `risk` has its error: `valid` does not report it missing as well.
            out.risk_attempted |= name == "risk";
            errors.push(error);
        }
    }
    out.malformed = errors.len() > before;
    out
}

/// Stores a value, or fails for a key given twice.
fn set<T>(slot: &mut Option<Spanned<T>>, value: Spanned<T>, arg: &Arg) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            arg.key.span(),
            format!("`{}` is given twice", arg.key),
        ));
    }
    *slot = Some(value);
    Ok(())
}

pub(crate) fn hint_or_list(input: &str, candidates: &[&str]) -> String {
    let hint = did_you_mean(input, candidates);
    if hint.is_empty() {
        format!("; expected one of: {}", candidates.join(", "))
    } else {
        hint
    }
}

pub(crate) fn string(arg: &Arg, example: &str) -> syn::Result<Spanned<String>> {
    let key = &arg.key;
    let Some(value) = &arg.value else {
        return Err(syn::Error::new(
            key.span(),
            format!("`{key}` needs a value: {example}"),
        ));
    };
    match syn::parse2::<LitStr>(value.clone()) {
        Ok(lit) => Ok(Spanned {
            value: lit.value(),
            span: lit.span(),
        }),
        Err(_) => Err(syn::Error::new(
            value.span(),
            format!("`{key}` takes a string literal: {example}"),
        )),
    }
}

fn flag(arg: &Arg) -> syn::Result<Spanned<bool>> {
    let Some(value) = &arg.value else {
        return Ok(Spanned {
            value: true,
            span: arg.key.span(),
        });
    };
    match syn::parse2::<LitBool>(value.clone()) {
        Ok(lit) => Ok(Spanned {
            value: lit.value,
            span: arg.key.span().join(lit.span).unwrap_or(lit.span),
        }),
        Err(_) => Err(syn::Error::new(
            value.span(),
            format!(
                "`{key}` is a flag: write `{key}`, or `{key} = true` / `{key} = false`",
                key = arg.key
            ),
        )),
    }
}

fn skip(arg: &Arg) -> syn::Result<Spanned<()>> {
    match &arg.value {
        None => Ok(Spanned {
            value: (),
            span: arg.key.span(),
        }),
        Some(_) => Err(syn::Error::new(
            arg.value_span(),
            "`skip` takes no value: write #[tool(skip)]",
        )),
    }
}

/// rmcp's `annotations(..)` of a tool, as written.
#[derive(Default)]
pub(crate) struct Annotations {
    pub(crate) title: Option<Spanned<String>>,
    pub(crate) read_only_hint: Option<Spanned<bool>>,
    pub(crate) destructive_hint: Option<Spanned<bool>>,
    pub(crate) idempotent_hint: Option<Spanned<bool>>,
    pub(crate) open_world_hint: Option<Spanned<bool>>,
}

const ANNOTATION_KEYS: &[&str] = &[
    "title",
    "read_only_hint",
    "destructive_hint",
    "idempotent_hint",
    "open_world_hint",
];

fn annotations(arg: &Arg, errors: &mut Errors) -> syn::Result<Spanned<Annotations>> {
    const EXAMPLE: &str = "annotations(title = \"Delete a user\", destructive_hint = true)";
    let group = match arg.value.clone().map(|v| v.into_iter().collect::<Vec<_>>()) {
        Some(trees) => match trees.as_slice() {
            [TokenTree::Group(group)] if group.delimiter() == Delimiter::Parenthesis => {
                group.clone()
            }
            _ => {
                return Err(syn::Error::new(
                    arg.value_span(),
                    format!("`annotations` takes its hints in parentheses: {EXAMPLE}"),
                ));
            }
        },
        None => {
            return Err(syn::Error::new(
                arg.key.span(),
                format!("`annotations` needs its hints: {EXAMPLE}"),
            ));
        }
    };
    let mut out = Annotations::default();
    let mut bad = Errors::default();
    for inner in split_args(group.stream(), errors) {
        let stored = match inner.key.to_string().as_str() {
            "title" => string(&inner, "title = \"Delete a user\"")
                .and_then(|v| set(&mut out.title, v, &inner)),
            "read_only_hint" => flag(&inner).and_then(|v| set(&mut out.read_only_hint, v, &inner)),
            "destructive_hint" => {
                flag(&inner).and_then(|v| set(&mut out.destructive_hint, v, &inner))
            }
            "idempotent_hint" => {
                flag(&inner).and_then(|v| set(&mut out.idempotent_hint, v, &inner))
            }
            "open_world_hint" => {
                flag(&inner).and_then(|v| set(&mut out.open_world_hint, v, &inner))
            }
            name => Err(syn::Error::new(
                inner.key.span(),
                format!(
                    "unknown annotation `{name}`{}",
                    hint_or_list(name, ANNOTATION_KEYS)
                ),
            )),
        };
        if let Err(error) = stored {
            bad.push(error);
        }
    }
    if let Some(error) = bad.into_error() {
        return Err(error);
    }
    Ok(Spanned {
        value: out,
        span: arg.key.span(),
    })
}

pub(crate) const MODE_NAMES: &[&str] = &toolgate_policy::Mode::NAMES;

fn modes(arg: &Arg, errors: &mut Errors) -> syn::Result<Spanned<Vec<Ident>>> {
    const EXAMPLE: &str = "modes = [PARTIAL_AUTO, FULL_AUTO]";
    let Some(value) = &arg.value else {
        return Err(syn::Error::new(
            arg.key.span(),
            format!("`modes` needs a list of modes: {EXAMPLE}"),
        ));
    };
    let mut trees = value.clone().into_iter();
    let group = match (trees.next(), trees.next()) {
        (Some(TokenTree::Group(group)), None) if group.delimiter() == Delimiter::Bracket => group,
        _ => {
            return Err(syn::Error::new(
                value.span(),
                format!("`modes` takes a list in brackets: {EXAMPLE}"),
            ));
        }
    };
    let mut names = Vec::new();
    let mut bad = Errors::default();
    for segment in comma_separated(group.stream()) {
        match segment.as_slice() {
            [] => {}
            [TokenTree::Ident(name)] => names.push(name.clone()),
            [TokenTree::Literal(lit)] => bad.push(syn::Error::new(
                lit.span(),
                format!(
                    "modes are bare names, not strings: write {}",
                    lit.to_string().trim_matches('"')
                ),
            )),
            trees => {
                let tokens: TokenStream = trees.iter().cloned().collect();
                bad.push(syn::Error::new(
                    tokens.span(),
                    format!(
                        "`{}` is not a mode; write a bare name: {}",
                        tokens.to_token_stream().to_string().replace(" :: ", "::"),
                        MODE_NAMES.join(", ")
                    ),
                ));
            }
        }
    }
    // With no name left, the list is not reported empty as well: the entries written have their errors.
    if !names.is_empty() {
        errors.extend(bad);
    } else if let Some(error) = bad.into_error() {
        return Err(error);
    }
    Ok(Spanned {
        value: names,
        span: group.span(),
    })
}

fn path(arg: &Arg, example: &str) -> syn::Result<Spanned<syn::Path>> {
    let key = &arg.key;
    let Some(value) = &arg.value else {
        return Err(syn::Error::new(
            key.span(),
            format!("`{key}` needs the path of a function: {example}"),
        ));
    };
    match syn::parse2::<syn::Path>(value.clone()) {
        Ok(path) => Ok(Spanned {
            span: value.span(),
            value: path,
        }),
        Err(_) => Err(syn::Error::new(
            value.span(),
            format!("`{key}` takes the path of a function: {example}"),
        )),
    }
}

/// `name`: one of the function's arguments, by name.
fn name(arg: &Arg, example: &str) -> syn::Result<Spanned<Ident>> {
    let key = &arg.key;
    let Some(value) = &arg.value else {
        return Err(syn::Error::new(
            key.span(),
            format!("`{key}` needs the name of an argument: {example}"),
        ));
    };
    match syn::parse2::<Ident>(value.clone()) {
        Ok(name) => Ok(Spanned {
            span: name.span(),
            value: name,
        }),
        Err(_) => Err(syn::Error::new(
            value.span(),
            format!("`{key}` takes the name of an argument, not a string or a path: {example}"),
        )),
    }
}

/// `[a, b]`: names of the function's arguments.
fn names(arg: &Arg, example: &str) -> syn::Result<Spanned<Vec<Ident>>> {
    let key = &arg.key;
    let list = arg.value.as_ref().and_then(|value| {
        let mut trees = value.clone().into_iter();
        match (trees.next(), trees.next()) {
            (Some(TokenTree::Group(group)), None) if group.delimiter() == Delimiter::Bracket => {
                Some(group)
            }
            _ => None,
        }
    });
    let Some(group) = list else {
        return Err(syn::Error::new(
            arg.value_span(),
            format!("`{key}` takes a list of argument names in brackets: {example}"),
        ));
    };
    let parser = syn::punctuated::Punctuated::<Ident, syn::Token![,]>::parse_terminated;
    match syn::parse::Parser::parse2(parser, group.stream()) {
        Ok(names) => Ok(Spanned {
            value: names.into_iter().collect(),
            span: group.span(),
        }),
        Err(error) => Err(syn::Error::new(
            error.span(),
            format!("`{key}` takes a list of argument names in brackets: {example}"),
        )),
    }
}

/// The arguments of `#[toolset(...)]`.
#[derive(Default)]
pub(crate) struct ToolsetArgs {
    pub(crate) domain: Option<Spanned<String>>,
}

pub(crate) fn parse_toolset_args(tokens: TokenStream, errors: &mut Errors) -> ToolsetArgs {
    let mut out = ToolsetArgs::default();
    for arg in split_args(tokens, errors) {
        let name = arg.key.to_string();
        let result = match name.as_str() {
            "domain" => {
                string(&arg, "domain = \"users\"").and_then(|v| set(&mut out.domain, v, &arg))
            }
            _ => Err(syn::Error::new(
                arg.key.span(),
                format!(
                    "unknown argument `{name}` of #[toolset]{}",
                    hint_or_list(&name, &["domain"])
                ),
            )),
        };
        if let Err(error) = result {
            errors.push(error);
        }
    }
    out
}
