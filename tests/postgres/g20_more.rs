//! More outside attacks on guarantee 20 (the operator console), where the first ones did not go:
//! the trail's searched columns against the lines verification reads, the live list under many
//! streams, a flood of notifications and sessions that end by their life, access tokens beside the
//! session's life and the operators file's names, the trail's paging, the promotion and verification
//! pages under extreme values, the console beside the taint latch, a stopped agent and a changed
//! target, and the console's resources (huge forms, many log-ins, slow clients).
//!
//! Written from the documentation and the public API only, against the real `toolgate console`
//! command (or a console served in this process), a real PostgreSQL, and gates in this process.
//! Every test asserts the guarantee as it should hold: a test that fails is an attack that got
//! through.
//!
//! Got through when written:
//! - a20_110: an access token whose subject is `olga` logs in and answers; the store records the
//!   answer as `olga`'s, the same as the operators file's olga: the record cannot tell them apart.
//! - a20_117: reject and stop on one request of an agent, then an approval of its other pending
//!   request: the agent retries only the other one, and it runs (the gate never reads the stop and
//!   stays FULL_AUTO).
//! - a20_119: after some sixty wrong log-ins from anyone, the console answers every log-in `429 Too
//!   Many Requests`, the operators' own tokens included, from every address: anyone who reaches the
//!   log-in form locks every operator out.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::approval::store::Answer;
use toolgate::postgres::{PostgresSink, PostgresStore, RequestState};
use toolgate::{Denied, Gate, Mode, Rollback, tool};

use crate::common::postgres::{execute, query};
use crate::support::console_attacks::*;
use crate::support::{chained_hash, parent_database, scratch_dir, wait};

const CHILD_ROLE: &str = "TOOLGATE_G20_MORE_CHILD";

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

/// Move money.
#[tool(risk = "HIGH_WRITE", domain = "m20", record_arguments)]
pub(crate) fn pay(account: String) -> Result<(), Denied> {
    ran(format!("pay:{account}"));
    Ok(())
}

/// Drop a database: it cannot be undone.
#[tool(risk = "HIGH_WRITE", domain = "m20", record_arguments, target = instance,
       evidence = describe, rollback = plan, irreversible)]
pub(crate) fn drop_db(instance: String, note: String) -> Result<(), Denied> {
    ran(format!("drop_db:{instance}:{note}"));
    Ok(())
}

/// Write a note, its text recorded.
#[tool(risk = "LOW_WRITE", domain = "m20", record_arguments)]
pub(crate) fn jot(text: String) -> Result<(), Denied> {
    ran(format!("jot:{text}"));
    Ok(())
}

/// Read a message a stranger wrote: untrusted.
#[tool(risk = "READ_ONLY", domain = "m20", untrusted_output)]
pub(crate) fn read_mail(id: u64) -> Result<String, Denied> {
    Ok(format!("mail {id}"))
}

// ---------------------------------------------------------------------------------------------------
// The bench.

const OLGA: &str = "olga-token-of-g20-more";
const RAVI: &str = "ravi-token-of-g20-more";

struct Bench {
    _serial: std::sync::MutexGuard<'static, ()>,
    url: String,
    console: ConsoleProcess,
    store: Arc<PostgresStore>,
}

impl Bench {
    fn gate(&self) -> Gate {
        gate_of(self.store.clone(), "desk")
    }

    fn olga(&self) -> Browser {
        login(self.console.addr, OLGA)
    }

    fn state(&self, id: i64) -> RequestState {
        wait(self.store.show(id))
            .expect("the store answers")
            .expect("the request")
            .state
    }
}

fn store_of(url: &str) -> Arc<PostgresStore> {
    Arc::new(PostgresStore::connect(url).expect("the store"))
}

fn gate_of(store: Arc<PostgresStore>, agent: &str) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .agent(agent)
        .principal("alice")
        .approval_store_shared(store)
        .build()
        .expect("a gate")
}

/// A new database `name`, the console on it (as the command, with `args`) for olga and ravi, and a
/// store; `None` in a child's role.
fn bench_with(name: &str, args: &[&str]) -> Option<Bench> {
    let (serial, url) = parent_database(CHILD_ROLE, name)?;
    let dir = scratch_dir(name);
    let ops = operators_file(&dir, &[("olga", OLGA), ("ravi", RAVI)]);
    let console = ConsoleProcess::start(&url, &ops, args);
    let store = store_of(&url);
    Some(Bench {
        _serial: serial,
        url,
        console,
        store,
    })
}

fn bench(name: &str) -> Option<Bench> {
    bench_with(name, &[])
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

fn answer_path(id: i64) -> String {
    format!("/approvals/{id}/answer")
}

/// Whether the console says it took the answer.
fn taken(reply: &Reply) -> bool {
    (300..400).contains(&reply.status)
        && reply
            .header("location")
            .is_some_and(|l| l.starts_with("/approvals") && !l.contains("problem"))
}

/// Answers request `id` with `action` (and `extra` fields) from its page.
fn answer(browser: &Browser, id: i64, action: &str, extra: &[(&str, &str)]) -> Reply {
    let csrf = browser.csrf();
    let mut fields = vec![("csrf", csrf.as_str()), ("action", action)];
    fields.extend_from_slice(extra);
    browser.post(&answer_path(id), &fields)
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

/// `text` as a PostgreSQL literal (dollar-quoted with a tag nothing here holds).
fn literal(text: &str) -> String {
    assert!(!text.contains("$m20$"));
    format!("$m20${text}$m20$")
}

// ---------------------------------------------------------------------------------------------------
// The trail.

/// A gate of agent `desk` for `principal` writing the trail as `writer`.
fn trail_gate(url: &str, writer: &str, principal: &str) -> Gate {
    let sink = PostgresSink::builder()
        .writer(writer)
        .connect(url)
        .expect("a sink");
    Gate::builder()
        .mode(Mode::FullAuto)
        .agent("desk")
        .principal(principal)
        .audit(sink)
        .build()
        .expect("a gate")
}

/// The links of a trail page to its records' calls.
fn call_links(html: &str) -> Vec<String> {
    elements(html)
        .into_iter()
        .filter(|e| e.name == "a" && e.attr("class") == Some("call"))
        .filter_map(|e| e.attr("href").map(unescape))
        .collect()
}

/// The link of a trail page to its next page, if any.
fn next_link(html: &str) -> Option<String> {
    elements(html)
        .into_iter()
        .filter(|e| e.name == "a")
        .filter_map(|e| e.attr("href").map(unescape))
        .find(|href| href.starts_with("/trail?") && href.contains("before_"))
}

/// Whether the search `/trail?QUERY` lists a record of `writer`.
fn search_finds(browser: &Browser, fields: &[(&str, &str)], writer: &str) -> bool {
    let page = browser.get(&format!("/trail?{}", form(fields)));
    assert!(page.status < 500, "{fields:?}: {}", page.describe());
    let needle = format!("writer={}", urlencode(writer));
    call_links(&page.body).iter().any(|l| l.contains(&needle))
}

/// The members of a line: each key and value as JSON text.
type Members = Vec<(String, String)>;

/// A line as a writer writes it: the members in the order given, each key and value as given.
fn raw_line(members: &[(String, String)]) -> String {
    let inner: Vec<String> = members.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("{{{}}}", inner.join(","))
}

/// The members of a genuine line, keys sorted, each as JSON text, without `hash`.
fn members_of(line: &str) -> Vec<(String, String)> {
    let fields: BTreeMap<String, Value> = serde_json::from_str(line).expect("a record");
    fields
        .into_iter()
        .filter(|(k, _)| k != "hash")
        .map(|(k, v)| (serde_json::to_string(&k).unwrap(), v.to_string()))
        .collect()
}

/// Sets member `key` (JSON text of the key as a writer spells it) to `value`, keeping the members
/// sorted by their text.
fn set_member(members: &mut Vec<(String, String)>, key: &str, value: &str) {
    members.retain(|(k, _)| k != key);
    members.push((key.to_owned(), value.to_owned()));
    members.sort_by(|a, b| a.0.cmp(&b.0));
}

/// The genesis hash and a genuine `enter` line of principal `alice` (as templates of forged rows).
fn genuine(url: &str) -> (String, String) {
    let gate = trail_gate(url, "genuine", "alice");
    gate.run(|| jot("genuine".into())).expect("a note");
    drop(gate);
    let rows = query(
        url,
        "SELECT prev_hash, line FROM toolgate.audit WHERE writer = 'genuine' ORDER BY seq",
    );
    let genesis = rows[0][0].clone().unwrap();
    let enter = rows
        .iter()
        .map(|r| r[1].clone().unwrap())
        .find(|l| l.contains("\"stage\":\"enter\""))
        .expect("an enter record");
    // The forgery reproduces the genuine line exactly.
    let members = members_of(&enter);
    let body = raw_line(&members);
    let fields: Value = serde_json::from_str(&enter).unwrap();
    let prev = fields["prev_hash"].as_str().unwrap();
    assert_eq!(
        chained_hash(prev, &body),
        fields["hash"].as_str().unwrap(),
        "the hash of a genuine line, recomputed"
    );
    (genesis, enter)
}

/// Writes, as a writer's role may, one row of `writer` at `seq` 1 whose line is `members` (hash
/// computed and put in its sorted place), its columns as a sink writes them; `written_at` if given.
fn forge_row(
    url: &str,
    writer: &str,
    genesis: &str,
    members: &[(String, String)],
    written_at: Option<&str>,
) {
    let at = written_at.map(literal);
    let columns: Vec<(&str, &str)> = at.iter().map(|at| ("written_at", at.as_str())).collect();
    forge_row_with(url, writer, genesis, members, &columns);
}

/// As [`forge_row`], the row's other `columns` (name, SQL value) given in the `INSERT`.
fn forge_row_with(
    url: &str,
    writer: &str,
    genesis: &str,
    members: &[(String, String)],
    columns: &[(&str, &str)],
) {
    let mut members = members.to_vec();
    set_member(&mut members, "\"seq\"", "1");
    set_member(&mut members, "\"prev_hash\"", &json!(genesis).to_string());
    let body = raw_line(&members);
    let hash = chained_hash(genesis, &body);
    set_member(&mut members, "\"hash\"", &json!(hash).to_string());
    insert_row(url, writer, genesis, &hash, &raw_line(&members), columns);
}

/// Inserts, as a writer's role may, a row of `writer` at `seq` 1, with its other `columns`.
fn insert_row(
    url: &str,
    writer: &str,
    prev: &str,
    hash: &str,
    line: &str,
    columns: &[(&str, &str)],
) {
    let at_column: String = columns.iter().map(|(c, _)| format!(", {c}")).collect();
    let at_value: String = columns.iter().map(|(_, v)| format!(", {v}")).collect();
    execute(
        url,
        &format!(
            "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, \
             line{at_column}) VALUES ({w}, 1, {p}, {h}, 'enter', 'm20.jot', 1, 1, {l}{at_value})",
            w = literal(writer),
            p = literal(prev),
            h = literal(hash),
            l = literal(line),
        ),
    );
}

/// Whether `verify_trail` finds `writer`'s chain intact, columns and all.
fn verified_intact(url: &str, writer: &str) -> bool {
    let report = toolgate::postgres::verify_trail(url, "toolgate").expect("the trail");
    report
        .writer(writer)
        .unwrap_or_else(|| panic!("no report of {writer}: {report}"))
        .is_intact()
}

/// Attack: as an agent, record a call whose argument holds a NUL (`\u0000` in the line, which
/// PostgreSQL's `jsonb` does not take), or a lone surrogate, so that the trail's searched columns
/// (read from the line) stay empty and the record hides from a search by principal and tool.
/// Guarantee 20 (docs/console.md): the trail is searched by tool and principal; a record that
/// verifies is found under the tool and principal its line carries.
#[test]
fn a20_101_an_argument_holding_a_nul_hides_no_record_from_the_search() {
    let Some(bench) = bench("a20_101") else {
        return;
    };
    let gate = trail_gate(&bench.url, "w101", "mallory");
    gate.run(|| jot("before\0after".into())).expect("a note");
    drop(gate);
    let control = trail_gate(&bench.url, "w101c", "mallory");
    control.run(|| jot("plain".into())).expect("a note");
    drop(control);
    let olga = bench.olga();
    assert!(search_finds(&olga, &[("principal", "mallory")], "w101c"));
    let intact = verified_intact(&bench.url, "w101");
    let line = query(
        &bench.url,
        "SELECT line FROM toolgate.audit WHERE writer = 'w101c' ORDER BY seq LIMIT 1",
    )[0][0]
        .clone()
        .unwrap();
    let line: Value = serde_json::from_str(&line).unwrap();
    let decision = line["decision"].as_str().expect("a decision").to_owned();
    for fields in [
        vec![("principal", "mallory")],
        vec![("tool", "m20.jot")],
        vec![("agent", "desk")],
        vec![("decision", decision.as_str())],
    ] {
        let found = search_finds(&olga, &fields, "w101");
        assert!(
            found || !intact,
            "a record whose argument holds a NUL verifies, yet the search {fields:?} does not find \
             it (its control does: {})",
            search_finds(&olga, &fields, "w101c")
        );
    }
}

/// Attack: as a writer's role, insert correctly chained rows whose line names the principal in odd
/// ways: twice (`"principal":"alice","principal":"mallory"`), as a number, an object, an array, null,
/// a key in another case or spelled with an escape, beside a NUL, a nesting deeper than readers take,
/// a line of 17 MiB, a line that is JSON but no object.
/// Guarantee 20 (docs/console.md, `WriterReport::columns_differ`): verification checks each row's
/// searched columns against its line, so a row that verifies is found by a search for the principal
/// its line carries, and by no other name; a line that names two principals does not verify.
#[test]
fn a20_102_lines_that_name_the_principal_oddly_are_searched_as_verified() {
    let Some(bench) = bench("a20_102") else {
        return;
    };
    let (genesis, enter) = genuine(&bench.url);
    let base = members_of(&enter);
    let with = |key: &str, value: &str| {
        let mut m = base.clone();
        m.retain(|(k, _)| k != "\"principal\"");
        set_member(&mut m, key, value);
        m
    };
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let huge = json!("h".repeat(17 << 20)).to_string();
    // (writer, members, the principal the line carries as text; None: none, or two). A value that
    // is no text is looked for by the names below only.
    let mut cases: Vec<(&str, Members, Option<&str>)> = vec![
        ("w102-number", with("\"principal\"", "7"), None),
        (
            "w102-object",
            with("\"principal\"", "{\"name\":\"mallory\"}"),
            None,
        ),
        ("w102-array", with("\"principal\"", "[\"mallory\"]"), None),
        ("w102-null", with("\"principal\"", "null"), None),
        ("w102-case", with("\"Principal\"", "\"mallory\""), None),
        (
            "w102-escaped",
            with("\"princip\\u0061l\"", "\"mallory\""),
            Some("mallory"),
        ),
    ];
    let mut dup = base.clone();
    dup.retain(|(k, _)| k != "\"principal\"");
    dup.push(("\"principal\"".into(), "\"alice\"".into()));
    dup.push(("\"principal\"".into(), "\"mallory\"".into()));
    dup.sort_by(|a, b| a.0.cmp(&b.0));
    cases.push(("w102-twice", dup, None));
    let mut nul = with("\"principal\"", "\"mallory\"");
    set_member(&mut nul, "\"message\"", "\"a\\u0000b\"");
    cases.push(("w102-nul", nul, Some("mallory")));
    let mut nested = with("\"principal\"", "\"mallory\"");
    set_member(&mut nested, "\"zz\"", &deep);
    cases.push(("w102-deep", nested, Some("mallory")));
    let mut big = with("\"principal\"", "\"mallory\"");
    set_member(&mut big, "\"zz\"", &huge);
    cases.push(("w102-huge", big, Some("mallory")));
    for (writer, members, _) in &cases {
        forge_row(&bench.url, writer, &genesis, members, None);
    }
    // Lines that are JSON but no object.
    for (writer, line) in [
        ("w102-string", "\"principal mallory\"".to_owned()),
        ("w102-list", "[\"principal\",\"mallory\"]".to_owned()),
    ] {
        let hash = chained_hash(&genesis, &line);
        insert_row(&bench.url, writer, &genesis, &hash, &line, &[]);
        cases.push((writer, Vec::new(), None));
    }
    let olga = bench.olga();
    // (An empty field searches no principal.)
    let names = ["alice", "mallory", "null", "Mallory"];
    let mut through = Vec::new();
    for (writer, _, carries) in &cases {
        let intact = verified_intact(&bench.url, writer);
        if !intact {
            continue;
        }
        if writer.ends_with("twice") {
            through.push(format!("{writer}: a line naming two principals verifies"));
        }
        for name in names {
            let found = search_finds(&olga, &[("principal", name)], writer);
            if found != (*carries == Some(name)) {
                through.push(format!(
                    "{writer} verifies, and a search for principal {name:?} {} it (its line \
                     carries {carries:?})",
                    if found { "finds" } else { "does not find" }
                ));
            }
        }
    }
    let page = olga.get("/trail/verify");
    assert!(page.status < 500, "{}", page.describe());
    assert!(through.is_empty(), "{}", through.join("\n"));
}

/// Attack: as a writer's role, insert a correctly chained row whose line is of now but whose
/// `written_at` column says 2001 (or 2999), so that a search by time misses it (and the newest-first
/// list puts it at the end, or pins it on top).
/// Guarantee 20 (docs/console.md): the trail is searched by time and `/trail/verify` checks each
/// row's columns against its line: a row that verifies is found by the time its line carries.
#[test]
fn a20_103_a_row_written_at_another_time_than_its_line_hides_from_no_time_search() {
    let Some(bench) = bench("a20_103") else {
        return;
    };
    let (genesis, enter) = genuine(&bench.url);
    let mut members = members_of(&enter);
    set_member(&mut members, "\"principal\"", "\"mallory\"");
    forge_row(
        &bench.url,
        "w103-past",
        &genesis,
        &members,
        Some("2001-01-01T00:00:00Z"),
    );
    forge_row(
        &bench.url,
        "w103-future",
        &genesis,
        &members,
        Some("2999-01-01T00:00:00Z"),
    );
    let timestamp = serde_json::from_str::<Value>(&enter).unwrap()["timestamp"]
        .as_str()
        .expect("the line's time")
        .to_owned();
    let day = &timestamp[..10];
    let olga = bench.olga();
    // The genuine record is found by the day its line carries, in whatever form the search takes.
    let forms = [
        (format!("{day}T00:00"), "9999-12-31T23:59".to_owned()),
        (
            format!("{day}T00:00:00Z"),
            "9999-12-31T23:59:59Z".to_owned(),
        ),
        (day.to_owned(), "9999-12-31".to_owned()),
    ];
    let mut since_form = None;
    for (since, _) in &forms {
        if search_finds(&olga, &[("since", since)], "genuine") {
            since_form = Some(since.clone());
            break;
        }
    }
    let since = since_form.expect("a search since the day finds the genuine record");
    let until = since.replacen(day, "2002-01-01", 1);
    let mut through = Vec::new();
    for writer in ["w103-past", "w103-future"] {
        if !verified_intact(&bench.url, writer) {
            continue;
        }
        let since_found = search_finds(&olga, &[("since", &since)], writer);
        let until_found = search_finds(&olga, &[("until", &until)], writer);
        if !since_found || until_found {
            through.push(format!(
                "{writer} verifies; its line is of {timestamp}, yet a search since {since} {} it \
                 and one until {until} {} it",
                if since_found { "finds" } else { "misses" },
                if until_found { "finds" } else { "misses" },
            ));
        }
    }
    assert!(through.is_empty(), "{}", through.join("\n"));
}

/// Attack: as a writer's role, insert a correctly chained row giving its searched columns
/// (`principal`, `agent`, `decision`, `outcome`, `code`) in the `INSERT`, values its line does not
/// carry, or none, to file it under another name or hide it.
/// Guarantee 20 (docs/console.md, `WriterReport::columns_differ`): verification checks each row's
/// columns against its line: a row found under a name its line does not carry, or hidden from a
/// search for the one it does, does not verify.
#[test]
fn a20_104_searched_columns_apart_from_the_line_do_not_verify() {
    let Some(bench) = bench("a20_104") else {
        return;
    };
    let (genesis, enter) = genuine(&bench.url);
    let mut members = members_of(&enter);
    set_member(&mut members, "\"principal\"", "\"mallory\"");
    let olga = bench.olga();
    let mut through = Vec::new();
    for (n, (column, value)) in [
        ("principal", Some("alice")),
        ("principal", None),
        ("agent", Some("other")),
        ("decision", Some("deny")),
        ("decision", None),
        ("outcome", Some("error")),
        ("code", Some("BUDGET_EXCEEDED")),
    ]
    .into_iter()
    .enumerate()
    {
        let writer = format!("w104-{n}");
        let set = match value {
            Some(v) => literal(v),
            None => "NULL".into(),
        };
        forge_row_with(&bench.url, &writer, &genesis, &members, &[(column, &set)]);
        let found_mallory = search_finds(&olga, &[("principal", "mallory")], &writer);
        let found_other = value
            .is_some_and(|v| search_finds(&olga, &[(column, v)], &writer) && column != "principal")
            || (column == "principal" && search_finds(&olga, &[("principal", "alice")], &writer));
        let moved = !found_mallory || found_other;
        if moved && verified_intact(&bench.url, &writer) {
            through.push(format!(
                "{column} = {value:?}: the search finds it under mallory: {found_mallory}, under \
                 the column's value: {found_other}, and it verifies"
            ));
        }
    }
    assert!(through.is_empty(), "{}", through.join("\n"));
}

/// Attack: page through a trail written by two writers at once (rows of equal times, group commits)
/// by the page's own "next" links, and forge cursors one microsecond either side.
/// Guarantee 20 (docs/console.md): the search is newest first, a record opens its call; paging
/// lists each record once, skips none, and ends.
#[test]
fn a20_105_paging_the_trail_lists_each_record_once_and_ends() {
    let Some(bench) = bench("a20_105") else {
        return;
    };
    let threads: Vec<_> = ["w105a", "w105b", "w105c"]
        .into_iter()
        .map(|writer| {
            let url = bench.url.clone();
            std::thread::spawn(move || {
                let gate = trail_gate(&url, writer, "alice");
                for n in 0..45 {
                    gate.run(|| jot(format!("{writer}-{n}"))).expect("a note");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let total: usize = query(&bench.url, "SELECT count(*) FROM toolgate.audit")[0][0]
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    let olga = bench.olga();
    let mut seen: Vec<String> = Vec::new();
    let mut path = "/trail".to_owned();
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages <= 200, "the trail pages on past 200 pages");
        let page = olga.get(&path);
        assert_eq!(page.status, 200, "{path}: {}", page.describe());
        seen.extend(call_links(&page.body));
        match next_link(&page.body) {
            Some(next) if next != path => path = next,
            Some(next) => panic!("the next page is this page: {next}"),
            None => break,
        }
    }
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!(
        distinct.len(),
        seen.len(),
        "paging lists records twice ({} links, {} distinct)",
        seen.len(),
        distinct.len()
    );
    // A record's link names its writer and seq: every row of the table, once.
    assert_eq!(
        seen.len(),
        total,
        "paging lists {} of the trail's {total} records in {pages} pages",
        seen.len()
    );
}

// ---------------------------------------------------------------------------------------------------
// The live list.

/// A browser following `/approvals/events`.
struct EventStream {
    text: Arc<Mutex<String>>,
    closed: Arc<std::sync::atomic::AtomicBool>,
    stream: std::net::TcpStream,
}

impl EventStream {
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
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
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
                })
                .unwrap();
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

    fn events(&self) -> usize {
        self.text()
            .lines()
            .filter(|l| l.trim_start().starts_with("data:"))
            .count()
    }

    fn closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn wait_past(&self, seen: usize) -> bool {
        eventually(|| self.events() > seen)
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// Attack: open four hundred live lists at once on one session, and keep them open while requests
/// arrive.
/// Guarantee 20: the console stays the operators' control surface: other operators log in and
/// answer, and the live lists follow the store.
#[test]
fn a20_106_hundreds_of_live_lists_leave_the_console_answering() {
    let Some(mut bench) = bench("a20_106") else {
        return;
    };
    let olga = bench.olga();
    let streams: Vec<EventStream> = (0..400)
        .map(|_| EventStream::open(bench.console.addr, olga.cookie.as_deref()))
        .collect();
    let gate = bench.gate();
    let seen = streams[399].events();
    let id = request_id(gate.run(|| pay("a-106".into())));
    assert!(streams[399].wait_past(seen), "the last stream got no event");
    let ravi = login(bench.console.addr, RAVI);
    let reply = answer(&ravi, id, "approve", &[]);
    assert!(taken(&reply), "{}", reply.describe());
    assert!(gate.run(|| pay("a-106".into())).is_ok());
    assert!(
        eventually(|| streams.iter().filter(|s| s.events() > seen).count() == streams.len()),
        "{} of 400 streams got the change",
        streams.iter().filter(|s| s.events() > seen).count()
    );
    drop(streams);
    assert!(bench.console.running());
    assert_eq!(olga.get("/approvals").status, 200);
}

/// The channel the store's trigger notifies, as the catalog shows it to any role.
fn notify_channel(url: &str) -> String {
    let rows = query(
        url,
        "SELECT prosrc FROM pg_proc WHERE proname = 'approvals_changed'",
    );
    let source = rows
        .first()
        .and_then(|r| r[0].clone())
        .expect("the trigger's function");
    let at = source
        .find("pg_notify(")
        .or_else(|| source.find("NOTIFY"))
        .unwrap_or_else(|| panic!("no notification in {source}"));
    let rest = &source[at..];
    let start = rest.find('\'').expect("a channel") + 1;
    let end = start + rest[start..].find('\'').expect("the channel's end");
    rest[start..end].to_owned()
}

/// Attack: as any role of the database, flood the store's channel with notifications (ten thousand,
/// each with a payload of markup and text of the attacker's), while operators follow the live list.
/// Guarantee 20 (docs/console.md): the page reads its table again when the store notifies; nothing
/// a notification carries reaches the page, and the console stays up for the operators.
#[test]
fn a20_107_a_flood_of_notifications_carries_nothing_to_the_live_list() {
    let Some(mut bench) = bench("a20_107") else {
        return;
    };
    let channel = notify_channel(&bench.url);
    let olga = bench.olga();
    let stream = EventStream::open(bench.console.addr, olga.cookie.as_deref());
    let gate = bench.gate();
    let seen = stream.events();
    let _ = request_id(gate.run(|| pay("a-107".into())));
    assert!(stream.wait_past(seen), "no event for a request");
    for _ in 0..5 {
        execute(
            &bench.url,
            &format!(
                "SELECT pg_notify({c}, '<img src=x onerror=g20mark()>m20flood' || n || \
                 repeat('z', 4000)) FROM generate_series(1, 2000) AS n",
                c = literal(&channel)
            ),
        );
    }
    let seen = stream.events();
    let _ = request_id(gate.run(|| pay("a-107-after".into())));
    assert!(stream.wait_past(seen), "no event after the flood");
    assert!(bench.console.running(), "the console stopped");
    let text = stream.text();
    assert!(
        !text.contains("m20flood") && !text.contains("g20mark"),
        "a notification's payload reached the live list: {}",
        text.chars().take(500).collect::<String>()
    );
    let ravi = login(bench.console.addr, RAVI);
    let page = ravi.get("/approvals");
    assert_eq!(page.status, 200);
    assert!(visible_text(&page.body).contains("a-107-after"));
    eprintln!(
        "a20_107: {} events for 10000 notifications and 2 requests",
        stream.events()
    );
}

/// Attack: keep the live list open past the life of its session (`session_ttl`), while requests
/// arrive.
/// Guarantee 20 (docs/console.md): a session lasts as long as the console says; the live list of a
/// session that ended tells nothing more.
#[test]
fn a20_108_the_live_list_stops_when_its_session_s_life_ends() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "a20_108") else {
        return;
    };
    let store = store_of(&url);
    let gate = gate_of(store, "desk");
    let console = InProcessConsole::start(
        toolgate::console::Console::builder()
            .operators(
                toolgate::console::Operators::new()
                    .token(OLGA, "olga")
                    .token(RAVI, "ravi"),
            )
            .session_ttl(Duration::from_secs(3)),
        &url,
    );
    let started = Instant::now();
    let olga = login(console.addr, OLGA);
    let leaving = EventStream::open(console.addr, olga.cookie.as_deref());
    let seen = leaving.events();
    let _ = request_id(gate.run(|| pay("a-108-first".into())));
    assert!(leaving.wait_past(seen), "no event within the session");
    while started.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        olga.get("/approvals").to_login(),
        "the session outlived its life"
    );
    let after = leaving.events();
    let ravi = login(console.addr, RAVI);
    let control = EventStream::open(console.addr, ravi.cookie.as_deref());
    for n in 0..3 {
        let seen = control.events();
        let _ = request_id(gate.run(|| pay(format!("a-108-after-{n}"))));
        assert!(control.wait_past(seen), "the control stream got no event");
    }
    assert!(
        leaving.closed() || leaving.events() == after,
        "the live list of a session past its life got {} more event(s)",
        leaving.events() - after
    );
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

fn pem_der(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("a PEM document")
}

/// The authorization server's RS256 key (made for these tests alone), and its public JWK.
struct TestKey {
    kid: String,
    encoding: jsonwebtoken::EncodingKey,
    jwk: Value,
}

impl TestKey {
    fn new(kid: &str) -> TestKey {
        TestKey {
            kid: kid.to_owned(),
            encoding: jsonwebtoken::EncodingKey::from_rsa_der(&pem_der(RSA_KEY)),
            jwk: json!({"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid, "n": RSA_N,
                "e": "AQAB"}),
        }
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("a signed token")
    }
}

/// Claims for the console, of subject `sub`, valid for `secs` more seconds.
fn claims(sub: &str, secs: i64) -> Value {
    let now = now_secs() as i64;
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "scope": SCOPE, "iat": now - 5,
        "exp": now + secs})
}

fn oauth_builder(key: &TestKey) -> toolgate::mcp::oauth::OAuthBuilder {
    toolgate::mcp::oauth::OAuth::builder(AUDIENCE)
        .authorization_server(ISSUER)
        .jwks(toolgate::mcp::oauth::Jwks::json(
            json!({"keys": [key.jwk]}).to_string(),
        ))
        .algorithms([toolgate::mcp::oauth::Algorithm::RS256])
        .scope(SCOPE, "ops", Gate::new(Mode::Shadow).expect("a gate"))
}

/// The console as a command that also takes access tokens signed by `key`.
fn jwt_bench(name: &str, key: &TestKey) -> Option<Bench> {
    let dir: PathBuf = scratch_dir(&format!("{name}-jwks"));
    let jwks = dir.join("jwks.json");
    std::fs::write(&jwks, json!({"keys": [key.jwk]}).to_string()).unwrap();
    bench_with(
        name,
        &[
            "--jwt-issuer",
            ISSUER,
            "--jwt-audience",
            AUDIENCE,
            "--jwks",
            jwks.to_str().unwrap(),
        ],
    )
}

/// Attack: log in with an access token valid for an hour to a console whose sessions last three
/// seconds (access tokens given to the console's builder, and to its operators), and keep answering.
/// Guarantee 20 (docs/console.md, `ConsoleBuilder::session_ttl`): a log-in lasts as long as the
/// console says; the token's life only shortens it.
#[test]
fn a20_109_a_long_access_token_does_not_outlive_the_console_s_session() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "a20_109") else {
        return;
    };
    let store = store_of(&url);
    let gate = gate_of(store.clone(), "desk");
    let mut through = Vec::new();
    for how in ["ConsoleBuilder::access_tokens", "Operators::access_tokens"] {
        let key = TestKey::new("a20-109");
        let builder = oauth_builder(&key);
        let console = InProcessConsole::start_with(
            move || async move {
                let console =
                    toolgate::console::Console::builder().session_ttl(Duration::from_secs(3));
                let operators = toolgate::console::Operators::new().token(OLGA, "olga");
                if how.starts_with("Console") {
                    console.operators(operators).access_tokens(builder, SCOPE)
                } else {
                    let oauth = builder.build().await.expect("a verifier");
                    console.operators(operators.access_tokens(oauth, SCOPE))
                }
            },
            &url,
        );
        let id = request_id(gate.run(|| pay(format!("a-109-{how}"))));
        let started = Instant::now();
        let browser = login(console.addr, &key.sign(&claims("mallory", 3600)));
        let csrf = browser.csrf();
        while started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let page = browser.get("/approvals");
        let _ = browser.post(&answer_path(id), &[("csrf", &csrf), ("action", "approve")]);
        let state = wait(store.show(id)).unwrap().unwrap().state;
        if !page.to_login() || state != RequestState::Pending {
            through.push(format!(
                "{how}: five seconds into a three-second session the page answered {} and the \
                 request is {state:?}",
                page.status
            ));
        }
    }
    assert!(through.is_empty(), "{}", through.join("\n"));
}

/// Attack: access tokens whose subjects read as `olga`, an operator of the operators file: `olga `,
/// ` olga`, `оlga` with a Cyrillic `о`, `ｏｌｇａ`, and every look-alike of the shared corpus.
/// Guarantee 20 (SECURITY.md, names that read alike): none logs in, so no answer is ever recorded under
/// a name that reads as `olga`; the request stays pending.
#[test]
fn a20_114_a_subject_that_reads_as_an_operator_of_the_file_logs_no_one_in() {
    let key = TestKey::new("a20-114");
    let Some(bench) = jwt_bench("a20_114", &key) else {
        return;
    };
    let gate = bench.gate();
    let id = request_id(gate.run(|| pay("a-114".into())));
    let corpus = crate::common::lookalikes::LOOK_ALIKES
        .iter()
        .find(|(name, _)| *name == "olga")
        .map(|(_, alikes)| *alikes)
        .unwrap_or_default();
    assert!(!corpus.is_empty());
    for sub in ["olga ", " olga", "\u{43e}lga", "ｏｌｇａ"]
        .iter()
        .chain(corpus)
    {
        let refused = try_login(bench.console.addr, &key.sign(&claims(sub, 300)));
        assert!(refused.is_err(), "{sub:?} logged in");
    }
    let state = bench.state(id);
    assert_eq!(answered_by(&state), None, "{state:?}");
}

/// Attack: an access token whose subject is `olga`, the name of an operator of the operators file
/// (another person of the authorization server, or its subject chosen), approving a request.
/// Guarantee 20 (docs/console.md): the name is what the store records as who answered; an answer of
/// one credential is never recorded as an answer of another operator's.
#[test]
fn a20_110_an_access_token_s_subject_cannot_answer_as_an_operator_of_the_file() {
    let key = TestKey::new("a20-110");
    let Some(bench) = jwt_bench("a20_110", &key) else {
        return;
    };
    let gate = bench.gate();
    let id = request_id(gate.run(|| pay("a-110".into())));
    let Ok(browser) = try_login(bench.console.addr, &key.sign(&claims("olga", 300))) else {
        return;
    };
    let reply = answer(&browser, id, "approve", &[]);
    let state = bench.state(id);
    let by = answered_by(&state);
    assert!(
        !taken(&reply) || by.as_deref() != Some("olga"),
        "an access token of subject \"olga\" answered, recorded as {by:?}: the record cannot tell it \
         from the operators file's olga ({state:?})"
    );
}

/// Attack: access tokens not yet valid (`nbf` in an hour, `iat` in a day), for other audiences only
/// (an array), with an empty or missing subject, or an `exp` that is no number.
/// Guarantee 20: a session only for an access token that verifies, naming its operator.
#[test]
fn a20_111_tokens_not_yet_valid_for_others_or_of_no_one_open_no_session() {
    let key = TestKey::new("a20-111");
    let Some(bench) = jwt_bench("a20_111", &key) else {
        return;
    };
    let now = now_secs() as i64;
    let mut cases: Vec<(&str, Value)> = Vec::new();
    let mut c = claims("mallory", 600);
    c["nbf"] = json!(now + 3600);
    cases.push(("nbf in an hour", c));
    let mut c = claims("mallory", 600);
    c["aud"] = json!([
        "https://other.example.test",
        "https://console.example.test/"
    ]);
    cases.push(("other audiences", c));
    let mut c = claims("mallory", 600);
    c["aud"] = json!([]);
    cases.push(("no audience", c));
    cases.push(("an empty subject", claims("", 600)));
    let mut c = claims("mallory", 600);
    c.as_object_mut().unwrap().remove("sub");
    cases.push(("no subject", c));
    let mut c = claims("mallory", 600);
    c["exp"] = json!(format!("{}", now + 600));
    cases.push(("exp as text", c));
    let mut c = claims("mallory", 600);
    c["iss"] = json!([ISSUER]);
    cases.push(("the issuer in an array", c));
    let mut through = Vec::new();
    for (what, claims) in cases {
        if let Ok(browser) = try_login(bench.console.addr, &key.sign(&claims)) {
            through.push(format!(
                "{what} opened a session ({})",
                browser.get("/approvals").status
            ));
        }
    }
    assert!(through.is_empty(), "{}", through.join("\n"));
}

// ---------------------------------------------------------------------------------------------------
// Pages under extreme values.

/// Attack: the promotion page asked for the longest span in the smallest buckets, and the largest
/// numbers each field takes, with the trail holding SHADOW records.
/// Guarantee 20: the pages stay the console's: an answer, no error of the server, the console up for
/// the operators.
#[test]
fn a20_112_the_promotion_page_under_extreme_spans_and_buckets_stays_up() {
    let Some(mut bench) = bench("a20_112") else {
        return;
    };
    let sink = PostgresSink::builder()
        .writer("w112")
        .connect(&bench.url)
        .expect("a sink");
    let gate = Gate::builder()
        .mode(Mode::Shadow)
        .agent("desk")
        .audit(sink)
        .build()
        .unwrap();
    for n in 0..5 {
        let _ = gate.run(|| pay(format!("a-112-{n}")));
    }
    drop(gate);
    let olga = bench.olga();
    let mut through = Vec::new();
    for query in [
        "days=36500&bucket=1",
        "days=1000000&bucket=1",
        "days=2147483647&bucket=1",
        "days=9223372036854775807&bucket=1",
        "days=100000&bucket=minute",
        "days=36500&bucket=second",
        "days=1e9&bucket=0.001",
        "days=36500&bucket=1m",
        "days=36500&bucket=1s",
        "agent=desk&days=36500&bucket=1",
    ] {
        let page = olga.get(&format!("/promotion?{query}"));
        if page.status == 0 || page.status >= 500 || page.body.len() > (8 << 20) {
            through.push(format!(
                "{query}: status {}, {} bytes",
                page.status,
                page.body.len()
            ));
        }
    }
    assert!(bench.console.running(), "the console stopped");
    assert_eq!(
        login(bench.console.addr, RAVI).get("/approvals").status,
        200
    );
    assert!(through.is_empty(), "{}", through.join("\n"));
}

/// Attack: three hundred writers on the trail, one whose name hides and marks up and whose chain is
/// broken after signed-looking rows; the verification page and each record's call.
/// Guarantee 20 (docs/console.md): `/trail/verify` verifies every writer's chain: the broken one is
/// shown broken, its name escaped and its hiding characters as markers.
#[test]
fn a20_113_the_verification_of_many_writers_names_the_broken_one_marked() {
    let Some(bench) = bench("a20_113") else {
        return;
    };
    let (genesis, enter) = genuine(&bench.url);
    let members = members_of(&enter);
    let mut sql = String::new();
    for n in 0..300 {
        let mut m = members.clone();
        set_member(&mut m, "\"seq\"", "1");
        set_member(&mut m, "\"prev_hash\"", &json!(genesis).to_string());
        let body = raw_line(&m);
        let hash = chained_hash(&genesis, &body);
        set_member(&mut m, "\"hash\"", &json!(hash).to_string());
        sql.push_str(&format!(
            "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, \
             line) VALUES ('w113-{n}', 1, {p}, {h}, 'enter', 'm20.jot', 1, 1, {l});",
            p = literal(&genesis),
            h = literal(&hash),
            l = literal(&raw_line(&m)),
        ));
    }
    execute(&bench.url, &sql);
    let broken = "w113<b>g20mark</b>\u{202e}zz";
    let mut m = members.clone();
    set_member(&mut m, "\"principal\"", "\"mallory\"");
    forge_row(&bench.url, broken, &genesis, &m, None);
    // A second row that does not chain.
    execute(
        &bench.url,
        &format!(
            "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, \
             line) VALUES ({w}, 2, 'x', 'y', 'exit', 'm20.jot', 1, 1, '{{}}')",
            w = literal(broken)
        ),
    );
    let report = toolgate::postgres::verify_trail(&bench.url, "toolgate").expect("the trail");
    assert!(
        !report
            .writer(broken)
            .expect("the broken writer")
            .is_intact()
    );
    let olga = bench.olga();
    let page = olga.get("/trail/verify");
    assert_eq!(page.status, 200, "{}", page.describe());
    assert_inert("the verification", &page, "g20mark");
    assert_marked("the verification", &page, &['\u{202e}']);
    let text = visible_text(&page.body);
    assert!(
        text.contains("w113-299") && text.contains("w113-0"),
        "the verification leaves writers out"
    );
    assert!(
        text.contains("w113<b>g20mark</b>"),
        "the broken writer is not named on the verification"
    );
}

// ---------------------------------------------------------------------------------------------------
// Where the console meets the gates.

/// Attack: the agent's gate reads untrusted input after its write was asked (the latch closes); the
/// operator approves the clean request on the page, once and for the session.
/// Guarantee 20 with 14: an approval given to the clean session's request approves nothing once the
/// latch closed; the call files a request that shows the taint.
#[test]
fn a20_114_an_approval_on_the_page_of_a_clean_request_runs_nothing_after_the_latch() {
    let Some(bench) = bench("a20_114") else {
        return;
    };
    let gate = bench.gate();
    let call = || gate.run(|| pay("a-114".into()));
    let id = request_id(call());
    gate.run(|| read_mail(1)).expect("a read");
    let olga = bench.olga();
    let reply = answer(&olga, id, "approve-session", &[]);
    if !taken(&reply) {
        let reply = answer(&olga, id, "approve", &[]);
        assert!(taken(&reply), "{}", reply.describe());
    }
    let retried = call();
    assert_eq!(runs("pay:a-114"), 0, "the clean request's approval ran");
    let new_id = request_id(retried);
    assert_ne!(new_id, id);
    let page = olga.get(&format!("/approvals/{new_id}"));
    assert!(
        visible_text(&page.body).contains("m20.read_mail"),
        "the new request does not show the taint: {}",
        page.describe()
    );
}

/// Attack: approve an irreversible call on the page (its target typed back), after the target's
/// state changed since the request was made.
/// Guarantee 20 with 19 (docs/irreversible.md): the agent's retry is refused `EVIDENCE_CHANGED`, and
/// the body does not run.
#[test]
fn a20_115_an_irreversible_call_approved_after_its_target_changed_is_refused() {
    let Some(bench) = bench("a20_115") else {
        return;
    };
    let gate = bench.gate();
    set_state("db-115", "running");
    let call = || gate.run(|| drop_db("db-115".into(), "x".into()));
    let id = request_id(call());
    set_state("db-115", "primary for payments");
    let olga = bench.olga();
    let reply = answer(&olga, id, "approve", &[("confirmation", "db-115")]);
    assert!(taken(&reply), "{}", reply.describe());
    let denied = call().expect_err("the call ran on another world");
    assert_eq!(denied.code().as_str(), "EVIDENCE_CHANGED", "{denied}");
    assert_eq!(runs("drop_db:db-115:x"), 0);
}

/// Attack: the agent has two requests pending; the operator rejects one and stops the agent, then
/// (another operator, unaware) approves the other; the agent retries the stopped one, then the
/// other.
/// Guarantee 20 with 7: reject and stop lowers the gate that reads it to SHADOW; nothing of the agent
/// runs after.
#[test]
fn a20_116_a_stop_on_the_page_holds_against_the_agent_s_other_approved_request() {
    let Some(bench) = bench("a20_116") else {
        return;
    };
    let gate = bench.gate();
    let first = request_id(gate.run(|| pay("a-116-1".into())));
    let second = request_id(gate.run(|| pay("a-116-2".into())));
    let olga = bench.olga();
    let reply = answer(&olga, first, "reject-stop", &[("reason", "stop")]);
    assert!(taken(&reply), "{}", reply.describe());
    let ravi = login(bench.console.addr, RAVI);
    let _ = answer(&ravi, second, "approve", &[]);
    assert!(gate.run(|| pay("a-116-1".into())).is_err());
    assert_eq!(gate.mode(), Mode::Shadow);
    let _ = gate.run(|| pay("a-116-2".into()));
    assert_eq!(
        runs("pay:a-116-2"),
        0,
        "the agent's other call ran after the stop"
    );
}

/// Attack: the agent has two requests pending; the operator rejects and stops the first on the page
/// while another approves the second; the agent never retries the first, only the second.
/// Guarantee 20 (docs/console.md): reject and stop stops the agent ("the gate that reads it lowers
/// itself to SHADOW"): an approval the agent reads after the stop was given runs nothing.
#[test]
fn a20_117_a_stop_on_the_page_holds_when_the_agent_retries_only_its_other_request() {
    let Some(bench) = bench("a20_117") else {
        return;
    };
    let gate = bench.gate();
    let first = request_id(gate.run(|| pay("a-117-1".into())));
    let second = request_id(gate.run(|| pay("a-117-2".into())));
    let olga = bench.olga();
    let reply = answer(&olga, first, "reject-stop", &[("reason", "stop")]);
    assert!(taken(&reply), "{}", reply.describe());
    let ravi = login(bench.console.addr, RAVI);
    let approved = answer(&ravi, second, "approve", &[]);
    let state = bench.state(second);
    let ran = gate.run(|| pay("a-117-2".into())).is_ok();
    assert!(
        !ran,
        "after olga stopped the agent, its other request (approved: {}, {state:?}) ran; the gate \
         is {:?}",
        taken(&approved),
        gate.mode()
    );
}

// ---------------------------------------------------------------------------------------------------
// Resources.

/// Attack: answer with a rejection reason of 16 MB, and a form of 64 MB.
/// Guarantee 20: the console stays the operators' control surface: it stays up, answers, and the
/// request is left as it was or rejected, nothing else.
#[test]
fn a20_118_a_huge_form_leaves_the_console_up() {
    let Some(mut bench) = bench("a20_118") else {
        return;
    };
    let gate = bench.gate();
    let id = request_id(gate.run(|| pay("a-118".into())));
    let olga = bench.olga();
    let csrf = olga.csrf();
    let reason = "r".repeat(16 << 20);
    let _ = olga.post(
        &answer_path(id),
        &[("csrf", &csrf), ("action", "reject"), ("reason", &reason)],
    );
    let junk = "j".repeat(64 << 20);
    let _ = olga.post(
        &answer_path(id),
        &[("csrf", &csrf), ("action", "approve"), ("junk", &junk)],
    );
    assert!(bench.console.running(), "the console stopped");
    assert_eq!(olga.get("/approvals").status, 200);
    let state = bench.state(id);
    assert!(
        matches!(
            state,
            RequestState::Pending | RequestState::Answered(Answer::Reject { .. })
        ),
        "{state:?}"
    );
    assert_eq!(runs("pay:a-118"), 0);
}

/// A browser on `addr` whose connections come from the loopback address `from`.
fn try_login_from(addr: std::net::SocketAddr, from: std::net::Ipv4Addr, token: &str) -> Reply {
    let body = form(&[("token", token)]);
    let request = format!(
        "POST /login HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: \
         application/x-www-form-urlencoded\r\nContent-Length: {}\r\nOrigin: http://{addr}\r\n\
         Sec-Fetch-Site: same-origin\r\n\r\n{body}",
        body.len()
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stream = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(std::net::SocketAddr::new(from.into(), 0))
            .expect("a loopback address of its own");
        socket.connect(addr).await.expect("a connection")
    });
    let mut stream = stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    use std::io::{Read, Write};
    stream.set_read_timeout(Some(EXCHANGE_WITHIN)).unwrap();
    let _ = stream.write_all(request.as_bytes());
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Reply {
        status: Reply::parse_head(head),
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// Attack: wrong log-ins, one after another, until the console stops taking them (at most two
/// hundred, past the sixty a minute it answers at once); then the operators log in, from the same address (as every browser behind the TLS
/// proxy the docs ask for) and from another.
/// Guarantee 20: a session only for a token of the operators file; the console stays up and lets
/// its operators in (the docs promise no limit on log-ins; none may lock an operator out).
#[test]
fn a20_119_wrong_log_ins_lock_no_operator_out() {
    let Some(mut bench) = bench("a20_119") else {
        return;
    };
    let addr = bench.console.addr;
    let mut tried = 0;
    let mut refused_at = None;
    while tried < 200 {
        tried += 1;
        match try_login(addr, &format!("olga-token-of-g20-mor{tried}")) {
            Ok(_) => panic!("a wrong token opened a session"),
            Err(reply) if reply.status == 429 => {
                refused_at = Some(tried);
                break;
            }
            Err(_) => {}
        }
    }
    assert!(bench.console.running(), "the console stopped");
    let same = try_login(addr, OLGA);
    let other = try_login_from(addr, std::net::Ipv4Addr::new(127, 0, 0, 2), RAVI);
    assert!(
        same.is_ok() && other.session_cookie().is_some(),
        "after {tried} wrong log-ins (the console answering 429 from the {refused_at:?}th), olga \
         from the same address: {}; ravi from another address: {}",
        same.map_or_else(|r| format!("refused {}", r.status), |_| "let in".into()),
        if other.session_cookie().is_some() {
            "let in".to_owned()
        } else {
            format!("refused {}", other.status)
        }
    );
}

/// Attack: five hundred clients that connect and send their request a byte at a time, or nothing at
/// all, and hold on, while an operator works.
/// Guarantee 20: the console stays the operators' control surface: operators log in and answer.
#[test]
fn a20_120_slow_clients_leave_the_operators_working() {
    use std::io::Write;
    let Some(mut bench) = bench("a20_120") else {
        return;
    };
    let gate = bench.gate();
    let id = request_id(gate.run(|| pay("a-120".into())));
    let addr = bench.console.addr;
    let mut slow = Vec::new();
    for n in 0..500 {
        let mut stream = std::net::TcpStream::connect(addr).expect("a connection");
        if n % 2 == 0 {
            let _ = stream.write_all(b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 100");
        } else {
            let _ = stream.write_all(b"GET /appr");
        }
        slow.push(stream);
    }
    let olga = try_login(addr, OLGA).expect("olga logs in beside the slow clients");
    let reply = answer(&olga, id, "approve", &[]);
    assert!(taken(&reply), "{}", reply.describe());
    for stream in &mut slow {
        let _ = stream.write_all(b"o");
    }
    assert!(bench.console.running());
    assert!(gate.run(|| pay("a-120".into())).is_ok());
    drop(slow);
}

/// Attack: three hundred fleets of ten members each written directly (a member process writes its
/// own row), some named with markup and hiding characters; then the last fleet lowered from the page.
/// Guarantee 20 (docs/console.md): the fleet page shows every fleet and member, escaped and marked,
/// and lowers the one named.
#[test]
fn a20_121_the_fleet_page_of_hundreds_of_fleets_is_inert_marked_and_lowers() {
    let Some(bench) = bench("a20_121") else {
        return;
    };
    let mut sql = String::new();
    for n in 0..300 {
        let name = if n % 50 == 7 {
            format!("f121-{n}<b>g20mark</b>\u{202e}")
        } else {
            format!("f121-{n}")
        };
        sql.push_str(&format!(
            "INSERT INTO toolgate.fleets (name, mode, changed_by, reason) VALUES ({name}, \
             'FULL_AUTO', 'ops', 'start');",
            name = literal(&name)
        ));
        for m in 0..10 {
            sql.push_str(&format!(
                "INSERT INTO toolgate.fleet_members (fleet, member, gate, host, pid, agent, mode) \
                 VALUES ({name}, {member}, 1, 'h', 1, 'desk', 'FULL_AUTO');",
                name = literal(&name),
                member = literal(&format!("m{n}-{m}\u{200b}<i>g20mark</i>")),
            ));
        }
    }
    execute(&bench.url, &sql);
    let olga = bench.olga();
    let page = olga.get("/fleet");
    assert_eq!(page.status, 200, "{}", page.describe());
    assert_inert("the fleet page", &page, "g20mark");
    assert_shown_marked("the fleet page", &page, &['\u{202e}', '\u{200b}']);
    let text = visible_text(&page.body);
    for n in [0, 150, 299] {
        assert!(
            text.contains(&format!("f121-{n}")),
            "fleet {n} is not shown"
        );
    }
    let csrf = olga.csrf();
    let reply = olga.post(
        "/fleet/lower",
        &[
            ("csrf", &csrf),
            ("fleet", "f121-299"),
            ("mode", "SHADOW"),
            ("reason", "incident 121"),
        ],
    );
    assert!(reply.status < 400, "{}", reply.describe());
    let modes = query(
        &bench.url,
        "SELECT name, mode FROM toolgate.fleets WHERE mode <> 'FULL_AUTO'",
    );
    assert_eq!(
        modes,
        vec![vec![Some("f121-299".to_owned()), Some("SHADOW".to_owned())]],
        "the lowering touched other fleets, or not the named one"
    );
}

/// Attack: a hundred live lists open while any role floods the store's channel with ten thousand
/// notifications; then a request is made and an operator logs in.
/// Guarantee 20 (docs/console.md): the page reads its table again when the store notifies; the work a
/// flood makes does not keep the console from its operators: the new request reaches the live list,
/// another operator logs in and reads the list.
#[test]
fn a20_122_a_flood_of_notifications_under_many_live_lists_leaves_the_console_answering() {
    let Some(mut bench) = bench("a20_122") else {
        return;
    };
    let channel = notify_channel(&bench.url);
    let olga = bench.olga();
    let streams: Vec<EventStream> = (0..100)
        .map(|_| EventStream::open(bench.console.addr, olga.cookie.as_deref()))
        .collect();
    let gate = bench.gate();
    let seen = streams[99].events();
    let _ = request_id(gate.run(|| pay("a-122".into())));
    assert!(streams[99].wait_past(seen), "no event for a request");
    for _ in 0..5 {
        execute(
            &bench.url,
            &format!(
                "SELECT pg_notify({c}, 'm20flood' || n) FROM generate_series(1, 2000) AS n",
                c = literal(&channel)
            ),
        );
    }
    let seen = streams[0].events();
    let _ = request_id(gate.run(|| pay("a-122-after".into())));
    assert!(
        streams[0].wait_past(seen),
        "no event for a request after the flood, within a minute"
    );
    let ravi = login(bench.console.addr, RAVI);
    let page = ravi.get("/approvals");
    assert_eq!(page.status, 200, "{}", page.describe());
    assert!(visible_text(&page.body).contains("a-122-after"));
    assert!(bench.console.running(), "the console stopped");
    let events: usize = streams.iter().map(EventStream::events).sum();
    eprintln!("a20_122: {events} events over 100 streams for 10000 notifications and 2 requests");
}

/// A console taking access tokens, served beyond loopback: the resource its tokens are for is the
/// URL its operators reach it by. Without `--public-url` the command says so (it once made
/// `http://0.0.0.0:PORT/` of its address, which no verifier accepts); plain http beyond loopback is
/// refused; with an https URL it serves, and a token logs in.
#[test]
fn a_console_beyond_loopback_takes_access_tokens_for_its_public_url() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "console_public_url") else {
        return;
    };
    let dir = scratch_dir("console_public_url");
    let ops = operators_file(&dir, &[("olga", OLGA)]);
    let key = TestKey::new("public-url");
    let jwks = dir.join("jwks.json");
    std::fs::write(&jwks, json!({"keys": [key.jwk]}).to_string()).unwrap();
    let jwt = [
        "--jwt-issuer",
        ISSUER,
        "--jwt-audience",
        AUDIENCE,
        "--jwks",
        jwks.to_str().unwrap(),
    ];
    fn with<'a>(jwt: &[&'a str], public: &'a str) -> Vec<&'a str> {
        [jwt, &["--public-url", public]].concat()
    }
    let said = ConsoleProcess::try_start_at(&url, &ops, "0.0.0.0:0", &jwt)
        .err()
        .expect("served beyond loopback without --public-url");
    assert!(
        said.contains("beyond this machine: give --public-url"),
        "{said}"
    );
    let said =
        ConsoleProcess::try_start_at(&url, &ops, "0.0.0.0:0", &with(&jwt, "http://10.1.2.3/"))
            .err()
            .expect("a plain http resource beyond loopback");
    assert!(said.contains("only https"), "{said}");
    let console = ConsoleProcess::try_start_at(
        &url,
        &ops,
        "0.0.0.0:0",
        &with(&jwt, "https://console.example/"),
    )
    .expect("served beyond loopback with its public URL");
    let local = std::net::SocketAddr::from(([127, 0, 0, 1], console.addr.port()));
    let browser = try_login(local, &key.sign(&claims("ravi", 300)))
        .unwrap_or_else(|reply| panic!("a token did not log in: {}", reply.describe()));
    assert_eq!(browser.get("/approvals").status, 200);
}
