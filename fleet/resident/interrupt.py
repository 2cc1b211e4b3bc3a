"""``fleet resident interrupt WAVE [TEXT]``: cancel the mind's turn, then (text) open the next one.

What Claude Code accepts in a pane: Escape cancels the running turn (the transcript then shows
"[Request interrupted by user]"). fleet waits for the transcript to show the turn ended, up to a
deadline (10 s): past it the mind is reported failed (an error; ``fleet supervise`` and the failure
rule take it from there). Non-empty ``text`` is typed in as the next turn.
"""

from __future__ import annotations

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
                raise errors.FleetError(
                    f"the resident of {wave.name} did not end its turn within {deadline:g}s of the interrupt:"
                    f" it is failed; `fleet resident stop {wave.name}` then start it, or let"
                    " `fleet supervise` act"
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
