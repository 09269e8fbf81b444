//! Attacks on every guarantee of SECURITY.md, written from README.md, SECURITY.md and the rustdoc alone:
//! safe Rust and the public API, in every declaration form and at every point where user code runs
//! between a decision and a body. Each test asserts a documented behaviour; named `gN_` for the
//! guarantee it attacks.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use toolgate::audit::{AuditError, AuditRecord, AuditSink, MemorySink, Outcome, Stage};
use toolgate::serde::{Serialize, Serializer};
use toolgate::{
    AllowAllApprover, Approval, ApprovalRequest, Denied, Gate, Mode, Risk, tool, toolset,
};

// ---------------------------------------------------------------------------------------------
// helpers

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|e| e.into_inner())
}

fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = poll_once(f.as_mut()) {
            return v;
        }
    }
}

/// Pending once, then ready.
struct YieldOnce(bool);
impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// What a [`HookSink`] calls before it records.
type SinkHook = Box<dyn Fn(&AuditRecord) -> Result<(), AuditError> + Send + Sync>;

/// A sink that calls a hook before recording into a MemorySink.
struct HookSink {
    mem: MemorySink,
    hook: SinkHook,
}
impl AuditSink for HookSink {
    fn record(&self, r: &AuditRecord) -> Result<(), AuditError> {
        (self.hook)(r)?;
        self.mem.record(r)
    }
}
fn hook_sink(
    hook: impl Fn(&AuditRecord) -> Result<(), AuditError> + Send + Sync + 'static,
) -> (HookSink, MemorySink) {
    let mem = MemorySink::new();
    (
        HookSink {
            mem: mem.clone(),
            hook: Box::new(hook),
        },
        mem,
    )
}

/// Problems with enter/exit pairing in one sink's records.
fn unbalanced(records: &[AuditRecord]) -> Vec<String> {
    let mut problems = vec![];
    for e in records.iter().filter(|r| r.stage == Stage::Enter) {
        let exits = records
            .iter()
            .filter(|r| r.stage == Stage::Exit && r.call == e.call && r.gate == e.gate)
            .count();
        if exits != 1 {
            problems.push(format!(
                "enter of {} (call {}) has {exits} exit records",
                e.tool, e.call
            ));
        }
    }
    problems
}

fn stages(records: &[AuditRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| format!("{:?}/{:?}/{:?}", r.stage, r.outcome, r.code.as_deref()))
        .collect()
}

/// An argument whose `Serialize` runs a hook (by slot number) and logs that it ran.
#[derive(Clone, Debug)]
struct Trig(usize, &'static str);
type Hooks = Vec<Option<Arc<dyn Fn() + Send + Sync>>>;
static HOOKS: Mutex<Hooks> = Mutex::new(Vec::new());
static EVENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());
fn set_hook(slot: usize, f: impl Fn() + Send + Sync + 'static) {
    let mut h = HOOKS.lock().unwrap();
    if h.len() <= slot {
        h.resize(slot + 1, None);
    }
    h[slot] = Some(Arc::new(f));
}
fn clear_hook(slot: usize) {
    let mut h = HOOKS.lock().unwrap();
    if h.len() > slot {
        h[slot] = None;
    }
}
fn event(e: impl Into<String>) {
    EVENTS.lock().unwrap().push(e.into());
}
fn take_events() -> Vec<String> {
    std::mem::take(&mut *EVENTS.lock().unwrap())
}
impl Serialize for Trig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        event(format!("ser{}", self.0));
        let hook = HOOKS.lock().unwrap().get(self.0).cloned().flatten();
        if let Some(h) = hook {
            h();
        }
        s.serialize_str(self.1)
    }
}

// ---------------------------------------------------------------------------------------------
// tools

static LOW: AtomicUsize = AtomicUsize::new(0);
/// low
#[tool(risk = "LOW_WRITE", domain = "rt")]
fn low() -> Result<(), Denied> {
    LOW.fetch_add(1, SeqCst);
    Ok(())
}

static LOW_ASYNC: AtomicUsize = AtomicUsize::new(0);
/// low async, awaits once
#[tool(risk = "LOW_WRITE", domain = "rt")]
async fn low_async() -> Result<(), Denied> {
    LOW_ASYNC.fetch_add(1, SeqCst);
    YieldOnce(false).await;
    Ok(())
}

static LOW_CALLABLE: AtomicUsize = AtomicUsize::new(0);
/// low, callable by name
#[tool(risk = "LOW_WRITE", domain = "rt", callable)]
fn low_callable() -> Result<u32, Denied> {
    LOW_CALLABLE.fetch_add(1, SeqCst);
    Ok(1)
}

static LOW_GATE: AtomicUsize = AtomicUsize::new(0);
/// low with a gate parameter
#[tool(risk = "LOW_WRITE", domain = "rt")]
fn low_gate_param(gate: &Gate) -> Result<(), Denied> {
    let _ = gate;
    LOW_GATE.fetch_add(1, SeqCst);
    Ok(())
}

static HIGH: AtomicUsize = AtomicUsize::new(0);
/// high
#[tool(risk = "HIGH_WRITE", domain = "rt")]
fn high() -> Result<(), Denied> {
    HIGH.fetch_add(1, SeqCst);
    Ok(())
}

static LOW_TRIG: AtomicUsize = AtomicUsize::new(0);
/// low with a serialize hook argument
#[tool(risk = "LOW_WRITE", domain = "rt")]
fn low_trig(t: Trig) -> Result<(), Denied> {
    event(format!("body{}", t.0));
    LOW_TRIG.fetch_add(1, SeqCst);
    Ok(())
}

static HIGH_TRIG: AtomicUsize = AtomicUsize::new(0);
/// high with a serialize hook argument
#[tool(risk = "HIGH_WRITE", domain = "rt")]
fn high_trig(t: Trig) -> Result<(), Denied> {
    event(format!("body{}", t.0));
    HIGH_TRIG.fetch_add(1, SeqCst);
    Ok(())
}

/// A result whose Serialize panics.
struct PanicOut;
impl Serialize for PanicOut {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        panic!("result serialize panics")
    }
}
static LOW_OUT: AtomicUsize = AtomicUsize::new(0);
/// low returning a result whose serialization panics
#[tool(risk = "LOW_WRITE", domain = "rt")]
fn low_out() -> Result<PanicOut, Denied> {
    LOW_OUT.fetch_add(1, SeqCst);
    Ok(PanicOut)
}

/// low whose body panics
#[tool(risk = "LOW_WRITE", domain = "rt")]
fn low_panic() -> Result<(), Denied> {
    panic!("body panics")
}

// escalation
fn esc(x: &u32) -> Risk {
    match *x {
        1 => Risk::HighWrite,
        99 => panic!("classifier panics"),
        _ => Risk::ReadOnly,
    }
}
static ESC: AtomicUsize = AtomicUsize::new(0);
/// low, escalated by its argument
#[tool(risk = "LOW_WRITE", domain = "rt", escalate = esc)]
fn esc_low(x: u32) -> Result<(), Denied> {
    let _ = x;
    ESC.fetch_add(1, SeqCst);
    Ok(())
}
fn esc_down(_: &u32) -> Risk {
    Risk::ReadOnly
}
static ESC_HIGH: AtomicUsize = AtomicUsize::new(0);
/// high, with a classifier that says read-only
#[tool(risk = "HIGH_WRITE", domain = "rt", escalate = esc_down)]
fn esc_high(x: u32) -> Result<(), Denied> {
    let _ = x;
    ESC_HIGH.fetch_add(1, SeqCst);
    Ok(())
}

// two-step tools
/// A connection handle that is not serializable.
pub struct Conn(pub &'static str);
static TWO_NOSER: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
/// high, with an argument that is not serializable
#[tool(risk = "HIGH_WRITE", domain = "rt")]
fn two_noser(conn: Conn, table: String) -> Result<(), Denied> {
    let _ = table;
    TWO_NOSER.lock().unwrap().push(conn.0);
    Ok(())
}

static TWO_IMPL: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// high, with an impl Trait argument
#[tool(risk = "HIGH_WRITE", domain = "rt")]
fn two_impl(target: impl std::fmt::Display) -> Result<(), Denied> {
    TWO_IMPL.lock().unwrap().push(target.to_string());
    Ok(())
}

static TWO_REC: AtomicUsize = AtomicUsize::new(0);
/// high, calls itself once with the same argument from its body
#[tool(risk = "HIGH_WRITE", domain = "rt")]
fn two_rec(n: u32) -> Result<(), Denied> {
    if TWO_REC.fetch_add(1, SeqCst) == 0 {
        let inner = two_rec(n);
        event(format!("inner:{:?}", inner.map_err(|d| d.code().as_str())));
    }
    Ok(())
}

static TWO_SLOW: AtomicUsize = AtomicUsize::new(0);
/// high, for the race
#[tool(risk = "HIGH_WRITE", domain = "rt")]
fn two_slow(n: u32) -> Result<(), Denied> {
    let _ = n;
    TWO_SLOW.fetch_add(1, SeqCst);
    Ok(())
}

#[derive(Serialize, Clone, Debug)]
#[serde(crate = "toolgate::serde")]
pub struct Flat {
    pub amount: u32,
    #[serde(flatten)]
    pub extra: BTreeMap<String, u32>,
}
static TWO_FLAT: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// high, with a flattened map
#[tool(risk = "HIGH_WRITE", domain = "rt")]
fn two_flat(order: Flat) -> Result<(), Denied> {
    TWO_FLAT.lock().unwrap().push(order.amount);
    Ok(())
}

static TWO_BIG: Mutex<Vec<u128>> = Mutex::new(Vec::new());
/// high, with a u128
#[tool(risk = "HIGH_WRITE", domain = "rt")]
fn two_big(x: u128) -> Result<(), Denied> {
    TWO_BIG.lock().unwrap().push(x);
    Ok(())
}

/// A generic database handle.
#[derive(Serialize)]
#[serde(crate = "toolgate::serde")]
pub struct GDb<T> {
    pub name: T,
}
static GDROP: Mutex<Vec<String>> = Mutex::new(Vec::new());
#[toolset(domain = "gdb")]
impl<T: Serialize + std::fmt::Display> GDb<T> {
    /// drop everything
    #[tool(risk = "HIGH_WRITE")]
    pub fn gdrop(&self) -> Result<(), Denied> {
        GDROP.lock().unwrap().push(self.name.to_string());
        Ok(())
    }
}

/// A boxed database handle.
#[derive(Serialize)]
#[serde(crate = "toolgate::serde")]
pub struct BDb {
    pub name: &'static str,
}
static BDROP: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
#[toolset(domain = "bdb")]
impl BDb {
    /// drop everything, by box
    #[tool(risk = "HIGH_WRITE")]
    pub fn bdrop(self: Box<Self>) -> Result<(), Denied> {
        BDROP.lock().unwrap().push(self.name);
        Ok(())
    }
    /// drop everything, by Arc
    #[tool(risk = "HIGH_WRITE")]
    pub fn adrop(self: Arc<Self>) -> Result<(), Denied> {
        BDROP.lock().unwrap().push(self.name);
        Ok(())
    }
}

// redaction
static SECRET: AtomicUsize = AtomicUsize::new(0);
/// high, with a redacted pin
#[tool(risk = "HIGH_WRITE", domain = "rt", redact = [pin], record_arguments, callable)]
fn secret(user: String, pin: String) -> Result<u32, Denied> {
    let _ = (user, pin);
    SECRET.fetch_add(1, SeqCst);
    Ok(0)
}
/// low, with a redacted numeric pin
#[tool(risk = "LOW_WRITE", domain = "rt", redact = [pin], callable)]
fn secret_num(pin: u32) -> Result<u32, Denied> {
    let _ = pin;
    Ok(0)
}

// generic tool over unit-struct "modes"
/// A plan step that only previews.
#[derive(Serialize)]
#[serde(crate = "toolgate::serde")]
pub struct DryRun;
/// A plan step that executes.
#[derive(Serialize)]
#[serde(crate = "toolgate::serde")]
pub struct Execute;
pub trait Step {
    const NAME: &'static str;
}
impl Step for DryRun {
    const NAME: &'static str = "dry-run";
}
impl Step for Execute {
    const NAME: &'static str = "execute";
}
static APPLY: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
/// apply a migration, generically over the step
#[tool(risk = "HIGH_WRITE", domain = "rt")]
fn apply_migration<S: Step + Serialize>(step: S, name: String) -> Result<(), Denied> {
    let _ = (step, name);
    APPLY.lock().unwrap().push(S::NAME);
    Ok(())
}

static WIDEN: AtomicUsize = AtomicUsize::new(0);
/// a read-only tool whose body tries to run a high-risk tool under a gate of its own
#[tool(risk = "READ_ONLY", domain = "rt")]
fn sneaky_read() -> Result<String, Denied> {
    let mine = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .build()
        .unwrap();
    let r = mine.run(high);
    if r.is_ok() {
        WIDEN.fetch_add(1, SeqCst);
    }
    Ok(format!("{r:?}"))
}

static ASYNC_GATE: AtomicUsize = AtomicUsize::new(0);
/// async, with a gate parameter
#[tool(risk = "LOW_WRITE", domain = "rt")]
async fn async_gate_param(gate: &Gate) -> Result<(), Denied> {
    let _ = gate;
    ASYNC_GATE.fetch_add(1, SeqCst);
    YieldOnce(false).await;
    Ok(())
}

/// fails by name
#[tool(risk = "LOW_WRITE", domain = "rt", callable)]
fn failing() -> Result<u32, std::io::Error> {
    Err(std::io::Error::other("nope"))
}

// a domain the deny tests use
/// read users
#[tool(risk = "READ_ONLY", domain = "users")]
fn list_users() -> Result<(), Denied> {
    Ok(())
}
static DEEP: AtomicUsize = AtomicUsize::new(0);
/// a tool in a sub-domain of users
#[tool(risk = "LOW_WRITE", domain = "users.admin")]
fn purge_all() -> Result<(), Denied> {
    DEEP.fetch_add(1, SeqCst);
    Ok(())
}

// forms: a #[toolset] module holding tools written in forms it may not see
static FORMS: AtomicUsize = AtomicUsize::new(0);
#[toolset(domain = "users")]
mod users_forms {
    use super::FORMS;
    use std::sync::atomic::Ordering::SeqCst;
    use toolgate::tool as gated;

    /// purge, with the attribute imported under another name
    #[gated(risk = "LOW_WRITE")]
    fn renamed_purge() -> Result<(), toolgate::Denied> {
        FORMS.fetch_add(1, SeqCst);
        Ok(())
    }

    #[tool(skip)]
    pub fn call_renamed() -> Result<(), toolgate::Denied> {
        renamed_purge()
    }

    #[tool(skip)]
    pub fn outer() -> Result<(), toolgate::Denied> {
        /// purge, nested inside another function
        #[toolgate::tool(risk = "LOW_WRITE")]
        fn nested_purge() -> Result<(), toolgate::Denied> {
            FORMS.fetch_add(1, SeqCst);
            Ok(())
        }
        nested_purge()
    }

    #[allow(dead_code)]
    const _: () = {
        /// purge, inside a const block
        #[toolgate::tool(risk = "LOW_WRITE")]
        fn const_purge() -> Result<(), toolgate::Denied> {
            Ok(())
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Guarantee 1/3: a #[toolset] gives every tool it holds its domain, or refuses to compile

#[test]
fn g1_every_tool_in_a_users_toolset_is_in_the_users_domain() {
    let ids: Vec<&str> = toolgate::manifests()
        .filter(|m| m.id.contains("purge") && m.source.module_path.contains("users_forms"))
        .map(|m| m.id)
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    let lost: Vec<&&str> = ids.iter().filter(|id| !id.starts_with("users.")).collect();
    assert!(
        lost.is_empty(),
        "tools of a #[toolset(domain = \"users\")] without the domain: {lost:?}"
    );
}

#[test]
fn g3_a_domain_deny_rule_refuses_a_renamed_attribute_tool() {
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .deny("users.*")
        .build()
        .unwrap();
    let before = FORMS.load(SeqCst);
    let r1 = gate.run(users_forms::call_renamed);
    let r2 = gate.run(users_forms::outer);
    assert_eq!(
        FORMS.load(SeqCst),
        before,
        "a purge tool of the users toolset ran under deny(\"users.*\"): {r1:?} {r2:?}"
    );
}

#[test]
fn g3_deny_glob_covers_sub_domains() {
    // `users.*` (the README's own example shape) against `users.admin.purge_all`
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .deny("users.*")
        .build()
        .unwrap();
    let r = gate.run(purge_all);
    eprintln!("users.* vs users.admin.purge_all: {r:?}");
    // recorded as an observation: the docs do not say whether `*` crosses a dot.
}

// ---------------------------------------------------------------------------------------------
// Guarantee 2: fails closed

#[test]
fn g2_spawned_thread_and_escaped_closure_have_no_gate() {
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let before = LOW.load(SeqCst);
    let code = gate
        .run(|| std::thread::spawn(low).join().unwrap())
        .unwrap_err()
        .code();
    assert_eq!(code.as_str(), "NO_GATE");
    let escaped = gate.run(|| move || low());
    assert_eq!(escaped().unwrap_err().code().as_str(), "NO_GATE");
    assert_eq!(LOW.load(SeqCst), before);
}

#[test]
fn g2_a_future_made_inside_a_gate_and_polled_outside_is_refused() {
    let _s = serial();
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let before = LOW_ASYNC.load(SeqCst);
    let fut = gate.run(low_async);
    assert_eq!(block_on(fut).unwrap_err().code().as_str(), "NO_GATE");
    assert_eq!(LOW_ASYNC.load(SeqCst), before);
}

#[test]
fn g2_ids_are_compared_exactly() {
    let _s = serial();
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    for id in [
        "rt.low_callable\0",
        "RT.low_callable",
        "rt.low_callab\u{13e}e",
        " rt.low_callable",
        "rt.low_callable\u{200b}",
        "rt..low_callable",
    ] {
        let r = toolgate::registry()
            .call(&gate, id, serde_json::json!({}))
            .now()
            .unwrap();
        assert_eq!(r.unwrap_err().code(), "UNKNOWN_TOOL", "{id:?}");
    }
}

#[test]
fn g2_strict_arguments() {
    // An approver, so that the gate does not refuse the tool before its arguments are read.
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .build()
        .unwrap();
    for args in [
        serde_json::json!({"x": 1}),
        serde_json::json!(null),
        serde_json::json!([]),
        serde_json::json!({"user": "a", "pin": "1", "apiKey": 1}),
    ] {
        let r = toolgate::registry()
            .call(&gate, "rt.secret", args.clone())
            .now()
            .unwrap();
        assert_eq!(r.unwrap_err().code(), "INVALID_PARAMS", "{args}");
    }
}

// ---------------------------------------------------------------------------------------------
// Guarantee 5: nested gates intersect

#[test]
fn g5_a_call_by_name_through_a_wider_gate_inside_a_narrower_one_is_refused() {
    let _s = serial();
    let narrow = Gate::new(Mode::Shadow).unwrap();
    let wide = Gate::new(Mode::PartialAuto).unwrap();
    let before = LOW_CALLABLE.load(SeqCst);
    let r = narrow.run(|| {
        toolgate::registry()
            .call(&wide, "rt.low_callable", serde_json::json!({}))
            .now()
            .unwrap()
    });
    assert!(
        r.is_err(),
        "ran through the wide gate inside the narrow one: {r:?}"
    );
    assert_eq!(LOW_CALLABLE.load(SeqCst), before);
}

#[test]
fn g5_a_wide_scope_polled_inside_a_narrow_run_is_refused() {
    let _s = serial();
    let narrow = Gate::new(Mode::Shadow).unwrap();
    let wide = Gate::new(Mode::PartialAuto).unwrap();
    let before = LOW_ASYNC.load(SeqCst);
    let r = narrow.run(|| block_on(wide.scope(low_async())));
    assert!(r.is_err());
    let r = block_on(narrow.scope(async { wide.run(low) }));
    assert!(r.is_err());
    let r = narrow.run(|| low_gate_param(&wide));
    assert!(r.is_err());
    assert_eq!(LOW_ASYNC.load(SeqCst), before);
}

#[test]
fn g5_every_gate_approves_and_every_deny_list_applies() {
    let _s = serial();
    let outer = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_: &ApprovalRequest<'_>| Approval::Reject("outer says no".into()))
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .build()
        .unwrap();
    let before = HIGH.load(SeqCst);
    let r = outer.run(|| inner.run(high));
    assert_eq!(r.unwrap_err().code().as_str(), "APPROVAL_REJECTED");
    let outer = Gate::builder()
        .mode(Mode::FullAuto)
        .deny("rt.high")
        .approver(AllowAllApprover)
        .build()
        .unwrap();
    let r = outer.run(|| inner.run(high));
    assert_eq!(r.unwrap_err().code().as_str(), "DENY_LISTED");
    let r = inner.run(|| outer.run(high));
    assert_eq!(r.unwrap_err().code().as_str(), "DENY_LISTED");
    assert_eq!(HIGH.load(SeqCst), before);
}

// ---------------------------------------------------------------------------------------------
// Guarantee 4: a lowering between the decision and the body refuses the call

#[test]
fn g4_inner_sink_lowering_the_outer_gate_refuses_the_call() {
    let _s = serial();
    let outer_slot: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let slot = outer_slot.clone();
    let (osink, omem) = hook_sink(|_| Ok(()));
    let (isink, imem) = hook_sink(move |r| {
        if r.stage == Stage::Enter {
            slot.get().unwrap().lower(Mode::Shadow).unwrap();
        }
        Ok(())
    });
    let outer = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(osink)
        .build()
        .unwrap();
    outer_slot.set(outer.clone()).unwrap();
    let inner = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(isink)
        .build()
        .unwrap();
    let before = LOW.load(SeqCst);
    let r = outer.run(|| inner.run(low));
    let ran = LOW.load(SeqCst) - before;
    let (o, i) = (omem.records(), imem.records());
    assert_eq!(
        ran,
        0,
        "body ran after the outer gate was lowered: {r:?}\nouter {:?}\ninner {:?}",
        stages(&o),
        stages(&i)
    );
    assert!(
        unbalanced(&o).is_empty() && unbalanced(&i).is_empty(),
        "{:?} {:?}",
        unbalanced(&o),
        unbalanced(&i)
    );
}

#[test]
fn g4_outer_sink_lowering_the_inner_gate_refuses_the_call() {
    let _s = serial();
    let inner_slot: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let slot = inner_slot.clone();
    let (osink, omem) = hook_sink(move |r| {
        if r.stage == Stage::Enter {
            slot.get().unwrap().lower(Mode::Shadow).unwrap();
        }
        Ok(())
    });
    let (isink, imem) = hook_sink(|_| Ok(()));
    let outer = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(osink)
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(isink)
        .build()
        .unwrap();
    inner_slot.set(inner.clone()).unwrap();
    let before = LOW.load(SeqCst);
    let r = outer.run(|| inner.run(low));
    let ran = LOW.load(SeqCst) - before;
    let (o, i) = (omem.records(), imem.records());
    assert_eq!(
        ran,
        0,
        "body ran after the inner gate was lowered: {r:?}\nouter {:?}\ninner {:?}",
        stages(&o),
        stages(&i)
    );
    assert!(unbalanced(&o).is_empty() && unbalanced(&i).is_empty());
}

#[test]
fn g4_outer_approver_lowering_the_inner_gate_refuses_the_call() {
    let _s = serial();
    let inner_slot: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let slot = inner_slot.clone();
    let outer = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(move |_: &ApprovalRequest<'_>| {
            slot.get().unwrap().lower(Mode::PartialAuto).unwrap();
            Approval::Approve
        })
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .build()
        .unwrap();
    inner_slot.set(inner.clone()).unwrap();
    let before = HIGH.load(SeqCst);
    let r = outer.run(|| inner.run(high));
    assert_eq!(HIGH.load(SeqCst), before, "{r:?}");
}

#[test]
fn g4_a_gate_parameters_sink_lowering_the_ambient_gate_refuses_the_call() {
    let _s = serial();
    let amb_slot: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let slot = amb_slot.clone();
    let (psink, _pmem) = hook_sink(move |r| {
        if r.stage == Stage::Enter {
            slot.get().unwrap().lower(Mode::Shadow).unwrap();
        }
        Ok(())
    });
    let ambient = Gate::new(Mode::PartialAuto).unwrap();
    amb_slot.set(ambient.clone()).unwrap();
    let param = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(psink)
        .build()
        .unwrap();
    let before = LOW_GATE.load(SeqCst);
    let r = ambient.run(|| low_gate_param(&param));
    assert_eq!(LOW_GATE.load(SeqCst), before, "{r:?}");
}

#[test]
fn g4_an_arguments_serialize_lowering_the_gate_runs_before_the_recheck() {
    let _s = serial();
    for (slot, approval) in [(1usize, false), (2, true)] {
        let (sink, mem) = hook_sink(|_| Ok(()));
        let builder = Gate::builder().audit(sink);
        let gate = if approval {
            builder
                .mode(Mode::FullAuto)
                .approver(AllowAllApprover)
                .build()
                .unwrap()
        } else {
            builder.mode(Mode::PartialAuto).build().unwrap()
        };
        let g = gate.clone();
        set_hook(slot, move || {
            let _ = g.lower(Mode::Shadow);
        });
        take_events();
        let r = if approval {
            gate.run(|| high_trig(Trig(slot, "x")))
        } else {
            gate.run(|| low_trig(Trig(slot, "x")))
        };
        clear_hook(slot);
        let ev = take_events();
        eprintln!("approval={approval}: {r:?} events {ev:?}");
        let body = ev.iter().position(|e| e.starts_with("body"));
        let ser_before_body = body.is_some_and(|b| ev[..b].iter().any(|e| e.starts_with("ser")));
        assert!(
            !ser_before_body,
            "approval={approval}: body ran after an argument's Serialize lowered the gate: {r:?} {ev:?} {:?}",
            stages(&mem.records())
        );
        assert!(unbalanced(&mem.records()).is_empty());
    }
}

#[test]
fn g4_an_arguments_serialize_lowering_the_gate_of_an_async_call() {
    let _s = serial();
    let (sink, mem) = hook_sink(|_| Ok(()));
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .unwrap();
    let g = gate.clone();
    set_hook(3, move || {
        let _ = g.lower(Mode::Shadow);
    });
    take_events();
    let r = block_on(gate.scope(async { low_trig(Trig(3, "x")) }));
    clear_hook(3);
    let ev = take_events();
    eprintln!("async: {r:?} events {ev:?}");
    let body = ev.iter().position(|e| e.starts_with("body"));
    assert!(
        !body.is_some_and(|b| ev[..b].iter().any(|e| e.starts_with("ser"))),
        "{r:?} {ev:?}"
    );
    assert!(unbalanced(&mem.records()).is_empty());
}

#[test]
fn g6_a_panicking_classifier_runs_nothing_and_the_gate_still_works() {
    // covered by the project; here with a classifier that panics: the body must not run
    let _s = serial();
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let before = ESC.load(SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| gate.run(|| esc_low(99))));
    assert!(r.is_err() || r.as_ref().unwrap().is_err());
    assert_eq!(ESC.load(SeqCst), before);
    assert!(
        gate.run(|| esc_low(0)).is_ok(),
        "the gate still works after a panicking classifier"
    );
}

#[test]
fn g4_lower_from_another_thread_during_a_slow_inner_sink() {
    let _s = serial();
    let outer = Gate::new(Mode::PartialAuto).unwrap();
    let o2 = outer.clone();
    let (isink, _imem) = hook_sink(move |r| {
        if r.stage == Stage::Enter {
            let o3 = o2.clone();
            std::thread::spawn(move || o3.lower(Mode::Shadow).unwrap())
                .join()
                .unwrap();
        }
        Ok(())
    });
    let inner = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(isink)
        .build()
        .unwrap();
    let before = LOW.load(SeqCst);
    let r = outer.run(|| inner.run(low));
    assert_eq!(LOW.load(SeqCst), before, "{r:?}");
}

// ---------------------------------------------------------------------------------------------
// Guarantee 6: escalation only raises

#[test]
fn g6_an_escalated_call_needs_the_approval_of_its_effective_risk() {
    let _s = serial();
    let asked: Arc<Mutex<Vec<Risk>>> = Arc::default();
    let a2 = asked.clone();
    let no_approver = Gate::new(Mode::FullAuto).unwrap();
    let rejecting = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(move |r: &ApprovalRequest<'_>| {
            a2.lock().unwrap().push(r.risk);
            Approval::Reject("no".into())
        })
        .build()
        .unwrap();
    let before = ESC.load(SeqCst);
    assert_eq!(
        no_approver.run(|| esc_low(1)).unwrap_err().code().as_str(),
        "APPROVAL_REQUIRED"
    );
    assert_eq!(
        rejecting.run(|| esc_low(1)).unwrap_err().code().as_str(),
        "APPROVAL_REJECTED"
    );
    assert_eq!(*asked.lock().unwrap(), vec![Risk::HighWrite]);
    assert_eq!(
        Gate::new(Mode::PartialAuto)
            .unwrap()
            .run(|| esc_low(1))
            .unwrap_err()
            .code()
            .as_str(),
        "ABOVE_CEILING"
    );
    assert_eq!(ESC.load(SeqCst), before);
    // a classifier cannot lower: a HIGH_WRITE tool whose classifier says READ_ONLY
    let b = ESC_HIGH.load(SeqCst);
    assert!(
        Gate::new(Mode::PartialAuto)
            .unwrap()
            .run(|| esc_high(0))
            .is_err()
    );
    assert!(no_approver.run(|| esc_high(0)).is_err());
    assert_eq!(ESC_HIGH.load(SeqCst), b);
}

// ---------------------------------------------------------------------------------------------
// Guarantee 8: every enter gets its exit

#[test]
fn g8_inner_sink_panicking_on_enter_closes_the_outer_enter() {
    let _s = serial();
    let (osink, omem) = hook_sink(|_| Ok(()));
    let (isink, _imem) = hook_sink(|r| {
        if r.stage == Stage::Enter {
            panic!("inner sink panics on enter");
        }
        Ok(())
    });
    let outer = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(osink)
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(isink)
        .build()
        .unwrap();
    let before = LOW.load(SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| outer.run(|| inner.run(low))));
    assert_eq!(LOW.load(SeqCst), before, "{r:?}");
    let o = omem.records();
    assert!(
        unbalanced(&o).is_empty(),
        "{:?}: {:?}",
        unbalanced(&o),
        stages(&o)
    );
}

#[test]
fn g8_outer_sink_panicking_on_enter_closes_the_inner_enter() {
    let _s = serial();
    let (osink, _omem) = hook_sink(|r| {
        if r.stage == Stage::Enter {
            panic!("outer sink panics on enter");
        }
        Ok(())
    });
    let (isink, imem) = hook_sink(|_| Ok(()));
    let outer = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(osink)
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(isink)
        .build()
        .unwrap();
    let before = LOW.load(SeqCst);
    let _ = catch_unwind(AssertUnwindSafe(|| outer.run(|| inner.run(low))));
    assert_eq!(LOW.load(SeqCst), before);
    let i = imem.records();
    assert!(
        unbalanced(&i).is_empty(),
        "{:?}: {:?}",
        unbalanced(&i),
        stages(&i)
    );
}

#[test]
fn g8_a_result_whose_serialize_panics_still_gets_its_exit() {
    let _s = serial();
    let (sink, mem) = hook_sink(|_| Ok(()));
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| gate.run(low_out).map(|_| ())));
    let recs = mem.records();
    assert!(
        unbalanced(&recs).is_empty(),
        "{r:?} {:?}: {:?}",
        unbalanced(&recs),
        stages(&recs)
    );
}

#[test]
fn g8_an_arguments_serialize_panicking_leaves_no_enter_without_exit() {
    let _s = serial();
    for nth in 1..=4usize {
        let slot = 10 + nth;
        let (osink, omem) = hook_sink(|_| Ok(()));
        let (isink, imem) = hook_sink(|_| Ok(()));
        let outer = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(osink)
            .build()
            .unwrap();
        let inner = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(isink)
            .build()
            .unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        set_hook(slot, move || {
            if c.fetch_add(1, SeqCst) + 1 == nth {
                panic!("serialize panics on call {nth}");
            }
        });
        let r = catch_unwind(AssertUnwindSafe(|| {
            outer.run(|| inner.run(|| low_trig(Trig(slot, "x"))))
        }));
        clear_hook(slot);
        let (o, i) = (omem.records(), imem.records());
        assert!(
            unbalanced(&o).is_empty() && unbalanced(&i).is_empty(),
            "panic on serialize #{nth} ({} serializations, {r:?}): outer {:?} inner {:?}",
            count.load(SeqCst),
            stages(&o),
            stages(&i)
        );
    }
}

#[test]
fn g8_nested_scopes_cancelled_after_first_poll_close_every_enter() {
    let _s = serial();
    let (osink, omem) = hook_sink(|_| Ok(()));
    let (isink, imem) = hook_sink(|_| Ok(()));
    let outer = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(osink)
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(isink)
        .build()
        .unwrap();
    {
        let mut fut = Box::pin(outer.scope(inner.scope(low_async())));
        assert!(poll_once(fut.as_mut()).is_pending());
        // dropped on another thread, outside every gate
        std::thread::spawn(move || drop(fut)).join().unwrap();
    }
    for recs in [omem.records(), imem.records()] {
        assert!(unbalanced(&recs).is_empty(), "{:?}", stages(&recs));
        assert!(
            recs.iter().any(|r| r.outcome == Some(Outcome::Cancelled)),
            "{:?}",
            stages(&recs)
        );
    }
    // an async tool polled under `run` and dropped outside it
    let (sink, mem) = hook_sink(|_| Ok(()));
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .unwrap();
    let mut fut = Box::pin(low_async());
    assert!(gate.run(|| poll_once(fut.as_mut())).is_pending());
    drop(fut);
    let recs = mem.records();
    assert!(unbalanced(&recs).is_empty(), "{:?}", stages(&recs));
}

#[test]
fn g8_a_pending_call_dropped_after_every_gate_handle_still_gets_its_exit() {
    let _s = serial();
    let mem = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(mem.clone())
        .build()
        .unwrap();
    let mut fut = Box::pin(gate.scope(low_async()));
    assert!(poll_once(fut.as_mut()).is_pending());
    drop(gate);
    drop(fut);
    let recs = mem.records();
    assert!(unbalanced(&recs).is_empty(), "{:?}", stages(&recs));
}

#[test]
fn g8_body_panic_under_nested_gates_is_recorded_by_each() {
    let _s = serial();
    let (osink, omem) = hook_sink(|_| Ok(()));
    let (isink, imem) = hook_sink(|_| Ok(()));
    let outer = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(osink)
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(isink)
        .build()
        .unwrap();
    let _ = catch_unwind(AssertUnwindSafe(|| outer.run(|| inner.run(low_panic))));
    for recs in [omem.records(), imem.records()] {
        assert!(unbalanced(&recs).is_empty(), "{:?}", stages(&recs));
        assert!(recs.iter().any(|r| r.outcome == Some(Outcome::Panic)));
    }
}

#[test]
fn g8_a_tool_called_from_inside_a_sink_is_decided_and_balanced() {
    let _s = serial();
    let once = Arc::new(AtomicBool::new(false));
    let o = once.clone();
    let (sink, mem) = hook_sink(move |r| {
        if r.stage == Stage::Enter && r.tool == "rt.low" && !o.swap(true, SeqCst) {
            let _ = list_users();
        }
        Ok(())
    });
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let g = gate.clone();
    std::thread::spawn(move || tx.send(g.run(low).is_ok()).unwrap());
    let ok = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("deadlock: a tool called from a sink never returned");
    assert!(ok);
    assert!(
        unbalanced(&mem.records()).is_empty(),
        "{:?}",
        stages(&mem.records())
    );
}

#[test]
fn g8_approver_panic_and_classifier_panic_under_an_audited_outer_gate() {
    let _s = serial();
    let (osink, omem) = hook_sink(|_| Ok(()));
    let outer = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .audit(osink)
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_: &ApprovalRequest<'_>| -> Approval { panic!("approver panics") })
        .build()
        .unwrap();
    let before = HIGH.load(SeqCst);
    let r = outer.run(|| inner.run(high));
    assert_eq!(r.unwrap_err().code().as_str(), "APPROVAL_REJECTED");
    assert_eq!(HIGH.load(SeqCst), before);
    let _ = catch_unwind(AssertUnwindSafe(|| outer.run(|| esc_low(99))));
    let o = omem.records();
    assert!(unbalanced(&o).is_empty(), "{:?}", stages(&o));
}

// ---------------------------------------------------------------------------------------------
// Guarantee 7: two-step approvals

fn two_step() -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap()
}
fn token_of(r: Result<(), Denied>) -> String {
    let d = r.expect_err("the first call must be refused");
    assert_eq!(d.code().as_str(), "APPROVAL_PENDING", "{d:?}");
    d.approval_token().expect("a token").to_string()
}

#[test]
fn g7_an_approval_with_an_unserializable_argument_does_not_run_another_one() {
    let _s = serial();
    let gate = two_step();
    let first = gate.run(|| two_noser(Conn("staging"), "users".into()));
    match first {
        Err(d) if d.approval_token().is_some() => {
            gate.approve(d.approval_token().unwrap()).unwrap();
            let r = gate.run(|| two_noser(Conn("production"), "users".into()));
            assert!(
                !TWO_NOSER.lock().unwrap().contains(&"production"),
                "an approval given for Conn(staging) ran Conn(production): {r:?}"
            );
        }
        other => eprintln!("not approvable in two steps (holds): {other:?}"),
    }
    let gate = two_step();
    if let Err(d) = gate.run(|| two_impl("staging"))
        && let Some(t) = d.approval_token()
    {
        gate.approve(t).unwrap();
        let r = gate.run(|| two_impl("production"));
        assert!(
            !TWO_IMPL.lock().unwrap().contains(&"production".to_string()),
            "impl Trait argument: {r:?}"
        );
    }
}

#[test]
fn g7_an_approved_call_that_calls_itself_runs_once() {
    let _s = serial();
    let gate = two_step();
    TWO_REC.store(0, SeqCst);
    let t = token_of(gate.run(|| two_rec(5)));
    TWO_REC.store(0, SeqCst);
    gate.approve(&t).unwrap();
    take_events();
    let r = gate.run(|| two_rec(5));
    assert!(r.is_ok());
    assert_eq!(
        TWO_REC.load(SeqCst),
        1,
        "the approved call ran again from its own body: {:?}",
        take_events()
    );
}

#[test]
fn g7_an_approval_runs_once_under_concurrent_calls_and_a_slow_sink() {
    let _s = serial();
    let (sink, _mem) = hook_sink(|r| {
        if r.stage == Stage::Enter {
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    });
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .audit(sink)
        .build()
        .unwrap();
    let t = token_of(gate.run(|| two_slow(7)));
    gate.approve(&t).unwrap();
    let before = TWO_SLOW.load(SeqCst);
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let hs: Vec<_> = (0..8)
        .map(|_| {
            let (g, b) = (gate.clone(), barrier.clone());
            std::thread::spawn(move || {
                b.wait();
                g.run(|| two_slow(7)).map_err(|d| d.code().as_str())
            })
        })
        .collect();
    let rs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(TWO_SLOW.load(SeqCst) - before, 1, "{rs:?}");
}

#[test]
fn g7_duplicate_keys_from_a_flattened_map_do_not_collapse() {
    let _s = serial();
    let gate = two_step();
    let extra: BTreeMap<String, u32> = [("amount".to_string(), 1)].into();
    let small = Flat {
        amount: 1,
        extra: extra.clone(),
    };
    let big = Flat {
        amount: 1_000_000,
        extra,
    };
    // Two values with one key twice cannot be written canonically: not bound, so not approvable.
    let first = gate.run(|| two_flat(small.clone())).unwrap_err();
    assert_eq!(first.code().as_str(), "APPROVAL_REQUIRED");
    assert!(first.approval_token().is_none());
    let r = gate.run(|| two_flat(big.clone()));
    assert!(
        !TWO_FLAT.lock().unwrap().contains(&1_000_000),
        "amount=1000000 ran: {r:?}"
    );
}

#[test]
fn g7_large_integers_bind_exactly() {
    let _s = serial();
    let gate = two_step();
    let a = u64::MAX as u128 + 1;
    let b = u128::MAX;
    match gate.run(|| two_big(a)) {
        Err(d) if d.approval_token().is_some() => {
            gate.approve(d.approval_token().unwrap()).unwrap();
            let r = gate.run(|| two_big(b));
            assert!(
                !TWO_BIG.lock().unwrap().contains(&b),
                "approved {a}, ran {b}: {r:?}"
            );
        }
        other => eprintln!("u128 not approvable (holds): {other:?}"),
    }
}

#[test]
fn g7_a_generic_receiver_is_bound() {
    let _s = serial();
    let gate = two_step();
    let staging = GDb {
        name: "staging".to_string(),
    };
    let production = GDb {
        name: "production".to_string(),
    };
    match gate.run(|| staging.gdrop()) {
        Err(d) if d.approval_token().is_some() => {
            gate.approve(d.approval_token().unwrap()).unwrap();
            let r = gate.run(|| production.gdrop());
            assert!(
                !GDROP.lock().unwrap().contains(&"production".to_string()),
                "{r:?}"
            );
        }
        other => eprintln!("generic receiver not approvable (holds): {other:?}"),
    }
}

#[test]
fn g7_a_boxed_or_arced_receiver_is_bound() {
    let _s = serial();
    let gate = two_step();
    match gate.run(|| Box::new(BDb { name: "staging" }).bdrop()) {
        Err(d) if d.approval_token().is_some() => {
            gate.approve(d.approval_token().unwrap()).unwrap();
            let r = gate.run(|| Box::new(BDb { name: "production" }).bdrop());
            assert!(
                !BDROP.lock().unwrap().contains(&"production"),
                "Box<Self>: {r:?}"
            );
        }
        other => eprintln!("Box<Self> not approvable (holds): {other:?}"),
    }
    let gate = two_step();
    match gate.run(|| Arc::new(BDb { name: "staging2" }).adrop()) {
        Err(d) if d.approval_token().is_some() => {
            gate.approve(d.approval_token().unwrap()).unwrap();
            let r = gate.run(|| {
                Arc::new(BDb {
                    name: "production2",
                })
                .adrop()
            });
            assert!(
                !BDROP.lock().unwrap().contains(&"production2"),
                "Arc<Self>: {r:?}"
            );
        }
        other => eprintln!("Arc<Self> not approvable (holds): {other:?}"),
    }
}

#[test]
fn g7_a_token_of_one_gate_approves_nothing_on_another() {
    let _s = serial();
    let a = two_step();
    let b = two_step();
    let t = token_of(a.run(|| two_slow(99)));
    let _ = token_of(b.run(|| two_slow(99)));
    assert!(b.approve(&t).is_err());
    let before = TWO_SLOW.load(SeqCst);
    let _ = b.run(|| two_slow(99));
    assert_eq!(TWO_SLOW.load(SeqCst), before);
}

#[test]
fn g7_nested_two_step_gates_each_need_their_approval_and_run_once() {
    let _s = serial();
    let outer = two_step();
    let inner = two_step();
    let before = TWO_SLOW.load(SeqCst);
    let mut rounds = vec![];
    for _ in 0..8 {
        match outer.run(|| inner.run(|| two_slow(1234))) {
            Ok(()) => break,
            Err(d) => {
                let t = d.approval_token().expect("token").to_string();
                rounds.push((outer.approve(&t).is_ok(), inner.approve(&t).is_ok()));
            }
        }
    }
    eprintln!("approval rounds (outer ok, inner ok): {rounds:?}");
    assert!(TWO_SLOW.load(SeqCst) - before <= 1);
    let _ = outer.run(|| inner.run(|| two_slow(1234)));
    assert!(TWO_SLOW.load(SeqCst) - before <= 1, "ran twice");
}

#[test]
fn g7_a_call_from_inside_the_approval_granted_record_runs_at_most_once() {
    let _s = serial();
    let slot: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let s2 = slot.clone();
    let (sink, _mem) = hook_sink(move |r| {
        if r.stage == Stage::ApprovalGranted {
            let g = s2.get().unwrap();
            event(format!(
                "in-sink:{:?}",
                g.run(|| two_slow(4242)).map_err(|d| d.code().as_str())
            ));
        }
        Ok(())
    });
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .audit(sink)
        .build()
        .unwrap();
    slot.set(gate.clone()).unwrap();
    let t = token_of(gate.run(|| two_slow(4242)));
    let before = TWO_SLOW.load(SeqCst);
    take_events();
    let (tx, rx) = std::sync::mpsc::channel();
    let g = gate.clone();
    std::thread::spawn(move || {
        let a = g.approve(&t).is_ok();
        let r = g.run(|| two_slow(4242)).map_err(|d| d.code().as_str());
        tx.send((a, r)).unwrap();
    });
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("deadlock in approve");
    assert!(
        TWO_SLOW.load(SeqCst) - before <= 1,
        "{got:?} {:?}",
        take_events()
    );
}

#[test]
fn g7_a_call_from_inside_an_arguments_serialize_does_not_double_an_approval() {
    let _s = serial();
    let gate = two_step();
    let t = token_of(gate.run(|| high_trig(Trig(30, "same"))));
    gate.approve(&t).unwrap();
    let once = Arc::new(AtomicBool::new(false));
    let o = once.clone();
    let g = gate.clone();
    set_hook(30, move || {
        if !o.swap(true, SeqCst) {
            event(format!(
                "inner:{:?}",
                g.run(|| high_trig(Trig(31, "same")))
                    .map_err(|d| d.code().as_str())
            ));
        }
    });
    take_events();
    let before = HIGH_TRIG.load(SeqCst);
    let r = gate.run(|| high_trig(Trig(30, "same")));
    clear_hook(30);
    assert!(
        HIGH_TRIG.load(SeqCst) - before <= 1,
        "{r:?} {:?}",
        take_events()
    );
}

#[test]
fn g7_approvals_expire() {
    let _s = serial();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .approval_ttl(Duration::from_millis(30))
        .build()
        .unwrap();
    let t = token_of(gate.run(|| two_slow(555)));
    gate.approve(&t).unwrap();
    std::thread::sleep(Duration::from_millis(80));
    let before = TWO_SLOW.load(SeqCst);
    assert_eq!(
        gate.run(|| two_slow(555)).unwrap_err().code().as_str(),
        "APPROVAL_EXPIRED"
    );
    assert_eq!(TWO_SLOW.load(SeqCst), before);
}

// redaction

fn pin_free(s: &str, pin: &str) -> bool {
    !s.contains(pin)
}

#[test]
fn g7_a_redacted_value_reaches_no_record_message_request_or_debug() {
    let _s = serial();
    let pins = ["4711", "9382"];
    let mut digests: Vec<Vec<String>> = vec![];
    let mut outputs: Vec<String> = vec![];
    for pin in pins {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let s2 = seen.clone();
        let (sink, mem) = hook_sink(|_| Ok(()));
        let approver_gate = Gate::builder()
            .mode(Mode::FullAuto)
            .audit(sink)
            .approver(move |r: &ApprovalRequest<'_>| {
                s2.lock().unwrap().push(format!("{r:?}"));
                Approval::Reject("no".into())
            })
            .build()
            .unwrap();
        let d1 = approver_gate
            .run(|| secret("ada".into(), pin.into()))
            .unwrap_err();
        let (sink2, mem2) = hook_sink(|_| Ok(()));
        let ts = Gate::builder()
            .mode(Mode::FullAuto)
            .two_step_approvals()
            .audit(sink2)
            .build()
            .unwrap();
        let d2 = ts.run(|| secret("ada".into(), pin.into())).unwrap_err();
        let tok = d2.approval_token().unwrap().to_string();
        let dbg_gate_pending = format!("{ts:?}");
        ts.approve(&tok).unwrap();
        let by_name = toolgate::registry()
            .call(
                &ts,
                "rt.secret",
                serde_json::json!({"user": "ada", "pin": pin}),
            )
            .now()
            .unwrap();
        let _ = ts.run(|| secret("ada".into(), pin.into()));
        let mut out = String::new();
        for r in mem.records().iter().chain(mem2.records().iter()) {
            out += &serde_json::to_string(r).unwrap();
            out += &format!("{r:?}");
        }
        out += &format!(
            "{d1:?}{d1}{d2:?}{d2}{}{}{dbg_gate_pending}{ts:?}{by_name:?}",
            d1.message(),
            d2.message()
        );
        out += &seen.lock().unwrap().join("|");
        out += &serde_json::to_string(&d2).unwrap();
        assert!(
            pin_free(&out, pin),
            "the pin {pin} appears in records/messages/Debug"
        );
        let mut ds: Vec<String> = mem
            .records()
            .iter()
            .chain(mem2.records().iter())
            .map(|r| format!("{:?}|{:?}|{:?}", r.stage, r.arguments_digest, r.arguments))
            .collect();
        ds.extend(seen.lock().unwrap().iter().cloned());
        digests.push(ds);
        outputs.push(dbg_gate_pending);
    }
    assert_eq!(
        digests[0], digests[1],
        "a digest shown to records or approvers depends on the redacted pin"
    );
    eprintln!("gate Debug with a pending request: {}", outputs[0]);
}

#[test]
fn g7_a_redacted_value_sent_with_the_wrong_type_is_not_echoed() {
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let r = toolgate::registry()
        .call(
            &gate,
            "rt.secret_num",
            serde_json::json!({"pin": "4711-secret"}),
        )
        .now()
        .unwrap();
    let e = r.unwrap_err();
    let shown = format!("{e}{e:?}{}", serde_json::to_string(&e).unwrap());
    assert!(
        !shown.contains("4711-secret"),
        "a redacted argument's value is echoed in the INVALID_PARAMS error: {shown}"
    );
}

#[test]
fn g7_an_invalid_redacted_argument_leaves_no_trace_in_the_audit_log() {
    let (sink, mem) = hook_sink(|_| Ok(()));
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .unwrap();
    let _ = toolgate::registry()
        .call(
            &gate,
            "rt.secret_num",
            serde_json::json!({"pin": "4711-secret"}),
        )
        .now();
    let all: String = mem
        .records()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    assert!(!all.contains("4711-secret"), "{all}");
}

#[test]
fn g7_the_token_is_not_in_debug_output() {
    let _s = serial();
    let gate = two_step();
    let d = gate.run(|| two_slow(31337)).unwrap_err();
    let t = d.approval_token().unwrap().to_string();
    let shown = format!("{d:?}");
    assert!(
        !shown.contains(&t),
        "Denied's Debug carries the operator's token: {shown}"
    );
    let ce = toolgate::CallError::Denied(d);
    assert!(!format!("{ce:?}{ce}").contains(&t));
}

// ---------------------------------------------------------------------------------------------
// Guarantee 9: the JSONL chain

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("redteam-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d.join("audit.jsonl")
}

#[test]
fn g9_strange_text_in_records_verifies() {
    let _s = serial();
    let path = tmp("strange");
    let weird = "a\u{7f}\u{2028}\u{2029}\"\\\n\t\r\u{0}\u{1f}/</script>\u{fffd}\u{10ffff}é";
    {
        let sink = toolgate::audit::JsonlSink::open(&path).unwrap();
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .agent(weird)
            .audit(sink)
            .approver(move |_: &ApprovalRequest<'_>| Approval::Reject(weird.into()))
            .build()
            .unwrap();
        let _ = gate.run(high);
        let _ = gate.run(low);
        gate.lower_by(Mode::Shadow, weird).unwrap();
    }
    let report = toolgate::audit::verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report:?}");
}

#[test]
fn g9_appending_to_a_log_without_its_last_newline_keeps_the_chain() {
    let _s = serial();
    let path = tmp("nonewline");
    {
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(toolgate::audit::JsonlSink::open(&path).unwrap())
            .build()
            .unwrap();
        gate.run(low).unwrap();
    }
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.pop(), Some(b'\n'));
    std::fs::write(&path, &bytes).unwrap();
    let report = toolgate::audit::verify_file(&path).unwrap();
    assert!(
        report.final_newline_missing && report.broken.is_none(),
        "{report:?}"
    );
    match toolgate::audit::JsonlSink::open(&path) {
        Ok(sink) => {
            let gate = Gate::builder()
                .mode(Mode::PartialAuto)
                .audit(sink)
                .build()
                .unwrap();
            gate.run(low).unwrap();
            drop(gate);
            let report = toolgate::audit::verify_file(&path).unwrap();
            assert!(
                report.is_intact(),
                "a legitimate append after a crash broke the chain: {report:?}"
            );
        }
        Err(e) => eprintln!("open refuses (holds): {e}"),
    }
}

#[test]
fn g9_crlf_and_duplicate_keys_are_tampering() {
    let _s = serial();
    let path = tmp("crlf");
    {
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(toolgate::audit::JsonlSink::open(&path).unwrap())
            .build()
            .unwrap();
        gate.run(low).unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let crlf = text.replace('\n', "\r\n");
    assert!(
        toolgate::audit::verify_bytes(crlf.as_bytes())
            .broken
            .is_some()
    );
    let first = text.lines().next().unwrap();
    let dup = text.replacen(first, &format!("{{\"call\":999,{}", &first[1..]), 1);
    assert!(
        toolgate::audit::verify_bytes(dup.as_bytes())
            .broken
            .is_some()
    );
}

// unused-import guard
#[allow(dead_code)]
fn _uses(_: HashMap<u8, u8>) {}

// ---------------------------------------------------------------------------------------------
// more attempts

#[test]
fn g5_a_tool_body_cannot_widen_its_own_gate() {
    let _s = serial();
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let before = HIGH.load(SeqCst);
    let r = shadow.run(sneaky_read);
    assert_eq!(HIGH.load(SeqCst), before, "{r:?}");
    assert_eq!(WIDEN.load(SeqCst), 0);
}

#[test]
fn g4_lower_never_raises() {
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    assert!(gate.lower(Mode::FullAuto).is_err());
    assert_eq!(gate.mode(), Mode::PartialAuto);
    gate.lower(Mode::Shadow).unwrap();
    assert!(gate.clone().lower(Mode::Advisory).is_err());
    assert_eq!(
        gate.run(low).unwrap_err().code().as_str(),
        "MODE_NOT_ALLOWED"
    );
}

#[test]
fn g7_a_redacted_argument_is_still_bound() {
    let _s = serial();
    let gate = two_step();
    let before = SECRET.load(SeqCst);
    let d = gate
        .run(|| secret("ada".into(), "1111".into()))
        .unwrap_err();
    gate.approve(d.approval_token().unwrap()).unwrap();
    let r = gate.run(|| secret("ada".into(), "2222".into()));
    assert_eq!(r.unwrap_err().code().as_str(), "APPROVAL_PENDING");
    assert_eq!(SECRET.load(SeqCst), before);
}

#[test]
fn g7_an_approval_of_a_generic_tool_does_not_run_another_type_that_serializes_alike() {
    let _s = serial();
    let gate = two_step();
    let r = gate.run(|| apply_migration(DryRun, "drop_users".into()));
    let d = r.unwrap_err();
    gate.approve(d.approval_token().expect("token")).unwrap();
    let r = gate.run(|| apply_migration(Execute, "drop_users".into()));
    assert!(
        !APPLY.lock().unwrap().contains(&"execute"),
        "approved apply_migration(DryRun, ..), ran apply_migration(Execute, ..): {r:?}"
    );
}

#[test]
fn g8_an_async_tool_with_a_gate_parameter_is_closed_when_cancelled() {
    let _s = serial();
    let mem = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(mem.clone())
        .build()
        .unwrap();
    {
        let mut fut = Box::pin(async_gate_param(&gate));
        assert!(poll_once(fut.as_mut()).is_pending());
    }
    let recs = mem.records();
    assert!(unbalanced(&recs).is_empty(), "{:?}", stages(&recs));
    assert!(recs.iter().any(|r| r.outcome == Some(Outcome::Cancelled)));
}

#[test]
fn g8_a_failing_call_by_name_is_closed_with_error() {
    let mem = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(mem.clone())
        .build()
        .unwrap();
    let r = toolgate::registry()
        .call(&gate, "rt.failing", serde_json::json!({}))
        .now()
        .unwrap();
    assert_eq!(r.unwrap_err().code(), "HANDLER_ERROR");
    let recs = mem.records();
    assert!(unbalanced(&recs).is_empty());
    assert!(
        recs.iter().any(|r| r.outcome == Some(Outcome::Error)),
        "{:?}",
        stages(&recs)
    );
}

#[test]
fn g8_a_sink_panicking_on_an_exit_record_leaves_the_other_gates_exit() {
    let _s = serial();
    for panicking_is_inner in [true, false] {
        let bad = |r: &AuditRecord| -> Result<(), AuditError> {
            if r.stage == Stage::Exit {
                panic!("sink panics on exit");
            }
            Ok(())
        };
        let (good_sink, good_mem) = hook_sink(|_| Ok(()));
        let (bad_sink, _bad_mem) = hook_sink(bad);
        let (osink, isink): (HookSink, HookSink) = if panicking_is_inner {
            (good_sink, bad_sink)
        } else {
            (bad_sink, good_sink)
        };
        let outer = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(osink)
            .build()
            .unwrap();
        let inner = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(isink)
            .build()
            .unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| outer.run(|| inner.run(low))));
        let recs = good_mem.records();
        assert!(
            unbalanced(&recs).is_empty(),
            "panicking sink is {}: the other gate's log {:?} (call returned {r:?})",
            if panicking_is_inner { "inner" } else { "outer" },
            stages(&recs)
        );
    }
}

#[test]
fn g8_a_sink_panicking_on_an_inner_refusal_leaves_the_outer_enter_closed() {
    let _s = serial();
    let (osink, omem) = hook_sink(|_| Ok(()));
    let (isink, _imem) = hook_sink(|r| {
        if r.stage == Stage::Refused {
            panic!("inner sink panics on a refusal");
        }
        Ok(())
    });
    let outer = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(osink)
        .build()
        .unwrap();
    let inner = Gate::builder()
        .mode(Mode::Shadow)
        .audit(isink)
        .build()
        .unwrap();
    let before = LOW.load(SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| outer.run(|| inner.run(low))));
    assert_eq!(LOW.load(SeqCst), before);
    let o = omem.records();
    assert!(unbalanced(&o).is_empty(), "{r:?}: {:?}", stages(&o));
}
