"""fleet.procs.run_fail_open: the one runner of external commands fleet may do without (the attendant,
the summarizer): every way the command can fail is a result, never an exception or a hang."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import retry_until

from fleet.procs import pid_alive, run_fail_open


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_the_payload_goes_to_stdin_and_stdout_comes_back() -> None:
    ran = run_fail_open(
        py("import sys; sys.stdout.write(sys.stdin.read()[::-1])"), b"abc", timeout=30, out_max=10
    )
    assert (ran.kind, ran.output, ran.detail) == ("ok", b"cba", "")


def test_a_command_that_does_not_read_its_stdin_is_no_error() -> None:
    ran = run_fail_open(py("print('hi')"), b"x" * (1 << 20), timeout=30, out_max=10)
    assert (ran.kind, ran.output) == ("ok", b"hi\n")


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time; "
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
        f"open({str(pidfile)!r}, 'w').write(str(g.pid)); time.sleep(300)"
    )
    seen: list[subprocess.Popen[bytes] | None] = []
    ran = run_fail_open(py(code), b"", timeout=3, out_max=10, what="verdict", running=seen.append)
    assert (ran.kind, ran.output, ran.detail) == ("timeout", None, "no verdict within 3s; killed")
    child = seen[0]
    assert child is not None and child.returncode is not None and seen[1:] == [None]
    grandchild = int(pidfile.read_text())
    retry_until(lambda: not pid_alive(grandchild), what="the grandchild to be killed with its group")


def test_output_over_the_limit_is_too_large_and_at_the_limit_is_not() -> None:
    over = run_fail_open(py("print('x' * (1 << 22))"), b"", timeout=30, out_max=100)
    assert (over.kind, over.output, over.detail) == ("too-large", None, "more than 100 bytes of output")
    at = run_fail_open(py("import sys; sys.stdout.write('x' * 100)"), b"", timeout=30, out_max=100)
    assert (at.kind, at.output) == ("ok", b"x" * 100)


def test_a_nonzero_exit_carries_the_tail_of_stderr() -> None:
    code = "import sys; sys.stderr.write('a' * 1000 + ' went wrong\\n'); sys.exit(3)"
    ran = run_fail_open(py(code), b"", timeout=30, out_max=10)
    assert ran.kind == "exit" and ran.output is None
    assert ran.detail == "exit status 3: " + ("a" * 1000 + " went wrong")[-300:]
    quiet = run_fail_open(py("raise SystemExit(4)"), b"", timeout=30, out_max=10)
    assert (quiet.kind, quiet.detail) == ("exit", "exit status 4")


def test_a_missing_binary_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-attendant")
    ran = run_fail_open([missing, "--flag"], b"{}", timeout=30, out_max=10)
    assert (ran.kind, ran.output) == ("error", None)
    assert ran.detail == f"cannot run {missing!r}: No such file or directory"
