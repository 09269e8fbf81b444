//! Guarantee 20: the operator console answers only for a logged-in operator, and nothing an agent
//! writes acts on its pages. The console serves in this process, over loopback, on a real store and
//! trail; its pages are read as a browser receives them (raw HTTP), and its answers are used by real
//! gates, which run the approved call once.

use std::net::SocketAddr;
use std::time::Duration;

use toolgate::approval::store::Answer;
use toolgate::console::{Console, Operators};
use toolgate::postgres::{Fleet, PostgresSink, PostgresStore, RequestState};
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

use crate::common::http::{Answer as Page, exchange};
use crate::common::postgres::query;
use crate::support::{code, parent_database, parent_store_on_own_cluster, token, wait};

const ROLE: &str = "TOOLGATE_PG_CONSOLE";
pub(crate) const TOKEN: &str = "olga-secret-token";
const OPERATOR: &str = "olga";

/// Wire money; the PIN is redacted before anything is stored.
#[tool(risk = "HIGH_WRITE", domain = "pgconsole", redact = [pin], record_arguments)]
fn wire(account: String, cents: u64, pin: String) -> Result<String, Denied> {
    let _ = pin;
    Ok(format!("wired {cents} to {account}"))
}

/// Look an account up.
#[tool(risk = "READ_ONLY", domain = "pgconsole")]
fn balance(account: String) -> Result<u64, Denied> {
    Ok(account.len() as u64)
}

fn describe(instance: &str) -> Result<serde_json::Value, String> {
    Ok(serde_json::json!({ "instance": instance, "state": "running" }))
}

/// Terminate an instance, which cannot be brought back.
#[tool(
    risk = "HIGH_WRITE",
    domain = "pgconsole",
    irreversible,
    target = instance,
    evidence = describe
)]
fn terminate(instance: String) -> Result<(), Denied> {
    let _ = instance;
    Ok(())
}

/// The console, served on a runtime of its own.
pub(crate) struct Served {
    pub(crate) addr: SocketAddr,
    runtime: tokio::runtime::Runtime,
}

pub(crate) fn serve(url: &str, operators: Operators) -> Served {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let addr = runtime.block_on(async {
        let console = Console::builder()
            .operators(operators)
            .timeout(Duration::from_secs(2))
            .connect(url)
            .await
            .expect("the console connects");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(console.serve(listener));
        addr
    });
    Served { addr, runtime }
}

pub(crate) fn operators() -> Operators {
    Operators::new().token(TOKEN, OPERATOR)
}

impl Served {
    pub(crate) fn send(&self, request: String) -> Page {
        let text = self.runtime.block_on(exchange(
            self.addr,
            &request,
            Duration::from_secs(10),
            |_| false,
        ));
        Page::parse(&text)
    }

    pub(crate) fn get(&self, path: &str, cookie: Option<&str>) -> Page {
        let cookie = cookie.map_or(String::new(), |c| format!("Cookie: {c}\r\n"));
        self.send(format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\n{cookie}Connection: close\r\n\r\n",
            self.addr
        ))
    }

    pub(crate) fn post(
        &self,
        path: &str,
        form: &[(&str, &str)],
        cookie: Option<&str>,
        origin: bool,
    ) -> Page {
        let body = form
            .iter()
            .map(|(k, v)| format!("{}={}", encoded(k), encoded(v)))
            .collect::<Vec<_>>()
            .join("&");
        let cookie = cookie.map_or(String::new(), |c| format!("Cookie: {c}\r\n"));
        let origin = if origin {
            format!("Origin: http://{}\r\n", self.addr)
        } else {
            String::new()
        };
        self.send(format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\n{cookie}{origin}Content-Type: \
             application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        ))
    }

    /// Logs in with `token`: the session's cookie.
    pub(crate) fn login(&self, token: &str) -> String {
        let page = self.post("/login", &[("token", token)], None, true);
        assert_eq!(page.status, 303, "{page:?}");
        let cookie = page.header("set-cookie").expect("a session cookie");
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        cookie.split(';').next().unwrap().to_owned()
    }

    /// The session's CSRF token, from a page's forms.
    pub(crate) fn csrf(&self, cookie: &str) -> String {
        let page = self.get("/approvals", Some(cookie));
        let at = page.body.find("name=\"csrf\" value=\"").expect("a form");
        page.body[at + 19..at + 19 + 64].to_owned()
    }
}

/// `text` as a form's field: every byte but letters and digits percent-encoded.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn request_state(store: &PostgresStore, id: i64) -> RequestState {
    wait(store.show(id)).unwrap().expect("the request").state
}

fn store_gate(url: &str, agent: &str) -> (PostgresStore, Gate) {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent(agent)
        .principal("alice")
        .approval_store(PostgresStore::connect(url).unwrap())
        .build()
        .unwrap();
    (PostgresStore::connect(url).unwrap(), gate)
}

fn pending(store: &PostgresStore, tool: &str) -> i64 {
    wait(store.list())
        .unwrap()
        .into_iter()
        .rev()
        .find(|r| r.binding.tool == tool)
        .unwrap_or_else(|| panic!("a pending request of {tool}"))
        .id
}

#[test]
fn f01_an_approval_on_the_page_is_the_operators_and_runs_the_call_once() {
    let Some((_serial, url)) = parent_database(ROLE, "console_f01") else {
        return;
    };
    let (store, gate) = store_gate(&url, "desk");
    let call = || wire("acme".into(), 500, "4321".into());
    token(gate.run(call));
    let id = pending(&store, "pgconsole.wire");
    let console = serve(&url, operators());
    let cookie = console.login(TOKEN);
    let csrf = console.csrf(&cookie);

    let list = console.get("/approvals", Some(&cookie));
    assert_eq!(list.status, 200);
    assert!(
        list.body.contains(&format!("data-request=\"{id}\"")),
        "{}",
        list.body
    );
    let detail = console.get(&format!("/approvals/{id}"), Some(&cookie));
    for shown in [
        "pgconsole.wire",
        "alice",
        "desk",
        "HIGH_WRITE",
        "[REDACTED]",
        "acme",
    ] {
        assert!(detail.body.contains(shown), "{shown} not on the page");
    }
    // The redacted PIN reaches no page: not the list, not the request.
    assert!(!list.body.contains("4321") && !detail.body.contains("4321"));

    // A name in the form is not who answers: the session's operator is.
    let answered = console.post(
        &format!("/approvals/{id}/answer"),
        &[("csrf", &csrf), ("action", "approve"), ("by", "mallory")],
        Some(&cookie),
        true,
    );
    assert_eq!(answered.status, 303);
    match request_state(&store, id) {
        RequestState::Answered(Answer::Approve { by, .. }) => assert_eq!(by, OPERATOR),
        other => panic!("not approved by the operator: {other:?}"),
    }
    assert_eq!(gate.run(call).unwrap(), "wired 500 to acme");
    assert_eq!(code(gate.run(call)), DenialCode::ApprovalReused);
    let shown = console.get(&format!("/approvals/{id}"), Some(&cookie));
    assert!(
        shown.body.contains("approved by <strong>olga</strong>")
            && shown.body.contains("used by its call"),
        "{}",
        shown.body
    );
}

#[test]
fn f02_a_rejection_carries_its_reason_to_the_agent_and_needs_one() {
    let Some((_serial, url)) = parent_database(ROLE, "console_f02") else {
        return;
    };
    let (store, gate) = store_gate(&url, "desk");
    let call = || wire("acme".into(), 9_900, "1".into());
    token(gate.run(call));
    let id = pending(&store, "pgconsole.wire");
    let console = serve(&url, operators());
    let cookie = console.login(TOKEN);
    let csrf = console.csrf(&cookie);
    let path = format!("/approvals/{id}/answer");

    let empty = console.post(
        &path,
        &[("csrf", &csrf), ("action", "reject"), ("reason", "  ")],
        Some(&cookie),
        true,
    );
    assert_eq!(
        empty.header("location"),
        Some(&*format!("/approvals/{id}?problem=reason"))
    );
    assert_eq!(request_state(&store, id), RequestState::Pending);

    console.post(
        &path,
        &[
            ("csrf", &csrf),
            ("action", "reject"),
            ("reason", "over the limit"),
        ],
        Some(&cookie),
        true,
    );
    let denied = gate.run(call).expect_err("rejected");
    assert_eq!(denied.code(), DenialCode::ApprovalRejected);
    assert!(denied.to_string().contains("over the limit"), "{denied}");
}

#[test]
fn f03_no_page_without_a_session_and_no_change_without_the_sessions_token_from_its_origin() {
    let Some((_serial, url)) = parent_database(ROLE, "console_f03") else {
        return;
    };
    let (store, gate) = store_gate(&url, "desk");
    token(gate.run(|| wire("acme".into(), 1, "1".into())));
    let id = pending(&store, "pgconsole.wire");
    let console = serve(&url, operators());

    for path in [
        "/approvals",
        &format!("/approvals/{id}"),
        "/approvals/table",
        "/approvals/events",
        "/fleet",
        "/trail",
        "/trail/verify",
        "/promotion",
    ] {
        let page = console.get(path, None);
        assert_eq!(
            (page.status, page.header("location")),
            (303, Some("/login")),
            "{path}"
        );
        let forged = console.get(path, Some("toolgate_console=00ff"));
        assert_eq!(forged.status, 303, "{path} with a forged cookie");
    }
    let wrong = console.post("/login", &[("token", "guess")], None, true);
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    assert!(wrong.body.contains("id=\"error\""));
    // The hash of a token is not a token.
    let hash = crate::support::sha256_hex(TOKEN);
    assert_eq!(
        console
            .post("/login", &[("token", &hash)], None, true)
            .status,
        401
    );

    let answer = format!("/approvals/{id}/answer");
    assert_eq!(
        console
            .post(&answer, &[("action", "approve")], None, true)
            .status,
        401
    );
    let cookie = console.login(TOKEN);
    let csrf = console.csrf(&cookie);
    // Without the session's token, with another session's, or from another origin: refused.
    let other = console.login(TOKEN);
    let other_csrf = console.csrf(&other);
    assert_ne!(csrf, other_csrf);
    assert_eq!(
        console
            .post(&answer, &[("action", "approve")], Some(&cookie), true)
            .status,
        422
    );
    assert_eq!(
        console
            .post(
                &answer,
                &[("csrf", &other_csrf), ("action", "approve")],
                Some(&cookie),
                true
            )
            .status,
        403
    );
    let body = format!("csrf={csrf}&action=approve");
    for header in ["Origin: http://evil.example", "Sec-Fetch-Site: cross-site"] {
        let refused = console.send(format!(
            "POST {answer} HTTP/1.1\r\nHost: {}\r\nCookie: {cookie}\r\n{header}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            console.addr,
            body.len(),
        ));
        assert_eq!(refused.status, 403, "{header}");
    }
    assert_eq!(request_state(&store, id), RequestState::Pending);

    // Logged out, the cookie opens nothing.
    assert_eq!(
        console
            .post("/logout", &[("csrf", &csrf)], Some(&cookie), true)
            .status,
        303
    );
    assert_eq!(console.get("/approvals", Some(&cookie)).status, 303);
    assert_eq!(
        console
            .post(
                &answer,
                &[("csrf", &csrf), ("action", "approve")],
                Some(&cookie),
                true
            )
            .status,
        401
    );
    assert_eq!(request_state(&store, id), RequestState::Pending);
    // Every page says what it may load, and that it is not to be framed or cached.
    let page = console.get("/approvals", Some(&other));
    let policy = page.header("content-security-policy").unwrap();
    assert!(policy.contains("default-src 'none'") && policy.contains("script-src 'self'"));
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("cache-control"), Some("no-store"));
}

#[test]
fn f04_what_an_agent_writes_is_escaped_and_hidden_characters_are_shown() {
    let Some((_serial, url)) = parent_database(ROLE, "console_f04") else {
        return;
    };
    let hostile = "<script>alert(1)</script>\"><img src=x onerror=alert(2)> a\u{202E}gnp.exe \u{200B}\u{2028}&amp;";
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("agent\u{202E}<b>x</b>")
        .principal("alice\u{200B}<i>")
        .approval_store(PostgresStore::connect(&url).unwrap())
        .build()
        .unwrap();
    let store = PostgresStore::connect(&url).unwrap();
    token(gate.run(|| wire(hostile.into(), 7, "1".into())));
    let id = pending(&store, "pgconsole.wire");
    let console = serve(&url, operators());
    let cookie = console.login(TOKEN);
    let csrf = console.csrf(&cookie);
    console.post(
        &format!("/approvals/{id}/answer"),
        &[
            ("csrf", &csrf),
            ("action", "reject"),
            ("reason", "no <script>alert(3)</script>\u{202E}"),
        ],
        Some(&cookie),
        true,
    );
    for path in ["/approvals".to_owned(), format!("/approvals/{id}")] {
        let page = console.get(&path, Some(&cookie));
        let body = &page.body;
        for injected in ["<script>alert", "<img", "<b>", "<i>"] {
            assert!(
                !body.contains(injected),
                "{injected} reached {path} unescaped"
            );
        }
        for hidden in ['\u{202E}', '\u{200B}', '\u{2028}'] {
            assert!(!body.contains(hidden), "{hidden:?} reached {path} raw");
        }
        if path != "/approvals" {
            for marker in ["U+202E", "U+200B", "U+2028", "&lt;script&gt;", "&amp;amp;"] {
                assert!(body.contains(marker), "{marker} not shown on {path}");
            }
        }
    }
}

#[test]
fn f05_an_irreversible_call_is_approved_only_with_its_target_typed_back_never_for_the_session() {
    let Some((_serial, url)) = parent_database(ROLE, "console_f05") else {
        return;
    };
    let (store, gate) = store_gate(&url, "ops");
    let call = || terminate("i-0abc".into());
    token(gate.run(call));
    let id = pending(&store, "pgconsole.terminate");
    let console = serve(&url, operators());
    let cookie = console.login(TOKEN);
    let csrf = console.csrf(&cookie);
    let page = console.get(&format!("/approvals/{id}"), Some(&cookie));
    assert!(
        page.body.contains("THIS CANNOT BE UNDONE") && page.body.contains("id=\"confirmation\"")
    );
    assert!(
        !page.body.contains("approve-session"),
        "no approval for the session is offered"
    );
    assert!(page.body.contains("running"), "the target's state is shown");

    let path = format!("/approvals/{id}/answer");
    for (action, typed, problem) in [
        ("approve", "", "confirmation"),
        ("approve", "i-0abc ", "confirmation"),
        ("approve", "I-0ABC", "confirmation"),
        ("approve-session", "i-0abc", "session"),
    ] {
        let answered = console.post(
            &path,
            &[("csrf", &csrf), ("action", action), ("confirmation", typed)],
            Some(&cookie),
            true,
        );
        assert_eq!(
            answered.header("location"),
            Some(&*format!("/approvals/{id}?problem={problem}")),
            "{action} {typed:?}"
        );
        assert_eq!(
            request_state(&store, id),
            RequestState::Pending,
            "{action} {typed:?}"
        );
    }
    console.post(
        &path,
        &[
            ("csrf", &csrf),
            ("action", "approve"),
            ("confirmation", "i-0abc"),
        ],
        Some(&cookie),
        true,
    );
    gate.run(call).expect("approved with its target typed back");
}

#[test]
fn f06_the_page_lowers_a_fleet_and_never_raises_one() {
    let Some((_serial, url)) = parent_database(ROLE, "console_f06") else {
        return;
    };
    let fleet = Fleet::connect(&url, "payments").unwrap();
    let gate = fleet
        .join(Gate::builder().mode(Mode::PartialAuto).agent("payer"))
        .unwrap();
    let console = serve(&url, operators());
    let cookie = console.login(TOKEN);
    let csrf = console.csrf(&cookie);
    let page = console.get("/fleet", Some(&cookie));
    assert!(
        page.body.contains("data-fleet=\"payments\""),
        "{}",
        page.body
    );

    let lowered = console.post(
        "/fleet/lower",
        &[
            ("csrf", &csrf),
            ("fleet", "payments"),
            ("mode", "SHADOW"),
            ("reason", "incident 42"),
        ],
        Some(&cookie),
        true,
    );
    assert_eq!(lowered.header("location"), Some("/fleet?lowered=1"));
    let status = toolgate::postgres::fleet::status(&url, "toolgate", "payments").unwrap();
    assert_eq!(
        (status.mode, status.changed_by.as_str()),
        (Mode::Shadow, OPERATOR)
    );
    // A crafted form cannot raise it back, nor lower it without a reason.
    for mode in ["ADVISORY", "FULL_AUTO"] {
        let raise = console.post(
            "/fleet/lower",
            &[
                ("csrf", &csrf),
                ("fleet", "payments"),
                ("mode", mode),
                ("reason", "more"),
            ],
            Some(&cookie),
            true,
        );
        assert_eq!(
            raise.header("location"),
            Some("/fleet?problem=raise"),
            "{mode}"
        );
    }
    let no_reason = console.post(
        "/fleet/lower",
        &[
            ("csrf", &csrf),
            ("fleet", "payments"),
            ("mode", "SHADOW"),
            ("reason", ""),
        ],
        Some(&cookie),
        true,
    );
    assert_eq!(no_reason.header("location"), Some("/fleet?problem=reason"));
    let status = toolgate::postgres::fleet::status(&url, "toolgate", "payments").unwrap();
    assert_eq!(status.mode, Mode::Shadow);
    let page = console.get("/fleet", Some(&cookie));
    assert!(page.body.contains("incident 42"), "the reason is shown");
    // The joined gate follows within its bound.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gate.mode() != Mode::Shadow {
        assert!(
            std::time::Instant::now() < deadline,
            "the member was not lowered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn f07_the_trail_is_searched_by_what_its_lines_say_and_an_edited_row_shows_on_verification() {
    let Some((_serial, url)) = parent_database(ROLE, "console_f07") else {
        return;
    };
    let sink = PostgresSink::builder()
        .writer("desk-1")
        .connect(&url)
        .unwrap();
    let gate = Gate::builder()
        .mode(Mode::Shadow)
        .agent("desk")
        .principal("alice")
        .audit(sink)
        .build()
        .unwrap();
    gate.run(|| balance("acme".into())).unwrap();
    let refused = gate
        .run(|| wire("acme".into(), 5, "9".into()))
        .expect_err("SHADOW refuses a write");
    let refused_code = refused.code().to_string();
    drop(gate);
    let console = serve(&url, operators());
    let cookie = console.login(TOKEN);

    let by_tool = console.get("/trail?tool=pgconsole.balance", Some(&cookie));
    assert_eq!(
        by_tool.body.matches("class=\"record\"").count(),
        2,
        "{}",
        by_tool.body
    );
    assert!(!by_tool.body.contains("pgconsole.wire"));
    let by_code = console.get(&format!("/trail?code={refused_code}"), Some(&cookie));
    assert_eq!(
        by_code.body.matches("class=\"record\"").count(),
        1,
        "the refusal's record"
    );
    let by_decision = console.get("/trail?decision=refused&principal=alice", Some(&cookie));
    assert_eq!(by_decision.body.matches("class=\"record\"").count(), 1);
    assert!(by_decision.body.contains("pgconsole.wire"));
    let nobody = console.get("/trail?principal=bob", Some(&cookie));
    assert_eq!(nobody.body.matches("class=\"record\"").count(), 0);
    // A time range, and the next page of a search, each narrow it.
    let within = console.get(
        "/trail?since=2000-01-01T00%3A00%3A00Z&until=2999-01-01",
        Some(&cookie),
    );
    assert_eq!(
        within.body.matches("class=\"record\"").count(),
        3,
        "{}",
        within.body
    );
    let before = console.get("/trail?until=2000-01-01", Some(&cookie));
    assert_eq!(before.body.matches("class=\"record\"").count(), 0);
    let paged = console.get(
        &format!(
            "/trail?before_at={}&before_writer=desk-1&before_seq=3",
            encoded("2999-01-01T00:00:00Z")
        ),
        Some(&cookie),
    );
    assert_eq!(paged.status, 200);
    assert!(!paged.body.contains("id=\"error\""), "{}", paged.body);
    // A decision and an outcome are never on one record: nothing is found, at once.
    let never = console.get("/trail?decision=allowed&outcome=ok", Some(&cookie));
    assert_eq!(never.body.matches("class=\"record\"").count(), 0);
    let not_a_time = console.get("/trail?since=yesterday-ish", Some(&cookie));
    assert_eq!(not_a_time.status, 200);
    assert!(not_a_time.body.contains("id=\"error\""));
    // Whatever a field holds is a value, not SQL.
    let injected = console.get("/trail?tool=x%27%20OR%20%271%27%3D%271", Some(&cookie));
    assert_eq!(injected.body.matches("class=\"record\"").count(), 0);

    // A record opens its call: enter and exit side by side.
    let call = console.get("/trail/call?writer=desk-1&seq=1", Some(&cookie));
    assert!(call.body.contains("id=\"enter\"") && call.body.contains("id=\"exit\""));
    assert!(
        call.body.contains("&quot;stage&quot;:&quot;exit&quot;"),
        "{}",
        call.body
    );

    let verified = console.get("/trail/verify", Some(&cookie));
    assert!(
        verified.body.contains("id=\"verdict\" class=\"intact\""),
        "{}",
        verified.body
    );
    // The owner edits a searched column behind the trigger's back: verification says so.
    query(
        &url,
        "ALTER TABLE toolgate.audit DISABLE TRIGGER audit_searched;
         UPDATE toolgate.audit SET principal = 'bob' WHERE writer = 'desk-1' AND seq = 3;
         ALTER TABLE toolgate.audit ENABLE TRIGGER audit_searched;",
    );
    let verified = console.get("/trail/verify", Some(&cookie));
    assert!(
        verified.body.contains("id=\"verdict\" class=\"broken\""),
        "{}",
        verified.body
    );
    assert!(verified.body.contains("the row at seq 3 was edited"));
}

#[test]
fn f08_a_stopped_server_answers_unavailable_and_the_console_reconnects_when_it_is_back() {
    let Some((_serial, cluster, url, store)) = parent_store_on_own_cluster(ROLE, "console_f08")
    else {
        return;
    };
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(
            store.clone() as std::sync::Arc<dyn toolgate::approval::store::ApprovalStore>
        )
        .build()
        .unwrap();
    token(gate.run(|| wire("acme".into(), 3, "1".into())));
    let id = pending(&store, "pgconsole.wire");
    let console = serve(&url, operators());
    let cookie = console.login(TOKEN);
    let csrf = console.csrf(&cookie);
    cluster.stop();
    assert_eq!(console.get("/approvals", Some(&cookie)).status, 503);
    let answered = console.post(
        &format!("/approvals/{id}/answer"),
        &[("csrf", &csrf), ("action", "approve")],
        Some(&cookie),
        true,
    );
    assert_eq!(
        answered.header("location"),
        Some(&*format!("/approvals/{id}?problem=store"))
    );
    cluster.start();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let page = console.get("/approvals", Some(&cookie));
        if page.status == 200 && page.body.contains(&format!("data-request=\"{id}\"")) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the console did not reconnect: {page:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        request_state(&store, id),
        RequestState::Pending,
        "the answer during the outage was not recorded"
    );
}

#[test]
fn f09_the_live_list_moves_when_a_request_arrives() {
    let Some((_serial, url)) = parent_database(ROLE, "console_f09") else {
        return;
    };
    let (_store, gate) = store_gate(&url, "desk");
    let console = serve(&url, operators());
    let cookie = console.login(TOKEN);
    let request = format!(
        "GET /approvals/events HTTP/1.1\r\nHost: {}\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n",
        console.addr
    );
    let addr = console.addr;
    let events = console.runtime.spawn(async move {
        exchange(addr, &request, Duration::from_secs(10), |text| {
            text.contains("data: changed")
        })
        .await
    });
    std::thread::sleep(Duration::from_millis(500));
    token(gate.run(|| wire("acme".into(), 11, "1".into())));
    let text = console.runtime.block_on(events).unwrap();
    assert!(
        text.contains("text/event-stream") && text.contains("data: changed"),
        "{text}"
    );
}

#[test]
fn f10_a_trail_written_before_migration_10_is_searched_after_it_and_still_verifies() {
    let Some((_serial, url)) = parent_database(ROLE, "console_f10") else {
        return;
    };
    let sink = PostgresSink::builder()
        .writer("old-1")
        .connect(&url)
        .unwrap();
    let gate = Gate::builder()
        .mode(Mode::Shadow)
        .principal("carol")
        .audit(sink)
        .build()
        .unwrap();
    gate.run(|| balance("acme".into())).unwrap();
    drop(gate);
    crate::common::postgres::execute(&url, crate::support::BACK_TO_VERSION_9);
    // A line that is not JSON, as a hostile writer might leave: the migration fills nothing for it.
    query(
        &url,
        "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, line)
         VALUES ('junk', 1, '', '', 'enter', 'x', 1, 1, 'not json {')",
    );
    toolgate::postgres::migrate(&url, "toolgate").unwrap();
    let filled = query(
        &url,
        "SELECT writer, principal, mode, decision FROM toolgate.audit ORDER BY writer, seq",
    );
    assert_eq!(
        filled,
        [
            ["junk", "", "", ""].map(|v| (!v.is_empty()).then(|| v.to_owned())),
            [
                Some("old-1".into()),
                Some("carol".into()),
                Some("SHADOW".into()),
                Some("allowed".into())
            ],
            [
                Some("old-1".into()),
                Some("carol".into()),
                Some("SHADOW".into()),
                None
            ],
        ]
        .map(Vec::from)
    );
    let report = toolgate::postgres::verify_trail(&url, "toolgate").unwrap();
    assert!(report.writer("old-1").unwrap().is_intact(), "{report}");
    let console = serve(&url, operators());
    let cookie = console.login(TOKEN);
    let found = console.get("/trail?principal=carol", Some(&cookie));
    assert_eq!(found.body.matches("class=\"record\"").count(), 2);
}

#[test]
fn f11_the_console_serves_under_exactly_the_documented_grants() {
    let Some((_serial, url)) = parent_database(ROLE, "console_f11") else {
        return;
    };
    let roles = crate::common::postgres::documented_roles(&url);
    let (store, gate) = store_gate(&roles.agent, "desk");
    token(gate.run(|| wire("acme".into(), 21, "1".into())));
    let id = pending(&store, "pgconsole.wire");
    let console = serve(&roles.console, operators());
    let cookie = console.login(TOKEN);
    let csrf = console.csrf(&cookie);
    for path in [
        "/approvals",
        "/fleet",
        "/trail",
        "/trail/verify",
        "/promotion",
    ] {
        assert_eq!(console.get(path, Some(&cookie)).status, 200, "{path}");
    }
    console.post(
        &format!("/approvals/{id}/answer"),
        &[("csrf", &csrf), ("action", "approve")],
        Some(&cookie),
        true,
    );
    gate.run(|| wire("acme".into(), 21, "1".into()))
        .expect("approved on the page, under the console's role");
}

/// An Ed25519 key of the tests (from a fixed label, no one's key material) signing access tokens, and
/// its JWKS.
fn access_token(claims: serde_json::Value) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("console-key".into());
    jsonwebtoken::encode(&header, &claims, &console_key().0).expect("a signed token")
}

fn console_key() -> (jsonwebtoken::EncodingKey, String) {
    use base64::Engine as _;
    use ed25519_dalek::pkcs8::EncodePrivateKey;
    use sha2::Digest as _;
    let seed: [u8; 32] = sha2::Sha256::digest(b"toolgate console test key").into();
    let key = ed25519_dalek::SigningKey::from_bytes(&seed);
    let der = key.to_pkcs8_der().expect("a PKCS#8 document");
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.verifying_key().to_bytes());
    let jwks = serde_json::json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "use": "sig",
        "kid": "console-key", "x": x}]});
    (
        jsonwebtoken::EncodingKey::from_ed_der(der.as_bytes()),
        jwks.to_string(),
    )
}

const ISSUER: &str = "https://auth.console.test";
const AUDIENCE: &str = "https://console.example";

fn claims(sub: &str, scope: &str, lives: i64) -> serde_json::Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    serde_json::json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "scope": scope,
        "iat": now, "exp": now + lives})
}

#[test]
fn f12_an_access_token_logs_its_subject_in_for_no_longer_than_it_lives() {
    use toolgate::mcp::oauth::{Algorithm, Jwks, OAuth};
    let Some((_serial, url)) = parent_database(ROLE, "console_f12") else {
        return;
    };
    let (store, gate) = store_gate(&url, "desk");
    token(gate.run(|| wire("acme".into(), 31, "1".into())));
    let id = pending(&store, "pgconsole.wire");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let addr = runtime.block_on(async {
        let oauth = OAuth::builder("http://127.0.0.1/")
            .authorization_server(ISSUER)
            .audience(AUDIENCE)
            .algorithms([Algorithm::EdDSA])
            .leeway(Duration::ZERO)
            .jwks(Jwks::json(console_key().1));
        let console = Console::builder()
            .access_tokens(oauth, "toolgate:console")
            .connect(&url)
            .await
            .expect("a console of access tokens alone");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(console.serve(listener));
        addr
    });
    let console = Served { addr, runtime };

    for (why, token) in [
        ("no scope", access_token(claims("ravi", "profile", 300))),
        (
            "expired",
            access_token(claims("ravi", "toolgate:console", -10)),
        ),
        ("another audience", {
            let mut c = claims("ravi", "toolgate:console", 300);
            c["aud"] = "https://elsewhere.example".into();
            access_token(c)
        }),
        ("another issuer", {
            let mut c = claims("ravi", "toolgate:console", 300);
            c["iss"] = "https://auth.evil.test".into();
            access_token(c)
        }),
        (
            "a subject that hides a character",
            access_token(claims("ra\u{202E}vi", "toolgate:console", 300)),
        ),
        ("unsigned", {
            let token = access_token(claims("ravi", "toolgate:console", 300));
            let (head_body, _) = token.rsplit_once('.').unwrap();
            format!("{head_body}.")
        }),
    ] {
        let page = console.post("/login", &[("token", &token)], None, true);
        assert_eq!(page.status, 401, "{why}");
    }
    let cookie = console.login(&access_token(claims("ravi", "toolgate:console", 4)));
    let csrf = console.csrf(&cookie);
    console.post(
        &format!("/approvals/{id}/answer"),
        &[
            ("csrf", &csrf),
            ("action", "reject"),
            ("reason", "not today"),
        ],
        Some(&cookie),
        true,
    );
    match request_state(&store, id) {
        RequestState::Answered(Answer::Reject { by, .. }) => assert_eq!(by, "ravi"),
        other => panic!("not rejected by the token's subject: {other:?}"),
    }
    // The session ends with the token.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while console.get("/approvals", Some(&cookie)).status == 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "the session outlived its token"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn f13_the_console_command_refuses_what_it_cannot_serve_with_its_documented_exit_codes() {
    use crate::support::toolgate_prints;
    let Some((_serial, url)) = parent_database(ROLE, "console_f13") else {
        return;
    };
    let dir = crate::support::scratch_dir("console_f13");
    let good = dir.join("operators.toml");
    std::fs::write(
        &good,
        format!(
            "[operators]\nolga = \"{}\"\n",
            crate::support::sha256_hex(TOKEN)
        ),
    )
    .unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[operators]\nolga = \"not a hash\"\n").unwrap();
    let (good, bad) = (good.to_str().unwrap(), bad.to_str().unwrap());
    let listen = ["--listen", "127.0.0.1:0"];
    toolgate_prints(&["console", "--operators", good], 64, "which store?");
    toolgate_prints(
        &[&["console", "--store", &url][..], &listen].concat(),
        1,
        "no operators",
    );
    toolgate_prints(
        &[
            &["console", "--store", &url, "--operators", bad][..],
            &listen,
        ]
        .concat(),
        1,
        "not a SHA-256",
    );
    toolgate_prints(
        &[
            &[
                "console",
                "--store",
                &url,
                "--operators",
                "/nonexistent/operators.toml",
            ][..],
            &listen,
        ]
        .concat(),
        1,
        "cannot read",
    );
    toolgate_prints(
        &[
            &[
                "console",
                "--store",
                "postgres://toolgate@127.0.0.1:1/none",
                "--operators",
                good,
            ][..],
            &listen,
        ]
        .concat(),
        3,
        "toolgate console:",
    );
    toolgate_prints(
        &[
            "console",
            "--store",
            &url,
            "--operators",
            good,
            "--jwt-issuer",
            ISSUER,
        ],
        64,
        "--jwks",
    );
}

/// A policy file refused on reload is told on the fleet page, where the operator who saved it looks:
/// when, by whose process, who changed it and why, the file's text inert and its hidden characters
/// marked. Broken: the refusal is only in the trail's lines, or the page renders the file's markup.
#[cfg(feature = "policy-file")]
#[test]
fn f14_a_refused_policy_reload_is_told_on_the_fleet_page() {
    use toolgate::policy_file::LivePolicy;
    let Some((_serial, url)) = parent_database(ROLE, "console_f14") else {
        return;
    };
    let sink = PostgresSink::builder()
        .writer("desk-14")
        .connect(&url)
        .unwrap();
    let dir = std::env::temp_dir().join(format!("toolgate-f14-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("desk.toml");
    std::fs::write(&path, "format = 1\n[defaults]\nceiling = \"ADVISORY\"\n").unwrap();
    let live = LivePolicy::load(&path).unwrap();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .policy(live.clone())
        .audit(sink)
        .build()
        .unwrap();
    std::fs::write(
        &path,
        "format = 1\n[defaults]\nceiling = \"<b>HIGH</b>\u{202e}\"\n",
    )
    .unwrap();
    live.reload("ops on call")
        .expect_err("the file does not check");
    assert_eq!(gate.mode(), Mode::Advisory, "the gate kept its policy");
    drop(gate);
    // A fleet's policy, applied and in force, beside it.
    let fleet = Fleet::connect(&url, "desks").unwrap();
    let member = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    let applied = toolgate::postgres::fleet::apply_policy(
        &url,
        "toolgate",
        "desks",
        "format = 1\n[defaults]\nceiling = \"SHADOW\"\n",
        "ops <i>lead</i>",
    )
    .unwrap()
    .expect("a digest");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while member.mode() != Mode::Shadow {
        assert!(
            std::time::Instant::now() < deadline,
            "the member never followed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let console = serve(&url, operators());
    let cookie = console.login(TOKEN);
    let page = console.get("/fleet", Some(&cookie));
    let body = &page.body;
    let policy = &body[body.find("class=\"policy\"").expect("the fleet's policy")..];
    let policy = &policy[..policy.find("</p>").expect("its end")];
    assert!(policy.contains(&applied[..12]), "{policy}");
    assert_eq!(
        policy.matches("ops &lt;i&gt;lead&lt;/i&gt;").count(),
        2,
        "{policy}"
    );
    let table = &body[body
        .find("id=\"refused\"")
        .expect("the table of refused policies")..];
    assert!(table.contains("desk-14"), "{table}");
    assert!(table.contains("ops on call"), "{table}");
    assert!(table.contains("HIGH"), "{table}");
    assert!(!table.contains("<b>"), "markup rendered: {table}");
    assert!(
        !table.contains('\u{202e}'),
        "a bidi override shown raw: {table}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The promotion page counts what each rule logged only would have ruled otherwise, per bucket, its
/// rule escaped; a forged row whose line is not JSON counts for nothing and fails nothing.
#[test]
fn f15_the_promotion_page_counts_each_rule_logged_only() {
    use toolgate::policy_file::{LivePolicy, PolicyFile};
    let Some((_serial, url)) = parent_database(ROLE, "console_f15") else {
        return;
    };
    let file = PolicyFile::parse(
        "<b>ops</b>.toml",
        "format = 1\n[shadow.defaults]\ndeny = [\"pgconsole.balance\"]\n",
    )
    .unwrap();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .policy(LivePolicy::new(file))
        .audit(
            PostgresSink::builder()
                .writer("desk-15")
                .connect(&url)
                .unwrap(),
        )
        .build()
        .unwrap();
    for _ in 0..3 {
        gate.run(|| balance("acme".into())).unwrap();
    }
    drop(gate);
    query(
        &url,
        "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, line)
         VALUES ('forger', 1, repeat('0', 64), repeat('0', 64), 'enter', 'x', 1, 1,
                 '{\"rule_in_shadow\":\"refused by <script>\\u202e')",
    );

    let console = serve(&url, operators());
    let cookie = console.login(TOKEN);
    let page = console.get("/promotion", Some(&cookie));
    assert_eq!(page.status, 200, "{}", page.body);
    let body = &page.body;
    let table = &body[body
        .find("id=\"shadow-rules\"")
        .expect("the table of rules logged only")..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(
        table.contains(
            "refused (DENY_LISTED) by pgconsole.balance (&lt;b&gt;ops&lt;/b&gt;.toml:3:9)"
        ),
        "{table}"
    );
    assert!(table.contains("<td>3</td>"), "{table}");
    assert!(
        !table.contains("<script>") && !body.contains("<b>ops"),
        "{table}"
    );
    assert!(
        !table.contains("forger") && !table.contains("script"),
        "{table}"
    );
}
