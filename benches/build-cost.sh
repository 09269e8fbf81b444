#!/usr/bin/env bash
# Build cost of 500 tools, in five styles, side by side in one run:
#
#   plain     500 plain functions
#   inventory 500 plain functions, each registering a static through `inventory::submit!`: the floor of
#             any crate whose items register themselves as toolgate's tools do
#   derive    500 functions, each with a serde `Deserialize` + schemars `JsonSchema` args struct
#   manifest  500 toolgate `#[tool]` (manifest only)
#   callable  500 toolgate `#[tool(callable)]`
#   rmcp      500 rmcp `#[tool]` in one `#[tool_router]` (with an args struct each, and `#[tool_handler]`)
#
#   benches/build-cost.sh          REPS=3 repetitions, the median of each
#
# The crates are generated into target/bench-build-cost/ (their own workspace and target folder). Their
# dependencies are built first; then, per repetition and style, `cargo clean -p <crate>` and a timed
# `cargo build -p <crate>` (a clean build of the crate alone, dev profile), and after every style's clean
# build, a timed `cargo build -p <crate>` after one tool's body changed (an incremental rebuild).
# TOOLS (500), REPS (3) and STYLES (all of them, space-separated) can be set in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

tools="${TOOLS:-500}"
reps="${REPS:-3}"
changed=$((tools / 2))
read -r -a styles <<< "${STYLES:-plain inventory derive manifest callable rmcp}"
dir="$repo/target/bench-build-cost"
mkdir -p "$dir"

# Writes the source of STYLE with the body of tool `changed` varied by K.
generate() {
  local style=$1 k=$2 crate="$dir/bc_$1" i extra
  mkdir -p "$crate/src"
  {
    case $style in
      plain) echo "//! $tools plain functions." ;;
      inventory)
        echo "//! $tools plain functions, each registering a static through inventory."
        echo
        echo "/// What each function registers."
        echo "pub struct Registered(pub &'static str);"
        echo "inventory::collect!(Registered);"
        ;;
      derive)
        echo "//! $tools functions with a Deserialize + JsonSchema args struct each."
        echo "use schemars::JsonSchema;"
        echo "use serde::Deserialize;"
        ;;
      manifest | callable)
        echo "//! $tools toolgate tools ($style)."
        echo "use toolgate::{Denied, tool};"
        ;;
      rmcp)
        echo "//! $tools rmcp tools in one tool router."
        echo "use rmcp::handler::server::router::tool::ToolRouter;"
        echo "use rmcp::handler::server::wrapper::Parameters;"
        echo "use rmcp::{ServerHandler, tool, tool_handler, tool_router};"
        echo "use schemars::JsonSchema;"
        echo "use serde::Deserialize;"
        echo
        echo "/// The server."
        echo "#[derive(Debug, Clone)]"
        echo "pub struct Server {"
        echo "    tool_router: ToolRouter<Server>,"
        echo "}"
        echo
        echo "#[tool_handler(router = self.tool_router)]"
        echo "impl ServerHandler for Server {}"
        ;;
    esac
    for ((i = 0; i < tools; i++)); do
      extra=""
      [ "$i" -eq "$changed" ] && extra=" + $k"
      case $style in
        derive | rmcp)
          printf '\n/// Arguments of tool %d.\n#[derive(Deserialize, JsonSchema)]\n' "$i"
          printf 'pub struct Args%d {\n    /// a\n    pub a: i64,\n    /// b\n    pub b: i64,\n}\n' "$i"
          ;;
      esac
      case $style in
        plain)
          printf '\n/// Tool %d.\npub fn tool_%d(a: i64, b: i64) -> i64 {\n    a + b + %d%s\n}\n' \
            "$i" "$i" "$i" "$extra"
          ;;
        inventory)
          printf '\n/// Tool %d.\npub fn tool_%d(a: i64, b: i64) -> i64 {\n' "$i" "$i"
          printf '    inventory::submit! { Registered("tool_%d") }\n' "$i"
          printf '    a + b + %d%s\n}\n' "$i" "$extra"
          ;;
        derive)
          printf '\n/// Tool %d.\npub fn tool_%d(args: Args%d) -> i64 {\n    args.a + args.b + %d%s\n}\n' \
            "$i" "$i" "$i" "$i" "$extra"
          ;;
        manifest)
          printf '\n/// Tool %d.\n#[tool(risk = "READ_ONLY")]\n' "$i"
          printf 'pub fn tool_%d(a: i64, b: i64) -> Result<i64, Denied> {\n    Ok(a + b + %d%s)\n}\n' \
            "$i" "$i" "$extra"
          ;;
        callable)
          printf '\n/// Tool %d.\n#[tool(risk = "READ_ONLY", callable)]\n' "$i"
          printf 'pub fn tool_%d(a: i64, b: i64) -> Result<i64, Denied> {\n    Ok(a + b + %d%s)\n}\n' \
            "$i" "$i" "$extra"
          ;;
      esac
    done
    if [ "$style" = rmcp ]; then
      printf '\n#[tool_router]\nimpl Server {\n'
      printf '    /// A server with every tool.\n    pub fn new() -> Server {\n'
      printf '        Server {\n            tool_router: Self::tool_router(),\n        }\n    }\n'
      for ((i = 0; i < tools; i++)); do
        extra=""
        [ "$i" -eq "$changed" ] && extra=" + $k"
        printf '\n    /// Tool %d.\n    #[tool]\n' "$i"
        printf '    pub fn tool_%d(&self, Parameters(Args%d { a, b }): Parameters<Args%d>) -> String {\n' \
          "$i" "$i" "$i"
        printf '        (a + b + %d%s).to_string()\n    }\n' "$i" "$extra"
      done
      printf '}\n'
    fi
  } > "$crate/src/lib.rs"
  local deps
  case $style in
    plain) deps="" ;;
    inventory) deps="inventory.workspace = true" ;;
    derive) deps=$'serde.workspace = true\nschemars.workspace = true' ;;
    manifest | callable) deps="toolgate.workspace = true" ;;
    rmcp) deps=$'rmcp.workspace = true\nserde.workspace = true\nschemars.workspace = true' ;;
  esac
  cat > "$crate/Cargo.toml" <<EOF
[package]
name = "bc_$style"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
$deps
EOF
}

members=""
for style in "${styles[@]}"; do
  generate "$style" 0
  members="$members\"bc_$style\", "
done
cat > "$dir/Cargo.toml" <<EOF
[workspace]
members = [${members%, }]
resolver = "3"

[workspace.dependencies]
toolgate = { path = "$repo" }
serde = { version = "1", features = ["derive"] }
schemars = "1"
inventory = "0.3"
rmcp = { version = "=3.9.0", default-features = false, features = ["server", "macros"] }
EOF
[ -f "$dir/Cargo.lock" ] || cp "$repo/Cargo.lock" "$dir/Cargo.lock"

cargo_in() { cargo "$@" --quiet --manifest-path "$dir/Cargo.toml"; }
seconds() {
  local start=$EPOCHREALTIME
  "$@"
  awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'
}

echo "building the dependencies (dev profile) in $dir ..." >&2
cargo_in build --workspace
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

declare -A clean rebuild
for ((rep = 1; rep <= reps; rep++)); do
  for style in "${styles[@]}"; do
    cargo_in clean -p "bc_$style"
    t=$(seconds cargo_in build -p "bc_$style")
    clean[$style]="${clean[$style]:-} $t"
    echo "rep $rep: $style clean build ${t} s" >&2
  done
  for style in "${styles[@]}"; do
    generate "$style" "$rep"
    t=$(seconds cargo_in build -p "bc_$style")
    rebuild[$style]="${rebuild[$style]:-} $t"
    echo "rep $rep: $style rebuild after one body change ${t} s" >&2
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
declare -A c r
for style in "${styles[@]}"; do
  c[$style]=$(echo "${clean[$style]}" | median)
  r[$style]=$(echo "${rebuild[$style]}" | median)
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
# A goal row for NUMERATOR / DENOMINATOR, where both styles ran.
goal() {
  local what=$1 table=$2 a=$3 b=$4 limit=$5 num den
  [[ $table == c ]] && { num=${c[$a]:-}; den=${c[$b]:-}; } || { num=${r[$a]:-}; den=${r[$b]:-}; }
  [[ -n $num && -n $den ]] || return 0
  awk -v what="$what" -v value="$(ratio "$num" "$den")" -v limit="$limit" 'BEGIN {
    verdict = limit == "" ? "(reported)" : (value <= limit ? "met" : "MISSED")
    printf "| %-44s | %6.2fx | %s | %s |\n", what, value, limit == "" ? "-" : "<= " limit "x", verdict
  }'
}

echo
echo "build cost of $tools tools, dev profile, $reps repetitions, median (each run in brackets);"
echo "$(nproc) cores, $(rustc --version)"
echo
echo "| style | clean build (s) | rebuild after one body change (s) |"
echo "| --- | ---: | ---: |"
for style in "${styles[@]}"; do
  echo "| $style | ${c[$style]} [${clean[$style]# }] | ${r[$style]} [${rebuild[$style]# }] |"
done
echo
echo "| goal | measured | goal | |"
echo "| --- | ---: | ---: | --- |"
goal "clean build, callable / rmcp" c callable rmcp 0.6
goal "clean build, callable / derive-only" c callable derive 1.2
goal "clean build, manifest-only / plain" c manifest plain 4
goal "clean build, inventory registration / plain" c inventory plain ""
goal "clean build, manifest-only / inventory registration" c manifest inventory ""
goal "rebuild, callable / rmcp" r callable rmcp 0.6
goal "rebuild, manifest-only / rmcp" r manifest rmcp 0.6
