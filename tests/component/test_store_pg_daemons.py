"""Several daemons on one PostgreSQL store (tests/pg.py): a commit on one wakes the long-polls parked
on another at once (LISTEN/NOTIFY), and a token revoked through one is refused by the other; two
daemon processes with stand-ins conversing through both, one SIGKILLed mid-conversation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import retry_until

from fleet import errors
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths


def home(root: Path, store: str) -> Paths:
    return Paths(root / "data", root / "state", root / "config", root / "logs", store)


@dataclass
class Two:
    a: Daemon
    b: Daemon

    def operator(self, d: Daemon) -> Client:
        return Client(d.url, d.operator_token)


@pytest.fixture
def two(pg_url: str, tmp_path: Path) -> Iterator[Two]:
    """Daemons A and B in this process, each its own state dir, on one database."""
    a = Daemon(home(tmp_path / "a", pg_url), listen="127.0.0.1:0")
    b = Daemon(home(tmp_path / "b", pg_url), listen="127.0.0.1:0")
    a.start()
    try:
        b.start()
        try:
            yield Two(a, b)
        finally:
            b.stop()
    finally:
        a.stop()


def test_a_long_poll_parked_on_b_wakes_at_once_for_a_post_on_a(two: Two) -> None:
    on_a, on_b = two.operator(two.a), two.operator(two.b)
    on_a.create_wave("w", ["alice"])
    main = on_b.resolve("w/main").id
    cursor = on_b.read(main).blips[-1].id
    got: list[tuple[float, list[str]]] = []

    def park() -> None:
        page = on_b.read(main, after=cursor, wait=20)
        got.append((time.monotonic(), [x.text for x in page.blips]))

    t = threading.Thread(target=park)
    t.start()
    retry_until(lambda: two.b.notifier.parked > 0, what="the read to park on B")
    sent = time.monotonic()
    on_a.post(main, "from A", as_="alice")
    t.join(25)
    assert got and got[0][1] == ["from A"], got
    assert got[0][0] - sent < 2.0, f"woken {got[0][0] - sent:.2f} s after the post (the wait was 20 s)"


def test_a_token_revoked_through_a_is_refused_by_b(two: Two) -> None:
    on_a = two.operator(two.a)
    on_a.create_wave("w", ["alice"])
    minted = on_a.mint_token("w", "alice")
    alice_on_b = Client(two.b.url, minted.token)
    assert alice_on_b.whoami().principal == "alice"  # B now remembers the token
    on_a.revoke_token(token_id=minted.id)

    def refused() -> bool:
        try:
            alice_on_b.whoami()
        except errors.Unauthorized:
            return True
        return False

    retry_until(refused, timeout=5, what="B to refuse the token revoked through A")
