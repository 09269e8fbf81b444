"""Approvals, list changes and cancellation of the `mcp_server` example, with the official MCP Python SDK.

Usage: python flows.py PATH_TO_MCP_SERVER

- In band (`--approvals in-band`, a client of protocol 2026-07-28): the SDK's `Client` answers the
  server's `InputRequired` elicitation form through its `elicitation_callback` and retries by itself:
  approved, the refund runs once; rejected, the reason is the tool result. The refused retries are
  driven by hand with the SDK's session (`session.call_tool(..., request_state=...,
  input_responses=..., allow_input_required=True)`): a replayed state, a forged one, one of another
  connection, and a retry with changed arguments are refused with their codes, and the body does not
  run (the audit log holds one `ok` exit per approved call, and the refunds are numbered in order).
  A client of the initialize handshake, which cannot answer a form, is refused out of band.
- Out of band (`--approvals out-of-band --operator ...`): refused as pending, the operator approves on
  the example's operator channel, the retried call runs once, and a third call waits again.
- `notifications/tools/list_changed` reaches the client after the operator lowers the gate, and its
  next `tools/list` is narrower.
- Cancellation: a call of the slow `tickets.await_reply` cancelled by the client (the SDK sends
  `notifications/cancelled` when the task awaiting the call is cancelled) leaves an exit record with
  outcome `cancelled`, and the server answers the next call. A message over the server's size limit
  (`--max-message`) is answered with an `Invalid Request` error, not silence.

Every wait is bounded. Exits 0 when every check passes, 1 on the first failure.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
from typing import Any, Callable

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged

from checking import check, run, wire

SESSION_TIMEOUT_S = 60
WAIT_TIMEOUT_S = 30
APPROVAL = "toolgate/approval"
REFUND = "tickets.refund"

def refused_with(result: Any, code: str, what: str) -> dict[str, Any]:
    result = wire(result)
    check(result.get("isError") is True, f"{what}: an error result", result)
    check(result.get("structuredContent", {}).get("code") == code, f"{what}: code {code}", result)
    check(result["content"][0]["text"].startswith(f"{code}: "), f"{what}: text starts with {code}", result)
    return result


async def state_invalid(call: Any, what: str) -> None:
    """A request state that fails its integrity check is a JSON-RPC error, as the protocol requires."""
    try:
        result = await call
    except MCPError as error:
        code = (error.data or {}).get("code") if isinstance(error.data, dict) else None
        check(code == "APPROVAL_STATE_INVALID", f"{what}: APPROVAL_STATE_INVALID", str(error))
        check(error.code == -32602, f"{what}: invalid params", str(error))
        return
    check(False, f"{what}: a JSON-RPC error", wire(result))


def text_of(result: Any) -> str:
    return wire(result)["content"][0]["text"]


def records(audit_log: str) -> list[dict[str, Any]]:
    if not os.path.exists(audit_log):
        return []
    with open(audit_log, encoding="utf-8") as log:
        return [json.loads(line) for line in log if line.strip()]


def ok_runs(audit_log: str, tool: str) -> int:
    """How many times the body of `tool` ran to an `ok` end, by the audit log."""
    return sum(1 for r in records(audit_log) if r["tool"] == tool and r["stage"] == "exit" and r.get("outcome") == "ok")


async def wait_for(what: str, found: Callable[[], Any]) -> Any:
    """Polls `found` until it returns something truthy; fails the check after WAIT_TIMEOUT_S."""
    with anyio.move_on_after(WAIT_TIMEOUT_S):
        while True:
            value = found()
            if value:
                return value
            await anyio.sleep(0.05)
    check(False, f"waited {WAIT_TIMEOUT_S} s for {what}")


def read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


class Operator:
    """The example's operator channel: one command a line, one answer a line (`list` ends with `.`)."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT_TIMEOUT_S)
        self.file = self.sock.makefile("rw", encoding="utf-8", newline="\n")

    def say(self, line: str) -> str:
        self.file.write(line + "\n")
        self.file.flush()
        return self.file.readline().strip()

    def pending(self) -> list[str]:
        self.file.write("list\n")
        self.file.flush()
        lines = []
        while (line := self.file.readline().strip()) != ".":
            lines.append(line)
        return lines

    def close(self) -> None:
        self.file.close()
        self.sock.close()


async def operator_of(errlog: str) -> Operator:
    address = await wait_for(
        "the operator channel's address on stderr",
        lambda: (m := re.search(r"operator channel on (\S+)", read(errlog))) and m.group(1),
    )
    return Operator(address)


def params(binary: str, *args: str) -> StdioServerParameters:
    return StdioServerParameters(command=binary, args=list(args), env={})


async def approve_form(_ctx: Any, request: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"decision": "approve"})


async def scenario_in_band(binary: str, tmp: str) -> None:
    label = "in band"
    audit = os.path.join(tmp, "in-band.jsonl")
    errlog = os.path.join(tmp, "in-band.err")
    args = ("--mode", "FULL_AUTO", "--approvals", "in-band", "--audit-log", audit)
    forms: list[dict[str, Any]] = []

    async def answer(_ctx: Any, request: Any) -> types.ElicitResult:
        forms.append(wire(request))
        if "no-refund" in request.message or '"cents":999' in request.message:
            return types.ElicitResult(action="accept", content={"decision": "reject", "reason": "not for this ticket"})
        return types.ElicitResult(action="accept", content={"decision": "approve"})

    with open(errlog, "w") as err, anyio.fail_after(SESSION_TIMEOUT_S):
        async with Client(stdio_client(params(binary, *args), errlog=err), mode="auto", elicitation_callback=answer) as client:
            check(client.protocol_version == "2026-07-28", f"{label}: the modern protocol", client.protocol_version)

            # Approved through the form: the call runs, once.
            done = await client.call_tool(REFUND, {"id": 101, "cents": 500, "card": "4242-secret"})
            check(text_of(done) == "refund 1 of 500 cents on ticket 101", f"{label}: approved, it runs", wire(done))
            check(len(forms) == 1, f"{label}: one form was shown", forms)
            form = forms[0]
            check(form.get("mode") == "form", f"{label}: an elicitation form", form)
            message = form["message"]
            for part in ("tool: tickets.refund", "risk: HIGH_WRITE", "mode: FULL_AUTO", '"card":"[REDACTED]"', '"cents":500'):
                check(part in message, f"{label}: the form shows {part}", message)
            check("4242-secret" not in json.dumps(form), f"{label}: the redacted argument is not in the form", form)
            decision = form["requestedSchema"]["properties"]["decision"]
            check(decision.get("enum") == ["approve", "reject"], f"{label}: approve or reject", form)
            check("reason" in form["requestedSchema"]["properties"], f"{label}: a reason", form)
            check(ok_runs(audit, REFUND) == 1, f"{label}: the body ran once", records(audit))

            # Rejected through the form: the reason is the tool result, and the body does not run.
            rejected = await client.call_tool(REFUND, {"id": 102, "cents": 999, "card": "1"})
            result = refused_with(rejected, "APPROVAL_REJECTED", f"{label}: rejected")
            check("not for this ticket" in result["content"][0]["text"], f"{label}: the reason is the result", result)
            check(ok_runs(audit, REFUND) == 1, f"{label}: a rejected call does not run", records(audit))
            by = [r for r in records(audit) if r["stage"] == "approval_rejected"]
            check(by and by[-1].get("by") == "mcp-client", f"{label}: the log names who rejected", by)

            # By hand: the first round is InputRequired with a sealed state.
            session = client.session
            arguments = {"id": 103, "cents": 7, "card": "1"}
            first = await session.call_tool(REFUND, arguments, allow_input_required=True)
            check(isinstance(first, types.InputRequiredResult), f"{label}: input required", wire(first))
            check(APPROVAL in (first.input_requests or {}), f"{label}: the form's key", wire(first))
            state = first.request_state
            check(bool(state), f"{label}: a request state", wire(first))
            yes = {APPROVAL: {"action": "accept", "content": {"decision": "approve"}}}

            # Changed arguments with the state of other arguments: refused, nothing runs.
            changed = await session.call_tool(
                REFUND, {**arguments, "cents": 70000}, request_state=state, input_responses=yes, allow_input_required=True
            )
            refused_with(changed, "APPROVAL_MISMATCH", f"{label}: changed arguments")
            other_tool = await session.call_tool(
                "tickets.delete", {"id": 103}, request_state=state, input_responses=yes, allow_input_required=True
            )
            refused_with(other_tool, "APPROVAL_MISMATCH", f"{label}: another tool")

            # A forged state: a changed byte, and one made up.
            tampered = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
            for forged in (tampered, "rs1.AAAAAAAAAAA.AAAA", "approved"):
                await state_invalid(
                    session.call_tool(
                        REFUND, arguments, request_state=forged, input_responses=yes, allow_input_required=True
                    ),
                    f"{label}: forged state {forged[:12]}",
                )
            check(ok_runs(audit, REFUND) == 1, f"{label}: no refused retry ran", records(audit))

            # The genuine answer runs the call once; the same state again is a replay.
            done = await session.call_tool(REFUND, arguments, request_state=state, input_responses=yes, allow_input_required=True)
            check(text_of(done) == "refund 2 of 7 cents on ticket 103", f"{label}: the genuine retry runs", wire(done))
            replay = await session.call_tool(REFUND, arguments, request_state=state, input_responses=yes, allow_input_required=True)
            refused_with(replay, "APPROVAL_REUSED", f"{label}: a replayed state")
            check(ok_runs(audit, REFUND) == 2, f"{label}: the replay did not run", records(audit))

            # A declined form rejects.
            again = await session.call_tool(REFUND, {"id": 104, "cents": 1, "card": "1"}, allow_input_required=True)
            declined = await session.call_tool(
                REFUND,
                {"id": 104, "cents": 1, "card": "1"},
                request_state=again.request_state,
                input_responses={APPROVAL: {"action": "decline"}},
                allow_input_required=True,
            )
            refused_with(declined, "APPROVAL_REJECTED", f"{label}: a declined form")
            stolen = (await session.call_tool(REFUND, {"id": 104, "cents": 2, "card": "1"}, allow_input_required=True)).request_state

        # A state sealed for one connection opens in no other, even of the same key's process.
        async with Client(stdio_client(params(binary, *args), errlog=err), mode="auto", elicitation_callback=approve_form) as other:
            await state_invalid(
                other.session.call_tool(
                    REFUND, {"id": 104, "cents": 2, "card": "1"}, request_state=stolen, input_responses=yes, allow_input_required=True
                ),
                f"{label}: a state of another server",
            )

        # A client of the initialize handshake cannot answer a form: the call waits for an operator.
        async with Client(stdio_client(params(binary, *args), errlog=err), mode="legacy") as legacy:
            check(legacy.protocol_version != "2026-07-28", f"{label}: a legacy session", legacy.protocol_version)
            result = wire(await legacy.call_tool(REFUND, {"id": 101, "cents": 1, "card": "1"}))
            code = result.get("structuredContent", {}).get("code")
            check(code == "APPROVAL_PENDING", f"{label}: legacy client refused to wait", result)


async def scenario_out_of_band(binary: str, tmp: str) -> None:
    label = "out of band"
    audit = os.path.join(tmp, "out-of-band.jsonl")
    errlog = os.path.join(tmp, "out-of-band.err")
    args = ("--mode", "FULL_AUTO", "--approvals", "out-of-band", "--operator", "127.0.0.1:0", "--audit-log", audit)
    arguments = {"id": 102, "cents": 1250, "card": "4242-secret"}
    with open(errlog, "w") as err, anyio.fail_after(SESSION_TIMEOUT_S):
        async with Client(stdio_client(params(binary, *args), errlog=err), mode="auto", elicitation_callback=approve_form) as client:
            first = wire(await client.call_tool(REFUND, arguments))
            check(first.get("isError") is True, f"{label}: the first call is refused", first)
            # A server that takes no in-band answers takes no request state either.
            await state_invalid(
                client.session.call_tool(
                    REFUND,
                    arguments,
                    request_state="rs1.AAAAAAAAAAA.AAAA",
                    input_responses={APPROVAL: {"action": "accept", "content": {"decision": "approve"}}},
                    allow_input_required=True,
                ),
                f"{label}: a request state out of band",
            )
            code = first.get("structuredContent", {}).get("code")
            check(code == "APPROVAL_PENDING", f"{label}: refused as pending", first)
            check(ok_runs(audit, REFUND) == 0, f"{label}: nothing ran", records(audit))

            operator = await operator_of(errlog)
            try:
                pending = operator.pending()
                check(len(pending) == 1, f"{label}: one pending request", pending)
                check(REFUND in pending[0] and '"card":"[REDACTED]"' in pending[0], f"{label}: the operator sees it", pending)
                check("4242-secret" not in pending[0], f"{label}: redacted for the operator too", pending)
                request_id = pending[0].split()[0]
                check(operator.say(f"approve {request_id}").startswith("ok"), f"{label}: the operator approves")
                check(operator.say(f"approve {request_id}").startswith("error"), f"{label}: once only")
            finally:
                operator.close()

            done = await client.call_tool(REFUND, arguments)
            check(text_of(done) == "refund 1 of 1250 cents on ticket 102", f"{label}: the retry runs", wire(done))
            again = wire(await client.call_tool(REFUND, arguments))
            check(again.get("structuredContent", {}).get("code") == "APPROVAL_REUSED", f"{label}: the approval was used up", again)
            check(ok_runs(audit, REFUND) == 1, f"{label}: the body ran once", records(audit))
            changed = wire(await client.call_tool(REFUND, {**arguments, "cents": 1}))
            check(changed.get("structuredContent", {}).get("code") == "APPROVAL_PENDING", f"{label}: other arguments wait for their own approval", changed)


async def scenario_list_changed(binary: str, tmp: str) -> None:
    label = "list_changed"
    errlog = os.path.join(tmp, "list-changed.err")
    args = ("--mode", "FULL_AUTO", "--approvals", "out-of-band", "--operator", "127.0.0.1:0")
    changes: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.append(message.method)

    with open(errlog, "w") as err, anyio.fail_after(SESSION_TIMEOUT_S):
        async with Client(stdio_client(params(binary, *args), errlog=err), mode="legacy", message_handler=on_message) as client:
            caps = wire(client.server_capabilities)
            check(caps.get("tools", {}).get("listChanged") is True, f"{label}: advertised", caps)
            before = {t.name for t in (await client.list_tools()).tools}
            check({REFUND, "tickets.label"} <= before, f"{label}: FULL_AUTO lists the writes", sorted(before))
            operator = await operator_of(errlog)
            try:
                check(operator.say("lower PARTIAL_AUTO").startswith("ok"), f"{label}: lowered")
                await wait_for("list_changed after lowering to PARTIAL_AUTO", lambda: len(changes) >= 1)
                partial = {t.name for t in (await client.list_tools()).tools}
                check(REFUND not in partial and "tickets.delete" not in partial, f"{label}: narrower", sorted(partial))
                check("tickets.label" in partial, f"{label}: PARTIAL_AUTO keeps label", sorted(partial))
                check(operator.say("lower SHADOW").startswith("ok"), f"{label}: lowered again")
                await wait_for("list_changed after lowering to SHADOW", lambda: len(changes) >= 2)
                shadow = {t.name for t in (await client.list_tools()).tools}
                check(shadow < partial and "tickets.label" not in shadow, f"{label}: narrower again", sorted(shadow))
            finally:
                operator.close()


async def scenario_list_changed_listen(binary: str, tmp: str) -> None:
    """A client of the 2026-07-28 protocol hears of the change on its `subscriptions/listen` stream."""
    label = "list_changed (listen)"
    errlog = os.path.join(tmp, "listen.err")
    args = ("--mode", "FULL_AUTO", "--operator", "127.0.0.1:0")
    with open(errlog, "w") as err, anyio.fail_after(SESSION_TIMEOUT_S):
        async with Client(stdio_client(params(binary, *args), errlog=err), mode="auto") as client:
            check(client.protocol_version == "2026-07-28", f"{label}: the modern protocol", client.protocol_version)
            async with client.listen(tools_list_changed=True) as subscription:
                check(wire(subscription.honored).get("toolsListChanged") is True, f"{label}: honored", wire(subscription.honored))
                before = {t.name for t in (await client.list_tools()).tools}
                check("tickets.label" in before, f"{label}: FULL_AUTO lists label", sorted(before))
                operator = await operator_of(errlog)
                try:
                    check(operator.say("lower SHADOW").startswith("ok"), f"{label}: lowered")
                finally:
                    operator.close()
                with anyio.fail_after(WAIT_TIMEOUT_S):
                    event = await subscription.__anext__()
                check(isinstance(event, ToolsListChanged), f"{label}: a tools event", repr(event))
                after = {t.name for t in (await client.list_tools()).tools}
                check(after < before and "tickets.label" not in after, f"{label}: narrower", sorted(after))


async def scenario_cancel(binary: str, tmp: str) -> None:
    label = "cancel"
    audit = os.path.join(tmp, "cancel.jsonl")
    errlog = os.path.join(tmp, "cancel.err")
    tool = "tickets.await_reply"
    with open(errlog, "w") as err, anyio.fail_after(SESSION_TIMEOUT_S):
        args = ("--audit-log", audit, "--max-message", "16384")
        async with Client(stdio_client(params(binary, *args), errlog=err), mode="legacy") as client:
            async with anyio.create_task_group() as tg:

                async def slow_call() -> None:
                    await client.call_tool(tool, {"id": 101, "seconds": 3600})
                    check(False, f"{label}: the call should not have completed")

                tg.start_soon(slow_call)
                await wait_for("the body to start", lambda: "waiting for a reply to ticket 101" in read(errlog))
                tg.cancel_scope.cancel()

            def exit_record() -> Any:
                return next((r for r in records(audit) if r["tool"] == tool and r["stage"] == "exit"), None)

            record = await wait_for("the cancelled call's exit record", exit_record)
            check(record.get("outcome") == "cancelled", f"{label}: the exit record says cancelled", record)
            check("stopped waiting" not in read(errlog), f"{label}: the body did not finish", read(errlog))

            # A message over the server's limit is answered with an error, and the next one is served.
            try:
                result = await client.call_tool("tickets.search", {"query": "x" * 20000})
            except MCPError as error:
                check(error.code == -32600, f"{label}: an oversized message is an Invalid Request", repr(error))
                data = error.error.data
                check(isinstance(data, dict) and data.get("code") == "MESSAGE_TOO_LARGE", f"{label}: it says why", repr(error))
            else:
                check(False, f"{label}: an oversized message is not served", wire(result))
            found = wire(await client.call_tool("tickets.search", {"query": "login"}))
            check(not found.get("isError"), f"{label}: the server answers the next call", found)


async def main(binary: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        await scenario_in_band(binary, tmp)
        await scenario_out_of_band(binary, tmp)
        await scenario_list_changed(binary, tmp)
        await scenario_list_changed_listen(binary, tmp)
        await scenario_cancel(binary, tmp)


if __name__ == "__main__":
    run(main, 1, "mcp flows", __doc__)
