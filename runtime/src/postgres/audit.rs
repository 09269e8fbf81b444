//! The audit trail in PostgreSQL: one table for every process, each writer its own hash chain, and a
//! group commit that lets concurrent calls share one round trip and one WAL flush.

use std::fmt;
use std::sync::mpsc as sync_mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_postgres::{Client, Statement};

use super::link::{self, Held, Link, Opened, Schema, Session};
use super::schema::{self, DEFAULT_SCHEMA, DEFAULT_TIMEOUT, lock_key, store_error, valid_schema};
use crate::approval::store::StoreError;
use crate::audit::chain::{Encoder, GENESIS, HashHex, parse_hash};
use crate::audit::checkpoint::{Checkpoint, Checkpointer, Checkpoints};
use crate::audit::{AuditError, AuditFuture, AuditRecord, AuditSink, Stage};

/// Records one group commit carries at the most.
const MAX_GROUP: usize = 4096;

/// Records that no call waits on, kept for the server while it cannot be reached; past this many, new
/// ones are lost (and said so through `tracing`).
const MAX_UNSENT: usize = 100_000;

/// Groups whose commit is in doubt that a sink remembers, to recognize one in the table later.
const MAX_ATTEMPTS: usize = 1024;

/// An [`AuditSink`] that writes every record into one PostgreSQL table shared by every process, each
/// writer (one sink: a process's gates) keeping its own hash chain there.
///
/// ```no_run
/// # extern crate toolgate_runtime as toolgate;
/// use toolgate::postgres::PostgresSink;
/// use toolgate::{Gate, Mode};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let sink = PostgresSink::builder()
///     .writer("payments-api-1")
///     .connect("postgres://toolgate@db.internal/agents")?;
/// let gate = Gate::builder().mode(Mode::PartialAuto).audit(sink).build()?;
/// # drop(gate);
/// # Ok(())
/// # }
/// ```
///
/// # What it guarantees
///
/// - **The body runs after its record is committed.** An `enter` record is committed (the server has
///   flushed its WAL, with the default `synchronous_commit`) before [`record`](AuditSink::record)
///   returns, and before the future of [`record_async`](AuditSink::record_async) resolves; otherwise
///   the call is refused with `AUDIT_UNAVAILABLE`. Other records (exits, refusals, lowered modes:
///   nothing waits on them) are queued and committed with the next group; [`flush`](AuditSink::flush)
///   and dropping the sink wait for them.
/// - **Group commit.** One thread per sink holds its connection. Records that arrive while a commit is
///   in flight are chained and inserted together by the next one, in one statement: with `k` calls in
///   flight, one round trip and one WAL flush carry up to `k` records.
/// - **One chain per writer, one writer per name.** Each row carries `writer`, `seq` (from 1),
///   `prev_hash` and `hash`, chained exactly as the lines of a [`JsonlSink`](crate::audit::JsonlSink)
///   are, and `line`, the record's canonical line as that sink would write it. The sink holds a
///   session advisory lock on its writer name while connected: a second sink with the same name, in
///   any process, is refused instead of forking the chain.
/// - **A name is its first user's.** A writer name is bound, at its first use in the schema, to the
///   database role that used it and to the public key of its [checkpoints](PostgresSinkBuilder::checkpoints)
///   (none for a sink without them), in `audit_writers`. The server refuses rows and checkpoints under
///   a name bound to another role; a sink with another key, or without the key of a name that has one,
///   is refused when it connects. Give each writer (or each group of writers one party runs) a role of
///   its own: names are bound to roles, and a role can only keep others off its names.
/// - **Only its own rows.** The sink keeps the last record it wrote; after a failure it takes up its
///   chain from the table only at that record or at the last record of a group whose commit it did not
///   learn. Any other row (one another process wrote under its name) makes it refuse every call
///   (`AUDIT_UNAVAILABLE`, saying so) rather than chain on it or sign it. A sink that signs
///   checkpoints continues a chain when it starts only if the chain's last record is the head of the
///   last checkpoint its key signed for the name: records after that (written by another process,
///   or by one that crashed before its checkpoint) are refused, not vouched for; start under a new
///   name. A sink without checkpoints takes up the chain as it finds it: nothing signs it.
/// - **Fails closed, then continues.** A failed or timed-out commit refuses every call whose `enter`
///   it carried; the connection is opened again by the next group, which reads the writer's last
///   committed record from the table and chains on from it, if it is its own (below). A group that committed but whose reply
///   was lost refuses its calls too (their bodies did not run): `verify` then reports those `enter`
///   records as interrupted, not as tampering. The records of a failed group that no call waits on
///   (exits, refusals, lowered modes, a lost fleet) are kept, in order, and sent again with the next
///   group, unless the table shows that the failed group committed after all; at most 100,000 wait
///   so, and the rest are lost (said through `tracing`).
///
/// # The table
///
/// Made with the approval store's and the fleet's tables by `toolgate migrate` (see
/// [the schema](super#the-schema)); in schema `toolgate` unless [`PostgresSinkBuilder::schema`] names
/// another:
///
/// ```sql
/// CREATE TABLE toolgate.audit (
///     writer     text NOT NULL,               -- whose chain
///     seq        bigint NOT NULL CHECK (seq > 0),
///     prev_hash  text NOT NULL,
///     hash       text NOT NULL,
///     stage      text NOT NULL,               -- copies of the line's members, for queries
///     tool       text NOT NULL,
///     gate       bigint NOT NULL,
///     call       bigint NOT NULL,
///     line       text NOT NULL,               -- the canonical line: what is hashed and verified
///     written_at timestamptz NOT NULL DEFAULT now(),
///     PRIMARY KEY (writer, seq)
/// );
/// ```
///
/// Beside it, `audit_checkpoints` holds the signed checkpoints, and `audit_writers` (`writer` as
/// primary key, `role`, `public_key`, `bound_at`) the binding of each writer name to its role and key.
///
/// Query the record's fields with `line::jsonb` (`SELECT line::jsonb ->> 'code' FROM toolgate.audit`).
/// The role needs `SELECT` and `INSERT` on `audit` and `audit_checkpoints` ([Roles](super#roles));
/// it needs neither `UPDATE` nor `DELETE`, and should not have them, nor any right on `audit_writers`
/// (the bindings of names, written by functions that run as the schema's owner). `toolgate audit
/// verify postgres://…` checks every writer's chain.
pub struct PostgresSink {
    jobs: Option<mpsc::UnboundedSender<Job>>,
    thread: Option<JoinHandle<()>>,
    writer: String,
}

/// Configures a [`PostgresSink`]: `PostgresSink::builder().writer(..).connect(url)`.
#[derive(Debug, Clone)]
#[must_use]
pub struct PostgresSinkBuilder {
    writer: Option<String>,
    schema: String,
    timeout: Duration,
    checkpoints: Option<Checkpoints>,
    migrate: bool,
}

impl PostgresSinkBuilder {
    /// The name of this sink's chain. Unless set: the host name, the process id and a random suffix,
    /// so that every process writes its own. A name given here continues its chain when a process
    /// starts again with it (on the same database role, with the same key or none, and, with a key,
    /// when its last checkpoint covers the chain's last record); while one sink holds it, another is
    /// refused.
    pub fn writer(mut self, name: impl Into<String>) -> Self {
        self.writer = Some(name.into());
        self
    }

    /// The schema of the tables (`toolgate` unless set): lowercase letters, digits and `_`.
    pub fn schema(mut self, schema: &str) -> Self {
        schema.clone_into(&mut self.schema);
        self
    }

    /// How long a commit may take, connecting included (2 seconds unless set); past it, the calls it
    /// carried are refused with `AUDIT_UNAVAILABLE`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Signs a checkpoint of the writer's chain every N records or T seconds, and a final one when the
    /// sink is dropped, into `audit_checkpoints` (see [`Checkpoints`]): `toolgate audit verify
    /// postgres://… --public-key FILE` then shows a rewritten chain, one cut short before its last
    /// checkpoint, and a checkpoint copied from another writer. A checkpoint is written after the
    /// records it covers are committed.
    pub fn checkpoints(mut self, checkpoints: Checkpoints) -> Self {
        self.checkpoints = Some(checkpoints);
        self
    }

    /// Creates the schema, or brings it to this crate's version, when connecting, as
    /// [`migrate`](super::migrate) does: for a role that may. Off unless set: the sink then only checks
    /// the schema's version.
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// Connects to the server at `url`, checks the schema's version (or, with
    /// [`migrate`](PostgresSinkBuilder::migrate), migrates it) and takes the writer's name, within the
    /// timeout. It blocks the calling thread until then. Its errors name the audit trail.
    pub fn connect(self, url: &str) -> Result<PostgresSink, StoreError> {
        self.connect_sink(url)
            .map_err(|error| schema::naming(error, "the audit trail"))
    }

    fn connect_sink(self, url: &str) -> Result<PostgresSink, StoreError> {
        let invalid = |why: String| Err(StoreError::Unavailable(format!("not configured: {why}")));
        if !valid_schema(&self.schema) {
            return invalid(format!(
                "the schema name {:?} is not lowercase letters, digits and `_`",
                self.schema
            ));
        }
        if self.timeout.is_zero() {
            return invalid("the timeout must be more than zero".into());
        }
        if let Some(checkpoints) = &self.checkpoints
            && let Err(error) = checkpoints.check()
        {
            return invalid(error.to_string());
        }
        let writer = match self.writer {
            Some(writer) if writer.trim().is_empty() || writer.chars().any(char::is_control) => {
                return invalid(format!(
                    "the writer name {writer:?} is empty or has control characters"
                ));
            }
            Some(writer) => writer,
            None => default_writer(),
        };
        // A writer a person reads as another would have its chain taken for theirs (SECURITY.md,
        // names that read alike).
        if let Some(why) = crate::names::refusal(&writer) {
            return invalid(format!("the writer name is refused: {why}"));
        }
        let link = Link::new(url, self.timeout, "toolgate-audit")?;
        let claim = Claim {
            lock: writer_lock(&self.schema, &writer),
            schema: self.schema.clone(),
            writer: writer.clone(),
            key: self
                .checkpoints
                .as_ref()
                .map(|policy| policy.public_key().to_public_key_pem()),
        };
        let step = Schema::migrating(self.migrate);
        let worker = Worker {
            held: Held::new(link, &self.schema, step, None, claim),
            timeout: self.timeout,
            chain: Chain {
                schema: self.schema,
                writer: writer.clone(),
                head: None,
                known: None,
                attempts: Vec::new(),
                encoder: Encoder::default(),
                policy: self.checkpoints,
                unsent: Vec::new(),
                failed_head: None,
                failed_covers: 0,
                signer: None,
            },
        };
        let (jobs, receiver) = mpsc::unbounded_channel();
        let thread = worker
            .spawn(receiver)
            .map_err(|e| StoreError::Unavailable(format!("cannot start the sink's thread: {e}")))?;
        let sink = PostgresSink {
            jobs: Some(jobs),
            thread: Some(thread),
            writer,
        };
        let (reply, connected) = sync_mpsc::sync_channel(1);
        sink.send(Job::Connect(reply))
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        match connected.recv() {
            Ok(result) => result.map(|()| sink),
            Err(_) => Err(StoreError::Unavailable("the sink's thread stopped".into())),
        }
    }
}

impl PostgresSink {
    /// A builder with the defaults: a writer name of the host, the process and a random suffix;
    /// schema `toolgate`; timeout 2 s.
    pub fn builder() -> PostgresSinkBuilder {
        PostgresSinkBuilder {
            writer: None,
            schema: DEFAULT_SCHEMA.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            checkpoints: None,
            migrate: false,
        }
    }

    /// Connects with the defaults; see [`PostgresSinkBuilder::connect`].
    pub fn connect(url: &str) -> Result<PostgresSink, StoreError> {
        PostgresSink::builder().connect(url)
    }

    /// The name of this sink's chain.
    pub fn writer(&self) -> &str {
        &self.writer
    }

    fn send(&self, job: Job) -> Result<(), AuditError> {
        self.jobs
            .as_ref()
            .and_then(|jobs| jobs.send(job).ok())
            .ok_or_else(|| AuditError::new("the audit sink's thread stopped"))
    }

    fn queue(&self, record: &AuditRecord, reply: Reply) -> Result<(), AuditError> {
        let fields = serde_json::to_vec(record)
            .map_err(|e| AuditError::new(format!("serializing an audit record: {e}")))?;
        self.send(Job::Record(Queued {
            fields,
            stage: record.stage,
            tool: record.tool.to_string(),
            gate: record.gate,
            call: record.call,
            reply,
        }))
    }
}

impl AuditSink for PostgresSink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if record.stage != Stage::Enter {
            return self.queue(record, Reply::None);
        }
        let (reply, committed) = sync_mpsc::sync_channel(1);
        self.queue(record, Reply::Blocking(reply))?;
        committed
            .recv()
            .unwrap_or_else(|_| Err(AuditError::new("the audit sink's thread stopped")))
    }

    fn record_async(&self, record: &AuditRecord) -> Option<AuditFuture> {
        if record.stage != Stage::Enter {
            let queued = self.queue(record, Reply::None);
            return Some(Box::pin(std::future::ready(queued)));
        }
        let (reply, committed) = oneshot::channel();
        let queued = self.queue(record, Reply::Async(reply));
        Some(Box::pin(async move {
            queued?;
            committed
                .await
                .unwrap_or_else(|_| Err(AuditError::new("the audit sink's thread stopped")))
        }))
    }

    /// Waits until every record queued so far is committed.
    fn flush(&self) -> Result<(), AuditError> {
        let (reply, flushed) = sync_mpsc::sync_channel(1);
        self.send(Job::Flush(reply))?;
        flushed
            .recv()
            .unwrap_or_else(|_| Err(AuditError::new("the audit sink's thread stopped")))
    }
}

impl Drop for PostgresSink {
    fn drop(&mut self) {
        // Closing the channel lets the thread commit what is queued, then end.
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for PostgresSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresSink")
            .field("writer", &self.writer)
            .finish_non_exhaustive()
    }
}

/// Who waits for a record's commit.
enum Reply {
    None,
    Blocking(sync_mpsc::SyncSender<Result<(), AuditError>>),
    Async(oneshot::Sender<Result<(), AuditError>>),
}

impl Reply {
    fn send(self, result: Result<(), AuditError>) {
        match self {
            Reply::None => {
                if let Err(error) = result {
                    tracing::error!(target: "toolgate::audit", %error, "audit record lost");
                }
            }
            Reply::Blocking(reply) => {
                let _ = reply.send(result);
            }
            Reply::Async(reply) => {
                let _ = reply.send(result);
            }
        }
    }
}

struct Queued {
    /// The record serialized: canonical JSON without the chain's members.
    fields: Vec<u8>,
    stage: Stage,
    tool: String,
    gate: u64,
    call: u64,
    reply: Reply,
}

enum Job {
    Connect(sync_mpsc::SyncSender<Result<(), StoreError>>),
    Record(Queued),
    Flush(sync_mpsc::SyncSender<Result<(), AuditError>>),
}

/// The sink's session: its writer's name locked and bound, and its statements prepared.
struct Conn {
    client: Client,
    insert: Statement,
    insert_checkpoint: Statement,
}

/// What the sink's session is made of.
struct Claim {
    schema: String,
    writer: String,
    /// The writer's session advisory lock.
    lock: i64,
    /// The public key of its checkpoints (PEM), if it signs them.
    key: Option<String>,
}

impl Session for Conn {
    type Setup = Claim;

    async fn start(opened: Opened, claim: &Claim) -> Result<Conn, StoreError> {
        let client = opened.client;
        // The lock of a sink that just ended (or a process just killed) is released when the server
        // notices its session is gone: a new sink of the same writer waits a little for it.
        let mut locked = false;
        for attempt in 0..20 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            locked = client
                .query_one("SELECT pg_try_advisory_lock($1)", &[&claim.lock])
                .await
                .map_err(|e| store_error(&e))?
                .try_get(0)
                .map_err(unexpected)?;
            if locked {
                break;
            }
        }
        if !locked {
            return Err(StoreError::Unavailable(format!(
                "another sink writes as writer {:?}; a writer has one chain, so one sink",
                claim.writer
            )));
        }
        // The name is bound to this role and this key (or to no key) at its first use; another role,
        // another key, or no key for a name that has one is refused.
        client
            .execute(
                &schema::sql("SELECT {s}.audit_bind($1, $2)", &claim.schema),
                &[&claim.writer, &claim.key],
            )
            .await
            .map_err(|e| store_error(&e))?;
        let insert = client
            .prepare(&schema::sql(
                "INSERT INTO {s}.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, line)
                 SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[],
                     $6::text[], $7::bigint[], $8::bigint[], $9::text[])",
                &claim.schema,
            ))
            .await
            .map_err(|e| store_error(&e))?;
        let insert_checkpoint = client
            .prepare(&schema::sql(
                "INSERT INTO {s}.audit_checkpoints (writer, seq, head_seq, checkpoint)
                 VALUES ($1, $2, $3, $4)",
                &claim.schema,
            ))
            .await
            .map_err(|e| store_error(&e))?;
        Ok(Conn {
            client,
            insert,
            insert_checkpoint,
        })
    }

    fn client(&self) -> &Client {
        &self.client
    }
}

struct Worker {
    held: Held<Conn>,
    /// How long a commit may take, connecting included.
    timeout: Duration,
    chain: Chain,
}

/// What the sink knows of its writer's chain, and the records that wait for the server.
struct Chain {
    schema: String,
    writer: String,
    /// The writer's last committed record, as the table has it; `None` until read from it, and again
    /// after any failure, whose commit may or may not have happened, and on a new connection.
    head: Option<(u64, HashHex)>,
    /// The last record this sink knows it wrote (or adopted when it connected): a row the table shows
    /// after a failure is taken up only if it is this one or one of `attempts`.
    known: Option<(u64, HashHex)>,
    /// The last record of each group sent since `known` whose commit is not known to have happened or
    /// not (a failure, a timeout, a lost reply).
    attempts: Vec<(u64, HashHex)>,
    encoder: Encoder,
    policy: Option<Checkpoints>,
    /// Records of failed groups that no call waits on, in order, to be sent again.
    unsent: Vec<Queued>,
    /// The head a failed group would have left: if the table has it, the group committed.
    failed_head: Option<(u64, HashHex)>,
    /// How many of `unsent`, from the first, that failed group carried.
    failed_covers: usize,
    /// The writer's checkpoint series, continued from the table's last checkpoint; read again with the
    /// head.
    signer: Option<Checkpointer>,
}

/// One group, encoded.
#[derive(Default)]
struct Rows {
    seqs: Vec<i64>,
    prev_hashes: Vec<String>,
    hashes: Vec<String>,
    stages: Vec<String>,
    tools: Vec<String>,
    gates: Vec<i64>,
    calls: Vec<i64>,
    lines: Vec<String>,
}

impl Worker {
    fn spawn(self, jobs: mpsc::UnboundedReceiver<Job>) -> std::io::Result<JoinHandle<()>> {
        link::thread("toolgate-audit-postgres", move || self.run(jobs))
    }

    async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        let mut group = Vec::new();
        let mut flushes = Vec::new();
        loop {
            // Idle, a checkpoint falls due by time alone.
            let first = match self.chain.policy.as_ref().map(Checkpoints::interval) {
                Some(interval) => match tokio::time::timeout(interval, jobs.recv()).await {
                    Ok(job) => job,
                    Err(_) => {
                        if !self.chain.unsent.is_empty() {
                            let _ = self.commit_group(&[]).await;
                        }
                        self.checkpoint_if_due(false).await;
                        continue;
                    }
                },
                None if !self.chain.unsent.is_empty() => {
                    // Records wait for the server: try again every so often, new records or not.
                    match tokio::time::timeout(self.timeout, jobs.recv()).await {
                        Ok(job) => job,
                        Err(_) => {
                            let _ = self.commit_group(&[]).await;
                            continue;
                        }
                    }
                }
                None => jobs.recv().await,
            };
            let Some(first) = first else { break };
            let mut next = Some(first);
            while let Some(job) = next.take() {
                match job {
                    Job::Connect(reply) => {
                        let connected = self.within_timeout(async |_, _| Ok(())).await;
                        let _ = reply.send(connected);
                    }
                    Job::Record(queued) => group.push(queued),
                    Job::Flush(reply) => flushes.push(reply),
                }
                if group.len() < MAX_GROUP {
                    next = jobs.try_recv().ok();
                }
            }
            let committed = match group.is_empty() && self.chain.unsent.is_empty() {
                true => Ok(()),
                false => self.commit_group(&group).await,
            };
            let result = || {
                committed
                    .as_ref()
                    .map(|_| ())
                    .map_err(|e| AuditError::new(format!("audit trail in PostgreSQL: {e}")))
            };
            for queued in group.drain(..) {
                match queued.reply {
                    Reply::None if committed.is_err() => self.chain.keep_unsent(queued),
                    _ => queued.reply.send(result()),
                }
            }
            for reply in flushes.drain(..) {
                let _ = reply.send(result());
            }
            if committed.is_ok() {
                self.checkpoint_if_due(false).await;
            }
        }
        if !self.chain.unsent.is_empty() && self.commit_group(&[]).await.is_err() {
            tracing::error!(
                target: "toolgate::audit",
                writer = %self.chain.writer,
                "{} audit records lost: the server could not be reached before the sink closed",
                self.chain.unsent.len()
            );
        }
        self.checkpoint_if_due(true).await;
        let lock = self.chain.lock_key();
        if let Some(conn) = self.held.current() {
            // Frees the writer's name at once, rather than when the server sees the session end.
            let _ = conn
                .client
                .execute("SELECT pg_advisory_unlock($1)", &[&lock])
                .await;
        }
    }

    /// Signs and stores a checkpoint over the committed head when one is due (or, `at_end`, a final
    /// one over every record). A failure is reported through `tracing` and forgets the series: it is
    /// read again from the table with the head.
    async fn checkpoint_if_due(&mut self, at_end: bool) {
        if self.chain.policy.is_none() {
            return;
        }
        if at_end && self.within_timeout(async |_, _| Ok(())).await.is_err() {
            tracing::error!(target: "toolgate::audit", writer = %self.chain.writer, "final checkpoint not written");
            return;
        }
        let chain = &mut self.chain;
        let (Some((head_seq, head_hash)), Some(signer)) = (chain.head, chain.signer.as_mut())
        else {
            return;
        };
        let since = head_seq.saturating_sub(signer.last_head_seq());
        let due = if at_end {
            head_seq > 0
        } else {
            signer.due(since, std::time::Instant::now())
        };
        if !due {
            return;
        }
        let checkpoint = signer.sign(head_seq, &hex(&head_hash), head_seq, at_end);
        let stored = self
            .within_timeout(async |chain: &mut Chain, conn: &Conn| {
                conn.client
                    .execute(
                        &conn.insert_checkpoint,
                        &[
                            &chain.writer,
                            &(checkpoint.seq as i64),
                            &(checkpoint.head_seq as i64),
                            &checkpoint.to_canonical_json(),
                        ],
                    )
                    .await
                    .map_err(|e| store_error(&e))
                    .map(drop)
            })
            .await;
        if let Err(error) = stored {
            tracing::error!(target: "toolgate::audit", %error, writer = %self.chain.writer, "checkpoint not written");
        }
    }

    /// `op` on the connection, within the sink's timeout ([`Held::run`]), once the writer's head is
    /// known: read from the table on a new connection, before anything is chained on it, since
    /// another group (or process) may have committed while the sink had none. After any failure the
    /// sink knows nothing of what the table holds, and reads it again.
    async fn within_timeout<T>(
        &mut self,
        op: impl AsyncFnOnce(&mut Chain, &Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let chain = &mut self.chain;
        let done = self
            .held
            .run(self.timeout, async |conn, opened| {
                if opened {
                    chain.head = None;
                }
                chain.ready(conn).await?;
                op(chain, conn).await
            })
            .await;
        if done.is_err() {
            self.chain.forget();
        }
        done
    }

    /// Chains and inserts a group in one statement, one commit.
    async fn commit_group(&mut self, group: &[Queued]) -> Result<(), StoreError> {
        self.within_timeout(async |chain, conn| chain.commit(conn, group).await)
            .await
    }
}

impl Chain {
    fn lock_key(&self) -> i64 {
        writer_lock(&self.schema, &self.writer)
    }

    /// After a failure, nothing is known of what the table holds.
    fn forget(&mut self) {
        self.head = None;
        self.signer = None;
    }

    /// Reads the writer's head where it is not known, and its checkpoint series.
    async fn ready(&mut self, conn: &Conn) -> Result<(), StoreError> {
        if self.head.is_none() {
            let row = conn
                .client
                .query_opt(
                    &schema::sql(
                        "SELECT seq, hash FROM {s}.audit WHERE writer = $1 ORDER BY seq DESC LIMIT 1",
                        &self.schema,
                    ),
                    &[&self.writer],
                )
                .await
                .map_err(|e| store_error(&e))?;
            let last = match row {
                None => (0, GENESIS),
                Some(row) => {
                    let seq: i64 = row.try_get(0).map_err(unexpected)?;
                    let hash: String = row.try_get(1).map_err(unexpected)?;
                    let hash = parse_hash(&hash).ok_or_else(|| {
                        StoreError::Unexpected(format!(
                            "the last record of writer {:?} has no valid hash: run `toolgate audit \
                             verify`",
                            self.writer
                        ))
                    })?;
                    (u64::try_from(seq).map_err(unexpected)?, hash)
                }
            };
            self.adopt(conn, last).await?;
        }
        if let (Some(policy), None) = (&self.policy, &self.signer) {
            let last = self.last_checkpoint(conn, policy).await?;
            self.signer = Some(Checkpointer::new(
                policy,
                self.writer.clone(),
                last.as_ref(),
            ));
        }
        Ok(())
    }

    /// Takes up the chain at `last`, the table's last row of the writer, if this sink can account for
    /// it: after a failure, the last record it wrote or one of the groups whose commit it did not
    /// learn; when it starts with a key, the head of its own last checkpoint (or an empty chain). A
    /// keyless sink starting takes the chain as it finds it: nothing signs it. Anything else is a row
    /// the sink did not write, after its own: it refuses to chain on it (and so to sign it), and every
    /// call it would carry is refused, until an operator has looked (`toolgate audit verify`).
    async fn adopt(&mut self, conn: &Conn, last: (u64, HashHex)) -> Result<(), StoreError> {
        let accounted = match self.known {
            Some(known) => known == last || self.attempts.contains(&last),
            None => match &self.policy {
                None => true,
                Some(policy) => {
                    let checkpoint = self.last_checkpoint(conn, policy).await?;
                    let covered = checkpoint.as_ref().map_or((0, Some(GENESIS)), |c| {
                        (c.head_seq, parse_hash(&c.head_hash))
                    });
                    if covered != (last.0, Some(last.1)) {
                        return Err(StoreError::Unexpected(format!(
                            "writer {:?}: records {} to {} are not covered by its last checkpoint \
                             signed with this sink's key: they may be rows the key's holder did not \
                             write (or a crash lost the checkpoint over them), and continuing the \
                             chain would sign them; refusing to continue it. See `toolgate audit \
                             verify --public-key`, and start under a new writer name",
                            self.writer,
                            covered.0 + 1,
                            last.0
                        )));
                    }
                    true
                }
            },
        };
        if !accounted {
            return Err(StoreError::Unexpected(format!(
                "writer {:?}: the table's last record (seq {}) is one this sink did not write (its own \
                 last is seq {}): another process wrote under its name; refusing to continue the chain \
                 or sign it. See `toolgate audit verify`",
                self.writer,
                last.0,
                self.known.map_or(0, |(seq, _)| seq)
            )));
        }
        self.head = Some(last);
        self.known = Some(last);
        self.attempts.clear();
        Ok(())
    }

    /// The writer's last checkpoint, checked before its series is continued: signed by this sink's
    /// key, for this writer, over a record the table holds with that hash.
    async fn last_checkpoint(
        &self,
        conn: &Conn,
        policy: &Checkpoints,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let row = conn
            .client
            .query_opt(
                &schema::sql(
                    "SELECT c.checkpoint, a.hash FROM {s}.audit_checkpoints c
                     LEFT JOIN {s}.audit a ON a.writer = c.writer AND a.seq = c.head_seq
                     WHERE c.writer = $1 ORDER BY c.seq DESC LIMIT 1",
                    &self.schema,
                ),
                &[&self.writer],
            )
            .await
            .map_err(|e| store_error(&e))?;
        let Some(row) = row else { return Ok(None) };
        let text: String = row.try_get(0).map_err(unexpected)?;
        let hash: Option<String> = row.try_get(1).map_err(unexpected)?;
        let refuse = |why: &str| {
            StoreError::Unexpected(format!(
                "the last checkpoint of writer {:?} {why}; refusing to continue its chain (see \
                 `toolgate audit verify`)",
                self.writer
            ))
        };
        let checkpoint =
            Checkpoint::from_canonical_json(text.as_bytes()).map_err(|e| refuse(&e))?;
        if !checkpoint.signature_verifies(&policy.public_key()) {
            return Err(refuse("is not signed by this sink's key"));
        }
        if checkpoint.writer != self.writer {
            return Err(refuse("names another writer"));
        }
        if hash.as_deref() != Some(checkpoint.head_hash.as_str()) {
            return Err(refuse("does not match the chain"));
        }
        Ok(Some(checkpoint))
    }

    /// Chains `group` (after the records that wait) onto the head and inserts it in one statement.
    async fn commit(&mut self, conn: &Conn, group: &[Queued]) -> Result<(), StoreError> {
        // A group whose commit timed out or lost its reply may have committed after all: the head
        // the table has now tells. Its records that no call waited on are sent again otherwise.
        if let Some(failed) = self.failed_head.take()
            && self.head == Some(failed)
        {
            // Only what that group carried: records kept since it failed were not in it.
            let covered = self.failed_covers.min(self.unsent.len());
            self.unsent.drain(..covered);
        }
        let unsent = std::mem::take(&mut self.unsent);
        let encoded = encode(&mut self.encoder, self.head, unsent.iter().chain(group));
        let kept_from_group = group
            .iter()
            .filter(|queued| matches!(queued.reply, Reply::None))
            .count();
        self.failed_covers = unsent.len() + kept_from_group;
        self.unsent = unsent;
        let rows = encoded?;
        let last = rows.hashes.last().and_then(|h| parse_hash(h));
        let attempted = rows
            .seqs
            .last()
            .zip(last)
            .map(|(seq, hash)| (*seq as u64, hash));
        self.failed_head = attempted;
        if let Some(attempt) = attempted {
            if self.attempts.len() >= MAX_ATTEMPTS {
                self.attempts.remove(0);
            }
            self.attempts.push(attempt);
        }
        conn.client
            .execute(
                &conn.insert,
                &[
                    &self.writer,
                    &rows.seqs,
                    &rows.prev_hashes,
                    &rows.hashes,
                    &rows.stages,
                    &rows.tools,
                    &rows.gates,
                    &rows.calls,
                    &rows.lines,
                ],
            )
            .await
            .map_err(|e| store_error(&e))?;
        self.failed_head = None;
        self.unsent.clear();
        if attempted.is_some() {
            self.head = attempted;
            self.known = attempted;
            self.attempts.clear();
        }
        Ok(())
    }

    /// Keeps the records of a failed group that no call waits on (exits, refusals, lowered modes), to
    /// send again with the next group unless the failed one turns out to have committed.
    fn keep_unsent(&mut self, queued: Queued) {
        if self.unsent.len() < MAX_UNSENT {
            self.unsent.push(queued);
        } else {
            tracing::error!(
                target: "toolgate::audit",
                writer = %self.writer,
                tool = %queued.tool,
                "audit record lost: {MAX_UNSENT} records already wait for the server"
            );
        }
    }
}

/// Chains records onto `head`, as rows of one statement.
fn encode<'a>(
    encoder: &mut Encoder,
    head: Option<(u64, HashHex)>,
    group: impl Iterator<Item = &'a Queued>,
) -> Result<Rows, StoreError> {
    let (mut seq, mut prev) = head.unwrap_or((0, GENESIS));
    let mut rows = Rows::default();
    let mut line = Vec::with_capacity(1024);
    for queued in group {
        seq += 1;
        line.clear();
        let hash = encoder
            .encode_json(&queued.fields, seq, &prev, &mut line)
            .map_err(|e| StoreError::Unexpected(format!("encoding an audit record: {e}")))?;
        rows.seqs.push(i64::try_from(seq).map_err(unexpected)?);
        rows.prev_hashes.push(hex(&prev));
        rows.hashes.push(hex(&hash));
        rows.stages.push(stage_name(queued.stage));
        rows.tools.push(queued.tool.clone());
        rows.gates.push(queued.gate as i64);
        rows.calls.push(queued.call as i64);
        rows.lines
            .push(String::from_utf8(line.clone()).map_err(unexpected)?);
        prev = hash;
    }
    Ok(rows)
}

fn hex(hash: &HashHex) -> String {
    String::from_utf8_lossy(hash).into_owned()
}

fn stage_name(stage: Stage) -> String {
    match serde_json::to_value(stage) {
        Ok(serde_json::Value::String(name)) => name,
        _ => format!("{stage:?}"),
    }
}

/// The key of the session advisory lock that holds a writer's name.
fn writer_lock(schema: &str, writer: &str) -> i64 {
    lock_key(schema, &format!("audit writer {writer}"))
}

fn unexpected(error: impl fmt::Display) -> StoreError {
    StoreError::Unexpected(error.to_string())
}

/// `host/pid/random`: a name no other process takes.
fn default_writer() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    let mut random = [0u8; 4];
    let suffix = match getrandom::fill(&mut random) {
        Ok(()) => random
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        Err(_) => format!(
            "{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ),
    };
    format!("{host}/{}/{suffix}", std::process::id())
}
