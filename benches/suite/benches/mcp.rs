//! The audit's cost where users feel it: MCP `tools/call` over stdio, end to end, with rmcp's own client
//! driving a server in a child process (this binary, run again in a server role):
//!
//! - rmcp's server (`#[tool_router]`, its router kept in a field) with no audit: the baseline;
//! - toolgate's `ToolgateServer`, its gate writing an `enter` and an `exit` record of every call to the
//!   hash-chained JSONL log (`Durability::Flush`: each record reaches the OS before the body runs);
//! - the same without audit, for reference;
//! - an rmcp `#[tool_router]` handler gated in place (`#[toolgate::toolset]`, `#[toolgate(..)]` beside
//!   `#[tool]`; `toolgate_benches::mcp::Gated`, its tool `sum`) served by `ToolgateServer::handler`,
//!   with the JSONL audit and without.
//!
//! Every server runs at once, idle but for its turn. Each is called `CALLS` times (20,000) one after
//! another by its client, after 1,000 calls of warm-up, in `CHUNKS` (20) chunks that take the servers
//! in turn, each chunk starting with the next server, so that what else a shared machine does falls on
//! every server alike; printed are calls per second and the server's CPU time per call (user +
//! system, from `/proc/PID/stat`), each figure against rmcp's, and the median over the chunks of a
//! chunk's calls per second against rmcp's in the same chunk (`CHUNKS=100` for more of them).
//!
//! The logs are written to the target's temporary directory, or to `LOG_DIR`.
//!
//! `cargo bench -p toolgate-benches --bench mcp`; `SERVER_WRAPPER="valgrind --tool=callgrind"` runs each
//! server under a profiler (it exits, and writes its profile, when its client closes its stdin).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt, transport::stdio};
use serde_json::json;
use toolgate::audit::JsonlSink;
use toolgate::mcp::ToolgateServer;
use toolgate::{Gate, Mode};
use toolgate_benches::by_name::StoredRouter;
use toolgate_benches::mcp::{Gated, cpu_time, server_command};

const ROLE: &str = "TOOLGATE_BENCH_MCP_ROLE";
const LOG: &str = "TOOLGATE_BENCH_MCP_LOG";

const SERVERS: [(&str, &str); 5] = [
    ("rmcp", "rmcp, no audit"),
    ("toolgate_audit", "toolgate, JSONL audit (Flush)"),
    ("toolgate", "toolgate, no audit"),
    ("inplace_audit", "rmcp handler gated, JSONL audit"),
    ("inplace", "rmcp handler gated, no audit"),
];

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
    let number = |name: &str, default: u64| -> u64 {
        std::env::var(name).map_or(default, |v| v.parse().expect("a number"))
    };
    let calls = number("CALLS", 20_000);
    let chunks = number("CHUNKS", 20).clamp(1, calls.max(1));
    let dir = log_dir();
    let log = |role: &str| dir.join(format!("mcp-bench-{role}.jsonl"));
    println!(
        "MCP tools/call over stdio, rmcp's client, {calls} calls one after another, in {chunks} chunks \
         that take the servers in turn"
    );
    println!(
        "{:<34} {:>10} {:>8} {:>18} {:>8} {:>14}",
        "server", "calls/s", "vs rmcp", "server CPU µs/call", "vs rmcp", "chunks: median"
    );
    let measured = runtime.block_on(async {
        let mut running = Vec::new();
        for (role, _) in SERVERS {
            let _ = std::fs::remove_file(log(role));
            running.push(Running::start(role, &log(role)).await);
        }
        let mut totals = [(Duration::ZERO, Duration::ZERO); SERVERS.len()];
        let mut per_chunk = vec![[Duration::ZERO; SERVERS.len()]; chunks as usize];
        for chunk in 0..chunks {
            let share = calls / chunks + u64::from(chunk < calls % chunks);
            for turn in 0..SERVERS.len() {
                let i = (turn + chunk as usize) % SERVERS.len();
                let (took, cpu) = running[i].calls(share).await;
                totals[i].0 += took;
                totals[i].1 += cpu;
                per_chunk[chunk as usize][i] = took;
            }
        }
        for server in running {
            server.client.cancel().await.expect("the client stops");
        }
        (totals, per_chunk)
    });
    let (measured, per_chunk) = measured;
    let (base_took, base_cpu) = measured[0];
    for (i, ((role, label), (took, cpu))) in SERVERS.into_iter().zip(measured).enumerate() {
        let rate = calls as f64 / took.as_secs_f64();
        // Each chunk against rmcp's chunk of the same round, next to it in time: the median of these
        // moves less with a burst of other work on the machine than the totals do.
        let mut ratios: Vec<f64> = per_chunk
            .iter()
            .map(|chunk| chunk[0].as_secs_f64() / chunk[i].as_secs_f64())
            .collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "{label:<34} {rate:>10.0} {:>7.2}x {:>18.1} {:>7.2}x {:>13.2}x",
            base_took.as_secs_f64() / took.as_secs_f64(),
            cpu.as_secs_f64() * 1e6 / calls as f64,
            cpu.as_secs_f64() / base_cpu.as_secs_f64(),
            ratios[ratios.len() / 2]
        );
        if role.ends_with("_audit") {
            let report = toolgate::audit::verify_file(log(role)).expect("the log reads");
            assert!(report.is_intact(), "{report}");
            assert!(report.records >= 2 * calls, "every call left its records");
        }
        let _ = std::fs::remove_file(log(role));
    }
}

/// Where the audit logs go: `LOG_DIR` (e.g. a tmpfs, to take the disk out), else the target's
/// temporary directory.
fn log_dir() -> PathBuf {
    std::env::var_os("LOG_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from)
}

/// A server in a child process and its client.
struct Running {
    client: RunningService<RoleClient, ()>,
    pid: u32,
    /// The tool's name.
    name: &'static str,
}

impl Running {
    /// Starts the server of `role` and warms it up with 1,000 calls.
    async fn start(role: &str, log: &std::path::Path) -> Running {
        let transport = TokioChildProcess::new(server_command().configure(|cmd| {
            cmd.env(ROLE, role).env(LOG, log);
        }))
        .expect("the server starts");
        let pid = transport.id().expect("the server's pid");
        let client = ().serve(transport).await.expect("the client connects");
        // The handler gated in place names its tool `sum`: toolgate's `callable` `add` has the id
        // `add`.
        let name = if role.starts_with("inplace") {
            "sum"
        } else {
            "add"
        };
        let running = Running { client, pid, name };
        for n in 0..1_000 {
            let result = running
                .client
                .call_tool(running.call(n))
                .await
                .expect("a call");
            assert_ne!(result.is_error, Some(true), "{result:?}");
        }
        running
    }

    fn call(&self, n: u64) -> CallToolRequestParams {
        let arguments = json!({"a": n as i64, "b": 40});
        let serde_json::Value::Object(arguments) = arguments else {
            unreachable!("an object")
        };
        CallToolRequestParams::new(self.name).with_arguments(arguments)
    }

    /// Makes `calls` calls one after another; how long they took, and the server's CPU time.
    async fn calls(&self, calls: u64) -> (Duration, Duration) {
        let cpu_before = cpu_time(self.pid);
        let started = Instant::now();
        for n in 0..calls {
            self.client.call_tool(self.call(n)).await.expect("a call");
        }
        let took = started.elapsed();
        (took, cpu_time(self.pid).saturating_sub(cpu_before))
    }
}

async fn serve(role: &str) {
    match role {
        "rmcp" => {
            let server = StoredRouter::new().serve(stdio()).await.expect("served");
            let _ = server.waiting().await;
        }
        _ => {
            let mut gate = Gate::builder().mode(Mode::Shadow);
            if role.ends_with("_audit") {
                let log = std::env::var(LOG).expect("the log's path");
                gate = gate.audit(JsonlSink::open(log).expect("the log opens"));
            }
            let gate = gate.build().expect("a gate");
            let server = ToolgateServer::new(gate);
            let server = if role.starts_with("inplace") {
                server.handler(Gated::new())
            } else {
                server
            };
            // Each server on its own crate's transport, as its users serve it.
            let server = server
                .serve(toolgate::mcp::stdio::stdio())
                .await
                .expect("served");
            let _ = server.waiting().await;
        }
    }
}
