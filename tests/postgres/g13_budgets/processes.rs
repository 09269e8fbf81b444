//! Guarantee 13 across processes: processes sharing a PostgreSQL budget never exceed it together; the
//! window slides by the database's clock; a stopped server refuses the calls a budget covers; refused
//! calls give their units back.

use crate::support::mail::*;

// Four processes, each with its own connection, race for a budget of two calls, 1,000 times: two
// run each round, never three (the statement is atomic across processes) and never fewer (a call is
// refused only when the budget is spent). Then they burst on one budget of 50 calls.
#[test]
fn four_processes_together_never_exceed_a_budget() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let url = database("budget_race");
    let mut racers: Vec<Racer> = (0..4).map(|_| racer(&url)).collect();
    let rounds = rounds();
    for round in 0..rounds {
        let ran = race_round(
            &mut racers,
            &format!("round {round}"),
            round,
            "BUDGET_EXHAUSTED",
        );
        assert_eq!(ran, 2, "round {round}: {ran} calls ran under a budget of 2");
    }
    for racer in &mut racers {
        racer.tell("burst 40");
    }
    let ran: u64 = racers
        .iter_mut()
        .map(|racer| {
            racer
                .said()
                .split_once(' ')
                .unwrap()
                .1
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(ran, 50, "160 calls on a budget of 50");
    let kept = query(&url, "SELECT count(*) FROM toolgate.budgets");
    assert_eq!(
        kept[0][0].as_deref(),
        Some((rounds + 1).to_string().as_str())
    );
}

#[test]
fn the_window_slides_by_the_database_clock_and_async_calls_count() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "budget_window") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let window = Duration::from_millis(1500);
    let gate = Gate::builder()
        .budget_store_shared(store.clone())
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("mail.send*"), 2, window)
        .build()
        .unwrap();
    gate.run(|| send(1)).unwrap();
    wait(gate.scope(send_async(2))).unwrap();
    let denied = wait(gate.scope(send_async(3))).unwrap_err();
    assert_eq!(denied.code(), DenialCode::BudgetExhausted);
    let retry = denied.retry_after().unwrap();
    assert!(retry <= window, "{retry:?}");
    assert_eq!(
        gate.run(|| send(4)).unwrap_err().code(),
        DenialCode::BudgetExhausted
    );
    std::thread::sleep(retry);
    gate.run(|| send(5)).unwrap();
    gate.run(inbox).unwrap();
}

#[test]
fn a_stopped_server_refuses_the_calls_a_budget_covers() {
    let Some((_serial, cluster, url, store)) =
        parent_store_on_own_cluster(CHILD_ROLE, "budget_fault")
    else {
        return;
    };
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(Risk::LowWrite, 100, HOUR)
        .budget_store_shared(store.clone())
        .build()
        .unwrap();
    gate.run(|| send(1)).unwrap();
    cluster.stop();
    let sends = SENDS.load(Ordering::SeqCst);
    for _ in 0..3 {
        let denied = gate.run(|| send(2)).unwrap_err();
        assert_eq!(
            denied.code(),
            DenialCode::BudgetStoreUnavailable,
            "{denied}"
        );
        let denied = wait(gate.scope(send_async(3))).unwrap_err();
        assert_eq!(
            denied.code(),
            DenialCode::BudgetStoreUnavailable,
            "{denied}"
        );
    }
    assert_eq!(SENDS.load(Ordering::SeqCst), sends, "no body ran");
    // What no budget covers does not need the server.
    gate.run(inbox).unwrap();
    cluster.start();
    gate.run(|| send(4)).unwrap();
    let held = query(&url, "SELECT held FROM toolgate.budgets");
    assert_eq!(held, [[Some("2".to_owned())]]);
    let uses = query(&url, "SELECT count(*) FROM toolgate.budget_uses");
    assert_eq!(uses, [[Some("2".to_owned())]]);
}

// A budget counts the calls that run, in PostgreSQL too: an agent that asks three times while its
// request is pending, and a call refused after its budget check, give their units back; the approved
// call runs, and the budget is then spent.
#[test]
fn refused_calls_give_their_units_back_to_the_shared_budget() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "budget_release") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone())
        .budget(BudgetScope::tool("mail.wipe"), 1, HOUR)
        .budget_store_shared(store.clone())
        .build()
        .unwrap();
    let before = WIPES.load(Ordering::SeqCst);
    let mut token = None;
    for _ in 0..3 {
        let denied = gate.run(|| wipe("ops".into())).unwrap_err();
        assert_eq!(denied.code(), DenialCode::ApprovalPending);
        token = denied.approval_token().map(str::to_owned);
    }
    uses_are(&url, "0");
    gate.approve(&token.unwrap()).unwrap();
    gate.run(|| wipe("ops".into())).unwrap();
    assert_eq!(WIPES.load(Ordering::SeqCst), before + 1);
    uses_are(&url, "1");
    let over = gate.run(|| wipe("sales".into())).unwrap_err();
    assert_eq!(over.code(), DenialCode::BudgetExhausted);
    assert!(over.approval_token().is_none());
    let held = query(&url, "SELECT held FROM toolgate.budgets");
    assert_eq!(held, [[Some("1".to_owned())]]);
}
