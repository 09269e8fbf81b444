#!/usr/bin/env bash
# Instructions per decision, counted by callgrind: an operator's policy file against Cedar, at 10, 100
# and 1,000 rules (benches/suite/benches/policy.rs).
#
#   benches/policy-instructions.sh                 every way at every size, side by side
#   benches/policy-instructions.sh WAY N           one way at one size
#
# Each measurement runs the bench binary twice under `valgrind --tool=callgrind` (`policy count WAY N
# ROUNDS`), with 0 rounds and with ROUNDS; each round decides the 256 requests of size N once.
# (total(ROUNDS) - total(0)) / (ROUNDS * 256) is the count per decision, averaged over the requests: the
# set-up (the policy read and checked, every request decided three ways and compared) is in both runs.
# Not exactly the same, though: hash maps seeded at random (the TOML reader's, Cedar's) make it vary
# by up to some hundred thousand instructions from run to run, so each way takes rounds enough to make
# that small against what it measures: toolgate's calls 50 (TOOLGATE_ROUNDS), its verdict 1,000
# (VERDICT_ROUNDS), Cedar 2 (CEDAR_ROUNDS). Outputs go to target/callgrind-policy/.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLGATE_ROUNDS="${TOOLGATE_ROUNDS:-50}"
VERDICT_ROUNDS="${VERDICT_ROUNDS:-1000}"
CEDAR_ROUNDS="${CEDAR_ROUNDS:-2}"
REQUESTS=256
out="${CARGO_TARGET_DIR:-target}/callgrind-policy"
mkdir -p "$out"

command -v valgrind > /dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
command -v jq > /dev/null || { echo "jq is needed (apt-get install jq)" >&2; exit 1; }

exe=$(cargo bench --quiet -p toolgate-benches --features cedar --bench policy --no-run --message-format=json |
  jq -r 'select(.reason == "compiler-artifact" and .target.name == "policy")
         | .executable // empty' | tail -n 1)
[ -x "$exe" ] || { echo "could not find the policy bench binary" >&2; exit 1; }

# The total instructions of one run of WAY at size N with ROUNDS rounds.
total() {
  local way=$1 n=$2 rounds=$3 file="$out/$1.$2.$3.callgrind"
  valgrind --tool=callgrind --callgrind-out-file="$file" "$exe" count "$way" "$n" "$rounds" \
    > "$out/$way.$n.$rounds.log" 2>&1 || { cat "$out/$way.$n.$rounds.log" >&2; return 1; }
  awk '/^(summary|totals):/ { print $2; exit }' "$file"
}

# Instructions per decision of WAY at size N, to one decimal.
per_decision() {
  local zero many rounds=$TOOLGATE_ROUNDS
  case $1 in
    cedar*) rounds=$CEDAR_ROUNDS ;;
    toolgate_verdict) rounds=$VERDICT_ROUNDS ;;
  esac
  zero=$(total "$1" "$2" 0)
  many=$(total "$1" "$2" "$rounds")
  awk -v a="$zero" -v b="$many" -v d="$((rounds * REQUESTS))" 'BEGIN { printf "%.1f", (b - a) / d }'
}

if [ "$#" -eq 2 ]; then
  printf '%s at N = %s: %s instructions/decision\n' "$1" "$2" "$(per_decision "$1" "$2")"
  exit 0
fi

ways=(toolgate_call toolgate_no_policy toolgate_verdict cedar cedar_from_json)
declare -A ir
for n in 10 100 1000; do
  for way in "${ways[@]}"; do
    ir[$way.$n]=$(per_decision "$way" "$n")
    printf '%-20s N = %-5s %14s instructions/decision\n' "$way" "$n" "${ir[$way.$n]}" >&2
  done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", a / b }'; }
echo
echo "callgrind, rounds of $REQUESTS requests ($TOOLGATE_ROUNDS for toolgate's calls, $VERDICT_ROUNDS for its"
echo "verdict, $CEDAR_ROUNDS for Cedar); instructions per decision"
echo
echo "| rules | toolgate call | toolgate, no policy | toolgate verdict | Cedar | Cedar from JSON | toolgate / Cedar |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for n in 10 100 1000; do
  echo "| $n | ${ir[toolgate_call.$n]} | ${ir[toolgate_no_policy.$n]} | ${ir[toolgate_verdict.$n]} |" \
    "${ir[cedar.$n]} | ${ir[cedar_from_json.$n]} | $(ratio "${ir[toolgate_call.$n]}" "${ir[cedar.$n]}")x |"
done
