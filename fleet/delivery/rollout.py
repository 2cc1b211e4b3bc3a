"""Codex's rollout: what a Codex session's own record says reached its model (docs/agents.md).

Codex CLI (0.169.0, checked) writes each thread to ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<start
time>-<thread id>.jsonl``, one JSON object a line (``timestamp``, ``type``, ``payload``). fleet
reads it as it reads Claude Code's transcript: :class:`Rollout` is a
:class:`~fleet.delivery.receipts.Transcript` whose lines are translated, one rollout line into the
transcript lines that say the same (:class:`Translator`), so receipts, the state fold
(:mod:`fleet.agentstate`) and usage (:mod:`fleet.usage`) read a Codex session unchanged:

===========================================  =============================================
rollout line                                 read as
===========================================  =============================================
``event_msg`` ``task_started``               a main-thread request: turning
``response_item`` ``message`` role ``user``  a user line; with fleet's ``<channel>`` blocks
                                             (a ``codex queue`` wake) origin ``channel``:
                                             **entered**
``response_item`` ``function_call``          an assistant ``tool_use`` (a tool runs)
``response_item`` ``function_call_output``   its ``tool_result``
``token_usage_record``                       an assistant line with ``usage`` (per response)
``event_msg`` ``task_complete``              ``turn_duration``: the turn completed; with an
                                             ``error`` (the model failed), an API error line:
                                             the turn failed
``event_msg`` ``turn_aborted``               an interrupt
===========================================  =============================================

Usage: OpenAI counts cached input inside ``input_tokens``; fleet's tallies (Claude's kinds) count it
apart, so a response's ``input_tokens`` is read as ``input_tokens - cached_input_tokens`` with
``cache_read_input_tokens = cached_input_tokens`` and ``cache_creation_input_tokens =
cache_write_input_tokens`` (the sum is what the model was sent).

**The thread id** is Codex's, not fleet's: Codex names the thread when it starts. The channel (a
stdio MCP server, the Codex process's child) learns it from its parent: the Codex process holds
``$CODEX_HOME/thread-writer-locks/<thread id>.lock`` open from its start (:func:`thread_of_process`),
so several Codex sessions sharing one ``CODEX_HOME`` are told apart by whose child asks. It is then
kept in the channels' directory beside the session (:func:`thread_file`), where a respawn (``codex
resume <thread id>``) and ``fleet usage`` find it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fleet.delivery.receipts import Transcript, blip_ids_in
from fleet.paths import read_utf8

log = logging.getLogger(__name__)

_LOCK = re.compile(
    r"/thread-writer-locks/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.lock$"
)
VERIFIED = "0.169.0"
"""The Codex CLI version whose rollout, queue and lock files this module was checked against."""


def codex_home(env: Mapping[str, str] | None = None) -> Path:
    """``$CODEX_HOME``, else ``~/.codex`` (of ``env``, by default this process's)."""
    env = os.environ if env is None else env
    if env.get("CODEX_HOME"):
        return Path(env["CODEX_HOME"])
    return (Path(env["HOME"]) if env.get("HOME") else Path.home()) / ".codex"


def thread_of_process(pid: int) -> str | None:
    """The thread a Codex process writes: the ``thread-writer-locks/<id>.lock`` it holds open, or None
    (not Codex, not started yet, or gone)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fds)
    except OSError:
        return None
    for name in names:
        try:
            target = os.readlink(fds / name)
        except OSError:
            continue
        if m := _LOCK.search(target):
            return m[1]
    return None


def thread_file(channels: Path, session_id: str) -> Path:
    """Where the thread id of fleet's session ``session_id`` is kept (one line)."""
    return channels / "codex" / f"{session_id}.thread"


def read_thread(channels: Path, session_id: str) -> str | None:
    try:
        text = read_utf8(thread_file(channels, session_id)).strip()
    except OSError:
        return None
    return text or None


def rollout_of(thread: str, env: Mapping[str, str] | None = None) -> Path | None:
    """The rollout of ``thread`` if Codex wrote one (it does with the thread's first turn)."""
    found = sorted((codex_home(env) / "sessions").glob(f"*/*/*/rollout-*-{thread}.jsonl"))
    return found[-1] if found else None


def _texts(content: Any) -> list[str]:
    if not isinstance(content, list):
        return []
    return [str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "input_text"]


def _usage(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        return {}

    def n(key: str) -> int:
        v = raw.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0

    cached = n("cached_input_tokens")
    return {
        "input_tokens": max(0, n("input_tokens") - cached),
        "output_tokens": n("output_tokens"),
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": n("cache_write_input_tokens"),
    }


class Translator:
    """Rollout lines into transcript lines (see the module docstring). Keeps the model the thread runs
    (from its ``turn_context`` and ``session_meta`` lines) to name it on each usage line."""

    def __init__(self) -> None:
        self.model = ""

    def __call__(self, line: Mapping[str, Any]) -> list[dict[str, Any]]:
        kind, payload = line.get("type"), line.get("payload")
        if not isinstance(payload, dict):
            return []
        at = line.get("timestamp")
        base: dict[str, Any] = {"timestamp": at} if isinstance(at, str) else {}
        if kind in ("turn_context", "session_meta") and isinstance(payload.get("model"), str):
            self.model = payload["model"]
        if kind == "event_msg":
            event = payload.get("type")
            if event == "task_started":
                return [{**base, "type": "api-request", "querySource": "repl_main_thread"}]
            if event == "task_complete":
                error = payload.get("error")
                if isinstance(error, dict):  # the model failed it (after Codex's own retries)
                    text = f"API Error: {error.get('message') or 'unknown'}"
                    said = {"role": "assistant", "content": [{"type": "text", "text": text}]}
                    return [{**base, "type": "assistant", "isApiErrorMessage": True, "message": said}]
                return [{**base, "type": "system", "subtype": "turn_duration"}]
            if event == "turn_aborted":
                text = "[Request interrupted by user]"
                return [{**base, "type": "user", "message": {"role": "user", "content": text}}]
            if event == "thread_settings_applied":
                settings = payload.get("thread_settings")
                if isinstance(settings, dict) and isinstance(settings.get("model"), str):
                    self.model = settings["model"]
            return []
        if kind == "token_usage_record":
            usage = _usage(payload.get("usage"))
            if not usage:
                return []
            rid = str(payload.get("response_id") or "")
            message = {"id": rid, "model": self.model or "codex", "usage": usage, "content": []}
            return [{**base, "type": "assistant", "message": message}]
        if kind != "response_item":
            return []
        item = payload.get("type")
        if item == "message" and payload.get("role") == "user":
            texts = _texts(payload.get("content"))
            content = [{"type": "text", "text": t} for t in texts]
            out: dict[str, Any] = {**base, "type": "user", "message": {"role": "user", "content": content}}
            if any(blip_ids_in(t) for t in texts):
                out["origin"] = {"kind": "channel", "server": "fleet"}  # a codex queue wake: entered
            elif any(t.startswith("<environment_context>") for t in texts):
                return []  # Codex's own context, not a turn's input
            return [out]
        if item == "function_call":
            name = str(payload.get("name") or "?")
            if payload.get("namespace"):
                name = f"{payload['namespace']}__{name}"
            block = {"type": "tool_use", "id": str(payload.get("call_id") or ""), "name": name, "input": {}}
            return [{**base, "type": "assistant", "message": {"role": "assistant", "content": [block]}}]
        if item == "function_call_output":
            block = {"type": "tool_result", "tool_use_id": str(payload.get("call_id") or "")}
            return [{**base, "type": "user", "message": {"role": "user", "content": [block]}}]
        return []


class Rollout(Transcript):
    """A Codex thread's rollout read as a transcript (offsets are the rollout's bytes). ``thread``:
    the thread id, or a callable asked until it answers (the channel learns it from its parent)."""

    format_name = "Codex's rollout"

    def __init__(
        self,
        thread: str | None,
        *,
        find_thread: Any = None,
        env: Mapping[str, str] | None = None,
        offset: int = 0,
        path: Path | None = None,
        observer: Any = None,
    ) -> None:
        super().__init__(thread or "", offset=offset, path=path, observer=observer)
        self.find_thread = find_thread
        self.env = env
        self.translate = Translator()

    def _locate(self) -> Path | None:
        if self.path is not None:
            return self.path
        if not self.session_id and self.find_thread is not None:
            self.session_id = self.find_thread() or ""
        if self.session_id:
            self.path = rollout_of(self.session_id, self.env)
        return self.path

    def missing(self) -> str:
        if not self.session_id:
            return "no Codex thread known yet (its process holds no thread lock)"
        return "no rollout yet (Codex writes it with the thread's first turn)"

    def lines_of(self, line: dict[str, Any]) -> list[dict[str, Any]]:
        return self.translate(line)
