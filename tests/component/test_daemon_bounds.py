"""Bounds on what a client can set, and text that is not UTF-8 (docs/http-api.md, "Bounds"): a
clear 4xx naming the field and its limit, or the bad byte; the store and presence unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from httphelp import Http, Resp, q, snapshot

from fleet.client import Client
from fleet.daemon import MAX_TOKEN, Daemon
from fleet.models import MAX_HOST, MAX_NAME, MAX_NOTE, MAX_PATH, MAX_REF, MAX_SESSION_ID

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def http(daemon: Daemon, operator: Client) -> Iterator[Http]:
    operator.create_wave("w", ["alice"])
    h = Http(daemon.url, daemon.operator_token)
    try:
        yield h
    finally:
        h.close()


def refused(r: Resp, status: int, *words: str) -> str:
    assert r.status == status, r
    message = r.error["message"]
    for w in words:
        assert w in message, message
    assert len(message) < 400, "the error echoes the oversized value"
    return message


def test_a_300_kb_presence_session_id_is_refused_and_not_broadcast(daemon: Daemon, http: Http) -> None:
    before = snapshot(daemon.paths.db)
    ping = {"participant": "alice", "event": "ping"}
    r = http.post("/v1/waves/w/presence", {**ping, "session_id": "s" * 300_000})
    refused(r, 400, "session_id", str(MAX_SESSION_ID))
    r = http.post("/v1/waves/w/presence", {**ping, "host": "h" * 1000})
    refused(r, 400, "host", str(MAX_HOST))
    r = http.post("/v1/waves/w/presence", {**ping, "agent": {"kind": "permission", "input": "x" * 300_000}})
    refused(r, 400, "agent.input", str(MAX_NOTE))
    rows = http.get("/v1/waves/w/presence").ok()["presence"]
    assert [(p["participant"], p["state"], p["session_id"], p["host"]) for p in rows] == [
        ("alice", "gone", None, None)
    ]
    assert snapshot(daemon.paths.db) == before
    # at the limit it is taken
    http.post(
        "/v1/waves/w/presence", {"participant": "alice", "event": "ping", "session_id": "s" * MAX_SESSION_ID}
    ).ok()


def test_session_record_paths_names_refs_and_tokens_are_bounded(daemon: Daemon, http: Http) -> None:
    main = http.get("/v1/resolve?ref=w/main").ok()["id"]
    before = snapshot(daemon.paths.db)
    session = {"participant": "alice", "session_id": "0" * 36, "wavelet_id": main}
    r = http.post("/v1/waves/w/sessions", {**session, "cwd": "/" + "d" * MAX_PATH})
    refused(r, 400, "cwd", str(MAX_PATH))
    r = http.post("/v1/waves/w/sessions", {**session, "layout": "l" * (MAX_PATH + 1)})
    refused(r, 400, "layout", str(MAX_PATH))
    r = http.post("/v1/waves", {"name": "n" * 100_000})
    refused(r, 400, "name", str(MAX_NAME))
    r = http.post("/v1/waves", {"name": "x", "with": ["a"] * 1001})
    refused(r, 400, "with", "1000")
    r = http.post(f"/v1/wavelets/{q('w' * 5000)}/blips", {"text": "hi"})
    refused(r, 400, "wavelet", str(MAX_REF))
    r = http.get(f"/v1/resolve?ref={'r' * 5000}")
    refused(r, 400, "ref", str(MAX_REF))
    r = http.get("/v1/whoami", token="t" * 20_000)
    refused(r, 401, str(MAX_TOKEN))
    assert snapshot(daemon.paths.db) == before


def test_a_request_body_that_is_not_utf8_names_the_byte(daemon: Daemon, http: Http) -> None:
    main = http.get("/v1/resolve?ref=w/main").ok()["id"]
    before = snapshot(daemon.paths.db)
    r = http.post(f"/v1/wavelets/{main}/blips", raw=b'{"text": "caf\xe9 au lait"}')
    refused(r, 400, "not UTF-8", "0xe9", "offset 13")
    # what a client's surrogateescape sends for the same byte: a lone surrogate escape
    r = http.post(f"/v1/wavelets/{main}/blips", raw=b'{"text": "caf\\udce9"}')
    refused(r, 400, "text", "not valid UTF-8", "0xe9")
    assert snapshot(daemon.paths.db) == before


def cli(*args: bytes, env: dict[str, str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, input=stdin, capture_output=True, timeout=60
    )


def test_the_cli_refuses_arguments_and_stdin_that_are_not_utf8(daemon: Daemon, http: Http) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), FLEET_DAEMON=daemon.url, FLEET_TOKEN=daemon.operator_token)
    env.pop("FLEET_DEBUG", None)
    before = snapshot(daemon.paths.db)
    r = cli(b"post", b"w/main", b"caf\xe9", env=env)
    err = r.stderr.decode()
    assert r.returncode == 2, err
    assert "not valid UTF-8" in err and "0xe9" in err and "argument 3" in err
    assert "Traceback" not in err and "Pydantic" not in err
    r = cli(b"post", b"w/main", b"-", env=env, stdin=b"ol\xe1 \xff\n")
    err = r.stderr.decode()
    assert r.returncode == 2, err
    assert "stdin is not valid UTF-8" in err and "0xe1" in err and "offset 2" in err
    assert "Traceback" not in err
    r = cli(b"wave", b"new", b"w\xff", env=env)
    assert r.returncode == 2 and b"0xff" in r.stderr
    assert snapshot(daemon.paths.db) == before
    # UTF-8 goes through
    r = cli(b"post", b"w/main", "café".encode(), env=env)
    assert r.returncode == 0, r.stderr
