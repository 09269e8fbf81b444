//! Guarantee 7 across processes: four processes racing for one approval run its call once a round; an
//! answer is bound to each field of its binding; expiry is by the database's clock; pending requests
//! are bounded per agent; the table keeps hashes of tokens only; a stopped server refuses what needs it.

use crate::support::bank::*;

#[test]
fn four_processes_race_for_one_approval_and_one_runs_each_round() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let url = database("race");
    let runs = scratch_file("race-runs");
    // Only the racers run `transfer`'s body: they find the runs file in their environment.
    let operator = gate(PostgresStore::connect(&url).unwrap(), "racer");
    let mut racers: Vec<Racer> = (0..RACERS).map(|_| racer(&url, &runs)).collect();
    let rounds = rounds();
    for round in 0..rounds {
        let asked = token(operator.run(|| transfer(round)));
        operator.approve(&asked).expect("approved");
        let ran = race_round(&mut racers, &round.to_string(), round, "APPROVAL_REUSED");
        assert_eq!(ran, 1, "round {round}: {ran} racers ran");
    }
    for racer in &mut racers {
        // Closing its stdin ends the racer's loop.
        racer.stdin.take();
        racer.child.wait().expect("the racer ends");
    }
    drop(racers);
    let text = fs::read_to_string(&runs).expect("the runs file");
    let mut per_round = vec![0u32; rounds as usize];
    let mut processes = std::collections::BTreeSet::new();
    for line in text.lines() {
        let (round, pid) = line.split_once(' ').unwrap();
        per_round[round.parse::<usize>().unwrap()] += 1;
        processes.insert(pid.to_owned());
    }
    assert!(
        per_round.iter().all(|&runs| runs == 1),
        "a round ran other than once: {:?}",
        per_round
            .iter()
            .enumerate()
            .filter(|(_, r)| **r != 1)
            .collect::<Vec<_>>()
    );
    assert!(!processes.contains(&std::process::id().to_string()));
    eprintln!(
        "{rounds} rounds, won by {} different processes",
        processes.len()
    );
    let used = query(
        &url,
        "SELECT count(*) FROM toolgate.approvals WHERE consumed_at IS NOT NULL",
    );
    assert_eq!(used[0][0].as_deref(), Some(rounds.to_string().as_str()));
    let _ = fs::remove_file(&runs);
}

#[test]
fn a_stopped_server_refuses_what_needs_it_and_loses_nothing() {
    let Some((_serial, cluster, _url, store)) = parent_store_on_own_cluster(CHILD_ROLE, "fault")
    else {
        return;
    };
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone())
        .build()
        .unwrap();
    let refunds = REFUNDS.load(Ordering::SeqCst);
    // Calls 0..20 approved; 20 asked and left pending.
    for cents in 0..20 {
        let asked = any_token(gate.run(|| refund("fault".into(), cents)));
        gate.approve(&asked).unwrap();
    }
    let pending = any_token(gate.run(|| refund("fault".into(), 20)));
    let closing = any_token(wait(gate.scope(close("fault".into()))));
    gate.approve(&closing).unwrap();

    let mut ran = [false; 20];
    let mut refused = 0;
    for cents in 0..20u64 {
        if cents == 8 {
            cluster.stop();
        }
        match gate.run(|| refund("fault".into(), cents)) {
            Ok(()) => ran[cents as usize] = true,
            Err(denied) => {
                assert_eq!(
                    denied.code(),
                    DenialCode::ApprovalStoreUnavailable,
                    "{denied}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 12, "every call after the stop is refused");
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds + 8);
    // An async tool, and an operator's answer, are refused too.
    assert_store_unavailable(wait(gate.scope(close("fault".into()))));
    assert_answer_lost(gate.approve(&pending));
    assert_eq!(CLOSES.load(Ordering::SeqCst), 0);

    cluster.start();
    // Nothing runs twice, and nothing approved is lost.
    for cents in 0..20u64 {
        let again = gate.run(|| refund("fault".into(), cents));
        if ran[cents as usize] {
            assert_eq!(code(again), DenialCode::ApprovalReused);
        } else {
            again.unwrap_or_else(|e| panic!("approved call {cents} was lost: {e}"));
        }
    }
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds + 20);
    wait(gate.scope(close("fault".into()))).unwrap();
    assert_eq!(CLOSES.load(Ordering::SeqCst), 1);
    // The pending request is still there, and its token still answers it.
    let listed = wait(store.list()).unwrap();
    assert!(
        listed
            .iter()
            .any(|r| r.state == RequestState::Pending && r.binding.tool == "bank.refund"),
        "{listed:?}"
    );
    gate.approve(&pending).unwrap();
    gate.run(|| refund("fault".into(), 20)).unwrap();
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds + 21);
}

#[test]
fn an_answer_is_bound_to_each_field_of_the_binding() {
    let Some((_serial, url, (gate, refunds, call))) = approved_refund("binding", "bound") else {
        return;
    };
    for (column, changed) in [
        ("arguments_digest", "arguments_digest || 'x'"),
        ("shown_digest", "shown_digest || 'x'"),
        ("risk", "'LOW_WRITE'"),
        ("policy_version", "policy_version + 1"),
        ("tool", "'bank.other'"),
        ("principal", "'mallory'"),
        ("agent", "'another-agent'"),
    ] {
        query(
            &url,
            &format!(
                "UPDATE toolgate.approvals SET {column} = {changed} WHERE answered_at IS NOT NULL;"
            ),
        );
        // Not this call's answer: the call files a request of its own.
        assert_eq!(
            code(gate.run(call)),
            DenialCode::ApprovalPending,
            "with another {column}"
        );
        assert_eq!(
            REFUNDS.load(Ordering::SeqCst),
            refunds,
            "with another {column}"
        );
        query(
            &url,
            &format!(
                "UPDATE toolgate.approvals SET {column} = original.{column}
                 FROM toolgate.approvals AS original
                 WHERE original.id <> toolgate.approvals.id AND original.answered_at IS NULL
                   AND toolgate.approvals.answered_at IS NOT NULL;"
            ),
        );
    }
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds);
    gate.run(call).expect("the call it is bound to");
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds + 1);
}

#[test]
fn expiry_is_by_the_database_clock() {
    let Some((_serial, url, (gate, refunds, call))) = approved_refund("expiry", "expiry") else {
        return;
    };
    // The process's clock says ten minutes are left; the database says the request is over.
    query(
        &url,
        "UPDATE toolgate.approvals SET expires_at = now() - interval '1 millisecond'",
    );
    assert_eq!(code(gate.run(call)), DenialCode::ApprovalExpired);
    // And back: the database says it lives, whatever the time the request was made.
    query(
        &url,
        "UPDATE toolgate.approvals SET expires_at = now() + interval '1 minute'
         WHERE answered_at IS NOT NULL",
    );
    gate.run(call).unwrap();
    assert_eq!(REFUNDS.load(Ordering::SeqCst), refunds + 1);
    // A pending request past its expiry answers nothing.
    let pending = token(gate.run(|| refund("expiry".into(), 2)));
    query(
        &url,
        "UPDATE toolgate.approvals SET expires_at = now() WHERE answered_at IS NULL",
    );
    assert_eq!(gate.approve(&pending), Err(ApproveError::Expired));
}

#[test]
fn pending_requests_are_bounded_per_agent_and_asked_once_per_call() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "bound") else {
        return;
    };
    let connect = || {
        PostgresStore::builder()
            .max_pending_per_agent(3)
            .connect(&url)
            .unwrap()
    };
    let agent = gate(connect(), "busy");
    let first = token(agent.run(|| refund("bound".into(), 0)));
    // Asking again for the same call gives another token for the same request: both answer it.
    let second = token(agent.run(|| refund("bound".into(), 0)));
    assert_ne!(first, second);
    for cents in 1..3 {
        token(agent.run(|| refund("bound".into(), cents)));
    }
    let full = agent.run(|| refund("bound".into(), 3)).unwrap_err();
    assert_eq!(full.code(), DenialCode::ApprovalRequired);
    assert_eq!(
        full.approval_token(),
        None,
        "past the bound, no request is kept"
    );
    // A retry of a pending call still gets a token, and another agent still asks.
    token(agent.run(|| refund("bound".into(), 1)));
    let other = gate(connect(), "other");
    token(other.run(|| refund("bound".into(), 3)));
    let rows = query(
        &url,
        "SELECT agent, count(*) FROM toolgate.approvals GROUP BY agent ORDER BY agent",
    );
    assert_eq!(
        rows,
        [
            vec![Some("busy".into()), Some("3".into())],
            vec![Some("other".into()), Some("1".into())]
        ]
    );
    // Both tokens of the first request answer it: the first does, the second finds it answered.
    agent.approve(&first).unwrap();
    assert_eq!(agent.approve(&second), Err(ApproveError::AlreadyApproved));
    assert_eq!(
        agent.approve("not a token"),
        Err(ApproveError::UnknownToken)
    );
}

#[test]
fn the_table_keeps_token_hashes_only() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "hashes") else {
        return;
    };
    let gate = gate(PostgresStore::connect(&url).unwrap(), "hashes");
    let tokens: Vec<String> = (0..3)
        .map(|cents| token(gate.run(|| refund("hash".into(), cents % 2))))
        .collect();
    let table = query(&url, "SELECT t::text FROM toolgate.approvals AS t");
    let text: String = table.into_iter().flatten().flatten().collect();
    for token in &tokens {
        assert!(!text.contains(token.as_str()), "a token is stored");
        let digest = sha256_hex(token);
        assert!(text.contains(&digest), "its hash is not stored");
    }
    // The pending request shows up for operators with the state it is in.
    let store = PostgresStore::connect(&url).unwrap();
    let listed = wait(store.list()).unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|r| r.state == RequestState::Pending));
    let answered = wait(store.answer_id(listed[0].id, approve("ops"))).unwrap();
    assert_eq!(answered.state, RequestState::Answered(approve("ops")));
    assert_eq!(
        wait(store.answer_id(listed[0].id, approve("ops"))),
        Err(ApproveError::AlreadyApproved)
    );
    // Every migration applied once, however many stores connected.
    let versions = query(
        &url,
        "SELECT version FROM toolgate.schema_version ORDER BY version",
    );
    assert_eq!(
        versions,
        (1..=15)
            .map(|v| vec![Some(v.to_string())])
            .collect::<Vec<_>>()
    );
}

/// The database `name` (none in a child process), a gate of agent `name` over a store there, the
/// count of refunds before its call `refund(note, 1)` runs, and that call, which an operator approved.
#[allow(clippy::type_complexity)]
fn approved_refund(
    name: &str,
    note: &'static str,
) -> Option<(
    std::sync::MutexGuard<'static, ()>,
    String,
    (Gate, usize, impl Fn() -> Result<(), Denied> + Copy),
)> {
    let (serial, url) = parent_database(CHILD_ROLE, name)?;
    let gate = gate(PostgresStore::connect(&url).unwrap(), name);
    let refunds = REFUNDS.load(Ordering::SeqCst);
    let call = move || refund(note.into(), 1);
    let asked = token(gate.run(call));
    gate.approve(&asked).unwrap();
    Some((serial, url, (gate, refunds, call)))
}
