//! Time per call of a trivial sync tool through the gate (no audit sink), against a direct call of the
//! same body without `#[tool]`; a refused call; an async call. `cargo bench -p toolgate-benches --bench
//! gate`. The instruction counts of the same calls come from `benches/callgrind.sh`.

use std::hint::black_box;

use divan::Bencher;
use toolgate_benches::gate_tools::{add, add_async, add_async_direct, add_direct, delete, gate};
use toolgate_benches::ready;

fn main() {
    divan::main();
}

/// The body without `#[tool]`.
#[divan::bench]
fn direct(bencher: Bencher) {
    bencher.bench_local(|| add_direct(black_box(40), black_box(2)));
}

/// `#[tool]`, allowed, inside one `gate.run` around all the calls.
#[divan::bench]
fn allowed(bencher: Bencher) {
    gate().run(|| bencher.bench_local(|| add(black_box(40), black_box(2))));
}

/// `#[tool]`, refused (`MODE_NOT_ALLOWED`), inside one `gate.run`.
#[divan::bench]
fn refused(bencher: Bencher) {
    gate().run(|| bencher.bench_local(|| delete(black_box(40), black_box(2))));
}

/// `gate.run` around each allowed call.
#[divan::bench]
fn allowed_run_each(bencher: Bencher) {
    let gate = gate();
    bencher.bench_local(|| gate.run(|| add(black_box(40), black_box(2))));
}

/// An `async fn` without `#[tool]`, polled once.
#[divan::bench]
fn async_direct(bencher: Bencher) {
    bencher.bench_local(|| ready(add_async_direct(black_box(40), black_box(2))));
}

/// An `async fn` tool, polled once inside the gate (as inside a `gate.scope` around the whole task).
#[divan::bench]
fn async_allowed(bencher: Bencher) {
    gate().run(|| bencher.bench_local(|| ready(add_async(black_box(40), black_box(2)))));
}

/// An `async fn` tool in a `gate.scope` of its own, polled once.
#[divan::bench]
fn async_scope_each(bencher: Bencher) {
    let gate = gate();
    bencher.bench_local(|| ready(gate.scope(add_async(black_box(40), black_box(2)))));
}
