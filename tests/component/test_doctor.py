"""``fleet doctor`` as a user runs it: each check with its fix, exit 1 when fleet's main job cannot work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fleet.daemon import Daemon
from fleet.paths import Paths


def doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", "doctor", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_doctor_reports_every_check_and_passes_on_a_good_machine(daemon: Daemon, fleet_env: Paths) -> None:
    env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": daemon.operator_token}
    res = doctor(env, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    assert set(checks) == {"python", "tmux", "claude", "codex", "channels", "daemon", "secrets", "layouts"}
    assert checks["tmux"]["level"] == "ok" and checks["daemon"]["level"] == "ok"
    assert daemon.url in checks["daemon"]["detail"] and "operator" in checks["daemon"]["detail"]


def test_doctor_names_each_problem_with_its_fix(daemon: Daemon, fleet_env: Paths, tmp_path: Path) -> None:
    fleet_env.operator_token.chmod(0o644)
    fleet_env.layouts.mkdir(parents=True)
    (fleet_env.layouts / "mine.toml").write_text('arrangement = "spiral"\n')
    env = {
        **os.environ,
        "PATH": str(tmp_path),  # no tmux, no claude
        "FLEET_DAEMON": daemon.url,
        "FLEET_TOKEN": "wrong",
    }
    res = doctor(env)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    out = res.stdout
    assert "FAIL  tmux" in out and "apt-get install tmux" in out
    assert "WARN  claude" in out and "--agent" in out
    assert "WARN  codex" in out and "npm install -g @openai/codex@0.169.0" in out
    assert "FAIL  daemon" in out and "token" in out
    assert "FAIL  secrets" in out and f"chmod 600 {fleet_env.operator_token}" in out
    assert "FAIL  layouts" in out and "mine.toml" in out and "arrangement" in out
    assert "tmux" in res.stderr and "secrets" in res.stderr
