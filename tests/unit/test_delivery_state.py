"""The delivery state file (fleet.delivery.state): atomic private writes, resuming with no replay
and no gap, corrupt or unreadable state reported and never overwritten, one path per daemon, wave
and participant. Its lock across processes: tests/component/test_delivery_state_lock.py."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_delivery_rules import DAEMON, Stream, run

from fleet.delivery import (
    CorruptState,
    Delivery,
    StateFile,
    state_path,
)
from fleet.delivery import state as state_module
from fleet.delivery.state import DeliveryState
from fleet.wire import RecordError


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


def saved(sf: StateFile, n: int) -> dict[str, str]:
    """Save a state whose cursor says ``n``; the cursors saved."""
    state = DeliveryState(daemon=DAEMON, wave="w", participant="alice", cursors={"a": f"{n:08d}"})
    sf.save(state)
    return state.cursors


def test_saves_exchange_the_file_with_a_spare_in_place(tmp_path: Path) -> None:
    sf = StateFile(tmp_path / "channels", DAEMON, "w", "alice", store="")
    assert sf.acquire()
    inodes = set()
    for n in range(6):
        cursors = saved(sf, n)
        assert sf.load().cursors == cursors
        assert stat.S_IMODE(sf.path.stat().st_mode) == 0o600
        inodes.add(sf.path.stat().st_ino)
        if n:  # the spare is the version before
            assert json.loads(sf.spare_path.read_bytes())["cursors"] == {"a": f"{n - 1:08d}"}
    assert len(inodes) == 2  # two files swapped, no file made per save
    assert sorted(p.name for p in sf.path.parent.iterdir()) == sorted(
        [sf.path.name, sf.spare_path.name, sf.lock_path.name]
    )
    sf.path.rename(tmp_path / "moved-away.json")  # by hand: the next save makes the file again
    assert saved(sf, 7) == sf.load().cursors


def test_without_the_exchange_saves_rename_a_temporary_file_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_module, "exchange", lambda a, b: False)  # a file system without it
    sf = StateFile(tmp_path / "channels", DAEMON, "w", "alice", store="")
    assert sf.acquire()
    for n in range(3):
        assert saved(sf, n) == sf.load().cursors
        assert stat.S_IMODE(sf.path.stat().st_mode) == 0o600
    assert sorted(p.name for p in sf.path.parent.iterdir()) == sorted([sf.path.name, sf.lock_path.name])


class Died(BaseException):
    """The process killed in the middle of a save."""


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 400)), min_size=1, max_size=30))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_save_cut_short_at_any_byte_leaves_the_last_whole_save(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[bool, int]]
) -> None:
    """kill -9 in the middle of a save (after any number of its bytes reached a file, or after all
    of them): what is loaded is the last save that ended, whole; the next save is whole again."""
    sf = StateFile(tmp_path_factory.mktemp("s"), DAEMON, "w", "alice", store="")
    assert sf.acquire()
    last = saved(sf, 0)
    real_pwrite, real_write = os.pwrite, os.write
    for n, (cut, at) in enumerate(steps, start=1):
        if not cut:
            last = saved(sf, n)
        else:

            def pwrite(fd: int, data: bytes, offset: int, at: int = at) -> int:
                real_pwrite(fd, data[: max(0, at - offset)], offset)
                raise Died

            def write(fd: int, data: bytes, at: int = at) -> int:
                real_write(fd, bytes(data[:at]))
                raise Died

            with (
                mock.patch.object(os, "pwrite", pwrite),
                mock.patch.object(os, "write", write),
                pytest.raises(Died),
            ):
                saved(sf, n)
        assert sf.load().cursors == last


def test_a_reader_without_the_lock_never_reads_a_save_half_written(tmp_path: Path) -> None:
    """`fleet status` and the supervisor read a channel's state while it saves: the spare each save
    rewrites in place is the file such a reader opened two saves before. Under a tight loop of
    saves of changing sizes, a plain read and parse failed 3,000 times in 37,000; every read through
    read_unlocked is a whole save."""
    sf = state_module.StateFile(tmp_path, DAEMON, "w", "bob", store="s1")
    st = sf.fresh()
    sf.save(st)
    stop = threading.Event()

    def saves() -> None:
        i = 0
        while not stop.is_set():
            st.cursors = {f"wl{k}": f"{i:036d}" for k in range(1 + i % 40)}
            sf.save(st)
            i += 1

    saver = threading.Thread(target=saves)
    saver.start()
    try:
        reads = 0
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            got = state_module.read_unlocked(sf.path)
            assert got.participant == "bob"  # a whole save, parsed (a torn one raises)
            reads += 1
    finally:
        stop.set()
        saver.join()
    assert reads > 100


def test_a_file_that_stays_unreadable_is_an_error_for_a_reader_without_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(b'{"version": 2, "daemon": "d", "wave": "w", "participant": "bob"} trailing')
    with pytest.raises(RecordError):
        state_module.read_unlocked(path)
