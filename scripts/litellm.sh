#!/usr/bin/env bash
# Install LiteLLM's proxy, a model gateway people put in front of local and hosted models, in a venv of
# its own for the model-upstream tests (tests/upstreams/test_litellm_e2e.py starts one on 127.0.0.1):
# its pins never touch the app's. Idempotent.
set -euo pipefail
VENV=${NANOCLAW_TEST_LITELLM:-/opt/nanoclaw-litellm}
VERSION=1.108.7
cmd=${1:-install}

case "$cmd" in
  install)
    if [ -x "$VENV/bin/litellm" ] && "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('litellm') != '$VERSION')" 2>/dev/null; then
      exit 0
    fi
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "litellm[proxy]==$VERSION" >&2
    ;;
  *) echo "usage: $0 install" >&2; exit 2 ;;
esac
