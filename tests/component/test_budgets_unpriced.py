"""An unpriced model never counts as free (issue 26).

The pinned Claude Code reports a model (``claude-opus-5-5``) that the shipped price table does not
name. Its cost is unknown, not $0: a cost budget over it is refused where the model is known
(``fleet budget set``, spawn), held where it is first seen (the channel's watch), and every place
that shows a cost shows "?" with why, naming the user's own ``<config>/prices.toml``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import retry_until
from test_usage import reply, u, wake, write
from worlds import World, world

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.models import NewSession
from fleet.paths import Paths
from fleet.records.budgets import SetBudget, passed
from fleet.usage import user_prices

SID = "2f0c6d1e-8a4b-4c1d-9e2f-3a4b5c6d7e8f"
UNPRICED = "claude-opus-5-5"
PRICE = (
    f'[[model]]\nmatch = "{UNPRICED}*"\ninput = 5.0\noutput = 25.0\ncache_read = 0.5\ncache_creation = 6.25\n'
)


# ---------------------------------------------------------------- the property


# ---------------------------------------------------------------- the CLI


def _fleet(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": daemon.operator_token}
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=60
    )


def _transcript(sid: str = SID) -> Path:
    folder = Path(os.environ["HOME"]) / ".claude" / "projects" / "-tmp-project"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{sid}.jsonl"


def _session(operator: Client, model: str = UNPRICED) -> None:
    operator.create_wave("w", ["alice", "bob"])
    main = operator.resolve("w/main")
    operator.record_session(main.wave_id, NewSession(participant="alice", session_id=SID, wavelet_id=main.id))
    write(
        _transcript(), [wake("w/main", main.id, "b0"), reply("m1", u(300_000, 35_000), model=model)], mode="w"
    )


def test_a_cost_budget_over_a_model_with_no_price_is_refused_naming_the_model_and_the_users_file(
    daemon: Daemon, operator: Client, fleet_env: Paths
) -> None:
    _session(operator)
    own = str(user_prices(fleet_env))
    for target in (["w", "alice"], ["w"], ["w/main"]):
        got = _fleet(daemon, "budget", "set", *target, "--cost", "0.01")
        assert got.returncode == 2, (target, got.stdout, got.stderr)
        assert UNPRICED in got.stderr and own in got.stderr and "--tokens" in got.stderr, got.stderr
        assert "Traceback" not in got.stderr
    assert operator.budgets("w") == []  # nothing changed in the store
    assert _fleet(daemon, "budget", "set", "w", "alice", "--tokens", "500000").returncode == 0  # tokens: fine
    # bob has no session: his model is not known yet, so it is accepted, saying what will happen
    bob = _fleet(daemon, "budget", "set", "w", "bob", "--cost", "0.01")
    assert bob.returncode == 0, bob.stderr
    assert "bob" in bob.stderr and "not known yet" in bob.stderr and own in bob.stderr
    # once the user prices the model, alice's cost budget is accepted
    user_prices(fleet_env).parent.mkdir(parents=True, exist_ok=True)
    user_prices(fleet_env).write_text(PRICE)
    assert _fleet(daemon, "budget", "set", "w", "alice", "--cost", "0.01").returncode == 0


def test_spend_of_an_unpriced_model_shows_as_unknown_not_zero(
    daemon: Daemon, operator: Client, fleet_env: Paths
) -> None:
    _session(operator)
    operator.set_budget("w", SetBudget(participant="alice", cost=0.01))  # as an older fleet accepted it
    own = str(user_prices(fleet_env))
    text = _fleet(daemon, "usage", "w")
    assert text.returncode == 0, text.stderr
    assert "$0.0000" not in text.stdout and "?" in text.stdout
    assert f"no price for model {UNPRICED}" in text.stderr and own in text.stderr
    assert "passed" in text.stdout or "held" in text.stdout  # unknown is past a cost budget
    shown = _fleet(daemon, "budget", "show", "w")
    assert shown.returncode == 0, shown.stderr
    assert "$0.0000" not in shown.stdout and "?" in shown.stdout and "ok" not in shown.stdout.split()
    out = json.loads(_fleet(daemon, "budget", "show", "w", "--json").stdout)
    (spent,) = out[0]["spent"]
    assert spent["cost_usd"] is None and spent["unpriced"] == [UNPRICED] and spent["passed"]
    usage = json.loads(_fleet(daemon, "usage", "w", "--json").stdout)
    assert usage["total"]["cost_usd"] is None and usage["total"]["unpriced"] == [UNPRICED]
    assert usage["prices_file"] == own


# ---------------------------------------------------------------- the channel's watch


@pytest.fixture
def wave(daemon: Daemon, operator: Client, fleet_env: Paths, tmp_path: Path) -> Iterator[World]:
    yield from world(daemon, operator, fleet_env, tmp_path, "w", ["alice", "bob"])


def test_a_channel_holds_a_cost_budget_whose_model_has_no_price_and_says_why(
    wave: World, fleet_env: Paths
) -> None:
    """Accepted before the session had a model (or by an older fleet): the first unpriced response
    holds deliveries, with one notice and one blip naming the model and the user's prices file."""
    op = wave.op
    op.record_session(
        op.get_wave("w").id, NewSession(participant="alice", session_id=SID, wavelet_id=wave.main)
    )
    op.set_budget("w", SetBudget(participant="alice", cost=0.01))
    write(_transcript(), [wake("w/main", wave.main, "b0"), reply("m1", u(10, 1), model=UNPRICED)], mode="w")
    alice = wave.channel("alice", "--receipts", "none", env={**os.environ, "CLAUDE_CODE_SESSION_ID": SID})
    retry_until(lambda: wave.lock_held("alice"), what="alice's channel delivering")
    wave.post("held: the cost is unknown")
    notice = alice.wait_notes(
        lambda n: next((x for x in n if x["meta"]["kind"] == "budget"), None), what="the budget notice"
    )
    assert UNPRICED in notice["content"] and "unknown" in notice["content"]
    assert not any(x["content"] == "held: the cost is unknown" for x in alice.channel_notes())
    told = retry_until(
        lambda: [
            b for b in op.read(wave.main).blips if b.kind == "system" and b.text.startswith("operator:")
        ],
        what="the blip naming the operator",
    )
    assert UNPRICED in told[0].text and str(user_prices(fleet_env)) in told[0].text
    # the user prices the model; setting the budget again releases what was held (under $0.01)
    user_prices(fleet_env).parent.mkdir(parents=True, exist_ok=True)
    user_prices(fleet_env).write_text(PRICE)
    op.set_budget("w", SetBudget(participant="alice", cost=0.02))
    alice.wait_notes(
        lambda n: any(x["content"] == "held: the cost is unknown" for x in n),
        what="the held blip, priced now",
    )


# ---------------------------------------------------------------- spawn and the members' sum


def test_spawn_refuses_a_layouts_cost_budget_over_a_model_with_no_price_before_making_anything(
    daemon: Daemon, operator: Client, fleet_env: Paths, tmp_path: Path, tmux_server: object
) -> None:
    import libtmux

    assert isinstance(tmux_server, libtmux.Server)
    operator.create_wave("w", ["alice", "bob"])
    layout = tmp_path / "costed.toml"
    layout.write_text(
        f'[defaults]\nagent = "fleet-standin"\n[participants.alice]\nmodel = "{UNPRICED}"\n'
        "budget = { cost = 0.5 }\n"
    )
    env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": daemon.operator_token}
    env["FLEET_TMUX_SOCKET"] = str(tmux_server.socket_name)
    got = subprocess.run(
        [sys.executable, "-m", "fleet", "spawn", "w/main", "--layout", str(layout)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert got.returncode == 2, got.stdout + got.stderr
    assert UNPRICED in got.stderr and str(user_prices(fleet_env)) in got.stderr and "tokens" in got.stderr
    assert "Traceback" not in got.stderr
    assert operator.budgets("w") == [] and operator.sessions(operator.get_wave("w").id) == []
    assert not tmux_server.sessions  # nothing was made


def test_a_members_unpriced_spend_makes_the_wavelets_sum_unknown_until_it_is_priced(
    daemon: Daemon, operator: Client
) -> None:
    from fleet.records.budgets import Spend, SpendReport, shared_cost

    operator.create_wave("w", ["alice", "bob"])
    main = operator.resolve("w/main")
    operator.set_budget("w", SetBudget(wavelet="w/main", cost=5.0))
    operator.report_spend(
        "w",
        SpendReport(
            participant="alice", session_id=SID, spend=[Spend(wavelet_id=main.id, tokens=9, cost=1.0)]
        ),
    )
    unknown = Spend(wavelet_id=main.id, tokens=900, cost=0.0, unpriced=[UNPRICED])
    operator.report_spend("w", SpendReport(participant="bob", session_id="s2", spend=[unknown]))
    (b,) = operator.budgets("w")
    assert b.spent_tokens == 909 and b.spent_unpriced == [UNPRICED] and shared_cost(b) is None
    assert passed(b, b.spent_tokens, shared_cost(b))  # unknown: past the limit, never $1 of $5
    priced = Spend(wavelet_id=main.id, tokens=900, cost=0.5)  # bob's next report, a price added
    operator.report_spend("w", SpendReport(participant="bob", session_id="s2", spend=[priced]))
    (b,) = operator.budgets("w")
    assert b.spent_unpriced == [] and shared_cost(b) == pytest.approx(1.5)
    assert not passed(b, b.spent_tokens or 0, shared_cost(b))


def test_status_shows_an_unpriced_cost_as_unknown_with_why(
    daemon: Daemon,
    operator: Client,
    fleet_env: Paths,
    tmux_server: object,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import libtmux

    from fleet import supervise
    from fleet.cli.render import status_table
    from fleet.tmux import Tmux

    assert isinstance(tmux_server, libtmux.Server)
    _session(operator)
    operator.set_budget("w", SetBudget(participant="alice", cost=0.01))
    st = supervise.status(operator, Tmux(tmux_server), fleet_env, "w")
    row = next(r for r in st.rows if r.participant == "alice")
    assert row.usage is not None and row.usage.cost_usd is None and row.budget == "?/$0.01"
    assert st.unpriced == [UNPRICED] and st.prices_file == str(user_prices(fleet_env))
    status_table(st)
    out = capsys.readouterr().out
    assert "$0.0000" not in out and f"no price for model {UNPRICED}" in out and st.prices_file in out
