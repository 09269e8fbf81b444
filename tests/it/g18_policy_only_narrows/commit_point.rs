//! Outside attacks on guarantee 18 (and 4, 7, 13, 14) at the full decision's commit point,
//! which reads the arguments first (a `Serialize` that may wait), then re-reads every gate's mode,
//! taint, policy generation and session grant.
//!
//! The lever: `Probe`, a value behind a shared handle whose `Serialize` counts its calls and waits at
//! chosen ones (and reads the value only after waiting). A first, harmless call on the same gate tells
//! how many times a call's arguments are serialized before its body runs (the body notes the count);
//! the attack then waits at the last of them, the commit point's read, and meanwhile lowers the gate,
//! closes the latch, revokes grants, replaces the policy, spends the budget, or changes the value.
//!
//! Every test asserts the SAFE outcome: a test that fails is a hole.

use super::Hold;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use toolgate::approval::SessionGrant;
use toolgate::approval::store::Answer;
use toolgate::audit::{AuditError, AuditRecord, AuditSink, MemorySink, Outcome, Stage};
use toolgate::gate::budget::{BudgetCharge, BudgetFuture, BudgetStore, MemoryBudgets, Reservation};
use toolgate::gate::{BudgetScope, TaintPolicy};
use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::{Approval, ApprovalRequest, Denied, Gate, Mode, tool};

// ---------------------------------------------------------------------------------------------------
// What ran.

static RAN: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn ran(marker: String) {
    RAN.lock().unwrap().push(marker);
}

/// The markers `tool:tag:value:count` of the bodies that ran with this tag.
fn runs(tag: &str) -> Vec<String> {
    RAN.lock()
        .unwrap()
        .iter()
        .filter(|m| m.split(':').nth(1) == Some(tag))
        .cloned()
        .collect()
}

/// The serialization count a body of this tag saw (its arguments' serializations before it ran).
fn count_seen(tag: &str) -> Option<usize> {
    runs(tag)
        .last()
        .and_then(|m| m.rsplit(':').next().and_then(|c| c.parse().ok()))
}

// ---------------------------------------------------------------------------------------------------
// A point where one thread waits until the test releases it.

// ---------------------------------------------------------------------------------------------------
// Probe: a value behind a shared handle whose Serialize counts, may wait at chosen counts, and reads
// the value only after waiting.

pub struct ProbeInner {
    value: Mutex<String>,
    count: AtomicUsize,
    waits: Mutex<Vec<(usize, Hold)>>,
}

#[derive(Clone, toolgate::schemars::JsonSchema)]
#[schemars(crate = "toolgate::schemars")]
pub struct Probe(#[schemars(with = "String")] Arc<ProbeInner>);

/// Per value, the holds to wait at, by the number of the read.
type Armed = Vec<(String, Vec<(usize, Hold)>)>;
/// Waits armed for probes made by `Deserialize` (calls by name), by their value.
static ARMED: Mutex<Armed> = Mutex::new(Vec::new());
/// The probe of the call held now.
static HELD: Mutex<Vec<(String, Probe)>> = Mutex::new(Vec::new());

thread_local! {
    /// The value of the call this test thread holds now.
    static HOLDING: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

fn held_probe() -> Probe {
    let v = HOLDING.with(|h| h.borrow().clone());
    HELD.lock()
        .unwrap()
        .iter()
        .rev()
        .find(|(k, _)| *k == v)
        .map(|(_, p)| p.clone())
        .unwrap_or_else(|| panic!("no held probe of {v}"))
}

/// Probes made by `Deserialize`, by their first value.
static MADE: Mutex<Vec<(String, Probe)>> = Mutex::new(Vec::new());

impl Probe {
    fn new(v: &str) -> Probe {
        Probe(Arc::new(ProbeInner {
            value: Mutex::new(v.to_owned()),
            count: AtomicUsize::new(0),
            waits: Mutex::new(Vec::new()),
        }))
    }
    fn set(&self, v: &str) {
        *self.0.value.lock().unwrap() = v.to_owned();
    }
    fn get(&self) -> String {
        self.0.value.lock().unwrap().clone()
    }
    fn count(&self) -> usize {
        self.0.count.load(Ordering::SeqCst)
    }
}

impl toolgate::serde::Serialize for Probe {
    fn serialize<S: toolgate::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let n = self.0.count.fetch_add(1, Ordering::SeqCst) + 1;
        let hold = {
            let mut waits = self.0.waits.lock().unwrap();
            waits
                .iter()
                .position(|(at, _)| *at == n)
                .map(|i| waits.remove(i).1)
        };
        if let Some(hold) = hold {
            hold.arrive_and_wait();
        }
        s.serialize_str(&self.get())
    }
}

impl<'de> toolgate::serde::Deserialize<'de> for Probe {
    fn deserialize<D: toolgate::serde::Deserializer<'de>>(d: D) -> Result<Probe, D::Error> {
        let v = <String as toolgate::serde::Deserialize>::deserialize(d)?;
        let p = Probe::new(&v);
        let armed = {
            let mut armed = ARMED.lock().unwrap();
            armed
                .iter()
                .position(|(k, _)| *k == v)
                .map(|i| armed.remove(i).1)
        };
        if let Some(w) = armed {
            if !w.is_empty() {
                HELD.lock().unwrap().push((v.clone(), p.clone()));
            }
            *p.0.waits.lock().unwrap() = w;
        }
        MADE.lock().unwrap().push((v, p.clone()));
        Ok(p)
    }
}

/// A tag for the test's bookkeeping that serializes as one constant, so that it binds nothing: calls
/// of different tags are the same call for approvals and grants.
#[derive(Clone, toolgate::schemars::JsonSchema)]
#[schemars(crate = "toolgate::schemars")]
pub struct Tag(#[schemars(with = "String")] String);

impl toolgate::serde::Serialize for Tag {
    fn serialize<S: toolgate::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("t")
    }
}

impl<'de> toolgate::serde::Deserialize<'de> for Tag {
    fn deserialize<D: toolgate::serde::Deserializer<'de>>(d: D) -> Result<Tag, D::Error> {
        Ok(Tag(<String as toolgate::serde::Deserialize>::deserialize(
            d,
        )?))
    }
}

fn body(tool: &str, tag: &str, host: &Probe) -> Result<String, Denied> {
    let seen = host.get();
    ran(format!("{tool}:{tag}:{seen}:{}", host.count()));
    Ok(seen)
}

// ---------------------------------------------------------------------------------------------------
// The tools, in a domain of their own.

/// Push to a host.
#[tool(risk = "LOW_WRITE", domain = "r2", callable)]
fn probe(host: Probe, tag: Tag) -> Result<String, Denied> {
    body("probe", &tag.0, &host)
}

/// Push to a host, asynchronously.
#[tool(risk = "LOW_WRITE", domain = "r2", callable)]
async fn probe_async(host: Probe, tag: Tag) -> Result<String, Denied> {
    body("probe_async", &tag.0, &host)
}

/// Push to a host, with the gate passed in.
#[tool(risk = "LOW_WRITE", domain = "r2", callable)]
fn probe_gate(gate: &Gate, host: Probe, tag: Tag) -> Result<String, Denied> {
    let _ = gate;
    body("probe_gate", &tag.0, &host)
}

/// Fetch a page: untrusted output.
#[tool(risk = "READ_ONLY", domain = "r2", untrusted_output, callable)]
fn fetch(url: String) -> Result<String, Denied> {
    ran(format!("fetch:{url}:x:0"));
    Ok(url)
}

/// Something else, for deny rules that change nothing for the probes.
#[tool(risk = "LOW_WRITE", domain = "r2", callable)]
fn other(tag: String) -> Result<String, Denied> {
    ran(format!("other:{tag}:x:0"));
    Ok(tag)
}

// ---------------------------------------------------------------------------------------------------
// Policies.

fn pf(text: &str) -> PolicyFile {
    PolicyFile::parse("r2.toml", text)
        .unwrap_or_else(|e| panic!("the test's policy does not check: {e}\n{text}"))
}

const TOOLS: [&str; 3] = ["r2.probe", "r2.probe_async", "r2.probe_gate"];

/// A file: `refuse` globs on every probe's `host`, `ask` for every probe where `ask`, and `extra`
/// appended to `[defaults]`.
fn file(refuse: &[&str], ask: bool, extra: &str) -> String {
    let mut t = String::from("format = 1\n[defaults]\n");
    if ask && !extra.contains("r2.probe*") {
        t.push_str("ask = [\"r2.probe\", \"r2.probe_async\", \"r2.probe_gate\"]\n");
    }
    t.push_str(extra);
    if !refuse.is_empty() {
        let globs: Vec<String> = refuse.iter().map(|g| format!("\"{g}\"")).collect();
        for tool in TOOLS {
            t.push_str(&format!(
                "[[defaults.arguments]]\ntool = \"{tool}\"\nparameter = \"host\"\nrefuse = [{}]\n",
                globs.join(", ")
            ));
        }
    }
    t
}

fn code<T: std::fmt::Debug>(result: Result<T, Denied>) -> String {
    match result {
        Ok(v) => format!("ran ({v:?})"),
        Err(d) => format!("{}: {}", d.code(), d.message()),
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------------
// Sinks, stores, approvers.

/// A sink that sleeps on each `enter`, then records in a MemorySink.
struct SleepySink(MemorySink);

impl AuditSink for SleepySink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if matches!(record.stage, Stage::Enter) {
            thread::sleep(Duration::from_millis(5));
        }
        self.0.record(record)
    }
}

/// A memory budget store whose `take` sleeps first.
#[derive(Clone, Default)]
struct SlowBudgets(Arc<MemoryBudgets>);

impl BudgetStore for SlowBudgets {
    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.0.hold(charges, reservation)
    }

    fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        thread::sleep(Duration::from_millis(5));
        self.0.take(charges, reservation)
    }
    fn release(
        &self,
        charges: &[BudgetCharge],
        reservation: Reservation,
    ) -> toolgate::gate::budget::ReleaseFuture {
        self.0.release(charges, reservation)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Flavor {
    /// The file asks; the approver approves each call.
    Approve,
    /// As Approve, with a (slow) memory sink.
    ApproveSink,
    /// The approver approves the tool for the session (a first call makes the grant).
    GrantTool,
    /// The approver approves exactly these arguments for the session, with a memory sink.
    GrantExactSink,
    /// No approval; a slow sink.
    SlowSink,
    /// No approval; a budget (of the code) in a store that waits.
    Budget,
}

const FLAVORS: [Flavor; 6] = [
    Flavor::Approve,
    Flavor::ApproveSink,
    Flavor::GrantTool,
    Flavor::GrantExactSink,
    Flavor::SlowSink,
    Flavor::Budget,
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    Sync,
    Async,
    ByName,
    /// The flavored gate outside, a plain gate inside.
    NestedOuter,
    /// A plain gate outside, the flavored gate inside.
    NestedInner,
    /// A plain gate ambient, the flavored gate passed as `&Gate`.
    GateParam,
}

const PATHS: [Path; 6] = [
    Path::Sync,
    Path::Async,
    Path::ByName,
    Path::NestedOuter,
    Path::NestedInner,
    Path::GateParam,
];

struct Setup {
    flavor: Flavor,
    gate: Gate,
    live: LivePolicy,
    sink: Option<MemorySink>,
    asked: Arc<AtomicUsize>,
    asked_tainted: Arc<AtomicUsize>,
}

fn setup_with(flavor: Flavor, text: &str, taint: TaintPolicy) -> Setup {
    let ask = matches!(
        flavor,
        Flavor::Approve | Flavor::ApproveSink | Flavor::GrantTool | Flavor::GrantExactSink
    );
    let live = LivePolicy::new(pf(&if ask {
        text.replacen(
            "[defaults]\n",
            "[defaults]\nask = [\"r2.probe\", \"r2.probe_async\", \"r2.probe_gate\"]\n",
            1,
        )
    } else {
        text.to_owned()
    }));
    let asked = Arc::new(AtomicUsize::new(0));
    let asked_tainted = Arc::new(AtomicUsize::new(0));
    let mut b = Gate::builder()
        .mode(Mode::PartialAuto)
        .taint_policy(taint)
        .policy(live.clone());
    let (a, at) = (asked.clone(), asked_tainted.clone());
    let answer = move |r: &ApprovalRequest<'_>| {
        a.fetch_add(1, Ordering::SeqCst);
        if r.taint.is_some() {
            at.fetch_add(1, Ordering::SeqCst);
        }
        match flavor {
            Flavor::GrantTool => {
                Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600)))
            }
            Flavor::GrantExactSink => Approval::ApproveForSession(
                SessionGrant::tool(Duration::from_secs(600)).exact_arguments(),
            ),
            _ => Approval::Approve,
        }
    };
    if ask {
        b = b.approver(answer);
    }
    let mut sink = None;
    if matches!(
        flavor,
        Flavor::ApproveSink | Flavor::GrantExactSink | Flavor::SlowSink
    ) {
        let m = MemorySink::new();
        b = b.audit(SleepySink(m.clone()));
        sink = Some(m);
    }
    // without an argument rule these flavors read no argument at their commit point (a granted call,
    // a budget, or a sink's digest before `enter`): a harmless rule makes the commit point read them
    if matches!(
        flavor,
        Flavor::Budget | Flavor::GrantTool | Flavor::SlowSink
    ) && !text.contains("[[defaults.arguments]]")
    {
        let base = if ask {
            text.replacen(
                "[defaults]\n",
                "[defaults]\nask = [\"r2.probe\", \"r2.probe_async\", \"r2.probe_gate\"]\n",
                1,
            )
        } else {
            text.to_owned()
        };
        let with_rule = format!(
            "{base}{}",
            file(&["never-*"], false, "").trim_start_matches("format = 1\n[defaults]\n")
        );
        live.replace(pf(&with_rule), "setup");
    }
    if flavor == Flavor::Budget {
        b = b.budget_store(SlowBudgets::default()).budget(
            BudgetScope::tool("r2.probe*"),
            1000,
            Duration::from_secs(3600),
        );
    }
    Setup {
        flavor,
        gate: b.build().unwrap(),
        live,
        sink,
        asked,
        asked_tainted,
    }
}

fn setup(flavor: Flavor, text: &str) -> Setup {
    setup_with(flavor, text, TaintPolicy::Refuse)
}

/// Runs a call of `value` (a probe waiting at `waits`) along `path` on `gate`, on this thread.
fn call(gate: &Gate, path: Path, value: &str, waits: Vec<(usize, Hold)>, tag: &str) -> String {
    let plain = Gate::new(Mode::PartialAuto).unwrap();
    let tag = Tag(tag.to_owned());
    let make = |v: &str| {
        let p = Probe::new(v);
        *p.0.waits.lock().unwrap() = waits.clone();
        if !waits.is_empty() {
            HELD.lock().unwrap().push((v.to_owned(), p.clone()));
        }
        p
    };
    match path {
        Path::Sync => code(gate.run(|| probe(make(value), tag))),
        Path::Async => code(rt().block_on(gate.scope(probe_async(make(value), tag)))),
        Path::ByName => {
            if !waits.is_empty() {
                ARMED
                    .lock()
                    .unwrap()
                    .push((value.to_owned(), waits.clone()));
            }
            let fut = toolgate::registry().call(
                gate,
                "r2.probe",
                serde_json::json!({"host": value, "tag": tag.0}),
            );
            match rt().block_on(fut) {
                Ok(v) => format!("ran ({v})"),
                Err(e) => format!("{}: {e}", e.code()),
            }
        }
        Path::NestedOuter => code(gate.run(|| plain.run(|| probe(make(value), tag)))),
        Path::NestedInner => code(plain.run(|| gate.run(|| probe(make(value), tag)))),
        Path::GateParam => code(plain.run(|| probe_gate(gate, make(value), tag))),
    }
}

/// The number of serializations of a harmless call's argument on this gate and path before its body.
fn calibrate(s: &Setup, path: Path, tag: &str) -> Option<usize> {
    let _ = call(
        &s.gate,
        path,
        &format!("cal0-{tag}"),
        Vec::new(),
        &format!("{tag}-0"),
    );
    let out = call(&s.gate, path, &format!("cal-{tag}"), Vec::new(), tag);
    let n = count_seen(tag);
    if n.is_none() {
        println!("calibration of {:?}/{path:?} did not run: {out}", s.flavor);
    }
    n
}

/// Makes the gate's session grant for the flavors that need one (one call that asks).
fn prime(s: &Setup, path: Path, tag: &str) {
    if matches!(s.flavor, Flavor::GrantTool) {
        let out = call(&s.gate, path, "staging-grant", Vec::new(), tag);
        assert!(out.starts_with("ran"), "{out}");
    }
}

/// The exact-arguments grant covers only one value: calls and primes use `staging-exact`.
fn value_for(s: &Setup, tag: &str) -> String {
    if s.flavor == Flavor::GrantExactSink {
        format!("staging-exact-{tag}")
    } else {
        format!("staging-{tag}")
    }
}

/// The trail's faults: an `enter` without an `exit`, an `exit` that says `ok` for a call whose body did
/// not run.
fn trail_faults(sink: &MemorySink, tag_ran: &dyn Fn(u64) -> Option<bool>) -> Vec<String> {
    let records = sink.records();
    let mut faults = Vec::new();
    let mut enters: HashMap<u64, &AuditRecord> = HashMap::new();
    let mut exits: HashMap<u64, &AuditRecord> = HashMap::new();
    for r in &records {
        match r.stage {
            Stage::Enter => {
                enters.insert(r.call, r);
            }
            Stage::Exit => {
                exits.insert(r.call, r);
            }
            _ => {}
        }
    }
    for call in enters.keys() {
        match exits.get(call) {
            None => faults.push(format!("enter of call {call} has no exit")),
            Some(x) => {
                if let Some(ran) = tag_ran(*call) {
                    let says_ran = !matches!(x.outcome, Some(Outcome::Refused));
                    if ran != says_ran {
                        faults.push(format!(
                            "call {call}: body ran = {ran}, exit outcome {:?} code {:?}",
                            x.outcome, x.code
                        ));
                    }
                }
            }
        }
    }
    faults
}

/// The generic attack at the commit point: on a fresh gate of `flavor` following `text`, calibrate,
/// prime, then run a call of `value` held at the commit point's read; `attack` runs while it is held
/// (given the setup and the probe, if direct); returns (outcome, body markers, whether the hold was
/// reached, trail faults).
struct Held {
    outcome: String,
    bodies: Vec<String>,
    reached: bool,
    faults: Vec<String>,
    setup: Setup,
}

fn at_commit(
    flavor: Flavor,
    path: Path,
    text: &str,
    taint: TaintPolicy,
    tag: &str,
    attack: impl FnOnce(&Setup, &Hold),
) -> Held {
    let s = setup_with(flavor, text, taint);
    prime(&s, path, &format!("{tag}-prime"));
    let value = value_for(&s, tag);
    // calibrate with the same value for exact grants (its grant is made by this first call); the
    // second call of the same value is calibrated then, as the attack will be
    if s.flavor == Flavor::GrantExactSink {
        let o = call(&s.gate, path, &value, Vec::new(), &format!("{tag}-prime"));
        assert!(o.starts_with("ran"), "{o}");
    }
    let cal_tag = format!("{tag}-cal");
    let n = match s.flavor {
        Flavor::GrantExactSink => {
            let _ = call(&s.gate, path, &value, Vec::new(), &format!("{cal_tag}0"));
            let o = call(&s.gate, path, &value, Vec::new(), &cal_tag);
            assert!(o.starts_with("ran"), "{o}");
            count_seen(&cal_tag)
        }
        _ => calibrate(&s, path, &cal_tag),
    }
    .expect("calibration ran");
    let hold = Hold::default();
    let g = s.gate.clone();
    let (h, v, t) = (hold.clone(), value.clone(), tag.to_owned());
    let th = thread::spawn(move || call(&g, path, &v, vec![(n, h)], &t));
    let reached = hold.arrived_within(Duration::from_secs(5));
    if reached {
        HOLDING.with(|h| *h.borrow_mut() = value.clone());
        attack(&s, &hold);
    }
    hold.release();
    let outcome = th.join().unwrap();
    let bodies = runs(tag);
    let ran_body = !bodies.is_empty();
    let faults = match &s.sink {
        Some(sink) => {
            // the attacked call is the last enter of a probe tool
            let last_enter = sink
                .records()
                .iter()
                .filter(|r| r.stage == Stage::Enter && r.tool.starts_with("r2.probe"))
                .map(|r| r.call)
                .max();
            trail_faults(sink, &|c| {
                if Some(c) == last_enter {
                    Some(ran_body)
                } else {
                    None
                }
            })
        }
        None => Vec::new(),
    };
    Held {
        outcome,
        bodies,
        reached,
        faults,
        setup: s,
    }
}

/// Replaces the policy on a thread, waits (up to 1 s) for `replace` to return, then leaves the hold
/// to be released. Returns whether `replace` returned while the call was held.
fn replace_now(live: &LivePolicy, text: String) -> bool {
    let l = live.clone();
    let r = thread::spawn(move || l.replace(pf(&text), "attacker"));
    let t = Instant::now();
    while !r.is_finished() && t.elapsed() < Duration::from_secs(1) {
        thread::sleep(Duration::from_millis(5));
    }
    r.is_finished()
}

/// Runs `attack_name` over every flavor and path; collects the holes.
fn matrix(
    attack_name: &str,
    flavors: &[Flavor],
    text: &str,
    taint: TaintPolicy,
    attack: impl Fn(&Setup, &Hold) -> String + Copy,
    safe: impl Fn(&Held, &str) -> Option<String> + Copy,
) {
    let mut holes = Vec::new();
    let mut notes = Vec::new();
    for (i, flavor) in flavors.iter().enumerate() {
        for (j, path) in PATHS.iter().enumerate() {
            let tag = format!("{attack_name}-{i}{j}");
            let note = Arc::new(Mutex::new(String::new()));
            let n2 = note.clone();
            let held = at_commit(*flavor, *path, text, taint, &tag, move |s, h| {
                *n2.lock().unwrap() = attack(s, h);
            });
            let note = note.lock().unwrap().clone();
            if !held.reached {
                notes.push(format!(
                    "{flavor:?}/{path:?}: the commit read was not reached: {}",
                    held.outcome
                ));
                continue;
            }
            if let Some(hole) = safe(&held, &note) {
                holes.push(format!(
                    "{flavor:?}/{path:?}: {hole} (outcome {}; bodies {:?}; {note})",
                    held.outcome, held.bodies
                ));
            }
            for f in &held.faults {
                holes.push(format!(
                    "{flavor:?}/{path:?}: trail: {f} (outcome {})",
                    held.outcome
                ));
            }
        }
    }
    println!("{attack_name} notes: {notes:#?}");
    assert!(holes.is_empty(), "{attack_name}: {holes:#?}");
}

fn must_not_run(h: &Held, _note: &str) -> Option<String> {
    (!h.bodies.is_empty()).then(|| "the body ran".to_owned())
}

fn must_run(h: &Held, _note: &str) -> Option<String> {
    if h.bodies.is_empty() && !h.outcome.contains("kept changing") {
        Some("a call both files allow was lost".to_owned())
    } else {
        None
    }
}

const BASE: &str = "format = 1\n[defaults]\n";

// ===================================================================================================
// 1. Changes while the commit point reads the arguments.

/// Guarantee 4: the kill switch pulled while the commit point reads the arguments.
#[test]
fn r2_01_lower_during_commit_read() {
    matrix(
        "r2_01",
        &FLAVORS,
        BASE,
        TaintPolicy::Refuse,
        |s, _| {
            s.gate.lower(Mode::Shadow).unwrap();
            String::new()
        },
        must_not_run,
    );
}

/// Guarantee 14: the latch closes (an untrusted read on the same gate) during the commit read; under
/// `TaintPolicy::Refuse` the write must not run.
#[test]
fn r2_02_latch_closes_during_commit_read() {
    matrix(
        "r2_02",
        &FLAVORS,
        BASE,
        TaintPolicy::Refuse,
        |s, _| format!("fetch: {}", code(s.gate.run(|| fetch("page-r2_02".into())))),
        must_not_run,
    );
}

/// Guarantee 14 with `RequireApproval`: a write approved in the clean session whose commit read sees
/// the latch close must run only on an approval asked in the tainted session.
#[test]
fn r2_03_latch_closes_during_commit_read_require_approval() {
    matrix(
        "r2_03",
        &[
            Flavor::Approve,
            Flavor::ApproveSink,
            Flavor::GrantTool,
            Flavor::GrantExactSink,
        ],
        BASE,
        TaintPolicy::RequireApproval,
        |s, _| format!("fetch: {}", code(s.gate.run(|| fetch("page-r2_03".into())))),
        |h, _| {
            (!h.bodies.is_empty() && h.setup.asked_tainted.load(Ordering::SeqCst) == 0)
                .then(|| "ran tainted without an approval asked in the tainted session".to_owned())
        },
    );
}

/// Session grants revoked while the granted call's commit point reads its arguments: the call must
/// ask again (or be refused), not run on the revoked grant.
#[test]
fn r2_04_revoke_grants_during_commit_read() {
    matrix(
        "r2_04",
        &[Flavor::GrantTool, Flavor::GrantExactSink],
        BASE,
        TaintPolicy::Refuse,
        |s, _| {
            let before = s.asked.load(Ordering::SeqCst);
            let n = s.gate.revoke_grants(None, "ops");
            format!("revoked {n}; asked before {before}")
        },
        |h, note| {
            let before: usize = note
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(usize::MAX);
            (!h.bodies.is_empty() && h.setup.asked.load(Ordering::SeqCst) <= before)
                .then(|| "ran on a grant revoked before its commit completed".to_owned())
        },
    );
}

/// The policy replaced, adding a deny of the tool, during the commit read.
#[test]
fn r2_05_deny_added_during_commit_read() {
    matrix(
        "r2_05",
        &FLAVORS,
        BASE,
        TaintPolicy::Refuse,
        |s, _| {
            let ask = s.flavor != Flavor::SlowSink && s.flavor != Flavor::Budget;
            let text = file(&[], ask, "deny = [\"r2.probe*\"]\n");
            format!("replace returned: {}", replace_now(&s.live, text))
        },
        must_not_run,
    );
}

/// The policy replaced, adding an argument rule that refuses the call's value, during the commit read.
#[test]
fn r2_06_rule_added_during_commit_read() {
    matrix(
        "r2_06",
        &FLAVORS,
        BASE,
        TaintPolicy::Refuse,
        |s, _| {
            let ask = s.flavor != Flavor::SlowSink && s.flavor != Flavor::Budget;
            format!(
                "replace returned: {}",
                replace_now(&s.live, file(&["staging-*"], ask, ""))
            )
        },
        must_not_run,
    );
}

/// The policy replaced, removing a rule (a widening that still allows the call), during the commit
/// read: the call both files allow must not be lost.
#[test]
fn r2_07_rule_removed_during_commit_read_call_not_lost() {
    let text = file(&["prod-*"], false, "");
    matrix(
        "r2_07",
        &FLAVORS,
        &text,
        TaintPolicy::Refuse,
        |s, _| {
            let ask = s.flavor != Flavor::SlowSink && s.flavor != Flavor::Budget;
            format!(
                "replace returned: {}",
                replace_now(&s.live, file(&[], ask, ""))
            )
        },
        must_run,
    );
}

/// The value changes during the commit read (the read sees the new one), under a rule refusing it:
/// the rules must judge what the commit point read.
#[test]
fn r2_08_value_changed_during_commit_read_under_a_rule() {
    let text = file(&["prod-*"], false, "");
    matrix(
        "r2_08",
        &FLAVORS,
        &text,
        TaintPolicy::Refuse,
        |_, _| {
            held_probe().set("prod-r2_08");
            "value set to prod-r2_08".to_owned()
        },
        |h, _| {
            h.bodies
                .iter()
                .any(|b| b.contains(":prod-"))
                .then(|| "ran on a value the rule refuses".to_owned())
        },
    );
}

// ===================================================================================================
// 2. Value changes and approvals bound to arguments.

/// Runs one held call whose value is changed to `to` while the commit point reads it (direct paths
/// only: the test holds the probe).
fn value_changed_at_commit(
    s: &Setup,
    path: Path,
    value: &str,
    to: &str,
    tag: &str,
) -> (String, Vec<String>, bool) {
    let cal = format!("{tag}-cal");
    let n = if s.flavor == Flavor::GrantExactSink {
        let o = call(&s.gate, path, value, Vec::new(), &cal);
        assert!(o.starts_with("ran"), "{o}");
        count_seen(&cal).unwrap()
    } else {
        calibrate(s, path, &cal).unwrap()
    };
    let hold = Hold::default();
    let g = s.gate.clone();
    let (h, v, t) = (hold.clone(), value.to_owned(), tag.to_owned());
    let th = thread::spawn(move || call(&g, path, &v, vec![(n, h)], &t));
    let reached = hold.arrived_within(Duration::from_secs(5));
    if reached {
        HOLDING.with(|h| *h.borrow_mut() = value.to_owned());
        held_probe().set(to);
    }
    hold.release();
    let out = th.join().unwrap();
    (out, runs(tag), reached)
}

/// Guarantee 7 with an exact-arguments session grant and no argument rule: the value is changed while
/// the commit point reads it (by name, where the probe is reachable). The grant covers only the
/// approved arguments: the body must not run on another value.
#[test]
fn r2_09_exact_grant_value_changed_during_commit_read() {
    let s = setup(Flavor::GrantExactSink, BASE);
    let (out, bodies, reached) =
        value_changed_at_commit(&s, Path::ByName, "staging-r2_09", "prod-r2_09", "r2_09");
    assert!(reached, "{out}");
    assert!(
        !bodies.iter().any(|b| b.contains(":prod-r2_09")),
        "ran on arguments the exact grant did not cover: {out} {bodies:?}"
    );
    // without a sink too
    let live = LivePolicy::new(pf(&file(&[], true, "")));
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .policy(live.clone())
        .approver(|_: &ApprovalRequest<'_>| {
            Approval::ApproveForSession(
                SessionGrant::tool(Duration::from_secs(600)).exact_arguments(),
            )
        })
        .build()
        .unwrap();
    let s2 = Setup {
        flavor: Flavor::GrantExactSink,
        gate,
        live,
        sink: None,
        asked: Default::default(),
        asked_tainted: Default::default(),
    };
    let (out, bodies, reached) =
        value_changed_at_commit(&s2, Path::ByName, "staging-r2_09b", "prod-r2_09b", "r2_09b");
    assert!(reached, "{out}");
    assert!(
        !bodies.iter().any(|b| b.contains(":prod-r2_09b")),
        "(no sink) ran on arguments the exact grant did not cover: {out} {bodies:?}"
    );
}

/// Guarantee 7: an approver approved one call (each call asks); the value is changed while the commit
/// point reads it, with and without a sink. The approval saw other arguments.
#[test]
fn r2_10_approved_call_value_changed_during_commit_read() {
    let mut holes = Vec::new();
    for (i, flavor) in [Flavor::Approve, Flavor::ApproveSink]
        .into_iter()
        .enumerate()
    {
        let s = setup(flavor, BASE);
        let from = format!("staging-r2_10{i}");
        let to = format!("prod-r2_10{i}");
        let (out, bodies, reached) =
            value_changed_at_commit(&s, Path::ByName, &from, &to, &format!("r2_10{i}"));
        if !reached {
            holes.push(format!("{flavor:?}: not reached: {out}"));
        }
        if bodies.iter().any(|b| b.contains(&to)) {
            holes.push(format!("{flavor:?}: ran on {to}, approved {from}: {out}"));
        }
    }
    assert!(holes.is_empty(), "{holes:#?}");
}

/// Guarantee 7, two-step: an operator approves `staging`; the same call again has its value changed
/// while the commit point reads it. It must be refused (APPROVAL_MISMATCH), and the approval must not
/// run a second call afterwards.
#[test]
fn r2_11_two_step_value_changed_during_commit_read() {
    for with_sink in [false, true] {
        let live = LivePolicy::new(pf(&file(&[], true, "")));
        let mut b = Gate::builder()
            .mode(Mode::PartialAuto)
            .policy(live.clone())
            .two_step_approvals();
        let sink = MemorySink::new();
        if with_sink {
            b = b.audit(sink.clone());
        }
        let gate = b.build().unwrap();
        let tag = format!("r2_11{}", with_sink as u8);
        let from = format!("staging-{tag}");
        let to = format!("prod-{tag}");
        // the count of serializations before the body, on an approved call: approve a calibration call
        let cal = format!("cal-{tag}");
        let pending = toolgate::registry()
            .call(
                &gate,
                "r2.probe",
                serde_json::json!({"host": cal, "tag": "x"}),
            )
            .now()
            .unwrap()
            .unwrap_err();
        assert_eq!(pending.code(), "APPROVAL_PENDING", "{pending}");
        gate.approve(pending.denied().unwrap().approval_token().unwrap())
            .unwrap();
        let o = call(&gate, Path::ByName, &cal, Vec::new(), "x");
        let _ = o;
        // calibrate by a tag carried in the value: use a fresh pending/approve with the tag
        let pending = toolgate::registry()
            .call(
                &gate,
                "r2.probe",
                serde_json::json!({"host": cal, "tag": format!("{tag}-cal")}),
            )
            .now()
            .unwrap()
            .unwrap_err();
        gate.approve(pending.denied().unwrap().approval_token().unwrap())
            .unwrap();
        let o = call(&gate, Path::ByName, &cal, Vec::new(), &format!("{tag}-cal"));
        let n = count_seen(&format!("{tag}-cal")).unwrap_or_else(|| panic!("calibration: {o}"));
        // the attack
        let pending = toolgate::registry()
            .call(
                &gate,
                "r2.probe",
                serde_json::json!({"host": from, "tag": tag}),
            )
            .now()
            .unwrap()
            .unwrap_err();
        gate.approve(pending.denied().unwrap().approval_token().unwrap())
            .unwrap();
        let hold = Hold::default();
        let g = gate.clone();
        let (h, v, t) = (hold.clone(), from.clone(), tag.clone());
        let th = thread::spawn(move || call(&g, Path::ByName, &v, vec![(n, h)], &t));
        assert!(hold.arrived_within(Duration::from_secs(5)));
        // the newest probe made for `from`
        let p = MADE
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(k, _)| *k == from)
            .map(|(_, p)| p.clone())
            .unwrap();
        p.set(&to);
        hold.release();
        let out = th.join().unwrap();
        assert!(
            !runs(&tag).iter().any(|b| b.contains(&to)),
            "sink {with_sink}: ran on {to}, approved {from}: {out}"
        );
        // and the approval of `from` runs at most one call
        let again = call(&gate, Path::ByName, &from, Vec::new(), &tag);
        let again2 = call(&gate, Path::ByName, &from, Vec::new(), &tag);
        assert!(
            runs(&tag).len() <= 1,
            "sink {with_sink}: one approval ran {:?} ({out} / {again} / {again2})",
            runs(&tag)
        );
        if with_sink {
            let faults = trail_faults(&sink, &|_| None);
            assert!(faults.is_empty(), "{faults:#?}");
        }
    }
}

/// Two-step: during the approved call's commit read, the policy adds an argument rule that refuses its
/// value, and separately the gate is lowered. Refused both times; the approval not reusable after the
/// rule is removed again? (A second call on the same approval may run once at most in total.)
#[test]
fn r2_12_two_step_policy_replaced_during_commit_read() {
    let live = LivePolicy::new(pf(&file(&[], true, "")));
    let sink = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .policy(live.clone())
        .audit(sink.clone())
        .two_step_approvals()
        .build()
        .unwrap();
    let approve = |v: &str, tag: &str| {
        let pending = toolgate::registry()
            .call(
                &gate,
                "r2.probe",
                serde_json::json!({"host": v, "tag": tag}),
            )
            .now()
            .unwrap()
            .unwrap_err();
        assert_eq!(pending.code(), "APPROVAL_PENDING", "{pending}");
        gate.approve(pending.denied().unwrap().approval_token().unwrap())
            .unwrap();
    };
    approve("cal-r2_12", "r2_12-cal");
    let o = call(&gate, Path::ByName, "cal-r2_12", Vec::new(), "r2_12-cal");
    let n = count_seen("r2_12-cal").unwrap_or_else(|| panic!("{o}"));
    approve("staging-r2_12", "r2_12");
    let hold = Hold::default();
    let g = gate.clone();
    let h = hold.clone();
    let th = thread::spawn(move || call(&g, Path::ByName, "staging-r2_12", vec![(n, h)], "r2_12"));
    assert!(hold.arrived_within(Duration::from_secs(5)));
    let returned = replace_now(&live, file(&["staging-*"], true, ""));
    hold.release();
    let out = th.join().unwrap();
    assert!(
        runs("r2_12").is_empty(),
        "ran (replace returned {returned}): {out}"
    );
    // the rule removed again: the approval of the refused call may run it once, never twice
    live.replace(pf(&file(&[], true, "")), "ops");
    let a = call(&gate, Path::ByName, "staging-r2_12", Vec::new(), "r2_12");
    let b = call(&gate, Path::ByName, "staging-r2_12", Vec::new(), "r2_12");
    assert!(runs("r2_12").len() <= 1, "{a} / {b}");
    let faults = trail_faults(&sink, &|_| None);
    assert!(faults.is_empty(), "{faults:#?}");
}

// ===================================================================================================
// 3. Budgets at the commit point.

/// Guarantee 13: a budget of N; one call held at its commit read; other threads spend the budget
/// meanwhile. At most N bodies may run.
#[test]
fn r2_13_budget_spent_from_another_thread_during_commit_read() {
    let mut holes = Vec::new();
    for (i, with_file_budget) in [false, true].into_iter().enumerate() {
        let text = if with_file_budget {
            "format = 1\n[[defaults.budgets]]\ntool = \"r2.probe\"\ncalls = 3\nper = \"1h\"\n"
                .to_owned()
        } else {
            BASE.to_owned()
        };
        let live = LivePolicy::new(pf(&text));
        let mut b = Gate::builder()
            .mode(Mode::PartialAuto)
            .policy(live.clone())
            .budget_store(SlowBudgets::default())
            .audit(MemorySink::new());
        if !with_file_budget {
            b = b.budget(BudgetScope::tool("r2.probe"), 3, Duration::from_secs(3600));
        }
        let gate = b.build().unwrap();
        let tag = format!("r2_13{i}");
        let o = call(&gate, Path::Sync, "cal", Vec::new(), &format!("{tag}-cal"));
        let n = count_seen(&format!("{tag}-cal")).unwrap_or_else(|| panic!("{o}"));
        let hold = Hold::default();
        let g = gate.clone();
        let (h, t) = (hold.clone(), tag.clone());
        let th = thread::spawn(move || call(&g, Path::Sync, "staging", vec![(n, h)], &t));
        assert!(hold.arrived_within(Duration::from_secs(5)));
        let mut others = Vec::new();
        for k in 0..4 {
            others.push(call(&gate, Path::Sync, "staging", Vec::new(), &tag));
            let _ = k;
        }
        // and a replacement of the file meanwhile (a new generation: the held call decided again)
        let l = live.clone();
        let rep = thread::spawn(move || {
            let t = if text.contains("[defaults]\n") {
                format!("{text}deny = [\"r2.other\"]\n")
            } else {
                format!("{text}[defaults]\ndeny = [\"r2.other\"]\n")
            };
            l.replace(pf(&t), "ops")
        });
        thread::sleep(Duration::from_millis(100));
        hold.release();
        let out = th.join().unwrap();
        rep.join().unwrap();
        let total = runs(&tag).len() + 1; // + the calibration
        if total > 3 {
            holes.push(format!(
                "file budget {with_file_budget}: {total} calls ran under a budget of 3: held {out}; others {others:?}"
            ));
        }
    }
    assert!(holes.is_empty(), "{holes:#?}");
}

/// Guarantee 13 + 18: the file's budget of 2; one call ran, the second holds the last unit at its
/// commit read; the policy is replaced by a file with the same budget (and an unrelated deny). The held
/// call both files allow must not be lost to its own unit (BUDGET_EXHAUSTED), and no third runs.
#[test]
fn r2_14_policy_replaced_keeps_the_held_calls_unit() {
    let mut holes = Vec::new();
    for (i, path) in [Path::Sync, Path::Async, Path::ByName]
        .into_iter()
        .enumerate()
    {
        let text =
            "format = 1\n[[defaults.budgets]]\ntool = \"r2.probe*\"\ncalls = 2\nper = \"1h\"\n";
        let live = LivePolicy::new(pf(text));
        let sink = MemorySink::new();
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .policy(live.clone())
            .budget_store(SlowBudgets::default())
            .audit(sink.clone())
            .build()
            .unwrap();
        let tag = format!("r2_14{i}");
        let o = call(
            &gate,
            path,
            &format!("cal-{tag}"),
            Vec::new(),
            &format!("{tag}-cal"),
        );
        let n = count_seen(&format!("{tag}-cal")).unwrap_or_else(|| panic!("{o}"));
        let hold = Hold::default();
        let g = gate.clone();
        let (h, t) = (hold.clone(), tag.clone());
        let v = format!("staging-{tag}");
        let th = thread::spawn(move || call(&g, path, &v, vec![(n, h)], &t));
        assert!(hold.arrived_within(Duration::from_secs(5)));
        let returned = replace_now(&live, format!("{text}[defaults]\ndeny = [\"r2.other\"]\n"));
        hold.release();
        let out = th.join().unwrap();
        let third = call(&gate, path, "staging", Vec::new(), &format!("{tag}-3"));
        if runs(&tag).is_empty() && !out.contains("kept changing") {
            holes.push(format!("{path:?}: the held call was lost: {out} (replace returned {returned}); third: {third}"));
        }
        if !runs(&format!("{tag}-3")).is_empty() && !runs(&tag).is_empty() {
            holes.push(format!("{path:?}: three calls ran under a budget of 2"));
        }
        let faults = trail_faults(&sink, &|_| None);
        holes.extend(faults.into_iter().map(|f| format!("{path:?}: trail: {f}")));
    }
    assert!(holes.is_empty(), "{holes:#?}");
}

// ===================================================================================================
// 4. The commit point's loop: a policy that keeps changing while the arguments are read.

/// The policy is replaced at each of five successive reads of the commit point (harmless files), the
/// last replacement denying the tool: the call must not run. With only harmless files it runs or is
/// refused naming that the policy kept changing.
#[test]
fn r2_15_policy_changes_at_every_commit_read() {
    let mut holes = Vec::new();
    for (i, flavor) in [
        Flavor::ApproveSink,
        Flavor::SlowSink,
        Flavor::Budget,
        Flavor::Approve,
    ]
    .into_iter()
    .enumerate()
    {
        let mut dry_reads = 0usize;
        for last_denies in [false, true] {
            let s = setup(flavor, BASE);
            let tag = format!("r2_15{i}{}", last_denies as u8);
            let n = calibrate(&s, Path::Sync, &format!("{tag}-cal")).unwrap();
            println!(
                "{flavor:?}: calibrated {n} ({:?})",
                runs(&format!("{tag}-cal-0"))
            );
            let holds: Vec<Hold> = (0..8).map(|_| Hold::default()).collect();
            let waits: Vec<(usize, Hold)> = holds
                .iter()
                .enumerate()
                .map(|(k, h)| (n + k, h.clone()))
                .collect();
            let g = s.gate.clone();
            let t = tag.clone();
            let th = thread::spawn(move || call(&g, Path::Sync, "staging-x", waits, &t));
            let ask = flavor == Flavor::ApproveSink || flavor == Flavor::Approve;
            let mut reached = 0;
            for (k, h) in holds.iter().enumerate() {
                if !h.arrived_within(Duration::from_secs(2)) {
                    break;
                }
                reached += 1;
                let text = if last_denies && k + 1 >= dry_reads {
                    file(&[], ask, "deny = [\"r2.probe*\"]\n")
                } else {
                    file(
                        &[],
                        ask,
                        if k % 2 == 0 {
                            "deny = [\"r2.other\"]\n"
                        } else {
                            "ask_at = \"HIGH_WRITE\"\n"
                        },
                    )
                };
                let returned = replace_now(&s.live, text);
                if !returned {
                    holes.push(format!("{flavor:?}: replace blocked at read {k}"));
                }
                h.release();
            }
            for h in &holds {
                h.release();
            }
            let out = th.join().unwrap();
            if !last_denies {
                dry_reads = reached;
            }
            println!("{flavor:?} last_denies {last_denies}: {reached} reads held: {out}");
            if last_denies && !runs(&tag).is_empty() {
                holes.push(format!(
                    "{flavor:?}: ran after the deny ({reached} reads): {out}"
                ));
            }
            if !last_denies && runs(&tag).is_empty() && !out.contains("kept changing") {
                holes.push(format!(
                    "{flavor:?}: lost without naming why ({reached} reads): {out}"
                ));
            }
            if let Some(sink) = &s.sink {
                let ran_body = !runs(&tag).is_empty();
                let last = sink
                    .records()
                    .iter()
                    .filter(|r| r.stage == Stage::Enter && r.tool == "r2.probe")
                    .map(|r| r.call)
                    .max();
                for f in trail_faults(sink, &|c| (Some(c) == last).then_some(ran_body)) {
                    holes.push(format!("{flavor:?}: trail: {f}"));
                }
            }
        }
    }
    assert!(holes.is_empty(), "{holes:#?}");
}

/// A thread replaces the policy in a loop (files that all allow `staging-*` and all refuse `prod-*`)
/// while calls run on every flavor; then a last replacement denies the tool. No `prod-*` call may run;
/// no call may run that starts after the deny's `replace` returned; and every `staging-*` call runs or
/// is refused naming that the policy kept changing.
#[test]
fn r2_16_policy_replaced_in_a_loop_while_calls_run() {
    let mut holes = Vec::new();
    for (i, flavor) in FLAVORS.into_iter().enumerate() {
        let s = setup(flavor, &file(&["prod-*"], false, ""));
        let ask = !matches!(flavor, Flavor::SlowSink | Flavor::Budget);
        let stop = Arc::new(AtomicBool::new(false));
        let l = s.live.clone();
        let st = stop.clone();
        let replacer = thread::spawn(move || {
            let files = [
                pf(&file(&["prod-*"], ask, "")),
                pf(&file(&["prod-*", "qa-*"], ask, "deny = [\"r2.other\"]\n")),
                pf(&file(&["prod-*"], ask, "ask_at = \"HIGH_WRITE\"\n")),
            ];
            let mut k = 0usize;
            while !st.load(Ordering::SeqCst) {
                l.replace(files[k % 3].clone(), "loop");
                k += 1;
            }
            k
        });
        let tag = format!("r2_16{i}");
        let mut outcomes: HashMap<String, usize> = HashMap::new();
        let t0 = Instant::now();
        let mut j = 0;
        while t0.elapsed() < Duration::from_millis(400) {
            let path = PATHS[j % PATHS.len()];
            let value = if j % 4 == 3 { "prod-db" } else { "staging-db" };
            let ctag = format!("{tag}-{j}");
            let value = if flavor == Flavor::GrantExactSink && value == "staging-db" {
                "staging-exact"
            } else {
                value
            };
            let out = call(&s.gate, path, value, Vec::new(), &ctag);
            let ran_it = !runs(&ctag).is_empty();
            if value.starts_with("prod") && ran_it {
                holes.push(format!("{flavor:?}/{path:?}: prod ran: {out}"));
            }
            if !value.starts_with("prod") && !ran_it && !out.contains("kept changing") {
                holes.push(format!(
                    "{flavor:?}/{path:?}: a call every file allows was lost: {out}"
                ));
            }
            let key = if ran_it {
                "ran".to_owned()
            } else {
                out.split(':').next().unwrap().to_owned()
            };
            *outcomes.entry(key).or_default() += 1;
            j += 1;
        }
        stop.store(true, Ordering::SeqCst);
        let k = replacer.join().unwrap();
        s.live
            .replace(pf(&file(&[], ask, "deny = [\"r2.probe*\"]\n")), "final");
        for (jj, path) in PATHS.iter().enumerate() {
            let ctag = format!("{tag}-final-{jj}");
            let out = call(&s.gate, *path, "staging-db", Vec::new(), &ctag);
            if !runs(&ctag).is_empty() {
                holes.push(format!(
                    "{flavor:?}/{path:?}: ran after the deny's replace returned: {out}"
                ));
            }
        }
        println!("{flavor:?}: {k} replacements, outcomes {outcomes:?}");
    }
    assert!(holes.is_empty(), "{holes:#?}");
}

/// As r2_16, with concurrent callers on other threads and the deny replacing the loop while they run:
/// a body that starts 50 ms after the deny's `replace` returned is a hole.
#[test]
fn r2_17_deny_while_concurrent_calls_run() {
    let mut holes = Vec::new();
    for flavor in [
        Flavor::Approve,
        Flavor::SlowSink,
        Flavor::Budget,
        Flavor::GrantTool,
    ] {
        let s = setup(flavor, BASE);
        let ask = !matches!(flavor, Flavor::SlowSink | Flavor::Budget);
        prime(&s, Path::Sync, "r2_17-prime");
        let denied_at: Arc<Mutex<Option<Instant>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let late: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut workers = Vec::new();
        for w in 0..3 {
            let (g, st, da, late) = (
                s.gate.clone(),
                stop.clone(),
                denied_at.clone(),
                late.clone(),
            );
            workers.push(thread::spawn(move || {
                let mut j = 0;
                while !st.load(Ordering::SeqCst) {
                    let path = PATHS[(j + w) % PATHS.len()];
                    let started = Instant::now();
                    let ctag = format!("r2_17-{flavor:?}-{w}-{j}");
                    let out = call(&g, path, "staging-db", Vec::new(), &ctag);
                    if !runs(&ctag).is_empty()
                        && let Some(at) = *da.lock().unwrap()
                        && started > at + Duration::from_millis(50)
                    {
                        late.lock().unwrap().push(format!("{path:?}: {out}"));
                    }
                    j += 1;
                }
            }));
        }
        let l = s.live.clone();
        for k in 0..200 {
            l.replace(
                pf(&file(
                    &[],
                    ask,
                    if k % 2 == 0 {
                        "deny = [\"r2.other\"]\n"
                    } else {
                        ""
                    },
                )),
                "loop",
            );
        }
        l.replace(pf(&file(&[], ask, "deny = [\"r2.probe*\"]\n")), "final");
        *denied_at.lock().unwrap() = Some(Instant::now());
        thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::SeqCst);
        for w in workers {
            w.join().unwrap();
        }
        let late = late.lock().unwrap().clone();
        if !late.is_empty() {
            holes.push(format!(
                "{flavor:?}: {} ran after the deny: {:?}",
                late.len(),
                &late[..late.len().min(3)]
            ));
        }
    }
    assert!(holes.is_empty(), "{holes:#?}");
}

// ===================================================================================================
// 5. Grants made at the commit point.

/// An approver answers "for the session"; the call is refused at its commit point (a rule added during
/// its read). No grant may outlive the refused call: once the rule is removed again, the next call must
/// ask the approver.
#[test]
fn r2_18_grant_of_a_call_refused_at_its_commit_point() {
    let mut holes = Vec::new();
    for (i, (flavor, path)) in [
        (Flavor::GrantTool, Path::Sync),
        (Flavor::GrantTool, Path::Async),
        (Flavor::GrantTool, Path::ByName),
        (Flavor::GrantExactSink, Path::Sync),
        (Flavor::GrantExactSink, Path::ByName),
    ]
    .into_iter()
    .enumerate()
    {
        for (k, attack) in ["rule", "lower-outer", "revoke"].into_iter().enumerate() {
            let s = setup(flavor, BASE);
            let tag = format!("r2_18{i}{k}");
            // calibrate on another tool path's first (asking) call: the first call of `value` asks
            let n = {
                let s2 = setup(flavor, BASE);
                let o = call(
                    &s2.gate,
                    path,
                    "cal-first",
                    Vec::new(),
                    &format!("{tag}-cal"),
                );
                count_seen(&format!("{tag}-cal")).unwrap_or_else(|| panic!("{o}"))
            };
            let value = if flavor == Flavor::GrantExactSink {
                "staging-exact"
            } else {
                "staging-18"
            };
            let hold = Hold::default();
            let (g, h, t) = (s.gate.clone(), hold.clone(), tag.clone());
            let th = thread::spawn(move || call(&g, path, value, vec![(n, h)], &t));
            if !hold.arrived_within(Duration::from_secs(5)) {
                hold.release();
                holes.push(format!(
                    "{flavor:?}/{path:?}/{attack}: not reached: {}",
                    th.join().unwrap()
                ));
                continue;
            }
            let note = match attack {
                "rule" => format!(
                    "replaced: {}",
                    replace_now(&s.live, file(&["staging-*"], true, ""))
                ),
                "revoke" => format!("revoked {}", s.gate.revoke_grants(None, "ops")),
                // a plain gate cannot be lowered from here; the policy's ceiling lowers the mode
                _ => format!(
                    "replaced: {}",
                    replace_now(&s.live, file(&[], true, "ceiling = \"SHADOW\"\n"))
                ),
            };
            hold.release();
            let out = th.join().unwrap();
            let ran_first = !runs(&tag).is_empty();
            // back to the first file
            s.live.replace(pf(&file(&[], true, "")), "ops");
            let grants = s.gate.grants().len();
            let asked = s.asked.load(Ordering::SeqCst);
            let again = call(&s.gate, path, value, Vec::new(), &format!("{tag}-again"));
            let asked_again = s.asked.load(Ordering::SeqCst) > asked;
            let ran_again = !runs(&format!("{tag}-again")).is_empty();
            if attack != "revoke" && ran_first {
                holes.push(format!(
                    "{flavor:?}/{path:?}/{attack}: the refused call ran: {out} ({note})"
                ));
            }
            if ran_again && !asked_again && (!ran_first || attack == "revoke") {
                holes.push(format!(
                    "{flavor:?}/{path:?}/{attack}: a grant made by a call refused at its commit point (or revoked during it) ran a later call unasked: first {out}; again {again}; grants {grants} ({note})"
                ));
            }
        }
    }
    assert!(holes.is_empty(), "{holes:#?}");
}

// ===================================================================================================
// 6. Nested gates: the inner (or outer) lone gate changes while the outer's commit point reads.

/// Gate A (a lone gate following its own file) runs inside gate B (approver + sink), and the reverse;
/// while B's commit point reads the arguments, A is lowered, or A's file denies the tool.
#[test]
fn r2_19_nested_lone_gate_changes_during_the_others_commit_read() {
    let mut holes = Vec::new();
    for (i, a_outside) in [false, true].into_iter().enumerate() {
        for (k, attack) in ["lower", "deny", "rule", "taint"].into_iter().enumerate() {
            let live_a = LivePolicy::new(pf(&file(&["prod-*"], false, "")));
            let a = Gate::builder()
                .mode(Mode::PartialAuto)
                .policy(live_a.clone())
                .taint_policy(TaintPolicy::Refuse)
                .build()
                .unwrap();
            let sb = setup(Flavor::ApproveSink, BASE);
            let b = sb.gate.clone();
            let tag = format!("r2_19{i}{k}");
            let run = move |a: &Gate, b: &Gate, v: &str, waits: Vec<(usize, Hold)>, tag: &str| {
                let p = Probe::new(v);
                *p.0.waits.lock().unwrap() = waits;
                let t = Tag(tag.to_owned());
                if a_outside {
                    code(a.run(|| b.run(|| probe(p, t))))
                } else {
                    code(b.run(|| a.run(|| probe(p, t))))
                }
            };
            let o = run(&a, &b, "cal", Vec::new(), &format!("{tag}-cal"));
            let n = count_seen(&format!("{tag}-cal")).unwrap_or_else(|| panic!("{o}"));
            let hold = Hold::default();
            let (a2, b2, h, t) = (a.clone(), b.clone(), hold.clone(), tag.clone());
            let th = thread::spawn(move || run(&a2, &b2, "staging-19", vec![(n, h)], &t));
            if !hold.arrived_within(Duration::from_secs(5)) {
                hold.release();
                holes.push(format!(
                    "a_outside {a_outside} {attack}: not reached: {}",
                    th.join().unwrap()
                ));
                continue;
            }
            let note = match attack {
                "lower" => {
                    a.lower(Mode::Shadow).unwrap();
                    String::new()
                }
                "deny" => format!(
                    "replaced {}",
                    replace_now(&live_a, file(&[], false, "deny = [\"r2.probe\"]\n"))
                ),
                "rule" => format!(
                    "replaced {}",
                    replace_now(&live_a, file(&["staging-*"], false, ""))
                ),
                _ => code(a.run(|| fetch("page-19".into()))),
            };
            hold.release();
            let out = th.join().unwrap();
            if !runs(&tag).is_empty() {
                holes.push(format!(
                    "a_outside {a_outside} {attack}: ran: {out} ({note})"
                ));
            }
            let sink = sb.sink.as_ref().unwrap();
            let last = sink
                .records()
                .iter()
                .filter(|r| r.stage == Stage::Enter && r.tool == "r2.probe")
                .map(|r| r.call)
                .max();
            let ran_body = !runs(&tag).is_empty();
            for f in trail_faults(sink, &|c| (Some(c) == last).then_some(ran_body)) {
                holes.push(format!("a_outside {a_outside} {attack}: trail: {f}"));
            }
        }
    }
    assert!(holes.is_empty(), "{holes:#?}");
}

// ===================================================================================================
// 7. The trail.

/// After a refusal at the commit point (lowered during the read), the records: the `enter` has an
/// `exit` of outcome `refused` with the lowered mode's code; no `exit` says `ok`; and the records name
/// the policy digest in force.
#[test]
fn r2_20_trail_after_commit_refusals() {
    let mut problems = Vec::new();
    for (k, attack) in ["lower", "deny", "rule"].into_iter().enumerate() {
        let held = at_commit(
            Flavor::SlowSink,
            Path::Sync,
            BASE,
            TaintPolicy::Refuse,
            &format!("r2_20{k}"),
            |s, _| match attack {
                "lower" => s.gate.lower(Mode::Shadow).unwrap(),
                "deny" => {
                    replace_now(&s.live, file(&[], false, "deny = [\"r2.probe\"]\n"));
                }
                _ => {
                    replace_now(&s.live, file(&["staging-*"], false, ""));
                }
            },
        );
        let sink = held.setup.sink.as_ref().unwrap();
        let recs = sink.records();
        let last_enter = recs
            .iter()
            .rfind(|r| r.stage == Stage::Enter && r.tool == "r2.probe")
            .cloned();
        let Some(enter) = last_enter else {
            problems.push(format!("{attack}: no enter at all"));
            continue;
        };
        let exit = recs
            .iter()
            .find(|r| r.stage == Stage::Exit && r.call == enter.call);
        match exit {
            None => problems.push(format!("{attack}: enter without exit")),
            Some(x) => {
                if x.outcome != Some(Outcome::Refused) {
                    problems.push(format!(
                        "{attack}: exit says {:?} ({})",
                        x.outcome, held.outcome
                    ));
                }
                let refused_code = held.outcome.split(':').next().unwrap_or("").to_owned();
                if x.code.as_deref() != Some(refused_code.as_str()) {
                    problems.push(format!(
                        "{attack}: exit code {:?}, the caller got {refused_code}",
                        x.code
                    ));
                }
                if attack != "lower"
                    && x.policy_digest.as_deref() != held.setup.gate.policy_digest().as_deref()
                {
                    problems.push(format!(
                        "{attack}: the exit (code {:?}) names policy digest {:?}, not the one that refused it ({:?})",
                        x.code,
                        x.policy_digest.as_deref().map(|d| &d[..12]),
                        held.setup.gate.policy_digest().as_deref().map(|d| d[..12].to_owned())
                    ));
                }
            }
        }
        if !held.bodies.is_empty() {
            problems.push(format!("{attack}: ran: {}", held.outcome));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A two-step approval made by `Gate::answer` for the session (an operator's "for the session"); the
/// first call runs and makes the grant; during the next call's commit read the grants are revoked and
/// the latch closes. Under `TaintPolicy::Refuse` it must not run.
#[test]
fn r2_21_two_step_session_answer_revoked_and_tainted_during_commit_read() {
    for (k, attack) in ["revoke", "taint"].into_iter().enumerate() {
        let live = LivePolicy::new(pf(&file(&[], true, "")));
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .policy(live.clone())
            .taint_policy(TaintPolicy::Refuse)
            .two_step_approvals()
            .build()
            .unwrap();
        let value = format!("s21-{k}");
        let pending = toolgate::registry()
            .call(
                &gate,
                "r2.probe",
                serde_json::json!({"host": value, "tag": "x"}),
            )
            .now()
            .unwrap()
            .unwrap_err();
        gate.answer(
            pending.denied().unwrap().approval_token().unwrap(),
            Answer::Approve {
                by: "ops".into(),
                for_session: true,
                confirmation: None,
            },
        )
        .unwrap();
        let _ = call(
            &gate,
            Path::ByName,
            &value,
            Vec::new(),
            &format!("r2_21{k}-cal"),
        );
        let o = call(
            &gate,
            Path::ByName,
            &value,
            Vec::new(),
            &format!("r2_21{k}-cal2"),
        );
        let n = count_seen(&format!("r2_21{k}-cal2"))
            .unwrap_or_else(|| panic!("grant did not run: {o}"));
        let hold = Hold::default();
        let (g, h) = (gate.clone(), hold.clone());
        let tag = format!("r2_21{k}");
        let (t, v) = (tag.clone(), value.clone());
        let th = thread::spawn(move || call(&g, Path::ByName, &v, vec![(n, h)], &t));
        if !hold.arrived_within(Duration::from_secs(5)) {
            hold.release();
            let out = th.join().unwrap();
            panic!("{attack}: not reached: {out} {:?}", runs(&tag));
        }
        if attack == "revoke" {
            gate.revoke_grants(None, "ops");
        } else {
            gate.run(|| fetch("page-21".into())).unwrap();
        }
        hold.release();
        let out = th.join().unwrap();
        assert!(runs(&tag).is_empty(), "{attack}: ran: {out}");
    }
}

// ===================================================================================================
// 6. What a replacement adds, decided again at the commit point of a call that waited for its approver.

/// A memory budget store that counts, per key, the units taken and not given back.
#[derive(Clone, Default)]
struct CountedBudgets {
    inner: Arc<MemoryBudgets>,
    net: Arc<Mutex<HashMap<String, i64>>>,
}

impl CountedBudgets {
    fn count(&self, charges: &[BudgetCharge], by: i64) {
        let mut net = self.net.lock().unwrap();
        for charge in charges {
            *net.entry(charge.key.to_string()).or_default() += by;
        }
    }

    /// The units kept, over every key.
    fn kept(&self) -> i64 {
        self.net.lock().unwrap().values().sum()
    }
}

impl BudgetStore for CountedBudgets {
    // Units are lost only when an hour passes: none is taken again.
    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.inner.hold(charges, reservation)
    }

    fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        let (this, owned) = (self.clone(), charges.to_vec());
        let taking = self.inner.take(charges, reservation);
        Box::pin(async move {
            let taken = taking.await;
            if matches!(taken, Ok(toolgate::gate::budget::Taken::Taken)) {
                this.count(&owned, 1);
            }
            taken
        })
    }
    fn release(
        &self,
        charges: &[BudgetCharge],
        reservation: Reservation,
    ) -> toolgate::gate::budget::ReleaseFuture {
        let (this, owned) = (self.clone(), charges.to_vec());
        let releasing = self.inner.release(charges, reservation);
        Box::pin(async move {
            releasing.await;
            this.count(&owned, -1);
        })
    }
}

/// A gate following `live` whose approver approves every call, holding the first it is asked for at
/// `hold` until the test releases it; its budgets in `store`, its records in `sink`, its agent label
/// `agent`.
fn held_by_its_approver(
    live: &LivePolicy,
    hold: &Hold,
    store: &CountedBudgets,
    sink: &MemorySink,
    agent: Option<&str>,
) -> Gate {
    let (armed, hold) = (Arc::new(AtomicBool::new(true)), hold.clone());
    let mut b = Gate::builder();
    if let Some(agent) = agent {
        b = b.agent(agent);
    }
    b.mode(Mode::PartialAuto)
        .policy(live.clone())
        .budget_store(store.clone())
        .audit(sink.clone())
        .approver(move |_: &ApprovalRequest<'_>| {
            if armed.swap(false, Ordering::SeqCst) {
                hold.arrive_and_wait();
            }
            Approval::Approve
        })
        .build()
        .unwrap()
}

/// Guarantees 13 and 18: a call waits for its approver; `LivePolicy::replace` adds a budget of one
/// call; another call takes it and runs; the waiting call is approved. It must be refused
/// `BUDGET_EXHAUSTED` at its commit point, its units given back: the store keeps one unit, the one
/// of the call that ran, and the trail closes every `enter`.
#[test]
fn r2_22_a_budget_added_while_a_call_waits_for_its_approver_is_charged_at_its_commit_point() {
    let mut holes = Vec::new();
    for (i, path) in PATHS.into_iter().enumerate() {
        let base = file(&[], true, "");
        let live = LivePolicy::new(pf(&base));
        let (hold, store, sink) = (
            Hold::default(),
            CountedBudgets::default(),
            MemorySink::new(),
        );
        let gate = held_by_its_approver(&live, &hold, &store, &sink, None);
        let tag = format!("r2_22{i}");
        let (g, t) = (gate.clone(), tag.clone());
        let waiting = thread::spawn(move || call(&g, path, &format!("b-{t}"), Vec::new(), &t));
        hold.wait_arrived();
        replace_now(
            &live,
            format!("{base}[[defaults.budgets]]\ntool = \"r2.probe*\"\ncalls = 1\nper = \"1h\"\n"),
        );
        let other = call(
            &gate,
            path,
            &format!("o-{tag}"),
            Vec::new(),
            &format!("{tag}-o"),
        );
        hold.release();
        let out = waiting.join().unwrap();
        if runs(&format!("{tag}-o")).is_empty() {
            holes.push(format!("{path:?}: the other call did not run: {other}"));
        }
        if !runs(&tag).is_empty() || !out.starts_with("BUDGET_EXHAUSTED") {
            holes.push(format!("{path:?}: two calls ran in a window of one: {out}"));
        }
        if store.kept() != 1 {
            holes.push(format!(
                "{path:?}: the store keeps {} units for the one call that ran",
                store.kept()
            ));
        }
        let faults = trail_faults(&sink, &|_| None);
        holes.extend(faults.into_iter().map(|f| format!("{path:?}: trail: {f}")));
    }
    assert!(holes.is_empty(), "{holes:#?}");
}

/// What a replacement can add, in the table of one gate's agent: its keys, an array of tables
/// (`[[agents.<agent>.` and this), and the refusal it must give at the commit point.
const ADDED: [(&str, &str, Option<&str>, &str); 6] = [
    ("deny", "deny = [\"r2.probe*\"]\n", None, "DENY_LISTED"),
    (
        "ask",
        "ask = [\"r2.probe\", \"r2.probe_async\"]\n",
        None,
        "APPROVAL_REQUIRED",
    ),
    (
        "ceiling",
        "ceiling = \"SHADOW\"\n",
        None,
        "MODE_NOT_ALLOWED",
    ),
    (
        "argument rule",
        "",
        Some("arguments]]\ntool = \"r2.probe\"\nparameter = \"host\"\nrefuse = [\"w-*\"]\n"),
        "ARGUMENT_REFUSED",
    ),
    (
        "taint rule",
        "taint = \"refuse\"\n",
        None,
        "TAINTED_SESSION",
    ),
    (
        "budget",
        "",
        Some("budgets]]\ntool = \"r2.probe*\"\ncalls = 1\nper = \"1h\"\n"),
        "BUDGET_EXHAUSTED",
    ),
];

/// A file whose agent `outer` asks for the probes, and whose agent `target` has `keys` and the array
/// `array` where given.
fn agents_file(target: &str, keys: &str, array: Option<&str>) -> String {
    let ask = "ask = [\"r2.probe\", \"r2.probe_async\"]\n";
    // A deny of the tools makes the ask of them dead, which the file's check refuses.
    let ask = if target == "outer" && keys.starts_with("deny") {
        ""
    } else {
        ask
    };
    let mut t = format!("format = 1\n[agents.outer]\n{ask}");
    if target == "outer" && !keys.starts_with("ask") {
        t.push_str(keys);
    } else if target != "outer" && !keys.is_empty() {
        t.push_str(&format!("[agents.{target}]\n{keys}"));
    }
    if let Some(array) = array {
        t.push_str(&format!("[[agents.{target}.{array}"));
        if array.starts_with("arguments") {
            let again = array.replace("r2.probe\"", "r2.probe_async\"");
            t.push_str(&format!("[[agents.{target}.{again}"));
        }
    }
    t
}

/// A call of `value` inside `inner`, inside `outer`, along `path` (sync, async or by name).
fn around(outer: &Gate, inner: &Gate, path: Path, value: &str, tag: &str) -> String {
    let (probe_of, tag) = (Probe::new(value), Tag(tag.to_owned()));
    match path {
        Path::Async => code(rt().block_on(outer.scope(inner.scope(probe_async(probe_of, tag))))),
        Path::ByName => {
            let json = serde_json::json!({"host": value, "tag": tag.0});
            let by_name = || rt().block_on(toolgate::registry().call(inner, "r2.probe", json));
            match outer.run(by_name) {
                Ok(v) => format!("ran ({v})"),
                Err(e) => format!("{}: {e}", e.code()),
            }
        }
        _ => code(outer.run(|| inner.run(|| probe(probe_of, tag)))),
    }
}

/// Guarantees 18, 13 and 14: a call of the tool waits for the approver of gate `outer`, inside gate
/// `inner` that allowed it outright; meanwhile `LivePolicy::replace` adds, for one of the two gates, a
/// deny rule, an `ask`, a ceiling, an argument rule, the latch set to refuse (the gate's session then
/// tainted) or a budget of one call (another call then runs). Whatever it adds is decided again at
/// the waiting call's commit point, and refuses it with its code; but an `ask` added for the gate
/// whose approver approved this very call is answered already, and the call runs. The budget store
/// keeps only the units of the calls that ran, and each gate's trail closes every `enter`. Sync,
/// async and by name.
#[test]
fn r2_23_everything_a_replacement_adds_is_decided_again_at_the_commit_point() {
    let mut holes = Vec::new();
    for (what, keys, array, refused) in ADDED {
        for target in ["outer", "inner"] {
            for path in [Path::Sync, Path::Async, Path::ByName] {
                let case = format!("{what} for {target}, {path:?}");
                let live = LivePolicy::new(pf(&agents_file("outer", "", None)));
                let (hold, store) = (Hold::default(), CountedBudgets::default());
                let (outer_sink, inner_sink) = (MemorySink::new(), MemorySink::new());
                let outer = held_by_its_approver(&live, &hold, &store, &outer_sink, Some("outer"));
                let inner = Gate::builder()
                    .mode(Mode::PartialAuto)
                    .agent("inner")
                    .policy(live.clone())
                    .budget_store(store.clone())
                    .audit(inner_sink.clone())
                    .build()
                    .unwrap();
                let tag = format!("r2_23 {what} {target} {path:?}");
                let (o, i, t) = (outer.clone(), inner.clone(), tag.clone());
                let waiting = thread::spawn(move || around(&o, &i, path, &format!("w-{t}"), &t));
                if !hold.arrived_within(Duration::from_secs(10)) {
                    hold.release();
                    panic!(
                        "{case}: the approver was never asked: {}",
                        waiting.join().unwrap()
                    );
                }
                replace_now(&live, agents_file(target, keys, array));
                let mut ran_others = 0;
                if what == "budget" {
                    let o = format!("{tag}-o");
                    let other = around(&outer, &inner, path, &format!("o-{tag}"), &o);
                    if runs(&o).is_empty() {
                        holes.push(format!("{case}: the other call did not run: {other}"));
                    }
                    ran_others = 1;
                } else if what == "taint rule" {
                    let tainted = if target == "outer" { &outer } else { &inner };
                    tainted.run(|| fetch(format!("page-{tag}"))).unwrap();
                }
                hold.release();
                let out = waiting.join().unwrap();
                let ran = !runs(&tag).is_empty();
                if (what, target) == ("ask", "outer") {
                    if !ran {
                        holes.push(format!("{case}: approved, it must run: {out}"));
                    }
                } else if ran || !out.starts_with(refused) {
                    holes.push(format!("{case}: must be refused {refused}: {out}"));
                }
                let units = i64::from(ran_others) + i64::from(ran && what == "budget");
                if store.kept() != units {
                    holes.push(format!(
                        "{case}: the store keeps {} units for {units} calls that ran",
                        store.kept()
                    ));
                }
                for sink in [&outer_sink, &inner_sink] {
                    let faults = trail_faults(sink, &|_| None);
                    holes.extend(faults.into_iter().map(|f| format!("{case}: trail: {f}")));
                }
            }
        }
    }
    assert!(holes.is_empty(), "{holes:#?}");
}
