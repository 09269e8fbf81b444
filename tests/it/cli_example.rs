//! The `cli` example run as a program: its subcommands are tools, decided by the gate in the mode that
//! `--mode` or `TOOLGATE_MODE` gives, with the exit status telling a refusal from a failure.
//!
//! `cargo test --features clap` builds the example before running this; run alone, the test builds it.

#![cfg(feature = "clap")]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

const TOOLS: [&str; 5] = [
    "deploy.delete",
    "deploy.plan",
    "deploy.restart",
    "deploy.rollback",
    "deploy.status",
];

/// The example's binary, built if it is missing or older than its source.
fn example() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| crate::common::example("cli", "clap"))
}

/// A run of the example: its exit status, stdout and stderr.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs the example with `args`, `TOOLGATE_MODE` set to `mode_env` (or unset), and `input` on stdin
/// (closed at once when `None`).
fn run_with(args: &[&str], mode_env: Option<&str>, input: Option<&str>) -> Run {
    let mut command = Command::new(example());
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match mode_env {
        Some(mode) => command.env("TOOLGATE_MODE", mode),
        None => command.env_remove("TOOLGATE_MODE"),
    };
    let mut child = command.spawn().expect("the example starts");
    let mut stdin = child.stdin.take().expect("a piped stdin");
    if let Some(input) = input {
        // The program may exit without reading: a closed pipe is not this test's failure.
        let _ = stdin.write_all(input.as_bytes());
    }
    drop(stdin);
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("the example ends");
    Run {
        code: status
            .code()
            .expect("the example exits, not killed by a signal"),
        stdout: String::from_utf8(stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(stderr).expect("UTF-8 stderr"),
    }
}

fn run(args: &[&str]) -> Run {
    run_with(args, None, None)
}

#[track_caller]
fn assert_refused(run: &Run, code: &str) {
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        run.stderr.starts_with(&format!("refused {code}: tool `"))
            || run.stderr.contains(&format!("\nrefused {code}: tool `")),
        "{run:?}"
    );
    assert_eq!(run.stdout, "", "{run:?}");
}

// ---------------------------------------------------------------------------------------------------------
// --list-tools
// ---------------------------------------------------------------------------------------------------------

#[test]
fn list_tools_prints_every_tool() {
    let md = run(&["--list-tools"]);
    assert_eq!(md.code, 0, "{md:?}");
    assert!(md.stdout.starts_with("| id | risk |"), "{md:?}");
    for id in TOOLS {
        assert!(md.stdout.contains(&format!("| `{id}` |")), "{id}: {md:?}");
    }
    assert_eq!(md.stdout.lines().count(), 2 + TOOLS.len(), "{md:?}");

    let json = run(&["--list-tools", "json"]);
    assert_eq!(json.code, 0, "{json:?}");
    let manifests: Value = serde_json::from_str(&json.stdout).expect("JSON");
    let listed: Vec<(&str, &str)> = manifests
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap(), m["risk_level"].as_str().unwrap()))
        .collect();
    assert_eq!(
        listed,
        [
            ("deploy.delete", "HIGH_WRITE"),
            ("deploy.plan", "PROPOSE_ONLY"),
            ("deploy.restart", "LOW_WRITE"),
            ("deploy.rollback", "HIGH_WRITE"),
            ("deploy.status", "READ_ONLY"),
        ]
    );

    let csv = run(&["--list-tools=csv"]);
    assert_eq!(csv.code, 0, "{csv:?}");
    assert_eq!(csv.stdout.lines().count(), 1 + TOOLS.len(), "{csv:?}");
    for id in TOOLS {
        assert!(csv.stdout.contains(id), "{id}: {csv:?}");
    }
}

#[test]
fn list_tools_runs_nothing_whatever_the_mode() {
    let listed = run_with(&["--list-tools", "json"], Some("FULL_AUTO"), None);
    assert_eq!(listed.code, 0, "{listed:?}");
    assert_eq!(listed.stderr, "", "{listed:?}");
}

// ---------------------------------------------------------------------------------------------------------
// Modes
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_read_only_command_runs_in_shadow_by_default() {
    let status = run(&["status", "web"]);
    assert_eq!(status.code, 0, "{status:?}");
    assert_eq!(status.stderr, "", "{status:?}");
    let value: Value = serde_json::from_str(&status.stdout).expect("JSON");
    assert_eq!(
        value,
        serde_json::json!({"service": "web", "version": "1.5.0", "replicas": 3, "healthy": true})
    );

    let plan = run(&["plan", "api", "--to", "2.2.0"]);
    assert_eq!(plan.code, 0, "{plan:?}");
    let steps: Vec<String> = serde_json::from_str(&plan.stdout).expect("JSON");
    assert_eq!(steps.first().map(String::as_str), Some("pull api:2.2.0"));
    assert_eq!(steps.len(), 4, "{plan:?}");
}

#[test]
fn a_write_in_shadow_is_refused() {
    for args in [
        &["restart", "web"][..],
        &["--mode", "SHADOW", "restart", "web"],
        &["--mode", "advisory", "restart", "web"],
        &["rollback", "web", "--to", "1.4.0"],
        &["--yes", "delete", "web"],
    ] {
        let refused = run(args);
        assert_refused(&refused, "MODE_NOT_ALLOWED");
        assert!(
            refused.stderr.contains("is not allowed in mode"),
            "{refused:?}"
        );
    }
    let refused = run(&["restart", "web"]);
    assert_eq!(
        refused.stderr,
        "refused MODE_NOT_ALLOWED: tool `deploy.restart` (LOW_WRITE) is not allowed in mode SHADOW; \
         it is allowed in PARTIAL_AUTO, FULL_AUTO\n"
    );
}

#[test]
fn partial_auto_allows_a_low_write() {
    for args in [
        &["--mode", "partial_auto", "restart", "web"][..],
        &["--mode", "PARTIAL_AUTO", "restart", "web"],
        &["--mode=partial-auto", "restart", "web"],
        &["restart", "web", "--mode", "partial_auto"],
    ] {
        let restarted = run(args);
        assert_eq!(restarted.code, 0, "{args:?}: {restarted:?}");
        assert_eq!(restarted.stdout, "restarted 3 replica(s) of web\n");
        assert_eq!(restarted.stderr, "", "{restarted:?}");
    }
    // Not a HIGH_WRITE.
    let refused = run(&["--mode", "partial_auto", "--yes", "delete", "web"]);
    assert_refused(&refused, "MODE_NOT_ALLOWED");
}

#[test]
fn the_mode_is_read_from_toolgate_mode() {
    for value in [
        "full_auto",
        "FULL_AUTO",
        "full-auto",
        "Full_Auto",
        "partial_auto",
    ] {
        let restarted = run_with(&["restart", "api"], Some(value), None);
        assert_eq!(restarted.code, 0, "{value}: {restarted:?}");
        assert_eq!(restarted.stdout, "restarted 2 replica(s) of api\n");
    }
    // `--mode` wins over the environment, in both directions.
    let refused = run_with(
        &["--mode", "shadow", "restart", "api"],
        Some("full_auto"),
        None,
    );
    assert_refused(&refused, "MODE_NOT_ALLOWED");
    let restarted = run_with(
        &["--mode", "full_auto", "restart", "api"],
        Some("shadow"),
        None,
    );
    assert_eq!(restarted.code, 0, "{restarted:?}");
    // Unset, it is SHADOW.
    assert_refused(
        &run_with(&["restart", "api"], None, None),
        "MODE_NOT_ALLOWED",
    );
}

#[test]
fn an_invalid_mode_is_a_usage_error() {
    let bad = run(&["--mode", "turbo", "status", "web"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert_eq!(bad.stdout, "");
    assert!(
        bad.stderr
            .starts_with("error: invalid value 'turbo' for '--mode <MODE>'"),
        "{bad:?}"
    );
    assert!(
        bad.stderr
            .contains("[possible values: SHADOW, ADVISORY, PARTIAL_AUTO, FULL_AUTO]"),
        "{bad:?}"
    );
    // From the environment too, even for a command that SHADOW would run: never a silent default.
    for value in ["turbo", "", " full_auto", "full auto"] {
        let bad = run_with(&["status", "web"], Some(value), None);
        assert_eq!(bad.code, 2, "{value:?}: {bad:?}");
        assert_eq!(bad.stdout, "", "{value:?}");
        assert!(bad.stderr.starts_with("error: "), "{value:?}: {bad:?}");
    }
}

#[test]
fn other_usage_errors_exit_2() {
    for args in [
        &[][..],
        &["status"],
        &["frobnicate"],
        &["rollback", "web"],
        &["status", "web", "--bogus"],
        &["--list-tools", "xml"],
    ] {
        let bad = run(args);
        assert_eq!(bad.code, 2, "{args:?}: {bad:?}");
        assert_eq!(bad.stdout, "", "{args:?}");
    }
    let help = run(&["--help"]);
    assert_eq!(help.code, 0, "{help:?}");
    assert!(
        help.stdout
            .contains("3  the gate refused the call: the tool did not run"),
        "{help:?}"
    );
    assert!(help.stdout.contains("[env: TOOLGATE_MODE"), "{help:?}");
}

// ---------------------------------------------------------------------------------------------------------
// Approvals and the deny list
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_high_write_without_an_approval_is_refused() {
    // No answer: stdin is closed at once.
    let refused = run(&["--mode", "full_auto", "rollback", "web", "--to", "1.4.2"]);
    assert_refused(&refused, "APPROVAL_REJECTED");
    assert!(
        refused
            .stderr
            .starts_with("deploy.rollback (HIGH_WRITE) in FULL_AUTO with {\"service\":\"web\",\"to\":\"1.4.2\"}\napprove? [y/N] \n"),
        "the operator is asked on stderr: {refused:?}"
    );
    assert!(
        refused.stderr.ends_with("no answer (end of input)\n"),
        "{refused:?}"
    );

    for answer in ["n\n", "no\n", "\n", "yes please\n", "maybe"] {
        let refused = run_with(&["delete", "worker"], Some("full_auto"), Some(answer));
        assert_refused(&refused, "APPROVAL_REJECTED");
        assert!(
            refused.stderr.contains("the operator answered"),
            "{refused:?}"
        );
    }
}

#[test]
fn a_high_write_runs_once_approved() {
    for answer in ["y\n", "Y\n", "yes\n", " yes \n", "y"] {
        let done = run_with(
            &["rollback", "web", "--to", "1.4.2"],
            Some("FULL_AUTO"),
            Some(answer),
        );
        assert_eq!(done.code, 0, "{answer:?}: {done:?}");
        assert_eq!(done.stdout, "rolled web back from 1.5.0 to 1.4.2\n");
        assert!(done.stderr.contains("approve? [y/N] "), "{done:?}");
    }
    let done = run(&["--mode", "full_auto", "--yes", "delete", "worker"]);
    assert_eq!(done.code, 0, "{done:?}");
    assert_eq!(done.stdout, "deleted worker\n");
    assert_eq!(
        done.stderr,
        "deploy.delete (HIGH_WRITE): approved by --yes\n"
    );
}

#[test]
fn a_deny_rule_refuses_whatever_the_mode_and_approval() {
    let refused = run(&[
        "--mode",
        "full_auto",
        "--yes",
        "--deny",
        "deploy.delete",
        "delete",
        "web",
    ]);
    assert_refused(&refused, "DENY_LISTED");
    let refused = run(&["--deny", "deploy.*", "status", "web"]);
    assert_refused(&refused, "DENY_LISTED");
    // A rule that matches no tool is a mistake on the command line.
    let bad = run(&["--deny", "deploy.destroy", "status", "web"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("deploy.destroy"), "{bad:?}");
}

// ---------------------------------------------------------------------------------------------------------
// Tool failures
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_failing_tool_exits_1_with_its_message() {
    let failed = run(&["status", "nope"]);
    assert_eq!(failed.code, 1, "{failed:?}");
    assert_eq!(failed.stdout, "");
    assert_eq!(
        failed.stderr,
        "failed HANDLER_ERROR: no service is named `nope`\n"
    );
    let failed = run_with(
        &["rollback", "web", "--to", "1.6.0"],
        Some("full_auto"),
        Some("y\n"),
    );
    assert_eq!(failed.code, 1, "{failed:?}");
    assert!(
        failed
            .stderr
            .ends_with("failed HANDLER_ERROR: 1.6.0 is not older than the running 1.5.0\n"),
        "{failed:?}"
    );
}
