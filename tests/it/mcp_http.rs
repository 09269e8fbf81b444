//! The `mcp_http` example over MCP's streamable HTTP transport, driven by the official MCP Python SDK's
//! HTTP client (`tests/mcp/http_client.py`): two principals, by their bearer tokens, see and may do different
//! things, and every audit record names its principal.

#![cfg(feature = "mcp-http")]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::mcp_e2e::{CLIENT_TIMEOUT, example_binary, python_with_mcp, run};

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The example server, killed when the test ends however it ends.
pub(crate) struct Server {
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
    pub(crate) fn start(binary: &Path, args: &[&std::ffi::OsStr], stderr: PathBuf) -> Server {
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
    pub(crate) fn url(&mut self) -> String {
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

pub(crate) fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-mcp-http-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

#[test]
fn two_principals_over_streamable_http_see_and_do_different_things() {
    let binary = example_binary("mcp_http", "mcp-http,clap");
    let python = python_with_mcp();
    let dir = scratch("principals");
    let principals = dir.join("principals.txt");
    fs::write(
        &principals,
        "# token name mode\nalice-token alice FULL_AUTO\nbob-token bob SHADOW\n",
    )
    .expect("write the principals");
    let audit = dir.join("audit.jsonl");
    let stderr = dir.join("server.err");
    let args: Vec<&std::ffi::OsStr> = vec![
        "--principals".as_ref(),
        principals.as_os_str(),
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--approvals".as_ref(),
        "in-band".as_ref(),
        "--audit-log".as_ref(),
        audit.as_os_str(),
    ];
    let mut server = Server::start(&binary, &args, stderr);
    let url = server.url();

    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("mcp")
        .join("http_client.py");
    let mut command = python.command();
    command.arg(&script).arg(&url).arg(&audit);
    let output = run(&mut command, CLIENT_TIMEOUT);
    drop(server);
    assert!(
        output.success(),
        "tests/mcp/http_client.py failed: {}",
        output.describe()
    );
    assert!(
        output.stdout.contains("checks passed"),
        "http_client.py did not report its checks: {}",
        output.describe()
    );
    let _ = fs::remove_dir_all(&dir);
}
