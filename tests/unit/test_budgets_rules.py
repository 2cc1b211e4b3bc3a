"""Budgets on a real SQLite store, no daemon: events reached once per setting, who may set them, layout
values, restarts and replay, and the channel's budget watch from the feed's budgets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet import errors
from fleet.client import Client
from fleet.layouts import parse
from fleet.paths import Paths
from fleet.records.budgets import Budget, BudgetReport, SetBudget, Spend, SpendReport, passed
from fleet.records.usage import Figures
from fleet.store import OPERATOR_PRINCIPAL, Principal, Store, connect, dump_tables, replay
from fleet.usage import Counter, Price, PriceTable, Tally, budget_statuses, figures, spent_of

OP = OPERATOR_PRINCIPAL


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


def test_held_back_wavelets_stay_uncommitted_and_are_delivered_whole_when_released() -> None:
    from test_delivery_engine import FakeFeed, texts

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


MODELS = ["claude-a", "claude-b", "claude-c", "claude-d"]


WAVELETS = ["", "W1", "W2"]


tallies = st.dictionaries(
    st.tuples(st.sampled_from(WAVELETS), st.sampled_from(MODELS)),
    st.builds(
        Tally,
        input_tokens=st.integers(0, 10**7),
        output_tokens=st.integers(0, 10**6),
        cache_read_input_tokens=st.integers(0, 10**7),
        cache_creation_input_tokens=st.integers(0, 10**6),
        requests=st.integers(1, 50),
        turns=st.integers(1, 10),
    ),
    max_size=8,
)


prices_of = st.dictionaries(
    st.sampled_from(MODELS),
    st.builds(
        Price,
        input=st.floats(0, 100),
        output=st.floats(0, 100),
        cache_read=st.floats(0, 10),
        cache_creation=st.floats(0, 10),
    ),
)


@settings(max_examples=300, deadline=None)
@given(tallies, prices_of, st.sampled_from(WAVELETS), st.floats(0.0001, 1000), st.integers(1, 10**8))
def test_cost_is_a_number_only_when_every_model_counted_is_priced(
    counted: dict[tuple[str, str], Tally], priced: dict[str, Price], scope: str, limit: float, tokens: int
) -> None:
    table = PriceTable(entries=list(priced.items()))
    counter = Counter(tallies=counted)
    cost_budget = Budget(wave_id="W", wavelet_id=scope, participant="alice", cost=limit)
    in_scope = {m for (w, m) in counted if not scope or w == scope}
    spent, cost, unpriced = spent_of(cost_budget, counter, table)
    assert spent == sum(figures(t, None).tokens for (w, _m), t in counted.items() if not scope or w == scope)
    assert unpriced == sorted(in_scope - set(priced))
    if in_scope <= set(priced):
        want = sum(
            figures(t, priced[m]).cost_usd or 0.0 for (w, m), t in counted.items() if not scope or w == scope
        )
        assert cost == pytest.approx(want)
        assert passed(cost_budget, spent, cost) == (cost is not None and cost >= limit)
    else:
        assert cost is None
        assert passed(cost_budget, spent, cost)  # unknown is never under a limit: held, not free
    # a tokens budget is judged on tokens whatever the prices
    token_budget = Budget(wave_id="W", wavelet_id=scope, participant="alice", tokens=tokens)
    assert passed(token_budget, spent, cost) == (spent >= tokens)
    # the sums shown (fleet usage, status, the console) carry "unknown" up, never a partial sum
    total = Figures()
    for (_w, m), t in counted.items():
        total.add(figures(t, table.price(m), m))
    all_priced = {m for (_w, m) in counted} <= set(priced)
    assert (total.cost_usd is not None) == all_priced
    assert total.unpriced == sorted({m for (_w, m) in counted} - set(priced))
    # and the budget's status (fleet budget show, fleet usage, the console) says unknown, and passed
    (status,) = budget_statuses([cost_budget], {"alice": counter}, table)
    (mine,) = status.spent
    assert (mine.cost_usd is None) == bool(in_scope - set(priced))
    assert mine.passed == passed(cost_budget, spent, cost)
