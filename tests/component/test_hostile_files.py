"""Files fleet reads that a hand (or a damaged disk) can leave as anything: a token file, a price
table. Bytes that are not UTF-8 are a clear error naming the file and the byte,
with the command's documented exit code — never a UnicodeDecodeError's traceback
(fleet.paths.read_utf8)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from test_cli import base_env, fleet

from fleet import errors
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths

GARBAGE = b"\xff\xfe\x00tok"


def refused(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "UnicodeDecodeError" not in done.stderr, done.stderr
    for word in (*words, "not UTF-8 text (byte 0xff at offset 0)"):
        assert word in done.stderr, (word, done.stderr)


def test_an_operator_token_file_that_is_not_text_is_unauthorized_naming_it(
    daemon: Daemon, fleet_env: Paths
) -> None:
    fleet_env.operator_token.write_bytes(GARBAGE)
    env = base_env(FLEET_DAEMON=daemon.url)
    env.pop("FLEET_TOKEN", None)
    done = fleet("ls", env=env)
    refused(done, errors.Unauthorized.exit_code, str(fleet_env.operator_token))


def test_a_fleet_token_file_that_is_not_text_is_a_usage_error_naming_it(
    daemon: Daemon, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.token"
    bad.write_bytes(GARBAGE)
    env = base_env(FLEET_DAEMON=daemon.url)
    env.pop("FLEET_TOKEN", None)  # (it comes before the file)
    env["FLEET_TOKEN_FILE"] = str(bad)
    done = fleet("ls", env=env)
    refused(done, errors.UsageError.exit_code, str(bad))


def test_a_price_table_that_is_not_text_is_a_usage_error_naming_it(
    daemon: Daemon, operator: Client, fleet_env: Paths
) -> None:
    from fleet.usage import user_prices

    operator.create_wave("w", ["alice"])
    own = user_prices(fleet_env)
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_bytes(GARBAGE)
    done = fleet("usage", "w", env=base_env(FLEET_DAEMON=daemon.url, FLEET_TOKEN=daemon.operator_token))
    refused(done, errors.UsageError.exit_code, str(own))
