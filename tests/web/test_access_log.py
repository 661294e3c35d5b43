"""No secret in the web program's access log (issue 15, hole 7): gunicorn for real, with the
project's gunicorn.conf.py, asked for a one-time login link and WhatsApp's subscription check."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

from nanoclaw.config import PROJECT_ROOT
from nanoclaw.web.access_log import redact
from tests.test_service import free_port


def test_redaction_keeps_the_shape_and_drops_the_secrets():
    assert redact("/login/link/abc") == "/login/link/…"
    assert redact("/webhooks/whatsapp?hub.mode=subscribe&hub.verify_token=s3cret&hub.challenge=9") == \
        "/webhooks/whatsapp?hub.mode=…&hub.verify_token=…&hub.challenge=…"
    assert redact("https://claw.example/login/link/Tok3n?next=/admin") == "https://claw.example/login/link/…?next=…"
    assert redact("/admin/sessions/0123456789abcdef/stop") == "/admin/sessions/0123456789abcdef/stop"
    assert redact("/chat/research-assistant") == "/chat/research-assistant"
    assert redact("/x/Zm9vYmFyQmF6cXV4MTIzNDU2") == "/x/…"
    assert redact("-") == "-" and redact("/healthz") == "/healthz"


def test_gunicorns_access_log_has_no_login_link_and_no_verify_token(tmp_path):
    port = free_port()
    data = tmp_path / "data"
    env = {**os.environ, "NANOCLAW_DATA_DIR": str(data), "NANOCLAW_PORT": str(port), "TZ": "UTC",
           "NANOCLAW_ENV_FILE": str(tmp_path / "none.env"), "WHATSAPP_VERIFY_TOKEN": "verify-Secret-123",
           "NANOCLAW_RUNTIME": "bwrap"}
    bin_dir = os.path.dirname(sys.executable)
    subprocess.run([f"{bin_dir}/flask", "--app", "app", "nanoclaw", "migrate"], cwd=PROJECT_ROOT, env=env,
                   check=True, capture_output=True, timeout=60)
    subprocess.run([f"{bin_dir}/flask", "--app", "app", "nanoclaw", "user", "add", "telegram:42", "--role", "owner"],
                   cwd=PROJECT_ROOT, env=env, check=True, capture_output=True, timeout=60)
    link = subprocess.run([f"{bin_dir}/flask", "--app", "app", "nanoclaw", "admin", "login-link", "telegram:42"],
                          cwd=PROJECT_ROOT, env=env, check=True, capture_output=True, text=True, timeout=60).stdout
    token = link.strip().rsplit("/", 1)[1]
    log_path = tmp_path / "gunicorn.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([f"{bin_dir}/gunicorn", "-c", "gunicorn.conf.py", "app:app"], cwd=PROJECT_ROOT,
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.2)
        assert urllib.request.urlopen(f"{base}/login/link/{token}", timeout=5).status == 200
        challenge = urllib.request.urlopen(f"{base}/webhooks/whatsapp?hub.mode=subscribe&hub.verify_token="
                                           f"verify-Secret-123&hub.challenge=4242", timeout=5).read()
        assert challenge == b"4242"
        request = urllib.request.Request(base + "/healthz", headers={"Referer": f"{base}/login/link/{token}"})
        urllib.request.urlopen(request, timeout=5).read()
        deadline = time.monotonic() + 10
        while log_path.read_text().count("GET /") < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log_path.read_text()
    assert "GET /login/link/… HTTP/1.1" in text and "hub.verify_token=…" in text, text
    assert token not in text and "verify-Secret-123" not in text and "4242" not in text, text
