"""Reading a Claude Code session's own record: ``~/.claude/projects/<slug>/<session-id>.jsonl``.

One JSON object a line (Claude Code 2.1.332; the last line may be half written while it runs). The
lines this module reads:

* ``{"type": "queue-operation", "operation": "enqueue", "content": "<channel …>…"}``: a channel
  notification accepted into the queue (:meth:`Transcript.enqueued`).
* ``{"type": "user", "origin": {"kind": "channel", "server": "fleet"}, "message": {"content":
  "<channel …>…"}}``: the notification entering the conversation as a wake
  (:meth:`Transcript.delivered`). One that arrives while a turn runs is instead absorbed into it: a
  ``queue-operation`` ``remove`` line (``reason: "absorbed_mid_turn"``), then an ``attachment`` line
  ``{"type": "queued_command", "prompt": "<channel …>…", "origin": {"kind": "channel", …}}``.
* ``{"type": "user", "origin": {"kind": "human"}, …}``: a prompt typed into the terminal.
* hook feedback (an ``asyncRewake`` hook's exit 2): a user line with ``origin: {"kind":
  "task-notification", "producer": "session-task"}`` whose text is ``<task-notification>
  <summary>{rewakeSummary}</summary></task-notification><system-reminder>{rewakeMessage}:
  {the hook's stderr}</system-reminder>`` (:meth:`Transcript.hook_feedback`; fleet's hook writes
  ``<channel …>`` blocks there, :meth:`Transcript.hook_blocks`).
* ``{"type": "assistant", "message": {"content": [...], "usage": {...}}}``: the model's answers,
  with ``tool_use`` blocks (:meth:`Transcript.tool_uses`) and usage.
* ``tool_result`` blocks in user lines (:meth:`Transcript.tool_results`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .script import ChannelBlock, channel_blocks


def transcript_path(home: Path, session_id: str) -> Path | None:
    """The session's transcript under ``home`` (found by id, never by re-deriving the slug)."""
    found = sorted((home / ".claude" / "projects").glob(f"*/{session_id}.jsonl"))
    return found[0] if found else None


def _texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text":
                yield b.get("text", "")


@dataclass(frozen=True)
class ToolUse:
    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class ToolResult:
    tool_use_id: str
    text: str
    is_error: bool


class Transcript:
    """One session's transcript, re-read on every call (the session may still be writing it)."""

    def __init__(self, home: Path, session_id: str) -> None:
        self.home = home
        self.session_id = session_id

    @property
    def path(self) -> Path | None:
        return transcript_path(self.home, self.session_id)

    def lines(self) -> list[dict[str, Any]]:
        path = self.path
        if path is None:
            return []
        out = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                obj = json.loads(line)
            except ValueError:  # the line being written
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out

    def user_lines(self) -> list[dict[str, Any]]:
        return [ln for ln in self.lines() if ln.get("type") == "user" and isinstance(ln.get("message"), dict)]

    def _entered(self, *origins: str) -> list[str]:
        """Texts that entered the conversation with ``origin.kind`` one of ``origins``: as a user
        line (a wake), or as a ``queued_command`` attachment (absorbed into a running turn), in the
        order they entered."""
        out: list[str] = []
        for ln in self.lines():
            message, attachment = ln.get("message"), ln.get("attachment")
            if ln.get("type") == "user" and isinstance(message, dict):
                if (ln.get("origin") or {}).get("kind") in origins:
                    out += _texts(message.get("content"))
            elif (
                isinstance(attachment, dict)
                and attachment.get("type") == "queued_command"
                and (attachment.get("origin") or {}).get("kind") in origins
            ):
                out.append(str(attachment.get("prompt") or ""))
        return out

    def entered(self) -> list[ChannelBlock]:
        """Channel blocks that entered the conversation by either path, pushed or in hook feedback,
        in the order they entered (:meth:`delivered` and :meth:`hook_blocks` each keep only their own
        path's order: put one after the other, a blip the hook brought between two pushes reads as
        the last)."""
        return [b for text in self._entered("channel", "task-notification") for b in channel_blocks(text)]

    def delivered(self) -> list[ChannelBlock]:
        """Channel blocks pushed by the channel that entered the conversation, in order."""
        return [b for text in self._entered("channel") for b in channel_blocks(text)]

    def enqueued(self) -> list[ChannelBlock]:
        """Channel blocks Claude Code accepted into its queue (``queue-operation`` enqueue lines),
        pushed ones and those in hook feedback alike."""
        out: list[ChannelBlock] = []
        for ln in self.lines():
            if ln.get("type") == "queue-operation" and ln.get("operation") == "enqueue":
                out += channel_blocks(str(ln.get("content") or ""))
        return out

    def hook_feedback(self) -> list[str]:
        """The texts of ``asyncRewake`` hook feedback that entered the conversation, in order."""
        return self._entered("task-notification")

    def settled(self) -> bool:
        """Everything Claude Code queued has entered the conversation and the model has answered
        after the last of it (no wake pending or in flight)."""
        lines = self.lines()
        queued = sum(
            1 for ln in lines if ln.get("type") == "queue-operation" and ln.get("operation") == "enqueue"
        )
        if len(self._entered("channel")) + len(self._entered("task-notification")) < queued:
            return False
        last_in = max((i for i, ln in enumerate(lines) if _is_wake(ln)), default=-1)
        last_out = max((i for i, ln in enumerate(lines) if ln.get("type") == "assistant"), default=-1)
        return last_out > last_in

    def hook_blocks(self) -> list[ChannelBlock]:
        """Channel blocks that came in hook feedback."""
        return [b for text in self.hook_feedback() for b in channel_blocks(text)]

    def prompts(self) -> list[str]:
        return [
            text
            for ln in self.user_lines()
            if (ln.get("origin") or {}).get("kind") == "human"
            for text in _texts(ln["message"].get("content"))
        ]

    def assistant_messages(self) -> list[dict[str, Any]]:
        return [
            ln["message"]
            for ln in self.lines()
            if ln.get("type") == "assistant" and isinstance(ln.get("message"), dict)
        ]

    def tool_uses(self, name: str | None = None) -> list[ToolUse]:
        out = []
        for m in self.assistant_messages():
            for b in m.get("content") or []:
                if isinstance(b, dict) and b.get("type") == "tool_use" and name in (None, b.get("name")):
                    out.append(ToolUse(b.get("id", ""), b.get("name", ""), dict(b.get("input") or {})))
        return out

    def tool_results(self) -> list[ToolResult]:
        out = []
        for ln in self.user_lines():
            content = ln["message"].get("content")
            for b in content if isinstance(content, list) else []:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    text = (
                        "\n".join(_texts(b.get("content")))
                        if not isinstance(b.get("content"), str)
                        else b["content"]
                    )
                    out.append(ToolResult(b.get("tool_use_id", ""), text, bool(b.get("is_error"))))
        return out

    def usage(self) -> list[dict[str, Any]]:
        """``message.usage`` of each assistant line."""
        return [dict(m["usage"]) for m in self.assistant_messages() if isinstance(m.get("usage"), dict)]


def _is_wake(ln: dict[str, Any]) -> bool:
    """A line that brings a channel push or hook feedback into the conversation."""
    kinds = ("channel", "task-notification")
    if ln.get("type") == "user":
        return (ln.get("origin") or {}).get("kind") in kinds
    attachment = ln.get("attachment")
    return (
        isinstance(attachment, dict)
        and attachment.get("type") == "queued_command"
        and (attachment.get("origin") or {}).get("kind") in kinds
    )
