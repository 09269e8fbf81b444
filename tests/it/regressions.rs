//! Regression tests for holes found by review, each written as an outside attacker would write it: safe
//! Rust and the public API only.
//!
//! Each test reproduces one hole and asserts the behaviour the gate promises (README.md, SECURITY.md).
//! Tool bodies count their runs in static counters, so that a test can tell a refused call from one that
//! ran; the tests of this binary share those counters, and take [`serial`] first. Records are compared
//! through their JSON where that reads as the log does.
//!
//! The last part tests the sibling forms of each hole: the other declaration forms that reach the same
//! guarantee (nested, trait impls, generic, async, a `&Gate` parameter) and the other points where user
//! code runs between a decision and the body (an `escalate` function, an approver, `Serialize`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::common::{Scratch, serial};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolgate::audit::{AuditError, AuditRecord, AuditSink, JsonlSink, MemorySink, Stage};
use toolgate::serde::{Serialize, Serializer};
use toolgate::{
    AllowAllApprover, Approval, ApprovalRequest, Denied, Gate, Mode, registry, tool, toolset,
};

// ---------------------------------------------------------------------------------------------------------
// Test support
// ---------------------------------------------------------------------------------------------------------

fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The refusal code of a call that must have been refused.
fn refusal_code<T: std::fmt::Debug>(result: Result<T, Denied>) -> &'static str {
    result
        .expect_err("the call must be refused, and its body must not run")
        .code()
        .as_str()
}

/// Asserts that a call was refused because the mode does not allow it (`MODE_NOT_ALLOWED` or
/// `ABOVE_CEILING`).
fn assert_refused_by_the_mode<T: std::fmt::Debug>(result: Result<T, Denied>) {
    let code = refusal_code(result);
    assert!(
        matches!(code, "MODE_NOT_ALLOWED" | "ABOVE_CEILING"),
        "refused with {code}, not a mode code"
    );
}

fn to_json(record: &AuditRecord) -> Value {
    serde_json::to_value(record).unwrap()
}

/// Every `enter` record among `records` for `tool` has an `exit` record with the same call number;
/// returns those exits' JSON, one per enter.
fn exits_of_every_enter(records: &[AuditRecord], tool: &str) -> Vec<Value> {
    records
        .iter()
        .filter(|r| r.stage == Stage::Enter && r.tool == tool)
        .map(|enter| {
            let exit = records
                .iter()
                .find(|r| r.stage == Stage::Exit && r.call == enter.call && r.gate == enter.gate);
            match exit {
                Some(exit) => to_json(exit),
                None => panic!(
                    "the `enter` record of call {} has no `exit` record: {:#?}",
                    enter.call,
                    records.iter().map(to_json).collect::<Vec<_>>()
                ),
            }
        })
        .collect()
}

/// A sink whose disk is gone: it refuses every record.
struct Broken;

impl AuditSink for Broken {
    fn record(&self, _: &AuditRecord) -> Result<(), AuditError> {
        Err(AuditError::new("the inner audit disk is gone"))
    }
}

// ---------------------------------------------------------------------------------------------------------
// 1. A callable associated function named like a function in scope
// ---------------------------------------------------------------------------------------------------------

mod files {
    use std::fs::remove_file;

    use toolgate::toolset;

    pub struct Files;

    #[toolset(domain = "files")]
    impl Files {
        /// Removes a file.
        #[tool(risk = "HIGH_WRITE", callable)]
        pub fn remove_file(path: String) -> std::io::Result<()> {
            remove_file(path)
        }
    }
}

// Finding: the call-by-name adapter of a `callable` associated function calls the function by its bare
// name; in an impl block that name resolves to whatever the module has in scope (here
// `std::fs::remove_file`), not to the gated function, so a call by name runs with no decision at all.
#[test]
fn a_callable_associated_function_called_by_name_is_decided_by_the_gate() {
    let _serial = serial();
    let _ = files::Files;
    let scratch = Scratch::new("remove-file");
    let victim = scratch.path("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    let arguments = json!({ "path": victim.to_str().unwrap() });

    // Called directly, the function is gated: outside any gate it is refused and removes nothing.
    let direct = files::Files::remove_file(victim.to_str().unwrap().to_owned()).unwrap_err();
    let direct = direct.into_inner().unwrap().downcast::<Denied>().unwrap();
    assert_eq!(direct.code().as_str(), "NO_GATE");
    assert!(victim.exists());

    let shadow = Gate::new(Mode::Shadow).unwrap();
    let refused = registry()
        .call(&shadow, "files.remove_file", arguments.clone())
        .now()
        .expect("a sync tool's call completes at once");
    let still_there = victim.exists();
    assert_eq!(
        refused.as_ref().map_err(toolgate::CallError::code),
        Err("MODE_NOT_ALLOWED"),
        "HIGH_WRITE is allowed in FULL_AUTO only: SHADOW must refuse the call by name"
    );
    assert!(still_there, "a refused call must not delete the file");

    // The same call runs through a gate that allows it, and is audited as a call of the tool.
    let sink = MemorySink::new();
    let full = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .audit(sink.clone())
        .build()
        .unwrap();
    let ran = registry()
        .call(&full, "files.remove_file", arguments)
        .now()
        .expect("a sync tool's call completes at once");
    assert_eq!(ran.map_err(|e| e.code()), Ok(Value::Null));
    assert!(!victim.exists(), "the allowed call removes the file");
    let stages: Vec<(Stage, String)> = sink
        .records()
        .iter()
        .map(|r| (r.stage, r.tool.to_string()))
        .collect();
    assert_eq!(
        stages,
        [
            (Stage::Enter, "files.remove_file".to_owned()),
            (Stage::Exit, "files.remove_file".to_owned()),
        ]
    );
}

// ---------------------------------------------------------------------------------------------------------
// 2. The digest of a redacted argument in the audit log
// ---------------------------------------------------------------------------------------------------------

static UNLOCKS: AtomicUsize = AtomicUsize::new(0);

/// Unlocks a door with its PIN.
#[tool(risk = "HIGH_WRITE", id = "regress.unlock", redact = [pin], callable)]
fn unlock(door: String, pin: String) -> Result<(), Denied> {
    let _ = (door, pin);
    UNLOCKS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Writes every record to a JSONL log and to memory.
struct Tee(JsonlSink, MemorySink);

impl AuditSink for Tee {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        self.0.record(record)?;
        self.1.record(record)
    }

    fn flush(&self) -> Result<(), AuditError> {
        self.0.flush()
    }
}

// Finding: `Gate::approve` writes the approval's binding digest, the sha256 of the arguments with the
// redacted ones' real values, into the `approval_granted` record; for a short secret (a 4-digit PIN) that
// digest gives the secret away to anyone who can read the log.
#[test]
fn the_audit_log_holds_no_digest_of_a_redacted_argument() {
    let _serial = serial();
    let scratch = Scratch::new("redacted-digest");
    let log = scratch.path("audit.jsonl");
    let memory = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .audit(Tee(JsonlSink::open(&log).unwrap(), memory.clone()))
        .build()
        .unwrap();
    let before = count(&UNLOCKS);
    let first = gate
        .run(|| unlock("front".into(), "4711".into()))
        .unwrap_err();
    assert_eq!(first.code().as_str(), "APPROVAL_PENDING");
    let token = first.approval_token().unwrap().to_owned();
    gate.approve(&token).unwrap();
    gate.run(|| unlock("front".into(), "4711".into())).unwrap();
    assert_eq!(count(&UNLOCKS), before + 1);

    let text = std::fs::read_to_string(&log).unwrap();
    let records: Vec<String> = memory
        .records()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    // The digests below are computed as the gate computes them: the redacted form is in the log.
    let redacted = sha256_hex(br#"{"door":"front","pin":"[REDACTED]"}"#);
    assert!(
        text.contains(&redacted),
        "the log holds the digest of the redacted arguments:\n{text}"
    );
    for pin in 0..=9999 {
        let pin = format!("{pin:04}");
        let digest = sha256_hex(format!(r#"{{"door":"front","pin":"{pin}"}}"#).as_bytes());
        assert!(
            !text.contains(&digest),
            "the audit log holds the sha256 of the arguments with pin {pin}: the PIN can be read \
             back from it\n{text}"
        );
        for record in &records {
            assert!(
                !record.contains(&digest),
                "an audit record holds the sha256 of the arguments with pin {pin}: {record}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// 3. The kill switch pulled while a two-step call's arguments are written
// ---------------------------------------------------------------------------------------------------------

static TRAP_ARMED: AtomicBool = AtomicBool::new(false);
static TRAP_GATE: OnceLock<Gate> = OnceLock::new();
static SPRUNG: AtomicUsize = AtomicUsize::new(0);

/// An argument whose serialization, once armed, pulls the kill switch of [`TRAP_GATE`].
struct Trap(u32);

impl Serialize for Trap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if TRAP_ARMED.load(Ordering::SeqCst)
            && let Some(gate) = TRAP_GATE.get()
        {
            gate.lower(Mode::Shadow).unwrap();
        }
        serializer.serialize_u32(self.0)
    }
}

/// Springs a trap.
#[tool(risk = "HIGH_WRITE", domain = "regress")]
fn spring(trap: Trap) -> Result<u32, Denied> {
    SPRUNG.fetch_add(1, Ordering::SeqCst);
    Ok(trap.0)
}

// Finding: a two-step approval is looked up after the call's arguments are written, and the mode read
// before that is not read again: a `lower` made meanwhile (here by the arguments' own `Serialize`) does
// not stop the approved call.
#[test]
fn the_kill_switch_pulled_while_an_approved_call_is_decided_refuses_it() {
    let _serial = serial();
    let gate = TRAP_GATE.get_or_init(|| {
        Gate::builder()
            .mode(Mode::FullAuto)
            .two_step_approvals()
            .build()
            .unwrap()
    });
    let before = count(&SPRUNG);
    let first = gate.run(|| spring(Trap(7))).unwrap_err();
    assert_eq!(first.code().as_str(), "APPROVAL_PENDING");
    gate.approve(first.approval_token().unwrap()).unwrap();

    TRAP_ARMED.store(true, Ordering::SeqCst);
    let result = gate.run(|| spring(Trap(7)));
    TRAP_ARMED.store(false, Ordering::SeqCst);
    assert_eq!(gate.mode(), Mode::Shadow, "the trap lowered the gate");
    assert_eq!(count(&SPRUNG), before, "the body must not run once lowered");
    assert_refused_by_the_mode(result);
}

// ---------------------------------------------------------------------------------------------------------
// 4. The kill switch of an outer gate pulled by an inner gate's approver
// ---------------------------------------------------------------------------------------------------------

static WIPES: AtomicUsize = AtomicUsize::new(0);

/// Wipes a disk.
#[tool(risk = "HIGH_WRITE", domain = "regress")]
fn wipe(disk: u32) -> Result<u32, Denied> {
    WIPES.fetch_add(1, Ordering::SeqCst);
    Ok(disk)
}

// Finding: nested gates decide one after the other, outer first; once the outer gate has approved, a
// `lower` of it made while the inner gate's approver thinks is not seen, and the call runs in a mode the
// outer gate no longer allows.
#[test]
fn an_outer_gate_lowered_while_an_inner_approver_thinks_refuses_the_call() {
    let _serial = serial();
    let build = |lower_outer: Option<Gate>| {
        Gate::builder()
            .mode(Mode::FullAuto)
            .approver(move |_: &ApprovalRequest<'_>| {
                if let Some(outer) = &lower_outer {
                    outer.lower(Mode::Shadow).unwrap();
                }
                Approval::Approve
            })
            .build()
            .unwrap()
    };
    let outer = || {
        Gate::builder()
            .mode(Mode::FullAuto)
            .approver(AllowAllApprover)
            .build()
            .unwrap()
    };

    // Without the lowering, the same nesting runs the call.
    let (calm_outer, calm_inner) = {
        let outer = outer();
        let inner = build(None);
        (outer, inner)
    };
    let before = count(&WIPES);
    assert_eq!(calm_outer.run(|| calm_inner.run(|| wipe(1))).unwrap(), 1);
    assert_eq!(count(&WIPES), before + 1);

    let outer = outer();
    let inner = build(Some(outer.clone()));
    let before = count(&WIPES);
    let result = outer.run(|| inner.run(|| wipe(2)));
    assert_eq!(outer.mode(), Mode::Shadow, "the inner approver lowered it");
    assert_eq!(count(&WIPES), before, "the body must not run once lowered");
    assert_refused_by_the_mode(result);
}

// ---------------------------------------------------------------------------------------------------------
// 5. Nested audited gates: a refusal by the inner gate, in the outer gate's log
// ---------------------------------------------------------------------------------------------------------

static TAGS: AtomicUsize = AtomicUsize::new(0);

/// Tags an item.
#[tool(risk = "LOW_WRITE", domain = "regress")]
fn tag(item: u32) -> Result<u32, Denied> {
    TAGS.fetch_add(1, Ordering::SeqCst);
    Ok(item)
}

// Finding: nested gates write their `enter` records one after the other; when an inner gate's sink
// fails, the call is refused AUDIT_UNAVAILABLE but the outer gate's `enter` record, written already, is
// never closed: its log says a call started that never ends.
#[test]
fn an_inner_sink_failure_closes_the_outer_gates_enter_record() {
    let _serial = serial();
    let sink = MemorySink::new();
    let outer = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink.clone())
        .build()
        .unwrap();
    // The outer gate alone runs the call.
    assert_eq!(outer.run(|| tag(1)).unwrap(), 1);
    sink.take();

    let inner = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(Broken)
        .build()
        .unwrap();
    let before = count(&TAGS);
    let result = outer.run(|| inner.run(|| tag(2)));
    assert_eq!(count(&TAGS), before, "the body must not run");
    assert_eq!(refusal_code(result), "AUDIT_UNAVAILABLE");

    let records = sink.records();
    for exit in exits_of_every_enter(&records, "regress.tag") {
        assert_eq!(exit["outcome"], "refused", "{exit}");
        assert_eq!(exit["code"], "AUDIT_UNAVAILABLE", "{exit}");
    }
    assert!(
        records
            .iter()
            .any(|r| r.tool == "regress.tag" && r.code.as_deref() == Some("AUDIT_UNAVAILABLE")),
        "the outer log says why the call did not run: {:#?}",
        records.iter().map(to_json).collect::<Vec<_>>()
    );
}

// Finding: when an inner gate refuses a call that an outer audited gate allowed, the outer gate records
// nothing at all: its log does not show the call.
#[test]
fn a_refusal_by_an_inner_gate_is_recorded_by_the_outer_audited_gate() {
    let _serial = serial();
    let sink = MemorySink::new();
    let outer = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .audit(sink.clone())
        .build()
        .unwrap();
    let inner = Gate::new(Mode::Shadow).unwrap();
    let before = count(&WIPES);
    let result = outer.run(|| inner.run(|| wipe(3)));
    assert_eq!(count(&WIPES), before, "the body must not run");
    assert_eq!(refusal_code(result), "MODE_NOT_ALLOWED");

    let records = sink.records();
    let shown: Vec<Value> = records.iter().map(to_json).collect();
    assert!(
        records.iter().any(|r| r.stage == Stage::Refused
            && r.tool == "regress.wipe"
            && r.code.as_deref() == Some("MODE_NOT_ALLOWED")),
        "the outer gate's log holds the inner gate's refusal: {shown:#?}"
    );
    exits_of_every_enter(&records, "regress.wipe");
}

// ---------------------------------------------------------------------------------------------------------
// 6. A two-step approval and the receiver of a method
// ---------------------------------------------------------------------------------------------------------

#[derive(Serialize)]
#[serde(crate = "toolgate::serde")]
pub struct Db {
    name: String,
}

/// The tables dropped, as (database, table).
static DROPPED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

#[toolset(domain = "db")]
impl Db {
    /// Drops a table.
    #[tool(risk = "HIGH_WRITE")]
    pub fn drop_table(&self, table: String) -> Result<(), Denied> {
        DROPPED.lock().unwrap().push((self.name.clone(), table));
        Ok(())
    }
}

fn db(name: &str) -> Db {
    Db {
        name: name.to_owned(),
    }
}

fn dropped() -> Vec<(String, String)> {
    DROPPED.lock().unwrap().clone()
}

// Finding: a two-step approval is bound to the tool and its named arguments, not to the receiver of a
// method: an approval given for `staging.drop_table("users")` runs `production.drop_table("users")`.
#[test]
fn a_two_step_approval_for_one_receiver_does_not_run_another() {
    let _serial = serial();
    let (staging, production) = (db("staging"), db("production"));
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    DROPPED.lock().unwrap().clear();
    let first = gate.run(|| staging.drop_table("users".into())).unwrap_err();
    assert_eq!(first.code().as_str(), "APPROVAL_PENDING");
    gate.approve(first.approval_token().unwrap()).unwrap();

    let other = gate.run(|| production.drop_table("users".into()));
    assert_eq!(
        dropped(),
        [],
        "the approval for staging must not drop production's table"
    );
    assert_eq!(refusal_code(other), "APPROVAL_PENDING");

    gate.run(|| staging.drop_table("users".into())).unwrap();
    assert_eq!(dropped(), [("staging".to_owned(), "users".to_owned())]);
}

// Finding (same): an approver is shown the same arguments digest for calls on two receivers, so it
// cannot tell which database it is asked to drop a table of.
#[test]
fn an_approver_sees_different_digests_for_different_receivers() {
    let _serial = serial();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_by_approver = seen.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(move |request: &ApprovalRequest<'_>| {
            seen_by_approver
                .lock()
                .unwrap()
                .push(request.arguments_digest.map(str::to_owned));
            Approval::Reject("asked only".into())
        })
        .build()
        .unwrap();
    DROPPED.lock().unwrap().clear();
    let staging = gate.run(|| db("staging").drop_table("users".into()));
    let production = gate.run(|| db("production").drop_table("users".into()));
    assert_eq!(refusal_code(staging), "APPROVAL_REJECTED");
    assert_eq!(refusal_code(production), "APPROVAL_REJECTED");
    assert_eq!(dropped(), []);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let (staging, production) = (&seen[0], &seen[1]);
    assert_eq!(staging.as_ref().map(String::len), Some(64));
    assert_eq!(production.as_ref().map(String::len), Some(64));
    assert_ne!(
        staging, production,
        "calls on two receivers must not digest alike"
    );
}

// Finding (same): the audit log records the same arguments digest for calls on two receivers.
#[test]
fn audit_records_of_calls_on_different_receivers_have_different_digests() {
    let _serial = serial();
    let sink = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .audit(sink.clone())
        .build()
        .unwrap();
    DROPPED.lock().unwrap().clear();
    gate.run(|| db("staging").drop_table("users".into()))
        .unwrap();
    gate.run(|| db("production").drop_table("users".into()))
        .unwrap();
    assert_eq!(dropped().len(), 2);
    let digests: Vec<Option<String>> = sink
        .records()
        .iter()
        .filter(|r| r.stage == Stage::Enter && r.tool == "db.drop_table")
        .map(|r| r.arguments_digest.clone())
        .collect();
    assert_eq!(digests.len(), 2, "{digests:?}");
    assert!(
        digests
            .iter()
            .all(|d| d.as_ref().map(String::len) == Some(64))
    );
    assert_ne!(
        digests[0], digests[1],
        "the records of calls on two receivers must not digest alike"
    );
}

// ---------------------------------------------------------------------------------------------------------
// 7. The kill switch pulled by the gate's own sink while it writes the `enter` record
// ---------------------------------------------------------------------------------------------------------

static SINK_GATE: OnceLock<Gate> = OnceLock::new();
static SINK_RECORDS: Mutex<Vec<AuditRecord>> = Mutex::new(Vec::new());
static STAMPS: AtomicUsize = AtomicUsize::new(0);

/// Keeps every record, and lowers [`SINK_GATE`] to SHADOW when it sees an `enter` record.
struct LowerOnEnter;

impl AuditSink for LowerOnEnter {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        SINK_RECORDS.lock().unwrap().push(record.clone());
        // The lock is released: `lower` writes its own `mode_lowered` record here.
        if record.stage == Stage::Enter
            && let Some(gate) = SINK_GATE.get()
        {
            gate.lower(Mode::Shadow).unwrap();
        }
        Ok(())
    }
}

/// Stamps a form.
#[tool(risk = "LOW_WRITE", domain = "regress")]
fn stamp(form: u32) -> Result<u32, Denied> {
    STAMPS.fetch_add(1, Ordering::SeqCst);
    Ok(form)
}

// Finding: the mode is read before the `enter` record is written and not again after it; a `lower` made
// while the sink writes (here by the sink itself) does not stop the call.
#[test]
fn the_kill_switch_pulled_while_the_enter_record_is_written_refuses_the_call() {
    let _serial = serial();
    let gate = SINK_GATE.get_or_init(|| {
        Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(LowerOnEnter)
            .build()
            .unwrap()
    });
    let before = count(&STAMPS);
    let result = gate.run(|| stamp(4));
    assert_eq!(gate.mode(), Mode::Shadow, "the sink lowered the gate");
    assert_eq!(count(&STAMPS), before, "the body must not run once lowered");
    assert_refused_by_the_mode(result);
    let records = SINK_RECORDS.lock().unwrap().clone();
    for exit in exits_of_every_enter(&records, "regress.stamp") {
        assert_eq!(exit["outcome"], "refused", "{exit}");
    }
}

// ---------------------------------------------------------------------------------------------------------
// 8. An argument whose JSON depends on its iteration order
// ---------------------------------------------------------------------------------------------------------

static TALLIES: AtomicUsize = AtomicUsize::new(0);

/// Sums counts.
#[tool(risk = "HIGH_WRITE", domain = "regress")]
fn tally(counts: HashMap<String, u32>) -> Result<u32, Denied> {
    TALLIES.fetch_add(1, Ordering::SeqCst);
    Ok(counts.values().sum())
}

// Finding: a two-step approval is bound to the arguments' JSON as serialized, and a `HashMap` serializes
// in the order of its random hasher: the same arguments, in a new map, do not match their approval.
#[test]
fn a_two_step_approval_runs_the_same_map_argument_built_again() {
    let _serial = serial();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    for round in 0..5u32 {
        let entries: Vec<(String, u32)> = (0..30)
            .map(|i| (format!("round{round}-key{i}"), round * 100 + i))
            .collect();
        let build = || entries.iter().cloned().collect::<HashMap<String, u32>>();
        let approved = build();
        // The same entries in a map that iterates in another order, as almost every new map does.
        let retried = (0..100)
            .map(|_| build())
            .find(|map| {
                serde_json::to_string(map).unwrap() != serde_json::to_string(&approved).unwrap()
            })
            .expect("a new map iterates in another order");
        assert_eq!(retried, approved);

        let before = count(&TALLIES);
        let first = gate.run(|| tally(approved)).unwrap_err();
        assert_eq!(first.code().as_str(), "APPROVAL_PENDING", "round {round}");
        gate.approve(first.approval_token().unwrap()).unwrap();
        let sum = (0..30).map(|i| round * 100 + i).sum::<u32>();
        match gate.run(|| tally(retried)) {
            Ok(total) => assert_eq!(total, sum),
            Err(denied) => panic!(
                "round {round}: the approved call, with the same entries in a new map, was refused \
                 {}: {denied}",
                denied.code().as_str()
            ),
        }
        assert_eq!(count(&TALLIES), before + 1, "round {round}");
    }
}

// ---------------------------------------------------------------------------------------------------------
// Sibling forms
// ---------------------------------------------------------------------------------------------------------

static NESTED_TOOL_RUNS: AtomicUsize = AtomicUsize::new(0);
static WRONG_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Not a tool: what an adapter that resolved names wrongly would call instead of the nested tool.
fn sibling_wipe(sibling_wipe: String) -> Result<(), Denied> {
    let _ = sibling_wipe;
    WRONG_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Never called: it only holds a callable tool declared inside a function body, whose parameter is
/// named like it, beside a module-level function of the same name.
#[allow(dead_code)]
fn holds_a_nested_tool() {
    /// Wipe a thing.
    #[tool(risk = "HIGH_WRITE", domain = "nested", callable)]
    fn sibling_wipe(sibling_wipe: String) -> Result<(), Denied> {
        let _ = sibling_wipe;
        NESTED_TOOL_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

// Finding 1, nested form: the adapter of a tool declared inside a function, with a parameter named like
// it, calls that tool, gated, and not the module's function of the same name.
#[test]
fn a_nested_callable_tool_with_a_parameter_named_like_it_is_gated() {
    let _serial = serial();
    let (tool_runs, wrong) = (count(&NESTED_TOOL_RUNS), count(&WRONG_RUNS));
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let refused = registry()
        .call(&shadow, "nested.sibling_wipe", json!({"sibling_wipe": "x"}))
        .now()
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.code(), "MODE_NOT_ALLOWED");
    let full = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .build()
        .unwrap();
    registry()
        .call(&full, "nested.sibling_wipe", json!({"sibling_wipe": "x"}))
        .now()
        .unwrap()
        .unwrap();
    assert_eq!(count(&NESTED_TOOL_RUNS), tool_runs + 1);
    assert_eq!(count(&WRONG_RUNS), wrong, "the module's function never ran");
    assert!(sibling_wipe("direct".into()).is_ok());
}

static MADE: AtomicUsize = AtomicUsize::new(0);

pub trait Maker {
    fn make(kind: String) -> Result<usize, Denied>;
}

/// Not a tool, named like the trait impl's tool.
fn make(kind: String) -> Result<usize, Denied> {
    let _ = kind;
    WRONG_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(0)
}

pub struct Factory;

#[toolset(domain = "factory")]
impl Maker for Factory {
    /// Make a thing.
    #[tool(risk = "LOW_WRITE", callable)]
    fn make(kind: String) -> Result<usize, Denied> {
        let _ = kind;
        Ok(MADE.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

// Finding 1, trait-impl form: a callable associated function of a `#[toolset]` trait impl is called
// through `<Type as Trait>`, gated.
#[test]
fn a_callable_function_of_a_toolset_trait_impl_is_gated() {
    let _serial = serial();
    let (made, wrong) = (count(&MADE), count(&WRONG_RUNS));
    let call = |gate: &Gate| {
        registry()
            .call(gate, "factory.make", json!({"kind": "widget"}))
            .now()
            .unwrap()
    };
    let refused = call(&Gate::new(Mode::Shadow).unwrap()).unwrap_err();
    assert_eq!(refused.code(), "MODE_NOT_ALLOWED");
    assert_eq!(count(&MADE), made);
    call(&Gate::new(Mode::PartialAuto).unwrap()).unwrap();
    assert_eq!(count(&MADE), made + 1);
    assert_eq!(count(&WRONG_RUNS), wrong);
    assert!(make("direct".into()).is_ok());
}

static ESCALATING_GATE: OnceLock<Gate> = OnceLock::new();
static ESCALATED_RUNS: AtomicUsize = AtomicUsize::new(0);

/// An escalation that pulls the kill switch of its own gate on the way.
fn lowering_classifier(command: &str) -> toolgate::Risk {
    if let Some(gate) = ESCALATING_GATE.get() {
        let _ = gate.lower(Mode::Shadow);
    }
    let _ = command;
    toolgate::Risk::LowWrite
}

/// Run a command.
#[tool(risk = "LOW_WRITE", domain = "regress", escalate = lowering_classifier)]
fn escalated_run(command: String) -> Result<(), Denied> {
    let _ = command;
    ESCALATED_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

// The `escalate` function runs before the decision: a gate it lowers decides at the lowered mode.
#[test]
fn an_escalation_that_lowers_the_gate_is_decided_at_the_lowered_mode() {
    let _serial = serial();
    let gate = ESCALATING_GATE
        .get_or_init(|| Gate::new(Mode::PartialAuto).unwrap())
        .clone();
    let runs = count(&ESCALATED_RUNS);
    assert_refused_by_the_mode(gate.run(|| escalated_run("ls".into())));
    assert_eq!(gate.mode(), Mode::Shadow);
    assert_eq!(count(&ESCALATED_RUNS), runs);
}

static ASYNC_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Delete a volume, asynchronously.
#[tool(risk = "HIGH_WRITE", domain = "regress")]
async fn delete_volume(id: u64) -> Result<(), Denied> {
    let _ = id;
    ASYNC_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// A gate in FULL_AUTO whose approver lowers the gate it approves for, then approves.
fn self_lowering_gate(sink: Option<MemorySink>) -> Gate {
    let handle: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let approver_handle = handle.clone();
    let mut builder =
        Gate::builder()
            .mode(Mode::FullAuto)
            .approver(move |_: &ApprovalRequest<'_>| {
                if let Some(gate) = approver_handle.get() {
                    let _ = gate.lower(Mode::Shadow);
                }
                Approval::Approve
            });
    if let Some(sink) = sink {
        builder = builder.audit(sink);
    }
    let gate = builder.build().unwrap();
    let _ = handle.set(gate.clone());
    gate
}

// Finding 3, async form: an async tool whose approver lowers the gate does not run, and its audited
// `enter` is closed.
#[test]
fn an_async_tool_approved_while_its_gate_is_lowered_does_not_run() {
    let _serial = serial();
    let sink = MemorySink::new();
    let gate = self_lowering_gate(Some(sink.clone()));
    let runs = count(&ASYNC_RUNS);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let result = runtime.block_on(gate.scope(delete_volume(9)));
    assert_refused_by_the_mode(result);
    assert_eq!(count(&ASYNC_RUNS), runs);
    let exits = exits_of_every_enter(&sink.records(), "regress.delete_volume");
    assert_eq!(
        exits.len(),
        1,
        "the approved call's enter was written, then closed"
    );
    assert_eq!(exits[0]["outcome"], "refused");
    assert!(
        matches!(
            exits[0]["code"].as_str(),
            Some("MODE_NOT_ALLOWED" | "ABOVE_CEILING")
        ),
        "{}",
        exits[0]
    );
}

static GATE_PARAM_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Purge a cache, deciding with the gate it is given.
#[tool(risk = "HIGH_WRITE", domain = "regress")]
fn purge_with(gate: &Gate, cache: String) -> Result<(), Denied> {
    let _ = (gate, cache);
    GATE_PARAM_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

// Finding 3, `&Gate` parameter form: the gate passed as an argument is re-checked too.
#[test]
fn a_gate_passed_as_an_argument_is_checked_again_before_the_body() {
    let _serial = serial();
    let gate = self_lowering_gate(None);
    let runs = count(&GATE_PARAM_RUNS);
    assert_refused_by_the_mode(purge_with(&gate, "hot".into()));
    assert_eq!(count(&GATE_PARAM_RUNS), runs);
}

/// A connection pool: it has no serialization, so nothing can tell two of them apart in a digest.
pub struct Pool {
    name: &'static str,
}

#[toolset(domain = "pool")]
impl Pool {
    /// Drop everything.
    #[tool(risk = "HIGH_WRITE")]
    pub fn drop_all(&self) -> Result<(), Denied> {
        DROPPED
            .lock()
            .unwrap()
            .push((self.name.to_owned(), "*".to_owned()));
        Ok(())
    }
}

// Finding 8, opaque receiver: a method whose receiver cannot be serialized cannot be bound to it, so
// it cannot be approved in two steps, and an approver is shown that the receiver is not serializable.
#[test]
fn a_method_whose_receiver_is_not_serializable_cannot_be_approved_in_two_steps() {
    let _serial = serial();
    DROPPED.lock().unwrap().clear();
    let pool = Pool { name: "main" };
    let two_step = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    let denied = two_step.run(|| pool.drop_all()).unwrap_err();
    assert_eq!(denied.code().as_str(), "APPROVAL_REQUIRED");
    assert!(denied.approval_token().is_none());
    assert!(
        denied.detail().unwrap().contains("receiver"),
        "{:?}",
        denied.detail()
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_by_approver = seen.clone();
    let asked = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(move |request: &ApprovalRequest<'_>| {
            seen_by_approver
                .lock()
                .unwrap()
                .push(request.arguments.map(str::to_owned));
            Approval::Reject("no".into())
        })
        .build()
        .unwrap();
    assert!(asked.run(|| pool.drop_all()).is_err());
    assert_eq!(
        *seen.lock().unwrap(),
        [Some(r#"{"self":"[NOT SERIALIZABLE]"}"#.to_owned())]
    );
    assert_eq!(dropped(), []);
}

static PUT: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Store a value.
#[tool(risk = "HIGH_WRITE", domain = "regress")]
fn put<T: Serialize + std::fmt::Debug>(value: T) -> Result<(), Denied> {
    PUT.lock().unwrap().push(format!("{value:?}"));
    Ok(())
}

#[derive(Debug, Serialize)]
#[serde(crate = "toolgate::serde")]
struct Settings {
    name: String,
    limits: HashMap<String, HashMap<String, u32>>,
}

fn settings() -> Settings {
    let limits = (0..8)
        .map(|i| {
            let inner = (0..8).map(|j| (format!("k{j}"), i * j)).collect();
            (format!("group{i}"), inner)
        })
        .collect();
    Settings {
        name: "prod".into(),
        limits,
    }
}

// Findings 8 and the map order, generic form: a generic tool's approval is bound to its argument's
// value, maps nested in structs included, whatever order they iterate in.
#[test]
fn a_generic_tool_is_bound_to_its_arguments_value_nested_maps_included() {
    let _serial = serial();
    PUT.lock().unwrap().clear();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    let first = gate.run(|| put(settings())).unwrap_err();
    gate.approve(first.approval_token().unwrap()).unwrap();
    let other = gate.run(|| put(1u8)).unwrap_err();
    assert_eq!(other.code().as_str(), "APPROVAL_PENDING");
    assert!(PUT.lock().unwrap().is_empty());
    // Built again: new hashers, another iteration order, the same value.
    gate.run(|| put(settings())).unwrap();
    assert_eq!(PUT.lock().unwrap().len(), 1);
    let again = gate.run(|| put(settings())).unwrap_err();
    assert_eq!(again.code().as_str(), "APPROVAL_REUSED");
}

// Every `enter` gets an `exit`, and the promotion report counts a call refused after its `enter` as
// refused, not allowed.
#[test]
fn the_promotion_report_counts_a_call_refused_after_its_enter_as_refused() {
    let _serial = serial();
    let sink = MemorySink::new();
    let gate = self_lowering_gate(Some(sink.clone()));
    let runs = count(&ASYNC_RUNS);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_refused_by_the_mode(runtime.block_on(gate.scope(delete_volume(1))));
    assert_eq!(count(&ASYNC_RUNS), runs);
    let records = sink.records();
    let report = toolgate::audit::PromotionReport::from_records(&records);
    let allowed: u64 = report.rows().map(|row| row.allowed).sum();
    let refused: u64 = report
        .rows()
        .map(|row| row.refused.values().sum::<u64>())
        .sum();
    assert_eq!((allowed, refused), (0, 1), "{report}");
}
