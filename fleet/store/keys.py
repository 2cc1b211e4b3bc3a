"""Request keys: what makes a resent write safe (docs/http-api.md, "Idempotency-Key").

A client sends every mutating request with a key it makes once per logical operation and keeps across
every resend. What a caller may rely on:

- **The key is written with the write.** While a request with a key runs, the first event it records
  (:func:`fleet.store.events.record`) also inserts the key's row, in the same transaction: if the
  write committed, so did its key, and a daemon killed a moment later still knows it was applied.
- **The answer follows.** Once the handler has answered, the answer (status and body) is stored in
  the key's row (:meth:`Keys.answered`), in a second transaction — except where the answer is the
  event's own record (a blip write: the blip it recorded), which is rebuilt from the event, byte for
  byte, at no cost to the write. A repeat of the key gets that answer; a repeat that finds the write
  applied but its answer not stored (the daemon died between the two) is answered from the event the
  write recorded, or, where the answer cannot be rebuilt (a minted token's secret is never stored),
  with a Conflict saying that the request was applied.
- **A key is the caller's.** Keys are scoped by the principal that sent them; the same key with a
  different request (method, path or body) is a Conflict (409), and nothing runs.
- **Kept for :data:`WINDOW` seconds** (24 hours), longer than any resend fleet makes; older rows are
  pruned as new ones are written. A resend after the window runs as a new request.

The rows are bookkeeping, not state: they are not events, not materialised (replay does not rebuild
them), and not exported.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleet import errors
from fleet.store.schema import Conn

if TYPE_CHECKING:
    from fleet.store.access import Principal
    from fleet.store.schema import Connections

WINDOW = 24 * 3600.0
"""Seconds a key is remembered: a resend within it is answered as the original was."""
PRUNE_EVERY = 500
"""Answers stored between two prunes of keys older than :data:`WINDOW`."""
MAX_KEY = 100
KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")


def check_key(key: str) -> str:
    """UsageError unless ``key`` is 1 to :data:`MAX_KEY` characters of letters, digits and ``-_.:``."""
    if not 0 < len(key) <= MAX_KEY or not KEY_CHARS.issuperset(key):
        raise errors.UsageError(
            f"the Idempotency-Key header {key[:40]!r} is not 1 to {MAX_KEY} letters, digits, '-', '_', '.'"
            " or ':': send a UUID made once per operation (docs/http-api.md)"
        )
    return key


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What a repeat of a key must match: the method, the path and the body, hashed."""
    h = hashlib.sha256(f"{method} {path}\n".encode())
    h.update(body)
    return h.hexdigest()


def scope_of(who: Principal) -> str:
    """Whose keys these are: a participant of one wave, a machine's operator powers, or the operator."""
    return f"{who.name}|{who.wave_id or ''}|{who.machine or ''}"


@dataclass(frozen=True)
class Claim:
    """A request with a key, as it runs: who sent it (``scope``), the key, what it asked."""

    scope: str
    key: str
    fingerprint: str


@dataclass(frozen=True)
class Found:
    """A key already written: what was asked, the first event its write recorded, and the answer
    stored for it (``status`` None: the write committed but its answer was not stored)."""

    fingerprint: str
    seq: int
    status: int | None
    body: bytes | None


class _Running(threading.local):
    claim: Claim | None = None
    seq: int | None = None


_running = _Running()


_claims = 0
"""Keys written in this process: every :data:`PRUNE_EVERY`-th also prunes those past the window."""


def on_record(conn: Conn, seq: int) -> None:
    """Called by :func:`fleet.store.events.record` with the seq of each event it appends: the first
    one of a request with a key writes the key's row, in that event's transaction."""
    global _claims
    claim = _running.claim
    if claim is None or _running.seq is not None:
        return
    at = time.time()
    conn.execute(
        "INSERT INTO request_keys(scope, key, fingerprint, seq, created_at) VALUES (?,?,?,?,?)",
        (claim.scope, claim.key, claim.fingerprint, seq, at),
    )
    _running.seq = seq
    _claims += 1
    if _claims % PRUNE_EVERY == 1:
        conn.execute("DELETE FROM request_keys WHERE created_at < ?", (at - WINDOW,))


class Run:
    """The request running under a key on this thread (:meth:`Keys.running`): a context manager."""

    __slots__ = ("_claim", "_ident", "_keys", "_wait")

    def __init__(self, keys: Keys, claim: Claim, wait: float) -> None:
        self._keys, self._claim, self._wait = keys, claim, wait
        self._ident = (claim.scope, claim.key)

    def __enter__(self) -> Run:
        keys, ident = self._keys, self._ident
        wait = 0.0 if keys._db.holding() else self._wait  # the other may wait for the lock this holds
        deadline = time.monotonic() + wait
        while True:
            with keys._lock:
                if ident not in keys._inflight:
                    keys._inflight[ident] = None  # an Event only once a second request waits
                    break
                other = keys._inflight[ident]
                if other is None:
                    other = keys._inflight[ident] = threading.Event()
            if not other.wait(max(0.0, deadline - time.monotonic())):
                key = self._claim.key
                raise errors.Conflict(
                    f"a request with the Idempotency-Key {key!r} is still running: try again later"
                )
        _running.claim, _running.seq = self._claim, None
        return self

    def __exit__(self, *exc: object) -> None:
        _running.claim, _running.seq = None, None
        keys = self._keys
        with keys._lock:
            waiting = keys._inflight.pop(self._ident)
        if waiting is not None:
            waiting.set()

    @property
    def seq(self) -> int | None:
        """The seq of the first event its write recorded (with its key), None while it wrote none."""
        return _running.seq

    def written(self, seq: int) -> None:
        """The key's row exists already (a repeat runs its handler again): record no second one."""
        _running.seq = seq


class Keys:
    """The keys of one store: look one up, run a request under one, store its answer."""

    def __init__(self, db: Connections) -> None:
        self._db = db
        self._inflight: dict[tuple[str, str], threading.Event | None] = {}
        """The keys of the requests running, each with the Event their end sets once one waits."""
        self._lock = threading.Lock()

    def find(self, scope: str, key: str) -> Found | None:
        row = (
            self._db.reader()
            .execute(
                "SELECT fingerprint, seq, status, body FROM request_keys WHERE scope = ? AND key = ?",
                (scope, key),
            )
            .fetchone()
        )
        if row is None:
            return None
        return Found(row[0], row[1], row[2], bytes(row[3]) if row[3] is not None else None)

    def running(self, claim: Claim, *, wait: float = 30.0) -> Run:
        """Run the request ``claim`` on this thread (its first recorded event writes the key):
        ``with keys.running(claim) as run``.

        A second request with the same key while the first runs waits (at most ``wait`` seconds)
        for it to end before it is let in, so it finds the first one's key (or runs, if that one
        wrote nothing). Conflict when the first one is still running after ``wait`` (at once when
        this thread holds the writer lock in a group: the first may be waiting for it)."""
        return Run(self, claim, wait)

    def answered(self, claim: Claim, status: int, body: bytes) -> None:
        """Store the answer of a request whose write recorded its key."""
        with self._db.write() as conn:
            conn.execute(
                "UPDATE request_keys SET status = ?, body = ? WHERE scope = ? AND key = ?",
                (status, body, claim.scope, claim.key),
            )

    def event_at(self, seq: int) -> tuple[str, str]:
        """(type, payload) of the event with ``seq``: what a lost answer is rebuilt from."""
        row = self._db.reader().execute("SELECT type, payload FROM events WHERE seq = ?", (seq,)).fetchone()
        return row[0], row[1]
