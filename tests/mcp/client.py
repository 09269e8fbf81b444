"""End-to-end check of the `mcp_server` example with the official MCP Python SDK, over stdio.

Usage: python client.py PATH_TO_MCP_SERVER

Starts the server once per scenario (each mode, hidden or marked tools, with and without an approver),
lists its tools and checks their names, annotations, `_meta` and hiding, then calls tools and checks
allowed calls, refusals, argument validation and unknown tools. Exits 0 when every check passes, 1 on
the first failure, with what was expected and what came back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from checking import check, run, wire

SESSION_TIMEOUT_S = 60
PROCESS_TIMEOUT_S = 30

ALL_MODES = ["SHADOW", "ADVISORY", "PARTIAL_AUTO", "FULL_AUTO"]


def tool(risk: str, modes: list[str], read_only: bool, destructive: bool, idempotent: bool, open_world: bool, output_schema: bool) -> dict[str, Any]:
    annotations = {
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": idempotent,
        "openWorldHint": open_world,
    }
    return {"risk": risk, "modes": modes, "annotations": annotations, "output_schema": output_schema}


# Every tool of the example: its risk, its allowed modes and its exact annotations.
TOOLS: dict[str, dict[str, Any]] = {
    "tickets.search": tool("READ_ONLY", ALL_MODES, read_only=True, destructive=False, idempotent=True, open_world=False, output_schema=True),
    "tickets.draft_reply": tool("PROPOSE_ONLY", ALL_MODES, read_only=True, destructive=False, idempotent=False, open_world=False, output_schema=True),
    "tickets.label": tool("LOW_WRITE", ["PARTIAL_AUTO", "FULL_AUTO"], read_only=False, destructive=False, idempotent=True, open_world=False, output_schema=True),
    "tickets.delete": tool("HIGH_WRITE", ["FULL_AUTO"], read_only=False, destructive=True, idempotent=False, open_world=False, output_schema=False),
    "tickets.await_reply": tool("READ_ONLY", ALL_MODES, read_only=True, destructive=False, idempotent=False, open_world=False, output_schema=False),
    "tickets.refund": tool("HIGH_WRITE", ["FULL_AUTO"], read_only=False, destructive=True, idempotent=False, open_world=False, output_schema=False),
    "web.fetch": tool("READ_ONLY", ALL_MODES, read_only=True, destructive=False, idempotent=False, open_world=True, output_schema=False),
}

READS = ["tickets.await_reply", "tickets.draft_reply", "tickets.search", "web.fetch"]


def error_code(exc: BaseException) -> int | None:
    """The JSON-RPC error code of an exception the SDK raised for an error response."""
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    return code if isinstance(code, int) else getattr(exc, "code", None)


class Server:
    """One connection to a fresh server process."""

    def __init__(self, session: ClientSession, label: str) -> None:
        self.session = session
        self.label = label

    async def tools(self) -> dict[str, dict[str, Any]]:
        listed = wire(await self.session.list_tools())
        check("nextCursor" not in listed, f"{self.label}: one page of tools", listed)
        return {tool["name"]: tool for tool in listed["tools"]}

    async def call(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        return wire(await self.session.call_tool(name, arguments))

    async def ok(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        result = await self.call(name, arguments)
        check(not result.get("isError", False), f"{self.label}: {name} succeeds", result)
        return result

    async def refused(self, name: str, arguments: dict[str, Any] | None, code: str) -> dict[str, Any]:
        result = await self.call(name, arguments)
        check(result.get("isError") is True, f"{self.label}: {name} is an error result", result)
        text = result["content"][0]["text"]
        check(
            text.startswith(f"{code}: "),
            f"{self.label}: {name} text starts with `{code}: `",
            result,
        )
        structured = result.get("structuredContent", {})
        check(structured.get("code") == code, f"{self.label}: {name} structured code {code}", result)
        check(
            text == f"{code}: {structured.get('message')}",
            f"{self.label}: {name} text is `<CODE>: <message>`",
            result,
        )
        return result


async def connect(binary: str, args: list[str], env: dict[str, str], label: str, body) -> None:
    params = StdioServerParameters(command=binary, args=args, env=env)
    with anyio.fail_after(SESSION_TIMEOUT_S):
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                info = wire(await session.initialize())
                check(info["serverInfo"]["name"] == "ticket-desk", f"{label}: server name", info)
                check("tools" in info["capabilities"], f"{label}: tools capability", info)
                await body(Server(session, label))


def check_definitions(label: str, tools: dict[str, dict[str, Any]], listed: list[str]) -> None:
    check(sorted(tools) == sorted(listed), f"{label}: listed tools are {sorted(listed)}", sorted(tools))
    for name, tool in tools.items():
        want = TOOLS[name]
        check(
            tool.get("annotations") == want["annotations"],
            f"{label}: annotations of {name} are {want['annotations']}",
            tool.get("annotations"),
        )
        meta = {"dev.toolgate/risk_level": want["risk"], "dev.toolgate/allowed_modes": want["modes"]}
        check(tool.get("_meta") == meta, f"{label}: _meta of {name} is {meta}", tool.get("_meta"))
        schema = tool["inputSchema"]
        check(schema.get("type") == "object", f"{label}: {name} input schema is an object", schema)
        check(
            schema.get("additionalProperties") is False,
            f"{label}: {name} input schema admits no other key",
            schema,
        )
        has_output = "outputSchema" in tool
        check(
            has_output == want["output_schema"],
            f"{label}: {name} has an output schema: {want['output_schema']}",
            tool,
        )
        if has_output:
            check(tool["outputSchema"].get("type") == "object", f"{label}: {name} output is an object")
        check(bool(tool.get("description")), f"{label}: {name} has a description", tool)


def visible_in(mode: str, approver: bool) -> list[str]:
    names = list(READS)
    if mode in ("PARTIAL_AUTO", "FULL_AUTO"):
        names.append("tickets.label")
    if mode == "FULL_AUTO" and approver:
        names += ["tickets.delete", "tickets.refund"]
    return names


async def scenario_mode(binary: str, mode: str, how: str) -> None:
    """Lists and calls in one mode, the mode given by flag, by environment or by default."""
    env: dict[str, str] = {}
    args: list[str] = []
    if how == "flag":
        args = ["--mode", mode]
    elif how == "env":
        env["TOOLGATE_MODE"] = mode
    label = f"{mode} ({how})"

    async def body(server: Server) -> None:
        tools = await server.tools()
        check_definitions(label, tools, visible_in(mode, approver=False))
        for name, tool in tools.items():
            check(
                not tool["description"].startswith("[DISABLED"),
                f"{label}: {name} is not marked disabled",
                tool,
            )

        # An allowed read: structured content, and the same JSON as text.
        found = await server.ok("tickets.search", {"query": "LOG"})
        ids = [t["id"] for t in found["structuredContent"]["tickets"]]
        check(ids == [101, 103], f"{label}: search finds tickets 101 and 103", found)
        check(
            json.loads(found["content"][0]["text"]) == found["structuredContent"],
            f"{label}: text content is the structured content's JSON",
            found,
        )
        draft = await server.ok("tickets.draft_reply", {"id": 102, "body": "We are on it."})
        check(
            draft["structuredContent"] == {"ticket": 102, "body": "We are on it.", "sent": False},
            f"{label}: draft_reply drafts",
            draft,
        )

        # Argument validation happens whatever the mode: unknown keys, missing keys, no arguments.
        bad = await server.refused("tickets.search", {"query": "x", "apiKey": "sk-live-123"}, "INVALID_PARAMS")
        check(bad["structuredContent"].get("path") == "apiKey", f"{label}: the path names apiKey", bad)
        check("sk-live-123" not in json.dumps(bad), f"{label}: the key's value is not echoed", bad)
        await server.refused("tickets.draft_reply", {"id": 101}, "INVALID_PARAMS")
        await server.refused("tickets.search", None, "INVALID_PARAMS")
        await server.refused("tickets.search", {"query": 7}, "INVALID_PARAMS")

        # A failing tool is an error result too.
        missing = await server.refused("tickets.draft_reply", {"id": 999, "body": "hi"}, "HANDLER_ERROR")
        check("there is no ticket 999" in missing["content"][0]["text"], f"{label}: handler message", missing)

        # Writes: what the mode refuses is refused with the gate's code, listed or not.
        if mode in ("SHADOW", "ADVISORY"):
            await server.refused("tickets.label", {"id": 101, "name": "urgent"}, "MODE_NOT_ALLOWED")
            await server.refused("tickets.delete", {"id": 104}, "MODE_NOT_ALLOWED")
        else:
            labelled = await server.ok("tickets.label", {"id": 101, "name": "urgent"})
            check(
                labelled["structuredContent"]["labels"] == ["urgent"],
                f"{label}: label adds the label",
                labelled,
            )
            again = await server.ok("tickets.search", {"query": "password"})
            check(
                again["structuredContent"]["tickets"][0]["labels"] == ["urgent"],
                f"{label}: the label is kept",
                again,
            )
            if mode == "PARTIAL_AUTO":
                await server.refused("tickets.delete", {"id": 104}, "MODE_NOT_ALLOWED")
            else:
                await server.refused("tickets.delete", {"id": 104}, "APPROVAL_REQUIRED")
        # The refused delete did not run.
        still = await server.ok("tickets.search", {"query": "close my account"})
        check(len(still["structuredContent"]["tickets"]) == 1, f"{label}: ticket 104 is still there", still)

        # A name that is no tool is a protocol error, not a tool result.
        try:
            result = await server.call("tickets.nope", {})
        except Exception as exc:  # the SDK's error class differs between versions
            check(error_code(exc) == -32602, f"{label}: unknown tool is JSON-RPC -32602", repr(exc))
        else:
            check(False, f"{label}: unknown tool is a protocol error, not a result", result)

    await connect(binary, args, env, label, body)


async def scenario_marked(binary: str) -> None:
    """With --show-disabled, refused tools are listed and marked."""
    label = "SHADOW --show-disabled"

    async def body(server: Server) -> None:
        tools = await server.tools()
        check_definitions(label, tools, list(TOOLS))
        for name, tool in tools.items():
            marked = tool["description"].startswith("[DISABLED in SHADOW mode] ")
            check(
                marked == (name in ("tickets.label", "tickets.delete", "tickets.refund")),
                f"{label}: {name} marked disabled iff the mode refuses it",
                tool["description"],
            )
        delete = tools["tickets.delete"]["description"]
        check(
            delete == "[DISABLED in SHADOW mode] Delete a ticket and its history for good.",
            f"{label}: the mark leads the description",
            delete,
        )
        await server.refused("tickets.label", {"id": 101, "name": "x"}, "MODE_NOT_ALLOWED")

    await connect(binary, ["--mode", "SHADOW", "--show-disabled"], {}, label, body)


async def scenario_approved(binary: str, audit_log: str) -> None:
    """FULL_AUTO with an approver: the HIGH_WRITE tool is listed and runs; the audit log records it."""
    label = "FULL_AUTO --approve-all"

    async def body(server: Server) -> None:
        tools = await server.tools()
        check_definitions(label, tools, visible_in("FULL_AUTO", approver=True))
        deleted = await server.ok("tickets.delete", {"id": 104})
        check(deleted["content"][0]["text"] == "ticket 104 deleted", f"{label}: delete runs", deleted)
        check("structuredContent" not in deleted, f"{label}: a string result is text only", deleted)
        await server.refused("tickets.delete", {"id": 104}, "HANDLER_ERROR")
        gone = await server.ok("tickets.search", {"query": "close my account"})
        check(gone["structuredContent"]["tickets"] == [], f"{label}: ticket 104 is gone", gone)

    args = ["--mode", "full-auto", "--approve-all", "--audit-log", audit_log]
    await connect(binary, args, {}, label, body)
    with open(audit_log, encoding="utf-8") as log:
        records = [json.loads(line) for line in log if line.strip()]
    text = json.dumps(records)
    check(len(records) >= 4, f"{label}: the audit log has a record per decision", records)
    check("tickets.delete" in text, f"{label}: the audit log names the deleted tool", records)


def scenario_bad_mode(binary: str) -> None:
    """An invalid mode, by flag or by environment, stops the server before it serves."""
    for args, env in ((["--mode", "TURBO"], {}), ([], {"TOOLGATE_MODE": "turbo"})):
        run = subprocess.run(
            [binary, *args],
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT_S,
        )
        what = f"invalid mode {args or env}"
        check(run.returncode != 0, f"{what}: exits with an error", run.returncode)
        check(run.stdout == "", f"{what}: prints nothing on stdout", run.stdout)
        check("turbo" in run.stderr.lower(), f"{what}: says which value is wrong", run.stderr)


async def main(binary: str) -> None:
    env_mode = os.environ.pop("TOOLGATE_MODE", None)
    if env_mode is not None:
        print(f"ignoring TOOLGATE_MODE={env_mode} from the environment", file=sys.stderr)
    await scenario_mode(binary, "SHADOW", "default")
    await scenario_mode(binary, "ADVISORY", "env")
    await scenario_mode(binary, "PARTIAL_AUTO", "flag")
    await scenario_mode(binary, "FULL_AUTO", "flag")
    await scenario_marked(binary)
    with tempfile.TemporaryDirectory() as tmp:
        await scenario_approved(binary, os.path.join(tmp, "audit.jsonl"))
    scenario_bad_mode(binary)


if __name__ == "__main__":
    run(main, 1, "mcp e2e", __doc__)
