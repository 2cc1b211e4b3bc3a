#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian-like machine, then run it all:
# lint, types, and every test (real daemon, real tmux, real Claude Code and Codex binaries, real MCP SDK).
# Idempotent: installs only what is missing. Used by `.ci/run` and by the README.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CLAUDE_VERSION=2.1.332
CODEX_VERSION=0.169.0

say() { printf '\n== %s\n' "$*"; }
need_apt=()
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)  # the console's browser tests (tests/cdp.py)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
# the PostgreSQL store's tests (tests/pg.py runs initdb and postgres itself, as nobody under root):
# Debian puts them under /usr/lib/postgresql/<version>/bin, off PATH
command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need_apt+=(postgresql)
if [ ${#need_apt[@]} -gt 0 ]; then
  say "installing from Debian: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

say "python environment (.venv)"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'

say "Claude Code ${CLAUDE_VERSION} (npm, local prefix .ci/node)"
if [ "$(.ci/node/node_modules/.bin/claude --version 2>/dev/null | cut -d' ' -f1)" != "$CLAUDE_VERSION" ]; then
  npm install --silent --no-audit --no-fund --prefix .ci/node "@anthropic-ai/claude-code@${CLAUDE_VERSION}"
fi
export FLEET_CLAUDE_BIN="$ROOT/.ci/node/node_modules/.bin/claude"
"$FLEET_CLAUDE_BIN" --version

say "Codex CLI ${CODEX_VERSION} (npm, local prefix .ci/node; tests/real/test_codex_real.py)"
if [ "$(.ci/node/node_modules/.bin/codex --version 2>/dev/null)" != "codex-cli $CODEX_VERSION" ]; then
  npm install --silent --no-audit --no-fund --prefix .ci/node "@openai/codex@${CODEX_VERSION}"
fi
export FLEET_CODEX_BIN="$ROOT/.ci/node/node_modules/.bin/codex"
"$FLEET_CODEX_BIN" --version

say "lint"
.venv/bin/ruff check fleet tests bench
.venv/bin/ruff format --check fleet tests bench

# pytest's exit code, with "collected no tests" (5) a failure here
run_pytest() {
  set +e
  .venv/bin/python -m pytest "$@"
  local rc=$?
  set -e
  if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure here" >&2
    rc=1
  fi
  return "$rc"
}

if [ $# -gt 0 ]; then  # scripts/test.sh tests/unit, scripts/test.sh -k cap ...: pytest as asked
  say "tests: pytest $*"
  run_pytest -q "$@" && exit 0 || exit $?
fi

# mypy (fleet/, tests/ and bench/: pyproject.toml) checks from cold on a clean clone (11 s of one
# core); it runs beside the unit tier, which keeps one core busy, and says its verdict after it.
TYPES_LOG=$(mktemp)
trap 'rm -f "$TYPES_LOG"' EXIT
.venv/bin/mypy >"$TYPES_LOG" 2>&1 &
TYPES_PID=$!

# The unit tier alone first (no processes, seconds); then the other three on $WORKERS workers: they
# are mostly CPU-bound on 2 cores, but ~15 % of the time both cores wait on processes, which a 4th
# worker fills (the numbers: docs/performance.md, "The test suite"). The real tier first and one test at a time to
# whichever worker is free (--maxschedchunk 1), so the longest tests start first and the short
# component tests fill the end (worksteal left a 90 s real test for last: +1 minute).
WORKERS=${FLEET_TEST_WORKERS:-4}  # (3: slow tiers 459 s, 4: 410 s on a quiet machine; docs/performance.md)
say "tests: unit"
rc=0
run_pytest -q tests/unit || rc=$?
say "types (mypy, run beside the unit tier)"
types_rc=0
wait "$TYPES_PID" || types_rc=$?
cat "$TYPES_LOG"
if [ "$types_rc" -ne 0 ]; then exit "$types_rc"; fi
say "tests: real, system, component ($WORKERS workers)"
run_pytest -q -n "$WORKERS" --dist load --maxschedchunk 1 tests/real tests/system tests/component || rc=$?
exit "$rc"
