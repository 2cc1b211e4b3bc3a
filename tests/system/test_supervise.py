"""Supervision on a real isolated tmux, a real daemon, real channels and scripted stand-in agents:
status, presence, respawn with no delivery gap, the respawn ladder (injected clock), an operator
mention, kill and spawn-again; the daemon's additions for it; and the four commands as a user runs them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libtmux
import pytest
from conftest import retry_until
from test_supervise_rules import FakeClock

from fleet import errors, layouts
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.models import AgentState, PresenceReport
from fleet.paths import Paths
from fleet.spawn import Spawner
from fleet.store import OPERATOR_PRINCIPAL, Store, replay
from fleet.supervise import (
    LADDER,
    KillReport,
    Ladder,
    StatusRow,
    Supervisor,
    WaveStatus,
    delivery_state,
    exit_of,
    kill,
    overview,
    respawn,
    status,
)
from fleet.tmux import Tmux

QUIET = "fleet-standin"
"""A stand-in that answers nobody: it only logs what it is handed."""
REPLY = "fleet-standin --reply '{author}: here ({name}).' --turns 100"
REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- helpers


def standin_log(paths: Paths, name: str) -> list[dict[str, Any]]:
    path = paths.state / "standin" / f"{name}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def runs(paths: Paths, name: str) -> list[dict[str, Any]]:
    """One entry per start of the stand-in: its argv and the blip ids it was handed, in order."""
    out: list[dict[str, Any]] = []
    for e in standin_log(paths, name):
        if e["event"] == "start":
            out.append({"argv": e["argv"], "blips": []})
        elif e["event"] == "notification" and out:
            out[-1]["blips"].append(e["meta"]["blip_id"])
    return out


def session_arg(argv: list[str]) -> tuple[str, str]:
    flag = "--resume" if "--resume" in argv else "--session-id"
    return flag, argv[argv.index(flag) + 1]


def spawner(operator: Client, srv: libtmux.Server, paths: Paths, agent: str | None = QUIET) -> Spawner:
    return Spawner(operator, Tmux(srv), paths, agent=agent, ready_timeout=20)


def spawn(operator: Client, srv: libtmux.Server, paths: Paths, ref: str, agent: str = QUIET) -> None:
    rep = spawner(operator, srv, paths, agent).spawn(ref, layouts.load("trio", paths))
    assert rep.all_ready, [(p.participant, p.why) for p in rep.panes]


def pane_of(srv: libtmux.Server, wave_id: str, name: str) -> Any:
    return next(p for p in Tmux(srv).fleet_panes(wave_id) if p.participant == name)


def kill_agent(srv: libtmux.Server, wave_id: str, name: str, sig: int = signal.SIGKILL) -> str:
    """Kill the agent process in ``name``'s pane; returns the pane id once tmux shows it dead."""
    pane = pane_of(srv, wave_id, name)
    os.kill(pane.pid, sig)

    def settled() -> bool:
        now = pane_of(srv, wave_id, name)
        return bool(now.dead and exit_of(now) != "unknown")

    retry_until(settled, what=f"{name}'s pane dead, its exit recorded")
    return str(pane.pane_id)


def system_texts(operator: Client, wavelet_id: str) -> list[str]:
    return [b.text for b in operator.read(wavelet_id).blips if b.kind == "system"]


def raw_post(url: str, token: str, path: str, body: dict[str, Any]) -> int:
    """POST a JSON body exactly as given (no client model in between); the HTTP status."""
    req = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def wave(operator: Client) -> str:
    operator.create_wave("demo", ["alice", "bob", "carol"])
    return "demo"


# ---------------------------------------------------------------- the daemon's additions


def test_only_the_operator_writes_system_blips_and_they_replay(
    daemon: Daemon, operator: Client, wave: str, tmp_path: Path
) -> None:
    main = operator.resolve("demo/main")
    blip = operator.post_system(main.id, "supervise: respawned bob")
    assert (blip.author, blip.kind, blip.text) == ("system", "system", "supervise: respawned bob")
    assert operator.read(main.id).blips[-1] == blip
    alice = Client(daemon.url, operator.mint_token("demo", "alice").token)
    with pytest.raises(errors.Forbidden):
        alice.post_system(main.id, "supervise: I am the system now")
    with pytest.raises(errors.Forbidden):
        alice.replace(blip.id, "edited provenance")
    # a participant's ordinary post cannot carry a kind either: the field does not exist
    token = alice.token
    assert (
        raw_post(daemon.url, token, f"/v1/wavelets/{main.id}/blips", {"text": "x", "kind": "system"}) == 400
    )
    assert raw_post(daemon.url, token, f"/v1/wavelets/{main.id}/system", {"text": "x"}) == 403
    assert [b.author for b in operator.read(main.id).blips if b.kind == "system"] == ["system"] * 2
    with pytest.raises(errors.UsageError):
        operator.post_system(main.id, "   ")
    # the log rebuilds it like any other blip
    replay(daemon.paths.db, tmp_path / "copy.db")
    assert (
        Store(tmp_path / "copy.db").dump(OPERATOR_PRINCIPAL)["blips"]
        == Store(daemon.paths.db).dump(OPERATOR_PRINCIPAL)["blips"]
    )


def test_the_wave_stream_long_polls_every_wavelet_and_activity_counts_authors(
    daemon: Daemon, operator: Client, wave: str
) -> None:
    main = operator.resolve("demo/main")
    side = operator.fork(main.id, "side", ["alice"], private=True)
    operator.post(main.id, "first", as_="alice")
    act = operator.activity("demo")
    page = operator.read_wave("demo", after=act.head, wait=0)
    assert page.blips == [] and page.cursor == act.head
    got: list[list[str]] = []
    t = threading.Thread(
        target=lambda: got.append([b.text for b in operator.read_wave("demo", after=act.head, wait=20).blips])
    )
    t.start()
    operator.post(side.id, "in the private fork", as_="alice")
    t.join(25)
    assert got == [["in the private fork"]]
    everything = operator.read_wave("demo").blips
    assert [b.id for b in everything] == sorted(b.id for b in everything)
    assert {b.wavelet_id for b in everything} == {main.id, side.id}

    act = operator.activity("demo")
    rows = {(a.wavelet_id, a.participant): a for a in act.activity}
    assert set(rows) == {(main.id, "alice"), (side.id, "alice")}  # system blips are not counted
    assert rows[(main.id, "alice")].blips == 1
    assert rows[(side.id, "alice")].last_blip_id == everything[-1].id == act.head
    assert rows[(side.id, "alice")].last_blip_at == everything[-1].created_at

    alice = Client(daemon.url, operator.mint_token("demo", "alice").token)
    with pytest.raises(errors.Forbidden):
        alice.read_wave("demo")
    with pytest.raises(errors.Forbidden):
        alice.activity("demo")
    with pytest.raises(errors.NotFound):
        operator.read_wave("nope")


# ---------------------------------------------------------------- the ladder


# ---------------------------------------------------------------- status


def test_status_shows_dead_panes_with_their_exit_and_a_member_who_left(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    spawn(operator, tmux_server, fleet_env, "demo/main")
    wave_id, main = operator.get_wave("demo").id, operator.resolve("demo/main")
    operator.post(main.id, "hello all")
    retry_until(lambda: all(p.delivered >= 2 for p in operator.presence("demo")), what="deliveries reported")
    kill_agent(tmux_server, wave_id, "bob", signal.SIGKILL)
    carol = pane_of(tmux_server, wave_id, "carol")
    Tmux(tmux_server).respawn(carol.pane_id, ["sh", "-c", "exit 3"])
    retry_until(lambda: exit_of(pane_of(tmux_server, wave_id, "carol")) == "status 3", what="carol dead")
    operator.post(main.id, "I wrote this", as_="alice")
    operator.leave(main.id, "alice")

    st = status(operator, Tmux(tmux_server), fleet_env, "demo")
    assert st.wave == "demo" and st.tmux_session == Tmux(tmux_server).find_session(wave_id)
    rows = {r.participant: r for r in st.rows}
    assert [r.participant for r in st.rows] == ["bob", "carol", "alice"]  # members, then who left
    assert (rows["bob"].pane, rows["bob"].exit) == ("dead", "signal 9")
    assert (rows["carol"].pane, rows["carol"].exit) == ("dead", "status 3")
    assert "fleet respawn demo/main bob" in rows["bob"].note
    alice = rows["alice"]
    assert (alice.member, alice.pane, alice.note) == (False, "alive", "left: receives nothing")
    assert alice.blips == 1 and alice.last_blip_at is not None
    recorded = {r.participant: r for r in operator.sessions("demo")}
    for name, row in rows.items():
        assert row.session_id == recorded[name].session_id
        assert row.host == socket.gethostname() and row.wavelet == "demo/main"
        assert row.delivered >= 2, "the daemon heard the channel's delivery reports"
        # the channel's state file is on this machine: cap use is read from it
        state = delivery_state(fleet_env, operator.base_url, "demo", name)
        assert state is not None and row.cap_used == state.delivered[main.id] and row.cap == 40


def test_status_shows_one_state_per_session_never_a_delivery_guess(
    fleet_env: Paths, tmux_server: libtmux.Server
) -> None:
    """What status says an agent does is its session's state: a stand-in agent keeps no transcript,
    so it is ``unknown`` and says why, even right after a delivery; a dead pane seen here is
    ``dead`` with its exit status; a channel not heard within the ping TTL is ``unknown``."""
    d = Daemon(fleet_env, "127.0.0.1:0", ping_ttl=120)
    d.start()
    offset = [0.0]
    d.presence.clock = lambda: time.time() + offset[0]
    try:
        op = Client(d.url, d.operator_token)
        op.create_wave("demo", ["alice"])
        main = op.resolve("demo/main")
        spawn(op, tmux_server, fleet_env, "demo/main")
        tmux = Tmux(tmux_server)

        def row() -> StatusRow:
            return status(op, tmux, fleet_env, "demo").rows[0]

        retry_until(lambda: row().presence == "live", what="alice's channel up")
        op.post(main.id, "alice: a first job")
        retry_until(lambda: row().delivered > 0, what="delivered")
        got = row()
        assert got.state.kind == "unknown" and "not Claude Code" in got.state.why, got.state
        assert got.state_text.startswith("unknown (its agent keeps no transcript")
        kill_agent(tmux_server, op.get_wave("demo").id, "alice")
        got = row()
        assert (got.state.kind, got.state.exit) == ("dead", "signal 9"), got.state
        assert got.state_text == "dead (signal 9)"
        offset[0] += 121
        assert row().presence == "gone"
    finally:
        d.stop()


def test_status_lists_who_waits_first_and_a_turn_for_another_wavelet_says_so(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths
) -> None:
    operator.create_wave("w", ["alice", "bob"])
    operator.fork(operator.resolve("w/main").id, "side", ["alice"])

    def report(name: str, **agent: Any) -> None:
        operator.report_presence(
            "w", PresenceReport(participant=name, event="ping", agent=AgentState(**agent))
        )

    report("alice", kind="turning", since=time.time(), wavelets=["w/side"], woken_by=["b-9"])
    report("bob", kind="permission", tool="Bash", input="make deploy", since=time.time())
    st = status(operator, Tmux(tmux_server), fleet_env, "w")
    order = [(r.wavelet, r.participant) for r in st.rows]
    assert order[0] == ("w/main", "bob"), "who waits on the operator comes first"
    texts = {(r.wavelet, r.participant): r.state_text for r in st.rows}
    assert texts[("w/main", "alice")] == "turning for w/side", (
        "a wavelet it got nothing in does not read turning"
    )
    assert texts[("w/side", "alice")].startswith("turning 0s (woken by b-9)")
    assert texts[("w/main", "bob")].startswith("waiting for permission: Bash (make deploy)")
    (w,) = overview(operator, Tmux(tmux_server))
    assert [x.split(" 0s")[0] for x in w.waiting] == ["bob: waiting for permission: Bash (make deploy)"]


# ---------------------------------------------------------------- respawn


def test_respawn_resumes_the_session_and_delivery_resumes_with_no_gap(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    spawn(operator, tmux_server, fleet_env, "demo/main")
    wave_id, main = operator.get_wave("demo").id, operator.resolve("demo/main")
    before = [operator.post(main.id, f"before {i}").id for i in range(2)]
    retry_until(lambda: runs(fleet_env, "bob")[0]["blips"][-2:] == before, what="bob handed both")
    # the cursor is saved once the batch is pushed: kill only after that
    retry_until(
        lambda: (
            (s := delivery_state(fleet_env, operator.base_url, "demo", "bob")) is not None
            and s.cursors.get(main.id) == before[-1]
        ),
        what="bob's cursor saved",
    )
    pane = kill_agent(tmux_server, wave_id, "bob")
    while_dead = [operator.post(main.id, f"while bob was dead {i}").id for i in range(3)]

    report = respawn(operator, spawner(operator, tmux_server, fleet_env, None), "demo/main", "bob")
    assert report.ready and report.pane_id == pane and report.action == "respawned"

    def caught_up() -> list[dict[str, Any]] | None:
        r = runs(fleet_env, "bob")
        return r if len(r) == 2 and len(r[1]["blips"]) >= 3 else None

    got = retry_until(caught_up, what="the respawned bob handed the blips it missed")
    assert got is not None
    first, second = got
    recorded = operator.sessions("demo", "bob")[0].session_id
    assert session_arg(first["argv"]) == ("--session-id", recorded)
    assert session_arg(second["argv"]) == ("--resume", recorded)
    assert second["blips"] == while_dead, "exactly what was posted while it was dead"
    everything = [b.id for b in operator.read(main.id).blips if b.author != "bob"]
    assert first["blips"] + second["blips"] == everything, "no gap, nothing twice"

    with pytest.raises(errors.Conflict):
        respawn(operator, spawner(operator, tmux_server, fleet_env, None), "demo/main", "bob")
    with pytest.raises(errors.NotFound):
        respawn(operator, spawner(operator, tmux_server, fleet_env, None), "demo/main", "zed")
    with pytest.raises(errors.NotFound):
        respawn(operator, spawner(operator, tmux_server, fleet_env, None), "demo/nope", "bob")


# ---------------------------------------------------------------- the supervisor


def test_the_supervisor_respawns_on_the_ladder_and_a_post_resets_it(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths
) -> None:
    operator.create_wave("demo", ["alice"])
    spawn(operator, tmux_server, fleet_env, "demo/main", agent=REPLY)
    wave_id, main = operator.get_wave("demo").id, operator.resolve("demo/main")
    clock = FakeClock()
    sup = Supervisor(
        operator, Tmux(tmux_server), spawner(operator, tmux_server, fleet_env, None), "demo",
        ladder=Ladder(clock=clock),
    )  # fmt: skip
    assert sup.step() == []

    def rung() -> float:
        """Kill alice; return how long the supervisor waited before bringing her back."""
        starts = len(runs(fleet_env, "alice"))
        kill_agent(tmux_server, wave_id, "alice")
        died = sup.step()
        assert [e.event for e in died] == ["died"]
        assert operator.presence("demo")[0].state == "gone"
        waited = 0.0
        while True:
            clock.t += 60
            waited += 60
            events = sup.step()
            if events:
                break
            assert len(runs(fleet_env, "alice")) == starts, "respawned before its time"
        assert [e.event for e in events] == ["respawned"]
        argv = runs(fleet_env, "alice")[-1]["argv"]
        assert len(runs(fleet_env, "alice")) == starts + 1
        assert session_arg(argv) == ("--resume", operator.sessions("demo", "alice")[0].session_id)
        return waited

    assert [rung() for _ in range(4)] == [300, 900, 2700, 2700]
    # alice posts again (she answers a mention): the ladder starts over
    operator.post(main.id, "alice, still with us?")
    retry_until(lambda: any(b.author == "alice" for b in operator.read_wave("demo", after=sup.cursor).blips))
    assert sup.step() == []
    assert rung() == 300
    texts = system_texts(operator, main.id)
    assert sum("died" in t for t in texts) == 5 and sum("respawned alice" in t for t in texts) == 5
    assert any("respawning it in 45m" in t for t in texts)


def test_an_operator_mention_respawns_a_dead_participant_at_once(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    spawn(operator, tmux_server, fleet_env, "demo/main", agent=REPLY)
    wave_id, main = operator.get_wave("demo").id, operator.resolve("demo/main")
    sup = Supervisor(operator, Tmux(tmux_server), spawner(operator, tmux_server, fleet_env, None), "demo")
    assert sup.ladder.rungs == LADDER  # minutes away: only the mention can explain a respawn
    kill_agent(tmux_server, wave_id, "bob")
    assert [e.event for e in sup.step()] == ["died"]
    operator.post(main.id, "bob is not around, carol", as_="alice")  # not the operator: no effect
    assert sup.step(wait=5) == []
    operator.post(main.id, "bob, where are you?")
    events = sup.step(wait=5)
    assert [(e.event, e.participant) for e in events] == [("respawned", "bob")]
    assert "the operator mentioned it" in events[0].text
    assert len(runs(fleet_env, "bob")) == 2 and "--resume" in runs(fleet_env, "bob")[1]["argv"]
    # the resumed bob is handed the mention and answers it
    retry_until(lambda: any(b.author == "bob" for b in operator.read(main.id).blips), what="bob answers")
    assert any(t.startswith("supervise: respawned bob") for t in system_texts(operator, main.id))


# ---------------------------------------------------------------- kill


def test_kill_a_wavelet_then_the_wave_then_spawn_resumes_the_same_sessions(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    main = operator.resolve("demo/main")
    side = operator.fork(main.id, "side", ["dave"])
    spawn(operator, tmux_server, fleet_env, "demo/main")
    spawn(operator, tmux_server, fleet_env, "demo/side")
    tmux, wave_id = Tmux(tmux_server), operator.get_wave("demo").id
    recorded = {r.participant: r.session_id for r in operator.sessions("demo")}
    assert set(recorded) == {"alice", "bob", "carol", "dave"}

    session = tmux.wave_session(wave_id)
    assert session is not None
    report = kill(operator, tmux, "demo/side")
    assert (report.scope, report.participants) == ("wavelet", ["dave"])
    assert report.killed == f"{session.name}:side" and (report.killed_id or "").startswith(
        "@"
    )  # names, for people
    assert sorted(p.participant for p in tmux.fleet_panes(wave_id)) == ["alice", "bob", "carol"]
    assert {p.participant: p.state for p in operator.presence("demo")}["dave"] == "gone"
    assert any(
        t.startswith("kill: the operator killed the tmux window of demo/side")
        for t in system_texts(operator, side.id)
    )

    report = kill(operator, tmux, "demo")
    assert (report.scope, report.participants) == ("wave", ["alice", "bob", "carol"])
    assert (report.killed, report.killed_id) == (session.name, session.session_id)
    assert tmux.find_session(wave_id) is None and tmux.fleet_panes(wave_id) == []
    assert {p.state for p in operator.presence("demo")} == {"gone"}
    again = kill(operator, tmux, "demo")
    assert again.killed is None and again.killed_id is None and again.participants == []
    # all data kept: the rows say how to bring them back
    rows = status(operator, tmux, fleet_env, "demo").rows
    assert {r.pane for r in rows} == {"none"} and all("resumes it" in r.note for r in rows)

    spawn(operator, tmux_server, fleet_env, "demo/main")
    spawn(operator, tmux_server, fleet_env, "demo/side")
    for name, session_id in recorded.items():
        assert session_arg(runs(fleet_env, name)[-1]["argv"]) == ("--resume", session_id)
        assert len(runs(fleet_env, name)) == 2
    assert {r.participant: r.session_id for r in operator.sessions("demo")} == recorded
    with pytest.raises(errors.NotFound):
        kill(operator, tmux, "nope")


# ---------------------------------------------------------------- the commands


def started(srv: libtmux.Server) -> str:
    """Start the fixture's server (with its own config) and return its socket name."""
    srv.cmd("new-session", "-d", "-s", "keepalive", "tail", "-f", "/dev/null")
    return str(srv.socket_name)


@pytest.fixture
def env(daemon: Daemon, tmux_server: libtmux.Server) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "FLEET_DAEMON": daemon.url,
        "FLEET_TOKEN": daemon.operator_token,
        "FLEET_TMUX_SOCKET": started(tmux_server),
    }


def fleet(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=90
    )


@pytest.fixture
def popen(env: dict[str, str]) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [sys.executable, "-m", "fleet", *args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_cli_status_json_is_the_model_and_the_table_reads(
    env: dict[str, str], operator: Client, wave: str
) -> None:
    spawned = fleet(env, "spawn", "demo/main", "--agent", QUIET)
    assert spawned.returncode == 0, spawned.stderr
    one = fleet(env, "status", "demo", "--json")
    assert one.returncode == 0, one.stderr
    data = json.loads(one.stdout)
    assert data == WaveStatus.model_validate(data).model_dump(mode="json")
    assert [(r["participant"], r["pane"], r["member"]) for r in data["rows"]] == [
        ("alice", "alive", True),
        ("bob", "alive", True),
        ("carol", "alive", True),
    ]
    assert set(data["rows"][0]) == {
        "wavelet", "wavelet_id", "participant", "member", "pane_id", "pane", "exit", "pane_wavelet",
        "presence", "state", "state_text", "last_blip_at", "blips", "delivered", "last_delivery", "cap_used",
        "cap", "capped", "route", "route_why", "unconfirmed", "oldest_unconfirmed", "receipts_problem",
        "session_id", "host", "worktree", "branch", "ahead", "dirty", "usage", "budget", "note", "agent",
        "limits",
    }  # fmt: skip
    every = json.loads(fleet(env, "status", "--json").stdout)
    assert [w["wave"] for w in every] == ["demo"]
    table = fleet(env, "status", "demo")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0] == "wave demo  (tmux session demo)", lines[0]  # its name, not tmux's $N
    assert lines[1].split() == [
        "WAVELET", "NAME", "PANE", "STATE", "WOKEN", "BY", "LAST", "BLIP", "DELIVERED", "CAP", "SESSION",
        "HOST", "WORKTREE", "USAGE", "BUDGET", "NOTE"
    ]  # fmt: skip
    alice = lines[2].split()
    assert alice[:4] == ["main", "alice", data["rows"][0]["pane_id"], "alive"]
    assert data["rows"][0]["session_id"][:8] in alice
    assert data["rows"][0]["state"]["kind"] == "unknown" and "unknown (its agent keeps" in lines[2]


def test_cli_status_watch_redraws_until_ctrl_c_and_exits_0(
    env: dict[str, str], operator: Client, wave: str, popen: Any
) -> None:
    p = popen("status", "demo", "--watch", "--interval", "0.1")
    assert p.stdout is not None
    frames = 0
    while frames < 3:
        line = p.stdout.readline()
        assert line, p.stderr.read() if p.stderr else ""
        frames += line.startswith("fleet status")
    p.send_signal(signal.SIGINT)
    assert p.wait(20) == 0


def test_cli_respawn_kill_and_their_errors(
    env: dict[str, str], operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    assert fleet(env, "spawn", "demo/main", "--agent", QUIET).returncode == 0
    alive = fleet(env, "respawn", "demo/main", "bob")
    assert alive.returncode == 1 and "--force" in alive.stderr
    forced = fleet(env, "respawn", "demo/main", "bob", "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    rep = json.loads(forced.stdout)
    assert rep["ready"] and rep["action"] == "respawned" and "screen saved to" in rep["why"]
    assert session_arg(runs(fleet_env, "bob")[-1]["argv"]) == ("--resume", rep["session_id"])
    assert fleet(env, "respawn", "demo/main", "zed").returncode == 4
    operator.fork(operator.resolve("demo/main").id, "side", ["dave"])
    elsewhere = fleet(env, "respawn", "demo/side", "bob")  # bob runs, but not on side's roster
    assert elsewhere.returncode == 4 and "not on the roster of demo/side" in elsewhere.stderr
    assert fleet(env, "respawn", "demo/nope", "bob").returncode == 4

    killed = fleet(env, "kill", "demo/main", "--json")
    assert killed.returncode == 0, killed.stderr
    report = KillReport.model_validate_json(killed.stdout)
    assert report.scope == "wavelet" and report.participants == ["alice", "bob", "carol"]
    nothing = fleet(env, "kill", "demo")
    assert nothing.returncode == 0 and "nothing to kill" in nothing.stderr
    assert fleet(env, "kill", "nope").returncode == 4
    resumed = fleet(env, "spawn", "demo/main")  # no --agent: each resumes its recorded one
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count("respawned") == 3

    for args in (["status", "nope"], ["supervise", "nope"], ["kill", "nope"]):
        r = fleet(env, *args)
        assert r.returncode == 4 and "nope" in r.stderr and "Traceback" not in r.stderr
    assert fleet({**env, "FLEET_WAVE": ""}, "supervise").returncode == 2
    for args in (
        ["status", "demo"],
        ["respawn", "demo/main", "bob"],
        ["kill", "demo"],
        ["supervise", "demo"],
    ):
        no_tmux = fleet({**env, "PATH": "/nonexistent"}, *args)
        assert no_tmux.returncode == 6 and "tmux" in no_tmux.stderr, args
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = f"http://127.0.0.1:{s.getsockname()[1]}"
        down = fleet({**env, "FLEET_DAEMON": closed}, *args)
        assert down.returncode == 3 and closed in down.stderr and "Traceback" not in down.stderr, args


def test_cli_supervise_brings_back_a_mentioned_agent_and_stops_on_ctrl_c(
    env: dict[str, str],
    operator: Client,
    tmux_server: libtmux.Server,
    fleet_env: Paths,
    wave: str,
    popen: Any,
) -> None:
    assert fleet(env, "spawn", "demo/main", "--agent", REPLY).returncode == 0
    main = operator.resolve("demo/main")
    p = popen("supervise", "demo")
    assert p.stderr is not None and "supervising wave demo" in p.stderr.readline()
    said: list[str] = []  # its stdout, line by line as it prints (it posts each act, then prints it)
    reader = threading.Thread(target=lambda: said.extend(p.stdout or ()), daemon=True)
    reader.start()
    kill_agent(tmux_server, operator.get_wave("demo").id, "carol")
    retry_until(
        lambda: any("carol's pane" in t for t in system_texts(operator, main.id)), timeout=30, what="died"
    )
    operator.post(main.id, "carol, back to work please")
    retry_until(
        lambda: any(t.startswith("supervise: respawned carol") for t in system_texts(operator, main.id)),
        timeout=30,
        what="carol respawned",
    )
    # Ctrl-C once it said so on its terminal too (the blip is posted a moment before the line).
    retry_until(lambda: any("respawned carol" in line for line in said), timeout=10, what="the line")
    p.send_signal(signal.SIGINT)
    assert p.wait(20) == 0
    reader.join(10)
    out = "".join(said)
    assert "died (signal 9)" in out and "respawned carol" in out


STANDIN_SUMMARIZER = """\
import json, pathlib, sys
req = json.load(sys.stdin)
if pathlib.Path(sys.argv[1]).read_text().strip() == "crash":
    sys.exit("stand-in summarizer: crashed on purpose")
ids = [b["id"] for b in req["blips"]]
print(json.dumps({"text": f"stand-in summary of {len(ids)} blip(s)", "cites": req["must_cite"]}))
"""


def test_cli_supervise_rolls_summaries_with_the_layouts_summarizer_fail_open(
    env: dict[str, str], operator: Client, fleet_env: Paths, wave: str, popen: Any, tmp_path: Path
) -> None:
    """The layout's ``summarizer`` key, recorded with the wave's sessions at spawn: ``fleet
    supervise`` runs it after ``every`` new blips, nobody starts a summary command. A crash leaves
    the full text and a routing-log line; once it works the next blips get a summary."""
    from fleet.delivery.attention import SummaryEntry, parse_entry, routing_log_path
    from fleet.delivery.state import StateFile

    script, mode = tmp_path / "summarizer.py", tmp_path / "mode"
    script.write_text(STANDIN_SUMMARIZER)
    mode.write_text("crash")
    command = f"{sys.executable} {script} {mode}"
    layout = tmp_path / "summarized.toml"
    layout.write_text(
        f"summarizer = {{ command = {json.dumps(command)}, every = 3, timeout = 20 }}\n"
        f"[defaults]\nagent = {json.dumps(QUIET)}\n"
    )
    spawned = fleet(env, "spawn", "demo/main", "--layout", str(layout))
    assert spawned.returncode == 0, spawned.stderr
    main = operator.resolve("demo/main")
    p = popen("supervise", "demo")
    assert p.stderr is not None and "supervising wave demo" in p.stderr.readline()
    log = routing_log_path(StateFile(fleet_env.channels, operator.url, "demo", "summarizer"))

    def outcomes() -> list[SummaryEntry]:
        lines = log.read_bytes().splitlines() if log.exists() else []
        return [e for e in map(parse_entry, lines) if isinstance(e, SummaryEntry) and e.wavelet_id == main.id]

    done = operator.post(main.id, "DONE: the parser is in.", as_="alice")
    operator.post(main.id, "a remark", as_="bob")
    operator.post(main.id, "another remark", as_="carol")
    crashed = retry_until(outcomes, timeout=30, what="the crashed run in the routing log")
    assert {(e.outcome, e.author_kind) for e in crashed} == {("exit", "summarizer")}, crashed
    assert "crashed on purpose" in crashed[0].detail
    assert operator.summaries(main.id) == [] and operator.context(main.id).saved_bytes == 0

    mode.write_text("ok")
    for i in range(3):
        operator.post(main.id, f"more chatter {i}", as_="bob")
    (summary,) = retry_until(lambda: operator.summaries(main.id), timeout=30, what="a summary by supervise")
    assert summary.author_kind == "summarizer" and summary.author == os.path.basename(sys.executable)
    assert summary.text.startswith("stand-in summary of ") and done.id in summary.cites
    # the summary is in the store before its run's outcome is in the routing log: wait for that line
    retry_until(lambda: [e.outcome for e in outcomes()][-1:] == ["accepted"], what="the accepted run logged")
    p.send_signal(signal.SIGINT)
    assert p.wait(20) == 0
