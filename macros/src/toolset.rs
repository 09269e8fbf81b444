//! `#[toolset]`: a domain for a group of tools, and the rule that none of its public functions is left
//! undeclared.
//!
//! Input:
//!
//! ```text
//! #[toolset(domain = "users")]
//! impl Users {
//!     #[tool(risk = "READ_ONLY")] pub fn get(&self, id: u64) -> Result<User, Error> { .. }
//!     #[tool(skip)] pub fn cache_size(&self) -> usize { .. }
//!     pub fn purge(&self) -> Result<(), Error> { .. }     // error: not declared
//! }
//! ```
//!
//! Output: the impl block (or inline module) with each `#[tool]` expanded in place as `#[tool]` would
//! expand it, with the toolset's domain, methods allowed, and ids checked for clashes within the set.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::spanned::Spanned;
use syn::{Attribute, Block, ImplItem, Item, Meta, Signature, Visibility};

use crate::attr::{self, ToolsetArgs};
use crate::ctxt::Errors;
use crate::expand::{self, Context, Expanded};
use crate::valid;

pub(crate) fn toolset_attribute(args: TokenStream, input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = attr::parse_toolset_args(args, &mut errors);
    let domain = args_domain(&args, &mut errors);
    let mut item = match syn::parse2::<Item>(input.clone()) {
        Ok(item) => item,
        Err(error) => {
            let error = error.into_compile_error();
            return quote!(#error #input);
        }
    };
    let context = Context {
        domain: domain.as_deref(),
        in_toolset: true,
    };
    let mut ids = Ids::default();
    let mut member = |f: FnParts<'_>, errors: &mut Errors| {
        let outcome = member_fn(f.attrs, f.public, f.sig, f.block, context, errors);
        ids.record(outcome, errors);
    };
    match &mut item {
        Item::Impl(block) => {
            let trait_impl = block.trait_.is_some();
            for f in block.items.iter_mut().filter_map(|item| match item {
                ImplItem::Fn(f) => Some(f),
                _ => None,
            }) {
                let public = trait_impl || !matches!(f.vis, Visibility::Inherited);
                let parts = FnParts {
                    attrs: &mut f.attrs,
                    public,
                    sig: &mut f.sig,
                    block: &mut f.block,
                };
                member(parts, &mut errors);
            }
        }
        Item::Mod(module) => match &mut module.content {
            Some((_, items)) => {
                for f in items.iter_mut().filter_map(|item| match item {
                    Item::Fn(f) => Some(f),
                    _ => None,
                }) {
                    let public = !matches!(f.vis, Visibility::Inherited);
                    let parts = FnParts {
                        attrs: &mut f.attrs,
                        public,
                        sig: &mut f.sig,
                        block: &mut f.block,
                    };
                    member(parts, &mut errors);
                }
            }
            None => errors.push(syn::Error::new(
                module.semi.map_or(module.ident.span(), |s| s.span),
                "#[toolset] needs an inline module (`mod users { ... }`): on `mod users;` it \
                 cannot see the functions",
            )),
        },
        other => errors.push(syn::Error::new(
            expand::item_keyword_span(other),
            "#[toolset] applies to an impl block or an inline module",
        )),
    }
    let errors = errors.into_compile_errors();
    quote!(#errors #item)
}

fn args_domain(args: &ToolsetArgs, errors: &mut Errors) -> Option<String> {
    let domain = args.domain.as_ref()?;
    let mut own = Errors::default();
    let spec_domain = valid::check_domain(domain, &mut own);
    errors.push_all(own);
    spec_domain.then(|| domain.value.clone())
}

/// A function of the set: an impl's method or a module's function.
struct FnParts<'a> {
    attrs: &'a mut Vec<Attribute>,
    public: bool,
    sig: &'a mut Signature,
    block: &'a mut Block,
}

/// Expands one function of the set, or reports it for lacking a declaration.
fn member_fn(
    attrs: &mut Vec<Attribute>,
    public: bool,
    sig: &mut Signature,
    block: &mut Block,
    context: Context<'_>,
    errors: &mut Errors,
) -> Expanded {
    let mut found = attrs
        .iter()
        .enumerate()
        .filter(|(_, a)| is_tool_attr(a))
        .map(|(i, _)| i);
    let Some(index) = found.next() else {
        if public {
            errors.push(syn::Error::new(
                sig.ident.span(),
                format!(
                    "`{}` is public in a #[toolset] but declares no risk: add \
                     #[tool(risk = \"...\")] if an agent may call it, or #[tool(skip)] if it is \
                     not a tool",
                    sig.ident
                ),
            ));
            return Expanded::Failed;
        }
        return Expanded::Skipped;
    };
    if let Some(second) = found.next() {
        errors.push(syn::Error::new(
            attrs[second].path().span(),
            "#[tool] is given twice on this function",
        ));
        // Left in place, each would expand on its own, as a tool outside the set.
        attrs.retain(|a| !is_tool_attr(a));
        return Expanded::Failed;
    }
    let attribute = attrs.remove(index);
    // Errors about what the declaration lacks point at this member's own `tool`.
    let (args, attr_span) = match &attribute.meta {
        Meta::Path(path) => (TokenStream::new(), path.span()),
        Meta::List(list) => (list.tokens.clone(), list.path.span()),
        Meta::NameValue(nv) => {
            errors.push(syn::Error::new(
                nv.eq_token.span,
                "write the tool's declaration as #[tool(risk = \"...\", ...)]",
            ));
            return Expanded::Failed;
        }
    };
    expand::expand_fn(attrs, sig, block, args, attr_span, context, errors)
}

/// `#[tool]`, `#[toolgate::tool]` or `#[::toolgate::tool]`.
fn is_tool_attr(attr: &Attribute) -> bool {
    let path = attr.path();
    let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    match segments.as_slice() {
        [one] => one == "tool",
        [krate, name] => krate == "toolgate" && name == "tool",
        _ => false,
    }
}

/// Tool ids of the set, to report clashes where they are written.
#[derive(Default)]
struct Ids {
    seen: HashMap<String, Span>,
}

impl Ids {
    fn record(&mut self, outcome: Expanded, errors: &mut Errors) {
        let Expanded::Tool { id, id_span } = outcome else {
            return;
        };
        match self.seen.entry(id) {
            Entry::Occupied(taken) => errors.push(syn::Error::new(
                id_span,
                format!(
                    "tool id `{}` is already used by another tool of this #[toolset]",
                    taken.key()
                ),
            )),
            Entry::Vacant(free) => {
                free.insert(id_span);
            }
        }
    }
}
