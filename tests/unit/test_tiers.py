"""The tiers hold what tests/conftest.py says: the folder sets the marker, and a unit test can
neither start a process nor open a socket (it fails, naming the tier it belongs in)."""

from __future__ import annotations

import socket
import subprocess

import pytest


def test_a_unit_test_is_marked_unit(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("component") is None


def test_a_unit_test_that_starts_a_process_fails_naming_the_tier_for_it() -> None:
    with pytest.raises(AssertionError, match="starts a process: move it to tests/component"):
        subprocess.run(["true"], check=True)


def test_a_unit_test_that_opens_a_socket_fails_naming_the_tier_for_it() -> None:
    with (
        socket.socket() as s,
        pytest.raises(AssertionError, match="opens a socket: move it to tests/component"),
    ):
        s.connect(("127.0.0.1", 9))
    with socket.socket() as s, pytest.raises(AssertionError, match="opens a socket"):
        s.bind(("127.0.0.1", 0))
