"""fleet.paths.read_utf8: a file's text, or — for bytes that are not UTF-8 — the OSError every caller
already turns into "cannot read FILE (why)", naming the first bad byte; never a UnicodeDecodeError."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

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
