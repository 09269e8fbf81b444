//! The model of a tool function's signature, read once: its parameters in order (each with its name, or
//! the fact that a pattern binds it, and whether it is the `&Gate`), its receiver and its return type;
//! and where it is declared ([`Context`]: a `#[toolset]`'s domain, its owner, rmcp's name).
//!
//! Input:  the function's `Signature`, and whether it sits in a `#[toolset]`.
//! Output: a [`ToolFn`] that the emitters read (`expand`), with an error on each token that keeps a
//!         function from being a tool (a `const fn`, a method outside a toolset, a return type that is
//!         not a `Result`, a second or unnamed `&Gate`).

use proc_macro2::{Ident, Span, TokenStream};
use syn::spanned::Spanned as _;
use syn::{FnArg, Pat, Receiver, ReturnType, Signature, Type};

use crate::ctxt::Errors;

/// A tool function's signature, as the emitters need it.
pub(crate) struct ToolFn<'a> {
    pub(crate) sig: &'a Signature,
    /// The typed parameters (not the receiver), in signature order.
    pub(crate) params: Vec<Param<'a>>,
    pub(crate) receiver: Option<&'a Receiver>,
    /// The name of the `&Gate` parameter, if the tool has one.
    pub(crate) gate: Option<&'a Ident>,
    /// The declared return type, if one is written.
    pub(crate) output: Option<&'a Type>,
}

/// One typed parameter.
pub(crate) struct Param<'a> {
    /// The name it is bound to; `None` where a pattern binds it (`(a, b): (u8, u8)`).
    pub(crate) name: Option<&'a Ident>,
    pub(crate) pat: &'a Pat,
    pub(crate) ty: &'a Type,
    /// Whether it is the tool's `&Gate`, the gate of the call rather than an argument.
    pub(crate) is_gate: bool,
}

impl<'a> ToolFn<'a> {
    /// Reads `sig` once, reporting what keeps it from being a tool.
    pub(crate) fn from_signature(
        sig: &'a Signature,
        in_toolset: bool,
        errors: &mut Errors,
    ) -> ToolFn<'a> {
        if let Some(constness) = &sig.constness {
            errors.push(syn::Error::new(
                constness.span,
                "a tool cannot be a `const fn`: the gate decides each call at run time",
            ));
        }
        let receiver = sig.receiver();
        if let (Some(receiver), false) = (receiver, in_toolset) {
            errors.push(syn::Error::new(
                receiver.self_token.span,
                "#[tool] on a method needs #[toolset] on its impl block, which checks that every pub \
                 method declares its risk",
            ));
        }
        let output = match &sig.output {
            ReturnType::Default => {
                errors.push(syn::Error::new(
                    sig.paren_token.span.close(),
                    "a tool must return `Result<T, E>` where `E: From<toolgate::Denied>`, so that a \
                     refused call can return its refusal",
                ));
                None
            }
            ReturnType::Type(_, ty) => {
                if !is_result(ty) {
                    errors.push(syn::Error::new(
                        ty.span(),
                        "a tool must return `Result<T, E>` (any path ending in `Result`) where \
                         `E: From<toolgate::Denied>`, so that a refused call can return its refusal",
                    ));
                }
                Some(&**ty)
            }
        };
        let mut gate = None;
        let mut params = Vec::new();
        for input in &sig.inputs {
            let FnArg::Typed(typed) = input else { continue };
            let name = match &*typed.pat {
                Pat::Ident(pat) if pat.subpat.is_none() => Some(&pat.ident),
                _ => None,
            };
            let is_gate = is_gate_ref(&typed.ty);
            if is_gate {
                match (name, gate) {
                    (_, Some(_)) => errors.push(syn::Error::new(
                        typed.ty.span(),
                        "a tool takes at most one `&Gate` parameter",
                    )),
                    (Some(name), None) => gate = Some(name),
                    (None, None) => errors.push(syn::Error::new(
                        typed.pat.span(),
                        "bind the `&Gate` parameter to a name (such as `gate: &Gate`): the check \
                         reads it",
                    )),
                }
            }
            params.push(Param {
                name,
                pat: &typed.pat,
                ty: &typed.ty,
                is_gate,
            });
        }
        ToolFn {
            sig,
            params,
            receiver,
            gate,
            output,
        }
    }

    /// The parameters that are arguments of the call: every one but the `&Gate`.
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

fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident == "Result"),
        Type::Group(group) => is_result(&group.elem),
        Type::Paren(paren) => is_result(&paren.elem),
        _ => false,
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

/// Where a `#[tool]` is expanded.
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

/// What rmcp's `#[tool]` says of a tool gated in place.
pub(crate) struct InPlace {
    /// The tool's name in rmcp: `name = ".."`, else the method's name. It is the tool's id.
    pub(crate) name: String,
    pub(crate) name_span: Span,
    /// Where the declaration is written, for errors about what it cannot say.
    pub(crate) attr_span: Span,
}

/// What a function belongs to, as far as the macro can see.
#[derive(Clone, Copy)]
pub(crate) enum Owner<'a> {
    /// A free function, or one the macro cannot place (a bare `#[tool]` sees no impl around it).
    Free,
    /// An associated function of a non-generic impl, named through its qualified self type
    /// (`<Files>` or `<Files as Trait>`).
    Impl(&'a TokenStream),
    /// An associated function of a generic impl (the span of its generics).
    GenericImpl(Span),
}
