"""The authorization layer's rules where issue #15's review found them broken, over real HTTP.

- a private parent does not leak through its public child (context path, provenance);
- surface writes into the parent only for those who may post there; a non-member's fork of a public
  wavelet writes nothing into it;
- a fork-name conflict on a wavelet the caller cannot see answers exactly as any other conflict;
- long-polls re-check at every wake-up: a token revoked, or a member taken off the roster, while it
  waits receives nothing posted after that (the check and the read it guards see one state: the
  race is made deterministic by landing the leave and the post between them).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from conftest import retry_until
from httphelp import Http, Resp

from fleet.daemon import Daemon


@dataclass
class Wave:
    d: Daemon
    op: Http
    main: str
    secret: str
    """Private, alice only."""
    child: str
    """Public, forked from ``secret`` by alice, with alice and bob."""
    tokens: dict[str, dict[str, str]]

    def as_(self, name: str) -> Http:
        return Http(self.d.url, self.tokens[name]["token"])


@pytest.fixture
def wave(daemon: Daemon) -> Iterator[Wave]:
    op = Http(daemon.url, daemon.operator_token)
    w = op.new_wave("w", ["alice", "bob", "carol"]).ok(201)
    tokens = {p: op.mint("w", p).ok(201) for p in ("alice", "bob", "carol")}
    alice = Http(daemon.url, tokens["alice"]["token"])
    secret = alice.fork(w["root_id"], "secret-plans", [], private=True).ok(201)["id"]
    alice.post_blip(secret, "the secret itself").ok(201)
    child = alice.fork(secret, "open-child", ["bob"]).ok(201)["id"]
    alice.close()
    yield Wave(daemon, op, w["root_id"], secret, child, tokens)
    op.close()


def test_a_non_members_view_of_a_public_child_names_nothing_of_its_private_parent(wave: Wave) -> None:
    for reader in ("bob", "carol"):  # on the child's roster, and not even that
        h = wave.as_(reader)
        ctx = h.context(wave.child).ok(200)
        assert [p["name"] for p in ctx["path"]] == ["main", "open-child"]
        blips = h.read(wave.child).ok(200)["blips"]
        shown = json.dumps(ctx) + json.dumps(blips)
        for leak in ("secret-plans", "the secret itself"):
            assert leak not in shown, (reader, leak)
        child = h.wavelet(wave.child).ok(200)  # the parent's id is withheld, not merely opaque
        assert (child["parent_id"], child["fork_blip_id"], child["parent_withheld"]) == (None, None, True)
        assert h.wavelet(wave.secret).status == 404
        h.close()
    alice = wave.as_("alice")  # a member of the parent still sees the whole path
    path = [p["name"] for p in alice.context(wave.child).ok(200)["path"]]
    assert path == ["main", "secret-plans", "open-child"]
    alice.close()


def test_surfacing_into_a_private_parent_takes_being_on_its_roster(wave: Wave) -> None:
    before = wave.op.read(wave.secret).ok(200)["blips"]
    bob = wave.as_("bob")
    refused = bob.surface(wave.child, "bob's conclusion")
    assert refused.status == 403 and refused.error["kind"] == "forbidden"
    assert "secret-plans" not in refused.raw.decode()
    assert wave.op.read(wave.secret).ok(200)["blips"] == before  # nothing written, nobody woken
    alice = wave.as_("alice")
    alice.surface(wave.child, "alice's conclusion").ok(201)  # a member of both may
    bob.close()
    alice.close()


def test_a_forks_members_surface_into_its_public_parent_though_not_on_its_roster(wave: Wave) -> None:
    """What a surface is for: a worker forked off ``main`` with a roster of its own reports its
    conclusion up though it is not (or no longer) on main's roster; only a private parent takes
    surfaces from its own roster alone."""
    alice = wave.as_("alice")
    job = alice.fork(wave.main, "job", ["carol"]).ok(201)["id"]
    carol = wave.as_("carol")
    carol.leave(wave.main, "carol").ok(200)
    assert carol.post_blip(wave.main, "not a member any more").status == 403
    got = carol.surface(job, "job done").ok(201)
    assert (got["kind"], got["wavelet_id"], got["author"]) == ("surface", wave.main, "carol")
    carol.close()
    alice.close()


def test_a_non_members_fork_of_a_public_wavelet_writes_nothing_into_it(wave: Wave) -> None:
    alice = wave.as_("alice")
    pub = alice.fork(wave.main, "alices-room", []).ok(201)["id"]
    before = wave.op.read(pub).ok(200)["blips"]
    carol = wave.as_("carol")
    fork = carol.fork(pub, "carols-copy", []).ok(201)
    assert wave.op.read(pub).ok(200)["blips"] == before
    assert fork["roster"][0]["name"] == "carol"
    alice.fork(pub, "alices-own", []).ok(201)  # a member's public fork is announced as before
    assert len(wave.op.read(pub).ok(200)["blips"]) == len(before) + 1
    alice.close()
    carol.close()


def test_a_fork_name_taken_by_an_invisible_wavelet_answers_like_any_taken_name(wave: Wave) -> None:
    carol = wave.as_("carol")
    hidden = carol.fork(wave.main, "secret-plans", [])
    alice = wave.as_("alice")
    seen = alice.fork(wave.main, "open-child", [])
    assert hidden.status == seen.status == 409
    assert hidden.error["kind"] == seen.error["kind"] == "conflict"
    assert hidden.error["message"].replace("secret-plans", "N") == seen.error["message"].replace(
        "open-child", "N"
    )
    for word in ("private", "roster", "alice", "exists"):
        assert word not in hidden.error["message"]
    carol.close()
    alice.close()


def _waiting(d: Daemon, call: Callable[[], Resp]) -> tuple[threading.Thread, list[Resp]]:
    """Run ``call`` in a thread and return once the daemon has it in flight."""
    out: list[Resp] = []
    t = threading.Thread(target=lambda: out.append(call()), daemon=True)
    assert d._httpd is not None
    server = d._httpd
    t.start()
    retry_until(lambda: server._inflight >= 1, what="the long-poll in flight")
    return t, out


@pytest.mark.parametrize("poll", ["read", "feed"])
def test_a_token_revoked_while_its_long_poll_waits_receives_nothing_after(wave: Wave, poll: str) -> None:
    bob = wave.as_("bob")
    head = bob.read(wave.child).ok(200)["cursor"]
    if poll == "read":
        call = partial_read(bob, wave.child, head)
    else:
        feed = bob.post("/v1/waves/w/feed", {"participant": "bob"}).ok(200)
        call = partial_feed(bob, "bob", {b["wavelet_id"]: b["id"] for b in feed["blips"]})
    t, out = _waiting(wave.d, call)
    wave.op.post("/v1/tokens/revoke", {"token_id": wave.tokens["bob"]["id"]}).ok(200)
    wave.op.post_blip(wave.child, "after the revoke").ok(201)
    t.join(15)
    (got,) = out
    assert got.status == 401 and got.error["kind"] == "unauthorized", got.raw[:300]
    bob.close()


def partial_read(h: Http, wavelet: str, after: str) -> Callable[[], Resp]:
    return lambda: h.read(wavelet, f"after={after}&wait=10")


def partial_feed(h: Http, who: str, cursors: dict[str, str]) -> Callable[[], Resp]:
    return lambda: h.post("/v1/waves/w/feed", {"participant": who, "cursors": cursors, "wait": 10})


# ---------------------------------------------------------------- the race, made deterministic
