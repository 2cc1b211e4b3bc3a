"""Raw-HTTP helpers for the daemon tests: stdlib ``http.client`` only, so the tests exercise the wire
contract of ``docs/http-api.md`` directly and do not depend on ``fleet.client``.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from fleet.store import connect, dump_tables
from fleet.store.schema import Conn

JSON = Any


class _Unset:
    """The default of ``token=``: use the connection's own token."""


UNSET = _Unset()


@dataclass
class Resp:
    status: int
    body: JSON
    raw: bytes
    headers: dict[str, str]

    @property
    def error(self) -> dict[str, str]:
        """The ``{"kind", "message"}`` of an error answer (asserts it is one)."""
        assert isinstance(self.body, dict) and "error" in self.body, f"not an error body: {self.raw[:300]!r}"
        err: dict[str, str] = self.body["error"]
        assert set(err) == {"kind", "message"} and err["message"], err
        return err

    def ok(self, status: int | None = None) -> JSON:
        """The body, asserting a 2xx (or exactly ``status``)."""
        want = f"{status}" if status else "2xx"
        assert (self.status == status) if status else (200 <= self.status < 300), (
            f"expected {want}, got {self.status}: {self.raw[:500]!r}"
        )
        return self.body


def host_port(url: str) -> tuple[str, int]:
    split = urlsplit(url)
    assert split.hostname and split.port, url
    return split.hostname, split.port


class Http:
    """One keep-alive connection to a daemon, authenticated as ``token`` (None: no header)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        self.url = url
        self.token = token
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            host, port = host_port(self.url)
            self._conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
            self._conn.connect()
            assert self._conn.sock is not None
            self._conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(
        self,
        method: str,
        path: str,
        body: JSON = None,
        *,
        raw: bytes | None = None,
        token: str | _Unset | None = UNSET,
        headers: dict[str, str] | None = None,
    ) -> Resp:
        """Send one request. ``body`` is JSON-encoded unless ``raw`` bytes are given."""
        tok = self.token if isinstance(token, _Unset) else token
        hdrs = {"Content-Type": "application/json"}
        if tok is not None:
            hdrs["Authorization"] = f"Bearer {tok}"
        hdrs.update(headers or {})
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn = self._connection()
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            payload = resp.read()
        except (ConnectionError, http.client.HTTPException, OSError):
            self.close()
            raise
        if resp.will_close:
            self.close()
        try:
            parsed = json.loads(payload) if payload else None
        except ValueError:
            parsed = None
        return Resp(resp.status, parsed, payload, {k.lower(): v for k, v in resp.getheaders()})

    def get(self, path: str, **kw: Any) -> Resp:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: JSON = None, **kw: Any) -> Resp:
        return self.request("POST", path, {} if body is None and "raw" not in kw else body, **kw)

    # -- the API in one line each (answers unchecked; call ``.ok()``)

    def new_wave(self, name: str, with_: list[str] | None = None) -> Resp:
        return self.post("/v1/waves", {"name": name, "with": with_ or []})

    def fork(self, parent: str, name: str, with_: list[str] | None = None, private: bool = False) -> Resp:
        return self.post(
            f"/v1/wavelets/{q(parent)}/fork", {"name": name, "with": with_ or [], "private": private}
        )

    def post_blip(self, wavelet: str, text: str, as_: str | None = None) -> Resp:
        body: dict[str, Any] = {"text": text}
        if as_ is not None:
            body["as"] = as_
        return self.post(f"/v1/wavelets/{q(wavelet)}/blips", body)

    def read(self, wavelet: str, query: str = "") -> Resp:
        return self.get(f"/v1/wavelets/{q(wavelet)}/blips" + (f"?{query}" if query else ""))

    def context(self, wavelet: str) -> Resp:
        return self.get(f"/v1/wavelets/{q(wavelet)}/context")

    def wavelet(self, wavelet: str) -> Resp:
        return self.get(f"/v1/wavelets/{q(wavelet)}")

    def invite(self, wavelet: str, name: str) -> Resp:
        return self.post(f"/v1/wavelets/{q(wavelet)}/invite", {"name": name})

    def leave(self, wavelet: str, name: str) -> Resp:
        return self.post(f"/v1/wavelets/{q(wavelet)}/leave", {"name": name})

    def surface(self, wavelet: str, text: str, source_blip_id: str | None = None) -> Resp:
        body: dict[str, Any] = {"text": text}
        if source_blip_id is not None:
            body["source_blip_id"] = source_blip_id
        return self.post(f"/v1/wavelets/{q(wavelet)}/surface", body)

    def replace(self, blip: str, text: str) -> Resp:
        return self.post(f"/v1/blips/{q(blip)}/replace", {"text": text})

    def history(self, blip: str) -> Resp:
        return self.get(f"/v1/blips/{q(blip)}/history")

    def mint(self, wave: str, participant: str) -> Resp:
        return self.post("/v1/tokens", {"wave": wave, "participant": participant})


def q(segment: str) -> str:
    """Quote one path segment (``WAVE/WAVELET`` refs keep working: the daemon unquotes ``%2F``)."""
    return quote(segment, safe="")


def raw_exchange(url: str, data: bytes, timeout: float = 10.0, shut_write: bool = False) -> bytes:
    """Send ``data`` on a fresh socket and read until the server closes it (or ``timeout``)."""
    with socket.create_connection(host_port(url), timeout=timeout) as s:
        try:
            s.sendall(data)
            if shut_write:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered and closed before taking it all: read what it said
        chunks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def split_responses(data: bytes, bodiless_first: bool = False) -> list[tuple[int, dict[str, str], bytes]]:
    """Parse back-to-back HTTP/1.1 responses (each with Content-Length) into (status, headers, body).

    ``bodiless_first``: the first answers a HEAD, so it has headers only, whatever Content-Length says.
    """
    out: list[tuple[int, dict[str, str], bytes]] = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, f"truncated response head: {data[:200]!r}"
        assert head.startswith(b"HTTP/1.1 "), f"not a response: {data[:200]!r}"
        status = int(head.split(b" ", 2)[1])
        headers = _headers(head)
        n = int(headers.get("content-length", "0"))
        if status < 200 or (bodiless_first and not any(s >= 200 for s, _, _ in out)):
            n = 0  # 1xx answers have no body, and neither has the answer to a HEAD
        assert len(rest) >= n, f"truncated body: {rest[:200]!r}"
        out.append((status, headers, rest[:n]))
        data = rest[n:]
    return out


def _headers(head: bytes) -> dict[str, str]:
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return headers


def snapshot(db: Path) -> tuple[dict[str, list[tuple[Any, ...]]], int]:
    """Every materialised row plus the number of events: equal snapshots mean an unchanged store.
    (Under ``FLEET_TEST_ENGINE=postgresql`` the test's store is the database FLEET_STORE names.)"""
    url = os.environ.get("FLEET_STORE")
    conn: Conn = connect(url) if url else sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        if not url:
            conn.row_factory = sqlite3.Row  # type: ignore[attr-defined]
        count = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        return dump_tables(conn), int(count)
    finally:
        conn.close()
