"""Finding the daemon: the discovery rule, the endpoint file, joined daemons, starting and stopping
the local daemon, and its status.

:func:`connect` is the discovery rule of docs/design.md §2: ``FLEET_DAEMON`` (+ ``FLEET_TOKEN`` or
``FLEET_TOKEN_FILE``) wins; otherwise the local daemon named by the endpoint file, if its pid is alive
and it answers; otherwise one is started in the background (under a file lock, so concurrent clients
start one daemon between them) and a one-line notice naming its log goes to stderr.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import fleet
from fleet import errors
from fleet.allocator import daemon_env
from fleet.client.api import Client
from fleet.client.transport import parse_daemons
from fleet.models import Endpoint, Remote, StopProgress
from fleet.paths import Paths, ensure_private_dir, get_paths, read_utf8
from fleet.procs import looks_like_fleet, pid_alive
from fleet.wire import Record, RecordError, field, loads

log = logging.getLogger(__name__)

AUTOSTART_DEADLINE = 10.0
"""Seconds an autostarted daemon has to write its endpoint file and answer ``/v1/health``."""


# ---------------------------------------------------------------- status


class DaemonProbe(Record, kw_only=True):
    """One listed daemon as ``fleet daemon status`` found it: whether ``/v1/health`` answered."""

    url: str
    answers: bool
    pid: int | None = None
    version: str | None = None
    reason: str | None = None
    """Why it did not answer (refused, timed out, …); None when it did."""


class DaemonStatus(Record, kw_only=True):
    """What ``fleet daemon status`` reports (and prints with ``--json``)."""

    running: bool
    url: str | None = None
    pid: int | None = None
    version: str | None = None
    started_at: float | None = None
    remote: bool = False
    """True when the daemon is the one ``FLEET_DAEMON`` names rather than the local one."""
    endpoint_file: str | None = None
    log: str | None = None
    daemons: list[DaemonProbe] = field(default_factory=list)
    """Each daemon ``FLEET_DAEMON`` lists, probed in order (one entry for a single URL); empty for
    the local daemon. ``running`` and ``url`` are the first that answers."""


def endpoint_url(endpoint: Endpoint) -> str:
    """The endpoint's URL with its certificate pin when it serves HTTPS (this daemon only)."""
    return endpoint.url + (f"#sha256={endpoint.fingerprint}" if endpoint.fingerprint else "")


def endpoint_daemons(endpoint: Endpoint) -> str:
    """The daemons a client of this endpoint lists: this one, then its ``peers`` (one store)."""
    return ",".join([endpoint_url(endpoint), *endpoint.peers])


# ---------------------------------------------------------------- discovery


def connect(*, autostart: bool = True, paths: Paths | None = None) -> Client:
    """A client for the daemon this environment means (docs/design.md §2).

    1. ``FLEET_DAEMON`` set: that URL, or those comma-separated URLs (daemons on one store, tried in
       that order), or a joined daemon's name, with ``FLEET_TOKEN`` (or the file ``FLEET_TOKEN_FILE``
       names).
    2. Otherwise the local daemon of the endpoint file, if its pid is alive and ``/v1/health`` answers
       with that pid (then its ``peers``), with ``FLEET_TOKEN`` if set, else the operator token from
       the data dir.
    3. Otherwise, with ``autostart``, a daemon started in the background (one line on stderr says
       where it listens and where its log is); without it, :class:`~fleet.errors.DaemonUnreachable`.
    """
    paths = paths or get_paths()
    token = _env_token()
    url = os.environ.get("FLEET_DAEMON", "").strip()
    if url and "://" not in url:  # the name of a joined daemon (`fleet remote join`)
        remote = load_remote(paths, url)
        return Client(remote.url, token if token is not None else remote.token)
    if url:
        if token is None:
            endpoint = read_endpoint(paths)
            if endpoint is None or endpoint.url.rstrip("/") not in Client(url, "").urls:
                raise errors.UsageError(
                    f"FLEET_DAEMON is set to {url} but FLEET_TOKEN is not: set FLEET_TOKEN to a token "
                    "from `fleet token mint` (or FLEET_TOKEN_FILE to a file holding one)"
                )
            token = _operator_token(paths)
        return Client(url, token)
    endpoint = live_endpoint(paths)
    if endpoint is None:
        if not autostart:
            raise errors.DaemonUnreachable(
                f"no local fleet daemon is running (endpoint file {paths.endpoint}); "
                "start it with `fleet daemon start`, or set FLEET_DAEMON"
            )
        endpoint, _ = start_local_daemon(paths, announce=True)
    return Client(endpoint_daemons(endpoint), token if token is not None else _operator_token(paths))


def remote_path(paths: Paths, name: str) -> Path:
    from fleet.models import PARTICIPANT_RE

    if not PARTICIPANT_RE.fullmatch(name):
        raise errors.UsageError(
            f"{name[:40]!r} is neither a daemon URL (http://… or https://…#sha256=…) nor the name of a"
            " joined daemon (lower case letter first, then letters, digits, '_' or '-')"
        )
    return paths.remotes / f"{name}.json"


def load_remote(paths: Paths, name: str) -> Remote:
    """The joined daemon ``name`` (``fleet remote join … --name NAME``), or UsageError."""
    path = remote_path(paths, name)
    try:
        return loads(Remote, path.read_bytes())
    except FileNotFoundError:
        joined = sorted(p.stem for p in paths.remotes.glob("*.json")) if paths.remotes.is_dir() else []
        raise errors.UsageError(
            f"no joined daemon is named {name!r} (FLEET_DAEMON / --remote): "
            + (f"joined here: {', '.join(joined)}" if joined else "join one with `fleet remote join STRING`")
        ) from None
    except (OSError, RecordError) as exc:
        raise errors.UsageError(f"cannot read the joined daemon {path}: {exc}") from None


def _env_token() -> str | None:
    token = os.environ.get("FLEET_TOKEN", "").strip()
    if token:
        return token
    token_file = os.environ.get("FLEET_TOKEN_FILE", "").strip()
    if token_file:
        try:
            token = read_utf8(Path(token_file).expanduser()).strip()
        except OSError as exc:
            raise errors.UsageError(f"cannot read FLEET_TOKEN_FILE {token_file}: {exc.strerror}") from None
        if not token:
            raise errors.UsageError(f"FLEET_TOKEN_FILE {token_file} is empty")
        return token
    return None


def _operator_token(paths: Paths) -> str:
    try:
        token = read_utf8(paths.operator_token).strip()
    except OSError as exc:
        raise errors.Unauthorized(
            f"cannot read the operator token {paths.operator_token} ({exc.strerror}); "
            "it is created when the daemon first starts: check FLEET_HOME"
        ) from None
    return token


def read_endpoint(paths: Paths) -> Endpoint | None:
    """The endpoint file's contents, or None if it is missing or unreadable (it may be stale)."""
    try:
        return loads(Endpoint, paths.endpoint.read_bytes())
    except (OSError, RecordError):
        return None


def _answers(endpoint: Endpoint) -> bool:
    """True if ``/v1/health`` at the endpoint answers with the endpoint's own pid."""
    try:
        with Client(endpoint_url(endpoint), "", timeout=2.0, retries=0) as probe:
            return probe.health().pid == endpoint.pid
    except errors.FleetError:
        return False


def live_endpoint(paths: Paths) -> Endpoint | None:
    """The local daemon's endpoint if its process is alive and answering, else None."""
    endpoint = read_endpoint(paths)
    if endpoint is None or not pid_alive(endpoint.pid) or not _answers(endpoint):
        return None
    return endpoint


@contextlib.contextmanager
def _autostart_lock(paths: Paths, deadline: float) -> Iterator[None]:
    ensure_private_dir(paths.state)
    with open(paths.state / "autostart.lock", "a+b") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise errors.DaemonUnreachable(
                        f"another fleet command is still starting the daemon (lock {lock.name}); "
                        "retry, or start it with `fleet daemon start`"
                    ) from None
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _daemon_env(paths: Paths) -> dict[str, str]:
    """The environment for a background daemon: the same fleet package, the same FLEET_HOME, the
    system allocator (:mod:`fleet.allocator`: set here, the daemon need not start itself again)."""
    env = daemon_env(os.environ)
    package_root = str(Path(fleet.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    root = paths.data.parent
    if (paths.state, paths.config, paths.logs) == (root / "state", root / "config", root / "logs"):
        env["FLEET_HOME"] = str(root)
    return env


def _log_tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(empty log)"


def start_local_daemon(paths: Paths, *, announce: bool = False) -> tuple[Endpoint, bool]:
    """Start the local daemon in the background unless one runs; returns (endpoint, started).

    The daemon runs in its own session (it outlives this process), its output appended to
    ``paths.daemon_log``. With ``announce``, a started daemon is reported on stderr in one line.
    Raises :class:`~fleet.errors.DaemonUnreachable`, with the log's last lines, if it dies or does not
    answer within :data:`AUTOSTART_DEADLINE` seconds; the daemon's own StorageFault or Conflict (a
    daemon of another state dir holds the store) when it refused to start with one.
    """
    deadline = time.monotonic() + AUTOSTART_DEADLINE
    with _autostart_lock(paths, deadline):
        endpoint = live_endpoint(paths)
        if endpoint is not None:
            return endpoint, False
        ensure_private_dir(paths.logs)
        # No --listen: the local daemon binds its remembered port, so its address outlives restarts.
        cmd = [sys.executable, "-m", "fleet", "daemon", "run"]
        with open(paths.daemon_log, "ab") as logfile:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=logfile,
                stderr=logfile,
                start_new_session=True,
                env=_daemon_env(paths),
            )
        log.info("started daemon pid %s", proc.pid)
        while True:
            endpoint = read_endpoint(paths)
            if endpoint is not None and endpoint.pid == proc.pid and _answers(endpoint):
                break
            if proc.poll() is not None:
                other = live_endpoint(paths)  # lost a race with a daemon started by other means
                if other is not None:
                    return other, False
                said = [ln for ln in _log_tail(paths.daemon_log).splitlines() if "error:" in ln]
                reason = said[-1].split("error:", 1)[1].strip() if said else ""
                if proc.returncode == errors.StorageFault.exit_code:  # a named storage fault: not transient
                    raise errors.StorageFault(
                        f"the fleet daemon refused to start: {reason or 'a storage fault'}"
                        f" (its log: {paths.daemon_log})"
                    )
                if proc.returncode == errors.Conflict.exit_code and "already runs" in reason:
                    # The instance locks' refusal (exit 1 is every FleetError's: the words tell):
                    # a daemon of another state dir holds the store; not transient either.
                    raise errors.Conflict(
                        f"the fleet daemon refused to start: {reason} (its log: {paths.daemon_log})"
                    )
                raise errors.DaemonUnreachable(
                    f"the fleet daemon exited at start (status {proc.returncode}); "
                    f"the end of its log {paths.daemon_log}:\n{_log_tail(paths.daemon_log)}"
                )
            if time.monotonic() > deadline:
                proc.terminate()
                raise errors.DaemonUnreachable(
                    f"the fleet daemon did not answer within {AUTOSTART_DEADLINE:g}s; "
                    f"the end of its log {paths.daemon_log}:\n{_log_tail(paths.daemon_log)}"
                )
            time.sleep(0.02)
    if announce:
        # The one line docs/design.md §2 promises the user; stderr, so stdout stays data (and protocol).
        sys.stderr.write(f"fleet: started the local daemon at {endpoint.url} (log: {paths.daemon_log})\n")
    return endpoint, True


def connected_agents(paths: Paths) -> dict[str, list[str]] | None:
    """The participants whose channels the local daemon hears now (presence ``live``), by wave name;
    None when it cannot be asked (not running, not answering within a few seconds, no operator
    token). What ``fleet daemon stop`` says before stopping it."""
    endpoint = read_endpoint(paths)
    if endpoint is None or not pid_alive(endpoint.pid):
        return None
    try:
        with Client(endpoint_url(endpoint), _operator_token(paths), timeout=3.0, retries=0) as c:
            live = {
                w.name: sorted(p.participant for p in c.presence(w.id) if p.state == "live")
                for w in c.list_waves()
            }
    except errors.FleetError as exc:
        log.debug("cannot ask the daemon who is connected: %s", exc.message)
        return None
    return {wave: names for wave, names in sorted(live.items()) if names}


def stop_local_daemon(paths: Paths, timeout: float = 10.0) -> Endpoint | None:
    """SIGTERM the local daemon and wait until its process is gone; returns what was stopped.

    None means no local daemon was running (a stale endpoint file is left for the next daemon to
    replace). The wait lasts as long as the daemon shows progress: it writes each phase of its
    graceful stop (and each request in flight that finishes) to ``state/daemon.stopping``, with the
    longest that phase can take. Raises :class:`~fleet.errors.FleetError` once nothing has moved for
    ``timeout`` seconds, or for longer than the current phase's own bound.
    """
    endpoint = read_endpoint(paths)
    if endpoint is None or not pid_alive(endpoint.pid):
        return None
    if not _answers(endpoint) and not looks_like_fleet(endpoint.pid):
        log.warning("pid %s in %s is not a fleet daemon; not signalling it", endpoint.pid, paths.endpoint)
        return None
    try:
        os.kill(endpoint.pid, signal.SIGTERM)
    except ProcessLookupError:
        return endpoint
    seen: StopProgress | None = None
    moved = time.monotonic()
    allowed = timeout
    while pid_alive(endpoint.pid):
        progress = _stop_progress(paths, endpoint.pid)
        if progress is not None and progress != seen:
            seen, moved = progress, time.monotonic()
            allowed = max(timeout, progress.bound + STOP_SLACK)
        stalled = time.monotonic() - moved
        if stalled > allowed:
            what = (
                f"it has been {seen.phase!r} ({seen.inflight} in flight) for {stalled:.0f}s"
                if seen is not None
                else f"it showed no sign of stopping within {timeout:g}s of SIGTERM"
            )
            raise errors.FleetError(
                f"the fleet daemon (pid {endpoint.pid}) stopped making progress: {what}; see"
                f" {paths.daemon_log}, wait and run `fleet daemon stop` again, or `kill -9 {endpoint.pid}`"
            )
        time.sleep(0.02)
    return endpoint


STOP_SLACK = 2.0
"""Seconds past a stop phase's own bound before ``daemon stop`` calls it stuck."""


def _stop_progress(paths: Paths, pid: int) -> StopProgress | None:
    """The stopping daemon's last progress report, if that daemon (``pid``) wrote one."""
    try:
        p = loads(StopProgress, paths.daemon_stopping.read_bytes())
    except (OSError, RecordError):
        return None
    return p if p.pid == pid else None


def local_status(paths: Paths) -> DaemonStatus:
    """Whether the local daemon runs and answers, where, and since when."""
    endpoint = live_endpoint(paths)
    status = DaemonStatus(running=False, endpoint_file=str(paths.endpoint), log=str(paths.daemon_log))
    if endpoint is not None:
        status.running, status.url, status.pid = True, endpoint.url, endpoint.pid
        status.version, status.started_at = endpoint.version, endpoint.started_at
    return status


def remote_status(url: str) -> DaemonStatus:
    """Whether each daemon ``url`` (``FLEET_DAEMON``: one URL or several) lists answers
    ``/v1/health``, each asked on its own; the status is the first that answers."""
    probes: list[DaemonProbe] = []
    for daemon in parse_daemons(url):
        try:
            with Client(daemon.pinned, "", timeout=5.0, retries=0) as probe:
                health = probe.health()
        except errors.DaemonUnreachable as exc:
            reason = exc.message.partition("(")[2].partition(")")[0] or exc.message
            probes.append(DaemonProbe(url=daemon.url, answers=False, reason=reason))
            continue
        probes.append(DaemonProbe(url=daemon.url, answers=True, pid=health.pid, version=health.version))
    first = next((p for p in probes if p.answers), None)
    if first is None:
        return DaemonStatus(running=False, url=probes[0].url, remote=True, daemons=probes)
    return DaemonStatus(
        running=True, url=first.url, pid=first.pid, version=first.version, remote=True, daemons=probes
    )
