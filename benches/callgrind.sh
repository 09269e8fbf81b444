#!/usr/bin/env bash
# Instructions per call, counted by callgrind: the gate's overhead and calls by name against rmcp.
#
#   benches/callgrind.sh                    every variant, side by side, with the goals
#   benches/callgrind.sh VARIANT...         only these variants (no goal table)
#   benches/callgrind.sh --profile VARIANT  where the instructions of VARIANT go (callgrind_annotate)
#
# Each variant runs twice under `valgrind --tool=callgrind`, with N = 0 calls and with N calls (N=100000
# unless set in the environment); (total(N) - total(0)) / N is the exact count per call, since the
# program does the same work besides the calls in both runs. The bench profile is the release profile
# (debug = false). Outputs go to target/callgrind/.
set -euo pipefail
cd "$(dirname "$0")/.."

N="${N:-100000}"
out="${CARGO_TARGET_DIR:-target}/callgrind"
mkdir -p "$out"

command -v valgrind > /dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
command -v jq > /dev/null || { echo "jq is needed (apt-get install jq)" >&2; exit 1; }

exe=$(cargo bench --quiet -p toolgate-benches --bench instructions --no-run --message-format=json |
  jq -r 'select(.reason == "compiler-artifact" and .target.name == "instructions")
         | .executable // empty' | tail -n 1)
[ -x "$exe" ] || { echo "could not find the instructions bench binary" >&2; exit 1; }

# The total instructions of one run of VARIANT with N calls.
total() {
  local variant=$1 n=$2 file="$out/$1.$2.callgrind"
  shift 2
  valgrind --tool=callgrind --callgrind-out-file="$file" "$@" "$exe" "$variant" "$n" \
    > "$out/$variant.$n.log" 2>&1 || { cat "$out/$variant.$n.log" >&2; return 1; }
  awk '/^(summary|totals):/ { print $2; exit }' "$file"
}

# Instructions per call of VARIANT, to one decimal.
per_call() {
  local zero many
  zero=$(total "$1" 0)
  many=$(total "$1" "$N")
  awk -v a="$zero" -v b="$many" -v n="$N" 'BEGIN { printf "%.1f", (b - a) / n }'
}

if [ "${1:-}" = "--profile" ]; then
  variant=${2:?"--profile VARIANT"}
  total "$variant" "$N" --dump-instr=yes > /dev/null
  file="$out/$variant.$N.callgrind"
  echo "== $variant, N=$N: exclusive instructions by function ($file)"
  callgrind_annotate --inclusive=no "$file" | head -n 60
  echo
  echo "== inclusive"
  callgrind_annotate --inclusive=yes "$file" | head -n 60
  exit 0
fi

if [ "$#" -gt 0 ]; then
  for variant in "$@"; do
    printf '%-18s %12s instructions/call\n' "$variant" "$(per_call "$variant")"
  done
  exit 0
fi

variants=(direct allowed policy_allowed refused allowed_run_each async_direct async_allowed
  async_direct_each async_scope_each budget_other budget_memory floor toolgate policy_by_name
  toolgate_audit rmcp_stored rmcp_rebuilt audit_record)
declare -A ir
for variant in "${variants[@]}"; do
  ir[$variant]=$(per_call "$variant")
  printf '%-18s %12s instructions/call\n' "$variant" "${ir[$variant]}" >&2
done

# A goal line: what, measured, goal, and whether it is met.
goal() {
  awk -v what="$1" -v value="$2" -v op="$3" -v limit="$4" -v unit="$5" 'BEGIN {
    ok = (op == "<=") ? (value <= limit) : (value >= limit)
    printf "| %-44s | %10.2f%s | %s %s%s | %-4s |\n", what, value, unit, op, limit, unit, ok ? "met" : "MISSED"
  }'
}
diff() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

echo
echo "callgrind, N=$N calls per variant; instructions per call = (total(N) - total(0)) / N"
echo
echo "| variant | instructions/call |"
echo "| --- | ---: |"
for variant in "${variants[@]}"; do
  echo "| $variant | ${ir[$variant]} |"
done
echo
echo "| goal | measured | goal | |"
echo "| --- | ---: | ---: | --- |"
goal "allowed call, more than the direct call" "$(diff "${ir[allowed]}" "${ir[direct]}")" "<=" 60 ""
goal "refused call, more than the direct call" "$(diff "${ir[refused]}" "${ir[direct]}")" "<=" 200 ""
goal "call by name, toolgate (no audit)" "${ir[toolgate]}" "<=" 2000 ""
goal "call by name, toolgate / rmcp stored router" \
  "$(ratio "${ir[toolgate]}" "${ir[rmcp_stored]}")" "<=" 0.6 "x"
goal "call by name, toolgate / serde floor" "$(ratio "${ir[toolgate]}" "${ir[floor]}")" "<=" 1.45 "x"
goal "allowed call, policy file naming another tool, over direct" \
  "$(diff "${ir[policy_allowed]}" "${ir[direct]}")" "<=" 44 ""
goal "call by name under argument rules / serde floor" \
  "$(ratio "${ir[policy_by_name]}" "${ir[floor]}")" "<=" 2 "x"
echo
echo "| figure | value |"
echo "| --- | ---: |"
echo "| async allowed call, more than the direct async call | $(diff "${ir[async_allowed]}" "${ir[async_direct]}") |"
echo "| allowed call under a budget of another tool, more than the direct call | $(diff "${ir[budget_other]}" "${ir[direct]}") |"
echo "| allowed call counted by a budget in memory, more than the direct call | $(diff "${ir[budget_memory]}" "${ir[direct]}") |"
echo "| gate.run around each call, more than the direct call | $(diff "${ir[allowed_run_each]}" "${ir[direct]}") |"
echo "| gate.scope around each async call, more than the direct async call | $(diff "${ir[async_scope_each]}" "${ir[async_direct_each]}") |"
echo "| call by name under argument rules, more than without them | $(diff "${ir[policy_by_name]}" "${ir[toolgate]}") |"
echo "| toolgate / rmcp rebuilt router | $(ratio "${ir[toolgate]}" "${ir[rmcp_rebuilt]}")x |"
echo "| rmcp stored router / serde floor | $(ratio "${ir[rmcp_stored]}" "${ir[floor]}")x |"
echo "| toolgate with JSONL audit / toolgate | $(ratio "${ir[toolgate_audit]}" "${ir[toolgate]}")x |"
echo "| toolgate with JSONL audit / rmcp stored router | $(ratio "${ir[toolgate_audit]}" "${ir[rmcp_stored]}")x |"
