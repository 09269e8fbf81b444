//! Approvals beyond yes and no: async approvers, session grants, rejections the agent reads, a rejection
//! that stops the gate, a store that fails, and a time to live checked when the gate is built.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use toolgate::approval::store::{
    Answer, ApprovalCall, ApprovalStore, ApproveError, Binding, Consumed, StoreError, StoreFuture,
};
use toolgate::approval::{ApprovalFuture, AsyncApprover, SessionGrant};
use toolgate::audit::{AuditRecord, Decision, MemorySink, Stage};
use toolgate::gate::GateError;
use toolgate::{Approval, ApprovalRequest, DenialCode, Denied, Gate, Mode, tool};

use crate::common::gates;
use crate::common::scripted;
use crate::common::serial;
use crate::fixtures::support::approve_for_session;
use crate::fixtures::support::assert_record_says;
use crate::fixtures::support::grant_for;
#[cfg(feature = "mcp")]
use crate::g07_approvals::checks::refused_over_mcp;
use crate::g07_approvals::checks::{assert_denied, built, entered, refused_by_name};

static WIRED: AtomicUsize = AtomicUsize::new(0);
static WIRED_ASYNC: AtomicUsize = AtomicUsize::new(0);
static SYNC_RUNS: AtomicUsize = AtomicUsize::new(0);
static READS: AtomicUsize = AtomicUsize::new(0);
static PURGES: AtomicUsize = AtomicUsize::new(0);

/// Wire money (async).
#[tool(risk = "HIGH_WRITE", side_effects, modes = [FULL_AUTO], domain = "appr", callable)]
async fn wire(to: String, cents: u64) -> Result<u64, Denied> {
    let _ = to;
    WIRED_ASYNC.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

/// Wire money (sync).
#[tool(risk = "HIGH_WRITE", side_effects, modes = [FULL_AUTO], domain = "appr", callable)]
fn wire_sync(to: String, cents: u64) -> Result<u64, Denied> {
    let _ = to;
    SYNC_RUNS.fetch_add(1, Ordering::SeqCst);
    WIRED.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

/// Purge a cache (sync, another tool).
#[tool(risk = "HIGH_WRITE", side_effects, modes = [FULL_AUTO], domain = "appr", callable)]
fn purge(name: String) -> Result<(), Denied> {
    let _ = name;
    PURGES.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Read a balance.
#[tool(risk = "READ_ONLY", modes = [FULL_AUTO], domain = "appr")]
async fn balance() -> Result<u64, Denied> {
    READS.fetch_add(1, Ordering::SeqCst);
    Ok(7)
}

fn by_sudo(command: &str) -> toolgate::Risk {
    if command.starts_with("sudo ") {
        toolgate::Risk::HighWrite
    } else {
        toolgate::Risk::LowWrite
    }
}

/// Run a shell command, raised by `sudo`.
#[tool(risk = "LOW_WRITE", side_effects, domain = "appr", escalate = by_sudo)]
fn run_shell(command: String) -> Result<(), Denied> {
    let _ = command;
    Ok(())
}

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// An async approver that answers after `delay`, counting how many it is answering at once.
struct Slow {
    delay: Duration,
    answer: Approval,
    asking: AtomicUsize,
    most_at_once: AtomicUsize,
    asked: AtomicUsize,
}

impl Slow {
    fn new(delay: Duration, answer: Approval) -> Arc<Slow> {
        Arc::new(Slow {
            delay,
            answer,
            asking: AtomicUsize::new(0),
            most_at_once: AtomicUsize::new(0),
            asked: AtomicUsize::new(0),
        })
    }
}

struct Shared(Arc<Slow>);

/// A FULL_AUTO gate whose async approver is a new `Slow`, and that approver.
fn slow_gate(delay: Duration, answer: Approval) -> (Arc<Slow>, Gate) {
    let slow = Slow::new(delay, answer);
    let gate = built(Mode::FullAuto, |b| b.async_approver(Shared(slow.clone())));
    (slow, gate)
}

impl AsyncApprover for Shared {
    fn approve<'a>(&'a self, _request: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        Box::pin(async move {
            let slow = &self.0;
            slow.asked.fetch_add(1, Ordering::SeqCst);
            let now = slow.asking.fetch_add(1, Ordering::SeqCst) + 1;
            slow.most_at_once.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(slow.delay).await;
            slow.asking.fetch_sub(1, Ordering::SeqCst);
            slow.answer.clone()
        })
    }

    fn name(&self) -> &str {
        "slow-console"
    }
}

// An approver that takes 2 s, 100 calls waiting for it on a runtime of 2 workers: if waiting blocked a
// worker, at most 2 would be asked at once and nothing else would run meanwhile.
#[test]
fn an_async_approver_blocks_no_executor_thread() {
    let _serial = serial();
    let (slow, gate) = slow_gate(Duration::from_secs(2), Approval::Approve);
    let before = WIRED_ASYNC.load(Ordering::SeqCst);
    let reads_before = READS.load(Ordering::SeqCst);
    let rt = runtime(2);
    let (reads_while_waiting, results) = rt.block_on(async {
        let calls: Vec<_> = (0..100)
            .map(|i| tokio::spawn(gate.scope(wire(format!("acct-{i}"), i))))
            .collect();
        // Until every call has been asked about, and while they wait, other calls keep running.
        while slow.asked.load(Ordering::SeqCst) < 100 {
            tokio::task::yield_now().await;
        }
        let mut reads = 0;
        while slow.asking.load(Ordering::SeqCst) > 0 {
            gate.scope(balance()).await.unwrap();
            reads += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut results = Vec::new();
        for call in calls {
            results.push(call.await.unwrap());
        }
        (reads, results)
    });
    assert_eq!(
        slow.most_at_once.load(Ordering::SeqCst),
        100,
        "all 100 waited at once"
    );
    assert!(
        reads_while_waiting >= 10,
        "other calls ran meanwhile: {reads_while_waiting}"
    );
    assert_eq!(
        READS.load(Ordering::SeqCst) - reads_before,
        reads_while_waiting
    );
    for (i, result) in results.into_iter().enumerate() {
        assert_eq!(result.unwrap(), i as u64);
    }
    assert_eq!(WIRED_ASYNC.load(Ordering::SeqCst) - before, 100);
}

#[test]
fn a_sync_tool_under_an_async_approver_is_refused_at_once_and_never_runs() {
    let _serial = serial();
    let (slow, gate) = slow_gate(Duration::from_secs(3600), Approval::Approve);
    let before = SYNC_RUNS.load(Ordering::SeqCst);
    let denied = gate.run(|| wire_sync("a".into(), 1)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRequired);
    assert!(denied.message().contains("async"), "{}", denied.message());
    assert!(
        denied.message().contains("make the tool `async`"),
        "{}",
        denied.message()
    );
    assert_eq!(slow.asked.load(Ordering::SeqCst), 0, "never asked");
    assert_eq!(SYNC_RUNS.load(Ordering::SeqCst), before);
    // Inside an async runtime too: refused, not blocked.
    let rt = runtime(1);
    let denied = rt
        .block_on(async { gate.run(|| wire_sync("a".into(), 1)) })
        .unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRequired);
    assert_eq!(SYNC_RUNS.load(Ordering::SeqCst), before);
}

struct Panics;

impl AsyncApprover for Panics {
    fn approve<'a>(&'a self, _request: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        Box::pin(async { panic!("approver bug") })
    }
}

#[test]
fn an_async_approver_that_panics_has_refused() {
    let _serial = serial();
    let gate = built(Mode::FullAuto, |b| b.async_approver(Panics));
    let before = WIRED_ASYNC.load(Ordering::SeqCst);
    let denied = runtime(1)
        .block_on(gate.scope(wire("a".into(), 1)))
        .unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRejected);
    assert_eq!(denied.detail(), Some("the approver panicked"));
    assert_eq!(WIRED_ASYNC.load(Ordering::SeqCst), before);
}

// The async approver sees what a sync one sees, and the mode lowered while it thinks stops the call.
#[test]
fn an_async_approver_sees_the_arguments_and_a_lowered_mode_wins() {
    let _serial = serial();
    struct Lowers(Mutex<Option<Gate>>, Mutex<Vec<String>>);
    struct LowersRef(Arc<Lowers>);
    impl AsyncApprover for LowersRef {
        fn approve<'a>(&'a self, request: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
            Box::pin(async move {
                self.0
                    .1
                    .lock()
                    .unwrap()
                    .push(request.arguments.unwrap_or_default().to_owned());
                tokio::task::yield_now().await;
                if let Some(gate) = self.0.0.lock().unwrap().take() {
                    gate.lower(Mode::Shadow).unwrap();
                }
                Approval::Approve
            })
        }
    }
    let approver = Arc::new(Lowers(Mutex::new(None), Mutex::new(Vec::new())));
    let gate = built(Mode::FullAuto, |b| {
        b.async_approver(LowersRef(approver.clone()))
    });
    *approver.0.lock().unwrap() = Some(gate.clone());
    let before = WIRED_ASYNC.load(Ordering::SeqCst);
    let denied = runtime(1)
        .block_on(gate.scope(wire("acct-9".into(), 5)))
        .unwrap_err();
    assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
    assert_eq!(WIRED_ASYNC.load(Ordering::SeqCst), before);
    assert_eq!(
        approver.1.lock().unwrap().as_slice(),
        [r#"{"cents":5,"to":"acct-9"}"#]
    );
}

#[test]
fn an_async_approver_decides_calls_by_name() {
    let _serial = serial();
    let (slow, gate) = slow_gate(
        Duration::from_millis(10),
        Approval::Reject("over budget".into()),
    );
    let before = WIRED_ASYNC.load(Ordering::SeqCst);
    let error = runtime(1)
        .block_on(toolgate::registry().call(&gate, "appr.wire", json!({"to": "x", "cents": 3})))
        .unwrap_err();
    assert_eq!(error.code(), "APPROVAL_REJECTED");
    assert!(error.to_string().contains("over budget"), "{error}");
    assert_eq!(slow.asked.load(Ordering::SeqCst), 1);
    assert_eq!(WIRED_ASYNC.load(Ordering::SeqCst), before);
}

fn records(sink: &MemorySink, stage: Stage) -> Vec<AuditRecord> {
    sink.records()
        .into_iter()
        .filter(|r| r.stage == stage)
        .collect()
}

#[test]
fn a_session_grant_lets_the_tool_run_without_asking_until_revoked() {
    let _serial = serial();
    let sink = MemorySink::new();
    let (asked, approver) = scripted(vec![
        grant_for(Duration::from_secs(600)),
        Approval::Approve,
        Approval::Approve,
    ]);
    let gate = gates::approved_audited(Mode::FullAuto, approver, sink.clone());
    let before = WIRED.load(Ordering::SeqCst);
    gate.run(|| wire_sync("a".into(), 1)).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    // The same tool, other arguments: granted, not asked.
    gate.run(|| wire_sync("b".into(), 2)).unwrap();
    gate.clone().run(|| wire_sync("c".into(), 3)).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 1, "a clone shares the grant");
    assert_eq!(WIRED.load(Ordering::SeqCst) - before, 3);
    let grants = gate.grants();
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].tool, "appr.wire_sync");
    assert!(!grants[0].exact_arguments);
    // Another tool asks.
    gate.run(|| purge("x".into())).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // Revoked: asked again.
    assert_eq!(gate.revoke_grants(Some("appr.wire_sync"), "ops"), 1);
    gate.run(|| wire_sync("d".into(), 4)).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 3);
    // What the log says: who granted, the grant, the granted calls, the revocation.
    let granted = records(&sink, Stage::SessionGranted);
    assert_eq!(granted.len(), 1);
    assert_eq!(granted[0].by.as_deref(), Some("approver"));
    let decisions: Vec<_> = records(&sink, Stage::Enter)
        .iter()
        .filter(|r| r.tool == "appr.wire_sync")
        .map(|r| r.decision)
        .collect();
    assert_eq!(
        decisions,
        [
            Some(Decision::Approved),
            Some(Decision::Granted),
            Some(Decision::Granted),
            Some(Decision::Approved),
        ]
    );
    assert_eq!(records(&sink, Stage::GrantRevoked).len(), 1);
}

#[test]
fn a_grant_of_exact_arguments_covers_only_them_and_ends_with_its_time_or_its_gate() {
    let _serial = serial();
    let grant = SessionGrant::tool(Duration::from_millis(300)).exact_arguments();
    let (asked, approver) = scripted(vec![
        Approval::ApproveForSession(grant),
        Approval::Approve,
        Approval::Approve,
    ]);
    let gate = gates::approved(Mode::FullAuto, approver);
    gate.run(|| wire_sync("a".into(), 1)).unwrap();
    gate.run(|| wire_sync("a".into(), 1)).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the same call is granted");
    gate.run(|| wire_sync("a".into(), 2)).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 2, "other arguments ask");
    std::thread::sleep(Duration::from_millis(400));
    gate.run(|| wire_sync("a".into(), 1)).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 3, "an expired grant asks");
    assert!(gate.grants().is_empty());

    // A grant lives in its gate: another gate with the same approver asks.
    let (asked, approver) = scripted(vec![grant_for(Duration::from_secs(600)), Approval::Approve]);
    let approver = Arc::new(approver);
    let build = |approver: Arc<dyn Fn(&ApprovalRequest<'_>) -> Approval + Send + Sync>| {
        gates::approved(Mode::FullAuto, move |r: &ApprovalRequest<'_>| approver(r))
    };
    let first = build(approver.clone());
    first.run(|| wire_sync("a".into(), 1)).unwrap();
    drop(first);
    let second = build(approver);
    second.run(|| wire_sync("a".into(), 1)).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 2);
}

#[test]
fn a_grant_covers_no_higher_risk_than_it_was_given_at() {
    let _serial = serial();
    let (asked, approver) = scripted(vec![
        grant_for(Duration::from_secs(600)),
        Approval::Reject("no".into()),
    ]);
    let gate = gates::approved(Mode::FullAuto, approver);
    gate.run(|| purge("x".into())).unwrap();
    gate.run(|| purge("y".into())).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(gate.revoke_grants(None, "ops"), 1);
    assert_denied(gate.run(|| purge("z".into())), DenialCode::ApprovalRejected);
}

#[test]
fn a_rejection_reaches_the_agent_on_every_path() {
    let _serial = serial();
    let reason = "use the staging account first";
    let gate = gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
        Approval::Reject(reason.into())
    });
    let direct = gate.run(|| wire_sync("a".into(), 1)).unwrap_err();
    assert_eq!(direct.code(), DenialCode::ApprovalRejected);
    assert!(direct.message().contains(reason), "{}", direct.message());
    let rt = runtime(1);
    let args = json!({"to": "a", "cents": 1});
    let by_name = refused_by_name(&rt, &gate, "appr.wire_sync", args.clone());
    assert!(by_name.to_string().contains(reason), "{by_name}");
    #[cfg(feature = "mcp")]
    {
        let result = refused_over_mcp(&rt, &gate, "appr.wire_sync", args);
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("APPROVAL_REJECTED: "), "{text}");
        assert!(text.contains(reason), "{text}");
    }
}

#[test]
fn reject_and_stop_lowers_the_gate_to_shadow_and_says_who() {
    let _serial = serial();
    struct Named;
    impl toolgate::Approver for Named {
        fn approve(&self, _request: &ApprovalRequest<'_>) -> Approval {
            Approval::Stop("the agent is looping".into())
        }
        fn name(&self) -> &str {
            "alice"
        }
    }
    let sink = MemorySink::new();
    let gate = gates::approved_audited(Mode::FullAuto, Named, sink.clone());
    let clone = gate.clone();
    let denied = gate.run(|| wire_sync("a".into(), 1)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRejected);
    assert!(denied.message().contains("the agent is looping"));
    assert!(
        denied.message().contains("stopped (SHADOW)"),
        "{}",
        denied.message()
    );
    assert_eq!(clone.mode(), Mode::Shadow, "every clone is stopped");
    let lowered = records(&sink, Stage::ModeLowered);
    assert_eq!(lowered.len(), 1);
    assert_eq!(
        lowered[0].by.as_deref(),
        Some("alice, rejecting `appr.wire_sync`: the agent is looping")
    );
    let refused = records(&sink, Stage::Refused);
    assert_eq!(refused.last().unwrap().by.as_deref(), Some("alice"));
    // Nothing that writes runs any more.
    assert_denied(gate.run(|| purge("x".into())), DenialCode::ModeNotAllowed);
}

#[test]
fn a_time_to_live_that_cannot_work_is_refused_when_the_gate_is_built() {
    for ttl in [Duration::MAX, Duration::ZERO, Duration::from_secs(86_401)] {
        let error = Gate::builder()
            .mode(Mode::FullAuto)
            .approval_ttl(ttl)
            .build()
            .unwrap_err();
        assert_eq!(error, GateError::ApprovalTtl(ttl));
        assert!(error.to_string().contains("time to live"), "{error}");
    }
    let day = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_ttl(Duration::from_secs(86_400))
        .build();
    assert!(day.is_ok());
}

/// A store that fails each way a store can fail.
struct Failing(StoreError, AtomicUsize);

impl ApprovalStore for Failing {
    fn consume<'a>(
        &'a self,
        _call: &'a ApprovalCall,
    ) -> StoreFuture<'a, Result<Consumed, StoreError>> {
        self.1.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(Err(self.0.clone())))
    }

    fn answer<'a>(
        &'a self,
        _token: &'a str,
        _answer: Answer,
    ) -> StoreFuture<'a, Result<Binding, ApproveError>> {
        Box::pin(std::future::ready(Err(ApproveError::Store(self.0.clone()))))
    }
}

#[test]
fn a_failing_store_refuses_with_its_own_code_and_the_log_says_why() {
    let _serial = serial();
    for error in [
        StoreError::Unavailable("connection refused".into()),
        StoreError::Timeout,
        StoreError::Unexpected("a row of another shape".into()),
    ] {
        let sink = MemorySink::new();
        let store = Arc::new(Failing(error.clone(), AtomicUsize::new(0)));
        let gate = built(Mode::FullAuto, |b| {
            b.approval_store_shared(store.clone()).audit(sink.clone())
        });
        let (sync_before, async_before) = (
            SYNC_RUNS.load(Ordering::SeqCst),
            WIRED_ASYNC.load(Ordering::SeqCst),
        );
        let sync = gate.run(|| wire_sync("a".into(), 1)).unwrap_err();
        let in_async = runtime(1)
            .block_on(gate.scope(wire("a".into(), 1)))
            .unwrap_err();
        for denied in [&sync, &in_async] {
            assert_eq!(denied.code(), DenialCode::ApprovalStoreUnavailable);
            assert_eq!(denied.code(), "APPROVAL_STORE_UNAVAILABLE");
            assert!(
                denied.message().contains(&error.to_string()),
                "{}",
                denied.message()
            );
        }
        assert_eq!(store.1.load(Ordering::SeqCst), 2);
        assert_eq!(SYNC_RUNS.load(Ordering::SeqCst), sync_before);
        assert_eq!(WIRED_ASYNC.load(Ordering::SeqCst), async_before);
        let refused = records(&sink, Stage::Refused);
        assert_eq!(refused.len(), 2);
        for record in &refused {
            assert_record_says(record, "APPROVAL_STORE_UNAVAILABLE", &error.to_string());
        }
        assert!(records(&sink, Stage::Enter).is_empty());
        assert_eq!(gate.approve("any"), Err(ApproveError::Store(error.clone())));
    }
}

#[test]
fn an_operator_answer_through_the_store_reaches_the_call_once() {
    let _serial = serial();
    let sink = MemorySink::new();
    let gate = gates::two_step_audited(Mode::FullAuto, sink.clone());
    let before = SYNC_RUNS.load(Ordering::SeqCst);
    // Rejected with a reason and a name: the retry reads both.
    let asked = gate.run(|| wire_sync("a".into(), 1)).unwrap_err();
    let token = asked.approval_token().unwrap().to_owned();
    gate.answer(
        &token,
        Answer::Reject {
            by: "bob".into(),
            reason: "wrong account".into(),
            stop: false,
        },
    )
    .unwrap();
    let answered = records(&sink, Stage::ApprovalRejected);
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].by.as_deref(), Some("bob"));
    assert_eq!(answered[0].message.as_deref(), Some("wrong account"));
    assert!(records(&sink, Stage::ApprovalGranted).is_empty());
    let rejected = gate.run(|| wire_sync("a".into(), 1)).unwrap_err();
    assert_eq!(rejected.code(), DenialCode::ApprovalRejected);
    assert_eq!(rejected.detail(), Some("wrong account"));
    assert_eq!(
        records(&sink, Stage::Refused).last().unwrap().by.as_deref(),
        Some("bob")
    );
    // Approved for the session by carol: runs, then the same call runs again without a token.
    let asked = gate.run(|| wire_sync("a".into(), 1)).unwrap_err();
    approve_for_session(&gate, asked.approval_token().unwrap(), "carol");
    gate.run(|| wire_sync("a".into(), 1)).unwrap();
    gate.run(|| wire_sync("a".into(), 1)).unwrap();
    assert_eq!(SYNC_RUNS.load(Ordering::SeqCst) - before, 2);
    assert_eq!(
        entered(&sink.records()),
        [
            (Some(Decision::Approved), Some("carol".into())),
            (Some(Decision::Granted), Some("carol".into())),
        ]
    );
    // The operator's grant is for these arguments only.
    assert!(gate.grants()[0].exact_arguments);
    assert_denied(
        gate.run(|| wire_sync("a".into(), 2)),
        DenialCode::ApprovalPending,
    );
    // And reject-and-stop through the store stops the gate.
    let asked = gate.run(|| purge("p".into())).unwrap_err();
    gate.answer(
        asked.approval_token().unwrap(),
        Answer::Reject {
            by: "dave".into(),
            reason: "incident".into(),
            stop: true,
        },
    )
    .unwrap();
    assert_denied(gate.run(|| purge("p".into())), DenialCode::ApprovalRejected);
    assert_eq!(gate.mode(), Mode::Shadow);
}

// A gate that keeps no record lets a granted call run from its inlined check: the same rules hold there
// (the tool only, its time to live, revocation, the mode).
#[test]
fn a_grant_in_a_gate_without_records_holds_its_limits_in_the_inlined_check() {
    let _serial = serial();
    let (asked, approver) = scripted(vec![
        grant_for(Duration::from_millis(300)),
        grant_for(Duration::from_secs(600)),
        Approval::Approve,
        grant_for(Duration::from_secs(600)),
    ]);
    let gate = gates::approved(Mode::FullAuto, approver);
    let before = WIRED.load(Ordering::SeqCst);
    for cents in 0..5 {
        gate.run(|| wire_sync("a".into(), cents)).unwrap();
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1, "granted after the first");
    assert_eq!(WIRED.load(Ordering::SeqCst) - before, 5);
    // Another tool is not granted.
    gate.run(|| purge("x".into())).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // Past its time to live, the first grant asks again (and is answered with a plain approval).
    std::thread::sleep(Duration::from_millis(400));
    gate.run(|| wire_sync("a".into(), 9)).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 3);
    // Revoked: asks again (and is granted again).
    assert_eq!(gate.revoke_grants(Some("appr.purge"), "ops"), 1);
    gate.run(|| purge("y".into())).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 4);
    gate.run(|| purge("z".into())).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 4);
    // Lowered: the grant lifts no mode.
    gate.lower(Mode::PartialAuto).unwrap();
    assert_denied(gate.run(|| purge("z".into())), DenialCode::ModeNotAllowed);
    // And a grant dies with its gate: a new gate with no approver refuses.
    let fresh = Gate::new(Mode::FullAuto).unwrap();
    assert_denied(
        fresh.run(|| purge("z".into())),
        DenialCode::ApprovalRequired,
    );
}

// Nested gates: every gate's checks that ask no one (table, deny list, mode, budget) come before any
// gate's approver is asked, so an outer gate's approver (and its operator) is never asked about a call
// an inner gate refuses anyway.
#[test]
fn no_approver_is_asked_about_a_call_another_gate_refuses_on_its_own() {
    let _serial = serial();
    let asked = Arc::new(AtomicUsize::new(0));
    let outer = {
        let asked = asked.clone();
        gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
            asked.fetch_add(1, Ordering::SeqCst);
            Approval::Approve
        })
    };
    let store_outer = gates::two_step(Mode::FullAuto);
    let hour = Duration::from_secs(3600);
    let spent = built(Mode::FullAuto, |b| {
        b.approver(|_: &ApprovalRequest<'_>| Approval::Approve)
            .budget(toolgate::gate::BudgetScope::tool("appr.purge"), 1, hour)
    });
    spent.run(|| purge("first".into())).unwrap();
    let inners = [
        (
            gates::denying(Mode::FullAuto, "appr.purge"),
            DenialCode::DenyListed,
        ),
        (
            Gate::new(Mode::PartialAuto).unwrap(),
            DenialCode::ModeNotAllowed,
        ),
        (spent, DenialCode::BudgetExhausted),
    ];
    let before = PURGES.load(Ordering::SeqCst);
    for (inner, code) in inners {
        let denied = outer.run(|| inner.run(|| purge("x".into()))).unwrap_err();
        assert_eq!(denied.code(), code);
        let denied = store_outer
            .run(|| inner.run(|| purge("x".into())))
            .unwrap_err();
        assert_eq!(denied.code(), code);
        assert!(denied.approval_token().is_none(), "no request was filed");
    }
    assert_eq!(
        asked.load(Ordering::SeqCst),
        0,
        "the outer approver was never asked"
    );
    assert_eq!(PURGES.load(Ordering::SeqCst), before);
}

// One store shared by gates of two principals: Bob's answer to his call never runs Alice's identical
// call, which files (and waits on) a request of her own.
#[test]
fn an_answer_runs_only_the_call_of_the_principal_it_was_given_for() {
    let _serial = serial();
    let store: Arc<dyn ApprovalStore> =
        Arc::new(toolgate::approval::two_step::MemoryStore::new(Duration::from_secs(60)).unwrap());
    let gate_of = |principal: &str, agent: &str| {
        built(Mode::FullAuto, |b| {
            b.approval_store_shared(store.clone())
                .principal(principal)
                .agent(agent)
        })
    };
    let bob = gate_of("bob", "desk");
    let alice = gate_of("alice", "desk");
    let alice_other_agent = gate_of("bob", "other-desk");
    let before = PURGES.load(Ordering::SeqCst);
    let bobs = bob.run(|| purge("db".into())).unwrap_err();
    bob.approve(bobs.approval_token().unwrap()).unwrap();
    for other in [&alice, &alice_other_agent] {
        let theirs = other.run(|| purge("db".into())).unwrap_err();
        assert_eq!(theirs.code(), DenialCode::ApprovalPending);
        assert_ne!(theirs.approval_token(), bobs.approval_token());
    }
    assert_eq!(PURGES.load(Ordering::SeqCst), before);
    bob.run(|| purge("db".into())).unwrap();
    assert_eq!(PURGES.load(Ordering::SeqCst), before + 1);
}

// An escalated call's approval says the risk it was declared at and that its arguments raised it, on
// every path an approval refuses by.
#[test]
fn an_escalated_call_says_its_declared_risk_in_every_approval_message() {
    let _serial = serial();
    let raised =
        "tool `appr.run_shell` (declared LOW_WRITE, raised to HIGH_WRITE by its arguments)";
    let two_step = gates::two_step(Mode::FullAuto);
    let sudo = || run_shell("sudo reboot".into());
    let pending = two_step.run(sudo).unwrap_err();
    assert_eq!(pending.code(), DenialCode::ApprovalPending);
    assert!(pending.message().starts_with(raised), "{pending}");
    two_step.approve(pending.approval_token().unwrap()).unwrap();
    two_step.run(sudo).unwrap();
    let reused = two_step.run(sudo).unwrap_err();
    assert_eq!(reused.code(), DenialCode::ApprovalReused);
    assert!(reused.message().starts_with(raised), "{reused}");
    let asked = two_step.run(|| run_shell("sudo halt".into())).unwrap_err();
    two_step
        .answer(
            asked.approval_token().unwrap(),
            Answer::Reject {
                by: "bob".into(),
                reason: "not now".into(),
                stop: false,
            },
        )
        .unwrap();
    let rejected = two_step.run(|| run_shell("sudo halt".into())).unwrap_err();
    assert_eq!(rejected.code(), DenialCode::ApprovalRejected);
    assert_eq!(
        rejected.message(),
        format!("{raised} was not approved in mode FULL_AUTO: not now")
    );
    let no_approver = Gate::builder().mode(Mode::FullAuto).build().unwrap();
    let required = no_approver.run(sudo).unwrap_err();
    assert_eq!(required.code(), DenialCode::ApprovalRequired);
    assert_eq!(
        required.message(),
        format!("{raised} needs an approval in mode FULL_AUTO and the gate has no approver")
    );
    // A call its arguments do not raise reads as ever.
    no_approver.run(|| run_shell("uptime".into())).unwrap();
    let high = no_approver.run(|| wire_sync("a".into(), 1)).unwrap_err();
    assert!(
        high.message()
            .starts_with("tool `appr.wire_sync` (HIGH_WRITE) needs"),
        "{high}"
    );
}
