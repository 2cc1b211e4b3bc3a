"""The ledger: frames handed out against what the session's own record shows reached its model.

Pure bookkeeping over a :class:`~fleet.delivery.state.DeliveryState` (its ``pending``,
``confirmed`` and ``route``), no I/O and no clock of its own: the transports hand it frames as they
give them out and the receipts their :class:`~fleet.delivery.receipts.Transcript` reads, and ask
it what must be handed out again. The rules (docs/design.md §3):

* A frame is **confirmed** when its blips entered the model's context; it is **queued** when
  Claude Code accepted it into its queue (it will enter at the end of the running turn). Both
  times are recorded; only a confirmed frame leaves ``pending``.
* A **push is lost** when the process that pushed it is gone (a new run) and it had not entered
  (unless the session's queue is ``durable`` and took it: Codex keeps queued messages on disk);
  before the session's process took any push, when it did not accept it within ``bound`` seconds
  (channels are unavailable here) and the session has since answered the channel's pings
  (:data:`PINGS`: it read the push and ran on, so a push it took would be on disk); once it took
  one, only on evidence that it dropped this one — a push
  handed after it *entered* the conversation (Claude Code takes its pushes in order, and writes
  the lines of its conversation in order; not its queue lines, which at a session's first turn
  reached the disk after later ones), or the transcript shows the session carried on without
  taking it (conversation lines dated after the hand-out, then one dated more than ``bound``
  seconds after those: it ran after the push reached its pipe, and went on running) — or after
  ``patience`` seconds with neither. Silence alone is no evidence then: Claude Code
  writes its queue line behind the session, seconds late on a loaded machine, and a push handed to
  the hook on a guess reached the model twice. A lost push goes to the hook.
* A **hook delivery is lost** when the transcript shows the session carried on (a line dated more
  than ``grace`` seconds after the hand-out) without it entering, and it was not queued by this
  run. The hand-out is complete when the hook's process exits (Claude Code takes its feedback
  then): while a hook handed frames still runs nothing it carries is judged, and its frames count
  from when it was seen gone (:meth:`Ledger.hooks_running`). Without that evidence — a
  transcript missing or unreadable — it is never handed out again: a blip enters a context at
  most once, and stays counted as unconfirmed.
* The **route** says what wakes the session: ``channel`` once a push was accepted (also one already
  owed to the hook, which then stays the channel's), ``hook`` once a push was lost before any was
  accepted (channels are not available here; pushing stops), ``unconfirmed`` when a push was lost
  and no hook is installed.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet.delivery.frames import Frame
from fleet.delivery.receipts import Receipt
from fleet.delivery.state import DeliveryState, Path_, Pending

BOUND = 3.0
"""Seconds a push may go unaccepted before it is lost. Claude Code 2.1.332 writes its enqueue line
within milliseconds of a push (bench/receipts.py measures it); a few seconds leave room for a
loaded machine without delaying the hook's fallback by much (docs/design.md §3)."""
PINGS = 3
PING_GAP = 1.0
"""Before Claude Code took any push, one not taken within the bound is lost only once the session
answered this many pings (:meth:`fleet.mcpwire.Server.ping`), the first written after the push and
each at least this many seconds after the answer before it, and the transcript was read after the
last answer: it has read the push (one pipe, read in order) and ran on for two seconds since, well
past the 100 ms timer after which Claude Code 2.1.332 writes a queued line (0.1 s between pings was
not enough on a loaded machine: the line came later), so a push it took is on disk.
A session starved of CPU answers late and is waited for; one without channels answers at once."""
PATIENCE = 30.0
"""Seconds a push may go unaccepted before it is lost without other evidence (an idle session that
dropped it writes nothing that would say so; a client that answers no ping)."""
GRACE = 3.0
"""Seconds after a hook hand-out before the transcript's silence about it counts as a loss (hook
feedback that arrives mid-turn enters right after the turn: the next arm must not beat it)."""


CLAUDE_TOOK = "channel registered: Claude Code took a push"
"""The route's reason once Claude Code took a push."""


def frame_ids(frame: Frame) -> frozenset[str]:
    """The blip ids a frame carries into the context (a digest: all it lists)."""
    if frame.blip_ids is not None:
        return frozenset(frame.blip_ids)
    return frozenset({frame.id} if frame.id else ())


class Ledger:
    """The receipts' side of one participant's delivery (see the module docstring)."""

    def __init__(
        self,
        state: DeliveryState,
        run: str,
        *,
        hook: bool,
        bound: float = BOUND,
        grace: float = GRACE,
        patience: float = PATIENCE,
        durable: bool = False,
        agent: str = "Claude Code",
        taken: str = CLAUDE_TOOK,
    ) -> None:
        self.state = state
        self.run = run
        """The session process's identity (:func:`fleet.procs.identity` of the agent that runs the
        channel or the hook): every hand-out is tagged with it, and one tagged by another process
        did not reach this one's queue."""
        self.hook = hook
        """A hook is installed: lost pushes go to it, and a session whose pushes are never accepted
        is served by it alone."""
        self.bound = bound
        self.grace = grace
        self.patience = patience
        self.durable = durable
        """The session's queue outlives its process (Codex: a queued message enters when the thread is
        resumed): a queued push of an earlier run is not lost with that run."""
        self.agent = agent
        """Who takes the pushes, as the route's reasons name it; ``taken``: the reason once one is taken."""
        self.taken = taken
        self.last_at = 0.0
        """The newest date of the session's conversation the transcript showed (its queue lines do
        not count: see :meth:`apply`)."""
        self.taken_upto = 0.0
        """The newest hand-out time of a push of this run that Claude Code took (0: none yet)."""
        self.entered_upto = 0.0
        """The newest hand-out time of a push of this run that entered the conversation: a push of
        this run handed before it and not taken was dropped. (Entered, not queued: the conversation's
        lines reach the transcript in order, its queue lines not always — at a session's first turn
        Claude Code 2.1.332 wrote the first pushes' queue lines after a later push's.)"""
        self.pongs: list[tuple[float, float]] = []
        """(written, answered) of the session's answers to the channel's pings, oldest first."""
        self.read_at = 0.0
        """When the transcript was last read (no earlier than that: the time taken before the read)."""
        self.hook_runs = False
        """A hook this run handed frames was not seen gone since (:meth:`hooks_running`)."""
        self._ran_after: dict[frozenset[str], float] = {}
        """Untaken pushes (by blip ids) -> the newest date of the first read of the transcript that
        showed lines dated after their hand-out (no earlier than the session's first run after it)."""
        self.dirty = False

    # ------------------------------------------------------------ recording

    def hand(self, frame: Frame, path: Path_, now: float) -> None:
        """``frame`` was just handed out on ``path`` (a frame with no blip is not tracked)."""
        ids = frame_ids(frame)
        if not ids:
            return
        for p in self.state.pending:
            if frame_ids(p.frame) == ids:
                p.path, p.handed_at, p.run, p.queued_at = path, now, self.run, None
                p.attempts += 1
                break
        else:
            self.state.pending.append(Pending(frame=frame, path=path, handed_at=now, run=self.run))
        self._ran_after.pop(ids, None)
        if path == "hook":
            self.hook_runs = True  # until seen gone (:meth:`hooks_running`), however soon it exits
        if self.state.route == "unknown" and path == "hook":
            self._route("hook", "woken by the hook")
        self.dirty = True

    def apply(
        self, receipts: Iterable[Receipt], last_at: float = 0.0, *, read_at: float | None = None
    ) -> list[Pending]:
        """Take the transcript's receipts (one read of it, begun no earlier than ``read_at``;
        ``last_at``: the newest date it showed); returns the entries they confirmed (now out of
        pending)."""
        if read_at is not None:
            self.read_at = max(self.read_at, read_at)
        receipts = list(receipts)
        # the session ran until then: the conversation's dates (``last_at`` is the newest of its
        # lines), never a queue line's, which may reach the disk ahead of earlier conversation
        dated = max([last_at, *(r.at for r in receipts if r.how == "entered")])
        self.last_at = max(self.last_at, dated)
        confirmed: list[Pending] = []
        for r in receipts:
            got = frozenset(r.blip_ids)
            for p in list(self.state.pending):
                if not frame_ids(p.frame) <= got:
                    continue
                if r.via == "channel":
                    if p.run == self.run and p.path == "waiting":
                        # taken after all, once owed to the hook (slow, not lost): the hook's next
                        # arm must not bring it a second time
                        p.path = "channel"
                        self.dirty = True
                    if p.run == self.run and p.path == "channel":
                        self.taken_upto = max(self.taken_upto, p.handed_at)
                        if r.how == "entered":
                            self.entered_upto = max(self.entered_upto, p.handed_at)
                    if self.state.route != "channel":
                        self._route("channel", self.taken)
                if r.how == "queued":
                    if p.queued_at is None:
                        p.queued_at = r.at
                        self.dirty = True
                    continue
                self.state.pending.remove(p)
                wavelet = p.frame.wavelet_id
                newest = max(frame_ids(p.frame))
                if newest > self.state.confirmed.get(wavelet, ""):
                    self.state.confirmed[wavelet] = newest
                self.state.confirmed_count += 1
                confirmed.append(p)
                self.dirty = True
        untaken = {
            frame_ids(p.frame): p for p in self.state.pending if p.path == "channel" and p.queued_at is None
        }
        self._ran_after = {k: v for k, v in self._ran_after.items() if k in untaken}
        for ids, p in untaken.items():
            if ids not in self._ran_after and dated > p.handed_at:
                self._ran_after[ids] = dated
        return confirmed

    # ------------------------------------------------------------ what to hand out again

    def lost_pushes(self, now: float) -> list[Pending]:
        """Pushes Claude Code did not take (see the module docstring), or that a gone process pushed
        and that did not enter; the route turns to the hook when no push was ever taken. Oldest first."""
        lost = [p for p in self.state.pending if p.path == "channel" and self._push_lost(p, now)]
        if lost and self.state.route == "unknown":
            if self.hook:
                why = "channels unavailable here: Claude Code took no push; woken by the hook"
                self._route("hook", why)
            else:
                self._route(
                    "unconfirmed", f"{self.agent} took no push and no hook is installed: nothing wakes it"
                )
        return sorted(lost, key=lambda p: p.handed_at)

    @property
    def took(self) -> bool:
        """This run's process took a push (the state's route may say ``channel`` from an earlier
        run: a new process registers its channel anew, and its first pushes are judged as a
        session's first are)."""
        return self.taken_upto > 0.0

    def _push_lost(self, p: Pending, now: float) -> bool:
        if p.run != self.run:
            # pushed into a queue that died with its process (Claude Code) — unless the queue is
            # the session's own and durable (Codex) and took it: it enters on resume
            return not (self.durable and p.queued_at is not None)
        if p.queued_at is not None:
            return False
        if not self.took:  # this process took no push yet: is it slow, or are there no channels?
            if now >= p.handed_at + self.patience:
                return True
            count, _due, last = self._pinged(p)
            return now >= p.handed_at + self.bound and count >= PINGS and self.read_at >= last
        ran_after = self._ran_after.get(frame_ids(p.frame))
        return (
            self.entered_upto > p.handed_at
            or (ran_after is not None and self.last_at > ran_after + self.bound)
            or now >= p.handed_at + self.patience
        )

    def _pinged(self, p: Pending) -> tuple[int, float, float]:
        """The chain of answered pings that speaks for ``p`` (see :data:`PINGS`): how many, when the
        next may be written, and when the last was answered."""
        count, due, last = 0, p.handed_at, 0.0
        for sent, answered in self.pongs:
            if sent >= due:
                count, due, last = count + 1, answered + PING_GAP, answered
        return count, due, last

    def ping_due(self, now: float) -> bool:
        """A ping should be written now: a push past the bound, before any push was taken, waits for
        the session's answers to say whether it was taken (:data:`PINGS`)."""
        if self.took:
            return False
        for p in self.state.pending:
            if p.path == "channel" and p.queued_at is None and p.run == self.run:
                count, due, _last = self._pinged(p)
                if now >= p.handed_at + self.bound and count < PINGS and now >= due:
                    return True
        return False

    def hooks_running(self, running: bool, now: float) -> None:
        """Whether a hook this run handed frames is still running (the gate's connection to it is
        open). Seen gone, its hand-outs count from ``now``: Claude Code took its feedback when it
        exited, and a session that ran on between the hand-out and then (a hook starved of CPU for
        seconds) is no evidence that the feedback was passed over."""
        if self.hook_runs and not running:
            for p in self.state.pending:
                if p.path == "hook" and p.run == self.run and p.handed_at < now:
                    p.handed_at = now
                    self.dirty = True
        self.hook_runs = running

    def lost_hooks(self, now: float) -> list[Pending]:
        """Hook hand-outs the transcript passed over (see the module docstring). Oldest first."""
        if self.hook_runs:
            return []
        return sorted(
            (
                p
                for p in self.state.pending
                if p.path == "hook"
                and (p.queued_at is None or p.run != self.run)
                and self.last_at > p.handed_at + self.grace
                and now >= p.handed_at + self.grace
            ),
            key=lambda p: p.handed_at,
        )

    def owe_hook(self, p: Pending, now: float) -> None:
        """``p`` is to be handed by the hook at its next arm."""
        p.path, p.handed_at, p.queued_at = "waiting", now, None
        self.dirty = True

    def waiting(self) -> list[Pending]:
        """What the hook's next arm delivers, oldest first."""
        return sorted((p for p in self.state.pending if p.path == "waiting"), key=lambda p: p.handed_at)

    def unconfirmed(self, now: float) -> tuple[int, float | None]:
        """(frames pending, age in seconds of the oldest or None)."""
        pending = self.state.pending
        return len(pending), (now - min(p.handed_at for p in pending)) if pending else None

    def _route(self, route: str, why: str) -> None:
        self.state.route = route  # type: ignore[assignment]
        self.state.route_why = why
        self.dirty = True
