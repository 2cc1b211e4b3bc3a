"""fleet: spawn and supervise fleets of Claude Code agents in tmux, coordinated through a wave store."""

from __future__ import annotations

__version__ = "0.1.0"
