//! Why a verifier could not be built, and why its JWKS could not be loaded.

use std::fmt;
use std::path::PathBuf;

/// The largest JWKS document read: 512 KiB.
pub(super) const MAX_JWKS_BYTES: usize = 512 * 1024;

/// Why an [`OAuth`](super::OAuth) verifier could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum OAuthError {
    /// A URL of the configuration cannot be used.
    InvalidUrl {
        /// Which URL: "the resource", "an authorization server", "the JWKS", ...
        what: &'static str,
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No [`authorization_server`](super::OAuthBuilder::authorization_server) was given.
    NoAuthorizationServer,
    /// No [`jwks`](super::OAuthBuilder::jwks) was given.
    NoJwks,
    /// [`algorithms`](super::OAuthBuilder::algorithms) was given none.
    NoAlgorithm,
    /// No rule ([`scope`](super::OAuthBuilder::scope), [`map`](super::OAuthBuilder::map)) maps a token
    /// to a principal.
    NoRule,
    /// A scope holds a character a scope may not (a space, a quote, a backslash, a control).
    InvalidScope(String),
    /// The resource name holds a control character.
    ResourceName,
    /// The JWKS could not be loaded, or holds no key fit for a pinned algorithm.
    Jwks(JwksError),
}

impl fmt::Display for OAuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OAuthError::InvalidUrl { what, url, reason } => {
                write!(f, "{what} `{}` cannot be used: {reason}", url.escape_debug())
            }
            OAuthError::NoAuthorizationServer => f.write_str(
                "no authorization server: name the issuer of the tokens with `.authorization_server(..)`",
            ),
            OAuthError::NoJwks => f.write_str(
                "no JWKS: say where the authorization server's keys are with `.jwks(..)`",
            ),
            OAuthError::NoAlgorithm => {
                f.write_str("no algorithm: `.algorithms(..)` must pin at least one")
            }
            OAuthError::NoRule => f.write_str(
                "no rule maps a token to a principal: add `.scope(..)` or `.map(..)`",
            ),
            OAuthError::InvalidScope(scope) => write!(
                f,
                "the scope `{}` holds a character a scope may not (a space, a quote, a backslash, \
                 a control)",
                scope.escape_debug()
            ),
            OAuthError::ResourceName => f.write_str("the resource name holds a control character"),
            OAuthError::Jwks(error) => write!(f, "the JWKS: {error}"),
        }
    }
}

impl std::error::Error for OAuthError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OAuthError::Jwks(error) => Some(error),
            _ => None,
        }
    }
}

impl From<JwksError> for OAuthError {
    fn from(error: JwksError) -> OAuthError {
        OAuthError::Jwks(error)
    }
}

/// Why the JWKS could not be loaded.
#[derive(Debug)]
#[non_exhaustive]
pub enum JwksError {
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The URL could not be fetched: no connection, no TLS, a timeout, ...
    Fetch {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The URL answered with another status than a success.
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// The document is larger than the 512 KiB read.
    TooLarge,
    /// The document is not a JWK set (a JSON object with a `keys` array).
    NotAKeySet(String),
    /// The set holds no key fit for a pinned algorithm.
    NoUsableKey,
}

impl fmt::Display for JwksError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JwksError::Read { path, error } => {
                write!(f, "cannot read `{}`: {error}", path.display())
            }
            JwksError::Fetch { url, reason } => write!(f, "cannot fetch `{url}`: {reason}"),
            JwksError::Status { url, status } => write!(f, "`{url}` answered {status}"),
            JwksError::TooLarge => write!(f, "the document is over {MAX_JWKS_BYTES} bytes"),
            JwksError::NotAKeySet(why) => write!(f, "not a JWK set: {why}"),
            JwksError::NoUsableKey => f.write_str(
                "no key is fit for a pinned algorithm (keys of use `sig`, RSA of 2048 bits or more, \
                 EC on P-256 or P-384, OKP on Ed25519, whose `alg`, if any, is pinned)",
            ),
        }
    }
}

impl std::error::Error for JwksError {}
