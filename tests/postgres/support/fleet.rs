//! The processes of a fleet: this binary run again (`TOOLGATE_FLEET_CHILD`) as a writer of the audit
//! table or a member of a fleet calling tools until told to stop, and the helpers of the trail's tests.

pub(crate) use super::{
    HIDDEN, assert_refused_saying, assert_shown_escaped, audited, chained_hash, hidden_text, text,
    toolgate, toolgate_exits, toolgate_prints, verify_signed,
};
pub(crate) use crate::common;

pub(crate) use std::io::{BufRead, BufReader};
pub(crate) use std::path::PathBuf;
pub(crate) use std::process::{Child, ChildStdout, Stdio};
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
pub(crate) use std::sync::{Mutex, mpsc};
pub(crate) use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub(crate) use crate::common::postgres::{Cluster, database, query};
pub(crate) use toolgate::audit::{AuditRecord, Checkpoints, JsonlSink, SigningKey, Stage};
pub(crate) use toolgate::postgres::fleet::{self, Fleet};
pub(crate) use toolgate::postgres::{PostgresSink, verify_trail};
pub(crate) use toolgate::{DenialCode, Denied, Gate, Mode, tool};

pub(crate) const ROLE: &str = "TOOLGATE_FLEET_CHILD";
pub(crate) const URL: &str = "TOOLGATE_FLEET_URL";
pub(crate) const THREADS: &str = "TOOLGATE_FLEET_THREADS";
pub(crate) const CALLS: &str = "TOOLGATE_FLEET_CALLS";
pub(crate) const HANG_AFTER: &str = "TOOLGATE_FLEET_HANG_AFTER";
pub(crate) const FLEET: &str = "TOOLGATE_FLEET_NAME";
pub(crate) const GRACE_MS: &str = "TOOLGATE_FLEET_GRACE_MS";
pub(crate) const STOP_FILE: &str = "TOOLGATE_FLEET_STOP";
pub(crate) const AUDIT_FILE: &str = "TOOLGATE_FLEET_AUDIT";
/// How long the child's sink or fleet waits for the server (the library's default unless set): the
/// tests that are not about a slow server give a loaded machine time.
pub(crate) const TIMEOUT_MS: &str = "TOOLGATE_FLEET_TIMEOUT_MS";

pub(crate) static WORKED: AtomicU64 = AtomicU64::new(0);
pub(crate) static COUNTED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Change something small: one unit of work of a writer.
#[tool(risk = "LOW_WRITE", domain = "fleet")]
pub(crate) fn work(n: u64) -> Result<u64, Denied> {
    WORKED.fetch_add(1, Ordering::Relaxed);
    Ok(n)
}

/// Hang inside the body, after telling the parent, until the process is killed.
#[tool(risk = "LOW_WRITE", domain = "fleet")]
pub(crate) fn hang() -> Result<(), Denied> {
    println!("hanging");
    std::thread::sleep(Duration::from_secs(3600));
    Ok(())
}

/// Count a number, recording its arguments, so that the log shows which bodies ran.
#[tool(risk = "LOW_WRITE", domain = "fleet", record_arguments)]
pub(crate) fn count(n: u64) -> Result<(), Denied> {
    COUNTED.lock().unwrap().push(n);
    Ok(())
}

/// Count asynchronously.
#[tool(risk = "LOW_WRITE", domain = "fleet")]
pub(crate) async fn count_async(n: u64) -> Result<u64, Denied> {
    tokio::task::yield_now().await;
    Ok(n)
}

pub(crate) fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set for a child"))
}

pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| v.parse().expect("a number"))
}

pub(crate) fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The child's part, when the parent executes this binary again with [`ROLE`] set to run only this
/// test; without it, there is nothing to do.
#[test]
pub(crate) fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    match role.as_str() {
        "writer" => writer(),
        "member" => member(),
        "policy_member" => crate::g18_fleet_policy::member(),
        other => panic!("no child role {other}"),
    }
}

/// A process writing into the audit table: `THREADS` threads, `CALLS` calls each.
pub(crate) fn writer() {
    let timeout = env_u64(
        TIMEOUT_MS,
        toolgate::postgres::DEFAULT_TIMEOUT.as_millis() as u64,
    );
    let sink = PostgresSink::builder()
        .timeout(Duration::from_millis(timeout))
        .connect(&env(URL))
        .expect("the sink connects");
    println!("writer {}", sink.writer());
    let gate = audited(sink);
    let threads = env_u64(THREADS, 8);
    let calls = env_u64(CALLS, 100);
    let hang_after = std::env::var(HANG_AFTER)
        .ok()
        .map(|v| v.parse::<u64>().unwrap());
    let ran = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (gate, ran) = (&gate, &ran);
            scope.spawn(move || {
                for i in 0..calls {
                    if t == 0 && Some(i) == hang_after {
                        let _ = gate.run(hang);
                    }
                    if gate.run(|| work(i)).is_ok() {
                        ran.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    println!("done {}", ran.load(Ordering::Relaxed));
}

/// A process joined to a fleet: `THREADS` threads call `work` until the stop file exists; a monitor
/// prints every change of the gate's mode with its time. Prints, at the end, the calls that ran after
/// the gate was first seen refusing (there must be none) and after it went down.
pub(crate) fn member() {
    let grace = Duration::from_millis(env_u64(GRACE_MS, 30_000));
    let timeout = env_u64(
        TIMEOUT_MS,
        toolgate::postgres::DEFAULT_TIMEOUT.as_millis() as u64,
    );
    let fleet = Fleet::builder()
        .timeout(Duration::from_millis(timeout))
        .grace(grace)
        .poll_interval(Duration::from_millis(100).min(grace / 2))
        .connect(&env(URL), &env(FLEET))
        .expect("the fleet");
    let mut builder = Gate::builder().mode(Mode::PartialAuto).agent("member");
    if let Ok(path) = std::env::var(AUDIT_FILE) {
        builder = builder.audit(JsonlSink::open(path).expect("the audit log"));
    }
    let gate = fleet.join(builder).expect("joined");
    let stop_file = PathBuf::from(env(STOP_FILE));
    println!("ready {}", gate.mode());
    let stopped = AtomicBool::new(false);
    // The time each thread first saw a refusal; a call started after it must not run.
    let first_refusal = AtomicU64::new(u64::MAX);
    let ran_after_refusal = AtomicU64::new(0);
    let threads = env_u64(THREADS, 4);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (gate, stopped, first_refusal, ran_after_refusal) =
                (&gate, &stopped, &first_refusal, &ran_after_refusal);
            scope.spawn(move || {
                let mut i = 0;
                while !stopped.load(Ordering::Relaxed) {
                    let started = now_nanos();
                    match gate.run(|| work(i)) {
                        Ok(_) if started > first_refusal.load(Ordering::SeqCst) => {
                            ran_after_refusal.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                        Err(denied) if denied.code() == "MODE_NOT_ALLOWED" => {
                            first_refusal.fetch_min(now_nanos(), Ordering::SeqCst);
                        }
                        Err(denied) => panic!("unexpected refusal: {denied}"),
                    }
                    i += 1;
                }
            });
        }
        let mut seen = gate.mode();
        while !stop_file.exists() {
            let mode = gate.mode();
            if mode != seen {
                println!("mode {mode} {}", now_nanos());
                seen = mode;
            }
            // Once back from a partition the first refusal is history: runs are expected again.
            if mode == Mode::PartialAuto {
                first_refusal.store(u64::MAX, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        stopped.store(true, Ordering::Relaxed);
    });
    println!(
        "result ran_after_refusal={}",
        ran_after_refusal.load(Ordering::Relaxed)
    );
    drop(gate);
    drop(fleet);
}

/// How long a child may take to print the next line a test waits for (the longest, a writer of 160,000
/// records, takes about 90 s on a loaded 2-core machine): a child that hangs fails the test
/// instead of holding the run (and its audit log growing) until the CI's limit.
pub(crate) const LINE_TIMEOUT: Duration = Duration::from_secs(300);

pub(crate) struct Proc {
    pub(crate) child: Child,
    pub(crate) lines: mpsc::Receiver<String>,
}

impl Proc {
    pub(crate) fn spawn(role: &str, url: &str, vars: &[(&str, String)]) -> Proc {
        let mut command = super::child(module_path!(), "child_process");
        command
            .env(ROLE, role)
            .env(URL, url)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, value) in vars {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("a child process");
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Proc { child, lines }
    }

    /// The rest of the next line that has `prefix`.
    pub(crate) fn expect(&mut self, prefix: &str) -> String {
        loop {
            let line = match self.lines.recv_timeout(LINE_TIMEOUT) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("the child printed no {prefix:?} within {LINE_TIMEOUT:?}")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("the child ended before printing {prefix:?}")
                }
            };
            // The harness's own `test child_process ... ` may stand before the first line printed.
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_owned();
            }
        }
    }

    pub(crate) fn wait(mut self) {
        loop {
            match self.lines.recv_timeout(LINE_TIMEOUT) {
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("the child did not end within {LINE_TIMEOUT:?}")
                }
            }
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the child failed: {status}");
    }
}

impl Drop for Proc {
    /// A test that fails leaves no child running: members only stop when told.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub(crate) fn count_stage(url: &str, writer: &str, stage: &str) -> u64 {
    query(
        url,
        &format!(
            "SELECT count(*) FROM toolgate.audit WHERE writer = '{writer}' AND stage = '{stage}'"
        ),
    )[0][0]
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

/// What an attacker without the key does to writer `a`'s chain: changes record `seq`'s `call` and
/// recomputes every hash from it on with the public format (`sha256(prev_hash ‖ line without hash)`),
/// columns included.
pub(crate) fn rewrite_with_recomputed_hashes(url: &str, seq: u64) {
    let rows = query(
        url,
        "SELECT seq, line FROM toolgate.audit WHERE writer = 'a' ORDER BY seq",
    );
    let mut prev = "0".repeat(64);
    for row in rows {
        let at: u64 = row[0].as_deref().unwrap().parse().unwrap();
        let mut fields: std::collections::BTreeMap<String, serde_json::Value> =
            serde_json::from_str(row[1].as_deref().unwrap()).unwrap();
        if at == seq {
            fields.insert("call".into(), 999_999.into());
        }
        fields.remove("hash");
        fields.insert("prev_hash".into(), prev.clone().into());
        let body = serde_json::to_string(&fields).unwrap();
        let hash = chained_hash(&prev, &body);
        fields.insert("hash".into(), hash.clone().into());
        let call = &fields["call"];
        let line = serde_json::to_string(&fields).unwrap().replace('\'', "''");
        query(
            url,
            &format!(
                "UPDATE toolgate.audit SET line = '{line}', prev_hash = '{prev}', hash = '{hash}',
                     call = {call}
                 WHERE writer = 'a' AND seq = {at}"
            ),
        );
        prev = hash;
    }
}

/// Two writers, `a` and `b`, 50 calls of `work` each with checkpoints every 10 records and a final
/// one; the database's URL and the public key's file.
pub(crate) fn signed_trail(name: &str, scratch: &common::Scratch) -> (String, PathBuf) {
    let (url, file, _) = super::signed_writers(name, scratch, |gate, _, n| {
        gate.run(|| work(n)).unwrap();
    });
    (url, file)
}
