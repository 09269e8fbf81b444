#!/usr/bin/env bash
# The registry at scale: generated crates of 10, 1,000 and 10,000 tools; the time to build the index at
# start (the first `toolgate::registry()` call) and the time of a lookup (`registry().get(id)`) at each
# size, plus their instruction counts under callgrind.
#
#   benches/registry-scale.sh            RUNS=11 processes per size for the times (median)
#
# The crates are generated into target/bench-registry/ (with their own target folder) and built with the
# release profile; nothing generated is committed. SIZES="10 1000 10000" and RUNS can be set in the
# environment; CALLGRIND=0 skips the instruction counts.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

sizes=(${SIZES:-10 1000 10000})
runs="${RUNS:-11}"
dir="$repo/target/bench-registry"
mkdir -p "$dir"

# One crate per size; ids `gen.tool_00000` ..., all of the same length, so a lookup hashes as many bytes
# at every size.
generate() {
  local n=$1 crate="$dir/tools_$1" per_module=500
  mkdir -p "$crate/src"
  cat > "$crate/Cargo.toml" <<EOF
[package]
name = "tools_$n"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
toolgate.workspace = true
EOF
  local modules=$(((n + per_module - 1) / per_module)) m i
  for ((m = 0; m < modules; m++)); do
    {
      echo "use toolgate::{Denied, tool};"
      for ((i = m * per_module; i < n && i < (m + 1) * per_module; i++)); do
        printf '\n/// Tool %d.\n#[tool(risk = "READ_ONLY", domain = "gen")]\n' "$i"
        printf 'pub fn tool_%05d(a: u64) -> Result<u64, Denied> {\n    Ok(a + %d)\n}\n' "$i" "$i"
      done
    } > "$crate/src/tools_$m.rs.new"
    # Rewritten only when it changes, so that cargo does not rebuild an unchanged crate.
    if cmp -s "$crate/src/tools_$m.rs.new" "$crate/src/tools_$m.rs"; then
      rm "$crate/src/tools_$m.rs.new"
    else
      mv "$crate/src/tools_$m.rs.new" "$crate/src/tools_$m.rs"
    fi
  done
  {
    printf '//! %d generated tools.\n#![allow(dead_code)]\n\n' "$n"
    for ((m = 0; m < modules; m++)); do echo "mod tools_$m;"; done
    cat <<EOF

use std::hint::black_box;
use std::time::Instant;

const TOOLS: usize = $n;

/// Ten ids spread over the registry, looked up in turn.
fn ids() -> Vec<String> {
    (0..10).map(|k| format!("gen.tool_{:05}", k * TOOLS / 10 + TOOLS / 20)).collect()
}

fn lookups(registry: &toolgate::Registry, ids: &[String], n: usize) {
    for i in 0..n {
        black_box(registry.get(black_box(ids[i % ids.len()].as_str())));
    }
}

/// \`time\`: nanoseconds to index, to build a gate, and per lookup.
/// \`index 0|1\`: build the index or not (for callgrind).
/// \`lookup N\`: build the index, then N lookups (for callgrind).
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("0");
    let ids = ids();
    match arg(0) {
        "time" => {
            let start = Instant::now();
            let registry = toolgate::registry();
            let index = start.elapsed();
            assert_eq!(registry.len(), TOOLS);
            for id in &ids {
                assert!(registry.get(id).is_some(), "{id}");
            }
            let start = Instant::now();
            let gate = toolgate::Gate::new(toolgate::Mode::Shadow).expect("distinct ids");
            let gate_build = start.elapsed();
            black_box(gate);
            let n = 2_000_000;
            lookups(registry, &ids, n / 10);
            let start = Instant::now();
            lookups(registry, &ids, n);
            let lookup = start.elapsed().as_nanos() as f64 / n as f64;
            println!("{} {} {:.2}", index.as_nanos(), gate_build.as_nanos(), lookup);
        }
        "index" => {
            if arg(1) == "1" {
                black_box(toolgate::registry());
            }
        }
        "lookup" => {
            let registry = toolgate::registry();
            lookups(registry, &ids, arg(1).parse().expect("a count"));
        }
        other => panic!("unknown mode {other}"),
    }
}
EOF
  } > "$crate/src/main.rs.new"
  if cmp -s "$crate/src/main.rs.new" "$crate/src/main.rs"; then
    rm "$crate/src/main.rs.new"
  else
    mv "$crate/src/main.rs.new" "$crate/src/main.rs"
  fi
}

members=""
for n in "${sizes[@]}"; do
  generate "$n"
  members="$members\"tools_$n\", "
done
cat > "$dir/Cargo.toml" <<EOF
[workspace]
members = [${members%, }]
resolver = "3"

[workspace.dependencies]
toolgate = { path = "$repo" }

[profile.release]
debug = false
EOF
[ -f "$dir/Cargo.lock" ] || cp "$repo/Cargo.lock" "$dir/Cargo.lock"

echo "building ${sizes[*]} tools (release) in $dir ..." >&2
build_start=$EPOCHREALTIME
cargo build --quiet --release --manifest-path "$dir/Cargo.toml" --workspace
awk -v a="$build_start" -v b="$EPOCHREALTIME" 'BEGIN { printf "built in %.0f s\n", b - a }' >&2

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# Instructions of a run, under callgrind.
instructions() {
  local file="$dir/callgrind.out"
  valgrind --tool=callgrind --callgrind-out-file="$file" "$@" > /dev/null 2>&1
  awk '/^(summary|totals):/ { print $2; exit }' "$file"
}

echo
echo "registry at scale: $runs processes per size, median; lookups cycle over 10 ids spread over the registry"
echo
echo "| tools | index at start (first registry() call) | Gate::new | lookup | index, instructions | lookup, instructions |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
for n in "${sizes[@]}"; do
  exe="$dir/target/release/tools_$n"
  index=() gate=() lookup=()
  for ((r = 0; r < runs; r++)); do
    read -r i g l < <("$exe" time)
    index+=("$i") gate+=("$g") lookup+=("$l")
  done
  index_ms=$(printf '%s\n' "${index[@]}" | median | awk '{ printf "%.3f ms", $1 / 1e6 }')
  gate_ms=$(printf '%s\n' "${gate[@]}" | median | awk '{ printf "%.3f ms", $1 / 1e6 }')
  lookup_ns=$(printf '%s\n' "${lookup[@]}" | median | awk '{ printf "%.1f ns", $1 }')
  index_ir="-" lookup_ir="-"
  if [ "${CALLGRIND:-1}" != 0 ] && command -v valgrind > /dev/null; then
    index_ir=$(awk -v a="$(instructions "$exe" index 0)" -v b="$(instructions "$exe" index 1)" \
      'BEGIN { printf "%.0f", b - a }')
    lookup_ir=$(awk -v a="$(instructions "$exe" lookup 0)" -v b="$(instructions "$exe" lookup 100000)" \
      'BEGIN { printf "%.1f", (b - a) / 100000 }')
  fi
  echo "| $n | $index_ms | $gate_ms | $lookup_ns | $index_ir | $lookup_ir |"
done
