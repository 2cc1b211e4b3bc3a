"""A wavelet's one-line topic (``fleet wavelet topic``, ``POST /v1/wavelets/{wavelet}/topic``).

Against a real daemon on 127.0.0.1:0 and its SQLite file, through the CLI in a subprocess and raw
HTTP: set, show and clear; who may set it (members and the operator; a private wavelet's outsider
gets the same not-found as any other op there); refused input changes nothing; the log replays to
the same rows; a resent request writes once; ``fleet tree`` and ``fleet status`` show it, cut to the
terminal's width.
"""

from __future__ import annotations

import json
import sqlite3
import unicodedata
import uuid
from pathlib import Path

import pytest
from httphelp import Http, Resp, q, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli import base_env, fails, fleet, ok

from fleet.daemon import Daemon
from fleet.store import connect, dump_tables, replay

MAX_TOPIC = 200
"""The documented cap (docs/http-api.md), written here rather than imported: the test states the rule."""


def cells(line: str) -> int:
    """Terminal columns of ``line``: East Asian wide and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)


@pytest.fixture
def h(daemon: Daemon) -> Http:
    """The operator over raw HTTP, with wave ``demo``: alice and bob on main, ``secret`` private to bob."""
    http = Http(daemon.url, daemon.operator_token)
    http.new_wave("demo", ["alice", "bob"]).ok(201)
    http.fork("demo/main", "secret", ["bob"], private=True).ok(201)
    return http


@pytest.fixture
def env(daemon: Daemon, h: Http) -> dict[str, str]:
    return base_env(FLEET_DAEMON=daemon.url, FLEET_TOKEN=daemon.operator_token)


def token_of(h: Http, name: str) -> str:
    token = h.mint("demo", name).ok(201)
    assert isinstance(token, dict)
    return str(token["token"])


def set_topic(h: Http, wavelet: str, topic: object, **kw: object) -> Resp:
    return h.post(f"/v1/wavelets/{q(wavelet)}/topic", {"topic": topic}, **kw)


def topic_of(h: Http, wavelet: str) -> str:
    body = h.wavelet(wavelet).ok(200)
    assert isinstance(body, dict)
    return str(body["topic"])


def events_of(db: Path, etype: str) -> list[dict[str, object]]:
    conn = sqlite3.connect(db)
    try:
        got = conn.execute("SELECT payload FROM events WHERE type = ? ORDER BY seq", (etype,)).fetchall()
        return [json.loads(r[0]) for r in got]
    finally:
        conn.close()


# ---------------------------------------------------------------- set, show, clear


def test_the_cli_sets_shows_and_clears_a_topic(daemon: Daemon, env: dict[str, str]) -> None:
    none = fleet("wavelet", "topic", "demo/main", env=env)
    assert none.returncode == 0 and none.stdout == ""
    assert "demo/main has no topic" in none.stderr and "fleet wavelet topic demo/main TEXT" in none.stderr

    assert ok("wavelet", "topic", "demo/main", "ship the release, then the notes", env=env) == (
        "ship the release, then the notes\n"
    )
    assert ok("wavelet", "topic", "main", "--wave", "demo", env=env) == "ship the release, then the notes\n"
    shown = json.loads(ok("wavelet", "topic", "demo/main", "--json", env=env))
    assert shown["topic"] == "ship the release, then the notes" and shown["name"] == "main"
    # The transcript says who changed it, as provenance of the operator's act.
    last = json.loads(ok("read", "demo/main", "--json", env=env))["blips"][-1]
    assert last["kind"] == "system" and last["actor"] == "operator"
    assert last["text"] == 'operator set the topic: "ship the release, then the notes"'

    cleared = fleet("wavelet", "topic", "demo/main", "--clear", env=env)
    assert cleared.returncode == 0 and "has no topic now" in cleared.stderr
    assert json.loads(ok("wavelet", "topic", "demo/main", "--json", env=env))["topic"] == ""
    last = json.loads(ok("read", "demo/main", "--json", env=env))["blips"][-1]
    assert last["text"] == "operator cleared the topic"
    assert len(events_of(daemon.paths.db, "wavelet.topic")) == 2


def test_cli_refusals_exit_2_name_the_problem_and_change_nothing(daemon: Daemon, env: dict[str, str]) -> None:
    before = snapshot(daemon.paths.db)
    err = fails(2, "wavelet", "topic", "demo/main", "two\nlines", env=env)
    assert "newline at character 4" in err and "one line" in err
    err = fails(2, "wavelet", "topic", "demo/main", "x" * (MAX_TOPIC + 1), env=env)
    assert f"{MAX_TOPIC + 1} characters, over the limit of {MAX_TOPIC}" in err
    assert "U+001B" in fails(2, "wavelet", "topic", "demo/main", "\x1b[31mred", env=env)
    assert "--clear" in fails(2, "wavelet", "topic", "demo/main", "", env=env)
    assert "not both" in fails(2, "wavelet", "topic", "demo/main", "x", "--clear", env=env)
    assert snapshot(daemon.paths.db) == before


def test_a_member_sets_it_a_non_member_is_forbidden_and_an_outsider_sees_no_private_wavelet(
    daemon: Daemon, h: Http
) -> None:
    alice = Http(daemon.url, token_of(h, "alice"))
    bob = Http(daemon.url, token_of(h, "bob"))
    carol = Http(daemon.url, token_of(h, "carol"))  # on no roster: sees public wavelets only

    got = set_topic(alice, "demo/main", "alice's plan").ok(200)
    assert isinstance(got, dict) and got["topic"] == "alice's plan"
    assert topic_of(carol, "demo/main") == "alice's plan"  # anyone who sees it reads it
    assert events_of(daemon.paths.db, "wavelet.topic")[-1]["by"] == "alice"
    before = snapshot(daemon.paths.db)

    r = set_topic(carol, "demo/main", "carol's plan")
    assert r.status == 403 and "not on the roster of 'main'" in r.error["message"]
    r = h.post(f"/v1/wavelets/{q('demo/main')}/topic", {"topic": "carol's plan", "as": "carol"})
    assert r.status == 403 and "'carol' is not on the roster of 'main'" in r.error["message"]
    # A private wavelet alice is not on: the same not-found as any other op on it, so the
    # answer says nothing of whether it exists.
    r = set_topic(alice, "demo/secret", "peek")
    other = alice.invite("demo/secret", "alice")
    assert r.status == other.status == 404 and r.error == other.error
    assert alice.wavelet("demo/secret").status == 404
    assert snapshot(daemon.paths.db) == before

    assert set_topic(bob, "demo/secret", "bob's secret").ok(200)["topic"] == "bob's secret"
    tree = alice.get(f"/v1/waves/{q('demo')}").ok(200)
    assert isinstance(tree, dict) and "bob's secret" not in json.dumps(tree)
    for who in (alice, bob, carol):
        who.close()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"topic": "a\nb"}, "newline at character 2"),
        ({"topic": "a\rb"}, "newline"),
        ({"topic": "tab\there"}, "U+0009"),
        ({"topic": "bell\x07"}, "U+0007"),
        ({"topic": "del\x7f"}, "U+007F"),
        ({"topic": "c1\x85"}, "U+0085"),
        ({"topic": "para\u2029graph"}, "line separator U+2029"),
        ({"topic": "x" * (MAX_TOPIC + 1)}, "over the limit of 200"),
        ({"topic": "   "}, "only spaces"),
        ({"topic": 5}, "topic"),
        ({"topic": None}, "topic"),
        ({"topic": ["a"]}, "topic"),
        ({}, "topic"),
        ({"topic": "fine", "extra": 1}, "extra"),
    ],
)
def test_refused_input_is_400_naming_it_and_changes_nothing(
    daemon: Daemon, h: Http, body: object, fragment: str
) -> None:
    before = snapshot(daemon.paths.db)
    r = h.post(f"/v1/wavelets/{q('demo/main')}/topic", body)
    assert r.status == 400, r.raw
    assert r.error["kind"] == "usage" and fragment in r.error["message"]
    assert snapshot(daemon.paths.db) == before


# ---------------------------------------------------------------- the rule, as a property

ONE_LINE_BREAKERS = frozenset({"Cc", "Cs", "Zl", "Zp"})


def acceptable(topic: str) -> bool:
    """The documented rule: '' (none), or one line (no control character, line or paragraph
    separator, lone surrogate) of at most 200 characters, not only spaces."""
    if topic == "":
        return True
    one_line = not any(unicodedata.category(ch) in ONE_LINE_BREAKERS for ch in topic)
    return one_line and len(topic) <= MAX_TOPIC and topic.strip() != ""


TOPICS = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=MAX_TOPIC - 3, max_size=MAX_TOPIC + 3),
    st.text(
        alphabet=st.sampled_from(" a\n\r\t\x00\x1b\x7f\x85\u2028\u00e9\u4e2d\U0001f600\ud800"), max_size=9
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=TOPICS)
def test_a_topic_is_accepted_iff_one_line_within_the_cap_and_reads_back_exactly(
    daemon: Daemon, h: Http, topic: str
) -> None:
    before = snapshot(daemon.paths.db)
    was = topic_of(h, "demo/main")
    r = set_topic(h, "demo/main", topic)
    if acceptable(topic):
        assert r.status == 200, (topic, r.raw)
        assert topic_of(h, "demo/main") == topic
        if topic == was:
            assert snapshot(daemon.paths.db) == before  # the same topic again writes nothing
    else:
        assert r.status == 400 and r.error["kind"] == "usage", (topic, r.raw)
        assert snapshot(daemon.paths.db) == before


# ---------------------------------------------------------------- the log and request keys


def test_the_log_replays_to_the_same_rows_topics_included(daemon: Daemon, h: Http, tmp_path: Path) -> None:
    set_topic(h, "demo/main", "first").ok(200)
    set_topic(h, "demo/secret", "hidden work").ok(200)
    set_topic(h, "demo/main", "second, with “quotes” and 中文").ok(200)
    set_topic(h, "demo/main", "").ok(200)
    set_topic(h, "demo/secret", "hidden work, again").ok(200)
    replay(daemon.paths.db, tmp_path / "rebuilt.sqlite3")
    live, rebuilt = connect(daemon.paths.db, readonly=True), connect(tmp_path / "rebuilt.sqlite3")
    try:
        assert dump_tables(rebuilt) == dump_tables(live)
        topics = dict(rebuilt.execute("SELECT name, topic FROM wavelets").fetchall())
        assert topics == {"main": "", "secret": "hidden work, again"}
    finally:
        live.close()
        rebuilt.close()


def test_a_resent_topic_write_is_applied_once_even_when_its_answer_was_lost(daemon: Daemon, h: Http) -> None:
    k = str(uuid.uuid4())
    path = f"/v1/wavelets/{q('demo/main')}/topic"
    first = h.post(path, {"topic": "once"}, headers={"Idempotency-Key": k})
    set_topic(h, "demo/main", "changed since").ok(200)
    again = h.post(path, {"topic": "once"}, headers={"Idempotency-Key": k})
    assert first.status == again.status == 200 and again.raw == first.raw  # the stored first answer
    # The daemon died between the write's commit and storing its answer: the repeat is answered
    # from the event the write recorded (the wavelet as it is now), and writes nothing.
    conn = sqlite3.connect(daemon.paths.db)
    with conn:
        assert conn.execute("UPDATE request_keys SET status = NULL, body = NULL").rowcount >= 1
    conn.close()
    rebuilt = h.post(path, {"topic": "once"}, headers={"Idempotency-Key": k})
    assert rebuilt.status == 200 and rebuilt.ok(200)["topic"] == "changed since"
    assert [e["topic"] for e in events_of(daemon.paths.db, "wavelet.topic")] == ["once", "changed since"]


# ---------------------------------------------------------------- tree and status


LONG = "keep the migration forward-only and the replay equal, whatever the old logs held " * 2


def test_tree_and_status_show_the_topic_cut_to_a_narrow_width(daemon: Daemon, h: Http) -> None:
    set_topic(h, "demo/main", LONG.strip()).ok(200)
    set_topic(h, "demo/secret", "短い話題: 中文 and emoji 😀😀😀😀😀😀😀😀😀😀😀😀😀").ok(200)
    wide = base_env(
        FLEET_DAEMON=daemon.url, FLEET_TOKEN=daemon.operator_token, COLUMNS="400",
        FLEET_TMUX_SOCKET=f"fleet-topic-none-{uuid.uuid4().hex[:8]}",
    )  # fmt: skip
    assert f"└── main  [alice, bob]  — {LONG.strip()}\n" in ok("tree", "demo", env=wide)
    for columns in (40, 61, 80):
        narrow = dict(wide, COLUMNS=str(columns))
        lines = ok("tree", "demo", env=narrow).splitlines()
        assert len(lines) == 3, lines  # the wave, main, secret: nothing wrapped onto a line of its own
        assert all(cells(line) <= columns for line in lines), [(cells(x), x) for x in lines]
        assert lines[1].startswith("└── main  [alice, bob]  — keep") and lines[1].endswith("…")
        assert "secret  [bob]  (private)" in lines[2]
        status = ok("status", "demo", env=narrow).splitlines()
        assert status[1].startswith("  main  — keep") and status[1].endswith("…")
        assert cells(status[1]) <= columns and cells(status[2]) <= columns
    status = json.loads(ok("status", "demo", "--json", env=wide))
    assert status["topics"] == {"demo/main": LONG.strip(), "demo/secret": topic_of(h, "demo/secret")}
