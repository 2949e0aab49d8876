//! Long calls as tasks (the Tasks extension of protocol 2026-07-28, SEP-2663): a `tools/call` of a client that
//! declares `io.modelcontextprotocol/tasks` in its request's capabilities gets a task handle at once, and the call
//! goes on without the request. `tasks/get` polls it (its result once done), `tasks/cancel` kills its run.
//!
//! Invariants:
//! - A task belongs to the tenant whose call made it: another tenant's `tasks/get` or `tasks/cancel` gets the same
//!   -32602 as an unknown id (the ids are random UUIDs; nothing lists them).
//! - A task outlives its request and its client's connection; it ends with its run, and the server's shutdown.
//! - A tenant holds at most [`MAX_TASKS_PER_TENANT`] tasks. At the bound the oldest finished one is dropped; when
//!   all are still working the call is answered without a task (the client gets the result on the request, which
//!   the revision lets the server choose), so a tenant's tasks never hold more than that many runs.
//! - A finished task is kept [`TASK_TTL`] from its creation, then dropped (its `tasks/get` is -32602).
//! - A task's id starts with its conversation's id and `~` (`<conversationId>~<uuid>`): a load balancer that sends
//!   a conversation's calls to one node by its id sends `tasks/*` (whose `Mcp-Name` is the task id) to the node that
//!   holds the task by the part before `~` (docs/scaling.md). The UUID keeps it unguessable.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, DetailedTask, JsonObject, Task, TaskPayload, TaskStatus};
use tokio_util::sync::CancellationToken;

/// Tasks one tenant may hold, working and finished.
pub const MAX_TASKS_PER_TENANT: usize = 64;
/// How long a task is kept from its creation (`ttlMs`); a run's own deadline is at most an hour.
pub const TASK_TTL: Duration = Duration::from_secs(2 * 3600);
/// How often a client is asked to poll (`pollIntervalMs`).
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The server's tasks, every tenant's.
#[derive(Default)]
pub struct Tasks {
    entries: Mutex<HashMap<String, Entry>>,
}

struct Entry {
    owner: String,
    task: Task,
    payload: TaskPayload,
    created: Instant,
    /// Cancelled by `tasks/cancel` (the run is killed) or the server's shutdown.
    cancel: CancellationToken,
}

impl Tasks {
    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts `work` as a task of `owner` and returns its handle, or `None` when `owner` has
    /// [`MAX_TASKS_PER_TENANT`] tasks still working (the caller then runs the call itself). `work` gets the token
    /// that cancels it; it ends when `shutdown` does too.
    pub fn start<W, F>(
        self: &Arc<Self>,
        owner: &str,
        conversation: Option<&str>,
        shutdown: &CancellationToken,
        work: W,
    ) -> Option<Task>
    where
        W: FnOnce(CancellationToken) -> F,
        F: Future<Output = Result<CallToolResult, McpError>> + Send + 'static,
    {
        let uuid = uuid::Uuid::new_v4();
        let id = match conversation {
            Some(conversation) => format!("{conversation}~{uuid}"),
            None => uuid.to_string(),
        };
        let now = timestamp();
        let task = Task::new(id.clone(), TaskStatus::Working, now.clone(), now)
            .with_ttl_ms(u64::try_from(TASK_TTL.as_millis()).unwrap_or(u64::MAX))
            .with_poll_interval_ms(u64::try_from(POLL_INTERVAL.as_millis()).unwrap_or(u64::MAX))
            .with_status_message("running");
        let cancel = shutdown.child_token();
        {
            let mut entries = self.entries();
            sweep(&mut entries);
            if !make_room(&mut entries, owner) {
                return None;
            }
            let entry = Entry {
                owner: owner.to_owned(),
                task: task.clone(),
                payload: TaskPayload::Working,
                created: Instant::now(),
                cancel: cancel.clone(),
            };
            entries.insert(id.clone(), entry);
        }
        let future = work(cancel.clone());
        let tasks = self.clone();
        tokio::spawn(async move {
            let outcome = future.await;
            tasks.finish(&id, outcome, cancel.is_cancelled());
        });
        Some(task)
    }

    fn finish(&self, id: &str, outcome: Result<CallToolResult, McpError>, cancelled: bool) {
        let mut entries = self.entries();
        let Some(entry) = entries.get_mut(id) else { return };
        entry.payload = match outcome {
            _ if cancelled => TaskPayload::Cancelled,
            Ok(result) => TaskPayload::Completed { result: object(&result) },
            Err(error) => TaskPayload::Failed { error: object(&error) },
        };
        entry.task.status = entry.payload.status();
        entry.task.status_message = None;
        entry.task.last_updated_at = timestamp();
    }

    /// `tasks/get` by `owner`.
    pub fn get(&self, owner: &str, id: &str) -> Result<DetailedTask, McpError> {
        let mut entries = self.entries();
        sweep(&mut entries);
        let entry = entries.get(id).filter(|entry| entry.owner == owner).ok_or_else(|| not_found(id))?;
        Ok(DetailedTask::new(entry.task.clone(), entry.payload.clone()))
    }

    /// `tasks/cancel` by `owner`: kills the task's run (it then ends as `cancelled`); a finished task stays as it
    /// ended.
    pub fn cancel(&self, owner: &str, id: &str) -> Result<(), McpError> {
        let entries = self.entries();
        let entry = entries.get(id).filter(|entry| entry.owner == owner).ok_or_else(|| not_found(id))?;
        if !entry.payload.status().is_terminal() {
            entry.cancel.cancel();
        }
        Ok(())
    }
}

/// Drops the tasks past their TTL that have finished.
fn sweep(entries: &mut HashMap<String, Entry>) {
    entries.retain(|_, entry| entry.created.elapsed() < TASK_TTL || !entry.payload.status().is_terminal());
}

/// Makes room for one more task of `owner` by dropping its oldest finished one; false when all are working.
fn make_room(entries: &mut HashMap<String, Entry>, owner: &str) -> bool {
    let owned = entries.values().filter(|entry| entry.owner == owner).count();
    if owned < MAX_TASKS_PER_TENANT {
        return true;
    }
    let oldest_finished = entries
        .iter()
        .filter(|(_, entry)| entry.owner == owner && entry.payload.status().is_terminal())
        .min_by_key(|(_, entry)| entry.created)
        .map(|(id, _)| id.clone());
    oldest_finished.is_some_and(|id| entries.remove(&id).is_some())
}

fn not_found(id: &str) -> McpError {
    McpError::invalid_params(format!("task not found: {id}"), Some(serde_json::json!({ "taskId": id })))
}

fn object(value: &impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

fn timestamp() -> String {
    sandlot_core::rfc3339_millis(std::time::SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(tasks: &Arc<Tasks>, owner: &str, done: &CancellationToken) -> Option<Task> {
        let done = done.clone();
        tasks.start(owner, Some("conv"), &CancellationToken::new(), move |cancel| async move {
            tokio::select! {
                () = done.cancelled() => Ok(CallToolResult::success(Vec::new())),
                () = cancel.cancelled() => Ok(CallToolResult::error(Vec::new())),
            }
        })
    }

    async fn settled(tasks: &Tasks, owner: &str, id: &str) -> DetailedTask {
        for _ in 0..200 {
            let task = tasks.get(owner, id).expect("known");
            if task.status().is_terminal() {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("task {id} did not end");
    }

    #[tokio::test]
    async fn a_task_is_its_owners_only_and_ends_as_it_ended() {
        let tasks = Arc::new(Tasks::default());
        let done = CancellationToken::new();
        let task = start(&tasks, "alice", &done).expect("room");
        assert!(task.task_id.starts_with("conv~"), "{}", task.task_id);
        assert_eq!(tasks.get("alice", &task.task_id).expect("hers").status(), TaskStatus::Working);
        assert!(tasks.get("bob", &task.task_id).is_err(), "another tenant's task is unknown to him");
        assert!(tasks.cancel("bob", &task.task_id).is_err());
        done.cancel();
        assert_eq!(settled(&tasks, "alice", &task.task_id).await.status(), TaskStatus::Completed);

        let other = start(&tasks, "alice", &CancellationToken::new()).expect("room");
        tasks.cancel("alice", &other.task_id).expect("cancelled");
        assert_eq!(settled(&tasks, "alice", &other.task_id).await.status(), TaskStatus::Cancelled);
    }

    #[tokio::test]
    async fn a_tenant_at_its_bound_loses_its_oldest_finished_task_or_gets_none() {
        let tasks = Arc::new(Tasks::default());
        let finished = CancellationToken::new();
        finished.cancel();
        let first = start(&tasks, "alice", &finished).expect("room");
        settled(&tasks, "alice", &first.task_id).await;
        let working = CancellationToken::new();
        for _ in 1..MAX_TASKS_PER_TENANT {
            start(&tasks, "alice", &working).expect("room");
        }
        assert!(start(&tasks, "alice", &working).is_some(), "the finished one makes room");
        assert!(tasks.get("alice", &first.task_id).is_err(), "and is gone");
        assert!(start(&tasks, "alice", &working).is_none(), "all working: no task");
        assert!(start(&tasks, "bob", &working).is_some(), "another tenant has his own bound");
        working.cancel();
    }
}
