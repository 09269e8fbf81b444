//! `Ops`, the rmcp handler of `fixtures::handlers`, served by a gate and connected to: the setting
//! the handler tests of guarantees 4, 7, 13, 14 and 15 start from.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::model::ProtocolVersion;
use serde_json::Value;
use toolgate::approval::SessionGrant;
use toolgate::mcp::ToolgateServer;
use toolgate::{Approval, ApprovalRequest, Gate, Mode};

use crate::common::gates;
use crate::fixtures::handlers::*;

/// `Ops` and a server of `gate` for it with in-band approvals.
pub(crate) fn ops_server(gate: Gate) -> (Ops, ToolgateServer) {
    let ops = Ops::default();
    let server = ToolgateServer::new(gate).handler(ops.clone());
    (ops, server.approvals(in_band()))
}

/// [`ops_server`], and a client that can answer its forms.
pub(crate) async fn ops_in_band(gate: Gate) -> (Ops, Client) {
    let (ops, server) = ops_server(gate);
    (ops, connect(server).await)
}

/// How many times the body of `ops_ask` ran.
pub(crate) fn asks(ops: &Ops) -> usize {
    ops.asks.load(Ordering::SeqCst)
}

/// The code of a call of `tool` (as `code_of` says it).
pub(crate) async fn call_code(client: &Client, tool: &str, args: &Value) -> String {
    code_of(&call(client, tool, args.clone()).await)
}

/// Calls `tool` again with the request `state` of a form, answering it "approve".
pub(crate) async fn approve(client: &Client, tool: &str, args: &Value, state: &str) -> Said {
    retry(client, tool, args.clone(), state, "approve").await
}

/// `Ops` served by `gate` with nothing but the handler, and a client.
pub(crate) async fn ops_plain(gate: &Gate) -> (Ops, Client) {
    let ops = Ops::default();
    (
        ops.clone(),
        connect(ToolgateServer::new(gate.clone()).handler(ops)).await,
    )
}

/// How the client of [`ops_out_of_band`] connects.
pub(crate) enum Dialect {
    /// 2026-07-28 with form elicitation.
    Current,
    /// 2025-06-18 without elicitation.
    Old,
}

/// `Ops` served by `gate` with its approvals out of band (each told to the returned list), and a
/// client.
pub(crate) async fn ops_out_of_band(gate: &Gate, dialect: Dialect) -> (Ops, Client, Pending) {
    let ops = Ops::default();
    let (server, pending) = pending_channel(ToolgateServer::new(gate.clone()).handler(ops.clone()));
    let client = match dialect {
        Dialect::Current => connect(server).await,
        Dialect::Old => {
            connect_as(server, client_config(false, ProtocolVersion::V_2025_06_18)).await
        }
    };
    (ops, client, pending)
}

/// Calls `tool`, which must wait for an operator, then approves it as the operator of `gate`.
pub(crate) async fn approve_out_of_band(
    gate: &Gate,
    client: &Client,
    pending: &Pending,
    tool: &str,
    args: &Value,
) {
    assert_eq!(
        code_of(&call(client, tool, args.clone()).await),
        "APPROVAL_PENDING"
    );
    gate.approve(&last_token(pending)).expect("approved");
}

/// A FullAuto gate whose approver grants `grant` for the session at its first question and rejects
/// every later one for `why`; and the count of its questions.
pub(crate) fn granting_once(grant: SessionGrant, why: &'static str) -> (Gate, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&asked);
    let gate = gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
        if count.fetch_add(1, Ordering::SeqCst) == 0 {
            Approval::ApproveForSession(grant)
        } else {
            Approval::Reject(why.into())
        }
    });
    (gate, asked)
}
