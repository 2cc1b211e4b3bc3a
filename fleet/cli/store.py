"""``fleet backup|export|import|replay``: the store as an artifact you can carry (docs/design.md §2).

``export`` goes through the daemon (``GET /v1/events``, the operator token: it works against a
remote daemon too); ``backup``, ``import`` and ``replay --check`` work on this machine's database
file (``fleet paths``): backup and check through a read connection of their own, safe while the
daemon runs; import with the daemon stopped (it holds the daemon's instance lock).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Annotated

import typer

from fleet import errors
from fleet.cli import render
from fleet.cli.common import JsonOpt, client
from fleet.paths import Paths, get_paths


def _local(what: str) -> Paths:
    """This machine's paths, refusing when FLEET_DAEMON names another daemon than the local one."""
    paths = get_paths()
    remote = os.environ.get("FLEET_DAEMON", "").strip()
    if remote:
        from fleet.client import read_endpoint

        ep = read_endpoint(paths)
        if ep is None or remote.split("#")[0].rstrip("/") != ep.url.rstrip("/"):
            raise errors.UsageError(
                f"`fleet {what}` works on this machine's store ({paths.db}), but FLEET_DAEMON names"
                f" another daemon ({remote}): run it on that daemon's machine, or unset FLEET_DAEMON"
            )
    return paths


def backup(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Where to write the copy (mode 0600).")],
    force: Annotated[bool, typer.Option("--force", help="Replace FILE if it exists.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Copy the store to FILE with SQLite's online backup: safe while the daemon runs and others post.

    The copy is one committed state, a single self-contained file, checked before it is kept. To
    restore: stop the daemon and copy FILE over the database (`fleet paths` shows where).
    """
    from fleet.store.artifact import backup as run

    report = run(_local("backup").db, file, force=force)
    if as_json:
        render.dump(report.__dict__)
    else:
        render.out(f"backed up {report.events} events ({report.bytes} bytes) to {report.path}")


def export(
    wave: Annotated[
        str | None, typer.Argument(metavar="[WAVE]", help="Only this wave's events (name or id).")
    ] = None,
) -> None:
    """Write the event log to stdout as JSON lines (the whole store, or WAVE's events): replayable
    with `fleet import`. The operator token only.

    The export holds the wave's private wavelets and its tokens' hashes (never the tokens): keep it
    like the database. Redirected into a file, that file is made 0600.
    """
    from fleet.store.artifact import header, line

    c = client()
    if stat.S_ISREG(os.fstat(sys.stdout.fileno()).st_mode):
        os.fchmod(sys.stdout.fileno(), 0o600)
    page = c.events(after=0, wave=wave)
    name = c.get_wave(page.wave_id).name if page.wave_id else None
    out = sys.stdout
    out.write(json.dumps(header(page.store_id, page.wave_id, name)) + "\n")
    while True:
        for row in page.events:
            out.write(json.dumps(line(row), separators=(",", ":")) + "\n")
        if not page.more:
            break
        page = c.events(after=page.cursor, wave=page.wave_id)
    out.flush()


def import_(
    file: Annotated[
        str, typer.Argument(metavar="FILE", help="A file written by `fleet export` (- for stdin).")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Import an export into this machine's store: the same ids, the same state, all or nothing.

    A wave the store already holds, or any row that does not fit, is refused and nothing changes.
    The local daemon must be stopped (`fleet daemon stop`); the next command starts it again.
    """
    from fleet.store.artifact import import_log

    paths = _local("import")
    if file == "-":
        data, name = sys.stdin.buffer.read(), "stdin"
    else:
        try:
            data, name = Path(file).read_bytes(), file
        except OSError as exc:
            raise errors.UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
    report = import_log(paths.db, paths.store_lock, data, name)
    if as_json:
        render.dump(report.__dict__)
    else:
        waves = f" (waves: {', '.join(report.waves)})" if report.waves else ""
        render.out(f"imported {report.events} events{waves} into {paths.db}")


def replay(
    check: Annotated[
        bool, typer.Option("--check", help="Rebuild from the log in a scratch database and compare.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild the store's tables from its event log in a scratch database and compare them with the
    live store (--check); prints what differs and exits 1 if anything does. Safe while the daemon runs."""
    from fleet.store.artifact import replay_check

    if not check:
        raise errors.UsageError(
            "give --check: `fleet replay --check` compares the store with its log (nothing is rebuilt in"
            " place; to rebuild, import an export into a fresh store)"
        )
    report = replay_check(_local("replay").db)
    if as_json:
        render.dump(report.__dict__)
    else:
        for d in report.differences:
            render.out(d)
    if report.total:
        more = (
            f" (the first {len(report.differences)} above)" if report.total > len(report.differences) else ""
        )
        raise errors.FleetError(
            f"the store {report.store} differs from what its event log rebuilds in {report.total}"
            f" place(s){more}: the log is the truth; restore a backup (`fleet backup` makes them), or"
            " import an export of the log into a fresh store"
        )
    if not as_json:
        render.out(
            f"the store {report.store} matches its event log ({report.events} events, {report.rows} rows)"
        )


def register(root: typer.Typer) -> None:
    root.command("backup")(backup)
    root.command("export")(export)
    root.command("import")(import_)
    root.command("replay")(replay)
