//! Guarantee 7 against whoever can reach the store through the public API or write its tables: an
//! approval raced by threads, tasks and stores runs once, cannot be rearmed, runs only its own call at
//! its effective risk, expires; tokens stay in the operator's hands; tampered, locked, dropped or
//! altered tables and a server that goes away refuse the call; every `toolgate approvals` command shows
//! what an agent wrote escaped.

use crate::support::store::*;

// A1. Used at most once: threads and tokio tasks on four gates over two stores (two connections) race
// for one approval per round, sync and async tools in turn.
#[test]
fn a1_one_approval_raced_by_threads_and_tasks_over_two_stores_runs_once() {
    let (_serial, url, s1) = serial_store("atk3_race");
    let s2 = Arc::new(connect(&url));
    let gates: Vec<Gate> = (0..4)
        .map(|i| {
            let store = if i % 2 == 0 { s1.clone() } else { s2.clone() };
            // One agent's gates: an answer runs only the call of the agent that asked.
            gate_on(store, "racer", None)
        })
        .collect();
    let operator = gate_on(s1.clone(), "racer", None);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    const ROUNDS: u64 = 30;
    const THREADS: usize = 6;
    const TASKS: usize = 6;
    for round in 0..ROUNDS {
        let is_async = round % 2 == 1;
        let asked = if is_async {
            any_token(rt.block_on(operator.scope(hit_async(round))))
        } else {
            any_token(operator.run(|| hit(round)))
        };
        operator.approve(&asked).expect("approved");
        let barrier = Arc::new(Barrier::new(THREADS + 1));
        let threads: Vec<_> = (0..THREADS)
            .map(|i| {
                let gate = gates[i % 4].clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    let result = if is_async {
                        wait(gate.scope(hit_async(round)))
                    } else {
                        gate.run(|| hit(round))
                    };
                    result.map_err(|d| d.code())
                })
            })
            .collect();
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let gate = gates[(i + 1) % 4].clone();
                rt.spawn(async move {
                    let result = if is_async {
                        gate.scope(hit_async(round)).await
                    } else {
                        // A sync tool called inside an async scope on an executor thread.
                        gate.scope(async move { hit(round) }).await
                    };
                    result.map_err(|d| d.code())
                })
            })
            .collect();
        barrier.wait();
        let mut results: Vec<Result<(), DenialCode>> =
            threads.into_iter().map(|t| t.join().unwrap()).collect();
        for task in tasks {
            results.push(rt.block_on(task).unwrap());
        }
        let ok = results.iter().filter(|r| r.is_ok()).count();
        let body = runs(if is_async { "hit_async" } else { "hit" }, round);
        for r in &results {
            if let Err(code) = r {
                assert!(
                    matches!(
                        code,
                        DenialCode::ApprovalReused | DenialCode::ApprovalStoreUnavailable
                    ),
                    "round {round}: a racer was refused with {code:?}"
                );
            }
        }
        assert_eq!(body, ok, "round {round}: bodies and Ok results differ");
        assert!(
            ok <= 1,
            "round {round}: the approval ran {ok} times: {results:?}"
        );
        assert_eq!(
            ok, 1,
            "round {round}: no racer ran the approved call: {results:?}"
        );
    }
}

// A2. Used at most once: after its call used it, the old token (and the request id) answers nothing,
// and the call stays refused.
#[test]
fn a2_a_used_approval_cannot_be_rearmed_by_its_old_token_or_id() {
    let (_serial, url, store) = serial_store("atk3_replay");
    let gate = gate_on(store.clone(), "replay", None);
    let call = || pay("replay".into());
    let t1 = any_token(gate.run(call));
    let t1b = any_token(gate.run(call)); // a second token for the same request
    gate.approve(&t1).unwrap();
    gate.run(call).expect("the approved call runs");
    assert_eq!(code(gate.run(call)), DenialCode::ApprovalReused);
    // Replaying both tokens of the used request, and its id through the operator's channel.
    assert!(gate.approve(&t1).is_err(), "the old token answered again");
    assert!(
        gate.approve(&t1b).is_err(),
        "the second old token answered again"
    );
    let id = query(
        &url,
        "SELECT id FROM toolgate.approvals WHERE consumed_at IS NOT NULL",
    )[0][0]
        .clone()
        .unwrap();
    let id: i64 = id.parse().unwrap();
    assert!(wait(store.answer_id(id, approve("mallory"))).is_err());
    cli_exits(&url, &["approve", &id.to_string(), "--for-session"], 1);
    cli_exits(&url, &["reject", &id.to_string(), "--reason", "x"], 1);
    // However often it is asked again, nothing approved it since.
    for _ in 0..3 {
        let r = gate.run(call);
        assert!(r.is_err(), "the used approval ran its call again");
    }
    assert_eq!(runs("pay", "replay"), 1);
    // And the used request still says who approved it and that it is used.
    let shown = wait(store.show(id)).unwrap().unwrap();
    assert!(matches!(shown.state, RequestState::Used(_)), "{shown:?}");
}

// A3. Bound to the call: other arguments, another redacted value (same shown digest), another tool with
// identical arguments, another tool with the same function name. Another agent label is documented as
// outside the binding ("an operator answers the call, wherever it is made").
#[test]
fn a3_an_approval_runs_only_its_own_call_redacted_values_and_tool_included() {
    let (_serial, url, store) = serial_store("atk3_binding");
    let (sink, gate) = audited_gate_on(&store, "desk");
    let other_gate = gate_elsewhere(&url, "other-agent");
    let call = || wire("acme".into(), 500, "1111".into());
    any_token(gate.run(call));
    let shown = r#"{"account":"acme","cents":500,"pin":"[REDACTED]"}"#;
    let id = pending_id(&store, "atk3_bank.wire", shown);
    cli_exits(&url, &["approve", &id.to_string(), "--by", "carol"], 0);
    // Another PIN: same shown arguments, same shown digest, another real value.
    for pin in ["1112", "", "1111 ", "１１１１"] {
        let r = gate.run(|| wire("acme".into(), 500, pin.into()));
        assert_eq!(code(r), DenialCode::ApprovalPending, "pin {pin:?}");
    }
    // Other visible arguments.
    assert_pending(gate.run(|| wire("acme".into(), 501, "1111".into())));
    assert_pending(gate.run(|| wire("ACME".into(), 500, "1111".into())));
    // The same function name and arguments in another domain, and another tool.
    assert!(
        gate.run(|| other::wire("acme".into(), 500, "1111".into()))
            .is_err()
    );
    assert!(gate.run(|| pay("acme".into())).is_err());
    assert_eq!(runs("other.wire", "acme/500/1111"), 0);
    assert_eq!(runs("wire", "acme/500/1111"), 0);
    assert_eq!(runs("wire", "acme/500/1112"), 0);
    // The approved call runs once, and only for the agent that asked (the agent is in the binding).
    let first = other_gate.run(call);
    assert_eq!(code(first), DenialCode::ApprovalPending);
    let second = gate.run(call);
    assert!(second.is_ok(), "{second:?}");
    assert_eq!(runs("wire", "acme/500/1111"), 1);
    // If this gate ran it, its audit log names the operator.
    if second.is_ok() {
        let records = sink.records();
        assert_eq!(
            approved_by(&records, "atk3_bank.wire"),
            vec![Some("carol".to_owned())]
        );
    }
}

// A4. Escalation: an escalated call needs an approval, is stored and shown at its effective risk, and its
// approval, at that risk, runs it once; the same arguments at a lower risk never consume it.
#[test]
fn a4_an_escalated_call_is_asked_and_bound_at_its_effective_risk() {
    let (_serial, url, store) = serial_store("atk3_escalate");
    let gate = gate_on(store.clone(), "shell", None);
    ESCALATE_ALL.store(false, Ordering::SeqCst);
    let denied = gate.run(|| exec("sudo rm -rf /tmp/x".into())).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalPending);
    assert_eq!(denied.risk(), Risk::HighWrite);
    let t = denied.approval_token().unwrap().to_owned();
    let listed = wait(store.list()).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].binding.risk,
        Risk::HighWrite,
        "the operator sees the declared risk"
    );
    let row = query(&url, "SELECT risk FROM toolgate.approvals");
    assert_eq!(row[0][0].as_deref(), Some("HIGH_WRITE"));
    let listed_cli = out(&cli(&url, &["list"]));
    assert!(listed_cli.contains("HIGH_WRITE"), "{listed_cli}");
    // An unescalated command runs without asking (LOW_WRITE in FULL_AUTO) and uses nothing.
    gate.run(|| exec("ls".into())).unwrap();
    // Escalating everything: `ls` at HIGH_WRITE is another call, not the approved `sudo` one.
    ESCALATE_ALL.store(true, Ordering::SeqCst);
    let ls = gate.run(|| exec("ls".into()));
    ESCALATE_ALL.store(false, Ordering::SeqCst);
    assert!(ls.is_err(), "an escalated call ran without an approval");
    gate.approve(&t).unwrap();
    assert!(gate.run(|| exec("ls".into())).is_ok());
    assert_eq!(runs("exec", "ls"), 2);
    gate.run(|| exec("sudo rm -rf /tmp/x".into()))
        .expect("approved at its risk");
    assert_refused(
        gate.run(|| exec("sudo rm -rf /tmp/x".into())),
        DenialCode::ApprovalReused,
    );
    assert_eq!(runs("exec", "sudo rm -rf /tmp/x"), 1);
}

// A5. Expiry and the time to live: zero and more than a day refused at connect (never a panic);
// a request answered after it expired is refused by every channel, and its call never runs.
#[test]
fn a5_time_to_live_bounds_and_answers_after_expiry() {
    let _serial = common::serial();
    let url = database("atk3_expiry");
    let day = Duration::from_secs(24 * 60 * 60);
    for (ttl, ok) in [
        (Duration::ZERO, false),
        (day + Duration::from_nanos(1), false),
        (day + Duration::from_secs(1), false),
        (Duration::MAX, false),
        (day, true),
        (Duration::from_secs(1), true),
    ] {
        let connected =
            std::panic::catch_unwind(|| PostgresStore::builder().ttl(ttl).connect(&url));
        let connected = connected.unwrap_or_else(|_| panic!("connect panicked with ttl {ttl:?}"));
        assert_eq!(connected.is_ok(), ok, "ttl {ttl:?}: {:?}", connected.err());
    }
    // A sub-microsecond ttl (below PostgreSQL's resolution) must not make a request that never expires.
    if let Ok(tiny) = PostgresStore::builder()
        .ttl(Duration::from_nanos(1))
        .connect(&url)
    {
        let gate = gate_on(Arc::new(tiny), "tiny", None);
        let t = gate
            .run(|| pay("tiny".into()))
            .err()
            .and_then(|d| d.approval_token().map(str::to_owned));
        if let Some(t) = t {
            std::thread::sleep(Duration::from_millis(50));
            let _ = gate.approve(&t);
            assert!(
                gate.run(|| pay("tiny".into())).is_err(),
                "a 1 ns request answered its call"
            );
        }
    }
    let store = Arc::new(
        PostgresStore::builder()
            .ttl(Duration::from_secs(1))
            .connect(&url)
            .unwrap(),
    );
    let gate = gate_on(store.clone(), "late", None);
    let t_late = any_token(gate.run(|| pay("late".into())));
    any_token(gate.run(|| pay("late-cli".into())));
    any_token(gate.run(|| pay("late-reject".into())));
    let id_cli = pending_id(&store, "atk3_bank.pay", r#"{"note":"late-cli"}"#);
    let id_rej = pending_id(&store, "atk3_bank.pay", r#"{"note":"late-reject"}"#);
    std::thread::sleep(Duration::from_millis(1_300));
    assert_eq!(gate.approve(&t_late), Err(ApproveError::Expired));
    assert_eq!(
        wait(store.answer_id(id_cli, approve("ops"))),
        Err(ApproveError::Expired)
    );
    cli_exits(&url, &["approve", &id_cli.to_string()], 1);
    cli_exits(
        &url,
        &["reject", &id_rej.to_string(), "--reason", "late"],
        1,
    );
    for note in ["late", "late-cli", "late-reject"] {
        let r = gate.run(|| pay(note.into()));
        assert!(r.is_err(), "{note} ran");
        assert_eq!(runs("pay", note), 0);
    }
    // An approval that expires before its call: the database's clock decides, and it does not revive.
    let t = any_token(gate.run(|| pay("short".into())));
    gate.approve(&t).unwrap();
    std::thread::sleep(Duration::from_millis(1_300));
    assert_refused(
        gate.run(|| pay("short".into())),
        DenialCode::ApprovalExpired,
    );
    assert_eq!(runs("pay", "short"), 0);
}

// A6. Tokens are never stored (only SHA-256), never in what the agent sees (message, Display, JSON, a
// by-name error), never in the audit log or the command's output; and long enough that the stored
// hash cannot be inverted by guessing.
#[test]
fn a6_tokens_are_nowhere_but_in_the_operators_hands() {
    let (_serial, url, store) = serial_store("atk3_tokens");
    let (sink, gate) = audited_gate_on(&store, "tokens");
    let mut tokens = Vec::new();
    let mut seen_by_agent = String::new();
    let remember = |denied: Denied, tokens: &mut Vec<String>, seen: &mut String| {
        let t = denied.approval_token().expect("a token").to_owned();
        if format!("{denied:?}").contains(t.as_str()) {
            eprintln!("(informational) the Debug of a refusal carries its token");
        }
        seen.push_str(&denied.to_string());
        seen.push_str(&denied.message());
        seen.push_str(&serde_json::to_string(&denied).unwrap());
        if let Some(detail) = denied.detail() {
            seen.push_str(detail);
        }
        tokens.push(t);
    };
    // Pending, asked three times (three tokens for one request).
    for _ in 0..3 {
        remember(
            gate.run(|| pay("pending".into())).unwrap_err(),
            &mut tokens,
            &mut seen_by_agent,
        );
    }
    // Approved and used; rejected and read; approved for the session; an async tool.
    remember(
        gate.run(|| pay("used".into())).unwrap_err(),
        &mut tokens,
        &mut seen_by_agent,
    );
    gate.approve(tokens.last().unwrap()).unwrap();
    gate.run(|| pay("used".into())).unwrap();
    remember(
        gate.run(|| pay("rejected".into())).unwrap_err(),
        &mut tokens,
        &mut seen_by_agent,
    );
    gate.answer(
        tokens.last().unwrap(),
        Answer::Reject {
            by: "ops".into(),
            reason: "no".into(),
            stop: false,
        },
    )
    .unwrap();
    let rejected = gate.run(|| pay("rejected".into())).unwrap_err();
    seen_by_agent.push_str(&rejected.to_string());
    remember(
        gate.run(|| pay("session".into())).unwrap_err(),
        &mut tokens,
        &mut seen_by_agent,
    );
    gate.answer(
        tokens.last().unwrap(),
        Answer::Approve {
            by: "ops".into(),
            for_session: true,
            confirmation: None,
        },
    )
    .unwrap();
    gate.run(|| pay("session".into())).unwrap();
    remember(
        wait(gate.scope(close("async".into()))).unwrap_err(),
        &mut tokens,
        &mut seen_by_agent,
    );
    // The operator's channels and the audit log.
    let mut elsewhere = dump_database(&url);
    elsewhere.push_str(&out(&cli(&url, &["list"])));
    for id in query(&url, "SELECT id FROM toolgate.approvals")
        .into_iter()
        .flatten()
        .flatten()
    {
        elsewhere.push_str(&out(&cli(&url, &["show", &id])));
        elsewhere.push_str(&format!("{:?}", wait(store.show(id.parse().unwrap()))));
    }
    elsewhere.push_str(&format!("{:?}", wait(store.list())));
    for record in sink.records() {
        elsewhere.push_str(&serde_json::to_string(&record).unwrap());
    }
    let table = dump_database(&url);
    for t in &tokens {
        assert!(
            !seen_by_agent.contains(t.as_str()),
            "the agent sees a token"
        );
        assert!(
            !elsewhere.contains(t.as_str()),
            "a token is stored or shown: {t}"
        );
        assert!(
            table.contains(&sha256_hex(t)),
            "its hash is not the one stored"
        );
        // Entropy: the stored hash is unsalted, so the token must not be guessable.
        let hex = t.chars().all(|c| c.is_ascii_hexdigit());
        let bits_per_char = if hex { 4.0 } else { 6.0 };
        assert!(
            t.len() as f64 * bits_per_char >= 128.0,
            "token {t:?} has fewer than 128 bits: a reader of the table can invert its SHA-256"
        );
    }
    let distinct: std::collections::BTreeSet<_> = tokens.iter().collect();
    assert_eq!(distinct.len(), tokens.len(), "a token was handed out twice");
    // The by-name error the agent reads does not carry it either.
    eprintln!("(informational) Debug of a refusal: {:?}", rejected);
}

// A7. Bounded per agent, under concurrency: sixteen threads on two stores (two connections) for one
// agent label, each making distinct calls at once, hold at most the bound; another agent still asks.
#[test]
fn a7_the_bound_on_pending_requests_holds_under_concurrent_asks() {
    let _serial = common::serial();
    let url = database("atk3_bound");
    const MAX: usize = 5;
    let store = |url: &str| {
        Arc::new(
            PostgresStore::builder()
                .timeout(Duration::from_secs(10))
                .max_pending_per_agent(MAX)
                .connect(url)
                .unwrap(),
        )
    };
    let gates = [
        gate_on(store(&url), "flood", None),
        gate_on(store(&url), "flood", None),
    ];
    let barrier = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let gate = gates[i % 2].clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut tokens = 0;
                for j in 0..4 {
                    match gate.run(|| pay(format!("flood-{i}-{j}"))) {
                        Ok(()) => panic!("ran"),
                        Err(d) => {
                            assert!(approval_codes().contains(&d.code()), "{d}");
                            tokens += usize::from(d.approval_token().is_some());
                        }
                    }
                }
                tokens
            })
        })
        .collect();
    let tokens: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let pending = query(
        &url,
        "SELECT count(*) FROM toolgate.approvals WHERE agent = 'flood' AND answered_at IS NULL",
    );
    let pending: usize = pending[0][0].as_deref().unwrap().parse().unwrap();
    assert!(
        pending <= MAX,
        "{pending} pending requests for one agent, bound {MAX}"
    );
    assert!(
        tokens <= MAX,
        "{tokens} tokens handed out past the bound {MAX}"
    );
    // Another agent still gets a token; an agent with no label, and one labelled "", are reported.
    let other = gate_on(store(&url), "quiet", None);
    any_token(other.run(|| pay("quiet".into())));
    let unlabelled = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store(
            PostgresStore::builder()
                .max_pending_per_agent(1)
                .connect(&url)
                .unwrap(),
        )
        .build()
        .unwrap();
    let empty = gate_on(
        Arc::new(
            PostgresStore::builder()
                .max_pending_per_agent(1)
                .connect(&url)
                .unwrap(),
        ),
        "",
        None,
    );
    any_token(unlabelled.run(|| pay("unlabelled".into())));
    let e = empty.run(|| pay("empty-label".into())).unwrap_err();
    eprintln!(
        "(informational) an agent labelled \"\" after an unlabelled one with bound 1: token {}",
        e.approval_token().is_some()
    );
}

// A8. Fails closed, bounded in time: with the table locked by another session, a sync and an async call
// are refused APPROVAL_STORE_UNAVAILABLE within about the timeout; after the lock goes, the approval
// runs its call at most once.
#[test]
fn a8_a_locked_table_refuses_within_the_timeout_and_loses_no_once() {
    let _serial = common::serial();
    let url = database("atk3_lock");
    let store = Arc::new(
        PostgresStore::builder()
            .timeout(Duration::from_millis(700))
            .connect(&url)
            .unwrap(),
    );
    let gate = gate_on(store.clone(), "lock", None);
    let t = any_token(gate.run(|| pay("locked".into())));
    gate.approve(&t).unwrap();
    let ta = any_token(wait(gate.scope(close("locked".into()))));
    gate.approve(&ta).unwrap();
    let t_other = any_token(gate.run(|| pay("other".into())));
    let holder = Holder::new(
        &url,
        "BEGIN; LOCK TABLE toolgate.approvals IN ACCESS EXCLUSIVE MODE;",
    );
    let limit = Duration::from_secs(5);
    let refused = within(limit, || gate.run(|| pay("locked".into())));
    assert_store_unavailable(refused);
    let refused = within(limit, || wait(gate.scope(close("locked".into()))));
    assert_store_unavailable(refused);
    // An operator's answer, too.
    let answered = within(limit, || gate.approve(&t_other));
    assert_answer_lost(answered);
    holder.run("ROLLBACK");
    drop(holder);
    // Whatever the timed-out statements did once the lock was gone, each approval ran at most once.
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        let _ = gate.run(|| pay("locked".into()));
        let _ = wait(gate.scope(close("locked".into())));
    }
    assert!(runs("pay", "locked") <= 1, "ran {}", runs("pay", "locked"));
    assert!(
        runs("close", "locked") <= 1,
        "ran {}",
        runs("close", "locked")
    );
    eprintln!(
        "(informational) after the lock: pay ran {}, close ran {}",
        runs("pay", "locked"),
        runs("close", "locked")
    );
}

// A9. Fails closed on rows the store did not write: unknown answers, NULLs, a bogus risk or mode. The
// call never runs, never panics, and is refused with an approval code.
#[test]
fn a9_tampered_rows_refuse_the_call_and_never_panic() {
    let (_serial, url, store) = serial_store("atk3_tamper");
    let tamper_sink = MemorySink::new();
    let gate = gate_on(store.clone(), "tamper", Some(&tamper_sink));
    drop_checks(&url);
    // (case, update on the approved row, must it stay unrun?)
    let cases: &[(&str, &str)] = &[
        ("risk-bogus", "risk = 'BOGUS'"),
        ("risk-null", "risk = NULL"),
        ("answer-upper", "answer = 'APPROVE'"),
        ("answer-yes", "answer = 'yes'"),
        ("answer-empty", "answer = ''"),
        ("answer-space", "answer = 'approve '"),
        ("answer-null", "answer = NULL"),
        ("answer-no-time", "answered_at = NULL"),
        ("reject-null-reason", "answer = 'reject', reason = NULL"),
        ("reject-null-stop", "answer = 'reject', stop = NULL"),
        ("by-null", "answered_by = NULL"),
        ("session-null", "for_session = NULL"),
        ("mode-bogus", "mode = 'BOGUS'"),
        ("tokens-null", "token_sha256 = NULL"),
        ("expires-infinity", "expires_at = '-infinity'"),
        ("created-future", "created_at = 'infinity'"),
    ];
    let mut got_through = Vec::new();
    for (case, update) in cases {
        let note = format!("tamper-{case}");
        let t = any_token(gate.run(|| pay(note.clone())));
        gate.approve(&t).unwrap();
        query(
            &url,
            &format!(
                "UPDATE toolgate.approvals SET {update} WHERE arguments = '{{\"note\":\"{note}\"}}'"
            ),
        );
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gate.run(|| pay(note.clone()))
        }));
        let result = result.unwrap_or_else(|_| panic!("{case}: the call panicked"));
        match result {
            Ok(()) => got_through.push(format!("{case}: ran")),
            Err(denied) => assert!(
                approval_codes().contains(&denied.code()),
                "{case}: {denied}"
            ),
        }
        // The operator's channel, reading the row, neither panics.
        let shown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let list = wait(store.list());
            let rows = query(
                &url,
                &format!(
                    "SELECT id FROM toolgate.approvals WHERE arguments = '{{\"note\":\"{note}\"}}'"
                ),
            );
            let id: i64 = rows[0][0].as_deref().unwrap().parse().unwrap();
            (
                list.is_ok(),
                wait(store.show(id)).map(|r| r.map(|r| r.state)),
            )
        }));
        assert!(shown.is_ok(), "{case}: list or show panicked");
        let listed = cli(&url, &["list"]);
        assert_ne!(
            listed.status.code(),
            Some(101),
            "{case}: the command panicked: {}",
            out(&listed)
        );
        // Put the row out of the way for the next case.
        query(
            &url,
            &format!("DELETE FROM toolgate.approvals WHERE arguments = '{{\"note\":\"{note}\"}}'"),
        );
    }
    // The gate still works after all that.
    let t = any_token(gate.run(|| pay("after".into())));
    gate.approve(&t).unwrap();
    gate.run(|| pay("after".into())).unwrap();
    // An unknown answer, a NULL answer, an answer without its time, or a bogus risk must never run.
    // (A NULL `answered_by`, `for_session` or a bogus `mode` are reported.)
    let must_not: Vec<_> = got_through
        .iter()
        .filter(|g| {
            !g.starts_with("by-null")
                && !g.starts_with("session-null")
                && !g.starts_with("mode-bogus")
                && !g.starts_with("created-future")
                && !g.starts_with("tokens-null")
        })
        .collect();
    eprintln!("(informational) tampered rows whose call ran: {got_through:?}");
    assert!(
        must_not.is_empty(),
        "tampered approvals ran their call: {must_not:?}"
    );
}

// A10. Fails closed when the table is dropped or altered, or the schema is newer than the crate.
#[test]
fn a10_dropped_or_altered_tables_refuse_the_call() {
    let _serial = common::serial();
    let cases: &[(&str, &str)] = &[
        ("drop", "DROP TABLE toolgate.approvals"),
        ("drop-schema", "DROP SCHEMA toolgate CASCADE"),
        (
            "type",
            "ALTER TABLE toolgate.approvals ALTER COLUMN policy_version TYPE text",
        ),
        (
            "rename",
            "ALTER TABLE toolgate.approvals RENAME COLUMN consumed_at TO gone",
        ),
        (
            "answer-type",
            "ALTER TABLE toolgate.approvals ALTER COLUMN for_session TYPE text",
        ),
        (
            "revoke",
            "ALTER TABLE toolgate.approvals RENAME TO approvals_old; CREATE VIEW toolgate.approvals AS SELECT * FROM toolgate.approvals_old",
        ),
    ];
    for (case, sql) in cases {
        let url = database(&format!("atk3_alter_{}", case.replace('-', "_")));
        let store = Arc::new(
            PostgresStore::builder()
                .timeout(Duration::from_secs(3))
                .connect(&url)
                .unwrap(),
        );
        let gate = gate_on(store.clone(), "alter", None);
        let note = format!("alter-{case}");
        let t = any_token(gate.run(|| pay(note.clone())));
        gate.approve(&t).unwrap();
        exec_sql(&url, sql).unwrap_or_else(|e| panic!("{case}: {e}"));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gate.run(|| pay(note.clone()))
        }))
        .unwrap_or_else(|_| panic!("{case}: the call panicked"));
        match result {
            Ok(()) if *case == "revoke" => {} // a view over the same rows is the same table
            Ok(()) => panic!("{case}: the call ran"),
            Err(d) => assert!(approval_codes().contains(&d.code()), "{case}: {d}"),
        }
        let async_result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait(gate.scope(close(note.clone())))
        }))
        .unwrap_or_else(|_| panic!("{case}: the async call panicked"));
        assert!(async_result.is_err(), "{case}: the async call ran");
        if *case == "drop-schema" {
            // Connecting does not make the schema again (only `toolgate migrate` does).
            assert_eq!(
                code(gate.run(|| pay(note.clone()))),
                DenialCode::ApprovalStoreUnavailable,
                "{case}"
            );
        }
        let listed = cli(&url, &["list"]);
        assert_ne!(listed.status.code(), Some(101), "{case}: {}", out(&listed));
        if *case == "drop-schema" {
            assert_eq!(listed.status.code(), Some(3), "{case}: {}", out(&listed));
            assert!(
                String::from_utf8_lossy(&listed.stderr).contains("toolgate migrate"),
                "{case}: {}",
                out(&listed)
            );
            assert!(
                gate.run(|| pay(note.clone())).is_err(),
                "{case}: ran after the schema was dropped"
            );
        }
        if *case == "drop" {
            assert_eq!(listed.status.code(), Some(3), "{case}: {}", out(&listed));
            assert_eq!(
                code(gate.run(|| pay(note.clone()))),
                DenialCode::ApprovalStoreUnavailable,
                "{case}"
            );
        }
        assert_eq!(runs("pay", &note), usize::from(*case == "revoke"));
    }
    // A schema newer than this crate is refused at connect, by the store and by the command.
    let url = database("atk3_newer");
    drop(connect(&url));
    query(
        &url,
        "INSERT INTO toolgate.schema_version (version) VALUES (99)",
    );
    assert!(
        PostgresStore::connect(&url).is_err(),
        "a newer schema was accepted"
    );
    cli_exits(&url, &["list"], 3);
}

// A14. `--for-session`: the grant covers that call's arguments only, on the gate that used the answer
// (and its clones), and says who granted it; other arguments, other gates, other tools still ask.
#[test]
fn a14_a_session_grant_from_the_command_covers_only_that_call_on_that_gate() {
    let (_serial, url, store) = serial_store("atk3_session");
    let (sink, gate) = audited_gate_on(&store, "session");
    let second_process = gate_elsewhere(&url, "session");
    any_token(gate.run(|| wire("acme".into(), 1, "9999".into())));
    let id = pending_wire_id(&store, "atk3_bank.wire", "acme", 1);
    cli_exits(
        &url,
        &["approve", &id.to_string(), "--for-session", "--by", "erin"],
        0,
    );
    gate.run(|| wire("acme".into(), 1, "9999".into()))
        .expect("the approved call");
    // The grant: the same call again, on this gate and a clone.
    gate.run(|| wire("acme".into(), 1, "9999".into()))
        .expect("granted for the session");
    gate.clone()
        .run(|| wire("acme".into(), 1, "9999".into()))
        .expect("granted for a clone");
    assert_eq!(runs("wire", "acme/1/9999"), 3);
    // Not other arguments, a redacted one included; not another tool; not another gate.
    assert!(
        gate.run(|| wire("acme".into(), 2, "9999".into())).is_err(),
        "other cents ran"
    );
    assert!(
        gate.run(|| wire("acme".into(), 1, "0000".into())).is_err(),
        "another PIN ran"
    );
    assert!(
        gate.run(|| wire("evil".into(), 1, "9999".into())).is_err(),
        "another account ran"
    );
    assert!(
        gate.run(|| other::wire("acme".into(), 1, "9999".into()))
            .is_err(),
        "another tool ran"
    );
    assert!(
        second_process
            .run(|| wire("acme".into(), 1, "9999".into()))
            .is_err(),
        "another gate ran"
    );
    assert_eq!(
        runs("wire", "acme/2/9999") + runs("wire", "acme/1/0000") + runs("wire", "evil/1/9999"),
        0
    );
    assert_eq!(runs("other.wire", "acme/1/9999"), 0);
    assert_eq!(runs("wire", "acme/1/9999"), 3);
    let grants = gate.grants();
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert!(
        grants[0].exact_arguments,
        "the command's grant covers the whole tool: {grants:?}"
    );
    assert_eq!(grants[0].by, "erin");
    assert_eq!(grants[0].risk, Risk::HighWrite);
    let records = sink.records();
    assert_eq!(
        by_of(&records, Stage::SessionGranted, None, "atk3_bank.wire"),
        vec![Some("erin".to_owned())]
    );
    let granted = by_of(
        &records,
        Stage::Enter,
        Some(Decision::Granted),
        "atk3_bank.wire",
    );
    assert_eq!(granted, vec![Some("erin".to_owned()); 2], "{granted:?}");
    // Revoked, it asks again.
    assert_eq!(gate.revoke_grants(None, "ops"), 1);
    assert!(gate.run(|| wire("acme".into(), 1, "9999".into())).is_err());
    assert_eq!(runs("wire", "acme/1/9999"), 3);
}

// A16. Operators racing: many answers to one request at once (threads over two connections, and two
// command processes approving and rejecting): one wins, the others are told so, and the call does what
// the winner said, once.
#[test]
fn a16_racing_answers_to_one_request_one_wins() {
    let (_serial, url, s1) = serial_store("atk3_answers");
    let s2 = Arc::new(connect(&url));
    let gate = gate_on(s1.clone(), "answers", None);
    for round in 0..10u64 {
        let note = format!("answer-race-{round}");
        let t = any_token(gate.run(|| pay(note.clone())));
        let id = id_of_token(&url, &t).parse::<i64>().unwrap();
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let store = if i % 2 == 0 { s1.clone() } else { s2.clone() };
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let answer = if i % 2 == 0 {
                        approve(&format!("op{i}"))
                    } else {
                        Answer::Reject {
                            by: format!("op{i}"),
                            reason: format!("r{i}"),
                            stop: false,
                        }
                    };
                    barrier.wait();
                    (answer.clone(), wait(store.answer_id(id, answer)))
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<_> = results.iter().filter(|(_, r)| r.is_ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        for (_, r) in &results {
            if let Err(e) = r {
                assert_eq!(*e, ApproveError::AlreadyApproved, "round {round}");
            }
        }
        let (answer, _) = winners[0];
        let shown = wait(s2.show(id)).unwrap().unwrap();
        assert_eq!(
            shown.state,
            RequestState::Answered(answer.clone()),
            "round {round}"
        );
        let r = gate.run(|| pay(note.clone()));
        match answer {
            Answer::Approve { .. } => assert!(r.is_ok(), "round {round}: {r:?}"),
            _ => assert_eq!(code(r), DenialCode::ApprovalRejected),
        }
        assert!(
            gate.run(|| pay(note.clone())).is_err(),
            "round {round}: ran twice"
        );
    }
    // Two command processes at once.
    for round in 0..5u64 {
        let note = format!("cli-race-{round}");
        let t = any_token(gate.run(|| pay(note.clone())));
        let id = id_of_token(&url, &t);
        let spawn = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_toolgate"))
                .arg("approvals")
                .args(args)
                .env("TOOLGATE_STORE", &url)
                .env("USER", "racer")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        };
        let mut p1 = spawn(&["approve", &id]);
        let mut p2 = spawn(&["reject", &id, "--reason", "no"]);
        let c1 = p1.wait().unwrap().code();
        let c2 = p2.wait().unwrap().code();
        let mut codes = [c1, c2];
        codes.sort();
        assert_eq!(
            codes,
            [Some(0), Some(1)],
            "round {round}: approve {c1:?}, reject {c2:?}"
        );
        let r = gate.run(|| pay(note.clone()));
        assert_eq!(
            r.is_ok(),
            c1 == Some(0),
            "round {round}: the call did not follow the winner"
        );
    }
}

// A17. Fails closed when the server goes: stopped (sync, async, operator's channels, the command), its
// connections killed; unreachable at connect, within the timeout. Nothing approved runs twice.
#[test]
fn a17_a_server_that_goes_away_refuses_and_runs_nothing_twice() {
    let _serial = common::serial();
    let (cluster, url, store) = store_on_own_cluster("atk3_down");
    let gate = gate_on(store.clone(), "down", None);
    let mut approved = Vec::new();
    for i in 0..4 {
        let note = format!("down-{i}");
        let t = any_token(gate.run(|| pay(note.clone())));
        gate.approve(&t).unwrap();
        approved.push(note);
    }
    let t_async = any_token(wait(gate.scope(close("down".into()))));
    gate.approve(&t_async).unwrap();
    let pending = any_token(gate.run(|| pay("down-pending".into())));
    let id = pending_id(&store, "atk3_bank.pay", r#"{"note":"down-pending"}"#);
    // Connections killed under the store: the next calls reconnect; each approval runs at most once.
    query(
        &url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = current_database()",
    );
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        let r = gate.run(|| pay(approved[0].clone()));
        outcomes.push(r.map_err(|d| d.code()));
    }
    assert!(
        outcomes.iter().all(|o| matches!(
            o,
            Ok(()) | Err(DenialCode::ApprovalStoreUnavailable) | Err(DenialCode::ApprovalReused)
        )),
        "{outcomes:?}"
    );
    assert!(runs("pay", &approved[0]) <= 1);
    let r = gate.run(|| pay(approved[1].clone()));
    assert!(
        r.is_ok(),
        "the store did not reconnect after its connection was killed: {r:?}"
    );
    // Stopped.
    cluster.stop();
    for note in &approved[2..] {
        assert_store_unavailable(gate.run(|| pay(note.clone())));
    }
    assert_store_unavailable(wait(gate.scope(close("down".into()))));
    assert_answer_lost(gate.approve(&pending));
    assert!(wait(store.list()).is_err());
    assert_answer_lost(wait(store.answer_id(id, approve("ops"))));
    cli_exits(&url, &["approve", &id.to_string()], 3);
    cli_exits(&url, &["list"], 3);
    // Connecting to nothing fails, within the timeout.
    let half_a_second = || PostgresStore::builder().timeout(Duration::from_millis(500));
    let stopped = within(Duration::from_secs(3), || half_a_second().connect(&url));
    assert!(stopped.is_err());
    let blackhole = within(Duration::from_secs(3), || {
        half_a_second().connect("postgres://toolgate@10.255.255.1:5432/x")
    });
    assert!(blackhole.is_err());
    let zero = std::panic::catch_unwind(|| {
        PostgresStore::builder()
            .timeout(Duration::ZERO)
            .connect(&url)
    });
    assert!(zero.is_ok(), "a zero timeout panicked");
    // Back: nothing approved ran twice, nothing approved was lost, the pending request still waits.
    cluster.start();
    for note in &approved {
        let _ = gate.run(|| pay(note.clone()));
        let _ = gate.run(|| pay(note.clone()));
        assert!(runs("pay", note) <= 1, "{note} ran {}", runs("pay", note));
    }
    for note in &approved[1..] {
        assert_eq!(runs("pay", note), 1, "{note} was lost");
    }
    wait(gate.scope(close("down".into()))).unwrap();
    assert_eq!(runs("close", "down"), 1);
    gate.approve(&pending).unwrap();
    gate.run(|| pay("down-pending".into())).unwrap();
    // A huge timeout does not panic anywhere.
    let huge = std::panic::catch_unwind(|| {
        PostgresStore::builder()
            .timeout(Duration::MAX)
            .connect(&url)
    });
    let huge = huge
        .expect("a Duration::MAX timeout panicked at connect")
        .expect("connects");
    let huge_gate = gate_on(Arc::new(huge), "huge", None);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        huge_gate.run(|| pay("huge".into()))
    }));
    assert!(r.is_ok(), "a Duration::MAX timeout panicked at call time");
}

// A19. Fails closed on a broken invariant: an approved row whose `answered_by` is NULL (the command
// refuses an empty `--by` with 64, so no operator can write it) must not run its call under an audit
// record whose `by` is empty: SECURITY.md, "a store that ... answers what it should not refuses the call
// with APPROVAL_STORE_UNAVAILABLE"; `StoreError::Unexpected` is "a row of an unknown shape, a broken
// invariant".
#[test]
fn a19_an_approval_by_no_one_does_not_run_its_call() {
    let (_serial, url, store) = serial_store("atk3_nobody");
    let (sink, gate) = audited_gate_on(&store, "nobody");
    let t = any_token(gate.run(|| pay("nobody".into())));
    gate.answer(&t, approve("judy")).unwrap();
    query(&url, "UPDATE toolgate.approvals SET answered_by = NULL");
    let result = gate.run(|| pay("nobody".into()));
    let by = sink
        .records()
        .into_iter()
        .find(|r| r.stage == Stage::Enter && r.decision == Some(Decision::Approved))
        .and_then(|r| r.by);
    assert!(
        result.is_err(),
        "an approval by no one ran its call; the audit log says by = {by:?}"
    );
    assert_eq!(runs("pay", "nobody"), 0);
}

#[test]
fn a20_every_approvals_command_shows_what_an_agent_wrote_escaped() {
    let (_serial, url, store) = serial_store("atk3_hidden");
    let hidden = hidden_text(HIDDEN);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent(format!("ops{hidden}"))
        .principal(format!("alice{hidden}"))
        .approval_store_shared(store.clone())
        .build()
        .unwrap();
    let notes = [format!("approve{hidden}"), format!("reject{hidden}")];
    let ids: Vec<String> = notes
        .iter()
        .map(|note| {
            let t = any_token(gate.run(|| pay(note.clone())));
            id_of_token(&url, &t)
        })
        .collect();
    // Another writer of the table names the tool. (The arguments are JSON, in which C0 controls are
    // escapes already; the tool id is text.)
    let tool = format!("atk3_bank.pay{hidden}").replace('\'', "''");
    exec_sql(
        &url,
        &format!("UPDATE toolgate.approvals SET tool = '{tool}'"),
    )
    .unwrap();
    let listed = cli_exits(&url, &["list"], 0);
    assert_shown_escaped("list", HIDDEN, &listed);
    let shown = cli(&url, &["show", &ids[1]]);
    assert_eq!(shown.status.code(), Some(0), "{}", out(&shown));
    assert_shown_escaped("show", HIDDEN, &shown);

    // An operator's name that hides characters is refused (SECURITY.md, names that read alike), and
    // shown escaped in the refusal.
    let refused = cli(&url, &["approve", &ids[0], "--by", &format!("bob{hidden}")]);
    assert_eq!(refused.status.code(), Some(64), "{}", out(&refused));
    assert_shown_escaped("approve --by", HIDDEN, &refused);
    let approved = cli(&url, &["approve", &ids[0], "--by", "bob"]);
    assert_eq!(approved.status.code(), Some(0), "{}", out(&approved));
    assert_shown_escaped("approve", HIDDEN, &approved);
    let rejected = cli(
        &url,
        &[
            "reject",
            &ids[1],
            "--by",
            "bob",
            "--reason",
            &format!("no{hidden}"),
        ],
    );
    assert_eq!(rejected.status.code(), Some(0), "{}", out(&rejected));
    assert_shown_escaped("reject", HIDDEN, &rejected);
    // Who answered and why, as `show` tells them afterwards.
    for (id, what) in [(&ids[0], "approved by"), (&ids[1], "rejected by bob: no")] {
        let shown = cli(&url, &["show", id]);
        assert!(
            String::from_utf8_lossy(&shown.stdout).contains(what),
            "{}",
            out(&shown)
        );
        assert_shown_escaped("show after the answer", HIDDEN, &shown);
    }
}
