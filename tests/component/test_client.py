"""fleet.client against a real daemon over real HTTP: the API round trip, errors, long-poll timing,
keep-alive reconnection, retries, and the discovery rule (endpoint file, FLEET_DAEMON, autostart)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import retry_until

from fleet import errors, wire
from fleet.client import Client, connect, live_endpoint, local_status, stop_local_daemon
from fleet.daemon import Daemon
from fleet.models import Blip, BlipPage, Context, Endpoint, Feed, PresenceReport, Wave, Wavelet
from fleet.paths import Paths, write_private

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def stop_autostarted(fleet_env: Paths) -> Iterator[None]:
    """Whatever a test autostarts in this FLEET_HOME is stopped afterwards, pass or fail."""
    yield
    stop_local_daemon(fleet_env, timeout=10)


# ---------------------------------------------------------------- the API


def test_round_trip_of_every_call(operator: Client) -> None:
    assert operator.health().ok
    assert operator.whoami().principal == "operator"
    wave = operator.create_wave("demo", ["alice", "bob"])
    assert isinstance(wave, Wave) and wave.name == "demo"
    assert [w.name for w in operator.list_waves()] == ["demo"]
    root = operator.resolve("demo/main")
    assert root.id == wave.root_id and [m.name for m in root.roster] == ["alice", "bob"]
    assert operator.resolve("main", wave="demo").id == root.id
    assert operator.resolve(root.id[:20]).id == root.id

    first = operator.post(root.id, "hello", as_="alice")
    assert isinstance(first, Blip) and first.author == "alice" and first.text == "hello"
    child = operator.fork(root.id, "design", ["alice"], private=True)
    assert isinstance(child, Wavelet) and child.private and child.parent_id == root.id
    assert operator.get_wavelet(child.id).name == "design"
    assert {w.name for w in operator.get_wave("demo").wavelets} == {"main", "design"}
    assert [m.name for m in operator.invite(child.id, "carol").roster] == ["alice", "carol"]
    assert [m.name for m in operator.leave(child.id, "carol").roster] == ["alice"]

    found = operator.post(child.id, "the answer is 42", as_="alice")
    surfaced = operator.surface(child.id, "conclusion: 42", source_blip_id=found.id, as_="alice")
    assert surfaced.kind == "surface" and surfaced.wavelet_id == root.id
    assert surfaced.source_wavelet_id == child.id and surfaced.source_blip_id == found.id

    edited = operator.replace(first.id, "hello, world", as_="alice")
    assert edited.replaces == first.id and edited.id > first.id
    assert [b.text for b in operator.history(edited.id)] == ["hello", "hello, world"]
    assert operator.get_blip(first.id).superseded_by == edited.id

    page = operator.read(root.id)
    assert isinstance(page, BlipPage) and page.cursor == page.blips[-1].id
    texts = [b.text for b in page.blips]
    assert "hello, world" in texts and "hello" not in texts and "conclusion: 42" in texts
    assert "hello" in [b.text for b in operator.read(root.id, history=True).blips]
    assert operator.read(root.id, after=page.cursor).blips == []

    ctx = operator.context(child.id)
    assert isinstance(ctx, Context) and [w.name for w in ctx.path] == ["main", "design"]

    feed = operator.feed("demo", "alice", {})
    assert isinstance(feed, Feed) and {w.name for w in feed.wavelets} == {"main", "design"}
    operator.report_presence("demo", PresenceReport(participant="alice", event="ping"))
    assert any(r.participant == "alice" for r in operator.presence("demo"))

    minted = operator.mint_token("demo", "bob")
    assert minted.token and minted.participant == "bob"
    assert [t.id for t in operator.list_tokens("demo")] == [minted.id]
    assert [t.id for t in operator.revoke_token(token_id=minted.id)] == [minted.id]
    bob = operator.mint_token("demo", "bob")
    assert [t.id for t in operator.revoke_token(wave="demo", participant="bob")] == [bob.id]


def test_errors_come_back_as_the_classes_the_daemon_raised(daemon: Daemon, operator: Client) -> None:
    operator.create_wave("demo", ["alice", "bob"])
    root = operator.resolve("demo/main")
    secret = operator.fork(root.id, "secret", ["bob"], private=True)
    alice = Client(daemon.url, operator.mint_token("demo", "alice").token)

    with pytest.raises(errors.NotFound, match="nope"):
        operator.resolve("demo/nope")
    with pytest.raises(errors.NotFound):  # a private wavelet alice is not on does not exist for her
        alice.read(secret.id)
    with pytest.raises(errors.Forbidden):
        alice.post(root.id, "hi", as_="bob")
    with pytest.raises(errors.UsageError):
        operator.post(root.id, "   ")
    with pytest.raises(errors.Unauthorized):
        Client(daemon.url, "not-a-token").whoami()
    assert [b.text for b in operator.read(secret.id).blips if b.kind == "message"] == []


def test_long_poll_wakes_on_a_post_and_outlives_the_client_timeout(operator: Client) -> None:
    operator.create_wave("demo")
    root = operator.resolve("demo/main")
    cursor = operator.read(root.id).cursor
    # A client whose timeout is shorter than the wait: the socket must still wait long enough.
    patient = Client(operator.base_url, operator._token, timeout=0.5)
    started = time.monotonic()
    assert patient.read(root.id, after=cursor, wait=1.0).blips == []
    assert time.monotonic() - started >= 0.9

    got: list[BlipPage] = []
    reader = threading.Thread(target=lambda: got.append(patient.read(root.id, after=cursor, wait=10)))
    reader.start()
    posted = operator.post(root.id, "wake up")
    reader.join(5)
    assert got and [b.id for b in got[0].blips] == [posted.id]


def test_an_interrupted_call_leaves_the_client_usable(operator: Client) -> None:
    operator.create_wave("demo")
    root = operator.resolve("demo/main")
    cursor = operator.read(root.id).cursor

    class Interrupted(Exception):
        pass

    def interrupt(*_: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.2)  # like Ctrl-C in the middle of a long-poll
    try:
        with pytest.raises(Interrupted):
            operator.read(root.id, after=cursor, wait=5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert operator.post(root.id, "still works").text == "still works"


def run_daemon(paths: Paths, port: int) -> subprocess.Popen[bytes]:
    """``fleet daemon run`` in a subprocess on ``port``; returns once it answers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet", "daemon", "run", "--listen", f"127.0.0.1:{port}"],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    retry_until(lambda: (ep := live_endpoint(paths)) is not None and ep.pid == proc.pid, what="daemon up")
    return proc


def test_keep_alive_connection_survives_a_daemon_restart_on_the_same_port(fleet_env: Paths) -> None:
    port = free_port()
    first = run_daemon(fleet_env, port)
    c = connect(autostart=False)
    c.create_wave("demo")
    root = c.resolve("demo/main")
    c.post(root.id, "before")
    first.send_signal(signal.SIGTERM)
    assert first.wait(10) == 0  # the client's idle keep-alive socket is now closed
    second = run_daemon(fleet_env, port)
    try:
        c.post(root.id, "after")  # a POST on a dead keep-alive socket: reconnect, sent exactly once
        assert [b.text for b in c.read(root.id).blips if b.kind == "message"] == ["before", "after"]
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(10)


def test_connection_refused_retries_until_the_daemon_comes_up(fleet_env: Paths) -> None:
    port = free_port()
    late = Daemon(fleet_env, listen=f"127.0.0.1:{port}")
    timer = threading.Timer(0.3, late.start)
    timer.start()
    try:
        assert Client(f"http://127.0.0.1:{port}", "", retries=6).health().ok
    finally:
        timer.join()
        late.stop()


def test_dead_daemon_is_unreachable_quickly_with_a_clear_message() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(errors.DaemonUnreachable) as info:
        Client(url, "tok", retries=3).whoami()
    assert time.monotonic() - started < 3
    assert url in str(info.value) and "fleet daemon start" in str(info.value)
    assert info.value.exit_code == 3


def test_one_client_shared_by_threads(operator: Client) -> None:
    operator.create_wave("demo")
    root = operator.resolve("demo/main")
    ids: list[str] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        for i in range(25):
            blip = operator.post(root.id, f"{n}-{i}")
            with lock:
                ids.append(blip.id)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 200
    assert len([b for b in operator.read(root.id).blips if b.kind == "message"]) == 200


# ---------------------------------------------------------------- discovery


def test_connect_finds_the_local_daemon_through_the_endpoint_file(daemon: Daemon) -> None:
    c = connect(autostart=False)
    assert c.base_url == daemon.url and c.whoami().principal == "operator"


def test_connect_uses_fleet_daemon_and_its_token(
    daemon: Daemon, operator: Client, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    operator.create_wave("demo")
    token = operator.mint_token("demo", "alice").token
    monkeypatch.setenv("FLEET_DAEMON", daemon.url)
    monkeypatch.setenv("FLEET_TOKEN", token)
    assert connect().whoami().principal == "alice"

    monkeypatch.delenv("FLEET_TOKEN")
    token_file = tmp_path / "alice.token"
    write_private(token_file, token + "\n")
    monkeypatch.setenv("FLEET_TOKEN_FILE", str(token_file))
    assert connect().whoami().principal == "alice"


def test_no_daemon_without_autostart_is_unreachable(fleet_env: Paths) -> None:
    # A stale endpoint file (its pid is gone) must not be trusted.
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = Endpoint(url="http://127.0.0.1:1", pid=int(gone.stdout), started_at=0, version="0")
    write_private(fleet_env.endpoint, wire.dumps(stale))
    with pytest.raises(errors.DaemonUnreachable, match="fleet daemon start"):
        connect(autostart=False)
    assert not local_status(fleet_env).running


def test_autostart_starts_one_background_daemon_and_stop_stops_it(
    fleet_env: Paths, stop_autostarted: None, capfd: pytest.CaptureFixture[str]
) -> None:
    c = connect()
    err = capfd.readouterr().err
    assert f"fleet: started the local daemon at {c.base_url} (log: {fleet_env.daemon_log})" in err
    status = local_status(fleet_env)
    assert status.running and status.url == c.base_url and status.pid != os.getpid()
    assert c.whoami().principal == "operator"

    again = connect()  # already running: found, not started again, nothing printed
    assert again.base_url == c.base_url and capfd.readouterr().err == ""

    stopped = stop_local_daemon(fleet_env)
    assert stopped is not None and stopped.pid == status.pid
    assert not fleet_env.endpoint.exists() and not local_status(fleet_env).running


def test_concurrent_autostarts_start_exactly_one_daemon(fleet_env: Paths, stop_autostarted: None) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "fleet", "whoami", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], results
    notices = [err for _, err in results if "started the local daemon" in err]
    assert len(notices) == 1, results


def test_autostart_reports_a_daemon_that_dies_at_start(fleet_env: Paths, stop_autostarted: None) -> None:
    fleet_env.data.parent.mkdir(parents=True, exist_ok=True)
    fleet_env.data.write_text("a file where the data directory should be")
    with pytest.raises(errors.DaemonUnreachable) as info:
        connect()
    message = str(info.value)
    assert "exited at start" in message and str(fleet_env.daemon_log) in message
    assert "FileExistsError" in message or "data" in message
