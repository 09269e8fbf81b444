//! A team's notes served over MCP's streamable HTTP transport, to several principals, each with a gate
//! of its own.
//!
//! ```text
//! cargo run --example mcp_http --features mcp-http,clap -- --principals principals.txt
//! ```
//!
//! `principals.txt` maps bearer tokens to principals and their modes, one a line (`#` starts a
//! comment): `TOKEN NAME MODE`, e.g. `s3cr3t-alice alice FULL_AUTO`. A request without a token the
//! file names is answered `401 Unauthorized`. Each principal's calls go through its own gate (its mode,
//! and its name as the gate's principal, which approvers and every audit record see), and `tools/list` shows it
//! what that gate allows: it may differ per principal, never per connection.
//!
//! - `--listen ADDRESS` (default `127.0.0.1:8080`): the endpoint is `http://ADDRESS/mcp`; the address
//!   taken is printed on stderr as `listening on http://ADDRESS/mcp`. Hosts other than loopback must
//!   be named with `--allowed-host` (rmcp refuses others, against DNS rebinding).
//! - `--audit-log FILE`: every principal's decisions in one hash-chained JSONL log.
//! - `--approvals in-band` asks the client's user with an elicitation form; `--state-key-file FILE`
//!   holds the key (32 bytes or more) that seals the forms' request states, the same file for every
//!   process behind the address (without it, a random key of this process).
//! - With the `postgres` feature, `--store URL` keeps approvals in PostgreSQL (`toolgate approvals
//!   approve` answers the out-of-band ones) and `--fleet NAME` joins every principal's gate to the
//!   fleet, so `toolgate fleet lower` lowers them all: several processes behind one address then share
//!   approvals and the mode. Without them, both live in this process's memory.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::{Parser, ValueEnum};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use toolgate::approval::store::ApprovalStore;
use toolgate::audit::AuditSink;
use toolgate::mcp::http::{HttpService, Principals};
use toolgate::mcp::{Approvals, InBand, ToolgateServer};
use toolgate::{Denied, Gate, Mode, tool};

/// Serves the team's notes over MCP's streamable HTTP transport.
#[derive(Parser)]
struct Args {
    /// The bearer tokens, one `TOKEN NAME MODE` a line.
    #[arg(long, value_name = "FILE")]
    principals: PathBuf,
    /// Where to listen.
    #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1:8080")]
    listen: String,
    /// A host name clients may address this server by, besides loopback (repeatable).
    #[arg(long, value_name = "HOST")]
    allowed_host: Vec<String>,
    /// Append every decision to this hash-chained JSONL audit log.
    #[arg(long, value_name = "FILE")]
    audit_log: Option<PathBuf>,
    /// How calls that need an approval are answered.
    #[arg(long, value_enum, default_value = "out-of-band")]
    approvals: ApprovalsArg,
    /// The key that seals in-band request states (at least 32 bytes), shared by every process.
    #[arg(long, value_name = "FILE")]
    state_key_file: Option<PathBuf>,
    /// Keep approvals in this PostgreSQL database (feature `postgres`).
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Join every principal's gate to this fleet of the store's database (feature `postgres`).
    #[arg(long, value_name = "NAME", requires = "store")]
    fleet: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum ApprovalsArg {
    OutOfBand,
    InBand,
}

/// The team's notes, in this process's memory.
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn notes() -> std::sync::MutexGuard<'static, Vec<String>> {
    NOTES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Read every note, oldest first.
#[tool(risk = "READ_ONLY", domain = "notes", idempotent, callable)]
fn list() -> Result<Vec<String>, Denied> {
    Ok(notes().clone())
}

/// Add a note; answers its number.
#[tool(risk = "LOW_WRITE", domain = "notes", callable)]
fn add(text: String) -> Result<String, Denied> {
    let mut notes = notes();
    notes.push(text);
    Ok(format!("note {} added", notes.len()))
}

/// Delete one note for good, by its number.
#[tool(risk = "HIGH_WRITE", domain = "notes", modes = [FULL_AUTO], callable)]
fn remove(number: usize) -> Result<String, Denied> {
    let mut notes = notes();
    if number == 0 || number > notes.len() {
        return Ok(format!("there is no note {number}"));
    }
    notes.remove(number - 1);
    Ok(format!("note {number} removed"))
}

/// Delete every note for good.
#[tool(risk = "HIGH_WRITE", domain = "notes", modes = [FULL_AUTO], callable)]
fn purge() -> Result<String, Denied> {
    let mut notes = notes();
    let count = notes.len();
    notes.clear();
    Ok(format!("{count} notes purged"))
}

/// What every principal's gate shares: the audit log, the approval store, the fleet.
struct Shared {
    audit: Option<Arc<dyn AuditSink>>,
    store: Arc<dyn ApprovalStore>,
    #[cfg(feature = "postgres")]
    fleet: Option<toolgate::postgres::Fleet>,
}

impl Shared {
    fn open(args: &Args) -> Result<Shared, Box<dyn std::error::Error>> {
        let audit = match &args.audit_log {
            Some(path) => {
                Some(Arc::new(toolgate::audit::JsonlSink::open(path)?) as Arc<dyn AuditSink>)
            }
            None => None,
        };
        #[cfg(feature = "postgres")]
        if let Some(url) = &args.store {
            let store = Arc::new(toolgate::postgres::PostgresStore::connect(url)?);
            let fleet = match &args.fleet {
                Some(name) => Some(toolgate::postgres::Fleet::connect(url, name)?),
                None => None,
            };
            return Ok(Shared {
                audit,
                store,
                fleet,
            });
        }
        #[cfg(not(feature = "postgres"))]
        if args.store.is_some() {
            return Err("--store needs the example built with the `postgres` feature".into());
        }
        let store = toolgate::approval::two_step::MemoryStore::new(
            toolgate::approval::DEFAULT_APPROVAL_TTL,
        )
        .ok_or("the approval store's time to live is out of range")?;
        Ok(Shared {
            audit,
            store: Arc::new(store),
            #[cfg(feature = "postgres")]
            fleet: None,
        })
    }

    fn gate(&self, name: &str, mode: Mode) -> Result<Gate, Box<dyn std::error::Error>> {
        let mut builder = Gate::builder()
            .mode(mode)
            .agent("team-notes")
            .principal(name)
            .approval_store_shared(Arc::clone(&self.store));
        if let Some(audit) = &self.audit {
            builder = builder.audit_shared(Arc::clone(audit));
        }
        #[cfg(feature = "postgres")]
        if let Some(fleet) = &self.fleet {
            return Ok(fleet.join(builder)?);
        }
        Ok(builder.build()?)
    }
}

fn principals(args: &Args, shared: &Shared) -> Result<Principals, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(&args.principals)?;
    let mut principals = Principals::new();
    let mut count = 0;
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [token, name, mode] = fields[..] else {
            return Err(format!("line {}: expected `TOKEN NAME MODE`", number + 1).into());
        };
        let mode: Mode = mode.parse()?;
        principals = principals.bearer(token, name, shared.gate(name, mode)?);
        count += 1;
    }
    if count == 0 {
        return Err("the principals file names no principal".into());
    }
    Ok(principals)
}

fn approvals(args: &Args) -> Result<Approvals, Box<dyn std::error::Error>> {
    Ok(match (args.approvals, &args.state_key_file) {
        (ApprovalsArg::OutOfBand, _) => Approvals::OutOfBand,
        (ApprovalsArg::InBand, Some(path)) => Approvals::InBand(InBand::new(std::fs::read(path)?)?),
        (ApprovalsArg::InBand, None) => Approvals::InBand(InBand::process_key()),
    })
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let shared = Shared::open(&args)?;
    let principals = principals(&args, &shared)?;
    // The server's own gate answers nothing over HTTP (every request carries its principal's); it is
    // the one a request without a principal would get, so it refuses everything that writes.
    let server = ToolgateServer::new(Gate::new(Mode::Shadow)?)
        .approvals(approvals(&args)?)
        .on_pending(|request| eprintln!("notes: {} waits for an operator", request.tool))
        .only(|m| m.domain == Some("notes"))
        .server_info("team-notes", env!("CARGO_PKG_VERSION"));
    let mut config = StreamableHttpServerConfig::default();
    config
        .allowed_hosts
        .extend(args.allowed_host.iter().cloned());
    let service = HttpService::new(server, principals, config);

    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    eprintln!("notes: listening on http://{}/mcp", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let connection = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = connection {
                eprintln!("notes: a connection failed: {error}");
            }
        });
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("notes: {error}");
            ExitCode::FAILURE
        }
    }
}
