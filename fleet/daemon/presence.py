"""Presence: the in-memory book of who is heard, a channel's report, and the wave's rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import msgspec

from fleet.console import presence_key
from fleet.daemon.request import Answer, Request
from fleet.models import OPERATOR, AgentState, Ok, PresenceList, PresenceReport, PresenceRow, PresenceState

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


@dataclass
class PresenceBook:
    """In-memory presence: ``live`` while the channel pings within ``ping_ttl``, else ``gone``.

    What the agent does is what its channel reported (:mod:`fleet.agentstate`: the channel folds
    the session's own transcript and hooks); no delivery or post is taken as a sign of work. While
    the channel is not heard, the agent is ``unknown`` and says since when.

    The book keeps the :class:`PresenceRow` it answers with, as heard: its ``state`` is ``gone``
    only while the channel said so, its ``agent`` the state last reported (None: none). A read
    judges both against the clock (:meth:`rows`)."""

    ping_ttl: float = 90.0
    clock: Callable[[], float] = time.time
    _rows: dict[tuple[str, str], PresenceRow] = field(default_factory=dict)
    _gone_at: dict[tuple[str, str], float] = field(default_factory=dict)
    """When a channel said it was gone, while it is."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _row(self, wave_id: str, participant: str) -> PresenceRow:
        key = (wave_id, participant)
        got = self._rows.get(key)
        if got is None:
            got = self._rows[key] = PresenceRow(wave_id=wave_id, participant=participant, state="live")
        return got

    def report(self, wave_id: str, r: PresenceReport) -> None:
        t = self.clock()
        with self._lock:
            s = self._row(wave_id, r.participant)
            if r.session_id and r.session_id != s.session_id:
                s.agent = None  # another session: what the old one did says nothing of it
            s.session_id = r.session_id or s.session_id
            s.host = r.host or s.host
            s.launch = r.launch or s.launch
            if r.agent is not None:
                s.agent = r.agent
            if r.event == "gone":
                s.state, self._gone_at[(wave_id, r.participant)] = "gone", t
                return
            s.state = "live"
            self._gone_at.pop((wave_id, r.participant), None)
            s.last_ping = t
            if r.event == "delivered":
                s.last_delivery = t
                s.delivered += max(0, r.count)

    def posted(self, wave_id: str, author: str) -> None:
        with self._lock:
            self._row(wave_id, author).last_post = self.clock()

    def state(self, s: PresenceRow) -> PresenceState:
        if s.state == "gone" or s.last_ping is None or self.clock() - s.last_ping > self.ping_ttl:
            return "gone"
        return "live"

    def agent(self, s: PresenceRow) -> AgentState:
        """The reported state while the channel is heard; else ``unknown`` saying since when (presence
        is this daemon's: on a store several daemons share, a channel reports to the one it is on)."""
        if self.state(s) == "live":
            if s.agent is None:
                return AgentState(kind="unknown", why="its channel reports no state (an older fleet)")
            return s.agent
        if s.agent is not None and s.agent.kind == "dead":
            return s.agent  # seen dead (its pane, by the supervisor; its SessionEnd): a fact, not a lapse
        if s.last_ping is None:
            return AgentState(kind="unknown", why="no channel has reported to this daemon")
        gone_at = self._gone_at.get((s.wave_id, s.participant))
        since = gone_at if gone_at is not None else s.last_ping + self.ping_ttl
        how = "said gone" if gone_at is not None else f"silent for {self.ping_ttl:g}s"
        last = f", last {s.agent.kind}" if s.agent is not None else ""
        return AgentState(kind="unknown", since=since, why=f"channel gone at {_clock(since)}: {how}{last}")

    def rows(self, wave_id: str, names: list[str]) -> list[PresenceRow]:
        """The rows of ``names`` now: a copy each, its state and agent judged against the clock."""
        with self._lock:
            out = []
            for name in names:
                s = self._rows.get((wave_id, name)) or PresenceRow(
                    wave_id=wave_id, participant=name, state="live"
                )
                out.append(msgspec.structs.replace(s, state=self.state(s), agent=self.agent(s)))
            return out


def _clock(t: float | None) -> str:
    return "?" if t is None else datetime.fromtimestamp(t).strftime("%H:%M:%S")


def report_presence(d: Dispatcher, r: Request) -> Answer:
    body = r.model(PresenceReport)
    wave_id = d.s.wave_id(r.who, r.arg)  # (not the whole wave: two per second per agent)
    refusal = f"{r.who.name!r} cannot report presence for {body.participant!r}"
    d.s.access.require_self(r.who, body.participant, refusal)
    row = d.presence.rows(wave_id, [body.participant])[0]
    before = (row.state, row.agent)
    d.presence.report(wave_id, body)
    row = d.presence.rows(wave_id, [body.participant])[0]
    if (row.state, row.agent) != before:
        # a state change wakes the wave's console streams (not pings), and nothing else
        d.notifier.bump(presence_key(wave_id))
    return 200, Ok()


def presence(d: Dispatcher, r: Request) -> Answer:
    wave = d.s.get_wave(r.who, r.arg)
    names = [n for n, _kind in d.s.participants(r.who, wave.id) if n != OPERATOR]
    return 200, PresenceList(presence=d.presence.rows(wave.id, names))


HANDLERS = (
    report_presence,
    presence,
)
