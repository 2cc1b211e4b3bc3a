"""A real Claude Code session (over the scripted model) carries on across a SIGKILL of the local daemon and
its auto-start, with nothing replayed."""

from __future__ import annotations

import os
import signal
from functools import partial
from pathlib import Path

import libtmux
from conftest import retry_until
from scripted_model import Script, on_message, post, rule, say
from test_daemon_restart import fleet

from fleet.client import Client, read_endpoint
from fleet.paths import Paths
from fleet.procs import pid_alive


def test_a_real_claude_session_carries_on_across_a_sigkill_and_an_auto_start_with_nothing_replayed(
    tmp_path: Path, fleet_env: Paths, tmux_server: libtmux.Server
) -> None:
    """One real Claude Code session (and a real partner) over the scripted model: the local daemon
    is killed with SIGKILL mid-conversation and started again by the next command; the sessions'
    own transcripts show every blip of the others entering once, none twice."""
    from realclaude import RealFleet
    from test_receipts_real import wait_each_once

    env = dict(os.environ)
    started = fleet(env, "daemon", "start")
    assert started.returncode == 0, started.stderr
    first = read_endpoint(fleet_env)
    assert first is not None
    op = Client(first.url, fleet_env.operator_token.read_text().strip())
    script = Script(
        {
            "alice": [rule(on_message(author="operator"), post("{wavelet}", "bob: noted {n}"))],
            "bob": [rule(on_message(author="alice"), say("ok"))],
        }
    )
    real = RealFleet(tmp_path, fleet_env, op, tmux_server, channels=True, script=script)
    try:
        op.create_wave("w", ["alice", "bob"])
        real.spawn("w/main", real.layout(["alice", "bob"]))
        main = op.resolve("w/main").id

        def round_trip(n: int) -> None:
            op.post(main, f"alice: step {n}")
            answered = partial(lambda n: sum(b.author == "alice" for b in real.blips("w/main")) >= n, n)
            real.wait(answered, f"alice's answer {n}")

        round_trip(1)
        os.kill(first.pid, signal.SIGKILL)
        retry_until(lambda: not pid_alive(first.pid), 10, 0.02, "the daemon to die")
        again = fleet({k: v for k, v in env.items() if k != "FLEET_DAEMON"}, "whoami")  # auto-starts it
        assert again.returncode == 0, again.stderr
        second = read_endpoint(fleet_env)
        assert second is not None and second.url == first.url and second.pid != first.pid
        round_trip(2)
        round_trip(3)
        for who in ("alice", "bob"):
            wait_each_once(real, who, [b.id for b in real.blips("w/main") if b.author != who], timeout=120)
    finally:
        real.close()
        fleet(env, "daemon", "stop")
