//! Serving over MCP's streamable HTTP transport (feature `mcp-http`): rmcp's server transport, behind a
//! bearer token that names the caller's principal, whose gate decides its calls and lists its tools.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderValue, Request, Response, StatusCode};
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
#[derive(Clone)]
pub struct HttpService {
    inner: StreamableHttpService<ToolgateServer, LocalSessionManager>,
    principals: Arc<Principals>,
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
        let inner = StreamableHttpService::new(
            move || Ok(server.connection()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        HttpService {
            inner,
            principals: Arc::new(principals),
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
        request.extensions_mut().insert(principal);
        let mut inner = self.inner.clone();
        Box::pin(async move { tower_service::Service::call(&mut inner, request).await })
    }
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
