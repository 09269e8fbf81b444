//! Who makes a request: its gate and the session its approval states and tasks are bound to, and
//! what its client can take.

use std::sync::{Arc, OnceLock};

use super::builder::ToolgateServer;
use crate::gate::Gate;

/// A random id of one connection, to which in-band request states are bound.
fn session_id() -> Arc<str> {
    let mut bytes = [0_u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        panic!("the operating system's random number generator failed");
    }
    crate::canonical::hex(&bytes).into()
}

impl ToolgateServer {
    /// This connection's random id.
    pub(super) fn connection_id(&self) -> Arc<str> {
        Arc::clone(self.session.get_or_init(session_id))
    }

    /// Who makes a request: the gate that decides it and the session an in-band state is bound to.
    /// Over HTTP, the principal its bearer token maps to (and its gate), for the lifetime of the
    /// principal: the 2026-07-28 protocol has no sessions, and any process behind the address may
    /// answer a retry. Elsewhere, this server's gate and connection.
    pub(super) fn caller(&self, extensions: &rmcp::model::Extensions) -> Caller {
        #[cfg(feature = "mcp-http")]
        if let Some(principal) = extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<crate::mcp::principal::Principal>())
        {
            return Caller {
                gate: principal.gate().clone(),
                of: Of::Principal(principal.shared_name()),
            };
        }
        let _ = extensions;
        Caller {
            gate: self.gate.clone(),
            of: Of::Connection(Arc::clone(&self.session)),
        }
    }
}

/// What the client of a request can take besides a plain result.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Client {
    /// It speaks 2026-07-28 and declared elicitation, so it can answer an `InputRequired` form.
    pub(super) answers_forms: bool,
    /// It declared the Tasks extension, so a call may become a task.
    pub(super) takes_tasks: bool,
}

/// The gate and the session of one request.
pub(super) struct Caller {
    pub(super) gate: Gate,
    of: Of,
}

/// Whose a request's session is.
enum Of {
    /// Over HTTP, the principal's of this name.
    #[cfg(feature = "mcp-http")]
    Principal(Arc<str>),
    /// Elsewhere, the connection's, by its random id.
    Connection(Arc<OnceLock<Arc<str>>>),
}

impl Caller {
    /// The principal its transport authenticated, where it names one (over HTTP): a two-step
    /// approval and a session grant are bound to it, as well as to the gate's own principal, since
    /// several principals may share a gate.
    pub(super) fn name(&self) -> Option<Arc<str>> {
        match &self.of {
            #[cfg(feature = "mcp-http")]
            Of::Principal(name) => Some(Arc::clone(name)),
            Of::Connection(_) => None,
        }
    }

    /// Who the call is made for, as an operator is shown it: the gate's principal, and the caller's
    /// where it is another name.
    pub(super) fn principal(&self) -> Option<String> {
        crate::gate::caller::principal_of(self.gate.principal(), self.name().as_deref())
    }

    /// The session a request's in-band approval states and tasks are bound to.
    pub(super) fn session(&self) -> Arc<str> {
        match &self.of {
            #[cfg(feature = "mcp-http")]
            Of::Principal(name) => format!("principal\n{name}").into(),
            Of::Connection(id) => format!("connection\n{}", id.get_or_init(session_id)).into(),
        }
    }
}
