//! Helpers shared by the test binaries that `mod common;` them; each binary uses some of them.
#![allow(dead_code)]

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

#[cfg(feature = "console")]
pub mod browser;
pub mod gates;
pub mod http;
pub mod lookalikes;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "postgres")]
pub mod postgres;

/// A directory under Cargo's scratch space, named for the test binary, the calling file and the process,
/// removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    #[track_caller]
    pub fn new(name: &str) -> Scratch {
        let file = Path::new(std::panic::Location::caller().file());
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("test");
        // Tests run in parallel, and two of them may ask for the same name: each gets its own.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{}-{stem}-{}-{n}-{name}",
            env!("CARGO_CRATE_NAME"),
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// The directory itself.
    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// `name` inside the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Serializes the tests of one binary that share process-wide state (the counters of their tools, the
/// allocator's count); a test that panicked while holding it leaves it usable.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The features this test binary was built with, as `cargo build --features` takes them.
fn built_features() -> Vec<&'static str> {
    let mut features = Vec::new();
    macro_rules! each {
        ($($feature:literal),*) => {
            $(if cfg!(feature = $feature) {
                features.push($feature);
            })*
        };
    }
    each!(
        "cli",
        "clap",
        "mcp",
        "mcp-http",
        "mcp-oauth",
        "postgres",
        "checkpoints",
        "rig"
    );
    features
}

/// Runs `program` with `args`, no `TOOLGATE_MODE` from the environment: its exit code and what it
/// printed, standard output then standard error.
pub fn run_program(program: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(program)
        .args(args)
        .env_remove("TOOLGATE_MODE")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The binary of the example `name`, built (once per process) by `cargo build --example` next to
/// the calling test binary, `target/<profile>/deps/..` -> `target/<profile>/examples`, with the
/// features this test binary was built with and `features` (the example's required ones). Cargo
/// rebuilds it whenever any of its sources changed, the library's included, so a stale example never
/// runs; with the test binary's own features the build reuses what `cargo test` compiled.
pub fn example(name: &str, features: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, path)) = built.iter().find(|(built, _)| built == name) {
        return path.clone();
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary is in target/<profile>/deps");
    let path = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let mut wanted = built_features();
    for feature in features.split(',').filter(|f| !f.is_empty()) {
        if !wanted.contains(&feature) {
            wanted.push(feature);
        }
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--quiet", "--example", name, "--features"])
        .arg(wanted.join(","));
    if let Some(target_dir) = profile_dir.parent() {
        command.arg("--target-dir").arg(target_dir);
    }
    match profile_dir.file_name().and_then(|name| name.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            command.arg("--release");
        }
        Some(profile) => {
            command.args(["--profile", profile]);
        }
    }
    let status = command.status().expect("cargo runs");
    assert!(status.success(), "building the {name} example failed");
    assert!(path.is_file(), "no example binary at {}", path.display());
    built.push((name.to_owned(), path.clone()));
    path
}

/// What a finished (or killed) process printed.
pub struct Output {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    pub fn describe(&self) -> String {
        let status = match self.status {
            Some(status) => status.to_string(),
            None => "killed after the time limit".to_owned(),
        };
        format!(
            "{status} after {:.1?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Runs `command` to its end or until `limit`, then kills it; collects what it printed.
pub fn run(command: &mut Command, limit: Duration) -> Output {
    let started = Instant::now();
    let mut child: Child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let status = loop {
        match child.try_wait().expect("wait for the child") {
            Some(status) => break Some(status),
            None if started.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => thread::sleep(Duration::from_millis(50)),
        }
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
        elapsed: started.elapsed(),
    }
}

/// The variable that names the role of a child run of a test binary ([`rerun`]).
pub const CHILD_ROLE: &str = "TOOLGATE_TEST_CHILD_ROLE";

/// Whether this process is the child run `role` of [`rerun`].
pub fn is_child(role: &str) -> bool {
    std::env::var_os(CHILD_ROLE).is_some_and(|value| value == role)
}

/// Runs the test `name` of `module` (the caller's `module_path!()`) again in a child process of this
/// test binary, alone there (one test thread), with [`CHILD_ROLE`] set to `role`, and asserts that it
/// ran and passed. For a test that changes what is process-wide (the environment), which it may do
/// only where no other test runs.
pub fn rerun(module: &str, name: &str, role: &str) {
    let test = match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    };
    let output = Command::new(std::env::current_exe().expect("the test binary's path"))
        .arg(&test)
        .args(["--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ROLE, role)
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("running 1 test") && stdout.contains("1 passed"),
        "the child run of {test} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

/// A sync approver that answers from a script, in order (then rejects), and counts the questions.
pub fn scripted(
    answers: Vec<toolgate::Approval>,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    impl Fn(&toolgate::ApprovalRequest<'_>) -> toolgate::Approval + Send + Sync + 'static,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let asked = std::sync::Arc::new(AtomicUsize::new(0));
    let answers = std::sync::Mutex::new(answers.into_iter());
    let counter = asked.clone();
    let approver = move |_: &toolgate::ApprovalRequest<'_>| {
        counter.fetch_add(1, Ordering::SeqCst);
        answers
            .lock()
            .unwrap()
            .next()
            .unwrap_or(toolgate::Approval::Reject("no more answers".into()))
    };
    (asked, approver)
}

/// An approval store that keeps the calls it is handed and files each as pending.
#[derive(Default)]
pub struct KeepingStore(pub std::sync::Mutex<Vec<toolgate::approval::store::ApprovalCall>>);

impl toolgate::approval::store::ApprovalStore for KeepingStore {
    fn consume<'a>(
        &'a self,
        call: &'a toolgate::approval::store::ApprovalCall,
    ) -> toolgate::approval::store::StoreFuture<
        'a,
        Result<toolgate::approval::store::Consumed, toolgate::approval::store::StoreError>,
    > {
        self.0.lock().unwrap().push(call.clone());
        Box::pin(std::future::ready(Ok(
            toolgate::approval::store::Consumed::Pending {
                code: toolgate::DenialCode::ApprovalPending,
                token: Some("tok".to_owned()),
            },
        )))
    }

    fn answer<'a>(
        &'a self,
        _token: &'a str,
        _answer: toolgate::approval::store::Answer,
    ) -> toolgate::approval::store::StoreFuture<
        'a,
        Result<toolgate::approval::store::Binding, toolgate::approval::ApproveError>,
    > {
        Box::pin(std::future::ready(Err(
            toolgate::approval::ApproveError::UnknownToken,
        )))
    }
}
