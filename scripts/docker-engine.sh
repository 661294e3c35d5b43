#!/usr/bin/env bash
# A Docker engine of NanoClaw's own, apart from any other engine on the machine
# (own data root, exec root, pidfile and socket), for hosts without systemd and
# for tests/CI. Leaves the host network alone (--iptables=false --bridge=none):
# agent containers run with --network none anyway.
#   docker-engine.sh start    start it (installs docker.io if dockerd is missing); idempotent
#   docker-engine.sh stop     stop it by its pid
#   docker-engine.sh status   exit 0 when it answers
# Prints the DOCKER_HOST to use on stdout (start, status).
set -euo pipefail
RUN=${NANOCLAW_DOCKER_RUN:-/run/nanoclaw-docker}
DATA=${NANOCLAW_DOCKER_DATA:-/var/lib/nanoclaw-docker}
SOCK="$RUN/docker.sock"
PIDFILE="$RUN/dockerd.pid"
LOG="$RUN/dockerd.log"
export DOCKER_HOST="unix://$SOCK"
HERE=$(cd "$(dirname "$0")" && pwd)

answers() { docker info >/dev/null 2>&1; }
alive() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

case "${1:-}" in
  start)
    "$HERE/install-sandboxes.sh" docker
    if answers; then echo "$DOCKER_HOST"; exit 0; fi
    mkdir -p "$RUN/exec" "$DATA"
    if ! alive; then
      rm -f "$PIDFILE" "$SOCK"
      # setsid: the engine must outlive the shell (and the test run) that started it.
      setsid dockerd --data-root "$DATA" --exec-root "$RUN/exec" --pidfile "$PIDFILE" \
        -H "$DOCKER_HOST" --iptables=false --bridge=none >>"$LOG" 2>&1 </dev/null &
    fi
    for _ in $(seq 1 120); do
      if answers; then echo "$DOCKER_HOST"; exit 0; fi
      sleep 0.5
    done
    echo "dockerd did not answer within 60 s; see $LOG" >&2
    tail -n 20 "$LOG" >&2 || true
    exit 1
    ;;
  stop)
    if alive; then
      pid=$(cat "$PIDFILE")
      kill "$pid"
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -0 "$pid" 2>/dev/null && { echo "dockerd ($pid) did not stop within 30 s" >&2; exit 1; }
    fi
    exit 0
    ;;
  status)
    if answers; then echo "$DOCKER_HOST"; exit 0; fi
    echo "no engine answers at $DOCKER_HOST" >&2; exit 1
    ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
