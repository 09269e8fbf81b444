//! Attacks on calls by name (`registry().call`), written from README.md, SECURITY.md and the rustdoc
//! alone, against the documented guarantees: the gate asked before the arguments are read, one decision
//! handed to the tool, the kill switch, every `enter` closed.
//!
//! Every tool records the argument it ran with, so that a test can tell exactly which call reached a
//! body. Hooks are one-shot closures fired from user code that toolgate runs during a call (an
//! argument's `Deserialize` and `Serialize`, an `escalate` function, an audit sink, an approver).

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use serde_json::{Value, json};
use toolgate::audit::{AuditError, AuditRecord, AuditSink, MemorySink, Outcome, Stage};
use toolgate::schemars::JsonSchema;
use toolgate::serde::{Deserialize, Deserializer, Serialize, Serializer};
use toolgate::{Approval, ApprovalRequest, Denied, Gate, Mode, Risk, registry, tool, toolset};

// ---------------------------------------------------------------------------------------------------------
// support
// ---------------------------------------------------------------------------------------------------------

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

type Hook = Mutex<Option<(usize, Box<dyn FnOnce() + Send>)>>;

/// Fired by `Deserialize for Evil`.
static DE_HOOK: Hook = Mutex::new(None);
/// Fired by `Serialize for Evil`.
static SER_HOOK: Hook = Mutex::new(None);
/// Fired by the `escalate` function.
static ESC_HOOK: Hook = Mutex::new(None);
/// Fired by `HookSink::record`.
static SINK_HOOK: Hook = Mutex::new(None);

/// Arms `hook` to run `f` at its `nth` firing (1-based) from now on.
fn arm(hook: &Hook, nth: usize, f: impl FnOnce() + Send + 'static) {
    *hook.lock().unwrap() = Some((nth, Box::new(f)));
}

fn disarm_all() {
    for h in [&DE_HOOK, &SER_HOOK, &ESC_HOOK, &SINK_HOOK] {
        *h.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

fn fire(hook: &Hook) {
    let f = {
        let mut slot = hook
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match slot.as_mut() {
            Some((n, _)) if *n > 1 => {
                *n -= 1;
                None
            }
            Some(_) => slot.take().map(|(_, f)| f),
            None => None,
        }
    };
    if let Some(f) = f {
        f();
    }
}

/// An argument whose (de)serialization runs hooks.
#[derive(Debug, Clone, JsonSchema)]
#[schemars(crate = "toolgate::schemars")]
pub struct Evil(pub u64);

impl Serialize for Evil {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        fire(&SER_HOOK);
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Evil {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = u64::deserialize(d)?;
        fire(&DE_HOOK);
        Ok(Evil(v))
    }
}

static RAN: Mutex<Vec<(&'static str, u64)>> = Mutex::new(Vec::new());

fn ran(tool: &'static str, x: u64) {
    RAN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push((tool, x));
}

fn take_runs() -> Vec<(&'static str, u64)> {
    std::mem::take(
        &mut *RAN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
}

/// Counts the approver's answers; rejects once `REJECT` is set.
static APPROVALS: AtomicUsize = AtomicUsize::new(0);
static REJECT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn counting_approver(_: &ApprovalRequest<'_>) -> Approval {
    APPROVALS.fetch_add(1, SeqCst);
    if REJECT.load(SeqCst) {
        Approval::Reject("no".into())
    } else {
        Approval::Approve
    }
}

fn reset() {
    disarm_all();
    take_runs();
    APPROVALS.store(0, SeqCst);
    REJECT.store(false, SeqCst);
    *WIDE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
}

/// A sink that keeps records in memory and fires `SINK_HOOK` on each record.
#[derive(Clone, Default)]
struct HookSink(MemorySink);

impl AuditSink for HookSink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        fire(&SINK_HOOK);
        self.0.record(record)
    }
}

/// Every `enter` of `gate` has its `exit`.
fn assert_balanced(records: &[AuditRecord]) {
    for r in records.iter().filter(|r| r.stage == Stage::Enter) {
        let exits = records
            .iter()
            .filter(|e| e.stage == Stage::Exit && e.call == r.call && e.gate == r.gate)
            .count();
        assert_eq!(
            exits, 1,
            "enter of {} (call {}) has {exits} exits: {records:#?}",
            r.tool, r.call
        );
    }
}

fn audited(mode: Mode) -> (Gate, HookSink) {
    let sink = HookSink::default();
    let gate = Gate::builder()
        .mode(mode)
        .approver(counting_approver)
        .audit(sink.clone())
        .build()
        .unwrap();
    (gate, sink)
}

fn call(gate: &Gate, id: &str, args: Value) -> Result<Value, toolgate::CallError> {
    registry()
        .call(gate, id, args)
        .now()
        .expect("sync tool completes at once")
}

/// A gate the tools' bodies can reach.
static WIDE: Mutex<Option<Gate>> = Mutex::new(None);

fn wide() -> Gate {
    WIDE.lock().unwrap().clone().expect("WIDE set")
}

/// Polls `fut` to completion on this thread with a no-op waker.
fn block_on<F: Future>(fut: F) -> F::Output {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    Pin::new(fut).poll(&mut cx)
}

/// Pending once, then ready.
struct YieldOnce(bool);
impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// tools
// ---------------------------------------------------------------------------------------------------------

/// high write
#[tool(risk = "HIGH_WRITE", domain = "rt2", callable)]
fn hi(x: Evil) -> Result<u64, Denied> {
    ran("hi", x.0);
    Ok(x.0)
}

/// low write; x = 7 calls itself by name under a narrower gate, x = 17 directly, x = 27 calls `hi` by name
#[tool(risk = "LOW_WRITE", domain = "rt2", callable)]
fn lo(x: Evil) -> Result<String, Denied> {
    ran("lo", x.0);
    let narrow = Gate::new(Mode::Shadow).unwrap();
    match x.0 {
        7 => {
            let r = narrow.run(|| call(&wide(), "rt2.lo", json!({"x": 8})));
            Ok(format!("{:?}", r.map_err(|e| e.code().to_string())))
        }
        17 => {
            let r = narrow.run(|| lo(Evil(18)));
            Ok(format!("{:?}", r.map_err(|e| e.code().to_string())))
        }
        27 => {
            let r = narrow.run(|| call(&wide(), "rt2.hi", json!({"x": 28})));
            Ok(format!("{:?}", r.map_err(|e| e.code().to_string())))
        }
        _ => Ok("done".into()),
    }
}

/// async low write; x >= 1000 yields once
#[tool(risk = "LOW_WRITE", domain = "rt2", callable)]
async fn alo(x: Evil) -> Result<u64, Denied> {
    if x.0 >= 1000 {
        YieldOnce(false).await;
    }
    ran("alo", x.0);
    Ok(x.0)
}

/// async high write
#[tool(risk = "HIGH_WRITE", domain = "rt2", callable)]
async fn ahi(x: Evil) -> Result<u64, Denied> {
    ran("ahi", x.0);
    Ok(x.0)
}

fn esc2(x: &Evil) -> Risk {
    fire(&ESC_HOOK);
    if x.0 == 1 {
        Risk::HighWrite
    } else {
        Risk::ReadOnly
    }
}

/// low write, escalated to high for x = 1
#[tool(risk = "LOW_WRITE", domain = "rt2", escalate = esc2, callable)]
fn esc_lo(x: Evil) -> Result<u64, Denied> {
    ran("esc_lo", x.0);
    Ok(x.0)
}

/// low write with a gate parameter
#[tool(risk = "LOW_WRITE", domain = "rt2", callable)]
fn glo(gate: &Gate, x: Evil) -> Result<u64, Denied> {
    let _ = gate;
    ran("glo", x.0);
    Ok(x.0)
}

/// high write with a redacted, recorded argument
#[tool(risk = "HIGH_WRITE", domain = "rt2", redact = [pin], record_arguments, callable)]
fn red(user: String, pin: Evil) -> Result<u64, Denied> {
    let _ = user;
    ran("red", pin.0);
    Ok(pin.0)
}

pub struct Set2;

#[toolset(domain = "rt2set")]
impl Set2 {
    /// associated high write
    #[tool(risk = "HIGH_WRITE", callable)]
    pub fn assoc(x: Evil) -> Result<u64, Denied> {
        ran("assoc", x.0);
        Ok(x.0)
    }
}

#[toolset(domain = "renamed")]
pub mod renamed {
    use toolgate::Denied;
    use toolgate::tool as gated;

    /// renamed attribute, callable
    #[gated(risk = "LOW_WRITE", callable)]
    pub fn rn(x: u64) -> Result<u64, Denied> {
        Ok(x)
    }

    /// holds a tool in its body
    #[gated(skip)]
    pub fn holder() -> Result<u64, Denied> {
        /// tool in a body, renamed attribute
        #[gated(risk = "LOW_WRITE", callable)]
        fn inbody(x: u64) -> Result<u64, Denied> {
            Ok(x)
        }
        inbody(1)
    }
}

// ---------------------------------------------------------------------------------------------------------
// attacks
// ---------------------------------------------------------------------------------------------------------

/// (1) the gate first: a refused tool answers its refusal whatever its arguments, without a digest.
#[test]
fn a1_refused_tool_refuses_before_parsing_and_no_digest() {
    let _s = serial();
    reset();
    let (gate, sink) = audited(Mode::Shadow);
    let parsed = Arc::new(AtomicUsize::new(0));
    let p = parsed.clone();
    arm(&DE_HOOK, 1, move || {
        p.fetch_add(1, SeqCst);
    });
    for args in [
        json!({"x": 1}),
        json!({"x": "bad"}),
        json!({"zz": 1}),
        json!(null),
    ] {
        for id in ["rt2.lo", "rt2.hi", "rt2.glo", "rt2.esc_lo", "rt2set.assoc"] {
            let e = call(&gate, id, args.clone()).unwrap_err();
            assert_eq!(e.code(), "MODE_NOT_ALLOWED", "{id} {args}");
        }
        let e = block_on(registry().call(&gate, "rt2.alo", args.clone())).unwrap_err();
        assert_eq!(e.code(), "MODE_NOT_ALLOWED");
    }
    assert_eq!(
        parsed.load(SeqCst),
        0,
        "arguments were parsed for a refused tool"
    );
    for r in sink.0.records() {
        assert!(
            r.arguments_digest.is_none() && r.arguments.is_none(),
            "{r:?}"
        );
    }
    assert!(take_runs().is_empty());
}

/// A `Deserialize` that lowers the gate: the call is decided at the lowered mode.
#[test]
fn a2_deserialize_lowering_the_gate_refuses_sync_and_async() {
    let _s = serial();
    for id in ["rt2.lo", "rt2.glo", "rt2.esc_lo", "rt2.alo"] {
        reset();
        let (gate, sink) = audited(Mode::PartialAuto);
        let g = gate.clone();
        arm(&DE_HOOK, 1, move || g.lower(Mode::Shadow).unwrap());
        let r = block_on(registry().call(&gate, id, json!({"x": 5})));
        assert_eq!(r.unwrap_err().code(), "MODE_NOT_ALLOWED", "{id}");
        assert!(take_runs().is_empty(), "{id}");
        assert_balanced(&sink.0.records());
    }
}

/// A `Deserialize` that enters another (wider) gate, or calls tools directly and by name.
#[test]
fn a3_deserialize_entering_gates_and_calling_tools() {
    let _s = serial();
    reset();
    let (gate, sink) = audited(Mode::Advisory);
    let wide_gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(counting_approver)
        .build()
        .unwrap();
    *WIDE.lock().unwrap() = Some(wide_gate.clone());
    let w = wide_gate.clone();
    arm(&DE_HOOK, 1, move || {
        // inside the parse of an ADVISORY call: a wider gate runs a direct call and a call by name
        let _ = w.run(|| lo(Evil(100)));
        let _ = call(&w, "rt2.lo", json!({"x": 101}));
    });
    // lo is LOW_WRITE: refused at ADVISORY before parsing, so the hook must not even fire
    let r = call(&gate, "rt2.lo", json!({"x": 5}));
    assert_eq!(r.unwrap_err().code(), "MODE_NOT_ALLOWED");
    assert!(take_runs().is_empty());
    assert_balanced(&sink.0.records());
    disarm_all();
}

/// Serialize, escalate or a sink calling the same tool directly, at each point of the call by name:
/// the nested call never takes the decision made for the outer one.
#[test]
fn a4_user_code_calling_the_same_tool_directly_does_not_take_the_handed_decision() {
    let _s = serial();
    for (hook, hname) in [(&SER_HOOK, "ser"), (&SINK_HOOK, "sink")] {
        for nth in 1..=6 {
            reset();
            let (gate, sink) = audited(Mode::FullAuto);
            let g = gate.clone();
            arm(hook, nth, move || {
                let _ = g.run(|| hi(Evil(666)));
            });
            let r = call(&gate, "rt2.hi", json!({"x": 1}));
            disarm_all();
            let runs = take_runs();
            let approvals = APPROVALS.load(SeqCst);
            assert_eq!(
                runs.len(),
                approvals,
                "{hname}@{nth}: runs {runs:?} on {approvals} approvals ({r:?})"
            );
            assert!(runs.len() <= 2);
            assert_balanced(&sink.0.records());
        }
    }
    // escalate: the nested direct call of x=1 is HIGH_WRITE, above PARTIAL_AUTO's ceiling
    for nth in 1..=4 {
        reset();
        let (gate, sink) = audited(Mode::PartialAuto);
        let g = gate.clone();
        arm(&ESC_HOOK, nth, move || {
            let r = g.run(|| esc_lo(Evil(1)));
            assert_eq!(r.unwrap_err().code(), "ABOVE_CEILING");
        });
        let r = call(&gate, "rt2.esc_lo", json!({"x": 5}));
        disarm_all();
        let runs = take_runs();
        assert_eq!(runs, vec![("esc_lo", 5)], "esc@{nth}: {r:?}");
        assert_balanced(&sink.0.records());
    }
}

/// The same with two-step approvals: an approval for x=1 runs x=1 once and nothing else.
#[test]
fn a5_two_step_approval_by_name_runs_once_and_only_its_call() {
    let _s = serial();
    for (hook, hname) in [(&SER_HOOK, "ser"), (&SINK_HOOK, "sink")] {
        for nth in 1..=6 {
            reset();
            let sink = HookSink::default();
            let gate = Gate::builder()
                .mode(Mode::FullAuto)
                .two_step_approvals()
                .audit(sink.clone())
                .build()
                .unwrap();
            let e = call(&gate, "rt2.hi", json!({"x": 1})).unwrap_err();
            let token = e.denied().unwrap().approval_token().unwrap().to_owned();
            gate.approve(&token).unwrap();
            let g = gate.clone();
            arm(hook, nth, move || {
                let _ = g.run(|| hi(Evil(666)));
                let _ = call(&g, "rt2.hi", json!({"x": 1}));
            });
            let r = call(&gate, "rt2.hi", json!({"x": 1}));
            disarm_all();
            let again = call(&gate, "rt2.hi", json!({"x": 1}));
            let runs = take_runs();
            assert_eq!(runs, vec![("hi", 1)], "{hname}@{nth}: {r:?} / {again:?}");
            assert_balanced(&sink.0.records());
        }
    }
}

/// A tool body calling itself by name (and directly) under a narrower gate, and `hi` by name.
#[test]
fn a6_body_calling_itself_by_name_under_a_narrower_gate() {
    let _s = serial();
    reset();
    let (gate, sink) = audited(Mode::FullAuto);
    *WIDE.lock().unwrap() = Some(gate.clone());
    assert_eq!(
        call(&gate, "rt2.lo", json!({"x": 7})).unwrap(),
        json!("Err(\"MODE_NOT_ALLOWED\")")
    );
    assert_eq!(
        call(&gate, "rt2.lo", json!({"x": 17})).unwrap(),
        json!("Err(\"MODE_NOT_ALLOWED\")")
    );
    assert_eq!(
        call(&gate, "rt2.lo", json!({"x": 27})).unwrap(),
        json!("Err(\"MODE_NOT_ALLOWED\")")
    );
    assert_eq!(take_runs(), vec![("lo", 7), ("lo", 17), ("lo", 27)]);
    assert_balanced(&sink.0.records());
}

/// Calling by name from inside `run` of a narrower gate: both gates decide.
#[test]
fn a7_call_by_name_inside_a_narrower_gate() {
    let _s = serial();
    reset();
    let (gate, sink) = audited(Mode::FullAuto);
    let narrow = Gate::new(Mode::Shadow).unwrap();
    for id in ["rt2.lo", "rt2.hi", "rt2.glo", "rt2.esc_lo", "rt2set.assoc"] {
        let r = narrow.run(|| call(&gate, id, json!({"x": 3})));
        assert_eq!(r.unwrap_err().code(), "MODE_NOT_ALLOWED", "{id}");
    }
    let r = narrow.run(|| block_on(registry().call(&gate, "rt2.alo", json!({"x": 3}))));
    assert_eq!(r.unwrap_err().code(), "MODE_NOT_ALLOWED");
    let r = narrow.run(|| block_on(registry().call(&gate, "rt2.ahi", json!({"x": 3}))));
    assert_eq!(r.unwrap_err().code(), "MODE_NOT_ALLOWED");
    assert!(take_runs().is_empty());
    assert_eq!(APPROVALS.load(SeqCst), 0);
    assert_balanced(&sink.0.records());
}

/// An async call's future created, then the gate lowered, then polled: refused (guarantee 4).
#[test]
fn a8_async_future_polled_after_lower_is_refused() {
    let _s = serial();
    for id in ["rt2.alo", "rt2.ahi"] {
        reset();
        let (gate, sink) = audited(Mode::FullAuto);
        let fut = registry().call(&gate, id, json!({"x": 4}));
        gate.lower(Mode::Shadow).unwrap();
        let r = block_on(fut);
        assert_eq!(r.unwrap_err().code(), "MODE_NOT_ALLOWED", "{id}");
        assert!(take_runs().is_empty(), "{id}");
        assert_balanced(&sink.0.records());
    }
}

/// An async call's future polled on another thread runs once; dropped midway it is cancelled.
#[test]
fn a9_async_future_on_another_thread_and_dropped() {
    let _s = serial();
    reset();
    let (gate, sink) = audited(Mode::PartialAuto);
    let fut = registry().call(&gate, "rt2.alo", json!({"x": 9}));
    let r = std::thread::spawn(move || block_on(fut)).join().unwrap();
    assert_eq!(r.unwrap(), json!(9));
    let mut fut = registry().call(&gate, "rt2.alo", json!({"x": 1000}));
    assert!(poll_once(&mut fut).is_pending());
    drop(fut);
    assert_eq!(take_runs(), vec![("alo", 9)]);
    let recs = sink.0.records();
    assert_balanced(&recs);
    assert!(
        recs.iter().any(|r| r.outcome == Some(Outcome::Cancelled)),
        "{recs:#?}"
    );
}

/// An approver that calls the same tool by name: each run has its own approval.
#[test]
fn a10_approver_calling_the_same_tool_by_name() {
    let _s = serial();
    reset();
    static DEPTH: AtomicUsize = AtomicUsize::new(0);
    let sink = HookSink::default();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|req: &ApprovalRequest<'_>| {
            APPROVALS.fetch_add(1, SeqCst);
            if DEPTH.fetch_add(1, SeqCst) == 0 {
                let g = wide();
                let _ = call(&g, req.tool.id, json!({"x": 55}));
                let _ = g.run(|| hi(Evil(56)));
            }
            Approval::Approve
        })
        .audit(sink.clone())
        .build()
        .unwrap();
    *WIDE.lock().unwrap() = Some(gate.clone());
    let r = call(&gate, "rt2.hi", json!({"x": 1}));
    assert_eq!(r.unwrap(), json!(1));
    let runs = take_runs();
    assert_eq!(runs.len(), APPROVALS.load(SeqCst), "{runs:?}");
    assert_balanced(&sink.0.records());
}

/// Panics in Deserialize, Serialize, escalate, an approver and a sink during a call by name leave no
/// decision behind: a later direct call is decided afresh (and rejected), and every enter has an exit.
#[test]
fn a11_panics_during_a_call_by_name_leave_no_decision_behind() {
    let _s = serial();
    let cases: [(&Hook, &str, &str); 3] = [
        (&DE_HOOK, "de", "rt2.hi"),
        (&SER_HOOK, "ser", "rt2.hi"),
        (&SINK_HOOK, "sink", "rt2.hi"),
    ];
    for (hook, hname, id) in cases {
        for nth in 1..=6 {
            reset();
            let (gate, sink) = audited(Mode::FullAuto);
            arm(hook, nth, || panic!("hook panics"));
            let r = catch_unwind(AssertUnwindSafe(|| call(&gate, id, json!({"x": 1}))));
            disarm_all();
            let first = take_runs();
            assert!(
                first.len() <= 1 && APPROVALS.load(SeqCst) >= first.len(),
                "{hname}@{nth}: {r:?}"
            );
            REJECT.store(true, SeqCst);
            let after = gate.run(|| hi(Evil(1)));
            let after_name = call(&gate, id, json!({"x": 1}));
            let runs = take_runs();
            assert!(
                runs.is_empty(),
                "{hname}@{nth}: {runs:?} {after:?} {after_name:?}"
            );
            assert_eq!(
                after_name.unwrap_err().code(),
                "APPROVAL_REJECTED",
                "{hname}@{nth}"
            );
            assert_eq!(
                after.unwrap_err().code(),
                "APPROVAL_REJECTED",
                "{hname}@{nth}"
            );
            if hname != "sink" {
                assert_balanced(&sink.0.records());
            } // a panicking sink loses its own record
        }
    }
    for nth in 1..=3 {
        reset();
        let (gate, sink) = audited(Mode::PartialAuto);
        arm(&ESC_HOOK, nth, || panic!("escalate panics"));
        let r = catch_unwind(AssertUnwindSafe(|| {
            call(&gate, "rt2.esc_lo", json!({"x": 5}))
        }));
        disarm_all();
        let first_ran = matches!(r, Ok(Ok(_)));
        let after = gate.run(|| esc_lo(Evil(1)));
        assert_eq!(after.unwrap_err().code(), "ABOVE_CEILING", "esc@{nth}");
        assert_eq!(take_runs().len(), usize::from(first_ran), "esc@{nth}");
        assert_balanced(&sink.0.records());
    }
    // a panicking approver
    reset();
    let sink = HookSink::default();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_: &ApprovalRequest<'_>| -> Approval { panic!("approver panics") })
        .audit(sink.clone())
        .build()
        .unwrap();
    let r = call(&gate, "rt2.hi", json!({"x": 1}));
    assert_eq!(r.unwrap_err().code(), "APPROVAL_REJECTED");
    assert!(take_runs().is_empty());
    assert_balanced(&sink.0.records());
}

/// Guarantee 4 for calls by name: a gate lowered while the approver thinks, or while the `enter`
/// record is written, refuses the call (sync and async), with the enter closed `refused`.
#[test]
fn a12_lowering_during_the_decision_of_a_call_by_name_refuses_it() {
    let _s = serial();
    for id in ["rt2.hi", "rt2.ahi", "rt2set.assoc", "rt2.red"] {
        for nth in 1..=2 {
            reset();
            let (gate, sink) = audited(Mode::FullAuto);
            let g = gate.clone();
            let before = Arc::new(AtomicUsize::new(usize::MAX));
            let b = before.clone();
            arm(&SINK_HOOK, nth, move || {
                b.store(RAN.lock().unwrap().len(), SeqCst);
                g.lower(Mode::PartialAuto).unwrap();
            });
            let args = if id == "rt2.red" {
                json!({"user": "u", "pin": 4})
            } else {
                json!({"x": 4})
            };
            let r = block_on(registry().call(&gate, id, args));
            disarm_all();
            let runs = take_runs();
            let recs = sink.0.records();
            assert_balanced(&recs);
            // the lowering happened at a record; whatever was recorded after must not run at FULL_AUTO
            if runs.len() > before.load(SeqCst) {
                panic!(
                    "{id}@{nth}: ran {runs:?} after a lowering during its decision: {r:?} {recs:#?}"
                );
            }
        }
        reset();
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .approver(|_: &ApprovalRequest<'_>| {
                wide().lower(Mode::PartialAuto).unwrap();
                Approval::Approve
            })
            .build()
            .unwrap();
        *WIDE.lock().unwrap() = Some(gate.clone());
        let args = if id == "rt2.red" {
            json!({"user": "u", "pin": 4})
        } else {
            json!({"x": 4})
        };
        let r = block_on(registry().call(&gate, id, args));
        assert!(r.is_err(), "{id}: {r:?}");
        assert!(take_runs().is_empty(), "{id}");
    }
}

/// Redacted, recorded arguments by name are audited like the same direct call, secret never shown.
#[test]
fn a13_redacted_arguments_by_name_match_a_direct_call() {
    let _s = serial();
    reset();
    let (gate, sink) = audited(Mode::FullAuto);
    call(&gate, "rt2.red", json!({"user": "ada", "pin": 4242})).unwrap();
    let by_name = sink.0.take();
    gate.run(|| red("ada".into(), Evil(4242))).unwrap();
    let direct = sink.0.take();
    let key = |rs: &[AuditRecord]| {
        rs.iter()
            .map(|r| {
                (
                    r.stage,
                    r.arguments.clone(),
                    r.arguments_digest.clone(),
                    r.effective_risk,
                    r.decision,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&by_name), key(&direct));
    for r in by_name.iter().chain(&direct) {
        assert!(
            !r.arguments.as_deref().unwrap_or("").contains("4242"),
            "{r:?}"
        );
    }
    // a bad redacted value is not quoted back
    let e = call(&gate, "rt2.red", json!({"user": "ada", "pin": "s3cr3t"})).unwrap_err();
    assert!(!e.to_string().contains("s3cr3t"), "{e}");
    assert_eq!(APPROVALS.load(SeqCst), 2);
}

/// `#[toolset]` gives its domain to a renamed `tool` and to a tool in a function body.
#[test]
fn a14_renamed_attribute_and_body_tools_get_the_domain() {
    let _s = serial();
    assert!(toolgate::registry().manifest("renamed.rn").is_some());
    assert!(
        toolgate::registry().manifest("renamed.inbody").is_some(),
        "{:?}",
        toolgate::manifests().map(|m| m.id).collect::<Vec<_>>()
    );
    assert!(
        toolgate::registry().manifest("rn").is_none()
            && toolgate::registry().manifest("inbody").is_none()
    );
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .deny("renamed.*")
        .build()
        .unwrap();
    assert_eq!(
        call(&gate, "renamed.rn", json!({"x": 1}))
            .unwrap_err()
            .code(),
        "DENY_LISTED"
    );
    assert_eq!(
        call(&gate, "renamed.inbody", json!({"x": 1}))
            .unwrap_err()
            .code(),
        "DENY_LISTED"
    );
    assert_eq!(gate.run(renamed::holder).unwrap_err().code(), "DENY_LISTED");
}

/// A call by name is audited and approved as the same direct call (declared/effective risk, digest).
#[test]
fn a15_by_name_and_direct_are_audited_alike() {
    let _s = serial();
    reset();
    let (gate, sink) = audited(Mode::FullAuto);
    for (id, direct) in [
        (
            "rt2.hi",
            Box::new(|| gate.run(|| hi(Evil(3))).map(|_| ()))
                as Box<dyn Fn() -> Result<(), Denied>>,
        ),
        ("rt2.glo", Box::new(|| glo(&gate, Evil(3)).map(|_| ()))),
        (
            "rt2.esc_lo",
            Box::new(|| gate.run(|| esc_lo(Evil(3))).map(|_| ())),
        ),
        (
            "rt2set.assoc",
            Box::new(|| gate.run(|| Set2::assoc(Evil(3))).map(|_| ())),
        ),
    ] {
        APPROVALS.store(0, SeqCst);
        call(&gate, id, json!({"x": 3})).unwrap();
        let a = APPROVALS.swap(0, SeqCst);
        let by_name = sink.0.take();
        direct().unwrap();
        let b = APPROVALS.swap(0, SeqCst);
        let d = sink.0.take();
        let key = |rs: &[AuditRecord]| {
            rs.iter()
                .map(|r| {
                    (
                        r.stage,
                        r.arguments_digest.clone(),
                        r.effective_risk,
                        r.declared_risk,
                        r.decision,
                        r.outcome,
                        r.output_digest.clone(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(key(&by_name), key(&d), "{id}");
        assert_eq!(a, b, "{id}");
    }
    // escalate called as often by name as directly
    static ESCS: AtomicUsize = AtomicUsize::new(0);
    arm(&ESC_HOOK, usize::MAX, || {});
    let _ = ESCS.load(SeqCst);
    disarm_all();
}

/// An async tool by name whose future is polled across a `lower` between polls: the body that had
/// not started yet (x >= 1000 yields inside the body, after the decision) may finish; a fresh one
/// does not start.
#[test]
fn a16_async_by_name_created_in_scope_of_narrow_polled_later() {
    let _s = serial();
    reset();
    let (gate, sink) = audited(Mode::PartialAuto);
    let narrow = Gate::new(Mode::Shadow).unwrap();
    // created inside a narrower gate, polled outside it
    let fut = narrow.run(|| registry().call(&gate, "rt2.alo", json!({"x": 11})));
    let r = block_on(fut);
    // documented: a call must pass every gate entered around it
    let runs = take_runs();
    assert_balanced(&sink.0.records());
    assert!(
        runs.is_empty(),
        "created inside SHADOW gate, ran: {runs:?} ({r:?})"
    );
}

// ---------------------------------------------------------------------------------------------------------
// second round
// ---------------------------------------------------------------------------------------------------------

/// high write; x = 1 calls itself by name (same gate, same arguments), x = 2 directly
#[tool(risk = "HIGH_WRITE", domain = "rt2", callable)]
fn selfy(x: Evil) -> Result<String, Denied> {
    ran("selfy", x.0);
    match x.0 {
        1 => Ok(call(&wide(), "rt2.selfy", json!({"x": 1}))
            .map(|_| ())
            .map_err(|e| e.code())
            .err()
            .unwrap_or("ran")
            .into()),
        2 => Ok(wide()
            .run(|| selfy(Evil(2)))
            .map(|_| ())
            .map_err(|e| e.code().to_string())
            .err()
            .unwrap_or("ran".into())),
        _ => Ok("leaf".into()),
    }
}

/// async high write that yields once inside its body
#[tool(risk = "HIGH_WRITE", domain = "rt2", callable)]
async fn ahy(x: Evil) -> Result<u64, Denied> {
    YieldOnce(false).await;
    ran("ahy", x.0);
    Ok(x.0)
}

/// A sink panicking on the call gate's `enter`, under an outer audited gate: the outer enter gets its exit.
#[test]
fn b1_call_gate_sink_panicking_on_enter_under_an_outer_gate() {
    let _s = serial();
    reset();
    let outer_sink = MemorySink::new();
    let outer = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(counting_approver)
        .audit(outer_sink.clone())
        .build()
        .unwrap();
    let (inner, _) = audited(Mode::FullAuto);
    for id in ["rt2.hi", "rt2.ahi", "rt2.lo"] {
        arm(&SINK_HOOK, 1, || panic!("sink panics on enter"));
        let r = outer.run(|| {
            catch_unwind(AssertUnwindSafe(|| {
                block_on(registry().call(&inner, id, json!({"x": 3})))
            }))
        });
        disarm_all();
        assert!(r.is_err() || r.as_ref().unwrap().is_err(), "{id}: {r:?}");
    }
    assert!(take_runs().is_empty());
    assert_balanced(&outer_sink.records());
}

/// A body calling itself by name with the same arguments under a two-step gate needs its own approval.
#[test]
fn b2_self_call_by_name_needs_its_own_approval() {
    let _s = serial();
    for x in [1u64, 2] {
        reset();
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .two_step_approvals()
            .build()
            .unwrap();
        *WIDE.lock().unwrap() = Some(gate.clone());
        let e = call(&gate, "rt2.selfy", json!({"x": x})).unwrap_err();
        gate.approve(e.denied().unwrap().approval_token().unwrap())
            .unwrap();
        let r = call(&gate, "rt2.selfy", json!({"x": x})).unwrap();
        assert_eq!(take_runs(), vec![("selfy", x)], "x={x}: inner said {r}");
        assert!(
            r == json!("APPROVAL_REUSED") || r == json!("APPROVAL_PENDING"),
            "{r}"
        );
    }
}

/// The first poll of an async call by name inside a narrower gate's `run`: refused, as is the direct
/// call polled the same way.
#[test]
fn b3_async_first_polled_inside_a_narrower_gate() {
    let _s = serial();
    reset();
    let (gate, _sink) = audited(Mode::PartialAuto);
    let narrow = Gate::new(Mode::Shadow).unwrap();
    let mut direct = Box::pin(gate.scope(alo(Evil(21))));
    let d = narrow.run(|| poll_once(&mut direct));
    let mut by_name = registry().call(&gate, "rt2.alo", json!({"x": 22}));
    let n = narrow.run(|| poll_once(&mut by_name));
    let d = match d {
        Poll::Ready(r) => r.map_err(|e| e.code().to_string()),
        Poll::Pending => panic!(),
    };
    let n = match n {
        Poll::Ready(r) => r.map_err(|e| e.code().to_string()),
        Poll::Pending => panic!(),
    };
    assert_eq!(d.map(|v| json!(v)), n, "direct vs by name");
    assert!(take_runs().is_empty());
}

/// An escalate function that lowers the gate, or calls the same tool by name.
#[test]
fn b4_escalate_lowering_or_calling_the_same_tool_by_name() {
    let _s = serial();
    for nth in 1..=3 {
        reset();
        let (gate, sink) = audited(Mode::PartialAuto);
        let g = gate.clone();
        arm(&ESC_HOOK, nth, move || g.lower(Mode::Shadow).unwrap());
        let r = call(&gate, "rt2.esc_lo", json!({"x": 5}));
        disarm_all();
        let runs = take_runs();
        assert!(
            runs.is_empty() || gate.mode() == Mode::PartialAuto,
            "esc lower@{nth}: {runs:?} {r:?}"
        );
        assert_balanced(&sink.0.records());
    }
    for nth in 1..=1 {
        // escalate runs once per call by name (a hook armed for its 2nd run never fires)
        reset();
        let (gate, sink) = audited(Mode::PartialAuto);
        let g = gate.clone();
        arm(&ESC_HOOK, nth, move || {
            assert_eq!(
                call(&g, "rt2.esc_lo", json!({"x": 1})).unwrap_err().code(),
                "ABOVE_CEILING"
            );
            assert_eq!(call(&g, "rt2.esc_lo", json!({"x": 6})).unwrap(), json!(6));
        });
        let r = call(&gate, "rt2.esc_lo", json!({"x": 5}));
        disarm_all();
        let mut runs = take_runs();
        runs.sort();
        assert_eq!(
            runs,
            vec![("esc_lo", 5), ("esc_lo", 6)],
            "esc byname@{nth}: {r:?}"
        );
        assert_balanced(&sink.0.records());
    }
}

/// Serialize or a sink calling the same tool by name during a call by name: one approval per run.
#[test]
fn b5_user_code_calling_the_same_tool_by_name() {
    let _s = serial();
    for (hook, hname) in [(&SER_HOOK, "ser"), (&SINK_HOOK, "sink"), (&DE_HOOK, "de")] {
        for nth in 1..=6 {
            for id in ["rt2.hi", "rt2.ahi", "rt2set.assoc"] {
                reset();
                let (gate, sink) = audited(Mode::FullAuto);
                let g = gate.clone();
                let id2 = id.to_owned();
                arm(hook, nth, move || {
                    let _ = block_on(registry().call(&g, &id2, json!({"x": 666})));
                });
                let r = block_on(registry().call(&gate, id, json!({"x": 1})));
                disarm_all();
                let runs = take_runs();
                assert_eq!(
                    runs.len(),
                    APPROVALS.load(SeqCst),
                    "{hname}@{nth} {id}: {runs:?} {r:?}"
                );
                assert_balanced(&sink.0.records());
            }
        }
    }
}

/// Two async calls by name of one tool interleaved: the second's rejection is its own.
#[test]
fn b6_interleaved_async_calls_by_name() {
    let _s = serial();
    reset();
    let sink = HookSink::default();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|req: &ApprovalRequest<'_>| {
            APPROVALS.fetch_add(1, SeqCst);
            if APPROVALS.load(SeqCst) == 1 {
                Approval::Approve
            } else {
                Approval::Reject(format!("{:?}", req.arguments_digest))
            }
        })
        .audit(sink.clone())
        .build()
        .unwrap();
    let mut f1 = registry().call(&gate, "rt2.ahy", json!({"x": 1}));
    assert!(poll_once(&mut f1).is_pending());
    let mut f2 = registry().call(&gate, "rt2.ahy", json!({"x": 2}));
    let r2 = poll_once(&mut f2);
    let r1 = block_on(f1);
    let r2 = match r2 {
        Poll::Ready(r) => r,
        Poll::Pending => block_on(f2),
    };
    assert_eq!(r1.unwrap(), json!(1));
    assert_eq!(r2.unwrap_err().code(), "APPROVAL_REJECTED");
    // a third, never polled, then a direct call on another thread inside the gate
    let f3 = registry().call(&gate, "rt2.ahy", json!({"x": 3}));
    drop(f3);
    assert_eq!(take_runs(), vec![("ahy", 1)]);
    assert_balanced(&sink.0.records());
}
