//! Guarantee 14 over MCP's streamable HTTP with a PostgreSQL store: after untrusted input no write
//! runs unasked; a form or task of the clean session runs nothing once the latch closed, a session grant
//! dies with it, and a tainted principal's form names the taint.

use crate::support::mcp_server::*;

/// In-band × latch (the latch closes while a form waits). Alice's write shows a form in a clean
/// session (no warning); before she answers, she reads an untrusted page (the latch closes); then
/// she answers the clean form "approve". Guarantee 14: the approver sees what tainted the session,
/// and a write whose decision waited while the latch closed runs only if the tainted session allows
/// it outright, never on an approval asked in the clean one: the write does not run on that answer.
#[test]
fn x14_a_clean_form_answered_after_the_latch_closed_runs_nothing() {
    let _serial = common::serial();
    let runs = scratch("x14");
    let a = start(&runs, &[("PX_INBAND", KEY)]);
    let args = json!({"cents": 1414});
    let asked = call(a.addr, ALICE, "px.wire", args.clone(), form(), None);
    let state = asked.state.clone().expect("an in-band form");
    let texts = texts_in(&asked.result);
    assert!(
        !texts.iter().any(|t| t.contains("px.read_page")),
        "the clean form warns already"
    );
    let read = call(a.addr, ALICE, "px.read_page", json!({}), form(), None);
    assert_eq!(read.code, "OK", "{read:?}");
    let answered = answer_wire(a.addr, ALICE, args, &state, "approve");
    assert_eq!(
        count(&runs, "wire"),
        0,
        "a form shown without the taint's warning ran a write after the latch closed: {answered:?}"
    );
}

/// In-band × latch, across principals (one principal's latch, another's form). Bob reads an
/// untrusted page; alice's gate is not tainted, so her form carries no warning; then alice reads one
/// too, and her next form names it. Guarantee 14: the form of a tainted session warns, naming the
/// tool that tainted it.
#[test]
fn x15_the_form_of_a_tainted_principal_names_the_taint_and_only_hers() {
    let _serial = common::serial();
    let runs = scratch("x15");
    let a = start(&runs, &[("PX_INBAND", KEY)]);
    let read = call(a.addr, BOB, "px.read_page", json!({}), form(), None);
    assert_eq!(read.code, "OK", "{read:?}");
    let clean = call(a.addr, ALICE, "px.wire", json!({"cents": 1}), form(), None);
    let texts = texts_in(&clean.result);
    assert!(
        !texts.iter().any(|t| t.contains("px.read_page")),
        "bob's taint shows in alice's form: {texts:?}"
    );
    let read = call(a.addr, ALICE, "px.read_page", json!({}), form(), None);
    assert_eq!(read.code, "OK", "{read:?}");
    let tainted = call(a.addr, ALICE, "px.wire", json!({"cents": 2}), form(), None);
    let texts = texts_in(&tainted.result);
    assert!(
        texts.iter().any(|t| t.contains("px.read_page")),
        "the tainted form does not name its taint: {tainted:?}"
    );
    assert_eq!(count(&runs, "wire"), 0);
}

/// Tasks × latch (the latch closes while a task waits for its operator). Alice's write waits as a
/// task, filed in a clean session (the operator's `show` says `tainted no`); alice then reads an
/// untrusted page; the operator, shown a clean request, approves. Guarantee 14: a write whose
/// decision waited while the latch closed never runs on an approval asked in the clean one; the
/// operator sees what tainted the session.
#[test]
fn x32_a_task_filed_clean_and_approved_after_the_latch_closed_runs_nothing() {
    let (_serial, url, runs) = case("x32");
    let a = start(&runs, &[("PX_STORE", &url)]);
    let (task, id) = alices_wire_task(a.addr, &url, 3232);
    let read = plain(a.addr, ALICE, "px.read_page", json!({}));
    assert_eq!(read.code, "OK", "{read:?}");
    let shown = cli(&["approvals", "show", &id.to_string(), "--store", &url]);
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    let (status, message) = approve_and_poll(&url, id, a.addr, &task, Duration::from_secs(6));
    assert_eq!(
        count(&runs, "wire"),
        0,
        "the operator was shown:\n{shown}\nthe task: {status:?} {message}"
    );
}

/// Store × latch × the command's session grant (an operator's `--for-session` answer to a request of
/// a tainted session). Alice reads an untrusted page; her wire waits; the operator approves it
/// `--for-session`; the call runs; then alice makes it again, and wires another amount. Guarantee
/// 14: an answer "for the session" given in a tainted session runs its one call: neither runs.
#[test]
fn x38_a_session_grant_given_to_a_tainted_session_runs_one_call() {
    let (_serial, url, runs) = case("x38");
    let a = start(&runs, &[("PX_STORE", &url)]);
    let read = plain(a.addr, ALICE, "px.read_page", json!({}));
    assert_eq!(read.code, "OK", "{read:?}");
    let _ = plain(a.addr, ALICE, "px.wire", json!({"cents": 1}));
    let id = pending_id(&url, "px.wire", "alice");
    assert_eq!(approve(&url, id, &["--for-session"]).status.code(), Some(0));
    let first = plain(a.addr, ALICE, "px.wire", json!({"cents": 1}));
    assert_eq!(first.code, "OK", "{first:?}");
    let second = plain(a.addr, ALICE, "px.wire", json!({"cents": 2}));
    let same = plain(a.addr, ALICE, "px.wire", json!({"cents": 1}));
    assert_eq!(count(&runs, "wire"), 1, "{second:?} {same:?}");
}

/// Store × latch × the command's session grant (the latch closes after a grant). The operator
/// approves alice's wire `--for-session` (the same call, for the session) in a clean session; it
/// runs twice; alice reads an untrusted page; she makes the same call again. Guarantee 14: session grants given before the latch closed are revoked as it
/// closes: the second wire waits for an operator.
#[test]
fn x39_a_session_grant_dies_when_the_latch_closes() {
    let (_serial, url, runs) = case("x39");
    let a = start(&runs, &[("PX_STORE", &url)]);
    let _ = plain(a.addr, ALICE, "px.wire", json!({"cents": 1}));
    let id = pending_id(&url, "px.wire", "alice");
    assert_eq!(approve(&url, id, &["--for-session"]).status.code(), Some(0));
    let first = plain(a.addr, ALICE, "px.wire", json!({"cents": 1}));
    assert_eq!(first.code, "OK", "{first:?}");
    let covered = plain(a.addr, ALICE, "px.wire", json!({"cents": 1}));
    assert_eq!(
        covered.code, "OK",
        "the grant covers the same call: {covered:?}"
    );
    let read = plain(a.addr, ALICE, "px.read_page", json!({}));
    assert_eq!(read.code, "OK", "{read:?}");
    let after = plain(a.addr, ALICE, "px.wire", json!({"cents": 1}));
    assert_eq!(count(&runs, "wire"), 2, "{after:?}");
}
