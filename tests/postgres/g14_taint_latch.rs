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
    let (_serial, runs, a) = in_band_case("x14");
    let args = json!({"cents": 1414});
    let (asked, state) = alices_form(a.addr, args.clone());
    assert!(
        !names_the_page(&asked.result),
        "the clean form warns already"
    );
    reads_untrusted_page(a.addr, ALICE, form());
    let answered = answer_wire(a.addr, ALICE, args, &state, "approve");
    assert_ran(
        &runs,
        "wire",
        0,
        &format!(
            "a form shown without the taint's warning ran a write after the latch closed: {answered:?}"
        ),
    );
}

/// In-band × latch, across principals (one principal's latch, another's form). Bob reads an
/// untrusted page; alice's gate is not tainted, so her form carries no warning; then alice reads one
/// too, and her next form names it. Guarantee 14: the form of a tainted session warns, naming the
/// tool that tainted it.
#[test]
fn x15_the_form_of_a_tainted_principal_names_the_taint_and_only_hers() {
    let (_serial, runs, a) = in_band_case("x15");
    reads_untrusted_page(a.addr, BOB, form());
    let clean = call(a.addr, ALICE, "px.wire", json!({"cents": 1}), form(), None);
    assert!(
        !names_the_page(&clean.result),
        "bob's taint shows in alice's form: {clean:?}"
    );
    reads_untrusted_page(a.addr, ALICE, form());
    let tainted = call(a.addr, ALICE, "px.wire", json!({"cents": 2}), form(), None);
    assert!(
        names_the_page(&tainted.result),
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
    reads_untrusted_page(a.addr, ALICE, json!({}));
    let shown = cli(&["approvals", "show", &id.to_string(), "--store", &url]);
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    let (status, message) = approve_and_poll(&url, id, a.addr, &task, Duration::from_secs(6));
    assert_ran(
        &runs,
        "wire",
        0,
        &format!("the operator was shown:\n{shown}\nthe task: {status:?} {message}"),
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
    reads_untrusted_page(a.addr, ALICE, json!({}));
    alices_wire_approved(a.addr, &url, json!({"cents": 1}), &["--for-session"]);
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
    alices_wire_approved(a.addr, &url, json!({"cents": 1}), &["--for-session"]);
    let first = plain(a.addr, ALICE, "px.wire", json!({"cents": 1}));
    assert_eq!(first.code, "OK", "{first:?}");
    let covered = plain(a.addr, ALICE, "px.wire", json!({"cents": 1}));
    assert_eq!(
        covered.code, "OK",
        "the grant covers the same call: {covered:?}"
    );
    reads_untrusted_page(a.addr, ALICE, json!({}));
    let after = plain(a.addr, ALICE, "px.wire", json!({"cents": 1}));
    assert_eq!(count(&runs, "wire"), 2, "{after:?}");
}

/// `token` reads an untrusted page (the call runs), from a client with `capabilities`.
#[track_caller]
fn reads_untrusted_page(addr: SocketAddr, token: &str, capabilities: Value) {
    let read = call(addr, token, "px.read_page", json!({}), capabilities, None);
    assert_eq!(read.code, "OK", "{read:?}");
}

/// Whether a string of `result` names `px.read_page`, the tool that taints a session.
fn names_the_page(result: &Value) -> bool {
    texts_in(result).iter().any(|t| t.contains("px.read_page"))
}
