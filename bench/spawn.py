"""Spawn benchmark: an 8-participant wavelet of scripted agents, beside tmuxp in the same run.

Prints, over several rounds (medians and worst):
- fleet: seconds until every pane exists (8 panes, each launched into its agent), and until every
  channel has completed its MCP handshake and pinged the daemon (spawn returns);
- tmuxp: seconds to load an equivalent 8-pane workspace (one window, 8 panes, tiled, each running a
  command) on its own isolated tmux server;
- the ratio fleet-panes / tmuxp (target <= 1.0) and whether all 8 were ready within 3 s.

Run: ``python bench/spawn.py [--rounds N]``. Asserts nothing; real daemon, real tmux, real channels.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import libtmux
from tmuxp.workspace import loader
from tmuxp.workspace.builder import WorkspaceBuilder

from fleet import layouts
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.features import load as load_features
from fleet.paths import get_paths
from fleet.spawn import Spawner
from fleet.tmux import Tmux

load_features()  # as the CLI does: the layout's budgets and the permission hook at spawn

N = 8
CONF = "set -g default-shell /bin/sh\nset -g base-index 0\n"


def isolated_server(tmp: Path) -> libtmux.Server:
    conf = tmp / f"tmux-{uuid.uuid4().hex[:6]}.conf"
    conf.write_text(CONF)
    return libtmux.Server(socket_name=f"fleet-bench-{uuid.uuid4().hex[:8]}", config_file=str(conf))


class TimedSpawner(Spawner):
    """Records when the last pane was launched into its agent."""

    last_launch = 0.0

    def _launch(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        report = super()._launch(*args, **kwargs)
        self.last_launch = time.perf_counter()
        return report


def fleet_round(client: Client, tmp: Path, paths_layout: layouts.Layout, i: int) -> tuple[float, float, bool]:
    names = [f"a{k}" for k in range(N)]
    wave = client.create_wave(f"bench-{i}-{uuid.uuid4().hex[:6]}", names)
    srv = isolated_server(tmp)
    try:
        sp = TimedSpawner(client, Tmux(srv), get_paths(), agent="fleet-standin", ready_timeout=30)
        t0 = time.perf_counter()
        report = sp.spawn(wave.root_id, paths_layout)
        t_ready = time.perf_counter() - t0
        return sp.last_launch - t0, t_ready, report.all_ready
    finally:
        srv.kill()


def tmuxp_round(tmp: Path) -> float:
    srv = isolated_server(tmp)
    config = {
        "session_name": f"tmuxp-{uuid.uuid4().hex[:6]}",
        "windows": [
            {
                "window_name": "main",
                "layout": "tiled",
                "panes": [{"shell_command": [f"{sys.executable} -c 'import time; time.sleep(60)'"]}] * N,
            }
        ],
    }
    try:
        t0 = time.perf_counter()
        builder = WorkspaceBuilder(session_config=loader.expand(config), server=srv)
        builder.build()
        return time.perf_counter() - t0
    finally:
        srv.kill()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fleet-bench-spawn-"))
    os.environ["FLEET_HOME"] = str(tmp / "home")
    paths = get_paths()
    daemon = Daemon(paths)
    daemon.start()
    client = Client(daemon.url, daemon.operator_token)
    layout = layouts.load("trio", paths)  # tiled, like the tmuxp workspace
    panes, ready, oks, tmuxp = [], [], [], []
    try:
        for i in range(args.rounds):
            p, r, ok = fleet_round(client, tmp, layout, i)
            panes.append(p)
            ready.append(r)
            oks.append(ok)
            tmuxp.append(tmuxp_round(tmp))
    finally:
        daemon.stop()
    med = statistics.median
    print(f"spawn benchmark: {N} participants, {args.rounds} rounds (medians, worst in brackets)")
    print(f"  fleet: all panes exist     {med(panes):6.3f} s  [{max(panes):.3f}]")
    print(f"  fleet: all channels ready  {med(ready):6.3f} s  [{max(ready):.3f}]   target <= 3 s")
    print(f"  tmuxp: 8-pane workspace    {med(tmuxp):6.3f} s  [{max(tmuxp):.3f}]   (baseline, same run)")
    print(f"  ratio fleet panes / tmuxp  {med(panes) / med(tmuxp):6.2f}        target <= 1.0")
    print(f"  every round all ready: {all(oks)}; within 3 s: {sum(r <= 3 for r in ready)}/{len(ready)}")


if __name__ == "__main__":
    main()
