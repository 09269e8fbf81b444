//! The verifier's configuration, checked and built: its defaults, its rules, the metadata it
//! serves.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::algorithms::Algorithm;
#[cfg(feature = "mcp-http")]
use super::cache::Cache;
use super::challenge::Challenge;
#[cfg(feature = "mcp-http")]
use super::claims::{Claims, Rule};
use super::error::{JwksError, OAuthError};
use super::jwks::{Jwks, Loader};
use super::key_store::KeyStore;
use super::urls::{Query, checked_url, url_error};
use super::verify::{Inner, METADATA_PATH, OAuth};
#[cfg(feature = "mcp-http")]
use crate::gate::Gate;
#[cfg(feature = "mcp-http")]
use crate::mcp::http::Principal;

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
        let store = KeyStore::new(
            loader,
            keys,
            self.refresh_interval,
            self.keys_max_age,
            algorithms.clone(),
        );
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

/// A scope token of RFC 6749 §3.3: visible ASCII but `"` and `\`.
pub(super) fn valid_scope(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
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
