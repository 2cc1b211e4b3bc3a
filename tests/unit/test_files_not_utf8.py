"""Files fleet reads that hands (or sessions, or a damaged disk) can leave as any bytes.
fleet.paths.read_utf8: a file's text, or — for bytes that are not UTF-8 — the OSError every caller
already turns into "cannot read FILE (why)", naming the first bad byte; never a UnicodeDecodeError.
A MEMORY.md and a campaign's NOTES.md left that way."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.paths import read_utf8


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=64), st.text(max_size=64).map(str.encode)))
def test_text_or_an_oserror_naming_the_byte(tmp_path: Path, data: bytes) -> None:
    f = tmp_path / "f"
    f.write_bytes(data)
    try:
        want = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        with pytest.raises(OSError) as got:
            read_utf8(f)
        assert got.value.errno == errno.EILSEQ and got.value.filename == str(f)
        assert got.value.strerror == f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
    else:
        assert read_utf8(f) == want


def test_a_missing_file_is_the_oserror_it_always_was(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_utf8(tmp_path / "nope")


def test_a_memory_md_that_is_not_text_is_named_and_an_update_replaces_it(tmp_path: Path) -> None:
    from fleet import errors
    from fleet.resident import memory

    path = tmp_path / "MEMORY.md"
    assert memory.read(path) == ""  # before the first write
    path.write_bytes(b"notes\n\xff\n")
    attempts: list[Callable[[], str]] = [lambda: memory.read(path), lambda: memory.apply(path, "add", "more")]
    for attempt in attempts:
        with pytest.raises(errors.UsageError) as e:
            attempt()
        assert str(path) in e.value.message and "byte 0xff at offset 6" in e.value.message
        assert "fleet memory update" in e.value.message
    assert memory.apply(path, "update", "fresh") == "fresh\n" and memory.read(path) == "fresh\n"


def test_a_crash_is_added_to_notes_a_session_left_as_any_bytes_keeping_them(tmp_path: Path) -> None:
    """NOTES.md is the sessions' own writing: the loop's "crashed" attempt is added after whatever
    is there, counted as the next attempt, and the bytes before it are kept as they were."""
    from types import SimpleNamespace

    from fleet.campaign.loop import Loop, Owned

    notes = tmp_path / "NOTES.md"
    before = b"## Attempt 1 \xe2\x80\x94 failed\ncaf\xe9 (latin-1)"  # no newline at the end
    notes.write_bytes(before)
    fake: Any = SimpleNamespace(c=SimpleNamespace(notes=lambda wave: notes))
    Loop._append_crash_notes(fake, 0, Owned(active_session_id="s2", participant="executor"), True, "abc")
    after = notes.read_bytes()
    assert after.startswith(before + b"\n## Attempt 2 \xe2\x80\x94 crashed\n**Session:** s2 (executor)\n")


def test_a_campaigns_settles_log_and_wave_titles_read_around_bytes_that_are_not_text(tmp_path: Path) -> None:
    """A settle line damaged into non-UTF-8 is skipped like any damaged line, the others read; a
    WAVE.md whose first line is not text gets the plain title ("wave 0"), as a missing one does."""
    from fleet.campaign.disk import Campaign
    from fleet.campaign.loop import read_settles

    c = Campaign(tmp_path, "c1")
    c.loop_dir.mkdir(parents=True)
    (c.loop_dir / "settles.log").write_bytes(b'{"n": 1}\n{"n": "\xff"}\n{"n": 3}\n')
    assert read_settles(c) == [{"n": 1}, {"n": 3}]
    c.wave_dir(0).mkdir(parents=True)
    (c.wave_dir(0) / "WAVE.md").write_bytes("# Wave 0: caf\u00e9\n".encode("latin-1"))
    assert c.wave_title(0) == "wave 0"
