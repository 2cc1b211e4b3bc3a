"""Real Claude Code sessions take turns: real tmux, the real daemon and channel, only the model scripted.

Every session here is the pinned Claude Code (``tests/realclaude.py``: it fails, never skips, when
that binary is missing), spawned by ``fleet spawn`` into a real tmux server, talking to a scripted
Messages API server (``tests/scripted_model``). What is asserted comes from two records that fleet
does not write: each session's own transcript (what entered the model's context) and the scripted
model's request log (what the model was asked), checked against the store.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from realclaude import RealFleet
from scripted_model import (
    ChannelBlock,
    Script,
    Transcript,
    fork,
    on_message,
    on_prompt,
    post,
    rule,
    say,
    steps,
    surface,
)

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
        real.wait(partial(lambda t, others: [c.blip_id for c in reached(t)] == others, t, others),
                  f"every blip of others in {who}'s context, once, in order")  # fmt: skip
        mine = {b.id for b in blips if b.author == who}
        assert not mine & {c.blip_id for c in [*t.enqueued(), *reached(t)]}, f"{who} was handed its own blip"
    posts = [r for r in real.requests() if r.reply and r.reply.tool_uses]
    assert len(posts) == 4  # the question, the answer, two DONEs
    for req in posts:
        assert req.reply and req.reply.trigger is not None
        assert req.reply.trigger.blip_kind == "message", f"{req.participant} replied to {req.reply.trigger}"


def test_three_sessions_converse_over_channels(real_fleet: RealFleetFactory, operator: Client) -> None:
    """Three sessions take turns over channel notifications (echo suppression, order, the contract)."""
    real = real_fleet(channels=True, script=conversation())
    converse(real, operator)
    assert_each_context_got_the_others_blips_once_in_order(real, Transcript.delivered)
    assert all("Channel notifications registered" in real.debug_log(who) for who in ("alice", "bob", "carol"))


def test_the_same_conversation_over_the_hook_transport_without_channels(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """Channels unavailable, ``--transport hook``: every wake is the asyncRewake hook's feedback."""
    real = real_fleet(channels=False, script=conversation())
    converse(real, operator, "--transport", "hook")
    assert_each_context_got_the_others_blips_once_in_order(real, Transcript.hook_blocks)
    for who in ("alice", "bob", "carol"):
        t = real.transcript(who)
        assert t.hook_feedback() and not t.delivered(), f"{who} was woken other than by the hook"


def test_without_the_channels_preview_the_default_transport_completes_through_the_hook_and_says_so(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """What a user whose account lacks the channels preview gets with the default transport (auto):
    Claude Code drops every push; fleet sees no receipt, says so at spawn and in ``fleet status``,
    and the hook delivers — the conversation completes, each blip in each context once."""
    real = real_fleet(channels=False, script=conversation())
    operator.create_wave("w", ["alice", "bob", "carol"])
    report = real.spawn("w/main", real.layout(["alice", "bob", "carol"]))
    assert {p["route"] for p in report["panes"]} == {"channels unavailable here — woken by the hook"}
    assert "woken by the hook" in real.spawned
    main = operator.resolve("w/main").id
    operator.post(main, KICKOFF)
    real.wait(lambda: sum(b.text.startswith("DONE:") for b in real.blips("w/main")) == 2, "both DONE blips")
    expected_store(real.blips("w/main"))
    assert_each_context_got_the_others_blips_once_in_order(real, Transcript.hook_blocks)
    status = json.loads(real.fleet("status", "w", "--json").stdout)
    routes = {r["participant"]: r["route"] for r in status["rows"]}
    assert routes == {"alice": "hook", "bob": "hook", "carol": "hook"}, status
    table = real.fleet("status", "w").stdout
    assert "channels unavailable here" in table, table


def test_without_the_channels_preview_a_channel_only_spawn_is_an_error_naming_the_way_out(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """``--transport channel`` where Claude Code has no channels: nothing could ever wake the
    session, so spawn's report says so for the pane and exits non-zero."""
    real = real_fleet(channels=False)
    operator.create_wave("w", ["alice"])
    done = real.fleet(
        "spawn", "w/main", "--layout", real.layout(["alice"]), "--transport", "channel", "--json"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    (pane,) = json.loads(done.stdout)["panes"]
    assert pane["ready"] is False and pane["route"] == "channels unavailable here and no hook installed"
    assert "nothing can wake this session" in pane["why"] and "--transport auto" in pane["why"]


CAP = 3


def test_a_runaway_pair_stops_at_the_cap(real_fleet: RealFleetFactory, operator: Client) -> None:
    """Two agents that answer every message of the other (and the operator's) are stopped by the cap."""
    real = real_fleet(
        channels=True,
        script=Script(
            {
                "alice": [rule(on_message(not_author="alice"), post("{wavelet}", "bob: and another thing"))],
                "bob": [rule(on_message(not_author="bob"), post("{wavelet}", "alice: and another thing"))],
            }
        ),
    )
    operator.create_wave("w", ["alice", "bob"])
    real.spawn("w/main", real.layout(["alice", "bob"], defaults={"cap": CAP}))
    operator.post(operator.resolve("w/main").id, "alice, bob: talk it through between you.")

    def notices(who: str) -> list[ChannelBlock]:
        return [c for c in real.transcript(who).delivered() if c.kind == "cap"]

    def quiet() -> bool:  # both capped and neither has a tool call in flight
        last = [real.requests(who)[-1:] for who in ("alice", "bob")]
        return all(notices(who) for who in ("alice", "bob")) and all(
            r and r[0].reply and not r[0].reply.tool_uses for r in last
        )

    real.wait(quiet, "both agents capped and idle")
    posts = [b for b in real.blips("w/main") if b.author in ("alice", "bob")]
    assert len(posts) <= 2 * CAP + 2, [b.text for b in posts]
    for who in ("alice", "bob"):
        assert len(notices(who)) == 1, notices(who)
        assert notices(who)[0].author == "fleet"


def test_the_operators_in_band_session_wakes_every_rostered_session(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """``fleet claude`` is a real session too: what the operator asks there wakes the roster."""
    question = "alice, bob: what do you need from me to finish?"
    script = Script({"operator": [rule(on_prompt(contains="ask the team"), post("w/main", question))]})
    real = real_fleet(channels=True, script=script)
    operator.create_wave("w", ["alice", "bob"])
    real.spawn("w/main", real.layout(["alice", "bob"]))
    pane = real.operator_session()
    real.type_into(pane, "ask the team what they need")
    for who in ("alice", "bob"):  # in its context and in the model's request, once (written in
        t = real.transcript(who)  # either order: poll both)

        def woken(t: Transcript = t, who: str = who) -> bool:
            asked = [e.text for r in real.requests(who) for e in r.channel_events() if e.author == "operator"]
            return asked == [question] == [c.text for c in t.delivered() if c.author == "operator"]

        real.wait(woken, f"{who} woken by the operator's question")
    (asked,) = [b for b in real.blips("w/main") if b.author == "operator"]
    assert asked.text == question
    op = real.transcript("operator")
    real.wait(lambda: op.prompts() == ["ask the team what they need"], "the typed prompt in the transcript")


def test_a_killed_session_resumes_with_its_history_and_no_replay(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """kill -9, then ``fleet respawn``: ``--resume`` brings the history back; the cursors bring no replay."""
    script = Script(
        {
            "alice": [
                rule(on_message(author="operator", contains="alice: find out"), post("{wavelet}", ASK)),
                rule(on_message(author="bob", contains=ANSWER), say("Noted; waiting for the operator.")),
                rule(on_message(author="operator", contains="alice: report"), post("{wavelet}", ALICE_DONE)),
            ],
            "bob": [rule(on_message(author="alice", contains=ASK), post("{wavelet}", ANSWER))],
        }
    )
    real = real_fleet(channels=True, script=script)
    operator.create_wave("w", ["alice", "bob"])
    real.spawn("w/main", real.layout(["alice", "bob"]))
    main = operator.resolve("w/main").id
    operator.post(main, KICKOFF)
    alice = real.transcript("alice")

    def heard_the_answer() -> bool:
        last = real.requests("alice")[-1:]
        return (
            any(c.text == ANSWER for c in alice.delivered())
            and bool(last)
            and last[0].reply is not None
            and last[0].reply.text == ("Noted; waiting for the operator.")
        )

    real.wait(heard_the_answer, "alice hearing bob's answer and ending her turn")
    before = [c.blip_id for c in alice.delivered()]
    os.kill(real.pane_pid("alice"), signal.SIGKILL)
    real.wait(lambda: real.pane_dead("alice"), "alice's pane dead")
    operator.post(main, "alice: report what you found.")
    resumed_at = time.monotonic()
    done = real.fleet("respawn", "w/main", "alice", "--json")
    assert done.returncode == 0, done.stderr
    argv = json.loads(done.stdout)["argv"]
    assert argv[argv.index("--resume") + 1] == real.session_id("alice") and "--session-id" not in argv

    real.wait(lambda: any(b.text == ALICE_DONE for b in real.blips("w/main")), "alice's DONE after resume")
    first = next(r for r in real.requests("alice") if r.at > resumed_at)
    for earlier in (KICKOFF, ASK, ANSWER):
        assert first.contains(earlier), f"the first request after resume lacks {earlier!r}"
    assert [e.text for e in first.channel_events()] == ["alice: report what you found."]
    delivered = [c.blip_id for c in alice.delivered()]
    assert delivered[: len(before)] == before and len(delivered) == len(set(delivered)), delivered
    after = [e.blip_id for r in real.requests("alice") if r.at > resumed_at for e in r.channel_events()]
    assert not set(after) & set(before), "a blip delivered before the kill was delivered again"


def test_a_fork_from_inside_a_session_reaches_the_running_peer_and_its_surface_the_parent(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """A session forks a private wavelet: the peer's running channel picks it up; the surface wakes main."""
    conclusion = "The secret is settled: it is 42."
    script = Script(
        {
            "alice": [
                rule(
                    on_message(author="operator"),
                    steps(
                        fork("w/main", "secret", ["bob"], private=True),
                        post("w/secret", "bob: what is the secret?"),
                    ),
                ),
                rule(on_message(author="bob", wavelet="secret"), surface("w/secret", conclusion)),
            ],
            "bob": [
                rule(on_message(author="alice", wavelet="secret"), post("{wavelet}", "alice: it is 42."))
            ],
        }
    )
    real = real_fleet(channels=True, script=script)
    operator.create_wave("w", ["alice", "bob", "carol"])
    real.spawn("w/main", real.layout(["alice", "bob", "carol"]))
    bob_pid = real.pane_pid("bob")
    operator.post(operator.resolve("w/main").id, "alice: settle the secret with bob privately.")

    def surfaced() -> list[Any]:
        return [b for b in real.blips("w/main") if b.kind == "surface"]

    real.wait(surfaced, "alice's surface in w/main")
    (surface_blip,) = surfaced()
    assert surface_blip.author == "alice" and surface_blip.text == conclusion
    secret = real.blips("w/secret")
    assert [(b.author, b.text) for b in secret if b.kind == "message"] == [
        ("alice", "bob: what is the secret?"),
        ("bob", "alice: it is 42."),
    ]
    bob = real.transcript("bob")
    # bob's running session got the new wavelet's blips (its fork provenance and alice's question)
    want = [b.id for b in secret if b.author != "bob"]  # (the transcript may lag the request log)
    real.wait(lambda: [c.blip_id for c in bob.delivered() if c.wavelet == "w/secret"] == want,
              "the secret's blips in bob's context, once, in order")  # fmt: skip
    assert real.pane_pid("bob") == bob_pid and len(real.requests("bob")) >= 2
    for who in ("bob", "carol"):  # the parent's roster is woken by the surface
        real.wait(
            partial(lambda who: any(c.blip_id == surface_blip.id and c.kind == "surface"
                                    for c in real.transcript(who).delivered()), who),
            f"{who} woken by the surface",
        )  # fmt: skip
    assert not [c for c in real.transcript("carol").enqueued() if c.wavelet == "w/secret"]  # private


def test_targeted_attention_gives_full_text_only_to_what_concerns_the_participant(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """carol (targeted) is a real session; the others' blips are posted through the store."""
    real = real_fleet(channels=True)
    operator.create_wave("w", ["alice", "bob", "carol", "dave"])
    real.spawn("w/main", real.layout(["carol"], defaults={"attention": "targeted"}))
    main = operator.resolve("w/main").id
    chatter = " and the rest of this long remark goes on well past the digest's excerpt, number "
    posted = {
        "chat1": operator.post(main, "bob: the parser is done" + chatter + "one.", as_="alice"),
        "op": operator.post(main, "Operator here: status, everyone?"),
        "chat2": operator.post(main, "alice: tests are green" + chatter + "two.", as_="bob"),
        "named": operator.post(main, "carol: please review the parser.", as_="bob"),
    }
    side = operator.fork(main, "side", with_=["bob", "dave"], as_="bob")
    posted["surface"] = operator.surface(side.id, "Conclusion from side: ship it.", as_="dave")
    full = {posted[k].id for k in ("op", "named", "surface")}
    others = [b for b in real.blips("w/main") if b.author != "carol"]
    carol = real.transcript("carol")

    def frames() -> list[ChannelBlock]:
        got = carol.delivered()
        listed = {i for c in got for i in c.blip_ids}
        return got if listed >= {b.id for b in others} else []

    got = real.wait(frames, "every blip of w/main in carol's context")
    ids = [i for c in got for i in c.blip_ids]
    assert len(ids) == len(set(ids)), "a blip reached carol twice"
    by_id = {b.id: b for b in others}
    for c in got:
        if c.kind == "digest":
            for i in c.blip_ids:
                assert i not in full and f"[{i}]" in c.text
                if len(by_id[i].text) > 70:
                    assert by_id[i].text not in c.text, "a digest line carried a blip's full text"
        else:
            assert c.blip_id in full and c.text == by_id[c.blip_id].text
    assert {c.blip_id for c in got if c.kind != "digest"} == full
    context = "\n".join(r.raw.decode(errors="replace") for r in real.requests("carol"))
    for key in ("chat1", "chat2"):
        assert json.dumps(posted[key].text)[1:-1] not in context, f"{key} reached the model in full"
