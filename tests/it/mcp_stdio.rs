//! MCP over stdio: a message over the size limit is answered with an error under its own request id,
//! wherever other `id` keys stand in it, and the server goes on.
#![cfg(feature = "mcp-http")]

use serde_json::json;

use crate::fixtures::mcp_in_band::*;

/// An oversized message with its id first is answered with an error under its id.
#[test]
fn b28_oversized_message_answered_under_its_id() {
    let pad = pad();
    let got = rt().block_on(oversized(format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{{\"name\":\"x\",\"arguments\":{{\"pad\":\"{pad}\"}}}}}}"
    )));
    assert!(answered_under(&got, json!(7)), "{got:#?}");
}

/// An oversized message whose params hold an `id` key before the top-level id (all within the
/// first KiB): the error must go to the request's own id, not to the nested one. Sent under
/// `"id": 99`, the key nested in `params`, it would leave request 8 unanswered (the client waits,
/// as with rmcp's own reader), and a client with a request 99 in flight would see that one fail.
#[test]
fn b29_oversized_message_nested_id_before_the_real_one() {
    let pad = pad();
    let got = rt().block_on(oversized(format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{{\"id\":99,\"name\":\"x\"}},\"id\":8,\"pad\":\"{pad}\"}}"
    )));
    assert!(
        answered_under(&got, json!(8)),
        "the oversized request 8 was answered as: {got:#?}"
    );
}

/// A string id.
#[test]
fn b30_oversized_message_string_id() {
    let pad = pad();
    let got = rt().block_on(oversized(format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":\"s-9\",\"method\":\"tools/call\",\"params\":{{\"pad\":\"{pad}\"}}}}"
    )));
    assert!(answered_under(&got, json!("s-9")), "{got:#?}");
}

/// An `"id":` inside a string value before the real id.
#[test]
fn b31_oversized_message_id_inside_a_string_before_the_real_one() {
    let pad = pad();
    let got = rt().block_on(oversized(format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"x \\\"id\\\":98\",\"id\":10,\"pad\":\"{pad}\"}}"
    )));
    assert!(
        answered_under(&got, json!(10)),
        "the oversized request 10 was answered as: {got:#?}"
    );
}

/// The id after whitespace and an escaped key (`"\u0069d"` is `"id"` to a JSON parser).
/// Answered by an error without an id, request 11, whose id is in the first KiB, would never be
/// answered.
#[test]
fn b32_oversized_message_escaped_id_key() {
    let pad = pad();
    let got = rt().block_on(oversized(format!(
        "{{ \"jsonrpc\" : \"2.0\" , \"\\u0069d\" : 11 , \"method\":\"tools/call\",\"pad\":\"{pad}\"}}"
    )));
    assert!(
        answered_under(&got, json!(11)),
        "the oversized request 11 was answered as: {got:#?}"
    );
}
