//! The model of one tool declaration, read once: what its attribute says, its signature, what it
//! belongs to and where it is declared, and what the gate sees of a call.
//!
//! Input:  the attribute's arguments and span, the function's attributes and `Signature`, and its
//!         [`Context`] (a `#[toolset]`'s domain, its impl, rmcp's name for a tool gated in place).
//! Output: a [`Tool`] that [`crate::valid`] checks and [`crate::expand`] emits from. Reading it reports
//!         only malformed arguments (`attr`); every rule of what makes a tool is checked in `valid`.

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;
use syn::ext::IdentExt as _;
use syn::spanned::Spanned as _;
use syn::{Attribute, FnArg, Item, Pat, Receiver, ReturnType, Signature, Type};

use crate::attr::{self, ToolArgs};
use crate::ctxt::Errors;

/// A tool declaration as written, with everything the checks and the emitters read.
pub(crate) struct Tool<'a> {
    pub(crate) args: ToolArgs,
    /// The declaring attribute, for errors about what it lacks.
    pub(crate) attr_span: Span,
    /// The function's attributes: its doc comment, its `#[cfg]`s.
    pub(crate) attrs: &'a [Attribute],
    pub(crate) func: ToolFn<'a>,
    pub(crate) context: Context<'a>,
    pub(crate) call: CallParts<'a>,
}

/// The attribute that declares a tool: its arguments, and where it is written.
pub(crate) struct Declaration {
    pub(crate) args: TokenStream,
    pub(crate) span: Span,
}

impl<'a> Tool<'a> {
    /// Reads the declaration of the function with `attrs` and `sig`, reporting malformed arguments.
    pub(crate) fn from_syn(
        declaration: Declaration,
        attrs: &'a [Attribute],
        sig: &'a Signature,
        context: Context<'a>,
        errors: &mut Errors,
    ) -> Tool<'a> {
        let args = attr::parse_tool_args(declaration.args, errors);
        let func = ToolFn::from_signature(sig);
        let call = CallParts::new(&args, &func);
        Tool {
            args,
            attr_span: declaration.span,
            attrs,
            func,
            context,
            call,
        }
    }
}

/// Where a tool is declared.
#[derive(Clone, Copy)]
pub(crate) struct Context<'a> {
    /// The `#[toolset]`'s domain, if any.
    pub(crate) domain: Option<&'a str>,
    /// Whether the function is inside a `#[toolset]` (methods are tools only there).
    pub(crate) in_toolset: bool,
    /// What the function belongs to, which decides how the call-by-name adapter names it.
    pub(crate) owner: Owner<'a>,
    /// A method of an rmcp `#[tool_router]` impl declared with `#[toolgate(..)]` beside rmcp's
    /// `#[tool]`: rmcp's router serves it under its rmcp name.
    pub(crate) in_place: Option<&'a InPlace>,
}

impl Context<'static> {
    /// A bare `#[tool]`'s: no set around it that it can see.
    pub(crate) const BARE: Context<'static> = Context {
        domain: None,
        in_toolset: false,
        owner: Owner::Free,
        in_place: None,
    };
}

/// What rmcp's `#[tool]` says of a tool gated in place.
pub(crate) struct InPlace {
    /// The tool's name in rmcp: `name = ".."`, else the method's name. It is the tool's id.
    pub(crate) name: String,
    pub(crate) name_span: Span,
}

/// What a function belongs to, as far as the macro can see.
#[derive(Clone, Copy)]
pub(crate) enum Owner<'a> {
    /// A free function, or one the macro cannot place (a bare `#[tool]` sees no impl around it).
    Free,
    /// An associated function of a non-generic impl.
    Impl(ImplOf<'a>),
    /// An associated function of a generic impl (the span of its generics).
    GenericImpl(Span),
}

/// A non-generic impl: its self type, and its trait for a trait impl.
#[derive(Clone, Copy)]
pub(crate) struct ImplOf<'a> {
    pub(crate) self_ty: &'a Type,
    pub(crate) trait_: Option<&'a syn::Path>,
}

impl ImplOf<'_> {
    /// The qualified self type, `<Files>` or `<Files as Trait>`, through which an associated function
    /// is named from outside the impl.
    pub(crate) fn qualified(&self) -> TokenStream {
        let self_ty = self.self_ty;
        match self.trait_ {
            Some(path) => quote!(<#self_ty as #path>),
            None => quote!(<#self_ty>),
        }
    }
}

/// A tool function's signature, as the checks and the emitters need it.
pub(crate) struct ToolFn<'a> {
    pub(crate) sig: &'a Signature,
    /// The typed parameters (not the receiver), in signature order.
    pub(crate) params: Vec<Param<'a>>,
    pub(crate) receiver: Option<&'a Receiver>,
    /// The name of the `&Gate` parameter: the first `&Gate` bound to a name.
    pub(crate) gate: Option<&'a Ident>,
    /// The declared return type, if one is written.
    pub(crate) output: Option<&'a Type>,
    /// The first parameter of type `Parameters<T>`: an rmcp tool's typed arguments.
    pub(crate) typed: Option<Typed<'a>>,
}

/// A parameter `Parameters<T>`, through which rmcp hands a tool the call's arguments, deserialized.
pub(crate) struct Typed<'a> {
    /// Where the value of its `T` is bound, if a name holds it.
    pub(crate) binding: Option<TypedBinding<'a>>,
    /// The parameter's pattern, for errors about its binding.
    pub(crate) pat: &'a Pat,
}

/// The name that holds a `Parameters<T>`'s `T`.
#[derive(Clone, Copy)]
pub(crate) enum TypedBinding<'a> {
    /// `Parameters(args): Parameters<T>`: `args` is the `T`.
    Inner(&'a Ident),
    /// `params: Parameters<T>`: `params.0` is the `T`.
    Outer(&'a Ident),
}

impl TypedBinding<'_> {
    /// A place expression of the `T`, with the user's spans, so that it names the user's binding.
    pub(crate) fn value(self) -> TokenStream {
        match self {
            TypedBinding::Inner(name) => quote!(#name),
            TypedBinding::Outer(name) => quote!(#name.0),
        }
    }
}

/// One typed parameter.
pub(crate) struct Param<'a> {
    /// The name it is bound to; `None` where a pattern binds it (`(a, b): (u8, u8)`).
    pub(crate) name: Option<&'a Ident>,
    pub(crate) pat: &'a Pat,
    pub(crate) ty: &'a Type,
    /// Whether it is a `&Gate`, the gate of the call rather than an argument.
    pub(crate) is_gate: bool,
}

impl<'a> ToolFn<'a> {
    fn from_signature(sig: &'a Signature) -> ToolFn<'a> {
        let output = match &sig.output {
            ReturnType::Default => None,
            ReturnType::Type(_, ty) => Some(&**ty),
        };
        let params: Vec<Param<'a>> = sig
            .inputs
            .iter()
            .filter_map(|input| match input {
                FnArg::Typed(typed) => Some(typed),
                FnArg::Receiver(_) => None,
            })
            .map(|typed| Param {
                name: match &*typed.pat {
                    Pat::Ident(pat) if pat.subpat.is_none() => Some(&pat.ident),
                    _ => None,
                },
                pat: &typed.pat,
                ty: &typed.ty,
                is_gate: is_gate_ref(&typed.ty),
            })
            .collect();
        let gate = params
            .iter()
            .filter(|param| param.is_gate)
            .find_map(|param| param.name);
        let typed = params
            .iter()
            .find(|param| is_parameters(param.ty))
            .map(|param| Typed {
                binding: typed_binding(param.pat),
                pat: param.pat,
            });
        ToolFn {
            sig,
            params,
            receiver: sig.receiver(),
            gate,
            output,
            typed,
        }
    }

    /// The parameters that are arguments of the call: every one but the `&Gate`s.
    pub(crate) fn arguments(&self) -> impl Iterator<Item = &Param<'a>> {
        self.params.iter().filter(|param| !param.is_gate)
    }

    /// Where errors about the return type go: the type, or the name of a function without one.
    pub(crate) fn output_span(&self) -> Span {
        match self.output {
            Some(ty) => ty.span(),
            None => self.sig.ident.span(),
        }
    }

    /// `T` of the declared `Result<T, ..>` (or of `anyhow::Result<T>`), if it is written.
    pub(crate) fn ok_type(&self) -> Option<&'a Type> {
        let Type::Path(path) = self.output? else {
            return None;
        };
        let last = path.path.segments.last()?;
        let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        args.args.iter().find_map(|arg| match arg {
            syn::GenericArgument::Type(ty) => Some(ty),
            _ => None,
        })
    }

    /// The declared return type where it can be named in the body: not an `impl Trait`.
    pub(crate) fn nameable_output(&self) -> Option<&'a Type> {
        self.output.filter(|ty| !mentions_impl_trait(ty))
    }
}

/// What the gate sees of a call, from the function's arguments and the declaration's keys.
pub(crate) struct CallParts<'a> {
    /// The named arguments (not `self`, not the `&Gate`), sorted by name, each with whether `redact`
    /// names it.
    pub(crate) named: Vec<(&'a Ident, bool)>,
    /// Some argument is bound by a pattern, not a name: the arguments cannot be written.
    pub(crate) unnamed: bool,
    pub(crate) escalate: Option<syn::Path>,
    /// The names `redact` lists, as written: for an rmcp tool gated in place, fields of its typed
    /// arguments.
    pub(crate) redacted: Vec<Ident>,
    pub(crate) record_arguments: bool,
    /// What a tool with lasting effects declares.
    pub(crate) effects: Option<EffectParts>,
    /// Set for a `callable` tool.
    pub(crate) callable: Option<Callable<'a>>,
}

/// `target`, `evidence`, `rollback` and `irreversible`, as written.
pub(crate) struct EffectParts {
    pub(crate) irreversible: bool,
    pub(crate) target: Option<Ident>,
    pub(crate) evidence: Option<syn::Path>,
    pub(crate) rollback: Option<syn::Path>,
}

/// A `callable` tool's call by name.
pub(crate) struct Callable<'a> {
    /// Where `callable` is written.
    pub(crate) span: Span,
    /// Each named argument's name and type, in signature order.
    pub(crate) params: Vec<(&'a Ident, &'a Type)>,
}

impl<'a> CallParts<'a> {
    fn new(args: &ToolArgs, func: &ToolFn<'a>) -> CallParts<'a> {
        let redact = args.redact.as_ref().map_or(&[][..], |r| &r.value[..]);
        let mut named: Vec<(&'a Ident, bool)> = func
            .arguments()
            .filter_map(|param| param.name)
            .map(|name| (name, redact.contains(name)))
            .collect();
        named.sort_by_key(|(name, _)| name.unraw().to_string());
        let callable = args
            .callable
            .as_ref()
            .filter(|c| c.value)
            .map(|c| Callable {
                span: c.span,
                params: func
                    .arguments()
                    .filter_map(|param| Some((param.name?, param.ty)))
                    .collect(),
            });
        CallParts {
            named,
            unnamed: func.arguments().any(|param| param.name.is_none()),
            escalate: args.escalate.as_ref().map(|e| e.value.clone()),
            redacted: redact.to_vec(),
            record_arguments: args.record_arguments.as_ref().is_some_and(|r| r.value),
            effects: EffectParts::new(args),
            callable,
        }
    }
}

impl EffectParts {
    fn new(args: &ToolArgs) -> Option<EffectParts> {
        let parts = EffectParts {
            irreversible: args.irreversible.as_ref().is_some_and(|i| i.value),
            target: args.target.as_ref().map(|t| t.value.clone()),
            evidence: args.evidence.as_ref().map(|e| e.value.clone()),
            rollback: args.rollback.as_ref().map(|r| r.value.clone()),
        };
        let declared = parts.irreversible
            || parts.target.is_some()
            || parts.evidence.is_some()
            || parts.rollback.is_some();
        declared.then_some(parts)
    }
}

fn mentions_impl_trait(ty: &Type) -> bool {
    struct Finder(bool);
    impl<'ast> syn::visit::Visit<'ast> for Finder {
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut finder = Finder(false);
    syn::visit::Visit::visit_type(&mut finder, ty);
    finder.0
}

/// `Self`, as a receiver's type names it.
pub(crate) fn is_self_type(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.qself.is_none() && path.path.is_ident("Self"))
}

/// `Parameters<T>`, under any path: rmcp's wrapper of a tool's typed arguments.
fn is_parameters(ty: &Type) -> bool {
    let Type::Path(path) = ty else {
        return false;
    };
    path.qself.is_none()
        && path.path.segments.last().is_some_and(|last| {
            last.ident == "Parameters"
                && matches!(&last.arguments, syn::PathArguments::AngleBracketed(args)
                    if args.args.len() == 1
                        && matches!(args.args[0], syn::GenericArgument::Type(_)))
        })
}

/// The name a `Parameters<T>` parameter's pattern binds its `T` to: `Parameters(args)` or `params`.
fn typed_binding(pat: &Pat) -> Option<TypedBinding<'_>> {
    fn plain(pat: &Pat) -> Option<&Ident> {
        match pat {
            Pat::Ident(ident) if ident.subpat.is_none() && ident.by_ref.is_none() => {
                Some(&ident.ident)
            }
            _ => None,
        }
    }
    match pat {
        Pat::TupleStruct(tuple) if tuple.elems.len() == 1 && tuple.qself.is_none() => {
            plain(&tuple.elems[0]).map(TypedBinding::Inner)
        }
        other => plain(other).map(TypedBinding::Outer),
    }
}

/// `&Gate`, `&'a Gate`, `&toolgate::Gate` or `&::toolgate::Gate`.
fn is_gate_ref(ty: &Type) -> bool {
    let Type::Reference(reference) = ty else {
        return false;
    };
    if reference.mutability.is_some() {
        return false;
    }
    let Type::Path(path) = &*reference.elem else {
        return false;
    };
    let mut names = path.path.segments.iter().map(|s| {
        if s.arguments.is_empty() {
            s.ident.to_string()
        } else {
            String::new()
        }
    });
    let first = names.next();
    let second = names.next();
    let third = names.next();
    path.qself.is_none()
        && matches!(
            (first.as_deref(), second.as_deref(), third),
            (Some("Gate"), None, None) | (Some("toolgate"), Some("Gate"), None)
        )
}

/// The span of the keyword that says what kind of item this is, for "not a function" errors.
pub(crate) fn item_keyword_span(item: &Item) -> Span {
    match item {
        Item::Struct(i) => i.struct_token.span,
        Item::Enum(i) => i.enum_token.span,
        Item::Union(i) => i.union_token.span,
        Item::Const(i) => i.const_token.span,
        Item::Static(i) => i.static_token.span,
        Item::Impl(i) => i.impl_token.span,
        Item::Mod(i) => i.mod_token.span,
        Item::Trait(i) => i.trait_token.span,
        Item::Type(i) => i.type_token.span,
        Item::Use(i) => i.use_token.span,
        Item::ExternCrate(i) => i.extern_token.span,
        Item::ForeignMod(i) => i.abi.extern_token.span,
        Item::Macro(i) => i.mac.path.span(),
        other => other.span(),
    }
}
