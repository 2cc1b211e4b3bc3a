"""Presence: the in-memory book of who is heard, a channel's report, and the wave's rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from fleet.console import presence_key
from fleet.daemon.request import Answer, Request
from fleet.models import OPERATOR, AgentState, Ok, PresenceList, PresenceReport, PresenceRow, PresenceState

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


@dataclass
class _Seen:
    session_id: str | None = None
    host: str | None = None
    last_ping: float | None = None
    last_delivery: float | None = None
    last_post: float | None = None
    delivered: int = 0
    gone: bool = False
    gone_at: float | None = None
    launch: str | None = None
    agent: AgentState | None = None
    """The agent state the channel reported last (None: never, or a channel older than states)."""


@dataclass
class PresenceBook:
    """In-memory presence: ``live`` while the channel pings within ``ping_ttl``, else ``gone``.

    What the agent does is what its channel reported (:mod:`fleet.agentstate`: the channel folds
    the session's own transcript and hooks); no delivery or post is taken as a sign of work. While
    the channel is not heard, the agent is ``unknown`` and says since when."""

    ping_ttl: float = 90.0
    clock: Callable[[], float] = time.time
    _rows: dict[tuple[str, str], _Seen] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def report(self, wave_id: str, r: PresenceReport) -> None:
        t = self.clock()
        with self._lock:
            s = self._rows.setdefault((wave_id, r.participant), _Seen())
            if r.session_id and r.session_id != s.session_id:
                s.agent = None  # another session: what the old one did says nothing of it
            s.session_id = r.session_id or s.session_id
            s.host = r.host or s.host
            s.launch = r.launch or s.launch
            if r.agent is not None:
                s.agent = r.agent
            if r.event == "gone":
                s.gone, s.gone_at = True, t
                return
            s.gone = False
            s.last_ping = t
            if r.event == "delivered":
                s.last_delivery = t
                s.delivered += max(0, r.count)

    def posted(self, wave_id: str, author: str) -> None:
        with self._lock:
            self._rows.setdefault((wave_id, author), _Seen()).last_post = self.clock()

    def state(self, s: _Seen) -> PresenceState:
        if s.gone or s.last_ping is None or self.clock() - s.last_ping > self.ping_ttl:
            return "gone"
        return "live"

    def agent(self, s: _Seen) -> AgentState:
        """The reported state while the channel is heard; else ``unknown`` saying since when."""
        if self.state(s) == "live":
            if s.agent is None:
                return AgentState(kind="unknown", why="its channel reports no state (an older fleet)")
            return s.agent
        if s.agent is not None and s.agent.kind == "dead":
            return s.agent  # seen dead (its pane, by the supervisor; its SessionEnd): a fact, not a lapse
        if s.last_ping is None:
            return AgentState(kind="unknown", why="no channel has reported")
        since = s.gone_at if s.gone else s.last_ping + self.ping_ttl
        how = "said gone" if s.gone else f"silent for {self.ping_ttl:g}s"
        last = f", last {s.agent.kind}" if s.agent is not None else ""
        return AgentState(kind="unknown", since=since, why=f"channel gone at {_clock(since)}: {how}{last}")

    def rows(self, wave_id: str, names: list[str]) -> list[PresenceRow]:
        with self._lock:
            out = []
            for name in names:
                s = self._rows.get((wave_id, name), _Seen())
                out.append(
                    PresenceRow(
                        wave_id=wave_id,
                        participant=name,
                        state=self.state(s),
                        session_id=s.session_id,
                        host=s.host,
                        last_ping=s.last_ping,
                        last_delivery=s.last_delivery,
                        last_post=s.last_post,
                        delivered=s.delivered,
                        launch=s.launch,
                        agent=self.agent(s),
                    )
                )
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
