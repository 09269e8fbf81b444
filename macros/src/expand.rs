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
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt as _;
use syn::spanned::Spanned;
use syn::{Attribute, Block, Item, Type};
use toolgate_policy::Risk;

use crate::ast::{
    CallParts, Context, Declaration, Owner, Tool, ToolFn, TypedBinding, is_self_type,
};
use crate::ctxt::Errors;
use crate::doc;
use crate::marker::{self, Marker};
use crate::valid::{self, Checked, ToolSpec};

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
            let context = member.as_ref().map_or(Context::BARE, Marker::context);
            // The whole `#[tool(...)]` attribute, for errors about what it lacks.
            let declaration = Declaration {
                args,
                span: Span::call_site(),
            };
            let tool = Tool::from_syn(declaration, &f.attrs, &f.sig, context, &mut errors);
            let expanded = expand_fn(&tool, &mut f.block, &mut errors);
            if let (
                Expanded::Tool {
                    callable: Some(span),
                    ..
                },
                Owner::Free,
            ) = (expanded, context.owner)
            {
                beside = free_function_only(&f.attrs, &f.sig.ident, span);
            }
        }
        other => errors.push(valid::not_a_function(other)),
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

/// Checks one tool declaration and, if it passed, inserts the gate check at the top of `block`.
pub(crate) fn expand_fn(tool: &Tool<'_>, block: &mut Block, errors: &mut Errors) -> Expanded {
    let spec = match valid::check(tool, errors) {
        Checked::Tool(spec) => spec,
        Checked::Skipped => return Expanded::Skipped,
        Checked::Failed => return Expanded::Failed,
    };
    let body = gated_body(&spec, tool, block);
    // Emitted as it is: parsing the generated statements back into syntax would only print them again.
    *block = Block {
        brace_token: block.brace_token,
        stmts: vec![syn::Stmt::Expr(syn::Expr::Verbatim(body), None)],
    };
    Expanded::Tool {
        id: spec.id,
        id_span: spec.id_span,
        callable: tool.call.callable.as_ref().map(|c| c.span),
    }
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
    call: &CallParts<'_>,
    value: impl Fn(&Ident) -> TokenStream,
    receiver: Option<Receiving<'_>>,
) -> Vec<TokenStream> {
    let mut args: Vec<(String, TokenStream)> = call
        .named
        .iter()
        .map(|&(ident, redact)| {
            let name = ident.unraw().to_string();
            let method = if redact {
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
    call: &CallParts<'_>,
    func: &ToolFn<'_>,
    reading: Reading<'_>,
    value: impl Fn(&Ident) -> TokenStream,
    this: Option<&TokenStream>,
    owner: Option<&Type>,
) -> Option<TokenStream> {
    let written = call.escalate.as_ref()?;
    let path = outside(written, owner);
    let ordered = every_argument(reading, func, &value);
    // Through a trait, so that a wrong signature is one error that says what the signature must be.
    Some(match this {
        Some(this) => quote_spanned!(path.span()=>
            ::toolgate::__private::classify_on(&#path, #this, (#(#ordered,)*))
        ),
        None => quote_spanned!(path.span()=>
            ::toolgate::__private::classify(&#path, (#(#ordered,)*))
        ),
    })
}

/// A function's path as generated code outside the impl names it: `Self::probe` is `<Files>::probe`
/// in the adapter of a call by name, an item of its own where `Self` means nothing.
fn outside(path: &syn::Path, owner: Option<&Type>) -> TokenStream {
    match (owner, path.segments.first()) {
        (Some(owner), Some(first)) if path.leading_colon.is_none() && first.ident == "Self" => {
            let rest = path.segments.iter().skip(1);
            quote_spanned!(first.ident.span()=> <#owner> #(:: #rest)*)
        }
        _ => path.to_token_stream(),
    }
}

/// The call of an `evidence` probe on the target `value`, through the receiver where it has one.
fn probe_call(path: &TokenStream, value: &TokenStream, this: Option<&TokenStream>) -> TokenStream {
    match this {
        Some(this) => quote_spanned!(path.span()=>
            ::toolgate::__private::probe_on(&#path, #this, #value)
        ),
        None => quote_spanned!(path.span()=> ::toolgate::__private::probe(&#path, #value)),
    }
}

/// A method's receiver, for the functions a declaration names (`escalate`, `rollback`, `evidence`),
/// which may be methods taking `&self` first: only where it is a shared reference, which the body
/// leaves usable after it.
fn shared_receiver(func: &ToolFn<'_>) -> Option<TokenStream> {
    let receiver = func.receiver?;
    match &receiver.kind {
        syn::ReceiverKind::Reference(_, _, None) => Some(receiver_ref(receiver)),
        _ => None,
    }
}

/// What a tool with lasting effects hands the gate, as an argument of its decision: its target, its
/// rollback function over the values named by `value` (where `with_plan`) and its evidence probe, each
/// called by the gate only once the tables allow the call. The references end with the call they are
/// an argument of.
fn effects_arg(
    call: &CallParts<'_>,
    func: &ToolFn<'_>,
    reading: Reading<'_>,
    value: impl Fn(&Ident) -> TokenStream,
    with_plan: bool,
    this: Option<&TokenStream>,
    owner: Option<&Type>,
) -> TokenStream {
    let none = quote!(::core::option::Option::None);
    let Some(effects) = &call.effects else {
        return none;
    };
    let target = match &effects.target {
        Some(name) => {
            let named = name.unraw().to_string();
            let value = target_value(reading, name, &value);
            quote!(::core::option::Option::Some(
                (&&::toolgate::__private::Arg(#value)).__toolgate_arg(#named)
            ))
        }
        None => none.clone(),
    };
    let rollback = match (&effects.rollback, with_plan) {
        (Some(written), true) => {
            let path = outside(written, owner);
            let ordered = every_argument(reading, func, &value);
            let plan = match this {
                Some(this) => quote_spanned!(path.span()=>
                    ::toolgate::__private::plan_on(&#path, #this, (#(#ordered,)*))
                ),
                None => quote_spanned!(path.span()=>
                    ::toolgate::__private::plan(&#path, (#(#ordered,)*))
                ),
            };
            quote_spanned!(path.span()=> ::core::option::Option::Some(&|| #plan))
        }
        _ => none.clone(),
    };
    let evidence = match (&effects.evidence, &effects.target) {
        (Some(written), Some(target)) => {
            let path = outside(written, owner);
            let value = target_value(reading, target, &value);
            let probe = probe_call(&path, &value, this);
            quote_spanned!(path.span()=> ::core::option::Option::Some(&|| #probe))
        }
        _ => none,
    };
    quote! {
        ::core::option::Option::Some(&::toolgate::__private::Effects {
            target: #target,
            rollback: #rollback,
            evidence: #evidence,
        })
    }
}

/// Where the keys that read a tool's arguments find them: its parameters by name, or, for an rmcp tool
/// gated in place, the `T` of its `Parameters<T>` (the value rmcp deserialized and hands the body), with
/// `target` naming a field of it.
#[derive(Clone, Copy)]
enum Reading<'a> {
    Named,
    Typed(TypedBinding<'a>),
}

impl Reading<'_> {
    fn of<'a>(tool: &Tool<'a>) -> Reading<'a> {
        match (tool.context.in_place, &tool.func.typed) {
            (Some(_), Some(typed)) => typed.binding.map_or(Reading::Named, Reading::Typed),
            _ => Reading::Named,
        }
    }
}

/// The target's value, as a place: the argument `target` names, or that field of the typed arguments.
fn target_value(
    reading: Reading<'_>,
    target: &Ident,
    by_name: &impl Fn(&Ident) -> TokenStream,
) -> TokenStream {
    match reading {
        Reading::Named => by_name(target),
        Reading::Typed(binding) => {
            let value = binding.value();
            // The field spanned as written in the declaration: a `T` without it is reported there.
            quote_spanned!(target.span()=> &#value.#target)
        }
    }
}

/// What the keys that read every argument are handed: a reference to each, in signature order, or to
/// the typed arguments.
fn every_argument(
    reading: Reading<'_>,
    func: &ToolFn<'_>,
    by_name: &impl Fn(&Ident) -> TokenStream,
) -> Vec<TokenStream> {
    match reading {
        Reading::Named => func
            .arguments()
            .filter_map(|param| param.name)
            .map(by_name)
            .collect(),
        Reading::Typed(binding) => {
            let value = binding.value();
            vec![quote!(&#value)]
        }
    }
}

/// The adapter of a `callable` tool: its table of parameters, its output schema, and a call of the tool
/// with its arguments parsed one parameter at a time.
fn callable_items(
    func: &ToolFn<'_>,
    call: &CallParts<'_>,
    params: &[(&Ident, &Type)],
    owner: Owner<'_>,
    attrs: &[Attribute],
) -> TokenStream {
    let (sig, gate) = (func.sig, func.gate);
    let names: Vec<&Ident> = params.iter().map(|&(name, _)| name).collect();
    // The adapter is an item in the tool's body, so it names the tool from outside the body: a free
    // function by its bare name, which resolves to the function itself (an import of the same name
    // would clash with it, and the generated items beside the adapter are all `__toolgate_`), an
    // associated function through its impl's type. `valid` refused every other case.
    // The bare name is resolved with `mixed_site` hygiene, which looks up items where the tool is
    // written but no local variable, so a parameter named like the tool cannot hide it.
    let fn_name = &sig.ident;
    let callee = match owner {
        Owner::Impl(of) => {
            let qualified_self = of.qualified();
            quote!(#qualified_self::#fn_name)
        }
        Owner::Free | Owner::GenericImpl(_) => {
            let mut bare = fn_name.clone();
            bare.set_span(Span::mixed_site());
            quote!(#bare)
        }
    };
    let invoke_gate = Ident::new("toolgate_gate", Span::mixed_site());
    let json = Ident::new("toolgate_json", Span::mixed_site());
    let instances = Ident::new("toolgate_instances", Span::mixed_site());
    // A method runs on the instance of its type the call was given; `valid` admitted only `&self`
    // methods of a non-generic impl.
    let this = Ident::new("toolgate_this", Span::mixed_site());
    let self_type = match (func.receiver, owner) {
        (Some(_), Owner::Impl(of)) => Some(of.self_ty),
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
    let local = |name: &Ident| {
        Ident::new(
            &format!("toolgate_arg_{}", name.unraw()),
            Span::mixed_site(),
        )
    };
    let locals: Vec<Ident> = names.iter().map(|name| local(name)).collect();
    let call_args: Vec<TokenStream> = receiver
        .iter()
        .cloned()
        .chain(func.params.iter().filter_map(|param| match param.name {
            Some(_) if param.is_gate => Some(quote!(#invoke_gate)),
            Some(name) => {
                let name = local(name);
                Some(quote!(#name))
            }
            None => None,
        }))
        .collect();
    let output_schema = match func.ok_type() {
        Some(ty) => quote! {{
            #[allow(unused_imports)]
            use ::toolgate::__private::{OutputWithSchema as _, OutputWithoutSchema as _};
            #[allow(clippy::needless_borrow)]
            (&&::toolgate::__private::Output::<#ty>::new()).__toolgate_output_schema()
        }},
        None => quote!(::core::option::Option::None),
    };
    let ret_span = func.output_span();
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
    let owned_by = match owner {
        Owner::Impl(of) => Some(of.self_ty),
        _ => None,
    };
    let escalated = match escalation(
        call,
        func,
        Reading::Named,
        by_local,
        receiver.as_ref(),
        owned_by,
    ) {
        Some(escalate) => quote!(::core::option::Option::Some(#escalate)),
        None => quote!(::core::option::Option::None),
    };
    let on_self = receiver.as_ref();
    let effects = effects_arg(
        call,
        func,
        Reading::Named,
        by_local,
        true,
        on_self,
        owned_by,
    );
    let effects_again = effects_arg(
        call,
        func,
        Reading::Named,
        by_local,
        false,
        on_self,
        owned_by,
    );
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
            &__TOOLGATE_ENTRY, #outright.then_some(#invoke_gate), #gate_parameter, #escalated, &[#(#arg_refs)*],
            #record_arguments, #effects,
        )
    }};
    let decided = Ident::new("toolgate_decided", Span::mixed_site());
    // An async tool's decision may wait (an async approver, a store); the references to the
    // arguments end with the first `let`, before any await.
    let step = Ident::new("toolgate_step", Span::mixed_site());
    // The generated code's own locals: hygienic, so that no parameter of the tool is taken for one.
    let waiting = Ident::new("toolgate_waiting", Span::mixed_site());
    let confirming = Ident::new("toolgate_confirming", Span::mixed_site());
    let refusing = Ident::new("toolgate_refusing", Span::mixed_site());
    let take_decision = quote! {
        let #step = {
            #[allow(unused_imports)]
            use ::toolgate::__private::{OpaqueArg as _, SerializableArg as _};
            ::toolgate::__private::decide_async(
                &__TOOLGATE_ENTRY, #outright.then_some(#invoke_gate), #gate_parameter, #escalated, &[#(#arg_refs)*],
                #record_arguments, #effects,
            )
        };
        let #decided = match #step {
            ::toolgate::__private::DecidingByName::Done(#decided) => #decided,
            ::toolgate::__private::DecidingByName::Waiting(#waiting) => {
                let #decided = ::toolgate::__private::resume(#waiting).await;
                #[allow(unused_imports)]
                use ::toolgate::__private::{OpaqueArg as _, SerializableArg as _};
                // The references to the arguments end with the `let`, before the await.
                let #confirming = ::toolgate::__private::confirm_handed(
                    #decided, #escalated, &[#(#arg_refs)*], #record_arguments, #effects_again,
                );
                match #confirming {
                    ::core::result::Result::Ok(#decided) => ::core::result::Result::Ok(#decided),
                    ::core::result::Result::Err(#refusing) => {
                        ::core::result::Result::Err(#refusing.await)
                    }
                }
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
    let described = doc::parameters(attrs);
    let rows = params.iter().map(|(name, ty)| {
        let name = name.unraw().to_string();
        let row = quote_spanned!(ty.span()=> ::toolgate::__private::Param::of::<#ty>(#name));
        match described.iter().find(|(n, _)| *n == name) {
            Some((_, text)) => quote!(#row.described(#text)),
            None => row,
        }
    });
    let takes = params.iter().zip(&locals).map(|((name, ty), local)| {
        let redacted = call.named.iter().any(|(n, redact)| *redact && n == name);
        let name = name.unraw().to_string();
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

/// The new body: decide, run the original body, hand its result to the permit, return it.
fn gated_body(spec: &ToolSpec, tool: &Tool<'_>, body: &Block) -> TokenStream {
    let (func, call, context) = (&tool.func, &tool.call, tool.context);
    let (sig, gate) = (func.sig, func.gate);
    let manifest = manifest(spec, tool.attrs, &sig.ident);
    let hygienic = |name: &str| Ident::new(name, Span::mixed_site());
    let (permit, entry, result, digest, info) = (
        hygienic("toolgate_permit"),
        hygienic("__TOOLGATE_ENTRY"),
        hygienic("toolgate_result"),
        hygienic("toolgate_digest"),
        hygienic("toolgate_call"),
    );
    let ret_span = func.output_span();
    // Named with the return type's span, so that an error type without `From<Denied>` is reported there.
    let denied = Ident::new("toolgate_denied", ret_span);
    let convert = quote_spanned!(ret_span=> ::core::convert::From::from(#denied));
    // A `&Gate` written as `&Gate` is the call's gate; one written otherwise (a renamed import, a type
    // alias) is found by its type: each reference parameter is asked whether it is a `Gate`, which
    // costs nothing for one that is not (the answer is a constant `None`).
    let probes: Vec<TokenStream> = func
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
    let fast = match (&call.escalate, &call.effects) {
        (None, None) => quote!(::toolgate::__private::allows(&#entry, #gate_arg)),
        _ => quote!(false),
    };
    // The arguments, for the gate to look at when it needs to: a reference to each.
    let by_name = |ident: &Ident| quote_spanned!(ident.span()=> &#ident);
    // A method's receiver decides what the call does as much as any argument
    // (`staging.drop_table(..)` against `production.drop_table(..)`), so the gate sees it, named
    // `self`, beside the arguments.
    let receiver = func.receiver.map(receiver_ref);
    let receiving = receiver
        .as_ref()
        .map(|value| Receiving { value, label: None });
    let mut args = argument_refs(call, by_name, receiving);
    // In place, the redacted fields of the typed arguments, for the decision to hide their values
    // wherever the call's JSON holds them (serde may read a field under another name).
    let reading = Reading::of(tool);
    if let Reading::Typed(binding) = reading {
        let value = binding.value();
        for field in &call.redacted {
            let name = field.unraw().to_string();
            args.push(quote_spanned!(field.span()=>
                (&&::toolgate::__private::Arg(&#value.#field)).__toolgate_redacted(#name),
            ));
        }
    }
    let escalated_arg = match &call.escalate {
        Some(_) => quote!(::core::option::Option::Some(#info)),
        None => quote!(::core::option::Option::None),
    };
    let this = shared_receiver(func);
    let effects = effects_arg(call, func, reading, by_name, true, this.as_ref(), None);
    let effects_again = effects_arg(call, func, reading, by_name, false, this.as_ref(), None);
    let enter = match sig.asyncness.is_some() {
        false => quote!(::toolgate::__private::enter(
            &#entry, #gate_arg, #escalated_arg, &[#(#args)*], #record_arguments, #effects
        )),
        // An async tool's decision may wait (an async approver, a store): it is awaited here, inside
        // the tool's own future. The references to the arguments end with the `let`, before the
        // await, so the future stays `Send`.
        true => {
            let step = Ident::new("toolgate_step", Span::mixed_site());
            let waiting = Ident::new("toolgate_waiting", Span::mixed_site());
            let resuming = Ident::new("toolgate_resuming", Span::mixed_site());
            let refused = Ident::new("toolgate_refused", Span::mixed_site());
            let confirming = Ident::new("toolgate_confirming", Span::mixed_site());
            let refusing = Ident::new("toolgate_refusing", Span::mixed_site());
            let start = quote!(::toolgate::__private::enter_async(
                &#entry, #gate_arg, #escalated_arg, &[#(#args)*], #record_arguments, #effects
            ));
            // After a wait, the arguments must still be those the approval saw.
            quote! {{
                let #step = #start;
                match #step {
                    ::toolgate::__private::Entering::Done(#decided) => #decided,
                    // One await for the decision and, if the last comparison refuses the call, the
                    // release of its budget units: a second would grow every async tool's future.
                    ::toolgate::__private::Entering::Waiting(#waiting) => {
                        let mut #resuming = ::toolgate::__private::Resuming::Deciding(#waiting);
                        loop {
                            match (&mut #resuming).await {
                                ::toolgate::__private::Resumed::Decided(#decided) => {
                                    let #confirming = ::toolgate::__private::confirm(
                                        &#entry, #decided, #escalated_arg, &[#(#args)*],
                                        #record_arguments, #effects_again
                                    );
                                    match #confirming {
                                        ::core::result::Result::Ok(#decided) => {
                                            break ::core::result::Result::Ok(#decided);
                                        }
                                        ::core::result::Result::Err(#refusing) => {
                                            #resuming =
                                                ::toolgate::__private::Resuming::Refusing(#refusing);
                                        }
                                    }
                                }
                                ::toolgate::__private::Resumed::Refused(#refused) => {
                                    break ::core::result::Result::Err(#refused);
                                }
                            }
                        }
                    }
                }
            }}
        }
    };
    let escalated = escalation(call, func, reading, by_name, this.as_ref(), None).map(|escalate| {
        let risk = quote_spanned!(escalate.span()=> ::toolgate::__private::Risk);
        quote! {
            let #info: #risk = #escalate;
        }
    });
    // A call by name decided already hands its decision over: taken before anything else runs, the
    // `escalate` function included.
    // (A tool gated in place is not handed a decision: its check decides with the arguments the server
    // hands it, at the commit point.)
    let handed = call.callable.is_some().then(|| {
        quote! {
            if let ::core::option::Option::Some(permit) = ::toolgate::__private::handed(&#entry) {
                ::core::result::Result::Ok(permit)
            } else
        }
    });
    let behaviour = behaviour(call, sig.asyncness.is_some(), reading);
    let (callable_items, callable_ref) = match &call.callable {
        Some(callable) => (
            callable_items(func, call, &callable.params, context.owner, tool.attrs),
            quote!(::core::option::Option::Some(&__TOOLGATE_CALLABLE)),
        ),
        None => (TokenStream::new(), quote!(::core::option::Option::None)),
    };
    let new_entry = match (context.in_place, context.owner) {
        (Some(_), Owner::Impl(of)) => {
            let owner = of.self_ty;
            let method = &sig.ident;
            let attr = format_ident!("{}_tool_attr", method);
            // The method's own route, as rmcp's `#[tool_router]` makes it: the server runs it for the
            // tool's name, whatever route of that name the handler's router holds.
            quote!(::toolgate::__private::ToolEntry::__in_place(
                #manifest, #behaviour, ::core::any::TypeId::of::<#owner>, {
                    fn toolgate_route() -> ::toolgate::__private::InPlaceRoute {
                        ::toolgate::__private::in_place_route(<#owner>::#attr, <#owner>::#method)
                    }
                    toolgate_route
                }
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
    let pin_type = match func.nameable_output() {
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
    // The probe reads the target again after the body, which takes the argument: a copy is kept.
    let (keep, observe_after) = match call
        .effects
        .as_ref()
        .and_then(|e| e.evidence.as_ref().zip(e.target.as_ref()))
    {
        Some((path, target)) => {
            let kept = hygienic("toolgate_kept_target");
            let value = target_value(reading, target, &by_name);
            (
                quote_spanned!(target.span()=>
                    let #kept = ::toolgate::__private::keep_target(#value);
                ),
                {
                    let probe = probe_call(&path.to_token_stream(), &quote!(&#kept), this.as_ref());
                    quote_spanned!(path.span()=> #permit.observe_after(|| #probe);)
                },
            )
        }
        None => (TokenStream::new(), TokenStream::new()),
    };
    let run = match (sig.asyncness.is_some(), func.nameable_output()) {
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
        #keep
        #[allow(clippy::redundant_closure_call)]
        let #result = #run;
        #observe_after
        let #digest = {
            #[allow(unused_imports)]
            use ::toolgate::__private::{OpaqueOutput as _, SerializableOutput as _};
            #[allow(clippy::needless_borrow)]
            (&&::toolgate::__private::OutputOf::of(&#result)).__toolgate_digest()
        };
        #permit.finish(#result, #digest)
    }
}

/// What the lockfile locks beside the manifest: `escalate`, `redact`, `record_arguments`, `evidence`
/// and `rollback` as written.
fn behaviour(call: &CallParts<'_>, is_async: bool, reading: Reading<'_>) -> TokenStream {
    // A tool's named arguments, or, read from typed arguments, the fields `redact` lists.
    let redact: Vec<String> = match reading {
        Reading::Named => call
            .named
            .iter()
            .filter(|(_, redact)| *redact)
            .map(|(name, _)| name.unraw().to_string())
            .collect(),
        Reading::Typed(_) => call
            .redacted
            .iter()
            .map(|n| n.unraw().to_string())
            .collect(),
    };
    let redacts = !redact.is_empty();
    if call.escalate.is_none()
        && call.effects.is_none()
        && !redacts
        && !call.record_arguments
        && !is_async
    {
        return quote!(::toolgate::__private::Behaviour::NONE);
    }
    let written = |path: Option<&syn::Path>| match path {
        Some(path) => {
            let text = path.to_token_stream().to_string().replace(' ', "");
            quote!(::core::option::Option::Some(#text))
        }
        None => quote!(::core::option::Option::None),
    };
    let effects = call.effects.as_ref();
    let evidence = written(effects.and_then(|e| e.evidence.as_ref()));
    let rollback = written(effects.and_then(|e| e.rollback.as_ref()));
    let escalate = match &call.escalate {
        Some(path) => {
            let text = path.to_token_stream().to_string().replace(' ', "");
            quote!(::core::option::Option::Some(#text))
        }
        None => quote!(::core::option::Option::None),
    };
    let record_arguments = call.record_arguments;
    quote! {
        ::toolgate::__private::Behaviour {
            escalate: #escalate,
            redact: &[#(#redact),*],
            record_arguments: #record_arguments,
            is_async: #is_async,
            evidence: #evidence,
            rollback: #rollback,
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
    let out_of_band = spec.out_of_band.then(|| quote!(.__out_of_band()));
    let title = spec.title.as_ref().map(|title| quote!(.__title(#title)));
    let declared = spec.irreversible || spec.target.is_some() || spec.evidence || spec.rollback;
    let effects = declared.then(|| {
        let (irreversible, evidence, rollback) = (spec.irreversible, spec.evidence, spec.rollback);
        let target = match &spec.target {
            Some(name) => quote!(::core::option::Option::Some(#name)),
            None => quote!(::core::option::Option::None),
        };
        quote!(.__effects(#irreversible, #target, #evidence, #rollback))
    });
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
        #out_of_band
        #title
        #effects
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
