//! Out-of-band approvals as tasks (the MCP Tasks extension): a call that waits for an operator becomes
//! a task that completes with the call's result once the operator has decided.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// How many tasks one caller (an HTTP principal, or a connection) may have waiting at once by
/// default ([`ToolgateServer::max_tasks`](super::ToolgateServer::max_tasks)).
pub const DEFAULT_MAX_TASKS: usize = 16;

/// How long a task waits for an operator at most by default
/// ([`ToolgateServer::task_deadline`](super::ToolgateServer::task_deadline)): an hour.
pub const DEFAULT_TASK_DEADLINE: Duration = Duration::from_secs(60 * 60);

/// How long an ended task can still be read (`tasks/get`) before it is forgotten.
const ENDED_KEPT: Duration = Duration::from_secs(10 * 60);

/// How many ended tasks of one caller are kept at most (the latest to end), however quickly they end.
const ENDED_KEPT_PER_CALLER: usize = 64;

struct Entry {
    /// Whose task it is: only the same caller may read or cancel it.
    owner: Arc<str>,
    task: Task,
    payload: TaskPayload,
    runner: Option<tokio::task::AbortHandle>,
    /// When it ended, if it has.
    ended: Option<Instant>,
}

impl Entry {
    fn end(&mut self, payload: TaskPayload) {
        self.task.status = payload.status();
        self.payload = payload;
        self.task.last_updated_at = now_rfc3339();
        self.runner = None;
        self.ended = Some(Instant::now());
    }
}

/// A caller has as many tasks waiting as it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooManyTasks {
    pub(crate) limit: usize,
}

impl fmt::Display for TooManyTasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "this caller has {} tasks waiting for an operator already, as many as it may; wait for one \
             to end (tasks/get), or cancel one (tasks/cancel), then call again",
            self.limit
        )
    }
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

    /// A new working task of `owner`, its id random, unless `owner` has `limit` tasks working already.
    /// `lives` is how long the task may work, for its `ttlMs`.
    pub(crate) fn create(
        &self,
        owner: &Arc<str>,
        message: String,
        limit: usize,
        lives: Duration,
    ) -> Result<CreateTaskResult, TooManyTasks> {
        let mut entries = self.lock();
        let now = Instant::now();
        entries.retain(|_, e| e.ended.is_none_or(|ended| now < ended + ENDED_KEPT));
        let mut ended: Vec<(Instant, String)> = entries
            .iter()
            .filter(|(_, e)| e.owner == *owner)
            .filter_map(|(id, e)| Some((e.ended?, id.clone())))
            .collect();
        if ended.len() >= ENDED_KEPT_PER_CALLER {
            ended.sort_unstable();
            for (_, id) in &ended[..=ended.len() - ENDED_KEPT_PER_CALLER] {
                entries.remove(id);
            }
        }
        let working = entries
            .values()
            .filter(|e| e.ended.is_none() && e.owner == *owner)
            .count();
        if working >= limit {
            return Err(TooManyTasks { limit });
        }
        let at = now_rfc3339();
        let id = random_id();
        let mut task = Task::new(id.clone(), TaskStatus::Working, at.clone(), at)
            .with_status_message(message)
            .with_poll_interval_ms(TASK_POLL_FIRST.as_millis() as u64);
        task.ttl_ms = Some(u64::try_from((lives + ENDED_KEPT).as_millis()).unwrap_or(u64::MAX));
        entries.insert(
            id,
            Entry {
                owner: Arc::clone(owner),
                task: task.clone(),
                payload: TaskPayload::Working,
                runner: None,
                ended: None,
            },
        );
        Ok(CreateTaskResult::new(task))
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
        self.end(id, TaskPayload::Completed { result });
    }

    /// The task ended without a result of its call: it failed with `error` (a JSON-RPC error object),
    /// unless it was cancelled.
    pub(crate) fn fail(&self, id: &str, error: JsonObject) {
        self.end(id, TaskPayload::Failed { error });
    }

    fn end(&self, id: &str, payload: TaskPayload) {
        if let Some(entry) = self.lock().get_mut(id)
            && entry.payload == TaskPayload::Working
        {
            entry.task.status_message = None;
            entry.end(payload);
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
            entry.end(TaskPayload::Cancelled);
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
        let created = tasks
            .create(&alice, "waits".to_owned(), 1, DEFAULT_TASK_DEADLINE)
            .expect("a first task");
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

    #[test]
    fn a_caller_has_at_most_its_limit_of_tasks_working() {
        let tasks = Tasks::default();
        let (alice, bob): (Arc<str>, Arc<str>) =
            ("principal\nalice".into(), "principal\nbob".into());
        let create =
            |owner: &Arc<str>| tasks.create(owner, String::new(), 2, Duration::from_secs(1));
        let first = create(&alice).expect("one").task.task_id;
        let second = create(&alice).expect("two").task.task_id;
        assert_eq!(create(&alice).unwrap_err(), TooManyTasks { limit: 2 });
        assert!(create(&bob).is_ok(), "bob's tasks are his own");
        tasks.complete(&first, CallToolResult::success(Vec::new()));
        assert!(create(&alice).is_ok(), "an ended task makes room");
        tasks.fail(&second, JsonObject::new());
        let failed = tasks.get(&alice, &second).expect("alice's task");
        assert_eq!(failed.task.status(), TaskStatus::Failed);
        assert!(failed.task.task.ttl_ms.is_some());
    }

    #[test]
    fn a_caller_keeps_only_its_latest_ended_tasks() {
        let tasks = Tasks::default();
        let alice: Arc<str> = "principal\nalice".into();
        let ids: Vec<String> = (0..ENDED_KEPT_PER_CALLER + 10)
            .map(|_| {
                let id = tasks
                    .create(&alice, String::new(), 1, Duration::from_secs(1))
                    .expect("room")
                    .task
                    .task_id;
                assert!(tasks.cancel(&alice, &id));
                id
            })
            .collect();
        let kept = ids
            .iter()
            .filter(|id| tasks.get(&alice, id).is_some())
            .count();
        assert_eq!(kept, ENDED_KEPT_PER_CALLER);
        assert!(
            tasks.get(&alice, ids.last().unwrap()).is_some(),
            "the latest is kept"
        );
        assert!(
            tasks.get(&alice, &ids[0]).is_none(),
            "the oldest is forgotten"
        );
    }
}
