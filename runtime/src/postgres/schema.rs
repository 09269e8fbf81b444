//! What every PostgreSQL part shares: the schema's migrations, run by its owner, and the check of its
//! version that every other connection makes; the errors of the server as the parts report them, and
//! advisory lock keys.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

use super::sql;
use crate::approval::store::StoreError;

/// How long an operation may take, unless the builder sets another.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Pending requests an agent may hold, unless the builder sets another.
pub const DEFAULT_MAX_PENDING: usize = 10_000;

/// The schema the store's tables live in, unless the builder names another.
pub const DEFAULT_SCHEMA: &str = "toolgate";

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

/// The schema's version this crate uses: the number of its migrations.
pub(super) fn known_version() -> i32 {
    sql::MIGRATIONS.len() as i32
}

/// Why a connection refuses a schema that is missing or older than this crate's.
fn not_migrated(schema: &str, version: Option<i32>) -> StoreError {
    let found = match version {
        None => format!("the schema `{schema}` is not in this database"),
        Some(version) => format!(
            "the schema `{schema}` is at version {version}, and this toolgate uses version {}",
            known_version()
        ),
    };
    StoreError::Unavailable(format!(
        "{found}: run `toolgate migrate --store URL --schema {schema}` as its owner first (or connect \
         with `.migrate(true)` as a role that may create it)"
    ))
}

fn newer(schema: &str, version: i32) -> StoreError {
    StoreError::Unexpected(format!(
        "the schema `{schema}` is at version {version}, newer than this toolgate knows ({})",
        known_version()
    ))
}

/// Checks that the schema is at this crate's version, changing nothing: what every connection does
/// unless told to migrate. A role needs `USAGE` on the schema and `SELECT` on `schema_version`.
pub(super) async fn check(client: &Client, schema: &str) -> Result<(), StoreError> {
    let version = match client
        .query_one(&self::sql(sql::SCHEMA_VERSION, schema), &[])
        .await
    {
        Ok(row) => row
            .try_get::<_, i32>(0)
            .map_err(|e| StoreError::Unexpected(format!("schema_version: {e}")))?,
        // No such schema, or no `schema_version` in it.
        Err(e)
            if e.as_db_error()
                .is_some_and(|db| ["3F000", "42P01"].contains(&db.code().code())) =>
        {
            return Err(not_migrated(schema, None));
        }
        Err(e) => return Err(store_error(&e)),
    };
    match version.cmp(&known_version()) {
        std::cmp::Ordering::Less => Err(not_migrated(schema, Some(version))),
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(newer(schema, version)),
    }
}

/// Creates the schema, or brings it to this version, in one transaction under an advisory lock, so
/// that owners migrating at once migrate it once; returns the versions before and after. The role
/// needs `CREATE` on the database the first time, and to own the schema after.
pub(super) async fn migrate(client: &mut Client, schema: &str) -> Result<(i32, i32), StoreError> {
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
    let known = known_version();
    if version > known {
        return Err(newer(schema, version));
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
    transaction.commit().await.map_err(error)?;
    Ok((version, known.max(version)))
}

/// `error`, saying which part failed (`the fleet`, `the audit trail`): a part's connection reports
/// its errors so.
pub(super) fn naming(error: StoreError, part: &str) -> StoreError {
    match error {
        StoreError::Unavailable(why) => StoreError::Unavailable(format!("{part}: {why}")),
        StoreError::Timeout => StoreError::Unavailable(format!("{part}: no answer in time")),
        StoreError::Unexpected(what) => StoreError::Unexpected(format!("{part}: {what}")),
    }
}
