"""The delivery core against plain blip lists: cursors, echo, cap, failed pushes, the state file."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet import errors, seams, wire
from fleet.channel.tools import instructions
from fleet.delivery import (
    EXCERPT_CHARS,
    HOLD_MAX_LINES,
    Action,
    Decision,
    Delivery,
    DeliveryState,
    Rule,
    digest_ids,
    digest_line,
    digest_text,
    excerpt,
    exhaustion_notice,
    mentions,
    route,
)
from fleet.delivery.config import TransportConfig, check
from fleet.delivery.rules import attentions, check_attention, policy_of
from fleet.ids import IdMinter
from fleet.layouts import parse
from fleet.models import Blip

DAEMON = "http://127.0.0.1:8086"


class Stream:
    """Mints blips with strictly increasing ids, like the daemon."""

    def __init__(self) -> None:
        self.ids = IdMinter()

    def blip(self, wavelet: str, author: str, text: str = "", kind: str = "message") -> Blip:
        return wire.load(
            Blip,
            {
                "id": self.ids.mint(),
                "wavelet_id": wavelet,
                "wave_id": "wave-1",
                "author": author,
                "kind": kind,
                "text": text or f"{author} says hi",
                "created_at": "2026-01-01T00:00:00Z",
            },
        )


def fresh(participant: str = "alice") -> DeliveryState:
    return DeliveryState(daemon=DAEMON, wave="w", participant=participant)


def run(core: Delivery, blips: list[Blip], fail_at: int | None = None) -> list[Decision]:
    """Process ``blips``; the push numbered ``fail_at`` (0-based) fails. Returns the pushes made."""
    pushed: list[Decision] = []

    def push(d: Decision) -> bool:
        if fail_at is not None and len(pushed) == fail_at:
            return False
        pushed.append(d)
        return True

    core.process(blips, push)
    return pushed


def test_delivers_others_and_steps_over_own_blips() -> None:
    s = Stream()
    blips = [s.blip("a", "bob"), s.blip("a", "alice"), s.blip("a", "carol")]
    core = Delivery("alice", fresh())
    pushed = run(core, blips)
    assert [d.blip.author for d in pushed] == ["bob", "carol"]
    assert all(d.action is Action.DELIVER for d in pushed)
    assert core.cursors == {"a": blips[-1].id}
    # the echo alone still moves the cursor
    own = s.blip("a", "alice")
    assert run(core, [own]) == []
    assert core.cursors == {"a": own.id}


def test_cursor_per_wavelet_never_steps_over_a_quiet_wavelet() -> None:
    s = Stream()
    quiet = s.blip("quiet", "bob", "old but unseen")
    busy = [s.blip("busy", "bob") for _ in range(3)]
    core = Delivery("alice", fresh())
    run(core, busy)
    # a feed hands out the quiet wavelet's blip later; its id is older than the busy cursor
    assert [d.blip.id for d in run(core, [quiet])] == [quiet.id]
    assert core.cursors == {"busy": busy[-1].id, "quiet": quiet.id}


def test_failed_push_keeps_the_cursor_and_retries() -> None:
    s = Stream()
    blips = [s.blip("a", "bob", f"m{i}") for i in range(4)]
    core = Delivery("alice", fresh())
    first = run(core, blips, fail_at=2)
    assert [d.blip.text for d in first] == ["m0", "m1"]
    assert core.cursors == {"a": blips[1].id}
    # the same batch again (a feed from the kept cursor would send only the rest; either works)
    second = run(core, blips)
    assert [d.blip.text for d in second] == ["m2", "m3"]
    assert core.cursors == {"a": blips[3].id}


def test_cap_one_notice_then_silent_advance_then_operator_resets() -> None:
    s = Stream()
    core = Delivery("alice", fresh(), cap=3)
    flood = [s.blip("a", "bob", f"m{i}") for i in range(6)]
    pushed = run(core, flood)
    assert [d.action for d in pushed] == [Action.DELIVER] * 3 + [Action.NOTICE]
    assert pushed[3].blip.text == "m3"  # the notice stands in for the first blip past the cap
    assert core.cursors == {"a": flood[-1].id}  # m4, m5 stepped over silently
    assert core.state.exhausted == {"a": flood[3].id}

    # still capped: nothing more, not even a second notice
    assert run(core, [s.blip("a", "bob")]) == []
    # another wavelet has its own count
    assert [d.action for d in run(core, [s.blip("b", "bob")])] == [Action.DELIVER]

    op = s.blip("a", "operator", "carry on")
    after = [s.blip("a", "bob", f"n{i}") for i in range(4)]
    pushed = run(core, [op, *after])
    assert [(d.action, d.blip.text) for d in pushed] == [
        (Action.DELIVER, "carry on"),
        (Action.DELIVER, "n0"),
        (Action.DELIVER, "n1"),
        (Action.NOTICE, "n2"),
    ]


def test_operator_own_blips_reset_the_cap_without_echo() -> None:
    s = Stream()
    core = Delivery("operator", fresh("operator"), cap=1)
    assert [d.action for d in run(core, [s.blip("a", "bob"), s.blip("a", "bob")])] == [
        Action.DELIVER,
        Action.NOTICE,
    ]
    assert run(core, [s.blip("a", "operator")]) == []  # echo, but the count starts over
    assert [d.action for d in run(core, [s.blip("a", "bob")])] == [Action.DELIVER]


def test_cap_zero_means_unlimited() -> None:
    s = Stream()
    core = Delivery("alice", fresh(), cap=0)
    assert len(run(core, [s.blip("a", "bob") for _ in range(100)])) == 100


def test_stale_blips_change_nothing() -> None:
    s = Stream()
    blips = [s.blip("a", "bob") for _ in range(2)]
    core = Delivery("alice", fresh(), cap=5)
    run(core, blips)
    core.mark_saved()
    assert run(core, blips) == []
    assert not core.dirty
    assert core.state.delivered == {"a": 2}


def test_retain_forgets_left_wavelets() -> None:
    s = Stream()
    core = Delivery("alice", fresh(), cap=1)
    run(core, [s.blip("a", "bob"), s.blip("a", "bob"), s.blip("b", "bob")])
    core.retain(["b"])
    assert set(core.cursors) == {"b"}
    assert "a" not in core.state.delivered and "a" not in core.state.exhausted


def test_notice_names_the_wavelet_and_the_way_out() -> None:
    text = exhaustion_notice("w/main", 40)
    assert "w/main" in text and "40" in text and "wavelet_read" in text and "operator" in text


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["alice", "bob", "carol"])),
        max_size=40,
    ),
    st.lists(st.integers(min_value=0, max_value=5), max_size=8),
)
def test_every_blip_of_others_is_pushed_exactly_once_despite_failures(
    spec: list[tuple[str, str]], failures: list[int]
) -> None:
    """Uncapped: whatever pushes fail and however often it restarts from the saved state, each blip
    of another author is pushed exactly once and in per-wavelet order; own blips never."""
    s = Stream()
    blips = [s.blip(w, a) for w, a in spec]
    saved = wire.dumps(fresh())
    delivered: list[str] = []
    for fail_at in [*failures, None]:
        core = Delivery("alice", wire.loads(DeliveryState, saved), cap=0)
        # a feed sends only blips after each cursor; the rest are what this "restart" sees
        todo = [b for b in blips if b.id > core.cursors.get(b.wavelet_id, "")]
        delivered += [d.blip.id for d in run(core, todo, fail_at=fail_at)]
        saved = wire.dumps(core.state)
    assert delivered == [b.id for b in blips if b.author != "alice"]


# ---------------------------------------------------------------- the state file


# ---------------------------------------------------------------- targeted attention (docs/design.md §4)


@pytest.mark.parametrize(
    ("text", "hit"),
    [
        ("bob", True),
        ("Bob, can you check the parser?", True),
        ("ping @bob about it", True),
        ("see [[bob]]", True),
        ("BOB: status?", True),
        ("(bob) and carol", True),
        ("ask bob.", True),
        ("bob's branch", True),
        ("bobby will do it", False),
        ("the bob-2 run", False),
        ("bob_x is another agent", False),
        ("jim-bob says hi", False),
        ("kabob", False),
        ("", False),
    ],
)
def test_mentions_word_boundary_case_insensitive_or_wiki_link(text: str, hit: bool) -> None:
    assert mentions(text, "bob") is hit


def test_mentions_of_a_hyphenated_name_are_not_mentions_of_its_prefix() -> None:
    assert mentions("bob-2: over to you", "bob-2")
    assert mentions("[[bob-2]]", "bob-2")
    assert not mentions("bob: over to you", "bob-2")
    assert not mentions("bob-2: over to you", "bob")
    assert not mentions("bob-22 is busy", "bob-2")


def test_route_rules_first_match_wins() -> None:
    s = Stream()
    assert route(s.blip("a", "system", "operator invited bob", kind="system"), "bob") is Rule.SYSTEM
    assert route(s.blip("a", "operator", "everyone stop"), "bob") is Rule.OPERATOR
    assert route(s.blip("a", "carol", "side: settled", kind="surface"), "bob") is Rule.SURFACE
    assert route(s.blip("a", "carol", "bob: please review"), "bob") is Rule.MENTION
    assert route(s.blip("a", "carol", "bobby: please review"), "bob") is Rule.UNADDRESSED
    assert route(s.blip("a", "carol", "DONE: built"), "bob") is Rule.UNADDRESSED  # (targeted)
    assert {r for r in Rule if r.full} == {
        Rule.OPERATOR, Rule.SURFACE, Rule.MENTION, Rule.ATTENDANT, Rule.ROOT, Rule.DONE,
    }  # fmt: skip


def test_excerpt_and_digest_lines() -> None:
    s = Stream()
    assert excerpt("  two\n\nlines  ") == "two lines"
    long = excerpt("word " * 50)
    assert len(long) <= EXCERPT_CHARS and long.endswith(" word…")  # cut at a word boundary
    unbroken = excerpt("x" * 200)
    assert len(unbroken) == EXCERPT_CHARS and unbroken.endswith("x…")
    sys_blip = s.blip("a", "system", "carol joined", kind="system")
    assert digest_line(sys_blip) == f"system (system): carol joined [{sys_blip.id}]"
    pair = [s.blip("a", "carol", "one"), s.blip("a", "dave", "two")]
    assert digest_text(pair).splitlines() == [f"carol: one [{pair[0].id}]", f"dave: two [{pair[1].id}]"]
    assert digest_ids(pair) == f"{pair[0].id},{pair[1].id}"


def targeted(cap: int = 0, participant: str = "bob") -> Delivery:
    return Delivery(participant, fresh(participant), cap=cap, attention="targeted")


def test_targeted_full_frames_in_order_then_one_digest_per_wavelet() -> None:
    s = Stream()
    blips = [
        s.blip("a", "alice", "chatter one"),
        s.blip("b", "carol", "chatter in b"),
        s.blip("a", "carol", "bob: please review"),
        s.blip("a", "bob", "my own"),
        s.blip("a", "dave", "side: done", kind="surface"),
        s.blip("a", "dave", "chatter two"),
        s.blip("a", "operator", "carry on"),
    ]
    core = targeted()
    pushed = run(core, blips)
    frames = [(d.blip.wavelet_id, d.rule, [b.text for b in d.blips], bool(d.digest)) for d in pushed]
    assert frames == [
        ("a", Rule.MENTION, ["bob: please review"], False),
        ("a", Rule.SURFACE, ["side: done"], False),
        ("a", Rule.OPERATOR, ["carry on"], False),
        ("a", None, ["chatter one", "chatter two"], True),
        ("b", None, ["chatter in b"], True),
    ]
    assert all(d.action is Action.DELIVER for d in pushed)
    assert core.cursors == {"a": blips[-1].id, "b": blips[1].id}
    routed = core.take_routed()
    assert sorted(r.blip.id for r in routed) == sorted(b.id for b in blips if b.author != "bob")
    assert {r.blip.text: r.rule for r in routed}["chatter one"] is Rule.UNADDRESSED
    assert core.take_routed() == []


def test_targeted_own_blips_only_move_the_cursor() -> None:
    s = Stream()
    core = targeted()
    own = [s.blip("a", "bob"), s.blip("a", "bob")]
    assert run(core, own) == []
    assert core.cursors == {"a": own[-1].id} and core.take_routed() == []


def test_targeted_frames_not_blips_count_toward_the_cap() -> None:
    s = Stream()
    core = targeted(cap=2)
    # 30 unaddressed blips in one batch: one frame
    pushed = run(core, [s.blip("a", "alice", f"c{i}") for i in range(30)])
    assert [(d.action, len(d.blips)) for d in pushed] == [(Action.DELIVER, 30)]
    # two more batches: the second frame, then the notice in place of the third
    assert [d.action for d in run(core, [s.blip("a", "alice")])] == [Action.DELIVER]
    notice = run(core, [s.blip("a", "alice"), s.blip("a", "carol", "bob?")])
    assert [d.action for d in notice] == [Action.NOTICE]
    assert notice[0].rule is Rule.MENTION
    capped = [s.blip("a", "carol", "bob!"), s.blip("a", "alice")]
    assert run(core, capped) == []  # stepped over silently, still routed and logged
    assert {r.action for r in core.take_routed()[-2:]} == {Action.CAPPED}
    assert core.cursors["a"] == capped[-1].id
    # an operator blip anywhere in a batch starts the count over for the whole batch
    after = [s.blip("a", "alice", "before op"), s.blip("a", "operator", "go"), s.blip("a", "dave")]
    pushed = run(core, after)
    assert [(d.rule, [b.text for b in d.blips]) for d in pushed] == [
        (Rule.OPERATOR, ["go"]),
        (None, ["before op", after[2].text]),
    ]
    assert core.state.delivered == {"a": 2} and "a" not in core.state.exhausted


def test_targeted_failed_batch_keeps_the_cursor_and_retries_whole() -> None:
    s = Stream()
    core = targeted()
    first = [s.blip("a", "alice", "x"), s.blip("a", "carol", "bob: y"), s.blip("a", "dave", "z")]
    second = [s.blip("b", "alice", "w")]
    assert [d.blip.text for d in run(core, first + second, fail_at=1)] == ["bob: y"]  # digest failed
    assert core.cursors == {} and core.take_routed() == [] and not core.dirty
    again = run(core, first + second)
    assert [[b.text for b in d.blips] for d in again] == [["bob: y"], ["x", "z"], ["w"]]
    assert len(core.take_routed()) == 4
    # a later batch of the first wavelet failing leaves the committed one alone
    third = [s.blip("a", "alice", "late")]
    assert run(core, third, fail_at=0) == []
    assert core.cursors == {"a": first[-1].id, "b": second[0].id}


def test_targeted_stale_blips_are_left_out() -> None:
    s = Stream()
    blips = [s.blip("a", "alice") for _ in range(3)]
    core = targeted()
    run(core, blips)
    core.mark_saved()
    assert core.batches(blips) == [] and run(core, blips) == [] and not core.dirty


def test_promotion_only_rescues_digested_blips_of_the_batch() -> None:
    s = Stream()
    blips = [s.blip("a", "alice", "x"), s.blip("a", "carol", "bob: y"), s.blip("a", "bob", "own")]
    core = targeted()
    (batch,) = core.batches(blips)
    promoted, unknown = batch.promote([blips[0].id, blips[1].id, blips[2].id, "no-such-id", blips[0].id])
    assert promoted == [blips[0].id]
    assert unknown == [blips[1].id, blips[2].id, "no-such-id"]
    assert batch.rules[blips[1].id] is Rule.MENTION  # a full blip stays full
    frames = core.frames(batch)
    assert [(d.rule, d.blip.text, bool(d.digest)) for d in frames] == [
        (Rule.ATTENDANT, "x", False),
        (Rule.MENTION, "bob: y", False),
    ]


def test_full_attention_is_todays_delivery() -> None:
    s = Stream()
    blips = [s.blip("a", "alice", f"m{i}") for i in range(5)] + [s.blip("a", "carol", "bob: hi")]
    default = run(Delivery("bob", fresh("bob"), cap=3), blips)
    full = Delivery("bob", fresh("bob"), cap=3, attention="full")
    assert run(full, blips) == default
    assert [d.action for d in default] == [Action.DELIVER] * 3 + [Action.NOTICE]
    assert all(d.digest == () and d.rule is None for d in default)
    assert full.take_routed() == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["alice", "bob", "carol", "operator"]),
            st.sampled_from(["chatter", "bob: look", "[[bob]]", "bobby", "done"]),
            st.sampled_from(["message", "message", "surface", "system"]),
        ),
        max_size=40,
    ),
    st.lists(st.integers(min_value=0, max_value=5), max_size=8),
)
def test_targeted_every_blip_of_others_is_in_exactly_one_committed_frame(
    spec: list[tuple[str, str, str, str]], failures: list[int]
) -> None:
    """Uncapped, whatever pushes fail and however often it restarts from the saved state: each blip
    of others is routed once and lands in exactly one committed frame (full iff a rule says so)."""
    s = Stream()
    blips = [s.blip(w, a, t, kind=k) for w, a, t, k in spec]
    saved = wire.dumps(fresh("bob"))
    committed: list[tuple[str, bool]] = []
    routed: list[str] = []
    for fail_at in [*failures, None]:
        core = Delivery("bob", wire.loads(DeliveryState, saved), cap=0, attention="targeted")
        todo = [b for b in blips if b.id > core.cursors.get(b.wavelet_id, "")]
        pushed = run(core, todo, fail_at=fail_at)
        done = {r.blip.id for r in core.take_routed()}
        routed += sorted(done)
        committed += [(b.id, not d.digest) for d in pushed for b in d.blips if b.id in done]
        saved = wire.dumps(core.state)
    others = [b for b in blips if b.author != "bob"]
    assert sorted(routed) == sorted(b.id for b in others)
    assert sorted(committed) == sorted((b.id, route(b, "bob").full) for b in others)


def test_digest_hold_waits_for_company_then_goes_out_whole() -> None:
    s = Stream()
    core = Delivery("bob", fresh("bob"), cap=0, attention="targeted", hold=30.0)
    a, b = s.blip("w", "alice", "a"), s.blip("w", "carol", "b")
    assert core.gather([a], now=100.0) == []  # only chatter: held, nothing committed
    assert core.held == {"w": 1} and core.cursors == {} and core.feed_cursors == {"w": a.id}
    assert core.hold_deadline() == 130.0
    assert core.gather([b], now=110.0) == []  # more chatter joins; the deadline stays
    assert core.held == {"w": 2} and core.hold_deadline() == 130.0
    # a blip in full releases the held digest with it: one digest frame for all three
    c = s.blip("w", "dave", "bob: you are needed")
    (batch,) = core.gather([c], now=111.0)
    frames = core.frames(batch)
    assert [(f.rule, [x.text for x in f.blips]) for f in frames] == [
        (Rule.MENTION, ["bob: you are needed"]),
        (None, ["a", "b"]),
    ]
    assert core.held == {} and core.hold_deadline() is None


def test_digest_hold_deadline_lines_own_blips_and_cap_release_it() -> None:
    s = Stream()
    core = Delivery("bob", fresh("bob"), cap=0, attention="targeted", hold=5.0)
    x = s.blip("w", "alice")
    assert core.gather([x], now=0.0) == []
    assert [b.blips for b in core.gather([], now=5.0)] == [[x]]  # the deadline
    flood = [s.blip("w", "alice") for _ in range(HOLD_MAX_LINES)]
    assert len(core.gather(flood, now=6.0)) == 1  # enough lines: no wait
    own = [s.blip("w", "bob")]
    assert [b.blips for b in core.gather(own, now=7.0)] == [own]  # nothing to push: commit at once
    # a wavelet already capped pushes nothing, so nothing is held there either
    capped = Delivery("bob", fresh("bob"), cap=1, attention="targeted", hold=5.0)
    capped.state.exhausted["w"] = x.id
    capped.state.delivered["w"] = 1
    assert len(capped.gather([s.blip("w", "alice")], now=0.0)) == 1
    # hold 0: never held; a left wavelet's held blips are forgotten (replayed if it is rejoined)
    assert len(Delivery("bob", fresh("bob"), attention="targeted").gather([s.blip("w", "a")], 0.0)) == 1
    core.gather([s.blip("v", "alice")], now=8.0)
    assert core.held == {"v": 1}
    core.retain(["w"])
    assert core.held == {} and core.feed_cursors == core.cursors


def test_the_provenance_of_a_participants_own_act_does_not_wake_it() -> None:
    from fleet.delivery import Action, Delivery, DeliveryState

    def sys_blip(i: int, actor: str | None) -> Blip:
        return Blip(
            id=f"0000000{i}-0000-7000-8000-000000000000", wavelet_id="w", wave_id="v", author="system",
            kind="system", text=f"{actor} forked x", created_at="t", actor=actor,
        )  # fmt: skip

    for attention in ("full", "targeted"):
        d = Delivery("alice", DeliveryState(daemon="d", wave="v", participant="alice"), attention=attention)
        assert d.decide(sys_blip(1, "alice")).action is Action.ECHO
        assert d.decide(sys_blip(2, "bob")).action is Action.DELIVER
        (batch,) = d.batches([sys_blip(1, "alice"), sys_blip(2, "bob")])
        assert list(batch.rules) == [sys_blip(2, "bob").id]  # routed: only the other's act


# ---------------------------------------------------------------- attention policies (fleet.seams.policies)


def keep(pushed: list[Decision]) -> Callable[[Decision], bool]:
    def push(d: Decision) -> bool:
        pushed.append(d)
        return True

    return push


class OperatorOnly:
    """A third party's policy: only the operator's blips wake the session, in every wavelet;
    the rest waits for one with no deadline."""

    def route(self, blip: Blip, participant: str, root: bool, rule: Rule) -> Rule:
        return rule if rule in (Rule.SYSTEM, Rule.OPERATOR) else Rule.UNADDRESSED

    def holds(self, root: bool) -> bool:
        return True

    def instructions(self, participant: str) -> str:
        return f"\n{participant}: only the operator wakes you.\n"


@pytest.fixture
def operator_only() -> Iterator[OperatorOnly]:
    policy = OperatorOnly()
    seams.policies.add("operator-only", policy)
    try:
        yield policy
    finally:
        seams.policies.remove("operator-only")


def test_the_resident_policy_is_named_by_the_features_and_imported_when_first_asked() -> None:
    assert "resident" in seams.policies.names() and "resident" in attentions()
    assert attentions()[:2] == ["full", "targeted"]
    assert policy_of("full") is None and policy_of("targeted") is None
    from fleet.resident.attention import policy

    assert policy_of("resident") is policy
    assert Delivery("bob", fresh("bob"), attention="resident").policy is policy


def test_an_unknown_attention_is_refused_naming_the_choices(tmp_path: Path) -> None:
    for refuse in (
        lambda: Delivery("bob", fresh("bob"), attention="nope"),
        lambda: check_attention("nope"),
        lambda: check(
            TransportConfig(participant="bob", wave="w", daemon=DAEMON, state_dir=tmp_path, attention="nope")
        ),
    ):
        with pytest.raises(errors.UsageError) as caught:
            refuse()
        assert "attention 'nope' is not one of full, targeted, resident" in caught.value.message
    with pytest.raises(errors.UsageError) as caught:
        parse('[participants.bob]\nattention = "nope"\n', "l.toml", "l")
    assert "participants.bob.attention" in caught.value.message and "not one of full" in caught.value.message
    assert parse('[participants.bob]\nattention = "resident"\n', "l.toml", "l").participants["bob"].attention


def test_a_third_party_policy_routes_holds_and_instructs(operator_only: OperatorOnly) -> None:
    assert "operator-only" in attentions()
    layout = parse('[participants.bob]\nattention = "operator-only"\n', "l.toml", "l")
    assert layout.participants["bob"].attention == "operator-only"
    assert "only the operator wakes you" in instructions("bob", "w", "operator-only")
    s = Stream()
    core = Delivery("bob", fresh("bob"), cap=0, attention="operator-only", hold=30.0)
    chatter = [s.blip("a", "carol", "bob: please review"), s.blip("a", "carol", "side", kind="surface")]
    assert core.deliver(core.gather(chatter, now=0.0), lambda d: True) == (0, True)
    assert core.gather([], now=1e9) == [], "held with no deadline: a mention does not wake it alone"
    pushed: list[Decision] = []
    core.deliver(core.gather([s.blip("a", "operator", "bob, stop")], now=1e9), keep(pushed))
    assert [(d.rule, d.blip.author, [b.author for b in d.digest]) for d in pushed] == [
        (Rule.OPERATOR, "operator", []),
        (None, "carol", ["carol", "carol"]),
    ]
    assert [r.rule for r in core.take_routed()] == [Rule.OPERATOR, Rule.UNADDRESSED, Rule.UNADDRESSED]


@settings(max_examples=200, deadline=None)
@given(
    rules=st.dictionaries(st.integers(0, 29), st.sampled_from(list(Rule)), max_size=30),
    specs=st.lists(
        st.tuples(st.sampled_from("ab"), st.sampled_from(["carol", "bob", "operator"]), st.booleans()),
        max_size=30,
    ),
    holds=st.booleans(),
)
def test_any_policy_drops_nothing(
    rules: dict[int, Rule], specs: list[tuple[str, str, bool]], holds: bool
) -> None:
    """Whatever rule a policy gives each blip, and whether it holds: every blip of others is in
    exactly one pushed frame once nothing is held, and none twice."""

    class Arbitrary:
        def route(self, blip: Blip, participant: str, root: bool, rule: Rule) -> Rule:
            return rules.get(int(blip.text), rule)

        def holds(self, root: bool) -> bool:
            return holds

        def instructions(self, participant: str) -> str:
            return ""

    seams.policies.add("arbitrary", Arbitrary())
    try:
        s = Stream()
        core = Delivery("bob", fresh("bob"), cap=0, attention="arbitrary", hold=0.0)
        blips = [
            s.blip(w, who, str(i), kind="system" if sys else "message")
            for i, (w, who, sys) in enumerate(specs)
        ]
        pushed: list[Decision] = []
        core.deliver(core.gather(blips, now=0.0), keep(pushed))
        seen = [b.id for d in pushed for b in d.blips]
        held = {b.id for part in core._held.values() for b in part}
        others = {b.id for b in blips if b.author != "bob"}
        assert len(seen) == len(set(seen)) and set(seen) == others - held
    finally:
        seams.policies.remove("arbitrary")
