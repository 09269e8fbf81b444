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
//! Each server is called `CALLS` times (20,000) one after another by one client, after 1,000 calls of
//! warm-up; printed are calls per second and the server's CPU time per call (user + system, from
//! `/proc/PID/stat`), and each figure against rmcp's.
//!
//! `cargo bench -p toolgate-benches --bench mcp`; `SERVER_WRAPPER="valgrind --tool=callgrind"` runs each
//! server under a profiler (it exits, and writes its profile, when its client closes its stdin).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{ServiceExt, transport::stdio};
use serde_json::json;
use toolgate::audit::JsonlSink;
use toolgate::mcp::ToolgateServer;
use toolgate::{Gate, Mode};
use toolgate_benches::by_name::StoredRouter;
use toolgate_benches::mcp::{Gated, cpu_time, server_command};

const ROLE: &str = "TOOLGATE_BENCH_MCP_ROLE";
const LOG: &str = "TOOLGATE_BENCH_MCP_LOG";

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
    let calls: u64 = std::env::var("CALLS").map_or(20_000, |v| v.parse().expect("a number"));
    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-bench.jsonl");
    println!("MCP tools/call over stdio, rmcp's client, {calls} calls one after another");
    println!(
        "{:<34} {:>10} {:>8} {:>18} {:>8}",
        "server", "calls/s", "vs rmcp", "server CPU µs/call", "vs rmcp"
    );
    let mut baseline = None;
    for (role, label) in [
        ("rmcp", "rmcp, no audit"),
        ("toolgate_audit", "toolgate, JSONL audit (Flush)"),
        ("toolgate", "toolgate, no audit"),
        ("inplace_audit", "rmcp handler gated, JSONL audit"),
        ("inplace", "rmcp handler gated, no audit"),
    ] {
        let _ = std::fs::remove_file(&log);
        let (rate, cpu) = runtime.block_on(measure(role, &log, calls));
        let (base_rate, base_cpu) = *baseline.get_or_insert((rate, cpu));
        println!(
            "{label:<34} {rate:>10.0} {:>7.2}x {:>18.1} {:>7.2}x",
            rate / base_rate,
            cpu.as_secs_f64() * 1e6 / calls as f64,
            cpu.as_secs_f64() / base_cpu.as_secs_f64()
        );
        if role.ends_with("_audit") {
            let report = toolgate::audit::verify_file(&log).expect("the log reads");
            assert!(report.is_intact(), "{report}");
            assert!(report.records >= 2 * calls, "every call left its records");
        }
    }
    let _ = std::fs::remove_file(&log);
}

/// Calls a server in a child process; calls per second, and the server's CPU time over the measured
/// calls.
async fn measure(role: &str, log: &std::path::Path, calls: u64) -> (f64, Duration) {
    let transport = TokioChildProcess::new(server_command().configure(|cmd| {
        cmd.env(ROLE, role).env(LOG, log);
    }))
    .expect("the server starts");
    let pid = transport.id().expect("the server's pid");
    let client = ().serve(transport).await.expect("the client connects");
    // The handler gated in place names its tool `sum`: toolgate's `callable` `add` has the id `add`.
    let name = if role.starts_with("inplace") {
        "sum"
    } else {
        "add"
    };
    let call = |n: u64| {
        let arguments = json!({"a": n as i64, "b": 40});
        let serde_json::Value::Object(arguments) = arguments else {
            unreachable!("an object")
        };
        CallToolRequestParams::new(name).with_arguments(arguments)
    };
    for n in 0..1_000 {
        let result = client.call_tool(call(n)).await.expect("a call");
        assert_ne!(result.is_error, Some(true), "{result:?}");
    }
    let cpu_before = cpu_time(pid);
    let started = Instant::now();
    for n in 0..calls {
        client.call_tool(call(n)).await.expect("a call");
    }
    let took = started.elapsed();
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    client.cancel().await.expect("the client stops");
    (calls as f64 / took.as_secs_f64(), cpu)
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
            let server = server.serve(stdio()).await.expect("served");
            let _ = server.waiting().await;
        }
    }
}
