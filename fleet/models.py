"""Pydantic models for every shape that crosses a boundary: HTTP bodies, the event log, files on disk.

The daemon renders these, the client parses them, the CLI and the channel consume them; nothing
passes a ``dict[str, Any]`` between layers. Field names are the wire names.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PARTICIPANT_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}\Z")
"""Participant names (DESIGN §1). ``operator`` is the reserved human."""

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}\Z")
"""Wave and wavelet names: no ``/`` (it separates WAVE/WAVELET), no upper case, no spaces."""

OPERATOR = "operator"
ROOT_WAVELET = "main"
DEFAULT_MAX_BLIP_BYTES = 256 * 1024

BlipKind = Literal["message", "system", "surface"]
ParticipantKind = Literal["agent", "human"]
PresenceState = Literal["working", "idle", "gone"]


def jsonable(obj: Any) -> Any:
    """``obj`` with every model (also inside dicts, lists and tuples) dumped to its wire JSON shape."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json", by_alias=True)
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    return obj


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class Lenient(BaseModel):
    """Responses: ignore fields a newer daemon may add."""

    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------- records (daemon -> client)


class Member(Lenient):
    name: str
    kind: ParticipantKind = "agent"
    joined_at: str
    since: str = ""
    """Blip id just before this member joined ('' = the wavelet's start): delivery starts after it."""


class Wavelet(Lenient):
    id: str
    wave_id: str
    wave: str
    name: str
    parent_id: str | None
    fork_blip_id: str | None = None
    """The last parent blip visible in this fork's context (None: the parent was empty)."""
    private: bool
    created_by: str
    created_at: str
    roster: list[Member] = Field(default_factory=list)

    @property
    def path(self) -> str:
        return f"{self.wave}/{self.name}"


class Wave(Lenient):
    id: str
    name: str
    created_at: str
    root_id: str
    wavelets: list[Wavelet] = Field(default_factory=list)


class Blip(Lenient):
    id: str
    wavelet_id: str
    wave_id: str
    author: str
    kind: BlipKind
    text: str
    replaces: str | None = None
    source_wavelet_id: str | None = None
    source_blip_id: str | None = None
    created_at: str
    superseded_by: str | None = None
    """Set on reads that include history: the id of the blip that replaced this one."""
    actor: str | None = None
    """On a ``system`` blip: the participant whose act (fork, invite, leave) it records, if any."""


class BlipPage(Lenient):
    blips: list[Blip]
    cursor: str
    """The greatest id the reader has now seen (pass it back as ``after``); unchanged if none."""


class Context(Lenient):
    """What a participant sees when it reads a wavelet: ancestors up to each fork point, then it."""

    wavelet: Wavelet
    path: list[Wavelet]
    """Root first, this wavelet last."""
    blips: list[Blip]


class FeedWavelet(Lenient):
    id: str
    name: str
    wave: str
    private: bool
    since: str
    """Where delivery starts for this member when the client has no cursor for it."""


class Feed(Lenient):
    """One long-poll across every wavelet on a participant's roster (the channel's delivery input)."""

    wavelets: list[FeedWavelet]
    """The participant's current memberships in the wave (a left wavelet is absent)."""
    blips: list[Blip]
    """Blips with id > the caller's cursor for their wavelet, oldest first, per wavelet at most ``limit``."""
    more: bool = False


class PresenceRow(Lenient):
    wave_id: str
    participant: str
    state: PresenceState
    session_id: str | None = None
    host: str | None = None
    last_ping: float | None = None
    last_delivery: float | None = None
    last_post: float | None = None
    delivered: int = 0


class Activity(Lenient):
    """What one participant wrote in one wavelet (system blips are not counted)."""

    wavelet_id: str
    participant: str
    blips: int
    """Blips it authored there, replaced versions included."""
    last_blip_id: str
    last_blip_at: str


class WaveActivity(Lenient):
    """``GET /v1/waves/{wave}/activity``: who wrote where, and the wave's newest blip."""

    wave_id: str
    head: str
    """The greatest blip id in the wave ('' if none): ``after=`` for the wave's blip stream to start now."""
    activity: list[Activity] = Field(default_factory=list)


class SessionRecord(Lenient):
    """The agent session a participant runs in a wave: what ``fleet respawn`` needs on any machine."""

    participant: str
    session_id: str
    """The Claude Code session id assigned before launch (``--session-id``, later ``--resume``)."""
    wavelet_id: str
    """The wavelet whose window the pane lives in."""
    layout: str = ""
    agent: str = ""
    """The agent command (no secrets), as the layout or ``--agent`` gave it."""
    transport: Literal["channel", "hook"] = "channel"
    cwd: str = ""
    host: str = ""
    updated_at: str = ""


class TokenInfo(Lenient):
    id: str
    wave_id: str
    wave: str
    participant: str
    created_at: str
    revoked_at: str | None = None


class MintedToken(TokenInfo):
    token: str
    """The secret, shown once. The daemon keeps only its hash."""


class Whoami(Lenient):
    principal: str
    """``operator`` or the participant name."""
    wave_id: str | None = None
    wave: str | None = None
    daemon_version: str


class Health(Lenient):
    ok: bool
    version: str
    pid: int


class ErrorBody(Lenient):
    kind: str
    message: str


# ---------------------------------------------------------------- requests (client -> daemon)


class NewWave(Model):
    name: str
    with_: list[str] = Field(default_factory=list, alias="with")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class NewFork(Model):
    name: str
    with_: list[str] = Field(default_factory=list, alias="with")
    private: bool = False
    as_: str | None = Field(default=None, alias="as")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class RosterChange(Model):
    name: str
    kind: ParticipantKind = "agent"
    as_: str | None = Field(default=None, alias="as")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class NewBlip(Model):
    text: str
    as_: str | None = Field(default=None, alias="as")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class NewSystemBlip(Model):
    """``POST /v1/wavelets/{wavelet}/system`` (operator only): a ``system`` blip, authored ``system``."""

    text: str


class NewSurface(Model):
    text: str
    source_blip_id: str | None = None
    as_: str | None = Field(default=None, alias="as")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class FeedRequest(Model):
    participant: str
    cursors: dict[str, str] = Field(default_factory=dict)
    """wavelet id -> last delivered blip id. Missing wavelets start at the member's ``since``."""
    wait: float = 0.0
    limit: int = 200


class PresenceReport(Model):
    participant: str
    event: Literal["ping", "delivered", "gone"]
    count: int = 0
    session_id: str | None = None
    host: str | None = None


class NewSession(Model):
    participant: str
    session_id: str
    wavelet_id: str
    layout: str = ""
    agent: str = ""
    transport: Literal["channel", "hook"] = "channel"
    cwd: str = ""
    host: str = ""


class MintRequest(Model):
    wave: str
    participant: str


class RevokeRequest(Model):
    token_id: str | None = None
    wave: str | None = None
    participant: str | None = None


# ---------------------------------------------------------------- files on disk


class Endpoint(Lenient):
    """``state/daemon.json``: where the local daemon listens."""

    url: str
    pid: int
    started_at: float
    version: str
