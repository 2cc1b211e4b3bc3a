"""The daemon over real HTTP on 127.0.0.1:0, over a real SQLite file: auth matrix, data model end to
end, long-poll, id order under concurrency, bad input, lifecycle, presence.

Every request goes through stdlib ``http.client`` (``tests/httphelp.py``), so these tests pin the wire
contract of ``docs/http-api.md`` rather than the client library.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
import uuid6
from conftest import retry_until
from httphelp import Http, Resp, q, raw_exchange, snapshot, split_responses

from fleet import errors
from fleet.daemon import Daemon
from fleet.paths import Paths

# ---------------------------------------------------------------- a small world to act in


@dataclass
class Target:
    """A wavelet to aim requests at: its id and name, and one blip alice wrote in it."""

    id: str
    name: str
    blip: str


@dataclass
class World:
    daemon: Daemon
    op: Http
    wave_id: str
    main: str
    pub: Target
    priv: Target
    tokens: dict[str, str | None]
    dave_token_id: str
    conns: dict[str, Http] = field(default_factory=dict)

    def as_(self, principal: str) -> Http:
        if principal not in self.conns:
            self.conns[principal] = Http(self.daemon.url, self.tokens[principal])
        return self.conns[principal]

    def state(self) -> tuple[dict[str, list[tuple[Any, ...]]], int]:
        return snapshot(self.daemon.paths.db)


def build_world(d: Daemon) -> World:
    """Wave w1 (alice, bob on main; public ``pub`` and private ``priv`` forks with alice only),
    wave w2 (carol), and tokens: alice, bob, carol, and dave's (revoked)."""
    op = Http(d.url, d.operator_token)
    w1 = op.new_wave("w1", ["alice", "bob"]).ok(201)
    op.new_wave("w2", ["carol"]).ok(201)
    main = w1["root_id"]
    op.post_blip(main, "hello everyone").ok(201)
    tok = {p: op.mint("w1", p).ok(201) for p in ("alice", "bob", "dave")}
    carol = op.mint("w2", "carol").ok(201)
    op.post("/v1/tokens/revoke", {"token_id": tok["dave"]["id"]}).ok(200)
    alice = Http(d.url, tok["alice"]["token"])
    targets = {}
    for name, private in (("pub", False), ("priv", True)):
        wl = op.fork(main, name, ["alice"], private=private).ok(201)
        blip = alice.post_blip(wl["id"], f"alice in {name}").ok(201)
        targets[name] = Target(wl["id"], name, blip["id"])
    return World(
        daemon=d,
        op=op,
        wave_id=w1["id"],
        main=main,
        pub=targets["pub"],
        priv=targets["priv"],
        tokens={
            "operator": d.operator_token,
            "member": tok["alice"]["token"],
            "nonmember": tok["bob"]["token"],
            "otherwave": carol["token"],
            "revoked": tok["dave"]["token"],
            "none": None,
            "garbage": "not-a-token-at-all",
        },
        dave_token_id=tok["dave"]["id"],
    )


@pytest.fixture
def world(daemon: Daemon) -> Iterator[World]:
    w = build_world(daemon)
    yield w
    for h in [w.op, *w.conns.values()]:
        h.close()


PRINCIPALS = ["operator", "member", "nonmember", "otherwave", "revoked", "none", "garbage"]
SELF = {"operator": "operator", "member": "alice", "nonmember": "bob", "otherwave": "carol"}
UNAUTHENTICATED = {"revoked", "none", "garbage"}

# ---------------------------------------------------------------- the allow/deny matrix

_counter = iter(range(10**9))


def _fresh(prefix: str) -> str:
    return f"{prefix}{next(_counter)}"


WaveletOp = Callable[[Http, Target], Resp]

WAVELET_OPS: dict[str, WaveletOp] = {
    "get": lambda h, t: h.wavelet(t.id),
    "resolve": lambda h, t: h.get(f"/v1/resolve?ref={q('w1/' + t.name)}"),
    "read": lambda h, t: h.read(t.id),
    "context": lambda h, t: h.context(t.id),
    "blip": lambda h, t: h.get(f"/v1/blips/{t.blip}"),
    "history": lambda h, t: h.history(t.blip),
    "post": lambda h, t: h.post_blip(t.id, "a post"),
    "post_as_other": lambda h, t: h.post_blip(t.id, "a post", as_="zed"),
    "fork": lambda h, t: h.fork(t.id, _fresh("f")),
    "invite": lambda h, t: h.invite(t.id, "erin"),
    "surface": lambda h, t: h.surface(t.id, "a conclusion"),
    "replace": lambda h, t: h.replace(t.blip, "alice, amended"),
    "leave": lambda h, t: h.leave(t.id, "alice"),  # last: it changes alice's membership
}
WRITES_201 = {"post", "post_as_other", "fork", "surface", "replace"}


def expected_wavelet(principal: str, op: str, private: bool) -> int:
    if principal in UNAUTHENTICATED:
        return 401
    if principal == "operator" and op == "post_as_other":
        return 403  # zed is on no roster: the operator acts as a member only (an import would refuse it)
    if principal == "operator":
        return 201 if op in WRITES_201 else 200
    if op == "post_as_other":
        return 403  # refused before the wavelet is looked at: reveals nothing about it
    if principal == "otherwave" or (principal == "nonmember" and private):
        return 404
    if principal == "nonmember" and op in {"post", "invite", "surface", "replace", "leave"}:
        return 403  # a public wavelet: visible (readable, forkable) but not writable by a non-member
    return 201 if op in WRITES_201 else 200


WaveOp = Callable[[Http, World, str], Resp]


def _other(principal: str) -> str:
    return "bob" if principal == "member" else "alice"


WAVE_OPS: dict[str, WaveOp] = {
    "health": lambda h, w, p: h.get("/v1/health"),
    "whoami": lambda h, w, p: h.get("/v1/whoami"),
    "list_waves": lambda h, w, p: h.get("/v1/waves"),
    "get_wave": lambda h, w, p: h.get("/v1/waves/w1"),
    "feed_self": lambda h, w, p: h.post("/v1/waves/w1/feed", {"participant": SELF.get(p, "alice")}),
    "feed_other": lambda h, w, p: h.post("/v1/waves/w1/feed", {"participant": _other(p)}),
    "presence_get": lambda h, w, p: h.get("/v1/waves/w1/presence"),
    "presence_self": lambda h, w, p: h.post(
        "/v1/waves/w1/presence", {"participant": SELF.get(p, "alice"), "event": "ping"}
    ),
    "presence_other": lambda h, w, p: h.post(
        "/v1/waves/w1/presence", {"participant": _other(p), "event": "ping"}
    ),
    "create_wave": lambda h, w, p: h.new_wave(_fresh("wave")),
    "mint": lambda h, w, p: h.mint("w1", "erin"),
    "list_tokens": lambda h, w, p: h.get("/v1/tokens?wave=w1"),
    "revoke": lambda h, w, p: h.post("/v1/tokens/revoke", {"token_id": w.dave_token_id}),
}


def expected_wave(principal: str, op: str) -> int:
    if op == "health":
        return 200
    if principal in UNAUTHENTICATED:
        return 401
    if principal == "operator":
        return 201 if op in {"create_wave", "mint"} else 200
    if op in {"create_wave", "mint", "list_tokens", "revoke"}:
        return 403  # operator only
    if principal == "otherwave" and op not in {"whoami", "list_waves"}:
        return 404  # wave w1 does not exist for carol
    if op in {"feed_other", "presence_other"}:
        return 403
    return 200


def _check(w: World, got: Resp, want: int, what: str, mismatches: list[str]) -> None:
    if got.status != want:
        mismatches.append(f"{what}: want {want}, got {got.status} {got.raw[:160]!r}")
    elif want >= 400:
        err = got.error
        kind = {400: "usage", 401: "unauthorized", 403: "forbidden", 404: "not_found", 409: "conflict"}
        if err["kind"] != kind[want]:
            mismatches.append(f"{what}: kind {err['kind']!r} for {want}")


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_allow_deny_matrix(world: World, principal: str) -> None:
    h = world.as_(principal)
    mismatches: list[str] = []
    for target, private in ((world.pub, False), (world.priv, True)):
        for op, fn in WAVELET_OPS.items():
            want = expected_wavelet(principal, op, private)
            before = world.state() if want >= 400 else None
            got = fn(h, target)
            _check(world, got, want, f"{principal} {op} {target.name}", mismatches)
            if before is not None:
                assert world.state() == before, (
                    f"{principal} {op} {target.name}: rejected but changed the store"
                )
    for op, wfn in WAVE_OPS.items():
        want = expected_wave(principal, op)
        before = world.state() if want >= 400 else None
        got = wfn(h, world, principal)
        _check(world, got, want, f"{principal} {op}", mismatches)
        if before is not None:
            assert world.state() == before, f"{principal} {op}: rejected but changed the store"
    assert not mismatches, "\n".join(mismatches)


def _normalise(message: str, *refs: str) -> str:
    for ref in refs:
        message = message.replace(ref, "REF")
    return message


@pytest.mark.parametrize("principal", ["nonmember", "otherwave"])
def test_invisible_is_indistinguishable_from_nonexistent(world: World, principal: str) -> None:
    """A 404 for a private wavelet (or a foreign wave) says exactly what a 404 for nothing says."""
    h = world.as_(principal)
    ghost = Target(str(uuid6.uuid7()), "ghost", str(uuid6.uuid7()))
    hidden = world.priv
    for op, fn in WAVELET_OPS.items():
        if expected_wavelet(principal, op, True) != 404:
            continue
        a, b = fn(h, hidden), fn(h, ghost)
        assert (a.status, b.status) == (404, 404), (op, a.raw, b.raw)
        assert _normalise(a.error["message"], hidden.id, hidden.blip, hidden.name) == _normalise(
            b.error["message"], ghost.id, ghost.blip, ghost.name
        ), op
    # an id prefix of the hidden wavelet resolves to nothing, exactly like an unknown prefix
    a, b = h.wavelet(hidden.id[:-3]), h.wavelet(ghost.id[:-3])
    assert (a.status, b.status) == (404, 404)
    assert _normalise(a.error["message"], hidden.id[:-3]) == _normalise(b.error["message"], ghost.id[:-3])
    if principal == "otherwave":
        a, b = h.get("/v1/waves/w1"), h.get("/v1/waves/nosuchwave")
        assert _normalise(a.error["message"], "w1") == _normalise(b.error["message"], "nosuchwave")


def test_listings_show_only_what_the_caller_may_see(world: World) -> None:
    def names(principal: str) -> set[str]:
        wave = world.as_(principal).get("/v1/waves/w1").ok(200)
        return {wl["name"] for wl in wave["wavelets"]}

    assert names("operator") == names("member") == {"main", "pub", "priv"}
    assert names("nonmember") == {"main", "pub"}
    assert {w["name"] for w in world.as_("operator").get("/v1/waves").ok()["waves"]} == {"w1", "w2"}
    assert [w["name"] for w in world.as_("nonmember").get("/v1/waves").ok()["waves"]] == ["w1"]
    assert [w["name"] for w in world.as_("otherwave").get("/v1/waves").ok()["waves"]] == ["w2"]
    me = world.as_("member").get("/v1/whoami").ok()
    assert (me["principal"], me["wave"], me["wave_id"]) == ("alice", "w1", world.wave_id)
    assert world.as_("operator").get("/v1/whoami").ok()["principal"] == "operator"
    # the feed of a non-member lists only its own memberships
    feed = world.as_("nonmember").post("/v1/waves/w1/feed", {"participant": "bob"}).ok()
    assert [wl["name"] for wl in feed["wavelets"]] == ["main"]


def test_participant_token_writes_only_as_itself(world: World) -> None:
    alice = world.as_("member")
    bodies: list[tuple[str, dict[str, Any]]] = [
        (f"/v1/wavelets/{world.pub.id}/blips", {"text": "x", "as": "bob"}),
        (f"/v1/wavelets/{world.pub.id}/fork", {"name": "sneaky", "as": "bob"}),
        (f"/v1/wavelets/{world.pub.id}/invite", {"name": "erin", "as": "bob"}),
        (f"/v1/wavelets/{world.pub.id}/leave", {"name": "alice", "as": "bob"}),
        (f"/v1/wavelets/{world.pub.id}/surface", {"text": "x", "as": "bob"}),
        (f"/v1/blips/{world.pub.blip}/replace", {"text": "x", "as": "bob"}),
        (f"/v1/wavelets/{world.pub.id}/leave", {"name": "bob"}),  # removing someone else
        ("/v1/waves/w1/presence", {"participant": "bob", "event": "delivered"}),
    ]
    before = world.state()
    for path, body in bodies:
        r = alice.post(path, body)
        assert r.status == 403 and r.error["kind"] == "forbidden", (path, r.raw)
    assert world.state() == before
    # naming itself in `as` is fine, and the operator may write as any member (bob is none here)
    assert alice.post_blip(world.pub.id, "me", as_="alice").ok(201)["author"] == "alice"
    assert world.op.post_blip(world.pub.id, "relayed", as_="alice").ok(201)["author"] == "alice"
    r = world.op.post_blip(world.pub.id, "relayed", as_="bob")
    assert r.status == 403 and "invite it first" in r.error["message"]
    assert world.state() != before  # (the two posts above)


def test_revoking_a_token_locks_it_out_at_once(world: World) -> None:
    bob = world.as_("nonmember")
    bob.get("/v1/whoami").ok(200)
    world.op.post("/v1/tokens/revoke", {"wave": "w1", "participant": "bob"}).ok(200)
    r = bob.get("/v1/whoami")
    assert r.status == 401 and r.error["kind"] == "unauthorized"
    listed = world.op.get("/v1/tokens?wave=w1").ok()["tokens"]
    assert {t["participant"]: t["revoked_at"] is not None for t in listed} == {
        "alice": False,
        "bob": True,
        "dave": True,
    }
    assert all("token" not in t for t in listed), "the secret is shown once, at mint time"
    # a malformed Authorization header is a 401 too, never a 500
    for header in ("Basic YWxpY2U6c2VjcmV0", "Bearer", "Bearer ", "bearer " + world.daemon.operator_token):
        r = bob.get("/v1/whoami", token=None, headers={"Authorization": header})
        assert r.status == 401, (header, r.raw)


# ---------------------------------------------------------------- the data model, end to end


def texts(blips: list[dict[str, Any]]) -> list[str]:
    return [b["text"] for b in blips]


def test_fork_of_fork_context_is_ancestors_up_to_each_fork_point(daemon: Daemon) -> None:
    op = Http(daemon.url, daemon.operator_token)
    wave = op.new_wave("tree", ["alice", "bob"]).ok(201)
    root = wave["root_id"]
    op.post_blip(root, "r1").ok(201)
    op.post_blip(root, "r2").ok(201)
    a = op.fork(root, "a", ["alice"]).ok(201)
    assert a["parent_id"] == root and a["fork_blip_id"] is not None
    op.post_blip(root, "r3 after fork a").ok(201)
    op.post_blip(a["id"], "a1").ok(201)
    b = op.fork(a["id"], "b", ["alice", "bob"]).ok(201)
    assert b["parent_id"] == a["id"]
    op.post_blip(a["id"], "a2 after fork b").ok(201)
    op.post_blip(b["id"], "b1").ok(201)

    ctx = op.context(b["id"]).ok(200)
    assert [w["name"] for w in ctx["path"]] == ["main", "a", "b"]
    assert ctx["wavelet"]["id"] == b["id"]
    got = [t for t in texts(ctx["blips"])]
    # root blips up to a's fork point, a's blips up to b's fork point, then b's own
    assert [t for t in got if not t.startswith("operator ")] == ["r1", "r2", "a1", "b1"]
    assert "r3 after fork a" not in got and "a2 after fork b" not in got
    # the provenance blips each fork wrote: "created", a's own fork notice, b's own fork notice
    system = [x["text"] for x in ctx["blips"] if x["kind"] == "system"]
    assert system == [
        "operator created wave tree with alice, bob",
        "operator forked a from main with alice",
        "operator forked b from a with alice, bob",
    ]
    ids = [x["id"] for x in ctx["blips"]]
    assert ids == sorted(ids)

    ctx_a = op.context(a["id"]).ok(200)
    assert [t for t in texts(ctx_a["blips"]) if not t.startswith("operator ")] == [
        "r1",
        "r2",
        "a1",
        "a2 after fork b",
    ]
    # the parent records the fork (a public fork announces itself), after its fork point
    main_texts = texts(op.read(root).ok()["blips"])
    assert main_texts == [
        "operator created wave tree with alice, bob",
        "r1",
        "r2",
        "operator forked a with alice",
        "r3 after fork a",
    ]
    assert "operator forked b with alice, bob" in texts(op.read(a["id"]).ok()["blips"])
    # a fork of an empty-looking parent still has a fork point (the parent's system blip)
    tree = op.get("/v1/waves/tree").ok()
    assert {w["name"]: w["parent_id"] for w in tree["wavelets"]} == {"main": None, "a": root, "b": a["id"]}
    op.close()


def test_private_fork_announces_only_in_itself(daemon: Daemon) -> None:
    op = Http(daemon.url, daemon.operator_token)
    root = op.new_wave("hush", ["alice", "bob"]).ok(201)["root_id"]
    before = texts(op.read(root).ok()["blips"])
    p = op.fork(root, "secret", ["alice"], private=True).ok(201)
    assert p["private"] is True
    assert texts(op.read(root).ok()["blips"]) == before
    assert texts(op.read(p["id"]).ok()["blips"]) == ["operator forked private secret from main with alice"]
    op.close()


def test_roster_changes_write_system_blips(daemon: Daemon) -> None:
    op = Http(daemon.url, daemon.operator_token)
    root = op.new_wave("crew", ["alice"]).ok(201)["root_id"]
    wl = op.fork(root, "side", ["alice"]).ok(201)
    assert [m["name"] for m in wl["roster"]] == ["alice"]
    last = op.post_blip(wl["id"], "before bob").ok(201)["id"]
    inv = op.invite(wl["id"], "bob").ok(200)
    bob_member = next(m for m in inv["roster"] if m["name"] == "bob")
    assert bob_member["since"] == last, "delivery to bob starts right after the blip before he joined"
    # inviting someone already there is a no-op: no second system blip
    op.invite(wl["id"], "bob").ok(200)
    alice = Http(daemon.url, op.mint("crew", "alice").ok(201)["token"])
    bob = Http(daemon.url, op.mint("crew", "bob").ok(201)["token"])
    alice.invite(wl["id"], "carol").ok(200)
    bob.leave(wl["id"], "bob").ok(200)
    final = op.leave(wl["id"], "carol").ok(200)
    assert [m["name"] for m in final["roster"]] == ["alice"]
    blips = op.read(wl["id"]).ok()["blips"]
    system = [(b["author"], b["text"]) for b in blips if b["kind"] == "system"]
    assert system == [
        ("system", "operator forked side from main with alice"),
        ("system", "operator invited bob"),
        ("system", "alice invited carol"),
        ("system", "bob left"),
        ("system", "operator removed carol"),
    ]
    # leaving stops membership: bob may no longer post there (public: still readable)
    r = bob.post_blip(wl["id"], "still here?")
    assert r.status == 403
    bob.read(wl["id"]).ok(200)
    # taking off someone who is not on the roster is a 404 naming them
    r = op.leave(wl["id"], "bob")
    assert r.status == 404 and "bob" in r.error["message"]
    for h in (op, alice, bob):
        h.close()


def test_replace_keeps_history_and_hides_old_versions(daemon: Daemon) -> None:
    op = Http(daemon.url, daemon.operator_token)
    root = op.new_wave("edits", ["alice", "bob"]).ok(201)["root_id"]
    alice = Http(daemon.url, op.mint("edits", "alice").ok(201)["token"])
    bob = Http(daemon.url, op.mint("edits", "bob").ok(201)["token"])
    v1 = alice.post_blip(root, "v1").ok(201)
    after_v1 = v1["id"]
    v2 = alice.replace(v1["id"], "v2").ok(201)
    assert v2["replaces"] == v1["id"] and v2["id"] > v1["id"] and v2["author"] == "alice"

    # a read shows only the latest version, at its own (newer) position
    assert "v1" not in texts(op.read(root).ok()["blips"])
    page = op.read(root, f"after={after_v1}").ok()
    assert [(b["text"], b["replaces"]) for b in page["blips"]] == [("v2", v1["id"])]
    full = op.read(root, "history=1").ok()["blips"]
    old = next(b for b in full if b["id"] == v1["id"])
    assert old["superseded_by"] == v2["id"]
    assert op.get(f"/v1/blips/{v1['id']}").ok()["superseded_by"] == v2["id"]

    # only the author or the operator may replace; a superseded version cannot be replaced again
    before = snapshot(daemon.paths.db)
    r = bob.replace(v2["id"], "bob's take")
    assert r.status == 403 and "alice" in r.error["message"]
    r = alice.replace(v1["id"], "v2 again")
    assert r.status == 409 and v2["id"] in r.error["message"]
    system_blip = op.read(root).ok()["blips"][0]
    assert system_blip["kind"] == "system"
    assert op.replace(system_blip["id"], "rewrite history").status == 403
    assert snapshot(daemon.paths.db) == before
    v3 = op.replace(v2["id"], "v3 by the operator").ok(201)
    assert (v3["author"], v3["replaced_by"]) == ("alice", "operator")  # alice's blip still

    hist = op.history(v2["id"]).ok()["blips"]
    assert [(b["text"], b["replaces"]) for b in hist] == [
        ("v1", None),
        ("v2", v1["id"]),
        ("v3 by the operator", v2["id"]),
    ]
    assert op.history(v1["id"]).ok() == op.history(v3["id"]).ok()
    assert [b["text"] for b in op.read(root).ok()["blips"] if b["kind"] == "message"] == [
        "v3 by the operator"
    ]
    for h in (op, alice, bob):
        h.close()


def test_surface_posts_into_the_parent_with_its_source(daemon: Daemon) -> None:
    op = Http(daemon.url, daemon.operator_token)
    root = op.new_wave("report", ["alice"]).ok(201)["root_id"]
    alice = Http(daemon.url, op.mint("report", "alice").ok(201)["token"])
    side = op.fork(root, "side", ["alice"], private=True).ok(201)
    finding = alice.post_blip(side["id"], "the answer is 42").ok(201)
    s = alice.surface(side["id"], "conclusion: 42", finding["id"]).ok(201)
    assert (s["kind"], s["wavelet_id"], s["author"]) == ("surface", root, "alice")
    assert (s["source_wavelet_id"], s["source_blip_id"]) == (side["id"], finding["id"])
    assert op.read(root).ok()["blips"][-1]["id"] == s["id"]
    # without a source blip, the source wavelet alone is referenced
    s2 = op.surface(side["id"], "also: 43").ok(201)
    assert (s2["source_wavelet_id"], s2["source_blip_id"]) == (side["id"], None)

    before = snapshot(daemon.paths.db)
    r = op.surface(root, "nowhere to go")
    assert r.status == 400 and "root" in r.error["message"]
    other = op.post_blip(root, "a root blip").ok(201)
    assert snapshot(daemon.paths.db) != before
    before = snapshot(daemon.paths.db)
    r = op.surface(side["id"], "wrong source", other["id"])
    assert r.status == 400, r.raw
    assert snapshot(daemon.paths.db) == before
    op.close()
    alice.close()


def test_wavelet_addressing_by_path_name_id_and_prefix(world: World) -> None:
    op = world.op
    by_id = op.wavelet(world.pub.id).ok()
    assert op.wavelet("w1/pub").ok()["id"] == by_id["id"]
    assert op.get(f"/v1/resolve?ref=pub&wave={world.wave_id}").ok()["id"] == by_id["id"]
    assert op.wavelet(world.pub.id[:-2]).ok()["id"] == by_id["id"]
    # a participant's bare names resolve inside its own wave
    assert world.as_("member").wavelet("pub").ok()["id"] == by_id["id"]
    r = op.get("/v1/resolve")
    assert r.status == 400 and "ref" in r.error["message"]
    assert op.wavelet("w1/nope").status == 404


# ---------------------------------------------------------------- long-poll


def _in_thread(fn: Callable[[], Resp]) -> tuple[threading.Thread, list[Resp | BaseException], list[float]]:
    out: list[Resp | BaseException] = []
    done_at: list[float] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # surfaced by the caller's assertions
            out.append(exc)
        done_at.append(time.perf_counter())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out, done_at


def _waiting(daemon: Daemon, n: int = 1) -> None:
    """Block until ``n`` long-polls are parked on the daemon's notifier.

    (Counting in-flight requests is not enough: the previous request's handler may still be
    between writing its answer and leaving.)
    """
    retry_until(
        lambda: daemon.notifier.parked >= n,
        timeout=5,
        interval=0.002,
        what="the long-poll to park",
    )


def test_long_poll_wakes_on_post(world: World) -> None:
    d, op = world.daemon, world.op
    cursor = op.read(world.main).ok()["cursor"]
    reader = Http(d.url, d.operator_token)
    t, out, done_at = _in_thread(lambda: reader.read(world.main, f"after={cursor}&wait=30"))
    _waiting(d)
    assert t.is_alive(), "the read returned before anything was posted"
    posted = op.post_blip(world.main, "wake up").ok(201)
    acked = time.perf_counter()
    t.join(5)
    assert not t.is_alive()
    page = out[0]
    assert isinstance(page, Resp), page
    body = page.ok(200)
    assert [b["id"] for b in body["blips"]] == [posted["id"]]
    assert body["cursor"] == posted["id"]
    latency = done_at[0] - acked
    print(f"long-poll returned {latency * 1000:.1f} ms after the post was acknowledged")
    assert latency < 2.0
    reader.close()


def test_long_poll_at_the_deadline_returns_empty_with_cursor_unchanged(world: World) -> None:
    op = world.op
    cursor = op.read(world.main).ok()["cursor"]
    assert cursor
    t0 = time.perf_counter()
    body = op.read(world.main, f"after={cursor}&wait=0.3").ok(200)
    elapsed = time.perf_counter() - t0
    assert body == {"blips": [], "cursor": cursor}
    assert 0.25 <= elapsed < 2.0, elapsed
    # a post into another wavelet wakes the waiter, which finds nothing for it and waits on
    reader = Http(world.daemon.url, world.daemon.operator_token)
    t, out, _ = _in_thread(lambda: reader.read(world.main, f"after={cursor}&wait=0.5"))
    _waiting(world.daemon)
    op.post_blip(world.pub.id, "elsewhere").ok(201)
    t.join(5)
    res = out[0]
    assert isinstance(res, Resp)
    assert res.ok(200) == {"blips": [], "cursor": cursor}
    reader.close()


def _feed_cursors(h: Http, participant: str) -> dict[str, str]:
    feed = h.post("/v1/waves/w1/feed", {"participant": participant}).ok(200)
    cursors = {wl["id"]: wl["since"] for wl in feed["wavelets"]}
    for b in feed["blips"]:
        cursors[b["wavelet_id"]] = max(cursors[b["wavelet_id"]], b["id"])
    return cursors


def test_feed_long_poll_wakes_on_a_post_in_any_roster_wavelet(world: World) -> None:
    d = world.daemon
    alice = world.as_("member")
    cursors = _feed_cursors(alice, "alice")
    assert set(cursors) == {world.main, world.pub.id, world.priv.id}
    # at the deadline: nothing, and the roster is still listed
    t0 = time.perf_counter()
    body = alice.post("/v1/waves/w1/feed", {"participant": "alice", "cursors": cursors, "wait": 0.3}).ok()
    assert body["blips"] == [] and 0.25 <= time.perf_counter() - t0 < 2.0
    assert {wl["id"] for wl in body["wavelets"]} == set(cursors)

    poller = Http(d.url, world.tokens["member"])
    req = {"participant": "alice", "cursors": cursors, "wait": 30}
    t, out, done_at = _in_thread(lambda: poller.post("/v1/waves/w1/feed", req))
    _waiting(d)
    posted = world.op.post_blip(world.priv.id, "psst, alice").ok(201)
    acked = time.perf_counter()
    t.join(5)
    res = out[0]
    assert isinstance(res, Resp)
    assert [b["id"] for b in res.ok(200)["blips"]] == [posted["id"]]
    print(f"feed long-poll returned {(done_at[0] - acked) * 1000:.1f} ms after the post")
    assert done_at[0] - acked < 2.0
    poller.close()


def test_feed_after_leave_delivers_nothing_from_that_wavelet(world: World) -> None:
    alice = world.as_("member")
    cursors = _feed_cursors(alice, "alice")
    alice.leave(world.pub.id, "alice").ok(200)
    world.op.post_blip(world.pub.id, "alice is gone").ok(201)
    feed = alice.post("/v1/waves/w1/feed", {"participant": "alice", "cursors": cursors}).ok()
    assert world.pub.id not in {wl["id"] for wl in feed["wavelets"]}
    assert all(b["wavelet_id"] != world.pub.id for b in feed["blips"])


def test_stop_wakes_a_long_poll_promptly(daemon: Daemon) -> None:
    op = Http(daemon.url, daemon.operator_token)
    root = op.new_wave("bye").ok(201)["root_id"]
    cursor = op.read(root).ok()["cursor"]
    reader = Http(daemon.url, daemon.operator_token)
    t, out, done_at = _in_thread(lambda: reader.read(root, f"after={cursor}&wait=60"))
    _waiting(daemon)
    t0 = time.perf_counter()
    daemon.stop()
    stopped = time.perf_counter() - t0
    t.join(5)
    assert not t.is_alive()
    res = out[0]
    assert isinstance(res, Resp), res
    assert res.ok(200) == {"blips": [], "cursor": cursor}
    print(f"stop() took {stopped * 1000:.1f} ms; the long-poll returned {(done_at[0] - t0) * 1000:.1f} ms in")
    assert stopped < 2.0 and done_at[0] - t0 < 2.0
    assert not daemon.paths.endpoint.exists()


# ---------------------------------------------------------------- ids under concurrency


def test_ids_strictly_increasing_under_8_concurrent_posters(world: World) -> None:
    d = world.daemon
    n_threads, per_thread = 8, 60
    results: dict[int, list[str]] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(n_threads)

    def poster(k: int) -> None:
        h = Http(d.url, d.operator_token)
        mine = []
        try:
            start.wait()
            for i in range(per_thread):
                mine.append(h.post_blip(world.main, f"t{k}-{i}").ok(201)["id"])
        except BaseException as exc:
            failures.append(exc)
        finally:
            h.close()
            results[k] = mine

    threads = [threading.Thread(target=poster, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    every = [i for ids in results.values() for i in ids]
    assert len(every) == len(set(every)) == n_threads * per_thread
    for ids in results.values():
        assert ids == sorted(ids), "one client's successive posts got decreasing ids"

    # commit order (the event log's seq, the blips' rowid) is id order
    conn = sqlite3.connect(f"file:{d.paths.db}?mode=ro", uri=True)
    try:
        by_seq = [
            json.loads(p)["blip"]["id"]
            for (p,) in conn.execute("SELECT payload FROM events WHERE type = 'blip.posted' ORDER BY seq")
        ]
        by_rowid = [i for (i,) in conn.execute("SELECT id FROM blips ORDER BY rowid")]
    finally:
        conn.close()
    assert set(every) <= set(by_seq)
    assert by_seq == sorted(by_seq)
    assert by_rowid == sorted(by_rowid)
    assert len(by_rowid) == len(set(by_rowid))
    # and a reader paging with the cursor sees each exactly once, in order
    seen: list[str] = []
    cursor = ""
    while True:
        page = world.op.read(world.main, f"after={cursor}&limit=100").ok()
        if not page["blips"]:
            break
        seen += [b["id"] for b in page["blips"]]
        cursor = page["cursor"]
    assert seen == sorted(seen) and set(every) <= set(seen) and len(seen) == len(set(seen))


# ---------------------------------------------------------------- bad input


def _unchanged(d: Daemon, fn: Callable[[], Resp], status: int, *fragments: str) -> Resp:
    """Run ``fn``; assert ``status``, an error body mentioning ``fragments``, and an unchanged store."""
    before = snapshot(d.paths.db)
    r = fn()
    assert r.status == status, r.raw[:300]
    msg = r.error["message"]
    for frag in fragments:
        assert frag in msg, (frag, msg)
    assert snapshot(d.paths.db) == before
    return r


BAD_NAMES = ["", "Upper", "has space", "a/b", "-lead", "x" * 65, "tab\there", "nl\n", "é", "a\x00b"]
BAD_PARTICIPANTS = ["", "Alice", "1abc", "system", "x" * 33, "bob smith", "bob\n", "_x", "a.b"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_wave_and_wavelet_names_are_400(world: World, name: str) -> None:
    op, d = world.op, world.daemon
    _unchanged(d, lambda: op.new_wave(name), 400, "invalid wave name")
    _unchanged(d, lambda: op.fork(world.main, name), 400, "invalid wavelet name")


@pytest.mark.parametrize("name", BAD_PARTICIPANTS)
def test_invalid_participant_names_are_400(world: World, name: str) -> None:
    op, d = world.op, world.daemon
    _unchanged(d, lambda: op.new_wave("fine", ["alice", name]), 400, "invalid participant name")
    _unchanged(d, lambda: op.fork(world.main, "fine", [name]), 400, "invalid participant name")
    _unchanged(d, lambda: op.invite(world.main, name), 400, "invalid participant name")
    _unchanged(d, lambda: op.mint("w1", name), 400, "invalid participant name")
    _unchanged(d, lambda: op.post_blip(world.main, "hi", as_=name), 400, "invalid participant name")


def test_names_taken_are_409(world: World) -> None:
    _unchanged(world.daemon, lambda: world.op.new_wave("w1"), 409, "already exists")
    _unchanged(world.daemon, lambda: world.op.fork(world.main, "pub"), 409, "not available")


@pytest.mark.parametrize("text", ["", " ", "\n\t  \r\n", "\u3000\u2003"])
def test_empty_or_whitespace_text_is_400(world: World, text: str) -> None:
    op, d = world.op, world.daemon
    _unchanged(d, lambda: op.post_blip(world.main, text), 400, "empty")
    _unchanged(d, lambda: op.surface(world.pub.id, text), 400, "empty")
    _unchanged(d, lambda: op.replace(world.pub.blip, text), 400, "empty")


def test_oversized_blip_is_413_at_the_default_limit(world: World) -> None:
    op, d = world.op, world.daemon
    limit = 256 * 1024
    assert d.max_blip_bytes == limit
    _unchanged(d, lambda: op.post_blip(world.main, "x" * (limit + 1)), 413, str(limit))
    _unchanged(d, lambda: op.replace(world.pub.blip, "é" * (limit // 2 + 1)), 413, str(limit))
    assert op.post_blip(world.main, "x" * limit).ok(201)["text"] == "x" * limit


def test_small_max_blip_bytes_counts_utf8_bytes(fleet_env: Paths) -> None:
    d = Daemon(fleet_env, "127.0.0.1:0", max_blip_bytes=100)
    d.start()
    try:
        op = Http(d.url, d.operator_token)
        root = op.new_wave("small").ok(201)["root_id"]
        op.post_blip(root, "€" * 33).ok(201)  # 99 bytes
        _unchanged(d, lambda: op.post_blip(root, "€" * 34), 413, "102 bytes", "100")
        _unchanged(d, lambda: op.post_blip(root, "y" * 101), 413)
        # the request body limit is the blip limit plus 64 KiB: past it, 413 before parsing
        _unchanged(d, lambda: op.post_blip(root, "z" * (100 + 64 * 1024)), 413, "request body")
        op.close()
    finally:
        d.stop()


def test_body_over_the_limit_is_413_without_reading_it(world: World) -> None:
    d = world.daemon
    declared = 10**9  # a gigabyte the client never sends
    head = (
        f"POST /v1/wavelets/{world.main}/blips HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {d.operator_token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    ).encode()
    before = snapshot(d.paths.db)
    t0 = time.perf_counter()
    data = raw_exchange(d.url, head + b'{"text": "xxxx', timeout=10)
    assert time.perf_counter() - t0 < 5, "the daemon waited for the body instead of refusing it"
    [(status, headers, body)] = split_responses(data)
    assert status == 413 and headers.get("connection") == "close"
    err = json.loads(body)["error"]
    assert err["kind"] == "too_large" and str(declared) in err["message"]
    assert snapshot(d.paths.db) == before


MALFORMED: list[tuple[str, bytes, str]] = [
    ("not json", b"{nope", "not valid JSON"),
    ("truncated", b'{"text": "abc', "not valid JSON"),
    ("bad utf-8", b'{"text": "\xff\xfe"}', "not valid JSON"),
    ("array", b'["text"]', "JSON object"),
    ("string", b'"text"', "JSON object"),
    ("null", b"null", "JSON object"),
    ("number text", b'{"text": 5}', "text"),
    ("null text", b'{"text": null}', "text"),
    ("list text", b'{"text": ["a"]}', "text"),
    ("object text", b'{"text": {"a": 1}}', "text"),
    ("missing text", b"{}", "text"),
    ("extra field", b'{"text": "hi", "bogus": 1}', "bogus"),
    ("as number", b'{"text": "hi", "as": 7}', "as"),
    ("lone surrogate", b'{"text": "\\ud800"}', "surrogate"),
    ("deep nesting", b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "JSON"),
]


@pytest.mark.parametrize(("label", "raw", "fragment"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_post_bodies_are_400(world: World, label: str, raw: bytes, fragment: str) -> None:
    r = _unchanged(
        world.daemon, lambda: world.op.post(f"/v1/wavelets/{world.main}/blips", raw=raw), 400, fragment
    )
    assert r.error["kind"] == "usage"
    # the connection stays usable after a rejected request
    world.op.get("/v1/whoami").ok(200)


WRONG_TYPES: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/waves", {"name": 1}),
    ("POST", "/v1/waves", {"name": "ok", "with": "alice"}),
    ("POST", "/v1/waves", {"name": "ok", "with": [1, 2]}),
    ("POST", "/v1/waves", {"name": "ok", "members": []}),
    ("POST", "/v1/wavelets/{main}/fork", {"name": "ok", "private": [True]}),
    ("POST", "/v1/wavelets/{main}/fork", {"name": "ok", "private": "maybe"}),
    ("POST", "/v1/wavelets/{main}/fork", {"with": ["alice"]}),
    ("POST", "/v1/wavelets/{main}/invite", {"name": "erin", "kind": "robot"}),
    ("POST", "/v1/wavelets/{main}/invite", {"name": ["erin"]}),
    ("POST", "/v1/wavelets/{pub}/surface", {"text": "x", "source_blip_id": 3}),
    ("POST", "/v1/waves/w1/feed", {"participant": "alice", "cursors": ["x"]}),
    ("POST", "/v1/waves/w1/feed", {"participant": "alice", "cursors": {"a": 1}}),
    ("POST", "/v1/waves/w1/feed", {"participant": "alice", "wait": "soon"}),
    ("POST", "/v1/waves/w1/feed", {"participant": "alice", "limit": 1.5}),
    ("POST", "/v1/waves/w1/presence", {"participant": "alice", "event": "dancing"}),
    ("POST", "/v1/waves/w1/presence", {"participant": "alice", "event": "ping", "count": "many"}),
    ("POST", "/v1/tokens", {"wave": "w1"}),
    ("POST", "/v1/tokens", {"wave": "w1", "participant": "erin", "admin": True}),
    ("POST", "/v1/tokens/revoke", {"token_id": ["x"]}),
    ("POST", "/v1/tokens/revoke", {}),
]


@pytest.mark.parametrize(("method", "path", "body"), WRONG_TYPES)
def test_wrong_types_and_extra_fields_are_400(
    world: World, method: str, path: str, body: dict[str, Any]
) -> None:
    url = path.format(main=world.main, pub=world.pub.id)
    r = _unchanged(world.daemon, lambda: world.op.request(method, url, body), 400)
    assert r.error["kind"] == "usage"


@pytest.mark.parametrize(
    "query",
    ["wait=soon", "wait=-1", "wait=nan", "limit=ten", "limit=1.5"],
)
def test_bad_query_parameters_are_400(world: World, query: str) -> None:
    r = _unchanged(world.daemon, lambda: world.op.read(world.main, query), 400)
    assert query.split("=")[0] in r.error["message"]


def test_nan_or_negative_wait_in_a_feed_is_400(world: World) -> None:
    """NaN compares false with everything: unchecked, it made a long-poll that never lapsed."""
    cursors = _feed_cursors(world.op, "alice")
    for wait in (b"NaN", b"-1", b"-Infinity"):
        raw = b'{"participant": "alice", "wait": %s, "cursors": %s}' % (wait, json.dumps(cursors).encode())
        t0 = time.perf_counter()
        r = _unchanged(world.daemon, partial(world.op.post, "/v1/waves/w1/feed", raw=raw), 400, "wait")
        assert time.perf_counter() - t0 < 2.0, r
    # Infinity is capped like any long wait: it parks (and a post wakes it)
    h = Http(world.daemon.url, world.daemon.operator_token)
    raw = b'{"participant": "alice", "wait": Infinity, "cursors": %s}' % json.dumps(cursors).encode()
    t, out, _ = _in_thread(lambda: h.post("/v1/waves/w1/feed", raw=raw))
    _waiting(world.daemon)
    world.op.post_blip(world.main, "wake").ok(201)
    t.join(5)
    res = out[0]
    assert isinstance(res, Resp) and [b["text"] for b in res.ok(200)["blips"]] == ["wake"]
    h.close()


SURROGATE_BODIES: list[tuple[str, str]] = [
    ("/v1/tokens", '{"wave": "\\ud800", "participant": "alice"}'),
    ("/v1/tokens/revoke", '{"token_id": "\\udfff"}'),
    ("/v1/tokens/revoke", '{"wave": "\\ud800", "participant": "alice"}'),
    ("/v1/waves/w1/feed", '{"participant": "alice", "cursors": {"x": "\\ud800"}}'),
    ("/v1/wavelets/{pub}/surface", '{"text": "ok", "source_blip_id": "\\ud800abc"}'),
    ("/v1/waves/w1/presence", '{"participant": "alice", "event": "ping", "host": "\\ud800"}'),
]


@pytest.mark.parametrize(("path", "raw"), SURROGATE_BODIES)
def test_lone_surrogates_anywhere_in_a_body_are_400(world: World, path: str, raw: str) -> None:
    url = path.format(pub=world.pub.id)
    _unchanged(world.daemon, lambda: world.op.post(url, raw=raw.encode()), 400, "surrogate")


def test_unknown_endpoints_and_methods(world: World) -> None:
    op = world.op
    r = op.get("/v1/nowhere")
    assert r.status == 404 and r.error["kind"] == "not_found"
    r = op.request("DELETE", f"/v1/wavelets/{world.main}")
    assert r.status == 405
    r = op.request("GET", f"/v1/wavelets/{world.main}/fork")
    assert r.status == 405 and "GET" in r.error["message"]
    op.get("/v1/whoami").ok(200)


def test_unsupported_method_with_a_bad_content_length_answers_once(world: World) -> None:
    data = raw_exchange(
        world.daemon.url, b"PUT /v1/waves HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n"
    )
    responses = split_responses(data)
    assert [s for s, _, _ in responses] == [400], responses


def test_head_answers_without_a_body_and_keeps_the_connection_in_sync(world: World) -> None:
    data = raw_exchange(
        world.daemon.url,
        b"HEAD /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405")
    assert rest.startswith(b"HTTP/1.1 200"), f"the HEAD answer carried a body: {rest[:80]!r}"


# ---------------------------------------------------------------- lifecycle


def test_allow_remote_binds_all_interfaces(fleet_env: Paths) -> None:
    d = Daemon(fleet_env, "0.0.0.0:0", allow_remote=True, insecure_plain_http=True)  # TLS: test_tls.py
    d.start()
    try:
        port = int(d.url.rsplit(":", 1)[1])
        r = Http(f"http://127.0.0.1:{port}").get("/v1/health")
        assert r.ok(200)["ok"] is True
        assert Http(f"http://127.0.0.1:{port}").get("/v1/whoami").status == 401
    finally:
        d.stop()


def test_second_daemon_on_the_same_paths_is_refused_naming_the_first(daemon: Daemon) -> None:
    second = Daemon(daemon.paths, "127.0.0.1:0")
    with pytest.raises(errors.Conflict) as exc:
        second.start()
    assert daemon.url in str(exc.value) and str(os.getpid()) in str(exc.value)
    # the refusal did not disturb the first one
    assert daemon.paths.endpoint.exists()
    Http(daemon.url, daemon.operator_token).get("/v1/whoami").ok(200)


def test_endpoint_and_operator_token_files(fleet_env: Paths) -> None:
    d = Daemon(fleet_env, "127.0.0.1:0")
    d.start()
    try:
        ep = json.loads(fleet_env.endpoint.read_text())
        assert ep["url"] == d.url and ep["pid"] == os.getpid()
        assert stat.S_IMODE(fleet_env.endpoint.stat().st_mode) == 0o600
        assert stat.S_IMODE(fleet_env.operator_token.stat().st_mode) == 0o600
        assert fleet_env.operator_token.read_text().strip() == d.operator_token
        health = Http(d.url).get("/v1/health").ok(200)
        assert health["ok"] is True and health["pid"] == os.getpid()
    finally:
        d.stop()
    assert not fleet_env.endpoint.exists()
    d.stop()  # idempotent
    # the token survives restarts; a loosened mode is tightened again
    os.chmod(fleet_env.operator_token, 0o644)
    again = Daemon(fleet_env, "127.0.0.1:0")
    again.start()
    try:
        assert again.operator_token == d.operator_token
        assert stat.S_IMODE(fleet_env.operator_token.stat().st_mode) == 0o600
    finally:
        again.stop()


def test_state_survives_a_restart(fleet_env: Paths) -> None:
    d = Daemon(fleet_env, "127.0.0.1:0")
    d.start()
    op = Http(d.url, d.operator_token)
    root = op.new_wave("keep", ["alice"]).ok(201)["root_id"]
    last = op.post_blip(root, "persist me").ok(201)["id"]
    op.close()
    d.stop()
    d2 = Daemon(fleet_env, "127.0.0.1:0")
    d2.start()
    try:
        op = Http(d2.url, d2.operator_token)
        assert texts(op.read(root).ok()["blips"])[-1] == "persist me"
        assert op.post_blip(root, "newer").ok(201)["id"] > last
        op.close()
    finally:
        d2.stop()


def test_shutdown_answers_503_to_new_requests_on_a_kept_alive_connection(daemon: Daemon) -> None:
    h = Http(daemon.url, daemon.operator_token)
    h.get("/v1/whoami").ok(200)
    assert h._conn is not None
    sock = h._conn.sock
    daemon.stop()
    # the handler thread of the kept-alive connection may still answer: never a 2xx after stop
    try:
        sock.sendall(
            b"GET /v1/whoami HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
            + daemon.operator_token.encode()
            + b"\r\n\r\n"
        )
        sock.settimeout(5)
        data = sock.recv(65536)
    except OSError:
        data = b""
    if data:
        assert data.startswith(b"HTTP/1.1 503"), data[:100]
    h.close()


# ---------------------------------------------------------------- presence


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def _states(h: Http) -> dict[str, str]:
    return {p["participant"]: p["state"] for p in h.get("/v1/waves/w1/presence").ok(200)["presence"]}


def _agents(h: Http) -> dict[str, dict[str, Any]]:
    return {p["participant"]: p["agent"] for p in h.get("/v1/waves/w1/presence").ok(200)["presence"]}


def test_presence_shows_the_reported_agent_state_and_unknown_once_the_channel_is_gone(
    fleet_env: Paths,
) -> None:
    """The daemon shows what the channel reported (folded from the session's own record), never a
    guess from deliveries or posts: a delivery with no state change leaves ``idle`` idle; a channel
    not heard within the ping TTL, or gone, makes the agent ``unknown`` with since when."""
    d = Daemon(fleet_env, "127.0.0.1:0", ping_ttl=30)
    d.start()
    clock = FakeClock()
    d.presence.clock = clock
    try:
        w = build_world(d)
        alice = w.as_("member")
        # nobody pinged yet: everyone is gone, and what they do is unknown; the operator is not listed
        assert _states(w.op) == {"alice": "gone", "bob": "gone"}
        assert _agents(w.op)["alice"] == {
            **_agents(w.op)["alice"],
            "kind": "unknown",
            "why": "no channel has reported to this daemon",
        }

        def report(event: str, count: int = 0, **agent: Any) -> None:
            body: dict[str, Any] = {"participant": "alice", "event": event, "count": count,
                                    "session_id": "s-1", "host": "box"}  # fmt: skip
            if agent:
                body["agent"] = agent
            alice.post("/v1/waves/w1/presence", body).ok(200)

        report("ping")
        assert _states(w.op)["alice"] == "live"
        assert _agents(w.op)["alice"]["why"] == "its channel reports no state (an older fleet)"
        report("ping", kind="idle", since=1000.0)
        clock.t += 1
        report("delivered", 3)  # a delivery is not work: the state is what the session says
        row = next(
            p for p in w.op.get("/v1/waves/w1/presence").ok()["presence"] if p["participant"] == "alice"
        )
        assert (row["state"], row["agent"]["kind"], row["delivered"], row["session_id"], row["host"]) == (
            "live", "idle", 3, "s-1", "box",
        )  # fmt: skip
        report("ping", kind="turning", since=1001.0, woken_by=["b1"], tool="Bash")
        alice.post_blip(w.pub.id, "done").ok(201)
        got = _agents(w.op)["alice"]
        assert (got["kind"], got["woken_by"], got["tool"]) == ("turning", ["b1"], "Bash"), (
            "a post ends nothing"
        )
        clock.t += 31
        got = _agents(w.op)["alice"]
        assert _states(w.op)["alice"] == "gone", "no ping within the ping TTL"
        assert got["kind"] == "unknown" and "channel gone" in got["why"] and "last turning" in got["why"]
        report("ping", kind="idle", since=1002.0)
        assert _agents(w.op)["alice"]["kind"] == "idle"
        report("gone")
        assert _states(w.op)["alice"] == "gone" and "said gone" in _agents(w.op)["alice"]["why"]
        bad = alice.post(
            "/v1/waves/w1/presence", {"participant": "alice", "event": "ping", "agent": {"kind": "busy"}}
        )
        assert bad.status == 400 and "agent.kind" in bad.error["message"]
        # presence is memory only: nothing was written to the log
        events = sqlite3.connect(f"file:{d.paths.db}?mode=ro", uri=True)
        try:
            types = {t for (t,) in events.execute("SELECT DISTINCT type FROM events")}
        finally:
            events.close()
        assert not any("presence" in t for t in types)
        # the operator may report for anyone; bob may not report for alice
        w.op.post("/v1/waves/w1/presence", {"participant": "bob", "event": "ping"}).ok(200)
        assert _states(w.op)["bob"] == "live"
        r = w.as_("nonmember").post("/v1/waves/w1/presence", {"participant": "alice", "event": "ping"})
        assert r.status == 403
    finally:
        d.stop()


def test_a_large_refused_body_still_gets_its_413_not_a_reset(world: World) -> None:
    import http.client
    from urllib.parse import urlsplit

    d = world.daemon
    u = urlsplit(d.url)
    for size in (5 * 1024 * 1024, 20 * 1024 * 1024):
        conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=30)
        body = b'{"text": "' + b"x" * size + b'"}'
        conn.request(
            "POST",
            f"/v1/wavelets/{world.main}/blips",
            body=body,
            headers={"Authorization": f"Bearer {d.operator_token}", "Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        assert resp.status == 413
        assert json.loads(resp.read())["error"]["kind"] == "too_large"
        conn.close()
