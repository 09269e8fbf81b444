//! The console as a whole: its configuration, its routes, and serving them.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::operators::{self, Operators, Sessions};
use super::shared::{Inner, Shared};
use super::{approvals, fleet, html, login, promotion, replay, trail};
use crate::approval::store::StoreError;
use crate::mcp::oauth::{OAuth, OAuthBuilder};
use crate::postgres::{PostgresStore, Reader};

/// How long a log-in lasts unless set.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(8 * 60 * 60);

/// The console: build it with [`Console::builder`], serve it with [`Console::serve`].
#[derive(Clone)]
pub struct Console {
    shared: Shared,
}

/// Configures a [`Console`].
#[derive(Debug)]
#[must_use]
pub struct ConsoleBuilder {
    schema: String,
    operators: Operators,
    access_tokens: Option<(OAuthBuilder, String)>,
    session_ttl: Duration,
    timeout: Duration,
}

impl ConsoleBuilder {
    /// The schema of the store's tables (`toolgate` unless set).
    pub fn schema(mut self, schema: &str) -> Self {
        schema.clone_into(&mut self.schema);
        self
    }

    /// Who may log in. A console without operators is refused by [`ConsoleBuilder::connect`].
    pub fn operators(mut self, operators: Operators) -> Self {
        self.operators = operators;
        self
    }

    /// Operators may also log in with an access token that `oauth` verifies (a JWT of its
    /// authorization server, for its audience, checked as the MCP server checks one) and that grants
    /// `scope`: the operator is the token's subject (`sub`), and the session lasts no longer than the
    /// token. Rules given to `oauth` are not used.
    pub fn access_tokens(mut self, oauth: OAuthBuilder, scope: impl Into<String>) -> Self {
        self.access_tokens = Some((oauth, scope.into()));
        self
    }

    /// How long a log-in lasts ([`DEFAULT_SESSION_TTL`] unless set).
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = ttl;
        self
    }

    /// How long each read of the database may take (5 seconds unless set).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Connects to the store at `url` and checks its schema's version.
    pub async fn connect(mut self, url: &str) -> Result<Console, StoreError> {
        if let Some((oauth, scope)) = self.access_tokens.take() {
            self.operators = self
                .operators
                .access_tokens(access_tokens(oauth).await?, scope);
        }
        if self.operators.is_empty() {
            return Err(StoreError::Unavailable(
                "not configured: the console has no operators, so no one could log in".into(),
            ));
        }
        if self.session_ttl.is_zero() {
            return Err(StoreError::Unavailable(
                "not configured: a session must last more than zero".into(),
            ));
        }
        let (owned_url, schema, timeout) = (url.to_owned(), self.schema.clone(), self.timeout);
        let store = tokio::task::spawn_blocking(move || {
            PostgresStore::builder()
                .schema(&schema)
                .timeout(timeout)
                .connect(&owned_url)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("cannot connect the store: {e}")))??;
        let reader = Reader::connect(url, &self.schema, self.timeout).await?;
        Ok(Console {
            shared: Arc::new(Inner {
                url: url.to_owned(),
                schema: self.schema,
                operators: self.operators,
                session_ttl: self.session_ttl,
                sessions: Sessions::default(),
                store,
                reader,
            }),
        })
    }
}

/// The verifier of operators' access tokens. With the MCP server (`mcp-http`), `OAuth` maps tokens to
/// principals by rules, one of which it requires; the console reads the claims itself (the subject,
/// the scope, the expiry), so the rule names no one.
async fn access_tokens(oauth: OAuthBuilder) -> Result<OAuth, StoreError> {
    #[cfg(feature = "mcp-http")]
    let oauth = oauth.map(|_| None);
    oauth
        .build()
        .await
        .map_err(|e| StoreError::Unavailable(format!("not configured: access tokens: {e}")))
}

/// Why [`ConsoleBuilder::run`] stopped.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError {
    /// The store could not be connected, or the configuration is refused.
    Store(StoreError),
    /// The address could not be listened on, or serving failed.
    Io(std::io::Error),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Store(error) => write!(f, "{error}"),
            RunError::Io(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for RunError {}

impl ConsoleBuilder {
    /// Connects to `url`, listens on `address` and serves the console on a runtime of its own until
    /// the process ends (what `toolgate console` runs); `listening` is told the address once
    /// connections are accepted.
    pub fn run(
        self,
        url: &str,
        address: std::net::SocketAddr,
        listening: impl FnOnce(std::net::SocketAddr),
    ) -> Result<(), RunError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(RunError::Io)?;
        runtime.block_on(async {
            let console = self.connect(url).await.map_err(RunError::Store)?;
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(RunError::Io)?;
            listening(listener.local_addr().map_err(RunError::Io)?);
            console.serve(listener).await.map_err(RunError::Io)
        })
    }
}

impl Console {
    /// A builder: schema `toolgate`, sessions of 8 hours, reads of at most 5 seconds, no operators.
    pub fn builder() -> ConsoleBuilder {
        ConsoleBuilder {
            schema: crate::postgres::DEFAULT_SCHEMA.to_owned(),
            operators: Operators::new(),
            access_tokens: None,
            session_ttl: DEFAULT_SESSION_TTL,
            timeout: Duration::from_secs(5),
        }
    }

    /// The console's pages, to serve under an application's own server (at its root: the pages link
    /// to absolute paths).
    pub fn router(&self) -> Router {
        Router::new()
            .route(
                "/",
                get(|| async { axum::response::Redirect::to("/approvals") }),
            )
            .route("/login", get(login::login_page).post(login::login))
            .route("/logout", post(login::logout))
            .route("/approvals", get(approvals::list))
            .route("/approvals/table", get(approvals::table))
            .route("/approvals/events", get(approvals::events))
            .route("/approvals/{id}", get(approvals::detail))
            .route("/approvals/{id}/answer", post(approvals::answer))
            .route("/fleet", get(fleet::list))
            .route("/fleet/lower", post(fleet::lower))
            .route("/trail", get(trail::search))
            .route("/trail/call", get(trail::call))
            .route("/trail/verify", get(trail::verify))
            .route("/trail/records", get(trail::records))
            .route("/policy/replay", get(replay::form).post(replay::run))
            .route("/promotion", get(promotion::chart))
            .route("/assets/console.css", get(css))
            .route("/assets/console.js", get(js))
            .fallback(not_found)
            .layer(axum::middleware::from_fn(operators::guard))
            .with_state(self.shared.clone())
    }

    /// Serves the console on `listener` until the future is dropped.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.router()).await
    }
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("schema", &self.shared.schema)
            .field("operators", &self.shared.operators)
            .field("session_ttl", &self.shared.session_ttl)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// Whether the console lets anyone in (a console without operators refuses to start).
    pub fn has_operators(&self) -> bool {
        !self.shared.operators.is_empty()
    }
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "no such page").into_response()
}

async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        html::CSS,
    )
        .into_response()
}

async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        html::JS,
    )
        .into_response()
}
