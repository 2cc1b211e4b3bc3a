#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian-like machine, then run it all:
# lint, types, and every test (real daemon, real tmux, real Claude Code binary, real MCP SDK).
# Idempotent: installs only what is missing. Used by `.ci/run` and by the README.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CLAUDE_VERSION=2.1.332

say() { printf '\n== %s\n' "$*"; }
need_apt=()
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)  # the console's browser tests (tests/cdp.py)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
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

say "lint and types"
.venv/bin/ruff check fleet tests bench
.venv/bin/ruff format --check fleet tests bench
.venv/bin/mypy  # fleet/, tests/ and bench/ (pyproject.toml)

say "tests"
set +e
.venv/bin/python -m pytest -q "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$rc"
