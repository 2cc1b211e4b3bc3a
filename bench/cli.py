"""Start-up of the short-lived processes: every ``fleet`` command, and one channel.

Prints figures beside baselines measured in the same run; asserts nothing.

- CLI commands, as the installed ``fleet`` script runs them: ``--version``, ``--help``, every
  command's ``--help`` (each name of :data:`fleet.cli.COMMANDS`, ``paths`` and ``doctor``), and
  ``post``, ``read``, ``tree`` against a real local daemon (the embedded one, started first). For
  each: median wall time and median CPU (utime + stime of the child, from ``wait4``) over N runs,
  interleaved with the baselines ``python -c "import typer"`` (the target: each command ≤ 1.2× its
  wall time; the ratio of CPU is printed beside it, steadier on shared cores) and ``python -c pass``.
- A channel: ``python -m fleet channel`` started as Claude Code starts it, the MCP handshake done
  (initialize, initialized, tools/list); "ready" is the daemon seeing its first presence ping (what
  spawn waits for). Its RSS (``VmRSS``) and CPU at ready, median of several channels: CPU as
  ``/proc/PID/stat``'s utime + stime (clock ticks, each rounded down: it reads ~10 ms low) and as
  the sum of its threads' ``/proc/PID/task/*/schedstat`` run time (nanoseconds: the exact figure).
  Then its RSS and CPU after it delivered 200 blips. Targets (issue 28): ≤ 15 MiB, ≤ 60 ms to ready.
  Baseline: ``python -c pass``.
- The watch hook (``fleet watch --hook``, what Claude Code runs at every turn's end under
  ``--transport hook`` or ``auto``), as its generated command runs it, in the two ways it exits with
  nothing to deliver: a second arm while another holds the state file's lock (exit 0 at once), and
  an arm that finds nothing new within ``--wait 0.2``. Medians of CPU (utime + stime, from
  ``wait4``) and peak RSS (``ru_maxrss``, as GNU time's ``%M`` reports it: a child's own
  ``ru_maxrss`` starts at this bench's size, which it shared until its ``exec``), beside the same
  command run through the typer CLI (``fleet.cli.main``: how every hook started before its fast
  path), ``python -c "import typer"`` and ``python -c pass``, interleaved; without ``FLEET_HOME``,
  as in a user's session (the command names the daemon, the token and the state directory).

Run: ``.venv/bin/python bench/cli.py [--runs 15] [--channels 5] [--hook]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
TIME = "/usr/bin/time"
"""GNU time, for a child's peak RSS (``fleet watch --hook``)."""
TICK = os.sysconf("SC_CLK_TCK")


def wall(argv: list[str], env: dict[str, str], runs: int) -> tuple[float, float]:
    """(median, min) wall seconds of ``argv`` over ``runs`` runs (one warm-up run first)."""
    subprocess.run(argv, env=env, capture_output=True, check=True)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``argv``; CPU is the child's utime + stime."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"{' '.join(argv)} failed (wait status {status})")
    return took, usage.ru_utime + usage.ru_stime


def side_by_side(
    cases: dict[str, list[str]], env: dict[str, str], runs: int
) -> dict[str, tuple[float, float]]:
    """(median wall, median CPU) of each case; the runs interleave, so a load that comes and goes
    (2 cores shared) weighs on every case alike. One warm-up round first."""
    for argv in cases.values():
        timed(argv, env)
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            got[name].append(timed(argv, env))
    return {
        name: (statistics.median(w for w, _ in rows), statistics.median(c for _, c in rows))
        for name, rows in got.items()
    }


def commands(env: dict[str, str], runs: int) -> None:
    """Every command's ``--help``, ``--version``, and post/read/tree, beside ``import typer``."""
    from fleet.cli import COMMANDS

    script = str(Path(PY).parent / "fleet")
    cases: dict[str, list[str]] = {
        "python -c pass": [PY, "-c", "pass"],
        "python -c 'import typer'": [PY, "-c", "import typer"],
        "fleet --version": [script, "--version"],
        "fleet --help": [script, "--help"],
    }
    for name in [*COMMANDS, "paths", "doctor"]:
        if name != "channel":  # `fleet channel --help` is the channel's own parser: measured below
            cases[f"fleet {name} --help"] = [script, name, "--help"]
    cases["fleet post"] = [script, "post", "bench/main", "hello"]
    cases["fleet read"] = [script, "read", "bench/main"]
    cases["fleet tree"] = [script, "tree", "bench"]
    got = side_by_side(cases, env, runs)
    typer_wall, typer_cpu = got["python -c 'import typer'"]
    print(f"{'command':32} {'wall':>9} {'CPU':>9}  / import typer: wall (target <= 1.2x), CPU")
    over = []
    for name, (w, c) in got.items():
        ratio = w / typer_wall
        print(f"{name:32} {ms(w):>9} {ms(c):>9}  {ratio:.2f}x  {c / typer_cpu:.2f}x")
        if name.startswith("fleet") and ratio > 1.2:
            over.append(name)
    print(f"over 1.2x import typer (wall): {', '.join(over) if over else 'none'}")


def hooks(env: dict[str, str], daemon: str, token_file: Path, runs: int) -> None:
    """``fleet watch --hook`` exiting with nothing to deliver, beside the typer CLI running it."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from fleet.delivery.state import StateFile

    state_dir = Path(env["FLEET_HOME"]) / "hook-state"
    words = ["watch", "--hook", "--participant", "alice", "--wave", "bench", "--daemon", daemon,
             "--token-file", str(token_file), "--state-dir", str(state_dir)]  # fmt: skip
    fast = [PY, "-m", "fleet", *words]  # as hook_command writes it
    # as a session runs it: FLEET_HOME is this bench's (its daemon), not a user's, who sets none
    session = {k: v for k, v in env.items() if k != "FLEET_HOME"}
    typer = [PY, "-c", "from fleet.cli import main; main()", *words]
    run = subprocess.run([*fast, "--wait", "1"], env=env, stdin=subprocess.DEVNULL, capture_output=True)
    assert run.returncode in (0, 2), run.stderr  # past the history: an arm finds nothing new
    lock = StateFile(state_dir, daemon, "bench", "alice")
    peak = Path(env["FLEET_HOME"]) / "peak"
    cases = {
        "python -c pass": ([PY, "-c", "pass"], False),
        "python -c 'import typer'": ([PY, "-c", "import typer"], False),
        "hook, lock held, via typer": (typer, True),
        "hook, lock held": (fast, True),
        "hook, --wait 0.2, via typer": ([*typer, "--wait", "0.2"], False),
        "hook, --wait 0.2": ([*fast, "--wait", "0.2"], False),
    }
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for n in range(runs + 1):  # the first round warms up
        for name, (argv, held) in cases.items():
            if held:
                assert lock.acquire()
            quiet = subprocess.DEVNULL
            timed_argv = [TIME, "-f", "%M", "-o", str(peak), *argv]
            proc = subprocess.Popen(timed_argv, env=session, stdin=quiet, stdout=quiet, stderr=quiet)
            _, status, usage = os.wait4(proc.pid, 0)  # GNU time's own CPU is < 1 ms
            if held:
                lock.release()
            if status != 0:
                raise SystemExit(f"{name} exited with wait status {status}")
            if n:
                kib = int(peak.read_text().split()[-1])
                got[name].append((usage.ru_utime + usage.ru_stime, kib / 1024))
    print(f"{'watch hook, nothing to deliver':32} {'CPU':>9} {'peak RSS':>10}  (medians of {runs})")
    for name, rows in got.items():
        cpu, rss = statistics.median(c for c, _ in rows), statistics.median(r for _, r in rows)
        print(f"{name:32} {ms(cpu):>9} {rss:>6.1f} MiB")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def proc_figures(pid: int) -> tuple[float, float, float]:
    """(RSS MiB, CPU seconds as utime + stime, CPU seconds as its threads' schedstat) of a live
    process, from /proc. utime and stime are clock ticks, each rounded down; schedstat is exact."""
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    ran = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            ran += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return rss, cpu, ran / 1e9


def baseline_rss() -> float:
    p = subprocess.Popen([PY, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    time.sleep(0.3)
    rss, _, _ = proc_figures(p.pid)
    assert p.stdin is not None
    p.stdin.close()
    p.wait()
    return rss


def channel_figures(env: dict[str, str], wave: str, token_file: Path, n: int = 200) -> dict[str, float]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from fleet.client import connect

    client = connect(autostart=False)
    argv = [PY, "-m", "fleet", "channel", "--participant", "alice", "--wave", wave,
            "--token-file", str(token_file), "--cap", "0"]  # fmt: skip
    before = {p.participant: p.last_ping for p in client.presence(wave)}.get("alice")
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None

    def send(msg: dict[str, object]) -> None:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(msg) + "\n").encode())
        proc.stdin.flush()

    def answer() -> dict[str, object]:
        assert proc.stdout is not None
        while True:
            msg = json.loads(proc.stdout.readline())
            if "id" in msg:
                return msg  # type: ignore[no-any-return]

    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}}
    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
    answer()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    answer()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        now = {p.participant: p.last_ping for p in client.presence(wave)}.get("alice")
        if now is not None and now != before:
            break
        time.sleep(0.005)
    rss_ready, cpu_ready, ran_ready = proc_figures(proc.pid)
    root = client.resolve(f"{wave}/main")
    for i in range(n):
        client.post(root.id, f"blip {i} for alice", as_="bob")
    got = 0
    while got < n:
        line = proc.stdout.readline()
        if b"notifications/claude/channel" in line and b"for alice" in line:  # not the posts above
            got += 1
    rss_after, cpu_after, ran_after = proc_figures(proc.pid)
    proc.stdin.close()
    proc.wait(10)
    return {
        "rss_ready": rss_ready,
        "cpu_ready": cpu_ready,
        "ran_ready": ran_ready,
        "rss_after": rss_after,
        "cpu_after": cpu_after,
        "ran_after": ran_after,
        "n": n,
    }


def startup(env: dict[str, str], runs: int) -> None:
    """``fleet --version`` and ``fleet post`` through the installed ``fleet`` script (what a user
    types), beside ``python -c pass``: medians of ``runs``."""
    script = str(Path(PY).parent / "fleet")
    base, base_min = wall([PY, "-c", "pass"], env, runs)
    print(f"baseline `python -c pass`: median {ms(base)} (min {ms(base_min)})")
    version, version_min = wall([script, "--version"], env, runs)
    post, post_min = wall([script, "post", "bench/main", "hello"], env, runs)
    print(
        f"fleet --version: median {ms(version)} (min {ms(version_min)})"
        f" = {version / base:.2f}x python -c pass"
    )
    print(f"fleet post: median {ms(post)} (min {ms(post_min)}) = {post / base:.2f}x python -c pass")
    print(f"fleet --version / fleet post: {version / post:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--startup", action="store_true", help="Only `fleet --version` and `fleet post`.")
    ap.add_argument("--channels", type=int, default=5, help="Channels started one after another (medians).")
    ap.add_argument("--hook", action="store_true", help="Only the watch hook.")
    args = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    # measured as installed: byte-compiled (PYTHONDONTWRITEBYTECODE would make every run compile)
    subprocess.run([PY, "-m", "compileall", "-q", str(root / "fleet")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FLEET_HOME=tmp)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("FLEET_DAEMON", None)
        env.pop("FLEET_TOKEN", None)
        os.environ.update(FLEET_HOME=tmp)
        fleet = [PY, "-m", "fleet"]
        subprocess.run([*fleet, "daemon", "start"], env=env, check=True, capture_output=True)
        try:
            subprocess.run([*fleet, "wave", "new", "bench", "--with", "alice,bob"], env=env, check=True,
                           capture_output=True)  # fmt: skip
            if args.startup:
                startup(env, args.runs)
                return
            token = Path(tmp) / "alice.token"
            mint = [*fleet, "token", "mint", "bench", "alice", "--file", str(token)]
            subprocess.run(mint, env=env, check=True, capture_output=True)
            from fleet.client import connect

            daemon = connect(autostart=False).base_url
            if args.hook:
                hooks(env, daemon, token, args.runs)
                return
            commands(env, args.runs)
            hooks(env, daemon, token, args.runs)
            base_rss = baseline_rss()
            runs = [
                channel_figures(env, "bench", token, n=200 if i == 0 else 0) for i in range(args.channels)
            ]

            def med(key: str) -> float:
                return statistics.median(r[key] for r in runs)

            print(f"baseline `python -c pass`: RSS {base_rss:.1f} MiB")
            print(f"channel at ready (median of {len(runs)}): RSS {med('rss_ready'):.1f} MiB (target <= 15),"
                  f" CPU {ms(med('ran_ready'))} by schedstat, {ms(med('cpu_ready'))} by utime+stime"
                  " (target <= 60 ms)")  # fmt: skip
            first = runs[0]
            print(f"channel after {first['n']:.0f} blips delivered: RSS {first['rss_after']:.1f} MiB,"
                  f" CPU {ms(first['ran_after'])} by schedstat")  # fmt: skip
        finally:
            subprocess.run([*fleet, "daemon", "stop"], env=env, capture_output=True)


if __name__ == "__main__":
    main()
