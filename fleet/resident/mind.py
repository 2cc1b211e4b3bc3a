"""The mind's state, read from its Claude Code session's own transcript (never from its screen).

What Claude Code 2.1.332 writes, and what this module takes from it (verified with the real binary
over the scripted model; docs/resident.md):

- A turn **opens** with a user line that is not a tool result: a channel push that woke the session
  (``origin.kind == "channel"``), hook feedback (``task-notification``) or a prompt typed into the
  pane (``human``, or no origin). A push is first a ``queue-operation`` ``enqueue`` then ``dequeue``
  line, written at once, while its user line may be written only with the model's answer: those
  count as the turn's opening too.
- A turn that **completed** ends with ``{"type": "system", "subtype": "turn_duration"}``.
- A turn that **failed** ends with an assistant line carrying ``"isApiErrorMessage": true`` (after
  Claude Code's own retries), and no ``turn_duration``.
- Blips pushed while a turn runs are queued (``queue-operation`` ``enqueue``) and enter together
  when it ends: one wake for all of them. Their ``dequeue`` may be written *before* the running
  turn's ``turn_duration``, and their user line only with the next turn's answer (seconds later):
  so a ``turn_duration`` ends the mind's turning only when every dequeued input has entered (a
  wake's user line, or a ``queued_command`` attachment when a running turn absorbed it). Queue
  operations are ``enqueue``, ``dequeue`` and ``remove`` (withdrawn: it never enters).
- Each model request of the main thread is also an ``api-request`` line (``querySource``
  ``repl_main_thread``), written when it is sent: turning.

:class:`MindReader` reads the file incrementally (only what was appended since the last call) and
keeps the fold: ``turning``, turns completed, the run of consecutive failed turns, when the last
turn ended.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fleet.delivery.receipts import stamp, transcript_of


@dataclass
class MindFold:
    turning: bool = False
    turns: int = 0
    """Turns completed."""
    failed_streak: int = 0
    """Consecutive failed turns since the last completed one."""
    failed_total: int = 0
    last_end: float | None = None
    """Unix time the last turn ended (the file's mtime when it was read), None: never."""
    last_error: str = ""
    interrupted: int = 0
    """Turns cancelled by an interrupt."""
    failed_at: list[float] = field(default_factory=list)
    """When each failed turn of the current run ended (Unix time, from the line's timestamp)."""
    queued: int = 0
    """Inputs enqueued and not yet dequeued or removed."""
    taken: int = 0
    """Inputs dequeued whose user line (or ``queued_command`` attachment) is not written yet: the
    turn that takes them has begun."""

    def failed_since(self, t: float) -> int:
        """Consecutive failed turns that ended at or after ``t`` (a revived mind starts afresh)."""
        return sum(1 for at in self.failed_at if at >= t)


def _is_wake(obj: Mapping[str, object]) -> bool:
    """A user line that opens a turn (or enters one): not a tool result; a channel, hook or typed
    origin (a push's line is ``isMeta``), or real text that is not a meta line or a reminder."""
    if obj.get("type") != "user":
        return False
    message = obj.get("message")
    if not isinstance(message, dict):
        return False
    content = message.get("content")
    if isinstance(content, list):
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return False
        texts = [str(b.get("text", "")) for b in content if isinstance(b, dict)]
    else:
        texts = [str(content or "")]
    origin = obj.get("origin")
    kind = origin.get("kind") if isinstance(origin, dict) else None
    if kind in ("channel", "task-notification", "human"):
        return True
    if obj.get("isMeta"):
        return False
    # Claude Code's own reminders ride as user lines too: only real text opens a turn
    return any(t.strip() and not t.lstrip().startswith("<system-reminder>") for t in texts)


def _absorbed(obj: Mapping[str, object]) -> bool:
    """A ``queued_command`` attachment: a queued input a running turn took in at a tool boundary."""
    attachment = obj.get("attachment")
    return (
        obj.get("type") == "attachment"
        and isinstance(attachment, dict)
        and (attachment.get("type") == "queued_command")
    )


class MindReader:
    """The fold of one session's transcript, read incrementally."""

    def __init__(self, session_id: str, env: Mapping[str, str] | None = None) -> None:
        self.session_id = session_id
        self.env = dict(env) if env is not None else dict(os.environ)
        self.path: Path | None = None
        self.offset = 0
        self.fold = MindFold()

    def read(self) -> MindFold:
        if self.path is None:
            self.path = transcript_of(self.session_id, self.env)
            if self.path is None:
                return self.fold
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
            mtime = self.path.stat().st_mtime
        except OSError:
            return self.fold
        end = data.rfind(b"\n")
        if end < 0:
            return self.fold
        self.offset += end + 1
        for raw in data[: end + 1].splitlines():
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                self._take(obj, mtime)
        return self.fold

    def _take(self, obj: Mapping[str, object], mtime: float) -> None:
        f = self.fold
        kind, operation = obj.get("type"), obj.get("operation")
        if kind == "user" and "[Request interrupted by user" in json.dumps(obj.get("message")):
            f.turning, f.last_end = False, mtime  # Escape in the pane (fleet resident interrupt)
            f.interrupted += 1
            f.queued = f.taken = 0
        elif kind == "queue-operation" and operation in ("enqueue", "dequeue", "remove"):
            if operation == "enqueue":
                f.queued += 1
            else:
                f.queued = max(0, f.queued - 1)
                f.taken += operation == "dequeue"
            f.turning = f.turning or operation != "remove"
        elif _is_wake(obj) or _absorbed(obj):
            f.taken = max(0, f.taken - 1)
            f.turning = True  # (the wake's own user line may be written only with the answer)
        elif kind == "api-request" and str(obj.get("querySource", "")).startswith("repl_main_thread"):
            f.turning = True  # the main thread's request (side requests, e.g. a title, come after)
        elif kind == "system" and obj.get("subtype") == "turn_duration":
            f.turns, f.failed_streak, f.last_end = f.turns + 1, 0, mtime
            f.turning = f.taken > 0  # a dequeued input not entered yet: the next turn has begun
            f.taken = 0
            f.failed_at = []
        elif obj.get("type") == "assistant" and obj.get("isApiErrorMessage"):
            message = obj.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            text = " ".join(
                str(b.get("text", "")) for b in content or [] if isinstance(b, dict)
            ) if isinstance(content, list) else ""  # fmt: skip
            f.turning, f.taken, f.last_end = f.taken > 0, 0, mtime
            f.failed_streak += 1
            f.failed_total += 1
            f.failed_at.append(stamp(obj, mtime))
            f.last_error = text[:200]
