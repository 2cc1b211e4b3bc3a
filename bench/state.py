"""Agent state, measured: how soon ``fleet status`` says idle after a turn ends, and what tracking costs.

One real Claude Code session (the pinned binary, spawned by ``fleet spawn`` into a scratch tmux
server, its model the scripted server of ``tests/scripted_model``) takes ``--turns`` turns: the
operator posts a blip, the model answers after ``--turn`` seconds with a short text (no post, as a
turn that only reads or thinks). Figures, each beside its baseline from the same run:

- **turn end → status idle**: from the ``turn_duration`` line's own timestamp in the session's
  transcript (Claude Code's clock; same machine) to the first answer of the daemon's presence route
  (what ``fleet status`` shows, read every 20 ms) whose state is idle, p50/p99/max. **Baseline**:
  the old presence rule (``working`` from a delivery until a post or 600 s), evaluated on the same
  run's delivery reports (the daemon's ``last_delivery``): with no post, it said idle at
  ``last_delivery + 600 s``.
- **CPU per turn** of state tracking, per agent (in this process, on the session's files): the
  fold of the session's transcript (its whole transcript re-folded, per turn), the state thread's
  looks at files that did not grow (4 a second during a turn and for 5 s after a push, times the
  turn's length plus the idle gap; once a second while idle), and the
  state hook (``sh`` + ``cat``: CPU of the child processes, per invocation, times the events per
  turn this run's hook file holds).
  **Baseline**: a hook that runs the ``fleet`` CLI instead (``python -m fleet --version``: its
  start-up alone). The whole channel process's CPU per turn (MCP, HTTP, delivery, receipts, state)
  is printed too, and its CPU a second while nothing happens (``--idle``: delivery's long-poll,
  the pings, the state thread's looks, once a second once the last push is 5 s old).

It asserts nothing.

    python bench/state.py [--turns 30] [--turn 1.0] [--gap 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from delivery import cpu_seconds, pct  # noqa: E402  (bench/delivery.py)
from realworld import real_world  # noqa: E402  (bench/realworld.py)
from receipts import channel_pid  # noqa: E402  (bench/receipts.py)
from scripted_model import Script, Slow, on_message, rule, say  # noqa: E402

from fleet.agentstate import Fold, HookLog, hook_command, hook_file  # noqa: E402
from fleet.channel.server import STATE_POLL  # noqa: E402
from fleet.delivery.receipts import Transcript  # noqa: E402

OLD_WORKING_TTL = 600.0
"""The old PresenceBook's ``working_ttl`` (seconds)."""


def stamp(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def child_cpu(argv: list[str], n: int, stdin: bytes = b"") -> float:
    """CPU seconds (user + system) per run of ``argv``, over ``n`` runs (children's rusage)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / n


def ms(x: float) -> str:
    return f"{x * 1000:,.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--turn", type=float, default=1.0, help="seconds the model takes per turn")
    ap.add_argument(
        "--gap", type=float, default=0.5, help="seconds idle after each turn before the next blip"
    )
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of an idle channel measured at the end")
    args = ap.parse_args()
    script = Script({"alice": [rule(on_message(author="operator"), Slow(args.turn, say("Noted.")))]})
    root = Path(tempfile.mkdtemp(prefix="fleet-bench-state-"))
    with real_world(root / "w", channels=True, script=script) as real:
        op = real.op
        op.create_wave("w", ["alice"])
        main_id = op.resolve("w/main").id
        real.spawn("w/main", real.layout(["alice"], defaults={"cap": 0}))
        transcript = real.transcript("alice")

        def agent_kind() -> str:
            (row,) = [p for p in op.presence("w") if p.participant == "alice"]
            return row.agent.kind if row.agent else "none"

        def ends() -> list[float]:
            return [stamp(x["timestamp"]) for x in transcript.lines() if x.get("subtype") == "turn_duration"]

        real.wait(lambda: agent_kind() == "idle", "alice idle at her prompt", timeout=60)
        pid = channel_pid(root / "w")
        cpu0 = cpu_seconds(pid) if pid else float("nan")
        new, old = [], []
        for i in range(args.turns):
            before = len(ends())
            op.post(main_id, f"alice: turn {i}")
            real.wait(lambda: agent_kind() == "turning", "turning", timeout=60)
            while True:  # the daemon's answer, every 20 ms, until idle
                if agent_kind() == "idle":
                    seen = time.time()
                    break
                time.sleep(0.02)
            real.wait(lambda n=before: len(ends()) > n, "the turn's end in the transcript")  # type: ignore[misc]
            end = ends()[-1]
            new.append(seen - end)
            (row,) = [p for p in op.presence("w") if p.participant == "alice"]
            if row.last_delivery is not None:  # the old rule: idle at the delivery + 600 s (no post)
                old.append(row.last_delivery + OLD_WORKING_TTL - end)
            time.sleep(args.gap)
        channel_cpu = (cpu_seconds(pid) - cpu0) / args.turns if pid else float("nan")
        idle0, t0 = (cpu_seconds(pid) if pid else 0.0), time.monotonic()
        time.sleep(args.idle)  # nothing happens: the state thread's looks (and the pings) only
        idle_cpu = ((cpu_seconds(pid) - idle0) / (time.monotonic() - t0)) if pid else float("nan")
        session = real.session_id("alice")
        path = transcript.path
        lines = transcript.lines()
        hooks = hook_file(real.paths.channels, session)
        hook_events = len(HookLog(hooks).read())

    # the fold: the whole transcript again, per turn
    fold = Fold()
    t0 = time.process_time()
    Transcript(session, path=path, observer=lambda line: fold.take(line, 0.0)).read()
    fold_cpu = (time.process_time() - t0) / max(1, fold.turns)
    # a look at files that did not grow
    reader = Transcript(session, path=path)
    reader.read()
    log = HookLog(hooks)
    log.read()
    n = 20_000
    t0 = time.process_time()
    for _ in range(n):
        reader.read()
        log.read()
    look_cpu = (time.process_time() - t0) / n
    looks = (args.turn + args.gap) / STATE_POLL
    # the hook, and the baseline of a fleet CLI hook
    scratch = root / "hook.jsonl"
    event = json.dumps({"hook_event_name": "Notification", "notification_type": "permission_prompt"}).encode()
    hook_cpu = child_cpu(["sh", "-c", hook_command(scratch)], 50, event)
    cli_cpu = child_cpu([sys.executable, "-m", "fleet", "--version"], 5)
    per_turn_hooks = hook_events / args.turns

    print(
        f"agent state: one real Claude Code session, {args.turns} turns of {args.turn:g}s, {len(lines)} lines"
    )
    print(f"{'':34}{'p50':>10}{'p99':>10}{'max':>10}")
    print(f"{'turn end -> status idle (s)':34}{pct(new, 50):>10.3f}{pct(new, 99):>10.3f}{max(new):>10.3f}")
    if old:
        base = "  baseline: the old 600 s rule"
        print(f"{base:34}{pct(old, 50):>10.1f}{pct(old, 99):>10.1f}{max(old):>10.1f}")
    total = fold_cpu + look_cpu * looks + hook_cpu * per_turn_hooks
    print(
        f"CPU per turn of state tracking: {ms(total)} ms "
        f"(fold {ms(fold_cpu)} + {looks:.0f} looks x {look_cpu * 1e6:.0f} us + "
        f"{per_turn_hooks:.2f} hook events x {ms(hook_cpu)} ms)"
    )
    print(f"  the state hook per event: {ms(hook_cpu)} ms CPU; baseline, a fleet CLI hook: {ms(cli_cpu)} ms")
    print(
        f"  the whole channel process per turn: {ms(channel_cpu)} ms CPU"
        f" (idle: {ms(idle_cpu)} ms CPU a second, pings and looks included)"
    )
    os.environ.pop("FLEET_HOME", None)


if __name__ == "__main__":
    main()
