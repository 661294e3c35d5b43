"""A real Synapse on loopback for the Matrix tests, and people who talk to it over plain HTTP.

The homeserver runs from its own venv (scripts/synapse.sh installs it; NANOCLAW_TEST_SYNAPSE names
the venv, default /opt/nanoclaw-synapse), on SQLite in a temporary folder, bound to 127.0.0.1 on a
free port, federation off, rate limits raised, registration only by the shared secret (the admin
API's HMAC). `Person` is a person's client: the requests Element would make.
"""
from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import requests

SERVER = "localhost"
SECRET = "nanoclaw-test-registration-secret"
VENV = Path(os.environ.get("NANOCLAW_TEST_SYNAPSE", "/opt/nanoclaw-synapse"))
OVERRIDES = """
# --- the test harness's settings (tests/platforms/synapse.py) ---
listeners:
  - port: {port}
    type: http
    tls: false
    bind_addresses: ['127.0.0.1']
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
registration_shared_secret: "{secret}"
enable_registration: false
trusted_key_servers: []
suppress_key_server_warning: true
federation_domain_whitelist: []
presence:
  enabled: false
url_preview_enabled: false
encryption_enabled_by_default_for_room_type: "off"
enable_authenticated_media: true
max_upload_size: 50M
rc_message: {{per_second: 1000, burst_count: 1000}}
rc_login:
  address: {{per_second: 1000, burst_count: 1000}}
  account: {{per_second: 1000, burst_count: 1000}}
  failed_attempts: {{per_second: 1000, burst_count: 1000}}
rc_registration: {{per_second: 1000, burst_count: 1000}}
rc_joins:
  local: {{per_second: 1000, burst_count: 1000}}
  remote: {{per_second: 1000, burst_count: 1000}}
rc_invites:
  per_room: {{per_second: 1000, burst_count: 1000}}
  per_user: {{per_second: 1000, burst_count: 1000}}
  per_issuer: {{per_second: 1000, burst_count: 1000}}
rc_admin_redaction: {{per_second: 1000, burst_count: 1000}}
"""
_txn = itertools.count(1)


def available() -> tuple[bool, str]:
    return (VENV / "bin" / "python").exists(), f"no Synapse venv at {VENV} (scripts/synapse.sh install)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Synapse:
    def __init__(self, server_name: str = SERVER):
        self.server_name = server_name
        self.dir = Path(tempfile.mkdtemp(prefix="nanoclaw-synapse-"))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Synapse":
        python = str(VENV / "bin" / "python")
        config = self.dir / "homeserver.yaml"
        subprocess.run([python, "-m", "synapse.app.homeserver", "--server-name", self.server_name, "--config-path", str(config),
                        "--generate-config", "--report-stats=no", "--data-directory", str(self.dir)],
                       check=True, capture_output=True, cwd=self.dir)
        with config.open("a") as fh:
            fh.write(OVERRIDES.format(port=self.port, secret=SECRET))
        self.proc = subprocess.Popen([python, "-m", "synapse.app.homeserver", "-c", str(config)], cwd=self.dir,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Synapse exited ({self.proc.returncode}); see {self.dir}/homeserver.log")
            try:
                if requests.get(f"{self.url}/_matrix/client/versions", timeout=2).ok:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError("Synapse did not answer within 90 s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def register(self, name: str, password: str = "correct horse battery", admin: bool = False) -> "Person":
        """A new account through the shared-secret admin API (what `register_new_matrix_user` does)."""
        nonce = requests.get(f"{self.url}/_synapse/admin/v1/register", timeout=10).json()["nonce"]
        mac = hmac.new(SECRET.encode(), b"\0".join([nonce.encode(), name.encode(), password.encode(),
                                                    b"admin" if admin else b"notadmin"]), hashlib.sha1).hexdigest()
        resp = requests.post(f"{self.url}/_synapse/admin/v1/register", timeout=10, json={
            "nonce": nonce, "username": name, "password": password, "admin": admin, "mac": mac})
        resp.raise_for_status()
        body = resp.json()
        return Person(self, body["user_id"], body["access_token"], password)


class Person:
    """A person's client, over plain HTTP."""

    def __init__(self, server: Synapse, user_id: str, token: str, password: str):
        self.server, self.user_id, self.token, self.password = server, user_id, token, password
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: dict | None = None, **kwargs) -> dict:
        resp = self.http.request(method, f"{self.server.url}{path}", json=body, timeout=30, **kwargs)
        assert resp.ok, (method, path, resp.status_code, resp.text[:300])
        return resp.json()

    def set_name(self, name: str) -> None:
        self.call("PUT", f"/_matrix/client/v3/profile/{quote(self.user_id)}/displayname", {"displayname": name})

    def create_room(self, *, invite: list[str] = (), direct: bool = False, name: str | None = None,
                    encrypted: bool = False) -> str:
        body = {"invite": list(invite), "is_direct": direct, "preset": "trusted_private_chat" if direct
                else "private_chat"}
        if name:
            body["name"] = name
        if encrypted:
            body["initial_state"] = [{"type": "m.room.encryption", "state_key": "",
                                      "content": {"algorithm": "m.megolm.v1.aes-sha2"}}]
        return self.call("POST", "/_matrix/client/v3/createRoom", body)["room_id"]

    def invite(self, room_id: str, user_id: str) -> None:
        self.call("POST", f"/_matrix/client/v3/rooms/{quote(room_id)}/invite", {"user_id": user_id})

    def join(self, room_id: str) -> None:
        self.call("POST", f"/_matrix/client/v3/rooms/{quote(room_id)}/join", {})

    def send(self, room_id: str, content: dict, event_type: str = "m.room.message") -> str:
        return self.call("PUT", f"/_matrix/client/v3/rooms/{quote(room_id)}/send/{event_type}/t{next(_txn)}-{time.time()}",
                         content)["event_id"]

    def say(self, room_id: str, text: str, *, mention: str | None = None, reply_to: str | None = None,
            thread: str | None = None) -> str:
        content: dict = {"msgtype": "m.text", "body": text}
        if mention is not None:
            content["m.mentions"] = {"user_ids": [mention]}
            content["body"] = f"{mention.split(':')[0].lstrip('@')}: {text}"
        if thread:
            content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread, "is_falling_back": True,
                                       "m.in_reply_to": {"event_id": thread}}
        elif reply_to:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}
        return self.send(room_id, content)

    def react(self, room_id: str, event_id: str, key: str) -> str:
        return self.send(room_id, {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}},
                         "m.reaction")

    def upload(self, data: bytes, name: str, mime: str) -> str:
        return self.call("POST", "/_matrix/media/v3/upload", data=data, params={"filename": name},
                         headers={"Content-Type": mime})["content_uri"]

    def send_file(self, room_id: str, data: bytes, name: str, mime: str, msgtype: str = "m.file",
                  caption: str | None = None, **extra) -> str:
        content = {"msgtype": msgtype, "body": caption or name, "filename": name, "url": self.upload(data, name, mime),
                   "info": {"mimetype": mime, "size": len(data)}, **extra}
        return self.send(room_id, content)

    def download(self, mxc: str) -> bytes:
        server, media = mxc[len("mxc://"):].split("/", 1)
        resp = self.http.get(f"{self.server.url}/_matrix/client/v1/media/download/{server}/{media}", timeout=30)
        assert resp.ok, resp.status_code
        return resp.content

    def timeline(self, room_id: str, limit: int = 100) -> list[dict]:
        """The room's events as this person sees them, oldest first."""
        page = self.call("GET", f"/_matrix/client/v3/rooms/{quote(room_id)}/messages",
                         params={"dir": "b", "limit": str(limit)})
        return list(reversed(page["chunk"]))

    def from_bot(self, room_id: str, bot: str, limit: int = 100) -> list[dict]:
        return [e for e in self.timeline(room_id, limit) if e.get("sender") == bot and e["type"] == "m.room.message"]

    def joined(self, room_id: str) -> list[str]:
        return list(self.call("GET", f"/_matrix/client/v3/rooms/{quote(room_id)}/joined_members")["joined"])
