"""The host's fetcher (nanoclaw/internet/fetch.py) against real HTTP servers on loopback addresses.

The test host is 127.0.0.2, opened the way an owner opens a home network
(NANOCLAW_WEB_ALLOW_NETWORKS=127.0.0.2/32) with its port named; canaries on 127.0.0.1 and
127.0.0.3 count every connection they get. The resolver is the test's own: it answers the test
host's names, and for a rebinding name the test host first and loopback after.
"""
from __future__ import annotations

import ipaddress
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanoclaw.internet.addresses import Refused, Rules
from nanoclaw.internet.fetch import Fetcher, Limits

ARTICLE = b"<html><head><title>Tea</title></head><body><nav>Home</nav><article>Brew it at 80 C.</article></body></html>"


class Canary:
    """A listener that only counts connections."""

    def __init__(self, address: str, port: int = 0):
        self.sock = socket.create_server((address, port))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread, so the address is free at once
        except OSError:
            pass
        self.sock.close()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


class Pages(BaseHTTPRequestHandler):
    routes: dict = {}
    seen: list = []

    def do_GET(self):  # noqa: N802
        Pages.seen.append((self.path, dict(self.headers)))
        status, headers, body = self.routes.get(self.path.split("?")[0], (404, {}, b"no"))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if callable(body):
            self.end_headers()
            body(self.wfile)
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def host():
    server = ThreadingHTTPServer(("127.0.0.2", 0), Pages)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    canaries = {"127.0.0.1": Canary("127.0.0.1"), "127.0.0.3": Canary("127.0.0.3")}
    yield server.server_address[1], canaries
    server.shutdown()


def fetcher(port, canaries, limits=Limits(), secrets=()):
    names = {"pages.test": ["127.0.0.2"], "mixed.test": ["127.0.0.2", "127.0.0.1"]}
    asked: dict[str, int] = {}

    def resolve(name, _port):
        asked[name] = asked.get(name, 0) + 1
        if name == "rebind.test":  # the test host first, loopback on every later question
            return ["127.0.0.2"] if asked[name] == 1 else ["127.0.0.1"]
        return names.get(name, [])
    ports = frozenset({port, *(c.port for c in canaries.values())})
    f = Fetcher(Rules(allow_networks=(ipaddress.ip_network("127.0.0.2/32"),), allow_ports=ports), resolver=resolve,
                limits=limits, secrets=lambda: secrets)
    f.asked = asked
    return f


def test_a_page_is_read_with_its_type_final_url_and_no_cookies(host):
    port, canaries = host
    Pages.routes = {"/a": (302, {"Location": "/article"}, b""),
                    "/article": (200, {"Content-Type": "text/html; charset=utf-8", "Set-Cookie": "s=1"}, ARTICLE)}
    page = fetcher(port, canaries).get(f"http://pages.test:{port}/a")
    assert page.body == ARTICLE and page.content_type == "text/html" and page.charset == "utf-8"
    assert page.url == f"http://pages.test:{port}/article" and page.stopped == ""
    sent = Pages.seen[-1][1]
    assert sent["Host"] == f"pages.test:{port}" and "Cookie" not in sent and "NanoClaw" in sent["User-Agent"]


@pytest.mark.parametrize("where", ["http://127.0.0.1:{c1}/", "http://2130706433:{c1}/", "http://[::ffff:127.0.0.1]:{c1}/",
                                   "http://127.0.0.3:{c3}/", "http://mixed.test:{c1}/", "http://0x7f.1:{c1}/"])
def test_local_addresses_are_refused_before_any_connection(host, where):
    port, canaries = host
    before = {a: c.connections for a, c in canaries.items()}
    with pytest.raises(Refused, match="not a public address"):
        fetcher(port, canaries).get(where.format(c1=canaries["127.0.0.1"].port, c3=canaries["127.0.0.3"].port))
    assert {a: c.connections for a, c in canaries.items()} == before


@pytest.mark.parametrize("to", ["http://127.0.0.1:{c1}/", "http://169.254.169.254/latest/meta-data/", "http://127.0.0.3:{c3}/x",
                                "http://[::1]:{c1}/"])
def test_a_redirect_to_a_local_or_metadata_address_is_refused(host, to):
    port, canaries = host
    Pages.routes = {"/r": (302, {"Location": to.format(c1=canaries["127.0.0.1"].port, c3=canaries["127.0.0.3"].port)}, b"")}
    before = {a: c.connections for a, c in canaries.items()}
    with pytest.raises(Refused, match="not a public address|metadata"):
        fetcher(port, canaries).get(f"http://pages.test:{port}/r")
    assert {a: c.connections for a, c in canaries.items()} == before


def test_a_rebinding_name_is_asked_once_and_connected_to_the_address_checked(host):
    port, canaries = host
    Pages.routes = {"/article": (200, {"Content-Type": "text/html"}, ARTICLE)}
    before = canaries["127.0.0.1"].connections
    f = fetcher(port, canaries)
    assert f.get(f"http://rebind.test:{port}/article").body == ARTICLE
    assert f.asked["rebind.test"] == 1 and canaries["127.0.0.1"].connections == before


def test_a_url_carrying_a_secret_or_a_token_is_refused_before_any_connection(host):
    port, canaries = host
    Pages.seen.clear()
    f = fetcher(port, canaries, secrets=("hunter2-the-bot-token",))
    for url in (f"http://pages.test:{port}/?token=abc", f"http://pages.test:{port}/hunter2-the-bot-token"):
        with pytest.raises(Refused):
            f.get(url)
    assert Pages.seen == []


def test_too_many_redirects_and_unreadable_types_are_refused_saying_why(host):
    port, canaries = host
    Pages.routes = {"/loop": (302, {"Location": "/loop"}, b""), "/img": (200, {"Content-Type": "image/png"}, b"\x89PNG")}
    with pytest.raises(Refused, match="more than 5 redirects"):
        fetcher(port, canaries).get(f"http://pages.test:{port}/loop")
    with pytest.raises(Refused, match="image/png"):
        fetcher(port, canaries).get(f"http://pages.test:{port}/img")


def test_a_huge_page_stops_at_the_size_limit_and_a_slow_one_at_the_time_limit(host):
    port, canaries = host

    def endless(out):
        try:
            for _ in range(50 * 16):  # 50 MB in 64 KiB pieces
                out.write(b"x" * 65536)
        except OSError:
            pass

    def slow(out):
        try:
            for _ in range(100):
                out.write(b"tick ")
                out.flush()
                time.sleep(0.1)
        except OSError:
            pass
    Pages.routes = {"/big": (200, {"Content-Type": "text/plain"}, endless),
                    "/slow": (200, {"Content-Type": "text/plain"}, slow)}
    big = fetcher(port, canaries).get(f"http://pages.test:{port}/big")
    assert len(big.body) == 5_000_000 and big.stopped == "size"
    started = time.monotonic()
    slow_page = fetcher(port, canaries, limits=Limits(total_s=1.0)).get(f"http://pages.test:{port}/slow")
    assert slow_page.stopped == "time" and slow_page.body.startswith(b"tick") and time.monotonic() - started < 3


hops = st.lists(st.sampled_from(["ok", "loopback", "canary3", "metadata", "mapped", "decimal", "rebind"]),
                min_size=1, max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chain=hops)
def test_no_redirect_chain_reaches_a_refused_address(host, chain):
    port, canaries = host
    c1, c3 = canaries["127.0.0.1"].port, canaries["127.0.0.3"].port
    spell = {"ok": f"http://pages.test:{port}", "loopback": f"http://127.0.0.1:{c1}", "canary3": f"http://127.0.0.3:{c3}",
             "metadata": "http://169.254.169.254", "mapped": f"http://[::ffff:7f00:1]:{c1}",
             "decimal": f"http://2130706433:{c1}", "rebind": f"http://rebind.test:{port}"}
    Pages.routes = {f"/h{i}": (302, {"Location": f"{spell[step]}/h{i + 1}"}, b"") for i, step in enumerate(chain)}
    Pages.routes[f"/h{len(chain)}"] = (200, {"Content-Type": "text/plain"}, b"end")
    before = {a: c.connections for a, c in canaries.items()}
    # refused: a local or metadata hop, or the rebinding name asked again (its second answer is loopback)
    refused = any(step not in ("ok", "rebind") for step in chain) or chain.count("rebind") > 1
    try:
        page = fetcher(port, canaries).get(f"http://pages.test:{port}/h0")
        assert not refused and page.body == b"end"
    except Refused:
        assert refused
    assert {a: c.connections for a, c in canaries.items()} == before
