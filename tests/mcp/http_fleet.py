"""Two processes of the `mcp_http` example behind one set of clients, sharing approvals and the fleet's
mode in PostgreSQL, driven with the official MCP Python SDK's HTTP client.

Usage: python http_fleet.py URL_A URL_B TOOLGATE STORE_URL FLEET AUDIT_A AUDIT_B

Both processes know `alice-token` (alice, FULL_AUTO), use in-band approvals with the same state key,
and keep approvals in the store and the mode in the fleet `FLEET`. Checks that an approval form sealed by
one process is answered at the other and runs the call once (a replay refused); that a client of the
initialize handshake is refused `APPROVAL_PENDING`, the operator approves with `toolgate approvals
approve`, and the retried call runs once in the other process; that `toolgate fleet lower` narrows what
both processes list; and that every record names its principal. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from checking import check, run, wire

SESSION_TIMEOUT_S = 120
WAIT_TIMEOUT_S = 30
def code_of(result: Any) -> str | None:
    return wire(result).get("structuredContent", {}).get("code")


async def never_asked(context: Any, params: Any) -> Any:
    """Declares that this client shows forms (the server sends them to no other); the forms here are
    answered by hand."""
    raise AssertionError("no form is answered through the callback here")


def client(url: str, mode: str = "auto"):
    http = httpx2.AsyncClient(headers={"Authorization": "Bearer alice-token"})
    return http, Client(streamable_http_client(url, http_client=http), mode=mode, elicitation_callback=never_asked)


def toolgate(binary: str, store: str, fleet: str, *args: str) -> str:
    run = subprocess.run(
        [binary, *args],
        env={**os.environ, "TOOLGATE_STORE": store, "TOOLGATE_FLEET": fleet},
        capture_output=True,
        text=True,
        timeout=WAIT_TIMEOUT_S,
    )
    check(run.returncode == 0, f"toolgate {' '.join(args)} succeeds", run.stderr)
    return run.stdout


async def main(url_a: str, url_b: str, binary: str, store: str, fleet: str, audit_a: str, audit_b: str) -> None:
    yes = {"toolgate/approval": {"action": "accept", "content": {"decision": "approve"}}}
    with anyio.fail_after(SESSION_TIMEOUT_S):
        # In band across processes: A seals the form, B opens it and the shared store runs it once.
        http_a, at_a = client(url_a)
        http_b, at_b = client(url_b)
        async with http_a, http_b, at_a, at_b:
            first = await at_a.session.call_tool("notes.purge", {}, allow_input_required=True)
            check(isinstance(first, types.InputRequiredResult), "A asks with a form", wire(first))
            state = first.request_state
            done = await at_b.session.call_tool(
                "notes.purge", {}, request_state=state, input_responses=yes, allow_input_required=True
            )
            check(wire(done)["content"][0]["text"].endswith("notes purged"), "B runs the call A's form approved", wire(done))
            replay = await at_a.session.call_tool(
                "notes.purge", {}, request_state=state, input_responses=yes, allow_input_required=True
            )
            check(code_of(replay) == "APPROVAL_REUSED", "the replay at A is refused", wire(replay))

        # Out of band: pending at B, approved with `toolgate approvals approve`, run at A once.
        http_b, legacy_b = client(url_b, "legacy")
        http_a, legacy_a = client(url_a, "legacy")
        async with http_b, http_a, legacy_b, legacy_a:
            waiting = await legacy_b.call_tool("notes.remove", {"number": 1})
            check(code_of(waiting) == "APPROVAL_PENDING", "a client without forms waits for an operator", wire(waiting))
            listed = toolgate(binary, store, fleet, "approvals", "list")
            rows = [line.split() for line in listed.splitlines() if "notes.remove" in line and line.split()[0].isdigit()]
            check(len(rows) == 1, "the operator sees one pending removal", listed)
            check("team-notes" in listed, "the operator sees which agent asks", listed)
            toolgate(binary, store, fleet, "approvals", "approve", rows[0][0], "--by", "ops")
            ran = await legacy_a.call_tool("notes.remove", {"number": 1})
            check(not wire(ran).get("isError"), "A runs the approved call", wire(ran))
            again = await legacy_b.call_tool("notes.remove", {"number": 1})
            check(code_of(again) == "APPROVAL_REUSED", "the approval ran once", wire(again))

        # The fleet's lowering narrows what both processes list.
        toolgate(binary, store, fleet, "fleet", "lower", "--to", "SHADOW", "--by", "ops", "--reason", "e2e")
        for url in (url_a, url_b):
            http, at = client(url)
            async with http, at:
                with anyio.move_on_after(WAIT_TIMEOUT_S):
                    while "notes.add" in {t.name for t in (await at.list_tools()).tools}:
                        await anyio.sleep(0.1)
                names = sorted(t.name for t in (await at.list_tools()).tools)
                check(names == ["notes.list"], f"{url} lists what SHADOW allows", names)

    for audit in (audit_a, audit_b):
        with open(audit, encoding="utf-8") as log:
            records = [json.loads(line) for line in log if line.strip()]
        calls = [r for r in records if r.get("tool", "").startswith("notes.")]
        check(calls and all(r.get("principal") == "alice" for r in calls), f"{audit}: every call names alice", records)
    runs = 0
    for audit in (audit_a, audit_b):
        with open(audit, encoding="utf-8") as log:
            runs += sum(1 for line in log if '"stage":"exit"' in line and '"notes.' in line and '"outcome":"ok"' in line and ('purge' in line or 'remove' in line))
    check(runs == 2, "two approvals, two runs in all", runs)


if __name__ == "__main__":
    run(main, 7, "mcp http fleet", __doc__)
