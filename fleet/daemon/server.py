"""The daemon's process: its listeners, its locks, TLS, start and graceful stop (the calls themselves
are :mod:`fleet.daemon.dispatch`'s).

What a caller may rely on:

- It listens on ``127.0.0.1`` unless a non-loopback address is asked for explicitly
  (``allow_remote``); every request but ``/v1/health`` needs a bearer token.
- The operator token is created at first start in ``data/operator.token`` (mode 0600).
- One daemon per store: an ``flock`` on ``<db>.lock`` beside the database (:mod:`fleet.store.lock`,
  naming this daemon's pid and url for a refused one) and one on ``state/daemon.lock`` are held for
  the daemon's life (the kernel drops them if the process dies, so a stale lock never wedges), and
  the endpoint file ``state/daemon.json`` names the url and pid while it runs.
- On SIGTERM it stops accepting, wakes every long-poll, lets in-flight requests finish, closes the
  database and removes the endpoint file.
- The HTTP rules (bodies, one ``send`` per response, JSON errors, the idle timeout of
  ``idle_timeout`` seconds on a connection without a complete request) are :mod:`fleet.httpbase`'s.
- With ``ui=`` it also serves the operator console (:mod:`fleet.console`) on a listener of its own,
  started after the API and stopped before the store closes; without it nothing else listens.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fleet import __version__, errors
from fleet.console import Console
from fleet.daemon.dispatch import BOUND, Dispatcher
from fleet.daemon.presence import PresenceBook
from fleet.daemon.request import Raw
from fleet.daemon.supervisor import SupervisorBook
from fleet.daemon.wakes import Notifier
from fleet.httpbase import (
    IDLE_TIMEOUT,
    Answering,
    Handler,
    Server,
    Turn,
    is_loopback,
    is_wildcard,
    parse_listen,
)
from fleet.models import DEFAULT_MAX_BLIP_BYTES, Endpoint, StopProgress
from fleet.paths import Paths, ensure_private_dir, hide_password, read_utf8, write_private
from fleet.store import Store, open_store
from fleet.store.faults import storage_faults
from fleet.store.lock import StoreLock
from fleet.store.schema import is_postgres
from fleet.tls import shown
from fleet.wire import dumps, loads

if TYPE_CHECKING:
    import ssl

    from fleet.tls import ServerCert

log = logging.getLogger(__name__)

STORE_CLOSE_BOUND = 60.0
"""Seconds closing the store may take at a stop (its last WAL checkpoint), as shown to `daemon stop`."""
BODY_SLACK = 64 * 1024
"""A request body may be this much larger than the blip limit (the JSON around the text)."""


def ensure_operator_token(paths: Paths) -> str:
    """The operator token, created (0600) on first start."""
    path = paths.operator_token
    if path.exists():
        token = path.read_text(encoding="utf-8").strip()
        if token:
            if path.stat().st_mode & 0o077:
                os.chmod(path, 0o600)
            return token
    token = secrets.token_urlsafe(32)
    write_private(path, token + "\n")
    return token


class Daemon(Dispatcher):
    """The daemon. ``start()`` serves in a thread (tests); ``serve_forever()`` is the CLI's foreground.

    ``idle_timeout``: seconds a connection may go without a complete request head before it is
    closed (the console's connections too).
    """

    def __init__(
        self,
        paths: Paths,
        listen: str = "127.0.0.1:0",
        *,
        max_blip_bytes: int = DEFAULT_MAX_BLIP_BYTES,
        allow_remote: bool = False,
        ping_ttl: float = 90.0,
        ui: str | None = None,
        allow_remote_ui: bool = False,
        idle_timeout: float = IDLE_TIMEOUT,
        host_names: Sequence[str] = (),
        tls: bool | None = None,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        insecure_plain_http: bool = False,
        remember_port: bool = False,
    ) -> None:
        host, port = parse_listen(listen)
        if not is_loopback(host) and not allow_remote:
            raise errors.UsageError(
                f"refusing to listen on non-loopback address {host}: pass --listen {host}:{port}"
                " explicitly to serve other machines (tokens are always required)"
            )
        if max_blip_bytes < 1:
            raise errors.UsageError("--max-blip-bytes must be at least 1")
        if not idle_timeout > 0:
            raise errors.UsageError("the idle timeout must be a positive number of seconds")
        if paths.store_url and not is_postgres(paths.store_url):
            raise errors.UsageError(
                f"the store {hide_password(paths.store_url)!r} (FLEET_STORE or --store) is not a"
                " postgresql:// URL: give one (postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE),"
                " or unset FLEET_STORE for the SQLite file in the data dir"
            )
        self.paths = paths
        self.host, self.port = host, port
        self.max_blip_bytes = max_blip_bytes
        self.idle_timeout = idle_timeout
        self.host_names = tuple(host_names)
        """Names other machines reach this daemon by (``--host-name``): accepted as ``Host``."""
        if (tls_cert is None) != (tls_key is None):
            raise errors.UsageError(
                "give both --tls-cert and --tls-key (a certificate and its key), or neither"
            )
        if insecure_plain_http and (tls or tls_cert is not None):
            raise errors.UsageError("--insecure-plain-http and TLS options contradict each other: pick one")
        if tls is None:
            tls = tls_cert is not None or (not is_loopback(host) and not insecure_plain_http)
        self.tls = tls
        """Serve HTTPS: off loopback unless ``insecure_plain_http``, and with a certificate given
        (``tls`` forces it either way)."""
        self.tls_cert, self.tls_key = tls_cert, tls_key
        self.insecure_plain_http = insecure_plain_http
        self.certificate: ServerCert | None = None
        """The certificate served (made or loaded at start), when some listener serves HTTPS."""
        self._tls_ctx: ssl.SSLContext | None = None
        self.remember_port = remember_port and port == 0
        """The local daemon (docs/design.md §2): bind the port remembered in ``state/daemon.port``
        (a fresh one the first time, or when another process took it) and remember what was bound."""
        self.presence = PresenceBook(ping_ttl=ping_ttl)
        self.supervisors = SupervisorBook()
        self.notifier = Notifier()
        self._lock_fd: int | None = None
        self._store_lock: StoreLock | None = None
        self._httpd: _ApiServer | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self.store: Store | None = None
        self.operator_token = ""
        self.url = ""
        self.routes = BOUND
        self.console: Console | None = Console(self, ui, allow_remote=allow_remote_ui) if ui else None
        """The operator console (``ui=HOST:PORT``), or None: off unless asked for."""
        self.console_link = ""
        """The console's first one-time login link (a credential: shown to the operator, not logged)."""

    # ---------------------------------------------------------------- lifecycle

    @property
    def fingerprint(self) -> str | None:
        """The served certificate's SHA-256 fingerprint (clients pin it), None on plain HTTP."""
        return self.certificate.fingerprint if self.certificate else None

    def tls_context(self, host: str) -> ssl.SSLContext | None:
        """The TLS context of a listener on ``host``: the daemon's own listener when :attr:`tls`, any
        other (the console) off loopback unless ``insecure_plain_http``. Made once, shared."""
        wanted = self.tls if host == self.host else not is_loopback(host) and not self.insecure_plain_http
        if not wanted:
            return None
        if self._tls_ctx is None:
            from fleet import tls as fleet_tls

            if self.tls_cert is not None and self.tls_key is not None:
                cert = fleet_tls.load_cert(self.tls_cert, self.tls_key)
            else:
                names = [self.host, *self.host_names, socket.gethostname(), "localhost", "127.0.0.1"]
                cert = fleet_tls.ensure_self_signed(self.paths, names)
            self._tls_ctx = fleet_tls.server_context(cert)
            self.certificate = cert
        return self._tls_ctx

    def _acquire_instance_lock(self) -> None:
        """The store's lock (one daemon per database, whatever its state dir: :mod:`fleet.store.lock`),
        then the state dir's (one daemon per endpoint file, whatever its store)."""
        ensure_private_dir(self.paths.data)
        if not self.paths.store_url:  # several daemons may share a PostgreSQL store (docs/design.md §2)
            self._store_lock = StoreLock.acquire(
                self.paths.store_lock, self.paths.db, what="the daemon", state=self.paths.state
            )
        try:
            ensure_private_dir(self.paths.state)
            fd = os.open(self.paths.daemon_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                where = "unknown address"
                try:
                    ep = loads(Endpoint, self.paths.endpoint.read_text())
                    where = f"{ep.url} (pid {ep.pid})"
                except (OSError, ValueError):
                    pass
                raise errors.Conflict(
                    f"a daemon already runs with state dir {self.paths.state} at {where}, on another"
                    " store: use it, or stop it with `fleet daemon stop`"
                ) from None
        except BaseException:
            if self._store_lock is not None:
                self._store_lock.release()
                self._store_lock = None
            raise
        self._lock_fd = fd

    def _open(self) -> None:
        self._acquire_instance_lock()
        with contextlib.suppress(OSError):  # a stop that died half way left it: not ours
            self.paths.daemon_stopping.unlink()
        try:
            self.operator_token = ensure_operator_token(self.paths)
            self.store = open_store(self.paths.store, max_blip_bytes=self.max_blip_bytes)
            if self.store.shared:  # other daemons on the store: their commits wake ours, ours theirs
                self.store.listen(self.notifier.woken)
                self.notifier.publish = self.store.announce
            httpd = self._listen()
            httpd.daemon = self
            self._httpd = httpd
            self.url = httpd.url
            if self.remember_port:
                write_private(self.paths.daemon_port, f"{httpd.server_address[1]}\n")
            endpoint = Endpoint(
                url=self.url,
                pid=os.getpid(),
                started_at=time.time(),
                version=__version__,
                fingerprint=self.fingerprint,
                store_id=self.store.store_id,
            )
            write_private(self.paths.endpoint, dumps(endpoint) + "\n")
            if self._store_lock is not None:
                self._store_lock.announce(self.url)
            if self.console is not None:
                try:
                    self.console_link = self.console.start()
                except BaseException:
                    httpd.server_close()
                    raise
        except BaseException:
            if self.store is not None:  # closed before its lock goes: no one else writes it meanwhile
                self.store.close()
                self.store = None
            self._release()
            raise
        log.info(
            "fleet daemon %s listening on %s (data %s, store %s)",
            __version__,
            self.url,
            self.paths.data,
            hide_password(str(self.paths.store)),
        )
        if self.certificate is not None:
            log.info(
                "TLS certificate fingerprint %s (%s)",
                shown(self.certificate.fingerprint),
                self.certificate.cert,
            )
        if not is_loopback(self.host) and not self.tls:
            log.warning(
                "WARNING: PLAIN HTTP on the non-loopback address %s (--insecure-plain-http): every token,"
                " the operator's included, crosses the network IN CLEAR",
                self.host,
            )
        if is_wildcard(self.host):
            log.warning(
                "WARNING: listening on EVERY network interface (%s): any machine that can reach this one"
                " can reach the daemon; give one address (--listen ADDR:PORT) to serve one network",
                self.host,
            )

    def _server(self, port: int) -> _ApiServer:
        return _ApiServer(
            (self.host, port),
            _ApiHandler,
            name="fleet-daemon",
            body_limit=self.max_blip_bytes + BODY_SLACK,
            limit_note=f"blips are limited to {self.max_blip_bytes} bytes",
            idle_timeout=self.idle_timeout,
            closing=lambda: self.notifier.closing,
            host_names=self.host_names,
            tls=self.tls_context(self.host),
        )

    def _listen(self) -> _ApiServer:
        """Bind the listener: the remembered port when there is one and it is free, else ``self.port``."""
        if self.remember_port:
            try:
                text = read_utf8(self.paths.daemon_port).strip()
            except OSError:
                text = ""
            if text.isdigit() and 0 < int(text) < 65536:
                try:
                    return self._server(int(text))
                except OSError as exc:
                    log.warning(
                        "the remembered port %s is not available (%s): taking a new one; channels and "
                        "hooks started against the old address need `fleet respawn --force`",
                        text,
                        exc.strerror or exc,
                    )
        return self._server(self.port)

    def start(self) -> None:
        """Serve in a background thread; returns once the socket is listening."""
        with storage_faults(self.paths.store):  # a full or read-only disk at start, named
            self._open()
        assert self._httpd is not None
        self._thread = self._httpd.start()

    def serve_forever(self) -> None:
        """Serve in the foreground until SIGTERM or SIGINT, then shut down gracefully."""
        with storage_faults(self.paths.store):  # a full or read-only disk at start, named
            self._open()
        assert self._httpd is not None
        if self.certificate is not None:
            sys.stderr.write(
                f"fleet: TLS certificate fingerprint {shown(self.certificate.fingerprint)}"
                f" (clients pin it: {self.url}#sha256={self.certificate.fingerprint})\n"
            )
        if self.console_link:
            # A credential: onto the operator's terminal (stderr), never into the log's INFO lines.
            sys.stderr.write(f"fleet: console: log in at {self.console_link} (one-time link)\n")
            sys.stderr.flush()

        def on_signal(signum: int, _frame: object) -> None:
            log.info("signal %s: shutting down", signum)
            threading.Thread(target=self.stop, name="fleet-shutdown", daemon=True).start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        try:
            self._httpd.serve_forever(poll_interval=0.2)
        finally:
            self.stop()
            self._stopped.wait(30)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, wake long-polls, let in-flight requests finish, close, clean up. Idempotent."""
        # On SIGTERM both the signal's thread and serve_forever's `finally` call this: one does the work.
        with self._stop_lock:
            self._stop(timeout)

    def _stop(self, timeout: float) -> None:
        if self._stopped.is_set() or self._httpd is None:
            return
        # Each phase is shown in state/daemon.stopping, so `fleet daemon stop` waits while it moves.
        self._stopping("closing streams", timeout)
        self.notifier.close()  # from here on new requests get a 503, and every long-poll returns
        if self.console is not None:
            self.console.stop(timeout)
        self._httpd.stop(timeout, lambda n: self._stopping("finishing requests", timeout, n))
        if self.store is not None:
            self._stopping("closing the store", STORE_CLOSE_BOUND)
            self.store.close()
        self._release()
        with contextlib.suppress(OSError):
            self.paths.daemon_stopping.unlink()
        self._stopped.set()
        log.info("fleet daemon stopped")

    def _stopping(self, phase: str, bound: float, inflight: int = 0) -> None:
        if inflight:
            log.info("stopping: %s (%d in flight)", phase, inflight)
        progress = StopProgress(pid=os.getpid(), phase=phase, inflight=inflight, bound=bound, at=time.time())
        with contextlib.suppress(OSError):
            write_private(self.paths.daemon_stopping, dumps(progress) + "\n")

    def _release(self) -> None:
        try:
            ep = loads(Endpoint, self.paths.endpoint.read_text())
            if ep.pid == os.getpid():
                self.paths.endpoint.unlink()
        except (OSError, ValueError):
            pass
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._store_lock is not None:  # last: the store is closed (or was never opened) by now
            self._store_lock.release()
            self._store_lock = None


class _ApiServer(Server):
    daemon: Daemon

    def turn(self) -> contextlib.AbstractContextManager[Turn]:
        """The requests of one turn of the loop write in one transaction (a savepoint each), and
        the wake-ups of what they wrote go out once it has committed (docs/performance.md)."""
        store = self.daemon.store
        return super().turn() if store is None else self._grouped(store)

    @contextlib.contextmanager
    def _grouped(self, store: Store) -> Iterator[Turn]:
        with self.daemon.notifier.held(), store.group() as group:
            yield group

    def after_burst(self) -> None:
        gc.collect()  # the burst's garbage first: the readers renewed next are not placed among it
        store = self.daemon.store
        if store is not None:
            store.shrink_readers()
        super().after_burst()


class _ApiHandler(Handler):
    server_version = f"fleet/{__version__}"
    server: _ApiServer

    def handle_request(self, body: bytes) -> Answering:
        got = self.server.daemon.dispatch(
            self.command,
            self.path,
            self.headers.get("Authorization"),
            body,
            key=self.headers.get("Idempotency-Key"),
        )
        status, payload = got if isinstance(got, tuple) else (yield from got)
        if isinstance(payload, Raw):
            self.respond(status, payload, "application/json")
        else:
            self.respond_json(status, payload)

    def request_done(self) -> None:
        """Each request gives its thread's read connection back to the store's pool as it ends: an
        idle keep-alive connection holds none (nor does a parked one: the long-poll gave it back)."""
        store = self.server.daemon.store
        if store is not None:
            store.release_reader()
