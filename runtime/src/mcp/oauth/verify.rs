//! The verifier: a token checked against the keys held (signature, algorithm, issuer, audience,
//! time), mapped to a principal by the rules, its outcome cached.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
#[cfg(feature = "mcp-http")]
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use jsonwebtoken::errors::ErrorKind;
use serde_json::{Map, Value};
#[cfg(feature = "mcp-http")]
use sha2::{Digest, Sha256};

use super::algorithms::Algorithm;
#[cfg(feature = "mcp-http")]
use super::cache::{Cache, Entry, Outcome};
use super::challenge::Challenge;
use super::claims::Claims;
#[cfg(feature = "mcp-http")]
use super::claims::Rule;
use super::key_store::{KeySet, KeyStore};
#[cfg(feature = "mcp-http")]
use crate::mcp::http::{Refusal, TokenVerifier, Verification};

/// The path of RFC 9728's protected resource metadata, before the resource's own path.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Held by the request that loads a set grown old: released however that request ends, dropped
/// unpolled included.
struct StaleClaim(Arc<Inner>);

impl Drop for StaleClaim {
    fn drop(&mut self) {
        self.0.keys.release_stale();
    }
}

/// Why a token did not verify against the keys held.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Failure {
    /// It names a key that is not held (or names none, and none fits): loading the keys again may
    /// find it.
    UnknownKey,
    /// It is refused whatever the keys, for this reason (an `error_description`).
    Invalid(&'static str),
}

/// An OAuth 2.1 resource server's verifier of access tokens, for
/// [`Principals::verifier`](crate::mcp::http::Principals::verifier): see the [module docs](super).
/// Cheap to clone: clones share their keys and cache.
#[derive(Clone)]
pub struct OAuth {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) keys: KeyStore,
    pub(super) validations: HashMap<Algorithm, jsonwebtoken::Validation>,
    pub(super) algorithms: Vec<Algorithm>,
    pub(super) issuers: Vec<String>,
    #[cfg(feature = "mcp-http")]
    pub(super) rules: Vec<Rule>,
    #[cfg(feature = "mcp-http")]
    pub(super) cache: Cache,
    pub(super) challenge: Challenge,
    pub(super) document: Bytes,
    #[cfg(feature = "mcp-http")]
    pub(super) metadata_path: String,
    pub(super) resource: String,
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
    pub(super) fn check(&self, token: &str, keys: &KeySet) -> Result<Claims, Failure> {
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

    fn metadata_paths(&self) -> Vec<String> {
        let mut paths = vec![METADATA_PATH.to_owned()];
        if self.inner.metadata_path != METADATA_PATH {
            paths.push(self.inner.metadata_path.clone());
        }
        paths
    }
}
