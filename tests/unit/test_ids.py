"""fleet.ids: the digest that names state files and gate sockets is SHA-256, whichever module computes it."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from fleet.ids import digest


@given(st.text())
def test_digest_is_hashlibs_sha256_of_the_utf8_text(text: str) -> None:
    """Names made from it (a channel's state file, its gate's socket) stay what earlier versions made,
    though a channel no longer loads hashlib (OpenSSL) to compute it."""
    assert digest(text) == hashlib.sha256(text.encode()).hexdigest()
