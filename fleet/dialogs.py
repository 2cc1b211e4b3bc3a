"""Claude Code's startup dialogs, found on a pane's screen at any width.

Claude Code's TUI wraps its own text to the pane (explicit line breaks, mid-word for a long word, so
tmux's ``capture-pane -J`` does not join it) and draws rules and borders around it. Every screen match
fleet makes goes through :func:`squeeze`, which drops whitespace, line breaks and box-drawing
characters and folds case on both sides, so a dialog is found the same in a 12-column pane as in a
220-column one (both checked with Claude Code 2.1.332). What a caller may rely on:

- :func:`shows` is the one test "does this screen show this text"; :func:`find` names the dialog a
  screen shows with the first line to report, :func:`dialog_of` that first line alone (``None``: no
  dialog). A screen shows a dialog when its text ends with the footer of Claude Code's selection
  dialogs, "Enter to confirm · Esc to cancel" (a dialog is the last thing drawn; words merely
  printed by a session above its prompt are not a dialog); which one, by its words: a known one
  (:data:`KNOWN`), else any other, titled by the first text under its rule. First-run setup
  (:data:`ONBOARDING`) has no footer: it is known by words at the top of the screen.
- :func:`focused` says whether a known dialog's accepting option holds the focus marker (``❯``) and
  :func:`toward` which key brings it there, so spawn presses Enter only on the option it means
  (Claude Code's folder-trust prompt focuses "No, exit").
- :func:`pane_dialog` reads a tmux pane's visible screen (what ``fleet status`` calls for a live pane);
  :func:`flag` sets or clears a window's ``dialog: <first line>`` flag, never another waiter's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleet.tmux import Tmux

_DROP = re.compile(r"[\s\u2500-\u259f]+")
"""Whitespace (line breaks included) and the box-drawing and block-element ranges (rules, borders,
the ``▎`` gutter of a notice, the logo)."""
_RULE = re.compile(r"^\s*[\u2500-\u257f]*[─━═]{3,}[\u2500-\u257f]*\s*$")
"""A line that is a rule (a box's top included): box-drawing characters alone, a run of them across."""
FOCUS = "❯"
"""The marker Claude Code draws before the focused option of a selection."""
FOOTER = "Enter to confirm · Esc to cancel"
"""The footer of Claude Code's selection dialogs (its confirm/cancel component)."""


def squeeze(text: str) -> str:
    """``text`` with whitespace, line breaks and box-drawing characters removed and case folded: the
    form in which two renderings of the same words at different widths are equal."""
    return _DROP.sub("", text).casefold()


def shows(screen: Sequence[str] | str, text: str) -> bool:
    """Whether ``screen`` (its lines, or one string) shows ``text``, however it was wrapped or boxed."""
    joined = screen if isinstance(screen, str) else "\n".join(screen)
    return squeeze(text) in squeeze(joined)


@dataclass(frozen=True)
class Dialog:
    """A startup dialog of Claude Code that fleet knows by its words."""

    name: str
    title: str
    """The line it is reported by (``waiting at a dialog: <title>``): its title, or for the trust
    prompt, whose title "Accessing workspace:" says little, its question."""
    signs: tuple[str, ...]
    """Texts any one of which, above the footer, says it is this dialog."""
    accept: str = ""
    """The label of the option that accepts it ('' when fleet never answers it)."""
    remedy: str = ""
    """What avoids it, said after "attach and answer it" (a flag, a setting)."""
    footer: bool = True
    """Drawn with the selection footer last; else a full-screen step that starts with one of
    :attr:`signs` (within its first :data:`TOP_LINES` lines of text)."""
    ends: str = ""
    """Its own footer, when its CLI draws another than Claude Code's (:data:`FOOTER`: '' )."""


DEV_CHANNELS = Dialog(
    name="development channels",
    title="WARNING: Loading development channels",
    signs=("I am using this for local development", "WARNING: Loading development channels"),
    accept="I am using this for local development",
    remedy="or spawn with --transport hook (no development channel, no dialog)",
)
"""Shown at every launch with ``--dangerously-load-development-channels`` where the account has
channels; Claude Code has no setting that skips it (2.1.332), so spawn accepts it."""
TRUST = Dialog(
    name="folder trust",
    title="Quick safety check: Is this a project you created or one you trust?",
    signs=("Yes, I trust this folder",),
    accept="Yes, I trust this folder",
    remedy="or run it again with --trust",
)
"""Shown for a folder ``~/.claude.json`` does not mark trusted; its focus starts on "No, exit"."""
BYPASS = Dialog(
    name="bypass permissions",
    title="WARNING: Claude Code running in Bypass Permissions mode",
    signs=("in Bypass Permissions mode",),
    remedy="or set skipDangerousModePermissionPrompt in Claude Code's settings to skip it",
)
"""``--dangerously-skip-permissions`` (or that permission mode); its focus starts on "No, exit" and
fleet never answers it: accepting the risk is the operator's decision."""
API_KEY = Dialog(
    name="custom API key",
    title="Detected a custom API key in your environment",
    signs=("Detected a custom API key in your environment",),
    remedy="or give the key as ANTHROPIC_AUTH_TOKEN instead of ANTHROPIC_API_KEY (no question asked)",
)
"""``ANTHROPIC_API_KEY`` set and not yet approved in ``~/.claude.json``; its focus starts on "No"."""
ONBOARDING = Dialog(
    name="first-run setup",
    title="Choose the text style that looks best with your terminal",
    signs=("Choose the text style that looks best with your terminal",),
    remedy="or run `claude` once by hand in this home to finish its first-run setup",
    footer=False,
)
"""The first step of Claude Code's first-run setup (``hasCompletedOnboarding`` not set): a theme
picker drawn from the top of the screen, with no selection footer."""
CODEX_TRUST = Dialog(
    name="Codex folder trust",
    title="Trust this folder? (Codex)",
    signs=("Trust this folder? Codex can read, edit, and run files here",),
    remedy="or spawn again with --trust (fleet then marks the folder trusted in Codex's config, inline)",
    footer=False,
)
"""The Codex CLI's (0.169.0) "Folder access" step in a git checkout it does not trust: fleet never
presses through it; with ``--trust`` spawn passes ``projects."<cwd>".trust_level`` and it is not shown."""
CODEX_APPROVAL = Dialog(
    name="Codex approval",
    title="Codex asks: Would you like to run the following command?",
    signs=("Would you like to run the following command?",),
    remedy="Codex's approvals are answered in its pane (y, p or esc): `fleet permission` cannot answer them",
    ends="Press enter to confirm or esc to cancel",
)
"""Codex (0.169.0) asking to run a command outside its sandbox (the model asked for escalation); its
rollout says nothing of the wait (only the call), so the pane is where fleet sees it."""
KNOWN = (DEV_CHANNELS, TRUST, BYPASS, API_KEY, ONBOARDING, CODEX_TRUST, CODEX_APPROVAL)
TOP_LINES = 8
"""Lines of text from the top in which a full-screen step's words must start."""
OTHER = Dialog(name="dialog", title="", signs=(FOOTER,))
"""Any other selection dialog: fleet reports it and leaves the answer to the operator."""


@dataclass(frozen=True)
class Found:
    """A dialog on a screen and the first line to report for it."""

    dialog: Dialog
    first_line: str


def find(screen: Sequence[str]) -> Found | None:
    """The dialog ``screen`` shows, if any: a known one by its words (above the selection footer the
    screen's text ends with, or, for a full-screen step, at its top), else any dialog whose text
    ends with that footer (its first line is the first text under the last rule above the footer,
    joined across the lines it was wrapped onto)."""
    flat = squeeze("\n".join(screen))
    top = squeeze("\n".join([ln for ln in screen if ln.strip()][:TOP_LINES]))
    footed = flat.endswith(squeeze(FOOTER))
    for d in KNOWN:
        if d.footer and not (flat.endswith(squeeze(d.ends)) if d.ends else footed):
            continue
        if any(squeeze(s) in (flat if d.footer else top) for s in d.signs):
            return Found(d, d.title)
    return Found(OTHER, _first_line(screen)) if footed else None


def dialog_of(screen: Sequence[str]) -> str | None:
    """The first line of the dialog ``screen`` shows (``None``: no dialog)."""
    found = find(screen)
    return found.first_line if found else None


def focused(screen: Sequence[str], option: str) -> bool:
    """Whether ``option`` is the focused one (``❯`` before it, numbered or not)."""
    flat = squeeze("\n".join(screen))
    return re.search(re.escape(FOCUS) + r"(?:\d+\.)?" + re.escape(squeeze(option)), flat) is not None


def toward(screen: Sequence[str], option: str) -> str | None:
    """The key that brings the focus to ``option``: ``Enter`` when it has it already, ``Down`` or
    ``Up`` when the focus is above or below it, ``None`` while either is not on screen (still being
    drawn)."""
    if focused(screen, option):
        return "Enter"
    flat = squeeze("\n".join(screen))
    at, mark = flat.rfind(squeeze(option)), flat.rfind(FOCUS)
    if at < 0 or mark < 0:
        return None
    return "Down" if mark < at else "Up"


def pane_dialog(tmux: Tmux, pane_id: str) -> str | None:
    """The first line of the dialog a pane's visible screen shows (``None``: none, or no such pane)."""
    from fleet import errors

    try:
        return dialog_of(tmux.capture(pane_id))
    except errors.FleetError:  # the pane went away between listing and reading it
        return None


FLAG = "dialog: "
"""How a dialog's reason starts in a window's waiting flag (:data:`fleet.tmux.WAITING`)."""


def flag(tmux: Tmux, window_id: str, first_line: str | None) -> None:
    """Flag a window for a pane waiting at a dialog (``dialog: <first line>``), or take a dialog's flag
    away (``None``); a flag another waiter set (a permission prompt) is left as it is."""
    from fleet import errors

    try:
        current = tmux.window_flag(window_id)
        wanted = None if first_line is None else FLAG + first_line
        if (current and not current.startswith(FLAG)) or current == (wanted or ""):
            return  # another waiter's flag, or already as wanted (one tmux call, not two)
        tmux.flag_window(window_id, wanted)
    except errors.FleetError:  # the window closed meanwhile: nothing to flag
        return


def _first_line(screen: Sequence[str]) -> str:
    """The paragraph under the last rule above the footer (else the first text on screen), its
    wrapped lines joined: a dialog's title, however narrow the pane."""
    lines = list(screen)
    end = next((i for i in range(len(lines) - 1, -1, -1) if shows(lines[i:], FOOTER)), len(lines))
    start = 0
    for i in range(end - 1, -1, -1):
        if _RULE.match(lines[i]):
            start = i + 1
            break
    words: list[str] = []
    for ln in lines[start:end]:
        text = _DROP.sub(" ", ln).strip()
        if text:
            words.append(text)
        elif words:
            break
    return " ".join(words)[:200] or "(a dialog with no text above its options)"
