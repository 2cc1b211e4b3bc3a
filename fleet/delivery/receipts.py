"""Receipts: what a Claude Code session's own record says reached its model.

A push accepted by the MCP pipe is not a delivery: Claude Code drops channel notifications when the
account has no channels, when the provider is not Anthropic, by policy, and sometimes while busy,
and says nothing to the server. Its transcript (``~/.claude/projects/<slug>/<session-id>.jsonl``,
or under ``$CLAUDE_CONFIG_DIR``; found by the session id, never by re-deriving the slug) records
every one it took. :class:`Transcript` reads it incrementally and turns the lines that carry fleet's
``<channel source="fleet" …>`` blocks into :class:`Receipt` s:

* ``queued`` — ``{"type": "queue-operation", "operation": "enqueue", "content": "<channel …>…"}``:
  Claude Code accepted a push (or hook feedback) into its queue;
* ``entered`` — the block entered the conversation: a ``user`` line whose ``origin.kind`` is
  ``channel`` (a push that woke the session) or ``task-notification`` (an ``asyncRewake`` hook's
  feedback), or an ``attachment`` line of type ``queued_command`` with such an origin (a push absorbed
  into a turn that was running).

What a caller may rely on: a line that is not complete (the session is writing it), not JSON, or not
one of those is never taken as a receipt. A file that cannot be read, shrank, or holds no line of
Claude Code's format is reported in :attr:`Transcript.problem` (once per cause) and yields nothing.
Reading resumes at :attr:`Transcript.offset` bytes, so a restarted reader (``offset`` from the
delivery state) rescans nothing; each call costs what was appended since the last.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from fleet.wire import Record

log = logging.getLogger(__name__)

How = Literal["queued", "entered"]
Via = Literal["channel", "hook"]

_BLOCK = re.compile(r'<channel source="fleet"((?: [a-z_]+="[^"]*")*)>')
_ATTR = re.compile(r' (blip_id|blip_ids)="([^"]*)"')
READ_CHUNK = 8 << 20
"""Bytes read at most per call: a long transcript read from its start (the state fold reads the whole
session) is taken a chunk a call, not into memory at once."""
MAX_LINE = 16 << 20
"""A line longer than this is skipped (never a receipt): a transcript line is one message."""


class Receipt(Record, kw_only=True):
    """Blips the session's record shows queued or entered, and when (Unix seconds)."""

    blip_ids: list[str]
    how: How
    via: Via
    at: float


def projects_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where Claude Code keeps transcripts: ``$CLAUDE_CONFIG_DIR/projects`` or ``~/.claude/projects``
    (of ``env``, by default this process's environment)."""
    env = os.environ if env is None else env
    base = env.get("CLAUDE_CONFIG_DIR")
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return (Path(base) if base else home / ".claude") / "projects"


def transcript_of(session_id: str, env: Mapping[str, str] | None = None) -> Path | None:
    """The transcript of ``session_id`` if Claude Code wrote one (it does with the first message)."""
    found = sorted(projects_dir(env).glob(f"*/{session_id}.jsonl"))
    return found[0] if found else None


def blip_ids_in(text: str) -> list[str]:
    """The blip ids of every fleet ``<channel>`` block in ``text``, in order."""
    out: list[str] = []
    for block in _BLOCK.finditer(text):
        for name, value in _ATTR.findall(block[1]):
            out += value.split(",") if name == "blip_ids" else [value]
    return [i for i in out if i]


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return []


def stamp(line: Mapping[str, object], default: float = 0.0) -> float:
    """A transcript line's ``timestamp`` (ISO 8601) as Unix time, else ``default``."""
    raw = line.get("timestamp")
    if isinstance(raw, str):
        try:
            return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return default


_ORIGINS: dict[str, Via] = {"channel": "channel", "task-notification": "hook"}


def receipt_of(line: dict[str, Any]) -> Receipt | None:
    """The receipt one parsed transcript line carries, or None."""
    kind = line.get("type")
    if kind == "queue-operation" and line.get("operation") == "enqueue":
        content = str(line.get("content") or "")
        ids = blip_ids_in(content)
        via: Via = "hook" if content.lstrip().startswith("<task-notification") else "channel"
        return Receipt(blip_ids=ids, how="queued", via=via, at=stamp(line)) if ids else None
    texts: list[str] = []
    origin: Any = None
    if kind == "user" and isinstance(line.get("message"), dict):
        origin = line.get("origin")
        texts = _texts(line["message"].get("content"))
    elif kind == "attachment" and isinstance(line.get("attachment"), dict):
        attachment = line["attachment"]
        if attachment.get("type") == "queued_command":
            origin = attachment.get("origin")
            texts = [str(attachment.get("prompt") or "")]
    entered_via = _ORIGINS.get(str(origin.get("kind"))) if isinstance(origin, dict) else None
    if entered_via is None:
        return None
    ids = [i for t in texts for i in blip_ids_in(t)]
    return Receipt(blip_ids=ids, how="entered", via=entered_via, at=stamp(line)) if ids else None


class Transcript:
    """One session's transcript, read from ``offset`` on. Not thread-safe (one reader per session).

    A subclass reads another agent's record the same way by translating its lines into transcript
    lines (:meth:`lines_of`; Codex's rollout, :class:`fleet.delivery.rollout.Rollout`)."""

    format_name = "Claude Code's transcript"

    def __init__(
        self,
        session_id: str,
        *,
        offset: int = 0,
        path: Path | None = None,
        observer: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.session_id = session_id
        self.observer = observer
        """Called with every complete line of Claude Code's format as it is read, once (the usage
        counter of :mod:`fleet.usage` and the channel's state fold, :mod:`fleet.agentstate`, read
        the same pass)."""
        self.path = path
        self.offset = offset
        self.problem = ""
        """Why nothing can be read now ('' when reading works): no file yet, unreadable, not Claude
        Code's format. Each cause is logged once."""
        self._partial = b""
        self._known_format = False
        self._complete = 0
        """Complete lines seen (to tell "not Claude Code's format" from "nothing written yet")."""
        self.last_at = 0.0
        """The newest timestamp of a conversation line read (evidence that the session carried on).
        Queue lines do not count: Claude Code writes them apart from the conversation, and at a
        session's first turn a later push's queue line reached the disk before the turn's own lines
        (the first pushes' queue lines among them), so its date said nothing of what came before."""

    def _locate(self) -> Path | None:
        if self.path is None:
            self.path = transcript_of(self.session_id)
        return self.path

    def missing(self) -> str:
        """Why there is no file to read yet."""
        return "no transcript yet (Claude Code writes it with the first message)"

    def lines_of(self, line: dict[str, Any]) -> list[dict[str, Any]]:
        """The transcript lines one parsed line of the file says (here: itself)."""
        return [line]

    def _trouble(self, why: str) -> list[Receipt]:
        if why != self.problem:
            log.warning("receipts unavailable for session %s: %s", self.session_id, why)
        self.problem = why
        return []

    def read(self) -> list[Receipt]:
        """The receipts in what was appended since the last call (or since ``offset``)."""
        path = self._locate()
        if path is None:
            return self._trouble(self.missing())
        try:
            if os.stat(path).st_size == self.offset and not self.problem:
                return []  # nothing appended: no open (the state reader looks a few times a second)
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:  # rewritten or truncated: start over (receipts are idempotent)
                    self.offset, self._partial = 0, b""
                f.seek(self.offset)
                data = f.read(min(size - self.offset, READ_CHUNK))
        except OSError as exc:
            return self._trouble(f"cannot read {path}: {exc.strerror or exc}")
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # the line being written, or b""
        if len(self._partial) > MAX_LINE:
            self._partial = b""
        out: list[Receipt] = []
        for raw in lines:
            if not raw.strip() or len(raw) > MAX_LINE:
                continue
            self._complete += 1
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(line, dict) or "type" not in line:
                continue
            self._known_format = True
            if line.get("type") != "queue-operation":  # see last_at
                self.last_at = max(self.last_at, stamp(line))
            for item in self.lines_of(line):
                if self.observer is not None:
                    self.observer(item)
                got = receipt_of(item)
                if got is not None:
                    out.append(got)
        if not self._known_format and self._complete:
            return self._trouble(f"{path} holds no line of {self.format_name} format")
        self.problem = ""
        return out

    @property
    def consumed(self) -> int:
        """Bytes fully read (complete lines): where a restarted reader resumes."""
        return self.offset - len(self._partial)
