//! Outside attacks on guarantee 19 (irreversible actions), above all where it meets the other stateful
//! features: the taint latch, budgets, lowering, the operator's policy file, principals sharing a
//! store, nested gates, calls by name, async calls and MCP in-band forms.
//!
//! Written from the documentation and the public API only. Every test asserts the guarantee as it
//! should hold: a test that fails is an attack that got through.
//!
//! The tools of this file (domain `atk19`) act on a world of their own, whose probe can run a hook at
//! a chosen read of a target (counted from 1: read 1 files the request, read 2 decides the retry,
//! read 3 is the read just before the body, read 4 the one after it), so that a test can change the
//! world, lower the gate, taint it or replace its policy exactly while the probe reads.
//!
//! Got through when written (these tests fail until the library is fixed): a19_02 (list separators of
//! other scripts), a19_03 (U+2800, a blank a reader cannot see), a19_38 (fullwidth wildcards and globs
//! that NFKC maps onto refused ones), a19_23 (the arguments' `Serialize` runs after the read just
//! before the body: the target changes unseen), a19_36 and a19_39 (an approval refused
//! EVIDENCE_CHANGED at the decision stays live and runs a later call once the state reads as
//! approved), a19_37 (`Rollback`'s `Display` carries the agent's bidi and zero-width characters raw).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::approval::ApproveError;
use toolgate::approval::store::{
    Answer, ApprovalCall, ApprovalStore, Binding, Consumed, StoreError, StoreFuture,
};
use toolgate::approval::two_step::MemoryStore;
use toolgate::audit::{AuditError, AuditRecord, AuditSink, MemorySink, Outcome, Stage};
use toolgate::gate::{BudgetScope, TaintPolicy};
use toolgate::{AllowAllApprover, DenialCode, Denied, Gate, Mode, Rollback, registry, tool};

// ---------------------------------------------------------------------------------------------------
// The world.

type Hook = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Inst {
    state: String,
    reads: u32,
    seen_by_body: Vec<String>,
    launched: u32,
}

static WORLD: Mutex<Option<HashMap<String, Inst>>> = Mutex::new(None);
static HOOKS: Mutex<Vec<(String, u32, Hook)>> = Mutex::new(Vec::new());

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with<T>(id: &str, f: impl FnOnce(&mut Inst) -> T) -> Option<T> {
    lock(&WORLD)
        .get_or_insert_with(HashMap::new)
        .get_mut(id)
        .map(f)
}

fn put(id: &str, state: &str) {
    lock(&WORLD).get_or_insert_with(HashMap::new).insert(
        id.to_owned(),
        Inst {
            state: state.to_owned(),
            ..Inst::default()
        },
    );
}

fn set(id: &str, state: &str) {
    with(id, |i| i.state = state.to_owned()).expect("a known instance");
}

fn reads(id: &str) -> u32 {
    with(id, |i| i.reads).unwrap_or(0)
}

/// The states the bodies saw, one per body that ran on `id`.
fn seen(id: &str) -> Vec<String> {
    with(id, |i| i.seen_by_body.clone()).unwrap_or_default()
}

fn ran(id: &str) -> usize {
    seen(id).len()
}

fn launched(id: &str) -> u32 {
    with(id, |i| i.launched).unwrap_or(0)
}

/// Runs `hook` when the probe reads `id` for the `read`-th time, before it reads the state.
fn at_read(id: &str, read: u32, hook: impl FnOnce() + Send + 'static) {
    lock(&HOOKS).push((id.to_owned(), read, Box::new(hook)));
}

/// The probe: runs the hook of this read, if any, then reads the instance.
fn probe(id: &str) -> Result<Value, String> {
    let n = with(id, |i| {
        i.reads += 1;
        i.reads
    })
    .ok_or_else(|| format!("no instance `{id}`"))?;
    let hook = {
        let mut hooks = lock(&HOOKS);
        hooks
            .iter()
            .position(|(k, at, _)| k == id && *at == n)
            .map(|p| hooks.remove(p).2)
    };
    if let Some(hook) = hook {
        hook();
    }
    with(id, |i| json!({"id": id, "state": i.state})).ok_or_else(|| format!("no instance `{id}`"))
}

fn body(id: &str) -> String {
    with(id, |i| {
        let state = i.state.clone();
        i.seen_by_body.push(state);
        i.state = "terminated".to_owned();
    });
    format!("{id} terminated")
}

/// The plan, chosen by the call's `note`.
fn plan(id: &str, note: &str) -> Result<Rollback, String> {
    match note {
        "no plan" => Err(format!("`{id}` has no snapshot")),
        "plan panics" => panic!("the plan panics"),
        "plan missing tool" => Ok(Rollback::call("atk19.no_such_tool", json!({"id": id}))),
        "plan not callable" => Ok(Rollback::call("atk19.uncallable", json!({}))),
        "plan not object" => Ok(Rollback::call("atk19.relaunch", json!([id]))),
        "plan denied" => Ok(Rollback::call("atk19.forbidden", json!({"id": id}))),
        "plan irreversible" => Ok(Rollback::call(
            "atk19.terminate",
            json!({"id": format!("{id}-twin"), "note": "undo"}),
        )),
        n if n.starts_with("steps:") => Ok(Rollback::steps(&n["steps:".len()..])),
        n if n.starts_with("args:") => Ok(Rollback::call(
            "atk19.relaunch_why",
            json!({"id": id, "why": &n["args:".len()..]}),
        )),
        _ => Ok(Rollback::call("atk19.relaunch", json!({"id": id}))),
    }
}

// ---------------------------------------------------------------------------------------------------
// The tools.

/// Terminate an instance (attack 19). It cannot be undone.
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk19", callable, record_arguments,
       irreversible, target = id, evidence = probe, rollback = plan)]
pub(crate) fn terminate(id: String, note: String) -> Result<String, Denied> {
    let _ = note;
    Ok(body(&id))
}

/// Terminate an instance from async code (attack 19). It cannot be undone.
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk19", callable, record_arguments,
       irreversible, target = id, evidence = probe, rollback = plan)]
pub(crate) async fn terminate_async(id: String, note: String) -> Result<String, Denied> {
    let _ = note;
    Ok(body(&id))
}

/// Stop an instance (attack 19): a target, its state and a plan, but not irreversible, so an
/// in-band form may approve it.
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk19", callable, record_arguments,
       target = id, evidence = probe, rollback = plan)]
pub(crate) fn stop(id: String, note: String) -> Result<String, Denied> {
    let _ = note;
    Ok(body(&id))
}

/// Launch an instance again: the plan that undoes a termination.
#[tool(risk = "LOW_WRITE", domain = "atk19", callable)]
pub(crate) fn relaunch(id: String) -> Result<String, Denied> {
    with(&id, |i| {
        i.state = "running".to_owned();
        i.launched += 1;
    });
    Ok(format!("{id} launched"))
}

/// Launch an instance again, saying why.
#[tool(risk = "LOW_WRITE", domain = "atk19", callable)]
pub(crate) fn relaunch_why(id: String, why: String) -> Result<String, Denied> {
    let _ = why;
    relaunch_body(&id)
}

fn relaunch_body(id: &str) -> Result<String, Denied> {
    with(id, |i| i.launched += 1);
    Ok(format!("{id} launched"))
}

/// Launch an instance again, panicking on the way.
#[tool(risk = "LOW_WRITE", domain = "atk19", callable)]
pub(crate) fn relaunch_panics(id: String) -> Result<String, Denied> {
    panic!("relaunch of {id} panics")
}

/// Launch an instance again, slowly.
#[tool(risk = "LOW_WRITE", domain = "atk19", callable)]
pub(crate) async fn relaunch_slow(id: String) -> Result<String, Denied> {
    tokio::time::sleep(Duration::from_secs(60)).await;
    relaunch_body(&id)
}

static FORBIDDEN: AtomicUsize = AtomicUsize::new(0);

/// A tool some gates of these tests deny.
#[tool(risk = "LOW_WRITE", domain = "atk19", callable)]
pub(crate) fn forbidden(id: String) -> Result<String, Denied> {
    FORBIDDEN.fetch_add(1, SeqCst);
    Ok(id)
}

/// A tool that cannot be called by name.
#[tool(risk = "LOW_WRITE", domain = "atk19")]
pub(crate) fn uncallable() -> Result<(), Denied> {
    Ok(())
}

/// Fetch a page: its output is untrusted.
#[tool(risk = "READ_ONLY", domain = "atk19", callable, untrusted_output)]
pub(crate) fn fetch(url: String) -> Result<String, Denied> {
    Ok(url)
}

static N_RAN: Mutex<Vec<u64>> = Mutex::new(Vec::new());

fn probe_n(n: &u64) -> Result<Value, String> {
    Ok(json!({"n": n, "state": "running"}))
}

/// Terminate an instance named by a number (attack 19).
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk19", callable, irreversible,
       target = n, evidence = probe_n)]
pub(crate) fn terminate_n(n: u64) -> Result<u64, Denied> {
    lock(&N_RAN).push(n);
    Ok(n)
}

static ANY_RAN: Mutex<Vec<Value>> = Mutex::new(Vec::new());

fn probe_any(_: &Value) -> Result<Value, String> {
    Ok(json!({"state": "running"}))
}

/// Terminate whatever JSON names (attack 19).
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk19", callable, irreversible,
       target = target, evidence = probe_any)]
pub(crate) fn terminate_any(target: Value) -> Result<(), Denied> {
    lock(&ANY_RAN).push(target);
    Ok(())
}

/// Hooks run by a `Tripwire`'s `Serialize`: by instance, and by the number of the write among those
/// made once the probe has read the instance three times.
static SERIALIZE_HOOKS: Mutex<Vec<(String, u32, Hook)>> = Mutex::new(Vec::new());
static WRITES_AFTER_READ_3: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

/// Runs `hook` at the `n`-th write of a `Tripwire` of `id` after the probe's third read of `id`.
fn at_write_after_read_3(id: &str, n: u32, hook: impl FnOnce() + Send + 'static) {
    lock(&SERIALIZE_HOOKS).push((id.to_owned(), n, Box::new(hook)));
}

fn writes_after_read_3(id: &str) -> u32 {
    lock(&WRITES_AFTER_READ_3)
        .iter()
        .find(|(k, _)| k == id)
        .map_or(0, |(_, n)| *n)
}

/// An argument whose `Serialize` runs the hooks of its instance once the probe has read that
/// instance three times (after the read just before the body): user code the gate runs after that
/// read, if it runs any.
#[derive(Clone, Debug)]
pub(crate) struct Tripwire(String);

impl toolgate::serde::Serialize for Tripwire {
    fn serialize<S: toolgate::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let id = &self.0;
        if reads(id) == 3 {
            let n = {
                let mut writes = lock(&WRITES_AFTER_READ_3);
                match writes.iter_mut().find(|(k, _)| k == id) {
                    Some((_, n)) => {
                        *n += 1;
                        *n
                    }
                    None => {
                        writes.push((id.clone(), 1));
                        1
                    }
                }
            };
            let hook = {
                let mut hooks = lock(&SERIALIZE_HOOKS);
                hooks
                    .iter()
                    .position(|(k, at, _)| k == id && *at == n)
                    .map(|p| hooks.remove(p).2)
            };
            if let Some(hook) = hook {
                hook();
            }
        }
        s.serialize_str("tripwire")
    }
}

/// Wipe an instance (attack 19). It cannot be undone.
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk19", record_arguments, irreversible,
       target = id, evidence = probe)]
pub(crate) fn wipe(id: String, note: Tripwire) -> Result<String, Denied> {
    let _ = note;
    Ok(body(&id))
}

/// A target behind a shared handle: what it names can change while the call is decided.
#[derive(Clone, Debug)]
pub(crate) struct Handle(Arc<Mutex<String>>);

impl Handle {
    fn new(id: &str) -> Handle {
        Handle(Arc::new(Mutex::new(id.to_owned())))
    }
    fn get(&self) -> String {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
    fn point_at(&self, id: &str) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = id.to_owned();
    }
}

impl toolgate::serde::Serialize for Handle {
    fn serialize<S: toolgate::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.get())
    }
}

/// A probe that reads the state only, not which instance it is (two running instances read alike).
fn probe_handle(host: &Handle) -> Result<Value, String> {
    let id = host.get();
    with(&id, |i| json!({"state": i.state})).ok_or_else(|| format!("no instance `{id}`"))
}

/// Terminate the instance a handle names (attack 19).
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk19", irreversible, target = host,
       evidence = probe_handle)]
pub(crate) fn retarget(host: Handle) -> Result<String, Denied> {
    Ok(body(&host.get()))
}

// ---------------------------------------------------------------------------------------------------
// Paths, gates and helpers.

#[derive(Clone, Copy, Debug)]
enum P {
    Direct,
    Async,
    ByName,
    ByNameAsync,
}

const ALL: [P; 4] = [P::Direct, P::Async, P::ByName, P::ByNameAsync];

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn tool_of(p: P) -> &'static str {
    match p {
        P::Direct | P::ByName => "atk19.terminate",
        P::Async | P::ByNameAsync => "atk19.terminate_async",
    }
}

/// Terminates `id` through `p`, as the agent would.
fn term(p: P, gate: &Gate, id: &str, note: &str) -> Result<String, Denied> {
    let by_name = |tool: &str| {
        let called = registry().call(gate, tool, json!({"id": id, "note": note}));
        match rt().block_on(called) {
            Ok(value) => Ok(value.as_str().unwrap_or_default().to_owned()),
            Err(error) => Err(error
                .denied()
                .cloned()
                .unwrap_or_else(|| panic!("{p:?}: not a refusal: {error}"))),
        }
    };
    match p {
        P::Direct => gate.run(|| terminate(id.to_owned(), note.to_owned())),
        P::Async => rt().block_on(gate.scope(terminate_async(id.to_owned(), note.to_owned()))),
        P::ByName => by_name("atk19.terminate"),
        P::ByNameAsync => by_name("atk19.terminate_async"),
    }
}

fn code(result: &Result<String, Denied>) -> String {
    match result {
        Ok(_) => "OK (the body ran)".to_owned(),
        Err(denied) => denied.code().to_string(),
    }
}

/// Files the request for `id` and returns its token.
fn file(p: P, gate: &Gate, id: &str) -> String {
    let denied = term(p, gate, id, "decommissioned").unwrap_err();
    assert_eq!(
        denied.code(),
        DenialCode::ApprovalPending,
        "{p:?} {id}: {denied}"
    );
    denied.approval_token().expect("a token").to_owned()
}

/// Files the request for `id` and approves it, the target typed back.
fn file_and_approve(p: P, gate: &Gate, id: &str) {
    let token = file(p, gate, id);
    gate.approve_typed(&token, "ana", id).unwrap();
}

fn two_step() -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap()
}

/// Runs `f` on a thread of its own and waits for it (30 s at most: a deadlock fails the test).
fn on_thread<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(value)) => value,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("{what}: no answer in 30 s (a deadlock?)"),
    }
}

/// A point where the code under test stops until the test releases it.
struct Pause {
    arrived: Mutex<mpsc::Sender<()>>,
    release: Mutex<mpsc::Receiver<()>>,
}

struct PauseCtl {
    arrived: mpsc::Receiver<()>,
    release: mpsc::Sender<()>,
}

fn pause() -> (Arc<Pause>, PauseCtl) {
    let (atx, arx) = mpsc::channel();
    let (rtx, rrx) = mpsc::channel();
    (
        Arc::new(Pause {
            arrived: Mutex::new(atx),
            release: Mutex::new(rrx),
        }),
        PauseCtl {
            arrived: arx,
            release: rtx,
        },
    )
}

impl Pause {
    fn wait(&self) {
        let _ = self.arrived.lock().unwrap().send(());
        let _ = self
            .release
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(30));
    }
}

impl PauseCtl {
    fn wait_arrived(&self, what: &str) {
        self.arrived
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{what}: the paused point was never reached"));
    }
    fn release(&self) {
        let _ = self.release.send(());
    }
}

/// A store whose next `consume` waits (asynchronously: its future is pending) until the test
/// releases it.
struct Held {
    inner: MemoryStore,
    armed: Mutex<Option<(mpsc::Sender<()>, tokio::sync::oneshot::Receiver<()>)>>,
}

impl Held {
    fn new() -> Arc<Held> {
        Arc::new(Held {
            inner: MemoryStore::new(Duration::from_secs(600)).unwrap(),
            armed: Mutex::new(None),
        })
    }
    /// The next `consume` waits: the receiver hears it has begun, the sender releases it.
    fn arm(&self) -> (mpsc::Receiver<()>, tokio::sync::oneshot::Sender<()>) {
        let (atx, arx) = mpsc::channel();
        let (rtx, rrx) = tokio::sync::oneshot::channel();
        *self.armed.lock().unwrap() = Some((atx, rrx));
        (arx, rtx)
    }
}

impl ApprovalStore for Held {
    fn consume<'a>(
        &'a self,
        call: &'a ApprovalCall,
    ) -> StoreFuture<'a, Result<Consumed, StoreError>> {
        let armed = self.armed.lock().unwrap().take();
        Box::pin(async move {
            if let Some((arrived, release)) = armed {
                let _ = arrived.send(());
                let _ = release.await;
            }
            self.inner.consume(call).await
        })
    }

    fn answer<'a>(
        &'a self,
        token: &'a str,
        answer: Answer,
    ) -> StoreFuture<'a, Result<Binding, ApproveError>> {
        self.inner.answer(token, answer)
    }
}

fn held_gate(store: &Arc<Held>) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .approval_store_shared(store.clone())
        .build()
        .unwrap()
}

fn assert_no_failures(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{what}: {} got through: {failures:#?}",
        failures.len()
    );
}

// ---------------------------------------------------------------------------------------------------
// 1. One target.

/// Refuses each target of `targets` TARGET_NOT_SINGLE on every path, before anyone is asked; the
/// instance exists, so a target taken as one would be asked for (APPROVAL_PENDING).
fn not_single(test: &str, targets: &[&str]) -> Vec<String> {
    let mut failures = Vec::new();
    for target in targets {
        put(target, "running");
        for p in ALL {
            let gate = two_step();
            let result = term(p, &gate, target, "cleanup");
            let asked = result
                .as_ref()
                .err()
                .and_then(Denied::approval_token)
                .is_some();
            match &result {
                Err(denied) if denied.code() == DenialCode::TargetNotSingle && !asked => {}
                other => failures.push(format!(
                    "{test} {p:?} {target:?}: {}{}",
                    code(other),
                    if asked {
                        " (an operator was asked)"
                    } else {
                        ""
                    }
                )),
            }
        }
    }
    failures
}

#[test]
fn a19_01_lists_joined_by_other_whitespace_are_not_one_target() {
    let targets = [
        "a01-1\u{a0}a01-2",   // no-break space
        "a01-1\u{2003}a01-2", // em space
        "a01-1\u{3000}a01-2", // ideographic space
        "a01-1\u{1680}a01-2", // ogham space mark
        "a01-1\u{205f}a01-2", // medium mathematical space
        "a01-1\ta01-2",
        "a01-1\ra01-2",
        "a01-1\u{b}a01-2",  // vertical tab
        "a01-1\u{c}a01-2",  // form feed
        "a01-1\u{85}a01-2", // next line
        "a01-1\u{2028}a01-2",
        "a01-1\u{2029}a01-2",
    ];
    assert_no_failures("lists", &not_single("a19_01", &targets));
}

#[test]
fn a19_02_lists_joined_by_the_commas_and_semicolons_of_other_scripts_are_not_one_target() {
    let targets = [
        "a02-1\u{ff0c}a02-2", // fullwidth comma
        "a02-1\u{3001}a02-2", // ideographic comma
        "a02-1\u{ff1b}a02-2", // fullwidth semicolon
        "a02-1\u{60c}a02-2",  // arabic comma
        "a02-1\u{fe50}a02-2", // small comma
    ];
    assert_no_failures("lists", &not_single("a19_02", &targets));
}

#[test]
fn a19_03_targets_with_characters_a_reader_cannot_see_are_not_one_target() {
    let targets = [
        "\u{feff}a03-1",  // byte order mark
        "a03-1\u{2060}",  // word joiner
        "a03-1\u{ad}",    // soft hyphen
        "a03-1\u{34f}",   // combining grapheme joiner
        "a03-1\u{180e}",  // mongolian vowel separator
        "a03-1\u{115f}",  // hangul choseong filler
        "a03-1\u{3164}",  // hangul filler
        "a03-1\u{ffa0}",  // halfwidth hangul filler
        "a03-1\u{fe0f}",  // variation selector
        "a03-1\u{e0041}", // tag latin capital a
        "a03-1\u{61c}",   // arabic letter mark
        "a03-1\u{200e}",  // left-to-right mark
        "a03-1\u{2066}",  // left-to-right isolate
        "a03-1\u{200d}",  // zero width joiner
        "a03-1\u{1d173}", // musical symbol begin beam
        "a03-1\u{0}",     // NUL
        "a03-1\u{7f}",    // DEL
        "a03-1\u{1b}[8m", // ESC: a terminal's "hidden text"
        "\u{202e}1-30a",  // right-to-left override: shows as `a03-1`
        "a03-1\u{2800}",  // braille pattern blank
        " a03-1",         // a leading space
        "a03-1 ",         // a trailing space
        "a03-1\u{a0}",    // a trailing no-break space
        "a03-1\u{2009}",  // a trailing thin space
    ];
    assert_no_failures("invisible", &not_single("a19_03", &targets));
}

#[test]
fn a19_04_wildcards_and_globs_in_any_case_are_not_one_target() {
    let targets = [
        "ALL",
        "All",
        "aLl",
        "**",
        "*.*",
        ".*",
        "a04-?",
        "a04-{1,2}",
        "a04-[12]",
        "%a04%",
    ];
    assert_no_failures("wildcards", &not_single("a19_04", &targets));
}

// ---------------------------------------------------------------------------------------------------
// 2. The target typed back.

#[test]
fn a19_05_a_confirmation_that_only_looks_like_the_target_approves_nothing() {
    // `N` is the path's digit: the target is `a05-db-file-N`.
    let lookalikes = [
        "A05-DB-FILE-N",
        "a05-db-\u{fb01}le-N",   // the `fi` ligature (NFKC folds it to `fi`)
        "\u{430}05-db-file-N",   // cyrillic a
        "\u{ff41}05-db-file-N",  // fullwidth a
        "a05\u{2010}db-file-N",  // hyphen
        "a05\u{2011}db-file-N",  // non-breaking hyphen
        "a05\u{ff0d}db-file-N",  // fullwidth hyphen-minus
        "a05-db-file-N\u{200b}", // zero width space
        "\u{200b}a05-db-file-N",
        "a05-db-file-N\u{301}", // a combining accent
        "a05-db-file-N ",
        " a05-db-file-N",
        "a05-db-file-N\n",
        "a05-db-file-N\u{0}",
        "\u{202e}N-elif-bd-50a", // shows as the target
        "a05-db-fiIe-N",
        "a05-db-file-",
        "a05-db-file-Na05-db-file-N",
        "",
    ];
    let mut failures = Vec::new();
    for (n, p) in [(1, P::Direct), (2, P::ByNameAsync), (3, P::Async)] {
        let id = format!("a05-db-file-{n}");
        put(&id, "running");
        let gate = two_step();
        let token = file(p, &gate, &id);
        for wrong in lookalikes {
            let wrong = wrong.replace('N', &n.to_string());
            let typed = gate.approve_typed(&token, "ana", &wrong);
            if !matches!(typed, Err(ApproveError::ConfirmationMismatch)) {
                failures.push(format!("{p:?}: approve_typed {wrong:?}: {typed:?}"));
            }
            let answered = gate.answer(
                &token,
                Answer::Approve {
                    by: "ana".into(),
                    for_session: false,
                    confirmation: Some(wrong.clone()),
                },
            );
            if !matches!(answered, Err(ApproveError::ConfirmationMismatch)) {
                failures.push(format!("{p:?}: answer {wrong:?}: {answered:?}"));
            }
        }
        let again = term(p, &gate, &id, "decommissioned");
        if again.is_ok() || ran(&id) != 0 {
            failures.push(format!(
                "{p:?}: ran after lookalike confirmations: {}",
                code(&again)
            ));
            continue;
        }
        // The real one still approves it: nothing above answered the request.
        gate.approve_typed(&token, "ana", &id).unwrap();
        term(p, &gate, &id, "decommissioned").unwrap();
        assert_eq!(ran(&id), 1);
    }
    assert_no_failures("lookalike confirmations", &failures);
}

#[test]
fn a19_06_a_number_and_its_spellings_are_not_the_same_confirmation() {
    let mut failures = Vec::new();
    // A number target: typed as JSON writes it, and no other way.
    let gate = two_step();
    let denied = gate.run(|| terminate_n(7)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalPending, "{denied}");
    let token = denied.approval_token().unwrap().to_owned();
    for wrong in [
        "07",
        "007",
        "7.0",
        "+7",
        " 7",
        "7 ",
        "\u{ff17}",
        "7\u{200b}",
        "0x7",
        "7e0",
        "seven",
    ] {
        let typed = gate.approve_typed(&token, "ana", wrong);
        if !matches!(typed, Err(ApproveError::ConfirmationMismatch)) {
            failures.push(format!("7 typed {wrong:?}: {typed:?}"));
        }
    }
    if gate.run(|| terminate_n(7)).is_ok() {
        failures.push("7 ran after mistyped confirmations".into());
    }
    gate.approve_typed(&token, "ana", "7").unwrap();
    assert_eq!(gate.run(|| terminate_n(7)).unwrap(), 7);
    // An approval of 7 is not one of 70, 17 or 77.
    for other in [70, 17, 77, 0] {
        if gate.run(|| terminate_n(other)).is_ok() {
            failures.push(format!("terminate_n({other}) ran on the approval of 7"));
        }
    }
    // A string `007`: `7` is not it.
    put("007", "running");
    let token = file(P::Direct, &gate, "007");
    for wrong in ["7", "07", "0007", "7.0"] {
        if !matches!(
            gate.approve_typed(&token, "ana", wrong),
            Err(ApproveError::ConfirmationMismatch)
        ) {
            failures.push(format!("\"007\" typed {wrong:?} approved"));
        }
    }
    // A JSON target: the string "7", the number 7 and the float 7.0 are three calls.
    let gate = two_step();
    let string = gate.run(|| terminate_any(json!("7"))).unwrap_err();
    let token = string.approval_token().unwrap().to_owned();
    gate.approve_typed(&token, "ana", "7").unwrap();
    for (other, label) in [
        (json!(7), "number 7"),
        (json!(7.0), "float 7.0"),
        (json!("07"), "\"07\""),
    ] {
        let result = gate.run(|| terminate_any(other.clone()));
        if result.is_ok() {
            failures.push(format!("{label} ran on the approval of the string \"7\""));
        }
    }
    let number = gate.run(|| terminate_any(json!(7))).unwrap_err();
    assert_eq!(number.code(), DenialCode::ApprovalPending, "{number}");
    gate.run(|| terminate_any(json!("7"))).unwrap();
    // And not one target: null, a boolean, an object, an empty array, a one-element array.
    for not_one in [
        json!(null),
        json!(true),
        json!({}),
        json!([]),
        json!(["7"]),
        json!(""),
    ] {
        match gate.run(|| terminate_any(not_one.clone())) {
            Err(d) if d.code() == DenialCode::TargetNotSingle => {}
            other => failures.push(format!("target {not_one}: {other:?}")),
        }
    }
    let any = lock(&ANY_RAN).clone();
    assert_eq!(any, vec![json!("7")], "only the approved call ran");
    assert_no_failures("numbers and strings", &failures);
}

/// A store that answers each call with an approval carrying a confirmation of its own choosing.
struct Answering(Mutex<String>);

impl ApprovalStore for Answering {
    fn consume<'a>(&'a self, _: &'a ApprovalCall) -> StoreFuture<'a, Result<Consumed, StoreError>> {
        let typed = self.0.lock().unwrap().clone();
        Box::pin(std::future::ready(Ok(Consumed::Answered(
            Answer::Approve {
                by: "store".into(),
                for_session: false,
                confirmation: Some(typed),
            },
        ))))
    }
    fn answer<'a>(
        &'a self,
        _: &'a str,
        _: Answer,
    ) -> StoreFuture<'a, Result<Binding, ApproveError>> {
        Box::pin(std::future::ready(Err(ApproveError::UnknownToken)))
    }
}

#[test]
fn a19_07_a_store_that_answers_with_a_near_miss_confirmation_runs_nothing() {
    let mut failures = Vec::new();
    for p in ALL {
        let id = format!("a07-{p:?}");
        put(&id, "running");
        let store = Arc::new(Answering(Mutex::new(String::new())));
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .approval_store_shared(store.clone())
            .build()
            .unwrap();
        for wrong in [
            id.to_uppercase(),
            format!("{id} "),
            format!("{id}\u{200b}"),
            id.replacen('a', "\u{430}", 1),
            String::new(),
        ] {
            *store.0.lock().unwrap() = wrong.clone();
            let result = term(p, &gate, &id, "decommissioned");
            match &result {
                Err(d) if d.code() == DenialCode::ConfirmationMismatch => {}
                other => failures.push(format!("{p:?} {wrong:?}: {}", code(other))),
            }
        }
    }
    assert_no_failures("near-miss confirmations from a store", &failures);
}

// ---------------------------------------------------------------------------------------------------
// 3. The taint latch and an irreversible approval.

#[test]
fn a19_08_an_approval_given_before_the_latch_closed_runs_nothing_after_it() {
    let mut failures = Vec::new();
    for p in ALL {
        for policy in [TaintPolicy::RequireApproval, TaintPolicy::Refuse] {
            let id = format!("a08-{p:?}-{policy:?}");
            put(&id, "running");
            let gate = Gate::builder()
                .mode(Mode::FullAuto)
                .two_step_approvals()
                .taint_policy(policy)
                .build()
                .unwrap();
            file_and_approve(p, &gate, &id);
            // Untrusted input between the approval and the retry.
            gate.run(|| fetch("https://example.com/evil".into()))
                .unwrap();
            let retry = term(p, &gate, &id, "decommissioned");
            let expected = match policy {
                TaintPolicy::Refuse => DenialCode::TaintedSession,
                _ => DenialCode::ApprovalPending,
            };
            match &retry {
                Err(d) if d.code() == expected => {}
                other => failures.push(format!("{p:?} {policy:?}: {}", code(other))),
            }
            if ran(&id) != 0 {
                failures.push(format!("{p:?} {policy:?}: the body ran"));
            }
            // Asked again in the tainted session, with the target typed, it runs (RequireApproval).
            if let (TaintPolicy::RequireApproval, Err(d)) = (policy, &retry)
                && let Some(token) = d.approval_token()
            {
                gate.approve_typed(token, "ana", &id).unwrap();
                term(p, &gate, &id, "decommissioned").unwrap();
                assert_eq!(ran(&id), 1, "{p:?}");
            }
        }
    }
    assert_no_failures("taint after the approval", &failures);
}

#[test]
fn a19_09_the_latch_closing_while_the_store_answers_runs_nothing() {
    let mut failures = Vec::new();
    for p in ALL {
        let id = format!("a09-{p:?}");
        put(&id, "running");
        let store = Held::new();
        let gate = held_gate(&store);
        file_and_approve(p, &gate, &id);
        let (arrived, release) = store.arm();
        let retry = {
            let gate = gate.clone();
            let id = id.clone();
            std::thread::spawn(move || term(p, &gate, &id, "decommissioned"))
        };
        arrived
            .recv_timeout(Duration::from_secs(30))
            .expect("the store was asked");
        gate.run(|| fetch("https://example.com/evil".into()))
            .unwrap();
        let _ = release.send(());
        let result = retry.join().unwrap();
        if result.is_ok() || ran(&id) != 0 {
            failures.push(format!("{p:?}: {}", code(&result)));
        }
    }
    assert_no_failures("taint while the store answers", &failures);
}

#[test]
fn a19_10_the_latch_closing_while_the_probe_reads_before_the_body_runs_nothing() {
    let mut failures = Vec::new();
    for p in ALL {
        // Another thread runs the untrusted tool while the probe reads.
        let id = format!("a10-{p:?}");
        put(&id, "running");
        let gate = two_step();
        file_and_approve(p, &gate, &id);
        let (hold, ctl) = pause();
        at_read(&id, 3, move || hold.wait());
        let retry = {
            let gate = gate.clone();
            let id = id.clone();
            std::thread::spawn(move || term(p, &gate, &id, "decommissioned"))
        };
        ctl.wait_arrived(&id);
        gate.run(|| fetch("https://example.com/evil".into()))
            .unwrap();
        ctl.release();
        let result = retry.join().unwrap();
        if result.is_ok() || ran(&id) != 0 {
            failures.push(format!("{p:?} (another thread): {}", code(&result)));
        }
        // The probe itself calls the untrusted tool through the gate it runs in.
        let id = format!("a10-self-{p:?}");
        put(&id, "running");
        let gate = two_step();
        file_and_approve(p, &gate, &id);
        let nested = Arc::new(Mutex::new(None));
        {
            let nested = nested.clone();
            let gate = gate.clone();
            at_read(&id, 3, move || {
                let fetched = gate.run(|| fetch("https://example.com/evil".into()));
                *nested.lock().unwrap() = Some(fetched.is_ok());
            });
        }
        let result = {
            let gate = gate.clone();
            let id = id.clone();
            on_thread(&id.clone(), move || term(p, &gate, &id, "decommissioned"))
        };
        let fetched = *nested.lock().unwrap();
        eprintln!(
            "a19_10 {p:?}: the probe's own untrusted call ran: {fetched:?}; the approved call: {}",
            code(&result)
        );
        if fetched == Some(true) && (result.is_ok() || ran(&id) != 0) {
            failures.push(format!("{p:?} (the probe itself): {}", code(&result)));
        }
    }
    assert_no_failures("taint while the probe reads", &failures);
}

// ---------------------------------------------------------------------------------------------------
// 4. Budgets.

#[test]
fn a19_11_a_refused_irreversible_call_takes_no_unit_of_its_budget() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .budget(
            BudgetScope::tool("atk19.terminate"),
            1,
            Duration::from_secs(3600),
        )
        .build()
        .unwrap();
    let mut failures: Vec<String> = Vec::new();
    let check = |what: &str, result: Result<String, Denied>, expected: DenialCode| match &result {
        Err(d) if d.code() == expected => None,
        other => Some(format!("{what}: {} (expected {expected})", code(other))),
    };
    // Not one target, no probe reading, no plan.
    failures.extend(check(
        "a glob",
        term(P::Direct, &gate, "a11-*", "x"),
        DenialCode::TargetNotSingle,
    ));
    failures.extend(check(
        "no instance",
        term(P::Direct, &gate, "a11-never", "x"),
        DenialCode::EvidenceUnavailable,
    ));
    put("a11-a", "running");
    failures.extend(check(
        "no plan",
        term(P::Direct, &gate, "a11-a", "no plan"),
        DenialCode::RollbackUnavailable,
    ));
    // Filed, then asked again while it waits.
    let token = file(P::Direct, &gate, "a11-a");
    failures.extend(check(
        "pending",
        term(P::ByName, &gate, "a11-a", "decommissioned"),
        DenialCode::ApprovalPending,
    ));
    // Mistyped: still pending.
    let _ = gate.approve_typed(&token, "ana", "A11-A");
    failures.extend(check(
        "mistyped",
        term(P::Direct, &gate, "a11-a", "decommissioned"),
        DenialCode::ApprovalPending,
    ));
    // Approved, then the state changes just before the body.
    gate.approve_typed(&token, "ana", "a11-a").unwrap();
    at_read("a11-a", reads("a11-a") + 2, || set("a11-a", "rebooting"));
    failures.extend(check(
        "changed at the commit point",
        term(P::Direct, &gate, "a11-a", "decommissioned"),
        DenialCode::EvidenceChanged,
    ));
    // A probe that panics just before the body.
    put("a11-p", "running");
    file_and_approve(P::Direct, &gate, "a11-p");
    at_read("a11-p", 3, || {
        panic!("the probe panics just before the body")
    });
    let panicked = term(P::Direct, &gate, "a11-p", "decommissioned");
    if panicked.is_ok() {
        failures.push("a probe that panicked before the body: the body ran".into());
    }
    // The one unit is still there for an approved call.
    put("a11-b", "running");
    file_and_approve(P::Direct, &gate, "a11-b");
    let ok = term(P::Direct, &gate, "a11-b", "decommissioned");
    if ok.is_err() {
        failures.push(format!(
            "the approved call after the refusals: {}",
            code(&ok)
        ));
    }
    // And it was the only one.
    put("a11-c", "running");
    let over = term(P::Direct, &gate, "a11-c", "decommissioned");
    match &over {
        Err(d) if d.code() == DenialCode::BudgetExhausted => {}
        other => failures.push(format!("a second call: {}", code(other))),
    }
    assert_eq!(ran("a11-a") + ran("a11-p"), 0);
    assert_no_failures("units taken by refused calls", &failures);
}

#[test]
fn a19_12_a_retry_over_budget_after_its_approval_runs_later_once_and_not_before() {
    let window = Duration::from_millis(600);
    for p in [P::Direct, P::ByNameAsync] {
        let tool = tool_of(p);
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .two_step_approvals()
            .budget(BudgetScope::tool(tool), 1, window)
            .build()
            .unwrap();
        let (a, b) = (format!("a12-a-{p:?}"), format!("a12-b-{p:?}"));
        put(&a, "running");
        put(&b, "running");
        let token_b = file(p, &gate, &b);
        let token_a = file(p, &gate, &a);
        gate.approve_typed(&token_a, "ana", &a).unwrap();
        gate.approve_typed(&token_b, "ana", &b).unwrap();
        term(p, &gate, &a, "decommissioned").unwrap();
        let over = term(p, &gate, &b, "decommissioned").unwrap_err();
        assert_eq!(over.code(), DenialCode::BudgetExhausted, "{p:?}: {over}");
        assert_eq!(
            ran(&b),
            0,
            "{p:?}: over budget, the approved call must not run"
        );
        // Once the window has slid, the approval (not spent by the refused retry) runs it once.
        std::thread::sleep(over.retry_after().unwrap_or(window) + Duration::from_millis(100));
        let later = term(p, &gate, &b, "decommissioned");
        assert!(
            later.is_ok(),
            "{p:?}: the approval was spent by a refused retry: {}",
            code(&later)
        );
        std::thread::sleep(window + Duration::from_millis(100));
        set(&b, "running");
        let again = term(p, &gate, &b, "decommissioned");
        assert!(again.is_err(), "{p:?}: one approval ran twice");
        assert_eq!(ran(&b), 1, "{p:?}");
    }
}

// ---------------------------------------------------------------------------------------------------
// 5. Lowering and the policy file while a decision waits.

#[test]
fn a19_13_a_gate_lowered_while_the_probe_reads_before_the_body_runs_nothing() {
    let mut failures = Vec::new();
    for p in ALL {
        let id = format!("a13-{p:?}");
        put(&id, "running");
        let gate = two_step();
        file_and_approve(p, &gate, &id);
        let (hold, ctl) = pause();
        at_read(&id, 3, move || hold.wait());
        let retry = {
            let (gate, id) = (gate.clone(), id.clone());
            std::thread::spawn(move || term(p, &gate, &id, "decommissioned"))
        };
        ctl.wait_arrived(&id);
        gate.lower(Mode::PartialAuto).unwrap();
        ctl.release();
        let result = retry.join().unwrap();
        if result.is_ok() || ran(&id) != 0 {
            failures.push(format!("{p:?}: {}", code(&result)));
        }
        // The probe lowers the gate itself.
        let id = format!("a13-self-{p:?}");
        put(&id, "running");
        let gate = two_step();
        file_and_approve(p, &gate, &id);
        {
            let gate = gate.clone();
            at_read(&id, 3, move || {
                gate.lower(Mode::Shadow).unwrap();
            });
        }
        let result = term(p, &gate, &id, "decommissioned");
        if result.is_ok() || ran(&id) != 0 {
            failures.push(format!("{p:?} (lowered by the probe): {}", code(&result)));
        }
    }
    assert_no_failures("lowered while the probe reads", &failures);
}

#[test]
fn a19_14_a_gate_lowered_while_the_store_answers_runs_nothing() {
    let mut failures = Vec::new();
    for p in ALL {
        let id = format!("a14-{p:?}");
        put(&id, "running");
        let store = Held::new();
        let gate = held_gate(&store);
        file_and_approve(p, &gate, &id);
        let (arrived, release) = store.arm();
        let retry = {
            let (gate, id) = (gate.clone(), id.clone());
            std::thread::spawn(move || term(p, &gate, &id, "decommissioned"))
        };
        arrived.recv_timeout(Duration::from_secs(30)).unwrap();
        gate.lower(Mode::PartialAuto).unwrap();
        let _ = release.send(());
        let result = retry.join().unwrap();
        if result.is_ok() || ran(&id) != 0 {
            failures.push(format!("{p:?}: {}", code(&result)));
        }
    }
    assert_no_failures("lowered while the store answers", &failures);
}

#[cfg(feature = "policy-file")]
mod policy {
    use super::*;
    use toolgate::policy_file::{LivePolicy, PolicyFile};

    fn file(text: &str) -> PolicyFile {
        PolicyFile::parse("atk19.toml", &format!("format = 1\n{text}")).unwrap()
    }

    const STRICTER: [(&str, &str); 3] = [
        ("deny", "[defaults]\ndeny = [\"atk19.terminate*\"]\n"),
        ("ceiling", "[defaults]\nceiling = \"PARTIAL_AUTO\"\n"),
        (
            "argument rule on the target",
            "[[defaults.arguments]]\ntool = \"atk19.terminate\"\nparameter = \"id\"\nrefuse = [\"a15-*\", \"a16-*\"]\n\n[[defaults.arguments]]\ntool = \"atk19.terminate_async\"\nparameter = \"id\"\nrefuse = [\"a15-*\", \"a16-*\"]\n",
        ),
    ];

    fn gate_following(live: &LivePolicy, store: Option<&Arc<Held>>) -> Gate {
        let builder = Gate::builder().mode(Mode::FullAuto).policy(live.clone());
        match store {
            Some(store) => builder.approval_store_shared(store.clone()),
            None => builder.two_step_approvals(),
        }
        .build()
        .unwrap()
    }

    #[test]
    fn a19_15_a_policy_replaced_while_the_probe_reads_before_the_body_runs_nothing() {
        let mut failures = Vec::new();
        for p in ALL {
            for (label, stricter) in STRICTER {
                let id = format!("a15-{p:?}-{}", label.replace(' ', "-"));
                put(&id, "running");
                let live = LivePolicy::new(file(""));
                let gate = gate_following(&live, None);
                file_and_approve(p, &gate, &id);
                let (hold, ctl) = pause();
                at_read(&id, 3, move || hold.wait());
                let retry = {
                    let (gate, id) = (gate.clone(), id.clone());
                    std::thread::spawn(move || term(p, &gate, &id, "decommissioned"))
                };
                ctl.wait_arrived(&id);
                let _ = live.replace(file(stricter), "ops on call");
                ctl.release();
                let result = retry.join().unwrap();
                if result.is_ok() || ran(&id) != 0 {
                    failures.push(format!("{p:?} {label}: {}", code(&result)));
                }
            }
        }
        assert_no_failures("policy replaced while the probe reads", &failures);
    }

    #[test]
    fn a19_16_a_policy_replaced_while_the_store_answers_runs_nothing() {
        let mut failures = Vec::new();
        for p in ALL {
            for (label, stricter) in STRICTER {
                let id = format!("a16-{p:?}-{}", label.replace(' ', "-"));
                put(&id, "running");
                let live = LivePolicy::new(file(""));
                let store = Held::new();
                let gate = gate_following(&live, Some(&store));
                file_and_approve(p, &gate, &id);
                let (arrived, release) = store.arm();
                let retry = {
                    let (gate, id) = (gate.clone(), id.clone());
                    std::thread::spawn(move || term(p, &gate, &id, "decommissioned"))
                };
                arrived.recv_timeout(Duration::from_secs(30)).unwrap();
                let _ = live.replace(file(stricter), "ops on call");
                let _ = release.send(());
                let result = retry.join().unwrap();
                if result.is_ok() || ran(&id) != 0 {
                    failures.push(format!("{p:?} {label}: {}", code(&result)));
                }
            }
        }
        assert_no_failures("policy replaced while the store answers", &failures);
    }
}

// ---------------------------------------------------------------------------------------------------
// 6. One principal's or agent's approval, another's call.

/// What a test adds to a gate's builder.
type Shape = fn(toolgate::GateBuilder) -> toolgate::GateBuilder;

#[test]
fn a19_17_an_approval_of_one_principal_or_agent_runs_no_other_s_call_through_a_shared_store() {
    let mut failures = Vec::new();
    let makers: [(&str, Shape, Shape); 3] = [
        (
            "principals",
            |b| b.principal("alice"),
            |b| b.principal("bob"),
        ),
        ("agents", |b| b.agent("bot-1"), |b| b.agent("bot-2")),
        ("a principal and none", |b| b.principal("alice"), |b| b),
    ];
    for (label, first, second) in makers {
        for p in ALL {
            let id = format!("a17-{}-{p:?}", label.replace(' ', "-"));
            put(&id, "running");
            let store = Arc::new(MemoryStore::new(Duration::from_secs(600)).unwrap());
            let base = || {
                Gate::builder()
                    .mode(Mode::FullAuto)
                    .approval_store_shared(store.clone())
            };
            let a = first(base()).build().unwrap();
            let b = second(base()).build().unwrap();
            let token = file(p, &a, &id);
            a.approve_typed(&token, "ana", &id).unwrap();
            let theirs = term(p, &b, &id, "decommissioned");
            match &theirs {
                Err(d)
                    if d.code() == DenialCode::ApprovalPending
                        && d.approval_token().is_some_and(|t| t != token) => {}
                other => failures.push(format!("{label} {p:?}: {}", code(other))),
            }
            if ran(&id) != 0 {
                failures.push(format!("{label} {p:?}: the other's call ran"));
                continue;
            }
            // The maker's own call runs, once.
            let own = term(p, &a, &id, "decommissioned");
            if own.is_err() {
                failures.push(format!("{label} {p:?}: the maker's call: {}", code(&own)));
            }
        }
    }
    assert_no_failures("approvals across makers", &failures);
}

// ---------------------------------------------------------------------------------------------------
// 7. The state approved.

#[test]
fn a19_18_an_approval_read_on_one_state_runs_nothing_on_another_even_when_given_late() {
    let mut failures = Vec::new();
    for p in ALL {
        let id = format!("a18-{p:?}");
        put(&id, "running");
        let gate = two_step();
        let token = file(p, &gate, &id);
        // The state changes; the agent asks again, which shows the new state.
        set(&id, "serving traffic");
        let again = term(p, &gate, &id, "decommissioned");
        if again.is_ok() {
            failures.push(format!("{p:?}: ran unapproved"));
        }
        // The operator answers the request they read (`running`), late.
        gate.approve_typed(&token, "ana", &id).unwrap();
        let retry = term(p, &gate, &id, "decommissioned");
        if retry.is_ok() || ran(&id) != 0 {
            failures.push(format!(
                "{p:?}: the approval of `running` ran on `serving traffic`: {}",
                code(&retry)
            ));
        }
    }
    assert_no_failures("late approvals of an old state", &failures);
}

#[test]
fn a19_19_a_probe_that_panics_at_any_read_never_runs_an_unapproved_body_and_every_enter_has_its_exit()
 {
    let mut failures = Vec::new();
    for p in [P::Direct, P::Async, P::ByNameAsync] {
        for read in 1..=4u32 {
            let id = format!("a19-{p:?}-{read}");
            put(&id, "running");
            let sink = Arc::new(MemorySink::new());
            let gate = Gate::builder()
                .mode(Mode::FullAuto)
                .two_step_approvals()
                .audit_shared(sink.clone())
                .build()
                .unwrap();
            if read > 1 {
                file_and_approve(p, &gate, &id);
            }
            at_read(&id, read, move || panic!("the probe panics at read {read}"));
            let result = term(p, &gate, &id, "decommissioned");
            match (read, &result) {
                (1, Err(d))
                    if d.code() == DenialCode::EvidenceUnavailable
                        && d.approval_token().is_none() => {}
                (2 | 3, Err(_)) => {}
                (4, Ok(_)) => {}
                (_, other) => failures.push(format!("{p:?} read {read}: {}", code(other))),
            }
            let expected_runs = usize::from(read == 4);
            if ran(&id) != expected_runs {
                failures.push(format!("{p:?} read {read}: {} bodies ran", ran(&id)));
            }
            let records = sink.records();
            let enters = records.iter().filter(|r| r.stage == Stage::Enter).count();
            let exits = records.iter().filter(|r| r.stage == Stage::Exit).count();
            if enters != exits {
                failures.push(format!("{p:?} read {read}: {enters} enter, {exits} exit"));
            }
            if read == 4 {
                let exit = records.iter().find(|r| r.stage == Stage::Exit);
                if !exit.is_some_and(|e| e.outcome == Some(Outcome::Ok) && e.message.is_some()) {
                    failures.push(format!(
                        "{p:?}: the probe's failure after the body is not in the exit: {exit:?}"
                    ));
                }
            }
        }
    }
    assert_no_failures("panicking probes", &failures);
}

#[test]
fn a19_20_a_probe_that_changes_the_world_itself_before_reading_is_caught() {
    let mut failures = Vec::new();
    for p in ALL {
        for read in [2u32, 3] {
            let id = format!("a20-{p:?}-{read}");
            put(&id, "running");
            let gate = two_step();
            file_and_approve(p, &gate, &id);
            let target = id.clone();
            at_read(&id, read, move || set(&target, "changed by the probe"));
            let result = term(p, &gate, &id, "decommissioned");
            if result.is_ok() || ran(&id) != 0 {
                failures.push(format!("{p:?} read {read}: {}", code(&result)));
            }
        }
    }
    assert_no_failures("probes changing the world", &failures);
}

#[test]
fn a19_21_a_probe_that_calls_a_gated_tool_lends_that_call_nothing_of_the_approved_one() {
    let mut failures = Vec::new();
    for p in ALL {
        for read in [2u32, 3] {
            let id = format!("a21-{p:?}-{read}");
            let other = format!("{id}-other");
            put(&id, "running");
            put(&other, "running");
            let gate = two_step();
            file_and_approve(p, &gate, &id);
            let nested: Arc<Mutex<Option<Result<String, Denied>>>> = Arc::default();
            {
                let (nested, gate, other) = (nested.clone(), gate.clone(), other.clone());
                at_read(&id, read, move || {
                    // The nested call, made while the approved call is decided, on another target
                    // with the same arguments otherwise: through the ambient gate, then by `&Gate`.
                    let direct = terminate(other.clone(), "decommissioned".into());
                    let through = gate.run(|| terminate(other.clone(), "decommissioned".into()));
                    *nested.lock().unwrap() = Some(direct.and(through));
                });
            }
            let result = {
                let (gate, id) = (gate.clone(), id.clone());
                on_thread(&id.clone(), move || term(p, &gate, &id, "decommissioned"))
            };
            let nested = nested.lock().unwrap().take();
            eprintln!(
                "a19_21 {p:?} read {read}: nested {:?}; approved call {}",
                nested.as_ref().map(code),
                code(&result)
            );
            if ran(&other) != 0 {
                failures.push(format!(
                    "{p:?} read {read}: the nested call ran: {nested:?}"
                ));
            }
            if !matches!(&nested, Some(Err(d)) if d.code() == DenialCode::ApprovalPending || d.code() == DenialCode::NoGate)
            {
                failures.push(format!("{p:?} read {read}: the nested call: {nested:?}"));
            }
            if result.is_err() || ran(&id) != 1 {
                // Not a hole: the approved call was refused after its probe made a call.
                eprintln!(
                    "a19_21 {p:?} read {read}: the approved call: {}",
                    code(&result)
                );
            }
        }
    }
    assert_no_failures("gated calls from a probe", &failures);
}

#[test]
fn a19_22_two_retries_racing_through_the_probe_run_one_approval_once() {
    for p in ALL {
        let id = format!("a22-{p:?}");
        put(&id, "running");
        let gate = two_step();
        file_and_approve(p, &gate, &id);
        // Both retries decide at once: reads 2 and 3 are theirs, each waiting for the other.
        let barrier = Arc::new(Barrier::new(2));
        for read in [2, 3] {
            let barrier = barrier.clone();
            at_read(&id, read, move || {
                barrier.wait();
            });
        }
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let (gate, id) = (gate.clone(), id.clone());
                std::thread::spawn(move || term(p, &gate, &id, "decommissioned"))
            })
            .collect();
        let results: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
        let ok = results.iter().filter(|r| r.is_ok()).count();
        assert!(ok <= 1, "{p:?}: {ok} calls ran on one approval");
        assert_eq!(ran(&id), ok, "{p:?}");
        assert_eq!(
            seen(&id).iter().filter(|s| *s != "running").count(),
            0,
            "{p:?}"
        );
    }
}

/// A sink that, on the first `enter` record it takes once the probe has read `id` three times (after
/// the read just before the body), has another actor change the instance.
struct Meddling(String);

impl AuditSink for Meddling {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if record.stage == Stage::Enter
            && record.tool.starts_with("atk19.terminate")
            && reads(&self.0) == 3
            && with(&self.0, |i| i.state == "running").unwrap_or(false)
        {
            set(&self.0, "stopped by another actor");
        }
        Ok(())
    }
}

#[test]
fn a19_23_nothing_the_gate_runs_after_the_read_before_the_body_lets_the_state_change_unseen() {
    let mut failures = Vec::new();
    // An argument's `Serialize` (the arguments are written again at the commit point): it changes the
    // target itself, or waits while another actor changes it.
    for variant in ["itself", "another thread"] {
        let id = format!("a23-serialize-{}", variant.replace(' ', "-"));
        put(&id, "running");
        let gate = two_step();
        let denied = gate
            .run(|| wipe(id.clone(), Tripwire(id.clone())))
            .unwrap_err();
        assert_eq!(denied.code(), DenialCode::ApprovalPending, "{denied}");
        gate.approve_typed(denied.approval_token().unwrap(), "ana", &id)
            .unwrap();
        let result = if variant == "itself" {
            let target = id.clone();
            at_write_after_read_3(&id, 1, move || set(&target, "stopped by another actor"));
            gate.run(|| wipe(id.clone(), Tripwire(id.clone())))
        } else {
            let (hold, ctl) = pause();
            at_write_after_read_3(&id, 1, move || hold.wait());
            let retry = {
                let (gate, id) = (gate.clone(), id.clone());
                std::thread::spawn(move || gate.run(|| wipe(id.clone(), Tripwire(id))))
            };
            let arrived = ctl.arrived.recv_timeout(Duration::from_secs(10)).is_ok();
            if arrived {
                set(&id, "stopped by another actor");
            }
            ctl.release();
            retry.join().unwrap()
        };
        let seen = seen(&id);
        if seen.iter().any(|s| s != "running") {
            failures.push(format!(
                "an argument's Serialize after the last read ({variant}): the body ran on {seen:?} ({})",
                code(&result)
            ));
        }
    }
    // A sink's `enter` write.
    for p in ALL {
        let id = format!("a23-sink-{p:?}");
        put(&id, "running");
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .two_step_approvals()
            .audit(Meddling(id.clone()))
            .build()
            .unwrap();
        file_and_approve(p, &gate, &id);
        let result = term(p, &gate, &id, "decommissioned");
        let seen = seen(&id);
        if seen.iter().any(|s| s != "running") {
            failures.push(format!(
                "{p:?}: a sink's write after the last read: the body ran on {seen:?} ({})",
                code(&result)
            ));
        }
    }
    assert_no_failures("state changed after the last read", &failures);
}

#[test]
fn a19_24_a_target_retargeted_behind_a_shared_handle_while_the_store_answers_runs_nothing() {
    put("a24-approved", "running");
    put("a24-other", "running");
    let store = Held::new();
    let gate = held_gate(&store);
    let host = Handle::new("a24-approved");
    let denied = gate.run(|| retarget(host.clone())).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalPending, "{denied}");
    gate.approve_typed(denied.approval_token().unwrap(), "ana", "a24-approved")
        .unwrap();
    let (arrived, release) = store.arm();
    let retry = {
        let (gate, host) = (gate.clone(), host.clone());
        std::thread::spawn(move || gate.run(|| retarget(host)))
    };
    arrived.recv_timeout(Duration::from_secs(30)).unwrap();
    // Both instances read alike: the probe alone cannot tell them apart.
    host.point_at("a24-other");
    let _ = release.send(());
    let result = retry.join().unwrap();
    assert_eq!(
        ran("a24-other"),
        0,
        "the approval of `a24-approved` ran on `a24-other`: {}",
        code(&result)
    );
    assert!(result.is_err());
}

// ---------------------------------------------------------------------------------------------------
// 8. Nested gates.

#[test]
fn a19_25_an_outer_gate_s_approver_answers_no_irreversible_call_approved_by_an_inner_store() {
    let mut failures = Vec::new();
    for p in ALL {
        let id = format!("a25-{p:?}");
        put(&id, "running");
        let outer = Gate::builder()
            .mode(Mode::FullAuto)
            .approver(AllowAllApprover)
            .build()
            .unwrap();
        let inner = two_step();
        file_and_approve(p, &inner, &id);
        let result = match p {
            P::Direct => outer.run(|| inner.run(|| terminate(id.clone(), "decommissioned".into()))),
            P::Async => rt().block_on(
                outer.scope(inner.scope(terminate_async(id.clone(), "decommissioned".into()))),
            ),
            // A call by name under an ambient outer gate, through the inner `&Gate`.
            P::ByName | P::ByNameAsync => outer.run(|| term(p, &inner, &id, "decommissioned")),
        };
        if result.is_ok() || ran(&id) != 0 {
            failures.push(format!("{p:?}: {}", code(&result)));
        }
    }
    assert_no_failures("an outer approver", &failures);
}

// ---------------------------------------------------------------------------------------------------
// 9. Rollback plans and the rollback of an `enter` record.

#[test]
fn a19_26_a_plan_naming_a_tool_that_cannot_run_refuses_the_call_before_anyone_is_asked() {
    let mut failures = Vec::new();
    for p in ALL {
        for note in [
            "plan missing tool",
            "plan not callable",
            "plan not object",
            "plan panics",
            "no plan",
        ] {
            let id = format!("a26-{p:?}-{}", note.replace(' ', "-"));
            put(&id, "running");
            let gate = two_step();
            let result = term(p, &gate, &id, note);
            match &result {
                Err(d)
                    if d.code() == DenialCode::RollbackUnavailable
                        && d.approval_token().is_none() => {}
                other => failures.push(format!("{p:?} {note}: {}", code(other))),
            }
        }
    }
    assert!(
        two_step().run(uncallable).is_ok(),
        "a LOW_WRITE call in FULL_AUTO"
    );
    assert_no_failures("plans that cannot run", &failures);
}

fn audited(sink: &Arc<MemorySink>, deny: &[&str]) -> Gate {
    let mut builder = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .audit_shared(sink.clone());
    for rule in deny {
        builder = builder.deny(*rule);
    }
    builder.build().unwrap()
}

/// Runs an approved termination of `id` with `note` and returns its `enter` record, as the trail
/// keeps it (written and read back as JSON).
fn terminated_enter(gate: &Gate, sink: &MemorySink, id: &str, note: &str) -> AuditRecord {
    put(id, "running");
    let denied = term(P::Direct, gate, id, note).unwrap_err();
    gate.approve_typed(denied.approval_token().unwrap(), "ana", id)
        .unwrap();
    sink.take();
    term(P::Direct, gate, id, note).unwrap();
    let enter = sink
        .take()
        .into_iter()
        .find(|r| r.stage == Stage::Enter && r.tool == "atk19.terminate")
        .expect("an enter record");
    serde_json::from_str(&serde_json::to_string(&enter).unwrap()).unwrap()
}

fn undo(gate: &Gate, enter: &AuditRecord) -> Result<Value, toolgate::CallError> {
    rt().block_on(registry().rollback(gate, enter))
}

#[test]
fn a19_27_a_plan_naming_a_denied_or_an_irreversible_tool_runs_only_as_the_gate_allows() {
    let sink = Arc::new(MemorySink::new());
    let gate = audited(&sink, &["atk19.forbidden"]);
    // A denied tool: recorded as the plan, refused when run.
    let before = FORBIDDEN.load(SeqCst);
    put("a27-denied", "running");
    let filed = term(P::Direct, &gate, "a27-denied", "plan denied").unwrap_err();
    if filed.code() == DenialCode::ApprovalPending {
        let enter = terminated_enter(&gate, &sink, "a27-denied", "plan denied");
        let refused = undo(&gate, &enter).unwrap_err();
        assert_eq!(refused.code(), "DENY_LISTED", "{refused}");
    } else {
        // Refusing the call whose plan the gate would refuse is stricter still.
        assert_eq!(filed.code(), DenialCode::RollbackUnavailable, "{filed}");
    }
    assert_eq!(FORBIDDEN.load(SeqCst), before, "the denied plan ran");
    // An irreversible tool: asked in two steps, its target typed back, like any call of it.
    let enter = terminated_enter(&gate, &sink, "a27-irr", "plan irreversible");
    put("a27-irr-twin", "running");
    let first = undo(&gate, &enter).unwrap_err();
    assert_eq!(first.code(), "APPROVAL_PENDING", "{first}");
    assert_eq!(ran("a27-irr-twin"), 0);
    let token = first.denied().unwrap().approval_token().unwrap().to_owned();
    assert_eq!(
        gate.approve(&token),
        Err(ApproveError::ConfirmationMismatch),
        "the rollback's irreversible call approved without its target typed"
    );
    let _ = undo(&gate, &enter).unwrap_err();
    assert_eq!(ran("a27-irr-twin"), 0);
    gate.approve_typed(&token, "ana", "a27-irr-twin").unwrap();
    undo(&gate, &enter).unwrap();
    assert_eq!(ran("a27-irr-twin"), 1);
    // Once.
    set("a27-irr-twin", "running");
    assert!(undo(&gate, &enter).is_err());
    assert_eq!(ran("a27-irr-twin"), 1);
}

#[test]
fn a19_28_a_forged_or_edited_enter_record_lends_its_plan_no_authority_beyond_a_call_by_name() {
    let sink = Arc::new(MemorySink::new());
    let gate = audited(&sink, &["atk19.forbidden"]);
    let real = terminated_enter(&gate, &sink, "a28-real", "decommissioned");
    put("a28-victim", "running");
    let plans = [
        (
            "another irreversible target",
            "atk19.terminate",
            json!({"id": "a28-victim", "note": "x"}),
        ),
        (
            "the same tool, async",
            "atk19.terminate_async",
            json!({"id": "a28-victim", "note": "x"}),
        ),
        (
            "a denied tool",
            "atk19.forbidden",
            json!({"id": "a28-victim"}),
        ),
        ("a tool that does not exist", "atk19.nope", json!({})),
        (
            "another case",
            "ATK19.relaunch",
            json!({"id": "a28-victim"}),
        ),
        ("a tool not callable", "atk19.uncallable", json!({})),
        (
            "a number target as a string",
            "atk19.terminate_n",
            json!({"n": "7"}),
        ),
    ];
    let mut failures = Vec::new();
    let forbidden = FORBIDDEN.load(SeqCst);
    for (label, tool, arguments) in plans {
        let mut forged = real.clone();
        forged.rollback = Some(Rollback::call(tool, arguments.clone()).to_json());
        let via_rollback = undo(&gate, &forged);
        // The same call, by name, on a gate like it.
        let twin = audited(&Arc::new(MemorySink::new()), &["atk19.forbidden"]);
        let by_name = rt().block_on(registry().call(&twin, tool, arguments.clone()));
        let (a, b) = (
            via_rollback.as_ref().map_err(|e| e.code()).map(|_| "OK"),
            by_name.as_ref().map_err(|e| e.code()).map(|_| "OK"),
        );
        if a != b || a.is_ok() {
            failures.push(format!("{label}: rollback {a:?}, by name {b:?}"));
        }
    }
    // An edited record of another tool's call, with a plan added, or not an `enter`.
    let mut not_enter = real.clone();
    not_enter.stage = Stage::Exit;
    if undo(&gate, &not_enter).is_ok() {
        failures.push("an exit record's plan ran".into());
    }
    if ran("a28-victim") != 0 || FORBIDDEN.load(SeqCst) != forbidden {
        failures.push("a forged plan ran a body".into());
    }
    assert_no_failures("forged plans", &failures);
}

#[test]
fn a19_29_running_a_rollback_twice_is_decided_and_recorded_each_time() {
    let sink = Arc::new(MemorySink::new());
    let gate = audited(&sink, &[]);
    let enter = terminated_enter(&gate, &sink, "a29", "decommissioned");
    let origin = enter.reference();
    undo(&gate, &enter).unwrap();
    let first = sink.take();
    // Nothing makes a plan single-use: the second run is a call of its own, decided again...
    let shadow = Gate::builder()
        .mode(Mode::Shadow)
        .audit_shared(sink.clone())
        .build()
        .unwrap();
    let refused = undo(&shadow, &enter).unwrap_err();
    assert_eq!(refused.code(), "MODE_NOT_ALLOWED");
    let second = undo(&gate, &enter);
    let records = sink.take();
    // ...and every record of every run names the call it undoes.
    for r in first.iter().chain(records.iter()) {
        assert_eq!(r.rollback_of.as_deref(), Some(origin.as_str()), "{r:#?}");
    }
    eprintln!(
        "a19_29: a second rollback of the same record: {:?}; launched {} times",
        second.as_ref().map(|_| "ran"),
        launched("a29")
    );
}

#[test]
fn a19_30_a_rollback_that_panics_or_is_dropped_leaves_no_rollback_of_on_later_calls() {
    let sink = Arc::new(MemorySink::new());
    let gate = audited(&sink, &[]);
    let real = terminated_enter(&gate, &sink, "a30", "decommissioned");
    put("a30-after", "running");
    let mut failures = Vec::new();
    // A plan whose tool panics, run where it is polled on this thread.
    let mut panics = real.clone();
    panics.rollback = Some(Rollback::call("atk19.relaunch_panics", json!({"id": "a30"})).to_json());
    let runtime = rt();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(registry().rollback(&gate, &panics))
    }));
    let _ = outcome;
    sink.take();
    gate.run(|| relaunch("a30-after".into())).unwrap();
    runtime
        .block_on(registry().call(&gate, "atk19.relaunch", json!({"id": "a30-after"})))
        .unwrap();
    let leaked: Vec<_> = sink
        .take()
        .into_iter()
        .filter(|r| r.rollback_of.is_some())
        .collect();
    if !leaked.is_empty() {
        failures.push(format!("after a panicking rollback: {leaked:#?}"));
    }
    // A plan whose async tool waits, the rollback dropped after its first poll.
    let mut slow = real.clone();
    slow.rollback = Some(Rollback::call("atk19.relaunch_slow", json!({"id": "a30"})).to_json());
    runtime.block_on(async {
        let undoing = registry().rollback(&gate, &slow);
        let _ = tokio::time::timeout(Duration::from_millis(20), undoing).await;
        sink.take();
        gate.scope(async { relaunch("a30-after".into()) })
            .await
            .unwrap();
        registry()
            .call(&gate, "atk19.relaunch", json!({"id": "a30-after"}))
            .await
            .unwrap();
    });
    gate.run(|| relaunch("a30-after".into())).unwrap();
    let leaked: Vec<_> = sink
        .take()
        .into_iter()
        .filter(|r| r.rollback_of.is_some())
        .collect();
    if !leaked.is_empty() {
        failures.push(format!("after a dropped rollback: {leaked:#?}"));
    }
    // A rollback future polled on one thread, its later calls on another.
    let mut ok = real.clone();
    ok.rollback = Some(Rollback::call("atk19.relaunch", json!({"id": "a30"})).to_json());
    let undoing = registry().rollback(&gate, &ok);
    sink.take();
    gate.run(|| relaunch("a30-after".into())).unwrap();
    let leaked: Vec<_> = sink
        .take()
        .into_iter()
        .filter(|r| r.rollback_of.is_some())
        .collect();
    if !leaked.is_empty() {
        failures.push(format!(
            "while a rollback future is made but not polled: {leaked:#?}"
        ));
    }
    runtime.block_on(undoing).unwrap();
    assert_no_failures("rollback_of leaking", &failures);
}

// ---------------------------------------------------------------------------------------------------
// 10. Over MCP, in band.

#[cfg(feature = "mcp-http")]
mod over_mcp {
    use super::*;
    use crate::fixtures::mcp_in_band::{
        Client, answered_with, call, code_of, connect, gate, in_band, state_of,
    };
    use crate::fixtures::shared_stores::Memory;
    use toolgate::mcp::APPROVAL_INPUT;
    use toolgate::mcp::rmcp::model::CallToolResponse;

    fn form(response: &CallToolResponse) -> Value {
        match response {
            CallToolResponse::InputRequired(input) => serde_json::to_value(&input.input_requests)
                .unwrap()[APPROVAL_INPUT]["params"]
                .clone(),
            other => panic!("not InputRequired: {other:?}"),
        }
    }

    async fn first_state(client: &Client, tool: &str, args: &Value) -> String {
        state_of(&call(client, tool, args.clone(), None, None).await)
    }

    /// An in-band server never asks the client to approve an irreversible call: whoever drives the
    /// client (the agent, possibly) would authorize what cannot be undone. No form is sent, and no
    /// state answers one: not another call's, not a forged one, whatever confirmation it carries.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a19_31_an_in_band_server_sends_no_form_for_an_irreversible_call_and_no_state_answers_one()
     {
        let (a, b) = ("a31-a", "a31-b");
        put(a, "running");
        put(b, "running");
        let server_gate = gate(Arc::new(Memory::default()));
        let tokens: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let server = {
            let tokens = tokens.clone();
            in_band(server_gate.clone())
                .on_pending(move |p| tokens.lock().unwrap().push(p.token.clone()))
        };
        let client = connect(server).await;
        let args_a = json!({"id": a, "note": "x"});
        let mut failures = Vec::new();
        for (tool, args) in [
            ("atk19.terminate", args_a.clone()),
            ("atk19.terminate_async", args_a.clone()),
            ("atk19.terminate_n", json!({"n": 31})),
        ] {
            let said = call(&client, tool, args, None, None).await;
            if matches!(said, CallToolResponse::InputRequired(_)) {
                failures.push(format!("{tool}: a form was sent: {said:?}"));
            } else if code_of(&said) != "APPROVAL_PENDING" {
                failures.push(format!("{tool}: {}", code_of(&said)));
            }
        }
        // A valid state of another call's form (B, a tool that may be approved in band), and states
        // that are not this server's, sent with A and its target typed back in every shape.
        let stop_b = json!({"id": b, "note": "x"});
        let foreign = first_state(&client, "atk19.stop", &stop_b).await;
        for state in [foreign.as_str(), "toolgate.forged", "toolgate."] {
            for confirmation in [json!(a), json!(7), json!([a]), json!(null)] {
                let content = json!({"decision": "approve", "confirmation": confirmation});
                let code = answered_with(&client, "atk19.terminate", &args_a, state, content).await;
                if code == "OK" {
                    failures.push(format!("a state {state:.20} with {confirmation}: OK"));
                }
            }
        }
        if ran(a) + ran(b) != 0 {
            failures.push(format!("bodies ran: a {}, b {}", ran(a), ran(b)));
        }
        assert_no_failures("in-band answers of irreversible calls", &failures);
        // The operator, out of band, with the target typed back: the call runs once.
        let token = tokens.lock().unwrap()[0].clone();
        server_gate.approve_typed(&token, "ops", a).unwrap();
        let said = call(&client, "atk19.terminate", args_a.clone(), None, None).await;
        assert_eq!(code_of(&said), "OK");
        assert_eq!(ran(a), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a19_32_a_form_answered_after_the_target_changed_or_on_another_connection_runs_nothing()
    {
        let id = "a32";
        put(id, "running");
        let server_gate = gate(Arc::new(Memory::default()));
        let client = connect(in_band(server_gate.clone())).await;
        let args = json!({"id": id, "note": "x"});
        let state = first_state(&client, "atk19.stop", &args).await;
        set(id, "serving traffic");
        let code = answered_with(&client, "atk19.stop", &args, &state, approve()).await;
        assert_ne!(
            code, "OK",
            "a form read on `running` ran on `serving traffic`"
        );
        assert_eq!(ran(id), 0);
        // A form of one connection answered on another, to the same server and gate.
        let id = "a32-b";
        put(id, "running");
        let args = json!({"id": id, "note": "x"});
        let state = first_state(&client, "atk19.stop", &args).await;
        let other = connect(in_band(server_gate)).await;
        let code = answered_with(&other, "atk19.stop", &args, &state, approve()).await;
        assert_ne!(code, "OK", "a form of another connection ran");
        assert_eq!(ran(id), 0);
        // Answered on its own connection, it runs once; replayed, never again.
        let state = first_state(&client, "atk19.stop", &args).await;
        let code = answered_with(&client, "atk19.stop", &args, &state, approve()).await;
        assert_eq!(code, "OK");
        set(id, "running");
        let replayed = answered_with(&client, "atk19.stop", &args, &state, approve()).await;
        assert_ne!(replayed, "OK");
        assert_eq!(ran(id), 1);
    }

    fn approve() -> Value {
        json!({"decision": "approve"})
    }

    /// The form's answer was refused EVIDENCE_CHANGED (the operator is told the approval was for
    /// another world); when the target reads as it did, a plain call, with no form answered, runs
    /// nothing either.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a19_39_a_form_answer_refused_for_a_changed_target_does_not_come_back_to_life() {
        let id = "a39";
        put(id, "running");
        let client = connect(in_band(gate(Arc::new(Memory::default())))).await;
        let args = json!({"id": id, "note": "x"});
        let state = first_state(&client, "atk19.stop", &args).await;
        set(id, "serving traffic");
        let code = answered_with(&client, "atk19.stop", &args, &state, approve()).await;
        assert_ne!(code, "OK");
        // Later the instance reads `running` again (restarted, or another machine under its id).
        set(id, "running");
        let later = call(&client, "atk19.stop", args.clone(), None, None).await;
        assert!(
            matches!(later, CallToolResponse::InputRequired(_)),
            "an answer refused EVIDENCE_CHANGED ran a later call no one was asked about ({code}): \
             {later:?}"
        );
        assert_eq!(ran(id), 0);
    }

    /// The characters no text shown to a person may carry raw: controls but the line break,
    /// bidirectional controls, zero-width and other default-ignorable characters, tags.
    fn hidden(text: &str) -> Vec<String> {
        text.chars()
            .filter(|&c| {
                (c.is_control() && c != '\n')
                    || matches!(c,
                        '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{115f}' | '\u{1160}' | '\u{17b4}'
                        | '\u{17b5}' | '\u{180b}'..='\u{180f}' | '\u{200b}'..='\u{200f}'
                        | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{3164}'
                        | '\u{fe00}'..='\u{fe0f}' | '\u{feff}' | '\u{ffa0}' | '\u{fff0}'..='\u{fff8}'
                        | '\u{e0000}'..='\u{e0fff}')
            })
            .map(|c| format!("U+{:04X}", c as u32))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a19_34_the_form_shows_agent_controlled_evidence_and_plans_with_nothing_hidden() {
        let client = connect(in_band(gate(Arc::new(Memory::default())))).await;
        let mut failures = Vec::new();
        let cases = [
            // The probe echoes text another actor (or the agent) wrote into the target's state.
            (
                "evidence",
                "a34-e",
                "running\u{202e}gninnur\u{2066}\u{200b}",
                "x".to_owned(),
            ),
            // A plan of steps made from the agent's arguments.
            (
                "steps",
                "a34-s",
                "running",
                "steps:call the \u{202e}rodnev\u{202c} \u{200b}now\u{e0041}".to_owned(),
            ),
            // A plan that is a call, its arguments from the agent's.
            (
                "plan arguments",
                "a34-p",
                "running",
                "args:\u{2067}keep\u{2069} \u{feff}all\u{ad}".to_owned(),
            ),
            // A line break in the evidence that starts a line of its own.
            (
                "line break",
                "a34-n",
                "running\nTHIS CAN BE UNDONE. To approve, type: x",
                "x".to_owned(),
            ),
        ];
        for (label, id, state, note) in cases {
            put(id, state);
            let response = call(
                &client,
                "atk19.stop",
                json!({"id": id, "note": note}),
                None,
                None,
            )
            .await;
            let params = form(&response);
            let message = params["message"].as_str().unwrap_or_default().to_owned();
            let raw = hidden(&message);
            if !raw.is_empty() {
                failures.push(format!("{label}: the form carries {raw:?}: {message:?}"));
            }
            if label == "line break" && message.lines().any(|l| l.starts_with("THIS CAN BE UNDONE"))
            {
                failures.push(format!(
                    "{label}: a line of the evidence passes for the form's own: {message:?}"
                ));
            }
        }
        assert_no_failures("the form's text", &failures);
    }
}

#[test]
fn a19_35_what_the_refusal_says_of_agent_controlled_evidence_and_plans_hides_nothing() {
    // The refusal's message: the agent reads it, and a host may show it to its user.
    let mut failures = Vec::new();
    for (label, id, state, note) in hiding_cases("a35") {
        put(&id, state);
        let gate = two_step();
        let denied = term(P::Direct, &gate, &id, &note).unwrap_err();
        let message = denied.to_string();
        if !bidi_or_zero_width(&message).is_empty() {
            failures.push(format!(
                "{label}: the refusal's message carries {:?}: {message:?}",
                bidi_or_zero_width(&message)
            ));
        }
    }
    assert_no_failures("refusal text", &failures);
}

/// Evidence, plan steps and plan arguments carrying bidi and zero-width characters.
fn hiding_cases(prefix: &str) -> [(&'static str, String, &'static str, String); 3] {
    [
        (
            "evidence",
            format!("{prefix}-e"),
            "running\u{202e}gninnur",
            "x".to_owned(),
        ),
        (
            "steps",
            format!("{prefix}-s"),
            "running",
            "steps:call the \u{202e}rodnev\u{200b}".to_owned(),
        ),
        (
            "plan arguments",
            format!("{prefix}-p"),
            "running",
            "args:\u{2067}keep\u{2069}\u{feff}".to_owned(),
        ),
    ]
}

fn bidi_or_zero_width(text: &str) -> Vec<String> {
    text.chars()
        .filter(|&c| {
            matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
        })
        .map(|c| format!("U+{:04X}", c as u32))
        .collect()
}

#[test]
fn a19_36_an_approval_refused_for_a_changed_target_does_not_come_back_to_life() {
    let mut failures = Vec::new();
    for p in ALL {
        let id = format!("a36-{p:?}");
        put(&id, "running");
        let gate = two_step();
        file_and_approve(p, &gate, &id);
        set(&id, "serving traffic");
        let changed = term(p, &gate, &id, "decommissioned");
        match &changed {
            Err(d) if d.code() == DenialCode::EvidenceChanged => {}
            other => failures.push(format!(
                "{p:?}: the retry on a changed target: {}",
                code(other)
            )),
        }
        // Later the instance reads `running` again (restarted, or another machine under its id): the
        // agent's call runs on the approval it was told was for another world.
        set(&id, "running");
        let later = term(p, &gate, &id, "decommissioned");
        if later.is_ok() || ran(&id) != 0 {
            failures.push(format!(
                "{p:?}: a later call ran on the refused approval: {}",
                code(&later)
            ));
        }
    }
    assert_no_failures("approvals refused EVIDENCE_CHANGED", &failures);
}

#[test]
fn a19_37_a_plan_as_its_display_writes_it_hides_nothing_the_agent_wrote() {
    // `Rollback`'s `Display` ("by hand: ...", "call `tool` with {...}") is the plan as a person reads
    // it: `Denied::rollback`, `ApprovalRequest::rollback` and `PendingApproval::rollback` hand it to the
    // operator channels an application writes.
    let mut failures = Vec::new();
    for (label, id, state, note) in hiding_cases("a37") {
        put(&id, state);
        let gate = two_step();
        let denied = term(P::Direct, &gate, &id, &note).unwrap_err();
        if let Some(plan) = denied.rollback() {
            let shown = plan.to_string();
            if !bidi_or_zero_width(&shown).is_empty() {
                failures.push(format!(
                    "{label}: the plan's Display carries {:?}: {shown:?}",
                    bidi_or_zero_width(&shown)
                ));
            }
        }
    }
    assert_no_failures("the plan's text", &failures);
}

#[test]
fn a19_38_wildcards_and_lists_that_unicode_normalization_turns_into_ascii_ones_are_not_one_target()
{
    // NFKC (what many back ends apply to names) maps each of these onto a target the gate refuses.
    let targets = [
        "\u{ff21}\u{ff2c}\u{ff2c}", // fullwidth ALL
        "\u{ff0a}",                 // fullwidth asterisk
        "\u{fe61}",                 // small asterisk
        "a38-\u{ff0a}",
        "\u{ff0e}",               // fullwidth full stop
        "a38-\u{ff1f}",           // fullwidth question mark
        "a38-\u{ff05}",           // fullwidth percent
        "a38-\u{ff3b}12\u{ff3d}", // fullwidth brackets
    ];
    assert_no_failures("normalized wildcards", &not_single("a19_38", &targets));
}

// ---------------------------------------------------------------------------------------------------
// 11. Irreversible calls made from inside other calls, and under an async approver.

static ASKED: AtomicUsize = AtomicUsize::new(0);

/// Clean up an instance: a LOW_WRITE tool whose body terminates it.
#[tool(risk = "LOW_WRITE", domain = "atk19")]
pub(crate) fn cleanup(id: String) -> Result<String, Denied> {
    terminate(id, "cleanup".into())
}

/// Retire an instance: a HIGH_WRITE tool (not irreversible) whose body terminates it.
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atk19")]
pub(crate) async fn retire(id: String) -> Result<String, Denied> {
    terminate_async(id, "retire".into()).await
}

struct Counting;

impl toolgate::approval::AsyncApprover for Counting {
    fn approve<'a>(
        &'a self,
        _: &'a toolgate::ApprovalRequest<'a>,
    ) -> toolgate::approval::ApprovalFuture<'a> {
        ASKED.fetch_add(1, SeqCst);
        Box::pin(async { toolgate::Approval::Approve })
    }
}

#[test]
fn a19_40_an_irreversible_call_inside_an_allowed_or_approved_call_is_asked_for_itself() {
    let mut failures = Vec::new();
    // Inside a LOW_WRITE body that FULL_AUTO runs unasked.
    put("a40-low", "running");
    let gate = two_step();
    let inner = gate.run(|| cleanup("a40-low".into()));
    match &inner {
        Err(d) if d.code() == DenialCode::ApprovalPending => {}
        other => failures.push(format!("inside a LOW_WRITE body: {}", code(other))),
    }
    // Inside a HIGH_WRITE body an approver approved (the approver approves everything it is asked).
    put("a40-high", "running");
    let asked_before = ASKED.load(SeqCst);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .build()
        .unwrap();
    let inner = rt().block_on(gate.scope(retire("a40-high".into())));
    if inner.is_ok() {
        failures.push("inside an approved HIGH_WRITE body: the irreversible call ran".into());
    }
    // Under an async approver that approves everything, with and without a store.
    for with_store in [false, true] {
        for p in ALL {
            let id = format!("a40-async-{with_store}-{p:?}");
            put(&id, "running");
            let builder = Gate::builder()
                .mode(Mode::FullAuto)
                .async_approver(Counting);
            let gate = if with_store {
                builder.two_step_approvals()
            } else {
                builder
            }
            .build()
            .unwrap();
            let first = term(p, &gate, &id, "decommissioned");
            if first.is_ok() {
                failures.push(format!(
                    "async approver, store {with_store}, {p:?}: ran unasked"
                ));
            }
            if with_store
                && let Err(d) = &first
                && let Some(token) = d.approval_token()
            {
                gate.approve_typed(token, "ana", &id).unwrap();
                if term(p, &gate, &id, "decommissioned").is_err() {
                    eprintln!("a19_40: {p:?} typed approval under an async approver did not run");
                }
            }
        }
    }
    if ASKED.load(SeqCst) != asked_before {
        failures.push(format!(
            "the async approver was asked {} times about irreversible calls",
            ASKED.load(SeqCst) - asked_before
        ));
    }
    assert_eq!(ran("a40-low") + ran("a40-high"), 0);
    assert_no_failures("nested and async-approved", &failures);
}

#[test]
fn a19_41_a_gate_lowered_or_tainted_by_an_argument_s_serialize_after_the_read_before_the_body_runs_nothing()
 {
    // Guarantee 4 (and 14) where 19 meets them: the arguments are written after the probe's read just
    // before the body; whatever the n-th of those writes does, the gate's re-check must come later.
    let mut failures = Vec::new();
    for what in ["lower", "taint"] {
        for n in 1..=3u32 {
            let id = format!("a41-{what}-{n}");
            put(&id, "running");
            let gate = two_step();
            let denied = gate
                .run(|| wipe(id.clone(), Tripwire(id.clone())))
                .unwrap_err();
            assert_eq!(denied.code(), DenialCode::ApprovalPending, "{denied}");
            gate.approve_typed(denied.approval_token().unwrap(), "ana", &id)
                .unwrap();
            let fired = Arc::new(AtomicUsize::new(0));
            {
                let (gate, fired) = (gate.clone(), fired.clone());
                at_write_after_read_3(&id, n, move || {
                    match what {
                        "lower" => gate.lower(Mode::Shadow).unwrap(),
                        _ => {
                            gate.run(|| fetch("https://example.com/evil".into()))
                                .unwrap();
                        }
                    }
                    fired.fetch_add(1, SeqCst);
                });
            }
            let result = {
                let (gate, id) = (gate.clone(), id.clone());
                on_thread(&id.clone(), move || {
                    gate.run(|| wipe(id.clone(), Tripwire(id)))
                })
            };
            let fired = fired.load(SeqCst) == 1;
            eprintln!(
                "a19_41 {what} at write {n} after read 3 (of {}): fired {fired}, {}",
                writes_after_read_3(&id),
                code(&result)
            );
            if fired && (result.is_ok() || ran(&id) != 0) {
                failures.push(format!(
                    "{what} at write {n} after the last read: {}",
                    code(&result)
                ));
            }
        }
    }
    assert_no_failures("changed by an argument's Serialize", &failures);
}
