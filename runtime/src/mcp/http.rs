//! Serving over MCP's streamable HTTP transport (feature `mcp-http`): rmcp's server transport, behind a
//! bearer token that names the caller's principal, whose gate decides its calls and lists its tools.
//!
//! # Who a request is
//!
//! [`Principals::authenticate`] decides before anything reaches the server. A bearer token of
//! [`Principals::bearer`] is its principal; any other bearer token is the [`TokenVerifier`]'s to judge,
//! if one is [set](Principals::verifier); a request with no `Authorization` header at all is the
//! [anonymous](Principals::anonymous) principal, if one is set. Everything else is answered with a
//! [`Refusal`] (`401`, or `403` for a valid token that grants nothing here) and reaches no handler: a
//! bad token is refused even where an anonymous principal would serve no token. Bodies of refusals are
//! short, fixed texts that never echo the token.
//!
//! # OAuth 2.1 (feature `mcp-oauth`)
//!
//! With `toolgate::mcp::oauth::OAuth` as the verifier, the service is the resource server of MCP's
//! authorization. It answers a `GET` of `/.well-known/oauth-protected-resource`, and of that path
//! followed by the resource's own (`…/oauth-protected-resource/mcp`, RFC 9728 §3.1), with the
//! protected resource metadata, to anyone: where the service is mounted under a router, route those
//! paths to it too. A `401` carries `WWW-Authenticate: Bearer resource_metadata="…"` and the `scope` to
//! ask for; when a token was given, `error="invalid_token"` and an `error_description` saying why
//! (expired, another audience, an unknown key, ...). A token that verifies but that no rule maps to a
//! principal is `403` with `error="insufficient_scope"`. A principal of a token is bound to its
//! sessions exactly as one of a static token: by its name.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{
    ACCESS_CONTROL_ALLOW_ORIGIN, AUTHORIZATION, CONTENT_TYPE, HeaderName, WWW_AUTHENTICATE,
};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use sha2::{Digest, Sha256};

pub use super::principal::Principal;
use super::server::ToolgateServer;
use crate::gate::Gate;

/// Why a request is refused before it reaches the server: its HTTP status (`401`, `403` or `400`) and
/// the `WWW-Authenticate` challenge it carries (RFC 6750 §3).
#[derive(Debug, Clone)]
pub struct Refusal {
    status: StatusCode,
    challenge: HeaderValue,
}

impl Refusal {
    /// `401 Unauthorized`: no token, or one that is invalid, expired or unknown.
    pub fn unauthorized(challenge: HeaderValue) -> Refusal {
        Refusal {
            status: StatusCode::UNAUTHORIZED,
            challenge,
        }
    }

    /// `403 Forbidden`: a valid token that grants no access here (`error="insufficient_scope"`).
    pub fn forbidden(challenge: HeaderValue) -> Refusal {
        Refusal {
            status: StatusCode::FORBIDDEN,
            challenge,
        }
    }

    /// `400 Bad Request`: a request whose credentials cannot be read (`error="invalid_request"`).
    pub fn bad_request(challenge: HeaderValue) -> Refusal {
        Refusal {
            status: StatusCode::BAD_REQUEST,
            challenge,
        }
    }

    /// The response's status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The response's `WWW-Authenticate` header.
    pub fn challenge(&self) -> &HeaderValue {
        &self.challenge
    }
}

/// What a request's credentials come to: its principal, or its [`Refusal`]; now, or once a future
/// completes (a verifier that must fetch keys first).
pub enum Verification {
    /// Decided without waiting.
    Ready(Result<Principal, Refusal>),
    /// Decided once the future completes.
    Pending(Pin<Box<dyn Future<Output = Result<Principal, Refusal>> + Send>>),
}

impl fmt::Debug for Verification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verification::Ready(result) => f.debug_tuple("Ready").field(result).finish(),
            Verification::Pending(_) => f.write_str("Pending"),
        }
    }
}

/// Tells the principal of a bearer token that is none of [`Principals::bearer`]'s, e.g. an OAuth
/// access token (`toolgate::mcp::oauth::OAuth`, feature `mcp-oauth`).
pub trait TokenVerifier: Send + Sync + 'static {
    /// The principal `token` names, or why it is refused. Never called with a token of
    /// [`Principals::bearer`].
    fn verify(&self, token: &str) -> Verification;

    /// The refusal of a request that carries no bearer token, when no anonymous principal serves it.
    fn challenge(&self) -> Refusal;

    /// A JSON document served to anyone who `GET`s `path` (RFC 9728's protected resource metadata), if
    /// this verifier has one there.
    fn metadata(&self, path: &str) -> Option<Bytes> {
        let _ = path;
        None
    }

    /// The paths [`metadata`](TokenVerifier::metadata) answers at, for a router to send there.
    fn metadata_paths(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The bearer tokens a server accepts, each mapped by the application to a principal and its gate;
/// optionally a [`TokenVerifier`] for other tokens, and an anonymous principal for requests without
/// any.
///
/// Tokens are kept as their SHA-256, and looked up by it: neither a token nor a prefix of one is
/// compared byte by byte. Give each principal a gate of its own (its mode, its deny list, and
/// [`GateBuilder::principal`](crate::gate::builder::GateBuilder::principal) with its name, which approvers and
/// the audit log see); the gates may share one audit sink and one approval store.
#[derive(Default)]
pub struct Principals {
    by_token: HashMap<[u8; 32], Principal>,
    anonymous: Option<Principal>,
    verifier: Option<Arc<dyn TokenVerifier>>,
}

impl fmt::Debug for Principals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.by_token.values().map(Principal::name).collect();
        names.sort_unstable();
        f.debug_struct("Principals")
            .field("names", &names)
            .field("anonymous", &self.anonymous.as_ref().map(Principal::name))
            .field("verifier", &self.verifier.is_some())
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
        self.by_token
            .insert(token_digest(token), Principal::new(name, gate));
        self
    }

    /// Serves a request that has no `Authorization` header as the principal `name`, whose calls
    /// `gate` decides. A request with a token that is not accepted is still refused: a bad token is
    /// never served as the anonymous principal.
    #[must_use]
    pub fn anonymous(mut self, name: impl Into<String>, gate: Gate) -> Principals {
        self.anonymous = Some(Principal::new(name, gate));
        self
    }

    /// Asks `verifier` about every bearer token that is none of [`bearer`](Principals::bearer)'s, and
    /// for the challenge of a request without one. A second call replaces the first verifier.
    #[must_use]
    pub fn verifier(mut self, verifier: impl TokenVerifier) -> Principals {
        self.verifier = Some(Arc::new(verifier));
        self
    }

    /// The principal of a [`bearer`](Principals::bearer) token that the request's `Authorization`
    /// header names, if any. Neither the verifier nor the anonymous principal is asked: see
    /// [`authenticate`](Principals::authenticate).
    pub fn find(&self, authorization: Option<&HeaderValue>) -> Option<&Principal> {
        self.by_token
            .get(&token_digest(bearer_token(authorization?)?))
    }

    /// Who a request with these headers is, or why it is refused: a bearer token of
    /// [`bearer`](Principals::bearer), else the [verifier](Principals::verifier)'s answer; no
    /// `Authorization` header at all, the [anonymous](Principals::anonymous) principal. Without a
    /// verifier, a refusal is `401` with `WWW-Authenticate: Bearer`.
    pub fn authenticate(&self, headers: &HeaderMap) -> Verification {
        let mut values = headers.get_all(AUTHORIZATION).iter();
        let (value, more) = (values.next(), values.next());
        let refusal = match (value, more) {
            (None, _) => match &self.anonymous {
                Some(anonymous) => return Verification::Ready(Ok(anonymous.clone())),
                None => self.challenge(),
            },
            (Some(_), Some(_)) => Refusal::bad_request(HeaderValue::from_static(
                "Bearer error=\"invalid_request\", \
                 error_description=\"more than one Authorization header\"",
            )),
            (Some(value), None) => match bearer_token(value) {
                Some(token) => {
                    if let Some(principal) = self.by_token.get(&token_digest(token)) {
                        return Verification::Ready(Ok(principal.clone()));
                    }
                    match &self.verifier {
                        Some(verifier) => return verifier.verify(token),
                        None => self.challenge(),
                    }
                }
                // Another scheme, or no token: as if there were no credentials (RFC 6750 §3.1).
                None => self.challenge(),
            },
        };
        Verification::Ready(Err(refusal))
    }

    /// The verifier's document at `path`, if it has one there.
    pub fn metadata(&self, path: &str) -> Option<Bytes> {
        self.verifier.as_ref()?.metadata(path)
    }

    /// The paths the verifier's documents are served at.
    pub fn metadata_paths(&self) -> Vec<String> {
        self.verifier
            .as_ref()
            .map(|v| v.metadata_paths())
            .unwrap_or_default()
    }

    fn challenge(&self) -> Refusal {
        match &self.verifier {
            Some(verifier) => verifier.challenge(),
            None => Refusal::unauthorized(HeaderValue::from_static("Bearer")),
        }
    }
}

/// What a token is kept and looked up as: its SHA-256.
fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The token of an `Authorization: Bearer <token>` header: visible ASCII, the scheme in any case.
fn bearer_token(value: &HeaderValue) -> Option<&str> {
    let value = value.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    (!token.is_empty()).then_some(token)
}

/// rmcp's streamable HTTP service of a [`ToolgateServer`], each connection its own
/// [`ToolgateServer::connection`], behind [`Principals`]: a request that is no principal's is answered
/// with its [`Refusal`] (`401 Unauthorized` for one without a known bearer token) and reaches no
/// handler. A tower `Service`: serve it with hyper (its
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
    /// Shared by the clones that hyper makes per request, and called through `handle`: a request
    /// does not copy rmcp's configuration.
    inner: Arc<StreamableHttpService<ToolgateServer, LocalSessionManager>>,
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
            // A factory's handler whose router serves a declared name with another route is not
            // served: the session is refused, as `handler` would have refused it.
            move || server.try_connection().map_err(std::io::Error::other),
            Arc::clone(&sessions),
            config,
        );
        HttpService {
            inner: Arc::new(inner),
            sessions,
            principals: Arc::new(principals),
            owners: Arc::new(Owners::default()),
        }
    }
}

#[cfg(feature = "mcp-axum")]
impl HttpService {
    /// An axum router that serves this service at `path` (`/mcp`) and, where its verifier publishes
    /// RFC 9728 metadata, each document at its well-known path: the whole endpoint in one call, to
    /// [`merge`](axum::Router::merge) into the application's router or serve as it is.
    ///
    /// # Panics
    ///
    /// As axum's `route_service` does: where `path` does not begin with `/`, or is one of the
    /// well-known paths.
    pub fn router<S>(self, path: &str) -> axum::Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        let documents = self.principals.metadata_paths();
        let mut router = axum::Router::new().route_service(path, self.clone());
        for document in documents {
            router = router.route_service(&document, self.clone());
        }
        router
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

    fn call(&mut self, request: Request<B>) -> HttpFuture {
        if request.method() == Method::GET
            && let Some(document) = self.principals.metadata(request.uri().path())
        {
            return Box::pin(async move { Ok(metadata(document)) });
        }
        match self.principals.authenticate(request.headers()) {
            Verification::Ready(Ok(principal)) => self.serve(principal, request),
            Verification::Ready(Err(refusal)) => Box::pin(async move { Ok(refused(&refusal)) }),
            Verification::Pending(verifying) => {
                let mut service = self.clone();
                Box::pin(async move {
                    match verifying.await {
                        Ok(principal) => service.serve(principal, request).await,
                        Err(refusal) => Ok(refused(&refusal)),
                    }
                })
            }
        }
    }
}

impl HttpService {
    /// Serves `request` as `principal`'s.
    fn serve<B>(&mut self, principal: Principal, mut request: Request<B>) -> HttpFuture
    where
        B: http_body::Body + Send + 'static,
        B::Error: fmt::Display,
        B::Data: Send + 'static,
    {
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
        let (inner, owners, sessions) = (
            Arc::clone(&self.inner),
            Arc::clone(&self.owners),
            Arc::clone(&self.sessions),
        );
        Box::pin(async move {
            let response = inner.handle(request).await;
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

/// The answer to a request refused before it reaches the server. The body never echoes the token.
fn refused(refusal: &Refusal) -> Response<BoxBody<Bytes, Infallible>> {
    let text: &'static [u8] = match refusal.status() {
        StatusCode::FORBIDDEN => b"the token grants no access to this server\n",
        StatusCode::BAD_REQUEST => b"the request's credentials cannot be read\n",
        _ => b"a bearer token this server knows is required\n",
    };
    let mut response = Response::new(Full::new(Bytes::from_static(text)).boxed());
    *response.status_mut() = refusal.status();
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, refusal.challenge().clone());
    response
}

/// A verifier's public JSON document (RFC 9728's metadata), readable from any origin.
fn metadata(document: Bytes) -> Response<BoxBody<Bytes, Infallible>> {
    let mut response = Response::new(Full::new(document).boxed());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    response
}
