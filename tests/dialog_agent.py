"""A stand-in for Claude Code's startup dialogs: ``python dialog_agent.py KIND -- AGENT...``.

Draws the dialog ``KIND`` (``trust``: the folder-trust prompt, focus on "No, exit"; ``dev``: the
development-channels warning, focus on its confirm option; ``other``: a selection dialog fleet does
not know) in Claude Code 2.1.332's words (``other``: in its shape), wrapped
to the pane's width and under a rule as Claude Code draws it, redrawn at each key: Down/Up move the
focus; Enter chooses the focused option: the accepting one execs ``AGENT...``, any other exits 1
(as trust's "No, exit" and dev's "Exit" do).
"""

from __future__ import annotations

import os
import shutil
import sys
import termios
import textwrap
import tty

DIALOGS = {
    "trust": (
        ["Accessing workspace:", "", os.getcwd(), "",
         "Quick safety check: Is this a project you created or one you trust?"],
        ["No, exit", "Yes, I trust this folder"],
        1,  # the accepting option
        0,  # the focus at first
    ),
    "dev": (
        ["WARNING: Loading development channels", "",
         "--dangerously-load-development-channels is for local channel development only."],
        ["1. I am using this for local development", "2. Exit"],
        0,
        0,
    ),
    "other": (
        ["Pick a colour for this session's border", "", "It can be changed later."],
        ["Red", "Blue"],
        -1,  # fleet does not know this one: nothing accepts it
        0,
    ),
}  # fmt: skip


def draw(kind: str, focus: int) -> None:
    text, options, _, _ = DIALOGS[kind]
    width = max(shutil.get_terminal_size().columns - 1, 10)
    lines = ["─" * width]
    for para in text:
        lines += textwrap.wrap(para, width - 2, break_long_words=True) or [""]
    lines.append("")
    for i, opt in enumerate(options):
        wrapped = textwrap.wrap(opt, width - 4, break_long_words=True)
        lines.append(("❯ " if i == focus else "  ") + wrapped[0])
        lines += ["  " + w for w in wrapped[1:]]
    lines += ["", *textwrap.wrap("Enter to confirm · Esc to cancel", width - 2)]
    sys.stdout.write("\x1b[H\x1b[2J" + "\r\n".join(" " + ln for ln in lines) + "\r\n")
    sys.stdout.flush()


def main() -> None:
    kind, agent = sys.argv[1], sys.argv[sys.argv.index("--") + 1 :]
    _, options, accept, focus = DIALOGS[kind]
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        draw(kind, focus)
        while True:
            key = os.read(fd, 8)
            if key in (b"\x1b[B", b"\x1bOB"):
                focus = min(focus + 1, len(options) - 1)
            elif key in (b"\x1b[A", b"\x1bOA"):
                focus = max(focus - 1, 0)
            elif key in (b"\r", b"\n"):
                break
            draw(kind, focus)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    sys.stdout.write("\x1b[H\x1b[2J")
    sys.stdout.flush()
    if focus != accept:
        sys.exit(1)
    os.execvp(agent[0], agent)


if __name__ == "__main__":
    main()
