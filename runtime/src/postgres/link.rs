//! The one way every part reaches the database: the address and its TLS read from the URL
//! ([`tls`](super::tls)), a connection opened and driven, the schema's version checked (or migrated),
//! its notifications handed on; the connection a part holds from one operation to the next
//! ([`Held`]), opened again once it is lost; a thread with a runtime of its own for the parts that
//! hold one on a thread (the store, the trail, the fleet), and one-shot connections for the operators'
//! commands.
//!
//! Each part holds one connection at a time and opens another only when it has lost the one it held:
//! a process opens one per [`PostgresStore`](super::PostgresStore), one per
//! [`PostgresSink`](super::PostgresSink), one per [`Fleet`](super::Fleet) membership (however many
//! gates share them) and one per [`Reader`](super::Reader), and a console two (its store and its
//! reader); each operator's command one, for as long as it runs.
//!
//! Every part loses and regains its connection the same way. A connection the server closed (it
//! stopped, restarted, or ended the session) or one an operation left in doubt (the server unreachable,
//! no answer within the part's timeout) is dropped; the part's next operation opens another, within
//! the same timeout as the operation itself, so that while the server is away each operation is
//! refused with the cause (`unavailable: error connecting to server: ...`, `no answer in time`) and,
//! once it is back, the part works again in the same process. A refusal of the server's over a
//! statement (an unexpected answer) leaves the connection as it is. What a part made on its connection
//! (its prepared statements, its writer's lock, its `LISTEN`) is made again on the next one.
//!
//! The bound of one operation, opening a connection included, is set once per part, where it calls
//! [`Held::run`]: the store's timeout from when the operation is asked (the wait for the one before it
//! included); the sink's timeout per group commit; the fleet's timeout, and no more than what is left
//! of its grace period; the reader's timeout per statement.

use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{Mutex, mpsc};
use tokio_postgres::{AsyncMessage, Client, Config, Notification};

use super::schema::{self, store_error, valid_schema};
use super::tls::{self, SslMode, Tls};
use crate::approval::store::StoreError;

/// How long `toolgate migrate` may take, connecting included.
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a part checks of the schema when it connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Schema {
    /// Its version must be this crate's ([`schema::check`]).
    Check,
    /// It is made, or brought to this crate's version ([`schema::migrate`]).
    Migrate,
    /// Nothing: the caller migrates.
    Unchecked,
}

impl Schema {
    /// [`Schema::Migrate`] where the part was told to migrate, else [`Schema::Check`].
    pub(super) fn migrating(migrate: bool) -> Schema {
        if migrate {
            Schema::Migrate
        } else {
            Schema::Check
        }
    }
}

/// Where a part connects, and how: the client's configuration and its TLS.
#[derive(Debug, Clone)]
pub(super) struct Link {
    config: Config,
    tls: Tls,
}

/// An open connection, driven by a task of the runtime that opened it.
#[derive(Debug)]
pub(super) struct Opened {
    pub(super) client: Client,
    /// The notifications of the channels listened to; closed when the connection ends.
    pub(super) notifications: mpsc::UnboundedReceiver<Notification>,
}

impl Link {
    /// The link of `url` (`postgres://user@host/db?sslmode=verify-full&sslrootcert=ca.pem`, or
    /// key-value pairs), connecting within `timeout`, named `application` to the server unless the URL
    /// names one.
    pub(super) fn new(url: &str, timeout: Duration, application: &str) -> Result<Link, StoreError> {
        let (mut config, tls) = tls::configure(url)?;
        config.connect_timeout(timeout);
        if config.get_application_name().is_none() {
            config.application_name(application);
        }
        Ok(Link { config, tls })
    }

    /// Opens a connection on the current tokio runtime, checks the schema `schema` as `step` says and
    /// listens on `listen`. The caller bounds the time it takes.
    pub(super) async fn open(
        &self,
        schema: &str,
        step: Schema,
        listen: Option<&str>,
    ) -> Result<Opened, StoreError> {
        let (mut client, mut connection) = self
            .config
            .connect(self.tls.connector.clone())
            .await
            .map_err(|e| self.refused(&e))?;
        let (tell, notifications) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            // Ends with the connection: the client then reports itself closed, and the receiver of
            // notifications sees the channel closed.
            while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(AsyncMessage::Notification(notification)) => {
                        let _ = tell.send(notification);
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        });
        match step {
            Schema::Check => schema::check(&client, schema).await?,
            Schema::Migrate => schema::migrate(&mut client, schema).await.map(drop)?,
            Schema::Unchecked => {}
        }
        if let Some(channel) = listen {
            client
                .batch_execute(&format!("LISTEN \"{channel}\""))
                .await
                .map_err(|e| store_error(&e))?;
        }
        Ok(Opened {
            client,
            notifications,
        })
    }

    /// Why connecting failed, in a sentence: the TLS handshake's cause, a server that takes only
    /// encrypted connections, or the client's error.
    fn refused(&self, error: &tokio_postgres::Error) -> StoreError {
        if let Some(why) = tls::failure(error, &self.config, &self.tls) {
            return StoreError::Unavailable(why);
        }
        match error.as_db_error() {
            Some(db)
                if db.code().code() == "28000"
                    && db.message().ends_with("no encryption")
                    && matches!(self.tls.mode, SslMode::Disable | SslMode::Prefer) =>
            {
                StoreError::Unavailable(format!(
                    "the server takes only encrypted connections ({}), and this one was not: set \
                     sslmode=verify-full",
                    db.message()
                ))
            }
            // Invalid authorization: the role, its password or its client certificate.
            Some(db) if db.code().code().starts_with("28") => StoreError::Unavailable(format!(
                "the server refused the connection: {} ({})",
                db.message(),
                db.code().code()
            )),
            _ => store_error(error),
        }
    }
}

/// What a part makes on each connection it opens (its prepared statements, its writer's lock, its
/// listener) and keeps with it: a session, gone with the connection and made again on the next one.
pub(super) trait Session: Sized {
    /// What making it needs, kept by the [`Held`] connection.
    type Setup;

    /// Makes the session on a connection just opened, its schema checked and its channel listened to.
    async fn start(opened: Opened, setup: &Self::Setup) -> Result<Self, StoreError>;

    /// The connection's client.
    fn client(&self) -> &Client;
}

/// The fleet's session: the connection and its notifications, nothing more.
impl Session for Opened {
    type Setup = ();

    async fn start(opened: Opened, (): &()) -> Result<Opened, StoreError> {
        Ok(opened)
    }

    fn client(&self) -> &Client {
        &self.client
    }
}

/// Whether an error leaves the connection it happened on in doubt, so that it is not used again: the
/// server unreachable or gone, the connection cut, no answer in time. A statement the server refused
/// leaves it as it was.
pub(super) trait Lost {
    fn lost(&self) -> bool;
}

impl Lost for StoreError {
    fn lost(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Timeout)
    }
}

/// The connection a part holds from one operation to the next: where it connects, the schema it
/// checks (or migrates) and the channel it listens on whenever it opens one, and the one open now with
/// the part's session, if any. Every operation goes through [`Held::run`] (or [`run_shared`]).
pub(super) struct Held<S: Session> {
    link: Link,
    schema: String,
    step: Schema,
    listen: Option<String>,
    setup: S::Setup,
    current: Option<S>,
}

impl<S: Session> Held<S> {
    /// Nothing open yet: the first operation opens the connection.
    pub(super) fn new(
        link: Link,
        schema: &str,
        step: Schema,
        listen: Option<&str>,
        setup: S::Setup,
    ) -> Held<S> {
        Held {
            link,
            schema: schema.to_owned(),
            step,
            listen: listen.map(str::to_owned),
            setup,
            current: None,
        }
    }

    /// The session held, if any; the server may have closed its connection since.
    pub(super) fn current(&mut self) -> Option<&mut S> {
        self.current.as_mut()
    }

    /// Drops the connection held, if any: the next operation opens another.
    pub(super) fn broken(&mut self) {
        self.current = None;
    }

    /// The connection, opened and its session made where none is held or the server closed it; with
    /// `true` when this call opened it, so that the part reads again what may have changed while it
    /// had none. The caller bounds the time it takes.
    pub(super) async fn live(&mut self) -> Result<(&mut S, bool), StoreError> {
        let opening = self
            .current
            .as_ref()
            .is_none_or(|session| session.client().is_closed());
        if opening {
            self.current = None;
            let listen = self.listen.as_deref();
            let opened = self.link.open(&self.schema, self.step, listen).await?;
            let session = S::start(opened, &self.setup).await?;
            return Ok((self.current.insert(session), true));
        }
        self.current
            .as_mut()
            .map(|session| (session, false))
            .ok_or_else(|| StoreError::Unexpected("no connection held".into()))
    }

    /// `op` on the connection, opened where needed (see [`Held::live`]), all within `limit`: the
    /// part's timeout, stated where the part calls it. Past it, or after an error that leaves the
    /// connection in doubt ([`Lost`]), the connection is dropped and the next operation opens another.
    pub(super) async fn run<T, E>(
        &mut self,
        limit: Duration,
        op: impl AsyncFnOnce(&mut S, bool) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<StoreError> + Lost,
    {
        let work = async {
            let (session, opened) = self.live().await?;
            op(session, opened).await
        };
        let done = tokio::time::timeout(limit, work)
            .await
            .unwrap_or_else(|_| Err(StoreError::Timeout.into()));
        if done.as_ref().is_err_and(Lost::lost) {
            self.broken();
        }
        done
    }
}

/// A session shared by operations at once: made as `S` is, held behind an [`Arc`].
impl<S: Session> Session for Arc<S> {
    type Setup = S::Setup;

    async fn start(opened: Opened, setup: &S::Setup) -> Result<Arc<S>, StoreError> {
        S::start(opened, setup).await.map(Arc::new)
    }

    fn client(&self) -> &Client {
        S::client(self)
    }
}

/// [`Held::run`] for a connection that operations use at once (the console's reads, one per page
/// asked): the lock is held while the connection is checked or opened, not while `op` runs on it.
/// After an error that leaves it in doubt, it is dropped if it is still the one held (another
/// operation may have opened the next one already).
pub(super) async fn run_shared<S: Session, T>(
    held: &Mutex<Held<Arc<S>>>,
    limit: Duration,
    op: impl AsyncFnOnce(&S) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let mut used = None;
    let work = async {
        let session = Arc::clone(held.lock().await.live().await?.0);
        used = Some(Arc::clone(&session));
        op(&session).await
    };
    let done = tokio::time::timeout(limit, work)
        .await
        .unwrap_or(Err(StoreError::Timeout));
    if done.as_ref().is_err_and(Lost::lost) {
        let mut held = held.lock().await;
        let same = match (&held.current, &used) {
            (Some(current), Some(used)) => Arc::ptr_eq(current, used),
            _ => false,
        };
        if same {
            held.broken();
        }
    }
    done
}

/// `work` within `limit`: past it, [`StoreError::Timeout`].
pub(super) async fn within<T>(
    limit: Duration,
    work: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(limit, work)
        .await
        .unwrap_or(Err(StoreError::Timeout))
}

/// Runs `work` on a thread of its own named `name`, on a current-thread runtime of its own (tasks
/// that are not `Send` included): the thread of a part that holds a connection. The thread ends when
/// `work` does.
pub(super) fn thread<F>(
    name: &str,
    work: impl FnOnce() -> F + Send + 'static,
) -> std::io::Result<JoinHandle<()>>
where
    F: Future<Output = ()> + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            tokio::task::LocalSet::new().block_on(&runtime, work());
        })
}

/// Runs `op` on a connection of its own to `url`, on a runtime of its own, all within `timeout`: the
/// operators' commands (`toolgate fleet`, `toolgate audit verify`, `toolgate migrate`). With `check`,
/// the schema's version is checked first; nothing is created or migrated.
pub(super) fn one_shot<T>(
    url: &str,
    schema: &str,
    timeout: Duration,
    check: bool,
    op: impl AsyncFnOnce(&mut Client) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    if !valid_schema(schema) {
        return Err(StoreError::Unavailable(format!(
            "not configured: the schema name {schema:?} is not lowercase letters, digits and `_`"
        )));
    }
    let link = Link::new(url, timeout, "toolgate")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StoreError::Unavailable(format!("cannot start a runtime: {e}")))?;
    let step = if check {
        Schema::Check
    } else {
        Schema::Unchecked
    };
    runtime.block_on(within(timeout, async {
        let mut opened = link.open(schema, step, None).await?;
        op(&mut opened.client).await
    }))
}

/// [`schema::migrate`] on a connection of its own, for `toolgate migrate` and [`super::migrate`].
pub(super) fn migrate_url(url: &str, schema: &str) -> Result<(i32, i32), StoreError> {
    one_shot(url, schema, MIGRATE_TIMEOUT, false, async |client| {
        schema::migrate(client, schema).await
    })
}
