"""The client's discovery rule without a daemon: FLEET_DAEMON without a token is a usage error."""

from __future__ import annotations

import pytest

from fleet import errors
from fleet.client import connect


def test_fleet_daemon_without_a_token_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_DAEMON", "http://192.0.2.1:8086")
    with pytest.raises(errors.UsageError, match="FLEET_TOKEN"):
        connect()
