//! Guarantee 7 over MCP's streamable HTTP, with servers in several processes sharing one store: an
//! in-band answer or an approved row runs its call at most once, an expired row runs nothing, a task
//! rejected by the command ends, and forms, task statuses and the command show no hidden characters.

use crate::support::mcp_server::*;

/// In-band × store, across processes (one request state answered twice). Two processes share the
/// state key and the PostgreSQL store; alice's form is asked in A and answered in B, then the same
/// answer is sent again to A and to B. Guarantee 7: single-use, across processes: the call runs at
/// most once.
#[test]
fn x04_one_in_band_answer_sent_to_two_processes_runs_at_most_once() {
    let (_serial, url, runs) = case("x04");
    let env = [("PX_STORE", url.as_str()), ("PX_INBAND", KEY)];
    let (a, b) = (start(&runs, &env), start(&runs, &env));
    let args = json!({"cents": 404});
    let (_, state) = alices_form(a.addr, args.clone());
    let mut said = Vec::new();
    for addr in [b.addr, a.addr, b.addr, a.addr] {
        said.push(answer_wire(addr, ALICE, args.clone(), &state, "approve"));
    }
    assert!(count(&runs, "wire") <= 1, "{said:#?}");
}

/// The command × the command (two operators answer one row at once, while the call waits): an
/// `approve` and a `reject` of the same request race, as separate processes, twice each. Guarantee
/// 7: one answer wins (exactly one command exits 0), and the call runs at most once whatever the
/// agent retries.
#[test]
fn x17_racing_answers_to_one_row_give_one_answer_and_one_run_at_most() {
    let (_serial, url, runs) = case("x17");
    let a = start(&runs, &[("PX_STORE", &url)]);
    let args = json!({"cents": 1717});
    let _ = call(a.addr, ALICE, "px.wire", args.clone(), json!({}), None);
    let id = pending_id(&url, "px.wire", "alice").to_string();
    let racers: Vec<_> = ["approve", "reject", "approve", "reject"]
        .into_iter()
        .map(|verb| {
            let (url, id) = (url.clone(), id.clone());
            thread::spawn(move || {
                let mut args = vec!["approvals", verb, id.as_str(), "--store", url.as_str()];
                if verb == "reject" {
                    args.extend(["--reason", "no"]);
                }
                cli(&args)
            })
        })
        .collect();
    let outs: Vec<Output> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    let won = outs.iter().filter(|o| o.status.code() == Some(0)).count();
    assert_eq!(won, 1, "{outs:#?}");
    for _ in 0..3 {
        let _ = call(a.addr, ALICE, "px.wire", args.clone(), json!({}), None);
    }
    assert!(count(&runs, "wire") <= 1);
}

/// The command shows agent-written text: `toolgate approvals list`, over a request whose arguments
/// hold bidi overrides, zero-width and tag characters, C1 controls, an escape sequence, a carriage
/// return and a newline that starts a line like the command's own. The guarantee that an operator
/// answers the call it was shown (7, 15): nothing the agent wrote reaches the terminal raw.
#[test]
fn x22_approvals_list_shows_no_hidden_characters_or_forged_lines() {
    let (_serial, url, runs) = case("x22");
    let (_a, _) = hostile_request(&url, &runs);
    assert_shown_clean(&["approvals", "list", "--store", &url]);
}

/// The same text through `toolgate approvals show ID` (the manifest, the arguments, where it
/// stands). Nothing the agent wrote reaches the terminal raw.
#[test]
fn x23_approvals_show_shows_no_hidden_characters_or_forged_lines() {
    let (_serial, url, runs) = case("x23");
    let (_a, id) = hostile_request(&url, &runs);
    assert_shown_clean(&["approvals", "show", &id.to_string(), "--store", &url]);
}

/// The in-band form shows agent-written text to the client's user: the arguments of a hostile call.
/// Every string of the `InputRequired` answer (the form's message and schema) is free of hidden
/// characters and of lines the agent forged.
#[test]
fn x24_the_in_band_form_shows_no_hidden_characters_or_forged_lines() {
    let (_serial, _runs, a) = in_band_case("x24");
    let asked = call(
        a.addr,
        ALICE,
        "px.send",
        json!({"to": EVIL, "body": EVIL}),
        form(),
        None,
    );
    assert_eq!(asked.code, "INPUT_REQUIRED", "{asked:?}");
    let texts = texts_in(&asked.result["inputRequests"]);
    assert!(!texts.is_empty(), "{asked:?}");
    for text in texts {
        assert_eq!(shown_badly(&text), None, "{text:?}");
    }
}

/// Store × budgets × a stopped server (the store stops answering while an approved call is decided).
/// Alice's request is approved; the link of process A to the store holds every byte while she calls
/// again (refused, the store did not answer); once it answers, she calls again twice. Guarantee 7:
/// at most once, whatever was lost in between.
#[test]
fn x25_an_approved_call_retried_across_a_stopped_store_runs_at_most_once() {
    let (_serial, url, runs, proxy, a) = held_case(
        "x25",
        &["PX_STORE", "PX_BUDGET_URL"],
        &[],
        &[("PX_BUDGET_N", "5")],
    );
    let args = json!({"cents": 2525});
    alices_wire_approved(a.addr, &url, args.clone(), &[]);
    proxy.hold(true);
    let held = call(a.addr, ALICE, "px.wire", args.clone(), json!({}), None);
    thread::sleep(Duration::from_millis(500));
    proxy.hold(false);
    let mut after = Vec::new();
    for _ in 0..3 {
        after.push(call(
            a.addr,
            ALICE,
            "px.wire",
            args.clone(),
            json!({}),
            None,
        ));
        thread::sleep(Duration::from_millis(300));
    }
    assert!(count(&runs, "wire") <= 1, "held {held:?}, after {after:#?}");
}

/// Tasks show agent-written text too: a hostile call that waits for an operator becomes a task, and
/// its `tasks/get` answer (its status message, shown by the client) is free of hidden characters and
/// forged lines.
#[test]
fn x26_a_tasks_status_shows_no_hidden_characters_or_forged_lines() {
    let (_serial, url, runs) = case("x26");
    let a = start(&runs, &[("PX_STORE", &url)]);
    let created = as_task(a.addr, ALICE, "px.send", json!({"to": EVIL, "body": EVIL}));
    let task = created.task.clone().expect("a task");
    let (_, message) = task_status(a.addr, ALICE, &task);
    let mut texts = texts_in(&created.result);
    strings(&message, &mut texts);
    for text in texts {
        assert_eq!(shown_badly(&text), None, "{text:?}");
    }
}

/// The command × store expiry (an operator answers after the request expired, while the call still
/// waits). The store's time to live is 1 s; alice's call waits; 2.5 s later the operator approves
/// its row. Guarantee 7: an approval expires by the database's clock: the command refuses (exit 1),
/// and alice's retry does not run.
#[test]
fn x31_approving_an_expired_row_runs_nothing() {
    let (_serial, url, runs) = case("x31");
    let a = start(&runs, &[("PX_STORE", &url), ("PX_TTL", "1000")]);
    let args = json!({"cents": 3131});
    let _ = call(a.addr, ALICE, "px.wire", args.clone(), json!({}), None);
    let id = pending_id(&url, "px.wire", "alice");
    thread::sleep(Duration::from_millis(2500));
    let out = approve(&url, id, &[]);
    let retried = call(a.addr, ALICE, "px.wire", args, json!({}), None);
    assert_eq!(count(&runs, "wire"), 0, "{retried:?}");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

/// The command × tasks (an operator rejects while the task polls). Alice's task waits; the operator
/// rejects its row with `toolgate approvals reject`. Guarantee 2: a rejected call is refused and its
/// body does not run: the task ends (it does not poll forever) and nothing runs.
#[test]
fn x34_a_task_rejected_by_the_command_ends_and_runs_nothing() {
    let (_serial, url, runs) = case("x34");
    let a = start(&runs, &[("PX_STORE", &url)]);
    let (task, id) = alices_wire_task(a.addr, &url, 3434);
    let id = id.to_string();
    let out = cli(&[
        "approvals",
        "reject",
        &id,
        "--reason",
        "not today",
        "--store",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (status, message) = poll_task(a.addr, &task, Duration::from_secs(10));
    assert_eq!(count(&runs, "wire"), 0, "{message}");
    assert!(
        status
            .as_deref()
            .is_some_and(|s| s != "working" && s != "input_required"),
        "the task did not end: {status:?} {message}"
    );
}

/// In-band × tasks (one call asked as a form and as a task at once). Alice's call is asked with a
/// form (the state kept), then again by a client of tasks (a task that waits); she answers the form
/// "approve"; the task polls on. Guarantee 7: one approval runs one call: the body runs once.
#[test]
fn x35_one_call_asked_as_a_form_and_as_a_task_runs_once() {
    let (_serial, url, runs) = case("x35");
    let a = start(&runs, &[("PX_STORE", &url), ("PX_INBAND", KEY)]);
    let args = json!({"cents": 3535});
    let (_, state) = alices_form(a.addr, args.clone());
    let both =
        json!({"elicitation": {"form": {}}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    let as_task = call(a.addr, ALICE, "px.wire", args.clone(), both, None);
    let answered = answer_wire(a.addr, ALICE, args.clone(), &state, "approve");
    if let Some(task) = &as_task.task {
        let _ = poll_task(a.addr, task, Duration::from_secs(3));
    }
    let again = answer_wire(a.addr, ALICE, args, &state, "approve");
    assert!(
        count(&runs, "wire") <= 1,
        "{as_task:?} {answered:?} {again:?}"
    );
}

/// `toolgate ARGS` exits 0, and what it prints has no hidden character and no forged line.
#[track_caller]
fn assert_shown_clean(args: &[&str]) {
    let out = cli(args);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(shown_badly(&text), None, "{text:?}");
}
