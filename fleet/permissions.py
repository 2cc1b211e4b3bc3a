"""Permission prompts answered from anywhere: the records, the preview, and the hook (docs/permissions.md).

A Claude Code session launched with a permission mode that asks (``permission_mode = "default"``)
shows a dialog before a tool it has no grant for. fleet injects a ``PermissionRequest`` hook
(:func:`hook_entry`, merged into the ``--settings`` JSON spawn passes) whose process:

1. reads what Claude Code asks (tool, input, prompt id) from its stdin and records it in the daemon
   (``POST /v1/waves/{wave}/permissions``) with the participant's own token (named by its file);
2. waits, at most :data:`HOOK_WAIT` seconds, for the operator's answer from the daemon (a long-poll
   on the request) while it watches the session's transcript for the dialog being answered in the
   pane (a ``tool_result`` for that very tool call);
3. the operator's answer first: prints Claude Code's decision JSON (allow or deny) and exits 0;
   the pane first: records who answered there (``via = "pane"``) and what (the tool ran, or was
   rejected), prints nothing (the dialog already decided) and exits 0; neither within the bound,
   or the session gone: records the request expired and prints nothing, leaving the dialog to
   decide. It never exits 2 and never blocks the dialog: a hook that prints nothing leaves the
   decision to the dialog (claude-code.md §8).

What a caller may rely on:

- :func:`preview` is what is kept of a tool's input: at most :data:`PREVIEW_MAX` characters, one
  line, control characters shown as ``?``; a Bash call's command, a file tool's path, otherwise the
  input's compact JSON. It is stored and shown as text only: never run through a shell or tmux.
- The hook's wait bound :data:`HOOK_WAIT` is below the ``timeout`` of its settings entry
  (:data:`HOOK_TIMEOUT`), so Claude Code never kills it mid-answer.
- :func:`pending_note` is the one line ``fleet status`` shows for a waiting participant.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fleet.wire import field, record

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

PREVIEW_MAX = 200
"""Characters of a tool's input kept in a request (the rest is cut, marked with ``…``)."""
TOOL_MAX = 128
"""The longest tool name a request may carry (MCP tools are ``mcp__server__tool``)."""
HOOK_WAIT = 1800.0
"""Seconds the hook waits for an answer from the operator before it lets go (the dialog alone then
decides). Half an hour: long enough for an operator away from the desk to answer from the console
or a phone; the waiting hook is one idle process per prompt, and the dialog stays usable all along."""
HOOK_TIMEOUT = int(HOOK_WAIT) + 120
"""The ``timeout`` of the hook's settings entry: past the wait bound plus the time to record the
outcome, so Claude Code never kills the hook in the middle of an answer."""
MAX_WAIT_BOUND = 24 * 3600.0
"""The longest wait a request may announce (a request expires when its hook's wait ends)."""
POLL = 0.2
"""Seconds between two looks at the transcript while the hook waits (a stat, then only new bytes)."""

Behavior = Literal["allow", "deny"]
Outcome = Literal["allowed", "denied", "expired"]
State = Literal["pending", "allowed", "denied", "expired"]
Via = Literal["cli", "console", "channel", "pane", "hook"]
OPERATOR_VIAS: tuple[str, ...] = ("cli", "console", "channel")
"""How an operator's answer may arrive (``pane`` and ``hook`` are the session's own)."""


@record(extra="forbid")
class PermissionAsk:
    """What the hook records: the participant's prompt (``POST /v1/waves/{wave}/permissions``)."""

    participant: str = field(max_length=200)
    session_id: str = field(max_length=128)
    tool: str = field(min_length=1, max_length=TOOL_MAX)
    preview: str = field(default="", max_length=PREVIEW_MAX * 4)
    prompt_id: str = field(default="", max_length=128)
    wait: float = field(default=HOOK_WAIT, doc="Seconds the hook will wait: the request expires then.")


@record(extra="forbid")
class PermissionAnswer:
    """The operator's answer (``POST /v1/waves/{wave}/permissions/answer``). ``request_id`` '': the
    participant's pending request (its newest)."""

    participant: str = field(max_length=200)
    behavior: Behavior
    request_id: str = field(default="", max_length=200)
    via: Via = "cli"
    message: str = field(default="", max_length=1000)


@record(extra="forbid")
class PermissionSettled:
    """How a request ended without the operator (``POST /v1/waves/{wave}/permissions/{id}/settled``):
    answered in the pane (``via = "pane"``), or let go by the hook (``outcome = "expired"``)."""

    outcome: Outcome
    via: Literal["pane", "hook"] = "hook"
    message: str = field(default="", max_length=1000)


@record
class PermissionRequest:
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


@record
class PermissionList:
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


# ---------------------------------------------------------------- the settings entry


def hook_command(
    participant: str, wave: str, daemon: str, token_file: Path, *, python: str | None = None
) -> str:
    """The hook's shell command: every word quoted, the token named by its file only (no secret on
    a command line). ``exec``: the hook is the session's direct child (it notices the session end)."""
    words = [python or sys.executable, "-m", "fleet.permissions",
             "--participant", participant, "--wave", wave, "--daemon", daemon,
             "--token-file", str(token_file)]  # fmt: skip
    return "exec " + shlex.join(words)


def hook_entry(
    participant: str, wave: str, daemon: str, token_file: Path, *, python: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The ``hooks`` entries (event name -> matchers) that install the permission hook: every tool
    (no matcher), a synchronous command hook with :data:`HOOK_TIMEOUT`."""
    handler = {
        "type": "command",
        "command": hook_command(participant, wave, daemon, token_file, python=python),
        "timeout": HOOK_TIMEOUT,
    }
    return {"PermissionRequest": [{"hooks": [handler]}]}


def with_permission_hook(
    settings: str | None, participant: str, wave: str, daemon: str, token_file: Path
) -> str:
    """``settings`` (a ``--settings`` JSON, or None) with the permission hook added beside its hooks."""
    data: dict[str, Any] = json.loads(settings) if settings else {}
    hooks: dict[str, list[Any]] = data.setdefault("hooks", {})
    for event, matchers in hook_entry(participant, wave, daemon, token_file).items():
        hooks.setdefault(event, []).extend(matchers)
    return json.dumps(data, separators=(",", ":"))
