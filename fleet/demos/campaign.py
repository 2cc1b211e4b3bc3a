"""``fleet demo campaign``: a three-wave plan carried out in waves of fresh stand-in sessions.

In a temporary git repository: ``fleet campaign plan PLAN.md --by-headings`` (one wave per ``##``
section), then ``fleet campaign run`` with a layout whose executor and verifier are fleet's
stand-in agent running :func:`act` (``--run``, ``--exit-after-run``): each session edits STATE.md
and the tree as the campaign protocol says and ends; the loop settles it by its pane's exit (the
Stop hook the loop installs is Claude Code's, which a stand-in does not run). The loop does the
rest: the initial verifier, the executor of each wave, a retry in a fresh session after the
deliberate failure of wave 1's first attempt (its NOTES.md written), a commit for every outcome;
then ``git log``, ``fleet campaign status`` and ``notes``.

``python -m fleet.demos.campaign act executor|verifier [--fail-first N]`` is the scripted session.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from fleet import errors
from fleet.campaign import disk
from fleet.cli import render
from fleet.demos import Guide, Sandbox, both

PLAN = """\
# Greeter

A tiny greeter, built in three waves.

## Scaffold
Create greeter.txt with a title line.

## Greeting
Add a greeting line to greeter.txt.

## Farewell
Add a farewell line to greeter.txt.
"""
LINES = ["# greeter", "hello, world", "goodbye, world"]
FAIL_FIRST = 1
"""The wave whose first attempt the demo's executor fails on purpose."""


# ---------------------------------------------------------------- the scripted session


def act(role: str, fail_first: int | None, *, wait: float = 60.0) -> int:
    """One session's work in the campaign of the current directory's repository. It waits until the
    loop has recorded it as the active session (``active_session_id``, the loop's own field, is its
    ``CLAUDE_CODE_SESSION_ID``): until then the loop is still starting it and owns STATE.md. Prints
    its set phrase last."""
    c = disk.find(disk.repo_root(Path.cwd()), None)
    me = os.environ.get("CLAUDE_CODE_SESSION_ID", "")
    deadline = time.monotonic() + wait
    s = c.read()
    while s.active_session_id != me:
        if time.monotonic() > deadline:
            print(f"the loop never recorded session {me} as active (it says {s.active_session_id})")
            return 1
        time.sleep(0.05)
        s = c.read()
    w = s.current_wave
    if role == "verifier":
        s.verify_count += 1  # the verifier's own count: a verifier that ends without it crashed
        c.write(s)
        print(f"checked {s.total_waves} waves against the repository: nothing to patch")
        print("PLAN OK")
        return 0
    attempt = s.retry_count + 1
    if w == fail_first and s.retry_count == 0:
        notes = c.notes(w)
        notes.parent.mkdir(parents=True, exist_ok=True)
        with notes.open("a", encoding="utf-8") as f:
            f.write(
                f"## Attempt {attempt} — failed (transient)\n**Session:** {me}\n**Commit:** -\n"
                f"**Date:** {disk.today()}\n**Decision on entry:** first attempt\n\n### What happened\n"
                "The demo's executor fails this attempt on purpose.\n\n### Recommendation\nRetry in a"
                " fresh session.\n\n---\n\n"
            )
        s.wave_status, s.failure_kind, s.retry_count = "failed", "transient", s.retry_count + 1
        s.row(w).set("Notes", "a deliberate failure (the demo's)")
        c.write(s)
        print("WAVE FAILED")
        return 0
    target = c.root / "greeter.txt"
    before = target.read_text(encoding="utf-8") if target.exists() else ""
    target.write_text(before + LINES[w % len(LINES)] + "\n", encoding="utf-8")
    s.wave_status, s.failure_kind = "complete", ""
    s.row(w).set("Notes", f"attempt {attempt}")
    c.write(s)
    print("WAVE COMPLETE")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fleet.demos.campaign")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("act", help="one scripted campaign session")
    a.add_argument("role", choices=["executor", "verifier"])
    a.add_argument("--fail-first", type=int, default=None, help="fail the first attempt of wave N")
    args = p.parse_args(argv)
    try:
        return act(args.role, args.fail_first)
    except errors.FleetError as exc:
        print(f"{args.role}: {exc.message}")
        return 1


# ---------------------------------------------------------------- the demo


def _layout(box: Sandbox) -> str:
    me = [sys.executable, "-m", "fleet.demos.campaign", "act"]
    participants = {
        "executor": shlex.join([*me, "executor", "--fail-first", str(FAIL_FIRST)]),
        "verifier": shlex.join([*me, "verifier"]),
    }
    text = 'description = "fleet demo campaign: scripted stand-in sessions"\n'
    text += '[defaults]\nagent = "fleet-standin"\n'
    for name, cmd in participants.items():
        text += f"[participants.{name}]\nargs = {json.dumps(['--run', cmd, '--exit-after-run'])}\n"
    path = box.dir / "campaign-layout.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _subjects(box: Sandbox, repo: Path) -> list[str]:
    return box.git(repo, "log", "--reverse", "--format=%s").splitlines()


def run(box: Sandbox, *, smoke: bool, pause: bool) -> int:
    g = Guide(box, smoke=smoke, pause=pause)
    patience = 30.0 if smoke else 60.0
    g.say(
        "fleet demo campaign: a plan carried out in waves of fresh sessions, with scripted stand-ins.",
        f"Everything runs in a private fleet in {box.dir} (tmux socket {box.socket}); it is removed at",
        "the end or on Ctrl-C (--keep leaves it running to explore).",
    )
    if smoke:
        render.out(f"sandbox {box.dir} tmux {box.socket}")
    g.step("A plan in a repository", "Three `##` sections: three waves.")
    repo = box.repo("greeter", {"PLAN.md": PLAN})
    g.say(*[f"   │ {ln}" for ln in PLAN.splitlines()])
    g.run("daemon", "start")

    g.step(
        "Decompose it",
        "--by-headings makes one wave per section with no model (a planner session can write it too).",
        "The campaign is files under .wave/: STATE.md (the cursor, the wave table), each wave's WAVE.md.",
    )
    g.run("campaign", "plan", "PLAN.md", "--by-headings", cwd=repo)
    c = disk.find(repo, None)

    g.step(
        "Arm the loop",
        "The loop spawns one fresh session at a time into the campaign's wave and handles each settle",
        "(its end). First a verifier checks the plan; then wave 0's executor, and so on.",
        f"The executor fails wave {FAIL_FIRST}'s first attempt on purpose: watch the retry.",
    )
    layout = _layout(box)
    log = box.background("loop", ["campaign", "run", "--layout", layout, "--wait", str(patience)], repo)
    g.say(f"$ fleet campaign run --layout {layout}      (in tmux window fleet-demo-helpers:loop)")
    shown: list[str] = []
    base = len(_subjects(box, repo))

    def commits() -> None:
        for subject in _subjects(box, repo)[base + len(shown) :]:
            shown.append(subject)
            g.say(f"  {'git commit':<14}│ {subject}")

    tick = both(g.tail(log, "loop"), commits)

    def committed(prefix: str) -> bool:
        return any(s.startswith(prefix) for s in shown)

    g.milestone("the verifier checked the plan (wave verify: …)", lambda: committed("wave verify:"),
                patience, tick=tick)  # fmt: skip
    g.milestone("wave 0's executor completed it", lambda: committed("wave 0: Scaffold"), patience, tick=tick)
    g.milestone(
        f"wave {FAIL_FIRST}'s first attempt failed and was committed",
        lambda: committed(f"wave {FAIL_FIRST} (failed)"),
        patience,
        tick=tick,
    )
    g.milestone(
        f"a fresh session retried wave {FAIL_FIRST} and completed it",
        lambda: committed(f"wave {FAIL_FIRST}: Greeting"),
        patience,
        tick=tick,
    )
    g.milestone(
        "wave 2 completed: the campaign is done",
        lambda: committed("wave 2: Farewell") and committed(f"campaign {c.id}: all waves complete"),
        patience,
        tick=tick,
    )

    g.step("What it left", "A commit for every outcome, the failure included:")
    out = box.git(repo, "log", "--reverse", "--format=%h %s")
    g.say("$ git log --reverse --oneline", *[f"  {ln}" for ln in out.splitlines()])
    g.say("$ cat greeter.txt", *[f"  {ln}" for ln in (repo / "greeter.txt").read_text().splitlines()])
    g.run("campaign", "status", cwd=repo)
    g.run("campaign", "notes", str(FAIL_FIRST), cwd=repo)
    view = json.loads(g.run("campaign", "status", "--json", cwd=repo, show=False))
    statuses = [r["status"] for r in view["rows"]]
    greeter = (repo / "greeter.txt").read_text(encoding="utf-8").splitlines()
    want = [
        "wave verify:",
        "wave 0: Scaffold",
        f"wave {FAIL_FIRST} (failed)",
        "wave 1: Greeting",
        "wave 2: Farewell",
        f"campaign {c.id}: all waves complete",  # its last bookkeeping
    ]
    got = [next((s for s in shown if s.startswith(w)), "") for w in want]
    if statuses != ["complete"] * 3 or greeter != LINES or "" in got:
        raise errors.FleetError(
            f"demo milestone not reached: the campaign's record (wave statuses {statuses}, greeter.txt"
            f" {greeter}, commits {shown})"
        )
    g.run("campaign", "stop", cwd=repo)
    g.say(
        "",
        "That was a campaign: the plan as files, one fresh session per wave, a verifier first, a failed",
        "attempt retried in a new session, and git holding every outcome. With --keep it stays up to",
        f"explore (the repository is {repo}); more in docs/campaigns.md.",
    )
    if smoke:
        render.out(f"demo campaign smoke: ok ({len(shown)} commits)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
