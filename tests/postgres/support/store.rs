//! The tools of the tests that attack the approval store (`atk3_*`): counted runs, a redacted PIN, an
//! escalating shell, and gates and SQL helpers over the store's tables.

pub(crate) use super::{
    HIDDEN, any_token, approve, assert_answer_lost, assert_pending, assert_refused,
    assert_shown_escaped, assert_store_unavailable, cli, cli_exits, code, hidden_text, out,
    pending_id, pending_wire_id, sha256_hex, store_on_own_cluster, wait,
};
pub(crate) use crate::common;

pub(crate) use std::process::Command;
pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
pub(crate) use std::sync::{Arc, Barrier, Mutex};
pub(crate) use std::time::{Duration, Instant};

pub(crate) use crate::common::postgres::{database, query};
pub(crate) use toolgate::approval::store::{Answer, ApproveError};
pub(crate) use toolgate::audit::{AuditRecord, Decision, MemorySink, Stage};
pub(crate) use toolgate::postgres::{PostgresStore, RequestState};
pub(crate) use toolgate::{DenialCode, Denied, Gate, Mode, Risk, tool};

// ---------------------------------------------------------------------------------------------------
// Tools. Every run of a body is logged as `tool:key`, so a test counts the runs of exactly its calls.

pub(crate) static RUNS: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn ran(tool: &str, key: impl std::fmt::Display) {
    RUNS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(format!("{tool}:{key}"));
}

pub(crate) fn runs(tool: &str, key: impl std::fmt::Display) -> usize {
    let wanted = format!("{tool}:{key}");
    RUNS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|r| **r == wanted)
        .count()
}

/// Hit once per round (sync).
#[tool(risk = "HIGH_WRITE", domain = "atk3_race", record_arguments)]
pub(crate) fn hit(round: u64) -> Result<(), Denied> {
    ran("hit", round);
    Ok(())
}

/// Hit once per round (async).
#[tool(risk = "HIGH_WRITE", domain = "atk3_race", record_arguments)]
pub(crate) async fn hit_async(round: u64) -> Result<(), Denied> {
    ran("hit_async", round);
    Ok(())
}

/// Wire money with a PIN nobody sees.
#[tool(risk = "HIGH_WRITE", domain = "atk3_bank", redact = [pin], record_arguments)]
pub(crate) fn wire(account: String, cents: u64, pin: String) -> Result<(), Denied> {
    ran("wire", format!("{account}/{cents}/{pin}"));
    Ok(())
}

pub(crate) mod other {
    use super::*;
    /// The same function name and arguments, in another domain: another tool.
    #[tool(risk = "HIGH_WRITE", domain = "atk3_other", redact = [pin], record_arguments)]
    pub fn wire(account: String, cents: u64, pin: String) -> Result<(), Denied> {
        ran("other.wire", format!("{account}/{cents}/{pin}"));
        Ok(())
    }
}

/// Pay with a free-text note (a place for SQL and control characters).
#[tool(risk = "HIGH_WRITE", domain = "atk3_bank", record_arguments)]
pub(crate) fn pay(note: String) -> Result<(), Denied> {
    ran("pay", &note);
    Ok(())
}

/// Close an account, asynchronously.
#[tool(risk = "HIGH_WRITE", domain = "atk3_bank", record_arguments)]
pub(crate) async fn close(account: String) -> Result<(), Denied> {
    ran("close", &account);
    Ok(())
}

pub(crate) static ESCALATE_ALL: AtomicBool = AtomicBool::new(false);

pub(crate) fn classify(command: &str) -> Risk {
    if ESCALATE_ALL.load(Ordering::SeqCst) || command.split_whitespace().any(|w| w == "sudo") {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

/// Run a command, escalated by `sudo`.
#[tool(risk = "LOW_WRITE", domain = "atk3_shell", escalate = classify, record_arguments)]
pub(crate) fn exec(command: String) -> Result<(), Denied> {
    ran("exec", &command);
    Ok(())
}

// ---------------------------------------------------------------------------------------------------
// Helpers.

pub(crate) fn connect(url: &str) -> PostgresStore {
    PostgresStore::builder()
        .timeout(Duration::from_secs(10))
        .connect(url)
        .expect("the store")
}

pub(crate) fn gate_on(store: Arc<PostgresStore>, agent: &str, sink: Option<&MemorySink>) -> Gate {
    let mut builder = Gate::builder()
        .mode(Mode::FullAuto)
        .agent(agent)
        .approval_store_shared(store);
    if let Some(sink) = sink {
        builder = builder.audit(sink.clone());
    }
    builder.build().expect("a gate")
}

/// The test held alone (`common::serial`), a new database `name`, and a store connected to it.
pub(crate) fn serial_store(
    name: &str,
) -> (
    std::sync::MutexGuard<'static, ()>,
    String,
    Arc<PostgresStore>,
) {
    let serial = common::serial();
    let url = database(name);
    let store = Arc::new(connect(&url));
    (serial, url, store)
}

/// The id of the request that `token` answers, in the store of `url`.
pub(crate) fn id_of_token(url: &str, token: &str) -> String {
    query(
        url,
        &format!(
            "SELECT id FROM toolgate.approvals WHERE token_sha256 @> ARRAY['{}']",
            sha256_hex(token)
        ),
    )[0][0]
        .clone()
        .unwrap()
}

/// `pay(note)` asked of `gate` and left waiting: the id of its request in `store`.
pub(crate) fn pending_pay(gate: &Gate, store: &PostgresStore, note: &str) -> i64 {
    any_token(gate.run(|| pay(note.into())));
    pending_id(store, "atk3_bank.pay", &format!(r#"{{"note":"{note}"}}"#))
}

/// A gate of `agent` over `store` auditing into a memory sink, and that sink.
pub(crate) fn audited_gate_on(store: &Arc<PostgresStore>, agent: &str) -> (MemorySink, Gate) {
    let sink = MemorySink::new();
    let gate = gate_on(store.clone(), agent, Some(&sink));
    (sink, gate)
}

/// A gate of `agent` over a store of its own on the database of `url`, as another process has.
pub(crate) fn gate_elsewhere(url: &str, agent: &str) -> Gate {
    gate_on(Arc::new(connect(url)), agent, None)
}

/// Runs `sql`, returning the error's text instead of panicking.
pub(crate) fn exec_sql(url: &str, sql: &str) -> Result<(), String> {
    wait(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        client
            .batch_execute(sql)
            .await
            .map_err(|e| format!("{e:?}"))
    })
}

/// Every row of every table of the database, as text.
pub(crate) fn dump_database(url: &str) -> String {
    let tables = query(
        url,
        "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
         WHERE table_schema NOT IN ('pg_catalog', 'information_schema')",
    );
    let mut text = String::new();
    for table in tables.into_iter().flatten().flatten() {
        for row in query(url, &format!("SELECT t::text FROM {table} AS t")) {
            for column in row.into_iter().flatten() {
                text.push_str(&column);
                text.push('\n');
            }
        }
    }
    text
}

pub(crate) fn approval_codes() -> [DenialCode; 7] {
    [
        DenialCode::ApprovalRequired,
        DenialCode::ApprovalPending,
        DenialCode::ApprovalRejected,
        DenialCode::ApprovalStoreUnavailable,
        DenialCode::ApprovalExpired,
        DenialCode::ApprovalMismatch,
        DenialCode::ApprovalReused,
    ]
}

/// The `by` of the first record of `stage` (and `decision`, when given) for `tool`.
pub(crate) fn by_of(
    records: &[AuditRecord],
    stage: Stage,
    decision: Option<Decision>,
    tool: &str,
) -> Vec<Option<String>> {
    records
        .iter()
        .filter(|r| {
            r.stage == stage && r.tool == tool && (decision.is_none() || r.decision == decision)
        })
        .map(|r| r.by.clone())
        .collect()
}

/// The `by` of the records of calls of `tool` that ran on an operator's approval.
pub(crate) fn approved_by(records: &[AuditRecord], tool: &str) -> Vec<Option<String>> {
    by_of(records, Stage::Enter, Some(Decision::Approved), tool)
}

/// What `f` returns, which it must return within `limit`.
#[track_caller]
pub(crate) fn within<T>(limit: Duration, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let value = f();
    assert!(
        started.elapsed() < limit,
        "took {:?}, more than {limit:?}",
        started.elapsed()
    );
    value
}

pub(crate) struct Holder {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) client: tokio_postgres::Client,
}

impl Holder {
    pub(crate) fn new(url: &str, sql: &str) -> Holder {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(async {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            client.batch_execute(sql).await.unwrap();
            client
        });
        Holder { rt, client }
    }

    pub(crate) fn run(&self, sql: &str) {
        self.rt.block_on(self.client.batch_execute(sql)).unwrap();
    }
}

pub(crate) fn drop_checks(url: &str) {
    let checks = query(
        url,
        "SELECT conname FROM pg_constraint WHERE conrelid = 'toolgate.approvals'::regclass AND contype = 'c'",
    );
    for name in checks.into_iter().flatten().flatten() {
        exec_sql(
            url,
            &format!("ALTER TABLE toolgate.approvals DROP CONSTRAINT \"{name}\""),
        )
        .unwrap();
    }
    for column in ["for_session", "stop", "mode", "risk", "token_sha256"] {
        exec_sql(
            url,
            &format!("ALTER TABLE toolgate.approvals ALTER COLUMN {column} DROP NOT NULL"),
        )
        .unwrap();
    }
}
