#!/usr/bin/env bash
# A second Docker engine that stands in for another machine, for tests and benchmarks of sandboxes
# that run elsewhere (issue 33): its own network namespace, reached only over a veth pair with
# test addresses (198.18.0.0/15, set aside for benchmarks), TCP with TLS and client certificates as
# `dockerd --tlsverify` wants them, its own data root, and a mount namespace in which this
# machine's project, data and temporary folders are empty. Needs root, iproute2, openssl, dockerd.
#   remote-engine.sh start    start it (idempotent) and print the variables a client needs
#   remote-engine.sh stop     stop it and remove the namespace
#   remote-engine.sh load IMAGE   copy an image from the local engine (when it differs)
set -euo pipefail
NS=nanoclaw-h2
HOST_IF=nch2-host
ENGINE_IF=nch2-eng
HOST_ADDR=198.18.0.1
ENGINE_ADDR=198.18.0.2
PORT=2376
STATE=${NANOCLAW_REMOTE_ENGINE_STATE:-/var/lib/nanoclaw-h2}
RUN=/run/nanoclaw-h2
TLS="$STATE/tls"
PIDFILE="$RUN/dockerd.pid"
LOG="$RUN/dockerd.log"

client_env() {
  echo "DOCKER_HOST=tcp://$ENGINE_ADDR:$PORT"
  echo "DOCKER_TLS_VERIFY=1"
  echo "DOCKER_CERT_PATH=$TLS/client"
  echo "NANOCLAW_TEST_DOOR_ADDRESS=$HOST_ADDR"
}
remote() { env DOCKER_HOST="tcp://$ENGINE_ADDR:$PORT" DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH="$TLS/client" docker "$@"; }
answers() { remote info >/dev/null 2>&1; }
alive() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

certs() {
  [ -f "$TLS/client/key.pem" ] && return 0
  mkdir -p "$TLS/client" && chmod 700 "$TLS"
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -keyout "$TLS/ca-key.pem" -out "$TLS/ca.pem" -days 365 \
    -subj /CN=nanoclaw-test-engine-ca 2>/dev/null
  openssl req "${ec[@]}" -keyout "$TLS/server-key.pem" -out "$TLS/server.csr" -subj /CN=engine 2>/dev/null
  openssl x509 -req -in "$TLS/server.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca-key.pem" -CAcreateserial \
    -out "$TLS/server-cert.pem" -days 365 \
    -extfile <(printf "subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n" "$ENGINE_ADDR") 2>/dev/null
  openssl req "${ec[@]}" -keyout "$TLS/client/key.pem" -out "$TLS/client.csr" -subj /CN=client 2>/dev/null
  openssl x509 -req -in "$TLS/client.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca-key.pem" -CAcreateserial \
    -out "$TLS/client/cert.pem" -days 365 -extfile <(printf "extendedKeyUsage=clientAuth\n") 2>/dev/null
  cp "$TLS/ca.pem" "$TLS/client/ca.pem"
}

network() {
  [ -e "/var/run/netns/$NS" ] || ip netns add "$NS"
  if ! ip link show "$HOST_IF" >/dev/null 2>&1; then
    ip link add "$HOST_IF" type veth peer name "$ENGINE_IF"
    ip link set "$ENGINE_IF" netns "$NS"
    ip addr add "$HOST_ADDR/30" dev "$HOST_IF"
    ip link set "$HOST_IF" up
    ip -n "$NS" addr add "$ENGINE_ADDR/30" dev "$ENGINE_IF"
    ip -n "$NS" link set "$ENGINE_IF" up
    ip -n "$NS" link set lo up
  fi
}

case "${1:-}" in
  start)
    command -v dockerd >/dev/null || { echo "dockerd is missing: scripts/install-sandboxes.sh docker" >&2; exit 1; }
    if answers; then client_env; exit 0; fi
    certs
    network
    mkdir -p "$RUN/exec" "$STATE/data"
    if ! alive; then
      rm -f "$PIDFILE"
      # nsenter --net, not `ip netns exec` (which remounts /sys, and the engine then finds no devices
      # cgroup). In its own mount namespace the project, data and temporary folders are empty, so a
      # sandbox there can see nothing of this machine, as on another one.
      setsid nsenter --net="/var/run/netns/$NS" unshare -m --propagation private sh -c "
        for d in /tmp /work /root /home /run/nanoclaw-docker /var/lib/nanoclaw-docker; do
          [ -d \$d ] && mount -t tmpfs tmpfs \$d; done
        mount -t tmpfs tmpfs '$RUN/exec'
        exec dockerd --iptables=false --bridge=none --data-root '$STATE/data' --exec-root '$RUN/exec' \
          --pidfile '$PIDFILE' -H tcp://$ENGINE_ADDR:$PORT --tlsverify --tlscacert '$TLS/ca.pem' \
          --tlscert '$TLS/server-cert.pem' --tlskey '$TLS/server-key.pem'" >>"$LOG" 2>&1 </dev/null &
    fi
    for _ in $(seq 1 120); do
      if answers; then client_env; exit 0; fi
      sleep 0.5
    done
    echo "the second engine did not answer within 60 s; see $LOG" >&2
    tail -n 20 "$LOG" >&2 || true
    exit 1
    ;;
  load)
    image=${2:?usage: $0 load IMAGE}
    want=$(docker image inspect -f '{{.Id}}' "$image")
    have=$(remote image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
    [ "$want" = "$have" ] || docker save "$image" | remote load -q >/dev/null
    ;;
  stop)
    if alive; then
      pid=$(cat "$PIDFILE")
      kill "$pid"
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
    ip link del "$HOST_IF" 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
    ;;
  status)
    if answers; then client_env; exit 0; fi
    echo "no second engine answers at tcp://$ENGINE_ADDR:$PORT" >&2; exit 1
    ;;
  *) echo "usage: $0 start|stop|status|load IMAGE" >&2; exit 2 ;;
esac
