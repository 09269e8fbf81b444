//! Checks a tool's declaration against the policy table and works out its defaults.
//!
//! Input:  [`ToolArgs`] as written, the function's name and the enclosing `#[toolset]`'s domain.
//! Output: a [`ToolSpec`] that is consistent by construction, or errors on the offending tokens.

use proc_macro2::{Ident, Span};
use syn::ext::IdentExt as _;
use toolgate_policy::{self as policy, Mode, ModeSet, Risk};

use crate::attr::{MODE_NAMES, Spanned, ToolArgs};
use crate::ctxt::Errors;
use toolgate_policy::suggest::closest;

/// A declaration that passed every check.
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
}

const RISK_NAMES: &[&str] = &Risk::NAMES;
pub(crate) const MAX_ID_LEN: usize = 64;

pub(crate) fn validate(
    args: ToolArgs,
    fn_name: &Ident,
    inherited_domain: Option<&str>,
    attr_span: Span,
    errors: &mut Errors,
) -> Option<ToolSpec> {
    let domain = declared_domain(&args, inherited_domain, errors);
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
    finish(args, id, id_span, domain, (attr_span, "tool"), errors)
}

/// [`validate`] for a method of an rmcp handler, declared with `#[toolgate(..)]`: its id is its name
/// in rmcp, which MCP clients call it by, so it follows MCP's rule for tool names rather than
/// toolgate's dotted ids; the set's domain is its domain, not a prefix of its id.
pub(crate) fn validate_in_place(
    args: ToolArgs,
    in_place: &crate::ast::InPlace,
    inherited_domain: Option<&str>,
    errors: &mut Errors,
) -> Option<ToolSpec> {
    let domain = declared_domain(&args, inherited_domain, errors);
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
    let attribute = (in_place.attr_span, "toolgate");
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
    args: ToolArgs,
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

    let side_effects = risk.and_then(|risk| check_side_effects(risk, &args, errors));
    let modes = risk.and_then(|risk| check_modes(risk, args.modes.as_ref(), errors));

    Some(ToolSpec {
        id: id?,
        id_span,
        domain,
        description: args.description.map(|d| d.value),
        risk: risk?,
        side_effects: side_effects?,
        modes: modes?,
        idempotent: args.idempotent.is_some_and(|f| f.value),
        open_world: args.open_world.is_some_and(|f| f.value),
        untrusted_output: args.untrusted_output.is_some_and(|f| f.value),
    })
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
pub(crate) fn undeclared(name: &syn::Ident) -> syn::Error {
    syn::Error::new(
        name.span(),
        format!(
            "`{name}` is public in a #[toolset] but declares no risk: add #[tool(risk = \"...\")] \
             if an agent may call it, or #[tool(skip)] if it is not a tool"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::dotted_problem;

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
