"""Real Claude Code sessions take turns: real tmux, the real daemon and channel, only the model scripted.

Every session here is the pinned Claude Code (``tests/realclaude.py``: it fails, never skips, when
that binary is missing), spawned by ``fleet spawn`` into a real tmux server, talking to a scripted
Messages API server (``tests/scripted_model``). What is asserted comes from two records that fleet
does not write: each session's own transcript (what entered the model's context) and the scripted
model's request log (what the model was asked), checked against the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from realclaude import RealFleet
from scripted_model import ChannelBlock, Script, Transcript, on_message, post, rule, steps

from fleet.client import Client

RealFleetFactory = Callable[..., RealFleet]

KICKOFF = "alice: find out from bob which port the daemon listens on, then finish."
ASK = "bob: which port does the daemon listen on?"
ANSWER = "alice: port 8086."
BOB_DONE = "DONE: answered alice."
ALICE_DONE = "DONE: bob says the daemon listens on port 8086."


def conversation() -> Script:
    """alice asks bob, bob answers and finishes, alice finishes; carol only listens."""
    return Script(
        {
            "alice": [
                rule(on_message(author="operator", contains="alice:"), post("{wavelet}", ASK)),
                rule(on_message(author="bob", contains=ANSWER), post("{wavelet}", ALICE_DONE)),
            ],
            "bob": [
                rule(
                    on_message(author="alice", contains=ASK),
                    steps(post("{wavelet}", ANSWER), post("{wavelet}", BOB_DONE)),
                ),
            ],
        }
    )


def expected_store(blips: list[Any]) -> None:
    """w/main holds exactly: the wave's creation, the kickoff, the question, the answer, two DONEs."""
    got = [(b.author, b.kind, b.text) for b in blips]
    assert got[0][:2] == ("system", "system") and got[0][2].startswith("operator created wave w")
    assert got[1:4] == [
        ("operator", "message", KICKOFF),
        ("alice", "message", ASK),
        ("bob", "message", ANSWER),
    ]
    assert sorted(got[4:]) == [("alice", "message", ALICE_DONE), ("bob", "message", BOB_DONE)]


def converse(real: RealFleet, operator: Client, *spawn_options: str) -> None:
    """Spawn alice, bob and carol, post the kickoff, wait for both DONEs."""
    operator.create_wave("w", ["alice", "bob", "carol"])
    real.spawn("w/main", real.layout(["alice", "bob", "carol"]), *spawn_options)
    operator.post(operator.resolve("w/main").id, KICKOFF)

    def done() -> bool:
        return sum(b.text.startswith("DONE:") for b in real.blips("w/main")) == 2

    real.wait(done, "both DONE blips")
    expected_store(real.blips("w/main"))


def assert_each_context_got_the_others_blips_once_in_order(
    real: RealFleet, reached: Callable[[Transcript], list[ChannelBlock]]
) -> None:
    """Every other-authored blip of w/main reached each session's context exactly once, in order;
    none of its own did; no session posted in reply to a system blip."""
    blips = real.blips("w/main")
    for who in ("alice", "bob", "carol"):
        others = [b.id for b in blips if b.author != who]
        t = real.transcript(who)
        real.wait(lambda t=t, others=others: [c.blip_id for c in reached(t)] == others,
                  f"every blip of others in {who}'s context, once, in order")  # fmt: skip
        mine = {b.id for b in blips if b.author == who}
        assert not mine & {c.blip_id for c in [*t.enqueued(), *reached(t)]}, f"{who} was handed its own blip"
    posts = [r for r in real.requests() if r.reply and r.reply.tool_uses]
    assert len(posts) == 4  # the question, the answer, two DONEs
    for req in posts:
        assert req.reply and req.reply.trigger is not None
        assert req.reply.trigger.blip_kind == "message", f"{req.participant} replied to {req.reply.trigger}"


def test_three_sessions_converse_over_channels(real_fleet: RealFleetFactory, operator: Client) -> None:
    real = real_fleet(channels=True, script=conversation())
    converse(real, operator)
    assert_each_context_got_the_others_blips_once_in_order(real, Transcript.delivered)
    assert all("Channel notifications registered" in real.debug_log(who) for who in ("alice", "bob", "carol"))


def test_the_same_conversation_over_the_hook_transport_without_channels(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    real = real_fleet(channels=False, script=conversation())
    converse(real, operator, "--transport", "hook")
    assert_each_context_got_the_others_blips_once_in_order(real, Transcript.hook_blocks)
    for who in ("alice", "bob", "carol"):
        t = real.transcript(who)
        assert t.hook_feedback() and not t.delivered(), f"{who} was woken other than by the hook"
