"""An idle wave under ``fleet supervise``: how many rounds (and how much CPU) the supervisor spends.

A real daemon (in this process, on 127.0.0.1:0), a real tmux server on an isolated socket, a git
repository whose wave ``w`` has its resident seated by ``fleet resident start``'s own code, the
mind being fleet's stand-in agent (it never turns), and ``heartbeat_every`` short. Nothing is in
flight, so the default ``heartbeat: in-flight`` never beats. The supervisor's loop
(:meth:`fleet.supervise.Supervisor.run`) runs for ``--seconds``. Counted: its rounds
(:meth:`Supervisor.step` calls) and this process's CPU seconds (the daemon answers in this
process too).

The baseline is the same run with the keeper's old deadline, which stays due (0 s) once the
heartbeat is due with nothing in flight, so the loop never waits. It asserts nothing.

    python bench/resident.py [--seconds 10] [--every 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests")]


def run(seconds: float, every: float, old_deadline: bool) -> tuple[int, float]:
    import libtmux

    from fleet.client import Client
    from fleet.daemon import Daemon
    from fleet.paths import get_paths
    from fleet.resident import seat
    from fleet.resident.keeper import Keeper
    from fleet.spawn import Spawner
    from fleet.supervise import Supervisor
    from fleet.tmux import Tmux

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        os.environ.update(FLEET_HOME=str(tmp / "fleet"), HOME=str(tmp), SHELL="/bin/sh")
        for var in ("FLEET_DAEMON", "FLEET_TOKEN", "FLEET_WAVE", "TMUX", "TMUX_PANE"):
            os.environ.pop(var, None)
        paths = get_paths()
        repo = tmp / "repo"
        (repo / "wave" / "w").mkdir(parents=True)
        (repo / "wave" / "w" / "GOAL.md").write_text(f"---\nheartbeat_every: {every}s\n---\nIdle.\n")
        commit = ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "--allow-empty", "-m", "i"]
        for args in (["init", "-q", "-b", "main"], commit):
            subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
        (tmp / "mind.toml").write_text('[defaults]\nagent = "fleet-standin"\n')
        conf = tmp / "tmux.conf"
        conf.write_text("set -g default-shell /bin/sh\n")
        srv = libtmux.Server(socket_name=f"fleet-bench-{uuid.uuid4().hex[:8]}", config_file=str(conf))
        daemon = Daemon(paths, listen="127.0.0.1:0")
        daemon.start()
        try:
            op = Client(daemon.url, daemon.operator_token)
            tmux = Tmux(srv)
            spawner = Spawner(op, tmux, paths, ready_timeout=30)
            seat.start(op, spawner, paths, "w", agent=str(tmp / "mind.toml"), cwd=repo)
            keeper = Keeper(op, tmux, paths, op.get_wave("w"))
            if old_deadline:
                keeper.next_due_in = lambda: max(  # type: ignore[method-assign]
                    0.0, keeper.quiet_since + keeper.goal.heartbeat_every - keeper.clock()
                )
            sup = Supervisor(op, tmux, spawner, "w", keeper=keeper)
            rounds = 0
            step = sup.step

            def counted(wait: float = 0.0) -> list[object]:
                nonlocal rounds
                rounds += 1
                return list(step(wait))

            sup.step = counted  # type: ignore[method-assign,assignment]
            stop = threading.Event()
            cpu0 = time.process_time()
            loop = threading.Thread(target=sup.run, args=(stop,), daemon=True)
            loop.start()
            time.sleep(seconds)  # the measured period: idle by design
            stop.set()
            loop.join(timeout=30)
            return rounds, time.process_time() - cpu0
        finally:
            daemon.stop()
            srv.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=1.0, help="heartbeat_every, seconds")
    a = ap.parse_args()
    base_rounds, base_cpu = run(a.seconds, a.every, old_deadline=True)
    rounds, cpu = run(a.seconds, a.every, old_deadline=False)
    print(f"idle wave, nothing in flight, {a.seconds:g} s, heartbeat_every {a.every:g} s")
    print(f"{'':28}{'rounds':>10}{'CPU s':>10}")
    print(f"{'baseline (deadline stays 0)':28}{base_rounds:>10}{base_cpu:>10.2f}")
    print(f"{'now (no deadline: held)':28}{rounds:>10}{cpu:>10.2f}")


if __name__ == "__main__":
    main()
