//! Wraps a tool function so that the gate decides every call before the body runs.
//!
//! Input:
//!
//! ```text
//! /// Delete a user account.
//! #[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "users")]
//! async fn delete_user(id: u64) -> Result<(), AppError> { body }
//! ```
//!
//! Output (paths shortened):
//!
//! ```text
//! /// Delete a user account.
//! async fn delete_user(id: u64) -> Result<(), AppError> {
//!     let permit = {
//!         static ENTRY: ToolEntry =
//!             ToolEntry::__new(ToolManifest::__new("users.delete_user", ..), None, Behaviour { .. });
//!         inventory::submit! { Registration(&ENTRY) }
//!         // An allowed call that no gate records is one inlined bit test.
//!         let decided = if allows(&ENTRY, None) {
//!             Ok(Permit::allowed())
//!         } else {
//!             enter(&ENTRY, None, &[(&&Arg(&id)).__toolgate_arg("id")], false)
//!         };
//!         match decided {
//!             Ok(permit) => permit,
//!             Err(denied) => return Err(From::from(denied)),
//!         }
//!     };
//!     let result = async move { body }.await;
//!     let digest = (&&OutputOf::of(&result)).__toolgate_digest();
//!     permit.finish(result, digest)
//! }
//! ```
//!
//! The signature, attributes and body stay as written, so a direct call, a call by name and an MCP call all
//! pass through the same check. The registration lives inside the body, where no name can clash with the
//! user's, and it disappears with a `#[cfg]` that removes the function.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, Block, Item, Signature, Type};
use toolgate_policy::Risk;

use crate::ast::{Context, InPlace, Owner, ToolFn};
use crate::attr::{self, ToolArgs};
use crate::ctxt::Errors;
use crate::doc;
use crate::marker;
use crate::valid::{self, ToolSpec};

/// The outcome of expanding one function.
pub(crate) enum Expanded {
    /// A tool, with its id and where the id comes from (for duplicate checks in a toolset), and the
    /// `callable` flag's span where it is callable.
    Tool {
        id: String,
        id_span: Span,
        callable: Option<Span>,
    },
    /// `#[tool(skip)]`: left as it is.
    Skipped,
    /// The declaration had errors; the function is left as it is.
    Failed,
}

/// `#[tool(...)]` on an item.
pub(crate) fn tool_attribute(args: TokenStream, input: TokenStream) -> TokenStream {
    // The whole `#[tool(...)]` attribute, for errors about what it lacks.
    let attr_span = Span::call_site();
    let mut item = match syn::parse2::<Item>(input.clone()) {
        Ok(item) => item,
        Err(error) => {
            let error = error.into_compile_error();
            return quote!(#error #input);
        }
    };
    let mut errors = Errors::default();
    let mut beside = TokenStream::new();
    match &mut item {
        Item::Fn(f) => {
            // Under another name inside a #[toolset], the set left its marker.
            let member = marker::take_marker(&mut f.attrs, &mut errors);
            let (domain, owner_tokens, generic) = match &member {
                Some(m) => (m.domain.as_deref(), m.owner.clone(), m.generic),
                None => (None, None, None),
            };
            let owner = match (&owner_tokens, generic) {
                (_, Some(span)) => Owner::GenericImpl(span),
                (Some(tokens), None) => Owner::Impl(tokens),
                (None, None) => Owner::Free,
            };
            let context = Context {
                domain,
                in_toolset: member.is_some(),
                owner,
                in_place: None,
            };
            let expanded = expand_fn(
                &f.attrs,
                &f.sig,
                &mut f.block,
                args,
                attr_span,
                context,
                &mut errors,
            );
            if let (
                Expanded::Tool {
                    callable: Some(span),
                    ..
                },
                Owner::Free,
            ) = (expanded, owner)
            {
                beside = free_function_only(&f.attrs, &f.sig.ident, span);
            }
        }
        Item::Verbatim(tokens) if mentions_fn(tokens) => errors.push(syn::Error::new(
            tokens.span(),
            "#[tool] needs a function with a body: put it on the function that implements this \
             declaration",
        )),
        other => errors.push(syn::Error::new(
            item_keyword_span(other),
            "#[tool] applies to functions only",
        )),
    }
    let errors = errors.into_compile_errors();
    quote!(#errors #item #beside)
}

/// An item that stands beside a `callable` tool only where a free function can: in a module or a block.
///
/// A bare `#[tool]` cannot see whether its function sits in an `impl`, and the adapter of a call by name
/// calls the function by its bare name, which inside an `impl` is not the method but whatever free item
/// has that name (`use std::fs::remove_file;`). So the adapter is sound only for free functions, and in
/// an `impl` this item is refused (`associated static items are not allowed`, on `callable`); an
/// associated function is made callable inside a `#[toolset]` impl, which knows its type.
fn free_function_only(attrs: &[Attribute], name: &Ident, callable: Span) -> TokenStream {
    let cfgs = attrs.iter().filter(|a| a.path().is_ident("cfg"));
    let unraw = name.to_string();
    let marker = Ident::new(
        &format!(
            "__TOOLGATE_CALLABLE_FREE_FN_{}",
            unraw.trim_start_matches("r#")
        ),
        callable,
    );
    quote_spanned! {callable=>
        #(#cfgs)*
        #[doc(hidden)]
        #[allow(dead_code, non_upper_case_globals)]
        static #marker: () = ();
    }
}

/// Checks one tool declaration and, if it is sound, inserts the gate check at the top of `block`.
pub(crate) fn expand_fn(
    attrs: &[Attribute],
    sig: &Signature,
    block: &mut Block,
    args: TokenStream,
    attr_span: Span,
    context: Context<'_>,
    errors: &mut Errors,
) -> Expanded {
    let mut own = Errors::default();
    let args = attr::parse_tool_args(args, &mut own);
    if let Some(in_place) = context.in_place {
        in_place_keys(&args, in_place, context.owner, &mut own);
    }
    if let Some(skip) = &args.skip {
        if context.in_place.is_some() {
            errors.extend(own);
            return Expanded::Failed;
        }
        return skip_outcome(&args, skip.span, context, own, errors);
    }
    let callable = args.callable.as_ref().filter(|c| c.value).map(|c| c.span);
    let tool = ToolFn::from_signature(sig, context.in_toolset, &mut own);
    let call = call_parts(&args, &tool, context, &mut own);
    let described = args
        .description
        .as_ref()
        .map_or(!doc::is_empty(attrs), |d| !d.value.trim().is_empty());
    if let (Some(span), false) = (callable, described) {
        own.push(syn::Error::new(
            span,
            "a `callable` tool needs a description, which MCP clients show the model to choose its \
             tools by: add a doc comment (`/// Deletes a user account.`) or `description = \"...\"`",
        ));
    }
    let untrusted = args
        .untrusted_output
        .as_ref()
        .filter(|u| u.value)
        .map(|u| u.span);
    if let (Some(span), Some(ok)) = (untrusted, tool.ok_type())
        && matches!(ok, syn::Type::Tuple(unit) if unit.elems.is_empty())
    {
        own.push(syn::Error::new(
            span,
            "`untrusted_output` on a tool that returns `()`: the agent reads nothing from it to \
             distrust; return what the tool read, or remove `untrusted_output`",
        ));
    }
    let spec = match context.in_place {
        Some(in_place) => valid::validate_in_place(args, in_place, context.domain, &mut own),
        None => valid::validate(args, &sig.ident, context.domain, attr_span, &mut own),
    };
    let failed = own.len() > 0;
    errors.extend(own);
    let (Some(spec), Some(call), false) = (spec, call, failed) else {
        return Expanded::Failed;
    };
    let body = gated_body(&spec, attrs, &tool, &call, context, block);
    // Emitted as it is: parsing the generated statements back into syntax would only print them again.
    *block = Block {
        brace_token: block.brace_token,
        stmts: vec![syn::Stmt::Expr(syn::Expr::Verbatim(body), None)],
    };
    Expanded::Tool {
        id: spec.id,
        id_span: spec.id_span,
        callable,
    }
}

/// What a declaration beside rmcp's `#[tool]` cannot say: rmcp names and routes the tool, and hands it
/// its arguments through its extractors.
fn in_place_keys(args: &ToolArgs, in_place: &InPlace, owner: Owner<'_>, errors: &mut Errors) {
    if let Some(id) = &args.id {
        errors.push(syn::Error::new(
            id.span,
            format!(
                "the id of an rmcp tool gated in place is its name in rmcp, `{}`: rename it with \
                 `name = \"...\"` in rmcp's #[tool]",
                in_place.name
            ),
        ));
    }
    if let Some(callable) = args.callable.as_ref().filter(|c| c.value) {
        errors.push(syn::Error::new(
            callable.span,
            "an rmcp tool is called by name through rmcp's router, which this declaration gates: \
             remove `callable`",
        ));
    }
    if let Some(escalate) = &args.escalate {
        errors.push(syn::Error::new(
            escalate.span,
            "`escalate` reads a tool's typed arguments, which an rmcp tool gated in place receives \
             through rmcp's extractors: declare the tool at the highest risk its arguments reach, \
             or declare it as a toolgate `callable` tool",
        ));
    }
    if let Some(skip) = &args.skip {
        errors.push(syn::Error::new(
            skip.span,
            "an rmcp tool cannot skip its declaration: every tool rmcp serves is decided by a gate",
        ));
    }
    match owner {
        Owner::Impl(_) => {}
        Owner::Free => errors.push(syn::Error::new(
            in_place.attr_span,
            "#[toolgate(..)] declares a method of an rmcp handler: put it on a method of the \
             handler's #[tool_router] impl",
        )),
        Owner::GenericImpl(span) => errors.push(syn::Error::new(
            span,
            "an rmcp tool gated in place is registered under its handler's type, which a generic \
             impl does not name: gate the tools of a non-generic impl",
        )),
    }
}

fn skip_outcome(
    args: &ToolArgs,
    skip: Span,
    context: Context<'_>,
    mut own: Errors,
    errors: &mut Errors,
) -> Expanded {
    if !context.in_toolset {
        own.push(syn::Error::new(
            skip,
            "`skip` marks a function of a #[toolset] as not a tool; outside a #[toolset], remove \
             the #[tool] attribute instead",
        ));
    }
    if let Some((_, span)) = args.spans().find(|(key, _)| *key != "skip") {
        own.push(syn::Error::new(
            span,
            "#[tool(skip)] takes no other argument: a skipped function is not a tool",
        ));
    }
    let failed = own.len() > 0;
    errors.extend(own);
    if failed {
        Expanded::Failed
    } else {
        Expanded::Skipped
    }
}

/// What the gate needs to know of a call, from the function's arguments.
struct CallParts {
    /// The named arguments (not `self`, not the `&Gate`), sorted by name, each with whether to redact it.
    named: Vec<(Ident, bool)>,
    /// A method's receiver, as an expression that borrows it: it decides what the call does as much as
    /// any argument (`staging.drop_table(..)` against `production.drop_table(..)`), so the gate sees it,
    /// named `self`, beside the arguments.
    receiver: Option<TokenStream>,
    /// Some argument is bound by a pattern, not a name: the arguments cannot be written.
    unnamed: bool,
    escalate: Option<syn::Path>,
    record_arguments: bool,
    /// For a `callable` tool: each parameter's name and type, in signature order.
    callable: Option<Vec<(Ident, Type)>>,
}

fn call_parts(
    args: &ToolArgs,
    tool: &ToolFn<'_>,
    context: Context<'_>,
    errors: &mut Errors,
) -> Option<CallParts> {
    let named: Vec<Ident> = tool.arguments().filter_map(|p| p.name.cloned()).collect();
    let unnamed = tool.arguments().any(|p| p.name.is_none());
    let before = errors.len();
    let mut redacted = Vec::new();
    if let Some(redact) = &args.redact {
        let names: Vec<String> = named.iter().map(Ident::to_string).collect();
        let candidates: Vec<&str> = names.iter().map(String::as_str).collect();
        for name in &redact.value {
            if named.contains(name) {
                redacted.push(name.clone());
            } else {
                errors.push(syn::Error::new(
                    name.span(),
                    format!(
                        "`{name}` is not a named argument of this tool{}",
                        toolgate_policy::suggest::did_you_mean(&name.to_string(), &candidates)
                    ),
                ));
            }
        }
    }
    if let (Some(escalate), true) = (&args.escalate, unnamed) {
        errors.push(syn::Error::new(
            escalate.span,
            "`escalate` passes the tool's arguments by name: bind every argument to a name",
        ));
    }
    let mut named: Vec<(Ident, bool)> = named
        .into_iter()
        .map(|ident| {
            let redact = redacted.contains(&ident);
            (ident, redact)
        })
        .collect();
    named.sort_by_key(|(ident, _)| ident.to_string());
    let callable = match &args.callable {
        Some(flag) if flag.value => callable_params(tool, context, errors),
        _ => None,
    };
    (errors.len() == before).then(|| CallParts {
        named,
        receiver: tool.receiver.map(receiver_ref),
        unnamed,
        escalate: args.escalate.as_ref().map(|e| e.value.clone()),
        record_arguments: args.record_arguments.as_ref().is_some_and(|r| r.value),
        callable,
    })
}

/// `self` borrowed as the receiver's own type: `&*self` through a reference or a smart pointer
/// (`&self`, `self: Box<Self>`, `self: Arc<Self>`), `&self` for a receiver taken by value.
fn receiver_ref(receiver: &syn::Receiver) -> TokenStream {
    let self_token = receiver.self_token;
    match &receiver.kind {
        syn::ReceiverKind::Value => quote!(&#self_token),
        syn::ReceiverKind::Typed(_, ty) if is_self_type(ty) => quote!(&#self_token),
        _ => quote!(&*#self_token),
    }
}

/// `&self`, or `self: &Self`: the receiver a call by name can lend from its shared instance.
fn is_shared_self(receiver: &syn::Receiver) -> bool {
    match &receiver.kind {
        syn::ReceiverKind::Reference(_, _, mutability) => mutability.is_none(),
        syn::ReceiverKind::Typed(_, ty) => matches!(
            &**ty,
            Type::Reference(r) if r.mutability.is_none() && is_self_type(&r.elem)
        ),
        _ => false,
    }
}

fn is_self_type(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.qself.is_none() && path.path.is_ident("Self"))
}

/// The `callable` tool's parameters, once it is checked that a call by name can reach exactly this
/// function: one without a receiver or generics, whose parameters are named and owned, and whose name
/// the adapter can write so that it resolves to this function and nothing else.
fn callable_params(
    tool: &ToolFn<'_>,
    context: Context<'_>,
    errors: &mut Errors,
) -> Option<Vec<(Ident, Type)>> {
    let sig = tool.sig;
    let before = errors.len();
    if let (Some(receiver), Owner::Impl(_)) = (tool.receiver, context.owner)
        && !is_shared_self(receiver)
    {
        let mutable = match &receiver.kind {
            syn::ReceiverKind::Reference(_, _, mutability) => mutability.is_some(),
            syn::ReceiverKind::Typed(_, ty) => {
                matches!(&**ty, Type::Reference(r) if r.mutability.is_some())
            }
            _ => false,
        };
        let what = if mutable {
            "calls by name share one instance of the type: keep what changes behind a lock (a \
             `Mutex`, an atomic) inside it"
        } else {
            "a call by name runs on the instance the application gives (`Instances`), which it \
             shares"
        };
        errors.push(syn::Error::new_spanned(
            receiver,
            format!("a `callable` method takes `&self`: {what}"),
        ));
    }
    if let Owner::GenericImpl(generics) = context.owner {
        errors.push(syn::Error::new(
            generics,
            format!(
                "`{}` cannot be `callable` in a generic impl: a call by name needs one concrete \
                 function, and this impl has one per type",
                sig.ident
            ),
        ));
    }
    let reserved = sig.ident.to_string();
    if reserved.trim_start_matches("r#").starts_with("__toolgate") {
        errors.push(syn::Error::new(
            sig.ident.span(),
            "names starting with `__toolgate` are reserved for the code `#[tool]` generates",
        ));
    }
    if let Some(param) = sig.generics.params.first() {
        errors.push(syn::Error::new(
            param.span(),
            "a `callable` tool cannot be generic: a call by name needs one concrete signature",
        ));
    }
    let mut params = Vec::new();
    for param in &tool.params {
        let Some(name) = param.name else {
            errors.push(syn::Error::new(
                param.pat.span(),
                "a `callable` tool's parameters are named: JSON arguments are matched by name",
            ));
            continue;
        };
        if param.is_gate {
            continue;
        }
        if let Some(problem) = unowned(param.ty) {
            errors.push(syn::Error::new_spanned(
                param.ty,
                format!(
                    "a `callable` tool takes owned arguments, deserialized from JSON: {problem}"
                ),
            ));
            continue;
        }
        params.push((name.clone(), param.ty.clone()));
    }
    (errors.len() == before).then_some(params)
}

/// Why a parameter type cannot be deserialized into, if it cannot.
fn unowned(ty: &Type) -> Option<&'static str> {
    match ty {
        Type::Reference(_) => Some("take an owned type (`String` for `&str`, `Vec<T>` for `&[T]`)"),
        Type::ImplTrait(_) => Some("`impl Trait` has no type to deserialize into"),
        Type::Paren(inner) => unowned(&inner.elem),
        Type::Group(inner) => unowned(&inner.elem),
        _ => None,
    }
}

/// A method's receiver as the gate sees it: the value, and for a call by name the label of the
/// registered instance it runs on, which stands for a value that cannot be written.
#[derive(Clone, Copy)]
struct Receiving<'a> {
    value: &'a TokenStream,
    label: Option<&'a TokenStream>,
}

/// The arguments as the gate sees them, sorted by name (a method's receiver as `self`): a reference to
/// each value, named by `value`, marked for redaction where the tool says so. The same for a direct call
/// (the parameters) and a call by name (the parsed values), so that both write the same JSON.
fn argument_refs(
    call: &CallParts,
    value: impl Fn(&Ident) -> TokenStream,
    receiver: Option<Receiving<'_>>,
) -> Vec<TokenStream> {
    let mut args: Vec<(String, TokenStream)> = call
        .named
        .iter()
        .map(|(ident, redact)| {
            let name = ident.to_string();
            let method = if *redact {
                quote!(__toolgate_redacted)
            } else {
                quote!(__toolgate_arg)
            };
            let value = value(ident);
            let arg = quote!((&&::toolgate::__private::Arg(#value)).#method(#name),);
            (name, arg)
        })
        .collect();
    if let Some(Receiving { value, label }) = receiver {
        let arg = match label {
            Some(label) => {
                quote!((&&::toolgate::__private::Arg(#value)).__toolgate_receiver(#label),)
            }
            None => quote!((&&::toolgate::__private::Arg(#value)).__toolgate_arg("self"),),
        };
        args.push(("self".to_owned(), arg));
    }
    args.sort_by(|a, b| a.0.cmp(&b.0));
    let unnamed = call
        .unnamed
        .then(|| quote!(::toolgate::__private::ArgRef::unnamed(),));
    unnamed
        .into_iter()
        .chain(args.into_iter().map(|(_, arg)| arg))
        .collect()
}

/// The call of the tool's `escalate` function on the values named by `value`, in signature order.
fn escalation(
    call: &CallParts,
    tool: &ToolFn<'_>,
    value: impl Fn(&Ident) -> TokenStream,
) -> Option<TokenStream> {
    let path = call.escalate.as_ref()?;
    let ordered = tool.arguments().filter_map(|param| param.name).map(value);
    let ordered: Vec<TokenStream> = ordered.collect();
    // Through a trait, so that a wrong signature is one error that says what the signature must be.
    Some(quote_spanned!(path.span()=> ::toolgate::__private::classify(&#path, (#(#ordered,)*))))
}

/// The adapter of a `callable` tool: its table of parameters, its output schema, and a call of the tool
/// with its arguments parsed one parameter at a time.
fn callable_items(
    tool: &ToolFn<'_>,
    call: &CallParts,
    params: &[(Ident, Type)],
    owner: Owner<'_>,
) -> TokenStream {
    let (sig, gate) = (tool.sig, tool.gate);
    let names: Vec<&Ident> = params.iter().map(|(name, _)| name).collect();
    // The adapter is an item in the tool's body, so it names the tool from outside the body: a free
    // function by its bare name, which resolves to the function itself (an import of the same name
    // would clash with it, and the generated items beside the adapter are all `__toolgate_`), an
    // associated function through its impl's type. `callable_params` refused every other case.
    // The bare name is resolved with `mixed_site` hygiene, which looks up items where the tool is
    // written but no local variable, so a parameter named like the tool cannot hide it.
    let fn_name = &sig.ident;
    let callee = match owner {
        Owner::Impl(qualified_self) => quote!(#qualified_self::#fn_name),
        Owner::Free | Owner::GenericImpl(_) => {
            let mut bare = fn_name.clone();
            bare.set_span(Span::mixed_site());
            quote!(#bare)
        }
    };
    let invoke_gate = Ident::new("toolgate_gate", Span::mixed_site());
    let json = Ident::new("toolgate_json", Span::mixed_site());
    let instances = Ident::new("toolgate_instances", Span::mixed_site());
    // A method runs on the instance of its type the call was given; `callable_params` admitted only
    // `&self` methods of a non-generic impl.
    let this = Ident::new("toolgate_this", Span::mixed_site());
    let self_type = match (tool.receiver, owner) {
        (Some(_), Owner::Impl(qualified)) => Some(self_type(qualified)),
        _ => None,
    };
    let receiver = self_type.as_ref().map(|_| quote!(&*#this));
    let label = Ident::new("toolgate_instance_label", Span::mixed_site());
    let label_ref = quote!(&*#label);
    let fetch_instance = self_type.as_ref().map(|ty| {
        quote! {
            let (#this, #label) =
                match ::toolgate::__private::instance::<#ty>(&__TOOLGATE_ENTRY, #instances) {
                    ::core::result::Result::Ok(instance) => instance,
                    ::core::result::Result::Err(answer) => return answer,
                };
        }
    });
    let receiver_type = match &self_type {
        Some(ty) => quote! {
            ::core::option::Option::Some(::toolgate::__private::Receiver {
                type_id: ::core::any::TypeId::of::<#ty>,
                type_name: ::core::any::type_name::<#ty>,
            })
        },
        None => quote!(::core::option::Option::None),
    };
    // Hygienic locals: a parameter named like the function must not hide the function being called.
    let local = |name: &Ident| Ident::new(&format!("toolgate_arg_{name}"), Span::mixed_site());
    let locals: Vec<Ident> = names.iter().map(|name| local(name)).collect();
    let call_args: Vec<TokenStream> = receiver
        .iter()
        .cloned()
        .chain(tool.params.iter().filter_map(|param| match param.name {
            Some(_) if param.is_gate => Some(quote!(#invoke_gate)),
            Some(name) => {
                let name = local(name);
                Some(quote!(#name))
            }
            None => None,
        }))
        .collect();
    let output_schema = match tool.ok_type() {
        Some(ty) => quote! {{
            #[allow(unused_imports)]
            use ::toolgate::__private::{OutputWithSchema as _, OutputWithoutSchema as _};
            #[allow(clippy::needless_borrow)]
            (&&::toolgate::__private::Output::<#ty>::new()).__toolgate_output_schema()
        }},
        None => quote!(::core::option::Option::None),
    };
    let ret_span = tool.output_span();
    // Decided with the parsed values, as a direct call is with its parameters, inside the gate; then
    // the tool is called with the decision handed to its check, which takes it instead of deciding again.
    let by_local = |name: &Ident| {
        let local = local(name);
        quote!(&#local)
    };
    let receiving = receiver.as_ref().map(|value| Receiving {
        value,
        label: Some(&label_ref),
    });
    let arg_refs = argument_refs(call, by_local, receiving);
    let escalated = match escalation(call, tool, by_local) {
        Some(escalate) => quote!(::core::option::Option::Some(#escalate)),
        None => quote!(::core::option::Option::None),
    };
    let record_arguments = call.record_arguments;
    let outright = Ident::new("toolgate_outright", Span::mixed_site());
    // A tool with a `&Gate` parameter decides with it first, as its own check would.
    let has_gate_parameter = gate.is_some();
    let gate_parameter = match gate {
        Some(_) => quote!(::core::option::Option::Some(#invoke_gate)),
        None => quote!(::core::option::Option::None),
    };
    let decide = quote! {{
        #[allow(unused_imports)]
        use ::toolgate::__private::{OpaqueArg as _, SerializableArg as _};
        ::toolgate::__private::decide(
            &__TOOLGATE_ENTRY, #outright, #gate_parameter, #escalated, &[#(#arg_refs)*],
            #record_arguments,
        )
    }};
    let decided = Ident::new("toolgate_decided", Span::mixed_site());
    // An async tool's decision may wait (an async approver, a store); the references to the
    // arguments end with the first `let`, before any await.
    let step = Ident::new("toolgate_step", Span::mixed_site());
    let take_decision = quote! {
        let #step = {
            #[allow(unused_imports)]
            use ::toolgate::__private::{OpaqueArg as _, SerializableArg as _};
            ::toolgate::__private::decide_async(
                &__TOOLGATE_ENTRY, #outright, #gate_parameter, #escalated, &[#(#arg_refs)*],
                #record_arguments,
            )
        };
        let #decided = match #step {
            ::toolgate::__private::DecidingByName::Done(decided) => decided,
            ::toolgate::__private::DecidingByName::Waiting(waiting) => {
                let decided = ::toolgate::__private::resume(waiting).await;
                #[allow(unused_imports)]
                use ::toolgate::__private::{OpaqueArg as _, SerializableArg as _};
                ::toolgate::__private::confirm_handed(
                    decided, #escalated, &[#(#arg_refs)*], #record_arguments,
                )
            }
        };
        let #decided = match #decided {
            ::core::result::Result::Ok(decided) => decided,
            ::core::result::Result::Err(denied) => return ::core::result::Result::Err(denied),
        };
    };
    let invoke = if sig.asyncness.is_some() {
        // The future outlives this call's borrow of the gate: it takes a clone of its own, and lends it.
        quote_spanned! {ret_span=>
            ::toolgate::__private::invoke_async(#invoke_gate, {
                let #invoke_gate = ::core::clone::Clone::clone(#invoke_gate);
                async move {
                    #[allow(unused_variables)]
                    let #invoke_gate = &#invoke_gate;
                    #take_decision
                    ::core::result::Result::Ok(
                        ::toolgate::__private::hand_async(#decided, #callee(#(#call_args),*)).await,
                    )
                }
            })
        }
    } else {
        // Made in the gate and decided there, then run with the decision handed over: the guards are
        // plain values, so a sync tool adds no closure and no generic instance of its own here.
        let (entered, handing) = (
            Ident::new("_toolgate_entered", Span::mixed_site()),
            Ident::new("_toolgate_handing", Span::mixed_site()),
        );
        let call = quote_spanned!(ret_span=> #callee(#(#call_args),*));
        // Spanned on the return type: a result type without `Serialize` or an error type without
        // `Display` is reported there.
        quote_spanned! {ret_span=>
            ::toolgate::__private::finish_sync({
                let #entered = ::toolgate::__private::enter_gate(#invoke_gate);
                match #decide {
                    ::core::result::Result::Ok(#decided) => {
                        let #handing = ::toolgate::__private::hand_over(#decided);
                        ::core::result::Result::Ok(#call)
                    }
                    ::core::result::Result::Err(denied) => ::core::result::Result::Err(denied),
                }
            })
        }
    };
    // Each parameter is parsed and described by runtime code generic over its type alone: the tool
    // adds a table of names and types, and one `take` per parameter.
    let params_table = Ident::new("__TOOLGATE_PARAMS", Span::mixed_site());
    let arguments = Ident::new("toolgate_arguments", Span::mixed_site());
    let count = params.len();
    let rows = params.iter().map(|(name, ty)| {
        let name = name.to_string();
        quote_spanned!(ty.span()=> ::toolgate::__private::Param::of::<#ty>(#name))
    });
    let takes = params.iter().zip(&locals).map(|((name, ty), local)| {
        let redacted = call.named.iter().any(|(n, redact)| *redact && n == name);
        let name = name.to_string();
        let take = if redacted {
            quote_spanned!(ty.span()=> #arguments.take_redacted::<#ty>(#name))
        } else {
            quote_spanned!(ty.span()=> #arguments.take::<#ty>(#name))
        };
        quote! {
            let #local = match #take {
                ::core::result::Result::Ok(value) => value,
                ::core::result::Result::Err(error) => {
                    return ::toolgate::__private::CallFuture::ready(::core::result::Result::Err(error));
                }
            };
        }
    });
    quote! {
        static #params_table: [::toolgate::__private::Param; #count] = [#(#rows),*];
        fn __toolgate_invoke(
            #invoke_gate: &::toolgate::Gate,
            #[allow(unused_variables)]
            #instances: &::toolgate::__private::Instances,
            #json: ::toolgate::__private::serde_json::Value,
        ) -> ::toolgate::__private::CallFuture {
            // Asked before the arguments are read: a tool the gates refuse answers its refusal whatever
            // its arguments, and says nothing of its parameters.
            let #outright = match ::toolgate::__private::precheck(
                &__TOOLGATE_ENTRY, #invoke_gate, #has_gate_parameter,
            ) {
                ::core::result::Result::Ok(outright) => outright,
                ::core::result::Result::Err(refused) => return refused,
            };
            #fetch_instance
            let #arguments =
                match ::toolgate::__private::JsonArguments::new(&#json, &#params_table) {
                    ::core::result::Result::Ok(arguments) => arguments,
                    ::core::result::Result::Err(error) => {
                        return ::toolgate::__private::CallFuture::ready(
                            ::core::result::Result::Err(error),
                        );
                    }
                };
            #(#takes)*
            if let ::core::result::Result::Err(error) = #arguments.finish() {
                return ::toolgate::__private::CallFuture::ready(::core::result::Result::Err(error));
            }
            #invoke
        }
        fn __toolgate_output_schema() -> ::core::option::Option<::toolgate::__private::serde_json::Value> {
            #output_schema
        }
        static __TOOLGATE_CALLABLE: ::toolgate::__private::Callable = ::toolgate::__private::Callable {
            invoke: __toolgate_invoke,
            params: &#params_table,
            output_schema: __toolgate_output_schema,
            receiver: #receiver_type,
        };
    }
}

/// The self type of an impl, from its qualified form `<Type>` or `<Type as Trait>`.
fn self_type(qualified: &TokenStream) -> TokenStream {
    let parser = |input: syn::parse::ParseStream<'_>| {
        input.parse::<syn::Token![<]>()?;
        let ty: Type = input.parse()?;
        if input.parse::<Option<syn::Token![as]>>()?.is_some() {
            input.parse::<syn::Path>()?;
        }
        input.parse::<syn::Token![>]>()?;
        Ok(ty)
    };
    match syn::parse::Parser::parse2(parser, qualified.clone()) {
        Ok(ty) => ty.to_token_stream(),
        Err(error) => error.into_compile_error(),
    }
}

/// The new body: decide, run the original body, hand its result to the permit, return it.
fn gated_body(
    spec: &ToolSpec,
    attrs: &[Attribute],
    tool: &ToolFn<'_>,
    call: &CallParts,
    context: Context<'_>,
    body: &Block,
) -> TokenStream {
    let (sig, gate) = (tool.sig, tool.gate);
    let manifest = manifest(spec, attrs, &sig.ident);
    let hygienic = |name: &str| Ident::new(name, Span::mixed_site());
    let (permit, entry, result, digest, info) = (
        hygienic("toolgate_permit"),
        hygienic("__TOOLGATE_ENTRY"),
        hygienic("toolgate_result"),
        hygienic("toolgate_digest"),
        hygienic("toolgate_call"),
    );
    let ret_span = tool.output_span();
    // Named with the return type's span, so that an error type without `From<Denied>` is reported there.
    let denied = Ident::new("toolgate_denied", ret_span);
    let convert = quote_spanned!(ret_span=> ::core::convert::From::from(#denied));
    // A `&Gate` written as `&Gate` is the call's gate; one written otherwise (a renamed import, a type
    // alias) is found by its type: each reference parameter is asked whether it is a `Gate`, which
    // costs nothing for one that is not (the answer is a constant `None`).
    let probes: Vec<TokenStream> = tool
        .arguments()
        .filter_map(|param| {
            let Type::Reference(reference) = param.ty else {
                return None;
            };
            let name = param.name?;
            (reference.mutability.is_none())
                .then(|| quote!(.or((&&::toolgate::__private::GateProbe(#name)).__toolgate_gate())))
        })
        .collect();
    let gate_arg = match gate {
        Some(gate) => quote!(::core::option::Option::Some(#gate)),
        None if probes.is_empty() => quote!(::core::option::Option::None),
        None => quote!({
            #[allow(unused_imports)]
            use ::toolgate::__private::{IsGate as _, NotGate as _};
            ::core::option::Option::None #(#probes)*
        }),
    };
    let record_arguments = call.record_arguments;
    let decided = Ident::new("toolgate_decided", Span::mixed_site());
    let fast = match &call.escalate {
        Some(_) => quote!(false),
        None => quote!(::toolgate::__private::allows(&#entry, #gate_arg)),
    };
    // The arguments, for the gate to look at when it needs to: a reference to each.
    let by_name = |ident: &Ident| quote_spanned!(ident.span()=> &#ident);
    let receiving = call
        .receiver
        .as_ref()
        .map(|value| Receiving { value, label: None });
    let args = argument_refs(call, by_name, receiving);
    let escalated_arg = match &call.escalate {
        Some(_) => quote!(::core::option::Option::Some(#info)),
        None => quote!(::core::option::Option::None),
    };
    let enter = match sig.asyncness.is_some() {
        false => quote!(::toolgate::__private::enter(
            &#entry, #gate_arg, #escalated_arg, &[#(#args)*], #record_arguments
        )),
        // An async tool's decision may wait (an async approver, a store): it is awaited here, inside
        // the tool's own future. The references to the arguments end with the `let`, before the
        // await, so the future stays `Send`.
        true => {
            let step = Ident::new("toolgate_step", Span::mixed_site());
            let start = quote!(::toolgate::__private::enter_async(
                &#entry, #gate_arg, #escalated_arg, &[#(#args)*], #record_arguments
            ));
            // After a wait, the arguments must still be those the approval saw.
            quote! {{
                let #step = #start;
                match #step {
                    ::toolgate::__private::Entering::Done(decided) => decided,
                    ::toolgate::__private::Entering::Waiting(waiting) => {
                        let decided = waiting.resume().await;
                        ::toolgate::__private::confirm(
                            &#entry, decided, #escalated_arg, &[#(#args)*], #record_arguments
                        )
                    }
                }
            }}
        }
    };
    let escalated = escalation(call, tool, by_name).map(|escalate| {
        let risk = quote_spanned!(escalate.span()=> ::toolgate::__private::Risk);
        quote! {
            let #info: #risk = #escalate;
        }
    });
    // A call by name decided already hands its decision over: taken before anything else runs, the
    // `escalate` function included.
    // A tool gated in place is decided by the server before rmcp's router calls it.
    let decided_elsewhere = call.callable.is_some() || context.in_place.is_some();
    let handed = decided_elsewhere.then(|| {
        quote! {
            if let ::core::option::Option::Some(permit) = ::toolgate::__private::handed(&#entry) {
                ::core::result::Result::Ok(permit)
            } else
        }
    });
    let behaviour = behaviour(call);
    let (callable_items, callable_ref) = match &call.callable {
        Some(params) => (
            callable_items(tool, call, params, context.owner),
            quote!(::core::option::Option::Some(&__TOOLGATE_CALLABLE)),
        ),
        None => (TokenStream::new(), quote!(::core::option::Option::None)),
    };
    let new_entry = match (context.in_place, context.owner) {
        (Some(_), Owner::Impl(qualified)) => {
            let owner = self_type(qualified);
            quote!(::toolgate::__private::ToolEntry::__in_place(
                #manifest, #behaviour, ::core::any::TypeId::of::<#owner>
            ))
        }
        _ => quote!(::toolgate::__private::ToolEntry::__new(
            #manifest, #callable_ref, #behaviour
        )),
    };
    // The body's type is pinned to the declared return type, as it is in a plain function: otherwise
    // the first `return` in the body would decide it (`return Ok(Box::new(5))` for a `Box<dyn Trait>`).
    // An unreachable first return of that type does it, for the closure and the async block alike;
    // an `impl Trait` return type cannot be named, and is left to inference.
    let pin_type = match tool.nameable_output() {
        Some(ty) => {
            let fake = Ident::new("toolgate_declared", Span::mixed_site());
            quote! {
                #[allow(unreachable_code, clippy::diverging_sub_expression, clippy::empty_loop)]
                if false {
                    let #fake: #ty = loop {};
                    return #fake;
                }
            }
        }
        _ => TokenStream::new(),
    };
    // The body keeps its own braces, so that a body that does not end in its result (a forgotten
    // `Ok(())`) is reported on the body, as in a plain function, not on the attribute.
    let mut braced = TokenStream::new();
    body.brace_token.surround(&mut braced, |tokens| {
        pin_type.to_tokens(tokens);
        for stmt in &body.stmts {
            stmt.to_tokens(tokens);
        }
    });
    let run = match (sig.asyncness.is_some(), tool.nameable_output()) {
        (true, _) => quote!(async move #braced.await),
        (false, Some(ty)) => quote!((move || -> #ty #braced)()),
        (false, None) => quote!((move || #braced)()),
    };
    quote! {
        #[allow(unused_mut)]
        let mut #permit = {
            static #entry: ::toolgate::__private::ToolEntry = #new_entry;
            #callable_items
            ::toolgate::__private::inventory::submit! {
                ::toolgate::__private::Registration(&#entry)
            }
            // The common case, an allowed call that no gate records, is one inlined bit test: the
            // arguments are only looked at on the other path.
            let #decided = if #fast {
                ::core::result::Result::Ok(::toolgate::__private::Permit::allowed())
            } else #handed {
                #[allow(unused_imports)]
                use ::toolgate::__private::{OpaqueArg as _, SerializableArg as _};
                #escalated
                #enter
            };
            match #decided {
                ::core::result::Result::Ok(permit) => permit,
                ::core::result::Result::Err(#denied) => {
                    #[allow(clippy::useless_conversion)]
                    return ::core::result::Result::Err(#convert);
                }
            }
        };
        #[allow(clippy::redundant_closure_call)]
        let #result = #run;
        let #digest = {
            #[allow(unused_imports)]
            use ::toolgate::__private::{OpaqueOutput as _, SerializableOutput as _};
            #[allow(clippy::needless_borrow)]
            (&&::toolgate::__private::OutputOf::of(&#result)).__toolgate_digest()
        };
        #permit.finish(#result, #digest)
    }
}

/// What the lockfile locks beside the manifest: `escalate`, `redact` and `record_arguments` as written.
fn behaviour(call: &CallParts) -> TokenStream {
    let redacts = call.named.iter().any(|(_, redact)| *redact);
    if call.escalate.is_none() && !redacts && !call.record_arguments {
        return quote!(::toolgate::__private::Behaviour::NONE);
    }
    let escalate = match &call.escalate {
        Some(path) => {
            let text = path.to_token_stream().to_string().replace(' ', "");
            quote!(::core::option::Option::Some(#text))
        }
        None => quote!(::core::option::Option::None),
    };
    let redact = call
        .named
        .iter()
        .filter(|(_, redact)| *redact)
        .map(|(name, _)| name.to_string());
    let record_arguments = call.record_arguments;
    quote! {
        ::toolgate::__private::Behaviour {
            escalate: #escalate,
            redact: &[#(#redact),*],
            record_arguments: #record_arguments,
        }
    }
}

fn manifest(spec: &ToolSpec, attrs: &[Attribute], name: &Ident) -> TokenStream {
    let id = &spec.id;
    let domain = match &spec.domain {
        Some(domain) => quote!(::core::option::Option::Some(#domain)),
        None => quote!(::core::option::Option::None),
    };
    let description = match &spec.description {
        Some(text) => text.trim().to_token_stream(),
        None => doc::description(attrs),
    };
    let risk = risk_tokens(spec.risk);
    let side_effects = spec.side_effects;
    // The set as one number: a chain of `with` calls costs more to evaluate, for every tool.
    let modes = spec.modes.__bits();
    let idempotent = spec.idempotent;
    let open_world = spec.open_world;
    let line = quote_spanned!(name.span()=> ::core::line!());
    let untrusted_output = spec.untrusted_output.then(|| quote!(.__untrusted_output()));
    quote! {
        ::toolgate::__private::ToolManifest::__new(
            #id,
            #domain,
            #description,
            #risk,
            #side_effects,
            ::toolgate::__private::ModeSet::__from_bits(#modes),
            #idempotent,
            #open_world,
            ::toolgate::__private::Source::__new(
                ::core::file!(),
                #line,
                ::core::module_path!(),
            ),
        )
        #untrusted_output
    }
}

fn risk_tokens(risk: Risk) -> TokenStream {
    let variant = match risk {
        Risk::ReadOnly => quote!(ReadOnly),
        Risk::ProposeOnly => quote!(ProposeOnly),
        Risk::LowWrite => quote!(LowWrite),
        Risk::HighWrite => quote!(HighWrite),
    };
    quote!(::toolgate::__private::Risk::#variant)
}

fn mentions_fn(tokens: &TokenStream) -> bool {
    tokens
        .clone()
        .into_iter()
        .any(|tree| matches!(&tree, proc_macro2::TokenTree::Ident(ident) if ident == "fn"))
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
