"""Budgets: the store's events and who may set them, layout values, restarts, and the channel that
holds a participant's blips once its spend (read from its transcript) passes its budget.

The transcripts here are written in Claude Code's format (as ``test_usage.py`` does); the real
session over the scripted model is ``test_real_budgets.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import retry_until
from test_usage import reply, u, wake, write
from worlds import World, world

from fleet import errors
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.layouts import parse
from fleet.models import NewSession
from fleet.paths import Paths
from fleet.records.budgets import BudgetReport, SetBudget, Spend, SpendReport
from fleet.store import OPERATOR_PRINCIPAL, Principal, Store, connect, dump_tables, replay

OP = OPERATOR_PRINCIPAL
SID = "2f0c6d1e-8a4b-4c1d-9e2f-3a4b5c6d7e8f"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "fleet.sqlite3")
    s.create_wave(OP, "w", ["alice", "bob"])
    yield s
    s.close()


def alice_of(store: Store) -> Principal:
    return Principal("alice", store.get_wave(OP, "w").id)


def report(b: Any, who: str = "alice") -> BudgetReport:
    return BudgetReport(
        participant=who, wavelet_id=b.wavelet_id, scope=b.participant, set_at=b.set_at, spent="9"
    )


# ---------------------------------------------------------------- the store


def test_a_budget_is_an_event_reached_once_per_setting_with_one_blip_naming_the_operator(
    store: Store,
) -> None:
    b = store.set_budget(OP, "w", SetBudget(participant="alice", tokens=1000))
    assert b is not None and (b.tokens, b.cost, b.participant, b.wavelet_id, b.source) == (
        1000, None, "alice", "", "operator",
    )  # fmt: skip
    alice = alice_of(store)
    first = store.budget_reached(alice, "w", report(b))
    assert first.first and first.blip_id
    again = store.budget_reached(alice, "w", report(b))  # a restarted channel reports again: nothing
    assert not again.first
    blips = [x for x in store.read(OP, "w/main") if x.id == first.blip_id]
    (blip,) = blips
    assert (blip.author, blip.kind, blip.actor) == ("system", "system", "alice")
    assert blip.text.startswith("operator: alice reached its budget (1,000 tokens")
    assert "fleet budget set w alice --tokens" in blip.text
    assert [x.reached for x in store.budgets(OP, "w")] == [["alice"]]
    # raising it starts over: delivery resumes, and passing the new one is reported (once) again
    raised = store.set_budget(OP, "w", SetBudget(participant="alice", tokens=5000))
    assert raised is not None and raised.reached == [] and raised.tokens == 5000
    assert not store.budget_reached(alice, "w", report(b)).first  # about the old setting: ignored
    assert store.budget_reached(alice, "w", report(raised)).first
    store.set_budget(OP, "w", SetBudget(participant="alice"))  # neither tokens nor cost: cleared
    assert store.budgets(OP, "w") == []
    types = [e.type for e in store.events(OP)]
    assert types.count("budget.set") == 3 and types.count("budget.reached") == 2


def test_a_wavelet_budget_reports_into_its_wavelet_and_tells_the_operator_once_for_all_members(
    store: Store,
) -> None:
    side = store.fork(OP, "w/main", "side", ["alice", "bob"])
    b = store.set_budget(OP, "w", SetBudget(wavelet="w/side", cost=0.5))
    assert b is not None and b.wavelet == "w/side" and b.participant == "" and b.cost == 0.5
    got = store.budget_reached(alice_of(store), "w", report(b))
    assert got.first and got.wavelet_id == side.id
    bob = Principal("bob", store.get_wave(OP, "w").id)
    second = store.budget_reached(bob, "w", report(b, "bob"))
    assert second.first and second.blip_id is None  # bob gets its notice; the operator was told
    assert store.budgets(OP, "w")[0].reached == ["alice", "bob"]
    assert store.budgets(bob, "w")[0].reached == ["bob"]  # a participant sees only its own mark
    (told,) = [x for x in store.read(OP, "w/side") if x.kind == "system" and x.text.startswith("operator:")]
    assert told.id == got.blip_id and "the members of w/side reached their budget together" in told.text
    assert "fleet budget set w/side --tokens N (or --cost USD)" in told.text


def test_a_wavelet_budget_is_judged_on_the_members_sum_of_idempotent_spend_reports(
    store: Store, tmp_path: Path
) -> None:
    side = store.fork(OP, "w/main", "side", ["alice", "bob"])
    store.set_budget(OP, "w", SetBudget(wavelet="w/side", tokens=1000))
    store.set_budget(OP, "w", SetBudget(participant="alice", tokens=9000))  # not a sum: no figures
    alice, bob = alice_of(store), Principal("bob", store.get_wave(OP, "w").id)

    def shared(got: list[Any]) -> Any:
        (b,) = [b for b in got if b.shared]
        return b

    def spend(who: Principal, session: str, tokens: int) -> list[Any]:
        rep = [Spend(wavelet_id=side.id, tokens=tokens)]
        return store.report_spend(who, "w", SpendReport(participant=who.name, session_id=session, spend=rep))

    got = spend(alice, "s-a", 600)
    assert (shared(got).spent_tokens, shared(got).spent_cost) == (600, 0.0)
    assert [b.spent_tokens for b in got if not b.shared] == [None]
    assert shared(spend(alice, "s-a", 600)).spent_tokens == 600  # the same report again: nothing
    assert shared(spend(alice, "s-a", 400)).spent_tokens == 600  # a late, lower one: never lowered
    assert shared(spend(bob, "s-b", 500)).spent_tokens == 1100  # the members' sum
    assert shared(spend(alice, "s-a2", 50)).spent_tokens == 1150  # a new session of alice adds to it
    assert shared(store.budgets(OP, "w")).spent_tokens == 1150
    with pytest.raises(errors.Forbidden, match="cannot report a budget of 'bob'"):
        store.report_spend(alice, "w", SpendReport(participant="bob", session_id="x", spend=[]))
    with pytest.raises(errors.UsageError, match="0 or more"):
        spend(alice, "s-a", -1)
    assert shared(store.budgets(OP, "w")).spent_tokens == 1150  # the refused report changed nothing
    # a set budget starts over for who reached it, not for what was spent (spend is the sessions')
    store.set_budget(OP, "w", SetBudget(wavelet="w/side", tokens=5000))
    assert shared(store.budgets(OP, "w")).spent_tokens == 1150


def test_a_layouts_budget_never_replaces_the_operators_and_an_unchanged_one_keeps_its_marks(
    store: Store,
) -> None:
    layout = store.set_budget(OP, "w", SetBudget(participant="alice", tokens=100, source="layout"))
    assert layout is not None and layout.source == "layout"
    store.budget_reached(alice_of(store), "w", report(layout))
    again = store.set_budget(OP, "w", SetBudget(participant="alice", tokens=100, source="layout"))  # respawn
    assert again is not None and again.reached == ["alice"] and again.set_at == layout.set_at
    raised = store.set_budget(OP, "w", SetBudget(participant="alice", tokens=900))
    kept = store.set_budget(OP, "w", SetBudget(participant="alice", tokens=100, source="layout"))
    assert raised is not None and kept is not None
    assert (kept.tokens, kept.source, kept.set_at) == (900, "operator", raised.set_at)


def test_only_the_operator_sets_budgets_and_a_participant_sees_only_those_that_apply_to_it(
    store: Store,
) -> None:
    alice = alice_of(store)
    before = list(store.events(OP))
    with pytest.raises(errors.Forbidden, match="only the operator sets budgets"):
        store.set_budget(alice, "w", SetBudget(participant="alice", tokens=10**9))
    b = store.set_budget(OP, "w", SetBudget(participant="bob", tokens=10))
    assert b is not None
    with pytest.raises(errors.Forbidden, match="cannot report a budget of 'bob'"):
        store.budget_reached(alice, "w", report(b, "bob"))
    secret = store.fork(OP, "w/main", "secret", ["bob"], private=True)
    store.set_budget(OP, "w", SetBudget(wavelet=secret.id, tokens=10))
    store.set_budget(OP, "w", SetBudget(tokens=77))
    assert [(x.participant, x.tokens) for x in store.budgets(alice, "w")] == [("", 77)]
    assert len(store.budgets(OP, "w")) == 3
    assert [e.type for e in store.events(OP)][: len(before)] == [e.type for e in before]


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (SetBudget(participant="alice", tokens=0), "tokens must be a whole number above 0"),
        (SetBudget(participant="alice", tokens=-5), "tokens must be a whole number above 0"),
        (SetBudget(participant="alice", cost=float("nan")), "cost must be a number of USD above 0"),
        (SetBudget(participant="alice", cost=-1.0), "cost must be a number of USD above 0"),
        (SetBudget(participant="alice", tokens=5, cost=1.0), "give tokens or cost, not both"),
        (SetBudget(participant="Alice!", tokens=5), "invalid participant name"),
        (SetBudget(participant="alice", tokens=5, source="someone"), "budget source"),
    ],
)
def test_a_bad_budget_is_refused_and_changes_nothing(store: Store, req: SetBudget, message: str) -> None:
    before = store.dump(OP)
    with pytest.raises(errors.UsageError, match=message):
        store.set_budget(OP, "w", req)
    assert store.dump(OP) == before
    with pytest.raises(errors.NotFound):
        store.set_budget(OP, "w", SetBudget(wavelet="w/nowhere", tokens=5))


def test_budgets_and_who_reached_them_survive_a_restart_and_replay(store: Store, tmp_path: Path) -> None:
    b = store.set_budget(OP, "w", SetBudget(participant="alice", tokens=1000))
    assert b is not None
    store.budget_reached(alice_of(store), "w", report(b))
    store.set_budget(OP, "w", SetBudget(wavelet="w/main", cost=2.0))
    shown = store.budgets(OP, "w")
    store.close()
    reopened = Store(tmp_path / "fleet.sqlite3")
    try:
        assert reopened.budgets(OP, "w") == shown
        assert not reopened.budget_reached(alice_of(reopened), "w", report(b)).first  # still once
        replay(reopened.path, tmp_path / "rebuilt.sqlite3")
        rebuilt = connect(tmp_path / "rebuilt.sqlite3")
        assert dump_tables(rebuilt) == reopened.dump(OP)
        rebuilt.close()
    finally:
        reopened.close()


# ---------------------------------------------------------------- layouts


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[participants.bob]\nbudget = { tokens = 0 }",
            "field participants.bob.budget.tokens: Input should be greater than 0",
        ),
        (
            '[defaults]\nbudget = { tokens = "lots" }',
            "field defaults.budget.tokens: Input should be a valid integer",
        ),
        ("budget = { tokens = 1.5 }", "field budget.tokens: Input should be a valid integer"),
        ("budget = { cost = -2 }", "field budget.cost: Input should be greater than 0"),
        ("budget = { tokens = 5, cost = 1.0 }", "field budget: Value error, give exactly one of tokens"),
        ("budget = { dollars = 5 }", "field budget.dollars: Extra inputs are not permitted"),
        ("budget = 5", "field budget: Input should be a valid dictionary"),
    ],
)
def test_a_bad_budget_in_a_layout_is_an_error_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(errors.UsageError) as got:
        parse(text, "team.toml", "team")
    assert got.value.message.startswith(f"layout team.toml: {message}"), got.value.message


def test_layout_budgets_per_participant_and_per_wavelet() -> None:
    layout = parse(
        "budget = { cost = 2.5 }\n[defaults]\nbudget = { tokens = 100 }\n"
        "[participants.bob]\nbudget = { cost = 1 }",
        "team.toml",
        "team",
    )
    assert layout.budget is not None and layout.budget.cost == 2.5
    alice, bob = layout.profile("alice").budget, layout.profile("bob").budget
    assert alice is not None and (alice.tokens, alice.cost) == (100, None)
    assert bob is not None and (bob.tokens, bob.cost) == (None, 1.0)


# ---------------------------------------------------------------- the CLI


def _fleet(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": daemon.operator_token}
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_fleet_budget_set_show_and_clear_and_bad_input(daemon: Daemon, operator: Client) -> None:
    operator.create_wave("w", ["alice"])
    done = _fleet(daemon, "budget", "set", "w", "alice", "--tokens", "5000")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "budget for alice in w: 5,000 tokens"
    shown = _fleet(daemon, "budget", "show", "w", "--json")
    assert shown.returncode == 0, shown.stderr
    assert [(b["participant"], b["tokens"]) for b in json.loads(shown.stdout)] == [("alice", 5000)]
    for args, code, message in [
        (["budget", "set", "w", "alice"], 2, "give --tokens N or --cost USD"),
        (["budget", "set", "w", "alice", "--tokens", "0"], 2, "tokens must be a whole number above 0"),
        (["budget", "set", "w", "alice", "--tokens", "5", "--cost", "1"], 2, "not both"),
        (["budget", "set", "w/", "alice", "--tokens", "5"], 2, "give WAVE or WAVE/WAVELET"),
        (["budget", "set", "w/nowhere", "--tokens", "5"], 4, "no wavelet 'w/nowhere'"),
        (["budget", "set", "nowave", "alice", "--tokens", "5"], 4, "no wave 'nowave'"),
    ]:
        bad = _fleet(daemon, "budget", *args[1:])
        assert bad.returncode == code, (args, bad.stderr)
        assert message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    token = operator.mint_token("w", "alice").token
    env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": token}
    refused = subprocess.run(
        [sys.executable, "-m", "fleet", "budget", "set", "w", "alice", "--tokens", "999999"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 5 and "only the operator sets budgets" in refused.stderr
    assert [b.tokens for b in operator.budgets("w")] == [5000]
    assert _fleet(daemon, "budget", "clear", "w", "alice").returncode == 0
    assert operator.budgets("w") == []


# ---------------------------------------------------------------- the channel holds, then delivers


@pytest.fixture
def wave(daemon: Daemon, operator: Client, fleet_env: Paths, tmp_path: Path) -> Iterator[World]:
    yield from world(daemon, operator, fleet_env, tmp_path, "w", ["alice", "bob"])


def _transcript(sid: str = SID) -> Path:
    folder = Path(os.environ["HOME"]) / ".claude" / "projects" / "-tmp-project"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{sid}.jsonl"


BOB_SID = "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


def test_members_each_under_a_wavelet_budget_are_all_held_once_their_sum_passes_it(wave: World) -> None:
    """alice spent 600 and bob 500 on w/main's turns: each is under the wavelet's 1,000, the sum is
    not. Both channels report their spend and are held; each gets its own notice, the operator one
    blip; raising the budget delivers the held blip to both."""
    op = wave.op
    wid = op.get_wave("w").id
    for who, sid in (("alice", SID), ("bob", BOB_SID)):
        op.record_session(wid, NewSession(participant=who, session_id=sid, wavelet_id=wave.main))
    write(_transcript(SID), [wake("w/main", wave.main, "b0"), reply("a1", u(500, 100))], mode="w")
    write(_transcript(BOB_SID), [wake("w/main", wave.main, "b0"), reply("b1", u(400, 100))], mode="w")
    op.set_budget("w", SetBudget(wavelet="w/main", tokens=1000))
    chans = {
        who: wave.channel(who, "--receipts", "none", env={**os.environ, "CLAUDE_CODE_SESSION_ID": sid})
        for who, sid in (("alice", SID), ("bob", BOB_SID))
    }
    for who in chans:
        retry_until(lambda who=who: wave.lock_held(who), what=f"{who}'s channel delivering")  # type: ignore[misc]
    # each channel reports its session's spend on w/main at its start: the sum is known before a blip
    retry_until(lambda: op.budgets("w")[0].spent_tokens == 1100, what="both members' spend reported")
    op.post(wave.main, "over together")
    for who, ch in chans.items():
        notice = ch.wait_notes(
            lambda n: next((x for x in n if x["meta"]["kind"] == "budget"), None), what=f"{who}'s notice"
        )
        assert "the members of w/main together" in notice["content"] and "1,100 tokens" in notice["content"]
    retry_until(lambda: op.budgets("w")[0].reached == ["alice", "bob"], what="both members marked")
    (b,) = op.budgets("w")
    assert b.spent_tokens == 1100
    told = [x for x in op.read(wave.main).blips if x.kind == "system" and x.text.startswith("operator:")]
    assert len(told) == 1 and "reached their budget together" in told[0].text
    for ch in chans.values():
        assert [x["meta"]["kind"] for x in ch.channel_notes() if x["meta"]["kind"] != "system"] == ["budget"]
    op.set_budget("w", SetBudget(wavelet="w/main", tokens=5000))
    for who, ch in chans.items():
        ch.wait_notes(
            lambda n: any(x["content"] == "over together" for x in n), what=f"the held blip to {who}"
        )
        kinds = [x["meta"]["kind"] for x in ch.channel_notes() if x["meta"]["kind"] != "system"]
        assert kinds == ["budget", "message"]


def test_past_its_budget_a_channel_holds_blips_notices_once_and_delivers_them_all_once_raised(
    wave: World,
) -> None:
    op = wave.op
    op.record_session(
        op.get_wave("w").id, NewSession(participant="alice", session_id=SID, wavelet_id=wave.main)
    )
    op.set_budget("w", SetBudget(participant="alice", tokens=1000))
    transcript = _transcript()
    write(transcript, [wake("w/main", wave.main, "b0"), reply("m1", u(600, 100))], mode="w")  # 700 spent
    alice = wave.channel("alice", "--receipts", "none", env={**os.environ, "CLAUDE_CODE_SESSION_ID": SID})
    retry_until(lambda: wave.lock_held("alice"), what="alice's channel delivering")
    wave.post("under budget")
    alice.wait_notes(lambda n: any(x["content"] == "under budget" for x in n), what="a blip under budget")
    write(transcript, [wake("w/main", wave.main, "b1"), reply("m2", u(250, 50))])  # 1000: reached
    held = [wave.post(f"held {i}") for i in range(3)]
    notice = alice.wait_notes(
        lambda n: next((x for x in n if x["meta"]["kind"] == "budget"), None), what="the budget notice"
    )
    assert notice["meta"]["author"] == "fleet" and "blip_id" not in notice["meta"]
    assert "1,000 tokens" in notice["content"] and "held, not lost" in notice["content"]

    def operator_blips() -> list[Any]:
        return [
            b for b in op.read(wave.main).blips if b.kind == "system" and b.text.startswith("operator: alice")
        ]

    (told,) = retry_until(operator_blips, what="the blip naming the operator")
    assert "1,000 tokens spent" in told.text and told.actor == "alice"
    wave.post("held 3")
    # alice is restarted while held: nothing was committed, so the new channel holds the same blips,
    # and neither a second notice nor a second blip to the operator comes of it
    assert alice.close() == 0
    again = wave.channel("alice", "--receipts", "none", env={**os.environ, "CLAUDE_CODE_SESSION_ID": SID})
    retry_until(lambda: wave.lock_held("alice"), what="the new channel delivering")
    wave.post("held 4")
    op.post(wave.main, "status check")  # even the operator's blips wait: the budget is the operator's own
    retry_until(lambda: op.budgets("w")[0].reached == ["alice"], what="the budget marked reached")
    raised = subprocess.run(
        [sys.executable, "-m", "fleet", "budget", "set", "w", "alice", "--tokens", "5000"],
        env={**os.environ, "FLEET_DAEMON": wave.daemon.url, "FLEET_TOKEN": wave.daemon.operator_token},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert raised.returncode == 0, raised.stderr
    want = [f"held {i}" for i in range(5)] + ["status check"]
    again.wait_notes(lambda n: [x["content"] for x in n] == want, what="every held blip, in order")
    assert [x["meta"]["kind"] for x in again.channel_notes()] == ["message"] * 5 + ["message"]
    assert [x["meta"].get("blip_id") for x in again.channel_notes()][:3] == held
    assert sum(x["meta"]["kind"] == "budget" for x in [*alice.channel_notes(), *again.channel_notes()]) == 1
    assert len(operator_blips()) == 1
    before = [x["content"] for x in alice.channel_notes() if x["meta"]["kind"] != "system"]
    assert before == ["under budget", notice["content"]]


# ---------------------------------------------------------------- the engine's hold-back


def test_held_back_wavelets_stay_uncommitted_and_are_delivered_whole_when_released() -> None:
    from test_engine import FakeFeed, texts

    from fleet.delivery.engine import HOLD_BACK_RECHECK, Engine, ListSink
    from fleet.delivery.rules import Delivery
    from fleet.delivery.state import DeliveryState

    feed = FakeFeed()
    main, side = feed.join("main"), feed.join("side")
    held: set[str] = set()
    asked: list[dict[str, str]] = []

    def hold_back(labels: Any, _given: Any = None) -> set[str]:
        asked.append(dict(labels))
        return held & set(labels)

    state = DeliveryState(daemon="d", wave="w", participant="alice")
    sink = ListSink()
    e = Engine(Delivery("alice", state), feed, sink, wave="w", hold_back=hold_back)
    feed.post(main, "bob", "first")
    e.step(0)
    assert texts(sink.take()) == ["first"] and asked == [{main: "w/main", side: "w/side"}]
    held.add(side)  # a budget of side's turns passed: side is held, main flows
    kept = [feed.post(side, "bob", f"side {i}") for i in range(3)]
    feed.post(main, "bob", "main again")
    e.step(0)
    assert texts(sink.take()) == ["main again"]
    assert side not in state.cursors and e.feed_cursors[side] == kept[-1].id  # asked past, not committed
    assert e.poll_wait(30.0) == HOLD_BACK_RECHECK  # a budget raised is seen that soon
    assert e.step(0).pushed == 0 and not sink.take()  # nothing handed out again meanwhile
    # a restarted engine over the same state holds the same blips: nothing about them was committed
    again = Engine(Delivery("alice", state), feed, ListSink(), wave="w", hold_back=hold_back)
    again.step(0)
    assert not again.sink.take()  # type: ignore[attr-defined]
    held.clear()  # raised, and a new blip comes with the look that releases the wavelet: it must
    late = feed.post(side, "bob", "side 3")  # not jump the held ones (committing it would skip them)
    e.step(0)
    assert not sink.take() and side not in state.cursors
    e.step(0)
    assert texts(sink.take()) == ["side 0", "side 1", "side 2", "side 3"]
    assert state.cursors[side] == late.id and e.poll_wait(30.0) == 30.0


def test_spawn_records_a_layouts_budgets_and_keeps_what_the_operator_set(
    daemon: Daemon, operator: Client
) -> None:
    from fleet.budgets import apply_layout_budgets

    operator.create_wave("w", ["alice", "bob"])
    main = operator.resolve("w/main")
    layout = parse(
        "budget = { cost = 2.5 }\n[defaults]\nbudget = { tokens = 100 }\n"
        "[participants.bob]\nbudget = { tokens = 7 }",
        "team.toml",
        "team",
    )
    apply_layout_budgets(operator, main.wave_id, main.id, layout, ["alice", "bob"])
    got = {(b.wavelet, b.participant): (b.tokens, b.cost, b.source) for b in operator.budgets("w")}
    assert got == {
        ("w/main", ""): (None, 2.5, "layout"),
        ("", "alice"): (100, None, "layout"),
        ("", "bob"): (7, None, "layout"),
    }
    operator.set_budget("w", SetBudget(participant="bob", tokens=70))  # the operator raised bob's
    apply_layout_budgets(operator, main.wave_id, main.id, layout, ["alice", "bob"])  # spawned again
    assert {b.participant: b.tokens for b in operator.budgets("w") if not b.wavelet} == {
        "alice": 100,
        "bob": 70,
    }


# ---------------------------------------------------------------- one request per delivery


def test_a_feed_answer_carries_the_budgets_that_apply_to_the_participant(
    daemon: Daemon, operator: Client
) -> None:
    """The channel's budget check reads them from the answer: a delivery costs one request, not two."""
    operator.create_wave("w", ["alice", "bob"])
    operator.set_budget("w", SetBudget(participant="alice", tokens=1000))
    operator.set_budget("w", SetBudget(participant="bob", tokens=2000))
    operator.set_budget("w", SetBudget(tokens=9000))  # every participant's own spend
    main = operator.resolve("w/main").id
    operator.post(main, "hello")
    alice = Client(daemon.url, operator.mint_token("w", "alice").token)
    feed = alice.feed("w", "alice", {})
    assert feed.blips and feed.budgets is not None
    assert sorted((b.participant, b.tokens) for b in feed.budgets) == [("", 9000), ("alice", 1000)]
    assert [(b.participant, b.tokens) for b in feed.budgets] == [
        (b.participant, b.tokens) for b in alice.budgets("w", "alice")
    ]  # the same as asking for them
    assert alice.feed("w", "alice", {main: feed.blips[-1].id}, wait=0).budgets is not None  # empty too


def test_a_budget_watch_given_the_feeds_budgets_asks_the_daemon_nothing(tmp_path: Path) -> None:
    from fleet.budgets import BudgetWatch
    from fleet.records.budgets import Budget
    from fleet.seams import Participant

    def no_client() -> Client:
        raise AssertionError("the budgets came with the feed: no request")

    paths = Paths(tmp_path / "d", tmp_path / "s", tmp_path / "c", tmp_path / "l")
    watch = BudgetWatch(Participant(no_client, "w", "alice", "", paths, lambda frame: None))
    given = [Budget(wave_id="W", wavelet_id="", participant="alice", tokens=10)]
    assert watch({"wl": "w/main"}, given) == frozenset()  # no transcript: nothing spent, nothing held
    assert watch({"wl": "w/main"}, []) == frozenset()
