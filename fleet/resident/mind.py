"""The mind's state, read from its session's own record (never from its screen).

The fold is every agent's (:class:`fleet.agentstate.Fold`, where what Claude Code writes is
described): the resident reads its own session's record with it, incrementally — Claude Code's
transcript, or a Codex mind's rollout translated into transcript lines (the record is its agent
kind's, :meth:`fleet.agents.Kind.record`). ``fleet resident status`` shows the state its channel
reports to the daemon (the same as ``fleet status``) and takes the counts (turns, failed turns) from
this reader where the record is on this machine.

:class:`Mind` is what the resident knows of the agent running it: its kind (how its record is read,
how a line is put to it as its next turn, what it cannot do that a Claude Code mind does), its
command and its pane's environment. Everything that differs between kinds is asked of the kind.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet.agents import Kind, agent_words, kind_of
from fleet.agentstate import Fold
from fleet.resident.steer import SteerFold, SteerStatus, describe

if TYPE_CHECKING:
    from fleet.delivery.receipts import Transcript
    from fleet.paths import Paths
    from fleet.tmux import Tmux

MindFold = Fold
"""The resident's name for the one fold (kept for its callers)."""


class MindReader:
    """The fold of one session's record, read incrementally. ``record``: the kind's reader of it
    (:meth:`fleet.agents.Kind.record`); without one, Claude Code's transcript of ``session_id``
    under ``env``'s HOME. ``unread``: why no record is read (a kind that keeps none fleet reads)."""

    def __init__(
        self,
        session_id: str,
        env: Mapping[str, str] | None = None,
        *,
        record: Transcript | None = None,
        unread: str = "",
    ) -> None:
        self.session_id = session_id
        self.env = dict(env) if env is not None else dict(os.environ)
        if record is None and not unread:
            from fleet.agents.claude import kind as claude
            from fleet.paths import get_paths

            record = claude.record(session_id, self.env, get_paths())
        self.record = record
        self.unread = unread
        self.fold = Fold()
        self.steer = SteerFold()
        """The operator's blips that came while the mind was turning (:mod:`fleet.resident.steer`)."""
        self.problem = ""
        """Why the record cannot be read ('' when it was)."""

    @property
    def path(self) -> Path | None:
        """The record's file, once found."""
        return self.record.path if self.record is not None else None

    @property
    def offset(self) -> int:
        """Bytes of the record read so far: the janitor's measure of progress."""
        return self.record.offset if self.record is not None else 0

    def read(self) -> Fold:
        if self.record is None:
            self.problem = self.unread
            return self.fold
        lines: list[dict[str, Any]] = []
        self.record.observer = lines.append
        while True:  # (the reader takes the file a chunk at a time)
            before = self.record.offset
            self.record.read()
            if self.record.offset == before:
                break
        self.problem = self.record.problem
        mtime = 0.0
        if lines and self.record.path is not None:
            try:
                mtime = self.record.path.stat().st_mtime
            except OSError as exc:
                self.problem = f"cannot read {self.record.path}: {exc.strerror or exc}"
        for obj in lines:
            was = self.fold.turning
            self.fold.take(obj, mtime)
            self.steer.take(obj, was)
        return self.fold


@dataclass
class Mind:
    """The agent running a wave's resident: its kind, command and pane environment (its layout's
    env over this process's, where its record is)."""

    kind: Kind
    words: list[str]
    env: dict[str, str]
    paths: Paths

    @classmethod
    def of(cls, agent: str, env: Mapping[str, str], paths: Paths) -> Mind:
        words = agent_words(agent)
        return cls(kind_of(words), words, dict(env), paths)

    def reader(self, session_id: str) -> MindReader:
        record = self.kind.record(session_id, self.env, self.paths)
        unread = "" if record is not None else f"fleet reads no record of a {self.kind.name} agent"
        return MindReader(session_id, self.env, record=record, unread=unread)

    def enter(
        self, tmux: Tmux, pane_id: str, session_id: str, text: str, *, interrupted: bool = False
    ) -> None:
        """Put ``text`` to the mind as its next turn, its kind's way (typed in, or ``codex queue``;
        ``interrupted``: an Escape ended its last turn)."""
        self.kind.enter(
            tmux, pane_id, text, words=self.words, session_id=session_id, env=self.env, paths=self.paths,
            interrupted=interrupted,
        )  # fmt: skip


def steer_status(session_id: str, mind: Mind | Mapping[str, str] | None) -> SteerStatus:
    """The steers of ``session_id``'s record (nothing when it is not on this machine). ``mind``: the
    resident's :class:`Mind` (an environment alone: a Claude Code mind). A kind whose record never
    shows a steer says why instead."""
    if isinstance(mind, Mind) and mind.kind.steer:
        return SteerStatus(text=mind.kind.steer)
    reader = mind.reader(session_id) if isinstance(mind, Mind) else MindReader(session_id, mind)
    reader.read()
    last = reader.steer.last
    return SteerStatus(last=last, count=reader.steer.count, text=describe(last))
