//! Serving over MCP's streamable HTTP transport (feature `mcp-http`): rmcp's server transport, behind a
//! bearer token that names the caller's principal, whose gate decides its calls and lists its tools.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{AUTHORIZATION, HeaderName, WWW_AUTHENTICATE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::server::ToolgateServer;
use crate::canonical::sha256_hex;
use crate::gate::Gate;

/// Who calls over HTTP, as a bearer token names them: a principal's name and the gate its calls go
/// through. The HTTP service puts it into the request's extensions, where the server finds it.
#[derive(Debug, Clone)]
pub struct Principal {
    name: Arc<str>,
    gate: Gate,
}

impl Principal {
    /// The principal's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The gate that decides the principal's calls and what `tools/list` shows it.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }
}

/// The bearer tokens a server accepts, each mapped by the application to a principal and its gate.
///
/// Tokens are kept as their SHA-256, and looked up by it: neither a token nor a prefix of one is
/// compared byte by byte. Give each principal a gate of its own (its mode, its deny list, and
/// [`GateBuilder::principal`](crate::gate::GateBuilder::principal) with its name, which approvers and
/// the audit log see); the gates may share one audit sink and one approval store.
#[derive(Default)]
pub struct Principals {
    by_token: HashMap<String, Principal>,
}

impl fmt::Debug for Principals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.by_token.values().map(Principal::name).collect();
        names.sort_unstable();
        f.debug_struct("Principals")
            .field("names", &names)
            .finish_non_exhaustive()
    }
}

impl Principals {
    /// No principal: every request is refused until one is added.
    pub fn new() -> Principals {
        Principals::default()
    }

    /// Accepts `Authorization: Bearer <token>` as the principal `name`, whose calls `gate` decides.
    /// A token given twice keeps its last principal.
    #[must_use]
    pub fn bearer(mut self, token: &str, name: impl Into<String>, gate: Gate) -> Principals {
        let principal = Principal {
            name: name.into().into(),
            gate,
        };
        self.by_token
            .insert(sha256_hex(token.as_bytes()), principal);
        self
    }

    /// The principal the request's `Authorization` header names, if any.
    pub fn find(&self, authorization: Option<&HeaderValue>) -> Option<&Principal> {
        let value = authorization?.to_str().ok()?;
        let (scheme, token) = value.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        self.by_token.get(&sha256_hex(token.trim().as_bytes()))
    }
}

/// rmcp's streamable HTTP service of a [`ToolgateServer`], each connection its own
/// [`ToolgateServer::connection`], behind [`Principals`]: a request without a known bearer token is
/// answered `401 Unauthorized` and reaches no handler. A tower `Service`: serve it with hyper (its
/// `hyper_util::service::TowerToHyperService`) or mount it in an axum router.
///
/// A session (`Mcp-Session-Id`, clients of protocols before 2026-07-28) belongs to the principal whose
/// token opened it: a request that names it with another principal's token (a `POST`, a
/// `notifications/cancelled` among them, the `GET` stream, the `DELETE` that ends it) is answered
/// `404 Not Found`, as a session that does not exist is, and reaches nothing. The bindings live in
/// this service's memory: a session opened by another process (rmcp's `session_store`) is unknown
/// here, and its client initializes again.
#[derive(Clone)]
pub struct HttpService {
    inner: StreamableHttpService<ToolgateServer, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    principals: Arc<Principals>,
    owners: Arc<Owners>,
}

/// The header that names a session.
const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

/// The principal that opened each session of this service, by the session's id.
#[derive(Default)]
struct Owners {
    state: Mutex<OwnersState>,
}

#[derive(Default)]
struct OwnersState {
    by_session: HashMap<String, Arc<str>>,
    /// How many bindings make the next new session look for those of sessions that have ended.
    prune_at: usize,
}

/// Bindings kept before the first look for ended sessions.
const PRUNE_FIRST: usize = 1024;

impl Owners {
    fn lock(&self) -> MutexGuard<'_, OwnersState> {
        // Every update leaves the map whole: a panic elsewhere does not poison it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn owner(&self, session: &str) -> Option<Arc<str>> {
        self.lock().by_session.get(session).cloned()
    }

    /// Binds a new session to `principal`. Returns whether the bindings should be pruned.
    fn bind(&self, session: String, principal: Arc<str>) -> bool {
        let mut state = self.lock();
        state.by_session.insert(session, principal);
        state.by_session.len() >= state.prune_at.max(PRUNE_FIRST)
    }

    fn forget(&self, session: &str) {
        self.lock().by_session.remove(session);
    }

    /// Forgets the bindings of sessions that rmcp no longer holds (ended, or timed out).
    async fn prune(&self, sessions: &LocalSessionManager) {
        let live = sessions.sessions.read().await;
        let mut state = self.lock();
        state
            .by_session
            .retain(|id, _| live.contains_key(id.as_str()));
        state.prune_at = state.by_session.len() * 2;
    }
}

impl fmt::Debug for HttpService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpService")
            .field("principals", &self.principals)
            .finish_non_exhaustive()
    }
}

impl HttpService {
    /// Serves `server` to `principals`, with rmcp's `config` (allowed hosts, the request body's size
    /// limit, whether to keep sessions for clients of protocols before 2026-07-28, ...).
    pub fn new(
        server: ToolgateServer,
        principals: Principals,
        config: StreamableHttpServerConfig,
    ) -> HttpService {
        let sessions = Arc::new(LocalSessionManager::default());
        let inner = StreamableHttpService::new(
            move || Ok(server.connection()),
            Arc::clone(&sessions),
            config,
        );
        HttpService {
            inner,
            sessions,
            principals: Arc::new(principals),
            owners: Arc::new(Owners::default()),
        }
    }
}

type HttpFuture =
    Pin<Box<dyn Future<Output = Result<Response<BoxBody<Bytes, Infallible>>, Infallible>> + Send>>;

impl<B> tower_service::Service<Request<B>> for HttpService
where
    B: http_body::Body + Send + 'static,
    B::Error: fmt::Display,
    B::Data: Send + 'static,
{
    type Response = Response<BoxBody<Bytes, Infallible>>;
    type Error = Infallible;
    type Future = HttpFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<B>) -> HttpFuture {
        let Some(principal) = self
            .principals
            .find(request.headers().get(AUTHORIZATION))
            .cloned()
        else {
            return Box::pin(async { Ok(unauthorized()) });
        };
        let session = match session_of(&request) {
            Ok(session) => session,
            Err(NoSuchSession) => return Box::pin(async { Ok(session_not_found()) }),
        };
        // A session is its opener's: for anyone else it does not exist.
        if let Some(session) = &session
            && self.owners.owner(session).as_deref() != Some(principal.name())
        {
            return Box::pin(async { Ok(session_not_found()) });
        }
        let name = Arc::clone(&principal.name);
        let ends = request.method() == Method::DELETE;
        request.extensions_mut().insert(principal);
        let (mut inner, owners, sessions) = (
            self.inner.clone(),
            Arc::clone(&self.owners),
            Arc::clone(&self.sessions),
        );
        Box::pin(async move {
            let response = tower_service::Service::call(&mut inner, request).await?;
            match session {
                Some(session) if ends && response.status().is_success() => owners.forget(&session),
                Some(_) => {}
                None => {
                    let opened = response
                        .headers()
                        .get(SESSION_ID)
                        .and_then(|id| id.to_str().ok());
                    if let Some(opened) = opened
                        && owners.bind(opened.to_owned(), name)
                    {
                        owners.prune(&sessions).await;
                    }
                }
            }
            Ok(response)
        })
    }
}

/// A request's session id is not one a session of this service could have.
struct NoSuchSession;

/// The session a request names, if it names one: one `Mcp-Session-Id` header, in visible ASCII.
fn session_of<B>(request: &Request<B>) -> Result<Option<String>, NoSuchSession> {
    let mut ids = request.headers().get_all(SESSION_ID).iter();
    let Some(id) = ids.next() else {
        return Ok(None);
    };
    if ids.next().is_some() {
        return Err(NoSuchSession);
    }
    let id = id.to_str().map_err(|_| NoSuchSession)?;
    Ok(Some(id.to_owned()))
}

/// The answer to a request naming a session that does not exist for its principal: rmcp's own to an
/// unknown session, so that another principal's session cannot be told from none.
fn session_not_found() -> Response<BoxBody<Bytes, Infallible>> {
    let body = Full::new(Bytes::from_static(b"Not Found: Session not found"));
    let mut response = Response::new(body.boxed());
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

fn unauthorized() -> Response<BoxBody<Bytes, Infallible>> {
    let body = Full::new(Bytes::from_static(
        b"a bearer token this server knows is required\n",
    ));
    let mut response = Response::new(body.boxed());
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}
