"""The HTTP API, declared once: every route's name, method, path, body and answer types, who may call
it, how a resend is answered, and a one-line doc.

What a caller may rely on:

- :data:`ROUTES` is the whole API. The daemon dispatches from it (:mod:`fleet.daemon.dispatch` binds
  each route to the handler of the same name and refuses to start with one missing or spare); the
  client calls through it (:meth:`fleet.client.transport.Transport.call`: a client method names its
  route and passes its parameters); ``docs/http-api.md`` is checked against it by
  ``tests/test_routes.py`` (each route's row, method, path and query parameters, and no other rows).
- A route's **name** is its client method's name and its handler's name.
- :func:`target` is the one place a request target is built: path segments percent-encoded, the
  query encoded from the route's declared parameters only. No other module of ``fleet/`` writes a
  ``/v1/`` path (a test says so).
- ``auth`` says who may call it; the store enforces it (``fleet/store/access.py``), the daemon only
  asks for a token (``none``: no token). ``idempotency`` is how the daemon answers a repeat of a
  request key (``docs/http-api.md``, "Request keys").

It imports only the record modules every client already loads, so a short-lived process that
imports the client pays for no more than the table's own instances.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, Literal, TypeVar
from urllib.parse import quote, urlencode

from fleet import errors
from fleet.models import (
    Blip,
    BlipList,
    BlipPage,
    CloseSeat,
    Context,
    EventPage,
    Feed,
    FeedRequest,
    Health,
    MemoryAnswer,
    MemoryWrite,
    MintedToken,
    MintRequest,
    NewBlip,
    NewFork,
    NewMachine,
    NewPin,
    NewSeat,
    NewSession,
    NewSummary,
    NewSurface,
    NewSystemBlip,
    NewTopic,
    NewWave,
    Ok,
    PresenceList,
    PresenceReport,
    Revoked,
    RevokeRequest,
    RosterChange,
    SeatAnswer,
    SessionList,
    SessionRecord,
    SummaryCheck,
    SummaryInput,
    SummaryList,
    SummaryVerdict,
    SupervisorAnswer,
    SupervisorClaim,
    SupervisorRelease,
    TokenList,
    Wave,
    WaveActivity,
    Wavelet,
    WaveList,
    Whoami,
)
from fleet.records.budgets import BudgetList, BudgetReachedAnswer, BudgetReport, SetBudget, SpendReport
from fleet.records.permissions import (
    PermissionAnswer,
    PermissionAsk,
    PermissionList,
    PermissionRequest,
    PermissionSettled,
)

R = TypeVar("R", covariant=True)

Method = Literal["GET", "POST"]

Auth = Literal["none", "token", "member", "self", "resident", "operator", "operator-token"]
"""Who may call a route: ``none`` no token at all; ``token`` any token (what it sees is its own:
a participant its wave, a private wavelet only on its roster); ``member`` a member of the wavelet (or
the operator); ``self`` the participant the body names, with its own token, or the operator;
``resident`` the operator or the wave's seated resident; ``operator`` the operator token, or a machine
token within its waves (what is in no wave, such as creating one, is the operator token's);
``operator-token`` the operator token itself. ``tests/test_routes.py`` checks it against the daemon: a
participant's token is refused on every ``operator``, ``operator-token`` and ``resident`` route, a
machine token on every ``operator-token`` one, and no token on all but ``none``."""

Idempotency = Literal["read", "unkeyed", "keyed", "rerun", "rebuild", "exact", "secret"]
"""How the daemon treats a request key (``Idempotency-Key``) on the route:

- ``read``: a GET, never keyed: the same sent once or many times.
- ``unkeyed``: a POST that only reads, reports or renews (the feed, presence, a supervisor lease):
  the key is ignored.
- ``keyed``: a repeat gets the stored first answer; when the daemon died before storing it, a
  repeat is ``409`` saying the request was applied.
- ``rerun``: as ``keyed``, but such a repeat runs the write again (the same applied once or twice).
- ``rebuild``: as ``keyed``, but such a repeat rebuilds the answer from the event the write recorded.
- ``exact``: the answer is the event's own record (a blip): never stored, every repeat rebuilds it.
- ``secret``: the answer holds a secret, never stored: a repeat is ``409`` naming what was made.
"""


class Route(Generic[R]):
    """One operation of the API. ``path`` is a template whose ``{name}`` parts are one path segment
    each; ``query`` the query parameters the daemon reads; ``request`` the body's record (None: no
    body); ``response`` the answer's. ``console``: the operator console's ``/api/v1/…`` proxy
    exposes it. Made once here and never changed; equal only to itself.

    A plain slotted class, not a dataclass: ``@dataclass`` costs 0.8 ms at import (it compiles its
    methods), on the start-up path of every ``fleet`` command and channel."""

    __slots__ = (
        "auth",
        "console",
        "doc",
        "idempotency",
        "method",
        "name",
        "path",
        "query",
        "request",
        "response",
    )

    def __init__(
        self,
        name: str,
        method: Method,
        path: str,
        request: type[object] | None,
        response: type[R],
        auth: Auth,
        idempotency: Idempotency,
        doc: str,
        query: tuple[str, ...] = (),
        console: bool = False,
    ) -> None:
        self.name, self.method, self.path = name, method, path
        self.request, self.response = request, response
        self.auth, self.idempotency, self.doc = auth, idempotency, doc
        self.query, self.console = query, console

    def __repr__(self) -> str:
        return f"Route({self.name!r}, {self.method} {self.path})"

    @property
    def keyed(self) -> bool:
        """It honours an ``Idempotency-Key`` (it writes)."""
        return self.idempotency not in ("read", "unkeyed")

    @property
    def params(self) -> tuple[str, ...]:
        """The names of the path's ``{…}`` segments, in order."""
        return tuple(part[1:-1] for part in self.path.split("/") if part.startswith("{"))


QueryValue = str | int | float | bool | None


def target(
    route: Route[object], args: Mapping[str, str], query: Mapping[str, QueryValue] | None = None
) -> str:
    """The request target of ``route``: its path with ``args`` (one per ``{…}``, percent-encoded as
    one segment), then the query. A query value None, False or '' is left out (the daemon's default);
    True is ``1``; a float is written shortest (``2.5``, ``30``). UsageError for a missing or extra
    path argument or an undeclared query parameter (a client bug, named)."""
    if set(args) != set(route.params):
        raise errors.UsageError(f"route {route.name} takes {route.params}, not {tuple(args)}")
    path = "/".join(
        quote(args[part[1:-1]], safe="") if part.startswith("{") else part for part in route.path.split("/")
    )
    if not query:
        return path
    pairs: list[tuple[str, str]] = []
    for name, value in query.items():
        if name not in route.query:
            raise errors.UsageError(f"route {route.name} has no query parameter {name!r}")
        if value is None or value is False or value == "":
            continue
        text = "1" if value is True else f"{value:g}" if isinstance(value, float) else str(value)
        pairs.append((name, text))
    return f"{path}?{urlencode(pairs)}" if pairs else path


# ---------------------------------------------------------------- the table

W = "/v1/waves/{wave}"
WL = "/v1/wavelets/{wavelet}"
B = "/v1/blips/{blip}"

HEALTH = Route(
    "health", "GET", "/v1/health", None, Health, "none", "read", "the daemon's version, pid and store"
)
WHOAMI = Route("whoami", "GET", "/v1/whoami", None, Whoami, "token", "read", "who the token is", console=True)

CREATE_WAVE = Route(
    "create_wave", "POST", "/v1/waves", NewWave, Wave, "operator", "rebuild", "a wave and its main"
)
LIST_WAVES = Route(
    "list_waves", "GET", "/v1/waves", None, WaveList, "token", "read", "the waves it sees", console=True
)
GET_WAVE = Route("get_wave", "GET", W, None, Wave, "token", "read", "a wave with its wavelets", console=True)
FEED = Route("feed", "POST", f"{W}/feed", FeedRequest, Feed, "self", "unkeyed", "a participant's long-poll")
REPORT_PRESENCE = Route(
    "report_presence", "POST", f"{W}/presence", PresenceReport, Ok, "self", "unkeyed", "a channel's ping"
)
PRESENCE = Route(
    "presence", "GET", f"{W}/presence", None, PresenceList, "token", "read", "who is heard", console=True
)
READ_WAVE = Route(
    "read_wave", "GET", f"{W}/blips", None, BlipPage, "operator", "read", "the whole wave's stream",
    query=("after", "wait", "limit"),
)  # fmt: skip
ACTIVITY = Route(
    "activity", "GET", f"{W}/activity", None, WaveActivity, "operator", "read", "who wrote where"
)
RECORD_SESSION = Route(
    "record_session", "POST", f"{W}/sessions", NewSession, SessionRecord, "operator", "rerun",
    "remember a participant's agent session",
)  # fmt: skip
SESSIONS = Route(
    "sessions", "GET", f"{W}/sessions", None, SessionList, "token", "read", "the recorded sessions",
    query=("participant",),
)  # fmt: skip
SEAT = Route("seat", "GET", f"{W}/seat", None, SeatAnswer, "token", "read", "the resident's seat")
CLAIM_SEAT = Route(
    "claim_seat", "POST", f"{W}/seat", NewSeat, SeatAnswer, "operator", "keyed", "seat a resident"
)
CLOSE_SEAT = Route(
    "close_seat", "POST", f"{W}/seat/close", CloseSeat, SeatAnswer, "operator", "rerun", "close the open seat"
)
SUPERVISOR = Route(
    "supervisor", "GET", f"{W}/supervisor", None, SupervisorAnswer, "operator", "read", "who supervises it"
)
CLAIM_SUPERVISOR = Route(
    "claim_supervisor", "POST", f"{W}/supervisor", SupervisorClaim, SupervisorAnswer, "operator", "unkeyed",
    "claim or renew the supervisor lease",
)  # fmt: skip
RELEASE_SUPERVISOR = Route(
    "release_supervisor", "POST", f"{W}/supervisor/release", SupervisorRelease, SupervisorAnswer,
    "operator", "unkeyed", "give the supervisor lease up",
)  # fmt: skip
MEMORY = Route("memory", "GET", f"{W}/memory", None, MemoryAnswer, "resident", "read", "the wave's MEMORY.md")
WRITE_MEMORY = Route(
    "write_memory", "POST", f"{W}/memory", MemoryWrite, MemoryAnswer, "resident", "keyed", "write MEMORY.md"
)
BUDGETS = Route(
    "budgets", "GET", f"{W}/budgets", None, BudgetList, "token", "read", "the budgets it sees",
    query=("participant",),
)  # fmt: skip
SET_BUDGET = Route(
    "set_budget", "POST", f"{W}/budgets", SetBudget, BudgetList, "operator", "rerun", "set a budget"
)
BUDGET_REACHED = Route(
    "budget_reached", "POST", f"{W}/budgets/reached", BudgetReport, BudgetReachedAnswer, "self", "rerun",
    "a channel says a budget was passed",
)  # fmt: skip
REPORT_SPEND = Route(
    "report_spend", "POST", f"{W}/budgets/spend", SpendReport, BudgetList, "self", "rerun",
    "a channel reports its session's spend",
)  # fmt: skip
ASK_PERMISSION = Route(
    "ask_permission", "POST", f"{W}/permissions", PermissionAsk, PermissionRequest, "self", "rebuild",
    "a hook records a permission prompt",
)  # fmt: skip
PERMISSIONS = Route(
    "permissions", "GET", f"{W}/permissions", None, PermissionList, "token", "read",
    "the permission requests", query=("participant", "pending", "limit"), console=True,
)  # fmt: skip
ANSWER_PERMISSION = Route(
    "answer_permission", "POST", f"{W}/permissions/answer", PermissionAnswer, PermissionRequest, "operator",
    "rebuild", "allow or deny a pending prompt", console=True,
)  # fmt: skip
PERMISSION = Route(
    "permission", "GET", f"{W}/permissions/{{request}}", None, PermissionRequest, "self", "read",
    "one request (long-poll until answered)", query=("wait",),
)  # fmt: skip
SETTLE_PERMISSION = Route(
    "settle_permission", "POST", f"{W}/permissions/{{request}}/settled", PermissionSettled, PermissionRequest,
    "self", "rebuild", "a hook records how a prompt ended",
)  # fmt: skip

RESOLVE = Route(
    "resolve", "GET", "/v1/resolve", None, Wavelet, "token", "read", "the wavelet a reference names",
    query=("ref", "wave"), console=True,
)  # fmt: skip
GET_WAVELET = Route("get_wavelet", "GET", WL, None, Wavelet, "token", "read", "a wavelet", console=True)
FORK = Route(
    "fork", "POST", f"{WL}/fork", NewFork, Wavelet, "member", "rebuild", "fork a child", console=True
)
INVITE = Route(
    "invite",
    "POST",
    f"{WL}/invite",
    RosterChange,
    Wavelet,
    "member",
    "rebuild",
    "add to the roster",
    console=True,
)
LEAVE = Route(
    "leave", "POST", f"{WL}/leave", RosterChange, Wavelet, "member", "rebuild", "take off the roster",
    console=True,
)  # fmt: skip
SET_TOPIC = Route(
    "set_topic", "POST", f"{WL}/topic", NewTopic, Wavelet, "member", "rebuild",
    "set or clear its one-line topic",
)  # fmt: skip
POST = Route("post", "POST", f"{WL}/blips", NewBlip, Blip, "member", "exact", "post a message", console=True)
READ = Route(
    "read", "GET", f"{WL}/blips", None, BlipPage, "token", "read", "blips after a cursor (long-poll)",
    query=("after", "wait", "limit", "history"), console=True,
)  # fmt: skip
POST_SYSTEM = Route(
    "post_system", "POST", f"{WL}/system", NewSystemBlip, Blip, "operator", "exact", "post a system blip"
)
SURFACE = Route(
    "surface", "POST", f"{WL}/surface", NewSurface, Blip, "member", "exact", "surface into the parent",
    console=True,
)  # fmt: skip
CONTEXT = Route(
    "context", "GET", f"{WL}/context", None, Context, "token", "read", "a page of the assembled context",
    query=("limit", "before"), console=True,
)  # fmt: skip
SUMMARIES = Route("summaries", "GET", f"{WL}/summaries", None, SummaryList, "token", "read", "its summaries")
SUMMARIZE = Route(
    "summarize", "POST", f"{WL}/summaries", NewSummary, SummaryVerdict, "member", "keyed", "offer a summary"
)
SUMMARY_CHECK = Route(
    "summary_check", "GET", f"{WL}/summaries/check", None, SummaryCheck, "token", "read",
    "the latest summary checked now",
)  # fmt: skip
SUMMARY_PENDING = Route(
    "summary_pending", "GET", f"{WL}/summaries/pending", None, SummaryInput, "member", "read",
    "what a summary must cover", query=("limit",),
)  # fmt: skip

PIN = Route("pin", "POST", f"{B}/pin", NewPin, Blip, "member", "keyed", "pin a blip (load-bearing)")
GET_BLIP = Route("get_blip", "GET", B, None, Blip, "token", "read", "a blip", console=True)
HISTORY = Route(
    "history", "GET", f"{B}/history", None, BlipList, "token", "read", "every version", console=True
)
REPLACE = Route(
    "replace",
    "POST",
    f"{B}/replace",
    NewBlip,
    Blip,
    "member",
    "exact",
    "a new version of a blip",
    console=True,
)

MINT_TOKEN = Route(
    "mint_token", "POST", "/v1/tokens", MintRequest, MintedToken, "operator", "secret", "a participant token"
)
MINT_MACHINE_TOKEN = Route(
    "mint_machine_token", "POST", "/v1/machines", NewMachine, MintedToken, "operator-token", "secret",
    "a machine token",
)  # fmt: skip
LIST_TOKENS = Route(
    "list_tokens", "GET", "/v1/tokens", None, TokenList, "operator", "read", "the tokens",
    query=("wave", "machine"),
)  # fmt: skip
REVOKE_TOKEN = Route(
    "revoke_token", "POST", "/v1/tokens/revoke", RevokeRequest, Revoked, "operator", "rerun", "revoke tokens"
)
EVENTS = Route(
    "events", "GET", "/v1/events", None, EventPage, "operator-token", "read", "a page of the event log",
    query=("after", "limit", "wave", "tokens"),
)  # fmt: skip

ROUTES: tuple[Route[object], ...] = (
    HEALTH, WHOAMI, CREATE_WAVE, LIST_WAVES, GET_WAVE, FEED, REPORT_PRESENCE, PRESENCE, READ_WAVE, ACTIVITY,
    RECORD_SESSION, SESSIONS, SEAT, CLAIM_SEAT, CLOSE_SEAT, SUPERVISOR, CLAIM_SUPERVISOR, RELEASE_SUPERVISOR,
    MEMORY, WRITE_MEMORY, BUDGETS, SET_BUDGET, BUDGET_REACHED, REPORT_SPEND, ASK_PERMISSION, PERMISSIONS,
    ANSWER_PERMISSION, PERMISSION, SETTLE_PERMISSION, RESOLVE, GET_WAVELET, FORK, INVITE, LEAVE, SET_TOPIC,
    POST, READ, POST_SYSTEM, SURFACE, CONTEXT, SUMMARIES, SUMMARIZE, SUMMARY_CHECK, SUMMARY_PENDING, PIN,
    GET_BLIP, HISTORY, REPLACE, MINT_TOKEN, MINT_MACHINE_TOKEN, LIST_TOKENS, REVOKE_TOKEN, EVENTS,
)  # fmt: skip
"""The whole API, in the order the daemon matches a request against it (the first route whose
path matches and whose method is the request's serves it)."""
