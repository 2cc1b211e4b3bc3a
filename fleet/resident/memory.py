"""``fleet memory show|update|add WAVE``: the wave's MEMORY.md, edited under the seat's pen.

MEMORY.md lives in the origin repository (``wave/<name>/MEMORY.md``, beside GOAL.md). Writes hold
an exclusive lock on the wave's resident state dir (the pen: one writer at a time, whoever it is)
and replace the file atomically. Each write is recorded as a ``system`` blip in the wave's root
wavelet ("memory updated: <summary>"), which reaches the mind with its next wake; the next start
or revival renders the new memory into its prompt. Only the operator (this machine's user, who
holds the operator token) and the resident (its session runs as that user) reach this file.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from fleet import errors
from fleet.client import Client
from fleet.paths import Paths, ensure_private_dir
from fleet.resident import repo, state_dir

Op = Literal["update", "add"]


class MemoryReport(BaseModel):
    wave: str
    path: str
    content: str
    summary: str = ""


def memory_path(paths: Paths, wave_id: str, wave: str, cwd: Path | None = None) -> Path:
    """MEMORY.md of the wave: under the origin the resident was started from, else this repository's."""
    try:
        origin = Path((state_dir(paths, wave_id) / "origin").read_text(encoding="utf-8").strip())
    except OSError:
        origin = repo.origin(cwd or Path.cwd())
    return repo.wave_dir(origin, wave) / "MEMORY.md"


def show(client: Client, paths: Paths, wave_ref: str) -> MemoryReport:
    wave = client.get_wave(wave_ref)
    path = memory_path(paths, wave.id, wave.name)
    content = path.read_text(encoding="utf-8") if path.is_file() else ""
    return MemoryReport(wave=wave.name, path=str(path), content=content)


def write(
    client: Client, paths: Paths, wave_ref: str, op: Op, text: str, summary: str | None = None
) -> MemoryReport:
    """``update`` replaces MEMORY.md with ``text``; ``add`` appends it as a new paragraph."""
    if not text.strip():
        raise errors.UsageError("the memory text is empty: give what to write (or - to read stdin)")
    wave = client.get_wave(wave_ref)
    path = memory_path(paths, wave.id, wave.name)
    lock = ensure_private_dir(state_dir(paths, wave.id)) / "memory.lock"
    with lock.open("a") as pen:
        fcntl.flock(pen, fcntl.LOCK_EX)
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
        new = (
            text.strip() + "\n"
            if op == "update"
            else (old.rstrip() + "\n\n" if old.strip() else "") + text.strip() + "\n"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".MEMORY.md.{os.getpid()}")
        tmp.write_text(new, encoding="utf-8")
        tmp.replace(path)
    said = summary or next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:120]
    client.post_system(
        wave.root_id,
        f"resident: memory {'updated' if op == 'update' else 'added'}: {said} (wave/{wave.name}/MEMORY.md)",
    )
    return MemoryReport(wave=wave.name, path=str(path), content=new, summary=said)
