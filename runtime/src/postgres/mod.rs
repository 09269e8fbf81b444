//! Two-step approvals kept in PostgreSQL (feature `postgres`): a request made by an agent in one
//! process is answered by an operator in another (the `toolgate approvals` command, by request id), and
//! the call runs once, in whichever process makes it again.
//!
//! ```no_run
//! # extern crate toolgate_runtime as toolgate;
//! use std::time::Duration;
//! use toolgate::postgres::PostgresStore;
//! use toolgate::{Gate, Mode};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PostgresStore::builder()
//!     .timeout(Duration::from_secs(2))
//!     .ttl(Duration::from_secs(10 * 60))
//!     .connect("postgres://toolgate@db.internal/approvals")?;
//! let gate = Gate::builder().mode(Mode::FullAuto).approval_store(store).build()?;
//! # drop(gate);
//! # Ok(())
//! # }
//! ```
//!
//! # What it guarantees
//!
//! - **Used once.** Consuming an answer is one statement, timed by the database's clock:
//!
//!   ```sql
//!   UPDATE toolgate.approvals SET consumed_at = now()
//!   WHERE id = (SELECT id FROM toolgate.approvals
//!               WHERE tool = $1 AND arguments_digest = $2 AND shown_digest = $3 AND risk = $4
//!                 AND policy_version = $5 AND coalesce(principal, '') = $6
//!                 AND coalesce(agent, '') = $7 AND (tainted_by IS NOT NULL) = $8
//!                 AND target IS NOT DISTINCT FROM $9 AND evidence_digest IS NOT DISTINCT FROM $10
//!                 AND answered_at IS NOT NULL AND consumed_at IS NULL
//!                 AND expires_at > clock_timestamp()
//!               ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
//!     AND consumed_at IS NULL
//!   RETURNING answer, answered_by, reason, for_session AND coalesce(gate = $11, false), stop,
//!     confirmation, extract(epoch FROM expires_at - clock_timestamp())
//!   ```
//!
//!   Of calls racing for one answer, in any number of processes, one locks the row and the others skip
//!   it; one that reads the row after the winner committed re-checks `consumed_at` on the new version
//!   (READ COMMITTED), so it finds the answer used. `SKIP LOCKED` rather than a plain row lock, because a
//!   waiter's re-check under `LIMIT 1` would give up on the row without looking for another answer to
//!   the same call, and because no call should queue behind another's commit.
//! - **Bound to the call.** Only a call whose tool, both argument digests, risk, policy version,
//!   principal, agent, taint, target and evidence digest are equal to the request's uses its answer
//!   (an operator answers the call, in whichever of the agent's processes it is made again).
//! - **Live until the body.** Expiry is read by the clock as the statement runs, so one that waited on
//!   a lock past the request's expiry uses nothing; the answer comes back with the time its request
//!   had left, counted on this process's monotonic clock from before the statement was sent, and the
//!   gate refuses the call `APPROVAL_EXPIRED` if it reaches its body later (its `enter` records slow,
//!   say).
//! - **A session answer is its gate's.** A request keeps the random id of the gate that filed it
//!   (`gate`, migration 11); an answer `--for-session` is returned as one only to a call of that gate
//!   (or its clones). Another gate of the same principal and agent, a process started again, runs the
//!   call once and is granted nothing.
//! - **Tokens are secrets.** The table holds the SHA-256 of each token, never the token.
//! - **Fails closed.** Every operation has the store's timeout (2 seconds by default); an error or a
//!   timeout refuses the call with `APPROVAL_STORE_UNAVAILABLE`. A broken connection is opened again by
//!   the next operation. An answer is used at most once, not exactly once: a call whose consuming
//!   statement committed but whose reply was lost (the timeout, the connection cut, the call
//!   cancelled) is refused, and its answer stays used.
//!
//! # When there is no answer
//!
//! A second transaction, under an advisory lock per agent, takes an answer given in between, or works
//! out why the call waits (`APPROVAL_EXPIRED`, `APPROVAL_REUSED` — also for an answer being used by a
//! call racing this one —, `EVIDENCE_CHANGED` where the call was approved for another state of its
//! target, `APPROVAL_MISMATCH`, else `APPROVAL_PENDING`, in that order) and keeps one pending request
//! per call and agent. Since only hashes are kept, asking again for a pending call cannot hand back the
//! token given before: it issues a new token and adds its hash to the same request. Every token handed
//! out for a request answers it (the newest 16), the operator sees one request per call, and the bound
//! on pending requests per agent (10,000 by default; past it, calls are refused without a token)
//! counts calls, not retries. Requests are deleted one time-to-live after they expired.
//!
//! # Irreversible calls
//!
//! A request of an `irreversible` tool keeps the call's target, what its `evidence` probe read of it
//! (and that reading's digest, part of the binding) and its rollback plan, for the operator to see. Its
//! approval must carry the target typed back exactly ([`Answer::Approve`]'s `confirmation`), and the
//! check is in the one statement that answers it, so that no approval without it is ever written,
//! however many operators race:
//!
//! ```sql
//! UPDATE toolgate.approvals SET answered_at = now(), answer = $2, ...,
//!     for_session = $5 AND NOT irreversible, confirmation = $7
//! WHERE id = $1 AND answered_at IS NULL AND expires_at > now()
//!   AND (NOT irreversible OR $2 <> 'approve' OR coalesce(target = $7 COLLATE "C", false))
//! ```
//!
//! An approval without it is refused ([`ApproveError::ConfirmationMismatch`]) and the request still
//! waits; a rejection needs nothing typed. The confirmation is kept with the answer, and the gate that
//! uses it checks it again. A call whose target reads another state than the one approved finds no
//! answer: it is refused `EVIDENCE_CHANGED`, and a new request shows the new state.
//!
//! # The schema
//!
//! Made, or brought to this crate's version, by its owner: `toolgate migrate --store URL`, or
//! [`migrate`], in one transaction under an advisory lock (`schema_version` holds the last migration
//! applied). The store, the sink and the fleet only read `schema_version` when they connect: a
//! database without the schema, or with an older one, is refused with a message that says to run
//! `toolgate migrate`, and so is a newer one. [`PostgresStoreBuilder::migrate`] and
//! [`PostgresSinkBuilder::migrate`] make it when connecting instead, for a role that may (a test, a
//! single-user setup). In schema `toolgate` unless [`PostgresStoreBuilder::schema`] names another:
//!
//! ```sql
//! CREATE TABLE toolgate.schema_version (
//!     version    integer PRIMARY KEY,
//!     applied_at timestamptz NOT NULL DEFAULT now()
//! );
//! CREATE TABLE toolgate.approvals (
//!     id               bigserial PRIMARY KEY,      -- the request id operators use
//!     token_sha256     text[] NOT NULL,            -- hex SHA-256 of each token handed out
//!     tool             text NOT NULL,              -- the binding: tool, digests, risk, policy version
//!     arguments_digest text NOT NULL,
//!     shown_digest     text NOT NULL,
//!     risk             text NOT NULL,              -- 'HIGH_WRITE', ...
//!     policy_version   integer NOT NULL,
//!     agent            text,                       -- the gate's agent label
//!     mode             text NOT NULL,              -- the gate's mode when it asked
//!     manifest         jsonb,                      -- the tool's manifest
//!     arguments        text,                       -- as the audit log writes them, redacted
//!     created_at       timestamptz NOT NULL DEFAULT now(),
//!     expires_at       timestamptz NOT NULL,
//!     answered_at      timestamptz,
//!     answer           text CHECK (answer IN ('approve', 'reject')),
//!     answered_by      text,
//!     reason           text,
//!     for_session      boolean NOT NULL DEFAULT false,
//!     stop             boolean NOT NULL DEFAULT false,
//!     consumed_at      timestamptz,
//!     principal        text,                       -- who the agent acts for (the gate's principal)
//!     tainted_by       text,                       -- what tainted the gate's session: the tool,
//!     tainted_at       text,                       -- and when it ran (RFC 3339)
//!     target           text,                       -- the call's target, typed back to confirm
//!     irreversible     boolean NOT NULL DEFAULT false,
//!     evidence         text,                       -- what the evidence probe read (JSON),
//!     evidence_digest  text,                       -- and its digest, in the binding
//!     rollback         text,                       -- how the call would be undone (JSON)
//!     confirmation     text,                       -- the target as the approver typed it
//!     gate             text,                       -- the gate that filed it (a random id)
//!     CHECK ((answer IS NULL) = (answered_at IS NULL)),
//!     CHECK (consumed_at IS NULL OR answered_at IS NOT NULL)
//! );
//! CREATE INDEX approvals_call ON toolgate.approvals (tool, arguments_digest);
//! CREATE INDEX approvals_token ON toolgate.approvals USING gin (token_sha256);
//! CREATE INDEX approvals_pending ON toolgate.approvals ((coalesce(agent, ''))) WHERE answered_at IS NULL;
//! CREATE INDEX approvals_expires ON toolgate.approvals (expires_at);
//! ```
//!
//! # Roles
//!
//! Only the schema's owner, who migrates it, needs `CREATE` on the database. The others need these
//! grants, given after `toolgate migrate` (and again after a migration that adds tables); the role
//! names are examples:
//!
//! ```sql
//! -- Every role: the schema, and its version, which every connection reads.
//! GRANT USAGE ON SCHEMA toolgate TO toolgate_agent, toolgate_operator, toolgate_auditor;
//! GRANT SELECT ON toolgate.schema_version TO toolgate_agent, toolgate_operator, toolgate_auditor;
//! -- The gates' processes: PostgresStore (approvals, budgets), PostgresSink, Fleet.
//! GRANT SELECT, INSERT, UPDATE, DELETE ON toolgate.approvals TO toolgate_agent;
//! GRANT USAGE ON SEQUENCE toolgate.approvals_id_seq TO toolgate_agent;
//! GRANT SELECT, INSERT, UPDATE ON toolgate.budgets TO toolgate_agent;
//! GRANT SELECT, INSERT, DELETE ON toolgate.budget_uses TO toolgate_agent;
//! GRANT EXECUTE ON FUNCTION toolgate.budget_take(text[], integer[], bigint[], bytea),
//!     toolgate.budget_release(text[], bytea) TO toolgate_agent;
//! GRANT SELECT, INSERT ON toolgate.audit, toolgate.audit_checkpoints TO toolgate_agent;
//! GRANT SELECT, INSERT ON toolgate.fleets TO toolgate_agent;
//! GRANT SELECT, INSERT, UPDATE, DELETE ON toolgate.fleet_members TO toolgate_agent;
//! GRANT SELECT, INSERT, UPDATE ON toolgate.fleet_tools TO toolgate_agent;
//! GRANT EXECUTE ON FUNCTION toolgate.fleet_policy_accepted(text, text) TO toolgate_agent;
//! -- Operators: `toolgate approvals`, `toolgate fleet`, `toolgate budgets` (a reset only through
//! -- budget_reset, which records it).
//! GRANT SELECT, UPDATE ON toolgate.approvals TO toolgate_operator;
//! GRANT SELECT, INSERT, UPDATE ON toolgate.fleets TO toolgate_operator;
//! GRANT INSERT ON toolgate.fleet_changes TO toolgate_operator;
//! GRANT USAGE ON SEQUENCE toolgate.fleet_changes_id_seq TO toolgate_operator;
//! GRANT SELECT ON toolgate.fleet_members, toolgate.fleet_tools TO toolgate_operator;
//! GRANT SELECT ON toolgate.budgets, toolgate.budget_uses, toolgate.budget_resets TO toolgate_operator;
//! GRANT EXECUTE ON FUNCTION toolgate.budget_reset(text[], text, text, text)
//!     TO toolgate_operator;
//! -- Auditors: `toolgate audit verify` and `toolgate audit promotion` of the trail, and the resets
//! -- of budgets that `verify` names beside it.
//! GRANT SELECT ON toolgate.audit, toolgate.audit_checkpoints, toolgate.budget_resets
//!     TO toolgate_auditor;
//! -- The operator console (feature `console`): an operator's grants, the trail, and each writer's
//! -- key to check its checkpoints with.
//! GRANT toolgate_operator TO toolgate_console;
//! GRANT SELECT ON toolgate.audit, toolgate.audit_checkpoints, toolgate.audit_writers
//!     TO toolgate_console;
//! ```
//!
//! No role but the owner has `UPDATE` or `DELETE` on the audit tables. Whoever can update `approvals`
//! can answer a request, the gates' role included (SECURITY.md): give the sink, or the store, a role
//! of its own where that matters. Likewise, whoever can delete from `budget_uses` can clear a budget
//! without a record, the gates' role included; the operators' role clears one only through
//! `budget_reset`, which records who reset what ([`budgets`]).
//!
//! # Budgets
//!
//! The store is a [`BudgetStore`] too (`Gate::builder().budget_store_shared(store)`): every process
//! connected to it counts the same budgets, by the database's clock:
//!
//! ```sql
//! CREATE TABLE toolgate.budgets (
//!     key  text PRIMARY KEY,              -- agent label, scope, limit and window
//!     held integer NOT NULL               -- how many rows of budget_uses the window holds
//! );
//! CREATE TABLE toolgate.budget_uses (
//!     key     text NOT NULL,
//!     used_at timestamptz NOT NULL        -- a call counted
//! );
//! CREATE INDEX budget_uses_key ON toolgate.budget_uses (key, used_at);
//! ```
//!
//! A call's check is one statement, `SELECT toolgate.budget_take(keys, limits, windows_us, r)`, a
//! PL/pgSQL function (migrations 4, 7, 11 and 14) that, for each of the call's budgets in key order,
//! makes its row if missing and locks it (`FOR UPDATE`); then reads the clock (`clock_timestamp()`,
//! once every lock is held, so a check that waited on one counts from when it was allowed, not from
//! when it was sent), deletes the uses that left the window and counts what each holds (after the
//! lock, so it reads what the last check committed); then either records the call in every budget
//! its reservation `r` holds no unit of, or records nothing and answers which budget is out and for
//! how long (from its oldest use that must leave, found by the index). A call that waited for its
//! approver sends the statement again, under the same reservation, at its commit point
//! ([`BudgetStore::hold`]): a unit a reset cleared, or that left its window, while the approver
//! thought is taken again, or the call refused. A check costs what it deletes, not what the window holds.
//! Locking in key order serializes the checks that share a budget, in any number of processes, and
//! never deadlocks. An error or a timeout refuses the call with `BUDGET_STORE_UNAVAILABLE`; a check
//! that committed but whose answer was lost is refused and keeps its unit.
//!
//! Operators read how many calls each budget's window holds, and reset the budgets they select, with
//! `toolgate budgets` or [`budgets`]: a reset locks the budgets' rows as a check does, deletes their
//! uses and records who reset what, when and why in `budget_resets` (migration 13), in one
//! transaction.
//!
//! # The connection
//!
//! The store runs a current-thread tokio runtime on a thread of its own, with one connection to the
//! server: its futures complete on any executor, or none (a sync tool's thread waits for them), and
//! operations from one process go through that connection one after another.
//!
//! Every connection, the store's, the sink's, the fleet's, the console's and the `toolgate`
//! command's, is encrypted as the URL's `sslmode` says (rustls with ring; libpq's parameters,
//! `postgres://agent@db.internal/agents?sslmode=verify-full&sslrootcert=/etc/toolgate/db-ca.pem`, or
//! `sslmode=verify-full sslrootcert=...` among key-value pairs):
//!
//! | `sslmode` | encrypted | what is checked of the server's certificate |
//! | --- | --- | --- |
//! | `disable` | never | nothing |
//! | `prefer` (no `sslmode`) | when the server offers TLS, else not | nothing |
//! | `require` | always: a server without TLS is refused | nothing, as libpq without a root file; with `sslrootcert=FILE`, as `verify-ca` |
//! | `verify-ca` | always | signed by a root of `sslrootcert`, valid today; not its host name |
//! | `verify-full` | always | as `verify-ca`, and it names the host connected to (the URL's host, a DNS name or an IP address) |
//!
//! `sslrootcert` is a PEM file of the roots to trust, or `system` for the system's store (which then
//! needs `verify-full`, as libpq). Without it, `verify-ca` and `verify-full` trust the system's store
//! (`SSL_CERT_FILE` and `SSL_CERT_DIR` where set), where libpq would read `~/.postgresql/root.crt`.
//! `sslcert` and `sslkey` (PEM, both or neither) give a client certificate, for `cert` lines of
//! `pg_hba.conf`. A Unix socket (`host=/run/postgresql`) carries no TLS: `prefer` (or `disable`) there,
//! since the stronger modes refuse a server that offers none. `require` and `prefer` encrypt against a passive eavesdropper only: whoever can
//! answer in the server's place can read and change everything, so use `verify-full` across any network
//! you do not trust. Errors name the cause: `the server's certificate is not valid for the host name
//! 10.0.0.5 (it names db.internal): ...`, `... is not signed by a certificate authority of sslrootcert
//! /etc/toolgate/db-ca.pem ...`, `the server at db.internal does not offer TLS, and sslmode=require
//! needs it`, `the server takes only encrypted connections (...), and this one was not`.
//!
//! A process holds one connection per [`PostgresStore`] (its approvals and its budgets, for every gate
//! that shares it), one per [`PostgresSink`], one per [`Fleet`] membership (every gate joined through
//! it) and one per [`Reader`]; the operator console two (its store and its reader), and one more while
//! a lowering or a verification asked from its pages runs; a `toolgate` command one, while it runs. A
//! part opens another only once it has lost the one it held, never two at once: so a process of one
//! store, one sink and one fleet holds three, however many gates and calls. Behind a pooler such as
//! PgBouncer, use session pooling (`pool_mode = session`): the fleet and the console's reader `LISTEN`,
//! the sink holds its writer's name by a session advisory lock, and the store prepares its statements
//! once per connection, none of which survives transaction or statement pooling. `sslmode` then
//! applies to the link to the pooler.

mod audit;
pub mod budgets;
pub mod fleet;
mod link;
mod reads;
mod requests;
mod schema;
mod sql;
mod tls;
mod trail;
mod worker;

pub use audit::{PostgresSink, PostgresSinkBuilder};
pub use fleet::{Fleet, FleetBuilder, JoinError};
pub use reads::{
    Bucket, CallRecords, MAX_PAGE, PendingPage, PromotionPoint, Reader, ShadowPoint, TrailCursor,
    TrailQuery, TrailRecord,
};
pub use requests::{RequestState, StoredRequest};
pub use schema::{DEFAULT_MAX_PENDING, DEFAULT_SCHEMA, DEFAULT_TIMEOUT};
pub use trail::{
    Interrupted, TrailReport, WriterReport, read_trail, replay_trail, verify_signed_trail,
    verify_trail, verify_trail_with_bound_keys,
};
#[cfg(feature = "console")]
pub(crate) use trail::{StoreReplay, StoredPolicy, replay_store};

use std::fmt;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::approval::store::{
    Answer, ApprovalCall, ApprovalStore, ApproveError, Binding, Consumed, StoreError, StoreFuture,
};
use crate::approval::two_step::{DEFAULT_APPROVAL_TTL, MAX_APPROVAL_TTL};
use crate::gate::budget::{BudgetCharge, BudgetFuture, BudgetStore, ReleaseFuture, Reservation};
use link::Link;
use requests::Settings;
use schema::valid_schema;
use worker::{Job, Target};

/// An [`ApprovalStore`] in PostgreSQL, shared by every gate and process that connects to it. See the
/// [module](self) for what it guarantees and the SQL it keeps.
pub struct PostgresStore {
    jobs: Option<mpsc::UnboundedSender<Job>>,
    thread: Option<JoinHandle<()>>,
    settings: Settings,
}

/// Configures a [`PostgresStore`]: `PostgresStore::builder().ttl(..).connect(url)`.
#[derive(Debug, Clone)]
#[must_use]
pub struct PostgresStoreBuilder {
    settings: Settings,
}

impl PostgresStoreBuilder {
    /// How long each operation may take, connecting included (2 seconds unless set); past it, the
    /// call that asked is refused with `APPROVAL_STORE_UNAVAILABLE`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout;
        self
    }

    /// How long a request lives, by the database's clock (10 minutes unless set); more than
    /// [`MAX_APPROVAL_TTL`] (a day) or zero fails [`PostgresStoreBuilder::connect`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.settings.ttl = ttl;
        self
    }

    /// Pending requests one agent may hold (10,000 unless set); past it, its calls are refused without
    /// a token until requests are answered or expire.
    pub fn max_pending_per_agent(mut self, max: usize) -> Self {
        self.settings.max_pending = max;
        self
    }

    /// The schema of the store's tables (`toolgate` unless set): lowercase letters, digits and `_`,
    /// at most 63, starting with a letter or `_`.
    pub fn schema(mut self, schema: &str) -> Self {
        schema.clone_into(&mut self.settings.schema);
        self
    }

    /// Creates the schema, or brings it to this crate's version, when connecting (and connecting
    /// again), as [`migrate`] does: for a role that may (one that owns the schema, or has `CREATE` on
    /// the database before it exists). Off unless set: the store then only checks the schema's version
    /// (see [Roles](self#roles)).
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.settings.migrate = migrate;
        self
    }

    /// Connects to the server at `url` (`postgres://user:password@host:port/database`, or key-value
    /// pairs such as `host=/run/postgresql dbname=approvals`) and checks the schema's version (or,
    /// with [`migrate`](PostgresStoreBuilder::migrate), migrates it), within the timeout. It blocks the
    /// calling thread until then. A database whose schema is missing or at another version is refused,
    /// with a message that says to run `toolgate migrate`.
    pub fn connect(self, url: &str) -> Result<PostgresStore, StoreError> {
        let settings = self.settings;
        let invalid = |why: String| Err(StoreError::Unavailable(format!("not configured: {why}")));
        if settings.ttl.is_zero() || settings.ttl > MAX_APPROVAL_TTL {
            return invalid(format!(
                "the time to live must be more than zero and at most a day, not {:?}",
                settings.ttl
            ));
        }
        if settings.timeout.is_zero() {
            return invalid("the timeout must be more than zero".into());
        }
        if settings.max_pending == 0 {
            return invalid("an agent must be allowed a pending request at least".into());
        }
        if !valid_schema(&settings.schema) {
            return invalid(format!(
                "the schema name {:?} is not lowercase letters, digits and `_`",
                settings.schema
            ));
        }
        let link = Link::new(url, settings.timeout, "toolgate")?;
        let (jobs, receiver) = mpsc::unbounded_channel();
        let thread = worker::run(settings.clone(), link, receiver).map_err(|e| {
            StoreError::Unavailable(format!("cannot start the store's thread: {e}"))
        })?;
        let store = PostgresStore {
            jobs: Some(jobs),
            thread: Some(thread),
            settings,
        };
        let (reply, connected) = std::sync::mpsc::channel();
        store.send(Job::Connect(reply))?;
        match connected.recv() {
            Ok(result) => result.map(|()| store),
            Err(_) => Err(thread_gone()),
        }
    }
}

fn thread_gone() -> StoreError {
    StoreError::Unavailable("the store's thread stopped".into())
}

/// What [`migrate`] did: the schema's version before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Migrated {
    /// The version found (0: no schema).
    pub from: u32,
    /// The version now: this crate's.
    pub to: u32,
}

/// Creates the schema `schema` (`toolgate` unless the parts name another) in the database at `url`,
/// or brings it to this crate's version, in one transaction under an advisory lock: the owner's step,
/// before the gates, operators and auditors connect (`toolgate migrate --store URL` runs it), and
/// after an upgrade of toolgate. The role needs `CREATE` on the database the first time, and to own
/// the schema after; the others need only the grants of [Roles](self#roles). Running it again
/// changes nothing. A schema newer than this crate is refused.
pub fn migrate(url: &str, schema: &str) -> Result<Migrated, StoreError> {
    let (from, to) = link::migrate_url(url, schema)?;
    let version = |v: i32| u32::try_from(v).unwrap_or(0);
    Ok(Migrated {
        from: version(from),
        to: version(to),
    })
}

impl PostgresStore {
    /// A builder with the defaults: timeout 2 s, requests living 10 minutes, 10,000 pending requests
    /// per agent, schema `toolgate`, checked and not migrated.
    pub fn builder() -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            settings: Settings {
                timeout: DEFAULT_TIMEOUT,
                ttl: DEFAULT_APPROVAL_TTL,
                max_pending: DEFAULT_MAX_PENDING,
                schema: DEFAULT_SCHEMA.to_owned(),
                migrate: false,
            },
        }
    }

    /// Connects with the defaults; see [`PostgresStoreBuilder::connect`].
    pub fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::builder().connect(url)
    }

    /// How long a request lives.
    pub fn ttl(&self) -> Duration {
        self.settings.ttl
    }

    /// The requests waiting for an operator and not expired, oldest first.
    pub fn list(&self) -> StoreFuture<'_, Result<Vec<StoredRequest>, StoreError>> {
        let (reply, answered) = oneshot::channel();
        let sent = self.send(Job::List(reply));
        Box::pin(async move {
            sent?;
            answered.await.unwrap_or_else(|_| Err(thread_gone()))
        })
    }

    /// The request with this id, in whatever state (`None` if there is none, or it was forgotten long
    /// after it expired).
    pub fn show(&self, id: i64) -> StoreFuture<'_, Result<Option<StoredRequest>, StoreError>> {
        let (reply, answered) = oneshot::channel();
        let sent = self.send(Job::Show(id, reply));
        Box::pin(async move {
            sent?;
            answered.await.unwrap_or_else(|_| Err(thread_gone()))
        })
    }

    /// Answers the pending request with this id, as [`ApprovalStore::answer`] does by token: the
    /// operator's channel. Returns the request as answered.
    pub fn answer_id(
        &self,
        id: i64,
        answer: Answer,
    ) -> StoreFuture<'_, Result<StoredRequest, ApproveError>> {
        self.answer_target(Target::Id(id), answer)
    }

    fn answer_target(
        &self,
        target: Target,
        answer: Answer,
    ) -> StoreFuture<'_, Result<StoredRequest, ApproveError>> {
        let (reply, answered) = oneshot::channel();
        let sent = self.send(Job::Answer(target, answer, reply));
        Box::pin(async move {
            sent.map_err(ApproveError::Store)?;
            answered
                .await
                .unwrap_or_else(|_| Err(ApproveError::Store(thread_gone())))
        })
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.jobs
            .as_ref()
            .and_then(|jobs| jobs.send(job).ok())
            .ok_or_else(thread_gone)
    }
}

impl ApprovalStore for PostgresStore {
    fn consume<'a>(
        &'a self,
        call: &'a ApprovalCall,
    ) -> StoreFuture<'a, Result<Consumed, StoreError>> {
        let (reply, answered) = oneshot::channel();
        let sent = self.send(Job::Consume(Box::new(call.clone()), reply));
        Box::pin(async move {
            sent?;
            answered.await.unwrap_or_else(|_| Err(thread_gone()))
        })
    }

    fn answer<'a>(
        &'a self,
        token: &'a str,
        answer: Answer,
    ) -> StoreFuture<'a, Result<Binding, ApproveError>> {
        let answered = self.answer_target(Target::Token(token.to_owned()), answer);
        Box::pin(async move { answered.await.map(|request| request.binding) })
    }
}

/// Budgets shared by every process connected to the store: see the [module](self) for the SQL.
impl BudgetStore for PostgresStore {
    fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        let (reply, answered) = oneshot::channel();
        let sent = self.send(Job::Take(charges.to_vec(), reservation, reply));
        Box::pin(async move {
            sent?;
            answered.await.unwrap_or_else(|_| Err(thread_gone()))
        })
    }

    /// The same statement as [`take`](BudgetStore::take): since migration 14 it charges nothing for
    /// a budget the reservation holds a unit of.
    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        self.take(charges, reservation)
    }

    /// Since migration 15, every kind of charge is decided in the same statement.
    fn keeps_history(&self) -> bool {
        true
    }

    fn release(&self, charges: &[BudgetCharge], reservation: Reservation) -> ReleaseFuture {
        // The thread works from the call on, answered or not; a release it cannot send, or that fails,
        // leaves the units counted.
        let (reply, released) = oneshot::channel();
        let sent = self.send(Job::Release(charges.to_vec(), reservation, reply));
        Box::pin(async move {
            if sent.is_ok() {
                let _ = released.await;
            }
        })
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop; its runtime then drops the connection.
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("timeout", &self.settings.timeout)
            .field("ttl", &self.settings.ttl)
            .field("max_pending", &self.settings.max_pending)
            .field("schema", &self.settings.schema)
            .field("migrate", &self.settings.migrate)
            .finish_non_exhaustive()
    }
}
