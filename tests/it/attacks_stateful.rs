//! Attacks on stateful tools (`callable` `&self` methods of a `#[toolset]` impl, called by name on an
//! instance and over MCP), on what an approver sees (`ApprovalRequest::arguments`, redaction, receivers
//! that are not serializable), on two-step approvals bound to a receiver, on strict arguments and the
//! records of calls stopped at the door: written from README.md, SECURITY.md and the rustdoc alone.
//!
//! Each test names, in its first comment, the guarantee it attacks and how; each asserts the documented
//! behaviour, so a test that fails is an attack that got through.
//!
//! When they were written, 7 of these failed (the attack got through), and each was fixed: s05, s06 (a
//! shared receiver changed between the approval and the body: the arguments are now written again last and
//! compared), s07 (a digest shown for a receiver that is not serializable: now none), s11, s12 (a key inside
//! a redacted argument in the error's path: the path now stops at the parameter), s21 (a `&Gate` spelled
//! `&Alias`, `&toolgate::gate::Gate` or through a renamed import: now found by its type), s30 (an async call
//! by name lowered before its first poll answered `HANDLER_ERROR`: now decided in full, with the refusal's
//! code). s09 now expects the refusal of a receiver that serializes differently each time. s13
//! (`redact = [self]`) does not compile, so it has no test.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use toolgate::audit::{AuditError, AuditRecord, AuditSink, Outcome, Stage};
use toolgate::registry::Instances;
use toolgate::schemars::JsonSchema;
use toolgate::serde::ser::SerializeMap;
use toolgate::serde::{Deserialize, Deserializer, Serialize, Serializer};
use toolgate::{
    AllowAllApprover, Approval, ApprovalRequest, CallError, DenialCode, Denied, Gate, Mode, Risk,
    registry, tool, toolset,
};

// ---------------------------------------------------------------------------------------------------------
// support
// ---------------------------------------------------------------------------------------------------------

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn sha256_hex(bytes: &[u8]) -> String {
    crate::regressions::sha256_hex(bytes)
}

fn shared(v: &Arc<Vault>) -> Instances {
    Instances::new().with_shared(Arc::clone(v))
}

/// A sync call by name, which completes at once.
fn call_now(gate: &Gate, instances: &Instances, id: &str, args: Value) -> Result<Value, CallError> {
    registry()
        .call_with(gate, instances, id, args)
        .now()
        .expect("a sync tool's call completes at once")
}

type Hook = Box<dyn FnOnce() + Send>;

/// Keeps every record, and runs a one-shot hook when the `enter` record of a given tool is written.
#[derive(Clone, Default)]
struct HookSink {
    records: Arc<Mutex<Vec<AuditRecord>>>,
    on_enter: Arc<Mutex<Option<(&'static str, Hook)>>>,
    /// Checked on every `enter` record, before it is acknowledged.
    check: Arc<Mutex<Option<Check>>>,
}

type Check = Box<dyn Fn(&AuditRecord) + Send>;

impl HookSink {
    fn records(&self) -> Vec<AuditRecord> {
        lock(&self.records).clone()
    }

    fn arm(&self, tool: &'static str, f: impl FnOnce() + Send + 'static) {
        *lock(&self.on_enter) = Some((tool, Box::new(f)));
    }
}

impl AuditSink for HookSink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        lock(&self.records).push(record.clone());
        if record.stage == Stage::Enter {
            if let Some(check) = lock(&self.check).as_ref() {
                check(record);
            }
            let hook = {
                let mut slot = lock(&self.on_enter);
                match slot.as_ref() {
                    Some((tool, _)) if *tool == record.tool => slot.take(),
                    _ => None,
                }
            };
            if let Some((_, f)) = hook {
                f();
            }
        }
        Ok(())
    }
}

/// Every `enter` has exactly one `exit`.
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

/// What an approver was asked: the tool, its `arguments`, their digest and the risk.
type Asked = Arc<Mutex<Vec<(String, Option<String>, Option<String>, Risk)>>>;

/// A gate in FULL_AUTO whose approver records each request and approves it when `approve` says so.
fn approving(
    sink: &HookSink,
    approve: impl Fn(&ApprovalRequest<'_>) -> bool + Send + Sync + 'static,
) -> (Gate, Asked) {
    let asked: Asked = Arc::default();
    let log = Arc::clone(&asked);
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .audit(sink.clone())
        .approver(move |r: &ApprovalRequest<'_>| {
            lock(&log).push((
                r.tool.id.to_string(),
                r.arguments.map(str::to_string),
                r.arguments_digest.map(str::to_string),
                r.risk,
            ));
            if approve(r) {
                Approval::Approve
            } else {
                Approval::Reject("atk: not this one".into())
            }
        })
        .build()
        .unwrap();
    (gate, asked)
}

fn token_of(error: &CallError) -> String {
    error
        .denied()
        .and_then(Denied::approval_token)
        .unwrap_or_else(|| panic!("no token on {error:?}"))
        .to_string()
}

// ---------------------------------------------------------------------------------------------------------
// the stateful toolset under attack
// ---------------------------------------------------------------------------------------------------------

type VaultHook = Box<dyn FnOnce(&Vault) + Send>;

/// A vault at a site: what a real toolset holds, with hooks in its `Serialize`.
pub struct Vault {
    site: Mutex<String>,
    /// `tool@site` for every body that ran, the site as the body saw it.
    ran: Mutex<Vec<String>>,
    ser_hook: Mutex<Option<VaultHook>>,
    ser_panic: AtomicBool,
    /// Serialize a different value each time (a counter beside the site).
    ser_jitter: AtomicBool,
    serialized: AtomicUsize,
    /// The vault `relay` calls a tool on.
    peer: Mutex<Option<Arc<Vault>>>,
}

impl Vault {
    fn new(site: &str) -> Arc<Vault> {
        Arc::new(Vault {
            site: Mutex::new(site.to_string()),
            ran: Mutex::new(Vec::new()),
            ser_hook: Mutex::new(None),
            ser_panic: AtomicBool::new(false),
            ser_jitter: AtomicBool::new(false),
            serialized: AtomicUsize::new(0),
            peer: Mutex::new(None),
        })
    }

    fn site(&self) -> String {
        lock(&self.site).clone()
    }

    fn ran(&self) -> Vec<String> {
        lock(&self.ran).clone()
    }

    fn note(&self, what: &str) {
        let line = format!("{what}@{}", self.site());
        lock(&self.ran).push(line);
    }

    fn on_serialize(&self, f: impl FnOnce(&Vault) + Send + 'static) {
        *lock(&self.ser_hook) = Some(Box::new(f));
    }
}

impl Serialize for Vault {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let n = self.serialized.fetch_add(1, SeqCst);
        let hook = lock(&self.ser_hook).take();
        if let Some(hook) = hook {
            hook(self);
        }
        if self.ser_panic.load(SeqCst) {
            panic!("atk: the receiver's Serialize panics");
        }
        let site = self.site();
        let jitter = self.ser_jitter.load(SeqCst);
        let mut map = s.serialize_map(Some(1 + usize::from(jitter)))?;
        if jitter {
            map.serialize_entry("n", &n)?;
        }
        map.serialize_entry("site", &site)?;
        map.end()
    }
}

/// A PIN whose `Deserialize` error quotes what it was given.
#[derive(JsonSchema)]
#[schemars(crate = "toolgate::schemars")]
pub struct Pin(String);

impl<'de> Deserialize<'de> for Pin {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Pin, D::Error> {
        let s = String::deserialize(d)?;
        if s.len() == 4 && s.bytes().all(|b| b.is_ascii_digit()) {
            Ok(Pin(s))
        } else {
            Err(toolgate::serde::de::Error::custom(format!(
                "`{s}` is not a 4-digit PIN"
            )))
        }
    }
}

impl Serialize for Pin {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// Credentials, redacted as a whole.
#[derive(Deserialize, Serialize, JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
pub struct Creds {
    user: String,
    token: String,
}

fn classify(command: &str) -> Risk {
    if command.split_whitespace().any(|w| w == "sudo") {
        Risk::HighWrite
    } else {
        Risk::ReadOnly
    }
}

use toolgate::Gate as Portcullis;
type GateAlias = toolgate::Gate;

#[toolset(domain = "atk_vault")]
impl Vault {
    /// Read the vault's site.
    #[tool(risk = "READ_ONLY", callable)]
    pub fn peek(&self) -> Result<String, Denied> {
        self.note("peek");
        Ok(self.site())
    }

    /// Stash an item; async, yields once in its body.
    #[tool(risk = "LOW_WRITE", callable)]
    pub async fn stash(&self, item: String) -> Result<String, Denied> {
        self.note(&format!("stash:{item}"));
        tokio::task::yield_now().await;
        Ok(item)
    }

    /// Point the vault at another site.
    #[tool(risk = "LOW_WRITE", callable)]
    pub fn retarget(&self, site: String) -> Result<String, Denied> {
        let old = std::mem::replace(&mut *lock(&self.site), site);
        self.note("retarget");
        Ok(old)
    }

    /// Wipe the vault.
    #[tool(risk = "HIGH_WRITE", callable)]
    pub fn wipe(&self) -> Result<String, Denied> {
        self.note("wipe");
        Ok(self.site())
    }

    /// Wipe the vault, async.
    #[tool(risk = "HIGH_WRITE", callable)]
    pub async fn awipe(&self) -> Result<String, Denied> {
        self.note("awipe");
        Ok(self.site())
    }

    /// Open a door with a PIN.
    #[tool(risk = "HIGH_WRITE", callable, redact = [pin], record_arguments)]
    pub fn open(&self, door: String, pin: String) -> Result<String, Denied> {
        let _ = pin;
        self.note("open");
        Ok(door)
    }

    /// Open a door with a checked PIN.
    #[tool(risk = "HIGH_WRITE", callable, redact = [pin])]
    pub fn open_checked(&self, door: String, pin: Pin) -> Result<String, Denied> {
        let _ = pin;
        self.note("open_checked");
        Ok(door)
    }

    /// Store API keys, by name.
    #[tool(risk = "LOW_WRITE", callable, redact = [keys])]
    pub fn store_keys(&self, owner: String, keys: BTreeMap<String, u32>) -> Result<usize, Denied> {
        self.note("store_keys");
        let _ = owner;
        Ok(keys.len())
    }

    /// Log in.
    #[tool(risk = "LOW_WRITE", callable, redact = [creds])]
    pub fn login(&self, creds: Creds) -> Result<String, Denied> {
        self.note("login");
        Ok(creds.user)
    }

    /// Run a command, raised by its words.
    #[tool(risk = "LOW_WRITE", callable, escalate = classify)]
    pub fn run(&self, command: String) -> Result<String, Denied> {
        self.note("run");
        Ok(command)
    }

    /// Count with the gate of the call as a parameter.
    #[tool(risk = "LOW_WRITE", callable)]
    pub fn gated_call(&self, gate: &Gate, n: u32) -> Result<u32, Denied> {
        let _ = gate;
        self.note("gated_call");
        Ok(n)
    }

    /// Call another tool by name on the peer, through a wide gate of its own.
    #[tool(risk = "LOW_WRITE", callable)]
    pub fn relay(&self, id: String) -> Result<String, Denied> {
        let peer = lock(&self.peer).clone().expect("a peer");
        let wide = Gate::builder()
            .mode(Mode::FullAuto)
            .approver(AllowAllApprover)
            .build()
            .unwrap();
        let result = registry()
            .call_with(&wide, &Instances::new().with_shared(peer), &id, json!({}))
            .now()
            .expect("sync");
        self.note("relay");
        Ok(match result {
            Ok(v) => format!("ran {v}"),
            Err(e) => e.code().to_string(),
        })
    }

    /// The same, async.
    #[tool(risk = "LOW_WRITE", callable)]
    pub async fn arelay(&self, id: String) -> Result<String, Denied> {
        let peer = lock(&self.peer).clone().expect("a peer");
        let wide = Gate::builder()
            .mode(Mode::FullAuto)
            .approver(AllowAllApprover)
            .build()
            .unwrap();
        let result = registry()
            .call_with(&wide, &Instances::new().with_shared(peer), &id, json!({}))
            .await;
        self.note("arelay");
        Ok(match result {
            Ok(v) => format!("ran {v}"),
            Err(e) => e.code().to_string(),
        })
    }

    /// A gate parameter, plain.
    #[tool(risk = "HIGH_WRITE")]
    pub fn gp_plain(&self, gate: &Gate) -> Result<(), Denied> {
        let _ = gate;
        self.note("gp_plain");
        Ok(())
    }

    /// A gate parameter, through a renamed import.
    #[tool(risk = "HIGH_WRITE")]
    pub fn gp_alias(&self, g: &Portcullis) -> Result<(), Denied> {
        let _ = g;
        self.note("gp_alias");
        Ok(())
    }

    /// A gate parameter, through a type alias.
    #[tool(risk = "HIGH_WRITE")]
    pub fn gp_type_alias(&self, g: &GateAlias) -> Result<(), Denied> {
        let _ = g;
        self.note("gp_type_alias");
        Ok(())
    }

    /// A gate parameter, by its full path.
    #[tool(risk = "HIGH_WRITE")]
    pub fn gp_path(&self, g: &toolgate::gate::Gate) -> Result<(), Denied> {
        let _ = g;
        self.note("gp_path");
        Ok(())
    }

    /// A gate parameter with a named lifetime.
    #[tool(risk = "HIGH_WRITE")]
    #[allow(clippy::needless_lifetimes)] // the spelling under attack
    pub fn gp_life<'g>(&self, g: &'g Gate) -> Result<(), Denied> {
        let _ = g;
        self.note("gp_life");
        Ok(())
    }

    /// A generic method with a gate parameter.
    #[tool(risk = "HIGH_WRITE")]
    pub fn put<T: Serialize + std::fmt::Debug>(&self, gate: &Gate, value: T) -> Result<(), Denied> {
        let _ = gate;
        self.note(&format!("put:{value:?}:{}", std::any::type_name::<T>()));
        Ok(())
    }
    // `redact = [self]` (redacting the receiver) is a compile error: "`redact` takes a list of argument
    // names" (attack s13, see the note where it was).
}

// ---------------------------------------------------------------------------------------------------------
// other toolsets and tools
// ---------------------------------------------------------------------------------------------------------

/// A receiver that is not serializable: a pool.
pub struct Pool {
    drained: AtomicUsize,
}

#[toolset(domain = "atk_pool")]
impl Pool {
    /// Drain the pool.
    #[tool(risk = "HIGH_WRITE", callable)]
    pub fn drain(&self) -> Result<usize, Denied> {
        Ok(self.drained.fetch_add(1, SeqCst) + 1)
    }
}

/// A type with an inherent `go` that is no tool, beside a trait impl whose `go` is one.
pub struct Twin {
    by_tool: AtomicUsize,
    by_other: AtomicUsize,
}

impl Twin {
    /// Not a tool: never gated.
    #[allow(dead_code)]
    fn go(&self) -> Result<String, Denied> {
        self.by_other.fetch_add(1, SeqCst);
        Ok("inherent".into())
    }
}

/// Goes.
pub trait Goer {
    /// Goes.
    fn go(&self) -> Result<String, Denied>;
}

#[toolset(domain = "atk_twin")]
impl Goer for Twin {
    /// The trait's `go`.
    #[tool(risk = "HIGH_WRITE", callable)]
    fn go(&self) -> Result<String, Denied> {
        self.by_tool.fetch_add(1, SeqCst);
        Ok("trait".into())
    }
}

static SNEAK_RAN: AtomicUsize = AtomicUsize::new(0);

#[allow(dead_code)]
/// A blanket trait in scope of the toolset, whose method has the tool's name: for every type,
/// `Arc<Decoy>` and `&Decoy` included.
pub trait Sneak {
    /// Not a tool.
    fn fetch(&self) -> Result<String, Denied>;
    /// Not a tool.
    fn burn(self: Arc<Self>) -> Result<String, Denied>;
}

impl<T: ?Sized> Sneak for T {
    fn fetch(&self) -> Result<String, Denied> {
        SNEAK_RAN.fetch_add(1, SeqCst);
        Ok("sneak".into())
    }
    fn burn(self: Arc<Self>) -> Result<String, Denied> {
        SNEAK_RAN.fetch_add(1, SeqCst);
        Ok("sneak".into())
    }
}

pub struct Decoy {
    by_tool: AtomicUsize,
}

#[toolset(domain = "atk_decoy")]
impl Decoy {
    /// Fetch.
    #[tool(risk = "READ_ONLY", callable)]
    pub fn fetch(&self) -> Result<String, Denied> {
        self.by_tool.fetch_add(1, SeqCst);
        Ok("tool".into())
    }

    /// Burn: a HIGH_WRITE tool with the name of a blanket method taking `Arc<Self>`.
    #[tool(risk = "HIGH_WRITE", callable)]
    pub fn burn(&self) -> Result<String, Denied> {
        self.by_tool.fetch_add(1, SeqCst);
        Ok("tool".into())
    }
}

/// An instance whose `Clone` lowers a gate (and counts).
pub struct Sheep {
    lower_on_clone: Mutex<Option<Gate>>,
    clones: Arc<AtomicUsize>,
    sheared: Arc<AtomicUsize>,
}

impl Clone for Sheep {
    fn clone(&self) -> Sheep {
        self.clones.fetch_add(1, SeqCst);
        if let Some(gate) = lock(&self.lower_on_clone).take() {
            gate.lower(Mode::Shadow).unwrap();
        }
        Sheep {
            lower_on_clone: Mutex::new(None),
            clones: Arc::clone(&self.clones),
            sheared: Arc::clone(&self.sheared),
        }
    }
}

#[toolset(domain = "atk_sheep")]
impl Sheep {
    /// Shear the sheep.
    #[tool(risk = "LOW_WRITE", callable)]
    pub fn shear(&self) -> Result<usize, Denied> {
        Ok(self.sheared.fetch_add(1, SeqCst) + 1)
    }
}

// Strictness of nested objects, in serde's buffered forms.

static STRICT_RAN: AtomicUsize = AtomicUsize::new(0);

/// Internally tagged.
#[derive(Deserialize, Serialize, JsonSchema, Debug)]
#[serde(crate = "toolgate::serde", tag = "kind")]
#[schemars(crate = "toolgate::schemars")]
pub enum Op {
    Restart { service: String },
    Stop { service: String },
}

/// Untagged.
#[derive(Deserialize, Serialize, JsonSchema, Debug)]
#[serde(crate = "toolgate::serde", untagged)]
#[schemars(crate = "toolgate::schemars")]
pub enum Target {
    Spec { host: String, port: u16 },
    Name(String),
}

/// A struct with a flattened struct.
#[derive(Deserialize, Serialize, JsonSchema, Debug)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
pub struct Outer {
    name: String,
    #[serde(flatten)]
    inner: Inner,
}

#[derive(Deserialize, Serialize, JsonSchema, Debug)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
pub struct Inner {
    limit: u32,
}

/// Externally tagged, with a struct variant.
#[derive(Deserialize, Serialize, JsonSchema, Debug)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
pub enum Action {
    Restart { force: bool },
}

/// An internally tagged argument.
#[tool(risk = "READ_ONLY", callable, domain = "atk_strict")]
fn tagged(op: Op) -> Result<String, Denied> {
    STRICT_RAN.fetch_add(1, SeqCst);
    Ok(format!("{op:?}"))
}

/// An untagged argument.
#[tool(risk = "READ_ONLY", callable, domain = "atk_strict")]
fn untagged(target: Target) -> Result<String, Denied> {
    STRICT_RAN.fetch_add(1, SeqCst);
    Ok(format!("{target:?}"))
}

/// A flattened argument.
#[tool(risk = "READ_ONLY", callable, domain = "atk_strict")]
fn flat(outer: Outer) -> Result<String, Denied> {
    STRICT_RAN.fetch_add(1, SeqCst);
    Ok(format!("{outer:?}"))
}

/// Externally tagged and optional nested arguments.
#[tool(risk = "READ_ONLY", callable, domain = "atk_strict")]
fn external(action: Action, extra: Option<Vec<Inner>>) -> Result<String, Denied> {
    STRICT_RAN.fetch_add(1, SeqCst);
    Ok(format!("{action:?} {extra:?}"))
}

// ---------------------------------------------------------------------------------------------------------
// attacks: user code between the decision and the body
// ---------------------------------------------------------------------------------------------------------

/// ATTACKS guarantee 4 (the mode re-checked before the body): the receiver's own `Serialize`, run for the
/// approver and the audit digest of a method called by name, lowers the gate mid-decision. Sync by name,
/// async by name, and a direct call in a scope.
#[test]
fn s01_a_receivers_serialize_lowering_the_gate_refuses_the_call() {
    for form in ["sync by name", "async by name", "direct in a scope"] {
        let vault = Vault::new("staging");
        let sink = HookSink::default();
        let (gate, _) = approving(&sink, |_| true);
        let g = gate.clone();
        vault.on_serialize(move |_| g.lower(Mode::PartialAuto).unwrap());
        let result: Result<Value, String> = match form {
            "sync by name" => call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({}))
                .map_err(|e| e.code().to_string()),
            "async by name" => {
                block_on(registry().call_with(&gate, &shared(&vault), "atk_vault.awipe", json!({})))
                    .map_err(|e| e.code().to_string())
            }
            _ => {
                let v = Arc::clone(&vault);
                block_on(gate.scope(async move { v.awipe().await }))
                    .map(Value::from)
                    .map_err(|e| e.code().as_str().to_string())
            }
        };
        assert!(
            vault.serialized.load(SeqCst) > 0,
            "{form}: the receiver was never serialized"
        );
        let code = result.expect_err(form);
        assert!(
            code == "MODE_NOT_ALLOWED" || code == "ABOVE_CEILING",
            "{form}: refused with {code}"
        );
        assert_eq!(
            vault.ran(),
            Vec::<String>::new(),
            "{form}: the body ran at the old mode"
        );
        assert_balanced(&sink.records());
    }
}

/// ATTACKS guarantees 2 and 8 (fail closed, every enter closed): the receiver's `Serialize` panics during a
/// call by name. Nothing runs, no decision is left behind for a later call, and the gate still works.
#[test]
fn s02_a_receivers_serialize_panicking_leaves_nothing_behind() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let approve = Arc::new(AtomicBool::new(true));
    let a = Arc::clone(&approve);
    let (gate, asked) = approving(&sink, move |_| a.load(SeqCst));
    vault.ser_panic.store(true, SeqCst);
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({}))
    }));
    let outcome = format!("{panicked:?}");
    assert!(
        matches!(panicked, Err(_) | Ok(Err(_))),
        "the call ran: {outcome}"
    );
    assert_eq!(vault.ran(), Vec::<String>::new());
    vault.ser_panic.store(false, SeqCst);
    // A later call is decided afresh: the approver is asked and rejects.
    approve.store(false, SeqCst);
    let before = lock(&asked).len();
    let rejected = call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({})).unwrap_err();
    assert_eq!(rejected.code(), "APPROVAL_REJECTED");
    assert_eq!(lock(&asked).len(), before + 1);
    // Direct, too.
    assert_eq!(
        gate.run(|| vault.wipe()).unwrap_err().code().as_str(),
        "APPROVAL_REJECTED"
    );
    assert_eq!(vault.ran(), Vec::<String>::new());
    approve.store(true, SeqCst);
    assert_eq!(
        call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({})).unwrap(),
        json!("staging")
    );
    assert_eq!(vault.ran(), ["wipe@staging"]);
    assert_balanced(&sink.records());
}

/// ATTACKS guarantee 1 (one decision, handed only to the check of that tool): while the `enter` record of an
/// approved `wipe` on staging is written, the sink calls `wipe` on production, directly and by name. The
/// approval of staging must not run production: each nested call is decided by itself, and rejected.
#[test]
fn s03_a_sink_calling_the_same_method_on_another_receiver_does_not_take_the_decision() {
    let staging = Vault::new("staging");
    let production = Vault::new("production");
    let sink = HookSink::default();
    let (gate, asked) = approving(&sink, |r| {
        r.arguments.is_some_and(|a| a.contains("staging"))
    });
    let (g, p) = (gate.clone(), Arc::clone(&production));
    sink.arm("atk_vault.wipe", move || {
        let direct = g.run(|| p.wipe());
        assert!(
            direct.is_err(),
            "a direct wipe of production from the sink ran"
        );
        let by_name = call_now(&g, &shared(&p), "atk_vault.wipe", json!({}));
        assert!(
            by_name.is_err(),
            "a wipe of production by name from the sink ran"
        );
    });
    let result = call_now(&gate, &shared(&staging), "atk_vault.wipe", json!({}));
    assert_eq!(result.unwrap(), json!("staging"));
    assert_eq!(staging.ran(), ["wipe@staging"]);
    assert_eq!(
        production.ran(),
        Vec::<String>::new(),
        "production was wiped on staging's approval"
    );
    assert!(
        lock(&asked).len() >= 2,
        "the nested calls were never asked about"
    );
    assert_balanced(&sink.records());
}

/// ATTACKS guarantee 7 (a two-step approval runs one call on the same receiver): a token for `wipe` on
/// staging, by name; the agent then calls `wipe` by name on production, then on staging twice. Also: the
/// token is in no message or JSON the agent sees.
#[test]
fn s04_a_two_step_approval_by_name_runs_only_on_its_receiver() {
    let staging = Vault::new("staging");
    let production = Vault::new("production");
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    let first = call_now(&gate, &shared(&staging), "atk_vault.wipe", json!({})).unwrap_err();
    assert_eq!(first.code(), "APPROVAL_PENDING");
    let token = token_of(&first);
    let shown = format!(
        "{first} {} {}",
        serde_json::to_string(&first).unwrap(),
        first.denied().unwrap()
    );
    assert!(
        !shown.contains(&token),
        "the token reaches the agent: {shown}"
    );
    gate.approve(&token).unwrap();
    let other = call_now(&gate, &shared(&production), "atk_vault.wipe", json!({})).unwrap_err();
    assert_eq!(other.code(), "APPROVAL_PENDING");
    assert_eq!(production.ran(), Vec::<String>::new());
    assert_eq!(
        call_now(&gate, &shared(&staging), "atk_vault.wipe", json!({})).unwrap(),
        json!("staging")
    );
    let again = call_now(&gate, &shared(&staging), "atk_vault.wipe", json!({})).unwrap_err();
    assert_eq!(again.code(), "APPROVAL_REUSED");
    assert_eq!(staging.ran(), ["wipe@staging"]);
}

/// ATTACKS guarantee 7 (an approval for `staging.drop_table` never runs `production.drop_table`), at the
/// window between the binding and the body: the receiver is shared and mutable by design ("what changes
/// inside it sits behind a lock"). A two-step approval is given for `wipe` on the vault while it points at
/// staging; while the approved call's `enter` record is written (a slow audit write, or any concurrent
/// call), the agent retargets the same vault to production with an allowed LOW_WRITE call by name. The
/// approved body must not run on production.
#[test]
fn s05_a_receiver_retargeted_between_the_two_step_binding_and_the_body() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .audit(sink.clone())
        .build()
        .unwrap();
    let first = call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({})).unwrap_err();
    gate.approve(&token_of(&first)).unwrap();
    let (g, v) = (gate.clone(), Arc::clone(&vault));
    sink.arm("atk_vault.wipe", move || {
        let moved = call_now(
            &g,
            &shared(&v),
            "atk_vault.retarget",
            json!({"site": "production"}),
        );
        assert_eq!(moved.unwrap(), json!("staging"));
    });
    let result = call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({}));
    assert!(
        !vault.ran().contains(&"wipe@production".to_string()),
        "the approval for {{\"self\":{{\"site\":\"staging\"}}}} ran the wipe on production: {result:?}, \
         bodies {:?}",
        vault.ran()
    );
}

/// ATTACKS what an approver sees (the receiver as `self`): the same window with an approver: it is shown
/// `{"self":{"site":"staging"}}` and approves; before the body, the vault is retargeted to production by an
/// allowed call. The body must not run on a receiver the approver was not shown.
#[test]
fn s06_a_receiver_retargeted_after_the_approver_saw_it() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let (gate, asked) = approving(&sink, |r| {
        r.arguments.is_some_and(|a| a.contains("\"staging\""))
    });
    let (g, v) = (gate.clone(), Arc::clone(&vault));
    sink.arm("atk_vault.wipe", move || {
        let _ = call_now(
            &g,
            &shared(&v),
            "atk_vault.retarget",
            json!({"site": "production"}),
        );
    });
    let result = call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({}));
    let shown: Vec<_> = lock(&asked).iter().map(|a| a.1.clone()).collect();
    assert!(
        !vault.ran().contains(&"wipe@production".to_string()),
        "the approver was shown {shown:?} and the wipe ran on production: {result:?}"
    );
}

/// ATTACKS guarantee 7 for a receiver that is not serializable, by name: its call is approved in two steps
/// for the registered instance it runs on, by that registration's label, and for no other instance, nor
/// for the same value registered again; the approver sees the label and a digest of what it is shown.
#[test]
fn s07_a_receiver_that_is_not_serializable_is_approved_for_its_registered_instance_only() {
    let pool = Arc::new(Pool {
        drained: AtomicUsize::new(0),
    });
    let on_pool = Instances::new().with_shared(Arc::clone(&pool));
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    let refused = call_now(&gate, &on_pool, "atk_pool.drain", json!({})).unwrap_err();
    let token = refused
        .denied()
        .and_then(Denied::approval_token)
        .expect("a two-step approval is asked for")
        .to_owned();
    gate.approve(&token).unwrap();

    // Another pool, and the same pool registered anew: neither is the instance that was approved.
    let other = Arc::new(Pool {
        drained: AtomicUsize::new(0),
    });
    let on_other = Instances::new().with_shared(Arc::clone(&other));
    let again = Instances::new().with_shared(Arc::clone(&pool));
    for instances in [&on_other, &again] {
        let refused = call_now(&gate, instances, "atk_pool.drain", json!({})).unwrap_err();
        assert_eq!(
            refused.denied().map(Denied::code),
            Some(DenialCode::ApprovalPending),
            "{refused:?}"
        );
    }
    assert_eq!(other.drained.load(SeqCst), 0);
    assert_eq!(pool.drained.load(SeqCst), 0);

    assert_eq!(
        call_now(&gate, &on_pool, "atk_pool.drain", json!({})).unwrap(),
        json!(1)
    );
    let reused = call_now(&gate, &on_pool, "atk_pool.drain", json!({})).unwrap_err();
    assert!(reused.denied().is_some(), "{reused:?}");
    assert_eq!(
        pool.drained.load(SeqCst),
        1,
        "the approval ran the call once"
    );

    let sink = HookSink::default();
    let (gate, asked) = approving(&sink, |_| true);
    assert_eq!(
        call_now(&gate, &on_pool, "atk_pool.drain", json!({})).unwrap(),
        json!(2)
    );
    let asked = lock(&asked).clone();
    let label = on_pool.label::<Pool>().expect("a label");
    assert!(
        label.starts_with(std::any::type_name::<Pool>()) && label.contains("(instance "),
        "{label}"
    );
    let shown = serde_json::to_string(&json!({ "self": label })).unwrap();
    assert_eq!(asked[0].1.as_deref(), Some(shown.as_str()));
    assert_eq!(
        asked[0].2.as_deref(),
        Some(sha256_hex(shown.as_bytes()).as_str()),
        "the approver gets a digest of what it is shown"
    );
}

/// ATTACKS what the approver and the log see (`arguments`, `arguments_digest`, `record_arguments`, redaction)
/// for a method: the approver's digest is the SHA-256 of what it is shown, the log's `enter` has the same
/// arguments and digest, the receiver is `self`, and the redacted PIN is nowhere, by name and directly.
#[test]
fn s08_the_approver_and_the_log_see_the_same_redacted_arguments_of_a_method() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let (gate, asked) = approving(&sink, |_| true);
    let secret = "sk_live_PIN_8642";
    call_now(
        &gate,
        &shared(&vault),
        "atk_vault.open",
        json!({"door": "front", "pin": secret}),
    )
    .unwrap();
    gate.run(|| vault.open("front".into(), secret.into()))
        .unwrap();
    let asked = lock(&asked).clone();
    let records = sink.records();
    let enters: Vec<_> = records.iter().filter(|r| r.stage == Stage::Enter).collect();
    assert_eq!((asked.len(), enters.len()), (2, 2));
    let expected = r#"{"door":"front","pin":"[REDACTED]","self":{"site":"staging"}}"#;
    for ((_, args, digest, _), enter) in asked.iter().zip(&enters) {
        assert_eq!(args.as_deref(), Some(expected));
        assert_eq!(
            digest.as_deref(),
            Some(sha256_hex(expected.as_bytes()).as_str())
        );
        assert_eq!(enter.arguments.as_deref(), Some(expected));
        assert_eq!(&enter.arguments_digest, digest);
    }
    let everything = format!("{records:?} {asked:?}");
    assert!(!everything.contains(secret), "{everything}");
    assert_balanced(&records);
}

/// ATTACKS "what the approver sees is what the log writes" with a receiver whose `Serialize` gives another
/// value each time it runs: if the call's arguments were serialized once for the approver and again for the
/// log, the log would record something the approver never saw.
#[test]
fn s09_a_nondeterministic_receiver_shows_the_approver_what_the_log_records() {
    let vault = Vault::new("staging");
    vault.ser_jitter.store(true, SeqCst);
    let sink = HookSink::default();
    let (gate, asked) = approving(&sink, |_| true);
    // Written again just before the body, the receiver is not what the approver saw: refused.
    let refused = call_now(
        &gate,
        &shared(&vault),
        "atk_vault.open",
        json!({"door": "front", "pin": "1234"}),
    )
    .unwrap_err();
    assert_eq!(refused.code(), "APPROVAL_MISMATCH");
    assert!(vault.ran().is_empty(), "{:?}", vault.ran());
    let asked = lock(&asked).clone();
    let records = sink.records();
    let enter = records.iter().find(|r| r.stage == Stage::Enter).unwrap();
    assert_eq!(
        (asked[0].1.as_deref(), asked[0].2.as_deref()),
        (
            enter.arguments.as_deref(),
            enter.arguments_digest.as_deref()
        ),
        "serialized {} times",
        vault.serialized.load(SeqCst)
    );
    assert_balanced(&records);
}

// ---------------------------------------------------------------------------------------------------------
// attacks: redaction, refusal messages, strict arguments, calls stopped at the door
// ---------------------------------------------------------------------------------------------------------

/// Every way a `CallError` is shown: `Display`, `Debug`, its JSON, and the MCP text.
fn shown(error: &CallError) -> String {
    format!(
        "{error} | {error:?} | {}",
        serde_json::to_string(error).unwrap()
    )
}

/// ATTACKS redaction ("kept out of records, approvers and errors"; "a redacted parameter's bad value is not
/// quoted back"): the redacted PIN's type has its own `Deserialize` whose error quotes what it was given.
#[test]
fn s10_a_redacted_arguments_own_deserialize_error_does_not_quote_it() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let (gate, _) = approving(&sink, |_| true);
    let secret = "sk_live_CUSTOM_9137";
    let error = call_now(
        &gate,
        &shared(&vault),
        "atk_vault.open_checked",
        json!({"door": "front", "pin": secret}),
    )
    .unwrap_err();
    assert_eq!(error.code(), "INVALID_PARAMS");
    let text = format!("{} || {:?}", shown(&error), sink.records());
    assert!(
        !text.contains("sk_live"),
        "the redacted value is quoted back: {text}"
    );
    assert_eq!(vault.ran(), Vec::<String>::new());
}

/// ATTACKS redaction of a map: the agent sends a redacted map of keys whose entry has the wrong type; the
/// map key (the secret, here) is part of the error's path, which goes into the error and the `refused`
/// record ("with the path of the problem, never the value").
#[test]
fn s11_a_bad_entry_of_a_redacted_map_does_not_put_its_key_in_the_path() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink.clone())
        .build()
        .unwrap();
    let error = call_now(
        &gate,
        &shared(&vault),
        "atk_vault.store_keys",
        json!({"owner": "ada", "keys": {"sk_live_MAPKEY_5521": "not a number"}}),
    )
    .unwrap_err();
    assert_eq!(error.code(), "INVALID_PARAMS");
    let text = format!("{} || {:?}", shown(&error), sink.records());
    assert!(
        !text.contains("sk_live"),
        "a redacted map's key is shown: {text}"
    );
    assert_eq!(vault.ran(), Vec::<String>::new());
}

/// ATTACKS redaction of a struct: an unknown key inside a redacted struct argument; the key is the agent's
/// text inside a redacted field, and must stay out of the error and the record.
#[test]
fn s12_an_unknown_key_inside_a_redacted_struct_is_not_shown() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink.clone())
        .build()
        .unwrap();
    let error = call_now(
        &gate,
        &shared(&vault),
        "atk_vault.login",
        json!({"creds": {"user": "ada", "token": "t", "sk_live_UNKNOWN_7310": 1}}),
    )
    .unwrap_err();
    assert_eq!(error.code(), "INVALID_PARAMS");
    let text = format!("{} || {:?}", shown(&error), sink.records());
    assert!(
        !text.contains("sk_live"),
        "a key inside a redacted argument is shown: {text}"
    );
    // A wrong type inside it: the value is not quoted either.
    let error = call_now(
        &gate,
        &shared(&vault),
        "atk_vault.login",
        json!({"creds": {"user": "ada", "token": ["sk_live_TOKEN_7311"]}}),
    )
    .unwrap_err();
    let text = format!("{} || {:?}", shown(&error), sink.records());
    assert!(!text.contains("sk_live"), "{text}");
    assert_eq!(vault.ran(), Vec::<String>::new());
}

// s13 ATTACKED redaction of the receiver with `redact = [self]` on a method: it does not compile
// ("`redact` takes a list of argument names in brackets"), so a receiver cannot be hidden from approvers and
// `record_arguments` records; it fails closed at compile time (no test at run time).

/// ATTACKS strict arguments and the instance: an agent sends `self` (to pick the receiver) or `gate` (to pick
/// the gate) in the arguments of a method called by name. Both are unknown keys: `INVALID_PARAMS` at their
/// path, nothing runs, and each stop at the door leaves a `refused` record, as `NO_INSTANCE` does.
#[test]
fn s14_self_and_gate_sent_as_arguments_are_unknown_keys() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink.clone())
        .build()
        .unwrap();
    let inst = shared(&vault);
    let cases = [
        (
            "atk_vault.peek",
            json!({"self": {"site": "production"}}),
            "self",
        ),
        (
            "atk_vault.stash",
            json!({"item": "x", "self": null}),
            "self",
        ),
        (
            "atk_vault.gated_call",
            json!({"n": 1, "gate": {"mode": "FULL_AUTO"}}),
            "gate",
        ),
    ];
    for (id, args, path) in cases {
        let error = block_on(registry().call_with(&gate, &inst, id, args)).unwrap_err();
        assert_eq!(error.code(), "INVALID_PARAMS", "{id}");
        assert_eq!(
            serde_json::to_value(&error).unwrap()["path"],
            json!(path),
            "{id}"
        );
    }
    let no_instance = call_now(&gate, &Instances::new(), "atk_vault.peek", json!({})).unwrap_err();
    assert_eq!(no_instance.code(), "NO_INSTANCE");
    assert_eq!(vault.ran(), Vec::<String>::new());
    let refused: Vec<_> = sink
        .records()
        .iter()
        .filter(|r| r.stage == Stage::Refused)
        .map(|r| (r.tool.to_string(), r.code.as_deref().map(str::to_string)))
        .collect();
    assert_eq!(
        refused,
        [
            (
                "atk_vault.peek".to_string(),
                Some("INVALID_PARAMS".to_string())
            ),
            ("atk_vault.stash".into(), Some("INVALID_PARAMS".into())),
            ("atk_vault.gated_call".into(), Some("INVALID_PARAMS".into())),
            ("atk_vault.peek".into(), Some("NO_INSTANCE".into())),
        ]
    );
    // With the right arguments, the gate parameter is the call's gate.
    assert_eq!(
        call_now(&gate, &inst, "atk_vault.gated_call", json!({"n": 2})).unwrap(),
        json!(2)
    );
}

fn strict_call(id: &str, args: Value) -> Result<Value, CallError> {
    call_now(
        &Gate::new(Mode::Shadow).unwrap(),
        &Instances::new(),
        id,
        args,
    )
}

/// ATTACKS strict arguments at every depth: an unknown key inside an internally tagged enum
/// (`#[serde(tag = "kind")]`), which serde reads through a buffer.
#[test]
fn s15_an_unknown_key_inside_an_internally_tagged_enum_is_refused() {
    let ok = strict_call(
        "atk_strict.tagged",
        json!({"op": {"kind": "Restart", "service": "web"}}),
    );
    assert!(ok.is_ok(), "{ok:?}");
    let sneaky = strict_call(
        "atk_strict.tagged",
        json!({"op": {"kind": "Restart", "service": "web", "force": true}}),
    );
    assert_eq!(
        sneaky.as_ref().map_err(CallError::code),
        Err("INVALID_PARAMS"),
        "the unknown key `op.force` was ignored and the body ran: {sneaky:?}"
    );
}

/// ATTACKS strict arguments at every depth: an unknown key inside an untagged enum's struct variant.
#[test]
fn s16_an_unknown_key_inside_an_untagged_enum_is_refused() {
    let ok = strict_call(
        "atk_strict.untagged",
        json!({"target": {"host": "db", "port": 5432}}),
    );
    assert!(ok.is_ok(), "{ok:?}");
    let sneaky = strict_call(
        "atk_strict.untagged",
        json!({"target": {"host": "db", "port": 5432, "apiKey": "x"}}),
    );
    assert_eq!(
        sneaky.as_ref().map_err(CallError::code),
        Err("INVALID_PARAMS"),
        "the unknown key `target.apiKey` was ignored and the body ran: {sneaky:?}"
    );
}

/// ATTACKS strict arguments at every depth: an unknown key beside a `#[serde(flatten)]`ed struct.
#[test]
fn s17_an_unknown_key_beside_a_flattened_struct_is_refused() {
    let ok = strict_call(
        "atk_strict.flat",
        json!({"outer": {"name": "n", "limit": 3}}),
    );
    assert!(ok.is_ok(), "{ok:?}");
    let sneaky = strict_call(
        "atk_strict.flat",
        json!({"outer": {"name": "n", "limit": 3, "apiKey": "x"}}),
    );
    assert_eq!(
        sneaky.as_ref().map_err(CallError::code),
        Err("INVALID_PARAMS"),
        "the unknown key `outer.apiKey` was ignored and the body ran: {sneaky:?}"
    );
}

/// ATTACKS strict arguments at every depth (regression, the forms serde reads directly): an externally
/// tagged struct variant, and structs in a `Vec` in an `Option`.
#[test]
fn s18_unknown_keys_in_enum_variants_and_optional_vectors_are_refused() {
    let ok = strict_call(
        "atk_strict.external",
        json!({"action": {"Restart": {"force": true}}, "extra": [{"limit": 1}]}),
    );
    assert!(ok.is_ok(), "{ok:?}");
    for (args, path) in [
        (
            json!({"action": {"Restart": {"force": true, "apiKey": "x"}}}),
            "action.Restart.apiKey",
        ),
        (
            json!({"action": {"Restart": {"force": true}}, "extra": [{"limit": 1}, {"limit": 2, "apiKey": 1}]}),
            "extra[1].apiKey",
        ),
    ] {
        let error = strict_call("atk_strict.external", args).unwrap_err();
        assert_eq!(error.code(), "INVALID_PARAMS");
        let path_seen = serde_json::to_value(&error).unwrap()["path"].clone();
        assert!(
            path_seen.as_str().is_some_and(|p| p.contains("apiKey")),
            "expected {path}, got {path_seen}"
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// attacks: declaration forms and the adapter
// ---------------------------------------------------------------------------------------------------------

/// ATTACKS guarantee 1 (the adapter names the tool so the name can mean nothing else): a `callable` method
/// of a `#[toolset]` trait impl, on a type with an inherent, ungated method of the same name. A call by
/// name must reach the trait's gated `go`, never the inherent one.
#[test]
fn s19_a_trait_methods_adapter_never_calls_an_inherent_method_of_the_same_name() {
    let twin = Arc::new(Twin {
        by_tool: AtomicUsize::new(0),
        by_other: AtomicUsize::new(0),
    });
    let inst = Instances::new().with_shared(Arc::clone(&twin));
    let refused = call_now(
        &Gate::new(Mode::Shadow).unwrap(),
        &inst,
        "atk_twin.go",
        json!({}),
    );
    assert!(refused.is_err());
    let sink = HookSink::default();
    let (gate, _) = approving(&sink, |_| true);
    let ran = call_now(&gate, &inst, "atk_twin.go", json!({}));
    assert_eq!(
        (
            ran.as_ref().ok().cloned(),
            twin.by_tool.load(SeqCst),
            twin.by_other.load(SeqCst)
        ),
        (Some(json!("trait")), 1, 0),
        "the call by name of `atk_twin.go` reached another function: {ran:?}"
    );
}

/// ATTACKS guarantee 1 (no second entry point): a blanket trait in scope of the toolset whose methods have
/// the tools' names (`fetch(&self)` for every type, `burn(self: Arc<Self>)`). A call by name must reach the
/// gated inherent methods, never the blanket ones.
#[test]
fn s20_a_blanket_trait_in_scope_does_not_capture_the_adapter() {
    let decoy = Arc::new(Decoy {
        by_tool: AtomicUsize::new(0),
    });
    let inst = Instances::new().with_shared(Arc::clone(&decoy));
    let before = SNEAK_RAN.load(SeqCst);
    let fetched = call_now(
        &Gate::new(Mode::Shadow).unwrap(),
        &inst,
        "atk_decoy.fetch",
        json!({}),
    );
    let burned = call_now(
        &Gate::new(Mode::Shadow).unwrap(),
        &inst,
        "atk_decoy.burn",
        json!({}),
    );
    assert_eq!(fetched.ok(), Some(json!("tool")));
    assert_eq!(
        burned.as_ref().map_err(CallError::code),
        Err("MODE_NOT_ALLOWED"),
        "{burned:?}"
    );
    assert_eq!(
        SNEAK_RAN.load(SeqCst),
        before,
        "a blanket method answered to a tool's name"
    );
    assert_eq!(decoy.by_tool.load(SeqCst), 1);
}

/// ATTACKS guarantee 5 (a `&Gate` parameter and every ambient gate decide): the same gate parameter written
/// as a renamed import, a type alias, a full path and with a named lifetime. Inside a wide FULL_AUTO gate
/// that approves everything, each is given a SHADOW gate: every form must be refused.
#[test]
fn s21_every_spelling_of_a_gate_parameter_is_the_gate_of_the_call() {
    let vault = Vault::new("staging");
    let narrow = Gate::new(Mode::Shadow).unwrap();
    let wide = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .build()
        .unwrap();
    let results = wide.run(|| {
        [
            ("plain", vault.gp_plain(&narrow)),
            ("renamed import", vault.gp_alias(&narrow)),
            ("type alias", vault.gp_type_alias(&narrow)),
            ("full path", vault.gp_path(&narrow)),
            ("lifetime", vault.gp_life(&narrow)),
        ]
    });
    let through: Vec<_> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(f, _)| *f)
        .collect();
    // Without an ambient gate, the parameter alone decides (and allows with an approver).
    let alone = [
        (
            "renamed import",
            vault.gp_alias(&wide).map_err(|e| e.code().as_str()),
        ),
        (
            "full path",
            vault.gp_path(&wide).map_err(|e| e.code().as_str()),
        ),
    ];
    assert!(
        through.is_empty(),
        "ran despite a SHADOW gate parameter: {through:?}, bodies {:?}; the wide gate given alone: {alone:?}",
        vault.ran()
    );
}

/// ATTACKS guarantee 7 on a generic method with a `&Gate` parameter: a two-step approval for `(staging, 1u32)`
/// runs neither `(staging, 1u64)`, nor `(production, 1u32)`, and runs `(staging, 1u32)` once.
#[test]
fn s22_a_generic_method_with_a_gate_parameter_is_bound_to_receiver_value_and_type() {
    let staging = Vault::new("staging");
    let production = Vault::new("production");
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    let first = staging.put(&gate, 1u32).unwrap_err();
    gate.approve(first.approval_token().unwrap()).unwrap();
    assert_eq!(
        staging.put(&gate, 1u64).unwrap_err().code().as_str(),
        "APPROVAL_PENDING"
    );
    assert_eq!(
        production.put(&gate, 1u32).unwrap_err().code().as_str(),
        "APPROVAL_PENDING"
    );
    assert!(staging.put(&gate, 1u32).is_ok());
    assert_eq!(
        staging.put(&gate, 1u32).unwrap_err().code().as_str(),
        "APPROVAL_REUSED"
    );
    assert_eq!(staging.ran(), ["put:1:u32@staging"]);
    assert_eq!(production.ran(), Vec::<String>::new());
}

/// ATTACKS guarantee 5 (nested gates intersect) from inside a body: a method running under a PARTIAL_AUTO
/// gate calls a HIGH_WRITE tool by name through a FULL_AUTO gate of its own that approves everything, sync
/// and async. The ambient gate still refuses it.
#[test]
fn s23_a_body_calling_a_tool_by_name_through_a_wider_gate_is_refused() {
    for id in ["atk_vault.relay", "atk_vault.arelay"] {
        let vault = Vault::new("front");
        let peer = Vault::new("production");
        *lock(&vault.peer) = Some(Arc::clone(&peer));
        let gate = Gate::new(Mode::PartialAuto).unwrap();
        let answer = block_on(registry().call_with(
            &gate,
            &shared(&vault),
            id,
            json!({"id": "atk_vault.wipe"}),
        ));
        assert_eq!(
            peer.ran(),
            Vec::<String>::new(),
            "{id}: the peer was wiped: {answer:?}"
        );
        assert!(
            answer
                .as_ref()
                .is_ok_and(|a| a.as_str().is_some_and(|s| !s.starts_with("ran"))),
            "{id}: {answer:?}"
        );
    }
}

/// ATTACKS guarantee 4 and "every path passes the gate" for futures of methods moved across threads: a
/// scoped future of an async method made, then the gate lowered, then polled on another thread; and a
/// method's future made inside `run` and polled on another thread, outside it.
#[test]
fn s24_method_futures_moved_across_threads_are_decided_where_and_when_they_run() {
    let vault = Vault::new("staging");
    // Control: not lowered, the scoped future runs on another thread.
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let v = Arc::clone(&vault);
    let fut = gate.scope(async move { v.stash("a".into()).await });
    assert_eq!(
        std::thread::spawn(move || block_on(fut))
            .join()
            .unwrap()
            .unwrap(),
        "a"
    );
    // Lowered before its first poll.
    let v = Arc::clone(&vault);
    let fut = gate.scope(async move { v.stash("b".into()).await });
    gate.lower(Mode::Shadow).unwrap();
    let scoped = std::thread::spawn(move || block_on(fut)).join().unwrap();
    assert_eq!(
        scoped.map_err(|e| e.code().as_str()),
        Err("MODE_NOT_ALLOWED")
    );
    // Made inside `run`, polled outside it: no gate.
    let open = Gate::new(Mode::PartialAuto).unwrap();
    let v = Arc::clone(&vault);
    let escaped = open.run(move || async move { v.stash("d".into()).await });
    let escaped = std::thread::spawn(move || block_on(escaped))
        .join()
        .unwrap();
    assert_eq!(escaped.map_err(|e| e.code().as_str()), Err("NO_GATE"));
    assert_eq!(vault.ran(), ["stash:a@staging"]);
}

/// Ping, async: a free function, for comparison with the method in s30.
#[tool(risk = "LOW_WRITE", callable, domain = "atk_free")]
async fn aping(n: u32) -> Result<u32, Denied> {
    tokio::task::yield_now().await;
    Ok(n)
}

/// ATTACKS the by-name error contract (`CallError::code()`: "the gate's refusal with its own code
/// (`MODE_NOT_ALLOWED`, ...), whatever the tool's error type made of it"; `denied()` gives the refusal) and
/// guarantee 4, with the window between `call_with` (where the gate is asked first) and the first poll of
/// an async call: the gate (not audited, so the tool is allowed outright) is lowered in between, then the
/// call is polled, here and on another thread. The body must not run, and the answer must be the refusal.
#[test]
fn s30_an_async_call_by_name_lowered_before_its_first_poll_answers_the_refusal() {
    let vault = Vault::new("staging");
    let mut seen = Vec::new();
    for (id, args, elsewhere) in [
        ("atk_vault.stash", json!({"item": "c"}), false),
        ("atk_vault.stash", json!({"item": "c"}), true),
        ("atk_free.aping", json!({"n": 1}), false),
    ] {
        let gate = Gate::new(Mode::PartialAuto).unwrap();
        let call = registry().call_with(&gate, &shared(&vault), id, args);
        gate.lower(Mode::Shadow).unwrap();
        let answer = if elsewhere {
            std::thread::spawn(move || block_on(call)).join().unwrap()
        } else {
            block_on(call)
        };
        let error = answer.expect_err(id);
        seen.push((
            id,
            elsewhere,
            error.code(),
            error.denied().map(|d| d.code().as_str()),
        ));
    }
    assert_eq!(
        vault.ran(),
        Vec::<String>::new(),
        "a body ran after the gate was lowered"
    );
    assert!(
        seen.iter()
            .all(|s| s.2 == "MODE_NOT_ALLOWED" && s.3 == Some("MODE_NOT_ALLOWED")),
        "(tool, on another thread, code, denied): {seen:?}"
    );
}

/// ATTACKS the MCP surface of stateful tools: an instance given by value or as a wrong type (`Arc<Vault>`
/// is another type), a gate lowered after the server was built (through another clone), `self` sent as an
/// argument. The body runs only on the instance the server holds, and only as the gate allows now.
#[cfg(feature = "mcp")]
#[test]
fn s25_an_mcp_server_runs_methods_only_on_its_instance_and_only_as_its_gate_allows_now() {
    use toolgate::mcp::ToolgateServer;
    let vault = Vault::new("staging");
    let ours = |m: &toolgate::ToolManifest| m.domain == Some("atk_vault");
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let wrong = ToolgateServer::new(gate.clone())
        .only(ours)
        .instance(Arc::clone(&vault));
    assert!(
        !wrong.serves("atk_vault.peek"),
        "an Arc<Vault> serves Vault's methods"
    );
    assert!(block_on(wrong.call("atk_vault.peek", None)).is_err());
    let server = ToolgateServer::new(gate.clone())
        .only(ours)
        .instances(shared(&vault));
    let ok = block_on(server.call("atk_vault.stash", json!({"item": "x"}).as_object().cloned()))
        .unwrap();
    assert_eq!(ok.is_error, Some(false));
    let injected = block_on(server.call(
        "atk_vault.peek",
        json!({"self": {"site": "production"}}).as_object().cloned(),
    ))
    .unwrap();
    assert_eq!(injected.is_error, Some(true));
    gate.lower(Mode::Shadow).unwrap();
    let names: Vec<String> = server.tools().iter().map(|t| t.name.to_string()).collect();
    assert!(!names.contains(&"atk_vault.stash".to_string()), "{names:?}");
    let refused =
        block_on(server.call("atk_vault.stash", json!({"item": "y"}).as_object().cloned()))
            .unwrap();
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(
        refused.structured_content.unwrap()["code"],
        json!("MODE_NOT_ALLOWED")
    );
    assert_eq!(vault.ran(), ["stash:x@staging"]);
}

/// ATTACKS "every point where user code runs between the decision and the body": an instance whose `Clone`
/// lowers the gate. If an instance were cloned after the decision, the lowered gate must refuse the call.
#[test]
fn s26_an_instance_whose_clone_lowers_the_gate() {
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let clones = Arc::new(AtomicUsize::new(0));
    let sheared = Arc::new(AtomicUsize::new(0));
    let sheep = Sheep {
        lower_on_clone: Mutex::new(Some(gate.clone())),
        clones: Arc::clone(&clones),
        sheared: Arc::clone(&sheared),
    };
    let inst = Instances::new().with(sheep);
    let by_name = call_now(&gate, &inst, "atk_sheep.shear", json!({}));
    #[cfg(feature = "mcp")]
    let _ = block_on(
        toolgate::mcp::ToolgateServer::new(gate.clone())
            .instances(inst.clone())
            .call("atk_sheep.shear", None),
    );
    let (c, s) = (clones.load(SeqCst), sheared.load(SeqCst));
    assert!(
        c == 0 || (s == 0 && gate.mode() == Mode::Shadow),
        "the instance was cloned {c} times (gate now {:?}) and the body ran {s} times: {by_name:?}",
        gate.mode()
    );
}

/// ATTACKS approvers that re-enter tools: while deciding `wipe` on staging, the approver calls `wipe` on
/// production, directly and by name. Each nested call is decided on its own (and rejected: production), and
/// every body that ran was approved with its own receiver.
#[test]
fn s27_an_approver_calling_the_method_on_another_receiver() {
    let staging = Vault::new("staging");
    let production = Vault::new("production");
    let sink = HookSink::default();
    let slot: Arc<Mutex<Option<Gate>>> = Arc::default();
    let (s, p) = (Arc::clone(&slot), Arc::clone(&production));
    let depth = Arc::new(AtomicUsize::new(0));
    let (gate, asked) = approving(&sink, move |r| {
        if depth.fetch_add(1, SeqCst) == 0
            && let Some(g) = lock(&s).clone()
        {
            let _ = g.run(|| p.wipe());
            let _ = call_now(&g, &shared(&p), "atk_vault.wipe", json!({}));
        }
        depth.fetch_sub(1, SeqCst);
        r.arguments.is_some_and(|a| a.contains("\"staging\""))
    });
    *lock(&slot) = Some(gate.clone());
    assert_eq!(
        call_now(&gate, &shared(&staging), "atk_vault.wipe", json!({})).unwrap(),
        json!("staging")
    );
    assert_eq!(production.ran(), Vec::<String>::new());
    assert_eq!(staging.ran(), ["wipe@staging"]);
    assert_eq!(lock(&asked).len(), 3, "{:?}", lock(&asked));
    assert_balanced(&sink.records());
    *lock(&slot) = None;
}

/// ATTACKS escalation on a method called by name (`escalate` with a borrowed `&str` parameter): the gate
/// lets the declared LOW_WRITE through before the arguments are read, then the arguments raise the call to
/// HIGH_WRITE: refused in PARTIAL_AUTO, by name and directly; in FULL_AUTO the approver is asked at the raised
/// risk.
#[test]
fn s28_an_escalated_method_by_name_is_judged_at_its_raised_risk() {
    let vault = Vault::new("staging");
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let sudo = call_now(
        &gate,
        &shared(&vault),
        "atk_vault.run",
        json!({"command": "sudo rm -rf /"}),
    );
    assert_eq!(sudo.map_err(|e| e.code()), Err("ABOVE_CEILING"));
    assert_eq!(
        gate.run(|| vault.run("sudo ls".into()))
            .unwrap_err()
            .code()
            .as_str(),
        "ABOVE_CEILING"
    );
    assert!(
        call_now(
            &gate,
            &shared(&vault),
            "atk_vault.run",
            json!({"command": "ls"})
        )
        .is_ok()
    );
    let sink = HookSink::default();
    let (full, asked) = approving(&sink, |_| false);
    let rejected = call_now(
        &full,
        &shared(&vault),
        "atk_vault.run",
        json!({"command": "sudo ls"}),
    );
    assert_eq!(rejected.map_err(|e| e.code()), Err("APPROVAL_REJECTED"));
    assert_eq!(lock(&asked)[0].3, Risk::HighWrite);
    assert_eq!(vault.ran(), ["run@staging"]);
}

/// ATTACKS guarantee 8 for methods by name: the `enter` record is written before the body (the sink checks
/// that no body ran yet when it is written), sync and async; a sink that cannot write refuses the call.
#[test]
fn s29_a_methods_enter_is_written_before_its_body_and_a_failing_sink_refuses() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let v = Arc::clone(&vault);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    *lock(&sink.check) = Some(Box::new(move |_r: &AuditRecord| {
        lock(&s).push(v.ran().len())
    }));
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink.clone())
        .build()
        .unwrap();
    call_now(&gate, &shared(&vault), "atk_vault.peek", json!({})).unwrap();
    block_on(registry().call_with(
        &gate,
        &shared(&vault),
        "atk_vault.stash",
        json!({"item": "i"}),
    ))
    .unwrap();
    assert_eq!(
        *lock(&seen),
        [0, 1],
        "an enter record was written after its body started"
    );
    let records = sink.records();
    assert_balanced(&records);
    assert!(
        records
            .iter()
            .filter(|r| r.stage == Stage::Exit)
            .all(|r| r.outcome == Some(Outcome::Ok))
    );
    let failing = toolgate::audit::MemorySink::new();
    failing.fail(true);
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(failing)
        .build()
        .unwrap();
    let refused = block_on(registry().call_with(
        &gate,
        &shared(&vault),
        "atk_vault.stash",
        json!({"item": "j"}),
    ));
    assert_eq!(refused.map_err(|e| e.code()), Err("AUDIT_UNAVAILABLE"));
    assert_eq!(vault.ran(), ["peek@staging", "stash:i@staging"]);
}
