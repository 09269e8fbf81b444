//! The `WWW-Authenticate` challenges of RFC 6750: a token missing, invalid, or of too little scope.

#[cfg(feature = "mcp-http")]
use http::HeaderValue;

#[cfg(feature = "mcp-http")]
use crate::mcp::http::Refusal;

/// The parameters every challenge carries.
pub(super) struct Challenge {
    pub(super) metadata_url: String,
    /// Space-separated; empty when none is known.
    #[cfg(feature = "mcp-http")]
    pub(super) scope: String,
}

#[cfg(feature = "mcp-http")]
impl Challenge {
    /// `Bearer` with `error` and its description first (if any), then `resource_metadata` and `scope`.
    fn header(&self, error: Option<(&str, &str)>) -> HeaderValue {
        let mut value = String::from("Bearer ");
        if let Some((error, description)) = error {
            value.push_str(&format!(
                "error=\"{error}\", error_description=\"{description}\", "
            ));
        }
        value.push_str(&format!("resource_metadata=\"{}\"", self.metadata_url));
        if !self.scope.is_empty() {
            value.push_str(&format!(", scope=\"{}\"", self.scope));
        }
        // Every part was checked to be visible ASCII without quotes when the verifier was built.
        HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
    }

    pub(super) fn missing(&self) -> Refusal {
        Refusal::unauthorized(self.header(None))
    }

    pub(super) fn invalid(&self, description: &str) -> Refusal {
        Refusal::unauthorized(self.header(Some(("invalid_token", description))))
    }

    pub(super) fn insufficient(&self) -> Refusal {
        Refusal::forbidden(self.header(Some((
            "insufficient_scope",
            "the token grants no access to this server",
        ))))
    }
}
