"""What the commands share: the one client per process, reference resolution and common options."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from fleet import errors
from fleet.paths import get_paths

if TYPE_CHECKING:  # imported where a command talks to the daemon: its --help, and typer's tree, need neither
    from fleet.client import Client
    from fleet.models import Wavelet


JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON: the wire model, full ids.")]
AsOpt = Annotated[
    str | None,
    typer.Option("--as", metavar="NAME", help="Act as this participant (operator token only)."),
]
MAX_BLIP_BYTES = 256 * 1024
""":data:`fleet.models.DEFAULT_MAX_BLIP_BYTES`, the default ``--help`` shows (fleet.models loads msgspec
and every record: a command imports it where it runs; tests/unit/test_cli_summaries.py keeps them equal)."""
WAVELET_HELP = "WAVE/WAVELET, a wavelet name in the current wave (--wave / FLEET_WAVE), or an id prefix."

_client: Client | None = None


def client() -> Client:
    """The client for this process: found or started on first use (see :func:`fleet.client.connect`)."""
    global _client
    if _client is None:
        from fleet.client import connect

        _client = connect()
    return _client


# ---------------------------------------------------------------- shell completion
# Each completer runs while the shell waits on a key press: it asks the daemon this command line
# means (its --remote too) with a short timeout, never starts one, and offers nothing on any error
# (a traceback or a notice would land in the user's prompt).


def _quiet(message: str, exc: Exception) -> None:
    """A completer's reason to offer nothing, for ``FLEET_DEBUG`` (logging loaded only then)."""
    import logging

    logging.getLogger(__name__).debug(message, exc)


def _completing_client(ctx: typer.Context) -> Client:
    remote = ctx.find_root().params.get("remote")
    if remote:  # the root callback does not run while completing
        os.environ["FLEET_DAEMON"] = str(remote)
    from fleet.client import Client, connect

    found = connect(autostart=False)
    return Client(found.base_url, found.token, timeout=2.0, retries=0, connect_timeout=1.0)


def complete_wave(ctx: typer.Context, incomplete: str) -> list[str]:
    """Wave names starting with ``incomplete`` (for WAVE arguments and ``--wave``)."""
    try:
        with _completing_client(ctx) as c:
            return sorted(w.name for w in c.list_waves() if w.name.startswith(incomplete))
    except Exception as exc:  # completion is silent: see above
        _quiet("no wave completion: %s", exc)
        return []


def complete_wavelet(ctx: typer.Context, incomplete: str) -> list[str]:
    """``WAVE/WAVELET`` paths starting with ``incomplete``, and bare names in the current wave
    (``--wave`` / ``FLEET_WAVE``), for WAVELET arguments."""
    try:
        with _completing_client(ctx) as c:
            wave, slash, _ = incomplete.partition("/")
            names = [w.name for w in c.list_waves()]
            waves = [wave] if slash else [n for n in names if n.startswith(incomplete)]
            current = ctx.params.get("wave") or os.environ.get("FLEET_WAVE")
            found: set[str] = set()
            for name in dict.fromkeys([*waves, *([str(current)] if current and not slash else [])]):
                if name not in names:
                    continue
                for wl in c.get_wave(name).wavelets:
                    found.update(x for x in (wl.path, wl.name if name == current else "") if x)
            return sorted(x for x in found if x.startswith(incomplete))
    except Exception as exc:  # completion is silent: see above
        _quiet("no wavelet completion: %s", exc)
        return []


def complete_layout(incomplete: str) -> list[str]:
    """Layout names (shipped and the user's) starting with ``incomplete``: no daemon needed."""
    try:
        from fleet.layouts import available

        return sorted(n for n in available(get_paths()) if n.startswith(incomplete))
    except Exception as exc:  # completion is silent: see above
        _quiet("no layout completion: %s", exc)
        return []


WaveOpt = Annotated[
    str | None,
    typer.Option(
        "--wave",
        envvar="FLEET_WAVE",
        metavar="WAVE",
        help="The wave a bare wavelet name belongs to.",
        autocompletion=complete_wave,
    ),
]
WaveletArg = Annotated[
    str, typer.Argument(metavar="WAVELET", help=WAVELET_HELP, autocompletion=complete_wavelet)
]
"""A required WAVELET argument, completed from the daemon."""
WaveArg = Annotated[str, typer.Argument(metavar="WAVE", help="The wave.", autocompletion=complete_wave)]
"""A required WAVE argument, completed from the daemon."""


def wavelet(ref: str, wave: str | None) -> Wavelet:
    """The wavelet a user typed: ``WAVE/WAVELET``, a name in ``wave``, or an id / unique id prefix."""
    return client().resolve(ref, wave=wave)


def text_arg(text: str) -> str:
    """A TEXT argument; ``-`` reads stdin (one trailing newline dropped, as ``echo`` adds it).
    Text that is not UTF-8 is a UsageError naming the first bad byte."""
    if text != "-":
        return text
    if sys.stdin is None or sys.stdin.isatty():
        raise errors.UsageError("TEXT is `-` but stdin is a terminal: pipe the text in, or give it inline")
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text-only stdin (tests replacing it): already decoded
        data = sys.stdin.read()
    else:
        raw = buffer.read()
        try:
            data = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise errors.UsageError(
                f"the text on stdin is not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}"
                f" ({exc.reason}): convert it to UTF-8 first (e.g. `iconv -t UTF-8`)"
            ) from None
    return data[:-1] if data.endswith("\n") else data


def check_utf8_args(args: list[str]) -> None:
    """UsageError for a command-line argument that is not UTF-8, naming the byte and the argument.

    Python hands such bytes over as lone surrogates (``surrogateescape``), which no request, file or
    tmux call of fleet can carry."""
    for n, arg in enumerate(args, 1):
        for pos, ch in enumerate(arg):
            if "\udc80" <= ch <= "\udcff":
                shown = arg.encode("utf-8", "surrogateescape")[:40].decode("utf-8", "replace")
                raise errors.UsageError(
                    f"argument {n} ({shown!r}) is not valid UTF-8: byte 0x{ord(ch) - 0xDC00:02x} at"
                    f" character {pos}: pass UTF-8 text (e.g. convert it with `iconv -t UTF-8`)"
                )
            if "\ud800" <= ch <= "\udfff":
                raise errors.UsageError(
                    f"argument {n} is not valid UTF-8 (a lone surrogate): pass UTF-8 text"
                )


def names(values: list[str] | None) -> list[str]:
    """Participant names from ``--with a,b`` (repeatable), blanks dropped, order kept, no duplicates."""
    found = [n.strip() for v in values or [] for n in v.split(",")]
    return list(dict.fromkeys(n for n in found if n))
