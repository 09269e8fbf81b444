//! A deploy desk on the command line: each subcommand is a tool, and the gate decides every call.
//!
//! ```text
//! cargo run --example cli --features clap,policy-file -- status web
//! cargo run --example cli --features clap,policy-file -- --mode partial_auto restart web
//! TOOLGATE_MODE=full_auto cargo run --example cli --features clap,policy-file -- rollback web --to 1.4.2
//! cargo run --example cli --features clap,policy-file -- --list-tools
//! cargo run --example cli --features clap,policy-file -- policy check ops.toml
//! cargo run --example cli --features clap,policy-file -- --policy ops.toml --mode full_auto delete web
//! ```
//!
//! A subcommand becomes a call by name, the tool's id with its arguments as JSON, through
//! `toolgate::registry().call(&gate, ..)`: the path an MCP server takes, so the mode, the deny list and the
//! approvals apply to a person at the terminal exactly as they apply to an agent.
//!
//! The mode comes from `--mode`, else from `TOOLGATE_MODE`, else it is SHADOW, where only `status` and
//! `plan` run. HIGH_WRITE calls (`rollback`, `delete`) need FULL_AUTO and an approval: the program asks on
//! stderr and reads the answer from stdin, `y` or `yes` approves, and anything else or the end of input
//! rejects, so a script that gives no answer is refused. `--yes` approves every call the mode allows
//! without asking: whoever types it is the approver. No flag lifts the mode or a `--deny` rule.
//!
//! `--policy FILE` makes the gate follow an operator's policy file, which can only narrow what the mode
//! allows; `policy check FILE`, `policy explain FILE ...` and `policy diff OLD NEW` check a file against
//! these tools, `policy test FILE --cases CASES` checks it against an operator's cases, and `policy
//! replay FILE --log LOG --in-force OLD` decides a log's calls again under it
//! (`toolgate::cli::PolicyCommand`).

use std::fmt;
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};
use serde_json::{Value, json};
use toolgate::cli::{ListTools, PolicyCommand};
use toolgate::policy_file::LivePolicy;
use toolgate::schemars::JsonSchema;
use toolgate::serde::Serialize;
use toolgate::{Approval, ApprovalRequest, Approver, CallError, Denied, Gate, Mode, tool};

const EXIT_STATUS: &str = "\
Exit status:
  0  the tool ran and succeeded
  1  the tool ran and failed
  2  the command line is invalid
  3  the gate refused the call: the tool did not run";

/// Exit status of a call the gate refused.
const REFUSED: u8 = 3;
/// Exit status of a tool that ran and failed.
const FAILED: u8 = 1;
/// Exit status of a command line that is not valid, as clap uses.
const USAGE: u8 = 2;

/// Operates the services of a small deployment, each command decided by toolgate.
#[derive(Debug, Parser)]
#[command(after_help = EXIT_STATUS)]
struct Cli {
    /// How much the operator (or agent) may change
    #[arg(
        long,
        global = true,
        env = "TOOLGATE_MODE",
        value_enum,
        ignore_case = true,
        default_value_t = Mode::Shadow
    )]
    mode: Mode,

    /// Approve HIGH_WRITE calls without asking (the mode must still allow them)
    #[arg(long, short = 'y', global = true)]
    yes: bool,

    /// Refuse the tools matching this id or glob in every mode (repeatable), e.g. `deploy.delete`
    #[arg(long, global = true, value_name = "PATTERN")]
    deny: Vec<String>,

    /// Follow an operator's policy file (TOML), which narrows what the mode allows
    #[arg(long, global = true, value_name = "FILE")]
    policy: Option<std::path::PathBuf>,

    #[command(flatten)]
    list_tools: ListTools,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a service's version and health [READ_ONLY]
    Status {
        /// The service
        service: String,
    },
    /// Plan an upgrade of a service to a version, without applying it [PROPOSE_ONLY]
    Plan {
        /// The service
        service: String,
        /// The version to upgrade to
        #[arg(long)]
        to: String,
    },
    /// Restart a service's replicas one by one [LOW_WRITE]
    Restart {
        /// The service
        service: String,
    },
    /// Roll a service back to an earlier version [HIGH_WRITE]
    Rollback {
        /// The service
        service: String,
        /// The version to roll back to
        #[arg(long)]
        to: String,
    },
    /// Delete a service and its data [HIGH_WRITE]
    Delete {
        /// The service
        service: String,
    },
    /// Check, explain or compare an operator's policy file against these tools
    #[command(subcommand)]
    Policy(PolicyCommand),
}

impl Command {
    /// The tool this subcommand calls, and its arguments.
    fn call(&self) -> (&'static str, Value) {
        match self {
            Command::Status { service } => ("deploy.status", json!({ "service": service })),
            Command::Plan { service, to } => {
                ("deploy.plan", json!({ "service": service, "to": to }))
            }
            Command::Restart { service } => ("deploy.restart", json!({ "service": service })),
            Command::Rollback { service, to } => {
                ("deploy.rollback", json!({ "service": service, "to": to }))
            }
            Command::Delete { service } => ("deploy.delete", json!({ "service": service })),
            Command::Policy(_) => unreachable!("`policy` is not a tool's call"),
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// The tools
// ---------------------------------------------------------------------------------------------------------

/// What the tools return when they fail, or when the gate refuses them.
#[derive(Debug)]
enum DeskError {
    Refused(Denied),
    UnknownService(String),
    NotNewer { current: String, to: String },
    NotOlder { current: String, to: String },
}

impl From<Denied> for DeskError {
    fn from(denied: Denied) -> Self {
        DeskError::Refused(denied)
    }
}

impl fmt::Display for DeskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeskError::Refused(denied) => denied.fmt(f),
            DeskError::UnknownService(name) => write!(f, "no service is named `{name}`"),
            DeskError::NotNewer { current, to } => {
                write!(f, "{to} is not newer than the running {current}")
            }
            DeskError::NotOlder { current, to } => {
                write!(f, "{to} is not older than the running {current}")
            }
        }
    }
}

/// The deployment: service, running version, replicas.
const SERVICES: [(&str, &str, u32); 3] = [
    ("web", "1.5.0", 3),
    ("api", "2.1.3", 2),
    ("worker", "0.9.2", 1),
];

fn find(service: &str) -> Result<(&'static str, u32), DeskError> {
    SERVICES
        .iter()
        .find(|(name, _, _)| *name == service)
        .map(|&(_, version, replicas)| (version, replicas))
        .ok_or_else(|| DeskError::UnknownService(service.to_owned()))
}

/// Versions compare by their numbers: `1.10.0` is newer than `1.9.3`.
fn version_key(version: &str) -> Vec<u64> {
    version
        .split('.')
        .map(|part| part.parse().unwrap_or(0))
        .collect()
}

/// A service as `status` reports it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
struct Status {
    service: String,
    version: String,
    replicas: u32,
    healthy: bool,
}

/// Show a service's version and health.
#[tool(risk = "READ_ONLY", domain = "deploy", idempotent, callable)]
fn status(service: String) -> Result<Status, DeskError> {
    let (version, replicas) = find(&service)?;
    Ok(Status {
        service,
        version: version.to_owned(),
        replicas,
        healthy: true,
    })
}

/// Plan an upgrade of a service to a version; nothing is applied.
#[tool(risk = "PROPOSE_ONLY", domain = "deploy", callable)]
fn plan(service: String, to: String) -> Result<Vec<String>, DeskError> {
    let (current, replicas) = find(&service)?;
    if version_key(&to) <= version_key(current) {
        return Err(DeskError::NotNewer {
            current: current.to_owned(),
            to,
        });
    }
    let mut steps = vec![format!("pull {service}:{to}")];
    steps.extend(
        (1..=replicas).map(|n| format!("replace replica {n}/{replicas}: {current} -> {to}")),
    );
    steps.push(format!("check {service} health"));
    Ok(steps)
}

/// Restart a service's replicas one by one.
#[tool(risk = "LOW_WRITE", domain = "deploy", callable)]
fn restart(service: String) -> Result<String, DeskError> {
    let (_, replicas) = find(&service)?;
    Ok(format!("restarted {replicas} replica(s) of {service}"))
}

/// Roll a service back to an earlier version.
#[tool(risk = "HIGH_WRITE", domain = "deploy", callable)]
fn rollback(service: String, to: String) -> Result<String, DeskError> {
    let (current, _) = find(&service)?;
    if version_key(&to) >= version_key(current) {
        return Err(DeskError::NotOlder {
            current: current.to_owned(),
            to,
        });
    }
    Ok(format!("rolled {service} back from {current} to {to}"))
}

/// Delete a service and all its data.
#[tool(risk = "HIGH_WRITE", domain = "deploy", callable)]
fn delete(service: String) -> Result<String, DeskError> {
    find(&service)?;
    Ok(format!("deleted {service}"))
}

// ---------------------------------------------------------------------------------------------------------
// Approvals
// ---------------------------------------------------------------------------------------------------------

/// Asks the operator on stderr, reads the answer on stdin. No answer is a rejection.
struct Ask {
    /// The arguments of the call, as JSON.
    arguments: String,
}

impl Approver for Ask {
    fn approve(&self, request: &ApprovalRequest<'_>) -> Approval {
        let mut stderr = std::io::stderr().lock();
        let _ = write!(
            stderr,
            "{} ({}) in {} with {}\napprove? [y/N] ",
            request.tool.id, request.risk, request.mode, self.arguments
        );
        let _ = stderr.flush();
        let stdin = std::io::stdin();
        let mut answer = String::new();
        let read = stdin.lock().read_line(&mut answer);
        // An answer typed at a terminal ends the prompt's line; a piped one or none does not.
        if !stdin.is_terminal() || matches!(read, Ok(0)) {
            let _ = writeln!(stderr);
        }
        match read {
            Ok(0) => Approval::Reject("no answer (end of input)".to_owned()),
            Ok(_) if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") => {
                Approval::Approve
            }
            Ok(_) => Approval::Reject(format!("the operator answered {:?}", answer.trim())),
            Err(error) => Approval::Reject(format!("could not read an answer: {error}")),
        }
    }
}

/// `--yes`: the operator approved on the command line.
struct Preapproved;

impl Approver for Preapproved {
    fn approve(&self, request: &ApprovalRequest<'_>) -> Approval {
        eprintln!("{} ({}): approved by --yes", request.tool.id, request.risk);
        Approval::Approve
    }
}

// ---------------------------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------------------------

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.list_tools.run() {
        return ExitCode::SUCCESS;
    }
    let Some(command) = &cli.command else {
        Cli::command()
            .error(
                ErrorKind::MissingSubcommand,
                "a command is required (or --list-tools)",
            )
            .exit();
    };
    if let Command::Policy(policy) = command {
        return ExitCode::from(u8::try_from(policy.run()).unwrap_or(USAGE));
    }
    let (id, arguments) = command.call();

    let mut builder = Gate::builder().mode(cli.mode);
    for pattern in &cli.deny {
        builder = builder.deny(pattern.as_str());
    }
    if let Some(path) = &cli.policy {
        match LivePolicy::load(path) {
            Ok(live) => builder = builder.policy(live),
            Err(errors) => {
                eprintln!("{errors}");
                return ExitCode::from(USAGE);
            }
        }
    }
    builder = if cli.yes {
        builder.approver(Preapproved)
    } else {
        builder.approver(Ask {
            arguments: arguments.to_string(),
        })
    };
    let gate = match builder.build() {
        Ok(gate) => gate,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(USAGE);
        }
    };

    let result = toolgate::registry()
        .call(&gate, id, arguments)
        .now()
        .expect("the desk's tools are sync: their calls complete at once");
    match result {
        Ok(Value::String(text)) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Ok(value) => {
            println!("{value:#}");
            ExitCode::SUCCESS
        }
        Err(error @ CallError::Denied(_)) => {
            eprintln!("refused {}: {error}", error.code());
            ExitCode::from(REFUSED)
        }
        Err(error) => {
            eprintln!("failed {}: {error}", error.code());
            ExitCode::from(FAILED)
        }
    }
}
