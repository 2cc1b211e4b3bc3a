"""Wake only who cares (docs/design.md §2): a commit wakes the long-polls whose wavelets (or wave,
for wave-wide streams, or roster, for feeds) it touched, and nobody else."""

from __future__ import annotations

import threading
from typing import Any

from conftest import retry_until

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.models import BlipPage, Feed


def counting(daemon: Daemon, name: str) -> list[int]:
    """Count calls of the store method ``name`` (each long-poll wake-up re-queries once)."""
    store: Any = daemon.store
    calls = [0]
    real = getattr(store, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    setattr(store, name, wrapped)
    return calls


def test_posts_to_another_wave_wake_no_parked_reader(daemon: Daemon, operator: Client) -> None:
    operator.create_wave("quiet", ["alice"])
    operator.create_wave("busy", ["bob"])
    quiet = operator.resolve("quiet/main").id
    busy = operator.resolve("busy/main").id
    head = operator.read(quiet).cursor
    reads = counting(daemon, "read_resolved")
    feeds = counting(daemon, "feed")
    streams = counting(daemon, "read_wave_after")
    got: list[BlipPage | Feed] = []
    threads = [
        threading.Thread(target=lambda: got.append(operator.read(quiet, after=head, wait=20))),
        threading.Thread(target=lambda: got.append(operator.feed("quiet", "alice", {quiet: head}, wait=20))),
        threading.Thread(target=lambda: got.append(operator.read_wave("quiet", after=head, wait=20))),
    ]
    for t in threads:
        t.start()
    retry_until(lambda: daemon.notifier.parked == 3, 5, 0.005, "three parked long-polls")
    before = (reads[0], feeds[0], streams[0])
    for n in range(20):
        operator.post(busy, f"bob: noise {n}", as_="bob")
    operator.fork(busy, "side", ["bob"])
    assert (reads[0], feeds[0], streams[0]) == before, "a commit in another wave woke a parked reader"
    assert daemon.notifier.parked == 3
    operator.post(quiet, "alice: hello", as_="operator")
    for t in threads:
        t.join(10)
    assert len(got) == 3
    assert all(len(page.blips) == 1 for page in got)


def test_a_new_membership_wakes_the_participants_feed(daemon: Daemon, operator: Client) -> None:
    operator.create_wave("w", ["alice", "bob"])
    main = operator.resolve("w/main").id
    head = operator.read(main).cursor
    got: list[Feed] = []
    t = threading.Thread(target=lambda: got.append(operator.feed("w", "carol", {}, wait=20)))
    t.start()
    retry_until(lambda: daemon.notifier.parked == 1, 5, 0.005, "the feed to park")
    side = operator.fork(main, "side", ["carol", "bob"])
    operator.post(side.id, "carol: welcome", as_="bob")
    t.join(10)
    assert got and {b.wavelet_id for b in got[0].blips} == {side.id}
    assert head  # the main wavelet's cursor was not needed by carol


def test_a_feed_parks_after_one_fetch_when_nothing_commits_meanwhile(
    daemon: Daemon, operator: Client
) -> None:
    """A channel re-parks its feed after every delivery: one store query, not a second under the
    keys the first one named, unless something committed since it began (then it fetches again)."""
    operator.create_wave("w", ["alice"])
    main = operator.resolve("w/main").id
    head = operator.read(main).cursor
    feeds = counting(daemon, "feed")
    got: list[Feed] = []
    t = threading.Thread(target=lambda: got.append(operator.feed("w", "alice", {main: head}, wait=20)))
    t.start()
    retry_until(lambda: daemon.notifier.parked == 1, 5, 0.005, "the feed to park")
    assert feeds[0] == 1
    operator.post(main, "alice: hello", as_="operator")
    t.join(10)
    assert got and [b.text for b in got[0].blips] == ["alice: hello"] and feeds[0] == 2


def test_a_channels_next_feed_parks_without_a_fetch_and_still_misses_no_commit(
    daemon: Daemon, operator: Client
) -> None:
    """After a feed answer with blips, the same connection's next request (cursors moved past them)
    parks with no store query while nothing touched its keys; a post landing between the answer
    and that request is answered at once all the same."""
    operator.create_wave("w", ["alice"])
    main = operator.resolve("w/main").id
    head = operator.read(main).cursor
    feeder = Client(operator.base_url, operator._token)  # one connection, used by this thread only
    feeds = counting(daemon, "feed")

    def post_when_parked(text: str) -> None:
        retry_until(lambda: daemon.notifier.parked == 1, 5, 0.005, "the feed to park")
        operator.post(main, text, as_="operator")

    def feed_with(text: str, cursor: str) -> Feed:
        t = threading.Thread(target=post_when_parked, args=(text,))
        t.start()
        got = feeder.feed("w", "alice", {main: cursor}, wait=20)
        t.join(10)
        return got

    one = feed_with("alice: one", head)
    assert [b.text for b in one.blips] == ["alice: one"] and feeds[0] == 2  # parked, then woken
    two = feed_with("alice: two", one.blips[-1].id)
    assert [b.text for b in two.blips] == ["alice: two"]
    assert feeds[0] == 3, "the next request fetched before parking"
    operator.post(main, "alice: three", as_="operator")  # between an answer and the next request
    three = feeder.feed("w", "alice", {main: two.blips[-1].id}, wait=20)
    assert [b.text for b in three.blips] == ["alice: three"]
    assert feeder.feed("w", "alice", {main: head}, wait=0).blips[-1].text == "alice: three"  # other cursors
