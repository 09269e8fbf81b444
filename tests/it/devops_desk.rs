//! The devops desk example (`examples/devops_desk/`) run as a program: a stateful toolset called by name
//! from the command line and served over MCP, an escalated shell command refused with the risks named,
//! and an operator who sees what they approve.

#![cfg(all(feature = "mcp", feature = "clap"))]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};

fn desk() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| crate::common::example("devops_desk", "mcp,clap"))
}

/// Starts the desk with `args`, its stdin and stdout piped, its stderr to `stderr`.
fn spawn(args: &[&str], stderr: Stdio) -> Child {
    Command::new(desk())
        .args(args)
        .env_remove("TOOLGATE_MODE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// Runs the desk with `args` and `input` on stdin: exit status, stdout, stderr.
fn run(args: &[&str], input: &str) -> (i32, String, String) {
    let mut child = spawn(args, Stdio::piped());
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    let output = child.wait_with_output().unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

const STOP: &str = r#"{"command": "sudo systemctl stop web", "token": "s3cr3t-token"}"#;

#[test]
fn a_stateful_tool_runs_by_name_on_the_desk() {
    let (code, stdout, stderr) = run(
        &["call", "logs.tail", r#"{"service": "web", "lines": 1}"#],
        "",
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), r#"["web 1.4.2: healthy"]"#);
    let (code, _, stderr) = run(&["call", "service.restart", r#"{"service": "web"}"#], "");
    assert_eq!(code, 3, "SHADOW refuses a LOW_WRITE tool");
    assert!(stderr.starts_with("refused MODE_NOT_ALLOWED: "), "{stderr}");
}

#[test]
fn an_escalated_command_is_refused_with_both_risks_and_the_modes_that_would_run_it() {
    let (code, stdout, stderr) = run(&["--mode", "partial-auto", "call", "shell.run", STOP], "");
    assert_eq!((code, stdout.as_str()), (3, ""), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "refused ABOVE_CEILING: tool `shell.run` (declared LOW_WRITE, raised to HIGH_WRITE by its \
         arguments) is above the ceiling of mode PARTIAL_AUTO (LOW_WRITE); at HIGH_WRITE it runs in \
         FULL_AUTO, with an approval"
    );
    // The same command without privileges stays LOW_WRITE and runs.
    let (code, _, stderr) = run(
        &[
            "--mode",
            "partial-auto",
            "call",
            "shell.run",
            r#"{"command": "uptime"}"#,
        ],
        "",
    );
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn the_operator_sees_the_command_but_not_the_token_and_decides() {
    for (answer, code) in [("y\n", 0), ("n\n", 3), ("", 3)] {
        let (got, stdout, stderr) =
            run(&["--mode", "full-auto", "call", "shell.run", STOP], answer);
        assert_eq!(got, code, "{answer:?}: {stdout}{stderr}");
        // The desk is called by name on its registered instance: the operator reads which one (its
        // type and the registration's id), where its value cannot be written.
        let shown = stderr
            .split_once(
                r#"with arguments {"command":"sudo systemctl stop web","self":"Desk (instance "#,
            )
            .map(|(_, rest)| rest);
        assert!(
            shown.is_some_and(|rest| rest.len() > 10
                && rest[..8].bytes().all(|b| b.is_ascii_hexdigit())
                && rest[8..].starts_with(r#")","token":"[REDACTED]"}? [y/N]"#)),
            "{stderr}"
        );
        assert!(!stderr.contains("s3cr3t") && !stdout.contains("s3cr3t"));
        if code == 0 {
            assert!(stdout.contains("sudo systemctl stop web"), "{stdout}");
        } else {
            assert!(stderr.contains("refused APPROVAL_REJECTED: "), "{stderr}");
        }
    }
}

/// Sends JSON-RPC messages to `serve` and collects the responses to the numbered ones.
fn serve(mode: &str, requests: &[Value]) -> Vec<Value> {
    let mut child = spawn(&["--mode", mode, "serve"], Stdio::null());
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut responses = Vec::new();
    for request in requests {
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
        if request.get("id").is_some() {
            let line = lines.next().expect("a response").unwrap();
            responses.push(serde_json::from_str(&line).unwrap());
        }
    }
    drop(stdin);
    child.wait().unwrap();
    responses
}

#[test]
fn the_desk_is_served_over_mcp_on_its_instance() {
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}
        }
    });
    let responses = serve(
        "partial-auto",
        &[
            initialize,
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                   "params": {"name": "service.restart", "arguments": {"service": "worker"}}}),
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                   "params": {"name": "shell.run", "arguments": {"command": "sudo reboot"}}}),
        ],
    );
    assert_eq!(responses[0]["result"]["serverInfo"]["name"], "devops-desk");
    let mut listed: Vec<&str> = responses[1]["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    listed.sort_unstable();
    // PARTIAL_AUTO hides what it refuses: the HIGH_WRITE volume.delete.
    assert_eq!(
        listed,
        ["deploy.plan", "logs.tail", "service.restart", "shell.run"]
    );
    assert_eq!(
        responses[2]["result"]["content"][0]["text"],
        "worker 2.0.1 restarted"
    );
    let refused = &responses[3]["result"];
    assert_eq!(refused["isError"], true);
    assert_eq!(refused["structuredContent"]["code"], "ABOVE_CEILING");
}
