#!/usr/bin/env python3
"""Checks the rules of ARCHITECTURE.md over the source: which crate and module may import which.

    python3 .ci/architecture.py            prints the runtime's and the macros' module graphs, then any
                                           rule they break

Exits 1 when a rule is broken. It reads `use` lines and `crate::` paths as text (`crate::{a, b}` and
`use super::{..}` lists included), which is enough for a code base whose imports name their modules in
full (`crate::gate::permit::Permit`); test modules (an inline `#[cfg(test)] mod tests { .. }` to the end
of its file, a file declared `#[cfg(test)] mod name;`) are left out.
"""
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "runtime" / "src"
MACROS = ROOT / "macros" / "src"

# The runtime's parts, lowest first: a part may import only parts of a lower rank (and itself).
RANKS = {
    "canonical": 0,
    "terminal": 0,
    # The files toolgate writes, never through a link planted at their name.
    "files": 0,
    # Names compared as a person reads them: it knows what `terminal` hides.
    "names": 1,
    "registry": 2,
    "approval": 3,
    "audit": 3,
    "gate": 4,
    "by_name": 5,
    "report": 5,
    # An operator's policy file: checked against the tools' parameters (by_name), followed by gates.
    "policy_file": 6,
    "mcp": 7,
    "postgres": 7,
    "rig": 7,
    # An application's commands: a policy replayed over a log or over the PostgreSQL trail.
    "cli": 8,
    # The operator console: pages on the PostgreSQL store and trail, behind the MCP server's token
    # verifiers.
    "console": 8,
}
# Crates that only the top of the runtime may import, and where.
TRANSPORTS = {
    "rmcp": ("mcp",),
    "clap": ("cli",),
    "tokio_postgres": ("postgres",),
    # The MCP server's per-connection watcher and cancellation run on rmcp's tokio.
    "tokio": ("postgres", "mcp", "console"),
    # The console's pages, and the MCP endpoint mounted as one router (`mcp-axum`).
    "axum": ("console", "mcp"),
    "maud": ("console",),
    "rig_core": ("rig",),
}
# Crates that one module alone, with the files under it (or each of a few, for a crate two features use
# apart), may import: the rest of the runtime sees them through its types.
SOLE_IMPORTERS = {
    "ed25519_dalek": ("audit::checkpoint",),
    # The access tokens' verifier (features `mcp-oauth` and `console`): tokens, keys and the JWKS's
    # HTTPS client.
    "jsonwebtoken": ("mcp::oauth",),
    "hyper_util": ("mcp::oauth",),
    "hyper_rustls": ("mcp::oauth",),
    "base64": ("mcp::oauth",),
    # TLS: the JWKS's HTTPS client (`mcp-oauth`) and every PostgreSQL connection (`postgres`).
    "rustls": ("mcp::oauth", "postgres::tls"),
    "tokio_postgres_rustls": ("postgres::tls",),
    "rustls_native_certs": ("postgres::tls",),
    # Unicode's normalization and confusables: the rest of the runtime compares names through `names`.
    "unicode_normalization": ("names",),
    "unicode_security": ("names",),
}
# Crates no module of the runtime imports: its spans go out through `tracing`, and the application's
# subscriber exports them (to OpenTelemetry, with the versions it chooses).
NOWHERE = ("opentelemetry", "opentelemetry_sdk", "tracing_opentelemetry")
# The macro crate's modules, lowest first: a module may import only modules of a lower rank, so no two
# import each other. The model is read (attr, ast), checked (valid), then emitted (expand); `marker` is
# the protocol between `toolset` and a `tool` under another name, below both.
MACRO_RANKS = {
    "ctxt": 0,
    "doc": 0,
    "attr": 1,
    "ast": 2,
    "valid": 3,
    "marker": 4,
    "expand": 5,
    "toolset": 6,
}

problems = []


def module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return "::".join(parts)


TEST_MOD = re.compile(r"^\s*#\[cfg\(test\)\]\s*\n\s*mod (\w+)\s*;", re.M)


def code_of(path: Path) -> str:
    text = path.read_text()
    cut = re.search(r"^\s*#\[cfg\(test\)\]\s*\n\s*mod \w+\s*\{", text, re.M)
    text = text[: cut.start()] if cut else text
    # A test module in a file of its own is left out, as its declaration is.
    text = TEST_MOD.sub("", text)
    # Comments and doc comments name modules without importing them.
    return re.sub(r"//[^\n]*", "", text)


def test_modules(files, root: Path) -> set:
    """The modules declared `#[cfg(test)] mod name;`, and every module under them."""
    tests = set()
    for f in files:
        here = module_of(f, root)
        for name in TEST_MOD.findall(f.read_text()):
            tests.add(f"{here}::{name}" if here else name)
    return tests


def braced(text: str) -> list:
    """The paths of a `{a, b::c, d::{e, f}}` list (text after its opening brace), each in full."""
    paths, depth, item = [], 0, ""
    for char in text:
        if char == "{":
            depth += 1
        elif char == "}":
            if depth == 0:
                break
            depth -= 1
        elif char == "," and depth == 0:
            paths.append(item)
            item = ""
            continue
        item += char
    paths.append(item)
    out = []
    for path in (re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+\s*$", "", p)) for p in paths):
        head, _, rest = path.partition("{")
        if rest:
            out.extend(head + inner for inner in braced(rest))
        else:
            out.append(path)
    return [p for p in out if p and p != "self"]


def imported(code: str, prefix: str) -> list:
    """Every path `prefix::..` names, a braced list read as its paths (`prefix` a regex)."""
    paths = []
    for m in re.finditer(rf"\b{prefix}::((?:[a-z_][a-z0-9_]*::)*)(\{{|[A-Za-z_][A-Za-z0-9_]*)", code):
        head = m.group(1)
        if m.group(2) == "{":
            paths.extend(head + path for path in braced(code[m.end():]))
        else:
            paths.append(head + m.group(2))
    return [p.replace("::self", "") for p in paths]


def known(path: str, modules: set) -> str:
    """The longest known module that `path` (a::b::Item) lies in."""
    parts = path.split("::")
    for n in range(len(parts), 0, -1):
        candidate = "::".join(parts[:n])
        if candidate in modules:
            return candidate
    return ""


def graph(root: Path):
    """Each module of the crate at `root` (its test modules left out), with its code and the modules
    it imports."""
    files = sorted(root.rglob("*.rs"))
    tests = test_modules(files, root)
    files = [f for f in files if known(module_of(f, root), tests) == ""]
    modules = {module_of(f, root) for f in files}
    edges, codes = {}, {}
    for f in files:
        here = module_of(f, root)
        code = code_of(f)
        targets = set()
        for path in imported(code, "crate"):
            # A path no module holds names what the root defines or re-exports (`crate::Rollback`,
            # `crate::policy::Risk`): an import of the root, which the rules below refuse.
            target = known(path, modules)
            if target != here:
                targets.add(target)
        parent = here.rsplit("::", 1)[0] if "::" in here else ""
        # `use super::..` and paths written in place (`super::hand_off::Outcome`).
        for path in imported(code, "super"):
            target = known(f"{parent}::{path}" if parent else path, modules)
            if target and target != here:
                targets.add(target)
        # A parent's relative paths into its own children (`pub use record::AuditRecord;`).
        children = re.findall(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod ([a-z_][a-z0-9_]*)\s*;", code, re.M)
        for child in children:
            body = re.sub(rf"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod {child}\s*;", "", code, flags=re.M)
            if re.search(rf"(?<![:\w]){child}::", body):
                targets.add(f"{here}::{child}" if here else child)
        edges[here] = targets
        codes[here] = code
    return edges, codes


def runtime_graph():
    edges, codes = graph(RUNTIME)
    for here, code in codes.items():
        for crate_name, homes in TRANSPORTS.items():
            if re.search(rf"\b{crate_name}::", code) and here.split("::")[0] not in homes and here != "":
                problems.append(f"runtime `{here}` uses `{crate_name}`: only {' and '.join(f'`{h}`' for h in homes)} may")
        for crate_name, homes in SOLE_IMPORTERS.items():
            inside = any(here == home or here.startswith(f"{home}::") for home in homes)
            if re.search(rf"\b{crate_name}::", code) and not inside:
                problems.append(f"runtime `{here}` uses `{crate_name}`: only {' and '.join(f'`{h}`' for h in homes)} may")
        for crate_name in NOWHERE:
            if re.search(rf"\b{crate_name}::", code):
                problems.append(f"runtime `{here or 'lib'}` uses `{crate_name}`: no module of the runtime may")
    return edges


def check_parts(edges):
    for source, targets in edges.items():
        if source == "":
            continue  # lib.rs: the root re-exports every part
        part = source.split("::")[0]
        for target in targets:
            other = target.split("::")[0]
            if target == "":
                problems.append(f"`{source}` imports the crate root: import the module that defines it")
            elif other != part and RANKS[other] >= RANKS[part]:
                problems.append(f"`{source}` imports `{target}`: {part} may not import {other}")


def check_macro_ranks(edges):
    for source, targets in edges.items():
        if source == "":
            continue  # lib.rs: the entry points call into every module
        if source not in MACRO_RANKS:
            problems.append(f"toolgate-macros: module `{source}` has no rank in MACRO_RANKS")
            continue
        for target in sorted(targets):
            if target == "":
                problems.append(f"toolgate-macros: `{source}` imports the crate root")
            elif MACRO_RANKS.get(target, len(MACRO_RANKS)) >= MACRO_RANKS[source]:
                problems.append(f"toolgate-macros: `{source}` imports `{target}`, which is not below it")


def check_cycles(edges, crate):
    state = {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target == "":
                continue  # the root declares every module; an import of it is refused on its own
            if state.get(target) == "open":
                cycle = stack[stack.index(target):] + [target]
                problems.append(f"{crate}: module cycle: " + " -> ".join(cycle))
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [])


def dependencies(manifest: Path) -> set:
    data = tomllib.loads(manifest.read_text())
    return set(data.get("dependencies", {}))


def check_crates():
    policy = dependencies(ROOT / "policy" / "Cargo.toml")
    optional = tomllib.loads((ROOT / "policy" / "Cargo.toml").read_text())["dependencies"]
    for name in policy:
        if not (isinstance(optional[name], dict) and optional[name].get("optional")):
            problems.append(f"toolgate-policy depends on `{name}`: it may depend on nothing but optional serde and clap")
    for path in (ROOT / "policy" / "src").rglob("*.rs"):
        code = code_of(path)
        if re.search(r"\btoolgate", code):
            problems.append(f"{path.relative_to(ROOT)} names another toolgate crate")
        if re.search(r"\bclap::", code) and path.name != "clap.rs":
            problems.append(f"{path.relative_to(ROOT)} uses clap outside clap.rs")
    macros = dependencies(ROOT / "macros" / "Cargo.toml")
    extra = macros - {"syn", "quote", "proc-macro2", "toolgate-policy"}
    if extra:
        problems.append(f"toolgate-macros depends on {sorted(extra)}: only syn, quote, proc-macro2 and toolgate-policy")


def print_graph(title, edges):
    print(f"{title}:")
    for source in sorted(edges):
        targets = ", ".join(sorted(edges[source])) or "-"
        print(f"  {source or '(root)'} -> {targets}")


def self_test():
    """Each rule fires on a small crate made to break it: a check that cannot fail checks nothing."""
    import tempfile

    global problems
    saved, problems = problems, []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = {
            "lib.rs": "pub mod gate;\npub mod audit;\npub use toolgate_policy as policy;\npub struct Gate;\n",
            "gate/mod.rs": "use crate::policy::Risk;\nuse crate::audit::Record;\n",
            "audit/mod.rs": "use crate::Gate;\nuse crate::gate::Gate as G;\n",
        }
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        edges, _ = graph(root)
        check_parts(edges)
        check_cycles(edges, "made")
    found, problems = problems, saved
    expected = [
        "`gate` imports the crate root",
        "`audit` imports the crate root",
        "`audit` imports `gate`: audit may not import gate",
        "made: module cycle: audit -> gate -> audit",
    ]
    missing = [e for e in expected if not any(p.startswith(e) for p in found)]
    if missing:
        print("the checks of this script do not fire:", *missing, sep="\n  ")
        sys.exit(2)


def main():
    self_test()
    edges = runtime_graph()
    print_graph("toolgate-runtime", edges)
    check_parts(edges)
    check_cycles(edges, "toolgate-runtime")
    macro_edges, _ = graph(MACROS)
    print_graph("\ntoolgate-macros", macro_edges)
    check_macro_ranks(macro_edges)
    check_cycles(macro_edges, "toolgate-macros")
    check_crates()
    if problems:
        print()
        for problem in problems:
            print("BROKEN:", problem)
        sys.exit(1)
    print("\nno rule of ARCHITECTURE.md is broken")


main()
