//! Time per call by name of `add` with `{"a":2,"b":40}`, the result serialized to a JSON string: the
//! serde floor, toolgate (without and with the JSONL audit sink) and rmcp's `call_tool` (router kept in a
//! field, and rebuilt per call). `cargo bench -p toolgate-benches --bench by_name`. The instruction
//! counts of the same calls come from `benches/callgrind.sh`.

use std::hint::black_box;
use std::path::Path;

use divan::Bencher;
use toolgate_benches::by_name::CallByName;

fn main() {
    divan::main();
}

fn bench(
    bencher: Bencher,
    call: fn(&CallByName, &serde_json::Map<String, serde_json::Value>) -> String,
) {
    let bench = CallByName::new(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .expect("set up the call-by-name benchmark");
    let _runtime = bench.enter();
    let args = bench.args.clone();
    bencher.bench_local(|| call(&bench, black_box(&args)));
}

/// Clone the arguments, `serde_json::from_value`, call, `to_string`.
#[divan::bench]
fn serde_floor(bencher: Bencher) {
    bench(bencher, CallByName::floor);
}

/// `toolgate::registry().call(&gate, "add", args)`, no audit sink.
#[divan::bench]
fn toolgate(bencher: Bencher) {
    bench(bencher, CallByName::toolgate);
}

/// The same with the hash-chained JSONL audit sink (default durability): two records per call.
#[divan::bench]
fn toolgate_jsonl_audit(bencher: Bencher) {
    bench(bencher, CallByName::toolgate_audited);
}

/// rmcp `ServerHandler::call_tool`, `#[tool_handler(router = self.tool_router)]`: rmcp's best case.
#[divan::bench]
fn rmcp_stored_router(bencher: Bencher) {
    bench(bencher, CallByName::rmcp_stored);
}

/// rmcp `ServerHandler::call_tool`, bare `#[tool_handler]`: the router is rebuilt on every call.
#[divan::bench]
fn rmcp_rebuilt_router(bencher: Bencher) {
    bench(bencher, CallByName::rmcp_rebuilt);
}
