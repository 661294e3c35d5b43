"""NANOCLAW_LOG_FORMAT (issue 18): text by default, one JSON object per line on request, in every
program (each starts through create_app). A real program is run: the proxy's CLI entry refusing a
bad argument logs nothing, so the check runs a short script through the app factory."""
from __future__ import annotations

import json
import subprocess
import sys

from nanoclaw.config import PROJECT_ROOT

SCRIPT = ("import logging; from nanoclaw.app import create_app; create_app(); "
          "logging.getLogger('nanoclaw.router').warning('routed %s', 'telegram:42', extra={'channel': 'telegram'})")


def run(tmp_path, **env) -> str:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "NANOCLAW_DATA_DIR": str(tmp_path / "data"),
                               "NANOCLAW_ENV_FILE": str(tmp_path / "none.env"), **env})
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_json_lines_on_request(tmp_path):
    lines = [json.loads(line) for line in run(tmp_path, NANOCLAW_LOG_FORMAT="json").splitlines() if line.strip()]
    mine = [e for e in lines if e["logger"] == "nanoclaw.router"]
    assert mine == [{"time": mine[0]["time"], "level": "WARNING", "logger": "nanoclaw.router",
                     "message": "routed telegram:42", "channel": "telegram"}]
    assert mine[0]["time"].endswith("+00:00")


def test_text_by_default_and_a_bad_format_is_one_line(tmp_path):
    assert "WARNING nanoclaw.router: routed telegram:42" in run(tmp_path)
    done = subprocess.run([sys.executable, "-m", "nanoclaw.supervise"], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "NANOCLAW_LOG_FORMAT": "yaml",
                                                      "NANOCLAW_DATA_DIR": str(tmp_path / "data"),
                                                      "NANOCLAW_ENV_FILE": str(tmp_path / "none.env")})
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "NANOCLAW_LOG_FORMAT" in done.stderr
