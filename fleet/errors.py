"""The one error tree of fleet.

Every failure a user or an agent can cause is one of these classes. Each carries the exit code the
CLI returns for it (DESIGN §7) and the HTTP status the daemon answers with, and its message says what
went wrong and what to do about it. The CLI turns them into exit codes at exactly one place
(``fleet.cli.main``); the daemon turns them into JSON error bodies; the client turns those bodies back
into the same classes, so a caller sees the same exception locally and remotely.

    FleetError (1, 500)
    ├── UsageError (2, 400)          bad input: names, sizes, malformed requests
    ├── DaemonUnreachable (3)        no daemon answered at the configured address
    ├── NotFound (4, 404)            unknown wave, wavelet, blip, token — or invisible to the caller
    ├── Forbidden (5, 403)           visible, but the caller may not do this
    ├── Unauthorized (5, 401)        missing, wrong or revoked token
    ├── Conflict (1, 409)            the name is taken, the daemon already runs
    ├── PayloadTooLarge (2, 413)     a blip or request body over the limit
    └── ToolMissing (6)              tmux, claude or another agent command is not installed
"""

from __future__ import annotations

from typing import ClassVar


class FleetError(Exception):
    """Base class. ``exit_code`` is the CLI exit status; ``status`` the HTTP status."""

    exit_code: ClassVar[int] = 1
    status: ClassVar[int] = 500
    kind: ClassVar[str] = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(FleetError):
    exit_code = 2
    status = 400
    kind = "usage"


class DaemonUnreachable(FleetError):
    exit_code = 3
    status = 503
    kind = "unreachable"


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


class Conflict(FleetError):
    exit_code = 1
    status = 409
    kind = "conflict"


class PayloadTooLarge(FleetError):
    exit_code = 2
    status = 413
    kind = "too_large"


class ToolMissing(FleetError):
    exit_code = 6
    status = 500
    kind = "tool_missing"


_BY_KIND: dict[str, type[FleetError]] = {
    cls.kind: cls
    for cls in (
        FleetError,
        UsageError,
        DaemonUnreachable,
        NotFound,
        Forbidden,
        Unauthorized,
        Conflict,
        PayloadTooLarge,
        ToolMissing,
    )
}


def from_kind(kind: str, message: str) -> FleetError:
    """Rebuild the error a daemon reported as ``{"error": {"kind", "message"}}``."""
    return _BY_KIND.get(kind, FleetError)(message)
