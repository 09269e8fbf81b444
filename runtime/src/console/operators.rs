//! Who may use the console, and how a browser proves it: an operator's token (kept as its SHA-256) or
//! an access token of the authorization server, exchanged once for a session cookie; and the guard every
//! request passes: changes come from the console's own origin, and every page says what it may load.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::html::CONTENT_SECURITY_POLICY;
use crate::mcp::oauth::OAuth;

pub(super) const COOKIE: &str = "toolgate_console";

/// The most sessions the console keeps at once; past it, logging in ends the oldest.
const MAX_SESSIONS: usize = 10_000;

/// Failed log-ins the console answers at once in a minute; past it, wrong tokens are answered one at a
/// time, each after [`SLOW_FAILURE`], so that guessing goes no faster than ten a second, while a right
/// token is always answered at once: a flood of wrong ones locks no operator out.
const MAX_FAILURES_PER_MINUTE: usize = 60;

/// How long a wrong token waits for its answer once failures are past the minute's allowance.
const SLOW_FAILURE: Duration = Duration::from_millis(100);

/// The operators the console lets in: static tokens, each naming an operator, and optionally access
/// tokens of an authorization server ([`Operators::access_tokens`]). The name is what the store
/// records as who answered.
#[derive(Default, Clone)]
pub struct Operators {
    tokens: HashMap<[u8; 32], Arc<str>>,
    access: Option<Arc<(OAuth, String)>>,
}

/// A list of operators that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorsError(String);

impl fmt::Display for OperatorsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OperatorsError {}

impl Operators {
    /// No operator yet.
    pub fn new() -> Operators {
        Operators::default()
    }

    /// The operator `name` logs in with `token`.
    ///
    /// # Panics
    ///
    /// When `name` is not a [valid name](Operators::token_sha256).
    pub fn token(self, token: &str, name: &str) -> Operators {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.add(digest, name)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// The operator `name` logs in with the token whose SHA-256 is `sha256_hex` (64 hex digits), so
    /// that the console's configuration holds no token. A name is 1 to 64 characters, none of them
    /// a control, a space other than U+0020, or one that hides or reorders text, and one that
    /// [`names::refusal`](crate::names::refusal) does not refuse; no two operators' names read alike
    /// ([`names::same`](crate::names::same)).
    pub fn token_sha256(self, sha256_hex: &str, name: &str) -> Result<Operators, OperatorsError> {
        let hex = sha256_hex.trim();
        let bytes = hex.as_bytes();
        if bytes.len() != 64 || !bytes.iter().all(u8::is_ascii_hexdigit) {
            return Err(OperatorsError(format!(
                "the token of operator {name:?} is not a SHA-256 in hex (64 digits)"
            )));
        }
        let mut digest = [0u8; 32];
        for (i, pair) in bytes.chunks(2).enumerate() {
            let text = std::str::from_utf8(pair).unwrap_or("00");
            digest[i] = u8::from_str_radix(text, 16).unwrap_or(0);
        }
        self.add(digest, name)
    }

    fn add(mut self, digest: [u8; 32], name: &str) -> Result<Operators, OperatorsError> {
        valid_name(name)?;
        if let Some(other) = self
            .tokens
            .values()
            .find(|other| crate::names::same(other, name))
        {
            return Err(OperatorsError(format!(
                "operators {other:?} and {name:?} read as one name (SECURITY.md, names that read alike)"
            )));
        }
        if let Some(other) = self.tokens.get(&digest) {
            return Err(OperatorsError(format!(
                "operators {other:?} and {name:?} have the same token"
            )));
        }
        self.tokens.insert(digest, name.into());
        Ok(self)
    }

    /// Operators read from TOML: a table `[operators]` mapping each name to its token's SHA-256 in hex
    /// (`olga = "9f86d0…"`). `sha256sum` of a token, without its line break, gives it.
    pub fn from_toml(text: &str) -> Result<Operators, OperatorsError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            operators: std::collections::BTreeMap<String, String>,
        }
        let file: File = toml::from_str(text).map_err(|e| OperatorsError(e.to_string()))?;
        file.operators
            .iter()
            .try_fold(Operators::new(), |operators, (name, hash)| {
                operators.token_sha256(hash, name)
            })
    }

    /// Operators may also log in with an access token that `oauth` verifies (signature, algorithm,
    /// issuer, audience, time, as the MCP server checks one) and that grants `scope`: the operator is
    /// the token's subject (`sub`), and the session lasts no longer than the token (its `exp`, without
    /// the verifier's leeway). Rules given to `oauth` are not used.
    pub fn access_tokens(mut self, oauth: OAuth, scope: impl Into<String>) -> Operators {
        self.access = Some(Arc::new((oauth, scope.into())));
        self
    }

    /// Whether an access token's subject (with its issuer where several are accepted) may be an
    /// operator: a name the rule of names does not refuse, that reads as no operator of the file, who
    /// is named by the file alone (a token's `olga `, `оlga` or `ｏｌｇａ` would record its answers
    /// under a name that reads as `olga`).
    fn admits(&self, subject: &str) -> Result<(), OperatorsError> {
        if let Some(why) = crate::names::refusal(subject) {
            return Err(OperatorsError(format!(
                "an operator's name is refused: {why}"
            )));
        }
        match self
            .tokens
            .values()
            .find(|name| crate::names::same(name, subject))
        {
            Some(name) => Err(OperatorsError(format!(
                "the subject {:?} reads as the operator {name:?} of the operators file",
                crate::terminal::escaped(subject)
            ))),
            None => Ok(()),
        }
    }

    /// Whether no one could log in.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty() && self.access.is_none()
    }

    /// The operator `token` names, if any, and when the token stops naming them.
    pub(super) async fn who(&self, token: &str) -> Option<Login> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(name) = self.tokens.get(&digest) {
            return Some(Login {
                operator: name.clone(),
                expires: None,
            });
        }
        if let Some(access) = &self.access
            && let Some(claims) = access.0.claims(token).await
        {
            let subject = claims.subject().filter(|_| claims.has_scope(&access.1))?;
            valid_name(subject).ok()?;
            // With several issuers, the issuer is part of who the operator is: `<iss>#<sub>`.
            let subject = claims.identity()?;
            self.admits(&subject).ok()?;
            let expires = claims
                .expires()
                .map(|exp| SystemTime::UNIX_EPOCH + Duration::from_secs(exp));
            return Some(Login {
                operator: subject.into(),
                expires,
            });
        }
        None
    }
}

/// Who a token logs in, and until when.
pub(super) struct Login {
    pub(super) operator: Arc<str>,
    pub(super) expires: Option<SystemTime>,
}

impl fmt::Debug for Operators {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.tokens.values().map(|n| &**n).collect();
        names.sort_unstable();
        f.debug_struct("Operators")
            .field("tokens", &names)
            .field("access_tokens", &self.access.is_some())
            .finish()
    }
}

fn valid_name(name: &str) -> Result<(), OperatorsError> {
    let count = name.chars().count();
    if count == 0 || count > 64 {
        return Err(OperatorsError(format!(
            "an operator's name is 1 to 64 characters, not {count}: {name:?}"
        )));
    }
    if name.chars().any(crate::terminal::hides) {
        return Err(OperatorsError(format!(
            "the operator's name {:?} holds a character that hides or reorders text",
            crate::terminal::escaped(name)
        )));
    }
    match crate::names::refusal(name) {
        Some(why) => Err(OperatorsError(format!(
            "an operator's name is refused: {why}"
        ))),
        None => Ok(()),
    }
}

/// A logged-in browser.
#[derive(Clone)]
pub(super) struct Session {
    pub(super) operator: Arc<str>,
    pub(super) csrf: String,
    expires: Instant,
}

/// The sessions, by the SHA-256 of their cookie.
pub(super) struct Sessions {
    by_cookie: Mutex<HashMap<[u8; 32], Session>>,
    failures: Mutex<std::collections::VecDeque<Instant>>,
    slow: tokio::sync::Semaphore,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions {
            by_cookie: Mutex::default(),
            failures: Mutex::default(),
            slow: tokio::sync::Semaphore::new(1),
        }
    }
}

impl Sessions {
    /// A wrong token's answer: at once within the minute's allowance, else one at a time, slowly.
    pub(super) async fn failed_slowly(&self) {
        self.failed();
        if self.held_back() {
            let _one_at_a_time = self.slow.acquire().await;
            tokio::time::sleep(SLOW_FAILURE).await;
        }
    }

    /// Whether failures are past the minute's allowance.
    fn held_back(&self) -> bool {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let minute_ago = Instant::now().checked_sub(Duration::from_secs(60));
        while failures
            .front()
            .is_some_and(|at| minute_ago.is_some_and(|m| *at < m))
        {
            failures.pop_front();
        }
        failures.len() >= MAX_FAILURES_PER_MINUTE
    }

    fn failed(&self) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() < MAX_FAILURES_PER_MINUTE {
            failures.push_back(Instant::now());
        }
    }

    pub(super) fn start(&self, operator: Arc<str>, ttl: Duration) -> String {
        let cookie = random_hex();
        let session = Session {
            operator,
            csrf: random_hex(),
            expires: Instant::now() + ttl,
        };
        let mut sessions = self.by_cookie.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        sessions.retain(|_, s| s.expires > now);
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(key, _)| *key)
        {
            sessions.remove(&oldest);
        }
        sessions.insert(digest(&cookie), session);
        cookie
    }

    pub(super) fn find(&self, cookie: &str) -> Option<Session> {
        let mut sessions = self.by_cookie.lock().unwrap_or_else(|e| e.into_inner());
        let key = digest(cookie);
        match sessions.get(&key) {
            Some(session) if session.expires > Instant::now() => Some(session.clone()),
            Some(_) => {
                sessions.remove(&key);
                None
            }
            None => None,
        }
    }

    pub(super) fn end(&self, cookie: &str) {
        let mut sessions = self.by_cookie.lock().unwrap_or_else(|e| e.into_inner());
        sessions.remove(&digest(cookie));
    }
}

pub(super) fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    // Without the system's randomness there is no safe session: refuse to serve rather than guess.
    getrandom::fill(&mut bytes).expect("the system's random number generator");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn cookie_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// Every response: the page's content policy and no caching; every change: from the console's own
/// origin, as the browser tells it (`Origin`, `Sec-Fetch-Site`), whatever the cookie.
pub(super) async fn guard(request: Request, next: Next) -> Response {
    if request.method() != Method::GET
        && request.method() != Method::HEAD
        && !same_origin(request.headers())
    {
        return (
            StatusCode::FORBIDDEN,
            "a change must come from the console's own pages",
        )
            .into_response();
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        // Not `no-referrer`: under it, a browser posts the page's own forms with `Origin: null`.
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))
        && site != "same-origin"
        && site != "none"
    {
        return false;
    }
    match (text(header::ORIGIN), text(header::HOST)) {
        (None, _) => true,
        (Some(origin), Some(host)) => {
            origin == format!("http://{host}") || origin == format!("https://{host}")
        }
        (Some(_), None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "e83babeabef696679198ec477d63ec85e49a35304c2e9b1ccea6fb0571d758c3";

    #[test]
    fn an_operators_file_that_cannot_be_used_is_refused_with_the_reason() {
        for (text, says) in [
            ("[operators]\nolga = \"abc\"", "not a SHA-256"),
            (
                "[operators]\nolga = \"zz3babeabef696679198ec477d63ec85e49a35304c2e9b1ccea6fb0571d758c3\"",
                "not a SHA-256",
            ),
            (
                &format!("[operators]\nolga = \"{HASH}\"\nravi = \"{HASH}\""),
                "the same token",
            ),
            (
                &format!("[operators]\n\"ol\\u202Ega\" = \"{HASH}\""),
                "hides or reorders",
            ),
            (&format!("[operators]\n\"\" = \"{HASH}\""), "1 to 64"),
            (&format!("[operator]\nolga = \"{HASH}\""), "unknown field"),
            ("operators = 3", "invalid type"),
        ] {
            let error = Operators::from_toml(text).expect_err(text).to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
        let operators = Operators::from_toml(&format!("[operators]\nolga = \"{HASH}\"")).unwrap();
        assert!(!operators.is_empty());
        assert!(Operators::new().is_empty());
    }

    #[allow(dead_code)]
    mod corpus {
        include!("../../../tests/common/lookalikes.rs");
    }
    use corpus::*;

    // Guarantee 20: an access token whose subject reads as an operator of the file is refused at
    // log-in (`olga `, ` olga`, Cyrillic `оlga`, fullwidth `ｏｌｇａ`, and the corpus).
    #[test]
    fn a_subject_that_reads_as_an_operator_of_the_file_is_refused() {
        let operators = Operators::from_toml(&format!("[operators]\nolga = \"{HASH}\"")).unwrap();
        for subject in ["olga ", " olga", "\u{43e}lga", "ｏｌｇａ", "olga"] {
            assert!(operators.admits(subject).is_err(), "{subject:?}");
        }
        for (name, alikes) in LOOK_ALIKES {
            if name.contains(['.', '~', '/']) {
                continue;
            }
            let file = Operators::new().token("t", name);
            for alike in alikes.iter().chain([name]) {
                assert!(file.admits(alike).is_err(), "{alike:?} against {name:?}");
            }
        }
        for name in DISTINCT.iter().filter(|n| !n.contains(['.', '~', '/'])) {
            assert!(
                operators.admits(name).is_ok() || *name == "olga",
                "{name:?}"
            );
        }
    }

    // An operators file naming two operators that read alike is refused, whichever comes first.
    #[test]
    fn an_operators_file_naming_two_operators_that_read_alike_is_refused() {
        for (name, alikes) in LOOK_ALIKES {
            if name.contains(['.', '~', '/']) {
                continue;
            }
            for alike in *alikes {
                let pair = [
                    Operators::new().token("a", name).token_sha256(HASH, alike),
                    Operators::new()
                        .token_sha256(HASH, alike)
                        .and_then(|o| o.token_sha256(&"0".repeat(64), name)),
                ];
                for operators in pair {
                    assert!(operators.is_err(), "{name:?} and {alike:?}");
                }
            }
        }
    }

    #[tokio::test]
    async fn a_token_names_its_operator_and_nothing_else_does() {
        let operators = Operators::from_toml(&format!("[operators]\nolga = \"{HASH}\"")).unwrap();
        assert_eq!(
            operators
                .who("olga-token")
                .await
                .map(|login| login.operator),
            Some("olga".into())
        );
        for wrong in ["", "olga-token ", "OLGA-TOKEN", HASH, "olga"] {
            assert!(operators.who(wrong).await.is_none(), "{wrong:?}");
        }
    }

    #[test]
    fn a_session_is_found_by_its_cookie_until_it_ends_or_expires() {
        let sessions = Sessions::default();
        let cookie = sessions.start("olga".into(), Duration::from_secs(60));
        let session = sessions.find(&cookie).expect("the session");
        assert_eq!(&*session.operator, "olga");
        assert_eq!(session.csrf.len(), 64);
        assert_ne!(session.csrf, cookie);
        assert!(sessions.find(&cookie[..63]).is_none());
        sessions.end(&cookie);
        assert!(sessions.find(&cookie).is_none());
        let short = sessions.start("olga".into(), Duration::ZERO);
        assert!(sessions.find(&short).is_none(), "an expired session");
    }

    #[test]
    fn guessing_goes_no_faster_than_the_failures_a_minute_allows() {
        let sessions = Sessions::default();
        for _ in 0..MAX_FAILURES_PER_MINUTE - 1 {
            assert!(!sessions.held_back());
            sessions.failed();
        }
        assert!(!sessions.held_back());
        sessions.failed();
        assert!(sessions.held_back());
    }

    #[test]
    fn a_change_from_another_site_is_refused() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_str(value).unwrap());
            }
            map
        };
        assert!(same_origin(&headers(&[("host", "127.0.0.1:8640")])));
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:8640"),
            ("origin", "http://127.0.0.1:8640"),
            ("sec-fetch-site", "same-origin"),
        ])));
        for refused in [
            &[
                ("host", "127.0.0.1:8640"),
                ("origin", "http://evil.example"),
            ][..],
            &[
                ("host", "127.0.0.1:8640"),
                ("origin", "http://127.0.0.1:8640.evil.example"),
            ],
            &[("host", "127.0.0.1:8640"), ("origin", "null")],
            &[("origin", "http://127.0.0.1:8640")],
            &[("host", "127.0.0.1:8640"), ("sec-fetch-site", "cross-site")],
            &[("host", "127.0.0.1:8640"), ("sec-fetch-site", "same-site")],
        ] {
            assert!(!same_origin(&headers(refused)), "{refused:?}");
        }
    }
}
