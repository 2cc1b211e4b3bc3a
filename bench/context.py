"""Benchmark context assembly: bytes and time against fork depth and history, with and without
rolling summaries, in one run. Prints figures; asserts nothing.

    python bench/context.py [--depths 1,10,50] [--histories 1000,10000,100000] [--tail 20] [--lags 0,5]
                            [--runs 20]

For each (depth D, history H): a wave whose chain of D wavelets (the root, then each forked from the
one before) holds H blips spread evenly over the chain, each level with one ``DONE:`` blip (load-
bearing) among chatter, and a live tail of ``--tail`` blips in the deepest wavelet. Blips are
written through the store's own event path (``BlipPosted`` recorded and applied, one transaction per
level); forks through ``Store.fork``. Then the deepest wavelet's context (``Store.context``, the first
page of 500 entries, as ``GET …/context`` serves it) is timed, median of ``--runs``:

- **full walk**: no summary anywhere (the baseline, same run, same store);
- **summaries**: each level's extractive summary (fleet's default writer, checked by the store) was
  written before the next fork, with ``lag`` blips after it before the fork point (how far a
  summary trails the fork: those blips are live tail too, in full).

The sizes are the whole assembled context's text bytes (``Context.bytes``; ``full_bytes`` is the
full walk's). Target: with summaries, ≤ 5 ms at depth 50 over 100k blips, and a size that grows
with the live tail, not with the history.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from fleet.store import OPERATOR_PRINCIPAL as OP
from fleet.store import Store
from fleet.store.events import BlipPosted, record
from fleet.store.schema import now
from fleet.summaries import extractive

TARGET_MS = 5.0
CHATTER = "working on the parser; tried the table approach, the numbers look about the same as before."


def fill(store: Store, wavelet_id: str, n: int, level: int) -> None:
    """``n`` blips into the wavelet through the store's event path, one transaction; one is a DONE."""
    wl = store.access.wavelet(OP, wavelet_id)
    with store._db.write() as conn:
        at = now()
        for i in range(n):
            text = f"DONE: level {level} settled" if i == n // 2 else f"{CHATTER} ({level}.{i})"
            blip = store._new_blip(wl, "alice" if i % 2 else "bob", "message", text, at)
            record(conn, BlipPosted(blip=blip))


def summarize(store: Store, wavelet_id: str) -> None:
    """Roll the wavelet's extractive summary forward until it covers every blip (2,000 at a time)."""
    while (proposal := extractive(store.summaries.pending(OP, wavelet_id))) is not None:
        verdict = store.summaries.summarize(OP, wavelet_id, proposal)
        assert verdict.accepted, verdict


def build(path: Path, depth: int, history: int, tail: int, lag: int | None) -> tuple[Store, str]:
    """The chain; ``lag`` None: no summaries, else each level summarized ``lag`` blips before its fork."""
    store = Store(path)
    store.create_wave(OP, "bench", ["alice", "bob"])
    current = store.resolve(OP, "bench/main").id
    per_level = max(1, history // depth)
    for level in range(depth):
        fill(store, current, per_level, level)
        if lag is not None:
            summarize(store, current)
            if lag:
                fill(store, current, lag, level)
        if level < depth - 1:
            current = store.fork(OP, current, f"l{level + 1}", ["alice", "bob"]).id
    fill(store, current, tail, depth)
    return store, current


def timed(store: Store, leaf: str, runs: int) -> tuple[float, int, int, int]:
    samples = []
    ctx = store.context(OP, leaf)
    for _ in range(runs):
        t0 = time.perf_counter()
        ctx = store.context(OP, leaf)
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples), ctx.bytes, ctx.full_bytes, len(ctx.blips) + len(ctx.summaries)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depths", default="1,10,50")
    ap.add_argument("--histories", default="1000,10000,100000")
    ap.add_argument("--tail", type=int, default=20)
    ap.add_argument("--lags", default="0,5")
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    depths = [int(x) for x in a.depths.split(",")]
    histories = [int(x) for x in a.histories.split(",")]
    lags = [int(x) for x in a.lags.split(",")]
    print(f"live tail {a.tail} blips in the deepest wavelet; page 500 entries; median of {a.runs}")
    print(
        f"{'depth':>5} {'history':>8} | {'full walk':>10} {'bytes':>10} {'entries':>7} |"
        f" {'lag':>3} {'summaries':>10} {'bytes':>8} {'entries':>7} {'saved':>7} | {'time ratio':>10}"
    )
    worst: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for history in histories:
            for depth in depths:
                full = None
                for lag in [None, *lags]:
                    path = Path(tmp) / f"d{depth}-h{history}-{lag}.sqlite3"
                    store, leaf = build(path, depth, history, a.tail, lag)
                    try:
                        t, size, full_size, n = timed(store, leaf, a.runs)
                    finally:
                        store.close()
                    if lag is None:
                        full = (t, size, n)
                        continue
                    assert full is not None
                    if depth == max(depths) and history == max(histories):
                        worst[lag] = t
                    saved = 1 - size / full_size if full_size else 0.0
                    print(
                        f"{depth:>5} {history:>8} | {full[0]:>8.2f}ms {full[1]:>10,} {full[2]:>7} |"
                        f" {lag:>3} {t:>8.2f}ms {size:>8,} {n:>7} {saved:>6.1%} | {t / full[0]:>9.2f}×",
                        flush=True,
                    )
    for lag, t in worst.items():
        print(
            f"with summaries (lag {lag}) at depth {max(depths)} over {max(histories):,} blips: {t:.2f} ms"
            f" (target ≤ {TARGET_MS:g} ms)"
        )


if __name__ == "__main__":
    main()
