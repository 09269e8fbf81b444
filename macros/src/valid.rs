//! Checks a tool's model against the policy table and against itself, and works out its defaults.
//!
//! Input:  a [`Tool`] as read (`ast`): its arguments as written, its signature, its context.
//! Output: [`Checked`]: a [`ToolSpec`] that is consistent by construction, or errors on the offending
//!         tokens. Every rule of what makes a tool is here; `expand` emits only what passed.

use proc_macro2::{Ident, Span};
use syn::ext::IdentExt as _;
use syn::spanned::Spanned as _;
use syn::{Item, Type};
use toolgate_policy::suggest::{closest, did_you_mean};
use toolgate_policy::{self as policy, Mode, ModeSet, Risk};

use crate::ast::{InPlace, Owner, Tool, is_self_type};
use crate::attr::{MODE_NAMES, Spanned, ToolArgs};
use crate::ctxt::Errors;
use crate::doc;

/// What the checks make of one declaration.
pub(crate) enum Checked {
    /// A tool that passed every check.
    Tool(ToolSpec),
    /// `#[tool(skip)]` in a `#[toolset]`: not a tool.
    Skipped,
    /// The declaration has errors: the function is left as it is.
    Failed,
}

/// A declaration that passed every check, with its defaults worked out.
pub(crate) struct ToolSpec {
    pub(crate) id: String,
    pub(crate) id_span: Span,
    pub(crate) domain: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) risk: Risk,
    pub(crate) side_effects: bool,
    pub(crate) modes: ModeSet,
    pub(crate) idempotent: bool,
    pub(crate) open_world: bool,
    pub(crate) untrusted_output: bool,
    pub(crate) irreversible: bool,
    pub(crate) out_of_band: bool,
    /// `annotations(title = ..)`.
    pub(crate) title: Option<String>,
    /// The `target` parameter's name, unraw'd.
    pub(crate) target: Option<String>,
    pub(crate) evidence: bool,
    pub(crate) rollback: bool,
}

const RISK_NAMES: &[&str] = &Risk::NAMES;
pub(crate) const MAX_ID_LEN: usize = 64;

/// Checks `tool`, each rule in turn so that every error is reported at once, in the order a reader
/// meets them: the keys, the signature, the arguments, then the policy.
pub(crate) fn check(tool: &Tool<'_>, errors: &mut Errors) -> Checked {
    let before = errors.len();
    if let Some(in_place) = tool.context.in_place {
        in_place_keys(tool, in_place, errors);
    }
    if let Some(skip) = &tool.args.skip {
        if tool.context.in_place.is_none() {
            skip_alone(tool, skip.span, errors);
        }
        return if errors.len() > before || tool.args.malformed {
            Checked::Failed
        } else {
            Checked::Skipped
        };
    }
    signature(tool, errors);
    arguments(tool, errors);
    if tool.call.callable.is_some() {
        callable(tool, errors);
    }
    output(tool, errors);
    let spec = match tool.context.in_place {
        Some(in_place) => spec_in_place(tool, in_place, errors),
        None => spec(tool, errors),
    };
    match spec {
        Some(spec) if errors.len() == before && !tool.args.malformed => Checked::Tool(spec),
        _ => Checked::Failed,
    }
}

/// What a declaration beside rmcp's `#[tool]` cannot say: rmcp names and routes the tool, and hands it
/// its arguments through its extractors.
fn in_place_keys(tool: &Tool<'_>, in_place: &InPlace, errors: &mut Errors) {
    let args = &tool.args;
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
    if let Some(skip) = &args.skip {
        errors.push(syn::Error::new(
            skip.span,
            "an rmcp tool cannot skip its declaration: every tool rmcp serves is decided by a gate",
        ));
    }
    if let Some(annotations) = &args.annotations {
        errors.push(syn::Error::new(
            annotations.span,
            "an rmcp tool's annotations are rmcp's: write them in its #[tool(annotations(..))], and \
             the server lists them with the hints of this declaration",
        ));
    }
    typed_arguments(tool, errors);
    match tool.context.owner {
        Owner::Impl(_) => {}
        Owner::Free => errors.push(syn::Error::new(
            tool.attr_span,
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

/// `#[tool(skip)]` marks a function of a set, and says nothing else.
fn skip_alone(tool: &Tool<'_>, skip: Span, errors: &mut Errors) {
    if !tool.context.in_toolset {
        errors.push(syn::Error::new(
            skip,
            "`skip` marks a function of a #[toolset] as not a tool; outside a #[toolset], remove \
             the #[tool] attribute instead",
        ));
    }
    if let Some((_, span)) = tool.args.spans().find(|(key, _)| *key != "skip") {
        errors.push(syn::Error::new(
            span,
            "#[tool(skip)] takes no other argument: a skipped function is not a tool",
        ));
    }
}

/// What keeps a function from being a tool: a `const fn`, a method outside a toolset, a return type
/// that is not a `Result`, a second or unnamed `&Gate`.
fn signature(tool: &Tool<'_>, errors: &mut Errors) {
    let func = &tool.func;
    if let Some(constness) = &func.sig.constness {
        errors.push(syn::Error::new(
            constness.span,
            "a tool cannot be a `const fn`: the gate decides each call at run time",
        ));
    }
    if let (Some(receiver), false) = (func.receiver, tool.context.in_toolset) {
        errors.push(syn::Error::new(
            receiver.self_token.span,
            "#[tool] on a method needs #[toolset] on its impl block, which checks that every pub \
             method declares its risk",
        ));
    }
    match func.output {
        None => errors.push(syn::Error::new(
            func.sig.paren_token.span.close(),
            "a tool must return `Result<T, E>` where `E: From<toolgate::Denied>`, so that a \
             refused call can return its refusal",
        )),
        Some(ty) if !is_result(ty) => errors.push(syn::Error::new(
            ty.span(),
            "a tool must return `Result<T, E>` (any path ending in `Result`) where \
             `E: From<toolgate::Denied>`, so that a refused call can return its refusal",
        )),
        Some(_) => {}
    }
    let mut gate = false;
    for param in func.params.iter().filter(|param| param.is_gate) {
        match (param.name, gate) {
            (_, true) => errors.push(syn::Error::new(
                param.ty.span(),
                "a tool takes at most one `&Gate` parameter",
            )),
            (Some(_), false) => gate = true,
            (None, false) => errors.push(syn::Error::new(
                param.pat.span(),
                "bind the `&Gate` parameter to a name (such as `gate: &Gate`): the check reads it",
            )),
        }
    }
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

/// `redact` names arguments; `escalate` is handed each argument by name.
fn arguments(tool: &Tool<'_>, errors: &mut Errors) {
    // In place, `redact` names fields of the typed arguments: the compiler checks that they exist.
    if let (Some(redact), Some(target), Some(_)) =
        (&tool.args.redact, &tool.args.target, tool.context.in_place)
        && let Some(name) = redact.value.iter().find(|name| **name == target.value)
    {
        errors.push(target_redacted(name.span(), name));
    }
    if let (Some(redact), None) = (&tool.args.redact, tool.context.in_place) {
        let names: Vec<String> = tool
            .call
            .named
            .iter()
            .map(|(n, _)| n.unraw().to_string())
            .collect();
        let candidates: Vec<&str> = names.iter().map(String::as_str).collect();
        for name in &redact.value {
            if !tool.call.named.iter().any(|(named, _)| *named == name) {
                errors.push(syn::Error::new(
                    name.span(),
                    format!(
                        "`{name}` is not a named argument of this tool{}",
                        did_you_mean(&name.to_string(), &candidates)
                    ),
                ));
            }
        }
    }
    if let (Some(escalate), true, None) = (
        &tool.args.escalate,
        tool.call.unnamed,
        tool.context.in_place,
    ) {
        errors.push(syn::Error::new(
            escalate.span,
            "`escalate` passes the tool's arguments by name: bind every argument to a name",
        ));
    }
    effects(tool, errors);
}

/// The target named in `redact`, by the tool's arguments or, in place, its typed arguments' fields.
fn target_redacted(span: Span, name: &Ident) -> syn::Error {
    syn::Error::new(
        span,
        format!(
            "`{name}` is the target, which whoever approves a call sees and types back: it cannot \
             be redacted"
        ),
    )
}

/// `target` names an argument the approver sees; `evidence` probes it; `rollback` is handed every
/// argument by name; `irreversible` needs a target and its evidence.
fn effects(tool: &Tool<'_>, errors: &mut Errors) {
    let args = &tool.args;
    let in_place = tool.context.in_place.is_some();
    // In place, `target` names a field of the typed arguments: the compiler checks that it has one.
    if let (Some(target), false) = (&args.target, in_place) {
        let name = &target.value;
        let found = tool.call.named.iter().find(|(named, _)| *named == name);
        match found {
            None => {
                let names: Vec<String> = tool
                    .call
                    .named
                    .iter()
                    .map(|(n, _)| n.unraw().to_string())
                    .collect();
                let candidates: Vec<&str> = names.iter().map(String::as_str).collect();
                errors.push(syn::Error::new(
                    target.span,
                    format!(
                        "`{name}` is not a named argument of this tool{}",
                        did_you_mean(&name.to_string(), &candidates)
                    ),
                ));
            }
            Some((_, true)) => errors.push(target_redacted(target.span, name)),
            Some((_, false)) => {}
        }
    }
    if let (Some(evidence), None) = (&args.evidence, &args.target) {
        errors.push(syn::Error::new(
            evidence.span,
            "`evidence` probes the tool's target: name the argument it reads with `target = ..`",
        ));
    }
    if let (Some(rollback), true, false) = (&args.rollback, tool.call.unnamed, in_place) {
        errors.push(syn::Error::new(
            rollback.span,
            "`rollback` passes the tool's arguments by name: bind every argument to a name",
        ));
    }
    if let Some(irreversible) = args.irreversible.as_ref().filter(|i| i.value) {
        let lacks: Vec<&str> = [
            (
                args.target.is_none(),
                "`target = ..` (the argument that names what it acts on)",
            ),
            (
                args.evidence.is_none(),
                "`evidence = ..` (a read-only probe of the target)",
            ),
        ]
        .into_iter()
        .filter_map(|(missing, what)| missing.then_some(what))
        .collect();
        if !lacks.is_empty() {
            errors.push(syn::Error::new(
                irreversible.span,
                format!(
                    "an irreversible tool acts on one target at a time, shown as it is before it \
                     is approved: add {}",
                    lacks.join(" and ")
                ),
            ));
        }
    }
}

/// A call by name must reach exactly this function: one without generics, whose parameters are named
/// and owned, whose name the adapter can write so that it resolves to this function and nothing else,
/// and, for a method, one that takes `&self` in a non-generic impl. It needs a description, which MCP
/// clients show the model.
fn callable(tool: &Tool<'_>, errors: &mut Errors) {
    let func = &tool.func;
    let sig = func.sig;
    if let (Some(receiver), Owner::Impl(_)) = (func.receiver, tool.context.owner)
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
    if let Owner::GenericImpl(generics) = tool.context.owner {
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
    for param in &func.params {
        if param.name.is_none() {
            errors.push(syn::Error::new(
                param.pat.span(),
                "a `callable` tool's parameters are named: JSON arguments are matched by name",
            ));
        } else if let (false, Some(problem)) = (param.is_gate, unowned(param.ty)) {
            errors.push(syn::Error::new_spanned(
                param.ty,
                format!(
                    "a `callable` tool takes owned arguments, deserialized from JSON: {problem}"
                ),
            ));
        }
    }
    let described = tool
        .args
        .description
        .as_ref()
        .map_or(!doc::is_empty(tool.attrs), |d| !d.value.trim().is_empty());
    if let (Some(callable), false) = (&tool.call.callable, described) {
        errors.push(syn::Error::new(
            callable.span,
            "a `callable` tool needs a description, which MCP clients show the model to choose its \
             tools by: add a doc comment (`/// Deletes a user account.`) or `description = \"...\"`",
        ));
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

/// `untrusted_output` marks what the agent reads from a tool: a tool that returns `()` gives nothing.
fn output(tool: &Tool<'_>, errors: &mut Errors) {
    let untrusted = tool.args.untrusted_output.as_ref().filter(|u| u.value);
    if let (Some(untrusted), Some(Type::Tuple(unit))) = (untrusted, tool.func.ok_type())
        && unit.elems.is_empty()
    {
        errors.push(syn::Error::new(
            untrusted.span,
            "`untrusted_output` on a tool that returns `()`: the agent reads nothing from it to \
             distrust; return what the tool read, or remove `untrusted_output`",
        ));
    }
}

/// The spec of a tool: its id is the one written, else `<domain>.<fn name>`.
fn spec(tool: &Tool<'_>, errors: &mut Errors) -> Option<ToolSpec> {
    let args = &tool.args;
    let fn_name = &tool.func.sig.ident;
    let domain = declared_domain(args, tool.context.domain, errors);
    let (id, id_span) = match &args.id {
        Some(id) => {
            let valid = check_dotted(id, "id", Some(MAX_ID_LEN), errors);
            (valid.then(|| id.value.clone()), id.span)
        }
        None => {
            let name = fn_name.unraw().to_string();
            let derived = match &domain {
                Some(domain) => format!("{domain}.{name}"),
                None => name,
            };
            let derived_arg = Spanned {
                value: derived,
                span: fn_name.span(),
            };
            let valid = check_derived_id(&derived_arg, errors);
            (valid.then_some(derived_arg.value), fn_name.span())
        }
    };
    finish(args, id, id_span, domain, (tool.attr_span, "tool"), errors)
}

/// The keys that read a tool's typed arguments read, in place, the `T` of its `Parameters<T>`: the
/// value rmcp deserialized from the call and hands the body. They need it bound to a name.
fn typed_arguments(tool: &Tool<'_>, errors: &mut Errors) {
    let args = &tool.args;
    let readers = [
        ("escalate", args.escalate.as_ref().map(|e| e.span)),
        ("target", args.target.as_ref().map(|t| t.span)),
        ("rollback", args.rollback.as_ref().map(|r| r.span)),
        ("redact", args.redact.as_ref().map(|r| r.span)),
    ];
    let readers: Vec<(&str, Span)> = readers
        .into_iter()
        .filter_map(|(key, span)| Some((key, span?)))
        .collect();
    match &tool.func.typed {
        None => {
            for (key, span) in readers {
                errors.push(syn::Error::new(
                    span,
                    format!(
                        "`{key}` reads the tool's typed arguments, the `T` of a `Parameters<T>` \
                         parameter, which this method does not take"
                    ),
                ));
            }
        }
        Some(typed) if typed.binding.is_none() && !readers.is_empty() => {
            let keys: Vec<String> = readers.iter().map(|(key, _)| format!("`{key}`")).collect();
            errors.push(syn::Error::new(
                typed.pat.span(),
                format!(
                    "{} {} the tool's typed arguments: bind them to a name, as in \
                     `Parameters(args): Parameters<T>`",
                    keys.join(" and "),
                    if keys.len() == 1 { "reads" } else { "read" },
                ),
            ));
        }
        Some(_) => {}
    }
}

/// [`spec`] for a method of an rmcp handler, declared with `#[toolgate(..)]`: its id is its name in
/// rmcp, which MCP clients call it by, so it follows MCP's rule for tool names rather than toolgate's
/// dotted ids; the set's domain is its domain, not a prefix of its id.
fn spec_in_place(tool: &Tool<'_>, in_place: &InPlace, errors: &mut Errors) -> Option<ToolSpec> {
    let args = &tool.args;
    let domain = declared_domain(args, tool.context.domain, errors);
    let name = &in_place.name;
    let valid = match mcp_name_problem(name) {
        Some(problem) => {
            errors.push(syn::Error::new(
                in_place.name_span,
                format!(
                    "the rmcp tool name `{name}` cannot be a tool id: {problem}; an MCP tool name is \
                     1 to {MAX_ID_LEN} of `A-Z a-z 0-9 _ - . /`"
                ),
            ));
            false
        }
        None => true,
    };
    let id = valid.then(|| name.clone());
    let attribute = (tool.attr_span, "toolgate");
    finish(args, id, in_place.name_span, domain, attribute, errors)
}

fn mcp_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".to_owned());
    }
    if name.len() > MAX_ID_LEN {
        return Some(format!("it is {} characters long", name.len()));
    }
    name.chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')))
        .map(|c| format!("it has the character {c:?}"))
}

fn declared_domain(
    args: &ToolArgs,
    inherited_domain: Option<&str>,
    errors: &mut Errors,
) -> Option<String> {
    match &args.domain {
        Some(domain) => check_dotted(domain, "domain", None, errors).then(|| domain.value.clone()),
        None => inherited_domain.map(str::to_owned),
    }
}

fn finish(
    args: &ToolArgs,
    id: Option<String>,
    id_span: Span,
    domain: Option<String>,
    (attr_span, attribute): (Span, &str),
    errors: &mut Errors,
) -> Option<ToolSpec> {
    let risk = match &args.risk {
        None if args.risk_attempted => None,
        None => {
            errors.push(syn::Error::new(
                attr_span,
                format!(
                    "#[{attribute}] needs a risk: add `risk = \"...\"`, one of {}",
                    RISK_NAMES.join(", ")
                ),
            ));
            None
        }
        Some(risk) => parse_risk(risk, errors),
    };

    let side_effects = risk.and_then(|risk| check_side_effects(risk, args, errors));
    let modes = risk.and_then(|risk| check_modes(risk, args.modes.as_ref(), errors));
    let irreversible = args.irreversible.as_ref().filter(|i| i.value);
    if let (Some(irreversible), Some(risk)) = (irreversible, risk)
        && risk != Risk::HighWrite
    {
        errors.push(syn::Error::new(
            irreversible.span,
            format!(
                "`irreversible` marks a HIGH_WRITE tool, and this one is {risk}: a call that cannot \
                 be undone is the highest risk; declare `risk = \"HIGH_WRITE\"`, or remove \
                 `irreversible`"
            ),
        ));
        return None;
    }
    let hints = risk.and_then(|risk| check_hints(risk, args, errors));
    let out_of_band = args.out_of_band.as_ref().filter(|o| o.value);
    if let (Some(out_of_band), Some(_)) = (out_of_band, irreversible) {
        errors.push(syn::Error::new(
            out_of_band.span,
            "`out_of_band` says nothing here: an irreversible tool's calls are approved out of band \
             always, never by whoever drives the client; remove `out_of_band`",
        ));
        return None;
    }

    Some(ToolSpec {
        id: id?,
        id_span,
        domain,
        description: args.description.as_ref().map(|d| d.value.clone()),
        risk: risk?,
        side_effects: side_effects?,
        modes: modes?,
        idempotent: hints?.idempotent,
        open_world: hints?.open_world,
        untrusted_output: args.untrusted_output.as_ref().is_some_and(|f| f.value),
        irreversible: irreversible.is_some(),
        out_of_band: out_of_band.is_some(),
        title: args
            .annotations
            .as_ref()
            .and_then(|a| a.value.title.as_ref())
            .map(|t| t.value.clone()),
        target: args.target.as_ref().map(|t| t.value.unraw().to_string()),
        evidence: args.evidence.is_some(),
        rollback: args.rollback.is_some(),
    })
}

/// What the hints of `annotations(..)` leave the manifest with.
#[derive(Clone, Copy)]
struct Hints {
    idempotent: bool,
    open_world: bool,
}

/// rmcp's hints in `annotations(..)`: `read_only_hint` and `destructive_hint` must say what the risk
/// says (the listed hints are the risk's), `idempotent_hint` and `open_world_hint` are the keys
/// `idempotent` and `open_world`, and must agree with them where both are written.
fn check_hints(risk: Risk, args: &ToolArgs, errors: &mut Errors) -> Option<Hints> {
    let before = errors.len();
    let key = |flag: &Option<Spanned<bool>>| flag.as_ref().map(|f| f.value);
    let mut hints = Hints {
        idempotent: key(&args.idempotent).unwrap_or(false),
        open_world: key(&args.open_world).unwrap_or(false),
    };
    let Some(annotations) = args.annotations.as_ref().map(|a| &a.value) else {
        return Some(hints);
    };
    let read_only = matches!(risk, Risk::ReadOnly | Risk::ProposeOnly);
    let destructive = risk == Risk::HighWrite;
    for (hint, name, says) in [
        (&annotations.read_only_hint, "read_only_hint", read_only),
        (
            &annotations.destructive_hint,
            "destructive_hint",
            destructive,
        ),
    ] {
        if let Some(hint) = hint.as_ref().filter(|h| h.value != says) {
            errors.push(syn::Error::new(
                hint.span,
                format!(
                    "`{name} = {}` says otherwise than `risk = \"{risk}\"`, from which the listed \
                     hints are made ({name} = {says}): declare the risk the hint means, or remove \
                     the hint",
                    hint.value
                ),
            ));
        }
    }
    for (hint, name, flag, key_name, slot) in [
        (
            &annotations.idempotent_hint,
            "idempotent_hint",
            &args.idempotent,
            "idempotent",
            &mut hints.idempotent,
        ),
        (
            &annotations.open_world_hint,
            "open_world_hint",
            &args.open_world,
            "open_world",
            &mut hints.open_world,
        ),
    ] {
        let Some(hint) = hint else { continue };
        match flag {
            Some(flag) if flag.value != hint.value => errors.push(syn::Error::new(
                hint.span,
                format!(
                    "`{name} = {}` contradicts `{key_name} = {}`: they are one fact; keep one",
                    hint.value, flag.value
                ),
            )),
            _ => *slot = hint.value,
        }
    }
    (errors.len() == before).then_some(hints)
}

fn parse_risk(risk: &Spanned<String>, errors: &mut Errors) -> Option<Risk> {
    let found = Risk::ALL.into_iter().find(|r| r.as_str() == risk.value);
    if found.is_none() {
        let hint = match closest(&risk.value, RISK_NAMES) {
            Some(name) => format!("; did you mean `{name}`?"),
            None => format!("; expected one of {}", RISK_NAMES.join(", ")),
        };
        errors.push(syn::Error::new(
            risk.span,
            format!("unknown risk `{}`{hint}", risk.value),
        ));
    }
    found
}

fn check_side_effects(risk: Risk, args: &ToolArgs, errors: &mut Errors) -> Option<bool> {
    match &args.side_effects {
        None => Some(risk.is_write()),
        Some(declared) if declared.value == risk.is_write() => Some(declared.value),
        Some(declared) if declared.value => {
            errors.push(syn::Error::new(
                declared.span,
                format!(
                    "a {risk} tool has no side effects: declare LOW_WRITE or HIGH_WRITE if it \
                     changes state, or remove `side_effects`"
                ),
            ));
            None
        }
        Some(declared) => {
            errors.push(syn::Error::new(
                declared.span,
                format!(
                    "a {risk} tool changes state: `side_effects = false` contradicts its risk \
                     (side effects are implied for LOW_WRITE and HIGH_WRITE)"
                ),
            ));
            None
        }
    }
}

fn check_modes(
    risk: Risk,
    declared: Option<&Spanned<Vec<Ident>>>,
    errors: &mut Errors,
) -> Option<ModeSet> {
    let admitted = policy::modes_admitting(risk);
    let Some(declared) = declared else {
        return Some(admitted);
    };
    if declared.value.is_empty() {
        errors.push(syn::Error::new(
            declared.span,
            format!(
                "`modes` is empty: a tool must be allowed in at least one mode; {risk} is \
                 admitted in {admitted}"
            ),
        ));
        return None;
    }
    let mut set = ModeSet::EMPTY;
    let mut valid = true;
    for name in &declared.value {
        let text = name.to_string();
        let Some(mode) = Mode::ALL.into_iter().find(|m| m.as_str() == text) else {
            let hint = match closest(&text, MODE_NAMES) {
                Some(mode) => format!("; did you mean `{mode}`?"),
                None => format!("; expected one of {}", MODE_NAMES.join(", ")),
            };
            errors.push(syn::Error::new(
                name.span(),
                format!("unknown mode `{text}`{hint}"),
            ));
            valid = false;
            continue;
        };
        if set.contains(mode) {
            errors.push(syn::Error::new(
                name.span(),
                format!("mode {mode} is listed twice"),
            ));
            valid = false;
        } else if !policy::admits(mode, risk) {
            errors.push(syn::Error::new(
                name.span(),
                format!(
                    "mode {mode} has ceiling {ceiling}, below this tool's risk {risk}; {risk} is \
                     admitted only in {admitted}",
                    ceiling = policy::ceiling(mode),
                ),
            ));
            valid = false;
        }
        set = set.with(mode);
    }
    valid.then_some(set)
}

/// Checks a `domain` value.
pub(crate) fn check_domain(domain: &Spanned<String>, errors: &mut Errors) -> bool {
    check_dotted(domain, "domain", None, errors)
}

/// Checks lowercase dotted segments of `[a-z][a-z0-9_]*`.
fn check_dotted(
    value: &Spanned<String>,
    what: &str,
    max_len: Option<usize>,
    errors: &mut Errors,
) -> bool {
    if let Some(problem) = dotted_problem(&value.value, max_len) {
        let (article, example) = match what {
            "id" => ("an", "users.delete"),
            _ => ("a", "users"),
        };
        let shown = match value.value.as_str() {
            "" => String::new(),
            text => format!(" `{text}`"),
        };
        errors.push(syn::Error::new(
            value.span,
            format!(
                "invalid {what}{shown}: {problem}; {article} {what} is lowercase dotted segments \
                 of `[a-z][a-z0-9_]*`, e.g. `{example}`"
            ),
        ));
        return false;
    }
    true
}

fn check_derived_id(id: &Spanned<String>, errors: &mut Errors) -> bool {
    if let Some(problem) = dotted_problem(&id.value, Some(MAX_ID_LEN)) {
        errors.push(syn::Error::new(
            id.span,
            format!(
                "the tool id `{}` derived from this function's name is invalid: {problem}; \
                 rename the function or set `id = \"...\"` (lowercase dotted segments of \
                 `[a-z][a-z0-9_]*`)",
                id.value
            ),
        ));
        return false;
    }
    true
}

fn dotted_problem(text: &str, max_len: Option<usize>) -> Option<String> {
    if text.is_empty() {
        return Some("it is empty".to_owned());
    }
    if let Some(max) = max_len
        && text.len() > max
    {
        return Some(format!(
            "it is {} characters long, at most {max} are allowed",
            text.len()
        ));
    }
    for segment in text.split('.') {
        let mut chars = segment.chars();
        match chars.next() {
            None => return Some("it has an empty segment".to_owned()),
            Some(c) if !c.is_ascii_lowercase() => {
                return Some(format!(
                    "segment `{segment}` does not start with a letter a-z"
                ));
            }
            Some(_) => {}
        }
        if let Some(c) = chars.find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '_')) {
            return Some(format!("`{c}` is not allowed"));
        }
    }
    None
}

/// A public function of a `#[toolset]` that declares nothing.
pub(crate) fn undeclared(name: &Ident) -> syn::Error {
    syn::Error::new(
        name.span(),
        format!(
            "`{name}` is public in a #[toolset] but declares no risk: add #[tool(risk = \"...\")] \
             if an agent may call it, or #[tool(skip)] if it is not a tool"
        ),
    )
}

/// `#[tool]` on an item that is not a function with a body.
pub(crate) fn not_a_function(item: &Item) -> syn::Error {
    match item {
        Item::Verbatim(tokens) if mentions_fn(tokens) => syn::Error::new(
            tokens.span(),
            "#[tool] needs a function with a body: put it on the function that implements this \
             declaration",
        ),
        other => syn::Error::new(
            crate::ast::item_keyword_span(other),
            "#[tool] applies to functions only",
        ),
    }
}

fn mentions_fn(tokens: &proc_macro2::TokenStream) -> bool {
    tokens
        .clone()
        .into_iter()
        .any(|tree| matches!(&tree, proc_macro2::TokenTree::Ident(ident) if ident == "fn"))
}

#[cfg(test)]
mod tests {
    use proc_macro2::{Span, TokenStream};
    use quote::quote;

    use super::{Checked, check, dotted_problem};
    use crate::ast::{Context, Declaration, Tool};
    use crate::ctxt::Errors;

    /// What `check` makes of `args` on `fn get(id: u64)`, after `earlier` errors of other items, and
    /// how many errors this declaration added.
    fn verdict(args: TokenStream, earlier: usize) -> (Checked, usize) {
        let sig: syn::Signature = syn::parse_quote!(fn get(id: u64) -> Result<u64, E>);
        let mut errors = Errors::default();
        for _ in 0..earlier {
            errors.push(syn::Error::new(Span::call_site(), "another item's"));
        }
        let declaration = Declaration {
            args,
            span: Span::call_site(),
        };
        let tool = Tool::from_syn(declaration, &[], &sig, Context::BARE, &mut errors);
        let checked = check(&tool, &mut errors);
        let added = errors.len() - earlier;
        drop(errors.into_error());
        (checked, added)
    }

    #[test]
    fn a_declaration_is_judged_by_its_own_errors() {
        for earlier in [0, 2] {
            let (checked, added) = verdict(quote!(risk = "READ_ONLY"), earlier);
            assert!(
                matches!(checked, Checked::Tool(_)) && added == 0,
                "{earlier}"
            );
            // A malformed argument has its error from the parser; nothing is emitted.
            let (checked, added) = verdict(quote!(risk = "READ_ONLY", bogus), earlier);
            assert!(
                matches!(checked, Checked::Failed) && added == 1,
                "{earlier}"
            );
            let (checked, added) = verdict(quote!(risk = "READ_ONLY", redact = [nope]), earlier);
            assert!(
                matches!(checked, Checked::Failed) && added == 1,
                "{earlier}"
            );
            let (checked, _) = verdict(quote!(skip), earlier);
            assert!(
                matches!(checked, Checked::Failed),
                "outside a set: {earlier}"
            );
        }
    }

    #[test]
    fn dotted() {
        for ok in ["users", "users.delete", "a1.b_2.c", "x"] {
            assert_eq!(dotted_problem(ok, Some(64)), None, "{ok}");
        }
        for bad in [
            "", "Users", "users.", ".users", "users..x", "1users", "_x", "a-b", "a.B",
        ] {
            assert!(dotted_problem(bad, Some(64)).is_some(), "{bad}");
        }
        assert!(dotted_problem(&"a".repeat(65), Some(64)).is_some());
        assert!(dotted_problem(&"a".repeat(64), Some(64)).is_none());
        assert!(dotted_problem(&"a".repeat(65), None).is_none());
    }
}
