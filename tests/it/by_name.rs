//! Calling tools by name with JSON arguments: the same gate, deny list, approvals and audit as a direct
//! call, strict arguments with precise error paths, and the tools' JSON Schemas.
//!
//! Every tool body counts its runs in its own static counter, so that a test can tell that a refused or
//! malformed call never reached the body. Tests take [`serial`] first, since the counters are shared.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolgate::audit::{AuditRecord, MemorySink, Stage};
use toolgate::schemars::JsonSchema;
use toolgate::serde::{Deserialize, Serialize};
use toolgate::{Approval, ApprovalRequest, CallError, Denied, Gate, Mode, registry, tool, toolset};

use crate::common::gates;
use crate::common::serial;

// ---------------------------------------------------------------------------------------------------------
// Test support
// ---------------------------------------------------------------------------------------------------------

/// One test at a time: each checks how often a tool body ran, and the counters are process-wide.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How many times `counter` moved while `f` ran.
fn runs<R>(counter: &AtomicUsize, f: impl FnOnce() -> R) -> (R, usize) {
    let before = counter.load(Ordering::SeqCst);
    let result = f();
    (result, counter.load(Ordering::SeqCst) - before)
}

/// A sync call by name, which must have completed without being polled.
fn call(gate: &Gate, id: &str, arguments: Value) -> Result<Value, CallError> {
    registry()
        .call(gate, id, arguments)
        .now()
        .expect("a sync tool's call completes at once")
}

fn invalid_params(error: &CallError) -> (&str, &str) {
    match error {
        CallError::InvalidParams { path, message } => (path, message),
        other => panic!("expected INVALID_PARAMS, got {} ({other})", other.code()),
    }
}

fn gate_in(mode: Mode) -> Gate {
    Gate::new(mode).unwrap()
}

// ---------------------------------------------------------------------------------------------------------
// The tools
// ---------------------------------------------------------------------------------------------------------

#[derive(Debug)]
enum AppError {
    Refused(Denied),
    NotFound(u64),
    /// A message that quotes the caller's text.
    Quoting(String),
}

impl From<Denied> for AppError {
    fn from(denied: Denied) -> Self {
        AppError::Refused(denied)
    }
}

/// Deliberately says nothing of the refusal, so that a call by name must find its code elsewhere.
impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Refused(_) => f.write_str("refused"),
            AppError::NotFound(id) => write!(f, "no user with id {id}"),
            AppError::Quoting(text) => write!(f, "no note `{text}`"),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
struct User {
    id: u64,
    name: String,
}

/// Serializable, with no JSON Schema.
#[derive(Debug, Serialize)]
#[serde(crate = "toolgate::serde")]
struct Export {
    rows: u32,
}

/// Which users to search.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
struct Filter {
    /// The most users to return.
    limit: u32,
    /// Only names that start with this.
    prefix: String,
}

static GETS: AtomicUsize = AtomicUsize::new(0);

/// Look a user up.
#[tool(risk = "READ_ONLY", domain = "users", callable)]
fn get(id: u64) -> Result<User, AppError> {
    GETS.fetch_add(1, Ordering::SeqCst);
    match id {
        404 => Err(AppError::NotFound(id)),
        _ => Ok(User {
            id,
            name: format!("user{id}"),
        }),
    }
}

static RENAMES: AtomicUsize = AtomicUsize::new(0);

/// Rename a user.
#[tool(risk = "LOW_WRITE", domain = "users", callable)]
fn rename(id: u64, name: String) -> Result<String, AppError> {
    RENAMES.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{id} is now {name}"))
}

static DELETES: AtomicUsize = AtomicUsize::new(0);

/// Delete a user account.
#[tool(risk = "HIGH_WRITE", domain = "users", callable)]
fn delete(id: u64) -> Result<(), AppError> {
    let _ = id;
    DELETES.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

static SEARCHES: AtomicUsize = AtomicUsize::new(0);

/// Search users.
#[tool(risk = "READ_ONLY", domain = "users", callable)]
fn search(filter: Filter, ids: Vec<u64>, note: Option<String>) -> Result<Value, AppError> {
    SEARCHES.fetch_add(1, Ordering::SeqCst);
    Ok(json!({
        "limit": filter.limit,
        "prefix": filter.prefix,
        "ids": ids,
        "note": note,
    }))
}

static EXPORTS: AtomicUsize = AtomicUsize::new(0);

/// Export the users.
#[tool(risk = "READ_ONLY", domain = "users", callable)]
fn export() -> Result<Export, AppError> {
    EXPORTS.fetch_add(1, Ordering::SeqCst);
    Ok(Export { rows: 7 })
}

static COUNTS: AtomicUsize = AtomicUsize::new(0);

/// Count the users; not callable by name.
#[tool(risk = "READ_ONLY", domain = "users")]
fn count() -> Result<u64, AppError> {
    COUNTS.fetch_add(1, Ordering::SeqCst);
    Ok(3)
}

static FETCHES: AtomicUsize = AtomicUsize::new(0);

/// Fetch a user from a slow store.
#[tool(risk = "READ_ONLY", domain = "store", callable)]
async fn fetch(id: u64) -> Result<User, AppError> {
    tokio::task::yield_now().await;
    FETCHES.fetch_add(1, Ordering::SeqCst);
    match id {
        404 => Err(AppError::NotFound(id)),
        _ => Ok(User {
            id,
            name: format!("stored{id}"),
        }),
    }
}

static PURGES: AtomicUsize = AtomicUsize::new(0);

/// Purge old records.
#[tool(risk = "HIGH_WRITE", domain = "store", callable)]
async fn purge(before: u64) -> Result<u64, AppError> {
    tokio::task::yield_now().await;
    PURGES.fetch_add(1, Ordering::SeqCst);
    Ok(before / 2)
}

static STATUSES: AtomicUsize = AtomicUsize::new(0);

/// The gate's mode, as the tool sees it.
#[tool(risk = "READ_ONLY", domain = "ops", callable)]
fn status(gate: &Gate, verbose: bool) -> Result<String, AppError> {
    STATUSES.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{} verbose={verbose}", gate.mode()))
}

static WIPES: AtomicUsize = AtomicUsize::new(0);

/// Wipe a disk.
#[tool(risk = "HIGH_WRITE", domain = "ops", callable)]
fn wipe(disk: String, gate: &Gate) -> Result<String, AppError> {
    WIPES.fetch_add(1, Ordering::SeqCst);
    Ok(format!("wiped {disk} in {}", gate.mode()))
}

static DRAINS: AtomicUsize = AtomicUsize::new(0);

/// Drain a node before maintenance.
#[tool(risk = "HIGH_WRITE", domain = "ops", callable)]
async fn drain(node: String, gate: &Gate) -> Result<String, AppError> {
    tokio::task::yield_now().await;
    DRAINS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("drained {node} in {}", gate.mode()))
}

static ANYHOWS: AtomicUsize = AtomicUsize::new(0);

/// Rotate a key; fails on an empty name.
#[tool(risk = "LOW_WRITE", domain = "keys", callable)]
fn rotate(name: String) -> anyhow::Result<u32> {
    ANYHOWS.fetch_add(1, Ordering::SeqCst);
    if name.is_empty() {
        anyhow::bail!("key name is empty");
    }
    Ok(2)
}

static BOXES: AtomicUsize = AtomicUsize::new(0);

/// Revoke a key.
#[tool(risk = "HIGH_WRITE", domain = "keys", callable)]
fn revoke(name: String) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let _ = name;
    BOXES.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

static BROKEN_OUTPUTS: AtomicUsize = AtomicUsize::new(0);

/// A result that JSON cannot hold: map keys that are not strings.
#[tool(risk = "READ_ONLY", domain = "keys", callable)]
fn histogram() -> Result<HashMap<(u8, u8), u32>, AppError> {
    BROKEN_OUTPUTS.fetch_add(1, Ordering::SeqCst);
    Ok(HashMap::from([((1, 2), 3)]))
}

static RESTARTS: AtomicUsize = AtomicUsize::new(0);

/// Restart a service; allowed in FULL_AUTO only.
#[tool(risk = "LOW_WRITE", modes = [FULL_AUTO], domain = "ops", callable)]
fn restart(service: String) -> Result<(), AppError> {
    let _ = service;
    RESTARTS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

static NESTED: AtomicUsize = AtomicUsize::new(0);

/// Asks a narrower gate to rename a user and reports how that went; it fails when the rename is refused.
#[tool(risk = "LOW_WRITE", domain = "ops", callable)]
fn delegate(id: u64) -> Result<String, AppError> {
    NESTED.fetch_add(1, Ordering::SeqCst);
    let narrow = Gate::new(Mode::Shadow).map_err(|_| AppError::NotFound(0))?;
    match narrow.run(|| rename(id, "delegated".into())) {
        Ok(done) => Ok(done),
        Err(AppError::Refused(denied)) => Err(AppError::NotFound(denied.tool().id.len() as u64)),
        Err(other) => Err(other),
    }
}

static APPLIES: AtomicUsize = AtomicUsize::new(0);

/// Apply a change in `depth` nested steps, each step under a narrower gate; fails when a step is refused.
#[tool(risk = "LOW_WRITE", domain = "ops", callable)]
fn apply(depth: u32) -> Result<String, AppError> {
    APPLIES.fetch_add(1, Ordering::SeqCst);
    if depth == 0 {
        return Ok("applied".into());
    }
    let narrow = Gate::new(Mode::Shadow).map_err(|_| AppError::NotFound(0))?;
    match narrow.run(|| apply(depth - 1)) {
        Ok(done) => Ok(done),
        Err(_) => Err(AppError::NotFound(u64::from(depth))),
    }
}

struct Desk;

#[toolset(domain = "desk")]
impl Desk {
    /// Open a ticket.
    #[tool(risk = "LOW_WRITE")]
    pub fn open(&self, title: String) -> Result<String, Denied> {
        Ok(title)
    }
}

// ---------------------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_sync_tool_returns_its_result_as_json() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    let (result, ran) = runs(&GETS, || call(&gate, "users.get", json!({"id": 7})));
    assert_eq!(result.unwrap(), json!({"id": 7, "name": "user7"}));
    assert_eq!(ran, 1);
}

#[test]
fn unit_results_are_null_and_strings_are_strings() {
    let _serial = serial();
    let gate = gates::approved(Mode::FullAuto, toolgate::AllowAllApprover);
    assert_eq!(
        call(&gate, "users.delete", json!({"id": 3})).unwrap(),
        Value::Null
    );
    assert_eq!(
        call(&gate, "users.rename", json!({"id": 3, "name": "Ada"})).unwrap(),
        json!("3 is now Ada")
    );
}

#[test]
fn arguments_may_come_in_any_order_and_optional_ones_may_be_left_out() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    let result = call(
        &gate,
        "users.search",
        json!({"ids": [1, 2], "filter": {"prefix": "a", "limit": 5}}),
    );
    assert_eq!(
        result.unwrap(),
        json!({"limit": 5, "prefix": "a", "ids": [1, 2], "note": null})
    );
    let result = call(
        &gate,
        "users.search",
        json!({"note": "hi", "ids": [], "filter": {"limit": 0, "prefix": ""}}),
    );
    assert_eq!(
        result.unwrap(),
        json!({"limit": 0, "prefix": "", "ids": [], "note": "hi"})
    );
}

#[tokio::test]
async fn an_async_tool_returns_its_result_as_json() {
    let _serial = SERIAL.lock().await;
    let gate = gate_in(Mode::Shadow);
    let before = FETCHES.load(Ordering::SeqCst);
    let future = registry().call(&gate, "store.fetch", json!({"id": 9}));
    assert_eq!(format!("{future:?}"), "CallFuture(pending)");
    assert_eq!(
        FETCHES.load(Ordering::SeqCst),
        before,
        "nothing runs before the future is polled"
    );
    assert_eq!(future.await.unwrap(), json!({"id": 9, "name": "stored9"}));
    assert_eq!(FETCHES.load(Ordering::SeqCst), before + 1);
}

#[tokio::test]
async fn an_async_call_is_not_ready_without_polling() {
    let _serial = SERIAL.lock().await;
    let gate = gate_in(Mode::Shadow);
    assert!(
        registry()
            .call(&gate, "store.fetch", json!({"id": 1}))
            .now()
            .is_none()
    );
    // Bad arguments are found before any future exists: the result is ready at once.
    let error = registry()
        .call(&gate, "store.fetch", json!({"id": "one"}))
        .now()
        .expect("an argument error is ready at once")
        .unwrap_err();
    assert_eq!(error.code(), "INVALID_PARAMS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_call_runs_on_another_thread_under_its_gate() {
    let _serial = SERIAL.lock().await;
    let gate = gate_in(Mode::Shadow);
    let future = registry().call(&gate, "store.fetch", json!({"id": 2}));
    // No ambient gate on the spawned task's thread: the call carries its own.
    let result = tokio::spawn(future).await.unwrap();
    assert_eq!(result.unwrap(), json!({"id": 2, "name": "stored2"}));
}

// ---------------------------------------------------------------------------------------------------------
// Strict arguments
// ---------------------------------------------------------------------------------------------------------

#[test]
fn an_unknown_key_is_refused_with_its_path_and_the_body_does_not_run() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    let (result, ran) = runs(&GETS, || {
        call(&gate, "users.get", json!({"id": 1, "apiKey": "x"}))
    });
    let error = result.unwrap_err();
    let (path, message) = invalid_params(&error);
    assert_eq!(path, "apiKey");
    assert!(message.contains("unknown field `apiKey`"), "{message}");
    assert!(
        message.contains("`id`"),
        "names the expected fields: {message}"
    );
    assert_eq!(ran, 0);

    let (result, ran) = runs(&GETS, || call(&gate, "users.get", json!({"apiKey": "x"})));
    assert_eq!(invalid_params(&result.unwrap_err()).0, "apiKey");
    assert_eq!(ran, 0);
}

#[test]
fn the_arguments_object_is_strict_and_so_is_every_object_inside_it() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    // `Filter` does not deny unknown fields itself: the call does, at every depth, as its schema says.
    let (result, ran) = runs(&SEARCHES, || {
        call(
            &gate,
            "users.search",
            json!({"filter": {"limit": 1, "prefix": "", "extra": 1}, "ids": []}),
        )
    });
    assert_eq!(
        invalid_params(&result.unwrap_err()),
        ("filter.extra", "unknown field `extra`")
    );
    assert_eq!(ran, 0);
    let schema = registry()
        .get("users.search")
        .unwrap()
        .input_schema()
        .unwrap();
    assert_eq!(
        schema["$defs"]["Filter"]["additionalProperties"],
        json!(false),
        "{schema}"
    );
    // The arguments object itself admits nothing else, wherever the key comes.
    for (arguments, key) in [
        (
            json!({"filter": {"limit": 1, "prefix": ""}, "ids": [], "zzz": 2}),
            "zzz",
        ),
        (
            json!({"aaa": 2, "filter": {"limit": 1, "prefix": ""}, "ids": []}),
            "aaa",
        ),
    ] {
        let (result, ran) = runs(&SEARCHES, || call(&gate, "users.search", arguments.clone()));
        assert_eq!(invalid_params(&result.unwrap_err()).0, key, "{arguments}");
        assert_eq!(ran, 0, "{arguments}");
    }
}

#[test]
fn an_unknown_key_in_an_async_tool_is_refused_before_any_future_runs() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    let (result, ran) = runs(&FETCHES, || {
        call(&gate, "store.fetch", json!({"id": 1, "apiKey": "x"}))
    });
    assert_eq!(invalid_params(&result.unwrap_err()).0, "apiKey");
    assert_eq!(ran, 0);
}

#[test]
fn a_missing_key_is_refused_and_named() {
    let _serial = serial();
    let gate = gate_in(Mode::PartialAuto);
    let (result, ran) = runs(&RENAMES, || call(&gate, "users.rename", json!({"id": 3})));
    let error = result.unwrap_err();
    let (path, message) = invalid_params(&error);
    assert_eq!(path, ".");
    assert!(message.contains("missing field `name`"), "{message}");
    assert_eq!(ran, 0);

    let (result, ran) = runs(&GETS, || call(&gate, "users.get", json!({})));
    let error = result.unwrap_err();
    assert!(
        invalid_params(&error).1.contains("missing field `id`"),
        "{error}"
    );
    assert_eq!(ran, 0);
}

#[test]
fn a_missing_key_in_a_nested_struct_has_the_struct_path() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    let (result, ran) = runs(&SEARCHES, || {
        call(
            &gate,
            "users.search",
            json!({"filter": {"limit": 1}, "ids": []}),
        )
    });
    let error = result.unwrap_err();
    let (path, message) = invalid_params(&error);
    assert_eq!(path, "filter");
    assert!(message.contains("missing field `prefix`"), "{message}");
    assert_eq!(ran, 0);
}

#[test]
fn an_ill_typed_value_is_refused_at_its_path() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    let cases = [
        (
            json!({"id": "seven"}),
            "users.get",
            "id",
            "invalid type: string",
        ),
        (
            json!({"id": -1}),
            "users.get",
            "id",
            "invalid value: integer `-1`",
        ),
        (
            json!({"id": 1.5}),
            "users.get",
            "id",
            "invalid type: floating point",
        ),
        (json!({"id": null}), "users.get", "id", "invalid type: null"),
        (
            json!({"filter": {"limit": "ten", "prefix": "a"}, "ids": []}),
            "users.search",
            "filter.limit",
            "invalid type: string \"ten\", expected u32",
        ),
        (
            json!({"filter": {"limit": 4294967296_u64, "prefix": "a"}, "ids": []}),
            "users.search",
            "filter.limit",
            "expected u32",
        ),
        (
            json!({"filter": {"limit": 1, "prefix": "a"}, "ids": [1, "two", 3]}),
            "users.search",
            "ids[1]",
            "invalid type: string \"two\", expected u64",
        ),
        (
            json!({"filter": {"limit": 1, "prefix": "a"}, "ids": [[1]]}),
            "users.search",
            "ids[0]",
            "invalid type: sequence",
        ),
        (
            json!({"filter": [1, "a"], "ids": {"0": 1}}),
            "users.search",
            "ids",
            "invalid type: map, expected a sequence",
        ),
        (
            json!({"filter": {"limit": 1, "prefix": "a"}, "ids": [], "note": 5}),
            "users.search",
            "note",
            "invalid type: integer `5`, expected a string",
        ),
    ];
    for (arguments, id, want_path, want_message) in cases {
        let counter = if id == "users.get" { &GETS } else { &SEARCHES };
        let (result, ran) = runs(counter, || call(&gate, id, arguments.clone()));
        let error = result.unwrap_err();
        let (path, message) = invalid_params(&error);
        assert_eq!(path, want_path, "{arguments}");
        assert!(
            message.contains(want_message),
            "{arguments}: `{message}` should contain `{want_message}`"
        );
        assert_eq!(ran, 0, "{arguments}");
    }
}

#[test]
fn arguments_that_are_not_an_object_are_refused() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    for arguments in [json!(3), json!(null), json!("id"), json!(true), json!(7.5)] {
        let (result, ran) = runs(&GETS, || call(&gate, "users.get", arguments.clone()));
        let error = result.unwrap_err();
        let (path, message) = invalid_params(&error);
        assert_eq!(path, ".", "{arguments}");
        assert!(
            message.contains("must be a JSON object"),
            "{arguments}: {message}"
        );
        assert_eq!(ran, 0, "{arguments}");
    }
    // A tool without parameters takes the empty object, and nothing else.
    assert_eq!(
        call(&gate, "users.export", json!({})).unwrap(),
        json!({"rows": 7})
    );
    for arguments in [json!(null), json!(0), json!({"rows": 1})] {
        let (result, ran) = runs(&EXPORTS, || call(&gate, "users.export", arguments.clone()));
        assert_eq!(result.unwrap_err().code(), "INVALID_PARAMS", "{arguments}");
        assert_eq!(ran, 0, "{arguments}");
    }
}

/// Arguments are named: a JSON array is refused with `INVALID_PARAMS` at `.`, as the input schema says
/// `"type": "object"` (a derived `Deserialize` of a struct would accept a sequence).
#[test]
fn arguments_that_are_an_array_are_refused() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    for (id, arguments, counter) in [
        ("users.get", json!([7]), &GETS),
        ("users.get", json!([]), &GETS),
        ("users.rename", json!([3, "Ada"]), &RENAMES),
        ("users.export", json!([]), &EXPORTS),
    ] {
        let gate = if id == "users.rename" {
            gate_in(Mode::PartialAuto)
        } else {
            gate.clone()
        };
        let (result, ran) = runs(counter, || call(&gate, id, arguments.clone()));
        match result {
            Err(CallError::InvalidParams { path, .. }) => assert_eq!(path, ".", "{arguments}"),
            other => panic!("{id} {arguments}: expected INVALID_PARAMS, got {other:?}"),
        }
        assert_eq!(ran, 0, "{id} {arguments}");
    }
}

#[test]
fn an_invalid_params_error_serializes_with_its_path() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    let error = call(&gate, "users.get", json!({"id": 1, "apiKey": "x"})).unwrap_err();
    let value = serde_json::to_value(&error).unwrap();
    assert_eq!(value["code"], "INVALID_PARAMS");
    assert_eq!(value["path"], "apiKey");
    assert_eq!(value["message"], error.to_string());
    assert!(
        error
            .to_string()
            .starts_with("invalid arguments at `apiKey`: ")
    );
    assert_eq!(value.as_object().unwrap().len(), 3);
}

// ---------------------------------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------------------------------

#[test]
fn an_unknown_id_close_to_a_callable_one_gets_a_suggestion() {
    let gate = gate_in(Mode::FullAuto);
    let error = call(&gate, "users.delet", json!({"id": 1})).unwrap_err();
    assert_eq!(
        error.to_string(),
        "no tool is named `users.delet`; did you mean `users.delete`?"
    );
    let error = call(&gate, "zzzz.qqqq", json!({})).unwrap_err();
    assert_eq!(error.to_string(), "no tool is named `zzzz.qqqq`");
}

#[test]
fn an_unknown_tool_is_refused() {
    let _serial = serial();
    let gate = gate_in(Mode::FullAuto);
    for id in [
        "users.purge",
        "",
        "users",
        "users.",
        ".get",
        "get",
        "users.get.x",
    ] {
        let error = call(&gate, id, json!({"id": 1})).unwrap_err();
        assert_eq!(error.code(), "UNKNOWN_TOOL", "{id:?}");
        assert!(matches!(&error, CallError::UnknownTool { id: asked } if asked == id));
        assert!(
            error
                .to_string()
                .starts_with(&format!("no tool is named `{id}`")),
            "{error}"
        );
        let value = serde_json::to_value(&error).unwrap();
        assert_eq!(
            value,
            json!({"code": "UNKNOWN_TOOL", "message": error.to_string()})
        );
    }
}

#[test]
fn ids_are_compared_exactly() {
    let _serial = serial();
    let gate = gate_in(Mode::FullAuto);
    let near_misses = [
        "Users.Delete",
        "USERS.DELETE",
        "users.Delete",
        // Cyrillic `а` (U+0430) and `е` (U+0435) for the Latin letters.
        "users.delet\u{0435}",
        "us\u{0435}rs.delete",
        "users.ren\u{0430}me",
        "ops.\u{0430}pply",
        "users.g\u{0435}t",
        "stor\u{0435}.fetch",
        "\u{0430}",
        // Fullwidth `ｕ`, a zero-width space, spaces, look-alike dots.
        "\u{ff55}sers.get",
        "users.get\u{200b}",
        " users.get",
        "users.get ",
        "users\u{ff0e}get",
        "users\u{2024}get",
    ];
    for id in near_misses {
        assert_ne!(id, "users.delete");
        let (result, ran) = runs(&DELETES, || {
            registry()
                .call(&gate, id, json!({"id": 1}))
                .now()
                .expect("an unknown tool is ready at once")
        });
        assert_eq!(result.unwrap_err().code(), "UNKNOWN_TOOL", "{id:?}");
        assert_eq!(ran, 0);
        assert!(registry().get(id).is_none(), "{id:?}");
        assert!(toolgate::registry().manifest(id).is_none(), "{id:?}");
    }
    // The real ones are there.
    assert!(registry().get("users.delete").is_some());
    assert!(registry().get("users.get").is_some());
}

#[test]
fn a_tool_that_is_not_callable_is_refused_and_does_not_run() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    let (result, ran) = runs(&COUNTS, || call(&gate, "users.count", json!({})));
    let error = result.unwrap_err();
    assert_eq!(error.code(), "NOT_CALLABLE");
    assert!(matches!(
        error,
        CallError::NotCallable { id: "users.count" }
    ));
    assert!(error.to_string().contains("`users.count`"), "{error}");
    assert_eq!(ran, 0);
    // Directly, it works.
    assert_eq!(gate.run(count).unwrap(), 3);

    let tool = registry().get("users.count").unwrap();
    assert!(!tool.is_callable());
    assert_eq!(tool.input_schema(), None);
    assert_eq!(tool.output_schema(), None);
    // Methods are never callable by name.
    let desk = registry().get("desk.open").unwrap();
    assert!(!desk.is_callable());
    assert_eq!(
        call(&gate, "desk.open", json!({"title": "x"}))
            .unwrap_err()
            .code(),
        "NOT_CALLABLE"
    );
    // Directly, it works.
    let opened = gate_in(Mode::PartialAuto).run(|| Desk.open("x".into()));
    assert_eq!(opened.unwrap(), "x");
}

// ---------------------------------------------------------------------------------------------------------
// Tool failures
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_tool_error_is_a_handler_error_with_its_message() {
    let _serial = serial();
    let gate = gate_in(Mode::PartialAuto);
    let (result, ran) = runs(&GETS, || call(&gate, "users.get", json!({"id": 404})));
    let error = result.unwrap_err();
    assert_eq!(error.code(), "HANDLER_ERROR");
    assert!(
        matches!(&error, CallError::HandlerError { message } if message == "no user with id 404")
    );
    assert_eq!(error.to_string(), "no user with id 404");
    assert!(error.denied().is_none());
    assert_eq!(
        serde_json::to_value(&error).unwrap(),
        json!({"code": "HANDLER_ERROR", "message": "no user with id 404"})
    );
    assert_eq!(ran, 1, "a handler error comes from a body that ran");

    let (result, ran) = runs(&ANYHOWS, || call(&gate, "keys.rotate", json!({"name": ""})));
    let error = result.unwrap_err();
    assert_eq!(error.code(), "HANDLER_ERROR");
    assert_eq!(error.to_string(), "key name is empty");
    assert_eq!(ran, 1);
    assert_eq!(
        call(&gate, "keys.rotate", json!({"name": "k"})).unwrap(),
        json!(2)
    );
}

#[tokio::test]
async fn an_async_tool_error_is_a_handler_error_with_its_message() {
    let _serial = SERIAL.lock().await;
    let gate = gate_in(Mode::Shadow);
    let error = registry()
        .call(&gate, "store.fetch", json!({"id": 404}))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "HANDLER_ERROR");
    assert_eq!(error.to_string(), "no user with id 404");
}

#[test]
fn a_result_that_is_not_json_is_an_output_error_after_the_body_ran() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    let (result, ran) = runs(&BROKEN_OUTPUTS, || call(&gate, "keys.histogram", json!({})));
    let error = result.unwrap_err();
    assert_eq!(error.code(), "OUTPUT_ERROR");
    assert!(matches!(error, CallError::OutputError { .. }));
    assert!(
        error.to_string().contains("key must be a string"),
        "{error}"
    );
    assert_eq!(ran, 1);
}

#[test]
fn a_refusal_inside_an_allowed_body_is_the_tools_failure_not_its_refusal() {
    let _serial = serial();
    let gate = gate_in(Mode::PartialAuto);
    let (result, ran) = runs(&NESTED, || call(&gate, "ops.delegate", json!({"id": 1})));
    let error = result.unwrap_err();
    // The tool ran; the rename it asked for was refused by the narrower gate inside it.
    assert_eq!(ran, 1);
    assert_eq!(error.code(), "HANDLER_ERROR", "{error}");
    assert!(error.denied().is_none());
}

/// Only the call's own gate check can refuse a call by name: once the tool's check allowed it, a refusal
/// of a nested call of the same tool from inside its body is the body's failure (`HANDLER_ERROR`), not
/// a refusal, which would say that the body did not run.
#[test]
fn a_refusal_of_a_nested_call_of_the_same_tool_is_not_the_outer_calls_refusal() {
    let _serial = serial();
    let gate = gate_in(Mode::PartialAuto);
    assert_eq!(
        call(&gate, "ops.apply", json!({"depth": 0})).unwrap(),
        json!("applied")
    );
    let (result, ran) = runs(&APPLIES, || call(&gate, "ops.apply", json!({"depth": 1})));
    assert_eq!(ran, 1, "the outer body ran; the nested call was refused");
    let error = result.unwrap_err();
    assert_eq!(error.code(), "HANDLER_ERROR", "{error}");
    assert_eq!(error.to_string(), "no user with id 1");
    // The same where the call by name hands a decision over (its gate keeps records): the decision is
    // the outer call's alone, and the nested call under the narrower gate decides on its own.
    let (audited_gate, sink) = audited(Mode::PartialAuto);
    let (result, ran) = runs(&APPLIES, || {
        call(&audited_gate, "ops.apply", json!({"depth": 1}))
    });
    assert_eq!(ran, 1, "the nested call was refused");
    assert_eq!(result.unwrap_err().code(), "HANDLER_ERROR");
    let records = sink.take();
    let stages: Vec<Stage> = records.iter().map(|r| r.stage).collect();
    // The outer call entered and ended; the nested call, refused by the narrower gate, is in the outer
    // gate's log as that gate's refusal.
    assert_eq!(
        stages,
        [Stage::Enter, Stage::Refused, Stage::Exit],
        "{records:?}"
    );
    assert_eq!(records[1].code.as_deref(), Some("MODE_NOT_ALLOWED"));
    assert_eq!(records[1].mode, Mode::Shadow);
}

// ---------------------------------------------------------------------------------------------------------
// Refusals
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_write_in_shadow_is_refused_with_its_code_and_does_not_run() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    let (result, ran) = runs(&RENAMES, || {
        call(&gate, "users.rename", json!({"id": 1, "name": "x"}))
    });
    let error = result.unwrap_err();
    assert_eq!(error.code(), "MODE_NOT_ALLOWED");
    let denied = error.denied().expect("a refusal carries its Denied");
    assert_eq!(denied.code(), "MODE_NOT_ALLOWED");
    assert_eq!(denied.tool().id, "users.rename");
    assert_eq!(denied.mode(), Some(Mode::Shadow));
    // The tool's own error type said only "refused"; the call by name still reports the gate's message.
    assert_eq!(error.to_string(), denied.to_string());
    assert!(
        error.to_string().contains("not allowed in mode SHADOW"),
        "{error}"
    );
    assert_eq!(ran, 0);

    let value = serde_json::to_value(&error).unwrap();
    assert_eq!(
        value,
        json!({"code": "MODE_NOT_ALLOWED", "message": denied.to_string()})
    );
}

#[test]
fn every_refusal_code_survives_any_error_type() {
    let _serial = serial();
    let shadow = gate_in(Mode::Shadow);
    let partial = gate_in(Mode::PartialAuto);
    // `anyhow::Error`
    let (result, ran) = runs(&ANYHOWS, || {
        call(&shadow, "keys.rotate", json!({"name": "k"}))
    });
    assert_eq!(result.unwrap_err().code(), "MODE_NOT_ALLOWED");
    assert_eq!(ran, 0);
    // `Box<dyn Error + Send + Sync>`
    let (result, ran) = runs(&BOXES, || {
        call(&partial, "keys.revoke", json!({"name": "k"}))
    });
    assert_eq!(result.unwrap_err().code(), "MODE_NOT_ALLOWED");
    assert_eq!(ran, 0);
    // A mode list narrower than the ceiling.
    let (result, ran) = runs(&RESTARTS, || {
        call(&partial, "ops.restart", json!({"service": "web"}))
    });
    let error = result.unwrap_err();
    assert_eq!(error.code(), "MODE_NOT_ALLOWED");
    assert!(
        error.to_string().contains("it is allowed in FULL_AUTO"),
        "{error}"
    );
    assert_eq!(ran, 0);
}

#[test]
fn a_deny_listed_tool_is_refused_in_every_mode_and_does_not_run() {
    let _serial = serial();
    for mode in Mode::ALL {
        let gate = crate::fixtures::support::denying_approving_in(mode, &["users.g*"]);
        let (result, ran) = runs(&GETS, || call(&gate, "users.get", json!({"id": 1})));
        let error = result.unwrap_err();
        assert_eq!(error.code(), "DENY_LISTED", "{mode}");
        assert_eq!(error.denied().unwrap().detail(), Some("users.g*"));
        assert_eq!(ran, 0, "{mode}");
        // Others are not affected.
        assert_eq!(
            call(
                &gate,
                "users.search",
                json!({"filter": {"limit": 1, "prefix": ""}, "ids": []})
            )
            .unwrap()["limit"],
            1
        );
    }
}

#[tokio::test]
async fn an_async_refusal_keeps_its_code_and_does_not_run() {
    let _serial = SERIAL.lock().await;
    let gate = gate_in(Mode::PartialAuto);
    let before = PURGES.load(Ordering::SeqCst);
    let error = registry()
        .call(&gate, "store.purge", json!({"before": 10}))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "MODE_NOT_ALLOWED");
    assert_eq!(error.denied().unwrap().tool().id, "store.purge");
    assert_eq!(PURGES.load(Ordering::SeqCst), before);

    let denying = gates::denying(Mode::Shadow, "store.fetch");
    let before = FETCHES.load(Ordering::SeqCst);
    let error = registry()
        .call(&denying, "store.fetch", json!({"id": 1}))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "DENY_LISTED");
    assert_eq!(FETCHES.load(Ordering::SeqCst), before);
}

#[test]
fn high_write_without_an_approver_is_refused() {
    let _serial = serial();
    let gate = gate_in(Mode::FullAuto);
    let (result, ran) = runs(&DELETES, || call(&gate, "users.delete", json!({"id": 1})));
    let error = result.unwrap_err();
    assert_eq!(error.code(), "APPROVAL_REQUIRED");
    assert_eq!(error.denied().unwrap().approval_token(), None);
    assert_eq!(ran, 0);
}

#[test]
fn a_two_step_approval_runs_the_same_call_by_name_once() {
    let _serial = serial();
    let gate = gates::two_step(Mode::FullAuto);
    let (result, ran) = runs(&DELETES, || call(&gate, "users.delete", json!({"id": 5})));
    let error = result.unwrap_err();
    assert_eq!(error.code(), "APPROVAL_PENDING");
    assert_eq!(ran, 0);
    let token = error
        .denied()
        .unwrap()
        .approval_token()
        .expect("a two-step gate gives a token")
        .to_owned();
    // The agent does not see the token.
    assert!(!error.to_string().contains(&token));
    assert!(!serde_json::to_string(&error).unwrap().contains(&token));

    gate.approve(&token).unwrap();
    // Other arguments are not approved by it.
    let (result, ran) = runs(&DELETES, || call(&gate, "users.delete", json!({"id": 6})));
    assert_eq!(result.unwrap_err().code(), "APPROVAL_PENDING");
    assert_eq!(ran, 0);
    // The same call runs, once.
    let (result, ran) = runs(&DELETES, || call(&gate, "users.delete", json!({"id": 5})));
    assert_eq!(result.unwrap(), Value::Null);
    assert_eq!(ran, 1);
    let (result, ran) = runs(&DELETES, || call(&gate, "users.delete", json!({"id": 5})));
    assert_eq!(result.unwrap_err().code(), "APPROVAL_REUSED");
    assert_eq!(ran, 0);
}

#[test]
fn a_two_step_approval_given_by_name_is_honoured_by_a_direct_call_and_back() {
    let _serial = serial();
    let gate = gates::two_step(Mode::FullAuto);
    let by_name = call(&gate, "users.delete", json!({"id": 8})).unwrap_err();
    gate.approve(by_name.denied().unwrap().approval_token().unwrap())
        .unwrap();
    let (result, ran) = runs(&DELETES, || gate.run(|| delete(8)));
    assert!(result.is_ok());
    assert_eq!(ran, 1);

    let Err(AppError::Refused(direct)) = gate.run(|| delete(9)) else {
        panic!("a direct call needs its own approval");
    };
    gate.approve(direct.approval_token().unwrap()).unwrap();
    let (result, ran) = runs(&DELETES, || call(&gate, "users.delete", json!({"id": 9})));
    assert_eq!(result.unwrap(), Value::Null);
    assert_eq!(ran, 1);
}

#[tokio::test]
async fn a_two_step_approval_runs_an_async_call_by_name() {
    let _serial = SERIAL.lock().await;
    let gate = gates::two_step(Mode::FullAuto);
    let before = PURGES.load(Ordering::SeqCst);
    let error = registry()
        .call(&gate, "store.purge", json!({"before": 100}))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "APPROVAL_PENDING");
    gate.approve(error.denied().unwrap().approval_token().unwrap())
        .unwrap();
    let result = registry()
        .call(&gate, "store.purge", json!({"before": 100}))
        .await;
    assert_eq!(result.unwrap(), json!(50));
    assert_eq!(PURGES.load(Ordering::SeqCst), before + 1);
}

#[test]
fn a_rejected_approval_is_refused_with_the_reason_and_does_not_run() {
    let _serial = serial();
    let gate = gates::approved(Mode::FullAuto, |_: &ApprovalRequest<'_>| {
        Approval::Reject("not on a Friday".into())
    });
    let (result, ran) = runs(&DELETES, || call(&gate, "users.delete", json!({"id": 1})));
    let error = result.unwrap_err();
    assert_eq!(error.code(), "APPROVAL_REJECTED");
    assert_eq!(error.denied().unwrap().detail(), Some("not on a Friday"));
    assert!(error.to_string().contains("not on a Friday"), "{error}");
    assert_eq!(ran, 0);
}

#[test]
fn an_approver_sees_the_same_request_by_name_as_directly() {
    let _serial = serial();
    /// Each request's tool and arguments digest.
    type Asked = Arc<Mutex<Vec<(String, Option<String>)>>>;
    let asked = Asked::default();
    let log = Arc::clone(&asked);
    let gate = gates::approved(Mode::FullAuto, move |request: &ApprovalRequest<'_>| {
        log.lock().unwrap().push((
            request.tool.id.to_owned(),
            request.arguments_digest.map(str::to_owned),
        ));
        Approval::Approve
    });
    let (result, ran) = runs(&DELETES, || call(&gate, "users.delete", json!({"id": 11})));
    assert_eq!(result.unwrap(), Value::Null);
    assert_eq!(ran, 1);
    let (result, ran) = runs(&DELETES, || gate.run(|| delete(11)));
    assert!(result.is_ok());
    assert_eq!(ran, 1);
    call(&gate, "users.delete", json!({"id": 12})).unwrap();

    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 3, "asked once per call: {asked:?}");
    assert!(asked.iter().all(|(tool, _)| tool == "users.delete"));
    let digest = asked[0].1.clone().expect("the arguments are known");
    assert_eq!(asked[1].1.as_deref(), Some(digest.as_str()));
    assert_ne!(asked[2].1.as_deref(), Some(digest.as_str()));
}

#[test]
fn an_outer_gate_still_applies_to_a_call_by_name() {
    let _serial = serial();
    let outer = gate_in(Mode::Shadow);
    let inner = gate_in(Mode::PartialAuto);
    let (result, ran) = runs(&RENAMES, || {
        outer.run(|| call(&inner, "users.rename", json!({"id": 1, "name": "x"})))
    });
    let error = result.unwrap_err();
    assert_eq!(error.code(), "MODE_NOT_ALLOWED");
    assert_eq!(error.denied().unwrap().mode(), Some(Mode::Shadow));
    assert_eq!(ran, 0);
    // Without the outer gate it runs.
    let (result, ran) = runs(&RENAMES, || {
        call(&inner, "users.rename", json!({"id": 1, "name": "x"}))
    });
    assert!(result.is_ok());
    assert_eq!(ran, 1);
}

#[test]
fn a_lowered_gate_refuses_the_next_call_by_name() {
    let _serial = serial();
    let gate = gate_in(Mode::PartialAuto);
    let clone = gate.clone();
    assert!(call(&gate, "users.rename", json!({"id": 1, "name": "x"})).is_ok());
    clone.lower(Mode::Shadow).unwrap();
    let (result, ran) = runs(&RENAMES, || {
        call(&gate, "users.rename", json!({"id": 1, "name": "x"}))
    });
    assert_eq!(result.unwrap_err().code(), "MODE_NOT_ALLOWED");
    assert_eq!(ran, 0);
}

// ---------------------------------------------------------------------------------------------------------
// A `&Gate` parameter
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_gate_parameter_is_the_gate_of_the_call_and_not_an_argument() {
    let _serial = serial();
    let gate = gate_in(Mode::Advisory);
    let (result, ran) = runs(&STATUSES, || {
        call(&gate, "ops.status", json!({"verbose": true}))
    });
    assert_eq!(result.unwrap(), json!("ADVISORY verbose=true"));
    assert_eq!(ran, 1);

    // `gate` is not an argument: giving it is an unknown key.
    let (result, ran) = runs(&STATUSES, || {
        call(
            &gate,
            "ops.status",
            json!({"verbose": true, "gate": "FULL_AUTO"}),
        )
    });
    assert_eq!(invalid_params(&result.unwrap_err()).0, "gate");
    assert_eq!(ran, 0);

    let schema = registry()
        .get("ops.status")
        .unwrap()
        .input_schema()
        .unwrap();
    assert_eq!(schema["required"], json!(["verbose"]));
    assert!(schema["properties"].get("gate").is_none(), "{schema}");
}

#[test]
fn a_tool_with_a_gate_parameter_asks_the_approver_once_per_call_by_name() {
    let _serial = serial();
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    let gate = gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
        counter.fetch_add(1, Ordering::SeqCst);
        Approval::Approve
    });
    let (result, ran) = runs(&WIPES, || call(&gate, "ops.wipe", json!({"disk": "sda"})));
    assert_eq!(result.unwrap(), json!("wiped sda in FULL_AUTO"));
    assert_eq!(ran, 1);
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    let refusing = gate_in(Mode::PartialAuto);
    let (result, ran) = runs(&WIPES, || {
        call(&refusing, "ops.wipe", json!({"disk": "sda"}))
    });
    assert_eq!(result.unwrap_err().code(), "MODE_NOT_ALLOWED");
    assert_eq!(ran, 0);
}

#[test]
fn a_two_step_approval_runs_a_tool_with_a_gate_parameter_by_name() {
    let _serial = serial();
    let gate = gates::two_step(Mode::FullAuto);
    let error = call(&gate, "ops.wipe", json!({"disk": "sdb"})).unwrap_err();
    assert_eq!(error.code(), "APPROVAL_PENDING");
    gate.approve(error.denied().unwrap().approval_token().unwrap())
        .unwrap();
    let (result, ran) = runs(&WIPES, || call(&gate, "ops.wipe", json!({"disk": "sdb"})));
    assert_eq!(result.unwrap(), json!("wiped sdb in FULL_AUTO"));
    assert_eq!(ran, 1);
}

#[tokio::test]
async fn an_async_tool_with_a_gate_parameter_gets_the_gate_of_the_call() {
    let _serial = SERIAL.lock().await;
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    let gate = gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
        counter.fetch_add(1, Ordering::SeqCst);
        Approval::Approve
    });
    let future = registry().call(&gate, "ops.drain", json!({"node": "n1"}));
    drop(gate);
    // The future keeps its own clone of the gate.
    let before = DRAINS.load(Ordering::SeqCst);
    assert_eq!(future.await.unwrap(), json!("drained n1 in FULL_AUTO"));
    assert_eq!(DRAINS.load(Ordering::SeqCst), before + 1);
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    let shadow = gate_in(Mode::Shadow);
    let error = registry()
        .call(&shadow, "ops.drain", json!({"node": "n1"}))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "MODE_NOT_ALLOWED");
    assert_eq!(DRAINS.load(Ordering::SeqCst), before + 1);
}

// ---------------------------------------------------------------------------------------------------------
// Audit: a call by name leaves the records a direct call leaves
// ---------------------------------------------------------------------------------------------------------

/// The records with what differs between two calls (the call number, the time, the duration) blanked.
fn comparable(records: Vec<AuditRecord>) -> Vec<AuditRecord> {
    records
        .into_iter()
        .map(|mut r| {
            r.call = 0;
            r.timestamp = String::new();
            r.duration_us = r.duration_us.map(|_| 0);
            r
        })
        .collect()
}

fn audited(mode: Mode) -> (Gate, MemorySink) {
    let sink = MemorySink::new();
    let gate = gates::approved_audited(mode, toolgate::AllowAllApprover, sink.clone());
    (gate, sink)
}

#[test]
fn a_call_by_name_is_audited_as_a_direct_call() {
    let _serial = serial();
    let (gate, sink) = audited(Mode::PartialAuto);

    gate.run(|| rename(3, "Ada".into())).unwrap();
    let direct = sink.take();
    // Keys in another order, and a string written with an escape: the same arguments.
    call(&gate, "users.rename", json!({"name": "\u{41}da", "id": 3})).unwrap();
    let by_name = sink.take();

    let stages: Vec<Stage> = direct.iter().map(|r| r.stage).collect();
    assert_eq!(stages, [Stage::Enter, Stage::Exit]);
    assert_eq!(direct[0].tool, "users.rename");
    let digest = direct[0].arguments_digest.clone();
    assert!(direct[0].arguments_digest.is_some());
    assert!(direct[1].output_digest.is_some());
    assert_eq!(
        by_name[0].arguments_digest, direct[0].arguments_digest,
        "the same arguments have the same digest"
    );
    assert_eq!(by_name[1].output_digest, direct[1].output_digest);
    assert_eq!(by_name[0].call, by_name[1].call, "enter and exit pair up");
    assert_ne!(by_name[0].call, direct[0].call);
    assert_eq!(comparable(by_name), comparable(direct));

    // Other arguments, another digest.
    call(&gate, "users.rename", json!({"name": "Bob", "id": 3})).unwrap();
    let other = sink.take();
    assert!(other[0].arguments_digest.is_some());
    assert_ne!(other[0].arguments_digest, digest);
}

#[test]
fn a_refusal_by_name_is_audited_as_a_direct_refusal() {
    let _serial = serial();
    let (gate, sink) = audited(Mode::Shadow);

    let Err(AppError::Refused(_)) = gate.run(|| rename(3, "Ada".into())) else {
        panic!("SHADOW refuses a write");
    };
    let direct = sink.take();
    let error = call(&gate, "users.rename", json!({"id": 3, "name": "Ada"})).unwrap_err();
    assert_eq!(error.code(), "MODE_NOT_ALLOWED");
    let by_name = sink.take();

    assert_eq!(direct.len(), 1);
    assert_eq!(direct[0].stage, Stage::Refused);
    assert_eq!(direct[0].code.as_deref(), Some("MODE_NOT_ALLOWED"));
    assert!(direct[0].arguments_digest.is_some());
    // Refused before its arguments were read: the same record, with no arguments digest.
    let mut expected = comparable(direct);
    expected[0].arguments_digest = None;
    assert_eq!(comparable(by_name), expected);
}

/// The gate is asked before the arguments are read: a tool it refuses answers its refusal code whatever
/// the arguments are, and so says nothing of its parameters.
#[test]
fn a_refused_tool_answers_its_refusal_whatever_its_arguments() {
    let _serial = serial();
    let (gate, sink) = audited(Mode::Shadow);
    for arguments in [
        json!({"apiKey": "x"}),
        json!({"id": "not a number"}),
        json!({}),
        json!([1, 2]),
        json!(null),
    ] {
        let (result, ran) = runs(&RENAMES, || call(&gate, "users.rename", arguments.clone()));
        let error = result.unwrap_err();
        assert_eq!(error.code(), "MODE_NOT_ALLOWED", "{arguments}: {error}");
        assert!(error.denied().is_some());
        assert_eq!(ran, 0);
        let records = sink.take();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].code.as_deref(), Some("MODE_NOT_ALLOWED"));
        assert_eq!(records[0].arguments_digest, None);
    }
    // Where the gate allows the tool, the arguments are read, and bad ones are refused as such.
    let (gate, _) = audited(Mode::PartialAuto);
    let error = call(&gate, "users.rename", json!({"apiKey": "x"})).unwrap_err();
    assert_eq!(error.code(), "INVALID_PARAMS");
}

#[test]
fn an_approved_call_by_name_is_audited_as_a_direct_one() {
    let _serial = serial();
    let (gate, sink) = audited(Mode::FullAuto);
    gate.run(|| delete(21)).unwrap();
    let direct = sink.take();
    call(&gate, "users.delete", json!({"id": 21})).unwrap();
    let by_name = sink.take();
    assert_eq!(
        direct[0].decision,
        Some(toolgate::audit::Decision::Approved)
    );
    assert_eq!(comparable(by_name), comparable(direct));
}

#[test]
fn a_failing_call_by_name_is_audited_as_a_direct_one() {
    let _serial = serial();
    let (gate, sink) = audited(Mode::Shadow);
    let _ = gate.run(|| get(404));
    let direct = sink.take();
    let error = call(&gate, "users.get", json!({"id": 404})).unwrap_err();
    assert_eq!(error.code(), "HANDLER_ERROR");
    let by_name = sink.take();
    assert_eq!(direct[1].outcome, Some(toolgate::audit::Outcome::Error));
    assert_eq!(comparable(by_name), comparable(direct));
}

#[test]
fn invalid_arguments_reach_no_decision_and_leave_one_refused_record() {
    let _serial = serial();
    let (gate, sink) = audited(Mode::FullAuto);
    let error = call(&gate, "users.delete", json!({"id": "x"})).unwrap_err();
    assert_eq!(error.code(), "INVALID_PARAMS");
    let records = sink.records();
    let seen: Vec<(Stage, Option<&str>)> = records
        .iter()
        .map(|r| (r.stage, r.code.as_deref()))
        .collect();
    assert_eq!(seen, [(Stage::Refused, Some("INVALID_PARAMS"))]);
    assert_eq!(
        records[0].message.as_deref(),
        Some("invalid arguments at `id`")
    );
}

#[tokio::test]
async fn an_async_call_by_name_is_audited_as_a_direct_one() {
    let _serial = SERIAL.lock().await;
    let (gate, sink) = audited(Mode::FullAuto);
    gate.scope(purge(40)).await.unwrap();
    let direct = sink.take();
    registry()
        .call(&gate, "store.purge", json!({"before": 40}))
        .await
        .unwrap();
    let by_name = sink.take();
    assert_eq!(direct.len(), 2);
    assert_eq!(comparable(by_name), comparable(direct));
}

#[test]
fn a_tool_with_a_gate_parameter_is_audited_once_per_call_by_name() {
    let _serial = serial();
    let (gate, sink) = audited(Mode::FullAuto);
    gate.run(|| wipe("sdc".into(), &gate)).unwrap();
    let direct = sink.take();
    call(&gate, "ops.wipe", json!({"disk": "sdc"})).unwrap();
    let by_name = sink.take();
    let stages: Vec<Stage> = by_name.iter().map(|r| r.stage).collect();
    assert_eq!(stages, [Stage::Enter, Stage::Exit]);
    assert_eq!(comparable(by_name), comparable(direct));
}

// ---------------------------------------------------------------------------------------------------------
// Schemas
// ---------------------------------------------------------------------------------------------------------

const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

#[test]
fn the_input_schema_admits_exactly_the_parameters() {
    let schema = registry()
        .get("users.search")
        .unwrap()
        .input_schema()
        .unwrap();
    assert_eq!(schema["$schema"], DRAFT_2020_12);
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], false);
    assert!(schema.get("title").is_none(), "{schema}");

    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["filter", "ids"], "an Option is not required");

    let properties = schema["properties"].as_object().unwrap();
    let mut names: Vec<&str> = properties.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["filter", "ids", "note"]);
    assert_eq!(properties["ids"]["type"], "array");
    assert_eq!(properties["ids"]["items"]["type"], "integer");
    assert_eq!(properties["ids"]["items"]["minimum"], 0);

    // The struct argument, with its fields' doc comments as descriptions.
    let reference = properties["filter"]["$ref"].as_str().unwrap();
    assert_eq!(reference, "#/$defs/Filter");
    let filter = &schema["$defs"]["Filter"];
    assert_eq!(filter["type"], "object");
    assert_eq!(filter["description"], "Which users to search.");
    assert_eq!(
        filter["properties"]["limit"]["description"],
        "The most users to return."
    );
    assert_eq!(filter["properties"]["limit"]["type"], "integer");
    assert_eq!(filter["properties"]["limit"]["format"], "uint32");
    assert_eq!(
        filter["properties"]["prefix"]["description"],
        "Only names that start with this."
    );
    assert_eq!(filter["properties"]["prefix"]["type"], "string");
    let mut filter_required: Vec<&str> = filter["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    filter_required.sort_unstable();
    assert_eq!(filter_required, ["limit", "prefix"]);
}

#[test]
fn the_input_schema_of_simple_tools() {
    let schema = registry().get("users.get").unwrap().input_schema().unwrap();
    assert_eq!(schema["$schema"], DRAFT_2020_12);
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["required"], json!(["id"]));
    assert_eq!(schema["properties"]["id"]["type"], "integer");
    assert_eq!(schema["properties"]["id"]["minimum"], 0);

    let schema = registry()
        .get("users.export")
        .unwrap()
        .input_schema()
        .unwrap();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], false);
    assert!(
        schema
            .get("properties")
            .is_none_or(|p| p.as_object().is_some_and(serde_json::Map::is_empty)),
        "{schema}"
    );
    assert!(
        schema
            .get("required")
            .is_none_or(|r| r.as_array().is_some_and(Vec::is_empty)),
        "{schema}"
    );
}

#[test]
fn the_output_schema_is_there_when_the_result_type_has_one() {
    let user = registry()
        .get("users.get")
        .unwrap()
        .output_schema()
        .unwrap();
    assert_eq!(user["$schema"], DRAFT_2020_12);
    assert_eq!(user["type"], "object");
    assert_eq!(user["properties"]["name"]["type"], "string");
    assert_eq!(user["properties"]["id"]["type"], "integer");
    assert!(user.get("title").is_none(), "{user}");

    // Async tools too.
    let fetched = registry()
        .get("store.fetch")
        .unwrap()
        .output_schema()
        .unwrap();
    assert_eq!(fetched, user);
    // `anyhow::Result<u32>`
    let rotated = registry()
        .get("keys.rotate")
        .unwrap()
        .output_schema()
        .unwrap();
    assert_eq!(rotated["type"], "integer");
    let renamed = registry()
        .get("users.rename")
        .unwrap()
        .output_schema()
        .unwrap();
    assert_eq!(renamed["type"], "string");
}

#[test]
fn the_output_schema_is_absent_when_the_result_type_has_none() {
    let export = registry().get("users.export").unwrap();
    assert!(export.is_callable());
    assert!(export.input_schema().is_some());
    assert_eq!(export.output_schema(), None);
}

// ---------------------------------------------------------------------------------------------------------
// The registry
// ---------------------------------------------------------------------------------------------------------

#[test]
fn every_registered_tool_is_found_by_its_id() {
    toolgate::check_registry().unwrap();
    let manifests: Vec<_> = toolgate::manifests().collect();
    assert_eq!(manifests.len(), registry().len());
    assert!(!registry().is_empty());
    for &manifest in &manifests {
        let id = manifest.id;
        let found = registry().get(id).expect("every listed tool is found");
        assert!(std::ptr::eq(found.manifest(), manifest), "{id}");
        assert_eq!(found.is_callable(), found.input_schema().is_some(), "{id}");
        assert!(std::ptr::eq(registry().manifest(id).unwrap(), manifest));
    }
    let ids: Vec<&str> = manifests.iter().map(|m| m.id).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted, "sorted by id");
    for id in [
        "users.get",
        "users.rename",
        "users.delete",
        "users.search",
        "users.export",
        "users.count",
        "store.fetch",
        "store.purge",
        "ops.status",
        "ops.wipe",
        "ops.drain",
        "ops.restart",
        "ops.delegate",
        "ops.apply",
        "keys.rotate",
        "keys.revoke",
        "keys.histogram",
        "desk.open",
    ] {
        assert!(ids.contains(&id), "{id} is registered");
    }
    let not_callable: Vec<&str> = manifests
        .iter()
        .filter(|m| m.source.module_path.starts_with(module_path!()))
        .filter(|m| !registry().get(m.id).unwrap().is_callable())
        .map(|m| m.id)
        .collect();
    assert_eq!(not_callable, ["desk.open", "users.count"]);
}

/// Label a thing: the parameter has the function's own name.
#[tool(risk = "READ_ONLY", domain = "shadowing", callable)]
fn label(id: u32, label: String) -> Result<String, Denied> {
    Ok(format!("{id}:{label}"))
}

#[test]
fn a_parameter_named_like_its_tool_does_not_hide_it() {
    let _serial = serial();
    let gate = gate_in(Mode::Shadow);
    assert_eq!(
        call(&gate, "shadowing.label", json!({"id": 1, "label": "x"})).unwrap(),
        json!("1:x")
    );
}

fn classify_command(command: &str) -> toolgate::Risk {
    if command.starts_with("sudo ") {
        toolgate::Risk::HighWrite
    } else {
        toolgate::Risk::LowWrite
    }
}

/// Run a command; `sudo` raises it to HIGH_WRITE.
#[tool(risk = "LOW_WRITE", domain = "byname_esc", callable, escalate = classify_command)]
fn run_command(command: String) -> Result<String, Denied> {
    Ok(command)
}

/// A call by name refused before its arguments are read is refused at the tool's declared risk: the
/// message says so, and that the arguments may raise the risk, rather than promising a mode that the
/// arguments might not be allowed in. A call refused with its arguments read names the risk they gave.
#[test]
fn a_call_by_name_refused_before_its_arguments_says_they_may_raise_its_risk() {
    let shadow = gate_in(Mode::Shadow);
    let refused = call(
        &shadow,
        "byname_esc.run_command",
        json!({"command": "sudo rm -rf /"}),
    )
    .expect_err("LOW_WRITE in SHADOW");
    let message = refused.denied().expect("a refusal").to_string();
    assert_eq!(
        message,
        "tool `byname_esc.run_command` (LOW_WRITE) is not allowed in mode SHADOW; at its declared \
         risk it is allowed in PARTIAL_AUTO, FULL_AUTO, and its arguments may raise its risk above \
         that"
    );
    let partial = gate_in(Mode::PartialAuto);
    let raised = call(
        &partial,
        "byname_esc.run_command",
        json!({"command": "sudo rm -rf /"}),
    )
    .expect_err("HIGH_WRITE in PARTIAL_AUTO");
    assert_eq!(
        raised.denied().expect("a refusal").to_string(),
        "tool `byname_esc.run_command` (declared LOW_WRITE, raised to HIGH_WRITE by its arguments) \
         is above the ceiling of mode PARTIAL_AUTO (LOW_WRITE); at HIGH_WRITE it runs in FULL_AUTO, \
         with an approval"
    );
    // A direct call reads its arguments first: no such hedge.
    let direct = shadow
        .run(|| run_command("uptime".into()))
        .expect_err("LOW_WRITE in SHADOW");
    assert!(!direct.to_string().contains("may raise"), "{direct}");
}

// ---------------------------------------------------------------------------------------------------------
// The caller's text, in errors
// ---------------------------------------------------------------------------------------------------------

/// What `shown.pick` picks.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "toolgate::serde", rename_all = "snake_case")]
#[schemars(crate = "toolgate::schemars")]
enum Colour {
    Red,
    Green,
}

/// A note as `shown.pick` returns it: one that starts with `fail:` does not serialize, and its
/// serializer's error quotes it.
#[derive(Debug)]
struct Note(String);

impl Serialize for Note {
    fn serialize<S: toolgate::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0.strip_prefix("fail:") {
            Some(rest) => Err(toolgate::serde::ser::Error::custom(format!(
                "cannot show `{rest}`"
            ))),
            None => serializer.serialize_str(&self.0),
        }
    }
}

/// Pick a colour, with a note; a note that starts with `no:` is an error that quotes it.
#[tool(risk = "READ_ONLY", domain = "shown", callable)]
fn pick(colour: Colour, note: String) -> Result<Note, AppError> {
    let _ = colour;
    match note.strip_prefix("no:") {
        Some(rest) => Err(AppError::Quoting(rest.to_owned())),
        None => Ok(Note(note)),
    }
}

/// Characters that hide, fake or reorder what a person reads: an escape, a carriage return, NEL, the
/// line and paragraph separators, a right-to-left override, an isolate, a zero-width space, a BOM.
const HOSTILE: [char; 9] = [
    '\u{1b}', '\r', '\u{85}', '\u{2028}', '\u{2029}', '\u{202e}', '\u{2066}', '\u{200b}',
    '\u{feff}',
];

/// Every error of a call by name that repeats the caller's text (a tool name, an argument's key, a
/// value, a parser's or a tool's message quoting it, a rollback plan's text) shows each character of
/// [`HOSTILE`] escaped: not raw in its message, its `Debug`, its JSON or the text sent to the model,
/// and still named there (`\u{001b}`, or `\u{1b}` where a parser quoted it as Rust does).
#[test]
fn every_error_of_a_call_by_name_shows_the_callers_text_escaped() {
    let _serial = serial();
    let gate = gate_in(Mode::FullAuto);
    let mut failures = Vec::new();
    let mut checked = 0;
    for c in HOSTILE {
        let text = format!("x{c}[2K\rOK y");
        let rollback = |tool: &str, plan: Option<Value>| {
            let mut enter = AuditRecord::new(Stage::Enter, tool.to_owned(), Mode::FullAuto, 1);
            enter.rollback = plan.map(|p| p.to_string());
            registry().rollback(&gate, &enter).now().expect("sync")
        };
        let cases: Vec<(&str, &str, Result<Value, CallError>)> = vec![
            (
                "a tool name",
                "UNKNOWN_TOOL",
                call(&gate, &format!("users.get{text}"), json!({"id": 1})),
            ),
            (
                "an argument's key",
                "INVALID_PARAMS",
                call(&gate, "users.get", json!({"id": 1, text.as_str(): 1})),
            ),
            (
                "a nested key",
                "INVALID_PARAMS",
                call(
                    &gate,
                    "users.search",
                    json!({"filter": {"limit": 1, "prefix": "a", text.as_str(): 1}, "ids": []}),
                ),
            ),
            (
                "a value of the wrong type",
                "INVALID_PARAMS",
                call(&gate, "users.get", json!({"id": text})),
            ),
            (
                "a nested value of the wrong type",
                "INVALID_PARAMS",
                call(
                    &gate,
                    "users.search",
                    json!({"filter": {"limit": text, "prefix": "a"}, "ids": []}),
                ),
            ),
            (
                "an unknown variant",
                "INVALID_PARAMS",
                call(&gate, "shown.pick", json!({"colour": text, "note": "n"})),
            ),
            (
                "a tool's error quoting a value",
                "HANDLER_ERROR",
                call(
                    &gate,
                    "shown.pick",
                    json!({"colour": "red", "note": format!("no:{text}")}),
                ),
            ),
            (
                "a serializer's error quoting the result",
                "OUTPUT_ERROR",
                call(
                    &gate,
                    "shown.pick",
                    json!({"colour": "red", "note": format!("fail:{text}")}),
                ),
            ),
            (
                "a rollback plan of an unknown kind",
                "NO_ROLLBACK",
                rollback("users.get", Some(json!({"kind": text}))),
            ),
            (
                "a rollback plan with an unknown key",
                "NO_ROLLBACK",
                rollback(
                    "users.get",
                    Some(json!({"kind": "steps", "text": "t", text.as_str(): 1})),
                ),
            ),
            (
                "a rollback plan of steps",
                "NO_ROLLBACK",
                rollback("users.get", Some(json!({"kind": "steps", "text": text}))),
            ),
            (
                "a record's tool, with no plan",
                "NO_ROLLBACK",
                rollback(&text, None),
            ),
            (
                "a rollback plan calling an unknown tool",
                "UNKNOWN_TOOL",
                rollback(
                    "users.get",
                    Some(json!({"kind": "call", "tool": text, "arguments": {}})),
                ),
            ),
        ];
        for (what, code, result) in cases {
            checked += 1;
            let Err(error) = &result else {
                failures.push(format!("{what} {c:?}: answered {result:?}"));
                continue;
            };
            if error.code() != code {
                failures.push(format!("{what} {c:?}: {} ({error})", error.code()));
                continue;
            }
            let shown = [
                ("Display", error.to_string()),
                ("Debug", format!("{error:?}")),
                ("JSON", serde_json::to_string(error).unwrap()),
                ("result_text", toolgate::provider::result_text(&result)),
            ];
            let names = |s: &str| {
                s.contains(&format!("\\u{{{:04x}}}", u32::from(c)))
                    || s.contains(&c.escape_debug().to_string())
            };
            for (how, s) in shown {
                if s.contains(HOSTILE) || !names(&s) {
                    failures.push(format!("{what} {c:?}, {how}: {s:?}"));
                }
            }
        }
    }
    assert_eq!(checked, HOSTILE.len() * 13);
    assert!(failures.is_empty(), "{failures:#?}");
}
