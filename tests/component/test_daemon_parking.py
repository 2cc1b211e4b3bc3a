"""Parked requests on the daemon's event loop (fleet.httpbase): a long-poll or an event stream that
waits costs a park on the loop, not a thread; a post wakes exactly the requests that wait on what it
touched; a request head may arrive in any pieces, pipelined or not."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest
from conftest import retry_until
from consolehelp import EventStream, login
from httphelp import host_port, split_responses
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths

THREADS = 16
"""The issue's bound on a daemon's threads with its long-polls parked."""


def _send(url: str, data: bytes) -> socket.socket:
    s = socket.create_connection(host_port(url), timeout=10)
    s.sendall(data)
    return s


def _head(url: str, method: str, path: str, token: str, body: bytes = b"") -> bytes:
    host, port = host_port(url)
    return (
        f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _answers(sock: socket.socket, n: int) -> list[tuple[int, dict[str, str], bytes]]:
    """The next ``n`` complete answers off ``sock``."""
    data = b""
    while True:
        try:
            got = split_responses(data) if data else []
        except AssertionError:  # still truncated
            got = []
        if len(got) >= n:
            return got
        chunk = sock.recv(65536)
        assert chunk, f"closed after {data[:300]!r}"
        data += chunk


def _answer(sock: socket.socket) -> tuple[int, bytes]:
    [(status, _headers, body)] = _answers(sock, 1)
    return status, body


_BEFORE: set[threading.Thread] = set()
"""The threads of this test process before the test's daemon started (others' tests left some)."""


def daemon_threads() -> int:
    """The threads the daemon started (those alive now that were not before it started): what the
    bound is on, whatever earlier tests in this worker left running beside it."""
    return sum(t not in _BEFORE for t in threading.enumerate())


@pytest.fixture
def d(fleet_env: Paths) -> Iterator[Daemon]:
    _BEFORE.clear()
    _BEFORE.update(threading.enumerate())
    daemon = Daemon(fleet_env, "127.0.0.1:0", ui="127.0.0.1:0")
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def test_two_hundred_parked_feeds_cost_no_thread_each(d: Daemon) -> None:
    """With 200 feeds parked (a connection each, the channels' long-poll), this process's threads
    stay within the issue's bound: the loop holds them, not a thread per connection."""
    with Client(d.url, d.operator_token) as op:
        op.create_wave("w", ["alice"])
        token = op.mint_token("w", "alice").token
        main = op.resolve("w/main").id
        head = op.read(main).cursor
    body = json.dumps({"participant": "alice", "cursors": {main: head}, "wait": 30}).encode()
    n = 200
    socks = [_send(d.url, _head(d.url, "POST", "/v1/waves/w/feed", token, body)) for _ in range(n)]
    try:
        retry_until(lambda: d.notifier.parked == n, 20, 0.02, f"{n} parked feeds")
        threads = daemon_threads()
        assert threads <= THREADS, f"{threads} threads with {n} feeds parked"
        with Client(d.url, d.operator_token) as op:
            assert op.health().parked == n
            op.post(main, "alice: hello", as_="alice")
        for s in socks:  # every one of them wakes, and answers the one blip
            status, answer = _answer(s)
            assert status == 200 and [b["text"] for b in json.loads(answer)["blips"]] == ["alice: hello"]
        assert daemon_threads() <= THREADS
    finally:
        for s in socks:
            s.close()


def test_parked_event_streams_cost_no_thread_each(d: Daemon) -> None:
    with Client(d.url, d.operator_token) as op:
        wave = op.create_wave("demo", ["alice"])
        cookie = login(d)
        streams = [EventStream.open(d, f"/api/console/waves/{wave.id}/events", cookie) for _ in range(60)]
        try:
            for s in streams:
                s.until(lambda e: e.event == "presence")
            retry_until(lambda: d.notifier.parked >= 60, 10, 0.02, "60 parked streams")
            assert daemon_threads() <= THREADS
            blip = op.post(wave.root_id, "alice: hi", as_="alice")
            for s in streams:
                s.until(lambda e, want=blip.id: e.event == "blip" and e.id == want)
        finally:
            for s in streams:
                s._file.close()  # the socket's file holds it open: close both
                s.close()
    retry_until(lambda: d.notifier.parked == 0, 10, 0.02, "the streams' parks released")


def test_a_post_wakes_exactly_the_requests_that_wait_on_what_it_touched(d: Daemon) -> None:
    """24 reads parked on wave a's wavelet, 24 on wave b's: a post to a answers a's 24 with it, and
    b's stay parked (nothing is sent on their connections)."""
    with Client(d.url, d.operator_token) as op:
        a = op.create_wave("a", ["alice"]).root_id
        b = op.create_wave("b", ["bob"]).root_id
        after = {w: op.read(w).cursor for w in (a, b)}
        n = 24
        socks = {
            w: [
                _send(
                    d.url, _head(d.url, "GET", f"/v1/wavelets/{w}/blips?after={after[w]}&wait=30", op.token)
                )
                for _ in range(n)
            ]
            for w in (a, b)
        }
        try:
            retry_until(lambda: d.notifier.parked == 2 * n, 10, 0.02, f"{2 * n} parked reads")
            assert daemon_threads() <= THREADS
            posted = op.post(a, "alice: only a", as_="alice")
            for s in socks[a]:
                status, answer = _answer(s)
                assert status == 200 and [x["id"] for x in json.loads(answer)["blips"]] == [posted.id]
            assert d.notifier.parked == n  # b's, still parked
            for s in socks[b]:
                s.settimeout(0.05)
                with pytest.raises(TimeoutError):
                    s.recv(1)
        finally:
            for group in socks.values():
                for s in group:
                    s.close()
    retry_until(lambda: d.notifier.parked == 0, 10, 0.02, "b's reads released as they hung up")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_pipelined_requests_in_any_pieces_are_answered_in_order(d: Daemon, data: st.DataObject) -> None:
    """However the bytes of several pipelined requests are cut into sends, each is answered once, in
    order, as it would be sent whole."""
    token = d.operator_token
    requests = [
        _head(d.url, "GET", "/v1/health", token),
        _head(d.url, "GET", "/v1/whoami", token),
        _head(d.url, "POST", "/v1/waves", token, b'{"name": 5}'),  # 400: the name is not text
        _head(d.url, "GET", "/v1/nowhere", token),
    ]
    picked = data.draw(st.lists(st.sampled_from(range(len(requests))), min_size=1, max_size=5))
    stream = b"".join(requests[i] for i in picked)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=6)))
    with socket.create_connection(host_port(d.url), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for lo, hi in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            s.sendall(stream[lo:hi])
        want = {0: 200, 1: 200, 2: 400, 3: 404}
        got = _answers(s, len(picked))
    assert [status for status, _h, _b in got] == [want[i] for i in picked]
