//! Fleets: one kill switch for every process. A gate joined to a fleet runs at the lower of its own
//! mode and the fleet's; `toolgate fleet lower` lowers every joined gate, in every process, within a
//! second.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_postgres::Client;

use super::link::{self, Held, Link, Opened, Schema};
use super::schema::{self, DEFAULT_SCHEMA, DEFAULT_TIMEOUT, store_error, valid_schema};
use crate::approval::store::StoreError;
use crate::gate::builder::GateBuilder;
use crate::gate::error::GateError;
use crate::gate::{Gate, WeakGate};
use crate::policy_file::{LivePolicy, PolicyErrors, PolicyFile, ToolDeclaration};
use toolgate_policy::Mode;

/// How long a gate may lose its fleet before it acts as SHADOW, unless the builder sets a shorter one.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// How long an operator's command (`lower`, `raise`, `status`) may take, connecting included.
const OPERATOR_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a joined process reads its fleet's mode when no notification came, unless set.
pub const DEFAULT_POLL: Duration = Duration::from_millis(500);

/// A process's membership of a fleet: the gates it [joins](Fleet::join) run at the lower of their own
/// mode and the fleet's, and go down with it.
///
/// ```no_run
/// # extern crate toolgate_runtime as toolgate;
/// use toolgate::postgres::Fleet;
/// use toolgate::{Gate, Mode};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let fleet = Fleet::connect("postgres://toolgate@db.internal/agents", "payments")?;
/// let gate = fleet.join(Gate::builder().mode(Mode::FullAuto))?;
/// // An on-call engineer, anywhere: toolgate fleet lower payments --to SHADOW --by ana --reason "incident 42"
/// # drop(gate);
/// # Ok(())
/// # }
/// ```
///
/// # What it guarantees
///
/// - **Down within a second.** Lowering the fleet (`toolgate fleet lower`, or [`lower`]) commits the
///   new mode and notifies every joined process (`LISTEN`/`NOTIFY`); each also reads the mode every
///   [poll interval](FleetBuilder::poll_interval) (half a second) in case a notification is lost. A
///   gate held lower refuses, from its next decision on, what its new mode does not allow: the mode is
///   read again as the last step before a body runs.
/// - **Never up.** A running gate's mode is never raised by its fleet: raising the fleet's mode
///   ([`raise`]) applies to gates that join after it.
/// - **Lost means SHADOW.** A process that has not read its fleet's mode for longer than the
///   [grace period](FleetBuilder::grace) (30 seconds, which can be shortened, not turned off) holds
///   every joined gate at SHADOW until it reads it again. Every statement (connecting included) is
///   bounded by what is left of the grace period: a server that stops answering, frozen or behind a
///   link that drops packets, holds no gate above SHADOW past it. Both changes are audit records
///   (`fleet_lost`, `fleet_rejoined`), as is every lowering (`mode_lowered`, by whom and why).
/// - **Seen.** Each joined gate is a row of `fleet_members`, its mode and last contact refreshed at
///   every read: `toolgate fleet status` lists them.
///
/// # The tables
///
/// Created with the others of the schema (`toolgate` unless [`FleetBuilder::schema`] names another):
///
/// ```sql
/// CREATE TABLE toolgate.fleets (
///     name       text PRIMARY KEY,
///     mode       text NOT NULL CHECK (mode IN ('SHADOW', 'ADVISORY', 'PARTIAL_AUTO', 'FULL_AUTO')),
///     changed_at timestamptz NOT NULL DEFAULT now(),
///     changed_by text NOT NULL,
///     reason     text NOT NULL
/// );
/// CREATE TABLE toolgate.fleet_changes (          -- every lowering and raising, for the record
///     id bigserial PRIMARY KEY, fleet text NOT NULL, mode text NOT NULL,
///     changed_by text NOT NULL, reason text NOT NULL, changed_at timestamptz NOT NULL DEFAULT now()
/// );
/// CREATE TABLE toolgate.fleet_members (
///     fleet text NOT NULL, member text NOT NULL, gate bigint NOT NULL,
///     host text NOT NULL, pid integer NOT NULL, agent text, mode text NOT NULL,
///     partitioned boolean NOT NULL DEFAULT false,
///     joined_at timestamptz NOT NULL DEFAULT now(), last_contact timestamptz NOT NULL DEFAULT now(),
///     PRIMARY KEY (fleet, member, gate)
/// );
/// CREATE TABLE toolgate.fleet_tools (            -- the tools each member declares, for `policy apply`
///     fleet text NOT NULL, id text NOT NULL, names text[] NOT NULL, parameters text,
///     redact text[] NOT NULL, member text NOT NULL, declared_at timestamptz NOT NULL DEFAULT now(),
///     PRIMARY KEY (fleet, id)
/// );
/// ```
///
/// `fleets` also holds the policy applied last (`policy`, `policy_digest`, `policy_by`, `policy_at`)
/// and the policy in force, the last a member accepted (`accepted_policy`, `accepted_digest`,
/// `accepted_by`, `accepted_at`), which a member's role records only through
/// `fleet_policy_accepted(fleet, digest)`: the policy applied last, by its digest, and no other text.
///
/// A fleet that has no row yet is created at FULL_AUTO by the first gate that joins it: it holds no
/// gate lower than its own mode until it is lowered. [`lower`] and [`raise`] never create one: an
/// unknown (say, misspelt) fleet is an error that names the fleets there are. Notifications go on the channel `<schema>_fleet`, with the fleet's name as payload.
pub struct Fleet {
    membership: Arc<Membership>,
}

/// The process's link to its fleet: its thread, which holds every joined gate under the fleet's mode.
/// A joined gate keeps it alive, so that dropping the [`Fleet`] handle never frees a gate from its
/// fleet; the thread ends with the last of the handle and the gates.
struct Membership {
    jobs: Option<mpsc::UnboundedSender<Job>>,
    thread: Option<JoinHandle<()>>,
    settings: Arc<Settings>,
    /// The fleet's operator policy (`toolgate policy apply`), which every joined gate follows.
    policy: LivePolicy,
}

#[derive(Debug, Clone)]
struct Settings {
    name: String,
    schema: String,
    timeout: Duration,
    grace: Duration,
    poll: Duration,
    member: String,
}

/// Configures a [`Fleet`]: `Fleet::builder().grace(..).connect(url, name)`.
#[derive(Debug, Clone)]
#[must_use]
pub struct FleetBuilder {
    schema: String,
    timeout: Duration,
    grace: Duration,
    poll: Duration,
}

impl FleetBuilder {
    /// How long the process may lose the fleet before its gates act as SHADOW: at most (and unless
    /// set) [`DEFAULT_GRACE`], 30 seconds; not zero.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How often the fleet's mode is read when no notification came ([`DEFAULT_POLL`] unless set): at
    /// least 10 ms, and shorter than the grace period.
    pub fn poll_interval(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// The schema of the tables (`toolgate` unless set).
    pub fn schema(mut self, schema: &str) -> Self {
        schema.clone_into(&mut self.schema);
        self
    }

    /// How long connecting and each statement may take (2 seconds unless set); until the grace period
    /// has passed, no longer than what is left of it either.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Connects to the server at `url` and follows the fleet `name` (created at FULL_AUTO if it has no
    /// row), within the timeout. It blocks the calling thread until then.
    pub fn connect(self, url: &str, name: &str) -> Result<Fleet, StoreError> {
        let invalid = |why: String| Err(StoreError::Unavailable(format!("not configured: {why}")));
        if !valid_schema(&self.schema) {
            return invalid(format!(
                "the schema name {:?} is not lowercase letters, digits and `_`",
                self.schema
            ));
        }
        if self.grace.is_zero() || self.grace > DEFAULT_GRACE {
            return invalid(format!(
                "the grace period must be more than zero and at most {} s, not {:?}",
                DEFAULT_GRACE.as_secs(),
                self.grace
            ));
        }
        if self.poll < Duration::from_millis(10) || self.poll >= self.grace {
            return invalid(format!(
                "the poll interval must be at least 10 ms and shorter than the grace period, not {:?}",
                self.poll
            ));
        }
        if self.timeout.is_zero() {
            return invalid("the timeout must be more than zero".into());
        }
        valid_name(name).map_err(StoreError::Unavailable)?;
        let link = Link::new(url, self.timeout, "toolgate-fleet")?;
        // Its notifications are all about this fleet's row.
        let held = Held::new(
            link,
            &self.schema,
            Schema::Check,
            Some(&channel(&self.schema)),
            (),
        );
        let settings = Arc::new(Settings {
            name: name.to_owned(),
            schema: self.schema,
            timeout: self.timeout,
            grace: self.grace,
            poll: self.poll,
            member: member_name(),
        });
        let (jobs, receiver) = mpsc::unbounded_channel();
        let policy = LivePolicy::none();
        let worker = Worker {
            settings: Arc::clone(&settings),
            held,
            missed: false,
            gates: Vec::new(),
            last_contact: Instant::now(),
            lost_since: None,
            policy: policy.clone(),
            policy_seen: None,
            unfollowable: None,
            declared: false,
        };
        let thread = worker.spawn(receiver).map_err(|e| {
            StoreError::Unavailable(format!("cannot start the fleet's thread: {e}"))
        })?;
        let fleet = Fleet {
            membership: Arc::new(Membership {
                jobs: Some(jobs),
                thread: Some(thread),
                settings,
                policy,
            }),
        };
        let (reply, read) = std::sync::mpsc::sync_channel(1);
        fleet.send(Job::Read(reply))?;
        read.recv()
            .unwrap_or_else(|_| Err(thread_gone()))
            .map(|_| fleet)
            .map_err(|error| schema::naming(error, "the fleet"))
    }
}

/// A gate could not join its fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JoinError {
    /// The gate could not be built.
    Gate(GateError),
    /// The fleet's mode could not be read: a gate that does not know it is not started.
    Fleet(StoreError),
    /// The builder was given an operator policy: a gate joined to a fleet follows the fleet's
    /// ([`apply_policy`]) and no other.
    OwnPolicy,
    /// The fleet has a policy this process cannot follow: the one applied last does not check
    /// against its tools, and no policy a member accepted before it does either. A gate joined now
    /// would follow no policy at all; the text says why.
    Policy(String),
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Gate(error) => error.fmt(f),
            JoinError::Fleet(error) => write!(f, "cannot join the fleet: {error}"),
            JoinError::OwnPolicy => f.write_str(
                "cannot join the fleet: the gate was given an operator policy of its own, and a gate \
                 joined to a fleet follows the fleet's (apply it with `policy apply`)",
            ),
            JoinError::Policy(why) => write!(f, "cannot join the fleet: {why}"),
        }
    }
}

impl std::error::Error for JoinError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JoinError::Gate(error) => Some(error),
            JoinError::Fleet(error) => Some(error),
            JoinError::OwnPolicy | JoinError::Policy(_) => None,
        }
    }
}

impl Fleet {
    /// A builder with the defaults: grace 30 s, poll 500 ms, schema `toolgate`, timeout 2 s.
    pub fn builder() -> FleetBuilder {
        FleetBuilder {
            schema: DEFAULT_SCHEMA.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            grace: DEFAULT_GRACE,
            poll: DEFAULT_POLL,
        }
    }

    /// Connects with the defaults; see [`FleetBuilder::connect`].
    pub fn connect(url: &str, name: &str) -> Result<Fleet, StoreError> {
        Fleet::builder().connect(url, name)
    }

    /// The fleet's operator policy, as this process last read it: every joined gate follows it.
    pub fn policy(&self) -> &LivePolicy {
        &self.membership.policy
    }

    /// The fleet's name.
    pub fn name(&self) -> &str {
        &self.membership.settings.name
    }

    /// This process's name in `fleet_members`: host and process id.
    pub fn member(&self) -> &str {
        &self.membership.settings.member
    }

    /// Builds a gate held under the fleet's mode, read now: the gate runs at the lower of its own and
    /// the fleet's, from its first decision on, and goes down whenever the fleet does. The gate keeps
    /// the process's membership alive: dropping this handle does not free it from the fleet.
    ///
    /// The gate follows the fleet's operator policy ([`apply_policy`]), read with the mode before the
    /// gate's first decision; a builder given a policy of its own is refused
    /// ([`JoinError::OwnPolicy`]), since the fleet's would replace it.
    pub fn join(&self, builder: GateBuilder) -> Result<Gate, JoinError> {
        if builder.has_policy() {
            return Err(JoinError::OwnPolicy);
        }
        let gate = builder
            .policy(self.membership.policy.clone())
            .build()
            .map_err(JoinError::Gate)?;
        gate.keep_alive(Arc::clone(&self.membership) as Arc<dyn std::any::Any + Send + Sync>);
        let (reply, joined) = std::sync::mpsc::sync_channel(1);
        self.send(Job::Join(gate.clone(), reply))
            .map_err(JoinError::Fleet)?;
        joined
            .recv()
            .unwrap_or_else(|_| Err(JoinError::Fleet(thread_gone())))?;
        Ok(gate)
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.membership
            .jobs
            .as_ref()
            .and_then(|jobs| jobs.send(job).ok())
            .ok_or_else(thread_gone)
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        // The thread removes this process's rows from `fleet_members`, then ends. The last gate may be
        // dropped on that very thread (it upgrades its references to them): it is not waited for there.
        self.jobs = None;
        if let Some(thread) = self.thread.take()
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let settings = &self.membership.settings;
        f.debug_struct("Fleet")
            .field("name", &settings.name)
            .field("member", &settings.member)
            .field("grace", &settings.grace)
            .finish_non_exhaustive()
    }
}

fn thread_gone() -> StoreError {
    StoreError::Unavailable("the fleet's thread stopped".into())
}

fn valid_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
        return Err(format!(
            "not configured: the fleet name {name:?} is empty, longer than 200 bytes or has control \
             characters"
        ));
    }
    // A fleet a person reads as another would be lowered, or joined, in its place (SECURITY.md,
    // names that read alike).
    match crate::names::refusal(name) {
        Some(why) => Err(format!("not configured: the fleet name is refused: {why}")),
        None => Ok(()),
    }
}

fn member_name() -> String {
    format!("{}/{}", host_name(), std::process::id())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned())
}

fn channel(schema: &str) -> String {
    format!("{schema}_fleet")
}

/// The columns of `fleet_members` for a set of gates, read without waiting.
struct Rows {
    ids: Vec<i64>,
    agents: Vec<Option<String>>,
    modes: Vec<String>,
    partitioned: Vec<bool>,
    policies: Vec<Option<String>>,
}

impl Rows {
    fn of(gates: &[Gate]) -> Rows {
        Rows {
            ids: gates.iter().map(|g| g.id() as i64).collect(),
            agents: gates.iter().map(|g| g.agent().map(str::to_owned)).collect(),
            modes: gates.iter().map(|g| g.mode().as_str().to_owned()).collect(),
            partitioned: gates.iter().map(Gate::partitioned).collect(),
            policies: gates
                .iter()
                .map(|g| g.policy_digest().as_deref().map(str::to_owned))
                .collect(),
        }
    }
}

enum Job {
    Read(std::sync::mpsc::SyncSender<Result<Mode, StoreError>>),
    Join(Gate, std::sync::mpsc::SyncSender<Result<(), JoinError>>),
}

struct Worker {
    settings: Arc<Settings>,
    held: Held<Opened>,
    /// Set when a statement opened the connection: a change notified while the fleet had none was not
    /// heard, so the mode is read again at once, for every joined gate.
    missed: bool,
    gates: Vec<WeakGate>,
    /// The last time the fleet's mode was read.
    last_contact: Instant,
    /// Since when reads fail, and why.
    lost_since: Option<(Instant, String)>,
    policy: LivePolicy,
    /// The digests of the fleet's policy applied last and of the one in force (accepted) last read.
    policy_seen: Option<(Option<String>, Option<String>)>,
    /// Why this process follows no policy while its fleet has one it cannot follow: a gate does not
    /// join while it is set.
    unfollowable: Option<String>,
    /// Whether this process's tools are declared in `fleet_tools`.
    declared: bool,
}

impl Worker {
    fn spawn(self, jobs: mpsc::UnboundedReceiver<Job>) -> std::io::Result<JoinHandle<()>> {
        link::thread("toolgate-fleet", move || self.run(jobs))
    }

    async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        let poll = self.settings.poll;
        let mut next_read = tokio::time::Instant::now() + poll;
        loop {
            if std::mem::take(&mut self.missed) {
                next_read = tokio::time::Instant::now();
            }
            let notified = async {
                match self.held.current() {
                    Some(opened) => opened.notifications.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                job = jobs.recv() => match job {
                    Some(Job::Read(reply)) => {
                        let _ = reply.send(self.refresh().await);
                    }
                    Some(Job::Join(gate, reply)) => {
                        let _ = reply.send(self.join(gate).await);
                    }
                    None => break,
                },
                signal = notified => {
                    if signal.is_none() {
                        // The connection ended: the read opens another, and listens again.
                        self.held.broken();
                    }
                    let _ = self.refresh().await;
                    next_read = tokio::time::Instant::now() + poll;
                }
                () = tokio::time::sleep_until(next_read) => {
                    let _ = self.refresh().await;
                    next_read = tokio::time::Instant::now() + poll;
                }
            }
        }
        self.leave().await;
    }

    fn sql(&self, text: &str) -> String {
        schema::sql(text, &self.settings.schema)
    }

    /// Runs `op` on the connection, opened where needed ([`Held::run`]), within the timeout and,
    /// until the grace period has passed, within what is left of it: a server that stops answering
    /// (frozen, or behind a link that drops packets) never holds the gates above SHADOW past the grace
    /// period. A failure past the grace period holds every joined gate at SHADOW.
    async fn with_conn<T>(
        &mut self,
        op: impl AsyncFnOnce(&Client, &Settings) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let settings = Arc::clone(&self.settings);
        let left = (self.last_contact + settings.grace).saturating_duration_since(Instant::now());
        let limit = if left.is_zero() {
            // Already lost: a read may take the whole timeout to come back.
            settings.timeout
        } else {
            settings.timeout.min(left)
        };
        let mut opened_here = false;
        let done = self
            .held
            .run(limit, async |opened, fresh| {
                opened_here = fresh;
                op(&opened.client, &settings).await
            })
            .await;
        match &done {
            // A new connection listens from now on: what was notified before it is read again at
            // once (`refresh`, whose read is that, clears this).
            Ok(_) => self.missed |= opened_here,
            Err(error) => self.lost(error),
        }
        done
    }

    /// After a failed read or write: past the grace period since the last read, every joined gate is
    /// held at SHADOW (again: the edge is recorded once, by the gate).
    fn lost(&mut self, error: &StoreError) {
        let since = self
            .lost_since
            .get_or_insert_with(|| (Instant::now(), error.to_string()))
            .clone();
        if self.last_contact.elapsed() >= self.settings.grace {
            let why = format!(
                "fleet {} not reached for {:.1} s (grace {} s): {}",
                self.settings.name,
                self.last_contact.elapsed().as_secs_f64(),
                self.settings.grace.as_secs_f64(),
                since.1
            );
            for gate in self.gates.iter().filter_map(WeakGate::upgrade) {
                gate.set_partitioned(true, &why);
            }
        }
    }

    /// Reads the fleet's mode, holds every joined gate under it, and refreshes their rows; past the
    /// grace period without a read, holds them at SHADOW.
    async fn refresh(&mut self) -> Result<Mode, StoreError> {
        self.gates.retain(|gate| gate.upgrade().is_some());
        let read = self
            .with_conn(async |client, settings| read_mode(client, settings).await)
            .await;
        match read {
            Ok((mode, by, reason, policy)) => {
                // Read on the connection as it is now, which listens: nothing before it was missed.
                self.missed = false;
                self.follow_policy(policy.0, policy.1).await;
                self.last_contact = Instant::now();
                let gates: Vec<Gate> = self.gates.iter().filter_map(WeakGate::upgrade).collect();
                let why = format!("fleet {}: {reason}", self.settings.name);
                for gate in &gates {
                    gate.hold_under(mode, &by, &why);
                }
                if let Some((since, _)) = self.lost_since.take() {
                    let back = format!(
                        "fleet {} reached again after {:.1} s; its mode is {mode}",
                        self.settings.name,
                        since.elapsed().as_secs_f64()
                    );
                    for gate in &gates {
                        gate.set_partitioned(false, &back);
                    }
                }
                let rows = Rows::of(&gates);
                // No strong handle is held across a wait: were the application to drop its last
                // handle meanwhile, the membership would end on this thread, and the thread that
                // dropped it would not wait for this process to leave `fleet_members`.
                drop(gates);
                let _ = self.heartbeat(rows).await;
                Ok(mode)
            }
            // `with_conn` has held the gates at SHADOW if the grace period has passed.
            Err(error) => Err(error),
        }
    }

    async fn join(&mut self, gate: Gate) -> Result<(), JoinError> {
        let (mode, by, reason, policy) = self
            .with_conn(async |client, settings| read_mode(client, settings).await)
            .await
            .map_err(JoinError::Fleet)?;
        if !self.declared {
            self.declare().await.map_err(JoinError::Fleet)?;
            self.declared = true;
        }
        self.follow_policy(policy.0, policy.1).await;
        if let Some(why) = &self.unfollowable {
            return Err(JoinError::Policy(why.clone()));
        }
        gate.hold_under(
            mode,
            &by,
            &format!("fleet {}: {reason}", self.settings.name),
        );
        self.gates.push(gate.downgrade());
        let rows = Rows::of(std::slice::from_ref(&gate));
        drop(gate);
        self.heartbeat(rows).await.map_err(JoinError::Fleet)
    }

    /// Declares this process's tools in `fleet_tools`, which `policy apply` checks a file against.
    async fn declare(&mut self) -> Result<(), StoreError> {
        let mut declared: Vec<serde_json::Value> = ToolDeclaration::linked()
            .into_iter()
            .map(|tool| {
                serde_json::json!({
                    "id": tool.id,
                    "names": tool.names,
                    "parameters": tool.parameters.map(|p| p.to_string()),
                    "redact": tool.redact,
                })
            })
            .collect();
        declared.dedup_by(|a, b| a["id"] == b["id"]);
        let declared = serde_json::Value::from(declared).to_string();
        let statement = self.sql(
            "INSERT INTO {s}.fleet_tools (fleet, id, names, parameters, redact, member)
             SELECT $1, d ->> 'id', ARRAY(SELECT jsonb_array_elements_text(d -> 'names')),
                 d ->> 'parameters', ARRAY(SELECT jsonb_array_elements_text(d -> 'redact')), $2
             FROM jsonb_array_elements($3::text::jsonb) AS d
             ON CONFLICT (fleet, id) DO UPDATE SET names = EXCLUDED.names,
                 parameters = EXCLUDED.parameters, redact = EXCLUDED.redact,
                 member = EXCLUDED.member, declared_at = now()",
        );
        self.with_conn(async |client, settings| {
            client
                .execute(&statement, &[&settings.name, &settings.member, &declared])
                .await
                .map_err(|e| store_error(&e))
                .map(drop)
        })
        .await
    }

    /// Makes the fleet's policy this process's when its digest changed: read, checked against this
    /// process's tools, and replaced, its acceptance recorded (the policy in force from then on). A
    /// text that does not check here is refused (each gate records `policy_refused`) and the policy in
    /// force kept; a process that follows none yet takes the last policy a member accepted, and where
    /// it cannot check that either, no gate joins it ([`JoinError::Policy`]).
    async fn follow_policy(&mut self, applied: Option<String>, accepted: Option<String>) {
        let seen = (applied, accepted);
        if self.policy_seen.as_ref() == Some(&seen) {
            return;
        }
        if seen.0.is_none() {
            self.policy.clear("fleet policy removed");
            self.unfollowable = None;
            self.policy_seen = Some(seen);
            return;
        }
        let statement = self.sql(
            "SELECT policy, policy_by, accepted_policy, accepted_by FROM {s}.fleets WHERE name = $1",
        );
        let read = self
            .with_conn(async |client, settings| {
                let row = client
                    .query_one(&statement, &[&settings.name])
                    .await
                    .map_err(|e| store_error(&e))?;
                let column = |i: usize| {
                    row.try_get::<_, Option<String>>(i)
                        .map_err(|e| StoreError::Unexpected(e.to_string()))
                };
                Ok((column(0)?, column(1)?, column(2)?, column(3)?))
            })
            .await;
        // Not read: the next refresh tries again, and the grace period holds the gates meanwhile.
        let Ok((text, by, accepted_text, accepted_by)) = read else {
            return;
        };
        let by = by.unwrap_or_else(|| "fleet".to_owned());
        let name = format!("fleet {} policy", self.settings.name);
        // Another apply may have landed between the two reads: what was read is what is followed, and
        // the next refresh sees the newer digest.
        let Some(text) = text else {
            self.policy.clear("fleet policy removed");
            self.unfollowable = None;
            return;
        };
        match PolicyFile::parse(&name, &text) {
            Ok(file) => {
                let digest = file.digest().to_owned();
                if self.policy.current().is_none_or(|c| c.digest() != digest) {
                    self.policy.replace(file, &by);
                }
                self.unfollowable = None;
                let accept = self.sql("SELECT {s}.fleet_policy_accepted($1, $2)");
                let recorded = self
                    .with_conn(async |client, settings| {
                        client
                            .execute(&accept, &[&settings.name, &digest])
                            .await
                            .map_err(|e| store_error(&e))
                            .map(drop)
                    })
                    .await;
                // Unrecorded, it is recorded at the next read.
                if recorded.is_ok() {
                    self.policy_seen = Some(seen);
                }
            }
            Err(errors) => {
                self.policy.refused(&errors, &by);
                if self.policy.current().is_none() {
                    self.fall_back(&name, &text, &errors, accepted_text, accepted_by);
                }
                self.policy_seen = Some(seen);
            }
        }
    }

    /// For a process that follows no policy while its fleet's applied one does not check here: the
    /// last policy a member accepted, if it checks, or the reason no gate may join.
    fn fall_back(
        &mut self,
        name: &str,
        text: &str,
        errors: &PolicyErrors,
        accepted: Option<String>,
        accepted_by: Option<String>,
    ) {
        let digest = crate::canonical::sha256_hex(text.as_bytes());
        let refused = format!(
            "fleet {}'s policy {digest} does not check against this process's tools ({})",
            self.settings.name,
            errors.to_string().replace('\n', "; ")
        );
        let why = match accepted.map(|text| PolicyFile::parse(name, &text)) {
            Some(Ok(file)) => {
                self.policy
                    .replace(file, accepted_by.as_deref().unwrap_or("fleet"));
                self.unfollowable = None;
                return;
            }
            Some(Err(errors)) => format!(
                "{refused}, nor does the policy in force, the last its members accepted ({}): a \
                 gate joined now would follow no policy",
                errors.to_string().replace('\n', "; ")
            ),
            None => format!(
                "{refused}, and no member has accepted a policy of the fleet before it: a gate \
                 joined now would follow no policy"
            ),
        };
        self.unfollowable = Some(why);
    }

    /// Writes every joined gate's mode and the time of contact into `fleet_members`.
    async fn heartbeat(&mut self, rows: Rows) -> Result<(), StoreError> {
        if rows.ids.is_empty() {
            return Ok(());
        }
        let Rows {
            ids,
            agents,
            modes,
            partitioned,
            policies,
        } = rows;
        let pid = std::process::id() as i32;
        let host = host_name();
        let statement = self.sql(
            "INSERT INTO {s}.fleet_members
                 (fleet, member, gate, host, pid, agent, mode, partitioned, policy_digest)
             SELECT $1, $2, gate, $3, $4, agent, mode, partitioned, policy_digest
             FROM unnest($5::bigint[], $6::text[], $7::text[], $8::boolean[], $9::text[])
                 AS joined (gate, agent, mode, partitioned, policy_digest)
             ON CONFLICT (fleet, member, gate) DO UPDATE SET mode = EXCLUDED.mode,
                 partitioned = EXCLUDED.partitioned, agent = EXCLUDED.agent,
                 policy_digest = EXCLUDED.policy_digest, last_contact = now()",
        );
        self.with_conn(async |client, settings| {
            client
                .execute(
                    &statement,
                    &[
                        &settings.name,
                        &settings.member,
                        &host,
                        &pid,
                        &ids,
                        &agents,
                        &modes,
                        &partitioned,
                        &policies,
                    ],
                )
                .await
                .map_err(|e| store_error(&e))
                .map(drop)
        })
        .await
    }

    async fn leave(&mut self) {
        let statement = self.sql("DELETE FROM {s}.fleet_members WHERE fleet = $1 AND member = $2");
        let _ = self
            .with_conn(async |client, settings| {
                client
                    .execute(&statement, &[&settings.name, &settings.member])
                    .await
                    .map_err(|e| store_error(&e))
                    .map(drop)
            })
            .await;
    }
}

/// The fleet's mode, who set it and why, and the digest of its policy; creates the fleet's row at
/// FULL_AUTO where it has none.
async fn read_mode(
    client: &Client,
    settings: &Settings,
) -> Result<(Mode, String, String, (Option<String>, Option<String>)), StoreError> {
    let statement = schema::sql(
        "WITH created AS (
             INSERT INTO {s}.fleets (name, mode, changed_by, reason)
             VALUES ($1, 'FULL_AUTO', 'toolgate', 'created by the first gate to join')
             ON CONFLICT (name) DO NOTHING
             RETURNING mode, changed_by, reason, policy_digest, accepted_digest)
         SELECT mode, changed_by, reason, policy_digest, accepted_digest FROM created
         UNION ALL SELECT mode, changed_by, reason, policy_digest, accepted_digest FROM {s}.fleets
             WHERE name = $1
         LIMIT 1",
        &settings.schema,
    );
    let row = match client
        .query_opt(&statement, &[&settings.name])
        .await
        .map_err(|e| store_error(&e))?
    {
        Some(row) => row,
        // Another process created the row while this statement ran: its insert waited for that
        // commit, but its snapshot is older. A new statement sees the row.
        None => {
            let again = schema::sql(
                "SELECT mode, changed_by, reason, policy_digest, accepted_digest FROM {s}.fleets
                 WHERE name = $1",
                &settings.schema,
            );
            client
                .query_one(&again, &[&settings.name])
                .await
                .map_err(|e| store_error(&e))?
        }
    };
    let column = |e: tokio_postgres::Error| StoreError::Unexpected(e.to_string());
    let mode: String = row.try_get(0).map_err(column)?;
    let mode = Mode::from_str(&mode)
        .map_err(|_| StoreError::Unexpected(format!("the fleet's mode {mode:?} is no mode")))?;
    Ok((
        mode,
        row.try_get(1).map_err(column)?,
        row.try_get(2).map_err(column)?,
        (
            row.try_get(3).map_err(column)?,
            row.try_get(4).map_err(column)?,
        ),
    ))
}

/// A fleet's state, for operators: its mode, who set it, and the processes joined to it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FleetStatus {
    /// The fleet's name.
    pub name: String,
    /// Its mode: the highest a gate joining now may run at.
    pub mode: Mode,
    /// Who set it last, and why.
    pub changed_by: String,
    /// See `changed_by`.
    pub reason: String,
    /// Seconds since it was set.
    pub changed_secs_ago: f64,
    /// Every joined gate, by process.
    pub members: Vec<FleetMember>,
    /// The digest of the fleet's operator policy ([`apply_policy`]), and who applied it.
    pub policy: Option<(String, String)>,
    /// The digest of the policy in force, the last a member accepted, and who applied it: a process
    /// that joins follows it where the one applied last does not check against its tools.
    pub in_force: Option<(String, String)>,
}

/// A gate joined to a fleet, as its process last reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetMember {
    /// The process: host and process id.
    pub member: String,
    /// The gate's id in that process.
    pub gate: u64,
    /// The gate's agent label.
    pub agent: Option<String>,
    /// The mode the gate acts in.
    pub mode: Mode,
    /// Whether it acts as SHADOW because it lost the fleet.
    pub partitioned: bool,
    /// Milliseconds since its process last read the fleet's mode.
    pub last_contact_ms: u64,
    /// The digest of the operator's policy the gate follows (`None`: none).
    pub policy_digest: Option<String>,
}

/// What [`lower`] and [`raise`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModeChange {
    /// The fleet's mode before.
    pub from: Mode,
    /// Its mode now.
    pub to: Mode,
}

/// Lowers the fleet `name` to `to` and notifies every joined process: each holds its gates under it
/// within a second. Asking for a mode above the fleet's is refused (use [`raise`]); asking for the
/// same mode records the change and notifies again. A fleet no gate has joined yet does not exist: it
/// is an error (naming the fleets there are), and nothing is created.
pub fn lower(
    url: &str,
    schema: &str,
    name: &str,
    to: Mode,
    by: &str,
    reason: &str,
) -> Result<ModeChange, StoreError> {
    change(url, schema, name, to, by, reason, Direction::Lower)
}

/// Raises the fleet `name` to `to`, for the gates that join from now on: a running gate is never
/// raised. Asking for a mode below the fleet's is refused (use [`lower`]); so is a fleet no gate has
/// joined yet.
pub fn raise(
    url: &str,
    schema: &str,
    name: &str,
    to: Mode,
    by: &str,
    reason: &str,
) -> Result<ModeChange, StoreError> {
    change(url, schema, name, to, by, reason, Direction::Raise)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Lower,
    Raise,
}

fn change(
    url: &str,
    schema_name: &str,
    name: &str,
    to: Mode,
    by: &str,
    reason: &str,
    direction: Direction,
) -> Result<ModeChange, StoreError> {
    valid_name(name).map_err(StoreError::Unavailable)?;
    if by.trim().is_empty() || reason.trim().is_empty() {
        return Err(StoreError::Unavailable(
            "not configured: a change of a fleet's mode names who makes it and why".into(),
        ));
    }
    link::one_shot(url, schema_name, OPERATOR_TIMEOUT, true, async |client| {
        let transaction = client.transaction().await.map_err(|e| store_error(&e))?;
        let current = transaction
            .query_opt(
                &schema::sql(
                    "SELECT mode FROM {s}.fleets WHERE name = $1 FOR UPDATE",
                    schema_name,
                ),
                &[&name],
            )
            .await
            .map_err(|e| store_error(&e))?;
        let from = match current {
            Some(row) => {
                let mode: String = row
                    .try_get(0)
                    .map_err(|e| StoreError::Unexpected(e.to_string()))?;
                Mode::from_str(&mode).map_err(|_| {
                    StoreError::Unexpected(format!("the fleet's mode {mode:?} is no mode"))
                })?
            }
            None => return Err(unknown_fleet(&transaction, schema_name, name).await),
        };
        match direction {
            Direction::Lower if to > from => {
                return Err(StoreError::Unexpected(format!(
                    "fleet {name} is at {from}: lowering it to {to} would raise it (use raise)"
                )));
            }
            Direction::Raise if to < from => {
                return Err(StoreError::Unexpected(format!(
                    "fleet {name} is at {from}: raising it to {to} would lower it (use lower)"
                )));
            }
            _ => {}
        }
        let statements = [
            "INSERT INTO {s}.fleets (name, mode, changed_by, reason) VALUES ($1, $2, $3, $4)
             ON CONFLICT (name) DO UPDATE SET mode = EXCLUDED.mode, changed_at = now(),
                 changed_by = EXCLUDED.changed_by, reason = EXCLUDED.reason",
            "INSERT INTO {s}.fleet_changes (fleet, mode, changed_by, reason) VALUES ($1, $2, $3, $4)",
        ];
        for statement in statements {
            transaction
                .execute(
                    &schema::sql(statement, schema_name),
                    &[&name, &to.as_str(), &by, &reason],
                )
                .await
                .map_err(|e| store_error(&e))?;
        }
        transaction
            .execute("SELECT pg_notify($1, $2)", &[&channel(schema_name), &name])
            .await
            .map_err(|e| store_error(&e))?;
        transaction.commit().await.map_err(|e| store_error(&e))?;
        Ok(ModeChange { from, to })
    })
}

/// Why [`apply_policy`] did not store a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApplyError {
    /// The database could not be reached, failed, or refused (no such fleet, say).
    Store(StoreError),
    /// The text does not check against the tools the fleet's members declare: nothing was stored.
    Refused(PolicyErrors),
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApplyError::Store(error) => error.fmt(f),
            ApplyError::Refused(errors) => write!(
                f,
                "the policy does not check against the tools the fleet's members declare, and \
                 was not applied:\n{errors}"
            ),
        }
    }
}

impl std::error::Error for ApplyError {}

impl From<StoreError> for ApplyError {
    fn from(error: StoreError) -> ApplyError {
        ApplyError::Store(error)
    }
}

/// Checks `text` against the tools the fleet `name`'s members declare (each process declares its own
/// when its first gate joins), then makes it the fleet's operator policy, `by` naming who applied
/// it, and notifies every joined process: each reads it within its poll interval (at once on the
/// notification), checks it against its own tools, and narrows its gates by it, recording it as
/// accepted: the policy in force, which a process that joins later follows should the one applied
/// last not check there. A process where it does not check refuses it (each gate records
/// `policy_refused`) and keeps the policy in force. A text that does not check against the declared
/// tools is refused ([`ApplyError::Refused`]) and nothing stored; so is any text while no member
/// has declared its tools. An empty `text` removes the fleet's policy, the one in force too. Returns
/// the policy's digest; a fleet no gate has joined yet is an error, as for [`lower`].
pub fn apply_policy(
    url: &str,
    schema_name: &str,
    name: &str,
    text: &str,
    by: &str,
) -> Result<Option<String>, ApplyError> {
    valid_name(name).map_err(StoreError::Unavailable)?;
    if by.trim().is_empty() {
        return Err(StoreError::Unavailable(
            "not configured: applying a fleet's policy names who applies it".into(),
        )
        .into());
    }
    if text.len() > crate::policy_file::MAX_POLICY_BYTES {
        return Err(StoreError::Unavailable(format!(
            "not configured: the policy is {} bytes, more than {}",
            text.len(),
            crate::policy_file::MAX_POLICY_BYTES
        ))
        .into());
    }
    let digest = (!text.is_empty()).then(|| crate::canonical::sha256_hex(text.as_bytes()));
    let stored = (!text.is_empty()).then_some(text);
    let file_name = format!("fleet {name} policy");
    let applied = link::one_shot(url, schema_name, OPERATOR_TIMEOUT, true, async |client| {
        let transaction = client.transaction().await.map_err(|e| store_error(&e))?;
        let fleet = transaction
            .query_opt(
                &schema::sql(
                    "SELECT 1 FROM {s}.fleets WHERE name = $1 FOR UPDATE",
                    schema_name,
                ),
                &[&name],
            )
            .await
            .map_err(|e| store_error(&e))?;
        if fleet.is_none() {
            return Err(unknown_fleet(&transaction, schema_name, name).await);
        }
        if let Some(text) = stored {
            let tools = declared_tools(&transaction, schema_name, name).await?;
            if tools.is_empty() {
                return Err(StoreError::Unexpected(format!(
                    "no member of fleet {name:?} has declared its tools (a process declares them \
                     when its first gate joins), so the policy cannot be checked against them: \
                     join a gate first"
                )));
            }
            if let Err(errors) = PolicyFile::check_declared(&file_name, text, &tools) {
                return Ok(Err(errors));
            }
        }
        // A removal needs no member's check: it is in force at once.
        transaction
            .execute(
                &schema::sql(
                    "UPDATE {s}.fleets SET policy = $2, policy_digest = $3, policy_by = $4,
                         policy_at = now(),
                         accepted_policy = CASE WHEN $2::text IS NULL THEN NULL ELSE accepted_policy END,
                         accepted_digest = CASE WHEN $2::text IS NULL THEN NULL ELSE accepted_digest END,
                         accepted_by = CASE WHEN $2::text IS NULL THEN NULL ELSE accepted_by END,
                         accepted_at = CASE WHEN $2::text IS NULL THEN NULL ELSE accepted_at END
                     WHERE name = $1",
                    schema_name,
                ),
                &[&name, &stored, &digest, &by],
            )
            .await
            .map_err(|e| store_error(&e))?;
        transaction
            .execute("SELECT pg_notify($1, $2)", &[&channel(schema_name), &name])
            .await
            .map_err(|e| store_error(&e))?;
        transaction.commit().await.map_err(|e| store_error(&e))?;
        Ok(Ok(digest.clone()))
    })?;
    applied.map_err(ApplyError::Refused)
}

/// The tools the fleet `name`'s members declared.
async fn declared_tools(
    client: &impl tokio_postgres::GenericClient,
    schema_name: &str,
    name: &str,
) -> Result<Vec<ToolDeclaration>, StoreError> {
    let rows = client
        .query(
            &schema::sql(
                "SELECT id, names, parameters, redact FROM {s}.fleet_tools WHERE fleet = $1
                 ORDER BY id",
                schema_name,
            ),
            &[&name],
        )
        .await
        .map_err(|e| store_error(&e))?;
    let column = |e: tokio_postgres::Error| StoreError::Unexpected(e.to_string());
    rows.iter()
        .map(|row| {
            let parameters: Option<String> = row.try_get(2).map_err(column)?;
            let parameters = parameters
                .map(|text| serde_json::from_str(&text))
                .transpose()
                .map_err(|e| {
                    StoreError::Unexpected(format!("a declared tool's parameters: {e}"))
                })?;
            Ok(ToolDeclaration {
                id: row.try_get(0).map_err(column)?,
                names: row.try_get(1).map_err(column)?,
                parameters,
                redact: row.try_get(3).map_err(column)?,
            })
        })
        .collect()
}

/// The error for a fleet that has no row: it names the fleets there are, the closest first.
async fn unknown_fleet(
    client: &impl tokio_postgres::GenericClient,
    schema_name: &str,
    name: &str,
) -> StoreError {
    let names = match client
        .query(
            &schema::sql("SELECT name FROM {s}.fleets ORDER BY name", schema_name),
            &[],
        )
        .await
    {
        Ok(rows) => rows
            .iter()
            .filter_map(|row| row.try_get::<_, String>(0).ok())
            .collect::<Vec<String>>(),
        Err(error) => return store_error(&error),
    };
    StoreError::Unexpected(no_such_fleet(name, &names))
}

/// `there is no fleet "paymnets" (did you mean "payments"?); the fleets are: "payments", "ops"`: the
/// fleets sorted by their distance to `name`, at most 20 of them.
fn no_such_fleet(name: &str, names: &[String]) -> String {
    let mut text = format!(
        "there is no fleet {name:?}: a fleet is created by the first gate that joins it, never by \
         `lower` or `raise`"
    );
    if names.is_empty() {
        text.push_str("; there is no fleet yet");
        return text;
    }
    let mut near: Vec<(usize, &String)> = names.iter().map(|n| (distance(name, n), n)).collect();
    near.sort();
    if let Some((d, closest)) = near.first()
        && *d <= name.chars().count().max(3) / 3
    {
        text.push_str(&format!(" (did you mean {closest:?}?)"));
    }
    let shown: Vec<String> = near
        .iter()
        .take(20)
        .map(|(_, n)| format!("{n:?}"))
        .collect();
    text.push_str(&format!("; the fleets are: {}", shown.join(", ")));
    if near.len() > shown.len() {
        text.push_str(&format!(" and {} more", near.len() - shown.len()));
    }
    text
}

/// The edit distance between two names, counting a swap of two neighbouring characters as one edit.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// The fleet `name`: its mode and its joined gates, most recently heard from first.
pub fn status(url: &str, schema_name: &str, name: &str) -> Result<FleetStatus, StoreError> {
    link::one_shot(url, schema_name, OPERATOR_TIMEOUT, true, async |client| {
        status_with(client, schema_name, name).await
    })
}

/// [`status`] on a connection of the caller's.
pub(super) async fn status_with(
    client: &tokio_postgres::Client,
    schema_name: &str,
    name: &str,
) -> Result<FleetStatus, StoreError> {
    {
        let column = |e: tokio_postgres::Error| StoreError::Unexpected(e.to_string());
        let fleet = client
            .query_opt(
                &schema::sql(
                    "SELECT mode, changed_by, reason,
                         extract(epoch FROM now() - changed_at)::float8, policy_digest, policy_by,
                         accepted_digest, accepted_by
                     FROM {s}.fleets WHERE name = $1",
                    schema_name,
                ),
                &[&name],
            )
            .await
            .map_err(|e| store_error(&e))?;
        let Some(fleet) = fleet else {
            return Err(unknown_fleet(client, schema_name, name).await);
        };
        let rows = client
            .query(
                &schema::sql(
                    "SELECT member, gate, agent, mode, partitioned,
                         (extract(epoch FROM now() - last_contact) * 1000)::bigint, policy_digest
                     FROM {s}.fleet_members WHERE fleet = $1
                     ORDER BY last_contact DESC, member, gate",
                    schema_name,
                ),
                &[&name],
            )
            .await
            .map_err(|e| store_error(&e))?;
        let mode_of = |text: String| {
            Mode::from_str(&text)
                .map_err(|_| StoreError::Unexpected(format!("{text:?} is no mode")))
        };
        let members = rows
            .iter()
            .map(|row| {
                let gate: i64 = row.try_get(1).map_err(column)?;
                let ms: i64 = row.try_get(5).map_err(column)?;
                Ok(FleetMember {
                    member: row.try_get(0).map_err(column)?,
                    gate: gate as u64,
                    agent: row.try_get(2).map_err(column)?,
                    mode: mode_of(row.try_get(3).map_err(column)?)?,
                    partitioned: row.try_get(4).map_err(column)?,
                    last_contact_ms: ms.max(0) as u64,
                    policy_digest: row.try_get(6).map_err(column)?,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(FleetStatus {
            name: name.to_owned(),
            mode: mode_of(fleet.try_get(0).map_err(column)?)?,
            changed_by: fleet.try_get(1).map_err(column)?,
            reason: fleet.try_get(2).map_err(column)?,
            changed_secs_ago: fleet.try_get(3).map_err(column)?,
            members,
            policy: {
                let digest: Option<String> = fleet.try_get(4).map_err(column)?;
                let by: Option<String> = fleet.try_get(5).map_err(column)?;
                digest.map(|d| (d, by.unwrap_or_default()))
            },
            in_force: {
                let digest: Option<String> = fleet.try_get(6).map_err(column)?;
                let by: Option<String> = fleet.try_get(7).map_err(column)?;
                digest.map(|d| (d, by.unwrap_or_default()))
            },
        })
    }
}
