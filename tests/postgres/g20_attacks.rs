//! Outside attacks on guarantee 20 (the operator console), against the real `toolgate console`
//! command or a console served in this process, a real PostgreSQL and gates in this process or in
//! agent processes of their own.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::approval::store::Answer;
use toolgate::postgres::{PostgresStore, RequestState};
use toolgate::{Denied, Gate, Mode, Rollback, tool};

use crate::support::console_attacks::*;
use crate::support::{parent_database, scratch_dir, wait};

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
