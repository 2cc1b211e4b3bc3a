"""Presence reporting: telling the daemon a participant is alive, was handed blips, or is gone,
and what its session is doing (:class:`~fleet.models.AgentState`, folded by the channel from the
session's own record: :mod:`fleet.agentstate`). Every report carries the state of the moment.

Presence is telemetry (docs/design.md §2): a report that fails is logged at debug level and
dropped, never retried and never allowed to hold delivery up. :class:`Presence` sends one report;
:class:`PresenceLoop` is the channel's reporter (a ping at once and every ``interval``, deliveries
coalesced under load), run on a thread the channel owns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Literal, Protocol

from fleet import errors
from fleet.models import AgentState, PresenceReport

log = logging.getLogger(__name__)

COALESCE = 0.5
"""Under load, ``delivered`` reports go at most this often (counts add up); the first is immediate."""

Event = Literal["ping", "delivered", "gone"]


class _Reports(Protocol):
    def report_presence(self, wave: str, report: PresenceReport) -> None: ...


class Presence:
    """One participant's reports. ``client`` is called for each report (a token may be re-read)."""

    def __init__(
        self,
        client: Callable[[], _Reports],
        wave: str,
        participant: str,
        *,
        session_id: str | None = None,
        host: str | None = None,
        launch: str | None = None,
        agent: Callable[[], AgentState | None] | None = None,
    ) -> None:
        self.client = client
        self.agent = agent
        """The session's state now (sent in every report), None: the channel knows none."""
        self.wave = wave
        self.participant = participant
        self.session_id = session_id
        self.host = host
        self.launch = launch

    def report(self, event: Event, count: int = 0, timeout: float = 0.0) -> None:
        """Send one report (best effort). With ``timeout``, wait at most that long for it."""
        report = PresenceReport(
            participant=self.participant,
            event=event,
            count=count,
            session_id=self.session_id,
            host=self.host,
            launch=self.launch,
            agent=self.agent() if self.agent is not None else None,
        )

        def send() -> None:
            try:
                self.client().report_presence(self.wave, report)
            except errors.FleetError as exc:
                log.debug("presence %s not reported: %s", event, exc)

        if not timeout:
            send()
            return
        t = threading.Thread(target=send, name="fleet-presence-report", daemon=True)
        t.start()
        t.join(timeout)


class PresenceLoop:
    """Reports while ``active()`` says so: a ping at once and every ``interval`` seconds, and
    deliveries (:meth:`delivered`) as ``delivered`` reports, coalesced. :meth:`run` returns once
    ``stop`` is set (call :meth:`wake` after setting it)."""

    def __init__(
        self, presence: Presence, interval: float, active: Callable[[], bool], stop: threading.Event
    ) -> None:
        self.presence = presence
        self.interval = interval
        self.active = active
        self.stop = stop
        self._cond = threading.Condition()
        self._pending = 0
        self._ping_now = False

    def wake(self, delivered: int = 0, *, ping: bool = False) -> None:
        """Count ``delivered`` pushes toward the next report, and re-check ``active`` and ``stop``;
        with ``ping``, report now (a restarted daemon knows no presence)."""
        with self._cond:
            self._pending += delivered
            self._ping_now = self._ping_now or ping
            self._cond.notify_all()

    def run(self) -> None:
        next_ping = 0.0

        def due() -> bool:
            return self.stop.is_set() or (
                self.active() and (self._pending > 0 or self._ping_now or time.monotonic() >= next_ping)
            )

        while True:
            with self._cond:
                timeout = max(0.0, next_ping - time.monotonic()) if self.active() else None
                self._cond.wait_for(due, timeout)
                if self.stop.is_set():
                    return
                if not due():
                    continue
                count, self._pending, self._ping_now = self._pending, 0, False
            self.presence.report("delivered" if count else "ping", count=count)
            next_ping = time.monotonic() + self.interval
            if count and self.stop.wait(COALESCE):
                return
