//! The gate's own mechanics: building, identity, lowering under concurrency, nesting, `&Gate`
//! parameters, scopes polled on several threads, approvals that race a lowering, and its errors.
//!
//! Every tool here counts its runs in a counter the caller passes, so that tests running in parallel
//! never share a counter.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};

use toolgate::gate::{DenyRuleError, RaiseRefused, Scoped};
use toolgate::policy::Verdict;
use toolgate::{
    AllowAllApprover, Approval, ApprovalRequest, DenialCode, Denied, Gate, GateError, Mode, tool,
};

use crate::common::gates;
use crate::fixtures::support::{YieldOnce, counted_tools, full_auto_denying};

mod probe {
    use super::*;

    counted_tools! {
        /// Reads.
        #[tool(risk = "READ_ONLY", domain = "probe")] fn read(ran: &AtomicUsize) -> ran += 1;
        /// Proposes.
        #[tool(risk = "PROPOSE_ONLY", domain = "probe")] fn propose(ran: &AtomicUsize) -> ran += 1;
        /// Writes a little.
        #[tool(risk = "LOW_WRITE", domain = "probe")] fn write(ran: &AtomicUsize) -> ran += 1;
        /// Writes something that matters.
        #[tool(risk = "HIGH_WRITE", domain = "probe")] fn critical(ran: &AtomicUsize) -> ran += 1;
    }

    /// Writes through the gate it is given.
    #[tool(risk = "LOW_WRITE", domain = "probe")]
    pub fn write_with(gate: &Gate, ran: &AtomicUsize) -> Result<(), Denied> {
        let _ = gate;
        ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Writes something that matters, through the gate it is given.
    #[tool(risk = "HIGH_WRITE", domain = "probe")]
    pub fn critical_with(gate: &Gate, ran: &AtomicUsize) -> Result<(), Denied> {
        let _ = gate;
        ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Writes in steps, suspending between them; records the thread of each step and makes a gated
    /// call after every suspension.
    #[tool(risk = "LOW_WRITE", domain = "probe")]
    pub async fn stepwise(
        steps: usize,
        ran: Arc<AtomicUsize>,
        threads: Arc<Mutex<Vec<std::thread::ThreadId>>>,
    ) -> Result<(), Denied> {
        ran.fetch_add(1, Ordering::SeqCst);
        for _ in 0..steps {
            threads.lock().unwrap().push(std::thread::current().id());
            YieldOnce(false).await;
            write(&ran)?;
        }
        threads.lock().unwrap().push(std::thread::current().id());
        Ok(())
    }

    /// Pays, through the gate it is given; its arguments are serializable, so two-step approvals apply.
    #[tool(risk = "HIGH_WRITE", domain = "probe")]
    pub fn pay(gate: &Gate, cents: u64) -> Result<u64, Denied> {
        let _ = gate;
        Ok(cents)
    }

    /// Pays, through the ambient gates.
    #[tool(risk = "HIGH_WRITE", domain = "probe")]
    pub fn pay_ambient(cents: u64) -> Result<u64, Denied> {
        Ok(cents)
    }

    /// Another read, for deny-list globs.
    #[tool(risk = "READ_ONLY", id = "probe.other.read")]
    pub fn other_read(ran: &AtomicUsize) -> Result<(), Denied> {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Every pair of modes.
fn mode_pairs() -> impl Iterator<Item = (Mode, Mode)> {
    Mode::ALL
        .into_iter()
        .flat_map(|a| Mode::ALL.into_iter().map(move |b| (a, b)))
}

fn gate(mode: Mode) -> Gate {
    Gate::new(mode).unwrap()
}

fn counter() -> AtomicUsize {
    AtomicUsize::new(0)
}

fn runs(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

fn code(result: Result<(), Denied>) -> Option<DenialCode> {
    result.err().map(|d| d.code())
}

// ---------------------------------------------------------------------------------------------------------
// Building and identity
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_builder_starts_in_shadow() {
    let gate = Gate::builder().build().unwrap();
    assert_eq!(gate.mode(), Mode::Shadow);
    let ran = counter();
    assert_eq!(
        code(gate.run(|| probe::write(&ran))),
        Some(DenialCode::ModeNotAllowed)
    );
    assert_eq!(runs(&ran), 0);
    for mode in Mode::ALL {
        assert_eq!(Gate::new(mode).unwrap().mode(), mode);
        assert_eq!(Gate::builder().mode(mode).build().unwrap().mode(), mode);
    }
}

#[test]
fn clones_are_the_same_gate_and_new_gates_are_not() {
    let a = gate(Mode::FullAuto);
    let b = a.clone();
    let c = gate(Mode::FullAuto);
    assert_eq!(a.id(), b.id());
    assert_ne!(a.id(), c.id());
    b.lower(Mode::Advisory).unwrap();
    assert_eq!(a.mode(), Mode::Advisory);
    assert_eq!(c.mode(), Mode::FullAuto);
}

#[test]
fn gate_and_scoped_futures_cross_threads() {
    fn send_sync<T: Send + Sync + Clone + 'static>() {}
    fn send<T: Send>() {}
    send_sync::<Gate>();
    send::<Scoped<std::future::Ready<()>>>();
}

#[test]
fn debug_shows_mode_and_rules() {
    let gate = gates::denying(Mode::PartialAuto, "probe.critical");
    let debug = format!("{gate:?}");
    assert!(debug.contains("PartialAuto"), "{debug}");
    assert!(debug.contains("probe.critical"), "{debug}");
}

#[test]
fn verdict_reports_the_table_in_the_current_mode() {
    let read = toolgate::registry().manifest("probe.read").unwrap();
    let write = toolgate::registry().manifest("probe.write").unwrap();
    let critical = toolgate::registry().manifest("probe.critical").unwrap();

    let approving = gates::approved(Mode::FullAuto, AllowAllApprover);
    assert_eq!(approving.verdict(read), Some(Verdict::Allow));
    assert_eq!(approving.verdict(write), Some(Verdict::Allow));
    assert_eq!(approving.verdict(critical), Some(Verdict::NeedsApproval));

    let without = gate(Mode::FullAuto);
    assert_eq!(
        without.verdict(critical),
        Some(Verdict::Refuse(DenialCode::ApprovalRequired))
    );

    approving.lower(Mode::Advisory).unwrap();
    assert_eq!(approving.verdict(read), Some(Verdict::Allow));
    assert_eq!(
        approving.verdict(write),
        Some(Verdict::Refuse(DenialCode::ModeNotAllowed))
    );

    let denying = gates::denying(Mode::FullAuto, "probe.read");
    assert_eq!(
        denying.verdict(read),
        Some(Verdict::Refuse(DenialCode::DenyListed))
    );
    assert_eq!(denying.verdict(write), Some(Verdict::Allow));
}

// ---------------------------------------------------------------------------------------------------------
// Lowering
// ---------------------------------------------------------------------------------------------------------

#[test]
fn lower_goes_down_or_stays_and_never_up() {
    for (from, to) in mode_pairs() {
        let gate = gate(from);
        let result = gate.lower(to);
        if to <= from {
            assert_eq!(result, Ok(()), "{from} -> {to}");
            assert_eq!(gate.mode(), to);
        } else {
            assert_eq!(
                result,
                Err(RaiseRefused {
                    current: from,
                    requested: to
                })
            );
            assert_eq!(gate.mode(), from, "a refused raise changes nothing");
        }
    }
    let error = gate(Mode::Shadow).lower(Mode::FullAuto).unwrap_err();
    assert_eq!(
        error.to_string(),
        "a gate's mode is never raised: it is SHADOW and FULL_AUTO was asked for"
    );
}

#[test]
fn no_call_started_after_lower_returns_runs_on_any_thread() {
    let gate = gate(Mode::PartialAuto);
    let lowered = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let gate = gate.clone();
            let lowered = Arc::clone(&lowered);
            std::thread::spawn(move || {
                gate.run(|| {
                    let ran = counter();
                    let (mut before, mut after) = (0, 0);
                    loop {
                        let was_lowered = lowered.load(Ordering::SeqCst);
                        let result = probe::write(&ran);
                        if was_lowered {
                            assert_eq!(code(result), Some(DenialCode::ModeNotAllowed));
                            after += 1;
                            if after == 200 {
                                return (before, runs(&ran));
                            }
                        } else if result.is_ok() {
                            before += 1;
                        }
                    }
                })
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(20));
    gate.lower(Mode::Advisory).unwrap();
    lowered.store(true, Ordering::SeqCst);
    for worker in workers {
        let (allowed, ran) = worker.join().unwrap();
        assert_eq!(ran, allowed, "only the calls that returned Ok ran");
    }
}

#[test]
fn a_lowering_while_the_approver_thinks_refuses_the_call() {
    let slot: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let asked = Arc::new(AtomicUsize::new(0));
    let (approver_slot, approver_asked) = (Arc::clone(&slot), Arc::clone(&asked));
    let gate = gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
        approver_asked.fetch_add(1, Ordering::SeqCst);
        approver_slot
            .get()
            .unwrap()
            .lower(Mode::PartialAuto)
            .unwrap();
        Approval::Approve
    });
    slot.set(gate.clone()).unwrap();
    let ran = counter();
    let denied = gate.run(|| probe::critical(&ran)).unwrap_err();
    assert_eq!(runs(&asked), 1);
    assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
    assert_eq!(denied.mode(), Some(Mode::PartialAuto));
    assert_eq!(
        runs(&ran),
        0,
        "approved, but lowered meanwhile: the body must not run"
    );
}

// ---------------------------------------------------------------------------------------------------------
// Approvers
// ---------------------------------------------------------------------------------------------------------

#[test]
fn the_approver_is_asked_once_per_call_with_the_call_facts() {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&requests);
    let gate = gates::approved(Mode::FullAuto, move |r: &ApprovalRequest<'_>| {
        log.lock()
            .unwrap()
            .push((r.tool.id, r.mode, r.risk, r.arguments_digest.is_some()));
        Approval::Approve
    });
    let ran = counter();
    gate.run(|| {
        probe::read(&ran)?;
        probe::write(&ran)?;
        probe::critical(&ran)?;
        probe::critical(&ran)
    })
    .unwrap();
    assert_eq!(runs(&ran), 4);
    let requests = requests.lock().unwrap();
    assert_eq!(requests.len(), 2, "{requests:?}");
    for (id, mode, risk, _) in requests.iter() {
        assert_eq!(*id, "probe.critical");
        assert_eq!(*mode, Mode::FullAuto);
        assert_eq!(*risk, toolgate::Risk::HighWrite);
    }
}

#[test]
fn an_approver_may_call_tools_and_enter_gates() {
    let other = gate(Mode::Shadow);
    let inside = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&inside);
    let gate = gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
        // The ambient gate of the call is still entered, and entering another one works.
        probe::read(&seen).unwrap();
        other.run(|| probe::read(&seen)).unwrap();
        assert_eq!(
            code(other.run(|| probe::write(&seen))),
            Some(DenialCode::ModeNotAllowed)
        );
        Approval::Approve
    });
    let ran = counter();
    gate.run(|| probe::critical(&ran)).unwrap();
    assert_eq!(runs(&ran), 1);
    assert_eq!(runs(&inside), 2);
}

// ---------------------------------------------------------------------------------------------------------
// run and nesting
// ---------------------------------------------------------------------------------------------------------

#[test]
fn run_returns_the_closure_value_and_leaves_on_unwind() {
    let gate = gate(Mode::FullAuto);
    assert_eq!(gate.run(|| 42), 42);
    let ran = counter();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        gate.run(|| {
            probe::read(&ran).unwrap();
            panic!("tool user panicked");
        })
    }));
    assert!(unwound.is_err());
    assert_eq!(runs(&ran), 1);
    assert_eq!(code(probe::read(&ran)), Some(DenialCode::NoGate));
    assert_eq!(runs(&ran), 1);
}

#[test]
fn nested_gates_allow_only_what_both_allow() {
    for (outer_mode, inner_mode) in mode_pairs() {
        let outer = gate(outer_mode);
        let inner = gate(inner_mode);
        let lowest = gate(outer_mode.min(inner_mode));
        for tool in [probe::read, probe::propose, probe::write] {
            let (nested, single) = (counter(), counter());
            let got = outer.run(|| inner.run(|| code(tool(&nested))));
            let expected = lowest.run(|| code(tool(&single)));
            assert_eq!(got, expected, "outer {outer_mode}, inner {inner_mode}");
            assert_eq!(runs(&nested), runs(&single));
        }
    }
}

#[test]
fn nested_gates_each_apply_their_deny_list_and_approver() {
    let ran = counter();
    let open = gates::approved(Mode::FullAuto, AllowAllApprover);
    let denying = crate::fixtures::support::denying_approving("probe.write");
    assert_eq!(
        code(open.run(|| denying.run(|| probe::write(&ran)))),
        Some(DenialCode::DenyListed)
    );
    assert_eq!(
        code(denying.run(|| open.run(|| probe::write(&ran)))),
        Some(DenialCode::DenyListed)
    );
    // An inner gate without an approver is not helped by the outer one's.
    let no_approver = gate(Mode::FullAuto);
    assert_eq!(
        code(open.run(|| no_approver.run(|| probe::critical(&ran)))),
        Some(DenialCode::ApprovalRequired)
    );
    // An inner rejecting approver is not overruled by the outer approving one.
    let rejecting = gates::approved(Mode::FullAuto, |_: &ApprovalRequest<'_>| {
        Approval::Reject("inner says no".into())
    });
    let denied = open
        .run(|| rejecting.run(|| probe::critical(&ran)))
        .unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRejected);
    assert_eq!(denied.detail(), Some("inner says no"));
    assert_eq!(runs(&ran), 0);

    // Two approving gates: both are asked, then the call runs.
    let asked = Arc::new(AtomicUsize::new(0));
    let approving = |asked: Arc<AtomicUsize>| {
        gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
            asked.fetch_add(1, Ordering::SeqCst);
            Approval::Approve
        })
    };
    let (a, b) = (approving(Arc::clone(&asked)), approving(Arc::clone(&asked)));
    a.run(|| b.run(|| probe::critical(&ran))).unwrap();
    assert_eq!(runs(&asked), 2);
    assert_eq!(runs(&ran), 1);
}

#[test]
fn leaving_an_inner_gate_restores_the_outer_one() {
    let outer = gate(Mode::PartialAuto);
    let inner = gate(Mode::Shadow);
    let ran = counter();
    outer.run(|| {
        assert_eq!(
            code(inner.run(|| probe::write(&ran))),
            Some(DenialCode::ModeNotAllowed)
        );
        probe::write(&ran).unwrap();
    });
    assert_eq!(runs(&ran), 1);
}

// ---------------------------------------------------------------------------------------------------------
// `&Gate` parameters
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_gate_parameter_is_enough_on_its_own() {
    let ran = counter();
    probe::write_with(&gate(Mode::PartialAuto), &ran).unwrap();
    assert_eq!(
        code(probe::write_with(&gate(Mode::Shadow), &ran)),
        Some(DenialCode::ModeNotAllowed)
    );
    let approving = gates::approved(Mode::FullAuto, AllowAllApprover);
    probe::critical_with(&approving, &ran).unwrap();
    assert_eq!(
        code(probe::critical_with(&gate(Mode::FullAuto), &ran)),
        Some(DenialCode::ApprovalRequired)
    );
    assert_eq!(runs(&ran), 2);
}

#[test]
fn a_gate_parameter_and_the_ambient_gates_all_apply() {
    for (ambient_mode, param_mode) in mode_pairs() {
        let (ambient, param) = (gate(ambient_mode), gate(param_mode));
        let ran = counter();
        let result = ambient.run(|| probe::write_with(&param, &ran));
        let allowed = ambient_mode.min(param_mode) >= Mode::PartialAuto;
        assert_eq!(
            result.is_ok(),
            allowed,
            "ambient {ambient_mode}, param {param_mode}"
        );
        assert_eq!(runs(&ran), usize::from(allowed));
    }
}

// ---------------------------------------------------------------------------------------------------------
// Scopes
// ---------------------------------------------------------------------------------------------------------

fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn a_scoped_future_keeps_its_gate_when_it_moves_to_other_threads() {
    let gate = gate(Mode::PartialAuto);
    let ran = Arc::new(AtomicUsize::new(0));
    let threads = Arc::new(Mutex::new(Vec::new()));
    let mut future =
        Box::pin(gate.scope(probe::stepwise(3, Arc::clone(&ran), Arc::clone(&threads))));
    assert_eq!(future.gate().id(), gate.id());
    // Each poll happens on a new thread, none of which has entered the gate.
    let mut polls = 0;
    let result = loop {
        polls += 1;
        let (back, poll) = std::thread::spawn(move || {
            let poll = poll_once(&mut future);
            (future, poll)
        })
        .join()
        .unwrap();
        future = back;
        if let Poll::Ready(result) = poll {
            break result;
        }
        assert!(polls < 100);
    };
    result.unwrap();
    assert_eq!(polls, 4);
    assert_eq!(runs(&ran), 1 + 3, "the tool and its three gated writes ran");
    let threads = threads.lock().unwrap();
    assert_eq!(threads.len(), 4);
    let distinct: std::collections::HashSet<_> = threads.iter().collect();
    assert_eq!(distinct.len(), 4, "each step ran on its own thread");
}

#[test]
fn a_scope_does_not_leak_into_the_polling_thread() {
    let gate = gate(Mode::PartialAuto);
    let ran = Arc::new(AtomicUsize::new(0));
    let threads = Arc::new(Mutex::new(Vec::new()));
    let mut future = Box::pin(gate.scope(probe::stepwise(2, Arc::clone(&ran), threads)));
    assert!(poll_once(&mut future).is_pending());
    // Between polls, this thread has no gate.
    let outside = counter();
    assert_eq!(code(probe::read(&outside)), Some(DenialCode::NoGate));
    assert!(poll_once(&mut future).is_pending());
    assert!(poll_once(&mut future).is_ready());
    assert_eq!(runs(&ran), 3);
}

#[test]
fn a_future_losing_its_scope_midway_is_refused_at_its_next_gated_call() {
    let gate = gate(Mode::PartialAuto);
    let ran = Arc::new(AtomicUsize::new(0));
    let threads = Arc::new(Mutex::new(Vec::new()));
    // Polled once inside `run`, then outside any gate.
    let mut future = Box::pin(probe::stepwise(2, Arc::clone(&ran), threads));
    assert!(gate.run(|| poll_once(&mut future)).is_pending());
    assert_eq!(runs(&ran), 1);
    match poll_once(&mut future) {
        Poll::Ready(result) => assert_eq!(code(result), Some(DenialCode::NoGate)),
        Poll::Pending => panic!("the gated write after the await must refuse the call"),
    }
    assert_eq!(runs(&ran), 1);
}

#[test]
fn a_scope_inside_run_and_a_run_inside_a_scope_intersect() {
    let partial = gate(Mode::PartialAuto);
    let shadow = gate(Mode::Shadow);
    let ran = Arc::new(AtomicUsize::new(0));
    let threads = Arc::new(Mutex::new(Vec::new()));
    let mut future = Box::pin(partial.scope(probe::stepwise(1, Arc::clone(&ran), threads)));
    let poll = shadow.run(|| poll_once(&mut future));
    match poll {
        Poll::Ready(result) => assert_eq!(code(result), Some(DenialCode::ModeNotAllowed)),
        Poll::Pending => panic!("refused at the first poll"),
    }
    assert_eq!(runs(&ran), 0);

    let mut future = Box::pin(partial.scope(async {
        let inside = counter();
        let refused = shadow.run(|| code(probe::write(&inside)));
        let allowed = code(probe::write(&inside));
        (refused, allowed, runs(&inside))
    }));
    match poll_once(&mut future) {
        Poll::Ready(got) => assert_eq!(got, (Some(DenialCode::ModeNotAllowed), None, 1)),
        Poll::Pending => panic!("the block does not suspend"),
    }
}

#[test]
fn scopes_on_a_tokio_runtime_decide_each_task_by_its_own_gate() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let partial = gate(Mode::PartialAuto);
    let advisory = gate(Mode::Advisory);
    let (allowed, refused) = runtime.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..8 {
            let gate = if i % 2 == 0 { &partial } else { &advisory };
            let ran = Arc::new(AtomicUsize::new(0));
            let future = probe::stepwise(4, Arc::clone(&ran), Arc::default());
            tasks.push((i, ran, tokio::spawn(gate.scope(future))));
        }
        let (mut allowed, mut refused) = (0, 0);
        for (i, ran, task) in tasks {
            let result = task.await.unwrap();
            if i % 2 == 0 {
                result.unwrap();
                assert_eq!(runs(&ran), 5);
                allowed += 1;
            } else {
                assert_eq!(code(result), Some(DenialCode::ModeNotAllowed));
                assert_eq!(runs(&ran), 0);
                refused += 1;
            }
        }
        (allowed, refused)
    });
    assert_eq!((allowed, refused), (4, 4));
}

// ---------------------------------------------------------------------------------------------------------
// Deny rules and errors
// ---------------------------------------------------------------------------------------------------------

#[test]
fn glob_rules_match_whole_ids() {
    let cases: [(&str, &[&str]); 6] = [
        ("probe.read", &["probe.read"]),
        (
            "probe.*",
            &["probe.read", "probe.write", "probe.other.read"],
        ),
        ("*.read", &["probe.read", "probe.other.read"]),
        ("probe.?ead", &["probe.read"]),
        ("probe.*.read", &["probe.other.read"]),
        ("*", &["probe.read", "probe.write", "probe.other.read"]),
    ];
    for (rule, denied) in cases {
        let gate = gates::denying(Mode::PartialAuto, rule);
        let check = |id: &str, tool: fn(&AtomicUsize) -> Result<(), Denied>| {
            let ran = counter();
            let result = gate.run(|| tool(&ran));
            let expect_denied = denied.contains(&id);
            assert_eq!(
                code(result) == Some(DenialCode::DenyListed),
                expect_denied,
                "rule {rule}, tool {id}"
            );
            assert_eq!(runs(&ran), usize::from(!expect_denied));
        };
        check("probe.read", probe::read);
        check("probe.write", probe::write);
        check("probe.other.read", probe::other_read);
    }
}

#[test]
fn the_first_matching_rule_is_the_one_reported() {
    let gate = full_auto_denying(&["probe.write", "probe.*"]).unwrap();
    let ran = counter();
    let write = gate.run(|| probe::write(&ran)).unwrap_err();
    let read = gate.run(|| probe::read(&ran)).unwrap_err();
    assert_eq!(write.detail(), Some("probe.write"));
    assert_eq!(read.detail(), Some("probe.*"));
    assert_eq!(runs(&ran), 0);
}

#[test]
fn gate_errors_explain_themselves() {
    let error = Gate::builder()
        .deny("Bad rule")
        .deny("probe.nothing")
        .build()
        .unwrap_err();
    let GateError::DenyRules(errors) = &error else {
        panic!("{error:?}");
    };
    assert!(matches!(&errors[0], DenyRuleError::Invalid { pattern, .. } if pattern == "Bad rule"));
    assert_eq!(
        errors[1],
        DenyRuleError::MatchesNothing {
            pattern: "probe.nothing".into()
        }
    );
    let text = error.to_string();
    assert!(text.starts_with("cannot build the gate: "), "{text}");
    assert!(text.contains("deny rule `Bad rule` is not valid"), "{text}");
    assert!(
        text.contains("; deny rule `probe.nothing` matches no registered tool"),
        "{text}"
    );
    let source = std::error::Error::source(&error).expect("the first rule error");
    assert_eq!(source.to_string(), errors[0].to_string());
}

#[test]
fn check_registry_passes_without_duplicates() {
    toolgate::check_registry().unwrap();
}

// ---------------------------------------------------------------------------------------------------------
// A gate present twice for one call decides it once
// ---------------------------------------------------------------------------------------------------------

/// A call decided by the same gate twice (passed as `&Gate` and also entered, or entered twice) asks that
/// gate's approver once: one call needs one approval per distinct gate.
#[test]
fn a_gate_present_twice_asks_its_approver_once() {
    let asked = Arc::new(AtomicUsize::new(0));
    let tally = Arc::clone(&asked);
    let gate = gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
        tally.fetch_add(1, Ordering::SeqCst);
        Approval::Approve
    });
    let ran = counter();

    gate.run(|| probe::critical_with(&gate, &ran)).unwrap();
    let as_parameter_and_ambient = asked.swap(0, Ordering::SeqCst);
    gate.run(|| gate.clone().run(|| probe::critical(&ran)))
        .unwrap();
    let entered_twice = asked.swap(0, Ordering::SeqCst);

    assert_eq!(runs(&ran), 2);
    assert_eq!(
        (as_parameter_and_ambient, entered_twice),
        (1, 1),
        "one call, one gate: its approver should be asked once"
    );
}

/// A two-step approval runs its call once even when the gate is present twice: a second copy of the gate
/// must not find the approval used and refuse the call with `APPROVAL_REUSED`.
#[test]
fn a_two_step_approval_runs_when_the_gate_is_present_twice() {
    let gate = gates::two_step(Mode::FullAuto);

    let asked = gate.run(|| probe::pay(&gate, 500)).unwrap_err();
    assert_eq!(asked.code(), DenialCode::ApprovalPending);
    gate.approve(asked.approval_token().expect("a token to approve"))
        .unwrap();
    let as_parameter_and_ambient = gate.run(|| probe::pay(&gate, 500)).map_err(|d| d.code());

    let asked = gate
        .run(|| gate.run(|| probe::pay_ambient(700)))
        .unwrap_err();
    gate.approve(asked.approval_token().expect("a token to approve"))
        .unwrap();
    let entered_twice = gate
        .run(|| gate.run(|| probe::pay_ambient(700)))
        .map_err(|d| d.code());

    assert_eq!(
        (as_parameter_and_ambient, entered_twice),
        (Ok(500), Ok(700)),
        "an approved call should run once"
    );
}
