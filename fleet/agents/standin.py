"""The scripted stand-in (:mod:`fleet.standin`) as an agent kind: it takes Claude Code's command line,
keeps no transcript (its deliveries count at the push, ``--receipts none``) and needs nothing
installed but this Python."""

from __future__ import annotations

import sys

from fleet.agents import Receipts
from fleet.agents.claude import Generic


class Standin(Generic):
    """The generic command's launch and reading, matched by its own command line and needing nothing
    installed."""

    name = "standin"
    receipts: Receipts = "none"
    wake = "channel push (the stand-in reads every notification)"
    limits: tuple[str, ...] = ()
    """A test double: what it cannot do is not a user's loss (it reports nothing as confirmed)."""

    def matches(self, words: list[str]) -> bool:
        return words[:3] == [sys.executable, "-m", "fleet.standin"]

    def require(self, words: list[str]) -> None:
        return None


kind = Standin()
