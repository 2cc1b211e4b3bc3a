"""The wave's memory, ``wave/<name>/MEMORY.md``: written by the daemon under the seat's pen.

What a caller may rely on (docs/resident.md):

- ``fleet memory show|update|add WAVE`` goes through the daemon (``GET``/``POST
  /v1/waves/{wave}/memory``); only the operator and the wave's seated resident may (anyone else is
  refused, 403, and nothing changes).
- The file is MEMORY.md beside GOAL.md in the wave's origin repository: the main checkout of the
  worktree the wave's seat records (``<repo>.<wave>``), where ``fleet resident start`` reads it.
  A wave that never had a resident has no seat, so fleet does not know its repository (404).
- The daemon holds the pen: one write at a time per file, replaced atomically (a temporary file
  in the same folder, fsynced, renamed over it), so a reader sees the old memory or the new one.
- Each write is recorded by one blip in the wave's root wavelet. The operator's is a message
  naming the resident ("memory updated: <summary> — resident: re-read …"): it wakes the mind, which
  reads the new memory now, not at its next start. The resident's own write is a ``system`` blip
  (``resident: memory added: …``): the mind knows what it wrote, so nothing wakes. ``fleet memory``
  run in the resident's own session (its shell: ``CLAUDE_CODE_SESSION_ID`` is the seat's) writes
  as the resident even with the operator's token.

This module is the file side, which the daemon reaches through :data:`fleet.seams.memory_pens`
(:data:`pen`, named by :mod:`fleet.features`); :func:`show` and :func:`write` are the CLI's.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from fleet import errors, seams
from fleet.models import MemoryAnswer, MemoryOp, Seat
from fleet.paths import read_utf8
from fleet.resident import repo

if TYPE_CHECKING:
    from fleet.client import Client

_pens: dict[Path, threading.Lock] = {}
_pens_lock = threading.Lock()


def memory_file(seat: Seat, wave: str) -> Path:
    """MEMORY.md of ``wave``: in the origin repository of the worktree ``seat`` records."""
    if seat.host != socket.gethostname():
        raise errors.Conflict(
            f"wave {wave!r}'s resident runs on {seat.host}, not on this daemon's machine: its memory is"
            f" the file wave/{wave}/MEMORY.md there"
        )
    worktree = Path(seat.cwd) if seat.cwd else None
    if worktree is None or not worktree.is_dir():
        raise errors.Conflict(
            f"wave {wave!r}'s seat records no worktree that exists ({seat.cwd or 'none'}):"
            f" `fleet resident start {wave}` again makes it"
        )
    return repo.wave_dir(repo.origin(worktree), wave) / "MEMORY.md"


def read(path: Path) -> str:
    """MEMORY.md's text ('' before the first write); UsageError naming it when it cannot be read
    or is not UTF-8 (a hand edit): an ``update`` writes it whole again."""
    try:
        return read_utf8(path)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise errors.UsageError(
            f"{path} cannot be read ({exc.strerror or exc}): `fleet memory update` writes it whole again"
        ) from None


def summary_of(content: str, summary: str | None) -> str:
    """What the write's blip says: ``summary``, else the content's first non-empty line."""
    said = (summary or "").strip() or next((ln.strip() for ln in content.splitlines() if ln.strip()), "")
    return " ".join(said.split())[:120]


def apply(path: Path, op: MemoryOp, content: str) -> str:
    """Write MEMORY.md under its pen and return what it now holds: ``update`` replaces it with
    ``content``, ``add`` appends ``content`` as a new paragraph. Atomic (rename)."""
    if not content.strip():
        raise errors.UsageError("the memory text is empty: give what to write (or - to read stdin)")
    with _pens_lock:
        pen = _pens.setdefault(path, threading.Lock())
    with pen:
        if op == "update":  # what is there is replaced, whatever it is: not read
            new = content.strip() + "\n"
        else:
            old = read(path)
            new = (old.rstrip() + "\n\n" if old.strip() else "") + content.strip() + "\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".MEMORY.md.{os.getpid()}.{threading.get_ident()}")
        try:
            with tmp.open("w", encoding="utf-8") as f:
                f.write(new)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return new


def blip_text(op: MemoryOp, said: str, wave: str, by_resident: bool, resident: str) -> str:
    verb = "updated" if op == "update" else "added"
    if by_resident:
        return f"resident: memory {verb}: {said} (wave/{wave}/MEMORY.md)"
    return f"memory {verb}: {said} — {resident}: re-read wave/{wave}/MEMORY.md, the wave's memory"


class Pen:
    """The daemon's pen (:class:`fleet.seams.MemoryPen`): this module's file side."""

    def file(self, seat: Seat, wave: str) -> Path:
        return memory_file(seat, wave)

    def read(self, path: Path) -> str:
        return read(path)

    def write(self, path: Path, op: MemoryOp, content: str) -> str:
        return apply(path, op, content)

    def note(
        self, op: MemoryOp, content: str, summary: str | None, wave: str, by_resident: bool, resident: str
    ) -> tuple[str, str]:
        said = summary_of(content, summary)
        return said, blip_text(op, said, wave, by_resident, resident)


pen = Pen()
seams.memory_pens.add(__name__, pen)


# ---------------------------------------------------------------- the CLI's side


def show(client: Client, wave_ref: str) -> MemoryAnswer:
    return client.memory(wave_ref)


def write(
    client: Client,
    wave_ref: str,
    op: MemoryOp,
    text: str,
    summary: str | None = None,
    env: Mapping[str, str] | None = None,
) -> MemoryAnswer:
    """Write the memory; run inside the seated resident's own session (its
    ``CLAUDE_CODE_SESSION_ID`` is the seat's), the write is the resident's even on the operator's
    token, so it does not wake the mind that made it."""
    if not text.strip():  # (the daemon refuses it too: this saves the round trip)
        raise errors.UsageError("the memory text is empty: give what to write (or - to read stdin)")
    session = (os.environ if env is None else env).get("CLAUDE_CODE_SESSION_ID", "")
    as_ = None
    if session:
        seat = client.seat(wave_ref)
        if seat is not None and seat.closed_at is None and seat.session_id == session:
            as_ = seat.participant
    return client.write_memory(wave_ref, op, text, summary, as_=as_)
