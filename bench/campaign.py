"""Campaign loop benchmark: settle → next session spawned, and the CPU of an armed idle loop.

The loop runs as its own process (``--child``) over a real git repository and a 21-wave campaign
planned by headings; only the session launcher is stood in for (a ``sleep`` process plays the
pane, so the loop's pidfd watch is real; Claude Code's own start is not part of the figure). The
parent plays each session's end exactly as a real one ends: it edits STATE.md (wave complete),
commits, and reports the settle through the same function the Stop hook runs. Printed:

- settle → next spawn: seconds from the settle report to the loop's next launch (median, worst),
  beside the same run's baseline: one round trip to the loop's control socket (``ping``);
- idle CPU: CPU seconds the armed loop used over a quiet stretch with a session active, beside a
  ``sleep`` process over the same stretch. Target ≈ 0 (event-driven: nothing wakes it).

Run: ``python bench/campaign.py [--waves N] [--idle SECONDS]``. Asserts nothing.
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
from typing import Any

from fleet.campaign import disk
from fleet.campaign import loop as lp
from fleet.campaign import state as st


class StubLauncher(lp.Launcher):
    """Launches a ``sleep`` as the session's pane process; prints when it did."""

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def launch(
        self, c: disk.Campaign, s: st.State, kind: str, layout_ref: str, *, kickoff: str = ""
    ) -> lp.Started:
        sid = str(uuid.uuid4())
        self.procs[sid] = subprocess.Popen(["sleep", "1000"])
        print(f"LAUNCH {sid} {time.time():.6f} {s.current_wave}", flush=True)
        return lp.Started(sid, f"{kind}-s{s.session_count}", "", str(self.procs[sid].pid))

    def pane_pid(self, pane_id: str) -> int | None:
        return int(pane_id) if pane_id else None

    def end(self, o: lp.Owned) -> None:
        p = self.procs.pop(o.active_session_id or "", None)
        if p:
            p.kill()
            p.wait()

    def last_phrase(self, transcript: str | None, o: lp.Owned) -> str:
        return ""


def child(root: Path, cid: str) -> None:
    c = disk.Campaign(root, cid)
    loop = lp.Loop(c, StubLauncher())
    loop.start(arm=True)
    try:
        loop.run()
    finally:
        loop.close()


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--waves", type=int, default=21)
    ap.add_argument("--idle", type=float, default=5.0)
    ap.add_argument("--child", nargs=2, metavar=("ROOT", "ID"))
    args = ap.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1])
        return
    tmp = Path(tempfile.mkdtemp(prefix="fleet-bench-campaign-"))
    root = tmp / "repo"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "config", "user.email", "b@b")
    git(root, "config", "user.name", "bench")
    plan = "# Bench Campaign\n\n" + "".join(f"## Wave {n}\nwork\n\n" for n in range(args.waves))
    (root / "PLAN.md").write_text(plan)
    git(root, "add", ".")
    git(root, "commit", "-qm", "plan")
    c, s = disk.plan_by_headings(root, root / "PLAN.md", executor="executor", model="")
    s.verify_count = 1  # no initial verifier: every spawn is an executor
    c.write(s)
    git(root, "commit", "-qam", "seed")
    env = {**os.environ, "FLEET_HOME": str(tmp / "home")}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(root), c.id], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    latencies: list[float] = []
    idle_cpu = sleep_cpu = -1.0
    settled_at = 0.0
    try:
        while True:
            line = proc.stdout.readline()
            if not line:
                break
            _, sid, at, wave = line.split()
            if settled_at:
                latencies.append(float(at) - settled_at)
            if int(wave) == args.waves // 2 and idle_cpu < 0:  # a quiet stretch with a session active
                sleeper = subprocess.Popen(["sleep", str(args.idle + 1)])
                a, b = cpu_seconds(proc.pid), cpu_seconds(sleeper.pid)
                time.sleep(args.idle)
                idle_cpu, sleep_cpu = cpu_seconds(proc.pid) - a, cpu_seconds(sleeper.pid) - b
                sleeper.wait()
            # the session's end: STATE.md says complete, the work is committed, the hook reports
            cur = c.read()
            cur.current_wave += 1
            cur.wave_status = "all_complete" if cur.current_wave >= cur.total_waves else "pending"
            (root / f"w{wave}.txt").write_text(wave)
            c.write(cur)
            git(root, "add", "-A")
            git(root, "commit", "-qm", f"wave {wave}: work")
            settled_at = time.time()
            lp.report_settle(
                c.loop_dir, {"session_id": sid, "transcript_path": "", "hook_event_name": "Stop"}
            )
            if cur.wave_status == "all_complete":
                break
        pings = []
        for _ in range(20):
            t0 = time.perf_counter()
            lp.send(c, {"op": "ping"})
            pings.append(time.perf_counter() - t0)
    finally:
        proc.terminate()
        proc.wait(10)
    report(latencies, pings, idle_cpu, sleep_cpu, args.idle)


def report(latencies: list[float], pings: list[float], idle: float, sleep_cpu: float, span: float) -> None:
    def ms(x: float) -> str:
        return f"{x * 1000:.1f} ms"

    out: dict[str, Any] = {
        "settle → next spawn (median)": ms(statistics.median(latencies)),
        "settle → next spawn (worst)": ms(max(latencies)),
        "baseline: control socket round trip (median)": ms(statistics.median(pings)),
        f"armed idle loop CPU over {span:g}s": f"{idle:.3f} s",
        f"baseline: sleep CPU over {span:g}s": f"{sleep_cpu:.3f} s",
    }
    for k, v in out.items():
        print(f"{k:48} {v}")
    print(f"({len(latencies)} settles; target: ≤ 1 s plus Claude Code's start; idle ≈ 0)")


if __name__ == "__main__":
    main()
