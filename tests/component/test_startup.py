"""Start-up: the short-lived processes load only what their command needs.

The figures (time, RSS, CPU) are measured by ``bench/cli.py``; these tests pin the causes: a channel
process loads neither typer, pydantic, ``http.client`` (and with it ``ssl`` and ``email``) nor tmux,
nor what it never calls before its first delivery (OpenSSL's hashlib, typing_extensions, dataclasses
with inspect, subprocess, the tool pool); ``fleet post``, ``read`` and ``tree`` load no pydantic, tmux
or layouts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from mcphelp import RawMcp, channel_argv, env_with, minted_token_file

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths

HEAVY = ("pydantic", "typer", "http.client", "ssl", "email", "libtmux", "fleet.layouts", "fleet.spawn")
CHANNEL_UNUSED = {
    "_hashlib": "OpenSSL's libcrypto: 3.4 MiB resident for one digest (fleet.ids.digest has its own)",
    "typing_extensions": "10 ms and 1.8 MiB; msgspec falls back to typing (fleet.wire)",
    "dataclasses": "brings inspect, ast and dis: ~6 ms (in-process values are fleet.wire.Value)",
    "inspect": "~5 ms, for nothing a channel calls",
    "subprocess": "only the attendant runs a command (fleet.procs imports it there)",
    "concurrent.futures": "the tool pool is made at the first tools/call",
    "argparse": "with gettext, locale and the parser built, ~4 ms and 0.5 MiB: spawn's command lines are "
    "read without it (fleet.channel.plain_options)",
}
"""What a channel must not load before it delivers: each is what it cost a channel to start."""


def imported(argv: list[str], env: dict[str, str]) -> set[str]:
    """The modules a ``python -X importtime ...`` run imported (read from its stderr)."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return {
        line.rsplit("|", 1)[1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")
    }


def loaded_at_exit(args: list[str], env: dict[str, str]) -> set[str]:
    """What ``sys.modules`` holds when ``python -m fleet ARGS`` exits (``-X importtime`` also lists an
    import that was refused, as fleet.wire refuses typing_extensions to msgspec)."""
    code = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: sys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules)) + '\\n'))\n"
        f"sys.argv = ['fleet', *{args!r}]\n"
        "runpy.run_module('fleet', run_name='__main__', alter_sys=True)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    last = [line for line in run.stderr.splitlines() if line.startswith("MODULES ")][-1]
    return set(last.split()[1:])


def heavy(modules: set[str], allowed: tuple[str, ...] = ()) -> list[str]:
    return sorted(
        m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY if h not in allowed)
    )


@pytest.fixture
def cli_env(daemon: Daemon, operator: Client, fleet_env: Paths) -> dict[str, str]:
    operator.create_wave("w", ["alice"])
    return dict(os.environ, FLEET_DAEMON=daemon.url, FLEET_TOKEN=daemon.operator_token)


@pytest.mark.parametrize("command", [["post", "w/main", "hello"], ["read", "w/main"], ["tree", "w"]])
def test_the_everyday_commands_load_no_pydantic_tmux_or_layouts(
    cli_env: dict[str, str], command: list[str]
) -> None:
    modules = imported(["-m", "fleet", *command], cli_env)
    assert "fleet.client" in modules
    assert heavy(modules, allowed=("typer",)) == []


def test_a_channel_loads_no_cli_pydantic_http_client_or_tmux(
    daemon: Daemon, operator: Client, tmp_path: Path
) -> None:
    operator.create_wave("w", ["alice"])
    token = tmp_path / "alice.token"
    token.write_text(operator.mint_token("w", "alice").token)
    argv = ["-m", "fleet", "channel", "--participant", "alice", "--wave", "w", "--daemon", daemon.url,
            "--token-file", str(token)]  # fmt: skip
    # stdin at EOF: the channel starts, finds the client gone, shuts down cleanly (exit 0)
    modules = imported(argv, dict(os.environ))
    assert {"fleet.channel.server", "fleet.delivery.engine", "fleet.client"} <= modules
    assert heavy(modules) == []
    at_exit = loaded_at_exit(argv[2:], dict(os.environ))
    assert "fleet.channel.server" in at_exit
    assert {m: why for m, why in CHANNEL_UNUSED.items() if m in at_exit} == {}


def test_an_arm_of_the_watch_hook_loads_no_cli(daemon: Daemon, operator: Client, tmp_path: Path) -> None:
    """``fleet watch --hook`` runs at every turn's end of every session with the hook: it starts as a
    channel does (fleet.watch.hook_main), without typer and the command tree (~105 ms CPU and 19.8
    MiB through them, ~70 ms and 16.3 MiB without: bench/cli.py --hook), and without platformdirs,
    since its command line names the daemon, the token file and the state directory."""
    operator.create_wave("w", ["alice"])
    token = minted_token_file(operator, "w", "alice", tmp_path)
    argv = ["-m", "fleet", "watch", "--hook", "--participant", "alice", "--wave", "w", "--daemon", daemon.url,
            "--token-file", str(token), "--state-dir", str(tmp_path / "state"), "--wait", "0.1"]  # fmt: skip
    # as in a user's session: no FLEET_HOME, and the command names every path (hook_command)
    env = {k: v for k, v in os.environ.items() if k != "FLEET_HOME"}
    # the wave's creation alone wakes nobody: the arm waits 0.1 s and exits 0
    modules = imported(argv, env)
    assert {"fleet.watch", "fleet.delivery.engine", "fleet.client"} <= modules
    assert sorted(m for m in modules if m == "fleet.cli" or m.startswith("fleet.cli.")) == []
    assert heavy(modules) == []
    assert "platformdirs" not in modules  # with tempfile, shutil and random: 0.9 MiB of an arm
    at_exit = loaded_at_exit(argv[2:], env)
    assert {m: why for m, why in CHANNEL_UNUSED.items() if m in at_exit} == {}


@pytest.mark.parametrize("how", ["script", "module"])
def test_fleet_version_answers_before_the_cli_is_built(fleet_env: Paths, how: str) -> None:
    """``fleet --version`` prints the version without importing the CLI (typer, the command tree) or
    the client: it costs about a bare interpreter (bench/cli.py measures it beside ``fleet post``)."""
    import fleet

    script = str(Path(sys.executable).parent / "fleet")
    argv = [script, "--version"] if how == "script" else ["-m", "fleet", "--version"]
    modules = imported(argv, dict(os.environ))
    assert not {
        m for m in modules if m in ("typer", "fleet.cli", "fleet.client") or m.startswith("fleet.cli.")
    }
    got = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60)
    assert (got.returncode, got.stdout, got.stderr) == (0, f"fleet {fleet.__version__}\n", "")


LIGHT = ("msgspec", "pydantic", "libtmux", "fleet.client", "fleet.models", "fleet.layouts", "fleet.delivery",
         "socket", "json")  # fmt: skip
"""What a command's ``--help`` must not load: it needs typer and the command's own module, no records
(and no socket or json: ``remote --help`` loaded both, ~4 ms, for bodies that use them)."""


@pytest.mark.parametrize("command", [[], ["post"], ["read"], ["tree"], ["spawn"], ["status"], ["fork"],
                                     ["token"], ["daemon"], ["watch"], ["summary"], ["approve"],
                                     ["remote"], ["campaign"], ["memory"]])  # fmt: skip
def test_help_loads_no_records_client_or_layouts(fleet_env: Paths, command: list[str]) -> None:
    modules = imported(["-m", "fleet", *command, "--help"], dict(os.environ))
    assert sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in LIGHT)) == []
    if not command:  # the root's help imports no command module at all: SUMMARIES lists them
        assert sorted(m for m in modules if m.startswith("fleet.cli.")) == [
            "fleet.cli.common",
            "fleet.cli.render",
        ]


def test_the_root_help_lists_what_the_commands_say(fleet_env: Paths) -> None:
    """``fleet --help`` from fleet.cli.SUMMARIES is the help typer prints with every command built."""
    env = dict(os.environ, COLUMNS="100")
    lazy = subprocess.run([sys.executable, "-m", "fleet", "--help"], env=env, capture_output=True, text=True)
    built = subprocess.run(
        [sys.executable, "-c", "import sys; from fleet import cli; cli.build(['no-such-command']);"
         " sys.argv = ['fleet', '--help']; cli.main()"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert (lazy.returncode, lazy.stderr) == (0, "")
    assert lazy.stdout == built.stdout


def test_a_delivering_channel_loads_no_usage_or_pydantic_without_a_budget(
    daemon: Daemon, operator: Client, tmp_path: Path
) -> None:
    """Budgets' hold-back asks at each delivery which budgets apply; with none, it reads no usage:
    fleet.usage (pydantic, the price table) cost each channel ~100 ms and 15 MiB at its first one."""
    operator.create_wave("w", ["alice", "bob"])
    token = minted_token_file(operator, "w", "alice", tmp_path)
    code = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: sys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules)) + '\\n'))\n"
        "sys.argv = ['fleet', *sys.argv[1:]]\n"
        "runpy.run_module('fleet', run_name='__main__', alter_sys=True)\n"
    )
    argv = [sys.executable, "-c", code, *channel_argv("alice", "w", daemon.url, token)[3:]]
    errfile = tmp_path / "channel.stderr"
    # a session id: what Claude Code gives its channel, and what makes budgets watch the session
    with RawMcp(argv, env=env_with(CLAUDE_CODE_SESSION_ID=str(uuid.uuid4())), stderr=errfile) as ch:
        ch.handshake()
        root = operator.resolve("w/main")
        operator.post(root.id, "for alice", as_="bob")
        ch.wait_notes(lambda notes: any("for alice" in str(n) for n in notes), what="the delivery")
        assert ch.close() == 0
    line = [x for x in errfile.read_text().splitlines() if x.startswith("MODULES ")][-1]
    modules = set(line.split()[1:])
    assert "fleet.budgets" in modules  # the hold-back ran
    assert sorted(m for m in modules if m in ("fleet.usage", "pydantic", "fleet.records.usage")) == []
