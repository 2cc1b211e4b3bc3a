"""A real Claude Code session passing its token budget, over the scripted model.

The scripted model's ``usage`` figures are exact and Claude Code writes them into the session's
transcript, which the participant's channel reads at each delivery (``fleet.budgets``). What the
session received is read from its own transcript.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from realclaude import RealFleet
from scripted_model import Script, Transcript, Usage, on_message, post, rule
from scripted_model.server import Request

from fleet.client import Client

RealFleetFactory = Callable[..., RealFleet]

BUDGET = 100_000
BIG_INPUT = 150_000
BIG = Usage(input_tokens=BIG_INPUT, output_tokens=10)
"""What alice's first answer reports: past the budget in one response."""


def tokens(requests: list[Request]) -> int:
    """Every token the model reported for these requests (what a tokens budget counts)."""
    return sum(
        sum(req.reply.usage.wire(req.size).values())
        for req in requests
        if req.kind == "turn" and req.reply is not None and req.reply.error is None
    )


LATE = {"FLEET_FAULT_RECEIPTS_LAG": "2"}
"""The channel sees its pushes in the transcript only 2 s late (Claude Code writes it behind the
session): the budget is reached while the route is still unknown, a push out and not yet taken."""

ROUTES: dict[str, tuple[bool, tuple[str, ...], Any, dict[str, str]]] = {
    "channel": (True, (), Transcript.delivered, {}),
    "channel-transcript-late": (True, (), Transcript.delivered, LATE),
    "auto-without-channels": (False, (), Transcript.hook_blocks, {}),
    "hook": (False, ("--transport", "hook"), Transcript.hook_blocks, {}),
}
"""How the session is woken -> (channels preview on, spawn's extra options, where its blocks are,
the channel's environment)."""


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_session_past_its_token_budget_is_held_told_once_and_gets_every_held_blip_once_raised(
    real_fleet: RealFleetFactory, operator: Client, route: str
) -> None:
    """The same on each route that wakes a session: pushes (channels), the hook of ``--transport
    auto`` where Claude Code takes no push, and ``--transport hook``. On the hook routes the one
    notice comes in the hook's feedback, and it wakes the session once: no wake while held."""
    channels, extra, received, env = ROUTES[route]
    script = Script(
        {
            "alice": [
                rule(
                    on_message(author="operator", contains="alice: one"),
                    replace(post("{wavelet}", "DONE: one"), usage=BIG),
                ),
                rule(on_message(author="operator", contains="alice: two"), post("{wavelet}", "DONE: two")),
                rule(
                    on_message(author="operator", contains="alice: three"), post("{wavelet}", "DONE: three")
                ),
            ]
        }
    )
    real = real_fleet(channels=channels, script=script)
    operator.create_wave("w", ["alice"])
    main = operator.resolve("w/main")
    limit = {"budget": {"tokens": BUDGET}}
    layout = real.layout(["alice"], defaults=limit, participants={"alice": {"env": env}})
    real.spawn("w/main", layout, *extra)
    (budget,) = operator.budgets("w")
    assert (budget.participant, budget.tokens, budget.source) == ("alice", BUDGET, "layout")
    transcript = real.transcript("alice")

    def blocks(kind: str | None = None) -> list[Any]:
        return [b for b in received(transcript) if kind is None or b.kind == kind]

    def told() -> list[Any]:
        return [
            b for b in real.blips("w/main") if b.kind == "system" and b.text.startswith("operator: alice ")
        ]

    operator.post(main.id, "alice: one")
    real.wait(lambda: any(b.text == "DONE: one" for b in real.blips("w/main")), "alice's DONE: one")
    # a response counts once Claude Code has written it to the transcript (the channel reads no other
    # record of it): the turn is over and recorded before the next blip comes
    real.wait(
        lambda: transcript.settled() and sum(u["input_tokens"] for u in transcript.usage()) >= BIG_INPUT,
        "alice's first turn recorded",
    )
    # alice's spend is past the budget now: at the next delivery its channel holds, tells it once and
    # posts one blip naming the operator
    operator.post(main.id, "alice: two")
    operator.post(main.id, "alice: three")
    notice = real.wait(lambda: blocks("budget"), "the budget notice in alice's context")[0]
    assert notice.author == "fleet" and f"{BUDGET:,} tokens" in notice.text
    assert "held, not lost" in notice.text
    (blip,) = real.wait(told, "the blip naming the operator")
    assert blip.actor == "alice" and f"{BUDGET:,} tokens" in blip.text
    # what it says was spent is exactly what the model reported for the requests recorded by then
    turns = [r for r in real.requests("alice") if r.kind == "turn"]
    spent = int(blip.text.split("; ", 1)[1].split(" tokens spent")[0].replace(",", ""))
    assert spent >= BIG_INPUT
    assert spent in {tokens(turns[:k]) for k in range(len(turns) + 1)}, (spent, turns)
    real.wait(transcript.settled, "alice done with the notice")
    wakes = len(transcript.hook_feedback()) + len(transcript.delivered())
    held = real.wait(lambda: _budget_column(real, "alice").endswith(" held"), "fleet status: alice held")
    every = tokens([r for r in real.requests("alice") if r.kind == "turn"])
    assert held and _budget_column(real, "alice") == f"{every / 1000:.1f}k/100.0k tok held"
    assert [b.text for b in blocks("message")] == ["alice: one"]  # nothing after the budget passed
    usage = json.loads(real.fleet("usage", "w", "--json").stdout)
    (st,) = usage["budgets"]
    assert st["spent"][0]["reached"] and st["spent"][0]["tokens"] >= BIG_INPUT

    assert len(transcript.hook_feedback()) + len(transcript.delivered()) == wakes  # held: no wake since
    raised = real.fleet("budget", "set", "w", "alice", "--tokens", "10000000")
    assert raised.returncode == 0, raised.stderr
    real.wait(lambda: any(b.text == "DONE: three" for b in real.blips("w/main")), "alice's DONE: three")
    real.wait(lambda: len(blocks("message")) == 3, "the held blips in alice's context")
    assert [b.text for b in blocks("message")] == ["alice: one", "alice: two", "alice: three"]
    ids = [b.blip_id for b in blocks("message")]
    assert len(set(ids)) == 3  # each once
    assert len(blocks("budget")) == 1 and len(told()) == 1
    assert operator.budgets("w")[0].reached == []


def _budget_column(real: RealFleet, who: str) -> str:
    """``fleet status``'s budget of ``who`` (``""``: none, or status failed)."""
    done = real.fleet("status", "w", "--json")
    if done.returncode != 0:
        return ""
    rows: list[dict[str, Any]] = json.loads(done.stdout)["rows"]
    return next((str(r["budget"] or "") for r in rows if r["participant"] == who), "")
