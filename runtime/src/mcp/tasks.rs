//! Out-of-band approvals as tasks (the MCP Tasks extension): a call that waits for an operator becomes
//! a task that completes with the call's result once the operator has decided.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use serde_json::Value;

use crate::audit::time::now_rfc3339;

/// The first wait before a task's call is tried again; it doubles up to [`TASK_POLL_MAX`].
pub(crate) const TASK_POLL_FIRST: Duration = Duration::from_millis(250);

/// The longest wait between two tries of a task's call.
pub(crate) const TASK_POLL_MAX: Duration = Duration::from_secs(5);

struct Entry {
    /// Whose task it is: only the same caller may read or cancel it.
    owner: Arc<str>,
    task: Task,
    payload: TaskPayload,
    runner: Option<tokio::task::AbortHandle>,
}

/// The tasks of one server (and its connections' copies): in this process's memory.
#[derive(Clone, Default)]
pub(crate) struct Tasks {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
}

impl Tasks {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new working task of `owner`, its id random.
    pub(crate) fn create(&self, owner: &Arc<str>, message: String) -> CreateTaskResult {
        let now = now_rfc3339();
        let id = random_id();
        let task = Task::new(id.clone(), TaskStatus::Working, now.clone(), now)
            .with_status_message(message)
            .with_poll_interval_ms(TASK_POLL_FIRST.as_millis() as u64);
        self.lock().insert(
            id,
            Entry {
                owner: Arc::clone(owner),
                task: task.clone(),
                payload: TaskPayload::Working,
                runner: None,
            },
        );
        CreateTaskResult::new(task)
    }

    /// Keeps the handle that stops the task's runner when the task is cancelled.
    pub(crate) fn attach(&self, id: &str, runner: tokio::task::AbortHandle) {
        match self.lock().get_mut(id) {
            Some(entry) if entry.payload == TaskPayload::Working => entry.runner = Some(runner),
            _ => runner.abort(),
        }
    }

    /// The task's call ended with `result`: the task is completed, unless it was cancelled.
    pub(crate) fn complete(&self, id: &str, result: CallToolResult) {
        let result = match serde_json::to_value(result) {
            Ok(Value::Object(object)) => object,
            _ => JsonObject::new(),
        };
        if let Some(entry) = self.lock().get_mut(id)
            && entry.payload == TaskPayload::Working
        {
            entry.payload = TaskPayload::Completed { result };
            entry.task.status = TaskStatus::Completed;
            entry.task.status_message = None;
            entry.task.last_updated_at = now_rfc3339();
            entry.runner = None;
        }
    }

    /// The task `id` as `owner` may see it; `None` when there is no such task of theirs.
    pub(crate) fn get(&self, owner: &str, id: &str) -> Option<GetTaskResult> {
        let entries = self.lock();
        let entry = entries.get(id).filter(|e| &*e.owner == owner)?;
        Some(GetTaskResult::new(DetailedTask::new(
            entry.task.clone(),
            entry.payload.clone(),
        )))
    }

    /// Cancels the task `id` of `owner`: its call is no longer tried (the pending approval request
    /// stays in the store until it expires). `false` when there is no such task of theirs.
    pub(crate) fn cancel(&self, owner: &str, id: &str) -> bool {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(id).filter(|e| &*e.owner == owner) else {
            return false;
        };
        if let Some(runner) = entry.runner.take() {
            runner.abort();
        }
        if !entry.payload.status().is_terminal() {
            entry.payload = TaskPayload::Cancelled;
            entry.task.status = TaskStatus::Cancelled;
            entry.task.last_updated_at = now_rfc3339();
        }
        true
    }
}

fn random_id() -> String {
    let mut bytes = [0_u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        panic!("the operating system's random number generator failed");
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_owner_reads_or_cancels_a_task() {
        let tasks = Tasks::default();
        let alice: Arc<str> = "principal\nalice".into();
        let created = tasks.create(&alice, "waits".to_owned());
        let id = created.task.task_id;
        assert!(tasks.get("principal\nbob", &id).is_none());
        assert!(!tasks.cancel("principal\nbob", &id));
        let task = tasks.get(&alice, &id).expect("alice's task");
        assert_eq!(task.task.status(), TaskStatus::Working);
        assert!(tasks.cancel(&alice, &id));
        tasks.complete(&id, CallToolResult::success(Vec::new()));
        let task = tasks.get(&alice, &id).expect("alice's task");
        assert_eq!(
            task.task.status(),
            TaskStatus::Cancelled,
            "a cancelled task stays cancelled"
        );
    }
}
