"""The channel: a stdio MCP server that makes one Claude Code session a participant of one wave.

Invocation (the inline ``--mcp-config`` entry spawn generates; stable)::

    python -m fleet channel --participant NAME --wave WAVE --daemon URL --token-file PATH \\
        [--cap 40] [--state-dir DIR] [--attention full|targeted|POLICY [--digest-hold 30]
        [--attendant CMD [--attendant-timeout 2]]] [--no-deliver]
        [--receipts auto|transcript|rollout|none] [--hook-fallback [--bound 3]]

Options fall back to the environment and the local paths as :mod:`fleet.delivery.config` says. The
token is only ever read from the file (0600), never taken from the command line. ``python -m fleet
channel`` goes straight to :func:`main` without loading the rest of the CLI, so one channel per
agent stays small (``bench/cli.py`` prints its start-up figures).

What the session gets:

* ``instructions`` opening with "You are <participant>", claiming that name's prior blips as the
  session's own, and carrying the prompt contract (:func:`fleet.channel.tools.instructions`).
* Eight tools (:mod:`fleet.channel.tools`).
* Delivery: one second after ``notifications/initialized`` (so a health check such as ``claude mcp
  list``, which disconnects at once, consumes nothing), one long-poll ``feed`` after another
  across every wavelet on the participant's roster (new memberships appear without a restart, a left
  wavelet stops), each batch run through :class:`fleet.delivery.engine.Engine`. Each frame becomes::

      {"method": "notifications/claude/channel",
       "params": {"content": TEXT, "meta": {"wavelet": "WAVE/WAVELET", "wavelet_id": ID,
                                             "blip_id": ID, "author": NAME, "kind": KIND}}}

  (:mod:`fleet.delivery.frames`): ``kind`` is ``message``, ``system``, ``surface``, ``cap`` for the
  one exhaustion notice (author ``fleet``), or ``digest`` under targeted attention (``blip_ids``
  instead of ``blip_id``); a replacement blip also carries ``replaces``. A state file that cannot be
  read stops delivery (tools keep working) with one notification of kind ``error`` naming the file
  and the fix; no blip is skipped.
* Targeted attention (``--attention targeted``): only blips that name the participant, the
  operator's blips and surfaces are pushed in full; the rest of a wavelet's batch follows them as
  one digest frame. A digest with nothing in full beside it waits up to ``--digest-hold`` seconds
  (30) for more chatter; each committed decision, attendant run and read-after-digest miss is a
  line of the routing log; ``--attendant CMD`` may promote digested blips to full delivery, never
  the reverse (:mod:`fleet.delivery.attention`).
* Outages: the channel keeps answering; tool calls report the outage; delivery reconnects with
  backoff and resumes from its cursors, so nothing is lost. Only the holder of the state-file lock
  delivers and reports presence; a second channel of the same (daemon, wave, participant) — say, a
  ``claude mcp list`` health check — serves tools and stands by.
* ``--no-deliver`` (what spawn's ``--transport hook`` passes): tools only. The channel never takes the
  state-file lock and never delivers; ``fleet watch --hook`` (:mod:`fleet.watch`) delivers instead, on
  the same state file. It still reports presence (pings from one second after
  ``notifications/initialized``, ``gone`` at exit), so spawn sees the session start and the wave sees
  it alive.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import TYPE_CHECKING

from fleet import errors
from fleet.delivery.config import TransportConfig, plain_words, resolve
from fleet.delivery.ledger import BOUND
from fleet.delivery.rules import DEFAULT_CAP, DIGEST_HOLD

if TYPE_CHECKING:
    import argparse

log = logging.getLogger(__name__)


def _columns() -> int:
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


def parser() -> argparse.ArgumentParser:
    """The one parser of ``fleet channel`` (the CLI hands its arguments here unparsed)."""
    import argparse

    class _Formatter(argparse.HelpFormatter):
        """argparse's help formatter, told the width: argparse makes one at every ``add_argument``
        (to check the metavar), and one left to find the width imports shutil (3 ms). The width is
        what ``shutil.get_terminal_size`` would say."""

        def __init__(self, prog: str) -> None:
            super().__init__(prog, width=_columns() - 2)

    p = argparse.ArgumentParser(
        prog="fleet channel",
        formatter_class=_Formatter,
        description="Serve MCP on stdin/stdout as PARTICIPANT of WAVE: participant tools plus channel "
        "delivery. Not for people at a terminal: Claude Code starts it from an inline --mcp-config.",
        allow_abbrev=False,
    )
    p.add_argument(
        "--participant", metavar="NAME", help="Who this session is in the wave [env FLEET_PARTICIPANT]."
    )
    p.add_argument("--wave", metavar="WAVE", help="The wave to take part in [env FLEET_WAVE].")
    p.add_argument(
        "--daemon", metavar="URL", help="The store daemon [env FLEET_DAEMON; default: the local one]."
    )
    p.add_argument(
        "--token-file",
        metavar="PATH",
        type=Path,
        help="A file holding the participant's token (never a token on a command line) "
        "[env FLEET_TOKEN_FILE].",
    )
    p.add_argument(
        "--cap",
        type=int,
        default=DEFAULT_CAP,
        help="Blips pushed per wavelet before one cap notice (0: no cap).",
    )
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        type=Path,
        help="Where delivery cursors are kept [default: the fleet state dir].",
    )
    p.add_argument(
        "--attention",
        default="full",
        metavar="full|targeted|POLICY",
        help="full: every blip is pushed. targeted: only blips naming you, the operator's and surfaces; "
        "the rest as one digest per wavelet batch. POLICY: a feature's policy; resident (a wave's resident): "
        "full on the root wavelet, targeted elsewhere with DONE: reports in full and chatter held until one "
        "comes.",
    )
    p.add_argument(
        "--attendant",
        metavar="CMD",
        help='Targeted only: a command given each digest batch as JSON on stdin; it may answer {"promote": '
        "[blip ids]} to deliver those in full. Errors never suppress anything.",
    )
    p.add_argument(
        "--attendant-timeout",
        metavar="SECONDS",
        type=float,
        help="How long the attendant may take per batch [default: 2].",
    )
    p.add_argument(
        "--digest-hold",
        metavar="SECONDS",
        type=float,
        default=DIGEST_HOLD,
        help="Targeted only: how long a digest with nothing addressed to you waits for more chatter "
        "(0: at once).",
    )
    p.add_argument(
        "--receipts",
        choices=list(RECEIPTS),
        default="auto",
        help="transcript: a blip counts as delivered when the session's transcript shows it in the "
        "model's context; rollout: the same from a Codex session's rollout, woken by codex queue; "
        "none: when pushed; auto: transcript inside Claude Code.",
    )
    p.add_argument(
        "--hook-fallback",
        action="store_true",
        help="A `fleet watch --hook` is installed beside this channel (spawn --transport auto): pushes "
        "Claude Code does not take go to it; without channels it delivers everything.",
    )
    p.add_argument(
        "--bound", type=float, default=BOUND, help="Seconds a push may go untaken before the hook takes it."
    )
    p.add_argument(
        "--deliver",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--no-deliver: serve tools only; `fleet watch --hook` delivers (spawn --transport hook).",
    )
    return p


OPTIONS: dict[str, tuple[str, Callable[[str], object]]] = {
    "--participant": ("participant", str),
    "--wave": ("wave", str),
    "--daemon": ("daemon", str),
    "--token-file": ("token_file", Path),
    "--cap": ("cap", int),
    "--state-dir": ("state_dir", Path),
    "--attention": ("attention", str),
    "--attendant": ("attendant", str),
    "--attendant-timeout": ("attendant_timeout", float),
    "--digest-hold": ("digest_hold", float),
    "--receipts": ("receipts", str),
    "--bound": ("bound", float),
}
"""The options of :func:`parser` that take a value: option -> (its dest, its type)."""
FLAGS = {
    "--hook-fallback": ("hook_fallback", True),
    "--deliver": ("deliver", True),
    "--no-deliver": ("deliver", False),
}
"""The options of :func:`parser` that take none: option -> (its dest, the value it sets)."""
RECEIPTS = ("auto", "transcript", "rollout", "none")


def plain_options(argv: list[str]) -> SimpleNamespace | None:
    """What :func:`parser` makes of ``argv`` (its dests and defaults), read without argparse, or None
    when ``argv`` is not a plain command line of options argparse takes as they are (``--help``, an
    unknown option, a value argparse refuses or might read as an option): argparse then parses it and
    says what is wrong. Spawn's command lines are plain: a channel then never imports argparse (with
    gettext and locale, and the parser built: ~4 ms and 0.5 MiB of its start). A test keeps the two
    readings equal."""
    got: dict[str, object] = {dest: None for dest, _ in OPTIONS.values()}
    got.update(cap=DEFAULT_CAP, attention="full", digest_hold=DIGEST_HOLD, receipts="auto", bound=BOUND)
    got.update(hook_fallback=False, deliver=True)
    words = plain_words(argv, OPTIONS, FLAGS)
    if words is None:
        return None
    for option, text in words:
        if text is None:
            dest, value = FLAGS[option]
            got[dest] = value
            continue
        dest, kind = OPTIONS[option]
        try:
            got[dest] = kind(text)
        except ValueError:
            return None
    if got["receipts"] not in RECEIPTS:
        return None
    return SimpleNamespace(**got)


def config_from(argv: list[str]) -> TransportConfig:
    """The channel's configuration from its command line (see :mod:`fleet.delivery.config`)."""
    a = plain_options(argv) or parser().parse_args(argv)
    if a.cap < 0:
        raise errors.UsageError("--cap must be 0 (no cap) or a positive number of pushes")
    return resolve(
        participant=a.participant,
        wave=a.wave,
        daemon=a.daemon,
        token_file=a.token_file,
        state_dir=a.state_dir,
        need_token_file=True,
        cap=a.cap,
        attention=a.attention,
        attendant=a.attendant or None,
        attendant_timeout=a.attendant_timeout,
        digest_hold=a.digest_hold,
        deliver=a.deliver,
        receipts=a.receipts,
        hook_fallback=a.hook_fallback,
        bound=a.bound,
    )


def run(config: TransportConfig) -> int:
    """Serve MCP on this process's stdin/stdout until stdin closes; returns the exit status (0).

    Takes over stdout first (see :func:`fleet.mcpwire.take_stdout`); SIGTERM, SIGINT and SIGHUP shut
    down cleanly, with the cursors saved.
    """
    from fleet.channel.server import Channel
    from fleet.mcpwire import take_stdout

    proto = take_stdout()
    channel = Channel(config, input=sys.stdin.buffer, output=proto)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    # SIGHUP: the agent's pane (its terminal) went away; shut down as cleanly as on SIGTERM
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    log.info(
        "channel for %s in %s via %s (cap %d, attention %s, state %s)",
        config.participant,
        config.wave,
        config.daemon,
        config.cap,
        config.attention,
        channel.state_file.path,
    )
    try:
        channel.serve()
    except SystemExit:
        channel.shutdown()
    return 0


def main(argv: list[str]) -> int:
    """``fleet channel ARGS``: parse, then serve. Errors are one line on stderr and their exit code."""
    debug = bool(os.environ.get("FLEET_DEBUG"))
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING, format="fleet: %(name)s: %(message)s"
    )
    logging.getLogger("fleet").setLevel(logging.DEBUG if debug else logging.INFO)
    try:
        return run(config_from(argv))
    except errors.FleetError as exc:
        sys.stderr.write(f"fleet: error: {exc.message}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
