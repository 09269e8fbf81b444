//! A call that waits for an operator, made a task: tried again until the operator has decided.

use rmcp::RoleServer;
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use rmcp::service::RequestContext;

use super::builder::ToolgateServer;
use super::caller::Caller;
use super::dispatch::Target;
use super::results::{error_object, refusal, task_error};
use crate::mcp::codes::McpCode;
use crate::mcp::tasks::{TASK_POLL_FIRST, TASK_POLL_MAX, TooManyTasks};
use toolgate_policy::DenialCode;

impl ToolgateServer {
    /// Makes a call that waits for an operator a task: the call is tried again, every 250 ms at first
    /// and at most every 5 s (each try a `refused` record while it waits), until the operator has
    /// decided on the request `token` names; the task then completes with the call's result. It fails
    /// with `APPROVAL_EXPIRED` when that request expired unanswered (a try is then asked for a new
    /// one, which no operator was told of), or when the task's deadline has passed.
    pub(super) fn wait_as_task(
        &self,
        caller: &Caller,
        target: Target,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        token: &str,
    ) -> Result<rmcp::model::CreateTaskResult, TooManyTasks> {
        let (gate, owner) = (&caller.gate, &caller.session());
        let caller = caller.name();
        let id = target.tool().manifest().id;
        let created = self.tasks.create(
            owner,
            format!("`{id}` waits for an operator's approval"),
            self.max_tasks,
            self.task_deadline,
        )?;
        let task_id = created.task.task_id.clone();
        let (server, gate, tasks) = (self.clone(), gate.clone(), self.tasks.clone());
        let (token, deadline) = (token.to_owned(), self.task_deadline);
        let runner = tokio::spawn(async move {
            let ends = tokio::time::Instant::now() + deadline;
            let mut wait = TASK_POLL_FIRST;
            loop {
                let now = tokio::time::Instant::now();
                if now >= ends {
                    let message = format!(
                        "no operator decided on this call of `{id}` within the task's deadline of \
                         {deadline:?}; its approval request stays pending until it expires: call \
                         again to wait for it again"
                    );
                    tasks.fail(
                        &task_id,
                        task_error(McpCode::Denied(DenialCode::ApprovalExpired), &message),
                    );
                    return;
                }
                // The last try is at the deadline.
                tokio::time::sleep(wait.min(ends - now)).await;
                wait = (wait * 2).min(TASK_POLL_MAX);
                // Each try is a request of its own to the handler: the original's cancellation ended
                // with its answer, the task's own is `tasks/cancel`.
                let mut retry = context.clone();
                retry.ct = Default::default();
                let ran = match server
                    .dispatch(&gate, caller.clone(), target, request.clone(), retry)
                    .await
                {
                    Ok(ran) => ran,
                    Err(error) => {
                        tasks.complete(&task_id, refusal(McpCode::UnknownTool, &error.message));
                        return;
                    }
                };
                let pending = ran
                    .denied()
                    .filter(|d| d.code() == DenialCode::ApprovalPending);
                match pending.and_then(|d| d.approval_token()) {
                    // Still the request the operator was told of.
                    Some(now_pending) if now_pending == token => {}
                    // That request expired unanswered, and this try was asked for a new one.
                    Some(_) => {
                        let message = format!(
                            "the approval request of this call of `{id}` expired before an \
                             operator decided on it; call again to ask again"
                        );
                        tasks.fail(
                            &task_id,
                            task_error(McpCode::Denied(DenialCode::ApprovalExpired), &message),
                        );
                        return;
                    }
                    None => {
                        match ran.into_response() {
                            Ok(CallToolResponse::Complete(result)) => {
                                tasks.complete(&task_id, result);
                            }
                            Ok(_) => tasks.fail(
                                &task_id,
                                task_error(
                                    McpCode::UnsupportedResponse,
                                    "the tool answered with a response a task cannot carry",
                                ),
                            ),
                            Err(error) => tasks.fail(&task_id, error_object(error)),
                        }
                        return;
                    }
                }
            }
        });
        self.tasks
            .attach(&created.task.task_id, runner.abort_handle());
        Ok(created)
    }
}
