"""Spawn benchmark: an 8-participant wavelet of scripted agents, beside one tmux command chain and
tmuxp in the same run.

Prints, over several rounds (medians and worst):
- fleet: seconds until every pane exists (8 panes, each launched into its agent), and until every
  channel has completed its MCP handshake and pinged the daemon (spawn returns);
- fleet: tmux commands (client invocations, counted in-process at libtmux's one runner,
  ``Server.cmd``) until the panes exist and for the whole spawn, and the screens read (capture-pane,
  alone or within an invocation);
- one chain: seconds for one tmux invocation that makes the same window (a new session, 7 splits,
  tiled after each, each pane running a command): the floor for building 8 panes;
- tmuxp: seconds to load an equivalent 8-pane workspace (one window, 8 panes, tiled, each running a
  command);
- the ratios fleet-panes / one chain (target <= 2.0) and / tmuxp, and whether all 8 were ready
  within 3 s. Each round has its own isolated tmux server, started by its first command.

Run: ``python bench/spawn.py [--rounds N]``. Asserts nothing; real daemon, real tmux, real channels.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
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


class CountingServer(libtmux.Server):
    """A tmux server whose every client invocation is counted (``Server.cmd`` is libtmux's one
    runner: ``is_alive`` and every fleet call go through it)."""

    calls: list[list[str]]

    def cmd(self, cmd: str, *args: object, target: str | int | None = None) -> libtmux.common.tmux_cmd:
        self.calls.append([cmd, *map(str, args)])
        return super().cmd(cmd, *args, target=target)


def counting_server(tmp: Path) -> CountingServer:
    conf = tmp / f"tmux-{uuid.uuid4().hex[:6]}.conf"
    conf.write_text(CONF)
    srv = CountingServer(socket_name=f"fleet-bench-{uuid.uuid4().hex[:8]}", config_file=str(conf))
    srv.calls = []
    return srv


class TimedSpawner(Spawner):
    """Records when the panes were launched into their agents, and how many tmux commands that took."""

    last_launch = 0.0
    built_with = 0

    def _start(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super()._start(*args, **kwargs)
        self.last_launch = time.perf_counter()
        srv = self.tmux.srv
        self.built_with = len(srv.calls) if isinstance(srv, CountingServer) else 0


def fleet_round(
    client: Client, tmp: Path, paths_layout: layouts.Layout, i: int
) -> tuple[float, float, bool, int, int, int]:
    """(seconds to panes, seconds to ready, all ready, tmux commands to panes, in all, captures)."""
    names = [f"a{k}" for k in range(N)]
    wave = client.create_wave(f"bench-{i}-{uuid.uuid4().hex[:6]}", names)
    srv = counting_server(tmp)
    try:
        sp = TimedSpawner(client, Tmux(srv), get_paths(), agent="fleet-standin", ready_timeout=30)
        t0 = time.perf_counter()
        report = sp.spawn(wave.root_id, paths_layout)
        t_ready = time.perf_counter() - t0
        calls = list(srv.calls)
        return (sp.last_launch - t0, t_ready, report.all_ready, sp.built_with, len(calls),
                sum(c.count("capture-pane") for c in calls))  # fmt: skip
    finally:
        srv.kill()


def chain_round(tmp: Path) -> float:
    """One tmux invocation building the 8-pane window (the floor fleet's build is measured against)."""
    conf = tmp / f"tmux-{uuid.uuid4().hex[:6]}.conf"
    conf.write_text(CONF)
    sock = f"fleet-bench-{uuid.uuid4().hex[:8]}"
    pane = [sys.executable, "-c", "import time; time.sleep(60)"]
    argv = ["new-session", "-d", "-P", "-F", "#{pane_id}", "-x", "220", "-y", "60", *pane]
    for _ in range(N - 1):
        argv += [";", "split-window", "-P", "-F", "#{pane_id}", *pane, ";", "select-layout", "tiled"]
    tmux = ["tmux", "-L", sock, "-f", str(conf)]
    try:
        t0 = time.perf_counter()
        out = subprocess.run([*tmux, *argv], capture_output=True, text=True, check=True).stdout
        took = time.perf_counter() - t0
        assert len(out.split()) == N, out
        return took
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, check=False)


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
    panes, ready, oks, tmuxp, chain = [], [], [], [], []
    built, total, captures = [], [], []
    try:
        for i in range(args.rounds):
            p, r, ok, b, t, c = fleet_round(client, tmp, layout, i)
            panes.append(p)
            ready.append(r)
            oks.append(ok)
            built.append(b)
            total.append(t)
            captures.append(c)
            chain.append(chain_round(tmp))
            tmuxp.append(tmuxp_round(tmp))
    finally:
        daemon.stop()
    med = statistics.median
    print(f"spawn benchmark: {N} participants, {args.rounds} rounds (medians, worst in brackets)")
    print(f"  fleet: all panes exist     {med(panes):6.3f} s  [{max(panes):.3f}]")
    print(f"  fleet: all channels ready  {med(ready):6.3f} s  [{max(ready):.3f}]   target <= 3 s")
    print(f"  one tmux command chain     {med(chain):6.3f} s  [{max(chain):.3f}]   (baseline, same run)")
    print(f"  tmuxp: 8-pane workspace    {med(tmuxp):6.3f} s  [{max(tmuxp):.3f}]   (baseline, same run)")
    print(f"  ratio fleet panes / chain  {med(panes) / med(chain):6.2f}        target <= 2.0")
    print(f"  ratio fleet panes / tmuxp  {med(panes) / med(tmuxp):6.2f}        target <= 1.0")
    print(f"  fleet tmux commands: to panes {med(built):g} [{max(built)}], whole spawn {med(total):g}"
          f" [{max(total)}]; screens read {med(captures):g} [{max(captures)}]   target <= 12")  # fmt: skip
    print(f"  every round all ready: {all(oks)}; within 3 s: {sum(r <= 3 for r in ready)}/{len(ready)}")


if __name__ == "__main__":
    main()
