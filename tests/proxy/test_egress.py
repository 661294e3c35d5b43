"""Egress allowlist and credential routes of the proxy (nanoclaw/proxy/egress.py, credentials.py,
policy_files.py): the pure rules, the reloadable files, and real tunnels and requests over the
real unix sockets to local TCP and HTTPS servers."""
from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from fakes.accept_loop import AcceptLoop
from fakes.https_server import HttpsServer, make_cert
from nanoclaw.proposal_rules import RuleError, check_host_entry
from nanoclaw.proxy import ProxyServer
from nanoclaw.proxy.egress import EgressPolicy, decide, is_public, matching_entry
from nanoclaw.proxy.policy_files import (EGRESS_FILE, ROUTES_FILE, PolicyStore, add_egress, group_file, put_route,
                                         write_json)

TOKEN = "ghp-route-token-0123456789abcdef"
TLS_HELLO = b"\x16\x03\x01\x00\x05hello"  # looks like the start of a TLS record, enough for the gate


def policy(*entries: str) -> EgressPolicy:
    return EgressPolicy(tuple(check_host_entry(e) for e in entries))


# -- pure rules ----------------------------------------------------------------------------------

def test_entries_are_checked_and_normalised():
    assert str(check_host_entry("API.GitHub.com.")) == "api.github.com"
    assert str(check_host_entry("*.example.com:8443")) == "*.example.com:8443"
    assert str(check_host_entry("[::1]:8443")) == "[::1]:8443"
    for bad in ("https://x.com", "x.com/path", "user@x.com", "*.com", "x.com:0", "x.com:99999", "a b", "",
                "*.10.0.0.1", "-bad.com"):
        with pytest.raises(RuleError):
            check_host_entry(bad)


def test_allowlist_matching():
    p = policy("api.github.com", "*.pypi.org", "files.example.com:8443")
    assert matching_entry(p, "api.github.com", 443)
    assert not matching_entry(p, "api.github.com", 80)            # a bare host means HTTPS only
    assert not matching_entry(p, "github.com", 443)
    assert not matching_entry(p, "evil-api.github.com", 443)
    assert matching_entry(p, "files.pythonhosted.pypi.org", 443)
    assert not matching_entry(p, "pypi.org", 443)                 # *.x is the subdomains, not x
    assert not matching_entry(p, "pypi.org.evil.com", 443)
    assert matching_entry(p, "files.example.com", 8443)
    assert not matching_entry(p, "files.example.com", 443)
    # the exact entry wins over a wildcard for the same name
    p2 = policy("*.example.com", "db.example.com:443")
    assert str(matching_entry(p2, "db.example.com", 443)) == "db.example.com:443"


def test_ipv6_forms_of_public_addresses_stay_public():
    for addr in ("64:ff9b::8c52:7005", "2002:8c52:7005::1", "2606:4700:4700::1111"):
        assert is_public(addr), addr


def test_private_and_loopback_need_an_exact_host_and_port():
    public = ["140.82.112.5"]
    assert decide(policy("api.github.com"), "g", "api.github.com", 443, public).allowed
    for addr in ("127.0.0.1", "10.1.2.3", "192.168.1.1", "169.254.169.254", "::1", "fd00::1",
                 "::ffff:127.0.0.1", "0.0.0.0", "100.64.0.1",
                 # the same private addresses in the IPv6 forms that carry them (issue 15, hole 7)
                 "64:ff9b::7f00:1", "64:ff9b:1::a9fe:a9fe", "2002:a01:203::1", "2002:7f00:1::",
                 "2001:0:4136:e378:8000:63bf:f5ff:fffe", "::127.0.0.1", "::a01:203"):
        assert not is_public(addr), addr
        verdict = decide(policy("svc.example.com", "*.internal.example.com"), "g", "svc.example.com", 443, [addr])
        assert not verdict.allowed and "non-public" in verdict.reason
        verdict = decide(policy("*.internal.example.com"), "g", "db.internal.example.com", 443, [addr])
        assert not verdict.allowed
    # a name that resolves to a public AND a private address is refused too (rebinding-style)
    assert not decide(policy("mixed.example.com"), "g", "mixed.example.com", 443, ["8.8.8.8", "10.0.0.1"]).allowed
    assert decide(policy("127.0.0.1:8443"), "g", "127.0.0.1", 8443, ["127.0.0.1"]).allowed
    assert decide(policy("svc.example.com:443"), "g", "svc.example.com", 443, ["10.0.0.7"]).allowed
    refused = decide(policy(), "andy", "127.0.0.1", 8443, ["127.0.0.1"])
    assert not refused.allowed and "propose_egress" in refused.reason and "'andy'" in refused.reason


# -- the policy files ----------------------------------------------------------------------------

def test_store_reloads_changes_and_keeps_the_old_policy_when_a_file_is_invalid(tmp_path):
    changes = []
    store = PolicyStore(tmp_path, on_change=lambda *a: changes.append(a))
    assert store.get("andy").egress.entries == ()                 # no file: nothing allowed
    write_json(group_file(tmp_path, "andy", EGRESS_FILE), {"allow": ["a.example.com"]})
    assert store.get("andy").egress.as_list() == ["a.example.com"]
    before = store.get("andy")
    for broken in ("{not json", json.dumps({"allow": ["https://x/"]}), json.dumps({"allow": "x"})):
        group_file(tmp_path, "andy", EGRESS_FILE).write_text(broken)
        assert store.get("andy") is before                         # the old snapshot stays live
    assert [c[4] is not None for c in changes] == [False, True, True, True]  # one reload, three errors
    assert all(TOKEN not in repr(c) for c in changes)
    write_json(group_file(tmp_path, "andy", EGRESS_FILE), {"allow": ["a.example.com", "b.example.com"]})
    assert store.get("andy").egress.as_list() == ["a.example.com", "b.example.com"]
    assert store.get("bob").egress.entries == ()                   # groups never share a policy


def test_reload_all_reads_a_file_whose_stamp_did_not_change(tmp_path):
    """SIGHUP: an in-place edit that kept size and mtime is still picked up."""
    path = group_file(tmp_path, "andy", EGRESS_FILE)
    write_json(path, {"allow": ["aaaa.example.com"]})
    store = PolicyStore(tmp_path)
    assert store.get("andy").egress.as_list() == ["aaaa.example.com"]
    st = path.stat()
    with open(path, "r+") as fh:  # same inode, same size
        text = fh.read()
        fh.seek(0)
        fh.write(text.replace("aaaa", "bbbb"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert store.get("andy").egress.as_list() == ["aaaa.example.com"]
    store.reload_all()
    assert store.get("andy").egress.as_list() == ["bbbb.example.com"]


def test_writers_refuse_to_build_on_a_broken_file(tmp_path):
    assert add_egress(tmp_path, "andy", "API.example.com") == ([], ["api.example.com"])
    assert add_egress(tmp_path, "andy", "api.example.com") == (["api.example.com"], ["api.example.com"])
    group_file(tmp_path, "andy", EGRESS_FILE).write_text("{broken")
    with pytest.raises(RuleError):
        add_egress(tmp_path, "andy", "b.example.com")
    before, after = put_route(tmp_path, "andy", {"match": "/gh/", "upstream": "https://api.github.com",
                                                 "secret": "GITHUB_TOKEN"})
    assert before == [] and after == ["/gh/ -> https://api.github.com with Authorization: Bearer $GITHUB_TOKEN"]
    with pytest.raises(RuleError):  # the host's own secrets are not for routes
        put_route(tmp_path, "andy", {"match": "/x/", "upstream": "https://x.com", "secret": "ANTHROPIC_API_KEY"})
    with pytest.raises(RuleError):  # never shadow the model route
        put_route(tmp_path, "andy", {"match": "/v1/", "upstream": "https://x.com", "secret": "X_TOKEN"})
    with pytest.raises(RuleError):
        put_route(tmp_path, "andy", {"match": "/x/", "upstream": "http://x.com", "secret": "X_TOKEN"})
    assert (group_file(tmp_path, "andy", ROUTES_FILE).stat().st_mode & 0o777) == 0o600


# -- through the proxy ---------------------------------------------------------------------------

class Echo:
    """A TCP server on 127.0.0.1 that echoes every byte (stands in for a TLS server behind a tunnel)."""

    def __init__(self):
        sock = socket.create_server(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.loop = AcceptLoop(sock, lambda conn: threading.Thread(target=self._echo, args=(conn,), daemon=True).start(),
                               name="echo")

    @staticmethod
    def _echo(conn):
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def close(self):
        self.loop.close()


@pytest.fixture
def echo():
    server = Echo()
    yield server
    server.close()


@pytest.fixture
def proxy(make_settings, monkeypatch):
    started = []

    def start(folders=("andy",), **kw):
        p = ProxyServer(make_settings(ANTHROPIC_UPSTREAM_URL="http://127.0.0.1:9"), lambda: list(folders),
                        rescan_interval=0.1, **kw).start()
        started.append(p)
        return p
    yield start
    for p in started:
        p.stop()


def connect(sock_path, target: str, timeout: float = 5):
    """CONNECT through the door; returns (status line, open socket or None)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(sock_path))
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    status = head.split(b"\r\n", 1)[0].decode()
    if " 200 " in status + " ":
        return status, s
    rest = b""
    while chunk := s.recv(4096):
        rest += chunk
    s.close()
    return status + "\n" + rest.decode(), None


def allow(p, folder, *entries):
    write_json(group_file(p.policies.root, folder, EGRESS_FILE), {"allow": list(entries)})


def test_connect_is_refused_readably_then_allowed_without_a_restart(proxy, echo):
    p = proxy()
    target = f"127.0.0.1:{echo.port}"
    status, s = connect(p.socket_path("andy"), target)
    assert s is None and status.startswith("HTTP/1.1 403 egress to " + target + " is not on the allowlist")
    assert "propose_egress" in status
    allow(p, "andy", "127.0.0.1")  # the host, but not that port: a loopback address needs host:port
    status, s = connect(p.socket_path("andy"), target)
    assert s is None and "403" in status
    allow(p, "andy", target)
    status, s = connect(p.socket_path("andy"), target)
    assert s is not None, status
    s.sendall(TLS_HELLO)
    assert s.recv(100) == TLS_HELLO
    s.close()


def test_a_tunnel_that_does_not_speak_tls_is_closed(proxy, echo):
    p = proxy()
    allow(p, "andy", f"127.0.0.1:{echo.port}")
    status, s = connect(p.socket_path("andy"), f"127.0.0.1:{echo.port}")
    assert s is not None
    s.sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert s.recv(100) == b""  # closed, nothing relayed
    s.close()


def test_wildcards_never_open_private_addresses(proxy, echo):
    names = {"svc.corp.example": ["127.0.0.1"]}
    p = proxy(resolver=lambda host, port: names[host])
    allow(p, "andy", "*.corp.example:%d" % echo.port)
    status, s = connect(p.socket_path("andy"), f"svc.corp.example:{echo.port}")
    assert s is None and "non-public address (127.0.0.1)" in status
    allow(p, "andy", f"svc.corp.example:{echo.port}")
    status, s = connect(p.socket_path("andy"), f"svc.corp.example:{echo.port}")
    assert s is not None, status
    s.close()


def test_a_tunnel_in_flight_survives_a_reload_that_removes_its_host(proxy, echo):
    p = proxy()
    target = f"127.0.0.1:{echo.port}"
    allow(p, "andy", target)
    status, s = connect(p.socket_path("andy"), target)
    assert s is not None
    s.sendall(TLS_HELLO)
    assert s.recv(100) == TLS_HELLO
    allow(p, "andy")                                   # revoked while the tunnel is open
    assert p.rescan_now(wait_s=10)                     # (a rescan applies it)
    group_file(p.policies.root, "andy", EGRESS_FILE).write_text("{broken")  # and then broken
    assert p.reload(wait_s=10)
    s.sendall(b"more bytes")
    assert s.recv(100) == b"more bytes"                 # the open tunnel carries on
    s.close()
    status, s2 = connect(p.socket_path("andy"), target)
    assert s2 is None and "403" in status              # new tunnels follow the last valid file


def test_atomic_swap_under_concurrent_requests(proxy, echo):
    """While the file is rewritten (valid, invalid, valid...) 8 clients open tunnels in a loop: every
    one succeeds, because each request sees either the old or the new policy, never a gap."""
    p = proxy()
    target = f"127.0.0.1:{echo.port}"
    allow(p, "andy", target)
    assert target in p.policies.get("andy").egress.as_list()  # live before the storm begins
    stop = threading.Event()
    failures, done = [], []

    def writer():
        i = 0
        while not stop.is_set():
            i += 1
            if i % 3 == 0:
                group_file(p.policies.root, "andy", EGRESS_FILE).write_text("{half a fi")  # invalid: ignored
            else:
                allow(p, "andy", target, f"h{i}.example.com")
            time.sleep(0.002)

    def client():
        for _ in range(25):
            status, s = connect(p.socket_path("andy"), target)
            if s is None:
                failures.append(status)
                continue
            s.sendall(TLS_HELLO)
            if s.recv(100) != TLS_HELLO:
                failures.append("echo broken")
            s.close()
            done.append(1)

    w = threading.Thread(target=writer)
    w.start()
    clients = [threading.Thread(target=client) for _ in range(8)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    stop.set()
    w.join()
    assert failures == [] and len(done) == 200


# -- credential routes ---------------------------------------------------------------------------

@pytest.fixture
def https(tmp_path, monkeypatch):
    cert = make_cert(tmp_path / "tls")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert.cert))  # the proxy trusts the test server
    with HttpsServer(cert) as server:
        yield server


def http_call(sock_path, method, url, headers=None, body=None):
    import http.client

    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(10)
            self.sock.connect(str(sock_path))
    conn = Conn("localhost")
    try:
        conn.request(method, url, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_path_route_injects_the_token_and_drops_the_callers(proxy, https, monkeypatch):
    monkeypatch.setenv("GH_TEST_TOKEN", TOKEN)
    p = proxy()
    status, body = http_call(p.socket_path("andy"), "GET", "/gh/user")
    assert status == 404  # no route yet
    put_route(p.policies.root, "andy", {"match": "/gh/", "upstream": https.url + "/api", "secret": "GH_TEST_TOKEN"})
    status, body = http_call(p.socket_path("andy"), "GET", "/gh/user/repos?page=2",
                             headers={"Authorization": "Bearer agent-made-up", "X-Trace": "1"})
    assert status == 200, body
    seen = https.requests[-1]
    assert seen["path"] == "/api/user/repos?page=2"
    assert seen["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert seen["headers"]["x-trace"] == "1"
    assert TOKEN.encode() not in body
    # the other group has no such route
    p2 = proxy(folders=("bob",))
    assert http_call(p2.socket_path("bob"), "GET", "/gh/user")[0] == 404


def test_host_route_serves_plain_http_proxy_requests_over_https(proxy, https, monkeypatch):
    monkeypatch.setenv("API_TEST_KEY", TOKEN)
    p = proxy()
    status, body = http_call(p.socket_path("andy"), "GET", "http://api.test.example/v2/items")
    assert status == 403 and b"plain HTTP to api.test.example is refused" in body
    put_route(p.policies.root, "andy", {"match": "api.test.example", "upstream": https.url, "secret": "API_TEST_KEY",
                                        "header": "X-Api-Key", "format": "{token}"})
    status, body = http_call(p.socket_path("andy"), "GET", "http://api.test.example/v2/items?q=1",
                             headers={"X-Api-Key": "agent-guess"})
    assert status == 200, body
    assert https.requests[-1]["path"] == "/v2/items?q=1"
    assert https.requests[-1]["headers"]["x-api-key"] == TOKEN


def test_a_route_without_its_host_variable_says_so(proxy, https, monkeypatch):
    monkeypatch.delenv("MISSING_TEST_TOKEN", raising=False)
    p = proxy(secrets=lambda name: os.environ.get(name))
    put_route(p.policies.root, "andy", {"match": "/m/", "upstream": https.url, "secret": "MISSING_TEST_TOKEN"})
    status, body = http_call(p.socket_path("andy"), "GET", "/m/x")
    assert status == 503 and b"MISSING_TEST_TOKEN is not set" in body
    assert https.requests == []


def test_a_proxied_call_to_the_bridge_itself_is_routed_locally(proxy, https, monkeypatch):
    """A client that sends even its call to 127.0.0.1 through http_proxy still reaches the routes."""
    monkeypatch.setenv("GH_TEST_TOKEN", TOKEN)
    p = proxy()
    put_route(p.policies.root, "andy", {"match": "/gh/", "upstream": https.url, "secret": "GH_TEST_TOKEN"})
    status, _ = http_call(p.socket_path("andy"), "GET", "http://127.0.0.1:41000/gh/user")
    assert status == 200 and https.requests[-1]["path"] == "/user"
