//! A devops desk for an agent: read logs, plan deploys, restart services, delete volumes and run shell
//! commands, through one gate, by name from the command line or served over MCP on stdin and stdout.
//!
//! ```text
//! cargo run --example devops_desk --features mcp,clap -- call logs.tail '{"service": "web"}'
//! cargo run --example devops_desk --features mcp,clap -- --mode partial-auto \
//!     call shell.run '{"command": "sudo systemctl stop web"}'      # refused: raised to HIGH_WRITE
//! cargo run --example devops_desk --features mcp,clap -- --mode full-auto \
//!     call shell.run '{"command": "sudo systemctl stop web"}'      # asks on stderr, reads y/N
//! cargo run --example devops_desk --features mcp,clap -- --mode partial-auto serve
//! cargo run --example devops_desk --features mcp,clap -- --list-tools
//! ```
//!
//! The tools are a `#[toolset]` over the desk's state (`tools.rs`); calls by name and over MCP run on
//! the instance given to them. In `call`, a call that needs an approval asks the operator at the
//! terminal, who sees the arguments as the audit log records them (the token redacted); `serve` has no
//! operator on stdin (it carries the protocol), so it refuses such calls unless `--yes`. Exit status of
//! `call`: 0 done, 1 the tool failed, 2 usage, 3 refused.

mod tools;

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rmcp::ServiceExt;
use toolgate::cli::{ListTools, ModeArg};
use toolgate::mcp::ToolgateServer;
use toolgate::registry::Instances;
use toolgate::{AllowAllApprover, Approval, ApprovalRequest, Approver, Gate};

use tools::Desk;

/// The devops desk's tools, through one gate.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    mode: ModeArg,
    /// Append every decision to this hash-chained JSONL audit log.
    #[arg(long, value_name = "FILE", global = true)]
    audit_log: Option<PathBuf>,
    /// Approve every call that needs an approval, without asking.
    #[arg(long, global = true)]
    yes: bool,
    #[command(flatten)]
    list_tools: ListTools,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Call one tool by name with JSON arguments.
    Call {
        /// The tool's id, such as `logs.tail`.
        id: String,
        /// Its arguments, a JSON object.
        #[arg(default_value = "{}")]
        arguments: String,
    },
    /// Serve the tools over MCP on stdin and stdout.
    Serve,
}

/// Asks the operator at the terminal, showing what would run. No answer is a rejection.
struct Operator;

impl Approver for Operator {
    fn approve(&self, request: &ApprovalRequest<'_>) -> Approval {
        eprint!(
            "approve {} ({}, mode {}) with arguments {}? [y/N] ",
            request.tool.id,
            request.risk,
            request.mode,
            request.arguments.unwrap_or("(not serializable)"),
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        match std::io::stdin().lock().read_line(&mut answer) {
            Ok(_) if matches!(answer.trim(), "y" | "yes") => Approval::Approve,
            Ok(0) => Approval::Reject("no answer (end of input)".to_owned()),
            Ok(_) => Approval::Reject(format!("the operator answered {:?}", answer.trim())),
            Err(error) => Approval::Reject(format!("could not read the answer: {error}")),
        }
    }
}

fn gate(args: &Args, interactive: bool) -> Result<Gate, Box<dyn std::error::Error>> {
    let mut builder = Gate::builder().mode(args.mode.mode).agent("devops-desk");
    if let Some(path) = &args.audit_log {
        builder = builder.audit(toolgate::audit::JsonlSink::open(path)?);
    }
    builder = match (args.yes, interactive) {
        (true, _) => builder.approver(AllowAllApprover),
        (false, true) => builder.approver(Operator),
        (false, false) => builder,
    };
    Ok(builder.build()?)
}

async fn call(args: &Args, id: &str, arguments: &str) -> Result<u8, Box<dyn std::error::Error>> {
    let arguments: serde_json::Value = match serde_json::from_str(arguments) {
        Ok(value) => value,
        Err(error) => {
            eprintln!("the arguments are not JSON: {error}");
            return Ok(2);
        }
    };
    let gate = gate(args, true)?;
    let instances = Instances::new().with(Desk::new());
    match toolgate::registry()
        .call_with(&gate, &instances, id, arguments)
        .await
    {
        Ok(value) => {
            println!("{value}");
            Ok(0)
        }
        Err(error) if error.denied().is_some() => {
            eprintln!("refused {}: {error}", error.code());
            Ok(3)
        }
        Err(error) => {
            eprintln!("failed {}: {error}", error.code());
            Ok(1)
        }
    }
}

async fn serve(args: &Args) -> Result<u8, Box<dyn std::error::Error>> {
    let server = ToolgateServer::new(gate(args, false)?)
        .instance(Desk::new())
        .only(|m| m.domain == Some("desk"))
        .server_info("devops-desk", env!("CARGO_PKG_VERSION"));
    eprintln!("devops-desk: serving in mode {}", server.gate().mode());
    server
        .serve(rmcp::transport::stdio())
        .await?
        .waiting()
        .await?;
    Ok(0)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if args.list_tools.run() {
        return ExitCode::SUCCESS;
    }
    let result = match &args.command {
        Some(Command::Call { id, arguments }) => call(&args, id, arguments).await,
        Some(Command::Serve) => serve(&args).await,
        None => {
            eprintln!("devops-desk: give a command (`call ID JSON` or `serve`); see --help");
            Ok(2)
        }
    };
    match result {
        Ok(status) => ExitCode::from(status),
        Err(error) => {
            eprintln!("devops-desk: {error}");
            ExitCode::FAILURE
        }
    }
}
