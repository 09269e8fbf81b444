//! Collects every error of one expansion, so that a user sees them all at once.

use proc_macro2::TokenStream;

#[derive(Default)]
pub(crate) struct Errors {
    combined: Option<syn::Error>,
}

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.combined {
            Some(combined) => combined.combine(error),
            None => self.combined = Some(error),
        }
    }

    pub(crate) fn push_all(&mut self, other: Errors) {
        if let Some(error) = other.combined {
            self.push(error);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.combined.is_none()
    }

    pub(crate) fn into_error(self) -> Option<syn::Error> {
        self.combined
    }

    pub(crate) fn into_compile_errors(self) -> TokenStream {
        self.combined
            .map(syn::Error::into_compile_error)
            .unwrap_or_default()
    }
}
