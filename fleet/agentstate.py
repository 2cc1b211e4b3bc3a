"""What an agent session is doing: one state per session, folded from what the session reports.

Every view of an agent (``fleet status``, ``fleet ls``, the console, ``fleet resident status``,
supervise) shows the one :class:`~fleet.models.AgentState` this module folds. Where fleet cannot
see, the state is ``unknown`` and says why: never a guess that reads like a fact (STYLE 18). The
sources, cheapest first:

- **The transcript** (``~/.claude/projects/<slug>/<session-id>.jsonl``), which the channel already
  reads incrementally for receipts (:class:`fleet.delivery.receipts.Transcript`): every complete line
  goes once through :meth:`Fold.take`. What Claude Code 2.1.332 writes (verified with the real binary
  over the scripted model; docs/resident.md):

  * a turn **opens** with a user line that is not a tool result: a channel push that woke the
    session (``origin.kind == "channel"``), hook feedback (``task-notification``) or a prompt typed
    into the pane (``human``, or no origin). A push is first a ``queue-operation`` ``enqueue`` then
    ``dequeue`` line, written at once, while its user line may be written only with the model's
    answer: those count as the turn's opening too. Each main-thread model request is an
    ``api-request`` line (``querySource`` ``repl_main_thread``): turning;
  * a turn that **completed** ends with ``{"type": "system", "subtype": "turn_duration"}``; one
    that **failed** ends with an assistant line carrying ``"isApiErrorMessage": true`` (after
    Claude Code's own retries) and no ``turn_duration``; an interrupt writes a user line
    ``[Request interrupted by user…``;
  * blips pushed while a turn runs are queued (``enqueue``) and enter together when it ends. Their
    ``dequeue`` may be written *before* the running turn's ``turn_duration`` and their user line only
    with the next turn's answer: so a ``turn_duration`` ends the turn only when every dequeued input
    has entered (a wake's user line, or a ``queued_command`` attachment when a running turn absorbed
    it). Queue operations are ``enqueue``, ``dequeue`` and ``remove`` (withdrawn: it never enters);
  * a tool **runs** from the assistant line holding its ``tool_use`` block until the user line holding
    the ``tool_result`` of the same id.

- **Hooks** fleet injects inline (:func:`hook_settings`) for what the transcript does not say: each
  event's JSON is appended by ``cat`` to a 0600 file per session (:func:`hook_file`) that the channel
  tails (:class:`HookLog`). ``Notification`` with ``notification_type: "permission_prompt"``: the
  session waits for a permission (the tool is the one running in the transcript); another
  ``Notification`` (not ``idle_prompt``): it waits at a dialog; ``StopFailure``: the turn failed;
  ``SessionEnd``: the session is over.
- **A pending permission request** known elsewhere (the permission feature's record of a
  ``PermissionRequest`` hook): :func:`state_of`'s ``permission`` argument. It wins over the hooks'.
- **The pane** (alive, dead and how, its last lines): whoever sees it (``fleet status`` on the
  machine the panes run on) overrides with :func:`dead`.

The channel sends the folded state in every presence report (:mod:`fleet.delivery.presence`); the
daemon shows what was reported while the channel is heard and ``unknown (channel gone since …)``
once it is not (:class:`fleet.daemon.PresenceBook`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from fleet.delivery.receipts import receipt_of, stamp
from fleet.models import MAX_LINES, AgentState
from fleet.wire import Value, field

log = logging.getLogger(__name__)

VERIFIED = (2, 1, 332)
"""The oldest Claude Code whose transcript and hooks this fold was checked against: a session that
writes an older ``version`` is ``unknown`` (a fold that misses its turn ends would say turning)."""

PREVIEW = 200
"""Characters of a tool input, an error or a dialog line a state carries."""

HOOK_EVENTS = ("Notification", "StopFailure", "SessionEnd")
"""The events whose JSON the state hook appends (:func:`hook_settings`)."""

MAX_HOOK_READ = 1 << 20
"""Bytes of the hook file read at most per look (a hook line is one small JSON object)."""


def json_lines(buffered: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """The JSON objects on the complete lines of ``buffered`` (a line that is not one is skipped),
    and what follows the last newline: the line still being written, for the next read to finish.
    What every tail of an appended JSONL file (a transcript, a hook's log) reads with."""
    *lines, rest = buffered.split(b"\n")
    out: list[dict[str, Any]] = []
    for raw in lines:
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out, rest


class Pending(Value):
    """A permission the session waits for: the tool, a preview of its input, since when (Unix)."""

    tool: str
    input: str = ""
    since: float | None = None


class Fold(Value):
    """The fold of one session's transcript (and hook events), fed line by line.

    :meth:`take` takes one parsed transcript line, :meth:`hook` one hook event; neither fails on any
    input (a line of another shape changes nothing). The fields are what the resident's keeper
    and ``fleet resident status`` read too (:mod:`fleet.resident.mind`)."""

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
    lines: int = 0
    """Transcript lines taken."""
    version: str = ""
    """The Claude Code version the newest line names ('' when none does)."""
    opened_at: float | None = None
    """When the running turn began (the line's stamp), None when not turning."""
    ended_at: float | None = None
    """When the last turn ended, completed or failed or interrupted (the line's stamp)."""
    last_failed: bool = False
    """The last turn that ended failed (an API error), not completed or interrupted."""
    woken_by: list[str] = field(default_factory=list)
    """The blips whose delivery opened the running turn, and those that entered it since."""
    woken_in: list[str] = field(default_factory=list)
    """The wavelets (``WAVE/WAVELET``) of those blips."""
    running: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Tools running now: tool_use id -> (name, input preview)."""
    queued_ids: list[tuple[list[str], list[str]]] = field(default_factory=list)
    """The blip ids and wavelets of each queued input (fleet's pushes), oldest first."""
    taken_ids: list[tuple[list[str], list[str]]] = field(default_factory=list)
    """The blip ids of the dequeued inputs the next turn takes."""
    wait: Pending | None = None
    """A permission prompt a ``Notification`` hook reported, for the tools running then."""
    wait_tools: frozenset[str] = frozenset()
    dialog: str = ""
    """A dialog a ``Notification`` hook reported ('' when none), until the transcript moves on."""
    dialog_since: float | None = None
    dialog_mark: int = 0
    ended: str = ""
    """Why the session ended (a ``SessionEnd`` hook's reason), '' while it runs."""
    ended_since: float | None = None

    def failed_since(self, t: float) -> int:
        """Consecutive failed turns that ended at or after ``t`` (a revived mind starts afresh)."""
        return sum(1 for at in self.failed_at if at >= t)

    # ------------------------------------------------------------ the transcript

    def take(self, obj: Mapping[str, object], mtime: float = 0.0) -> None:
        """Fold one parsed transcript line (``mtime``: the file's, for lines without a stamp)."""
        self.lines += 1
        version = obj.get("version")
        if isinstance(version, str) and version:
            self.version = version
        at = stamp(obj, mtime)
        kind, operation = obj.get("type"), obj.get("operation")
        was = self.turning
        if kind == "user" and "[Request interrupted by user" in json.dumps(obj.get("message")):
            self.turning, self.last_end = False, mtime  # Escape in the pane (fleet resident interrupt)
            self.interrupted += 1
            self.queued = self.taken = 0
            self.queued_ids, self.taken_ids = [], []
            self._ended(at, failed=False)
            return
        if kind == "queue-operation" and operation in ("enqueue", "dequeue", "remove"):
            if operation == "enqueue":
                self.queued += 1
                got = receipt_of(dict(obj))
                self.queued_ids.append((got.blip_ids, _wavelets(obj)) if got else ([], []))
            else:
                self.queued = max(0, self.queued - 1)
                ids = self.queued_ids.pop(0) if self.queued_ids else ([], [])
                if operation == "dequeue":
                    self.taken += 1
                    self.taken_ids.append(ids)
            self.turning = self.turning or operation != "remove"
            if operation == "enqueue" and not was and self.turning:
                self.woken_by, self.woken_in = list(self.queued_ids[-1][0]), list(self.queued_ids[-1][1])
        elif _is_wake(obj) or _absorbed(obj):
            self.taken = max(0, self.taken - 1)
            self.turning = True  # (the wake's own user line may be written only with the answer)
            got = receipt_of(dict(obj))
            if got is not None:  # every blip that entered the turn is what it works on
                if not was:
                    self.woken_by, self.woken_in = [], []
                self.woken_by += [i for i in got.blip_ids if i not in self.woken_by]
                self.woken_in += [w for w in _wavelets(obj) if w not in self.woken_in]
        elif kind == "api-request" and str(obj.get("querySource", "")).startswith("repl_main_thread"):
            self.turning = True  # the main thread's request (side requests, e.g. a title, come after)
        elif kind == "system" and obj.get("subtype") == "turn_duration":
            self.turns, self.failed_streak, self.last_end = self.turns + 1, 0, mtime
            self.failed_at = []
            self._ended(at, failed=False)
            return
        elif kind == "assistant" and obj.get("isApiErrorMessage"):
            message = obj.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            text = " ".join(
                str(b.get("text", "")) for b in content or [] if isinstance(b, dict)
            ) if isinstance(content, list) else ""  # fmt: skip
            self.last_end = mtime
            self.failed_streak += 1
            self.failed_total += 1
            self.failed_at.append(at)
            self.last_error = text[:PREVIEW]
            self._ended(at, failed=True)
            return
        elif kind == "assistant":
            for block in _blocks(obj):
                if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    self.running[str(block["id"])] = (
                        str(block.get("name") or "?"),
                        _preview(block.get("input")),
                    )
        if kind == "user":
            for block in _blocks(obj):
                if block.get("type") == "tool_result":
                    self.running.pop(str(block.get("tool_use_id")), None)
        if self.turning and not was:
            self.opened_at = at
            self.last_failed = False
        if self.wait is not None and not (self.wait_tools & self.running.keys()):
            self.wait = None  # answered: its tool ran (or was refused)
        if self.dialog and self.lines > self.dialog_mark:
            self.dialog = ""  # the session moved on past the dialog

    def restarted(self) -> None:
        """The session's process (re)started (``--resume``) after the lines taken so far: what they
        left open is over — a turn cut off by the old process's end, its tools, a wait, a dialog —
        and a failed last turn is history (the new process sits at its prompt)."""
        self.turning, self.running, self.wait, self.dialog = False, {}, None, ""
        self.queued = self.taken = 0
        self.queued_ids, self.taken_ids, self.woken_by, self.woken_in = [], [], [], []
        self.last_failed, self.opened_at = False, None
        self.ended = ""

    def _ended(self, at: float, *, failed: bool) -> None:
        """A turn ended: a dequeued input not entered yet means the next turn has begun."""
        self.turning = self.taken > 0
        self.taken = 0
        self.woken_by = [i for ids, _ in self.taken_ids for i in ids] if self.turning else []
        self.woken_in = list(dict.fromkeys(w for _, ws in self.taken_ids for w in ws)) if self.turning else []
        self.taken_ids = []
        self.running = {}
        self.wait, self.wait_tools = None, frozenset()
        self.dialog = ""
        self.ended_at = at
        self.last_failed = failed
        self.opened_at = at if self.turning else None

    # ------------------------------------------------------------ hooks

    def hook(self, event: Mapping[str, object], at: float) -> None:
        """Fold one hook event's JSON (``at``: when it was read, Unix time)."""
        name = event.get("hook_event_name")
        if name == "Notification":
            kind = event.get("notification_type")
            message = first_line(event.get("message"))
            if kind == "permission_prompt":
                if self.running:  # the tool that asks is the one running (none: already answered)
                    tool, preview = next(reversed(self.running.values()))
                    self.wait = Pending(tool=tool, input=preview, since=at)
                    self.wait_tools = frozenset(self.running)
            elif kind != "idle_prompt" and message:  # idle_prompt: at the prompt, nothing asked
                self.dialog, self.dialog_since, self.dialog_mark = message, at, self.lines
        elif name == "StopFailure":
            # (2.1.332 sends ``error``, a type such as server_error, and ``last_assistant_message``,
            # the text the transcript's error line also holds)
            keys = ("last_assistant_message", "error_message", "error", "message")
            error = next((first_line(event.get(k)) for k in keys if event.get(k)), "")
            if not (self.last_failed and self.last_error):  # the transcript's error line says more
                self.last_error = error or "the turn failed (StopFailure)"
                self.ended_at = at
            self.turning, self.last_failed = False, True
            self.running, self.wait, self.opened_at = {}, None, None
        elif name == "SessionEnd":
            reason = first_line(event.get("reason")) or "ended"
            if reason != "clear":  # /clear starts a new session in the same process
                self.ended, self.ended_since = reason, at


def _blocks(obj: Mapping[str, object]) -> list[dict[str, Any]]:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


_WAVELET = re.compile(r'<channel source="fleet"[^>]*? wavelet="([^"]*)"')


def _wavelets(obj: Mapping[str, object]) -> list[str]:
    """The wavelets fleet's ``<channel>`` blocks in a transcript line name, in order, once each."""
    texts: list[str] = [str(obj.get("content") or "")]
    attachment = obj.get("attachment")
    if isinstance(attachment, dict):
        texts.append(str(attachment.get("prompt") or ""))
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        texts += [str(b.get("text", "")) for b in content if isinstance(b, dict)]
    return list(dict.fromkeys(w for t in texts for w in _WAVELET.findall(t)))


def _preview(value: object) -> str:
    """A tool input at a glance: a Bash command or a file path as it is, else compact JSON."""
    if isinstance(value, dict):
        for key in ("command", "file_path", "path", "url", "pattern", "prompt"):
            if isinstance(value.get(key), str):
                return first_line(value[key])
    try:
        return first_line(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    except (TypeError, ValueError):
        return ""


def first_line(value: object) -> str:
    """The first non-blank line of ``value`` (a string), cut to :data:`PREVIEW` characters."""
    if not isinstance(value, str):
        return ""
    first = next((ln.strip() for ln in value.splitlines() if ln.strip()), "")
    return first[:PREVIEW]


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


def _version(text: str) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(g) for g in m.groups()) if m else None


# ---------------------------------------------------------------- the state


def state_of(
    fold: Fold,
    *,
    problem: str = "",
    permission: Pending | None = None,
    started: float | None = None,
    ready: float | None = None,
    dialog: str = "",
    dialog_since: float | None = None,
) -> AgentState:
    """The session's state from its fold. ``problem``: why its transcript cannot be read now ('' when
    it can; "no transcript yet" while the session has written nothing); ``permission``: a request it
    waits on that another source saw (the permission feature's hook), over the hooks' own;
    ``started``: when the session was seen starting (a ``starting`` state's since); ``ready``: when
    it was seen at its prompt (Claude Code finished its MCP handshake with the channel): a session
    that has written nothing yet is idle from then, not starting; ``dialog``: the first line of a
    dialog the session's screen shows (read from the pane by whoever sees it), since
    ``dialog_since``: it wins over the hooks' dialog."""
    if fold.ended:
        return AgentState(kind="dead", since=fold.ended_since, exit=f"session ended: {fold.ended}")
    if problem.startswith("no transcript yet") and not fold.lines:
        if ready is not None:
            return AgentState(kind="idle", since=ready)
        return AgentState(kind="starting", since=started)
    if problem:  # what was read before says nothing of now
        return AgentState(kind="unknown", why=f"no transcript access: {problem}")
    seen = _version(fold.version)
    if seen is not None and seen < VERIFIED:
        floor = ".".join(map(str, VERIFIED))
        return AgentState(
            kind="unknown",
            why=f"Claude Code {fold.version} is older than {floor}, the oldest whose transcript fleet reads",
        )
    wait = permission or fold.wait
    if wait is not None:
        return AgentState(kind="permission", since=wait.since, tool=wait.tool, input=wait.input[:PREVIEW])
    if dialog:
        return AgentState(kind="dialog", since=dialog_since, dialog=first_line(dialog))
    if fold.dialog:
        return AgentState(kind="dialog", since=fold.dialog_since, dialog=fold.dialog)
    if fold.turning:
        tools = ", ".join(name for name, _ in fold.running.values())
        return AgentState(
            kind="turning",
            since=fold.opened_at,
            woken_by=list(fold.woken_by),
            wavelets=list(fold.woken_in),
            tool=tools,
        )
    if fold.last_failed:
        return AgentState(kind="failed", since=fold.ended_at, error=fold.last_error or "the turn failed")
    if fold.lines or ready is not None:
        return AgentState(kind="idle", since=fold.ended_at or ready)
    return AgentState(kind="starting", since=started)


def dead(exit: str, lines: list[str], since: float | None = None) -> AgentState:
    """The state of a session whose pane is dead (``exit``: how it ended, as tmux tells it)."""
    kept = [ln.rstrip() for ln in lines if ln.strip()][-MAX_LINES:]
    return AgentState(kind="dead", since=since, exit=exit, lines=kept)


def unknown(why: str, since: float | None = None) -> AgentState:
    return AgentState(kind="unknown", since=since, why=why)


WAITS = ("permission", "dialog", "failed")
"""States that need the operator: listed first by ``fleet status``."""


def needs_operator(state: AgentState | None) -> bool:
    return state is not None and state.kind in WAITS


def describe(state: AgentState | None, now: float | None = None) -> str:
    """One line for people: ``idle 3m``, ``turning 12s (Bash; woken by 01J…)``, ``waiting for
    permission: Bash (rm -rf build)``, ``failed: API Error: 500 …``, ``dead (status 1)``,
    ``unknown (no transcript access: …)``."""
    if state is None:
        return "unknown (no state reported: the daemon or the channel is older than agent states)"
    t = datetime.now().timestamp() if now is None else now
    age = f" {_span(t - state.since)}" if state.since is not None else ""
    k = state.kind
    if k == "turning":
        extra = [
            x for x in (state.tool, "woken by " + ", ".join(state.woken_by) if state.woken_by else "") if x
        ]
        return f"turning{age}" + (f" ({'; '.join(extra)})" if extra else "")
    if k == "permission":
        return f"waiting for permission: {state.tool}" + (f" ({state.input})" if state.input else "") + age
    if k == "dialog":
        return f"waiting at a dialog: {state.dialog}{age}"
    if k == "failed":
        return f"failed: {state.error}"
    if k == "dead":
        return f"dead ({state.exit})" if state.exit else "dead"
    if k == "unknown":
        return f"unknown ({state.why})" if state.why else "unknown"
    return f"{k}{age}"


def _span(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 120:
        return f"{s}s"
    return f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


# ---------------------------------------------------------------- hooks


def hook_file(directory: Path, session_id: str) -> Path:
    """Where the state hook of ``session_id`` appends its events (``directory``: the channels' state
    directory). The session id is Claude Code's uuid: only ``[0-9a-f-]`` reaches the path."""
    safe = re.sub(r"[^0-9A-Za-z_-]", "_", session_id)[:128]
    return directory / "hooks" / f"{safe}.jsonl"


def hook_command(path: Path) -> str:
    """The state hook's shell command: append the event's JSON (stdin) and a newline to ``path``,
    created 0600. One ``sh`` and one ``cat``: no fleet start-up (~100 ms) per event. The path is
    quoted; no text of the session's reaches the shell."""
    return f"umask 077; {{ cat; echo; }} >> {shlex.quote(str(path))}"


def hook_entries(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The ``hooks`` entries of the state hook (merged into spawn's ``--settings`` JSON by
    :func:`fleet.spawn.settings_json`): one command per event of :data:`HOOK_EVENTS`."""
    handler = {"type": "command", "command": hook_command(path), "timeout": 10}
    return {event: [{"hooks": [handler]}] for event in HOOK_EVENTS}


class HookLog:
    """The tail of one session's hook file: complete lines since the last call, each once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""
        self._size = -1

    def prepare(self) -> None:
        """Create the file (0600, its directory 0700) so the hook only ever appends to it."""
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.close(fd)
        except OSError as exc:
            log.warning("cannot create the state hook's file %s: %s", self.path, exc)

    def read(self) -> list[dict[str, Any]]:
        """The events appended since the last call (a line still being written waits)."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return []
        if size == self._size:
            return []
        if size < self.offset:
            self.offset, self._partial = 0, b""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(min(size - self.offset, MAX_HOOK_READ))
        except OSError:
            return []
        self._size = self.offset + len(data) if len(data) < size - self.offset else size
        self.offset += len(data)
        out, self._partial = json_lines(self._partial + data)
        return out
