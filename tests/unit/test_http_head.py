"""A request head read in one pass (fleet.httpbase.Handler.parse's common case) says exactly what
the line-by-line reading says: the same headers in the same order, the same refusal, for any head —
folded lines, lines without a colon, bare CRs, spaces before a colon, repeated names, long lines,
too many lines. The reading itself, without a socket."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet import errors, httpbase


class Probe(httpbase.Handler):
    """A handler with no connection: what it would answer is recorded, not written."""

    def __init__(self) -> None:  # no connection: only what parse reads and sets
        self.server: Any = SimpleNamespace(body_limit=1 << 20, limit_note="")
        self.close_connection = True
        self.command = self.path = self.requestline = ""
        self.request_version = "HTTP/0.9"
        self.headers = httpbase.Headers([])
        self.expect_continue = False
        self.said: list[object] = []

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        self.close_connection = True
        self.said.append((code, message))

    def refuse(self, exc: errors.FleetError) -> None:
        self.close_connection = True
        self.said.append((type(exc).__name__, exc.message))


def read(head: bytes) -> tuple[object, ...]:
    p = Probe()
    got = p.parse(head)
    return got, p.headers.items(), p.said, p.close_connection, p.expect_continue


NAMES = st.sampled_from(["Host", "host", "Content-Length", "Connection", "Expect", "X-A", "Bad Name", ""])
VALUES = st.sampled_from(["", " v ", "127.0.0.1", "5", "close", "keep-alive", "100-continue", "a\rb", "\tx"])
LINES = st.one_of(
    st.builds(lambda n, v, e: f"{n}:{v}{e}", NAMES, VALUES, st.sampled_from(["\r\n", "\n"])),
    st.sampled_from([" folded\r\n", "\tfolded\r\n", "no colon\r\n", "Name :v\r\n", "\r\r\n"]),
    st.builds(lambda k: f"X-Long:{'y' * k}\r\n", st.sampled_from([10, 70_000])),
)


@settings(max_examples=400, deadline=None)  # a loaded machine's pause is not the code's
@given(
    st.sampled_from(["POST /v1/x HTTP/1.1\r\n", "GET / HTTP/1.0\n", "GET /\r\n"]),
    st.lists(LINES, max_size=8),
    st.sampled_from([0, 1, 120]),
    st.sampled_from(["\r\n", "\n"]),
)
def test_the_one_pass_reading_is_the_line_by_line_one(
    first: str, lines: list[str], extra: int, blank: str
) -> None:
    head = (first + "".join(lines) + "X-N:1\r\n" * extra + blank).encode("iso-8859-1")
    fast = read(head)
    with patch.object(httpbase, "_FIELDS", re.compile(r"(?!)")):  # never matches: line by line
        slow = read(head)
    assert fast == slow


def test_a_common_head_is_read_whole() -> None:
    got, items, said, close, expect = read(
        b"POST /v1/x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
    )
    assert (got, said, close, expect) == (2, [], False, True)
    assert items == [("host", "h"), ("content-length", "2"), ("expect", "100-continue")]
