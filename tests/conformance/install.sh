#!/usr/bin/env bash
# Installs the MCP conformance suite pinned in package-lock.json, and a Node 22 to run it (the suite
# needs Node 22 or later), from the npm registry with npm, into DIR (default: target/conformance, from
# the repository's root). Then `DIR/conformance ...` runs the suite.
#
# Idempotent: a second run with the same lockfile only checks what is there.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dir="${1:-$root/target/conformance}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

suite="$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"
stamp="$dir/installed.lock.sha256"
want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"

# The Node that runs the suite: the one the lockfile brings for this platform, else a Node 22 or later
# on PATH (the npm registry has no package of Node for every platform).
find_node() {
  local candidate
  for candidate in "$dir/node_modules/.bin/node" "$(command -v node || true)"; do
    [ -n "$candidate" ] && [ -x "$candidate" ] || continue
    local major
    major="$("$candidate" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
    if [ "$major" -ge 22 ]; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ ! -f "$suite" ] || ! find_node > /dev/null; then
  if ! command -v npm > /dev/null 2>&1; then
    echo "install.sh: npm is needed to install the conformance suite" >&2
    exit 1
  fi
  echo "installing the MCP conformance suite and Node 22 into $dir" >&2
  cp "$here/package.json" "$here/package-lock.json" "$dir/"
  rm -f "$stamp"
  # No package of the lockfile needs an install script; the Node packages are plain binaries.
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error > /dev/null)
  echo "$want" > "$stamp"
fi

if ! node="$(find_node)"; then
  echo "install.sh: no Node 22 or later for this platform: install one on PATH" >&2
  exit 1
fi

# Node keeps the suite's compiled code between runs (a test starts it once per scenario).
cat > "$dir/conformance.tmp" <<WRAPPER
#!/bin/sh
export NODE_COMPILE_CACHE="\${NODE_COMPILE_CACHE:-$dir/compile-cache}"
exec "$node" "$suite" "\$@"
WRAPPER
chmod +x "$dir/conformance.tmp"
mv "$dir/conformance.tmp" "$dir/conformance"
"$dir/conformance" --version > /dev/null
