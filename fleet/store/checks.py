"""Input rules of the store: names, blip text and wavelet topics. Each check returns its input or
raises UsageError (PayloadTooLarge for text over the limit) with a message that says what a valid
value looks like."""

from __future__ import annotations

import unicodedata
import uuid

from fleet import errors
from fleet.models import MAX_TOPIC, NAME_RE, OPERATOR, PARTICIPANT_RE, ParticipantKind

RESERVED = frozenset({"system"})
"""Author of provenance blips; no participant may take the name."""


def participant_name(name: str) -> str:
    if not isinstance(name, str) or not PARTICIPANT_RE.fullmatch(name) or name in RESERVED:
        raise errors.UsageError(
            f"invalid participant name {name!r}: use 1-32 characters of a-z, 0-9, '_' or '-',"
            " starting with a letter ('system' is reserved)"
        )
    return name


def session_id(value: str) -> str:
    """An agent session id (Claude Code's: a UUID), or UsageError."""
    try:
        uuid.UUID(value)
    except ValueError:
        raise errors.UsageError(f"session id {value!r} is not a UUID") from None
    return value


def name(value: str, what: str) -> str:
    """A wave or wavelet name (``what`` says which, for the message)."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):  # fullmatch: `$` admits a final \n
        raise errors.UsageError(
            f"invalid {what} name {value!r}: use 1-64 characters of a-z, 0-9, '_', '.' or '-',"
            " starting with a letter or digit"
        )
    return value


def text(value: str, max_bytes: int) -> str:
    """Blip text: a non-blank string of valid UTF-8, at most ``max_bytes`` bytes of it."""
    if not isinstance(value, str):
        raise errors.UsageError("blip text must be a string")
    if not value.strip():
        raise errors.UsageError("blip text is empty: say something")
    size = len(value.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        raise errors.PayloadTooLarge(
            f"blip is {size} bytes, over the limit of {max_bytes}: split it, or put the"
            " bulk in a file and post its path"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise errors.UsageError("blip text is not valid UTF-8 (lone surrogate)") from exc
    return value


_NOT_ON_ONE_LINE = frozenset({"Cc", "Cs", "Zl", "Zp"})
"""Unicode categories a topic refuses: controls (newline, tab, escape, DEL, C1), lone surrogates
(not UTF-8), and the line and paragraph separators: what would break the one line it is shown on."""


def topic(value: object) -> str:
    """A wavelet topic: '' (none), or one line of at most :data:`MAX_TOPIC` characters that is not
    only spaces, with no character of :data:`_NOT_ON_ONE_LINE`. Returned unchanged (never
    stripped): what is stored reads back exactly."""
    if not isinstance(value, str):
        raise errors.UsageError(f"the topic must be a string, not {type(value).__name__}")
    for i, ch in enumerate(value):
        if unicodedata.category(ch) in _NOT_ON_ONE_LINE:
            cat = unicodedata.category(ch)
            what = (
                "a newline" if ch in "\n\r"
                else f"the line separator U+{ord(ch):04X}" if cat in ("Zl", "Zp")
                else f"the control character U+{ord(ch):04X}"
            )  # fmt: skip
            raise errors.UsageError(
                f"the topic has {what} at character {i + 1}: a topic is one line with no control"
                " characters; put the rest in a blip"
            )
    if len(value) > MAX_TOPIC:
        raise errors.UsageError(
            f"the topic is {len(value)} characters, over the limit of {MAX_TOPIC}: shorten it, and put"
            " the rest in a blip"
        )
    if value and not value.strip():
        raise errors.UsageError("the topic is only spaces: write one, or clear it (--clear)")
    return value


def kind_of(participant: str) -> ParticipantKind:
    """The operator is the one human; every other participant is an agent."""
    return "human" if participant == OPERATOR else "agent"
