"""Rolling summaries on a real SQLite store and a real daemon: assembly, the load-bearing check,
fallback-open summarizers, replay, visibility, and the paged context route."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from test_store_summaries import PEOPLE, nbytes

from fleet import errors
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.delivery.attention import RoutingLog, SummaryEntry, parse_entry
from fleet.models import Context
from fleet.summaries import Summarizer, roll

# ---------------------------------------------------------------- assembly against the full walk


@pytest.fixture
def op(operator: Client) -> Client:
    operator.create_wave("w", with_=PEOPLE)
    return operator


# ---------------------------------------------------------------- forks and what a summary saves


# ---------------------------------------------------------------- writers over the real daemon


def routing(tmp_path: Path) -> RoutingLog:
    return RoutingLog(tmp_path / "summaries.routing.jsonl", "summarizer", "w")


def logged(log: RoutingLog) -> list[SummaryEntry]:
    got = [parse_entry(line) for line in log.path.read_bytes().splitlines()]
    return [e for e in got if isinstance(e, SummaryEntry)]


SCRIPT = "import json, sys; req = json.load(sys.stdin); {}"


@pytest.mark.parametrize(
    ("code", "outcome", "detail"),
    [
        ("import time; time.sleep(30)", "timeout", "killed"),
        ("sys.exit(3)", "exit", "exit status 3"),
        ("raise SystemExit('crashed')", "exit", "crashed"),
        ("print('not json')", "invalid", "not a summary"),
        ("print(json.dumps({'cites': []}))", "invalid", "text"),
    ],
)
def test_a_failing_summarizer_leaves_the_full_context(
    op: Client, tmp_path: Path, code: str, outcome: str, detail: str
) -> None:
    main = op.resolve("w/main").id
    op.post(main, "DONE: the thing", as_="alice")
    before = op.context(main)
    command = f"{sys.executable} -c {json.dumps(SCRIPT.format(code))}"
    log = routing(tmp_path)
    entry = roll(op, "w", main, "w/main", log, Summarizer(command, timeout=1.0))
    assert entry is not None and entry.outcome == outcome and detail in entry.detail, entry
    assert op.summaries(main) == [] and op.context(main) == before and before.saved_bytes == 0
    assert [e.outcome for e in logged(log)] == [outcome]


def test_a_summarizer_that_drops_a_surface_is_rejected_and_logged_with_the_missing_id(
    op: Client, tmp_path: Path
) -> None:
    main = op.resolve("w/main").id
    side = op.fork(main, "side", with_=["bob"], as_="bob")
    surfaced = op.surface(side.id, "side: done deal", as_="bob")
    op.post(main, "chatter", as_="alice")
    drops = "print(json.dumps({'text': 'nothing happened', 'cites': []}))"
    command = f"{sys.executable} -c {json.dumps(SCRIPT.format(drops))}"
    log = routing(tmp_path)
    entry = roll(op, "w", main, "w/main", log, Summarizer(command))
    assert entry is not None and entry.outcome == "rejected" and entry.missing == [surfaced.id]
    assert logged(log)[0].missing == [surfaced.id] and op.summaries(main) == []
    # a summarizer that cites what it was told to cite is recorded, with its name as the author
    keeps = "print(json.dumps({'text': 'side settled', 'cites': req['must_cite']}))"
    command = f"{sys.executable} -c {json.dumps(SCRIPT.format(keeps))}"
    entry = roll(op, "w", main, "w/main", log, Summarizer(command))
    assert entry is not None and entry.outcome == "accepted"
    (summary,) = op.summaries(main)
    assert summary.author_kind == "summarizer" and summary.cites == [surfaced.id]
    ctx: Context = op.context(main)
    assert [x.id for x in ctx.summaries] == [summary.id] and ctx.blips == [] and ctx.saved_bytes > 0
    assert ctx.summaries[0].cites == summary.cites and ctx.summaries[0].load_bearing == []


# ---------------------------------------------------------------- the MCP tools, through the official SDK


def test_wavelet_summarize_pin_and_read_through_the_mcp_sdk(
    daemon: Daemon, op: Client, tmp_path: Path
) -> None:
    import os

    import anyio
    import worlds
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from fleet.paths import get_paths

    world = worlds.World(daemon, op, get_paths(), tmp_path, "w", op.resolve("w/main").id)
    main = world.main
    side = op.fork(main, "side", with_=["bob"], as_="bob")
    surfaced = op.surface(side.id, "side: settled", as_="bob")
    quiet = op.post(main, "a quiet fact", as_="bob")
    params = StdioServerParameters(
        command=sys.executable, args=world.channel_argv("alice", "--no-deliver")[1:],
        env={"FLEET_HOME": os.environ["FLEET_HOME"]},
    )  # fmt: skip

    async def scenario() -> None:
        with anyio.fail_after(60):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await s.initialize()

                async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
                    res = (await s.call_tool(name, args)).model_dump(by_alias=True, exclude_none=True)
                    return dict(res)

                pinned = await call("wavelet_pin", {"blip_id": quiet.id})
                assert pinned["isError"] is False and pinned["structuredContent"]["blip"]["id"] == quiet.id
                todo = (await call("wavelet_summarize", {"wavelet": "main"}))["structuredContent"]
                assert sorted(todo["must_cite"]) == sorted([surfaced.id, quiet.id])
                drops = {"wavelet": "main", "text": "all quiet", "cites": [quiet.id]}
                bad = await call("wavelet_summarize", drops)
                assert bad["isError"] is True and surfaced.id in bad["content"][0]["text"]
                good = await call(
                    "wavelet_summarize",
                    {"wavelet": "main", "text": "side settled; a quiet fact", "cites": todo["must_cite"]},
                )
                assert good["isError"] is False and good["structuredContent"]["accepted"] is True
                await anyio.to_thread.run_sync(lambda: op.post(main, "after the summary", as_="bob"))
                got = (await call("wavelet_read", {"wavelet": "main"}))["structuredContent"]
                assert [b["text"] for b in got["blips"]] == ["after the summary"]
                assert [x["text"] for x in got["summaries"]] == ["side settled; a quiet fact"]
                assert got["saved_bytes"] > 0 and got["more"] is False
                paged = (await call("wavelet_read", {"wavelet": "main", "limit": 1}))["structuredContent"]
                assert paged["more"] is True and paged["summaries"] == []
                older = await call("wavelet_read", {"wavelet": "main", "limit": 1, "before": paged["before"]})
                assert [x["upto"] for x in older["structuredContent"]["summaries"]] == [quiet.id]

    anyio.run(scenario)
    outcomes = [(e.outcome, e.missing) for e in world.log("alice") if isinstance(e, SummaryEntry)]
    assert outcomes == [("rejected", [surfaced.id]), ("accepted", [])]


# ---------------------------------------------------------------- the route and the CLI


def test_the_context_route_caps_a_page_at_500_by_default_and_refuses_a_bad_limit(op: Client) -> None:
    main = op.resolve("w/main").id
    for i in range(520):
        op.post(main, f"m{i}", as_="alice")
    page = op.context(main)
    assert len(page.blips) == 500 and page.more and page.blips[-1].text == "m519"
    rest = op.context(main, before=page.cursor)
    assert not rest.more and len(rest.blips) == 21  # m0..m19 and the wave's system blip
    assert op.full_context(main).blips == rest.blips + page.blips
    for bad in ("0", "x"):
        with pytest.raises(errors.UsageError, match="limit"):
            op._call("GET", f"/v1/wavelets/{main}/context?limit={bad}", Context)


def test_fleet_summary_and_read_context_from_the_command_line(op: Client, daemon: Daemon) -> None:
    from test_cli import base_env, fails, fleet, ok

    env = base_env(FLEET_DAEMON=daemon.url, FLEET_TOKEN=daemon.operator_token)
    main = op.resolve("w/main").id
    done = op.post(main, "DONE: parser merged", as_="alice")
    # a summary of so little would be longer than the text: refused, and the full text stays
    tiny = fleet("summary", "write", "w/main", env=env)
    assert tiny.returncode == 1 and "rejected (extractive)" in tiny.stdout and "saves nothing" in tiny.stderr
    assert op.summaries(main) == []
    quiet = op.post(main, "a quiet fact\n" + "with the long story of how it was found. " * 6, as_="bob")
    assert "no summary yet" in ok("summary", "show", "w/main", env=env)
    assert "accepted (extractive)" in ok("summary", "write", "w/main", env=env)
    (shown,) = json.loads(ok("summary", "show", "w/main", "--json", env=env))
    assert shown["author"] == "fleet" and shown["cites"] == [done.id] and shown["upto"] == quiet.id
    ctx = json.loads(ok("read", "w/main", "--context", "--json", env=env))
    assert ctx["blips"] == [] and ctx["saved_bytes"] == ctx["full_bytes"] - ctx["bytes"] > 0
    human = fleet("read", "w/main", "--context", env=env)
    assert human.returncode == 0 and "[summary of w/main" in human.stdout and "saved" in human.stderr
    assert "nothing new to summarize" in ok("summary", "write", "w/main", env=env)
    ok("pin", quiet.id, env=env)
    gap = fleet("summary", "check", "w/main", env=env)
    assert gap.returncode == 1 and f"not cited: {quiet.id}" in gap.stdout
    op.post(main, "one more\n" + "and its long tail. " * 8, as_="alice")
    rolled = ok("summary", "run", "w", "--once", "--every", "1", env=env)
    assert rolled.startswith("w/main: summarized 4 blip(s) up to ") and "bytes saved (extractive)" in rolled
    assert "cites 2 of 2" in ok("summary", "check", "w/main", env=env)
    # bad input: a clear message, the documented exit code, nothing changed
    before = op.summaries(main)
    assert "--context" in fails(2, "read", "w/main", "--context", "--follow", env=env)
    assert "empty" in fails(2, "summary", "write", "w/main", "--command", "", env=env)
    assert "at least 1" in fails(2, "summary", "run", "w", "--every", "0", env=env)
    op.post(main, "and more", as_="alice")
    broken = fleet("summary", "write", "w/main", "--command", "/nonexistent/summarizer", env=env)
    assert broken.returncode == 1 and "error" in broken.stdout and "Traceback" not in broken.stderr
    assert op.summaries(main) == before


def test_fleet_summary_run_rolls_after_n_blips_or_m_bytes(op: Client, daemon: Daemon) -> None:
    import os
    import signal
    import stat
    import subprocess
    import threading

    from conftest import retry_until
    from test_cli import REPO, base_env, ok

    from fleet.delivery.attention import routing_log_path
    from fleet.delivery.state import StateFile
    from fleet.paths import get_paths

    env = base_env(FLEET_DAEMON=daemon.url, FLEET_TOKEN=daemon.operator_token)
    main = op.resolve("w/main").id
    op.post(main, "x" * 100, as_="alice")
    # below both thresholds: nothing; over the byte threshold: rolled, and the line says what it saved
    assert ok("summary", "run", "w", "--once", "--every", "1000", "--bytes", "10000", env=env) == ""
    once = ok("summary", "run", "w", "--once", "--every", "1000", "--bytes", "50", env=env)
    (first,) = op.summaries(main)
    saved = first.covered_bytes - nbytes(first.text)
    assert once == f"w/main: summarized 2 blip(s) up to {first.upto[:13]}, {saved} bytes saved (extractive)\n"
    # running: it says what it does and how to stop it, then prints each summary it writes
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet", "summary", "run", "w", "--every", "3"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline()
        assert "rolling the summaries of wave w" in started and "3 new blips" in started
        assert "Ctrl-C" in started, started
        op.post(main, "one", as_="alice")
        op.post(main, "two", as_="bob")
        assert len(op.summaries(main)) == 1
        last = op.post(main, "three", as_="alice")
        retry_until(lambda: said, timeout=20, what="the runner's line for its second summary")
        assert op.summaries(main)[-1].upto == last.id
        second = op.summaries(main)[-1]
        assert said == [
            f"w/main: summarized 5 blip(s) up to {last.id[:13]},"
            f" {second.covered_bytes - nbytes(second.text)} bytes saved (extractive)\n"
        ]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        reader.join(10)
    assert proc.returncode == 0 and "stopped" in err and "Traceback" not in err
    log = routing_log_path(StateFile(get_paths().channels, daemon.url, "w", "summarizer"))
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    entries = [parse_entry(line) for line in log.read_bytes().splitlines()]
    assert [e.outcome for e in entries if isinstance(e, SummaryEntry)] == ["accepted", "accepted"]


def test_the_runner_waits_for_more_blips_after_a_summary_that_saved_nothing(
    op: Client, tmp_path: Path
) -> None:
    """Short chatter naming participants is all load-bearing: its extractive summary is longer than
    it. The runner offers it once, then waits for ``every`` more blips instead of offering (and
    printing, and logging) the same refusal at every new blip."""
    from fleet.summaries import Runner

    main = op.resolve("w/main").id
    log = routing(tmp_path)
    runner = Runner(op, "w", log, None, every=3, bytes=1 << 20)
    op.post(main, "bob: ok", as_="carol")
    assert runner.once() == []  # 2 blips with the wave's system blip: not due
    op.post(main, "alice: ok", as_="carol")
    (refused,) = runner.once()
    assert refused.outcome == "rejected" and "saves nothing" in refused.detail
    for text in ("alice: fine", "bob: yes"):
        op.post(main, text, as_="carol")
        assert runner.once() == []
    op.post(main, "carol: and now a long account of what was decided\n" + "details " * 60, as_="bob")
    (rolled,) = runner.once()
    assert rolled.outcome == "accepted" and rolled.saved_bytes > 0
    assert [e.outcome for e in logged(log)] == ["rejected", "accepted"]
