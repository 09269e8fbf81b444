//! The rounds of an in-band approval over MCP, each in one call: the tests of guarantees 4, 7, 13
//! and 15 over MCP ask for forms and answer them again and again.
#![cfg(feature = "mcp-http")]

use serde_json::Value;

use crate::fixtures::mcp_in_band::*;

/// The request state of the form a call of `tool` is answered with.
pub(crate) async fn form_state(client: &Client, tool: &str, args: Value) -> String {
    state_of(&call(client, tool, args, None, None).await)
}

/// The code of a call of `tool` retried with the request `state` of its form and `decision`.
pub(crate) async fn answered(
    client: &Client,
    tool: &str,
    args: Value,
    state: &str,
    decision: &str,
) -> String {
    code_of(&call(client, tool, args, Some(state), Some(decision)).await)
}

/// The form an in-band approval asked a call for: the call, and the form's request state.
pub(crate) struct Form<'a> {
    client: &'a Client,
    tool: &'a str,
    args: Value,
    pub(crate) state: String,
}

impl<'a> Form<'a> {
    /// Calls `tool` with `args` on `client`, which is answered with a form.
    pub(crate) async fn asked(client: &'a Client, tool: &'a str, args: Value) -> Form<'a> {
        let state = form_state(client, tool, args.clone()).await;
        Form {
            client,
            tool,
            args,
            state,
        }
    }

    /// The code of the same call retried with the form's state, answered `decision`.
    pub(crate) async fn answer(&self, decision: &str) -> String {
        answered(
            self.client,
            self.tool,
            self.args.clone(),
            &self.state,
            decision,
        )
        .await
    }
}
