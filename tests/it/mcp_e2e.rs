//! The `mcp_server` example driven by the official MCP Python SDK over stdio (`tests/mcp/client.py`).
//!
//! Needs `python3`. When it cannot `import mcp`, the SDK is installed once into `target/mcp-venv` (or,
//! where `venv` is unavailable, into `target/mcp-pylib`) with pip, and reused afterwards.
//! `TOOLGATE_MCP_PYTHON` names another interpreter that has `mcp`.

#![cfg(feature = "mcp")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub(crate) const CLIENT_TIMEOUT: Duration = Duration::from_secs(180);
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

pub(crate) use crate::common::run;

/// `target/<profile>`, from this test's own path `target/<profile>/deps/mcp_e2e-<hash>`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("the test binary's folder");
    deps.parent()
        .expect("the profile folder above deps/")
        .to_path_buf()
}

/// The example server, built if it is missing or stale.
fn server_binary() -> PathBuf {
    example_binary("mcp_server", "mcp,clap")
}

/// The example `name`, built with `features` if it is missing or any of its sources changed.
pub(crate) fn example_binary(name: &str, features: &str) -> PathBuf {
    crate::common::example(name, features)
}

/// An interpreter and the `PYTHONPATH` it needs (if any) to `import mcp`.
pub(crate) struct Python {
    program: PathBuf,
    path: Option<PathBuf>,
}

impl Python {
    pub(crate) fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        if let Some(path) = &self.path {
            command.env("PYTHONPATH", path);
        }
        command
    }

    fn imports_mcp(&self) -> bool {
        let mut command = self.command();
        command.args(["-c", "import mcp"]);
        run(&mut command, Duration::from_secs(60)).success()
    }
}

fn venv_python(venv: &Path) -> PathBuf {
    if cfg!(windows) {
        venv.join("Scripts").join("python.exe")
    } else {
        venv.join("bin").join("python")
    }
}

/// A Python that can `import mcp`: `TOOLGATE_MCP_PYTHON`, else `python3` if it can, else one that
/// this test provisions under `target/` (once; later runs reuse it).
pub(crate) fn python_with_mcp() -> Python {
    if let Some(program) = std::env::var_os("TOOLGATE_MCP_PYTHON") {
        let python = Python {
            program: program.into(),
            path: None,
        };
        assert!(
            python.imports_mcp(),
            "TOOLGATE_MCP_PYTHON cannot `import mcp`"
        );
        return python;
    }
    let system = Python {
        program: "python3".into(),
        path: None,
    };
    if system.imports_mcp() {
        return system;
    }
    let target = profile_dir()
        .parent()
        .expect("the target folder")
        .to_path_buf();
    let venv = target.join("mcp-venv");
    let in_venv = Python {
        program: venv_python(&venv),
        path: None,
    };
    if in_venv.program.is_file() && in_venv.imports_mcp() {
        return in_venv;
    }
    let lib = target.join("mcp-pylib");
    let in_lib = Python {
        program: "python3".into(),
        path: Some(lib.clone()),
    };
    if lib.is_dir() && in_lib.imports_mcp() {
        return in_lib;
    }

    eprintln!(
        "installing the MCP Python SDK into {} (once)",
        venv.display()
    );
    let mut create = Command::new("python3");
    create.args(["-m", "venv", "--clear"]).arg(&venv);
    let created = run(&mut create, INSTALL_TIMEOUT);
    if created.success() {
        let mut install = in_venv.command();
        install.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "mcp",
        ]);
        let installed = run(&mut install, INSTALL_TIMEOUT);
        assert!(
            installed.success(),
            "pip install mcp failed: {}",
            installed.describe()
        );
        assert!(
            in_venv.imports_mcp(),
            "the venv cannot import mcp after installing it"
        );
        return in_venv;
    }

    eprintln!(
        "python3 -m venv is unavailable ({}); installing into {} instead",
        created.stderr.trim(),
        lib.display()
    );
    let mut install = Command::new("python3");
    install
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--upgrade",
            "--target",
        ])
        .arg(&lib)
        .arg("mcp");
    let installed = run(&mut install, INSTALL_TIMEOUT);
    assert!(
        installed.success(),
        "pip install --target mcp failed: {}",
        installed.describe()
    );
    assert!(
        in_lib.imports_mcp(),
        "python3 cannot import mcp from {}",
        lib.display()
    );
    in_lib
}

#[test]
fn the_python_sdk_lists_and_calls_the_example_server() {
    let server = server_binary();
    let python = python_with_mcp();
    let client = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("mcp")
        .join("client.py");
    let mut command = python.command();
    command
        .arg(&client)
        .arg(&server)
        .env_remove("TOOLGATE_MODE");
    let output = run(&mut command, CLIENT_TIMEOUT);
    assert!(
        output.success(),
        "tests/mcp/client.py failed: {}",
        output.describe()
    );
    assert!(
        output.stdout.contains("checks passed"),
        "client.py did not report its checks: {}",
        output.describe()
    );
}

/// `tests/mcp/flows.py`: approvals in band (the SDK's `Client` answers the elicitation form; the
/// refused retries, a replayed, forged or other connection's state and changed arguments, are sent by
/// hand through its session) and out of band (the example's operator channel approves), the tool list
/// that follows the gate's mode (`list_changed`), and a cancelled call.
#[test]
fn the_python_sdk_answers_approvals_follows_list_changes_and_cancels() {
    let server = server_binary();
    let python = python_with_mcp();
    let flows = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("mcp")
        .join("flows.py");
    let mut command = python.command();
    command.arg(&flows).arg(&server).env_remove("TOOLGATE_MODE");
    let output = run(&mut command, CLIENT_TIMEOUT);
    assert!(
        output.success(),
        "tests/mcp/flows.py failed: {}",
        output.describe()
    );
    assert!(
        output.stdout.contains("checks passed"),
        "flows.py did not report its checks: {}",
        output.describe()
    );
}
