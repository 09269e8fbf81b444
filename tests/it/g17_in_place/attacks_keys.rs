//! Outside attacks on the keys of `#[tool]` in place (guarantee 17 with 19 and the redaction of
//! records): serde's ways of making the JSON a client sends differ from the `T` the body gets
//! (`rename`, `alias`, `flatten`, a `Deserialize` of its own), a direct call of the in-place method,
//! approvals bound to the call's arguments, and an operator's policy file.
//!
//! docs/mcp.md: "`escalate`, `target`, `evidence`, `rollback`, `irreversible` and `redact` read the `T`
//! of the method's `Parameters<T>` (rmcp deserializes it once; the gate reads the value the body
//! gets), and the call's arguments are written as a `callable` tool's are, one key per argument, with
//! the handler as `self`". A test that fails is an attack that got through.
#![cfg(feature = "mcp-http")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use toolgate::mcp::{PendingApproval, ToolgateServer};
use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::{Approval, ApprovalRequest, Gate, Mode, Risk};

use crate::fixtures::mcp_in_band::{call, code_of, connect};
use crate::fixtures::shared_stores::Memory;

/// Secrets each test sends in a redacted field; none may appear in what a person or a log reads.
const SECRET: &str = "s3cr3t-a8k";

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Renamed {
    /// Who.
    user: String,
    /// The password, sent as `pw`.
    #[serde(rename = "pw")]
    password: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Aliased {
    /// Who.
    user: String,
    /// The password, also accepted as `pass`.
    #[serde(alias = "pass")]
    password: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Creds {
    /// The password.
    password: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Flat {
    /// Who.
    user: String,
    /// The credentials, flattened into the arguments.
    #[serde(flatten)]
    creds: Creds,
}

/// A command line whose `Deserialize` numbers each time it is run, as a stateful deserializer would.
#[derive(Debug, schemars::JsonSchema)]
pub(crate) struct Counted {
    /// The command line.
    command: String,
}

static DESERIALIZED: AtomicUsize = AtomicUsize::new(0);

impl<'de> serde::Deserialize<'de> for Counted {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        struct Raw {
            command: String,
        }
        let raw = Raw::deserialize(d)?;
        let n = DESERIALIZED.fetch_add(1, Ordering::SeqCst) + 1;
        // Every second reading of the same JSON says `sudo`: a gate that reads a value of its own
        // would judge another command than the body runs.
        let command = if n.is_multiple_of(2) {
            format!("sudo {}", raw.command)
        } else {
            raw.command
        };
        Ok(Counted { command })
    }
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Cmd {
    /// The command line, also accepted as `cmd`.
    #[serde(alias = "cmd")]
    command: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Box_ {
    /// The instance, sent as `id`.
    #[serde(rename = "id")]
    instance_id: String,
}

fn counted_risk(args: &Counted) -> Risk {
    ESCALATE_SAW.lock().unwrap().push(args.command.clone());
    if args.command.split_whitespace().any(|w| w == "sudo") {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

fn cmd_risk(args: &Cmd) -> Risk {
    if args
        .command
        .split_whitespace()
        .any(|w| w == "sudo" || w == "rm")
    {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

fn probe(id: &str) -> Result<Value, String> {
    Ok(json!({"id": id, "state": "running"}))
}

static LOGINS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Log in with an approval: the `callable` twin of `a8k_login_own`.
#[toolgate::tool(risk = "HIGH_WRITE", domain = "a8k", callable, record_arguments,
                 redact = [password])]
pub(crate) fn login_callable(user: String, password: String) -> Result<String, toolgate::Denied> {
    LOGINS.lock().unwrap().push(password);
    Ok(user)
}

static ESCALATE_SAW: Mutex<Vec<String>> = Mutex::new(Vec::new());
static BODY_GOT: Mutex<Vec<String>> = Mutex::new(Vec::new());
static TERMINATED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn ok(text: String) -> Result<CallToolResult, ErrorData> {
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
}

/// An rmcp handler as its users write one, gated in place.
#[derive(Clone, Default)]
pub(crate) struct Keys;

#[toolgate::toolset(domain = "a8k")]
#[tool_router]
impl Keys {
    /// Log in, the password renamed on the wire.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", record_arguments, redact = [password])]
    pub(crate) async fn a8k_login_renamed(
        &self,
        Parameters(l): Parameters<Renamed>,
    ) -> Result<CallToolResult, ErrorData> {
        ok(format!("{} {}", l.user, l.password.len()))
    }

    /// Log in, the password with an alias.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", record_arguments, redact = [password])]
    pub(crate) async fn a8k_login_aliased(
        &self,
        Parameters(l): Parameters<Aliased>,
    ) -> Result<CallToolResult, ErrorData> {
        ok(format!("{} {}", l.user, l.password.len()))
    }

    /// Log in, the credentials flattened.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", record_arguments, redact = [creds])]
    pub(crate) async fn a8k_login_flat(
        &self,
        Parameters(l): Parameters<Flat>,
    ) -> Result<CallToolResult, ErrorData> {
        ok(format!("{} {}", l.user, l.creds.password.len()))
    }

    /// Log in with an approval: HIGH_WRITE, the password renamed on the wire.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", record_arguments, redact = [password])]
    pub(crate) async fn a8k_login_approved(
        &self,
        Parameters(l): Parameters<Renamed>,
    ) -> Result<CallToolResult, ErrorData> {
        ok(format!("{} {}", l.user, l.password.len()))
    }

    /// Log in with an approval: HIGH_WRITE, the password under its own name.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", record_arguments, redact = [password])]
    pub(crate) async fn a8k_login_own(
        &self,
        Parameters(l): Parameters<Aliased>,
    ) -> Result<CallToolResult, ErrorData> {
        LOGINS.lock().unwrap().push(l.password.clone());
        ok(l.user)
    }

    /// Run a command whose arguments deserialize differently each time.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", record_arguments, escalate = counted_risk)]
    pub(crate) async fn a8k_counted(
        &self,
        Parameters(c): Parameters<Counted>,
    ) -> Result<CallToolResult, ErrorData> {
        BODY_GOT.lock().unwrap().push(c.command.clone());
        ok(c.command)
    }

    /// Run a command, `cmd` an alias of `command`.
    #[tool]
    #[toolgate(risk = "LOW_WRITE", record_arguments, escalate = cmd_risk)]
    pub(crate) async fn a8k_shell(
        &self,
        Parameters(c): Parameters<Cmd>,
    ) -> Result<CallToolResult, ErrorData> {
        BODY_GOT.lock().unwrap().push(c.command.clone());
        ok(c.command)
    }

    /// Destroy an instance: it cannot be undone. Its target is renamed `id` on the wire.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", modes = [FULL_AUTO], record_arguments, irreversible,
               target = instance_id, evidence = probe)]
    pub(crate) async fn a8k_destroy(
        &self,
        Parameters(b): Parameters<Box_>,
    ) -> Result<CallToolResult, ErrorData> {
        TERMINATED.lock().unwrap().push(b.instance_id.clone());
        ok(format!("{} destroyed", b.instance_id))
    }
}

#[tool_handler]
impl ServerHandler for Keys {}

fn gate(mode: Mode, sink: &Arc<Memory>) -> Gate {
    Gate::builder()
        .mode(mode)
        .two_step_approvals()
        .principal("carol")
        .audit_shared(sink.clone())
        .build()
        .unwrap()
}

type Pending = Arc<Mutex<Vec<PendingApproval>>>;

fn server(gate: &Gate, pending: &Pending) -> ToolgateServer {
    let pending = pending.clone();
    ToolgateServer::new(gate.clone())
        .handler(Keys)
        .only(|m| m.domain == Some("a8k"))
        .on_pending(move |p| pending.lock().unwrap().push(p.clone()))
}

/// Everything a person or a log reads of the calls: the records, the operator's requests and what the
/// client was answered.
fn everything_read(sink: &Memory, pending: &Pending, answers: &[String]) -> String {
    let pending: Vec<String> = pending
        .lock()
        .unwrap()
        .iter()
        .map(|p| format!("{p:?}"))
        .collect();
    format!(
        "records: {}\npending: {pending:?}\nanswers: {answers:?}",
        serde_json::to_string(&sink.records()).unwrap()
    )
}

fn answer_text(response: &toolgate::mcp::rmcp::model::CallToolResponse) -> String {
    format!("{response:?}")
}

/// What a call of `tool` with `args` leaves for a person or a log to read, when it shows `SECRET`.
async fn leaked(tool: &str, args: Value) -> Option<String> {
    let sink = Arc::new(Memory::default());
    let pending: Pending = Arc::default();
    let gate = gate(Mode::PartialAuto, &sink);
    let client = connect(server(&gate, &pending)).await;
    let said = call(&client, tool, args.clone(), None, None).await;
    let code = code_of(&said);
    assert_eq!(code, "OK", "{tool} {args}");
    let seen = everything_read(&sink, &pending, &[answer_text(&said)]);
    seen.contains(SECRET)
        .then(|| format!("{tool} {args}:\n{seen}"))
}

// ak01: README's "An rmcp server, gated in place" and docs/mcp.md: "`redact` [reads] the `T` of the
// method's `Parameters<T>` ..., and the call's arguments are written as a `callable` tool's are"; a
// `callable` tool's redacted argument is written `"[REDACTED]"`. Each attack sends the redacted field
// as `T` lets a client send it; asserted: the secret appears in no record and no answer.

/// ak01a. `#[serde(rename = "pw")] password`, `redact = [password]`: the client sends `pw`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak01a_a_redacted_field_renamed_on_the_wire_is_still_hidden() {
    let leak = leaked("a8k_login_renamed", json!({"user": "ada", "pw": SECRET})).await;
    assert!(leak.is_none(), "{}", leak.unwrap_or_default());
}

/// ak01b. `#[serde(alias = "pass")] password`, `redact = [password]`: the client picks the alias.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak01b_a_redacted_field_sent_under_its_alias_is_still_hidden() {
    let leak = leaked("a8k_login_aliased", json!({"user": "ada", "pass": SECRET})).await;
    assert!(leak.is_none(), "{}", leak.unwrap_or_default());
}

/// ak01c. `#[serde(flatten)] creds: Creds`, `redact = [creds]`: the password is a top-level key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak01c_a_redacted_flattened_field_is_still_hidden() {
    let leak = leaked("a8k_login_flat", json!({"user": "ada", "password": SECRET})).await;
    assert!(leak.is_none(), "{}", leak.unwrap_or_default());
}

/// ak01d (guard). The aliased field sent under its own name is hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak01d_a_redacted_field_sent_under_its_own_name_is_hidden() {
    let leak = leaked(
        "a8k_login_aliased",
        json!({"user": "ada", "password": SECRET}),
    )
    .await;
    assert!(leak.is_none(), "{}", leak.unwrap_or_default());
}

/// ak02. The attack: a HIGH_WRITE call whose redacted field is renamed on the wire waits for its
/// operator. Asserted (PendingApproval::arguments: "redacted ones as `\"[REDACTED]\"`"): the operator's
/// request, the refusal the client reads and the records hold no secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak02_a_renamed_redacted_field_is_hidden_from_the_operators_request() {
    let sink = Arc::new(Memory::default());
    let pending: Pending = Arc::default();
    let gate = gate(Mode::FullAuto, &sink);
    let client = connect(server(&gate, &pending)).await;
    let said = call(
        &client,
        "a8k_login_approved",
        json!({"user": "ada", "pw": SECRET}),
        None,
        None,
    )
    .await;
    assert_eq!(code_of(&said), "APPROVAL_PENDING");
    assert_eq!(pending.lock().unwrap().len(), 1);
    let seen = everything_read(&sink, &pending, &[answer_text(&said)]);
    assert!(!seen.contains(SECRET), "{seen}");
}

/// ak03. The attack: `T`'s `Deserialize` gives another value each time it is run (every second
/// reading adds `sudo`). Asserted (docs/mcp.md: "rmcp deserializes it once; the gate reads the value the
/// body gets"): `escalate` judged exactly the command the body ran, for every call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak03_escalate_judges_the_value_the_body_gets_not_a_second_reading() {
    let sink = Arc::new(Memory::default());
    let pending: Pending = Arc::default();
    let gate = gate(Mode::PartialAuto, &sink);
    let client = connect(server(&gate, &pending)).await;
    let mut codes = Vec::new();
    for i in 0..4 {
        let said = call(
            &client,
            "a8k_counted",
            json!({"command": format!("reboot-{i}")}),
            None,
            None,
        )
        .await;
        codes.push(code_of(&said));
    }
    let saw = ESCALATE_SAW.lock().unwrap().clone();
    let got: Vec<String> = BODY_GOT
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.contains("reboot-"))
        .cloned()
        .collect();
    // Every body that ran got a command escalate judged, and none of them holds `sudo` unjudged.
    for command in &got {
        assert!(
            saw.contains(command),
            "the body ran `{command}`, which escalate never judged (it saw {saw:?}); codes {codes:?}"
        );
        assert!(
            !command.contains("sudo"),
            "a `sudo` command ran in PARTIAL_AUTO: {got:?}, escalate saw {saw:?}, codes {codes:?}"
        );
    }
    assert_eq!(
        DESERIALIZED.load(Ordering::SeqCst),
        4,
        "the arguments were deserialized more than once per call; codes {codes:?}, escalate saw {saw:?}, bodies {got:?}"
    );
}

/// ak04. The attack: the target field is renamed `id` on the wire. Asserted: the operator is shown the
/// value the body acts on; typing it back runs the call once; a wildcard sent under the wire name is
/// refused before anyone is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak04_a_renamed_target_is_shown_confirmed_and_checked_as_the_body_gets_it() {
    let sink = Arc::new(Memory::default());
    let pending: Pending = Arc::default();
    let gate = gate(Mode::FullAuto, &sink);
    let client = connect(server(&gate, &pending)).await;
    let wildcard = call(&client, "a8k_destroy", json!({"id": "*"}), None, None).await;
    assert_eq!(code_of(&wildcard), "TARGET_NOT_SINGLE");
    let args = json!({"id": "a8k-i1"});
    let first = call(&client, "a8k_destroy", args.clone(), None, None).await;
    assert_eq!(code_of(&first), "APPROVAL_PENDING");
    let (token, target) = {
        let pending = pending.lock().unwrap();
        assert_eq!(pending.len(), 1, "{pending:?}");
        (pending[0].token.clone(), pending[0].target.clone())
    };
    assert_eq!(target.as_deref(), Some("a8k-i1"));
    gate.approve_typed(&token, "ops", "a8k-i1").unwrap();
    assert_eq!(
        code_of(&call(&client, "a8k_destroy", args.clone(), None, None).await),
        "OK"
    );
    // Spent: the next call runs on no approval.
    assert_ne!(
        code_of(&call(&client, "a8k_destroy", args, None, None).await),
        "OK"
    );
    let ran: Vec<String> = TERMINATED
        .lock()
        .unwrap()
        .iter()
        .filter(|t| t.starts_with("a8k-i1") || *t == "*")
        .cloned()
        .collect();
    assert_eq!(ran, ["a8k-i1"]);
}

/// ak05. The attack: an operator's argument rule on a field of an in-place tool's `T` (which the body
/// gets, maybe under an alias). Asserted (docs/policy_file.md: "Argument rules need the tool's
/// parameters, which a `callable` tool publishes"; SECURITY.md 18: "A file that does not check is
/// refused"): the file is refused when read, under either name, rather than followed with a rule that
/// never reads the field.
#[test]
fn ak05_an_argument_rule_on_an_in_place_tool_is_refused_when_the_file_is_read() {
    for tool in ["a8k_shell", "a8k.a8k_shell"] {
        let text = format!(
            "format = 1\n[[defaults.arguments]]\ntool = \"{tool}\"\nparameter = \"command\"\nrefuse = [\"*rm*\"]\n"
        );
        let refused = PolicyFile::parse("a8k.toml", &text);
        assert!(
            refused.is_err(),
            "{tool}: a rule no call can be judged by was accepted"
        );
    }
}

/// ak05b. The attack: an operator's deny rule names the in-place tool by its MCP name, by
/// `<domain>.<name>` and by the domain's glob. Asserted (docs/mcp.md: "A deny rule or a budget reaches
/// an in-place tool by its MCP name and by `<domain>.<name>`"): each file that reads refuses the call,
/// `DENY_LISTED`, and no body runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak05b_a_deny_rule_reaches_the_in_place_tool_by_each_of_its_names() {
    let mut failures = Vec::new();
    for (i, rule) in ["a8k_shell", "a8k.a8k_shell", "a8k.*"]
        .into_iter()
        .enumerate()
    {
        let text = format!("format = 1\n[defaults]\ndeny = [\"{rule}\"]\n");
        let policy = match PolicyFile::parse("a8k.toml", &text) {
            Ok(policy) => policy,
            Err(error) => {
                failures.push(format!("{rule}: the file is refused: {error}"));
                continue;
            }
        };
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
            .policy(LivePolicy::new(policy))
            .build()
            .unwrap();
        let client = connect(
            ToolgateServer::new(gate)
                .handler(Keys)
                .only(|m| m.domain == Some("a8k")),
        )
        .await;
        let marker = format!("ls /a8k-deny-{i}");
        let said = call(&client, "a8k_shell", json!({"command": marker}), None, None).await;
        let code = code_of(&said);
        let ran = BODY_GOT.lock().unwrap().contains(&marker);
        if code != "DENY_LISTED" || ran {
            failures.push(format!("{rule}: {code}, ran: {ran}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// ak06. The attack: an argument that reads as `self` to a person (a Cyrillic `ѕ`, a zero-width space,
/// a trailing space) beside the real one. Asserted (docs/mcp.md: "a client's argument named `self` is
/// refused (`ARGUMENT_REFUSED`), since it would pass for the handler"): refused, as `self` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak06_an_argument_that_reads_as_self_cannot_pass_for_the_handler() {
    let mut failures = Vec::new();
    for name in ["\u{455}elf", "self\u{200b}", "self "] {
        let sink = Arc::new(Memory::default());
        let pending: Pending = Arc::default();
        let gate = gate(Mode::PartialAuto, &sink);
        let client = connect(server(&gate, &pending)).await;
        let mut args = serde_json::Map::new();
        args.insert("command".into(), json!("ls a8k-self"));
        args.insert(name.into(), json!("prod"));
        let said = call(&client, "a8k_shell", Value::Object(args), None, None).await;
        let code = code_of(&said);
        if code != "ARGUMENT_REFUSED" {
            failures.push(format!(
                "{name:?}: {code}; records {}",
                serde_json::to_string(&sink.records()).unwrap()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// ak07. The attack: an escalated call (`sudo ls`) is approved through the server; then the in-place
/// method is called directly, under the same gate's scope, with another command (`sudo rm`). Asserted
/// (a two-step approval is bound to the call's arguments and to the handler instance): the direct call
/// does not run on that approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak07_a_direct_call_does_not_run_on_an_approval_given_to_other_arguments() {
    let sink = Arc::new(Memory::default());
    let pending: Pending = Arc::default();
    let gate = gate(Mode::FullAuto, &sink);
    let client = connect(server(&gate, &pending)).await;
    let said = call(
        &client,
        "a8k_shell",
        json!({"command": "sudo ls /a8k-7"}),
        None,
        None,
    )
    .await;
    assert_eq!(code_of(&said), "APPROVAL_PENDING");
    let token = pending.lock().unwrap()[0].token.clone();
    gate.approve(&token).unwrap();
    let direct = gate
        .scope(Keys.a8k_shell(Parameters(Cmd {
            command: "sudo rm -rf /a8k-7".into(),
        })))
        .await;
    let ran: Vec<String> = BODY_GOT
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.contains("/a8k-7"))
        .cloned()
        .collect();
    assert!(
        !ran.iter().any(|c| c.contains("rm")),
        "the direct call ran on the approval of another command: {direct:?}; records {}",
        serde_json::to_string(&sink.records()).unwrap()
    );
    // The approved call still runs, once, through the server.
    let again = call(
        &client,
        "a8k_shell",
        json!({"command": "sudo ls /a8k-7"}),
        None,
        None,
    )
    .await;
    assert_eq!(code_of(&again), "OK");
}

/// ak08. The attack: the irreversible in-place method called directly under a FULL_AUTO gate whose
/// approver approves everything and that has no store. Asserted (SECURITY.md 19: "runs only after a
/// two-step approval carrying its target typed back exactly, whatever the gate's approver"): no body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak08_a_direct_call_of_an_irreversible_in_place_method_is_not_approved_by_the_approver() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .build()
        .unwrap();
    let said = gate
        .scope(Keys.a8k_destroy(Parameters(Box_ {
            instance_id: "a8k-d8".into(),
        })))
        .await;
    assert!(
        !TERMINATED.lock().unwrap().iter().any(|t| t == "a8k-d8"),
        "destroyed on the approver's word: {said:?}"
    );
}

/// ak09. The attack: a direct call of an in-place method with a redacted field, under a gate that
/// records. Asserted: the record does not hold the secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak09_a_direct_call_records_no_redacted_value() {
    let sink = Arc::new(Memory::default());
    let gate = gate(Mode::PartialAuto, &sink);
    let said = gate
        .scope(Keys.a8k_login_renamed(Parameters(Renamed {
            user: "ada".into(),
            password: SECRET.into(),
        })))
        .await;
    let records = serde_json::to_string(&sink.records()).unwrap();
    assert!(said.is_ok(), "{said:?}");
    assert!(!records.contains(SECRET), "{records}");
}

/// ak10. The attack: two servers share one gate (and so one store), each with its own named handler
/// instance; a call approved on `staging` is retried on `prod`. Asserted (docs/mcp.md: "A two-step
/// approval is bound to the call's arguments and to the handler instance"): `prod` does not run it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak10_an_approval_for_one_handler_instance_does_not_run_on_another() {
    let sink = Arc::new(Memory::default());
    let pending: Pending = Arc::default();
    let gate = gate(Mode::FullAuto, &sink);
    let named = |label: &str| {
        let pending = pending.clone();
        ToolgateServer::new(gate.clone())
            .handler_named(label, Keys)
            .only(|m| m.domain == Some("a8k"))
            .on_pending(move |p| pending.lock().unwrap().push(p.clone()))
    };
    let staging = connect(named("staging")).await;
    let prod = connect(named("prod")).await;
    let args = json!({"command": "sudo ls /a8k-10"});
    let said = call(&staging, "a8k_shell", args.clone(), None, None).await;
    assert_eq!(code_of(&said), "APPROVAL_PENDING");
    let token = pending.lock().unwrap()[0].token.clone();
    gate.approve(&token).unwrap();
    let on_prod = call(&prod, "a8k_shell", args.clone(), None, None).await;
    assert_eq!(code_of(&on_prod), "APPROVAL_PENDING");
    let on_staging = call(&staging, "a8k_shell", args, None, None).await;
    assert_eq!(code_of(&on_staging), "OK");
}

/// ak11. The attack: the in-place methods called directly with no gate in scope. Asserted (README: "a
/// direct call `ops.restart(..)` is decided by the ambient gate (`Gate::scope`)"; "A call outside every
/// gate is refused with `NO_GATE`"): refused, no body runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak11_a_direct_call_outside_every_gate_runs_nothing() {
    let destroyed = Keys
        .a8k_destroy(Parameters(Box_ {
            instance_id: "a8k-d11".into(),
        }))
        .await;
    let shell = Keys
        .a8k_shell(Parameters(Cmd {
            command: "ls /a8k-11".into(),
        }))
        .await;
    assert!(destroyed.is_err(), "{destroyed:?}");
    assert!(shell.is_err(), "{shell:?}");
    assert!(!TERMINATED.lock().unwrap().iter().any(|t| t == "a8k-d11"));
    assert!(!BODY_GOT.lock().unwrap().iter().any(|c| c == "ls /a8k-11"));
}

/// ak12. The attack: refusals of calls that carry a redacted field (under its own name): an argument
/// named `self` beside it (ARGUMENT_REFUSED over MCP), and a direct call refused APPROVAL_PENDING (an
/// `ErrorData`). Asserted: no refusal's message, record or request holds the secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak12_refusals_of_calls_with_a_redacted_field_hold_no_secret() {
    let sink = Arc::new(Memory::default());
    let pending: Pending = Arc::default();
    let gate = gate(Mode::FullAuto, &sink);
    let client = connect(server(&gate, &pending)).await;
    let said = call(
        &client,
        "a8k_login_aliased",
        json!({"user": "ada", "password": SECRET, "self": "prod"}),
        None,
        None,
    )
    .await;
    assert_eq!(code_of(&said), "ARGUMENT_REFUSED");
    let direct = gate
        .scope(Keys.a8k_login_approved(Parameters(Renamed {
            user: "ada".into(),
            password: SECRET.into(),
        })))
        .await;
    assert!(direct.is_err(), "{direct:?}");
    let seen = everything_read(
        &sink,
        &pending,
        &[answer_text(&said), format!("{direct:?}")],
    );
    assert!(!seen.contains(SECRET), "{seen}");
}

/// ak13. The attack: a budget of one call an hour written for the in-place tool by its MCP name, by
/// `<domain>.<name>` and by the domain's glob, in the code and in an operator's policy file. Asserted
/// (docs/mcp.md: "A deny rule or a budget reaches an in-place tool by its MCP name and by
/// `<domain>.<name>`"): each budget is built and refuses the second call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak13_a_budget_reaches_the_in_place_tool_by_each_of_its_names() {
    let mut failures = Vec::new();
    for (i, pattern) in ["a8k_shell", "a8k.a8k_shell", "a8k.*"]
        .into_iter()
        .enumerate()
    {
        let by_code = Gate::builder()
            .mode(Mode::PartialAuto)
            .budget(
                toolgate::gate::BudgetScope::tool(pattern),
                1,
                std::time::Duration::from_secs(3600),
            )
            .build();
        let text = format!(
            "format = 1\n[[defaults.budgets]]\ntool = \"{pattern}\"\ncalls = 1\nper = \"1h\"\n"
        );
        let by_file = PolicyFile::parse("a8k.toml", &text)
            .map_err(|e| e.to_string())
            .and_then(|policy| {
                Gate::builder()
                    .mode(Mode::PartialAuto)
                    .policy(LivePolicy::new(policy))
                    .build()
                    .map_err(|e| e.to_string())
            });
        for (how, gate) in [
            ("code", by_code.map_err(|e| e.to_string())),
            ("file", by_file),
        ] {
            let gate = match gate {
                Ok(gate) => gate,
                Err(error) => {
                    failures.push(format!("{how} {pattern}: not built: {error}"));
                    continue;
                }
            };
            let client = connect(
                ToolgateServer::new(gate)
                    .handler(Keys)
                    .only(|m| m.domain == Some("a8k")),
            )
            .await;
            let mut codes = Vec::new();
            for n in 0..2 {
                let command = format!("ls /a8k-13-{i}-{how}-{n}");
                codes.push(code_of(
                    &call(
                        &client,
                        "a8k_shell",
                        json!({"command": command}),
                        None,
                        None,
                    )
                    .await,
                ));
            }
            if codes != ["OK", "BUDGET_EXHAUSTED"] {
                failures.push(format!("{how} {pattern}: {codes:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// ak14. The attack: the escalating command sent under the alias `T` accepts (`cmd`). Asserted
/// (`escalate` reads the `T` the body gets): in PARTIAL_AUTO a `sudo` under the alias is refused above
/// the ceiling, as under the field's own name, and does not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak14_escalate_reads_a_field_sent_under_its_alias() {
    let sink = Arc::new(Memory::default());
    let pending: Pending = Arc::default();
    let gate = gate(Mode::PartialAuto, &sink);
    let client = connect(server(&gate, &pending)).await;
    let mut codes = Vec::new();
    for args in [
        json!({"command": "sudo reboot /a8k-14a"}),
        json!({"cmd": "sudo reboot /a8k-14b"}),
    ] {
        codes.push(code_of(&call(&client, "a8k_shell", args, None, None).await));
    }
    assert_eq!(codes, ["ABOVE_CEILING", "ABOVE_CEILING"]);
    assert!(
        !BODY_GOT
            .lock()
            .unwrap()
            .iter()
            .any(|c| c.contains("/a8k-14"))
    );
}

/// ak15. The attack: a HIGH_WRITE login approved by its operator with one password (redacted in the
/// request the operator sees), retried with another. Asserted (SECURITY.md 15: "A two-step answer is
/// bound to the call's principal and agent as to its tool, arguments and risk"; docs/mcp.md: in place
/// "decided, recorded and approved as a `callable` tool with the same arguments is"): the other
/// password does not run on the approval, in place as for the `callable` twin, and the approved one
/// runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ak15_an_approval_does_not_run_a_call_whose_redacted_argument_changed() {
    let mut seen = Vec::new();
    for tool in ["a8k_login_own", "a8k.login_callable"] {
        let sink = Arc::new(Memory::default());
        let pending: Pending = Arc::default();
        let gate = gate(Mode::FullAuto, &sink);
        let client = connect(server(&gate, &pending)).await;
        let (approved, other) = (format!("{tool}-A"), format!("{tool}-B"));
        let first = call(
            &client,
            tool,
            json!({"user": "ada", "password": approved}),
            None,
            None,
        )
        .await;
        assert_eq!(code_of(&first), "APPROVAL_PENDING", "{tool}");
        let token = pending.lock().unwrap()[0].token.clone();
        gate.approve(&token).unwrap();
        let changed = call(
            &client,
            tool,
            json!({"user": "ada", "password": other}),
            None,
            None,
        )
        .await;
        let same = call(
            &client,
            tool,
            json!({"user": "ada", "password": approved}),
            None,
            None,
        )
        .await;
        let logins = LOGINS.lock().unwrap().clone();
        seen.push((
            tool,
            code_of(&changed),
            code_of(&same),
            logins.contains(&other),
            logins.contains(&approved),
        ));
    }
    for (tool, changed, same, ran_other, ran_approved) in &seen {
        assert!(
            changed != "OK" && !ran_other,
            "{tool}: another password ran on the approval: {seen:?}"
        );
        assert!(
            same == "OK" && *ran_approved,
            "{tool}: the approved call did not run: {seen:?}"
        );
    }
}
