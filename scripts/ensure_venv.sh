#!/usr/bin/env bash
# Builds (or tops up) the virtualenv for a Makefile target, from a fresh clone:
#   scripts/ensure_venv.sh server   what running Setu needs: -e '.[server]' (`make run`)
#   scripts/ensure_venv.sh dev      the test toolchain on top: -e '.[dev]' (`make test`, lint, ...)
# It needs only python3. The installer is uv when it can be had (fetched from
# PyPI like every other package, by the pip wheel that ships with Python); it
# installs several times faster than pip. Whatever uv cannot do, pip does:
# if uv does not install or its install fails, pip installs the same
# requirement. SETU_INSTALLER=pip skips uv.
# Environment: PYTHON (python3), VENV (.venv), SETU_INSTALLER (uv or pip).
set -euo pipefail

extra="${1:?usage: ensure_venv.sh server|dev}"
case "$extra" in
  server | dev) ;;
  *) echo "ensure_venv: unknown extra $extra (server or dev)" >&2; exit 2 ;;
esac
python="${PYTHON:-python3}"
venv="${VENV:-.venv}"
installer="${SETU_INSTALLER:-uv}"
requirement=".[$extra]"
py="$venv/bin/python"

# The pip wheel that ships with Python (ensurepip's), run straight from the
# file: it fetches uv without first installing pip into the virtualenv,
# which under load took longer than the rest of the install.
bundled_pip() {
  "$python" - <<'EOF'
import glob
import os

import ensurepip

found = sorted(glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", "pip-*.whl")))
print(found[-1] if found else "")
EOF
}

ensure_pip() {
  "$py" -m pip --version >/dev/null 2>&1 || "$py" -m ensurepip --upgrade >/dev/null
}

with_uv() {
  if [ ! -x "$venv/bin/uv" ]; then
    local wheel
    wheel="$(bundled_pip 2>/dev/null || true)"
    if [ -n "$wheel" ] && ! "$py" -m pip --version >/dev/null 2>&1; then
      "$py" "$wheel/pip" install --quiet --no-compile 'uv>=0.5' || return 1
    else
      ensure_pip && "$py" -m pip install --quiet 'uv>=0.5' || return 1
    fi
  fi
  # uv reads no pip.conf; a mirror that pip's environment names stands for
  # PyPI here too (a pip.conf's own settings apply when pip takes over).
  if [ -n "${PIP_INDEX_URL:-}" ] && [ -z "${UV_DEFAULT_INDEX:-}${UV_INDEX_URL:-}" ]; then
    export UV_DEFAULT_INDEX="$PIP_INDEX_URL"
  fi
  # pip too, for `make dist` and whoever runs .venv/bin/python -m pip.
  "$venv/bin/uv" pip install --quiet --python "$py" -e "$requirement" pip
}

with_pip() {
  ensure_pip
  "$py" -m pip install --quiet --upgrade pip
  "$py" -m pip install --quiet -e "$requirement"
}

if [ ! -x "$py" ]; then
  if [ "$installer" = uv ]; then
    "$python" -m venv --without-pip "$venv"
  else
    "$python" -m venv "$venv"
  fi
fi

if [ "$installer" = uv ]; then
  if with_uv; then
    exit 0
  fi
  echo "ensure_venv: uv could not install $requirement; installing it with pip" >&2
fi
with_pip
