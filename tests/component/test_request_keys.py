"""Request keys (docs/http-api.md, "Idempotency-Key"): a write sent twice is applied once.

The daemon stores a write's key in the transaction that applied it, and answers a repeat with the
first answer; the client sends every write with a key and resends it after no answer, so a daemon
that committed and died before answering does not get the write twice.
"""

from __future__ import annotations

import json
import shutil
import socket
import sqlite3
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from httphelp import Http, host_port, q
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from fleet import errors
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths


def key() -> str:
    return str(uuid.uuid4())


def keyed(h: Http, path: str, body: object, k: str) -> tuple[int, bytes]:
    r = h.post(path, body, headers={"Idempotency-Key": k})
    return r.status, r.raw


def count_blips(daemon: Daemon, text: str) -> int:
    conn = sqlite3.connect(daemon.paths.db)
    try:
        return int(conn.execute("SELECT count(*) FROM blips WHERE text = ?", (text,)).fetchone()[0])
    finally:
        conn.close()


def test_a_write_sent_twice_with_its_key_is_applied_once_and_answered_alike(daemon: Daemon) -> None:
    h = Http(daemon.url, daemon.operator_token)
    h.new_wave("w", ["alice"]).ok(201)
    k = key()
    first = keyed(h, f"/v1/wavelets/{q('w/main')}/blips", {"text": "hello", "as": "alice"}, k)
    again = keyed(h, f"/v1/wavelets/{q('w/main')}/blips", {"text": "hello", "as": "alice"}, k)
    assert first[0] == again[0] == 201
    assert first[1] == again[1]  # the stored answer, byte for byte
    assert count_blips(daemon, "hello") == 1
    # Without a key (or with another) the same body is a second post.
    h.post_blip("w/main", "hello", as_="alice").ok(201)
    keyed(h, f"/v1/wavelets/{q('w/main')}/blips", {"text": "hello", "as": "alice"}, key())
    assert count_blips(daemon, "hello") == 3


def test_a_key_reused_for_another_request_is_a_conflict_and_changes_nothing(daemon: Daemon) -> None:
    h = Http(daemon.url, daemon.operator_token)
    h.new_wave("w", ["alice"]).ok(201)
    k = key()
    assert keyed(h, f"/v1/wavelets/{q('w/main')}/blips", {"text": "one", "as": "alice"}, k)[0] == 201
    r = h.post(
        f"/v1/wavelets/{q('w/main')}/blips", {"text": "two", "as": "alice"}, headers={"Idempotency-Key": k}
    )
    assert r.status == 409
    assert "already used for a different request" in r.error["message"]
    assert count_blips(daemon, "two") == 0
    # Another path with the same key: the same refusal.
    r = h.post(f"/v1/wavelets/{q('w/main')}/fork", {"name": "x", "with": []}, headers={"Idempotency-Key": k})
    assert r.status == 409


def test_keys_are_the_callers_own(daemon: Daemon, operator: Client) -> None:
    """Two principals with the same key are two requests: a key never answers another's write."""
    operator.create_wave("w", ["alice", "bob"])
    alice = Http(daemon.url, operator.mint_token("w", "alice").token)
    bob = Http(daemon.url, operator.mint_token("w", "bob").token)
    k = key()
    a = keyed(alice, f"/v1/wavelets/{q('w/main')}/blips", {"text": "same"}, k)
    b = keyed(bob, f"/v1/wavelets/{q('w/main')}/blips", {"text": "same"}, k)
    assert a[0] == b[0] == 201 and a[1] != b[1]
    assert count_blips(daemon, "same") == 2


def test_a_bad_key_is_refused_before_anything_runs(daemon: Daemon) -> None:
    h = Http(daemon.url, daemon.operator_token)
    h.new_wave("w").ok(201)
    for bad in ("", "x" * 101, "a b", "é"):
        r = h.post(f"/v1/wavelets/{q('w/main')}/blips", {"text": "t"}, headers={"Idempotency-Key": bad})
        assert r.status == 400, bad
        assert "Idempotency-Key" in r.error["message"]
    assert count_blips(daemon, "t") == 0


def test_a_failed_write_under_a_key_runs_again_when_resent(daemon: Daemon) -> None:
    """A refused write wrote nothing, so it stored no key: sent again (after the cause is fixed), it runs."""
    h = Http(daemon.url, daemon.operator_token)
    h.new_wave("w").ok(201)
    k = key()
    body = {"text": "late"}
    assert keyed(h, f"/v1/wavelets/{q('w/later')}/blips", body, k)[0] == 404  # no such wavelet yet
    h.fork("w/main", "later").ok(201)
    assert keyed(h, f"/v1/wavelets/{q('w/later')}/blips", body, k)[0] == 201
    assert keyed(h, f"/v1/wavelets/{q('w/later')}/blips", body, k)[0] == 201
    assert count_blips(daemon, "late") == 1


def _lose_answers(db: Path) -> int:
    """What a daemon killed between a write's commit and its answer's leaves: the key, no answer."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            return conn.execute("UPDATE request_keys SET status = NULL, body = NULL").rowcount
    finally:
        conn.close()


def test_an_answer_lost_in_a_crash_is_rebuilt_from_the_write_itself(fleet_env: Paths) -> None:
    d = Daemon(fleet_env, listen="127.0.0.1:0")
    d.start()
    h = Http(d.url, d.operator_token)
    h.new_wave("w", ["alice"]).ok(201)
    calls: list[tuple[str, object, str]] = [
        (f"/v1/wavelets/{q('w/main')}/blips", {"text": "hi", "as": "alice"}, key()),
        (f"/v1/wavelets/{q('w/main')}/fork", {"name": "side", "with": ["alice"]}, key()),
        (f"/v1/wavelets/{q('w/main')}/invite", {"name": "bob"}, key()),
        ("/v1/tokens", {"wave": "w", "participant": "alice"}, key()),
        (f"/v1/waves/{q('w')}/memory", {"op": "add", "content": "x"}, key()),
    ]
    firsts = [keyed(h, path, body, k) for path, body, k in calls]
    assert [s for s, _ in firsts] == [201, 201, 200, 201, 404], firsts  # memory: no seat, wrote nothing
    h.close()
    d.stop()
    assert _lose_answers(fleet_env.db) == 4  # the mint's secret was never stored: no answer to lose

    d = Daemon(fleet_env, listen="127.0.0.1:0")
    d.start()
    try:
        h = Http(d.url, d.operator_token)
        again = [keyed(h, path, body, k) for path, body, k in calls]

        post, fork, invite, mint, _memory = again
        assert post == firsts[0]  # rebuilt from the blip the event holds: the same bytes
        assert json.loads(fork[1])["id"] == json.loads(firsts[1][1])["id"] and fork[0] == 201
        assert invite[0] == 200 and "bob" in [m["name"] for m in json.loads(invite[1])["roster"]]
        assert mint[0] == 409
        token_id = json.loads(firsts[3][1])["id"]
        assert token_id in json.loads(mint[1])["error"]["message"]
        assert count_blips(d, "hi") == 1
        names = [w["name"] for w in h.get(f"/v1/waves/{q('w')}").ok(200)["wavelets"]]
        assert names.count("side") == 1
        # The rebuilt answer is stored: a third repeat gets it without rebuilding.
        assert keyed(h, *calls[0]) == firsts[0]
    finally:
        d.stop()


class _AnswerDropper:
    """A TCP proxy in front of the daemon that passes requests on whole but, ``drops`` times, closes
    the client's connection instead of passing the answer back: a write the daemon applied whose
    answer never arrived (what a daemon killed between commit and answer does to its client)."""

    def __init__(self, target: str, drops: int) -> None:
        self.target = host_port(target)
        self.drops = drops
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.dropped = 0
        self.sent: list[bytes] = []
        """What the client sent, as each read took it (a request's head and body)."""
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.target)
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    return
                self.sent.append(data)
                upstream.sendall(data)
                answer = upstream.recv(65536)
                if data.startswith(b"POST") and self.dropped < self.drops:
                    self.dropped += 1
                    return  # the daemon answered; the client never hears it
                client.sendall(answer)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def dropper(daemon: Daemon) -> Iterator[_AnswerDropper]:
    p = _AnswerDropper(daemon.url, drops=2)
    yield p
    p.close()


def test_the_client_resends_a_write_whose_answer_was_lost_and_it_lands_once(
    daemon: Daemon, dropper: _AnswerDropper
) -> None:
    op = Client(daemon.url, daemon.operator_token)
    op.create_wave("w", ["alice"])
    c = Client(dropper.url, daemon.operator_token)
    c.get_wavelet("w/main")  # a reused keep-alive connection, as a long-lived client has
    blip = c.post("w/main", "exactly once", as_="alice")
    assert dropper.dropped == 2  # two answers lost; the third send was answered
    assert [b.id for b in op.read("w/main").blips if b.text == "exactly once"] == [blip.id]
    wl = c.fork("w/main", "side", with_=["alice"])
    assert [w.id for w in op.get_wave("w").wavelets if w.name == "side"] == [wl.id]


def test_a_feed_carries_no_key_and_is_resent_when_its_answer_is_lost(
    daemon: Daemon, dropper: _AnswerDropper
) -> None:
    """The feed only reads (its route is not keyed): no request key is drawn for each long-poll,
    and it is resent as a read is; a write beside it still carries its key."""
    Client(daemon.url, daemon.operator_token).create_wave("w", ["alice"])
    c = Client(dropper.url, daemon.operator_token)
    c.get_wavelet("w/main")
    page = c.feed("w", "alice", {})
    assert dropper.dropped == 2 and [b.kind for b in page.blips] == ["system"]
    feeds = [d for d in dropper.sent if d.startswith(b"POST")]
    assert len(feeds) == 3 and not any(b"idempotency-key:" in d.lower() for d in feeds)
    c.post("w/main", "keyed", as_="alice")
    assert b"idempotency-key:" in dropper.sent[-1].lower()


def test_a_write_that_never_reached_the_daemon_says_it_was_not_applied() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = Client(f"http://127.0.0.1:{port}", "t", retries=1, backoff=0.01)
    with pytest.raises(errors.DaemonUnreachable) as got:
        c.post("w/main", "never sent")
    assert got.value.maybe_applied is False
    assert "was not applied" in got.value.message
    with pytest.raises(errors.DaemonUnreachable) as read:
        c.read("w/main")
    assert read.value.maybe_applied is None


# ---------------------------------------------------------------- the property


TEXTS = ("a", "b", "c")


class RequestKeys(RuleBasedStateMachine):
    """Any interleaving of writes under a few keys, resends, daemon restarts and answers lost in a
    crash: every key is applied at most once, a repeat answers as the first did (or is a conflict
    for another body), and the store holds exactly one blip per key that was applied."""

    base: Path
    """Where each example's FLEET_HOME is made (set by the test)."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(dir=self.base))
        self.daemon: Daemon | None = None
        self.applied: dict[str, tuple[str, bytes]] = {}
        """key -> (the text it posted, its first answer)."""

    @initialize()
    def start(self) -> None:
        root = self.root
        self.paths = Paths(root / "data", root / "state", root / "config", root / "logs")
        self._start()
        Http(self.url, self.token).new_wave("w", ["alice"]).ok(201)

    def _start(self) -> None:
        self.daemon = Daemon(self.paths, listen="127.0.0.1:0")
        self.daemon.start()
        self.url, self.token = self.daemon.url, self.daemon.operator_token
        self.h = Http(self.url, self.token)

    @rule(k=st.sampled_from(["k1", "k2", "k3", "k4"]), text=st.sampled_from(TEXTS))
    def post(self, k: str, text: str) -> None:
        status, raw = keyed(self.h, f"/v1/wavelets/{q('w/main')}/blips", {"text": text, "as": "alice"}, k)
        if k not in self.applied:
            assert status == 201, raw
            self.applied[k] = (text, raw)
        elif self.applied[k][0] == text:
            assert (status, raw) == (201, self.applied[k][1])
        else:
            assert status == 409, raw

    @rule()
    def restart(self) -> None:
        assert self.daemon is not None
        self.h.close()
        self.daemon.stop()
        self._start()

    @rule()
    def lose_answers_in_a_crash(self) -> None:
        assert self.daemon is not None
        self.h.close()
        self.daemon.stop()
        _lose_answers(self.paths.db)
        self._start()

    @invariant()
    def one_blip_per_applied_key(self) -> None:
        if self.daemon is None:
            return
        conn = sqlite3.connect(self.paths.db)
        try:
            rows = conn.execute("SELECT text FROM blips WHERE author = 'alice' ORDER BY id").fetchall()
        finally:
            conn.close()
        assert sorted(r[0] for r in rows) == sorted(t for t, _ in self.applied.values())

    def teardown(self) -> None:
        if self.daemon is not None:
            self.h.close()
            self.daemon.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def test_request_keys_hold_under_any_interleaving(tmp_path: Path) -> None:
    class Machine(RequestKeys):
        base = tmp_path

    Machine.TestCase.settings = settings(
        max_examples=12, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)
    )
    Machine.TestCase().runTest()


class _Host:
    """What the channel's tools need of their channel, over a real client (the seam
    :class:`fleet.channel.tools.Host`)."""

    def __init__(self, client: Client) -> None:
        self.participant, self.wave, self.daemon = "alice", "w", client.url
        self.token_file, self.session_id = "", ""
        self.routing = None
        self._client = client

    def client(self) -> Client:
        return self._client

    def reload_token(self) -> bool:
        return False

    def outage_since(self) -> float | None:
        return None

    def label(self, wavelet_id: str) -> str | None:
        return None

    def delivery_status(self) -> object:
        raise AssertionError("not used")


def test_an_agent_told_its_post_may_have_landed_can_post_it_again_and_it_lands_once(daemon: Daemon) -> None:
    from fleet.channel.tools import Tools

    op = Client(daemon.url, daemon.operator_token)
    op.create_wave("w", ["alice"])
    proxy = _AnswerDropper(daemon.url, drops=10**6)  # every answer lost, as through a daemon's crashes
    try:
        c = Client(proxy.url, op.mint_token("w", "alice").token, retries=2, backoff=0.01)
        post = next(t for t in Tools(_Host(c)).table() if t.name == "wavelet_post")  # type: ignore[arg-type]
        first = post.handler({"wavelet": "main", "text": "ship it"})
        assert first.isError
        said = first.content[0].text
        assert (
            "may or may not have been stored" in said
            and "calling it again with the same text is safe" in said
        )
        proxy.drops = 0  # the daemon answers again
        again = post.handler({"wavelet": "main", "text": "ship it"})
        assert not again.isError, again.content[0].text
        assert [b.text for b in op.read("w/main").blips].count("ship it") == 1
        # A new post of the same text, once the first settled, is a new post.
        assert not post.handler({"wavelet": "main", "text": "ship it"}).isError
        assert [b.text for b in op.read("w/main").blips].count("ship it") == 2
    finally:
        proxy.close()
