"""The console's campaign view (read-only): ``fleet campaign status --json`` and ``fleet campaign
notes N`` for the campaign a wave carries out, served by the console (fleet/console.py) at

- ``GET /api/console/waves/{wave}/campaign``: the dashboard as data, exactly what the CLI computes
  (:func:`fleet.campaign.view.status`), plus ``repo``, the repository the campaign lives in;
- ``GET /api/console/waves/{wave}/campaign/notes/{n}``: wave ``n``'s NOTES.md (``text`` is ``""``
  when it has none yet).

A wave is a campaign's when fleet recorded it (:mod:`fleet.campaign.registry`: ``plan`` and the
loop do); any other wave is ``404``. Nothing here writes anything.
"""

from __future__ import annotations

import re
from typing import Any

from fleet import errors
from fleet.campaign import registry, view
from fleet.campaign.disk import Campaign
from fleet.paths import Paths
from fleet.store import OPERATOR_PRINCIPAL, Store

ROUTE = re.compile(r"/api/console/waves/([^/]+)/campaign(?:/notes/([^/]*))?")


def _campaign(store: Store, paths: Paths, wave_ref: str) -> Campaign:
    wave = store.get_wave(OPERATOR_PRINCIPAL, wave_ref)  # an unknown wave: 404 first
    c = registry.lookup(paths.state, wave.name)
    if c is None:
        raise errors.NotFound(
            f"wave {wave.name} carries out no campaign fleet knows of (`fleet campaign plan` and the"
            " loop record one)"
        )
    return c


def campaign(store: Store, paths: Paths, wave_ref: str) -> dict[str, Any]:
    c = _campaign(store, paths, wave_ref)
    return {**view.status(c), "repo": str(c.root)}


def notes(store: Store, paths: Paths, wave_ref: str, n: str) -> dict[str, Any]:
    c = _campaign(store, paths, wave_ref)
    if not n.isdigit():
        raise errors.UsageError(f"wave index {n!r} is not a whole number")
    c.check_wave(int(n), c.read())
    path = c.notes(int(n))
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    return {"wave": int(n), "path": c.rel(path), "text": text}


def serve(store: Store, paths: Paths, path: str) -> dict[str, Any] | None:
    """The answer for a console GET of ``path``, or None when ``path`` is not a campaign route."""
    from urllib.parse import unquote

    m = ROUTE.fullmatch(path)
    if m is None:
        return None
    if m[2] is None:
        return campaign(store, paths, unquote(m[1]))
    return notes(store, paths, unquote(m[1]), unquote(m[2]))
