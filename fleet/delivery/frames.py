"""Frames: what a transport hands a participant, and the one way each transport renders it.

A :class:`Frame` is one unit of delivery: a blip, a digest of blips (targeted attention), the cap's
exhaustion notice, or fleet's own error notice. :func:`frame_of` makes it from a rules decision.
Every transport renders the same frame from it:

- the channel pushes :func:`notification` (``notifications/claude/channel`` params: ``content`` and
  string ``meta``), which Claude Code shows the model as a ``<channel source="fleet" …>`` block;
- ``fleet watch --hook`` writes :func:`channel_tag` — byte for byte that block — to stderr, so a
  woken session reads exactly what a channel push would have shown it;
- plain ``fleet watch`` prints :func:`block` (readable) or the frame as JSON (``--json``).

Meta keys are identifiers (``wavelet``, ``wavelet_id``, ``blip_id``, ``author``, ``kind``, and
``replaces`` / ``blip_ids`` where they apply), values are strings. ``kind`` is ``message``,
``system``, ``surface``, ``digest``, ``cap``, ``budget`` (:mod:`fleet.budgets`' one notice) or
``error``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from fleet.delivery.rules import Action, Attention, Decision, digest_text
from fleet.wire import Record

SOURCE = "fleet"
"""The channel's server name: Claude Code's ``source=`` attribute of every block."""


class Frame(Record, kw_only=True):
    """One thing handed to the participant. ``fleet watch --json`` prints these (stable names)."""

    id: str
    """The blip's id (a cap notice: the blip it stands in for; a digest: its newest blip)."""
    wavelet: str
    """WAVE/WAVELET."""
    wavelet_id: str
    author: str
    """The blip's author; ``fleet`` for a cap notice, a digest or an error."""
    kind: str
    """``message``, ``system``, ``surface``, ``cap``, ``budget``, ``digest`` or ``error``."""
    text: str
    created_at: str
    replaces: str | None = None
    blip_ids: list[str] | None = None
    """A digest: the blips it lists, oldest first (``id`` is the last); None otherwise."""

    def meta(self) -> dict[str, str]:
        """The channel notification's ``meta`` (and the block's attributes), in their fixed order."""
        if self.kind == "error":
            return {"author": self.author, "kind": self.kind}
        meta = {
            "wavelet": self.wavelet,
            "wavelet_id": self.wavelet_id,
            "blip_id": self.id,
            "author": self.author,
            "kind": self.kind,
        }
        if self.replaces:
            meta["replaces"] = self.replaces
        if self.blip_ids is not None:
            del meta["blip_id"]
            meta["blip_ids"] = ",".join(self.blip_ids)
        elif not self.id:  # a budget notice stands in for no blip: nothing for a receipt to confirm
            del meta["blip_id"]
        return meta


def cap_unit(attention: Attention) -> str:
    """What the cap counts: blips under full attention, frames (blips and digests) under targeted."""
    return "blips" if attention == "full" else "notifications (blips and digests)"


def exhaustion_notice(wavelet: str, cap: int, unit: str = "blips") -> str:
    """The text of the one notice sent when ``wavelet`` reaches its cap (``unit``: what was counted)."""
    return (
        f"Delivery cap reached in {wavelet}: {cap} {unit} were pushed to you there since the operator "
        f"last posted in it. Further blips there are not pushed; they stay readable with wavelet_read. "
        f"Delivery resumes when the operator posts in {wavelet}. Do not post to ask for more."
    )


def frame_of(decision: Decision, label: str, cap: int, attention: Attention) -> Frame:
    """What a DELIVER or NOTICE decision hands out; ``label`` is the wavelet's WAVE/WAVELET."""
    blip = decision.blip
    if decision.action is Action.NOTICE:
        return Frame(
            id=blip.id,
            wavelet=label,
            wavelet_id=blip.wavelet_id,
            author="fleet",
            kind="cap",
            text=exhaustion_notice(label, cap, cap_unit(attention)),
            created_at=blip.created_at,
        )
    if decision.digest:
        return Frame(
            id=blip.id,
            wavelet=label,
            wavelet_id=blip.wavelet_id,
            author="fleet",
            kind="digest",
            text=digest_text(decision.digest),
            created_at=blip.created_at,
            blip_ids=[b.id for b in decision.digest],
        )
    return Frame(
        id=blip.id,
        wavelet=label,
        wavelet_id=blip.wavelet_id,
        author=blip.author,
        kind=blip.kind,
        text=blip.text,
        created_at=blip.created_at,
        replaces=blip.replaces,
    )


def error_frame(text: str) -> Frame:
    """fleet's own notice that delivery stopped (a corrupt state file): no wavelet, no blip."""
    return Frame(id="", wavelet="", wavelet_id="", author="fleet", kind="error", text=text, created_at="")


# ---------------------------------------------------------------- renderings


_TAG = re.compile(r"<(\s*/?\s*channel)", re.IGNORECASE)


def defuse(text: str) -> str:
    """``text`` with every ``<channel`` and ``</channel`` (any case, spaces allowed) written
    ``<\\channel`` / ``<\\/channel``, so no blip can close its block or open one that looks like
    another author's. (Claude Code itself defuses only ``</channel``, case-sensitively.)"""
    return _TAG.sub(r"<\\\1", text)


def notification(frame: Frame) -> dict[str, Any]:
    """The ``notifications/claude/channel`` params the channel pushes for ``frame`` (text defused)."""
    return {"content": defuse(frame.text), "meta": frame.meta()}


_ATTR = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;"})
"""``html.escape(quote=True)`` with ``&apos;`` for ``'``, as one table (the html module, with its
entity table, is 1.5 ms of a channel's start for these five characters)."""


def _attr(value: str) -> str:
    """An attribute value escaped as Claude Code escapes channel meta (``& < > " '``)."""
    return value.translate(_ATTR)


def channel_tag(frame: Frame) -> str:
    """``frame`` exactly as Claude Code shows a channel notification to the model (claude-code.md §2)."""
    attrs = "".join(f' {k}="{_attr(v)}"' for k, v in frame.meta().items())
    text = defuse(frame.text)
    return f'<channel source="{SOURCE}"{attrs}>\n{text}\n</channel>'


def blip_block(wavelet: str, author: str, kind: str, blip_id: str, text: str, replaces: str | None) -> str:
    """A blip as a readable block, the same for every transport: ``[WAVE/WAVELET] author (kind) · id``
    (and ``[replaces ID]`` for a new version), then the text below it."""
    mark = "" if kind == "message" else f" ({kind})"
    edit = f" [replaces {replaces}]" if replaces else ""
    return f"[{wavelet}] {author}{mark} · {blip_id}{edit}\n{text}"


def block(frame: Frame) -> str:
    """``frame`` as a readable block (plain ``fleet watch``)."""
    return blip_block(frame.wavelet, frame.author, frame.kind, frame.id, frame.text, frame.replaces)


def hook_report(frames: Iterable[Frame], participant: str, wave: str) -> str:
    """What a waking hook writes to stderr (the model reads it): a header line, then the blocks."""
    items = list(frames)
    n = len(items)
    head = (
        f"fleet: {n} new blip{'s' if n != 1 else ''} for {participant} in wave {wave}. Reply with "
        "wavelet_post (pass the wavelet attribute) only when you have something to add; never reply "
        "to system, surface or cap blips."
    )
    return head + "\n\n" + "\n\n".join(channel_tag(f) for f in items) + "\n"
