"""Console streams recompute only what a commit changed (docs/design.md §2): a post re-reads the
wave's new blips, not its tree or presence; a fork re-reads the tree; a presence change re-reads
presence; another wave's commits reach no stream; a stream whose browser went away ends at once."""

from __future__ import annotations

from typing import Any

from conftest import retry_until
from consolehelp import EventStream, login

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.httpbase import connection_notes
from fleet.models import PresenceReport


class Calls:
    """Which connections called a store method (the stream is one connection of its own, whichever
    of the server's threads runs each of its steps): :func:`fleet.httpbase.connection_notes`."""

    def __init__(self, daemon: Daemon, name: str) -> None:
        self.threads: list[int] = []
        store: Any = daemon.store
        real = getattr(store, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.threads.append(id(connection_notes()))
            return real(*args, **kwargs)

        setattr(store, name, wrapped)

    def by(self, thread: int) -> int:
        return self.threads.count(thread)


def test_a_post_recomputes_the_blips_a_fork_the_tree_a_presence_change_presence(
    d: Daemon,
) -> None:
    with Client(d.url, d.operator_token) as op:
        wave = op.create_wave("demo", ["alice", "bob"])
        other = op.create_wave("other", ["carol"])
        s = EventStream.open(d, f"/api/console/waves/{wave.id}/events", login(d))
        s.until(lambda e: e.event == "presence")
        trees, rosters, reads = (Calls(d, m) for m in ("get_wave", "participants", "read_wave_after"))
        posts = [op.post(wave.root_id, f"alice: {n}", as_="alice") for n in range(10)]
        events = s.until(lambda e: e.id == posts[-1].id)
        assert [e.id for e in events if e.event == "blip"] == [p.id for p in posts]
        stream = reads.threads[0]  # only the stream reads the whole wave's blips
        assert set(reads.threads) == {stream}

        def counts() -> tuple[int, int, int]:
            return trees.by(stream), rosters.by(stream), reads.by(stream)

        assert counts()[:2] == (0, 0), "a post re-read the wave's tree or its presence"
        assert 1 <= counts()[2] <= 10
        # another wave's commits wake no stream of this one: the next event is this wave's marker.
        # The stream may have read the last post before the wake-up that tells of it went out (a
        # commit is visible before its bump): it reads once more then, so count from when it has
        # parked again with nothing new behind it.
        caught_up = "the stream parked, caught up"
        retry_until(lambda: d.notifier.parked == d.notifier.settled == 1, 10, 0.005, caught_up)
        woke = counts()
        for n in range(10):
            op.post(other.root_id, f"carol: {n}", as_="carol")
        op.fork(other.root_id, "side", ["carol"])
        assert counts() == woke
        marker = op.post(wave.root_id, "bob: marker", as_="bob")
        nxt = s.next()
        assert nxt is not None and nxt.id == marker.id
        assert counts()[:2] == (0, 0)
        # a fork changes the tree (and adds a provenance blip): the tree and the roster are read once
        op.fork(wave.root_id, "side", ["bob"])
        events = s.until(lambda e: e.event == "tree")
        assert any(w["name"] == "side" for w in events[-1].json()["wavelets"])
        assert counts()[:2] == (1, 1)  # the roster moved: presence lists who is in the wave
        # a presence change: presence is read, the tree and the blips are not
        before = counts()[2]
        op.report_presence("demo", PresenceReport(participant="alice", event="ping"))
        events = s.until(lambda e: e.event == "presence")
        states = {r["participant"]: r["state"] for r in events[-1].json()["presence"]}
        assert states["alice"] == "live"
        assert counts() == (1, 2, before)
        s.close()


def test_a_stream_whose_client_hangs_up_ends_at_once(d: Daemon) -> None:
    with Client(d.url, d.operator_token) as op:
        wave: Any = op.create_wave("demo", ["alice"])
    streams = [EventStream.open(d, f"/api/console/waves/{wave.id}/events", login(d)) for _ in range(5)]
    for s in streams:
        s.until(lambda e: e.event == "presence")
    retry_until(lambda: d.notifier.parked == 5, 10, 0.01, "five parked streams")
    for s in streams:
        s._file.close()  # the socket's file holds it open: close both
        s.close()
    # well before the 15 s keep-alive write that would otherwise find the socket gone
    retry_until(lambda: d.notifier.parked == 0, 5, 0.01, "the streams' waiters released")
