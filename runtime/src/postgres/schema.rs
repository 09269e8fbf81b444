//! What every PostgreSQL part shares: the schema's migrations, run once by whichever part connects
//! first, the errors of the server as the parts report them, and advisory lock keys.

use std::str::FromStr;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio_postgres::{Client, Config, NoTls};

use super::sql;
use crate::approval::store::StoreError;

/// `text` with the schema's quoted name in place of `{s}`. The name is checked to be lowercase
/// letters, digits and `_` when a part is configured: quoting is for keywords (`user`).
pub(super) fn sql(text: &str, schema: &str) -> String {
    text.replace("{s}", &format!("\"{schema}\""))
}

/// Whether `schema` is a name the parts accept: lowercase letters, digits and `_`, at most 63,
/// starting with a letter or `_`.
pub(super) fn valid_schema(schema: &str) -> bool {
    let mut chars = schema.chars();
    schema.len() <= 63
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// What an error of the client or the server means for the caller.
pub(super) fn store_error(error: &tokio_postgres::Error) -> StoreError {
    match error.as_db_error() {
        // Connection exceptions, operator intervention (a shutdown), insufficient resources and
        // transactions rolled back by the server: unavailable for now.
        Some(db)
            if ["08", "57", "53", "40"]
                .iter()
                .any(|class| db.code().code().starts_with(class)) =>
        {
            StoreError::Unavailable(format!("{} ({})", db.message(), db.code().code()))
        }
        // Any other error of the server: a statement of ours it refused, or a schema not ours.
        Some(db) => StoreError::Unexpected(format!("{} ({})", db.message(), db.code().code())),
        None => StoreError::Unavailable(error.to_string()),
    }
}

/// An advisory lock's key: the schema and what is locked in it, hashed to 64 bits.
pub(super) fn lock_key(schema: &str, what: &str) -> i64 {
    let digest = Sha256::new()
        .chain_update(schema.as_bytes())
        .chain_update([0])
        .chain_update(what.as_bytes())
        .finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(bytes)
}

/// Creates the schema, or brings it to this version, in one transaction under an advisory lock, so
/// that processes connecting at once migrate it once. Every part (the approval store, the audit sink,
/// the fleet) runs it, so each finds the tables of the others too.
pub(super) async fn migrate(client: &mut Client, schema: &str) -> Result<(), StoreError> {
    let error = |e: tokio_postgres::Error| store_error(&e);
    let transaction = client.transaction().await.map_err(error)?;
    let key = lock_key(schema, "migrate");
    transaction
        .execute(sql::LOCK_AGENT, &[&key])
        .await
        .map_err(error)?;
    transaction
        .batch_execute(&self::sql(sql::PREPARE_SCHEMA, schema))
        .await
        .map_err(error)?;
    let version = transaction
        .query_one(&self::sql(sql::SCHEMA_VERSION, schema), &[])
        .await
        .map_err(error)?;
    let version: i32 = version
        .try_get(0)
        .map_err(|e| StoreError::Unexpected(format!("schema_version: {e}")))?;
    let known = sql::MIGRATIONS.len() as i32;
    if version > known {
        return Err(StoreError::Unexpected(format!(
            "the schema `{schema}` is at version {version}, newer than this toolgate knows ({known})"
        )));
    }
    for (number, migration) in (1i32..).zip(sql::MIGRATIONS).skip(version as usize) {
        transaction
            .batch_execute(&self::sql(migration, schema))
            .await
            .map_err(error)?;
        transaction
            .execute(&self::sql(sql::RECORD_VERSION, schema), &[&number])
            .await
            .map_err(error)?;
    }
    transaction.commit().await.map_err(error)
}

/// The client's configuration of `url`, connecting within `timeout`, named `application` to the server
/// unless the URL names one.
pub(super) fn config(
    url: &str,
    timeout: Duration,
    application: &str,
) -> Result<Config, StoreError> {
    let mut config = Config::from_str(url)
        .map_err(|e| StoreError::Unavailable(format!("not a PostgreSQL address: {e}")))?;
    config.connect_timeout(timeout);
    if config.get_application_name().is_none() {
        config.application_name(application);
    }
    Ok(config)
}

/// Runs `op` on a connection of its own to `url`, on a runtime of its own, all within `timeout`: the
/// operators' commands (`toolgate fleet`, `toolgate audit verify`). With `migrate`, the schema is
/// created or migrated first; a reader (an auditor's role may only `SELECT`) changes nothing.
pub(super) fn one_shot<T>(
    url: &str,
    schema: &str,
    timeout: Duration,
    migrate: bool,
    op: impl AsyncFnOnce(&mut Client) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    if !valid_schema(schema) {
        return Err(StoreError::Unavailable(format!(
            "not configured: the schema name {schema:?} is not lowercase letters, digits and `_`"
        )));
    }
    let config = config(url, timeout, "toolgate")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StoreError::Unavailable(format!("cannot start a runtime: {e}")))?;
    let work = async {
        let (mut client, connection) = config.connect(NoTls).await.map_err(|e| store_error(&e))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        if migrate {
            self::migrate(&mut client, schema).await?;
        }
        op(&mut client).await
    };
    runtime.block_on(async {
        tokio::time::timeout(timeout, work)
            .await
            .unwrap_or(Err(StoreError::Timeout))
    })
}
