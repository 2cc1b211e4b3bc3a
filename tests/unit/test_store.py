"""The store on a real SQLite file: schema, event log replay, the data model's rules."""

from __future__ import annotations

import inspect
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg import StoreAt

from fleet import errors
from fleet.records.permissions import Behavior, Outcome, PermissionAnswer, PermissionAsk, PermissionSettled
from fleet.store import (
    EVENT_TYPES,
    MATERIALISED,
    OPERATOR_PRINCIPAL,
    Principal,
    Store,
    connect,
    dump_tables,
    migrate,
    replay,
)

OP = OPERATOR_PRINCIPAL


@pytest.fixture
def store(store_at: StoreAt) -> Iterator[Store]:
    s = Store(store_at("fleet.sqlite3"))
    yield s
    s.close()


def participant(store: Store, wave: str, name: str) -> Principal:
    return Principal(name, store.get_wave(OP, wave).id)


def test_migrating_an_empty_database_gives_the_final_schema(tmp_path: Path) -> None:
    conn = connect(tmp_path / "x.sqlite3")
    assert migrate(conn) == [
        "0001_initial",
        "0002_sessions",
        "0003_blip_actor",
        "0004_token_grants",
        "0005_store_identity",
        "0006_seats",
        "0007_budgets",
        "0008_summaries",
        "0009_blip_replacer",
        "0010_budget_spend",
        "0011_request_keys",
        "0012_permissions",
        "0013_budget_spend_unpriced",
        "0014_wavelet_topic",
    ]
    assert migrate(conn) == []  # recorded: never applied twice
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert set(MATERIALISED) | {"events", "migrations"} <= tables
    cols = {r[1] for r in conn.execute("PRAGMA table_info(blips)")}
    assert cols == {
        "id",
        "wavelet_id",
        "wave_id",
        "author",
        "kind",
        "text",
        "replaces",
        "source_wavelet_id",
        "source_blip_id",
        "created_at",
        "superseded_by",
        "actor",
        "replaced_by",
    }
    wavelet_cols = {r[1] for r in conn.execute("PRAGMA table_info(wavelets)")}
    assert wavelet_cols == {
        "id", "wave_id", "parent_id", "fork_blip_id", "name", "private", "created_by", "created_at", "topic"
    }  # fmt: skip
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    conn.close()


def test_creating_a_wave_creates_main_with_its_roster_and_a_system_blip(store: Store) -> None:
    wave = store.create_wave(OP, "demo", ["alice", "bob"])
    assert [w.name for w in wave.wavelets] == ["main"]
    main = wave.wavelets[0]
    assert main.parent_id is None and main.id == wave.root_id
    assert [m.name for m in main.roster] == ["alice", "bob"]
    (blip,) = store.read(OP, "demo/main")
    assert blip.kind == "system" and "alice, bob" in blip.text
    with pytest.raises(errors.Conflict):
        store.create_wave(OP, "demo")


def test_a_fork_copies_chosen_members_and_its_context_stops_at_the_fork_point(store: Store) -> None:
    store.create_wave(OP, "demo", ["alice", "bob", "carol"])
    before = store.post(OP, "demo/main", "the plan", as_="alice")
    alice = participant(store, "demo", "alice")
    design = store.fork(alice, "demo/main", "design", ["bob"])
    assert [m.name for m in design.roster] == ["alice", "bob"]  # the forker joins its own fork
    assert design.fork_blip_id is not None
    store.post(OP, "demo/main", "after the fork", as_="carol")
    store.post(alice, "demo/design", "in the fork")
    store.fork(alice, "demo/design", "deeper", [])
    store.post(alice, "demo/deeper", "deepest")

    ctx = store.context(alice, "demo/deeper")
    texts = [b.text for b in ctx.blips]
    assert "the plan" in texts and "in the fork" in texts and "deepest" in texts
    assert "after the fork" not in texts  # the parent after the fork point is not this fork's context
    assert [w.name for w in ctx.path] == ["main", "design", "deeper"]
    assert texts.index("the plan") < texts.index("in the fork") < texts.index("deepest")
    # the public fork announced itself in the parent, pointing at the child
    announce = [b for b in store.read(OP, "demo/main") if b.kind == "system" and "forked design" in b.text]
    assert announce and announce[0].source_wavelet_id == design.id
    assert before.id <= (design.fork_blip_id or "")


def test_private_wavelets_are_invisible_to_non_members(store: Store) -> None:
    store.create_wave(OP, "demo", ["alice", "bob", "carol"])
    alice, carol = participant(store, "demo", "alice"), participant(store, "demo", "carol")
    secret = store.fork(alice, "demo/main", "secret", ["bob"], private=True)
    store.post(alice, "demo/secret", "hush")
    # a private fork does not announce itself where outsiders read
    assert not [b for b in store.read(carol, "demo/main") if "secret" in b.text]
    assert "secret" not in [w.name for w in store.get_wave(carol, "demo").wavelets]
    for call in (
        lambda: store.read(carol, "demo/secret"),
        lambda: store.read(carol, secret.id),
        lambda: store.post(carol, "demo/secret", "let me in"),
        lambda: store.context(carol, "demo/secret"),
    ):
        with pytest.raises(errors.NotFound) as e:
            call()
        assert "secret" in str(e.value) or secret.id in str(e.value)
    with pytest.raises(errors.NotFound) as hidden:
        store.read(carol, "demo/secret")
    with pytest.raises(errors.NotFound) as absent:
        store.read(carol, "demo/nonexistent")
    assert str(hidden.value).replace("secret", "X") == str(absent.value).replace("nonexistent", "X")
    # a feed never carries it to a non-member
    feed = store.feed(carol, "demo", "carol", {})
    assert all(b.wavelet_id != secret.id for b in feed.blips)
    assert "hush" in [b.text for b in store.read(OP, "demo/secret")]


def test_roster_changes_write_system_blips_and_gate_delivery(store: Store) -> None:
    store.create_wave(OP, "demo", ["alice"])
    alice = participant(store, "demo", "alice")
    store.post(alice, "demo/main", "before dave")
    store.invite(alice, "demo/main", "dave")
    dave = participant(store, "demo", "dave")
    feed = store.feed(dave, "demo", "dave", {})
    assert [b.text for b in feed.blips] == ["alice invited dave"]  # joins after 'before dave'
    store.leave(dave, "demo/main", "dave")
    assert store.feed(dave, "demo", "dave", {}).wavelets == []
    store.post(alice, "demo/main", "after dave left")
    assert store.feed(dave, "demo", "dave", {}).blips == []
    texts = [b.text for b in store.read(OP, "demo/main") if b.kind == "system"]
    assert texts[-2:] == ["alice invited dave", "dave left"]
    with pytest.raises(errors.Forbidden):
        store.post(dave, "demo/main", "I left but I talk")
    with pytest.raises(errors.Forbidden):
        store.leave(dave, "demo/main", "alice")


def test_replace_keeps_history_and_only_the_author_or_operator_may(store: Store) -> None:
    store.create_wave(OP, "demo", ["alice", "bob"])
    alice, bob = participant(store, "demo", "alice"), participant(store, "demo", "bob")
    v1 = store.post(alice, "demo/main", "v1")
    with pytest.raises(errors.Forbidden):
        store.replace(bob, v1.id, "bob's version")
    v2 = store.replace(alice, v1.id, "v2")
    assert v2.replaces == v1.id and v2.id > v1.id
    v3 = store.replace(OP, v2.id, "v3")
    with pytest.raises(errors.Conflict):
        store.replace(alice, v1.id, "stale")
    assert [b.text for b in store.history(bob, v2.id)] == ["v1", "v2", "v3"]
    shown = [b.text for b in store.read(bob, "demo/main") if b.kind == "message"]
    assert shown == ["v3"]
    assert v3.id in [b.id for b in store.read(bob, "demo/main", history=True)]
    system = store.read(OP, "demo/main")[0]
    with pytest.raises(errors.Forbidden):
        store.replace(OP, system.id, "rewrite provenance")


def test_surface_posts_into_the_parent_with_a_reference(store: Store) -> None:
    store.create_wave(OP, "demo", ["alice", "bob"])
    alice = participant(store, "demo", "alice")
    sub = store.fork(alice, "demo/main", "sub", ["bob"], private=True)
    conclusion = store.post(alice, "demo/sub", "we agree on X")
    s = store.surface(alice, "demo/sub", "conclusion: X", source_blip_id=conclusion.id)
    assert s.kind == "surface" and s.source_wavelet_id == sub.id and s.source_blip_id == conclusion.id
    assert s.wavelet_id == store.resolve(OP, "demo/main").id
    with pytest.raises(errors.UsageError):
        store.surface(alice, "demo/main", "no parent")


def test_bad_input_is_rejected_and_changes_nothing(store: Store) -> None:
    store.create_wave(OP, "demo", ["alice"])
    small = Store(store.path, max_blip_bytes=10)
    before = store.dump(OP)
    for call in (
        lambda: store.create_wave(OP, "Bad Name"),
        lambda: store.create_wave(OP, "ok", ["Not-Valid"]),
        lambda: store.create_wave(OP, "ok", ["system"]),
        lambda: store.post(OP, "demo/main", "   "),
        lambda: small.post(OP, "demo/main", "x" * 11),
        lambda: store.post(OP, "demo/nope", "hi"),
        lambda: store.post(OP, "demo/main", "hi", as_="Bad"),
        lambda: store.fork(OP, "demo/main", "a/b"),
        lambda: store.invite(OP, "demo/main", ""),
        lambda: store.leave(OP, "demo/main", "nobody"),
        lambda: store.replace(OP, "ffff", "x"),
    ):
        with pytest.raises(errors.FleetError):
            call()
    assert store.dump(OP) == before
    small.close()


def test_ids_strictly_increase_in_commit_order_under_concurrent_writers(store: Store) -> None:
    store.create_wave(OP, "demo", [f"p{i}" for i in range(8)])

    def work(i: int) -> None:
        who = participant(store, "demo", f"p{i}")
        for n in range(50):
            store.post(who, "demo/main", f"{i}-{n}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    conn = connect(store.path)
    by_commit = [
        json.loads(r[0])["blip"]["id"]
        for r in conn.execute("SELECT payload FROM events WHERE type = 'blip.posted' ORDER BY seq")
    ]
    conn.close()
    assert len(by_commit) == 400 and by_commit == sorted(by_commit) and len(set(by_commit)) == 400


def test_a_reopened_store_mints_ids_above_everything_it_holds(
    store_at: StoreAt, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Store(store_at("db"))
    s.create_wave(OP, "demo", ["alice"])
    last = s.post(OP, "demo/main", "one").id
    s.close()
    # the clock now reads far in the past (a restored VM, a skewed host): ids must still increase
    import uuid

    monkeypatch.setattr("uuid6.uuid7", lambda: uuid.UUID("00000000-0000-7000-8000-000000000000"))
    s2 = Store(store_at("db"))
    a = s2.post(OP, "demo/main", "two").id
    b = s2.post(OP, "demo/main", "three").id
    assert last < a < b
    s2.close()


def test_a_reopened_store_mints_ids_above_its_newest_summary_too(
    store_at: StoreAt, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A summary's id is minted like a blip's: a store reopened on a clock in the past must mint
    above it as well (every id increases in commit order)."""
    from fleet.models import NewSummary

    s = Store(store_at("db"))
    s.create_wave(OP, "demo", ["alice"])
    last = s.post(OP, "demo/main", "one", as_="alice").id
    got = s.summaries.summarize(OP, "demo/main", NewSummary(text="one said", upto=last, cites=[last]))
    assert got.accepted and got.summary is not None
    newest = got.summary.id
    s.close()
    import uuid

    monkeypatch.setattr("uuid6.uuid7", lambda: uuid.UUID("00000000-0000-7000-8000-000000000000"))
    s2 = Store(store_at("db"))
    assert newest < s2.post(OP, "demo/main", "two").id
    s2.close()


def _exercise(store: Store) -> None:
    store.create_wave(OP, "demo", ["alice", "bob"])
    alice = participant(store, "demo", "alice")
    store.post(alice, "demo/main", "hello")
    f = store.fork(alice, "demo/main", "f", ["bob"], private=True)
    b = store.post(alice, "demo/f", "inside")
    store.replace(alice, b.id, "inside, edited")
    store.surface(alice, "demo/f", "done", source_blip_id=b.id)
    store.invite(OP, f.id, "carol")
    store.leave(OP, f.id, "bob")
    t = store.mint_token(OP, "demo", "carol", "secret-1")
    store.mint_token(OP, "demo", "dave", "secret-2")
    store.revoke_tokens(OP, token_id=t.id)


def test_replaying_the_event_log_rebuilds_the_same_state(store: Store, tmp_path: Path) -> None:
    _exercise(store)
    replay(store.path, tmp_path / "rebuilt.sqlite3")
    rebuilt = connect(tmp_path / "rebuilt.sqlite3")
    assert dump_tables(rebuilt) == store.dump(OP)
    assert sum(len(v) for v in store.dump(OP).values()) > 10
    rebuilt.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(
                ["post", "fork", "invite", "leave", "replace", "surface", "ask", "answer", "settle"]
            ),
            st.sampled_from(["alice", "bob", "carol"]),
            st.integers(0, 5),
        ),
        max_size=30,
    )
)
def test_replay_equals_live_state_for_any_history(
    tmp_path_factory: pytest.TempPathFactory, store_at: StoreAt, ops: list[tuple[str, str, int]]
) -> None:
    d = tmp_path_factory.mktemp("replay")
    s = Store(store_at(f"{d.name}.db"))
    s.create_wave(OP, "w", ["alice", "bob"])
    for i, (op, who, n) in enumerate(ops):
        wavelets = s.get_wave(OP, "w").wavelets
        target = wavelets[n % len(wavelets)]
        try:
            if op == "post":
                s.post(OP, target.id, f"m{i}", as_=who)
            elif op == "fork":
                s.fork(OP, target.id, f"f{i}", [who], private=bool(n % 2), as_=who)
            elif op == "invite":
                s.invite(OP, target.id, who)
            elif op == "leave":
                s.leave(OP, target.id, who)
            elif op == "replace":
                msgs = [b for b in s.read(OP, target.id) if b.kind == "message"]
                if msgs:
                    s.replace(OP, msgs[-1].id, f"r{i}")
            elif op == "surface":
                s.surface(OP, target.id, f"s{i}", as_=who)
            elif op == "ask":
                sid = f"0b6f3a52-3c1e-4d53-9a57-5d2b3f1c9e0{n}"
                ask = PermissionAsk(participant=who, session_id=sid, tool="Bash", preview=f"ls {i}", wait=60)
                s.permissions.ask(OP, "w", ask)
            elif op == "answer":
                behavior: Behavior = "allow" if n % 2 else "deny"
                s.permissions.answer(OP, "w", PermissionAnswer(participant=who, behavior=behavior))
            elif op == "settle":
                waiting = s.permissions.pending(OP, "w", who)
                if waiting is not None:
                    outcome: Outcome = ("allowed", "denied", "expired")[n % 3]
                    settled = PermissionSettled(outcome=outcome, via="hook" if n % 3 == 2 else "pane")
                    s.permissions.settle(OP, "w", waiting.id, settled)
        except errors.FleetError:
            pass
    replay(s.path, d / "rebuilt")
    rebuilt = connect(d / "rebuilt")
    assert dump_tables(rebuilt) == s.dump(OP)
    rebuilt.close()
    s.close()


def test_agent_sessions_are_recorded_for_respawn_and_replayed(store: Store, tmp_path: Path) -> None:
    from fleet.models import NewSession

    wave = store.create_wave(OP, "demo", ["alice", "bob"])
    sid = "0b6f3a52-3c1e-4d53-9a57-5d2b3f1c9e01"
    rec = store.record_session(
        OP, "demo", NewSession(participant="alice", session_id=sid, wavelet_id=wave.root_id, agent="claude")
    )
    assert rec.session_id == sid and rec.wavelet_id == wave.root_id
    newer = "6f1c2b3a-0000-4000-8000-000000000002"
    store.record_session(
        OP, "demo", NewSession(participant="alice", session_id=newer, wavelet_id=wave.root_id)
    )
    assert [s.session_id for s in store.sessions(OP, "demo")] == [newer]
    bob = participant(store, "demo", "bob")
    assert store.sessions(bob, "demo") == []  # a participant sees only its own
    with pytest.raises(errors.Forbidden):
        store.record_session(
            bob, "demo", NewSession(participant="bob", session_id=sid, wavelet_id=wave.root_id)
        )
    with pytest.raises(errors.UsageError):
        store.record_session(
            OP, "demo", NewSession(participant="bob", session_id="nope", wavelet_id=wave.root_id)
        )
    replay(store.path, tmp_path / "rebuilt")
    rebuilt = connect(tmp_path / "rebuilt")
    assert dump_tables(rebuilt) == store.dump(OP)
    rebuilt.close()


def test_provenance_blips_name_the_participant_who_acted(store: Store) -> None:
    store.create_wave(OP, "demo", ["alice", "bob"])
    alice = participant(store, "demo", "alice")
    store.fork(alice, "demo/main", "side", ["bob"])
    store.invite(alice, "demo/side", "carol")
    store.leave(participant(store, "demo", "bob"), "demo/side", "bob")
    actors = {b.text: b.actor for b in store.read(OP, "demo/side") if b.kind == "system"}
    assert actors == {
        "alice forked side from main with alice, bob": "alice",
        "alice invited carol": "alice",
        "bob left": "bob",
    }
    assert [b.actor for b in store.read(OP, "demo/main") if b.kind == "system"] == ["operator", "alice"]
    assert all(b.actor is None for b in store.read(OP, "demo/main") if b.kind == "message")


def test_a_participant_does_not_learn_who_is_only_in_a_private_wavelet(store: Store) -> None:
    store.create_wave(OP, "demo", ["alice", "carol"])
    alice, carol = participant(store, "demo", "alice"), participant(store, "demo", "carol")
    store.fork(alice, "demo/main", "secret", ["zed"], private=True)

    def names(who: Principal) -> list[str]:
        return [n for n, _ in store.participants(who, "demo")]

    assert "zed" in names(OP) and "zed" in names(alice)
    assert names(carol) == ["alice", "carol", "operator"]


# ---------------------------------------------------------------- typed events, one authorization layer

DATA = Path(__file__).resolve().parents[1] / "data"


def _every_event_type(store: Store) -> None:
    """A history that writes each event type at least once."""
    from fleet.models import CloseSeat, NewSeat, NewSession
    from fleet.summaries import extractive

    _exercise(store)
    store.fork(OP, "demo/main", "public", ["bob"])
    store.post_system(OP, "demo/main", "supervisor: restarted bob")
    store.set_topic(OP, "demo/public", "the public plan, in one line")
    store.set_topic(participant(store, "demo", "bob"), "demo/public", "")
    wave = store.get_wave(OP, "demo")
    sid = "0b6f3a52-3c1e-4d53-9a57-5d2b3f1c9e01"
    store.record_session(OP, "demo", NewSession(participant="alice", session_id=sid, wavelet_id=wave.root_id))
    store.claim_seat(OP, "demo", NewSeat(participant="resident", session_id=sid, host="h", pid=42))
    store.close_seat(OP, "demo", CloseSeat(why="stopped"))
    last = store.post(OP, "demo/main", "DONE: the demo\n" + "what it showed, at length. " * 8, as_="alice")
    store.summaries.pin(OP, last.id)
    proposal = extractive(store.summaries.pending(OP, "demo/main"))
    assert proposal is not None and store.summaries.summarize(OP, "demo/main", proposal).accepted

    from fleet.records.budgets import BudgetReport, SetBudget

    b = store.set_budget(OP, "demo", SetBudget(participant="alice", tokens=100))
    assert b is not None
    report = BudgetReport(participant="alice", wavelet_id="", scope="alice", set_at=b.set_at, spent="120")
    assert store.budget_reached(participant(store, "demo", "alice"), "demo", report).first

    from fleet.records.permissions import PermissionAnswer, PermissionAsk

    ask = PermissionAsk(participant="alice", session_id=sid, tool="Bash", preview="ls -la", prompt_id="p1")
    store.permissions.ask(participant(store, "demo", "alice"), "demo", ask)
    store.permissions.answer(OP, "demo", PermissionAnswer(participant="alice", behavior="allow"))


def test_replay_covers_every_event_type(store: Store, tmp_path: Path) -> None:
    _every_event_type(store)
    written = {e.type for e in store.events(OP)}
    assert written == set(EVENT_TYPES), set(EVENT_TYPES) - written
    replay(store.path, tmp_path / "rebuilt.sqlite3")
    rebuilt = connect(tmp_path / "rebuilt.sqlite3")
    assert dump_tables(rebuilt) == store.dump(OP)
    # the log is copied verbatim: the rebuilt store replays to the same state again
    replay(tmp_path / "rebuilt.sqlite3", tmp_path / "again.sqlite3")
    again = connect(tmp_path / "again.sqlite3")
    assert dump_tables(again) == dump_tables(rebuilt)
    rebuilt.close()
    again.close()


def test_a_log_written_before_typed_events_replays_to_the_same_rows(tmp_path: Path) -> None:
    from fleet.store.events import parse, payload_of

    old = json.loads((DATA / "log-0003.json").read_text(encoding="utf-8"))
    assert {t for t, _at, _payload in old["events"]} == set(EVENT_TYPES) - {
        "seat.claimed",
        "seat.closed",
        "budget.set",
        "budget.reached",
        "summary.recorded",
        "blip.pinned",
        "permission.asked",
        "permission.answered",
        "wavelet.topic",
    }
    src = sqlite3.connect(tmp_path / "old.sqlite3", isolation_level=None)
    migrate(src)
    src.executemany("INSERT INTO events(type, created_at, payload) VALUES (?,?,?)", old["events"])
    src.close()
    replay(tmp_path / "old.sqlite3", tmp_path / "new.sqlite3")
    new = connect(tmp_path / "new.sqlite3")
    expected = {k: [tuple(r) for r in rows] for k, rows in old["tables"].items()}
    # a replacement's replacer came after this log: its replacements keep the replacer as author
    expected["blips"] = [(*r, None) for r in expected["blips"]]
    # and topics came after it: every wavelet has none
    expected["wavelets"] = [(*r, "") for r in expected["wavelets"]]
    later: dict[str, list[tuple[object, ...]]] = {
        "token_grants": [],
        "seats": [],
        "budgets": [],
        "budget_marks": [],
        "summaries": [],
        "pins": [],
        "permissions": [],
    }
    assert dump_tables(new) == expected | later  # these came after this log
    new.close()
    # and today's code writes the very same payload text for the same events
    for etype, _at, payload in old["events"]:
        assert payload_of(parse(etype, payload)) == payload, etype


@pytest.mark.parametrize(
    ("etype", "payload", "fragment"),
    [
        ("wave.renamed", "{}", "unknown event type"),
        ("blip.posted", "[]", "not a JSON object"),
        ("blip.posted", "{nope", "not valid JSON"),
        ("token.revoked", '{"token_id": "t"}', "revoked_at"),
        ("token.revoked", '{"token_id": "t", "revoked_at": "x", "extra": 1}', "extra"),
        ("blip.posted", '{"blip": {"id": 1}}', "blip"),
    ],
)
def test_a_log_row_that_does_not_fit_stops_replay(
    tmp_path: Path, etype: str, payload: str, fragment: str
) -> None:
    src = connect(tmp_path / "bad.sqlite3")
    migrate(src)
    src.execute("INSERT INTO events(type, created_at, payload) VALUES (?, '', ?)", (etype, payload))
    src.close()
    with pytest.raises(errors.FleetError, match=fragment):
        replay(tmp_path / "bad.sqlite3", tmp_path / "rebuilt.sqlite3")
    rebuilt = connect(tmp_path / "rebuilt.sqlite3")
    assert sum(len(rows) for rows in dump_tables(rebuilt).values()) == 0  # nothing half applied
    rebuilt.close()


def test_every_public_store_method_takes_the_principal_first() -> None:
    # authenticate is how a principal is obtained; the rest are the daemon's housekeeping
    exempt = {"authenticate", "close", "release_reader", "shrink_readers", "announce", "listen", "group"}
    for name, fn in inspect.getmembers(Store, inspect.isfunction):
        if name.startswith("_") or name in exempt:
            continue
        params = list(inspect.signature(fn).parameters)
        assert params[:2] == ["self", "who"], f"Store.{name}{inspect.signature(fn)}"


def test_operator_only_reads_refuse_a_participant(store: Store) -> None:
    store.create_wave(OP, "demo", ["alice"])
    alice = participant(store, "demo", "alice")
    for call in (
        lambda: store.read_wave_after(alice, "demo", ""),
        lambda: store.wave_head(alice, "demo"),
        lambda: list(store.events(alice)),
        lambda: store.dump(alice),
        lambda: store.activity(alice, "demo"),
    ):
        with pytest.raises(errors.Forbidden):
            call()
    assert store.wave_head(OP, "demo") == store.read(OP, "demo/main")[-1].id
    assert store.wave_name(alice, "demo") == "demo"
    other = store.create_wave(OP, "other")
    with pytest.raises(errors.NotFound):
        store.wave_name(alice, other.id)


def test_read_resolved_rechecks_that_the_reader_still_sees_the_wavelet(store: Store) -> None:
    store.create_wave(OP, "demo", ["alice", "bob"])
    alice, bob = participant(store, "demo", "alice"), participant(store, "demo", "bob")
    secret = store.fork(alice, "demo/main", "secret", ["bob"], private=True)
    assert store.read_resolved(bob, secret.id)  # on the roster: readable by id
    store.leave(bob, secret.id, "bob")
    store.post(alice, secret.id, "after bob left")
    with pytest.raises(errors.NotFound):
        store.read_resolved(bob, secret.id)
    with pytest.raises(errors.NotFound):
        store.read_tail(bob, secret.id)
    assert store.read_resolved(alice, secret.id)[-1].text == "after bob left"
    other = store.create_wave(OP, "other")
    with pytest.raises(errors.NotFound):
        store.read_resolved(alice, other.root_id)  # another wave's wavelet, by its exact id


def test_a_remembered_token_is_forgotten_when_it_is_revoked_and_posts_keep_it(store: Store) -> None:
    """``authenticate`` remembers known tokens between token writes (a look-up per request was a
    tenth of the daemon's time): a revocation still counts at the very next look-up."""
    w = store.create_wave(OP, "w", ["alice", "bob"])
    store.mint_token(OP, "w", "alice", "alice-secret")
    store.mint_token(OP, "w", "bob", "bob-secret")
    alice = store.authenticate("alice-secret")
    assert alice is not None and alice.name == "alice"
    store.post(alice, w.root_id, "a write that is not about tokens")
    assert store.authenticate("alice-secret") is alice  # remembered across it
    assert store.authenticate("nobody-secret") is None
    store.revoke_tokens(OP, wave="w", participant="alice")
    assert store.authenticate("alice-secret") is None
    bob = store.authenticate("bob-secret")
    assert bob is not None and bob.name == "bob"


def test_a_generation_is_exact_only_for_a_read_no_write_overlapped(store_at: StoreAt) -> None:
    """What the shared feed results rest on: a stamp taken before a read is exact after it only
    when no write was in progress and none began; an older generation's table is gone."""
    from fleet.store.schema import Connections, GenerationMemo

    db = Connections(store_at("s.db"))
    quiet = db.stamp()
    assert db.exact(quiet)
    with db.write() as w:
        during = db.stamp()  # a write in progress: a read now may see it or not
        assert not db.exact(during) and not db.exact(quiet)
        w.execute("SELECT 1")
    assert not db.exact(quiet) and not db.exact(during), "a write began since: not exact"
    after = db.stamp()
    assert db.exact(after) and after[0] == quiet[0] + 1
    with pytest.raises(RuntimeError), db.write():
        raise RuntimeError("rolled back")
    assert db.stamp()[0] == after[0] + 1 and not db.exact(after)  # a failed write ends one too
    memo = GenerationMemo()
    first = memo.at(1)
    assert first is not None
    first["k"] = "v"
    assert memo.at(1) is first and memo.at(0) is None
    assert memo.at(2) == {} and memo.at(1) is None, "a newer generation drops the older one's results"
    db.close()


def test_the_log_carries_the_replacer_and_leaves_it_out_of_other_blips(store_at: StoreAt) -> None:
    s = Store(store_at("db"))
    s.create_wave(OPERATOR_PRINCIPAL, "w", ["alice", "bob"])
    main = s.resolve(OPERATOR_PRINCIPAL, "w/main").id
    b = s.post(OPERATOR_PRINCIPAL, main, "hi", as_="alice")
    r = s.replace(OPERATOR_PRINCIPAL, b.id, "hello", as_="bob")
    assert (r.author, r.replaced_by) == ("alice", "bob")
    payload = s._db.writer.execute(
        "SELECT payload FROM events WHERE type = 'blip.replaced' ORDER BY seq DESC LIMIT 1"
    ).fetchone()[0]
    assert '"replaced_by":"bob"' in payload
    posted = s._db.writer.execute(
        "SELECT payload FROM events WHERE type = 'blip.posted' ORDER BY seq DESC LIMIT 1"
    ).fetchone()[0]
    assert "replaced_by" not in posted  # an unset optional key stays out of the log, as before
    s.close()


def test_an_id_prefix_resolves_whatever_its_case(store: Store) -> None:
    """Ids are lowercase hex; a prefix typed in capitals names the same wavelet and blip (SQLite's
    LIKE folds ASCII case, and so must every engine's)."""
    w = store.create_wave(OP, "w", ["alice"])
    b = store.post(OP, w.root_id, "hi")
    assert store.resolve(OP, w.root_id[:8].upper()).id == w.root_id
    assert [x.id for x in store.history(OP, b.id[:13].upper())] == [b.id]


def test_activity_counts_each_authors_blips_and_names_the_latest(store: Store) -> None:
    w = store.create_wave(OP, "w", ["alice", "bob"])
    posts = [store.post(OP, w.root_id, f"m{i}", as_="alice" if i % 3 else "bob") for i in range(7)]
    got = {(a.participant, a.blips, a.last_blip_id, a.last_blip_at) for a in store.activity(OP, "w").activity}
    last = {who: [b for b in posts if b.author == who][-1] for who in ("alice", "bob")}
    assert got == {
        ("alice", 4, last["alice"].id, last["alice"].created_at),
        ("bob", 3, last["bob"].id, last["bob"].created_at),
    }


def test_a_sessions_spend_is_never_lowered_by_a_later_report(store: Store) -> None:
    from fleet.records.budgets import Spend, SpendReport

    w = store.create_wave(OP, "w", ["alice"])
    for tokens, cost in ((100, 0.5), (40, 0.1), (150, 0.25)):  # a late, smaller report changes nothing
        rep = SpendReport(
            participant="alice",
            session_id="s1",
            spend=[Spend(wavelet_id=w.root_id, tokens=tokens, cost=cost)],
        )
        store.report_spend(OP, "w", rep)
    conn = connect(store.path)
    row = conn.execute("SELECT tokens, cost FROM budget_spend WHERE session_id = 's1'").fetchone()
    conn.close()
    assert (row[0], row[1]) == (150, 0.5)
