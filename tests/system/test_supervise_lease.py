"""One ``fleet supervise`` per wave: two real supervisor processes against one daemon (the lease
in the daemon, renewed by the holder): the second is refused naming the first, ``--force`` takes
over and the first stops; a takeover from another machine is noticed at the next renewal. And the
daemon's lease book as a hypothesis state machine."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import libtmux
import pytest
from conftest import retry_until
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from fleet.client import Client


class Supervise:
    """A ``fleet supervise w`` process whose stderr is read as it comes."""

    def __init__(self, operator: Client, srv: libtmux.Server, cwd: Path, *args: str) -> None:
        env = {
            **os.environ, "FLEET_DAEMON": operator.base_url, "FLEET_TOKEN": operator.token,
            "FLEET_TMUX_SOCKET": str(srv.socket_name),
        }  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fleet", "supervise", "w", *args],
            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.err: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def wait(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return rc

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def procs() -> Iterator[list[Supervise]]:
    started: list[Supervise] = []
    try:
        yield started
    finally:
        for p in started:
            p.stop()


def test_a_second_supervise_is_refused_naming_the_first_and_force_takes_over_and_the_first_stops(
    operator: Client, tmux_server: libtmux.Server, tmp_path: Path, procs: list[Supervise]
) -> None:
    operator.create_wave("w", ["bob"])
    cwd = tmp_path / "x"
    cwd.mkdir()
    host = socket.gethostname()
    first = Supervise(operator, tmux_server, cwd)
    procs.append(first)
    retry_until(lambda: "supervising wave w" in first.stderr, timeout=30, what="the first supervisor running")

    second = Supervise(operator, tmux_server, cwd)
    procs.append(second)
    try:
        rc = second.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("a second `fleet supervise` on the wave runs beside the first")
    assert rc == 1, second.stderr
    assert f"pid {first.proc.pid} on {host}" in second.stderr and "--force" in second.stderr, second.stderr
    assert "Traceback" not in second.stderr
    assert first.proc.poll() is None, "the refused one stopped the first"

    third = Supervise(operator, tmux_server, cwd, "--force")
    procs.append(third)
    assert first.wait(timeout=30) == 0, first.stderr
    assert "stopped supervising wave w" in first.stderr, first.stderr
    retry_until(lambda: "supervising wave w" in third.stderr, timeout=30, what="the third supervising")
    lease = operator.supervisor("w")
    assert lease is not None and lease.pid == third.proc.pid, lease
    said = [b.text for b in operator.read(operator.get_wave("w").root_id).blips if b.kind == "system"]
    assert any(f"took over wave w from pid {first.proc.pid} on {host}" in t for t in said), said

    # from another machine (nothing to signal here): the holder notices at its next renewal, stops
    from fleet.models import SupervisorClaim

    operator.claim_supervisor(
        "w", SupervisorClaim(holder="h-elsewhere", pid=4242, host="elsewhere", force=True)
    )
    assert third.wait(timeout=30) == 0, third.stderr
    assert "taken over by pid 4242 on elsewhere" in third.stderr, third.stderr
    held = operator.supervisor("w")
    assert held is not None and held.host == "elsewhere", "the stopping supervisor released another's lease"


def test_a_supervisor_killed_on_this_machine_does_not_block_the_next(
    operator: Client, tmux_server: libtmux.Server, tmp_path: Path, procs: list[Supervise]
) -> None:
    """Its lease outlives it (until the TTL), but its pid is gone on this host: no --force needed."""
    operator.create_wave("w", ["bob"])
    cwd = tmp_path / "x"
    cwd.mkdir()
    first = Supervise(operator, tmux_server, cwd)
    procs.append(first)
    retry_until(lambda: "supervising wave w" in first.stderr, timeout=30, what="the first supervisor running")
    first.proc.kill()
    first.wait(timeout=10)
    assert operator.supervisor("w") is not None, "the killed supervisor's lease lapsed at once"
    again = Supervise(operator, tmux_server, cwd)
    procs.append(again)
    retry_until(lambda: "supervising wave w" in again.stderr, timeout=30, what="the next supervisor running")
    lease = operator.supervisor("w")
    assert lease is not None and lease.pid == again.proc.pid
    again.proc.terminate()
    assert again.wait(timeout=30) == 0 and operator.supervisor("w") is None, (
        "a stopped supervisor keeps the lease"
    )


# ---------------------------------------------------------------- the lease book, as a state machine

HOLDERS = ["a", "b", "c"]


class LeaseBook(RuleBasedStateMachine):
    """:class:`fleet.daemon.SupervisorBook` against a model: one holder at a time; a live lease is
    never displaced without force; its holder's renewal always succeeds; it lapses after its TTL;
    only its holder releases it."""

    def __init__(self) -> None:
        super().__init__()
        from fleet.daemon import SupervisorBook

        self.t = 1000.0
        self.book = SupervisorBook(clock=lambda: self.t)
        self.model: tuple[str, float, float] | None = None
        """(holder, renewed at, ttl) of the live lease, or None."""

    def _live(self) -> tuple[str, float, float] | None:
        if self.model is not None and self.t > self.model[1] + self.model[2]:
            self.model = None
        return self.model

    @rule(holder=st.sampled_from(HOLDERS), force=st.booleans(), ttl=st.sampled_from([1.0, 5.0, 30.0]))
    def claim(self, holder: str, force: bool, ttl: float) -> None:
        from fleet import errors
        from fleet.models import SupervisorClaim

        live = self._live()
        claim = SupervisorClaim(holder=holder, pid=1, host="h", ttl=ttl, force=force)
        refused = live is not None and live[0] != holder and not force
        try:
            got = self.book.claim("w1", "w", claim)
        except errors.Conflict as exc:
            assert refused, "a claim was refused though nobody else holds the wave live"
            assert "pid 1 on h" in exc.message and "--force" in exc.message
            return
        assert not refused, "a live lease was displaced without force"
        assert got.holder == holder and got.expires_in == ttl
        assert bool(got.took_over) == (live is not None and live[0] != holder)
        self.model = (holder, self.t, ttl)

    @rule(holder=st.sampled_from(HOLDERS))
    def release(self, holder: str) -> None:
        self.book.release("w1", holder)
        live = self._live()
        if live is not None and live[0] == holder:
            self.model = None

    @rule(seconds=st.sampled_from([0.5, 1.0, 4.0, 29.0, 31.0]))
    def wait(self, seconds: float) -> None:
        self.t += seconds

    @invariant()
    def the_book_says_what_the_model_does(self) -> None:
        live = self._live()
        got = self.book.get("w1")
        assert (got.holder if got else None) == (live[0] if live else None), (got, live)
        if got is not None and live is not None:
            assert got.renewed_ago == self.t - live[1]


LeaseBook.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
test_the_lease_book_keeps_one_holder_a_live_lease_is_displaced_only_by_force = LeaseBook.TestCase
