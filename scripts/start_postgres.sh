#!/usr/bin/env bash
# A throwaway PostgreSQL server for Optuna studies (fit-silo --study-storage): data in DIR, listening on 127.0.0.1
# only, on a free port, with one password-protected database. Prints the storage URL as its last line:
#   postgresql+psycopg2://optuna:PASSWORD@127.0.0.1:PORT/optuna
# Installs Debian's postgresql first if it is missing (needs root). As root the server runs as the `postgres` user,
# so DIR must be reachable by that user (e.g. under /tmp).
#
# Usage: scripts/start_postgres.sh DIR         start (or, if already running in DIR, print its URL again)
#        scripts/start_postgres.sh --stop DIR  stop the server running in DIR
set -euo pipefail

stop=0
if [ "${1:-}" = "--stop" ]; then stop=1; shift; fi
dir=${1:?usage: start_postgres.sh [--stop] DIR}

as_owner() {  # run a PostgreSQL program as the server's (non-root) owner
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$bin" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "start_postgres.sh: PostgreSQL is not installed and installing it needs root (apt-get install postgresql)" >&2
    exit 3
  fi
  echo "start_postgres.sh: installing postgresql (apt-get)" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi

data=$dir/data
if [ "$stop" = 1 ]; then
  if [ -f "$data/postmaster.pid" ]; then as_owner "$bin/pg_ctl" -D "$data" -m fast -w stop >&2; fi
  exit 0
fi

mkdir -p "$dir"
if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
chmod 700 "$dir"
if ! as_owner test -w "$dir"; then
  echo "start_postgres.sh: $dir is not writable by the postgres user (use a folder under /tmp)" >&2
  exit 3
fi

if [ -f "$dir/url" ] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  cat "$dir/url"
  exit 0
fi

if [ ! -f "$data/PG_VERSION" ]; then
  password=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  # Local socket: only the owner (the socket lives in the 0700 DIR). TCP: password (SCRAM) only.
  as_owner "$bin/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=scram-sha-256 >"$dir/initdb.log"
  echo "$password" >"$dir/password"
  chmod 600 "$dir/password"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$dir/password"; fi
fi
password=$(cat "$dir/password")

free_port() {
  "${PYTHON:-python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

for attempt in 1 2 3 4 5; do  # another process may take the port between choosing and binding it
  port=$(free_port)
  if as_owner "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir" start >&2; then
    break
  fi
  [ "$attempt" = 5 ] && { echo "start_postgres.sh: the server did not start; see $dir/server.log" >&2; exit 1; }
done

psql_super() { as_owner "$bin/psql" -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
if [ "$(psql_super -c "SELECT 1 FROM pg_roles WHERE rolname = 'optuna'")" != 1 ]; then
  psql_super -c "CREATE ROLE optuna LOGIN PASSWORD '$password'" >&2
  psql_super -c "CREATE DATABASE optuna OWNER optuna" >&2
fi

url="postgresql+psycopg2://optuna:$password@127.0.0.1:$port/optuna"
echo "$url" >"$dir/url"
chmod 600 "$dir/url"
echo "$url"
