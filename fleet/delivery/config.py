"""Who a transport delivers to, where it talks, and how: one model and one way to fill it in.

``fleet channel``, ``fleet watch`` and ``fleet watch --hook`` all build a :class:`TransportConfig`
with :func:`resolve`, from their options first, then the environment, then the local paths:

==============  ============================  ==========================================================
field           option                        then
==============  ============================  ==========================================================
participant     ``--participant``             ``FLEET_PARTICIPANT``
wave            ``--wave``                    ``FLEET_WAVE``
daemon          ``--daemon``                  ``FLEET_DAEMON``, then the local daemon's endpoint file
token_file      ``--token-file``              ``FLEET_TOKEN_FILE``; without one: ``FLEET_TOKEN`` (plain
                                              watch only), else the local operator token (``operator``,
                                              or plain watch, which may read anyone's feed)
state_dir       ``--state-dir``               the fleet state dir's ``channels/``
session_id      —                             ``CLAUDE_CODE_SESSION_ID`` (set by Claude Code), else
                                              ``FLEET_SESSION_ID`` (set by spawn for Codex)
==============  ============================  ==========================================================

The token itself never comes from a command line: :func:`read_token` reads it from the file (or
``FLEET_TOKEN``) each time it is needed, so a rewritten token file takes effect without a restart.
"""

from __future__ import annotations

import os
import shlex
import socket
from collections.abc import Container
from pathlib import Path
from typing import Literal

from fleet import errors
from fleet.delivery.ledger import BOUND
from fleet.delivery.rules import DEFAULT_CAP, DIGEST_HOLD, Attention, check_attention
from fleet.models import OPERATOR, PARTICIPANT_RE
from fleet.paths import get_paths, read_utf8
from fleet.wire import Record, field

POLL_WAIT = 20.0
"""Seconds one feed long-poll may wait (the daemon caps it at 60)."""
UNREACHABLE_AFTER = 30.0
"""Seconds of daemon outage after which a hook wakes its session to say so (docs/design.md §5)."""


class TransportConfig(Record, kw_only=True, forbid_unknown_fields=True):
    """One participant's delivery: identity, daemon, state, and the rules' settings."""

    participant: str
    wave: str
    daemon: str
    token_file: Path | None = None
    """None: ``FLEET_TOKEN`` if set, else the local operator token (see :func:`read_token`)."""
    state_dir: Path
    cap: int = DEFAULT_CAP
    attention: Attention = "full"
    attendant: str | None = None
    """The attendant command (targeted attention only); None: the rules alone decide."""
    attendant_timeout: float | None = None
    """Seconds per attendant run; None: :data:`fleet.delivery.attention.ATTENDANT_TIMEOUT`."""
    digest_hold: float = DIGEST_HOLD
    """Targeted attention: seconds a digest-only batch waits for more chatter (0: push at once)."""
    session_id: str | None = None
    host: str = field(default_factory=socket.gethostname)
    poll_wait: float = POLL_WAIT
    receipts: Literal["auto", "transcript", "rollout", "none"] = "auto"
    """``transcript``: a blip counts as delivered when the session's own record shows it in the
    model's context (Claude Code); ``rollout``: the same from a Codex session's rollout, the session
    woken by ``codex queue`` (:mod:`fleet.channel.codex`); ``none``: when it was handed out (agents
    that keep no transcript); ``auto``: ``transcript`` inside Claude Code (``CLAUDECODE=1`` in the
    environment), else ``none``."""
    bound: float = BOUND
    """Seconds a push may go unaccepted before the hook takes it (``--transport auto``)."""
    # channel only
    hook_fallback: bool = False
    """A hook is installed beside the channel (``--transport auto``): pushes Claude Code does not
    take go to it, and a session without channels is served by it alone."""
    deliver: bool = True
    """False (``--no-deliver``): the channel serves tools only; ``fleet watch --hook`` delivers."""
    ping_interval: float = 30.0
    delivery_grace: float = 1.0
    # watch only
    wavelets: list[str] = field(default_factory=list)
    """Only these wavelets (refs as typed: WAVE/WAVELET, a name in the wave, an id); empty: all."""
    wait: float = 0.0
    """Give up after this many seconds with nothing handed out; 0: wait as long as it takes."""
    unreachable_after: float = UNREACHABLE_AFTER


def plain_words(
    argv: list[str], takes_value: Container[str], flags: Container[str]
) -> list[tuple[str, str | None]] | None:
    """``argv`` as (option, value) pairs, in order (value None for one of ``flags``), read as argparse
    and typer read a plain command line (``--opt value`` or ``--opt=value``); None when it is not
    one: an option neither in ``takes_value`` nor in ``flags``, a value missing, or a value that
    looks like an option. What the channel and the hook's arm read their command lines with, so
    that neither imports its parser for what spawn writes (the parser then says what is wrong)."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word in flags:
            out.append((word, None))
            continue
        option, eq, value = word.partition("=")
        if option not in takes_value or (not eq and i == len(argv)):
            return None
        if not eq:
            value = argv[i]
            i += 1
        if value.startswith("-"):
            return None
        out.append((option, value))
    return out


def resolve(
    *,
    participant: str | None,
    wave: str | None,
    daemon: str | None,
    token_file: Path | None,
    state_dir: Path | None,
    need_token_file: bool,
    **settings: object,
) -> TransportConfig:
    """Fill in what the options left out (see the module docstring) and check the result.

    ``need_token_file``: a participant other than ``operator`` must name a token file (the channel
    and the hook run inside the participant's session, on its own token). ``settings`` are the
    remaining :class:`TransportConfig` fields, as the command's options gave them.
    """
    participant = participant or os.environ.get("FLEET_PARTICIPANT", "")
    if not participant:
        raise errors.UsageError("no participant: pass --participant or set FLEET_PARTICIPANT")
    if not PARTICIPANT_RE.match(participant):
        raise errors.UsageError(
            f"participant {participant!r} is not a valid name (lower case letter first, then "
            "letters, digits, '_' or '-', at most 32)"
        )
    wave = wave or os.environ.get("FLEET_WAVE", "")
    if not wave:
        raise errors.UsageError("no wave: pass --wave or set FLEET_WAVE")
    daemon = daemon or os.environ.get("FLEET_DAEMON", "")
    if not daemon:
        from fleet.client import endpoint_daemons, read_endpoint

        endpoint = read_endpoint(get_paths())
        if endpoint is None:
            raise errors.DaemonUnreachable(
                "no daemon: pass --daemon URL, set FLEET_DAEMON, "
                "or start the local one with `fleet daemon start`"
            )
        daemon = endpoint_daemons(endpoint)  # pinned when the local daemon serves HTTPS; then its peers
    env_file = os.environ.get("FLEET_TOKEN_FILE", "").strip()
    if token_file is None and env_file:
        token_file = Path(env_file)
    if token_file is None and need_token_file:
        if participant != OPERATOR:
            raise errors.UsageError(
                "no token file: pass --token-file PATH or set FLEET_TOKEN_FILE (mint one with "
                f"`fleet token mint {wave} {participant} --file PATH`)"
            )
        token_file = get_paths().operator_token
    config = TransportConfig(
        participant=participant,
        wave=wave,
        daemon=daemon,
        token_file=token_file.expanduser() if token_file else None,
        # get_paths() only for what the options left out: without FLEET_HOME it loads platformdirs
        # (and tempfile, shutil, random: 1.7 MiB), which an arm of the hook, given all three, never needs
        state_dir=(state_dir or get_paths().channels).expanduser(),
        session_id=os.environ.get("CLAUDE_CODE_SESSION_ID") or os.environ.get("FLEET_SESSION_ID") or None,
        **settings,  # type: ignore[arg-type]
    )
    check(config)
    return config


def check(config: TransportConfig) -> None:
    """Reject settings that cannot work, before any protocol starts."""
    check_attention(config.attention)
    if config.attendant is not None:
        if config.attention == "full":
            raise errors.UsageError("--attendant only rescues digested blips: add --attention targeted")
        try:
            argv = shlex.split(config.attendant)
        except ValueError as exc:
            raise errors.UsageError(
                f"--attendant {config.attendant!r} cannot be split into words: {exc}"
            ) from None
        if not argv:
            raise errors.UsageError("--attendant is empty: pass the attendant's command line")
    if config.attendant_timeout is not None and config.attendant_timeout <= 0:
        raise errors.UsageError("--attendant-timeout must be a positive number of seconds")
    if config.digest_hold < 0:
        raise errors.UsageError("--digest-hold must be 0 (push digests at once) or a number of seconds")
    if config.cap < 0:
        raise errors.UsageError("--cap must be 0 (no cap) or a positive number of pushes")


def receipts_on(config: TransportConfig) -> bool:
    """Whether this transport takes receipts from the session's transcript."""
    if config.receipts == "auto":
        return os.environ.get("CLAUDECODE") == "1"
    return config.receipts in ("transcript", "rollout")


def read_token(config: TransportConfig) -> str:
    """The bearer token: the token file's content, else ``FLEET_TOKEN``, else the local operator token.

    Raises :class:`~fleet.errors.Unauthorized` when the file cannot be read or is empty.
    """
    if config.token_file is None and os.environ.get("FLEET_TOKEN", "").strip():
        return os.environ["FLEET_TOKEN"].strip()
    path = config.token_file or get_paths().operator_token
    try:
        token = read_utf8(path).strip()
    except OSError as exc:
        raise errors.Unauthorized(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    if not token:
        raise errors.Unauthorized(f"the token file {path} is empty: mint a token with `fleet token mint`")
    return token
