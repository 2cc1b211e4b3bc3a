"""Claude Code's startup dialogs in narrow panes and left open: the real Claude Code (tests/realclaude.py)
in real tmux over the scripted model, with channels registered.

- The wavelet's window resized to 40x20 (18x24: the side pane of a 80x24 ``fleet attach``; 12x24: the
  narrowest checked), then
  ``fleet respawn --force``: the development-channels dialog is found though Claude Code wrapped it,
  accepted, and the respawned session's channel registers (its own debug log says so) and a blip
  posted then enters its transcript.
- The folder-trust prompt, then ``fleet respawn --trust``: its "Yes" is chosen (the focus starts on
  "No, exit").
- The folder-trust prompt without ``--trust``: spawn reports the pane "waiting at a dialog: ..." with
  what to do (rc 1), ``fleet status`` notes it and the window is flagged; answered in the pane, the
  dialog after it (development channels, which nobody accepts now) is what status says next; once
  that is answered too, the note and the flag are gone.
- A dialog fleet never answers (Bypass Permissions): reported at once, with what avoids it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from realclaude import STARTUP, RealFleet

from fleet.client import Client

RealFleetFactory = Callable[..., RealFleet]

REGISTERED = 'MCP server "fleet": Channel notifications registered'
TRUST_LINE = "Quick safety check: Is this a project you created or one you trust?"
DEV_LINE = "WARNING: Loading development channels"


def window_of(real: RealFleet, participant: str) -> str:
    out = real.srv.cmd("display-message", "-p", "-t", real.pane(participant), "#{window_id}").stdout
    return str(out[0])


def pane_size(real: RealFleet, participant: str) -> tuple[int, int]:
    out = real.srv.cmd("display-message", "-p", "-t", real.pane(participant), "#{pane_width} #{pane_height}")
    w, h = out.stdout[0].split()
    return int(w), int(h)


def flag(real: RealFleet, window: str) -> str:
    out = real.srv.cmd("show-options", "-w", "-q", "-v", "-t", window, "@fleet_waiting").stdout
    return out[0] if out else ""


def status_of(real: RealFleet, participant: str) -> dict[str, Any]:
    done = real.fleet("status", "w", "--json")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)["rows"]
    return next(r for r in rows if r["participant"] == participant)


@pytest.mark.parametrize("size", [(40, 20), (18, 24), (12, 24)], ids=["40x20", "18x24", "12x24"])
def test_a_respawn_into_a_narrow_window_accepts_the_wrapped_dialog_and_is_ready(
    real_fleet: RealFleetFactory, operator: Client, size: tuple[int, int]
) -> None:
    real = real_fleet(channels=True)
    operator.create_wave("w", ["alice"])
    real.spawn("w/main", real.layout(["alice"]))
    window = window_of(real, "alice")
    width, height = size
    real.srv.cmd("resize-window", "-t", window, "-x", str(width), "-y", str(height))
    # (the pane's border line, fleet's participant label, takes one row of the window)
    real.wait(lambda: pane_size(real, "alice") == (width, height - 1), f"alice's pane {width} wide")
    done = real.fleet("respawn", "w/main", "alice", "--force", "--wait", str(STARTUP), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ready"] and report["why"].startswith("channel connected"), report
    assert report["route"] == "channel registered", report
    assert pane_size(real, "alice") == (width, height - 1)
    # the respawned session's own record: its channel registered (a second time: the first launch's
    # line is there too) and a blip posted now enters its context
    real.wait(lambda: real.debug_log("alice").count(REGISTERED) >= 2, "the respawned channel registered")
    blip = operator.post(operator.resolve("w/main").id, "alice: are you there?")
    t = real.transcript("alice")
    real.wait(lambda: blip.id in [c.blip_id for c in t.delivered()], "the blip in alice's transcript")
    assert status_of(real, "alice")["note"] == "" and flag(real, window) == ""


def untrust(real: RealFleet) -> None:
    """The project folder not trusted yet: Claude Code asks first (its focus on "No, exit")."""
    config = json.loads((real.home / ".claude.json").read_text())
    config["projects"] = {}
    (real.home / ".claude.json").write_text(json.dumps(config))


def test_trust_chooses_yes_at_the_folder_trust_prompt(real_fleet: RealFleetFactory, operator: Client) -> None:
    """Spawned without ``--trust``, the pane waits at the prompt; ``fleet respawn --force --trust``
    (what the report says to do) moves the focus to "Yes, I trust this folder" before Enter (Enter
    alone is "No, exit": the session would end), then accepts the development-channels dialog."""
    real = real_fleet(channels=True)
    untrust(real)
    operator.create_wave("w", ["alice"])
    done = real.fleet("spawn", "w/main", "--layout", real.layout(["alice"]), "--json")
    assert done.returncode == 1 and "--trust" in json.loads(done.stdout)["panes"][0]["why"], done.stdout
    done = real.fleet("respawn", "w/main", "alice", "--force", "--trust", "--wait", str(STARTUP), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ready"] and report["route"] == "channel registered", report
    trusted = json.loads((real.home / ".claude.json").read_text())["projects"][str(real.project)]
    assert trusted["hasTrustDialogAccepted"] is True
    assert REGISTERED in real.debug_log("alice")
    assert flag(real, window_of(real, "alice")) == ""


def test_a_dialog_left_open_is_reported_by_spawn_and_status_and_flagged_until_answered(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    real = real_fleet(channels=True)
    untrust(real)
    operator.create_wave("w", ["alice"])
    done = real.fleet("spawn", "w/main", "--layout", real.layout(["alice"]), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    (pane,) = json.loads(done.stdout)["panes"]
    assert not pane["ready"], pane
    assert pane["why"].startswith(f"waiting at a dialog: {TRUST_LINE}: attach and answer it ("), pane
    assert "fleet attach w" in pane["why"] and pane["why"].endswith("or run it again with --trust"), pane
    window = window_of(real, "alice")
    assert flag(real, window) == f"dialog: {TRUST_LINE}"
    row = status_of(real, "alice")
    assert row["pane"] == "alive" and row["note"] == f"waiting at a dialog: {TRUST_LINE}", row
    table = real.fleet("status", "w").stdout
    assert f"waiting at a dialog: {TRUST_LINE}" in table, table

    # the operator answers it in the pane (as after `fleet attach`): "Yes" is the second option
    alice = real.pane("alice")
    real.srv.cmd("send-keys", "-t", alice, "Down")
    real.wait(lambda: "❯ Yes, I trust this folder" in real.screen("alice"), "the focus on Yes")
    real.srv.cmd("send-keys", "-t", alice, "Enter")
    # spawn has finished: the development-channels dialog after it is left open too, and said so
    real.wait(lambda: status_of(real, "alice")["note"] == f"waiting at a dialog: {DEV_LINE}", "status: dev")
    assert flag(real, window) == f"dialog: {DEV_LINE}"
    real.srv.cmd("send-keys", "-t", alice, "Enter")
    real.wait(lambda: REGISTERED in real.debug_log("alice"), "alice's channel registered", timeout=STARTUP)
    real.wait(lambda: status_of(real, "alice")["note"] == "", "no note once answered")
    assert flag(real, window) == ""


def test_a_dialog_fleet_never_answers_is_reported_at_once_with_what_avoids_it(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """``--dangerously-skip-permissions``: Claude Code's Bypass Permissions warning (focus on "No,
    exit") is the operator's to accept; spawn says so at once, not after its wait."""
    real = real_fleet(channels=True)
    operator.create_wave("w", ["alice"])
    layout = real.layout(
        ["alice"],
        args=["--dangerously-skip-permissions"],
        participants={"alice": {"env": {"IS_SANDBOX": "1"}}},
    )
    started = time.monotonic()
    done = real.fleet("spawn", "w/main", "--layout", layout, "--wait", str(STARTUP), "--json")
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    (pane,) = json.loads(done.stdout)["panes"]
    line = "WARNING: Claude Code running in Bypass Permissions mode"
    assert pane["why"].startswith(f"waiting at a dialog: {line}: attach and answer it ("), pane
    assert "skipDangerousModePermissionPrompt" in pane["why"] and took < STARTUP / 2, (took, pane)
    assert status_of(real, "alice")["note"] == f"waiting at a dialog: {line}"
    assert flag(real, window_of(real, "alice")) == f"dialog: {line}"
