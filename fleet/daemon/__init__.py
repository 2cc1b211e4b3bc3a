"""The store daemon: the store over HTTP/1.1 + JSON (the contract is ``docs/http-api.md``; the routes
are :mod:`fleet.routes`).

What a caller may rely on (each module's docstring says more):

- :mod:`fleet.daemon.server`: :class:`Daemon`, the process: listeners (loopback unless asked; HTTPS
  off loopback), the operator token, one daemon per store (its locks and endpoint file), a graceful
  stop on SIGTERM, and the operator console when ``ui=`` is given.
- :mod:`fleet.daemon.dispatch`: each route of the table bound to its handler by name; tokens,
  request keys (a repeat gets the first answer) and long-polls.
- :mod:`fleet.daemon.wakes`: long-polls wake on commits that touch what they read (keyed waiters),
  never by polling; each wake-up re-checks that the reader may still see what it reads. A waiting
  long-poll is a park on the HTTP loop (:mod:`fleet.httpbase`): it holds no thread.
- :mod:`fleet.daemon.request`: a request's strict parsing (bodies, query parameters).
- The handlers, one module per noun: :mod:`~fleet.daemon.meta`, :mod:`~fleet.daemon.waves`,
  :mod:`~fleet.daemon.wavelets`, :mod:`~fleet.daemon.blips`, :mod:`~fleet.daemon.summaries`,
  :mod:`~fleet.daemon.feed`, :mod:`~fleet.daemon.presence` (presence lives in memory only),
  :mod:`~fleet.daemon.sessions`, :mod:`~fleet.daemon.supervisor` (leases in memory),
  :mod:`~fleet.daemon.memory`, :mod:`~fleet.daemon.permissions`, :mod:`~fleet.daemon.budgets`,
  :mod:`~fleet.daemon.tokens`.

``from fleet.daemon import Daemon`` stays the way in: the names below are re-exported (``ROUTES`` here
is the table bound to its handlers; :data:`fleet.routes.ROUTES` is the table).
"""

from __future__ import annotations

from fleet.daemon.dispatch import BOUND as ROUTES
from fleet.daemon.dispatch import MAX_TOKEN, MAX_WAIT, Bound, Dispatcher
from fleet.daemon.presence import PresenceBook
from fleet.daemon.server import (
    BODY_SLACK,
    STORE_CLOSE_BOUND,
    Daemon,
    ensure_operator_token,
)
from fleet.daemon.supervisor import SupervisorBook
from fleet.daemon.wakes import Notifier, member_key, permission_key
from fleet.httpbase import IDLE_TIMEOUT, is_loopback, parse_listen

__all__ = [
    "BODY_SLACK",
    "IDLE_TIMEOUT",
    "MAX_TOKEN",
    "MAX_WAIT",
    "ROUTES",
    "STORE_CLOSE_BOUND",
    "Bound",
    "Daemon",
    "Dispatcher",
    "Notifier",
    "PresenceBook",
    "SupervisorBook",
    "ensure_operator_token",
    "is_loopback",
    "member_key",
    "parse_listen",
    "permission_key",
]
