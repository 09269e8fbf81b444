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
use syn::parse::Parser as _;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::visit_mut::{self, VisitMut};
use syn::{
    Attribute, Block, ImplItem, Item, ItemImpl, ItemMod, ItemTrait, Macro, Meta, Signature, Token,
    TraitItem, Visibility,
};

use crate::ast::{self, Context, Declaration, ImplOf, InPlace, Owner, Tool};
use crate::attr::{self, ToolsetArgs};
use crate::ctxt::Errors;
use crate::expand::{self, Expanded};
use crate::marker;
use crate::valid;

pub(crate) fn toolset_attribute(args: TokenStream, input: TokenStream) -> TokenStream {
    let mut item = match syn::parse2::<Item>(input.clone()) {
        Ok(item) => item,
        Err(error) => {
            let error = error.into_compile_error();
            return quote!(#error #input);
        }
    };
    let mut errors = Errors::default();
    let args = attr::parse_toolset_args(args, &mut errors);
    let domain = args_domain(&args, &mut errors);
    let mut set = Set {
        domain: domain.as_deref(),
        ids: Ids::default(),
        errors: &mut errors,
    };
    match &mut item {
        Item::Impl(block) => set.impl_block(block),
        Item::Mod(module) => set.module(module),
        other => set.errors.push(syn::Error::new(
            ast::item_keyword_span(other),
            "#[toolset] applies to an impl block or an inline module",
        )),
    }
    let errors = errors.into_compile_errors();
    quote!(#errors #item)
}

/// One `#[toolset]`: its domain, the ids of its tools so far, and its errors. Its rule reaches every
/// function it contains, in nested modules and impl blocks too, and it refuses what it cannot look
/// into (a macro call, an out-of-line module).
struct Set<'a> {
    domain: Option<&'a str>,
    ids: Ids,
    errors: &'a mut Errors,
}

impl Set<'_> {
    fn impl_block(&mut self, block: &mut ItemImpl) {
        let owner = if block.generics.params.is_empty() {
            Owner::Impl(ImplOf {
                self_ty: &block.self_ty,
                trait_: block.trait_.as_ref().map(|(path, _)| path),
            })
        } else {
            Owner::GenericImpl(block.generics.params.span())
        };
        let trait_impl = block.trait_.is_some();
        // An rmcp router's impl: `#[tool_router]` is still on it (the set is above it), or a member
        // is declared in place (rmcp's attribute, below the set, has expanded already).
        let rmcp = block.attrs.iter().any(|attr| {
            attr.path()
                .segments
                .last()
                .is_some_and(|segment| segment.ident == "tool_router")
        }) || block
            .items
            .iter()
            .any(|item| matches!(item, ImplItem::Fn(f) if f.attrs.iter().any(is_toolgate_attr)));
        for item in &mut block.items {
            match item {
                ImplItem::Fn(f) => {
                    let public = trait_impl || !matches!(f.vis, Visibility::Inherited);
                    let parts = FnParts {
                        attrs: &mut f.attrs,
                        public,
                        rmcp,
                        sig: &f.sig,
                        block: &mut f.block,
                    };
                    self.member(parts, owner);
                }
                ImplItem::Macro(m) => self.macro_call(&mut m.attrs, &m.mac),
                _ => {}
            }
        }
    }

    fn module(&mut self, module: &mut ItemMod) {
        let Some((_, items)) = &mut module.content else {
            self.errors.push(syn::Error::new(
                module.semi.map_or(module.ident.span(), |s| s.span),
                "#[toolset] needs an inline module (`mod users { ... }`): on `mod users;` it \
                 cannot see the functions",
            ));
            return;
        };
        for item in items {
            match item {
                Item::Fn(f) => {
                    let parts = FnParts {
                        attrs: &mut f.attrs,
                        public: !matches!(f.vis, Visibility::Inherited),
                        rmcp: false,
                        sig: &f.sig,
                        block: &mut f.block,
                    };
                    self.member(parts, Owner::Free);
                }
                Item::Impl(block) => self.impl_block(block),
                Item::Mod(inner) => self.module(inner),
                Item::Const(item) => self.nested(|visitor| visitor.visit_expr_mut(&mut item.expr)),
                Item::Static(item) => self.nested(|visitor| visitor.visit_expr_mut(&mut item.expr)),
                Item::Trait(t) => self.trait_def(t),
                // A call, not a `macro_rules!` definition: it may write functions.
                Item::Macro(m) if m.ident.is_none() => self.macro_call(&mut m.attrs, &m.mac),
                _ => {}
            }
        }
    }

    /// A trait's provided methods are functions of the set too; they cannot be tools (each impl of the
    /// trait would call an ungated copy), so a public one must say it is not a tool.
    fn trait_def(&mut self, t: &mut ItemTrait) {
        let public = !matches!(t.vis, Visibility::Inherited);
        for item in &mut t.items {
            let TraitItem::Fn(f) = item else { continue };
            if f.default.is_none() {
                continue;
            }
            self.refuse_tool_in_cfg_attr(&mut f.attrs);
            let skipped = take_skip(&mut f.attrs);
            if let Some(attr) = f.attrs.iter().find(|a| is_tool_attr(a)) {
                self.errors.push(syn::Error::new(
                    attr.path().span(),
                    "a trait's method cannot be a tool: each impl of the trait would have its own \
                     ungated copy; declare the tool on a function or a method of an impl",
                ));
                f.attrs.retain(|a| !is_tool_attr(a));
            } else if public && !skipped {
                self.errors.push(syn::Error::new(
                    f.sig.ident.span(),
                    format!(
                        "`{}` is public in a #[toolset] but declares no risk: a trait's provided \
                         method cannot be a tool; mark it #[tool(skip)] if it is not one, or move \
                         the trait out of the toolset",
                        f.sig.ident
                    ),
                ));
            }
        }
    }

    /// The set cannot see what a macro call writes: it is refused unless marked `#[tool(skip)]`.
    fn macro_call(&mut self, attrs: &mut Vec<Attribute>, mac: &Macro) {
        self.refuse_tool_in_cfg_attr(attrs);
        if take_skip(attrs) {
            return;
        }
        if let Some(attr) = attrs.iter().find(|a| is_tool_attr(a)) {
            self.errors.push(syn::Error::new(
                attr.path().span(),
                "a macro call in a #[toolset] takes only #[tool(skip)]: declare each tool on its \
                 own function",
            ));
            attrs.retain(|a| !is_tool_attr(a));
            return;
        }
        let name = mac
            .path
            .segments
            .last()
            .map_or_else(String::new, |s| s.ident.to_string());
        self.errors.push(syn::Error::new(
            mac.path.span(),
            format!(
                "#[toolset] cannot see the functions `{name}!` writes, so it cannot check that each \
                 declares its risk: write them in the toolset itself, or mark the call \
                 #[tool(skip)] if it writes no function an agent may call"
            ),
        ));
    }

    /// `#[cfg_attr(pred, tool(..))]`: the set cannot tell whether the function is declared, and the
    /// attribute, left to expand on its own, would lose the set's domain. Refused and removed.
    fn refuse_tool_in_cfg_attr(&mut self, attrs: &mut Vec<Attribute>) {
        attrs.retain(|attr| {
            let Some(span) = tool_in_cfg_attr(attr) else {
                return true;
            };
            self.errors.push(syn::Error::new(
                span,
                "#[tool] cannot be given through `cfg_attr` inside a #[toolset]: the set could \
                 neither check the function nor give the tool its domain; write #[tool(...)] \
                 as it is, and put #[cfg(...)] on the function to leave it out of a build",
            ));
            false
        });
    }

    fn member(&mut self, f: FnParts<'_>, owner: Owner<'_>) {
        // Items declared inside the body belong to the set too; expanding the member rewrites its body,
        // so they go first.
        self.nested(|visitor| visitor.visit_block_mut(f.block));
        self.refuse_tool_in_cfg_attr(f.attrs);
        let context = Context {
            domain: self.domain,
            in_toolset: true,
            owner,
            in_place: None,
        };
        let outcome = member_fn(f, context, self.errors);
        self.ids.record(outcome, self.errors);
    }
}

impl Set<'_> {
    /// Runs `visit` with a visitor that applies the set's rule to the items it meets: functions (not
    /// public: a function in a body is reachable from that body only), impl blocks and modules.
    fn nested(&mut self, visit: impl FnOnce(&mut Nested<'_, '_>)) {
        let mut visitor = Nested { set: self };
        visit(&mut visitor);
    }
}

struct Nested<'s, 'a> {
    set: &'s mut Set<'a>,
}

impl VisitMut for Nested<'_, '_> {
    fn visit_item_mut(&mut self, item: &mut Item) {
        match item {
            Item::Fn(f) => {
                let parts = FnParts {
                    attrs: &mut f.attrs,
                    public: false,
                    rmcp: false,
                    sig: &f.sig,
                    block: &mut f.block,
                };
                self.set.member(parts, Owner::Free);
            }
            Item::Impl(block) => self.set.impl_block(block),
            Item::Mod(module) => self.set.module(module),
            other => visit_mut::visit_item_mut(self, other),
        }
    }
}

/// Removes a `#[tool(skip)]`, saying whether there was one.
fn take_skip(attrs: &mut Vec<Attribute>) -> bool {
    let before = attrs.len();
    attrs.retain(|a| {
        !(is_tool_attr(a)
            && matches!(&a.meta, Meta::List(list) if list.tokens.to_string().trim() == "skip"))
    });
    attrs.len() != before
}

/// The span of a `tool` attribute inside `#[cfg_attr(..)]`, nested ones included.
fn tool_in_cfg_attr(attr: &Attribute) -> Option<Span> {
    if !attr.path().is_ident("cfg_attr") {
        return None;
    }
    let Meta::List(list) = &attr.meta else {
        return None;
    };
    let metas = list
        .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
        .ok()?;
    metas.iter().skip(1).find_map(|meta| {
        if is_tool_path(meta.path()) {
            return Some(meta.path().span());
        }
        let nested: Attribute = syn::parse_quote!(#[#meta]);
        tool_in_cfg_attr(&nested)
    })
}

fn args_domain(args: &ToolsetArgs, errors: &mut Errors) -> Option<String> {
    let domain = args.domain.as_ref()?;
    valid::check_domain(domain, errors).then(|| domain.value.clone())
}

/// A function of the set: an impl's method or a module's function.
struct FnParts<'a> {
    attrs: &'a mut Vec<Attribute>,
    public: bool,
    /// It is a method of an rmcp `#[tool_router]` impl, whose `#[tool]` attributes are rmcp's.
    rmcp: bool,
    sig: &'a Signature,
    block: &'a mut Block,
}

/// Expands one function of the set, or reports it for lacking a declaration.
fn member_fn(f: FnParts<'_>, context: Context<'_>, errors: &mut Errors) -> Expanded {
    let FnParts {
        attrs,
        public,
        rmcp: in_router,
        sig,
        block,
    } = f;
    if let Some(index) = attrs.iter().position(is_toolgate_attr) {
        return in_place_member(attrs, index, sig, block, context, errors);
    }
    if let Some(rmcp) = attrs.iter().find(|a| is_rmcp_tool(a, in_router)) {
        // Left in place for rmcp, which still serves the tool: the build fails on this error alone.
        errors.push(syn::Error::new(
            rmcp.path().span(),
            format!(
                "rmcp tool `{}` declares no risk, so no gate could decide its calls: add \
                 #[toolgate(risk = \"...\")] beside rmcp's #[tool]",
                rmcp_facts(rmcp, sig).0
            ),
        ));
        return Expanded::Failed;
    }
    let mut found = attrs
        .iter()
        .enumerate()
        .filter(|(_, a)| is_tool_attr(a))
        .map(|(i, _)| i);
    let Some(index) = found.next() else {
        // An agent reaches a method of an rmcp handler only through the router, which serves its
        // `#[tool]` methods alone, each declared or refused above.
        if in_router {
            return Expanded::Skipped;
        }
        if let Some(marker) = marker::member_marker(attrs, public, context) {
            // An attribute the set cannot read may be `tool` under another name: the marker, last,
            // tells it the set's domain, or reports an undeclared public function if none takes it.
            attrs.push(marker);
            return Expanded::Skipped;
        }
        if public {
            errors.push(valid::undeclared(&sig.ident));
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
    let declaration = match &attribute.meta {
        Meta::Path(path) => Declaration {
            args: TokenStream::new(),
            span: path.span(),
        },
        Meta::List(list) => Declaration {
            args: list.tokens.clone(),
            span: list.path.span(),
        },
        Meta::NameValue(nv) => {
            errors.push(syn::Error::new(
                nv.eq_token.span,
                "write the tool's declaration as #[tool(risk = \"...\", ...)]",
            ));
            return Expanded::Failed;
        }
    };
    let tool = Tool::from_syn(declaration, attrs, sig, context, errors);
    expand::expand_fn(&tool, block, errors)
}

/// A method of an rmcp handler, declared `#[toolgate(..)]` beside rmcp's `#[tool]`: gated in place,
/// with its rmcp name as its id. rmcp's attribute stays for rmcp's router.
fn in_place_member(
    attrs: &mut Vec<Attribute>,
    index: usize,
    sig: &Signature,
    block: &mut Block,
    context: Context<'_>,
    errors: &mut Errors,
) -> Expanded {
    let declaration = attrs.remove(index);
    if let Some(second) = attrs.iter().find(|a| is_toolgate_attr(a)) {
        errors.push(syn::Error::new(
            second.path().span(),
            "#[toolgate] is given twice on this function",
        ));
        attrs.retain(|a| !is_toolgate_attr(a));
        return Expanded::Failed;
    }
    let Meta::List(list) = &declaration.meta else {
        errors.push(syn::Error::new(
            declaration.path().span(),
            "write the tool's declaration as #[toolgate(risk = \"...\", ...)]",
        ));
        return Expanded::Failed;
    };
    let attr_span = list.path.span();
    let tools: Vec<&Attribute> = attrs.iter().filter(|a| is_any_tool_attr(a)).collect();
    let rmcp = match tools.as_slice() {
        [] => {
            errors.push(syn::Error::new(
                attr_span,
                "#[toolgate(..)] declares the risk of an rmcp tool, beside rmcp's #[tool], which \
                 this function lacks; a toolgate tool is declared with #[tool(risk = \"...\")]",
            ));
            return Expanded::Failed;
        }
        [rmcp] => *rmcp,
        [_, second, ..] => {
            errors.push(syn::Error::new(
                second.path().span(),
                "#[tool] is given twice on this function",
            ));
            return Expanded::Failed;
        }
    };
    if declares_risk(rmcp) {
        errors.push(syn::Error::new(
            rmcp.path().span(),
            "this function is declared twice: by this #[tool(risk = ..)] and by #[toolgate(..)]; \
             an rmcp tool keeps rmcp's #[tool] and declares its risk with #[toolgate(..)] alone",
        ));
        // Left in place, toolgate's would expand on its own, as a tool outside the set.
        attrs.retain(|a| !is_tool_attr(a));
        return Expanded::Failed;
    }
    let (name, name_span, description) = rmcp_facts(rmcp, sig);
    let in_place = InPlace { name, name_span };
    let mut args = list.tokens.clone();
    let described = Punctuated::<Meta, Token![,]>::parse_terminated
        .parse2(args.clone())
        .is_ok_and(|metas| metas.iter().any(|m| m.path().is_ident("description")));
    if let (Some(description), false) = (description, described) {
        args = quote!(#args, description = #description);
    }
    let context = Context {
        in_place: Some(&in_place),
        ..context
    };
    let declaration = Declaration {
        args,
        span: attr_span,
    };
    let tool = Tool::from_syn(declaration, attrs, sig, context, errors);
    expand::expand_fn(&tool, block, errors)
}

/// `#[toolgate(..)]`: the declaration of an rmcp tool gated in place.
fn is_toolgate_attr(attr: &Attribute) -> bool {
    attr.path().is_ident("toolgate")
}

/// Any attribute named `tool`, whatever its path: rmcp's router takes every one for its own.
fn is_any_tool_attr(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == "tool")
}

/// Whether a `tool` attribute says `risk = ..`, as toolgate's does and rmcp's never does.
fn declares_risk(attr: &Attribute) -> bool {
    match &attr.meta {
        Meta::List(list) => list
            .tokens
            .clone()
            .into_iter()
            .any(|tree| matches!(tree, proc_macro2::TokenTree::Ident(ident) if ident == "risk")),
        _ => false,
    }
}

/// rmcp's `#[tool]`, told from toolgate's by its `risk`, which rmcp's never has: in a
/// `#[tool_router]` impl, every other; elsewhere, one written `rmcp::tool` or with a key only rmcp has.
fn is_rmcp_tool(attr: &Attribute, in_router: bool) -> bool {
    if !is_any_tool_attr(attr) || declares_risk(attr) {
        return false;
    }
    if in_router
        || attr
            .path()
            .segments
            .first()
            .is_some_and(|s| s.ident == "rmcp")
    {
        return true;
    }
    const RMCP_ONLY: &[&str] = &[
        "name",
        "title",
        "input_schema",
        "output_schema",
        "annotations",
        "icons",
        "meta",
        "execution",
        "local",
    ];
    let Meta::List(list) = &attr.meta else {
        return false;
    };
    let Ok(metas) = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(list.tokens.clone())
    else {
        // rmcp's `annotations(..)` and the like parse as metas; what does not is reported by the
        // macro whose attribute it is.
        return false;
    };
    metas
        .iter()
        .any(|meta| RMCP_ONLY.iter().any(|key| meta.path().is_ident(key)))
}

/// What rmcp's `#[tool]` names: the tool's name (`name = ".."`, else the method's), where it is
/// written, and a literal `description`, if it gives one.
fn rmcp_facts(attr: &Attribute, sig: &Signature) -> (String, Span, Option<syn::LitStr>) {
    let mut name = (sig.ident.to_string(), sig.ident.span());
    let mut description = None;
    if let Meta::List(list) = &attr.meta
        && let Ok(metas) =
            Punctuated::<Meta, Token![,]>::parse_terminated.parse2(list.tokens.clone())
    {
        for meta in metas {
            let Meta::NameValue(pair) = meta else {
                continue;
            };
            let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(text),
                ..
            }) = &pair.value
            else {
                continue;
            };
            if pair.path.is_ident("name") {
                name = (text.value(), text.span());
            } else if pair.path.is_ident("description") {
                description = Some(text.clone());
            }
        }
    }
    (name.0, name.1, description)
}

/// `#[tool]`, `#[toolgate::tool]` or `#[::toolgate::tool]`.
fn is_tool_attr(attr: &Attribute) -> bool {
    is_tool_path(attr.path())
}

fn is_tool_path(path: &syn::Path) -> bool {
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
        let Expanded::Tool { id, id_span, .. } = outcome else {
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
