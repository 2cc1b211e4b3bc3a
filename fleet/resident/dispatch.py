"""Dispatch: the resident forks a wavelet and spawns its workers (``wavelet_fork`` with ``spawn``).

Only the wave's seated resident may: the channel's participant must be ``resident`` and its session
the one holding the wave's seat in the store. Everything that can be refused is checked before the
fork is made (who asks, the layout, the workers' agents), so a refusal leaves nothing half made; the
tool returns the refusal to the mind as an error that says what to do.

Spawning needs the operator's powers (minting the workers' tokens, recording their sessions): the
channel runs as the operator's user on the operator's machine and uses the operator token in the
data dir (``fleet paths``), as the CLI would. A channel whose daemon is elsewhere has no such
token and is refused. The workers go into the tmux server the resident runs in.
"""

from __future__ import annotations

from pathlib import Path

from fleet import errors, worktrees
from fleet.client import Client
from fleet.features import load as load_features
from fleet.layouts import Layout, Profile, available
from fleet.layouts import load as load_layout
from fleet.models import Wavelet
from fleet.paths import Paths, get_paths, read_utf8
from fleet.resident import RESIDENT, repo
from fleet.seams import ToolHost
from fleet.spawn import Spawner, agent_words, require_agent
from fleet.tmux import Tmux, server

READY = 90.0
"""Seconds the fork waits for each spawned worker to connect."""


def _from_origin(layout: Layout, workers: list[str]) -> Layout:
    """Workers whose profile asks for a worktree but names no ``cwd`` branch off the origin
    repository (``<repo>.<wave>.<participant>``), not off the resident's own worktree, which is
    where the channel (and so the spawn) runs."""
    try:
        origin = repo.origin(Path.cwd())
    except errors.FleetError:
        return layout  # not in a repository: the spawn's own error says so
    parts = dict(layout.participants)
    for name in workers:
        profile = layout.profile(name)
        if profile.worktree != "none" and not profile.cwd:
            parts[name] = parts.get(name, Profile()).model_copy(update={"cwd": str(origin)})
    return layout.model_copy(update={"participants": parts})


class Dispatch:
    """A checked spawn request: :meth:`check` refuses, :meth:`spawn` starts the workers."""

    def __init__(self, operator: Client, layout: Layout, paths: Paths) -> None:
        self.operator, self.layout, self.paths = operator, layout, paths

    @classmethod
    def check(cls, host: ToolHost, layout_ref: str, workers: list[str]) -> Dispatch:
        # this spawns from the channel, which names only its own features: a worker gets every
        # built-in a CLI spawn gets (the permission hook, budgets' checks, its worktree)
        load_features()
        if host.participant != RESIDENT:
            raise errors.Forbidden(
                "only the wave's resident may spawn workers: fork without `spawn` and ask the operator"
                " to `fleet spawn` the new wavelet"
            )
        seat = host.client().seat(host.wave)
        if seat is None or seat.closed_at is not None or seat.session_id != host.session_id:
            raise errors.Forbidden(
                f"spawning workers is the seated resident's power, and this session does not hold wave"
                f" {host.wave}'s seat (`fleet resident status {host.wave}` shows who does)"
            )
        if not workers:
            raise errors.UsageError("name the workers to spawn in `with` (participants other than you)")
        paths = get_paths()
        try:
            layout = load_layout(layout_ref, paths)
        except (errors.NotFound, errors.UsageError) as exc:
            known = ", ".join(available(paths)) or "none"
            raise errors.UsageError(
                f"cannot spawn with layout {layout_ref!r} ({exc.message}); nothing was forked."
                f" Known layouts: {known}; or pass the path of a .toml layout"
            ) from None
        for name in workers:
            require_agent(agent_words(layout.profile(name).agent))
        layout = _from_origin(layout, workers)
        wave_name = host.client().get_wave(host.wave).name
        facts: dict[tuple[str, ...], object] = {}
        for name in workers:  # a worktree that cannot be made is refused now, before the fork
            profile = layout.profile(name)
            try:
                worktrees.plan(
                    Path(profile.cwd) if profile.cwd else Path.cwd(), profile.worktree, wave_name, name,
                    base=profile.base, setup=profile.setup, env=profile.env, facts=facts,
                )  # fmt: skip
            except errors.FleetError as exc:
                raise type(exc)(f"{exc.message}; nothing was forked") from None
        try:
            token = read_utf8(paths.operator_token).strip()
        except OSError:
            raise errors.Forbidden(
                f"spawning needs the operator's token on this machine ({paths.operator_token} is not"
                " readable); nothing was forked"
            ) from None
        return cls(Client(host.daemon, token), layout, paths)

    def spawn(self, wl: Wavelet) -> str:
        """Start ``wl``'s agents (the resident itself, already running, is skipped); a line for the mind."""
        spawner = Spawner(self.operator, Tmux(server()), self.paths, ready_timeout=READY)
        report = spawner.spawn(wl.id, self.layout)
        started = [p for p in report.panes if p.action != "running"]
        parts = [f"{p.participant} ({'ready' if p.ready else 'not ready: ' + p.why})" for p in started]
        return f"spawned in {wl.path}: " + (", ".join(parts) or "nobody new")
