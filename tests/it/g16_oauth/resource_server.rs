//! `HttpService` as an OAuth 2.1 resource server (feature `mcp-oauth`), over real HTTP on loopback:
//! JWT access tokens signed by keys made here, verified against a JWKS that a small hyper server of the
//! test serves (and counts the fetches of), mapped to principals whose gates list different tools.

#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolgate::mcp::ToolgateServer;
use toolgate::mcp::http::{HttpService, Principal, Principals};
use toolgate::mcp::oauth::{Algorithm, Jwks, OAuth, OAuthBuilder};
use toolgate::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use toolgate::{Denied, Gate, Mode};

use crate::common::http::Answer;
use crate::fixtures::handlers::raw_request;
use crate::fixtures::support::{assert_text, runtime, serve_connections};

/// Read a ticket.
#[toolgate::tool(risk = "READ_ONLY", domain = "oauthdesk", callable)]
fn read_ticket(id: u64) -> Result<String, Denied> {
    Ok(format!("ticket {id}"))
}

/// Close a ticket.
#[toolgate::tool(risk = "LOW_WRITE", domain = "oauthdesk", callable)]
fn close_ticket(id: u64) -> Result<String, Denied> {
    Ok(format!("closed {id}"))
}

const ISSUER: &str = "https://auth.example.test";
const LIMIT: Duration = Duration::from_secs(30);

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs()
}

/// A signing key made here, and its public JWK.
struct TestKey {
    kid: String,
    alg: jsonwebtoken::Algorithm,
    encoding: jsonwebtoken::EncodingKey,
    jwk: Value,
    /// The public key's raw bytes, for the HMAC confusion.
    public: Vec<u8>,
}

/// 32 bytes derived from `label`: test keys made deterministically, never key material of anyone's.
fn seed(label: &str) -> [u8; 32] {
    Sha256::digest(format!("toolgate mcp_oauth test key: {label}").as_bytes()).into()
}

impl TestKey {
    /// An Ed25519 test key.
    fn ed25519(kid: &str) -> TestKey {
        use ed25519_dalek::pkcs8::EncodePrivateKey;
        let key = ed25519_dalek::SigningKey::from_bytes(&seed(kid));
        let der = key.to_pkcs8_der().expect("a PKCS#8 document");
        let public = key.verifying_key().to_bytes().to_vec();
        TestKey {
            kid: kid.to_owned(),
            alg: jsonwebtoken::Algorithm::EdDSA,
            encoding: jsonwebtoken::EncodingKey::from_ed_der(der.as_bytes()),
            jwk: json!({"kty": "OKP", "crv": "Ed25519", "use": "sig", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(&public)}),
            public,
        }
    }

    /// A P-256 test key.
    fn p256(kid: &str) -> TestKey {
        use p256::pkcs8::EncodePrivateKey;
        let key = p256::ecdsa::SigningKey::from_bytes(&seed(kid).into()).expect("a P-256 scalar");
        let der = key.to_pkcs8_der().expect("a PKCS#8 document");
        let point = key.verifying_key().to_encoded_point(false);
        let (x, y) = (point.x().expect("x"), point.y().expect("y"));
        TestKey {
            kid: kid.to_owned(),
            alg: jsonwebtoken::Algorithm::ES256,
            encoding: jsonwebtoken::EncodingKey::from_ec_der(der.as_bytes()),
            jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256",
                "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y)}),
            public: point.as_bytes().to_vec(),
        }
    }

    /// A token of `claims`, signed by this key and naming it.
    fn sign(&self, claims: &Value) -> String {
        self.sign_as(self.alg, Some(&self.kid), claims)
    }

    /// A token of `claims` signed by this key, its header saying `alg` and `kid`.
    fn sign_as(&self, alg: jsonwebtoken::Algorithm, kid: Option<&str>, claims: &Value) -> String {
        let mut header = jsonwebtoken::Header::new(alg);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("a signed token")
    }
}

/// A JWK set of these keys.
fn jwks(keys: &[&TestKey]) -> String {
    json!({"keys": keys.iter().map(|key| key.jwk.clone()).collect::<Vec<_>>()}).to_string()
}

/// The JWKS server: serves whatever document it holds at any path, and counts the requests.
#[derive(Clone)]
struct JwksServer {
    addr: SocketAddr,
    document: Arc<Mutex<String>>,
    fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    async fn start(document: String) -> JwksServer {
        use hyper::service::service_fn;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let server = JwksServer {
            addr: listener.local_addr().expect("its address"),
            document: Arc::new(Mutex::new(document)),
            fetches: Arc::new(AtomicUsize::new(0)),
        };
        let serving = server.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let serving = serving.clone();
                let service = service_fn(move |_request| {
                    serving.fetches.fetch_add(1, Ordering::SeqCst);
                    let body = serving.document.lock().expect("the document").clone();
                    async move {
                        let mut response = hyper::Response::new(body);
                        response.headers_mut().insert(
                            "content-type",
                            hyper::header::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, std::convert::Infallible>(response)
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        server
    }

    fn url(&self) -> String {
        format!("http://{}/jwks.json", self.addr)
    }

    fn serve(&self, document: String) {
        *self.document.lock().expect("the document") = document;
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

/// The MCP server's listener, bound before the verifier is built: the resource names its address.
struct Mcp {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
}

impl Mcp {
    async fn bind() -> Mcp {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("its address");
        Mcp { listener, addr }
    }

    fn resource(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Serves the desk's tools to `principals`, until the runtime ends.
    fn serve(self, principals: Principals) -> SocketAddr {
        let server = ToolgateServer::new(Gate::new(Mode::Shadow).expect("a gate"))
            .only(|m| m.domain == Some("oauthdesk"));
        let service = HttpService::new(server, principals, StreamableHttpServerConfig::default());
        let listener = self.listener;
        serve_connections(listener, service);
        self.addr
    }
}

fn gate(mode: Mode, name: &str) -> Gate {
    Gate::builder()
        .mode(mode)
        .principal(name)
        .build()
        .expect("a gate")
}

/// The desk's verifier: `tickets:write` is a writer (PARTIAL_AUTO: both tools), `tickets:read` a
/// reader (SHADOW: the read alone).
fn desk(resource: String, jwks: Jwks) -> OAuthBuilder {
    OAuth::builder(resource)
        .authorization_server(ISSUER)
        .jwks(jwks)
        .algorithms([Algorithm::EdDSA, Algorithm::ES256])
        .scope("tickets:write", "writer", gate(Mode::PartialAuto, "writer"))
        .scope("tickets:read", "reader", gate(Mode::Shadow, "reader"))
        .challenge_scope(["tickets:read"])
}

/// Claims valid for `resource` for five minutes.
fn claims(resource: &str, sub: &str, scope: &str) -> Value {
    let now = now();
    json!({"iss": ISSUER, "aud": resource, "sub": sub, "scope": scope,
        "iat": now, "exp": now + 300})
}

impl Answer {
    fn challenge(&self) -> &str {
        self.header("www-authenticate").unwrap_or("")
    }

    /// The names of the tools a `tools/list` answer lists, sorted.
    fn tools(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .messages()
            .iter()
            .filter_map(|m| m["result"]["tools"].as_array().cloned())
            .flatten()
            .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    }
}

/// The desk on loopback, its one verifier trusting `key` alone: its resource URL and its address.
async fn desk_trusting(key: &TestKey) -> (String, SocketAddr) {
    let mcp = Mcp::bind().await;
    let resource = mcp.resource();
    let oauth = desk(resource.clone(), Jwks::json(jwks(&[key])))
        .build()
        .await
        .expect("a verifier");
    let addr = mcp.serve(Principals::new().verifier(oauth));
    (resource, addr)
}

/// One HTTP/1.1 request on a connection of its own, with `headers`.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Answer {
    let head: Vec<String> = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}"))
        .collect();
    raw_request(addr, (method, path), &head, body, LIMIT).await
}

/// A `POST /mcp` with `token` (if any), on `session` (if any).
async fn post(addr: SocketAddr, token: Option<&str>, session: Option<&str>, body: Value) -> Answer {
    let bearer = token.map(|token| format!("Bearer {token}"));
    let mut headers: Vec<(&str, &str)> = Vec::new();
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer));
    }
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session));
        headers.push(("Mcp-Protocol-Version", "2025-06-18"));
    }
    request(addr, "POST", "/mcp", &headers, Some(&body)).await
}

/// Opens a session with `token`: its id, or the refusal.
async fn open(addr: SocketAddr, token: Option<&str>) -> Result<String, Answer> {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "oauth-test", "version": "1"}}});
    let opened = post(addr, token, None, initialize).await;
    let Some(session) = opened.header("mcp-session-id").map(str::to_owned) else {
        return Err(opened);
    };
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answer = post(addr, token, Some(&session), initialized).await;
    assert_eq!(answer.status, 202, "{answer:?}");
    Ok(session)
}

/// `tools/list` on `session` with `token`.
async fn list(addr: SocketAddr, token: Option<&str>, session: &str) -> Answer {
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    post(addr, token, Some(session), list).await
}

/// What `token` is shown: the tools listed on a session of its own, or the refusal.
async fn tools_of(addr: SocketAddr, token: Option<&str>) -> Result<Vec<String>, Answer> {
    let session = open(addr, token).await?;
    let listed = list(addr, token, &session).await;
    assert_eq!(listed.status, 200, "{listed:?}");
    Ok(listed.tools())
}

const READ: &str = "oauthdesk.read_ticket";
const CLOSE: &str = "oauthdesk.close_ticket";

/// The refusal of `token`: `401`, `error="invalid_token"` and `description`, never the token.
async fn assert_invalid(addr: SocketAddr, token: &str, description: &str) {
    let refused = tools_of(addr, Some(token))
        .await
        .expect_err("the token is refused");
    assert_eq!(refused.status, 401, "{refused:?}");
    let challenge = refused.challenge();
    assert_text(
        challenge,
        Some("Bearer error=\"invalid_token\""),
        &[
            &format!("error_description=\"{description}\""),
            "resource_metadata=\"",
        ],
    );
    assert!(
        !refused.head.contains(token) && !refused.body.contains(token),
        "the token is echoed: {refused:?}"
    );
}

#[test]
fn a_valid_token_lists_the_tools_of_its_principals_gate() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-1");
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let oauth = desk(resource.clone(), Jwks::json(jwks(&[&key])))
            .build()
            .await
            .expect("a verifier");
        let addr = mcp.serve(Principals::new().verifier(oauth));

        let reader = key.sign(&claims(&resource, "alice", "profile tickets:read"));
        let writer = key.sign(&claims(&resource, "bob", "tickets:read tickets:write"));
        // Twice each, alternately: the second of each is answered from the cache, with its own
        // principal's tools.
        for _ in 0..2 {
            assert_eq!(tools_of(addr, Some(&reader)).await.expect("listed"), [READ]);
            assert_eq!(
                tools_of(addr, Some(&writer)).await.expect("listed"),
                [CLOSE, READ]
            );
        }
        // `scp` as a list, as some servers write it.
        let mut listed = claims(&resource, "carol", "");
        listed["scp"] = json!(["tickets:write"]);
        assert_eq!(
            tools_of(addr, Some(&key.sign(&listed)))
                .await
                .expect("listed"),
            [CLOSE, READ]
        );
        // A P-256 key beside it, its algorithm pinned too.
        let es = TestKey::p256("desk-es");
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let oauth = desk(resource.clone(), Jwks::json(jwks(&[&key, &es])))
            .build()
            .await
            .expect("a verifier");
        let addr = mcp.serve(Principals::new().verifier(oauth));
        let token = es.sign(&claims(&resource, "dan", "tickets:read"));
        assert_eq!(tools_of(addr, Some(&token)).await.expect("listed"), [READ]);
    });
}

#[test]
fn expired_and_not_yet_valid_tokens_are_refused() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-time");
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let oauth = desk(resource.clone(), Jwks::json(jwks(&[&key])))
            .leeway(Duration::from_secs(30))
            .build()
            .await
            .expect("a verifier");
        let addr = mcp.serve(Principals::new().verifier(oauth));
        let at = |exp: u64, nbf: Option<u64>| {
            let mut claims = claims(&resource, "alice", "tickets:read");
            claims["exp"] = json!(exp);
            if let Some(nbf) = nbf {
                claims["nbf"] = json!(nbf);
            }
            key.sign(&claims)
        };
        let now = now();
        assert_invalid(addr, &at(now - 120, None), "the token has expired").await;
        assert_invalid(
            addr,
            &at(now + 600, Some(now + 120)),
            "the token is not valid yet",
        )
        .await;
        // Within the leeway, both ways.
        assert_eq!(
            tools_of(addr, Some(&at(now - 5, None)))
                .await
                .expect("listed"),
            [READ]
        );
        assert_eq!(
            tools_of(addr, Some(&at(now + 600, Some(now + 5))))
                .await
                .expect("listed"),
            [READ]
        );
        // A token with no `exp` at all.
        let mut endless = claims(&resource, "alice", "tickets:read");
        endless.as_object_mut().expect("an object").remove("exp");
        assert_invalid(addr, &key.sign(&endless), "the token has no exp").await;
    });
}

#[test]
fn a_token_for_another_audience_or_issuer_is_refused() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-aud");
        let (resource, addr) = desk_trusting(&key).await;
        let with = |name: &str, value: Value| {
            let mut claims = claims(&resource, "alice", "tickets:read");
            claims[name] = value;
            key.sign(&claims)
        };
        let other = "the token was issued for another audience";
        assert_invalid(
            addr,
            &with("aud", json!("https://other.example/mcp")),
            other,
        )
        .await;
        assert_invalid(
            addr,
            &with("aud", json!(["https://other.example/mcp"])),
            other,
        )
        .await;
        // The resource's own URL with a trailing slash is another resource.
        assert_invalid(addr, &with("aud", json!(format!("{resource}/"))), other).await;
        let issuer = "the token's issuer is not accepted";
        assert_invalid(addr, &with("iss", json!("https://evil.example")), issuer).await;
        // A list naming the issuer among others: one issuer is a string.
        assert_invalid(
            addr,
            &with("iss", json!([ISSUER, "https://evil.example"])),
            issuer,
        )
        .await;
        let mut anonymous = claims(&resource, "alice", "tickets:read");
        anonymous.as_object_mut().expect("an object").remove("sub");
        assert_invalid(addr, &key.sign(&anonymous), "the token has no sub").await;
        // A list of audiences that names this resource is accepted.
        assert_eq!(
            tools_of(
                addr,
                Some(&with("aud", json!(["https://other.example", resource])))
            )
            .await
            .expect("listed"),
            [READ]
        );
    });
}

#[test]
fn alg_none_hmac_with_the_public_key_and_a_key_of_another_algorithm_are_refused() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-alg");
        let es = TestKey::p256("desk-alg-es");
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let document = jwks(&[&key, &es]);
        let oauth = desk(resource.clone(), Jwks::json(document.clone()))
            .build()
            .await
            .expect("a verifier");
        let addr = mcp.serve(Principals::new().verifier(oauth));
        let claims = claims(&resource, "alice", "tickets:write");
        let part = |value: &Value| URL_SAFE_NO_PAD.encode(value.to_string());

        // `alg: none`, no signature, with and without the kid.
        for header in [
            json!({"alg": "none", "typ": "JWT"}),
            json!({"alg": "none", "kid": key.kid}),
            json!({"alg": "None", "kid": key.kid}),
        ] {
            let token = format!("{}.{}.", part(&header), part(&claims));
            assert_invalid(
                addr,
                &token,
                "the token is not a signed JWT of an accepted algorithm",
            )
            .await;
        }
        // HS256, keyed with the public key's bytes, its JWK and the JWKS, naming each key.
        let secrets: [(&str, Vec<u8>); 4] = [
            (&key.kid, key.public.clone()),
            (&key.kid, key.jwk.to_string().into_bytes()),
            (&es.kid, es.public.clone()),
            (&key.kid, document.clone().into_bytes()),
        ];
        for (kid, secret) in secrets {
            let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
            header.kid = Some(kid.to_owned());
            let token = jsonwebtoken::encode(
                &header,
                &claims,
                &jsonwebtoken::EncodingKey::from_secret(&secret),
            )
            .expect("an HS256 token");
            assert_invalid(addr, &token, "the token's algorithm is not accepted").await;
        }
        // ES256 in the header, naming the Ed25519 key: refused before any signature is checked.
        let token = es.sign_as(jsonwebtoken::Algorithm::ES256, Some(&key.kid), &claims);
        assert_invalid(addr, &token, "the token's algorithm is not its key's").await;
        // A key whose algorithm is not pinned: its tokens are refused, however well signed.
        let mcp = Mcp::bind().await;
        let resource_es = mcp.resource();
        let only_ed = desk(resource_es.clone(), Jwks::json(document))
            .algorithms([Algorithm::EdDSA])
            .build()
            .await
            .expect("a verifier");
        let addr = mcp.serve(Principals::new().verifier(only_ed));
        let token = es.sign(&self::claims(&resource_es, "alice", "tickets:read"));
        assert_invalid(addr, &token, "the token's algorithm is not accepted").await;
        // A signature of another key under the right kid.
        let other = TestKey::ed25519("desk-alg-forged");
        let token = other.sign_as(
            jsonwebtoken::Algorithm::EdDSA,
            Some(&key.kid),
            &self::claims(&resource_es, "alice", "tickets:read"),
        );
        assert_invalid(addr, &token, "the token's signature does not verify").await;
        // The well-signed token passes, so the refusals above are the algorithm's, not the setup's.
        let token = key.sign(&self::claims(&resource_es, "alice", "tickets:read"));
        assert_eq!(tools_of(addr, Some(&token)).await.expect("listed"), [READ]);
    });
}

#[test]
fn an_unknown_kid_loads_the_jwks_again_and_a_key_rotated_out_is_refused() {
    runtime().block_on(async {
        let old = TestKey::ed25519("desk-rotate-old");
        let new = TestKey::ed25519("desk-rotate-new");
        let jwks_server = JwksServer::start(jwks(&[&old])).await;
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let oauth = desk(resource.clone(), Jwks::url(jwks_server.url()))
            .refresh_interval(Duration::ZERO)
            .build()
            .await
            .expect("a verifier");
        assert_eq!(jwks_server.fetches(), 1);
        let addr = mcp.serve(Principals::new().verifier(oauth));

        let by_old = old.sign(&claims(&resource, "alice", "tickets:read"));
        assert_eq!(tools_of(addr, Some(&by_old)).await.expect("listed"), [READ]);
        assert_eq!(jwks_server.fetches(), 1, "a known key needs no fetch");

        // The authorization server rotates: the new key in, the old one out.
        jwks_server.serve(jwks(&[&new]));
        let by_new = new.sign(&claims(&resource, "bob", "tickets:write"));
        assert_eq!(
            tools_of(addr, Some(&by_new)).await.expect("listed"),
            [CLOSE, READ]
        );
        let fetched = jwks_server.fetches();
        assert!(fetched >= 2, "the unknown kid loaded the JWKS again");
        // The old key's token, verified and cached before, is refused now.
        assert_invalid(
            addr,
            &by_old,
            "the token names a key this server does not know",
        )
        .await;
        // The new one is still served.
        assert_eq!(
            tools_of(addr, Some(&by_new)).await.expect("listed"),
            [CLOSE, READ]
        );
    });
}

#[test]
fn a_jwks_older_than_its_max_age_is_loaded_again_and_a_key_it_lost_is_refused() {
    runtime().block_on(async {
        let old = TestKey::ed25519("desk-age-old");
        let new = TestKey::ed25519("desk-age-new");
        let jwks_server = JwksServer::start(jwks(&[&old, &new])).await;
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let oauth = desk(resource.clone(), Jwks::url(jwks_server.url()))
            .refresh_interval(Duration::from_millis(300))
            .keys_max_age(Duration::from_millis(300))
            .build()
            .await
            .expect("a verifier");
        let addr = mcp.serve(Principals::new().verifier(oauth));
        let by_old = old.sign(&claims(&resource, "alice", "tickets:read"));
        assert_eq!(tools_of(addr, Some(&by_old)).await.expect("listed"), [READ]);
        assert_eq!(jwks_server.fetches(), 1);

        // The old key is revoked; no token names an unknown key, but the set grows old.
        jwks_server.serve(jwks(&[&new]));
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_invalid(
            addr,
            &by_old,
            "the token names a key this server does not know",
        )
        .await;
        assert_eq!(jwks_server.fetches(), 2);
        let by_new = new.sign(&claims(&resource, "bob", "tickets:read"));
        assert_eq!(tools_of(addr, Some(&by_new)).await.expect("listed"), [READ]);
    });
}

#[test]
fn made_up_kids_make_at_most_one_fetch_per_interval() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-spray");
        let jwks_server = JwksServer::start(jwks(&[&key])).await;
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let oauth = desk(resource.clone(), Jwks::url(jwks_server.url()))
            .refresh_interval(Duration::from_secs(600))
            .build()
            .await
            .expect("a verifier");
        let addr = mcp.serve(Principals::new().verifier(oauth));
        assert_eq!(jwks_server.fetches(), 1);

        let claims = claims(&resource, "mallory", "tickets:write");
        for round in 0..2 {
            let sprayed: Vec<_> = (0..24)
                .map(|i| {
                    let token = key.sign_as(
                        jsonwebtoken::Algorithm::EdDSA,
                        Some(&format!("made-up-{round}-{i}")),
                        &claims,
                    );
                    tokio::spawn(async move { tools_of(addr, Some(&token)).await })
                })
                .collect();
            for sprayed in sprayed {
                let refused = sprayed
                    .await
                    .expect("a request")
                    .expect_err("a made-up kid is refused");
                assert_eq!(refused.status, 401, "{refused:?}");
                assert!(
                    refused
                        .challenge()
                        .contains("the token names a key this server does not know"),
                    "{refused:?}"
                );
            }
            // 48 made-up kids, one load after the first.
            assert_eq!(jwks_server.fetches(), 2, "round {round}");
        }
        // The real key still works meanwhile.
        let token = key.sign(&claims);
        assert_eq!(
            tools_of(addr, Some(&token)).await.expect("listed"),
            [CLOSE, READ]
        );
    });
}

#[test]
fn a_token_mapping_to_no_principal_is_forbidden_with_insufficient_scope() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-scope");
        let (resource, addr) = desk_trusting(&key).await;
        let metadata = format!("http://{addr}/.well-known/oauth-protected-resource/mcp");
        // A scope that merely starts like one that maps, and none at all.
        for scope in ["tickets:reader", "profile", ""] {
            let token = key.sign(&claims(&resource, "eve", scope));
            let refused = tools_of(addr, Some(&token))
                .await
                .expect_err("no principal");
            assert_eq!(refused.status, 403, "{refused:?}");
            assert_eq!(
                refused.challenge(),
                format!(
                    "Bearer error=\"insufficient_scope\", \
                     error_description=\"the token grants no access to this server\", \
                     resource_metadata=\"{metadata}\", scope=\"tickets:read\""
                )
            );
            assert!(!refused.body.contains(&token), "{refused:?}");
        }
    });
}

#[test]
fn the_metadata_is_served_to_anyone_and_challenges_point_at_it() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-meta");
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let oauth = desk(resource.clone(), Jwks::json(jwks(&[&key])))
            .resource_name("Ticket desk")
            .build()
            .await
            .expect("a verifier");
        let addr = mcp.serve(Principals::new().verifier(oauth));
        let url = format!("http://{addr}/.well-known/oauth-protected-resource/mcp");

        // The path-suffixed form (RFC 9728 §3.1) and the root form, with no token.
        for path in [
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource",
        ] {
            let answer = request(addr, "GET", path, &[], None).await;
            assert_eq!(answer.status, 200, "{answer:?}");
            assert_eq!(answer.header("content-type"), Some("application/json"));
            let document: Value = serde_json::from_str(&answer.body).expect("JSON");
            assert_eq!(
                document,
                json!({
                    "resource": resource,
                    "authorization_servers": [ISSUER],
                    "scopes_supported": ["tickets:write", "tickets:read"],
                    "bearer_methods_supported": ["header"],
                    "resource_name": "Ticket desk",
                }),
                "{path}"
            );
        }
        // Another well-known path, or the metadata by POST, is no document: it needs a token.
        let elsewhere = request(
            addr,
            "GET",
            "/.well-known/oauth-protected-resource/other",
            &[],
            None,
        )
        .await;
        assert_eq!(elsewhere.status, 401, "{elsewhere:?}");
        let posted = request(
            addr,
            "POST",
            "/.well-known/oauth-protected-resource",
            &[],
            None,
        )
        .await;
        assert_eq!(posted.status, 401, "{posted:?}");

        // No token: where the metadata is, and the scope to ask for; no error.
        let missing = post(
            addr,
            None,
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        )
        .await;
        assert_eq!(missing.status, 401, "{missing:?}");
        assert_eq!(
            missing.challenge(),
            format!("Bearer resource_metadata=\"{url}\", scope=\"tickets:read\"")
        );
        // Another scheme is no token either.
        let basic = request(
            addr,
            "POST",
            "/mcp",
            &[("Authorization", "Basic YWxpY2U6cHc=")],
            None,
        )
        .await;
        assert_eq!(basic.status, 401, "{basic:?}");
        assert_eq!(basic.challenge(), missing.challenge());
        // A token that is no JWT: the error, its description, the same pointers.
        let garbage = "not-a-jwt-3f9c2a7e";
        let refused = tools_of(addr, Some(garbage)).await.expect_err("refused");
        assert_eq!(refused.status, 401);
        assert_eq!(
            refused.challenge(),
            format!(
                "Bearer error=\"invalid_token\", error_description=\"the token is not a signed JWT \
                 of an accepted algorithm\", resource_metadata=\"{url}\", scope=\"tickets:read\""
            )
        );
        assert!(!refused.head.contains(garbage) && !refused.body.contains(garbage));
        // Two Authorization headers: which one counts is not guessed.
        let token = key.sign(&claims(&resource, "alice", "tickets:read"));
        let bearer = format!("Bearer {token}");
        let twice = request(
            addr,
            "POST",
            "/mcp",
            &[("Authorization", &bearer), ("Authorization", &bearer)],
            Some(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
        )
        .await;
        assert_eq!(twice.status, 400, "{twice:?}");
        assert!(
            twice.challenge().contains("error=\"invalid_request\""),
            "{twice:?}"
        );
    });
}

#[test]
fn an_anonymous_principal_serves_requests_without_a_token_and_never_a_bad_one() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-anon");
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let oauth = desk(resource.clone(), Jwks::json(jwks(&[&key])))
            .build()
            .await
            .expect("a verifier");
        const STATIC: &str = "ops-static-token-5d1e7c";
        let principals = Principals::new()
            .bearer(STATIC, "ops", gate(Mode::PartialAuto, "ops"))
            .anonymous("anonymous", gate(Mode::Shadow, "anonymous"))
            .verifier(oauth);
        let addr = mcp.serve(principals);

        // No Authorization header: the anonymous principal's gate.
        assert_eq!(tools_of(addr, None).await.expect("listed"), [READ]);
        // A static token still names its principal beside the verifier.
        assert_eq!(
            tools_of(addr, Some(STATIC)).await.expect("listed"),
            [CLOSE, READ]
        );
        // Bad tokens are refused, never served as anonymous.
        let mut expired = claims(&resource, "alice", "tickets:read");
        expired["exp"] = json!(now() - 3600);
        for (token, description) in [
            (
                "garbage",
                "the token is not a signed JWT of an accepted algorithm",
            ),
            (&*key.sign(&expired), "the token has expired"),
        ] {
            assert_invalid(addr, token, description).await;
        }
        // A token that verifies but maps to nothing is forbidden, not anonymous.
        let token = key.sign(&claims(&resource, "eve", "profile"));
        let refused = tools_of(addr, Some(&token)).await.expect_err("forbidden");
        assert_eq!(refused.status, 403, "{refused:?}");
        // An anonymous session is not open to a token, nor a token's session to no token.
        let anonymous = open(addr, None).await.expect("a session");
        let alice = key.sign(&claims(&resource, "alice", "tickets:read"));
        assert_eq!(list(addr, Some(&alice), &anonymous).await.status, 404);
        let hers = open(addr, Some(&alice)).await.expect("a session");
        assert_eq!(list(addr, None, &hers).await.status, 404);
    });
}

#[test]
fn a_jwt_principal_cannot_use_another_principals_session() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-session");
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        // A rule of the application's beside the scopes: a claim of its own names the principal.
        let oauth = desk(resource.clone(), Jwks::json(jwks(&[&key])))
            .map(|claims| {
                let team = claims.get("team")?.as_str()?;
                Some(Principal::new(
                    format!("team:{team}"),
                    gate(Mode::Shadow, "team"),
                ))
            })
            .build()
            .await
            .expect("a verifier");
        let addr = mcp.serve(Principals::new().verifier(oauth));

        let alice = key.sign(&claims(&resource, "alice", "tickets:read"));
        let session = open(addr, Some(&alice)).await.expect("a session");
        let listed = list(addr, Some(&alice), &session).await;
        assert_eq!(listed.tools(), [READ], "{listed:?}");

        // Another principal's valid token, another subject with the same scope, another token of
        // alice's with other scopes (another principal): each is told the session does not exist.
        let mut team = claims(&resource, "mallory", "");
        team["team"] = json!("red");
        for (who, token) in [
            (
                "a writer",
                key.sign(&claims(&resource, "bob", "tickets:write")),
            ),
            (
                "another reader",
                key.sign(&claims(&resource, "carol", "tickets:read")),
            ),
            (
                "alice as writer",
                key.sign(&claims(&resource, "alice", "tickets:write")),
            ),
            ("a team", key.sign(&team)),
        ] {
            let answer = list(addr, Some(&token), &session).await;
            assert_eq!(answer.status, 404, "{who}: {answer:?}");
            assert!(answer.messages().is_empty(), "{who}: {answer:?}");
        }
        // A second token of alice's, the same principal: her session.
        let mut again = claims(&resource, "alice", "tickets:read");
        again["jti"] = json!("second");
        let listed = list(addr, Some(&key.sign(&again)), &session).await;
        assert_eq!(listed.status, 200, "{listed:?}");
        assert_eq!(listed.tools(), [READ]);
        // The team rule's principal lists its own gate's tools.
        assert_eq!(
            tools_of(addr, Some(&key.sign(&team)))
                .await
                .expect("listed"),
            [READ]
        );
    });
}

#[test]
fn the_jwks_is_read_from_a_file_and_bad_configurations_are_refused_at_build() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-file");
        let dir = std::env::temp_dir().join(format!("toolgate-oauth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        let file = dir.join("jwks.json");
        std::fs::write(&file, jwks(&[&key])).expect("write the JWKS");
        let resource = "https://mcp.example.test/mcp";
        let oauth = desk(resource.to_owned(), Jwks::file(&file))
            .build()
            .await
            .expect("a verifier");
        assert_eq!(
            oauth.metadata_url(),
            "https://mcp.example.test/.well-known/oauth-protected-resource/mcp"
        );

        let error = |builder: OAuthBuilder| async move {
            builder.build().await.expect_err("refused").to_string()
        };
        let message = error(desk(
            resource.to_owned(),
            Jwks::url("http://jwks.example.test/keys"),
        ))
        .await;
        assert!(message.contains("only https is accepted"), "{message}");
        let message = error(desk(
            "http://mcp.example.test/mcp".to_owned(),
            Jwks::file(&file),
        ))
        .await;
        assert_text(
            &message,
            Some("the resource `http://mcp.example.test/mcp`"),
            &[],
        );
        let message = error(desk(
            resource.to_owned(),
            Jwks::file(dir.join("missing.json")),
        ))
        .await;
        assert!(message.contains("cannot read"), "{message}");
        // Only symmetric keys: nothing to verify with.
        let symmetric = json!({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "hs"}]}).to_string();
        let message = error(desk(resource.to_owned(), Jwks::json(symmetric))).await;
        assert!(message.contains("no key is fit"), "{message}");
        let message = error(desk(resource.to_owned(), Jwks::file(&file)).algorithms([])).await;
        assert!(message.starts_with("no algorithm"), "{message}");
        let message = error(
            OAuth::builder(resource)
                .jwks(Jwks::file(&file))
                .algorithms([Algorithm::EdDSA])
                .scope("a", "b", gate(Mode::Shadow, "b")),
        )
        .await;
        assert!(message.starts_with("no authorization server"), "{message}");
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// A second authorization server, a partner's, whose subjects are its own.
const PARTNER: &str = "https://partner.example.test";

/// With two authorization servers, a partner's `sub: alice` is not the company's
/// alice. It is another principal (`writer:<iss>#<sub>`): it cannot call a tool in her session, read
/// her result, or end her session, and each issuer's alice is her own principal.
#[test]
fn a_partner_s_subject_is_not_the_company_s_subject_of_the_same_name() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-two-issuers");
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let oauth = desk(resource.clone(), Jwks::json(jwks(&[&key])))
            .authorization_server(PARTNER)
            .build()
            .await
            .expect("a verifier");
        let company = key.sign(&claims(&resource, "alice", "tickets:write"));
        let mut partner_claims = claims(&resource, "alice", "tickets:write");
        partner_claims["iss"] = json!(PARTNER);
        let partner = key.sign(&partner_claims);

        let identity = |token: String| {
            let oauth = oauth.clone();
            async move { oauth.claims(&token).await.and_then(|c| c.identity()) }
        };
        assert_eq!(
            identity(company.clone()).await.as_deref(),
            Some("https://auth.example.test#alice")
        );
        assert_eq!(
            identity(partner.clone()).await.as_deref(),
            Some("https://partner.example.test#alice")
        );

        let addr = mcp.serve(Principals::new().verifier(oauth));
        let session = open(addr, Some(&company)).await.expect("her session");
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": READ, "arguments": {"id": 7}}});
        let called = post(addr, Some(&partner), Some(&session), call.clone()).await;
        assert_eq!(
            called.status, 404,
            "the partner's alice called in her session: {called:?}"
        );
        assert!(called.messages().is_empty(), "{called:?}");
        let listed = list(addr, Some(&partner), &session).await;
        assert_eq!(listed.status, 404, "{listed:?}");
        let bearer = format!("Bearer {partner}");
        let ended = request(
            addr,
            "DELETE",
            "/mcp",
            &[
                ("Authorization", &bearer),
                ("Mcp-Session-Id", &session),
                ("Mcp-Protocol-Version", "2025-06-18"),
            ],
            None,
        )
        .await;
        assert_ne!(
            ended.status / 100,
            2,
            "the partner's alice ended her session: {ended:?}"
        );
        // Her session stands, and is hers.
        let hers = list(addr, Some(&company), &session).await;
        assert_eq!(hers.status, 200, "{hers:?}");
        assert_eq!(hers.tools(), [CLOSE, READ]);
        // The partner's alice has sessions of her own.
        assert_eq!(
            tools_of(addr, Some(&partner)).await.expect("listed"),
            [CLOSE, READ]
        );
    });
}

/// With one authorization server, the issuer is the only one a subject can come from: the principal
/// stays `<name>:<sub>`, as before. A subject that is no name a person can read as one (spaces around
/// it, a hidden character, compatibility forms, mixed scripts) maps to no principal.
#[test]
fn one_issuer_keeps_name_and_subject_and_a_look_alike_subject_maps_to_no_principal() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-one-issuer");
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let oauth = desk(resource.clone(), Jwks::json(jwks(&[&key])))
            .build()
            .await
            .expect("a verifier");
        let token = key.sign(&claims(&resource, "alice", "tickets:write"));
        let claimed = oauth.claims(&token).await.expect("it verifies");
        assert_eq!(claimed.identity().as_deref(), Some("alice"));
        let addr = mcp.serve(Principals::new().verifier(oauth.clone()));
        let people = crate::common::lookalikes::LOOK_ALIKES
            .iter()
            .filter(|(name, _)| !name.contains(['.', '~', '/']));
        for (name, alikes) in people {
            for alike in *alikes {
                let token = key.sign(&claims(&resource, alike, "tickets:write"));
                let claimed = oauth.claims(&token).await.expect("it verifies");
                assert_eq!(
                    claimed.identity(),
                    None,
                    "{alike:?}, a look-alike of {name:?}"
                );
            }
        }
        for alike in ["olga ", " olga", "\u{43e}lga", "ｏｌｇａ"] {
            let token = key.sign(&claims(&resource, alike, "tickets:write"));
            let refused = open(addr, Some(&token)).await.expect_err("no principal");
            assert_eq!(refused.status, 403, "{alike:?}: {refused:?}");
        }
    });
}

/// a4_16_n1. The attack: access tokens whose `sub` reads as `olga` (the rule's reading says so) but
/// mixes Latin with Armenian or Hebrew: `օlga` with an Armenian `օ`, `oוga` with a Hebrew `ו`. Asserted (SECURITY.md, guarantee 16: "a subject
/// refused by the rule of names is no principal"; the rule refuses a name "mixing scripts that a
/// reader takes for one another"): none maps to a principal, and none opens a session (403).
#[test]
fn a4_16_n1_a_subject_mixing_latin_with_armenian_or_hebrew_look_alikes_is_no_principal() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-a4-16-n1");
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let oauth = desk(resource.clone(), Jwks::json(jwks(&[&key])))
            .build()
            .await
            .expect("a verifier");
        let addr = mcp.serve(Principals::new().verifier(oauth.clone()));
        let mut failures = Vec::new();
        for (name, alike) in [("olga", "\u{585}lga"), ("olga", "o\u{5d5}ga")] {
            assert!(toolgate::names::same(name, alike), "{alike:?}");
            let token = key.sign(&claims(&resource, alike, "tickets:write"));
            let claimed = oauth.claims(&token).await.expect("it verifies");
            if let Some(identity) = claimed.identity() {
                failures.push(format!(
                    "{alike:?} (reads as {name:?}) is the principal {identity:?}"
                ));
            }
            match open(addr, Some(&token)).await {
                Err(refused) if refused.status == 403 => {}
                other => failures.push(format!("{alike:?}: {other:?}")),
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    });
}

/// `HttpService::router`: the endpoint and its RFC 9728 documents mounted in axum with one call, beside
/// the application's own routes. Broken: a well-known path is not routed (axum answers 404), the
/// endpoint is not at its path, or the router shadows the application's routes.
#[cfg(feature = "mcp-axum")]
#[test]
fn one_router_mounts_the_endpoint_and_its_metadata_in_axum() {
    runtime().block_on(async {
        let key = TestKey::ed25519("desk-axum");
        let mcp = Mcp::bind().await;
        let resource = mcp.resource();
        let oauth = desk(resource.clone(), Jwks::json(jwks(&[&key])))
            .build()
            .await
            .expect("a verifier");
        let server = ToolgateServer::new(Gate::new(Mode::Shadow).expect("a gate"))
            .only(|m| m.domain == Some("oauthdesk"));
        let service = HttpService::new(
            server,
            Principals::new().verifier(oauth),
            StreamableHttpServerConfig::default(),
        );
        let app = axum::Router::new()
            .route("/health", axum::routing::get(|| async { "fine" }))
            .merge(service.router("/mcp"));
        let Mcp { listener, addr } = mcp;
        tokio::spawn(async move { axum::serve(listener, app).await });

        for path in [
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource",
        ] {
            let answer = request(addr, "GET", path, &[], None).await;
            assert_eq!(answer.status, 200, "{path}: {answer:?}");
            let document: Value = serde_json::from_str(&answer.body).expect("JSON");
            assert_eq!(document["resource"], resource.as_str(), "{path}");
        }
        let health = request(addr, "GET", "/health", &[], None).await;
        assert_eq!((health.status, health.body.as_str()), (200, "fine"));
        let elsewhere = request(addr, "GET", "/elsewhere", &[], None).await;
        assert_eq!(elsewhere.status, 404, "{elsewhere:?}");
        // The endpoint: a request without a token is challenged, pointing at the metadata.
        let refused = tools_of(addr, None).await.expect_err("no token");
        assert_eq!(refused.status, 401, "{refused:?}");
        assert!(
            refused
                .challenge()
                .contains("/.well-known/oauth-protected-resource/mcp"),
            "{refused:?}"
        );
        let token = key.sign(&claims(&resource, "rita", "tickets:read"));
        assert_eq!(tools_of(addr, Some(&token)).await.expect("listed"), [READ]);
    });
}
