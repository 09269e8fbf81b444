//! The `toolgate` command: checks audit logs and reports on them; with the `postgres` feature, answers
//! two-step approval requests kept in PostgreSQL.

#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use toolgate::audit::{
    BreakReason, CheckpointReport, PromotionReport, PublicKey, SigningKey, VerifyReport,
    checkpoints_path, verify_file, verify_signed_file,
};

const VERIFY_EXIT_STATUS: &str = "\
Exit status:
  0   the log is intact
  1   the hash chain is broken: a record was changed, deleted, inserted or reordered
  2   only the last line is torn (a write cut short by a crash); every record before it is intact
      (with --public-key: of the log or of its checkpoint file)
  3   the file could not be read (with --public-key: or the key, or the checkpoint file)
  4   the chain's last complete record is not the --expect-last hash: records were cut from its end
      (and a torn line after it does not hide that)
  5   with --public-key: a checkpoint is forged or changed (or the key is not the writer's), names
      another log's writer, or its series has one deleted, inserted or moved
  6   with --public-key: the log was rewritten: a signed checkpoint names a record the log does not
      have, even where every hash after the change was recomputed
  7   with --public-key: the log was cut short: a signed checkpoint covers records past the end of
      an intact chain (past a break, they were edited: 1, reported as LOG EDITED)
  8   a line is longer than any record a sink writes (16 MiB): it is not a record, and the log is not
      read past it, so that a file of any size is read in bounded memory
  9   with --public-key: the log has records and no checkpoint that verifies covers any of them (the
      checkpoint file is empty, or its writer has not signed yet): it is signed by nothing, and could
      have been rewritten whole
  64  the command line is invalid

When several apply, the first of 3, 5, 1, 8, 6, 7, 4, 9, 2 is the status. Records after the last
checkpoint are not covered by any signature: the report says how many, and whether the last checkpoint
is final (written when the writer shut down) or not (still running, crashed, or its tail cut off with
the log's). A log with no record verifies with no checkpoint: there is nothing to sign.";

const KEYGEN_EXIT_STATUS: &str = "\
Writes the private key to KEY (PKCS#8 PEM, readable by its owner only) and the public key to KEY.pub
(SPKI PEM); refuses to overwrite either. `openssl genpkey -algorithm ed25519 -out KEY` and `openssl pkey
-in KEY -pubout -out KEY.pub` make the same files.

Exit status:
  0   written
  3   a file could not be written, or exists already
  64  the command line is invalid";

const PROMOTION_EXIT_STATUS: &str = "\
The log is verified first; the report is printed either way, with a warning on stderr if the log is not
intact.

Exit status: as for `toolgate audit verify`:
  0   the log is intact
  1   the hash chain is broken: the report may not show what happened
  2   only the last line is torn (a write cut short by a crash)
  3   the file could not be read
  8   a line is longer than any record a sink writes (16 MiB); it is skipped
  64  the command line is invalid";

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

#[cfg(feature = "postgres")]
const APPROVALS_EXIT_STATUS: &str = "\
The store is the PostgreSQL database that the gates' `PostgresStore` connects to: --store URL, or the
environment variable TOOLGATE_STORE.

Exit status:
  0   done
  1   no such request, or it cannot be answered: expired, answered already, or its answer used; or
      an irreversible request approved without its target typed back exactly (--confirm), or for the
      session (--for-session): it still waits
  3   the store could not be reached, failed, or did not answer in time
  64  the command line is invalid (no store, or no --by and no name for the operator)";

#[cfg(feature = "postgres")]
const FLEET_EXIT_STATUS: &str = "\
The fleet lives in the PostgreSQL database its gates join: --store URL, or the environment variable
TOOLGATE_STORE; the fleet's name: --fleet NAME, or TOOLGATE_FLEET.

Exit status:
  0   done
  1   refused: `lower` to a mode above the fleet's, `raise` to one below it, or no such fleet
  3   the database could not be reached, failed, or did not answer in time
  64  the command line is invalid (no store, no fleet, or no --by and no name for the operator)";

#[cfg(feature = "postgres")]
const POLICY_EXIT_STATUS: &str = "\
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

#[cfg(feature = "postgres")]
const MIGRATE_EXIT_STATUS: &str = "\
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

#[cfg(feature = "console")]
const CONSOLE_EXIT_STATUS: &str = "\
Serves the console until stopped, on loopback unless --listen names another address (then put a TLS
proxy in front: the session cookie would otherwise cross the network in the clear). Operators log in
with a token of --operators FILE (TOML: `[operators]`, each name mapped to the SHA-256 of its token in
hex, as `sha256sum` prints it), or with an access token of --jwt-issuer (checked against --jwks, for
--jwt-audience, granting --jwt-scope; the operator is its subject). The store records who answered.

Exit status:
  1   refused: no operators, an operators file that does not read, or a JWT setting refused
  3   the store could not be reached, or the address could not be listened on
  64  the command line is invalid (no store)";

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
    Policy(fleet::PolicyCommand),
    /// Makes the schema of the PostgreSQL tables, or brings it to this toolgate's version: the owner's
    /// step, before anyone else connects.
    #[cfg(feature = "postgres")]
    #[command(after_help = MIGRATE_EXIT_STATUS)]
    Migrate(approvals::Database),
    /// The operator console in the browser, on the PostgreSQL store and trail: pending approvals
    /// answered live, fleets lowered, the trail searched, the shadow-mode promotion drawn.
    #[cfg(feature = "console")]
    #[command(after_help = CONSOLE_EXIT_STATUS)]
    Console(console::ConsoleArgs),
}

#[derive(Debug, Subcommand)]
enum Audit {
    /// Verifies a log's hash chain and prints what it found.
    #[command(after_help = VERIFY_EXIT_STATUS)]
    Verify {
        /// The JSONL audit log, or (feature `postgres`) the PostgreSQL database of a `PostgresSink`
        /// (postgres://user@host/database): every writer's chain is verified.
        file: PathBuf,
        /// The schema of the audit table, for a PostgreSQL trail.
        #[arg(long, default_value = "toolgate", value_name = "SCHEMA")]
        schema: String,
        /// The hash the log must end at, known from elsewhere (the last record's hash an earlier
        /// verification printed): without it, a log whose last records were removed verifies as intact.
        #[arg(long, value_name = "HASH")]
        expect_last: Option<String>,
        /// The public key (SPKI PEM) of the checkpoints' signing key: checks the log against its
        /// signed checkpoints, which shows a rewritten log or one cut short.
        #[arg(long, value_name = "PUB")]
        public_key: Option<PathBuf>,
        /// The checkpoint file; FILE.checkpoints by default.
        #[arg(long, value_name = "SIDECAR", requires = "public_key")]
        checkpoints: Option<PathBuf>,
    },
    /// Makes an Ed25519 key pair to sign a log's checkpoints.
    #[command(after_help = KEYGEN_EXIT_STATUS)]
    Keygen {
        /// Where to write the private key; the public key goes to the same path with `.pub` appended.
        #[arg(long, value_name = "KEY")]
        out: PathBuf,
    },
    /// Prints a Markdown report of the decisions in a log, per mode and risk level: what was allowed,
    /// what was refused and why, and what would have run with more autonomy.
    #[command(after_help = PROMOTION_EXIT_STATUS)]
    Promotion {
        /// The JSONL audit log, or (feature `postgres`) the PostgreSQL database of a `PostgresSink`.
        file: PathBuf,
        /// The schema of the audit table, for a PostgreSQL trail.
        #[arg(long, default_value = "toolgate", value_name = "SCHEMA")]
        schema: String,
    },
}

const INTACT: u8 = 0;
const BROKEN: u8 = 1;
const TORN: u8 = 2;
const IO_ERROR: u8 = 3;
const CUT: u8 = 4;
const CHECKPOINTS_TAMPERED: u8 = 5;
const REWRITTEN: u8 = 6;
const CUT_BEFORE_CHECKPOINT: u8 = 7;
const TOO_LONG: u8 = 8;
const SIGNED_BY_NOTHING: u8 = 9;
const USAGE: u8 = 64;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap exits with 2 on a usage error, which here means a torn log.
            return ExitCode::from(if e.use_stderr() { USAGE } else { INTACT });
        }
    };
    let status = match cli.command {
        Command::Audit(Audit::Verify {
            file,
            schema,
            expect_last,
            public_key,
            checkpoints,
        }) => match (database(&file), public_key) {
            (Some(url), public_key) => {
                trail::verify(url, &schema, expect_last.is_some(), public_key.as_deref())
            }
            (None, Some(public_key)) => {
                let checkpoints = checkpoints.unwrap_or_else(|| checkpoints_path(&file));
                verify_signed(&file, &checkpoints, &public_key, expect_last.as_deref())
            }
            (None, None) => verify(&file, expect_last.as_deref()),
        },
        Command::Audit(Audit::Keygen { out }) => keygen(&out),
        Command::Audit(Audit::Promotion { file, schema }) => match database(&file) {
            Some(url) => trail::promotion(url, &schema),
            None => promotion(&file),
        },
        #[cfg(feature = "postgres")]
        Command::Approvals(command) => approvals::run(command),
        #[cfg(feature = "postgres")]
        Command::Fleet(command) => fleet::run(command),
        #[cfg(feature = "postgres")]
        Command::Policy(command) => fleet::run_policy(command),
        #[cfg(feature = "postgres")]
        Command::Migrate(database) => approvals::migrate(database),
        #[cfg(feature = "console")]
        Command::Console(args) => console::run(args),
    };
    ExitCode::from(status)
}

/// `toolgate fleet`: the kill switch of every process joined to a fleet.
#[cfg(feature = "postgres")]
mod fleet {
    use std::time::Duration;

    use clap::{Args, Subcommand};
    use toolgate::Mode;
    use toolgate::approval::store::StoreError;
    use toolgate::postgres::fleet::{self, FleetStatus};

    use super::approvals::age;
    use toolgate::terminal::escaped;

    use super::{FLEET_EXIT_STATUS, USAGE, print};

    const DONE: u8 = 0;
    const REFUSED: u8 = 1;
    const UNAVAILABLE: u8 = 3;

    #[derive(Debug, Args)]
    pub(super) struct FleetCommand {
        #[command(flatten)]
        database: super::approvals::Database,
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
            database: super::approvals::Database,
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

    pub(super) fn run_policy(command: PolicyCommand) -> u8 {
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

    fn failed(name: &str, error: &StoreError) -> u8 {
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
}

/// The PostgreSQL URL a `FILE` argument names instead of a file.
fn database(file: &Path) -> Option<&str> {
    let text = file.to_str()?;
    (text.starts_with("postgres://") || text.starts_with("postgresql://")).then_some(text)
}

/// Audit trails kept in PostgreSQL by `PostgresSink`.
#[cfg(feature = "postgres")]
mod trail {
    use toolgate::audit::PublicKey;
    use toolgate::postgres::{read_trail, verify_signed_trail, verify_trail};
    use toolgate::terminal::escaped;

    use super::{
        BROKEN, CHECKPOINTS_TAMPERED, CUT_BEFORE_CHECKPOINT, INTACT, IO_ERROR, REWRITTEN,
        SIGNED_BY_NOTHING, TOO_LONG, TORN, USAGE, print, signed_status, status,
    };

    pub(super) fn verify(
        url: &str,
        schema: &str,
        expect_last: bool,
        public_key: Option<&std::path::Path>,
    ) -> u8 {
        if expect_last {
            eprintln!(
                "toolgate: --expect-last names one chain's end; a PostgreSQL trail has one chain per \
                 writer: sign checkpoints and give --public-key"
            );
            return USAGE;
        }
        let key = match public_key.map(PublicKey::read_pem_file).transpose() {
            Ok(key) => key,
            Err(e) => {
                eprintln!("toolgate: cannot read the public key: {e}");
                return IO_ERROR;
            }
        };
        let verified = match &key {
            Some(key) => verify_signed_trail(url, schema, key),
            None => verify_trail(url, schema),
        };
        let report = match verified {
            Ok(report) => report,
            Err(error) => {
                eprintln!(
                    "toolgate: cannot read the audit trail: {}",
                    escaped(&error.to_string())
                );
                return IO_ERROR;
            }
        };
        print(&report.to_string());
        // The most serious finding of any writer, in the order of the exit status list.
        let codes: Vec<u8> = report
            .writers
            .iter()
            .map(|writer| {
                let chain = if writer.chain.broken.is_some() || writer.columns_differ.is_some() {
                    BROKEN
                } else {
                    status(&writer.chain)
                };
                match &writer.checkpoints {
                    Some(signed) => signed_status(signed, chain),
                    None => chain,
                }
            })
            .collect();
        [
            CHECKPOINTS_TAMPERED,
            BROKEN,
            TOO_LONG,
            REWRITTEN,
            CUT_BEFORE_CHECKPOINT,
            SIGNED_BY_NOTHING,
            TORN,
        ]
        .into_iter()
        .find(|code| codes.contains(code))
        .unwrap_or(INTACT)
    }

    pub(super) fn promotion(url: &str, schema: &str) -> u8 {
        let verified = match verify_trail(url, schema) {
            Ok(report) => report,
            Err(error) => {
                eprintln!(
                    "toolgate: cannot read the audit trail: {}",
                    escaped(&error.to_string())
                );
                return IO_ERROR;
            }
        };
        let records = match read_trail(url, schema) {
            Ok(records) => records,
            Err(error) => {
                eprintln!(
                    "toolgate: cannot read the audit trail: {}",
                    escaped(&error.to_string())
                );
                return IO_ERROR;
            }
        };
        print(&toolgate::audit::PromotionReport::from_records(records).to_markdown());
        if verified.is_intact() {
            INTACT
        } else {
            eprintln!(
                "toolgate: warning: the audit trail is not intact; the report may not show what \
                 happened:\n{verified}"
            );
            BROKEN
        }
    }
}

#[cfg(not(feature = "postgres"))]
mod trail {
    use super::USAGE;

    pub(super) fn verify(
        _url: &str,
        _schema: &str,
        _expect_last: bool,
        _public_key: Option<&std::path::Path>,
    ) -> u8 {
        unsupported()
    }

    pub(super) fn promotion(_url: &str, _schema: &str) -> u8 {
        unsupported()
    }

    fn unsupported() -> u8 {
        eprintln!("toolgate: this toolgate was built without the `postgres` feature");
        USAGE
    }
}

fn verify(file: &Path, expect_last: Option<&str>) -> u8 {
    let report = match verify_file(file) {
        Ok(report) => report,
        Err(e) => return io_error(file, &e),
    };
    let code = print_verified(&report, expect_last);
    let sidecar = checkpoints_path(file);
    if sidecar.is_file() {
        print(&format!(
            "note: {} holds signed checkpoints of this log, not checked: give --public-key PUB to \
             check them\n",
            sidecar.display()
        ));
    }
    code
}

/// Prints the chain's report, or the cut the expected last hash shows; returns the status.
///
/// The expected hash is looked for at the last complete record, whatever follows it: bytes appended
/// without a newline to a log cut short would otherwise hide the cut behind a torn tail.
fn print_verified(report: &VerifyReport, expect_last: Option<&str>) -> u8 {
    let ends_at =
        |hash: &str| report.records > 0 && report.last_hash.eq_ignore_ascii_case(hash.trim());
    match expect_last {
        Some(hash) if report.broken.is_none() && !ends_at(hash) => {
            let chain = if report.torn_tail.is_some() {
                "the chain is intact up to a torn last line, but its last complete record has hash"
            } else {
                "the chain is intact but ends at hash"
            };
            print(&format!(
                "CUT: {chain} {}, not at the expected {}: records were removed from its end\n{report}",
                report.last_hash, hash
            ));
            CUT
        }
        _ => {
            print(&report.to_string());
            status(report)
        }
    }
}

fn verify_signed(
    file: &Path,
    checkpoints: &Path,
    public_key: &Path,
    expect_last: Option<&str>,
) -> u8 {
    let key = match PublicKey::read_pem_file(public_key) {
        Ok(key) => key,
        Err(e) => {
            eprintln!("toolgate: cannot read the public key: {e}");
            return IO_ERROR;
        }
    };
    let (report, signed) = match verify_signed_file(file, checkpoints, &key) {
        Ok(reports) => reports,
        Err(e) => return io_error(file, &e),
    };
    let chain = print_verified(&report, expect_last);
    print(&signed.to_string());
    if !report.is_intact() {
        print(&format!(
            "the checkpoints were checked against the {} records that verify\n",
            report.records
        ));
    }
    signed_status(&signed, chain)
}

/// The status of a log checked against its checkpoints, from its chain's `chain` status: see
/// `VERIFY_EXIT_STATUS` for the order.
fn signed_status(signed: &CheckpointReport, chain: u8) -> u8 {
    if signed.checkpoints_tampered() {
        CHECKPOINTS_TAMPERED
    } else if chain == BROKEN || chain == TOO_LONG {
        chain
    } else if signed.log_rewritten() {
        REWRITTEN
    } else if signed.log_cut_short() {
        CUT_BEFORE_CHECKPOINT
    } else if chain == CUT {
        CUT
    } else if signed.signed_by_nothing() {
        SIGNED_BY_NOTHING
    } else if chain == INTACT && signed.torn_tail {
        TORN
    } else {
        chain
    }
}

fn keygen(out: &Path) -> u8 {
    let public_path = public_key_path(out);
    for path in [out, public_path.as_path()] {
        // A link, even a dangling one, counts: nothing is written through it.
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            let what = if meta.file_type().is_symlink() {
                "is a symbolic link"
            } else {
                "exists already"
            };
            eprintln!("toolgate: {} {what}; not overwritten", path.display());
            return IO_ERROR;
        }
    }
    let written = SigningKey::generate().and_then(|key| {
        key.write_pem_file(out)?;
        let public = key.public_key();
        public.write_pem_file(&public_path).map(|()| public)
    });
    match written {
        Ok(public) => {
            print(&format!(
                "private key: {} (keep it secret, readable by the writer only)\npublic key: {} ({})\n",
                out.display(),
                public_path.display(),
                public.to_hex()
            ));
            INTACT
        }
        Err(e) => {
            eprintln!("toolgate: cannot write the key: {e}");
            IO_ERROR
        }
    }
}

/// `KEY.pub` beside `KEY`.
fn public_key_path(key: &Path) -> PathBuf {
    let mut name = key.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

fn promotion(file: &Path) -> u8 {
    let verified = match verify_file(file) {
        Ok(report) => report,
        Err(e) => return io_error(file, &e),
    };
    let report = match PromotionReport::from_file(file) {
        Ok(report) => report,
        Err(e) => return io_error(file, &e),
    };
    print(&report.to_markdown());
    if !verified.is_intact() {
        eprintln!(
            "toolgate: warning: {} is not intact; the report may not show what happened:\n{verified}",
            file.display()
        );
    }
    status(&verified)
}

fn status(report: &VerifyReport) -> u8 {
    match (&report.broken, &report.torn_tail) {
        (Some(broken), _) if broken.reason == BreakReason::TooLong => TOO_LONG,
        (Some(_), _) => BROKEN,
        (None, Some(_)) => TORN,
        (None, None) => INTACT,
    }
}

fn io_error(file: &Path, e: &io::Error) -> u8 {
    eprintln!("toolgate: cannot read {}: {e}", file.display());
    IO_ERROR
}

/// Prints to stdout, ignoring a closed pipe (`toolgate audit promotion log | head`).
fn print(text: &str) {
    let _ = io::stdout().lock().write_all(text.as_bytes());
}

#[cfg(feature = "postgres")]
mod approvals {
    use std::future::Future;
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    use std::thread::{self, Thread};
    use std::time::Duration;

    use clap::{Args, Subcommand};
    use toolgate::approval::store::{Answer, ApproveError, StoreError};
    use toolgate::postgres::{PostgresStore, RequestState, StoredRequest};

    use toolgate::terminal::escaped;

    use super::{APPROVALS_EXIT_STATUS, print};

    const DONE: u8 = 0;
    const REFUSED: u8 = 1;
    const UNAVAILABLE: u8 = 3;
    const USAGE: u8 = super::USAGE;

    /// Where the gates' tables are: the store, the audit trail and fleets share one database.
    #[derive(Debug, Args)]
    pub(super) struct Database {
        /// The database: a PostgreSQL URL (postgres://user@host/database) or key-value string.
        #[arg(
            long,
            env = "TOOLGATE_STORE",
            value_name = "URL",
            global = true,
            hide_env_values = true
        )]
        pub(super) store: Option<String>,
        /// The schema of the tables, as the gates name it.
        #[arg(
            long,
            env = "TOOLGATE_STORE_SCHEMA",
            default_value = "toolgate",
            global = true
        )]
        pub(super) schema: String,
    }

    #[derive(Debug, Args)]
    pub(super) struct Approvals {
        #[command(flatten)]
        database: Database,
        #[command(subcommand)]
        command: Action,
    }

    #[derive(Debug, Subcommand)]
    enum Action {
        /// Lists the requests waiting for an answer, oldest first.
        #[command(after_help = APPROVALS_EXIT_STATUS)]
        List,
        /// Shows one request: the tool's manifest, the mode, the risk, the arguments (redacted ones as
        /// "[REDACTED]"), the call's target, what its evidence probe read of it and how the call would
        /// be undone, and where it stands; for an irreversible request, how to approve it.
        #[command(after_help = APPROVALS_EXIT_STATUS)]
        Show {
            /// The request's id, as `list` shows it.
            id: i64,
        },
        /// Approves a request: the same call, with the same arguments, then runs once. An irreversible
        /// request is approved only with its target typed back (--confirm).
        #[command(after_help = APPROVALS_EXIT_STATUS)]
        Approve {
            /// The request's id, as `list` shows it.
            id: i64,
            /// Also grant the same call for the rest of the session of the gate that runs it (not for
            /// an irreversible request, whose calls ask every time).
            #[arg(long)]
            for_session: bool,
            /// The call's target, typed back exactly: approving an irreversible request takes it
            /// (`show` says what to type).
            #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
            confirm: Option<String>,
            /// Who approves, for the audit log [default: USER, then LOGNAME, then the name of the
            /// account the command runs as]
            #[arg(long, value_name = "NAME")]
            by: Option<String>,
        },
        /// Rejects a request, with a reason the agent reads when it makes the call again.
        #[command(after_help = APPROVALS_EXIT_STATUS)]
        Reject {
            /// The request's id, as `list` shows it.
            id: i64,
            /// Why, for the agent.
            #[arg(long, value_name = "TEXT")]
            reason: String,
            /// Also stop the agent: the gate that reads the rejection lowers itself to SHADOW.
            #[arg(long)]
            stop: bool,
            /// Who rejects, for the audit log [default: USER, then LOGNAME, then the name of the
            /// account the command runs as]
            #[arg(long, value_name = "NAME")]
            by: Option<String>,
        },
    }

    pub(super) fn run(approvals: Approvals) -> u8 {
        let Some(url) = approvals.database.store.filter(|url| !url.is_empty()) else {
            eprintln!("toolgate: which store? give --store URL or set TOOLGATE_STORE");
            return USAGE;
        };
        let answer = match &approvals.command {
            Action::List | Action::Show { .. } => None,
            Action::Approve {
                id,
                for_session,
                confirm,
                by,
            } => {
                let Some(by) = who(by) else { return USAGE };
                Some((
                    *id,
                    Answer::Approve {
                        by,
                        for_session: *for_session,
                        confirmation: confirm.clone(),
                    },
                ))
            }
            Action::Reject {
                id,
                reason,
                stop,
                by,
            } => {
                let Some(by) = who(by) else { return USAGE };
                Some((
                    *id,
                    Answer::Reject {
                        by,
                        reason: reason.clone(),
                        stop: *stop,
                    },
                ))
            }
        };
        let store = match PostgresStore::builder()
            .schema(&approvals.database.schema)
            .connect(&url)
        {
            Ok(store) => store,
            Err(e) => return unavailable(&e),
        };
        match (approvals.command, answer) {
            (Action::List, _) => match block_on(store.list()) {
                Ok(requests) => {
                    print(&table(&requests));
                    DONE
                }
                Err(e) => unavailable(&e),
            },
            (Action::Show { id }, _) => match block_on(store.show(id)) {
                Ok(Some(request)) => {
                    print(&details(&request));
                    DONE
                }
                Ok(None) => {
                    eprintln!("toolgate: no request {id}");
                    REFUSED
                }
                Err(e) => unavailable(&e),
            },
            (_, Some((id, answer))) => {
                let approved = matches!(answer, Answer::Approve { .. });
                // An irreversible call asks every time: no approval of one is for the session.
                if let Answer::Approve {
                    for_session: true, ..
                } = answer
                {
                    match block_on(store.show(id)) {
                        Ok(Some(request)) if request.irreversible => {
                            eprintln!(
                                "toolgate: request {id} was not approved: `{}` is irreversible, and \
                                 its calls ask every time: approve this call alone, without \
                                 --for-session; the request still waits",
                                escaped(&request.binding.tool)
                            );
                            return REFUSED;
                        }
                        Ok(_) => {}
                        Err(e) => return unavailable(&e),
                    }
                }
                let typed = match &answer {
                    Answer::Approve { confirmation, .. } => confirmation.clone(),
                    _ => None,
                };
                match block_on(store.answer_id(id, answer)) {
                    Ok(request) => {
                        let verb = if approved { "approved" } else { "rejected" };
                        let on = request
                            .target
                            .as_deref()
                            .map_or_else(String::new, |target| {
                                format!(" on `{}`", escaped(target))
                            });
                        print(&format!(
                            "{verb} request {id}: {} ({}){on} with arguments {}\n",
                            escaped(&request.binding.tool),
                            request.binding.risk,
                            request
                                .arguments
                                .as_deref()
                                .map_or("(not shown)".into(), escaped)
                        ));
                        DONE
                    }
                    Err(ApproveError::Store(e)) => unavailable(&e),
                    Err(ApproveError::UnknownToken) => {
                        eprintln!("toolgate: no request {id}");
                        REFUSED
                    }
                    Err(ApproveError::ConfirmationMismatch) => {
                        not_confirmed(&store, id, typed.as_deref())
                    }
                    Err(e) => {
                        eprintln!("toolgate: request {id} cannot be answered: {e}");
                        REFUSED
                    }
                }
            }
            // Only `approve` and `reject` carry an answer.
            (_, None) => USAGE,
        }
    }

    /// `toolgate migrate`.
    pub(super) fn migrate(database: Database) -> u8 {
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

    /// An approval of an irreversible request that did not carry its target typed back (`typed`, as
    /// given): says what to type. The request still waits.
    fn not_confirmed(store: &PostgresStore, id: i64, typed: Option<&str>) -> u8 {
        let request = match block_on(store.show(id)) {
            Ok(Some(request)) => request,
            Ok(None) => {
                eprintln!("toolgate: no request {id}");
                return REFUSED;
            }
            Err(e) => return unavailable(&e),
        };
        let tool = escaped(&request.binding.tool);
        let what = match (typed, request.target.as_deref()) {
            (_, None) => format!(
                "`{tool}` is irreversible, and the request names no target to type back: it cannot \
                 be approved"
            ),
            (None, Some(target)) => format!(
                "`{tool}` is irreversible, and is approved only with its target `{}` typed back \
                 exactly: {}",
                escaped(target),
                how_to_approve(id, target)
            ),
            (Some(typed), Some(target)) => format!(
                "--confirm `{}` is not its target `{}`; type the target exactly: {}",
                escaped(typed),
                escaped(target),
                how_to_approve(id, target)
            ),
        };
        eprintln!("toolgate: request {id} was not approved: {what}; the request still waits");
        REFUSED
    }

    /// The command that approves the irreversible request `id` on `target`, for an operator to type.
    fn how_to_approve(id: i64, target: &str) -> String {
        let shown = escaped(target);
        if shown != target {
            // What the target holds is shown escaped: the command line says where to look.
            return format!(
                "`toolgate approvals approve {id} --confirm TARGET`, TARGET the target as shown \
                 escaped above (`\\\\` is one backslash, `\\u{{..}}` one character)"
            );
        }
        let safe = |c: char| c.is_alphanumeric() || "._-/:@+=".contains(c);
        let word = if target.chars().all(safe) {
            target.to_owned()
        } else {
            format!("'{}'", target.replace('\'', r"'\''"))
        };
        format!("`toolgate approvals approve {id} --confirm {word}`")
    }

    fn who(by: &Option<String>) -> Option<String> {
        let by = super::operator(by.clone());
        if by.is_none() {
            eprintln!(
                "toolgate: who answers? give --by NAME (USER and LOGNAME are not set, and the \
                 account has no name)"
            );
        }
        by
    }

    fn unavailable(error: &StoreError) -> u8 {
        eprintln!(
            "toolgate: the approval store: {}",
            escaped(&error.to_string())
        );
        UNAVAILABLE
    }

    fn table(requests: &[StoredRequest]) -> String {
        if requests.is_empty() {
            return "no request waits for an answer\n".to_owned();
        }
        let rows: Vec<[String; 8]> = requests
            .iter()
            .map(|r| {
                [
                    r.id.to_string(),
                    age(r.age),
                    if r.irreversible {
                        format!("{} (irreversible)", escaped(&r.binding.tool))
                    } else {
                        escaped(&r.binding.tool).into_owned()
                    },
                    r.binding.risk.to_string(),
                    r.mode.to_string(),
                    r.agent
                        .as_deref()
                        .map_or_else(|| "-".into(), |t| escaped(t).into_owned()),
                    r.principal
                        .as_deref()
                        .map_or_else(|| "-".into(), |t| escaped(t).into_owned()),
                    r.arguments
                        .as_deref()
                        .map_or_else(|| "(not shown)".into(), |t| escaped(t).into_owned()),
                ]
            })
            .collect();
        let header = [
            "ID",
            "AGE",
            "TOOL",
            "RISK",
            "MODE",
            "AGENT",
            "PRINCIPAL",
            "ARGUMENTS",
        ];
        let mut widths = header.map(str::len);
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &[&str]| {
            let last = cells.len() - 1;
            for (i, cell) in cells.iter().enumerate() {
                if i == last {
                    out.push_str(cell);
                } else {
                    out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
                }
            }
            out.push('\n');
        };
        line(&header);
        for row in &rows {
            line(&row.each_ref().map(String::as_str));
        }
        if requests.iter().any(|r| r.irreversible) {
            out.push_str(
                "(irreversible): approved only with the call's target typed back, `approve ID \
                 --confirm TARGET`; `show ID` shows the target\n",
            );
        }
        out
    }

    fn details(r: &StoredRequest) -> String {
        let state = match &r.state {
            RequestState::Pending if r.expired => "expired, never answered".to_owned(),
            RequestState::Pending => format!("pending, expires in {}", age(r.expires_in)),
            RequestState::Answered(answer) => format!("{}, not used yet", answered(answer)),
            RequestState::Used(answer) => format!("{}, used by its call", answered(answer)),
            _ => "unknown".to_owned(),
        };
        let manifest = r
            .manifest
            .as_deref()
            .map_or_else(|| "(none)".into(), |t| escaped(t).into_owned());
        let effects = effects(r);
        let approve = match (&r.state, r.expired, r.target.as_deref()) {
            (RequestState::Pending, false, Some(target)) if r.irreversible => format!(
                "approve   {} (its target, typed exactly; no --for-session)\n",
                how_to_approve(r.id, target)
            ),
            _ => String::new(),
        };
        format!(
            "request   {}\n\
             tool      {}\n\
             risk      {} (effective, policy version {})\n\
             mode      {}\n\
             agent     {}\n\
             principal {}\n\
             tainted   {}\n\
             arguments {}\n\
             {effects}\
             made      {} ({} ago)\n\
             state     {state}\n\
             {approve}\
             manifest  {manifest}\n",
            r.id,
            escaped(&r.binding.tool),
            r.binding.risk,
            r.binding.policy_version,
            r.mode,
            r.agent
                .as_deref()
                .map_or_else(|| "-".into(), |t| escaped(t).into_owned()),
            r.principal
                .as_deref()
                .map_or_else(|| "-".into(), |t| escaped(t).into_owned()),
            r.tainted.as_ref().map_or_else(
                || "no".into(),
                |(tool, at)| format!(
                    "yes: `{}`, whose output is untrusted, ran at {}",
                    escaped(tool),
                    escaped(at)
                )
            ),
            r.arguments
                .as_deref()
                .map_or_else(|| "(not shown)".into(), |t| escaped(t).into_owned()),
            r.created_at,
            age(r.age),
        )
    }

    /// The lines of what a call with lasting effects shows: its target (and whether the call can be
    /// undone), what its evidence probe read of the target, and how the call would be undone.
    fn effects(r: &StoredRequest) -> String {
        let mut lines = String::new();
        match (r.target.as_deref(), r.irreversible) {
            (Some(target), true) => lines.push_str(&format!(
                "target    {} (irreversible: the call cannot be undone)\n",
                escaped(target)
            )),
            (Some(target), false) => lines.push_str(&format!("target    {}\n", escaped(target))),
            (None, true) => {
                lines.push_str("target    (none: irreversible, and nothing to confirm)\n")
            }
            (None, false) => {}
        }
        if let Some(evidence) = r.evidence.as_deref() {
            lines.push_str(&format!(
                "evidence  {} (the target when the call was made: the approval is for this state)\n",
                escaped(evidence)
            ));
        }
        match (r.rollback_plan(), r.rollback.as_deref()) {
            (Some(plan), _) => {
                // A plan's Display escapes what the agent wrote into it already.
                lines.push_str(&format!("rollback  {plan}\n"));
            }
            (None, Some(json)) => lines.push_str(&format!("rollback  {}\n", escaped(json))),
            (None, None) => {}
        }
        lines
    }

    fn answered(answer: &Answer) -> String {
        match answer {
            Answer::Approve {
                by,
                for_session,
                confirmation,
            } => {
                let session = if *for_session { " for the session" } else { "" };
                let typed = confirmation.as_deref().map_or_else(String::new, |typed| {
                    format!(" (confirmed `{}`)", escaped(typed))
                });
                format!("approved{session} by {}{typed}", escaped(by))
            }
            Answer::Reject {
                by,
                reason,
                stop: true,
            } => {
                let (by, reason) = (escaped(by), escaped(reason));
                format!("rejected by {by}, and the agent stopped: {reason}")
            }
            Answer::Reject { by, reason, .. } => {
                format!("rejected by {}: {}", escaped(by), escaped(reason))
            }
            _ => "answered".to_owned(),
        }
    }

    /// `42s`, `3m12s`, `2h05m`, `1d03h`.
    pub(super) fn age(duration: Duration) -> String {
        let s = duration.as_secs();
        match s {
            0..60 => format!("{s}s"),
            60..3600 => format!("{}m{:02}s", s / 60, s % 60),
            3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
            _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
        }
    }

    struct Unpark(Thread);

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }

    /// Waits for one of the store's futures, which complete on the store's own thread.
    fn block_on<F: Future>(future: F) -> F::Output {
        let mut future = pin!(future);
        let waker = Waker::from(Arc::new(Unpark(thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
            thread::park();
        }
    }
}

/// `toolgate console`: the operator console.
#[cfg(feature = "console")]
mod console {
    use std::net::SocketAddr;
    use std::path::PathBuf;
    use std::time::Duration;

    use clap::Args;
    use toolgate::console::{Console, Operators, RunError};
    use toolgate::mcp::oauth::{Algorithm, Jwks, OAuth};
    use toolgate::terminal::escaped;

    const REFUSED: u8 = 1;
    const UNAVAILABLE: u8 = 3;

    #[derive(Debug, Args)]
    pub(super) struct ConsoleArgs {
        #[command(flatten)]
        database: super::approvals::Database,
        /// Where to listen.
        #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1:8640")]
        listen: SocketAddr,
        /// The operators and the SHA-256 of their tokens (TOML: `[operators]`, `name = "hex"`).
        #[arg(long, env = "TOOLGATE_CONSOLE_OPERATORS", value_name = "FILE")]
        operators: Option<PathBuf>,
        /// Also accept JWT access tokens of this issuer (its `iss`).
        #[arg(long, value_name = "URL", requires_all = ["jwks", "jwt_audience"])]
        jwt_issuer: Option<String>,
        /// The audience the access tokens must name (`aud`): the console's own URL, as the
        /// authorization server knows it.
        #[arg(long, value_name = "AUDIENCE")]
        jwt_audience: Option<String>,
        /// The issuer's keys: a JWKS file, or an https:// URL.
        #[arg(long, value_name = "FILE|URL")]
        jwks: Option<String>,
        /// The algorithms an access token may be signed with (comma-separated JOSE names).
        #[arg(
            long,
            value_name = "ALG",
            value_delimiter = ',',
            default_value = "RS256"
        )]
        jwt_algorithms: Vec<Algorithm>,
        /// The scope an access token must grant to log in.
        #[arg(long, value_name = "SCOPE", default_value = "toolgate:console")]
        jwt_scope: String,
        /// How long a log-in lasts, in minutes.
        #[arg(long, value_name = "MINUTES", default_value_t = 480)]
        session_minutes: u64,
    }

    pub(super) fn run(args: ConsoleArgs) -> u8 {
        let Some(url) = args.database.store.filter(|url| !url.is_empty()) else {
            eprintln!("toolgate: which store? give --store URL or set TOOLGATE_STORE");
            return super::USAGE;
        };
        let mut operators = Operators::new();
        if let Some(path) = &args.operators {
            let text = match std::fs::read_to_string(path) {
                Ok(text) => text,
                Err(error) => {
                    eprintln!("toolgate: cannot read {}: {error}", path.display());
                    return REFUSED;
                }
            };
            operators = match Operators::from_toml(&text) {
                Ok(operators) => operators,
                Err(error) => {
                    eprintln!(
                        "toolgate: {}: {}",
                        path.display(),
                        escaped(&error.to_string())
                    );
                    return REFUSED;
                }
            };
        }
        let mut builder = Console::builder()
            .schema(&args.database.schema)
            .operators(operators)
            .session_ttl(Duration::from_secs(args.session_minutes.max(1) * 60));
        if let (Some(issuer), Some(audience), Some(jwks)) =
            (args.jwt_issuer, args.jwt_audience, args.jwks)
        {
            let keys = if jwks.starts_with("https://") || jwks.starts_with("http://") {
                Jwks::url(jwks)
            } else {
                Jwks::file(jwks)
            };
            // The console's own address is the resource the tokens are for; their audience is given.
            let oauth = OAuth::builder(format!("http://{}/", args.listen))
                .authorization_server(issuer)
                .audience(audience)
                .algorithms(args.jwt_algorithms)
                .jwks(keys);
            builder = builder.access_tokens(oauth, args.jwt_scope);
        }
        if !args.listen.ip().is_loopback() {
            eprintln!(
                "toolgate console: warning: listening on {}, beyond this machine: serve it behind \
                 TLS, or the session cookie crosses the network in the clear",
                args.listen
            );
        }
        let ran = builder.run(&url, args.listen, |address| {
            eprintln!("toolgate console: listening on http://{address}");
        });
        match ran {
            Ok(()) => 0,
            Err(RunError::Store(error)) => {
                let text = error.to_string();
                eprintln!("toolgate console: {}", escaped(&text));
                if text.contains("not configured") {
                    REFUSED
                } else {
                    UNAVAILABLE
                }
            }
            Err(error) => {
                eprintln!("toolgate console: {}", escaped(&error.to_string()));
                UNAVAILABLE
            }
        }
    }
}
