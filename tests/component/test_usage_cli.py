"""``fleet usage`` as a user runs it against a real daemon: sums per participant, wavelet and wave."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_usage import LINES, META, SID, TOOL_RESULT, reply, transcript, u, wake, write  # noqa: F401

from fleet.paths import Paths


def test_fleet_usage_sums_per_participant_wavelet_and_wave_and_names_an_unknown_model(
    fleet_env: Paths,
    transcript: Path,  # noqa: F811 (the fixture, imported above)
    daemon: Any,
    operator: Any,
) -> None:
    from fleet.models import NewSession

    operator.create_wave("w", ["alice"])
    main = operator.resolve("w/main")
    operator.record_session(
        operator.get_wave("w").id, NewSession(participant="alice", session_id=SID, wavelet_id=main.id)
    )
    write(
        transcript, [*LINES, wake("w/main", "WID-MAIN", "b3"), reply("m9", u(1, 1), model="claude-mystery-9")]
    )
    env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": daemon.operator_token}
    done = subprocess.run(
        [sys.executable, "-m", "fleet", "usage", "w", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    (alice,) = out["participants"]
    assert alice["participant"] == "alice" and alice["total"]["turns"] == 4
    assert alice["total"]["input_tokens"] == 230 + 50 + 9 + 1 and alice["total"]["requests"] == 5
    assert alice["wavelets"]["w/main"]["input_tokens"] == 231 and alice["wavelets"]["w/main"]["turns"] == 2
    assert alice["wavelets"]["w/main"]["cost_usd"] is None  # the mystery model has no price
    side = alice["wavelets"]["w/side"]
    assert side["cost_usd"] == pytest.approx((50 * 3.0 + 3 * 15.0 + 40 * 3.75) / 1e6)
    assert side["tokens"] == 93
    assert out["total"] == alice["total"] and out["unpriced"] == ["claude-mystery-9"]
    assert "no price for model claude-mystery-9" in done.stderr and "prices.toml" in done.stderr
    text = subprocess.run(
        [sys.executable, "-m", "fleet", "usage", "w"], env=env, capture_output=True, text=True, timeout=60
    )
    assert text.returncode == 0 and "wave w:" in text.stdout and "  w/side" in text.stdout
