//! The one way every part reaches the database: the address and its TLS read from the URL
//! ([`tls`](super::tls)), a connection opened and driven, the schema's version checked (or migrated),
//! its notifications handed on; a thread with a runtime of its own for the parts that hold a
//! connection (the store, the trail, the fleet), and one-shot connections for the operators' commands.
//!
//! Each part holds one connection at a time and opens another only when it has lost the one it held:
//! a process opens one per [`PostgresStore`](super::PostgresStore), one per
//! [`PostgresSink`](super::PostgresSink), one per [`Fleet`](super::Fleet) membership (however many
//! gates share them), and a console two (its store and its [`Reader`](super::Reader)); each operator's
//! command one, for as long as it runs.

use std::future::{Future, poll_fn};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::mpsc;
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
