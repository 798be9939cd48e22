#!/usr/bin/env bash
# Builds (or tops up) the virtualenv for a Makefile target, from a fresh clone:
#   scripts/ensure_venv.sh server   what running Setu needs: -e '.[server]' (`make run`)
#   scripts/ensure_venv.sh dev      the test toolchain on top: -e '.[dev]' (`make test`, lint, ...)
# It needs only python3. The installer is uv when it can be had (it is put
# into the virtualenv with pip, from PyPI like every other package); it
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

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
py="$venv/bin/python"

with_uv() {
  if [ ! -x "$venv/bin/uv" ]; then
    "$py" -m pip install --quiet 'uv>=0.5' || return 1
  fi
  # uv reads no pip.conf; a mirror that pip's environment names stands for
  # PyPI here too (a pip.conf's own settings apply when pip takes over).
  if [ -n "${PIP_INDEX_URL:-}" ] && [ -z "${UV_DEFAULT_INDEX:-}${UV_INDEX_URL:-}" ]; then
    export UV_DEFAULT_INDEX="$PIP_INDEX_URL"
  fi
  "$venv/bin/uv" pip install --quiet --python "$py" -e "$requirement"
}

with_pip() {
  "$py" -m pip install --quiet --upgrade pip
  "$py" -m pip install --quiet -e "$requirement"
}

if [ "$installer" = uv ]; then
  if with_uv; then
    exit 0
  fi
  echo "ensure_venv: uv could not install $requirement; installing it with pip" >&2
fi
with_pip
