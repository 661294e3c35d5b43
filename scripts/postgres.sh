#!/usr/bin/env bash
# Start (or stop) a throwaway PostgreSQL server on 127.0.0.1 for the test suite.
# Prints the DATABASE_URL to use on stdout. Idempotent.
set -euo pipefail
# On a memory filesystem when the machine has one: the suite makes and drops a database per test,
# and on ext4 each CREATE DATABASE spent ~0.13 s of CPU (0.23 s from the migrated template) in the
# kernel allocating inodes for its ~400 files among those just deleted; on tmpfs ~0.01 s.
if [ -z "${NANOCLAW_PG_ROOT:-}" ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ -w /dev/shm ]; then
  PGROOT=/dev/shm/nanoclaw-pg
else
  PGROOT=${NANOCLAW_PG_ROOT:-/tmp/nanoclaw-pg}
fi
PGPORT=${NANOCLAW_PG_PORT:-54329}
cmd=${1:-start}

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "installing postgresql from Debian's packages..." >&2
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
BIN=$(dirname "$(ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")
# A throwaway server: nothing in it must outlive a crash, so nothing waits for the disk (each test
# makes, migrates and drops a database of its own, 343 times in the suite), and its write-ahead log
# stays small (it may be in memory).
DURABILITY="-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_wal_size=128MB -c min_wal_size=32MB"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# The server this script started before it moved to memory holds the port: stopped with it.
OLDROOT=/tmp/nanoclaw-pg
stop_old() {
  if [ "$PGROOT" != "$OLDROOT" ] && [ -f "$OLDROOT/data/PG_VERSION" ]; then
    as_pg "$BIN/pg_ctl" -D "$OLDROOT/data" -m fast stop >/dev/null 2>&1 || true
  fi
}

case "$cmd" in
  start)
    stop_old
    mkdir -p "$PGROOT"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$PGROOT"
    if [ ! -f "$PGROOT/data/PG_VERSION" ]; then
      as_pg "$BIN/initdb" -D "$PGROOT/data" -U postgres --auth=trust -E UTF8 >/dev/null
    fi
    if ! as_pg "$BIN/pg_ctl" -D "$PGROOT/data" status >/dev/null 2>&1; then
      as_pg "$BIN/pg_ctl" -D "$PGROOT/data" -l "$PGROOT/server.log" -w \
        -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $PGROOT $DURABILITY" start >/dev/null
    fi
    echo "postgresql://postgres@127.0.0.1:$PGPORT/postgres"
    ;;
  stop)
    as_pg "$BIN/pg_ctl" -D "$PGROOT/data" -m fast stop >/dev/null 2>&1 || true
    stop_old
    ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
