"""Private wavelets do not betray that they exist (issue 24, finding 9), over a real daemon.

A reader who is not on a private wavelet's roster never receives its id, nor the id of any of its
blips: not as a visible wavelet's ``parent_id`` / ``fork_blip_id`` (withheld: null, with
``parent_withheld``), not as a blip's ``source_wavelet_id`` / ``source_blip_id`` (null), on any route
it may call (``/v1/waves/…``, ``/v1/wavelets/…``, resolve, context, blips, summaries, the feed,
writes' answers), nor through the CLI's ``fleet tree`` or the channel's ``wavelet_list`` /
``wavelet_read``. Members and the operator still see every id. The property: random trees of public
and private wavelets with random rosters, surfaces and leaves; every answer to every non-member
holds no id of a wavelet or blip it cannot see.

What a fork-name probe tells a non-member is what docs/design.md §1 says: that the name is taken.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from consolehelp import EventStream, login, request
from httphelp import Http, Resp, q, snapshot
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcphelp import channel_argv

from fleet.daemon import Daemon
from fleet.paths import Paths

REPO = Path(__file__).resolve().parents[2]
PEOPLE = ("alice", "bob", "carol", "dave")


@pytest.fixture
def daemon(fleet_env: Paths) -> Iterator[Daemon]:
    """A real daemon on 127.0.0.1:0 with its operator console (on 127.0.0.1:0 too)."""
    d = Daemon(fleet_env, listen="127.0.0.1:0", ui="127.0.0.1:0")
    d.start()
    try:
        yield d
    finally:
        d.stop()


# ---------------------------------------------------------------- a model of the wave


@dataclass
class Node:
    """A wavelet as the test built it: the truth the store's answers are checked against."""

    id: str
    name: str
    parent: str | None
    private: bool
    roster: set[str]
    fork_blip: str | None = None
    blips: set[str] = field(default_factory=set)


@dataclass
class Model:
    wave: str
    root: str
    nodes: dict[str, Node]
    tokens: dict[str, str]
    """Participant -> its token for the wave."""
    sources: dict[str, str | None] = field(default_factory=dict)
    """Blip id -> the wavelet it names as its source, as the operator reads it."""

    def sees(self, who: str, wavelet_id: str) -> bool:
        n = self.nodes[wavelet_id]
        return not n.private or who in n.roster

    def hidden_names(self, who: str) -> set[str]:
        """The names of the wavelets ``who`` cannot see: no answer's text may hold them either."""
        return {n.name for n in self.nodes.values() if not self.sees(who, n.id)}

    def hidden_ids(self, who: str) -> set[str]:
        """Every id ``who`` must never be told: the wavelets it cannot see and their blips."""
        out: set[str] = set()
        for n in self.nodes.values():
            if not self.sees(who, n.id):
                out |= {n.id, *n.blips}
        return out

    def refresh_blips(self, op: Http) -> None:
        """Every blip id of every wavelet, replaced versions included, from the operator's reads."""
        for n in self.nodes.values():
            blips = op.read(n.id, "history=1&limit=5000").ok(200)["blips"]
            n.blips = {b["id"] for b in blips}
            self.sources.update({b["id"]: b["source_wavelet_id"] for b in blips})


_waves = itertools.count()


def new_model(d: Daemon, op: Http) -> Model:
    name = f"w{next(_waves)}"
    w = op.new_wave(name, list(PEOPLE)).ok(201)
    tokens = {p: op.mint(name, p).ok(201)["token"] for p in PEOPLE}
    root = Node(w["root_id"], "main", None, False, set(PEOPLE))
    return Model(name, w["root_id"], {root.id: root}, tokens)


def fork(op: Http, m: Model, parent: str, name: str, roster: list[str], private: bool) -> str:
    """Fork as the roster's first member (the operator acting for them)."""
    got = op.post(
        f"/v1/wavelets/{q(parent)}/fork",
        {"name": name, "with": roster[1:], "private": private, "as": roster[0]},
    ).ok(201)
    m.nodes[got["id"]] = Node(got["id"], name, parent, private, set(roster), got["fork_blip_id"])
    return str(got["id"])


def post(op: Http, wavelet: str, text: str, as_: str) -> str:
    return str(op.post_blip(wavelet, text, as_=as_).ok(201)["id"])


def surface(op: Http, wavelet: str, text: str, as_: str, source: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"text": text, "as": as_}
    if source is not None:
        body["source_blip_id"] = source
    got: dict[str, Any] = op.post(f"/v1/wavelets/{q(wavelet)}/surface", body).ok(201)
    return got


# ---------------------------------------------------------------- every answer a reader gets


def answers(d: Daemon, m: Model, who: str) -> list[tuple[str, Resp]]:
    """What ``who`` is answered on every read route (and a few idempotent writes), for every
    wavelet and blip it can see: (what was asked, the answer)."""
    h = Http(d.url, m.tokens[who])
    got: list[tuple[str, Resp]] = []

    def ask(what: str, r: Resp) -> Resp:
        got.append((what, r))
        return r

    try:
        ask("whoami", h.get("/v1/whoami"))
        ask("waves", h.get("/v1/waves"))
        wave = ask("wave", h.get(f"/v1/waves/{q(m.wave)}")).ok(200)
        for path in ("budgets", "presence", "sessions", "seat"):
            ask(path, h.get(f"/v1/waves/{q(m.wave)}/{path}"))
        ask("feed", h.post(f"/v1/waves/{q(m.wave)}/feed", {"participant": who, "cursors": {}}))
        for wl in wave["wavelets"]:
            i, ref = wl["id"], f"{m.wave}/{wl['name']}"
            ask(f"resolve {ref}", h.get(f"/v1/resolve?ref={q(ref)}"))
            ask(f"resolve name {ref}", h.get(f"/v1/resolve?ref={q(wl['name'])}&wave={q(m.wave)}"))
            ask(f"resolve prefix {ref}", h.get(f"/v1/resolve?ref={q(i[:30])}"))
            ask(f"wavelet {ref}", h.wavelet(i))
            blips = ask(f"read {ref}", h.read(i, "history=1&limit=5000")).ok(200)["blips"]
            ask(f"read current {ref}", h.read(i))
            ask(f"context {ref}", h.context(i))
            ask(f"context page {ref}", h.get(f"/v1/wavelets/{q(i)}/context?limit=2"))
            for path in ("summaries", "summaries/check", "summaries/pending"):
                ask(f"{path} {ref}", h.get(f"/v1/wavelets/{q(i)}/{path}"))
            if who in {r["name"] for r in wl["roster"]}:
                ask(f"invite self {ref}", h.invite(i, who))  # a no-op: answers the wavelet
            for b in blips:
                ask(f"blip {b['id']}", h.get(f"/v1/blips/{q(b['id'])}"))
                ask(f"history {b['id']}", h.history(b["id"]))
    finally:
        h.close()
    return got


def assert_withheld(m: Model, who: str, got: list[tuple[str, Resp]]) -> None:
    """No answer to ``who`` holds an id it cannot see; and what it can see is shown in full."""
    hidden = m.hidden_ids(who)
    for what, r in got:
        assert r.status < 500, (who, what, r.raw[:300])
        text = r.raw.decode()
        leaked = sorted(i for i in hidden if i in text)
        assert not leaked, f"{who} asked {what} and was told {leaked}: {text[:600]}"
        named = sorted(n for n in m.hidden_names(who) if re.search(rf"\b{re.escape(n)}\b", text))
        assert not named, f"{who} asked {what} and was told the name of {named}: {text[:600]}"
    for what, r in got:
        if r.status != 200:
            continue
        if what.startswith("wavelet "):
            wl, n = r.body, m.nodes[r.body["id"]]
            shown = n.parent is None or m.sees(who, n.parent)
            want = (n.parent, n.fork_blip, False) if shown else (None, None, True)
            assert (wl["parent_id"], wl["fork_blip_id"], wl["parent_withheld"]) == want, what
        if what.startswith("read "):  # a blip names its source exactly when the reader sees it
            for b in r.body["blips"]:
                src = m.sources[b["id"]]
                want_src = src if src is None or m.sees(who, src) else None
                assert b["source_wavelet_id"] == want_src, (what, b)
                if want_src is None:
                    assert b["source_blip_id"] is None, (what, b)


# ---------------------------------------------------------------- a fixed wave


@dataclass
class World:
    d: Daemon
    op: Http
    m: Model
    secret: str
    """Private, alice only; a blip in it."""
    child: str
    """Public, forked from ``secret`` by alice, with alice and bob."""
    inner: str
    """Private, forked from ``secret`` by alice with carol (who is not on ``secret``)."""
    huddle: str
    """Private, forked from main by alice with bob; bob surfaced from it into main."""
    surfaced: dict[str, Any]
    """That surface, as bob's write was answered."""


@pytest.fixture
def world(daemon: Daemon) -> Iterator[World]:
    op = Http(daemon.url, daemon.operator_token)
    m = new_model(daemon, op)
    secret = fork(op, m, m.root, "secret-plans", ["alice"], True)
    post(op, secret, "the secret itself", "alice")
    child = fork(op, m, secret, "open-child", ["alice", "bob"], False)
    post(op, child, "in the open", "bob")
    inner = fork(op, m, secret, "inner", ["alice", "carol"], True)
    fork(op, m, child, "leaf", ["bob"], False)
    huddle = fork(op, m, m.root, "huddle", ["alice", "bob"], True)
    note = post(op, huddle, "the reasoning behind it", "bob")
    bob = Http(daemon.url, m.tokens["bob"])
    surfaced = bob.surface(huddle, "verdict: ship it", source_blip_id=note).ok(201)
    bob.close()
    m.refresh_blips(op)
    yield World(daemon, op, m, secret, child, inner, huddle, surfaced)
    op.close()


def test_a_non_member_is_told_no_id_of_a_private_wavelet_on_any_route(world: World) -> None:
    m = world.m
    for who in ("bob", "carol", "dave"):
        assert_withheld(m, who, answers(world.d, m, who))
    carol = Http(world.d.url, m.tokens["carol"])
    child = carol.wavelet(world.child).ok(200)
    assert (child["parent_id"], child["fork_blip_id"], child["parent_withheld"]) == (None, None, True)
    inner = carol.wavelet(world.inner).ok(200)  # her own private wavelet, under one she is not on
    assert (inner["parent_id"], inner["parent_withheld"]) == (None, True)
    root = carol.wavelet(m.root).ok(200)
    assert (root["parent_id"], root["parent_withheld"]) == (None, False)  # the root: no parent at all
    shown = next(b for b in carol.read(m.root).ok(200)["blips"] if b["kind"] == "surface")
    assert (shown["source_wavelet_id"], shown["source_blip_id"]) == (None, None)
    assert shown["text"] == "verdict: ship it"  # the conclusion itself is the parent's to read
    carol.close()


def test_members_and_the_operator_still_see_every_id(world: World) -> None:
    m = world.m
    alice = Http(world.d.url, m.tokens["alice"])
    child = alice.wavelet(world.child).ok(200)
    assert (child["parent_id"], child["parent_withheld"]) == (world.secret, False)
    assert child["fork_blip_id"] in m.nodes[world.secret].blips
    path = [p["id"] for p in alice.context(world.inner).ok(200)["path"]]
    assert path == [m.root, world.secret, world.inner]
    surfaced = next(b for b in alice.read(m.root).ok(200)["blips"] if b["kind"] == "surface")
    assert surfaced["source_wavelet_id"] == world.huddle  # alice is on the huddle
    assert surfaced["source_blip_id"] == world.surfaced["source_blip_id"]
    alice.close()
    machine = world.op.post("/v1/machines", {"name": "laptop", "waves": [m.wave]}).ok(201)["token"]
    for token in (world.d.operator_token, machine):  # a machine token is the operator in its waves
        h = Http(world.d.url, token)
        tree = {w["id"]: w for w in h.get(f"/v1/waves/{q(m.wave)}").ok(200)["wavelets"]}
        assert set(tree) == set(m.nodes)
        for n in m.nodes.values():
            assert (tree[n.id]["parent_id"], tree[n.id]["parent_withheld"]) == (n.parent, False)
        shown = next(b for b in h.read(m.root).ok(200)["blips"] if b["kind"] == "surface")
        assert shown["source_wavelet_id"] == world.huddle
        h.close()
    assert world.surfaced["source_wavelet_id"] == world.huddle  # bob's own write: he is on the huddle


def test_the_cli_tree_with_a_participant_token_names_no_private_wavelet(world: World) -> None:
    m = world.m
    env = dict(os.environ, PYTHONPATH=str(REPO), FLEET_DAEMON=world.d.url, FLEET_TOKEN=m.tokens["carol"])
    run = [sys.executable, "-m", "fleet", "tree", m.wave]
    js = subprocess.run([*run, "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert js.returncode == 0, js.stderr
    leaked = [i for i in m.hidden_ids("carol") if i in js.stdout]
    assert not leaked
    names = {w["name"]: w for w in json.loads(js.stdout)["wavelets"]}
    assert set(names) == {"main", "open-child", "inner", "leaf"}
    assert names["open-child"]["parent_withheld"] and names["leaf"]["parent_id"] == world.child
    text = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "secret-plans" not in text.stdout and "huddle" not in text.stdout
    # main and the forks under a private wavelet are the tree's tops; leaf stays under open-child
    tops = [ln for ln in lines[1:] if ln[:4] in ("├── ", "└── ")]
    assert [t.split()[1] for t in tops] == ["main", "open-child", "inner"], text.stdout
    assert all("(under a private wavelet)" in t for t in tops[1:]), text.stdout
    at = next(i for i, ln in enumerate(lines) if "open-child" in ln)
    assert "leaf" in lines[at + 1] and lines[at + 1].startswith(("│   ", "    ")), text.stdout


def test_the_channel_tools_name_no_private_wavelet(world: World, tmp_path: Path) -> None:
    m = world.m
    token = tmp_path / "carol.token"
    token.write_text(m.tokens["carol"] + "\n")
    token.chmod(0o600)
    argv = channel_argv("carol", m.wave, world.d.url, token)
    params = StdioServerParameters(
        command=argv[0], args=argv[1:], env={"FLEET_HOME": os.environ["FLEET_HOME"]}
    )
    told: list[str] = []

    async def scenario() -> None:
        with anyio.fail_after(60):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await s.initialize()

                async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
                    res = (await s.call_tool(name, args)).model_dump(by_alias=True, exclude_none=True)
                    assert res["isError"] is False, res
                    told.append(json.dumps(res))
                    return dict(res["structuredContent"])

                listed = await call("wavelet_list", {})
                by_name = {w["name"]: w for w in listed["wavelets"]}
                assert set(by_name) == {"main", "open-child", "inner", "leaf"}
                assert by_name["open-child"]["parent_id"] is None
                assert by_name["open-child"]["parent_withheld"] is True
                assert "under a private wavelet" in told[-1]
                for w in listed["wavelets"]:
                    await call("wavelet_read", {"wavelet": w["path"]})
                    await call("wavelet_read", {"wavelet": w["path"], "after": m.root})

    anyio.run(scenario)
    hidden = m.hidden_ids("carol")
    for answer in told:
        assert not [i for i in hidden if i in answer], answer[:600]


# ---------------------------------------------------------------- the console


def test_the_console_is_the_operators_and_shows_every_id(world: World) -> None:
    """The console acts as the operator only (no participant logs in to it): its API and its
    stream's tree name every wavelet and every parent."""
    cookie = login(world.d)
    r = request(world.d, "GET", f"/api/v1/waves/{world.m.wave}", cookie=cookie)
    assert r.status == 200
    tree = {w["id"]: w for w in r.json()["wavelets"]}
    assert {i: w["parent_id"] for i, w in tree.items()} == {i: n.parent for i, n in world.m.nodes.items()}
    assert not any(w["parent_withheld"] for w in tree.values())
    s = EventStream.open(world.d, f"/api/console/waves/{world.m.wave}/events", cookie)
    try:
        shown = s.until(lambda e: e.event == "tree")[-1].json()
    finally:
        s.close()
    assert {w["id"] for w in shown["wavelets"]} == set(world.m.nodes)


# ---------------------------------------------------------------- the fork-name probe


def test_a_fork_name_probe_tells_a_non_member_only_that_the_name_is_taken(world: World) -> None:
    """docs/design.md §1: names are unique per wave; a non-member probing a private wavelet's name
    learns that the name is taken (the 409 says so, and that it may be a wavelet it cannot see), and
    nothing else: not the holder's id, parent, roster or privacy, and the store is unchanged."""
    dave = Http(world.d.url, world.m.tokens["dave"])
    before = snapshot(world.d.paths.db)
    hidden = dave.fork(world.m.root, "huddle", [])
    seen = dave.fork(world.m.root, "open-child", [])  # taken by a wavelet dave can see
    assert snapshot(world.d.paths.db) == before
    assert hidden.status == seen.status == 409
    assert hidden.error["kind"] == seen.error["kind"] == "conflict"
    message = hidden.error["message"]
    assert message.replace("huddle", "N") == seen.error["message"].replace("open-child", "N")
    assert "taken" in message and "cannot see" in message, message
    for word in ("private", "roster", "alice", "bob", "exists", world.huddle):
        assert word not in message
    assert not [i for i in world.m.hidden_ids("dave") if i in hidden.raw.decode()]
    dave.close()


# ---------------------------------------------------------------- the property


FORK = st.tuples(
    st.just("fork"),
    st.integers(0, 3),
    st.booleans(),
    st.lists(st.sampled_from(PEOPLE), min_size=1, max_size=3, unique=True),
)
OPS = st.lists(
    st.one_of(
        FORK,
        FORK,  # (twice as likely as the rest: trees, not a long root)
        st.tuples(st.just("post"), st.integers(0, 3), st.integers(0, 3)),
        st.tuples(st.just("surface"), st.integers(0, 3), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("leave"), st.integers(0, 3), st.integers(0, 3)),
        st.tuples(st.just("invite"), st.integers(0, 3), st.sampled_from(PEOPLE)),
    ),
    min_size=2,
    max_size=16,
)
"""What is done to a wave: ``at`` counts back from the newest wavelet (so later ops meet forks)."""


def build(op: Http, m: Model, ops: list[tuple[Any, ...]]) -> None:
    """Apply ``ops`` as the operator acting for members (indices wrap around what exists)."""
    for k, (kind, at, *rest) in enumerate(ops):
        nodes = list(m.nodes.values())
        n = nodes[-1 - at % len(nodes)]
        members = sorted(n.roster)
        if kind == "fork":
            private, roster = rest
            fork(op, m, n.id, f"fork{k}x", list(roster), private)
        elif kind == "post" and members:
            post(op, n.id, f"note {k}", members[rest[0] % len(members)])  # texts name no wavelet:
        elif kind == "surface" and members and n.parent is not None:
            who = members[rest[0] % len(members)]
            source = post(op, n.id, f"finding {k}", who) if rest[1] else None
            surface(op, n.id, f"conclusion {k}", who, source)  # a name in one is fleet's own
        elif kind == "leave" and members:
            op.leave(n.id, members[rest[0] % len(members)]).ok(200)
            n.roster.discard(members[rest[0] % len(members)])
        elif kind == "invite":
            op.invite(n.id, rest[0]).ok(200)
            n.roster.add(rest[0])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
@example(ops=[("fork", 0, True, ["bob"]), ("fork", 0, False, ["alice"])])  # public under private
@example(ops=[("fork", 0, True, ["alice"]), ("fork", 0, True, ["alice", "carol"])])  # carol: not above
@example(ops=[("fork", 0, True, ["alice", "bob"]), ("post", 0, 1), ("surface", 0, 0, True)])
@example(ops=[("fork", 0, True, ["bob"]), ("surface", 0, 0, True), ("leave", 0, 0), ("invite", 1, "dave")])
def test_no_answer_to_a_non_member_holds_an_id_it_cannot_see(
    daemon: Daemon, ops: list[tuple[Any, ...]]
) -> None:
    op = Http(daemon.url, daemon.operator_token)
    try:
        m = new_model(daemon, op)
        build(op, m, ops)
        m.refresh_blips(op)
        truth = {w["id"]: w for w in op.get(f"/v1/waves/{q(m.wave)}").ok(200)["wavelets"]}
        assert {i: {r["name"] for r in w["roster"]} for i, w in truth.items()} == {
            i: n.roster for i, n in m.nodes.items()
        }
        for who in PEOPLE:
            got = answers(daemon, m, who)
            assert_withheld(m, who, got)
            listed = {w["id"] for w in next(r for what, r in got if what == "wave").body["wavelets"]}
            assert listed == {i for i in m.nodes if m.sees(who, i)}
            for what, r in got:  # (how often the property met what it is about: --hypothesis-show-statistics)
                if what.startswith("wavelet ") and r.body.get("parent_withheld"):
                    event("a parent withheld")
                if what.startswith("read ") and any(
                    m.sources[b["id"]] and not b["source_wavelet_id"] for b in r.body["blips"]
                ):
                    event("a source withheld")
    finally:
        op.close()
