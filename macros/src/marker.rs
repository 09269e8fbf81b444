//! The marker `#[toolset]` leaves on a member whose attributes it cannot read, which may be `tool`
//! under another name: it carries the set's context to that `tool`, or reports an undeclared public
//! function if no `tool` takes it.
//!
//! Input:  the member's attributes and the set's context (`#[toolset]`); the marker again, taken off the
//!         member by `#[tool]`, or expanded as an attribute of its own (`__toolset_member`).
//! Output: `#[::toolgate::__toolset_member(domain = "users", public = true, owner = impl <Files>)]`,
//!         last among the member's attributes; read back, a [`Marker`] that gives the member its
//!         [`Context`].

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{Attribute, Item, Token, Type};

use crate::ast::{Context, ImplOf, Owner};
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

/// The marker for a member with `attrs`, if one of them might be `tool` under another name.
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
        Owner::Impl(of) => {
            let qualified = of.qualified();
            quote!(owner = impl #qualified)
        }
        Owner::GenericImpl(_) => quote!(owner = generic),
    };
    Some(syn::parse_quote!(#[::toolgate::__toolset_member(#domain public = #public, #owner)]))
}

/// What the set's marker on a member says.
pub(crate) struct Marker {
    domain: Option<String>,
    public: bool,
    owner: MarkedOwner,
}

enum MarkedOwner {
    Free,
    Impl {
        self_ty: Box<Type>,
        trait_: Option<syn::Path>,
    },
    /// The span of `generic`.
    Generic(Span),
}

impl Marker {
    /// The context the set gives its member.
    pub(crate) fn context(&self) -> Context<'_> {
        let owner = match &self.owner {
            MarkedOwner::Free => Owner::Free,
            MarkedOwner::Impl { self_ty, trait_ } => Owner::Impl(ImplOf {
                self_ty,
                trait_: trait_.as_ref(),
            }),
            MarkedOwner::Generic(span) => Owner::GenericImpl(*span),
        };
        Context {
            domain: self.domain.as_deref(),
            in_toolset: true,
            owner,
            in_place: None,
        }
    }
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
        owner: MarkedOwner::Free,
    };
    while !input.is_empty() {
        let key: syn::Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        match key.to_string().as_str() {
            "domain" => marker.domain = Some(input.parse::<syn::LitStr>()?.value()),
            "public" => marker.public = input.parse::<syn::LitBool>()?.value,
            "owner" if input.peek(Token![impl]) => {
                input.parse::<Token![impl]>()?;
                input.parse::<Token![<]>()?;
                let self_ty = input.parse()?;
                let trait_ = match input.parse::<Option<Token![as]>>()? {
                    Some(_) => Some(input.parse()?),
                    None => None,
                };
                input.parse::<Token![>]>()?;
                marker.owner = MarkedOwner::Impl { self_ty, trait_ };
            }
            "owner" => marker.owner = MarkedOwner::Generic(input.parse::<syn::Ident>()?.span()),
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

#[cfg(test)]
mod tests {
    use syn::Attribute;

    use super::{member_marker, take_marker};
    use crate::ast::{Context, ImplOf, Owner};
    use crate::ctxt::Errors;

    /// What the set writes in its marker, its member reads back.
    #[test]
    fn round_trip() {
        let block: syn::ItemImpl = syn::parse_quote!(impl Trait for Files<Vec<u8>> {});
        let of = ImplOf {
            self_ty: &block.self_ty,
            trait_: block.trait_.as_ref().map(|(path, _)| path),
        };
        let span = proc_macro2::Span::call_site();
        let owners = [Owner::Free, Owner::Impl(of), Owner::GenericImpl(span)];
        for (owner, domain) in owners.into_iter().zip([None, Some("users"), Some("a.b")]) {
            let context = Context {
                domain,
                in_toolset: true,
                owner,
                in_place: None,
            };
            let declared: Vec<Attribute> = vec![syn::parse_quote!(#[declare(risk = "READ_ONLY")])];
            let marker = member_marker(&declared, true, context).expect("not an inert attribute");
            let mut attrs = vec![marker];
            let mut errors = Errors::default();
            let marker = take_marker(&mut attrs, &mut errors).expect("the marker");
            assert!(errors.into_error().is_none());
            assert!(attrs.is_empty() && marker.public);
            let read = marker.context();
            assert_eq!((read.domain, read.in_toolset), (domain, true));
            match (owner, read.owner) {
                (Owner::Free, Owner::Free) | (Owner::GenericImpl(_), Owner::GenericImpl(_)) => {}
                (Owner::Impl(written), Owner::Impl(read)) => {
                    assert_eq!(
                        written.qualified().to_string(),
                        read.qualified().to_string()
                    );
                }
                _ => panic!("the owner changed on the way"),
            }
        }
        let inert: Vec<Attribute> = vec![syn::parse_quote!(#[inline])];
        assert!(member_marker(&inert, true, Context::BARE).is_none());
    }
}
