//! The marker `#[toolset]` leaves on a member whose attributes it cannot read, which may be `tool`
//! under another name: it carries the set's context to that `tool`, or reports an undeclared public
//! function if no `tool` takes it.
//!
//! Input:  the member's attributes and the set's context (`#[toolset]`); the marker again, taken off the
//!         member by `#[tool]`, or expanded as an attribute of its own (`__toolset_member`).
//! Output: `#[::toolgate::__toolset_member(domain = "users", public = true, owner = impl <Files>)]`,
//!         last among the member's attributes; read back, a [`Marker`].

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{Attribute, Item, Token};

use crate::ast::{Context, Owner};
use crate::ctxt::Errors;
use crate::valid;

/// Attributes the compiler itself reads, which are never `tool` under another name.
const INERT: &[&str] = &[
    "allow",
    "cfg",
    "cold",
    "deny",
    "deprecated",
    "doc",
    "expect",
    "export_name",
    "forbid",
    "ignore",
    "inline",
    "link_section",
    "must_use",
    "no_mangle",
    "should_panic",
    "target_feature",
    "track_caller",
    "warn",
];

fn is_inert(attr: &Attribute) -> bool {
    let path = attr.path();
    let first = path.segments.first().map(|s| s.ident.to_string());
    match first.as_deref() {
        Some("rustfmt" | "clippy" | "diagnostic") => true,
        Some(name) if path.segments.len() == 1 => INERT.contains(&name),
        _ => false,
    }
}

/// The marker a member with an attribute the set cannot read gets, last among its attributes:
/// `#[::toolgate::__toolset_member(domain = "..", public = .., owner = ..)]`.
pub(crate) fn member_marker(
    attrs: &[Attribute],
    public: bool,
    context: Context<'_>,
) -> Option<Attribute> {
    if attrs.iter().all(is_inert) {
        return None;
    }
    let domain = context.domain.map(|d| quote!(domain = #d,));
    let owner = match context.owner {
        Owner::Free => TokenStream::new(),
        Owner::Impl(qualified) => quote!(owner = impl #qualified),
        Owner::GenericImpl(_) => quote!(owner = generic),
    };
    Some(syn::parse_quote!(#[::toolgate::__toolset_member(#domain public = #public, #owner)]))
}

/// What the set's marker on a member says.
pub(crate) struct Marker {
    pub(crate) domain: Option<String>,
    pub(crate) public: bool,
    /// The qualified self type of the member's impl.
    pub(crate) owner: Option<TokenStream>,
    /// The member's impl is generic (the span of `generic`).
    pub(crate) generic: Option<Span>,
}

fn is_marker(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "__toolset_member")
}

/// Takes the set's marker off a member, if it has one.
pub(crate) fn take_marker(attrs: &mut Vec<Attribute>, errors: &mut Errors) -> Option<Marker> {
    let index = attrs.iter().position(is_marker)?;
    let attr = attrs.remove(index);
    match attr.parse_args_with(parse_marker) {
        Ok(marker) => Some(marker),
        Err(error) => {
            errors.push(error);
            None
        }
    }
}

fn parse_marker(input: syn::parse::ParseStream<'_>) -> syn::Result<Marker> {
    let mut marker = Marker {
        domain: None,
        public: false,
        owner: None,
        generic: None,
    };
    while !input.is_empty() {
        let key: syn::Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        match key.to_string().as_str() {
            "domain" => marker.domain = Some(input.parse::<syn::LitStr>()?.value()),
            "public" => marker.public = input.parse::<syn::LitBool>()?.value,
            "owner" if input.peek(Token![impl]) => {
                input.parse::<Token![impl]>()?;
                marker.owner = Some(input.parse::<TokenStream>()?);
            }
            "owner" => marker.generic = Some(input.parse::<syn::Ident>()?.span()),
            _ => {
                return Err(syn::Error::new(
                    key.span(),
                    "not a key of the toolset's marker",
                ));
            }
        }
        if !input.is_empty() {
            input.parse::<Token![,]>()?;
        }
    }
    Ok(marker)
}

/// `#[__toolset_member]` left on a member that no `tool` attribute took: a public one declared no risk.
pub(crate) fn member_attribute(args: TokenStream, input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let marker = match syn::parse::Parser::parse2(parse_marker, args) {
        Ok(marker) => Some(marker),
        Err(error) => {
            errors.push(error);
            None
        }
    };
    if let (Some(marker), Ok(item)) = (marker, syn::parse2::<Item>(input.clone()))
        && marker.public
        && let Item::Fn(f) = &item
    {
        errors.push(valid::undeclared(&f.sig.ident));
    }
    let errors = errors.into_compile_errors();
    quote!(#errors #input)
}
