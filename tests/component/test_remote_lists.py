"""Join strings and joined daemons that list several daemons (``fleet remote mint --also``): the
list reaches the other machine whole, ``remote list`` shows each, and a client of the joined name
lists them all (the failover itself: test_client_failover.py). "The other machine" is a second
FLEET_HOME; the daemon is on loopback but declared remote (``tls=True``), so every daemon in the
list is pinned."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=90
    )


@pytest.fixture
def hq(fleet_env: Paths) -> Iterator[Daemon]:
    d = Daemon(fleet_env, "127.0.0.1:0", tls=True)
    d.start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def laptop(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "laptop"
    (home / "home").mkdir(parents=True)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("FLEET_")},
        "FLEET_HOME": str(home / "fleet"),
        "HOME": str(home / "home"),
    }


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_join_string_with_also_lists_every_daemon_and_a_client_of_the_joined_name_has_them_all(
    hq: Daemon, laptop: dict[str, str]
) -> None:
    op = Client(f"{hq.url}#sha256={hq.fingerprint}", hq.operator_token)
    op.create_wave("w", ["dana"])
    other = f"https://127.0.0.1:{dead_port()}#sha256={'cd' * 32}"  # a second daemon, down for now
    minted = run({**os.environ}, "remote", "mint", "laptop", "--wave", "w", "--also", other)
    assert minted.returncode == 0, minted.stderr
    joined = run(laptop, "remote", "join", minted.stdout.strip(), "--name", "hq")
    assert joined.returncode == 0, joined.stderr
    assert f"joined {hq.url}, https://127.0.0.1:" in joined.stdout
    from fleet.client import parse_daemons

    stored = json.loads((Path(laptop["FLEET_HOME"]) / "data" / "remotes" / "hq.json").read_text())
    assert [d.pinned for d in parse_daemons(stored["url"])] == [f"{hq.url}#sha256={hq.fingerprint}", other]
    listed = run(laptop, "remote", "list")
    assert f"hq\t{hq.url}, {other.split('#')[0]}\t" in listed.stdout, listed.stdout

    # the joined name's client lists both: daemon status shows each; a post lands (on hq)
    there = {**laptop, "FLEET_DAEMON": "hq"}
    status = run(there, "daemon", "status")
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0] == "1 of 2 listed daemons answer:"
    posted = run(there, "post", "w/main", "hello from the laptop")
    assert posted.returncode == 0, posted.stderr
    assert [b.text for b in op.read(op.resolve("w/main").id).blips][-1] == "hello from the laptop"


@pytest.mark.parametrize(
    ("also", "words"),
    [
        ("http://127.0.0.1:9", "pins a certificate"),  # http beside an https daemon: named, refused
        ("https://127.0.0.1:9", "names no certificate fingerprint"),
        ("ftp://x:1", "is not an http"),
    ],
)
def test_a_bad_also_is_a_usage_error_and_prints_no_join_string(
    hq: Daemon, fleet_env: Paths, also: str, words: str
) -> None:
    Client(f"{hq.url}#sha256={hq.fingerprint}", hq.operator_token).create_wave("w", ["dana"])
    if also.startswith("http://"):
        also += f"#sha256={'ab' * 32}"
    got = run({**os.environ}, "remote", "mint", "laptop", "--wave", "w", "--also", also)
    assert got.returncode == 2, got.stdout + got.stderr
    assert words in got.stderr and "Traceback" not in got.stderr and got.stdout == ""
    assert [
        t for t in Client(f"{hq.url}#sha256={hq.fingerprint}", hq.operator_token).list_tokens() if t.machine
    ] == []
