"""``fleet demo``: fleet's main job end to end, from a fresh install, with no daemon and no Claude.

It uses the local daemon (started if none runs), creates a wave ``demo`` (``demo-2``, … if taken),
forks a wavelet ``plan`` staffed by three scripted stand-in agents (layout ``demo``), spawns them
into tmux, prints the conversation as it happens until all three have posted ``DONE:`` (or the
timeout passes), and says how to attach. Exit 0 when all three finished.
"""

from __future__ import annotations

import time

from fleet import errors, layouts
from fleet.cli import render
from fleet.client import Client
from fleet.paths import Paths
from fleet.spawn import Spawner
from fleet.tmux import Tmux

AGENTS = ["alice", "bob", "carol"]


def _free_wave_name(client: Client) -> str:
    taken = {w.name for w in client.list_waves()}
    name, n = "demo", 2
    while name in taken:
        name, n = f"demo-{n}", n + 1
    return name


def run(client: Client, tmux: Tmux, paths: Paths, *, timeout: float = 60.0) -> int:
    layout = layouts.load("demo", paths)
    name = _free_wave_name(client)
    wave = client.create_wave(name)
    plan = client.fork(wave.root_id, "plan", AGENTS)
    render.out(f"created wave {name} and forked {plan.path} with {', '.join(AGENTS)}")
    report = Spawner(client, tmux, paths, ready_timeout=min(30.0, timeout)).spawn(plan.id, layout)
    render.spawn_report(report)
    if not report.all_ready:
        raise errors.FleetError("the demo agents did not start: see the reasons above")
    render.out("")
    done: set[str] = set()
    cursor = ""
    deadline = time.monotonic() + timeout
    while done != set(AGENTS) and time.monotonic() < deadline:
        page = client.read(
            plan.id, after=cursor or None, wait=min(5.0, max(0.1, deadline - time.monotonic()))
        )
        for blip in page.blips:
            render.out(render.blip_line(blip))
            if blip.text.startswith("DONE:"):
                done.add(blip.author)
        cursor = page.cursor
    render.out("")
    if done != set(AGENTS):
        missing = ", ".join(sorted(set(AGENTS) - done))
        raise errors.FleetError(f"{missing} did not finish within {timeout:g}s: `{report.attach}` to look")
    render.out(f"all three agents finished. Watch them: {render.command(report.attach)}")
    again, clean = render.command(f"fleet read {plan.path}"), render.command(f"fleet kill {name}")
    render.out(f"Read it again: {again}   Clean up: {clean}")
    return 0
