"""The hook settings fleet writes for Claude Code (fleet.watch.hook_settings)."""

from __future__ import annotations

from pathlib import Path

import chatter

from fleet.watch import hook_settings


def test_hook_settings_carry_the_attention() -> None:
    targeted = hook_settings("bob", chatter.WAVE, Path("/t/bob.token"), "targeted", daemon="http://h:1")
    full = hook_settings("bob", chatter.WAVE, Path("/t/bob.token"), daemon="http://h:1")
    assert "--attention targeted" in targeted and "--attention" not in full
