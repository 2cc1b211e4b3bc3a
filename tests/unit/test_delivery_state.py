"""The delivery state file (fleet.delivery.state): atomic private writes, resuming with no replay
and no gap, corrupt or unreadable state reported and never overwritten, one path per daemon, wave
and participant. Its lock across processes: tests/component/test_delivery_state_lock.py."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from test_delivery_rules import DAEMON, Stream, run

from fleet.delivery import (
    CorruptState,
    Delivery,
    StateFile,
    state_path,
)


def test_state_file_roundtrip_atomic_private(tmp_path: Path) -> None:
    s = Stream()
    sf = StateFile(tmp_path / "channels", DAEMON, "w", "alice", store="")
    assert sf.acquire()
    core = Delivery("alice", sf.load(), cap=2)
    run(core, [s.blip("a", "bob"), s.blip("a", "bob"), s.blip("a", "bob")])
    sf.save(core.state)
    assert stat.S_IMODE(sf.path.stat().st_mode) == 0o600
    assert [p.name for p in sf.path.parent.iterdir() if p.name.endswith(".tmp")] == []
    loaded = sf.load()
    assert loaded.cursors == core.state.cursors
    assert loaded.delivered == {"a": 2}
    assert loaded.exhausted == core.state.exhausted
    assert json.loads(sf.path.read_text())["participant"] == "alice"


def test_restart_resumes_with_no_replay_and_no_gap(tmp_path: Path) -> None:
    s = Stream()
    blips = [s.blip("a", "bob", f"m{i}") for i in range(6)]
    sf = StateFile(tmp_path, DAEMON, "w", "alice", store="")
    assert sf.acquire()
    core = Delivery("alice", sf.load())
    assert [d.blip.text for d in run(core, blips[:4], fail_at=3)] == ["m0", "m1", "m2"]
    sf.save(core.state)
    sf.release()

    again = StateFile(tmp_path, DAEMON, "w", "alice", store="")
    assert again.acquire()
    core = Delivery("alice", again.load())
    assert [d.blip.text for d in run(core, blips)] == ["m3", "m4", "m5"]


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"",
        b'{"version": 1, "daemon": "x", "wave": "w", "participant": "alice", "cursors": [1]}',
        b'{"version": 9, "daemon": "x", "wave": "w", "participant": "alice"}',
        b'{"version": 1, "daemon": "x", "wave": "w", "participant": "mallory"}',
    ],
    ids=["garbage", "empty", "bad-cursors", "future-version", "someone-else"],
)
def test_corrupt_state_is_reported_and_never_overwritten(tmp_path: Path, content: bytes) -> None:
    sf = StateFile(tmp_path, DAEMON, "w", "alice", store="")
    sf.path.parent.mkdir(parents=True, exist_ok=True)
    sf.path.write_bytes(content)
    with pytest.raises(CorruptState) as err:
        sf.load()
    message = str(err.value)
    assert str(sf.path) in message and "mv " in message and "no blip is skipped" in message
    assert sf.path.read_bytes() == content


def test_unreadable_state_is_corrupt_not_fresh(tmp_path: Path) -> None:
    sf = StateFile(tmp_path, DAEMON, "w", "alice", store="")
    sf.path.parent.mkdir(parents=True, exist_ok=True)
    sf.path.mkdir()  # a directory where the file should be: reading fails with an OSError
    with pytest.raises(CorruptState):
        sf.load()


def test_state_path_is_per_daemon_wave_participant(tmp_path: Path) -> None:
    base = state_path(tmp_path, DAEMON, "w", "alice")
    assert base == state_path(tmp_path, DAEMON + "/", "w", "alice")
    others = {
        state_path(tmp_path, "http://127.0.0.1:9999", "w", "alice"),
        state_path(tmp_path, DAEMON, "w2", "alice"),
        state_path(tmp_path, DAEMON, "w", "bob"),
        state_path(tmp_path, "https://fleet.example:8086", "w", "alice"),
    }
    assert base not in others and len(others) == 4
    assert base.parent == tmp_path and base.name.startswith("alice@w@127.0.0.1_8086")
    assert os.sep not in base.name
