"""The console's test fixtures and helpers, shared by tests/component/test_console.py (the wire) and
the browser tests (tests/system/test_console_browser.py, test_console_campaign.py, ...).

Registered as a plugin in tests/conftest.py: ``d`` (a daemon with its console), ``op``, ``wave``,
``browser`` (headless Chromium, one per module) and ``page`` are fixtures of every test.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from cdp import Browser, Page
from conftest import retry_until

from fleet.client import Client
from fleet.console import Console
from fleet.daemon import Daemon
from fleet.paths import Paths

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def d(fleet_env: Paths) -> Iterator[Daemon]:
    """A real daemon with its console, both on 127.0.0.1:0."""
    daemon = Daemon(fleet_env, listen="127.0.0.1:0", ui="127.0.0.1:0")
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def op(d: Daemon) -> Iterator[Client]:
    with Client(d.url, d.operator_token) as c:
        yield c


@pytest.fixture
def wave(op: Client) -> Any:
    """Wave ``demo`` with alice and bob on ``main``."""
    return op.create_wave("demo", ["alice", "bob"])


def ui(d: Daemon) -> Console:
    assert d.console is not None
    return d.console


@dataclass
class Resp:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    d: Daemon,
    method: str,
    path: str,
    *,
    cookie: str | None = None,
    origin: str | None = None,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> Resp:
    """One raw HTTP request to the console (``origin`` is sent verbatim when given)."""
    parts = urlsplit(ui(d).url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    h = dict(headers or {})
    if cookie:
        h["Cookie"] = cookie
    if origin:
        h["Origin"] = origin
    data: bytes | None = None
    if isinstance(body, bytes):
        data = body
    elif body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        return Resp(r.status, r.headers, r.read())
    finally:
        conn.close()


def login(d: Daemon) -> str:
    """Log in through a fresh one-time link; the ``name=value`` cookie to send back."""
    r = request(d, "GET", urlsplit(ui(d).login_link())._replace(scheme="", netloc="").geturl())
    assert r.status == 303, r.body
    return r.headers["Set-Cookie"].split(";")[0]


@dataclass
class Event:
    event: str = "message"
    id: str | None = None
    data: str = ""
    comment: str | None = None

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class EventStream:
    """A raw SSE client: the status line, headers, then events as the server writes them."""

    sock: socket.socket
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    _file: Any = None

    @classmethod
    def open(cls, d: Daemon, path: str, cookie: str | None, last_event_id: str | None = None) -> EventStream:
        parts = urlsplit(ui(d).url)
        sock = socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10)
        lines = [f"GET {path} HTTP/1.1", f"Host: {parts.netloc}", "Accept: text/event-stream"]
        if cookie:
            lines.append(f"Cookie: {cookie}")
        if last_event_id:
            lines.append(f"Last-Event-ID: {last_event_id}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        s = cls(sock)
        s._file = sock.makefile("rb")
        status = s._file.readline().decode()
        s.status = int(status.split()[1])
        while (line := s._file.readline().decode().rstrip("\r\n")) != "":
            k, _, v = line.partition(":")
            s.headers[k.strip().lower()] = v.strip()
        return s

    def next(self, timeout: float = 10.0) -> Event | None:
        """The next event or comment, or None when the server closed the stream."""
        self.sock.settimeout(timeout)
        ev = Event()
        seen = False
        while True:
            raw = self._file.readline()
            if not raw:
                return None
            line = raw.decode("utf-8").rstrip("\n")
            if line == "":
                if seen:
                    return ev
                continue
            seen = True
            if line.startswith(":"):
                return Event(event="comment", comment=line[1:].strip())
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                ev.event = value
            elif name == "id":
                ev.id = value
            elif name == "data":
                ev.data = value if not ev.data else ev.data + "\n" + value
            elif name == "retry":
                seen = False  # a retry-only block is no event

    def until(self, pred: Any, timeout: float = 10.0) -> list[Event]:
        """Every event up to and including the first for which ``pred`` is true."""
        out: list[Event] = []
        while True:
            ev = self.next(timeout)
            assert ev is not None, f"the stream ended before the event waited for; got {out}"
            out.append(ev)
            if pred(ev):
                return out

    def close(self) -> None:
        self.sock.close()


def blip_ids(events: list[Event]) -> list[str]:
    return [e.id for e in events if e.event == "blip" and e.id]


# ---------------------------------------------------------------- browser fixtures


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One headless Chromium per test process (each xdist worker), each test's page in a browser
    context of its own (:meth:`Browser.new_page`: its own cookies and storage). Not per module: with
    the slow tiers' tests handed out one at a time, a worker goes from module to module and a module
    fixture started Chromium again for most browser tests (1–4 s each)."""
    b = Browser()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    p = browser.new_page()
    try:
        yield p
    finally:
        p.close()


def open_console(page: Page, d: Daemon, fragment: str = "") -> None:
    """Log the page in through a one-time link, open ``fragment`` and wait until it is live."""
    page.goto(ui(d).login_link())
    if fragment:
        page.goto("about:blank")  # from / to /#... alone would not load the page again
        page.goto(f"{ui(d).url}/{fragment}")
    retry_until(
        lambda: (
            page.eval("!!document.body.dataset.loaded && document.getElementById('conn').dataset.state")
            == "live"
        ),
        what="the console to load its wavelet and go live",
    )


def texts(page: Page) -> list[str]:
    return list(page.eval("[...document.querySelectorAll('#blips .blip .text')].map(e => e.textContent)"))


def selected(page: Page) -> str:
    return str(page.eval("document.body.dataset.loaded || ''"))


def no_js_errors(page: Page) -> None:
    assert page.exceptions() == []


def run_cli(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), FLEET_DAEMON=d.url, FLEET_TOKEN=d.operator_token)
    r = subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r
