//! Outside attacks on guarantee 18 (an operator's policy file only narrows), written from SECURITY.md,
//! the guide and the public API alone.
//!
//! - `a18_NN_*`: an attack that gets through. The test states what the guarantee promises and fails on
//!   the code as it is; it passes once the hole is closed.
//! - `h18_NN_*`: an attack that holds. The test asserts what would be false were the guarantee broken.
//!
//! Most attacks change one stateful feature (the policy, the mode, the taint latch, a grant, a budget)
//! while another feature's decision waits (an approver, a two-step approval, a slow audit sink).

use super::{AsyncSlowSink, Hold, HoldingBudgets, SlowSink, following};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use toolgate::approval::{ApprovalFuture, AsyncApprover, SessionGrant};
use toolgate::audit::{MemorySink, Stage};
use toolgate::gate::{BudgetScope, TaintPolicy};
use toolgate::policy_file::{Direction, LivePolicy, PolicyFile};
use toolgate::{Approval, ApprovalRequest, Denied, Gate, Mode, tool};

// ---------------------------------------------------------------------------------------------------
// What ran: every body writes its argument here, so that a test sees whether its own call ran.

static RAN: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn ran(marker: &str) {
    RAN.lock().unwrap().push(marker.to_owned());
}

fn has_run(marker: &str) -> bool {
    RAN.lock().unwrap().iter().any(|m| m == marker)
}

// ---------------------------------------------------------------------------------------------------
// The tools, in a domain of their own.

/// Read something.
#[tool(risk = "READ_ONLY", domain = "ap", callable)]
fn look(q: String) -> Result<String, Denied> {
    ran(&format!("look:{q}"));
    Ok(q)
}

/// Push to a host.
#[tool(risk = "LOW_WRITE", domain = "ap", callable)]
fn push(host: String) -> Result<String, Denied> {
    ran(&format!("push:{host}"));
    Ok(host)
}

/// Push to a host, asynchronously.
#[tool(risk = "LOW_WRITE", domain = "ap", callable)]
async fn push_async(host: String) -> Result<String, Denied> {
    ran(&format!("push_async:{host}"));
    Ok(host)
}

/// Wire money.
#[tool(risk = "HIGH_WRITE", domain = "ap", callable)]
fn wire(amount: i64) -> Result<i64, Denied> {
    ran(&format!("wire:{amount}"));
    Ok(amount)
}

/// Wire money, asynchronously.
#[tool(risk = "HIGH_WRITE", domain = "ap", callable)]
async fn wire_async(amount: i64) -> Result<i64, Denied> {
    ran(&format!("wire_async:{amount}"));
    Ok(amount)
}

/// A write the code allows only in FULL_AUTO.
#[tool(risk = "LOW_WRITE", domain = "ap", modes = [FULL_AUTO], callable)]
fn full_only(n: u32) -> Result<u32, Denied> {
    ran(&format!("full_only:{n}"));
    Ok(n)
}

/// Fetch a page: untrusted output.
#[tool(risk = "READ_ONLY", domain = "ap", untrusted_output, callable)]
fn fetch(url: String) -> Result<String, Denied> {
    ran(&format!("fetch:{url}"));
    Ok(url)
}

/// A count that may be huge.
#[tool(risk = "LOW_WRITE", domain = "ap", callable)]
fn big(n: u64) -> Result<u64, Denied> {
    ran(&format!("big:{n}"));
    Ok(n)
}

/// A ratio.
#[tool(risk = "LOW_WRITE", domain = "ap", callable)]
fn ratio(x: f64, tag: String) -> Result<f64, Denied> {
    ran(&format!("ratio:{tag}"));
    Ok(x)
}

/// An optional quantity.
#[tool(risk = "LOW_WRITE", domain = "ap", callable)]
fn maybe(qty: Option<i64>, tag: String) -> Result<String, Denied> {
    ran(&format!("maybe:{tag}"));
    Ok(tag)
}

/// Push to many hosts.
#[tool(risk = "LOW_WRITE", domain = "ap", callable)]
fn many(hosts: Vec<String>, tag: String) -> Result<String, Denied> {
    ran(&format!("many:{tag}"));
    Ok(tag)
}

/// Log in to a host.
#[tool(risk = "LOW_WRITE", domain = "ap", callable, redact = [token])]
fn login(host: String, token: String) -> Result<String, Denied> {
    ran(&format!("login:{host}"));
    let _ = token;
    Ok(host)
}

/// A host name whose value can change behind a shared handle (interior mutability).
#[derive(Clone, toolgate::schemars::JsonSchema)]
#[schemars(crate = "toolgate::schemars")]
pub struct Host(#[schemars(with = "String")] Arc<Mutex<String>>);

impl Host {
    fn new(name: &str) -> Host {
        Host(Arc::new(Mutex::new(name.to_owned())))
    }
    fn set(&self, name: &str) {
        *self.0.lock().unwrap() = name.to_owned();
    }
    fn get(&self) -> String {
        self.0.lock().unwrap().clone()
    }
}

impl toolgate::serde::Serialize for Host {
    fn serialize<S: toolgate::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.get())
    }
}

impl<'de> toolgate::serde::Deserialize<'de> for Host {
    fn deserialize<D: toolgate::serde::Deserializer<'de>>(d: D) -> Result<Host, D::Error> {
        let name = <String as toolgate::serde::Deserialize>::deserialize(d)?;
        Ok(Host::new(&name))
    }
}

/// Push to a host held behind a shared handle.
#[tool(risk = "LOW_WRITE", domain = "ap", callable)]
fn shifty(host: Host, tag: String) -> Result<String, Denied> {
    let seen = host.get();
    ran(&format!("shifty:{tag}:{seen}"));
    Ok(seen)
}

// ---------------------------------------------------------------------------------------------------
// Helpers.

fn pf(text: &str) -> PolicyFile {
    PolicyFile::parse("ap.toml", text)
        .unwrap_or_else(|e| panic!("the test's policy does not check: {e}"))
}

const EMPTY: &str = "format = 1\n";

/// An approver that waits for the test before it answers `answer`.
fn holding_approver(
    hold: Hold,
    answer: Approval,
) -> impl Fn(&ApprovalRequest<'_>) -> Approval + Send + Sync + 'static {
    let answer = Mutex::new(answer);
    move |_request: &ApprovalRequest<'_>| {
        hold.arrive_and_wait();
        clone_approval(&answer.lock().unwrap())
    }
}

fn clone_approval(a: &Approval) -> Approval {
    match a {
        Approval::Approve => Approval::Approve,
        Approval::ApproveForSession(g) => Approval::ApproveForSession(*g),
        Approval::Reject(r) => Approval::Reject(r.clone()),
        Approval::Stop(r) => Approval::Stop(r.clone()),
        _ => Approval::Reject("unknown".into()),
    }
}

/// An async approver that waits for the test.
struct SlowAsync {
    arrived: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
}

impl AsyncApprover for SlowAsync {
    fn approve<'a>(&'a self, _request: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        Box::pin(async move {
            self.arrived.notify_one();
            self.release.notified().await;
            Approval::Approve
        })
    }
}

fn code(result: Result<impl std::fmt::Debug, Denied>) -> String {
    match result {
        Ok(v) => format!("ran ({v:?})"),
        Err(d) => d.code().to_string(),
    }
}

fn approve_all() -> impl Fn(&ApprovalRequest<'_>) -> Approval + Send + Sync + 'static {
    |_request: &ApprovalRequest<'_>| Approval::Approve
}

// ===================================================================================================
// A policy replacement racing a decision that waits.

/// Guarantee 18: a call decided under the old file and not yet past its commit point is decided again
/// there. A HIGH_WRITE call waits on a sync approver; the operator denies the tool meanwhile. The
/// approver then approves: the body must not run.
#[test]
fn h18_01_deny_added_while_a_sync_approver_thinks() {
    let live = LivePolicy::new(pf(EMPTY));
    let hold = Hold::default();
    let gate = following(Mode::FullAuto, &live, |b| {
        b.approver(holding_approver(hold.clone(), Approval::Approve))
    });
    let g = gate.clone();
    let call = thread::spawn(move || g.run(|| wire(180_001)));
    hold.wait_arrived();
    live.replace(pf("format = 1\n[defaults]\ndeny = [\"ap.wire\"]\n"), "test");
    hold.release();
    let outcome = code(call.join().unwrap());
    assert!(
        !has_run("wire:180001"),
        "the body ran after its tool was denied: {outcome}"
    );
    assert_eq!(outcome, "DENY_LISTED");
}

/// Guarantee 18 with an async approver: the ceiling drops below the call's risk while the approver
/// thinks; the approved call must be refused at its commit point.
#[test]
fn h18_02_ceiling_lowered_while_an_async_approver_thinks() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let live = LivePolicy::new(pf(EMPTY));
    let arrived = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(SlowAsync {
            arrived: arrived.clone(),
            release: release.clone(),
        })
        .policy(live.clone())
        .build()
        .unwrap();
    let outcome = rt.block_on(async {
        let task = tokio::spawn(gate.scope(async { wire_async(180_002).await }));
        arrived.notified().await;
        live.replace(
            pf("format = 1\n[defaults]\nceiling = \"PARTIAL_AUTO\"\n"),
            "test",
        );
        release.notify_one();
        code(task.await.unwrap())
    });
    assert!(
        !has_run("wire_async:180002"),
        "ran above the new ceiling: {outcome}"
    );
    assert_eq!(gate.mode(), Mode::PartialAuto);
}

/// Guarantee 18: an argument rule added while an approver thinks applies to the waiting call, which
/// was decided under the old file.
#[test]
fn h18_03_argument_rule_added_while_an_approver_thinks() {
    let live = LivePolicy::new(pf(EMPTY));
    let hold = Hold::default();
    let gate = following(Mode::FullAuto, &live, |b| {
        b.approver(holding_approver(hold.clone(), Approval::Approve))
    });
    let g = gate.clone();
    let call = thread::spawn(move || g.run(|| wire(180_003)));
    hold.wait_arrived();
    live.replace(
        pf("format = 1\n[[defaults.arguments]]\ntool = \"ap.wire\"\nparameter = \"amount\"\nmax = 50\n"),
        "test",
    );
    hold.release();
    let outcome = code(call.join().unwrap());
    assert!(
        !has_run("wire:180003"),
        "ran though the new file refuses its argument: {outcome}"
    );
    // Refused; the code it carries is APPROVAL_REQUIRED (the approval given under the old file no longer
    // counts), not the ARGUMENT_REFUSED that asking again would answer.
    assert!(
        outcome == "ARGUMENT_REFUSED" || outcome == "APPROVAL_REQUIRED",
        "{outcome}"
    );
}

/// Guarantee 18: a call the code allows outright (LOW_WRITE in PARTIAL_AUTO) waits on a slow audit
/// sink's `enter`; meanwhile the operator adds `ask` for its tool. The gate has no approver, so the
/// new file refuses the call: decided again at its commit point, it must not run.
#[test]
fn h18_04_ask_added_while_a_slow_sink_writes_enter() {
    let live = LivePolicy::new(pf(EMPTY));
    let hold = Hold::default();
    let sink = SlowSink {
        tool: "ap.push",
        hold: hold.clone(),
        inner: MemorySink::new(),
    };
    let records = sink.inner.clone();
    let gate = following(Mode::PartialAuto, &live, |b| b.audit(sink));
    let g = gate.clone();
    let call = thread::spawn(move || g.run(|| push("h18-04".into())));
    hold.wait_arrived();
    let replacer = {
        let live = live.clone();
        thread::spawn(move || {
            live.replace(pf("format = 1\n[defaults]\nask = [\"ap.push\"]\n"), "test")
        })
    };
    // The replacement may have to wait for the sink; give it a moment either way, then let the call go.
    thread::sleep(Duration::from_millis(200));
    hold.release();
    replacer.join().unwrap();
    let outcome = code(call.join().unwrap());
    let exit = records
        .records()
        .into_iter()
        .find(|r| matches!(r.stage, Stage::Exit) && r.tool == "ap.push");
    assert!(
        !has_run("push:h18-04"),
        "ran without the approval the new file asks for: {outcome}"
    );
    assert_eq!(outcome, "APPROVAL_REQUIRED");
    assert_eq!(
        exit.and_then(|r| r.code).as_deref(),
        Some("APPROVAL_REQUIRED")
    );
}

/// Guarantee 18 with `ask_at`: as h18_04, the new file asking for every LOW_WRITE call.
#[test]
fn h18_05_ask_at_added_while_a_slow_sink_writes_enter() {
    let live = LivePolicy::new(pf(EMPTY));
    let hold = Hold::default();
    let sink = SlowSink {
        tool: "ap.push",
        hold: hold.clone(),
        inner: MemorySink::new(),
    };
    let gate = following(Mode::PartialAuto, &live, |b| b.audit(sink));
    let g = gate.clone();
    let call = thread::spawn(move || g.run(|| push("h18-05".into())));
    hold.wait_arrived();
    let replacer = {
        let live = live.clone();
        thread::spawn(move || {
            live.replace(
                pf("format = 1\n[defaults]\nask_at = \"LOW_WRITE\"\n"),
                "test",
            )
        })
    };
    thread::sleep(Duration::from_millis(200));
    hold.release();
    replacer.join().unwrap();
    let outcome = code(call.join().unwrap());
    assert!(
        !has_run("push:h18-05"),
        "ran without the approval the new file asks for: {outcome}"
    );
}

/// Guarantee 18 with a two-step approval: an operator approves a call, then the file adds an argument
/// rule that refuses its value, and a deny rule on another tool. The approved call must be refused.
#[test]
fn h18_06_two_step_approval_given_then_file_refuses_its_argument() {
    let live = LivePolicy::new(pf(EMPTY));
    let gate = following(Mode::FullAuto, &live, |b| b.two_step_approvals());
    let pending = gate.run(|| wire(180_006)).unwrap_err();
    assert_eq!(pending.code(), "APPROVAL_PENDING");
    gate.approve(pending.approval_token().unwrap()).unwrap();
    live.replace(
        pf("format = 1\n[[defaults.arguments]]\ntool = \"ap.wire\"\nparameter = \"amount\"\nmax = 50\n"),
        "test",
    );
    let outcome = code(gate.run(|| wire(180_006)));
    assert!(
        !has_run("wire:180006"),
        "an approval outran the new argument rule: {outcome}"
    );
    assert_eq!(outcome, "ARGUMENT_REFUSED");
    // and the ceiling, after another approval
    let pending = gate.run(|| wire(6)).unwrap_err();
    gate.approve(pending.approval_token().unwrap()).unwrap();
    live.replace(
        pf("format = 1\n[defaults]\nceiling = \"PARTIAL_AUTO\"\n"),
        "test",
    );
    assert!(gate.run(|| wire(6)).is_err());
}

/// Guarantees 18 and 13: a call that holds a budget's only unit while its approver thinks is refused at
/// its commit point by a deny rule added meanwhile; the unit must come back, and no more than one call
/// of the tool may run in the window.
#[test]
fn h18_07_budget_unit_of_a_call_refused_by_a_new_file_comes_back() {
    let live = LivePolicy::new(pf(EMPTY));
    let hold = Hold::default();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .budget(
            BudgetScope::tool("ap.wire_async"),
            1,
            Duration::from_secs(3600),
        )
        .budget(BudgetScope::tool("ap.wire"), 1, Duration::from_secs(3600))
        .approver(holding_approver(hold.clone(), Approval::Approve))
        .policy(live.clone())
        .build()
        .unwrap();
    let g = gate.clone();
    let call = thread::spawn(move || g.run(|| wire(180_007)));
    hold.wait_arrived();
    live.replace(pf("format = 1\n[defaults]\ndeny = [\"ap.wire\"]\n"), "test");
    hold.release();
    assert_eq!(code(call.join().unwrap()), "DENY_LISTED");
    live.replace(pf(EMPTY), "test");
    assert_eq!(code(gate.run(|| wire(180_070))), "ran (180070)");
    assert_eq!(code(gate.run(|| wire(180_071))), "BUDGET_EXHAUSTED");
}

/// Guarantee 18: "a replacement reaches every following gate": the new file's argument rule applies to
/// every later call. A session grant given under the old file covers later calls of the tool without
/// asking, but it answers an approval, not the file: it must not carry a call past the new rule.
///
/// What happens instead, on a gate with no audit sink: `wire(180008)` runs, by the grant, though the
/// new file's `max = 50` refuses it; the same call without the grant is refused `ARGUMENT_REFUSED`.
#[test]
fn a18_08_session_grant_outruns_an_argument_rule_added_later() {
    let live = LivePolicy::new(pf(EMPTY));
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_r: &ApprovalRequest<'_>| {
            Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600)))
        })
        .policy(live.clone())
        .build()
        .unwrap();
    assert_eq!(code(gate.run(|| wire(8))), "ran (8)");
    assert_eq!(gate.grants().len(), 1);
    live.replace(
        pf("format = 1\n[[defaults.arguments]]\ntool = \"ap.wire\"\nparameter = \"amount\"\nmax = 50\n"),
        "test",
    );
    let outcome = code(gate.run(|| wire(180_008)));
    assert!(
        !has_run("wire:180008"),
        "a session grant outran the new argument rule: {outcome}"
    );
    assert_eq!(outcome, "ARGUMENT_REFUSED");
}

/// Guarantee 18: a session grant given under the old file does not outlive a deny rule or a lower
/// ceiling that the new file adds.
#[test]
fn h18_42_session_grant_then_file_denies_or_lowers() {
    let live = LivePolicy::new(pf(EMPTY));
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_r: &ApprovalRequest<'_>| {
            Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600)))
        })
        .policy(live.clone())
        .build()
        .unwrap();
    assert_eq!(code(gate.run(|| wire(42))), "ran (42)");
    live.replace(pf("format = 1\n[defaults]\ndeny = [\"ap.wire\"]\n"), "test");
    assert_eq!(code(gate.run(|| wire(180_042))), "DENY_LISTED");
    live.replace(
        pf("format = 1\n[defaults]\nceiling = \"PARTIAL_AUTO\"\n"),
        "test",
    );
    assert!(gate.run(|| wire(180_043)).is_err());
    live.replace(pf("format = 1\n[defaults]\nask = [\"ap.wire\"]\n"), "test");
    assert!(!has_run("wire:180042") && !has_run("wire:180043"));
}

/// Guarantee 18: a file "can ... refuse arguments": a value that fails a rule is refused with
/// `ARGUMENT_REFUSED`. With the rule `max = 50` on `ap.wire.amount` in force from the start, an
/// approver grants the tool for the session on `wire(10)`; the grant answers the approval, not the
/// file, so `wire(180009)` (direct) and `{"amount": 180090}` (by name) must still be refused.
///
/// What happens instead, on a gate with no audit sink: both run, by the grant, without the rule being
/// applied; `explain` for the same call says `refused (ARGUMENT_REFUSED)`. (The same gate with a
/// `MemorySink` refuses both `ARGUMENT_REFUSED`.)
#[test]
fn a18_09_session_grant_shortcut_skips_argument_rules() {
    let live = LivePolicy::new(pf(WIRE_MAX_50));
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_r: &ApprovalRequest<'_>| {
            Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600)))
        })
        .policy(live.clone())
        .build()
        .unwrap();
    assert_eq!(code(gate.run(|| wire(10))), "ran (10)");
    let direct = code(gate.run(|| wire(180_009)));
    let named = by_name(&gate, "ap.wire", serde_json::json!({"amount": 180_090}));
    let explained = pf(WIRE_MAX_50)
        .explain(
            None,
            None,
            Mode::FullAuto,
            "ap.wire",
            &serde_json::json!({"amount": 180_009}),
        )
        .unwrap();
    assert!(explained.decision.starts_with("refused"), "{explained}");
    assert_eq!(
        (direct.as_str(), named.as_str()),
        ("ARGUMENT_REFUSED", "ARGUMENT_REFUSED"),
        "the grant's shortcut skipped the argument rule; explain says {}",
        explained.decision
    );
}

// ===================================================================================================
// The taint latch meets the policy.

/// Guarantees 18 and 14: the latch never opens again. A replacement of the policy (which rebuilds what
/// the gate allows) must leave a tainted session tainted.
#[test]
fn h18_10_replacement_keeps_the_taint_latch_closed() {
    let live = LivePolicy::new(pf("format = 1\n[defaults]\ndeny = [\"ap.full_only\"]\n"));
    let gate = following(Mode::PartialAuto, &live, |b| b);
    gate.run(|| fetch("h18-10".into())).unwrap();
    assert!(gate.taint().is_some());
    live.replace(pf(EMPTY), "test");
    live.replace(pf("format = 1\n[defaults]\nask = [\"ap.look\"]\n"), "test");
    assert!(gate.taint().is_some(), "the latch opened with the new file");
    let outcome = code(gate.run(|| push("h18-10".into())));
    assert!(
        !has_run("push:h18-10"),
        "a write ran unasked in a tainted session: {outcome}"
    );
    assert_eq!(outcome, "APPROVAL_REQUIRED");
}

/// Guarantee 18: `ask` only turns an allowed call into one that asks. Under `TaintPolicy::Refuse`, a
/// tainted write is refused; a file that asks for it, on a gate whose approver approves everything,
/// must not turn that refusal into an approval.
#[test]
fn h18_11_ask_does_not_turn_a_tainted_refusal_into_an_approval() {
    let live = LivePolicy::new(pf(
        "format = 1\n[defaults]\nask = [\"ap.push\"]\nask_at = \"LOW_WRITE\"\n",
    ));
    let gate = following(Mode::PartialAuto, &live, |b| {
        b.taint_policy(TaintPolicy::Refuse).approver(approve_all())
    });
    gate.run(|| fetch("h18-11".into())).unwrap();
    let outcome = code(gate.run(|| push("h18-11".into())));
    assert!(!has_run("push:h18-11"), "{outcome}");
    assert_eq!(outcome, "TAINTED_SESSION");
}

/// Guarantee 18: the file's `taint` key can only make the latch refuse. Every value it accepts must
/// leave a gate built with `TaintPolicy::Refuse` refusing.
#[test]
fn h18_12_no_taint_value_relaxes_a_refusing_gate() {
    let mut accepted = Vec::new();
    for value in [
        "\"refuse\"",
        "\"ask\"",
        "\"require_approval\"",
        "\"approve\"",
        "\"allow\"",
        "\"REFUSE\"",
        "false",
        "\"\"",
    ] {
        let text = format!("format = 1\n[defaults]\ntaint = {value}\n");
        let Ok(file) = PolicyFile::parse("ap.toml", &text) else {
            continue;
        };
        accepted.push(value);
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .taint_policy(TaintPolicy::Refuse)
            .approver(approve_all())
            .policy(LivePolicy::new(file))
            .build()
            .unwrap();
        gate.run(|| fetch("h18-12".into())).unwrap();
        assert_eq!(gate.taint_policy(), TaintPolicy::Refuse, "taint = {value}");
        let marker = format!("h18-12-{value}");
        let outcome = code(gate.run(|| push(marker.clone())));
        assert_eq!(outcome, "TAINTED_SESSION", "taint = {value}");
    }
    assert_eq!(
        accepted,
        ["\"refuse\""],
        "the values the file accepts for `taint`"
    );
}

/// Guarantee 18: "a call decided under the old file is decided again at its commit point". In a
/// tainted session of a gate that asks (the default), a write waits on its approver; the operator's new
/// file says `taint = "refuse"`. The approval given meanwhile must not run it.
#[test]
fn h18_13_taint_refuse_added_while_a_tainted_write_waits_for_approval() {
    let live = LivePolicy::new(pf(EMPTY));
    let hold = Hold::default();
    let gate = following(Mode::PartialAuto, &live, |b| {
        b.approver(holding_approver(hold.clone(), Approval::Approve))
    });
    gate.run(|| fetch("h18-13".into())).unwrap();
    let g = gate.clone();
    let call = thread::spawn(move || g.run(|| push("h18-13".into())));
    hold.wait_arrived();
    live.replace(pf("format = 1\n[defaults]\ntaint = \"refuse\"\n"), "test");
    hold.release();
    let outcome = code(call.join().unwrap());
    assert!(!has_run("push:h18-13"), "{outcome}");
    assert_eq!(outcome, "TAINTED_SESSION");
}

// ===================================================================================================
// The mode: the kill switch, Approval::Stop and the file's ceiling.

/// Guarantees 18 and 4: a gate built in FULL_AUTO under a file with ceiling ADVISORY, then lowered by
/// the kill switch to SHADOW. The file's ceiling is lifted: the mode must stay SHADOW (the same gate
/// without the file, lowered to SHADOW, runs at SHADOW).
#[test]
fn h18_14_lifting_the_ceiling_after_the_kill_switch_keeps_shadow() {
    let live = LivePolicy::new(pf("format = 1\n[defaults]\nceiling = \"ADVISORY\"\n"));
    let gate = following(Mode::FullAuto, &live, |b| b);
    assert_eq!(gate.mode(), Mode::Advisory);
    gate.lower(Mode::Shadow).unwrap();
    live.replace(pf(EMPTY), "test");
    assert_eq!(gate.mode(), Mode::Shadow);
    assert!(gate.run(|| push("h18-14".into())).is_err());
    assert!(!has_run("push:h18-14"));
}

/// Guarantees 18 and 4: the kill switch pulled down to the mode the file's ceiling already holds the
/// gate at (ADVISORY). Without the file, the same gate lowered to ADVISORY runs at ADVISORY; with it,
/// once the ceiling is lifted, the gate must not climb back to the mode it was built with.
#[test]
fn h18_15_kill_switch_to_the_ceilings_mode_survives_the_ceiling_lifting() {
    let live = LivePolicy::new(pf("format = 1\n[defaults]\nceiling = \"ADVISORY\"\n"));
    let gate = following(Mode::FullAuto, &live, |b| b.approver(approve_all()));
    assert_eq!(gate.mode(), Mode::Advisory);
    let lowered = gate.lower(Mode::Advisory);
    live.replace(pf(EMPTY), "test");
    let outcome = code(gate.run(|| wire(180_015)));
    assert!(
        gate.mode() <= Mode::Advisory && !has_run("wire:180015"),
        "lower(ADVISORY) answered {lowered:?}; after the ceiling lifted the gate is {:?} and a HIGH_WRITE call: {outcome}",
        gate.mode()
    );
}

/// Guarantees 18 and 4: as a18_15, lowering to PARTIAL_AUTO while the file holds the gate at ADVISORY.
/// Without the file the gate would be at PARTIAL_AUTO and refuse HIGH_WRITE; with it, once the ceiling
/// is lifted, the gate must not run at FULL_AUTO.
#[test]
fn h18_16_kill_switch_above_the_ceiling_survives_the_ceiling_lifting() {
    let live = LivePolicy::new(pf("format = 1\n[defaults]\nceiling = \"ADVISORY\"\n"));
    let gate = following(Mode::FullAuto, &live, |b| b.approver(approve_all()));
    let lowered = gate.lower(Mode::PartialAuto);
    live.replace(pf(EMPTY), "test");
    let outcome = code(gate.run(|| wire(180_016)));
    assert!(
        gate.mode() <= Mode::PartialAuto && !has_run("wire:180016"),
        "lower(PARTIAL_AUTO) answered {lowered:?}; after the ceiling lifted the gate is {:?} and a HIGH_WRITE call: {outcome}",
        gate.mode()
    );
}

/// Guarantees 18 and 4: an approver's `Approval::Stop` lowers the gate to SHADOW; a later replacement
/// that lifts the file's ceiling must not raise it.
#[test]
fn h18_17_stop_then_ceiling_lifted_keeps_shadow() {
    let live = LivePolicy::new(pf("format = 1\n[defaults]\nceiling = \"FULL_AUTO\"\n"));
    let gate = following(Mode::FullAuto, &live, |b| {
        b.approver(|_r: &ApprovalRequest<'_>| Approval::Stop("runaway".into()))
    });
    assert!(gate.run(|| wire(17)).is_err());
    assert_eq!(gate.mode(), Mode::Shadow);
    live.replace(pf(EMPTY), "test");
    assert_eq!(gate.mode(), Mode::Shadow);
}

/// Guarantees 18 and 4, raced: the kill switch (SHADOW) and a replacement that lifts the ceiling, on
/// two threads at once, a thousand times. Whatever the order, the gate must end at SHADOW.
#[test]
fn h18_18_kill_switch_racing_a_ceiling_lift() {
    let tight = pf("format = 1\n[defaults]\nceiling = \"ADVISORY\"\n");
    let open = pf(EMPTY);
    let mut raised = 0;
    for _ in 0..1000 {
        let live = LivePolicy::new(tight.clone());
        let gate = following(Mode::FullAuto, &live, |b| b);
        let start = Arc::new(std::sync::Barrier::new(2));
        let (g, s) = (gate.clone(), start.clone());
        let lowerer = thread::spawn(move || {
            s.wait();
            g.lower(Mode::Shadow).unwrap();
        });
        start.wait();
        live.replace(open.clone(), "race");
        lowerer.join().unwrap();
        if gate.mode() != Mode::Shadow {
            raised += 1;
        }
    }
    assert_eq!(
        raised, 0,
        "gates raised above the kill switch by a racing replacement"
    );
}

// ===================================================================================================
// Who follows the file: gates built while it is replaced, clones, principals, nested gates.

/// Guarantee 18: "a replacement reaches every following gate before `replace` returns". Gates are built
/// on one thread while another replaces the file with one that denies a tool; once both are done, every
/// gate built must follow the new file.
#[test]
fn h18_19_gates_built_while_the_file_is_replaced_follow_the_new_one() {
    let mut stale = 0;
    for round in 0..300 {
        let live = LivePolicy::new(pf(EMPTY));
        let start = Arc::new(std::sync::Barrier::new(2));
        let (l, s) = (live.clone(), start.clone());
        let builder = thread::spawn(move || {
            s.wait();
            (0..4)
                .map(|_| {
                    Gate::builder()
                        .mode(Mode::PartialAuto)
                        .policy(l.clone())
                        .build()
                        .unwrap()
                })
                .collect::<Vec<_>>()
        });
        start.wait();
        let deny = pf("format = 1\n[defaults]\ndeny = [\"ap.look\"]\n");
        let digest = deny.digest().to_owned();
        live.replace(deny, "race");
        for gate in builder.join().unwrap() {
            let marker = format!("h18-19-{round}");
            if gate.run(|| look(marker.clone())).is_ok()
                || gate.policy_digest().as_deref() != Some(digest.as_str())
            {
                stale += 1;
            }
        }
    }
    assert_eq!(stale, 0, "gates that still follow the replaced file");
}

/// Guarantee 18 across principals and agents sharing one `LivePolicy`: each gate follows `[defaults]`
/// and its own tables, clones follow with their gate, and every record after the replacement names the
/// new digest.
#[test]
fn h18_20_principals_agents_and_clones_sharing_one_live_policy() {
    let live = LivePolicy::new(pf(EMPTY));
    let sink = MemorySink::new();
    let alice = following(Mode::PartialAuto, &live, |b| {
        b.principal("alice").audit(sink.clone())
    });
    let bob = following(Mode::PartialAuto, &live, |b| {
        b.principal("bob").agent("bot").audit(sink.clone())
    });
    let alice_clone = alice.clone();
    let file = pf(
        "format = 1\n[principals.alice]\ndeny = [\"ap.push\"]\n[agents.bot]\nceiling = \"ADVISORY\"\n[principals.bob]\ndeny = [\"ap.look\"]\n",
    );
    let digest = file.digest().to_owned();
    live.replace(file, "test");
    assert_eq!(
        code(alice_clone.run(|| push("h18-20a".into()))),
        "DENY_LISTED"
    );
    assert_eq!(
        code(alice.run(|| look("h18-20a".into()))),
        "ran (\"h18-20a\")"
    );
    assert_eq!(bob.mode(), Mode::Advisory);
    assert_eq!(code(bob.run(|| look("h18-20b".into()))), "DENY_LISTED");
    let records = sink.records();
    let changed: Vec<_> = records
        .iter()
        .filter(|r| matches!(r.stage, Stage::PolicyChanged))
        .collect();
    assert_eq!(changed.len(), 2, "one policy_changed per gate");
    for r in records.iter().filter(|r| !r.tool.is_empty()) {
        assert_eq!(r.policy_digest.as_deref(), Some(digest.as_str()), "{r:?}");
    }
}

/// Guarantees 18 and 5: nested gates each with its own live policy. What either file takes away, the
/// call loses, whichever gate is inside; replacing the inner one's file widens nothing the outer's denies.
#[test]
fn h18_21_nested_gates_with_different_policies_intersect() {
    let outer_live = LivePolicy::new(pf("format = 1\n[defaults]\ndeny = [\"ap.push\"]\n"));
    let inner_live = LivePolicy::new(pf("format = 1\n[defaults]\nceiling = \"SHADOW\"\n"));
    let outer = Gate::builder()
        .mode(Mode::FullAuto)
        .policy(outer_live.clone())
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::FullAuto)
        .policy(inner_live.clone())
        .build()
        .unwrap();
    assert_eq!(
        code(outer.run(|| inner.run(|| push("h18-21".into())))),
        "DENY_LISTED"
    );
    inner_live.replace(pf(EMPTY), "test");
    assert_eq!(
        code(outer.run(|| inner.run(|| push("h18-21".into())))),
        "DENY_LISTED"
    );
    outer_live.replace(
        pf("format = 1\n[defaults]\nceiling = \"ADVISORY\"\n"),
        "test",
    );
    assert_eq!(outer.mode(), Mode::Advisory);
    assert!(inner.run(|| outer.run(|| push("h18-21".into()))).is_err());
    assert!(!has_run("push:h18-21"));
}

/// Guarantee 18: what the code's builder takes away (a deny rule, `TaintPolicy::Refuse`) stays taken
/// away through any number of replacements.
#[test]
fn h18_22_builder_deny_and_taint_policy_survive_replacements() {
    let live = LivePolicy::new(pf("format = 1\n[defaults]\ndeny = [\"ap.look\"]\n"));
    let gate = following(Mode::PartialAuto, &live, |b| {
        b.deny("ap.push")
            .taint_policy(TaintPolicy::Refuse)
            .approver(approve_all())
    });
    live.replace(pf(EMPTY), "test");
    live.replace(pf("format = 1\n[defaults]\nask = [\"ap.many\"]\n"), "test");
    assert_eq!(code(gate.run(|| push("h18-22".into()))), "DENY_LISTED");
    gate.run(|| fetch("h18-22".into())).unwrap();
    live.replace(pf(EMPTY), "test");
    assert_eq!(gate.taint_policy(), TaintPolicy::Refuse);
    assert_eq!(
        code(gate.run(|| many(vec!["x".into()], "h18-22".into()))),
        "TAINTED_SESSION"
    );
}

/// Guarantee 18: a file's `ask` and `ask_at` turn only allowed calls into ones that ask. A call the
/// code refuses (a mode the tool does not allow, a risk above the ceiling, an exhausted budget) stays
/// refused under an approver that approves everything.
#[test]
fn h18_23_ask_does_not_turn_code_refusals_into_approvals() {
    let live = LivePolicy::new(pf(
        "format = 1\n[defaults]\nask = [\"ap.full_only\", \"ap.wire\", \"ap.big\"]\nask_at = \"READ_ONLY\"\n",
    ));
    let gate = following(Mode::PartialAuto, &live, |b| {
        b.budget(BudgetScope::tool("ap.big"), 1, Duration::from_secs(3600))
            .approver(approve_all())
    });
    assert_eq!(code(gate.run(|| full_only(23))), "MODE_NOT_ALLOWED");
    assert!(gate.run(|| wire(180_023)).is_err());
    assert!(!has_run("wire:180023"));
    assert_eq!(code(gate.run(|| big(1_823))), "ran (1823)");
    assert_eq!(code(gate.run(|| big(1_824))), "BUDGET_EXHAUSTED");
}

/// Guarantee 18: a ceiling above the code's mode raises nothing, in `[defaults]`, a principal's or an
/// agent's table; the lowest ceiling wins.
#[test]
fn h18_24_ceilings_above_the_code_raise_nothing() {
    for text in [
        "format = 1\n[defaults]\nceiling = \"FULL_AUTO\"\n",
        "format = 1\n[principals.alice]\nceiling = \"FULL_AUTO\"\n",
        "format = 1\n[agents.bot]\nceiling = \"FULL_AUTO\"\n",
        "format = 1\n[defaults]\nceiling = \"PARTIAL_AUTO\"\n[agents.bot]\nceiling = \"FULL_AUTO\"\n",
    ] {
        let Ok(file) = PolicyFile::parse("ap.toml", text) else {
            continue;
        };
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .principal("alice")
            .agent("bot")
            .approver(approve_all())
            .policy(LivePolicy::new(file))
            .build()
            .unwrap();
        assert_eq!(gate.mode(), Mode::PartialAuto, "{text}");
        assert!(gate.run(|| wire(24)).is_err(), "{text}");
    }
    // A principal's or agent's ceiling above the defaults' is refused when read (it would do nothing).
    assert!(PolicyFile::parse("ap.toml", "format = 1\n[defaults]\nceiling = \"ADVISORY\"\n[agents.bot]\nceiling = \"FULL_AUTO\"\n").is_err());
}

// ===================================================================================================
// Files that would widen, or not check: TOML tricks, reload, watch.

/// A scratch folder holding `ops.toml` with `text`, and the file's path.
fn ops_file(name: &str, text: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = tmp_dir(name);
    let path = dir.join("ops.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn tmp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-ap-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Guarantee 18: "a file that does not check is refused and the policy in force kept". Each text
/// below is reloaded over a file that denies `ap.look`: either it checks and still narrows at least as
/// the TOML says, or it is refused (`policy_refused`) and the gate keeps denying.
#[test]
fn h18_25_toml_tricks_on_reload_are_refused_or_narrow() {
    let dir = tmp_dir("tricks");
    let path = dir.join("ops.toml");
    let deny_look = "format = 1\n[defaults]\ndeny = [\"ap.look\"]\n";
    let huge = format!(
        "format = 1\n[defaults]\n{}deny = [\"ap.push\"]\n",
        "# pad\n".repeat(200_000)
    );
    let texts: Vec<(&str, Vec<u8>)> = vec![
        (
            "duplicate table",
            "format = 1\n[defaults]\ndeny = [\"ap.look\"]\n[defaults]\ndeny = []\n".into(),
        ),
        (
            "duplicate key",
            "format = 1\n[defaults]\ndeny = [\"ap.look\"]\ndeny = []\n".into(),
        ),
        (
            "array of tables",
            "format = 1\n[[defaults]]\ndeny = [\"ap.look\"]\n".into(),
        ),
        (
            "unknown key allow",
            "format = 1\n[defaults]\nallow = [\"ap.look\"]\n".into(),
        ),
        (
            "misspelt principals",
            "format = 1\n[principal.alice]\ndeny = [\"ap.look\"]\n".into(),
        ),
        (
            "capital key",
            "format = 1\n[defaults]\nDeny = [\"ap.look\"]\n".into(),
        ),
        (
            "format 2",
            "format = 2\n[defaults]\ndeny = [\"ap.look\"]\n".into(),
        ),
        ("no format", "[defaults]\ndeny = [\"ap.look\"]\n".into()),
        ("empty", Vec::new()),
        ("huge", huge.into_bytes()),
        (
            "not utf-8",
            b"format = 1\n[defaults]\n# \xff\xfe\n".to_vec(),
        ),
        ("nul", "format = 1\n\0\n".into()),
        (
            "deny pattern matching nothing",
            "format = 1\n[defaults]\ndeny = [\"ap.nothing*\"]\n".into(),
        ),
    ];
    for (what, text) in texts {
        std::fs::write(&path, deny_look).unwrap();
        let live = LivePolicy::load(&path).unwrap();
        let sink = MemorySink::new();
        let gate = following(Mode::PartialAuto, &live, |b| b.audit(sink.clone()));
        let before = gate.policy_digest();
        std::fs::write(&path, &text).unwrap();
        let reloaded = live.reload("test");
        let look_now = code(gate.run(|| look(format!("h18-25-{what}"))));
        match reloaded {
            Err(_) => {
                assert_eq!(
                    look_now, "DENY_LISTED",
                    "{what}: refused, but the old deny is gone"
                );
                assert_eq!(gate.policy_digest(), before, "{what}");
                assert!(
                    sink.records()
                        .iter()
                        .any(|r| matches!(r.stage, Stage::PolicyRefused)),
                    "{what}"
                );
            }
            Ok(_) => {
                // Accepted: it must be a file that checks; which of these should is the question.
                panic!(
                    "{what}: accepted ({look_now}); digest now {:?}",
                    gate.policy_digest()
                );
            }
        }
    }
    // A file with a BOM, or CRLF line ends, means what it says or is refused; never less.
    for (what, text) in [
        (
            "bom",
            "\u{feff}format = 1\n[defaults]\ndeny = [\"ap.look\"]\n",
        ),
        (
            "crlf",
            "format = 1\r\n[defaults]\r\ndeny = [\"ap.look\"]\r\n",
        ),
        ("dotted keys", "format = 1\ndefaults.deny = [\"ap.look\"]\n"),
        (
            "inline table",
            "format = 1\ndefaults = { deny = [\"ap.look\"] }\n",
        ),
        (
            "escaped key",
            "format = 1\n[principals.\"al\\u0069ce\"]\ndeny = [\"ap.look\"]\n",
        ),
    ] {
        if let Ok(file) = PolicyFile::parse("ap.toml", text) {
            let gate = Gate::builder()
                .mode(Mode::PartialAuto)
                .principal("alice")
                .policy(LivePolicy::new(file))
                .build()
                .unwrap();
            assert_eq!(
                code(gate.run(|| look(format!("h18-25-{what}")))),
                "DENY_LISTED",
                "{what}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Guarantee 18 with `watch`: a watched file rewritten with text that does not check, then deleted,
/// leaves the gates on the policy in force; a good text after that is followed.
#[test]
fn h18_26_watch_keeps_the_policy_through_bad_and_missing_files() {
    let (dir, path) = ops_file("watch", "format = 1\n[defaults]\ndeny = [\"ap.look\"]\n");
    let live = LivePolicy::load(&path).unwrap();
    let gate = following(Mode::PartialAuto, &live, |b| b);
    let watch = live.watch(Duration::from_millis(20)).unwrap();
    std::fs::write(&path, "format = 1\n[defaults]\ndeny = [\n").unwrap();
    thread::sleep(Duration::from_millis(200));
    assert_eq!(code(gate.run(|| look("h18-26".into()))), "DENY_LISTED");
    std::fs::remove_file(&path).unwrap();
    thread::sleep(Duration::from_millis(200));
    assert_eq!(code(gate.run(|| look("h18-26".into()))), "DENY_LISTED");
    std::fs::write(
        &path,
        "format = 1\n[defaults]\ndeny = [\"ap.look\", \"ap.push\"]\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while code(gate.run(|| push("h18-26".into()))) != "DENY_LISTED" {
        assert!(
            Instant::now() < deadline,
            "the watch never followed the good file"
        );
        thread::sleep(Duration::from_millis(20));
    }
    drop(watch);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Run in a child process by h18_27 (nothing to do otherwise): a reload of a deeply nested file
/// (within the size limit).
#[test]
fn deep_child() {
    if std::env::var_os("AP_DEEP_CHILD").is_none() {
        return;
    }
    let (dir, path) = ops_file("deep", "format = 1\n[defaults]\ndeny = [\"ap.look\"]\n");
    let live = LivePolicy::load(&path).unwrap();
    let gate = following(Mode::PartialAuto, &live, |b| b);
    let open = 400_000;
    std::fs::write(
        &path,
        format!("format = 1\nx = {}{}\n", "[".repeat(open), "]".repeat(open)),
    )
    .unwrap();
    assert!(live.reload("test").is_err());
    let mut inline = String::from("format = 1\nx = ");
    for _ in 0..300_000 {
        inline.push_str("{a=");
    }
    inline.push('1');
    inline.push_str(&"}".repeat(300_000));
    std::fs::write(&path, inline).unwrap();
    assert!(live.reload("test").is_err());
    assert_eq!(code(gate.run(|| look("deep".into()))), "DENY_LISTED");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Guarantee 18: a file that does not check is refused and the policy in force kept, so the process
/// that follows it keeps running. A reload of a deeply nested file (well under the 1 MiB limit) must be
/// refused, not bring the process down.
#[test]
fn h18_27_deeply_nested_file_is_refused_not_fatal() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &format!("{}::deep_child", module_path!().split_once("::").unwrap().1),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("AP_DEEP_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("1 passed"),
        "the process following the policy died on a reload: {:?}\n{stdout}\n{stderr}",
        out.status
    );
}

// ===================================================================================================
// Argument rules against argument values.

const WIRE_MAX_50: &str =
    "format = 1\n[[defaults.arguments]]\ntool = \"ap.wire\"\nparameter = \"amount\"\nmax = 50\n";

fn argument_gate(text: &str) -> (Gate, PolicyFile) {
    let file = pf(text);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(approve_all())
        .policy(LivePolicy::new(file.clone()))
        .build()
        .unwrap();
    (gate, file)
}

/// A call by name through `gate`, its outcome as a code.
fn by_name(gate: &Gate, tool: &str, args: serde_json::Value) -> String {
    let fut = toolgate::registry().call(gate, tool, args);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match rt.block_on(fut) {
        Ok(v) => format!("ran ({v})"),
        Err(e) => e.code().to_string(),
    }
}

/// Guarantee 18 on numbers: `max` on an integer, at the bounds and past them, directly and by name;
/// `explain` says what the gate does.
#[test]
fn h18_28_integer_bounds_direct_and_by_name() {
    let (gate, file) = argument_gate(WIRE_MAX_50);
    assert_eq!(code(gate.run(|| wire(50))), "ran (50)");
    assert_eq!(code(gate.run(|| wire(51))), "ARGUMENT_REFUSED");
    assert_eq!(code(gate.run(|| wire(i64::MAX))), "ARGUMENT_REFUSED");
    assert_eq!(
        code(gate.run(|| wire(i64::MIN))),
        "ran (-9223372036854775808)"
    );
    for args in [
        serde_json::json!({"amount": 51}),
        serde_json::json!({"amount": 9_223_372_036_854_775_807i64}),
        serde_json::json!({"amount": 18_446_744_073_709_551_615u64}),
        serde_json::json!({"amount": 50.5}),
        serde_json::json!({"amount": 5.1e1}),
        serde_json::json!({"amount": "1000"}),
        serde_json::json!({"amount": null}),
    ] {
        let outcome = by_name(&gate, "ap.wire", args.clone());
        assert!(!outcome.starts_with("ran"), "{args} ran: {outcome}");
        let explained = file.explain(None, None, Mode::FullAuto, "ap.wire", &args);
        if let Ok(e) = explained {
            assert!(
                e.decision.starts_with("refused"),
                "explain says {e} for {args}, the gate {outcome}"
            );
        }
    }
}

/// Guarantee 18 on unsigned numbers past `i64::MAX`: a rule `max = 50` on a `u64` must refuse
/// `u64::MAX` and `2^63`, which read as negative numbers if converted carelessly.
#[test]
fn h18_29_u64_past_i64_max() {
    let (gate, _) = argument_gate(
        "format = 1\n[[defaults.arguments]]\ntool = \"ap.big\"\nparameter = \"n\"\nmax = 50\n",
    );
    for n in [u64::MAX, 1 << 63, (1 << 63) + 49, 51] {
        let outcome = code(gate.run(|| big(n)));
        assert!(!has_run(&format!("big:{n}")), "{n} ran: {outcome}");
        assert_eq!(outcome, "ARGUMENT_REFUSED", "{n}");
    }
}

/// Guarantee 18 on floats: `max = 50` on an `f64` must refuse 50.5, 1e308, infinity and NaN (the last
/// two serialize as `null`, which a rule cannot judge, so it refuses), and `min = 0` must refuse -0.5.
#[test]
fn h18_30_floats_fractions_infinities_nan() {
    let (gate, file) = argument_gate(
        "format = 1\n[[defaults.arguments]]\ntool = \"ap.ratio\"\nparameter = \"x\"\nmin = 0\nmax = 50\n",
    );
    for (i, x) in [
        50.5,
        50.000_000_001,
        1e308,
        f64::INFINITY,
        f64::NAN,
        -0.5,
        f64::NEG_INFINITY,
        -f64::MIN_POSITIVE,
    ]
    .into_iter()
    .enumerate()
    {
        let tag = format!("h18-30-{i}");
        let outcome = code(gate.run(|| ratio(x, tag.clone())));
        assert!(!has_run(&format!("ratio:{tag}")), "x = {x} ran: {outcome}");
        let args = serde_json::json!({"x": x, "tag": "t"});
        if let Ok(e) = file.explain(None, None, Mode::FullAuto, "ap.ratio", &args) {
            assert!(
                e.decision.starts_with("refused"),
                "explain says {e} for x = {x}, the gate {outcome}"
            );
        }
    }
    assert_eq!(
        code(gate.run(|| ratio(50.0, "h18-30-ok".into()))),
        "ran (50.0)"
    );
}

/// Guarantee 18 on optional parameters: a value the rule cannot judge is refused, `None` (`null`, or
/// the key left out of a call by name) included.
#[test]
fn h18_31_optional_parameter_left_out() {
    let (gate, _) = argument_gate(
        "format = 1\n[[defaults.arguments]]\ntool = \"ap.maybe\"\nparameter = \"qty\"\nmax = 5\n",
    );
    assert_eq!(
        code(gate.run(|| maybe(Some(6), "h18-31-six".into()))),
        "ARGUMENT_REFUSED"
    );
    let direct = code(gate.run(|| maybe(None, "h18-31-none".into())));
    let named = by_name(
        &gate,
        "ap.maybe",
        serde_json::json!({"tag": "h18-31-absent"}),
    );
    assert_eq!(
        (direct.as_str(), named.as_str()),
        ("ARGUMENT_REFUSED", "ARGUMENT_REFUSED")
    );
}

/// Guarantee 18 on lists: a `refuse` rule on a list refuses the call when any of its texts matches,
/// wherever it sits in the list, directly and by name.
#[test]
fn h18_32_lists_any_text_matches() {
    let (gate, _) = argument_gate(
        "format = 1\n[[defaults.arguments]]\ntool = \"ap.many\"\nparameter = \"hosts\"\nrefuse = [\"prod-*\"]\n",
    );
    let outcome = code(gate.run(|| {
        many(
            vec!["staging".into(), "ok".into(), "prod-db".into()],
            "h18-32".into(),
        )
    }));
    assert_eq!(outcome, "ARGUMENT_REFUSED");
    assert_eq!(
        by_name(
            &gate,
            "ap.many",
            serde_json::json!({"hosts": ["a", "prod-x"], "tag": "h18-32n"})
        ),
        "ARGUMENT_REFUSED"
    );
    assert_eq!(
        code(gate.run(|| many(vec![], "h18-32-empty".into()))),
        "ran (\"h18-32-empty\")"
    );
}

/// Guarantee 18 on text: look-alike values against `refuse = ["prod-*"]`. Which pass is the glob's
/// (byte-for-byte) semantics; what this test asserts is that `explain` and the gate agree on each, so
/// that what an operator is shown is what the gate does, and that exact matches are refused.
#[test]
fn h18_33_unicode_lookalikes_gate_and_explain_agree() {
    let (gate, file) = argument_gate(
        "format = 1\n[[defaults.arguments]]\ntool = \"ap.push\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n",
    );
    let mut passed = Vec::new();
    for host in [
        "prod-db",
        "prod-",
        "prod-\n",
        "prod-\u{202e}bd",
        "PROD-db",
        "\u{200b}prod-db",
        "pr\u{200b}od-db",
        "\u{440}rod-db",
        "prod\u{2010}db",
        "prod-db\u{0}",
        "ｐｒｏｄ-db",
    ] {
        let outcome = code(gate.run(|| push(host.to_owned())));
        let args = serde_json::json!({ "host": host });
        let explained = file
            .explain(None, None, Mode::PartialAuto, "ap.push", &args)
            .map(|e| e.decision);
        let gate_refused = outcome == "ARGUMENT_REFUSED";
        let explain_refused = explained
            .as_deref()
            .map(|d| d.starts_with("refused"))
            .unwrap_or(true);
        assert_eq!(
            gate_refused, explain_refused,
            "{host:?}: gate {outcome}, explain {explained:?}"
        );
        if !gate_refused {
            passed.push(host);
        }
    }
    assert!(
        !passed.contains(&"prod-db") && !passed.contains(&"prod-") && !passed.contains(&"prod-\n")
    );
    println!("look-alikes the glob lets through: {passed:?}");
}

/// Guarantee 18 on a value behind interior mutability: "a call decided under the old file is decided
/// again at its commit point", and the file's `refuse = ["prod-*"]` refuses `prod-db` (as the direct
/// call with `prod-db` shows). The call is decided with `host = "staging"`; while its `enter` record
/// is written (a slow sink), another handle to the same value sets it to `prod-db`.
///
/// What happens instead: the body runs on `prod-db`. The arguments are not read again at the commit
/// point for the file's rules (they are for an approval: h18_35 is refused).
#[test]
fn a18_34_argument_changed_behind_a_shared_handle_after_the_decision() {
    let live = LivePolicy::new(pf(
        "format = 1\n[[defaults.arguments]]\ntool = \"ap.shifty\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n",
    ));
    let hold = Hold::default();
    let sink = SlowSink {
        tool: "ap.shifty",
        hold: hold.clone(),
        inner: MemorySink::new(),
    };
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .policy(live)
        .build()
        .unwrap();
    let host = Host::new("staging");
    assert_eq!(
        code(gate.run(|| shifty(Host::new("prod-db"), "h18-34-direct".into()))),
        "ARGUMENT_REFUSED"
    );
    let (g, h) = (gate.clone(), host.clone());
    let call = thread::spawn(move || g.run(|| shifty(h, "h18-34".into())));
    hold.wait_arrived();
    host.set("prod-db");
    hold.release();
    let outcome = code(call.join().unwrap());
    assert!(
        !has_run("shifty:h18-34:prod-db"),
        "the body ran on `prod-db`, which the file refuses (the call was judged on `staging`): {outcome}"
    );
}

/// Guarantee 18 on a gate that keeps no record: a decision that waits (here for a budget store) reads
/// the argument rules again at the commit point, on the values the call has then. A value changed to
/// one the file refuses is refused; one changed to a value it allows runs with that value.
#[test]
fn h18_54_rules_read_again_after_a_wait_on_a_gate_without_records() {
    let live = LivePolicy::new(pf(
        "format = 1\n[[defaults.arguments]]\ntool = \"ap.shifty\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n",
    ));
    for (then, tag, refused) in [
        ("prod-db", "h18-54-refused", true),
        ("staging-2", "h18-54-allowed", false),
    ] {
        let hold = Hold::default();
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .budget_store(HoldingBudgets(hold.clone()))
            .budget(
                BudgetScope::tool("ap.shifty"),
                100,
                Duration::from_secs(3600),
            )
            .policy(live.clone())
            .build()
            .unwrap();
        let host = Host::new("staging");
        let (g, h) = (gate.clone(), host.clone());
        let call = thread::spawn(move || g.run(|| shifty(h, tag.into())));
        hold.wait_arrived();
        host.set(then);
        hold.release();
        let outcome = call.join().unwrap();
        if refused {
            let denied = outcome.expect_err("the value the file refuses ran");
            assert_eq!(denied.code(), "ARGUMENT_REFUSED");
            assert!(
                denied.detail().is_some_and(|d| d.contains("prod-db")),
                "the refusal names the value the rules read: {denied:?}"
            );
            assert!(!has_run(&format!("shifty:{tag}:prod-db")));
        } else {
            assert_eq!(outcome.unwrap(), then);
            assert!(has_run(&format!("shifty:{tag}:{then}")));
        }
    }
}

/// Guarantee 18 on the shortest path: a lone gate that keeps no record and counts nothing reads the
/// rules off the call's own arguments, refuses what they refuse, and lets the rest run, direct and by
/// name, sync and async.
#[test]
fn h18_55_a_lone_gate_without_records_reads_the_rules_off_the_call() {
    let live = LivePolicy::new(pf(
        "format = 1\n[[defaults.arguments]]\ntool = \"ap.shifty\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n\n[[defaults.arguments]]\ntool = \"ap.push_async\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n",
    ));
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .policy(live)
        .build()
        .unwrap();
    let denied = gate
        .run(|| shifty(Host::new("prod-db"), "h18-55".into()))
        .unwrap_err();
    assert_eq!(denied.code(), "ARGUMENT_REFUSED");
    assert_eq!(denied.mode(), Some(Mode::PartialAuto));
    assert!(
        denied
            .detail()
            .is_some_and(|d| d.contains("\"prod-db\" matches the refused pattern \"prod-*\""))
    );
    assert!(!has_run("shifty:h18-55:prod-db"));
    assert_eq!(
        gate.run(|| shifty(Host::new("staging"), "h18-55".into()))
            .unwrap(),
        "staging"
    );
    let by_name = by_name(
        &gate,
        "ap.shifty",
        serde_json::json!({"host": "prod-eu", "tag": "h18-55-by-name"}),
    );
    assert_eq!(by_name, "ARGUMENT_REFUSED");
    assert!(!has_run("shifty:h18-55-by-name:prod-eu"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let refused = runtime.block_on(gate.scope(push_async("prod-h18-55".into())));
    assert_eq!(refused.unwrap_err().code(), "ARGUMENT_REFUSED");
    assert!(!has_run("push_async:prod-h18-55"));
    assert!(
        runtime
            .block_on(gate.scope(push_async("dev-h18-55".into())))
            .is_ok()
    );
}

/// Guarantee 18 (and 7) with an approver: the same change while the approver thinks is caught by the
/// arguments written again before the body.
#[test]
fn h18_35_argument_changed_while_the_approver_thinks() {
    let live = LivePolicy::new(pf(
        "format = 1\n[defaults]\nask = [\"ap.shifty\"]\n[[defaults.arguments]]\ntool = \"ap.shifty\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n",
    ));
    let hold = Hold::default();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .approver(holding_approver(hold.clone(), Approval::Approve))
        .policy(live)
        .build()
        .unwrap();
    let host = Host::new("staging");
    let (g, h) = (gate.clone(), host.clone());
    let call = thread::spawn(move || g.run(|| shifty(h, "h18-35".into())));
    hold.wait_arrived();
    host.set("prod-db");
    hold.release();
    let outcome = code(call.join().unwrap());
    assert!(!has_run("shifty:h18-35:prod-db"), "{outcome}");
}

/// Guarantee 18: a rule on a redacted parameter is refused when the file is read (it could not be
/// judged without showing the secret), and a call's refusal never quotes a redacted value.
#[test]
fn h18_36_redacted_parameters() {
    let errors = PolicyFile::parse(
        "ap.toml",
        "format = 1\n[[defaults.arguments]]\ntool = \"ap.login\"\nparameter = \"token\"\nrefuse = [\"x*\"]\n",
    )
    .unwrap_err();
    assert!(errors.to_string().contains("token"), "{errors}");
    let (gate, _) = argument_gate(
        "format = 1\n[[defaults.arguments]]\ntool = \"ap.login\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n",
    );
    let refused = gate
        .run(|| login("prod-db".into(), "s3cr3t-h18-36".into()))
        .unwrap_err();
    assert_eq!(refused.code(), "ARGUMENT_REFUSED");
    let shown = format!(
        "{} {:?} {}",
        refused.message(),
        refused.detail(),
        serde_json::to_string(&refused).unwrap()
    );
    assert!(!shown.contains("s3cr3t-h18-36"), "{shown}");
}

// ===================================================================================================
// What a human is shown: errors, explain, diff, refusals and records.

/// What a terminal would act on or hide: escape sequences, carriage returns, bidirectional overrides,
/// zero-width characters. (Line breaks are counted separately.)
fn hides(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| {
            (c.is_control() && *c != '\n')
                || matches!(*c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}' | '\u{2028}' | '\u{2029}')
        })
        .collect()
}

/// Guarantee 18's checking, as an operator reads it (`policy check`, `PolicyErrors`' message): every
/// problem is reported "with its line and column", one per line. A file written by someone else (a
/// change proposed for review) carries an escape sequence and a line break in a key, a deny pattern
/// or a parameter name; a value that is not a mode is shown escaped (`"X\u{1b}[2K..."`), and these
/// must be too.
///
/// What happens instead: the unknown key, the deny pattern and the parameter name are echoed raw: the
/// message holds ESC `[2K` (erase the line) and a line break followed by the forged line
/// `ap.toml:9:9: ok`, and, for the key, a right-to-left override (U+202E).
#[test]
fn a18_37_policy_errors_echo_file_written_text_raw() {
    let mut raw = Vec::new();
    for text in [
        // not a mode: escaped, as it should be
        "format = 1\n[defaults]\nceiling = \"X\\u001b[2K\\nap.toml:9:9: ok\"\n",
        // an unknown key
        "format = 1\n[defaults]\n\"d\\u202eny\\u001b[2K\\nap.toml:9:9: ok\" = 1\n",
        // a deny pattern that is not valid
        "format = 1\n[defaults]\ndeny = [\"ap.\\u001b[2K\\nap.toml:9:9: ok\"]\n",
        // a parameter the tool does not have
        "format = 1\n[[defaults.arguments]]\ntool = \"ap.push\"\nparameter = \"h\\u001b[2K\\nap.toml:9:9: ok\"\nrefuse = [\"x\"]\n",
    ] {
        let errors = PolicyFile::parse("ap.toml", text).unwrap_err();
        let shown = errors.to_string();
        if !hides(&shown).is_empty() || shown.lines().count() != errors.0.len() {
            raw.push(shown);
        }
    }
    assert!(
        raw.is_empty(),
        "errors that show file-written control characters raw: {raw:#?}"
    );
}

/// Guarantee 18's `explain` and refusals as shown: an argument value the agent wrote (the call an
/// operator asks about) and a `refuse` glob the file wrote, each with an escape sequence and a line
/// break. `explain`'s text, the refusal's message and the `refused` record's message must not carry
/// them raw.
#[test]
fn h18_38_explain_and_refusals_escape_agent_and_file_text() {
    let file = pf(
        "format = 1\n[[defaults.arguments]]\ntool = \"ap.push\"\nparameter = \"host\"\nrefuse = [\"prod-*\\u001b[2K\\nap.toml: ok*\"]\n",
    );
    let host = "prod-\u{1b}[2K\nap.toml: ok \u{202e}1";
    let args = serde_json::json!({ "host": host });
    let explained = file
        .explain(Some("alice"), None, Mode::PartialAuto, "ap.push", &args)
        .unwrap();
    let shown = explained.to_string();
    assert!(
        !shown.lines().any(|l| l.starts_with("ap.toml: ok")),
        "explain shows a forged line: {shown:?}"
    );
    assert!(
        hides(&shown).is_empty(),
        "explain shows raw {:?}: {shown:?}",
        hides(&shown)
    );
    let sink = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink.clone())
        .policy(LivePolicy::new(file))
        .build()
        .unwrap();
    let refused = gate.run(|| push(host.to_owned())).unwrap_err();
    assert_eq!(refused.code(), "ARGUMENT_REFUSED");
    let message = refused.message();
    assert!(
        hides(&message).is_empty() && !message.contains('\n'),
        "refusal message {message:?}"
    );
    let record = sink
        .records()
        .into_iter()
        .find(|r| matches!(r.stage, Stage::Refused))
        .unwrap();
    let m = record.message.unwrap_or_default();
    assert!(
        hides(&m).is_empty() && !m.contains('\n'),
        "refused record message {m:?}"
    );
}

/// Guarantee 18's `diff` as shown: a principal's table named with an escape sequence and a line
/// break forging a "narrows" line. The diff's text must show the name escaped.
#[test]
fn h18_39_diff_escapes_file_written_names() {
    let old = pf(
        "format = 1\n[principals.\"bob\\u001b[1A\\r\\nnarrows [defaults]: nothing\"]\ndeny = [\"ap.push\"]\n",
    );
    let new = pf(EMPTY);
    let diff = old.diff(&new);
    let shown = diff.to_string();
    assert!(diff.widens());
    assert!(
        hides(&shown).is_empty(),
        "diff shows raw {:?}: {shown:?}",
        hides(&shown)
    );
    assert_eq!(
        shown.lines().count(),
        diff.changes.len(),
        "a line forged in the diff: {shown:?}"
    );
}

/// Guarantee 18's `diff`: changes that widen must be reported as widening, however they are written.
#[test]
fn h18_40_diff_never_calls_a_widening_change_narrowing() {
    let arg = |scope: &str, rule: &str| {
        format!(
            "format = 1\n[[{scope}.arguments]]\ntool = \"ap.wire\"\nparameter = \"amount\"\n{rule}\n"
        )
    };
    let pairs: Vec<(&str, String, String)> = vec![
        ("deny glob narrower", "format = 1\n[defaults]\ndeny = [\"ap.*\"]\n".into(), "format = 1\n[defaults]\ndeny = [\"ap.w*\"]\n".into()),
        ("deny to ask", "format = 1\n[defaults]\ndeny = [\"ap.push\"]\n".into(), "format = 1\n[defaults]\nask = [\"ap.push\"]\n".into()),
        ("ceiling up", "format = 1\n[defaults]\nceiling = \"SHADOW\"\n".into(), "format = 1\n[defaults]\nceiling = \"ADVISORY\"\n".into()),
        ("ceiling to one principal", "format = 1\n[defaults]\nceiling = \"SHADOW\"\n".into(), "format = 1\n[principals.alice]\nceiling = \"SHADOW\"\n".into()),
        ("ask_at up", "format = 1\n[defaults]\nask_at = \"LOW_WRITE\"\n".into(), "format = 1\n[defaults]\nask_at = \"HIGH_WRITE\"\n".into()),
        ("ask_at to ask list", "format = 1\n[defaults]\nask_at = \"LOW_WRITE\"\n".into(), "format = 1\n[defaults]\nask = [\"ap.push\"]\n".into()),
        ("taint removed", "format = 1\n[defaults]\ntaint = \"refuse\"\n".into(), EMPTY.into()),
        ("taint to an agent", "format = 1\n[defaults]\ntaint = \"refuse\"\n".into(), "format = 1\n[agents.bot]\ntaint = \"refuse\"\n".into()),
        ("max up", arg("defaults", "max = 50"), arg("defaults", "max = 60")),
        ("min down", arg("defaults", "min = 10"), arg("defaults", "min = 0")),
        ("max to min", arg("defaults", "max = 50"), arg("defaults", "min = 0")),
        ("one_of grows", arg("defaults", "one_of = [1, 2]"), arg("defaults", "one_of = [1, 2, 3]")),
        ("rule to a principal", arg("defaults", "max = 50"), arg("principals.alice", "max = 50")),
        (
            "refuse glob narrower",
            "format = 1\n[[defaults.arguments]]\ntool = \"ap.push\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n".into(),
            "format = 1\n[[defaults.arguments]]\ntool = \"ap.push\"\nparameter = \"host\"\nrefuse = [\"prod-?*\"]\n".into(),
        ),
        (
            "rule moved to another tool and a stricter one added",
            arg("defaults", "max = 50"),
            "format = 1\n[[defaults.arguments]]\ntool = \"ap.big\"\nparameter = \"n\"\nmax = 1\n[[defaults.arguments]]\ntool = \"ap.wire\"\nparameter = \"amount\"\nmax = 5000\n"
                .to_owned(),
        ),
        (
            "two rules on one parameter, the strict one loosened",
            format!("{}max = 50\n[[defaults.arguments]]\ntool = \"ap.wire\"\nparameter = \"amount\"\nmax = 500\n", &arg("defaults", "")[..]),
            format!("{}max = 5000\n[[defaults.arguments]]\ntool = \"ap.wire\"\nparameter = \"amount\"\nmax = 500\n", &arg("defaults", "")[..]),
        ),
        ("ask list to ask_at", "format = 1\n[defaults]\nask = [\"ap.*\"]\n".into(), "format = 1\n[defaults]\nask_at = \"LOW_WRITE\"\n".into()),
        (
            "one refuse glob dropped",
            "format = 1\n[[defaults.arguments]]\ntool = \"ap.push\"\nparameter = \"host\"\nrefuse = [\"prod-*\", \"*.prod.*\"]\n".into(),
            "format = 1\n[[defaults.arguments]]\ntool = \"ap.push\"\nparameter = \"host\"\nrefuse = [\"*.prod.*\"]\n".into(),
        ),
        ("deny to a ceiling that still runs it", "format = 1\n[defaults]\ndeny = [\"ap.look\"]\n".into(), "format = 1\n[defaults]\nceiling = \"SHADOW\"\n".into()),
        ("principal renamed", "format = 1\n[principals.alice]\ndeny = [\"ap.push\"]\n".into(), "format = 1\n[principals.Alice]\ndeny = [\"ap.push\"]\n".into()),
        ("principal table to agent table", "format = 1\n[principals.alice]\ndeny = [\"ap.push\"]\n".into(), "format = 1\n[agents.alice]\ndeny = [\"ap.push\"]\n".into()),
    ];
    let mut missed = Vec::new();
    for (what, old, new) in &pairs {
        let (Ok(old), Ok(new)) = (
            PolicyFile::parse("old.toml", old),
            PolicyFile::parse("new.toml", new),
        ) else {
            continue;
        };
        let diff = old.diff(&new);
        if !diff.widens()
            || !diff
                .changes
                .iter()
                .any(|c| c.direction == Direction::Widens)
        {
            missed.push(format!("{what}: {diff}"));
        }
    }
    assert!(
        missed.is_empty(),
        "widening changes the diff calls narrowing: {missed:#?}"
    );
}

/// Guarantee 18: records name the policy's digest. `policy_changed` names the new digest and who
/// changed it; a refused reload writes `policy_refused` naming the digest still followed; every call's
/// record names the digest of the file its gate followed.
#[test]
fn h18_41_records_name_the_digest() {
    let (dir, path) = ops_file("digest", EMPTY);
    let live = LivePolicy::load(&path).unwrap();
    let first = live.current().unwrap().digest().to_owned();
    let sink = MemorySink::new();
    let gate = following(Mode::PartialAuto, &live, |b| b.audit(sink.clone()));
    gate.run(|| look("h18-41-a".into())).unwrap();
    std::fs::write(&path, "format = 1\n[defaults]\ndeny = [\"ap.push\"]\n").unwrap();
    assert!(live.reload("operator-h18-41").unwrap());
    let second = live.current().unwrap().digest().to_owned();
    gate.run(|| look("h18-41-b".into())).unwrap();
    std::fs::write(&path, "format = 1\n[defaults]\ndeny = [\"ap.nope\"]\n").unwrap();
    assert!(live.reload("operator-h18-41").is_err());
    assert!(gate.run(|| push("h18-41".into())).is_err());
    let records = sink.take();
    let stages: Vec<_> = records
        .iter()
        .map(|r| (format!("{:?}", r.stage), r.policy_digest.clone()))
        .collect();
    let d = |s: &str| Some(s.to_owned());
    assert_eq!(
        stages,
        vec![
            ("Enter".into(), d(&first)),
            ("Exit".into(), d(&first)),
            ("PolicyChanged".into(), d(&second)),
            ("Enter".into(), d(&second)),
            ("Exit".into(), d(&second)),
            ("PolicyRefused".into(), d(&second)),
            ("Refused".into(), d(&second)),
        ]
    );
    let changed = &records[2];
    assert!(
        changed.by.as_deref() == Some("operator-h18-41")
            || changed
                .message
                .as_deref()
                .unwrap_or("")
                .contains("operator-h18-41")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ===================================================================================================
// More grants, races and paths.

/// Guarantee 18, with a two-step answer "for the session": the operator approves `wire(180044)` for
/// the session (a grant of exactly these arguments); the operator's file then adds `max = 50`. The
/// call, made again, must be refused by the new rule.
#[test]
fn h18_43_two_step_session_answer_does_not_outrun_an_argument_rule_added_later() {
    let live = LivePolicy::new(pf(EMPTY));
    let gate = following(Mode::FullAuto, &live, |b| b.two_step_approvals());
    let pending = gate.run(|| wire(180_044)).unwrap_err();
    gate.answer(
        pending.approval_token().unwrap(),
        toolgate::approval::store::Answer::Approve {
            by: "ops".into(),
            for_session: true,
            confirmation: None,
        },
    )
    .unwrap();
    assert_eq!(code(gate.run(|| wire(180_044))), "ran (180044)");
    live.replace(pf(WIRE_MAX_50), "test");
    let outcome = code(gate.run(|| wire(180_044)));
    assert_eq!(
        outcome, "ARGUMENT_REFUSED",
        "the call the new file refuses ran again under its grant"
    );
}

/// Guarantee 18: the file's own `ask` makes a LOW_WRITE tool ask; the approver grants it for the
/// session on a harmless host. The same file's `refuse = ["prod-*"]` must still refuse `prod-db`.
///
/// What happens instead, on a gate with no audit sink: `push("prod-db-a18-44")` runs under the grant
/// that the file's `ask` caused, though `push("prod-a18-44")` was refused `ARGUMENT_REFUSED` before it.
#[test]
fn a18_44_grant_caused_by_the_files_own_ask_skips_its_refuse_rule() {
    let file = pf(
        "format = 1\n[defaults]\nask = [\"ap.push\"]\n[[defaults.arguments]]\ntool = \"ap.push\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n",
    );
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .approver(|_r: &ApprovalRequest<'_>| {
            Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600)))
        })
        .policy(LivePolicy::new(file))
        .build()
        .unwrap();
    assert_eq!(
        code(gate.run(|| push("prod-a18-44".into()))),
        "ARGUMENT_REFUSED"
    );
    assert_eq!(
        code(gate.run(|| push("staging-a18-44".into()))),
        "ran (\"staging-a18-44\")"
    );
    let outcome = code(gate.run(|| push("prod-db-a18-44".into())));
    assert!(
        !has_run("push:prod-db-a18-44"),
        "`prod-db-a18-44` ran under the grant: {outcome}"
    );
}

/// Guarantees 18 and 14: the latch closing on one thread while the policy is replaced on another. The
/// latch never opens again, whatever the order: after both, a write must ask.
#[test]
fn h18_45_taint_latch_closing_racing_a_replacement() {
    let a = pf("format = 1\n[defaults]\ndeny = [\"ap.full_only\"]\n");
    let b = pf("format = 1\n[defaults]\nask = [\"ap.look\"]\n");
    let mut reopened = 0;
    for round in 0..300 {
        let live = LivePolicy::new(a.clone());
        let gate = following(Mode::PartialAuto, &live, |b| b);
        let start = Arc::new(std::sync::Barrier::new(2));
        let (g, s) = (gate.clone(), start.clone());
        let reader = thread::spawn(move || {
            s.wait();
            g.run(|| fetch(format!("h18-45-{round}"))).unwrap();
        });
        start.wait();
        live.replace(if round % 2 == 0 { b.clone() } else { pf(EMPTY) }, "race");
        reader.join().unwrap();
        let marker = format!("h18-45-{round}");
        if gate.taint().is_none() || gate.run(|| push(marker.clone())).is_ok() {
            reopened += 1;
        }
    }
    assert_eq!(
        reopened, 0,
        "sessions whose latch a racing replacement opened"
    );
}

/// Guarantee 18: two replacements at once. When both have returned, every gate follows the file the
/// live policy says is current.
#[test]
fn h18_46_two_replacements_at_once_leave_gates_on_the_current_file() {
    let a = pf("format = 1\n[defaults]\ndeny = [\"ap.look\"]\n");
    let b = pf("format = 1\n[defaults]\ndeny = [\"ap.push\"]\n");
    let mut split = 0;
    for _ in 0..300 {
        let live = LivePolicy::new(pf(EMPTY));
        let gates: Vec<Gate> = (0..3)
            .map(|_| following(Mode::PartialAuto, &live, |b| b))
            .collect();
        let start = Arc::new(std::sync::Barrier::new(2));
        let (l, s, b2) = (live.clone(), start.clone(), b.clone());
        let other = thread::spawn(move || {
            s.wait();
            l.replace(b2, "two");
        });
        start.wait();
        live.replace(a.clone(), "one");
        other.join().unwrap();
        let current = live.current().unwrap().digest().to_owned();
        for gate in &gates {
            if gate.policy_digest().as_deref() != Some(current.as_str()) {
                split += 1;
            }
        }
    }
    assert_eq!(split, 0, "gates left on a file that is not the current one");
}

/// Guarantee 18 on the async path: an async tool's `enter` waits on an async sink; the operator's new
/// file denies the tool meanwhile. The body must not run.
#[test]
fn h18_47_deny_added_while_an_async_sink_commits_enter() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let live = LivePolicy::new(pf(EMPTY));
    let arrived = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let sink = AsyncSlowSink {
        tool: "ap.push_async",
        arrived: arrived.clone(),
        release: release.clone(),
        inner: MemorySink::new(),
    };
    let records = sink.inner.clone();
    let gate = following(Mode::PartialAuto, &live, |b| b.audit(sink));
    let outcome = rt.block_on(async {
        let task = tokio::spawn(gate.scope(async { push_async("h18-47".into()).await }));
        arrived.notified().await;
        let l = live.clone();
        tokio::task::spawn_blocking(move || {
            l.replace(
                pf("format = 1\n[defaults]\ndeny = [\"ap.push_async\"]\n"),
                "test",
            )
        })
        .await
        .unwrap();
        release.notify_one();
        code(task.await.unwrap())
    });
    assert!(!has_run("push_async:h18-47"), "{outcome}");
    assert_eq!(outcome, "DENY_LISTED");
    assert!(
        records
            .records()
            .iter()
            .any(|r| matches!(r.stage, Stage::Exit) && r.code.as_deref() == Some("DENY_LISTED"))
    );
}

/// Guarantee 18 on the fast path: a tool the code allows outright, called often (its verdict
/// precomputed), then an argument rule added by a replacement; the next call with a refused value is
/// refused, directly and by name.
#[test]
fn h18_48_warm_fast_path_then_argument_rule() {
    let live = LivePolicy::new(pf(EMPTY));
    let gate = following(Mode::PartialAuto, &live, |b| b);
    for i in 0..100 {
        gate.run(|| push(format!("warm-{i}"))).unwrap();
    }
    live.replace(pf("format = 1\n[[defaults.arguments]]\ntool = \"ap.push\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n"), "test");
    assert_eq!(
        code(gate.run(|| push("prod-h18-48".into()))),
        "ARGUMENT_REFUSED"
    );
    assert_eq!(
        by_name(
            &gate,
            "ap.push",
            serde_json::json!({"host": "prod-h18-48n"})
        ),
        "ARGUMENT_REFUSED"
    );
}

/// Guarantee 18 with a watch and an API replacement: the operator replaces the policy by API with a
/// stricter one while a watch follows the file, whose text does not change. The watch must not put the
/// file's older, wider policy back behind the operator's back.
#[test]
fn h18_49_watch_does_not_undo_an_api_replacement() {
    let (dir, path) = ops_file("watch-api", EMPTY);
    let live = LivePolicy::load(&path).unwrap();
    let gate = following(Mode::PartialAuto, &live, |b| b);
    let watch = live.watch(Duration::from_millis(10)).unwrap();
    thread::sleep(Duration::from_millis(100));
    live.replace(
        pf("format = 1\n[defaults]\ndeny = [\"ap.look\"]\n"),
        "ops by API",
    );
    thread::sleep(Duration::from_millis(300));
    assert_eq!(code(gate.run(|| look("h18-49".into()))), "DENY_LISTED");
    drop(watch);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `f` on a thread; whether it finished within `limit`.
fn finishes_within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> (bool, thread::JoinHandle<T>) {
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let d = done.clone();
    let handle = thread::spawn(move || {
        let out = f();
        *d.0.lock().unwrap() = true;
        d.1.notify_all();
        out
    });
    let (lock, cv) = &*done;
    let guard = lock.lock().unwrap();
    let (guard, _) = cv
        .wait_timeout_while(guard, limit, |finished| !*finished)
        .unwrap();
    (*guard, handle)
}

/// Guarantee 18: "a file that cannot be read or does not check is refused: the gates keep the policy
/// they follow". The policy's path is replaced by a FIFO (a named pipe) that nobody writes: a reload
/// must not hold up the gates, new gates, or an operator's `replace`; and a stream of more than
/// 1 MiB through it is refused (the file limit), not followed.
#[test]
fn h18_50_policy_path_turned_into_a_fifo() {
    let (dir, path) = ops_file("fifo", "format = 1\n[defaults]\ndeny = [\"ap.look\"]\n");
    let live = LivePolicy::load(&path).unwrap();
    let gate = following(Mode::PartialAuto, &live, |b| b);
    std::fs::remove_file(&path).unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap()
            .success()
    );
    let l = live.clone();
    let (reload_returned, reload) =
        finishes_within(Duration::from_millis(500), move || l.reload("test").is_ok());
    // While the reload waits (if it does), everything else goes on.
    let g = gate.clone();
    let (calls_go_on, _) = finishes_within(Duration::from_secs(2), move || {
        code(g.run(|| look("h18-50".into())))
    });
    let l = live.clone();
    let (builds_go_on, _) = finishes_within(Duration::from_secs(2), move || {
        Gate::builder()
            .mode(Mode::PartialAuto)
            .policy(l)
            .build()
            .map(|g| g.policy_digest())
    });
    let l = live.clone();
    let (replace_goes_on, _) = finishes_within(Duration::from_secs(2), move || {
        l.replace(
            pf("format = 1\n[defaults]\ndeny = [\"ap.look\", \"ap.push\"]\n"),
            "ops",
        )
    });
    // Feed the pipe 2 MiB of a policy that checks, so that a waiting reader ends.
    let p = path.clone();
    let writer = thread::spawn(move || {
        use std::io::Write;
        if let Ok(mut w) = std::fs::OpenOptions::new().write(true).open(&p) {
            let _ = w.write_all(b"format = 1\n");
            let _ = w.write_all("# pad\n".repeat(2 * 1024 * 1024 / 6).as_bytes());
            let _ = w.write_all(b"[defaults]\ndeny = [\"ap.look\", \"ap.many\"]\n");
        }
    });
    let accepted_oversized = reload.join().unwrap();
    writer.join().unwrap();
    assert!(
        calls_go_on && builds_go_on && replace_goes_on && !accepted_oversized,
        "reload returned within 0.5 s: {reload_returned}; meanwhile calls {calls_go_on}, builds {builds_go_on}, replace {replace_goes_on}; \
         the 2 MiB stream accepted: {accepted_oversized}"
    );
    assert_eq!(code(gate.run(|| push("h18-50".into()))), "DENY_LISTED");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Guarantee 18 on the paths that skip the full decision: a rule on a READ_ONLY tool's argument and on
/// an `untrusted_output` tool's, in a clean session and once the latch has closed (when the untrusted
/// tool no longer needs the full decision), on a gate with no sink.
#[test]
fn h18_51_argument_rules_on_reads_and_untrusted_tools_before_and_after_the_latch() {
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .policy(LivePolicy::new(pf(
            "format = 1\n[[defaults.arguments]]\ntool = \"ap.look\"\nparameter = \"q\"\nrefuse = [\"secret*\"]\n\
             [[defaults.arguments]]\ntool = \"ap.fetch\"\nparameter = \"url\"\nrefuse = [\"evil*\"]\n",
        )))
        .build()
        .unwrap();
    for i in 0..20 {
        gate.run(|| look(format!("warm-{i}"))).unwrap();
    }
    assert_eq!(
        code(gate.run(|| look("secret-h18-51a".into()))),
        "ARGUMENT_REFUSED"
    );
    assert_eq!(
        code(gate.run(|| fetch("evil-h18-51a".into()))),
        "ARGUMENT_REFUSED"
    );
    assert!(
        gate.taint().is_none(),
        "a refused untrusted call closed the latch"
    );
    gate.run(|| fetch("fine-h18-51".into())).unwrap();
    assert!(gate.taint().is_some());
    assert_eq!(
        code(gate.run(|| fetch("evil-h18-51b".into()))),
        "ARGUMENT_REFUSED"
    );
    assert_eq!(
        code(gate.run(|| look("secret-h18-51b".into()))),
        "ARGUMENT_REFUSED"
    );
}

/// Guarantee 18 (as a18_09) on the async path and through a clone: `max = 50` on `ap.wire_async.amount`;
/// the approver grants the tool for the session on `wire_async(12)`; a clone's `wire_async(180052)`
/// must be refused `ARGUMENT_REFUSED`.
///
/// What happens instead, on a gate with no audit sink: it runs, by the grant.
#[test]
fn a18_52_session_grant_skips_argument_rules_on_async_calls_and_clones() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_r: &ApprovalRequest<'_>| Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600))))
        .policy(LivePolicy::new(pf(
            "format = 1\n[[defaults.arguments]]\ntool = \"ap.wire_async\"\nparameter = \"amount\"\nmax = 50\n",
        )))
        .build()
        .unwrap();
    let clone = gate.clone();
    let (first, second) = rt.block_on(async {
        let first = code(gate.scope(wire_async(12)).await);
        let second = code(clone.scope(wire_async(180_052)).await);
        (first, second)
    });
    assert_eq!(first, "ran (12)");
    assert!(
        !has_run("wire_async:180052"),
        "a clone's async call ran past `max = 50` under the grant: {second}"
    );
}
