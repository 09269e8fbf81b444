//! Collects every error of one expansion, so that a user sees them all at once.
//!
//! Input:  errors pushed by each step (parse, validate), in the order they are found.
//! Output: one `syn::Error` combining them, taken once, or the `compile_error!` calls that say them.
//!
//! A collector must be taken (`into_error`, `into_compile_errors`, or moved into another with `extend`)
//! before it is dropped: dropping one untaken is a bug of the macro, which would lose errors, and panics.
//! Whether a step failed is whether it added errors ([`Errors::len`] before and after), never whether
//! the collector is empty, which earlier steps decide.

use proc_macro2::TokenStream;

pub(crate) struct Errors {
    /// `None` once taken.
    errors: Option<Vec<syn::Error>>,
}

impl Default for Errors {
    fn default() -> Self {
        Errors {
            errors: Some(Vec::new()),
        }
    }
}

impl Errors {
    fn errors(&mut self) -> &mut Vec<syn::Error> {
        self.errors
            .as_mut()
            .expect("a taken error collector is not used again")
    }

    pub(crate) fn push(&mut self, error: syn::Error) {
        self.errors().push(error);
    }

    /// Moves `other`'s errors after these.
    pub(crate) fn extend(&mut self, mut other: Errors) {
        let taken = other.errors.take().unwrap_or_default();
        self.errors().extend(taken);
    }

    /// How many errors were pushed so far: a step failed if it raised the count.
    pub(crate) fn len(&self) -> usize {
        self.errors.as_ref().map_or(0, Vec::len)
    }

    /// Takes the errors as one, if there are any.
    pub(crate) fn into_error(mut self) -> Option<syn::Error> {
        let errors = self.errors.take().unwrap_or_default();
        errors.into_iter().reduce(|mut combined, error| {
            combined.combine(error);
            combined
        })
    }

    /// Takes the errors as `compile_error!` calls, nothing if there are none.
    pub(crate) fn into_compile_errors(self) -> TokenStream {
        self.into_error()
            .map(syn::Error::into_compile_error)
            .unwrap_or_default()
    }
}

impl Drop for Errors {
    fn drop(&mut self) {
        if self.errors.is_some() && !std::thread::panicking() {
            panic!(
                "toolgate-macros: an error collector was dropped without its errors being taken"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use proc_macro2::Span;

    use super::Errors;

    #[test]
    fn combined_in_order() {
        let mut errors = Errors::default();
        errors.push(syn::Error::new(Span::call_site(), "first"));
        let mut other = Errors::default();
        other.push(syn::Error::new(Span::call_site(), "second"));
        errors.extend(other);
        assert_eq!(errors.len(), 2);
        let messages: Vec<String> = errors
            .into_error()
            .expect("two errors")
            .into_iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(messages, ["first", "second"]);
    }

    #[test]
    fn empty_takes_to_nothing() {
        assert!(Errors::default().into_error().is_none());
        assert!(Errors::default().into_compile_errors().is_empty());
    }

    #[test]
    #[should_panic(expected = "without its errors being taken")]
    fn dropped_untaken_panics() {
        let mut errors = Errors::default();
        errors.push(syn::Error::new(Span::call_site(), "lost"));
        drop(errors);
    }

    #[test]
    #[should_panic(expected = "without its errors being taken")]
    fn dropped_untaken_panics_when_empty() {
        drop(Errors::default());
    }
}
