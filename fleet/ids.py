"""The one place fleet mints ids.

Ids are UUIDv7 in their canonical text form, so lexicographic order is time order. The daemon mints
them inside its write transaction through one :class:`IdMinter`, which guarantees that every id is
strictly greater than the one before it, even when the clock steps back or two ids fall in the same
millisecond. "Deliver blips with id > cursor" is correct because of that guarantee.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
import time
from typing import Any

UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
"""The text of an id fleet mints (what an import accepts as one: :mod:`fleet.store.artifact`)."""
_RAND = 74
"""Random bits in a UUIDv7 (12 before the variant, 62 after)."""
_LOW = (1 << 62) - 1


def _order(value: str) -> int:
    """The 122 bits of a UUIDv7 text that order it: its millisecond timestamp, then its random bits
    (the version and variant bits, the same in every one, left out)."""
    n = int(value.replace("-", ""), 16)
    return ((n >> 80) << _RAND) | (((n >> 64) & 0xFFF) << 62) | (n & _LOW)


def _text(order: int) -> str:
    """The UUIDv7 text of :func:`_order`'s number: a random part that overflows carries into the
    millisecond, so a greater number is always a greater text."""
    n = (
        ((order >> _RAND) << 80)
        | (0x7 << 76)
        | (((order >> 62) & 0xFFF) << 64)
        | (0b10 << 62)
        | (order & _LOW)
    )
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class IdMinter:
    """Mints strictly increasing UUIDv7 text ids. Thread-safe.

    Each id's millisecond is greater than the one before it: the clock's, or the last id's plus one
    when the clock has not moved past it (as uuid6's ``uuid7()`` counts). So the first 13
    characters of an id (its millisecond: the short id the CLI shows, ``fleet.cli.render.SHORT``)
    name it alone among a store's ids; the price is that under more than one id a millisecond the
    ids' time runs ahead of the clock (5,000 in a tight loop: 5.0 s), which nothing reads as a time
    (each row has its own ``created_at``). The 74 bits after it are random."""

    def __init__(self, last: str | None = None) -> None:
        self._last = last or ""
        self._last_order = _order(last) if last else -1
        self._lock = threading.Lock()

    def observe(self, existing: str | None) -> None:
        """Make sure later ids exceed ``existing`` (called with the store's largest id at start).
        An ``existing`` that is not UUIDv7 text (a store edited by hand: an import refuses any
        other) is a StorageFault naming it: no id could be minted above it."""
        with self._lock:
            if existing and existing > self._last:
                if not UUID7.fullmatch(existing):
                    from fleet import errors

                    raise errors.StorageFault(
                        f"the store holds the id {existing[:80]!r}, which is not one fleet mints (UUIDv7"
                        " text), and it is the largest: the database was edited by hand. Restore a"
                        " backup (`fleet backup` makes them), or put the row's id back"
                    )
                self._last, self._last_order = existing, _order(existing)

    def mint(self) -> str:
        ms = time.time_ns() // 1_000_000
        draw = int.from_bytes(os.urandom(10)) >> 6  # 74 random bits
        with self._lock:
            last_ms = self._last_order >> _RAND
            if ms <= last_ms:  # the last id's millisecond or before it (a clock stepped back)
                ms = last_ms + 1
            order = (ms << _RAND) | draw
            text = _text(order)
            self._last, self._last_order = text, order
            return text


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
