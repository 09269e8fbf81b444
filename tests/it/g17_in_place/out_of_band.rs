//! `out_of_band`: a tool whose calls an operator approves, whatever the server's approval channel.
//! Over a server with `Approvals::InBand`, such a call gets no form, an answer sent with it is
//! refused, and it waits for the operator; its sibling without the key is approved in band.
#![cfg(feature = "mcp-http")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use toolgate::mcp::PendingApproval;
use toolgate::mcp::rmcp::model::CallToolResponse;
use toolgate::{Denied, tool as toolgate_tool};

use crate::fixtures::mcp_in_band::{
    answered_with, call, code_of, connect, gate, in_band, rt, state_of,
};
use crate::fixtures::shared_stores::Memory;

static PAID: AtomicUsize = AtomicUsize::new(0);
static REFUNDED: AtomicUsize = AtomicUsize::new(0);
static WIRED: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Payment {
    /// Cents.
    cents: u64,
}

#[derive(Clone, Default)]
pub(crate) struct Till;

#[toolgate::toolset(domain = "oob")]
#[tool_router]
impl Till {
    /// Pay: approved out of band only.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", modes = [FULL_AUTO], out_of_band)]
    pub(crate) async fn oob_pay(
        &self,
        Parameters(p): Parameters<Payment>,
    ) -> Result<CallToolResult, ErrorData> {
        PAID.fetch_add(1, Ordering::SeqCst);
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "paid {}",
            p.cents
        ))]))
    }

    /// Refund: approved in band.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", modes = [FULL_AUTO])]
    pub(crate) async fn oob_refund(
        &self,
        Parameters(p): Parameters<Payment>,
    ) -> Result<CallToolResult, ErrorData> {
        REFUNDED.fetch_add(1, Ordering::SeqCst);
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "refunded {}",
            p.cents
        ))]))
    }
}

#[tool_handler]
impl ServerHandler for Till {}

/// Wire money: a `callable` tool approved out of band only.
#[toolgate_tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "oobc", callable, out_of_band)]
pub async fn oob_wire(cents: u64) -> Result<u64, Denied> {
    WIRED.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

fn approve() -> Value {
    json!({"decision": "approve"})
}

/// o01. Broken: an `out_of_band` tool, in place or `callable`, is sent a form, or runs on an answer
/// from the client (its own form's state, or its in-band sibling's, sealed for the same arguments).
/// Asserted: no form, no body run in band; the operator's approval runs each once; the sibling without
/// the key is approved in band.
#[test]
fn o01_an_out_of_band_tool_is_approved_by_an_operator_only() {
    rt().block_on(async {
        let server_gate = gate(Arc::new(Memory::default()));
        let pending: Arc<Mutex<Vec<PendingApproval>>> = Arc::default();
        let held = pending.clone();
        let server = in_band(server_gate.clone())
            .handler(Till)
            .only(|m| m.domain == Some("oobc"))
            .on_pending(move |p| held.lock().unwrap().push(p.clone()));
        let client = connect(server).await;
        let args = json!({"cents": 700});

        let sibling = call(&client, "oob_refund", args.clone(), None, None).await;
        assert!(
            matches!(sibling, CallToolResponse::InputRequired(_)),
            "the sibling is approved in band: {sibling:?}"
        );
        let sibling_state = state_of(&sibling);
        assert_eq!(
            answered_with(&client, "oob_refund", &args, &sibling_state, approve()).await,
            "OK"
        );
        assert_eq!(REFUNDED.load(Ordering::SeqCst), 1);

        let sibling = state_of(&call(&client, "oob_refund", args.clone(), None, None).await);
        for tool in ["oob_pay", "oobc.oob_wire"] {
            let first = call(&client, tool, args.clone(), None, None).await;
            assert_eq!(code_of(&first), "APPROVAL_PENDING", "{tool}: {first:?}");
            assert_ne!(
                answered_with(&client, tool, &args, &sibling, approve()).await,
                "OK",
                "{tool}"
            );
        }
        assert_eq!(PAID.load(Ordering::SeqCst), 0, "paid in band");
        assert_eq!(WIRED.load(Ordering::SeqCst), 0, "wired in band");

        let tokens: Vec<(String, String)> = pending
            .lock()
            .unwrap()
            .iter()
            .map(|p| (p.tool.to_owned(), p.token.clone()))
            .collect();
        for tool in ["oob_pay", "oobc.oob_wire"] {
            let (_, token) = tokens
                .iter()
                .rev()
                .find(|(id, _)| id.ends_with(tool.trim_start_matches("oobc.")))
                .unwrap_or_else(|| panic!("{tool} was handed to the operator: {tokens:?}"));
            server_gate.approve(token).unwrap();
            let ran = call(&client, tool, args.clone(), None, None).await;
            assert_eq!(code_of(&ran), "OK", "{tool}");
        }
        assert_eq!(PAID.load(Ordering::SeqCst), 1);
        assert_eq!(WIRED.load(Ordering::SeqCst), 1);
    });
}
