//! The `toolgate` command: checks audit logs and reports on them; with the `postgres` feature, answers
//! two-step approval requests kept in PostgreSQL.
//!
//! One module per subcommand; this file holds the command line, `main` and what they share.

#![forbid(unsafe_code)]

#[cfg(feature = "postgres")]
mod approvals;
mod audit;
#[cfg(feature = "postgres")]
mod budgets;
#[cfg(feature = "console")]
mod console;
#[cfg(feature = "postgres")]
mod fleet;
#[cfg(feature = "postgres")]
mod migrate;
#[cfg(feature = "postgres")]
mod policy;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use audit::{Audit, VERIFY_EXIT_STATUS};
#[cfg(feature = "console")]
use console::CONSOLE_EXIT_STATUS;
#[cfg(feature = "postgres")]
use {
    approvals::APPROVALS_EXIT_STATUS, budgets::BUDGETS_EXIT_STATUS, fleet::FLEET_EXIT_STATUS,
    migrate::MIGRATE_EXIT_STATUS, policy::POLICY_EXIT_STATUS,
};

/// Who answers or changes something: `--by`, else where the environment names the operator (USER,
/// then LOGNAME), else the name of the account the command runs as.
#[cfg(feature = "postgres")]
fn operator(by: Option<String>) -> Option<String> {
    // A name that reads as another (SECURITY.md, names that read alike) would record an answer under
    // a name a person takes for someone else's.
    let named = |name: String| {
        Some(name.trim().to_owned())
            .filter(|name| !name.is_empty())
            .filter(|name| match toolgate::names::refusal(name) {
                Some(why) => {
                    eprintln!("toolgate: the operator's name is refused: {why}");
                    false
                }
                None => true,
            })
    };
    // A `--by` that names no one is a mistake, not a question for the environment.
    if let Some(by) = by {
        return named(by);
    }
    None.or_else(|| std::env::var("USER").ok().and_then(named))
        .or_else(|| std::env::var("LOGNAME").ok().and_then(named))
        .or_else(|| account().and_then(named))
}

/// The name of the account the process runs as, from the password file.
#[cfg(all(feature = "postgres", target_os = "linux"))]
fn account() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").ok()?.uid().to_string();
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)? == uid).then(|| name.to_owned())
    })
}

/// The name of the account the process runs as, where the system names it in the environment.
#[cfg(all(feature = "postgres", not(target_os = "linux")))]
fn account() -> Option<String> {
    std::env::var("USERNAME").ok()
}

/// Checks toolgate audit logs and reports on them.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, after_help = VERIFY_EXIT_STATUS)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Hash-chained JSONL audit logs, as written by `JsonlSink`.
    #[command(subcommand)]
    Audit(Audit),
    /// Two-step approval requests kept in PostgreSQL: list them, show one, approve or reject it.
    #[cfg(feature = "postgres")]
    #[command(after_help = APPROVALS_EXIT_STATUS)]
    Approvals(approvals::Approvals),
    /// Fleets of gates joined through PostgreSQL: lower every process at once, raise for new gates,
    /// list who is joined.
    #[cfg(feature = "postgres")]
    #[command(after_help = FLEET_EXIT_STATUS)]
    Fleet(fleet::FleetCommand),
    /// A fleet's operator policy kept in PostgreSQL: apply a policy file to every joined process.
    #[cfg(feature = "postgres")]
    #[command(subcommand, after_help = POLICY_EXIT_STATUS)]
    Policy(policy::PolicyCommand),
    /// Budgets shared through PostgreSQL: how many calls each one's window holds, a reset of the ones
    /// selected (recorded: who, when, why), and the resets' records.
    #[cfg(feature = "postgres")]
    #[command(after_help = BUDGETS_EXIT_STATUS)]
    Budgets(budgets::BudgetsCommand),
    /// Makes the schema of the PostgreSQL tables, or brings it to this toolgate's version: the owner's
    /// step, before anyone else connects.
    #[cfg(feature = "postgres")]
    #[command(after_help = MIGRATE_EXIT_STATUS)]
    Migrate(Database),
    /// The operator console in the browser, on the PostgreSQL store and trail: pending approvals
    /// answered live, fleets lowered, the trail searched, the shadow-mode promotion drawn.
    #[cfg(feature = "console")]
    #[command(after_help = CONSOLE_EXIT_STATUS)]
    Console(console::ConsoleArgs),
}

/// The command line is invalid: clap's usage errors too, which would otherwise exit with 2.
const USAGE: u8 = 64;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap exits with 2 on a usage error, which here means a torn log.
            return ExitCode::from(if e.use_stderr() { USAGE } else { audit::INTACT });
        }
    };
    let status = match cli.command {
        Command::Audit(command) => audit::run(command),
        #[cfg(feature = "postgres")]
        Command::Approvals(command) => approvals::run(command),
        #[cfg(feature = "postgres")]
        Command::Fleet(command) => fleet::run(command),
        #[cfg(feature = "postgres")]
        Command::Policy(command) => policy::run(command),
        #[cfg(feature = "postgres")]
        Command::Budgets(command) => budgets::run(command),
        #[cfg(feature = "postgres")]
        Command::Migrate(database) => migrate::run(database),
        #[cfg(feature = "console")]
        Command::Console(args) => console::run(args),
    };
    ExitCode::from(status)
}

/// Where the gates' tables are: the store, the audit trail and fleets share one database.
#[cfg(feature = "postgres")]
#[derive(Debug, clap::Args)]
struct Database {
    /// The database: a PostgreSQL URL (postgres://user@host/database) or key-value string.
    #[arg(
        long,
        env = "TOOLGATE_STORE",
        value_name = "URL",
        global = true,
        hide_env_values = true
    )]
    store: Option<String>,
    /// The schema of the tables, as the gates name it.
    #[arg(
        long,
        env = "TOOLGATE_STORE_SCHEMA",
        default_value = "toolgate",
        global = true
    )]
    schema: String,
}

/// `42s`, `3m12s`, `2h05m`, `1d03h`.
#[cfg(feature = "postgres")]
fn age(duration: std::time::Duration) -> String {
    let s = duration.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// Rows under a header, each column as wide as its widest cell (the last one left as it is).
#[cfg(feature = "postgres")]
fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str; N]| {
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == N {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        out.push('\n');
    };
    line(header);
    for row in rows {
        line(&row.each_ref().map(String::as_str));
    }
    out
}

/// Prints to stdout, ignoring a closed pipe (`toolgate audit promotion log | head`).
fn print(text: &str) {
    let _ = io::stdout().lock().write_all(text.as_bytes());
}
