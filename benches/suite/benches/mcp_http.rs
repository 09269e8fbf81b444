//! MCP `tools/call` over streamable HTTP on loopback, end to end: rmcp's own streamable HTTP client
//! (reqwest, HTTP/1.1) driving a server in a child process (this binary, run again in a server role),
//! each server serving its connections with hyper and the same trivial tool (`sum`):
//!
//! - rmcp's `StreamableHttpService` around a `#[tool_router]` handler (its router kept in a field), no
//!   authentication: the baseline;
//! - toolgate's `HttpService` around `ToolgateServer::new(..).handler(h)`, `h` the same handler gated
//!   in place (`#[toolgate::toolset]`, `#[toolgate(risk = "READ_ONLY")]`), its principal named by a
//!   static bearer token: the gate alone;
//! - the same, the principal's gate writing an `enter` and an `exit` record of every call to the
//!   hash-chained JSONL log (`Durability::Flush`: each record reaches the OS before the body runs);
//! - the same as the second, the principal named by an OAuth access token (a JWT signed with an
//!   Ed25519 test key made here, its JWKS given to the verifier as JSON), the same token on every
//!   request, so that the verifier's per-token cache answers.
//!
//! Every server gets the same requests (the client sends the bearer token to rmcp's as well, which
//! ignores it) and rmcp's default `StreamableHttpServerConfig` (responses as SSE streams). The client
//! speaks MCP 2026-07-28 (`server/discover`, no session: each request carries its protocol version and
//! capabilities), or with `PROTOCOL=2025-11-25` the `initialize` handshake and a session
//! (`Mcp-Session-Id`); the version each server answered is checked.
//!
//! Every server runs at once, idle but for its turn. Each is called `CALLS` times (20,000) one call
//! after another by one client, then `CALLS` times by `CLIENTS` (8) clients at once, each with its own
//! connection, each calling one call after another; before that, 1,000 calls of warm-up by the first
//! client and 100 by each. The calls go in `CHUNKS` (20) chunks that take the servers in turn, each
//! chunk starting with the next server, so that what else a shared machine does falls on every
//! server alike. Printed are calls per second, the server's CPU time per call (user + system, from
//! `/proc/PID/stat`) and the client's (this process's), and each figure against rmcp's in the same
//! round; the OAuth row also against the static token's. `ROUNDS` (3) rounds, then the medians of
//! the rounds.
//!
//! `cargo bench -p toolgate-benches --bench mcp_http`; `SERVER_WRAPPER="valgrind --tool=callgrind"` runs
//! each server under a profiler (it exits, and writes its profile, when the bench is done with it).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::{Signer as _, SigningKey};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rmcp::model::{CallToolRequestParams, ContentBlock, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::json;
use tokio::io::AsyncBufReadExt;
use toolgate::audit::{Durability, JsonlSink};
use toolgate::mcp::ToolgateServer;
use toolgate::mcp::http::{HttpService, Principals};
use toolgate::mcp::oauth::{Algorithm, Jwks, OAuth};
use toolgate::{Gate, Mode};
use toolgate_benches::mcp::{Gated, Plain, cpu_time, server_command};

const ROLE: &str = "TOOLGATE_BENCH_MCP_ROLE";
const LOG: &str = "TOOLGATE_BENCH_MCP_LOG";
const JWKS: &str = "TOOLGATE_BENCH_MCP_JWKS";

/// The static bearer token of the principal `bench`.
const TOKEN: &str = "bench-static-token-0123456789abcdef";
/// The OAuth issuer, and the scope that maps a token's subject to the principal `bench:<sub>`.
const ISSUER: &str = "https://auth.bench.test";
const SCOPE: &str = "tools:call";
/// The seed of the throwaway Ed25519 key that signs the bench's access token.
const SEED: [u8; 32] = *b"toolgate mcp_http bench test key";

const WARMUP: u64 = 1_000;
const WARMUP_EACH: u64 = 100;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Server {
    Rmcp,
    Toolgate,
    ToolgateAudit,
    ToolgateOAuth,
}

impl Server {
    const ALL: [Server; 4] = [
        Server::Rmcp,
        Server::Toolgate,
        Server::ToolgateAudit,
        Server::ToolgateOAuth,
    ];

    fn role(self) -> &'static str {
        match self {
            Server::Rmcp => "rmcp",
            Server::Toolgate => "toolgate",
            Server::ToolgateAudit => "toolgate_audit",
            Server::ToolgateOAuth => "toolgate_oauth",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Server::Rmcp => "rmcp, no auth",
            Server::Toolgate => "toolgate, bearer token",
            Server::ToolgateAudit => "toolgate, bearer, JSONL audit",
            Server::ToolgateOAuth => "toolgate, OAuth JWT (cached)",
        }
    }
}

/// One server's figures in one round: one client, then `CLIENTS` at once.
#[derive(Clone, Copy)]
struct Figures {
    sequential: Phase,
    concurrent: Phase,
}

#[derive(Clone, Copy)]
struct Phase {
    /// Calls per second.
    rate: f64,
    /// The server's CPU time per call, in µs.
    server_us: f64,
    /// The client's (this process's) CPU time per call, in µs.
    client_us: f64,
}

/// What a server's chunks of calls took, added up.
#[derive(Clone, Copy, Default)]
struct Totals {
    calls: u64,
    elapsed: Duration,
    server: Duration,
    client: Duration,
}

impl Totals {
    fn phase(&self) -> Phase {
        let per_call = |cpu: Duration| cpu.as_secs_f64() * 1e6 / self.calls as f64;
        Phase {
            rate: self.calls as f64 / self.elapsed.as_secs_f64(),
            server_us: per_call(self.server),
            client_us: per_call(self.client),
        }
    }
}

/// The two ways the servers are called.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Clients {
    /// One client, one call after another.
    One,
    /// Every client at once, each one call after another.
    All,
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    if let Ok(role) = std::env::var(ROLE) {
        runtime.block_on(serve(&role));
        return;
    }
    let number = |name: &str, default: u64| {
        std::env::var(name).map_or(default, |v| v.parse().expect("a number"))
    };
    let calls = number("CALLS", 20_000);
    let clients = number("CLIENTS", 8).max(1);
    let rounds = number("ROUNDS", 3).max(1);
    let chunks = number("CHUNKS", 20).clamp(1, calls.max(1));
    let protocol = match std::env::var("PROTOCOL").as_deref() {
        Err(_) | Ok("2026-07-28") => ProtocolVersion::V_2026_07_28,
        Ok("2025-11-25") => ProtocolVersion::V_2025_11_25,
        Ok(other) => panic!("PROTOCOL is 2026-07-28 or 2025-11-25, not {other}"),
    };
    // The audit log: in the target's temporary directory, or in `LOG_DIR` (e.g. a tmpfs, to take the
    // disk out).
    let log = std::env::var_os("LOG_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from)
        .join("mcp-http-bench.jsonl");
    let key = SigningKey::from_bytes(&SEED);
    println!(
        "MCP tools/call over streamable HTTP on loopback, rmcp's client, protocol {protocol}; \
         {calls} calls by 1 client, then {calls} by {clients} clients at once, in {chunks} chunks \
         that take the servers in turn; {rounds} rounds"
    );
    let mut rounds_figures: Vec<[Figures; 4]> = Vec::new();
    for round in 0..rounds {
        let figures =
            runtime.block_on(measure_round(&log, &key, &protocol, calls, clients, chunks));
        println!("\nround {}", round + 1);
        print_round(&figures, clients);
        rounds_figures.push(figures);
    }
    let _ = std::fs::remove_file(&log);
    print_medians(&rounds_figures, clients);
}

fn index(server: Server) -> usize {
    Server::ALL
        .iter()
        .position(|s| *s == server)
        .expect("a server")
}

fn print_header(what: &str) {
    println!(
        "{what:<34} {:>9} {:>8} {:>12} {:>8} {:>12}",
        "calls/s", "vs rmcp", "server µs", "vs rmcp", "client µs"
    );
}

type Pick = fn(&Figures) -> Phase;

fn phases(clients: u64) -> [(String, Pick); 2] {
    [
        ("1 client".to_owned(), |f: &Figures| f.sequential),
        (format!("{clients} clients"), |f: &Figures| f.concurrent),
    ]
}

fn print_round(figures: &[Figures; 4], clients: u64) {
    for (what, phase) in phases(clients) {
        print_header(&what);
        let base = phase(&figures[0]);
        for server in Server::ALL {
            let p = phase(&figures[index(server)]);
            println!(
                "  {:<32} {:>9.0} {:>7.2}x {:>12.1} {:>7.2}x {:>12.1}",
                server.label(),
                p.rate,
                p.rate / base.rate,
                p.server_us,
                p.server_us / base.server_us,
                p.client_us
            );
        }
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Medians over the rounds: of each figure, and of each round's ratio against rmcp's (and, for the
/// OAuth row, against the static token's) in the same round.
fn print_medians(rounds: &[[Figures; 4]], clients: u64) {
    println!(
        "\nmedians of {} rounds (ratios: the median of each round's)",
        rounds.len()
    );
    for (what, phase) in phases(clients) {
        print_header(&what);
        let of = |i: usize, f: fn(&Phase) -> f64| {
            median(rounds.iter().map(|r| f(&phase(&r[i]))).collect())
        };
        let ratio = |i: usize, against: usize, f: fn(&Phase) -> f64| {
            median(
                rounds
                    .iter()
                    .map(|r| f(&phase(&r[i])) / f(&phase(&r[against])))
                    .collect(),
            )
        };
        for server in Server::ALL {
            let i = index(server);
            println!(
                "  {:<32} {:>9.0} {:>7.2}x {:>12.1} {:>7.2}x {:>12.1}",
                server.label(),
                of(i, |p| p.rate),
                ratio(i, 0, |p| p.rate),
                of(i, |p| p.server_us),
                ratio(i, 0, |p| p.server_us),
                of(i, |p| p.client_us)
            );
        }
        let (oauth, bearer) = (index(Server::ToolgateOAuth), index(Server::Toolgate));
        let extra = median(
            rounds
                .iter()
                .map(|r| phase(&r[oauth]).server_us - phase(&r[bearer]).server_us)
                .collect(),
        );
        println!(
            "  OAuth against the static token: calls/s {:.2}x, server CPU {:.2}x ({extra:+.1} µs/call)",
            ratio(oauth, bearer, |p| p.rate),
            ratio(oauth, bearer, |p| p.server_us),
        );
    }
}

/// A server in its child process, and its clients.
struct Running {
    child: tokio::process::Child,
    pid: u32,
    clients: Vec<Arc<RunningService<RoleClient, ()>>>,
}

/// One round: every server started and warmed up, then each called `calls` times by one client and
/// `calls` times by all its clients, in `chunks` chunks that take the servers in turn (the first
/// server of each chunk the next one), so that what else the machine does falls on every server
/// alike.
async fn measure_round(
    log: &Path,
    key: &SigningKey,
    protocol: &ProtocolVersion,
    calls: u64,
    clients: u64,
    chunks: u64,
) -> [Figures; 4] {
    let _ = std::fs::remove_file(log);
    let mut running = Vec::new();
    for server in Server::ALL {
        running.push(start(server, log, key, protocol, clients).await);
    }
    let mut figures = [None; 4];
    let mut totals = [[Totals::default(); 4]; 2];
    for (phase, how) in [Clients::One, Clients::All].into_iter().enumerate() {
        for chunk in 0..chunks {
            let share = calls / chunks + u64::from(chunk < calls % chunks);
            for turn in 0..Server::ALL.len() {
                let i = (turn + chunk as usize) % Server::ALL.len();
                let taken = timed(running[i].pid, run(&running[i].clients, how, share)).await;
                let total = &mut totals[phase][i];
                total.calls += share;
                total.elapsed += taken.elapsed;
                total.server += taken.server;
                total.client += taken.client;
            }
        }
    }
    for (i, server) in running.into_iter().enumerate() {
        stop(server).await;
        figures[i] = Some(Figures {
            sequential: totals[0][i].phase(),
            concurrent: totals[1][i].phase(),
        });
    }
    let report = toolgate::audit::verify_file(log).expect("the log reads");
    assert!(report.is_intact(), "{report}");
    let made = 2 * calls + WARMUP + clients * WARMUP_EACH;
    assert!(report.records >= 2 * made, "every call left its records");
    figures.map(|f| f.expect("every server measured"))
}

/// `calls` calls by the first client, or shared by all of them at once.
async fn run(clients: &[Arc<RunningService<RoleClient, ()>>], how: Clients, calls: u64) {
    match how {
        Clients::One => {
            for n in 0..calls {
                call(&clients[0], n).await;
            }
        }
        Clients::All => {
            let count = clients.len() as u64;
            let tasks: Vec<_> = clients
                .iter()
                .enumerate()
                .map(|(i, client)| {
                    let client = Arc::clone(client);
                    let share = calls / count + u64::from((i as u64) < calls % count);
                    tokio::spawn(async move {
                        for n in 0..share {
                            call(&client, n).await;
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("a client");
            }
        }
    }
}

/// Starts `server` in a child process, connects its clients and warms them up.
async fn start(
    server: Server,
    log: &Path,
    key: &SigningKey,
    protocol: &ProtocolVersion,
    clients: u64,
) -> Running {
    let mut child = server_command()
        .env(ROLE, server.role())
        .env(LOG, log)
        .env(JWKS, jwks(key))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the server starts");
    let pid = child.id().expect("the server's pid");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("its stdout")).lines();
    let url = lines
        .next_line()
        .await
        .expect("the server's address")
        .expect("the server printed its address");
    let token = match server {
        Server::ToolgateOAuth => access_token(key, &url),
        _ => TOKEN.to_owned(),
    };
    let mut connected = Vec::new();
    for _ in 0..clients {
        connected.push(Arc::new(connect(&url, &token, protocol).await));
    }
    for n in 0..WARMUP {
        check(&call(&connected[0], n).await, n);
    }
    let warm: Vec<_> = connected
        .iter()
        .map(|client| {
            let client = Arc::clone(client);
            tokio::spawn(async move {
                for n in 0..WARMUP_EACH {
                    check(&call(&client, n).await, n);
                }
            })
        })
        .collect();
    for task in warm {
        task.await.expect("a warm-up client");
    }
    Running {
        child,
        pid,
        clients: connected,
    }
}

async fn stop(mut running: Running) {
    for client in running.clients {
        let client = Arc::into_inner(client).expect("the client's last handle");
        client.cancel().await.expect("the client stops");
    }
    // The server exits when its stdin closes (a profiler around it then writes its profile).
    drop(running.child.stdin.take());
    running.child.wait().await.expect("the server stops");
}

/// What a run of calls took: wall time, and the CPU time of the server and of this process.
struct Taken {
    elapsed: Duration,
    server: Duration,
    client: Duration,
}

async fn timed(pid: u32, run: impl Future<Output = ()>) -> Taken {
    let (server_before, client_before) = (cpu_time(pid), cpu_time(std::process::id()));
    let started = Instant::now();
    run.await;
    let elapsed = started.elapsed();
    Taken {
        elapsed,
        server: cpu_time(pid).saturating_sub(server_before),
        client: cpu_time(std::process::id()).saturating_sub(client_before),
    }
}

/// A client of `url`, its token in every request's `Authorization` header, speaking `protocol`.
async fn connect(
    url: &str,
    token: &str,
    protocol: &ProtocolVersion,
) -> RunningService<RoleClient, ()> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config);
    let client = if protocol.has_initialize() {
        ().serve(transport).await.expect("the client connects")
    } else {
        ().serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![protocol.clone()],
            },
        )
        .await
        .expect("the client connects")
    };
    let answered = client
        .peer_info()
        .expect("the server's info")
        .protocol_version
        .clone();
    assert_eq!(
        &answered, protocol,
        "the server speaks the client's protocol"
    );
    client
}

async fn call(client: &RunningService<RoleClient, ()>, n: u64) -> rmcp::model::CallToolResult {
    let mut arguments = serde_json::Map::new();
    arguments.insert("a".to_owned(), json!(n as i64));
    arguments.insert("b".to_owned(), json!(40));
    client
        .call_tool(CallToolRequestParams::new("sum").with_arguments(arguments))
        .await
        .expect("a call")
}

/// The call numbered `n` answered `n + 40`.
fn check(result: &rmcp::model::CallToolResult, n: u64) {
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let text = match result.content.first() {
        Some(ContentBlock::Text(text)) => text.text.as_str(),
        _ => panic!("a text result: {result:?}"),
    };
    assert_eq!(text, (n + 40).to_string(), "{result:?}");
}

/// The JWK set of `key`'s public half.
fn jwks(key: &SigningKey) -> String {
    let x = URL_SAFE_NO_PAD.encode(key.verifying_key().to_bytes());
    json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "use": "sig", "kid": "bench", "x": x}]})
        .to_string()
}

/// An access token for the resource `url`, signed with `key` (EdDSA), valid for an hour.
fn access_token(key: &SigningKey, url: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs();
    let header = json!({"alg": "EdDSA", "typ": "JWT", "kid": "bench"});
    let claims = json!({"iss": ISSUER, "aud": url, "sub": "bench", "scope": SCOPE,
        "iat": now, "exp": now + 3600});
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = URL_SAFE_NO_PAD.encode(key.sign(signed.as_bytes()).to_bytes());
    format!("{signed}.{signature}")
}

/// The principal's gate: SHADOW (the READ_ONLY `add` runs), with the JSONL audit if asked.
fn gate(audit: bool) -> Gate {
    let mut gate = Gate::builder().mode(Mode::Shadow).principal("bench");
    if audit {
        let log = std::env::var(LOG).expect("the log's path");
        let sink = JsonlSink::builder(log)
            .durability(Durability::Flush)
            .open()
            .expect("the log opens");
        gate = gate.audit(sink);
    }
    gate.build().expect("a gate")
}

/// Prints `url`, then serves `service` on every connection `listener` accepts, with hyper (HTTP/1.1
/// or HTTP/2, as `examples/mcp_http.rs`), `TCP_NODELAY` set as on the client's side.
macro_rules! run {
    ($listener:expr, $url:expr, $service:expr) => {{
        use std::io::Write as _;
        let (listener, service) = ($listener, $service);
        let mut stdout = std::io::stdout();
        writeln!(stdout, "{}", $url).expect("stdout");
        stdout.flush().expect("stdout");
        loop {
            let (stream, _) = listener.accept().await.expect("a connection");
            stream.set_nodelay(true).expect("TCP_NODELAY");
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }};
}

/// The server of `role`: listens on a port of loopback, prints its endpoint's URL on stdout, serves.
async fn serve(role: &str) {
    // The bench closes the server's stdin when it is done with it.
    tokio::spawn(async {
        let mut stdin = tokio::io::stdin();
        let _ = tokio::io::copy(&mut stdin, &mut tokio::io::sink()).await;
        std::process::exit(0);
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}/mcp", listener.local_addr().expect("its address"));
    let config = StreamableHttpServerConfig::default();
    let toolgate =
        || ToolgateServer::new(Gate::new(Mode::Shadow).expect("a gate")).handler(Gated::new());
    match role {
        "rmcp" => {
            let handler = Plain::new();
            let service = StreamableHttpService::new(
                move || Ok(handler.clone()),
                Arc::new(LocalSessionManager::default()),
                config,
            );
            run!(listener, &url, service)
        }
        "toolgate" | "toolgate_audit" => {
            let principals =
                Principals::new().bearer(TOKEN, "bench", gate(role == "toolgate_audit"));
            run!(
                listener,
                &url,
                HttpService::new(toolgate(), principals, config)
            )
        }
        "toolgate_oauth" => {
            let jwks = std::env::var(JWKS).expect("the JWKS");
            let oauth = OAuth::builder(url.clone())
                .authorization_server(ISSUER)
                .jwks(Jwks::json(jwks))
                .algorithms([Algorithm::EdDSA])
                .scope(SCOPE, "bench", gate(false))
                .build()
                .await
                .expect("the verifier");
            let principals = Principals::new().verifier(oauth);
            run!(
                listener,
                &url,
                HttpService::new(toolgate(), principals, config)
            )
        }
        other => panic!("no server role {other}"),
    }
}
