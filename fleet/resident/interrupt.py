"""``fleet resident interrupt WAVE [TEXT]``: end the mind's turn, twice-bounded; then (text) the next.

The seed's interrupt has two bounds, and so does this one:

1. **Cooperative**: Escape in the mind's pane, which is how Claude Code cancels a turn (the
   transcript then shows "[Request interrupted by user]") and Codex too (0.169.0: its rollout then
   shows ``turn_aborted``, reason ``interrupted``). fleet waits for the transcript to show
   the turn ended, up to ``deadline`` (10 s).
2. **Force-close**, past that deadline: the pane's process group is signalled (SIGTERM, with a
   SIGCONT for a stopped process; SIGKILL after :data:`FORCE_GRACE` seconds), and the same
   session is resumed in the same pane (``--resume <session id>``, :meth:`fleet.spawn.Spawner.respawn`),
   so the conversation carries on; the seat follows the new process. The turn that was cut off
   stays in the transcript without an end; the resumed process starts at its prompt.

:class:`InterruptReport` says truthfully which stage ended the turn (``ended_by``: ``cooperative``
or ``force``; ``idle`` when there was no turn), and a system blip in the wave's root wavelet says
the same. Only when even the force-close cannot bring the session back is the interrupt an error
(:class:`InterruptFailed`, exit 1, saying what was done and how to recover); ``text`` is not typed
then. Otherwise non-empty ``text`` becomes the next turn (into the resumed process after a
force-close; the mind's kind's way: typed in, or ``codex queue`` for a Codex mind). The keeper's
janitor (:mod:`fleet.resident.keeper`) runs the same two stages on a turn that stopped making progress.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from typing import Literal

from pydantic import BaseModel

from fleet import errors
from fleet.client import Client
from fleet.paths import Paths
from fleet.resident import RESIDENT
from fleet.resident.mind import MindReader
from fleet.resident.seat import mind_of, reseat, resident_pane
from fleet.spawn import Spawner
from fleet.tmux import PaneInfo, Tmux

DEADLINE = 10.0
"""Seconds the turn has to end after the Escape (``fleet resident interrupt --deadline``)."""
FORCE_GRACE = 5.0
"""Seconds the process group has after SIGTERM before SIGKILL."""

EndedBy = Literal["idle", "cooperative", "force"]


class InterruptFailed(errors.FleetError):
    """Even the force-close could not bring the session back (exit 1)."""

    exit_code = 1


class InterruptReport(BaseModel):
    wave: str
    was_turning: bool
    interrupted: bool
    ended_by: EndedBy
    """Which stage ended the turn: the Escape (``cooperative``), the force-close and resume
    (``force``), or there was no turn (``idle``)."""
    session_id: str = ""
    pid: int | None = None
    """The mind's process after the interrupt (a new one after a force-close)."""
    next_turn: str = ""
    text: str = ""
    """What was done, in one sentence (also posted as a system blip)."""


def one_line(text: str) -> str:
    """One line, no control characters (typed into a pane literally)."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", text).strip()


def interrupt(
    client: Client,
    spawner: Spawner,
    paths: Paths,
    wave_ref: str,
    text: str = "",
    *,
    deadline: float = DEADLINE,
    who: str = "the operator",
    reader: MindReader | None = None,
) -> InterruptReport:
    """End the mind's turn (see the module docstring). ``who`` asked (for the messages); ``reader``:
    the caller's own reader of the mind's transcript (the keeper's), else a new one."""
    tmux = spawner.tmux
    wave = client.get_wave(wave_ref)
    seat = client.seat(wave.id)
    pane = resident_pane(tmux, wave.id)
    if seat is None or seat.closed_at is not None or pane is None or pane.dead:
        raise errors.NotFound(f"wave {wave.name!r} has no live resident: `fleet resident status {wave.name}`")
    mind = mind_of(paths, wave)
    if reader is None or reader.session_id != seat.session_id:
        reader = mind.reader(seat.session_id)
    turning = reader.read().turning
    ended_by: EndedBy = "idle"
    pid = pane.pid
    pane_id = pane.pane_id
    line = one_line(text)
    if not turning:
        said = f"resident: {who} interrupted (it was idle)"
    else:
        tmux.srv.cmd("send-keys", "-t", pane_id, "Escape")
        if _ended(reader, deadline):
            ended_by = "cooperative"
            said = f"resident: {who} interrupted its turn (it ended at the Escape)"
        else:
            ended_by = "force"
            closed = _force_close(tmux, pane)
            # the new process takes keys (its start answers a dialog with them), whatever kept the
            # Escape from the old one: a pane's input turned off (`select-pane -d`) outlives a respawn
            tmux.srv.cmd("select-pane", "-e", "-t", pane_id)
            try:
                # (a pane still alive, its process deaf even to SIGKILL: respawn-pane -k ends it)
                report = spawner.respawn(wave.id, RESIDENT, force=not _pane_dead(tmux, pane_id))
                if not report.ready:
                    raise errors.FleetError(f"it is not connected: {report.why}")
                reseat(client, tmux, client.get_wave(wave.id), report)
            except errors.DaemonUnreachable:
                raise
            except errors.FleetError as exc:
                said = (
                    f"did not end its turn within {deadline:g}s of the Escape ({who}'s interrupt); its"
                    f" process was ended ({closed}) but session {seat.session_id} could not be resumed:"
                    f" {exc.message}"
                )
                with contextlib.suppress(errors.FleetError):  # (the failure is reported either way)
                    client.post_system(wave.root_id, f"resident: failed: {said}")
                raise InterruptFailed(
                    f"the resident of {wave.name} {said}"
                    + ("; the next turn was not typed" if line else "")
                    + f"; `fleet supervise {wave.name}` revives it, or `fleet resident start {wave.name}`"
                ) from None
            reader.fold.restarted()  # (what the old process left open is over)
            pane_id = report.pane_id
            now = resident_pane(tmux, wave.id)
            pid = now.pid if now is not None else None
            said = (
                f"resident: {who} interrupted its turn; it did not end within {deadline:g}s of the"
                f" Escape, so its process was ended ({closed}) and session {seat.session_id} resumed"
                f" in pane {pane_id} (pid {pid})"
            )
    if line:
        mind.enter(tmux, pane_id, seat.session_id, line, interrupted=ended_by == "cooperative")
    elif ended_by == "cooperative" and mind.kind.after_interrupt:
        said += f"; {mind.kind.after_interrupt}"
    client.post_system(wave.root_id, said)
    return InterruptReport(
        wave=wave.name, was_turning=turning, interrupted=turning, ended_by=ended_by,
        session_id=seat.session_id, pid=pid, next_turn=line, text=said.removeprefix("resident: "),
    )  # fmt: skip


def _ended(reader: MindReader, deadline: float) -> bool:
    """Whether the transcript shows the turn ended within ``deadline`` seconds."""
    until = time.monotonic() + deadline
    delay = 0.05
    while reader.read().turning:
        if time.monotonic() > until:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    return True


def _force_close(tmux: Tmux, pane: PaneInfo) -> str:
    """End the pane's process group: SIGTERM (and SIGCONT, for a stopped process), SIGKILL after
    :data:`FORCE_GRACE`; returns what was done, for the messages."""
    pid = pane.pid
    if not pid:
        return f"no process id for pane {pane.pane_id}: tmux respawns it over the old process"
    try:
        group = os.getpgid(pid)
    except OSError:
        group = pid
    if group in (0, 1, os.getpgrp()):  # (a pane is a session of its own; never signal ours)
        group = pid

    def send(sig: signal.Signals) -> None:
        with contextlib.suppress(OSError):
            if group == pid and os.getpgid(pid) != pid:
                os.kill(pid, sig)
            else:
                os.killpg(group, sig)

    for sig in (signal.SIGTERM, signal.SIGCONT):
        send(sig)
    until = time.monotonic() + FORCE_GRACE
    while time.monotonic() < until:
        if _pane_dead(tmux, pane.pane_id):
            return f"SIGTERM to process group {group}"
        time.sleep(0.1)
    send(signal.SIGKILL)
    until = time.monotonic() + FORCE_GRACE
    while time.monotonic() < until and not _pane_dead(tmux, pane.pane_id):
        time.sleep(0.1)
    return f"SIGKILL to process group {group}, {FORCE_GRACE:g}s after SIGTERM"


def _pane_dead(tmux: Tmux, pane_id: str) -> bool:
    now = next((p for p in tmux.panes() if p.pane_id == pane_id), None)
    return now is None or now.dead
