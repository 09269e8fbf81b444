//! `toolgate fleet`: the kill switch of every process joined to a fleet.

use std::time::Duration;

use clap::{Args, Subcommand};
use toolgate::Mode;
use toolgate::approval::store::StoreError;
use toolgate::postgres::fleet::{self, FleetStatus};

use toolgate::terminal::escaped;

use super::{Database, USAGE, age, print};

const DONE: u8 = 0;
const REFUSED: u8 = 1;
const UNAVAILABLE: u8 = 3;

pub(super) const FLEET_EXIT_STATUS: &str = "\
The fleet lives in the PostgreSQL database its gates join: --store URL, or the environment variable
TOOLGATE_STORE; the fleet's name: --fleet NAME, or TOOLGATE_FLEET.

Exit status:
  0   done
  1   refused: `lower` to a mode above the fleet's, `raise` to one below it, or no such fleet
  3   the database could not be reached, failed, or did not answer in time
  64  the command line is invalid (no store, no fleet, or no --by and no name for the operator)";

#[derive(Debug, Args)]
pub(super) struct FleetCommand {
    #[command(flatten)]
    database: Database,
    /// The fleet.
    #[arg(long, env = "TOOLGATE_FLEET", value_name = "NAME", global = true)]
    fleet: Option<String>,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Lowers the fleet: every joined gate, in every process, refuses above the new mode within
    /// a second, and stays there.
    #[command(after_help = FLEET_EXIT_STATUS)]
    Lower {
        /// The new mode.
        #[arg(long, value_name = "MODE")]
        to: Mode,
        /// Who lowers it, for the audit records [default: USER, then LOGNAME, then the name
        /// of the account the command runs as]
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
        /// Why, for the audit records.
        #[arg(long, value_name = "TEXT")]
        reason: String,
    },
    /// Raises the fleet, for the gates that join from now on; running gates keep their mode.
    #[command(after_help = FLEET_EXIT_STATUS)]
    Raise {
        /// The new mode.
        #[arg(long, value_name = "MODE")]
        to: Mode,
        /// Who raises it [default: USER, then LOGNAME, then the name of the account the
        /// command runs as]
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
        /// Why.
        #[arg(long, value_name = "TEXT")]
        reason: String,
    },
    /// Shows the fleet's mode and every joined gate: its process, mode and last contact.
    #[command(after_help = FLEET_EXIT_STATUS)]
    Status,
}

pub(super) fn run(command: FleetCommand) -> u8 {
    let Some(url) = command.database.store.filter(|url| !url.is_empty()) else {
        eprintln!("toolgate: which database? give --store URL or set TOOLGATE_STORE");
        return USAGE;
    };
    let Some(name) = command.fleet.filter(|name| !name.is_empty()) else {
        eprintln!("toolgate: which fleet? give --fleet NAME or set TOOLGATE_FLEET");
        return USAGE;
    };
    let schema = &command.database.schema;
    let (to, by, reason, lowering) = match command.action {
        Action::Status => {
            return match fleet::status(&url, schema, &name) {
                Ok(status) => {
                    print(&table(&status));
                    DONE
                }
                Err(error) => failed(&name, &error),
            };
        }
        Action::Lower { to, by, reason } => (to, by, reason, true),
        Action::Raise { to, by, reason } => (to, by, reason, false),
    };
    let Some(by) = super::operator(by) else {
        eprintln!(
            "toolgate: who changes the fleet? give --by NAME (USER and LOGNAME are not set, \
             and the account has no name)"
        );
        return USAGE;
    };
    let changed = if lowering {
        fleet::lower(&url, schema, &name, to, &by, &reason)
    } else {
        fleet::raise(&url, schema, &name, to, &by, &reason)
    };
    match changed {
        Ok(change) if lowering => {
            print(&format!(
                "fleet {}: {} -> {}; every joined gate refuses above {} within a second\n",
                escaped(&name),
                change.from,
                change.to,
                change.to
            ));
            DONE
        }
        Ok(change) => {
            print(&format!(
                "fleet {}: {} -> {} for gates that join from now on; running gates keep their \
                 mode\n",
                escaped(&name),
                change.from,
                change.to
            ));
            DONE
        }
        Err(error) => failed(&name, &error),
    }
}

/// Says what failed of the fleet `name`; the status is 1 where the database refused, 3 where it was
/// not reached.
pub(super) fn failed(name: &str, error: &StoreError) -> u8 {
    eprintln!(
        "toolgate: the fleet `{}`: {}",
        escaped(name),
        escaped(&error.to_string())
    );
    match error {
        StoreError::Unexpected(_) => REFUSED,
        _ => UNAVAILABLE,
    }
}

fn table(status: &FleetStatus) -> String {
    let mut out = format!(
        "fleet {}: {} (set by {} {} ago: {})\n",
        escaped(&status.name),
        status.mode,
        escaped(&status.changed_by),
        age(Duration::from_secs_f64(status.changed_secs_ago.max(0.0))),
        escaped(&status.reason)
    );
    match &status.policy {
        Some((digest, by)) => {
            out.push_str(&format!("policy {digest} (applied by {})\n", escaped(by)));
        }
        None => out.push_str("no policy applied\n"),
    }
    match &status.in_force {
        Some((digest, by)) => out.push_str(&format!(
            "policy in force {digest} (accepted by a member; applied by {})\n",
            escaped(by)
        )),
        None if status.policy.is_some() => {
            out.push_str("no policy in force: no member has accepted one\n");
        }
        None => {}
    }
    if status.members.is_empty() {
        out.push_str("no gate is joined\n");
        return out;
    }
    out.push_str("MEMBER\tGATE\tAGENT\tMODE\tLAST CONTACT\tPOLICY\n");
    for member in &status.members {
        let mode = if member.partitioned {
            format!("{} (lost the fleet)", member.mode)
        } else {
            member.mode.to_string()
        };
        let policy = member
            .policy_digest
            .as_deref()
            .map_or("-", |d| &d[..d.len().min(12)]);
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{} ago\t{}\n",
            escaped(&member.member),
            member.gate,
            escaped(member.agent.as_deref().unwrap_or("-")),
            mode,
            age(Duration::from_millis(member.last_contact_ms)),
            escaped(policy)
        ));
    }
    out
}
