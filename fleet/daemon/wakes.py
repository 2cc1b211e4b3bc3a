"""Wake-ups: long-polls wait on the keys of what they read and wake on commits that bump them.

What a caller may rely on: a commit bumps the keys it touched, and only waiters on one of them wake
(:class:`Notifier`); the key of each kind of thing a long-poll can wait on is made here (a wavelet's or
a wave's id is its own key), or in :mod:`fleet.console` for the console's streams.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

log = logging.getLogger(__name__)


class Notifier:
    """Wakes long-polls when something they watch commits: waiters keyed by what they read.

    A commit bumps the keys it touched (its wavelet's id, its wave's id, a member key for roster
    changes); only waiters on one of those keys wake (each a :class:`Parked` on the HTTP loop,
    holding no thread), so a post to a wave nobody reads wakes nobody. A waiter compares the sum of
    its keys' counters (each only grows, so the sum changes exactly when one of them did) with what
    it saw before its fetch, so a commit between fetch and wait is never missed. No polling.
    ``bump()`` with no keys and :meth:`close` wake everyone.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._counts: dict[str, int] = {}
        self._waiters: dict[str, set[Parked]] = {}
        self._everything: set[Parked] = set()
        """Waiters without keys: any commit wakes them."""
        self.closing = False
        self._held: list[tuple[str, ...]] | None = None
        """The bumps :meth:`held` keeps back, on the thread :attr:`_held_thread`."""
        self._held_thread = 0
        self.publish: Callable[[Sequence[str]], None] | None = None
        """Told the keys of every :meth:`bump` (after the local waiters are woken): on a PostgreSQL
        store, the other daemons on it (:meth:`fleet.store.Store.announce`), whose listeners call
        :meth:`woken` with them."""

    @property
    def seq(self) -> int:
        """Commits so far (every bump)."""
        return self._seq

    def seen(self, keys: Sequence[str] | None = None) -> int:
        """What a waiter on ``keys`` (None: on everything) compares against after its fetch."""
        if keys is None:
            return self._seq
        with self._lock:
            return self._now(keys)

    def seen_since(self, seq: int, keys: Sequence[str]) -> int | None:
        """:meth:`seen` of ``keys``, if no commit at all happened since :attr:`seq` was ``seq``
        (then a fetch begun after that read is current for them); None if one did."""
        with self._lock:
            if self._seq != seq:
                return None
            return self._now(keys)

    @property
    def parked(self) -> int:
        """Waiters parked now (tests, benchmarks)."""
        with self._lock:
            return len(self._everything) + len({e for s in self._waiters.values() for e in s})

    @property
    def settled(self) -> int:
        """Waiters parked now with no commit on their keys since they parked, none woken and not yet
        re-armed (tests: a stream that has caught up with every commit it was told of)."""
        with self._lock:
            parked = self._everything.union(*self._waiters.values())
            return sum(w.seen == self._now(w.keys) for w in parked)

    def _now(self, keys: Sequence[str] | None) -> int:
        """What :meth:`seen` of ``keys`` is now (under the lock)."""
        return self._seq if keys is None else sum(self._counts.get(k, 0) for k in keys)

    @contextmanager
    def held(self) -> Iterator[None]:
        """The bumps this thread makes until the end wait for it (each distinct one told once): the
        daemon's loop holds them while its turn's writes share a transaction, so no waiter wakes to
        read before the commit they tell of (:meth:`fleet.store.Store.group`). Other threads' bumps
        go through meanwhile."""
        if self._held is not None:
            yield
            return
        held: list[tuple[str, ...]] = []
        self._held, self._held_thread = held, threading.get_ident()
        try:
            yield
        finally:
            self._held = None
            for keys in dict.fromkeys(held):
                self.bump(*keys)

    def bump(self, *keys: str) -> None:
        """A commit here touched ``keys`` (none: anything): wake who waits on them, here and, through
        :attr:`publish`, on the other daemons of the store."""
        held = self._held
        if held is not None and threading.get_ident() == self._held_thread:
            held.append(keys)
            return
        self.woken(keys or None)
        if self.publish is not None:
            try:
                self.publish(keys)
            except Exception:  # the commit stands; the other daemons' parks wake at their timeout
                log.exception("telling the other daemons on the store what committed")

    def woken(self, keys: Sequence[str] | None) -> None:
        """Wake who waits on ``keys`` (None: everyone): a commit here, or one another daemon on the
        store announced."""
        keys = keys or ()
        with self._lock:
            self._seq += 1
            woken = set(self._everything)
            if not keys:
                for waiters in self._waiters.values():
                    woken |= waiters
            for k in keys:
                self._counts[k] = self._counts.get(k, 0) + 1
                woken |= self._waiters.get(k, set())
        for waiter in woken:
            waiter.set()

    def close(self) -> None:
        with self._lock:
            self.closing = True
            woken = set(self._everything).union(*self._waiters.values())
        for waiter in woken:
            waiter.set()

    def park(self, seen: int, timeout: float, keys: Sequence[str] | None = None) -> Parked:
        """A wait (what a handler yields: :class:`fleet.httpbase.Park`) until a commit touches
        ``keys`` (None: any commit) since ``seen`` was taken, at ``timeout``, or at close. It holds
        no thread: the HTTP loop arms it, and a bump calls its wake-up from the bumping thread."""
        return Parked(self, seen, timeout, keys)

    def _arm(self, waiter: Parked) -> bool:
        with self._lock:
            keys = waiter.keys
            if self.closing or self._now(keys) != waiter.seen:
                return False
            if keys is None:
                self._everything.add(waiter)
            else:
                for k in keys:
                    self._waiters.setdefault(k, set()).add(waiter)
            return True

    def _disarm(self, waiter: Parked) -> None:
        with self._lock:
            if waiter.keys is None:
                self._everything.discard(waiter)
                return
            for k in waiter.keys:
                waiters = self._waiters.get(k)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[k]


class Parked:
    """One parked wait on a :class:`Notifier` (a :class:`fleet.httpbase.Park`)."""

    __slots__ = ("_notifier", "_wake", "keys", "seen", "timeout")

    def __init__(self, notifier: Notifier, seen: int, timeout: float, keys: Sequence[str] | None) -> None:
        self._notifier = notifier
        self.seen = seen
        self.timeout = timeout
        self.keys = tuple(keys) if keys is not None else None
        self._wake: Callable[[], None] | None = None

    def arm(self, wake: Callable[[], None]) -> bool:
        self._wake = wake
        return self._notifier._arm(self)

    def disarm(self) -> None:
        self._notifier._disarm(self)
        self._wake = None

    def set(self) -> None:
        """Woken (by a bump or the close): what the notifier calls, outside its lock."""
        wake = self._wake
        if wake is not None:
            wake()


def member_key(wave_id: str, participant: str) -> str:
    """The key a roster change of ``participant`` in ``wave_id`` bumps (the feed waits on it)."""
    return f"member:{wave_id}:{participant}"


def permission_key(wave_id: str) -> str:
    """The key a permission request's write in ``wave_id`` bumps (its hook's long-poll waits on it)."""
    return f"permissions:{wave_id}"
