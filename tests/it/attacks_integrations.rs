//! Attacks from outside on the integrations: tools handed to a rig agent (`toolgate::rig`), tool
//! definitions for model APIs (`toolgate::provider`) and the tracing sink's OpenTelemetry GenAI spans
//! (`toolgate::audit::TracingSink`). Written from README.md, SECURITY.md and the public API alone.
//! Each test asserts that the guarantee holds: it fails when the attack gets through.

#![cfg(feature = "rig")]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry::{KeyValue, Value as OtelValue};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use rig_agent::AgentBuilder;
use rig_core::completion::AssistantContent;
use rig_core::message::{ToolCall, ToolFunction, ToolName};
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use rig_core::tool::{ToolExecutionError, ToolOutput};
use serde_json::{Value, json};
use toolgate::approval::{ApprovalFuture, AsyncApprover, SessionGrant};
use toolgate::audit::{
    AuditError, AuditRecord, AuditSink, MemorySink, Outcome, Stage, TracingSink,
};
use toolgate::provider::{self, Provider};
use toolgate::registry::Instances;
use toolgate::rig::RigTools;
use toolgate::{
    AllowAllApprover, Approval, ApprovalRequest, CallError, Denied, Gate, Mode, registry, tool,
    toolset,
};
use tracing_subscriber::layer::SubscriberExt;

// ---------------------------------------------------------------------------------------------------
// The tools under attack. Each body notes which call ran (its `id`), so tests running at once tell
// their calls apart: every test uses ids of its own.

static RAN: Mutex<Vec<(&'static str, u64)>> = Mutex::new(Vec::new());

fn note(tool: &'static str, id: u64) {
    RAN.lock().unwrap().push((tool, id));
}

/// How many times `tool` ran with `id`.
fn ran(tool: &str, id: u64) -> usize {
    RAN.lock()
        .unwrap()
        .iter()
        .filter(|(t, i)| *t == tool && *i == id)
        .count()
}

/// Read an entry.
#[tool(risk = "READ_ONLY", domain = "iatk", callable)]
fn peek(id: u64) -> Result<String, Denied> {
    note("peek", id);
    Ok(format!("entry {id}"))
}

/// Wipe an entry. Sync, HIGH_WRITE.
#[tool(risk = "HIGH_WRITE", domain = "iatk", modes = [FULL_AUTO], callable)]
fn wipe(id: u64) -> Result<String, Denied> {
    note("wipe", id);
    Ok(format!("entry {id} wiped"))
}

/// Wipe an entry, asynchronously.
#[tool(risk = "HIGH_WRITE", domain = "iatk", modes = [FULL_AUTO], callable)]
async fn wipe_async(id: u64) -> Result<String, Denied> {
    tokio::task::yield_now().await;
    note("wipe_async", id);
    Ok(format!("entry {id} wiped"))
}

/// Edit an entry.
#[tool(risk = "LOW_WRITE", domain = "iatk", callable)]
fn edit(id: u64, text: String) -> Result<String, Denied> {
    note("edit", id);
    Ok(format!("entry {id}: {text}"))
}

/// Poke an entry (for the lowering sink).
#[tool(risk = "LOW_WRITE", domain = "iatk", callable)]
fn poke(id: u64) -> Result<String, Denied> {
    note("poke", id);
    Ok(format!("entry {id} poked"))
}

/// Two ids that differ only where `.` and `_` change places: `iatk.x_y.z` (harmless)...
#[tool(risk = "READ_ONLY", id = "iatk.x_y.z", callable)]
fn xyz_low(id: u64) -> Result<String, Denied> {
    note("x_y.z", id);
    Ok("low".to_owned())
}

/// ... and `iatk.x.y_z` (dangerous).
#[tool(risk = "HIGH_WRITE", id = "iatk.x.y_z", modes = [FULL_AUTO], callable)]
fn xyz_high(id: u64) -> Result<String, Denied> {
    note("x.y_z", id);
    Ok("high".to_owned())
}

/// Log in, with a token that must never be shown.
#[tool(risk = "READ_ONLY", domain = "iatk", redact = [token], record_arguments, callable)]
fn login(user: String, token: String) -> Result<String, Denied> {
    note("login", token.len() as u64);
    Ok(format!("{user} logged in"))
}

/// Open the vault with a pin that must never be shown.
#[tool(risk = "HIGH_WRITE", domain = "iatk", modes = [FULL_AUTO], redact = [pin], record_arguments, callable)]
fn vault(user: String, pin: u32) -> Result<String, Denied> {
    note("vault", u64::from(pin));
    Ok(format!("{user} opened the vault"))
}

/// Write a memo; its text is not opted in to recording.
#[tool(risk = "READ_ONLY", domain = "iatk", callable)]
fn memo(id: u64, text: String) -> Result<String, Denied> {
    note("memo", id);
    Ok(format!("memo {id}: {} bytes", text.len()))
}

/// Tag entries: the keys of `tags` are the caller's data (not opted in to recording).
#[tool(risk = "READ_ONLY", domain = "iatk", callable)]
fn tag(tags: std::collections::HashMap<String, u32>) -> Result<String, Denied> {
    note("tag", tags.len() as u64);
    Ok(format!("{} tags", tags.len()))
}

/// Send with headers whose every entry is a secret (redacted, though recorded).
#[tool(risk = "READ_ONLY", domain = "iatk", redact = [headers], record_arguments, callable)]
fn send(to: String, headers: std::collections::HashMap<String, u32>) -> Result<String, Denied> {
    note("send", headers.len() as u64);
    Ok(format!("sent to {to}"))
}

/// Panic in the body.
#[tool(risk = "READ_ONLY", domain = "iatk", callable)]
async fn boom(id: u64) -> Result<String, Denied> {
    note("boom", id);
    tokio::task::yield_now().await;
    panic!("boom {id}");
}

/// Wait forever (for cancellation).
#[tool(risk = "READ_ONLY", domain = "iatk", callable)]
async fn hang(id: u64) -> Result<String, Denied> {
    note("hang-start", id);
    std::future::pending::<()>().await;
    note("hang", id);
    Ok(String::new())
}

/// A safe: a toolset whose methods need their instance.
pub struct Safe {
    label: &'static str,
}

#[toolset(domain = "iatks")]
impl Safe {
    /// Look at the safe.
    #[tool(risk = "READ_ONLY", callable)]
    pub fn look(&self, id: u64) -> Result<String, Denied> {
        note("look", id);
        Ok(format!("safe {}", self.label))
    }

    /// Open the safe.
    #[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], callable)]
    pub fn open(&self, id: u64) -> Result<String, Denied> {
        note("open", id);
        Ok(format!("safe {} open", self.label))
    }
}

// ---------------------------------------------------------------------------------------------------
// Helpers.

fn iatk(gate: &Gate) -> RigTools {
    RigTools::new(gate.clone()).only(|m| m.id.starts_with("iatk."))
}

async fn run(
    tools: &RigTools,
    id: &str,
    arguments: Value,
) -> Result<ToolOutput, ToolExecutionError> {
    tools
        .tool(id)
        .unwrap_or_else(|| panic!("no rig tool {id}"))
        .execute(arguments)
        .await
}

fn refusal(result: Result<ToolOutput, ToolExecutionError>) -> ToolExecutionError {
    match result {
        Ok(output) => panic!("the call ran: {}", output.render()),
        Err(error) => error,
    }
}

fn full_allow() -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .build()
        .unwrap()
}

fn name_of(provider: Provider, definition: &Value) -> String {
    let name = match provider {
        Provider::OpenAi | Provider::OpenAiStrict => &definition["function"]["name"],
        _ => &definition["name"],
    };
    name.as_str().expect("a name").to_owned()
}

const PROVIDERS: [Provider; 4] = [
    Provider::OpenAi,
    Provider::OpenAiStrict,
    Provider::Anthropic,
    Provider::Gemini,
];

/// The function names listed, and the ids left out, for `provider`.
fn listed(gate: &Gate, instances: Option<&Instances>, provider: Provider) -> BTreeSet<String> {
    let definitions = match instances {
        Some(instances) => registry().definitions_with(gate, instances, provider),
        None => registry().definitions(gate, provider),
    };
    let mut names: BTreeSet<String> = definitions
        .tools
        .iter()
        .map(|d| name_of(provider, d))
        .collect();
    names.extend(
        definitions
            .left_out
            .iter()
            .map(|l| provider::function_name(l.id)),
    );
    names
}

fn rig_names(tools: &RigTools) -> BTreeSet<String> {
    tools.tools().iter().map(|t| t.name().to_string()).collect()
}

/// Runs `calls` with an OpenTelemetry pipeline as this thread's subscriber; the spans it exported
/// (only ended spans are exported).
fn exported(calls: impl FnOnce()) -> Vec<SpanData> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("toolgate-attacks")));
    tracing::subscriber::with_default(subscriber, calls);
    provider.force_flush().unwrap();
    exporter.get_finished_spans().unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn attributes(span: &SpanData) -> BTreeMap<String, String> {
    span.attributes
        .iter()
        .map(|KeyValue { key, value, .. }| {
            let value = match value {
                OtelValue::String(text) => text.to_string(),
                other => other.to_string(),
            };
            (key.to_string(), value)
        })
        .collect()
}

/// Everything a span shows: its name, attributes, status and its events' attributes.
fn everything(span: &SpanData) -> String {
    let mut text = format!("{} {:?} {:?}", span.name, attributes(span), span.status);
    for event in span.events.iter() {
        text.push_str(&format!(" {} {:?}", event.name, event.attributes));
    }
    text
}

fn tool_spans<'a>(spans: &'a [SpanData], id: &str) -> Vec<&'a SpanData> {
    let name = format!("execute_tool {id}");
    spans.iter().filter(|s| s.name == name).collect()
}

/// Records to every sink; the first failure is the answer.
struct Tee(Vec<Arc<dyn AuditSink>>);

impl AuditSink for Tee {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        let mut answer = Ok(());
        for sink in &self.0 {
            if let Err(error) = sink.record(record)
                && answer.is_ok()
            {
                answer = Err(error);
            }
        }
        answer
    }
}

/// Every `enter` record of `records` has its `exit`.
fn every_enter_has_its_exit(records: &[AuditRecord]) {
    for enter in records.iter().filter(|r| r.stage == Stage::Enter) {
        assert!(
            records
                .iter()
                .any(|r| r.stage == Stage::Exit && r.gate == enter.gate && r.call == enter.call),
            "an enter of {} without its exit: {records:#?}",
            enter.tool
        );
    }
}

fn call(id: &str, name: &str, arguments: Value) -> AssistantContent {
    AssistantContent::ToolCall(ToolCall::from_wire(
        id,
        ToolFunction::new(ToolName::new(name).unwrap(), arguments),
    ))
}

// ---------------------------------------------------------------------------------------------------
// rig

/// Tries: a rig agent's model calling a refused tool under other spellings (the id with its dot,
/// upper case, a Unicode hyphen, a zero-width space, a trailing space, an underscore), and, under a
/// gate that allows everything, those spellings through `provider::tool_id` and `registry().call`.
/// Guarantee: ids are compared byte for byte (`UNKNOWN_TOOL`), rig's tools call through the gate;
/// no spelling runs a tool the gate refuses, or any tool but the one named exactly.
#[tokio::test]
async fn i01_name_spellings_never_reach_a_refused_tool() {
    let audit = MemorySink::new();
    let shadow = Gate::builder()
        .mode(Mode::Shadow)
        .audit(audit.clone())
        .build()
        .unwrap();
    let spellings = [
        "iatk.wipe",
        "IATK-WIPE",
        "iatk\u{2010}wipe",
        "iatk-wipe\u{200b}",
        "iatk-wipe ",
        "iatk_wipe",
        "iatk-wipe",
        "iatk--wipe",
        "iatk-wi\u{440}e",
    ];
    for (n, name) in spellings.iter().enumerate() {
        let model = MockCompletionModel::from_turns([
            MockTurn::from_contents([call(&format!("c{n}"), name, json!({"id": 101}))]),
            MockTurn::text("done"),
        ]);
        let agent = AgentBuilder::new(model.clone())
            .dynamic_tools(toolgate::rig::tools(&shadow))
            .build();
        let _ = agent.prompt("wipe entry 101").max_turns(3).await;
    }
    assert_eq!(ran("wipe", 101), 0, "a refused wipe ran through rig");
    assert!(
        !audit
            .records()
            .iter()
            .any(|r| r.tool == "iatk.wipe" && r.stage == Stage::Enter),
        "an allowed decision for iatk.wipe under SHADOW"
    );

    // Under a gate that would run anything, a spelling that is not exactly the id runs nothing.
    let full = full_allow();
    for name in spellings
        .iter()
        .filter(|&&n| n != "iatk-wipe" && n != "iatk.wipe")
    {
        let result = registry()
            .call(&full, &provider::tool_id(name), json!({"id": 102}))
            .await;
        let error = result.expect_err(name);
        assert_eq!(error.code(), "UNKNOWN_TOOL", "{name:?}");
        let rig = toolgate::rig::tools(&full);
        assert!(
            !rig.iter().any(|t| t.name().as_str() == *name),
            "rig offers a tool named {name:?}"
        );
    }
    assert_eq!(ran("wipe", 102), 0, "a look-alike name ran iatk.wipe");
}

/// Tries: two tools whose ids differ only where `.` and `_` change places (`iatk.x_y.z` READ_ONLY,
/// `iatk.x.y_z` HIGH_WRITE), so that their function names could collide or `tool_id` map one to
/// the other; and every linked tool's function name. Guarantee: the `.`→`-` mapping is one to one,
/// `tool_id` reverses it, and the rig tool named for one id runs that tool and no other.
#[tokio::test]
async fn i02_function_names_are_one_to_one_and_map_back_to_the_tool_listed() {
    let mut names = BTreeMap::new();
    for manifest in toolgate::manifests() {
        let name = provider::function_name(manifest.id);
        assert_eq!(provider::tool_id(&name), manifest.id);
        if let Some(other) = names.insert(name.clone(), manifest.id) {
            panic!("{other} and {} share the function name {name}", manifest.id);
        }
    }
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let every = toolgate::rig::tools(&shadow);
    let unique: BTreeSet<String> = every.iter().map(|t| t.name().to_string()).collect();
    assert_eq!(unique.len(), every.len(), "two rig tools share a name");

    let low = every
        .iter()
        .find(|t| t.name().as_str() == "iatk-x_y-z")
        .expect("iatk.x_y.z offered");
    assert_eq!(
        low.execute(json!({"id": 201})).await.unwrap().as_text(),
        Some("low")
    );
    let high = every
        .iter()
        .find(|t| t.name().as_str() == "iatk-x-y_z")
        .expect("iatk.x.y_z offered");
    let refused = high.execute(json!({"id": 202})).await.unwrap_err();
    assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"));
    assert_eq!(ran("x_y.z", 201), 1);
    assert_eq!(
        ran("x.y_z", 201) + ran("x.y_z", 202),
        0,
        "the HIGH_WRITE twin ran"
    );

    // Every definition, for every provider, names the tool whose description it carries.
    let full = full_allow();
    for provider in PROVIDERS {
        for definition in registry().definitions(&full, provider).tools {
            let name = name_of(provider, &definition);
            let id = provider::tool_id(&name);
            let tool = registry()
                .get(&id)
                .unwrap_or_else(|| panic!("{name} maps to no tool"));
            let description = match provider {
                Provider::OpenAi | Provider::OpenAiStrict => &definition["function"]["description"],
                _ => &definition["description"],
            };
            assert_eq!(
                description.as_str(),
                Some(tool.manifest().description),
                "{provider:?} {name}"
            );
        }
    }
}

/// Tries: a deny-listed tool under a gate that would otherwise allow it (FULL_AUTO, an approver
/// that approves all), through every provider's definitions, rig's `allowed_now`, and a call of the
/// rig tool that `toolgate::rig::tools` lists anyway. Guarantee: deny first; definitions list only
/// what the gate allows now; the body never runs.
#[tokio::test]
async fn i03_a_deny_listed_tool_is_never_listed_and_never_runs() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .deny("iatk.wipe")
        .deny("iatk.x.*")
        .build()
        .unwrap();
    for provider in PROVIDERS {
        let names = listed(&gate, None, provider);
        for denied in ["iatk-wipe", "iatk-x-y_z"] {
            assert!(!names.contains(denied), "{provider:?} lists {denied}");
        }
        assert!(names.contains("iatk-wipe_async"), "{provider:?}");
    }
    let allowed = rig_names(&iatk(&gate).allowed_now());
    assert!(!allowed.contains("iatk-wipe"), "{allowed:?}");
    assert!(!allowed.contains("iatk-x-y_z"), "{allowed:?}");

    let every = toolgate::rig::tools(&gate);
    for name in ["iatk-wipe", "iatk-x-y_z"] {
        let tool = every
            .iter()
            .find(|t| t.name().as_str() == name)
            .expect("every callable tool is given");
        let refused = tool.execute(json!({"id": 301})).await.unwrap_err();
        assert!(refused.is_refusal());
        assert_eq!(refused.code(), Some("DENY_LISTED"), "{name}");
        // Extra keys do not change the answer.
        let refused = tool
            .execute(json!({"id": 301, "force": true, "deny": false}))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Some("DENY_LISTED"), "{name}");
    }
    assert_eq!(
        ran("wipe", 301) + ran("x.y_z", 301),
        0,
        "a deny-listed body ran"
    );
}

/// Tries: definitions and rig's `allowed_now` rendered under FULL_AUTO, then the gate lowered to
/// SHADOW, then the model calls what it was shown (through the rig tool kept from before, and
/// through `tool_id` and `registry().call`). Guarantee: listing is advice; the gate decides each call
/// when it is made, at its mode then.
#[tokio::test]
async fn i04_a_gate_lowered_after_the_definitions_refuses_what_they_listed() {
    let gate = full_allow();
    // What the model is shown, rendered now (rig's tools are built here, before the lowering).
    let shown: Vec<_> = iatk(&gate).allowed_now().tools();
    let shown_names: Vec<String> = shown.iter().map(|t| t.name().to_string()).collect();
    assert!(
        shown_names.contains(&"iatk-wipe".to_owned()),
        "{shown_names:?}"
    );
    let shown_tool = |name: &str| {
        shown
            .iter()
            .find(|t| t.name().as_str() == name)
            .unwrap_or_else(|| panic!("{name} was shown"))
            .clone()
    };
    let definitions = registry().definitions(&gate, Provider::OpenAi);
    let names: Vec<String> = definitions
        .tools
        .iter()
        .map(|d| name_of(Provider::OpenAi, d))
        .collect();
    assert!(names.contains(&"iatk-wipe".to_owned()));
    let clone = gate.clone();
    clone.lower(Mode::Shadow).unwrap();

    let refused = refusal(shown_tool("iatk-wipe").execute(json!({"id": 401})).await);
    assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"));
    let refused = refusal(
        shown_tool("iatk-wipe_async")
            .execute(json!({"id": 401}))
            .await,
    );
    assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"));
    let refused = refusal(
        shown_tool("iatk-edit")
            .execute(json!({"id": 401, "text": "x"}))
            .await,
    );
    assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"));
    let by_name = registry()
        .call(&gate, &provider::tool_id("iatk-wipe"), json!({"id": 401}))
        .await;
    assert_eq!(by_name.unwrap_err().code(), "MODE_NOT_ALLOWED");
    assert_eq!(
        ran("wipe", 401) + ran("wipe_async", 401) + ran("edit", 401),
        0,
        "a call ran at the old mode"
    );
    let now: BTreeSet<String> = listed(&gate, None, Provider::OpenAi)
        .into_iter()
        .filter(|n| n.starts_with("iatk-"))
        .collect();
    assert!(
        !now.contains("iatk-wipe") && !now.contains("iatk-edit"),
        "{now:?}"
    );
}

/// Tries: arguments a model may send that are not the tool's: extra keys (`apiKey`, a key named
/// like the gate's own words), the arguments as a JSON string (as some APIs send them), `null`, an
/// array, and a refused tool with arguments that do not parse. Guarantee: the arguments are an
/// object of exactly the tool's parameters, else `INVALID_PARAMS` and no body; a refused tool
/// answers its refusal whatever its arguments.
#[tokio::test]
async fn i05_arguments_that_are_not_the_tools_never_run_it() {
    let partial = Gate::new(Mode::PartialAuto).unwrap();
    let tools = iatk(&partial);
    let bad = [
        json!({"id": 501, "text": "x", "apiKey": "k"}),
        json!({"id": 501, "text": "x", "mode": "FULL_AUTO", "approved": true}),
        json!("{\"id\": 501, \"text\": \"x\", \"extra\": 1}"),
        Value::Null,
        json!([501, "x"]),
        json!({"id": 501}),
        json!({"id": "501", "text": "x"}),
    ];
    for arguments in bad {
        let refused = refusal(run(&tools, "iatk.edit", arguments.clone()).await);
        assert!(
            matches!(refused.code(), Some("INVALID_PARAMS")),
            "{arguments}: {:?}",
            refused.code()
        );
    }
    assert_eq!(ran("edit", 501), 0, "an edit with bad arguments ran");

    for arguments in [
        json!({"id": 502, "force": true}),
        json!("{\"id\": 502}"),
        Value::Null,
        json!({"id": "not a number"}),
    ] {
        let refused = refusal(run(&tools, "iatk.wipe", arguments.clone()).await);
        assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"), "{arguments}");
        assert!(refused.is_refusal());
    }
    assert_eq!(ran("wipe", 502), 0);
}

struct CountingAsync {
    asked: Arc<AtomicUsize>,
    answer: fn() -> Approval,
    lower: Arc<OnceLock<Gate>>,
}

impl AsyncApprover for CountingAsync {
    fn approve<'a>(&'a self, _request: &'a ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        Box::pin(async move {
            self.asked.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            if let Some(gate) = self.lower.get() {
                gate.lower(Mode::Shadow).unwrap();
            }
            (self.answer)()
        })
    }
}

/// Tries: approvals through rig under an async approver: a sync HIGH_WRITE tool (which cannot wait
/// for it), and an async one. Guarantee: the sync tool's call is refused `APPROVAL_REQUIRED` at once,
/// never run and never asked; the async one is asked once and runs once when approved, and a
/// rejection is `APPROVAL_REJECTED` with the body not run.
#[tokio::test]
async fn i06_an_async_approver_through_rig() {
    let asked = Arc::new(AtomicUsize::new(0));
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(CountingAsync {
            asked: asked.clone(),
            answer: || Approval::Approve,
            lower: Arc::new(OnceLock::new()),
        })
        .build()
        .unwrap();
    let tools = iatk(&gate);
    let refused = refusal(run(&tools, "iatk.wipe", json!({"id": 601})).await);
    assert_eq!(refused.code(), Some("APPROVAL_REQUIRED"));
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the sync call asked");
    assert_eq!(
        ran("wipe", 601),
        0,
        "a sync tool ran under an async approver"
    );

    let done = run(&tools, "iatk.wipe_async", json!({"id": 602}))
        .await
        .unwrap();
    assert_eq!(done.as_text(), Some("entry 602 wiped"));
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(ran("wipe_async", 602), 1);

    let rejecting = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(CountingAsync {
            asked: Arc::new(AtomicUsize::new(0)),
            answer: || Approval::Reject("not entry 603".into()),
            lower: Arc::new(OnceLock::new()),
        })
        .build()
        .unwrap();
    let refused = refusal(run(&iatk(&rejecting), "iatk.wipe_async", json!({"id": 603})).await);
    assert_eq!(refused.code(), Some("APPROVAL_REJECTED"));
    assert!(refused.model_feedback().unwrap().contains("not entry 603"));
    assert_eq!(ran("wipe_async", 603), 0);
}

/// Tries: an async approver that lowers the gate to SHADOW while it thinks, then approves, through
/// rig. Guarantee 4: the mode is checked again just before the body; a gate lowered while the
/// approver thought refuses the call, and every `enter` written gets its `exit`.
#[tokio::test]
async fn i07_a_gate_lowered_while_an_async_approver_thinks_refuses_the_rig_call() {
    let lower = Arc::new(OnceLock::new());
    let audit = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .audit(audit.clone())
        .async_approver(CountingAsync {
            asked: Arc::new(AtomicUsize::new(0)),
            answer: || Approval::Approve,
            lower: lower.clone(),
        })
        .build()
        .unwrap();
    lower.set(gate.clone()).ok().unwrap();
    let refused = refusal(run(&iatk(&gate), "iatk.wipe_async", json!({"id": 701})).await);
    assert!(refused.is_refusal(), "{refused:?}");
    assert_eq!(gate.mode(), Mode::Shadow);
    assert_eq!(ran("wipe_async", 701), 0, "the call ran at the old mode");
    every_enter_has_its_exit(&audit.records());
}

/// Tries: two-step approvals through rig: the token leaking to the model (the feedback, the error's
/// message, `Display`, `Debug`), and the approved call run twice or with other arguments. Guarantee
/// 7: the token is for the operator, not in what the agent sees; an approval runs one call of the
/// same tool with the same arguments, once.
#[tokio::test]
async fn i08_two_step_approvals_through_rig() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    let tools = iatk(&gate);
    let first = refusal(run(&tools, "iatk.wipe", json!({"id": 801})).await);
    assert_eq!(first.code(), Some("APPROVAL_PENDING"));
    // The operator's token: from the rig error if it carries the call's error, else asked again.
    let token = match first.downcast_ref::<CallError>() {
        Some(error) => error
            .denied()
            .and_then(Denied::approval_token)
            .map(str::to_owned),
        None => None,
    };
    let token = match token {
        Some(token) => token,
        None => registry()
            .call(&gate, "iatk.wipe", json!({"id": 801}))
            .await
            .unwrap_err()
            .denied()
            .and_then(Denied::approval_token)
            .expect("a token for the operator")
            .to_owned(),
    };
    let seen = format!(
        "{} {:?} {} {:?} {}",
        first.model_feedback().unwrap_or(""),
        first,
        first,
        first.model_output(),
        first.message()
    );
    assert!(
        !seen.contains(&token),
        "the token reaches the agent: {seen}"
    );

    gate.approve(&token).unwrap();
    let other = refusal(run(&tools, "iatk.wipe", json!({"id": 802})).await);
    assert!(other.is_refusal(), "another argument ran on the approval");
    let extra = run(&tools, "iatk.wipe", json!({"id": 801, "x": 1})).await;
    assert!(extra.is_err(), "extra keys ran on the approval");
    let done = run(&tools, "iatk.wipe", json!({"id": 801})).await.unwrap();
    assert_eq!(done.as_text(), Some("entry 801 wiped"));
    let again = refusal(run(&tools, "iatk.wipe", json!({"id": 801})).await);
    assert!(
        matches!(again.code(), Some("APPROVAL_REUSED" | "APPROVAL_PENDING")),
        "{:?}",
        again.code()
    );
    assert_eq!(ran("wipe", 801), 1, "an approval ran more than once");
    assert_eq!(ran("wipe", 802), 0);
}

/// Tries: a session grant given through rig, then the gate lowered; and the grant used for another
/// tool. Guarantee: a grant covers one tool at the approved risk or lower, through its gate, and no
/// approval lifts a mode: the lowered gate refuses the granted tool.
#[tokio::test]
async fn i09_a_session_grant_through_rig_does_not_outlive_a_lowering() {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(move |request: &ApprovalRequest<'_>| {
            counter.fetch_add(1, Ordering::SeqCst);
            if request.tool.id == "iatk.wipe" {
                Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(600)))
            } else {
                Approval::Reject("only wipe".into())
            }
        })
        .build()
        .unwrap();
    let tools = iatk(&gate);
    run(&tools, "iatk.wipe", json!({"id": 901})).await.unwrap();
    run(&tools, "iatk.wipe", json!({"id": 902})).await.unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the grant asked again");
    let other = refusal(run(&tools, "iatk.x.y_z", json!({"id": 903})).await);
    assert_eq!(other.code(), Some("APPROVAL_REJECTED"));
    gate.lower(Mode::PartialAuto).unwrap();
    let lowered = refusal(run(&tools, "iatk.wipe", json!({"id": 904})).await);
    assert_eq!(lowered.code(), Some("MODE_NOT_ALLOWED"));
    assert_eq!(
        ran("wipe", 904) + ran("x.y_z", 903),
        0,
        "a grant outlived its limits"
    );
}

/// Tries: the `callable` methods of a toolset, by name, without their instance: in `definitions`
/// (no instances), rig's `RigTools` (no instance), `registry().call`; then with the instance, a
/// refused method. Guarantee: a method's tool needs its instance (`NO_INSTANCE`; not listed without
/// it); with it, the gate decides first and a refused method is not listed and does not run.
#[tokio::test]
async fn i10_a_toolset_method_without_its_instance() {
    let full = full_allow();
    let shadow = Gate::new(Mode::Shadow).unwrap();
    for provider in PROVIDERS {
        let names = listed(&full, None, provider);
        assert!(
            !names.iter().any(|n| n.starts_with("iatks-")),
            "{provider:?} lists a method without its instance: {names:?}"
        );
        let instances = Instances::new().with(Safe { label: "a" });
        let with = listed(&shadow, Some(&instances), provider);
        assert!(with.contains("iatks-look"), "{provider:?}: {with:?}");
        assert!(
            !with.contains("iatks-open"),
            "{provider:?} lists a refused method"
        );
    }
    assert!(
        !toolgate::rig::tools(&full)
            .iter()
            .any(|t| t.name().as_str().starts_with("iatks-"))
    );
    assert!(RigTools::new(full.clone()).tool("iatks.open").is_none());
    let no_instance = registry()
        .call(&full, &provider::tool_id("iatks-open"), json!({"id": 1001}))
        .await;
    assert_eq!(no_instance.unwrap_err().code(), "NO_INSTANCE");

    let with_safe = RigTools::new(shadow.clone()).instance(Safe { label: "b" });
    let refused = refusal(run(&with_safe, "iatks.open", json!({"id": 1002})).await);
    assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"));
    assert!(with_safe.clone().allowed_now().tool("iatks.open").is_none());
    let looked = run(&with_safe, "iatks.look", json!({"id": 1003}))
        .await
        .unwrap();
    assert_eq!(looked.as_text(), Some("safe b"));
    assert_eq!(ran("open", 1001) + ran("open", 1002), 0, "a method ran");
}

/// Tries: definitions under a gate whose approver is async, for a sync HIGH_WRITE tool: that tool's
/// every call is refused (`APPROVAL_REQUIRED`, a sync tool cannot wait), yet it may be listed as
/// "allowed with an approval". Guarantee: definitions list the tools the gate would allow now.
#[test]
#[ignore = "got through, not fixed yet (SECURITY.md, known issues): the registry does not know which tools are sync, so definitions list a sync tool an async approver can never let run"]
fn i11_definitions_under_an_async_approver_leave_out_what_can_never_run() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(CountingAsync {
            asked: Arc::new(AtomicUsize::new(0)),
            answer: || Approval::Approve,
            lower: Arc::new(OnceLock::new()),
        })
        .build()
        .unwrap();
    let names = listed(&gate, None, Provider::Anthropic);
    assert!(names.contains("iatk-wipe_async"), "{names:?}");
    assert!(
        !names.contains("iatk-wipe"),
        "a sync HIGH_WRITE tool is listed under an async approver, which refuses its every call"
    );
    let allowed = rig_names(&iatk(&gate).allowed_now());
    assert!(!allowed.contains("iatk-wipe"), "rig: {allowed:?}");
}

// ---------------------------------------------------------------------------------------------------
// spans

/// Tries: a redacted argument of a `record_arguments` tool reaching a span: an allowed call, a call
/// with an extra key, a redacted value of the wrong type, a refused call (mode) and a rejected one
/// (after the arguments were read), all through rig. Guarantee: arguments only for tools declared
/// `record_arguments`, redacted ones as `"[REDACTED]"`; a redacted parameter's bad value is not
/// quoted back, in the span or to the model.
#[test]
fn i12_a_redacted_argument_never_reaches_a_span_or_the_model() {
    let partial = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(TracingSink::new())
        .build()
        .unwrap();
    let rejecting = Gate::builder()
        .mode(Mode::FullAuto)
        .audit(TracingSink::new())
        .approver(|_: &ApprovalRequest<'_>| Approval::Reject("no".into()))
        .build()
        .unwrap();
    let secrets = [
        "S3CRET-TOKEN-A",
        "S3CRET-TOKEN-B",
        "987654321",
        "424242",
        "515151",
        "S3CRET-TOKEN-C",
    ];
    let mut feedback = Vec::new();
    let spans = exported(|| {
        runtime().block_on(async {
            let tools = iatk(&partial);
            let ok = run(
                &tools,
                "iatk.login",
                json!({"user": "ann", "token": "S3CRET-TOKEN-A"}),
            )
            .await
            .unwrap();
            feedback.push(ok.render());
            for arguments in [
                json!({"user": "ann", "token": "S3CRET-TOKEN-B", "zz": 1}),
                json!({"user": "ann", "token": 987654321u64}),
                json!({"token": "S3CRET-TOKEN-C"}),
            ] {
                let error = refusal(run(&tools, "iatk.login", arguments).await);
                feedback.push(format!(
                    "{} {} {error:?}",
                    error.model_feedback().unwrap_or(""),
                    error.model_output().render()
                ));
            }
            let refused =
                refusal(run(&tools, "iatk.vault", json!({"user": "ann", "pin": 424242})).await);
            feedback.push(format!("{:?}", refused));
            let bad_pin = refusal(
                run(
                    &tools,
                    "iatk.vault",
                    json!({"user": "ann", "pin": "424242"}),
                )
                .await,
            );
            feedback.push(format!("{:?}", bad_pin));
            let rejected = refusal(
                run(
                    &iatk(&rejecting),
                    "iatk.vault",
                    json!({"user": "ann", "pin": 515151}),
                )
                .await,
            );
            assert_eq!(rejected.code(), Some("APPROVAL_REJECTED"));
            feedback.push(format!("{:?}", rejected));
        });
    });
    let login = tool_spans(&spans, "iatk.login");
    assert!(login.len() >= 2, "{}", login.len());
    let allowed = login
        .iter()
        .find(|s| attributes(s).get("toolgate.outcome").map(String::as_str) == Some("ok"))
        .expect("the allowed login's span");
    let arguments = &attributes(allowed)["gen_ai.tool.call.arguments"];
    assert!(arguments.contains("[REDACTED]"), "{arguments}");
    for span in &spans {
        let shown = everything(span);
        for secret in secrets {
            assert!(!shown.contains(secret), "a span shows {secret}: {shown}");
        }
    }
    for text in &feedback {
        for secret in secrets {
            assert!(!text.contains(secret), "the model reads {secret}: {text}");
        }
    }
}

/// Tries: the arguments of a tool not declared `record_arguments` reaching a span: an allowed call,
/// an extra key carrying text, a value of the wrong type. Guarantee: arguments only for tools declared
/// `record_arguments`; a refused call by name is recorded with the path of the problem, never the
/// value.
#[test]
fn i13_arguments_not_opted_in_never_reach_a_span() {
    let gate = Gate::builder()
        .mode(Mode::Shadow)
        .audit(TracingSink::new())
        .build()
        .unwrap();
    let spans = exported(|| {
        runtime().block_on(async {
            let tools = iatk(&gate);
            run(
                &tools,
                "iatk.memo",
                json!({"id": 1301, "text": "PLAIN-ARG-ONE"}),
            )
            .await
            .unwrap();
            let _ = run(
                &tools,
                "iatk.memo",
                json!({"id": 1302, "text": "x", "extra": "PLAIN-ARG-TWO"}),
            )
            .await
            .unwrap_err();
            let _ = run(
                &tools,
                "iatk.memo",
                json!({"id": "PLAIN-ARG-THREE", "text": "x"}),
            )
            .await
            .unwrap_err();
            let _ = run(&tools, "iatk.memo", json!({"id": 1304, "text": 7_770_777}))
                .await
                .unwrap_err();
            // A refused tool's arguments.
            let _ = run(
                &tools,
                "iatk.edit",
                json!({"id": 1305, "text": "PLAIN-ARG-FIVE"}),
            )
            .await
            .unwrap_err();
        });
    });
    let memos = tool_spans(&spans, "iatk.memo");
    assert_eq!(memos.len(), 4, "one span per call");
    for span in &spans {
        let a = attributes(span);
        if span.name.starts_with("execute_tool iatk.memo")
            || span.name.starts_with("execute_tool iatk.edit")
        {
            assert!(!a.contains_key("gen_ai.tool.call.arguments"), "{a:#?}");
        }
        let shown = everything(span);
        for value in [
            "PLAIN-ARG-ONE",
            "PLAIN-ARG-TWO",
            "PLAIN-ARG-THREE",
            "7770777",
            "PLAIN-ARG-FIVE",
        ] {
            assert!(!shown.contains(value), "a span shows {value}: {shown}");
        }
    }
}

/// A sink that lowers its gate when it writes a `poke` call's `enter` record, as a slow audit write
/// racing the kill switch would.
struct LoweringSink {
    inner: Arc<dyn AuditSink>,
    gate: Arc<OnceLock<Gate>>,
}

impl AuditSink for LoweringSink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        self.inner.record(record)?;
        if record.stage == Stage::Enter
            && record.tool == "iatk.poke"
            && let Some(gate) = self.gate.get()
        {
            gate.lower(Mode::Shadow).unwrap();
        }
        Ok(())
    }
}

/// Tries: a call refused after its `enter` (the gate lowered while the record was written), through
/// rig: its span left open, or closed without `error.type`. Guarantee: the `exit` of outcome
/// `refused` closes the span; a refusal's span has `error.type` = its code and an error status; the
/// body does not run.
#[test]
fn i14_a_call_refused_after_its_enter_closes_its_span_with_error_type() {
    let memory = MemorySink::new();
    let slot = Arc::new(OnceLock::new());
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(LoweringSink {
            inner: Arc::new(Tee(vec![
                Arc::new(TracingSink::new()),
                Arc::new(memory.clone()),
            ])),
            gate: slot.clone(),
        })
        .build()
        .unwrap();
    slot.set(gate.clone()).ok().unwrap();
    let mut code = None;
    let spans = exported(|| {
        runtime().block_on(async {
            let refused = refusal(run(&iatk(&gate), "iatk.poke", json!({"id": 1401})).await);
            code = refused.code().map(str::to_owned);
        });
    });
    assert_eq!(ran("poke", 1401), 0, "the body ran after the lowering");
    let code = code.expect("a code");
    let records = memory.records();
    every_enter_has_its_exit(&records);
    assert!(
        records
            .iter()
            .any(|r| r.stage == Stage::Exit && r.outcome == Some(Outcome::Refused)),
        "{records:#?}"
    );
    let poke = tool_spans(&spans, "iatk.poke");
    assert_eq!(
        poke.len(),
        1,
        "the span was not closed (or two were opened)"
    );
    let a = attributes(poke[0]);
    assert_eq!(a.get("error.type"), Some(&code), "{a:#?}");
    assert!(
        matches!(poke[0].status, Status::Error { .. }),
        "{:?}",
        poke[0].status
    );
}

/// Tries: an async call through rig cancelled mid-body (its future dropped after a timeout): its
/// span left open, its `exit` missing. Guarantee 8: the `exit` record is written however the body
/// ends, dropped futures included (`cancelled`), and it closes the span with `error.type`.
#[test]
fn i15_a_cancelled_rig_call_closes_its_span() {
    let memory = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::Shadow)
        .audit(Tee(vec![
            Arc::new(TracingSink::new()),
            Arc::new(memory.clone()),
        ]))
        .build()
        .unwrap();
    let spans = exported(|| {
        runtime().block_on(async {
            let tools = iatk(&gate);
            let future = run(&tools, "iatk.hang", json!({"id": 1501}));
            let timed_out = tokio::time::timeout(Duration::from_millis(50), future).await;
            assert!(timed_out.is_err(), "the hang returned");
        });
    });
    assert_eq!(ran("hang-start", 1501), 1, "the body never started");
    let records = memory.records();
    every_enter_has_its_exit(&records);
    assert!(
        records
            .iter()
            .any(|r| r.stage == Stage::Exit && r.outcome == Some(Outcome::Cancelled)),
        "{records:#?}"
    );
    let hang = tool_spans(&spans, "iatk.hang");
    assert_eq!(
        hang.len(),
        1,
        "the span of the cancelled call is still open"
    );
    assert_eq!(
        attributes(hang[0]).get("error.type").map(String::as_str),
        Some("cancelled")
    );
}

/// Tries: a rig call whose gate allows it, run inside another gate's scope that refuses it (nested
/// gates), with the allowing gate's sink a tracing sink: a span left open, or a refusal without
/// `error.type`. Guarantee 5 and 8: a call must pass every gate; every `enter` gets its `exit`, and a
/// refusal by another gate is recorded in the log of the gate that allowed it, with its code.
#[test]
fn i16_a_nested_gate_refusal_closes_the_allowing_gates_span() {
    let memory = MemorySink::new();
    let partial = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(Tee(vec![
            Arc::new(TracingSink::new()),
            Arc::new(memory.clone()),
        ]))
        .build()
        .unwrap();
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let mut code = None;
    let spans = exported(|| {
        runtime().block_on(async {
            let tools = iatk(&partial);
            let result = shadow
                .scope(run(&tools, "iatk.edit", json!({"id": 1601, "text": "x"})))
                .await;
            code = Some(refusal(result).code().map(str::to_owned));
        });
    });
    assert_eq!(ran("edit", 1601), 0, "the outer gate's refusal was skipped");
    assert_eq!(code.flatten().as_deref(), Some("MODE_NOT_ALLOWED"));
    let records = memory.records();
    every_enter_has_its_exit(&records);
    let recorded = records.iter().filter(|r| r.tool == "iatk.edit").count();
    let edit = tool_spans(&spans, "iatk.edit");
    if recorded > 0 {
        assert_eq!(
            edit.len(),
            1,
            "the allowing gate's span is left open: {records:#?}"
        );
    }
    for span in edit {
        let a = attributes(span);
        assert!(
            a.contains_key("error.type"),
            "a refused call's span: {a:#?}"
        );
    }
}

/// An audit sink that cannot write.
struct Unwritable;

impl AuditSink for Unwritable {
    fn record(&self, _: &AuditRecord) -> Result<(), AuditError> {
        Err(AuditError::new("the audit disk is gone"))
    }
}

/// Tries: a tracing sink teed with a durable log that fails (a full disk): the tracing sink takes
/// the `enter` (opens the span), the other refuses it, and the call is refused `AUDIT_UNAVAILABLE`.
/// The span may then be left open with no `exit` ever coming. Guarantee: the body does not run
/// without its `enter` written; every span opened at an `enter` is closed, and a refusal carries
/// `error.type`.
#[test]
#[ignore = "got through, not fixed yet (SECURITY.md, known issues): a sink that wraps TracingSink and fails after it took an enter leaves that span open"]
fn i17_a_failed_enter_leaves_no_span_open() {
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(Tee(vec![
            Arc::new(TracingSink::new()),
            Arc::new(Unwritable),
        ]))
        .build()
        .unwrap();
    let spans = exported(|| {
        runtime().block_on(async {
            let refused =
                refusal(run(&iatk(&gate), "iatk.edit", json!({"id": 1701, "text": "x"})).await);
            assert_eq!(refused.code(), Some("AUDIT_UNAVAILABLE"));
        });
    });
    assert_eq!(ran("edit", 1701), 0, "the body ran without its enter");
    let edit = tool_spans(&spans, "iatk.edit");
    assert!(
        !edit.is_empty(),
        "the span opened at the enter record was never closed"
    );
    for span in edit {
        let a = attributes(span);
        assert!(
            a.contains_key("error.type"),
            "a refused call's span: {a:#?}"
        );
    }
}

/// i17 with the gate's own sinks (`.audit` given twice) rather than a hand-written tee: the failing
/// sink's refusal closes, in the tracing sink, the span its `enter` opened.
#[test]
fn i17_a_failed_enter_in_a_gate_with_two_sinks_leaves_no_span_open() {
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(TracingSink::new())
        .audit(Unwritable)
        .build()
        .unwrap();
    let spans = exported(|| {
        runtime().block_on(async {
            let refused =
                refusal(run(&iatk(&gate), "iatk.edit", json!({"id": 1702, "text": "x"})).await);
            assert_eq!(refused.code(), Some("AUDIT_UNAVAILABLE"));
        });
    });
    assert_eq!(ran("edit", 1702), 0, "the body ran without its enter");
    let edit = tool_spans(&spans, "iatk.edit");
    assert_eq!(
        edit.len(),
        1,
        "the span opened at the enter record is closed"
    );
    let a = attributes(edit[0]);
    assert_eq!(
        a.get("error.type").map(String::as_str),
        Some("AUDIT_UNAVAILABLE"),
        "{a:#?}"
    );
}

/// Tries: every refusal code a rig call can meet, with a tracing sink: `error.type` missing on one
/// (a refusal at the door: `INVALID_PARAMS`; the gate's: `MODE_NOT_ALLOWED`, `DENY_LISTED`,
/// `APPROVAL_REQUIRED` for a sync tool under an async approver, `APPROVAL_REJECTED`), or the span
/// count not one per call. Guarantee: one `execute_tool` span per call, `error.type` = the refusal's
/// code.
#[test]
fn i18_every_refusal_through_rig_has_its_error_type() {
    let sink = TracingSink::new();
    let shadow = Gate::builder()
        .mode(Mode::Shadow)
        .audit(sink.clone())
        .build()
        .unwrap();
    let denying = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .deny("iatk.x.y_z")
        .audit(sink.clone())
        .build()
        .unwrap();
    let asyncly = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(CountingAsync {
            asked: Arc::new(AtomicUsize::new(0)),
            answer: || Approval::Approve,
            lower: Arc::new(OnceLock::new()),
        })
        .audit(sink.clone())
        .build()
        .unwrap();
    let rejecting = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_: &ApprovalRequest<'_>| Approval::Reject("no".into()))
        .audit(sink)
        .build()
        .unwrap();
    let cases: [(&Gate, &str, Value, &str); 5] = [
        (&shadow, "iatk.peek", json!({"id": "x"}), "INVALID_PARAMS"),
        (
            &shadow,
            "iatk.edit",
            json!({"id": 1801, "text": "x"}),
            "MODE_NOT_ALLOWED",
        ),
        (&denying, "iatk.x.y_z", json!({"id": 1802}), "DENY_LISTED"),
        (
            &asyncly,
            "iatk.wipe",
            json!({"id": 1803}),
            "APPROVAL_REQUIRED",
        ),
        (
            &rejecting,
            "iatk.wipe",
            json!({"id": 1804}),
            "APPROVAL_REJECTED",
        ),
    ];
    let spans = exported(|| {
        runtime().block_on(async {
            for (gate, id, arguments, code) in &cases {
                let refused = refusal(run(&iatk(gate), id, arguments.clone()).await);
                assert_eq!(refused.code(), Some(*code), "{id}");
            }
        });
    });
    for (_, id, _, code) in &cases {
        let found: Vec<&SpanData> = tool_spans(&spans, id)
            .into_iter()
            .filter(|s| attributes(s).get("error.type").map(String::as_str) == Some(*code))
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{id}: {code} spans: {:#?}",
            tool_spans(&spans, id)
                .iter()
                .map(|s| attributes(s))
                .collect::<Vec<_>>()
        );
    }
    let all: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name.starts_with("execute_tool "))
        .collect();
    assert_eq!(all.len(), cases.len(), "one span per call");
    assert_eq!(
        ran("wipe", 1803) + ran("wipe", 1804) + ran("x.y_z", 1802),
        0
    );
}

/// Tries: an argument's data in the path of an `INVALID_PARAMS` refusal: a map parameter's keys are
/// the caller's values, not the tool's schema, so a bad value under the key `sk-live-...` puts that
/// key in the path: in the span of a tool not opted in to recording arguments, and, for a redacted
/// map, in the span and the model's feedback. Guarantee: arguments only for tools declared
/// `record_arguments`; a refused call by name is recorded "with the path of the problem, never the
/// value"; a redacted parameter's bad value is not quoted back.
#[test]
#[ignore = "got through, not fixed yet (SECURITY.md, known issues): an INVALID_PARAMS path names the key of a map parameter that is not redacted"]
fn i19_a_map_key_is_argument_data_and_never_reaches_a_span() {
    let gate = Gate::builder()
        .mode(Mode::Shadow)
        .audit(TracingSink::new())
        .build()
        .unwrap();
    let mut feedback = Vec::new();
    let spans = exported(|| {
        runtime().block_on(async {
            let tools = iatk(&gate);
            let error = refusal(
                run(
                    &tools,
                    "iatk.tag",
                    json!({"tags": {"sk-live-MAPKEY-ONE": "not a number"}}),
                )
                .await,
            );
            assert_eq!(error.code(), Some("INVALID_PARAMS"));
            let error = refusal(
                run(
                    &tools,
                    "iatk.send",
                    json!({"to": "bob", "headers": {"sk-live-MAPKEY-TWO": "not a number"}}),
                )
                .await,
            );
            assert_eq!(error.code(), Some("INVALID_PARAMS"));
            feedback.push(format!(
                "{} {}",
                error.model_feedback().unwrap_or(""),
                error.message()
            ));
        });
    });
    assert_eq!(ran("tag", 1) + ran("send", 1), 0);
    // The redacted map first: its key in the model's feedback or in a span.
    for text in &feedback {
        assert!(
            !text.contains("sk-live-MAPKEY-TWO"),
            "the model reads a redacted argument's key: {text}"
        );
    }
    for key in ["sk-live-MAPKEY-TWO", "sk-live-MAPKEY-ONE"] {
        for span in &spans {
            let shown = everything(span);
            assert!(
                !shown.contains(key),
                "a span shows the map key {key}: {shown}"
            );
        }
    }
}

/// Tries: a body that panics, reached through rig: its `exit` missing, its span left open, the panic
/// taking the audit with it. Guarantee 8: the `exit` record is written however the body ends, panics
/// included (`panic`), and it closes the call's span with `error.type` = `panic`.
#[test]
fn i20_a_panicking_body_through_rig_closes_its_span() {
    let memory = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::Shadow)
        .audit(Tee(vec![
            Arc::new(TracingSink::new()),
            Arc::new(memory.clone()),
        ]))
        .build()
        .unwrap();
    let spans = exported(|| {
        runtime().block_on(async {
            let tools = iatk(&gate);
            let future =
                std::panic::AssertUnwindSafe(run(&tools, "iatk.boom", json!({"id": 2001})));
            let caught = futures_catch(future).await;
            // Either rig turned the panic into an error, or it reached us: never a success.
            assert!(
                !matches!(caught, Some(Ok(_))),
                "a panic reported as a success"
            );
        });
    });
    assert_eq!(ran("boom", 2001), 1);
    let records = memory.records();
    every_enter_has_its_exit(&records);
    assert!(
        records
            .iter()
            .any(|r| r.stage == Stage::Exit && r.outcome == Some(Outcome::Panic)),
        "{records:#?}"
    );
    let boom = tool_spans(&spans, "iatk.boom");
    assert_eq!(boom.len(), 1, "the panicked call's span is still open");
    assert_eq!(
        attributes(boom[0]).get("error.type").map(String::as_str),
        Some("panic")
    );
}

/// Polls `future` to its end, catching a panic (`None`).
async fn futures_catch<F: std::future::Future>(
    future: std::panic::AssertUnwindSafe<F>,
) -> Option<F::Output> {
    let mut future = std::pin::pin!(future.0);
    std::future::poll_fn(move |cx| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(std::task::Poll::Ready(output)) => std::task::Poll::Ready(Some(output)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(_) => std::task::Poll::Ready(None),
        }
    })
    .await
}

/// Tries: an approver asked about a rig call of a tool with a redacted parameter: the real value in
/// `request.arguments`. Guarantee: the approver sees the arguments as the audit log writes them, a
/// redacted one as `"[REDACTED]"`; the redacted value is never seen by an approver.
#[tokio::test]
async fn i21_an_approver_of_a_rig_call_never_sees_a_redacted_value() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(move |request: &ApprovalRequest<'_>| {
            log.lock().unwrap().push(format!("{:?}", request.arguments));
            Approval::Approve
        })
        .build()
        .unwrap();
    let done = run(
        &iatk(&gate),
        "iatk.vault",
        json!({"user": "ann", "pin": 613_613}),
    )
    .await
    .unwrap();
    assert_eq!(done.as_text(), Some("ann opened the vault"));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert!(
        !seen[0].contains("613613"),
        "the approver saw the pin: {}",
        seen[0]
    );
    assert!(seen[0].contains("[REDACTED]"), "{}", seen[0]);
}

/// Tries: a two-step approval's token in the spans and events the tracing sink emits for the
/// refused call (a refusal's message is `otel.status_description`): whoever reads the traces could
/// then approve. Guarantee 7 and the README: the token is for the operator, not in the message or
/// JSON of the refusal.
#[test]
fn i22_a_two_step_token_is_not_in_a_span() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .audit(TracingSink::new())
        .build()
        .unwrap();
    let mut token = None;
    let spans = exported(|| {
        runtime().block_on(async {
            let error = registry()
                .call(&gate, "iatk.wipe", json!({"id": 2201}))
                .await
                .unwrap_err();
            token = error
                .denied()
                .and_then(Denied::approval_token)
                .map(str::to_owned);
            let _ = run(&iatk(&gate), "iatk.wipe", json!({"id": 2201})).await;
        });
    });
    let token = token.expect("a token");
    assert!(!spans.is_empty());
    for span in &spans {
        let shown = everything(span);
        assert!(!shown.contains(&token), "a span holds the token: {shown}");
    }
    assert_eq!(ran("wipe", 2201), 0);
}

/// Tries: two `#[toolset]` types of one name, declared in two blocks of one function (so
/// `std::any::type_name` gives both the same name), one instance given to rig and to
/// `definitions_with`: the other type's HIGH_WRITE method offered on it, or run on an instance of
/// the wrong type. Guarantee: a method runs on the instance of its own type; without it,
/// `NO_INSTANCE` and not listed.
#[tokio::test]
async fn i23_two_toolset_types_of_one_name_are_not_confused() {
    let first = {
        pub struct Twin(u64);
        #[toolset(domain = "iatkt")]
        impl Twin {
            /// Read the first twin.
            #[tool(risk = "READ_ONLY", callable)]
            pub fn read_first(&self) -> Result<u64, Denied> {
                note("read_first", self.0);
                Ok(self.0)
            }
        }
        Twin(2301)
    };
    {
        pub struct Twin(String);
        #[toolset(domain = "iatkt")]
        impl Twin {
            /// Write with the second twin.
            #[tool(risk = "READ_ONLY", callable)]
            pub fn write_second(&self) -> Result<String, Denied> {
                note("write_second", self.0.len() as u64);
                Ok(self.0.clone())
            }
        }
        let _ = Twin(String::new());
    }
    let gate = full_allow();
    let tools = RigTools::new(gate.clone()).instance(first);
    let names = rig_names(&tools);
    assert!(names.contains("iatkt-read_first"), "{names:?}");
    if let Some(second) = tools.tool("iatkt.write_second") {
        let result = second.execute(json!({})).await;
        assert!(
            result.is_err(),
            "the second twin's method ran on the first twin's instance"
        );
    }
    assert!(
        !names.contains("iatkt-write_second"),
        "offered without its instance: {names:?}"
    );
    let read = run(&tools, "iatkt.read_first", json!({})).await.unwrap();
    assert_eq!(read.as_json(), Some(&json!(2301)));
    assert_eq!(
        RAN.lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| *t == "write_second")
            .count(),
        0
    );
}
