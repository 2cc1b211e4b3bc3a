"""The supervisor lease: the in-memory book of who supervises each wave, and its routes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fleet import errors
from fleet.daemon.request import Answer, Request
from fleet.models import SupervisorAnswer, SupervisorClaim, SupervisorLease, SupervisorRelease

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


@dataclass
class _Lease:
    holder: str
    pid: int
    host: str
    since: float
    renewed: float
    ttl: float


@dataclass
class SupervisorBook:
    """In-memory supervisor leases, one per wave (docs/resident.md): ``fleet supervise`` claims
    and renews it; a claim while another holder's lease has not lapsed is a Conflict naming it,
    unless forced. Lost with the daemon: the holder's next renewal claims it again."""

    clock: Callable[[], float] = time.time
    _leases: dict[str, _Lease] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _answer(self, wave_id: str, lease: _Lease, t: float, took_over: str = "") -> SupervisorLease:
        return SupervisorLease(
            wave_id=wave_id, holder=lease.holder, pid=lease.pid, host=lease.host,
            held_for=max(0.0, t - lease.since), renewed_ago=max(0.0, t - lease.renewed),
            expires_in=max(0.0, lease.renewed + lease.ttl - t), took_over=took_over,
        )  # fmt: skip

    def get(self, wave_id: str) -> SupervisorLease | None:
        t = self.clock()
        with self._lock:
            lease = self._leases.get(wave_id)
            if lease is None or t > lease.renewed + lease.ttl:
                return None
            return self._answer(wave_id, lease, t)

    def claim(self, wave_id: str, wave_name: str, c: SupervisorClaim) -> SupervisorLease:
        t = self.clock()
        with self._lock:
            old = self._leases.get(wave_id)
            live = old is not None and t <= old.renewed + old.ttl
            took = ""
            if old is not None and live and old.holder != c.holder:
                if not c.force:
                    raise errors.Conflict(
                        f"wave {wave_name!r} is supervised already: `fleet supervise` pid {old.pid} on"
                        f" {old.host}, for {t - old.since:.0f}s (renewed {t - old.renewed:.0f}s ago):"
                        " stop it first, or take over with --force (it then stops)"
                    )
                took = f"pid {old.pid} on {old.host}"
            if old is not None and live and old.holder == c.holder:
                old.renewed, old.ttl, old.pid, old.host = t, c.ttl, c.pid, c.host
                return self._answer(wave_id, old, t)
            lease = _Lease(holder=c.holder, pid=c.pid, host=c.host, since=t, renewed=t, ttl=c.ttl)
            self._leases[wave_id] = lease
            return self._answer(wave_id, lease, t, took)

    def release(self, wave_id: str, holder: str) -> None:
        with self._lock:
            lease = self._leases.get(wave_id)
            if lease is not None and lease.holder == holder:
                del self._leases[wave_id]


def supervisor(d: Dispatcher, r: Request) -> Answer:
    d.s.access.require_operator(r.who, "reads who supervises a wave")
    wave = d.s.access.wave(r.who, r.arg)
    return 200, SupervisorAnswer(lease=d.supervisors.get(str(wave["id"])))


def claim_supervisor(d: Dispatcher, r: Request) -> Answer:
    d.s.access.require_operator(r.who, "supervises a wave")
    body = r.model(SupervisorClaim)
    wave = d.s.access.wave(r.who, r.arg)
    return 200, SupervisorAnswer(lease=d.supervisors.claim(str(wave["id"]), str(wave["name"]), body))


def release_supervisor(d: Dispatcher, r: Request) -> Answer:
    d.s.access.require_operator(r.who, "supervises a wave")
    body = r.model(SupervisorRelease)
    wave = d.s.access.wave(r.who, r.arg)
    d.supervisors.release(str(wave["id"]), body.holder)
    return 200, SupervisorAnswer(lease=d.supervisors.get(str(wave["id"])))


HANDLERS = (
    supervisor,
    claim_supervisor,
    release_supervisor,
)
