#!/usr/bin/env bash
# Install Synapse, the reference Matrix homeserver, in a venv of its own for the Matrix tests
# (tests/platforms/synapse.py starts one per test session on 127.0.0.1). Idempotent.
set -euo pipefail
VENV=${NANOCLAW_TEST_SYNAPSE:-/opt/nanoclaw-synapse}
VERSION=1.163.2
cmd=${1:-install}

case "$cmd" in
  install)
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import synapse, sys; sys.exit(synapse.__version__ != '$VERSION')" 2>/dev/null; then
      exit 0
    fi
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "matrix-synapse==$VERSION" >&2
    ;;
  *) echo "usage: $0 install" >&2; exit 2 ;;
esac
