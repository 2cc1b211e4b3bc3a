"""The tools' schemas a channel lists: shipped in fleet/channel/schemas.json, always what the records
derive (the file is read only when its fingerprint is current; otherwise they are derived again)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleet.channel import tools


def listed() -> dict[str, tuple[object, object]]:
    host = SimpleNamespace(participant="operator")  # table() asks the host only who it is
    return {t.name: (t.input_schema, t.output_schema) for t in tools.Tools(host).table()}


def test_the_shipped_schemas_are_current() -> None:
    """After changing a tool's records, regenerate the file (the command is in the message)."""
    shipped = json.loads(tools.SCHEMAS.read_text(encoding="utf-8"))
    assert shipped == tools.derived_schemas(), (
        "fleet/channel/schemas.json is behind the tools' records: run python -c \"from "
        'fleet.channel.tools import write_schemas; write_schemas()" and commit the file'
    )
    assert tools.shipped_schemas() == shipped["schemas"]


@pytest.mark.parametrize(
    "content", [None, "", "{", "[]", '{"fingerprint": "old", "schemas": {"PostArgs": {"type": "null"}}}']
)
def test_a_missing_stale_or_broken_file_lists_the_same_schemas_derived(
    content: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_file = listed()
    other = tmp_path / "schemas.json"
    if content is not None:
        other.write_text(content, encoding="utf-8")
    monkeypatch.setattr(tools, "SCHEMAS", other)
    assert tools.shipped_schemas() == {}
    assert listed() == with_file
