"""What of its workers' talk reaches the resident: notifications (wakes of an idle mind) per job.

A real daemon (in this process, on 127.0.0.1:0) and a real ``fleet channel`` for the participant
``resident`` of wave ``w``, run once with ``--attention full`` (what the resident had: every blip
of others pushed) and once with ``--attention resident`` (its default now). The workers are
stand-ins: this process posts as them, the way a dispatched worker talks. Each job: the resident
forks ``w/job-N`` with ``worker-N`` and posts its task; the worker posts ``--chatter`` progress
blips, asks the resident one question (every ``--ask-every``-th job), reports ``DONE: …`` in its
wavelet and surfaces the result to ``main``. Counted: the channel notifications the mind was sent,
and how many of them were about a job at all (the chatter, the question, the report, the surface).

A notification to an idle Claude Code is one wake, one model turn; pushes that arrive while a turn
runs are coalesced by Claude Code (docs/resident.md), so the count is the mind's turns when the jobs
are spread out, and an upper bound when they overlap. ``--real`` counts the turns themselves: the
mind is then a real Claude Code session (the pinned binary, ``fleet spawn`` into a scratch tmux
server, its model the scripted server of ``tests/scripted_model``, which ends every turn with a
short text), the blips are posted ``--rate`` a second, and counted are the mind's model requests
from the operator's first word on (every one a wake caused by the jobs). It asserts nothing.

    python bench/resident_attention.py [--jobs 5] [--chatter 10] [--ask-every 2] [--real [--rate 2]]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]


def run(attention: str, jobs: int, chatter: int, ask_every: int) -> tuple[int, dict[str, int]]:
    from mcphelp import RawMcp, channel_argv, minted_token_file

    from fleet.client import Client
    from fleet.daemon import Daemon
    from fleet.paths import get_paths

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        os.environ.update(FLEET_HOME=str(tmp / "fleet"), HOME=str(tmp))
        for var in ("FLEET_DAEMON", "FLEET_TOKEN", "FLEET_WAVE", "CLAUDECODE"):
            os.environ.pop(var, None)
        daemon = Daemon(get_paths(), listen="127.0.0.1:0")
        daemon.start()
        mind: RawMcp | None = None
        try:
            op = Client(daemon.url, daemon.operator_token)
            op.create_wave("w", with_=["resident"])
            main = op.resolve("w/main").id
            token = minted_token_file(op, "w", "resident", tmp)
            argv = channel_argv("resident", "w", daemon.url, token, "--attention", attention, "--cap", "0")
            mind = RawMcp(argv, stderr=tmp / "channel.stderr", who="resident")
            mind.handshake()
            last = ""
            for n in range(jobs):
                worker = f"worker-{n}"
                job = op.fork(main, f"job-{n}", with_=[worker], as_="resident").id
                op.post(job, f"{worker}: build part {n} and report DONE: when it is built", as_="resident")
                for kind, text in job_blips(n, chatter, ask_every):
                    if kind == "surface":
                        last = op.surface(job, text, as_=worker).id
                    else:
                        op.post(job, text, as_=worker)
            want = last
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # until the last surface has reached the mind
                if any(want in (m["meta"].get("blip_id", ""), m["meta"].get("blip_ids", "")) for m in
                       mind.channel_notes()):  # fmt: skip
                    break
                time.sleep(0.05)
            time.sleep(0.5)
            notes = mind.channel_notes()
            kinds: dict[str, int] = {}
            for m in notes:
                kinds[m["meta"]["kind"]] = kinds.get(m["meta"]["kind"], 0) + 1
            return len(notes), kinds
        finally:
            if mind is not None:
                mind.kill()
            daemon.stop()


def job_blips(n: int, chatter: int, ask_every: int) -> list[tuple[str, str]]:
    """Job ``n``'s blips after its task, in order: (kind, text); kind ``surface`` or ``message``."""
    out = [("message", f"part {n}: step {i + 1} of {chatter} compiled") for i in range(chatter)]
    if ask_every and n % ask_every == 0:
        out.append(("message", f"resident: part {n} needs a config, which one?"))
    return [*out, ("message", f"DONE: part {n} is built"), ("surface", f"part {n} built")]


def run_real(attention: str, jobs: int, chatter: int, ask_every: int, rate: float, root: Path) -> int:
    """The mind's model requests caused by the jobs, with a real Claude Code as the mind."""
    from realworld import real_world

    with real_world(root / attention, channels=True) as real:
        op = real.op
        op.create_wave("w", with_=["resident"])
        main = op.resolve("w/main").id
        real.spawn("w/main", real.layout(["resident"], defaults={"cap": 0, "attention": attention}))
        t = real.transcript("resident")
        hello = op.post(main, "resident: jobs start now").id
        real.wait(lambda: hello in {i for c in t.enqueued() for i in c.blip_ids} and t.settled(), "hello")
        before = len(real.model.requests("resident"))
        t0, sent = time.monotonic(), 0
        last = ""
        for n in range(jobs):
            worker = f"worker-{n}"
            job = op.fork(main, f"job-{n}", with_=[worker], as_="resident").id
            op.post(job, f"{worker}: build part {n} and report DONE: when it is built", as_="resident")
            for kind, text in job_blips(n, chatter, ask_every):
                sent += 1
                if (pause := t0 + sent / rate - time.monotonic()) > 0:
                    time.sleep(pause)
                if kind == "surface":
                    last = op.surface(job, text, as_=worker).id
                else:
                    op.post(job, text, as_=worker)
        real.wait(
            lambda: last in {i for c in t.enqueued() for i in c.blip_ids} and t.settled(),
            "the last surface answered",
            timeout=600,
        )
        return len(real.model.requests("resident")) - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5)
    ap.add_argument("--chatter", type=int, default=10, help="progress blips per job")
    ap.add_argument("--ask-every", type=int, default=2, help="a question to the resident every Nth job")
    ap.add_argument("--real", action="store_true", help="a real Claude Code as the mind: count its turns")
    ap.add_argument("--rate", type=float, default=2.0, help="--real: worker blips posted a second")
    a = ap.parse_args()
    print(f"{a.jobs} jobs, {a.chatter} progress blips each, a question every {a.ask_every} jobs")
    if a.real:
        print(f"a real Claude Code as the mind, worker blips at {a.rate:g}/s")
        print(f"{'attention':12}{'model turns':>15}{'per job':>10}")
        with tempfile.TemporaryDirectory() as tmp_s:
            for attention in ("full", "resident"):
                turns = run_real(attention, a.jobs, a.chatter, a.ask_every, a.rate, Path(tmp_s))
                print(f"{attention:12}{turns:>15}{turns / a.jobs:>10.1f}")
        return
    print(f"{'attention':12}{'notifications':>15}{'per job':>10}  kinds")
    for attention in ("full", "resident"):
        total, kinds = run(attention, a.jobs, a.chatter, a.ask_every)
        detail = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
        print(f"{attention:12}{total:>15}{total / a.jobs:>10.1f}  {detail}")


if __name__ == "__main__":
    main()
