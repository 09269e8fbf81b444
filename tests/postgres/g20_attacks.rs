//! Outside attacks on guarantee 20 (the operator console) and where it meets the other features:
//! the log-in (operators' tokens, JWT access tokens), CSRF and origin, who an answer is recorded
//! under, irreversible calls, everything agents, writers of the trail and fleet members write, the
//! redaction of arguments, the fleet's form, the trail's search, the live list, and the console
//! beside lowered fleets, expiring requests, racing operators and a server stopped and started.
//!
//! Written from the documentation and the public API only, against the real `toolgate console`
//! command (or a console served in this process), a real PostgreSQL, and gates in this process or
//! in an agent process of its own (`agent_child_of_g20`: this binary run again with
//! `TOOLGATE_G20_CHILD=agent`). Every test asserts the guarantee as it should hold: a test that fails
//! is an attack that got through.
//!
//! Got through when written:
//! - a20_45, a20_46: the live list (`/approvals/events`) of a session that ended (logged out, or
//!   past its access token's expiry) goes on telling that browser of every change to the requests.
//! - a20_54: a request id that is no number (`/approvals/ID`, `/approvals/ID/answer`) is refused
//!   with text that repeats the request ("Invalid URL: Cannot parse ... to a i64"), its hiding
//!   characters raw.
//! - a20_58: a console whose operators included any token verifier (`Operators::verifier`, since
//!   replaced by `Operators::access_tokens`) kept a log-in with an access token for the console's
//!   whole session: an answer was recorded under the token's subject after the token expired.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::approval::store::Answer;
use toolgate::postgres::{PostgresStore, RequestState};
use toolgate::{Denied, Gate, Mode, Rollback, tool};

use crate::common::postgres::query;
use crate::support::console_attacks::*;
use crate::support::{Racer, parent_database, scratch_dir, wait};
use toolgate::postgres::PostgresSink;
use toolgate::postgres::fleet::{self, Fleet};

const CHILD_ROLE: &str = "TOOLGATE_G20_CHILD";

// ---------------------------------------------------------------------------------------------------
// Tools.

static RUNS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static STATES: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

fn ran(what: String) {
    RUNS.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(what);
}

fn runs(what: &str) -> usize {
    RUNS.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|r| *r == what)
        .count()
}

fn set_state(instance: &str, state: &str) {
    STATES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(instance.to_owned(), state.to_owned());
}

fn describe(instance: &str) -> Result<Value, String> {
    let state = STATES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .get(instance)
        .cloned()
        .unwrap_or_else(|| "running".to_owned());
    Ok(json!({"instance": instance, "state": state}))
}

fn plan(_instance: &str, note: &str) -> Rollback {
    Rollback::steps(format!("rebuild by hand: {note}"))
}

/// Wire money; the PIN never reaches a record, a message or an operator.
#[tool(risk = "HIGH_WRITE", domain = "c20", redact = [pin], record_arguments)]
pub(crate) fn wire(account: String, note: String, pin: String) -> Result<(), Denied> {
    ran(format!("wire:{account}:{note}:{pin}"));
    Ok(())
}

/// Terminate an instance: it cannot be undone.
#[tool(risk = "HIGH_WRITE", domain = "c20", record_arguments, target = instance,
       evidence = describe, rollback = plan, irreversible)]
pub(crate) fn terminate(instance: String, note: String) -> Result<(), Denied> {
    ran(format!("terminate:{instance}:{note}"));
    Ok(())
}

/// Post a document the agent wrote, whatever its shape.
#[tool(risk = "HIGH_WRITE", domain = "c20", record_arguments)]
pub(crate) fn post(payload: Value) -> Result<(), Denied> {
    ran(format!("post:{}", payload.to_string().len()));
    Ok(())
}

/// Write a note: a small change, its text recorded.
#[tool(risk = "LOW_WRITE", domain = "c20", record_arguments)]
pub(crate) fn note(text: String) -> Result<(), Denied> {
    ran(format!("note:{text}"));
    Ok(())
}

/// Read a ticket a customer wrote: untrusted.
#[tool(risk = "READ_ONLY", domain = "c20", untrusted_output)]
pub(crate) fn read_ticket(id: u64) -> Result<String, Denied> {
    Ok(format!("ticket {id}"))
}

fn store_of(url: &str) -> Arc<PostgresStore> {
    Arc::new(PostgresStore::connect(url).expect("the store"))
}

fn gate_of(store: Arc<PostgresStore>, agent: &str, principal: Option<&str>) -> Gate {
    let mut builder = Gate::builder()
        .mode(Mode::FullAuto)
        .agent(agent)
        .approval_store_shared(store);
    if let Some(principal) = principal {
        builder = builder.principal(principal);
    }
    builder.build().expect("a gate")
}

// ---------------------------------------------------------------------------------------------------
// The bench: a database, two operators, the console as a command, a store and a gate.

const OLGA: &str = "olga-token-of-g20";
const RAVI: &str = "ravi-token-of-g20";

struct Bench {
    _serial: std::sync::MutexGuard<'static, ()>,
    url: String,
    dir: PathBuf,
    ops: PathBuf,
    console: ConsoleProcess,
    store: Arc<PostgresStore>,
}

impl Bench {
    fn gate(&self) -> Gate {
        gate_of(self.store.clone(), "desk", Some("alice"))
    }

    fn olga(&self) -> Browser {
        login(self.console.addr, OLGA)
    }

    fn ravi(&self) -> Browser {
        login(self.console.addr, RAVI)
    }

    fn state(&self, id: i64) -> RequestState {
        wait(self.store.show(id))
            .expect("the store answers")
            .expect("the request")
            .state
    }
}

/// A new database `name`, the console on it for olga and ravi, and a store; `None` in a child's role.
fn bench(name: &str) -> Option<Bench> {
    let (serial, url) = parent_database(CHILD_ROLE, name)?;
    let dir = scratch_dir(name);
    let ops = operators_file(&dir, &[("olga", OLGA), ("ravi", RAVI)]);
    let console = ConsoleProcess::start(&url, &ops, &[]);
    let store = store_of(&url);
    Some(Bench {
        _serial: serial,
        url,
        dir,
        ops,
        console,
        store,
    })
}

/// The id of the request a call was refused to wait for.
#[track_caller]
fn request_id<T>(result: Result<T, Denied>) -> i64 {
    let denied = match result {
        Ok(_) => panic!("the call ran without an approval"),
        Err(denied) => denied,
    };
    denied
        .approval_request_id()
        .unwrap_or_else(|| panic!("no request: {denied}"))
        .parse()
        .expect("a numeric id")
}

/// Who answered, if anyone.
fn answered_by(state: &RequestState) -> Option<String> {
    let answer = match state {
        RequestState::Answered(answer) | RequestState::Used(answer) => answer,
        _ => return None,
    };
    Some(match answer {
        Answer::Approve { by, .. } | Answer::Reject { by, .. } => by.clone(),
        _ => "an answer of another kind".to_owned(),
    })
}

fn answer_path(id: i64) -> String {
    format!("/approvals/{id}/answer")
}

/// Approves request `id` once from the request's page, as olga's browser would.
fn approve(browser: &Browser, id: i64, extra: &[(&str, &str)]) -> Reply {
    let csrf = browser.csrf();
    let mut fields = vec![("csrf", csrf.as_str()), ("action", "approve")];
    fields.extend_from_slice(extra);
    browser.post(&answer_path(id), &fields)
}

/// A pending call of `c20.wire` made by `gate`: its request's id.
fn pending_wire(gate: &Gate, account: &str, note: &str) -> i64 {
    request_id(gate.run(|| wire(account.into(), note.into(), "0000".into())))
}

#[track_caller]
fn assert_pending_state(bench: &Bench, id: i64, what: &str) {
    let state = bench.state(id);
    assert_eq!(
        state,
        RequestState::Pending,
        "{what}: the request was answered ({state:?})"
    );
}

// ---------------------------------------------------------------------------------------------------
// Log-in.

/// Attack: log in with a wrong token, an empty one, a near miss, one of a megabyte, one with a NUL.
/// Guarantee 20: a session only for a token of the operators file.
#[test]
fn a20_01_wrong_empty_near_miss_and_huge_tokens_open_no_session() {
    let Some(bench) = bench("a20_01") else {
        return;
    };
    let huge = "o".repeat(1 << 20);
    for token in [
        "",
        "wrong",
        "olga-token-of-g2",
        "olga-token-of-g200",
        "OLGA-TOKEN-OF-G20",
        "olga-token-of-g20\0",
        "\0olga-token-of-g20",
        "olga",
        huge.as_str(),
    ] {
        let shown: String = token.chars().take(40).collect();
        if let Ok(browser) = try_login(bench.console.addr, token) {
            panic!(
                "{shown:?} opened a session: {}",
                browser.get("/approvals").describe()
            );
        }
    }
    assert!(bench.console.browser().get("/approvals").to_login());
}

/// Attack: log in with what the operators file holds, the token's SHA-256, in either case.
/// Guarantee 20: the file names the token by its hash; the hash is no token.
#[test]
fn a20_02_the_hash_the_operators_file_holds_is_no_token() {
    let Some(bench) = bench("a20_02") else {
        return;
    };
    let hash = crate::support::sha256_hex(OLGA);
    assert!(std::fs::read_to_string(&bench.ops).unwrap().contains(&hash));
    for token in [hash.clone(), hash.to_ascii_uppercase()] {
        assert!(
            try_login(bench.console.addr, &token).is_err(),
            "the hash of olga's token logged in"
        );
    }
}

/// Attack: forged session cookies (made up, a real one cut or extended, the CSRF token, empty, a
/// second cookie of the same name) asking for pages and changes.
/// Guarantee 20: a page needs a session; a change without one is refused.
#[test]
fn a20_03_forged_session_cookies_open_no_page_and_change_nothing() {
    let Some(bench) = bench("a20_03") else {
        return;
    };
    let id = pending_wire(&bench.gate(), "a-03", "x");
    let olga = bench.olga();
    let real = olga.cookie.clone().unwrap();
    let csrf = olga.csrf();
    let forged = [
        "0".repeat(64),
        "f".repeat(64),
        real[..real.len() - 1].to_owned(),
        format!("{real}0"),
        csrf.clone(),
        crate::support::sha256_hex(&real),
        String::new(),
        format!("{real}%00"),
    ];
    for cookie in &forged {
        let browser = Browser::with_cookie(bench.console.addr, cookie);
        for path in [
            "/approvals",
            &format!("/approvals/{id}"),
            "/fleet",
            "/trail",
        ] {
            let page = browser.get(path);
            assert!(
                page.to_login() && !page.body.contains("a-03"),
                "cookie {cookie:?} opened {path}: {}",
                page.describe()
            );
        }
        let answered = browser.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
        assert!(answered.status >= 300, "{}", answered.describe());
        assert_pending_state(&bench, id, &format!("cookie {cookie:?}"));
    }
    // The real cookie after a forged one of the same name, and before.
    for header in [
        format!("{COOKIE}=0000; {COOKIE}={real}"),
        format!("{COOKIE}={real}; {COOKIE}=0000"),
    ] {
        let _ = Browser::new(bench.console.addr).post_raw(
            &answer_path(id),
            &form(&[("csrf", &csrf), ("action", "approve")]),
            &[("Cookie", &header), ("Origin", &olga.origin())],
        );
    }
    // Whatever those did, no one but olga could have answered.
    let state = bench.state(id);
    if let Some(by) = answered_by(&state) {
        assert_eq!(by, "olga");
    }
}

/// Attack: after logging out, the cookie and its CSRF token used again.
/// Guarantee 20: a page needs a session; a session ends at log-out.
#[test]
fn a20_04_a_cookie_after_log_out_opens_nothing() {
    let Some(bench) = bench("a20_04") else {
        return;
    };
    let id = pending_wire(&bench.gate(), "a-04", "x");
    let olga = bench.olga();
    let csrf = olga.csrf();
    let out = olga.post("/logout", &[("csrf", &csrf)]);
    assert!(out.status < 400, "{}", out.describe());
    for path in [
        "/approvals".to_owned(),
        format!("/approvals/{id}"),
        "/approvals/table".to_owned(),
    ] {
        let page = olga.get(&path);
        assert!(
            page.to_login() && !page.body.contains("a-04"),
            "{path} after log-out: {}",
            page.describe()
        );
    }
    let answered = olga.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
    assert!(answered.status >= 300, "{}", answered.describe());
    assert_pending_state(&bench, id, "a cookie after log-out");
}

/// Attack: a session cookie of one console, on another console of the same store (and operators).
/// Guarantee 20: a session is got from this console, for a token.
#[test]
fn a20_05_a_session_of_another_console_is_none_here() {
    let Some(bench) = bench("a20_05") else {
        return;
    };
    let id = pending_wire(&bench.gate(), "a-05", "x");
    let other = ConsoleProcess::start(&bench.url, &bench.ops, &[]);
    let there = login(other.addr, OLGA);
    let csrf = there.csrf();
    let here = Browser::with_cookie(bench.console.addr, there.cookie.as_deref().unwrap());
    assert!(here.get("/approvals").to_login());
    let answered = here.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
    assert!(answered.status >= 300, "{}", answered.describe());
    assert_pending_state(&bench, id, "a session of another console");
}

/// Attack: an operator removed from the file, the console restarted; their old cookie and token.
/// Guarantee 20: a session only for a token of the operators file.
#[test]
fn a20_06_an_operator_removed_and_the_console_restarted_has_no_session() {
    let Some(mut bench) = bench("a20_06") else {
        return;
    };
    let id = pending_wire(&bench.gate(), "a-06", "x");
    let olga = bench.olga();
    let csrf = olga.csrf();
    let ops = operators_file(&bench.dir, &[("ravi", RAVI)]);
    let restarted = ConsoleProcess::start(&bench.url, &ops, &[]);
    bench.console = restarted;
    let olga = Browser::with_cookie(bench.console.addr, olga.cookie.as_deref().unwrap());
    assert!(olga.get("/approvals").to_login());
    let answered = olga.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
    assert!(answered.status >= 300, "{}", answered.describe());
    assert!(try_login(bench.console.addr, OLGA).is_err());
    assert_pending_state(&bench, id, "a removed operator");
    // Ravi, still in the file, logs in.
    let _ = bench.ravi();
}

/// Attack: session fixation: the browser brings a cookie of the attacker's choosing to the log-in.
/// Guarantee 20: a session is a random cookie the console issues on log-in.
#[test]
fn a20_07_a_log_in_keeps_no_cookie_the_browser_brought() {
    let Some(bench) = bench("a20_07") else {
        return;
    };
    let chosen = "a".repeat(64);
    let reply =
        Browser::with_cookie(bench.console.addr, &chosen).post("/login", &[("token", OLGA)]);
    let issued = reply.session_cookie().expect("a session");
    assert_ne!(issued, chosen);
    assert!(
        Browser::with_cookie(bench.console.addr, &chosen)
            .get("/approvals")
            .to_login()
    );
}

/// Attack: read the session cookie from a script, or send it from another site.
/// Guarantee 20 (docs/console.md, Log-in): the cookie is `HttpOnly`, `SameSite=Strict`, and no page
/// carries it (the CSRF token is another value).
#[test]
fn a20_08_the_session_cookie_is_http_only_strict_and_on_no_page() {
    let Some(bench) = bench("a20_08") else {
        return;
    };
    let reply = bench.console.browser().post("/login", &[("token", OLGA)]);
    let cookie = reply
        .headers("set-cookie")
        .into_iter()
        .find(|c| c.starts_with(COOKIE))
        .expect("a session cookie")
        .to_owned();
    let attributes: Vec<String> = cookie
        .split(';')
        .map(|a| a.trim().to_ascii_lowercase())
        .collect();
    assert!(attributes.contains(&"httponly".to_owned()), "{cookie}");
    assert!(
        attributes.contains(&"samesite=strict".to_owned()),
        "{cookie}"
    );
    let olga = Browser::with_cookie(bench.console.addr, &reply.session_cookie().unwrap());
    let value = olga.cookie.clone().unwrap();
    for path in [
        "/approvals",
        "/fleet",
        "/trail",
        "/promotion",
        "/trail/verify",
    ] {
        let page = olga.get(path);
        assert_eq!(page.status, 200, "{path}");
        assert!(
            !page.body.contains(&value),
            "{path} carries the session cookie"
        );
    }
}

/// Attack: keep using a session past its life (a console whose sessions last two seconds).
/// Guarantee 20: a page needs a session; sessions last as long as the console says.
#[test]
fn a20_09_a_session_past_its_life_opens_nothing() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "a20_09") else {
        return;
    };
    let store = store_of(&url);
    let id = pending_wire(&gate_of(store.clone(), "desk", None), "a-09", "x");
    let console = InProcessConsole::start(
        toolgate::console::Console::builder()
            .operators(toolgate::console::Operators::new().token(OLGA, "olga"))
            .session_ttl(Duration::from_secs(2)),
        &url,
    );
    let started = Instant::now();
    let olga = login(console.addr, OLGA);
    let csrf = olga.csrf();
    while started.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(olga.get("/approvals").to_login());
    let answered = olga.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
    assert!(answered.status >= 300, "{}", answered.describe());
    let state = wait(store.show(id)).unwrap().unwrap().state;
    assert_eq!(state, RequestState::Pending);
}

/// Attack: another site posts the log-in form (with a token of its own operator), so that the
/// victim's browser answers under the attacker's name.
/// Guarantee 20 (docs/console.md): a request whose `Origin` is another site's, or whose
/// `Sec-Fetch-Site` says another site sent it, is refused whatever it carries.
#[test]
fn a20_10_a_log_in_posted_by_another_site_opens_no_session() {
    let Some(bench) = bench("a20_10") else {
        return;
    };
    let browser = bench.console.browser();
    for headers in [
        vec![
            ("Origin", "http://evil.example"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
        vec![("Origin", "http://evil.example")],
        vec![("Sec-Fetch-Site", "cross-site")],
    ] {
        let reply = browser.post_raw("/login", &form(&[("token", RAVI)]), &headers);
        assert!(
            reply.session_cookie().is_none(),
            "a log-in posted with {headers:?} opened a session: {}",
            reply.describe()
        );
    }
}

// ---------------------------------------------------------------------------------------------------
// Access tokens.

const ISSUER: &str = "https://auth.example.test";
const AUDIENCE: &str = "https://console.example.test";
const SCOPE: &str = "toolgate:console";

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The DER document of a PEM one.
fn pem_der(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("a PEM document")
}

/// An RS256 key of the authorization server (made for these tests alone), and its public JWK.
struct TestKey {
    kid: String,
    encoding: jsonwebtoken::EncodingKey,
    jwk: Value,
}

impl TestKey {
    /// The trusted key, under the key id `kid`.
    fn new(kid: &str) -> TestKey {
        TestKey {
            kid: kid.to_owned(),
            encoding: jsonwebtoken::EncodingKey::from_rsa_der(&pem_der(RSA_KEY)),
            jwk: json!({"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid, "n": RSA_N,
                "e": "AQAB"}),
        }
    }

    fn sign(&self, claims: &Value) -> String {
        self.sign_with(jsonwebtoken::Algorithm::RS256, &self.encoding, claims)
    }

    fn sign_with(
        &self,
        alg: jsonwebtoken::Algorithm,
        key: &jsonwebtoken::EncodingKey,
        claims: &Value,
    ) -> String {
        let mut header = jsonwebtoken::Header::new(alg);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, key).expect("a signed token")
    }
}

/// Claims for the console, of subject `sub`, valid for `secs` more seconds.
fn claims(sub: &str, secs: i64) -> Value {
    let now = now_secs() as i64;
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "scope": SCOPE, "iat": now - 5,
        "exp": now + secs})
}

/// The console as a command that also takes access tokens signed by `key` (its JWKS a file).
fn jwt_bench(name: &str, key: &TestKey, extra: &[&str]) -> Option<Bench> {
    let (serial, url) = parent_database(CHILD_ROLE, name)?;
    let dir = scratch_dir(name);
    let ops = operators_file(&dir, &[("olga", OLGA), ("ravi", RAVI)]);
    let jwks = dir.join("jwks.json");
    std::fs::write(&jwks, json!({"keys": [key.jwk]}).to_string()).unwrap();
    let mut args = vec![
        "--jwt-issuer",
        ISSUER,
        "--jwt-audience",
        AUDIENCE,
        "--jwks",
        jwks.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let console = ConsoleProcess::start(&url, &ops, &args);
    let store = store_of(&url);
    Some(Bench {
        _serial: serial,
        url,
        dir,
        ops,
        console,
        store,
    })
}

/// Asserts that `token` opens no session, nor any page.
#[track_caller]
fn assert_no_session(bench: &Bench, token: &str, what: &str) {
    if let Ok(browser) = try_login(bench.console.addr, token) {
        panic!(
            "{what} opened a session: {}",
            browser.get("/approvals").describe()
        );
    }
}

/// Attack: tokens of `alg: none` (with the claims of a good token), in every spelling.
/// Guarantee 20: a session only for an access token that verifies.
#[test]
fn a20_11_an_unsigned_access_token_opens_no_session() {
    let key = TestKey::new("a20-11");
    let Some(bench) = jwt_bench("a20_11", &key, &[]) else {
        return;
    };
    use base64::Engine as _;
    let part = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let good = claims("mallory", 300);
    // The well-signed token passes, so the refusals below are the header's.
    let _ = login(bench.console.addr, &key.sign(&good));
    for header in [
        json!({"alg": "none", "typ": "JWT"}),
        json!({"alg": "none", "kid": key.kid}),
        json!({"alg": "None", "kid": key.kid}),
        json!({"alg": "NONE", "kid": key.kid}),
    ] {
        for signature in ["", "AAAA"] {
            let token = format!("{}.{}.{signature}", part(&header), part(&good));
            assert_no_session(&bench, &token, &format!("{header}"));
        }
    }
    // HS256 keyed with the public key's modulus, its JWK, and the JWKS document.
    for secret in [
        RSA_N.as_bytes().to_vec(),
        key.jwk.to_string().into_bytes(),
        json!({"keys": [key.jwk]}).to_string().into_bytes(),
    ] {
        let token = key.sign_with(
            jsonwebtoken::Algorithm::HS256,
            &jsonwebtoken::EncodingKey::from_secret(&secret),
            &good,
        );
        assert_no_session(&bench, &token, "HS256 with the public key");
    }
    // Another key under the trusted kid.
    let forger = jsonwebtoken::EncodingKey::from_rsa_der(&pem_der(RSA_FORGER_KEY));
    let token = key.sign_with(jsonwebtoken::Algorithm::RS256, &forger, &good);
    assert_no_session(
        &bench,
        &token,
        "a token of another key under the trusted kid",
    );
}

/// Attack: well-signed tokens of another issuer, for another audience, expired beyond the leeway,
/// not yet valid, without a subject.
/// Guarantee 20: a session only for an access token that verifies (issuer, audience, expiry).
#[test]
fn a20_12_a_token_of_another_issuer_audience_or_time_opens_no_session() {
    let key = TestKey::new("a20-12");
    let Some(bench) = jwt_bench("a20_12", &key, &[]) else {
        return;
    };
    let now = now_secs() as i64;
    let mut cases: Vec<(&str, Value)> = Vec::new();
    let with = |name: &str, value: Value| {
        let mut c = claims("mallory", 300);
        c[name] = value;
        c
    };
    cases.push((
        "another issuer",
        with("iss", json!("https://evil.example.test")),
    ));
    cases.push((
        "an issuer with a trailing slash",
        with("iss", json!(format!("{ISSUER}/"))),
    ));
    cases.push((
        "another audience",
        with("aud", json!("https://other.example.test")),
    ));
    cases.push((
        "an audience list without ours",
        with("aud", json!(["https://other.example.test"])),
    ));
    cases.push(("expired an hour ago", with("exp", json!(now - 3600))));
    cases.push(("not valid for an hour", with("nbf", json!(now + 3600))));
    let mut no_sub = claims("mallory", 300);
    no_sub.as_object_mut().unwrap().remove("sub");
    cases.push(("no subject", no_sub));
    let mut no_exp = claims("mallory", 300);
    no_exp.as_object_mut().unwrap().remove("exp");
    cases.push(("no expiry", no_exp));
    cases.push(("an empty subject", with("sub", json!(""))));
    cases.push((
        "a subject that is not a string",
        with("sub", json!({"name": "olga"})),
    ));
    for (what, claims) in cases {
        assert_no_session(&bench, &key.sign(&claims), what);
    }
}

/// Attack: tokens that do not grant the console's scope, or grant one that only looks like it.
/// Guarantee 20: the access token must grant `--jwt-scope` (`toolgate:console`), compared exactly.
#[test]
fn a20_13_a_token_without_the_console_s_scope_opens_no_session() {
    let key = TestKey::new("a20-13");
    let Some(bench) = jwt_bench("a20_13", &key, &[]) else {
        return;
    };
    for scope in [
        json!(""),
        json!("toolgate"),
        json!("toolgate:consoles"),
        json!("toolgate:console-read"),
        json!("xtoolgate:console"),
        json!("TOOLGATE:CONSOLE"),
        json!("toolgate:console\u{200b}"),
        json!("read,toolgate:console"),
        json!("tickets:read"),
    ] {
        let mut c = claims("mallory", 300);
        c["scope"] = scope.clone();
        assert_no_session(&bench, &key.sign(&c), &format!("scope {scope}"));
    }
    let mut c = claims("mallory", 300);
    c.as_object_mut().unwrap().remove("scope");
    assert_no_session(&bench, &key.sign(&c), "no scope");
}

/// Attack: a token expired a few seconds ago, within the verifier's leeway for clocks apart.
/// Guarantee 20 (docs/console.md): the session ends when the token expires: a token already past
/// its `exp` opens no page.
#[test]
fn a20_14_a_token_past_its_expiry_within_the_leeway_opens_no_page() {
    let key = TestKey::new("a20-14");
    let Some(bench) = jwt_bench("a20_14", &key, &[]) else {
        return;
    };
    let id = pending_wire(&bench.gate(), "a-14", "x");
    let token = key.sign(&claims("mallory", -10));
    let Ok(browser) = try_login(bench.console.addr, &token) else {
        return;
    };
    let page = browser.get("/approvals");
    assert!(
        page.to_login(),
        "a token expired 10 s ago opened a page: {}",
        page.describe()
    );
    let answered = browser.post(
        &answer_path(id),
        &[
            (
                "csrf",
                input_value(&page.body, "csrf").as_deref().unwrap_or(""),
            ),
            ("action", "approve"),
        ],
    );
    assert!(answered.status >= 300);
    assert_pending_state(&bench, id, "a token past its expiry");
}

/// Attack: keep a session got with a short-lived access token past the token's expiry (the
/// console's own sessions last 8 hours).
/// Guarantee 20 (docs/console.md): the session ends when the token expires.
#[test]
fn a20_15_a_session_of_an_access_token_ends_with_the_token() {
    let key = TestKey::new("a20-15");
    let Some(bench) = jwt_bench("a20_15", &key, &[]) else {
        return;
    };
    let id = pending_wire(&bench.gate(), "a-15", "x");
    let exp = now_secs() + 3;
    let mut c = claims("mallory", 0);
    c["exp"] = json!(exp);
    let browser = login(bench.console.addr, &key.sign(&c));
    let csrf = browser.csrf();
    while now_secs() <= exp + 1 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let page = browser.get("/approvals");
    assert!(
        page.to_login(),
        "a session outlived its token: {}",
        page.describe()
    );
    let answered = browser.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
    assert!(answered.status >= 300, "{}", answered.describe());
    assert_pending_state(&bench, id, "a session past its token");
}

/// Attack: a token whose subject (the operator's name, which the store records and every page
/// shows) holds a right-to-left override, a line break, a zero-width space, markup.
/// Guarantee 20: every text is escaped and every hiding character shown as a marker: the name is
/// refused at log-in, or shown marked and inert.
#[test]
fn a20_16_a_subject_that_hides_reorders_or_marks_up_is_refused_or_shown_marked() {
    let key = TestKey::new("a20-16");
    let Some(bench) = jwt_bench("a20_16", &key, &[]) else {
        return;
    };
    for (sub, hidden) in [
        ("olga\u{202e}agl", Some('\u{202e}')),
        ("olga\nravi", Some('\n')),
        ("olga\u{2028}ravi", Some('\u{2028}')),
        ("olga\u{200b}", Some('\u{200b}')),
        ("<svg onload=g20mark()>", None),
        ("\" autofocus onfocus=g20mark() x=\"", None),
    ] {
        let Ok(browser) = try_login(bench.console.addr, &key.sign(&claims(sub, 300))) else {
            continue;
        };
        let page = browser.get("/approvals");
        assert_eq!(page.status, 200);
        assert_inert(&format!("the operator {sub:?}"), &page, "g20mark");
        if let Some(c) = hidden {
            assert_marked(&format!("the operator {sub:?}"), &page, &[c]);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// CSRF and origin.

/// Attack: approve with the session's cookie but no CSRF token, an empty one, a made-up one, one cut
/// short.
/// Guarantee 20: every change needs the session's CSRF token.
#[test]
fn a20_17_an_answer_without_the_session_s_csrf_token_is_refused() {
    let Some(bench) = bench("a20_17") else {
        return;
    };
    let id = pending_wire(&bench.gate(), "a-17", "x");
    let olga = bench.olga();
    let csrf = olga.csrf();
    let cut = &csrf[..csrf.len() - 1];
    let zeros = "0".repeat(csrf.len());
    for fields in [
        vec![("action", "approve")],
        vec![("csrf", ""), ("action", "approve")],
        vec![("csrf", zeros.as_str()), ("action", "approve")],
        vec![("csrf", cut), ("action", "approve")],
        vec![
            ("csrf", "0"),
            ("csrf", csrf.as_str()),
            ("action", "approve"),
        ],
    ] {
        let reply = olga.post(&answer_path(id), &fields);
        assert!(reply.status >= 300, "{fields:?}: {}", reply.describe());
        assert_pending_state(&bench, id, &format!("{fields:?}"));
    }
}

/// Attack: approve as olga with ravi's CSRF token, and with olga's token of a session she logged out
/// of.
/// Guarantee 20: every change needs the session's own CSRF token.
#[test]
fn a20_18_an_answer_with_another_session_s_csrf_token_is_refused() {
    let Some(bench) = bench("a20_18") else {
        return;
    };
    let id = pending_wire(&bench.gate(), "a-18", "x");
    let ravi = bench.ravi();
    let old = bench.olga();
    let old_csrf = old.csrf();
    let _ = old.post("/logout", &[("csrf", &old_csrf)]);
    let olga = bench.olga();
    for csrf in [ravi.csrf(), old_csrf] {
        let reply = olga.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
        assert!(reply.status >= 300, "{}", reply.describe());
        assert_pending_state(&bench, id, "another session's CSRF token");
    }
}

/// Attack: a well-formed answer (session cookie, CSRF token) sent by another site: `Origin` of
/// another site, `null`, another port of the same host, another host name, a name that starts like the
/// console's, and `Sec-Fetch-Site: cross-site` with or without an `Origin`.
/// Guarantee 20: every change comes from the console's own origin; another's is refused whatever it
/// carries.
#[test]
fn a20_19_an_answer_from_another_origin_is_refused_whatever_it_carries() {
    let Some(bench) = bench("a20_19") else {
        return;
    };
    let id = pending_wire(&bench.gate(), "a-19", "x");
    let olga = bench.olga();
    let csrf = olga.csrf();
    let body = form(&[("csrf", &csrf), ("action", "approve")]);
    let own = olga.origin();
    let port = bench.console.addr.port();
    let other_port = format!("http://127.0.0.1:{}", port.wrapping_add(1).max(1));
    let localhost = format!("http://localhost:{port}");
    let suffixed = format!("{own}.evil.example");
    let userinfo = format!("http://127.0.0.1:{port}@evil.example");
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![("Origin", "http://evil.example")],
        vec![
            ("Origin", "http://evil.example"),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        vec![("Origin", "null")],
        vec![("Origin", &other_port)],
        vec![("Origin", &localhost)],
        vec![("Origin", &suffixed)],
        vec![("Origin", &userinfo)],
        vec![("Origin", &own), ("Sec-Fetch-Site", "cross-site")],
        vec![("Sec-Fetch-Site", "cross-site")],
    ];
    for headers in cases {
        let reply = olga.post_raw(&answer_path(id), &body, &headers);
        assert!(reply.status >= 300, "{headers:?}: {}", reply.describe());
        assert_pending_state(&bench, id, &format!("{headers:?}"));
    }
    // The same answer from the console's own page is taken.
    let reply = olga.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
    assert!(reply.status < 400, "{}", reply.describe());
    assert_eq!(answered_by(&bench.state(id)).as_deref(), Some("olga"));
}

/// Attack: answer through a link (GET with the CSRF token and the action in the query), or post an
/// empty form whose URL carries them.
/// Guarantee 20: every change is a form posted with the session's CSRF token.
#[test]
fn a20_20_an_answer_by_get_or_with_its_token_in_the_query_changes_nothing() {
    let Some(bench) = bench("a20_20") else {
        return;
    };
    let id = pending_wire(&bench.gate(), "a-20", "x");
    let olga = bench.olga();
    let csrf = olga.csrf();
    let query = format!(
        "{}?{}",
        answer_path(id),
        form(&[("csrf", &csrf), ("action", "approve")])
    );
    let page = olga.get(&query);
    assert_pending_state(&bench, id, &format!("GET: {}", page.status));
    let origin = olga.origin();
    let same = [
        ("Origin", origin.as_str()),
        ("Sec-Fetch-Site", "same-origin"),
    ];
    for body in [String::new(), form(&[("action", "approve")])] {
        let reply = olga.post_raw(&query, &body, &same);
        assert!(reply.status >= 300, "{body:?}: {}", reply.describe());
        assert_pending_state(
            &bench,
            id,
            &format!("the token in the query, body {body:?}"),
        );
    }
    // Nor the fleet's form.
    let fleet = format!(
        "/fleet/lower?{}",
        form(&[
            ("csrf", &csrf),
            ("fleet", "f20"),
            ("mode", "SHADOW"),
            ("reason", "r")
        ])
    );
    let reply = olga.get(&fleet);
    assert!(
        !(200..300).contains(&reply.status) || !reply.body.contains("lowered"),
        "{}",
        reply.describe()
    );
}

/// Attack: another site (or a form without the token) logs the operator out.
/// Guarantee 20: every change (the log-out form carries the token too) needs the session's CSRF token
/// and the console's own origin.
#[test]
fn a20_21_a_log_out_without_the_csrf_token_or_from_another_site_ends_no_session() {
    let Some(bench) = bench("a20_21") else {
        return;
    };
    let olga = bench.olga();
    let csrf = olga.csrf();
    let _ = olga.post("/logout", &[]);
    let _ = olga.post("/logout", &[("csrf", "0")]);
    let _ = olga.post_raw(
        "/logout",
        &form(&[("csrf", &csrf)]),
        &[
            ("Origin", "http://evil.example"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
    );
    let page = olga.get("/approvals");
    assert_eq!(
        page.status,
        200,
        "a log-out without the token or from another site ended the session: {}",
        page.describe()
    );
}

// ---------------------------------------------------------------------------------------------------
// Who answers, and what.

/// Whether the console took an answer: it sends the browser back to the request's page without a
/// problem.
fn taken(reply: &Reply) -> bool {
    (300..400).contains(&reply.status)
        && reply
            .header("location")
            .is_some_and(|l| l.starts_with("/approvals") && !l.contains("problem"))
}

/// Attack: a form that names another operator (`by`, `answered_by`, `operator`, ...) or headers a
/// proxy would set, on an approval and a rejection.
/// Guarantee 20: an answer is recorded under the session's operator, never a name the request
/// carries.
#[test]
fn a20_22_an_answer_is_recorded_under_the_session_s_operator_whatever_the_form_names() {
    let Some(bench) = bench("a20_22") else {
        return;
    };
    let gate = bench.gate();
    let approved = pending_wire(&gate, "a-22a", "x");
    let rejected = pending_wire(&gate, "a-22b", "x");
    let olga = bench.olga();
    let csrf = olga.csrf();
    let names = [
        ("by", "mallory"),
        ("answered_by", "mallory"),
        ("operator", "mallory"),
        ("name", "mallory"),
        ("user", "mallory"),
        ("by[]", "mallory"),
        ("answer[by]", "mallory"),
    ];
    let headers = [
        ("Origin", olga.origin()),
        ("Sec-Fetch-Site", "same-origin".to_owned()),
        ("X-Forwarded-User", "mallory".to_owned()),
        ("Remote-User", "mallory".to_owned()),
        ("X-Remote-User", "mallory".to_owned()),
        ("X-Toolgate-Operator", "mallory".to_owned()),
    ];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for (id, mut fields) in [
        (
            approved,
            vec![("csrf", csrf.as_str()), ("action", "approve")],
        ),
        (
            rejected,
            vec![
                ("csrf", csrf.as_str()),
                ("action", "reject"),
                ("reason", "no"),
            ],
        ),
    ] {
        fields.splice(0..0, names.iter().copied());
        fields.extend(names.iter().copied());
        let reply = olga.post_raw(&answer_path(id), &form(&fields), &headers);
        assert!(taken(&reply), "{}", reply.describe());
        assert_eq!(answered_by(&bench.state(id)).as_deref(), Some("olga"));
    }
}

/// Attack: answer ids that are no request of this store: zero, negative, past 64 bits, SQL, and the
/// id of a request pending in another schema of the same database.
/// Guarantee 20: the console answers only the requests of its store; the other schema's request
/// stays pending.
#[test]
fn a20_23_ids_that_are_no_request_of_the_store_answer_nothing() {
    let Some(bench) = bench("a20_23") else {
        return;
    };
    toolgate::postgres::migrate(&bench.url, "other").expect("a second schema");
    let other = Arc::new(
        PostgresStore::builder()
            .schema("other")
            .connect(&bench.url)
            .expect("the other schema's store"),
    );
    let theirs = pending_wire(&gate_of(other.clone(), "desk", None), "a-23-other", "x");
    let ours = pending_wire(&bench.gate(), "a-23", "x");
    let olga = bench.olga();
    let csrf = olga.csrf();
    let missing = (theirs.max(ours) + 1).to_string();
    for id in [
        "0",
        "-1",
        "99999999999999999999999",
        "1%20OR%201%3D1",
        "1;DELETE%20FROM%20toolgate.approvals",
        "%27",
        missing.as_str(),
    ] {
        let _ = olga.post(
            &format!("/approvals/{id}/answer"),
            &[("csrf", &csrf), ("action", "approve")],
        );
    }
    let theirs_now = wait(other.show(theirs)).unwrap().unwrap().state;
    if theirs != ours {
        assert_eq!(
            theirs_now,
            RequestState::Pending,
            "the other schema's request"
        );
        assert_pending_state(&bench, ours, "our request");
    }
    // The other schema's request, by its id, from a console of this schema.
    let reply = approve(&olga, theirs, &[]);
    let theirs_now = wait(other.show(theirs)).unwrap().unwrap().state;
    assert_eq!(
        theirs_now,
        RequestState::Pending,
        "a console of schema `toolgate` answered a request of schema `other` ({})",
        reply.describe()
    );
}

/// Attack: approve an irreversible call without its target, or with a near miss: spaces around it,
/// another case, look-alike letters and hyphens, fullwidth forms, a zero-width space, a line break.
/// Guarantee 20: an irreversible call is approved only with its target typed back (exactly); a near
/// miss leaves it waiting.
#[test]
fn a20_24_an_irreversible_call_is_approved_only_with_its_target_typed_back_exactly() {
    let Some(bench) = bench("a20_24") else {
        return;
    };
    let gate = bench.gate();
    let call = || gate.run(|| terminate("db-24".into(), "x".into()));
    let id = request_id(call());
    let olga = bench.olga();
    let csrf = olga.csrf();
    let near = [
        None,
        Some(""),
        Some("db-24 "),
        Some(" db-24"),
        Some("\tdb-24"),
        Some("db-24\n"),
        Some("db-24\r\n"),
        Some("DB-24"),
        Some("Db-24"),
        Some("db\u{2010}24"),
        Some("db\u{2011}24"),
        Some("db\u{2212}24"),
        Some("d\u{0431}-24"),
        Some("\u{ff44}\u{ff42}-24"),
        Some("db-\u{ff12}\u{ff14}"),
        Some("db-24\u{200b}"),
        Some("db\u{200d}-24"),
        Some("db-24\u{0}"),
        Some("db-2"),
        Some("db-244"),
        Some("db-2%"),
        Some("db-2_"),
    ];
    for confirmation in near {
        let mut fields = vec![("csrf", csrf.as_str()), ("action", "approve")];
        if let Some(c) = confirmation {
            fields.push(("confirmation", c));
        }
        let reply = olga.post(&answer_path(id), &fields);
        assert!(!taken(&reply), "{confirmation:?}: {}", reply.describe());
        assert_pending_state(&bench, id, &format!("confirmation {confirmation:?}"));
    }
    assert_eq!(runs("terminate:db-24:x"), 0);
    assert!(call().is_err());
    let reply = approve(&olga, id, &[("confirmation", "db-24")]);
    assert!(taken(&reply), "{}", reply.describe());
    assert!(call().is_ok());
    assert_eq!(runs("terminate:db-24:x"), 1);
}

/// Attack: approve an irreversible call "for the session" (the button the page leaves out, posted by
/// hand), with its target typed back, then make the call twice.
/// Guarantee 20 (docs/console.md): an irreversible call is never approved for the session.
#[test]
fn a20_25_an_irreversible_call_is_never_approved_for_the_session() {
    let Some(bench) = bench("a20_25") else {
        return;
    };
    let gate = bench.gate();
    let call = || gate.run(|| terminate("db-25".into(), "x".into()));
    let id = request_id(call());
    let olga = bench.olga();
    let csrf = olga.csrf();
    let reply = olga.post(
        &answer_path(id),
        &[
            ("csrf", csrf.as_str()),
            ("action", "approve-session"),
            ("confirmation", "db-25"),
        ],
    );
    let state = bench.state(id);
    if let RequestState::Answered(Answer::Approve { for_session, .. }) = &state {
        assert!(
            !for_session,
            "an irreversible call approved for the session ({})",
            reply.describe()
        );
    }
    if taken(&reply) {
        let _ = call();
    }
    let _ = call();
    assert!(
        runs("terminate:db-25:x") <= 1,
        "an irreversible call ran twice on one answer"
    );
}

/// Attack: approve a request that expired (the store's requests live a second here).
/// Guarantee 20: an answer is recorded only for what it can answer; an expired request answers no
/// call and is left as it was.
#[test]
fn a20_26_an_expired_request_is_not_answered_and_runs_nothing() {
    let Some(bench) = bench("a20_26") else {
        return;
    };
    let short = Arc::new(
        PostgresStore::builder()
            .ttl(Duration::from_secs(1))
            .connect(&bench.url)
            .unwrap(),
    );
    let gate = gate_of(short.clone(), "desk", None);
    let id = pending_wire(&gate, "a-26", "x");
    assert!(eventually(|| wait(short.show(id))
        .unwrap()
        .unwrap()
        .expired));
    let olga = bench.olga();
    let reply = approve(&olga, id, &[]);
    assert!(!taken(&reply), "{}", reply.describe());
    assert!(matches!(bench.state(id), RequestState::Pending));
    assert!(
        gate.run(|| wire("a-26".into(), "x".into(), "0000".into()))
            .is_err()
    );
    assert_eq!(runs("wire:a-26:x:0000"), 0);
}

/// Attack: answer a request again after it was answered: ravi rejects what olga approved, olga
/// approves what ravi rejected, and one approves twice.
/// Guarantee 20: one answer per request; the first stands.
#[test]
fn a20_27_an_answered_request_is_not_answered_again() {
    let Some(bench) = bench("a20_27") else {
        return;
    };
    let gate = bench.gate();
    let first = pending_wire(&gate, "a-27a", "x");
    let second = pending_wire(&gate, "a-27b", "x");
    let olga = bench.olga();
    let ravi = bench.ravi();
    assert!(taken(&approve(&olga, first, &[])));
    let reply = ravi.post(
        &answer_path(first),
        &[
            ("csrf", &ravi.csrf()),
            ("action", "reject"),
            ("reason", "no"),
        ],
    );
    assert!(!taken(&reply), "{}", reply.describe());
    assert!(!taken(&approve(
        &olga,
        first,
        &[("action", "approve-session")]
    )));
    assert_eq!(
        bench.state(first),
        RequestState::Answered(Answer::Approve {
            by: "olga".into(),
            for_session: false,
            confirmation: None
        })
    );
    let reply = ravi.post(
        &answer_path(second),
        &[
            ("csrf", &ravi.csrf()),
            ("action", "reject"),
            ("reason", "no"),
        ],
    );
    assert!(taken(&reply), "{}", reply.describe());
    assert!(!taken(&approve(&olga, second, &[])));
    assert_eq!(answered_by(&bench.state(second)).as_deref(), Some("ravi"));
    assert!(
        gate.run(|| wire("a-27b".into(), "x".into(), "0000".into()))
            .is_err()
    );
    assert!(
        gate.run(|| wire("a-27a".into(), "x".into(), "0000".into()))
            .is_ok()
    );
    assert!(
        gate.run(|| wire("a-27a".into(), "x".into(), "0000".into()))
            .is_err()
    );
    assert_eq!(runs("wire:a-27a:x:0000"), 1);
}

/// Attack: olga approves and ravi rejects the same request at the same moment, many times over.
/// Guarantee 20: of two operators racing, one answer is recorded, under its operator, and the other
/// is told the request was answered.
#[test]
fn a20_28_two_operators_racing_on_one_request_record_one_answer() {
    let Some(bench) = bench("a20_28") else {
        return;
    };
    let gate = bench.gate();
    let olga = bench.olga();
    let ravi = bench.ravi();
    let (olga_csrf, ravi_csrf) = (olga.csrf(), ravi.csrf());
    for round in 0..20 {
        let account = format!("a-28-{round}");
        let id = pending_wire(&gate, &account, "x");
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let answer = |browser: Browser, fields: Vec<(&'static str, String)>| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let fields: Vec<(&str, &str)> =
                    fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
                barrier.wait();
                browser.post(&answer_path(id), &fields)
            })
        };
        let a = answer(
            olga.clone(),
            vec![("csrf", olga_csrf.clone()), ("action", "approve".into())],
        );
        let r = answer(
            ravi.clone(),
            vec![
                ("csrf", ravi_csrf.clone()),
                ("action", "reject".into()),
                ("reason", "mine".into()),
            ],
        );
        let (a, r) = (a.join().unwrap(), r.join().unwrap());
        let by = answered_by(&bench.state(id)).expect("answered");
        assert_eq!(
            usize::from(taken(&a)) + usize::from(taken(&r)),
            1,
            "round {round}: {}\n{}",
            a.describe(),
            r.describe()
        );
        let winner = if taken(&a) { "olga" } else { "ravi" };
        assert_eq!(by, winner, "round {round}");
        let _ = gate.run(|| wire(account.clone(), "x".into(), "0000".into()));
        let _ = gate.run(|| wire(account.clone(), "x".into(), "0000".into()));
        let expected = usize::from(winner == "olga");
        assert_eq!(runs(&format!("wire:{account}:x:0000")), expected);
    }
}

/// Attack: make a refused answer tell the operator something of the attacker's: markup in the
/// action, the confirmation, the reason, and in the `problem` of the request's page.
/// Guarantee 20 (docs/console.md): a refused answer comes back as one of the console's sentences,
/// never as text from the request.
#[test]
fn a20_29_a_refused_answer_is_told_in_the_console_s_own_words() {
    let Some(bench) = bench("a20_29") else {
        return;
    };
    let gate = bench.gate();
    let id = request_id(gate.run(|| terminate("db-29".into(), "x".into())));
    let olga = bench.olga();
    let csrf = olga.csrf();
    let mark = "<b>g20mark</b>";
    for fields in [
        vec![("action", mark)],
        vec![("action", "approve"), ("confirmation", mark)],
        vec![("action", "approve-session"), ("confirmation", mark)],
        vec![("action", "reject"), ("reason", "")],
    ] {
        let mut fields = fields;
        fields.insert(0, ("csrf", &csrf));
        let reply = olga.post(&answer_path(id), &fields);
        assert!(!reply.body.contains("g20mark"), "{}", reply.describe());
        if let Some(location) = reply.header("location") {
            let page = olga.get(location);
            assert!(
                !page.body.contains("g20mark"),
                "{location}: {}",
                page.describe()
            );
        }
    }
    for problem in [
        "%3Cscript%3Eg20mark()%3C%2Fscript%3E",
        "g20mark",
        "answered%22%3E%3Cb%3Eg20mark",
    ] {
        let page = olga.get(&format!("/approvals/{id}?problem={problem}"));
        assert!(
            !page.body.contains("g20mark"),
            "problem={problem}: {}",
            page.describe()
        );
    }
    assert_pending_state(&bench, id, "refused answers");
}

// ---------------------------------------------------------------------------------------------------
// What agents write, shown to a human.

/// Texts that would act on a page if it were not escaped: each carries `g20mark`.
const PAYLOADS: &[&str] = &[
    "<script>g20mark()</script>",
    "<img src=x onerror=g20mark()>",
    "\"><svg onload=g20mark()>",
    "'><svg onload=g20mark()>",
    "\" autofocus onfocus=g20mark() x=\"",
    "' autofocus onfocus=g20mark() x='",
    "javascript:g20mark()",
    "</pre></dd><style>*{background:url(//evil.example/g20mark)}</style>",
    "</textarea><script>g20mark()</script>",
    "</title><script>g20mark()</script>",
    "<a href=\"javascript:g20mark()\">open</a>",
    "<meta http-equiv=\"refresh\" content=\"0;url=http://evil.example/g20mark\">",
    "<base href=\"http://evil.example/g20mark/\">",
    "<form action=\"http://evil.example/g20mark\"><button>approve</button></form>",
    "<iframe srcdoc=\"<script>g20mark()</script>\"></iframe>",
    "<g20mark onclick=x>",
    "<!--g20mark--><p",
    "<![CDATA[<g20mark>]]>",
    "&lt;script&gt;g20mark()&lt;/script&gt;",
];

/// The text on the page of the entity payload, which must read as it was written.
const ENTITIES: &str = "&lt;script&gt;g20mark()&lt;/script&gt;";

/// Asserts that `page` is a page (not an error), inert, and shows the entity payload as written
/// when `entities` says it holds it.
#[track_caller]
fn assert_clean(what: &str, page: &Reply, entities: bool) {
    assert!(page.status < 500, "{what}: {}", page.describe());
    assert_inert(what, page, "g20mark");
    if entities {
        assert!(
            visible_text(&page.body).contains(ENTITIES),
            "{what}: the entities an agent wrote are not shown as written\n{}",
            page.describe()
        );
    }
}

/// The inner HTML of the element whose `id` is `id`, up to the close of its tag `tag`.
fn section<'a>(html: &'a str, tag: &str, id: &str) -> Option<&'a str> {
    let at = html.find(&format!("id=\"{id}\""))?;
    let start = at + html[at..].find('>')? + 1;
    let end = start + html[start..].find(&format!("</{tag}>"))?;
    Some(&html[start..end])
}

/// Asserts that each of `chars` shows in `html` (a part of a page) as a visible marker naming its
/// code point (`U+202E`, `\u{202e}` as the terminal writes it, or a control as JSON escapes it),
/// never raw.
#[track_caller]
fn assert_part_marked(what: &str, html: &str, chars: &[char]) {
    let text = visible_text(html);
    let shown = shown_text(html);
    for &c in chars {
        assert!(
            !shown.contains(c),
            "{what}: {c:?} reaches the page raw\n{html}"
        );
        let marker = marker_of(c);
        let terminal = format!("\\u{{{:04x}}}", u32::from(c));
        let debug = format!("\\u{{{:x}}}", u32::from(c));
        // Inside JSON, a control is written as JSON writes it: visible too.
        let json = serde_json::to_string(&c.to_string()).unwrap();
        let json = json.trim_matches('"');
        assert!(
            text.contains(&marker)
                || text.contains(&terminal)
                || text.contains(&debug)
                || (json.starts_with('\\') && text.contains(json)),
            "{what}: no visible {marker} for {c:?}\n{html}"
        );
    }
}

/// Attack: an agent's arguments carrying markup, attribute breakouts, `javascript:` URLs, style
/// sheets, entities.
/// Guarantee 20: every text from the store is escaped for HTML; the list, its live table and the
/// request's page run nothing of it.
#[test]
fn a20_30_markup_in_arguments_is_inert_on_every_approvals_page() {
    let Some(bench) = bench("a20_30") else {
        return;
    };
    let gate = bench.gate();
    // The session is tainted: the pages say by what.
    gate.run(|| read_ticket(30)).expect("a read");
    let ids: Vec<i64> = PAYLOADS
        .iter()
        .enumerate()
        .map(|(n, p)| pending_wire(&gate, &format!("{p}{n}"), p))
        .collect();
    let olga = bench.olga();
    assert_clean("the list", &olga.get("/approvals"), true);
    assert_clean("the live table", &olga.get("/approvals/table"), true);
    for (id, payload) in ids.iter().zip(PAYLOADS) {
        let page = olga.get(&format!("/approvals/{id}"));
        assert_clean(
            &format!("the request of {payload:?}"),
            &page,
            *payload == ENTITIES,
        );
    }
}

/// Attack: a gate whose principal and agent label are markup (the application took them from a
/// request).
/// Guarantee 20: every text from the store is escaped for HTML.
#[test]
fn a20_31_markup_in_the_principal_and_agent_label_is_inert() {
    let Some(bench) = bench("a20_31") else {
        return;
    };
    let olga = bench.olga();
    for (n, payload) in PAYLOADS.iter().enumerate() {
        let Ok(gate) = Gate::builder()
            .mode(Mode::FullAuto)
            .agent(*payload)
            .principal(*payload)
            .approval_store_shared(bench.store.clone())
            .build()
        else {
            continue;
        };
        let id = pending_wire(&gate, &format!("a-31-{n}"), "x");
        let entities = *payload == ENTITIES;
        assert_clean("the list", &olga.get("/approvals"), false);
        assert_clean(
            &format!("the request of {payload:?}"),
            &olga.get(&format!("/approvals/{id}")),
            entities,
        );
    }
    assert_clean("the list", &olga.get("/approvals"), true);
    assert_clean("the live table", &olga.get("/approvals/table"), true);
}

/// Attack: characters that hide or reorder text (right-to-left override, zero-width and other
/// invisible characters, line and paragraph separators, controls) in the arguments, the principal
/// and the agent label.
/// Guarantee 20: every character that could hide or reorder a text is shown as a visible marker
/// naming its code point, never raw.
#[test]
fn a20_32_hidden_characters_are_drawn_as_markers_on_every_approvals_page() {
    let Some(bench) = bench("a20_32") else {
        return;
    };
    // PostgreSQL holds no NUL in a text: the principal and label carry the others.
    let hiding: Vec<char> = HIDING.iter().copied().filter(|c| *c != '\0').collect();
    let text: String = hiding.iter().map(|c| format!("x{c}")).collect();
    let gate = gate_of(bench.store.clone(), &text, Some(&text));
    let id = pending_wire(&gate, "a-32", &hiding_text());
    let olga = bench.olga();
    for path in [
        "/approvals".to_owned(),
        "/approvals/table".to_owned(),
        format!("/approvals/{id}"),
    ] {
        let page = olga.get(&path);
        assert_eq!(page.status, 200, "{path}");
        assert_part_marked(&path, &page.body, &hiding);
    }
    let page = olga.get(&format!("/approvals/{id}"));
    for part in ["principal", "agent"] {
        let html = section(&page.body, "dd", part).unwrap_or_else(|| panic!("no {part}"));
        assert_part_marked(part, html, &hiding);
    }
    let html = section(&page.body, "pre", "arguments").expect("the arguments");
    assert_part_marked("the arguments", html, &hiding);
}

/// Attack: an irreversible call whose target's state (as the probe read it) and rollback plan (the
/// tool's function of the arguments) carry markup and hiding characters, and whose target is markup.
/// Guarantee 20: the target, the state and the plan are escaped, hiding characters shown as markers.
#[test]
fn a20_33_the_target_state_and_plan_of_an_irreversible_call_are_inert_and_marked() {
    let Some(bench) = bench("a20_33") else {
        return;
    };
    let gate = bench.gate();
    let olga = bench.olga();
    let hiding: Vec<char> = HIDING.iter().copied().filter(|c| *c != '\0').collect();
    let hidden: String = hiding.iter().map(|c| format!("x{c}")).collect();
    for (n, payload) in PAYLOADS.iter().enumerate() {
        let instance = format!("db-33-{n}");
        set_state(&instance, &format!("{payload}{hidden}"));
        let id = request_id(gate.run(|| terminate(instance.clone(), format!("{payload}{hidden}"))));
        let page = olga.get(&format!("/approvals/{id}"));
        assert_clean(
            &format!("the state and plan of {payload:?}"),
            &page,
            *payload == ENTITIES,
        );
        let evidence = section(&page.body, "pre", "evidence").expect("the state");
        assert_part_marked("the target's state", evidence, &hiding);
        let plan = section(&page.body, "dd", "rollback").expect("the plan");
        assert_part_marked("the rollback plan", plan, &hiding);
    }
    // Targets that are markup, where the gate lets them be one target.
    for (n, target) in [
        "<svg/onload=g20mark()>",
        "\"><g20mark>",
        "db'onfocus='g20mark()",
        "javascript:g20mark()",
    ]
    .iter()
    .enumerate()
    {
        let Err(denied) = gate.run(|| terminate((*target).to_owned(), format!("t{n}"))) else {
            panic!("ran");
        };
        let Some(id) = denied.approval_request_id() else {
            continue;
        };
        let page = olga.get(&format!("/approvals/{id}"));
        assert_clean(&format!("the target {target:?}"), &page, false);
    }
}

/// Attack: ravi rejects with a reason that marks up and hides; olga opens the request.
/// Guarantee 20: a reason (written by another operator, read back from the store) is escaped, its
/// hiding characters shown as markers.
#[test]
fn a20_34_a_rejection_reason_of_another_operator_is_inert_and_marked() {
    let Some(bench) = bench("a20_34") else {
        return;
    };
    let gate = bench.gate();
    let hiding: Vec<char> = HIDING.iter().copied().filter(|c| *c != '\0').collect();
    let hidden: String = hiding.iter().map(|c| format!("x{c}")).collect();
    let ravi = bench.ravi();
    let olga = bench.olga();
    for (n, payload) in PAYLOADS.iter().enumerate() {
        let id = pending_wire(&gate, &format!("a-34-{n}"), "x");
        let reason = format!("{payload}{hidden}");
        let reply = ravi.post(
            &answer_path(id),
            &[
                ("csrf", &ravi.csrf()),
                ("action", "reject"),
                ("reason", &reason),
            ],
        );
        assert!(taken(&reply), "{}", reply.describe());
        let page = olga.get(&format!("/approvals/{id}"));
        assert_clean(
            &format!("the reason {payload:?}"),
            &page,
            *payload == ENTITIES && page.body.contains("g20mark"),
        );
        if page.body.contains("g20mark") {
            let main = section(&page.body, "main", "").unwrap_or(&page.body);
            assert_part_marked("the reason", main, &hiding);
        }
    }
}

/// Attack: arguments of a megabyte, and JSON nested thousands deep.
/// Guarantee 20: the pages show what the store holds, escaped; the console stays up to show it.
#[test]
fn a20_35_huge_and_deeply_nested_arguments_render_inert() {
    let Some(mut bench) = bench("a20_35") else {
        return;
    };
    let gate = bench.gate();
    let huge = format!("{}<script>g20mark()</script>", "A".repeat(1 << 20));
    let long = pending_wire(&gate, "a-35", &huge);
    // Built, called and dropped on a thread whose stack holds the nesting.
    let deep = {
        let gate = gate.clone();
        std::thread::Builder::new()
            .stack_size(1 << 29)
            .spawn(move || {
                let mut nested = json!("<img src=x onerror=g20mark()>");
                for _ in 0..3000 {
                    nested = json!([nested]);
                }
                request_id(gate.run(|| post(nested.clone())))
            })
            .unwrap()
            .join()
            .expect("the nested call")
    };
    let mut wide = json!({});
    for n in 0..2000 {
        wide[format!("k{n}<b>")] = json!({"v": "\u{202e}"});
    }
    let wide = request_id(gate.run(|| post(wide.clone())));
    let olga = bench.olga();
    for path in [
        "/approvals".to_owned(),
        "/approvals/table".to_owned(),
        format!("/approvals/{long}"),
        format!("/approvals/{deep}"),
        format!("/approvals/{wide}"),
    ] {
        let page = olga.get(&path);
        assert_clean(&path, &page, false);
    }
    assert!(bench.console.running(), "the console stopped");
    assert_eq!(olga.get("/approvals").status, 200);
}

// ---------------------------------------------------------------------------------------------------
// The trail.

/// A gate of `agent` for `principal` writing the trail as `writer`; `None` when the sink refuses the
/// name.
fn trail_gate(url: &str, writer: &str, agent: &str, principal: &str) -> Option<Gate> {
    let sink = PostgresSink::builder().writer(writer).connect(url).ok()?;
    Gate::builder()
        .mode(Mode::FullAuto)
        .agent(agent)
        .principal(principal)
        .audit(sink)
        .build()
        .ok()
}

/// The links of a trail page to its records' calls.
fn call_links(html: &str) -> Vec<String> {
    elements(html)
        .into_iter()
        .filter(|e| e.name == "a" && e.attr("class") == Some("call"))
        .filter_map(|e| e.attr("href").map(unescape))
        .collect()
}

/// How many records a trail page lists.
fn records_listed(html: &str) -> usize {
    elements(html)
        .iter()
        .filter(|e| e.name == "tr" && e.attr("class") == Some("record"))
        .count()
}

/// Attack: writers of the trail named with markup, gates whose principal and agent are markup, and
/// recorded arguments that mark up and hide.
/// Guarantee 20: every text of the trail (writer names, records, lines) is escaped for HTML, and
/// every hiding character shown as a marker, on the search, a call's page and the verification.
#[test]
fn a20_36_the_trail_s_writers_records_and_lines_are_inert_and_marked() {
    let Some(bench) = bench("a20_36") else {
        return;
    };
    let hiding: Vec<char> = HIDING.iter().copied().filter(|c| *c != '\0').collect();
    let hidden: String = hiding.iter().map(|c| format!("x{c}")).collect();
    let mut gates = Vec::new();
    for (n, payload) in PAYLOADS.iter().enumerate() {
        let writer = format!("{payload}{n}");
        let gate = trail_gate(&bench.url, &writer, payload, payload)
            .or_else(|| trail_gate(&bench.url, &format!("w36-{n}"), payload, payload))
            .expect("a gate writing the trail");
        gate.run(|| note(format!("{payload}{hidden}")))
            .expect("a note");
        gates.push(gate);
    }
    let gate = trail_gate(&bench.url, &format!("w36{hidden}"), &hidden, &hidden)
        .or_else(|| trail_gate(&bench.url, "w36-hidden", &hidden, &hidden))
        .expect("a gate writing the trail");
    gate.run(|| note(hidden.clone())).expect("a note");
    gates.push(gate);
    drop(gates);
    let olga = bench.olga();
    let page = olga.get("/trail");
    assert_clean("the trail", &page, true);
    assert_part_marked("the trail", &page.body, &hiding);
    let links = call_links(&page.body);
    assert!(!links.is_empty(), "{}", page.describe());
    for link in &links {
        let page = olga.get(link);
        assert_clean(link, &page, false);
    }
    let page = olga.get("/trail/verify");
    assert_clean("the verification", &page, false);
    // Each record's call page, read by every link: markers for what hides.
    let marked = links
        .iter()
        .map(|link| olga.get(link))
        .find(|page| page.body.contains("U+202E"))
        .expect("a call page with the hidden text");
    assert_part_marked("a call page", &marked.body, &hiding);
    // The search itself, with every payload in every field.
    for payload in PAYLOADS {
        let query = form(&[
            ("tool", payload),
            ("principal", payload),
            ("agent", payload),
            ("code", payload),
            ("since", payload),
            ("until", payload),
        ]);
        assert_clean(
            &format!("a search for {payload:?}"),
            &olga.get(&format!("/trail?{query}")),
            false,
        );
    }
}

/// Attack: writer names that would bend a record's link to another writer's call (`&`, `#`, `?`,
/// `+`, `%26`, a space).
/// Guarantee 20 (docs/console.md): a record opens its call; the writer's name, escaped, cannot send
/// the operator to another writer's record.
#[test]
fn a20_37_a_writer_name_cannot_send_a_record_s_link_to_another_writer() {
    let Some(bench) = bench("a20_37") else {
        return;
    };
    let names = [
        "w37 a",
        "w37+a",
        "w37&seq=1",
        "w37#x",
        "w37?seq=1",
        "w37%26seq%3D1",
        "w37%2Ba",
    ];
    for name in names {
        let gate = trail_gate(&bench.url, name, "desk", name).expect("a writer");
        gate.run(|| note(format!("by {name}"))).expect("a note");
    }
    let olga = bench.olga();
    let page = olga.get(&format!("/trail?{}", form(&[("tool", "c20.note")])));
    let links = call_links(&page.body);
    assert_eq!(links.len(), names.len() * 2, "{}", page.describe());
    for name in names {
        let page = olga.get(&format!("/trail?{}", form(&[("principal", name)])));
        let links = call_links(&page.body);
        assert_eq!(links.len(), 2, "{name}: {}", page.describe());
        for link in links {
            let call = olga.get(&link);
            let shown = visible_text(&call.body);
            assert!(
                shown.contains(&format!("by {name}")),
                "the record of writer {name:?} opens another call ({link}): {}",
                call.describe()
            );
        }
    }
}

/// Attack: SQL through every field of the trail's search, and the paging cursor's.
/// Guarantee 20: the search finds only what it names; the trail is read, never changed.
#[test]
fn a20_38_sql_through_the_trail_s_search_finds_nothing_and_changes_nothing() {
    let Some(bench) = bench("a20_38") else {
        return;
    };
    for who in ["alice", "bob"] {
        let gate = trail_gate(&bench.url, &format!("w38-{who}"), "desk", who).expect("a writer");
        gate.run(|| note(format!("{who}'s note"))).expect("a note");
    }
    let count = || query(&bench.url, "SELECT count(*) FROM toolgate.audit")[0][0].clone();
    let before = count();
    let olga = bench.olga();
    let injections = [
        "alice' OR '1'='1",
        "alice' OR 1=1 --",
        "alice'; DROP TABLE toolgate.audit; --",
        "alice\\' OR 1=1 --",
        "alice\" OR \"1\"=\"1",
        "x' UNION SELECT * FROM toolgate.approvals --",
        "$$ OR true --",
        "alice'||'",
    ];
    for field in ["tool", "principal", "agent", "code"] {
        for injection in injections {
            let page = olga.get(&format!("/trail?{}", form(&[(field, injection)])));
            assert!(
                page.status < 500,
                "{field}={injection}: {}",
                page.describe()
            );
            assert_eq!(
                records_listed(&page.body),
                0,
                "{field}={injection:?} found records: {}",
                page.describe()
            );
        }
    }
    for field in [
        "decision",
        "outcome",
        "since",
        "until",
        "before_at",
        "before_writer",
        "before_seq",
    ] {
        for injection in injections {
            let page = olga.get(&format!(
                "/trail?{}",
                form(&[("principal", "alice"), (field, injection)])
            ));
            assert!(
                page.status < 500,
                "{field}={injection}: {}",
                page.describe()
            );
            assert!(
                !page.body.contains("bob&#39;s note") && !page.body.contains("w38-bob"),
                "{field}={injection:?} found bob's records: {}",
                page.describe()
            );
        }
    }
    assert_eq!(count(), before, "the search changed the trail");
    let report = toolgate::postgres::verify_trail(&bench.url, "toolgate").expect("the trail");
    assert!(report.is_intact());
}

/// Attack: a `since` that is not a time, a forged paging cursor, huge and negative limits and pages,
/// each carrying markup.
/// Guarantee 20: the pages stay the console's: no error of the server, nothing of the request acting
/// on the page, and a problem told in the console's own words.
#[test]
fn a20_39_a_search_that_is_not_a_time_or_a_forged_cursor_is_told_in_the_console_s_words() {
    let Some(bench) = bench("a20_39") else {
        return;
    };
    let gate = trail_gate(&bench.url, "w39", "desk", "alice").expect("a writer");
    gate.run(|| note("n".into())).expect("a note");
    let _ = pending_wire(&bench.gate(), "a-39", "x");
    let olga = bench.olga();
    let mark = "<b>g20mark</b>";
    let huge = "9".repeat(40);
    let mut asks: Vec<String> = Vec::new();
    for (field, value) in [
        ("since", mark),
        ("since", "yesterday"),
        ("until", mark),
        ("since", "2026-13-45T99:99Z"),
        ("before_at", mark),
        ("before_seq", "abc"),
        ("before_seq", "-1"),
        ("before_seq", huge.as_str()),
        ("before_writer", mark),
        ("limit", "100000000"),
        ("limit", "-1"),
        ("decision", mark),
        ("outcome", mark),
    ] {
        asks.push(format!("/trail?{}", form(&[(field, value)])));
    }
    for value in [mark, "-1", "abc", huge.as_str()] {
        for field in ["after", "limit"] {
            asks.push(format!("/approvals?{}", form(&[(field, value)])));
            asks.push(format!("/approvals/table?{}", form(&[(field, value)])));
        }
    }
    for value in [mark, "0", "-1", huge.as_str()] {
        for field in ["days", "bucket", "agent"] {
            asks.push(format!("/promotion?{}", form(&[(field, value)])));
        }
    }
    asks.push(format!(
        "/trail/call?{}",
        form(&[("writer", mark), ("seq", "1")])
    ));
    asks.push(format!(
        "/trail/call?{}",
        form(&[("writer", "w39"), ("seq", &huge)])
    ));
    for ask in asks {
        let page = olga.get(&ask);
        assert!(page.status < 500, "{ask}: {}", page.describe());
        assert_inert(&ask, &page, "g20mark");
        for element in ["p", "div"] {
            if let Some(problem) = section(&page.body, element, "error") {
                assert!(
                    !problem.contains("g20mark"),
                    "{ask}: the problem repeats the request: {problem}"
                );
            }
        }
    }
    assert_eq!(olga.get("/approvals").status, 200);
}

// ---------------------------------------------------------------------------------------------------
// Fleets.

/// The mode of fleet `name` as the store has it.
fn fleet_mode(url: &str, name: &str) -> Mode {
    fleet::status(url, "toolgate", name)
        .expect("the fleet")
        .mode
}

/// A fleet `name` with one joined gate (`agent`), at FULL_AUTO.
fn joined(url: &str, name: &str, agent: &str) -> (Fleet, Gate) {
    let fleet = Fleet::connect(url, name).expect("the fleet");
    let gate = fleet
        .join(Gate::builder().mode(Mode::FullAuto).agent(agent))
        .expect("joined");
    (fleet, gate)
}

/// Lowers fleet `name` from the fleet page, as olga's browser would; extra fields after.
fn lower_on_page(browser: &Browser, name: &str, mode: &str, extra: &[(&str, &str)]) -> Reply {
    let csrf = browser.csrf();
    let mut fields = vec![
        ("csrf", csrf.as_str()),
        ("fleet", name),
        ("mode", mode),
        ("reason", "incident 20"),
    ];
    fields.extend_from_slice(extra);
    browser.post("/fleet/lower", &fields)
}

/// Attack: fleets, members and a lowering (by and why) named with markup and hiding characters.
/// Guarantee 20: every text of a fleet is escaped for HTML, every hiding character shown as a marker.
#[test]
fn a20_40_fleets_members_and_lowerings_are_inert_and_marked() {
    let Some(bench) = bench("a20_40") else {
        return;
    };
    let hiding: Vec<char> = HIDING.iter().copied().filter(|c| *c != '\0').collect();
    let hidden: String = hiding.iter().map(|c| format!("x{c}")).collect();
    let mut held = Vec::new();
    for (n, payload) in PAYLOADS.iter().enumerate() {
        let name = format!("{payload}{n}");
        let Ok(fleet) = Fleet::connect(&bench.url, &name) else {
            continue;
        };
        let gate = fleet
            .join(Gate::builder().mode(Mode::FullAuto).agent(*payload))
            .expect("joined");
        let by = format!("{payload}{hidden}");
        let _ = fleet::lower(&bench.url, "toolgate", &name, Mode::PartialAuto, &by, &by);
        held.push((fleet, gate));
    }
    if let Ok(fleet) = Fleet::connect(&bench.url, &format!("f40{hidden}")) {
        let gate = fleet
            .join(Gate::builder().mode(Mode::FullAuto).agent(&hidden))
            .expect("joined");
        held.push((fleet, gate));
    }
    assert!(!held.is_empty(), "no fleet could be made");
    let page = bench.olga().get("/fleet");
    assert_clean("the fleets", &page, true);
    assert_part_marked("the fleets", &page.body, &hiding);
}

/// Attack: raise a fleet from the page: a mode above the fleet's posted by hand, in other spellings,
/// twice in one form, and a `raise` route.
/// Guarantee 20: the console lowers fleets and never raises one.
#[test]
fn a20_41_the_fleet_form_lowers_and_never_raises() {
    let Some(bench) = bench("a20_41") else {
        return;
    };
    let (_fleet, _gate) = joined(&bench.url, "f41", "desk");
    fleet::lower(
        &bench.url,
        "toolgate",
        "f41",
        Mode::Advisory,
        "ana",
        "drill",
    )
    .unwrap();
    let olga = bench.olga();
    for (mode, extra) in [
        ("FULL_AUTO", vec![]),
        ("PARTIAL_AUTO", vec![]),
        ("full_auto", vec![]),
        ("FullAuto", vec![]),
        (" FULL_AUTO", vec![]),
        ("FULL_AUTO", vec![("direction", "raise")]),
        ("FULL_AUTO", vec![("raise", "1")]),
        ("ADVISORY", vec![("mode", "FULL_AUTO")]),
        ("3", vec![]),
        ("4", vec![]),
    ] {
        let _ = lower_on_page(&olga, "f41", mode, &extra);
        let now = fleet_mode(&bench.url, "f41");
        assert!(
            now <= Mode::Advisory,
            "the page raised the fleet to {now:?} ({mode} {extra:?})"
        );
    }
    let csrf = olga.csrf();
    for path in [
        "/fleet/raise",
        "/fleet/f41/raise",
        "/fleet/lower?direction=raise",
    ] {
        let _ = olga.post(
            path,
            &[
                ("csrf", &csrf),
                ("fleet", "f41"),
                ("mode", "FULL_AUTO"),
                ("reason", "r"),
            ],
        );
        assert!(fleet_mode(&bench.url, "f41") <= Mode::Advisory, "{path}");
    }
}

/// Attack: lower a fleet by a name that is not quite one (another case, a space, a wildcard, SQL, an
/// empty name), naming another operator as who lowered, from another origin, without the token.
/// Guarantee 20: only the named fleet is lowered, under the session's operator; every change needs
/// the CSRF token and the console's origin; nothing is created.
#[test]
fn a20_42_a_lowering_touches_only_the_named_fleet_under_the_session_s_operator() {
    let Some(bench) = bench("a20_42") else {
        return;
    };
    let (_a, _ga) = joined(&bench.url, "pay", "desk");
    let (_b, _gb) = joined(&bench.url, "payroll", "desk");
    let fleets = || query(&bench.url, "SELECT count(*) FROM toolgate.fleets")[0][0].clone();
    let before = fleets();
    let olga = bench.olga();
    for name in [
        "Pay",
        "pay ",
        " pay",
        "pay%",
        "pa_",
        "%",
        "*",
        "",
        "pay' OR '1'='1",
        "pay\u{200b}",
        "payroll' --",
    ] {
        let _ = lower_on_page(&olga, name, "SHADOW", &[]);
        assert_eq!(fleet_mode(&bench.url, "pay"), Mode::FullAuto, "{name:?}");
        assert_eq!(
            fleet_mode(&bench.url, "payroll"),
            Mode::FullAuto,
            "{name:?}"
        );
        assert_eq!(fleets(), before, "{name:?} created a fleet");
    }
    let csrf = olga.csrf();
    let body = form(&[
        ("csrf", &csrf),
        ("fleet", "pay"),
        ("mode", "SHADOW"),
        ("reason", "r"),
    ]);
    let _ = olga.post_raw(
        "/fleet/lower",
        &body,
        &[
            ("Origin", "http://evil.example"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
    );
    let _ = olga.post(
        "/fleet/lower",
        &[("fleet", "pay"), ("mode", "SHADOW"), ("reason", "r")],
    );
    let _ = Browser::new(bench.console.addr).post(
        "/fleet/lower",
        &[
            ("csrf", &csrf),
            ("fleet", "pay"),
            ("mode", "SHADOW"),
            ("reason", "r"),
        ],
    );
    assert_eq!(fleet_mode(&bench.url, "pay"), Mode::FullAuto);
    let reply = lower_on_page(
        &olga,
        "pay",
        "ADVISORY",
        &[
            ("by", "mallory"),
            ("changed_by", "mallory"),
            ("operator", "mallory"),
        ],
    );
    assert!(reply.status < 400, "{}", reply.describe());
    let status = fleet::status(&bench.url, "toolgate", "pay").unwrap();
    assert_eq!(status.mode, Mode::Advisory);
    assert_eq!(status.changed_by, "olga");
    assert_eq!(fleet_mode(&bench.url, "payroll"), Mode::FullAuto);
}

// ---------------------------------------------------------------------------------------------------
// Redaction.

/// Attack: find a redacted PIN anywhere the console shows: the pending list and its live table, the
/// request's page before and after its answer, the trail's search, every call's page, the
/// verification, the promotion, the live stream.
/// Guarantee 20: arguments are shown as the audit log writes them, redacted values replaced.
#[test]
fn a20_43_a_redacted_argument_reaches_no_page() {
    let Some(bench) = bench("a20_43") else {
        return;
    };
    let sink = PostgresSink::builder()
        .writer("w43")
        .connect(&bench.url)
        .unwrap();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("desk")
        .principal("alice")
        .approval_store_shared(bench.store.clone())
        .audit(sink)
        .build()
        .unwrap();
    let pins = ["PIN4g20x5531", "PIN<g20>&\"7"];
    let call = |n: usize| gate.run(|| wire(format!("a-43-{n}"), "x".into(), pins[n].into()));
    let ids: Vec<i64> = (0..2).map(|n| request_id(call(n))).collect();
    let olga = bench.olga();
    let mut pages = Vec::new();
    let cookie = olga.cookie.clone().unwrap();
    let stream = EventStream::open(bench.console.addr, Some(&cookie));
    let look = |pages: &mut Vec<(String, String)>| {
        for path in [
            "/approvals".to_owned(),
            "/approvals/table".to_owned(),
            "/trail".to_owned(),
            "/trail?tool=c20.wire".to_owned(),
            "/trail/verify".to_owned(),
            "/promotion".to_owned(),
        ]
        .into_iter()
        .chain(ids.iter().map(|id| format!("/approvals/{id}")))
        {
            let page = olga.get(&path);
            for link in call_links(&page.body) {
                let call = olga.get(&link);
                pages.push((link, call.body));
            }
            pages.push((path, page.body));
        }
    };
    look(&mut pages);
    assert!(taken(&approve(&olga, ids[0], &[])));
    let reply = olga.post(
        &answer_path(ids[1]),
        &[
            ("csrf", &olga.csrf()),
            ("action", "reject"),
            ("reason", "no"),
        ],
    );
    assert!(taken(&reply));
    assert!(call(0).is_ok());
    assert!(call(1).is_err());
    // Dropping the gate flushes its sink.
    drop(gate);
    look(&mut pages);
    pages.push(("the live stream".to_owned(), stream.text()));
    for pin in pins {
        let escaped = pin
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;");
        let digest = crate::support::sha256_hex(pin);
        for (path, body) in &pages {
            for secret in [pin, escaped.as_str(), &digest, &urlencode(pin)] {
                assert!(
                    !body.contains(secret),
                    "{path} shows the redacted PIN as {secret:?}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// The live list.

/// A stream of server-sent events from the console, read on a thread of its own.
struct EventStream {
    text: Arc<Mutex<String>>,
    closed: Arc<std::sync::atomic::AtomicBool>,
    stream: std::net::TcpStream,
}

impl EventStream {
    /// `GET /approvals/events` with the session cookie `cookie`, if any.
    fn open(addr: std::net::SocketAddr, cookie: Option<&str>) -> EventStream {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).expect("a connection");
        let cookie = cookie.map_or(String::new(), |c| format!("Cookie: {COOKIE}={c}\r\n"));
        write!(
            stream,
            "GET /approvals/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\
             {cookie}\r\n"
        )
        .unwrap();
        let text = Arc::new(Mutex::new(String::new()));
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut reader = stream.try_clone().unwrap();
        {
            let text = text.clone();
            let closed = closed.clone();
            std::thread::spawn(move || {
                let mut buf = [0_u8; 4096];
                loop {
                    match reader.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => text
                            .lock()
                            .unwrap()
                            .push_str(&String::from_utf8_lossy(&buf[..n])),
                    }
                }
                closed.store(true, std::sync::atomic::Ordering::SeqCst);
            });
        }
        EventStream {
            text,
            closed,
            stream,
        }
    }

    fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }

    /// The events received so far (`data:` lines).
    fn events(&self) -> usize {
        self.text()
            .lines()
            .filter(|l| l.trim_start().starts_with("data:"))
            .count()
    }

    fn closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits (up to a minute) for more than `seen` events.
    fn wait_past(&self, seen: usize) -> bool {
        eventually(|| self.events() > seen)
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// Attack: follow the live list without a session (none, a forged cookie), while requests arrive.
/// Guarantee 20: the console answers only for a logged-in operator: a browser that is not logged in
/// is told nothing of the requests.
#[test]
fn a20_44_the_live_list_tells_nothing_to_a_browser_without_a_session() {
    let Some(bench) = bench("a20_44") else {
        return;
    };
    let olga = bench.olga();
    let control = EventStream::open(bench.console.addr, olga.cookie.as_deref());
    let strangers = [
        EventStream::open(bench.console.addr, None),
        EventStream::open(bench.console.addr, Some(&"0".repeat(64))),
    ];
    let gate = bench.gate();
    let seen = control.events();
    let _ = pending_wire(&gate, "a-44-secret", "x");
    assert!(
        control.wait_past(seen),
        "the operator's live list got no event"
    );
    let seen = control.events();
    let _ = pending_wire(&gate, "a-44-second", "x");
    assert!(control.wait_past(seen));
    for (n, stranger) in strangers.iter().enumerate() {
        let text = stranger.text();
        let status = Reply::parse_head(&text);
        assert!(
            status != 200 && stranger.events() == 0 && !text.contains("a-44"),
            "a browser without a session ({n}) follows the live list: {text}"
        );
    }
    for path in ["/approvals/table", "/approvals/table?after=0"] {
        let page = Browser::new(bench.console.addr).get(path);
        assert!(
            !page.body.contains("a-44") && page.status != 200,
            "{path}: {}",
            page.describe()
        );
    }
}

/// Attack: keep the live list open after logging out (or after the session ended), while requests
/// arrive.
/// Guarantee 20: the console answers only for a logged-in operator: a stream opened by a session
/// tells nothing once it ended.
#[test]
fn a20_45_the_live_list_stops_when_its_session_ends() {
    let Some(bench) = bench("a20_45") else {
        return;
    };
    let olga = bench.olga();
    let ravi = bench.ravi();
    let leaving = EventStream::open(bench.console.addr, olga.cookie.as_deref());
    let control = EventStream::open(bench.console.addr, ravi.cookie.as_deref());
    let gate = bench.gate();
    let seen = (leaving.events(), control.events());
    let _ = pending_wire(&gate, "a-45-first", "x");
    assert!(leaving.wait_past(seen.0) && control.wait_past(seen.1));
    let out = olga.post("/logout", &[("csrf", &olga.csrf())]);
    assert!(out.status < 400);
    assert!(olga.get("/approvals").to_login());
    let after_logout = leaving.events();
    for n in 0..3 {
        let seen = control.events();
        let _ = pending_wire(&gate, &format!("a-45-after-{n}"), "x");
        assert!(control.wait_past(seen), "the control stream got no event");
    }
    assert!(
        leaving.closed() || leaving.events() == after_logout,
        "a stream of a session that ended got {} more event(s) of requests made after the log-out:\n{}",
        leaving.events() - after_logout,
        leaving
            .text()
            .chars()
            .rev()
            .take(200)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<String>()
    );
}

/// Attack: log in with a short-lived access token, open the live list, and keep it open past the
/// token's expiry while requests arrive.
/// Guarantee 20 (docs/console.md): the session ends when the token expires; the console answers only
/// for a logged-in operator.
#[test]
fn a20_46_the_live_list_stops_when_its_access_token_expires() {
    let key = TestKey::new("a20-46");
    let Some(bench) = jwt_bench("a20_46", &key, &[]) else {
        return;
    };
    let exp = now_secs() + 3;
    let mut c = claims("mallory", 0);
    c["exp"] = json!(exp);
    let mallory = login(bench.console.addr, &key.sign(&c));
    let leaving = EventStream::open(bench.console.addr, mallory.cookie.as_deref());
    let ravi = bench.ravi();
    let control = EventStream::open(bench.console.addr, ravi.cookie.as_deref());
    let gate = bench.gate();
    let seen = (leaving.events(), control.events());
    let _ = pending_wire(&gate, "a-46-first", "x");
    assert!(leaving.wait_past(seen.0) && control.wait_past(seen.1));
    while now_secs() <= exp + 1 {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        mallory.get("/approvals").to_login(),
        "the session outlived its token"
    );
    let after_expiry = leaving.events();
    for n in 0..3 {
        let seen = control.events();
        let _ = pending_wire(&gate, &format!("a-46-after-{n}"), "x");
        assert!(control.wait_past(seen), "the control stream got no event");
    }
    assert!(
        leaving.closed() || leaving.events() == after_expiry,
        "the live list of a session whose token expired got {} more event(s)",
        leaving.events() - after_expiry
    );
}

// ---------------------------------------------------------------------------------------------------
// Where the console meets the gates, the fleet and the server.

const URL_ENV: &str = "TOOLGATE_G20_URL";
const FLEET_ENV: &str = "TOOLGATE_G20_FLEET";

/// An agent, when the parent runs this binary again with [`CHILD_ROLE`] `agent`: a gate of agent
/// `desk` for `alice` over the store (joined to the fleet [`FLEET_ENV`] names, if any), and a call a
/// line on stdin (`wire ACCOUNT`), each answered `@ran` or `@CODE ID` on stdout.
#[test]
fn agent_child_of_g20() {
    use std::io::{BufRead, Write};
    if std::env::var(CHILD_ROLE).as_deref() != Ok("agent") {
        return;
    }
    let url = std::env::var(URL_ENV).expect("the database's URL");
    let store = PostgresStore::builder()
        .timeout(Duration::from_secs(2))
        .connect(&url)
        .expect("the store");
    let builder = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("desk")
        .principal("alice")
        .approval_store(store);
    let _fleet;
    let gate = match std::env::var(FLEET_ENV) {
        Ok(name) => {
            let fleet = Fleet::connect(&url, &name).expect("the fleet");
            let gate = fleet.join(builder).expect("joined");
            _fleet = fleet;
            gate
        }
        Err(_) => builder.build().expect("a gate"),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "@ready").unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let said = match line.split(' ').collect::<Vec<_>>().as_slice() {
            ["wire", account] => {
                match gate.run(|| wire((*account).to_owned(), "x".into(), "0000".into())) {
                    Ok(()) => "ran".to_owned(),
                    Err(denied) => format!(
                        "{} {}",
                        denied.code().as_str(),
                        denied.approval_request_id().unwrap_or("-")
                    ),
                }
            }
            other => panic!("an unknown command {other:?}"),
        };
        writeln!(out, "@{said}").unwrap();
        out.flush().unwrap();
    }
}

/// The agent in a process of its own, over the store of `url`, joined to `fleet` if named.
fn spawn_agent(url: &str, fleet: Option<&str>) -> Racer {
    let mut command = crate::support::child(module_path!(), "agent_child_of_g20");
    command.env(CHILD_ROLE, "agent").env(URL_ENV, url);
    if let Some(fleet) = fleet {
        command.env(FLEET_ENV, fleet);
    }
    Racer::spawn(&mut command)
}

fn ask(agent: &mut Racer, command: &str) -> String {
    agent.tell(command);
    agent.said()
}

/// The request id of an agent's answer `APPROVAL_PENDING ID`.
#[track_caller]
fn pending_of(said: &str) -> i64 {
    let (code, id) = said
        .split_once(' ')
        .unwrap_or_else(|| panic!("ran: {said}"));
    assert_eq!(code, "APPROVAL_PENDING", "{said}");
    id.parse().expect("a request id")
}

/// Attack: an operator lowers the agent's fleet on the page (an incident), then approves its pending
/// call anyway (another operator, or the same by habit); the agent, in another process, retries.
/// Guarantee 20 with 11: the console lowers the fleet for every process; an approval given after it
/// runs nothing above the fleet's mode.
#[test]
fn a20_47_an_approval_on_the_page_after_the_page_lowered_the_fleet_runs_nothing() {
    let Some(bench) = bench("a20_47") else {
        return;
    };
    let mut agent = spawn_agent(&bench.url, Some("f47"));
    let id = pending_of(&ask(&mut agent, "wire a-47"));
    let olga = bench.olga();
    let reply = lower_on_page(&olga, "f47", "PARTIAL_AUTO", &[]);
    assert!(reply.status < 400, "{}", reply.describe());
    assert_eq!(fleet_mode(&bench.url, "f47"), Mode::PartialAuto);
    // The agent's process has read the lowering (its membership says so).
    assert!(eventually(|| {
        let members = fleet::status(&bench.url, "toolgate", "f47")
            .unwrap()
            .members;
        !members.is_empty() && members.iter().all(|m| m.mode == Mode::PartialAuto)
    }));
    let ravi = bench.ravi();
    assert!(taken(&approve(&ravi, id, &[])));
    let said = ask(&mut agent, "wire a-47");
    assert_ne!(
        said, "ran",
        "a call above the fleet's new mode ran on the page's approval"
    );
    // The same from the gate's own side: an approval, then the gate lowered in its process.
    let gate = bench.gate();
    let id = pending_wire(&gate, "a-47b", "x");
    assert!(taken(&approve(&olga, id, &[])));
    gate.lower(Mode::Advisory).unwrap();
    assert!(
        gate.run(|| wire("a-47b".into(), "x".into(), "0000".into()))
            .is_err()
    );
    assert_eq!(runs("wire:a-47b:x:0000"), 0);
}

/// Attack: reject and stop an agent from the page; the agent's gate reads the answer.
/// Guarantee 20 with 7: the answer is recorded under the session's operator, and the gate that reads
/// it refuses the call and lowers itself to SHADOW.
#[test]
fn a20_48_reject_and_stop_on_the_page_stops_the_agent_under_the_operator_s_name() {
    let Some(bench) = bench("a20_48") else {
        return;
    };
    let gate = bench.gate();
    let id = pending_wire(&gate, "a-48", "x");
    let olga = bench.olga();
    let reply = olga.post(
        &answer_path(id),
        &[
            ("csrf", &olga.csrf()),
            ("action", "reject-stop"),
            ("reason", "stop now"),
            ("by", "mallory"),
            ("stop", "false"),
        ],
    );
    assert!(taken(&reply), "{}", reply.describe());
    assert!(matches!(
        bench.state(id),
        RequestState::Answered(Answer::Reject { ref by, stop: true, .. }) if by == "olga"
    ));
    assert!(
        gate.run(|| wire("a-48".into(), "x".into(), "0000".into()))
            .is_err()
    );
    assert_eq!(gate.mode(), Mode::Shadow);
    assert!(gate.run(|| note("after the stop".into())).is_err());
    assert_eq!(runs("wire:a-48:x:0000"), 0);
}

/// Attack: approve requests just as they expire (the store's requests live a second), many times.
/// Guarantee 20: the console says an answer was taken exactly when the store recorded it, and an
/// answer recorded for an expired request runs nothing.
#[test]
fn a20_49_an_approval_racing_the_request_s_expiry_is_told_as_recorded() {
    let Some(bench) = bench("a20_49") else {
        return;
    };
    let short = Arc::new(
        PostgresStore::builder()
            .ttl(Duration::from_secs(1))
            .connect(&bench.url)
            .unwrap(),
    );
    let gate = gate_of(short.clone(), "desk", None);
    let olga = bench.olga();
    let csrf = olga.csrf();
    for round in 0..12 {
        let account = format!("a-49-{round}");
        let id = pending_wire(&gate, &account, "x");
        let made = Instant::now();
        let delay = Duration::from_millis(800 + 40 * round);
        while made.elapsed() < delay {
            std::thread::sleep(Duration::from_millis(5));
        }
        let reply = olga.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
        let state = bench.state(id);
        assert_eq!(
            taken(&reply),
            answered_by(&state).is_some(),
            "round {round}: the page says {:?}, the store holds {state:?}",
            reply.header("location")
        );
        let _ = gate.run(|| wire(account.clone(), "x".into(), "0000".into()));
        let ran = runs(&format!("wire:{account}:x:0000"));
        assert!(ran <= 1);
        if ran == 1 {
            assert!(
                answered_by(&state).is_some(),
                "round {round}: ran without an answer"
            );
        }
    }
}

/// Attack: stop PostgreSQL while an operator has the request's page open and answers it, start it
/// again, and answer again (as a browser sends a form again).
/// Guarantee 20: the console recovers, records no answer it did not take and none twice, and the
/// agent's call runs once; the live list follows the store again.
#[test]
fn a20_50_the_store_stopped_and_started_again_under_an_open_page_records_one_answer() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let _serial = crate::common::serial();
    let cluster = crate::common::postgres::Cluster::new(&["fsync=off"]);
    let url = cluster.database("a20_50");
    let dir = scratch_dir("a20_50");
    let ops = operators_file(&dir, &[("olga", OLGA), ("ravi", RAVI)]);
    let mut console = ConsoleProcess::start(&url, &ops, &[]);
    let mut agent = spawn_agent(&url, None);
    let id = pending_of(&ask(&mut agent, "wire a-50"));
    let olga = login(console.addr, OLGA);
    let csrf = olga.csrf();
    let page = olga.get(&format!("/approvals/{id}"));
    assert_eq!(page.status, 200);
    cluster.stop();
    let reply = olga.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
    assert!(
        !taken(&reply),
        "an answer taken with the store stopped: {}",
        reply.describe()
    );
    let down = olga.get(&format!("/approvals/{id}"));
    assert_inert("a page with the store stopped", &down, "g20mark");
    assert_ne!(ask(&mut agent, "wire a-50"), "ran");
    assert!(console.running(), "the console stopped with the store");
    cluster.start();
    let store = PostgresStore::connect(&url).expect("the store is back");
    assert!(
        eventually(|| {
            let page = olga.get("/approvals");
            page.status == 200 && page.body.contains(&format!("/approvals/{id}\""))
        }),
        "the console did not recover"
    );
    let state = wait(store.show(id)).unwrap().unwrap().state;
    assert_eq!(
        state,
        RequestState::Pending,
        "an answer not taken was recorded"
    );
    let stream = EventStream::open(console.addr, olga.cookie.as_deref());
    let first = approve(&olga, id, &[]);
    assert!(taken(&first), "{}", first.describe());
    let again = olga.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
    assert!(!taken(&again), "answered twice: {}", again.describe());
    let state = wait(store.show(id)).unwrap().unwrap().state;
    assert_eq!(answered_by(&state).as_deref(), Some("olga"));
    let said = [ask(&mut agent, "wire a-50"), ask(&mut agent, "wire a-50")];
    assert_eq!(said.iter().filter(|s| *s == "ran").count(), 1, "{said:?}");
    // The live list follows the store again: a new request reaches the open stream.
    let seen = stream.events();
    let _ = pending_of(&ask(&mut agent, "wire a-50-after"));
    assert!(
        stream.wait_past(seen),
        "the live list no longer follows the store after its restart: {}",
        stream.text()
    );
}

// ---------------------------------------------------------------------------------------------------
// Whatever the tables hold.

/// `text` as a PostgreSQL literal (dollar-quoted: nothing in the payloads ends it).
fn literal(text: &str) -> String {
    assert!(!text.contains("$g20$"));
    format!("$g20${text}$g20$")
}

/// Asserts that no character of `chars` is raw on `page`, and that where the text tagged `tag` shows,
/// each is drawn as a marker.
#[track_caller]
fn assert_no_raw_and_marked_where_shown(what: &str, page: &Reply, tag: &str, chars: &[char]) {
    let shown = shown_text(&page.body);
    for &c in chars {
        if let Some(at) = shown.find(c) {
            let from = shown[..at]
                .char_indices()
                .rev()
                .nth(150)
                .map_or(0, |(i, _)| i);
            let context: String = shown[from..].chars().take(300).collect();
            panic!("{what}: {c:?} is shown raw, in: {context:?}");
        }
    }
    if visible_text(&page.body).contains(tag) {
        assert_part_marked(what, &page.body, chars);
    }
}

/// Attack: every text column of a request's row written by whoever can write the table (or a store
/// of another version), with markup and hiding characters: the tool, agent, principal, arguments,
/// taint, target, state, plan, manifest, digests, risk and mode, and an answer's operator, reason
/// and confirmation.
/// Guarantee 20: every text from the store is escaped for HTML and every hiding character shown as a
/// marker, whatever wrote it.
#[test]
fn a20_51_every_text_of_a_request_s_row_is_inert_and_marked() {
    let Some(bench) = bench("a20_51") else {
        return;
    };
    let gate = bench.gate();
    let hiding: Vec<char> = HIDING.iter().copied().filter(|c| *c != '\0').collect();
    let hidden: String = hiding.iter().map(|c| format!("x{c}")).collect();
    let olga = bench.olga();
    let columns = [
        "tool",
        "agent",
        "principal",
        "arguments",
        "tainted_by",
        "tainted_at",
        "target",
        "evidence",
        "rollback",
        "manifest",
        "arguments_digest",
        "shown_digest",
        "evidence_digest",
        "risk",
        "mode",
        "answered_by",
        "reason",
        "confirmation",
    ];
    let mut n = 0;
    for column in columns {
        for payload in [PAYLOADS[1], PAYLOADS[2], PAYLOADS[4], PAYLOADS[7]] {
            n += 1;
            let tag = format!("col{n}-{column}");
            let value = format!("{payload}{tag}{hidden}");
            let id = request_id(gate.run(|| terminate(format!("db-51-{n}"), "x".into())));
            let set = match column {
                "manifest" => format!("manifest = to_jsonb({}::text)", literal(&value)),
                "answered_by" | "reason" => format!(
                    "answer = 'reject', answered_at = now(), answered_by = {v}, reason = {v}",
                    v = literal(&value)
                ),
                "confirmation" => format!(
                    "answer = 'approve', answered_at = now(), answered_by = 'ana', \
                     confirmation = {}",
                    literal(&value)
                ),
                other => format!("{other} = {}", literal(&value)),
            };
            crate::common::postgres::execute(
                &bench.url,
                &format!("UPDATE toolgate.approvals SET {set} WHERE id = {id}"),
            );
            for path in [
                "/approvals".to_owned(),
                "/approvals/table".to_owned(),
                format!("/approvals/{id}"),
            ] {
                let page = olga.get(&path);
                let what = format!("{path} with {column} = {payload:?}");
                assert_inert(&what, &page, "g20mark");
                assert_no_raw_and_marked_where_shown(&what, &page, &tag, &hiding);
            }
        }
    }
}

/// Attack: rows of the trail written directly (a writer's role may insert rows under a name no one
/// used): a writer name, tool, stage, principal, agent, mode, decision, outcome, code and message
/// that mark up and hide, in a line that is not even a record.
/// Guarantee 20: every text of the trail is escaped for HTML and every hiding character shown as a
/// marker, on the search, the call's page and the verification.
#[test]
fn a20_52_every_text_of_a_trail_row_is_inert_and_marked() {
    let Some(bench) = bench("a20_52") else {
        return;
    };
    let hiding: Vec<char> = HIDING.iter().copied().filter(|c| *c != '\0').collect();
    let hidden: String = hiding.iter().map(|c| format!("x{c}")).collect();
    let olga = bench.olga();
    for (n, payload) in [PAYLOADS[0], PAYLOADS[2], PAYLOADS[4], PAYLOADS[7]]
        .iter()
        .enumerate()
    {
        let v = |field: &str| format!("{payload}col{n}-{field}{hidden}");
        let writer = v("writer");
        let line = json!({
            "agent": v("agent"), "principal": v("principal"), "tool": v("tool"),
            "stage": "enter", "mode": "SHADOW", "decision": v("decision"),
            "outcome": v("outcome"), "code": v("code"), "message": v("message"),
            "arguments": v("arguments"), "declared_risk": v("risk"), "gate": 1, "call": 1,
            "seq": 1, "timestamp": "2026-01-01T00:00:00Z", "hash": v("hash"),
            "prev_hash": v("prev"),
        })
        .to_string();
        let lines = [line, format!("{payload}col{n}-line{hidden}")];
        for (seq, line) in lines.iter().enumerate() {
            crate::common::postgres::execute(
                &bench.url,
                &format!(
                    "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, \
                     call, line) VALUES ({w}, {s}, {p}, {h}, 'enter', {t}, 1, 1, {l})",
                    w = literal(&writer),
                    s = seq + 1,
                    p = literal(&v("prev")),
                    h = literal(&v("hash")),
                    t = literal(&v("tool")),
                    l = literal(line),
                ),
            );
        }
        let tag = format!("col{n}-");
        let mut asks = vec![
            "/trail".to_owned(),
            "/trail/verify".to_owned(),
            "/promotion".to_owned(),
        ];
        for seq in 1..=2 {
            asks.push(format!(
                "/trail/call?{}",
                form(&[("writer", &writer), ("seq", &seq.to_string())])
            ));
        }
        for ask in asks {
            let page = olga.get(&ask);
            let what = format!("{ask} with {payload:?}");
            assert_inert(&what, &page, "g20mark");
            assert_no_raw_and_marked_where_shown(&what, &page, &tag, &hiding);
        }
    }
}

/// Attack: a fleet's rows written directly (a member process writes its own row): the fleet's name,
/// who set it and why, its policy, a member's process, host and agent, a change's operator and
/// reason, marked up and hiding.
/// Guarantee 20: every text of a fleet is escaped for HTML and every hiding character shown as a
/// marker.
#[test]
fn a20_53_every_text_of_a_fleet_s_rows_is_inert_and_marked() {
    let Some(bench) = bench("a20_53") else {
        return;
    };
    let hiding: Vec<char> = HIDING.iter().copied().filter(|c| *c != '\0').collect();
    let hidden: String = hiding.iter().map(|c| format!("x{c}")).collect();
    let olga = bench.olga();
    for (n, payload) in [PAYLOADS[0], PAYLOADS[2], PAYLOADS[4], PAYLOADS[7]]
        .iter()
        .enumerate()
    {
        let v = |field: &str| literal(&format!("{payload}col{n}-{field}{hidden}"));
        crate::common::postgres::execute(
            &bench.url,
            &format!(
                "INSERT INTO toolgate.fleets (name, mode, changed_by, reason, policy, policy_digest, \
                 policy_by, policy_at) VALUES ({name}, 'PARTIAL_AUTO', {by}, {why}, {policy}, \
                 {digest}, {pby}, now());
                 INSERT INTO toolgate.fleet_members (fleet, member, gate, host, pid, agent, mode, \
                 policy_digest) VALUES ({name}, {member}, 1, {host}, 1, {agent}, 'SHADOW', \
                 {mdigest});
                 INSERT INTO toolgate.fleet_changes (fleet, mode, changed_by, reason) VALUES \
                 ({name}, 'PARTIAL_AUTO', {by}, {why});",
                name = v("name"),
                by = v("by"),
                why = v("why"),
                policy = v("policy"),
                digest = v("digest"),
                pby = v("pby"),
                member = v("member"),
                host = v("host"),
                agent = v("agent"),
                mdigest = v("mdigest"),
            ),
        );
        let page = olga.get("/fleet");
        let what = format!("the fleets with {payload:?}");
        assert_inert(&what, &page, "g20mark");
        assert_no_raw_and_marked_where_shown(&what, &page, &format!("col{n}-"), &hiding);
    }
}

/// Attack: a request for a request id that is not a number, naming something of the attacker's
/// (markup, a line that reads as a warning, a right-to-left override), on the request's page and
/// its answer.
/// Guarantee 20 (docs/console.md): a refused answer comes back as one of the console's sentences,
/// never as text from the request; no hiding character reaches the operator raw.
#[test]
fn a20_54_a_request_id_that_is_no_number_is_refused_in_the_console_s_words() {
    let Some(bench) = bench("a20_54") else {
        return;
    };
    let olga = bench.olga();
    let csrf = olga.csrf();
    for id in [
        "%3Cb%3Eg20mark%3C%2Fb%3E",
        "g20mark%20session%20ended%2C%20log%20in%20at%20evil.example",
        "g20mark%E2%80%AEkram",
    ] {
        let answer = olga.post(
            &format!("/approvals/{id}/answer"),
            &[("csrf", &csrf), ("action", "approve")],
        );
        let page = olga.get(&format!("/approvals/{id}"));
        for (what, reply) in [("the answer", &answer), ("the page", &page)] {
            assert!(
                !reply.body.contains("g20mark") && !reply.body.contains('\u{202e}'),
                "{what} for id {id} repeats the request: {}",
                reply.describe()
            );
        }
    }
}

/// Attack: frame the console, or run an inline script on it, from any of its answers: pages, the
/// live table, errors, assets, redirects.
/// Guarantee 20: the pages run no script but the console's own and load nothing from elsewhere, in no
/// frame: every answer says so.
#[test]
fn a20_55_every_answer_forbids_frames_inline_scripts_and_sniffing() {
    let Some(bench) = bench("a20_55") else {
        return;
    };
    let id = pending_wire(&bench.gate(), "a-55", "x");
    let olga = bench.olga();
    let anonymous = bench.console.browser();
    let mut replies = Vec::new();
    for path in [
        "/".to_owned(),
        "/login".to_owned(),
        "/approvals".to_owned(),
        "/approvals/table".to_owned(),
        format!("/approvals/{id}"),
        "/approvals/999999".to_owned(),
        "/approvals/x".to_owned(),
        "/fleet".to_owned(),
        "/trail".to_owned(),
        "/trail?before_seq=x".to_owned(),
        "/trail/call?writer=x&seq=1".to_owned(),
        "/trail/verify".to_owned(),
        "/promotion".to_owned(),
        "/assets/console.js".to_owned(),
        "/assets/console.css".to_owned(),
        "/no-such-page".to_owned(),
    ] {
        replies.push((format!("GET {path}"), olga.get(&path)));
        replies.push((
            format!("GET {path} without a session"),
            anonymous.get(&path),
        ));
    }
    replies.push((
        "a refused answer".to_owned(),
        olga.post(&answer_path(id), &[]),
    ));
    replies.push((
        "a log-in refused".to_owned(),
        anonymous.post("/login", &[("token", "x")]),
    ));
    for (what, reply) in replies {
        let csp = reply.header("content-security-policy").unwrap_or("");
        let directives: Vec<&str> = csp.split(';').map(str::trim).collect();
        assert!(
            directives.contains(&"frame-ancestors 'none'")
                && directives.contains(&"script-src 'self'")
                && directives.contains(&"default-src 'none'")
                && !csp.contains("unsafe"),
            "{what}: content policy {csp:?}"
        );
        assert_eq!(
            reply.header("x-content-type-options"),
            Some("nosniff"),
            "{what}"
        );
    }
}

/// Attack: log in by a link (`GET /login?token=..`, as an image of another site would), or with the
/// token in the query of an empty form.
/// Guarantee 20: a session is got only by posting a token to the log-in form; a link changes nothing.
#[test]
fn a20_56_a_log_in_by_a_link_opens_no_session() {
    let Some(bench) = bench("a20_56") else {
        return;
    };
    let browser = bench.console.browser();
    let query = form(&[("token", OLGA)]);
    for reply in [
        browser.get(&format!("/login?{query}")),
        browser.get_with(
            &format!("/login?{query}"),
            &[("Sec-Fetch-Site", "cross-site")],
        ),
        browser.get(&format!("/?{query}")),
        browser.get(&format!("/approvals?{query}")),
    ] {
        assert!(
            reply.session_cookie().is_none(),
            "a link opened a session: {}",
            reply.describe()
        );
    }
}

/// Attack: a log-in that names where to go next (`next`, `redirect`, `return_to`, in the form or the
/// query): another site, a scheme-relative path.
/// Guarantee 20: the console sends the browser only to its own pages.
#[test]
fn a20_57_a_log_in_sends_the_browser_to_no_other_site() {
    let Some(bench) = bench("a20_57") else {
        return;
    };
    let browser = bench.console.browser();
    for target in [
        "http://evil.example/",
        "//evil.example/",
        "/\\evil.example/",
        "https:evil.example",
    ] {
        for field in ["next", "redirect", "return_to", "url", "to"] {
            let query = form(&[(field, target)]);
            for reply in [
                browser.post(&format!("/login?{query}"), &[("token", OLGA)]),
                browser.post("/login", &[("token", OLGA), (field, target)]),
            ] {
                let location = reply.header("location").unwrap_or("/");
                assert!(
                    location.starts_with('/')
                        && !location.starts_with("//")
                        && !location.starts_with("/\\"),
                    "{field}={target}: sent to {location}"
                );
            }
        }
    }
}

/// A console in this process whose operators are olga (a token) and the subjects of access tokens an
/// `OAuth` verifies (`Operators::access_tokens`, as the `Operators` documentation offers), trusting
/// the test key.
fn console_with_verifier(url: &str, key: &TestKey) -> InProcessConsole {
    let jwks = json!({"keys": [key.jwk]}).to_string();
    InProcessConsole::start_with(
        move || async move {
            let oauth = toolgate::mcp::oauth::OAuth::builder(AUDIENCE)
                .authorization_server(ISSUER)
                .jwks(toolgate::mcp::oauth::Jwks::json(jwks))
                .algorithms([toolgate::mcp::oauth::Algorithm::RS256])
                .scope(SCOPE, "ops", Gate::new(Mode::Shadow).expect("a gate"))
                .build()
                .await
                .expect("a verifier");
            toolgate::console::Console::builder().operators(
                toolgate::console::Operators::new()
                    .token(OLGA, "olga")
                    .access_tokens(oauth, SCOPE),
            )
        },
        url,
    )
}

/// Attack: in a console whose operators include an `OAuth` verifier (`Operators::access_tokens`), log in
/// with an access token that expires in three seconds and keep the session past it.
/// Guarantee 20: a page needs a session got for an access token that verifies; the session ends
/// when the token expires.
#[test]
fn a20_58_a_session_of_a_verifier_s_access_token_ends_with_the_token() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "a20_58") else {
        return;
    };
    let key = TestKey::new("a20-58");
    let store = store_of(&url);
    let id = pending_wire(&gate_of(store.clone(), "desk", None), "a-58", "x");
    let console = console_with_verifier(&url, &key);
    let exp = now_secs() + 3;
    let mut c = claims("mallory", 0);
    c["exp"] = json!(exp);
    let browser = login(console.addr, &key.sign(&c));
    let csrf = browser.csrf();
    while now_secs() <= exp + 1 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let page = browser.get("/approvals");
    let answered = browser.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
    let state = wait(store.show(id)).unwrap().unwrap().state;
    assert!(
        page.to_login() && state == RequestState::Pending,
        "a session outlived its access token: the page answered {}, and the request is {state:?} \
         (the answer: {:?})",
        page.status,
        answered.header("location")
    );
}

/// Attack: through an `OAuth` verifier given to `Operators::access_tokens`, log in with a subject that
/// hides or reorders text, or marks up.
/// Guarantee 20: the operator's name (which the store records) is refused at log-in, or every page
/// shows it escaped with its hiding characters as markers.
#[test]
fn a20_59_a_verifier_s_subject_that_hides_is_refused_or_shown_marked() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "a20_59") else {
        return;
    };
    let key = TestKey::new("a20-59");
    let store = store_of(&url);
    let id = pending_wire(&gate_of(store.clone(), "desk", None), "a-59", "x");
    let console = console_with_verifier(&url, &key);
    for (sub, hidden) in [
        ("olga\u{202e}agl", Some('\u{202e}')),
        ("olga\u{200b}", Some('\u{200b}')),
        ("olga\nravi", Some('\n')),
        ("<svg onload=g20mark()>", None),
    ] {
        let Ok(browser) = try_login(console.addr, &key.sign(&claims(sub, 300))) else {
            continue;
        };
        for path in ["/approvals".to_owned(), format!("/approvals/{id}")] {
            let page = browser.get(&path);
            assert_eq!(page.status, 200);
            assert_inert(&format!("the operator {sub:?}"), &page, "g20mark");
            if let Some(c) = hidden {
                let header = page.body.split("</header>").next().unwrap_or_default();
                assert_part_marked(&format!("the operator {sub:?} on {path}"), header, &[c]);
            }
        }
    }
}
