//! Guarantee 4 (the mode is only ever lowered, and a lowering reaches every call not yet started)
//! over MCP: an in-band answer after a lowering runs nothing, and the listed tools follow the lowering.
#![cfg(feature = "mcp-http")]

use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use toolgate::mcp::ToolgateServer;
use toolgate::{Gate, Mode};

use crate::fixtures::mcp_in_band::*;
use crate::g07_approvals::rounds::*;

/// The form answered approve after the gate was lowered: the call does not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b22_answer_after_lowering() {
    let sink = Arc::new(Memory::default());
    let g = gate(sink.clone());
    let client = connect(in_band(g.clone())).await;
    let form = Form::asked(&client, "m03.m03_wire", json!({"cents": 3})).await;
    g.lower(Mode::PartialAuto).unwrap();
    let c = form.answer("approve").await;
    assert_eq!(M03.load(Ordering::SeqCst), 0, "{c}");
}

/// `list_changed` is sent to a client of the initialize handshake after `lower`, and the next list
/// is narrower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b27_list_changed_after_lower() {
    let g = Gate::builder().mode(Mode::PartialAuto).build().unwrap();
    let server = ToolgateServer::new(g.clone()).mode_poll(Duration::from_millis(20));
    let (client, mut rx) = serve_notified(server).await;
    let before = tokio::time::timeout(T, client.list_all_tools())
        .await
        .unwrap()
        .unwrap();
    assert!(before.iter().any(|t| t.name == "m09.m09_low"));
    g.lower(Mode::Shadow).unwrap();
    let got = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await;
    assert!(
        matches!(got, Ok(Some(()))),
        "no list_changed within 3 s of lower"
    );
    let after = tokio::time::timeout(T, client.list_all_tools())
        .await
        .unwrap()
        .unwrap();
    assert!(!after.iter().any(|t| t.name == "m09.m09_low"));
}
