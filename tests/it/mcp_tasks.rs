//! Out-of-band approvals as tasks (the MCP Tasks extension), with rmcp's own client: the official
//! Python SDK has no client side of the Tasks extension. The `mcp_server` example refuses a call that
//! waits for an operator with a task; the operator approves on the example's operator channel; the
//! task completes with the call's result, the body having run once. A task can be cancelled.

#![cfg(feature = "mcp")]

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, TaskPayload, TaskStatus,
};
use rmcp::service::RunningService;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

use super::mcp_e2e::example_binary;
use crate::common::Scratch;

const WAIT: Duration = Duration::from_secs(30);

/// A client that declares the Tasks extension.
struct TaskClient;

impl ClientHandler for TaskClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_tasks().build(),
            Implementation::new("toolgate-tasks-test", "0"),
        )
    }
}

async fn connect(
    binary: &Path,
    args: &[&str],
    stderr: &Path,
) -> RunningService<RoleClient, TaskClient> {
    let log = fs::File::create(stderr).expect("the server's stderr");
    let transport =
        TokioChildProcess::builder(tokio::process::Command::new(binary).configure(|cmd| {
            cmd.args(args).env_remove("TOOLGATE_MODE");
        }))
        .stderr(log)
        .spawn()
        .expect("the server starts")
        .0;
    TaskClient
        .serve(transport)
        .await
        .expect("the client connects")
}

fn refund(id: u64, cents: u64) -> CallToolRequestParams {
    let Value::Object(arguments) = json!({"id": id, "cents": cents, "card": "4242"}) else {
        unreachable!("an object")
    };
    CallToolRequestParams::new("tickets.refund").with_arguments(arguments)
}

/// Polls `found` every 50 ms until it gives something; panics after `WAIT`.
async fn wait_for<T>(what: &str, mut found: impl AsyncFnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = found().await {
            return value;
        }
        assert!(started.elapsed() < WAIT, "waited {WAIT:?} for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The example's operator channel: one command, one line back (`list` until `.`).
fn operate(address: &str, command: &str) -> Vec<String> {
    let stream = TcpStream::connect(address).expect("the operator channel");
    stream.set_read_timeout(Some(WAIT)).expect("a read timeout");
    let mut writer = stream.try_clone().expect("a second handle");
    writeln!(writer, "{command}").expect("send the command");
    let mut lines = Vec::new();
    for line in BufReader::new(stream).lines() {
        let line = line.expect("an answer");
        if command != "list" || line == "." {
            if command != "list" {
                lines.push(line);
            }
            break;
        }
        lines.push(line);
    }
    lines
}

fn ok_runs(audit: &Path, tool: &str) -> usize {
    fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|r| r["tool"] == tool && r["stage"] == "exit" && r["outcome"] == "ok")
        .count()
}

#[test]
fn a_call_waiting_for_an_operator_becomes_a_task_that_completes_once_approved() {
    let binary = example_binary("mcp_server", "mcp,clap");
    let dir = Scratch::new("tasks");
    let audit = dir.path("audit.jsonl");
    let stderr = dir.path("server.err");
    let runtime = crate::fixtures::support::runtime();
    runtime.block_on(async {
        let audit_arg = audit.to_str().expect("a UTF-8 path");
        let args = [
            "--mode",
            "FULL_AUTO",
            "--approvals",
            "out-of-band",
            "--operator",
            "127.0.0.1:0",
            "--audit-log",
            audit_arg,
        ];
        let client = connect(&binary, &args, &stderr).await;

        let CallToolResponse::Task(created) = client
            .call_tool_once(refund(101, 300))
            .await
            .expect("a call")
        else {
            panic!("a call that waits for an operator is a task for a client of tasks");
        };
        assert_eq!(created.task.status, TaskStatus::Working);
        let id = created.task.task_id.clone();
        let polled = client
            .get_task(GetTaskParams::new(&id))
            .await
            .expect("tasks/get");
        assert_eq!(
            polled.task.status(),
            TaskStatus::Working,
            "no operator has decided yet"
        );
        assert_eq!(ok_runs(&audit, "tickets.refund"), 0);

        let address = wait_for("the operator channel", async || {
            fs::read_to_string(&stderr).ok().and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("ticket-desk: operator channel on "))
                    .map(str::to_owned)
            })
        })
        .await;
        let pending = operate(&address, "list");
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert!(pending[0].contains("tickets.refund"), "{pending:?}");
        let request = pending[0].split(' ').next().expect("an id").to_owned();
        let approved = operate(&address, &format!("approve {request}"));
        assert!(approved[0].starts_with("ok"), "{approved:?}");

        let done = wait_for("the task to complete", async || {
            let task = client
                .get_task(GetTaskParams::new(&id))
                .await
                .expect("tasks/get");
            task.task.status().is_terminal().then_some(task)
        })
        .await;
        let TaskPayload::Completed { result } = &done.task.payload else {
            panic!("the task completed: {done:?}");
        };
        assert_eq!(result["isError"], false, "{result:?}");
        assert_eq!(
            result["content"][0]["text"],
            "refund 1 of 300 cents on ticket 101"
        );
        assert_eq!(ok_runs(&audit, "tickets.refund"), 1, "the body ran once");

        // A task can be cancelled: its call is no longer tried.
        let CallToolResponse::Task(second) =
            client.call_tool_once(refund(102, 5)).await.expect("a call")
        else {
            panic!("a task");
        };
        let second_id = second.task.task_id.clone();
        client
            .cancel_task(CancelTaskParams::new(&second_id))
            .await
            .expect("tasks/cancel");
        let cancelled = client
            .get_task(GetTaskParams::new(&second_id))
            .await
            .expect("tasks/get");
        assert_eq!(cancelled.task.status(), TaskStatus::Cancelled);

        let unknown = client.get_task(GetTaskParams::new("no-such-task")).await;
        assert!(unknown.is_err(), "an unknown task is an error: {unknown:?}");
        let _ = client.cancel().await;
    });
}

static EXPIRING_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static BOUNDED_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Wire money; its approval is never answered.
#[toolgate::tool(risk = "HIGH_WRITE", domain = "taskexpiry", callable)]
fn wire(cents: u64) -> Result<u64, toolgate::Denied> {
    EXPIRING_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok(cents)
}

/// Wire money, called many times over.
#[toolgate::tool(risk = "HIGH_WRITE", domain = "taskbound", callable)]
fn wire_again(cents: u64) -> Result<u64, toolgate::Denied> {
    BOUNDED_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok(cents)
}

/// A client of tasks connected to `server` over an in-process pipe.
async fn connect_in_process(
    server: toolgate::mcp::ToolgateServer,
) -> RunningService<RoleClient, TaskClient> {
    let (client, served) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(tokio::io::split(served)).await {
            let _ = running.waiting().await;
        }
    });
    TaskClient
        .serve(tokio::io::split(client))
        .await
        .expect("the client connects")
}

fn wire_call(tool: &str, cents: u64) -> CallToolRequestParams {
    let Value::Object(arguments) = json!({"cents": cents}) else {
        unreachable!("an object")
    };
    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)
}

/// A task waits for the one approval request its call filed and the operator was told of: when that
/// request expires unanswered, the task fails with `APPROVAL_EXPIRED` instead of waiting on a new
/// request that no operator hears of; the body never runs.
#[test]
fn a_task_whose_approval_request_expires_fails() {
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Mutex};

    let runtime = crate::fixtures::support::runtime();
    runtime.block_on(async {
        let gate = toolgate::Gate::builder()
            .mode(toolgate::Mode::FullAuto)
            .approval_ttl(Duration::from_millis(700))
            .build()
            .expect("a gate");
        let told = Arc::new(Mutex::new(Vec::new()));
        let heard = Arc::clone(&told);
        let server = toolgate::mcp::ToolgateServer::new(gate.clone())
            .only(|m| m.domain == Some("taskexpiry"))
            .on_pending(move |pending| heard.lock().unwrap().push(pending.token.clone()));
        let client = connect_in_process(server).await;
        let CallToolResponse::Task(created) = client
            .call_tool_once(wire_call("taskexpiry.wire", 500))
            .await
            .expect("a call")
        else {
            panic!("a call that waits for an operator is a task");
        };
        let id = created.task.task_id.clone();
        let started = Instant::now();
        let ended = loop {
            let task = client
                .get_task(GetTaskParams::new(&id))
                .await
                .expect("tasks/get");
            if task.task.status().is_terminal() {
                break task;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "the task still waits {:?} after its request expired: {task:?}",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let TaskPayload::Failed { error } = &ended.task.payload else {
            panic!("the task failed: {ended:?}");
        };
        assert_eq!(error["data"]["code"], "APPROVAL_EXPIRED", "{error:?}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("APPROVAL_EXPIRED: ")),
            "{error:?}"
        );
        let told = told.lock().unwrap().clone();
        assert_eq!(
            told.len(),
            1,
            "the operator was told of one request: {told:?}"
        );
        assert!(gate.approve(&told[0]).is_err(), "its request expired");
        assert_eq!(EXPIRING_RUNS.load(Ordering::SeqCst), 0, "the body ran");
        let _ = client.cancel().await;
    });
}

/// Calls that wait for an operator open at most `DEFAULT_MAX_TASKS` tasks per caller (here a
/// connection) at once; past it a call is answered `TOO_MANY_TASKS`, and a task cancelled makes room.
#[test]
fn the_tasks_of_one_caller_are_bounded() {
    use std::sync::atomic::Ordering;

    let runtime = crate::fixtures::support::runtime();
    runtime.block_on(async {
        let gate = toolgate::Gate::builder()
            .mode(toolgate::Mode::FullAuto)
            .two_step_approvals()
            .build()
            .expect("a gate");
        let server =
            toolgate::mcp::ToolgateServer::new(gate).only(|m| m.domain == Some("taskbound"));
        let client = connect_in_process(server).await;
        let mut tasks = Vec::new();
        let mut refused = Vec::new();
        for _ in 0..300 {
            match client
                .call_tool_once(wire_call("taskbound.wire_again", 7))
                .await
                .expect("a call")
            {
                CallToolResponse::Task(created) => tasks.push(created.task.task_id),
                CallToolResponse::Complete(result) => refused.push(result),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(toolgate::mcp::DEFAULT_MAX_TASKS, 16);
        assert_eq!(tasks.len(), 16, "16 tasks at most: {} opened", tasks.len());
        assert_eq!(refused.len(), 300 - 16);
        for result in &refused {
            assert_eq!(result.is_error, Some(true), "{result:?}");
            let code = result.structured_content.as_ref().map(|c| &c["code"]);
            assert_eq!(code, Some(&json!("TOO_MANY_TASKS")), "{result:?}");
        }
        client
            .cancel_task(CancelTaskParams::new(&tasks[0]))
            .await
            .expect("tasks/cancel");
        let again = client
            .call_tool_once(wire_call("taskbound.wire_again", 7))
            .await
            .expect("a call");
        assert!(
            matches!(again, CallToolResponse::Task(_)),
            "a cancelled task makes room: {again:?}"
        );
        assert_eq!(BOUNDED_RUNS.load(Ordering::SeqCst), 0);
        let _ = client.cancel().await;
    });
}

static LATE_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Wire money; its operator decides after the task's deadline.
#[toolgate::tool(risk = "HIGH_WRITE", domain = "taskdeadline", callable)]
fn wire_late(cents: u64) -> Result<u64, toolgate::Denied> {
    LATE_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok(cents)
}

/// A task waits no longer than its deadline, even while its request is still pending: it fails with
/// `APPROVAL_EXPIRED`, the request stays for the operator, and the agent's next identical call runs
/// once it is approved.
#[test]
fn a_task_waits_no_longer_than_its_deadline() {
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Mutex};

    let runtime = crate::fixtures::support::runtime();
    runtime.block_on(async {
        let gate = toolgate::Gate::builder()
            .mode(toolgate::Mode::FullAuto)
            .two_step_approvals()
            .build()
            .expect("a gate");
        let told = Arc::new(Mutex::new(Vec::new()));
        let heard = Arc::clone(&told);
        let server = toolgate::mcp::ToolgateServer::new(gate.clone())
            .only(|m| m.domain == Some("taskdeadline"))
            .task_deadline(Duration::from_millis(600))
            .on_pending(move |pending| heard.lock().unwrap().push(pending.token.clone()));
        let client = connect_in_process(server).await;
        let CallToolResponse::Task(created) = client
            .call_tool_once(wire_call("taskdeadline.wire_late", 9))
            .await
            .expect("a call")
        else {
            panic!("a call that waits for an operator is a task");
        };
        let id = created.task.task_id.clone();
        assert!(created.task.ttl_ms.is_some(), "{created:?}");
        let started = Instant::now();
        let ended = loop {
            let task = client
                .get_task(GetTaskParams::new(&id))
                .await
                .expect("tasks/get");
            if task.task.status().is_terminal() {
                break task;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "{task:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(started.elapsed() >= Duration::from_millis(500), "{ended:?}");
        let TaskPayload::Failed { error } = &ended.task.payload else {
            panic!("the task failed: {ended:?}");
        };
        assert_eq!(error["data"]["code"], "APPROVAL_EXPIRED", "{error:?}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("deadline")),
            "{error:?}"
        );
        assert_eq!(LATE_RUNS.load(Ordering::SeqCst), 0);

        let token = told.lock().unwrap().first().cloned().expect("on_pending");
        gate.approve(&token).expect("the request is still pending");
        let CallToolResponse::Complete(result) = client
            .call_tool_once(wire_call("taskdeadline.wire_late", 9))
            .await
            .expect("a call")
        else {
            panic!("an approved call runs at once");
        };
        assert_eq!(result.is_error, Some(false), "{result:?}");
        assert_eq!(LATE_RUNS.load(Ordering::SeqCst), 1);
        let _ = client.cancel().await;
    });
}
