//! Guarantee 11 over MCP's streamable HTTP: a fleet's lowering reaches every principal's gate in every
//! server process, and a form, task or approved request answered after it runs nothing.

use crate::support::mcp_server::*;

/// In-band × fleet lowering (the fleet lowered while a form is unanswered). Alice's form is shown in
/// a FULL_AUTO gate joined to a fleet; `toolgate fleet lower --to PARTIAL_AUTO`; a second later alice
/// answers "approve". Guarantee 11 (and 4): no call decided after the process read the lowering runs
/// at the old mode: the HIGH_WRITE call does not run.
#[test]
fn x05_an_in_band_form_answered_after_a_fleet_lowering_runs_nothing() {
    let (_serial, url, runs, a) =
        started_case("x05", &["PX_STORE", "PX_FLEET_URL"], &[("PX_INBAND", KEY)]);
    let args = json!({"cents": 505});
    let (_, state) = alices_form(a.addr, args.clone());
    lower(&url, "px", "PARTIAL_AUTO");
    thread::sleep(Duration::from_millis(1500));
    let answered = answer_wire(a.addr, ALICE, args, &state, "approve");
    assert_eq!(count(&runs, "wire"), 0, "{answered:?}");
}

/// Store × fleet lowering (an approved call not yet retried when the fleet is lowered). Alice's
/// request is approved by the command; the fleet is lowered to PARTIAL_AUTO before she calls again.
/// Guarantee 11: her retry, decided after the lowering reached the process, does not run.
#[test]
fn x06_an_approved_request_retried_after_a_fleet_lowering_does_not_run() {
    let (_serial, url, runs, a) = started_case("x06", &["PX_STORE", "PX_FLEET_URL"], &[]);
    let args = json!({"cents": 606});
    alices_wire_approved(a.addr, &url, args.clone(), &[]);
    lower(&url, "px", "PARTIAL_AUTO");
    thread::sleep(Duration::from_millis(1500));
    let retried = call(a.addr, ALICE, "px.wire", args, json!({}), None);
    assert_eq!(count(&runs, "wire"), 0, "{retried:?}");
}

/// Tasks × fleet lowering (the fleet lowered while a task polls). Alice's call becomes a task that
/// waits for an operator; the fleet is lowered to PARTIAL_AUTO; then the operator approves.
/// Guarantee 11 (and 4): the task's call, decided after the lowering, does not run.
#[test]
fn x07_a_task_approved_after_a_fleet_lowering_runs_nothing() {
    let (_serial, url, runs, a) = started_case("x07", &["PX_STORE", "PX_FLEET_URL"], &[]);
    let (task, id) = alices_wire_task(a.addr, &url, 707);
    lower(&url, "px", "PARTIAL_AUTO");
    thread::sleep(Duration::from_millis(1500));
    let (status, message) = approve_and_poll(&url, id, a.addr, &task, Duration::from_secs(6));
    assert_eq!(count(&runs, "wire"), 0, "{status:?} {message}");
}

/// Budgets × fleet lowering (the fleet lowered while a call's budget check hangs). The budget store
/// holds every byte; alice's LOW_WRITE note (allowed outright in FULL_AUTO) waits on it; the fleet is
/// lowered to ADVISORY; the store answers again before its timeout. Guarantee 11 (and 4): the note,
/// whose decision completes after the process read the lowering, does not run.
#[test]
fn x12_a_call_waiting_on_its_budget_when_the_fleet_is_lowered_does_not_run() {
    let (_serial, url, runs, proxy, a) = held_case(
        "x12",
        &["PX_BUDGET_URL"],
        &["PX_FLEET_URL"],
        &[("PX_BUDGET_N", "5"), ("PX_BUDGET_TIMEOUT", "6000")],
    );
    let warm = plain(a.addr, ALICE, "px.note", json!({"text": "a"}));
    assert_eq!(warm.code, "OK", "{warm:?}");
    let addr = a.addr;
    let said = lowered_while_held(&proxy, &url, "ADVISORY", (300, 1500), move || {
        plain(addr, ALICE, "px.note", json!({"text": "b"}))
    });
    assert_eq!(count(&runs, "note"), 1, "the waiting note ran: {said:?}");
}

/// Fleet × approvals pending (lowered, then raised, while a request waits). Alice's request waits;
/// the fleet is lowered to PARTIAL_AUTO and raised back to FULL_AUTO; the operator approves; alice
/// calls again. Guarantee 11: a fleet's mode only ever lowers a running gate (`raise` changes no
/// running gate): the approved HIGH_WRITE call does not run.
#[test]
fn x18_a_fleet_raised_again_does_not_revive_a_pending_call() {
    let (_serial, url, runs, a) = started_case("x18", &["PX_STORE", "PX_FLEET_URL"], &[]);
    let args = json!({"cents": 1818});
    let _ = call(a.addr, ALICE, "px.wire", args.clone(), json!({}), None);
    let id = pending_id(&url, "px.wire", "alice");
    lower(&url, "px", "PARTIAL_AUTO");
    thread::sleep(Duration::from_millis(1000));
    let raised = cli(&[
        "fleet",
        "raise",
        "--store",
        &url,
        "--fleet",
        "px",
        "--to",
        "FULL_AUTO",
        "--reason",
        "back",
    ]);
    assert_eq!(raised.status.code(), Some(0), "{raised:?}");
    thread::sleep(Duration::from_millis(1000));
    let _ = approve(&url, id, &[]);
    let retried = call(a.addr, ALICE, "px.wire", args, json!({}), None);
    assert_eq!(count(&runs, "wire"), 0, "{retried:?}");
}

/// Fleet × tasks (the process loses its fleet while a task polls). The fleet's link (grace 1 s)
/// holds every byte; alice's task waits; the operator approves while the process cannot read its
/// fleet's mode. Guarantee 11: past the grace period every joined gate is held at SHADOW, so the
/// task's HIGH_WRITE call does not run while the link is down.
#[test]
fn x19_a_task_approved_while_its_process_has_lost_the_fleet_does_not_run() {
    let (_serial, url, runs, proxy, a) = held_case("x19", &["PX_FLEET_URL"], &["PX_STORE"], &[]);
    let (task, id) = alices_wire_task(a.addr, &url, 1919);
    proxy.hold(true);
    thread::sleep(Duration::from_millis(2500));
    let (status, message) = approve_and_poll(&url, id, a.addr, &task, Duration::from_secs(3));
    let ran = count(&runs, "wire");
    proxy.hold(false);
    assert_eq!(ran, 0, "ran while the fleet was lost: {status:?} {message}");
}

/// Fleet lowering × in-band, across processes (the fleet lowered while a form asked in A waits, the
/// answer sent to B). Both processes share the key, the store and the fleet; alice's form is asked
/// in A; the fleet is lowered to SHADOW; alice's answer goes to B. Guarantee 11: no process runs the
/// HIGH_WRITE call after reading the lowering.
#[test]
fn x28_an_in_band_answer_sent_to_another_process_after_a_fleet_lowering_runs_nothing() {
    let (_serial, url, runs) = case("x28");
    let env = [
        ("PX_STORE", url.as_str()),
        ("PX_INBAND", KEY),
        ("PX_FLEET_URL", url.as_str()),
    ];
    let (a, b) = (start(&runs, &env), start(&runs, &env));
    let args = json!({"cents": 2828});
    let (_, state) = alices_form(a.addr, args.clone());
    lower(&url, "px", "SHADOW");
    thread::sleep(Duration::from_millis(1500));
    let mut said = Vec::new();
    for addr in [b.addr, a.addr] {
        said.push(answer_wire(addr, ALICE, args.clone(), &state, "approve"));
    }
    assert_eq!(count(&runs, "wire"), 0, "{said:#?}");
}

/// Store × fleet lowering (the fleet lowered while an approved call waits on its store). Alice's wire
/// is approved; the link of process A to the approval store holds every byte as she calls again (the
/// call waits on the store); the fleet, on its own link, is lowered to PARTIAL_AUTO; the store answers
/// again before its timeout. Guarantee 4 and 11: whatever ran between the decision and the re-check,
/// the call decided after the process read the lowering does not run.
#[test]
fn x40_an_approved_call_waiting_on_its_store_when_the_fleet_is_lowered_does_not_run() {
    let (_serial, url, runs, proxy, a) = held_case("x40", &["PX_STORE"], &["PX_FLEET_URL"], &[]);
    let args = json!({"cents": 4040});
    alices_wire_approved(a.addr, &url, args.clone(), &[]);
    let addr = a.addr;
    let said = lowered_while_held(&proxy, &url, "PARTIAL_AUTO", (200, 1000), move || {
        call(addr, ALICE, "px.wire", args, json!({}), None)
    });
    assert_eq!(count(&runs, "wire"), 0, "{said:?}");
}

/// Fleet lowering × principals (one lowering, every principal's gate). Process A serves alice and bob,
/// each with a gate joined to the fleet; the fleet is lowered to ADVISORY. Guarantee 11: the lowering
/// reaches every joined gate: neither principal's LOW_WRITE note runs.
#[test]
fn x42_a_fleet_lowering_reaches_every_principals_gate() {
    let (_serial, url, runs, a) = started_case("x42", &["PX_STORE", "PX_FLEET_URL"], &[]);
    lower(&url, "px", "ADVISORY");
    thread::sleep(Duration::from_millis(1500));
    let by_alice = plain(a.addr, ALICE, "px.note", json!({"text": "a"}));
    let by_bob = plain(a.addr, BOB, "px.note", json!({"text": "b"}));
    assert_eq!(count(&runs, "note"), 0, "{by_alice:?} {by_bob:?}");
}

/// `call` made in a thread while `proxy` holds every byte of its link; `settle` ms later the fleet `px`
/// of `url` is lowered to `to`, and `grace` ms after that the link answers again: what the call said.
fn lowered_while_held(
    proxy: &Proxy,
    url: &str,
    to: &str,
    (settle, grace): (u64, u64),
    call: impl FnOnce() -> Said + Send + 'static,
) -> Said {
    proxy.hold(true);
    let waiting = thread::spawn(call);
    thread::sleep(Duration::from_millis(settle));
    lower(url, "px", to);
    thread::sleep(Duration::from_millis(grace));
    proxy.hold(false);
    waiting.join().expect("the call")
}
