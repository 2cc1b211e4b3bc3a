"""Start-up of the short-lived processes: ``fleet post``, ``read``, ``tree``, and one channel.

Prints figures beside baselines measured in the same run; asserts nothing.

- CLI commands: wall time of ``python -m fleet post|read|tree`` against a real local daemon (the
  embedded one, started first), median of N runs, beside the baseline ``python -c "import typer,
  pydantic"`` measured the same way. Target: each ≤ 1.2× the baseline.
- ``fleet --version`` (no daemon, no command tree: it answers before the CLI is imported) and
  ``fleet post``, as the installed ``fleet`` script runs them, beside ``python -c pass``.
- A channel: ``python -m fleet channel`` started as Claude Code starts it, the MCP handshake done
  (initialize, initialized, tools/list); "ready" is the daemon seeing its first presence ping (what
  spawn waits for). Its RSS (``VmRSS``) and CPU seconds (utime + stime) at ready, and its RSS after
  it delivered 200 blips. Targets: ≤ 25 MiB, ≤ 0.15 CPU-s to ready. Baseline: ``python -c pass``.

Run: ``.venv/bin/python bench/cli.py [--runs 15]``.
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


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def proc_figures(pid: int) -> tuple[float, float]:
    """(RSS MiB, CPU seconds) of a live process, from /proc."""
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    return rss, cpu


def baseline_rss() -> float:
    p = subprocess.Popen([PY, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    time.sleep(0.3)
    rss, _ = proc_figures(p.pid)
    assert p.stdin is not None
    p.stdin.close()
    p.wait()
    return rss


def channel_figures(env: dict[str, str], wave: str, token_file: Path) -> dict[str, float]:
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
    rss_ready, cpu_ready = proc_figures(proc.pid)
    root = client.resolve(f"{wave}/main")
    n = 200
    for i in range(n):
        client.post(root.id, f"blip {i} for alice", as_="bob")
    got = 0
    while got < n:
        line = proc.stdout.readline()
        if b"notifications/claude/channel" in line:
            got += 1
    rss_after, cpu_after = proc_figures(proc.pid)
    proc.stdin.close()
    proc.wait(10)
    return {
        "rss_ready": rss_ready,
        "cpu_ready": cpu_ready,
        "rss_after": rss_after,
        "cpu_after": cpu_after,
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
            startup(env, args.runs)
            if args.startup:
                return
            base, base_min = wall([PY, "-c", "import typer, pydantic"], env, args.runs)
            print(f"baseline `python -c 'import typer, pydantic'`: median {ms(base)} (min {ms(base_min)})")
            for name, cmd in (
                ("post", ["post", "bench/main", "hello"]),
                ("read", ["read", "bench/main"]),
                ("tree", ["tree", "bench"]),
            ):
                med, low = wall([*fleet, *cmd], env, args.runs)
                ratio = med / base
                print(
                    f"fleet {name}: median {ms(med)} (min {ms(low)}) = {ratio:.2f}x the baseline"
                    " (target <= 1.2x)"
                )
            token = Path(tmp) / "alice.token"
            mint = [*fleet, "token", "mint", "bench", "alice", "--file", str(token)]
            subprocess.run(mint, env=env, check=True, capture_output=True)
            base_rss = baseline_rss()
            ch = channel_figures(env, "bench", token)
            print(f"baseline `python -c pass`: RSS {base_rss:.1f} MiB")
            print(f"channel at ready: RSS {ch['rss_ready']:.1f} MiB (target <= 25),"
                  f" CPU {ch['cpu_ready']:.2f} s (target <= 0.15)")  # fmt: skip
            print(f"channel after {ch['n']:.0f} blips delivered: RSS {ch['rss_after']:.1f} MiB,"
                  f" CPU {ch['cpu_after']:.2f} s")  # fmt: skip
        finally:
            subprocess.run([*fleet, "daemon", "stop"], env=env, capture_output=True)


if __name__ == "__main__":
    main()
