"""The records of every shape that crosses a boundary: HTTP bodies, responses, files on disk.

The daemon renders these, the client loads them, the CLI and the channel consume them; nothing
passes a ``dict[str, Any]`` between layers. Field names are the wire names (``with_`` travels as
``with``, ``as_`` as ``as``). They are :mod:`fleet.wire` records (msgspec Structs: they sit on the
start-up path of every ``fleet`` command and channel process; see that module for why), and the
event log and the rows use the same ones (:mod:`fleet.store.events`, :mod:`fleet.store.rows`).
Requests (client → daemon) refuse unknown fields; responses ignore fields a newer daemon may add.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fleet.records.budgets import Budget
from fleet.wire import Meta, Record, dump, field

PARTICIPANT_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}\Z")
"""Participant names (docs/design.md §1). ``operator`` is the reserved human."""

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}\Z")
"""Wave and wavelet names: no ``/`` (it separates WAVE/WAVELET), no upper case, no spaces."""

OPERATOR = "operator"
ROOT_WAVELET = "main"
DEFAULT_MAX_BLIP_BYTES = 256 * 1024
MAX_TOPIC = 200
"""Characters (code points) of a wavelet's topic at most: one line a tree or a header shows."""

BlipKind = Literal["message", "system", "surface"]
ParticipantKind = Literal["agent", "human"]
PresenceState = Literal["live", "gone"]
"""Whether the participant's channel is heard (a ping within the daemon's ``ping_ttl``): what the
agent *does* is :class:`AgentState`, never guessed from this."""
AgentKind = Literal["starting", "idle", "turning", "permission", "dialog", "failed", "dead", "unknown"]
"""What an agent session is doing (:mod:`fleet.agentstate`); ``unknown`` says why in ``why``."""
Transport = Literal["auto", "channel", "hook"]


def jsonable(obj: Any) -> Any:
    """``obj`` with every record (also inside dicts, lists and tuples) as its wire JSON shape."""
    return dump(obj)


# ---------------------------------------------------------------- records (daemon -> client)


class Joining(Record, kw_only=True):
    """A participant joining a roster: what the roster events carry and a :class:`Member` starts with."""

    name: str
    kind: ParticipantKind = "agent"
    since: str = ""
    """Blip id just before this member joined ('' = the wavelet's start): delivery starts after it."""


class Member(Joining, kw_only=True):
    joined_at: str


class Wavelet(Record, kw_only=True):
    id: str
    wave_id: str
    wave: str
    name: str
    parent_id: str | None
    """The parent's id: None for the wave's root, and withheld (None) from a reader who cannot see
    the parent (a private wavelet it is not on: then ``parent_withheld``)."""
    fork_blip_id: str | None = None
    """The last parent blip visible in this fork's context (None: the parent was empty, or it is
    withheld with ``parent_id``)."""
    private: bool
    created_by: str
    created_at: str
    roster: list[Member] = field(default_factory=list)
    parent_withheld: bool = False
    """This wavelet has a parent the reader may not be told of (a private wavelet it is not on):
    ``parent_id`` and ``fork_blip_id`` are None though it is not the root. It is shown as a top of
    the reader's tree, under a private wavelet."""
    topic: str = ""
    """Its one-line topic ('' for none): set by a member or the operator (``fleet wavelet topic``),
    at most :data:`MAX_TOPIC` characters, never a newline or control character."""

    @property
    def path(self) -> str:
        return f"{self.wave}/{self.name}"


class Wave(Record, kw_only=True):
    id: str
    name: str
    created_at: str
    root_id: str
    wavelets: list[Wavelet] = field(default_factory=list)


class Blip(Record, kw_only=True):
    """One version of a blip: what reads answer with and what the ``blip.*`` events carry.

    The fields are in the order the event log has always written them; an event's payload leaves
    out the unset optional ones and never holds ``superseded_by`` (:func:`fleet.store.events.payload_of`)."""

    id: str
    wavelet_id: str
    wave_id: str
    author: str
    kind: BlipKind
    text: str
    created_at: str
    replaces: str | None = None
    source_wavelet_id: str | None = None
    """A surface's source wavelet, a provenance blip's other wavelet; None where there is none, and
    withheld (None) from a reader who cannot see it (a private wavelet it is not on)."""
    source_blip_id: str | None = None
    """The blip in ``source_wavelet_id`` it refers to (withheld with it)."""
    actor: str | None = None
    """On a ``system`` blip: the participant whose act (fork, invite, leave) it records, if any."""
    replaced_by: str | None = None
    """On a replacement version: who wrote it. ``author`` stays the blip's original author (who,
    with the operator, may replace it again). Absent in events written before replaces kept the
    author: their ``author`` is the replacer."""
    superseded_by: str | None = None
    """Set on reads that include history: the id of the blip that replaced this one (a column of
    the ``blips`` table, never in an event)."""

    @property
    def writer(self) -> str:
        """Who wrote this version: the replacer of a replacement, else the author."""
        return self.replaced_by or self.author


class BlipPage(Record, kw_only=True):
    blips: list[Blip]
    cursor: str
    """The greatest id the reader has now seen (pass it back as ``after``); unchanged if none."""


SummaryAuthorKind = Literal["participant", "summarizer", "extractive"]


class Summary(Record, kw_only=True):
    """A rolling summary: it stands in for its wavelet's blips up to ``upto`` (inclusive) in a context.

    Recorded only if ``cites`` names every id in ``load_bearing`` (surfaces, ``DONE:`` blips, pinned
    blips, blips naming a participant, in its range when it was written)."""

    id: str
    wavelet_id: str
    after: str
    """The ``upto`` of the summary it rolled forward from ('' for the wavelet's first)."""
    upto: str
    text: str
    author: str
    """The participant, the summarizer command's name, or ``fleet`` (the extractive default)."""
    author_kind: SummaryAuthorKind
    cites: list[str]
    load_bearing: list[str]
    covered_blips: int
    covered_bytes: int
    """UTF-8 bytes of the blip texts it stands in for."""
    created_at: str


class Context(Record, kw_only=True):
    """What a participant sees when it reads a wavelet: for each ancestor, its latest summary up to
    the fork point and the blips after it up to the fork point; then this wavelet's own latest
    summary and live tail. One page of it: the newest ``limit`` blips older than ``before``."""

    wavelet: Wavelet
    path: list[Wavelet]
    """Root first, this wavelet last: the ancestors the reader can see (a withheld one is left out,
    and the next one's ``parent_withheld`` says so)."""
    blips: list[Blip]
    """This page's blips, oldest first (ids ascend across the whole context)."""
    summaries: list[Summary] = field(default_factory=list)
    """The summaries standing in for covered ranges on this page, root first (by ``upto``); their
    ``load_bearing`` is left empty here (``GET …/summaries`` carries it)."""
    bytes: int = 0
    """UTF-8 bytes of the texts of the whole assembled context (every page: blips and summaries)."""
    full_bytes: int = 0
    """UTF-8 bytes the full walk (every blip, no summary) would be."""
    saved_bytes: int = 0
    """``full_bytes - bytes``: what the summaries saved."""
    more: bool = False
    """Older entries remain: ask again with ``before=cursor``."""
    cursor: str = ""
    """The oldest position on this page (a blip id or a summary's ``upto``); '' on an empty page."""


class SummaryList(Record, kw_only=True):
    summaries: list[Summary]


class SummaryVerdict(Record, kw_only=True):
    """The answer to a summary: recorded, or rejected with the load-bearing ids it failed to cite."""

    accepted: bool
    summary: Summary | None = None
    missing: list[str] = field(default_factory=list)
    """Load-bearing blip ids in its range it does not cite (a rejection)."""
    reason: str = ""


class SummaryCheck(Record, kw_only=True):
    """``GET …/summaries/check``: the wavelet's latest summary against its range's load-bearing blips
    now (pins may have been added since), and what is not yet summarized."""

    wavelet_id: str
    summary: Summary | None = None
    load_bearing: list[str] = field(default_factory=list)
    """Load-bearing ids up to the summary's ``upto`` (every id, pinned after it was written too)."""
    missing: list[str] = field(default_factory=list)
    """Of those, the ones the summary does not cite (they are shown in full in a context)."""
    pending_blips: int = 0
    """Current blips after the latest summary (the live tail)."""
    pending_bytes: int = 0


class SummaryInput(Record, kw_only=True):
    """What a summary writer is given: the previous summary and the blips after it (oldest first),
    with the ids a new summary must cite."""

    wavelet_id: str
    previous: Summary | None = None
    blips: list[Blip] = field(default_factory=list)
    load_bearing: list[str] = field(default_factory=list)
    more: bool = False
    """More blips remain after these (a writer covers these; the next run covers the rest)."""


class FeedWavelet(Record, kw_only=True):
    id: str
    name: str
    wave: str
    private: bool
    since: str
    """Where delivery starts for this member when the client has no cursor for it."""
    root: bool = False
    """The wave's root wavelet (it has no parent): the resident hears all of it."""


class Feed(Record, kw_only=True):
    """One long-poll across every wavelet on a participant's roster (the channel's delivery input)."""

    wavelets: list[FeedWavelet]
    """The participant's current memberships in the wave (a left wavelet is absent)."""
    blips: list[Blip]
    """Blips with id > the caller's cursor for their wavelet, oldest first, per wavelet at most ``limit``."""
    more: bool = False
    budgets: list[Budget] | None = None
    """The budgets that apply to the participant, read with the answer (the channel's budget check
    needs no request of its own per delivery); None from a daemon that does not send them."""


class PresenceRow(Record, kw_only=True):
    wave_id: str
    participant: str
    state: PresenceState
    session_id: str | None = None
    host: str | None = None
    last_ping: float | None = None
    last_delivery: float | None = None
    last_post: float | None = None
    delivered: int = 0
    launch: str | None = None
    """The launch of the channel that reported last (:class:`PresenceReport`)."""
    agent: AgentState | None = None
    """What the session does, as its channel last reported it (:mod:`fleet.agentstate`); while the
    channel is not heard, ``unknown`` with why. None only from a daemon older than agent states."""


class Activity(Record, kw_only=True):
    """What one participant wrote in one wavelet (system blips are not counted)."""

    wavelet_id: str
    participant: str
    blips: int
    """Blips it authored there, replaced versions included."""
    last_blip_id: str
    last_blip_at: str


class WaveActivity(Record, kw_only=True):
    """``GET /v1/waves/{wave}/activity``: who wrote where, and the wave's newest blip."""

    wave_id: str
    head: str
    """The greatest blip id in the wave ('' if none): ``after=`` for the wave's blip stream to start now."""
    activity: list[Activity] = field(default_factory=list)


class SessionRecord(Record, kw_only=True):
    """The agent session a participant runs in a wave: what ``fleet respawn`` needs on any machine."""

    participant: str
    session_id: str
    """The Claude Code session id assigned before launch (``--session-id``, later ``--resume``)."""
    wavelet_id: str
    """The wavelet whose window the pane lives in."""
    layout: str = ""
    agent: str = ""
    """The agent command (no secrets), as the layout or ``--agent`` gave it."""
    transport: Transport = "channel"
    cwd: str = ""
    host: str = ""
    wave_id: str = ""
    updated_at: str = ""


class TokenInfo(Record, kw_only=True):
    id: str
    wave_id: str
    wave: str
    participant: str
    """The participant it speaks as; ``operator`` for a machine token."""
    created_at: str
    revoked_at: str | None = None
    machine: str | None = None
    """The machine it was minted for (``fleet remote mint``), if any."""
    waves: list[str] | None = None
    """A machine token: the waves (names) it has the operator's powers in. None for a participant's."""


class MintedToken(TokenInfo, kw_only=True):
    token: str
    """The secret, shown once. The daemon keeps only its hash."""


class Whoami(Record, kw_only=True):
    principal: str
    """``operator`` or the participant name."""
    wave_id: str | None = None
    wave: str | None = None
    daemon_version: str
    machine: str | None = None
    """The machine the token was minted for (a join), if any."""
    waves: list[str] | None = None
    """A machine token: the waves it acts in as the operator. None: every wave (the operator token)
    or the participant's one wave."""
    can_mint: bool = False
    """Whether this token may mint participant tokens (what ``fleet spawn`` needs)."""


class Health(Record, kw_only=True):
    ok: bool
    version: str
    pid: int
    store_id: str = ""
    """The store's identity (minted once per database): what delivery state is keyed by."""
    parked: int = 0
    """Long-polls and event streams parked on the notifier now (benchmarks, tests)."""


class ErrorBody(Record, kw_only=True):
    kind: str
    message: str


# ---------------------------------------------------------------- response envelopes (daemon and client)


class WaveList(Record, kw_only=True):
    waves: list[Wave]


class BlipList(Record, kw_only=True):
    blips: list[Blip]


class PresenceList(Record, kw_only=True):
    presence: list[PresenceRow]


class TokenList(Record, kw_only=True):
    tokens: list[TokenInfo]


class SessionList(Record, kw_only=True):
    sessions: list[SessionRecord]


class Revoked(Record, kw_only=True):
    revoked: list[TokenInfo]


class Ok(Record, kw_only=True):
    ok: bool = True


class ErrorEnvelope(Record, kw_only=True):
    """Every error answer: ``{"error": {"kind", "message"}}`` (``kind`` names a :mod:`fleet.errors` class)."""

    error: ErrorBody


# ---------------------------------------------------------------- requests (client -> daemon)

# Bounds on every string and list a client can set (docs/http-api.md, "Bounds"): a request over
# one is refused (400, naming the field and its limit) before anything is stored or broadcast.
MAX_NAME = 200
"""Wave, wavelet, participant and machine names: their patterns (64 or 32 characters) are checked
afterwards, with a message saying what a name may be; this bound keeps a huge one out of it."""
MAX_REF = 200
"""What names a wave, wavelet or blip: a name, ``WAVE/WAVELET``, an id or an id prefix."""
MAX_SESSION_ID = 128
MAX_HOST = 255
"""A host name (DNS allows 253)."""
MAX_PATH = 4096
"""A working directory, a layout file or an agent command line (PATH_MAX)."""
MAX_NOTE = 2000
"""Free text that is not a blip: why a seat was closed."""
MAX_ITEMS = 1000
"""A list or map in a request: names to add, waves of a machine token, cursors of a feed."""


class NewWave(Record, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, Meta(max_length=MAX_NAME)]
    with_: Annotated[list[str], Meta(max_length=MAX_ITEMS)] = field(default_factory=list, name="with")


class NewFork(Record, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, Meta(max_length=MAX_NAME)]
    with_: Annotated[list[str], Meta(max_length=MAX_ITEMS)] = field(default_factory=list, name="with")
    private: bool = False
    as_: Annotated[str, Meta(max_length=MAX_NAME)] | None = field(default=None, name="as")


class RosterChange(Record, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, Meta(max_length=MAX_NAME)]
    kind: ParticipantKind = "agent"
    as_: Annotated[str, Meta(max_length=MAX_NAME)] | None = field(default=None, name="as")


class NewTopic(Record, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/wavelets/{wavelet}/topic``: the wavelet's new topic ('' removes it); the rules are
    the store's (:func:`fleet.store.checks.topic`)."""

    topic: str
    as_: Annotated[str, Meta(max_length=MAX_NAME)] | None = field(default=None, name="as")


class NewBlip(Record, kw_only=True, forbid_unknown_fields=True):
    text: str
    as_: Annotated[str, Meta(max_length=MAX_NAME)] | None = field(default=None, name="as")


class NewSummary(Record, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/wavelets/{wavelet}/summaries``: a summary of the wavelet's blips up to ``upto``."""

    text: str
    upto: str
    cites: list[str] = field(default_factory=list)
    author_kind: SummaryAuthorKind = "participant"
    author: str | None = None
    """Operator only: who wrote it (a summarizer's name, ``fleet``); a participant writes as itself."""
    as_: str | None = field(default=None, name="as")


class NewPin(Record, kw_only=True, forbid_unknown_fields=True):
    as_: str | None = field(default=None, name="as")


class NewSystemBlip(Record, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/wavelets/{wavelet}/system`` (operator only): a ``system`` blip, authored ``system``."""

    text: str


class NewSurface(Record, kw_only=True, forbid_unknown_fields=True):
    text: str
    source_blip_id: Annotated[str, Meta(max_length=MAX_REF)] | None = None
    as_: Annotated[str, Meta(max_length=MAX_NAME)] | None = field(default=None, name="as")


class FeedRequest(Record, kw_only=True, forbid_unknown_fields=True):
    participant: Annotated[str, Meta(max_length=MAX_NAME)]
    cursors: Annotated[dict[str, str], Meta(max_length=MAX_ITEMS)] = field(default_factory=dict)
    """wavelet id -> last delivered blip id. Missing wavelets start at the member's ``since``."""
    wait: float = 0.0
    limit: int = 200


MAX_LINES = 20
"""Lines of a dead pane's screen an agent state carries."""


class AgentState(Record, kw_only=True, forbid_unknown_fields=True):
    """One agent session's state (:mod:`fleet.agentstate` folds it; docs/design.md §2). Only the
    fields of its ``kind`` are set; ``since`` is Unix time by the clock of whoever saw it begin
    (the session's transcript stamps, a hook's arrival, the daemon for a channel gone), None when
    not known."""

    kind: AgentKind
    since: float | None = None
    woken_by: Annotated[list[str], Meta(max_length=MAX_ITEMS)] = field(default_factory=list)
    """``turning``: the blip ids whose delivery opened the turn, and those that entered it since
    (empty: typed, or not fleet's)."""
    wavelets: Annotated[list[str], Meta(max_length=MAX_ITEMS)] = field(default_factory=list)
    """``turning``: the wavelets (``WAVE/WAVELET``) of those blips: a turn is *for* them."""
    tool: Annotated[str, Meta(max_length=MAX_NAME)] = ""
    """``turning``: the tool running now ('' between tools); ``permission``: the tool asked for."""
    input: Annotated[str, Meta(max_length=MAX_NOTE)] = ""
    """``permission``: a preview of the tool's input."""
    dialog: Annotated[str, Meta(max_length=MAX_NOTE)] = ""
    """``dialog``: its first line."""
    error: Annotated[str, Meta(max_length=MAX_NOTE)] = ""
    """``failed``: the API error that ended the turn."""
    exit: Annotated[str, Meta(max_length=MAX_NAME)] = ""
    """``dead``: ``status N``, ``signal N`` or ``unknown``."""
    lines: Annotated[list[str], Meta(max_length=MAX_LINES)] = field(default_factory=list)
    """``dead``: the pane's last lines."""
    why: Annotated[str, Meta(max_length=MAX_NOTE)] = ""
    """``unknown``: why fleet cannot see (no transcript access, channel gone, too old a Claude Code)."""


class PresenceReport(Record, kw_only=True, forbid_unknown_fields=True):
    participant: Annotated[str, Meta(max_length=MAX_NAME)]
    event: Literal["ping", "delivered", "gone"]
    count: int = 0
    session_id: Annotated[str, Meta(max_length=MAX_SESSION_ID)] | None = None
    host: Annotated[str, Meta(max_length=MAX_HOST)] | None = None
    launch: Annotated[str, Meta(max_length=MAX_SESSION_ID)] | None = None
    """The launch this channel belongs to (``FLEET_LAUNCH``, set by spawn per launch): a respawn is
    ready only when its own channel speaks, not the one it replaces (same session id)."""
    agent: AgentState | None = None
    """What the session does now, folded by the channel from the session's own record (None: a
    channel older than agent states, shown as ``unknown``)."""


class NewSession(Record, kw_only=True, forbid_unknown_fields=True):
    participant: Annotated[str, Meta(max_length=MAX_NAME)]
    session_id: Annotated[str, Meta(max_length=MAX_SESSION_ID)]
    wavelet_id: Annotated[str, Meta(max_length=MAX_REF)]
    layout: Annotated[str, Meta(max_length=MAX_PATH)] = ""
    agent: Annotated[str, Meta(max_length=MAX_PATH)] = ""
    transport: Transport = "channel"
    cwd: Annotated[str, Meta(max_length=MAX_PATH)] = ""
    host: Annotated[str, Meta(max_length=MAX_HOST)] = ""


class SeatClaim(Record, kw_only=True):
    """A resident's claim of its wave's seat: what the ``seat.claimed`` event carries and a
    :class:`Seat` starts with."""

    wave_id: str
    participant: str
    session_id: str
    """The resident's Claude Code session (``--resume`` brings the same mind back)."""
    host: str
    pid: int
    """The resident's process on ``host`` (its pane's process: Claude Code itself)."""
    pane_id: str = ""
    cwd: str = ""
    """The wave's worktree, ``<repo>.<wave>``."""
    claimed_at: str = ""


class Seat(SeatClaim, kw_only=True):
    """The seat of a wave's resident (docs/resident.md): one mind per wave, recorded in the store.

    Open while ``closed_at`` is None; the newest seat per wave is kept, closed ones included."""

    closed_at: str | None = None
    closed_why: str = ""


class NewSeat(Record, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/waves/{wave}/seat``: claim the wave's seat (operator only).

    An open seat of another session is refused unless ``force``; one of the same session is
    refreshed (a revived mind: new pid, same session)."""

    participant: Annotated[str, Meta(max_length=MAX_NAME)]
    session_id: Annotated[str, Meta(max_length=MAX_SESSION_ID)]
    host: Annotated[str, Meta(max_length=MAX_HOST)]
    pid: Annotated[int, Meta(ge=0)]
    pane_id: Annotated[str, Meta(max_length=MAX_NAME)] = ""
    cwd: Annotated[str, Meta(max_length=MAX_PATH)] = ""
    force: bool = False


class CloseSeat(Record, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/waves/{wave}/seat/close``: close the open seat (operator only); ``session_id``
    set: only if the open seat is that session's."""

    why: Annotated[str, Meta(max_length=MAX_NOTE)]
    session_id: Annotated[str, Meta(max_length=MAX_SESSION_ID)] | None = None


class SeatAnswer(Record, kw_only=True):
    seat: Seat | None = None


class SupervisorClaim(Record, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/waves/{wave}/supervisor``: claim or renew the wave's supervisor lease (operator
    only; docs/resident.md). Held by another ``holder`` and not lapsed: 409 naming it, unless
    ``force`` takes it over."""

    holder: Annotated[str, Meta(min_length=1, max_length=MAX_SESSION_ID)]
    """An id the supervising process minted for itself; its renewals name the same."""
    pid: Annotated[int, Meta(ge=0)]
    host: Annotated[str, Meta(max_length=MAX_HOST)]
    ttl: Annotated[float, Meta(ge=1, le=3600)] = 30.0
    """Seconds the lease lasts without a renewal."""
    force: bool = False


class SupervisorRelease(Record, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/waves/{wave}/supervisor/release``: give the lease up, if ``holder`` holds it."""

    holder: Annotated[str, Meta(min_length=1, max_length=MAX_SESSION_ID)]


class SupervisorLease(Record, kw_only=True):
    """Who supervises a wave now: the lease a ``fleet supervise`` holds and renews. Kept in the
    daemon's memory (like presence): a restarted daemon knows none until the holder renews."""

    wave_id: str
    holder: str
    pid: int
    host: str
    held_for: float
    """Seconds since this holder claimed it."""
    renewed_ago: float
    """Seconds since its last renewal (the daemon's clock: no clocks compared across machines)."""
    expires_in: float
    took_over: str = ""
    """On a forced claim's answer: ``pid N on HOST`` of the holder it displaced ('' otherwise)."""


class SupervisorAnswer(Record, kw_only=True):
    lease: SupervisorLease | None = None
    """None: no supervisor holds the wave (none claimed it, it was released, or it lapsed)."""


MemoryOp = Literal["update", "add"]


class MemoryWrite(Record, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/waves/{wave}/memory`` (the operator or the seated resident): ``update`` replaces
    the wave's MEMORY.md with ``content``, ``add`` appends it as a new paragraph; ``summary`` (None:
    its first non-empty line) is what the blip recording the write says."""

    op: MemoryOp
    content: str
    summary: str | None = None
    as_: str | None = field(default=None, name="as")
    """The operator writing for the seated resident (``fleet memory`` run in the resident's own
    session): recorded as the resident's write."""


class MemoryAnswer(Record, kw_only=True):
    """The wave's MEMORY.md (``GET``/``POST /v1/waves/{wave}/memory``) after a read or a write."""

    wave: str
    path: str
    content: str
    summary: str = ""
    blip_id: str = ""
    """The blip that recorded the write ('' for a read)."""


class MintRequest(Record, kw_only=True, forbid_unknown_fields=True):
    wave: Annotated[str, Meta(max_length=MAX_REF)]
    participant: Annotated[str, Meta(max_length=MAX_NAME)]
    machine: Annotated[str, Meta(max_length=MAX_NAME)] | None = None
    """Mint it for this machine (a participant's join): listed and revoked with the machine's."""


class NewMachine(Record, kw_only=True, forbid_unknown_fields=True):
    """A machine token: the operator's powers in ``waves`` (names or ids) for the machine ``name``."""

    name: Annotated[str, Meta(max_length=MAX_NAME)]
    waves: Annotated[list[str], Meta(max_length=MAX_ITEMS)]


class RevokeRequest(Record, kw_only=True, forbid_unknown_fields=True):
    token_id: Annotated[str, Meta(max_length=MAX_REF)] | None = None
    wave: Annotated[str, Meta(max_length=MAX_REF)] | None = None
    participant: Annotated[str, Meta(max_length=MAX_NAME)] | None = None
    machine: Annotated[str, Meta(max_length=MAX_NAME)] | None = None
    """Every live token of this machine: its machine token and those minted for or by it."""


# ---------------------------------------------------------------- files on disk


JOIN_PREFIX = "fleet-join1:"
"""How a join string starts; the rest is the :class:`JoinTicket` as base64url JSON (no padding)."""


class JoinTicket(Record, kw_only=True):
    """What ``fleet remote mint`` prints, encoded as one line, for ``fleet remote join`` elsewhere."""

    url: str
    """The daemon, pinned: ``https://HOST:PORT#sha256=<certificate fingerprint>``; or several daemons
    on one store, comma-separated, each pinned (a client fails over between them in this order)."""
    token: str
    machine: str
    """The machine it was minted for: the default name it is stored under."""
    waves: list[str] = field(default_factory=list)
    """A machine token's waves (names); a participant's one wave."""
    participant: str | None = None
    """Set for a participant token (it speaks as this participant); None for a machine token."""


class Remote(Record, kw_only=True):
    """One joined daemon, stored 0600 as ``data/remotes/NAME.json``: ``FLEET_DAEMON=NAME`` uses it."""

    name: str
    url: str
    """The daemon, pinned; or several daemons on one store, comma-separated, each pinned (clients
    fail over between them in this order: :func:`fleet.client.transport.parse_daemons`)."""
    token: str
    machine: str
    waves: list[str] = field(default_factory=list)
    participant: str | None = None
    joined_at: float = 0.0


class StopProgress(Record, kw_only=True):
    """``state/daemon.stopping``: how far a graceful stop has got (``fleet daemon stop`` waits while
    it moves). Rewritten at each phase and each time a request in flight finishes."""

    pid: int
    phase: str
    """What the daemon is doing: ``closing streams``, ``finishing requests``, ``closing the store``."""
    inflight: int = 0
    bound: float = 0.0
    """The longest this phase can take (seconds): the daemon's own bound on it."""
    at: float = 0.0


class Endpoint(Record, kw_only=True):
    """``state/daemon.json``: where the local daemon listens."""

    url: str
    pid: int
    started_at: float
    version: str
    fingerprint: str | None = None
    """The SHA-256 fingerprint of its TLS certificate when it serves HTTPS (clients pin it)."""
    store_id: str = ""
    peers: list[str] = field(default_factory=list)
    """Other daemons serving the same store (pinned URLs), tried in this order after this one when it
    stops answering (:func:`fleet.client.endpoint_daemons`). Empty: this daemon alone (SQLite)."""


# ---------------------------------------------------------------- the event log (fleet export)


class LogRow(Record, kw_only=True):
    """One row of the event log as ``GET /v1/events`` pages it: ``payload`` is the stored JSON text,
    verbatim (``type`` is not in it)."""

    seq: int
    type: str
    payload: str
    created_at: str


class EventPage(Record, kw_only=True):
    """``GET /v1/events?after=SEQ&limit=N[&wave=W]`` (full operator only): log rows after ``after``
    (of wave ``W`` only, when named); ``cursor`` is the last seq scanned, ``more`` whether rows follow."""

    store_id: str
    wave_id: str | None = None
    events: list[LogRow] = field(default_factory=list)
    cursor: int = 0
    more: bool = False
