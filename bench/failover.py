"""The failover gap a channel sees: daemons A and B on one store, a channel and a poster listing
[A, B], the daemon in service SIGKILLed, the other started on the store, again and again.

Runs real ``fleet daemon run`` processes (one SQLite store, one holder at a time: B starts once A is
dead, so the gap holds B's start) and one real ``fleet channel`` on ``A,B``; a poster (the typed
client, also on ``A,B``, with patience) posts a blip every ``--interval`` seconds. Each round kills
the daemon in service and starts the other. For each round it prints the gap the channel saw — the
last blip it was handed before the kill (from the dead daemon) to the first after (from the other)
— beside how long the new daemon took to answer ``/v1/health`` after the kill (its start, which
the clients cannot shorten) and the rest (the clients' own failover: noticing, backoff, the new
long-poll). Then medians and the worst, beside the usual time between two blips (the floor of any
gap), and the blips lost or handed twice (both should be 0). A second run does the same with the
other daemon already serving (two TCP relays in front of one daemon stand in for two daemons on
one PostgreSQL store: killing a relay drops every connection and refuses its port, as a SIGKILL
does): the clients' failover alone. It asserts nothing.

    python bench/failover.py [--rounds 5] [--interval 0.02] [--settle 1.0]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

from fleet.client import Client

POSTER, LISTENER = "poster", "listener"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemons:
    """A and B on one FLEET_HOME, each on a fixed port."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.ports = {"a": free_port(), "b": free_port()}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def url(self, which: str) -> str:
        return f"http://127.0.0.1:{self.ports[which]}"

    def start(self, which: str) -> float:
        """Start ``which``; the monotonic time it first answered ``/v1/health``."""
        log = open(self.home / f"daemon-{which}.log", "ab")  # noqa: SIM115 - lives as long as the daemon
        self.procs[which] = proc = subprocess.Popen(
            [sys.executable, "-m", "fleet", "daemon", "run", "--listen", f"127.0.0.1:{self.ports[which]}"],
            env=dict(os.environ, FLEET_HOME=str(self.home)),
            stdout=log,
            stderr=log,
        )
        probe = Client(self.url(which), "", retries=0, timeout=1)
        deadline = time.monotonic() + 30
        while True:
            try:
                if probe.health().pid == proc.pid:
                    return time.monotonic()
            except Exception:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"daemon {which} did not start; see {self.home}/daemon-{which}.log")
            time.sleep(0.005)

    def kill(self, which: str) -> float:
        self.procs[which].send_signal(signal.SIGKILL)
        self.procs[which].wait(10)
        return time.monotonic()

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)


class Relay:
    """A TCP relay to a daemon that serves on: listed first, it stands in for a daemon A in front
    of the same store as B, and :meth:`kill` drops it the way a SIGKILL drops a daemon (every
    connection closed, the port refusing). What a client sees when the other daemon is already up
    (several daemons on PostgreSQL): the clients' failover alone, no daemon start in it."""

    def __init__(self, port: int, listen: int = 0) -> None:
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", listen))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.socks += [conn, up]
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def kill(self) -> float:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept: the port is free at once
        self.listener.close()
        with self.lock:
            for s in self.socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
        return time.monotonic()


class Receiver(threading.Thread):
    """Reads the channel's stdout; records when each blip arrived (and how often)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        super().__init__(daemon=True)
        assert proc.stdout is not None
        self.stream: IO[bytes] = proc.stdout
        os.set_blocking(self.stream.fileno(), False)
        self.arrivals: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        self.stop = False

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.stream, selectors.EVENT_READ)
        buf = b""
        while not self.stop:
            for _ in sel.select(0.2):
                t = time.monotonic()
                chunk = self.stream.read(1 << 20) or b""
                if not chunk:
                    return
                *lines, buf = (buf + chunk).split(b"\n")
                for line in lines:
                    msg = json.loads(line)
                    if msg.get("method") == "notifications/claude/channel":
                        with self.lock:
                            self.arrivals.append((t, msg["params"]["meta"].get("blip_id", "")))


class Relays:
    """Two relays in front of one daemon (:class:`Relay`): the "daemons" A and B of ``--standby``.
    Killing one leaves the other serving; it comes back on its port for the next round."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.relays = {"a": Relay(port), "b": Relay(port)}
        self.ports = {k: int(r.url.rsplit(":", 1)[1]) for k, r in self.relays.items()}

    def url(self, which: str) -> str:
        return self.relays[which].url

    def kill(self, which: str) -> float:
        return self.relays[which].kill()

    def revive(self, which: str) -> None:
        self.relays[which] = Relay(self.port, self.ports[which])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--interval", type=float, default=0.02, help="seconds between posts")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds of delivery before each kill")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the transports' notes of each failover: counted, not shown
    for standby in (False, True):
        run(args, standby=standby)


def run(args: argparse.Namespace, *, standby: bool) -> None:
    home = Path(tempfile.mkdtemp(prefix="fleet-bench-failover-"))
    d = Daemons(home)
    d.start("a")
    relays = Relays(d.ports["a"]) if standby else None
    url = relays.url if relays is not None else d.url
    both = f"{url('a')},{url('b')}"
    channel: subprocess.Popen[bytes] | None = None
    stop = threading.Event()
    try:
        op_token = (home / "data" / "operator.token").read_text().strip()
        op = Client(d.url("a"), op_token)
        op.create_wave("bench", with_=[POSTER, LISTENER])
        main_id = op.resolve("bench/main").id
        poster = Client(both, op.mint_token("bench", POSTER).token, patience=60)
        tf = home / f"{LISTENER}.token"
        tf.write_text(op.mint_token("bench", LISTENER).token)
        tf.chmod(0o600)
        argv = [sys.executable, "-m", "fleet", "channel", "--participant", LISTENER, "--wave", "bench",
                "--daemon", both, "--token-file", str(tf), "--cap", "0"]  # fmt: skip
        err = open(home / "channel.stderr", "wb")  # noqa: SIM115
        channel = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=dict(os.environ, FLEET_HOME=str(home)),
        )
        assert channel.stdin is not None
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        }
        channel.stdin.write(
            json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}).encode()
        )
        channel.stdin.write(b'\n{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        channel.stdin.flush()
        rx = Receiver(channel)
        rx.start()
        first = poster.post(main_id, "warm-up").id
        deadline = time.monotonic() + 60
        while not any(b == first for _, b in rx.arrivals):
            if time.monotonic() > deadline:
                raise SystemExit("the channel did not start delivering within 60 s")
            time.sleep(0.02)

        posted: list[str] = [first]

        def post_forever() -> None:
            n = 0
            while not stop.is_set():
                posted.append(poster.post(main_id, f"blip {n}").id)
                n += 1
                time.sleep(args.interval)

        writer = threading.Thread(target=post_forever, daemon=True)
        writer.start()
        rows: list[tuple[float, float, float]] = []
        serving, other = "a", "b"
        what = (
            "--standby: the other daemon already serves (two relays in front of one daemon: as on PostgreSQL)"
            if standby
            else "the other daemon starts on the store once the first is dead (SQLite: one holder at a time)"
        )
        print(f"\n{what}")
        for r in range(args.rounds):
            time.sleep(args.settle)
            if relays is not None:
                killed = answered = relays.kill(serving)
            else:
                killed = d.kill(serving)
                answered = d.start(other)
            while True:
                with rx.lock:
                    after = [t for t, _ in rx.arrivals if t > killed]
                    before = [t for t, _ in rx.arrivals if t <= killed]
                if after:
                    break
                if time.monotonic() > answered + 30:
                    raise SystemExit(f"round {r}: the channel heard nothing within 30 s of the new daemon")
                time.sleep(0.005)
            if relays is not None:
                relays.revive(serving)
            gap = after[0] - before[-1]
            rows.append((gap, answered - killed, after[0] - answered))
            print(
                f"round {r + 1}: {serving.upper()} killed -> {other.upper()}: gap {gap * 1000:7.1f} ms"
                f" (new daemon answering after {(answered - killed) * 1000:6.1f} ms,"
                f" clients' failover {(after[0] - answered) * 1000:6.1f} ms)"
            )
            serving, other = other, serving
        time.sleep(args.settle)
        stop.set()
        writer.join(60)
        deadline = time.monotonic() + 30
        while True:
            with rx.lock:
                seen = [b for _, b in rx.arrivals]
            if set(posted) <= set(seen) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        with rx.lock:
            times = [t for t, _ in rx.arrivals]
        steps = sorted(b - a for a, b in itertools.pairwise(times))
        between = statistics.median(steps) if steps else 0.0
        """The usual time between two blips' arrivals (the post interval): a gap's floor."""
        lost = len(set(posted) - set(seen))
        twice = len(seen) - len(set(seen))
        gaps, starts, client = zip(*rows, strict=True)
        print(
            f"{args.rounds} failovers, {len(posted)} blips posted every {args.interval * 1000:g} ms:"
            f" gap median {statistics.median(gaps) * 1000:.1f} ms, max {max(gaps) * 1000:.1f} ms"
            f" (against {between * 1000:.1f} ms between blips without one);"
            f" of which the new daemon's start median {statistics.median(starts) * 1000:.1f} ms"
            f" and the clients' failover median {statistics.median(client) * 1000:.1f} ms"
            f" (max {max(client) * 1000:.1f} ms); lost {lost}, handed twice {twice}"
        )
    finally:
        stop.set()
        if channel is not None:
            channel.kill()
        d.stop()


if __name__ == "__main__":
    main()
