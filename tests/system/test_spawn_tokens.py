"""Spawn revokes only the tokens it minted itself for a participant's earlier panes (docs/design.md
§4): a token the operator minted by hand (for remote use) survives spawns and respawns."""

from __future__ import annotations

import libtmux
import pytest

from fleet import errors, layouts
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths
from fleet.spawn import Spawner
from fleet.tmux import Tmux

CONVERSE = "fleet-standin --reply '{author}: on it ({name}).' --turns 1"


def whoami(daemon: Daemon, token: str) -> str:
    with Client(daemon.url, token, retries=0) as c:
        return c.whoami().principal


def test_spawn_and_respawn_leave_a_hand_minted_token_live(
    daemon: Daemon, operator: Client, tmux_server: libtmux.Server, fleet_env: Paths
) -> None:
    operator.create_wave("demo", ["alice", "bob", "carol"])
    by_hand = operator.mint_token("demo", "bob")  # `fleet token mint demo bob`, for remote use
    sp = Spawner(operator, Tmux(tmux_server), fleet_env, agent=CONVERSE, ready_timeout=20)
    first = sp.spawn("demo/main", layouts.load("trio", fleet_env))
    assert all(p.ready for p in first.panes), first.panes
    assert whoami(daemon, by_hand.token) == "bob"
    wave = operator.get_wave("demo")
    pane_token = sp.token_file(wave, "bob").read_text().strip()
    assert whoami(daemon, pane_token) == "bob"
    # the respawn's new pane gets a new token; the earlier pane's (spawn's own) is revoked
    forced = Spawner(operator, Tmux(tmux_server), fleet_env, agent=None, ready_timeout=20).respawn(
        "demo", "bob", force=True
    )
    assert forced.ready
    new_token = sp.token_file(wave, "bob").read_text().strip()
    assert new_token != pane_token and whoami(daemon, new_token) == "bob"
    with pytest.raises(errors.Unauthorized):
        whoami(daemon, pane_token)
    assert whoami(daemon, by_hand.token) == "bob"
    live = [t for t in operator.list_tokens("demo") if t.participant == "bob" and t.revoked_at is None]
    assert {t.id for t in live} >= {by_hand.id}
    assert len(live) == 2  # the hand-minted one and the new pane's
    assert sp.minted_file(wave, "bob").stat().st_mode & 0o777 == 0o600
