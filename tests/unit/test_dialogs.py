"""Claude Code's startup dialogs are found on a screen at any width (fleet/dialogs.py).

The recorded screens in tests/data/dialogs/ are the real Claude Code 2.1.332 in tmux panes created
18, 40, 80 and 220 columns wide (``capture-pane -p -J``, as spawn reads them; capture.sh made them).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fleet import dialogs

DATA = Path(__file__).resolve().parents[1] / "data" / "dialogs"
WIDTHS = (18, 40, 80, 220)


def screen(name: str) -> list[str]:
    return (DATA / f"{name}.txt").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_development_channels_dialog_is_found_focused_on_its_confirm_at_every_recorded_width(
    width: int,
) -> None:
    lines = screen(f"dev-channels-{width}")
    found = dialogs.find(lines)
    assert found is not None and found.dialog is dialogs.DEV_CHANNELS
    assert dialogs.dialog_of(lines) == "WARNING: Loading development channels"
    assert dialogs.focused(lines, dialogs.DEV_CHANNELS.accept)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_folder_trust_prompt_is_found_with_its_focus_on_no_at_every_recorded_width(width: int) -> None:
    lines = screen(f"trust-{width}")
    found = dialogs.find(lines)
    assert found is not None and found.dialog is dialogs.TRUST
    assert not dialogs.focused(lines, dialogs.TRUST.accept) and dialogs.focused(lines, "No, exit")
    moved = [
        ln.replace("❯ No, exit", "  No, exit").replace("  Yes, I trust", "❯ Yes, I trust") for ln in lines
    ]
    assert dialogs.focused(moved, dialogs.TRUST.accept)


@pytest.mark.parametrize(
    ("name", "dialog"),
    [("onboarding-40", dialogs.ONBOARDING), ("api-key-40", dialogs.API_KEY), ("bypass-40", dialogs.BYPASS)],
)
def test_the_other_startup_dialogs_met_are_known_by_their_words(name: str, dialog: dialogs.Dialog) -> None:
    """First-run setup (no footer, drawn from the top), the custom API key question and the Bypass
    Permissions warning (its title scrolled off a 20-row pane: known by its body)."""
    found = dialogs.find(screen(name))
    assert found is not None and found.dialog is dialog and found.first_line == dialog.title
    assert not dialog.accept  # never answered by fleet


def test_a_session_that_prints_the_first_run_words_below_its_top_is_not_at_first_run_setup() -> None:
    lines = screen("ready-80")
    assert dialogs.find([*lines[:-6], dialogs.ONBOARDING.signs[0], *lines[-6:]]) is None


@pytest.mark.parametrize("width", WIDTHS)
def test_the_key_toward_the_accepting_option_on_the_recorded_screens(width: int) -> None:
    trust, dev = screen(f"trust-{width}"), screen(f"dev-channels-{width}")
    assert dialogs.toward(trust, dialogs.TRUST.accept) == "Down"
    assert dialogs.toward(dev, dialogs.DEV_CHANNELS.accept) == "Enter"
    past = [ln.replace("❯ 1.", "  1.").replace("  2. Exit", "❯ 2. Exit") for ln in dev]
    assert dialogs.toward(past, dialogs.DEV_CHANNELS.accept) == "Up"
    assert dialogs.toward([ln.replace("❯", " ") for ln in dev], dialogs.DEV_CHANNELS.accept) is None


@pytest.mark.parametrize("width", WIDTHS)
def test_a_ready_session_shows_no_dialog(width: int) -> None:
    assert dialogs.dialog_of(screen(f"ready-{width}")) is None


@pytest.mark.parametrize("width", (18, 40))
def test_the_recorded_narrow_screens_wrap_the_words_a_plain_search_looks_for(width: int) -> None:
    """What the old ``text in screen`` missed: Claude Code breaks its own lines (mid-word at 18)."""
    joined = "\n".join(screen(f"dev-channels-{width}"))
    assert dialogs.DEV_CHANNELS.accept not in joined
    assert dialogs.shows(joined, dialogs.DEV_CHANNELS.accept)


# ---------------------------------------------------------------- any width, any border

BORDERS = {
    "none": ("", "", "", ""),
    "rule": ("─", "", "", ""),
    "round": ("╭─╮", "│ ", " │", "╰─╯"),
    "square": ("┌─┐", "│ ", " │", "└─┘"),
    "double": ("╔═╗", "║ ", " ║", "╚═╝"),
}


def draw(
    paragraphs: list[str], options: list[str], focus: int, width: int, border: str, indent: int
) -> list[str]:
    """A dialog as a TUI draws it: each paragraph and option wrapped to ``width`` (long words broken),
    under a rule or inside a box, indented, the focus marker before one option, the footer last."""
    top, left, right, bottom = BORDERS[border]
    inner = max(width - len(left) - len(right) - indent, 4)
    body: list[str] = []
    for para in paragraphs:
        body += textwrap.wrap(para, inner, break_long_words=True) or [""]
        body.append("")
    for i, opt in enumerate(options):
        wrapped = textwrap.wrap(opt, max(inner - 2, 2), break_long_words=True)
        body += [("❯ " if i == focus and j == 0 else "  ") + w for j, w in enumerate(wrapped)]
    body += ["", *textwrap.wrap(dialogs.FOOTER, inner, break_long_words=True)]
    pad = " " * indent
    lines = [pad + left + ln.ljust(inner) + right for ln in body]
    if top:
        lines.insert(0, top[0] + top[1] * (width - 2) + top[2:] if len(top) == 3 else top * width)
    if bottom:
        lines.append(bottom[0] + bottom[1] * (width - 2) + bottom[2])
    return ["", *lines, "", ""]


NARROWEST = 10
"""The narrowest width the property draws at (the recorded screens go down to 18 columns)."""
widths = st.integers(min_value=NARROWEST, max_value=240)
borders = st.sampled_from(sorted(BORDERS))
indents = st.integers(min_value=0, max_value=3)


@given(width=widths, border=borders, indent=indents)
@example(width=18, border="none", indent=2)
def test_a_known_dialog_drawn_at_any_width_inside_any_border_is_found(
    width: int, border: str, indent: int
) -> None:
    dev = draw(
        ["WARNING: Loading development channels",
         "--dangerously-load-development-channels is for local channel development only."],
        ["1. I am using this for local development", "2. Exit"], 0, width, border, indent,
    )  # fmt: skip
    assert dialogs.dialog_of(dev) == dialogs.DEV_CHANNELS.title
    assert dialogs.focused(dev, dialogs.DEV_CHANNELS.accept)
    trust = draw(
        ["Accessing workspace:", "/home/me/shop",
         "Quick safety check: Is this a project you created or one you trust?"],
        ["No, exit", "Yes, I trust this folder"], 1, width, border, indent,
    )  # fmt: skip
    found = dialogs.find(trust)
    assert found is not None and found.dialog is dialogs.TRUST
    assert dialogs.focused(trust, dialogs.TRUST.accept) and not dialogs.focused(trust, "No, exit")


options = ["No, exit", "Not now", "Yes, I trust this folder", "Never ask again"]


@given(width=widths, border=borders, indent=indents, focus=st.integers(0, 3))
def test_the_key_toward_the_accepting_option_from_any_focus_at_any_width(
    width: int, border: str, indent: int, focus: int
) -> None:
    lines = draw(["Accessing workspace:", "/home/me/shop"], options, focus, width, border, indent)
    want = "Enter" if focus == 2 else ("Down" if focus < 2 else "Up")  # "Yes, I trust …" is option 2
    assert dialogs.toward(lines, dialogs.TRUST.accept) == want


words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-:./", min_size=1, max_size=14)
sentences = st.lists(words, min_size=1, max_size=12).map(" ".join)


@given(title=sentences, body=st.lists(sentences, max_size=3), width=widths, border=borders, indent=indents)
def test_any_other_dialog_is_found_and_titled_by_its_first_paragraph(
    title: str, body: list[str], width: int, border: str, indent: int
) -> None:
    lines = draw([title, *body], ["Yes", "No"], 0, width, border, indent)
    found = dialogs.find(lines)
    assert found is not None and found.dialog is dialogs.OTHER
    assert dialogs.squeeze(found.first_line) == dialogs.squeeze(title)


@given(text=st.lists(sentences, max_size=30), width=widths, quoted=st.booleans())
def test_a_screen_that_does_not_end_in_a_dialog_is_no_dialog(
    text: list[str], width: int, quoted: bool
) -> None:
    """Unrelated screens, and a session's output that merely quotes a dialog's words (the prompt box
    drawn below them), are not dialogs."""
    lines = [w for para in text for w in textwrap.wrap(para, width, break_long_words=True)]
    if quoted:
        lines += [dialogs.DEV_CHANNELS.accept, dialogs.FOOTER, "Yes, I trust this folder"]
    lines += ["─" * width, "❯ ", "─" * width, "  ⏵⏵ auto mode on (shift+tab to cycle)"]
    assert dialogs.find(lines) is None


CODEX_APPROVAL_SCREEN = """\
› EXECESC now

• Running touch /tmp/cx/escalated-ran

  Would you like to run the following command?

  Environment: local

  Reason: test escalation

  $ touch /tmp/cx/escalated-ran

› 1. Yes, proceed (y)
  2. Yes, and don't ask again for commands that start with `touch /tmp/cx/escalated-ran` (p)
  3. No, and tell Codex what to do differently (esc)

  Press enter to confirm or esc to cancel

""".splitlines()
CODEX_TRUST_SCREEN = """\

  Folder access

  /tmp/cx/repo

  Trust this folder? Codex can read, edit, and run files here, subject to your permission
  settings. Folder settings can run code automatically, even without a model request. Continue
  only if you trust these files. Your trust decision will be saved.

› 1. Trust and continue
  2. Back to Agent Command Center

  enter continue · esc back
""".splitlines()


def test_codexs_approval_and_folder_trust_are_known_and_never_answered() -> None:
    """Recorded from codex-cli 0.169.0 in tmux (130 and 100 columns): fleet reports them with what to
    do and presses nothing (no ``accept``)."""
    approval = dialogs.find(CODEX_APPROVAL_SCREEN)
    assert approval is not None and approval.dialog is dialogs.CODEX_APPROVAL and not approval.dialog.accept
    trust = dialogs.find(CODEX_TRUST_SCREEN)
    assert trust is not None and trust.dialog is dialogs.CODEX_TRUST and "--trust" in trust.dialog.remedy
    assert dialogs.find(CODEX_APPROVAL_SCREEN[:-4]) is None  # the question alone, footer not drawn yet
