"""Delivery: which blips reach a participant, as what, through which transport — written once.

The package is the one delivery engine every transport runs (docs/design.md §3–§5):

- :mod:`~fleet.delivery.rules` — the pure rules: cursor per wavelet, echo suppression, the cap and
  its one notice, targeted attention's routing, digests and the digest hold (no I/O);
- :mod:`~fleet.delivery.state` — the state file (cursors and counts per wavelet) and its lock;
- :mod:`~fleet.delivery.frames` — the :class:`~fleet.delivery.frames.Frame` a transport hands out,
  and its renderings (MCP notification, the hook's ``<channel>`` text, watch's blocks);
- :mod:`~fleet.delivery.engine` — :class:`~fleet.delivery.engine.Engine`: a feed source and a sink
  around the rules, one step at a time, no threads;
- :mod:`~fleet.delivery.attention` — targeted attention's I/O: the routing log and the attendant;
- :mod:`~fleet.delivery.presence` — presence reports to the daemon;
- :mod:`~fleet.delivery.config` — who delivers to whom, resolved once from options and environment.

The channel (:mod:`fleet.channel`) is the engine with an MCP sink; ``fleet watch`` and its hook
(:mod:`fleet.watch`) are the engine with a list sink. The names most callers need are here.
"""

from __future__ import annotations

from fleet.delivery.frames import Frame, blip_block, exhaustion_notice
from fleet.delivery.rules import (
    DEFAULT_CAP,
    DIGEST_HOLD,
    EXCERPT_CHARS,
    HOLD_MAX_LINES,
    Action,
    Attention,
    Batch,
    Decision,
    Delivery,
    Routed,
    Rule,
    digest_ids,
    digest_line,
    digest_text,
    excerpt,
    mentions,
    route,
)
from fleet.delivery.state import DeliveryState, StateFile, daemon_key, state_path
from fleet.errors import CorruptState

__all__ = [
    "DEFAULT_CAP",
    "DIGEST_HOLD",
    "EXCERPT_CHARS",
    "HOLD_MAX_LINES",
    "Action",
    "Attention",
    "Batch",
    "CorruptState",
    "Decision",
    "Delivery",
    "DeliveryState",
    "Frame",
    "Routed",
    "Rule",
    "StateFile",
    "blip_block",
    "daemon_key",
    "digest_ids",
    "digest_line",
    "digest_text",
    "excerpt",
    "exhaustion_notice",
    "mentions",
    "route",
    "state_path",
]
