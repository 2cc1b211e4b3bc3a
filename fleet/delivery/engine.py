"""The delivery engine: one step from a feed batch to frames in a sink, the same for every transport.

:class:`Engine` joins the pure rules (:mod:`fleet.delivery.rules`) to two seams:

- a **feed source** (:class:`FeedSource`; :class:`fleet.client.Client` is one): one long-poll across
  every wavelet on the participant's roster, given the cursors;
- a **sink** (:class:`Sink`): where frames go. The channel's sink pushes MCP notifications; the
  hook's and plain watch's collect frames to write once the step is over.

:meth:`Engine.step` polls the source once and :meth:`Engine.handle` runs the batch: labels and
retain (memberships left are forgotten), gather (targeted attention's digest hold), the attendant
(rescue only), deliver (frames pushed in order; a wavelet batch commits whole, a failed push keeps
its cursor; the sink's ``flush`` ends the step's pushes, and a flush that fails takes back everything
the step pushed), the routing log, and the commit of the core's state in memory. Saving the state is the
caller's (the channel saves off its delivery thread, the hook right after it has written its
frames). The engine starts no thread and owns no clock of its own (``clock`` is injectable), so a
test drives it with a fake feed and a list sink in milliseconds. ``lock`` is held while the state
changes, so another thread (a status tool, shutdown) can read it whole.

:class:`Backoff` is the one retry schedule of the delivery loops built on it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from fleet.delivery.frames import Frame, frame_of
from fleet.delivery.rules import Decision, Delivery
from fleet.models import Blip, Feed
from fleet.wire import Value, copy_into, dump, load

if TYPE_CHECKING:
    from fleet.delivery.attention import Attendant, RoutingLog
    from fleet.records.budgets import Budget

log = logging.getLogger(__name__)


HOLD_BACK_RECHECK = 2.0
"""Seconds between looks at ``hold_back`` while it holds blips: the feed does not end for a budget
raised (it answers blips only), so the engine asks again this often."""


class FeedSource(Protocol):
    """Where an engine gets its blips (:meth:`fleet.client.Client.feed` has this signature)."""

    def feed(
        self, wave: str, participant: str, cursors: dict[str, str], wait: float = 0, limit: int = 200
    ) -> Feed: ...


class Sink(Protocol):
    """Where an engine puts frames. ``push`` returns False when the frame could not be delivered
    (the protocol output is gone): the step stops and the frame's batch stays uncommitted.
    ``flush`` ends a step that pushed: a sink may keep a step's frames and write them together
    here; False (they could not be written) leaves everything that step pushed uncommitted."""

    def push(self, frame: Frame) -> bool: ...

    def flush(self) -> bool: ...


class ListSink:
    """A sink that keeps the frames (the hook, plain watch, tests)."""

    def __init__(self, fail_after: int | None = None, *, fail_flush: bool = False) -> None:
        self.frames: list[Frame] = []
        self.fail_after = fail_after
        """Refuse every push after this many (tests of failed pushes); None: never refuse."""
        self.fail_flush = fail_flush
        """Refuse every flush (tests of a step whose frames could not be written together)."""

    def push(self, frame: Frame) -> bool:
        if self.fail_after is not None and len(self.frames) >= self.fail_after:
            return False
        self.frames.append(frame)
        return True

    def flush(self) -> bool:
        return not self.fail_flush

    def take(self) -> list[Frame]:
        frames, self.frames = self.frames, []
        return frames


class Step(Value):
    """What one :meth:`Engine.handle` did."""

    pushed: int = 0
    """Frames pushed in batches that committed."""
    complete: bool = True
    """False: a push failed (the sink is gone); what follows it was not committed."""
    blips: int = 0
    """Blips the feed returned."""
    stuck: bool = False
    """The feed returned blips but no cursor moved: a daemon answering at or behind the cursors."""


class Engine:
    """One participant's delivery: a :class:`~fleet.delivery.rules.Delivery` between a source and a sink."""

    def __init__(
        self,
        core: Delivery,
        source: FeedSource,
        sink: Sink,
        *,
        wave: str,
        routing: RoutingLog | None = None,
        attendant: Attendant | None = None,
        only: Iterable[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        hold_back: Callable[[Mapping[str, str], list[Budget] | None], Collection[str]] | None = None,
    ) -> None:
        self.core = core
        self.source = source
        self.sink = sink
        self.wave = wave
        self.routing = routing
        self.attendant = attendant
        self.only: frozenset[str] | None = frozenset(only) if only is not None else None
        """Deliver only these wavelet ids (``fleet watch --wavelet``); the others are left untouched."""
        self.clock = clock
        self.lock = threading.Lock()
        self.labels: dict[str, str] = {}
        """Wavelet id -> WAVE/WAVELET of the participant's memberships, as of the last feed."""
        self._skip: dict[str, str] = {}
        """Cursors of wavelets outside ``only``, for the request only, so they do not end a poll."""
        self.hold_back = hold_back
        """Given the memberships (id -> WAVE/WAVELET) and the budgets the feed answer carried (None:
        it carried none), the wavelet ids not to deliver now (a spent budget,
        :class:`fleet.budgets.BudgetWatch`): their blips stay uncommitted."""
        self._before: dict[str, Any] | None = None
        """The state as data before the current step's first push (see :meth:`_flushed`)."""
        self._held_back: dict[str, str] = {}
        """Held-back wavelet id -> the newest blip seen there: the feed is asked past it (so it does
        not return them again) while the committed cursor stays; dropped when delivery resumes, and
        the next feed hands them out from the cursor."""

    @property
    def participant(self) -> str:
        return self.core.participant

    @property
    def feed_cursors(self) -> dict[str, str]:
        """What the next feed request sends: the core's cursors (past held blips) and the skips."""
        return {**self.core.feed_cursors, **self._skip, **self._held_back}

    def poll_wait(self, wait: float) -> float:
        """``wait``, shortened so that a held digest is not kept past its deadline, and while blips
        are held back to :data:`HOLD_BACK_RECHECK` (a budget raised is seen that soon)."""
        if self._held_back:
            wait = min(wait, HOLD_BACK_RECHECK)
        deadline = self.core.hold_deadline()
        if deadline is None:
            return wait
        return max(0.0, min(wait, deadline - self.clock()))

    def step(self, wait: float) -> Step:
        """Poll the source once (up to ``wait`` seconds) and handle what it returns.

        Raises what the source raises (:class:`~fleet.errors.FleetError`); the state is unchanged then.
        """
        feed = self.source.feed(self.wave, self.participant, self.feed_cursors, wait=self.poll_wait(wait))
        return self.handle(feed)

    def handle(self, feed: Feed) -> Step:
        """Run one feed batch through the rules into the sink (see the module docstring)."""
        core = self.core
        pushed, complete = 0, True
        labels = {w.id: f"{w.wave}/{w.name}" for w in feed.wavelets}
        held_back: Collection[str] = ()
        if self.hold_back is not None and (feed.blips or self._held_back):
            held_back = self.hold_back(labels, feed.budgets)
        before_held = dict(self._held_back)
        released = set(before_held) - set(held_back)
        blips: list[Blip] = []
        for b in feed.blips:
            if b.wavelet_id in held_back:
                if b.id > self._held_back.get(b.wavelet_id, ""):
                    self._held_back[b.wavelet_id] = b.id
            elif b.wavelet_id in released:
                continue  # newer than what is held: delivered after it, from the cursor, next feed
            elif self.only is None or b.wavelet_id in self.only:
                blips.append(b)
            elif b.id > self._skip.get(b.wavelet_id, ""):
                self._skip[b.wavelet_id] = b.id
        for wavelet in [w for w in self._held_back if w not in held_back]:
            del self._held_back[wavelet]  # delivery resumes: the next feed starts at the cursor
        with self.lock:
            self.labels = labels
            if feed.wavelets:  # (for an attention policy: which wavelets are the wave's root)
                core.roots = frozenset(w.id for w in feed.wavelets if w.root)
            core.retain(self.labels)
            before = self.feed_cursors
            if core.attention == "full":
                pushed, complete = self._pushing(lambda: core.process(blips, self._push))
        if core.attention != "full":
            batches = core.gather(blips, self.clock())
            if self.attendant is not None:  # outside the lock: a run may take seconds
                for batch in batches:
                    self.attendant.review(batch, self.labels.get(batch.wavelet_id, batch.wavelet_id))
            with self.lock:
                pushed, complete = self._pushing(lambda: core.deliver(batches, self._push))
            if self.routing is not None:
                self.routing.routed(core.take_routed(), self.labels)
        stuck = bool(feed.blips) and self.feed_cursors == before and self._held_back == before_held
        return Step(pushed=pushed, complete=complete, blips=len(feed.blips), stuck=stuck)

    def _push(self, decision: Decision) -> bool:
        if self._before is None:  # the step's first push: what to go back to if its flush fails
            self._before = dump(self.core.state)
        wavelet = decision.blip.wavelet_id
        label = self.labels.get(wavelet, wavelet)
        return self.sink.push(frame_of(decision, label, self.core.cap, self.core.attention))

    def _pushing(self, run: Callable[[], tuple[int, bool]]) -> tuple[int, bool]:
        """``run()`` (the rules pushing; the caller holds the lock), then the sink's flush: what was
        pushed before an error is flushed as well (or taken back), and the error raised."""
        try:
            done = run()
        except BaseException:
            self._flushed(0, False)
            raise
        return self._flushed(*done)

    def _flushed(self, pushed: int, complete: bool) -> tuple[int, bool]:
        """End a step's pushes (the caller holds the lock): the sink writes what it kept. If it
        cannot, the state goes back to what it was before the step's first push: nothing that step
        pushed is committed (it is delivered again, from the cursors, when delivery resumes)."""
        before, self._before = self._before, None
        if before is None or self.sink.flush():
            return pushed, complete
        copy_into(self.core.state, load(type(self.core.state), before))
        self.core.dirty = True
        return 0, False


class Backoff(Value):
    """Jittered exponential waits between retries: ``first``, doubling, at most ``limit``."""

    first: float = 0.2
    limit: float = 5.0
    jitter: float = 0.2
    _next: float = 0.0
    """The wait after the current one (0: ``first`` comes next)."""

    def delay(self, limit: float | None = None) -> float:
        """The next wait (each call doubles the following one, up to ``limit``)."""
        cap = self.limit if limit is None else limit
        current = min(self._next or self.first, cap)
        self._next = min(current * 2, cap)
        import random  # here: only a retry needs it, and a channel starts without retrying

        return current * random.uniform(1 - self.jitter, 1 + self.jitter)

    def reset(self) -> None:
        self._next = 0.0


class Outage(Value):
    """A daemon outage in progress: since when (``time.time()``) and the latest reason."""

    since: float
    reason: str
