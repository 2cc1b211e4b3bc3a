"""The one place fleet computes where things live on disk.

``FLEET_HOME`` (if set) holds everything: ``data/`` (the SQLite store, its lock and the operator token),
``state/`` (the daemon endpoint file, channel cursors, routing logs), ``config/`` (user layouts) and
``logs/``. Without it the platform's user directories are used. ``fleet paths`` prints them.
``FLEET_STORE`` (or ``fleet daemon run --store``) puts the store on PostgreSQL instead of the SQLite
file: a ``postgresql://`` URL, printed with its password hidden (:func:`hide_password`).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import NamedTuple

APP = "fleet"


class Paths(NamedTuple):
    """Where fleet's files are: immutable and hashable. A named tuple, not a record: every command
    computes its paths, and this module loads nothing beyond the standard library's basics."""

    data: Path
    state: Path
    config: Path
    logs: Path
    store_url: str = ""
    """``FLEET_STORE``: the ``postgresql://`` URL of a store on PostgreSQL ("" for the SQLite file)."""

    @property
    def store(self) -> Path | str:
        """Where the store is: :attr:`store_url` when set, else the SQLite file :attr:`db`."""
        return self.store_url or self.db

    @property
    def db(self) -> Path:
        return self.data / "fleet.sqlite3"

    @property
    def operator_token(self) -> Path:
        return self.data / "operator.token"

    @property
    def tls_key(self) -> Path:
        """The daemon's TLS private key, made at the first non-loopback start (0600)."""
        return self.data / "tls" / "daemon.key"

    @property
    def tls_cert(self) -> Path:
        """The daemon's self-signed certificate beside its key (0600): clients pin its fingerprint."""
        return self.data / "tls" / "daemon.crt"

    @property
    def remotes(self) -> Path:
        """Joined daemons, one 0600 ``NAME.json`` each (``fleet remote join``)."""
        return self.data / "remotes"

    @property
    def endpoint(self) -> Path:
        """Written by a running daemon: its url and pid. Removed on shutdown."""
        return self.state / "daemon.json"

    @property
    def daemon_port(self) -> Path:
        """The local daemon's remembered port: kept across restarts, so its address never changes."""
        return self.state / "daemon.port"

    @property
    def daemon_stopping(self) -> Path:
        """Written by a daemon while it stops gracefully: its phase (:class:`fleet.models.StopProgress`)."""
        return self.state / "daemon.stopping"

    @property
    def store_lock(self) -> Path:
        """Beside the database: held by the one process writing it (the daemon, or ``fleet import``),
        whatever its state dir, with that process's pid and url in it (:mod:`fleet.store.lock`)."""
        return self.db.with_name(self.db.name + ".lock")

    @property
    def daemon_lock(self) -> Path:
        """Held by the daemon that owns this state dir (its endpoint file): one daemon per state dir."""
        return self.state / "daemon.lock"

    @property
    def daemon_log(self) -> Path:
        return self.logs / "daemon.log"

    @property
    def tokens(self) -> Path:
        """Participant token files minted for spawned sessions (each 0600)."""
        return self.state / "tokens"

    @property
    def channels(self) -> Path:
        """Channel cursor state files and their locks."""
        return self.state / "channels"

    @property
    def layouts(self) -> Path:
        return self.config / "layouts"

    def as_dict(self) -> dict[str, str]:
        return {
            "data": str(self.data),
            "state": str(self.state),
            "config": str(self.config),
            "logs": str(self.logs),
            "db": str(self.db),
            "store": hide_password(str(self.store)),
            "store_lock": str(self.store_lock),
            "operator_token": str(self.operator_token),
            "tls_cert": str(self.tls_cert),
            "remotes": str(self.remotes),
            "endpoint": str(self.endpoint),
            "daemon_port": str(self.daemon_port),
            "daemon_log": str(self.daemon_log),
            "tokens": str(self.tokens),
            "channels": str(self.channels),
            "layouts": str(self.layouts),
        }


def get_paths() -> Paths:
    """The paths in force now (reads ``FLEET_HOME`` at every call, so tests can repoint it)."""
    home = os.environ.get("FLEET_HOME")
    if home:
        root = Path(home).expanduser().resolve()
        return Paths(root / "data", root / "state", root / "config", root / "logs", _store_url())
    import platformdirs  # only without FLEET_HOME: it costs every command a few milliseconds

    return Paths(
        Path(platformdirs.user_data_dir(APP)),
        Path(platformdirs.user_state_dir(APP)),
        Path(platformdirs.user_config_dir(APP)),
        Path(platformdirs.user_log_dir(APP)),
        _store_url(),
    )


def _store_url() -> str:
    return os.environ.get("FLEET_STORE", "").strip()


def hide_password(url: str) -> str:
    """``url`` with the password in it (``scheme://user:PASSWORD@host``) replaced by ``***``: the form
    of a store URL that is printed or logged (anything else is returned as it is)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    rest, q, query = rest.partition("?")
    if q:  # libpq takes it as a parameter too
        query = "&".join("password=***" if p.startswith("password=") else p for p in query.split("&"))
    auth, at, host = rest.rpartition("@")
    if at and ":" in auth:
        rest = f"{auth.split(':', 1)[0]}:***@{host}"
    return f"{scheme}://{rest}{q}{query}"


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) readable by the owner only."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Atomically write ``text`` to ``path`` with mode 0600 (never world-readable, even briefly)."""
    ensure_private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_utf8(path: Path) -> str:
    """``path``'s text. A file that is not UTF-8 (edited by hand, or damaged) is an OSError
    (``EILSEQ``, its ``strerror`` naming the byte) like an unreadable one, so a caller that says why
    a file cannot be read says this too, instead of letting a UnicodeDecodeError out."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        why = f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        raise OSError(errno.EILSEQ, why, str(path)) from None
