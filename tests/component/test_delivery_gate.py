"""The gate between a session's channel and its armed hook, with real processes and a synthetic transcript.

``--transport auto`` without Claude Code: a real ``fleet channel`` (spoken to over raw MCP) runs with
receipts read from a transcript the test writes in Claude Code's format (the line shapes:
tests/unit/test_delivery_receipts.py), and a real ``fleet watch --hook --gate`` is armed beside it.
Both are children of this test process, as both are children of Claude Code in a real session.
What Claude Code would do with the hook's output is what the test then writes into the transcript.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import libtmux
import pytest
from conftest import retry_until
from test_delivery_receipts import enqueue, entered, ts
from worlds import World, world

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.delivery import gate as gates
from fleet.delivery.frames import Frame
from fleet.delivery.ledger import GRACE
from fleet.delivery.state import DeliveryState
from fleet.paths import Paths
from fleet.supervise import status
from fleet.tmux import Tmux
from fleet.wire import load

BOUND = "0.5"


@pytest.fixture
def w(daemon: Daemon, operator: Client, fleet_env: Paths, tmp_path: Path) -> Iterator[World]:
    yield from world(daemon, operator, fleet_env, tmp_path, "w", ["alice", "bob"])


class Session:
    """What Claude Code would be for alice: a session id, its config dir, and (once written) a transcript."""

    def __init__(self, tmp: Path) -> None:
        self.id = str(uuid.uuid4())
        self.config = tmp / "claude-config"
        self.transcript = self.config / "projects" / "-project" / f"{self.id}.jsonl"

    @property
    def env(self) -> dict[str, str]:
        import os

        return {**os.environ, "CLAUDE_CODE_SESSION_ID": self.id, "CLAUDE_CONFIG_DIR": str(self.config)}

    def write(self, *lines: dict[str, object] | bytes) -> None:
        self.transcript.parent.mkdir(parents=True, exist_ok=True)
        with open(self.transcript, "ab") as f:
            for line in lines:
                f.write(line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n")

    def hook_input(self) -> str:
        return json.dumps({"session_id": self.id, "transcript_path": str(self.transcript),
                           "hook_event_name": "Stop"})  # fmt: skip


def arm(w: World, s: Session) -> subprocess.CompletedProcess[str]:
    """One arm of alice's gated hook, to its end (what Claude Code runs at a turn's end)."""
    return subprocess.run(
        w.watch_argv("alice", "--hook", "--gate", "--state-dir", str(w.paths.channels)),
        input=s.hook_input(), capture_output=True, text=True, timeout=60, env=s.env,
    )  # fmt: skip


def state(w: World) -> DeliveryState:
    return w.state_file("alice").load()


def test_a_push_the_transcript_never_shows_reaches_the_hook_once_and_status_says_why(
    w: World, tmux_server: libtmux.Server
) -> None:
    s = Session(w.tmp)
    alice = w.channel("alice", "--receipts", "transcript", "--hook-fallback", "--bound", BOUND, env=s.env)
    first = w.post("are you there, alice?")
    alice.wait_notes(lambda n: [x for x in n if x["meta"].get("blip_id") == first], what="the push")
    # Claude Code wrote no transcript: the push is never confirmed, and after the bound it is the hook's
    retry_until(lambda: state(w).receipts_problem, what="the receipts problem recorded")
    woke = arm(w, s)
    assert woke.returncode == 2, woke.stderr
    assert first in woke.stderr and "are you there, alice?" in woke.stderr
    pending = state(w).pending
    assert [(p.frame.kind, p.path) for p in pending] == [("system", "hook"), ("message", "hook")], pending
    assert pending[1].frame.id == first
    # status tells the truth: unconfirmed, and why receipts are missing — once, not a log flood
    row = next(r for r in status(w.op, Tmux(tmux_server), w.paths, "w").rows if r.participant == "alice")
    assert row.unconfirmed == 2 and "no transcript yet" in row.receipts_problem
    # the hook's delivery enters the context (Claude Code's task-notification line): confirmed, not
    # handed out again; a second arm finds nothing and waits, so it is given a blip to take
    s.write(*(entered(p.frame, 1.0, via="task-notification") for p in pending))
    retry_until(lambda: not state(w).pending, what="the hook's delivery confirmed")
    assert state(w).receipts_problem == ""
    second = w.post("second one")
    again = arm(w, s)
    assert again.returncode == 2 and second in again.stderr and first not in again.stderr
    stderr = (w.tmp / "alice-0.stderr").read_text()
    assert stderr.count("receipts unavailable") == 1, stderr


def test_a_hook_slow_to_exit_is_not_handed_its_blips_again_while_the_session_runs_on(w: World) -> None:
    """The channel hands an armed hook what is owed; the hook's process is starved and exits seconds
    later (its end of the gate stays open until then), while the session runs on, woken by something
    else. Nothing the hook carries is judged lost before it exits: its feedback enters then, once."""
    s = Session(w.tmp)
    alice = w.channel(
        "alice", "--receipts", "transcript", "--hook-fallback", "--bound", BOUND, env=s.env, pongs=True
    )
    blip = w.post("hello")
    alice.wait_notes(lambda n: [x for x in n if x["meta"].get("blip_id") == blip], what="the push")
    hook = gates.arm(w.state_file("alice").path, pid=os.getpid())  # a hook process, armed at the gate
    frames = [load(Frame, f) for f in json.loads(hook.makefile("rb").readline())["frames"]]
    assert blip in [f.id for f in frames]
    handed = time.time()
    retry_until(
        lambda: [p.path for p in state(w).pending] == ["hook"] * len(frames), what="the hand-out saved"
    )
    s.write(
        {"type": "assistant", "timestamp": ts(handed + 10), "message": {"role": "assistant", "content": []}}
    )
    deadline = handed + GRACE + 1.5  # the session ran on well past the grace: no evidence while the hook runs
    while time.time() < deadline:
        assert all(p.path == "hook" for p in state(w).pending), state(w).pending
        time.sleep(0.1)
    hook.close()  # the hook's process exits: Claude Code takes its feedback
    s.write(
        *(enqueue(f, time.time()) for f in frames),
        *(entered(f, time.time(), via="task-notification") for f in frames),
    )
    retry_until(lambda: not state(w).pending, what="the hook's delivery confirmed")
    assert "owed to the hook again" not in (w.tmp / "alice-0.stderr").read_text()


def test_a_hook_that_exits_without_its_blips_entering_has_them_handed_again(w: World) -> None:
    """The converse: once the hook is gone and the session ran on past the grace without its
    feedback entering, the frames are owed again (a hook delivery can still be lost)."""
    s = Session(w.tmp)
    alice = w.channel(
        "alice", "--receipts", "transcript", "--hook-fallback", "--bound", BOUND, env=s.env, pongs=True
    )
    blip = w.post("hello")
    alice.wait_notes(lambda n: [x for x in n if x["meta"].get("blip_id") == blip], what="the push")
    hook = gates.arm(w.state_file("alice").path, pid=os.getpid())
    assert blip in hook.makefile("rb").readline().decode()
    hook.close()
    gone = time.time()
    s.write(
        {"type": "assistant", "timestamp": ts(gone + 10), "message": {"role": "assistant", "content": []}}
    )
    retry_until(lambda: any(p.path == "waiting" for p in state(w).pending), what="owed to the hook again")
    again = arm(w, s)
    assert again.returncode == 2 and blip in again.stderr


def test_a_transcript_of_another_format_or_cut_mid_line_is_never_a_receipt(w: World) -> None:
    s = Session(w.tmp)
    s.write(b'{"not": "claude code"}\n', b"also not json\n")
    alice = w.channel("alice", "--receipts", "transcript", "--hook-fallback", "--bound", BOUND, env=s.env)
    blip = w.post("hello")
    alice.wait_notes(lambda n: [x for x in n if x["meta"].get("blip_id") == blip], what="the push")
    frame = Frame(id=blip, wavelet="w/main", wavelet_id=w.main, author="bob", kind="message",
                  text="hello", created_at="t")  # fmt: skip
    line = json.dumps(entered(frame, 1.0)).encode()
    s.write(line[: len(line) // 2])  # the receipt, cut mid-line: not taken
    retry_until(lambda: "format" in state(w).receipts_problem, what="the unknown format named")
    woke = arm(w, s)
    assert woke.returncode == 2 and blip in woke.stderr
    assert blip in [p.frame.id for p in state(w).pending]
