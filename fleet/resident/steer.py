"""Steering: what became of the operator's blips that reached the mind while it was turning.

The seed's rule is that human speech during a turn steers it. In fleet that needs nothing extra
on the way in: a blip the channel pushes while a turn runs is queued by Claude Code at once
(``queue-operation`` ``enqueue``), and Claude Code 2.1.332 takes it into the *running* turn at
its next tool boundary: a ``remove`` line (``reason: "absorbed_mid_turn"``), then an
``attachment`` line of type ``queued_command`` holding the push, which the next model request of
the same turn carries ("A message arrived from fleet while you were working: <channel …>").
Verified with the real binary over the scripted model (tests/real/test_resident_real.py, the steer
test). A turn with no tool boundary left (one long model answer) cannot take it: it is then
dequeued when the turn ends and opens the next turn. This module reads which of the two happened,
from the session's own transcript, for ``fleet resident status``.

What a caller may rely on: :class:`SteerFold` is fed every transcript line in order (with whether
the mind was turning before the line, as :class:`fleet.agentstate.Fold` says) and never fails on a
line of another shape; :attr:`SteerFold.last` is the newest steer, or None.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel

from fleet.delivery.receipts import stamp
from fleet.models import OPERATOR

SteerOutcome = Literal["queued", "steered", "next turn", "withdrawn"]
"""``queued``: in Claude Code's queue, not taken yet; ``steered``: taken into the running turn at
a tool boundary; ``next turn``: the turn had no tool boundary left, so it entered when the turn
ended (as the next turn's input); ``withdrawn``: removed from the queue without entering (the
turn was cancelled)."""

EXCERPT = 120

_BLOCK = re.compile(r"<channel((?:\s+[A-Za-z_][A-Za-z0-9_]*=\"[^\"]*\")*)\s*>\n?(.*?)\n?</channel>", re.S)
_ATTR = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=\"([^\"]*)\"")


class Steer(BaseModel):
    """One operator blip pushed while the mind was turning, and what became of it."""

    blip_id: str
    wavelet: str = ""
    text: str
    """Its text (the first :data:`EXCERPT` characters, on one line)."""
    at: float
    """When Claude Code queued it (Unix time, the line's stamp)."""
    outcome: SteerOutcome = "queued"
    reached_turn: bool = False
    """True when it entered the turn that was running when it arrived (``steered``)."""
    entered_at: float | None = None


def operator_blocks(text: str) -> list[tuple[str, str, str]]:
    """(blip id, wavelet, text) of each fleet ``<channel>`` block in ``text`` the operator wrote."""
    out = []
    for m in _BLOCK.finditer(text):
        attrs = {k: html.unescape(v) for k, v in _ATTR.findall(m[1])}
        if attrs.get("source") == "fleet" and attrs.get("author") == OPERATOR and attrs.get("blip_id"):
            flat = " ".join(m[2].split())[:EXCERPT]
            out.append((attrs["blip_id"], attrs.get("wavelet", ""), flat))
    return out


class SteerFold:
    """The steers of one session's transcript (see the module docstring)."""

    def __init__(self) -> None:
        self.queue: list[list[Steer]] = []
        """Per queued input, oldest first: the steers it carries (empty: not a steer)."""
        self.absorbing: list[Steer] = []
        """Removed as absorbed mid-turn: the attachment that follows enters them."""
        self.last: Steer | None = None
        self.count = 0
        """Steers seen (operator blips pushed while turning)."""

    def take(self, obj: Mapping[str, object], turning: bool) -> None:
        kind, operation = obj.get("type"), obj.get("operation")
        if kind == "queue-operation" and operation == "enqueue":
            steers = []
            if turning:
                at = stamp(dict(obj))
                for blip_id, wavelet, text in operator_blocks(str(obj.get("content") or "")):
                    steers.append(Steer(blip_id=blip_id, wavelet=wavelet, text=text, at=at))
            self.queue.append(steers)
            if steers:
                self.last = steers[-1]
                self.count += len(steers)
        elif kind == "queue-operation" and operation in ("dequeue", "remove"):
            steers = self.queue.pop(0) if self.queue else []
            if operation == "dequeue":
                for s in steers:
                    s.outcome, s.entered_at = "next turn", stamp(dict(obj))
            elif obj.get("reason") == "absorbed_mid_turn":
                self.absorbing += steers
            else:
                for s in steers:
                    s.outcome = "withdrawn"
        elif kind == "attachment" and isinstance(att := obj.get("attachment"), dict):
            if att.get("type") == "queued_command" and self.absorbing:
                prompt = str(att.get("prompt") or "")
                for s in [s for s in self.absorbing if s.blip_id in prompt]:
                    s.outcome, s.reached_turn, s.entered_at = "steered", True, stamp(dict(obj))
                    self.absorbing.remove(s)
        elif kind == "user" and "[Request interrupted by user" in str(obj.get("message")):
            for steers in self.queue:  # an interrupt empties Claude Code's queue
                for s in steers:
                    s.outcome = "withdrawn"
            self.queue = []


class SteerStatus(BaseModel):
    """What ``fleet resident status`` says of steering: the last steer and how many there were."""

    last: Steer | None = None
    count: int = 0
    text: str = ""
    """One line for people: what was steered and whether it reached the turn."""


def describe(s: Steer | None) -> str:
    if s is None:
        return "none"
    said = {
        "steered": "reached the running turn at a tool boundary",
        "next turn": "the turn had no tool boundary left: it opened the next turn",
        "queued": "queued, not taken yet",
        "withdrawn": "withdrawn from the queue (the turn was cancelled)",
    }[s.outcome]
    return f"{s.text!r} ({s.blip_id}): {said}"
