#!/usr/bin/env bash
# Clean build of a hello-world binary that depends on `toolgate` alone (one READ_ONLY tool, called once
# under a gate), debug and release, timed with everything built from scratch (its own target folder).
#
#   benches/hello-build.sh [TOOLGATE_DIR]     the toolgate checkout to depend on (this one by default)
#
# The macro crate is built for the host: what it depends on is built twice in a build of the binary
# (once for the host, once for the target) unless host and target share them, so the figure also says
# what the macros cost every user build. REPS (3) repetitions; the median is printed.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
toolgate="$(cd "${1:-$here}" && pwd)"
reps="${REPS:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/hello/src"
cat > "$work/hello/Cargo.toml" <<TOML
[package]
name = "hello"
version = "0.1.0"
edition = "2024"

[dependencies]
toolgate = { path = "$toolgate" }

[workspace]
TOML
cat > "$work/hello/src/main.rs" <<'RUST'
use toolgate::{Denied, Gate, Mode, tool};

/// Say hello.
#[tool(risk = "READ_ONLY")]
fn hello(name: String) -> Result<String, Denied> {
    Ok(format!("hello, {name}"))
}

fn main() {
    let gate = Gate::new(Mode::Shadow).expect("a gate");
    println!("{}", gate.run(|| hello("world".into())).expect("allowed"));
}
RUST
cp "$toolgate/Cargo.lock" "$work/hello/Cargo.lock"

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
for profile in dev release; do
  times=()
  for _ in $(seq "$reps"); do
    rm -rf "$work/target"
    start=$(date +%s.%N)
    cargo build --quiet --offline --manifest-path "$work/hello/Cargo.toml" --target-dir "$work/target" \
      --profile "$profile"
    end=$(date +%s.%N)
    times+=("$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')")
  done
  printf '%-8s median %s s (each: %s)\n' "$profile" "$(printf '%s\n' "${times[@]}" | median)" "${times[*]}"
done
