"""Permission prompts' records: what the hook asks, the operator answers and the store keeps.

The wire side of :mod:`fleet.permissions` (the hook, the transcript watch and the window flag stay
there): the store, the daemon, the client and the channel use these without loading the feature.
The bounds and the one-line texts are here because the store applies them when it records a request.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Literal

from fleet.wire import Meta, Record

PREVIEW_MAX = 200
"""Characters of a tool's input kept in a request (the rest is cut, marked with ``…``)."""
TOOL_MAX = 128
"""The longest tool name a request may carry (MCP tools are ``mcp__server__tool``)."""
HOOK_WAIT = 1800.0
"""Seconds the hook waits for an answer from the operator before it lets go (the dialog alone then
decides). Half an hour: long enough for an operator away from the desk to answer from the console
or a phone; the waiting hook is one idle process per prompt, and the dialog stays usable all along."""
MAX_WAIT_BOUND = 24 * 3600.0
"""The longest wait a request may announce (a request expires when its hook's wait ends)."""

Behavior = Literal["allow", "deny"]
Outcome = Literal["allowed", "denied", "expired"]
State = Literal["pending", "allowed", "denied", "expired"]
Via = Literal["cli", "console", "channel", "pane", "hook"]
OPERATOR_VIAS: tuple[str, ...] = ("cli", "console", "channel")
"""How an operator's answer may arrive (``pane`` and ``hook`` are the session's own)."""


class PermissionAsk(Record, kw_only=True, forbid_unknown_fields=True):
    """What the hook records: the participant's prompt (``POST /v1/waves/{wave}/permissions``)."""

    participant: Annotated[str, Meta(max_length=200)]
    session_id: Annotated[str, Meta(max_length=128)]
    tool: Annotated[str, Meta(min_length=1, max_length=TOOL_MAX)]
    preview: Annotated[str, Meta(max_length=PREVIEW_MAX * 4)] = ""
    prompt_id: Annotated[str, Meta(max_length=128)] = ""
    wait: Annotated[float, Meta(description="Seconds the hook will wait: the request expires then.")] = (
        HOOK_WAIT
    )


class PermissionAnswer(Record, kw_only=True, forbid_unknown_fields=True):
    """The operator's answer (``POST /v1/waves/{wave}/permissions/answer``). ``request_id`` '': the
    participant's pending request (its newest)."""

    participant: Annotated[str, Meta(max_length=200)]
    behavior: Behavior
    request_id: Annotated[str, Meta(max_length=200)] = ""
    via: Via = "cli"
    message: Annotated[str, Meta(max_length=1000)] = ""


class PermissionSettled(Record, kw_only=True, forbid_unknown_fields=True):
    """How a request ended without the operator (``POST /v1/waves/{wave}/permissions/{id}/settled``):
    answered in the pane (``via = "pane"``), or let go by the hook (``outcome = "expired"``)."""

    outcome: Outcome
    via: Literal["pane", "hook"] = "hook"
    message: Annotated[str, Meta(max_length=1000)] = ""


class PermissionRequest(Record, kw_only=True):
    """One permission prompt and what became of it.

    ``state``: ``pending`` while the hook waits (and before ``expires_at``), else ``allowed`` /
    ``denied`` (by ``answered_by`` via ``via``) or ``expired`` (the hook let go, or its wait ended:
    the dialog alone decides)."""

    id: str
    wave_id: str
    participant: str
    session_id: str
    tool: str
    preview: str
    asked_at: str
    expires_at: str
    state: State
    prompt_id: str = ""
    answered_by: str = ""
    """The operator principal, or ``pane`` (the dialog answered where the session runs)."""
    via: str = ""
    answered_at: str | None = None
    message: str = ""


class PermissionList(Record, kw_only=True):
    requests: list[PermissionRequest]


# ---------------------------------------------------------------- what is shown


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def bounded(text: str, limit: int = PREVIEW_MAX) -> str:
    """``text`` on one line, control characters as ``?``, at most ``limit`` characters."""
    flat = _CONTROL.sub("?", text.replace("\r\n", "\n").replace("\n", " ⏎ "))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def preview(tool: str, tool_input: object) -> str:
    """What is kept of a tool call's input (see the module docstring)."""
    if isinstance(tool_input, dict):
        for key in ("command", "file_path", "path", "url", "pattern"):
            value = tool_input.get(key)
            if isinstance(value, str) and value:
                return bounded(value)
    try:
        text = json.dumps(tool_input, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(tool_input)
    return bounded(text)


def pending_note(req: PermissionRequest) -> str:
    """``waiting for permission: Bash (ls -la)``: the note of a waiting participant's row."""
    return (
        f"waiting for permission: {req.tool} ({req.preview})"
        if req.preview
        else (f"waiting for permission: {req.tool}")
    )
