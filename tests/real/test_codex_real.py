"""The real Codex CLI as a fleet agent, over the scripted model's Responses dialect (docs/agents.md).

Each test runs the pinned ``codex`` (0.169.0) in a real tmux pane with the real channel injected
inline (``-c mcp_servers.fleet.…``), the real daemon, and — in the mixed wave — the pinned Claude
Code beside it against the same scripted model. Never skipped: a missing Codex fails, naming the
install.
"""

from __future__ import annotations

import json
import time
from typing import Any

from realcodex import mixed_layout, rollout_lines, user_texts
from scripted_model import Script, on_message, reply, rule

from fleet.delivery.state import DeliveryState
from fleet.wire import loads


def _state(world: Any, participant: str) -> DeliveryState | None:
    from fleet.delivery.state import StateFile

    sf = StateFile(world.paths.channels, world.op.base_url, "w", participant)
    try:
        return loads(DeliveryState, sf.path.read_bytes())
    except (OSError, ValueError):
        return None


def _idle(world: Any, who: str) -> bool:
    rows = {p.participant: p for p in world.op.presence("w")}
    row = rows.get(who)
    return row is not None and row.agent is not None and row.agent.kind == "idle"


def test_a_codex_agent_woken_while_idle_takes_the_blip_and_answers(real_fleet: Any, codex: str) -> None:
    script = Script({"bob": [rule(on_message(author="operator"), reply("operator: bob here, 8086"))]})
    world = real_fleet(script=script)
    world.op.create_wave("w", ["bob"])
    report = world.spawn("w/main", mixed_layout(world, codex, {"bob": "codex"}))
    (pane,) = report["panes"]
    assert pane["kind"] == "codex" and pane["limits"] and "codex queue" in pane["route"]
    world.wait(lambda: _idle(world, "bob"), "bob idle after its first turn", timeout=90)
    posted = time.monotonic()
    blip = world.op.post(world.op.resolve("w/main").id, "bob: which port?")
    got = world.wait(
        lambda: [b for b in world.blips("w/main") if b.author == "bob"], "bob's answer", timeout=90
    )
    assert got[0].text == "operator: bob here, 8086"
    woke = next(r for r in world.requests("bob") if any(e.blip_id == blip.id for e in r.channel_events()))
    assert "You are bob" in json.dumps((woke.body or {}).get("input"))  # identity in the wake's request
    print(f"idle wake: post -> in the model's context {woke.at - posted:.2f}s")
    # the rollout shows it entered, verbatim, once; the ledger confirmed it
    entered = [t for t in user_texts(rollout_lines(world, "bob")) if blip.id in t]
    assert len(entered) == 1 and "bob: which port?" in entered[0]
    state = world.wait(lambda: (s := _state(world, "bob")) and not s.pending and s, "bob's wake confirmed")
    assert state.route == "channel" and state.confirmed_count >= 1
    status = world.fleet("status", "w", "--json")
    (row,) = json.loads(status.stdout)["rows"]
    assert row["agent"] == "codex" and row["limits"], status.stdout
