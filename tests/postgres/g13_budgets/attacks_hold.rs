//! Attacks on the commit point's second look at a shared budget (`BudgetStore::hold` of
//! `PostgresStore`) where it meets an operator's reset, an audit sink that waits, a server that
//! stops while an approver thinks, two calls waiting across two resets, a reset of one of a call's two
//! budgets, a process killed while it waits, and resets naming another principal's budget.
//!
//! SECURITY.md 13: "An operator's reset of a shared budget (`toolgate budgets reset`) starts its
//! window afresh: the bound holds between resets (a call approved after a reset takes its unit again
//! at its commit point, or is refused)"; "A budget store that fails or does not answer in time
//! refuses (`BUDGET_STORE_UNAVAILABLE`)". docs/budgets.md: "between two resets, no window holds more
//! than N"; "A process that dies while a call is decided leaves its unit counted for the window".

use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

use toolgate::audit::{AuditError, AuditRecord, AuditSink, Stage};
use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::postgres::budgets::{self, BudgetFilter};
use toolgate::{Approval, ApprovalRequest};

use crate::support::mail::*;

const ROLE: &str = "TOOLGATE_A7H_CHILD";

static BODIES: AtomicUsize = AtomicUsize::new(0);

/// A write that needs the approver at FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "a7hp")]
fn purge(n: u64) -> Result<u64, Denied> {
    BODIES.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// A write that runs at FULL_AUTO without an approval.
#[tool(risk = "LOW_WRITE", domain = "a7hp")]
fn jot(n: u64) -> Result<u64, Denied> {
    BODIES.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

fn held_and_uses(url: &str) -> (String, String) {
    let held = query(url, "SELECT coalesce(sum(held), 0) FROM toolgate.budgets")[0][0]
        .clone()
        .unwrap();
    let uses = query(url, "SELECT count(*) FROM toolgate.budget_uses")[0][0]
        .clone()
        .unwrap();
    (held, uses)
}

fn reset_agent(url: &str, agent: &str) {
    let done = budgets::reset(
        url,
        "toolgate",
        &BudgetFilter::default().agent(agent),
        "ana",
        "a replayed job",
    )
    .expect("the reset");
    assert_eq!(done.budgets.len(), 1, "{done:?}");
}

/// A FULL_AUTO gate of `agent` with a budget of `limit` of its calls an hour in `store`, whose
/// approver runs `meanwhile` then approves.
fn desk(
    store: &Arc<PostgresStore>,
    agent: &str,
    limit: u32,
    meanwhile: impl Fn() + Send + Sync + 'static,
) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .agent(agent)
        .budget(BudgetScope::Agent, limit, HOUR)
        .budget_store_shared(store.clone())
        .approver(move |_: &ApprovalRequest<'_>| {
            meanwhile();
            Approval::Approve
        })
        .build()
        .unwrap()
}

/// A sink that, on the first `enter` record it is given, runs `meanwhile` before it takes it.
struct Slow {
    armed: AtomicBool,
    meanwhile: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl AuditSink for Slow {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if record.stage == Stage::Enter
            && self.armed.swap(false, Ordering::SeqCst)
            && let Some(meanwhile) = self.meanwhile.lock().unwrap().take()
        {
            meanwhile();
        }
        Ok(())
    }
}

// SECURITY.md 13: "the bound holds between resets". Attack: call A (no approval needed) took the
// budget's one unit and waits on its audit sink (its `enter` record, before the commit point) while
// an operator resets the budget and another gate of the agent runs B on the freed unit. If A then
// runs, two calls ran after the reset of a budget of one an hour.
#[test]
fn pg_h01_a_call_waiting_on_its_sink_across_a_reset_is_counted_again() {
    let Some((_serial, url)) = parent_database(ROLE, "a7h_sink_reset") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let other = Arc::new(desk(&store, "sinker", 1, || {}));
    let inside = other.clone();
    let reset_url = url.clone();
    let mark = Arc::new(AtomicUsize::new(usize::MAX));
    let marked = mark.clone();
    let b = Arc::new(Mutex::new(None));
    let said = b.clone();
    let sink = Arc::new(Slow {
        armed: AtomicBool::new(true),
        meanwhile: Mutex::new(Some(Box::new(move || {
            reset_agent(&reset_url, "sinker");
            marked.store(BODIES.load(Ordering::SeqCst), Ordering::SeqCst);
            let other = inside.clone();
            let ran = std::thread::spawn(move || other.run(|| jot(2)))
                .join()
                .unwrap();
            *said.lock().unwrap() = Some(ran.map_err(|d| d.code()));
        }))),
    });
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("sinker")
        .budget(BudgetScope::Agent, 1, HOUR)
        .budget_store_shared(store.clone())
        .audit_shared(sink)
        .build()
        .unwrap();
    let a = gate.run(|| jot(1)).map_err(|d| d.code());
    let b = (*b.lock().unwrap()).expect("the sink was asked");
    let ran = BODIES.load(Ordering::SeqCst) - mark.load(Ordering::SeqCst);
    let (held, uses) = held_and_uses(&url);
    assert_eq!(held, uses, "A {a:?}, B {b:?}");
    assert!(
        ran <= 1,
        "{ran} calls ran after the reset of a budget of one an hour (A {a:?}, B {b:?}); the \
         budget holds {held}"
    );
}

// SECURITY.md 13: "A budget store that fails or does not answer in time refuses
// (`BUDGET_STORE_UNAVAILABLE`)". Attack: the server stops while call A's approver thinks; the
// approval arrives; A's commit point cannot ask the store whether A still holds its unit. A must
// be refused, not run on the unit it took before.
#[test]
fn pg_h02_a_server_stopped_while_the_approver_thinks_refuses_the_approved_call() {
    let Some((_serial, cluster, _url, store)) =
        parent_store_on_own_cluster(ROLE, "a7h_server_gone")
    else {
        return;
    };
    let cluster = Arc::new(cluster);
    let stopping = cluster.clone();
    let gate = desk(&store, "stopped", 5, move || stopping.stop());
    let before = BODIES.load(Ordering::SeqCst);
    let denied = gate.run(|| purge(1)).unwrap_err();
    assert_eq!(
        denied.code(),
        DenialCode::BudgetStoreUnavailable,
        "{denied}"
    );
    assert_eq!(BODIES.load(Ordering::SeqCst), before);
    cluster.start();
}

// Two calls wait on one unit across two resets. A takes the budget's unit and waits; the operator
// resets (1); B takes the unit and waits; the operator resets (2); C (no approval) takes the unit and
// runs; then B and A are approved. After reset (2), the budget of one an hour allows one call: C.
#[test]
fn pg_h03_two_calls_waiting_across_two_resets_let_one_run_after_the_last() {
    let Some((_serial, url)) = parent_database(ROLE, "a7h_two_resets") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let mark = Arc::new(AtomicUsize::new(usize::MAX));
    let c_gate = Arc::new(desk(&store, "twice", 1, || {}));
    let b_gate = {
        let (url, log, mark, c_gate) = (url.clone(), log.clone(), mark.clone(), c_gate.clone());
        Arc::new(desk(&store, "twice", 1, move || {
            reset_agent(&url, "twice");
            mark.store(BODIES.load(Ordering::SeqCst), Ordering::SeqCst);
            let c_gate = c_gate.clone();
            let c = std::thread::spawn(move || c_gate.run(|| jot(3)))
                .join()
                .unwrap();
            log.lock()
                .unwrap()
                .push(format!("C: {:?}", c.map_err(|d| d.code())));
        }))
    };
    let a_gate = {
        let (url, log, b_gate) = (url.clone(), log.clone(), b_gate.clone());
        desk(&store, "twice", 1, move || {
            reset_agent(&url, "twice");
            let b_gate = b_gate.clone();
            let b = std::thread::spawn(move || b_gate.run(|| purge(2)))
                .join()
                .unwrap();
            log.lock()
                .unwrap()
                .push(format!("B: {:?}", b.map_err(|d| d.code())));
        })
    };
    let a = a_gate.run(|| purge(1));
    log.lock()
        .unwrap()
        .push(format!("A: {:?}", a.map_err(|d| d.code())));
    let mark = mark.load(Ordering::SeqCst);
    assert_ne!(mark, usize::MAX, "{:?}", log.lock().unwrap());
    let ran = BODIES.load(Ordering::SeqCst) - mark;
    let log = log.lock().unwrap().clone();
    assert_eq!(held_and_uses(&url), ("1".into(), "1".into()), "{log:?}");
    assert_eq!(ran, 1, "{log:?}");
    assert_eq!(
        c_gate.run(|| jot(4)).map_err(|d| d.code()),
        Err(DenialCode::BudgetExhausted)
    );
}

// SECURITY.md 13: "a call takes a unit of each budget that covers it or of none". Attack: a purge is
// covered by its tool's budget (one an hour) and the agent's (two an hour); while its approver
// thinks, the operator resets the tool's budget only. At the commit point the purge takes the tool's
// unit again and keeps the agent's: it must not be charged a second unit of the agent's budget, so
// one more call of the agent runs, and the next is refused.
#[test]
fn pg_h04_a_reset_of_one_of_two_budgets_charges_the_other_once() {
    let Some((_serial, url)) = parent_database(ROLE, "a7h_one_of_two") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let reset_url = url.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("pair")
        .budget(BudgetScope::Agent, 2, HOUR)
        .budget(BudgetScope::tool("a7hp.purge"), 1, HOUR)
        .budget_store_shared(store.clone())
        .approver(move |_: &ApprovalRequest<'_>| {
            let listed = budgets::list(
                &reset_url,
                "toolgate",
                &BudgetFilter::default().agent("pair"),
            )
            .unwrap();
            let tool = listed
                .iter()
                .find(|b| b.key.contains("a7hp.purge"))
                .expect("the tool's budget is listed");
            let done = budgets::reset(
                &reset_url,
                "toolgate",
                &BudgetFilter::default().key(tool.key.clone()),
                "ana",
                "the tool's budget only",
            )
            .unwrap();
            assert_eq!(done.budgets.len(), 1, "{done:?}");
            Approval::Approve
        })
        .build()
        .unwrap();
    assert_eq!(gate.run(|| purge(1)).map_err(|d| d.code()), Ok(1));
    let (held, uses) = held_and_uses(&url);
    assert_eq!(held, uses);
    assert_eq!(held, "2", "one unit of each budget");
    assert_eq!(gate.run(|| jot(2)).map_err(|d| d.code()), Ok(2));
    assert_eq!(
        gate.run(|| jot(3)).map_err(|d| d.code()),
        Err(DenialCode::BudgetExhausted)
    );
}

/// The child's role: a gate of agent `killed` whose approver says `@asking` and waits for ever.
#[test]
fn waiter_child() {
    if std::env::var(ROLE).as_deref() != Ok("waiter") {
        return;
    }
    let url = std::env::var(CHILD_URL).expect("the database's URL");
    let store = Arc::new(PostgresStore::connect(&url).expect("the store"));
    let gate = desk(&store, "killed", 1, || {
        let mut out = std::io::stdout().lock();
        writeln!(out, "@asking").unwrap();
        out.flush().unwrap();
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        panic!("the waiter was told to go on");
    });
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "@ready").unwrap();
        out.flush().unwrap();
    }
    let _ = gate.run(|| purge(1));
}

// docs/budgets.md: "A process that dies while a call is decided leaves its unit counted for the
// window: no one is left to give it back." A process is killed (SIGKILL) while its call waits for its
// approver: its unit still counts (another process's call is refused), `list` shows it, and a reset
// gives it back.
#[test]
fn pg_h05_a_process_killed_while_its_call_waits_leaves_its_unit_counted_until_a_reset() {
    let Some((_serial, url)) = parent_database(ROLE, "a7h_killed") else {
        return;
    };
    let mut child = crate::support::Racer::spawn(
        crate::support::child(module_path!(), "waiter_child")
            .env(ROLE, "waiter")
            .env(CHILD_URL, &url),
    );
    assert_eq!(child.said(), "asking");
    child.child.kill().unwrap();
    child.child.wait().unwrap();
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let gate = desk(&store, "killed", 1, || {});
    assert_eq!(
        gate.run(|| jot(1)).map_err(|d| d.code()),
        Err(DenialCode::BudgetExhausted),
        "the killed process's unit was given back or lost"
    );
    let listed = budgets::list(&url, "toolgate", &BudgetFilter::default().agent("killed")).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].calls, 1);
    reset_agent(&url, "killed");
    assert_eq!(gate.run(|| jot(2)).map_err(|d| d.code()), Ok(2));
    assert_eq!(held_and_uses(&url), ("1".into(), "1".into()));
}

// docs/budgets.md: `--principal` selects the budgets of the operator's policy table
// `[principals."NAME"]`. Attack: alice and bob, through gates of one agent label, each spend their
// own budget of one call an hour; a reset of bob's must leave alice's spent.
#[test]
fn pg_h06_a_reset_of_one_principals_budget_never_clears_anothers() {
    let Some((_serial, url)) = parent_database(ROLE, "a7h_principals") else {
        return;
    };
    let text = "format = 1\n\
        [[principals.alice.budgets]]\nagent = true\ncalls = 1\nper = \"1h\"\n\
        [[principals.bob.budgets]]\nagent = true\ncalls = 1\nper = \"1h\"\n";
    let live = LivePolicy::new(PolicyFile::parse("p.toml", text).unwrap());
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let gate = |principal: &str| {
        Gate::builder()
            .mode(Mode::FullAuto)
            .agent("shared-desk")
            .principal(principal)
            .policy(live.clone())
            .budget_store_shared(store.clone())
            .build()
            .unwrap()
    };
    let (alice, bob) = (gate("alice"), gate("bob"));
    alice.run(|| jot(1)).unwrap();
    bob.run(|| jot(2)).unwrap();
    assert_eq!(
        alice.run(|| jot(3)).map_err(|d| d.code()),
        Err(DenialCode::BudgetExhausted)
    );
    let done = budgets::reset(
        &url,
        "toolgate",
        &BudgetFilter::default().principal("bob"),
        "ana",
        "bob's replay",
    )
    .unwrap();
    assert_eq!(done.budgets.len(), 1, "{done:?}");
    assert_eq!(
        alice.run(|| jot(4)).map_err(|d| d.code()),
        Err(DenialCode::BudgetExhausted),
        "alice's budget was cleared by a reset of bob's"
    );
    assert_eq!(bob.run(|| jot(5)).map_err(|d| d.code()), Ok(5));
}

// The same in PostgreSQL, by the database's clock: the approver waits until `list` says the budget's
// window holds no call (the unit left it; its row waits for the next check to delete it), and no
// other check runs meanwhile. At the commit point the call must take a unit again, counted from
// then: a call C right after it is refused.
#[test]
fn pg_h07_a_unit_that_left_its_window_unpruned_is_taken_again_at_the_commit_point() {
    let Some((_serial, url)) = parent_database(ROLE, "a7h_unpruned") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let window = Duration::from_secs(2);
    let list_url = url.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("quiet")
        .budget(BudgetScope::Agent, 1, window)
        .budget_store_shared(store.clone())
        .approver(move |_: &ApprovalRequest<'_>| {
            loop {
                let listed =
                    budgets::list(&list_url, "toolgate", &BudgetFilter::default()).unwrap();
                if listed.iter().all(|b| b.calls == 0) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Approval::Approve
        })
        .build()
        .unwrap();
    let a = gate.run(|| purge(1)).map_err(|d| d.code());
    let c = gate.run(|| jot(2)).map_err(|d| d.code());
    assert!(
        a.is_err() || c.is_err(),
        "A ran after its window on the unit it took before, and C right after it: A {a:?}, C {c:?}"
    );
}

// SECURITY.md 13: "A budget store that fails or does not answer in time refuses". Attack: while the
// approver thinks, another session locks the budgets' tables; the approved call's commit point asks
// the store (timeout 1 s), which cannot answer in time. The call must be refused, its body not run.
#[test]
fn pg_h08_a_hold_that_times_out_on_a_lock_refuses_the_approved_call() {
    let Some((_serial, url)) = parent_database(ROLE, "a7h_hold_timeout") else {
        return;
    };
    let store = Arc::new(
        PostgresStore::builder()
            .timeout(Duration::from_secs(1))
            .connect(&url)
            .unwrap(),
    );
    let held = Arc::new(Mutex::new(None));
    let holding = held.clone();
    let lock_url = url.clone();
    let gate = desk(&store, "locked", 5, move || {
        *holding.lock().unwrap() = Some(crate::support::trail::Held::new(
            &lock_url,
            "LOCK TABLE toolgate.budgets, toolgate.budget_uses IN EXCLUSIVE MODE",
        ));
    });
    let before = BODIES.load(Ordering::SeqCst);
    let denied = gate.run(|| purge(1)).unwrap_err();
    drop(held.lock().unwrap().take());
    assert_eq!(
        denied.code(),
        DenialCode::BudgetStoreUnavailable,
        "{denied}"
    );
    assert_eq!(BODIES.load(Ordering::SeqCst), before);
}

// The key's fields are "apart by U+001F" (`toolgate::postgres::budgets`, "A budget's key"). Attack:
// bob's gate, its agent label spelling the head of alice's policy budget's key, spends a budget of
// its code; `list --principal alice` must not show bob's call as alice's, nor a reset of alice's
// budgets clear bob's.
#[test]
fn pg_h09_a_label_spelling_a_policy_key_is_not_listed_as_a_principals_budget() {
    let Some((_serial, url)) = parent_database(ROLE, "a7h_label_key") else {
        return;
    };
    let text = "format = 1\n[[principals.alice.budgets]]\nagent = true\ncalls = 1\nper = \"1h\"\n";
    let live = LivePolicy::new(PolicyFile::parse("p.toml", text).unwrap());
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let Ok(bob) = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("policy [principals.\"alice\"]\u{1f}shared-desk")
        .principal("bob")
        .policy(live.clone())
        .budget(BudgetScope::Agent, 1, HOUR)
        .budget_store_shared(store.clone())
        .build()
    else {
        return; // a label with a control character is refused: nothing to collide
    };
    bob.run(|| jot(1)).expect("bob's own budget's one call");
    let alices = budgets::list(
        &url,
        "toolgate",
        &BudgetFilter::default().principal("alice"),
    )
    .unwrap();
    let calls: u64 = alices.iter().map(|b| b.calls).sum();
    assert_eq!(calls, 0, "bob's call listed as alice's: {alices:?}");
}

// docs/budgets.md: `--key` selects "one budget, its key as `list` shows it, escaped"; "Everything an
// agent or a program wrote (agent labels, scopes, keys ...) is shown escaped". Attack: two agents,
// one labelled with a real right-to-left override, one with the text of its escape (a backslash,
// `u{202e}`): `list` must show them apart, and a reset of the key one of them shows must clear that
// budget alone.
#[test]
fn pg_h10_a_label_spelling_an_escape_is_shown_and_reset_apart_from_the_real_character() {
    let Some((_serial, url)) = parent_database(ROLE, "a7h_escapes") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let gate = |agent: &str| {
        Gate::builder()
            .mode(Mode::FullAuto)
            .agent(agent)
            .budget(BudgetScope::Agent, 1, HOUR)
            .budget_store_shared(store.clone())
            .build()
            .unwrap()
    };
    // A gate refuses the real character in its agent label (the rule of names); another program
    // may still write the key it would make, with the store's grants.
    let real = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("evil\u{202e}")
        .budget(BudgetScope::Agent, 1, HOUR)
        .budget_store_shared(store.clone())
        .build();
    assert!(
        matches!(&real, Err(toolgate::GateError::Budgets(errors))
            if matches!(errors[0], toolgate::gate::budget::BudgetError::AgentLabel(..))),
        "{real:?}"
    );
    let real_key = "evil\u{202e}\u{1f}agent\u{1f}1\u{1f}3600000000000";
    crate::common::postgres::execute(
        &url,
        &format!(
            "INSERT INTO toolgate.budgets (key, held) VALUES ('{real_key}', 1);
             INSERT INTO toolgate.budget_uses (key, used_at) VALUES ('{real_key}', now())"
        ),
    );
    let spelled = gate("evil\\u{202e}");
    spelled.run(|| jot(2)).unwrap();
    let shown = crate::support::text(&crate::support::toolgate(&[
        "budgets", "list", "--store", &url,
    ]));
    let lines: Vec<&str> = shown.lines().filter(|l| l.contains("evil")).collect();
    assert_eq!(lines.len(), 2, "{shown}");
    assert_ne!(lines[0], lines[1], "two budgets shown alike:\n{shown}");
    let key = "evil\\u{202e}\\u{001f}agent\\u{001f}1\\u{001f}3600000000000";
    assert!(shown.contains(key), "{shown}");
    let reset = crate::support::toolgate(&[
        "budgets", "reset", "--store", &url, "--key", key, "--reason", "r", "--by", "ana",
    ]);
    assert_eq!(
        reset.status.code(),
        Some(0),
        "{}",
        crate::support::out(&reset)
    );
    let held = crate::common::postgres::query(
        &url,
        &format!("SELECT held FROM toolgate.budgets WHERE key = '{real_key}'"),
    );
    assert_eq!(
        held,
        [[Some("0".to_owned())]],
        "the real character's key was not cleared"
    );
    assert_eq!(
        spelled.run(|| jot(4)).map_err(|d| d.code()),
        Err(DenialCode::BudgetExhausted),
        "a reset of the real character's key cleared the spelled one's"
    );
}

// SECURITY.md 13: "the bound holds between resets". Attack with real stores only, no approver: the
// outer gate takes its unit (one an hour) in database 1; the inner gate's check, in database 2, waits
// on a lock another session holds there; meanwhile an operator resets the outer budget and another
// gate runs B on it; the lock goes. If A then runs, two calls ran after the reset of a budget of one.
#[test]
fn pg_h11_a_nested_call_waiting_on_the_inner_store_across_a_reset_is_counted_again() {
    let Some((_serial, url)) = parent_database(ROLE, "a7h_nested_reset") else {
        return;
    };
    let url2 = database("a7h_nested_reset_inner");
    let outer_store = Arc::new(PostgresStore::connect(&url).unwrap());
    let inner_store = Arc::new(
        PostgresStore::builder()
            .timeout(Duration::from_secs(30))
            .connect(&url2)
            .unwrap(),
    );
    let outer = desk(&outer_store, "nested", 1, || {});
    let other = desk(&outer_store, "nested", 1, || {});
    let inner = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("inner")
        .budget(BudgetScope::tool("a7hp.jot"), 100, HOUR)
        .budget_store_shared(inner_store)
        .build()
        .unwrap();
    // The inner budget's row exists before the lock.
    inner.run(|| jot(0)).unwrap();
    let lock = crate::support::trail::Held::new(
        &url2,
        "LOCK TABLE toolgate.budgets, toolgate.budget_uses IN EXCLUSIVE MODE",
    );
    let a = std::thread::spawn(move || outer.run(|| inner.run(|| jot(1))).map_err(|d| d.code()));
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                   AND query LIKE '%budget_take%'";
    while query(&url2, waiting)[0][0].as_deref() == Some("0") {
        std::thread::sleep(Duration::from_millis(20));
    }
    let outer_took = query(&url, "SELECT count(*) FROM toolgate.budget_uses")[0][0].clone();
    let done = budgets::reset(
        &url,
        "toolgate",
        &BudgetFilter::default().agent("nested"),
        "ana",
        "a replayed job",
    );
    let mark = BODIES.load(Ordering::SeqCst);
    let b = other.run(|| jot(2)).map_err(|d| d.code());
    drop(lock);
    let a = a.join().unwrap();
    let ran = BODIES.load(Ordering::SeqCst) - mark;
    assert!(
        ran <= 1,
        "{ran} calls ran after the reset of a budget of one an hour (A {a:?}, B {b:?}; the outer \
         unit was taken before the reset: {outer_took:?}, reset {done:?})"
    );
}

// docs/budgets.md: "the operators' role has `EXECUTE` on it and may only read `budget_uses` and
// `budget_resets`, so through its grants a budget is cleared only with its record". Attack: the
// operators' role reads a call's reservation in `budget_uses` and calls the gates' own give-back,
// `toolgate.budget_release` (and `budget_take` with a window of 1 µs, which prunes what left it), on
// that budget. The budget must stay spent, and no unit leave without a record.
#[test]
fn pg_h12_the_operators_role_cannot_give_a_unit_back_without_a_record() {
    let Some((_serial, url)) = parent_database(ROLE, "a7h_operator_release") else {
        return;
    };
    let roles = crate::common::postgres::documented_roles(&url);
    let store = Arc::new(PostgresStore::connect(&roles.agent).unwrap());
    let gate = desk(&store, "spent", 1, || {});
    gate.run(|| jot(1)).unwrap();
    let row = query(
        &roles.operator,
        "SELECT key, encode(reservation, 'hex') FROM toolgate.budget_uses",
    );
    let (key, reservation) = (row[0][0].clone().unwrap(), row[0][1].clone().unwrap());
    let key = key.replace('\'', "''");
    let attempts = [
        format!("SELECT toolgate.budget_release(ARRAY['{key}'], decode('{reservation}', 'hex'))"),
        format!(
            "SELECT toolgate.budget_take(ARRAY['{key}'], ARRAY[5], ARRAY[1::bigint], \
             decode('00', 'hex'))"
        ),
    ];
    let mut accepted = Vec::new();
    for sql in &attempts {
        if std::panic::catch_unwind(|| query(&roles.operator, sql)).is_ok() {
            accepted.push(sql.clone());
        }
    }
    assert_eq!(
        gate.run(|| jot(2)).map_err(|d| d.code()),
        Err(DenialCode::BudgetExhausted),
        "the operators' role gave the unit back without a reset ({accepted:?})"
    );
}
