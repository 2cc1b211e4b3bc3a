"""The delivery rules: which blips a participant is handed, as what, and where it then stands.

Pure: no I/O, no clock of its own, no threads. Every transport (the channel's MCP notifications,
``fleet watch`` and its hook) runs them through :class:`fleet.delivery.engine.Engine`. The rules
(docs/design.md §3, §4):

* **A cursor per wavelet** (never one global cursor): a blip is handled when its id is greater than
  its wavelet's cursor. Ids are strictly increasing UUIDv7 text, so string order is commit order.
* **Echo suppression is stateless:** a blip authored by the participant itself, and the provenance
  (``system``) blip of its own fork, invite or leave, is stepped over.
* **A failed push keeps the cursor:** :meth:`Delivery.process` stops at the first push that fails,
  and only blips before it are committed; the rest are handed out again next time.
* **The cap:** at most ``cap`` pushes per wavelet (``cap <= 0`` means no cap). The first blip past
  it produces one exhaustion notice instead of itself; every blip after that is stepped over
  silently (it stays readable with ``wavelet_read``). A blip authored by the operator in that
  wavelet resets the wavelet's count, and is itself delivered.
* **Attention** (opt-in per participant): with ``attention="full"`` (the default) every blip of
  others is its own push, exactly as above. With ``attention="targeted"`` each blip is routed by
  :func:`route`: in full when it names the participant (:func:`mentions`), is the operator's, or is
  a ``surface``; everything else (``system`` provenance included) is *digested*. A wavelet's share
  of one feed batch becomes its full blips, one frame each, in order, then one digest frame listing
  every digested blip. Frames, not blips, count toward the cap, and a wavelet batch commits whole:
  if any of its frames fails to push, none of it is committed and the whole batch is handed out
  again (a frame pushed before the failure may then be pushed twice; nothing is skipped). Nothing
  is ever dropped: every blip of others is in exactly one committed frame, or stepped over by the
  cap as in full mode.
* **Attention policies** (``attention=NAME``, any other name): targeted attention as above, then
  the policy plugged into :data:`fleet.seams.policies` under ``NAME`` may send more blips in full
  (:meth:`~fleet.seams.Policy.route`, told whether the blip is in the wave's root wavelet:
  :attr:`Delivery.roots`) and hold a wavelet's digest-only batch with no deadline
  (:meth:`~fleet.seams.Policy.holds`): the chatter then rides with the next full blip there (or
  goes out at :data:`HOLD_MAX_LINES`). A name no policy holds is refused (:func:`policy_of`). The
  resident's (``resident``, docs/resident.md) is one: the root wavelet and ``DONE:`` reports in
  full, its workers' chatter held.
* **The digest hold** (targeted, ``hold`` > 0, :meth:`Delivery.gather`): a wavelet batch with
  nothing to deliver in full is held back, uncommitted, for up to ``hold`` seconds so that later
  chatter joins the same digest frame (one wake instead of one per blip). A full blip in that
  wavelet, the deadline, or :data:`HOLD_MAX_LINES` digested blips release it. Held blips are in
  memory only: after a restart they are simply handed out again.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from fleet import errors, seams
from fleet.models import OPERATOR, Blip
from fleet.wire import FrozenValue, Value, field

if TYPE_CHECKING:
    from fleet.delivery.state import DeliveryState

DEFAULT_CAP = 40
"""Pushes per wavelet before the exhaustion notice (docs/design.md §3); configurable per channel."""
DIGEST_HOLD = 30.0
"""Seconds a digest-only batch may wait for more chatter (targeted attention); 0 pushes at once."""
HOLD_MAX_LINES = 100
"""Digested blips after which a held digest goes out without waiting for its deadline."""


# ---------------------------------------------------------------- decisions


class Action(enum.StrEnum):
    DELIVER = "deliver"
    """Push the blip."""
    NOTICE = "notice"
    """Push one exhaustion notice in place of the blip."""
    ECHO = "echo"
    """The participant's own blip: step over it."""
    CAPPED = "capped"
    """Past the cap and already noticed: step over it."""
    STALE = "stale"
    """At or behind the cursor (already handled): ignore it, change nothing."""


class Decision(FrozenValue, frozen=True):
    """What happens to one blip (full attention) or one frame (targeted attention)."""

    action: Action
    blip: Blip
    """The blip pushed, or for a digest frame the last (newest) blip it lists."""
    reset: bool
    """The blip is the operator's (targeted: the batch holds one): the cap count starts over."""
    count: int
    """Pushes in the wavelet after this decision is committed."""
    digest: tuple[Blip, ...] = ()
    """Non-empty for a digest frame: every blip it lists, oldest first (``blip`` is the last)."""
    rule: Rule | None = None
    """Targeted attention, a full frame: the rule that sent ``blip`` in full. None otherwise."""

    @property
    def pushes(self) -> bool:
        return self.action in (Action.DELIVER, Action.NOTICE)

    @property
    def blips(self) -> tuple[Blip, ...]:
        """Every blip this decision covers: the digest's, or just ``blip``."""
        return self.digest or (self.blip,)


# ---------------------------------------------------------------- attention rules

Attention = str
"""``full``: every blip of others is pushed as itself. ``targeted``: :func:`route` decides. Any
other name: the policy of that name on :data:`fleet.seams.policies` (``resident``, the resident's),
checked by :func:`policy_of`."""

BUILT_IN: tuple[str, ...] = ("full", "targeted")
"""The attentions the rules know without a policy."""


def attentions() -> list[str]:
    """Every attention a participant may be given: the built-ins, then the policies plugged in."""
    return [*BUILT_IN, *(n for n in seams.policies.names() if n not in BUILT_IN)]


def policy_of(attention: str) -> seams.Policy | None:
    """The policy ``attention`` names (None: ``full`` or ``targeted``, which need none); a
    :class:`~fleet.errors.UsageError` naming the choices when no policy is plugged in under it."""
    if attention in BUILT_IN:
        return None
    got = seams.policies.get(attention)
    if got is None:
        raise errors.UsageError(
            f"attention {attention!r} is not one of {', '.join(attentions())}: pass one of those"
            " (a policy other than full or targeted is a feature's, plugged into fleet.seams.policies)"
        )
    return got


def check_attention(attention: str) -> str:
    """``attention`` when it names an attention (:func:`policy_of`'s error otherwise), not imported."""
    if attention not in BUILT_IN and attention not in seams.policies.names():
        policy_of(attention)
    return attention


class Rule(enum.StrEnum):
    """Why targeted attention routed a blip as it did (the routing log's ``rule``)."""

    OPERATOR = "operator"
    """Full: the operator wrote it (a human in the loop is never summarised)."""
    SURFACE = "surface"
    """Full: a conclusion surfaced from a sub-wavelet (already distilled)."""
    MENTION = "mention"
    """Full: it names the participant (:func:`mentions`)."""
    ATTENDANT = "attendant"
    """Full: the rules digested it and the external attendant promoted it."""
    ROOT = "root"
    """Full (a policy's): a blip in the wave's root wavelet (the resident's: where the operator and
    the workers' surfaces speak to the mind)."""
    DONE = "done"
    """Full (a policy's): a report that a job is done (the resident's: a blip starting ``DONE:``)."""
    SYSTEM = "system"
    """Digest: fleet's provenance (a fork, join or leave), whoever caused it."""
    UNADDRESSED = "unaddressed"
    """Digest: a message that does not name the participant."""

    @property
    def full(self) -> bool:
        return self in _FULL_RULES


_FULL_RULES = frozenset({Rule.OPERATOR, Rule.SURFACE, Rule.MENTION, Rule.ATTENDANT, Rule.ROOT, Rule.DONE})


def mentions(text: str, name: str) -> bool:
    """Whether ``text`` names the participant ``name``, case-insensitively.

    ``name`` must stand alone: not inside a longer word or name, so for ``bob`` the texts ``bob``,
    ``Bob,``, ``@bob``, ``(bob)`` and ``[[bob]]`` match, while ``bobby``, ``bob_2``, ``bob-2`` and
    ``jim-bob`` do not (``-`` and ``_`` are name characters, docs/design.md §1). ``[[name]]`` always matches.
    """
    n = re.escape(name)
    return re.search(rf"(?<![\w-]){n}(?![\w-])|\[\[{n}\]\]", text, re.IGNORECASE) is not None


def route(blip: Blip, participant: str) -> Rule:
    """The targeted-attention rule for a blip of someone else, first match wins.

    ``system`` blips are provenance and always digested, even when they name the participant (an
    invitation still shows up as a digest line in the new wavelet; its blips then follow). Then the
    operator's blips, surfaces and mentions go in full; everything else is digested. A policy
    (:class:`fleet.seams.Policy`) is asked after this, with its answer.
    """
    if blip.kind == "system":
        return Rule.SYSTEM
    if blip.author == OPERATOR:
        return Rule.OPERATOR
    if blip.kind == "surface":
        return Rule.SURFACE
    if mentions(blip.text, participant):
        return Rule.MENTION
    return Rule.UNADDRESSED


EXCERPT_CHARS = 60
"""Characters of a blip's text on its digest line (whitespace collapsed): about ten words, enough
to tell what it is about; the id is there to read the rest."""


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` on one line, cut to at most ``limit`` characters, at a word boundary when one is
    near the end (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit * 2 // 3:
        cut = cut[:space]
    return cut.rstrip() + "…"


def digest_line(blip: Blip) -> str:
    """One digest line: ``author: excerpt [blip id]`` (the kind after the author unless a message)."""
    kind = "" if blip.kind == "message" else f" ({blip.kind})"
    return f"{blip.author}{kind}: {excerpt(blip.text)} [{blip.id}]"


def digest_text(blips: Iterable[Blip]) -> str:
    """A digest frame's text: one :func:`digest_line` per blip, oldest first."""
    return "\n".join(digest_line(b) for b in blips)


def digest_ids(blips: Iterable[Blip]) -> str:
    """A digest frame's blip ids as one meta string: comma-separated, oldest first."""
    return ",".join(b.id for b in blips)


class Batch(Value):
    """One wavelet's share of a feed under targeted attention: its new blips, each routed.

    Built by :meth:`Delivery.batches`; an attendant may :meth:`promote` digested blips before
    :meth:`Delivery.deliver` turns it into frames.
    """

    wavelet_id: str
    blips: list[Blip] = field(default_factory=list)
    """Every blip past the cursor, oldest first (the participant's own included: they move the cursor)."""
    rules: dict[str, Rule] = field(default_factory=dict)
    """Blip id -> rule, for every blip of others."""

    @property
    def full(self) -> list[Blip]:
        return [b for b in self.blips if b.id in self.rules and self.rules[b.id].full]

    @property
    def digested(self) -> list[Blip]:
        return [b for b in self.blips if b.id in self.rules and not self.rules[b.id].full]

    def promote(self, blip_ids: Iterable[str]) -> tuple[list[str], list[str]]:
        """Send these digested blips in full (rule ``attendant``). Promotion can only rescue: an id
        that is not a digested blip of this batch changes nothing. Returns (promoted, unknown)."""
        promoted: list[str] = []
        unknown: list[str] = []
        for blip_id in dict.fromkeys(blip_ids):
            rule = self.rules.get(blip_id)
            if rule is None or rule.full:
                unknown.append(blip_id)
            else:
                self.rules[blip_id] = Rule.ATTENDANT
                promoted.append(blip_id)
        return promoted, unknown


class Routed(FrozenValue, frozen=True):
    """One committed routing decision (targeted attention): what the routing log records."""

    blip: Blip
    rule: Rule
    action: Action
    """What became of the frame carrying it: delivered, replaced by the cap notice, or capped."""


class Delivery:
    """Applies the rules to blips for one participant over one :class:`DeliveryState`.

    Full attention: :meth:`decide` is pure; :meth:`commit` applies a decision. Callers decide, push,
    and commit only a push that succeeded, in the order the blips came (oldest first per wavelet);
    :meth:`process` does exactly that.

    Targeted attention: :meth:`batches` groups and routes a feed's blips (pure), :meth:`frames` turns
    a batch into decisions (pure), :meth:`deliver` pushes and commits batches whole; :meth:`process`
    chains them. Each committed routing decision is kept until :meth:`take_routed` hands it over
    (the transport logs them).
    """

    def __init__(
        self,
        participant: str,
        state: DeliveryState,
        cap: int = DEFAULT_CAP,
        attention: Attention = "full",
        hold: float = 0.0,
    ) -> None:
        self.participant = participant
        self.state = state
        self.cap = cap
        self.attention: Attention = attention
        self.policy = policy_of(attention)
        """The attention's policy (None: full or targeted)."""
        self.hold = hold
        """Targeted attention: seconds :meth:`gather` holds a digest-only batch (0: never)."""
        self.dirty = False
        """True when the state changed since the last :meth:`mark_saved`."""
        self.roots: frozenset[str] = frozenset()
        """The ids of the wave's root wavelet(s) (the transport sets them from each feed's
        wavelets), for the policy (:meth:`fleet.seams.Policy.route`'s ``root``)."""
        # recorded for `fleet status` (which cannot know what cap was passed), saved with the next
        # change: a start alone writes nothing
        state.cap = cap
        self._routed: list[Routed] = []
        self._held: dict[str, list[Blip]] = {}
        self._held_since: dict[str, float] = {}

    @property
    def cursors(self) -> dict[str, str]:
        """A copy of the per-wavelet (committed) cursors."""
        return dict(self.state.cursors)

    @property
    def feed_cursors(self) -> dict[str, str]:
        """What a feed request sends: the cursors, moved past held blips (the daemon must not hand
        them out again); the same as :attr:`cursors` when nothing is held."""
        cursors = dict(self.state.cursors)
        for wavelet, held in self._held.items():
            cursors[wavelet] = held[-1].id
        return cursors

    @property
    def held(self) -> dict[str, int]:
        """Wavelet id -> blips held back for a later digest (see :meth:`gather`)."""
        return {w: len(held) for w, held in self._held.items()}

    def hold_deadline(self) -> float | None:
        """When the earliest held digest is due (the clock :meth:`gather` is given), or None."""
        return min((t + self.hold for t in self._held_since.values()), default=None)

    def own(self, blip: Blip) -> bool:
        """Stateless echo suppression: the participant's own blips, and the provenance (``system``)
        blips of its own acts (its fork, invite or leave) are stepped over, never pushed."""
        return blip.writer == self.participant or (blip.kind == "system" and blip.actor == self.participant)

    def decide(self, blip: Blip) -> Decision:
        wavelet = blip.wavelet_id
        cursor = self.state.cursors.get(wavelet, "")
        reset = blip.author == OPERATOR
        count = 0 if reset else self.state.delivered.get(wavelet, 0)
        if blip.id <= cursor:
            return Decision(Action.STALE, blip, False, self.state.delivered.get(wavelet, 0))
        if self.own(blip):
            return Decision(Action.ECHO, blip, reset, count)
        if self.cap <= 0 or count < self.cap:
            return Decision(Action.DELIVER, blip, reset, count + 1)
        if wavelet not in self.state.exhausted:
            return Decision(Action.NOTICE, blip, reset, count)
        return Decision(Action.CAPPED, blip, reset, count)

    def commit(self, decision: Decision) -> None:
        if decision.action is Action.STALE:
            return
        state = self.state
        wavelet = decision.blip.wavelet_id
        if decision.reset:
            state.exhausted.pop(wavelet, None)
        if decision.count:
            state.delivered[wavelet] = decision.count
        else:
            state.delivered.pop(wavelet, None)
        if decision.action is Action.NOTICE:
            state.exhausted[wavelet] = decision.blip.id
        state.cursors[wavelet] = decision.blip.id
        self.dirty = True

    def process(self, blips: Iterable[Blip], push: Callable[[Decision], bool]) -> tuple[int, bool]:
        """Decide, push and commit ``blips`` in order. ``push`` is called for DELIVER and NOTICE.

        Stops at the first push returning False, leaving that blip and those after it uncommitted
        (targeted attention: that blip's whole wavelet batch, and the batches after it). No wake for
        nothing: a wavelet's part of the batch whose only blips of others are ``system`` provenance is
        held (see :meth:`_hold_lone_provenance`) until a blip that wakes arrives there.
        Returns (pushes made, whether every blip was handled).
        """
        if self.attention != "full":
            return self.deliver(self.batches(blips), push)
        pushed = 0
        for blip in self._hold_lone_provenance(blips):
            decision = self.decide(blip)
            if decision.pushes:
                if not push(decision):
                    return pushed, False
                pushed += 1
            self.commit(decision)
        return pushed, True

    def _hold_lone_provenance(self, blips: Iterable[Blip]) -> list[Blip]:
        """Full attention: the blips to process now, oldest first; the rest is held.

        Per wavelet, the held blips and the new ones together: when the blips of others among them
        are all ``system`` (a join, a fork, a leave), the whole part is held (nothing committed,
        :attr:`feed_cursors` moves past it) — fleet's provenance alone never wakes a session; it is
        delivered just before the next blip there that does. A part without any blip of others (the
        participant's own) is processed at once: it only moves the cursor.
        """
        by_wavelet: dict[str, list[Blip]] = {}
        for blip in [*(b for held in self._held.values() for b in held), *blips]:
            by_wavelet.setdefault(blip.wavelet_id, []).append(blip)
        now: list[Blip] = []
        still: dict[str, list[Blip]] = {}
        for wavelet, part in by_wavelet.items():
            others = [b for b in part if not self.own(b) and b.id > self.state.cursors.get(wavelet, "")]
            if others and all(b.kind == "system" for b in others):
                still[wavelet] = part
            else:
                now += part
        self._held = still
        return sorted(now, key=lambda b: b.id)

    # ------------------------------------------------------------ targeted attention

    def batches(self, blips: Iterable[Blip]) -> list[Batch]:
        """Group the blips past their cursors by wavelet (in order of first appearance), each routed
        by :func:`route`; stale blips are left out. Pure: nothing is committed."""
        by_wavelet: dict[str, Batch] = {}
        for blip in blips:
            wavelet = blip.wavelet_id
            batch = by_wavelet.get(wavelet)
            last = batch.blips[-1].id if batch and batch.blips else self.state.cursors.get(wavelet, "")
            if blip.id <= last:
                continue
            if batch is None:
                batch = by_wavelet[wavelet] = Batch(wavelet)
            batch.blips.append(blip)
            if not self.own(blip):
                rule = route(blip, self.participant)
                if self.policy is not None:
                    rule = self.policy.route(blip, self.participant, wavelet in self.roots, rule)
                batch.rules[blip.id] = rule
        return list(by_wavelet.values())

    def gather(self, blips: Iterable[Blip], now: float) -> list[Batch]:
        """:meth:`batches` with the digest hold: the batches to deliver now, held blips included.

        A wavelet's held blips join its new ones (in front). A batch whose digested blips are all
        ``system`` provenance (and nothing is full) is held with no deadline: provenance alone never
        wakes. Otherwise the batch is returned when it has a full blip, when ``hold`` is 0, when its
        first held blip waited ``hold`` seconds (``now`` on the caller's monotonic clock), when it
        has :data:`HOLD_MAX_LINES` digested blips, when it has nothing to push (only the
        participant's own blips, or the wavelet is capped); otherwise it is held (nothing
        committed) and :attr:`feed_cursors` moves past it.
        """
        held = [b for blips_ in self._held.values() for b in blips_]
        since = self._held_since
        still: dict[str, list[Blip]] = {}
        still_since: dict[str, float] = {}
        ready: list[Batch] = []
        for batch in self.batches([*held, *blips]):
            wavelet = batch.wavelet_id
            digested = batch.digested
            if digested and not batch.full and all(b.kind == "system" for b in digested):
                still[wavelet] = batch.blips  # provenance alone never wakes: held with no deadline
                continue
            if (
                self.policy is not None
                and self.policy.holds(wavelet in self.roots)
                and digested
                and not batch.full
                and len(digested) < HOLD_MAX_LINES
                and wavelet not in self.state.exhausted
            ):
                still[wavelet] = batch.blips  # the policy's: chatter never wakes the session alone
                continue
            start = since.get(wavelet, now)
            due = (
                self.hold <= 0
                or not digested
                or len(batch.full) > 0
                or len(digested) >= HOLD_MAX_LINES
                or now >= start + self.hold
                or (wavelet in self.state.exhausted and not any(b.author == OPERATOR for b in batch.blips))
            )
            if due:
                ready.append(batch)
            else:
                still[wavelet] = batch.blips
                still_since[wavelet] = start
        # swapped in whole: a status reader (holding the transport's lock) never sees them half-built
        self._held, self._held_since = still, still_since
        return ready

    def frames(self, batch: Batch) -> list[Decision]:
        """The batch's frames, in push order: each full blip, then one digest of the rest.

        Pure. Each frame counts once toward the cap; an operator's blip anywhere in the batch
        starts the count over for the whole batch (and is itself always a full frame).
        """
        wavelet = batch.wavelet_id
        reset = any(b.author == OPERATOR for b in batch.blips)
        count = 0 if reset else self.state.delivered.get(wavelet, 0)
        noticed = not reset and wavelet in self.state.exhausted
        units: list[tuple[Blip, tuple[Blip, ...], Rule | None]] = [
            (b, (), batch.rules[b.id]) for b in batch.full
        ]
        digested = tuple(batch.digested)
        if digested:
            units.append((digested[-1], digested, None))
        out: list[Decision] = []
        for blip, digest, rule in units:
            if self.cap <= 0 or count < self.cap:
                count += 1
                action = Action.DELIVER
            elif not noticed:
                noticed = True
                action = Action.NOTICE
            else:
                action = Action.CAPPED
            out.append(Decision(action, blip, reset, count, digest=digest, rule=rule))
        return out

    def deliver(self, batches: Iterable[Batch], push: Callable[[Decision], bool]) -> tuple[int, bool]:
        """Push each batch's frames (DELIVER and NOTICE) and commit the batch once all succeeded.

        Stops at the first push returning False: that batch and the ones after it stay uncommitted,
        to be handed out again whole. Returns (pushes in committed batches, whether all committed).
        """
        pushed = 0
        for batch in batches:
            frames = self.frames(batch)
            made = 0
            for frame in frames:
                if frame.pushes:
                    if not push(frame):
                        return pushed, False
                    made += 1
            self._commit_batch(batch, frames)
            pushed += made
        return pushed, True

    def _commit_batch(self, batch: Batch, frames: list[Decision]) -> None:
        if not batch.blips:
            return
        state = self.state
        wavelet = batch.wavelet_id
        reset = any(b.author == OPERATOR for b in batch.blips)
        if reset:
            state.exhausted.pop(wavelet, None)
        start = 0 if reset else state.delivered.get(wavelet, 0)
        count = frames[-1].count if frames else start  # no frames: only the participant's own blips
        if count:
            state.delivered[wavelet] = count
        else:
            state.delivered.pop(wavelet, None)
        for frame in frames:
            if frame.action is Action.NOTICE:
                state.exhausted[wavelet] = frame.blip.id
            for blip in frame.blips:
                self._routed.append(Routed(blip, batch.rules[blip.id], frame.action))
        state.cursors[wavelet] = batch.blips[-1].id
        self.dirty = True

    def take_routed(self) -> list[Routed]:
        """The routing decisions committed since the last call, in commit order (then forgotten)."""
        routed, self._routed = self._routed, []
        return routed

    def retain(self, wavelet_ids: Iterable[str]) -> None:
        """Forget wavelets the participant is no longer on, so a later rejoin starts at its join."""
        keep = set(wavelet_ids)
        for wavelet in [w for w in self._held if w not in keep]:
            del self._held[wavelet]
            self._held_since.pop(wavelet, None)
        for table in (self.state.cursors, self.state.delivered, self.state.exhausted):
            for wavelet in [w for w in table if w not in keep]:
                del table[wavelet]
                self.dirty = True

    def mark_saved(self) -> None:
        self.dirty = False
