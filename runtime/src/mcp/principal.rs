//! Who calls over HTTP: a principal's name and its gate, which the HTTP service finds for a request and
//! the server reads back from the request's extensions. A module of its own, below both.

use std::sync::Arc;

use crate::gate::Gate;

/// Who calls over HTTP, as a bearer token names them: a principal's name and the gate its calls go
/// through. The HTTP service puts it into the request's extensions, where the server finds it.
///
/// The name is what the principal's sessions, tasks and in-band approval states are bound to: two
/// callers that must not see each other's need two names.
#[derive(Debug, Clone)]
pub struct Principal {
    pub(super) name: Arc<str>,
    gate: Gate,
}

impl Principal {
    /// The principal `name`, whose calls `gate` decides: what a [`TokenVerifier`](super::http::TokenVerifier) answers for a token
    /// it accepts.
    pub fn new(name: impl Into<String>, gate: Gate) -> Principal {
        Principal {
            name: name.into().into(),
            gate,
        }
    }

    /// The principal's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The principal's name, shared.
    pub(crate) fn shared_name(&self) -> Arc<str> {
        Arc::clone(&self.name)
    }

    /// The gate that decides the principal's calls and what `tools/list` shows it.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }
}
