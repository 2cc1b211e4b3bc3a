"""The operator console (issue 8) with real components: the real daemon with its console on
127.0.0.1:0, raw HTTP and raw Server-Sent Events for the wire rules, and Debian's headless Chromium
driven over the DevTools protocol (``tests/cdp.py``) for the page itself.

Browser tests poll the DOM with a deadline (``retry_until``); the only time bound asserted is the
issue's own: a blip posted through the CLI shows up in the open page within a second.
"""

from __future__ import annotations

import contextlib
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
from cdp import Browser, CDPError, Page
from conftest import retry_until
from mcphelp import RawMcp, channel_argv, minted_token_file

from fleet import errors
from fleet.client import Client
from fleet.console import Console, parse_ui_address
from fleet.daemon import Daemon
from fleet.models import AgentState, PresenceReport
from fleet.paths import Paths

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "artifacts"


# ---------------------------------------------------------------- fixtures and helpers


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


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
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


# ---------------------------------------------------------------- off, loopback, addresses


def test_the_console_is_off_unless_asked_for(fleet_env: Paths) -> None:
    daemon = Daemon(fleet_env, listen="127.0.0.1:0")
    daemon.start()
    try:
        assert daemon.console is None
    finally:
        daemon.stop()


def test_a_non_loopback_console_needs_the_explicit_ask(fleet_env: Paths) -> None:
    with pytest.raises(errors.UsageError, match="non-loopback"):
        Daemon(fleet_env, ui="0.0.0.0:0")
    daemon = Daemon(fleet_env, ui="0.0.0.0:0", allow_remote_ui=True)
    daemon.start()
    try:
        assert ui(daemon).url.startswith("https://0.0.0.0:")  # off loopback: HTTPS
    finally:
        daemon.stop()
    assert parse_ui_address("8087") == ("127.0.0.1", 8087)
    assert parse_ui_address(":8087") == ("127.0.0.1", 8087)
    with pytest.raises(errors.UsageError, match="--ui"):
        parse_ui_address("nonsense")


# ---------------------------------------------------------------- auth


def test_without_a_session_nothing_is_served(d: Daemon, wave: Any, op: Client) -> None:
    op.post(wave.root_id, "secret plans")
    for cookie in (None, f"{ui(d).cookie_name}=forged", "garbage;;=="):
        page = request(d, "GET", "/", cookie=cookie)
        assert page.status == 401
        assert b"log in" in page.body.lower() and b"<script" not in page.body.lower()
        assert b"demo" not in page.body and b"secret" not in page.body
        for path in (
            "/assets/console.js",
            "/assets/console.css",
            "/api/v1/waves",
            f"/api/v1/wavelets/{wave.root_id}/blips",
            f"/api/console/wavelets/{wave.root_id}/tail",
            "/api/console/waves/demo/events",
        ):
            r = request(d, "GET", path, cookie=cookie)
            assert r.status == 401, path
            assert b"secret" not in r.body and b"demo" not in r.body
            if path.startswith("/api/"):
                assert r.json()["error"]["kind"] == "unauthorized"
    stream = EventStream.open(d, "/api/console/waves/demo/events", None)
    assert stream.status == 401
    stream.close()


def test_the_login_link_works_once_and_sets_a_strict_httponly_cookie(d: Daemon, wave: Any) -> None:
    link = urlsplit(ui(d).login_link())
    path = f"{link.path}?{link.query}"
    first = request(d, "GET", path)
    assert first.status == 303 and first.headers["Location"] == "/"
    cookie = first.headers["Set-Cookie"]
    attrs = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "path"} <= attrs and "samesite=strict" in cookie.lower()
    again = request(d, "GET", path)
    assert again.status == 403 and "Set-Cookie" not in again.headers
    session = cookie.split(";")[0]
    shell = request(d, "GET", "/", cookie=session)
    assert shell.status == 200 and b"/assets/console.js" in shell.body
    assert "script-src 'self'" in shell.headers["Content-Security-Policy"]
    assert request(d, "GET", "/api/v1/waves", cookie=session).json()["waves"][0]["name"] == "demo"
    # Logging out ends the session.
    out = request(d, "POST", "/logout", cookie=session, origin=ui(d).url)
    assert out.status == 303
    assert request(d, "GET", "/api/v1/waves", cookie=session).status == 401


def test_the_operator_token_logs_in_too_but_only_from_the_page_itself(d: Daemon) -> None:
    form = f"token={d.operator_token}".encode()
    hdr = {"Content-Type": "application/x-www-form-urlencoded"}
    assert request(d, "POST", "/login", body=form, headers=hdr, origin="http://evil.example").status == 403
    assert request(d, "POST", "/login", body=form, headers=hdr).status == 403  # no Origin at all
    wrong = request(d, "POST", "/login", body=b"token=nope", headers=hdr, origin=ui(d).url)
    assert wrong.status == 403 and "Set-Cookie" not in wrong.headers
    good = request(d, "POST", "/login", body=form, headers=hdr, origin=ui(d).url)
    assert good.status == 303
    assert request(d, "GET", "/api/v1/whoami", cookie=good.headers["Set-Cookie"].split(";")[0]).status == 200


def test_cross_origin_posts_are_refused_before_anything_runs(d: Daemon, wave: Any, op: Client) -> None:
    cookie = login(d)
    path = f"/api/v1/wavelets/{wave.root_id}/blips"
    port = urlsplit(ui(d).url).port
    for origin in ("http://evil.example", f"http://localhost:{port}", "null", None):
        r = request(d, "POST", path, cookie=cookie, origin=origin, body={"text": "forged"})
        assert r.status == 403, origin
        assert r.json()["error"]["kind"] == "forbidden"
    assert [b.text for b in op.read(wave.root_id).blips if b.text == "forged"] == []
    ok = request(d, "POST", path, cookie=cookie, origin=ui(d).url, body={"text": "from the console"})
    assert ok.status == 201 and ok.json()["author"] == "operator"


def test_a_foreign_host_name_is_refused_on_loopback(d: Daemon) -> None:
    cookie = login(d)
    r = request(d, "GET", "/", cookie=cookie, headers={"Host": f"rebound.example:{ui(d).port}"})
    assert r.status == 421


def test_an_odd_cookie_from_another_app_on_this_host_does_not_log_the_operator_out(d: Daemon) -> None:
    cookie = login(d)
    odd = f'other="a b\\c"; broken; {cookie}; x=1'
    assert request(d, "GET", "/api/v1/whoami", cookie=odd).status == 200


def test_a_head_request_leaves_a_keep_alive_connection_usable(d: Daemon) -> None:
    cookie = login(d)
    host = urlsplit(ui(d).url).netloc
    with socket.create_connection(("127.0.0.1", ui(d).port), timeout=10) as sock:
        pipelined = "".join(
            f"{m} {p} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n\r\n"
            for m, p in (("HEAD", "/"), ("GET", "/api/v1/whoami"))
        )
        sock.sendall(pipelined.encode())
        buf = b""
        while b'"principal"' not in buf:
            chunk = sock.recv(65536)
            assert chunk, buf
            buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405")
    assert rest.startswith(b"HTTP/1.1 200"), rest[:80]  # nothing of a HEAD body in between


def test_a_busy_console_port_is_a_clear_error_and_leaves_nothing_behind(fleet_env: Paths) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        daemon = Daemon(fleet_env, ui=f"127.0.0.1:{port}")
        with pytest.raises(errors.UsageError, match="pick another --ui"):
            daemon.start()
    assert not fleet_env.endpoint.exists()
    again = Daemon(fleet_env, ui="127.0.0.1:0")  # the instance lock was released too
    again.start()
    again.stop()


def test_the_api_is_the_daemons_own_minus_the_token_routes(d: Daemon, wave: Any, op: Client) -> None:
    cookie = login(d)
    origin = ui(d).url
    assert request(d, "GET", "/api/v1/tokens", cookie=cookie).status == 404
    minted = request(
        d, "POST", "/api/v1/tokens", cookie=cookie, origin=origin, body={"wave": "demo", "participant": "x"}
    )
    assert minted.status == 404
    assert op.list_tokens() == []
    # The same errors as the daemon's API: a private wavelet, a bad name.
    bad = request(
        d,
        "POST",
        f"/api/v1/wavelets/{wave.root_id}/fork",
        cookie=cookie,
        origin=origin,
        body={"name": "Bad Name"},
    )
    assert bad.status == 400 and bad.json()["error"]["kind"] == "usage"


# ---------------------------------------------------------------- history pages


def test_tail_pages_backwards_through_current_blips(d: Daemon, wave: Any, op: Client) -> None:
    cookie = login(d)
    posted = [op.post(wave.root_id, f"blip {i}", as_="alice") for i in range(450)]
    newest = op.replace(posted[-1].id, "blip 449, edited")
    base = f"/api/console/wavelets/{wave.root_id}/tail"
    got: list[str] = []
    before = ""
    while True:
        page = request(d, "GET", f"{base}?limit=200&before={before}", cookie=cookie).json()
        got = [b["id"] for b in page["blips"]] + got
        if not page["more"]:
            break
        assert len(page["blips"]) == 200
        before = page["blips"][0]["id"]
    assert got == [b.id for b in op.read(wave.root_id, limit=5000).blips]
    assert got[-1] == newest.id and posted[-1].id not in got
    assert len(got) == 451  # the wave's first system blip, 450 posts, one of them replaced
    assert request(d, "GET", f"{base}?limit=451", cookie=cookie).json()["more"] is False
    assert request(d, "GET", f"{base}?limit=450", cookie=cookie).json()["more"] is True
    assert request(d, "GET", f"{base}?before=zz", cookie=cookie).status == 400


# ---------------------------------------------------------------- the event stream


def test_the_event_stream_resumes_with_last_event_id_missing_nothing(
    d: Daemon, wave: Any, op: Client
) -> None:
    cookie = login(d)
    path = f"/api/console/waves/{wave.name}/events"
    side = op.fork(wave.root_id, "side", ["alice"])
    s = EventStream.open(d, path, cookie)
    assert s.status == 200 and s.headers["content-type"].startswith("text/event-stream")
    first = s.until(lambda e: e.event == "presence")
    ready = first[0]
    assert ready.event == "ready" and ready.id == ready.json()["cursor"]
    assert [e.event for e in first[1:]] == ["tree", "presence"]
    tree = first[1].json()
    assert {w["name"] for w in tree["wavelets"]} == {"main", "side"}
    b1 = op.post(wave.root_id, "one")
    got = s.until(lambda e: e.event == "blip")
    assert blip_ids(got) == [b1.id] and got[-1].json()["text"] == "one"
    s.close()
    missed = [
        op.post(wave.root_id, "two"),
        op.post(side.id, "three", as_="alice"),
        op.post(wave.root_id, "four"),
    ]
    again = EventStream.open(d, path, cookie, last_event_id=b1.id)
    marker = op.post(wave.root_id, "marker")
    events = again.until(lambda e: e.id == marker.id)
    assert blip_ids(events) == [b.id for b in missed] + [marker.id]
    again.close()
    # ?after= is the same cursor for a client that cannot set the header; the header wins over it.
    by_query = EventStream.open(d, f"{path}?after={missed[1].id}", cookie)
    assert blip_ids(by_query.until(lambda e: e.id == marker.id)) == [missed[2].id, marker.id]
    by_query.close()
    both = EventStream.open(d, f"{path}?after={b1.id}", cookie, last_event_id=missed[2].id)
    assert blip_ids(both.until(lambda e: e.id == marker.id)) == [marker.id]
    both.close()


def test_the_event_stream_carries_replaces_roster_and_presence_changes(
    d: Daemon, wave: Any, op: Client
) -> None:
    cookie = login(d)
    s = EventStream.open(d, f"/api/console/waves/{wave.id}/events", cookie)
    s.until(lambda e: e.event == "presence")
    old = op.post(wave.root_id, "draft", as_="alice")
    new = op.replace(old.id, "final", as_="alice")
    events = s.until(lambda e: e.id == new.id)
    assert blip_ids(events) == [old.id, new.id] and events[-1].json()["replaces"] == old.id
    op.invite(wave.root_id, "carol")
    events = s.until(lambda e: e.event == "tree")
    roster = next(w for w in events[-1].json()["wavelets"] if w["id"] == wave.root_id)["roster"]
    assert "carol" in [m["name"] for m in roster]
    op.report_presence("demo", PresenceReport(participant="alice", event="ping"))
    op.report_presence(
        "demo", PresenceReport(participant="alice", event="ping", agent=AgentState(kind="turning", since=1.0))
    )
    states = s.until(
        lambda e: (
            e.event == "presence"
            and {r["participant"]: r["agent"]["kind"] for r in e.json()["presence"]}.get("alice") == "turning"
        )
    )
    assert states[-1].event == "presence"
    s.close()


def test_an_idle_stream_gets_keep_alive_comments(d: Daemon, wave: Any) -> None:
    cookie = login(d)
    ui(d).keepalive = 0.2
    s = EventStream.open(d, f"/api/console/waves/{wave.name}/events", cookie)
    events = s.until(lambda e: e.event == "comment")
    assert events[-1].comment == "keep-alive"
    s.close()


def test_stopping_the_daemon_ends_open_streams(fleet_env: Paths) -> None:
    daemon = Daemon(fleet_env, ui="127.0.0.1:0")
    daemon.start()
    try:
        with Client(daemon.url, daemon.operator_token) as c:
            c.create_wave("demo")
        s = EventStream.open(daemon, "/api/console/waves/demo/events", login(daemon))
        s.until(lambda e: e.event == "presence")
    finally:
        daemon.stop()
    assert s.next(timeout=5) is None
    s.close()


# ---------------------------------------------------------------- in a real browser


def test_without_the_cookie_the_page_shows_nothing(page: Page, d: Daemon, wave: Any, op: Client) -> None:
    op.post(wave.root_id, "secret plans")
    page.goto(ui(d).url + "/")
    body = page.eval("document.body.innerText")
    assert "log in" in body.lower()
    assert "secret" not in body and "demo" not in body
    assert page.eval("document.scripts.length") == 0
    # The page itself may not even fetch (its CSP has no connect-src): visit each URL instead.
    for path in ("/api/v1/waves", "/api/console/waves/demo/events", "/assets/console.js"):
        page.goto(ui(d).url + path)
        assert page.eval("performance.getEntriesByType('navigation')[0].responseStatus") == 401, path
        shown = page.eval("document.body.innerText")
        assert "secret" not in shown and "demo" not in shown
    # A used link does not log anyone in.
    link = ui(d).login_link()
    request(d, "GET", urlsplit(link)._replace(scheme="", netloc="").geturl())
    page.goto(link)
    assert "already used" in page.eval("document.body.innerText")
    page.goto(ui(d).url + "/api/v1/waves")
    assert page.eval("performance.getEntriesByType('navigation')[0].responseStatus") == 401


def test_a_blip_posted_through_the_cli_appears_within_a_second(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    open_console(page, d, "#/demo/main")
    assert selected(page) == wave.root_id
    run_cli(d, "post", "demo/main", "--as", "alice", "the build is green again")
    # Measured from the moment the CLI returned (the blip is committed): the stream must deliver it.
    retry_until(lambda: "the build is green again" in texts(page), timeout=1.0, what="the blip in the page")
    author = page.eval("document.querySelector('#blips .blip:last-child').dataset.author")
    assert author == "alice"
    no_js_errors(page)


def test_a_post_typed_into_the_page_lands_in_the_store_and_reaches_a_real_channel(
    page: Page, d: Daemon, wave: Any, op: Client, tmp_path: Path
) -> None:
    token_file = minted_token_file(op, "demo", "alice", tmp_path)
    channel = RawMcp(channel_argv("alice", "demo", d.url, token_file), stderr=tmp_path / "alice.stderr")
    try:
        channel.handshake()
        typed_post_reaches(page, d, wave, op, channel)
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            channel.close(timeout=10)  # stdin closed: the MCP shutdown
        channel.kill()
        for pipe in (channel.proc.stdin, channel.proc.stdout):
            if pipe is not None:
                pipe.close()


def typed_post_reaches(page: Page, d: Daemon, wave: Any, op: Client, channel: RawMcp) -> None:
    open_console(page, d)
    page.click("#compose")
    page.type("@al")
    retry_until(
        lambda: (
            page.eval("[...document.querySelectorAll('#mentions li')].map(l => l.dataset.name)") == ["alice"]
        ),
        what="the mention autocomplete",
    )
    page.press("Tab")
    assert page.eval("document.getElementById('compose').value") == "@alice "
    page.type("please rerun the flaky test")
    page.press("Enter")
    text = "@alice please rerun the flaky test"
    posted = retry_until(
        lambda: [b for b in op.read(wave.root_id).blips if b.text == text], what="the post in the store"
    )
    assert posted[0].author == "operator" and posted[0].kind == "message"
    # alice's real channel (a `fleet channel` process speaking MCP on stdio) delivers it.
    note = channel.wait_notes(
        lambda notes: next((n for n in notes if n["content"] == text), None), what="the channel delivery"
    )
    assert note["meta"]["author"] == "operator" and note["meta"]["blip_id"] == posted[0].id
    retry_until(lambda: text in texts(page), what="the post in the page")
    assert page.eval("document.getElementById('compose').value") == ""
    # A delivery is not work: alice's agent keeps no transcript fleet reads, and the page says so.
    retry_until(
        lambda: (
            "not Claude Code"
            in (page.eval("document.querySelector('#presence li[data-name=alice]')?.title") or "")
        ),
        what="alice unknown, and why, in the page",
    )
    no_js_errors(page)


XSS = (
    "<script>window.__pwned = 'script'</script>"
    "<img src=x onerror=\"window.__pwned = 'img'\">"
    "<b>not bold</b> & &amp; <a href=javascript:alert(1)>link</a>"
)


def test_markup_in_a_blip_renders_as_text_and_never_runs(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    op.post(wave.root_id, "before: " + XSS, as_="alice")
    open_console(page, d)
    run_cli(d, "post", "demo/main", "--as", "bob", "live: " + XSS)
    retry_until(
        lambda: page.eval("document.querySelectorAll('#blips .blip').length") == 3, what="the live blip"
    )
    assert page.eval("document.querySelectorAll('#blips img, #blips script, #blips b, #blips a').length") == 0
    retry_until(lambda: "live: " + XSS in texts(page), what="the live blip, as text")
    assert "before: " + XSS in texts(page)
    assert page.eval("typeof window.__pwned") == "undefined"
    visible = page.eval("document.getElementById('blips').innerText")
    assert "<script>window.__pwned = 'script'</script>" in visible
    no_js_errors(page)


def test_the_page_resumes_its_stream_with_last_event_id_and_misses_nothing(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    ui(d).max_stream = 0.3  # the console ends each stream quickly; the browser reconnects on its own
    open_console(page, d)
    expected = texts(page)
    conn = "document.getElementById('conn').dataset.state"
    for round_ in range(3):
        retry_until(lambda: page.eval(conn) == "reconnecting…", what="the stream to end")
        # Posted while the page has no stream: only a resume from Last-Event-ID can bring them.
        expected += [op.post(wave.root_id, f"missed {round_}.{i}", as_="alice").text for i in range(2)]
        want = list(expected)
        retry_until(lambda: texts(page) == want, what=f"the blips of round {round_}, once each, in order")  # noqa: B023
    no_js_errors(page)


def test_the_operator_forks_invites_removes_and_surfaces_from_the_page(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    open_console(page, d)
    page.click("#actions [data-form=fork]")
    page.eval(
        "(() => { const f = document.getElementById('form-fork'); f.name.value = 'design';"
        " f.with.value = 'alice'; f.private.checked = true; })()"
    )
    page.click("#form-fork button:not(.cancel)")
    fork = retry_until(
        lambda: [w for w in op.get_wave("demo").wavelets if w.name == "design"], what="the fork"
    )[0]
    assert fork.private and [m.name for m in fork.roster] == ["alice"]
    retry_until(lambda: selected(page) == fork.id, what="the page to open the fork")
    assert page.eval("document.querySelector(`.tree-row[data-name=design] .private`) !== null")
    assert not page.eval("document.getElementById('wavelet-private').hidden")

    page.click("#actions [data-form=invite]")
    page.type("bob")
    page.press("Enter")
    retry_until(lambda: "bob" in [m.name for m in op.get_wavelet(fork.id).roster], what="the invite")
    retry_until(
        lambda: page.eval("document.querySelector('#roster .chip[data-name=bob]') !== null"),
        what="bob's chip",
    )

    page.click("#roster .chip[data-name=bob] .chip-leave")
    page.click("#roster .chip[data-name=bob] .chip-leave")  # the second click confirms
    retry_until(lambda: "bob" not in [m.name for m in op.get_wavelet(fork.id).roster], what="the leave")
    retry_until(
        lambda: page.eval("document.querySelector('#roster .chip[data-name=bob]') === null"), what="no chip"
    )

    page.click("#actions [data-form=surface]")
    page.type("decided: ship the retry fix")
    page.click("#form-surface button:not(.cancel)")
    surfaced = retry_until(
        lambda: [b for b in op.read(wave.root_id).blips if b.kind == "surface"], what="the surface blip"
    )[0]
    assert surfaced.text == "decided: ship the retry fix" and surfaced.source_wavelet_id == fork.id
    assert surfaced.author == "operator"
    page.click(".tree-row[data-name=main]")
    retry_until(lambda: selected(page) == wave.root_id, what="main")
    retry_until(lambda: "decided: ship the retry fix" in texts(page), what="the surface in main")
    assert (
        page.eval("document.querySelector('#blips .kind-surface .src').textContent")
        == "surfaced from #design"
    )
    no_js_errors(page)


def test_a_click_on_a_wavelet_is_not_lost_when_a_blip_arrives_between_press_and_release(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    """A blip in another wavelet updates its unread count in place: the row being clicked stays the
    element it was (the tree was rebuilt for each such blip, and a click whose press and release
    fell on two different elements was lost: seen once in a full run)."""
    side = op.fork(wave.root_id, "side", with_=["alice"])
    open_console(page, d)
    box = page.eval(
        "(() => { const r = document.querySelector('.tree-row[data-name=side]').getBoundingClientRect();"
        " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
    )
    x, y = box
    page.call(
        "Input.dispatchMouseEvent",
        {"type": "mousePressed", "x": x, "y": y, "button": "left", "clickCount": 1},
    )
    op.post(side.id, "news in the side wavelet", as_="alice")
    retry_until(
        lambda: page.eval("document.querySelector('.tree-row[data-name=side] .unread')?.textContent") == "1",
        what="side's unread count",
    )
    page.call(
        "Input.dispatchMouseEvent",
        {"type": "mouseReleased", "x": x, "y": y, "button": "left", "clickCount": 1},
    )
    retry_until(lambda: selected(page) == side.id, what="the click to open side")
    retry_until(lambda: "news in the side wavelet" in texts(page), what="side's blip")
    no_js_errors(page)


def test_a_replaced_blip_shows_its_latest_text_and_keeps_its_history(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    old = op.post(wave.root_id, "the fix is in utils.py", as_="alice")
    open_console(page, d)
    new = op.replace(old.id, "the fix is in retry.py", as_="alice")
    retry_until(lambda: "the fix is in retry.py" in texts(page), what="the new version")
    assert "the fix is in utils.py" not in texts(page)
    page.click(f"#blips .blip[data-id='{new.id}'] .edited")
    versions = retry_until(
        lambda: page.eval(
            f"[...document.querySelectorAll(`.blip[data-id='{new.id}'] .history .text`)]"
            ".map(e => e.textContent)"
        ),
        what="the history",
    )
    assert versions == ["the fix is in utils.py", "the fix is in retry.py"]
    no_js_errors(page)


def test_presence_shows_each_agents_state_and_lists_who_waits_first(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    op.invite(wave.root_id, "carol")
    open_console(page, d)

    def states() -> dict[str, str]:
        rows = page.eval(
            "[...document.querySelectorAll('#presence li[data-name]')]"
            ".map(l => [l.dataset.name, l.dataset.state])"
        )
        return dict(rows)

    retry_until(
        lambda: states() == {"alice": "unknown", "bob": "unknown", "carol": "unknown"}, what="nobody reported"
    )

    def report(name: str, **agent: Any) -> None:
        op.report_presence("demo", PresenceReport(participant=name, event="ping", agent=AgentState(**agent)))

    report("alice", kind="turning", tool="Bash")
    report("bob", kind="idle")
    report("carol", kind="permission", tool="Bash", input="rm -rf build")
    retry_until(
        lambda: states() == {"alice": "turning", "bob": "idle", "carol": "permission"}, what="the new states"
    )
    order = page.eval("[...document.querySelectorAll('#presence li[data-name]')].map(l => l.dataset.name)")
    assert order == ["carol", "alice", "bob"], "who waits on the operator comes first"
    text = page.eval("document.querySelector('#presence li[data-name=carol] .state').textContent")
    assert text.startswith("waiting for permission: Bash (rm -rf build)")
    retry_until(
        lambda: page.eval(
            "document.querySelector('#roster .chip[data-name=alice] .dot').classList.contains('turning')"
        ),
        what="alice's roster dot",
    )
    op.post(wave.root_id, "done", as_="alice")
    assert states()["alice"] == "turning", "a post says nothing of what the session does"
    report("alice", kind="idle")
    retry_until(lambda: states()["alice"] == "idle", what="alice idle once her session says so")
    no_js_errors(page)


def test_a_10000_blip_wavelet_renders_its_tail_and_pages_history_on_scroll(
    page: Page, d: Daemon, wave: Any
) -> None:
    assert d.store is not None
    from fleet.store import OPERATOR_PRINCIPAL

    for i in range(10_000):
        d.store.post(OPERATOR_PRINCIPAL, wave.root_id, f"blip {i}", as_="alice")
    open_console(page, d)
    count = "document.querySelectorAll('#blips .blip').length"
    assert page.eval(count) == 200
    assert texts(page)[-1] == "blip 9999" and texts(page)[0] == "blip 9800"
    assert page.eval(
        "(() => { const t = document.getElementById('transcript');"
        " return t.scrollHeight - t.scrollTop - t.clientHeight < 5; })()"
    )
    page.eval("document.getElementById('transcript').scrollTop = 0")
    retry_until(lambda: page.eval(count) == 400, what="the next older page")
    assert texts(page)[0] == "blip 9600" and texts(page)[-1] == "blip 9999"
    # The reader stays where they were: the old first blip is still in view, not the top of the new page.
    assert page.eval("document.getElementById('transcript').scrollTop") > 0
    no_js_errors(page)


def test_console_screenshot(page: Page, d: Daemon, op: Client) -> None:
    """A realistic small wave, kept as ``artifacts/console.png`` (docs/console.png is a copy of one)."""
    w = op.create_wave("checkout-bug", ["alice", "bob", "carol"])
    op.post(
        w.root_id,
        "Checkout fails for carts over 50 items since this morning's deploy. "
        "@alice reproduce it, @bob find the commit.",
    )
    op.post(
        w.root_id, "On it. Reproduced locally: a 51-item cart gets HTTP 500 from /api/checkout.", as_="alice"
    )
    repro = op.fork(w.root_id, "repro", ["alice"], private=True, as_="alice")
    op.post(
        repro.id, "Stack trace points at pagination in cart_summary(): off-by-one at page 2.", as_="alice"
    )
    op.surface(repro.id, "Root cause: cart_summary() drops the last page when len(items) > 50.", as_="alice")
    op.post(w.root_id, 'Bisected: 4f2a91c ("paginate cart summaries") introduced it.', as_="bob")
    fix = op.fork(w.root_id, "fix", ["bob", "carol"], as_="bob")
    op.post(fix.id, "@carol patch is up: range(pages + 1). Can you review?", as_="bob")
    op.invite(fix.id, "dave")
    op.post(w.root_id, "Thanks both. Ship the fix behind the usual canary.")
    op.post(w.root_id, "Will do once carol approves.", as_="bob")
    for name, kind in (("alice", "idle"), ("bob", "idle"), ("carol", "turning")):
        op.report_presence(
            "checkout-bug",
            PresenceReport(participant=name, event="ping", agent=AgentState(kind=kind)),  # type: ignore[arg-type]
        )
    open_console(page, d, "#/checkout-bug/main")
    retry_until(
        lambda: (
            page.eval("document.querySelector('#presence li[data-name=carol]')?.dataset.state") == "turning"
        ),
        what="presence",
    )
    retry_until(lambda: len(texts(page)) >= 7, what="the transcript")
    page.click("#compose")
    page.type("@carol ping me when it is merged, and tell @d")
    retry_until(lambda: page.eval("!document.getElementById('mentions').hidden"), what="the mention menu")
    shot = page.screenshot(ARTIFACTS / "console.png")
    assert shot.stat().st_size > 20_000
    no_js_errors(page)


# ---------------------------------------------------------------- usage


def test_the_console_shows_each_participants_usage_from_its_transcript(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    from test_usage import LINES, SID, write

    from fleet.models import NewSession

    folder = Path(os.environ["HOME"]) / ".claude" / "projects" / "-tmp-project"
    folder.mkdir(parents=True)
    write(folder / f"{SID}.jsonl", LINES)
    op.record_session("demo", NewSession(participant="alice", session_id=SID, wavelet_id=wave.root_id))
    cookie = login(d)
    got = request(d, "GET", "/api/console/waves/demo/usage", cookie=cookie)
    assert got.status == 200
    (alice,) = got.json()["participants"]
    assert alice["participant"] == "alice" and alice["total"]["input_tokens"] == 289
    assert alice["total"]["tokens"] == 289 + 32 + 10 + 45 and alice["wavelets"]["w/main"]["turns"] == 1
    assert request(d, "GET", "/api/console/waves/demo/usage").status == 401  # nothing without the cookie
    assert request(d, "GET", "/api/console/waves/nope/usage", cookie=cookie).status == 404
    open_console(page, d)
    retry_until(
        lambda: (
            page.eval("(document.querySelector('#presence li[data-name=alice] .usage') || {}).textContent")
            == "376 tok · $0.0015"
        ),
        what="alice's usage beside her presence",
    )
    from fleet.records.budgets import BudgetReport, SetBudget

    b = op.set_budget("demo", SetBudget(participant="alice", tokens=100))
    assert b is not None
    op.budget_reached(
        "demo", BudgetReport(participant="alice", wavelet_id="", scope="alice", set_at=b.set_at, spent="376")
    )
    (st,) = request(d, "GET", "/api/console/waves/demo/usage", cookie=cookie).json()["budgets"]
    assert st["spent"] == [
        {
            "participant": "alice",
            "tokens": 376,
            "cost_usd": pytest.approx(0.0015, abs=1e-4),
            "unpriced": [],
            "passed": True,
            "reached": True,
        }
    ]
    page.goto("about:blank")
    open_console(page, d)
    retry_until(
        lambda: (
            page.eval("(document.querySelector('#presence li[data-name=alice] .budget') || {}).textContent")
            == "held: budget spent"
        ),
        what="alice held by her budget, beside her usage",
    )
    no_js_errors(page)


def _live(page: Page) -> bool:
    state = page.eval("!!document.body?.dataset.loaded && document.getElementById('conn')?.dataset.state")
    return bool(state == "live")


def _status(page: Page) -> int:
    return int(page.eval("performance.getEntriesByType('navigation')[0].responseStatus"))


def body_text(page: Page) -> str:
    """The page's text; '' while a navigation has no body yet (the logout's redirect)."""
    try:
        return str(page.eval("document.body ? document.body.innerText : ''"))
    except CDPError:
        return ""


def test_link_login_then_token_login_in_a_second_browser_then_logout(
    browser: Browser, page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    """Issue 15: after the one-time link is used, a second browser logs in with the token form (it
    failed: `Referrer-Policy: no-referrer` made Chromium post `Origin: null`, refused 403)."""
    # the first browser: the link the daemon printed at start
    page.goto(d.console_link)
    retry_until(lambda: _live(page), what="the first browser's console to go live")
    # the second browser (its own context, no cookie): the link is spent, the token form is not
    second = browser.new_page()
    try:
        second.goto(d.console_link)
        assert "already used" in second.eval("document.body.innerText")
        second.goto(ui(d).url + "/")
        assert _status(second) == 401
        second.click("input[name=token]")
        second.type(d.operator_token)
        second.press("Enter")
        retry_until(lambda: _live(second), what="the token-form login to open the console")
        op.post(wave.root_id, "seen in both browsers")
        for p in (page, second):
            retry_until(lambda p=p: "seen in both browsers" in texts(p), what="the blip in each browser")  # type: ignore[misc]
        # log out of the second: its session ends, the first's does not
        second.click("form.logout button")
        retry_until(lambda: "log in" in body_text(second).lower(), what="the login page")
        second.goto(ui(d).url + "/api/v1/waves")
        assert _status(second) == 401
        op.post(wave.root_id, "only the first sees this")
        retry_until(lambda: "only the first sees this" in texts(page), what="the first browser still live")
        # a wrong token in the form is refused, and says so
        second.goto(ui(d).url + "/")
        second.click("input[name=token]")
        second.type("not-the-token")
        second.press("Enter")
        retry_until(lambda: _status(second) in (401, 403), what="the refusal page")
        assert second.eval("document.scripts.length") == 0
        no_js_errors(page)
        no_js_errors(second)
    finally:
        second.close()
