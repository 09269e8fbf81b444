//! Outside attacks on the operator's policy file's argument rules (guarantee 18), read off the call
//! itself: the lone gate's check, calls by name, the commit point after a wait, and where argument
//! rules meet grants, the latch, budgets, approvers, async tools, a `&Gate` parameter and nested gates.
//!
//! Every test asserts the SAFE outcome: a test that fails is a hole.

use super::{AsyncSlowSink, Hold, HoldingBudgets, SlowSink};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use toolgate::approval::SessionGrant;
use toolgate::audit::MemorySink;
use toolgate::gate::BudgetScope;
use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::{Approval, ApprovalRequest, Denied, Gate, Mode, Risk, tool};

// ---------------------------------------------------------------------------------------------------
// What ran.

static RAN: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn ran(marker: String) {
    RAN.lock().unwrap().push(marker);
}

fn has_run(marker: &str) -> bool {
    RAN.lock().unwrap().iter().any(|m| m == marker)
}

fn ran_with_prefix(prefix: &str) -> Vec<String> {
    RAN.lock()
        .unwrap()
        .iter()
        .filter(|m| m.starts_with(prefix))
        .cloned()
        .collect()
}

// ---------------------------------------------------------------------------------------------------
// A point where one thread waits until the test releases it.

// ---------------------------------------------------------------------------------------------------
// A value behind a shared handle whose `Serialize` may wait once (a hook), as a slow or remote value.

pub struct HookedInner {
    value: Mutex<String>,
    hook: Mutex<Option<Hold>>,
}

#[derive(Clone, toolgate::schemars::JsonSchema)]
#[schemars(crate = "toolgate::schemars")]
pub struct Hooked(#[schemars(with = "String")] Arc<HookedInner>);

/// Values made by `Deserialize` (calls by name), by their first value; and hooks armed for them.
static MADE: Mutex<Vec<(String, Hooked)>> = Mutex::new(Vec::new());
static ARMED: Mutex<Vec<(String, Hold)>> = Mutex::new(Vec::new());

impl Hooked {
    fn new(v: &str) -> Hooked {
        Hooked(Arc::new(HookedInner {
            value: Mutex::new(v.to_owned()),
            hook: Mutex::new(None),
        }))
    }
    fn waiting(v: &str, hold: &Hold) -> Hooked {
        let h = Hooked::new(v);
        *h.0.hook.lock().unwrap() = Some(hold.clone());
        h
    }
    fn set(&self, v: &str) {
        *self.0.value.lock().unwrap() = v.to_owned();
    }
    fn get(&self) -> String {
        self.0.value.lock().unwrap().clone()
    }
    #[allow(dead_code)]
    fn made(first: &str) -> Option<Hooked> {
        MADE.lock()
            .unwrap()
            .iter()
            .find(|(k, _)| k == first)
            .map(|(_, h)| h.clone())
    }
}

impl toolgate::serde::Serialize for Hooked {
    fn serialize<S: toolgate::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let seen = self.get();
        let hook = self.0.hook.lock().unwrap().take();
        if let Some(hold) = hook {
            hold.arrive_and_wait();
        }
        s.serialize_str(&seen)
    }
}

impl<'de> toolgate::serde::Deserialize<'de> for Hooked {
    fn deserialize<D: toolgate::serde::Deserializer<'de>>(d: D) -> Result<Hooked, D::Error> {
        let v = <String as toolgate::serde::Deserialize>::deserialize(d)?;
        let h = Hooked::new(&v);
        let armed = {
            let mut armed = ARMED.lock().unwrap();
            armed
                .iter()
                .position(|(k, _)| *k == v)
                .map(|i| armed.remove(i).1)
        };
        *h.0.hook.lock().unwrap() = armed;
        MADE.lock().unwrap().push((v, h.clone()));
        Ok(h)
    }
}

/// A value whose `Serialize` fails ("err*") or panics ("panic*").
#[derive(Clone, toolgate::schemars::JsonSchema, toolgate::serde::Deserialize)]
#[schemars(crate = "toolgate::schemars")]
#[serde(crate = "toolgate::serde")]
pub struct Failing(String);

impl toolgate::serde::Serialize for Failing {
    fn serialize<S: toolgate::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.starts_with("err") {
            return Err(<S::Error as toolgate::serde::ser::Error>::custom("cannot"));
        }
        if self.0.starts_with("panic") {
            panic!("a Serialize that panics");
        }
        s.serialize_str(&self.0)
    }
}

#[derive(
    Clone,
    Debug,
    toolgate::schemars::JsonSchema,
    toolgate::serde::Serialize,
    toolgate::serde::Deserialize,
)]
#[schemars(crate = "toolgate::schemars")]
#[serde(crate = "toolgate::serde")]
pub enum Env {
    Prod,
    Staging,
    Named(String),
}

#[derive(
    Clone,
    Debug,
    toolgate::schemars::JsonSchema,
    toolgate::serde::Serialize,
    toolgate::serde::Deserialize,
)]
#[schemars(crate = "toolgate::schemars")]
#[serde(crate = "toolgate::serde")]
pub struct HostName(String);

// ---------------------------------------------------------------------------------------------------
// The tools, in a domain of their own.

/// Push to a host.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn push(host: String) -> Result<String, Denied> {
    ran(format!("push:{host}"));
    Ok(host)
}

/// Push to a host, asynchronously.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
async fn push_async(host: String) -> Result<String, Denied> {
    ran(format!("push_async:{host}"));
    Ok(host)
}

/// Push to a host behind a shared handle.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn hooked(host: Hooked, tag: String) -> Result<String, Denied> {
    let seen = host.get();
    ran(format!("hooked:{tag}:{seen}"));
    Ok(seen)
}

/// Push to a host behind a shared handle, asynchronously.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
async fn hooked_async(host: Hooked, tag: String) -> Result<String, Denied> {
    let seen = host.get();
    ran(format!("hooked_async:{tag}:{seen}"));
    Ok(seen)
}

/// Two hosts behind shared handles.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn pair(host: Hooked, other: Hooked, tag: String) -> Result<String, Denied> {
    let seen = host.get();
    ran(format!("pair:{tag}:{seen}:{}", other.get()));
    Ok(seen)
}

/// Two hosts behind shared handles, the other first.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn pair_rev(other: Hooked, host: Hooked, tag: String) -> Result<String, Denied> {
    let seen = host.get();
    ran(format!("pair_rev:{tag}:{seen}:{}", other.get()));
    Ok(seen)
}

/// A host whose `Serialize` enters a gate of its own and calls a tool there (the application's code,
/// run while the gate reads the argument).
#[derive(Clone, toolgate::schemars::JsonSchema, toolgate::serde::Deserialize)]
#[schemars(crate = "toolgate::schemars")]
#[serde(crate = "toolgate::serde")]
pub struct Nesting(String);

impl toolgate::serde::Serialize for Nesting {
    fn serialize<S: toolgate::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let inner = Gate::builder().mode(Mode::Shadow).build().unwrap();
        let looked = inner.run(|| look_up(self.0.clone()));
        s.serialize_str(&looked.unwrap_or_else(|d| d.code().to_string()))
    }
}

/// Look a host up.
#[tool(risk = "READ_ONLY", domain = "rr")]
fn look_up(host: String) -> Result<String, Denied> {
    ran(format!("look_up:{host}"));
    Ok(host)
}

/// Push to a host whose argument enters a gate while it is read.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn nested(host: Nesting, tag: String) -> Result<String, Denied> {
    ran(format!("nested:{tag}:{}", host.0));
    Ok(host.0)
}

/// Fetch a page: untrusted output.
#[tool(risk = "READ_ONLY", domain = "rr", untrusted_output, callable)]
fn fetch(url: String) -> Result<String, Denied> {
    ran(format!("fetch:{url}"));
    Ok(url)
}

/// A 128-bit count.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn wide(n: u128, tag: String) -> Result<String, Denied> {
    ran(format!("wide:{tag}"));
    Ok(n.to_string())
}

/// A signed 128-bit count.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn iwide(n: i128, tag: String) -> Result<String, Denied> {
    ran(format!("iwide:{tag}"));
    Ok(n.to_string())
}

/// A small float.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn small_f(x: f32, tag: String) -> Result<String, Denied> {
    ran(format!("small_f:{tag}"));
    Ok(x.to_string())
}

/// An exact unsigned count.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn exact_u(n: u64, tag: String) -> Result<u64, Denied> {
    ran(format!("exact_u:{tag}"));
    Ok(n)
}

/// An exact signed count.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn exact_i(n: i64, tag: String) -> Result<i64, Denied> {
    ran(format!("exact_i:{tag}"));
    Ok(n)
}

/// Push to many hosts.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn hosts(hosts: Vec<String>, tag: String) -> Result<String, Denied> {
    ran(format!("hosts:{tag}"));
    Ok(tag)
}

/// Deploy to an environment.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn env(env: Env, tag: String) -> Result<String, Denied> {
    ran(format!("env:{tag}"));
    Ok(format!("{env:?}"))
}

/// Push to a named host.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn named(host: HostName, tag: String) -> Result<String, Denied> {
    ran(format!("named:{tag}"));
    Ok(host.0)
}

/// Any JSON.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn anyv(v: serde_json::Value, tag: String) -> Result<String, Denied> {
    ran(format!("anyv:{tag}"));
    Ok(v.to_string())
}

/// Two hosts as an array.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn arr(hosts: [String; 2], tag: String) -> Result<String, Denied> {
    ran(format!("arr:{tag}"));
    Ok(hosts.concat())
}

/// Two hosts as a tuple.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn tup(hosts: (String, String), tag: String) -> Result<String, Denied> {
    ran(format!("tup:{tag}"));
    Ok(hosts.0)
}

/// Hosts as a set.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn set(hosts: BTreeSet<String>, tag: String) -> Result<String, Denied> {
    ran(format!("set:{tag}"));
    Ok(tag)
}

/// An optional host.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn opt(host: Option<String>, tag: String) -> Result<String, Denied> {
    ran(format!("opt:{tag}"));
    Ok(tag)
}

/// A parameter named by a raw identifier (`r#type`), which calls by name and rules name `type`.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn raw_param(r#type: String, tag: String) -> Result<String, Denied> {
    ran(format!("raw_param:{tag}"));
    Ok(r#type)
}

/// An argument whose Serialize fails or panics.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn failing(host: Failing, tag: String) -> Result<String, Denied> {
    ran(format!("failing:{tag}"));
    Ok(host.0)
}

/// Production is a critical write; anywhere else a small one.
pub fn classify(host: &str, note: &str) -> Risk {
    let _ = note;
    if host.starts_with("prod") {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

/// Deploy with an escalation.
#[tool(risk = "LOW_WRITE", domain = "rr", escalate = classify, callable)]
fn escal(host: String, note: String) -> Result<String, Denied> {
    ran(format!("escal:{host}:{note}"));
    Ok(host)
}

/// Push with the gate passed in.
#[tool(risk = "LOW_WRITE", domain = "rr", callable)]
fn with_gate(gate: &Gate, host: String) -> Result<String, Denied> {
    let _ = gate;
    ran(format!("with_gate:{host}"));
    Ok(host)
}

// ---------------------------------------------------------------------------------------------------
// Helpers.

fn pf(text: &str) -> PolicyFile {
    PolicyFile::parse("rr.toml", text)
        .unwrap_or_else(|e| panic!("the test's policy does not check: {e}"))
}

const EMPTY: &str = "format = 1\n";

fn rule(tool: &str, parameter: &str, body: &str) -> String {
    format!(
        "format = 1\n[[defaults.arguments]]\ntool = \"{tool}\"\nparameter = \"{parameter}\"\n{body}\n"
    )
}

fn refuse_prod(tool: &str, parameter: &str) -> String {
    rule(tool, parameter, "refuse = [\"prod-*\"]")
}

fn lone(text: &str) -> (Gate, LivePolicy) {
    let live = LivePolicy::new(pf(text));
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .policy(live.clone())
        .build()
        .unwrap();
    (gate, live)
}

/// Runs `call` on a thread of its own until it reaches `hold`, does `meanwhile`, releases it, and
/// returns its outcome.
fn while_held(
    hold: &Hold,
    call: impl FnOnce() -> String + Send + 'static,
    meanwhile: impl FnOnce(),
) -> String {
    let call = thread::spawn(call);
    assert!(
        hold.arrived_within(Duration::from_secs(5)),
        "the call never reached the hold"
    );
    meanwhile();
    hold.release();
    call.join().unwrap()
}

fn code<T: std::fmt::Debug>(result: Result<T, Denied>) -> String {
    match result {
        Ok(v) => format!("ran ({v:?})"),
        Err(d) => d.code().to_string(),
    }
}

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

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Replaces the policy on a thread of its own (it may wait for the held call), gives it a moment,
/// releases the hold, and waits for the replacement.
fn replace_while_held(live: &LivePolicy, file: PolicyFile, hold: &Hold) {
    let l = live.clone();
    let replacer = thread::spawn(move || l.replace(file, "attacker-test"));
    thread::sleep(Duration::from_millis(200));
    hold.release();
    replacer.join().unwrap();
}

// ===================================================================================================
// 1. The lone gate's check: something changes while a ruled argument is read (its Serialize waits).

/// The operator denies the tool while the lone gate reads the ruled argument; the decision completes
/// after `replace` returns, so the new file must refuse it.
#[test]
fn z01_lone_deny_added_while_ruled_argument_is_read() {
    let (gate, live) = lone(&refuse_prod("rr.hooked", "host"));
    let hold = Hold::default();
    let host = Hooked::waiting("staging-z01", &hold);
    let g = gate.clone();
    let call = thread::spawn(move || code(g.run(|| hooked(host, "z01".into()))));
    assert!(
        hold.arrived_within(Duration::from_secs(5)),
        "the lone check did not read the argument"
    );
    let l = live.clone();
    let replacer = thread::spawn(move || {
        l.replace(
            pf("format = 1\n[defaults]\ndeny = [\"rr.hooked\"]\n"),
            "ops",
        )
    });
    // wait until replace returns (or 2 s), then release the read
    let t = Instant::now();
    while !replacer.is_finished() && t.elapsed() < Duration::from_secs(2) {
        thread::sleep(Duration::from_millis(10));
    }
    let replaced_first = replacer.is_finished();
    hold.release();
    replacer.join().unwrap();
    let outcome = call.join().unwrap();
    assert!(
        !has_run("hooked:z01:staging-z01"),
        "ran after its tool was denied (replace returned before the release: {replaced_first}): {outcome}"
    );
}

/// The kill switch pulled while the lone gate reads the ruled argument (guarantee 4: a decision that
/// completes after `lower` returns never runs at the old mode).
#[test]
fn z02_lone_kill_switch_while_ruled_argument_is_read() {
    let (gate, _live) = lone(&refuse_prod("rr.hooked", "host"));
    let hold = Hold::default();
    let host = Hooked::waiting("staging-z02", &hold);
    let g = gate.clone();
    let outcome = while_held(
        &hold,
        move || code(g.run(|| hooked(host, "z02".into()))),
        || {
            gate.lower(Mode::Shadow).unwrap();
        },
    );
    assert!(
        !has_run("hooked:z02:staging-z02"),
        "a LOW_WRITE ran after the gate was lowered to SHADOW: {outcome}"
    );
}

/// The taint latch closes (another thread runs an untrusted tool on the same gate) while the lone
/// gate reads the ruled argument of a write: the write, decided after, must not run unasked.
#[test]
fn z03_lone_latch_closes_while_ruled_argument_is_read() {
    let (gate, _live) = lone(&refuse_prod("rr.hooked", "host"));
    let hold = Hold::default();
    let host = Hooked::waiting("staging-z03", &hold);
    let g = gate.clone();
    let outcome = while_held(
        &hold,
        move || code(g.run(|| hooked(host, "z03".into()))),
        || {
            gate.run(|| fetch("z03-page".into())).unwrap();
            assert!(gate.taint().is_some());
        },
    );
    assert!(
        !has_run("hooked:z03:staging-z03"),
        "a write ran unasked in a session tainted before its decision completed: {outcome}"
    );
}

/// By name on the lone path: the file adds a rule refusing the call's other argument while the ruled
/// one is read.
#[test]
fn z04_lone_by_name_rule_added_while_ruled_argument_is_read() {
    let (gate, live) = lone(&refuse_prod("rr.hooked", "host"));
    let hold = Hold::default();
    ARMED
        .lock()
        .unwrap()
        .push(("staging-z04".into(), hold.clone()));
    let g = gate.clone();
    let call = thread::spawn(move || {
        by_name(
            &g,
            "rr.hooked",
            serde_json::json!({"host": "staging-z04", "tag": "bad-z04"}),
        )
    });
    assert!(hold.arrived_within(Duration::from_secs(5)));
    let text = format!(
        "{}[[defaults.arguments]]\ntool = \"rr.hooked\"\nparameter = \"tag\"\nrefuse = [\"bad-*\"]\n",
        refuse_prod("rr.hooked", "host")
    );
    replace_while_held(&live, pf(&text), &hold);
    let outcome = call.join().unwrap();
    assert!(
        !has_run("hooked:bad-z04:staging-z04"),
        "ran with a tag the new file refuses: {outcome}"
    );
}

// ===================================================================================================
// 2. A decision that waits (sink, budget store, approver): the rules at the commit point.

/// A rule added while a sync sink writes `enter`: the call decided under the old file must be decided
/// again at its commit point.
#[test]
fn z07_rule_added_while_sink_writes_enter() {
    let live = LivePolicy::new(pf(EMPTY));
    let hold = Hold::default();
    let sink = SlowSink {
        tool: "rr.push",
        hold: hold.clone(),
        inner: MemorySink::new(),
    };
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .policy(live.clone())
        .build()
        .unwrap();
    let g = gate.clone();
    let call = thread::spawn(move || code(g.run(|| push("prod-z07".into()))));
    assert!(hold.arrived_within(Duration::from_secs(5)));
    replace_while_held(&live, pf(&refuse_prod("rr.push", "host")), &hold);
    let outcome = call.join().unwrap();
    assert!(
        !has_run("push:prod-z07"),
        "ran on a value the new file refuses: {outcome}"
    );
}

/// As z07, an async tool under an async sink.
#[test]
fn z08_rule_added_while_async_sink_writes_enter() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let live = LivePolicy::new(pf(EMPTY));
    let arrived = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let sink = AsyncSlowSink {
        tool: "rr.push_async",
        arrived: arrived.clone(),
        release: release.clone(),
        inner: MemorySink::new(),
    };
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .policy(live.clone())
        .build()
        .unwrap();
    let outcome = rt.block_on(async {
        let task = tokio::spawn(gate.scope(push_async("prod-z08".into())));
        arrived.notified().await;
        let l = live.clone();
        tokio::task::spawn_blocking(move || {
            l.replace(pf(&refuse_prod("rr.push_async", "host")), "ops")
        })
        .await
        .unwrap();
        release.notify_one();
        code(task.await.unwrap())
    });
    assert!(!has_run("push_async:prod-z08"), "{outcome}");
}

/// An async tool under an async sink: the value changes behind its handle while `enter` is written.
#[test]
fn z09_value_changed_while_async_sink_writes_enter() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let live = LivePolicy::new(pf(&refuse_prod("rr.hooked_async", "host")));
    let arrived = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let sink = AsyncSlowSink {
        tool: "rr.hooked_async",
        arrived: arrived.clone(),
        release: release.clone(),
        inner: MemorySink::new(),
    };
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .policy(live)
        .build()
        .unwrap();
    let host = Hooked::new("staging-z09");
    let h = host.clone();
    let outcome = rt.block_on(async {
        let task = tokio::spawn(gate.scope(hooked_async(h, "z09".into())));
        arrived.notified().await;
        host.set("prod-z09");
        release.notify_one();
        code(task.await.unwrap())
    });
    assert!(!has_run("hooked_async:z09:prod-z09"), "{outcome}");
}

/// A code budget's store waits; the file adds the rule meanwhile.
#[test]
fn z10_rule_added_while_budget_store_waits() {
    let live = LivePolicy::new(pf(EMPTY));
    let hold = Hold::default();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget_store(HoldingBudgets(hold.clone()))
        .budget(BudgetScope::tool("rr.push"), 100, Duration::from_secs(3600))
        .policy(live.clone())
        .build()
        .unwrap();
    let g = gate.clone();
    let call = thread::spawn(move || code(g.run(|| push("prod-z10".into()))));
    assert!(hold.arrived_within(Duration::from_secs(5)));
    replace_while_held(&live, pf(&refuse_prod("rr.push", "host")), &hold);
    let outcome = call.join().unwrap();
    assert!(!has_run("push:prod-z10"), "{outcome}");
}

/// The file's own budget makes the call wait on the store; the replacement drops that budget (the
/// gate now counts nothing: a lone gate) and adds the rule. The waiting call must be refused.
#[test]
fn z11_policy_budget_dropped_and_rule_added_while_store_waits() {
    let live = LivePolicy::new(pf(
        "format = 1\n[[defaults.budgets]]\ntool = \"rr.push\"\ncalls = 100\nper = \"1h\"\n",
    ));
    let hold = Hold::default();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget_store(HoldingBudgets(hold.clone()))
        .policy(live.clone())
        .build()
        .unwrap();
    let g = gate.clone();
    let call = thread::spawn(move || code(g.run(|| push("prod-z11".into()))));
    if !hold.arrived_within(Duration::from_secs(3)) {
        panic!(
            "the file's budget did not reach the store: {}",
            call.join().unwrap()
        );
    }
    replace_while_held(&live, pf(&refuse_prod("rr.push", "host")), &hold);
    let outcome = call.join().unwrap();
    assert!(!has_run("push:prod-z11"), "{outcome}");
}

/// The value changes behind its handle while the file's own budget store waits, on a gate that keeps
/// no record (the rules must be read again on the values the call has then).
#[test]
fn z12_value_changed_while_policy_budget_store_waits() {
    let text = format!(
        "{}[[defaults.budgets]]\ntool = \"rr.hooked\"\ncalls = 100\nper = \"1h\"\n",
        refuse_prod("rr.hooked", "host")
    );
    let live = LivePolicy::new(pf(&text));
    let hold = Hold::default();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget_store(HoldingBudgets(hold.clone()))
        .policy(live)
        .build()
        .unwrap();
    let host = Hooked::new("staging-z12");
    let (g, h) = (gate.clone(), host.clone());
    let outcome = while_held(
        &hold,
        move || code(g.run(|| hooked(h, "z12".into()))),
        || {
            host.set("prod-z12");
        },
    );
    assert!(!has_run("hooked:z12:prod-z12"), "{outcome}");
}

/// Nested gates: the outer keeps records (a slow sink) and has no policy; the inner follows the file
/// and keeps none. The value changes while the outer's `enter` is written.
#[test]
fn z13_nested_outer_sink_inner_policy_value_changed() {
    nested_value_changed(true, "z13");
}

/// As z13, the policy gate outside and the recording gate inside.
#[test]
fn z14_nested_outer_policy_inner_sink_value_changed() {
    nested_value_changed(false, "z14");
}

/// A gate with a slow sink and no policy nested with a lone gate following the file (inside it where
/// `policy_inside`): the value changes to one the file refuses while the `enter` is written.
fn nested_value_changed(policy_inside: bool, tag: &'static str) {
    let hold = Hold::default();
    let recording = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(SlowSink {
            tool: "rr.hooked",
            hold: hold.clone(),
            inner: MemorySink::new(),
        })
        .build()
        .unwrap();
    let (following, _live) = lone(&refuse_prod("rr.hooked", "host"));
    let (outer, inner) = if policy_inside {
        (recording, following)
    } else {
        (following, recording)
    };
    let host = Hooked::new(&format!("staging-{tag}"));
    let h = host.clone();
    let outcome = while_held(
        &hold,
        move || code(outer.run(|| inner.run(|| hooked(h, tag.into())))),
        || host.set(&format!("prod-{tag}")),
    );
    assert!(!has_run(&format!("hooked:{tag}:prod-{tag}")), "{outcome}");
}

/// An approver that waits, with the file's `ask`: the value changes and the file's rules change at
/// once while it thinks.
#[test]
fn z15_approver_waits_value_changed_on_a_list() {
    let live = LivePolicy::new(pf(&format!(
        "{}[defaults]\nask = [\"rr.hooked\"]\n",
        refuse_prod("rr.hooked", "host")
    )));
    let hold = Hold::default();
    let h2 = hold.clone();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .approver(move |_r: &ApprovalRequest<'_>| {
            h2.arrive_and_wait();
            Approval::Approve
        })
        .policy(live)
        .build()
        .unwrap();
    let host = Hooked::new("staging-z15");
    let (g, h) = (gate.clone(), host.clone());
    let outcome = while_held(
        &hold,
        move || code(g.run(|| hooked(h, "z15".into()))),
        || {
            host.set("prod-z15");
        },
    );
    assert!(!has_run("hooked:z15:prod-z15"), "{outcome}");
}

// ===================================================================================================
// 3. Argument rules meeting other features on a lone gate.

/// Nested lone gates, the policy on either, direct and by name.
#[test]
fn z16_nested_gates_policy_on_either() {
    let (policed, _live) = lone(&refuse_prod("rr.push", "host"));
    let plain = Gate::new(Mode::PartialAuto).unwrap();
    let a = code(policed.run(|| plain.run(|| push("prod-z16a".into()))));
    let b = code(plain.run(|| policed.run(|| push("prod-z16b".into()))));
    let c = plain.run(|| {
        by_name(
            &policed,
            "rr.push",
            serde_json::json!({"host": "prod-z16c"}),
        )
    });
    let d = policed.run(|| by_name(&plain, "rr.push", serde_json::json!({"host": "prod-z16d"})));
    let e = policed.run(|| policed.run(|| code(push("prod-z16e".into()))));
    assert_eq!(
        [a.as_str(), b.as_str(), c.as_str(), d.as_str(), e.as_str()],
        ["ARGUMENT_REFUSED"; 5]
    );
    assert!(ran_with_prefix("push:prod-z16").is_empty());
}

/// A `&Gate` parameter: the gate passed may follow the file, or the ambient one.
#[test]
fn z17_gate_parameter_and_argument_rules() {
    let (policed, _live) = lone(&refuse_prod("rr.with_gate", "host"));
    let plain = Gate::new(Mode::PartialAuto).unwrap();
    let a = code(with_gate(&policed, "prod-z17a".into()));
    let b = code(plain.run(|| with_gate(&policed, "prod-z17b".into())));
    let c = code(policed.run(|| with_gate(&plain, "prod-z17c".into())));
    let d = by_name(
        &policed,
        "rr.with_gate",
        serde_json::json!({"host": "prod-z17d"}),
    );
    let e = policed.run(|| {
        by_name(
            &plain,
            "rr.with_gate",
            serde_json::json!({"host": "prod-z17e"}),
        )
    });
    assert_eq!(
        [a.as_str(), b.as_str(), c.as_str(), d.as_str(), e.as_str()],
        ["ARGUMENT_REFUSED"; 5]
    );
    assert!(ran_with_prefix("with_gate:prod-z17").is_empty());
    assert!(
        PolicyFile::parse("rr.toml", &refuse_prod("rr.with_gate", "gate")).is_err(),
        "a rule on the `&Gate` parameter checks"
    );
}

/// An escalating tool with an argument rule on a lone gate: the policy's rule must not make the gate
/// skip the escalation (ABOVE_CEILING without the file).
#[test]
fn z18_escalation_on_a_ruled_lone_gate() {
    let plain = Gate::new(Mode::PartialAuto).unwrap();
    let without = code(plain.run(|| escal("prod-z18a".into(), "n".into())));
    let (gate, _live) = lone(&rule("rr.escal", "note", "refuse = [\"x*\"]"));
    let direct = code(gate.run(|| escal("prod-z18b".into(), "n".into())));
    let named = by_name(
        &gate,
        "rr.escal",
        serde_json::json!({"host": "prod-z18c", "note": "n"}),
    );
    assert!(!without.starts_with("ran"), "{without}");
    assert_eq!(
        (direct.as_str(), named.as_str()),
        (without.as_str(), without.as_str())
    );
    assert!(ran_with_prefix("escal:prod-z18").is_empty());
}

/// The latch closed, then a ruled write on a lone gate with no approver: direct, by name, async.
#[test]
fn z19_tainted_lone_gate_ruled_write() {
    let text = format!(
        "{}[[defaults.arguments]]\ntool = \"rr.push_async\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n",
        refuse_prod("rr.push", "host")
    );
    let (gate, _live) = lone(&text);
    for i in 0..10 {
        gate.run(|| push(format!("warm-z19-{i}"))).unwrap();
    }
    gate.run(|| fetch("z19-page".into())).unwrap();
    let a = code(gate.run(|| push("staging-z19a".into())));
    let b = by_name(
        &gate,
        "rr.push",
        serde_json::json!({"host": "staging-z19b"}),
    );
    let c = code(rt().block_on(gate.scope(push_async("staging-z19c".into()))));
    let d = by_name(
        &gate,
        "rr.push_async",
        serde_json::json!({"host": "staging-z19d"}),
    );
    for (o, m) in [
        (&a, "push:staging-z19a"),
        (&b, "push:staging-z19b"),
        (&c, "push_async:staging-z19c"),
        (&d, "push_async:staging-z19d"),
    ] {
        assert!(!has_run(m), "{m} ran in a tainted session: {o}");
    }
}

/// The file's `ask`, an approver granting for the session; the file's rule must still refuse later
/// calls by name, directly and async (the grant answers the approval, not the rule).
#[test]
fn z20_session_grant_then_refused_values_by_every_path() {
    let text = format!(
        "{}[[defaults.arguments]]\ntool = \"rr.push_async\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n[defaults]\nask = [\"rr.push\", \"rr.push_async\"]\n",
        refuse_prod("rr.push", "host")
    );
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .approver(|_r: &ApprovalRequest<'_>| {
            Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600)))
        })
        .policy(LivePolicy::new(pf(&text)))
        .build()
        .unwrap();
    assert!(gate.run(|| push("staging-z20".into())).is_ok());
    assert!(
        rt().block_on(gate.scope(push_async("staging-z20".into())))
            .is_ok()
    );
    let clone = gate.clone();
    let a = by_name(&clone, "rr.push", serde_json::json!({"host": "prod-z20a"}));
    let b = code(clone.run(|| push("prod-z20b".into())));
    let c = code(rt().block_on(clone.scope(push_async("prod-z20c".into()))));
    let d = by_name(
        &gate,
        "rr.push_async",
        serde_json::json!({"host": "prod-z20d"}),
    );
    assert_eq!(
        [a.as_str(), b.as_str(), c.as_str(), d.as_str()],
        ["ARGUMENT_REFUSED"; 4]
    );
}

/// Defaults, principal and agent tables each add a rule on the same parameter; each must apply on the
/// lone path.
#[test]
fn z21_every_table_applies_on_the_lone_path() {
    let text = "format = 1\n\
        [[defaults.arguments]]\ntool = \"rr.exact_i\"\nparameter = \"n\"\nmax = 100\n\
        [[principals.alice.arguments]]\ntool = \"rr.exact_i\"\nparameter = \"n\"\nmax = 50\n\
        [[agents.bot.arguments]]\ntool = \"rr.exact_i\"\nparameter = \"n\"\nmin = 10\n";
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .principal("alice")
        .agent("bot")
        .policy(LivePolicy::new(pf(text)))
        .build()
        .unwrap();
    let over_p = code(gate.run(|| exact_i(75, "z21a".into())));
    let under_a = code(gate.run(|| exact_i(5, "z21b".into())));
    let by = by_name(
        &gate,
        "rr.exact_i",
        serde_json::json!({"n": 75, "tag": "z21c"}),
    );
    let ok = code(gate.run(|| exact_i(20, "z21d".into())));
    assert_eq!(
        [over_p.as_str(), under_a.as_str(), by.as_str()],
        ["ARGUMENT_REFUSED"; 3]
    );
    assert_eq!(ok, "ran (20)");
}

/// A budget the file adds by a replacement after the tool ran on the lone path: it counts from then.
#[test]
fn z22_policy_budget_added_after_lone_calls_counts() {
    let (gate, live) = lone(&refuse_prod("rr.push", "host"));
    for i in 0..20 {
        gate.run(|| push(format!("warm-z22-{i}"))).unwrap();
    }
    live.replace(
        pf(&format!(
            "{}[[defaults.budgets]]\ntool = \"rr.push\"\ncalls = 1\nper = \"1h\"\n",
            refuse_prod("rr.push", "host")
        )),
        "ops",
    );
    let first = code(gate.run(|| push("z22-one".into())));
    let second = code(gate.run(|| push("z22-two".into())));
    let third = by_name(&gate, "rr.push", serde_json::json!({"host": "z22-three"}));
    assert_eq!(first, "ran (\"z22-one\")");
    assert_eq!(
        (second.as_str(), third.as_str()),
        ("BUDGET_EXHAUSTED", "BUDGET_EXHAUSTED")
    );
}

// ===================================================================================================
// 4. Value shapes.

/// `max = 50` on 128-bit integers: values past 64 bits must not wrap to small ones.
#[test]
fn z23_u128_and_i128_past_64_bits() {
    let (gate, _live) = lone(&format!(
        "{}[[defaults.arguments]]\ntool = \"rr.iwide\"\nparameter = \"n\"\nmin = -50\nmax = 50\n",
        rule("rr.wide", "n", "max = 50")
    ));
    let mut through = Vec::new();
    for (i, n) in [
        (1u128 << 64) + 10,
        (1u128 << 64),
        u128::MAX,
        (1u128 << 127) + 1,
        51,
    ]
    .into_iter()
    .enumerate()
    {
        let tag = format!("z23-u{i}");
        let o = code(gate.run(|| wide(n, tag.clone())));
        if has_run(&format!("wide:{tag}")) {
            through.push(format!("u128 {n}: {o}"));
        }
    }
    for (i, n) in [
        (1i128 << 64) + 10,
        -(1i128 << 64) - 10,
        i128::MIN,
        i128::MAX,
        -51,
    ]
    .into_iter()
    .enumerate()
    {
        let tag = format!("z23-i{i}");
        let o = code(gate.run(|| iwide(n, tag.clone())));
        if has_run(&format!("iwide:{tag}")) {
            through.push(format!("i128 {n}: {o}"));
        }
    }
    assert_eq!(code(gate.run(|| wide(7, "z23-ok".into()))), "ran (\"7\")");
    assert!(through.is_empty(), "ran past the rule: {through:#?}");
}

/// `max = 50`, `min = 0` on an `f32`: NaN, the infinities and fractions above 50 must be refused.
#[test]
fn z24_f32_nan_infinities_fractions() {
    let (gate, file) = lone(&rule("rr.small_f", "x", "min = 0\nmax = 50"));
    let _ = file;
    let mut through = Vec::new();
    for (i, x) in [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        50.5,
        1e38,
        -0.5,
        f32::MAX,
    ]
    .into_iter()
    .enumerate()
    {
        let tag = format!("z24-{i}");
        let o = code(gate.run(|| small_f(x, tag.clone())));
        if has_run(&format!("small_f:{tag}")) {
            through.push(format!("{x}: {o}"));
        }
    }
    assert_eq!(
        code(gate.run(|| small_f(50.0, "z24-ok".into()))),
        "ran (\"50\")"
    );
    assert!(through.is_empty(), "ran past the rule: {through:?}");
}

/// Integers compared by value past 2^53: a rule must not be judged through a lossy float.
#[test]
fn z25_integers_past_2_pow_53() {
    let text = format!(
        "{}[[defaults.arguments]]\ntool = \"rr.exact_i\"\nparameter = \"n\"\nmin = -9007199254740992\nmax = 9223372036854775806\n",
        rule("rr.exact_u", "n", "max = 9007199254740992")
    );
    let (gate, _live) = lone(&text);
    let file = pf(&text);
    let mut through = Vec::new();
    let u = 9_007_199_254_740_993u64;
    let o = code(gate.run(|| exact_u(u, "z25-u".into())));
    if has_run("exact_u:z25-u") {
        through.push(format!("u64 {u} past max 2^53 (direct): {o}"));
    }
    let o = by_name(
        &gate,
        "rr.exact_u",
        serde_json::json!({"n": u, "tag": "z25-un"}),
    );
    if has_run("exact_u:z25-un") {
        through.push(format!("u64 {u} past max 2^53 (by name): {o}"));
    }
    let e = file.explain(
        None,
        None,
        Mode::PartialAuto,
        "rr.exact_u",
        &serde_json::json!({"n": u, "tag": "t"}),
    );
    through.push(format!("(explain says {:?})", e.map(|e| e.decision)));
    let o = code(gate.run(|| exact_i(i64::MAX, "z25-imax".into())));
    if has_run("exact_i:z25-imax") {
        through.push(format!("i64::MAX past max i64::MAX-1: {o}"));
    }
    let o = code(gate.run(|| exact_i(-9_007_199_254_740_993, "z25-imin".into())));
    if has_run("exact_i:z25-imin") {
        through.push(format!("-(2^53+1) below min -2^53: {o}"));
    }
    // one_of by value
    let (g2, _l2) = lone(&rule("rr.exact_u", "n", "one_of = [9007199254740993]"));
    let o = code(g2.run(|| exact_u(9_007_199_254_740_992, "z25-oneof".into())));
    if has_run("exact_u:z25-oneof") {
        through.push(format!("2^53 taken as one of [2^53+1]: {o}"));
    }
    println!("{through:#?}");
    through.retain(|t| !t.starts_with("(explain"));
    assert!(through.is_empty(), "{through:#?}");
}

/// `one_of` on a list: every text must be one of the allowed values, not any one of them. (The file's
/// check refuses a `one_of` of texts on a list parameter; if it ever accepts one, the gate must judge
/// every text.)
#[test]
fn z26_one_of_on_a_list() {
    let parsed = PolicyFile::parse(
        "rr.toml",
        &rule("rr.hosts", "hosts", "one_of = [\"staging\", \"dev\"]"),
    );
    let Ok(file) = parsed else {
        println!("refused when read: {}", parsed.unwrap_err());
        return;
    };
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .policy(LivePolicy::new(file))
        .build()
        .unwrap();
    let direct = code(gate.run(|| hosts(vec!["staging".into(), "prod-db".into()], "z26a".into())));
    let named = by_name(
        &gate,
        "rr.hosts",
        serde_json::json!({"hosts": ["prod-db", "dev"], "tag": "z26b"}),
    );
    assert!(!has_run("hosts:z26a"), "{direct}");
    assert!(!has_run("hosts:z26b"), "{named}");
}

/// An enum and a newtype: a variant or a wrapped text the glob refuses, directly and by name.
#[test]
fn z27_enums_and_newtypes() {
    let text = format!(
        "{}[[defaults.arguments]]\ntool = \"rr.named\"\nparameter = \"host\"\nrefuse = [\"prod-*\"]\n",
        rule("rr.env", "env", "refuse = [\"Prod*\", \"prod-*\"]")
    );
    let parsed = PolicyFile::parse("rr.toml", &text);
    let Ok(file) = parsed else {
        println!("rules refused when read: {}", parsed.unwrap_err());
        return;
    };
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .policy(LivePolicy::new(file))
        .build()
        .unwrap();
    let a = code(gate.run(|| env(Env::Prod, "z27a".into())));
    let b = code(gate.run(|| env(Env::Named("prod-db".into()), "z27b".into())));
    let c = by_name(
        &gate,
        "rr.env",
        serde_json::json!({"env": "Prod", "tag": "z27c"}),
    );
    let d = code(gate.run(|| named(HostName("prod-db".into()), "z27d".into())));
    let e = by_name(
        &gate,
        "rr.named",
        serde_json::json!({"host": "prod-x", "tag": "z27e"}),
    );
    for (o, m) in [
        (&a, "env:z27a"),
        (&b, "env:z27b"),
        (&c, "env:z27c"),
        (&d, "named:z27d"),
        (&e, "named:z27e"),
    ] {
        assert!(!has_run(m), "{m} ran: {o}");
    }
}

/// A free JSON parameter: `prod-db` nested in a list, an object, a list of lists.
#[test]
fn z28_free_json_value_nested() {
    let parsed = PolicyFile::parse("rr.toml", &refuse_prod("rr.anyv", "v"));
    let Ok(file) = parsed else {
        println!("rule refused when read: {}", parsed.unwrap_err());
        return;
    };
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .policy(LivePolicy::new(file))
        .build()
        .unwrap();
    let mut through = Vec::new();
    for (i, v) in [
        serde_json::json!("prod-db"),
        serde_json::json!(["ok", "prod-db"]),
        serde_json::json!([["prod-db"]]),
        serde_json::json!({"host": "prod-db"}),
        serde_json::json!(["ok", 1, "prod-db"]),
        serde_json::json!([1, {"x": "prod-db"}]),
    ]
    .into_iter()
    .enumerate()
    {
        let tag = format!("z28-{i}");
        let vv = v.clone();
        let o = code(gate.run(|| anyv(vv, tag.clone())));
        if has_run(&format!("anyv:{tag}")) {
            through.push(format!("direct {v}: {o}"));
        }
        let tag = format!("z28-n{i}");
        let o = by_name(&gate, "rr.anyv", serde_json::json!({"v": v, "tag": tag}));
        if has_run(&format!("anyv:{tag}")) {
            through.push(format!("by name {v}: {o}"));
        }
    }
    assert!(through.is_empty(), "{through:#?}");
}

/// Arrays, tuples and sets of texts against a glob.
#[test]
fn z29_arrays_tuples_sets() {
    let text = format!(
        "{}{}{}",
        refuse_prod("rr.arr", "hosts"),
        refuse_prod("rr.tup", "hosts").replace("format = 1\n", ""),
        refuse_prod("rr.set", "hosts").replace("format = 1\n", "")
    );
    let parsed = PolicyFile::parse("rr.toml", &text);
    let Ok(file) = parsed else {
        println!("rules refused when read: {}", parsed.unwrap_err());
        return;
    };
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .policy(LivePolicy::new(file))
        .build()
        .unwrap();
    let a = code(gate.run(|| arr(["ok".into(), "prod-db".into()], "z29a".into())));
    let b = code(gate.run(|| tup(("ok".into(), "prod-db".into()), "z29b".into())));
    let c = code(gate.run(|| {
        set(
            ["ok".to_owned(), "prod-db".to_owned()].into(),
            "z29c".into(),
        )
    }));
    let d = by_name(
        &gate,
        "rr.tup",
        serde_json::json!({"hosts": ["ok", "prod-x"], "tag": "z29d"}),
    );
    let e = by_name(
        &gate,
        "rr.arr",
        serde_json::json!({"hosts": ["prod-x", "ok"], "tag": "z29e"}),
    );
    for (o, m) in [
        (&a, "arr:z29a"),
        (&b, "tup:z29b"),
        (&c, "set:z29c"),
        (&d, "tup:z29d"),
        (&e, "arr:z29e"),
    ] {
        assert!(!has_run(m), "{m} ran: {o}");
    }
}

/// An optional text: `None`, `null` and the key left out cannot be judged by a glob; `Some("prod-x")`
/// is refused.
#[test]
fn z30_optional_text() {
    let (gate, _live) = lone(&refuse_prod("rr.opt", "host"));
    let a = code(gate.run(|| opt(Some("prod-db".into()), "z30a".into())));
    let b = code(gate.run(|| opt(None, "z30b".into())));
    let c = by_name(&gate, "rr.opt", serde_json::json!({"tag": "z30c"}));
    let d = by_name(
        &gate,
        "rr.opt",
        serde_json::json!({"host": null, "tag": "z30d"}),
    );
    let e = by_name(
        &gate,
        "rr.opt",
        serde_json::json!({"host": "prod-y", "tag": "z30e"}),
    );
    assert_eq!(a, "ARGUMENT_REFUSED");
    assert_eq!(e, "ARGUMENT_REFUSED");
    let explained = pf(&refuse_prod("rr.opt", "host"))
        .explain(
            None,
            None,
            Mode::PartialAuto,
            "rr.opt",
            &serde_json::json!({"host": null, "tag": "t"}),
        )
        .map(|e| e.to_string());
    println!("explain for host = null: {explained:?}");
    // The documentation: "A value an argument rule cannot judge (..., not text for a pattern, ...) is
    // refused".
    assert_eq!(
        [b.as_str(), c.as_str(), d.as_str()],
        ["ARGUMENT_REFUSED"; 3],
        "None / absent / null under a `refuse` glob"
    );
}

/// A parameter named by a raw identifier (`r#type`): the attribute expands (it once panicked on it), the
/// schema and the rules name it `type`, and a rule on it is enforced directly and by name.
#[test]
fn z31_raw_identifier_parameter() {
    let schema = toolgate::registry()
        .get("rr.raw_param")
        .unwrap()
        .input_schema()
        .expect("a callable tool has a schema");
    assert!(schema["properties"].get("type").is_some(), "{schema}");
    let file = PolicyFile::parse("rr.toml", &refuse_prod("rr.raw_param", "type"))
        .unwrap_or_else(|e| panic!("a rule on `type` checks: {e}"));
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .policy(LivePolicy::new(file))
        .build()
        .unwrap();
    let a = code(gate.run(|| raw_param("prod-db".into(), "z31a".into())));
    let b = by_name(
        &gate,
        "rr.raw_param",
        serde_json::json!({"type": "prod-db", "tag": "z31b"}),
    );
    assert_eq!(
        (a.as_str(), b.as_str()),
        ("ARGUMENT_REFUSED", "ARGUMENT_REFUSED")
    );
    let c = by_name(
        &gate,
        "rr.raw_param",
        serde_json::json!({"type": "staging", "tag": "z31c"}),
    );
    assert!(has_run("raw_param:z31c"), "{c}");
}

/// An argument whose `Serialize` fails or panics, under a rule: refused, and the process goes on.
#[test]
fn z32_serialize_fails_or_panics() {
    let (gate, _live) = lone(&refuse_prod("rr.failing", "host"));
    let a = code(gate.run(|| failing(Failing("err-z32".into()), "z32a".into())));
    let b = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        code(gate.run(|| failing(Failing("panic-z32".into()), "z32b".into())))
    }));
    let c = by_name(
        &gate,
        "rr.failing",
        serde_json::json!({"host": "err-z32c", "tag": "z32c"}),
    );
    assert!(!has_run("failing:z32a"), "{a}");
    assert!(!has_run("failing:z32b"), "{b:?}");
    assert!(!has_run("failing:z32c"), "{c}");
    // the gate still works afterwards
    assert_eq!(
        code(gate.run(|| failing(Failing("ok-z32".into()), "z32d".into()))),
        "ran (\"ok-z32\")"
    );
}

/// What a human reads of a refusal: an agent-written value with escape sequences, bidi overrides and
/// line breaks, and very long values whose cut lands inside a multi-byte character.
#[test]
fn z33_refusal_texts_escape_and_bound_agent_values() {
    fn hides(text: &str) -> Vec<char> {
        text.chars()
            .filter(|c| {
                (c.is_control() && *c != '\n')
                    || matches!(*c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}' | '\u{2028}' | '\u{2029}')
            })
            .collect()
    }
    let (gate, _live) = lone(&format!(
        "{}{}",
        rule("rr.push", "host", "refuse = [\"prod-*\"]"),
        rule("rr.hosts", "hosts", "refuse = [\"*zz.toml*\"]").replace("format = 1\n", "")
    ));
    let mut bad = Vec::new();
    let nasty = "prod-\u{1b}[2K\r\nzz.toml: allowed \u{202e}\u{7}\u{85}";
    let mut longs: Vec<String> = vec![nasty.to_owned()];
    for pad in 0..8 {
        longs.push(format!("prod-{}{}", "a".repeat(pad), "é".repeat(40_000)));
        longs.push(format!("prod-{}{}", "a".repeat(pad), "🦀".repeat(20_000)));
        longs.push(format!(
            "prod-{}{}",
            "a".repeat(pad),
            "\u{1b}".repeat(20_000)
        ));
    }
    for (i, host) in longs.iter().enumerate() {
        let h = host.clone();
        let refused =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gate.run(|| push(h))));
        let refused = match refused {
            Ok(Err(d)) => d,
            Ok(Ok(_)) => {
                bad.push(format!("{i}: ran"));
                continue;
            }
            Err(_) => {
                bad.push(format!("{i}: panicked"));
                continue;
            }
        };
        for (what, text) in [
            ("message", refused.message()),
            ("detail", refused.detail().unwrap_or("").to_owned()),
            ("display", refused.to_string()),
            ("json", serde_json::to_string(&refused).unwrap()),
        ] {
            if !hides(&text).is_empty() || text.contains('\n') {
                bad.push(format!(
                    "{i} {what} shows raw {:?}: {:.200?}",
                    hides(&text),
                    text
                ));
            }
            if text.len() > 20_000 {
                bad.push(format!("{i} {what} is {} bytes long", text.len()));
            }
        }
        // by name, as a model reads it
        let err = toolgate::registry()
            .call(&gate, "rr.push", serde_json::json!({ "host": host }))
            .now()
            .expect("sync")
            .unwrap_err();
        let shown = serde_json::to_value(&err).unwrap()["message"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        if !hides(&shown).is_empty() || shown.contains('\n') || shown.len() > 20_000 {
            bad.push(format!(
                "{i} by name message: {:.200?} ({} bytes)",
                shown,
                shown.len()
            ));
        }
    }
    // a list with a nasty text
    let refused = gate
        .run(|| hosts(vec!["ok".into(), nasty.into()], "z33-list".into()))
        .unwrap_err();
    let d = refused.detail().unwrap_or("").to_owned();
    if !hides(&d).is_empty() || d.contains('\n') {
        bad.push(format!("list detail {d:?}"));
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// A value of a ruled parameter passed through a huge list: the refusal must come (no value skipped
/// past some count) and must be bounded.
#[test]
fn z34_huge_list_refused_wherever_the_text_sits() {
    let (gate, _live) = lone(&refuse_prod("rr.hosts", "hosts"));
    let mut list: Vec<String> = (0..100_000).map(|i| format!("ok-{i}")).collect();
    list.push("prod-last".into());
    let refused = gate.run(|| hosts(list.clone(), "z34".into()));
    assert!(
        !has_run("hosts:z34"),
        "ran with prod-last at the end of 100001 hosts"
    );
    let d = refused.unwrap_err();
    let shown = d.detail().unwrap_or("").len() + d.message().len();
    assert!(shown < 20_000, "refusal text {shown} bytes");
    let named = by_name(
        &gate,
        "rr.hosts",
        serde_json::json!({"hosts": list, "tag": "z34n"}),
    );
    assert!(!has_run("hosts:z34n"), "{named}");
}

// ===================================================================================================
// 5. Controls and the async lone path.

/// Control for z01..z03: the same three changes while the ruled argument is read, on a gate that keeps
/// records (the full decision). Each must be refused.
#[test]
fn z35_control_full_decision_refuses_what_changed_while_reading() {
    for (what, tag) in [("deny", "z35a"), ("lower", "z35b"), ("taint", "z35c")] {
        let live = LivePolicy::new(pf(&refuse_prod("rr.hooked", "host")));
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(MemorySink::new())
            .policy(live.clone())
            .build()
            .unwrap();
        let hold = Hold::default();
        let host = Hooked::waiting(&format!("staging-{tag}"), &hold);
        let g = gate.clone();
        let t = tag.to_owned();
        let call = thread::spawn(move || code(g.run(|| hooked(host, t))));
        assert!(hold.arrived_within(Duration::from_secs(5)), "{what}");
        match what {
            "deny" => {
                let l = live.clone();
                let r = thread::spawn(move || {
                    l.replace(
                        pf("format = 1\n[defaults]\ndeny = [\"rr.hooked\"]\n"),
                        "ops",
                    )
                });
                thread::sleep(Duration::from_millis(200));
                hold.release();
                r.join().unwrap();
            }
            "lower" => {
                gate.lower(Mode::Shadow).unwrap();
                hold.release();
            }
            _ => {
                gate.run(|| fetch(format!("{tag}-page"))).unwrap();
                hold.release();
            }
        }
        let outcome = call.join().unwrap();
        assert!(
            !has_run(&format!("hooked:{tag}:staging-{tag}")),
            "{what}: {outcome}"
        );
    }
}

/// z02 on the async lone path: an async tool's first poll reads the ruled argument; the kill switch
/// is pulled meanwhile.
#[test]
fn z36_async_lone_kill_switch_while_ruled_argument_is_read() {
    let (gate, _live) = lone(&refuse_prod("rr.hooked_async", "host"));
    let hold = Hold::default();
    let host = Hooked::waiting("staging-z36", &hold);
    let g = gate.clone();
    let call =
        thread::spawn(move || code(rt().block_on(g.scope(hooked_async(host, "z36".into())))));
    assert!(
        hold.arrived_within(Duration::from_secs(5)),
        "the first poll did not read the argument"
    );
    gate.lower(Mode::Shadow).unwrap();
    hold.release();
    let outcome = call.join().unwrap();
    assert!(
        !has_run("hooked_async:z36:staging-z36"),
        "an async LOW_WRITE ran after the gate was lowered to SHADOW: {outcome}"
    );
}

/// z02 by name: the call by name tries the lone path first; the kill switch is pulled while the
/// ruled argument is read.
#[test]
fn z37_by_name_lone_kill_switch_while_ruled_argument_is_read() {
    let (gate, _live) = lone(&refuse_prod("rr.hooked", "host"));
    let hold = Hold::default();
    ARMED
        .lock()
        .unwrap()
        .push(("staging-z37".into(), hold.clone()));
    let g = gate.clone();
    let call = thread::spawn(move || {
        by_name(
            &g,
            "rr.hooked",
            serde_json::json!({"host": "staging-z37", "tag": "z37"}),
        )
    });
    assert!(hold.arrived_within(Duration::from_secs(5)));
    gate.lower(Mode::Shadow).unwrap();
    hold.release();
    let outcome = call.join().unwrap();
    assert!(
        !has_run("hooked:z37:staging-z37"),
        "a LOW_WRITE by name ran after the gate was lowered to SHADOW: {outcome}"
    );
}

/// A ruled argument whose `Serialize` enters a gate and calls a tool (the application's code): the
/// lone gate reads it with the gate stack released, so the nested gate works, and the rules still hold.
#[test]
fn z38_a_ruled_argument_that_enters_a_gate_while_it_is_read() {
    let (gate, _live) = lone(&refuse_prod("rr.nested", "host"));
    let refused = code(gate.run(|| nested(Nesting("prod-z38".into()), "z38a".into())));
    assert_eq!(refused, "ARGUMENT_REFUSED");
    assert!(!has_run("nested:z38a:prod-z38"));
    assert!(has_run("look_up:prod-z38"), "the nested gate ran its tool");
    let ran = code(gate.run(|| nested(Nesting("dev-z38".into()), "z38b".into())));
    assert_eq!(ran, "ran (\"dev-z38\")");
}
