//! The safety floor, on a realistic tool suite: what each mode lets through, what it refuses, and proof
//! (a counter per tool) that a refused call never reaches the tool's body.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, mpsc};
use toolgate::gate::{DenyRuleError, RaiseRefused};
use toolgate::{
    AllowAllApprover, Approval, ApprovalRequest, DenialCode, Denied, Gate, GateError, Mode, Risk,
    tool,
};

use crate::common::gates;
use crate::common::serial;
use crate::fixtures::support::{denying_approving_in, full_auto_denying};

// ---------------------------------------------------------------------------------------------------------
// The suite
// ---------------------------------------------------------------------------------------------------------

mod users {
    use super::*;

    pub static GET: AtomicUsize = AtomicUsize::new(0);
    pub static DELETE: AtomicUsize = AtomicUsize::new(0);

    /// Reads one user.
    #[tool(risk = "READ_ONLY", domain = "accounts", idempotent)]
    pub fn get(id: u64) -> Result<String, Denied> {
        GET.fetch_add(1, Ordering::SeqCst);
        Ok(format!("user-{id}"))
    }

    /// Deletes a user account.
    #[tool(risk = "HIGH_WRITE", domain = "accounts")]
    pub fn delete(id: u64) -> Result<u64, Denied> {
        DELETE.fetch_add(1, Ordering::SeqCst);
        Ok(id)
    }
}

mod docs {
    use super::*;

    pub static SEARCH: AtomicUsize = AtomicUsize::new(0);

    /// Searches the public documentation.
    #[tool(risk = "READ_ONLY", domain = "docs", open_world, idempotent)]
    pub fn search(query: &str) -> Result<Vec<String>, Denied> {
        SEARCH.fetch_add(1, Ordering::SeqCst);
        Ok(vec![format!("result for {query}")])
    }
}

mod email {
    use super::*;

    pub static DRAFT: AtomicUsize = AtomicUsize::new(0);

    /// Drafts an email without sending it.
    #[tool(risk = "PROPOSE_ONLY", domain = "email")]
    pub fn draft(to: &str) -> Result<String, Denied> {
        DRAFT.fetch_add(1, Ordering::SeqCst);
        Ok(format!("Dear {to},"))
    }
}

mod migrations {
    use super::*;

    pub static PLAN: AtomicUsize = AtomicUsize::new(0);

    /// Plans a schema migration.
    #[tool(risk = "PROPOSE_ONLY", domain = "migrations")]
    pub fn plan(steps: u32) -> Result<u32, Denied> {
        PLAN.fetch_add(1, Ordering::SeqCst);
        Ok(steps)
    }
}

mod labels {
    use super::*;

    pub static UPDATE: AtomicUsize = AtomicUsize::new(0);

    /// Sets the labels of a ticket.
    #[tool(risk = "LOW_WRITE", domain = "labels")]
    pub fn update(ticket: u64) -> Result<u64, Denied> {
        UPDATE.fetch_add(1, Ordering::SeqCst);
        Ok(ticket)
    }
}

mod comments {
    use super::*;

    pub static LOG: AtomicUsize = AtomicUsize::new(0);

    /// Appends a comment to a ticket.
    #[tool(risk = "LOW_WRITE", domain = "comments")]
    pub fn log(text: &str) -> Result<usize, Denied> {
        LOG.fetch_add(1, Ordering::SeqCst);
        Ok(text.len())
    }
}

mod payments {
    use super::*;

    pub static TRANSFER: AtomicUsize = AtomicUsize::new(0);

    /// Moves money between accounts.
    #[tool(risk = "HIGH_WRITE", domain = "payments")]
    pub fn transfer(cents: u64) -> Result<u64, Denied> {
        TRANSFER.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }
}

mod reports {
    use super::*;

    pub static FETCH: AtomicUsize = AtomicUsize::new(0);
    pub static EXPORT: AtomicUsize = AtomicUsize::new(0);

    /// Fetches a report, yielding between pages.
    #[tool(risk = "READ_ONLY", domain = "reports")]
    pub async fn fetch(pages: usize) -> Result<usize, Denied> {
        FETCH.fetch_add(1, Ordering::SeqCst);
        for _ in 0..pages {
            tokio::task::yield_now().await;
        }
        Ok(pages)
    }

    /// Exports a report; only autonomous agents may.
    #[tool(risk = "READ_ONLY", domain = "reports", modes = [PARTIAL_AUTO, FULL_AUTO])]
    pub fn export() -> Result<(), Denied> {
        EXPORT.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

mod tickets {
    use super::*;

    pub static CLOSE: AtomicUsize = AtomicUsize::new(0);
    pub static CLOSE_DONE: AtomicUsize = AtomicUsize::new(0);

    /// Closes a ticket: awaits several times, relabelling it after each await.
    #[tool(risk = "LOW_WRITE", domain = "tickets")]
    pub async fn close(ticket: u64, steps: usize) -> Result<usize, Denied> {
        CLOSE.fetch_add(1, Ordering::SeqCst);
        for _ in 0..steps {
            tokio::task::yield_now().await;
            // A gated call after an await: it needs the ambient gate to have survived the suspension.
            labels::update(ticket)?;
        }
        CLOSE_DONE.fetch_add(1, Ordering::SeqCst);
        Ok(steps)
    }
}

mod accounts {
    use super::*;

    pub static PURGE: AtomicUsize = AtomicUsize::new(0);

    /// Purges an account and everything in it.
    #[tool(risk = "HIGH_WRITE", domain = "accounts")]
    pub async fn purge(account: u64) -> Result<u64, Denied> {
        PURGE.fetch_add(1, Ordering::SeqCst);
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        Ok(account)
    }
}

mod audit {
    use super::*;

    pub static RECORD: AtomicUsize = AtomicUsize::new(0);

    /// Records an audit entry, decided by the gate it is handed.
    #[tool(risk = "LOW_WRITE", domain = "audit")]
    pub fn record(gate: &Gate, entry: &str) -> Result<usize, Denied> {
        let _ = gate;
        RECORD.fetch_add(1, Ordering::SeqCst);
        Ok(entry.len())
    }
}

mod files {
    use super::*;

    pub static WRITE: AtomicUsize = AtomicUsize::new(0);

    /// Writes a file, reporting errors as `std::io::Error`.
    #[tool(risk = "LOW_WRITE", domain = "files")]
    pub fn write(bytes: &[u8]) -> std::io::Result<usize> {
        WRITE.fetch_add(1, Ordering::SeqCst);
        Ok(bytes.len())
    }
}

mod cache {
    use super::*;

    pub static FLUSH: AtomicUsize = AtomicUsize::new(0);

    /// Flushes a cache, reporting errors through `anyhow`.
    #[tool(risk = "LOW_WRITE", domain = "cache")]
    pub fn flush() -> anyhow::Result<()> {
        FLUSH.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

mod deploy {
    use super::*;

    pub static RUN: AtomicUsize = AtomicUsize::new(0);

    /// A deployment to production is a critical write; anywhere else it is a small one.
    pub fn classify(target: &str) -> Risk {
        if target == "production" {
            Risk::HighWrite
        } else {
            Risk::LowWrite
        }
    }

    /// Deploys the current build to a target.
    #[tool(risk = "LOW_WRITE", domain = "deploy", escalate = classify)]
    pub fn run(target: String) -> Result<String, Denied> {
        RUN.fetch_add(1, Ordering::SeqCst);
        Ok(target)
    }
}

/// One synchronous tool of the suite, called uniformly.
struct Tool {
    id: &'static str,
    risk: Risk,
    call: fn() -> Result<(), Denied>,
    ran: &'static AtomicUsize,
}

fn suite() -> Vec<Tool> {
    vec![
        Tool {
            id: "accounts.get",
            risk: Risk::ReadOnly,
            call: || users::get(1).map(drop),
            ran: &users::GET,
        },
        Tool {
            id: "docs.search",
            risk: Risk::ReadOnly,
            call: || docs::search("gates").map(drop),
            ran: &docs::SEARCH,
        },
        Tool {
            id: "email.draft",
            risk: Risk::ProposeOnly,
            call: || email::draft("ops").map(drop),
            ran: &email::DRAFT,
        },
        Tool {
            id: "migrations.plan",
            risk: Risk::ProposeOnly,
            call: || migrations::plan(3).map(drop),
            ran: &migrations::PLAN,
        },
        Tool {
            id: "labels.update",
            risk: Risk::LowWrite,
            call: || labels::update(9).map(drop),
            ran: &labels::UPDATE,
        },
        Tool {
            id: "comments.log",
            risk: Risk::LowWrite,
            call: || comments::log("done").map(drop),
            ran: &comments::LOG,
        },
        Tool {
            id: "accounts.delete",
            risk: Risk::HighWrite,
            call: || users::delete(7).map(drop),
            ran: &users::DELETE,
        },
        Tool {
            id: "payments.transfer",
            risk: Risk::HighWrite,
            call: || payments::transfer(100).map(drop),
            ran: &payments::TRANSFER,
        },
    ]
}

// ---------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------

fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

/// Calls `tool` and checks that its body ran exactly when the call was allowed.
fn call_counted(tool: &Tool) -> Result<(), Denied> {
    let before = count(tool.ran);
    let result = (tool.call)();
    let runs = count(tool.ran) - before;
    match &result {
        Ok(()) => assert_eq!(runs, 1, "{}: allowed, so its body ran once", tool.id),
        Err(denied) => assert_eq!(
            runs,
            0,
            "{}: refused ({}), so its body must not run",
            tool.id,
            denied.code()
        ),
    }
    result
}

fn expect_refused(result: Result<(), Denied>, code: DenialCode, what: &str) -> Denied {
    match result {
        Ok(()) => panic!("{what}: expected a refusal {code}, but the call ran"),
        Err(denied) => {
            assert_eq!(denied.code(), code, "{what}: {denied}");
            denied
        }
    }
}

fn gate(mode: Mode) -> Gate {
    Gate::new(mode).expect("the suite has no duplicate ids")
}

fn gate_with_approver(mode: Mode) -> Gate {
    gates::approved(mode, AllowAllApprover)
}

fn rejecting(
    reason: &'static str,
) -> impl Fn(&ApprovalRequest<'_>) -> Approval + Send + Sync + 'static {
    move |_: &ApprovalRequest<'_>| Approval::Reject(reason.to_owned())
}

/// Runs `future` to completion on a two-worker multi-thread tokio runtime.
fn on_tokio<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
        .block_on(future)
}

// ---------------------------------------------------------------------------------------------------------
// Modes
// ---------------------------------------------------------------------------------------------------------

#[test]
fn the_suite_is_registered_with_its_declared_risks() {
    for tool in suite() {
        let manifest = toolgate::registry().manifest(tool.id).expect(tool.id);
        assert_eq!(manifest.risk_level, tool.risk, "{}", tool.id);
    }
}

#[test]
fn mutating_tools_are_refused_in_shadow_and_advisory_without_running() {
    let _serial = serial();
    for mode in [Mode::Shadow, Mode::Advisory] {
        // An approver that would approve anything changes nothing: the mode refuses first.
        for gate in [gate(mode), gate_with_approver(mode)] {
            for tool in suite().iter().filter(|t| t.risk.is_write()) {
                let denied = expect_refused(
                    gate.run(|| call_counted(tool)),
                    DenialCode::ModeNotAllowed,
                    tool.id,
                );
                assert_eq!(denied.tool().id, tool.id);
                assert_eq!(denied.risk(), tool.risk);
                assert_eq!(denied.mode(), Some(mode));
            }
        }
    }
}

#[test]
fn proposals_run_in_shadow_and_advisory() {
    let _serial = serial();
    for mode in [Mode::Shadow, Mode::Advisory] {
        let gate = gate(mode);
        for tool in suite().iter().filter(|t| t.risk == Risk::ProposeOnly) {
            gate.run(|| call_counted(tool)).unwrap();
        }
    }
}

#[test]
fn read_only_tools_are_admitted_in_every_mode() {
    let _serial = serial();
    for mode in Mode::ALL {
        let gate = gate(mode);
        for tool in suite().iter().filter(|t| t.risk == Risk::ReadOnly) {
            gate.run(|| call_counted(tool))
                .unwrap_or_else(|d| panic!("{} in {mode}: {d}", tool.id));
        }
    }
}

#[test]
fn each_mode_lets_through_exactly_what_its_ceiling_admits() {
    let _serial = serial();
    for mode in Mode::ALL {
        let gate = gate_with_approver(mode);
        for tool in suite() {
            let expected = matches!(
                (mode, tool.risk),
                (_, Risk::ReadOnly | Risk::ProposeOnly)
                    | (Mode::PartialAuto | Mode::FullAuto, Risk::LowWrite)
                    | (Mode::FullAuto, Risk::HighWrite)
            );
            let result = gate.run(|| call_counted(&tool));
            assert_eq!(
                result.is_ok(),
                expected,
                "{} in {mode}: {result:?}",
                tool.id
            );
        }
    }
}

#[test]
fn low_write_needs_no_approver() {
    let _serial = serial();
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    for mode in [Mode::PartialAuto, Mode::FullAuto] {
        let counter = Arc::clone(&counter);
        let gate = gates::approved(mode, move |_: &ApprovalRequest<'_>| {
            counter.fetch_add(1, Ordering::SeqCst);
            Approval::Reject("should not be asked".into())
        });
        for tool in suite().iter().filter(|t| t.risk == Risk::LowWrite) {
            gate.run(|| call_counted(tool)).unwrap();
        }
    }
    assert_eq!(
        count(&asked),
        0,
        "the approver is asked about HIGH_WRITE only"
    );
}

#[test]
fn restricted_read_only_tool_is_refused_outside_its_modes() {
    let _serial = serial();
    let before = count(&reports::EXPORT);
    for mode in [Mode::Shadow, Mode::Advisory] {
        let denied = gate(mode).run(reports::export).unwrap_err();
        assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
        assert_eq!(
            denied.to_string(),
            format!(
                "tool `reports.export` (READ_ONLY) is not allowed in mode {mode}; it is allowed in \
                 PARTIAL_AUTO, FULL_AUTO"
            )
        );
    }
    assert_eq!(count(&reports::EXPORT), before);
    gate(Mode::PartialAuto).run(reports::export).unwrap();
    gate(Mode::FullAuto).run(reports::export).unwrap();
    assert_eq!(count(&reports::EXPORT), before + 2);
}

// ---------------------------------------------------------------------------------------------------------
// HIGH_WRITE and approvals
// ---------------------------------------------------------------------------------------------------------

fn high_writes() -> Vec<Tool> {
    suite()
        .into_iter()
        .filter(|t| t.risk == Risk::HighWrite)
        .collect()
}

#[test]
fn high_write_runs_in_full_auto_with_an_approving_approver() {
    let _serial = serial();
    let gate = gate_with_approver(Mode::FullAuto);
    for tool in high_writes() {
        gate.run(|| call_counted(&tool)).unwrap();
    }

    // A closure approver sees the call it approves.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let gate = gates::approved(Mode::FullAuto, move |request: &ApprovalRequest<'_>| {
        log.lock()
            .unwrap()
            .push((request.tool.id, request.mode, request.risk));
        Approval::Approve
    });
    for tool in high_writes() {
        gate.run(|| call_counted(&tool)).unwrap();
    }
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            ("accounts.delete", Mode::FullAuto, Risk::HighWrite),
            ("payments.transfer", Mode::FullAuto, Risk::HighWrite),
        ]
    );
}

#[test]
fn high_write_without_an_approver_is_refused_approval_required() {
    let _serial = serial();
    let gate = gate(Mode::FullAuto);
    for tool in high_writes() {
        let denied = expect_refused(
            gate.run(|| call_counted(&tool)),
            DenialCode::ApprovalRequired,
            tool.id,
        );
        assert_eq!(denied.mode(), Some(Mode::FullAuto));
    }
}

#[test]
fn high_write_with_a_rejecting_approver_is_refused_approval_rejected() {
    let _serial = serial();
    let gate = gates::approved(Mode::FullAuto, rejecting("change freeze"));
    for tool in high_writes() {
        let denied = expect_refused(
            gate.run(|| call_counted(&tool)),
            DenialCode::ApprovalRejected,
            tool.id,
        );
        assert_eq!(denied.detail(), Some("change freeze"));
        assert!(denied.to_string().contains("change freeze"), "{denied}");
    }
}

#[test]
fn high_write_is_refused_below_full_auto_even_with_an_approver() {
    let _serial = serial();
    let asked = Arc::new(AtomicUsize::new(0));
    for mode in [Mode::Shadow, Mode::Advisory, Mode::PartialAuto] {
        let counter = Arc::clone(&asked);
        let gate = gates::approved(mode, move |_: &ApprovalRequest<'_>| {
            counter.fetch_add(1, Ordering::SeqCst);
            Approval::Approve
        });
        for tool in high_writes() {
            expect_refused(
                gate.run(|| call_counted(&tool)),
                DenialCode::ModeNotAllowed,
                tool.id,
            );
        }
    }
    assert_eq!(
        count(&asked),
        0,
        "no approver is asked about a refused call"
    );
}

// ---------------------------------------------------------------------------------------------------------
// No gate, threads, async
// ---------------------------------------------------------------------------------------------------------

#[test]
fn async_tools_keep_their_gate_across_awaits_on_a_multi_thread_runtime() {
    let _serial = serial();
    let (close, done, update) = (
        count(&tickets::CLOSE),
        count(&tickets::CLOSE_DONE),
        count(&labels::UPDATE),
    );
    let fetch = count(&reports::FETCH);
    let gate = gate(Mode::PartialAuto);
    let results = on_tokio(async {
        let mut tasks = Vec::new();
        for ticket in 0..4 {
            tasks.push(tokio::spawn(gate.scope(tickets::close(ticket, 5))));
            tasks.push(tokio::spawn(gate.scope(reports::fetch(5))));
        }
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        results
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(count(&tickets::CLOSE), close + 4);
    assert_eq!(count(&tickets::CLOSE_DONE), done + 4);
    assert_eq!(count(&labels::UPDATE), update + 4 * 5);
    assert_eq!(count(&reports::FETCH), fetch + 4);
}

#[test]
fn async_writes_are_refused_in_shadow_before_the_first_await() {
    let _serial = serial();
    let before = count(&tickets::CLOSE);
    let gate = gate(Mode::Shadow);
    let result = on_tokio(async { tokio::spawn(gate.scope(tickets::close(1, 3))).await });
    let denied = result.unwrap().unwrap_err();
    assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
    assert_eq!(count(&tickets::CLOSE), before);
}

#[test]
fn async_high_write_follows_the_approver() {
    let _serial = serial();
    let before = count(&accounts::PURGE);
    on_tokio(async {
        let approving = gate_with_approver(Mode::FullAuto);
        assert_eq!(approving.scope(accounts::purge(3)).await.unwrap(), 3);
        let none = gate(Mode::FullAuto);
        let denied = none.scope(accounts::purge(4)).await.unwrap_err();
        assert_eq!(denied.code(), DenialCode::ApprovalRequired);
        let rejecting = gates::approved(Mode::FullAuto, rejecting("not now"));
        let denied = rejecting.scope(accounts::purge(5)).await.unwrap_err();
        assert_eq!(denied.code(), DenialCode::ApprovalRejected);
    });
    assert_eq!(count(&accounts::PURGE), before + 1);
}

#[test]
fn an_async_tool_without_a_scope_is_refused() {
    let _serial = serial();
    let before = count(&tickets::CLOSE);
    let gate = gate(Mode::FullAuto);
    // Created inside `run`, but an async body runs when polled, and it is polled outside any gate.
    let future = gate.run(|| tickets::close(1, 2));
    let denied = on_tokio(future).unwrap_err();
    assert_eq!(denied.code(), DenialCode::NoGate);
    // Spawned without a scope: the worker thread has no gate either.
    let denied = on_tokio(async { tokio::spawn(tickets::close(1, 2)).await })
        .unwrap()
        .unwrap_err();
    assert_eq!(denied.code(), DenialCode::NoGate);
    assert_eq!(count(&tickets::CLOSE), before);
}

// ---------------------------------------------------------------------------------------------------------
// Nesting and lowering
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_full_auto_gate_inside_a_shadow_gate_still_refuses_writes() {
    let _serial = serial();
    let outer = gate(Mode::Shadow);
    let inner = gate_with_approver(Mode::FullAuto);
    outer.run(|| {
        inner.run(|| {
            for tool in suite() {
                let result = call_counted(&tool);
                if tool.risk.is_write() {
                    let denied = expect_refused(result, DenialCode::ModeNotAllowed, tool.id);
                    assert_eq!(denied.mode(), Some(Mode::Shadow), "the outer gate refuses");
                } else {
                    result.unwrap();
                }
            }
        })
    });
    // The same holds for futures: a scope inside a scope.
    let before = count(&tickets::CLOSE);
    let denied = on_tokio(outer.scope(inner.scope(tickets::close(1, 2)))).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
    assert_eq!(count(&tickets::CLOSE), before);
}

#[test]
fn lowering_takes_effect_on_another_thread_and_raising_changes_nothing() {
    let _serial = serial();
    let gate = gate(Mode::PartialAuto);
    let before = count(&labels::UPDATE);
    let (entered, entered_rx) = mpsc::channel();
    let lowered = Arc::new(Barrier::new(2));
    let worker = {
        let gate = gate.clone();
        let lowered = Arc::clone(&lowered);
        std::thread::spawn(move || {
            gate.run(|| {
                let first = labels::update(1);
                entered.send(()).unwrap();
                lowered.wait();
                let second = labels::update(2);
                (first, second, gate.mode())
            })
        })
    };
    entered_rx.recv().unwrap();
    gate.lower(Mode::Shadow).unwrap();
    lowered.wait();
    let (first, second, seen) = worker.join().unwrap();
    assert_eq!(first.unwrap(), 1);
    assert_eq!(second.unwrap_err().code(), DenialCode::ModeNotAllowed);
    assert_eq!(seen, Mode::Shadow);
    assert_eq!(count(&labels::UPDATE), before + 1);

    let refused = gate.lower(Mode::FullAuto).unwrap_err();
    assert_eq!(
        refused,
        RaiseRefused {
            current: Mode::Shadow,
            requested: Mode::FullAuto
        }
    );
    assert_eq!(gate.mode(), Mode::Shadow);
    let denied = gate.run(|| labels::update(3)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
    assert_eq!(count(&labels::UPDATE), before + 1);
}

// ---------------------------------------------------------------------------------------------------------
// Deny list
// ---------------------------------------------------------------------------------------------------------

#[test]
fn deny_by_exact_id_beats_an_approver() {
    let _serial = serial();
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .deny("accounts.delete")
        .approver(move |_: &ApprovalRequest<'_>| {
            counter.fetch_add(1, Ordering::SeqCst);
            Approval::Approve
        })
        .build()
        .unwrap();
    for tool in suite() {
        let result = gate.run(|| call_counted(&tool));
        if tool.id == "accounts.delete" {
            let denied = expect_refused(result, DenialCode::DenyListed, tool.id);
            assert_eq!(denied.detail(), Some("accounts.delete"));
        } else {
            result.unwrap();
        }
    }
    // Only payments.transfer needed an approval; the deny-listed call never reached the approver.
    assert_eq!(count(&asked), 1);
}

#[test]
fn deny_by_glob_refuses_in_every_mode() {
    let _serial = serial();
    for mode in Mode::ALL {
        let gate = denying_approving_in(mode, &["accounts.*", "*.log"]);
        assert_eq!(
            gate.deny_rules().collect::<Vec<_>>(),
            ["accounts.*", "*.log"]
        );
        for tool in suite() {
            let result = gate.run(|| call_counted(&tool));
            match tool.id {
                "accounts.get" | "accounts.delete" => {
                    let denied = expect_refused(result, DenialCode::DenyListed, tool.id);
                    assert_eq!(denied.detail(), Some("accounts.*"));
                    assert_eq!(denied.mode(), Some(mode));
                }
                "comments.log" => {
                    let denied = expect_refused(result, DenialCode::DenyListed, tool.id);
                    assert_eq!(denied.detail(), Some("*.log"));
                }
                _ => assert_eq!(
                    result.is_ok(),
                    toolgate::registry()
                        .manifest(tool.id)
                        .unwrap()
                        .allowed_modes
                        .contains(mode),
                    "{} in {mode}",
                    tool.id
                ),
            }
        }
    }
}

#[test]
fn a_dead_deny_rule_fails_the_build() {
    let error = full_auto_denying(&["accounts.get", "accounts.remove"]).unwrap_err();
    assert_eq!(
        error,
        GateError::DenyRules(vec![DenyRuleError::MatchesNothing {
            pattern: "accounts.remove".into()
        }])
    );
    assert!(error.to_string().contains("`accounts.remove`"), "{error}");
    assert!(
        error.to_string().contains("matches no registered tool"),
        "{error}"
    );
    // A typo gets a suggestion.
    let typo = Gate::builder().deny("accounts.delet").build().unwrap_err();
    assert_eq!(
        typo.to_string(),
        "cannot build the gate: deny rule `accounts.delet` matches no registered tool; did you \
         mean `accounts.delete`?"
    );
}

#[test]
fn an_invalid_deny_pattern_fails_the_build() {
    for pattern in [
        "",
        "users delete",
        "users;*",
        "users.dé",
        "accounts.del[e]te",
    ] {
        let error = Gate::builder().deny(pattern).build().unwrap_err();
        match &error {
            GateError::DenyRules(errors) => match errors.as_slice() {
                [DenyRuleError::Invalid { pattern: got, .. }] => assert_eq!(got, pattern),
                other => panic!("{pattern:?}: {other:?}"),
            },
            other => panic!("{pattern:?}: {other:?}"),
        }
    }
    // The characters of an rmcp tool's MCP name are a rule's too; a rule in them that matches nothing
    // fails as a dead rule does.
    for pattern in ["Users.delete", "users/*"] {
        match Gate::builder().deny(pattern).build().unwrap_err() {
            GateError::DenyRules(errors) => assert!(
                matches!(errors.as_slice(), [DenyRuleError::MatchesNothing { pattern: got }] if got == pattern),
                "{pattern:?}: {errors:?}"
            ),
            other => panic!("{pattern:?}: {other:?}"),
        }
    }
    // Every bad rule is reported, not only the first.
    let error = Gate::builder()
        .deny("Nope")
        .deny("nothing.matches.this")
        .build()
        .unwrap_err();
    match error {
        GateError::DenyRules(errors) => assert_eq!(errors.len(), 2, "{errors:?}"),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------------------
// `&Gate` parameters
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_gate_parameter_decides_the_call() {
    let _serial = serial();
    let before = count(&audit::RECORD);
    let partial = gate(Mode::PartialAuto);
    assert_eq!(audit::record(&partial, "ok").unwrap(), 2);
    let denied = audit::record(&gate(Mode::Advisory), "no").unwrap_err();
    assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
    assert_eq!(denied.mode(), Some(Mode::Advisory));
    // An ambient gate still applies: the parameter cannot widen it.
    let shadow = gate(Mode::Shadow);
    let denied = shadow.run(|| audit::record(&partial, "no")).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
    assert_eq!(denied.mode(), Some(Mode::Shadow));
    // And the parameter's deny list applies.
    let denying = gates::denying(Mode::FullAuto, "audit.*");
    let denied = audit::record(&denying, "no").unwrap_err();
    assert_eq!(denied.code(), DenialCode::DenyListed);
    assert_eq!(count(&audit::RECORD), before + 1);
}

// ---------------------------------------------------------------------------------------------------------
// The refusal
// ---------------------------------------------------------------------------------------------------------

fn assert_error_traits<T: Clone + Send + Sync + 'static + std::error::Error>() {}

#[test]
fn denied_is_a_clonable_thread_safe_error() {
    assert_error_traits::<Denied>();
    let _serial = serial();
    let denied = users::delete(1).unwrap_err();
    let clone = denied.clone();
    let moved = std::thread::spawn(move || clone.to_string())
        .join()
        .unwrap();
    assert_eq!(moved, denied.to_string());
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(denied);
    assert!(boxed.downcast_ref::<Denied>().is_some());
}

#[test]
fn denial_codes_have_their_stable_names() {
    let names = [
        (DenialCode::NoGate, "NO_GATE"),
        (DenialCode::DenyListed, "DENY_LISTED"),
        (DenialCode::ModeNotAllowed, "MODE_NOT_ALLOWED"),
        (DenialCode::AboveCeiling, "ABOVE_CEILING"),
        (DenialCode::ApprovalRequired, "APPROVAL_REQUIRED"),
        (DenialCode::ApprovalRejected, "APPROVAL_REJECTED"),
        (DenialCode::UnregisteredTool, "UNREGISTERED_TOOL"),
        (DenialCode::AuditUnavailable, "AUDIT_UNAVAILABLE"),
        (DenialCode::ApprovalExpired, "APPROVAL_EXPIRED"),
        (DenialCode::ApprovalMismatch, "APPROVAL_MISMATCH"),
        (DenialCode::ApprovalReused, "APPROVAL_REUSED"),
        (
            DenialCode::ApprovalStoreUnavailable,
            "APPROVAL_STORE_UNAVAILABLE",
        ),
        (DenialCode::ApprovalPending, "APPROVAL_PENDING"),
        (DenialCode::BudgetExhausted, "BUDGET_EXHAUSTED"),
        (
            DenialCode::BudgetStoreUnavailable,
            "BUDGET_STORE_UNAVAILABLE",
        ),
        (DenialCode::TaintedSession, "TAINTED_SESSION"),
        (DenialCode::ArgumentRefused, "ARGUMENT_REFUSED"),
        (DenialCode::TargetNotSingle, "TARGET_NOT_SINGLE"),
        (DenialCode::RollbackUnavailable, "ROLLBACK_UNAVAILABLE"),
        (DenialCode::EvidenceUnavailable, "EVIDENCE_UNAVAILABLE"),
        (DenialCode::EvidenceChanged, "EVIDENCE_CHANGED"),
        (DenialCode::ConfirmationMismatch, "CONFIRMATION_MISMATCH"),
        (DenialCode::HistoryRefused, "HISTORY_REFUSED"),
    ];
    assert_eq!(
        names.len(),
        DenialCode::ALL.len(),
        "a code without its name here"
    );
    for (code, name) in names {
        assert!(DenialCode::ALL.contains(&code), "{name}");
        assert_eq!(code.as_str(), name);
        assert_eq!(code.to_string(), name);
        assert_eq!(code, name);
        assert_eq!(serde_json::to_value(code).unwrap(), name);
    }
    // Every code, present or future, has its own SCREAMING_SNAKE name.
    let mut all: Vec<&str> = DenialCode::ALL.iter().map(|c| c.as_str()).collect();
    assert!(
        all.iter()
            .all(|name| name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
    );
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), DenialCode::ALL.len());
}

/// One refusal of each code a gate can give for the suite, from real calls.
fn refusals() -> Vec<(&'static str, Denied)> {
    let full_auto_rejecting = gates::approved(Mode::FullAuto, rejecting("not during the freeze"));
    let two_step = gates::two_step(Mode::FullAuto);
    let denying = crate::fixtures::support::denying_approving("accounts.del*");
    vec![
        ("NO_GATE", users::delete(1).unwrap_err()),
        ("DENY_LISTED", denying.run(|| users::delete(1)).unwrap_err()),
        (
            "MODE_NOT_ALLOWED",
            gate(Mode::PartialAuto)
                .run(|| users::delete(1))
                .unwrap_err(),
        ),
        (
            "APPROVAL_REQUIRED",
            gate(Mode::FullAuto).run(|| users::delete(1)).unwrap_err(),
        ),
        (
            "APPROVAL_REJECTED",
            full_auto_rejecting.run(|| users::delete(1)).unwrap_err(),
        ),
        (
            "APPROVAL_PENDING",
            two_step.run(|| users::delete(1)).unwrap_err(),
        ),
    ]
}

#[test]
fn each_refusal_has_its_code_and_a_message_naming_tool_risk_and_mode() {
    let _serial = serial();
    let before = count(&users::DELETE);
    let refusals = refusals();
    assert_eq!(count(&users::DELETE), before, "no refused call ran");
    for (code, denied) in &refusals {
        assert_eq!(denied.code(), *code);
        assert_eq!(denied.code().as_str(), *code);
        assert_eq!(denied.tool().id, "accounts.delete");
        assert_eq!(denied.risk(), Risk::HighWrite);
        let message = denied.message();
        assert_eq!(message, denied.to_string());
        assert!(message.contains("`accounts.delete`"), "{message}");
        assert!(message.contains("HIGH_WRITE"), "{message}");
        if let Some(mode) = denied.mode()
            && *code != "DENY_LISTED"
        {
            assert!(message.contains(mode.as_str()), "{message}");
        }
    }
    let message = |code: &str| {
        refusals
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(_, d)| d.to_string())
            .unwrap()
    };
    assert_eq!(
        message("MODE_NOT_ALLOWED"),
        "tool `accounts.delete` (HIGH_WRITE) is not allowed in mode PARTIAL_AUTO; it is allowed in \
         FULL_AUTO"
    );
    assert!(message("NO_GATE").contains("outside any gate"));
    assert!(message("NO_GATE").contains("a spawned thread or task does not inherit the gate"));
    assert!(message("DENY_LISTED").contains("rule `accounts.del*`"));
    assert!(message("APPROVAL_REQUIRED").contains("FULL_AUTO"));
    assert!(message("APPROVAL_REJECTED").contains("FULL_AUTO"));
    assert!(message("APPROVAL_REJECTED").contains("not during the freeze"));
    assert!(message("APPROVAL_PENDING").contains("pending until an operator approves it"));
    assert!(message("APPROVAL_REQUIRED").contains("the gate has no approver"));
    let pending = refusals
        .iter()
        .find(|(c, _)| *c == "APPROVAL_PENDING")
        .unwrap();
    assert!(pending.1.approval_token().is_some());
    let required = refusals
        .iter()
        .find(|(c, _)| *c == "APPROVAL_REQUIRED")
        .unwrap();
    assert!(required.1.approval_token().is_none());
}

#[test]
fn an_escalated_call_above_the_ceiling_is_refused_above_ceiling() {
    let _serial = serial();
    let before = count(&deploy::RUN);
    let partial = gate(Mode::PartialAuto);
    assert_eq!(
        partial.run(|| deploy::run("staging".into())).unwrap(),
        "staging"
    );
    let denied = partial
        .run(|| deploy::run("production".into()))
        .unwrap_err();
    assert_eq!(denied.code(), DenialCode::AboveCeiling);
    assert_eq!(denied.code(), "ABOVE_CEILING");
    assert_eq!(
        denied.risk(),
        Risk::HighWrite,
        "judged at the escalated risk"
    );
    assert_eq!(
        denied.to_string(),
        "tool `deploy.run` (declared LOW_WRITE, raised to HIGH_WRITE by its arguments) is above the \
         ceiling of mode PARTIAL_AUTO (LOW_WRITE); at HIGH_WRITE it runs in FULL_AUTO, with an \
         approval"
    );
    let json = serde_json::to_value(&denied).unwrap();
    assert_eq!(json["risk_level"], "HIGH_WRITE");
    assert_eq!(json["code"], "ABOVE_CEILING");
    assert_eq!(
        count(&deploy::RUN),
        before + 1,
        "the refused call did not run"
    );

    // In FULL_AUTO the escalated call needs an approval, like any HIGH_WRITE call.
    let denied = gate(Mode::FullAuto)
        .run(|| deploy::run("production".into()))
        .unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRequired);
    let approving = gate_with_approver(Mode::FullAuto);
    assert_eq!(
        approving.run(|| deploy::run("production".into())).unwrap(),
        "production"
    );
    assert_eq!(count(&deploy::RUN), before + 2);
}

#[test]
fn a_refusal_serializes_as_code_message_tool_risk_level_mode() {
    let _serial = serial();
    for (code, denied) in refusals() {
        let json = serde_json::to_value(&denied).unwrap();
        let object = json.as_object().expect("an object");
        let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["code", "message", "mode", "risk_level", "tool"]);
        let mode = match denied.mode() {
            Some(mode) => serde_json::Value::from(mode.as_str()),
            None => serde_json::Value::Null,
        };
        assert_eq!(
            json,
            serde_json::json!({
                "code": code,
                "message": denied.to_string(),
                "tool": "accounts.delete",
                "risk_level": "HIGH_WRITE",
                "mode": mode,
            })
        );
    }
    let no_gate = serde_json::to_value(users::delete(1).unwrap_err()).unwrap();
    assert_eq!(no_gate["mode"], serde_json::Value::Null);
}

#[test]
fn io_result_tools_get_a_permission_denied_error_wrapping_the_refusal() {
    let _serial = serial();
    let before = count(&files::WRITE);
    let error = files::write(b"data").unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::PermissionDenied);
    let denied = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<Denied>())
        .expect("the io::Error wraps the Denied");
    assert_eq!(denied.code(), DenialCode::NoGate);
    assert_eq!(denied.tool().id, "files.write");

    let error = gate(Mode::Advisory)
        .run(|| files::write(b"data"))
        .unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::PermissionDenied);
    let denied = error.into_inner().unwrap().downcast::<Denied>().unwrap();
    assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
    assert_eq!(count(&files::WRITE), before);

    assert_eq!(
        gate(Mode::PartialAuto)
            .run(|| files::write(b"data"))
            .unwrap(),
        4
    );
    assert_eq!(count(&files::WRITE), before + 1);
}

#[test]
fn anyhow_tools_get_the_refusal_as_their_error() {
    let _serial = serial();
    let before = count(&cache::FLUSH);
    let error = gate(Mode::Shadow).run(cache::flush).unwrap_err();
    let denied = error
        .downcast_ref::<Denied>()
        .expect("an anyhow::Error of Denied");
    assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
    assert_eq!(count(&cache::FLUSH), before);
    gate(Mode::PartialAuto).run(cache::flush).unwrap();
    assert_eq!(count(&cache::FLUSH), before + 1);
}
