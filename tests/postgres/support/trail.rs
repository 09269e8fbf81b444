//! The tools (`fa.*`), sinks, fleets and partitions of the trail's and fleet's tests: a TCP proxy between
//! a process and the server that can drop every byte, a held connection, and a writer killed mid-call
//! (this binary run again, `TOOLGATE_TRAIL_CHILD=hang`).

pub(crate) use super::{audited, chained_hash, text, toolgate_exits, verify_signed};
pub(crate) use crate::common;

pub(crate) use std::collections::HashSet;
pub(crate) use std::future::Future;
pub(crate) use std::io::{Read, Write};
pub(crate) use std::net::{Shutdown, TcpListener, TcpStream};
pub(crate) use std::process::Command;
pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
pub(crate) use std::sync::{Arc, Barrier, Mutex, mpsc};
pub(crate) use std::time::{Duration, Instant};

pub(crate) use crate::common::postgres::{database, query};
pub(crate) use toolgate::audit::{AuditRecord, Checkpoints, Outcome, SigningKey, Stage};
pub(crate) use toolgate::postgres::fleet::{self, Fleet};
pub(crate) use toolgate::postgres::{PostgresSink, verify_signed_trail, verify_trail};
pub(crate) use toolgate::{DenialCode, Denied, Gate, Mode, tool};

// ---------------------------------------------------------------------------------------------------
// Tools and helpers
// ---------------------------------------------------------------------------------------------------

pub(crate) static RAN: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn ran(tag: &str) -> bool {
    RAN.lock().unwrap().iter().any(|t| t == tag)
}

/// Marks that its body ran with `tag`, recording its arguments so that the trail shows which ran.
#[tool(risk = "LOW_WRITE", domain = "fa", record_arguments)]
pub(crate) fn mark(tag: String) -> Result<(), Denied> {
    RAN.lock().unwrap().push(tag);
    Ok(())
}

/// The same, asynchronously: the body runs after one yield.
#[tool(risk = "LOW_WRITE", domain = "fa", record_arguments)]
pub(crate) async fn mark_async(tag: String) -> Result<(), Denied> {
    RAN.lock().unwrap().push(format!("{tag}:started"));
    tokio::task::yield_now().await;
    RAN.lock().unwrap().push(tag);
    Ok(())
}

/// An async body that waits a long time once started: cancelled while it runs.
#[tool(risk = "LOW_WRITE", domain = "fa", record_arguments)]
pub(crate) async fn sleep_async(tag: String) -> Result<(), Denied> {
    RAN.lock().unwrap().push(tag);
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(())
}

pub(crate) static GO: Mutex<Option<mpsc::Receiver<()>>> = Mutex::new(None);

/// A body that waits until the test lets it finish.
#[tool(risk = "LOW_WRITE", domain = "fa", record_arguments)]
pub(crate) fn wait_body(tag: String) -> Result<(), Denied> {
    RAN.lock().unwrap().push(tag);
    let rx = GO.lock().unwrap().take().expect("a channel to wait on");
    let _ = rx.recv_timeout(Duration::from_secs(20));
    Ok(())
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub(crate) fn refusal(result: &Result<(), Denied>) -> Option<&'static str> {
    result.as_ref().err().map(|d| d.code().as_str())
}

/// The records of `writer`, in `seq` order.
pub(crate) fn records(url: &str, writer: &str) -> Vec<AuditRecord> {
    query(
        url,
        &format!("SELECT line FROM toolgate.audit WHERE writer = '{writer}' ORDER BY seq"),
    )
    .iter()
    .map(|row| serde_json::from_str(row[0].as_deref().unwrap()).unwrap())
    .collect()
}

/// The `tag` argument of a record of `mark`/`mark_async`/`wait_body`.
pub(crate) fn tag_of(record: &AuditRecord) -> Option<String> {
    let arguments: serde_json::Value = serde_json::from_str(record.arguments.as_deref()?).ok()?;
    arguments["tag"].as_str().map(str::to_owned)
}

/// Every enter of `writer` has an exit after it, in the table.
pub(crate) fn unpaired_enters(url: &str, writer: &str) -> Vec<AuditRecord> {
    let all = records(url, writer);
    all.iter()
        .filter(|r| r.stage == Stage::Enter)
        .filter(|e| {
            !all.iter()
                .any(|x| x.stage == Stage::Exit && x.gate == e.gate && x.call == e.call)
        })
        .cloned()
        .collect()
}

/// Polls `condition` until it holds or `within` passes.
pub(crate) fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A session holding a transaction open with `sql` run in it (a table lock), until dropped.
pub(crate) struct Held {
    pub(crate) release: Option<mpsc::Sender<()>>,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

impl Held {
    pub(crate) fn new(url: &str, sql: &str) -> Held {
        let (url, sql) = (url.to_owned(), sql.to_owned());
        let (ready_tx, ready_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(connection);
                client
                    .batch_execute(&format!("BEGIN; {sql}"))
                    .await
                    .unwrap();
                ready_tx.send(()).unwrap();
                let _ = tokio::task::spawn_blocking(move || release_rx.recv()).await;
                let _ = client.batch_execute("ROLLBACK").await;
            });
        });
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the lock is taken");
        Held {
            release: Some(release_tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A TCP proxy to the server that can be cut: while cut, every byte either way is dropped (a black
/// hole); connections that saw a cut are closed once it heals, new ones work again.
pub(crate) struct Proxy {
    pub(crate) port: u16,
    pub(crate) cut: Arc<AtomicBool>,
    pub(crate) generation: Arc<std::sync::atomic::AtomicU64>,
}

impl Proxy {
    pub(crate) fn new(url: &str) -> Proxy {
        let upstream = url
            .split("@")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap()
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let generation = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (c, g) = (cut.clone(), generation.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let born = g.load(Ordering::SeqCst);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server.try_clone().unwrap(), client.try_clone().unwrap()),
                ] {
                    let (cut, generation) = (c.clone(), g.clone());
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        from.set_read_timeout(Some(Duration::from_millis(50))).ok();
                        loop {
                            if generation.load(Ordering::SeqCst) != born
                                && !cut.load(Ordering::SeqCst)
                            {
                                // This connection lived through a cut: it is dead.
                                let _ = from.shutdown(Shutdown::Both);
                                let _ = to.shutdown(Shutdown::Both);
                                return;
                            }
                            match from.read(&mut buf) {
                                Ok(0) => {
                                    let _ = to.shutdown(Shutdown::Both);
                                    return;
                                }
                                Ok(n) => {
                                    if cut.load(Ordering::SeqCst) {
                                        continue;
                                    }
                                    if to.write_all(&buf[..n]).is_err() {
                                        return;
                                    }
                                }
                                Err(e)
                                    if e.kind() == std::io::ErrorKind::WouldBlock
                                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                                Err(_) => {
                                    let _ = to.shutdown(Shutdown::Both);
                                    return;
                                }
                            }
                        }
                    });
                }
            }
        });
        Proxy {
            port,
            cut,
            generation,
        }
    }

    pub(crate) fn url(&self, url: &str) -> String {
        let (head, rest) = url.split_once('@').unwrap();
        let path = rest.split_once('/').unwrap().1;
        format!("{head}@127.0.0.1:{}/{path}", self.port)
    }

    pub(crate) fn cut(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.cut.store(true, Ordering::SeqCst);
    }

    pub(crate) fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// A sink with a short timeout. Its first connection is retried, as [`member_fleet`]'s is: creating
/// the schema on a loaded machine may take longer than the timeout, and no attack here is about
/// connecting.
pub(crate) fn sink(url: &str, writer: &str, timeout: Duration) -> PostgresSink {
    let connect = || {
        PostgresSink::builder()
            .writer(writer)
            .timeout(timeout)
            .connect(url)
    };
    for _ in 0..9 {
        if let Ok(sink) = connect() {
            return sink;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    connect().expect("the sink connects")
}

pub(crate) fn audited_gate(url: &str, writer: &str, timeout: Duration) -> Gate {
    Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink(url, writer, timeout))
        .build()
        .unwrap()
}

/// A fleet with short timeouts, so that outages show quickly. Its first connection is retried: on a
/// loaded machine it may take longer than the timeout, and no attack here is about connecting.
pub(crate) fn member_fleet(url: &str, name: &str, grace_ms: u64) -> Fleet {
    let connect = || {
        Fleet::builder()
            .grace(Duration::from_millis(grace_ms))
            .poll_interval(Duration::from_millis(50))
            .timeout(Duration::from_millis(400))
            .connect(url, name)
    };
    for _ in 0..9 {
        if let Ok(fleet) = connect() {
            return fleet;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    connect().expect("the fleet")
}

// ---------------------------------------------------------------------------------------------------
// Signed checkpoints
// ---------------------------------------------------------------------------------------------------

/// Two writers, `a` and `b`, 50 calls of `mark` each with checkpoints every 10 records and a final
/// one; the database's URL, the public key's file and the public key.
pub(crate) fn signed(
    name: &str,
    scratch: &common::Scratch,
) -> (String, std::path::PathBuf, toolgate::audit::PublicKey) {
    super::signed_writers(name, scratch, |gate, writer, n| {
        gate.run(|| mark(format!("{name}-{writer}-{n}"))).unwrap();
    })
}

// ---------------------------------------------------------------------------------------------------
// A killed process
// ---------------------------------------------------------------------------------------------------

pub(crate) const ROLE: &str = "TOOLGATE_TRAIL_CHILD";
pub(crate) const CHILD_URL: &str = "TOOLGATE_TRAIL_URL";

/// This binary run again as [`child_process`].
pub(crate) fn hanging_writer() -> Command {
    super::child(module_path!(), "child_process")
}

/// Hangs in its body, after telling the parent, until the process is killed.
#[tool(risk = "LOW_WRITE", domain = "fa")]
pub(crate) fn hang_forever() -> Result<(), Denied> {
    println!("hanging");
    std::thread::sleep(Duration::from_secs(3600));
    Ok(())
}

/// The child's part (run again by the parent with `ROLE` set); nothing to do otherwise.
#[test]
pub(crate) fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "hang");
    let url = std::env::var(CHILD_URL).unwrap();
    let gate = audited_gate(&url, "killed", Duration::from_secs(2));
    for i in 0..10 {
        gate.run(|| mark(format!("child-{i}"))).unwrap();
    }
    let _ = gate.run(hang_forever);
}

// ---------------------------------------------------------------------------------------------------
// Fleet names, frozen servers and forged trail rows
// ---------------------------------------------------------------------------------------------------

pub(crate) static STAMPS: Mutex<Vec<Instant>> = Mutex::new(Vec::new());

/// Records when its body ran.
#[tool(risk = "LOW_WRITE", domain = "fa")]
pub(crate) fn stamp() -> Result<(), Denied> {
    STAMPS.lock().unwrap().push(Instant::now());
    Ok(())
}

/// Processes stopped with SIGSTOP (a server frozen, not gone), continued when dropped.
pub(crate) struct Frozen(Vec<u32>);

impl Frozen {
    /// Stops the postmaster, then every process it started (its backends and helpers).
    pub(crate) fn postmaster(pid: u32) -> Frozen {
        let mut frozen = Frozen(Vec::new());
        frozen.stop(pid);
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // `pid (comm) state ppid ...`: the parent comes after the last `)`.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            if parent == Some(pid) {
                frozen.stop(child);
            }
        }
        frozen
    }

    pub(crate) fn stop(&mut self, pid: u32) {
        let done = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(done.success(), "SIGSTOP {pid}");
        self.0.push(pid);
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for pid in self.0.iter().rev() {
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
    }
}

/// Runs `sql` on `url`, the server's error as text rather than a panic.
pub(crate) fn try_query(url: &str, sql: &str) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        client.batch_execute(sql).await.map_err(|e| {
            e.as_db_error()
                .map_or(e.to_string(), |db| db.message().to_owned())
        })
    })
}

/// A second role for the trail, with the rights a sink's role has and no more: `SELECT` and `INSERT`
/// on the audit tables, and what a sink's connection needs to check the schema (its version, and the
/// rights to run its `CREATE ... IF NOT EXISTS`, which give none on the trail's tables). Its URL.
pub(crate) fn trail_role(url: &str, name: &str) -> String {
    let role = format!("{name}_{}", std::process::id());
    let database = url.rsplit('/').next().unwrap();
    query(
        url,
        &format!(
            "CREATE ROLE {role} LOGIN;
             GRANT CREATE ON DATABASE {database} TO {role};
             GRANT USAGE, CREATE ON SCHEMA toolgate TO {role};
             GRANT SELECT ON toolgate.schema_version TO {role};
             GRANT SELECT, INSERT ON toolgate.audit, toolgate.audit_checkpoints TO {role};"
        ),
    );
    url.replacen("toolgate@", &format!("{role}@"), 1)
}

/// Appends to `writer`'s chain, through `via`, a correctly hashed `enter` and `exit` of a
/// `fa.wire_money` call approved by `cfo` (copies of the writer's last two rows, edited and chained).
pub(crate) fn forge_wire_money(read: &str, via: &str, writer: &str) -> Result<(), String> {
    let rows = query(
        read,
        &format!(
            "SELECT seq, hash, line FROM toolgate.audit WHERE writer = '{writer}'
             ORDER BY seq DESC LIMIT 2"
        ),
    );
    let mut seq: u64 = rows[0][0].as_deref().unwrap().parse().unwrap();
    let mut prev = rows[0][1].clone().unwrap();
    let mut sql = String::new();
    for (row, stage) in rows.iter().rev().zip(["enter", "exit"]) {
        let mut fields: std::collections::BTreeMap<String, serde_json::Value> =
            serde_json::from_str(row[2].as_deref().unwrap()).unwrap();
        seq += 1;
        fields.remove("hash");
        fields.insert("seq".into(), seq.into());
        fields.insert("prev_hash".into(), prev.clone().into());
        fields.insert("stage".into(), stage.into());
        fields.insert("tool".into(), "fa.wire_money".into());
        fields.insert("by".into(), "cfo".into());
        fields.insert("call".into(), 999_999.into());
        fields.insert(
            "arguments".into(),
            r#"{"amount":950000,"to":"attacker"}"#.into(),
        );
        let body = serde_json::to_string(&fields).unwrap();
        let hash = chained_hash(&prev, &body);
        fields.insert("hash".into(), hash.clone().into());
        let line = serde_json::to_string(&fields).unwrap().replace('\'', "''");
        let gate = fields["gate"].as_u64().unwrap();
        sql.push_str(&format!(
            "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, line)
             VALUES ('{writer}', {seq}, '{prev}', '{hash}', '{stage}', 'fa.wire_money', {gate}, 999999,
                 '{line}');"
        ));
        prev = hash;
    }
    try_query(via, &sql)
}

/// The key's file and the checkpoints that sign with it.
pub(crate) fn trail_key(
    scratch: &common::Scratch,
    name: &str,
) -> (std::path::PathBuf, Checkpoints) {
    let key = SigningKey::generate().unwrap();
    let file = scratch.path(&format!("{name}.pub"));
    std::fs::write(&file, key.public_key().to_public_key_pem()).unwrap();
    (file, Checkpoints::new(key).every_records(2))
}

/// The highest record of `writer` that one of its checkpoints covers.
pub(crate) fn signed_through(url: &str, writer: &str) -> u64 {
    query(
        url,
        &format!(
            "SELECT coalesce(max(head_seq), 0) FROM toolgate.audit_checkpoints WHERE writer = '{writer}'"
        ),
    )[0][0]
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

pub(crate) fn last_seq(url: &str, writer: &str) -> u64 {
    query(
        url,
        &format!("SELECT coalesce(max(seq), 0) FROM toolgate.audit WHERE writer = '{writer}'"),
    )[0][0]
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

/// A live signed writer `name` (a checkpoint every 2 records) through a gate that has run 5 calls,
/// their records all committed; the key's file.
pub(crate) fn live_signed_writer(
    scratch: &common::Scratch,
    url: &str,
    name: &str,
) -> (Gate, std::path::PathBuf) {
    let (key_file, checkpoints) = trail_key(scratch, name);
    let sink = PostgresSink::builder()
        .writer(name)
        .checkpoints(checkpoints)
        .timeout(Duration::from_secs(2))
        .connect(url)
        .unwrap();
    let gate = audited(sink);
    for n in 0..5 {
        gate.run(|| mark(format!("{name}-{n}"))).unwrap();
    }
    assert!(eventually(Duration::from_secs(5), || {
        records(url, name)
            .iter()
            .filter(|r| r.stage == Stage::Exit)
            .count()
            == 5
    }));
    (gate, key_file)
}

/// Calls `mark` through `gate` (tags `prefix-0`, `prefix-1`, ...) until `wanted` calls ran or ten
/// seconds passed; how many ran.
pub(crate) fn runs_within_ten_seconds(gate: &Gate, prefix: &str, wanted: u32) -> u32 {
    runs_within(gate, prefix, wanted, Duration::from_secs(10))
}

/// How many of the calls `mark("{prefix}-{i}")` ran, made one after another until `wanted` ran or
/// `within` passed.
pub(crate) fn runs_within(gate: &Gate, prefix: &str, wanted: u32, within: Duration) -> u32 {
    let deadline = Instant::now() + within;
    let mut oks = 0;
    let mut i = 0;
    while oks < wanted && Instant::now() < deadline {
        if gate.run(|| mark(format!("{prefix}-{i}"))).is_ok() {
            oks += 1;
        }
        i += 1;
    }
    oks
}

/// Asserts that every call of this process whose tag starts with `prefix` that ran has its `enter`
/// record in the trail of `writer`.
#[track_caller]
pub(crate) fn assert_every_run_entered(url: &str, writer: &str, prefix: &str) {
    let entered: HashSet<String> = records(url, writer)
        .iter()
        .filter(|r| r.stage == Stage::Enter)
        .filter_map(tag_of)
        .collect();
    for tag in RAN.lock().unwrap().iter().filter(|t| t.starts_with(prefix)) {
        assert!(entered.contains(tag), "{tag} ran without its enter record");
    }
}

/// Ends every other connection to the database of `url`.
pub(crate) fn terminate_backends(url: &str) {
    query(
        url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    );
}

/// The call `wait_body(tag)` on `gate` in a thread of its own, once its body runs: the sender that lets
/// the body return, and the thread.
pub(crate) fn call_held_in_its_body(
    gate: &Gate,
    tag: &str,
) -> (
    mpsc::Sender<()>,
    std::thread::JoinHandle<Result<(), Denied>>,
) {
    let (go, wait) = mpsc::channel();
    // `wait_body` takes the channel from GO: another test may use it too, so wait until it is free.
    assert!(eventually(Duration::from_secs(30), || GO
        .lock()
        .unwrap()
        .is_none()));
    *GO.lock().unwrap() = Some(wait);
    let g = gate.clone();
    let owned = tag.to_owned();
    let call = std::thread::spawn(move || g.run(|| wait_body(owned)));
    assert!(eventually(Duration::from_secs(5), || ran(tag)));
    (go, call)
}

/// A new database `name`, a proxy in front of its server, and a gate audited through the proxy as the
/// writer `name` (the sink's `timeout`) that has made one call, `{name}-warm`.
pub(crate) fn warm_gate_behind_proxy(name: &str, timeout: Duration) -> (String, Proxy, Gate) {
    let url = database(name);
    let proxy = Proxy::new(&url);
    let gate = audited_gate(&proxy.url(&url), name, timeout);
    gate.run(|| mark(format!("{name}-warm"))).unwrap();
    (url, proxy, gate)
}

/// A new database `name`, a proxy in front of its server, and a PARTIAL_AUTO gate of the fleet `name`
/// (with `grace_ms`) reached through the proxy.
pub(crate) fn member_behind_proxy(name: &str, grace_ms: u64) -> (String, Proxy, Fleet, Gate) {
    let url = database(name);
    let proxy = Proxy::new(&url);
    let fleet = member_fleet(&proxy.url(&url), name, grace_ms);
    let gate = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    (url, proxy, fleet, gate)
}

/// Asserts that the trail of `url` verifies, and that every `enter` of `writer` has its `exit`; `lost`
/// says what an `enter` without one would mean.
#[track_caller]
pub(crate) fn assert_intact_and_paired(url: &str, writer: &str, lost: &str) {
    let report = verify_trail(url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let unpaired: Vec<Option<String>> = unpaired_enters(url, writer).iter().map(tag_of).collect();
    assert!(unpaired.is_empty(), "{lost}: {unpaired:?}");
}
