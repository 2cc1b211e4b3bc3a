"""Channel delivery latency and footprint: N channels on one wavelet, one poster, M blips.

Runs a real daemon (``fleet daemon run``) and N real ``fleet channel`` processes, each with its own
participant token, all on the wave's ``main``. A poster (another participant, over the typed client)
posts M blips at a steady rate. For every blip and every channel the latency is the time from the
post's acknowledgement (``post()`` returned) to the ``notifications/claude/channel`` line carrying that
blip id arriving on that channel's stdout. Prints p50/p90/p99/max, lost deliveries, and each
channel's resident memory (VmRSS, peak VmHWM) from /proc, and the CPU the run cost the channels and
the daemon (utime + stime from /proc before and after it), each divided by the deliveries: µs of CPU
per delivery in the channel and in the daemon separately (issue 28). Targets (issue 3): p50 <= 20 ms,
p99 <= 100 ms, RSS <= 40 MB per channel. It asserts nothing.

    python bench/delivery.py [--channels 20] [--blips 500] [--rate 50]   (--rate 0: a burst)
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

from fleet.client import Client

POSTER = "poster"


def start_daemon(home: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    log = open(home / "daemon.stderr", "wb")  # noqa: SIM115 - lives as long as the daemon
    env = dict(os.environ, FLEET_HOME=str(home))
    proc = subprocess.Popen([sys.executable, "-m", "fleet", "daemon", "run"], env=env, stderr=log)
    endpoint = home / "state" / "daemon.json"
    deadline = time.monotonic() + 20
    while not endpoint.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"the daemon did not start; see {home / 'daemon.stderr'}")
        time.sleep(0.02)
    url = json.loads(endpoint.read_text())["url"]
    token = (home / "data" / "operator.token").read_text().strip()
    return proc, url, token


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class Receiver(threading.Thread):
    """Reads every channel's stdout with one selector; records when each blip id arrived where."""

    def __init__(self, procs: list[subprocess.Popen[bytes]]) -> None:
        super().__init__(daemon=True)
        self.sel = selectors.DefaultSelector()
        for i, p in enumerate(procs):
            assert p.stdout is not None
            os.set_blocking(p.stdout.fileno(), False)
            self.sel.register(p.stdout, selectors.EVENT_READ, i)
        self.arrivals: list[dict[str, float]] = [{} for _ in procs]
        self.buffers = [b"" for _ in procs]
        self.stop = False

    def run(self) -> None:
        while not self.stop:
            for key, _ in self.sel.select(0.2):
                t = time.monotonic()
                i = key.data
                stream: IO[bytes] = key.fileobj  # type: ignore[assignment]
                chunk = stream.read(1 << 20) or b""
                if not chunk:
                    self.sel.unregister(stream)
                    continue
                data = self.buffers[i] + chunk
                *lines, self.buffers[i] = data.split(b"\n")
                for line in lines:
                    msg = json.loads(line)
                    if msg.get("method") == "notifications/claude/channel":
                        self.arrivals[i][msg["params"]["meta"].get("blip_id", "")] = t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--channels", type=int, default=20)
    ap.add_argument("--blips", type=int, default=500)
    ap.add_argument("--rate", type=float, default=50.0, help="posts per second (0: back to back)")
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    daemon, url, op_token = start_daemon(home)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        op = Client(url, op_token)
        names = [f"c{i:02d}" for i in range(args.channels)]
        op.create_wave("bench", with_=[POSTER, *names])
        main_id = op.resolve("bench/main").id
        poster = Client(url, op.mint_token("bench", POSTER).token)
        env = dict(os.environ, FLEET_HOME=str(home))
        for name in names:
            tf = home / f"{name}.token"
            tf.write_text(op.mint_token("bench", name).token)
            tf.chmod(0o600)
            argv = [sys.executable, "-m", "fleet", "channel", "--participant", name, "--wave", "bench"]
            argv += ["--daemon", url, "--token-file", str(tf), "--cap", "0"]
            err = open(home / f"{name}.stderr", "wb")  # noqa: SIM115
            procs.append(
                subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env)
            )
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        }
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(
                json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}).encode()
            )
            p.stdin.write(b'\n{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            p.stdin.flush()
        rx = Receiver(procs)
        rx.start()

        # every channel delivers (past its start-up grace) once a warm-up blip reached it (a system
        # blip alone is never pushed: it cannot serve as the signal)
        first = poster.post(main_id, "warm-up").id
        deadline = time.monotonic() + 60
        while not all(first in a for a in rx.arrivals):
            if time.monotonic() > deadline:
                raise SystemExit("channels did not start delivering within 60 s")
            time.sleep(0.05)
        idle_rss = [rss_kib(p.pid) for p in procs]

        cpu_before = [cpu_seconds(p.pid) for p in (daemon, *procs)]
        acks: dict[str, float] = {}
        interval = 1.0 / args.rate if args.rate > 0 else 0.0
        t_start = time.monotonic()
        for i in range(args.blips):
            due = t_start + i * interval
            if (pause := due - time.monotonic()) > 0:
                time.sleep(pause)
            blip = poster.post(main_id, f"bench blip {i}")
            acks[blip.id] = time.monotonic()
        posting = time.monotonic() - t_start

        deadline = time.monotonic() + 30
        while not all(all(b in a for b in acks) for a in rx.arrivals) and time.monotonic() < deadline:
            time.sleep(0.05)
        rx.stop = True
        busy_rss = [rss_kib(p.pid) for p in procs]
        cpu = [cpu_seconds(p.pid) - b for p, b in zip((daemon, *procs), cpu_before, strict=True)]

        lat = [(a[b] - t) * 1000 for a in rx.arrivals for b, t in acks.items() if b in a]
        lost = args.blips * args.channels - len(lat)
        print(
            f"channels {args.channels}, blips {args.blips} "
            f"{f'at {args.rate:g}/s' if args.rate > 0 else 'back to back'} (posting took {posting:.1f} s)"
        )
        print(f"deliveries measured {len(lat)}, missing {lost}")
        if lat:
            print(
                "latency ack->notification ms: "
                f"p50 {pct(lat, 50):.1f}  p90 {pct(lat, 90):.1f}  p99 {pct(lat, 99):.1f}  "
                f"max {max(lat):.1f}  mean {statistics.fmean(lat):.1f}   (targets p50 <= 20, p99 <= 100)"
            )
            print(f"  negative (notification before the poster saw its ack): {sum(1 for x in lat if x < 0)}")
        idle = statistics.median(r for r, _ in idle_rss) / 1024
        busy = statistics.median(r for r, _ in busy_rss) / 1024
        most = max(r for r, _ in busy_rss) / 1024
        peak = max(h for _, h in busy_rss) / 1024
        print(
            f"channel RSS MiB: idle median {idle:.1f}; after the run median {busy:.1f}, max {most:.1f}, "
            f"peak (VmHWM) max {peak:.1f}   (target <= 40)"
        )
        n = max(1, len(lat))
        print(
            f"CPU during the run (utime+stime from /proc before and after): daemon {cpu[0]:.2f} s, channels "
            f"{sum(cpu[1:]):.2f} s in all, over {posting:.1f} s of posting on {os.cpu_count()} CPUs"
        )
        print(
            f"CPU per delivery: channel {sum(cpu[1:]) / n * 1e6:.0f} µs, daemon {cpu[0] / n * 1e6:.0f} µs"
            f" ({cpu[0] / max(1, len(acks)) * 1e3:.2f} ms per post, {args.channels} deliveries each)"
        )
    finally:
        for p in procs:
            if p.stdin:
                p.stdin.close()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        daemon.terminate()
        daemon.wait(10)


if __name__ == "__main__":
    main()
