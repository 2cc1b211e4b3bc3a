"""An idle wave under ``fleet supervise``: how many rounds (and how much CPU) the supervisor spends.

A real daemon (in this process, on 127.0.0.1:0), a real tmux server on an isolated socket, a git
repository whose wave ``w`` has its resident seated by ``fleet resident start``'s own code, the
mind being fleet's stand-in agent (it never turns), and ``heartbeat_every`` short. Nothing is in
flight, so the default ``heartbeat: in-flight`` never beats. The supervisor's loop
(:meth:`fleet.supervise.Supervisor.run`) runs for ``--seconds``. Counted: its rounds
(:meth:`Supervisor.step` calls) and this process's CPU seconds (the daemon answers in this
process too).

The baseline is the same run with the keeper's old deadline, which stays due (0 s) once the
heartbeat is due with nothing in flight, so the loop never waits.

The second run is a wave with ``--blips`` blips (10,000 by default: unrelated ones, and one worker
the resident forked, finished early on): idle, nothing in flight, ``heartbeat_every`` short, so each
round's look at the heartbeat asks for the worker fold. Its baseline is the old fold, which read
the wave's first 5,000 blips at every look; now the supervisor's own pages feed the fold. Printed:
CPU seconds per minute of this process (the supervisor and the daemon it asks). It asserts nothing.

    python bench/resident.py [--seconds 10] [--every 1] [--fold-seconds 60] [--blips 10000]
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
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests")]


def old_workers(client: Any, wave: Any, now: float | None = None) -> list[Any]:
    """The fold as it was: the wave's first 5,000 blips, read again at every look."""
    from fleet.resident import RESIDENT
    from fleet.resident.seat import Worker, _ts

    now = time.time() if now is None else now
    mine = [wl for wl in wave.wavelets if wl.created_by == RESIDENT and wl.id != wave.root_id]
    if not mine:
        return []
    blips = client.read_wave(wave.id, limit=5000).blips
    out = []
    for wl in mine:
        own = [b for b in blips if b.wavelet_id == wl.id and b.kind != "system"]
        surfaced = any(b.kind == "surface" and b.source_wavelet_id == wl.id for b in blips)
        done = surfaced or any(b.text.startswith("DONE:") and b.author != RESIDENT for b in own)
        last = own[-1] if own else None
        at = _ts(last.created_at if last else wl.created_at)
        out.append(
            Worker(
                wavelet=wl.path, status="done" if done else "running",
                last_blip=f"{last.author}: {last.text[:120]}" if last else "", age_seconds=max(0.0, now - at),
            )
        )  # fmt: skip
    return out


def run(
    seconds: float, every: float, old_deadline: bool, blips: int | None = None, old_fold: bool = False
) -> tuple[int, float, float]:
    """(rounds, CPU s, CPU s of the second half) of an idle supervisor for ``seconds``; ``blips``:
    fork a finished worker and post that many unrelated blips first (None: neither)."""
    import libtmux

    from fleet.client import Client
    from fleet.daemon import Daemon
    from fleet.features import load as load_features
    from fleet.paths import get_paths
    from fleet.resident import seat
    from fleet.resident.keeper import Keeper
    from fleet.spawn import Spawner

    load_features()  # as the CLI does
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
            if blips is not None:
                from fleet.store import OPERATOR_PRINCIPAL as OP

                wave = op.get_wave("w")
                job = op.fork(wave.root_id, "job", ["worker"], as_="resident")
                op.invite(wave.root_id, "bob")
                store = daemon.store
                assert store is not None
                store.post(OP, job.id, "DONE: the job", as_="worker")
                for i in range(blips):
                    store.post(OP, wave.root_id, f"unrelated {i}", as_="bob")
            keeper = Keeper(op, tmux, paths, op.get_wave("w"))
            if old_fold:
                keeper.workers = lambda wave, now=None: old_workers(op, wave, now)  # type: ignore[method-assign]
            if old_deadline:
                keeper.next_due_in = lambda: max(  # type: ignore[method-assign]
                    0.0, keeper.quiet_since + keeper.goal.heartbeat_every - keeper.clock()
                )
            sup = Supervisor(op, tmux, spawner, "w", watchers=[keeper])
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
            time.sleep(seconds / 2)  # the measured period: idle by design
            half = time.process_time()
            time.sleep(seconds / 2)
            stop.set()
            loop.join(timeout=30)
            end = time.process_time()
            return rounds, end - cpu0, end - half
        finally:
            daemon.stop()
            srv.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=1.0, help="heartbeat_every, seconds")
    ap.add_argument("--fold-seconds", type=float, default=60.0, help="the 10,000-blip runs, seconds each")
    ap.add_argument("--blips", type=int, default=10_000)
    a = ap.parse_args()
    runs = [
        ("baseline (re-read 5,000 each look)", run(a.fold_seconds, a.every, False, a.blips, old_fold=True)),
        ("now (fed the supervisor's pages)", run(a.fold_seconds, a.every, False, a.blips)),
        ("now, without the unrelated blips", run(a.fold_seconds, a.every, False, 0)),
    ]
    per = 60.0 / a.fold_seconds
    print(f"idle wave of {a.blips:,} blips, one finished worker, {a.fold_seconds:g} s each, CPU s a minute")
    print(f"{'':36}{'whole run':>10}{'2nd half':>10}")
    for label, (_r, cpu, late) in runs:
        print(f"{label:36}{cpu * per:>10.3f}{late * 2 * per:>10.3f}")
    print()
    base_rounds, base_cpu, _h = run(a.seconds, a.every, old_deadline=True)
    rounds, cpu, _h = run(a.seconds, a.every, old_deadline=False)
    print(f"idle wave, nothing in flight, {a.seconds:g} s, heartbeat_every {a.every:g} s")
    print(f"{'':28}{'rounds':>10}{'CPU s':>10}")
    print(f"{'baseline (deadline stays 0)':28}{base_rounds:>10}{base_cpu:>10.2f}")
    print(f"{'now (no deadline: held)':28}{rounds:>10}{cpu:>10.2f}")


if __name__ == "__main__":
    main()
