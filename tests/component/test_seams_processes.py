"""The seams in real processes: short-lived processes import only the features they reach; a worker spawned
from a channel gets the same seams as the CLI's."""

from __future__ import annotations

import subprocess
import sys


def loaded(code: str) -> set[str]:
    """The ``fleet`` modules in ``sys.modules`` once ``code`` ran in a fresh interpreter (``-X
    importtime`` does not see a module imported through ``importlib``, as a seam's named entries are)."""
    script = (
        "import sys\ntry:\n" + "".join(f"    {line}\n" for line in code.splitlines()) + "except SystemExit:\n"
        "    pass\nprint('MODULES', *sorted(m for m in sys.modules if m.startswith('fleet')))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    last = [line for line in run.stdout.splitlines() if line.startswith("MODULES")][-1]
    return set(last.split()[1:])


def fleet_main(*args: str) -> str:
    """Code that runs ``fleet ARGS`` as the script does."""
    return (
        f"import runpy\nsys.argv = ['fleet', *{list(args)!r}]\nrunpy.run_module('fleet', run_name='__main__')"
    )


FEATURES = {
    "fleet.budgets",
    "fleet.permissions",
    "fleet.usage",
    "fleet.worktrees",
    "fleet.summaries",
    "fleet.resident",
    "fleet.resident.plug",
    "fleet.resident.dispatch",
    "fleet.resident.attention",
    "fleet.resident.memory",
    "fleet.campaign",
}


def test_short_lived_processes_import_only_the_features_they_reach() -> None:
    """``fleet post`` and a channel's start import no feature (they are named, not imported); a
    channel's engine asking for its hold-backs imports budgets and no other feature (the dispatch
    only when a fork asks to spawn)."""
    post = loaded(fleet_main("post", "--help"))
    assert {"fleet.cli", "fleet.features", "fleet.seams"} <= post
    assert post & FEATURES == set()
    entry = loaded(fleet_main("channel", "--help"))
    assert {"fleet.seams", "fleet.features"} <= entry
    assert entry & FEATURES == set()
    served = loaded(
        "import fleet.features as f\nf.load_channel()\nimport fleet.channel.server\n"
        "from fleet import seams\nlist(seams.hold_backs)"
    )
    assert "fleet.channel.server" in served
    assert served & FEATURES == {"fleet.budgets"}, "the channel imported features it does not use"


def test_a_residents_channel_imports_its_attention_policy_and_no_other_feature() -> None:
    """``--attention resident`` reaches the policy seam: the resident's policy (and its package) is
    imported, nothing else of the resident; a channel of full attention imports neither."""
    make = (
        "import fleet.features as f\nf.load_channel()\nfrom fleet.delivery.rules import Delivery\n"
        "from fleet.delivery.state import DeliveryState\n"
        "Delivery('resident', DeliveryState(daemon='d', wave='w', participant='resident'), attention={!r})"
    )
    resident = loaded(make.format("resident"))
    assert resident & FEATURES == {"fleet.resident", "fleet.resident.attention"}
    assert loaded(make.format("full")) & FEATURES == set()


def test_a_worker_spawned_from_a_channel_gets_the_same_seams_as_the_clis() -> None:
    """The resident's fork spawns workers from inside its channel (which names only its own
    features): the dispatch loads every built-in, so a worker gets the permission hook, budgets'
    checks and its worktree as a CLI spawn does."""
    code = (
        "import fleet.features as f; f.load_channel()\n"
        "from fleet.resident.dispatch import Dispatch\n"
        "from fleet import seams\n"
        "try:\n"
        "    Dispatch.check(None, 'x', [])\n"
        "except AttributeError:\n"
        "    pass  # (no channel host here: the check stops at the host, after loading)\n"
        "print(*[sorted(s.names()) for s in (seams.launch_settings, seams.workspaces, seams.spawn_checks,"
        " seams.prompt_parts)])\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [
        "['fleet.permissions']",
        "['fleet.worktrees']",
        "['fleet.budgets']",
        "['fleet.resident.plug']",
    ]
