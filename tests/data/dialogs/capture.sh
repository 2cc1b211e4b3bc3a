#!/bin/sh
# Records the screens under tests/data/dialogs/ (run once; they are kept as test data).
# Claude Code 2.1.332 in a tmux pane created at each size, no model needed (the dialogs come first):
#   dev-channels-W.txt  the development-channels dialog (--dangerously-load-development-channels)
#   trust-W.txt         the folder-trust prompt (a folder not marked trusted in ~/.claude.json)
#   ready-W.txt         the prompt after both were answered (no dialog)
#   onboarding-40.txt, api-key-40.txt, bypass-40.txt  other startup dialogs, 40x20: the first-run theme
#     picker (onboarding not done), the custom API key question (ANTHROPIC_API_KEY), the Bypass
#     Permissions warning (--dangerously-skip-permissions; IS_SANDBOX=1 lets root run it)
# Usage: CLAUDE=/path/to/claude sh tests/data/dialogs/capture.sh
set -eu
out=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
mkdir -p "$work/home" "$work/fresh" "$work/trusted" "$work/untrusted"
printf '{"theme": "dark"}' > "$work/fresh/.claude.json"
printf '{"hasCompletedOnboarding": true, "theme": "dark", "projects": {"%s": {"hasTrustDialogAccepted": true}}, "cachedGrowthBookFeatures": {"tengu_harbor": true}}' \
  "$work/trusted" > "$work/home/.claude.json"
printf 'set -g default-shell /bin/sh\nset -g history-limit 5000\n' > "$work/tmux.conf"
sock="fleet-capture-$$"
t() { HOME="$work/home" ANTHROPIC_BASE_URL=http://127.0.0.1:9 ANTHROPIC_AUTH_TOKEN=x DISABLE_AUTOUPDATER=1 \
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1 \
  TERM=xterm-256color tmux -L "$sock" -f "$work/tmux.conf" "$@"; }
cfg='--mcp-config={"mcpServers":{"fleet":{"type":"stdio","command":"cat"}}}'
for size in 18x24 40x20 80x24 220x60; do
  w=${size%x*}; h=${size#*x}
  t new-session -d -s "d$w" -x "$w" -y "$h" -c "$work/trusted" "$CLAUDE" "$cfg" \
    --dangerously-load-development-channels=server:fleet
  t new-session -d -s "t$w" -x "$w" -y "$h" -c "$work/untrusted" "$CLAUDE"
done
t new-session -d -s onboarding -x 40 -y 20 -c "$work/trusted" env HOME="$work/fresh" "$CLAUDE"
t new-session -d -s api-key -x 40 -y 20 -c "$work/trusted" env ANTHROPIC_AUTH_TOKEN= \
  ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789 "$CLAUDE"
t new-session -d -s bypass -x 40 -y 20 -c "$work/trusted" env IS_SANDBOX=1 "$CLAUDE" --dangerously-skip-permissions
sleep 8
for name in onboarding api-key bypass; do
  t capture-pane -p -J -t "$name" > "$out/$name-40.txt"
done
for size in 18x24 40x20 80x24 220x60; do
  w=${size%x*}
  t capture-pane -p -J -t "d$w" > "$out/dev-channels-$w.txt"
  t capture-pane -p -J -t "t$w" > "$out/trust-$w.txt"
  t send-keys -t "d$w" Enter
done
sleep 4
for size in 18x24 40x20 80x24 220x60; do
  w=${size%x*}
  t capture-pane -p -J -t "d$w" > "$out/ready-$w.txt"
done
t kill-server
sleep 2  # the sessions exit and stop writing under $work
rm -rf "$work"
