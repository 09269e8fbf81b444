//! Guarantee 13 over MCP's streamable HTTP, with server processes sharing a PostgreSQL budget: tasks,
//! forms and retries never exceed it, refused or cancelled calls keep no unit, and a budget store that
//! stops answering refuses in time.

use crate::support::mcp_server::*;

/// Tasks × budgets, across processes (the budget spent while a task polls). A budget of one call an
/// hour on `px.*`, in PostgreSQL, shared by processes A and B. Alice's wire waits as a task in A;
/// meanwhile a note in B (allowed outright) takes the unit; then the operator approves. Guarantee
/// 13: never more than the budget: at most one body runs.
#[test]
fn x08_a_task_approved_after_another_process_spent_the_budget_does_not_exceed_it() {
    let (_serial, url, runs, a, b) = sharing_a_budget("x08", &[]);
    let (task, id) = alices_wire_task(a.addr, &url, 808);
    let noted = plain(b.addr, ALICE, "px.note", json!({"text": "x"}));
    assert_eq!(noted.code, "OK", "the unit was free: {noted:?}");
    let (status, message) = approve_and_poll(&url, id, a.addr, &task, Duration::from_secs(6));
    let total = count(&runs, "wire") + count(&runs, "note");
    assert!(
        total <= 1,
        "{total} calls ran on a budget of 1: {status:?} {message}"
    );
}

/// Store × budgets, across processes (a call pending for an operator, asked again, while another
/// process spends). A budget of one call an hour on `px.*`; alice's wire waits in A and she asks
/// again three times; the operator approves; she calls again: it runs (pending calls keep no unit).
/// Then a note in B is refused `BUDGET_EXHAUSTED`. Guarantee 13.
#[test]
fn x10_asking_again_while_pending_spends_nothing_and_the_budget_holds_across_processes() {
    let (_serial, url, runs, a, b) = sharing_a_budget("x10", &[]);
    let args = json!({"cents": 1010});
    for _ in 0..4 {
        let again = call(a.addr, ALICE, "px.wire", args.clone(), json!({}), None);
        assert_eq!(again.code, "APPROVAL_PENDING", "{again:?}");
    }
    let id = pending_id(&url, "px.wire", "alice");
    assert_eq!(approve(&url, id, &[]).status.code(), Some(0));
    let approved = call(a.addr, ALICE, "px.wire", args, json!({}), None);
    assert_eq!(approved.code, "OK", "{approved:?}");
    let noted = plain(b.addr, BOB, "px.note", json!({"text": "y"}));
    assert_eq!(noted.code, "BUDGET_EXHAUSTED", "{noted:?}");
    assert_eq!(count(&runs, "wire") + count(&runs, "note"), 1);
}

/// Budgets × a stopped server (the budget store stops answering while a call waits on it). The
/// budget store's link holds every byte; alice's note waits on its check. Guarantee 13 (and 2): the
/// call is refused `BUDGET_STORE_UNAVAILABLE` within the store's timeout, nothing runs; once the
/// server answers again, calls run.
#[test]
fn x11_a_budget_store_that_stops_answering_refuses_in_time_and_runs_nothing() {
    let (_serial, url, runs, proxy, a) = held_case(
        "x11",
        &["PX_BUDGET_URL"],
        &[],
        &[("PX_BUDGET_N", "5"), ("PX_BUDGET_TIMEOUT", "1500")],
    );
    let warm = plain(a.addr, ALICE, "px.note", json!({"text": "a"}));
    assert_eq!(warm.code, "OK", "{warm:?}");
    proxy.hold(true);
    let started = Instant::now();
    let held = plain(a.addr, ALICE, "px.note", json!({"text": "b"}));
    let took = started.elapsed();
    eprintln!("x11: the held call answered {} after {took:?}", held.code);
    // The proxy still holds: a query through it gets no answer while it does.
    let probe_url = proxy.url(&url);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(common::postgres::query(&probe_url, "SELECT 1"));
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(1500)).is_err(),
        "the proxy does not hold"
    );
    proxy.hold(false);
    assert_eq!(held.code, "BUDGET_STORE_UNAVAILABLE", "{held:?}");
    assert!(took < Duration::from_secs(10), "it waited {took:?}");
    assert_eq!(count(&runs, "note"), 1);
    let started = Instant::now();
    let after = loop {
        let after = plain(a.addr, ALICE, "px.note", json!({"text": "c"}));
        if after.code == "OK" || started.elapsed() > Duration::from_secs(10) {
            break after;
        }
        thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(after.code, "OK", "{after:?}");
}

/// In-band × budgets, across processes (the budget spent while a form is unanswered). A budget of
/// one call an hour, shared by A and B; alice's wire shows a form in A; a note in B takes the unit;
/// alice answers "approve". Guarantee 13: at most one body runs.
#[test]
fn x20_an_in_band_answer_after_another_process_spent_the_budget_does_not_exceed_it() {
    let (_serial, _url, runs, a, b) = sharing_a_budget("x20", &[("PX_INBAND", KEY)]);
    let args = json!({"cents": 2020});
    let (_, state) = alices_form(a.addr, args.clone());
    let noted = plain(b.addr, BOB, "px.note", json!({"text": "z"}));
    let answered = answer_wire(a.addr, ALICE, args, &state, "approve");
    let total = count(&runs, "wire") + count(&runs, "note");
    assert!(total <= 1, "{total} runs: {noted:?} {answered:?}");
}

/// Tasks × budgets (a task cancelled while it waits). A budget of one call an hour, shared by A and
/// B; alice's wire waits as a task in A and is asked again; she cancels the task. Guarantee 13: a
/// call refused after its budget check, or dropped unfinished, gives its unit back: a note in B then
/// runs, and nothing else does.
#[test]
fn x30_a_cancelled_task_keeps_no_unit_of_the_shared_budget() {
    let (_serial, _url, runs, a, b) = sharing_a_budget("x30", &[]);
    let created = as_task(a.addr, ALICE, "px.wire", json!({"cents": 3030}));
    let task = created.task.clone().expect("a task");
    let n = IDS.fetch_add(1, Ordering::SeqCst);
    let cancel = json!({"jsonrpc": "2.0", "id": n, "method": "tasks/cancel",
        "params": {"taskId": task, "_meta": meta(tasks())}});
    let (_, cancelled, _) = post_raw(a.addr, ALICE, None, &cancel, Duration::from_secs(5));
    thread::sleep(Duration::from_millis(300));
    let noted = plain(b.addr, BOB, "px.note", json!({"text": "w"}));
    assert_eq!(
        noted.code, "OK",
        "the cancelled task kept the unit: {noted:?} {cancelled:?}"
    );
    assert_eq!(count(&runs, "wire") + count(&runs, "note"), 1);
}

/// Fleet lowering × budgets, across processes (calls refused by the lowered mode while another
/// process shares the budget). A budget of one call an hour, shared by A (joined to the fleet) and B
/// (not joined); the fleet is lowered to SHADOW; alice's notes in A are refused three times; then a
/// note in B. Guarantee 13: a call refused before its budget takes no unit: B's note runs.
#[test]
fn x33_calls_refused_by_a_fleet_lowering_take_no_unit_from_another_process() {
    let (_serial, url, runs) = case("x33");
    let a = start(&runs, &[("PX_BUDGET_URL", &url), ("PX_FLEET_URL", &url)]);
    let b = start(&runs, &[("PX_BUDGET_URL", &url)]);
    lower(&url, "px", "SHADOW");
    thread::sleep(Duration::from_millis(1500));
    let mut refused = Vec::new();
    for _ in 0..3 {
        refused.push(plain(a.addr, ALICE, "px.note", json!({"text": "s"})));
    }
    assert!(refused.iter().all(|r| r.code != "OK"), "{refused:#?}");
    let noted = plain(b.addr, BOB, "px.note", json!({"text": "t"}));
    assert_eq!(noted.code, "OK", "{noted:?} after {refused:#?}");
    assert_eq!(count(&runs, "note"), 1);
}

/// In-band × budgets, across processes (forms unanswered keep no unit). A budget of one call an hour
/// shared by A and B; alice's wire is asked as a form three times in A (three calls, none answered);
/// then a note in B. Guarantee 13: a call refused after its budget check (waiting for an answer)
/// gives its unit back, so asking while a request waits spends nothing: B's note runs.
#[test]
fn x36_unanswered_in_band_forms_keep_no_unit_of_a_shared_budget() {
    let (_serial, _url, _runs, a, b) = sharing_a_budget("x36", &[("PX_INBAND", KEY)]);
    let mut asked = Vec::new();
    for cents in [1, 2, 3] {
        asked.push(
            call(
                a.addr,
                ALICE,
                "px.wire",
                json!({"cents": cents}),
                form(),
                None,
            )
            .code,
        );
    }
    // A refused call's units are given back without the call waiting for it (`BudgetStore::release`):
    // bob's call may get there first, so it is asked again until the units are back, or a deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    let noted = loop {
        let noted = plain(b.addr, BOB, "px.note", json!({"text": "u"}));
        if noted.code == "OK" || Instant::now() > deadline {
            break noted;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(noted.code, "OK", "forms kept units: {asked:?} {noted:?}");
}

/// Tasks × budgets × a stopped server (the budget store stops answering while a task polls). A
/// budget of one call, its store's link holding every byte; alice's task waits; the operator
/// approves while the store does not answer; then it answers again. Guarantee 13: nothing runs
/// while the store cannot answer, and once it answers the budget's one call runs at most once.
#[test]
fn x41_a_task_approved_while_its_budget_store_is_held_runs_at_most_once_after() {
    let (_serial, url, runs, proxy, a) = held_case(
        "x41",
        &["PX_BUDGET_URL"],
        &["PX_STORE"],
        &[("PX_BUDGET_TIMEOUT", "1000")],
    );
    let (task, id) = alices_wire_task(a.addr, &url, 4141);
    proxy.hold(true);
    assert_eq!(approve(&url, id, &[]).status.code(), Some(0));
    let (held_status, held) = poll_task(a.addr, &task, Duration::from_secs(3));
    let while_held = count(&runs, "wire");
    proxy.hold(false);
    let (status, message) = poll_task(a.addr, &task, Duration::from_secs(8));
    assert_eq!(
        while_held, 0,
        "ran while the budget store was held: {held_status:?} {held}"
    );
    assert!(count(&runs, "wire") <= 1, "{status:?} {message}");
}

/// The case `name`: two servers, A and B, sharing the approval store and the budget (of one call an
/// hour, unless `more` says otherwise) in its database, with `more` of their settings.
fn sharing_a_budget(
    name: &str,
    more: &[(&str, &str)],
) -> (
    std::sync::MutexGuard<'static, ()>,
    String,
    PathBuf,
    Server,
    Server,
) {
    let (serial, url, runs) = case(name);
    let mut env = vec![("PX_STORE", url.as_str()), ("PX_BUDGET_URL", url.as_str())];
    env.extend_from_slice(more);
    let (a, b) = (start(&runs, &env), start(&runs, &env));
    (serial, url, runs, a, b)
}
