"""``fleet status``'s CAP column shows the cap the participant's deliverer runs with (a layout's
``cap``, passed to its channel as ``--cap``), not fleet's default (issue 26: ``cap = 3`` showed
"3/40")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libtmux
import pytest
from conftest import retry_until
from worlds import World, world

from fleet import supervise
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.delivery.state import StateFile
from fleet.models import NewSession
from fleet.paths import Paths
from fleet.tmux import Tmux


@pytest.fixture
def wave(daemon: Daemon, operator: Client, fleet_env: Paths, tmp_path: Path) -> Iterator[World]:
    yield from world(daemon, operator, fleet_env, tmp_path, "w", ["alice", "bob"])


def _row(st: supervise.WaveStatus, who: str) -> supervise.StatusRow:
    return next(r for r in st.rows if r.participant == who and r.wavelet == "w/main")


def test_the_cap_column_shows_the_cap_the_channel_runs_with(
    wave: World, fleet_env: Paths, tmux_server: libtmux.Server, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleet.cli.render import status_table

    alice = wave.channel("alice", "--receipts", "none", "--cap", "3")
    retry_until(lambda: wave.lock_held("alice"), what="alice's channel delivering")
    wave.post("one")
    alice.wait_notes(lambda n: any(x["content"] == "one" for x in n), what="the first blip")

    def shown() -> supervise.StatusRow | None:
        r = _row(supervise.status(wave.op, Tmux(tmux_server), fleet_env, "w"), "alice")
        return r if r.cap_used else None

    row = retry_until(shown, what="the delivery saved")
    assert row is not None and row.cap == 3, row
    status_table(supervise.status(wave.op, Tmux(tmux_server), fleet_env, "w"))
    line = next(x for x in capsys.readouterr().out.splitlines() if " alice " in x)
    assert f" {row.cap_used}/3 " in line and "/40" not in line


def test_a_state_file_from_before_says_the_layouts_cap_or_unknown(
    daemon: Daemon, operator: Client, fleet_env: Paths, tmux_server: libtmux.Server, tmp_path: Path
) -> None:
    """A state file written before channels recorded their cap: the cap of the layout the session was
    spawned with, else unknown ("?"), never the default passed off as a fact."""
    operator.create_wave("w", ["alice", "bob"])
    main = operator.resolve("w/main")
    layout = tmp_path / "capped.toml"
    layout.write_text('[defaults]\nagent = "fleet-standin"\ncap = 3\n')
    operator.record_session(
        main.wave_id,
        NewSession(
            participant="alice",
            session_id="5d1c2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f",
            wavelet_id=main.id,
            layout=str(layout),
        ),
    )
    for who in ("alice", "bob"):
        sf = StateFile(fleet_env.channels, daemon.url, "w", who)
        state = sf.fresh()
        state.delivered[main.id] = 2
        assert sf.acquire()
        sf.save(state)
        sf.release()
    st = supervise.status(operator, Tmux(tmux_server), fleet_env, "w")
    assert (_row(st, "alice").cap_used, _row(st, "alice").cap) == (2, 3)
    assert (_row(st, "bob").cap_used, _row(st, "bob").cap) == (2, None)
