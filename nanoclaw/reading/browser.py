"""The browser worker: `python -m nanoclaw.reading.browser`, started by the web program on first use.

It holds Playwright's driver and one sandboxed Chromium per agent session (browser_sandbox.py), at
most `--max` at once (others wait). Asked as the reading worker is: one JSON object a line on stdin,
{"id", "op": open|snapshot|click|type|screenshot|close, "session", …, "rules"}, answered by id on
stdout {"id", "ok", "text", "url", "title", "image"?}. What the owner's log keeps (pages opened,
requests that were not GET, requests refused) is told as it happens, a line {"session", "event"}
with no id (a page's script may act long after the answer). Every request of a page passes
the route check here (layer b: the URL checked as web_read checks one, its address pinned for the
proxy, layer a, browser_proxy.py); service workers are blocked and downloads refused. A session's
browser stops after `--idle` seconds unused, its profile wiped with its sandbox; the worker exits
when none is left.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..internet.addresses import Refused, Rules, parse_networks
from ..internet.fetch import Fetcher
from . import browser_proxy, browser_sandbox
from .worker import host_secrets

log = logging.getLogger("nanoclaw.browser")
TEXT_CHARS = 20_000
ELEMENTS = 150
ACTION_S = 10.0
NAVIGATION_S = 1.5  # how long after a click or Enter a navigation may begin
WAIT_FOR_BROWSER_S = 60.0
NOT_ROUTED = ("data:", "blob:", "about:")

# Numbers what a person could press or fill, visible ones only; the page's own scripts run in the same
# world and could lie here, which is why the answer is data in the envelope, never instructions.
SNAPSHOT_JS = """(attr) => {
  const sel = 'a[href],button,input,select,textarea,summary,[role=button],[role=link],[role=checkbox],' +
              '[role=tab],[role=menuitem],[contenteditable=true],[onclick]';
  document.querySelectorAll('[' + attr + ']').forEach(e => e.removeAttribute(attr));
  const out = []; let n = 0;
  for (const e of document.querySelectorAll(sel)) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (e.disabled || (e.type || '') === 'hidden') continue;
    n += 1; e.setAttribute(attr, String(n));
    const label = (e.getAttribute('aria-label') || e.innerText || e.value || e.placeholder || e.name ||
                   e.title || e.alt || '').replace(/\\s+/g, ' ').trim().slice(0, 80);
    out.push({ref: n, tag: e.tagName.toLowerCase(), type: e.type || e.getAttribute('role') || '', label: label,
              href: e.tagName === 'A' ? e.href.slice(0, 200) : ''});
    if (n >= %d) break;
  }
  return {text: (document.body ? document.body.innerText : '').slice(0, %d), elements: out};
}""" % (ELEMENTS, TEXT_CHARS + 1)


class Failed(Exception):
    """An action that could not be done; the text is for the agent."""


@dataclass
class Session:
    key: str
    folder: Path
    launcher: browser_sandbox.Launcher
    pins: browser_proxy.Pins
    server: asyncio.AbstractServer
    browser: object
    context: object
    page: object
    attr: str = field(default_factory=lambda: "data-nc-" + secrets.token_hex(4))
    last: float = field(default_factory=time.monotonic)
    busy: asyncio.Lock = field(default_factory=asyncio.Lock)


class Browsers:
    def __init__(self, playwright, limit: int, idle_s: float, secrets_: list[str], tell,
                 where: browser_sandbox.Where = browser_sandbox.Where("bwrap")):
        self.playwright, self.idle_s, self.secrets, self.tell, self.where = playwright, idle_s, secrets_, tell, where
        self.sessions: dict[str, Session] = {}
        self.slots = asyncio.Semaphore(limit)
        self.starting: dict[str, asyncio.Lock] = {}

    # --- a session's browser --------------------------------------------------------------
    async def session(self, key: str, rules: Rules, start: bool) -> Session:
        lock = self.starting.setdefault(key, asyncio.Lock())
        async with lock:
            if key in self.sessions:
                return self.sessions[key]
            if not start:
                raise Failed("no page is open; open one with browser_open")
            if self.slots.locked():
                log.info("%s waits for a free browser", key)
            try:
                await asyncio.wait_for(self.slots.acquire(), WAIT_FOR_BROWSER_S)
            except asyncio.TimeoutError:
                raise Failed("every browser on this host is in use; try again in a minute") from None
            try:
                self.sessions[key] = await self._start(key, rules)
            except BaseException:
                self.slots.release()
                raise
            return self.sessions[key]

    async def _start(self, key: str, rules: Rules) -> Session:
        folder = Path(tempfile.mkdtemp(prefix="nanoclaw-browser-"))
        folder.chmod(0o700)
        name = "browser-" + secrets.token_hex(6)
        launcher = browser_sandbox.prepare(folder, name, self.where)
        pins = browser_proxy.Pins(rules)
        # Chromium's own background calls (update checks) land here too: logged, not the owner's record
        server = await browser_proxy.serve(str(launcher.socket), pins, lambda what, host, port: log.info(
            "the browser's proxy refused %s:%d for %s (not passed by its routing)", host, port, key))
        launcher.socket.chmod(0o666)  # a container's uid 1000 connects; the folder above is the worker's alone
        try:
            browser = await self.playwright.chromium.launch(executable_path=str(launcher.script), headless=True,
                                                            args=browser_sandbox.ARGS, env={}, timeout=30_000)
            context = await browser.new_context(service_workers="block", accept_downloads=False,
                                                viewport={"width": 1280, "height": 800}, java_script_enabled=True)
            session = Session(key, folder, launcher, pins, server, browser, context, None)
            fetcher = Fetcher(rules, secrets=lambda: self.secrets)
            await context.route("**/*", lambda route: self._route(session, fetcher, route))
            await context.route_web_socket("**/*", lambda ws: self._socket(session, fetcher, ws))
            session.page = await context.new_page()
        except BaseException:
            server.close()
            launcher.release()
            shutil.rmtree(folder, ignore_errors=True)
            raise
        log.info("browser started for %s, browser folder %s", key, folder)
        return session

    async def _check(self, session: Session, fetcher: Fetcher, url: str, method: str, shown: str = "") -> str | None:
        """Layer (b): None when the URL may be fetched (its address pinned for the proxy), else why not."""
        try:
            where, address = await asyncio.get_running_loop().run_in_executor(None, fetcher.check, url)
        except Refused as exc:
            self.tell(session.key, {"what": "refused", "method": method, "url": (shown or url)[:2000], "why": str(exc)})
            return str(exc)
        session.pins.approve(where.host, where.port, address)
        return None

    async def _route(self, session: Session, fetcher: Fetcher, route) -> None:
        request = route.request
        if request.url.startswith(NOT_ROUTED):
            await route.continue_()
            return
        if await self._check(session, fetcher, request.url, request.method):
            await route.abort("blockedbyclient")
            return
        if request.method != "GET" or request.is_navigation_request():
            body = request.post_data_buffer or b""
            self.tell(session.key, {"what": "request", "method": request.method, "url": request.url[:2000],
                                    "bytes": len(body)})
        await route.continue_()

    async def _socket(self, session: Session, fetcher: Fetcher, ws) -> None:
        url = ws.url
        checked = "http" + url[2:] if url.startswith("ws") else url
        if await self._check(session, fetcher, checked, "WEBSOCKET", url):
            await ws.close(code=1008, reason="refused by the host")
            return
        self.tell(session.key, {"what": "request", "method": "WEBSOCKET", "url": url[:2000], "bytes": 0})
        ws.connect_to_server()

    async def close(self, key: str) -> bool:
        session = self.sessions.pop(key, None)
        if session is None:
            return False
        try:
            await asyncio.wait_for(session.browser.close(), 10)
        except Exception:  # noqa: BLE001 - a browser that will not close goes with its sandbox
            pass
        session.server.close()
        session.launcher.release()
        shutil.rmtree(session.folder, ignore_errors=True)
        self.slots.release()
        log.info("browser stopped for %s", key)
        return True

    async def reap(self) -> None:
        """Stop each browser unused for idle_s."""
        while True:
            await asyncio.sleep(max(1.0, min(self.idle_s / 4, 30.0)))
            now = time.monotonic()
            for key, session in list(self.sessions.items()):
                if now - session.last >= self.idle_s and not session.busy.locked():
                    await self.close(key)

    # --- the actions ----------------------------------------------------------------------
    async def snapshot(self, session: Session) -> dict:
        page = session.page
        try:
            got = await page.evaluate(SNAPSHOT_JS, session.attr)
        except Exception as exc:  # noqa: BLE001 - a page mid-navigation, or one that broke its own DOM
            got = {"text": f"(the page's text could not be read: {type(exc).__name__})", "elements": []}
        text = str(got.get("text") or "")
        cut = len(text) > TEXT_CHARS
        lines = [text[:TEXT_CHARS] + ("\n[… the page's text was cut here]" if cut else ""), "", "Elements:"]
        for e in got.get("elements") or []:
            what = e.get("tag", "") + (f" {e['type']}" if e.get("type") else "")
            lines.append(f"[{e.get('ref')}] {what}: {e.get('label') or '(no label)'}"
                         + (f" -> {e['href']}" if e.get("href") else ""))
        if not got.get("elements"):
            lines.append("(none)")
        return {"text": "\n".join(lines), "url": page.url, "title": await self._title(page)}

    @staticmethod
    async def _title(page) -> str:
        try:
            return (await page.title())[:300]
        except Exception:  # noqa: BLE001
            return ""

    async def _settle(self, page, action) -> None:
        """Do `action`; if it starts a navigation (within NAVIGATION_S), wait for the new page's DOM."""
        navigated = asyncio.ensure_future(page.wait_for_event(
            "framenavigated", predicate=lambda frame: frame == page.main_frame, timeout=NAVIGATION_S * 1000))
        try:
            await action
        except BaseException:
            navigated.cancel()
            raise
        try:
            await navigated
            await page.wait_for_load_state("domcontentloaded", timeout=ACTION_S * 1000)
        except Exception:  # noqa: BLE001 - no navigation, or a page still loading: shown as it is
            pass

    def _element(self, session: Session, ref) -> object:
        if not isinstance(ref, int) or isinstance(ref, bool) or ref < 1:
            raise Failed("ref is an element's number from the last browser_snapshot")
        return session.page.locator(f'[{session.attr}="{ref}"]')

    async def act(self, request: dict) -> dict:
        op, key = request.get("op"), str(request.get("session") or "")
        rules = Rules(allow_networks=parse_networks(" ".join(request.get("allow_networks") or ())),
                      allow_ports=frozenset(int(p) for p in request.get("allow_ports") or ()),
                      own_ports=frozenset(int(p) for p in request.get("own_ports") or ()))
        if op == "close":
            return {"ok": True, "text": "The browser was closed." if await self.close(key) else "No browser was open."}
        session = await self.session(key, rules, start=op == "open")
        async with session.busy:
            session.last = time.monotonic()
            page = session.page
            try:
                if op == "open":
                    url = str(request.get("url") or "")
                    why = await self._check(session, Fetcher(rules, secrets=lambda: self.secrets), url, "GET")
                    if why:
                        raise Failed(why)
                    await page.goto(url, wait_until="domcontentloaded", timeout=30_000)
                elif op == "click":
                    await self._settle(page, self._element(session, request.get("ref")).click(timeout=ACTION_S * 1000))
                elif op == "type":
                    element = self._element(session, request.get("ref"))
                    await element.fill(str(request.get("text") or ""), timeout=ACTION_S * 1000)
                    if request.get("submit"):
                        await self._settle(page, element.press("Enter", timeout=ACTION_S * 1000))
                elif op == "screenshot":
                    shot = await page.screenshot(type="jpeg", quality=60, timeout=30_000)
                    return {"ok": True, "url": page.url, "title": await self._title(page),
                            "image": base64.b64encode(shot).decode(), "text": ""}
                elif op != "snapshot":
                    raise Failed(f"unknown browser action {op!r}")
            except Failed:
                raise
            except Exception as exc:  # noqa: BLE001 - Playwright's errors, in one line for the agent
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise Failed(f"the browser could not do that: {first[:300]}") from None
            finally:
                session.last = time.monotonic()
            return {"ok": True, **await self.snapshot(session)}


async def main_async(args) -> None:
    from playwright.async_api import async_playwright
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout

    def tell(key: str, event: dict) -> None:
        out.write(json.dumps({"session": key, "event": event}) + "\n")
        out.flush()

    async with async_playwright() as playwright:
        where = browser_sandbox.Where(args.sandbox, args.engine or "", args.image or "")
        browsers = Browsers(playwright, args.max, args.idle, host_secrets(), tell, where)
        reaper = asyncio.create_task(browsers.reap())
        last = [time.monotonic()]

        async def run(request: dict) -> None:
            try:
                answer = await browsers.act(request)
            except Failed as exc:
                answer = {"ok": False, "reason": str(exc)}
            except Exception as exc:  # noqa: BLE001 - the agent is told; the worker goes on
                log.exception("browser action failed")
                answer = {"ok": False, "reason": f"the browser failed on the host ({type(exc).__name__})"}
            last[0] = time.monotonic()
            out.write(json.dumps({"id": request.get("id"), **answer}) + "\n")
            out.flush()

        tasks: set[asyncio.Task] = set()
        while True:
            try:
                line = await asyncio.wait_for(reader.readline(), max(1.0, min(args.idle / 4, 30.0)))
            except asyncio.TimeoutError:
                if not browsers.sessions and not tasks and time.monotonic() - last[0] >= args.idle:
                    break
                continue
            if not line:
                break
            try:
                request = json.loads(line)
            except ValueError:
                continue
            task = asyncio.create_task(run(request))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        reaper.cancel()
        for key in list(browsers.sessions):
            await browsers.close(key)


async def check(args) -> int:
    """doctor's check: one browser in its sandbox opens a blank page; prints what happened, in one line."""
    from playwright.async_api import async_playwright
    started = time.monotonic()
    where = browser_sandbox.Where(args.sandbox, args.engine or "", args.image or "")
    async with async_playwright() as playwright:
        browsers = Browsers(playwright, 1, 60, [], lambda key, event: None, where)
        try:
            session = await browsers.session("doctor", Rules(), start=True)
            await session.page.goto("data:text/html,<title>blank</title>")
            title = await session.page.title()
        except Exception as exc:  # noqa: BLE001 - told in one line
            print(f"Chromium did not start in its {where.kind} sandbox: {str(exc).strip().splitlines()[0][:200]}")
            return 1
        finally:
            await browsers.close("doctor")
    print(f"Chromium opened a blank page ({title!r}) in its {where.kind} sandbox in {time.monotonic() - started:.1f} s")
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle", type=float, default=300.0, help="stop a browser unused this many seconds")
    ap.add_argument("--max", type=int, default=2, help="browsers running at once (others wait)")
    ap.add_argument("--sandbox", choices=("bwrap", "docker"), default="bwrap", help="what each browser runs in")
    ap.add_argument("--engine", help="docker: the local engine's URL")
    ap.add_argument("--image", help="docker: the browser image (image build --browser)")
    ap.add_argument("--check", action="store_true", help="open one blank page in a sandboxed browser and exit")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
    if args.check:
        sys.exit(asyncio.run(check(args)))
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
