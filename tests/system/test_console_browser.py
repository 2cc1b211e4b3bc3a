"""The operator console in headless Chromium (Debian's, over the DevTools protocol: tests/cdp.py) against
the real daemon: what the page shows and what its controls do. The wire rules (raw HTTP and Server-Sent
Events): tests/component/test_console.py."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from cdp import Browser, CDPError, Page
from conftest import retry_until
from consolehelp import login, no_js_errors, open_console, request, run_cli, selected, texts, ui
from httphelp import Http, q
from mcphelp import RawMcp, channel_argv, minted_token_file
from test_access_private_ids import World, daemon, world  # noqa: F401 (fixtures: a daemon with its console, the model)
from test_permissions import SID

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.models import AgentState, PresenceReport
from fleet.records.permissions import PermissionAsk

REPO = Path(__file__).resolve().parents[2]


ARTIFACTS = REPO / "artifacts"


def test_without_the_cookie_the_page_shows_nothing(page: Page, d: Daemon, wave: Any, op: Client) -> None:
    op.post(wave.root_id, "secret plans")
    page.goto(ui(d).url + "/")
    body = page.eval("document.body.innerText")
    assert "log in" in body.lower()
    assert "secret" not in body and "demo" not in body
    assert page.eval("document.scripts.length") == 0
    # The page itself may not even fetch (its CSP has no connect-src): visit each URL instead.
    for path in ("/api/v1/waves", "/api/console/waves/demo/events", "/assets/console.js"):
        page.goto(ui(d).url + path)
        assert page.eval("performance.getEntriesByType('navigation')[0].responseStatus") == 401, path
        shown = page.eval("document.body.innerText")
        assert "secret" not in shown and "demo" not in shown
    # A used link does not log anyone in.
    link = ui(d).login_link()
    request(d, "GET", urlsplit(link)._replace(scheme="", netloc="").geturl())
    page.goto(link)
    assert "already used" in page.eval("document.body.innerText")
    page.goto(ui(d).url + "/api/v1/waves")
    assert page.eval("performance.getEntriesByType('navigation')[0].responseStatus") == 401


def test_a_blip_posted_through_the_cli_appears_within_a_second(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    open_console(page, d, "#/demo/main")
    assert selected(page) == wave.root_id
    run_cli(d, "post", "demo/main", "--as", "alice", "the build is green again")
    # Measured from the moment the CLI returned (the blip is committed): the stream must deliver it.
    retry_until(lambda: "the build is green again" in texts(page), timeout=1.0, what="the blip in the page")
    author = page.eval("document.querySelector('#blips .blip:last-child').dataset.author")
    assert author == "alice"
    no_js_errors(page)


def test_a_post_typed_into_the_page_lands_in_the_store_and_reaches_a_real_channel(
    page: Page, d: Daemon, wave: Any, op: Client, tmp_path: Path
) -> None:
    token_file = minted_token_file(op, "demo", "alice", tmp_path)
    channel = RawMcp(channel_argv("alice", "demo", d.url, token_file), stderr=tmp_path / "alice.stderr")
    try:
        channel.handshake()
        typed_post_reaches(page, d, wave, op, channel)
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            channel.close(timeout=10)  # stdin closed: the MCP shutdown
        channel.kill()
        for pipe in (channel.proc.stdin, channel.proc.stdout):
            if pipe is not None:
                pipe.close()


def typed_post_reaches(page: Page, d: Daemon, wave: Any, op: Client, channel: RawMcp) -> None:
    open_console(page, d)
    page.click("#compose")
    page.type("@al")
    retry_until(
        lambda: (
            page.eval("[...document.querySelectorAll('#mentions li')].map(l => l.dataset.name)") == ["alice"]
        ),
        what="the mention autocomplete",
    )
    page.press("Tab")
    assert page.eval("document.getElementById('compose').value") == "@alice "
    page.type("please rerun the flaky test")
    page.press("Enter")
    text = "@alice please rerun the flaky test"
    posted = retry_until(
        lambda: [b for b in op.read(wave.root_id).blips if b.text == text], what="the post in the store"
    )
    assert posted[0].author == "operator" and posted[0].kind == "message"
    # alice's real channel (a `fleet channel` process speaking MCP on stdio) delivers it.
    note = channel.wait_notes(
        lambda notes: next((n for n in notes if n["content"] == text), None), what="the channel delivery"
    )
    assert note["meta"]["author"] == "operator" and note["meta"]["blip_id"] == posted[0].id
    retry_until(lambda: text in texts(page), what="the post in the page")
    assert page.eval("document.getElementById('compose').value") == ""
    # A delivery is not work: alice's agent keeps no transcript fleet reads, and the page says so.
    retry_until(
        lambda: (
            "not Claude Code"
            in (page.eval("document.querySelector('#presence li[data-name=alice]')?.title") or "")
        ),
        what="alice unknown, and why, in the page",
    )
    no_js_errors(page)


XSS = (
    "<script>window.__pwned = 'script'</script>"
    "<img src=x onerror=\"window.__pwned = 'img'\">"
    "<b>not bold</b> & &amp; <a href=javascript:alert(1)>link</a>"
)


def test_markup_in_a_blip_renders_as_text_and_never_runs(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    op.post(wave.root_id, "before: " + XSS, as_="alice")
    open_console(page, d)
    run_cli(d, "post", "demo/main", "--as", "bob", "live: " + XSS)
    retry_until(
        lambda: page.eval("document.querySelectorAll('#blips .blip').length") == 3, what="the live blip"
    )
    assert page.eval("document.querySelectorAll('#blips img, #blips script, #blips b, #blips a').length") == 0
    retry_until(lambda: "live: " + XSS in texts(page), what="the live blip, as text")
    assert "before: " + XSS in texts(page)
    assert page.eval("typeof window.__pwned") == "undefined"
    visible = page.eval("document.getElementById('blips').innerText")
    assert "<script>window.__pwned = 'script'</script>" in visible
    no_js_errors(page)


def test_the_page_resumes_its_stream_with_last_event_id_and_misses_nothing(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    ui(d).max_stream = 0.3  # the console ends each stream quickly; the browser reconnects on its own
    open_console(page, d)
    expected = texts(page)
    conn = "document.getElementById('conn').dataset.state"
    for round_ in range(3):
        retry_until(lambda: page.eval(conn) == "reconnecting…", what="the stream to end")
        # Posted while the page has no stream: only a resume from Last-Event-ID can bring them.
        expected += [op.post(wave.root_id, f"missed {round_}.{i}", as_="alice").text for i in range(2)]
        want = list(expected)
        retry_until(lambda: texts(page) == want, what=f"the blips of round {round_}, once each, in order")  # noqa: B023
    no_js_errors(page)


def test_the_operator_forks_invites_removes_and_surfaces_from_the_page(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    open_console(page, d)
    page.click("#actions [data-form=fork]")
    page.eval(
        "(() => { const f = document.getElementById('form-fork'); f.name.value = 'design';"
        " f.with.value = 'alice'; f.private.checked = true; })()"
    )
    page.click("#form-fork button:not(.cancel)")
    fork = retry_until(
        lambda: [w for w in op.get_wave("demo").wavelets if w.name == "design"], what="the fork"
    )[0]
    assert fork.private and [m.name for m in fork.roster] == ["alice"]
    retry_until(lambda: selected(page) == fork.id, what="the page to open the fork")
    assert page.eval("document.querySelector(`.tree-row[data-name=design] .private`) !== null")
    assert not page.eval("document.getElementById('wavelet-private').hidden")

    page.click("#actions [data-form=invite]")
    page.type("bob")
    page.press("Enter")
    retry_until(lambda: "bob" in [m.name for m in op.get_wavelet(fork.id).roster], what="the invite")
    retry_until(
        lambda: page.eval("document.querySelector('#roster .chip[data-name=bob]') !== null"),
        what="bob's chip",
    )

    page.click("#roster .chip[data-name=bob] .chip-leave")
    page.click("#roster .chip[data-name=bob] .chip-leave")  # the second click confirms
    retry_until(lambda: "bob" not in [m.name for m in op.get_wavelet(fork.id).roster], what="the leave")
    retry_until(
        lambda: page.eval("document.querySelector('#roster .chip[data-name=bob]') === null"), what="no chip"
    )

    page.click("#actions [data-form=surface]")
    page.type("decided: ship the retry fix")
    page.click("#form-surface button:not(.cancel)")
    surfaced = retry_until(
        lambda: [b for b in op.read(wave.root_id).blips if b.kind == "surface"], what="the surface blip"
    )[0]
    assert surfaced.text == "decided: ship the retry fix" and surfaced.source_wavelet_id == fork.id
    assert surfaced.author == "operator"
    page.click(".tree-row[data-name=main]")
    retry_until(lambda: selected(page) == wave.root_id, what="main")
    retry_until(lambda: "decided: ship the retry fix" in texts(page), what="the surface in main")
    assert (
        page.eval("document.querySelector('#blips .kind-surface .src').textContent")
        == "surfaced from #design"
    )
    no_js_errors(page)


def test_a_wavelets_topic_shows_beside_its_name_in_the_tree_and_the_head(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    side = op.fork(wave.root_id, "side", ["alice"])
    op.set_topic(side.id, "retry the flaky upload <b>now</b>")
    open_console(page, d, "#/demo/side")
    retry_until(lambda: selected(page) == side.id, what="side")

    def shown() -> list[Any]:
        return list(page.eval(
            "[document.querySelector('.tree-row[data-name=side] .tree-topic')?.textContent ?? null,"
            " document.querySelector('.tree-row[data-name=main] .tree-topic')?.textContent ?? null,"
            " document.getElementById('wavelet-topic').hidden,"
            " document.getElementById('wavelet-topic').textContent]"
        ))  # fmt: skip

    topic = "retry the flaky upload <b>now</b>"  # text, never markup
    assert shown() == [topic, None, False, topic]
    # A change reaches the open page through its stream's tree, with no reload and no new request.
    op.set_topic(side.id, "")
    op.set_topic(wave.root_id, "the release")
    retry_until(lambda: shown() == [None, "the release", True, ""], what="the topics to move")
    page.click(".tree-row[data-name=main]")
    retry_until(lambda: shown()[2:] == [False, "the release"], what="main's topic in the head")
    no_js_errors(page)


def test_a_click_on_a_wavelet_is_not_lost_when_a_blip_arrives_between_press_and_release(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    """A blip in another wavelet updates its unread count in place: the row being clicked stays the
    element it was (the tree was rebuilt for each such blip, and a click whose press and release
    fell on two different elements was lost: seen once in a full run)."""
    side = op.fork(wave.root_id, "side", with_=["alice"])
    open_console(page, d)
    box = page.eval(
        "(() => { const r = document.querySelector('.tree-row[data-name=side]').getBoundingClientRect();"
        " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
    )
    x, y = box
    page.call(
        "Input.dispatchMouseEvent",
        {"type": "mousePressed", "x": x, "y": y, "button": "left", "clickCount": 1},
    )
    op.post(side.id, "news in the side wavelet", as_="alice")
    retry_until(
        lambda: page.eval("document.querySelector('.tree-row[data-name=side] .unread')?.textContent") == "1",
        what="side's unread count",
    )
    page.call(
        "Input.dispatchMouseEvent",
        {"type": "mouseReleased", "x": x, "y": y, "button": "left", "clickCount": 1},
    )
    retry_until(lambda: selected(page) == side.id, what="the click to open side")
    retry_until(lambda: "news in the side wavelet" in texts(page), what="side's blip")
    no_js_errors(page)


def test_a_replaced_blip_shows_its_latest_text_and_keeps_its_history(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    old = op.post(wave.root_id, "the fix is in utils.py", as_="alice")
    open_console(page, d)
    new = op.replace(old.id, "the fix is in retry.py", as_="alice")
    retry_until(lambda: "the fix is in retry.py" in texts(page), what="the new version")
    assert "the fix is in utils.py" not in texts(page)
    page.click(f"#blips .blip[data-id='{new.id}'] .edited")
    versions = retry_until(
        lambda: page.eval(
            f"[...document.querySelectorAll(`.blip[data-id='{new.id}'] .history .text`)]"
            ".map(e => e.textContent)"
        ),
        what="the history",
    )
    assert versions == ["the fix is in utils.py", "the fix is in retry.py"]
    no_js_errors(page)


def test_presence_shows_each_agents_state_and_lists_who_waits_first(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    op.invite(wave.root_id, "carol")
    open_console(page, d)

    def states() -> dict[str, str]:
        rows = page.eval(
            "[...document.querySelectorAll('#presence li[data-name]')]"
            ".map(l => [l.dataset.name, l.dataset.state])"
        )
        return dict(rows)

    retry_until(
        lambda: states() == {"alice": "unknown", "bob": "unknown", "carol": "unknown"}, what="nobody reported"
    )

    def report(name: str, **agent: Any) -> None:
        op.report_presence("demo", PresenceReport(participant=name, event="ping", agent=AgentState(**agent)))

    report("alice", kind="turning", tool="Bash")
    report("bob", kind="idle")
    report("carol", kind="permission", tool="Bash", input="rm -rf build")
    retry_until(
        lambda: states() == {"alice": "turning", "bob": "idle", "carol": "permission"}, what="the new states"
    )
    order = page.eval("[...document.querySelectorAll('#presence li[data-name]')].map(l => l.dataset.name)")
    assert order == ["carol", "alice", "bob"], "who waits on the operator comes first"
    text = page.eval("document.querySelector('#presence li[data-name=carol] .state').textContent")
    assert text.startswith("waiting for permission: Bash (rm -rf build)")
    retry_until(
        lambda: page.eval(
            "document.querySelector('#roster .chip[data-name=alice] .dot').classList.contains('turning')"
        ),
        what="alice's roster dot",
    )
    op.post(wave.root_id, "done", as_="alice")
    assert states()["alice"] == "turning", "a post says nothing of what the session does"
    report("alice", kind="idle")
    retry_until(lambda: states()["alice"] == "idle", what="alice idle once her session says so")
    no_js_errors(page)


def test_a_10000_blip_wavelet_renders_its_tail_and_pages_history_on_scroll(
    page: Page, d: Daemon, wave: Any
) -> None:
    assert d.store is not None
    from fleet.store import OPERATOR_PRINCIPAL

    for i in range(10_000):
        d.store.post(OPERATOR_PRINCIPAL, wave.root_id, f"blip {i}", as_="alice")
    open_console(page, d)
    count = "document.querySelectorAll('#blips .blip').length"
    assert page.eval(count) == 200
    assert texts(page)[-1] == "blip 9999" and texts(page)[0] == "blip 9800"
    assert page.eval(
        "(() => { const t = document.getElementById('transcript');"
        " return t.scrollHeight - t.scrollTop - t.clientHeight < 5; })()"
    )
    page.eval("document.getElementById('transcript').scrollTop = 0")
    retry_until(lambda: page.eval(count) == 400, what="the next older page")
    assert texts(page)[0] == "blip 9600" and texts(page)[-1] == "blip 9999"
    # The reader stays where they were: the old first blip is still in view, not the top of the new page.
    assert page.eval("document.getElementById('transcript').scrollTop") > 0
    no_js_errors(page)


def test_console_screenshot(page: Page, d: Daemon, op: Client) -> None:
    """A realistic small wave, kept as ``artifacts/console.png`` (docs/console.png is a copy of one)."""
    w = op.create_wave("checkout-bug", ["alice", "bob", "carol"])
    op.post(
        w.root_id,
        "Checkout fails for carts over 50 items since this morning's deploy. "
        "@alice reproduce it, @bob find the commit.",
    )
    op.post(
        w.root_id, "On it. Reproduced locally: a 51-item cart gets HTTP 500 from /api/checkout.", as_="alice"
    )
    repro = op.fork(w.root_id, "repro", ["alice"], private=True, as_="alice")
    op.post(
        repro.id, "Stack trace points at pagination in cart_summary(): off-by-one at page 2.", as_="alice"
    )
    op.surface(repro.id, "Root cause: cart_summary() drops the last page when len(items) > 50.", as_="alice")
    op.post(w.root_id, 'Bisected: 4f2a91c ("paginate cart summaries") introduced it.', as_="bob")
    fix = op.fork(w.root_id, "fix", ["bob", "carol"], as_="bob")
    op.post(fix.id, "@carol patch is up: range(pages + 1). Can you review?", as_="bob")
    op.invite(fix.id, "dave")
    op.post(w.root_id, "Thanks both. Ship the fix behind the usual canary.")
    op.post(w.root_id, "Will do once carol approves.", as_="bob")
    for name, kind in (("alice", "idle"), ("bob", "idle"), ("carol", "turning")):
        op.report_presence(
            "checkout-bug",
            PresenceReport(participant=name, event="ping", agent=AgentState(kind=kind)),  # type: ignore[arg-type]
        )
    open_console(page, d, "#/checkout-bug/main")
    retry_until(
        lambda: (
            page.eval("document.querySelector('#presence li[data-name=carol]')?.dataset.state") == "turning"
        ),
        what="presence",
    )
    retry_until(lambda: len(texts(page)) >= 7, what="the transcript")
    page.click("#compose")
    page.type("@carol ping me when it is merged, and tell @d")
    retry_until(lambda: page.eval("!document.getElementById('mentions').hidden"), what="the mention menu")
    shot = page.screenshot(ARTIFACTS / "console.png")
    assert shot.stat().st_size > 20_000
    no_js_errors(page)


def test_the_console_shows_each_participants_usage_from_its_transcript(
    page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    from test_usage import LINES, SID, write

    from fleet.models import NewSession

    folder = Path(os.environ["HOME"]) / ".claude" / "projects" / "-tmp-project"
    folder.mkdir(parents=True)
    write(folder / f"{SID}.jsonl", LINES)
    op.record_session("demo", NewSession(participant="alice", session_id=SID, wavelet_id=wave.root_id))
    cookie = login(d)
    got = request(d, "GET", "/api/console/waves/demo/usage", cookie=cookie)
    assert got.status == 200
    (alice,) = got.json()["participants"]
    assert alice["participant"] == "alice" and alice["total"]["input_tokens"] == 289
    assert alice["total"]["tokens"] == 289 + 32 + 10 + 45 and alice["wavelets"]["w/main"]["turns"] == 1
    assert request(d, "GET", "/api/console/waves/demo/usage").status == 401  # nothing without the cookie
    assert request(d, "GET", "/api/console/waves/nope/usage", cookie=cookie).status == 404
    open_console(page, d)
    retry_until(
        lambda: (
            page.eval("(document.querySelector('#presence li[data-name=alice] .usage') || {}).textContent")
            == "376 tok · $0.0015"
        ),
        what="alice's usage beside her presence",
    )
    from fleet.records.budgets import BudgetReport, SetBudget

    b = op.set_budget("demo", SetBudget(participant="alice", tokens=100))
    assert b is not None
    op.budget_reached(
        "demo", BudgetReport(participant="alice", wavelet_id="", scope="alice", set_at=b.set_at, spent="376")
    )
    (st,) = request(d, "GET", "/api/console/waves/demo/usage", cookie=cookie).json()["budgets"]
    assert st["spent"] == [
        {
            "participant": "alice",
            "tokens": 376,
            "cost_usd": pytest.approx(0.0015, abs=1e-4),
            "unpriced": [],
            "passed": True,
            "reached": True,
        }
    ]
    page.goto("about:blank")
    open_console(page, d)
    retry_until(
        lambda: (
            page.eval("(document.querySelector('#presence li[data-name=alice] .budget') || {}).textContent")
            == "held: budget spent"
        ),
        what="alice held by her budget, beside her usage",
    )
    no_js_errors(page)


def _live(page: Page) -> bool:
    state = page.eval("!!document.body?.dataset.loaded && document.getElementById('conn')?.dataset.state")
    return bool(state == "live")


def _status(page: Page) -> int:
    return int(page.eval("performance.getEntriesByType('navigation')[0].responseStatus"))


def body_text(page: Page) -> str:
    """The page's text; '' while a navigation has no body yet (the logout's redirect)."""
    try:
        return str(page.eval("document.body ? document.body.innerText : ''"))
    except CDPError:
        return ""


def test_link_login_then_token_login_in_a_second_browser_then_logout(
    browser: Browser, page: Page, d: Daemon, wave: Any, op: Client
) -> None:
    """Issue 15: after the one-time link is used, a second browser logs in with the token form (it
    failed: `Referrer-Policy: no-referrer` made Chromium post `Origin: null`, refused 403)."""
    # the first browser: the link the daemon printed at start
    page.goto(d.console_link)
    retry_until(lambda: _live(page), what="the first browser's console to go live")
    # the second browser (its own context, no cookie): the link is spent, the token form is not
    second = browser.new_page()
    try:
        second.goto(d.console_link)
        assert "already used" in second.eval("document.body.innerText")
        second.goto(ui(d).url + "/")
        assert _status(second) == 401
        second.click("input[name=token]")
        second.type(d.operator_token)
        second.press("Enter")
        retry_until(lambda: _live(second), what="the token-form login to open the console")
        op.post(wave.root_id, "seen in both browsers")
        for p in (page, second):
            retry_until(lambda p=p: "seen in both browsers" in texts(p), what="the blip in each browser")  # type: ignore[misc]
        # log out of the second: its session ends, the first's does not
        second.click("form.logout button")
        retry_until(lambda: "log in" in body_text(second).lower(), what="the login page")
        second.goto(ui(d).url + "/api/v1/waves")
        assert _status(second) == 401
        op.post(wave.root_id, "only the first sees this")
        retry_until(lambda: "only the first sees this" in texts(page), what="the first browser still live")
        # a wrong token in the form is refused, and says so
        second.goto(ui(d).url + "/")
        second.click("input[name=token]")
        second.type("not-the-token")
        second.press("Enter")
        retry_until(lambda: _status(second) in (401, 403), what="the refusal page")
        assert second.eval("document.scripts.length") == 0
        no_js_errors(page)
        no_js_errors(second)
    finally:
        second.close()


TREE_AS = """(() => {
  const add = EventSource.prototype.addEventListener;
  EventSource.prototype.addEventListener = function (type, fn, ...rest) {
    if (type !== "tree") return add.call(this, type, fn, ...rest);
    return add.call(this, type, (e) => fn(window.treeAs ? { data: window.treeAs } : e), ...rest);
  };
})();"""
"""Hands the page's tree listener ``window.treeAs`` (once set) in place of the stream's tree: how
the test shows the console a non-member's answer, which its operator-only stream never sends."""


@pytest.fixture
def page() -> Iterator[Page]:
    b = Browser()
    try:
        p = b.new_page()
        try:
            yield p
        finally:
            p.close()
    finally:
        b.close()


def test_the_console_renders_a_non_members_tree_with_forks_under_a_private_wavelet(
    world: World,  # noqa: F811
    page: Page,
) -> None:
    """console.js copes with a withheld parent: the forks under a private wavelet still appear,
    under one placeholder, and nothing asks for the parent."""
    carol = Http(world.d.url, world.m.tokens["carol"])
    as_carol = carol.get(f"/v1/waves/{q(world.m.wave)}").raw.decode()
    carol.close()
    page.call("Page.addScriptToEvaluateOnNewDocument", {"source": TREE_AS})
    open_console(page, world.d, f"#/{world.m.wave}/main")
    page.eval(f"window.treeAs = {json.dumps(as_carol)}")
    world.op.invite(world.child, "dave").ok(200)  # the tree changes: the stream sends it again

    def rows() -> list[str]:
        return list(
            page.eval("[...document.querySelectorAll('#tree .tree-row .name')].map(e => e.textContent)")
        )

    retry_until(lambda: "a private wavelet" in rows(), what="carol's tree in the page")
    assert rows() == ["main", "a private wavelet", "open-child", "leaf", "inner"]
    assert page.eval("document.querySelector('#tree .placeholder').tagName") == "DIV"  # nothing to open
    page.click(".tree-row[data-name=open-child]")
    retry_until(lambda: page.eval("document.body.dataset.wavelet") == world.child, what="open-child")
    assert page.eval("document.getElementById('wavelet-title').textContent").endswith(
        "(a private wavelet) › open-child"
    )
    assert page.eval("document.getElementById('surface-button').disabled")
    assert "private wavelet you are not on" in page.eval("document.getElementById('surface-button').title")
    assert page.exceptions() == []
    tree_text = page.eval("document.getElementById('tree').innerText")
    assert "secret-plans" not in tree_text and "huddle" not in tree_text


def test_the_console_badges_a_waiting_agent_and_its_allow_button_answers(fleet_env: Any) -> None:
    from cdp import Browser
    from consolehelp import open_console

    consoled = Daemon(fleet_env, listen="127.0.0.1:0", ui="127.0.0.1:0")
    consoled.start()
    browser = Browser()
    page = browser.new_page()
    try:
        op = Client(consoled.url, consoled.operator_token)
        op.create_wave("demo", ["alice", "bob"])
        open_console(page, consoled)
        alice = Client(op.base_url, op.mint_token("demo", "alice").token)
        # the browser's notifications, stood in for (headless: nobody answers the prompt to allow them)
        page.eval(
            "window.shown = []; window.Notification = function (t, o) { shown.push([t, o.body]); };"
            " Notification.permission = 'granted'"
        )
        rid = alice.ask_permission(
            "demo", PermissionAsk(participant="alice", session_id=SID, tool="Bash", preview="make deploy")
        ).id
        badge = "(document.querySelector('#presence li[data-name=alice] .badge') || {}).textContent || ''"
        retry_until(
            lambda: page.eval(badge) == "waiting for permission: Bash (make deploy)", what="the badge"
        )
        first = "document.querySelector('#presence li[data-name]').dataset.name"
        assert page.eval(first) == "alice"  # listed first
        assert page.eval("document.title").startswith("(1 waiting) ")
        assert page.eval("shown") == [["fleet: alice waits for permission", "Bash (make deploy)"]]
        page.click("#presence li[data-name=alice] button.answer.allow")
        retry_until(lambda: op.permission("demo", rid).state == "allowed", what="the console's answer")
        got = op.permission("demo", rid)
        assert (got.answered_by, got.via) == ("operator", "console")
        retry_until(lambda: page.eval(badge) == "", what="the badge gone")
        assert page.exceptions() == []
    finally:
        page.close()
        browser.close()
        consoled.stop()
