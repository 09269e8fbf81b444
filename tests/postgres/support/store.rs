//! The tools of the tests that attack the approval store (`atk3_*`): counted runs, a redacted PIN, an
//! escalating shell, and gates and SQL helpers over the store's tables.

pub(crate) use super::{
    HIDDEN, any_token, approve, assert_shown_escaped, cli, code, hidden_text, out, pending_id, wait,
};
pub(crate) use crate::common;

pub(crate) use std::process::Command;
pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
pub(crate) use std::sync::{Arc, Barrier, Mutex};
pub(crate) use std::time::{Duration, Instant};

pub(crate) use crate::common::postgres::{Cluster, database, query};
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

pub(crate) fn sha256_hex(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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

// ---------------------------------------------------------------------------------------------------
// A1. Used at most once: threads and tokio tasks on four gates over two stores (two connections) race
// for one approval per round, sync and async tools in turn.

// ---------------------------------------------------------------------------------------------------
// A2. Used at most once: after its call used it, the old token (and the request id) answers nothing,
// and the call stays refused.

// ---------------------------------------------------------------------------------------------------
// A3. Bound to the call: other arguments, another redacted value (same shown digest), another tool with
// identical arguments, another tool with the same function name. Another agent label is documented as
// outside the binding ("an operator answers the call, wherever it is made").

// ---------------------------------------------------------------------------------------------------
// A4. Escalation: an escalated call needs an approval, is stored and shown at its effective risk, and its
// approval, at that risk, runs it once; the same arguments at a lower risk never consume it.

// ---------------------------------------------------------------------------------------------------
// A5. Expiry and the time to live: zero and more than a day refused at connect (never a panic);
// a request answered after it expired is refused by every channel, and its call never runs.

// ---------------------------------------------------------------------------------------------------
// A6. Tokens are never stored (only SHA-256), never in what the agent sees (message, Display, JSON, a
// by-name error), never in the audit log or the command's output; and long enough that the stored
// hash cannot be inverted by guessing.

// ---------------------------------------------------------------------------------------------------
// A7. Bounded per agent, under concurrency: sixteen threads on two stores (two connections) for one
// agent label, each making distinct calls at once, hold at most the bound; another agent still asks.

// ---------------------------------------------------------------------------------------------------
// A8. Fails closed, bounded in time: with the table locked by another session, a sync and an async call
// are refused APPROVAL_STORE_UNAVAILABLE within about the timeout; after the lock goes, the approval
// runs its call at most once.

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

// ---------------------------------------------------------------------------------------------------
// A9. Fails closed on rows the store did not write: unknown answers, NULLs, a bogus risk or mode. The
// call never runs, never panics, and is refused with an approval code.

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

// ---------------------------------------------------------------------------------------------------
// A10. Fails closed when the table is dropped or altered, or the schema is newer than the crate.

// ---------------------------------------------------------------------------------------------------
// A11. Schema names: what is not a plain lowercase identifier is refused before any SQL (no injection),
// by the builder and by the command; two schemas in one database do not answer each other's calls.

// ---------------------------------------------------------------------------------------------------
// A12. SQL injection and terminal injection through tool arguments, `--by`, `--reason`, and NUL bytes
// in what PostgreSQL text cannot hold (an agent label, a name, a reason).

// ---------------------------------------------------------------------------------------------------
// A13. The command's ids and exit codes: unknown, malformed, overflowing, injected ids; answered,
// rejected, used and expired requests; a missing or empty `--by`.

// ---------------------------------------------------------------------------------------------------
// A14. `--for-session`: the grant covers that call's arguments only, on the gate that used the answer
// (and its clones), and says who granted it; other arguments, other gates, other tools still ask.

// ---------------------------------------------------------------------------------------------------
// A15. `reject --stop` with a reason on several lines: the agent reads the reason as given, the gate that
// reads it goes to SHADOW and says who; another gate is untouched; the audit log names the operator.

// ---------------------------------------------------------------------------------------------------
// A16. Operators racing: many answers to one request at once (threads over two connections, and two
// command processes approving and rejecting): one wins, the others are told so, and the call does what
// the winner said, once.

// ---------------------------------------------------------------------------------------------------
// A17. Fails closed when the server goes: stopped (sync, async, operator's channels, the command), its
// connections killed; unreachable at connect, within the timeout. Nothing approved runs twice.

// ---------------------------------------------------------------------------------------------------
// A18. Who answered is in the audit log of the process that runs or refuses the call: an approval by
// token through another gate, by id through the store, by the command; a rejection likewise.

// ---------------------------------------------------------------------------------------------------
// A19. Fails closed on a broken invariant: an approved row whose `answered_by` is NULL (the command
// refuses an empty `--by` with 64, so no operator can write it) must not run its call under an audit
// record whose `by` is empty: SECURITY.md, "a store that ... answers what it should not refuses the call
// with APPROVAL_STORE_UNAVAILABLE"; `StoreError::Unexpected` is "a row of an unknown shape, a broken
// invariant".

// ---------------------------------------------------------------------------------------------------
// A20. What an agent or another writer of the database controls (arguments, the tool id, the agent
// label, the principal, who answered and why) is shown escaped by every `toolgate approvals` command:
// characters that reorder text, C1 controls and invisible characters would make a request look like
// another (`alice\u{200b}` for `alice`).
