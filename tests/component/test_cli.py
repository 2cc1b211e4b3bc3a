"""The CLI as a user runs it: ``python -m fleet ...`` in a subprocess against a real daemon.

Covers the ``--json`` shapes (exactly the wire models), human output, exit codes (2 usage, 3 daemon
unreachable, 4 not found, 5 forbidden), stdin input, ``read --follow``, token files, ``fleet paths``
and the embedded default: a command with no daemon configured starts one in the background.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import retry_until

from fleet import wire
from fleet.client import Client, local_status, stop_local_daemon
from fleet.daemon import Daemon
from fleet.models import Blip, BlipPage, MintedToken, TokenInfo, Wave, Wavelet, Whoami
from fleet.paths import Paths

REPO = Path(__file__).resolve().parents[2]


def base_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), **extra)
    for var in ("FLEET_DEBUG", "FLEET_TOKEN_FILE"):
        env.pop(var, None)
    return env


def fleet(
    *args: str, env: dict[str, str], stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args],
        env=env,
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(*args: str, env: dict[str, str], stdin: str | None = None) -> str:
    r = fleet(*args, env=env, stdin=stdin)
    assert r.returncode == 0, f"fleet {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def fails(code: int, *args: str, env: dict[str, str]) -> str:
    """Run a command that must fail with ``code``; returns its stderr (asserted traceback-free)."""
    r = fleet(*args, env=env)
    assert r.returncode == code, f"fleet {' '.join(args)} -> {r.returncode}, wanted {code}\n{r.stderr}"
    assert "Traceback" not in r.stderr and r.stdout == ""
    return r.stderr


def exactly(model: type[Any], data: Any) -> Any:
    """``data`` is exactly ``model``'s wire shape: every field, nothing else."""
    assert data == wire.dump(wire.load(model, data))
    return data


@pytest.fixture
def env(daemon: Daemon) -> dict[str, str]:
    """The environment of a user pointed at the test daemon with the operator token."""
    return base_env(FLEET_DAEMON=daemon.url, FLEET_TOKEN=daemon.operator_token)


@pytest.fixture
def demo(env: dict[str, str]) -> dict[str, str]:
    """A wave `demo` with alice and bob on main, and a private fork `secret` with bob only."""
    ok("wave", "new", "demo", "--with", "alice,bob", env=env)
    ok("fork", "demo/main", "--name", "secret", "--with", "bob", "--private", env=env)
    return env


def token_env(env: dict[str, str], name: str) -> dict[str, str]:
    token = ok("token", "mint", "demo", name, env=env).strip()
    return dict(env, FLEET_TOKEN=token)


# ---------------------------------------------------------------- --json shapes


def test_json_output_is_exactly_the_wire_models(demo: dict[str, str]) -> None:
    env = demo
    wave = exactly(Wave, json.loads(ok("wave", "new", "other", "--json", env=env)))
    assert wave["name"] == "other"
    waves = json.loads(ok("wave", "list", "--json", env=env))
    assert [exactly(Wave, w)["name"] for w in waves] == ["demo", "other"]
    tree = exactly(Wave, json.loads(ok("tree", "demo", "--json", env=env)))
    assert {w["name"]: w["private"] for w in tree["wavelets"]} == {"main": False, "secret": True}
    assert len(json.loads(ok("tree", "--json", env=env))) == 2

    fork = exactly(
        Wavelet, json.loads(ok("fork", "demo/main", "--name", "d", "--with", "a,b", "--json", env=env))
    )
    assert [m["name"] for m in fork["roster"]] == ["a", "b"] and len(fork["id"]) == 36
    blip = exactly(Blip, json.loads(ok("post", "demo/main", "hi", "--json", env=env)))
    assert blip["author"] == "operator" and blip["text"] == "hi"
    page = exactly(BlipPage, json.loads(ok("read", "demo/main", "--json", env=env)))
    assert page["blips"][-1]["id"] == blip["id"] == page["cursor"]
    exactly(Wavelet, json.loads(ok("invite", "demo/d", "carol", "--json", env=env)))
    exactly(Wavelet, json.loads(ok("leave", "demo/d", "carol", "--json", env=env)))
    edited = exactly(Blip, json.loads(ok("replace", blip["id"], "hello", "--json", env=env)))
    assert edited["replaces"] == blip["id"]
    surfaced = exactly(Blip, json.loads(ok("surface", "demo/d", "done", "--json", env=env)))
    assert surfaced["kind"] == "surface" and surfaced["source_wavelet_id"] == fork["id"]

    minted = exactly(MintedToken, json.loads(ok("token", "mint", "demo", "alice", "--json", env=env)))
    tokens = json.loads(ok("token", "list", "--json", env=env))
    assert [exactly(TokenInfo, t)["id"] for t in tokens] == [minted["id"]]
    revoked = json.loads(ok("token", "revoke", minted["id"], "--json", env=env))
    assert [exactly(TokenInfo, t)["id"] for t in revoked] == [minted["id"]]
    assert exactly(Whoami, json.loads(ok("whoami", "--json", env=env)))["principal"] == "operator"


# ---------------------------------------------------------------- human output and addressing


def test_human_output_and_wavelet_addressing(demo: dict[str, str]) -> None:
    env = demo
    main_id = json.loads(ok("tree", "demo", "--json", env=env))["root_id"]
    out = ok("post", "demo/main", "by path", env=env)
    assert re.fullmatch(r"posted [0-9a-f]{8}-[0-9a-f]{4}\S* in demo/main\n", out)
    ok("post", "main", "by name in FLEET_WAVE", env=dict(env, FLEET_WAVE="demo"))
    ok("post", "main", "by name with --wave", "--wave", "demo", "--as", "alice", env=env)
    ok("post", main_id[:13], "by id prefix", env=env)

    lines = ok("read", "demo/main", env=env).splitlines()
    assert re.fullmatch(r"\[\d\d:\d\d:\d\d\] \* .*alice, bob.*", lines[0])  # the wave's system blip
    assert [re.sub(r"^\[\d\d:\d\d:\d\d\] ", "", line) for line in lines[-4:]] == [
        "operator: by path",
        "operator: by name in FLEET_WAVE",
        "alice: by name with --wave",
        "operator: by id prefix",
    ]
    tree = ok("tree", "demo", env=env)
    assert "main  [alice, bob]" in tree and "secret  [bob]  (private)" in tree


def test_replace_by_short_id_and_read_history(env: dict[str, str]) -> None:
    ok("wave", "new", "demo", env=env)
    short = ok("post", "demo/main", "first draft", env=env).split()[1]
    assert ok("replace", short, "final text", env=env).startswith(f"replaced {short} with ")
    plain = ok("read", "demo/main", env=env)
    assert "operator (edited): final text" in plain and "first draft" not in plain
    history = ok("read", "demo/main", "--history", env=env)
    assert "operator (superseded): first draft" in history


def test_post_reads_stdin_for_dash(env: dict[str, str]) -> None:
    ok("wave", "new", "demo", env=env)
    ok("post", "demo/main", "-", env=env, stdin="line one\nline two\n")
    page = json.loads(ok("read", "demo/main", "--json", env=env))
    assert page["blips"][-1]["text"] == "line one\nline two"


def test_read_after_returns_only_later_blips(env: dict[str, str]) -> None:
    ok("wave", "new", "demo", env=env)
    first = json.loads(ok("post", "demo/main", "one", "--json", env=env))
    ok("post", "demo/main", "two", env=env)
    for after in (first["id"], first["id"][:13]):  # a full id, or the short id the human output shows
        page = json.loads(ok("read", "demo/main", "--after", after, "--json", env=env))
        assert [b["text"] for b in page["blips"]] == ["two"]


def test_invite_leave_and_surface(demo: dict[str, str]) -> None:
    env = demo
    assert "[bob, carol]" in ok("invite", "demo/secret", "carol", env=env)
    assert "[bob]" in ok("leave", "demo/secret", "carol", env=env)
    ok("surface", "demo/secret", "the conclusion", "--as", "bob", env=env)
    assert "bob (surfaced): the conclusion" in ok("read", "demo/main", env=env)


# ---------------------------------------------------------------- exit codes


def test_unknown_wavelet_exits_4_naming_it(demo: dict[str, str]) -> None:
    err = fails(4, "read", "demo/nope", env=demo)
    assert err.startswith("fleet: error: ") and "demo/nope" in err
    assert "nowave" in fails(4, "post", "nowave/main", "hi", env=demo)


def test_participant_cannot_see_a_private_wavelet_it_is_not_on(demo: dict[str, str]) -> None:
    alice = token_env(demo, "alice")
    assert "secret" in fails(4, "read", "demo/secret", env=alice)
    bob = token_env(demo, "bob")
    ok("read", "demo/secret", env=bob)


def test_participant_writing_as_another_exits_5(demo: dict[str, str]) -> None:
    alice = token_env(demo, "alice")
    fails(5, "post", "demo/main", "impostor", "--as", "bob", env=alice)
    out = json.loads(ok("post", "demo/main", "me", "--json", env=alice))
    assert out["author"] == "alice"


def test_usage_errors_exit_2(env: dict[str, str]) -> None:
    ok("wave", "new", "demo", env=env)
    r = fleet("post", "demo/main", env=env)
    assert r.returncode == 2 and "Missing argument" in r.stderr and "Traceback" not in r.stderr
    assert fleet("no-such-command", env=env).returncode == 2
    assert "empty" in fails(2, "post", "demo/main", "   ", env=env)
    assert "--participant" in fails(2, "token", "revoke", env=env)


def test_dead_daemon_exits_3_quickly_with_what_to_do() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    started = time.monotonic()
    err = fails(3, "wave", "list", env=base_env(FLEET_DAEMON=url, FLEET_TOKEN="x"))
    assert time.monotonic() - started < 10
    assert url in err and "fleet daemon start" in err and "FLEET_DAEMON" in err


def test_revoked_token_is_refused(demo: dict[str, str]) -> None:
    alice = token_env(demo, "alice")
    ok("token", "revoke", "--wave", "demo", "--participant", "alice", env=demo)
    assert "revoked" in fails(5, "whoami", env=alice)


# ---------------------------------------------------------------- read --follow


def test_read_follow_prints_blips_posted_after_it_started(env: dict[str, str], operator: Client) -> None:
    ok("wave", "new", "demo", "--with", "alice", env=env)
    ok("post", "demo/main", "backlog", env=env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet", "read", "demo/main", "--follow"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout

    def pump() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()

    def next_line(deadline: float = 15) -> str:
        return lines.get(timeout=deadline)

    try:
        assert "created wave demo" in next_line(30)  # the follower is up and prints the backlog
        assert next_line().rstrip().endswith("operator: backlog")
        operator.post(operator.resolve("demo/main").id, "live one", as_="alice")
        assert next_line().rstrip().endswith("alice: live one")
        proc.send_signal(signal.SIGINT)  # Ctrl-C ends --follow: exit 0, nothing on stderr
        assert proc.wait(10) == 0
        assert proc.stderr is not None and proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


# ---------------------------------------------------------------- tokens, paths


def test_token_mint_file_is_private_and_works(demo: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "tokens" / "alice.token"
    assert ok("token", "mint", "demo", "alice", "--file", str(path), env=demo) == f"{path}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    as_alice = dict(demo, FLEET_TOKEN_FILE=str(path))
    del as_alice["FLEET_TOKEN"]
    assert ok("whoami", env=as_alice).startswith("alice in wave demo")


def test_paths_honours_fleet_home(tmp_path: Path) -> None:
    home = tmp_path / "elsewhere"
    env = base_env(FLEET_HOME=str(home))
    paths = json.loads(ok("paths", "--json", env=env))
    assert paths["data"] == str(home / "data") and paths["logs"] == str(home / "logs")
    assert paths["endpoint"] == str(home / "state" / "daemon.json")
    assert f"data            {home / 'data'}" in ok("paths", env=env)
    assert not (home / "state" / "daemon.json").exists()  # `fleet paths` never starts a daemon


# ---------------------------------------------------------------- the daemon commands


@pytest.fixture
def local(fleet_env: Paths) -> Iterator[dict[str, str]]:
    """No daemon configured (no FLEET_DAEMON): whatever the test starts is stopped afterwards."""
    yield base_env()
    stop_local_daemon(fleet_env, timeout=10)


def test_a_command_with_no_daemon_starts_one_and_daemon_stop_stops_it(
    fleet_env: Paths, local: dict[str, str]
) -> None:
    r = fleet("wave", "new", "demo", env=local)
    assert r.returncode == 0, r.stderr
    status = local_status(fleet_env)
    assert status.running and status.pid != os.getpid()
    assert r.stderr == f"fleet: started the local daemon at {status.url} (log: {fleet_env.daemon_log})\n"

    again = fleet("wave", "list", env=local)
    assert again.returncode == 0 and again.stderr == "" and again.stdout.startswith("demo ")
    assert ok("daemon", "status", env=local).startswith(f"running (local) at {status.url}")

    assert ok("daemon", "stop", env=local) == f"stopped the local daemon at {status.url} (pid {status.pid})\n"
    assert not fleet_env.endpoint.exists()
    r = fleet("daemon", "status", "--json", env=local)
    assert r.returncode == 3 and json.loads(r.stdout)["running"] is False
    assert ok("daemon", "stop", env=local) == "no local daemon is running\n"


def test_daemon_start_is_idempotent(fleet_env: Paths, local: dict[str, str]) -> None:
    assert ok("daemon", "start", env=local).startswith("started the local daemon at ")
    url = local_status(fleet_env).url
    assert ok("daemon", "start", env=local).startswith(f"the local daemon already runs at {url}")


def test_daemon_run_serves_until_sigterm_and_refuses_a_second(
    fleet_env: Paths, local: dict[str, str]
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet", "daemon", "run"],
        env=local,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        status = retry_until(lambda: (s := local_status(fleet_env)).running and s, what="daemon run up")
        assert status and status.url and status.pid == proc.pid and status.url.startswith("http://127.0.0.1:")
        err = fails(1, "daemon", "run", env=local)
        assert status.url in err and "already runs" in err
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert not fleet_env.endpoint.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
