"""The typed client of the store daemon, and the rule that finds (or starts) the daemon.

Three modules, cut as httpx cuts API from transport:

- :mod:`fleet.client.transport`: the socket, resends and request keys, and
  :meth:`~fleet.client.transport.Transport.call`, the one way a request is made (through the route
  table, :mod:`fleet.routes`);
- :mod:`fleet.client.api`: :class:`Client`, one typed method per route;
- :mod:`fleet.client.discovery`: :func:`connect` (docs/design.md §2), the endpoint file, joined
  daemons, starting, stopping and the status of the local daemon.

Everything callers import from here is re-exported below, so ``from fleet.client import Client,
connect`` stays the way in (the discovery names on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleet.client.api import Client
from fleet.client.transport import (
    USER_AGENT,
    Daemon,
    Failover,
    Transport,
    format_daemons,
    parse_daemon,
    parse_daemons,
    parse_pin,
)

if TYPE_CHECKING:
    from fleet.client.discovery import (
        AUTOSTART_DEADLINE,
        STOP_SLACK,
        DaemonProbe,
        DaemonStatus,
        connect,
        connected_agents,
        endpoint_daemons,
        endpoint_url,
        live_endpoint,
        load_remote,
        local_status,
        read_endpoint,
        remote_path,
        remote_status,
        start_local_daemon,
        stop_local_daemon,
    )

_DISCOVERY = frozenset(
    {
        "AUTOSTART_DEADLINE",
        "STOP_SLACK",
        "DaemonProbe",
        "DaemonStatus",
        "connect",
        "connected_agents",
        "endpoint_daemons",
        "endpoint_url",
        "live_endpoint",
        "load_remote",
        "local_status",
        "read_endpoint",
        "remote_path",
        "remote_status",
        "start_local_daemon",
        "stop_local_daemon",
    }
)


def __getattr__(name: str) -> Any:
    """The discovery names, imported on first use: a channel handed its daemon's URL never needs
    them, nor ``subprocess`` and the process helpers they import (3.5 ms of its start)."""
    if name in _DISCOVERY:
        from fleet.client import discovery

        value = getattr(discovery, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AUTOSTART_DEADLINE",
    "STOP_SLACK",
    "USER_AGENT",
    "Client",
    "Daemon",
    "DaemonProbe",
    "DaemonStatus",
    "Failover",
    "Transport",
    "connect",
    "connected_agents",
    "endpoint_daemons",
    "endpoint_url",
    "format_daemons",
    "live_endpoint",
    "load_remote",
    "local_status",
    "parse_daemon",
    "parse_daemons",
    "parse_pin",
    "read_endpoint",
    "remote_path",
    "remote_status",
    "start_local_daemon",
    "stop_local_daemon",
]
