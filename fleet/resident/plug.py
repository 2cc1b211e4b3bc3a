"""The resident on the core's seams (:mod:`fleet.seams`), named by :mod:`fleet.features`.

Its operating prompt joins spawn's prompt parts (for the ``resident`` participant only), and a worker
per forked wavelet is the channel's ``wavelet_fork`` spawn. Light on purpose, apart from the rest of
the resident: the dispatch (spawn, tmux) is imported only when a fork asks to spawn.
"""

from __future__ import annotations

from fleet import seams
from fleet.paths import read_utf8
from fleet.resident import RESIDENT, prompt_path


def prompt_part(launch: seams.Launch) -> str:
    """The wave's resident's operating prompt (docs/resident.md), '' for anyone else."""
    if launch.participant != RESIDENT:
        return ""
    try:
        return "\n" + read_utf8(prompt_path(launch.paths, launch.wave.id))
    except OSError:
        return ""


def fork_spawner(host: seams.ToolHost, layout_ref: str, workers: list[str]) -> seams.ForkSpawn:
    """Check a worker spawn for a fork (:meth:`fleet.resident.dispatch.Dispatch.check`)."""
    from fleet.resident.dispatch import Dispatch

    return Dispatch.check(host, layout_ref, workers)


seams.prompt_parts.add(__name__, prompt_part)
seams.fork_spawners.add(__name__, fork_spawner)
