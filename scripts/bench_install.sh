#!/usr/bin/env bash
# Install figures from a fresh clone, nothing cached; prints figures, asserts none.
#   scripts/bench_install.sh run     the first `make run`, from the command to the banner
#   scripts/bench_install.sh agent   an agent-only install (the README's way), its time and size
#   scripts/bench_install.sh         both
# SETU_INSTALLER=pip times `make run` with pip alone (default: uv, as make does).
# Each figure comes from a clone of this repository's committed HEAD in a
# temporary folder, with empty caches (PIP_NO_CACHE_DIR=1, an empty
# UV_CACHE_DIR); the folder is deleted after. `setu dev` listens on free
# ports and is stopped with Ctrl-C's signal once its banner is out. The load
# average is printed with each figure: on a shared machine it moves them.
set -euo pipefail

what="${1:-all}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/setu-bench-install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export PIP_NO_CACHE_DIR=1 UV_CACHE_DIR="$work/uv-cache"
BANNER="Setu dev server on"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

bench_run() {
  local clone="$work/run" log="$work/run.log" start pid waited=0 installed=""
  git clone --quiet "$repo" "$clone"
  echo "== make run (installer ${SETU_INSTALLER:-uv}), load before: $(load)"
  start="$(now)"
  (cd "$clone" && SETU_LISTEN=127.0.0.1:0 SETU_HTTP_LISTEN=127.0.0.1:0 \
    exec setsid make run >"$log" 2>&1) &
  pid=$!
  # A benchmark may poll: it prints a figure, it asserts nothing.
  until grep -q "$BANNER" "$log" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "make run ended before its banner:" >&2
      tail -20 "$log" >&2
      return 1
    fi
    if [ -z "$installed" ] && [ -e "$clone/.venv/.installed-run" ]; then
      installed="$(since "$start")"
    fi
    sleep 0.2
    waited=$((waited + 1))
    if [ "$waited" -gt 6000 ]; then
      echo "no banner in 20 minutes" >&2
      kill -KILL -- "-$pid" 2>/dev/null || true
      return 1
    fi
  done
  echo "make run to the banner: $(since "$start") s, of which the install ${installed:-?} s" \
    "(load after: $(load))"
  kill -INT -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "virtualenv: $(du -sh "$clone/.venv" | cut -f1)"
}

bench_agent() {
  local clone="$work/agent" venv="$work/agent-venv" start wheel
  git clone --quiet "$repo" "$clone"
  # The wheel `make dist` builds, without building the clone's virtualenv.
  python3 -m venv "$work/build-venv"
  "$work/build-venv/bin/pip" wheel --quiet --no-deps --wheel-dir "$work/dist" "$clone"
  wheel="$(ls "$work"/dist/setu-*.whl)"
  echo "== agent-only install: python3 -m venv && pip install $(basename "$wheel")," \
    "load before: $(load)"
  start="$(now)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "$wheel"
  echo "agent install: $(since "$start") s  (load after: $(load))"
  echo "virtualenv: $(du -sh "$venv" | cut -f1)"
  "$venv/bin/setu-agent" --help >/dev/null
  "$venv/bin/setu-worker" --help >/dev/null
  # What starting the agent imports: no server distribution may be there.
  "$venv/bin/python" - <<'EOF'
import importlib.util
import sys

import setu_agent.cloud.main  # noqa: F401
import setu_agent.main  # noqa: F401
import setu_cli.main  # noqa: F401

server = ["pgserver", "aiohttp", "jinja2", "prometheus_client", "croniter", "pyarrow", "aiobotocore"]
installed = [name for name in server if importlib.util.find_spec(name) is not None]
loaded = sorted(name for name in server if name in sys.modules)
print(f"server-only distributions installed: {installed or 'none'}; imported: {loaded or 'none'}")
EOF
  start="$(now)"
  "$venv/bin/pip" install --quiet "$wheel[s3]"
  echo "adding the s3 extra: $(since "$start") s, virtualenv then $(du -sh "$venv" | cut -f1)"
}

case "$what" in
  run) bench_run ;;
  agent) bench_agent ;;
  all) bench_run && bench_agent ;;
  *) echo "usage: scripts/bench_install.sh [run|agent]" >&2; exit 2 ;;
esac
