"""Worktrees and usage benchmark.

1. Spawn of 8 stand-in participants with ``worktree = "participant"`` beside the same spawn without
   worktrees, alternating, in one run, in a local clone of this repository: seconds until every
   pane exists (worktrees made, setup none, panes launched) and until every channel is ready; the
   difference is what worktrees add (target <= 0.5 s for 8).
2. Usage aggregation: the cost of one ``read_session`` call after one more turn is appended, for
   transcripts of increasing length, beside a full rescan of the same file in the same run (target:
   constant per turn read, independent of the transcript's length).

Run: ``python bench/worktrees.py [--rounds N]``. Asserts nothing; real daemon, real tmux, real git.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import libtmux

from fleet import layouts
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.features import load as load_features
from fleet.paths import get_paths
from fleet.spawn import Spawner
from fleet.tmux import Tmux
from fleet.usage import Counter, read_session

load_features()  # as the CLI does: the layout's budgets and the permission hook at spawn

N = 8
REPO = Path(__file__).resolve().parent.parent
CONF = "set -g default-shell /bin/sh\nset -g base-index 0\n"


def isolated_server(tmp: Path) -> libtmux.Server:
    conf = tmp / f"tmux-{uuid.uuid4().hex[:6]}.conf"
    conf.write_text(CONF)
    return libtmux.Server(socket_name=f"fleet-bench-{uuid.uuid4().hex[:8]}", config_file=str(conf))


class TimedSpawner(Spawner):
    last_launch = 0.0

    def _start(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super()._start(*args, **kwargs)  # every pane of the wavelet, in one tmux invocation
        self.last_launch = time.perf_counter()


def spawn_round(client: Client, tmp: Path, layout: layouts.Layout) -> tuple[float, float, bool]:
    names = [f"a{k}" for k in range(N)]
    wave = client.create_wave(f"b{uuid.uuid4().hex[:6]}", names)
    srv = isolated_server(tmp)
    try:
        sp = TimedSpawner(client, Tmux(srv), get_paths(), agent="fleet-standin", ready_timeout=30)
        t0 = time.perf_counter()
        report = sp.spawn(wave.root_id, layout)
        ready = time.perf_counter() - t0
        return sp.last_launch - t0, ready, report.all_ready
    finally:
        srv.kill()


def layout_for(repo: Path, worktree: str) -> layouts.Layout:
    text = f'arrangement = "tiled"\n[defaults]\ncwd = {json.dumps(str(repo))}\nworktree = "{worktree}"\n'
    return layouts.parse(text, f"bench-{worktree}", f"bench-{worktree}")


def bench_spawn(rounds: int, tmp: Path) -> None:
    repo = tmp / "repo"
    subprocess.run(["git", "clone", "-q", "--local", "--shared", str(REPO), str(repo)], check=True)
    paths = get_paths()
    daemon = Daemon(paths)
    daemon.start()
    client = Client(daemon.url, daemon.operator_token)
    plain, trees = layout_for(repo, "none"), layout_for(repo, "participant")
    got: dict[str, list[tuple[float, float, bool]]] = {"none": [], "participant": []}
    try:
        for _ in range(rounds):
            got["none"].append(spawn_round(client, tmp, plain))
            got["participant"].append(spawn_round(client, tmp, trees))
    finally:
        daemon.stop()
    med = statistics.median
    files = len(
        subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True).stdout.split()
    )
    print(f"spawn of {N} stand-ins, {rounds} rounds each, alternating (medians, worst in brackets);"
          f" repository: this one ({files} files)")  # fmt: skip
    for mode in ("none", "participant"):
        panes = [p for p, _r, _ok in got[mode]]
        ready = [r for _p, r, _ok in got[mode]]
        ok = all(o for _p, _r, o in got[mode])
        print(f"  worktree = {mode!r:<14} panes {med(panes):6.3f} s [{max(panes):.3f}]"
              f"  ready {med(ready):6.3f} s [{max(ready):.3f}]  all ready: {ok}")  # fmt: skip
    added = med([p for p, _r, _o in got["participant"]]) - med([p for p, _r, _o in got["none"]])
    print(f"  worktrees add {added:6.3f} s for {N} (panes exist)   target <= 0.5 s")


def turn(i: int) -> str:
    wake = {
        "type": "user",
        "isMeta": True,
        "origin": {"kind": "channel"},
        "message": {
            "role": "user",
            "content": f'<channel source="fleet" wavelet="w/main" wavelet_id="W" blip_id="b{i}" author="bob"'
            f' kind="message">\nturn {i}: {"x" * 400}\n</channel>',
        },
    }
    usage = {"input_tokens": 1000 + i, "output_tokens": 20, "cache_read_input_tokens": 500}
    lines = [wake]
    for part in range(2):  # one response written as two lines, as Claude Code does
        message = {
            "id": f"m{i}",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "y" * 300}],
        }
        lines.append({"type": "assistant", "message": {**message, "usage": usage}, "part": part})
    return "".join(json.dumps(x) + "\n" for x in lines)


def bench_usage(tmp: Path) -> None:
    paths = get_paths()
    folder = Path(os.environ["HOME"]) / ".claude" / "projects" / "-bench"
    folder.mkdir(parents=True, exist_ok=True)
    print("usage aggregation: one read_session after one more turn, beside a full rescan (medians of 50)")
    for length in (100, 1_000, 10_000, 50_000):
        sid = str(uuid.uuid4())
        path = folder / f"{sid}.jsonl"
        path.write_text("".join(turn(i) for i in range(length)))
        read_session(paths, sid)  # catch up once
        incremental = []
        for k in range(50):
            with open(path, "a") as f:
                f.write(turn(length + k))
            t0 = time.perf_counter()
            read_session(paths, sid)
            incremental.append(time.perf_counter() - t0)
        rescans = []
        for _ in range(3 if length >= 10_000 else 10):
            t0 = time.perf_counter()
            c = Counter()
            with open(path, "rb") as f:
                for raw in f:
                    c.take(json.loads(raw))
            rescans.append(time.perf_counter() - t0)
        size = path.stat().st_size / 1e6
        each, full = statistics.median(incremental) * 1e3, statistics.median(rescans) * 1e3
        print(f"  {length:>6} turns ({size:6.1f} MB): incremental {each:7.3f} ms/turn"
              f"   full rescan {full:9.1f} ms (baseline, same run)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fleet-bench-worktrees-"))
    os.environ["FLEET_HOME"] = str(tmp / "home")
    os.environ["HOME"] = str(tmp / "user")
    (tmp / "user").mkdir()
    bench_spawn(args.rounds, tmp)
    bench_usage(tmp)


if __name__ == "__main__":
    main()
