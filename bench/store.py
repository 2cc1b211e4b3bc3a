"""Benchmark the store daemon: posts/s and long-poll wake latency. Prints figures; asserts nothing.

    python bench/store.py [--posts N] [--clients 8] [--wakes N]

1. Raw SQLite: one INSERT + COMMIT per row, in-process, with the store's PRAGMAs (WAL,
   synchronous=NORMAL): the baseline, measured in the same run.
2. ``Store.post`` in-process: the store layer alone (validation, event log, materialised tables).
3. Posts/s through the daemon with ``--clients`` concurrent keep-alive clients (a thread each, its own
   socket, TCP_NODELAY, each request built by hand and written in one ``send``), with the daemon
   in a subprocess (``python -m fleet daemon run``: the load generator's GIL is not the server's)
   and, for comparison, in this process.
4. Long-poll wake latency: a reader parked on ``GET …/blips?after=…&wait=30``; time from sending a
   post to the reader holding its answer (p50/p99 over ``--wakes`` samples), daemon in a subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TARGET_POSTS = 1000.0
TARGET_P50_MS = 5.0
TARGET_P99_MS = 25.0


# ---------------------------------------------------------------- a minimal keep-alive HTTP client


class Conn:
    """One keep-alive connection; each request is written with a single ``sendall``."""

    def __init__(self, url: str, token: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.host = host
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.token = token
        self.buf = b""

    def send(self, method: str, path: str, body: bytes = b"") -> None:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + body)

    def receive(self) -> tuple[int, bytes]:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        while len(rest) < length:
            self._fill()
            head, _, rest = self.buf.partition(b"\r\n\r\n")
        self.buf = rest[length:]
        return status, rest[:length]

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        self.buf += chunk

    def call(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        self.send(method, path, body)
        return self.receive()

    def close(self) -> None:
        self.sock.close()


# ---------------------------------------------------------------- daemons


@dataclass
class Running:
    url: str
    token: str
    stop: Callable[[], None]


def _raise_fd_limit() -> None:
    """500 parked readers hold a socket and a read connection each: lift the soft fd limit."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def subprocess_daemon(home: Path) -> Running:
    env = {**os.environ, "FLEET_HOME": str(home)}
    log = open(home.parent / f"{home.name}.log", "wb")  # noqa: SIM115 - closed in stop()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet", "daemon", "run", "--listen", "127.0.0.1:0"],
        env=env,
        preexec_fn=_raise_fd_limit,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    endpoint = home / "state" / "daemon.json"
    deadline = time.monotonic() + 30
    while True:
        try:
            ep = json.loads(endpoint.read_text())
            if ep["pid"] == proc.pid:
                break
        except (OSError, ValueError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the daemon did not start: see {log.name}")
        time.sleep(0.02)
    token = (home / "data" / "operator.token").read_text().strip()

    def stop() -> None:
        proc.terminate()
        proc.wait(15)
        log.close()

    return Running(ep["url"], token, stop)


def inprocess_daemon(home: Path) -> Running:
    from fleet.daemon import Daemon
    from fleet.paths import Paths

    d = Daemon(Paths(home / "data", home / "state", home / "config", home / "logs"), "127.0.0.1:0")
    d.start()
    return Running(d.url, d.operator_token, d.stop)


def new_wavelet(r: Running, name: str) -> str:
    c = Conn(r.url, r.token)
    status, body = c.call("POST", "/v1/waves", json.dumps({"name": name, "with": ["alice"]}).encode())
    assert status == 201, body
    c.close()
    return str(json.loads(body)["root_id"])


# ---------------------------------------------------------------- measurements


def raw_sqlite(n: int, tmp: Path) -> float:
    """Rows/s for one INSERT + COMMIT per row with the store's PRAGMAs."""
    from fleet.store import connect

    conn = connect(tmp / "raw.sqlite3")
    conn.execute(
        "CREATE TABLE t (id TEXT PRIMARY KEY, wavelet_id TEXT NOT NULL, author TEXT NOT NULL,"
        " text TEXT NOT NULL, created_at TEXT NOT NULL)"
    )
    t0 = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?,?,?,?,?)", (f"{i:012d}", "w", "alice", f"post {i}", "now"))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return n / elapsed


def store_posts(n: int, tmp: Path) -> float:
    """Posts/s through ``Store.post`` in-process, one thread: the store layer without HTTP."""
    from fleet.store import OPERATOR_PRINCIPAL, Store

    s = Store(tmp / "store.sqlite3")
    root = s.create_wave(OPERATOR_PRINCIPAL, "bench", ["alice"]).root_id
    t0 = time.perf_counter()
    for i in range(n):
        s.post(OPERATOR_PRINCIPAL, root, f"post {i}")
    elapsed = time.perf_counter() - t0
    s.close()
    return n / elapsed


def daemon_posts(r: Running, wavelet: str, clients: int, per_client: int) -> float:
    """Posts/s with ``clients`` concurrent keep-alive connections, ``per_client`` posts each."""
    conns = [Conn(r.url, r.token) for _ in range(clients)]
    path = f"/v1/wavelets/{wavelet}/blips"
    for c in conns:  # warm up: connect, authenticate, open the reader connection of each thread
        assert c.call("POST", path, b'{"text": "warm-up"}')[0] == 201
    barrier = threading.Barrier(clients + 1)
    failures: list[str] = []

    def run(c: Conn, k: int) -> None:
        barrier.wait()
        for i in range(per_client):
            status, body = c.call("POST", path, b'{"text": "client %d post %d"}' % (k, i))
            if status != 201:
                failures.append(f"{status} {body[:200]!r}")
                return

    threads = [threading.Thread(target=run, args=(c, k)) for k, c in enumerate(conns)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    if failures:
        raise SystemExit(f"posts failed: {failures[:3]}")
    return clients * per_client / elapsed


def wake_latencies(r: Running, wavelet: str, samples: int) -> list[float]:
    """Seconds from sending a post to the parked reader holding its answer."""
    reader, poster = Conn(r.url, r.token), Conn(r.url, r.token)
    status, body = poster.call("POST", f"/v1/wavelets/{wavelet}/blips", b'{"text": "start"}')
    cursor = json.loads(body)["id"]
    out = []
    for i in range(samples):
        reader.send("GET", f"/v1/wavelets/{wavelet}/blips?after={cursor}&wait=30")
        time.sleep(0.005)  # let the read park (not measured)
        t0 = time.perf_counter()
        poster.send("POST", f"/v1/wavelets/{wavelet}/blips", b'{"text": "wake %d"}' % i)
        status, body = reader.receive()
        out.append(time.perf_counter() - t0)
        assert status == 200, body
        page = json.loads(body)
        assert len(page["blips"]) == 1, page
        cursor = page["cursor"]
        assert poster.receive()[0] == 201
    reader.close()
    poster.close()
    return out


def with_parked(r: Running, k: int, clients: int, per_client: int) -> float:
    """Posts/s to one wave while ``k`` long-polls are parked on another wave's wavelet."""
    quiet = new_wavelet(r, f"quiet-{k}")
    parked = [Conn(r.url, r.token) for _ in range(k)]
    for c in parked:
        c.send("GET", f"/v1/wavelets/{quiet}/blips?after=ffffffff&wait=60")
    time.sleep(0.5 + k / 500)  # let them park (not measured)
    try:
        return daemon_posts(r, new_wavelet(r, f"loud-{k}"), clients, per_client)
    finally:
        for c in parked:
            c.close()


def row(label: str, value: str, note: str = "") -> None:
    print(f"{label:<64} {value:>18}  {note}".rstrip())


def ok(good: bool) -> str:
    return "ok" if good else "MISSED"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--posts", type=int, default=8000, help="posts per daemon run (split over clients)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--wakes", type=int, default=500, help="long-poll wake samples")
    ap.add_argument("--raw", type=int, default=20000, help="raw SQLite commits")
    ap.add_argument(
        "--parked", type=int, nargs="*", default=[0, 8, 64, 500], help="readers parked on another wave"
    )
    ap.add_argument("--parked-posts", type=int, default=4000, help="posts per parked-readers run")
    args = ap.parse_args()
    per_client = max(1, args.posts // args.clients)

    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmpdir:
        tmp = Path(tmpdir)
        print(
            f"fleet store benchmark — python {sys.version.split()[0]}, {os.cpu_count()} CPUs, sqlite "
            f"{sqlite3.sqlite_version}, data in {tmp}"
        )

        raw = raw_sqlite(args.raw, tmp)
        row("raw SQLite INSERT+COMMIT per row (WAL, synchronous=NORMAL)", f"{raw:,.0f} commits/s")
        layer = store_posts(min(args.raw, 5000), tmp)
        row("Store.post in-process, one thread (no HTTP)", f"{layer:,.0f} posts/s")

        sub = subprocess_daemon(tmp / "sub")
        rates: dict[int, float] = {}
        try:
            sub_rate = daemon_posts(sub, new_wavelet(sub, "posts"), args.clients, per_client)
            lat = wake_latencies(sub, new_wavelet(sub, "wakes"), args.wakes)
            for k in args.parked:
                rates[k] = with_parked(sub, k, args.clients, max(1, args.parked_posts // args.clients))
        finally:
            sub.stop()
        inp = inprocess_daemon(tmp / "inproc")
        try:
            inp_rate = daemon_posts(inp, new_wavelet(inp, "posts"), args.clients, per_client)
        finally:
            inp.stop()

        p50, p99 = pct(lat, 50) * 1000, pct(lat, 99) * 1000
        row(
            f"daemon in a subprocess, {args.clients} keep-alive clients",
            f"{sub_rate:,.0f} posts/s",
            f"target >= {TARGET_POSTS:,.0f}: {ok(sub_rate >= TARGET_POSTS)}",
        )
        row(f"daemon in this process, {args.clients} keep-alive clients", f"{inp_rate:,.0f} posts/s")
        row("ratio: raw SQLite commits / daemon posts (subprocess)", f"{raw / sub_rate:.1f} x")
        row(
            f"long-poll wake p50 (post sent -> reader answered, n={len(lat)})",
            f"{p50:.2f} ms",
            f"target <= {TARGET_P50_MS:g} ms: {ok(p50 <= TARGET_P50_MS)}",
        )
        row(
            "long-poll wake p99",
            f"{p99:.2f} ms",
            f"target <= {TARGET_P99_MS:g} ms: {ok(p99 <= TARGET_P99_MS)}",
        )
        row("long-poll wake max / mean", f"{max(lat) * 1000:.2f} / {statistics.fmean(lat) * 1000:.2f} ms")
        base = rates.get(0)
        for k, rate in rates.items():
            target = {64: 0.8, 500: 0.5}.get(k)
            note = f"{rate / base:.2f} x K=0" if base else ""
            if base and target:
                note += f", target >= {target:g} x: {ok(rate / base >= target)}"
            row(f"posts/s with K={k} readers parked on another wave", f"{rate:,.0f} posts/s", note)


if __name__ == "__main__":
    main()
