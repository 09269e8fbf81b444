//! The store's own thread: a current-thread tokio runtime holding one connection ([`Held`]), which it
//! opens again when it breaks. Callers send it jobs over a channel and wait on a oneshot reply, which
//! completes on any executor or none.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use super::link::{self, Held, Link, Lost, Schema, Session};
use super::requests::{RequestState, Settings, StoredRequest};
use super::schema::{self, lock_key, store_error};
use super::sql;
use crate::approval::store::{
    Answer, ApprovalCall, ApproveError, Binding, Consumed, Filed, StoreError, confirmed,
};
use crate::approval::two_step::new_token;
use crate::gate::budget::{BudgetCharge, ChargeKind, Reservation, Taken};
use toolgate_policy::{DenialCode, Mode, Risk};

/// Hashes of a pending request's tokens kept at most: asking again for the same pending call adds one,
/// and the oldest stops answering past this many.
const TOKENS_PER_REQUEST: i32 = 16;

/// How often a store forgets requests long expired.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Which request an operator answers.
#[derive(Debug)]
pub(super) enum Target {
    Token(String),
    Id(i64),
}

/// What a caller asks the store's thread.
pub(super) enum Job {
    Connect(std::sync::mpsc::Sender<Result<(), StoreError>>),
    Consume(
        Box<ApprovalCall>,
        oneshot::Sender<Result<Consumed, StoreError>>,
    ),
    Answer(
        Target,
        Answer,
        oneshot::Sender<Result<StoredRequest, ApproveError>>,
    ),
    Take(
        Vec<BudgetCharge>,
        Reservation,
        oneshot::Sender<Result<Taken, StoreError>>,
    ),
    Release(Vec<BudgetCharge>, Reservation, oneshot::Sender<()>),
    List(oneshot::Sender<Result<Vec<StoredRequest>, StoreError>>),
    Show(
        i64,
        oneshot::Sender<Result<Option<StoredRequest>, StoreError>>,
    ),
}

/// A failure inside the thread, before it is told to a caller.
enum Failure {
    Store(StoreError),
    Approve(ApproveError),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(error: tokio_postgres::Error) -> Self {
        Failure::Store(store_error(&error))
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Failure::Store(error)
    }
}

impl Lost for Failure {
    fn lost(&self) -> bool {
        match self {
            Failure::Store(error) | Failure::Approve(ApproveError::Store(error)) => error.lost(),
            // The server answered: the request's state, not the connection's.
            Failure::Approve(_) => false,
        }
    }
}

/// A column of a row; a type that does not match is the store answering unexpectedly.
fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, at: usize) -> Result<T, Failure> {
    row.try_get(at)
        .map_err(|error| unexpected(format!("column {at}: {error}")))
}

impl Failure {
    fn into_store(self) -> StoreError {
        match self {
            Failure::Store(error) => error,
            Failure::Approve(ApproveError::Store(error)) => error,
            Failure::Approve(other) => StoreError::Unexpected(other.to_string()),
        }
    }

    fn into_approve(self) -> ApproveError {
        match self {
            Failure::Store(error) => ApproveError::Store(error),
            Failure::Approve(error) => error,
        }
    }
}

struct Prepared {
    consume: Statement,
    why_waiting: Statement,
    spend_other_states: Statement,
    lock_agent: Statement,
    find_pending: Statement,
    add_token: Statement,
    count_pending: Statement,
    insert: Statement,
    prune: Statement,
    budget_take: Statement,
    budget_release: Statement,
}

/// The store's session: its statements, prepared once per connection.
struct Conn {
    client: Client,
    statements: Prepared,
}

impl Session for Conn {
    /// The schema's name.
    type Setup = String;

    async fn start(opened: link::Opened, schema: &String) -> Result<Conn, StoreError> {
        let client = opened.client;
        let prepare = async |text: &str| {
            client
                .prepare(&schema::sql(text, schema))
                .await
                .map_err(|e| store_error(&e))
        };
        let statements = Prepared {
            consume: prepare(&sql::consume()).await?,
            why_waiting: prepare(&sql::why_waiting()).await?,
            spend_other_states: prepare(&sql::spend_other_states()).await?,
            lock_agent: prepare(sql::LOCK_AGENT).await?,
            find_pending: prepare(&sql::find_pending()).await?,
            add_token: prepare(sql::ADD_TOKEN).await?,
            count_pending: prepare(sql::COUNT_PENDING).await?,
            insert: prepare(sql::INSERT).await?,
            prune: prepare(sql::PRUNE).await?,
            budget_take: prepare(sql::BUDGET_TAKE).await?,
            budget_release: prepare(sql::BUDGET_RELEASE).await?,
        };
        Ok(Conn { client, statements })
    }

    fn client(&self) -> &Client {
        &self.client
    }
}

struct Worker {
    settings: Settings,
    /// One operation at a time: a transaction needs the connection to itself.
    conn: Mutex<Held<Conn>>,
    last_prune: Cell<Option<Instant>>,
}

/// Runs the store's thread until every sender of `jobs` is gone.
pub(super) fn run(
    settings: Settings,
    link: Link,
    mut jobs: mpsc::UnboundedReceiver<Job>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    link::thread("toolgate-postgres", move || async move {
        let step = Schema::migrating(settings.migrate);
        let schema = settings.schema.clone();
        let held = Held::new(link, &schema, step, None, schema.clone());
        let worker = Rc::new(Worker {
            settings,
            conn: Mutex::new(held),
            last_prune: Cell::new(None),
        });
        while let Some(job) = jobs.recv().await {
            tokio::task::spawn_local(Rc::clone(&worker).handle(job));
        }
    })
}

impl Worker {
    async fn handle(self: Rc<Self>, job: Job) {
        match job {
            Job::Connect(reply) => {
                let done = self
                    .with_conn(async |_| Ok(()))
                    .await
                    .map_err(Failure::into_store);
                let _ = reply.send(done);
            }
            Job::Consume(call, reply) => {
                // Before the store is asked: the answer's expiry is counted from here, never later.
                let asked = Instant::now();
                let done = self
                    .with_conn(async |conn| self.consume(conn, &call, asked).await)
                    .await
                    .map_err(Failure::into_store);
                let _ = reply.send(done);
            }
            Job::Answer(target, answer, reply) => {
                let done = self
                    .with_conn(async |conn| self.answer_request(conn, &target, &answer).await)
                    .await
                    .map_err(Failure::into_approve);
                let _ = reply.send(done);
            }
            Job::Take(charges, reservation, reply) => {
                let done = self
                    .with_conn(async |conn| take(conn, &charges, reservation).await)
                    .await
                    .map_err(Failure::into_store);
                let _ = reply.send(done);
            }
            Job::Release(charges, reservation, reply) => {
                // A release that fails leaves the units counted, and says so.
                let done = self
                    .with_conn(async |conn| release(conn, &charges, reservation).await)
                    .await
                    .map_err(Failure::into_store);
                if let Err(error) = done {
                    tracing::warn!(target: "toolgate::budget", %error, "a refused call's budget units were not given back");
                }
                let _ = reply.send(());
            }
            Job::List(reply) => {
                let done = self
                    .with_conn(async |conn| {
                        let rows = conn.client.query(&self.sql(&sql::list()), &[]).await?;
                        rows.iter().map(request_of).collect()
                    })
                    .await
                    .map_err(Failure::into_store);
                let _ = reply.send(done);
            }
            Job::Show(id, reply) => {
                let done = self
                    .with_conn(async |conn| {
                        let row = conn
                            .client
                            .query_opt(&self.sql(&sql::show()), &[&id])
                            .await?;
                        row.as_ref().map(request_of).transpose()
                    })
                    .await
                    .map_err(Failure::into_store);
                let _ = reply.send(done);
            }
        }
    }

    fn sql(&self, text: &str) -> String {
        schema::sql(text, &self.settings.schema)
    }

    /// Runs `op` on the connection, opened (and the schema checked) where needed, all within the
    /// store's timeout, waiting for the operations before it included ([`Held::run`]).
    async fn with_conn<T>(
        &self,
        op: impl AsyncFnOnce(&mut Conn) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let (asked, timeout) = (Instant::now(), self.settings.timeout);
        let Ok(mut held) = tokio::time::timeout(timeout, self.conn.lock()).await else {
            return Err(Failure::Store(StoreError::Timeout));
        };
        let left = timeout.saturating_sub(asked.elapsed());
        if left.is_zero() {
            // Spent waiting for the operations before it: the connection is not in doubt.
            return Err(Failure::Store(StoreError::Timeout));
        }
        held.run(left, async |conn, _| op(conn).await).await
    }

    async fn consume(
        &self,
        conn: &mut Conn,
        call: &ApprovalCall,
        asked: Instant,
    ) -> Result<Consumed, Failure> {
        let binding = &call.binding;
        let risk = binding.risk.as_str();
        let version = policy_version(binding)?;
        let principal = binding.principal.as_deref().unwrap_or("");
        let agent = binding.agent.as_deref().unwrap_or("");
        let key: [&(dyn ToSql + Sync); 10] = [
            &binding.tool,
            &binding.arguments_digest,
            &binding.shown_digest,
            &risk,
            &version,
            &principal,
            &agent,
            &binding.tainted,
            &binding.target,
            &binding.evidence_digest,
        ];
        let gate = call.gate.as_deref();
        let used: [&(dyn ToSql + Sync); 11] = [
            key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7], key[8], key[9], &gate,
        ];
        if let Some(row) = conn
            .client
            .query_opt(&conn.statements.consume, &used)
            .await?
        {
            return used_answer(&row, asked);
        }
        let prune = self
            .last_prune
            .get()
            .is_none_or(|last| last.elapsed() >= PRUNE_EVERY);
        let statements = &conn.statements;
        let transaction = conn.client.transaction().await?;
        transaction
            .execute(
                &statements.lock_agent,
                &[&lock_key(&self.settings.schema, agent)],
            )
            .await?;
        // An operator may have answered since the statement above: take the answer now.
        if let Some(row) = transaction.query_opt(&statements.consume, &used).await? {
            transaction.commit().await?;
            return used_answer(&row, asked);
        }
        let why = transaction.query_one(&statements.why_waiting, &key).await?;
        let code = if get(&why, 0)? {
            DenialCode::ApprovalExpired
        } else if get(&why, 1)? {
            DenialCode::ApprovalReused
        } else if get(&why, 2)? {
            // Approved for another state of its target: the approver saw another world, and the
            // approval is spent.
            transaction
                .execute(&statements.spend_other_states, &key)
                .await?;
            DenialCode::EvidenceChanged
        } else if get(&why, 3)? {
            DenialCode::ApprovalMismatch
        } else {
            DenialCode::ApprovalRequired
        };
        if prune {
            transaction
                .execute(&statements.prune, &[&millis(self.settings.ttl)])
                .await?;
        }
        let Some(token) = new_token() else {
            transaction.commit().await?;
            return Ok(Consumed::Pending { code, token: None });
        };
        let hash = sha256_hex(&token);
        let pending = transaction
            .query_opt(&statements.find_pending, &key)
            .await?;
        let filed = match pending {
            Some(row) => {
                let id: i64 = get(&row, 0)?;
                transaction
                    .execute(&statements.add_token, &[&id, &hash, &TOKENS_PER_REQUEST])
                    .await?;
                Some((token, id))
            }
            None => {
                let held = transaction
                    .query_one(
                        &statements.count_pending,
                        &[&agent, &(self.settings.max_pending as i64)],
                    )
                    .await?;
                let held: i64 = get(&held, 0)?;
                if held >= self.settings.max_pending as i64 {
                    None
                } else {
                    let manifest = serde_json::from_str::<serde_json::Value>(&call.manifest)
                        .is_ok()
                        .then_some(call.manifest.as_str());
                    let row = transaction
                        .query_one(
                            &statements.insert,
                            &[
                                &hash,
                                &binding.tool,
                                &binding.arguments_digest,
                                &binding.shown_digest,
                                &risk,
                                &version,
                                &call.agent,
                                &call.mode.as_str(),
                                &manifest,
                                &call.arguments,
                                &millis(self.settings.ttl),
                                &call.principal,
                                &call.taint.as_ref().map(|taint| taint.tool),
                                &call.taint.as_ref().map(|taint| taint.at.as_str()),
                                &binding.target,
                                &call.irreversible,
                                &call.evidence,
                                &binding.evidence_digest,
                                &call.rollback,
                                &gate,
                            ],
                        )
                        .await?;
                    let id: i64 = get(&row, 0)?;
                    Some((token, id))
                }
            }
        };
        transaction.commit().await?;
        if prune {
            self.last_prune.set(Some(Instant::now()));
        }
        let code = crate::approval::two_step::pending_code(code, filed.is_some());
        Ok(Consumed::Filed(match filed {
            Some((token, id)) => Filed::new(code, Some(token)).request_id(id.to_string()),
            None => Filed::new(code, None),
        }))
    }
}

impl Worker {
    async fn answer_request(
        &self,
        conn: &mut Conn,
        target: &Target,
        answer: &Answer,
    ) -> Result<StoredRequest, Failure> {
        let (word, by, reason, for_session, stop, confirmation) = match answer {
            Answer::Approve {
                by,
                for_session,
                confirmation,
            } => (
                "approve",
                by,
                None,
                *for_session,
                false,
                confirmation.as_deref(),
            ),
            Answer::Reject { by, reason, stop } => ("reject", by, Some(reason), false, *stop, None),
        };
        let hash;
        let (condition, target): (&str, &(dyn ToSql + Sync)) = match target {
            Target::Token(token) => {
                hash = sha256_hex(token);
                (sql::BY_TOKEN, &hash)
            }
            Target::Id(id) => (sql::BY_ID, id),
        };
        let row = conn
            .client
            .query_opt(
                &self.sql(&sql::answer(condition)),
                &[
                    target,
                    &word,
                    by,
                    &reason,
                    &for_session,
                    &stop,
                    &confirmation,
                ],
            )
            .await?;
        if let Some(row) = row {
            return request_of(&row);
        }
        let why = conn
            .client
            .query_opt(&self.sql(&sql::why_not_answered(condition)), &[target])
            .await?;
        let Some(why) = why else {
            return Err(Failure::Approve(ApproveError::UnknownToken));
        };
        let (expired, answered, used): (bool, bool, bool) =
            (get(&why, 0)?, get(&why, 1)?, get(&why, 2)?);
        let irreversible: bool = get(&why, 3)?;
        let request_target: Option<String> = get(&why, 4)?;
        Err(Failure::Approve(if expired {
            ApproveError::Expired
        } else if used {
            ApproveError::AlreadyUsed
        } else if answered {
            ApproveError::AlreadyApproved
        } else if let Err(mismatch) = confirmed(irreversible, request_target.as_deref(), answer) {
            // The statement left the request pending: an approval of an irreversible call without
            // its target typed back exactly.
            mismatch
        } else {
            // Answerable a moment ago: another operator's answer and this one crossed.
            ApproveError::AlreadyApproved
        }))
    }
}

/// Takes a call's units of its budgets, in one statement ([`sql::BUDGET_TAKE`]).
async fn take(
    conn: &mut Conn,
    charges: &[BudgetCharge],
    reservation: Reservation,
) -> Result<Taken, Failure> {
    let keys: Vec<&str> = charges.iter().map(|c| &*c.key).collect();
    // The kinds of the rules over history as migration 15 reads them: a negative limit.
    let limits = charges
        .iter()
        .map(|c| match c.kind {
            ChargeKind::Count => i32::try_from(c.limit),
            ChargeKind::Mark => Ok(-1),
            ChargeKind::Require => Ok(-2),
            ChargeKind::Forbid => Ok(-3),
        })
        .collect::<Result<Vec<i32>, _>>()
        .map_err(|_| unexpected("a budget's limit does not fit the store"))?;
    let windows: Vec<i64> = charges
        .iter()
        .map(|c| i64::try_from(c.window.as_micros()).unwrap_or(i64::MAX))
        .collect();
    let row = conn
        .client
        .query_one(
            &conn.statements.budget_take,
            &[&keys, &limits, &windows, &&reservation.to_bytes()[..]],
        )
        .await?;
    let answer: Vec<i64> = get(&row, 0)?;
    match answer[..] {
        [-1, 0] => Ok(Taken::Taken),
        [charge, wait_us] if charge >= 0 && (charge as usize) < charges.len() && wait_us >= 0 => {
            Ok(Taken::Exhausted {
                charge: charge as usize,
                retry_after: Duration::from_micros(wait_us as u64),
            })
        }
        _ => Err(unexpected(format!("a budget answer of {answer:?}"))),
    }
}

/// Gives back the units a refused call's reservation took ([`sql::BUDGET_RELEASE`]).
async fn release(
    conn: &mut Conn,
    charges: &[BudgetCharge],
    reservation: Reservation,
) -> Result<(), Failure> {
    let keys: Vec<&str> = charges.iter().map(|c| &*c.key).collect();
    conn.client
        .execute(
            &conn.statements.budget_release,
            &[&keys, &&reservation.to_bytes()[..]],
        )
        .await?;
    Ok(())
}

fn policy_version(binding: &Binding) -> Result<i32, Failure> {
    i32::try_from(binding.policy_version).map_err(|_| {
        Failure::Store(StoreError::Unexpected(format!(
            "policy version {} does not fit the store",
            binding.policy_version
        )))
    })
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

pub(super) fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn unexpected(what: impl Into<String>) -> Failure {
    Failure::Store(StoreError::Unexpected(what.into()))
}

/// Reads the answer a consuming statement returns ([`sql::consume`]), and when its request expires:
/// the time it had left when the statement used it, counted from `asked` (before the statement was
/// sent), so never later than the database's own expiry.
fn used_answer(row: &Row, asked: Instant) -> Result<Consumed, Failure> {
    let answer = answer_of_at(row, 0, 5)?;
    let left: f64 = get(row, 6)?;
    let left = Duration::try_from_secs_f64(left.max(0.0)).unwrap_or_default();
    let expires = asked
        .checked_add(left)
        .ok_or_else(|| unexpected(format!("an answer that lives {left:?} more")))?;
    Ok(Consumed::AnsweredUntil(answer, expires))
}

/// Reads a row of [`sql::REQUEST`]'s columns.
/// A request read by [`sql::REQUEST`]'s columns, for readers outside the store's thread.
pub(super) fn stored_request(row: &Row) -> Result<StoredRequest, StoreError> {
    request_of(row).map_err(Failure::into_store)
}

fn request_of(row: &Row) -> Result<StoredRequest, Failure> {
    let risk: String = get(row, 4)?;
    let risk: Risk = risk
        .parse()
        .map_err(|_| unexpected(format!("a request of risk {risk:?}")))?;
    let mode: String = get(row, 7)?;
    let mode: Mode = mode
        .parse()
        .map_err(|_| unexpected(format!("a request of mode {mode:?}")))?;
    let policy_version: i32 = get(row, 5)?;
    let mut binding = Binding::new(
        get::<String>(row, 1)?,
        get::<String>(row, 2)?,
        get::<String>(row, 3)?,
        risk,
    );
    binding.policy_version = u32::try_from(policy_version)
        .map_err(|_| unexpected(format!("policy version {policy_version}")))?;
    let binding = binding
        .made_by(get(row, 19)?, get(row, 6)?)
        .tainted(get::<Option<String>>(row, 20)?.is_some())
        .on_target(get(row, 22)?, get(row, 25)?);
    let age: f64 = get(row, 11)?;
    let left: f64 = get(row, 12)?;
    let answered: Option<String> = get(row, 13)?;
    let used: bool = get(row, 18)?;
    let state = match answered {
        None => RequestState::Pending,
        Some(_) => {
            let answer = answer_of_at(row, 13, 27)?;
            if used {
                RequestState::Used(answer)
            } else {
                RequestState::Answered(answer)
            }
        }
    };
    Ok(StoredRequest {
        id: get(row, 0)?,
        binding,
        agent: get(row, 6)?,
        mode,
        manifest: get(row, 8)?,
        arguments: get(row, 9)?,
        created_at: get(row, 10)?,
        age: Duration::try_from_secs_f64(age.max(0.0)).unwrap_or_default(),
        expires_in: Duration::try_from_secs_f64(left.max(0.0)).unwrap_or_default(),
        expired: left <= 0.0,
        state,
        principal: get(row, 19)?,
        tainted: match (
            get::<Option<String>>(row, 20)?,
            get::<Option<String>>(row, 21)?,
        ) {
            (Some(tool), Some(at)) => Some((tool, at)),
            _ => None,
        },
        target: get(row, 22)?,
        irreversible: get(row, 23)?,
        evidence: get(row, 24)?,
        rollback: get(row, 26)?,
    })
}

/// Reads an answer from the columns `answer`, `answered_by`, `reason`, `for_session` and `stop` from
/// `at` on, and `confirmation` at `confirmation_at`.
fn answer_of_at(row: &Row, at: usize, confirmation_at: usize) -> Result<Answer, Failure> {
    let word: Option<String> = get(row, at)?;
    let by: Option<String> = get(row, at + 1)?;
    let reason: Option<String> = get(row, at + 2)?;
    let for_session: bool = get(row, at + 3)?;
    let stop: bool = get(row, at + 4)?;
    let by = by.unwrap_or_default();
    match word.as_deref() {
        Some("approve") => Ok(Answer::Approve {
            by,
            for_session,
            confirmation: get(row, confirmation_at)?,
        }),
        Some("reject") => Ok(Answer::Reject {
            by,
            reason: reason.unwrap_or_default(),
            stop,
        }),
        other => Err(unexpected(format!("an answer of {other:?}"))),
    }
}
