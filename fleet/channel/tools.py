"""The channel's ten tools and its instructions: what a session can do in its wave.

Each tool has an input schema, an output schema, ``structuredContent`` and a text rendering:
``wavelet_post``, ``wavelet_read``, ``wavelet_summarize``, ``wavelet_pin``, ``wavelet_list``,
``wavelet_fork``, ``wavelet_surface``, ``wavelet_invite``, ``wavelet_leave``, ``wavelet_ping``.
Wavelets are named as ``WAVE/WAVELET``, a wavelet name in the channel's wave, or an id (prefix).
Every failure (bad arguments, unknown wavelet, oversized text, revoked token, daemon down) is an
``isError`` result whose text says what to do. The arguments and results are :mod:`fleet.wire`
records; their JSON Schemas are derived from them (:func:`fleet.wire.schema`) and shipped beside
this module in ``schemas.json`` (deriving them took a channel ~12 ms at every start): a file whose
fingerprint (this module's and fleet.wire's source, msgspec's version) is not current's is ignored
and the schemas derived again, so a stale file costs time, never a wrong schema. After changing a
tool's records: ``python -c "from fleet.channel.tools import write_schemas; write_schemas()"``
(tests/unit/test_channel_schemas.py says so when the file is behind).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from fleet import errors
from fleet.agentstate import describe
from fleet.client import Client
from fleet.delivery.frames import blip_block
from fleet.delivery.rules import Attention, policy_of
from fleet.ids import digest, request_key
from fleet.mcpwire import Tool, ToolResult
from fleet.models import OPERATOR, Blip, Context, NewSummary, Summary, Wavelet
from fleet.seams import first, fork_spawners
from fleet.wire import Meta, Record, RecordError, field, load, schema

if TYPE_CHECKING:  # loaded under targeted attention only
    from fleet.delivery.attention import RoutingLog
    from fleet.delivery.state import StateFile

READ_LIMIT_DEFAULT, READ_LIMIT_MAX = 100, 2000
TOOL_PATIENCE = 20.0
"""Seconds a tool call keeps resending while the daemon is away (each write under its one request
key, so it lands once): a daemon that restarts within them is invisible to the agent."""
UNSETTLED_FOR, UNSETTLED_MAX = 3600.0, 256
"""How long (and how many) message writes given up on keep their request key for the agent's retry
(well inside the daemon's 24-hour key window)."""


def instructions(participant: str, wave: str, attention: Attention = "full") -> str:
    """The ``initialize`` instructions: identity first, then how delivery works, then the contract.

    Targeted attention adds one paragraph on digests; full attention's text is unchanged.
    """
    return f"""You are {participant}.

You are the participant "{participant}" in the fleet wave "{wave}". Every blip authored by {participant} in \
this wave is yours, including those written before this session started or before it was resumed: \
carry on from them as your own work, never answer them as if someone else wrote them.

Other participants' blips reach you as <channel source="fleet" ...> messages whose attributes are \
wavelet (WAVE/WAVELET), wavelet_id, blip_id, author and kind. kind is "message" (a participant wrote \
it), "system" (fleet records a fork, join or leave), "surface" (a conclusion reported up from a \
sub-wavelet), "cap" (a notice that delivery paused in that wavelet) or "budget" (a notice that \
your budget is spent and delivery to you paused). Your own blips are never \
delivered back to you. fleet's own records (system blips) never wake you on their own: they come \
along with the next blip that does (or read them with wavelet_read).
{_attention_paragraph(participant, attention)}
Tools: wavelet_post replies in a wavelet (pass the wavelet attribute of the blip you answer). \
wavelet_read shows a wavelet with its ancestors' context up to the fork point. wavelet_list shows the \
wave's wavelets and rosters. wavelet_fork starts a sub-conversation with chosen participants (private \
if asked). wavelet_surface reports a sub-wavelet's conclusion to its parent. wavelet_invite and \
wavelet_leave change a roster. wavelet_ping checks the connection and who is working. \
wavelet_summarize rolls a long wavelet's summary forward (it must cite every load-bearing blip it \
covers); wavelet_pin marks a blip every summary must cite.

Rules:
1. Never post merely to acknowledge, agree or thank. Post only to add information, a decision, a \
question or a result.
2. Finish a task with one blip that starts with "DONE:" and states the result, then stay silent until \
someone gives you something new.
3. Never reply to system or surface blips, nor to cap or budget notices: they are records, not requests.
4. When you need someone's attention, name them in the blip (for example "bob: please check ...").
5. Input typed into your terminal is the operator controlling you: answer it locally in the terminal \
and do not post about it, unless the operator asks you to relay something; then post it as one blip \
prefixed "operator asks:".
"""


def _attention_paragraph(participant: str, attention: Attention) -> str:
    if attention == "targeted":
        return _targeted_paragraph(participant)
    policy = policy_of(attention)
    return "" if policy is None else policy.instructions(participant)


def _targeted_paragraph(participant: str) -> str:
    return f"""
Your attention is targeted: a blip reaches you in full only when it names you ("{participant}" or \
[[{participant}]]), comes from the operator, or is a surface. Everything else in a wavelet arrives \
as one message of kind "digest": one line per blip with its author, the start of its text and its \
id in brackets (the ids are also in the blip_ids attribute). A digest is not a request. Read a \
digested blip in full with wavelet_read (wavelet and blip_id) only when it bears on your task.
"""


# ---------------------------------------------------------------- tool arguments

_WAVELET = "The wavelet: WAVE/WAVELET, a wavelet name in this wave (e.g. main), or a wavelet id."


class PostArgs(Record, kw_only=True, forbid_unknown_fields=True):
    wavelet: Annotated[str, Meta(min_length=1, description=_WAVELET)]
    text: Annotated[str, Meta(min_length=1, description="The blip's text (markdown is fine).")]


_READ_ARGS_AFTER = (
    "Only this wavelet's blips newer than this blip id (no ancestor context). Default: the full context."
)
_READ_ARGS_LIMIT = "At most this many blips, the newest ones."
_READ_ARGS_BLIP_ID = (
    "Only this blip, in full (for example an id from a digest line); after and limit are then ignored."
)
_READ_ARGS_BEFORE = (
    "The context's older entries: those before this position (the `before` of a previous read)."
)


class ReadArgs(Record, kw_only=True, forbid_unknown_fields=True):
    wavelet: Annotated[str, Meta(min_length=1, description=_WAVELET)]
    after: Annotated[str, Meta(description=_READ_ARGS_AFTER)] = ""
    limit: Annotated[int, Meta(ge=1, le=READ_LIMIT_MAX, description=_READ_ARGS_LIMIT)] = READ_LIMIT_DEFAULT
    blip_id: Annotated[str, Meta(description=_READ_ARGS_BLIP_ID)] = ""
    before: Annotated[str, Meta(description=_READ_ARGS_BEFORE)] = ""


_SUMMARIZE_ARGS_TEXT = (
    "The summary: what the covered blips established, rolled forward from the previous summary. Empty: "
    "show the blips to cover and the ids the summary must cite."
)
_SUMMARIZE_ARGS_CITES = (
    "The blip ids it relies on: every id in must_cite (surfaces, DONE: blips, pinned blips, blips naming "
    "a participant), or it is rejected."
)
_SUMMARIZE_ARGS_UPTO = "The last blip id it covers. Default: the wavelet's newest blip."


class SummarizeArgs(Record, kw_only=True, forbid_unknown_fields=True):
    wavelet: Annotated[str, Meta(min_length=1, description=_WAVELET)]
    text: Annotated[str, Meta(description=_SUMMARIZE_ARGS_TEXT)] = ""
    cites: Annotated[list[str], Meta(description=_SUMMARIZE_ARGS_CITES)] = field(default_factory=list)
    upto: Annotated[str, Meta(description=_SUMMARIZE_ARGS_UPTO)] = ""


_PIN_ARGS_BLIP_ID = "The blip to pin: every summary of its wavelet must cite it."


class PinArgs(Record, kw_only=True, forbid_unknown_fields=True):
    blip_id: Annotated[str, Meta(min_length=1, description=_PIN_ARGS_BLIP_ID)]


class NoArgs(Record, kw_only=True, forbid_unknown_fields=True):
    pass


_FORK_ARGS_WAVELET = "The parent wavelet to fork from (WAVE/WAVELET, name or id)."
_FORK_ARGS_NAME = "The new wavelet's name: lower case letters, digits, '.', '_' or '-'."
_FORK_ARGS_WITH = "Participants to put on the new wavelet's roster (you are added too)."
_FORK_ARGS_SPAWN = (
    "The wave's resident only: a layout (name or .toml file) to start the new wavelet's agents with, as "
    "workers that report back with wavelet_surface. Empty: no agents are started."
)


class ForkArgs(Record, kw_only=True, forbid_unknown_fields=True):
    wavelet: Annotated[str, Meta(min_length=1, description=_FORK_ARGS_WAVELET)]
    name: Annotated[str, Meta(min_length=1, description=_FORK_ARGS_NAME)]
    with_: Annotated[list[str], Meta(description=_FORK_ARGS_WITH)] = field(default_factory=list, name="with")
    private: Annotated[bool, Meta(description="Only the roster can see a private wavelet.")] = False
    spawn: Annotated[str, Meta(description=_FORK_ARGS_SPAWN)] = ""


_SURFACE_ARGS_WAVELET = "The sub-wavelet whose conclusion you report (posted into its parent)."
_SURFACE_ARGS_SOURCE_BLIP_ID = "Optionally, the blip id the conclusion comes from."


class SurfaceArgs(Record, kw_only=True, forbid_unknown_fields=True):
    wavelet: Annotated[str, Meta(min_length=1, description=_SURFACE_ARGS_WAVELET)]
    text: Annotated[str, Meta(min_length=1, description="The conclusion, self-contained.")]
    source_blip_id: Annotated[str, Meta(description=_SURFACE_ARGS_SOURCE_BLIP_ID)] = ""


class InviteArgs(Record, kw_only=True, forbid_unknown_fields=True):
    wavelet: Annotated[str, Meta(min_length=1, description=_WAVELET)]
    name: Annotated[str, Meta(min_length=1, description="The participant to add to the roster.")]


class LeaveArgs(Record, kw_only=True, forbid_unknown_fields=True):
    wavelet: Annotated[str, Meta(min_length=1, description=_WAVELET)]
    name: Annotated[str, Meta(description="Who leaves the roster. Default: you.")] = ""


_PERMISSION_ARGS_PARTICIPANT = "The agent waiting at a permission prompt. Empty: list who waits."
_PERMISSION_ARGS_BEHAVIOR = "allow or deny its waiting tool call."


class PermissionArgs(Record, kw_only=True, forbid_unknown_fields=True):
    participant: Annotated[str, Meta(description=_PERMISSION_ARGS_PARTICIPANT)] = ""
    behavior: Annotated[Literal["allow", "deny", ""], Meta(description=_PERMISSION_ARGS_BEHAVIOR)] = ""
    message: Annotated[str, Meta(max_length=1000, description="Why (shown to the agent with a denial).")] = ""


# ---------------------------------------------------------------- tool results


class BlipOut(Record, kw_only=True, forbid_unknown_fields=True):
    id: str
    wavelet: Annotated[str, Meta(description="WAVE/WAVELET.")]
    wavelet_id: str
    author: str
    kind: str
    text: str
    created_at: str
    replaces: str | None = None


_WAVELET_OUT_PARENT_ID = (
    "The parent's id: null for the wave's root, and for a wavelet under a private wavelet you are not on "
    "(then parent_withheld)."
)
_WAVELET_OUT_MEMBER = "Whether this channel's participant is on the roster (and so receives its blips)."
_WAVELET_OUT_PARENT_WITHHELD = "Its parent is a private wavelet you are not on: its id is not shown."


class WaveletOut(Record, kw_only=True, forbid_unknown_fields=True):
    id: str
    path: Annotated[str, Meta(description="WAVE/WAVELET.")]
    name: str
    parent_id: Annotated[str | None, Meta(description=_WAVELET_OUT_PARENT_ID)]
    private: bool
    created_by: str
    members: list[str]
    member: Annotated[bool, Meta(description=_WAVELET_OUT_MEMBER)]
    parent_withheld: Annotated[bool, Meta(description=_WAVELET_OUT_PARENT_WITHHELD)] = False
    topic: Annotated[str, Meta(description="Its one-line topic: what it is about now ('' for none).")] = ""


class PostOut(Record, kw_only=True, forbid_unknown_fields=True):
    blip: BlipOut


class SummaryOut(Record, kw_only=True, forbid_unknown_fields=True):
    id: str
    wavelet: Annotated[str, Meta(description="WAVE/WAVELET it summarizes.")]
    upto: Annotated[str, Meta(description="The last blip id it covers.")]
    author: str
    author_kind: str
    text: str
    cites: list[str]
    covered_blips: int


_READ_OUT_CURSOR = "The newest blip id shown (pass as ``after`` to read only what is newer)."
_READ_OUT_SUMMARIES = "Summaries standing in for older blips (their cited ids stay readable)."
_READ_OUT_MORE = "Older context entries remain: read again with ``before``."


class ReadOut(Record, kw_only=True, forbid_unknown_fields=True):
    wavelet: WaveletOut
    path: Annotated[list[str], Meta(description="The ancestor chain, root first, ending with this wavelet.")]
    blips: list[BlipOut]
    omitted: Annotated[int, Meta(description="Older blips left out by ``limit`` (with ``after``).")]
    cursor: Annotated[str, Meta(description=_READ_OUT_CURSOR)]
    summaries: Annotated[list[SummaryOut], Meta(description=_READ_OUT_SUMMARIES)] = field(
        default_factory=list
    )
    more: Annotated[bool, Meta(description=_READ_OUT_MORE)] = False
    before: Annotated[str, Meta(description="Pass as ``before`` to read the older entries.")] = ""
    bytes: Annotated[int, Meta(description="Bytes of text in the whole assembled context.")] = 0
    saved_bytes: Annotated[int, Meta(description="Bytes the summaries saved against the full walk.")] = 0


_SUMMARIZE_OUT_MISSING = "Load-bearing ids the summary did not cite."
_SUMMARIZE_OUT_BLIPS = "Without text: the blips to cover."


class SummarizeOut(Record, kw_only=True, forbid_unknown_fields=True):
    wavelet: str
    accepted: bool
    summary: SummaryOut | None = None
    missing: Annotated[list[str], Meta(description=_SUMMARIZE_OUT_MISSING)] = field(default_factory=list)
    blips: Annotated[list[BlipOut], Meta(description=_SUMMARIZE_OUT_BLIPS)] = field(default_factory=list)
    must_cite: list[str] = field(default_factory=list)
    previous: Annotated[str, Meta(description="The previous summary's text (roll it forward).")] = ""


class ListOut(Record, kw_only=True, forbid_unknown_fields=True):
    wave: str
    wavelets: list[WaveletOut]


class WaveletResult(Record, kw_only=True, forbid_unknown_fields=True):
    wavelet: WaveletOut


_WAVELET_DELIVERY_HELD = (
    "Targeted attention: blips read but held back for a later digest (not yet committed)."
)
_WAVELET_DELIVERY_SEEN = "The newest blip id read there: ``cursor``, or the last held blip."


class WaveletDelivery(Record, kw_only=True, forbid_unknown_fields=True):
    wavelet: str
    wavelet_id: str
    cursor: str
    delivered: Annotated[int, Meta(description="Pushes since the cap last reset.")]
    capped: bool
    held: Annotated[int, Meta(description=_WAVELET_DELIVERY_HELD)] = 0
    seen: Annotated[str, Meta(description=_WAVELET_DELIVERY_SEEN)] = ""


DeliveryPhase = Literal["starting", "running", "reconnecting", "standby", "stopped"]


class DeliveryOut(Record, kw_only=True, forbid_unknown_fields=True):
    state: DeliveryPhase
    detail: str
    cap: int
    wavelets: list[WaveletDelivery]


class PresenceOut(Record, kw_only=True, forbid_unknown_fields=True):
    participant: str
    state: str
    """What its session does, in words (:func:`fleet.agentstate.describe`)."""


class PermissionOut(Record, kw_only=True, forbid_unknown_fields=True):
    participant: str
    tool: str
    preview: str
    state: Annotated[str, Meta(description="pending, allowed, denied or expired.")]
    answered_by: str = ""
    request_id: str = ""


class PermissionsOut(Record, kw_only=True, forbid_unknown_fields=True):
    requests: list[PermissionOut]


class PingOut(Record, kw_only=True, forbid_unknown_fields=True):
    participant: str
    wave: str
    daemon: str
    reachable: bool
    latency_ms: float | None
    daemon_version: str
    session_id: str
    delivery: DeliveryOut
    presence: list[PresenceOut]
    error: str


# ---------------------------------------------------------------- rendering


def _blip_out(blip: Blip, label: str) -> BlipOut:
    return BlipOut(
        id=blip.id,
        wavelet=label,
        wavelet_id=blip.wavelet_id,
        author=blip.author,
        kind=blip.kind,
        text=blip.text,
        created_at=blip.created_at,
        replaces=blip.replaces,
    )


def _wavelet_out(w: Wavelet, participant: str) -> WaveletOut:
    names = [m.name for m in w.roster]
    return WaveletOut(
        id=w.id,
        path=w.path,
        name=w.name,
        parent_id=w.parent_id,
        private=w.private,
        created_by=w.created_by,
        members=names,
        member=participant in names,
        parent_withheld=w.parent_withheld,
        topic=w.topic,
    )


def _summary_out(s: Summary, label: str) -> SummaryOut:
    return SummaryOut(
        id=s.id, wavelet=label, upto=s.upto, author=s.author, author_kind=s.author_kind, text=s.text,
        cites=s.cites, covered_blips=s.covered_blips,
    )  # fmt: skip


def _summary_block(s: SummaryOut) -> str:
    head = f"[summary of {s.wavelet} up to {s.upto} by {s.author} ({s.author_kind}):"
    head += f" {s.covered_blips} blip(s)"
    return f"{head}, cites {', '.join(s.cites) or 'nothing'}]\n{s.text}"


def _blip_line(b: BlipOut) -> str:
    return blip_block(b.wavelet, b.author, b.kind, b.id, b.text, b.replaces)


def _wavelet_line(w: WaveletOut) -> str:
    flags = " (private)" if w.private else ""
    you = " [you are a member]" if w.member else ""
    topic = f" · topic: {w.topic}" if w.topic else ""
    return f"{w.path}{flags} · id {w.id} · roster: {', '.join(w.members) or '(empty)'}{you}{topic}"


# ---------------------------------------------------------------- the tools


class Host(Protocol):
    """What the tools need from the channel that serves them."""

    participant: str
    wave: str
    daemon: str
    token_file: str
    session_id: str
    routing: RoutingLog | None
    state_file: StateFile

    def client(self) -> Client: ...

    def reload_token(self) -> bool: ...

    def outage_since(self) -> float | None: ...

    def label(self, wavelet_id: str) -> str | None: ...

    def delivery_status(self) -> DeliveryOut: ...


class Tools:
    """The tool table of one channel (:meth:`table`), acting through ``host``."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._unsettled: dict[str, tuple[str, float]] = {}
        """Message writes given up on with their outcome unknown: signature -> (request key, when)."""
        self._unsettled_lock = threading.Lock()

    def table(self) -> list[Tool]:
        """Every tool of this channel: the operator's channel also has ``wavelet_permission``."""
        shipped = shipped_schemas()

        def schema_of(cls: type[Any]) -> dict[str, Any]:
            return shipped[cls.__name__] if cls.__name__ in shipped else schema(cls)

        def tool(
            name: str,
            description: str,
            args: type[Any],
            out: type[Any],
            fn: Callable[[Any], ToolResult],
            read_only: bool = False,
        ) -> Tool:
            return Tool(
                name=name,
                description=description,
                input_schema=schema_of(args),
                output_schema=schema_of(out),
                handler=self._guarded(name, args, fn),
                annotations={"readOnlyHint": read_only, "openWorldHint": False},
            )

        operator_only = [
            tool(
                "wavelet_permission",
                "Answer an agent's permission prompt (it waits to run a tool): behavior allow or deny, "
                "with the participant. Without behavior: list the agents waiting and what they want to run.",
                PermissionArgs,
                PermissionsOut,
                self._permission,
            )
        ]
        return [*self._tools(tool), *(operator_only if self.host.participant == OPERATOR else [])]

    def _tools(self, tool: Callable[..., Tool]) -> list[Tool]:
        return [
            tool(
                "wavelet_post",
                "Post a blip (a message) to a wavelet; every other member receives it. Use it to reply, "
                "passing the wavelet attribute of the blip you answer. Never post only to acknowledge.",
                PostArgs,
                PostOut,
                self._post,
            ),
            tool(
                "wavelet_read",
                "Read a wavelet: its ancestors' blips up to each fork point, then its own blips, oldest "
                "first. With `after`, only this wavelet's blips newer than that blip id.",
                ReadArgs,
                ReadOut,
                self._read,
                read_only=True,
            ),
            tool(
                "wavelet_summarize",
                "Roll a wavelet's summary forward so its context stays short. Without text: see the blips "
                "to cover, the previous summary and the ids you must cite. With text and cites: record it; "
                "it is rejected unless it cites every surface, DONE: blip, pinned blip and blip naming a "
                "participant it covers.",
                SummarizeArgs,
                SummarizeOut,
                self._summarize,
            ),
            tool(
                "wavelet_pin",
                "Pin a blip that must survive summaries: every summary of its wavelet has to cite it.",
                PinArgs,
                PostOut,
                self._pin,
            ),
            tool(
                "wavelet_list",
                "List the wave's wavelets you can see, with parents, rosters, topics and whether you are a"
                " member.",
                NoArgs,
                ListOut,
                self._list,
                read_only=True,
            ),
            tool(
                "wavelet_fork",
                "Fork a sub-wavelet of a wavelet for a sub-conversation with the participants in `with` "
                "(you are on it too). Private forks are invisible to everyone else. Report its outcome "
                "with wavelet_surface.",
                ForkArgs,
                WaveletResult,
                self._fork,
            ),
            tool(
                "wavelet_surface",
                "Report a sub-wavelet's conclusion to its parent wavelet (posted there as a surface blip "
                "that references its source). This is how a private sub-conversation reports back.",
                SurfaceArgs,
                PostOut,
                self._surface,
            ),
            tool(
                "wavelet_invite",
                "Add a participant to a wavelet's roster; they receive its blips from then on.",
                InviteArgs,
                WaveletResult,
                self._invite,
            ),
            tool(
                "wavelet_leave",
                "Remove a participant (default: you) from a wavelet's roster; delivery of its blips stops.",
                LeaveArgs,
                WaveletResult,
                self._leave,
            ),
            tool(
                "wavelet_ping",
                "Check this channel: whether the daemon answers, who you are, how delivery stands, and "
                "which participants of the wave are working, idle or gone.",
                NoArgs,
                PingOut,
                self._ping,
                read_only=True,
            ),
        ]

    def _permission(self, args: PermissionArgs) -> ToolResult:
        """The operator's channel answers an agent's permission prompt (docs/permissions.md)."""
        from fleet.records.permissions import PermissionAnswer, PermissionRequest, pending_note

        def out(r: PermissionRequest) -> PermissionOut:
            return PermissionOut(
                participant=r.participant, tool=r.tool, preview=r.preview, state=r.state,
                answered_by=r.answered_by, request_id=r.id,
            )  # fmt: skip

        c = self.host.client()
        if not args.behavior:
            waiting = c.permissions(self.host.wave, args.participant or None, pending=True)
            lines = [f"{r.participant}: {pending_note(r)}" for r in waiting] or ["no agent waits at a prompt"]
            return ToolResult.ok("\n".join(lines), PermissionsOut(requests=[out(r) for r in waiting]))
        if not args.participant:
            return ToolResult.error("wavelet_permission: name the participant whose prompt to answer.")
        answer = PermissionAnswer(
            participant=args.participant, behavior=args.behavior, via="channel", message=args.message
        )
        got = c.answer_permission(self.host.wave, answer)
        said = f"{got.participant}: {got.tool} ({got.preview}) {got.state}"
        return ToolResult.ok(said, PermissionsOut(requests=[out(got)]))

    def _guarded(self, name: str, args_model: type[Any], fn: Callable[[Any], ToolResult]) -> Any:
        """Validate the arguments, run the tool, and turn every failure into an actionable isError."""

        def handler(arguments: dict[str, Any]) -> ToolResult:
            try:
                args = load(args_model, arguments)
            except RecordError as exc:
                problems = "; ".join(f"{loc or 'arguments'}: {msg}" for loc, msg in exc.problems)
                return ToolResult.error(f"{name}: invalid arguments ({problems}). Fix them and call again.")
            try:
                try:
                    return fn(args)
                except errors.Unauthorized:
                    if not self.host.reload_token():  # the operator may have rewritten the token file
                        raise
                    return fn(args)
            except errors.FleetError as exc:
                return ToolResult.error(self.explain(name, exc))

        return handler

    def explain(self, name: str, exc: errors.FleetError) -> str:
        h = self.host
        message = exc.message
        if isinstance(exc, errors.DaemonUnreachable):
            since = h.outage_since() or time.time()
            if exc.maybe_applied is None:
                outcome = ""
            elif not exc.maybe_applied:
                outcome = " Nothing was written: the request never reached the daemon."
            elif name in ("wavelet_post", "wavelet_surface"):
                outcome = (
                    " It may or may not have been stored; calling it again with the same text is safe:"
                    " fleet recognises the repeat and stores it once."
                )
            else:
                outcome = " It may or may not have been applied: check with wavelet_read or wavelet_list."
            return (
                f"{name} failed: the fleet daemon at {h.daemon} is unreachable "
                f"(down for {time.time() - since:.0f}s, retried for {TOOL_PATIENCE:.0f}s: {message}). The"
                f" channel keeps reconnecting and will resume delivery without losing blips.{outcome}"
            )
        if isinstance(exc, errors.Unauthorized):
            return (
                f"{name} failed: the daemon rejected this channel's token ({message}). Ask the operator "
                f"for a new one: `fleet token mint {h.wave} {h.participant} --file "
                f"{h.token_file}`; the channel re-reads that file, no restart needed."
            )
        if isinstance(exc, errors.NotFound):
            return (
                f"{name} failed: {message}. It does not exist in wave {h.wave}, or it is private and "
                f"you are not on its roster. Call wavelet_list to see what you can use."
            )
        if isinstance(exc, errors.PayloadTooLarge):
            return (
                f"{name} failed: {message}. Split the text into several smaller blips, or write the bulk "
                "to a file and post its path."
            )
        if isinstance(exc, errors.Forbidden):
            return f"{name} failed: {message}. You are not allowed to do this; ask the operator if needed."
        return f"{name} failed: {message}"

    def _resolve(self, ref: str) -> Wavelet:
        return self.host.client().resolve(ref.strip(), wave=self.host.wave)

    @contextmanager
    def _once(self, what: str, *parts: str) -> Iterator[str]:
        """The request key of one message write (``what`` of ``parts``): the key of the same write
        given up on before, if there is one (so the agent's retry of it lands once), else a new one.
        Kept only while the write's outcome is unknown."""
        sig = digest("\0".join((what, *parts)))
        now = time.monotonic()
        with self._unsettled_lock:
            for old, (_key, at) in list(self._unsettled.items()):
                if now - at > UNSETTLED_FOR:
                    del self._unsettled[old]
            key = self._unsettled.pop(sig, (request_key(), now))[0]
        try:
            yield key
        except errors.DaemonUnreachable as exc:
            if exc.maybe_applied:
                with self._unsettled_lock:
                    while len(self._unsettled) >= UNSETTLED_MAX:
                        del self._unsettled[next(iter(self._unsettled))]
                    self._unsettled[sig] = (key, now)
            raise

    def _post(self, args: PostArgs) -> ToolResult:
        w = self._resolve(args.wavelet)
        with self._once("post", w.id, args.text) as key:
            blip = self.host.client().post(w.id, args.text, as_=self.host.participant, key=key)
        out = PostOut(blip=_blip_out(blip, w.path))
        return ToolResult.ok(f"posted blip {blip.id} to {w.path}", out)

    def _read(self, args: ReadArgs) -> ToolResult:
        w = self._resolve(args.wavelet)
        c = self.host.client()
        if args.blip_id:
            return self._read_blip(w, args.blip_id.strip())
        ctx: Context | None = None
        if args.after:
            page = c.read(w.id, after=args.after, limit=args.limit)
            chain, blips = [w], page.blips
        else:
            ctx = c.context(w.id, limit=args.limit, before=args.before.strip() or None)
            chain, blips = ctx.path, ctx.blips
        labels = {x.id: x.path for x in chain}
        omitted = max(0, len(blips) - args.limit) if ctx is None else 0  # the daemon pages a context
        if self.host.routing is not None:
            self.host.routing.misses(blips[omitted:], "read", labels)
        shown = [_blip_out(b, labels.get(b.wavelet_id, b.wavelet_id)) for b in blips[omitted:]]
        covered = ctx.summaries if ctx else []
        summaries = [_summary_out(x, labels.get(x.wavelet_id, x.wavelet_id)) for x in covered]
        cursor = shown[-1].id if shown else args.after
        out = ReadOut(
            wavelet=_wavelet_out(w, self.host.participant),
            path=[x.path for x in chain],
            blips=shown,
            omitted=omitted,
            cursor=cursor,
            summaries=summaries,
            more=ctx.more if ctx else False,
            before=ctx.cursor if ctx and ctx.more else "",
            bytes=ctx.bytes if ctx else 0,
            saved_bytes=ctx.saved_bytes if ctx else 0,
        )
        head = f"{w.path}: {len(shown)} blip(s)"
        if len(chain) > 1:
            head += f", with context from {' > '.join(x.path for x in chain[:-1])}"
        if summaries:
            full = out.bytes + out.saved_bytes
            head += f"; {len(summaries)} summary(ies) saved {out.saved_bytes} of {full} bytes"
        if omitted:
            head += f"; {omitted} older blip(s) omitted (raise limit to see them)"
        if out.more:
            head += f"; older entries remain (read again with before={out.before})"
        entries = [(b.id, _blip_line(b)) for b in shown] + [(x.upto, _summary_block(x)) for x in summaries]
        entries.sort(key=lambda kv: kv[0])
        body = "\n\n".join(text for _key, text in entries) or "(no blips)"
        return ToolResult.ok(f"{head}\n\n{body}", out)

    def _summarize(self, args: SummarizeArgs) -> ToolResult:
        w = self._resolve(args.wavelet)
        c = self.host.client()
        me = self.host.participant
        inp = c.summary_pending(w.id)
        if not args.text.strip():
            out = SummarizeOut(
                wavelet=w.path,
                accepted=False,
                blips=[_blip_out(b, w.path) for b in inp.blips],
                must_cite=inp.load_bearing,
                previous=inp.previous.text if inp.previous is not None else "",
            )
            if not inp.blips:
                return ToolResult.ok(f"{w.path}: nothing new to summarize", out)
            body = "\n\n".join(_blip_line(b) for b in out.blips)
            prev = f"Previous summary (roll it forward):\n{out.previous}\n\n" if out.previous else ""
            return ToolResult.ok(
                f"{w.path}: {len(out.blips)} blip(s) to cover{' (more after these)' if inp.more else ''};"
                f" cite every one of: {', '.join(inp.load_bearing) or '(none)'}\n\n{prev}{body}",
                out,
            )
        upto = args.upto.strip() or (inp.blips[-1].id if inp.blips else "")
        if not upto:
            return ToolResult.error(f"wavelet_summarize: {w.path} has nothing new to summarize")
        verdict = c.summarize(w.id, NewSummary(text=args.text, upto=upto, cites=args.cites, as_=me))
        self._log_summary(w, upto, verdict.accepted, verdict.missing, verdict.reason)
        if not verdict.accepted:
            return ToolResult.error(
                f"wavelet_summarize: rejected, {verdict.reason}. Missing: {', '.join(verdict.missing)}. "
                "Cite them (and say what they established) and call again; the full text stays meanwhile."
            )
        assert verdict.summary is not None
        out = SummarizeOut(wavelet=w.path, accepted=True, summary=_summary_out(verdict.summary, w.path))
        return ToolResult.ok(f"recorded a summary of {w.path} up to {verdict.summary.upto}", out)

    def _log_summary(self, w: Wavelet, upto: str, accepted: bool, missing: list[str], detail: str) -> None:
        from fleet.delivery.attention import RoutingLog, SummaryEntry, routing_log_path

        h = self.host
        routing = h.routing or RoutingLog(routing_log_path(h.state_file), h.participant, h.wave)
        routing.append(
            [
                SummaryEntry(
                    participant=h.participant, wave=h.wave, wavelet_id=w.id, wavelet=w.path,
                    author_kind="participant", outcome="accepted" if accepted else "rejected", upto=upto,
                    missing=missing, detail=detail,
                )
            ]
        )  # fmt: skip

    def _pin(self, args: PinArgs) -> ToolResult:
        c = self.host.client()
        blip = c.pin(args.blip_id.strip(), as_=self.host.participant)
        label = self.host.label(blip.wavelet_id) or c.get_wavelet(blip.wavelet_id).path
        return ToolResult.ok(f"pinned blip {blip.id} in {label}", PostOut(blip=_blip_out(blip, label)))

    def _read_blip(self, w: Wavelet, blip_id: str) -> ToolResult:
        """One blip in full (typically from a digest line): in ``w`` or in its fork context."""
        c = self.host.client()
        blip = c.get_blip(blip_id)
        label = w.path if blip.wavelet_id == w.id else c.get_wavelet(blip.wavelet_id).path
        if self.host.routing is not None:
            self.host.routing.misses([blip], "blip", {blip.wavelet_id: label})
        shown = _blip_out(blip, label)
        out = ReadOut(
            wavelet=_wavelet_out(w, self.host.participant),
            path=[w.path],
            blips=[shown],
            omitted=0,
            cursor=blip.id,
        )
        return ToolResult.ok(f"{label}: blip {blip.id}\n\n{_blip_line(shown)}", out)

    def _list(self, _args: NoArgs) -> ToolResult:
        wave = self.host.client().get_wave(self.host.wave)
        items = [_wavelet_out(w, self.host.participant) for w in wave.wavelets]
        out = ListOut(wave=wave.name, wavelets=items)
        by_parent: dict[str | None, list[WaveletOut]] = {}
        for item in items:
            by_parent.setdefault(item.parent_id, []).append(item)
        known = {item.id for item in items}
        lines: list[str] = []

        def walk(parent: str | None, depth: int) -> None:
            for item in by_parent.get(parent, []):
                lines.append("  " * depth + _wavelet_line(item))
                walk(item.id, depth + 1)

        for item in items:  # the root, then the forks under a private wavelet the caller is not on
            if item.parent_id is None and not item.parent_withheld:
                lines.append(_wavelet_line(item))
                walk(item.id, 1)
        for item in items:
            if item.parent_withheld or (item.parent_id is not None and item.parent_id not in known):
                lines.append(_wavelet_line(item) + " (under a private wavelet)")
                walk(item.id, 1)
        return ToolResult.ok(f"wave {wave.name}:\n" + "\n".join(lines), out)

    def _fork(self, args: ForkArgs) -> ToolResult:
        me = self.host.participant
        parent = self._resolve(args.wavelet)
        members = list(dict.fromkeys([me, *args.with_]))
        dispatch = None
        if args.spawn:  # checked before anything is forked: a refusal leaves nothing half made
            spawner = first(fork_spawners)  # the resident's (fleet.resident)
            if spawner is None:
                return ToolResult.error(
                    "wavelet_fork: spawn needs the resident feature, which this channel has not loaded;"
                    " fork without spawn, then `fleet spawn` the wavelet."
                )
            dispatch = spawner(self.host, args.spawn, [m for m in members if m != me])
        w = self.host.client().fork(parent.id, args.name, with_=members, private=args.private, as_=me)
        out = WaveletResult(wavelet=_wavelet_out(w, me))
        text = f"forked {w.path} from {parent.path}\n{_wavelet_line(out.wavelet)}"
        if dispatch is not None:
            text += "\n" + dispatch.spawn(w)
        return ToolResult.ok(text, out)

    def _surface(self, args: SurfaceArgs) -> ToolResult:
        w = self._resolve(args.wavelet)
        c = self.host.client()
        source = args.source_blip_id or None
        with self._once("surface", w.id, args.text, source or "") as key:
            blip = c.surface(w.id, args.text, source_blip_id=source, as_=self.host.participant, key=key)
        label = self.host.label(blip.wavelet_id) or c.get_wavelet(blip.wavelet_id).path
        out = PostOut(blip=_blip_out(blip, label))
        return ToolResult.ok(f"surfaced {w.path} into {label} as blip {blip.id}", out)

    def _invite(self, args: InviteArgs) -> ToolResult:
        me = self.host.participant
        w = self.host.client().invite(self._resolve(args.wavelet).id, args.name, as_=me)
        out = WaveletResult(wavelet=_wavelet_out(w, me))
        return ToolResult.ok(f"invited {args.name} to {w.path}\n{_wavelet_line(out.wavelet)}", out)

    def _leave(self, args: LeaveArgs) -> ToolResult:
        me = self.host.participant
        who = args.name or me
        w = self.host.client().leave(self._resolve(args.wavelet).id, who, as_=me)
        out = WaveletResult(wavelet=_wavelet_out(w, me))
        return ToolResult.ok(f"{who} left {w.path}\n{_wavelet_line(out.wavelet)}", out)

    def _ping(self, _args: NoArgs) -> ToolResult:
        h = self.host
        error, version, latency, presence = "", "", None, []
        try:
            tools = h.client()
            # A probe answers now: no resending through an outage as the other tools do.
            with Client(tools.base_url, tools.token, retries=1, timeout=5) as c:
                t0 = time.perf_counter()
                who = c.whoami()
                latency = round((time.perf_counter() - t0) * 1000, 2)
                version = who.daemon_version
                presence = [
                    PresenceOut(participant=r.participant, state=describe(r.agent))
                    for r in c.presence(h.wave)
                ]
        except errors.FleetError as exc:
            error = self.explain("wavelet_ping", exc)
        out = PingOut(
            participant=h.participant,
            wave=h.wave,
            daemon=h.daemon,
            reachable=latency is not None,
            latency_ms=latency,
            daemon_version=version,
            session_id=h.session_id,
            delivery=h.delivery_status(),
            presence=presence,
            error=error,
        )
        lines = [
            f"you are {h.participant} in wave {h.wave} via {h.daemon}",
            f"daemon: answered in {latency} ms (fleet {version})"
            if latency is not None
            else f"daemon: {error}",
            f"delivery: {out.delivery.state} ({out.delivery.detail}); cap {out.delivery.cap} per wavelet",
        ]
        lines += [
            f"  {d.wavelet}: {d.delivered} delivered since the last reset{' — capped' if d.capped else ''}"
            for d in out.delivery.wavelets
        ]
        if presence:
            lines.append("presence: " + ", ".join(f"{p.participant} {p.state}" for p in presence))
        return ToolResult.ok("\n".join(lines), out)


SCHEMAS = Path(__file__).with_name("schemas.json")
"""The tools' argument and result schemas, derived once (:func:`write_schemas`)."""


def schema_fingerprint() -> str:
    """What the schemas are derived from: this module's and fleet.wire's source and msgspec's version."""
    import zlib  # a checksum, not a digest: SHA-256 of the sources took 2 ms of every start

    import msgspec

    from fleet import wire

    sources = [Path(__file__).read_bytes(), Path(wire.__file__).read_bytes()]
    return " ".join([msgspec.__version__, *(f"{len(b)}:{zlib.crc32(b):08x}" for b in sources)])


def tool_records() -> list[type[Record]]:
    """Every record a tool takes or answers, in the order of the file."""
    return [v for v in globals().values() if isinstance(v, type) and issubclass(v, Record) and v is not Record
            and v.__module__ == __name__]  # fmt: skip


def derived_schemas() -> dict[str, Any]:
    """The file's content as it should be now."""
    return {"fingerprint": schema_fingerprint(), "schemas": {c.__name__: schema(c) for c in tool_records()}}


def shipped_schemas() -> dict[str, dict[str, Any]]:
    """The shipped schemas by record name, or none when the file is missing, unreadable or behind."""
    try:
        data = json.loads(SCHEMAS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("fingerprint") != schema_fingerprint():
        return {}
    schemas = data.get("schemas")
    return schemas if isinstance(schemas, dict) else {}


def write_schemas() -> None:
    """Derive the schemas and write ``schemas.json`` (after changing a tool's records)."""
    SCHEMAS.write_text(json.dumps(derived_schemas(), indent=1) + "\n", encoding="utf-8")
