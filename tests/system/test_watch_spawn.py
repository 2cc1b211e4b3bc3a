"""Spawn with the hook transport into real tmux: stand-ins are woken through the hook and answer."""

from __future__ import annotations

import json
from functools import partial

import libtmux
from conftest import retry_until
from test_spawn import standin_log

from fleet import layouts
from fleet.client import Client
from fleet.paths import Paths
from fleet.spawn import Spawner
from fleet.tmux import Tmux
from fleet.watch import hook_settings

TAG = '<channel source="fleet"'


def test_spawn_with_the_hook_transport_delivers_through_the_hook_and_standins_answer(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths
) -> None:
    operator.create_wave("demo", ["alice", "bob"])
    sp = Spawner(
        operator,
        Tmux(tmux_server),
        fleet_env,
        agent="fleet-standin --reply '{author}: on it ({name}).' --turns 1",
        transport="hook",
        ready_timeout=20,
        hook_settings=partial(hook_settings, daemon=operator.base_url),
    )
    rep = sp.spawn("demo/main", layouts.load("pair", fleet_env))
    assert all(p.ready for p in rep.panes), [(p.participant, p.why) for p in rep.panes]
    for p in rep.panes:
        assert not any(a.startswith("--dangerously-load-development-channels") for a in p.argv)
        settings = json.loads(next(a for a in p.argv if a.startswith("--settings=")).split("=", 1)[1])
        assert "--hook" in settings["hooks"]["Stop"][0]["hooks"][0]["command"]
        config = json.loads(next(a for a in p.argv if a.startswith("--mcp-config=")).split("=", 1)[1])
        assert "--no-deliver" in config["mcpServers"]["fleet"]["args"]
    main = operator.resolve("demo/main")
    operator.post(main.id, "alice, bob: please each take one part.")

    def dones() -> set[str]:
        return {b.author for b in operator.read(main.id).blips if b.text.startswith("DONE:")}

    retry_until(lambda: dones() == {"alice", "bob"}, timeout=30, what="two DONEs through the hook")
    for name in ("alice", "bob"):
        events = standin_log(fleet_env, name)
        wakes = [e for e in events if e["event"] == "wake"]
        assert wakes and all(TAG in e["text"] for e in wakes)
        assert not any(e["event"] == "notification" for e in events)  # nothing came over the channel
    screen = "\n".join(tmux_server.cmd("capture-pane", "-p", "-t", rep.panes[0].pane_id).stdout)
    assert "Stop hook feedback" in screen
