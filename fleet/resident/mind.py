"""The mind's state, read from its Claude Code session's own transcript (never from its screen).

The fold is every agent's (:class:`fleet.agentstate.Fold`, where what Claude Code writes is
described): the resident reads its own session's transcript with it, incrementally. ``fleet
resident status`` shows the state its channel reports to the daemon (the same as ``fleet status``)
and takes the counts (turns, failed turns) from this reader where the transcript is on this machine.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from fleet.agentstate import Fold
from fleet.delivery.receipts import transcript_of
from fleet.resident.steer import SteerFold, SteerStatus, describe

MindFold = Fold
"""The resident's name for the one fold (kept for its callers)."""


class MindReader:
    """The fold of one session's transcript, read incrementally."""

    def __init__(self, session_id: str, env: Mapping[str, str] | None = None) -> None:
        self.session_id = session_id
        self.env = dict(env) if env is not None else dict(os.environ)
        self.path: Path | None = None
        self.offset = 0
        """Bytes of the transcript read so far (complete lines): the janitor's measure of progress."""
        self.fold = Fold()
        self.steer = SteerFold()
        """The operator's blips that came while the mind was turning (:mod:`fleet.resident.steer`)."""
        self.problem = ""
        """Why the transcript cannot be read ('' when it was)."""

    def read(self) -> Fold:
        if self.path is None:
            self.path = transcript_of(self.session_id, self.env)
            if self.path is None:
                self.problem = "no transcript on this machine"
                return self.fold
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
            mtime = self.path.stat().st_mtime
        except OSError as exc:
            self.problem = f"cannot read {self.path}: {exc.strerror or exc}"
            return self.fold
        self.problem = ""
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
                was = self.fold.turning
                self.fold.take(obj, mtime)
                self.steer.take(obj, was)
        return self.fold


def steer_status(session_id: str, env: Mapping[str, str] | None) -> SteerStatus:
    """The steers of ``session_id``'s transcript (nothing when it is not on this machine)."""
    reader = MindReader(session_id, env)
    reader.read()
    last = reader.steer.last
    return SteerStatus(last=last, count=reader.steer.count, text=describe(last))
