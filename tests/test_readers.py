"""Read connections come from a bounded pool, released with their client connection: a thousand
fresh client connections neither leak file descriptors nor fail under a small ``ulimit -n``."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

from conftest import retry_until

from fleet import errors
from fleet.client import Client, read_endpoint
from fleet.models import Endpoint
from fleet.paths import Paths


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_thousand_fresh_connections_under_ulimit_256_get_no_500(fleet_env: Paths) -> None:
    def small_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    fleet_env.logs.mkdir(parents=True, exist_ok=True)
    log = open(fleet_env.logs / "daemon.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet", "daemon", "run"],
        stdout=log,
        stderr=log,
        preexec_fn=small_limit,
    )
    try:

        def answering() -> Endpoint | None:
            e = read_endpoint(fleet_env)
            return e if e is not None and e.pid == proc.pid else None

        endpoint = retry_until(answering, 20, 0.05, "the daemon")
        assert endpoint is not None
        token = fleet_env.operator_token.read_text().strip()
        with Client(endpoint.url, token) as op:
            op.create_wave("w", ["alice"])
            main = op.resolve("w/main").id
            op.post(main, "alice: hello")
            count = len(op.read(main).blips)
        start = fds(proc.pid)
        failures: list[str] = []
        for n in range(1000):
            with Client(endpoint.url, token, retries=0) as fresh:  # one new TCP connection each
                try:
                    assert len(fresh.read(main).blips) == count
                except errors.FleetError as exc:
                    failures.append(f"{n}: {exc}")
        assert not failures, failures[:3]
        # every connection's thread is gone once its socket closed: the fds come back
        retry_until(lambda: fds(proc.pid) <= start + 10, 10, 0.05, f"fds back near {start}")
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
