//! The `mcp_server` example driven by the official MCP Python SDK over stdio (`tests/mcp/client.py`).
//!
//! Needs `python3`. When it cannot `import mcp`, the SDK is installed once into `target/mcp-venv` (or,
//! where `venv` is unavailable, into `target/mcp-pylib`) with pip, and reused afterwards.
//! `TOOLGATE_MCP_PYTHON` names another interpreter that has `mcp`.

#![cfg(feature = "mcp")]

use std::path::{Path, PathBuf};

pub(crate) use crate::common::mcp::{CLIENT_TIMEOUT, python_with_mcp};
pub(crate) use crate::common::run;

/// The script `tests/mcp/<name>`, as a command of `python`.
pub(crate) fn script(python: &crate::common::mcp::Python, name: &str) -> std::process::Command {
    let mut command = python.command();
    command.arg(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests")
            .join("mcp")
            .join(name),
    );
    command
}

/// The run of the script `tests/mcp/<name>` passed and reported its checks.
#[track_caller]
pub(crate) fn assert_passed(name: &str, output: &crate::common::Output) {
    assert!(
        output.success(),
        "tests/mcp/{name} failed: {}",
        output.describe()
    );
    assert!(
        output.stdout.contains("checks passed"),
        "{name} did not report its checks: {}",
        output.describe()
    );
}

/// The script `tests/mcp/<name>`, run against the example server, passes.
fn passes_against_the_example_server(name: &str) {
    let server = server_binary();
    let mut command = script(&python_with_mcp(), name);
    command.arg(&server).env_remove("TOOLGATE_MODE");
    assert_passed(name, &run(&mut command, CLIENT_TIMEOUT));
}

/// The example server, built if it is missing or stale.
fn server_binary() -> PathBuf {
    example_binary("mcp_server", "mcp,clap")
}

/// The example `name`, built with `features` if it is missing or any of its sources changed.
pub(crate) fn example_binary(name: &str, features: &str) -> PathBuf {
    crate::common::example(name, features)
}

#[test]
fn the_python_sdk_lists_and_calls_the_example_server() {
    passes_against_the_example_server("client.py");
}

/// `tests/mcp/flows.py`: approvals in band (the SDK's `Client` answers the elicitation form; the
/// refused retries, a replayed, forged or other connection's state and changed arguments, are sent by
/// hand through its session) and out of band (the example's operator channel approves), the tool list
/// that follows the gate's mode (`list_changed`), and a cancelled call.
#[test]
fn the_python_sdk_answers_approvals_follows_list_changes_and_cancels() {
    passes_against_the_example_server("flows.py");
}
