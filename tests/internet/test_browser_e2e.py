"""The browser end to end (issue 62, item 4): the real SDK and its CLI in a real sandbox ask the host to
drive a real Chromium (Debian's, through Playwright) in a sandbox of its own; pages come from the test
web host in a network namespace (tests/internet/web_host.py), opened as an owner opens a home network.

Four hostile pages try to reach past the host: a script that sets `location.href` to a loopback
canary, one that `fetch()`es the host's own side of the namespace link and loopback, one that opens a
WebSocket to loopback, one that registers a service worker. Each page reports back to the web host
when its attempt failed (the events awaited); no canary gets a connection, the service worker's
script is never even asked for, and the owner's log names each refusal. A form's POST is logged with
its size; a screenshot reaches the model as an image; an agent whose browser is off is not offered it.
"""
from __future__ import annotations

import base64
import io
import re

import pytest

from conftest import require
from nanoclaw.reading.browser_sandbox import Where, where
from nanoclaw.reading.tables import WebFetch
from tests.fakes.model_api import Reply
from tests.internet.browser_processes import containers, relays_under
from tests.internet.test_fetch import Canary
from tests.internet.web_host import NamespaceHost, available
from tests.tg_flow import message, person, sandbox_service, texts

OWNER = person(111, "Olivia")
BEA = person(222, "Bea")
HTML = {"Content-Type": "text/html; charset=utf-8"}


def pages(canary: int, own_side: str) -> dict:
    loopback = f"127.0.0.1:{canary}"
    return {
        # the text exists only once the script ran: a page web_read could not read
        "/app": (200, HTML, "<html><head><title>Tea app</title></head><body><div id=root></div><script>"
                            "document.getElementById('root').innerHTML = '<h1>Oolong</h1><p>Steep oolong at 90 degrees"
                            "</p><a href=\"/form\">Order</a>'</script></body></html>"),
        "/href": (200, HTML, f"<html><body><p>Moving on</p><script>location.href='http://{loopback}/steal'"
                             "</script></body></html>"),
        "/fetch": (200, HTML, f"<html><body><p>Fetching</p><script>Promise.allSettled(["
                              f"fetch('http://{own_side}/x'), fetch('http://{loopback}/y')]).then(r => "
                              "fetch('/fetch-done?' + r.map(x => x.status).join(',')))</script></body></html>"),
        "/ws": (200, HTML, f"<html><body><p>Socket</p><script>const w = new WebSocket('ws://{loopback}/');"
                           "w.onclose = () => fetch('/ws-closed'); w.onopen = () => fetch('/ws-open')</script></body></html>"),
        "/sw": (200, HTML, "<html><body><p>Worker</p><script>navigator.serviceWorker ? navigator.serviceWorker"
                           ".register('/sw.js').then(() => fetch('/sw-registered'), e => fetch('/sw-refused?' + e.name))"
                           " : fetch('/sw-refused?absent')</script></body></html>"),
        "/sw.js": (200, {"Content-Type": "application/javascript"}, "self.addEventListener('fetch', e => {})"),
        "/form": (200, HTML, "<html><body><form method=post action=/order><input name=tea placeholder=Tea>"
                             "<button>Order</button></form></body></html>"),
        "/order": (200, HTML, "<html><body><p>Ordered, thank you</p></body></html>"),
    }


def brain(req):
    prompt, done = req.current_prompt(), req.turn_tool_results()
    match = re.search(r"browse (http[^\s<]+)", prompt)
    if not (match and "please" in prompt):
        return Reply.say("ok")
    if not done:
        return Reply.call("mcp__nanoclaw__browser_open", url=match.group(1))
    if len(done) == 1 and "order" in prompt and not done[0].is_error:
        return Reply.call("mcp__nanoclaw__browser_type", ref=1, text="green tea", submit=True)
    if len(done) == 1 and "picture" in prompt and not done[0].is_error:
        return Reply.call("mcp__nanoclaw__browser_screenshot")
    return Reply.say("Browsed: " + done[-1].text[:3000])


def ask(svc, chat: int, sender: dict, text: str, marker: str) -> str:
    before = len(texts(svc.tg, chat))
    svc.post(message(chat, sender, text))
    return svc.wait(lambda: next((t for t in texts(svc.tg, chat)[before:] if t.startswith("Browsed:") and marker in t),
                                 None), timeout=150, what=f"the answer to {marker}")


def images_in_tool_results(call) -> list[dict]:
    return [block for m in call.messages if m.get("role") == "user" and isinstance(m.get("content"), list)
            for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"
            for block in (b.get("content") if isinstance(b.get("content"), list) else [])
            if isinstance(block, dict) and block.get("type") == "image"]


def browsers_running(sandbox: Where) -> int:
    """This test's browser sandboxes: bubblewrap ones under this process, or the browser containers."""
    return containers(sandbox.engine) if sandbox.kind == "docker" else relays_under()


@pytest.mark.parametrize("runtime", ["bwrap", "docker"])
def test_the_browser_runs_pages_scripts_and_nothing_they_try_reaches_past_the_host(make_settings, sqlite_url, runtime):
    """Docker: the agents' engine runs the browser too, from the browser's image (CI builds it:
    `image build --browser`)."""
    require(*available())
    settings = make_settings(NANOCLAW_RUNTIME=runtime)
    sandbox = where(settings)
    require(isinstance(sandbox, Where) and sandbox.kind == runtime, f"no {runtime} browser here: {sandbox}")
    canary = Canary("127.0.0.1")
    with NamespaceHost() as web, sandbox_service(make_settings, sqlite_url, brain, runtime=runtime,
                                                 NANOCLAW_WEB_ALLOW_NETWORKS=f"{web.address}/32",
                                                 NANOCLAW_WEB_ALLOW_PORTS=str(canary.port)) as svc:
        own_side = Canary(web.host_side, 80)
        web.set_routes(pages(canary.port, web.host_side))
        host = f"http://{web.address}"
        seen = lambda path: svc.wait(lambda: next((r for r in web.requests() if r[1].startswith(path)), None),  # noqa: E731
                                     timeout=30, what=f"the page's own report {path}")
        try:
            for args in (("agent", "create", "Andy"), ("agent", "create", "Bea"),
                         ("user", "add", "telegram:111", "--role", "owner"),
                         ("user", "add", "telegram:222", "--role", "member", "--agent", "bea"),
                         ("wire", "telegram", "111", "andy"), ("wire", "telegram", "222", "bea"),
                         ("internet", "set", "andy", "--browser", "on")):
                svc.cli(*args)

            said = ask(svc, 111, OWNER, f"please browse {host}/app", "Oolong")
            assert "90 degrees" in said and "[1] a: Order" in said
            assert re.search(r"<<<UNTRUSTED DATA [0-9a-f]{8}: browser page from " + re.escape(f"{host}/app"), said)
            assert browsers_running(sandbox) == 1  # in a sandbox of its own, not the agent's

            ask(svc, 111, OWNER, f"please browse {host}/href", "Browsed")
            ask(svc, 111, OWNER, f"please browse {host}/fetch", "Fetching")
            assert seen("/fetch-done")[1] == "/fetch-done?rejected,rejected"
            ask(svc, 111, OWNER, f"please browse {host}/ws", "Socket")
            seen("/ws-closed")
            ask(svc, 111, OWNER, f"please browse {host}/sw", "Worker")
            seen("/sw-refused")
            refused = svc.wait(lambda: (lambda rows: rows if len(rows) >= 4 else None)(
                [f.url for f in WebFetch.select() if f.tool == "browser" and f.outcome.startswith("refused")]),
                timeout=30, what="the refusals in the owner's log")
            assert {f"http://127.0.0.1:{canary.port}/steal", f"http://{web.host_side}/x",
                    f"http://127.0.0.1:{canary.port}/y", f"ws://127.0.0.1:{canary.port}/"} <= set(refused)
            assert canary.connections == 0 and own_side.connections == 0
            paths = [r[1] for r in web.requests()]
            assert "/sw.js" not in paths and "/sw-registered" not in paths and "/ws-open" not in paths

            said = ask(svc, 111, OWNER, f"please browse {host}/form and order", "Ordered")
            assert ("POST", "/order", len("tea=green+tea")) in web.requests()
            assert any(f.outcome == f"POST, {len('tea=green+tea')} bytes" and f.url == f"{host}/order"
                       for f in WebFetch.select())

            ask(svc, 111, OWNER, f"please browse {host}/app and take a picture", "screenshot")
            shot = next(c for c in reversed(svc.model.model_calls()) if images_in_tool_results(c))
            [image] = images_in_tool_results(shot)
            data = base64.b64decode(image["source"]["data"])
            from PIL import Image
            assert image["source"]["media_type"] == "image/jpeg" and Image.open(io.BytesIO(data)).size == (1280, 800)

            svc.post(message(222, BEA, f"please browse {host}/app"))
            bea = svc.wait(lambda: next((c for c in svc.model.model_calls() if 'sender="Bea"' in c.current_prompt()),
                                        None), what="Bea's turn")
            assert not [t for t in bea.tool_names() if "browser" in t]
            andy = next(c for c in svc.model.model_calls() if "please browse" in c.current_prompt())
            assert "mcp__nanoclaw__browser_open" in andy.tool_names()
            log = svc.cli("internet", "log", "andy").output
            assert "browser" in log and "Oolong" not in log
        finally:
            own_side.close()
    canary.close()
    assert browsers_running(sandbox) == 0  # gone with the service
