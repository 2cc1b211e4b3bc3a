"""The feed: one long-poll across a participant's roster (what a channel delivers from)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleet import errors
from fleet.daemon.request import Answer, Parking, Request
from fleet.daemon.wakes import member_key
from fleet.models import Feed, FeedRequest, FeedWavelet

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


@dataclass(frozen=True)
class _LastFeed:
    """A connection's last feed answer that had blips: what its next request is expected to ask
    (:func:`feed` parks that request without a fetch while nothing touched ``keys``)."""

    asked: tuple[object, ...]
    """(token id, principal, wave id, participant, limit) of the request."""
    next_cursors: dict[str, str]
    """The request's cursors moved past the answer's blips."""
    seen: int
    """:meth:`Notifier.seen` of ``keys`` before the answer's fetch."""
    keys: Sequence[str]
    wavelets: list[FeedWavelet]


def feed(d: Dispatcher, r: Request) -> Parking[Answer]:
    body = r.model(FeedRequest)
    if not body.wait >= 0:  # also NaN, which would otherwise wait forever
        raise errors.UsageError("wait must be a non-negative number of seconds")
    wave_id = d.s.wave_id(r.who, r.arg) if body.wait > 0 else ""
    asked = (r.who.token_id, r.who.name, wave_id, body.participant, body.limit)
    last: _LastFeed | None = getattr(d.conn_notes, "feed", None)
    d.conn_notes.feed = None  # (a request that fails leaves no note behind)
    start = None
    if last is not None and last.asked == asked and last.next_cursors == body.cursors:
        start = (last.seen, last.keys, Feed(wavelets=last.wavelets, blips=[]))
    basis: list[tuple[int, Sequence[str]]] = []
    feed = yield from d.long_poll(
        body.wait,
        lambda: d.s.feed(r.who, r.arg, body.participant, body.cursors, limit=body.limit),
        lambda f: not f.blips,
        lambda f: [*(w.id for w in f.wavelets), member_key(wave_id, body.participant)],
        start=start,
        basis=basis,
    )
    if basis and feed.blips and not feed.more and wave_id:
        # What this connection's next request will ask, and what it would be answered: nothing,
        # unless a commit touches these keys since the fetch began. So that request parks at
        # once, without a fetch of its own (half of a channel's feed requests in a burst).
        nxt = dict(body.cursors)
        for b in feed.blips:
            nxt[b.wavelet_id] = max(nxt.get(b.wavelet_id, ""), b.id)
        seen, keys = basis[0]
        d.conn_notes.feed = _LastFeed(asked, nxt, seen, keys, feed.wavelets)
    # the budgets the participant's channel checks before it delivers: sent with the answer,
    # so that a delivery costs one request, not two (docs/http-api.md)
    feed.budgets = d.s.budgets(r.who, r.arg, body.participant)
    return 200, feed


HANDLERS = (feed,)
