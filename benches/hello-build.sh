#!/usr/bin/env bash
# Clean builds, timed with everything built from scratch (a target folder of their own), of one or more
# toolgate checkouts side by side: with several, each repetition builds them one after the other, so
# that a busy machine weighs on all alike.
#
#   benches/hello-build.sh [TOOLGATE_DIR...]
#       a hello-world binary that depends on `toolgate` alone (one READ_ONLY tool, called once under
#       a gate), debug and release. The macro crate is built for the host: what it depends on is built
#       twice in a build of the binary (once for the host, once for the target) unless host and target
#       share them, so the figure also says what the macros cost every user build.
#
#   benches/hello-build.sh --command FEATURES [TOOLGATE_DIR...]
#       the `toolgate` command, as `cargo install --path TOOLGATE_DIR --locked --features FEATURES`
#       builds it (`cargo build --release --bin toolgate`, with cargo's `--timings`): the wall time and
#       the CPU time (user + system, of cargo and every compiler it ran: steadier than the wall time on
#       a shared machine), the units and packages compiled, the lines of
#       `cargo tree -e normal --features FEATURES`, and the TOP (10) packages by compile time (every
#       unit of a package summed: its library and its build script). The timings reports are kept in
#       target/command-build/ of this checkout.
#
# TOOLGATE_DIR is this checkout by default. REPS (3) repetitions; the median is printed.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
features=""
if [ "${1:-}" = "--command" ]; then
  features="${2:?--command needs the features to build the command with, e.g. cli,postgres,console}"
  shift 2
fi
dirs=()
for dir in "${@:-$here}"; do
  dirs+=("$(cd "$dir" && pwd)")
done
reps="${REPS:-3}"
top="${TOP:-10}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
each() { tr ' ' '\n' | grep -v '^$'; }

# Runs the command given, with its output in $work/log; prints its wall, user and system seconds.
timed() {
  local TIMEFORMAT='%2R %2U %2S' t
  if ! t=$( { time "$@" > "$work/log" 2>&1; } 2>&1); then
    cat "$work/log" >&2
    return 1
  fi
  echo "$t"
}

if [ -z "$features" ]; then
  for i in "${!dirs[@]}"; do
    mkdir -p "$work/hello$i/src"
    cat > "$work/hello$i/Cargo.toml" <<TOML
[package]
name = "hello"
version = "0.1.0"
edition = "2024"

[dependencies]
toolgate = { path = "${dirs[$i]}" }

[workspace]
TOML
    cat > "$work/hello$i/src/main.rs" <<'RUST'
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
    cp "${dirs[$i]}/Cargo.lock" "$work/hello$i/Cargo.lock"
  done
  for profile in dev release; do
    declare -A times=()
    for _ in $(seq "$reps"); do
      for i in "${!dirs[@]}"; do
        rm -rf "$work/target"
        read -r wall _ _ < <(timed cargo build --offline --manifest-path "$work/hello$i/Cargo.toml" \
          --target-dir "$work/target" --profile "$profile")
        times[$i]="${times[$i]:-} $wall"
      done
    done
    for i in "${!dirs[@]}"; do
      printf '%-8s median %s s (each: %s)%s\n' "$profile" "$(echo "${times[$i]}" | each | median)" \
        "${times[$i]# }" "$([ "${#dirs[@]}" -gt 1 ] && echo "  ${dirs[$i]}")"
    done
    unset times
  done
  exit 0
fi

keep="$here/target/command-build"
mkdir -p "$keep"
declare -A wall=() cpu=()
for rep in $(seq "$reps"); do
  for i in "${!dirs[@]}"; do
    rm -rf "$work/target"
    echo "rep $rep: ${dirs[$i]} (load $(cut -d' ' -f1-3 /proc/loadavg)) ..." >&2
    read -r w u s < <(timed cargo build --offline --release --bin toolgate --features "$features" \
      --timings --manifest-path "${dirs[$i]}/Cargo.toml" --target-dir "$work/target")
    wall[$i]="${wall[$i]:-} $w"
    cpu[$i]="${cpu[$i]:-} $(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.1f", u + s }')"
    cp "$work/target/cargo-timings/cargo-timing.html" "$keep/$i-rep$rep.html"
    echo "rep $rep: ${dirs[$i]}: ${w} s wall, $(echo "${cpu[$i]}" | each | tail -1) s CPU" >&2
  done
done

# Units and packages compiled, from a report.
counts() {
  python3 - "$1" <<'PY'
import json, re, sys
units = json.loads(re.search(r"const UNIT_DATA = (\[.*?\]);\n", open(sys.argv[1]).read(), re.S).group(1))
print(len(units), len({(u["name"], u["version"]) for u in units}))
PY
}

n=${#dirs[@]}
declare -A units=() packs=() lines=()
reports=()
for i in "${!dirs[@]}"; do
  reports+=("$keep/$i-rep$reps.html")
  read -r "units[$i]" "packs[$i]" <<< "$(counts "$keep/$i-rep$reps.html")"
  lines[$i]=$(cargo tree --offline --manifest-path "${dirs[$i]}/Cargo.toml" -e normal --features "$features" | wc -l)
done

echo
echo "the toolgate command, features $features, clean release build, $reps repetition(s), median"
echo "(each run in brackets); $(nproc) cores, $(rustc --version)"
for i in "${!dirs[@]}"; do echo "  [$((i + 1))] ${dirs[$i]}"; done
echo
header="| figure |"
rule="| --- |"
for i in "${!dirs[@]}"; do header="$header [$((i + 1))] |"; rule="$rule ---: |"; done
[ "$n" -gt 1 ] && { header="$header [$n] / [1] |"; rule="$rule ---: |"; }
echo "$header"
echo "$rule"
line() {
  local what=$1 out last first
  shift
  out="| $what |"
  for value in "$@"; do out="$out $value |"; done
  if [ "$n" -gt 1 ]; then
    first=$(cut -d' ' -f1 <<< "$1")
    last=$(cut -d' ' -f1 <<< "${!#}")
    out="$out $(awk -v a="$last" -v b="$first" 'BEGIN { printf "%.2fx", a / b }') |"
  fi
  echo "$out"
}
values() {
  local -n table=$1
  local i med
  for i in "${!dirs[@]}"; do
    med=$(echo "${table[$i]}" | each | median)
    if [ "$reps" -gt 1 ]; then printf '%s [%s]\n' "$med" "${table[$i]# }"; else echo "$med"; fi
  done
}
mapfile -t v < <(values wall)
line "wall time (s)" "${v[@]}"
mapfile -t v < <(values cpu)
line "CPU time, user + system (s)" "${v[@]}"
v=()
for i in "${!dirs[@]}"; do v+=("${units[$i]}"); done
line "units compiled" "${v[@]}"
v=()
for i in "${!dirs[@]}"; do v+=("${packs[$i]}"); done
line "packages compiled" "${v[@]}"
v=()
for i in "${!dirs[@]}"; do v+=("${lines[$i]}"); done
line "\`cargo tree -e normal\` lines" "${v[@]}"

echo
echo "the packages that took longest to compile (each checkout's $top, in the last repetition's report):"
echo "seconds as cargo measures a unit, which the units running beside it stretch; every unit of a"
echo "package summed (its library, its build script and the script's run)"
echo
python3 - "$top" "${reports[@]}" <<'PY'
import collections, json, re, sys
top, reports = int(sys.argv[1]), sys.argv[2:]
times = []
for report in reports:
    units = json.loads(re.search(r"const UNIT_DATA = (\[.*?\]);\n", open(report).read(), re.S).group(1))
    packages = collections.Counter()
    for unit in units:
        packages[unit["name"] + " " + unit["version"]] += unit["duration"]
    times.append(packages)
names = []
for packages in times:
    for name, _ in packages.most_common(top):
        if name not in names:
            names.append(name)
names.sort(key=lambda name: -max(packages.get(name, 0) for packages in times))
print("| package | " + " | ".join(f"[{i + 1}]" for i in range(len(times))) + " |")
print("| --- |" + " ---: |" * len(times))
for name in names:
    cells = [f"{packages[name]:.1f}" if name in packages else "not built" for packages in times]
    print(f"| {name} | " + " | ".join(cells) + " |")
PY
