"""``fleet backup|export|import|replay``: the store as an artifact you can carry (docs/design.md §2).

``export`` goes through the daemon (``GET /v1/events``, the operator token: it works against a
remote daemon too); ``backup``, ``import`` and ``replay --check`` work on this machine's database
file (``fleet paths``): backup and check through a read connection of their own, safe while the
daemon runs; import with the daemon stopped (it holds the store's lock beside the database, as a
daemon does). An import only adds waves (fleet/store/artifact.py says exactly what it checks),
reading its input a bounded line at a time.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from fleet import errors
from fleet.cli import render
from fleet.cli.common import MAX_BLIP_BYTES, JsonOpt, client
from fleet.paths import Paths, get_paths, hide_password


def _local(what: str) -> Paths:
    """This machine's paths, refusing when FLEET_DAEMON names another daemon than the local one (or
    FLEET_STORE is not a postgresql:// URL, as the daemon does)."""
    paths = get_paths()
    if paths.store_url and not paths.store_url.startswith(("postgresql://", "postgres://")):
        raise errors.UsageError(
            f"FLEET_STORE={hide_password(paths.store_url)!r} is not a postgresql:// URL: give one"
            " (postgresql://USER@HOST[:PORT]/DATABASE), or unset it for the SQLite file in the data dir"
        )
    remote = os.environ.get("FLEET_DAEMON", "").strip()
    if remote:
        from fleet.client import read_endpoint

        ep = read_endpoint(paths)
        if ep is None or remote.split("#")[0].rstrip("/") != ep.url.rstrip("/"):
            raise errors.UsageError(
                f"`fleet {what}` works on this machine's store ({hide_password(str(paths.store))}), but"
                " FLEET_DAEMON names"
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

    paths = _local("backup")
    if paths.store_url:
        raise errors.UsageError(
            "`fleet backup` copies an SQLite store; this one is on PostgreSQL"
            f" ({hide_password(paths.store_url)}): back it up with PostgreSQL's own tools, `pg_dump -Fc`"
            " (one consistent snapshot while daemons write; restore with pg_restore into an empty"
            " database) or `pg_basebackup` (the whole server, for point-in-time recovery); or"
            " `fleet export` through a daemon"
        )
    report = run(paths.db, file, force=force)
    if as_json:
        render.dump(report.__dict__)
    else:
        render.out(f"backed up {report.events} events ({report.bytes} bytes) to {report.path}")


def export(
    wave: Annotated[
        str | None, typer.Argument(metavar="[WAVE]", help="Only this wave's events (name or id).")
    ] = None,
    with_tokens: Annotated[
        bool,
        typer.Option(
            "--with-tokens",
            help="Include the tokens' hashes: tokens of this store then work on any store that imports it.",
        ),
    ] = False,
) -> None:
    """Write the event log to stdout as JSON lines (the whole store, or WAVE's events): replayable
    with `fleet import`. The operator token only.

    A header line, one line per log row, and a trailer line (the row count and a SHA-256 of the lines
    before it), by which `fleet import` tells a whole file from one cut short. No tokens unless
    --with-tokens (a warning says what that means). The export holds the waves' private wavelets:
    keep it like the database. Redirected into a file, that file is made 0600.
    """
    from fleet.store.artifact import ExportWriter

    c = client()
    if stat.S_ISREG(os.fstat(sys.stdout.fileno()).st_mode):
        os.fchmod(sys.stdout.fileno(), 0o600)
    page = c.events(after=0, wave=wave, tokens=with_tokens)
    if with_tokens:  # (once the daemon let it: a refused export warns of nothing)
        render.note(
            "this export holds every token's hash (--with-tokens): those tokens keep working on any store"
            " that imports it; keep the file like the database, and revoke (`fleet token revoke`) what"
            " should not travel"
        )
    name = c.get_wave(page.wave_id).name if page.wave_id else None
    out = sys.stdout.buffer
    writer = ExportWriter(out.write)
    writer.start(page.store_id, page.wave_id, name)
    while True:
        for row in page.events:
            writer.row(row)
        if not page.more:
            break
        page = c.events(after=page.cursor, wave=page.wave_id, tokens=with_tokens)
    writer.end()
    out.flush()


def import_(
    file: Annotated[
        str, typer.Argument(metavar="FILE", help="A file written by `fleet export` (- for stdin).")
    ],
    with_tokens: Annotated[
        bool,
        typer.Option(
            "--with-tokens", help="Import the tokens a --with-tokens export carries (they work here)."
        ),
    ] = False,
    allow_partial: Annotated[
        bool,
        typer.Option(
            "--allow-partial",
            help="Of a file cut short or damaged, import the whole rows before the damage, and say what was"
            " skipped.",
        ),
    ] = False,
    max_blip_bytes: Annotated[
        int,
        typer.Option(
            "--max-blip-bytes",
            min=1,
            help="The blip limit the source daemon ran with (`fleet daemon run --max-blip-bytes`): it"
            " bounds blip texts and lines (8 x it + 1 MiB).",
        ),
    ] = MAX_BLIP_BYTES,
    as_json: JsonOpt = False,
) -> None:
    """Add the waves of an export to this machine's store: the same ids, the same state, all or nothing.

    An import only adds: it creates waves the store does not hold and nothing else. Every line must
    belong to a wave created earlier in the same file, every id must be new to the store, and each
    event must be one a live write could have made (author on the roster, parents before children,
    ids increasing within a wave). A file that ends without `fleet export`'s trailer (cut short),
    with a trailer that does not match, with a line over 3 MiB (8 x the blip limit + 1 MiB: more than
    the longest a store writes; it is not read further), or with tokens but no --with-tokens is
    refused naming the line (exit 2), and nothing changes. --allow-partial imports what verifies of a
    damaged file: the whole rows before the first damaged line (one cut short or not a log row, the
    missing trailer, lines after it), checked the same way, and says what it skipped; a trailer that
    does not match is refused even then (which lines changed cannot be told). The local daemon must
    be stopped (`fleet daemon stop`); the next command starts it again.
    """
    from fleet.store.artifact import import_log

    paths = _local("import")
    source: contextlib.AbstractContextManager[BinaryIO]
    if file == "-":
        source, name = contextlib.nullcontext(sys.stdin.buffer), "stdin"
    else:
        try:
            source, name = open(file, "rb"), file  # noqa: SIM115 (closed below: read line by line)
        except OSError as exc:
            raise errors.UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
    with source as f:  # one lock for both: the store's, whichever state dir its daemon has
        report = import_log(
            paths.store, paths.store_lock, f, name,
            with_tokens=with_tokens, allow_partial=allow_partial, max_blip_bytes=max_blip_bytes,
        )  # fmt: skip
    if as_json:
        render.dump(report.__dict__)
        return
    waves = f" (waves: {', '.join(report.waves)})" if report.waves else ""
    tokens = f" with {report.tokens} tokens" if report.tokens else ""
    render.out(f"imported {report.events} events{waves}{tokens} into {hide_password(str(paths.store))}")
    if report.skipped:
        render.out(f"skipped (--allow-partial) {report.skipped}")


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
    report = replay_check(_local("replay").store)
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
