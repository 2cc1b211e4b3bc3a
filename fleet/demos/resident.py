"""``fleet demo resident``: a wave's resident, seated, dispatching a job to a worker, kept by its
supervisor (a cron, a heartbeat), and reporting the worker's ``DONE:`` to the operator.

The mind and the worker are fleet's stand-in agent (:mod:`fleet.standin`; ``--mind`` is its scripted
resident), so no model and no Claude Code are needed. The story, each step the real command:

1. a git repository with ``wave/demo/GOAL.md`` (a cron every minute, a 3 s in-flight heartbeat);
2. ``fleet resident start demo``: the seat claimed in the store, the mind in ``<repo>.demo``;
3. ``fleet supervise demo``: the keeper; its last look at the crons is set a minute back (the one
   thing the demo arranges), so the every-minute cron is due at once and the mind acknowledges it;
4. ``fleet post demo/main "resident: …"``: the mind forks ``demo/job-1`` and spawns a worker there;
5. quiet with a worker in flight: the keeper's heartbeat, typed into the mind's pane; the mind asks
   the worker how it goes; the worker answers and posts ``DONE:``; the mind reports to the operator;
6. ``fleet resident status demo``: the mind, its turns, the job done.
"""

from __future__ import annotations

import json
import shlex
import time

from fleet import errors
from fleet.cli import render
from fleet.demos import Guide, Sandbox, both
from fleet.models import Blip, Seat
from fleet.resident.keeper import write_state

WAVE = "demo"
GOAL = """\
---
heartbeat: in-flight
heartbeat_every: 3s
heartbeat_budget: 5
crons:
  - flow: standup
    schedule: "* * * * *"
---
Keep the demo project moving: take the operator's jobs, dispatch each to a worker, report back.
"""
MEMORY = "The parser goes in parse.py.\n"


def _layouts(box: Sandbox) -> tuple[str, str]:
    """The mind's layout and the workers' (files in the sandbox)."""
    folder = box.dir / "layouts"
    folder.mkdir()
    worker = folder / "worker.toml"
    worker.write_text(
        'description = "fleet demo resident: the worker, a scripted stand-in"\n'
        '[defaults]\nagent = "fleet-standin"\n[participants.worker]\nargs = '
        + json.dumps([
            "--opening", "resident: on it, writing the parser.",
            "--reply", "resident: nearly there: the parser is written, its tests pass.",
            "--done", "DONE: parse.py written and tested.",
        ])
        + "\n",
        encoding="utf-8",
    )  # fmt: skip
    mind = folder / "mind.toml"
    mind.write_text(
        'description = "fleet demo resident: the mind, a scripted stand-in"\n'
        '[defaults]\nagent = "fleet-standin"\n[participants.resident]\nargs = '
        + json.dumps(["--mind", str(worker), "--workers", "worker"])
        + "\n",
        encoding="utf-8",
    )
    return str(mind), str(worker)


def _said(blips: list[Blip], author: str, start: str) -> bool:
    return any(b.author == author and b.text.startswith(start) for b in blips)


def run(box: Sandbox, *, smoke: bool, pause: bool) -> int:
    g = Guide(box, smoke=smoke, pause=pause)
    seen: list[Blip] = []
    patience = 30.0 if smoke else 60.0

    def watch() -> None:
        seen.extend(g.blips(WAVE))

    g.say(
        "fleet demo resident: a wave's one long-lived mind, with scripted stand-ins (no model).",
        f"Everything runs in a private fleet in {box.dir} (tmux socket {box.socket}); it is removed at",
        "the end or on Ctrl-C (--keep leaves it running to explore).",
    )
    if smoke:
        render.out(f"sandbox {box.dir} tmux {box.socket}")
    g.step(
        "A project and its wave's goal",
        "The resident reads wave/<wave>/GOAL.md from the repository: its goal, and a frontmatter",
        "that schedules it (a cron every minute, a heartbeat after 3 s of quiet with work in flight).",
    )
    mind, _worker = _layouts(box)
    repo = box.repo("project", {f"wave/{WAVE}/GOAL.md": GOAL, f"wave/{WAVE}/MEMORY.md": MEMORY})
    g.say(*[f"   │ {ln}" for ln in GOAL.splitlines()])
    g.run("daemon", "start")

    g.step(
        "Seat the resident",
        "One mind per wave, recorded as a seat in the store. It runs in its own tmux window, in the",
        f"sibling worktree {repo.name}.{WAVE}, never in the main checkout.",
    )
    g.run("resident", "start", WAVE, "--agent", mind, "--wait", str(patience), cwd=repo)

    def seated() -> Seat | None:
        seat = box.client().seat(WAVE)
        return seat if seat is not None and seat.closed_at is None else None

    seat = g.milestone("the resident's seat is claimed in the store", seated, patience)
    g.say(f"   seat: session {seat.session_id}, pid {seat.pid}, cwd {seat.cwd}")
    g.run("resident", "status", WAVE, cwd=repo)
    g.say("   (state unknown: a stand-in keeps no transcript; a Claude Code mind reads idle or turning here)")
    watch()

    g.step(
        "Its supervisor: crons and heartbeats",
        "`fleet supervise` keeps the resident: it revives it when it dies and types the scheduler's",
        "lines into its pane. The demo sets the keeper's last look at the crons a minute back, so the",
        "every-minute cron is due now instead of at the next minute.",
    )
    wave = box.client().get_wave(WAVE)
    write_state(box.paths, wave.id, time.time() - 61)
    supervise_log = box.background("supervise", ["supervise", WAVE], repo)
    g.say(f"$ fleet supervise {WAVE}      (in tmux window fleet-demo-helpers:supervise)")
    ticks = both(g.tail(supervise_log, "supervise"), watch)
    g.milestone(
        "a cron fell due and the mind took it",
        lambda: _said(seen, "resident", "operator: cron due: standup"),
        patience,
        tick=ticks,
    )

    g.step(
        "A job for the resident",
        "The operator asks; the mind does not grind: it forks a wavelet for the job and spawns a",
        "worker there (wavelet_fork with `spawn`, the seated resident's power).",
    )
    ask = "resident: please write the parser (see MEMORY.md for where it goes)."
    g.run("post", f"{WAVE}/main", ask)
    g.milestone(
        f"the mind forked {WAVE}/job-1 and dispatched it to a worker",
        lambda: _said(seen, "resident", "operator: on it. I forked"),
        patience,
        tick=ticks,
    )
    g.milestone(
        "the worker started and took the job",
        lambda: _said(seen, "worker", "resident: on it"),
        patience,
        tick=ticks,
    )

    g.step(
        "Work in flight: the heartbeat",
        "The mind is idle and its worker runs: after 3 s of quiet the keeper types a heartbeat with",
        "the in-flight fold into the mind's pane; the mind checks on its worker, which reports DONE:.",
    )
    g.milestone(
        "the keeper sent a heartbeat with the job in flight",
        lambda: any(
            b.kind == "system" and b.text.startswith("resident: heartbeat") and "job-1: running" in b.text
            for b in seen
        ),
        patience,
        tick=ticks,
    )
    g.milestone("the worker reported DONE:", lambda: _said(seen, "worker", "DONE:"), patience, tick=ticks)
    g.milestone(
        "the worker's DONE: reached the mind, which told the operator",
        lambda: _said(seen, "resident", f"operator: {WAVE}/job-1 is done"),
        patience,
        tick=ticks,
    )

    g.step("What the resident looks like now", "The mind's state, its seat, the jobs it dispatched:")
    g.run("resident", "status", WAVE, cwd=repo)
    status = json.loads(g.run("resident", "status", WAVE, "--json", cwd=repo, show=False))
    jobs = {w["wavelet"]: w["status"] for w in status.get("workers", [])}
    if status.get("state") in ("none", "dead", "failed") or jobs.get(f"{WAVE}/job-1") != "done":
        raise errors.FleetError(
            f"demo milestone not reached: `fleet resident status {WAVE}` shows the job done (it says state"
            f" {status.get('state')!r}, workers {jobs})"
        )
    g.say(
        "",
        "That was the resident: one seat per wave, work dispatched to workers in forked wavelets, their",
        "DONE: reaching the mind, and a supervisor typing crons and heartbeats into its pane.",
        f"With --keep it stays up to explore (`fleet read {WAVE}/job-1`, `fleet attach {WAVE}`); more in"
        " docs/resident.md.",
    )
    if smoke:
        render.out(f"demo resident smoke: ok ({shlex.join(sorted(jobs))} done)")
    return 0
