#!/usr/bin/env bash
# The test suite's clean build and run time, in a target folder of its own:
#
#   benches/suite-time.sh [DIR]     DIR: the checkout to measure (default: this one)
#
# Prints the seconds of `cargo test --workspace --all-features --no-run` from an empty target folder,
# then of the run itself (every binary, its log in the target folder's run.log, the tests passed and
# failed), and how many test binaries the build made.
set -euo pipefail
dir=$(cd "${1:-$(dirname "$0")/..}" && pwd)
export CARGO_TARGET_DIR="$dir/target/suite-time"
rm -rf "$CARGO_TARGET_DIR"
cd "$dir"
start=$(date +%s.%N)
cargo test --workspace --all-features --no-run > /dev/null 2>&1
built=$(date +%s.%N)
status=0
cargo test --workspace --all-features --no-fail-fast > "$CARGO_TARGET_DIR/run.log" 2>&1 || status=$?
ran=$(date +%s.%N)
binaries=$(find "$CARGO_TARGET_DIR/debug/deps" -maxdepth 1 -type f -executable | wc -l)
counts=$(awk '/^test result:/ { p += $4; f += $6 } END { print p " passed, " f " failed" }' "$CARGO_TARGET_DIR/run.log")
echo "clean build $(echo "$built - $start" | bc) s, run $(echo "$ran - $built" | bc) s ($counts, exit $status), $binaries executables"
