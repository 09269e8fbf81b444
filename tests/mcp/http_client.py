"""The `mcp_http` example over MCP's streamable HTTP transport, with the official MCP Python SDK's HTTP client.

Usage: python http_client.py URL AUDIT_LOG

The server (started by the Rust test) knows two bearer tokens: `alice-token` (principal alice,
FULL_AUTO, in-band approvals) and `bob-token` (principal bob, SHADOW). Checks that each principal
lists and may call what its own gate allows, that a request without a known token is refused with
401 and reaches no tool, that a body over the transport's limit is answered 413, that alice's HIGH_WRITE call is approved through the SDK's elicitation
callback and runs once, and that every audit record names the principal that made the call.
Exits 0 when every check passes, 1 on the first failure.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from checking import check, run, wire

SESSION_TIMEOUT_S = 60
async def approve(_ctx: Any, _request: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"decision": "approve"})


async def as_principal(url: str, token: str, body) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="auto", elicitation_callback=approve) as client:
            await body(client)


async def main(url: str, audit_log: str) -> None:
    with anyio.fail_after(SESSION_TIMEOUT_S):
        async def alice(client: Client) -> None:
            names = sorted(t.name for t in (await client.list_tools()).tools)
            check(names == ["notes.add", "notes.list", "notes.purge", "notes.remove"], "alice lists what FULL_AUTO allows", names)
            added = wire(await client.call_tool("notes.add", {"text": "standup at 10"}))
            check(added["content"][0]["text"] == "note 1 added", "alice adds a note", added)
            purged = wire(await client.call_tool("notes.purge", {}))
            check(purged["content"][0]["text"] == "1 notes purged", "alice's purge is approved in band and runs", purged)

        async def bob(client: Client) -> None:
            names = sorted(t.name for t in (await client.list_tools()).tools)
            check(names == ["notes.list"], "bob lists what SHADOW allows", names)
            listed = wire(await client.call_tool("notes.list", {}))
            check(not listed.get("isError"), "bob reads", listed)
            for tool, arguments in (("notes.add", {"text": "bob was here"}), ("notes.purge", {})):
                refused = wire(await client.call_tool(tool, arguments))
                check(refused.get("structuredContent", {}).get("code") == "MODE_NOT_ALLOWED", f"bob may not call {tool}", refused)

        await as_principal(url, "alice-token", alice)
        await as_principal(url, "bob-token", bob)
        # The same principal on a new connection sees the same list.
        async def alice_again(client: Client) -> None:
            names = sorted(t.name for t in (await client.list_tools()).tools)
            check("notes.purge" in names, "a new connection of alice lists the same", names)

        await as_principal(url, "alice-token", alice_again)

        # Without a token, or with one the server does not know: 401, before any MCP handling.
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        async with httpx2.AsyncClient() as http:
            for headers in ({}, {"Authorization": "Bearer mallory-token"}, {"Authorization": "Basic YWxpY2UtdG9rZW4="}):
                response = await http.post(url, json=request, headers={**headers, "Accept": "application/json, text/event-stream"})
                check(response.status_code == 401, f"{headers or 'no token'} is refused with 401", response.status_code)
                check("notes." not in response.text, "a refused request learns no tool", response.text)
            # A body over rmcp's limit (4 MiB by default) is answered 413, not left without an answer.
            big = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "notes.add", "arguments": {"text": "x" * (5 * 1024 * 1024)}}}
            response = await http.post(
                url,
                json=big,
                headers={"Authorization": "Bearer alice-token", "Accept": "application/json, text/event-stream"},
            )
            check(response.status_code == 413, "an oversized body is refused with 413", response.status_code)

    with open(audit_log, encoding="utf-8") as log:
        records = [json.loads(line) for line in log if line.strip()]
    check(len(records) >= 8, "the audit log has the calls", len(records))
    check(all(r.get("principal") in ("alice", "bob") and r.get("agent") == "team-notes" for r in records), "every record names its principal", records)
    bobs = [r for r in records if r["principal"] == "bob"]
    check(bobs and all(r.get("code") == "MODE_NOT_ALLOWED" for r in bobs if r["stage"] == "refused"), "bob's refusals are his", bobs)
    purge = [r for r in records if r["tool"] == "notes.purge" and r["stage"] == "exit"]
    check(len(purge) == 1 and purge[0]["principal"] == "alice" and purge[0].get("outcome") == "ok", "alice's purge ran once", purge)
    granted = [r for r in records if r["stage"] == "approval_granted"]
    check(len(granted) == 1 and granted[0].get("by") == "mcp-client" and granted[0]["principal"] == "alice", "approved in band", granted)


if __name__ == "__main__":
    run(main, 2, "mcp http", __doc__)
