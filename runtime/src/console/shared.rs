//! What every page of the console shares: the store, the reader, the operators and their sessions; the
//! operator of a request; the page saying the store cannot be read.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use super::html::{self, page};
use super::operators::{Operators, Session, Sessions, cookie_of, digest};
use crate::approval::store::StoreError;
use crate::postgres::{PostgresStore, Reader};

pub(super) type Shared = Arc<Inner>;

pub(super) struct Inner {
    pub(super) url: String,
    pub(super) schema: String,
    pub(super) operators: Operators,
    pub(super) session_ttl: Duration,
    pub(super) sessions: Sessions,
    pub(super) store: PostgresStore,
    /// Opens its connection again when it is lost.
    pub(super) reader: Reader,
}

impl Inner {
    /// The session of `cookie`, if it is live: not ended, not expired.
    pub(super) fn session(&self, cookie: &str) -> Option<Session> {
        self.sessions.find(cookie)
    }
}

/// The operator of a request's session. A page asked for without one redirects to the log-in page; a
/// change asked for without one is refused.
pub(super) struct Operator {
    pub(super) name: Arc<str>,
    csrf: String,
}

impl Operator {
    /// The session's CSRF token, for the forms of a page.
    pub(super) fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Whether a form's CSRF token is this session's.
    pub(super) fn checks(&self, csrf: &str) -> bool {
        // Compared as digests, so that the time taken tells nothing of a prefix.
        digest(csrf) == digest(&self.csrf)
    }

    /// The refusal of a change whose form does not carry the session's CSRF token.
    pub(super) fn forged() -> Response {
        (
            StatusCode::FORBIDDEN,
            "the form does not carry this session's token: reload the page and try again",
        )
            .into_response()
    }
}

impl FromRequestParts<Shared> for Operator {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Shared) -> Result<Self, Response> {
        let session = match cookie_of(&parts.headers) {
            Some(cookie) => console.session(cookie),
            None => None,
        };
        match session {
            Some(session) => Ok(Operator {
                name: session.operator,
                csrf: session.csrf,
            }),
            None if parts.method == Method::GET || parts.method == Method::HEAD => {
                Err(Redirect::to("/login").into_response())
            }
            None => Err((StatusCode::UNAUTHORIZED, "log in first").into_response()),
        }
    }
}

/// A page saying the database could not be read: the console's own words and the error, escaped.
pub(super) fn unavailable(operator: &Operator, error: &StoreError) -> Response {
    let body = html! {
        h1 { "The store cannot be read" }
        p.problem #error { (html::Shown(&error.to_string())) }
        p.muted { "Nothing was changed. Reload the page to try again." }
    };
    (
        StatusCode::SERVICE_UNAVAILABLE,
        page(
            "Unavailable",
            "",
            Some((&operator.name, operator.csrf())),
            body,
        ),
    )
        .into_response()
}
