"""The route table (fleet/routes.py) is the one declaration of the API: the daemon serves exactly its
routes, the client calls each through one method, docs/http-api.md documents each and nothing else,
and no other module writes a ``/v1/`` path. Who may do what is decided in fleet/store/access.py."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

import fleet
from fleet import errors, routes
from fleet.daemon import ROUTES as BOUND
from fleet.daemon.dispatch import HANDLER_MODULES, Dispatcher, bind
from fleet.daemon.request import Request
from fleet.models import Seat
from fleet.routes import ROUTES, Route, target
from fleet.store import Principal
from fleet.store.access import Access

FLEET = Path(fleet.__file__).resolve().parent
DOCS = FLEET.parent / "docs" / "http-api.md"


def _modules(under: Path) -> list[Path]:
    return sorted(p for p in under.rglob("*.py") if "__pycache__" not in p.parts)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (of modules, classes, functions, and the
    attribute docstrings under assignments)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                out.add(id(stmt.value))
    return out


# ---------------------------------------------------------------- the table itself


def test_each_route_is_named_once_and_declared_as_a_constant_of_its_name() -> None:
    names = [r.name for r in ROUTES]
    assert len(names) == len(set(names))
    assert len({(r.method, r.path) for r in ROUTES}) == len(ROUTES)
    constants = {k: v for k, v in vars(routes).items() if isinstance(v, Route)}
    assert {v.name: k for k, v in constants.items()} == {r.name: r.name.upper() for r in ROUTES}
    for r in ROUTES:
        assert r.doc and len(r.doc) <= 60, r.name
        assert (r.request is None) == (r.method == "GET"), r.name
        assert r.keyed == (r.method == "POST" and r.idempotency != "unkeyed"), r.name


def test_the_daemon_binds_every_route_to_the_handler_of_its_name() -> None:
    assert [b.route for b in BOUND] == list(ROUTES)
    for b in BOUND:
        assert b.handler.__name__ == b.name
        assert (b.rebuild is None) == (b.route.idempotency in ("read", "unkeyed", "keyed", "secret"))
    extra = SimpleNamespace(HANDLERS=(lambda d, r: (200, None),))
    with pytest.raises(errors.FleetError, match="without a route"):
        bind(ROUTES, (*HANDLER_MODULES, extra))
    with pytest.raises(errors.FleetError, match="has no handler"):
        bind(
            (*ROUTES, Route("nothing", "GET", "/v1/nothing", None, object, "token", "read", "x")),
            HANDLER_MODULES,
        )


def test_a_handler_reading_a_query_parameter_its_route_does_not_declare_is_the_daemons_bug() -> None:
    r = Request(routes.GET_WAVE, "GET", "/v1/waves/w", {"limit": "3"}, b"", Principal.operator(), ("w",))
    with pytest.raises(errors.FleetError, match="does not declare"):
        r.q_int("limit", 1)
    page = Request(routes.READ, "GET", "/v1/wavelets/x/blips", {"limit": "3"}, b"", Principal.operator())
    assert page.q_int("limit", 1) == 3
    assert page.text("after") is None and page.flag("history") is False


# ---------------------------------------------------------------- one place builds a path


segment = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=40)
value = st.one_of(st.none(), st.booleans(), st.integers(0, 10**9), segment)


@given(st.sampled_from(ROUTES), st.data())
def test_a_target_built_from_the_table_is_dispatched_back_to_its_route_and_arguments(
    route: Route[object], data: st.DataObject
) -> None:
    """Any path arguments (any text but lone surrogates) and declared query values round-trip:
    the daemon's matcher finds the same route and the same unquoted segments; the query holds
    exactly the values that are not None, False or ''."""
    args = {p: data.draw(segment, label=p) for p in route.params}
    query = {q: data.draw(value, label=q) for q in route.query}
    got = urlsplit(target(route, args, query))
    d = Dispatcher()
    d.routes = BOUND
    bound, segments = d.route(route.method, got.path)
    assert bound.route == route
    assert segments == tuple(args[p] for p in route.params)
    sent = {k: v for k, v in query.items() if v is not None and v is not False and v != ""}
    expect = {k: "1" if v is True else str(v) for k, v in sent.items()}
    assert {k: v[-1] for k, v in parse_qs(got.query, keep_blank_values=True).items()} == expect


def test_a_target_refuses_what_its_route_does_not_take() -> None:
    with pytest.raises(errors.UsageError, match="takes"):
        target(routes.GET_WAVE, {})
    with pytest.raises(errors.UsageError, match="no query parameter"):
        target(routes.GET_WAVE, {"wave": "w"}, {"limit": 3})


def test_no_module_but_the_route_table_writes_a_v1_path() -> None:
    """Not a string, not an f-string part (docstrings may name routes: they are prose)."""
    found = []
    for path in _modules(FLEET):
        if path == FLEET / "routes.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and re.search(r"(^|[\s`'\"])/v1(/|\b)", node.value)
            ):
                found.append(f"{path.relative_to(FLEET)}:{node.lineno}: {node.value[:60]!r}")
    assert found == []


def test_the_console_page_writes_no_v1_path_and_calls_only_console_routes_by_name() -> None:
    """The page's scripts call routes by name from /assets/routes.js (fleet.console.routes_js, made
    from the table): no ``/v1/`` path in any asset, comments included, and every name it calls is
    a route the console exposes."""
    assets = FLEET / "console_assets"
    found = [
        f"{p.name}:{n}: {line.strip()[:70]!r}"
        for p in sorted(assets.iterdir())
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if "/v1/" in line or re.search(r"/v1\b", line)
    ]
    assert found == []
    from fleet.console import routes_js

    served = routes_js().decode()
    table = json.loads(served[served.index("(") + 1 : served.rindex(")")])
    assert table == {
        r.name: {"method": r.method, "path": "/api" + r.path, "query": list(r.query)}
        for r in ROUTES
        if r.console
    }
    called = set(re.findall(r"\bcall\(\s*\"(\w+)\"", (assets / "console.js").read_text(encoding="utf-8")))
    assert called and called <= set(table), f"the console calls routes it is not given: {called - set(table)}"
    assert '<script src="/assets/routes.js" defer></script>\n<script src="/assets/console.js"' in (
        assets / "index.html"
    ).read_text(encoding="utf-8"), "the map must load before the page's script"


def test_every_route_has_exactly_one_client_method_named_as_it() -> None:
    """Each route constant is named once in the client package, inside the method of its name."""
    constants = {r.name.upper(): r for r in ROUTES}
    seen: dict[str, list[str]] = {}
    for path in _modules(FLEET / "client"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and node.attr in constants:
                    seen.setdefault(node.attr, []).append(fn.name)
    assert {k: v for k, v in seen.items()} == {k: [r.name] for k, r in constants.items()}
    from fleet.client import Client

    assert all(callable(getattr(Client, r.name)) for r in ROUTES)


# ---------------------------------------------------------------- the docs


def _documented() -> dict[tuple[str, str], tuple[set[str], str]]:
    """(method, path) → (query parameter names, the row) of each row of the docs' route table."""
    rows: dict[tuple[str, str], tuple[set[str], str]] = {}
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| (GET|POST) \| `([^`]+)` \|(.*)", line)
        if m is None:
            continue
        path, _, query = m[2].partition("?")
        key = (m[1], path)
        assert key not in rows, f"{m[1]} {path} is documented twice"
        rows[key] = ({p.split("=")[0] for p in query.split("&") if p}, m[3])
    return rows


WHO = {
    "none": "(no auth)",
    "operator": "(operator only)",
    "operator-token": "(the operator token itself)",
    "resident": "seated resident",
}
"""What the docs' row says of who may call a route, for the kinds it names in words."""


def test_docs_document_every_route_with_its_query_and_nothing_that_is_not_a_route() -> None:
    documented = _documented()
    table: dict[tuple[str, str], Route[object]] = {(r.method, r.path): r for r in ROUTES}
    assert sorted(set(table) - set(documented)) == [], "routes missing from docs/http-api.md"
    assert sorted(set(documented) - set(table)) == [], "docs/http-api.md documents what is no route"
    for key, (query, row) in documented.items():
        route = table[key]
        assert query == set(route.query), f"{route.name}: docs say ?{sorted(query)}, the table {route.query}"
        for auth, phrase in WHO.items():
            assert (phrase in row) == (route.auth == auth), f"{route.name} is {route.auth!r}: {phrase!r}?"


# ---------------------------------------------------------------- a real daemon serves the table


# ---------------------------------------------------------------- who may do what: access.py


def test_no_daemon_module_decides_who_may_do_what() -> None:
    """Forbidden is raised in fleet/store/access.py, not by a handler of its own accord."""
    found = []
    for path in [*_modules(FLEET / "daemon"), FLEET / "daemon.py"]:
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "Forbidden":
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


def _seat(participant: str) -> Seat:
    return Seat(wave_id="w1", participant=participant, session_id="s", host="h", pid=1)


def test_memory_is_written_by_the_operator_or_as_the_seated_resident_only() -> None:
    seat = _seat("res")
    op = Principal.operator()
    resident = Principal("res", "w1", token_id="t1")
    other = Principal("bob", "w1", token_id="t2")
    assert Access.memory_author(op, seat, "w", None) == "operator"
    assert Access.memory_author(op, seat, "w", "res") == "res"
    assert Access.memory_author(resident, seat, "w", None) == "res"
    with pytest.raises(errors.Forbidden, match="written by the operator or as the wave's resident"):
        Access.memory_author(op, seat, "w", "bob")
    with pytest.raises(errors.Forbidden, match="writes only as itself"):
        Access.memory_author(resident, seat, "w", "bob")
    with pytest.raises(errors.Forbidden, match="only the operator and the wave's seated resident"):
        Access.memory_author(other, seat, "w", None)


def test_a_client_call_with_another_record_than_its_route_takes_sends_nothing() -> None:
    from fleet.client import Client
    from fleet.models import NewBlip

    # nothing listens on port 9 of loopback: a request that were sent would be DaemonUnreachable
    client = Client("http://127.0.0.1:9", "t", retries=0)
    with pytest.raises(errors.UsageError, match="route create_wave takes NewWave, not NewBlip"):
        client.call(routes.CREATE_WAVE, NewBlip(text="x"))
    with pytest.raises(errors.UsageError, match="route get_wave takes no body"):
        client.call(routes.GET_WAVE, NewBlip(text="x"), wave="w")


def test_the_module_map_in_docs_design_md_names_every_module_of_fleet_and_no_other() -> None:
    text = (FLEET.parent / "docs" / "design.md").read_text(encoding="utf-8")
    section = text.split("### Module map", 1)[1]
    named: set[str] = set()
    package = ""
    for line in section.splitlines():
        if m := re.match(r"- `(\w+)/`$", line):
            package = m[1] + "/"
        elif m := re.match(r"  - `([\w/]+\.py)` — \S", line):
            named.add(package + m[1])
        elif m := re.match(r"- `(\w+\.py)` — \S", line):
            package = ""
            named.add(m[1])
    modules = {str(p.relative_to(FLEET)) for p in _modules(FLEET)}
    assert sorted(modules - named) == [], "modules missing from the module map of docs/design.md"
    assert sorted(named - modules) == [], "the module map names modules that do not exist"
