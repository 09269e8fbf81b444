//! Attacks on guarantee 13 across processes sharing one PostgreSQL store: a call refused after its
//! budget check (approval pending or rejected, audit sink failing, another principal's approval) must
//! have its unit back before its refusal is returned, so that another process asking right after is
//! not refused `BUDGET_EXHAUSTED`; and a budget is never exceeded. Faults: a server held or stopped
//! while a refused call's release is in flight, a process killed right after its refusal.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use serde_json::json;
use toolgate::Approval;
use toolgate::approval::store::ApprovalStore;
use toolgate::audit::{AuditError, AuditRecord, AuditSink};

use crate::support::mail::*;
use crate::support::mcp_server::proxied;

const ROLE: &str = "TOOLGATE_A13_CHILD";
const URL: &str = "TOOLGATE_A13_URL";

static POSTS: AtomicUsize = AtomicUsize::new(0);
static PURGES: AtomicUsize = AtomicUsize::new(0);

/// Post a note: runs in FULL_AUTO without an approval.
#[tool(risk = "LOW_WRITE", domain = "a13")]
fn post(n: u64) -> Result<u64, Denied> {
    POSTS.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// Purge a folder: each call needs an approval in FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "a13")]
fn purge(n: u64) -> Result<u64, Denied> {
    PURGES.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// A sink that can take nothing.
struct Broken;

impl AuditSink for Broken {
    fn record(&self, _: &AuditRecord) -> Result<(), AuditError> {
        Err(AuditError::new("the disk is full"))
    }
}

/// A gate of agent `agent`, with a budget of `n` calls of the agent an hour, in `store` (budgets and
/// two-step approvals), as `principal`.
fn gate_of(store: &Arc<PostgresStore>, agent: &str, n: u32, principal: &str) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .agent(agent)
        .principal(principal)
        .budget(BudgetScope::Agent, n, HOUR)
        .budget_store_shared(store.clone())
        .approval_store_shared(store.clone())
        .build()
        .unwrap()
}

fn said<T>(result: Result<T, Denied>) -> String {
    match result {
        Ok(_) => "ran".to_owned(),
        Err(denied) => match denied.approval_token() {
            Some(token) => format!("{} {token}", denied.code().as_str()),
            None => denied.code().as_str().to_owned(),
        },
    }
}

/// The child: reads `COMMAND AGENT N` lines and answers `@AGENT OUTCOME`.
/// - `purge AGENT N`: one purge (needs an approval) under the agent's budget of N;
/// - `post AGENT N`: one post under it;
/// - `deaf AGENT N`: one post through a gate whose audit sink fails;
/// - `bob AGENT N`: one purge as principal `bob`;
/// - `hang AGENT N`: one purge whose approver never answers (says `deciding` first);
/// - `mix AGENT K`: K rounds of a purge then a post, under a budget of 5: how many posts ran.
#[test]
fn a13_child() {
    if std::env::var(ROLE).as_deref() != Ok("a13") {
        return;
    }
    let url = std::env::var(URL).unwrap();
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mut out = std::io::stdout().lock();
    writeln!(out, "@ready").unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let mut words = line.split_whitespace();
        let (command, agent, n) = (
            words.next().unwrap().to_owned(),
            words.next().unwrap().to_owned(),
            words.next().unwrap().parse::<u32>().unwrap(),
        );
        let answer = match command.as_str() {
            "purge" => said(gate_of(&store, &agent, n, "alice").run(|| purge(1))),
            "post" => said(gate_of(&store, &agent, n, "alice").run(|| post(1))),
            "bob" => said(gate_of(&store, &agent, n, "bob").run(|| purge(1))),
            "deaf" => {
                let gate = Gate::builder()
                    .mode(Mode::FullAuto)
                    .agent(agent.as_str())
                    .principal("alice")
                    .budget(BudgetScope::Agent, n, HOUR)
                    .budget_store_shared(store.clone())
                    .audit(Broken)
                    .build()
                    .unwrap();
                said(gate.run(|| post(1)))
            }
            "hang" => {
                // Takes the unit, says so from inside its approver, and never answers.
                let label = agent.clone();
                let gate = Gate::builder()
                    .mode(Mode::FullAuto)
                    .agent(agent.as_str())
                    .principal("alice")
                    .budget(BudgetScope::Agent, n, HOUR)
                    .budget_store_shared(store.clone())
                    .approver(move |_: &toolgate::ApprovalRequest<'_>| {
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "@{label} deciding").unwrap();
                        out.flush().unwrap();
                        loop {
                            std::thread::sleep(Duration::from_secs(60));
                        }
                    })
                    .build()
                    .unwrap();
                said(gate.run(|| purge(1)))
            }
            "mix" => {
                let gate = gate_of(&store, &agent, 5, "alice");
                let mut ran = 0;
                for i in 0..n {
                    let refused = gate.run(|| purge(u64::from(i))).unwrap_err();
                    assert!(
                        matches!(
                            refused.code(),
                            DenialCode::ApprovalPending | DenialCode::BudgetExhausted
                        ),
                        "{refused}"
                    );
                    match gate.run(|| post(u64::from(i))) {
                        Ok(_) => ran += 1,
                        Err(denied) => {
                            assert_eq!(denied.code(), DenialCode::BudgetExhausted, "{denied}")
                        }
                    }
                }
                ran.to_string()
            }
            other => panic!("unknown command {other}"),
        };
        writeln!(out, "@{agent} {answer}").unwrap();
        out.flush().unwrap();
    }
}

fn child(url: &str) -> Racer {
    Racer::spawn(
        crate::support::child(module_path!(), "a13_child")
            .env(ROLE, "a13")
            .env(URL, url),
    )
}

/// What the child answered for `agent`.
fn ask(racer: &mut Racer, command: &str, agent: &str, n: u32) -> String {
    racer.tell(&format!("{command} {agent} {n}"));
    let said = racer.said();
    let (at, outcome) = said.split_once(' ').unwrap();
    assert_eq!(at, agent);
    outcome.to_owned()
}

// A child's purge is refused APPROVAL_PENDING under a budget of 1; the parent, told of it, asks at
// once through its own connection: it must run. And the budget is then spent for the child.
#[test]
fn a13_01_pending_refusal_in_one_process_frees_the_unit_for_another_at_once() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_pending") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mut racer = child(&url);
    for round in 0..40 {
        let agent = format!("pend-{round}");
        let outcome = ask(&mut racer, "purge", &agent, 1);
        assert!(outcome.starts_with("APPROVAL_PENDING"), "{outcome}");
        let ran = gate_of(&store, &agent, 1, "alice").run(|| post(round));
        assert!(
            ran.is_ok(),
            "round {round}: another process's refused call still held the unit: {:?}",
            ran.err()
        );
        assert_eq!(ask(&mut racer, "post", &agent, 1), "BUDGET_EXHAUSTED");
    }
}

// The same with the roles swapped and the refusal an audit sink that fails (AUDIT_UNAVAILABLE).
#[test]
fn a13_02_audit_unavailable_refusal_frees_the_unit_for_another_process() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_audit") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mut racer = child(&url);
    for round in 0..40 {
        let agent = format!("deaf-{round}");
        assert_eq!(ask(&mut racer, "deaf", &agent, 1), "AUDIT_UNAVAILABLE");
        let ran = gate_of(&store, &agent, 1, "alice").run(|| post(round));
        assert!(ran.is_ok(), "round {round}: {:?}", ran.err());
        // And the parent's refusal frees it for the child.
        let agent = format!("deaf-parent-{round}");
        let deaf = Gate::builder()
            .mode(Mode::FullAuto)
            .agent(agent.as_str())
            .principal("alice")
            .budget(BudgetScope::Agent, 1, HOUR)
            .budget_store_shared(store.clone())
            .audit(Broken)
            .build()
            .unwrap();
        assert_eq!(
            deaf.run(|| post(round)).unwrap_err().code(),
            DenialCode::AuditUnavailable
        );
        assert_eq!(ask(&mut racer, "post", &agent, 1), "ran");
    }
}

// The operator rejects the child's request with `toolgate approvals reject`; the child asks again and
// is refused APPROVAL_REJECTED; the parent's call right after must run.
#[test]
fn a13_03_rejection_by_the_cli_frees_the_unit_before_the_refusal() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_reject") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mut racer = child(&url);
    for round in 0..5 {
        let agent = format!("rej-{round}");
        let outcome = ask(&mut racer, "purge", &agent, 1);
        assert!(outcome.starts_with("APPROVAL_PENDING"), "{outcome}");
        let id = wait(store.list())
            .unwrap()
            .into_iter()
            .find(|r| r.binding.tool == "a13.purge" && r.binding.agent.as_deref() == Some(&agent))
            .expect("the child's request")
            .id
            .to_string();
        crate::support::cli_exits(&url, &["reject", &id, "--reason", "no"], 0);
        let outcome = ask(&mut racer, "purge", &agent, 1);
        assert_eq!(outcome, "APPROVAL_REJECTED");
        let ran = gate_of(&store, &agent, 1, "alice").run(|| post(round));
        assert!(ran.is_ok(), "round {round}: {:?}", ran.err());
    }
}

// A child refused APPROVAL_PENDING is killed (SIGKILL) the moment it has said so: its unit is back.
#[test]
fn a13_04_a_process_killed_right_after_its_refusal_leaves_the_unit_back() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_killed") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    for round in 0..8 {
        let mut racer = child(&url);
        let agent = format!("kill-{round}");
        let outcome = ask(&mut racer, "purge", &agent, 1);
        assert!(outcome.starts_with("APPROVAL_PENDING"), "{outcome}");
        racer.child.kill().unwrap();
        racer.child.wait().unwrap();
        let ran = gate_of(&store, &agent, 1, "alice").run(|| post(round));
        assert!(ran.is_ok(), "round {round}: {:?}", ran.err());
    }
}

// Three processes each alternate a refused purge and a post under one budget of 5; then the parent
// posts until refused. Exactly 5 posts ran in all: never more (exceeded), never fewer (a refused
// call's unit leaked after all the refusals were returned).
#[test]
fn a13_05_mixed_refusals_and_runs_across_processes_count_exactly_the_budget() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_mix") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mut racers: Vec<Racer> = (0..3).map(|_| child(&url)).collect();
    for racer in &mut racers {
        racer.tell("mix mixed 12");
    }
    let mut ran: u64 = racers
        .iter_mut()
        .map(|r| r.said().split_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    let gate = gate_of(&store, "mixed", 5, "alice");
    for i in 0..10 {
        if gate.run(|| post(100 + i)).is_ok() {
            ran += 1;
        }
    }
    assert_eq!(ran, 5, "posts that ran under a budget of 5");
    uses_are(&url, "5");
}

// Principal alice's request is approved by an operator; bob, same agent and so the same budget of
// 1, makes the identical call: it must not run on alice's approval, and its refusals must give the
// unit back, so that alice's approved call still runs. Then nothing more runs.
#[test]
fn a13_06_another_principals_approval_neither_runs_nor_spends_the_budget() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_principals") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mut racer = child(&url);
    let alice = gate_of(&store, "shared-agent", 1, "alice");
    let token = crate::support::token(alice.run(|| purge(1)));
    wait(store.answer(&token, crate::support::approve("ana"))).unwrap();
    let before = PURGES.load(Ordering::SeqCst);
    for _ in 0..3 {
        let outcome = ask(&mut racer, "bob", "shared-agent", 1);
        assert!(
            outcome.starts_with("APPROVAL_PENDING"),
            "bob's call on alice's approval: {outcome}"
        );
    }
    alice.run(|| purge(1)).unwrap();
    assert_eq!(PURGES.load(Ordering::SeqCst), before + 1);
    assert_eq!(
        ask(&mut racer, "bob", "shared-agent", 1),
        "BUDGET_EXHAUSTED"
    );
    assert_eq!(
        alice.run(|| post(2)).unwrap_err().code(),
        DenialCode::BudgetExhausted
    );
    uses_are(&url, "1");
}

// The link to the server is held (a server that stops answering) while a refused call's release is
// in flight: the refusal comes back within the store's timeout (plus slack), not later; and once the
// link is back the gate's next call runs.
#[test]
fn a13_07_a_held_server_during_the_release_delays_the_refusal_no_longer_than_the_timeout() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_held") else {
        return;
    };
    let (proxy, through) = proxied(&url);
    let timeout = Duration::from_secs(1);
    let store = Arc::new(
        PostgresStore::builder()
            .timeout(timeout)
            .connect(&through)
            .unwrap(),
    );
    let hold = proxy.hold.clone();
    let answered = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let at = answered.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("held")
        .budget(BudgetScope::Agent, 2, HOUR)
        .budget_store_shared(store.clone())
        .approver(move |_: &toolgate::ApprovalRequest<'_>| {
            hold.store(true, Ordering::SeqCst);
            *at.lock().unwrap() = Some(Instant::now());
            Approval::Reject("not now".into())
        })
        .build()
        .unwrap();
    let denied = gate.run(|| purge(1)).unwrap_err();
    let took = answered.lock().unwrap().unwrap().elapsed();
    assert_eq!(denied.code(), DenialCode::ApprovalRejected, "{denied}");
    // Bounded by the store's timeout, not by the link: the slack is for a loaded machine.
    assert!(
        took < timeout * 10,
        "the refusal waited {took:?} for its release, the store's timeout being {timeout:?}"
    );
    proxy.hold.store(false, Ordering::SeqCst);
    let ran = gate.run(|| post(1));
    assert!(
        ran.is_ok(),
        "the gate after a held release: {:?}",
        ran.err()
    );
}

// The server is stopped (pg_ctl stop -m fast) while a refused call's release is in flight: the
// refusal comes back within the store's timeout; once the server is back the gate works, and the
// budget is never exceeded.
#[test]
fn a13_08_a_stopped_server_during_the_release_neither_hangs_nor_breaks_the_gate() {
    let Some((_serial, cluster, url, store)) = parent_store_on_own_cluster(ROLE, "a13_stopped")
    else {
        return;
    };
    let cluster = Arc::new(cluster);
    let stopper = cluster.clone();
    let answered = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let at = answered.clone();
    let stop_now = Arc::new(AtomicBool::new(true));
    let stop = stop_now.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("stopped")
        .budget(BudgetScope::Agent, 2, HOUR)
        .budget_store_shared(store.clone())
        .approver(move |_: &toolgate::ApprovalRequest<'_>| {
            if stop.swap(false, Ordering::SeqCst) {
                stopper.stop();
            }
            *at.lock().unwrap() = Some(Instant::now());
            Approval::Reject("not now".into())
        })
        .build()
        .unwrap();
    let denied = gate.run(|| purge(1)).unwrap_err();
    let took = answered.lock().unwrap().unwrap().elapsed();
    assert_eq!(denied.code(), DenialCode::ApprovalRejected, "{denied}");
    // Bounded by the store's timeout: the slack is for a loaded machine.
    assert!(
        took < Duration::from_secs(10),
        "the refusal waited {took:?} for its release (timeout 1 s)"
    );
    cluster.start();
    let before = POSTS.load(Ordering::SeqCst);
    let ran = gate.run(|| post(1));
    assert!(
        ran.is_ok(),
        "the gate after a lost release: {:?}",
        ran.err()
    );
    let _ = gate.run(|| post(2));
    let _ = gate.run(|| post(3));
    assert!(
        POSTS.load(Ordering::SeqCst) - before <= 2,
        "budget of 2 exceeded"
    );
    let uses = query(&url, "SELECT count(*) FROM toolgate.budget_uses");
    assert!(uses[0][0].as_deref().unwrap().parse::<u32>().unwrap() <= 2);
}

// A gate of a fleet: while its approver decides a purge, the fleet is lowered to PARTIAL_AUTO (by
// `fleet::lower`, as `toolgate fleet lower` does) and the gate follows; the approval then comes. The
// call is refused at its commit point, and another process asking right after must find the unit
// back.
#[test]
fn a13_09_a_fleet_lowered_while_the_decision_waits_gives_the_unit_back_first() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_fleet") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mut racer = child(&url);
    let fleet = toolgate::postgres::Fleet::connect(&url, "a13fleet").unwrap();
    let slot: Arc<std::sync::OnceLock<Gate>> = Arc::new(std::sync::OnceLock::new());
    let held = slot.clone();
    let lower_url = url.clone();
    let gate = fleet
        .join(
            Gate::builder()
                .mode(Mode::FullAuto)
                .agent("fleeted")
                .principal("alice")
                .budget(BudgetScope::Agent, 1, HOUR)
                .budget_store_shared(store.clone())
                .approver(move |_: &toolgate::ApprovalRequest<'_>| {
                    toolgate::postgres::fleet::lower(
                        &lower_url,
                        toolgate::postgres::DEFAULT_SCHEMA,
                        "a13fleet",
                        Mode::PartialAuto,
                        "ana",
                        "incident",
                    )
                    .unwrap();
                    let start = Instant::now();
                    while held.get().unwrap().mode() != Mode::PartialAuto {
                        assert!(start.elapsed() < Duration::from_secs(10), "not lowered");
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Approval::Approve
                }),
        )
        .unwrap();
    slot.set(gate.clone()).ok().unwrap();
    let denied = gate.run(|| purge(1)).unwrap_err();
    assert_ne!(denied.code(), DenialCode::BudgetExhausted, "{denied}");
    assert_eq!(
        ask(&mut racer, "post", "fleeted", 1),
        "ran",
        "another process after the refusal ({})",
        denied.code()
    );
    assert_eq!(
        gate.run(|| post(1)).unwrap_err().code(),
        DenialCode::BudgetExhausted
    );
}

static DISK: AtomicUsize = AtomicUsize::new(0);

/// The link to hold from the disk's next reading on, once the approver armed it.
static HOLD_ON_READ: std::sync::Mutex<Option<Arc<AtomicBool>>> = std::sync::Mutex::new(None);

fn disk_state(disk: &str) -> Result<u64, String> {
    let _ = disk;
    if let Some(hold) = HOLD_ON_READ.lock().unwrap().take() {
        hold.store(true, Ordering::SeqCst);
    }
    Ok(DISK.load(Ordering::SeqCst) as u64)
}

/// Resize a disk: its state is read before the approval and again before the body.
#[tool(risk = "HIGH_WRITE", domain = "a13", target = disk, evidence = disk_state)]
async fn resize(disk: String) -> Result<(), Denied> {
    let _ = disk;
    Ok(())
}

/// Changes the disk's state while it decides, and has the link to the server held from the disk's
/// next reading on (just before the body, once the commit point found the call's unit still held);
/// approves after a yield, so that the async call's decision waits for it.
struct Shifty(Arc<AtomicBool>);

impl toolgate::approval::AsyncApprover for Shifty {
    fn approve<'a>(
        &'a self,
        _: &'a toolgate::ApprovalRequest<'a>,
    ) -> toolgate::approval::ApprovalFuture<'a> {
        Box::pin(async {
            DISK.fetch_add(1, Ordering::SeqCst);
            *HOLD_ON_READ.lock().unwrap() = Some(self.0.clone());
            tokio::task::yield_now().await;
            Approval::Approve
        })
    }
}

// An approved async call whose target changed while its decision waited is refused EVIDENCE_CHANGED
// just before its body. The link to the server is held from the approval on, so its release cannot
// land: either the refusal waits for it (at least the store's timeout) or, returned sooner, it must
// have its unit back, and another process asking right after runs. Guarantee 13 of SECURITY.md
// says so without exception; docs/budgets.md names this case as one ("given back without waiting").
#[test]
fn a13_10_an_evidence_changed_refusal_returns_before_its_unit_is_back() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_evidence") else {
        return;
    };
    let mut racer = child(&url);
    let (proxy, through) = proxied(&url);
    let timeout = Duration::from_secs(1);
    let store = Arc::new(
        PostgresStore::builder()
            .timeout(timeout)
            .connect(&through)
            .unwrap(),
    );
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("evidence")
        .principal("alice")
        .budget(BudgetScope::Agent, 1, HOUR)
        .budget_store_shared(store.clone())
        .async_approver(Shifty(proxy.hold.clone()))
        .build()
        .unwrap();
    let start = Instant::now();
    let denied = wait(gate.scope(resize("disk-1".into()))).unwrap_err();
    let took = start.elapsed();
    assert_eq!(denied.code(), DenialCode::EvidenceChanged, "{denied}");
    let other = ask(&mut racer, "post", "evidence", 1);
    proxy.hold.store(false, Ordering::SeqCst);
    assert!(
        took >= timeout || other == "ran",
        "refused {} after {took:?}, without waiting for its release; another process right after: {other}",
        denied.code()
    );
}

// The same with nothing held: 100 rounds of an EVIDENCE_CHANGED refusal in the parent, then at once a
// post in another process under the agent's budget of 1: it must run every time.
#[test]
fn a13_11_after_an_evidence_changed_refusal_another_process_runs_at_once() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_evidence_race") else {
        return;
    };
    let mut racer = child(&url);
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let unheld = Arc::new(AtomicBool::new(false));
    let mut refused = Vec::new();
    for round in 0..100 {
        let agent = format!("evidence-{round}");
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .agent(agent.as_str())
            .principal("alice")
            .budget(BudgetScope::Agent, 1, HOUR)
            .budget_store_shared(store.clone())
            .async_approver(Shifty(unheld.clone()))
            .build()
            .unwrap();
        let denied = wait(gate.scope(resize("disk-1".into()))).unwrap_err();
        assert_eq!(denied.code(), DenialCode::EvidenceChanged, "{denied}");
        let other = ask(&mut racer, "post", &agent, 1);
        if other != "ran" {
            refused.push(round);
        }
    }
    std::thread::sleep(Duration::from_millis(1500));
    let still: Vec<_> = refused
        .iter()
        .filter(|round| ask(&mut racer, "post", &format!("evidence-{round}"), 1) != "ran")
        .collect();
    let uses = query(&url, "SELECT count(*) FROM toolgate.budget_uses");
    assert!(
        refused.is_empty(),
        "rounds where another process, asking right after an EVIDENCE_CHANGED refusal, was refused: \
         {refused:?}; still refused 1.5 s later: {still:?}; uses in the store: {:?}",
        uses[0][0]
    );
}

// A child takes the unit of a budget of 1 and is killed (SIGKILL) while its approver decides: the call
// never ran, and no one is left to give the unit back. It stays counted for the window (the budget
// errs towards fewer calls, as documented): another process is refused, never let through twice.
#[test]
fn a13_12_a_process_killed_mid_decision_keeps_its_unit_for_the_window() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_killed_mid") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mut racer = child(&url);
    assert_eq!(ask(&mut racer, "hang", "mid", 1), "deciding");
    racer.child.kill().unwrap();
    racer.child.wait().unwrap();
    let before = POSTS.load(Ordering::SeqCst);
    let refused = gate_of(&store, "mid", 1, "alice")
        .run(|| post(1))
        .unwrap_err();
    assert_eq!(refused.code(), DenialCode::BudgetExhausted);
    assert!(refused.retry_after().unwrap() > HOUR - Duration::from_secs(60));
    assert_eq!(POSTS.load(Ordering::SeqCst), before);
}

/// Never answers.
struct Silent;

impl toolgate::approval::AsyncApprover for Silent {
    fn approve<'a>(
        &'a self,
        _: &'a toolgate::ApprovalRequest<'a>,
    ) -> toolgate::approval::ApprovalFuture<'a> {
        Box::pin(std::future::pending())
    }
}

/// Purge a folder, asynchronously.
#[tool(risk = "HIGH_WRITE", domain = "a13")]
async fn purge_async(n: u64) -> Result<u64, Denied> {
    PURGES.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

// An async call dropped (its caller's timeout) while its approver waits gives its unit back: another
// process finds it back within a second.
#[test]
fn a13_13_an_async_call_dropped_while_it_waits_gives_the_unit_back() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_dropped") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mut racer = child(&url);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("dropped")
        .principal("alice")
        .budget(BudgetScope::Agent, 1, HOUR)
        .budget_store_shared(store.clone())
        .async_approver(Silent)
        .build()
        .unwrap();
    let cut = wait(async {
        tokio::time::timeout(Duration::from_millis(300), gate.scope(purge_async(1))).await
    });
    assert!(cut.is_err());
    let start = Instant::now();
    loop {
        let other = ask(&mut racer, "post", "dropped", 1);
        if other == "ran" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "a dropped call's unit not back after 10 s: {other}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// MCP over HTTP: alice's `px.wire` through a server process is refused APPROVAL_PENDING (out of band)
// three times under the agent's budget of 1 call of `px.*`; this process, sharing the budget, then
// adds a note at once: it must run; and bob's note through the server is then over the budget.
#[test]
fn a13_14_mcp_http_pending_refusals_leave_the_budget_whole_for_another_process() {
    use crate::support::mcp_server as px;
    if std::env::var(ROLE).is_ok() || std::env::var(px::ROLE).is_ok() {
        return;
    }
    let (_serial, url, runs, server) = px::started_case(
        "a13_mcp",
        &["PX_STORE", "PX_BUDGET_URL"],
        &[("PX_AGENT", "a13mcp"), ("PX_BUDGET_N", "1")],
    );
    for cents in [1, 2, 3] {
        let said = px::plain(server.addr, px::ALICE, "px.wire", json!({"cents": cents}));
        assert_eq!(said.code, "APPROVAL_PENDING", "{:?}", said.result);
    }
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("a13mcp")
        .budget(BudgetScope::tool("px.*"), 1, HOUR)
        .budget_store_shared(store)
        .build()
        .unwrap();
    let ran = gate.run(|| px::note("here".into()));
    assert!(ran.is_ok(), "{:?}", ran.err().map(|d| d.to_string()));
    let said = px::plain(server.addr, px::BOB, "px.note", json!({"text": "x"}));
    assert_eq!(said.code, "BUDGET_EXHAUSTED", "{:?}", said.result);
    px::assert_ran(&runs, "note", 0, "bob's note over the budget");
}

// An operator answers alice's request "for the session" with `toolgate approvals approve ID
// --for-session`: her calls that follow may run on the grant, but each is still counted; under a
// budget of 2, the third is refused, and bob (another principal, same agent) is refused as well.
#[test]
fn a13_15_a_session_grant_from_the_cli_does_not_skip_the_shared_budget() {
    let Some((_serial, url)) = parent_database(ROLE, "a13_grant") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mut racer = child(&url);
    let alice = gate_of(&store, "granted", 2, "alice");
    let refused = alice.run(|| purge(1)).unwrap_err();
    assert_eq!(refused.code(), DenialCode::ApprovalPending, "{refused}");
    let id = wait(store.list())
        .unwrap()
        .into_iter()
        .find(|r| r.binding.tool == "a13.purge" && r.binding.agent.as_deref() == Some("granted"))
        .expect("alice's request")
        .id
        .to_string();
    crate::support::cli_exits(&url, &["approve", &id, "--for-session"], 0);
    let before = PURGES.load(Ordering::SeqCst);
    let mut ran = 0;
    for n in [1, 2, 3, 4] {
        if alice.run(|| purge(n)).is_ok() {
            ran += 1;
        }
    }
    assert!(ran <= 2, "a budget of 2 ran {ran} purges on a grant");
    assert_eq!(PURGES.load(Ordering::SeqCst) - before, ran);
    let bob = ask(&mut racer, "bob", "granted", 2);
    assert!(
        bob == "BUDGET_EXHAUSTED" || ran < 2,
        "bob after alice spent the budget: {bob}"
    );
    let uses = query(&url, "SELECT count(*) FROM toolgate.budget_uses");
    assert_eq!(uses[0][0].as_deref(), Some(ran.to_string().as_str()));
}
