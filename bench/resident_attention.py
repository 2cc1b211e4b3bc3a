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
are spread out, and an upper bound when they overlap. It asserts nothing.

    python bench/resident_attention.py [--jobs 5] [--chatter 10] [--ask-every 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests")]


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
                for i in range(chatter):
                    op.post(job, f"part {n}: step {i + 1} of {chatter} compiled", as_=worker)
                if ask_every and n % ask_every == 0:
                    op.post(job, f"resident: part {n} needs a config, which one?", as_=worker)
                op.post(job, f"DONE: part {n} is built", as_=worker)
                last = op.surface(job, f"part {n} built", as_=worker).id
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5)
    ap.add_argument("--chatter", type=int, default=10, help="progress blips per job")
    ap.add_argument("--ask-every", type=int, default=2, help="a question to the resident every Nth job")
    a = ap.parse_args()
    print(f"{a.jobs} jobs, {a.chatter} progress blips each, a question every {a.ask_every} jobs")
    print(f"{'attention':12}{'notifications':>15}{'per job':>10}  kinds")
    for attention in ("full", "resident"):
        total, kinds = run(attention, a.jobs, a.chatter, a.ask_every)
        detail = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
        print(f"{attention:12}{total:>15}{total / a.jobs:>10.1f}  {detail}")


if __name__ == "__main__":
    main()
