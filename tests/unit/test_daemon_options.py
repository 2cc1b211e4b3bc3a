"""The daemon's options, checked before anything listens: a bad listen address, a non-loopback one without
--allow-remote, TLS options that contradict."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleet import errors
from fleet.daemon import Daemon
from fleet.paths import Paths


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "10.1.2.3:8086", "[::]:0", "example.com:80"])
def test_non_loopback_listen_is_refused_without_allow_remote(fleet_env: Paths, listen: str) -> None:
    with pytest.raises(errors.UsageError, match="non-loopback"):
        Daemon(fleet_env, listen)
    assert not fleet_env.endpoint.exists()


@pytest.mark.parametrize("listen", ["nope", "127.0.0.1", "127.0.0.1:http", ":"])
def test_bad_listen_is_a_usage_error(fleet_env: Paths, listen: str) -> None:
    with pytest.raises(errors.UsageError, match="HOST:PORT"):
        Daemon(fleet_env, listen)


def serve(paths: Paths, **kw: object) -> Daemon:
    d = Daemon(paths, "127.0.0.1:0", **kw)  # type: ignore[arg-type]
    d.start()
    return d


def test_tls_options_that_contradict_are_refused(fleet_env: Paths, tmp_path: Path) -> None:
    with pytest.raises(errors.UsageError, match="both --tls-cert and --tls-key"):
        Daemon(fleet_env, "127.0.0.1:0", tls_cert=tmp_path / "x.crt")
    with pytest.raises(errors.UsageError, match="contradict"):
        Daemon(fleet_env, "127.0.0.1:0", tls=True, insecure_plain_http=True)
    (tmp_path / "bad.crt").write_text("not a certificate")
    (tmp_path / "bad.key").write_text("nor a key")
    with pytest.raises(errors.UsageError, match="not a PEM certificate"):
        serve(fleet_env, tls_cert=tmp_path / "bad.crt", tls_key=tmp_path / "bad.key")
    assert not fleet_env.endpoint.exists() and not os.path.exists(fleet_env.tls_key)


def test_the_idle_timeout_is_a_positive_number(fleet_env: Paths) -> None:
    from fleet import errors

    for bad in (0, -1, float("nan")):
        with pytest.raises(errors.UsageError, match="idle timeout"):
            Daemon(fleet_env, idle_timeout=bad)
