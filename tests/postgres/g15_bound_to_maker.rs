//! Guarantee 15: what is stored is honoured for its maker alone. Gates of two principals or agents
//! sharing a PostgreSQL store, in one process or in server processes over MCP, never run each other's
//! approved calls, answer each other's forms, or reach each other's sessions and tasks.

use crate::support::bank::*;
use crate::support::mcp_server::*;
use crate::support::mcp_server::{approve, pending_id};

// Gates of two principals (and of two agents) share one store: an answer to one's call never runs
// another's identical call, which files a request of its own; the answer still runs its own call.
#[test]
fn an_answer_runs_only_the_call_of_the_principal_and_agent_it_was_given_for() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "approvals_principals") else {
        return;
    };
    let gate_of = |principal: &str, agent: &str| {
        Gate::builder()
            .mode(Mode::FullAuto)
            .approval_store(PostgresStore::connect(&url).unwrap())
            .principal(principal)
            .agent(agent)
            .build()
            .unwrap()
    };
    let bob = gate_of("bob", "desk");
    let others = [gate_of("alice", "desk"), gate_of("bob", "other-desk")];
    let before = REFUNDS.load(Ordering::SeqCst);
    let bobs = token(bob.run(|| refund("acme".into(), 500)));
    bob.answer(&bobs, crate::support::approve("ops")).unwrap();
    for other in &others {
        let theirs = other.run(|| refund("acme".into(), 500));
        assert_eq!(code(theirs), DenialCode::ApprovalPending);
    }
    assert_eq!(REFUNDS.load(Ordering::SeqCst), before);
    bob.run(|| refund("acme".into(), 500)).unwrap();
    assert_eq!(REFUNDS.load(Ordering::SeqCst), before + 1);
    let rows = query(
        &url,
        "SELECT principal, agent FROM toolgate.approvals ORDER BY id",
    );
    assert_eq!(
        rows.len(),
        3,
        "one request per principal and agent: {rows:?}"
    );
}

/// Store × principals, across processes (a stored answer used by another principal). Alice's call
/// waits in process A for an operator (PostgreSQL store); the operator approves her request with
/// `toolgate approvals approve`; before alice calls again, bob makes the very same call in process
/// B, which shares the store. Guarantee 15: bob's call does not run on alice's answer; alice's runs
/// once.
#[test]
fn x01_an_answer_for_alice_in_one_process_runs_nothing_of_bobs_in_another() {
    let (_serial, url, runs) = case("x01");
    let (a, b) = two_on_store(&runs, &url);
    let args = json!({"cents": 101});
    let first = alices_wire_approved(a.addr, &url, args.clone(), &[]);
    assert_eq!(first.code, "APPROVAL_PENDING", "{first:?}");
    let by_bob = call(b.addr, BOB, "px.wire", args.clone(), json!({}), None);
    let bob_ran = count(&runs, "wire");
    let by_alice = call(a.addr, ALICE, "px.wire", args.clone(), json!({}), None);
    assert_eq!(bob_ran, 0, "bob's call ran on alice's answer: {by_bob:?}");
    assert_eq!(by_alice.code, "OK", "{by_alice:?}");
    assert_eq!(count(&runs, "wire"), 1);
}

/// Store × principals (a session grant given while bob's call waits). Alice's request is approved
/// `--for-session`; alice's call runs; then bob, on the same server process and the same store,
/// makes the same call. Guarantee 7 and 15: a session grant belongs to the gate whose answer gave it,
/// so bob's call waits for its own operator.
#[test]
fn x02_a_session_grant_of_alice_covers_no_call_of_bob() {
    let (_serial, url, runs) = case("x02");
    let a = start(&runs, &[("PX_STORE", &url)]);
    let args = json!({"cents": 202});
    alices_wire_approved(a.addr, &url, args.clone(), &["--for-session"]);
    let by_alice = call(a.addr, ALICE, "px.wire", args.clone(), json!({}), None);
    assert_eq!(by_alice.code, "OK", "{by_alice:?}");
    let by_bob = call(a.addr, BOB, "px.wire", args.clone(), json!({}), None);
    assert_ne!(by_bob.code, "OK", "bob ran under alice's session grant");
    let again = call(a.addr, ALICE, "px.wire", args.clone(), json!({}), None);
    assert_eq!(
        again.code, "OK",
        "alice's grant covers her same call: {again:?}"
    );
    assert_eq!(count(&runs, "wire"), 2);
}

/// In-band × principals (a request state of alice's answered by bob). Alice's call shows an in-band
/// form (2026-07-28, no session); bob, with his own token and alice's leaked request state, answers
/// it "approve". Then alice's client calls again, without any answer. Guarantee 15 (and in-band's
/// "whoever controls the client approves"): bob's answer approves nothing of alice's; her plain retry
/// runs nothing.
#[test]
fn x03_bob_answering_alices_in_band_form_approves_nothing_of_hers() {
    let (_serial, runs, a) = in_band_case("x03");
    let args = json!({"cents": 303});
    let (by_bob, _) = bob_answers_alices_form(a.addr, &args, "approve");
    let plain = call(a.addr, ALICE, "px.wire", args.clone(), form(), None);
    assert_ran(
        &runs,
        "wire",
        0,
        &format!("bob's answer ran alice's call: bob {by_bob:?}, alice {plain:?}"),
    );
}

/// Tasks × store × principals (a task's approval taken by another principal's call). Alice's task
/// waits in A; the operator approves it; at once bob makes the same call in B. Guarantee 15: bob's
/// call does not run on alice's answer, and alice's task runs her call once.
#[test]
fn x09_bobs_call_does_not_take_the_approval_alices_task_waits_for() {
    let (_serial, url, runs) = case("x09");
    let (a, b) = two_on_store(&runs, &url);
    let args = json!({"cents": 909});
    let created = as_task(a.addr, ALICE, "px.wire", args.clone());
    let task = created.task.clone().expect("a task");
    let id = pending_id(&url, "px.wire", "alice");
    assert_eq!(approve(&url, id, &[]).status.code(), Some(0));
    let by_bob = call(b.addr, BOB, "px.wire", args, json!({}), None);
    assert_ne!(by_bob.code, "OK", "bob ran on alice's answer");
    let (status, message) = poll_task(a.addr, &task, Duration::from_secs(10));
    assert_eq!(count(&runs, "wire"), 1, "{status:?} {message}");
}

/// HTTP sessions × principals (a session id of alice's used with bob's token, while alice's session
/// lives). Alice opens a session (protocol 2025-06-18) and initializes it; bob sends a `tools/call`
/// of a LOW_WRITE tool, and a `tools/list`, naming her session. Guarantee 15 and the HTTP service's
/// binding: `404`, and nothing runs.
#[test]
fn x13_bob_with_alices_session_id_reaches_nothing() {
    let _serial = common::serial();
    let runs = scratch("x13");
    let a = start(&runs, &[]);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "alice", "version": "1"}}});
    let (status, _, text) = post_raw(a.addr, ALICE, None, &init, Duration::from_secs(10));
    assert_eq!(status, 200, "{text}");
    let session = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .find(|l| l.to_ascii_lowercase().starts_with("mcp-session-id:"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
        .expect("a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let _ = post_raw(
        a.addr,
        ALICE,
        Some(&session),
        &initialized,
        Duration::from_secs(5),
    );
    let note = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "px.note", "arguments": {"text": "bob was here"}}});
    let (status, messages, _) =
        post_raw(a.addr, BOB, Some(&session), &note, Duration::from_secs(5));
    assert_eq!(status, 404, "{messages:?}");
    assert_eq!(count(&runs, "note"), 0);
    let (own, _, _) = post_raw(
        a.addr,
        ALICE,
        Some(&session),
        &note,
        Duration::from_secs(10),
    );
    assert_eq!(own, 200);
    assert_eq!(count(&runs, "note"), 1, "alice's own call on her session");
}

/// The command × store rows of another agent. Process A (agent `desk-a`) files alice's wire; the
/// operator approves that row; process B (agent `desk-b`, the same principal, tool, arguments and
/// store) makes the call. Guarantee 15: an answer runs only its own agent's call: B's does not run,
/// A's runs once.
#[test]
fn x16_an_approved_row_of_one_agent_runs_nothing_of_another() {
    let (_serial, url, runs) = case("x16");
    let a = start(&runs, &[("PX_STORE", &url), ("PX_AGENT", "desk-a")]);
    let b = start(&runs, &[("PX_STORE", &url), ("PX_AGENT", "desk-b")]);
    let args = json!({"cents": 1616});
    alices_wire_approved(a.addr, &url, args.clone(), &[]);
    let by_b = call(b.addr, ALICE, "px.wire", args.clone(), json!({}), None);
    assert_ne!(by_b.code, "OK", "desk-b ran desk-a's approved call");
    let by_a = call(a.addr, ALICE, "px.wire", args, json!({}), None);
    assert_eq!(by_a.code, "OK", "{by_a:?}");
    assert_eq!(count(&runs, "wire"), 1);
}

/// In-band × agents, across processes (a request state of one agent answered by another). A (agent
/// `desk-a`) and B (agent `desk-b`) share the state key and the store; alice's form is asked in A and
/// answered in B. Guarantee 15 (the state is bound to the gate's agent label): B runs nothing.
#[test]
fn x21_an_in_band_state_of_one_agent_runs_nothing_in_another() {
    let (_serial, url, runs) = case("x21");
    let a = start(
        &runs,
        &[
            ("PX_STORE", &url),
            ("PX_INBAND", KEY),
            ("PX_AGENT", "desk-a"),
        ],
    );
    let b = start(
        &runs,
        &[
            ("PX_STORE", &url),
            ("PX_INBAND", KEY),
            ("PX_AGENT", "desk-b"),
        ],
    );
    let args = json!({"cents": 2121});
    let (_, state) = alices_form(a.addr, args.clone());
    let in_b = answer_wire(b.addr, ALICE, args, &state, "approve");
    assert_eq!(count(&runs, "wire"), 0, "{in_b:?}");
}

/// Tasks × principals, across processes (another principal's task id, while the task polls). Alice's
/// task waits in A; bob sends `tasks/cancel` and `tasks/get` with her task id to A and to B (which
/// shares the store); then the operator approves. Guarantee 15: bob reaches nothing of hers: her task
/// completes and runs her call once.
#[test]
fn x27_bob_cancelling_alices_task_id_in_two_processes_changes_nothing() {
    let (_serial, url, runs) = case("x27");
    let (a, b) = two_on_store(&runs, &url);
    let (task, id) = alices_wire_task(a.addr, &url, 2727);
    let mut by_bob = Vec::new();
    for addr in [a.addr, b.addr] {
        for method in ["tasks/cancel", "tasks/get"] {
            let n = IDS.fetch_add(1, Ordering::SeqCst);
            let body = json!({"jsonrpc": "2.0", "id": n, "method": method,
                "params": {"taskId": task, "_meta": meta(tasks())}});
            let (_, messages, _) = post_raw(addr, BOB, None, &body, Duration::from_secs(5));
            by_bob.push(messages);
        }
    }
    let leaked = by_bob
        .iter()
        .flatten()
        .any(|m| m["result"]["status"].is_string() || m["result"]["task"].is_object());
    assert!(!leaked, "bob reached alice's task: {by_bob:#?}");
    let (status, message) = approve_and_poll(&url, id, a.addr, &task, Duration::from_secs(10));
    assert_eq!(count(&runs, "wire"), 1, "{status:?} {message}");
}

/// Store × principals (another principal's row approved while alice's waits). Alice and bob make the
/// same call in two processes; both wait; the operator approves bob's row only. Guarantee 15: a
/// request filed for a call answers `APPROVAL_PENDING` with its own token whatever another call's
/// answer says: alice's call stays pending; bob's runs.
#[test]
fn x29_bobs_approved_row_runs_nothing_of_alices_waiting_call() {
    let (_serial, url, runs) = case("x29");
    let (a, b) = two_on_store(&runs, &url);
    let args = json!({"cents": 2929});
    let _ = call(a.addr, ALICE, "px.wire", args.clone(), json!({}), None);
    let _ = call(b.addr, BOB, "px.wire", args.clone(), json!({}), None);
    let bobs = pending_id(&url, "px.wire", "bob");
    let _alices = pending_id(&url, "px.wire", "alice");
    assert_eq!(approve(&url, bobs, &[]).status.code(), Some(0));
    let by_alice_a = call(a.addr, ALICE, "px.wire", args.clone(), json!({}), None);
    let by_alice_b = call(b.addr, ALICE, "px.wire", args.clone(), json!({}), None);
    assert_eq!(by_alice_a.code, "APPROVAL_PENDING", "{by_alice_a:?}");
    assert_eq!(by_alice_b.code, "APPROVAL_PENDING", "{by_alice_b:?}");
    assert_eq!(count(&runs, "wire"), 0);
    let by_bob = call(b.addr, BOB, "px.wire", args, json!({}), None);
    assert_eq!(by_bob.code, "OK", "{by_bob:?}");
}

/// In-band × principals (bob rejects alice's form with her leaked state). Alice's call shows a form;
/// bob, with his token and her request state, answers "reject"; then alice answers her own form
/// "approve". Guarantee 15: what is stored is honoured for its maker alone: bob's answer decides
/// nothing of alice's, so her approval runs her call once.
#[test]
fn x37_bob_rejecting_alices_in_band_form_decides_nothing_of_hers() {
    let (_serial, runs, a) = in_band_case("x37");
    let args = json!({"cents": 3737});
    let (by_bob, state) = bob_answers_alices_form(a.addr, &args, "reject");
    let by_alice = answer_wire(a.addr, ALICE, args, &state, "approve");
    assert_eq!(
        by_alice.code, "OK",
        "bob's answer decided alice's request: bob {by_bob:?}, alice {by_alice:?}"
    );
    assert_eq!(count(&runs, "wire"), 1);
}

/// Alice's wire of `args` shows her form; bob answers it `answer` with her leaked request state.
/// Returns bob's answer and that state.
fn bob_answers_alices_form(addr: SocketAddr, args: &Value, answer: &str) -> (Said, String) {
    let (_, state) = alices_form(addr, args.clone());
    let by_bob = answer_wire(addr, BOB, args.clone(), &state, answer);
    (by_bob, state)
}
