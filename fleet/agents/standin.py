"""The scripted stand-in (:mod:`fleet.standin`) as an agent kind: it takes Claude Code's command line,
keeps no transcript (its deliveries count at the push, ``--receipts none``) and needs nothing
installed but this Python."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fleet.agents import Command, Health, Receipts, Start
from fleet.agents.claude import claude_command

if TYPE_CHECKING:
    from fleet.paths import Paths


class Standin:
    name = "standin"
    receipts: Receipts = "none"
    wake = "channel push (the stand-in reads every notification)"
    limits: tuple[str, ...] = ()
    """A test double: what it cannot do is not a user's loss (it reports nothing as confirmed)."""

    def matches(self, words: list[str]) -> bool:
        return words[:3] == [sys.executable, "-m", "fleet.standin"]

    def require(self, words: list[str]) -> None:
        return None

    def resumable(self, session_id: str, env: Mapping[str, str], paths: Paths) -> bool:
        return True

    def command(self, start: Start) -> Command:
        return claude_command(start, claude=False)

    def offers_channel(self, argv: list[str]) -> bool:
        return False

    def doctor(self) -> Health | None:
        return None


kind = Standin()
