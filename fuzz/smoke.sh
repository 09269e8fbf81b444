#!/usr/bin/env bash
# Builds the fuzz targets, replays the seed corpus, then fuzzes each target for a short while.
#
#   fuzz/smoke.sh                     every target, FUZZ_SECONDS (25) each
#   fuzz/smoke.sh audit_verify        one target
#   FUZZ_SECONDS=600 fuzz/smoke.sh    longer runs
#
# New inputs go to a temporary directory, not to fuzz/corpus. A crash stops the script, leaves the input
# under fuzz/artifacts/<target>/ and prints how to reproduce it.
set -euo pipefail
cd "$(dirname "$0")"

# cargo fuzz passes unstable flags to rustc (-Zsanitizer=address, -Cpasses=sancov-module, ...). A stable
# compiler accepts them with RUSTC_BOOTSTRAP=1, so no nightly toolchain is needed.
export RUSTC_BOOTSTRAP=1

seconds="${FUZZ_SECONDS:-25}"
rss_mb="${FUZZ_RSS_MB:-2048}"
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=(call_by_name approval_tokens audit_verify audit_mutate policy_file)
fi

# audit_mutate writes a small log file per input: keep it in memory where the machine allows.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export TMPDIR=/dev/shm
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cargo fuzz build

for target in "${targets[@]}"; do
  mkdir -p "$work/$target" "corpus/$target"
  dict=()
  if [ -f "dict/$target.dict" ]; then
    dict=("-dict=dict/$target.dict")
  fi
  start=$SECONDS
  if ! cargo fuzz run "$target" "$work/$target" "corpus/$target" -- \
      -max_total_time="$seconds" -rss_limit_mb="$rss_mb" -timeout=10 -len_control=0 "${dict[@]}" \
      > "$work/$target.log" 2>&1; then
    tail -n 60 "$work/$target.log"
    echo "fuzz target $target failed: the input is under fuzz/artifacts/$target/" >&2
    exit 1
  fi
  summary=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$work/$target.log" | tail -n 1 || true)
  echo "$target ($((SECONDS - start)) s): ${summary:-no summary}"
done
