"""``fleet resident interrupt WAVE [TEXT]``: cancel the mind's turn, then (text) open the next one.

What Claude Code accepts in a pane: Escape cancels the running turn (the transcript then shows
"[Request interrupted by user]"). fleet waits for the transcript to show the turn ended, up to a
deadline (10 s): past it the mind is reported failed (:class:`InterruptFailed`, exit 1, and a
``resident: failed: …`` system blip), and ``text`` is not typed. Otherwise non-empty ``text`` is
typed in as the next turn.
"""

from __future__ import annotations

import contextlib
import time

from pydantic import BaseModel

from fleet import errors
from fleet.client import Client
from fleet.paths import Paths
from fleet.resident.keeper import _clean
from fleet.resident.mind import MindReader
from fleet.resident.seat import _session_env, resident_pane
from fleet.tmux import Tmux

DEADLINE = 10.0
"""Seconds the turn has to end after the Escape (``fleet resident interrupt --deadline``)."""


class InterruptFailed(errors.FleetError):
    """The turn did not end by the deadline: the mind is reported failed (exit 1)."""

    exit_code = 1


class InterruptReport(BaseModel):
    wave: str
    was_turning: bool
    interrupted: bool
    next_turn: str = ""


def interrupt(
    client: Client, tmux: Tmux, paths: Paths, wave_ref: str, text: str = "", *, deadline: float = DEADLINE
) -> InterruptReport:
    wave = client.get_wave(wave_ref)
    seat = client.seat(wave.id)
    pane = resident_pane(tmux, wave.id)
    if seat is None or seat.closed_at is not None or pane is None or pane.dead:
        raise errors.NotFound(f"wave {wave.name!r} has no live resident: `fleet resident status {wave.name}`")
    reader = MindReader(seat.session_id, _session_env(paths, wave.id, None))
    turning = reader.read().turning
    if turning:
        tmux.srv.cmd("send-keys", "-t", pane.pane_id, "Escape")
        until = time.monotonic() + deadline
        delay = 0.05
        while reader.read().turning:
            if time.monotonic() > until:
                said = f"did not end its turn within {deadline:g}s of the operator's interrupt"
                with contextlib.suppress(errors.FleetError):  # (the failure is reported either way)
                    client.post_system(wave.root_id, f"resident: failed: {said}")
                raise InterruptFailed(
                    f"the resident of {wave.name} {said} (pid {pane.pid}, pane {pane.pane_id}): it is"
                    " failed" + (", and the next turn was not typed" if _clean(text) else "") + ";"
                    f" `fleet resident stop {wave.name}` then `fleet resident start {wave.name}` brings"
                    " the same session back"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    line = _clean(text)
    if line:
        tmux.srv.cmd("send-keys", "-t", pane.pane_id, "-l", line + (" " if line.endswith(";") else ""))
        tmux.srv.cmd("send-keys", "-t", pane.pane_id, "Enter")
    client.post_system(
        wave.root_id,
        "resident: the operator interrupted its turn"
        if turning
        else "resident: the operator interrupted (it was idle)",
    )
    return InterruptReport(wave=wave.name, was_turning=turning, interrupted=turning, next_turn=line)
