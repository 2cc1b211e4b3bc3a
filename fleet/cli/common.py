"""What the commands share: the one client per process, reference resolution and common options."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from fleet import errors
from fleet.client import Client, connect
from fleet.models import Wavelet

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON: the wire model, full ids.")]
AsOpt = Annotated[
    str | None,
    typer.Option("--as", metavar="NAME", help="Act as this participant (operator token only)."),
]
WaveOpt = Annotated[
    str | None,
    typer.Option(
        "--wave",
        envvar="FLEET_WAVE",
        metavar="WAVE",
        help="The wave a bare wavelet name belongs to.",
    ),
]
WAVELET_HELP = "WAVE/WAVELET, a wavelet name in the current wave (--wave / FLEET_WAVE), or an id prefix."

_client: Client | None = None


def client() -> Client:
    """The client for this process: found or started on first use (see :func:`fleet.client.connect`)."""
    global _client
    if _client is None:
        _client = connect()
    return _client


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
