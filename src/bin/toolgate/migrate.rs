//! `toolgate migrate`: the schema of the PostgreSQL tables made, or brought to this toolgate's version.

use toolgate::approval::store::StoreError;
use toolgate::terminal::escaped;

use super::{Database, USAGE, print};

const DONE: u8 = 0;
const REFUSED: u8 = 1;
const UNAVAILABLE: u8 = 3;

pub(super) const MIGRATE_EXIT_STATUS: &str = "\
Makes the schema of the PostgreSQL tables (approvals, budgets, the audit trail, fleets) in the database
of --store URL (or TOOLGATE_STORE), or brings it to this toolgate's version; run it as the schema's
owner before the gates, operators and auditors connect, and after upgrading toolgate. They only check
the schema's version, and need only the grants the docs of `toolgate::postgres` list. Running it again
changes nothing.

Exit status:
  0   the schema is at this toolgate's version
  1   refused: no privilege to create or change the schema, or it is newer than this toolgate
  3   the database could not be reached, or did not answer in time
  64  the command line is invalid (no store)";

/// `toolgate migrate`.
pub(super) fn run(database: Database) -> u8 {
    let Some(url) = database.store.filter(|url| !url.is_empty()) else {
        eprintln!("toolgate: which database? give --store URL or set TOOLGATE_STORE");
        return USAGE;
    };
    let schema = escaped(&database.schema).into_owned();
    match toolgate::postgres::migrate(&url, &database.schema) {
        Ok(done) if done.from == done.to => {
            print(&format!(
                "schema `{schema}`: at version {} already\n",
                done.to
            ));
            DONE
        }
        Ok(done) => {
            print(&format!(
                "schema `{schema}`: migrated from version {} to version {}\n",
                done.from, done.to
            ));
            DONE
        }
        Err(error) => {
            eprintln!(
                "toolgate: cannot migrate the schema `{schema}`: {}",
                escaped(&error.to_string())
            );
            match error {
                StoreError::Unexpected(_) => REFUSED,
                _ => UNAVAILABLE,
            }
        }
    }
}
