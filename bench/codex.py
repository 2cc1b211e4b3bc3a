"""A Codex agent's delivery, measured beside a Claude Code agent's in the same run.

Two real sessions against one scripted model (``tests/scripted_model``, both dialects): ``alice``, the
pinned Claude Code, in wave ``wa``; ``bob``, the pinned Codex CLI, in wave ``wb`` (one wave each, so
neither is woken by the other's blips). Each answers a note with a short text. Figures:

- **idle, post → context**: ``--idle`` blips each, every one posted once the session's last turn is
  over and ``--gap`` seconds passed; from just before the post to the first model request carrying
  the blip id (the scripted server stamps arrivals on the same monotonic clock): p50/p99/max;
- **wake request bytes**: the size of the request that carried the blip (Codex: the whole thread's
  ``input`` is sent again each request, the developer instructions included);
- **burst, lost / duplicated**: ``--burst`` blips posted ``--every`` seconds apart to the Codex
  session; lost = never in a request, duplicated = its id in more than one user message of the
  session's own rollout.

It asserts nothing.

    python bench/codex.py [--idle 10] [--burst 100] [--gap 0.5] [--every 0.05]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from realcodex import mixed_layout, pinned_codex, rollout_lines, user_texts  # noqa: E402
from realworld import real_world  # noqa: E402  (bench/realworld.py)
from scripted_model import Script, on_message, rule, say  # noqa: E402

from fleet.client import Client  # noqa: E402


@dataclass
class Figures:
    name: str
    context: list[float] = field(default_factory=list)
    request_bytes: list[int] = field(default_factory=list)
    lost: int = 0


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def idle_state(op: Client, wave: str, who: str) -> bool:
    row = next((p for p in op.presence(wave) if p.participant == who), None)
    return row is not None and row.agent is not None and row.agent.kind == "idle"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle", type=int, default=10, help="idle wakes per session")
    ap.add_argument("--burst", type=int, default=100, help="blips posted in a burst to the Codex session")
    ap.add_argument("--gap", type=float, default=0.5, help="idle: quiet seconds before each post")
    ap.add_argument("--every", type=float, default=0.05, help="burst: seconds between posts")
    args = ap.parse_args()
    codex = pinned_codex()
    script = Script({who: [rule(on_message(author="operator"), say("Noted."))] for who in ("alice", "bob")})
    with (
        tempfile.TemporaryDirectory(prefix="fleet-bench-codex-") as tmp,
        real_world(Path(tmp), channels=True, script=script) as real,
    ):
        op = real.op
        runs = {"alice": Figures("Claude Code (push)"), "bob": Figures("Codex (codex queue)")}
        waves = {"alice": "wa", "bob": "wb"}
        for who, wave in waves.items():
            op.create_wave(wave, [who])
            kind = "claude" if who == "alice" else "codex"
            real.spawn(
                f"{wave}/main",
                mixed_layout(real, codex, {who: kind}, name=wave, participants={who: {"cap": 0}}),
            )
        for who, wave in waves.items():
            main_id = op.resolve(f"{wave}/main").id
            fig = runs[who]
            for i in range(args.idle):
                real.wait(lambda: idle_state(op, wave, who), f"{who} idle", timeout=120)  # noqa: B023
                time.sleep(args.gap)
                t = time.monotonic()
                blip = op.post(main_id, f"note {i} for {who}").id
                req = real.model.wait_for(
                    lambda log: next((r for r in log if r.participant == who and r.contains(blip)), None),  # noqa: B023
                    timeout=120,
                    what=f"{who}'s wake {i}",
                )
                fig.context.append(req.at - t)
                fig.request_bytes.append(req.size)
        # the burst: Codex only (Claude Code's is bench/receipts.py's busy configuration)
        main_id = op.resolve("wb/main").id
        real.wait(lambda: idle_state(op, "wb", "bob"), "bob idle", timeout=120)
        posted = []
        for i in range(args.burst):
            posted.append(op.post(main_id, f"burst {i} for bob").id)
            time.sleep(args.every)

        def carried() -> set[str]:
            return {b for b in posted for r in real.requests("bob") if r.contains(b)}

        with contextlib.suppress(AssertionError):  # what never arrives is counted as lost
            real.wait(lambda: len(carried()) == len(posted), "every burst blip in a request", timeout=300)
        real.wait(lambda: idle_state(op, "wb", "bob"), "bob idle after the burst", timeout=120)
        seen = Counter(b for t in user_texts(rollout_lines(real, "bob", "wb")) for b in posted if b in t)
        lost = len(posted) - len(carried())
        duplicated = sum(1 for n in seen.values() if n > 1)
        wakes = len({r.seq for r in real.requests("bob") for b in posted if r.contains(b)})
    print(f"\ncodex: idle wakes, {args.idle} per session, one scripted model; times in ms")
    print(f"{'session':<22}{'ctx p50':>9}{'p99':>8}{'max':>8}{'σ':>7}{'wake bytes p50':>16}")
    for fig in runs.values():
        spread = statistics.pstdev(fig.context) if len(fig.context) > 1 else 0.0
        print(
            f"{fig.name:<22}{pct(fig.context, 0.5) * 1000:>9,.0f}{pct(fig.context, 0.99) * 1000:>8,.0f}"
            f"{max(fig.context, default=float('nan')) * 1000:>8,.0f}{spread * 1000:>7,.0f}"
            f"{pct([float(b) for b in fig.request_bytes], 0.5):>16,.0f}"
        )
    print(
        f"\nburst to Codex: {len(posted)} blips {args.every:g}s apart, in {wakes} model requests: "
        f"{lost} lost, {duplicated} duplicated (targets 0 and 0)"
    )


if __name__ == "__main__":
    main()
