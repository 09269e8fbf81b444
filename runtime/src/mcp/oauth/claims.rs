//! A verified token's claims, and the rules that map them to a principal.

#[cfg(feature = "mcp-http")]
use std::sync::Arc;

use serde_json::{Map, Value};

#[cfg(feature = "mcp-http")]
use crate::mcp::http::Principal;

/// The claims of a verified token, for the rules that map it to a principal.
#[derive(Debug, Clone)]
pub struct Claims {
    pub(super) map: Map<String, Value>,
    /// Whether the verifier accepts tokens of more than one issuer.
    pub(super) several_issuers: bool,
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
pub(super) type Rule = Arc<dyn Fn(&Claims) -> Option<Principal> + Send + Sync>;
