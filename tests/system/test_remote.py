"""A second machine joins in one line and spawns agents that converse with the first machine's.

"The other machine" is a second FLEET_HOME (its own data dir, its own tmux server started in its own
environment); the daemon is on loopback but declared remote (``tls=True``), so everything between
the machines goes over pinned TLS. Both sides run the real CLI; the agents are stand-ins.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import libtmux
import pytest
from conftest import TMUX_CONF, retry_until

from fleet import layouts
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths
from fleet.spawn import Spawner
from fleet.tmux import Tmux

ALICE = "fleet-standin --reply 'bob: hello from machine A ({author})' --turns 2"
BOB = "fleet-standin --reply 'alice: bob here, on machine B ({author})' --turns 1"


def run(env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def hq(fleet_env: Paths) -> Iterator[Daemon]:
    """Machine A's daemon: serving other machines (HTTPS with its own certificate)."""
    d = Daemon(fleet_env, "127.0.0.1:0", tls=True)
    d.start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def laptop(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Machine B: its own FLEET_HOME and HOME, and a tmux server started in that environment."""
    home = tmp_path / "laptop"
    (home / "home").mkdir(parents=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "TMUX"))},
        "FLEET_HOME": str(home / "fleet"),
        "HOME": str(home / "home"),
        "SHELL": "/bin/sh",
        "FLEET_TMUX_SOCKET": f"fleet-test-b-{uuid.uuid4().hex[:8]}",
    }
    conf = tmp_path / "tmux-b.conf"
    conf.write_text(TMUX_CONF)
    sock = env["FLEET_TMUX_SOCKET"]
    subprocess.run(
        [
            "tmux",
            "-L",
            sock,
            "-f",
            str(conf),
            "new-session",
            "-d",
            "-s",
            "keepalive",
            "tail",
            "-f",
            "/dev/null",
        ],
        env=env,
        check=True,
    )
    try:
        yield env
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], env=env, check=False)
        (Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.geteuid()}" / sock).unlink(missing_ok=True)


def test_a_second_machine_joins_in_one_line_and_its_agents_converse_with_the_first(
    hq: Daemon, fleet_env: Paths, laptop: dict[str, str], tmux_server: libtmux.Server
) -> None:
    here = {**os.environ}  # machine A: FLEET_HOME is fleet_env, the daemon is the local one
    op = Client(f"{hq.url}#sha256={hq.fingerprint}", hq.operator_token)
    wave = op.create_wave("w", ["alice", "bob"])
    op.fork(wave.root_id, "alices-desk", ["alice"])
    op.fork(wave.root_id, "bobs-desk", ["bob"])
    op.create_wave("other", ["carol"])

    minted = run(here, "remote", "mint", "laptop", "--wave", "w")
    assert minted.returncode == 0, minted.stderr
    string = minted.stdout.strip()
    assert string.startswith("fleet-join1:") and "\n" not in string and "fleet remote join" in minted.stderr

    joined = run(laptop, "remote", "join", string, "--name", "hq")
    assert joined.returncode == 0, joined.stderr
    stored = Path(laptop["FLEET_HOME"]) / "data" / "remotes" / "hq.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text())["url"] == f"{hq.url}#sha256={hq.fingerprint}"
    listed = run(laptop, "remote", "list", "--json")
    assert listed.returncode == 0 and "token" not in json.loads(listed.stdout)[0]

    # the machine token: the operator's powers in w, and nothing of the other wave
    there = {**laptop, "FLEET_DAEMON": "hq"}
    who = run(there, "whoami")
    assert who.returncode == 0 and "operator" in who.stdout, who.stderr
    assert run(there, "ls").stdout.count("other") == 0
    status = run(there, "daemon", "status")
    assert status.returncode == 0 and "running (FLEET_DAEMON)" in status.stdout, status.stdout + status.stderr
    assert run({**laptop}, "--remote", "hq", "ls").stdout.count("w") >= 1

    # machine A runs alice, machine B runs bob; they meet in w/main
    Spawner(op, Tmux(tmux_server), fleet_env, agent=ALICE, ready_timeout=30).spawn(
        "w/alices-desk", layouts.load("pair", fleet_env)
    )
    spawned = run(there, "spawn", "w/bobs-desk", "--agent", BOB, "--json")
    assert spawned.returncode == 0, spawned.stderr
    [bob] = json.loads(spawned.stdout)["panes"]
    assert bob["participant"] == "bob" and bob["ready"], spawned.stdout
    op.post(wave.root_id, "alice: please say hello to your peer on the other machine.")

    def said(author: str, start: str) -> list[str]:
        return [
            b.text for b in op.read(wave.root_id).blips if b.author == author and b.text.startswith(start)
        ]

    retry_until(
        lambda: said("alice", "bob: hello from machine A (bob)"), timeout=40, what="alice answers bob"
    )
    assert said("alice", "bob: hello from machine A (operator)")
    assert said("bob", "alice: bob here, on machine B (alice)")
    # bob ran on machine B: its stand-in wrote its log into B's state dir, its token file is B's
    assert (Path(laptop["FLEET_HOME"]) / "state" / "standin" / "bob.jsonl").exists()
    assert not (fleet_env.state / "standin" / "bob.jsonl").exists()
    assert list((Path(laptop["FLEET_HOME"]) / "state" / "tokens").rglob("bob.token"))

    # the machine's tokens are listed together and revoked together
    tokens = run(here, "remote", "tokens", "laptop", "--json")
    assert tokens.returncode == 0, tokens.stderr
    rows = json.loads(tokens.stdout)
    assert {(t["participant"], t["revoked_at"] is None) for t in rows} >= {("operator", True), ("bob", True)}
    revoked = run(here, "remote", "revoke", "laptop")
    assert revoked.returncode == 0 and "revoked" in revoked.stdout, revoked.stderr
    refused = run(there, "whoami")
    assert refused.returncode == 5 and "token" in refused.stderr, refused.stderr
    assert all(t.revoked_at for t in op.list_tokens(machine="laptop"))


def test_a_participant_join_string_speaks_as_that_participant_and_cannot_spawn(
    hq: Daemon, laptop: dict[str, str]
) -> None:
    op = Client(f"{hq.url}#sha256={hq.fingerprint}", hq.operator_token)
    op.create_wave("w", ["dana"])
    minted = run({**os.environ}, "remote", "mint", "danas-laptop", "--wave", "w", "--participant", "dana")
    assert minted.returncode == 0, minted.stderr
    assert run(laptop, "remote", "join", minted.stdout.strip()).returncode == 0
    there = {**laptop, "FLEET_DAEMON": "remote"}  # no --name, and the host is an address: "remote"
    posted = run(there, "post", "w/main", "hello from dana")
    assert posted.returncode == 0, posted.stderr
    assert [b.author for b in op.read(op.resolve("w/main").id).blips][-1] == "dana"
    spawn = run(there, "spawn", "w/main", "--agent", BOB)
    assert spawn.returncode == 5 and "participant token" in spawn.stderr and "Traceback" not in spawn.stderr


def test_bad_join_strings_are_refused_and_store_nothing(hq: Daemon, laptop: dict[str, str]) -> None:
    for bad in ("nonsense", "fleet-join1:!!!", "fleet-join1:e30"):
        got = run(laptop, "remote", "join", bad, "--name", "x")
        assert got.returncode == 2 and "join string" in got.stderr and "Traceback" not in got.stderr
    assert not (Path(laptop["FLEET_HOME"]) / "data" / "remotes" / "x.json").exists()
    unknown = run({**laptop, "FLEET_DAEMON": "nosuch"}, "whoami")
    assert unknown.returncode == 2 and "fleet remote join" in unknown.stderr


def test_hints_printed_under_remote_carry_it_and_run_as_printed(
    hq: Daemon, fleet_env: Paths, laptop: dict[str, str]
) -> None:
    """``fleet --remote hq spawn`` prints an attach hint; run as printed on the laptop it attaches to
    the laptop's tmux through hq (it used to lack ``--remote hq``: it failed, and started a stray local
    daemon). Error hints say ``fleet --remote hq …`` too."""
    import pexpect

    op = Client(f"{hq.url}#sha256={hq.fingerprint}", hq.operator_token)
    wave = op.create_wave("w", ["bob"])
    op.fork(wave.root_id, "empty", [])
    minted = run({**os.environ}, "remote", "mint", "laptop", "--wave", "w")
    assert run(laptop, "remote", "join", minted.stdout.strip(), "--name", "hq").returncode == 0
    laptop = {**laptop, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    spawned = run(laptop, "--remote", "hq", "spawn", "w/main", "--agent", BOB)
    assert spawned.returncode == 0, spawned.stderr
    (hint,) = [ln.removeprefix("attach: ") for ln in spawned.stdout.splitlines() if ln.startswith("attach: ")]
    assert hint == f"FLEET_TMUX_SOCKET={laptop['FLEET_TMUX_SOCKET']} fleet --remote hq attach w", hint
    endpoint = Path(laptop["FLEET_HOME"]) / "state" / "daemon.json"
    child = pexpect.spawn("/bin/sh", ["-c", hint], env=laptop, encoding="utf-8", dimensions=(40, 160))
    try:
        child.expect("fleet stand-in bob ready", timeout=30)
        sock = laptop["FLEET_TMUX_SOCKET"]
        retry_until(
            lambda: (
                subprocess.run(["tmux", "-L", sock, "list-clients"], capture_output=True, text=True).stdout
            ),
            what="the hint's tmux client",
        )
    finally:
        child.terminate(force=True)
    assert not list(Path(laptop["FLEET_HOME"]).rglob("daemon.json")), "a stray local daemon was started"
    assert not endpoint.exists()
    refused = run(laptop, "--remote", "hq", "spawn", "w/empty", "--agent", BOB)
    assert refused.returncode == 2 and "`fleet --remote hq invite w/empty NAME`" in refused.stderr, (
        refused.stderr
    )
