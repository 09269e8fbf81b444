//! Tools handed to a rig agent (`toolgate::rig`): rig's own agent loop, over rig's scripted completion
//! model, calls them, and every call goes through the gate.

#![cfg(feature = "rig")]

use std::sync::atomic::{AtomicUsize, Ordering};

use rig_agent::AgentBuilder;
use rig_core::completion::AssistantContent;
use rig_core::message::{ToolCall, ToolFunction, ToolName};
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use rig_core::tool::{DynamicTool, ToolErrorKind, ToolExecutionError, ToolOutput};
use serde_json::{Value, json};
use toolgate::audit::{AuditError, AuditRecord, AuditSink, MemorySink, Stage};
use toolgate::rig::RigTools;
use toolgate::{Approval, Denied, Gate, Mode, Risk, tool};

use crate::common::gates;
use crate::fixtures::integrations::run;
use crate::fixtures::support::{DiskError, counted_tools};

static READS: AtomicUsize = AtomicUsize::new(0);
static DELETES: AtomicUsize = AtomicUsize::new(0);
static RENAMES: AtomicUsize = AtomicUsize::new(0);
static ARCHIVES: AtomicUsize = AtomicUsize::new(0);

/// Read a note.
#[tool(risk = "READ_ONLY", domain = "rigdesk", callable)]
fn read(id: u64) -> Result<String, Denied> {
    READS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("note {id}: buy milk"))
}

/// Delete a note. Never allowed in these tests: its body must never run.
#[tool(risk = "HIGH_WRITE", domain = "rigdesk", modes = [FULL_AUTO], callable)]
fn delete(id: u64) -> Result<String, Denied> {
    DELETES.fetch_add(1, Ordering::SeqCst);
    Ok(format!("note {id} deleted"))
}

/// Rename a note.
#[tool(risk = "LOW_WRITE", domain = "rigdesk", callable)]
fn rename(id: u64, title: String) -> Result<String, Denied> {
    RENAMES.fetch_add(1, Ordering::SeqCst);
    Ok(format!("note {id} is {title}"))
}

/// Archive a note.
#[tool(risk = "HIGH_WRITE", domain = "rigdesk", modes = [FULL_AUTO], callable)]
fn archive(id: u64) -> Result<String, Denied> {
    ARCHIVES.fetch_add(1, Ordering::SeqCst);
    Ok(format!("note {id} archived"))
}

fn classify(command: &str) -> Risk {
    if command.contains("sudo") {
        Risk::HighWrite
    } else {
        Risk::ReadOnly
    }
}

static SHELLS: AtomicUsize = AtomicUsize::new(0);

counted_tools! {
    /// Run a command on the notes server.
    #[tool(risk = "LOW_WRITE", domain = "rigdesk", escalate = classify, callable)]
    fn shell(command: String) -> SHELLS += 1, command: String;
}

/// An audit log that cannot be written.
struct Unwritable;

impl AuditSink for Unwritable {
    fn record(&self, _: &AuditRecord) -> Result<(), AuditError> {
        Err(AuditError::new("the audit disk is gone"))
    }
}

/// Count the notes.
#[tool(risk = "READ_ONLY", domain = "rigdesk", callable)]
async fn count() -> Result<Vec<u64>, Denied> {
    tokio::task::yield_now().await;
    Ok(vec![7, 8])
}

/// Save the notes.
#[tool(risk = "READ_ONLY", domain = "rigdesk", callable)]
fn save() -> Result<(), DiskError> {
    Err(DiskError::Full)
}

fn call(id: &str, name: &str, arguments: Value) -> AssistantContent {
    AssistantContent::ToolCall(ToolCall::from_wire(
        id,
        ToolFunction::new(ToolName::new(name).unwrap(), arguments),
    ))
}

fn desk(gate: &Gate) -> RigTools {
    RigTools::new(gate.clone()).only(|m| m.domain == Some("rigdesk"))
}

fn names(tools: &[DynamicTool]) -> Vec<String> {
    tools.iter().map(|t| t.name().to_string()).collect()
}

#[tokio::test]
async fn a_rig_agent_calls_an_allowed_and_a_refused_tool_through_the_gate() {
    let audit = MemorySink::new();
    let gate = gates::audited(Mode::Shadow, audit.clone());
    let model = MockCompletionModel::from_turns([
        MockTurn::from_contents([
            call("call-1", "rigdesk-read", json!({"id": 7})),
            call("call-2", "rigdesk-delete", json!({"id": 7})),
        ]),
        MockTurn::text("Note 7 says to buy milk; I may not delete it."),
    ]);
    let agent = AgentBuilder::new(model.clone())
        .dynamic_tools(desk(&gate).tools())
        .build();
    let reads = READS.load(Ordering::SeqCst);

    let answer = agent
        .prompt("What does note 7 say? Then delete it.")
        .max_turns(3)
        .await
        .unwrap();

    assert_eq!(
        answer.output(),
        "Note 7 says to buy milk; I may not delete it."
    );
    assert_eq!(READS.load(Ordering::SeqCst), reads + 1);
    assert_eq!(DELETES.load(Ordering::SeqCst), 0, "the refused body ran");

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    // The model was offered every desk tool, with the registry's schema.
    let offered: Vec<String> = requests[0]
        .tools
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(
        offered,
        [
            "rigdesk-archive",
            "rigdesk-count",
            "rigdesk-delete",
            "rigdesk-read",
            "rigdesk-rename",
            "rigdesk-save",
            "rigdesk-shell"
        ]
    );
    let read_definition = requests[0]
        .tools
        .iter()
        .find(|t| t.name.as_str() == "rigdesk-read")
        .unwrap();
    let mut schema = toolgate::registry()
        .get("rigdesk.read")
        .unwrap()
        .input_schema()
        .unwrap();
    schema.as_object_mut().unwrap().remove("$schema");
    assert_eq!(read_definition.parameters, schema);
    assert_eq!(read_definition.description, "Read a note.");

    // What the model received back: the result, and the refusal as the tool's result text.
    let history = serde_json::to_value(&requests[1].chat_history).unwrap();
    let results = &history.as_array().unwrap().last().unwrap()["content"];
    assert_eq!(
        results,
        &json!([
            {
                "type": "toolresult",
                "call": {"provider": "call-1"},
                "name": "rigdesk-read",
                "content": [{"type": "text", "text": "note 7: buy milk"}],
            },
            {
                "type": "toolresult",
                "call": {"provider": "call-2"},
                "name": "rigdesk-delete",
                "content": [{
                    "type": "text",
                    "text": "MODE_NOT_ALLOWED: tool `rigdesk.delete` (HIGH_WRITE) is not allowed in \
                             mode SHADOW; it is allowed in FULL_AUTO",
                }],
                "is_error": true,
            },
        ])
    );

    // The gate's audit log has both calls.
    let records: Vec<(Stage, String, Option<String>)> = audit
        .records()
        .into_iter()
        .map(|r| (r.stage, r.tool.to_string(), r.code.map(|c| c.to_string())))
        .collect();
    assert_eq!(
        records,
        [
            (Stage::Enter, "rigdesk.read".to_owned(), None),
            (Stage::Exit, "rigdesk.read".to_owned(), None),
            (
                Stage::Refused,
                "rigdesk.delete".to_owned(),
                Some("MODE_NOT_ALLOWED".to_owned())
            ),
        ]
    );
}

fn refusal(result: Result<ToolOutput, ToolExecutionError>) -> ToolExecutionError {
    result.map(|output| output.render()).unwrap_err()
}

#[tokio::test]
async fn every_refusal_reaches_rig_as_a_refusal_with_its_code_and_the_body_does_not_run() {
    let shadow = desk(&Gate::new(Mode::Shadow).unwrap());
    let refused = refusal(run(&shadow, "rigdesk.rename", json!({"id": 1, "title": "x"})).await);
    assert!(refused.is_refusal());
    assert_eq!(refused.kind(), ToolErrorKind::PermissionDenied);
    assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"));
    assert_eq!(
        refused.model_feedback(),
        Some(
            "MODE_NOT_ALLOWED: tool `rigdesk.rename` (LOW_WRITE) is not allowed in mode SHADOW; it \
             is allowed in PARTIAL_AUTO, FULL_AUTO"
        )
    );

    let partial = Gate::new(Mode::PartialAuto).unwrap();
    let above = refusal(run(&desk(&partial), "rigdesk.archive", json!({"id": 1})).await);
    assert!(above.is_refusal());
    assert_eq!(above.code(), Some("MODE_NOT_ALLOWED"));

    let denying = gates::denying(Mode::FullAuto, "rigdesk.rename");
    let denied = refusal(
        run(
            &desk(&denying),
            "rigdesk.rename",
            json!({"id": 1, "title": "x"}),
        )
        .await,
    );
    assert!(denied.is_refusal());
    assert_eq!(denied.code(), Some("DENY_LISTED"));
    assert!(
        denied
            .model_feedback()
            .unwrap()
            .starts_with("DENY_LISTED: ")
    );

    let full = Gate::new(Mode::FullAuto).unwrap();
    let unapproved = refusal(run(&desk(&full), "rigdesk.archive", json!({"id": 1})).await);
    assert_eq!(unapproved.code(), Some("APPROVAL_REQUIRED"));
    assert!(unapproved.is_refusal());

    let rejecting = gates::approved(Mode::FullAuto, |_: &toolgate::ApprovalRequest<'_>| {
        Approval::Reject("not today".into())
    });
    let rejected = refusal(run(&desk(&rejecting), "rigdesk.archive", json!({"id": 1})).await);
    assert_eq!(rejected.code(), Some("APPROVAL_REJECTED"));
    assert!(rejected.model_feedback().unwrap().contains("not today"));

    let two_step = gates::two_step(Mode::FullAuto);
    let waiting = refusal(run(&desk(&two_step), "rigdesk.archive", json!({"id": 1})).await);
    assert_eq!(waiting.code(), Some("APPROVAL_PENDING"));

    let escalated = refusal(
        run(
            &desk(&partial),
            "rigdesk.shell",
            json!({"command": "sudo rm -r /"}),
        )
        .await,
    );
    assert!(escalated.is_refusal());
    assert_eq!(escalated.code(), Some("ABOVE_CEILING"));
    assert_eq!(SHELLS.load(Ordering::SeqCst), 0, "an escalated shell ran");

    let unaudited = gates::audited(Mode::PartialAuto, Unwritable);
    let unwritten = refusal(
        run(
            &desk(&unaudited),
            "rigdesk.rename",
            json!({"id": 1, "title": "x"}),
        )
        .await,
    );
    assert!(unwritten.is_refusal());
    assert_eq!(unwritten.code(), Some("AUDIT_UNAVAILABLE"));

    assert_eq!(RENAMES.load(Ordering::SeqCst), 0, "a refused rename ran");
    assert_eq!(ARCHIVES.load(Ordering::SeqCst), 0, "a refused archive ran");

    // Not refusals, but errors the model reads the same way.
    let invalid = refusal(
        run(
            &desk(&partial),
            "rigdesk.rename",
            json!({"id": 1, "apiKey": "x"}),
        )
        .await,
    );
    assert!(!invalid.is_refusal());
    assert_eq!(invalid.kind(), ToolErrorKind::InvalidArgs);
    assert_eq!(invalid.code(), Some("INVALID_PARAMS"));
    assert!(
        invalid
            .model_feedback()
            .unwrap()
            .starts_with("INVALID_PARAMS: invalid arguments at `apiKey`")
    );
    assert_eq!(
        RENAMES.load(Ordering::SeqCst),
        0,
        "a rename with invalid arguments ran"
    );

    let failed = refusal(run(&desk(&partial), "rigdesk.save", json!({})).await);
    assert_eq!(failed.kind(), ToolErrorKind::Other);
    assert_eq!(failed.code(), Some("HANDLER_ERROR"));
    assert_eq!(
        failed.model_feedback(),
        Some("HANDLER_ERROR: the disk is full")
    );

    // Allowed, the same tools run.
    let renamed = run(
        &desk(&partial),
        "rigdesk.rename",
        json!({"id": 1, "title": "groceries"}),
    )
    .await;
    assert_eq!(renamed.unwrap().as_text(), Some("note 1 is groceries"));
    assert_eq!(RENAMES.load(Ordering::SeqCst), 1);
    let approving = gates::approved(Mode::FullAuto, toolgate::AllowAllApprover);
    let archived = run(&desk(&approving), "rigdesk.archive", json!({"id": 1})).await;
    assert_eq!(archived.unwrap().as_text(), Some("note 1 archived"));
    assert_eq!(ARCHIVES.load(Ordering::SeqCst), 1);
    let counted = run(&desk(&partial), "rigdesk.count", json!({})).await;
    assert_eq!(counted.unwrap().as_json(), Some(&json!([7, 8])));
}

#[test]
fn which_tools_an_agent_is_given() {
    let shadow = Gate::new(Mode::Shadow).unwrap();
    // Every callable tool, whatever the mode: the gate decides each call.
    let every = names(&toolgate::rig::tools(&shadow));
    assert!(every.contains(&"rigdesk-delete".to_owned()));
    assert!(
        every.contains(&"pdefs-lookup".to_owned()),
        "other domains too"
    );
    assert!(!every.iter().any(|name| name.contains('.')), "{every:?}");
    assert_eq!(
        names(&desk(&shadow).allowed_now().tools()),
        ["rigdesk-count", "rigdesk-read", "rigdesk-save"]
    );
    let full = gates::approved(Mode::FullAuto, toolgate::AllowAllApprover);
    assert_eq!(names(&desk(&full).allowed_now().tools()).len(), 7);
    assert!(desk(&shadow).tool("rigdesk.nothing").is_none());
    assert!(desk(&shadow).tool("pdefs.lookup").is_none(), "filtered out");
    assert!(desk(&shadow).allowed_now().tool("rigdesk.delete").is_none());
}

#[test]
fn the_example_agent_reads_a_note_and_is_refused_the_delete() {
    let example = crate::common::example("rig_agent", "rig");
    let output = std::process::Command::new(example)
        .env_remove("TOOLGATE_MODE")
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        stdout,
        "mode: SHADOW\n\
         tools offered: notes-delete, notes-read\n\
         the model received for notes-read: note 12: renew the TLS certificate before Friday\n\
         the model received for notes-delete: MODE_NOT_ALLOWED: tool `notes.delete` (HIGH_WRITE) is \
         not allowed in mode SHADOW; it is allowed in FULL_AUTO\n\
         answer: Note 12 reminds you to renew the TLS certificate; I could not delete it.\n\
         notes.delete ran 0 times\n"
    );
}
