"""What TLS costs a client of the daemon: pinned HTTPS against plain HTTP, same run, same machine.

One daemon per mode on 127.0.0.1 (the HTTPS one declared remote, ``tls=True``, with its self-made
certificate), each driven by the real :class:`fleet.client.Client`: the median time of a keep-alive
``whoami`` and of a post (blip written to SQLite), and of a fresh connection's first ``whoami``
(TCP + TLS handshake + pin check + request). It asserts nothing.

    python bench/tls.py [--n 300]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths


def median_ms(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def measure(root: Path, tls: bool, n: int) -> dict[str, float]:
    paths = Paths(root / "data", root / "state", root / "config", root / "logs")
    d = Daemon(paths, "127.0.0.1:0", tls=tls)
    d.start()
    try:
        url = f"{d.url}#sha256={d.fingerprint}" if tls else d.url
        c = Client(url, d.operator_token)
        wave = c.create_wave("bench")
        c.whoami()
        out = {
            "keep-alive whoami": median_ms(c.whoami, n),
            "keep-alive post": median_ms(lambda: c.post(wave.root_id, "a blip of the bench"), n),
        }

        def fresh() -> None:
            with Client(url, d.operator_token) as one:
                one.whoami()

        out["new connection + whoami"] = median_ms(fresh, max(n // 3, 10))
        c.close()
        return out
    finally:
        d.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain = measure(Path(tmp) / "plain", False, args.n)
        pinned = measure(Path(tmp) / "tls", True, args.n)
    print(f"{'median ms':28} {'plain http':>11} {'pinned https':>13}")
    for key in plain:
        print(f"{key:28} {plain[key]:11.3f} {pinned[key]:13.3f}")


if __name__ == "__main__":
    main()
