"""Where each campaign lives, for readers that know only its wave (the console).

A campaign is in a git repository's ``.wave/``; its fleet wave is named by the campaign id. The
daemon does not know repositories, so ``fleet campaign plan`` and the loop record the campaign's
repository in fleet's state directory, one ``campaigns/<id>.json`` (0600) each. Read-only readers
look a wave up there; nothing else depends on it (a campaign works without its record).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from fleet.campaign.disk import Campaign


def _file(state_dir: Path, cid: str) -> Path:
    return state_dir / "campaigns" / f"{cid}.json"


def remember(state_dir: Path, c: Campaign) -> None:
    """Record (or refresh) where campaign ``c`` lives."""
    f = _file(state_dir, c.id)
    f.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = f.with_name(f".{f.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump({"campaign_id": c.id, "root": str(c.root.resolve())}, out)
    os.replace(tmp, f)


def lookup(state_dir: Path, cid: str) -> Campaign | None:
    """The campaign recorded under ``cid`` if its STATE.md is still there, else None."""
    if not cid or "/" in cid or cid.startswith("."):
        return None
    try:
        data = json.loads(_file(state_dir, cid).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    c = Campaign(Path(str(data.get("root", ""))), cid)
    with contextlib.suppress(OSError):
        if c.state_file.is_file():
            return c
    return None
