"""The delivery state file: where a participant stands in each wavelet, kept across restarts.

One JSON file per (store, wave, participant) under the state dir (the store by its identity,
minted once per database: a restarted daemon, or one on another port, is the same store), replaced
atomically, with ``<file>.lock`` beside it: each save writes ``.<file>.spare`` and exchanges it with
the file (``renameat2(RENAME_EXCHANGE)``), so the spare is the previous version, rewritten in place
by the next save; where the system or file system cannot exchange, a temporary file is renamed
over instead. Whoever delivers holds that lock
(``fcntl.flock``), so two transports never deliver the same blips twice; the kernel drops a dead
holder's lock, so it never wedges. A restarted holder resumes from the file: no replay, no gap.
A file that cannot be read raises :class:`~fleet.errors.CorruptState` and is never overwritten,
so a corrupt file stops delivery instead of skipping blips.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import time
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import urlsplit

from fleet.delivery.frames import Frame
from fleet.errors import CorruptState
from fleet.ids import digest
from fleet.paths import ensure_private_dir, read_utf8
from fleet.wire import Record, RecordError, dump, field, loads

Path_ = Literal["channel", "hook", "waiting"]
Route = Literal["unknown", "channel", "hook", "unconfirmed"]


class Pending(Record, kw_only=True, forbid_unknown_fields=True):
    """A frame handed out and not yet seen entering the model's context (receipts on)."""

    frame: Frame
    path: Path_
    """How it was handed out last: pushed on the channel, written by the hook, or ``waiting`` for
    the hook's next arm (owed, not yet handed)."""
    handed_at: float
    """When (Unix seconds)."""
    run: str = ""
    """Which channel or hook process handed it (a restart makes earlier hand-outs suspect)."""
    queued_at: float | None = None
    """When Claude Code accepted it into its queue, if it did (it enters the context later)."""
    attempts: int = 1


class DeliveryState(Record, kw_only=True, forbid_unknown_fields=True):
    """The state file's content. Field names are the file format; ``version`` guards changes
    (version 1 files, written before receipts, load as version 2 with nothing pending)."""

    version: Literal[1, 2] = 2
    daemon: str
    wave: str
    participant: str
    cursors: dict[str, str] = field(default_factory=dict)
    """wavelet id -> id of the last blip handed out there (delivered, noticed or stepped over)."""
    delivered: dict[str, int] = field(default_factory=dict)
    """wavelet id -> pushes since the cap was last reset there."""
    exhausted: dict[str, str] = field(default_factory=dict)
    """wavelet id -> id of the blip that produced the exhaustion notice (at most one per reset)."""
    updated_at: float = 0.0
    pending: list[Pending] = field(default_factory=list)
    """Frames handed out whose blips the session's record does not yet show in its context."""
    confirmed: dict[str, str] = field(default_factory=dict)
    """wavelet id -> the newest blip id seen entering the model's context there."""
    confirmed_count: int = 0
    """Frames confirmed since the file was created (status, benchmarks)."""
    transcript: str = ""
    """The session whose transcript the receipts come from ('' with receipts off)."""
    transcript_offset: int = 0
    """Bytes of that transcript already read (a restart resumes there: no rescans)."""
    route: Route = "unknown"
    """What wakes the session, as far as the receipts tell: ``channel`` (a push was confirmed),
    ``hook`` (pushes are not confirmed here: the hook delivers), ``unconfirmed`` (no path
    confirmed anything yet and none is left), ``unknown`` (nothing handed out yet)."""
    route_why: str = ""
    receipts_problem: str = ""
    """Why receipts cannot be read now ('' when they can)."""
    cap: int | None = None
    """The cap the deliverer that last saved the file runs with (0: none): ``fleet status``'s CAP.
    None in a file written before deliverers recorded it."""
    notices: list[Frame] = field(default_factory=list)
    """Notices owed to the hook's next arm (a budget notice on the hook route, :mod:`fleet.budgets`):
    handed once with whatever else the arm takes, then dropped (they stand in for no blip, so no
    receipt confirms them and none is handed out again)."""


def daemon_key(url: str) -> str:
    """A stable, file-name-safe key for a daemon URL (scheme, host and port; path ignored); of a list
    of daemons (one store, comma-separated), the first's: the key stays when a client fails over."""
    parts = urlsplit(url.split(",", 1)[0].strip())
    host = (parts.hostname or "local").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{host}_{port}"


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


UNLOCKED_PATIENCE = 0.5
"""Seconds a reader without the lock reads a state file again while what it read does not parse (a
channel descheduled between a save's write and its truncation leaves a torn file that long)."""


def read_unlocked(path: Path) -> DeliveryState:
    """The state in ``path`` as a process that does not hold its lock reads it (``fleet status``,
    the supervisor, ``fleet doctor``). Each save rewrites the spare in place, and the spare is the
    file such a reader opened two saves before: one held up between its open and its read can read
    a save half written (3,000 of 37,000 reads under a tight loop of saves). A read that does not
    parse is read again for up to :data:`UNLOCKED_PATIENCE` seconds; only a file that stays
    unreadable raises (RecordError; OSError as the read raises it)."""
    deadline = time.monotonic() + UNLOCKED_PATIENCE
    while True:
        raw = path.read_bytes()
        try:
            return loads(DeliveryState, raw)
        except RecordError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.001)


def state_path(directory: Path, daemon: str, wave: str, participant: str, *, store: str = "") -> Path:
    """Where the state of (store, wave, participant) lives: one file, deterministic, readable name.

    ``store`` is the store's identity (``/v1/health``'s ``store_id``); without it the file is keyed
    by the daemon's host and port, as files written before store identities were.
    """
    key = f"store-{_UNSAFE.sub('_', store)}" if store else daemon_key(daemon)
    ident = f"{key}|{wave}|{participant}"
    name = f"{_UNSAFE.sub('_', participant)}@{_UNSAFE.sub('_', wave)}@{key[:20]}-{digest(ident)[:10]}.json"
    return directory / name


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_renameat2: Any = None
"""libc's ``renameat2``, looked up on the first exchange (False: this libc has none)."""


def exchange(a: Path, b: Path) -> bool:
    """Swap the files ``a`` and ``b`` in one step (``renameat2(RENAME_EXCHANGE)``): True when done,
    False when this system or file system cannot (nothing moved). FileNotFoundError when either is
    missing."""
    global _renameat2
    if _renameat2 is None:
        import ctypes  # (only here: 0.4 MiB and 2 ms a channel does not pay until its first save)

        try:
            fn = ctypes.CDLL(None, use_errno=True).renameat2
            fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
            _renameat2 = fn
        except (AttributeError, OSError):
            _renameat2 = False
    if _renameat2 is False:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = _errno()
    if err == errno.ENOENT:
        raise FileNotFoundError(err, os.strerror(err), str(b))
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


_KNOWN: dict[tuple[str, str], str] = {}
"""(state dir, daemon key) -> store id, learnt by this process."""


STORE_WAIT = 2.0
"""Seconds :func:`store_identity` keeps asking a daemon that does not answer, with nothing remembered."""


def _store_wait() -> float:
    """:data:`STORE_WAIT`, or ``FLEET_STORE_WAIT`` (seconds; a test-only knob, for tests that start a
    channel against a daemon that is down on purpose and would otherwise wait this out each time)."""
    try:
        return max(0.0, float(os.environ["FLEET_STORE_WAIT"]))
    except (KeyError, ValueError):
        return STORE_WAIT


def store_identity(directory: Path, daemon: str, *, wait: float | None = None) -> str:
    """The identity of the store the daemon at ``daemon`` serves ('' when it cannot be learnt).

    Asked of ``/v1/health`` and remembered in ``<directory>/stores/<host_port>``, so a channel or
    hook that starts while its daemon restarts still finds its state: with a remembered identity the
    daemon is asked once, without one it is asked again for up to about ``wait`` seconds (None:
    :func:`_store_wait`). '' (the host:port key) only when neither answers.
    """
    if wait is None:
        wait = _store_wait()
    key = daemon_key(daemon)
    memo = (str(directory), key)
    if memo in _KNOWN:
        return _KNOWN[memo]
    from fleet import errors
    from fleet.client import Client
    from fleet.paths import write_private

    cache = directory / "stores" / key
    try:
        known = read_utf8(cache).strip()
    except OSError:
        known = ""
    if _UNSAFE.search(known):
        known = ""
    try:
        with Client(daemon, "", timeout=2.0, retries=0 if known else max(0, int(wait / 0.4))) as probe:
            store = probe.health().store_id
    except errors.FleetError:
        store = ""
    if store and _UNSAFE.search(store) is None:
        if store != known:
            write_private(cache, store + "\n")
    else:
        store = known
    if store:
        _KNOWN[memo] = store
    return store


class StateFile:
    """The state file of one (daemon, wave, participant) and the lock beside it.

    :meth:`acquire` takes the lock without waiting; the holder is the one deliverer. :meth:`load`
    and :meth:`save` may be called by the holder only.
    """

    def __init__(
        self, directory: Path, daemon: str, wave: str, participant: str, *, store: str | None = None
    ) -> None:
        self.daemon = daemon
        self.wave = wave
        self.participant = participant
        self.store = store_identity(directory, daemon) if store is None else store
        """The store's identity this file is keyed by ('' when it could not be learnt)."""
        self.path = state_path(directory, daemon, wave, participant, store=self.store)
        self.legacy_path = state_path(directory, daemon, wave, participant)
        """Where a file keyed by host and port (written before store identities) lives: read when
        :attr:`path` does not exist yet, so an upgrade neither replays nor skips."""
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.spare_path = self.path.with_name(f".{self.path.name}.spare")
        """What each save writes before it exchanges it with :attr:`path` (:meth:`save`)."""
        self._lock_file: IO[bytes] | None = None
        self._exchanges = True
        """False once this file system refused an exchange: saves rename a temporary file over."""

    @property
    def held(self) -> bool:
        return self._lock_file is not None

    def acquire(self) -> bool:
        """Take the lock if free (True), or return False at once when another process holds it."""
        if self._lock_file is not None:
            return True
        ensure_private_dir(self.path.parent)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        f = os.fdopen(fd, "r+b")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return False
        self._lock_file = f
        return True

    def release(self) -> None:
        if self._lock_file is not None:
            try:
                fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_UN)
            finally:
                self._lock_file.close()
                self._lock_file = None

    def fresh(self) -> DeliveryState:
        return DeliveryState(daemon=self.daemon, wave=self.wave, participant=self.participant)

    def load(self) -> DeliveryState:
        """The saved state, or a fresh one when there is no file. Raises :class:`CorruptState`."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            if self.legacy_path == self.path or not self.legacy_path.exists():
                return self.fresh()
            try:
                raw = self.legacy_path.read_bytes()
            except OSError as exc:
                raise self._corrupt(f"cannot read it: {exc}") from exc
        except OSError as exc:
            raise self._corrupt(f"cannot read it: {exc}") from exc
        try:
            state = loads(DeliveryState, raw)
        except RecordError as exc:
            first_loc, first_msg = exc.problems[0]
            raise self._corrupt(f"{first_loc or 'the file'}: {first_msg}") from exc
        state.version = 2
        if (state.wave, state.participant) != (self.wave, self.participant):
            raise self._corrupt(
                f"it belongs to {state.participant} in wave {state.wave}, "
                f"not {self.participant} in {self.wave}"
            )
        return state

    def save(self, state: DeliveryState) -> None:
        """Replace the file atomically; mode 0600.

        The new content is written into the spare beside the file (:attr:`spare_path`, rewritten in
        place: the previous version), which is then exchanged with the file in one step
        (``renameat2(RENAME_EXCHANGE)``). Creating a temporary file and renaming it over cost a new
        inode and, on ext4, a flush of the new file (``auto_da_alloc``) each save: 144 µs of CPU
        (112 in the kernel) against 14 µs, per delivery of each channel (bench/delivery.py). The
        first save, a file moved away by hand, and a file system without the exchange (then always)
        rename the written file over instead.

        A crash of the process at any point leaves the old or the new file, never a mix. There is
        deliberately no fsync: saves happen after every delivered batch, and with many channels on
        one disk fsync was most of a channel's CPU time. After a power loss the file may be older
        (blips are replayed, never skipped) or unreadable (:class:`CorruptState`: delivery stops).
        """
        state.updated_at = time.time()
        self._write(dump(state))

    def save_dumped(self, dumped: dict[str, Any]) -> None:
        """:meth:`save` of a state already turned into data by ``dump`` (the channel's snapshot,
        taken under its engine's lock: copying the record and dumping the copy again was a third
        of a busy channel's CPU), stamped ``updated_at`` now."""
        self._write({**dumped, "updated_at": time.time()})

    def _write(self, dumped: dict[str, Any]) -> None:
        data = json.dumps(dumped, separators=(",", ":"), sort_keys=True).encode("utf-8")
        if self._exchanges:
            self._write_spare(data)
            try:
                if exchange(self.spare_path, self.path):
                    return
                self._exchanges = False
            except FileNotFoundError:  # no file yet (or moved away): the spare becomes it
                pass
            os.replace(self.spare_path, self.path)
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = self._open_beside(tmp, os.O_TRUNC)
        try:
            # bytes straight to the descriptor: a text file object over it (an isatty ioctl, a seek, a
            # codec and a buffer per save) was a tenth of a channel's CPU per delivery
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _write_spare(self, data: bytes) -> None:
        """``data`` is the whole spare, mode 0600, written in place (no new inode, no truncation to
        zero, which on ext4 flushes as a rename over does)."""
        fd = self._open_beside(self.spare_path, 0)
        try:
            os.fchmod(fd, 0o600)  # (a spare someone made otherwise becomes the file)
            at = 0
            while at < len(data):
                at += os.pwrite(fd, data[at:], at)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)

    def _open_beside(self, path: Path, flags: int) -> int:
        """``path`` (beside the state file) opened to write, made 0600 if new, with ``flags``; the
        state directory made again, once, if it was removed under us."""
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o600)
        except FileNotFoundError:
            ensure_private_dir(self.path.parent)
            return os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o600)

    def _corrupt(self, reason: str) -> CorruptState:
        return CorruptState(
            f"the delivery state file {self.path} is unusable ({reason}). Delivery is stopped so that "
            f"no blip is skipped. To replay from your joins (capped), move it aside: "
            f"mv '{self.path}' '{self.path}.bad'; or restore a good copy. Then restart the channel."
        )
