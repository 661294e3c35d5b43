"""The proxy door: one unix socket per agent group, the host's key injected, SSE streamed.

A small local upstream stands in for the Messages API: it records what it
receives and streams SSE events with timed gaps. Clients speak real HTTP/1.1
over the real unix sockets.
"""
from __future__ import annotations

import http.client
import json
import logging
import os
import shutil
import signal
import socket
import stat
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import require
from nanoclaw.config import PROJECT_ROOT as T_ROOT
from nanoclaw.proxy import ProxyServer
from nanoclaw.proxy.headers import credential_headers, downstream_response_headers, upstream_request_headers
from nanoclaw.proxy.server import plan

HOST_KEY = "sk-ant-host-secret-key-0123456789"
OAUTH_TOKEN = "sk-ant-oat01-host-oauth-token-abcdef"
PLACEHOLDER = "sandbox-placeholder"
EVENT_GAP_S = 0.5


# -- a fake upstream -----------------------------------------------------------------------

class Upstream:
    """Records every request; /v1/messages streams two SSE events EVENT_GAP_S apart, count_tokens echoes
    the body, a GET answers its path, and a request with `x-test-overloaded` gets a 529."""

    def __init__(self):
        self.requests: list[dict] = []
        self.connections = 0
        self.event2_sent_at: list[float] = []
        self.gap = EVENT_GAP_S
        up = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def setup(self):
                super().setup()
                # Without this, Nagle + delayed ACK add 40 ms to every chunked reply.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                up.connections += 1

            def _record(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                up.requests.append({"method": self.command, "path": self.path,
                                    "headers": {k.lower(): v for k, v in self.headers.items()},
                                    "body": body})
                return body

            def do_GET(self):
                self._record()
                self._json(200, {"ok": True, "path": self.path})

            def do_POST(self):
                body = self._record()
                if self.headers.get("x-test-overloaded"):
                    return self._json(529, {"type": "error", "error": {"type": "overloaded_error",
                                                                       "message": "Overloaded"}})
                if self.path.startswith("/v1/messages/count_tokens"):
                    return self._json(200, {"echo": body.decode()})
                if self.path.startswith("/v1/messages"):
                    return self._sse()
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})

            def _json(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _chunk(self, data: bytes):
                self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
                self.wfile.flush()

            def _sse(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self._chunk(b'event: message_start\ndata: {"n": 1}\n\n')
                if up.gap:
                    time.sleep(up.gap)
                up.event2_sent_at.append(time.monotonic())
                self._chunk(b'event: message_stop\ndata: {"n": 2}\n\n')
                self.wfile.write(b"0\r\n\r\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream():
    up = Upstream()
    yield up
    up.close()


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = str(path)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def call(path, method="POST", url="/v1/messages?beta=true", body=b"{}", headers=None):
    conn = UnixHTTPConnection(path)
    try:
        conn.request(method, url, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


@pytest.fixture
def start_proxy(make_settings, upstream):
    started = []

    def start(folders=("alpha",), rescan_interval=0.2, **env):
        env.setdefault("ANTHROPIC_UPSTREAM_URL", upstream.url)
        env.setdefault("ANTHROPIC_API_KEY", HOST_KEY)
        current = list(folders)
        proxy = ProxyServer(make_settings(**env), lambda: current, rescan_interval=rescan_interval).start()
        proxy.folders = current  # the test edits this list to add/remove agent groups
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()


CALLER_AUTH = {"x-api-key": PLACEHOLDER, "Authorization": f"Bearer {PLACEHOLDER}",
               "anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219"}


# -- credentials ---------------------------------------------------------------------------

def test_caller_auth_is_replaced_by_the_host_key(start_proxy, upstream):
    proxy = start_proxy()
    status, _, body = call(proxy.socket_path("alpha"), headers=CALLER_AUTH)
    assert status == 200 and b"message_stop" in body
    seen = upstream.requests[-1]
    assert seen["path"] == "/v1/messages?beta=true"
    assert seen["headers"]["x-api-key"] == HOST_KEY
    assert "authorization" not in seen["headers"]
    assert seen["headers"]["anthropic-version"] == "2023-06-01"
    assert seen["headers"]["anthropic-beta"] == "claude-code-20250219"
    assert PLACEHOLDER not in json.dumps(seen["headers"])


def test_oauth_token_goes_as_bearer_with_the_oauth_beta(start_proxy, upstream):
    proxy = start_proxy(ANTHROPIC_API_KEY="", CLAUDE_CODE_OAUTH_TOKEN=OAUTH_TOKEN)
    status, _, _ = call(proxy.socket_path("alpha"), headers=CALLER_AUTH)
    assert status == 200
    seen = upstream.requests[-1]["headers"]
    assert seen["authorization"] == f"Bearer {OAUTH_TOKEN}"
    assert "x-api-key" not in seen
    assert seen["anthropic-beta"].split(",") == ["claude-code-20250219", "oauth-2025-04-20"]


def test_header_rules():
    assert credential_headers("k", "t") == {"x-api-key": "k"}
    assert credential_headers(None, "t") == {"authorization": "Bearer t"}
    assert credential_headers(None, None) == {}
    out = upstream_request_headers(
        [("X-Api-Key", "p"), ("Authorization", "Bearer p"), ("Connection", "keep-alive, X-Private"),
         ("X-Private", "1"), ("Proxy-Authorization", "Basic x"), ("Host", "127.0.0.1:9"),
         ("Content-Length", "2"), ("Transfer-Encoding", "chunked"), ("Accept", "text/event-stream")],
        {"x-api-key": "host"})
    assert out == {"accept": "text/event-stream", "x-api-key": "host"}
    assert downstream_response_headers([("Transfer-Encoding", "chunked"), ("Connection", "close"),
                                        ("Content-Type", "text/event-stream"), ("request-id", "r1")]) == \
        [("Content-Type", "text/event-stream"), ("request-id", "r1")]
    assert plan({"a", "b"}, {"b", "c"}) == ({"a"}, {"c"})


def dead_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    return url


def wait_for(predicate, timeout=3.0):
    """The door logs after the last byte went out, so the caller can be a moment ahead."""
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def test_the_proxy_never_logs_a_secret(start_proxy, upstream, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    keyed = start_proxy()
    call(keyed.socket_path("alpha"), headers=CALLER_AUTH)
    call(keyed.socket_path("alpha"), url="/nope", headers=CALLER_AUTH)
    down = start_proxy(folders=("beta",), ANTHROPIC_UPSTREAM_URL=dead_url())
    call(down.socket_path("beta"), headers=CALLER_AUTH)
    keyed.stop()
    oauth = start_proxy(folders=("gamma",), ANTHROPIC_API_KEY="", CLAUDE_CODE_OAUTH_TOKEN=OAUTH_TOKEN)
    call(oauth.socket_path("gamma"), headers=CALLER_AUTH)
    expected = ("alpha POST /v1/messages -> 200", "alpha POST /nope -> 404",
                "beta POST /v1/messages -> 502", "gamma POST /v1/messages -> 200")
    assert wait_for(lambda: all(line in caplog.text for line in expected)), caplog.text
    out, err = capfd.readouterr()
    logged = caplog.text + out + err
    for secret in (HOST_KEY, OAUTH_TOKEN, PLACEHOLDER):
        assert secret not in logged


# -- streaming and connections -------------------------------------------------------------

def test_sse_events_reach_the_caller_as_they_are_sent(start_proxy, upstream):
    proxy = start_proxy()
    conn = UnixHTTPConnection(proxy.socket_path("alpha"))
    conn.request("POST", "/v1/messages?beta=true", body=b"{}", headers=CALLER_AUTH)
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    arrivals = {}
    buffered = b""
    while len(arrivals) < 2:
        piece = resp.read1(65536)
        assert piece, "stream ended early"
        buffered += piece
        for n in (1, 2):
            if f'"n": {n}'.encode() in buffered and n not in arrivals:
                arrivals[n] = time.monotonic()
    assert resp.read() == b""
    conn.close()
    sent2 = upstream.event2_sent_at[-1]
    assert arrivals[1] < sent2, "event 1 was held back until event 2"
    assert sent2 - arrivals[1] > EVENT_GAP_S * 0.6
    assert arrivals[2] - sent2 < 0.2


def test_keep_alive_connection_serves_20_requests(start_proxy, upstream):
    upstream.gap = 0
    proxy = start_proxy()
    conn = UnixHTTPConnection(proxy.socket_path("alpha"))
    first_sock = None
    for i in range(20):
        if i % 3 == 0:
            conn.request("POST", "/v1/messages?beta=true", body=b"{}", headers=CALLER_AUTH)
            expect = b"message_stop"
        elif i % 3 == 1:
            conn.request("POST", "/v1/messages/count_tokens", body=f'{{"note": "body-{i}"}}'.encode(),
                         headers=CALLER_AUTH)  # the door reads each body (model_body): JSON, as the CLI sends
            expect = f"body-{i}".encode()
        else:
            conn.request("GET", f"/v1/models?i={i}", headers=CALLER_AUTH)
            expect = f"/v1/models?i={i}".encode()
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200 and expect in body, (i, body)
        assert not resp.will_close
        first_sock = first_sock or conn.sock
        assert conn.sock is first_sock, f"request {i} needed a new connection"
    conn.close()
    assert len(upstream.requests) == 20
    assert upstream.connections <= 2, "the proxy opened a new upstream connection per request"


def test_caller_that_leaves_midstream_does_not_break_the_door(start_proxy, upstream):
    proxy = start_proxy()
    conn = UnixHTTPConnection(proxy.socket_path("alpha"))
    conn.request("POST", "/v1/messages?beta=true", body=b"{}", headers=CALLER_AUTH)
    resp = conn.getresponse()
    assert b'"n": 1' in resp.read1(65536)
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    upstream.gap = 0
    status, _, body = call(proxy.socket_path("alpha"), headers=CALLER_AUTH)
    assert status == 200 and b"message_stop" in body


# -- errors and other routes ---------------------------------------------------------------

def test_upstream_down_is_a_502_in_anthropic_error_shape(start_proxy, upstream):
    proxy = start_proxy(ANTHROPIC_UPSTREAM_URL=dead_url())
    status, headers, body = call(proxy.socket_path("alpha"), headers=CALLER_AUTH)
    assert status == 502 and headers["Content-Type"] == "application/json"
    err = json.loads(body)
    assert err["type"] == "error" and err["error"]["type"] == "api_error"
    assert "unreachable" in err["error"]["message"]


def test_upstream_error_status_and_body_pass_through(start_proxy, upstream):
    proxy = start_proxy()
    status, _, body = call(proxy.socket_path("alpha"), headers={**CALLER_AUTH, "x-test-overloaded": "1"})
    assert status == 529 and json.loads(body)["error"]["type"] == "overloaded_error"


def test_paths_outside_v1_are_404_and_connect_is_refused(start_proxy, upstream):
    proxy = start_proxy()
    status, _, body = call(proxy.socket_path("alpha"), method="GET", url="/etc/passwd", body=None)
    assert status == 404 and json.loads(body)["error"]["type"] == "not_found_error"
    for sneaky in ("/v1/../admin", "/v1/%2e%2e/admin"):
        status, _, body = call(proxy.socket_path("alpha"), method="GET", url=sneaky, body=None)
        assert status == 400, sneaky
    assert upstream.requests == []

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(proxy.socket_path("alpha")))
    s.sendall(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
    reply = b""
    while chunk := s.recv(4096):
        reply += chunk
    s.close()
    assert reply.startswith(b"HTTP/1.1 403")
    assert b"egress to pypi.org is not on the allowlist of agent group 'alpha'" in reply


# -- sockets and identity ------------------------------------------------------------------

def test_each_request_is_attributed_to_its_socket_group(start_proxy, upstream, caplog):
    caplog.set_level(logging.INFO, logger="nanoclaw.proxy")
    upstream.gap = 0
    proxy = start_proxy(folders=("alpha", "beta"))
    call(proxy.socket_path("alpha"), method="GET", url="/v1/models/from-alpha", headers=CALLER_AUTH)
    call(proxy.socket_path("beta"), method="GET", url="/v1/models/from-beta", headers=CALLER_AUTH)
    # A header cannot claim another group: identity is the socket.
    call(proxy.socket_path("beta"), method="GET", url="/v1/models/from-beta",
         headers={**CALLER_AUTH, "x-nanoclaw-group": "alpha"})
    def seen():
        return [(r.proxy_folder, r.proxy_path) for r in caplog.records if hasattr(r, "proxy_folder")]
    wait_for(lambda: len(seen()) == 3)
    assert seen() == [("alpha", "/v1/models/from-alpha"), ("beta", "/v1/models/from-beta"),
                      ("beta", "/v1/models/from-beta")]


def test_an_agent_created_or_deleted_elsewhere_opens_and_closes_its_door_at_once(sqlite_app, upstream):
    """The proxy program looks for new agent groups only every RESCAN_S (a safety net): the writers
    announce (db.py: changes told), so the door follows an agent made by an approval or the CLI at once."""
    from nanoclaw.approvals.common import create_agent
    from nanoclaw.db import database
    from nanoclaw.lifecycle.image_prune import forget_agent
    from nanoclaw.models import AgentGroup
    settings = sqlite_app.config["NANOCLAW"]

    def folders():
        with database.connection_context():
            return [a.folder for a in AgentGroup.select(AgentGroup.folder)]
    proxy = ProxyServer(settings, folders, rescan_interval=3600).start()
    try:
        with sqlite_app.app_context():
            agent = create_agent(settings, "Dora", "owner")
            assert proxy.wait_ready(agent.folder, timeout=5), "the new agent's door did not open"
            sock = proxy.socket_path(agent.folder)
            agent.delete_instance(recursive=True)
            forget_agent(settings, agent.folder, [])
        deadline = time.monotonic() + 5
        while sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not sock.exists(), "the deleted agent's door stayed open"
    finally:
        proxy.stop()


def test_sockets_follow_the_list_of_groups(start_proxy, upstream):
    proxy = start_proxy(folders=("alpha", "beta"), rescan_interval=2.0)
    beta = proxy.socket_path("beta")
    assert beta.exists()
    t0 = time.monotonic()
    proxy.folders.append("gamma")
    assert proxy.wait_ready("gamma", timeout=5)
    assert time.monotonic() - t0 < 5
    assert call(proxy.socket_path("gamma"), url="/v1/messages/count_tokens")[0] == 200
    proxy.folders.remove("beta")
    deadline = time.monotonic() + 5
    while beta.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not beta.exists() and not beta.parent.exists()
    with pytest.raises(OSError):
        call(beta)
    proxy.folders.append("../evil")  # refused by the folder rules, never a path
    proxy.sync()
    assert proxy.served == {"alpha", "gamma"}
    assert not (proxy.proxy_dir.parent / "evil").exists()


def test_socket_permissions_and_ensure_socket(start_proxy, upstream):
    proxy = start_proxy(folders=())
    path = proxy.ensure_socket("delta")
    assert proxy.wait_ready("delta", timeout=1)
    proxy.sync()  # not listed, but ensured: stays open
    assert "delta" in proxy.served
    assert stat.S_IMODE(path.stat().st_mode) == 0o666
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700


def test_stale_socket_is_replaced_and_a_live_one_is_left_alone(start_proxy, make_settings, upstream):
    settings = make_settings(ANTHROPIC_UPSTREAM_URL=upstream.url, ANTHROPIC_API_KEY=HOST_KEY)
    path = settings.proxy_dir / "alpha" / "proxy.sock"
    path.parent.mkdir(parents=True)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nothing listens: what a killed proxy leaves
    first = start_proxy()
    assert first.served == {"alpha"} and call(path, url="/v1/messages/count_tokens")[0] == 200

    second = ProxyServer(settings, lambda: ["alpha"], rescan_interval=0.2).start()
    try:
        assert second.served == set()  # the first still answers
        first.stop()
        assert second.wait_ready("alpha", timeout=3) and second.served == {"alpha"}
        assert call(path, url="/v1/messages/count_tokens")[0] == 200
    finally:
        second.stop()


def test_a_uid_1000_sandbox_reaches_the_proxy_through_the_mounted_dir(start_proxy, upstream):
    """The contract the runtimes rely on: mount <proxy>/<folder> read-only, connect as uid 1000."""
    require(shutil.which("bwrap") is not None, "bubblewrap is not installed")
    proxy = start_proxy()
    sock_dir = proxy.socket_path("alpha").parent
    client = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX);s.connect('/run/nanoclaw-proxy/proxy.sock')\n"
        "s.sendall(b'POST /v1/messages?beta=true HTTP/1.1\\r\\nHost: x\\r\\nx-api-key: p\\r\\n"
        "Content-Length: 2\\r\\nConnection: close\\r\\n\\r\\n{}')\n"
        "d=b''\n"
        "while c:=s.recv(65536): d+=c\n"
        "sys.stdout.write(str(__import__('os').getuid())+' '+d.decode())\n")
    out = subprocess.run(
        ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
         # the venv may live under /tmp (a CI clone): bind it back over the fresh tmpfs
         "--ro-bind", sys.prefix, sys.prefix,
         "--tmpfs", "/run", "--ro-bind", str(sock_dir), "/run/nanoclaw-proxy", "--unshare-all",
         "--unshare-user", "--uid", "1000", "--gid", "1000", "--die-with-parent",
         sys.executable, "-c", client],
        capture_output=True, text=True, timeout=30)
    require(out.returncode == 0 or "message_stop" in out.stdout,
            f"bwrap could not run here: {out.stderr.strip()[:200]}")
    assert out.stdout.startswith("1000 HTTP/1.1 200"), out.stdout + out.stderr
    assert "message_stop" in out.stdout
    assert upstream.requests[-1]["headers"]["x-api-key"] == HOST_KEY


# -- cost ----------------------------------------------------------------------------------

def test_added_latency_is_small(start_proxy, upstream):
    """Median extra time of a small request through the door vs straight to the upstream."""
    upstream.gap = 0
    proxy = start_proxy()
    port = int(upstream.url.rsplit(":", 1)[1])
    direct_conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    proxied_conn = UnixHTTPConnection(proxy.socket_path("alpha"))

    def timed(conn):
        t = time.perf_counter()
        conn.request("POST", "/v1/messages?beta=true", body=b"{}", headers=CALLER_AUTH)
        assert b"message_stop" in conn.getresponse().read()
        return time.perf_counter() - t

    for _ in range(5):
        timed(direct_conn), timed(proxied_conn)
    direct = [timed(direct_conn) for _ in range(100)]
    proxied = [timed(proxied_conn) for _ in range(100)]
    added_ms = (statistics.median(proxied) - statistics.median(direct)) * 1000
    print(f"proxy added latency: median {added_ms:.2f} ms "
          f"(direct {statistics.median(direct) * 1000:.2f} ms)", file=sys.stderr)
    assert added_ms < 10


# -- the supervisord program ---------------------------------------------------------------

SERVE = """
import logging, sys
from pathlib import Path
from nanoclaw.config import Settings
from nanoclaw.proxy import serve_forever
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
folders = Path(sys.argv[1])
serve_forever(Settings.load(), lambda: folders.read_text().split(), rescan_interval=60)
"""


def test_serve_forever_rescans_on_sighup_and_cleans_up_on_sigterm(make_settings, upstream, tmp_path):
    settings = make_settings(ANTHROPIC_UPSTREAM_URL=upstream.url, ANTHROPIC_API_KEY=HOST_KEY)
    folders = tmp_path / "folders"
    folders.write_text("alpha\n")
    env = {**os.environ, "NANOCLAW_DATA_DIR": str(settings.data_dir), "TZ": "UTC",
           "ANTHROPIC_UPSTREAM_URL": upstream.url, "ANTHROPIC_API_KEY": HOST_KEY,
           "NANOCLAW_ENV_FILE": str(tmp_path / "no.env"), "PYTHONPATH": str(T_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(folders)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    alpha = settings.proxy_dir / "alpha" / "proxy.sock"
    beta = settings.proxy_dir / "beta" / "proxy.sock"
    try:
        assert wait_for(alpha.exists, timeout=10), "no socket after start"
        assert call(alpha, url="/v1/messages/count_tokens", headers=CALLER_AUTH)[0] == 200
        folders.write_text("alpha\nbeta\n")
        proc.send_signal(signal.SIGHUP)  # the next tick is a minute away: within 3 s only SIGHUP makes beta's door
        assert wait_for(beta.exists, timeout=3), "SIGHUP did not rescan"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert not alpha.exists() and not beta.exists()
    assert "alpha POST /v1/messages/count_tokens -> 200" in out and HOST_KEY not in out


def test_a_request_that_would_have_the_provider_fetch_is_refused_until_the_owner_allows_it(start_proxy, upstream):
    """Issue 60, item 4: a URL-sourced document (the agent's URL, a secret in its query) never reaches the
    provider: a 400 naming the feature, nothing forwarded. Allowed for this one agent, it goes; another
    agent is still refused."""
    from nanoclaw.proxy.model_features import change
    from nanoclaw.proxy.policy_files import policy_root
    proxy = start_proxy(folders=("alpha", "beta"))
    doc = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "url", "url": "https://evil.example/x?d=SECRET"}}]}]}).encode()
    status, _, answer = call(proxy.socket_path("alpha"), body=doc, headers=CALLER_AUTH)
    assert status == 400 and b"url-source is refused" in answer and upstream.requests == []
    change(policy_root(proxy.settings), "alpha", "url-source", True, "cli")
    status, _, answer = call(proxy.socket_path("alpha"), body=doc, headers=CALLER_AUTH)
    assert status == 200 and [r["body"] for r in upstream.requests] == [doc]
    status, _, _ = call(proxy.socket_path("beta"), body=doc, headers=CALLER_AUTH)
    assert status == 400 and len(upstream.requests) == 1
