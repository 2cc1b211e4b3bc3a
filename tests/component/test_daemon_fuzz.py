"""Property-based fuzzing of the daemon's HTTP API with malformed and hostile requests.

One daemon per module (real HTTP, real SQLite; ``max_blip_bytes`` 4096 so 413s are cheap);
``FLEET_FUZZ_EXAMPLES`` sets the examples per property (200 by default). Requests:

- JSON bodies for every POST endpoint: each field plausible (often a real reference, so requests get
  deep), hostile (NUL, lone surrogates, huge, bidi, path-like, near-miss names like ``alice\\n``) or
  of the wrong type, plus stray fields and non-object bodies; as the operator, a participant or nobody;
- every route with hostile path segments, random query parameters and random methods;
- raw bytes on a socket: broken request lines, versions and headers, bad Content-Length, HEAD;
- and, deterministically, every known-hostile body on every POST route.

Always: never a 500 (every error a JSON ``{"error": {kind, message}}``), never a connection dropped
without an answer, nothing after a ``Connection: close`` answer, no body on a HEAD answer, the daemon
healthy afterwards; a rejected (4xx) request leaves the store exactly as it was; and whatever was
accepted keeps the store's invariants (valid names, non-blank blips within the limit, ids in commit
order).
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from httphelp import Http, Resp, raw_exchange, snapshot, split_responses
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fleet.daemon import Daemon
from fleet.models import NAME_RE, PARTICIPANT_RE
from fleet.paths import Paths
from fleet.store import replay

LIMIT = 4096

FUZZ = settings(
    max_examples=int(os.environ.get("FLEET_FUZZ_EXAMPLES", "200")),  # raise it for a deeper run
    deadline=None,
    database=None,  # no .hypothesis/ directory in the repo
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@dataclass
class Target:
    daemon: Daemon
    post_routes: list[str]
    get_routes: list[str]
    refs: dict[str, list[str]]
    """Real references to mix into paths and bodies: waves, wavelets, blips, participants, tokens."""
    tokens: list[str | None]
    """operator, alice, bob, none, garbage."""
    conns: dict[str | None, Http]

    @property
    def weighted_tokens(self) -> list[str | None]:
        """Mostly the operator and alice, so most requests get past authentication."""
        return [self.tokens[0]] * 3 + [self.tokens[1]] * 2 + self.tokens[2:]

    @property
    def db(self) -> Path:
        return self.daemon.paths.db

    def http(self, token: str | None) -> Http:
        if token not in self.conns:
            self.conns[token] = Http(self.daemon.url, token, timeout=30)
        return self.conns[token]

    def healthy(self) -> None:
        h = Http(self.daemon.url)
        h.get("/v1/health").ok(200)
        h.close()


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    root = tmp_path_factory.mktemp("fuzz-home")
    paths = Paths(root / "data", root / "state", root / "config", root / "logs")
    d = Daemon(paths, "127.0.0.1:0", max_blip_bytes=LIMIT)
    d.start()
    op = Http(d.url, d.operator_token)
    wave = op.new_wave("w1", ["alice", "bob"]).ok(201)
    main = wave["root_id"]
    priv = op.fork(main, "priv", ["alice"], private=True).ok(201)["id"]
    pub = op.fork(main, "pub", ["bob"]).ok(201)["id"]
    alice = op.mint("w1", "alice").ok(201)
    bob = op.mint("w1", "bob").ok(201)
    a, b = Http(d.url, alice["token"]), Http(d.url, bob["token"])
    blip = a.post_blip(priv, "alice's").ok(201)["id"]
    bblip = b.post_blip(pub, "bob's").ok(201)["id"]
    op.mint("w1", "dave").ok(201)  # a token the sweep may revoke
    refs = {
        "wave": ["w1", wave["id"], wave["id"][:8], "nosuch"],
        "wavelet": [main, priv, pub, "w1/main", "w1/priv", "priv", main[:6], priv[:-4]],
        "blip": [blip, bblip, blip[:-3]],
        "participant": ["alice", "bob", "operator", "carol", "system"],
        "token": [alice["id"], bob["id"]],
    }
    tokens = [d.operator_token, alice["token"], bob["token"], None, "garbage"]
    t = Target(d, served_routes(d, "POST"), served_routes(d, "GET"), refs, tokens, {})
    assert len(t.post_routes) >= 11 and len(t.get_routes) >= 12, (t.post_routes, t.get_routes)
    yield t
    for h in [op, a, b, *t.conns.values()]:
        h.close()
    d.stop()


# ---------------------------------------------------------------- strategies

SPECIAL = [
    "\x00",
    "/",
    "..",
    "%",
    "%00",
    "%2F",
    "\n",
    "\r\n",
    "\u202e",
    "\ufeff",
    "\\",
    "'",
    '"',
    "?",
    "#",
    " ",
]
SUFFIXES = ["\n", " ", "\x00", "/x", "\t", "\u0131", "A"]

hostile_text = st.one_of(
    st.text(max_size=30),
    st.lists(
        st.one_of(
            st.characters(),
            st.characters(categories=["Cs"]),  # lone surrogates: \ud800 in JSON decodes to one
            st.sampled_from(SPECIAL),
        ),
        min_size=1,
        max_size=12,
    ).map("".join),
    st.sampled_from(
        [
            "",
            " ",
            "\t\n",
            "a" * (LIMIT + 1),
            "é" * (LIMIT // 2 + 1),
            "../../etc/passwd",
            "NaN",
            "null",
            "0" * 300,
        ]
    ),
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(allow_nan=True, allow_infinity=True),
    hostile_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(hostile_text, st.sampled_from(["text"])), inner, max_size=4),
    ),
    max_leaves=12,
)

# The fields each POST route takes (required ones first), and plausible values for each.
ROUTE_FIELDS: dict[str, list[str]] = {
    "/v1/waves": ["name", "with"],
    "/feed": ["participant", "cursors", "wait", "limit"],
    "/presence": ["participant", "event", "count", "session_id", "host"],
    "/fork": ["name", "with", "private", "as"],
    "/invite": ["name", "kind", "as"],
    "/leave": ["name", "kind", "as"],
    "/blips": ["text", "as"],
    "/surface": ["text", "source_blip_id", "as"],
    "/replace": ["text", "as"],
    "/v1/tokens": ["wave", "participant"],
    "/revoke": ["token_id", "wave", "participant"],
}
REQUIRED = {"name", "participant", "event", "text", "wave"}
ALL_FIELDS = sorted({f for fs in ROUTE_FIELDS.values() for f in fs})

# Long-poll waits must stay short: a positive wait would park the (single-client) request.
SAFE_WAITS: list[Any] = [0, 0.0, 0.001, -1, -1e308, "x", "", None, [], {}, "nan", "-inf", False]
SAFE_WAIT_QUERY = ["", "0", "0.001", "-1", "nan", "NaN", "-inf", "soon", "0x10", "1e-9", "-0", " 0 ", "\x00"]


def fields_for(route: str) -> list[str]:
    for suffix, fields in ROUTE_FIELDS.items():
        if route.endswith(suffix):
            return fields
    return ALL_FIELDS


@st.composite
def plausible(draw: st.DrawFn, target: Target, key: str) -> Any:
    """A value of the right type for ``key``: often a real reference, sometimes a near miss."""
    names = st.sampled_from(target.refs["participant"])
    fresh = st.integers(0, 10**6).map(lambda n: f"n{n}")
    near_miss = st.tuples(st.one_of(names, fresh), st.sampled_from(SUFFIXES)).map("".join)
    ref = st.sampled_from([r for rs in target.refs.values() for r in rs])
    choices: dict[str, st.SearchStrategy[Any]] = {
        "name": st.one_of(names, fresh, near_miss),
        "with": st.lists(st.one_of(names, near_miss), max_size=3),
        "private": st.booleans(),
        "as": st.one_of(st.none(), names, near_miss),
        "kind": st.sampled_from(["agent", "human"]),
        "text": st.one_of(st.just("hello"), st.sampled_from(["a" * LIMIT, "é" * (LIMIT // 2 - 1) + "e"])),
        "source_blip_id": st.one_of(st.none(), st.sampled_from(target.refs["blip"]), ref),
        "participant": st.one_of(names, near_miss),
        "cursors": st.dictionaries(
            st.one_of(st.sampled_from(target.refs["wavelet"]), hostile_text),
            st.one_of(st.sampled_from([*target.refs["blip"], ""]), hostile_text),
            max_size=3,
        ),
        "wait": st.sampled_from(SAFE_WAITS),
        "limit": st.one_of(st.integers(-5, 10), st.integers()),
        "event": st.sampled_from(["ping", "delivered", "gone"]),
        "count": st.integers(),
        "session_id": st.one_of(st.none(), hostile_text),
        "host": st.one_of(st.none(), hostile_text),
        "wave": st.one_of(st.sampled_from(target.refs["wave"]), ref),
        "token_id": st.one_of(st.sampled_from([*target.refs["token"], "0000"]), ref),
    }
    return draw(choices[key])


@st.composite
def bodies(draw: st.DrawFn, target: Target, route: str) -> Any:
    """A JSON body for ``route``: mostly its own fields (each plausible, hostile text or any JSON
    value), sometimes a stray field, sometimes not an object at all."""
    if draw(st.integers(0, 7)) == 0:
        return draw(json_values)
    body: dict[str, Any] = {}
    for k in fields_for(route):
        if draw(st.integers(0, 9)) >= (9 if k in REQUIRED else 5):
            continue
        pick = draw(st.integers(0, 7))
        body[k] = (
            draw(hostile_text)
            if pick == 4
            else draw(json_values)
            if pick == 5
            else draw(plausible(target, k))
        )
    if draw(st.integers(0, 6)) == 0:
        body[draw(st.one_of(st.sampled_from(ALL_FIELDS), hostile_text))] = draw(json_values)
    if isinstance(body.get("wait"), int | float | str) and body["wait"] not in SAFE_WAITS:
        body["wait"] = draw(st.sampled_from(SAFE_WAITS))
    return body


RAW_BODIES: list[bytes] = [
    b"",
    b"{",
    b"[]",
    b"{}",
    b"null",
    b'{"text": NaN, "name": NaN, "wait": NaN}',
    b'{"text": Infinity, "wait": -Infinity}',
    b'{"text": "a", "text": "b"}',
    b"\xef\xbb\xbf{}",
    '{"text": "hi", "name": "hi"}'.encode("utf-16"),
    b'{"text": "\\ud800\\udc00", "name": "\\ud800"}',
    b'{"text": "x\\udc00", "wave": "\\ud800", "participant": "alice", "token_id": "\\udfff"}',
    b'{"text": "ok", "source_blip_id": "\\ud800", "cursors": {"a": "\\ud800"}, "participant": "alice"}',
    b'{"text": "' + b"\\u0000" * 100 + b'", "name": "a\\u0000"}',
    b'{"name": "alice\\n", "participant": "alice\\n", "text": "hi", "as": "alice\\n"}',
    b"[" * 50_000 + b"]" * 50_000,
    b'{"text": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    b'{"a":' * 5_000 + b"1" + b"}" * 5_000,
    b'{"text": "' + b"x" * (LIMIT + 1) + b'"}',
    b'{"text": "' + b"x" * (LIMIT + 70_000) + b'"}',  # over the request-body limit (4096 + 64 KiB)
    b"\x00" * 64,
    b"\xff\xfe\xfd",
]

SEGMENTS = {"/v1/waves/([^/]+)": "/v1/waves/{wave}", "/v1/wavelets/([^/]+)": "/v1/wavelets/{wavelet}"}
SEGMENTS["/v1/blips/([^/]+)"] = "/v1/blips/{blip}"


def served_routes(d: Daemon, method: str) -> list[str]:
    """The daemon's own route table as templates, so an endpoint added later is fuzzed too."""
    out = []
    for route in d.routes:
        tpl = route.pattern.pattern
        for regex, name in SEGMENTS.items():
            tpl = tpl.replace(regex, name)
        if route.method == method and "(" not in tpl:
            out.append(tpl)
    return out


@st.composite
def segments(draw: st.DrawFn, target: Target, kind: str) -> str:
    """One path segment, percent-encoded: a real reference, a mangled one, or hostile text."""
    real = draw(st.sampled_from(target.refs[kind]))
    if draw(st.integers(0, 2)) > 0:
        return quote(real, safe="")
    seg = draw(
        st.one_of(
            st.just(real.upper()),
            st.just(real + "/../x"),
            st.sampled_from(
                [
                    *["..", ".", "%2e%2e", "0000", "----", "01", "a" * 300, "%", "%zz"],
                    *["a" * 50_000, "0" * 50_000, "w1/" + "x" * 50_000],  # issue 15: were 500s
                ]
            ),
            hostile_text,
        )
    )
    return quote(seg, safe=draw(st.sampled_from(["", "%", "/", "/%."])), errors="surrogatepass")


@st.composite
def routes(draw: st.DrawFn, target: Target, templates: list[str]) -> str:
    tpl = draw(st.sampled_from(templates))
    return tpl.format(
        wave=draw(segments(target, "wave")),
        wavelet=draw(segments(target, "wavelet")),
        blip=draw(segments(target, "blip")),
    )


@st.composite
def queries(draw: st.DrawFn, target: Target) -> str:
    keys = st.one_of(
        st.sampled_from(["after", "limit", "history", "ref", "wave", "junk", ""]),
        hostile_text.filter(lambda k: k != "wait"),
    )
    values = st.one_of(
        hostile_text,
        st.sampled_from([r for rs in target.refs.values() for r in rs]),
        st.integers().map(str),
        st.sampled_from(
            ["-1", "0", "99999999999999999999999", "1.5", "true", "١٢", "9" * 5000, "a" * 50_000]
        ),
    )
    pairs = draw(st.lists(st.tuples(keys, values), max_size=5))
    if draw(st.booleans()):
        pairs.append(("wait", draw(st.sampled_from(SAFE_WAIT_QUERY))))  # the last one wins
    return urlencode(pairs, errors="surrogatepass") if pairs else ""


CRLF = b"\r\n"
raw_token = st.binary(min_size=1, max_size=12).filter(
    lambda b: bool(b.strip()) and b"\r" not in b and b"\n" not in b
)

BAD_LENGTHS = ["abc", "-1", "1e3", "5, 5", "99999999999999999999", "0x10", "", "1_2", "+5", "٣"]
HOSTS = [b"Host: 127.0.0.1", b"Host: 127.0.0.1", b"Host: localhost:1", b"Host: fuzz", b"Host: a.evil", b""]
"""Mostly a Host the daemon answers to (so requests get deep); sometimes one it must refuse (421)."""


@dataclass
class RawRequest:
    data: bytes
    head: bool
    bad_length: bool


@st.composite
def raw_requests(draw: st.DrawFn, target: Target) -> RawRequest:
    method = draw(
        st.one_of(
            st.sampled_from([b"GET", b"POST", b"HEAD"]),
            st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE", b"FOO", b"get", b"POST\x00"]),
            raw_token,
        )
    )
    if method.strip() != method:
        method = b"GET"
    path = draw(
        st.one_of(
            routes(target, target.get_routes + target.post_routes).map(
                lambda p: p.encode("latin-1", "replace")
            ),
            st.binary(max_size=60).map(lambda b: b"/" + b.replace(b"\r", b"").replace(b"\n", b"")),
            st.sampled_from([b"*", b"http://x/v1/health", b"//v1//health", b"/v1/../v1/health", b""]),
        )
    )
    version = draw(
        st.one_of(
            st.just(b"HTTP/1.1"),
            st.sampled_from(
                [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1.1", b"HTTP/x", b"http/1.1", b"", b"HTTP/0.9"]
            ),
        )
    )
    line = b" ".join(x for x in (method, path, version) if x)
    body = draw(st.one_of(st.sampled_from(RAW_BODIES[:15]), st.binary(max_size=300)))
    host = draw(st.sampled_from(HOSTS))
    headers = [host] if host else []
    auth = draw(st.sampled_from([*target.tokens, "Basic Zm9v"]))
    if auth is not None:
        headers.append(b"Authorization: " + (auth if auth.startswith("Basic") else f"Bearer {auth}").encode())
    lengths = [None, len(body), len(body), max(0, len(body) - 3), f" {len(body)} ", *BAD_LENGTHS]
    cl = draw(st.sampled_from(lengths))
    if cl is not None:
        headers.append(b"Content-Length: " + str(cl).encode())
    duplicate = cl is not None and draw(st.integers(0, 9)) == 0
    if duplicate:  # two Content-Length headers, the same or not: 400 either way
        headers.append(b"Content-Length: " + str(draw(st.sampled_from([cl, 0, 3]))).encode())
    extra = draw(
        st.lists(
            st.one_of(
                st.sampled_from(
                    [
                        b"Transfer-Encoding: chunked",
                        b"Expect: 100-continue",
                        b"Connection: keep-alive",
                        b"Connection: close",
                        b"Content-Type: text/plain",
                        b": empty-name",
                        b"no-colon-here",
                        b"X-Long: " + b"a" * 70_000,
                        b" folded: continuation",
                    ]
                ),
                st.tuples(raw_token, st.binary(max_size=30)).map(
                    lambda kv: (
                        kv[0].replace(b":", b"") + b": " + kv[1].replace(b"\r", b"").replace(b"\n", b"")
                    )
                ),
            ),
            max_size=3,
        )
    )
    data = line + CRLF + CRLF.join(headers + extra) + CRLF + CRLF + body
    well_formed = (
        method in (b"GET", b"POST", b"HEAD", b"PUT", b"DELETE")
        and version == b"HTTP/1.1"
        and not any(h.startswith(b"X-Long") for h in extra)  # that one is a 431 first
    )
    # http.server takes it as a HEAD (so must answer with no body) only if the request line parses
    words = line.decode("iso-8859-1").split()
    head = words[0] == "HEAD" and len(words) == 3 and words[2] in ("HTTP/1.1", "HTTP/1.0", "HTTP/0.9")
    bad = (cl in BAD_LENGTHS or duplicate) and well_formed
    return RawRequest(data, head=head, bad_length=bad)


# ---------------------------------------------------------------- oracles


def check_answer(r: Resp, what: str, record: bool = True) -> None:
    if record:
        event(f"status {r.status}")  # `pytest --hypothesis-show-statistics` shows the spread
    assert r.status != 500, f"500 on {what}: {r.raw[:300]!r}"
    assert 200 <= r.status < 600, what
    if r.status >= 400 and r.raw:
        err = r.error  # a JSON {"error": {"kind", "message"}} body
        assert err["kind"] != "error", f"internal error on {what}: {err}"


def check_invariants(db: Path) -> None:
    """What any accepted request must have kept true, whatever it carried."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        for (name,) in conn.execute("SELECT name FROM waves UNION ALL SELECT name FROM wavelets"):
            assert NAME_RE.fullmatch(name), f"stored an invalid wave/wavelet name {name!r}"
        for (name,) in conn.execute(
            "SELECT name FROM participants UNION ALL SELECT name FROM members UNION ALL"
            " SELECT participant FROM tokens UNION ALL SELECT author FROM blips WHERE kind != 'system'"
        ):
            assert PARTICIPANT_RE.fullmatch(name) and name != "system", (
                f"stored an invalid participant {name!r}"
            )
        for (text,) in conn.execute("SELECT text FROM blips"):
            assert text.strip(), "stored a blank blip"
            assert len(text.encode("utf-8")) <= LIMIT, "stored a blip over the limit"
        seqs = [row[0] for row in conn.execute("SELECT id FROM blips ORDER BY rowid")]
        assert seqs == sorted(seqs), "blip ids are not in commit order"
    finally:
        conn.close()


def send(target: Target, token: str | None, method: str, path: str, **kw: Any) -> Resp:
    h = target.http(token)
    try:
        return h.request(method, path, **kw)
    except ConnectionError as exc:  # the daemon hung up without answering
        raise AssertionError(f"no answer to {method} {path[:200]!r}: {exc!r}") from exc


def post_and_check(target: Target, token: str | None, route: str, raw: bytes, record: bool = True) -> Resp:
    before = snapshot(target.db)
    r = send(target, token, "POST", route, raw=raw)
    check_answer(r, f"POST {route[:200]!r} {raw[:200]!r}", record)
    if 400 <= r.status < 500:
        assert snapshot(target.db) == before, f"rejected POST {route} ({r.status}) changed the store"
    else:
        check_invariants(target.db)
    return r


# ---------------------------------------------------------------- properties


@FUZZ
@given(data=st.data())
def test_hostile_json_bodies(target: Target, data: st.DataObject) -> None:
    route = data.draw(routes(target, target.post_routes), label="route")
    token = data.draw(st.sampled_from(target.weighted_tokens), label="token")
    if data.draw(st.integers(0, 7)) == 0:
        raw = data.draw(st.sampled_from(RAW_BODIES), label="raw body")
    else:
        raw = json.dumps(data.draw(bodies(target, route), label="body")).encode()  # NaN stays NaN
    post_and_check(target, token, route, raw)


# One valid body per POST route; the sweep below spoils one field at a time.
def base_bodies(t: Target) -> dict[str, dict[str, Any]]:
    blip, wl = t.refs["blip"][0], t.refs["wavelet"][1]
    # cursors at the head of every wavelet alice is on: a feed with a wait would park
    feed = t.http(t.tokens[0]).post("/v1/waves/w1/feed", {"participant": "alice"}).ok(200)
    head = {w["id"]: w["since"] for w in feed["wavelets"]} | {b["wavelet_id"]: b["id"] for b in feed["blips"]}
    return {
        "/v1/waves": {"name": "sweep", "with": ["alice"]},
        "/v1/waves/w1/feed": {"participant": "alice", "cursors": head, "wait": 0, "limit": 5},
        "/v1/waves/w1/presence": {"participant": "alice", "event": "ping", "count": 1, "host": "h"},
        f"/v1/wavelets/{wl}/fork": {"name": "sweep", "with": ["alice"], "private": True, "as": "alice"},
        f"/v1/wavelets/{wl}/invite": {"name": "carol", "kind": "agent", "as": "alice"},
        f"/v1/wavelets/{wl}/leave": {"name": "carol", "kind": "agent"},
        f"/v1/wavelets/{wl}/blips": {"text": "hi", "as": "alice"},
        f"/v1/wavelets/{wl}/surface": {"text": "hi", "source_blip_id": blip},
        f"/v1/blips/{blip}/replace": {"text": "hi"},
        "/v1/tokens": {"wave": "w1", "participant": "erin"},
        "/v1/tokens/revoke": {"wave": "w1", "participant": "dave"},
    }


SPOILERS: list[Any] = [
    "\ud800",
    "x\udfff",
    "a\x00b",
    "alice\n",
    "w1\n",
    "ALICE",
    "",
    " ",
    "a" * (LIMIT + 1),
    None,
    0,
    -1,
    True,
    [],
    {},
    ["\ud800"],
    {"\ud800": "x"},
]
RAW_SPOILERS = [
    *[b"NaN", b"Infinity", b"-Infinity", b"1e400", b"[" * 50_000 + b"]" * 50_000],
    *[b"9" * 5000, b"-" + b"9" * 4000, b"1" + b"0" * 16],  # integers past Python's and fleet's bounds
]


def test_every_field_of_every_post_route_spoiled(target: Target) -> None:
    """Deterministically: each field of each route's valid body replaced by each known-nasty value."""
    for route, base in base_bodies(target).items():
        for field_name in base:
            for spoiler in SPOILERS:
                if field_name == "wait" and spoiler is True:
                    continue  # a wait of 1 s: legitimate, just slow
                raw = json.dumps({**base, field_name: spoiler}).encode()
                post_and_check(target, target.tokens[0], quote(route, safe="/"), raw, record=False)
            for raw_spoiler in RAW_SPOILERS:
                if field_name == "wait" and raw_spoiler in (b"Infinity", b"1e400"):
                    continue  # capped at 60 s: a legitimate long-poll
                raw = json.dumps({**base, field_name: "@@"}).encode().replace(b'"@@"', raw_spoiler)
                post_and_check(target, target.tokens[0], quote(route, safe="/"), raw, record=False)
    target.healthy()


def test_every_hostile_body_on_every_post_route(target: Target) -> None:
    """The known-nasty bodies, deterministically, on each POST route with real references."""
    refs = target.refs
    for tpl in target.post_routes:
        route = tpl.format(wave="w1", wavelet=quote(refs["wavelet"][1]), blip=refs["blip"][0])
        for token in target.tokens[:2]:
            for raw in RAW_BODIES:
                post_and_check(target, token, route, raw, record=False)
    target.healthy()


@FUZZ
@given(data=st.data())
def test_hostile_paths_queries_and_methods(target: Target, data: st.DataObject) -> None:
    method = data.draw(
        st.sampled_from(["GET", "GET", "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE"]),
        label="method",
    )
    route = data.draw(routes(target, target.get_routes + target.post_routes), label="route")
    query = data.draw(queries(target), label="query")
    token = data.draw(st.sampled_from(target.weighted_tokens), label="token")
    path = route + ("?" + query if query else "")
    body = data.draw(bodies(target, route)) if method != "GET" and data.draw(st.booleans()) else None
    before = snapshot(target.db)
    r = send(target, token, method, path, body=body)
    check_answer(r, f"{method} {path[:200]!r}")
    if 400 <= r.status < 500 or method != "POST":
        assert snapshot(target.db) == before, f"{method} {path[:200]!r} ({r.status}) changed the store"
    else:
        check_invariants(target.db)
    # the connection (if kept) is still in sync
    if target.conns[token]._conn is not None:
        check_answer(send(target, token, "GET", "/v1/health"), "health after")


@FUZZ
@given(data=st.data())
def test_raw_malformed_requests(target: Target, data: st.DataObject) -> None:
    req = data.draw(raw_requests(target), label="request")
    before = snapshot(target.db)
    got = raw_exchange(target.daemon.url, req.data, timeout=15, shut_write=True)
    assert got, f"the connection was closed without an answer to {req.data[:300]!r}"
    responses = split_responses(got, bodiless_first=req.head)
    statuses = [s for s, _, _ in responses if s != 100]
    event(f"statuses {statuses}")
    assert statuses, got[:300]
    for i, (status, headers, body) in enumerate(responses):
        assert status != 500, f"500 for {req.data[:300]!r}: {body[:300]!r}"
        if status >= 400 and body:
            err = json.loads(body)["error"]
            assert err["message"] and err["kind"] != "error"
        if headers.get("connection") == "close":
            assert i == len(responses) - 1, (
                f"answers after a Connection: close: {statuses} for {req.data[:300]!r}"
            )
    if req.bad_length:  # a Content-Length the server cannot trust ends the exchange with one answer
        assert statuses in ([400], [413]), f"{statuses} for {req.data[:300]!r}"
    if all(s >= 400 for s in statuses):
        assert snapshot(target.db) == before, f"rejected raw request changed the store: {req.data[:300]!r}"
    else:
        check_invariants(target.db)
    target.healthy()


def test_the_fuzzed_daemon_is_still_consistent(target: Target) -> None:
    """After the storm: the daemon answers, and its event log replays to exactly the same state."""
    target.healthy()
    check_invariants(target.db)
    with tempfile.TemporaryDirectory() as tmp:
        rebuilt = Path(tmp) / "replayed.sqlite3"
        replay(target.db, rebuilt)
        assert snapshot(target.db) == snapshot(rebuilt)
