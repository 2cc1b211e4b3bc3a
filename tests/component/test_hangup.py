"""A parked long-poll whose client hung up is released at once (docs/design.md §2), not at its
timeout: its waiter leaves the notifier and its thread ends (it gave its read connection back
before it parked)."""

from __future__ import annotations

import socket
import threading

from conftest import retry_until
from httphelp import host_port

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.store.schema import IDLE_READERS


def parked_poll(url: str, token: str, path: str) -> socket.socket:
    """A raw long-poll request, sent; the caller closes the socket without reading the answer."""
    s = socket.create_connection(host_port(url), timeout=10)
    host, port = host_port(url)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    return s


def test_long_polls_whose_clients_hang_up_leave_at_once(daemon: Daemon, operator: Client) -> None:
    operator.create_wave("w", ["alice"])
    main = operator.resolve("w/main").id
    head = operator.read(main).cursor
    n = 24
    assert n > IDLE_READERS
    socks = [
        parked_poll(daemon.url, daemon.operator_token, f"/v1/wavelets/{main}/blips?after={head}&wait=60")
        for _ in range(n)
    ]
    socks += [
        parked_poll(daemon.url, daemon.operator_token, f"/v1/waves/w/blips?after={head}&wait=60")
        for _ in range(n)
    ]
    retry_until(lambda: daemon.notifier.parked == 2 * n, 10, 0.01, f"{2 * n} parked long-polls")
    assert operator.health().parked == 2 * n
    store = daemon.store
    assert store is not None
    assert store._db.held_readers == 0  # a parked request holds no read connection
    assert store._db.open_readers == IDLE_READERS
    for s in socks:
        s.close()
    # well before the 60 s wait: the waiters are gone, and so are their threads' readers
    retry_until(lambda: daemon.notifier.parked == 0, 5, 0.01, "every waiter released")
    assert operator.health().parked == 0
    assert store._db.open_readers == IDLE_READERS
    # a reader that stays gets its answer as before
    got: list[int] = []
    t = threading.Thread(target=lambda: got.append(len(operator.read(main, after=head, wait=20).blips)))
    t.start()
    retry_until(lambda: daemon.notifier.parked == 1, 5, 0.01, "the live long-poll parked")
    operator.post(main, "alice: hello", as_="alice")
    t.join(10)
    assert got == [1]


def test_a_feed_whose_client_hangs_up_leaves_at_once(daemon: Daemon, operator: Client) -> None:
    operator.create_wave("w", ["alice"])
    token = operator.mint_token("w", "alice").token
    main = operator.resolve("w/main").id
    head = operator.read(main).cursor
    s = socket.create_connection(host_port(daemon.url), timeout=10)
    host, port = host_port(daemon.url)
    body = f'{{"participant":"alice","cursors":{{"{main}":"{head}"}},"wait":60}}'.encode()
    s.sendall(
        f"POST /v1/waves/w/feed HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    retry_until(lambda: daemon.notifier.parked == 1, 10, 0.01, "the feed parked")
    s.close()
    retry_until(lambda: daemon.notifier.parked == 0, 5, 0.01, "the feed's waiter released")
