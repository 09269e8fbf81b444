//! `toolgate policy`: a fleet's operator policy, compared (`diff`) and applied to every joined process.

use clap::Subcommand;
use toolgate::approval::store::StoreError;
use toolgate::postgres::fleet;
use toolgate::terminal::escaped;

use super::fleet::failed;
use super::{Database, USAGE, print};

const DONE: u8 = 0;
const REFUSED: u8 = 1;

pub(super) const POLICY_EXIT_STATUS: &str = "\
The fleet lives in the PostgreSQL database its gates join: --store URL, or the environment variable
TOOLGATE_STORE; the fleet's name: --fleet NAME, or TOOLGATE_FLEET. The file is checked against the tools
the fleet's members declare before it is stored, and each joined process checks it again against its own
tools: a process where it does not check keeps the policy it follows and records `policy_refused`. The
policy in force is the last one a member accepted: a process that joins follows it where the one applied
last does not check, or does not join.

Exit status:
  0   applied (every joined process reads it within its poll interval)
  1   refused: the file is not a policy file, does not check against the tools the fleet's members
      declare (or none has declared its tools), or no such fleet
  3   the database could not be reached, failed, or did not answer in time
  64  the command line is invalid (no store, no fleet, or no --by and no name for the operator)";

#[derive(Debug, Subcommand)]
pub(super) enum PolicyCommand {
    /// Prints what NEW changes relative to OLD, each change narrowing or WIDENING; checks the
    /// files' shape only (the application's `policy diff` checks them against its tools too)
    Diff {
        /// The policy in force.
        old: std::path::PathBuf,
        /// The policy to apply.
        new: std::path::PathBuf,
    },
    /// Makes FILE the fleet's operator policy: every joined process narrows its gates by it (an
    /// empty FILE removes the fleet's policy).
    Apply {
        #[command(flatten)]
        database: Database,
        /// The fleet.
        #[arg(long, env = "TOOLGATE_FLEET", value_name = "NAME")]
        fleet: Option<String>,
        /// The policy file (TOML).
        file: std::path::PathBuf,
        /// Who applies it, for the audit records [default: USER, then LOGNAME, then the name of
        /// the account the command runs as]
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
}

pub(super) fn run(command: PolicyCommand) -> u8 {
    let (database, name, file, by) = match command {
        PolicyCommand::Diff { old, new } => return diff(&old, &new),
        PolicyCommand::Apply {
            database,
            fleet,
            file,
            by,
        } => (database, fleet, file, by),
    };
    let Some(url) = database.store.filter(|url| !url.is_empty()) else {
        eprintln!("toolgate: which database? give --store URL or set TOOLGATE_STORE");
        return USAGE;
    };
    let Some(name) = name.filter(|name| !name.is_empty()) else {
        eprintln!("toolgate: which fleet? give --fleet NAME or set TOOLGATE_FLEET");
        return USAGE;
    };
    let Some(by) = super::operator(by) else {
        eprintln!(
            "toolgate: who applies the policy? give --by NAME (USER and LOGNAME are not set, \
             and the account has no name)"
        );
        return USAGE;
    };
    let shown = file.display().to_string();
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("toolgate: cannot read {}: {error}", escaped(&shown));
            return REFUSED;
        }
    };
    if !text.is_empty()
        && let Err(errors) = toolgate::policy_file::PolicyFile::check_shape(&shown, &text)
    {
        eprintln!("{}", escaped(&errors.to_string()));
        return REFUSED;
    }
    match fleet::apply_policy(&url, &database.schema, &name, &text, &by) {
        Ok(Some(digest)) => {
            print(&format!(
                "fleet {}: policy {digest} applied by {}; every joined process reads it within \
                 its poll interval\n",
                escaped(&name),
                escaped(&by)
            ));
            DONE
        }
        Ok(None) => {
            print(&format!(
                "fleet {}: policy removed by {}\n",
                escaped(&name),
                escaped(&by)
            ));
            DONE
        }
        Err(fleet::ApplyError::Refused(errors)) => {
            eprintln!(
                "toolgate: the fleet `{}`: the policy does not check against the tools its \
                 members declare, and was not applied:",
                escaped(&name)
            );
            eprintln!("{}", escaped(&errors.to_string()));
            REFUSED
        }
        Err(fleet::ApplyError::Store(error)) => failed(&name, &error),
        Err(error) => failed(&name, &StoreError::Unexpected(error.to_string())),
    }
}

/// `policy diff OLD NEW`: 0 when nothing widens, 1 when something does (or a file is not a
/// policy file).
fn diff(old: &std::path::Path, new: &std::path::Path) -> u8 {
    let read = |path: &std::path::Path| {
        let shown = path.display().to_string();
        std::fs::read_to_string(path)
            .map(|text| (shown.clone(), text))
            .map_err(|error| format!("toolgate: cannot read {}: {error}", escaped(&shown)))
    };
    let (old, new) = match (read(old), read(new)) {
        (Ok(old), Ok(new)) => (old, new),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("{error}");
            return REFUSED;
        }
    };
    match toolgate::policy_file::PolicyFile::diff_texts((&old.0, &old.1), (&new.0, &new.1)) {
        Ok(diff) => {
            for line in diff.to_string().lines() {
                print(&format!("{}\n", escaped(line)));
            }
            if diff.widens() { REFUSED } else { DONE }
        }
        Err(errors) => {
            eprintln!("{}", escaped(&errors.to_string()));
            REFUSED
        }
    }
}
