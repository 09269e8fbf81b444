"""What every MCP test client shares: checks that count themselves and say what came back when they
fail, and the run of a client's `main` that reports how many checks passed or which one failed first."""

from __future__ import annotations

import json
import sys
from typing import Any, Awaitable, Callable

import anyio

checks = 0


class CheckFailed(Exception):
    pass


def first_check_failed(exc: BaseException) -> CheckFailed | None:
    """The failed check inside `exc`, which may be an exception group, if there is one."""
    if isinstance(exc, CheckFailed):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = first_check_failed(inner)
        if found is not None:
            return found
    return None


def check(condition: bool, what: str, got: Any = None) -> None:
    global checks
    checks += 1
    if not condition:
        detail = "" if got is None else f"\n  got: {json.dumps(got, indent=2, default=str)}"
        raise CheckFailed(f"{what}{detail}")


def wire(model: Any) -> Any:
    """A result of the SDK as it was on the wire (camelCase keys, `_meta`), whatever the SDK version."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def run(main: Callable[..., Awaitable[None]], arguments: int, name: str, usage: str | None) -> None:
    """Runs `main` with the command line's `arguments` arguments (else exits with `usage`), and exits 0
    saying how many checks passed, or 1 with the first check that failed."""
    if len(sys.argv) != arguments + 1:
        sys.exit(usage)
    try:
        anyio.run(main, *sys.argv[1:])
    except BaseException as exc:  # task groups wrap what they raise in exception groups
        failed = first_check_failed(exc)
        if failed is None:
            raise
        print(f"FAILED after {checks} checks: {failed}", file=sys.stderr)
        sys.exit(1)
    print(f"{name}: {checks} checks passed")
