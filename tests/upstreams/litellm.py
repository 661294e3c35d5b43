"""A real LiteLLM proxy on 127.0.0.1 for the tests (scripts/litellm.sh installs it in a venv of its own),
started offline: its model cost map from the package, a master key of 32+ characters."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import requests

from tests.service_harness import free_port

VENV = Path(os.environ.get("NANOCLAW_TEST_LITELLM", "/opt/nanoclaw-litellm"))
MASTER_KEY = "sk-nanoclaw-test-litellm-master-key-0123456789"


def available() -> tuple[bool, str]:
    return (VENV / "bin" / "litellm").exists(), f"no LiteLLM venv at {VENV} (scripts/litellm.sh install)"


class LiteLLM:
    def __init__(self, models: dict[str, str]):
        """models: the name agents ask for -> the OpenAI-compatible server's /v1 base it is served from."""
        self.dir = Path(tempfile.mkdtemp(prefix="nanoclaw-litellm-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        lines = ["model_list:"]
        for name, base in models.items():
            lines += [f"  - model_name: {name}", "    litellm_params:", f"      model: hosted_vllm/{name}",
                      f"      api_base: {base}", "      api_key: none"]
        (self.dir / "config.yaml").write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen | None = None

    def start(self) -> "LiteLLM":
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_MASTER_KEY": MASTER_KEY,
               "NO_DOCS": "True", "DISABLE_ADMIN_UI": "True", "LITELLM_TELEMETRY": "False"}
        self.proc = subprocess.Popen([str(VENV / "bin" / "litellm"), "--config", str(self.dir / "config.yaml"),
                                      "--host", "127.0.0.1", "--port", str(self.port)], env=env, cwd=self.dir,
                                     stdout=open(self.dir / "litellm.log", "w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"LiteLLM exited ({self.proc.returncode}); see {self.dir}/litellm.log")
            try:
                if requests.get(f"{self.url}/health/liveliness", timeout=2).ok:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"LiteLLM did not answer within 120 s; see {self.dir}/litellm.log")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
