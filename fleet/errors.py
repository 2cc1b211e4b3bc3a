"""The one error tree of fleet.

Every failure a user or an agent can cause is one of these classes. Each carries the exit code the
CLI returns for it (docs/design.md §7) and the HTTP status the daemon answers with, and its message says what
went wrong and what to do about it. The CLI turns them into exit codes at exactly one place
(``fleet.cli.main``); the daemon turns them into JSON error bodies; the client turns those bodies back
into the same classes, so a caller sees the same exception locally and remotely.

    FleetError (1, 500)
    ├── UsageError (2, 400)          bad input: names, sizes, malformed requests
    │   └── HttpError (2, any)       malformed HTTP: a status of its own (405, 421, …)
    ├── DaemonUnreachable (3, 503)   no daemon answered at the configured address     [transient]
    ├── NotFound (4, 404)            unknown wave, wavelet, blip, token — or invisible to the caller
    ├── Forbidden (5, 403)           visible, but the caller may not do this
    ├── Unauthorized (5, 401)        missing, wrong or revoked token
    ├── Untrusted (5)                the daemon's certificate is not the pinned one (or no TLS)
    ├── Conflict (1, 409)            the name is taken, the daemon already runs
    ├── PayloadTooLarge (2, 413)     a blip or request body over the limit
    ├── CorruptState (1)             a delivery state file fleet cannot use (never overwritten)
    ├── ToolMissing (6)              tmux, claude or another agent command is not installed
    └── StorageFault (7, 507)        the store's disk is full, read-only, or its database is corrupt or empty

``transient`` says whether trying the same thing again later can succeed without anyone changing
anything (the daemon comes back): delivery loops retry transient errors with backoff and stop, or
slow down and tell someone, on permanent ones. :func:`describe` is the one way validation problems
(of a :mod:`fleet.wire` record or a pydantic model) are put into words.
"""

from __future__ import annotations

from typing import Any, ClassVar


class FleetError(Exception):
    """Base class. ``exit_code`` is the CLI exit status; ``status`` the HTTP status."""

    exit_code: ClassVar[int] = 1
    status: ClassVar[int] = 500
    kind: ClassVar[str] = "error"
    transient: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(FleetError):
    exit_code = 2
    status = 400
    kind = "usage"


class HttpError(UsageError):
    """Malformed or misdirected HTTP that has a status of its own (``405``, ``421``, …)."""

    def __init__(self, status: int, message: str, kind: str = "usage") -> None:
        super().__init__(message)
        self.http_status = status
        self.http_kind = kind


class DaemonUnreachable(FleetError):
    """``maybe_applied``: for a write given up on, whether it may have been applied (False: it never
    reached the daemon whole); None for a read, or where nobody knows."""

    exit_code = 3
    status = 503
    kind = "unreachable"
    transient = True

    def __init__(self, message: str, *, maybe_applied: bool | None = None) -> None:
        super().__init__(message)
        self.maybe_applied = maybe_applied


class NotFound(FleetError):
    exit_code = 4
    status = 404
    kind = "not_found"


class Forbidden(FleetError):
    exit_code = 5
    status = 403
    kind = "forbidden"


class Unauthorized(FleetError):
    exit_code = 5
    status = 401
    kind = "unauthorized"


class Untrusted(FleetError):
    """The connection is not to the daemon the client pinned: another or an expired certificate, no
    TLS where TLS was expected. Nothing was sent on it (the token included)."""

    exit_code = 5
    status = 502
    kind = "untrusted"


class Conflict(FleetError):
    exit_code = 1
    status = 409
    kind = "conflict"


class PayloadTooLarge(FleetError):
    exit_code = 2
    status = 413
    kind = "too_large"


class CorruptState(FleetError):
    """A file fleet keeps exists but cannot be used (a channel's delivery state: delivery stops,
    nothing is skipped; a campaign's state; a resident's layout): the message names it and what to do."""

    kind = "corrupt_state"


class ToolMissing(FleetError):
    exit_code = 6
    status = 500
    kind = "tool_missing"


class StorageFault(FleetError):
    """The database cannot be written or trusted: its disk is full, its file system is read-only,
    or the file is corrupt or empty (``fleet.store.faults``). Nothing was written; what was committed
    before is intact. Someone has to act (free space, remount, restore a backup): not transient."""

    exit_code = 7
    status = 507
    kind = "storage"


_BY_KIND: dict[str, type[FleetError]] = {
    cls.kind: cls
    for cls in (
        FleetError,
        UsageError,
        DaemonUnreachable,
        NotFound,
        Forbidden,
        Unauthorized,
        Untrusted,
        Conflict,
        PayloadTooLarge,
        CorruptState,
        ToolMissing,
        StorageFault,
    )
}


def from_kind(kind: str, message: str) -> FleetError:
    """Rebuild the error a daemon reported as ``{"error": {"kind", "message"}}``."""
    return _BY_KIND.get(kind, FleetError)(message)


def status_of(exc: FleetError) -> tuple[int, str]:
    """The HTTP (status, kind) an error is answered with."""
    if isinstance(exc, HttpError):
        return exc.http_status, exc.http_kind
    return exc.status, exc.kind


def describe(exc: Any, limit: int = 5) -> str:
    """Validation problems in words: ``field.path: what is wrong; …`` (the first ``limit``).

    Takes a :class:`fleet.wire.RecordError` or a pydantic ``ValidationError`` (anything with
    ``problems``, or with pydantic's ``errors()``).
    """
    problems: list[tuple[str, str]]
    if hasattr(exc, "problems"):
        problems = list(exc.problems)
    else:
        problems = [
            (".".join(str(p) for p in e.get("loc", ())), str(e.get("msg", "invalid"))) for e in exc.errors()
        ]
    shown = "; ".join(f"{loc or 'body'}: {msg}" for loc, msg in problems[:limit])
    if len(problems) > limit:
        shown += f" (and {len(problems) - limit} more)"
    return shown
