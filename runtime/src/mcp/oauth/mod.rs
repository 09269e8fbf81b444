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

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};
#[cfg(feature = "mcp-http")]
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
#[cfg(feature = "mcp-http")]
use http::HeaderValue;
use http::Uri;
use http::header::ACCEPT;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use jsonwebtoken::errors::ErrorKind;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

#[cfg(feature = "mcp-http")]
use super::http::{Principal, Refusal, TokenVerifier, Verification};
#[cfg(feature = "mcp-http")]
use crate::gate::Gate;

/// The path of RFC 9728's protected resource metadata, before the resource's own path.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";
/// How far `exp` and `nbf` may be off the server's clock by default: 30 seconds.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);
/// The least time between two loads of the JWKS after the first, by default: 30 seconds.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(30);
/// How old the JWKS may grow before a request has it loaded again, by default: an hour.
pub const DEFAULT_KEYS_MAX_AGE: Duration = Duration::from_secs(3600);
/// How many verified tokens the cache keeps by default.
pub const DEFAULT_CACHE_SIZE: usize = 4096;
/// How long fetching the JWKS may take by default: 10 seconds.
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest JWKS document read: 512 KiB.
const MAX_JWKS_BYTES: usize = 512 * 1024;
/// The smallest RSA modulus accepted, in bits.
const MIN_RSA_BITS: usize = 2048;

/// A signature algorithm a token may be signed with. Asymmetric only: a JWKS holds public keys, and a
/// token MACed with one (HS256 keyed with an RSA key's bytes) is refused by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RS384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RS512,
    /// RSASSA-PSS with SHA-256.
    PS256,
    /// RSASSA-PSS with SHA-384.
    PS384,
    /// RSASSA-PSS with SHA-512.
    PS512,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// ECDSA on P-384 with SHA-384.
    ES384,
    /// EdDSA on Ed25519.
    EdDSA,
}

/// Reads an algorithm by its JOSE name, exactly (`"RS256"`, `"EdDSA"`, ...).
impl std::str::FromStr for Algorithm {
    type Err = String;

    fn from_str(name: &str) -> Result<Algorithm, String> {
        Algorithm::from_name(name).ok_or_else(|| {
            let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
            format!(
                "{name:?} is not an accepted algorithm: one of {}",
                names.join(", ")
            )
        })
    }
}

/// What a key is, as far as which algorithms it verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl Algorithm {
    const ALL: [Algorithm; 9] = [
        Algorithm::RS256,
        Algorithm::RS384,
        Algorithm::RS512,
        Algorithm::PS256,
        Algorithm::PS384,
        Algorithm::PS512,
        Algorithm::ES256,
        Algorithm::ES384,
        Algorithm::EdDSA,
    ];

    /// Its name in a JOSE header (`"RS256"`, `"EdDSA"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::RS256 => "RS256",
            Algorithm::RS384 => "RS384",
            Algorithm::RS512 => "RS512",
            Algorithm::PS256 => "PS256",
            Algorithm::PS384 => "PS384",
            Algorithm::PS512 => "PS512",
            Algorithm::ES256 => "ES256",
            Algorithm::ES384 => "ES384",
            Algorithm::EdDSA => "EdDSA",
        }
    }

    fn from_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|alg| alg.name() == name)
    }

    fn jwt(self) -> jsonwebtoken::Algorithm {
        match self {
            Algorithm::RS256 => jsonwebtoken::Algorithm::RS256,
            Algorithm::RS384 => jsonwebtoken::Algorithm::RS384,
            Algorithm::RS512 => jsonwebtoken::Algorithm::RS512,
            Algorithm::PS256 => jsonwebtoken::Algorithm::PS256,
            Algorithm::PS384 => jsonwebtoken::Algorithm::PS384,
            Algorithm::PS512 => jsonwebtoken::Algorithm::PS512,
            Algorithm::ES256 => jsonwebtoken::Algorithm::ES256,
            Algorithm::ES384 => jsonwebtoken::Algorithm::ES384,
            Algorithm::EdDSA => jsonwebtoken::Algorithm::EdDSA,
        }
    }

    /// The algorithm of a token's header; `None` for an HMAC one.
    fn from_jwt(alg: jsonwebtoken::Algorithm) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|ours| ours.jwt() == alg)
    }

    fn kind(self) -> KeyKind {
        match self {
            Algorithm::ES256 => KeyKind::P256,
            Algorithm::ES384 => KeyKind::P384,
            Algorithm::EdDSA => KeyKind::Ed25519,
            _ => KeyKind::Rsa,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the authorization server's keys (a JSON Web Key Set, RFC 7517) come from.
#[derive(Debug, Clone)]
pub struct Jwks(JwksSource);

#[derive(Debug, Clone)]
enum JwksSource {
    Url(String),
    File(PathBuf),
    Fixed(Bytes),
}

impl Jwks {
    /// Fetched from `url`: `https` (the system's root certificates), or `http` on a loopback address
    /// (`127.0.0.1`, `[::1]`, `localhost`). A redirect is not followed. Loaded again as the
    /// [module docs](self#keys) say.
    pub fn url(url: impl Into<String>) -> Jwks {
        Jwks(JwksSource::Url(url.into()))
    }

    /// Read from the file at `path`. Read again as a URL is fetched again.
    pub fn file(path: impl Into<PathBuf>) -> Jwks {
        Jwks(JwksSource::File(path.into()))
    }

    /// This JSON document, never loaded again.
    pub fn json(document: impl Into<String>) -> Jwks {
        Jwks(JwksSource::Fixed(Bytes::from(document.into())))
    }
}

/// The claims of a verified token, for the rules that map it to a principal.
#[derive(Debug, Clone)]
pub struct Claims {
    map: Map<String, Value>,
    /// Whether the verifier accepts tokens of more than one issuer.
    several_issuers: bool,
}

impl Claims {
    /// The subject (`sub`): whom the token was issued for.
    pub fn subject(&self) -> Option<&str> {
        self.str("sub")
    }

    /// The issuer (`iss`).
    pub fn issuer(&self) -> Option<&str> {
        self.str("iss")
    }

    /// Whom the token names, the issuer always part of it: the subject (`sub`) where the verifier
    /// accepts one issuer alone, so that the issuer is the only one a subject can come from, and
    /// `<iss>#<sub>` where it accepts several (an issuer has no fragment, so the first `#` ends it),
    /// so that two issuers' `alice` are two identities. `None` without a subject, or for a subject
    /// that is no name a person can read as one ([`names::refusal`](crate::names::refusal): spaces
    /// around it, characters a reader cannot see, compatibility forms, mixed scripts).
    pub fn identity(&self) -> Option<String> {
        let subject = self.subject()?;
        if crate::names::refusal(subject).is_some() {
            return None;
        }
        match (self.several_issuers, self.issuer()) {
            (false, _) => Some(subject.to_owned()),
            (true, Some(issuer)) => Some(format!("{issuer}#{subject}")),
            (true, None) => None,
        }
    }

    /// The client the token was issued to: `client_id` (RFC 9068), else `azp`.
    pub fn client_id(&self) -> Option<&str> {
        self.str("client_id").or_else(|| self.str("azp"))
    }

    /// The scopes granted: the space-separated `scope` (RFC 9068) and `scp` (a list or a
    /// space-separated string), in order, each once.
    pub fn scopes(&self) -> Vec<&str> {
        fn listed(value: Option<&Value>) -> Vec<&str> {
            match value {
                Some(Value::String(text)) => text.split(' ').collect(),
                Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            }
        }
        let mut scopes: Vec<&str> = Vec::new();
        let granted = listed(self.map.get("scope"))
            .into_iter()
            .chain(listed(self.map.get("scp")));
        for scope in granted {
            if !scope.is_empty() && !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        scopes
    }

    /// Whether `scope` is among the [scopes](Claims::scopes) granted, compared exactly.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes().contains(&scope)
    }

    /// The claim `name`, whatever its type (custom claims among them).
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.map.get(name)
    }

    fn str(&self, name: &str) -> Option<&str> {
        self.map.get(name).and_then(Value::as_str)
    }

    /// `exp` in seconds since the epoch (a float is rounded down).
    /// When the token expires (`exp`), in seconds since the Unix epoch.
    pub fn expires(&self) -> Option<u64> {
        let exp = self.map.get("exp")?;
        exp.as_u64()
            .or_else(|| exp.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
    }
}

/// A rule that maps a verified token's claims to a principal.
#[cfg(feature = "mcp-http")]
type Rule = Arc<dyn Fn(&Claims) -> Option<Principal> + Send + Sync>;

/// An [`OAuth`] verifier, configured: see [`OAuth::builder`].
#[must_use]
pub struct OAuthBuilder {
    resource: String,
    authorization_servers: Vec<String>,
    audiences: Option<Vec<String>>,
    jwks: Option<Jwks>,
    algorithms: Vec<Algorithm>,
    leeway: Duration,
    refresh_interval: Duration,
    keys_max_age: Duration,
    fetch_timeout: Duration,
    #[cfg(feature = "mcp-http")]
    cache_size: usize,
    #[cfg(feature = "mcp-http")]
    rules: Vec<Rule>,
    rule_scopes: Vec<String>,
    challenge_scope: Option<Vec<String>>,
    scopes_supported: Option<Vec<String>>,
    resource_name: Option<String>,
    resource_documentation: Option<String>,
}

impl fmt::Debug for OAuthBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("OAuthBuilder");
        debug
            .field("resource", &self.resource)
            .field("authorization_servers", &self.authorization_servers)
            .field("jwks", &self.jwks)
            .field("algorithms", &self.algorithms);
        #[cfg(feature = "mcp-http")]
        debug.field("rules", &self.rules.len());
        debug.finish_non_exhaustive()
    }
}

impl OAuthBuilder {
    /// Accepts tokens issued by `issuer` (their `iss`), and lists it among the metadata's
    /// `authorization_servers`, which are issuer identifiers: where a client gets its token. At least
    /// one is required.
    pub fn authorization_server(mut self, issuer: impl Into<String>) -> OAuthBuilder {
        self.authorization_servers.push(issuer.into());
        self
    }

    /// Accepts tokens whose `aud` names `audience`, in place of the resource (the default, as RFC 8707
    /// has it): for an authorization server that names its APIs otherwise. Call it again to accept
    /// several.
    pub fn audience(mut self, audience: impl Into<String>) -> OAuthBuilder {
        self.audiences
            .get_or_insert_with(Vec::new)
            .push(audience.into());
        self
    }

    /// Where the authorization server's keys come from. Required.
    pub fn jwks(mut self, jwks: Jwks) -> OAuthBuilder {
        self.jwks = Some(jwks);
        self
    }

    /// The algorithms a token may be signed with; any other is refused, whatever its key. RS256 by
    /// default.
    pub fn algorithms(mut self, algorithms: impl IntoIterator<Item = Algorithm>) -> OAuthBuilder {
        self.algorithms = algorithms.into_iter().collect();
        self
    }

    /// How far `exp` and `nbf` may be off the server's clock ([`DEFAULT_LEEWAY`]).
    pub fn leeway(mut self, leeway: Duration) -> OAuthBuilder {
        self.leeway = leeway;
        self
    }

    /// The least time between two loads of the JWKS after the first ([`DEFAULT_REFRESH_INTERVAL`]).
    pub fn refresh_interval(mut self, interval: Duration) -> OAuthBuilder {
        self.refresh_interval = interval;
        self
    }

    /// How old the JWKS may grow before a request has it loaded again ([`DEFAULT_KEYS_MAX_AGE`]).
    pub fn keys_max_age(mut self, max_age: Duration) -> OAuthBuilder {
        self.keys_max_age = max_age;
        self
    }

    /// How long fetching the JWKS may take, connecting and reading ([`DEFAULT_FETCH_TIMEOUT`]).
    pub fn fetch_timeout(mut self, timeout: Duration) -> OAuthBuilder {
        self.fetch_timeout = timeout;
        self
    }

    /// How many verified tokens are kept ([`DEFAULT_CACHE_SIZE`]); `0` verifies every request.
    #[cfg(feature = "mcp-http")]
    pub fn cache_size(mut self, entries: usize) -> OAuthBuilder {
        self.cache_size = entries;
        self
    }

    /// A token granted `scope` is the principal `<name>:<identity>`, whose calls `gate` decides, its
    /// identity [`Claims::identity`]: `<name>:<sub>` where one authorization server is configured,
    /// `<name>:<iss>#<sub>` where several are, so that a partner's `alice` is never the company's; a
    /// subject that is no name a person can read as one maps to no principal. One name per subject, so that subjects sharing a gate never share a session, a task or an in-band
    /// approval. What the gate keeps is the group's: its mode, its taint latch, its budgets, its
    /// session grants, and its two-step approvals, which are bound to the gate's own principal
    /// ([`GateBuilder::principal`](crate::GateBuilder::principal)); where each subject must have
    /// its own, map each to a gate of its own with [`map`](OAuthBuilder::map). Rules are tried in
    /// the order given, the first match wins: give the broadest scope first. The scope is listed in the metadata's `scopes_supported` unless that is
    /// [given](OAuthBuilder::scopes_supported).
    #[cfg(feature = "mcp-http")]
    pub fn scope(
        mut self,
        scope: impl Into<String>,
        name: impl Into<String>,
        gate: Gate,
    ) -> OAuthBuilder {
        let (scope, name) = (scope.into(), name.into());
        self.rule_scopes.push(scope.clone());
        self.rules.push(Arc::new(move |claims: &Claims| {
            let identity = claims.identity()?;
            claims
                .has_scope(&scope)
                .then(|| Principal::new(format!("{name}:{identity}"), gate.clone()))
        }));
        self
    }

    /// A rule of the application's: the principal a verified token's claims map to, if any. Tried in
    /// order with the [`scope`](OAuthBuilder::scope) rules. Mind that the principal's name is what its
    /// sessions, tasks and in-band approvals are bound to: build it from [`Claims::identity`], which
    /// holds the issuer where several are configured, not from the subject alone.
    #[cfg(feature = "mcp-http")]
    pub fn map(
        mut self,
        rule: impl Fn(&Claims) -> Option<Principal> + Send + Sync + 'static,
    ) -> OAuthBuilder {
        self.rules.push(Arc::new(rule));
        self
    }

    /// The scopes a client should ask for, given in the `scope` of every challenge (`401` and `403`).
    /// By default, the scope of the one [`scope`](OAuthBuilder::scope) rule when there is only one;
    /// none otherwise.
    pub fn challenge_scope(
        mut self,
        scopes: impl IntoIterator<Item = impl Into<String>>,
    ) -> OAuthBuilder {
        self.challenge_scope = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// The metadata's `scopes_supported`, in place of the [`scope`](OAuthBuilder::scope) rules' scopes.
    pub fn scopes_supported(
        mut self,
        scopes: impl IntoIterator<Item = impl Into<String>>,
    ) -> OAuthBuilder {
        self.scopes_supported = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// The metadata's `resource_name`: the server's name, for people.
    pub fn resource_name(mut self, name: impl Into<String>) -> OAuthBuilder {
        self.resource_name = Some(name.into());
        self
    }

    /// The metadata's `resource_documentation`: a page for developers.
    pub fn resource_documentation(mut self, url: impl Into<String>) -> OAuthBuilder {
        self.resource_documentation = Some(url.into());
        self
    }

    /// Checks the configuration and loads the JWKS.
    ///
    /// # Errors
    ///
    /// An [`OAuthError`] naming what is wrong: a URL that is not `https` (nor `http` on loopback), no
    /// authorization server, no algorithm, no rule, a scope with characters a scope may not have, a
    /// JWKS that cannot be loaded or holds no key fit for a pinned algorithm.
    pub async fn build(self) -> Result<OAuth, OAuthError> {
        let resource = self.resource;
        let resource_uri = checked_url("the resource", &resource, Query::Refused)?;
        if self.authorization_servers.is_empty() {
            return Err(OAuthError::NoAuthorizationServer);
        }
        for issuer in &self.authorization_servers {
            checked_url("an authorization server", issuer, Query::Allowed)?;
        }
        if let Some(url) = &self.resource_documentation {
            checked_url("the resource documentation", url, Query::Allowed)?;
        }
        if let Some(name) = &self.resource_name
            && name.chars().any(char::is_control)
        {
            return Err(OAuthError::ResourceName);
        }
        let algorithms = once_each(self.algorithms);
        if algorithms.is_empty() {
            return Err(OAuthError::NoAlgorithm);
        }
        #[cfg(feature = "mcp-http")]
        if self.rules.is_empty() {
            return Err(OAuthError::NoRule);
        }
        let challenge_scope = match self.challenge_scope {
            Some(scopes) => scopes,
            None if self.rule_scopes.len() == 1 => self.rule_scopes.clone(),
            None => Vec::new(),
        };
        let scopes_supported = once_each(self.scopes_supported.unwrap_or(self.rule_scopes));
        for scope in challenge_scope.iter().chain(&scopes_supported) {
            if !valid_scope(scope) {
                return Err(OAuthError::InvalidScope(scope.clone()));
            }
        }
        let audiences = self.audiences.unwrap_or_else(|| vec![resource.clone()]);
        let Some(jwks) = self.jwks else {
            return Err(OAuthError::NoJwks);
        };
        let loader = Loader::new(jwks.0, self.fetch_timeout)?;

        let resource_path = match resource_uri.path() {
            "/" => "",
            path => path,
        };
        let metadata_path = format!("{METADATA_PATH}{resource_path}");
        let metadata_url = match resource_uri.authority() {
            Some(authority) => format!(
                "{}://{authority}{metadata_path}",
                resource_uri.scheme_str().unwrap_or("https")
            ),
            None => return Err(url_error("the resource", &resource, "it has no host")),
        };
        let mut document = serde_json::json!({
            "resource": resource,
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
        });
        if !scopes_supported.is_empty() {
            document["scopes_supported"] = scopes_supported.into();
        }
        if let Some(name) = self.resource_name {
            document["resource_name"] = name.into();
        }
        if let Some(url) = self.resource_documentation {
            document["resource_documentation"] = url.into();
        }

        let mut validations = HashMap::new();
        for alg in &algorithms {
            let mut validation = jsonwebtoken::Validation::new(alg.jwt());
            validation.leeway = self.leeway.as_secs();
            validation.validate_exp = true;
            validation.validate_nbf = true;
            validation.validate_aud = true;
            validation.set_audience(&audiences);
            validation.set_issuer(&self.authorization_servers);
            validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
            validations.insert(*alg, validation);
        }

        // jsonwebtoken picks its crypto backend from its features, and panics on every token when an
        // application's own dependency on it enables the other backend too: settle it here. Where the
        // process already chose one, that one stays.
        let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
        let keys = loader.load(&algorithms).await?;
        if keys.is_empty() {
            return Err(OAuthError::Jwks(JwksError::NoUsableKey));
        }
        let store = KeyStore {
            loader,
            set: RwLock::new(Arc::new(KeySet {
                keys,
                generation: 0,
                loaded: Instant::now(),
            })),
            flight: tokio::sync::Mutex::new(()),
            last_refresh: Mutex::new(None),
            refreshing_stale: AtomicBool::new(false),
            refresh_interval: self.refresh_interval,
            max_age: self.keys_max_age,
            algorithms: algorithms.clone(),
        };
        Ok(OAuth {
            inner: Arc::new(Inner {
                keys: store,
                validations,
                algorithms,
                issuers: self.authorization_servers,
                #[cfg(feature = "mcp-http")]
                rules: self.rules,
                #[cfg(feature = "mcp-http")]
                cache: Cache::new(self.cache_size),
                challenge: Challenge {
                    metadata_url,
                    #[cfg(feature = "mcp-http")]
                    scope: challenge_scope.join(" "),
                },
                document: Bytes::from(document.to_string()),
                #[cfg(feature = "mcp-http")]
                metadata_path,
                resource,
            }),
        })
    }
}

/// `items` in their order, each once.
fn once_each<T: PartialEq>(items: Vec<T>) -> Vec<T> {
    let mut kept: Vec<T> = Vec::with_capacity(items.len());
    for item in items {
        if !kept.contains(&item) {
            kept.push(item);
        }
    }
    kept
}

/// Whether a URL may carry a query.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Query {
    Allowed,
    Refused,
}

/// `url`, parsed, if it is `https` (or `http` on loopback), has a host, no fragment, and nothing a
/// header's quoted string cannot hold.
fn checked_url(what: &'static str, url: &str, query: Query) -> Result<Uri, OAuthError> {
    if !url
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    {
        return Err(url_error(
            what,
            url,
            "it holds a space, a quote, a backslash or a character outside visible ASCII",
        ));
    }
    if url.contains('#') {
        return Err(url_error(what, url, "it has a fragment"));
    }
    let uri: Uri = url
        .parse()
        .map_err(|_| url_error(what, url, "it is not an absolute URL"))?;
    let Some(host) = uri.host() else {
        return Err(url_error(what, url, "it has no host"));
    };
    match uri.scheme_str() {
        Some("https") => {}
        Some("http") if is_loopback(host) => {}
        Some("http") => {
            return Err(url_error(
                what,
                url,
                "it is http: only https is accepted, or http on a loopback address",
            ));
        }
        _ => return Err(url_error(what, url, "it is not an https URL")),
    }
    if query == Query::Refused && uri.query().is_some() {
        return Err(url_error(what, url, "it has a query"));
    }
    Ok(uri)
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn url_error(what: &'static str, url: &str, reason: &'static str) -> OAuthError {
    OAuthError::InvalidUrl {
        what,
        url: url.to_owned(),
        reason,
    }
}

/// A scope token of RFC 6749 §3.3: visible ASCII but `"` and `\`.
fn valid_scope(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
}

/// Why an [`OAuth`] verifier could not be built.
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
    /// No [`authorization_server`](OAuthBuilder::authorization_server) was given.
    NoAuthorizationServer,
    /// No [`jwks`](OAuthBuilder::jwks) was given.
    NoJwks,
    /// [`algorithms`](OAuthBuilder::algorithms) was given none.
    NoAlgorithm,
    /// No rule ([`scope`](OAuthBuilder::scope), [`map`](OAuthBuilder::map)) maps a token to a principal.
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

/// Loads the JWKS from its source.
enum Loader {
    Url {
        url: String,
        uri: Uri,
        client: Box<Client<HttpsConnector<HttpConnector>, Empty<Bytes>>>,
        timeout: Duration,
    },
    File(PathBuf),
    Fixed(Bytes),
}

impl Loader {
    fn new(source: JwksSource, timeout: Duration) -> Result<Loader, OAuthError> {
        Ok(match source {
            JwksSource::File(path) => Loader::File(path),
            JwksSource::Fixed(document) => Loader::Fixed(document),
            JwksSource::Url(url) => {
                let uri = checked_url("the JWKS", &url, Query::Allowed)?;
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let builder = hyper_rustls::HttpsConnectorBuilder::new();
                let connector = if uri.scheme_str() == Some("https") {
                    builder
                        .with_provider_and_native_roots(provider)
                        .map_err(|error| JwksError::Fetch {
                            url: url.clone(),
                            reason: format!("no root certificates: {error}"),
                        })?
                        .https_only()
                } else {
                    // Plain http to loopback (checked above): no certificate is ever looked at.
                    let config = rustls::ClientConfig::builder_with_provider(provider)
                        .with_safe_default_protocol_versions()
                        .map_err(|error| JwksError::Fetch {
                            url: url.clone(),
                            reason: error.to_string(),
                        })?
                        .with_root_certificates(rustls::RootCertStore::empty())
                        .with_no_client_auth();
                    builder.with_tls_config(config).https_or_http()
                };
                let client = Box::new(
                    Client::builder(TokioExecutor::new()).build(connector.enable_http1().build()),
                );
                Loader::Url {
                    url,
                    uri,
                    client,
                    timeout,
                }
            }
        })
    }

    fn refreshable(&self) -> bool {
        !matches!(self, Loader::Fixed(_))
    }

    async fn load(&self, algorithms: &[Algorithm]) -> Result<Vec<Key>, JwksError> {
        let document = match self {
            Loader::Fixed(document) => document.clone(),
            // A key file is small: read in place rather than on a thread of its own.
            Loader::File(path) => {
                std::fs::read(path)
                    .map(Bytes::from)
                    .map_err(|error| JwksError::Read {
                        path: path.clone(),
                        error,
                    })?
            }
            Loader::Url {
                url,
                uri,
                client,
                timeout,
            } => tokio::time::timeout(*timeout, fetch(url, uri, client))
                .await
                .map_err(|_| JwksError::Fetch {
                    url: url.clone(),
                    reason: format!("no answer within {timeout:?}"),
                })??,
        };
        if document.len() > MAX_JWKS_BYTES {
            return Err(JwksError::TooLarge);
        }
        parse_jwks(&document, algorithms)
    }
}

async fn fetch(
    url: &str,
    uri: &Uri,
    client: &Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
) -> Result<Bytes, JwksError> {
    let failed = |reason: String| JwksError::Fetch {
        url: url.to_owned(),
        reason,
    };
    let request = http::Request::get(uri.clone())
        .header(ACCEPT, "application/json")
        .body(Empty::new())
        .map_err(|error| failed(error.to_string()))?;
    let response = client
        .request(request)
        .await
        .map_err(|error| failed(error.to_string()))?;
    if !response.status().is_success() {
        return Err(JwksError::Status {
            url: url.to_owned(),
            status: response.status().as_u16(),
        });
    }
    match Limited::new(response.into_body(), MAX_JWKS_BYTES)
        .collect()
        .await
    {
        Ok(body) => Ok(body.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(JwksError::TooLarge),
        Err(error) => Err(failed(error.to_string())),
    }
}

/// A key of the JWKS fit for a pinned algorithm.
struct Key {
    kid: Option<String>,
    kind: KeyKind,
    /// The key's own `alg`, when it names one: then the only algorithm it verifies.
    alg: Option<Algorithm>,
    decoding: jsonwebtoken::DecodingKey,
    /// The SHA-256 of what makes the key (its id, kind, algorithm and parameters), to tell a key
    /// removed or changed by a new load.
    id: [u8; 32],
}

impl Key {
    fn verifies(&self, alg: Algorithm) -> bool {
        self.kind == alg.kind() && self.alg.is_none_or(|own| own == alg)
    }
}

/// The keys of one load: loaded when, and the generation of tokens they verified. The generation
/// moves on when a load removes or changes a key, which ends every cached outcome of before.
struct KeySet {
    keys: Vec<Key>,
    generation: u64,
    loaded: Instant,
}

/// The keys of a JWK set fit for one of `algorithms`, in its order; the others are left out.
fn parse_jwks(document: &[u8], algorithms: &[Algorithm]) -> Result<Vec<Key>, JwksError> {
    let set: Value = serde_json::from_slice(document)
        .map_err(|error| JwksError::NotAKeySet(format!("not JSON ({error})")))?;
    let Some(keys) = set.get("keys").and_then(Value::as_array) else {
        return Err(JwksError::NotAKeySet("no `keys` array".to_owned()));
    };
    Ok(keys
        .iter()
        .filter_map(|key| parse_key(key, algorithms))
        .collect())
}

/// One JWK, if it is a public signature key fit for one of `algorithms`.
fn parse_key(key: &Value, algorithms: &[Algorithm]) -> Option<Key> {
    let key = key.as_object()?;
    let text = |name: &str| key.get(name).and_then(Value::as_str);
    if key.get("use").is_some() && text("use") != Some("sig") {
        return None;
    }
    if let Some(ops) = key.get("key_ops")
        && !ops
            .as_array()?
            .iter()
            .any(|op| op.as_str() == Some("verify"))
    {
        return None;
    }
    let kind = match (text("kty")?, text("crv")) {
        ("RSA", _) => KeyKind::Rsa,
        ("EC", Some("P-256")) => KeyKind::P256,
        ("EC", Some("P-384")) => KeyKind::P384,
        ("OKP", Some("Ed25519")) => KeyKind::Ed25519,
        // `oct` (a shared secret) among them: never a key to verify with here.
        _ => return None,
    };
    let alg = match key.get("alg") {
        None => None,
        Some(alg) => Some(Algorithm::from_name(alg.as_str()?).filter(|a| a.kind() == kind)?),
    };
    let decoded = |name: &str| URL_SAFE_NO_PAD.decode(text(name)?).ok();
    let (decoding, parameters) = match kind {
        KeyKind::Rsa => {
            let (n, e) = (decoded("n")?, decoded("e")?);
            let n_bits = rsa_bits(&n);
            if n_bits < MIN_RSA_BITS || e.is_empty() || e.len() > 8 {
                return None;
            }
            (
                jsonwebtoken::DecodingKey::from_rsa_raw_components(&n, &e),
                [text("n")?, text("e")?],
            )
        }
        KeyKind::P256 | KeyKind::P384 => {
            let size = if kind == KeyKind::P256 { 32 } else { 48 };
            if decoded("x")?.len() != size || decoded("y")?.len() != size {
                return None;
            }
            let (x, y) = (text("x")?, text("y")?);
            (
                jsonwebtoken::DecodingKey::from_ec_components(x, y).ok()?,
                [x, y],
            )
        }
        KeyKind::Ed25519 => {
            if decoded("x")?.len() != 32 {
                return None;
            }
            let x = text("x")?;
            (
                jsonwebtoken::DecodingKey::from_ed_components(x).ok()?,
                [x, ""],
            )
        }
    };
    // A curve point that is not on its curve is refused when a verifier is made of it: find out now,
    // rather than fail every token of the key. (An RSA key is read only when it verifies.)
    let probe = algorithms
        .iter()
        .find(|pinned| pinned.kind() == kind && alg.is_none_or(|own| own == **pinned))?;
    jsonwebtoken::crypto::verify("", b"", &decoding, probe.jwt()).ok()?;
    let kid = text("kid").map(str::to_owned);
    let mut id = Sha256::new();
    for part in [
        kid.as_deref().unwrap_or(""),
        &format!("{kind:?}"),
        alg.map_or("", Algorithm::name),
        parameters[0],
        parameters[1],
    ] {
        id.update((part.len() as u64).to_be_bytes());
        id.update(part.as_bytes());
    }
    Some(Key {
        kid,
        kind,
        alg,
        decoding,
        id: id.finalize().into(),
    })
}

/// The size of a big-endian modulus, in bits.
fn rsa_bits(n: &[u8]) -> usize {
    let n = &n[n.iter().take_while(|b| **b == 0).count()..];
    match n.first() {
        Some(first) => n.len() * 8 - first.leading_zeros() as usize,
        None => 0,
    }
}

/// The JWKS held, and its loads again.
struct KeyStore {
    loader: Loader,
    set: RwLock<Arc<KeySet>>,
    /// One load at a time: the requests that wait for keys wait for that one.
    flight: tokio::sync::Mutex<()>,
    /// When the last load after the first began.
    last_refresh: Mutex<Option<Instant>>,
    /// Whether a request is loading a set grown old; the others go on with it meanwhile.
    refreshing_stale: AtomicBool,
    refresh_interval: Duration,
    max_age: Duration,
    algorithms: Vec<Algorithm>,
}

impl KeyStore {
    fn current(&self) -> Arc<KeySet> {
        Arc::clone(&self.set.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn last_refresh(&self) -> MutexGuard<'_, Option<Instant>> {
        self.last_refresh
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a load now would keep to the interval.
    fn may_refresh(&self) -> bool {
        self.loader.refreshable()
            && self
                .last_refresh()
                .is_none_or(|at| at.elapsed() >= self.refresh_interval)
    }

    /// Whether `set` has grown old, and this request is the one to load it again: then it holds the
    /// claim until a [`StaleClaim`] releases it.
    fn claim_stale(&self, set: &KeySet) -> bool {
        set.loaded.elapsed() >= self.max_age
            && self.may_refresh()
            && self
                .refreshing_stale
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// Loads the JWKS again, unless a load began less than the interval ago (then waits for it, if it
    /// is under way). Returns the keys held afterwards.
    async fn refresh(&self) -> Arc<KeySet> {
        let _flight = self.flight.lock().await;
        {
            let mut last = self.last_refresh();
            if last.is_some_and(|at| at.elapsed() < self.refresh_interval) {
                return self.current();
            }
            *last = Some(Instant::now());
        }
        match self.loader.load(&self.algorithms).await {
            Ok(keys) => {
                let mut held = self.set.write().unwrap_or_else(PoisonError::into_inner);
                let kept = held
                    .keys
                    .iter()
                    .all(|old| keys.iter().any(|new| new.id == old.id));
                *held = Arc::new(KeySet {
                    keys,
                    generation: held.generation + u64::from(!kept),
                    loaded: Instant::now(),
                });
            }
            Err(error) => {
                tracing::warn!(%error, "the JWKS could not be loaded again; the keys held stay");
            }
        }
        self.current()
    }
}

/// Held by the request that loads a set grown old: released however that request ends, dropped
/// unpolled included.
struct StaleClaim(Arc<Inner>);

impl Drop for StaleClaim {
    fn drop(&mut self) {
        self.0.keys.refreshing_stale.store(false, Ordering::Release);
    }
}

/// What a token verified to: its principal, or the refusal of a valid token that maps to none.
#[cfg(feature = "mcp-http")]
type Outcome = Result<Principal, Refusal>;

/// Verified tokens' outcomes, by the SHA-256 of the token.
#[cfg(feature = "mcp-http")]
struct Cache {
    capacity: usize,
    entries: Mutex<HashMap<[u8; 32], Entry>>,
}

#[cfg(feature = "mcp-http")]
struct Entry {
    outcome: Outcome,
    /// The token's `exp`: the entry serves no later.
    expires: u64,
    generation: u64,
}

#[cfg(feature = "mcp-http")]
impl Cache {
    fn new(capacity: usize) -> Cache {
        Cache {
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<[u8; 32], Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, token: &[u8; 32], now: u64, generation: u64) -> Option<Outcome> {
        let mut entries = self.lock();
        let entry = entries.get(token)?;
        if entry.expires > now && entry.generation == generation {
            return Some(entry.outcome.clone());
        }
        entries.remove(token);
        None
    }

    fn put(&self, token: [u8; 32], entry: Entry, now: u64) {
        if self.capacity == 0 || entry.expires <= now {
            return;
        }
        let mut entries = self.lock();
        if entries.len() >= self.capacity && !entries.contains_key(&token) {
            entries.retain(|_, kept| kept.expires > now && kept.generation == entry.generation);
            if entries.len() >= self.capacity
                && let Some(evicted) = entries.keys().next().copied()
            {
                entries.remove(&evicted);
            }
        }
        entries.insert(token, entry);
    }
}

/// The parameters every challenge carries.
struct Challenge {
    metadata_url: String,
    /// Space-separated; empty when none is known.
    #[cfg(feature = "mcp-http")]
    scope: String,
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

    fn missing(&self) -> Refusal {
        Refusal::unauthorized(self.header(None))
    }

    fn invalid(&self, description: &str) -> Refusal {
        Refusal::unauthorized(self.header(Some(("invalid_token", description))))
    }

    fn insufficient(&self) -> Refusal {
        Refusal::forbidden(self.header(Some((
            "insufficient_scope",
            "the token grants no access to this server",
        ))))
    }
}

/// Why a token did not verify against the keys held.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// It names a key that is not held (or names none, and none fits): loading the keys again may
    /// find it.
    UnknownKey,
    /// It is refused whatever the keys, for this reason (an `error_description`).
    Invalid(&'static str),
}

/// An OAuth 2.1 resource server's verifier of access tokens, for
/// [`Principals::verifier`](super::http::Principals::verifier): see the [module docs](self).
/// Cheap to clone: clones share their keys and cache.
#[derive(Clone)]
pub struct OAuth {
    inner: Arc<Inner>,
}

struct Inner {
    keys: KeyStore,
    validations: HashMap<Algorithm, jsonwebtoken::Validation>,
    algorithms: Vec<Algorithm>,
    issuers: Vec<String>,
    #[cfg(feature = "mcp-http")]
    rules: Vec<Rule>,
    #[cfg(feature = "mcp-http")]
    cache: Cache,
    challenge: Challenge,
    document: Bytes,
    #[cfg(feature = "mcp-http")]
    metadata_path: String,
    resource: String,
}

impl fmt::Debug for OAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuth")
            .field("resource", &self.inner.resource)
            .field("authorization_servers", &self.inner.issuers)
            .field("algorithms", &self.inner.algorithms)
            .field("keys", &self.inner.keys.current().keys.len())
            .finish_non_exhaustive()
    }
}

impl OAuth {
    /// A verifier for the resource `resource`: the server's canonical URL as clients reach it
    /// (`https://mcp.example.com/mcp`), which is the metadata's `resource`, the audience tokens must
    /// name by default, and where the metadata's URL is derived from (RFC 9728 §3.1).
    pub fn builder(resource: impl Into<String>) -> OAuthBuilder {
        OAuthBuilder {
            resource: resource.into(),
            authorization_servers: Vec::new(),
            audiences: None,
            jwks: None,
            algorithms: vec![Algorithm::RS256],
            leeway: DEFAULT_LEEWAY,
            refresh_interval: DEFAULT_REFRESH_INTERVAL,
            keys_max_age: DEFAULT_KEYS_MAX_AGE,
            fetch_timeout: DEFAULT_FETCH_TIMEOUT,
            #[cfg(feature = "mcp-http")]
            cache_size: DEFAULT_CACHE_SIZE,
            #[cfg(feature = "mcp-http")]
            rules: Vec::new(),
            rule_scopes: Vec::new(),
            challenge_scope: None,
            scopes_supported: None,
            resource_name: None,
            resource_documentation: None,
        }
    }

    /// The protected resource metadata (RFC 9728), as served.
    pub fn metadata_document(&self) -> &[u8] {
        &self.inner.document
    }

    /// Where the metadata is served, as challenges name it: `METADATA_PATH` inserted between the
    /// resource's host and its path (`https://mcp.example.com/.well-known/oauth-protected-resource/mcp`).
    pub fn metadata_url(&self) -> &str {
        &self.inner.challenge.metadata_url
    }
}

impl Inner {
    /// The outcome of `token` against `keys`, cached when it verified.
    #[cfg(feature = "mcp-http")]
    fn decide(&self, token: &str, digest: [u8; 32], keys: &KeySet) -> Result<Outcome, Failure> {
        let claims = self.check(token, keys)?;
        let outcome = self
            .rules
            .iter()
            .find_map(|rule| rule(&claims))
            .ok_or_else(|| self.challenge.insufficient());
        if let Some(expires) = claims.expires() {
            let entry = Entry {
                outcome: outcome.clone(),
                expires,
                generation: keys.generation,
            };
            self.cache.put(digest, entry, now());
        }
        Ok(outcome)
    }

    /// The claims of `token` if it verifies against `keys`.
    fn check(&self, token: &str, keys: &KeySet) -> Result<Claims, Failure> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            Failure::Invalid("the token is not a signed JWT of an accepted algorithm")
        })?;
        if header.crit.is_some() {
            return Err(Failure::Invalid(
                "the token has critical header parameters this server does not understand",
            ));
        }
        let Some(alg) = Algorithm::from_jwt(header.alg).filter(|alg| self.algorithms.contains(alg))
        else {
            return Err(Failure::Invalid("the token's algorithm is not accepted"));
        };
        let key = match header.kid.as_deref() {
            Some(kid) => {
                let mut named = keys
                    .keys
                    .iter()
                    .filter(|key| key.kid.as_deref() == Some(kid))
                    .peekable();
                if named.peek().is_none() {
                    return Err(Failure::UnknownKey);
                }
                named
                    .find(|key| key.verifies(alg))
                    .ok_or(Failure::Invalid("the token's algorithm is not its key's"))?
            }
            None => {
                let mut fitting = keys.keys.iter().filter(|key| key.verifies(alg));
                match (fitting.next(), fitting.next()) {
                    (Some(key), None) => key,
                    (None, _) => return Err(Failure::UnknownKey),
                    (Some(_), Some(_)) => {
                        return Err(Failure::Invalid(
                            "the token names no key (kid) and several could verify it",
                        ));
                    }
                }
            }
        };
        let Some(validation) = self.validations.get(&alg) else {
            return Err(Failure::Invalid("the token's algorithm is not accepted"));
        };
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, validation)
            .map_err(|error| Failure::Invalid(describe(error.kind())))?;
        let claims = Claims {
            map: data.claims,
            several_issuers: self.issuers.iter().any(|iss| *iss != self.issuers[0]),
        };
        // One issuer, as a string: the library would take a list naming one of them.
        if !claims
            .issuer()
            .is_some_and(|iss| self.issuers.iter().any(|ours| ours == iss))
        {
            return Err(Failure::Invalid("the token's issuer is not accepted"));
        }
        Ok(claims)
    }

    /// Decides `token` after loading the keys again (at most once per interval).
    #[cfg(feature = "mcp-http")]
    async fn refreshed(self: Arc<Self>, token: String, digest: [u8; 32]) -> Outcome {
        let keys = self.keys.refresh().await;
        self.finish(self.decide(&token, digest, &keys))
    }

    #[cfg(feature = "mcp-http")]
    fn finish(&self, decided: Result<Outcome, Failure>) -> Outcome {
        decided.unwrap_or_else(|failure| {
            Err(self.challenge.invalid(match failure {
                Failure::UnknownKey => "the token names a key this server does not know",
                Failure::Invalid(description) => description,
            }))
        })
    }
}

/// The `error_description` of a token the library refused: short, and never the token's own text.
fn describe(error: &ErrorKind) -> &'static str {
    match error {
        ErrorKind::ExpiredSignature => "the token has expired",
        ErrorKind::ImmatureSignature => "the token is not valid yet",
        ErrorKind::InvalidAudience => "the token was issued for another audience",
        ErrorKind::InvalidIssuer => "the token's issuer is not accepted",
        ErrorKind::InvalidSignature => "the token's signature does not verify",
        ErrorKind::InvalidAlgorithm => "the token's algorithm is not accepted",
        ErrorKind::InvalidEcdsaKey
        | ErrorKind::InvalidEddsaKey
        | ErrorKind::InvalidRsaKey(_)
        | ErrorKind::InvalidKeyFormat => "the token's key cannot verify it",
        ErrorKind::MissingRequiredClaim(claim) => match claim.as_str() {
            "exp" => "the token has no exp",
            "iss" => "the token has no iss",
            "aud" => "the token has no aud",
            "sub" => "the token has no sub",
            _ => "the token lacks a required claim",
        },
        _ => "the token is malformed",
    }
}

/// Seconds since the epoch.
#[cfg(feature = "mcp-http")]
fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

impl OAuth {
    /// The claims of `token` if it verifies (signature, algorithm, issuer, audience, time), loading
    /// the keys again where the token names one not yet known, as [`TokenVerifier::verify`] does;
    /// no rule is applied. For a caller that needs more of a verified token than a principal (the
    /// operator console bounds a session by its `exp`).
    pub async fn claims(&self, token: &str) -> Option<Claims> {
        let inner = &self.inner;
        let mut keys = inner.keys.current();
        if inner.keys.claim_stale(&keys) {
            let _claim = StaleClaim(Arc::clone(inner));
            keys = inner.keys.refresh().await;
        }
        match inner.check(token, &keys) {
            Ok(claims) => Some(claims),
            Err(Failure::UnknownKey) if inner.keys.may_refresh() => {
                let keys = inner.keys.refresh().await;
                inner.check(token, &keys).ok()
            }
            Err(_) => None,
        }
    }
}

#[cfg(feature = "mcp-http")]
impl TokenVerifier for OAuth {
    fn verify(&self, token: &str) -> Verification {
        let inner = &self.inner;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let keys = inner.keys.current();
        if inner.keys.claim_stale(&keys) {
            let claim = StaleClaim(Arc::clone(inner));
            let (inner, token) = (Arc::clone(inner), token.to_owned());
            return Verification::Pending(Box::pin(async move {
                let _claim = claim;
                inner.refreshed(token, digest).await
            }));
        }
        if let Some(outcome) = inner.cache.get(&digest, now(), keys.generation) {
            return Verification::Ready(outcome);
        }
        match inner.decide(token, digest, &keys) {
            Err(Failure::UnknownKey) if inner.keys.may_refresh() => {
                let (inner, token) = (Arc::clone(inner), token.to_owned());
                Verification::Pending(Box::pin(inner.refreshed(token, digest)))
            }
            decided => Verification::Ready(inner.finish(decided)),
        }
    }

    fn challenge(&self) -> Refusal {
        self.inner.challenge.missing()
    }

    fn metadata(&self, path: &str) -> Option<Bytes> {
        (path == METADATA_PATH || path == self.inner.metadata_path)
            .then(|| self.inner.document.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;
    #[cfg(feature = "mcp-http")]
    use crate::Mode;

    fn claims(value: Value) -> Claims {
        let Value::Object(map) = value else {
            panic!("claims are an object")
        };
        Claims {
            map,
            several_issuers: false,
        }
    }

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Public points, not keys of anyone's: Ed25519's base point, and P-256's generator.
    const ED25519_BASE: [u8; 32] = [
        0x58, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66,
        0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66,
        0x66, 0x66,
    ];
    const P256_X: [u8; 32] = [
        0x6b, 0x17, 0xd1, 0xf2, 0xe1, 0x2c, 0x42, 0x47, 0xf8, 0xbc, 0xe6, 0xe5, 0x63, 0xa4, 0x40,
        0xf2, 0x77, 0x03, 0x7d, 0x81, 0x2d, 0xeb, 0x33, 0xa0, 0xf4, 0xa1, 0x39, 0x45, 0xd8, 0x98,
        0xc2, 0x96,
    ];
    const P256_Y: [u8; 32] = [
        0x4f, 0xe3, 0x42, 0xe2, 0xfe, 0x1a, 0x7f, 0x9b, 0x8e, 0xe7, 0xeb, 0x4a, 0x7c, 0x0f, 0x9e,
        0x16, 0x2b, 0xce, 0x33, 0x57, 0x6b, 0x31, 0x5e, 0xce, 0xcb, 0xb6, 0x40, 0x68, 0x37, 0xbf,
        0x51, 0xf5,
    ];

    #[test]
    fn scopes_are_read_from_scope_and_scp_each_once() {
        let both = claims(serde_json::json!({"scope": "a b  a", "scp": ["c", "a", 7]}));
        assert_eq!(both.scopes(), ["a", "b", "c"]);
        assert!(both.has_scope("b"));
        assert!(!both.has_scope("a b"));
        assert!(!both.has_scope(""));
        let spaced = claims(serde_json::json!({"scp": "x y"}));
        assert_eq!(spaced.scopes(), ["x", "y"]);
        let none = claims(serde_json::json!({"scope": 3}));
        assert!(none.scopes().is_empty());
        let client = claims(serde_json::json!({"azp": "cli", "sub": "s", "exp": 12.9}));
        assert_eq!(client.client_id(), Some("cli"));
        assert_eq!(client.subject(), Some("s"));
        assert_eq!(client.expires(), Some(12));
    }

    #[test]
    fn urls_are_https_or_http_on_loopback_with_a_host_and_no_fragment() {
        for ok in [
            "https://mcp.example.com/mcp",
            "https://mcp.example.com:8443",
            "http://127.0.0.1:8080/mcp",
            "http://127.9.0.1/jwks",
            "http://[::1]:3000/mcp",
            "http://localhost/mcp",
        ] {
            assert!(checked_url("it", ok, Query::Refused).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("http://mcp.example.com/mcp", "only https"),
            ("http://10.0.0.1/mcp", "only https"),
            ("ftp://mcp.example.com/mcp", "not an https URL"),
            ("https://mcp.example.com/mcp#top", "fragment"),
            ("https://mcp.example.com/mcp?x=1", "query"),
            ("/mcp", "no host"),
            ("https://mcp.example.com/a\"b", "quote"),
            ("https://mcp.example.com/a b", "space"),
            ("https://mcp.exämple.com/", "visible ASCII"),
        ] {
            let error = checked_url("it", bad, Query::Refused).expect_err(bad);
            assert!(error.to_string().contains(why), "{bad}: {error}");
        }
        assert!(checked_url("it", "https://a.example/jwks?v=2", Query::Allowed).is_ok());
        assert!(valid_scope("tickets:read"));
        for bad in ["", "a b", "a\"b", "a\\b", "a\u{7}"] {
            assert!(!valid_scope(bad), "{bad:?}");
        }
    }

    #[test]
    fn only_public_signature_keys_fit_for_a_pinned_algorithm_are_kept() {
        let rsa_2048 = {
            let mut n = vec![0xc5; 256];
            n[255] |= 1;
            b64(&n)
        };
        let rsa_1024 = b64(&[0xc5; 128]);
        let e = b64(&[1, 0, 1]);
        let (x32, y32, x48) = (b64(&P256_X), b64(&P256_Y), b64(&[7; 48]));
        let ed = b64(&ED25519_BASE);
        let set = serde_json::json!({"keys": [
            {"kid": "rsa", "kty": "RSA", "n": rsa_2048, "e": e, "use": "sig"},
            {"kid": "rsa-alg", "kty": "RSA", "n": rsa_2048, "e": e, "alg": "PS256"},
            {"kid": "rsa-small", "kty": "RSA", "n": rsa_1024, "e": e},
            {"kid": "rsa-enc", "kty": "RSA", "n": rsa_2048, "e": e, "use": "enc"},
            {"kid": "rsa-ops", "kty": "RSA", "n": rsa_2048, "e": e, "key_ops": ["encrypt"]},
            {"kid": "rsa-verify", "kty": "RSA", "n": rsa_2048, "e": e, "key_ops": ["verify"]},
            {"kid": "rsa-hs", "kty": "RSA", "n": rsa_2048, "e": e, "alg": "HS256"},
            {"kid": "rsa-none", "kty": "RSA", "n": rsa_2048, "e": e, "alg": "none"},
            {"kid": "ec", "kty": "EC", "crv": "P-256", "x": x32, "y": y32},
            {"kid": "ec-short", "kty": "EC", "crv": "P-256", "x": x32, "y": b64(&[9; 31])},
            {"kid": "ec-384-as-256", "kty": "EC", "crv": "P-384", "x": x48, "y": x48, "alg": "ES256"},
            {"kid": "ec-rs", "kty": "EC", "crv": "P-256", "x": x32, "y": y32, "alg": "RS256"},
            {"kid": "ed", "kty": "OKP", "crv": "Ed25519", "x": ed},
            {"kid": "ec-off-curve", "kty": "EC", "crv": "P-256", "x": x32, "y": x32},
            {"kid": "ed-short", "kty": "OKP", "crv": "Ed25519", "x": b64(&[7; 16])},
            {"kid": "ed-448", "kty": "OKP", "crv": "Ed448", "x": b64(&[7; 57])},
            {"kid": "hmac", "kty": "oct", "k": b64(b"secret")},
            {"kid": "odd", "kty": "XYZ"},
            "not a key",
        ]});
        let kept = |algorithms: &[Algorithm]| -> Vec<String> {
            parse_jwks(set.to_string().as_bytes(), algorithms)
                .expect("a key set")
                .into_iter()
                .map(|key| key.kid.expect("a kid"))
                .collect()
        };
        assert_eq!(
            kept(&[Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA]),
            ["rsa", "rsa-verify", "ec", "ed"]
        );
        assert_eq!(kept(&[Algorithm::PS256]), ["rsa", "rsa-alg", "rsa-verify"]);
        assert!(kept(&[Algorithm::ES384]).is_empty());
        let ed = parse_jwks(set.to_string().as_bytes(), &[Algorithm::EdDSA]).expect("a key set");
        assert!(ed[0].verifies(Algorithm::EdDSA) && !ed[0].verifies(Algorithm::ES256));
        for bad in ["[]", "{}", "{\"keys\": 1}", "nope"] {
            assert!(
                matches!(
                    parse_jwks(bad.as_bytes(), &[Algorithm::RS256]),
                    Err(JwksError::NotAKeySet(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_key_changed_under_its_kid_has_another_id() {
        // The base point and its negation (the sign bit flipped): two valid keys.
        let key = |sign: u8| {
            let mut point = ED25519_BASE;
            point[31] ^= sign;
            let jwk =
                serde_json::json!({"kid": "k", "kty": "OKP", "crv": "Ed25519", "x": b64(&point)});
            parse_key(&jwk, &[Algorithm::EdDSA]).expect("a key").id
        };
        assert_eq!(key(0), key(0));
        assert_ne!(key(0), key(0x80));
    }

    #[test]
    fn rsa_moduli_are_measured_in_bits() {
        assert_eq!(rsa_bits(&[]), 0);
        assert_eq!(rsa_bits(&[0, 0]), 0);
        assert_eq!(rsa_bits(&[0, 1]), 1);
        assert_eq!(rsa_bits(&[0x80, 0]), 16);
        assert_eq!(rsa_bits(&[0, 0x7f, 0]), 15);
    }

    #[cfg(feature = "mcp-http")]
    fn principal(name: &str) -> Principal {
        Principal::new(name, Gate::new(Mode::Shadow).expect("a gate"))
    }

    #[cfg(feature = "mcp-http")]
    #[test]
    fn the_cache_serves_a_token_until_its_exp_in_its_generation_and_stays_bounded() {
        let cache = Cache::new(2);
        let entry = |name: &str, expires, generation| Entry {
            outcome: Ok(principal(name)),
            expires,
            generation,
        };
        let name =
            |outcome: Option<Outcome>| outcome.map(|o| o.expect("a principal").name().to_owned());
        cache.put([1; 32], entry("a", 100, 0), 50);
        assert_eq!(name(cache.get(&[1; 32], 99, 0)).as_deref(), Some("a"));
        assert_eq!(cache.get(&[2; 32], 99, 0).map(|_| ()), None);
        assert!(cache.get(&[1; 32], 100, 0).is_none(), "served at its exp");
        cache.put([1; 32], entry("a", 100, 0), 50);
        assert!(
            cache.get(&[1; 32], 60, 1).is_none(),
            "served in a later generation"
        );
        // Past its exp already: not kept.
        cache.put([3; 32], entry("c", 40, 0), 50);
        assert!(cache.get(&[3; 32], 10, 0).is_none());
        // Full: the expired go first, then one entry, never past the bound.
        cache.put([4; 32], entry("d", 70, 0), 50);
        cache.put([5; 32], entry("e", 200, 0), 50);
        cache.put([6; 32], entry("f", 200, 0), 80);
        assert!(cache.lock().len() <= 2);
        assert_eq!(name(cache.get(&[6; 32], 90, 0)).as_deref(), Some("f"));
        let none = Cache::new(0);
        none.put([1; 32], entry("a", 100, 0), 50);
        assert!(none.get(&[1; 32], 60, 0).is_none());
    }

    #[cfg(feature = "mcp-http")]
    #[test]
    fn challenges_are_written_as_rfc_6750_has_them() {
        let challenge = Challenge {
            metadata_url: "https://mcp.example.com/.well-known/oauth-protected-resource/mcp".into(),
            scope: "tickets:read files:read".into(),
        };
        let missing = challenge.missing();
        assert_eq!(missing.status(), http::StatusCode::UNAUTHORIZED);
        assert_eq!(
            missing.challenge(),
            "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\", \
             scope=\"tickets:read files:read\""
        );
        let invalid = challenge.invalid("the token has expired");
        assert_eq!(invalid.status(), http::StatusCode::UNAUTHORIZED);
        assert!(
            invalid
                .challenge()
                .to_str()
                .expect("ASCII")
                .starts_with("Bearer error=\"invalid_token\", error_description=\"the token has expired\", resource_metadata=")
        );
        let insufficient = challenge.insufficient();
        assert_eq!(insufficient.status(), http::StatusCode::FORBIDDEN);
        assert!(
            insufficient
                .challenge()
                .to_str()
                .expect("ASCII")
                .contains("error=\"insufficient_scope\"")
        );
        let unscoped = Challenge {
            metadata_url: "https://a.example/.well-known/oauth-protected-resource".into(),
            scope: String::new(),
        };
        assert_eq!(
            unscoped.missing().challenge(),
            "Bearer resource_metadata=\"https://a.example/.well-known/oauth-protected-resource\""
        );
    }

    fn built(builder: OAuthBuilder) -> Result<OAuth, OAuthError> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(builder.build())
    }

    fn ed_jwks() -> Jwks {
        Jwks::json(
            serde_json::json!({"keys": [{"kid": "k", "kty": "OKP", "crv": "Ed25519", "x": b64(&ED25519_BASE)}]})
                .to_string(),
        )
    }

    fn desk(resource: &str) -> OAuthBuilder {
        let builder = OAuth::builder(resource)
            .authorization_server("https://auth.example.com")
            .jwks(ed_jwks())
            .algorithms([Algorithm::EdDSA]);
        #[cfg(feature = "mcp-http")]
        let builder = builder.scope(
            "tickets:read",
            "reader",
            Gate::new(Mode::Shadow).expect("a gate"),
        );
        builder
    }

    #[cfg(feature = "mcp-http")]
    #[test]
    fn the_metadata_is_served_at_the_root_and_at_the_resources_path() {
        let oauth = built(desk("https://mcp.example.com/tenant/mcp")).expect("a verifier");
        assert_eq!(
            oauth.metadata_url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource/tenant/mcp"
        );
        for path in [
            METADATA_PATH,
            "/.well-known/oauth-protected-resource/tenant/mcp",
        ] {
            assert_eq!(
                oauth.metadata(path).as_deref(),
                Some(oauth.metadata_document())
            );
        }
        for path in [
            "/",
            "/tenant/mcp",
            "/.well-known/oauth-protected-resource/tenant",
            "/.well-known/oauth-protected-resource/",
        ] {
            assert!(oauth.metadata(path).is_none(), "{path}");
        }
        let document: Value = serde_json::from_slice(oauth.metadata_document()).expect("JSON");
        assert_eq!(
            document,
            serde_json::json!({
                "resource": "https://mcp.example.com/tenant/mcp",
                "authorization_servers": ["https://auth.example.com"],
                "scopes_supported": ["tickets:read"],
                "bearer_methods_supported": ["header"],
            })
        );
        // A resource at the root has its metadata at the well-known path itself.
        let root = built(desk("https://mcp.example.com/")).expect("a verifier");
        assert_eq!(
            root.metadata_url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
        // One scope rule: the challenge names it.
        assert_eq!(
            root.challenge().challenge(),
            "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource\", \
             scope=\"tickets:read\""
        );
    }

    #[cfg(feature = "mcp-http")]
    #[test]
    fn a_configuration_that_cannot_work_is_refused_with_what_is_wrong() {
        let message = |builder: OAuthBuilder| built(builder).expect_err("refused").to_string();
        assert!(
            message(desk("https://a.example").challenge_scope(["a b"])).contains("the scope `a b`")
        );
        assert!(
            message(desk("https://a.example").resource_documentation("http://docs.example"))
                .contains("the resource documentation")
        );
        assert!(
            message(desk("https://a.example").authorization_server("https://b.example#x"))
                .contains("an authorization server")
        );
        assert!(message(desk("https://a.example").resource_name("desk\n")).contains("control"));
        let no_rule = OAuth::builder("https://a.example")
            .authorization_server("https://auth.example.com")
            .jwks(ed_jwks())
            .algorithms([Algorithm::EdDSA]);
        assert!(message(no_rule).starts_with("no rule"));
        let no_jwks = OAuth::builder("https://a.example")
            .authorization_server("https://auth.example.com")
            .scope("s", "n", Gate::new(Mode::Shadow).expect("a gate"));
        assert!(message(no_jwks).starts_with("no JWKS"));
        // RS256, the default, fits no key of an Ed25519 set.
        let default_alg = OAuth::builder("https://a.example")
            .authorization_server("https://auth.example.com")
            .jwks(ed_jwks())
            .scope("s", "n", Gate::new(Mode::Shadow).expect("a gate"));
        assert!(message(default_alg).contains("no key is fit"));
    }

    #[test]
    fn tokens_that_are_no_jwt_of_a_pinned_algorithm_fail_before_any_key() {
        let oauth = built(desk("https://a.example")).expect("a verifier");
        let keys = oauth.inner.keys.current();
        let part = |value: Value| b64(value.to_string().as_bytes());
        let claims = part(serde_json::json!({"sub": "s"}));
        for (token, failure) in [
            (
                String::new(),
                "the token is not a signed JWT of an accepted algorithm",
            ),
            (
                "a.b".to_owned(),
                "the token is not a signed JWT of an accepted algorithm",
            ),
            (
                format!("{}.{claims}.", part(serde_json::json!({"alg": "none"}))),
                "the token is not a signed JWT of an accepted algorithm",
            ),
            (
                format!(
                    "{}.{claims}.c2ln",
                    part(serde_json::json!({"alg": "HS256", "kid": "k"}))
                ),
                "the token's algorithm is not accepted",
            ),
            (
                format!(
                    "{}.{claims}.c2ln",
                    part(serde_json::json!({"alg": "RS256", "kid": "k"}))
                ),
                "the token's algorithm is not accepted",
            ),
            (
                format!(
                    "{}.{claims}.c2ln",
                    part(serde_json::json!({"alg": "EdDSA", "kid": "k", "crit": ["exp"]}))
                ),
                "the token has critical header parameters this server does not understand",
            ),
        ] {
            assert_eq!(
                oauth.inner.check(&token, &keys).map(|_| ()),
                Err(Failure::Invalid(failure)),
                "{token}"
            );
        }
        let unknown = format!(
            "{}.{claims}.c2ln",
            part(serde_json::json!({"alg": "EdDSA", "kid": "other"}))
        );
        assert_eq!(
            oauth.inner.check(&unknown, &keys).map(|_| ()),
            Err(Failure::UnknownKey)
        );
        // No kid, one key fits: that key is asked, and the signature does not verify.
        let unnamed = format!(
            "{}.{claims}.c2ln",
            part(serde_json::json!({"alg": "EdDSA"}))
        );
        assert_eq!(
            oauth.inner.check(&unnamed, &keys).map(|_| ()),
            Err(Failure::Invalid("the token's signature does not verify"))
        );
    }

    // RFC 8032's first Ed25519 test key (§7.1): its secret and its public key.
    const RFC8032_SECRET: [u8; 32] = [
        0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec, 0x2c,
        0xc4, 0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19, 0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae,
        0x7f, 0x60,
    ];
    const RFC8032_PUBLIC: [u8; 32] = [
        0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3, 0xc9, 0x64, 0x07,
        0x3a, 0x0e, 0xe1, 0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25, 0xaf, 0x02, 0x1a, 0x68, 0xf7, 0x07,
        0x51, 0x1a,
    ];

    // What the console asks of the verifier, with the MCP server built or not (`console` alone
    // builds it without rules): the claims of a token its key signed, and none of one altered after.
    #[test]
    fn a_token_signed_by_a_key_of_the_set_gives_its_claims_and_an_altered_one_none() {
        let resource = "https://console.example.com/";
        let jwks = serde_json::json!({"keys": [
            {"kid": "k", "kty": "OKP", "crv": "Ed25519", "x": b64(&RFC8032_PUBLIC)},
        ]});
        let oauth = built(desk(resource).jwks(Jwks::json(jwks.to_string()))).expect("a verifier");
        // The secret as PKCS #8 (RFC 8410): the fixed prefix of an Ed25519 key, then the key.
        let mut pkcs8 = vec![
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        pkcs8.extend_from_slice(&RFC8032_SECRET);
        let key = jsonwebtoken::EncodingKey::from_ed_der(&pkcs8);
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
        header.kid = Some("k".into());
        let exp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after the epoch")
            .as_secs()
            + 600;
        let claims = |sub: &str, aud: &str| {
            serde_json::json!({
                "iss": "https://auth.example.com",
                "aud": aud,
                "sub": sub,
                "exp": exp,
                "scope": "toolgate:console",
            })
        };
        let token = jsonwebtoken::encode(&header, &claims("olga", resource), &key).expect("signed");
        let read = |token: &str| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(oauth.claims(token))
        };
        let verified = read(&token).expect("the token verifies");
        assert_eq!(verified.subject(), Some("olga"));
        assert!(verified.has_scope("toolgate:console"));
        assert_eq!(verified.expires(), Some(exp));
        // Another subject put in place of the signed one: the signature no longer covers it.
        let (signed_header, rest) = token.split_once('.').expect("three parts");
        let (_, signature) = rest.split_once('.').expect("three parts");
        let altered_claims = b64(claims("ravi", resource).to_string().as_bytes());
        assert!(read(&format!("{signed_header}.{altered_claims}.{signature}")).is_none());
        // Signed by the right key, for another audience.
        let elsewhere =
            jsonwebtoken::encode(&header, &claims("olga", "https://other.example"), &key)
                .expect("signed");
        assert!(read(&elsewhere).is_none());
    }
}
