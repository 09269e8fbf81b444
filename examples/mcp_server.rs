//! A support desk's ticket tools, served over MCP on stdin and stdout: a `#[toolset]` over the desk's
//! state, whose `&self` tools run on the instance the server is given, and one free function.
//!
//! ```text
//! cargo run --example mcp_server --features mcp,clap -- --mode PARTIAL_AUTO
//! ```
//!
//! Point an MCP client at the built binary (`target/debug/examples/mcp_server`). The mode comes from
//! `--mode`, else from `TOOLGATE_MODE`, else SHADOW; an invalid mode is an error. `--audit-log FILE`
//! appends every decision to a hash-chained JSONL log; `--show-disabled` lists the tools the mode
//! refuses instead of hiding them; `--approve-all` approves every HIGH_WRITE call (a demo stand-in for
//! an operator: without an approver, the gate refuses them all). Stdout carries the protocol, so the
//! server logs to stderr.
//!
//! `--max-message BYTES` (4 MiB by default) is the largest message it reads: a larger one is answered
//! with an `Invalid Request` error (`MESSAGE_TOO_LARGE`).
//!
//! `--approvals out-of-band` refuses a call that needs an approval with `APPROVAL_PENDING` and keeps it
//! for an operator; `--approvals in-band` asks the client's user with an elicitation form instead (a
//! client of the 2026-07-28 protocol; older ones get the out-of-band refusal). `--operator ADDRESS`
//! opens the operator channel on a TCP address of this machine (e.g. `127.0.0.1:0`; the address
//! taken is printed on stderr as `operator channel on ADDRESS`), one command a line, answered with a
//! line: `list` (the pending requests: `ID TOOL ARGUMENTS`, then `.`), `approve ID`, `reject ID
//! REASON`, `lower MODE`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use rmcp::ServiceExt;
use toolgate::approval::store::Answer;
use toolgate::mcp::{Approvals, InBand, PendingApproval, ToolgateServer, Visibility};
use toolgate::schemars::JsonSchema;
use toolgate::serde::Serialize;
use toolgate::{AllowAllApprover, Denied, Gate, Mode, tool, toolset};

/// Serves the ticket desk's tools over MCP on stdin and stdout.
#[derive(Parser)]
struct Args {
    /// The agent's mode; TOOLGATE_MODE when not given, SHADOW when neither is.
    #[arg(long, value_enum)]
    mode: Option<Mode>,
    /// Append every decision to this hash-chained JSONL audit log.
    #[arg(long, value_name = "FILE")]
    audit_log: Option<PathBuf>,
    /// List the tools the mode refuses, marked `[DISABLED in <MODE> mode]`, instead of hiding them.
    #[arg(long)]
    show_disabled: bool,
    /// Approve every call that needs an approval. For demos only.
    #[arg(long, conflicts_with = "approvals")]
    approve_all: bool,
    /// Ask for approvals in two steps: an operator answers (out-of-band), or the client's user does
    /// (in-band).
    #[arg(long, value_enum)]
    approvals: Option<ApprovalsArg>,
    /// Open the operator channel on this TCP address (of this machine).
    #[arg(long, value_name = "ADDRESS")]
    operator: Option<String>,
    /// The largest message the server reads; a larger one is answered with an error.
    #[arg(long, value_name = "BYTES", default_value_t = toolgate::mcp::stdio::DEFAULT_MAX_MESSAGE)]
    max_message: usize,
}

#[derive(Clone, Copy, ValueEnum)]
enum ApprovalsArg {
    OutOfBand,
    InBand,
}

/// Why a desk tool did not do what it was asked.
#[derive(Debug)]
enum DeskError {
    Refused(Denied),
    NoSuchTicket(u64),
    Fetch(String),
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
            DeskError::NoSuchTicket(id) => write!(f, "there is no ticket {id}"),
            DeskError::Fetch(why) => write!(f, "could not fetch the page: {why}"),
        }
    }
}

/// A support ticket.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
struct Ticket {
    /// The ticket's number.
    id: u64,
    /// Its subject line.
    subject: String,
    /// Its labels, sorted.
    labels: BTreeSet<String>,
}

/// The tickets a search found.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
struct Found {
    /// The matching tickets, by number.
    tickets: Vec<Ticket>,
}

/// A reply written for a human to review; nothing is sent.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
struct Draft {
    /// The ticket it answers.
    ticket: u64,
    /// The reply's text.
    body: String,
    /// Always false: a draft is never sent by the tool.
    sent: bool,
}

/// The desk: its tickets, shared by every call the server makes on it.
struct Desk {
    tickets: Mutex<Vec<Ticket>>,
}

impl Desk {
    /// A desk with four open tickets.
    fn seeded() -> Desk {
        let subjects = [
            (101, "Cannot log in after password reset"),
            (102, "Invoice shows the wrong VAT rate"),
            (103, "Login page is slow in the morning"),
            (104, "Please close my account"),
        ];
        let tickets = subjects
            .into_iter()
            .map(|(id, subject)| Ticket {
                id,
                subject: subject.to_owned(),
                labels: BTreeSet::new(),
            })
            .collect();
        Desk {
            tickets: Mutex::new(tickets),
        }
    }

    fn tickets(&self) -> std::sync::MutexGuard<'_, Vec<Ticket>> {
        self.tickets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[toolset(domain = "tickets")]
impl Desk {
    /// Search tickets whose subject contains the query (case-insensitive).
    #[tool(risk = "READ_ONLY", idempotent, callable)]
    pub fn search(&self, query: String, limit: Option<usize>) -> Result<Found, DeskError> {
        let query = query.to_lowercase();
        let found = self
            .tickets()
            .iter()
            .filter(|t| t.subject.to_lowercase().contains(&query))
            .take(limit.unwrap_or(10))
            .cloned()
            .collect();
        Ok(Found { tickets: found })
    }

    /// Draft a reply to a ticket for a human to review and send.
    #[tool(risk = "PROPOSE_ONLY", callable)]
    pub fn draft_reply(&self, id: u64, body: String) -> Result<Draft, DeskError> {
        if !self.tickets().iter().any(|t| t.id == id) {
            return Err(DeskError::NoSuchTicket(id));
        }
        Ok(Draft {
            ticket: id,
            body,
            sent: false,
        })
    }

    /// Add a label to a ticket; adding it twice changes nothing.
    #[tool(risk = "LOW_WRITE", idempotent, callable)]
    pub fn label(&self, id: u64, name: String) -> Result<Ticket, DeskError> {
        let mut tickets = self.tickets();
        let ticket = tickets
            .iter_mut()
            .find(|t| t.id == id)
            .ok_or(DeskError::NoSuchTicket(id))?;
        ticket.labels.insert(name);
        Ok(ticket.clone())
    }

    /// Wait for the customer's reply to a ticket, at most `seconds`; answers whether one came.
    #[tool(risk = "READ_ONLY", callable)]
    pub async fn await_reply(&self, id: u64, seconds: u64) -> Result<String, DeskError> {
        if !self.tickets().iter().any(|t| t.id == id) {
            return Err(DeskError::NoSuchTicket(id));
        }
        eprintln!("ticket-desk: waiting for a reply to ticket {id}");
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        eprintln!("ticket-desk: stopped waiting for a reply to ticket {id}");
        Ok(format!("no reply to ticket {id} within {seconds} s"))
    }

    /// Delete a ticket and its history for good.
    #[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], callable)]
    pub fn delete(&self, id: u64) -> Result<String, DeskError> {
        let mut tickets = self.tickets();
        let before = tickets.len();
        tickets.retain(|t| t.id != id);
        if tickets.len() == before {
            return Err(DeskError::NoSuchTicket(id));
        }
        Ok(format!("ticket {id} deleted"))
    }
}

/// Fetch a web page over plain HTTP and return the start of its body (at most 4 KiB).
#[tool(risk = "READ_ONLY", domain = "web", open_world, callable)]
fn fetch(url: String) -> Result<String, DeskError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| DeskError::Fetch("only http:// URLs are supported".to_owned()))?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let address = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:80")
    };
    let failed = |e: std::io::Error| DeskError::Fetch(e.to_string());
    let mut stream = TcpStream::connect(&address).map_err(failed)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(failed)?;
    write!(
        stream,
        "GET /{path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: toolgate-example\r\n\r\n"
    )
    .map_err(failed)?;
    let mut response = Vec::new();
    stream
        .take(64 * 1024)
        .read_to_end(&mut response)
        .map_err(failed)?;
    let response = String::from_utf8_lossy(&response);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok(body.chars().take(4096).collect())
}

/// How many refunds the desk has made, for the refund's number.
static REFUNDS: Mutex<u64> = Mutex::new(0);

/// Refund an amount to the customer of a ticket, on the card they paid with.
#[tool(
    risk = "HIGH_WRITE",
    domain = "tickets",
    modes = [FULL_AUTO],
    redact = [card],
    callable
)]
fn refund(id: u64, cents: u64, card: String) -> Result<String, DeskError> {
    let _ = card;
    let mut refunds = REFUNDS.lock().unwrap_or_else(|p| p.into_inner());
    *refunds += 1;
    eprintln!(
        "ticket-desk: refund {} of {cents} cents on ticket {id}",
        *refunds
    );
    Ok(format!(
        "refund {} of {cents} cents on ticket {id}",
        *refunds
    ))
}

fn gate(args: &Args) -> Result<Gate, Box<dyn std::error::Error>> {
    let mode = match args.mode {
        Some(mode) => mode,
        None => Mode::from_env()?,
    };
    let mut builder = Gate::builder().mode(mode).agent("mcp_server");
    if let Some(path) = &args.audit_log {
        builder = builder.audit(toolgate::audit::JsonlSink::open(path)?);
    }
    if args.approve_all {
        builder = builder.approver(AllowAllApprover);
    }
    if args.approvals.is_some() {
        builder = builder.two_step_approvals();
    }
    Ok(builder.build()?)
}

/// The requests waiting for the operator, by a number the operator types; the tokens stay here.
#[derive(Default)]
struct Pending {
    next: u64,
    requests: BTreeMap<u64, PendingApproval>,
}

/// Serves the operator channel: one command a line, one answer a line.
fn operator_channel(listener: TcpListener, gate: Gate, pending: Arc<Mutex<Pending>>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let (gate, pending) = (gate.clone(), Arc::clone(&pending));
        std::thread::spawn(move || {
            let Ok(mut out) = stream.try_clone() else {
                return;
            };
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { return };
                let answer = operate(&gate, &pending, line.trim());
                if writeln!(out, "{answer}").is_err() {
                    return;
                }
            }
        });
    }
}

fn operate(gate: &Gate, pending: &Mutex<Pending>, line: &str) -> String {
    let mut pending = pending.lock().unwrap_or_else(|p| p.into_inner());
    let (command, rest) = line.split_once(' ').unwrap_or((line, ""));
    match command {
        "list" => {
            let mut lines: Vec<String> = pending
                .requests
                .iter()
                .map(|(id, p)| format!("{id} {} {}", p.tool, p.arguments))
                .collect();
            lines.push(".".to_owned());
            lines.join("\n")
        }
        "approve" | "reject" => {
            let (id, reason) = rest.split_once(' ').unwrap_or((rest, ""));
            let Some(request) = id.parse().ok().and_then(|id| pending.requests.remove(&id)) else {
                return format!("error: no pending request {id}");
            };
            let answer = if command == "approve" {
                Answer::Approve {
                    by: "operator".to_owned(),
                    for_session: false,
                    confirmation: None,
                }
            } else {
                Answer::Reject {
                    by: "operator".to_owned(),
                    reason: reason.to_owned(),
                    stop: false,
                }
            };
            match gate.answer(&request.token, answer) {
                Ok(()) => format!("ok: {command}d {id} ({})", request.tool),
                Err(error) => format!("error: {error}"),
            }
        }
        "lower" => match rest.parse::<Mode>() {
            Ok(mode) => match gate.lower_by(mode, "operator") {
                Ok(()) => format!("ok: lowered to {}", gate.mode()),
                Err(error) => format!("error: {error}"),
            },
            Err(error) => format!("error: {error}"),
        },
        _ => format!("error: unknown command `{command}`"),
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let gate = gate(&args)?;
    let visibility = if args.show_disabled {
        Visibility::MarkDisabled
    } else {
        Visibility::Hide
    };
    let pending = Arc::new(Mutex::new(Pending::default()));
    if let Some(address) = &args.operator {
        let listener = TcpListener::bind(address)?;
        eprintln!(
            "ticket-desk: operator channel on {}",
            listener.local_addr()?
        );
        let (gate, pending) = (gate.clone(), Arc::clone(&pending));
        std::thread::spawn(move || operator_channel(listener, gate, pending));
    }
    let approvals = match args.approvals {
        // The example's key lives as long as the process; a deployment gives every process the same
        // key (`InBand::new`).
        Some(ApprovalsArg::InBand) => Approvals::InBand(InBand::process_key()),
        _ => Approvals::OutOfBand,
    };
    let server = ToolgateServer::new(gate)
        .approvals(approvals)
        .on_pending(move |request| {
            eprintln!("ticket-desk: {} waits for an operator", request.tool);
            let mut pending = pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.next += 1;
            let id = pending.next;
            pending.requests.insert(id, request.clone());
        })
        .instance(Desk::seeded()) // the desk's tools run on it
        .visibility(visibility)
        .only(|m| matches!(m.domain, Some("tickets" | "web")))
        .server_info("ticket-desk", env!("CARGO_PKG_VERSION"))
        .instructions(
            "Support desk tools. Every call is decided by the desk's safety mode; a refused call \
             returns an error whose text starts with its code.",
        );
    let listed: Vec<_> = server.tools().into_iter().map(|t| t.name).collect();
    eprintln!(
        "ticket-desk: mode {}, listing {}",
        server.gate().mode(),
        listed.join(", ")
    );
    let running = server
        .serve(toolgate::mcp::stdio::stdio_limited(args.max_message))
        .await?;
    let reason = running.waiting().await?;
    eprintln!("ticket-desk: stopped ({reason:?})");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ticket-desk: {error}");
            ExitCode::FAILURE
        }
    }
}
