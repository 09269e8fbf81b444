//! [`HttpService`](super::http::HttpService) as an OAuth 2.1 resource server (feature `mcp-oauth`), as
//! MCP's authorization asks of a server: JWT access tokens verified against the authorization server's
//! keys (a JWKS), their claims mapped to a principal and its gate, and the protected resource metadata
//! of RFC 9728 that tells a client where to get a token.
//!
//! ```no_run
//! # extern crate toolgate_runtime as toolgate;
//! use toolgate::mcp::http::{HttpService, Principals};
//! use toolgate::mcp::oauth::{Algorithm, Jwks, OAuth};
//! use toolgate::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
//! use toolgate::mcp::ToolgateServer;
//! use toolgate::{Gate, Mode};
//!
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! let gate = |mode, name: &str| Gate::builder().mode(mode).principal(name).build();
//! let oauth = OAuth::builder("https://mcp.example.com/mcp")
//!     .authorization_server("https://auth.example.com")
//!     .jwks(Jwks::url("https://auth.example.com/.well-known/jwks.json"))
//!     .algorithms([Algorithm::RS256])
//!     // The first rule a token satisfies names its principal: `writer:<sub>`, then `reader:<sub>`.
//!     .scope("tickets:write", "writer", gate(Mode::FullAuto, "writer")?)
//!     .scope("tickets:read", "reader", gate(Mode::Shadow, "reader")?)
//!     .challenge_scope(["tickets:read"])
//!     .build()
//!     .await?;
//! let principals = Principals::new().verifier(oauth);
//! let server = ToolgateServer::new(Gate::new(Mode::Shadow)?);
//! let service = HttpService::new(server, principals, StreamableHttpServerConfig::default());
//! // Serve `service` with hyper, or mount it in an axum router, behind TLS.
//! # let _ = service;
//! # Ok(())
//! # }
//! ```
//!
//! # What a token must be
//!
//! A compact JWS whose header names one of the [pinned algorithms](OAuthBuilder::algorithms) (never
//! `none`, never an HMAC one: the type has none) and a key of the JWKS (`kid`; a token without one is
//! verified only when exactly one key fits its algorithm), signed by that key; the key's own `alg`, when
//! it names one, must be the token's. Its claims: `iss` one of the
//! [authorization servers](OAuthBuilder::authorization_server), `aud` naming the
//! [resource](OAuth::builder) (or an [audience](OAuthBuilder::audience) given instead), `exp` not past
//! and `nbf` (if present) not ahead, both within the [leeway](OAuthBuilder::leeway), and a `sub`.
//! A token that carries critical header parameters (`crit`) is refused; header parameters that point at
//! other keys (`jku`, `jwk`, `x5u`, `x5c`) are never followed.
//!
//! A token that fails is answered `401` with `error="invalid_token"` and a short `error_description`
//! (never the token); one that verifies but that no [rule](OAuthBuilder::scope) maps to a principal,
//! `403` with `error="insufficient_scope"`. Both carry `resource_metadata`, and `scope` when a
//! [challenge scope](OAuthBuilder::challenge_scope) is known.
//!
//! # Keys
//!
//! The JWKS is loaded when the verifier is [built](OAuthBuilder::build), from a file or an `https` URL
//! (`http` only on a loopback address). Keys of another use than `sig`, symmetric keys (`oct`), RSA
//! keys under 2048 bits, and keys fit for no pinned algorithm are left out. The set is loaded again
//! when a token names a key it does not hold, and when it is older than
//! [`keys_max_age`](OAuthBuilder::keys_max_age); never more often than once per
//! [`refresh_interval`](OAuthBuilder::refresh_interval), so a client sending tokens with made-up key ids
//! makes at most one fetch per interval, however many it sends. A set loaded again that no longer holds a
//! key refuses that key's tokens from then on, cached or not. A load that fails keeps the keys held.
//!
//! # Cache
//!
//! A verified token's outcome is kept under the SHA-256 of the whole token, until its `exp` at the
//! latest, in a bounded map ([`cache_size`](OAuthBuilder::cache_size)): a request with a token seen
//! before costs a hash and a lookup. Only what the token itself verified to is ever returned for it.

mod algorithms;
mod builder;
#[cfg(feature = "mcp-http")]
mod cache;
mod challenge;
mod claims;
mod error;
mod jwks;
mod key_store;
mod keys;
#[cfg(test)]
mod tests;
mod urls;
mod verify;

pub use algorithms::Algorithm;
pub use builder::{
    DEFAULT_CACHE_SIZE, DEFAULT_FETCH_TIMEOUT, DEFAULT_KEYS_MAX_AGE, DEFAULT_LEEWAY,
    DEFAULT_REFRESH_INTERVAL, OAuthBuilder,
};
pub use claims::Claims;
pub use error::{JwksError, OAuthError};
pub use jwks::Jwks;
pub use verify::{METADATA_PATH, OAuth};
