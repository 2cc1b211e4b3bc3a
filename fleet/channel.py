"""The channel: a stdio MCP server that makes one Claude Code session a participant of one wave.

Invocation (the inline ``--mcp-config`` entry spawn generates; stable)::

    python -m fleet channel --participant NAME --wave WAVE --daemon URL --token-file PATH \\
        [--cap 40] [--state-dir DIR] [--attention full|targeted [--digest-hold 30]
        [--attendant CMD [--attendant-timeout 2]]]

Each option falls back to an environment variable: ``FLEET_PARTICIPANT``, ``FLEET_WAVE``,
``FLEET_DAEMON``, ``FLEET_TOKEN_FILE``. The token is only ever read from the file (0600), never taken
from the command line. Without ``--daemon`` the local daemon's endpoint file is used; without a token
file the participant ``operator`` uses the local operator token. ``CLAUDE_CODE_SESSION_ID`` (set by
Claude Code) is recorded with every presence report.

What the session gets (wire rules in :mod:`fleet.mcpwire`):

* ``instructions`` opening with "You are <participant>", claiming that name's prior blips as the
  session's own, and carrying the prompt contract of DESIGN §3.
* Eight tools, each with an input schema, an output schema, ``structuredContent`` and a text
  rendering: ``wavelet_post``, ``wavelet_read``, ``wavelet_list``, ``wavelet_fork``,
  ``wavelet_surface``, ``wavelet_invite``, ``wavelet_leave``, ``wavelet_ping``. Wavelets are named as
  ``WAVE/WAVELET``, a wavelet name in the channel's wave, or an id (prefix). Every failure (bad
  arguments, unknown wavelet, oversized text, revoked token, daemon down) is an ``isError`` result
  whose text says what to do.
* Delivery: one second after ``notifications/initialized`` (so a health check such as ``claude mcp
  list``, which disconnects at once, consumes nothing), one long-poll ``feed`` across every wavelet on the
  participant's roster (new memberships appear without a restart, a left wavelet stops), run through
  :mod:`fleet.delivery` (cursor per wavelet, echo suppression, cap). Each delivered blip becomes::

      {"method": "notifications/claude/channel",
       "params": {"content": TEXT, "meta": {"wavelet": "WAVE/WAVELET", "wavelet_id": ID,
                                             "blip_id": ID, "author": NAME, "kind": KIND}}}

  with ``kind`` one of ``message``, ``system``, ``surface``, or ``cap`` for the one exhaustion
  notice (author ``fleet``); a replacement blip also carries ``replaces``. All meta values are strings.
  A state file that cannot be read stops delivery (tools keep working) with one notification of kind
  ``error`` naming the file and the fix; no blip is skipped.
* Targeted attention (``--attention targeted``, DESIGN §4; rules in :mod:`fleet.delivery`): only
  blips that name the participant, the operator's blips and surfaces are pushed as above; the rest
  of a wavelet's batch (``system`` provenance included) follows them as one digest frame::

      {"content": "carol: excerpt… [ID]\\ndave (system): excerpt… [ID]",
       "meta": {"wavelet": "WAVE/WAVELET", "wavelet_id": ID, "author": "fleet", "kind": "digest",
                "blip_ids": "ID,ID"}}

  Frames count toward the cap. A digest with nothing in full beside it waits up to
  ``--digest-hold`` seconds (30) for more chatter, so a stream of unaddressed blips wakes the
  session once rather than once per blip; a full blip in that wavelet takes it along at once.
  Each committed decision, each attendant run and each read-after-digest miss (``wavelet_read``
  returned a digested blip) is a line of the routing log (:mod:`fleet.attention`).
  ``--attendant CMD`` may promote digested blips to full delivery, never the reverse; it runs
  before its batch is pushed, so a slow one delays that batch by at most ``--attendant-timeout``
  per wavelet. ``full`` (the default) changes nothing above.
* Outages: the channel keeps answering; tool calls report the outage; delivery reconnects with
  backoff and resumes from its cursors, so nothing is lost. Only the holder of the state-file lock
  delivers and reports presence; a second channel of the same (daemon, wave, participant) — say, a
  ``claude mcp list`` health check — serves tools and stands by.
* ``--no-deliver`` (what spawn's ``--transport hook`` passes): tools only. The channel never takes the
  state-file lock and never delivers; ``fleet watch --hook`` (:mod:`fleet.watch`) delivers instead, on
  the same state file. It still reports presence (pings from one second after
  ``notifications/initialized``, ``gone`` at exit), so spawn sees the session start and the wave sees
  it alive.
"""

from __future__ import annotations

import logging
import os
import random
import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import fleet
from fleet import errors
from fleet.client import Client
from fleet.delivery import (
    DEFAULT_CAP,
    DIGEST_HOLD,
    Action,
    Attention,
    CorruptState,
    Decision,
    Delivery,
    DeliveryState,
    StateFile,
    blip_block,
    digest_ids,
    digest_text,
    exhaustion_notice,
)
from fleet.mcpwire import Server, ServerInfo, Tool, ToolResult, take_stdout
from fleet.models import PARTICIPANT_RE, Blip, Context, FeedWavelet, PresenceReport, Wavelet

if TYPE_CHECKING:  # imported when attention is targeted: a full-attention channel never loads it
    from fleet.attention import Attendant, RoutingLog

log = logging.getLogger(__name__)

NOTIFICATION = "notifications/claude/channel"
POLL_WAIT = 20.0
"""Seconds one feed long-poll may wait (the daemon caps it at 60)."""
PING_INTERVAL = 30.0
"""Presence pings; the daemon calls a participant gone after 90 s without one."""
PRESENCE_COALESCE = 0.5
"""Under load, ``delivered`` reports go at most this often (counts add up); the first is immediate."""
DELIVERY_GRACE = 1.0
"""Seconds between ``notifications/initialized`` and the first delivery. A health check (``claude mcp
list`` runs initialize, tools/list, then SIGINT within milliseconds) must neither consume blips nor
take the state lock or report presence; a real session does not notice a one-second start."""
STANDBY_RETRY = 2.0
BACKOFF_FIRST, BACKOFF_MAX = 0.2, 5.0
BACKOFF_AUTH_MAX = 30.0
READ_LIMIT_DEFAULT, READ_LIMIT_MAX = 100, 2000


class ChannelConfig(BaseModel):
    """Who this channel is and where it talks. Built by ``fleet channel`` from options and env."""

    model_config = ConfigDict(extra="forbid")

    participant: str
    wave: str
    daemon: str
    token_file: Path
    state_dir: Path
    cap: int = DEFAULT_CAP
    deliver: bool = True
    """False (``--no-deliver``): serve tools only; ``fleet watch --hook`` delivers for this session."""
    attention: Attention = "full"
    attendant: str | None = None
    """The attendant command (targeted attention only); None: the rules alone decide."""
    attendant_timeout: float | None = None
    """Seconds per attendant run; None: :data:`fleet.attention.ATTENDANT_TIMEOUT`."""
    digest_hold: float = DIGEST_HOLD
    """Targeted attention: seconds a digest-only batch waits for more chatter (0: push at once)."""
    session_id: str | None = None
    host: str = Field(default_factory=socket.gethostname)
    poll_wait: float = POLL_WAIT
    ping_interval: float = PING_INTERVAL
    delivery_grace: float = DELIVERY_GRACE


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
sub-wavelet) or "cap" (a notice that delivery paused in that wavelet). Your own blips are never \
delivered back to you.
{_targeted_paragraph(participant) if attention == "targeted" else ""}
Tools: wavelet_post replies in a wavelet (pass the wavelet attribute of the blip you answer). \
wavelet_read shows a wavelet with its ancestors' context up to the fork point. wavelet_list shows the \
wave's wavelets and rosters. wavelet_fork starts a sub-conversation with chosen participants (private \
if asked). wavelet_surface reports a sub-wavelet's conclusion to its parent. wavelet_invite and \
wavelet_leave change a roster. wavelet_ping checks the connection and who is working.

Rules:
1. Never post merely to acknowledge, agree or thank. Post only to add information, a decision, a \
question or a result.
2. Finish a task with one blip that starts with "DONE:" and states the result, then stay silent until \
someone gives you something new.
3. Never reply to system or surface blips, nor to cap notices: they are records, not requests.
4. When you need someone's attention, name them in the blip (for example "bob: please check ...").
5. Input typed into your terminal is the operator controlling you: answer it locally in the terminal \
and do not post about it, unless the operator asks you to relay something; then post it as one blip \
prefixed "operator asks:".
"""


def _targeted_paragraph(participant: str) -> str:
    return f"""
Your attention is targeted: a blip reaches you in full only when it names you ("{participant}" or \
[[{participant}]]), comes from the operator, or is a surface. Everything else in a wavelet arrives \
as one message of kind "digest": one line per blip with its author, the start of its text and its \
id in brackets (the ids are also in the blip_ids attribute). A digest is not a request. Read a \
digested blip in full with wavelet_read (wavelet and blip_id) only when it bears on your task.
"""


# ---------------------------------------------------------------- tool arguments


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


WaveletRef = Field(
    min_length=1,
    description="The wavelet: WAVE/WAVELET, a wavelet name in this wave (e.g. main), or a wavelet id.",
)


class PostArgs(Args):
    wavelet: str = WaveletRef
    text: str = Field(min_length=1, description="The blip's text (markdown is fine).")


class ReadArgs(Args):
    wavelet: str = WaveletRef
    after: str = Field(
        default="",
        description="Only this wavelet's blips newer than this blip id (no ancestor context). "
        "Default: the full context.",
    )
    limit: int = Field(
        default=READ_LIMIT_DEFAULT,
        ge=1,
        le=READ_LIMIT_MAX,
        description="At most this many blips, the newest ones.",
    )
    blip_id: str = Field(
        default="",
        description="Only this blip, in full (for example an id from a digest line); "
        "after and limit are then ignored.",
    )


class NoArgs(Args):
    pass


class ForkArgs(Args):
    wavelet: str = Field(
        min_length=1, description="The parent wavelet to fork from (WAVE/WAVELET, name or id)."
    )
    name: str = Field(
        min_length=1, description="The new wavelet's name: lower case letters, digits, '.', '_' or '-'."
    )
    with_: list[str] = Field(
        default_factory=list,
        alias="with",
        description="Participants to put on the new wavelet's roster (you are added too).",
    )
    private: bool = Field(default=False, description="Only the roster can see a private wavelet.")


class SurfaceArgs(Args):
    wavelet: str = Field(
        min_length=1, description="The sub-wavelet whose conclusion you report (posted into its parent)."
    )
    text: str = Field(min_length=1, description="The conclusion, self-contained.")
    source_blip_id: str = Field(default="", description="Optionally, the blip id the conclusion comes from.")


class InviteArgs(Args):
    wavelet: str = WaveletRef
    name: str = Field(min_length=1, description="The participant to add to the roster.")


class LeaveArgs(Args):
    wavelet: str = WaveletRef
    name: str = Field(default="", description="Who leaves the roster. Default: you.")


# ---------------------------------------------------------------- tool results


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class BlipOut(Out):
    id: str
    wavelet: str
    """WAVE/WAVELET."""
    wavelet_id: str
    author: str
    kind: str
    text: str
    created_at: str
    replaces: str | None = None


class WaveletOut(Out):
    id: str
    path: str
    """WAVE/WAVELET."""
    name: str
    parent_id: str | None
    private: bool
    created_by: str
    members: list[str]
    member: bool
    """Whether this channel's participant is on the roster (and so receives its blips)."""


class PostOut(Out):
    blip: BlipOut


class ReadOut(Out):
    wavelet: WaveletOut
    path: list[str]
    """The ancestor chain, root first, ending with this wavelet."""
    blips: list[BlipOut]
    omitted: int
    """Older blips left out by ``limit``."""
    cursor: str
    """The newest blip id shown (pass as ``after`` to read only what is newer)."""


class ListOut(Out):
    wave: str
    wavelets: list[WaveletOut]


class WaveletResult(Out):
    wavelet: WaveletOut


class WaveletDelivery(Out):
    wavelet: str
    wavelet_id: str
    cursor: str
    delivered: int
    """Pushes since the cap last reset."""
    capped: bool
    held: int = 0
    """Targeted attention: blips read but held back for a later digest (not yet committed)."""
    seen: str = ""
    """The newest blip id read there: ``cursor``, or the last held blip."""


DeliveryPhase = Literal["starting", "running", "reconnecting", "standby", "stopped"]


class DeliveryOut(Out):
    state: DeliveryPhase
    detail: str
    cap: int
    wavelets: list[WaveletDelivery]


class PresenceOut(Out):
    participant: str
    state: str


class PingOut(Out):
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


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    """Resolve ``$ref``s into ``$defs`` and drop ``title``s: self-contained schemas for every client."""
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline_refs(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {
            k: _inline_refs(v, defs)
            for k, v in node.items()
            if k != "$defs" and not (k == "title" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema (by alias), inlined, with ``additionalProperties: false``."""
    raw = model.model_json_schema(by_alias=True)
    schema: dict[str, Any] = _inline_refs(raw, raw.get("$defs", {}))
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    return schema


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
    )


def _blip_line(b: BlipOut) -> str:
    return blip_block(b.wavelet, b.author, b.kind, b.id, b.text, b.replaces)


def _wavelet_line(w: WaveletOut) -> str:
    flags = " (private)" if w.private else ""
    you = " [you are a member]" if w.member else ""
    return f"{w.path}{flags} · id {w.id} · roster: {', '.join(w.members) or '(empty)'}{you}"


# ---------------------------------------------------------------- the channel


@dataclass
class _Outage:
    since: float
    reason: str


class Channel:
    """One participant's channel: the MCP server, the tools and the delivery loop.

    :meth:`serve` blocks until the client closes stdin (or the output breaks), then shuts down:
    the state is saved, presence says ``gone``, the lock is released.
    """

    def __init__(self, config: ChannelConfig, *, input: IO[bytes], output: IO[str]) -> None:
        self.config = config
        self.participant = config.participant
        self.wave = config.wave
        self.state_file = StateFile(config.state_dir, config.daemon, config.wave, config.participant)
        self._token = ""
        self._token_error = ""
        self._tools_client: Client | None = None
        self._feed_client: Client | None = None
        self._clients_lock = threading.Lock()
        self._stop = threading.Event()
        self._busy = threading.Lock()
        """Held while a batch is pushed (and while the state is copied), so shutdown never cuts one
        in half."""
        self._save_wanted = threading.Event()
        self._save_lock = threading.Lock()
        self._saved_seq = 0
        self._snap_seq = 0
        self._core: Delivery | None = None
        self._labels: dict[str, str] = {}
        self._delivery_state: DeliveryPhase = "starting"
        self._delivery_detail = "waiting for the client's notifications/initialized"
        self._outage: _Outage | None = None
        self._threads: list[threading.Thread] = []
        self._tools_only = False
        """Set once a ``--no-deliver`` channel is past its start delay: it reports presence from then."""
        self._pinged_early = False
        """Set when this channel reported presence at the handshake, before claiming delivery."""
        self._presence = threading.Condition()
        self._undelivered_report = 0
        """Pushes not yet reported to the daemon (the presence thread sends them)."""
        self._routing: RoutingLog | None = None
        """Targeted attention only: the routing log (decisions, attendant runs, misses)."""
        self._attendant: Attendant | None = None
        if config.attention == "targeted":
            from fleet.attention import ATTENDANT_TIMEOUT, Attendant, RoutingLog, routing_log_path

            self._routing = RoutingLog(routing_log_path(self.state_file), self.participant, self.wave)
            if config.attendant:
                timeout = config.attendant_timeout or ATTENDANT_TIMEOUT
                self._attendant = Attendant(config.attendant, self._routing, timeout)
        self._load_token()
        self.server = Server(
            ServerInfo(
                name="fleet",
                version=fleet.__version__,
                instructions=instructions(self.participant, self.wave, config.attention),
                experimental={"claude/channel": {}},
            ),
            self._tools(),
            input=input,
            output=output,
        )

    # ------------------------------------------------------------ lifecycle

    def serve(self) -> None:
        """Run until the input ends; delivery and presence run on background threads meanwhile."""
        loops = (
            (self._deliver_forever, "delivery"),
            (self._ping_forever, "presence"),
            (self._save_forever, "state"),
        )
        for target, name in loops:
            t = threading.Thread(target=target, name=f"fleet-channel-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        try:
            self.server.serve()
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Stop delivery, save the cursors, report ``gone``, release the lock. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._attendant is not None:  # a run in progress must not outlive the channel
            self._attendant.close()
        self._wake_presence()
        self._save_wanted.set()
        for t in [*self._threads, *[t for t in threading.enumerate() if t.name == "early-presence"]]:
            if t.name.endswith("presence"):
                t.join(1.0)  # a report still in flight must not land after "gone"
        got = self._busy.acquire(timeout=3.0)
        try:
            if self.state_file.held:
                self._write_state(self._snapshot())
                self._presence_quietly("gone", timeout=1.0)
                self.state_file.release()
            elif self._tools_only or (self._pinged_early and self._lock_free()):
                self._presence_quietly("gone", timeout=1.0)
        finally:
            if got:
                self._busy.release()
        log.info("channel for %s in %s stopped", self.participant, self.wave)

    # ------------------------------------------------------------ daemon access

    def _load_token(self) -> bool:
        """(Re)read the token file; True when the token changed (clients are then rebuilt)."""
        try:
            token = self.config.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            self._token_error = f"cannot read the token file {self.config.token_file}: {exc.strerror or exc}"
            return False
        if not token:
            self._token_error = f"the token file {self.config.token_file} is empty"
            return False
        self._token_error = ""
        if token == self._token:
            return False
        self._token = token
        with self._clients_lock:
            self._tools_client = self._feed_client = None
        return True

    def _client(self, feed: bool = False) -> Client:
        if self._token_error:
            self._load_token()
            if self._token_error:
                raise errors.Unauthorized(self._token_error)
        with self._clients_lock:
            if feed:
                if self._feed_client is None:
                    self._feed_client = Client(self.config.daemon, self._token, retries=0)
                return self._feed_client
            if self._tools_client is None:
                self._tools_client = Client(self.config.daemon, self._token, retries=2, timeout=15)
            return self._tools_client

    def _presence_quietly(
        self, event: Literal["ping", "delivered", "gone"], count: int = 0, timeout: float = 0
    ) -> None:
        report = PresenceReport(
            participant=self.participant,
            event=event,
            count=count,
            session_id=self.config.session_id,
            host=self.config.host,
        )

        def send() -> None:
            try:
                self._client().report_presence(self.wave, report)
            except errors.FleetError as exc:
                log.debug("presence %s not reported: %s", event, exc)

        if not timeout:
            send()
            return
        t = threading.Thread(target=send, daemon=True)
        t.start()
        t.join(timeout)

    def _wake_presence(self, delivered: int = 0) -> None:
        with self._presence:
            self._undelivered_report += delivered
            self._presence.notify_all()

    def _lock_free(self) -> bool:
        """True when no channel holds this participant's state lock (probed, not kept)."""
        if self.state_file.held:
            return False
        if not self.state_file.acquire():
            return False
        self.state_file.release()
        return True

    @property
    def _reports_presence(self) -> bool:
        """The delivering channel (the lock holder) reports presence, and so does a tools-only one."""
        return self.state_file.held or self._tools_only

    def _ping_forever(self) -> None:
        """Report presence while this channel delivers: a ping at once and every ``ping_interval``,
        and pushes as ``delivered`` (coalesced under load), off the delivery thread."""
        next_ping = 0.0

        def due() -> bool:
            return self._stop.is_set() or (
                self._reports_presence and (self._undelivered_report > 0 or time.monotonic() >= next_ping)
            )

        while True:
            with self._presence:
                timeout = max(0.0, next_ping - time.monotonic()) if self._reports_presence else None
                self._presence.wait_for(due, timeout)
                if self._stop.is_set():
                    return
                if not due():
                    continue
                count, self._undelivered_report = self._undelivered_report, 0
            self._presence_quietly("delivered" if count else "ping", count=count)
            next_ping = time.monotonic() + self.config.ping_interval
            if count and self._stop.wait(PRESENCE_COALESCE):
                return

    # ------------------------------------------------------------ delivery

    def _deliver_forever(self) -> None:
        self.server.initialized.wait()
        if self.config.deliver and not self.server.closed.is_set() and self._lock_free():
            # The handshake is done and no other channel delivers for this participant: say so at
            # once (spawn's readiness check waits for this ping), before delivery is claimed after
            # the grace below. A channel standing by behind a live one stays silent.
            self._pinged_early = True
            threading.Thread(
                target=self._presence_quietly, args=("ping",), name="early-presence", daemon=True
            ).start()
        if self._stop.wait(self.config.delivery_grace) or self.server.closed.is_set():
            return
        if not self.config.deliver:
            self._set_delivery(
                "stopped", "tools only (--no-deliver): blips reach this session through `fleet watch --hook`"
            )
            self._tools_only = True
            self._wake_presence()
            return
        try:
            core = self._claim()
        except CorruptState as exc:
            log.error("%s", exc)
            self._set_delivery("stopped", exc.message)
            self.server.notify(
                NOTIFICATION,
                {
                    "content": f"fleet channel: delivery is stopped. {exc.message} Tell the operator.",
                    "meta": {"author": "fleet", "kind": "error"},
                },
            )
            return
        if core is None:
            return
        self._core = core
        self._wake_presence()  # the first ping says this channel delivers now
        backoff = BACKOFF_FIRST
        while not self._stop.is_set() and not self.server.closed.is_set():
            wait = self.config.poll_wait
            deadline = core.hold_deadline()
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            try:
                feed = self._client(feed=True).feed(self.wave, self.participant, core.feed_cursors, wait=wait)
            except errors.FleetError as exc:
                backoff = self._feed_failed(exc, backoff)
                continue
            if self._outage is not None:
                log.info(
                    "daemon reachable again after %.1fs; resuming delivery", time.time() - self._outage.since
                )
            self._outage = None
            backoff = BACKOFF_FIRST
            self._set_delivery("running", f"{len(feed.wavelets)} wavelet(s) on your roster")
            if not self._handle(core, feed.wavelets, feed.blips):
                return

    def _claim(self) -> Delivery | None:
        """Take the state-file lock (standing by while another channel holds it) and load the state."""
        while not self.state_file.acquire():
            self._set_delivery(
                "standby",
                f"another channel of {self.participant} holds {self.state_file.lock_path}; "
                "this one serves tools and takes over when it exits",
            )
            if self._stop.wait(STANDBY_RETRY) or self.server.closed.is_set():
                return None
        try:
            state = self.state_file.load()
        except CorruptState:
            self.state_file.release()
            raise
        self._set_delivery("running", "connecting")
        return Delivery(
            self.participant,
            state,
            cap=self.config.cap,
            attention=self.config.attention,
            hold=self.config.digest_hold,
        )

    def _handle(self, core: Delivery, wavelets: list[FeedWavelet], blips: list[Blip]) -> bool:
        """Push one feed batch (the saver thread then writes the state); False when the connection is gone."""
        labels = {w.id: f"{w.wave}/{w.name}" for w in wavelets}
        if self._routing is not None:
            return self._handle_targeted(core, self._routing, labels, blips)
        with self._busy:
            if self._stop.is_set():
                return False
            self._labels = labels
            core.retain(labels)
            before = core.cursors
            pushed, complete = core.process(blips, lambda d: self._push(d, labels))
        return self._settle(core, bool(blips) and core.cursors == before, pushed, complete)

    def _handle_targeted(
        self, core: Delivery, routing: RoutingLog, labels: dict[str, str], blips: list[Blip]
    ) -> bool:
        """:meth:`_handle` under targeted attention: gather (the digest hold), let the attendant
        rescue (outside ``_busy``: it may take seconds), push and commit, log the decisions."""
        with self._busy:
            if self._stop.is_set():
                return False
            self._labels = labels
            core.retain(labels)
        before = core.feed_cursors
        batches = core.gather(blips, time.monotonic())
        if self._attendant is not None:
            for batch in batches:
                self._attendant.review(batch, labels.get(batch.wavelet_id, batch.wavelet_id))
        with self._busy:
            if self._stop.is_set():
                return False
            pushed, complete = core.deliver(batches, lambda d: self._push(d, labels))
        routing.routed(core.take_routed(), labels)
        return self._settle(core, bool(blips) and core.feed_cursors == before, pushed, complete)

    def _settle(self, core: Delivery, stuck: bool, pushed: int, complete: bool) -> bool:
        """After a batch: save and report what was pushed; False when the protocol output is gone.

        ``stuck``: the feed returned blips but no cursor moved (a daemon answering at or behind the
        cursors); back off rather than spin.
        """
        if core.dirty:
            self._save_wanted.set()
        if pushed:
            self._wake_presence(pushed)
        if not complete:
            log.info("protocol output closed; delivery stops with the cursors saved")
            return False
        if stuck:
            log.warning("the daemon's feed returned only blips at or behind the cursors; backing off")
            self._stop.wait(BACKOFF_MAX)
        return True

    def _push(self, decision: Decision, labels: dict[str, str]) -> bool:
        blip = decision.blip
        unit = "blips" if self._routing is None else "notifications (blips and digests)"
        label = labels.get(blip.wavelet_id, blip.wavelet_id)
        meta = {
            "wavelet": label,
            "wavelet_id": blip.wavelet_id,
            "blip_id": blip.id,
            "author": blip.author,
            "kind": blip.kind,
        }
        content = blip.text
        if decision.action is Action.NOTICE:
            meta.update(author="fleet", kind="cap")
            content = exhaustion_notice(label, self.config.cap, unit)
        elif decision.digest:
            del meta["blip_id"]
            meta.update(author="fleet", kind="digest", blip_ids=digest_ids(decision.digest))
            content = digest_text(decision.digest)
        elif blip.replaces:
            meta["replaces"] = blip.replaces
        return self.server.notify(NOTIFICATION, {"content": content, "meta": meta})

    def _save_forever(self) -> None:
        """Write the state file after each batch, off the delivery thread (coalescing under load)."""
        while True:
            self._save_wanted.wait()
            self._save_wanted.clear()
            if self._stop.is_set():
                return
            with self._busy:
                snapshot = self._snapshot()
            self._write_state(snapshot)

    def _snapshot(self) -> tuple[int, DeliveryState] | None:
        """A numbered copy of unsaved state (the caller holds ``_busy``), or None when saved."""
        core = self._core
        if core is None or not core.dirty:
            return None
        core.mark_saved()
        self._snap_seq += 1
        return self._snap_seq, core.state.model_copy(deep=True)

    def _write_state(self, snapshot: tuple[int, DeliveryState] | None) -> None:
        if snapshot is None:
            return
        seq, state = snapshot
        with self._save_lock:
            if seq <= self._saved_seq:  # a newer copy is already on disk
                return
            try:
                self.state_file.save(state)
                self._saved_seq = seq
            except OSError as exc:  # the cursors stay in memory; the next batch tries again
                log.error("cannot save the delivery state to %s: %s", self.state_file.path, exc)
                if self._core is not None:
                    self._core.dirty = True

    def _feed_failed(self, exc: errors.FleetError, backoff: float) -> float:
        """Record an outage or rejection, wait ``backoff`` (jittered), return the next backoff."""
        limit = BACKOFF_MAX
        if isinstance(exc, errors.Unauthorized | errors.Forbidden | errors.NotFound):
            limit = BACKOFF_AUTH_MAX
            if isinstance(exc, errors.Unauthorized):
                self._load_token()
        if self._outage is None:
            self._outage = _Outage(time.time(), exc.message)
            log.warning("delivery interrupted: %s; retrying with backoff", exc.message)
        else:
            self._outage.reason = exc.message
        self._set_delivery("reconnecting", exc.message)
        self._stop.wait(backoff * random.uniform(0.8, 1.2))
        return min(backoff * 2, limit)

    def _set_delivery(self, state: DeliveryPhase, detail: str) -> None:
        self._delivery_state, self._delivery_detail = state, detail

    # ------------------------------------------------------------ tools

    def _tools(self) -> list[Tool]:
        def tool(
            name: str,
            description: str,
            args: type[Args],
            out: type[Out],
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
                "wavelet_list",
                "List the wave's wavelets you can see, with parents, rosters and whether you are a member.",
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

    def _guarded(self, name: str, args_model: type[Args], fn: Callable[[Any], ToolResult]) -> Any:
        """Validate the arguments, run the tool, and turn every failure into an actionable isError."""

        def handler(arguments: dict[str, Any]) -> ToolResult:
            try:
                args = args_model.model_validate(arguments)
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
                )
                return ToolResult.error(f"{name}: invalid arguments ({problems}). Fix them and call again.")
            try:
                try:
                    return fn(args)
                except errors.Unauthorized:
                    if not self._load_token():  # a rejected token: the operator may have rewritten the file
                        raise
                    return fn(args)
            except errors.FleetError as exc:
                return ToolResult.error(self._explain(name, exc))

        return handler

    def _explain(self, name: str, exc: errors.FleetError) -> str:
        message = exc.message
        if isinstance(exc, errors.DaemonUnreachable):
            since = self._outage.since if self._outage else time.time()
            return (
                f"{name} failed: the fleet daemon at {self.config.daemon} is unreachable "
                f"(down for {time.time() - since:.0f}s: {message}). The channel keeps reconnecting and "
                "will resume delivery without losing blips. Retry later; a post that failed this way "
                "may or may not have been stored, so check with wavelet_read before posting it again."
            )
        if isinstance(exc, errors.Unauthorized):
            return (
                f"{name} failed: the daemon rejected this channel's token ({message}). Ask the operator "
                f"for a new one: `fleet token mint {self.wave} {self.participant} --file "
                f"{self.config.token_file}`; the channel re-reads that file, no restart needed."
            )
        if isinstance(exc, errors.NotFound):
            return (
                f"{name} failed: {message}. It does not exist in wave {self.wave}, or it is private and "
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
        return self._client().resolve(ref.strip(), wave=self.wave)

    def _post(self, args: PostArgs) -> ToolResult:
        w = self._resolve(args.wavelet)
        blip = self._client().post(w.id, args.text, as_=self.participant)
        out = PostOut(blip=_blip_out(blip, w.path))
        return ToolResult.ok(f"posted blip {blip.id} to {w.path}", out)

    def _read(self, args: ReadArgs) -> ToolResult:
        w = self._resolve(args.wavelet)
        c = self._client()
        if args.blip_id:
            return self._read_blip(w, args.blip_id.strip())
        if args.after:
            page = c.read(w.id, after=args.after, limit=args.limit)
            chain, blips = [w], page.blips
        else:
            ctx: Context = c.context(w.id)
            chain, blips = ctx.path, ctx.blips
        labels = {x.id: x.path for x in chain}
        omitted = max(0, len(blips) - args.limit)
        if self._routing is not None:
            self._routing.misses(blips[omitted:], "read", labels)
        shown = [_blip_out(b, labels.get(b.wavelet_id, b.wavelet_id)) for b in blips[omitted:]]
        cursor = shown[-1].id if shown else args.after
        out = ReadOut(
            wavelet=_wavelet_out(w, self.participant),
            path=[x.path for x in chain],
            blips=shown,
            omitted=omitted,
            cursor=cursor,
        )
        head = f"{w.path}: {len(shown)} blip(s)"
        if len(chain) > 1:
            head += f", with context from {' > '.join(x.path for x in chain[:-1])}"
        if omitted:
            head += f"; {omitted} older blip(s) omitted (raise limit to see them)"
        body = "\n\n".join(_blip_line(b) for b in shown) or "(no blips)"
        return ToolResult.ok(f"{head}\n\n{body}", out)

    def _read_blip(self, w: Wavelet, blip_id: str) -> ToolResult:
        """One blip in full (typically from a digest line): in ``w`` or in its fork context."""
        c = self._client()
        blip = c.get_blip(blip_id)
        label = w.path if blip.wavelet_id == w.id else c.get_wavelet(blip.wavelet_id).path
        if self._routing is not None:
            self._routing.misses([blip], "blip", {blip.wavelet_id: label})
        shown = _blip_out(blip, label)
        out = ReadOut(
            wavelet=_wavelet_out(w, self.participant),
            path=[w.path],
            blips=[shown],
            omitted=0,
            cursor=blip.id,
        )
        return ToolResult.ok(f"{label}: blip {blip.id}\n\n{_blip_line(shown)}", out)

    def _list(self, _args: NoArgs) -> ToolResult:
        wave = self._client().get_wave(self.wave)
        items = [_wavelet_out(w, self.participant) for w in wave.wavelets]
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

        walk(None, 0)
        for item in items:  # forks whose parent the caller cannot see
            if item.parent_id is not None and item.parent_id not in known:
                lines.append(_wavelet_line(item))
        return ToolResult.ok(f"wave {wave.name}:\n" + "\n".join(lines), out)

    def _fork(self, args: ForkArgs) -> ToolResult:
        parent = self._resolve(args.wavelet)
        members = list(dict.fromkeys([self.participant, *args.with_]))
        w = self._client().fork(
            parent.id, args.name, with_=members, private=args.private, as_=self.participant
        )
        out = WaveletResult(wavelet=_wavelet_out(w, self.participant))
        return ToolResult.ok(f"forked {w.path} from {parent.path}\n{_wavelet_line(out.wavelet)}", out)

    def _surface(self, args: SurfaceArgs) -> ToolResult:
        w = self._resolve(args.wavelet)
        blip = self._client().surface(
            w.id, args.text, source_blip_id=args.source_blip_id or None, as_=self.participant
        )
        label = self._labels.get(blip.wavelet_id) or self._client().get_wavelet(blip.wavelet_id).path
        out = PostOut(blip=_blip_out(blip, label))
        return ToolResult.ok(f"surfaced {w.path} into {label} as blip {blip.id}", out)

    def _invite(self, args: InviteArgs) -> ToolResult:
        w = self._client().invite(self._resolve(args.wavelet).id, args.name, as_=self.participant)
        out = WaveletResult(wavelet=_wavelet_out(w, self.participant))
        return ToolResult.ok(f"invited {args.name} to {w.path}\n{_wavelet_line(out.wavelet)}", out)

    def _leave(self, args: LeaveArgs) -> ToolResult:
        who = args.name or self.participant
        w = self._client().leave(self._resolve(args.wavelet).id, who, as_=self.participant)
        out = WaveletResult(wavelet=_wavelet_out(w, self.participant))
        return ToolResult.ok(f"{who} left {w.path}\n{_wavelet_line(out.wavelet)}", out)

    def _ping(self, _args: NoArgs) -> ToolResult:
        error, version, latency, presence = "", "", None, []
        try:
            c = self._client()
            t0 = time.perf_counter()
            who = c.whoami()
            latency = round((time.perf_counter() - t0) * 1000, 2)
            version = who.daemon_version
            presence = [PresenceOut(participant=r.participant, state=r.state) for r in c.presence(self.wave)]
        except errors.FleetError as exc:
            error = self._explain("wavelet_ping", exc)
        out = PingOut(
            participant=self.participant,
            wave=self.wave,
            daemon=self.config.daemon,
            reachable=latency is not None,
            latency_ms=latency,
            daemon_version=version,
            session_id=self.config.session_id or "",
            delivery=self._delivery_status(),
            presence=presence,
            error=error,
        )
        lines = [
            f"you are {self.participant} in wave {self.wave} via {self.config.daemon}",
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

    def _delivery_status(self) -> DeliveryOut:
        rows: list[WaveletDelivery] = []
        core = self._core
        if core is not None:
            with self._busy:
                state = core.state.model_copy(deep=True)
                labels = dict(self._labels)
                held, seen = core.held, core.feed_cursors
            for wid, label in sorted(labels.items(), key=lambda kv: kv[1]):
                rows.append(
                    WaveletDelivery(
                        wavelet=label,
                        wavelet_id=wid,
                        cursor=state.cursors.get(wid, ""),
                        delivered=state.delivered.get(wid, 0),
                        capped=wid in state.exhausted,
                        held=held.get(wid, 0),
                        seen=seen.get(wid, ""),
                    )
                )
        return DeliveryOut(
            state=self._delivery_state, detail=self._delivery_detail, cap=self.config.cap, wavelets=rows
        )


# ---------------------------------------------------------------- entry point


def validate_config(config: ChannelConfig) -> None:
    """Reject an identity the daemon would reject anyway, before any protocol starts."""
    if not PARTICIPANT_RE.match(config.participant):
        raise errors.UsageError(
            f"participant {config.participant!r} is not a valid name (lower case letter first, then "
            "letters, digits, '_' or '-', at most 32)"
        )
    if not config.wave:
        raise errors.UsageError("no wave: pass --wave or set FLEET_WAVE")
    if config.attendant is not None:
        if config.attention != "targeted":
            raise errors.UsageError("--attendant only rescues digested blips: add --attention targeted")
        try:
            argv = shlex.split(config.attendant)
        except ValueError as exc:
            raise errors.UsageError(
                f"--attendant {config.attendant!r} cannot be split into words: {exc}"
            ) from None
        if not argv:
            raise errors.UsageError("--attendant is empty: pass the attendant's command line")
    if config.attendant_timeout is not None and config.attendant_timeout <= 0:
        raise errors.UsageError("--attendant-timeout must be a positive number of seconds")
    if config.digest_hold < 0:
        raise errors.UsageError("--digest-hold must be 0 (push digests at once) or a number of seconds")


def run(config: ChannelConfig) -> int:
    """Serve MCP on this process's stdin/stdout until stdin closes; returns the exit status (0).

    Takes over stdout first (see :func:`fleet.mcpwire.take_stdout`); SIGTERM, SIGINT and SIGHUP shut
    down cleanly, with the cursors saved.
    """
    validate_config(config)
    proto = take_stdout()
    channel = Channel(config, input=sys.stdin.buffer, output=proto)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    # SIGHUP: the agent's pane (its terminal) went away; shut down as cleanly as on SIGTERM
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    log.info(
        "channel for %s in %s via %s (cap %d, attention %s, state %s)",
        config.participant,
        config.wave,
        config.daemon,
        config.cap,
        config.attention,
        channel.state_file.path,
    )
    try:
        channel.serve()
    except SystemExit:
        channel.shutdown()
    return 0


def default_config(
    participant: str | None,
    wave: str | None,
    daemon: str | None,
    token_file: Path | None,
    cap: int,
    state_dir: Path | None,
    *,
    attention: Attention = "full",
    attendant: str | None = None,
    attendant_timeout: float | None = None,
    digest_hold: float = DIGEST_HOLD,
) -> ChannelConfig:
    """Fill in what the command line left out from the environment and the local paths."""
    from fleet.client import read_endpoint
    from fleet.paths import get_paths

    paths = get_paths()
    participant = participant or os.environ.get("FLEET_PARTICIPANT", "")
    if not participant:
        raise errors.UsageError("no participant: pass --participant or set FLEET_PARTICIPANT")
    wave = wave or os.environ.get("FLEET_WAVE", "")
    daemon = daemon or os.environ.get("FLEET_DAEMON", "")
    if not daemon:
        endpoint = read_endpoint(paths)
        if endpoint is None:
            raise errors.DaemonUnreachable(
                "no daemon: pass --daemon URL, set FLEET_DAEMON, "
                "or start the local one with `fleet daemon start`"
            )
        daemon = endpoint.url
    env_token_file = os.environ.get("FLEET_TOKEN_FILE")
    if token_file is None and env_token_file:
        token_file = Path(env_token_file)
    if token_file is None:
        if participant != "operator":
            raise errors.UsageError(
                "no token file: pass --token-file PATH or set FLEET_TOKEN_FILE "
                "(mint one with `fleet token mint`)"
            )
        token_file = paths.operator_token
    return ChannelConfig(
        participant=participant,
        wave=wave,
        daemon=daemon,
        token_file=token_file.expanduser(),
        state_dir=(state_dir or paths.channels).expanduser(),
        cap=cap,
        attention=attention,
        attendant=attendant or None,
        attendant_timeout=attendant_timeout,
        digest_hold=digest_hold,
        session_id=os.environ.get("CLAUDE_CODE_SESSION_ID") or None,
    )
