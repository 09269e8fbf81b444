//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, the version
//! `tests/conformance/package-lock.json` pins) against `examples/conformance.rs`: every server
//! scenario of protocol 2026-07-28, each against a server of its own, must pass, its SHOULDs included
//! (see `Outcome::passed`).
//!
//! Needs `npm` and Node packages from the npm registry: `tests/conformance/install.sh` installs the
//! suite and a Node 22 into `target/conformance` on the first run and reuses them afterwards.
#![cfg(feature = "mcp-http")]

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The protocol revision whose server scenarios run.
const SPEC_VERSION: &str = "2026-07-28";
/// How many scenarios the pinned suite has for it: fewer would mean some were not run.
const SCENARIOS: usize = 40;
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);
/// A scenario's own requests time out after 10 seconds at most.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(120);
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn every_server_scenario_passes() {
    let started = Instant::now();
    let suite = install_suite();
    let server = crate::common::example("conformance", "mcp-http");
    let scenarios = scenarios(&suite);
    assert_eq!(
        scenarios.len(),
        SCENARIOS,
        "the suite lists {} server scenarios for {SPEC_VERSION}, not {SCENARIOS}: {scenarios:?}",
        scenarios.len()
    );

    let scratch = crate::common::Scratch::new("runs");
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::new());
    let workers = thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4));
    thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while let Some(name) = scenarios.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let outcome = run_scenario(&suite, &server, name, &scratch.path(name));
                    outcomes
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(outcome);
                }
            });
        }
    });
    let mut outcomes = outcomes
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    outcomes.sort_by_key(|outcome| scenarios.iter().position(|s| *s == outcome.scenario));

    let table = table(&outcomes);
    println!("{table}");
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.passed()).collect();
    println!(
        "conformance: {} of {} scenarios passed, in {:.1?}",
        outcomes.len() - failed.len(),
        outcomes.len(),
        started.elapsed()
    );
    if !failed.is_empty() {
        let details: Vec<String> = failed.iter().map(|o| o.failure()).collect();
        panic!(
            "{} of {} conformance scenarios failed (the table above)\n{}",
            failed.len(),
            outcomes.len(),
            details.join("\n")
        );
    }
}

/// What one scenario found.
struct Outcome {
    scenario: String,
    /// The suite's exit status, or `None` when it was killed after the time limit.
    status: Option<ExitStatus>,
    /// The suite's checks (`checks.json`), or why there are none.
    checks: Result<Vec<Check>, String>,
    output: String,
    elapsed: Duration,
}

struct Check {
    id: String,
    status: String,
    message: Option<String>,
}

impl Outcome {
    fn count(&self, status: &str) -> usize {
        self.checks.as_ref().map_or(0, |checks| {
            checks.iter().filter(|c| c.status == status).count()
        })
    }

    /// The suite exited 0 and its checks include a success, no failure and no warning. The suite
    /// itself lets warnings (a SHOULD not met) pass, and some scenarios have nothing else to say: one
    /// whose only check is a warning has verified nothing.
    fn passed(&self) -> bool {
        self.status.is_some_and(|s| s.success())
            && self.count("SUCCESS") > 0
            && self.count("FAILURE") == 0
            && self.count("WARNING") == 0
    }

    fn failure(&self) -> String {
        let mut text = format!("--- {} ---\n", self.scenario);
        match &self.checks {
            Ok(checks) => {
                let bad = |c: &&Check| c.status == "FAILURE" || c.status == "WARNING";
                for check in checks.iter().filter(bad) {
                    text.push_str(&format!(
                        "  {} {}: {}\n",
                        check.status,
                        check.id,
                        check.message.as_deref().unwrap_or("(no message)")
                    ));
                }
            }
            Err(why) => text.push_str(&format!("  no checks: {why}\n")),
        }
        let status = match self.status {
            Some(status) => status.to_string(),
            None => format!("killed after {SCENARIO_TIMEOUT:?}"),
        };
        text.push_str(&format!("  the suite: {status}\n"));
        // Its output repeats the checks above; it is news only when there are none.
        if self.count("FAILURE") + self.count("WARNING") == 0 {
            text.push_str(&self.output);
        }
        text
    }
}

fn table(outcomes: &[Outcome]) -> String {
    let width = outcomes.iter().map(|o| o.scenario.len()).max().unwrap_or(0);
    let mut text = format!(
        "{:width$}  result  checks passed  warnings  time\n",
        "scenario"
    );
    for o in outcomes {
        let total = o.checks.as_ref().map_or(0, Vec::len);
        text.push_str(&format!(
            "{:width$}  {:6}  {:>6}/{:<6}  {:>8}  {:.1?}\n",
            o.scenario,
            if o.passed() { "pass" } else { "FAIL" },
            o.count("SUCCESS"),
            total,
            o.count("WARNING"),
            o.elapsed
        ));
    }
    text
}

/// Runs `scenario` against a server of its own, started here and killed when it ends.
fn run_scenario(suite: &Path, server: &Path, scenario: &str, dir: &Path) -> Outcome {
    let started = Instant::now();
    fs::create_dir_all(dir).expect("the scenario's folder");
    let server = Server::start(server, &dir.join("server.stderr"));
    let results = dir.join("results");
    let mut command = Command::new(suite);
    command
        .args(["server", "--url", &server.url, "--scenario", scenario])
        .args(["--spec-version", SPEC_VERSION, "--output-dir"])
        .arg(&results);
    let (status, output) = run(&mut command, SCENARIO_TIMEOUT);
    drop(server);
    Outcome {
        scenario: scenario.to_owned(),
        status,
        checks: read_checks(&results),
        output: without_colours(&output),
        elapsed: started.elapsed(),
    }
}

/// The checks the suite wrote for one scenario: `<results>/server-<scenario>-<time>/checks.json`.
fn read_checks(results: &Path) -> Result<Vec<Check>, String> {
    let entries = fs::read_dir(results).map_err(|e| format!("{}: {e}", results.display()))?;
    let files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("checks.json"))
        .filter(|path| path.is_file())
        .collect();
    let [file] = &files[..] else {
        return Err(format!(
            "expected one checks.json under {}, found {}",
            results.display(),
            files.len()
        ));
    };
    let text = fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let json: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let checks = json
        .as_array()
        .ok_or_else(|| format!("{} is not an array", file.display()))?;
    Ok(checks
        .iter()
        .map(|check| Check {
            id: check["id"].as_str().unwrap_or("?").to_owned(),
            status: check["status"].as_str().unwrap_or("?").to_owned(),
            message: check["errorMessage"].as_str().map(str::to_owned),
        })
        .collect())
}

/// `examples/conformance` on a port of its own, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(binary: &Path, stderr: &Path) -> Server {
        let mut child = Command::new(binary)
            .arg("0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(stderr).expect("the server's stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, receiver) = mpsc::channel();
        thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(line);
        });
        let line = receiver
            .recv_timeout(SERVER_START_TIMEOUT)
            .unwrap_or_default();
        let url = line.trim().to_owned();
        if !url.starts_with("http://127.0.0.1:") {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the conformance server printed {line:?} instead of its address; its stderr:\n{}",
                fs::read_to_string(stderr).unwrap_or_default()
            );
        }
        Server { child, url }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `target/conformance/conformance` (next to this test's profile folder), installed by
/// `tests/conformance/install.sh` when missing or older than the lockfile.
fn install_suite() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let target = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("the test binary is in target/<profile>/deps");
    let dir = target.join("conformance");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/install.sh");
    let mut install = Command::new("bash");
    install.arg(&script).arg(&dir);
    let (status, output) = run(&mut install, INSTALL_TIMEOUT);
    assert!(
        status.is_some_and(|s| s.success()),
        "{} failed ({status:?}):\n{output}",
        script.display()
    );
    dir.join("conformance")
}

/// The suite's server scenarios for [`SPEC_VERSION`], from `conformance list`.
fn scenarios(suite: &Path) -> Vec<String> {
    let mut list = Command::new(suite);
    list.args(["list", "--server", "--spec-version", SPEC_VERSION]);
    let (status, output) = run(&mut list, Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "conformance list failed:\n{output}"
    );
    output
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .filter_map(|entry| entry.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Runs `command` to its end or until `limit`, then kills it: its status (`None` if killed) and
/// what it printed, stdout then stderr.
fn run(command: &mut Command, limit: Duration) -> (Option<ExitStatus>, String) {
    let output = crate::common::run(command, limit);
    (output.status, output.stdout + &output.stderr)
}

/// `text` without the ANSI colour sequences the suite prints.
fn without_colours(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // ESC [ parameters final-byte
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}
