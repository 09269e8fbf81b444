//! One `tools/call` answered: an in-band approval's answer first, then the gate, and a call that
//! waits for an approval asked of the client, handed to the operator channel, or made a task.

use rmcp::model::{CallToolRequestParams, CallToolResponse, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::json;

use super::builder::ToolgateServer;
use super::caller::{Caller, Client};
use super::dispatch::Target;
use super::pending::PendingApproval;
use super::results::refusal;
use crate::approval::store::ApproveError;
use crate::gate::Gate;
use crate::mcp::approvals::{About, Approvals, StateRefused, shown_arguments};
use crate::mcp::codes::McpCode;
use crate::registry::Tool;
use toolgate_policy::DenialCode;

impl ToolgateServer {
    /// Answers one `tools/call`: its request state first (in band), then the gate.
    pub(super) async fn respond(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        client: Client,
        caller: &Caller,
    ) -> Result<CallToolResponse, ErrorData> {
        let gate = &caller.gate;
        let Some(target) = self.target(&request.name) else {
            return self.undeclared_call(request, context, gate).await;
        };
        let tool = target.tool();
        let forms = match &self.approvals {
            Approvals::InBand(in_band) if client.answers_forms => Some(in_band),
            _ => None,
        };
        // In band, whoever drives the client answers, possibly the agent itself: that confirms a call,
        // it does not authorize one that cannot be undone, or one its tool or the operator's policy
        // keeps for an operator. The declared risk is the least a call is judged at, so what keeps it
        // keeps every call; the call's own risk is asked again once the gate has judged it.
        let in_band =
            forms.filter(|_| !gate.approved_out_of_band(tool.entry, tool.manifest().risk_level));
        // A state this server did not seal for its approval forms is the handler's own, for a tool
        // of the handler; no other tool has one.
        let approval_state = request.request_state.as_deref().filter(|sealed| {
            crate::mcp::approvals::is_approval_state(sealed)
                || !matches!(target, Target::InPlace(_))
        });
        if let Some(sealed) = approval_state {
            let Some(in_band) = in_band else {
                let refused = if forms.is_some() {
                    StateRefused::OutOfBand
                } else {
                    StateRefused::Invalid
                };
                return state_refused(gate, tool, refused);
            };
            let no_arguments = JsonObject::new();
            let (token, answer, risk) = match in_band.answer(
                &caller.session(),
                &request.name,
                request.arguments.as_ref().unwrap_or(&no_arguments),
                sealed,
                request.input_responses.as_ref(),
            ) {
                Ok(answered) => answered,
                Err(refused) => return state_refused(gate, tool, refused),
            };
            // The risk the form was sent at, sealed in the state, is the call's (its approval is bound
            // to it); the policy asked is the one in force now, which may keep the call for an
            // operator since the form was sent. Asked before the answer reaches the store.
            if gate.approved_out_of_band(tool.entry, risk) {
                return state_refused(gate, tool, StateRefused::OutOfBand);
            }
            match gate.answer(&token, answer) {
                Ok(()) => {}
                Err(ApproveError::Expired) => {
                    return state_refused(gate, tool, StateRefused::Expired);
                }
                Err(ApproveError::AlreadyApproved | ApproveError::AlreadyUsed) => {
                    return state_refused(gate, tool, StateRefused::Reused);
                }
                Err(ApproveError::ConfirmationMismatch) => {
                    return state_refused(gate, tool, StateRefused::Unconfirmed);
                }
                Err(ApproveError::UnknownToken | ApproveError::NotEnabled) => {
                    return state_refused(gate, tool, StateRefused::Invalid);
                }
                Err(ApproveError::Store(error)) => {
                    let code = McpCode::Denied(DenialCode::ApprovalStoreUnavailable);
                    let message = error.to_string();
                    let manifest = tool.manifest();
                    gate.record_probe(
                        std::borrow::Cow::Borrowed(manifest.id),
                        Some(manifest.risk_level),
                        code.as_str(),
                        message.clone(),
                    );
                    return Ok(refusal(code, &message).into());
                }
            }
            // The answer is in the store; the gate now decides the call with it, bound to exactly
            // these arguments, and an approval runs it once.
            let mut request = request;
            request.request_state = None;
            request.input_responses = None;
            let ran = self
                .dispatch(gate, caller.name(), target, request, context)
                .await?;
            return ran.into_response();
        }
        // What a call that waits for an approval is answered with needs after the call has been
        // decided: its arguments for the form or the operator, its request and context to try it
        // again as a task. Kept only where they may be used.
        let arguments = (in_band.is_some() || self.on_pending.is_some())
            .then(|| request.arguments.clone().unwrap_or_default());
        let retry = client
            .takes_tasks
            .then(|| (request.clone(), context.clone()));
        let instance = match target {
            Target::InPlace(_) => Some(self.in_place_label(&context)),
            Target::Registry(tool) => tool
                .receiver_type()
                .and_then(|of| self.instances.label_of(of))
                .map(str::to_owned),
        };
        let ran = self
            .dispatch(gate, caller.name(), target, request, context)
            .await?;
        if let Some(denied) = ran.denied()
            && let Some(token) = denied.approval_token()
        {
            let arguments = arguments.unwrap_or_default();
            // The latch never opens again: what tainted the session before the decision still does.
            let taint = gate.taint();
            // The call's effective risk is known now: the operator's policy may keep it for an
            // operator at that risk (`out_of_band_at`), where it did not at the declared one.
            let in_band = in_band.filter(|_| !gate.approved_out_of_band(tool.entry, denied.risk()));
            if let Some(in_band) = in_band {
                let principal = caller.principal();
                let about = About {
                    principal: principal.as_deref(),
                    taint: taint.as_ref(),
                };
                return Ok(in_band
                    .ask(&caller.session(), tool, &arguments, denied, token, &about)
                    .into());
            }
            if let Some(notify) = &self.on_pending {
                notify(&PendingApproval {
                    tool: tool.manifest().id,
                    risk: denied.risk(),
                    declared_risk: tool.manifest().risk_level,
                    mode: denied.mode(),
                    code: denied.code().as_str(),
                    arguments: shown_arguments(tool, &arguments, denied),
                    token: token.to_owned(),
                    request_id: denied.approval_request_id().map(str::to_owned),
                    principal: caller.principal(),
                    taint,
                    instance,
                    irreversible: tool.manifest().irreversible,
                    target: denied.target().map(str::to_owned),
                    evidence: denied.evidence().map(str::to_owned),
                    rollback: denied.rollback().cloned(),
                });
            }
            if let Some((request, context)) = retry
                && denied.code() == DenialCode::ApprovalPending
            {
                let token = token.to_owned();
                return Ok(
                    match self.wait_as_task(caller, target, request, context, &token) {
                        Ok(created) => created.into(),
                        Err(too_many) => {
                            refusal(McpCode::TooManyTasks, &too_many.to_string()).into()
                        }
                    },
                );
            }
        }
        ran.into_response()
    }
}

/// A retry refused for its request state: recorded, and answered with its code. A state that fails
/// its integrity check (forged, altered, sealed by another key or for another caller) is a JSON-RPC
/// error (`-32602`, invalid params), as the protocol requires, and so is one sent with a call that an
/// operator approves only, which no form of this server answers; an expired, replayed or mismatched
/// one is a refusal the model reads, which says to call again.
fn state_refused(
    gate: &Gate,
    tool: Tool,
    refused: StateRefused,
) -> Result<CallToolResponse, ErrorData> {
    let manifest = tool.manifest();
    let message = refused.message(manifest.id);
    gate.record_probe(
        std::borrow::Cow::Borrowed(manifest.id),
        Some(manifest.risk_level),
        refused.code().as_str(),
        message.clone(),
    );
    match refused {
        StateRefused::Invalid | StateRefused::OutOfBand => Err(ErrorData::invalid_params(
            format!("{}: {message}", refused.code()),
            Some(json!({ "code": refused.code().as_str(), "message": message })),
        )),
        _ => Ok(refusal(refused.code(), &message).into()),
    }
}
