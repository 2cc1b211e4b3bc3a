"""The channel's Codex side: waking a Codex session with ``codex queue`` and reading its rollout.

Codex declares no channel capability: a pushed notification never reaches its model. What wakes an
idle Codex TUI is ``codex queue --thread <id> --message <text>`` (verified with 0.169.0,
docs/agents.md): the message is stored in Codex's queue (``$CODEX_HOME/queue_1.sqlite``) and the
TUI takes it as a new user turn — within seconds when idle (it polls: 3–9 s measured), right after
the running turn when busy (a message queued mid-turn is not absorbed into it). The queue outlives
the process: a message queued before the pane was killed enters when ``codex resume`` reopens the
thread, so a queued wake is never handed again by a new run (:class:`~fleet.delivery.ledger.Ledger`,
``durable``).

:class:`CodexWake` is what the channel's sink calls instead of a push: one ``codex queue`` per
delivery step, all the step's frames in one message (``hook_report``'s form: a header naming the
participant and the prompt contract's short form, then the ``<channel source="fleet" …>`` blocks, so
identity and the contract ride in every wake). Its exit status is the queueing's receipt: 0 and
"Queued message" on stdout is **queued**; anything else is a failed push (the engine keeps the
cursor and tries again). **Entered** is read from the rollout (the user message verbatim).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from fleet.delivery.frames import Frame, hook_report
from fleet.delivery.rollout import read_thread, thread_file, thread_of_process
from fleet.delivery.state import DeliveryState
from fleet.paths import write_private

log = logging.getLogger(__name__)

QUEUE_TIMEOUT = 20.0
"""Seconds a ``codex queue`` may take (it opens Codex's state databases: ~0.2 s measured)."""
QUEUED = "Queued message"


def another_session(state: DeliveryState) -> None:
    """The state's pending frames were handed to another session (a fresh Codex thread, not a resume
    of the recorded one): what Codex queued there never enters this thread, so none counts as queued
    any more — each is lost with its run and queued again (the ledger's durable rule spares only
    wakes queued to the thread that is resumed)."""
    for p in state.pending:
        p.queued_at = None


class CodexWake:
    """Wakes one participant's Codex session (its thread learnt from the channel's parent process)."""

    def __init__(
        self,
        participant: str,
        wave: str,
        channels: Path,
        session_id: str,
        *,
        codex: str,
        parent: int,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.participant, self.wave = participant, wave
        self.channels, self.session_id = channels, session_id
        self.codex = codex
        """The Codex binary the pane runs (spawn passes its path: ``FLEET_CODEX_BIN``)."""
        self.parent = parent
        self.env = dict(os.environ if env is None else env)
        self._thread = ""
        self._lock = threading.Lock()
        self.last_error = ""
        """Why the last wake failed ('' when it worked)."""

    def thread(self) -> str | None:
        """The Codex thread this session writes: from the parent process's thread lock (kept in
        :func:`~fleet.delivery.rollout.thread_file` once found), else the one kept there earlier."""
        with self._lock:
            if self._thread:
                return self._thread
            found = thread_of_process(self.parent)
            if found:
                path = thread_file(self.channels, self.session_id)
                if read_thread(self.channels, self.session_id) != found:
                    write_private(path, found + "\n")
                self._thread = found
                return found
            return read_thread(self.channels, self.session_id)

    def text(self, frames: Iterable[Frame]) -> str:
        return hook_report(frames, self.participant, self.wave)

    def wake(self, frames: list[Frame]) -> bool:
        """Queue ``frames`` as one message for the session; True once Codex said it queued it."""
        thread = self.thread()
        if not thread:
            self.last_error = "the Codex thread is not known yet (its process holds no thread lock)"
            return False
        self.last_error = queue(self.codex, thread, self.text(frames), self.env)
        if self.last_error:
            log.warning("%s", self.last_error)
        return not self.last_error


def queue(codex: str, thread: str, text: str, env: Mapping[str, str]) -> str:
    """``codex queue --thread THREAD --message TEXT`` (``codex``: the binary, ``env``: its
    environment, where ``CODEX_HOME`` is): '' once Codex said it queued the message, else why not."""
    import subprocess  # (here: a Claude Code channel, which imports this module, never runs one)

    argv = [codex, "queue", "--thread", thread, "--message", text]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=QUEUE_TIMEOUT, env=dict(env),
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"codex queue could not run: {exc}"
    if done.returncode != 0 or QUEUED not in done.stdout:
        lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
        why = next((ln for ln in lines if ln.startswith("Error")), lines[0] if lines else "")
        return f"codex queue exited {done.returncode}: {why[:300]}"
    return ""
