//! Guarantee 8 (The audit `enter` record is written before the body runs), against rmcp handlers
//! gated in place, `#[toolset]` methods on registered instances, OAuth over `HttpService` and
//! request states.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use serde_json::json;
use toolgate::Mode;
use toolgate::audit::MemorySink;
use toolgate::mcp::ToolgateServer;

use crate::common::gates;
use crate::fixtures::handlers::*;

/// a22. A name no tool has, written with a bidi override, called on a server with a handler: a
/// JSON-RPC error, and no audit record carries the caller's raw text (README: the id asked for is
/// recorded by its SHA-256). Broken: the raw name reaches a record's `tool` or `message`.
#[test]
fn a22_an_unknown_name_with_hidden_characters_leaves_no_raw_text_in_the_log() {
    runtime().block_on(async {
        let sink = MemorySink::new();
        let gate = gates::audited(Mode::FullAuto, sink.clone());
        let client = connect(ToolgateServer::new(gate).handler(Ops::default())).await;
        let name = "ops_wipe\u{202E}\u{200B}";
        let said = call(&client, name, json!({"target": "db"})).await;
        assert!(code_of(&said).starts_with("RPC "), "{said:?}");
        for record in sink.records() {
            assert!(!record.tool.contains('\u{202E}'), "{record:?}");
            assert!(
                !record.message.as_deref().unwrap_or("").contains('\u{202E}'),
                "{record:?}"
            );
        }
    });
}
