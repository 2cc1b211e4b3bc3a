"""The state hook as Claude Code runs it: a real shell command appending its stdin to the
session's private file (the fold that reads it: tests/unit/test_agentstate.py)."""

from __future__ import annotations

import json
from pathlib import Path

from fleet.agentstate import HookLog, hook_command, hook_entries


def test_the_hook_command_appends_its_stdin_to_a_quoted_private_file(tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "it's $(here)" / "s.jsonl"
    log = HookLog(path)
    log.prepare()
    cmd = hook_command(path)
    for i in range(2):
        subprocess.run(["sh", "-c", cmd], input=json.dumps({"hook_event_name": "SessionEnd", "n": i}),
                       text=True, check=True)  # fmt: skip
    assert [e["n"] for e in log.read()] == [0, 1] and log.read() == []
    assert (path.stat().st_mode & 0o777) == 0o600
    assert set(hook_entries(path)) == {"Notification", "StopFailure", "SessionEnd"}
