//! MCP definitions and results of `toolgate::mcp`, checked on a small suite of callable tools.

#![cfg(feature = "mcp")]

use serde_json::{Value, json};
use toolgate::mcp::rmcp::ServerHandler;
use toolgate::mcp::rmcp::model::{CallToolResult, ErrorCode, JsonObject};
use toolgate::mcp::{
    META_ALLOWED_MODES, META_RISK_LEVEL, ToolgateServer, Visibility, definition, tool_result,
};
use toolgate::schemars::JsonSchema;
use toolgate::serde::Serialize;
use toolgate::{AllowAllApprover, Denied, Gate, Mode, tool};

use crate::common::gates;
use crate::fixtures::support::DiskError;

#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
struct Page {
    title: String,
    words: u32,
}

/// Read a page.
#[tool(risk = "READ_ONLY", domain = "defs", idempotent, open_world, callable)]
fn read(title: String) -> Result<Page, Denied> {
    Ok(Page { title, words: 42 })
}

/// Propose an edit.
#[tool(risk = "PROPOSE_ONLY", domain = "defs", callable)]
fn propose(text: String) -> Result<String, Denied> {
    Ok(format!("proposed: {text}"))
}

/// Write a line.
#[tool(risk = "LOW_WRITE", domain = "defs", callable)]
fn write(line: String) -> Result<Vec<String>, Denied> {
    Ok(vec![line])
}

/// Drop everything.
#[tool(risk = "HIGH_WRITE", domain = "defs", modes = [FULL_AUTO], idempotent, callable)]
fn purge() -> Result<(), Denied> {
    Ok(())
}

/// Count slowly.
#[tool(risk = "READ_ONLY", domain = "defs", callable)]
async fn count(to: u32) -> Result<u32, Denied> {
    tokio::task::yield_now().await;
    Ok(to)
}

/// Always fails.
#[tool(risk = "READ_ONLY", domain = "defs", callable)]
fn fails() -> Result<u32, DiskError> {
    Err(DiskError::Full)
}

/// Not callable by name.
#[tool(risk = "READ_ONLY", domain = "defs")]
#[allow(dead_code)] // Registered and listed, never called: nothing here calls it, and no agent can.
fn hidden_helper() -> Result<u32, Denied> {
    Ok(1)
}

/// Another domain.
#[tool(risk = "READ_ONLY", domain = "other", callable)]
fn elsewhere() -> Result<u32, Denied> {
    Ok(2)
}

const CALLABLE: [&str; 7] = [
    "defs.count",
    "defs.fails",
    "defs.propose",
    "defs.purge",
    "defs.read",
    "defs.write",
    "other.elsewhere",
];

fn wire(tool: &toolgate::mcp::rmcp::model::Tool) -> Value {
    serde_json::to_value(tool).expect("a tool serializes")
}

fn names(server: &ToolgateServer) -> Vec<String> {
    server.tools().iter().map(|t| t.name.to_string()).collect()
}

fn by_name(id: &str) -> Value {
    let tool = toolgate::registry().get(id).expect("a linked tool");
    wire(&definition(tool).expect("a callable tool"))
}

fn args(value: Value) -> Option<JsonObject> {
    match value {
        Value::Object(map) => Some(map),
        other => panic!("not an object: {other}"),
    }
}

/// A server of every tool behind a gate of `mode`.
fn server_in(mode: Mode) -> ToolgateServer {
    ToolgateServer::new(Gate::new(mode).unwrap())
}

/// `server`'s answer to a call of `id` with `arguments`.
async fn call(server: &ToolgateServer, id: &str, arguments: Value) -> CallToolResult {
    server.call(id, args(arguments)).await.unwrap()
}

fn wire_result(result: &CallToolResult) -> Value {
    serde_json::to_value(result).expect("a result serializes")
}

/// Checks an error result: `isError`, the text `<CODE>: <message>` and the structured code.
fn assert_refused(result: &CallToolResult, code: &str) -> String {
    let json = wire_result(result);
    assert_eq!(json["isError"], true, "{json}");
    let text = json["content"][0]["text"].as_str().expect("a text content");
    assert_eq!(json["structuredContent"]["code"], code, "{json}");
    let message = json["structuredContent"]["message"]
        .as_str()
        .expect("a message");
    assert_eq!(text, format!("{code}: {message}"));
    message.to_owned()
}

#[test]
fn annotations_follow_the_declared_risk_and_are_always_written() {
    let expected = [
        ("defs.read", true, false, true, true),
        ("defs.propose", true, false, false, false),
        ("defs.write", false, false, false, false),
        ("defs.purge", false, true, true, false),
    ];
    for (id, read_only, destructive, idempotent, open_world) in expected {
        assert_eq!(
            by_name(id)["annotations"],
            json!({
                "readOnlyHint": read_only,
                "destructiveHint": destructive,
                "idempotentHint": idempotent,
                "openWorldHint": open_world,
            }),
            "{id}"
        );
    }
}

#[test]
fn meta_names_the_risk_and_the_allowed_modes() {
    assert_eq!(
        by_name("defs.purge")["_meta"],
        json!({"dev.toolgate/risk_level": "HIGH_WRITE", "dev.toolgate/allowed_modes": ["FULL_AUTO"]})
    );
    assert_eq!(
        by_name("defs.write")["_meta"],
        json!({
            "dev.toolgate/risk_level": "LOW_WRITE",
            "dev.toolgate/allowed_modes": ["PARTIAL_AUTO", "FULL_AUTO"],
        })
    );
    assert_eq!(
        by_name("defs.propose")["_meta"][META_ALLOWED_MODES],
        json!(["SHADOW", "ADVISORY", "PARTIAL_AUTO", "FULL_AUTO"])
    );
    assert_eq!(by_name("defs.read")["_meta"][META_RISK_LEVEL], "READ_ONLY");
}

#[test]
fn a_definition_has_the_id_the_description_and_the_schemas() {
    let read = by_name("defs.read");
    assert_eq!(read["name"], "defs.read");
    assert_eq!(read["description"], "Read a page.");
    let tool = toolgate::registry().get("defs.read").unwrap();
    assert_eq!(read["inputSchema"], tool.input_schema().unwrap());
    assert_eq!(read["inputSchema"]["additionalProperties"], false);
    assert_eq!(read["outputSchema"], tool.output_schema().unwrap());
    assert_eq!(read["outputSchema"]["type"], "object");

    // Results that are not objects have no output schema: MCP admits only objects' schemas.
    for id in ["defs.propose", "defs.write", "defs.purge", "defs.count"] {
        let json = by_name(id);
        assert!(json.get("outputSchema").is_none(), "{id}: {json}");
        assert_eq!(json["inputSchema"]["type"], "object", "{id}");
    }
    // Not callable: no definition.
    let helper = toolgate::registry().get("defs.hidden_helper").unwrap();
    assert!(definition(helper).is_none());
}

#[test]
fn each_mode_hides_what_the_gate_would_refuse() {
    let reads = [
        "defs.count",
        "defs.fails",
        "defs.propose",
        "defs.read",
        "other.elsewhere",
    ];
    let with = |extra: &[&str]| {
        let mut all: Vec<String> = reads.iter().chain(extra).map(|s| s.to_string()).collect();
        all.sort();
        all
    };
    let cases = [
        (Mode::Shadow, with(&[])),
        (Mode::Advisory, with(&[])),
        (Mode::PartialAuto, with(&["defs.write"])),
        // No approver: every HIGH_WRITE call would be refused, so it is hidden.
        (Mode::FullAuto, with(&["defs.write"])),
    ];
    for (mode, expected) in cases {
        let server = this_files(Gate::new(mode).unwrap());
        assert_eq!(names(&server), expected, "{mode}");
    }
    let approved = gates::approved(Mode::FullAuto, AllowAllApprover);
    assert_eq!(
        names(&this_files(approved)),
        with(&["defs.purge", "defs.write"])
    );
    let two_step = gates::two_step(Mode::FullAuto);
    assert!(names(&this_files(two_step)).contains(&"defs.purge".to_owned()));
}

#[test]
fn marked_tools_are_listed_with_the_mode_leading_their_description() {
    for mode in Mode::ALL {
        let server = this_files(Gate::new(mode).unwrap()).visibility(Visibility::MarkDisabled);
        let tools = server.tools();
        let listed: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
        assert_eq!(listed, CALLABLE, "{mode}: every callable tool is listed");
        for tool in &tools {
            let refused = match &*tool.name {
                "defs.purge" => true,
                "defs.write" => mode < Mode::PartialAuto,
                _ => false,
            };
            let plain = by_name(&tool.name)["description"]
                .as_str()
                .unwrap()
                .to_owned();
            let expected = if refused {
                format!("[DISABLED in {} mode] {plain}", mode.as_str())
            } else {
                plain
            };
            assert_eq!(tool.description.as_deref(), Some(&*expected), "{mode}");
            // Everything but the description is the plain definition.
            let mut json = wire(tool);
            json["description"] = by_name(&tool.name)["description"].clone();
            assert_eq!(json, by_name(&tool.name));
        }
    }
}

#[test]
fn the_list_follows_the_gate_when_it_is_lowered_or_deny_listed() {
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let server = ToolgateServer::new(gate.clone());
    assert!(names(&server).contains(&"defs.write".to_owned()));
    gate.lower(Mode::Shadow).unwrap();
    assert!(!names(&server).contains(&"defs.write".to_owned()));

    let denied = gates::denying(Mode::FullAuto, "defs.re*");
    let server = ToolgateServer::new(denied).visibility(Visibility::MarkDisabled);
    let read = server
        .tools()
        .into_iter()
        .find(|t| t.name == "defs.read")
        .unwrap();
    assert_eq!(
        read.description.as_deref(),
        Some("[DISABLED in FULL_AUTO mode] Read a page.")
    );
}

#[test]
fn only_narrows_the_served_tools() {
    let server =
        ToolgateServer::new(Gate::new(Mode::Shadow).unwrap()).only(|m| m.domain == Some("other"));
    assert_eq!(names(&server), ["other.elsewhere"]);
    assert!(server.serves("other.elsewhere"));
    assert!(!server.serves("defs.read"));
    assert!(server.tool("defs.read").is_none());
    assert_eq!(
        wire(&server.tool("other.elsewhere").unwrap()),
        by_name("other.elsewhere")
    );
}

#[tokio::test]
async fn allowed_calls_return_structured_or_text_results() {
    let server = server_in(Mode::PartialAuto);
    let page = call(&server, "defs.read", json!({"title": "Home"})).await;
    let json = wire_result(&page);
    assert_eq!(json["isError"], false);
    assert_eq!(
        json["structuredContent"],
        json!({"title": "Home", "words": 42})
    );
    let text = json["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap(),
        json["structuredContent"]
    );

    let proposed = wire_result(
        &server
            .call("defs.propose", args(json!({"text": "hi"})))
            .await
            .unwrap(),
    );
    assert_eq!(
        proposed["content"],
        json!([{"type": "text", "text": "proposed: hi"}])
    );
    assert!(proposed.get("structuredContent").is_none(), "{proposed}");

    let written = wire_result(
        &server
            .call("defs.write", args(json!({"line": "a"})))
            .await
            .unwrap(),
    );
    assert_eq!(written["content"][0]["text"], r#"["a"]"#);
    assert!(written.get("structuredContent").is_none(), "{written}");

    let counted = wire_result(
        &server
            .call("defs.count", args(json!({"to": 3})))
            .await
            .unwrap(),
    );
    assert_eq!(counted["content"][0]["text"], "3");
}

#[tokio::test]
async fn missing_arguments_are_an_empty_object() {
    let server = ToolgateServer::new(Gate::new(Mode::Shadow).unwrap());
    let result = server.call("other.elsewhere", None).await.unwrap();
    assert_eq!(wire_result(&result)["content"][0]["text"], "2");

    let missing = server.call("defs.read", None).await.unwrap();
    let message = assert_refused(&missing, "INVALID_PARAMS");
    assert!(message.contains("title"), "{message}");
}

#[tokio::test]
async fn refusals_and_failures_are_error_results_with_the_code() {
    let server = server_in(Mode::Shadow);
    // Hidden in SHADOW, called anyway: the gate refuses it with its own code.
    let refused = call(&server, "defs.write", json!({"line": "a"})).await;
    let message = assert_refused(&refused, "MODE_NOT_ALLOWED");
    assert!(
        message.contains("defs.write") && message.contains("SHADOW"),
        "{message}"
    );
    assert_eq!(
        wire_result(&refused)["structuredContent"]
            .as_object()
            .unwrap()
            .len(),
        2
    );

    let purge = server.call("defs.purge", None).await.unwrap();
    assert_refused(&purge, "MODE_NOT_ALLOWED");

    let unknown_key = server
        .call("defs.read", args(json!({"title": "x", "apiKey": "sk-1"})))
        .await
        .unwrap();
    assert_refused(&unknown_key, "INVALID_PARAMS");
    let json = wire_result(&unknown_key);
    assert_eq!(json["structuredContent"]["path"], "apiKey");
    assert!(!json.to_string().contains("sk-1"), "{json}");

    let failed = server.call("defs.fails", None).await.unwrap();
    assert_eq!(assert_refused(&failed, "HANDLER_ERROR"), "the disk is full");

    let full = ToolgateServer::new(Gate::new(Mode::FullAuto).unwrap());
    assert_refused(
        &full.call("defs.purge", None).await.unwrap(),
        "APPROVAL_REQUIRED",
    );
    let denied = gates::denying(Mode::Shadow, "defs.read");
    let read = ToolgateServer::new(denied)
        .call("defs.read", args(json!({"title": "x"})))
        .await
        .unwrap();
    assert_refused(&read, "DENY_LISTED");
}

#[tokio::test]
async fn only_names_that_are_no_tool_are_protocol_errors() {
    let server =
        ToolgateServer::new(Gate::new(Mode::FullAuto).unwrap()).only(|m| m.domain == Some("defs"));
    for name in [
        "defs.nope",
        "defs.hidden_helper",
        "other.elsewhere",
        "DEFS.READ",
        "",
    ] {
        let error = server.call(name, None).await.unwrap_err();
        assert_eq!(error.code, ErrorCode::INVALID_PARAMS, "{name}");
        assert_eq!(error.message, format!("Unknown tool: {name}"));
        assert_eq!(error.data, Some(json!({"code": "UNKNOWN_TOOL"})));
    }
}

#[test]
fn tool_result_maps_each_kind_of_value() {
    let cases = [
        (json!(null), "null"),
        (json!(7), "7"),
        (json!([1, 2]), "[1,2]"),
        (json!("plain"), "plain"),
    ];
    for (value, text) in cases {
        let json = wire_result(&tool_result(Ok(value)));
        assert_eq!(json["content"], json!([{"type": "text", "text": text}]));
        assert_eq!(json["isError"], false);
        assert!(json.get("structuredContent").is_none());
    }
    let object = wire_result(&tool_result(Ok(json!({"a": 1}))));
    assert_eq!(object["structuredContent"], json!({"a": 1}));
    assert_eq!(object["content"][0]["text"], r#"{"a":1}"#);
}

#[test]
fn the_server_advertises_tools_and_its_name() {
    let server = ToolgateServer::new(Gate::new(Mode::Shadow).unwrap())
        .server_info("desk", "2.0.0")
        .instructions("Be careful.");
    let info = serde_json::to_value(server.get_info()).unwrap();
    assert!(info["capabilities"]["tools"].is_object(), "{info}");
    assert_eq!(info["serverInfo"]["name"], "desk");
    assert_eq!(info["serverInfo"]["version"], "2.0.0");
    assert_eq!(info["instructions"], "Be careful.");
    assert_eq!(
        server.get_tool("defs.purge").map(|t| t.name.to_string()),
        Some("defs.purge".into())
    );
    assert!(server.get_tool("defs.hidden_helper").is_none());
}

/// A server of this file's tools alone: the test binary links other files' tools too.
fn this_files(gate: Gate) -> ToolgateServer {
    ToolgateServer::new(gate).only(|m| m.source.module_path.starts_with(module_path!()))
}
