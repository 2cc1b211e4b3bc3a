"""The record library's costs: import and class definition, decode/validate, encode.

Prints figures, asserts nothing. Every figure is the median of ``--runs`` fresh interpreters (import
figures) or of ``--runs`` timed loops in one interpreter (decode/encode), in one run:

- ``import fleet.models`` (every wire record fleet declares, with the record library) from each
  source tree given (this one; with ``--baseline-tree DIR`` another checkout, e.g. the commit before
  the records moved to msgspec), alone and after the stdlib modules a channel imports anyway;
- the candidates on the same three declarations (a request body, ``Blip``, a page of blips): msgspec
  ``Struct`` and pydantic ``BaseModel``: the library's import plus the classes' definition (pydantic
  builds its validator then), then decoding a request body, decoding a 500-blip page from JSON bytes
  and encoding it;
- fleet's own path on each tree: ``fleet.wire.loads`` of a request body (``NewFork``) and of a 500-blip
  ``BlipPage``, and ``fleet.httpbase.json_bytes`` of that page (what the daemon answers a read with).

- a 500-blip read over HTTP from an in-process daemon of each tree (``GET …/blips?limit=500``, keep-alive,
  the tree's own ``bench/store.py`` helpers): median wall per read, what the daemon's row building and
  answer encoding cost together.

The CLI and channel start-up figures are ``bench/cli.py``'s (run it from each tree).

Run: ``.venv/bin/python bench/records.py [--runs 15] [--baseline-tree /path/to/other/checkout]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PY = sys.executable
HERE = Path(__file__).resolve().parent.parent

_BLIP = {
    "id": "0190a1b2c3d4e5f60718293a4b5c6d7e",
    "wavelet_id": "0190a1b2c3d4e5f60718293a4b5c0000",
    "wave_id": "0190a1b2c3d4e5f60718293a4b5c1111",
    "author": "alice",
    "kind": "message",
    "text": "A blip of a typical length: a sentence or two of findings, with a path or two in it. " * 2,
    "replaces": None,
    "source_wavelet_id": None,
    "source_blip_id": None,
    "created_at": "2026-12-03T15:00:00.000000+00:00",
    "superseded_by": None,
    "actor": None,
    "replaced_by": None,
}
PAGE = json.dumps({"blips": [_BLIP] * 500, "cursor": _BLIP["id"]}).encode()
BODY = json.dumps({"name": "review", "with": ["bob", "carol"], "private": False, "as": "alice"}).encode()

_TIMER = """
import json, statistics, sys, time
def per_call(fn, n):
    out = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n)
    return statistics.median(out)
"""

_BLIP_FIELDS = "".join(
    f"    {name}: {'str' if value is not None else 'str | None = None'}\n"
    for name, value in sorted(_BLIP.items(), key=lambda kv: kv[1] is None)
)
"""The blip's fields (every candidate declares the same ones, required first: pydantic needs that)."""

_LIBS = {
    "msgspec Struct": """
import msgspec
class NewFork(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    with_: list[str] = msgspec.field(default_factory=list, name="with")
    private: bool = False
    as_: str | None = msgspec.field(default=None, name="as")
class Blip(msgspec.Struct, kw_only=True):
BLIP_FIELDSclass BlipPage(msgspec.Struct, kw_only=True):
    blips: list[Blip]
    cursor: str
t_defined = time.perf_counter()
body_dec = msgspec.json.Decoder(NewFork)
page_dec = msgspec.json.Decoder(BlipPage)
decode_body = lambda: body_dec.decode(BODY)
decode_page = lambda: page_dec.decode(PAGE)
page = decode_page()
encode_page = lambda: msgspec.json.encode(page)
""",
    "pydantic BaseModel": """
import pydantic
class NewFork(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid", populate_by_name=True)
    name: str
    with_: list[str] = pydantic.Field(default_factory=list, alias="with")
    private: bool = False
    as_: str | None = pydantic.Field(default=None, alias="as")
class Blip(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True)
BLIP_FIELDSclass BlipPage(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True)
    blips: list[Blip]
    cursor: str
t_defined = time.perf_counter()
decode_body = lambda: NewFork.model_validate_json(BODY)
decode_page = lambda: BlipPage.model_validate_json(PAGE)
page = decode_page()
encode_page = lambda: page.model_dump_json().encode()
""",
}
_LIBS = {name: setup.replace("BLIP_FIELDS", _BLIP_FIELDS) for name, setup in _LIBS.items()}

_ANYWAY = """
import ast, datetime, enum, inspect, json, pathlib, platform, re, textwrap, typing, uuid
t0 = time.perf_counter()
"""
"""What a fleet command or a channel imports anyway, before its records (the old tree's channel
imported all of these: ``python -X importtime -m fleet channel``): ``fleet.models`` on top of it is
what such a process pays for its records."""

_FLEET = """
import fleet.models
t_defined = time.perf_counter()
from fleet import wire
from fleet.httpbase import json_bytes
decode_body = lambda: wire.loads(fleet.models.NewFork, BODY)
decode_page = lambda: wire.loads(fleet.models.BlipPage, PAGE)
page = decode_page()
encode_page = lambda: json_bytes(page)
"""


_READ = """
import json, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "bench")
import store as b
home = Path(tempfile.mkdtemp()) / "home"
r = b.inprocess_daemon(home)
wl = b.new_wavelet(r, "w")
c = b.Conn(r.url, r.token)
body = json.dumps({"text": "a blip of a typical length " * 4}).encode()
for i in range(500):
    c.call("POST", f"/v1/wavelets/{wl}/blips", body)
times = []
for _ in range(RUNS):
    t0 = time.perf_counter()
    status, body = c.call("GET", f"/v1/wavelets/{wl}/blips?limit=500")
    times.append(time.perf_counter() - t0)
assert status == 200 and len(json.loads(body)["blips"]) == 500, status
c.close()
r.stop()
print(json.dumps({"read": statistics.median(times)}))
"""


def _read(tree: Path, runs: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "FLEET_HOME": ""}
    code = _READ.replace("RUNS", str(runs))
    done = subprocess.run(
        [PY, "-"], input=code, env=env, cwd=tree, capture_output=True, text=True, check=True
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1])["read"])


def _measure(setup: str, env: dict[str, str], timings: bool) -> dict[str, float]:
    # run from the tree measured (or anywhere else): ``python -`` puts the working directory first
    # on sys.path, ahead of PYTHONPATH
    """One fresh interpreter: the import + definition seconds of ``setup``, and with ``timings`` the
    per-call seconds of its decode_body, decode_page and encode_page."""
    code = (
        _TIMER
        + f"BODY = {BODY!r}\nPAGE = {PAGE!r}\n"
        + "t0 = time.perf_counter()\n"
        + setup
        + "out = {'define': t_defined - t0}\n"
        + (
            "out.update(body=per_call(decode_body, 2000), page=per_call(decode_page, 20),"
            " encode=per_call(encode_page, 20))\n"
            if timings
            else ""
        )
        + "print(json.dumps(out))\n"
    )
    cwd = env.get("PYTHONPATH", tempfile.gettempdir())
    done = subprocess.run([PY, "-"], input=code, env=env, cwd=cwd, capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout)
    return result


def _median_define(setup: str, env: dict[str, str], runs: int) -> float:
    return statistics.median(_measure(setup, env, timings=False)["define"] for _ in range(runs))


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--baseline-tree", type=Path, default=None, help="another checkout of fleet to compare")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "0"}
    base = statistics.median(
        _measure("t_defined = time.perf_counter()\n", env, timings=False)["define"] for _ in range(args.runs)
    )
    print(f"baseline (nothing imported): {_ms(base)}")
    print("candidates on the same declarations (NewFork, Blip, BlipPage):")
    for name, setup in _LIBS.items():
        define = _median_define(setup, env, args.runs)
        t = _measure(setup, env, timings=True)
        print(
            f"  {name:20} import+define {_ms(define)}  decode body {_us(t['body'])}"
            f"  decode 500-blip page {_ms(t['page'])}  encode it {_ms(t['encode'])}"
        )
    trees = [("this tree", HERE)] + ([("baseline tree", args.baseline_tree)] if args.baseline_tree else [])
    print("fleet itself (import fleet.models; wire.loads; httpbase.json_bytes):")
    for label, tree in trees:
        tree_env = {**env, "PYTHONPATH": str(tree)}
        define = _median_define(_FLEET, tree_env, args.runs)
        on_top = _median_define(_ANYWAY + _FLEET, tree_env, args.runs)
        t = _measure(_FLEET, tree_env, timings=True)
        print(
            f"  {label:20} import fleet.models {_ms(define)} ({_ms(on_top)} after a channel's stdlib)"
            f"  decode NewFork {_us(t['body'])}"
            f"  decode 500-blip page {_ms(t['page'])}  encode it {_ms(t['encode'])}"
            f"  HTTP read of 500 blips {_ms(_read(tree, args.runs * 4))}  ({tree})"
        )


if __name__ == "__main__":
    main()
