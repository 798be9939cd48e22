#!/usr/bin/env bash
# What the monitor's browser test needs (tests/e2e/test_monitor_browser.py):
# Debian's Chromium, driven by Playwright with the system browser as its
# executable (no browser download). Installs it when missing; needs root or
# sudo the first time. `make test` runs this before the suite.
set -euo pipefail

if [ -n "${SETU_TEST_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure_browser: no chromium and no apt-get; install Chromium and put it on PATH" \
       "(or point SETU_TEST_CHROMIUM at it)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "ensure_browser: installing chromium (Debian package)" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null
