//! The MCP example servers as processes, and the official MCP Python SDK as their client: a Python that
//! can `import mcp` (found, or provisioned once under `target/`; `TOOLGATE_MCP_PYTHON` names another), and
//! an example server over streamable HTTP, killed when the test ends.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::run;

/// How long a Python client may run.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(180);
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);
/// The arguments of Python that every install of the SDK starts with.
const PIP_INSTALL: [&str; 5] = [
    "-m",
    "pip",
    "install",
    "--quiet",
    "--disable-pip-version-check",
];

/// `target/<profile>`, from this test's own path `target/<profile>/deps/<binary>-<hash>`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("the test binary's folder");
    deps.parent()
        .expect("the profile folder above deps/")
        .to_path_buf()
}

/// An interpreter and the `PYTHONPATH` it needs (if any) to `import mcp`.
pub struct Python {
    program: PathBuf,
    path: Option<PathBuf>,
}

impl Python {
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        // The clients import `tests/mcp/checking.py`: no bytecode is written into the source tree.
        command.env("PYTHONDONTWRITEBYTECODE", "1");
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
pub fn python_with_mcp() -> Python {
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
        install.args(PIP_INSTALL).arg("mcp");
        return installed(&mut install, in_venv, "pip install mcp");
    }

    eprintln!(
        "python3 -m venv is unavailable ({}); installing into {} instead",
        created.stderr.trim(),
        lib.display()
    );
    let mut install = Command::new("python3");
    install
        .args(PIP_INSTALL)
        .args(["--upgrade", "--target"])
        .arg(&lib)
        .arg("mcp");
    installed(&mut install, in_lib, "pip install --target mcp")
}

/// `python`, once `install` (`what`) has run and left it able to import the SDK.
fn installed(install: &mut Command, python: Python, what: &str) -> Python {
    let output = run(install, INSTALL_TIMEOUT);
    assert!(output.success(), "{what} failed: {}", output.describe());
    assert!(
        python.imports_mcp(),
        "{} cannot import mcp after {what} (PYTHONPATH {:?})",
        python.program.display(),
        python.path
    );
    python
}

/// The MCP Python client `tests/mcp/{name}`.
pub fn client_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("mcp")
        .join(name)
}

/// Asserts that the run of the client `tests/mcp/{name}` passed and reported its checks.
#[track_caller]
pub fn assert_client_passed(output: &super::Output, name: &str) {
    let reported = output.stdout.contains("checks passed");
    assert!(
        output.success() && reported,
        "tests/mcp/{name} failed (exit 0: {}, checks reported: {reported}): {}",
        output.success(),
        output.describe()
    );
}

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The example server, killed when the test ends however it ends.
pub struct Server {
    child: Child,
    stderr: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts the example `binary` with `args`, its stderr into `stderr`.
    pub fn start(binary: &Path, args: &[&std::ffi::OsStr], stderr: PathBuf) -> Server {
        let child = Command::new(binary)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&stderr).expect("the server's stderr"))
            .spawn()
            .expect("start the example");
        Server { child, stderr }
    }

    /// The URL the server prints once it listens; panics if it does not within `START_TIMEOUT`.
    pub fn url(&mut self) -> String {
        let started = Instant::now();
        loop {
            let printed = fs::read_to_string(&self.stderr).unwrap_or_default();
            if let Some(url) = printed
                .lines()
                .find_map(|line| line.strip_prefix("notes: listening on "))
            {
                return url.trim().to_owned();
            }
            if let Some(status) = self.child.try_wait().expect("wait for the server") {
                panic!("the server exited ({status}) before it listened:\n{printed}");
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "the server did not listen within {START_TIMEOUT:?}:\n{printed}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}
