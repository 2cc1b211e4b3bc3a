"""Benchmark the store's start-up check and its artifact commands. Prints figures; asserts nothing.

    python bench/artifact.py [--blips N]

On a store of ``--blips`` posts (one wave, 200-byte texts), in-process:

1. The daemon's start-up check (``faults.check_database``: ``PRAGMA quick_check``) beside the same
   run's baseline, opening the store (``Store(path)``: migrations, id minter) without it.
2. ``backup`` (SQLite's online backup, then ``quick_check`` of the copy) beside copying the file
   (``shutil.copyfile`` after a checkpoint: what a backup costs over a plain copy).
3. Export (``export_page`` until ``more`` is false, lines and trailer as ``fleet export`` writes
   them), import of that into a fresh store (``import_log``: read a bounded line at a time, every
   event checked to only add), and ``replay_check``.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    got = fn()
    return time.perf_counter() - t0, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blips", type=int, default=20_000)
    args = ap.parse_args()

    from fleet.store import OPERATOR_PRINCIPAL, Store
    from fleet.store.artifact import ExportWriter, backup, export_page, import_log, replay_check
    from fleet.store.faults import check_database

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db = root / "fleet.sqlite3"
        store = Store(db)
        wave = store.create_wave(OPERATOR_PRINCIPAL, "w", ["alice"])
        for i in range(args.blips):
            store.post(OPERATOR_PRINCIPAL, wave.root_id, f"{i:08d} " + "x" * 191, as_="alice")
        store.close()
        size = db.stat().st_size
        print(f"store: {args.blips} blips, {size / 1e6:.1f} MB")

        t_open, s = timed(lambda: Store(db))
        s.close()
        t_check, _ = timed(lambda: check_database(db))
        print(
            f"start-up check (quick_check): {t_check * 1000:.0f} ms"
            f"   baseline: opening the store {t_open * 1000:.0f} ms"
        )

        conn = sqlite3.connect(db)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        t_copy, _ = timed(lambda: shutil.copyfile(db, root / "plain-copy"))
        t_backup, rep = timed(lambda: backup(db, root / "backup.sqlite3"))
        print(
            f"backup: {t_backup * 1000:.0f} ms ({rep.bytes / 1e6:.1f} MB)"
            f"   baseline: copying the file {t_copy * 1000:.0f} ms"
        )

        store = Store(db)

        def export() -> bytes:
            buf = io.BytesIO()
            writer = ExportWriter(buf.write)
            page = export_page(store, OPERATOR_PRINCIPAL, None)
            writer.start(page.store_id, None, None)
            while True:
                for r in page.events:
                    writer.row(r)
                if not page.more:
                    writer.end()
                    return buf.getvalue()
                page = export_page(store, OPERATOR_PRINCIPAL, None, after=page.cursor)

        t_export, data = timed(export)
        store.close()
        fresh = root / "fresh" / "fleet.sqlite3"
        t_import, _ = timed(
            lambda: import_log(fresh, root / "fresh" / "daemon.lock", io.BytesIO(data), "export")
        )
        t_replay, report = timed(lambda: replay_check(db))
        print(
            f"export: {t_export * 1000:.0f} ms ({len(data) / 1e6:.1f} MB)   import: {t_import * 1000:.0f} ms"
        )
        print(
            f"replay --check: {t_replay * 1000:.0f} ms ({report.events} events, {report.total} differences)"
        )


if __name__ == "__main__":
    main()
