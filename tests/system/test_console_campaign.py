"""The console's campaign view with real components: the real daemon and console, a campaign in a
temporary git repository planned by the real CLI, raw HTTP for the routes and headless Chromium
(``tests/cdp.py``) for the panel. What the console serves is what ``fleet campaign status --json``
computes; the panel follows STATE.md as it changes and shows nothing for a wave that is no campaign.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from campaignhelp import init_repo
from cdp import Page
from conftest import retry_until
from consolehelp import login, no_js_errors, open_console, request

from fleet.campaign import disk
from fleet.campaign import loop as lp
from fleet.client import Client
from fleet.daemon import Daemon


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "fleet", "campaign", *args], cwd=root, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def asking(tmp_path: Path, op: Client) -> disk.Campaign:
    """A planned three-wave campaign on wave 1 with a question open and wave 0's NOTES.md."""
    root = tmp_path / "repo"
    init_repo(root)
    cli(root, "plan", "PLAN.md", "--by-headings")
    c = disk.Campaign(root, f"three-wave-demo-{disk.today()}")
    op.create_wave(c.id)
    s = c.read()
    s.verify_count, s.current_wave, s.wave_status = 1, 1, "awaiting_user"
    s.user_question = "b.txt: plain or json?"
    s.row(0).set("Status", "complete")
    s.row(0).set("Commit", "abc1234")
    s.row(1).set("Status", "paused")
    s.row(1).set("Session", "executor-w1-s3")
    c.write(s)
    c.notes(0).write_text("## Attempt 1 — failed (transient)\n**Session:** s\n")
    o = lp.load_owned(c) or lp.Owned()
    o.wavelet, o.participant = f"{c.id}/executor-w1-s3", "executor-w1-s3"
    lp.save_owned(c, o)
    return c


def test_the_console_serves_the_campaign_status_the_cli_computes(
    tmp_path: Path,
    d: Daemon,
    op: Client,
) -> None:
    c = asking(tmp_path, op)
    op.create_wave("plain")
    cookie = login(d)
    got = request(d, "GET", f"/api/console/waves/{c.id}/campaign", cookie=cookie)
    assert got.status == 200, got.body
    view = got.json()
    assert view.pop("repo") == str(c.root.resolve())
    assert view == json.loads(cli(c.root, "status", "--json").stdout)
    assert view["attention"]["question"] == "b.txt: plain or json?" and view["done"] == 1
    notes = request(d, "GET", f"/api/console/waves/{c.id}/campaign/notes/0", cookie=cookie)
    assert notes.status == 200 and notes.json()["text"].startswith("## Attempt 1 — failed (transient)")
    assert (
        request(d, "GET", f"/api/console/waves/{c.id}/campaign/notes/1", cookie=cookie).json()["text"] == ""
    )
    # nothing without the cookie; a wave that is no campaign, an unknown wave or wave index: 404
    assert request(d, "GET", f"/api/console/waves/{c.id}/campaign").status == 401
    plain = request(d, "GET", "/api/console/waves/plain/campaign", cookie=cookie)
    assert plain.status == 404 and "carries out no campaign" in plain.json()["error"]["message"]
    assert request(d, "GET", "/api/console/waves/nope/campaign", cookie=cookie).status == 404
    nine = request(d, "GET", f"/api/console/waves/{c.id}/campaign/notes/9", cookie=cookie)
    assert nine.status == 404 and "has no wave 9" in nine.json()["error"]["message"]
    bad = request(d, "GET", f"/api/console/waves/{c.id}/campaign/notes/x", cookie=cookie)
    assert bad.status == 400 and "not a whole number" in bad.json()["error"]["message"]
    assert request(d, "POST", f"/api/console/waves/{c.id}/campaign", cookie=cookie,
                   origin=d.console.url if d.console else None).status == 404  # fmt: skip


def panel(pg: Page) -> Any:
    return pg.eval(
        "(() => { const p = document.getElementById('campaign');"
        " return {hidden: p.hidden, id: p.dataset.campaign || '',"
        " head: document.getElementById('campaign-head').textContent,"
        " strip: document.getElementById('campaign-strip').textContent,"
        " attention: document.getElementById('campaign-attention').hidden ? '' :"
        "   document.getElementById('campaign-attention').textContent,"
        " rows: [...document.querySelectorAll('#campaign-waves tbody tr')].map("
        "   r => [...r.cells].map(td => td.textContent))}; })()"
    )


def test_the_console_shows_the_campaign_of_the_open_wave_and_follows_it(
    tmp_path: Path,
    page: Page,
    d: Daemon,
    op: Client,
) -> None:
    c = asking(tmp_path, op)
    op.create_wave("plain")
    open_console(page, d, f"#/{c.id}")
    retry_until(lambda: panel(page)["id"] == c.id and not panel(page)["hidden"], what="the campaign panel")
    shown = panel(page)
    assert shown["id"] == c.id and "1/3 waves done" in shown["head"] and "plan PLAN.md" in shown["head"]
    assert "wave 1 awaiting_user" in shown["strip"] and "(no loop process)" in shown["strip"]
    assert "USER ATTENTION NEEDED: b.txt: plain or json?" in shown["attention"]
    assert f"{c.id}/executor-w1-s3" in shown["attention"] and "fleet campaign dismiss" in shown["attention"]
    assert [r[:4] for r in shown["rows"]] == [
        ["0", "complete", "-", "abc1234"],
        ["1", "paused", "executor-w1-s3", "-"],
        ["2", "pending", "-", "-"],
    ]
    page.click("#campaign-waves tr[data-wave='0'] .notes-button")
    retry_until(
        lambda: (
            "## Attempt 1 — failed (transient)"
            in page.eval("document.getElementById('campaign-notes').textContent")
        ),
        what="wave 0's NOTES.md",
    )
    # the operator dismisses the question from the CLI: the panel follows STATE.md
    cli(c.root, "dismiss")
    retry_until(
        lambda: (p := panel(page))["attention"] == "" and p["rows"][1][1] == "cancelled",
        what="the dismissed question gone from the panel",
    )
    assert "wave 1 failed" in panel(page)["strip"]
    # a wave that is no campaign shows no panel
    page.eval("(() => { const s = document.getElementById('wave-select'); s.value = 'plain';"
              " s.dispatchEvent(new Event('change')); })()")  # fmt: skip
    retry_until(lambda: panel(page)["hidden"], what="no campaign panel on wave plain")
    no_js_errors(page)
