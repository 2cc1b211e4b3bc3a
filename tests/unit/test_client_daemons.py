"""Daemon lists without a daemon: ``URL[,URL…]`` read and written back (FLEET_DAEMON, the endpoint
file's peers, join strings, remotes), every older single-URL form read as before, and bad lists
refused with a message naming what is wrong."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet import errors
from fleet.cli.remote import decode, encode
from fleet.client import Client, Daemon, endpoint_daemons, format_daemons, parse_daemon, parse_daemons
from fleet.models import Endpoint, JoinTicket

PIN = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
HOST = st.one_of(
    st.from_regex(r"\A[a-z][a-z0-9-]{0,12}(\.[a-z][a-z0-9-]{0,8}){0,2}\Z"),
    st.ip_addresses(v=4).map(str),
)
PREFIX = st.one_of(st.just(""), st.from_regex(r"\A(/[a-z0-9]{1,6}){1,2}\Z"))


@st.composite
def daemons(draw: st.DrawFn) -> Daemon:
    host, port, prefix = draw(HOST), draw(st.integers(1, 65535)), draw(PREFIX)
    pin = draw(st.one_of(st.none(), PIN))
    scheme = "https" if pin else "http"
    return Daemon(f"{scheme}://{host}:{port}{prefix}", pin, host, port, prefix)


def unique(ds: list[Daemon]) -> list[Daemon]:
    out: list[Daemon] = []
    for d in ds:
        if all(d.url != o.url for o in out):
            out.append(d)
    return out


@given(st.lists(daemons(), min_size=1, max_size=5).map(unique))
def test_a_list_formats_and_parses_back_to_itself(listed: list[Daemon]) -> None:
    text = format_daemons(listed)
    assert parse_daemons(text) == listed
    spaced = ", ".join(d.pinned for d in listed)  # as a person types it
    assert parse_daemons(spaced) == listed
    client = Client(text, "")
    assert client.base_url == text and client.urls == [d.url for d in listed]
    assert client.url == listed[0].url and client.fingerprint == listed[0].fingerprint


def old_transport_address(url: str) -> tuple[str, str | None]:
    """What ae00b61's Transport made of one URL: (base_url, url) — the pinned and bare address."""
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    pin = parts.fragment.partition("=")[2].lower() or None
    bare = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
    return bare + (f"#sha256={pin}" if pin else ""), bare


@given(daemons(), st.sampled_from(["", "/", " "]), st.booleans())
def test_every_old_single_url_form_reads_as_before(d: Daemon, tail: str, upper: bool) -> None:
    pin = f"#sha256={d.fingerprint.upper() if upper else d.fingerprint}" if d.fingerprint else ""
    old = f"{d.url}{tail.strip()}{pin}{' ' if tail == ' ' else ''}"
    (got,) = parse_daemons(old)
    assert got == parse_daemon(old) == d
    client = Client(old, "")
    assert (client.base_url, client.url) == old_transport_address(old)


@given(daemons())
def test_a_separate_pin_still_pins_a_single_url(d: Daemon) -> None:
    if d.fingerprint is None:
        return
    (got,) = parse_daemons(d.url, d.fingerprint)
    assert got == d


@given(st.lists(daemons(), min_size=1, max_size=4).map(unique), st.text(string.ascii_letters, max_size=8))
def test_a_join_string_carries_a_list_whole(listed: list[Daemon], machine: str) -> None:
    ticket = JoinTicket(url=format_daemons(listed), token="t" * 20, machine=machine or "m", waves=["w"])
    back = decode(encode(ticket))
    assert back == ticket and parse_daemons(back.url) == listed


def test_an_endpoint_lists_itself_then_its_peers() -> None:
    peer = "https://db2.example:8443#sha256=" + "ab" * 32
    alone = Endpoint(url="http://127.0.0.1:8086", pid=1, started_at=0.0, version="x")
    assert endpoint_daemons(alone) == "http://127.0.0.1:8086"
    with_peers = Endpoint(url="http://127.0.0.1:8086", pid=1, started_at=0.0, version="x", peers=[peer])
    assert [d.pinned for d in parse_daemons(endpoint_daemons(with_peers))] == ["http://127.0.0.1:8086", peer]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "no daemon URL"),
        ("http://a:1,,http://b:2", "empty entry"),
        ("http://a:1,", "empty entry"),
        ("http://a:1,ftp://b:2", "'ftp://b:2' is not"),
        ("http://a:1,https://b:2", "names no certificate fingerprint"),
        ("http://a:notaport", "is not an http"),
        ("http://a:1#sha256=" + "ab" * 32, "not https"),
    ],
)
def test_a_bad_list_is_a_usage_error_naming_the_bad_entry(text: str, words: str) -> None:
    with pytest.raises(errors.UsageError, match=words):
        parse_daemons(text)


def test_a_separate_pin_does_not_apply_to_a_list() -> None:
    with pytest.raises(errors.UsageError, match="one daemon URL"):
        parse_daemons("https://a:1#sha256=" + "ab" * 32 + ",https://b:2#sha256=" + "cd" * 32, "ab" * 32)


def test_a_daemon_listed_twice_is_tried_once() -> None:
    assert [d.url for d in parse_daemons("http://a:1,http://b:2,http://a:1/")] == ["http://a:1", "http://b:2"]
