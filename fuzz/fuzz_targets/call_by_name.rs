//! Calls tools by name with fuzzed JSON, under gates of every mode, deny list, approver and audit sink,
//! and checks each result against a model of the policy written out here, apart from the crate's own.
//!
//! Input: six configuration bytes, then calls, each after a newline: a byte that picks the tool, then the
//! arguments as JSON text, or (when they are not JSON) bytes from which arguments are built.
//!
//! Checked for every call:
//! - no panic;
//! - a refused call never runs the body (each body counts its runs);
//! - the result is `Ok` only where the model allows the tool in the gate's mode, and then it is the value
//!   the body computes from the arguments the model read;
//! - a refusal carries the code the model predicts;
//! - arguments with an unknown key, or otherwise not the tool's parameters, are always `INVALID_PARAMS`;
//! - with an audit sink, every run leaves one `enter` and one `exit` record.

#![no_main]

use std::fmt;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use toolgate::audit::{MemorySink, Stage};
use toolgate::schemars::JsonSchema;
use toolgate::serde::Deserialize;
use toolgate::{
    AllowAllApprover, Approval, ApprovalRequest, CallError, Denied, Gate, Mode, Risk, registry,
    tool,
};

// ---------------------------------------------------------------------------------------------------
// The tools
// ---------------------------------------------------------------------------------------------------

#[derive(Debug)]
enum FzError {
    Refused(#[allow(dead_code)] Denied),
    NotFound(u64),
}

impl From<Denied> for FzError {
    fn from(denied: Denied) -> Self {
        FzError::Refused(denied)
    }
}

/// Says nothing of the refusal: a call by name must find the code on its own.
impl fmt::Display for FzError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FzError::Refused(_) => f.write_str("refused"),
            FzError::NotFound(id) => write!(f, "no record {id}"),
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "toolgate::serde", deny_unknown_fields)]
#[schemars(crate = "toolgate::schemars")]
struct Filter {
    limit: u32,
    prefix: String,
}

const READ: usize = 0;
const LIST: usize = 1;
const WRITE: usize = 2;
const DELETE: usize = 3;
const NARROW: usize = 4;
const RELAY: usize = 5;
const EXEC: usize = 6;
const UNIT: usize = 7;
const PLAIN: usize = 8;
const TOOLS: usize = 9;

static RUNS: [AtomicUsize; TOOLS] = [const { AtomicUsize::new(0) }; TOOLS];

fn ran(tool: usize) {
    RUNS[tool].fetch_add(1, Ordering::SeqCst);
}

/// Sync, one integer; 404 is a handler error.
#[tool(risk = "READ_ONLY", domain = "fz", callable)]
fn read(id: u64) -> Result<u64, FzError> {
    ran(READ);
    match id {
        404 => Err(FzError::NotFound(id)),
        _ => Ok(id.wrapping_add(1)),
    }
}

/// Async, a `Vec` and an optional argument.
#[tool(risk = "PROPOSE_ONLY", domain = "fz", callable)]
async fn list(
    items: Vec<String>,
    note: Option<String>,
) -> Result<(usize, Option<String>), FzError> {
    ran(LIST);
    Ok((items.len(), note))
}

/// Sync, a struct argument.
#[tool(risk = "LOW_WRITE", domain = "fz", callable)]
fn write(filter: Filter) -> Result<String, FzError> {
    ran(WRITE);
    Ok(format!("{}:{}", filter.limit, filter.prefix))
}

/// Async, needs an approval, FULL_AUTO only.
#[tool(risk = "HIGH_WRITE", domain = "fz", callable)]
async fn delete(ids: Vec<u64>) -> Result<u64, FzError> {
    ran(DELETE);
    Ok(ids.iter().fold(0u64, |sum, id| sum.wrapping_add(*id)))
}

/// Allowed in fewer modes than its risk admits.
#[tool(risk = "LOW_WRITE", domain = "fz", modes = [PARTIAL_AUTO], callable)]
fn narrow(flag: bool) -> Result<bool, FzError> {
    ran(NARROW);
    Ok(!flag)
}

/// Calls another tool by name from inside its body, through the gate it is given.
#[tool(risk = "READ_ONLY", domain = "fz", callable)]
fn relay(gate: &Gate, target: String, id: u64) -> Result<Value, FzError> {
    ran(RELAY);
    let inner = block_on(registry().call(gate, &target, json!({ "id": id })));
    Ok(match inner {
        Ok(value) => json!({ "ok": value }),
        Err(error) => json!({ "err": error.code() }),
    })
}

#[allow(clippy::ptr_arg)]
fn classify(cmd: &String) -> Risk {
    match cmd.as_str() {
        c if c.starts_with("rm") => Risk::HighWrite,
        "ro" => Risk::ReadOnly,
        _ => Risk::LowWrite,
    }
}

/// Its arguments can raise its risk.
#[tool(risk = "LOW_WRITE", domain = "fz", escalate = classify, callable)]
fn exec(cmd: String) -> Result<String, FzError> {
    ran(EXEC);
    Ok(format!("ran {cmd}"))
}

/// No parameters; two modes with a gap between them.
#[tool(risk = "READ_ONLY", domain = "fz", modes = [SHADOW, FULL_AUTO], callable)]
fn unit() -> Result<(), FzError> {
    ran(UNIT);
    Ok(())
}

/// Not callable by name.
#[tool(risk = "READ_ONLY", domain = "fz")]
#[allow(dead_code)] // Registered, never called: a call by name must answer NOT_CALLABLE.
fn plain(n: u32) -> Result<u32, FzError> {
    ran(PLAIN);
    Ok(n)
}

fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..64 {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
    panic!("a tool's future stayed pending, though nothing it awaits can block");
}

// ---------------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Ty {
    U64,
    Bool,
    Str,
    OptStr,
    VecStr,
    VecU64,
    Filter,
}

struct Spec {
    id: &'static str,
    /// 0 READ_ONLY ..= 3 HIGH_WRITE.
    risk: u8,
    /// Bit `mode` set where the tool's manifest allows it (SHADOW = 0 ..= FULL_AUTO = 3).
    modes: u8,
    params: &'static [(&'static str, Ty)],
    callable: bool,
    explicit_gate: bool,
}

const SPECS: [Spec; TOOLS] = [
    Spec {
        id: "fz.read",
        risk: 0,
        modes: 0b1111,
        params: &[("id", Ty::U64)],
        callable: true,
        explicit_gate: false,
    },
    Spec {
        id: "fz.list",
        risk: 1,
        modes: 0b1111,
        params: &[("items", Ty::VecStr), ("note", Ty::OptStr)],
        callable: true,
        explicit_gate: false,
    },
    Spec {
        id: "fz.write",
        risk: 2,
        modes: 0b1100,
        params: &[("filter", Ty::Filter)],
        callable: true,
        explicit_gate: false,
    },
    Spec {
        id: "fz.delete",
        risk: 3,
        modes: 0b1000,
        params: &[("ids", Ty::VecU64)],
        callable: true,
        explicit_gate: false,
    },
    Spec {
        id: "fz.narrow",
        risk: 2,
        modes: 0b0100,
        params: &[("flag", Ty::Bool)],
        callable: true,
        explicit_gate: false,
    },
    Spec {
        id: "fz.relay",
        risk: 0,
        modes: 0b1111,
        params: &[("target", Ty::Str), ("id", Ty::U64)],
        callable: true,
        explicit_gate: true,
    },
    Spec {
        id: "fz.exec",
        risk: 2,
        modes: 0b1100,
        params: &[("cmd", Ty::Str)],
        callable: true,
        explicit_gate: false,
    },
    Spec {
        id: "fz.unit",
        risk: 0,
        modes: 0b1001,
        params: &[],
        callable: true,
        explicit_gate: false,
    },
    Spec {
        id: "fz.plain",
        risk: 0,
        modes: 0b1111,
        params: &[("n", Ty::U64)],
        callable: false,
        explicit_gate: false,
    },
];

/// Deny lists, with the tools each one refuses, worked out by hand.
const DENY_LISTS: [(&[&str], &[&str]); 7] = [
    (&[], &[]),
    (&["fz.delete"], &["fz.delete"]),
    (&["fz.*"], &["fz.*"]),
    (&["fz.w?ite"], &["fz.write"]),
    (&["*.re*"], &["fz.read", "fz.relay"]),
    (&["fz.list", "fz.exec"], &["fz.list", "fz.exec"]),
    (&["fz.read"], &["fz.read"]),
];

#[derive(Clone, Copy, PartialEq)]
enum ApproverKind {
    None,
    AllowAll,
    Reject,
    TwoStep,
}

#[derive(Clone, Copy, PartialEq)]
enum AuditKind {
    None,
    Recording,
    Failing,
}

/// What the model knows of one gate.
#[derive(Clone, Copy)]
struct GateModel {
    mode: u8,
    deny: usize,
    approver: ApproverKind,
    audit: AuditKind,
}

impl GateModel {
    fn denies(&self, id: &str) -> bool {
        DENY_LISTS[self.deny]
            .1
            .iter()
            .any(|d| *d == id || *d == "fz.*")
    }

    /// The policy's refusal code, if the policy refuses a call of `spec` at `risk`.
    /// What the gate's table refuses, before the arguments are read: the declared risk, and an
    /// approval only where the gate has no way to get one.
    fn table_refusal(&self, spec: &Spec) -> Option<&'static str> {
        match self.refusal(spec, spec.risk) {
            Some("APPROVAL_REJECTED") => None,
            Some("APPROVAL_PENDING") => None,
            other => other,
        }
    }

    fn refusal(&self, spec: &Spec, risk: u8) -> Option<&'static str> {
        let ceiling = [1, 1, 2, 3][usize::from(self.mode)];
        if self.denies(spec.id) {
            Some("DENY_LISTED")
        } else if spec.modes >> self.mode & 1 == 0 {
            Some("MODE_NOT_ALLOWED")
        } else if risk > ceiling {
            Some("ABOVE_CEILING")
        } else if risk == 3 {
            match self.approver {
                ApproverKind::AllowAll => None,
                ApproverKind::Reject => Some("APPROVAL_REJECTED"),
                ApproverKind::None => Some("APPROVAL_REQUIRED"),
                ApproverKind::TwoStep => Some("APPROVAL_PENDING"),
            }
        } else {
            None
        }
    }
}

struct Model {
    inner: GateModel,
    outer: Option<GateModel>,
    runs: [usize; TOOLS],
    /// The last refusal came from the two-step gate asking for an approval: it carries a token.
    token: bool,
    /// The last refusal came before the arguments were read.
    before_arguments: bool,
}

#[derive(Debug, PartialEq)]
enum Expect {
    Ok(Value),
    Err(&'static str),
}

impl Model {
    fn call(&mut self, id: &str, args: &Value) -> Expect {
        self.token = false;
        self.before_arguments = false;
        let Some(index) = SPECS.iter().position(|s| s.id == id) else {
            return Expect::Err("UNKNOWN_TOOL");
        };
        let spec = &SPECS[index];
        if !spec.callable {
            return Expect::Err("NOT_CALLABLE");
        }
        // The gates' tables are asked before the arguments are read, in the order of the decision.
        let (inner, outer) = (Some(self.inner), self.outer);
        let gates = match spec.explicit_gate {
            false => [outer, inner],
            true => [inner, outer],
        };
        if let Some(code) = gates.iter().flatten().find_map(|g| g.table_refusal(spec)) {
            self.before_arguments = true;
            return Expect::Err(code);
        }
        let Some(args) = parse_args(spec, args) else {
            return Expect::Err("INVALID_PARAMS");
        };
        let risk = match index {
            EXEC => match args["cmd"].as_str().unwrap_or_default() {
                c if c.starts_with("rm") => 3,
                _ => 2,
            },
            _ => spec.risk,
        };
        // Gates decide in order (a tool's own `&Gate` first); the first refusal is the call's.
        let first_refusal = gates.iter().flatten().find_map(|g| g.refusal(spec, risk));
        if let Some(code) = first_refusal {
            self.token = code == "APPROVAL_PENDING";
            return Expect::Err(code);
        }
        if gates
            .iter()
            .flatten()
            .any(|g| g.audit == AuditKind::Failing)
        {
            return Expect::Err("AUDIT_UNAVAILABLE");
        }
        self.runs[index] += 1;
        let u64_of = |name: &str| args[name].as_u64().expect("checked by parse_args");
        match index {
            READ => match u64_of("id") {
                404 => Expect::Err("HANDLER_ERROR"),
                id => Expect::Ok(json!(id.wrapping_add(1))),
            },
            LIST => {
                let count = args["items"].as_array().map_or(0, Vec::len);
                let note = args.get("note").cloned().unwrap_or(Value::Null);
                Expect::Ok(json!([count, note]))
            }
            WRITE => {
                let filter = &args["filter"];
                let (limit, prefix) = match filter {
                    Value::Array(items) => (&items[0], &items[1]),
                    _ => (&filter["limit"], &filter["prefix"]),
                };
                Expect::Ok(json!(format!(
                    "{}:{}",
                    limit.as_u64().unwrap_or_default(),
                    prefix.as_str().unwrap_or_default()
                )))
            }
            DELETE => {
                let sum = args["ids"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_u64)
                    .fold(0u64, u64::wrapping_add);
                Expect::Ok(json!(sum))
            }
            NARROW => Expect::Ok(json!(!args["flag"].as_bool().unwrap_or_default())),
            RELAY => {
                let target = args["target"].as_str().unwrap_or_default().to_owned();
                let inner = self.call(&target, &json!({ "id": u64_of("id") }));
                Expect::Ok(match inner {
                    Expect::Ok(value) => json!({ "ok": value }),
                    Expect::Err(code) => json!({ "err": code }),
                })
            }
            EXEC => Expect::Ok(json!(format!(
                "ran {}",
                args["cmd"].as_str().unwrap_or_default()
            ))),
            UNIT => Expect::Ok(Value::Null),
            PLAIN => unreachable!("not callable"),
            _ => unreachable!("no such tool"),
        }
    }
}

fn matches_ty(ty: Ty, value: &Value) -> bool {
    match ty {
        Ty::U64 => value.as_u64().is_some(),
        Ty::Bool => value.is_boolean(),
        Ty::Str => value.is_string(),
        Ty::OptStr => value.is_null() || value.is_string(),
        Ty::VecStr => value
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string)),
        Ty::VecU64 => value
            .as_array()
            .is_some_and(|items| items.iter().all(|i| i.as_u64().is_some())),
        Ty::Filter => {
            let limit_ok = |v: &Value| v.as_u64().is_some_and(|n| n <= u64::from(u32::MAX));
            match value {
                Value::Object(fields) => {
                    fields.len() == 2
                        && fields.get("limit").is_some_and(limit_ok)
                        && fields.get("prefix").is_some_and(Value::is_string)
                }
                // `Filter` is a plain serde struct: serde also reads it from a sequence.
                Value::Array(items) => {
                    items.len() == 2 && limit_ok(&items[0]) && items[1].is_string()
                }
                _ => false,
            }
        }
    }
}

/// The arguments as an object of exactly the tool's parameters, or `None` where they are not.
///
/// An object with a key that is not a parameter is never valid.
fn parse_args(spec: &Spec, args: &Value) -> Option<Map<String, Value>> {
    let Value::Object(fields) = args else {
        return None;
    };
    if fields
        .keys()
        .any(|key| !spec.params.iter().any(|(name, _)| name == key))
    {
        return None;
    }
    for &(name, ty) in spec.params {
        match fields.get(name) {
            Some(value) if matches_ty(ty, value) => {}
            None if ty == Ty::OptStr => {}
            _ => return None,
        }
    }
    Some(fields.clone())
}

fn has_unknown_key(spec: &Spec, args: &Value) -> bool {
    args.as_object().is_some_and(|fields| {
        fields
            .keys()
            .any(|key| !spec.params.iter().any(|(name, _)| name == key))
    })
}

// ---------------------------------------------------------------------------------------------------
// Arguments from bytes
// ---------------------------------------------------------------------------------------------------

const KEYS: [&str; 14] = [
    "id", "items", "note", "filter", "limit", "prefix", "ids", "flag", "target", "cmd", "", "ID",
    "id ", "n",
];

fn gen_string(u: &mut Unstructured<'_>) -> ArbResult<String> {
    Ok(match u.int_in_range(0..=3)? {
        0 => (*u.choose(&KEYS)?).to_owned(),
        1 => {
            (*u.choose(&["fz.read", "fz.relay", "fz.unit", "fz.plain", "rm -rf", "ro"])?).to_owned()
        }
        _ => u.arbitrary()?,
    })
}

fn gen_json(u: &mut Unstructured<'_>, depth: u32) -> ArbResult<Value> {
    let nested = depth < 4;
    Ok(match u.int_in_range(0..=if nested { 8 } else { 6 })? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => json!(u.arbitrary::<u64>()?),
        3 => json!(u.arbitrary::<i64>()?),
        4 => json!(u.arbitrary::<u32>()?),
        5 => serde_json::Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        6 => Value::String(gen_string(u)?),
        7 => {
            let len = u.int_in_range(0..=4)?;
            Value::Array(
                (0..len)
                    .map(|_| gen_json(u, depth + 1))
                    .collect::<ArbResult<_>>()?,
            )
        }
        _ => {
            let len = u.int_in_range(0..=4)?;
            let mut fields = Map::new();
            for _ in 0..len {
                fields.insert(gen_string(u)?, gen_json(u, depth + 1)?);
            }
            Value::Object(fields)
        }
    })
}

fn gen_valid(u: &mut Unstructured<'_>, ty: Ty) -> ArbResult<Value> {
    Ok(match ty {
        Ty::U64 => json!(u.arbitrary::<u64>()?),
        Ty::Bool => json!(u.arbitrary::<bool>()?),
        Ty::Str => json!(gen_string(u)?),
        Ty::OptStr => match u.arbitrary::<bool>()? {
            true => json!(gen_string(u)?),
            false => Value::Null,
        },
        Ty::VecStr => json!(
            (0..u.int_in_range(0..=3)?)
                .map(|_| gen_string(u))
                .collect::<ArbResult<Vec<_>>>()?
        ),
        Ty::VecU64 => json!(u.arbitrary::<Vec<u64>>()?),
        Ty::Filter => json!({ "limit": u.arbitrary::<u32>()?, "prefix": gen_string(u)? }),
    })
}

/// Arguments for `spec`: well formed, then perhaps spoilt in one way.
fn gen_args(u: &mut Unstructured<'_>, spec: Option<&Spec>) -> ArbResult<Value> {
    let Some(spec) = spec.filter(|_| u.ratio(3, 4).unwrap_or(false)) else {
        return gen_json(u, 0);
    };
    let mut fields = Map::new();
    for &(name, ty) in spec.params {
        if ty == Ty::OptStr && u.arbitrary()? {
            continue;
        }
        fields.insert(name.to_owned(), gen_valid(u, ty)?);
    }
    match u.int_in_range(0..=6)? {
        0 => {
            fields.insert(gen_string(u)?, gen_json(u, 1)?);
        }
        1 if !fields.is_empty() => {
            let key = u.choose_iter(fields.keys().cloned())?;
            fields.remove(&key);
        }
        2 if !fields.is_empty() => {
            let key = u.choose_iter(fields.keys().cloned())?;
            fields.insert(key, gen_json(u, 1)?);
        }
        3 => return Ok(Value::Array(fields.into_values().collect())),
        4 => return Ok(Value::Null),
        _ => {}
    }
    Ok(Value::Object(fields))
}

// ---------------------------------------------------------------------------------------------------
// The target
// ---------------------------------------------------------------------------------------------------

const MODES: [Mode; 4] = [
    Mode::Shadow,
    Mode::Advisory,
    Mode::PartialAuto,
    Mode::FullAuto,
];

fn build_gate(model: &GateModel, sink: &MemorySink) -> Gate {
    let mut builder = Gate::builder().mode(MODES[usize::from(model.mode)]);
    for rule in DENY_LISTS[model.deny].0 {
        builder = builder.deny(*rule);
    }
    builder = match model.approver {
        ApproverKind::None => builder,
        ApproverKind::AllowAll => builder.approver(AllowAllApprover),
        ApproverKind::Reject => {
            builder.approver(|_: &ApprovalRequest<'_>| Approval::Reject("no".to_owned()))
        }
        ApproverKind::TwoStep => builder.two_step_approvals(),
    };
    if model.audit != AuditKind::None {
        builder = builder.audit(sink.clone());
    }
    builder
        .build()
        .expect("every deny list matches a linked tool")
}

fn counts() -> [usize; TOOLS] {
    std::array::from_fn(|i| RUNS[i].load(Ordering::SeqCst))
}

fuzz_target!(|data: &[u8]| {
    let (config, calls) = data.split_at(data.len().min(6));
    let byte = |i: usize| config.get(i).copied().unwrap_or(0);
    let mut inner = GateModel {
        mode: byte(0) % 4,
        deny: usize::from(byte(1)) % DENY_LISTS.len(),
        approver: [
            ApproverKind::None,
            ApproverKind::AllowAll,
            ApproverKind::Reject,
            ApproverKind::TwoStep,
        ][usize::from(byte(2) % 4)],
        audit: [AuditKind::None, AuditKind::Recording, AuditKind::Failing]
            [usize::from(byte(3) % 3)],
    };
    let outer = match byte(4) % 5 {
        0 => None,
        m => Some(GateModel {
            mode: m - 1,
            deny: 0,
            approver: ApproverKind::None,
            audit: AuditKind::None,
        }),
    };
    let sink = MemorySink::new();
    sink.fail(inner.audit == AuditKind::Failing);
    let gate = build_gate(&inner, &sink);
    let outer_gate = outer.map(|o| build_gate(&o, &MemorySink::new()));
    if let Some(to) = (byte(5) % 5).checked_sub(1) {
        let lowered = gate.lower(MODES[usize::from(to)]);
        assert_eq!(
            lowered.is_err(),
            to > inner.mode,
            "only a lower mode is taken"
        );
        inner.mode = inner.mode.min(to);
    }
    assert_eq!(gate.mode(), MODES[usize::from(inner.mode)]);

    let mut model = Model {
        inner,
        outer,
        runs: [0; TOOLS],
        token: false,
        before_arguments: false,
    };
    let before = counts();
    for line in calls.split(|&b| b == b'\n').skip(1).take(8) {
        let Some((&selector, rest)) = line.split_first() else {
            continue;
        };
        let selector = usize::from(selector) % (TOOLS + 2);
        let id = match selector {
            TOOLS => "fz.nope",
            s if s > TOOLS => "FZ.READ",
            s => SPECS[s].id,
        };
        let spec = SPECS.get(selector);
        let args = match serde_json::from_slice::<Value>(rest) {
            Ok(args) => args,
            Err(_) => match gen_args(&mut Unstructured::new(rest), spec) {
                Ok(args) => args,
                Err(_) => continue,
            },
        };
        let expected = model.call(id, &args);
        let runs_before = counts();
        let call = || block_on(registry().call(&gate, id, args.clone()));
        let result = match &outer_gate {
            Some(outer) => outer.run(call),
            None => call(),
        };
        let code = result.as_ref().err().map(CallError::code);
        let read = !model.before_arguments;
        if let Some(spec) = spec.filter(|s| read && s.callable && has_unknown_key(s, &args)) {
            assert_eq!(
                code,
                Some("INVALID_PARAMS"),
                "{}: unknown key in {args}",
                spec.id
            );
        }
        match (&result, &expected) {
            (Ok(value), Expect::Ok(want)) => assert_eq!(value, want, "{id} {args}"),
            (Err(error), Expect::Err(want)) => {
                assert_eq!(error.code(), *want, "{id} {args}: {error}")
            }
            _ => panic!("{id} {args}: got {result:?}, the model expects {expected:?}"),
        }
        if let Err(CallError::Denied(denied)) = &result {
            assert_eq!(denied.approval_token().is_some(), model.token, "{denied}");
        }
        if let Err(error) = &result {
            let shown = serde_json::to_value(error).expect("a CallError serializes");
            assert_eq!(shown["code"], json!(error.code()));
        }
        let runs_after = counts();
        let moved = runs_after.iter().zip(runs_before).any(|(a, b)| *a != b);
        let refused = matches!(expected, Expect::Err(c) if c != "HANDLER_ERROR");
        assert!(!(refused && moved), "{id} {args}: refused, yet a body ran");
    }
    let ran: Vec<usize> = counts().iter().zip(before).map(|(a, b)| a - b).collect();
    assert_eq!(ran, model.runs, "body runs, by tool");
    if inner.audit == AuditKind::Recording {
        let records = sink.records();
        for (index, spec) in SPECS.iter().enumerate() {
            let count = |stage: Stage| {
                records
                    .iter()
                    .filter(|r| r.stage == stage && r.tool == spec.id)
                    .count()
            };
            assert_eq!(
                count(Stage::Enter),
                ran[index],
                "enter records of {}",
                spec.id
            );
            assert_eq!(
                count(Stage::Exit),
                ran[index],
                "exit records of {}",
                spec.id
            );
        }
    }
});
