"""The one place fleet mints ids.

Ids are UUIDv7 in their canonical text form, so lexicographic order is time order. The daemon mints
them inside its write transaction through one :class:`IdMinter`, which guarantees that every id is
strictly greater than the one before it, even when the clock steps back or two ids fall in the same
millisecond. "Deliver blips with id > cursor" is correct because of that guarantee.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
import uuid
from typing import Any


def _bump(value: str) -> str:
    """The smallest UUIDv7 text strictly greater than ``value``: its 74 random bits plus one."""
    n = uuid.UUID(value).int
    ts = n >> 80
    rand = (((n >> 64) & 0xFFF) << 62) | (n & ((1 << 62) - 1))
    rand += 1
    if rand >> 74:  # the random bits overflowed: carry into the millisecond timestamp
        ts, rand = ts + 1, 0
    out = (ts << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=out))


class IdMinter:
    """Mints strictly increasing UUIDv7 text ids. Thread-safe."""

    def __init__(self, last: str | None = None) -> None:
        self._last = last or ""
        self._lock = threading.Lock()

    def observe(self, existing: str | None) -> None:
        """Make sure later ids exceed ``existing`` (called with the store's largest id at start)."""
        with self._lock:
            if existing and existing > self._last:
                self._last = existing

    def mint(self) -> str:
        import uuid6  # here, not at the top: a client making request keys need not load it (~17 ms)

        with self._lock:
            candidate = str(uuid6.uuid7())
            if candidate <= self._last:
                candidate = _bump(self._last)
            self._last = candidate
            return candidate


def request_key() -> str:
    """A fresh request key (``Idempotency-Key``): a UUIDv7 (the time in ms, 74 random bits), made
    once per logical write by a client. Unique, not ordered: the daemon's ids are :class:`IdMinter`'s."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big") >> 6
    n = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def digest(text: str) -> str:
    """The SHA-256 of ``text`` (UTF-8) in hex: the same digest as ``hashlib.sha256``, so names made
    from it (state files, gate sockets) stay what they were."""
    hexdigest: str = _sha256(text.encode()).hexdigest()
    return hexdigest


def _sha256_impl() -> Any:
    # CPython's own SHA-256 module, not hashlib: importing hashlib loads OpenSSL's libcrypto, 3.4 MiB
    # of a channel's resident memory (a quarter of its budget) and 4 ms, for one short digest per
    # start. The module is _sha2 from 3.12, _sha256 before; hashlib only if neither is built in.
    for name in ("_sha2", "_sha256"):
        try:
            return importlib.import_module(name).sha256
        except ImportError:
            continue
    import hashlib

    return hashlib.sha256


_sha256 = _sha256_impl()


def is_id_like(text: str) -> bool:
    """True when ``text`` could be an id or an id prefix (4 to 36 hex digits and dashes)."""
    return 4 <= len(text) <= 36 and all(c in "0123456789abcdef-" for c in text.lower())
