"""``fleet claude``: the operator's in-band voice — Claude Code in this terminal as ``operator``.

Claude Code is launched (or, with ``--resume``, resumed) with the wave's channel injected inline as
participant ``operator``; its development-channels confirmation is accepted automatically (pexpect,
bounded wait), then the terminal is handed to the user. What the operator asks there arrives as
ordinary human blips that wake the wave. Deliveries reach the operator's session only from wavelets
whose roster includes ``operator`` (``fleet invite WAVELET operator``). Flags after ``--`` go to
Claude Code as they are (``fleet claude -- --model opus``). Without a terminal on stdin it refuses
at once (exit 2), before anything is recorded.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from fleet import errors
from fleet.channel.tools import instructions
from fleet.client import Client
from fleet.layouts import ResolvedProfile
from fleet.models import OPERATOR, NewSession
from fleet.paths import Paths, write_private
from fleet.spawn import (
    DEV_CHANNELS_PROMPT,
    agent_argv,
    agent_words,
    channel_entry,
    is_claude,
    mcp_config,
    require_agent,
)
from fleet.watch import hook_settings


def as_streamed(text: str) -> re.Pattern[str]:
    """``text`` as it appears in a terminal's byte stream: Claude Code 2.1.332 draws the space between
    two words as a cursor move (``ESC[10G``), so the literal sentence never occurs in its output."""
    gap = r"(?:\s|\x1b\[[0-9;?]*[A-Za-z])+"
    return re.compile(gap.join(re.escape(word) for word in text.split()))


def run(
    client: Client,
    paths: Paths,
    wave_ref: str,
    *,
    resume: bool,
    claude: str = "claude",
    args: Sequence[str] = (),
) -> int:
    """Run the operator's session to its end; returns Claude Code's exit status.

    ``args`` are appended to Claude Code's command line as they are (say, ``--debug-file PATH``).
    """
    import pexpect

    if sys.stdin is None or not sys.stdin.isatty():
        # before anything is recorded or written: the hand-over (pexpect's interact) needs a tty
        raise errors.UsageError(
            "fleet claude needs a terminal: its standard input is not one (a pipe, a file or"
            " /dev/null). Run it in a terminal; to run agents without one use `fleet spawn`"
        )
    wave = client.get_wave(wave_ref)
    words = agent_words(claude)
    require_agent(words)
    record = next((s for s in client.sessions(wave.id, OPERATOR)), None)
    if resume and record is None:
        raise errors.NotFound(
            f"no operator session to resume in wave {wave.name!r}: run `fleet claude` first"
        )
    session_id = record.session_id if resume and record else str(uuid.uuid4())
    token_file = paths.tokens / wave.id / f"{OPERATOR}.token"
    write_private(token_file, client.token + "\n")
    claude_code = is_claude(words)
    entry = channel_entry(
        OPERATOR,
        wave.name,
        client.base_url,
        token_file,
        state_dir=paths.channels,
        receipts=claude_code,
        hook_fallback=True,
    )
    hook = hook_settings(
        OPERATOR, wave.name, token_file, daemon=client.base_url, state_dir=paths.channels, gate=True
    )
    prompt = instructions(OPERATOR, wave.name) if claude_code else None
    argv = agent_argv(
        words, ResolvedProfile(args=list(args)), OPERATOR, session_id, mcp_config(entry),
        resume=resume, transport="auto", hook_settings=hook, system_prompt=prompt,
    )  # fmt: skip
    client.record_session(
        wave.id,
        NewSession(
            participant=OPERATOR, session_id=session_id, wavelet_id=wave.root_id, agent=claude,
            transport="auto", cwd=os.getcwd(), host=socket.gethostname(),
        ),
    )  # fmt: skip
    size = shutil.get_terminal_size((120, 40))
    child = pexpect.spawn(argv[0], argv[1:], dimensions=(size.lines, size.columns), encoding="utf-8")

    def resize(_sig: int, _frame: Any) -> None:
        s = shutil.get_terminal_size((120, 40))
        child.setwinsize(s.lines, s.columns)

    signal.signal(signal.SIGWINCH, resize)
    child.logfile_read = sys.stdout
    try:
        if child.expect([as_streamed(DEV_CHANNELS_PROMPT), pexpect.TIMEOUT, pexpect.EOF], timeout=15) == 0:
            child.send("\r")
    finally:
        child.logfile_read = None
    if child.isalive():
        child.interact()
    child.close()
    return int(child.exitstatus or 0)
