#!/usr/bin/env bash
# What the e2e suite needs from Debian, installed when missing (no browser or
# server download of a test tool's own):
# - chromium: the monitor's browser test, Playwright with the system browser
#   (tests/e2e/test_monitor_browser.py);
# - nginx and pgbouncer: the production topologies, a gRPC proxy in front of
#   setu-server and a transaction-mode pooler in front of PostgreSQL
#   (tests/e2e/test_topology_*.py). Tests start their own instances on free
#   ports; the packages' system services are stopped and left disabled.
# - iproute2 (`ip`): tests/e2e/test_own_database.py gives the machine an
#   address of its own for a moment (as root), to show that Setu's database
#   is refused at every address of its machine.
# - mariadb-server and mariadb-client: the mysql provider's tests and
#   scripts/bench_copy.py start a MariaDB of their own (tests/mariadb.py:
#   mariadb-install-db and mariadbd in a temporary folder, on a free port);
#   mysqldump and the mariadb client are the bench's native bulk path.
#   The package's own service is not started (policy-rc.d below).
# Needs root or sudo the first time. `make test` runs this before the suite.
set -euo pipefail

missing=()
if [ -z "${SETU_TEST_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  missing+=(chromium)
fi
for tool in nginx pgbouncer; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ]; then
    missing+=("$tool")
  fi
done
if [ ! -x /usr/sbin/mariadbd ] && ! command -v mariadbd >/dev/null 2>&1; then
  missing+=(mariadb-server)
fi
if ! command -v mariadb >/dev/null 2>&1 || ! command -v mysqldump >/dev/null 2>&1; then
  missing+=(mariadb-client)
fi
if ! command -v ip >/dev/null 2>&1 && [ ! -x /usr/sbin/ip ] && [ ! -x /sbin/ip ] && [ ! -x /bin/ip ]; then
  missing+=(iproute2)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure_test_tools: missing ${missing[*]} and no apt-get; install them and put them on PATH" \
       "(or point SETU_TEST_CHROMIUM at a browser)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "ensure_test_tools: installing ${missing[*]} (Debian packages)" >&2
$sudo apt-get update -qq
# policy-rc.d answering 101 keeps the packages' own services from starting
# (nginx would take port 80, mariadb 3306; the tests run instances of their own).
policy=/usr/sbin/policy-rc.d
created_policy=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod +x "$policy"
  created_policy=1
fi
trap 'if [ -n "$created_policy" ]; then $sudo rm -f "$policy"; fi' EXIT
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
for package in "${missing[@]}"; do
  tool="$package"
  [ "$package" = iproute2 ] && tool=ip
  [ "$package" = mariadb-server ] && tool=mariadbd
  [ "$package" = mariadb-client ] && tool=mariadb
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || [ -x "/sbin/$tool" ] || {
    echo "ensure_test_tools: $tool did not install" >&2
    exit 1
  }
done
