//! Outside attacks where the newest surfaces meet: an rmcp handler's resources and prompts gated in
//! place (URI spellings, a reload while a read waits, what a record keeps of a URI), the operator's
//! policy file reaching in-place tools, approvals bound to the caller a transport authenticated
//! (bearer principals and OAuth subjects sharing a gate, look-alike names, in-band states, per-session
//! handlers), redaction in place, and the text shown to a person.
//!
//! Each test names what it asserts; its doc comment says the attack and the documented sentence it
//! holds the library to. A test that fails is an attack that got through.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth", feature = "policy-file"))]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResult, ListPromptsResult,
    ListResourcesResult, PaginatedRequestParams, Prompt, PromptMessage, ReadResourceRequestParams,
    ReadResourceResult, Resource, ResourceContents, Role, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, ServiceError};
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use toolgate::audit::{AuditError, AuditRecord, AuditSink, MemorySink, Stage};
use toolgate::mcp::http::Principals;
use toolgate::mcp::oauth::{Algorithm, Jwks, OAuth};
use toolgate::mcp::{PendingApproval, ToolgateServer};
use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::{Gate, Mode};

use crate::fixtures::handlers::{
    ALICE, BOB, Client, ISSUER, TestKey, call, claims, code_of, connect, form_message, http_call,
    in_band, open_session, runtime, serve_http, serve_on, session_call, token_of,
};
use crate::fixtures::shared_stores::Memory;
// The parameter types whose `Deserialize` and JSON disagree, as g21 wrote them.
use crate::fixtures::support::approve_for_session;
use crate::g21_attacks_in_place::{Masked, MaskedLogin, TrimmedLogin, digits};

fn ok(text: String) -> Result<CallToolResult, ErrorData> {
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
}

type Pending = Arc<Mutex<Vec<PendingApproval>>>;

fn policy(text: &str) -> PolicyFile {
    PolicyFile::parse("ops.toml", text).unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------------------------------
// Parameter types.
// ---------------------------------------------------------------------------------------------------

/// A secret wrapper that serializes as `***`, whatever it holds.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct PinLogin22 {
    /// Who.
    user: String,
    /// How many times the user has tried.
    retries: u64,
    /// The PIN, sent as a string of digits (leading zeros allowed), read as a number.
    #[serde(rename = "code", deserialize_with = "digits")]
    #[schemars(with = "String")]
    pin: u64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Keys22 {
    /// Labels of the keys.
    labels: Vec<String>,
    /// The keys, in wrappers that serialize as `***`.
    #[schemars(with = "Vec<String>")]
    keys: Vec<Masked>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Pay22 {
    /// The fee.
    fee: f64,
    /// The amount, secret.
    amount: f64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct PinTyped22 {
    /// Who.
    user: String,
    /// The PIN, sent as `code`.
    #[serde(rename = "code")]
    pin: u64,
}

#[derive(Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub(crate) enum Zone22 {
    North,
    South,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct ZoneArgs22 {
    /// Who.
    user: String,
    /// The secret zone.
    zone: Zone22,
}

#[derive(Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Creds22 {
    /// A PIN.
    pin: u64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct NestedPin22 {
    /// Who.
    user: String,
    /// The credentials.
    creds: Creds22,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Note22 {
    /// The note.
    text: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Label22 {
    /// The label's text.
    text: String,
    /// Labels by key.
    labels: BTreeMap<String, String>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Shelf22 {
    /// The shelf.
    shelf: String,
}

static LOGINS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static PURGED: AtomicUsize = AtomicUsize::new(0);
static WIPES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// An rmcp handler as its users write one, gated in place.
#[derive(Clone, Default)]
pub(crate) struct Desk22;

#[toolgate::toolset(domain = "g22")]
#[tool_router]
impl Desk22 {
    /// Log in: the password renamed `pw`, in a wrapper that serializes as `***`.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", record_arguments, redact = [password])]
    pub(crate) async fn g22_login_masked(
        &self,
        Parameters(l): Parameters<MaskedLogin>,
    ) -> Result<CallToolResult, ErrorData> {
        LOGINS.lock().unwrap().push(l.password.0.clone());
        ok(l.user)
    }

    /// Log in: the password renamed `pw`, trimmed as it is read.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", record_arguments, redact = [password])]
    pub(crate) async fn g22_login_trimmed(
        &self,
        Parameters(l): Parameters<TrimmedLogin>,
    ) -> Result<CallToolResult, ErrorData> {
        LOGINS.lock().unwrap().push(l.password.clone());
        ok(l.user)
    }

    /// Log in with a PIN sent as digits.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", record_arguments, redact = [pin])]
    pub(crate) async fn g22_login_pin(
        &self,
        Parameters(l): Parameters<PinLogin22>,
    ) -> Result<CallToolResult, ErrorData> {
        LOGINS.lock().unwrap().push(l.pin.to_string());
        ok(format!("{} {}", l.user, l.retries))
    }

    /// Store keys, each in a wrapper that serializes as `***`.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", record_arguments, redact = [keys])]
    pub(crate) async fn g22_store_keys(
        &self,
        Parameters(k): Parameters<Keys22>,
    ) -> Result<CallToolResult, ErrorData> {
        LOGINS
            .lock()
            .unwrap()
            .extend(k.keys.iter().map(|k| k.0.clone()));
        ok(k.labels.join(","))
    }

    /// Pay an amount that is secret.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", record_arguments, redact = [amount])]
    pub(crate) async fn g22_pay(
        &self,
        Parameters(p): Parameters<Pay22>,
    ) -> Result<CallToolResult, ErrorData> {
        ok(format!("paid {} + {}", p.amount, p.fee))
    }

    /// Check a PIN sent as `code`.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", record_arguments, redact = [pin])]
    pub(crate) async fn g22_pin_typed(
        &self,
        Parameters(p): Parameters<PinTyped22>,
    ) -> Result<CallToolResult, ErrorData> {
        ok(format!("{} {}", p.user, p.pin))
    }

    /// Move to a secret zone.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", record_arguments, redact = [zone])]
    pub(crate) async fn g22_zone(
        &self,
        Parameters(z): Parameters<ZoneArgs22>,
    ) -> Result<CallToolResult, ErrorData> {
        ok(format!("{} {:?}", z.user, z.zone))
    }

    /// Log in with nested credentials.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", record_arguments, redact = [creds])]
    pub(crate) async fn g22_nested(
        &self,
        Parameters(n): Parameters<NestedPin22>,
    ) -> Result<CallToolResult, ErrorData> {
        ok(format!("{} {}", n.user, n.creds.pin))
    }

    /// Write a note.
    #[tool]
    #[toolgate(risk = "LOW_WRITE")]
    pub(crate) async fn g22_note(
        &self,
        Parameters(n): Parameters<Note22>,
    ) -> Result<CallToolResult, ErrorData> {
        NOTES.lock().unwrap().push(n.text.clone());
        ok(n.text)
    }

    /// Purge everything: served under another MCP name than its method's.
    #[tool(name = "g22-purge")]
    #[toolgate(risk = "LOW_WRITE")]
    pub(crate) async fn g22_purge_all(&self) -> Result<CallToolResult, ErrorData> {
        PURGED.fetch_add(1, Ordering::SeqCst);
        ok("purged".into())
    }

    /// Label something, approved by a person.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", record_arguments)]
    pub(crate) async fn g22_label(
        &self,
        Parameters(l): Parameters<Label22>,
    ) -> Result<CallToolResult, ErrorData> {
        ok(format!("{} {}", l.text, l.labels.len()))
    }

    /// Wipe a shelf.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE")]
    pub(crate) async fn g22_wipe(
        &self,
        Parameters(s): Parameters<Shelf22>,
    ) -> Result<CallToolResult, ErrorData> {
        WIPES.lock().unwrap().push(s.shelf.clone());
        ok(format!("wiped {}", s.shelf))
    }
}

#[tool_handler]
impl ServerHandler for Desk22 {}

fn full_auto(sink: &Arc<Memory>) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .principal("carol")
        .audit_shared(sink.clone())
        .build()
        .unwrap()
}

fn desk_server(gate: &Gate, pending: &Pending) -> ToolgateServer {
    let pending = pending.clone();
    ToolgateServer::new(gate.clone())
        .handler(Desk22)
        .on_pending(move |p| pending.lock().unwrap().push(p.clone()))
}

/// What a person or a log is shown of `tool` called with `arguments`: the operator's pending request
/// (out of band), every audit record, the client's answers, and the in-band form's message.
fn shown_for(tool: &str, arguments: Value) -> String {
    runtime().block_on(async {
        let sink = Arc::new(Memory::default());
        let pending: Pending = Arc::default();
        let gate = full_auto(&sink);
        let client = connect(desk_server(&gate, &pending)).await;
        let said = call(&client, tool, arguments.clone()).await;
        assert_eq!(code_of(&said), "APPROVAL_PENDING", "{said:?}");
        let told = pending.lock().unwrap().last().cloned().expect("told");
        let in_band_client = connect(desk_server(&gate, &pending).approvals(in_band())).await;
        let asked = call(&in_band_client, tool, arguments).await;
        let form = form_message(&asked);
        let records = serde_json::to_string(&sink.records()).unwrap();
        format!(
            "operator: {}\nform: {form}\nlog: {records}\nclient: {said:?}",
            told.arguments
        )
    })
}

// ---------------------------------------------------------------------------------------------------
// Resources and prompts.
// ---------------------------------------------------------------------------------------------------

/// A cloud's resources and prompts; it keeps every URI and prompt name it was asked for.
#[derive(Clone, Default)]
struct Cloud22 {
    reads: Arc<Mutex<Vec<String>>>,
    gets: Arc<Mutex<Vec<String>>>,
}

impl ServerHandler for Cloud22 {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(
            ["cloud://inventory", "cloud://secrets/db", "cloud://runbook"]
                .iter()
                .map(|uri| Resource::new(*uri, *uri))
                .collect(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        self.reads.lock().unwrap().push(request.uri.clone());
        Ok(
            ReadResourceResult::new(vec![ResourceContents::text("web-1, db-1", request.uri)])
                .into(),
        )
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "triage",
            Some("Triage."),
            None,
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        self.gets.lock().unwrap().push(request.name.clone());
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, "What broke?")]).into())
    }
}

fn reads_gate(live: &LivePolicy, sink: &MemorySink) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .principal("ops")
        .policy(live.clone())
        .audit(sink.clone())
        .build()
        .expect("a gate")
}

fn refusal(error: ServiceError) -> String {
    match error {
        ServiceError::McpError(e) => e
            .data
            .as_ref()
            .and_then(|d| d["code"].as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("RPC {}", e.code.0)),
        other => format!("ERR {other}"),
    }
}

async fn read(client: &Client, uri: &str) -> Result<(), String> {
    client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .map(drop)
        .map_err(refusal)
}

async fn get(client: &Client, name: &str) -> Result<(), String> {
    client
        .get_prompt(GetPromptRequestParams::new(name))
        .await
        .map(drop)
        .map_err(refusal)
}

/// Reads each URI through a gate following `rules`; the URIs the handler was handed.
fn handed(rules: &str, uris: &[&str]) -> Vec<String> {
    runtime().block_on(async {
        let live = LivePolicy::new(policy(rules));
        let cloud = Cloud22::default();
        let client = connect(
            ToolgateServer::new(reads_gate(&live, &MemorySink::new())).handler(cloud.clone()),
        )
        .await;
        let mut through = Vec::new();
        for uri in uris {
            if read(&client, uri).await.is_ok() {
                through.push((*uri).to_owned());
            }
        }
        assert_eq!(
            through,
            cloud.reads.lock().unwrap().clone(),
            "what passed is what the handler read"
        );
        through
    })
}

const DENY_READS: &str =
    "format = 1\n[defaults]\ndeny_resources = [\"cloud://secrets/db\", \"cloud://inventory*\"]\n";

/// g22_01. Attack: an exact deny pattern (`cloud://secrets/db`) against the same path written with a
/// trailing slash, an empty segment, a `.` segment, a `..` that comes back, and the scheme's case.
/// docs/mcp.md: a URI is compared "as written and as it reads (... its scheme's case, and its path
/// read as what it names ...)"; SECURITY.md names: "empty and `.` segments are dropped, `..` takes
/// back the named segment before it". Asserted: the handler reads none of them.
#[test]
fn g22_01_an_exact_resource_deny_reaches_the_path_spelled_with_dots_slashes_and_case() {
    let through = handed(
        DENY_READS,
        &[
            "cloud://secrets/db/",
            "cloud://secrets//db",
            "cloud://secrets/./db",
            "cloud://secrets/x/../db",
            "CLOUD://secrets/db",
            "cloud://./secrets/db",
        ],
    );
    assert!(through.is_empty(), "read past the deny: {through:#?}");
}

/// g22_02. Attack: the separators and dots of the path percent-escaped (`%2F`, `%2E%2E`), and an
/// escaped letter in an exact pattern's last segment. docs/mcp.md: "a pattern reaches it where it
/// matches either way, so `CLOUD://%69nventory`, `cloud://runbook/../inventory` ... are what
/// `cloud://inventory*` ... deny" ("its percent-escapes decoded ... and its path read as what it
/// names"). Asserted: the handler reads none of them.
#[test]
fn g22_02_a_resource_deny_reaches_percent_escaped_separators_and_dots() {
    let through = handed(
        DENY_READS,
        &[
            "cloud://secrets%2Fdb",
            "cloud://secrets/%64b",
            "cloud://secrets/x%2F..%2Fdb",
            "cloud://secrets/x/%2E%2E/db",
            "cloud://runbook/%2e%2e/inventory",
            "cloud:%2F%2Finventory",
            "cloud://runbook/../../inventory",
            "cloud://%D1%96nventory",
        ],
    );
    assert!(through.is_empty(), "read past the deny: {through:#?}");
}

/// g22_03. Attack: the denied inventory named as an RFC 3986 reader names it: the host in capitals
/// (hosts are case-insensitive) and with a userinfo before it, which a handler that parses its URIs
/// drops. docs/mcp.md: "A gate that refuses the tool `ops.list_instances` must not hand the same
/// inventory out as the resource `cloud://inventory`". Asserted: the handler is handed none of them.
#[test]
fn g22_03_a_resource_deny_reaches_the_host_in_capitals_or_behind_a_userinfo() {
    let through = handed(
        DENY_READS,
        &[
            "cloud://INVENTORY",
            "cloud://Inventory/eu",
            "cloud://ops@inventory",
            "cloud://ops:x@secrets/db",
        ],
    );
    assert!(through.is_empty(), "read past the deny: {through:#?}");
}

/// g22_04. Attack: a denied prompt asked for in compatibility forms, with spaces around it, with a
/// dotless `ı`, and with a zero-width joiner. docs/mcp.md: a prompt name "is compared as written and
/// as it reads"; "A URI or prompt name that holds a character a reader cannot see ... is refused
/// outright". Asserted: the handler gets none of them.
#[test]
fn g22_04_a_prompt_deny_reaches_its_look_alikes() {
    runtime().block_on(async {
        let live = LivePolicy::new(policy(
            "format = 1\n[defaults]\ndeny_prompts = [\"triage\"]\n",
        ));
        let cloud = Cloud22::default();
        let client = connect(
            ToolgateServer::new(reads_gate(&live, &MemorySink::new())).handler(cloud.clone()),
        )
        .await;
        let mut through = Vec::new();
        for name in [
            "ｔｒｉａｇｅ",
            " triage",
            "triage ",
            "tr\u{131}age",
            "tri\u{200d}age",
            "tri\u{ad}age",
            "triag\u{435}",
        ] {
            if get(&client, name).await.is_ok() {
                through.push(name);
            }
        }
        assert!(through.is_empty(), "got past the deny: {through:?}");
        assert!(cloud.gets.lock().unwrap().is_empty());
    });
}

/// g22_05. Attack: `record_resources` asks for a read record of `cloud://billing/*` and the log
/// fails; the read is spelled otherwise (scheme's case, an escaped letter, a `..` that comes back,
/// an empty segment) so that the record rule does not see it and the read goes on unrecorded.
/// docs/policy_file.md: "A pattern is compared as the server compares names: as written, and as it
/// reads"; `record_resources` "refused `AUDIT_UNAVAILABLE` where the log cannot write it". Asserted:
/// each is refused, and the handler reads none.
#[test]
fn g22_05_a_record_rule_reaches_the_read_spelled_otherwise() {
    runtime().block_on(async {
        let live = LivePolicy::new(policy(
            "format = 1\n[defaults]\nrecord_resources = [\"cloud://billing/*\"]\n",
        ));
        let cloud = Cloud22::default();
        let log = MemorySink::new();
        let client =
            connect(ToolgateServer::new(reads_gate(&live, &log)).handler(cloud.clone())).await;
        log.fail(true);
        let mut through = Vec::new();
        for uri in [
            "cloud://billing/q3",
            "Cloud://billing/q3",
            "cloud://%62illing/q3",
            "cloud://runbook/../billing/q3",
            "cloud://billing//q3",
        ] {
            if read(&client, uri).await.is_ok() {
                through.push(uri);
            }
        }
        assert!(through.is_empty(), "read unrecorded: {through:?}");
        assert!(cloud.reads.lock().unwrap().is_empty());
    });
}

/// A sink that holds the first `read` record of `cloud://billing` until released.
#[derive(Default)]
struct Holding {
    inner: MemorySink,
    entered: AtomicBool,
    released: Mutex<bool>,
    wake: Condvar,
}

impl AuditSink for Holding {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if record.stage == Stage::Read
            && record.tool.starts_with("resource:cloud://billing")
            && !self.entered.swap(true, Ordering::SeqCst)
        {
            let mut released = self.released.lock().unwrap();
            while !*released {
                released = self.wake.wait(released).unwrap();
            }
        }
        self.inner.record(record)
    }
}

/// g22_06. Attack: a read that the policy records is waiting on its `read` record when the operator
/// replaces the policy with one that denies it; the record is then written and the read goes on.
/// docs/policy_file.md: "A replacement reaches every gate before `replace` returns. Within a gate, what
/// the new file takes away is taken before its table is in place ...; a call decided under the old
/// file and not yet past its commit point is decided again there"; docs/mcp.md: "A policy replaced
/// live decides the next read." Asserted: once `replace` has returned, the handler does not read the
/// denied resource.
#[test]
fn g22_06_a_read_waiting_on_its_record_when_a_deny_lands_is_not_read() {
    runtime().block_on(async {
        let live = LivePolicy::new(policy(
            "format = 1\n[defaults]\nrecord_resources = [\"cloud://billing/*\"]\n",
        ));
        let sink = Arc::new(Holding::default());
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .principal("ops")
            .policy(live.clone())
            .audit_shared(sink.clone())
            .build()
            .expect("a gate");
        let cloud = Cloud22::default();
        let client = connect(ToolgateServer::new(gate).handler(cloud.clone())).await;
        let peer = client.peer().clone();
        let reading = tokio::spawn(async move {
            peer.read_resource(ReadResourceRequestParams::new("cloud://billing/q3"))
                .await
                .map(drop)
                .map_err(refusal)
        });
        for _ in 0..500 {
            if sink.entered.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            sink.entered.load(Ordering::SeqCst),
            "the read waits on its record"
        );
        let replaced = tokio::task::spawn_blocking(move || {
            live.replace(
                policy("format = 1\n[defaults]\ndeny_resources = [\"cloud://billing/*\"]\n"),
                "ops",
            )
        });
        // `replace` may wait for the read; give it time, then let the record through either way.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let returned_first = replaced.is_finished();
        *sink.released.lock().unwrap() = true;
        sink.wake.notify_all();
        replaced.await.expect("replaced");
        let said = reading.await.expect("answered");
        assert!(
            cloud.reads.lock().unwrap().is_empty(),
            "read after the deny landed (replace returned while the read waited: \
             {returned_first}): {said:?}"
        );
    });
}

/// g22_07. Attack: a token carried in a URI's userinfo (`cloud://ops:TOKEN@billing/q3`), as
/// `https://user:pass@host` URLs carry one, read where the policy records reads. docs/mcp.md: a
/// record names the read by "the URI without its query and fragment, which may carry a token".
/// Asserted: the token is in no record.
#[test]
fn g22_07_a_token_in_a_uri_s_userinfo_is_not_written_to_the_log() {
    runtime().block_on(async {
        let live = LivePolicy::new(policy(
            "format = 1\n[defaults]\nrecord_resources = [\"cloud://*\"]\ndeny_resources = [\"cloud://*secrets*\"]\n",
        ));
        let log = MemorySink::new();
        let client =
            connect(ToolgateServer::new(reads_gate(&live, &log)).handler(Cloud22::default())).await;
        let _ = read(&client, "cloud://ops:g22-07-tok3n@billing/q3").await;
        let _ = read(&client, "cloud://ops:g22-07-t0ken@secrets/db").await;
        let records = format!("{:?}", log.records());
        assert!(records.contains("resource:"), "{records}");
        assert!(
            !records.contains("g22-07-tok3n") && !records.contains("g22-07-t0ken"),
            "the log keeps the token: {records}"
        );
    });
}

// ---------------------------------------------------------------------------------------------------
// The policy file and tools gated in place.
// ---------------------------------------------------------------------------------------------------

fn policy_gate(mode: Mode, live: &LivePolicy) -> Gate {
    Gate::builder()
        .mode(mode)
        .principal("ops")
        .agent("bot22")
        .policy(live.clone())
        .two_step_approvals()
        .build()
        .expect("a gate")
}

/// g22_08. Attack: a tool whose rmcp `#[tool(name = "g22-purge")]` is not its method's name; the
/// operator denies it by `<domain>.<name>` and by its MCP name, and the agent calls it by its MCP
/// name. docs/mcp.md: "A deny rule or a budget reaches an in-place tool by its MCP name and by
/// `<domain>.<name>`". Asserted: both spellings the docs name are accepted by the parser, and every
/// deny the parser accepts refuses the call before the body.
#[test]
fn g22_08_a_deny_by_domain_and_name_reaches_a_renamed_in_place_tool() {
    runtime().block_on(async {
        let mut problems = Vec::new();
        for pattern in ["g22-purge", "g22.g22-purge", "g22.g22_purge_all", "g22.*"] {
            let text = format!("format = 1\n[defaults]\ndeny = [\"{pattern}\"]\n");
            let parsed = PolicyFile::parse("ops.toml", &text);
            let Ok(parsed) = parsed else {
                if pattern == "g22-purge" || pattern == "g22.g22-purge" {
                    problems.push(format!("{pattern}: refused by the parser"));
                }
                continue;
            };
            let live = LivePolicy::new(parsed);
            let before = PURGED.load(Ordering::SeqCst);
            let client =
                connect(ToolgateServer::new(policy_gate(Mode::PartialAuto, &live)).handler(Desk22))
                    .await;
            let said = call(&client, "g22-purge", json!({})).await;
            if code_of(&said) != "DENY_LISTED" || PURGED.load(Ordering::SeqCst) != before {
                problems.push(format!("{pattern}: {}", code_of(&said)));
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    });
}

/// g22_09. Attack: the client lists the tools, the operator then denies one in the agent's table,
/// and the client calls what its list showed. docs/policy_file.md: "A replacement reaches every gate
/// before `replace` returns"; docs/mcp.md: "Listing is advice: a tool called anyway is still decided
/// by the gate". Asserted: the call is refused `DENY_LISTED` and the note is not written.
#[test]
fn g22_09_a_deny_landing_between_the_list_and_the_call_refuses_the_call() {
    runtime().block_on(async {
        let live = LivePolicy::new(policy("format = 1\n"));
        let client =
            connect(ToolgateServer::new(policy_gate(Mode::PartialAuto, &live)).handler(Desk22))
                .await;
        let tools = client.list_all_tools().await.expect("a list");
        assert!(tools.iter().any(|t| t.name == "g22_note"));
        live.replace(
            policy("format = 1\n[agents.bot22]\ndeny = [\"g22.g22_note\"]\n"),
            "ops",
        );
        let said = call(&client, "g22_note", json!({"text": "g22-09"})).await;
        assert_eq!(code_of(&said), "DENY_LISTED", "{said:?}");
        assert!(!NOTES.lock().unwrap().iter().any(|n| n == "g22-09"));
    });
}

/// g22_10. Attack: the operator writes `ask` and an argument rule for an in-place tool by
/// `<domain>.<name>`, as deny rules are written for it; the parser takes them, and the agent calls
/// the tool by its MCP name. docs/policy_file.md: "A file cannot widen anything"; "an `ask` turns an
/// allowed call into one that needs an approval"; "an argument rule refuses"; and checked when read:
/// "a pattern that matches no linked tool ... an argument rule on ... a parameter the tool does not
/// have" is reported. Asserted: every rule the parser accepts takes effect on the call.
#[test]
fn g22_10_ask_and_argument_rules_the_parser_accepts_reach_an_in_place_tool() {
    runtime().block_on(async {
        let mut problems = Vec::new();
        for tool in ["g22.g22_note", "g22_note"] {
            let ask = format!("format = 1\n[defaults]\nask = [\"{tool}\"]\n");
            if let Ok(parsed) = PolicyFile::parse("ops.toml", &ask) {
                let live = LivePolicy::new(parsed);
                let client = connect(
                    ToolgateServer::new(policy_gate(Mode::FullAuto, &live)).handler(Desk22),
                )
                .await;
                let marker = format!("g22-10-ask-{tool}");
                let said = call(&client, "g22_note", json!({"text": marker})).await;
                if code_of(&said) == "OK" {
                    problems.push(format!("ask {tool}: ran unasked"));
                }
            }
            let rule = format!(
                "format = 1\n[[defaults.arguments]]\ntool = \"{tool}\"\nparameter = \"text\"\nrefuse = [\"*rm -rf*\"]\n"
            );
            if let Ok(parsed) = PolicyFile::parse("ops.toml", &rule) {
                let live = LivePolicy::new(parsed);
                let client = connect(
                    ToolgateServer::new(policy_gate(Mode::PartialAuto, &live)).handler(Desk22),
                )
                .await;
                let said = call(&client, "g22_note", json!({"text": "g22-10 rm -rf /"})).await;
                if code_of(&said) == "OK" {
                    problems.push(format!("argument rule on {tool}: ran"));
                }
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    });
}

// ---------------------------------------------------------------------------------------------------
// Approvals bound to the caller a transport authenticated.
// ---------------------------------------------------------------------------------------------------

/// One gate shared by an OAuth scope (`writer`, its subjects `writer:<sub>`) and static bearer
/// tokens named as given; `in_band` for in-band approvals.
async fn shared_gate_server(
    gate: &Gate,
    pending: &Pending,
    key: &TestKey,
    bearers: &[(&str, &str)],
    in_band_approvals: bool,
) -> (std::net::SocketAddr, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let resource = format!("http://{}/mcp", listener.local_addr().unwrap());
    let oauth = OAuth::builder(resource.clone())
        .authorization_server(ISSUER)
        .jwks(Jwks::json(key.jwks()))
        .algorithms([Algorithm::EdDSA])
        .scope("g22:write", "writer", gate.clone())
        .build()
        .await
        .expect("a verifier");
    let mut principals = Principals::new().verifier(oauth);
    for (authorization, name) in bearers {
        principals = principals.bearer(token_of(authorization), *name, gate.clone());
    }
    let mut server = desk_server(gate, pending);
    if in_band_approvals {
        server = server.approvals(in_band());
    }
    (serve_on(listener, server, principals), resource)
}

fn writer_gate() -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .principal("writer")
        .build()
        .unwrap()
}

fn subject(key: &TestKey, resource: &str, sub: &str) -> String {
    format!("Bearer {}", key.sign(&claims(resource, sub, "g22:write")))
}

fn wiped(shelf: &str) -> usize {
    WIPES.lock().unwrap().iter().filter(|s| *s == shelf).count()
}

/// g22_11. Attack: a gate shared by an OAuth scope and a bearer principal `bob`; the operator
/// approves OAuth alice's wipe, and bob sends the very same call. docs/mcp.md: "subjects that share a
/// gate never run each other's approved calls. The same holds for the principals of bearer tokens
/// (`Principals::bearer`) that share a gate." Asserted: bob's call waits for its own approval; alice's
/// runs once.
#[test]
fn g22_11_an_oauth_subject_s_approval_does_not_run_a_bearer_principal_s_call() {
    runtime().block_on(async {
        let gate = writer_gate();
        let pending: Pending = Arc::default();
        let key = TestKey::ed25519("g22-11");
        let (addr, resource) =
            shared_gate_server(&gate, &pending, &key, &[(BOB, "bob")], false).await;
        let alice = subject(&key, &resource, "alice");
        let wipe = json!({"shelf": "g22-11"});
        let first = http_call(addr, &[&alice], "g22_wipe", wipe.clone(), None).await;
        assert_eq!(first.code(), "APPROVAL_PENDING", "{first:?}");
        let told = pending.lock().unwrap().last().cloned().expect("told");
        gate.approve(&told.token).unwrap();
        let by_bob = http_call(addr, &[BOB], "g22_wipe", wipe.clone(), None).await;
        assert_ne!(by_bob.code(), "OK", "bob ran alice's approval");
        let by_alice = http_call(addr, &[&alice], "g22_wipe", wipe.clone(), None).await;
        assert_eq!(by_alice.code(), "OK", "{by_alice:?}");
        assert_eq!(wiped("g22-11"), 1);
    });
}

/// g22_12. Attack: a bearer principal named `alice` and the OAuth subject `alice` (principal
/// `writer:alice`) share a gate; the operator grants the bearer alice's wipe for the session, and the
/// OAuth alice wipes another shelf, hoping the grant follows the subject's name. docs/mcp.md: "A
/// two-step approval and a session grant are bound to the subject's principal ... The same holds for
/// the principals of bearer tokens". Asserted: the OAuth subject's call is not run on the grant.
#[test]
fn g22_12_a_bearer_principal_s_session_grant_does_not_reach_an_oauth_subject_of_its_name() {
    runtime().block_on(async {
        let gate = writer_gate();
        let pending: Pending = Arc::default();
        let key = TestKey::ed25519("g22-12");
        let (addr, resource) =
            shared_gate_server(&gate, &pending, &key, &[(ALICE, "alice")], false).await;
        let first = http_call(
            addr,
            &[ALICE],
            "g22_wipe",
            json!({"shelf": "g22-12-a"}),
            None,
        )
        .await;
        assert_eq!(first.code(), "APPROVAL_PENDING", "{first:?}");
        let token = pending.lock().unwrap().last().cloned().expect("told").token;
        approve_for_session(&gate, &token, "op");
        let granted = http_call(
            addr,
            &[ALICE],
            "g22_wipe",
            json!({"shelf": "g22-12-a"}),
            None,
        )
        .await;
        assert_eq!(granted.code(), "OK", "{granted:?}");
        let oauth_alice = subject(&key, &resource, "alice");
        let other = http_call(
            addr,
            &[&oauth_alice],
            "g22_wipe",
            json!({"shelf": "g22-12-b"}),
            None,
        )
        .await;
        assert_ne!(other.code(), "OK", "the grant reached the OAuth subject");
        assert_eq!(wiped("g22-12-b"), 0);
    });
}

/// g22_13. Attack: in band, OAuth alice is sent a form; bob, a bearer principal sharing her gate,
/// answers it with her request state and the same arguments. docs/mcp.md: the state is "bound to the
/// connection (over HTTP, to the principal)"; "subjects sharing a gate never share a session, a task
/// or an in-band state". Asserted: bob's answer runs nothing.
#[test]
fn g22_13_an_oauth_subject_s_in_band_state_answered_by_a_bearer_principal_runs_nothing() {
    runtime().block_on(async {
        let gate = writer_gate();
        let pending: Pending = Arc::default();
        let key = TestKey::ed25519("g22-13");
        let (addr, resource) =
            shared_gate_server(&gate, &pending, &key, &[(BOB, "bob")], true).await;
        let alice = subject(&key, &resource, "alice");
        let wipe = json!({"shelf": "g22-13"});
        let asked = http_call(addr, &[&alice], "g22_wipe", wipe.clone(), None).await;
        assert_eq!(asked.code(), "INPUT_REQUIRED", "{asked:?}");
        let state = asked.state().expect("a state");
        let by_bob = http_call(addr, &[BOB], "g22_wipe", wipe, Some((&state, "approve"))).await;
        assert_ne!(by_bob.code(), "OK", "{by_bob:?}");
        assert_eq!(wiped("g22-13"), 0);
    });
}

/// g22_14. Attack: two bearer principals sharing a gate whose names read alike (`alice` and `аlice`
/// with a Cyrillic `а`); the operator approves alice's call and the look-alike sends it. SECURITY.md:
/// "Where a name binds what is stored to its maker (an approval's principal and agent, an HTTP
/// session's principal), its bytes are compared: a look-alike is another maker, never the same one."
/// Asserted: the look-alike's call does not run on alice's approval, nor on her session.
#[test]
fn g22_14_a_look_alike_bearer_principal_does_not_run_an_approved_call() {
    runtime().block_on(async {
        let gate = writer_gate();
        let pending: Pending = Arc::default();
        let key = TestKey::ed25519("g22-14");
        let (addr, _) = shared_gate_server(
            &gate,
            &pending,
            &key,
            &[(ALICE, "alice"), (BOB, "\u{430}lice")],
            false,
        )
        .await;
        let wipe = json!({"shelf": "g22-14"});
        let first = http_call(addr, &[ALICE], "g22_wipe", wipe.clone(), None).await;
        assert_eq!(first.code(), "APPROVAL_PENDING", "{first:?}");
        let token = pending.lock().unwrap().last().cloned().expect("told").token;
        gate.approve(&token).unwrap();
        let by_alike = http_call(addr, &[BOB], "g22_wipe", wipe.clone(), None).await;
        assert_ne!(by_alike.code(), "OK", "the look-alike ran alice's approval");
        let session = open_session(addr, &[ALICE]).await.unwrap();
        let in_her_session = session_call(addr, &[BOB], &session, "g22_wipe", wipe).await;
        assert_eq!(in_her_session.status, 404, "{in_her_session:?}");
        assert_eq!(wiped("g22-14"), 0);
    });
}

static DROPPED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A database connection made per session: the session chooses its database.
#[derive(Clone)]
pub(crate) struct Conn22 {
    db: Arc<Mutex<String>>,
}

impl Conn22 {
    fn new() -> Conn22 {
        Conn22 {
            db: Arc::new(Mutex::new("staging".to_owned())),
        }
    }
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Db22 {
    /// The database.
    db: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Table22 {
    /// The table.
    table: String,
}

#[toolgate::toolset(domain = "conn22")]
#[tool_router]
impl Conn22 {
    /// Choose this session's database.
    #[tool]
    #[toolgate(risk = "LOW_WRITE")]
    pub(crate) async fn conn22_use(
        &self,
        Parameters(d): Parameters<Db22>,
    ) -> Result<CallToolResult, ErrorData> {
        *self.db.lock().unwrap() = d.db.clone();
        ok(d.db)
    }

    /// Drop a table of this session's database.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE")]
    pub(crate) async fn conn22_drop(
        &self,
        Parameters(t): Parameters<Table22>,
    ) -> Result<CallToolResult, ErrorData> {
        let db = self.db.lock().unwrap().clone();
        DROPPED.lock().unwrap().push(format!("{db}.{}", t.table));
        ok(format!("dropped {db}.{}", t.table))
    }
}

#[tool_handler]
impl ServerHandler for Conn22 {}

/// g22_15. Attack: under `handler_factory`, each session has its own connection handler; session one
/// (on `staging`) has `drop users` approved, and session two of the same principal, switched to
/// `prod`, sends the very same call. docs/mcp.md: "A two-step approval is bound to the call's
/// arguments and to the handler instance"; docs/approvals.md: "An approval for one registration never
/// runs a call on another". Asserted: no table of `prod` is dropped on staging's approval.
#[test]
fn g22_15_an_approval_in_one_factory_session_does_not_run_on_another_session_s_handler() {
    runtime().block_on(async {
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .two_step_approvals()
            .build()
            .unwrap();
        let pending: Pending = Arc::default();
        let seen = pending.clone();
        let server = ToolgateServer::new(gate.clone())
            .handler_factory(Conn22::new)
            .on_pending(move |p| seen.lock().unwrap().push(p.clone()));
        let addr = serve_http(
            server,
            Principals::new().bearer(token_of(ALICE), "alice", gate.clone()),
        )
        .await;
        let (one, two) = (
            open_session(addr, &[ALICE]).await.unwrap(),
            open_session(addr, &[ALICE]).await.unwrap(),
        );
        let drop_users = json!({"table": "users"});
        let asked = session_call(addr, &[ALICE], &one, "conn22_drop", drop_users.clone()).await;
        assert_eq!(asked.code(), "APPROVAL_PENDING", "{asked:?}");
        let told = pending.lock().unwrap().last().cloned().expect("told");
        gate.approve(&told.token).unwrap();
        let switched =
            session_call(addr, &[ALICE], &two, "conn22_use", json!({"db": "prod"})).await;
        assert_eq!(switched.code(), "OK", "{switched:?}");
        let other = session_call(addr, &[ALICE], &two, "conn22_drop", drop_users).await;
        assert!(
            !DROPPED.lock().unwrap().iter().any(|d| d == "prod.users"),
            "the operator approved `drop users` shown on {:?}; it ran on prod: {}",
            told.instance,
            other.code()
        );
    });
}

// ---------------------------------------------------------------------------------------------------
// Redaction in place.
// ---------------------------------------------------------------------------------------------------

/// g22_16. Attack: the password's type serializes as `***`, so the gate looks for `"***"` in the
/// call's JSON; the agent puts `"***"` in another argument (the user), so the value is "found" there
/// and the real password, sent as `pw`, is left in view. docs/mcp.md: a redacted field "is hidden by
/// its name and by its value wherever the call's JSON holds it"; one whose value, as its type
/// serializes it, the JSON does not hold "hides every argument of the call". Asserted: the password is
/// in no record, not in the operator's request and not in the in-band form.
#[test]
fn g22_16_a_masked_secret_is_not_shown_when_its_mask_is_found_elsewhere() {
    let shown = shown_for(
        "g22_login_masked",
        json!({"user": "***", "pw": "g22-16-hunter2"}),
    );
    assert!(!shown.contains("g22-16-hunter2"), "{shown}");
}

/// g22_17. Attack: the password is trimmed as it is read; the agent sends it with spaces as `pw` and
/// without them as the user, so the trimmed value is found (in `user`) and `pw` is shown. Same
/// sentences as g22_16. Asserted: the password, in either form, is shown to no one.
#[test]
fn g22_17_a_trimmed_secret_is_not_shown_when_its_trimmed_form_is_found_elsewhere() {
    let shown = shown_for(
        "g22_login_trimmed",
        json!({"user": "g22-17-hunter2", "pw": "  g22-17-hunter2 "}),
    );
    assert!(!shown.contains("g22-17-hunter2"), "{shown}");
}

/// g22_18. Attack: a PIN sent as the digits `"0000000731"` and read as the number 731, beside a
/// retry count that happens to be 731: the gate finds the number at `retries` and shows `code`.
/// Same sentences as g22_16. Asserted: the PIN as sent is shown to no one.
#[test]
fn g22_18_a_pin_read_from_digits_is_not_shown_when_its_number_is_found_elsewhere() {
    let shown = shown_for(
        "g22_login_pin",
        json!({"user": "olga", "retries": 731, "code": "0000000731"}),
    );
    assert!(!shown.contains("0000000731"), "{shown}");
}

/// g22_19. Attack: a list of keys whose wrapper serializes as `***`; the gate looks for `["***"]`, and
/// the agent sends a list of labels `["***"]` beside the real key. Same sentences as g22_16. Asserted:
/// the key is shown to no one.
#[test]
fn g22_19_a_masked_list_is_not_shown_when_its_mask_is_found_elsewhere() {
    let shown = shown_for(
        "g22_store_keys",
        json!({"labels": ["***"], "keys": ["g22-19-k3y"]}),
    );
    assert!(!shown.contains("g22-19-k3y"), "{shown}");
}

/// g22_20. Attack: the redacted amount is an `f64` sent as the integer `7318264`, which serializes as
/// `7318264.0`; beside it, a fee sent as `7318264.0`: the gate finds the float at `fee` and shows the
/// integer `amount`. Same sentences as g22_16 ("as its type serializes it"). Asserted: the amount is
/// shown to no one.
#[test]
fn g22_20_a_float_secret_sent_as_an_integer_is_not_shown_when_its_float_is_found_elsewhere() {
    let shown = shown_for("g22_pay", json!({"fee": 7318264.0, "amount": 7318264}));
    let without_fee = shown.replace("7318264.0", "");
    assert!(!without_fee.contains("7318264"), "{shown}");
}

/// The client's answer to `tool` with `arguments` in PARTIAL_AUTO, and every audit record.
fn refused_in_partial_auto(tool: &str, arguments: Value) -> (String, String) {
    runtime().block_on(async {
        let sink = Arc::new(Memory::default());
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .principal("carol")
            .audit_shared(sink.clone())
            .build()
            .unwrap();
        let client = connect(ToolgateServer::new(gate).handler(Desk22)).await;
        let said = call(&client, tool, arguments).await;
        assert_ne!(code_of(&said), "OK", "{said:?}");
        (
            format!("{said:?}"),
            serde_json::to_string(&sink.records()).unwrap(),
        )
    })
}

/// g22_21. Attack: the redacted PIN, renamed `code`, sent as a string where `T` wants a number, so
/// serde's error quotes it (`invalid type: string "..."`). docs/attribute grammar: `redact` names
/// parameters "whose values no audit record, approver or error shows". Asserted: the value is in
/// neither the error nor the log.
#[test]
fn g22_21_a_renamed_redacted_value_of_the_wrong_type_is_not_quoted() {
    let (said, log) = refused_in_partial_auto(
        "g22_pin_typed",
        json!({"user": "olga", "code": "g22-21-s3cret"}),
    );
    assert!(
        !said.contains("g22-21-s3cret"),
        "the error quotes it: {said}"
    );
    assert!(!log.contains("g22-21-s3cret"), "the log quotes it: {log}");
}

/// g22_22. Attack: the redacted field is an enum; the agent sends a string that is no variant, so
/// serde's error quotes it (`unknown variant `...``). Same sentence as g22_21. Asserted: the value is
/// in neither the error nor the log.
#[test]
fn g22_22_a_redacted_enum_s_unknown_variant_is_not_quoted() {
    let (said, log) =
        refused_in_partial_auto("g22_zone", json!({"user": "olga", "zone": "g22-22-s3cret"}));
    assert!(
        !said.contains("g22-22-s3cret"),
        "the error quotes it: {said}"
    );
    assert!(!log.contains("g22-22-s3cret"), "the log quotes it: {log}");
}

/// g22_23. Attack: the redacted field is a struct; a value inside it has the wrong type, so serde's
/// error quotes it. Same sentence as g22_21. Asserted: the value is in neither the error nor the log.
#[test]
fn g22_23_a_wrong_value_inside_a_redacted_struct_is_not_quoted() {
    let (said, log) = refused_in_partial_auto(
        "g22_nested",
        json!({"user": "olga", "creds": {"pin": "g22-23-s3cret"}}),
    );
    assert!(
        !said.contains("g22-23-s3cret"),
        "the error quotes it: {said}"
    );
    assert!(!log.contains("g22-23-s3cret"), "the log quotes it: {log}");
}

// ---------------------------------------------------------------------------------------------------
// Text an agent writes, shown to a person.
// ---------------------------------------------------------------------------------------------------

/// Characters a reader cannot see, that reorder text, or that break a line where none shows:
/// controls (CR, ESC, NEL), bidi marks (ALM, LRM), format characters (soft hyphen, function
/// application, a musical format control, BOM), default-ignorables (Hangul fillers, Mongolian vowel
/// separator, combining grapheme joiner, Khmer inherent vowel, variation selectors), and the line
/// and paragraph separators.
const UNSEEN: &[char] = &[
    '\u{0D}',
    '\u{1B}',
    '\u{85}',
    '\u{61C}',
    '\u{200E}',
    '\u{AD}',
    '\u{2061}',
    '\u{1D173}',
    '\u{FEFF}',
    '\u{3164}',
    '\u{FFA0}',
    '\u{115F}',
    '\u{180E}',
    '\u{34F}',
    '\u{17B4}',
    '\u{FE0F}',
    '\u{E0100}',
    '\u{2028}',
    '\u{2029}',
];

fn raw_in(text: &str) -> Vec<String> {
    UNSEEN
        .iter()
        .filter(|c| text.contains(**c))
        .map(|c| format!("U+{:04X}", u32::from(*c)))
        .collect()
}

/// g22_24. Attack: the agent writes each such character into an argument's value and into a key of a
/// map argument of an in-place tool approved in band, so that the form the user approves reads other
/// than what the call carries (`Risk: READ_ONLY` on a line of its own, a value that hides a part).
/// docs/mcp.md: "Characters a reader cannot see or that reorder the text (bidi overrides, zero-width
/// characters, tags, controls) are written as `\u{XXXX}`, so the form shows what the call carries."
/// Asserted: none is in the form's message as it is.
#[test]
fn g22_24_the_in_band_form_shows_every_unseen_character_escaped() {
    runtime().block_on(async {
        let sink = Arc::new(Memory::default());
        let pending: Pending = Arc::default();
        let gate = full_auto(&sink);
        let client = connect(desk_server(&gate, &pending).approvals(in_band())).await;
        let text: String = UNSEEN
            .iter()
            .map(|c| format!("x{c}"))
            .chain(["Risk: READ_ONLY".to_owned()])
            .collect();
        let labels: BTreeMap<String, String> = UNSEEN
            .iter()
            .map(|c| (format!("k{c}"), "v".to_owned()))
            .collect();
        let asked = call(
            &client,
            "g22_label",
            json!({"text": text, "labels": labels}),
        )
        .await;
        let form = form_message(&asked);
        let raw = raw_in(&form);
        assert!(raw.is_empty(), "shown as they are: {raw:?}\n{form:?}");
    });
}

/// g22_25. Attack: the same characters through `toolgate::terminal::escaped`, the one function every
/// `toolgate` command passes what an agent wrote through. docs/approvals.md: "control, bidirectional,
/// invisible (default-ignorable) and format characters and spaces other than U+0020 are shown as
/// `\u{..}`". Asserted: none is left as it is.
#[test]
fn g22_25_the_operator_s_terminal_escapes_every_unseen_character() {
    let text: String = UNSEEN.iter().map(|c| format!("x{c}")).collect();
    let shown = toolgate::terminal::escaped(&text);
    let raw = raw_in(&shown);
    assert!(raw.is_empty(), "left as they are: {raw:?}: {shown:?}");
}

/// A 2026-07-28 request of a client of the Tasks extension, with this `Authorization`.
async fn tasks_request(
    addr: std::net::SocketAddr,
    authorization: &str,
    id: u64,
    method: &str,
    mut params: Value,
) -> crate::common::http::Answer {
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "g22", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut head = vec![
        "Mcp-Protocol-Version: 2026-07-28".to_owned(),
        format!("Mcp-Method: {method}"),
        format!("Authorization: {authorization}"),
    ];
    if let Some(name) = params["name"].as_str().or(params["taskId"].as_str()) {
        head.push(format!("Mcp-Name: {name}"));
    }
    crate::fixtures::handlers::request(addr, &head, Some(&body)).await
}

/// g22_26. Attack: OAuth alice's wipe waits for an operator as a task; bob, a subject of the same
/// scope (so the same gate), reads and cancels it by its id. docs/mcp.md: "subjects sharing a gate
/// never share a session, a task or an in-band state"; "`tasks/get` and `tasks/cancel` answer only
/// the caller that made it". Asserted: bob's `tasks/get` shows no status and his cancel leaves the
/// task to alice, whose approved call then runs once.
#[test]
fn g22_26_a_subject_sharing_a_gate_cannot_read_or_cancel_another_s_task() {
    runtime().block_on(async {
        let gate = writer_gate();
        let pending: Pending = Arc::default();
        let key = TestKey::ed25519("g22-26");
        let (addr, resource) = shared_gate_server(&gate, &pending, &key, &[], false).await;
        let (alice, bob) = (
            subject(&key, &resource, "alice"),
            subject(&key, &resource, "bob"),
        );
        let made = tasks_request(
            addr,
            &alice,
            1,
            "tools/call",
            json!({"name": "g22_wipe", "arguments": {"shelf": "g22-26"}}),
        )
        .await;
        let task = made
            .messages()
            .iter()
            .find_map(|m| m["result"]["taskId"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("no task: {made:?}"));
        let get_b = tasks_request(addr, &bob, 2, "tasks/get", json!({"taskId": task})).await;
        let cancel_b = tasks_request(addr, &bob, 3, "tasks/cancel", json!({"taskId": task})).await;
        let answered = |a: &crate::common::http::Answer| {
            a.messages()
                .iter()
                .any(|m| m.get("result").is_some_and(|r| r.get("status").is_some()))
        };
        let header_error = |a: &crate::common::http::Answer| {
            a.messages().iter().any(|m| m["error"]["code"] == -32020)
        };
        assert!(
            !header_error(&get_b) && !header_error(&cancel_b),
            "{get_b:?} {cancel_b:?}"
        );
        assert!(!answered(&get_b), "bob read alice's task: {get_b:?}");
        assert!(
            !answered(&cancel_b),
            "bob cancelled alice's task: {cancel_b:?}"
        );
        let token = pending
            .lock()
            .unwrap()
            .first()
            .cloned()
            .expect("told")
            .token;
        gate.approve(&token).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = tasks_request(addr, &alice, 4, "tasks/get", json!({"taskId": task})).await;
            let status = got
                .messages()
                .iter()
                .find_map(|m| m["result"]["status"].as_str().map(str::to_owned));
            if status
                .as_deref()
                .is_some_and(|s| s != "working" && s != "input_required")
            {
                assert_eq!(status.as_deref(), Some("completed"), "{got:?}");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never done: {got:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(wiped("g22-26"), 1);
    });
}

/// g22_27. Attack: a budget of one call an hour written for the renamed in-place tool by
/// `<domain>.<name>` and by its MCP name; the agent calls it twice by its MCP name. docs/mcp.md: "A
/// deny rule or a budget reaches an in-place tool by its MCP name and by `<domain>.<name>`".
/// Asserted: for each spelling the parser accepts, the second call is refused `BUDGET_EXHAUSTED`.
#[test]
fn g22_27_a_budget_by_domain_and_name_reaches_a_renamed_in_place_tool() {
    runtime().block_on(async {
        let mut problems = Vec::new();
        for tool in ["g22-purge", "g22.g22-purge"] {
            let text = format!(
                "format = 1\n[[defaults.budgets]]\ntool = \"{tool}\"\ncalls = 1\nper = \"1h\"\n"
            );
            let Ok(parsed) = PolicyFile::parse("ops.toml", &text) else {
                problems.push(format!("{tool}: refused by the parser"));
                continue;
            };
            let live = LivePolicy::new(parsed);
            let gate = Gate::builder()
                .mode(Mode::PartialAuto)
                .principal("ops")
                .agent(format!("bot22-27-{tool}"))
                .policy(live)
                .build()
                .expect("a gate");
            let client = connect(ToolgateServer::new(gate).handler(Desk22)).await;
            let first = call(&client, "g22-purge", json!({})).await;
            let second = call(&client, "g22-purge", json!({})).await;
            if code_of(&first) != "OK" || code_of(&second) != "BUDGET_EXHAUSTED" {
                problems.push(format!(
                    "{tool}: {} then {}",
                    code_of(&first),
                    code_of(&second)
                ));
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    });
}

/// g22_28. Attack: the operator's deny for an in-place tool sits in the table of the agent spelled
/// with a Cyrillic `о` (`bоt22`); the gate's agent is `bot22`. docs/policy_file.md: "A gate follows
/// the table whose name reads as its principal's or agent's". Asserted: the call is refused
/// `DENY_LISTED` and the note is not written.
#[test]
fn g22_28_a_deny_in_a_look_alike_agent_table_reaches_an_in_place_tool() {
    runtime().block_on(async {
        let live = LivePolicy::new(policy(
            "format = 1\n[agents.\"b\u{43e}t22\"]\ndeny = [\"g22.g22_note\"]\n",
        ));
        let client =
            connect(ToolgateServer::new(policy_gate(Mode::PartialAuto, &live)).handler(Desk22))
                .await;
        let said = call(&client, "g22_note", json!({"text": "g22-28"})).await;
        assert_eq!(code_of(&said), "DENY_LISTED", "{said:?}");
        assert!(!NOTES.lock().unwrap().iter().any(|n| n == "g22-28"));
    });
}
