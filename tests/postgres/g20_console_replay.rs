//! The console's policy replay (`/policy/replay`): a candidate pasted on the page, the trail's calls
//! decided again under it beside the policies in force, and the flip set shown with each count linked
//! to exactly its records. Guarantee 20: only a logged-in operator's form, carrying the session's
//! token, replays; what an agent wrote shows as markers; a chain that does not verify is said first.
//! The trail is written by real gates through `PostgresSink`, so the numbers are known.

use std::time::Duration;

use toolgate::audit::{AuditRecord, AuditSink, Decision, Stage};
use toolgate::policy_file::PolicyFile;
use toolgate::postgres::Fleet;
use toolgate::{Gate, Mode};

use crate::common::postgres::{database, query};
use crate::g12_postgres_trail::replay::{NONE, gate, policy};
use crate::g20_console::{Served, TOKEN, operators, serve};
use crate::support::trail::{mark, sink};

/// alice's calls ask for an approval, bob's are refused.
pub(crate) const STRICTER: &str =
    "format = 1\n[defaults]\nask = [\"fa.mark\"]\n[principals.bob]\ndeny = [\"fa.mark\"]\n";
/// A policy in force that the page is not given.
const OTHER: &str = "format = 1\n# the policy of north\n";

/// A row of the page's flip table.
#[derive(Debug)]
struct Row {
    principal: String,
    from: String,
    to: String,
    calls: u64,
    href: String,
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let at = text.find(start)? + start.len();
    let len = text[at..].find(end)?;
    Some(&text[at..at + len])
}

fn flip_rows(body: &str) -> Vec<Row> {
    let Some(table) = between(body, "<table id=\"flips\">", "</table>") else {
        return Vec::new();
    };
    table
        .split("<tr class=\"flip")
        .skip(1)
        .map(|row| Row {
            principal: between(row, "<td class=\"principal\">", "</td>")
                .unwrap()
                .to_owned(),
            from: between(row, "data-from=\"", "\"").unwrap().to_owned(),
            to: between(row, "data-to=\"", "\"").unwrap().to_owned(),
            calls: between(row, "<a class=\"records\" href=\"", "</a>")
                .and_then(|a| a.split_once("\">"))
                .map(|(_, n)| n.parse().unwrap())
                .unwrap(),
            href: between(row, "<a class=\"records\" href=\"", "\"")
                .unwrap()
                .replace("&amp;", "&"),
        })
        .collect()
}

/// The (writer, seq) of each record the records page lists.
fn listed(body: &str) -> Vec<(String, i64)> {
    let Some(table) = between(body, "<table id=\"results\">", "</table>") else {
        return Vec::new();
    };
    table
        .split("<tr class=\"record\">")
        .skip(1)
        .map(|row| {
            let cells: Vec<&str> = row
                .split("<td")
                .skip(2)
                .take(2)
                .map(|cell| between(cell, ">", "</td>").unwrap())
                .collect();
            (cells[0].to_owned(), cells[1].parse().unwrap())
        })
        .collect()
}

/// The `seq` of each `enter` record of `writer`, in order.
fn enters(url: &str, writer: &str) -> Vec<(String, i64)> {
    query(
        url,
        &format!(
            "SELECT seq FROM toolgate.audit WHERE writer = '{writer}' AND stage = 'enter' ORDER BY seq"
        ),
    )
    .into_iter()
    .map(|r| (writer.to_owned(), r[0].as_deref().unwrap().parse().unwrap()))
    .collect()
}

/// east: alice marks three times; west: bob twice, both under `NONE`; north: carol once under a
/// policy the page is not given.
pub(crate) fn trail(url: &str) {
    let none = policy("none.toml", NONE);
    let east = gate(url, "east", "alice", &none);
    let west = gate(url, "west", "bob", &none);
    let north = gate(url, "north", "carol", &policy("other.toml", OTHER));
    for i in 0..3 {
        east.run(|| mark(format!("r-east-{i}"))).unwrap();
    }
    for i in 0..2 {
        west.run(|| mark(format!("r-west-{i}"))).unwrap();
    }
    north.run(|| mark("r-north".into())).unwrap();
}

struct Logged {
    console: Served,
    cookie: String,
    csrf: String,
}

fn logged_in(url: &str) -> Logged {
    let console = serve(url, operators());
    let cookie = console.login(TOKEN);
    let csrf = console.csrf(&cookie);
    Logged {
        console,
        cookie,
        csrf,
    }
}

impl Logged {
    fn replay(&self, fields: &[(&str, &str)]) -> crate::common::http::Answer {
        let mut form = vec![("csrf", self.csrf.as_str())];
        form.extend_from_slice(fields);
        self.console
            .post("/policy/replay", &form, Some(&self.cookie), true)
    }

    fn get(&self, path: &str) -> crate::common::http::Answer {
        self.console.get(path, Some(&self.cookie))
    }
}

#[test]
fn g20_replay_the_page_answers_only_a_logged_in_operators_form() {
    let url = database("console_replay_refusals");
    trail(&url);
    let logged = logged_in(&url);
    let console = &logged.console;
    let fields = [("candidate", STRICTER), ("in_force", NONE)];

    let page = console.get("/policy/replay", None);
    assert_eq!(page.status, 303, "{page:?}");
    assert_eq!(page.header("location"), Some("/login"));
    let mut form = vec![("csrf", logged.csrf.as_str())];
    form.extend_from_slice(&fields);
    let page = console.post("/policy/replay", &form, None, true);
    assert_eq!(page.status, 401, "{page:?}");
    assert!(!page.body.contains("flips"), "{}", page.body);

    // Logged in, without the session's token, or with another.
    let page = console.post("/policy/replay", &fields, Some(&logged.cookie), true);
    assert_eq!(page.status, 403, "{page:?}");
    let mut wrong = vec![("csrf", "0".repeat(64))];
    wrong.extend(fields.iter().map(|(k, v)| (*k, (*v).to_owned())));
    let wrong: Vec<(&str, &str)> = wrong.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let page = console.post("/policy/replay", &wrong, Some(&logged.cookie), true);
    assert_eq!(page.status, 403, "{page:?}");
    assert!(!page.body.contains("table id=\"flips\""), "{}", page.body);

    // Sent from another site, with the right token.
    let request = format!(
        "POST /policy/replay HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {}\r\nOrigin: http://evil.example\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        logged.cookie,
        5 + logged.csrf.len(),
        format_args!("csrf={}", logged.csrf)
    );
    let page = console.send(request);
    assert_eq!(page.status, 403, "{page:?}");

    // The form, and the navigation's link to it.
    let page = logged.get("/policy/replay");
    assert_eq!(page.status, 200, "{page:?}");
    assert!(
        page.body.contains(
            "<form class=\"answer\" id=\"replay\" method=\"post\" action=\"/policy/replay\">"
        ) || page.body.contains("id=\"replay\""),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("href=\"/policy/replay\""),
        "{}",
        page.body
    );
    assert!(
        logged
            .get("/approvals")
            .body
            .contains("href=\"/policy/replay\""),
        "the navigation links the page"
    );
}

#[test]
fn g20_replay_a_stricter_candidate_shows_each_flip_and_links_its_records() {
    let url = database("console_replay_flips");
    trail(&url);
    let logged = logged_in(&url);
    let page = logged.replay(&[("candidate", STRICTER), ("in_force", NONE)]);
    assert_eq!(page.status, 200, "{page:?}");
    let body = &page.body;
    assert!(!body.contains("chain-broken"), "{body}");
    let rows = flip_rows(body);
    let shape: Vec<(&str, &str, &str, u64)> = rows
        .iter()
        .map(|r| {
            (
                r.principal.as_str(),
                r.from.as_str(),
                r.to.as_str(),
                r.calls,
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("alice", "allowed", "asks", 3),
            ("bob", "allowed", "refused", 2)
        ],
        "{body}"
    );
    // Six calls, carol's not decided: its policy is counted apart, by digest.
    assert!(body.contains("<strong id=\"calls\">6</strong>"), "{body}");
    assert!(body.contains("<strong id=\"decided\">5</strong>"), "{body}");
    assert!(body.contains("<strong id=\"flipped\">5</strong>"), "{body}");
    let other = PolicyFile::parse("other", OTHER).unwrap();
    let unknown = between(body, "id=\"unknown-policies\"", "</div>").expect("unknown policies");
    assert!(
        unknown.contains(other.digest()) && unknown.contains("<strong>1</strong>"),
        "{unknown}"
    );
    // Each count leads to exactly the records behind it: the `enter` records of its writer.
    for (row, writer) in rows.iter().zip(["east", "west"]) {
        let records = logged.get(&row.href);
        assert_eq!(records.status, 200, "{records:?}");
        assert_eq!(
            listed(&records.body),
            enters(&url, writer),
            "{}",
            records.body
        );
    }

    // Without the file in force, every call but none is counted apart.
    let page = logged.replay(&[("candidate", STRICTER)]);
    assert!(flip_rows(&page.body).is_empty(), "{}", page.body);
    let none = PolicyFile::parse("none", NONE).unwrap();
    assert!(page.body.contains(none.digest()), "{}", page.body);
    assert!(
        page.body.contains("<strong id=\"decided\">0</strong>"),
        "{}",
        page.body
    );

    // Narrowed to bob: his row alone.
    let page = logged.replay(&[
        ("candidate", STRICTER),
        ("in_force", NONE),
        ("principal", "bob"),
    ]);
    let rows = flip_rows(&page.body);
    assert_eq!(rows.len(), 1, "{}", page.body);
    assert_eq!((rows[0].principal.as_str(), rows[0].calls), ("bob", 2));
    // A time that is not one replays nothing, and says so.
    let page = logged.replay(&[
        ("candidate", STRICTER),
        ("in_force", NONE),
        ("since", "yesterday"),
    ]);
    assert_eq!(page.status, 422, "{page:?}");
    assert!(flip_rows(&page.body).is_empty() && page.body.contains("not a UTC date"));
}

#[test]
fn g20_replay_a_fleets_policy_in_force_is_taken_from_the_store() {
    let url = database("console_replay_fleet");
    let fleet = Fleet::builder()
        .poll_interval(Duration::from_millis(100))
        .connect(&url, "desk")
        .unwrap();
    let gate = fleet
        .join(
            Gate::builder()
                .mode(Mode::PartialAuto)
                .principal("bob")
                .audit(sink(&url, "desk-1", Duration::from_secs(10))),
        )
        .unwrap();
    let digest = toolgate::postgres::fleet::apply_policy(&url, "toolgate", "desk", NONE, "olga")
        .unwrap()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while gate.policy_digest().as_deref() != Some(digest.as_str()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the gate never followed the fleet's policy"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in 0..4 {
        gate.run(|| mark(format!("r-fleet-{i}"))).unwrap();
    }
    let logged = logged_in(&url);
    // Nothing pasted in force: the fleet's policy, as the store keeps it, decides the calls.
    let page = logged.replay(&[("candidate", STRICTER)]);
    let body = &page.body;
    let rows = flip_rows(body);
    assert_eq!(rows.len(), 1, "{body}");
    assert_eq!(
        (
            rows[0].principal.as_str(),
            rows[0].to.as_str(),
            rows[0].calls
        ),
        ("bob", "refused", 4),
        "{body}"
    );
    let in_force = between(body, "<table id=\"in-force\">", "</table>").unwrap();
    assert!(
        in_force.contains("fleet desk") && in_force.contains(&digest),
        "{in_force}"
    );
    assert!(!body.contains("id=\"unknown-policies\""), "{body}");
}

#[test]
fn g20_replay_a_broken_chain_is_said_before_any_count() {
    let url = database("console_replay_broken");
    trail(&url);
    query(
        &url,
        "UPDATE toolgate.audit SET line = replace(line, 'r-west-1', 'r-west-9')
         WHERE writer = 'west' AND stage = 'enter' AND line LIKE '%r-west-1%'",
    );
    let logged = logged_in(&url);
    let page = logged.replay(&[("candidate", STRICTER), ("in_force", NONE)]);
    assert_eq!(page.status, 200, "{page:?}");
    let body = &page.body;
    let alert = body.find("id=\"chain-broken\"").expect("the break is said");
    let alert_text = between(body, "id=\"chain-broken\"", "</div>").unwrap();
    assert!(
        alert_text.contains("role=\"alert\"") || body[..alert].contains("role=\"alert\""),
        "{alert_text}"
    );
    assert!(alert_text.contains("writer west"), "{alert_text}");
    assert!(!alert_text.contains("writer east"), "{alert_text}");
    for count in ["id=\"summary\"", "id=\"flips\"", "id=\"in-force\""] {
        let at = body
            .find(count)
            .unwrap_or_else(|| panic!("{count}: {body}"));
        assert!(alert < at, "{count} comes before the break: {body}");
    }
    // bob's first call, before the edit, is still replayed; his second is not.
    let rows = flip_rows(body);
    assert!(
        rows.iter().any(|r| r.principal == "bob" && r.calls == 1),
        "{body}"
    );
    assert!(!body.contains("id=\"rows-edited\""), "{body}");

    // The owner edits a column alone, behind the trigger's back: the chain verifies, the records the
    // counts link to would not say what was recorded, and the page says so first.
    query(
        &url,
        "ALTER TABLE toolgate.audit DISABLE TRIGGER audit_searched;
         UPDATE toolgate.audit SET principal = 'mallory'
         WHERE writer = 'east' AND stage = 'enter' AND line LIKE '%r-east-2%';
         ALTER TABLE toolgate.audit ENABLE TRIGGER audit_searched;",
    );
    let page = logged.replay(&[("candidate", STRICTER), ("in_force", NONE)]);
    let body = &page.body;
    let edited = body.find("id=\"rows-edited\"").expect("the edit is said");
    let said = between(body, "id=\"rows-edited\"", "</div>").unwrap();
    let seq = query(
        &url,
        "SELECT seq FROM toolgate.audit WHERE writer = 'east' AND principal = 'mallory'",
    )[0][0]
        .clone()
        .unwrap();
    assert!(
        said.contains(&format!("writer east: the row at seq {seq} was edited")),
        "{said}"
    );
    assert!(edited < body.find("id=\"flips\"").unwrap(), "{body}");
}

#[test]
fn g20_replay_a_candidate_that_does_not_check_shows_its_errors_by_line() {
    let url = database("console_replay_errors");
    trail(&url);
    let logged = logged_in(&url);
    let broken = "format = 1\n[defaults]\ndeny = [\"fa.mark\"\nask = 3\n";
    let page = logged.replay(&[("candidate", broken), ("in_force", NONE)]);
    assert_eq!(page.status, 422, "{page:?}");
    let errors = between(
        &page.body,
        "<ol class=\"errors\" id=\"policy-errors\">",
        "</ol>",
    )
    .unwrap_or_else(|| panic!("{}", page.body));
    let expected = PolicyFile::parse("candidate", broken).unwrap_err();
    assert!(!expected.0.is_empty());
    for error in &expected.0 {
        let said = format!("line {}, column {}: ", error.line, error.column);
        assert!(errors.contains(&said), "{said} in {errors}");
    }
    assert!(flip_rows(&page.body).is_empty());
    // The candidate is kept in the form, escaped, to correct.
    assert!(
        page.body.contains("deny = [&quot;fa.mark&quot;"),
        "{}",
        page.body
    );

    // A tool no linked tool is: the check's error, on its line.
    let unknown = "format = 1\n\n[defaults]\ndeny = [\"fa.no_such_tool\"]\n";
    let page = logged.replay(&[("candidate", unknown)]);
    assert_eq!(page.status, 422, "{page:?}");
    let error = &PolicyFile::parse("candidate", unknown).unwrap_err().0[0];
    assert_eq!(error.line, 4, "{error}");
    assert!(
        page.body.contains("data-line=\"4\"") && page.body.contains("line 4, column "),
        "{}",
        page.body
    );
}

#[test]
fn g20_replay_names_an_agent_wrote_show_as_markers() {
    let url = database("console_replay_names");
    let none = policy("none.toml", NONE);
    let gates = [
        gate(&url, "w-plain", "alice", &none),
        gate(&url, "w-alike", "\u{430}lice", &none),
        gate(&url, "w-rlo", "b\u{202e}ob", &none),
    ];
    for gate in &gates {
        gate.run(|| mark("r-name".into())).unwrap();
    }
    {
        // A record of a tool no linked tool is, written by a writer of the trail.
        let sink = sink(&url, "w-other", Duration::from_secs(10));
        let mut record = AuditRecord::new(Stage::Enter, "fa.m\u{202e}ark", Mode::FullAuto, 1);
        record.call = 1;
        record.principal = Some("alice".into());
        record.decision = Some(Decision::Allowed);
        record.policy_digest = Some(none.digest().to_owned());
        sink.record(&record).unwrap();
    }
    let logged = logged_in(&url);
    let page = logged.replay(&[("candidate", STRICTER), ("in_force", NONE)]);
    assert_eq!(page.status, 200, "{page:?}");
    let body = &page.body;
    for raw in ['\u{202e}', '\u{430}'] {
        assert!(!body.contains(raw), "{raw:?} raw on the page: {body}");
    }
    let rows = flip_rows(body);
    assert_eq!(rows.len(), 3, "{body}");
    let principals: Vec<&str> = rows.iter().map(|r| r.principal.as_str()).collect();
    assert!(
        principals.iter().any(|p| p.contains(">U+0430</span>lice")),
        "{principals:?}"
    );
    assert!(
        principals
            .iter()
            .any(|p| p.contains("b<span class=\"invisible\"") && p.contains(">U+202E</span>ob")),
        "{principals:?}"
    );
    // The plain `alice`, beside a name that reads as it, is marked as spelled out too.
    assert!(
        principals
            .iter()
            .any(|p| p.contains("class=\"alike\"") && p.contains(">alice</span>")),
        "{principals:?}"
    );
    let other = between(body, "<ul class=\"counts\" id=\"not-replayed\">", "</ul>").unwrap();
    assert!(other.contains("fa.m<span class=\"invisible\""), "{other}");
}
